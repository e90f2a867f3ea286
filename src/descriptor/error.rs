//! Errors of descriptor loading and lookup. Each names the descriptor, type, field or
//! global involved.

use crate::limits::Limit;
use crate::memory::ReadError;

/// Why a descriptor could not be loaded, or a lookup in it failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DescriptorError {
    /// The runtime's file on disk could not give its descriptor.
    #[error("the descriptor in {path}: {detail}")]
    OnDisk {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// Target memory holding part of a descriptor could not be read.
    #[error("reading the {what} of descriptor {descriptor}: {source}")]
    Read {
        /// Name of the descriptor (file or module).
        descriptor: String,
        /// The part being read.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: ReadError,
    },

    /// The 8 bytes at the descriptor address are not "DNCCDAC\0" in either byte order.
    #[error("no contract descriptor at {addr:#x}: magic bytes are {found:02x?}")]
    BadMagic {
        /// Address of the descriptor.
        addr: u64,
        /// The bytes found.
        found: [u8; 8],
    },

    /// The flags word is not one a runtime writes.
    #[error("contract descriptor at {addr:#x} has invalid flags {flags:#x} (bit 0 must be set)")]
    BadFlags {
        /// Address of the descriptor.
        addr: u64,
        /// The flags found.
        flags: u32,
    },

    /// A size or count read from the target is beyond its cap.
    #[error("descriptor {descriptor}: {what} is {value}, over {limit}, which is {cap}")]
    TooLarge {
        /// Name of the descriptor (file or module).
        descriptor: String,
        /// The part that is too large.
        what: &'static str,
        /// The limit passed.
        limit: Limit,
        /// Its size.
        value: u64,
        /// The limit's value.
        cap: u64,
    },

    /// The descriptor text is not valid (lenient) JSON.
    #[error("descriptor {descriptor}: invalid JSON: {detail}")]
    Json {
        /// Name of the descriptor (file or module).
        descriptor: String,
        /// What is wrong.
        detail: String,
    },

    /// The JSON is well-formed but does not follow the descriptor format.
    #[error("descriptor {descriptor}: {detail}")]
    Invalid {
        /// Name of the descriptor (file or module).
        descriptor: String,
        /// What is wrong.
        detail: String,
    },

    /// An indirect global or sub-descriptor names a pointer-data slot that does not exist.
    #[error("descriptor {descriptor}: {name} uses pointer-data index {index}, but there are only {count} slots")]
    PointerDataIndex {
        /// Name of the descriptor (file or module).
        descriptor: String,
        /// The global.
        name: String,
        /// The index it gives.
        index: u64,
        /// Number of pointer-data entries.
        count: usize,
    },

    /// The same name is defined by two descriptors of one runtime.
    #[error("{kind} {name} is defined by both descriptor {first} and descriptor {second}")]
    Duplicate {
        /// Kind of item (type, global, contract).
        kind: &'static str,
        /// Its name.
        name: String,
        /// Descriptor that defined it first.
        first: String,
        /// Descriptor that defined it again.
        second: String,
    },

    /// A baseline other than "empty": none has ever been published.
    #[error("descriptor {descriptor} names baseline {baseline:?}; only \"empty\" is supported")]
    UnsupportedBaseline {
        /// Name of the descriptor (file or module).
        descriptor: String,
        /// The baseline named.
        baseline: String,
    },

    /// A physical format version newer than this reader knows, where cdac cannot read it
    /// anyway (an overlay or a descriptor file given by the user).
    #[error("descriptor {descriptor} has format version {version}; cdac reads formats 0 to 2")]
    UnsupportedVersion {
        /// Name of the descriptor (file or module).
        descriptor: String,
        /// The version found.
        version: String,
    },

    /// Descriptors of one runtime disagree on pointer size or byte order.
    #[error("descriptor {descriptor} has a different pointer size or byte order than its parent")]
    LayoutMismatch {
        /// Name of the descriptor.
        descriptor: String,
    },

    /// The lookup named a type the descriptor does not have.
    #[error("the data descriptor has no type {name}")]
    MissingType {
        /// The type.
        name: String,
    },

    /// The lookup named a field the type does not have.
    #[error("type {type_name} of the data descriptor has no field {field}")]
    MissingField {
        /// The type.
        type_name: String,
        /// The field.
        field: String,
    },

    /// A type used for its size has none in the descriptor.
    #[error("type {type_name} of the data descriptor has no size")]
    IndeterminateSize {
        /// The type.
        type_name: String,
    },

    /// The lookup named a global the descriptor does not have.
    #[error("the data descriptor has no global {name}")]
    MissingGlobal {
        /// The global.
        name: String,
    },

    /// A numeric global was asked for and the global is a string (or the reverse).
    #[error("global {name} is not {expected}")]
    GlobalKind {
        /// The global.
        name: String,
        /// The kind expected (value or pointer).
        expected: &'static str,
    },

    /// No descriptor could be found for the runtime.
    #[error("{0}")]
    NotFound(String),

    /// A descriptor file could not be read.
    #[error("cannot read descriptor file {path}: {detail}")]
    File {
        /// Path of the file.
        path: String,
        /// What is wrong.
        detail: String,
    },
}
