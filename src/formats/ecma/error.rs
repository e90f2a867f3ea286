//! Errors of the ECMA-335 metadata reader. Every error names where it happened: the
//! stream, the heap offset, or the table, row and column.

use super::tables::{CodedIndex, TableId};
use crate::formats::cursor::Truncation;

/// A heap of the metadata, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heap {
    /// `#Strings`: identifiers, NUL-terminated UTF-8.
    Strings,
    /// `#Blob`: length-prefixed binary data (signatures, constants).
    Blob,
    /// `#GUID`: 16-byte GUIDs.
    Guid,
    /// `#US`: user strings, length-prefixed UTF-16.
    UserString,
}

impl std::fmt::Display for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Heap::Strings => "#Strings",
            Heap::Blob => "#Blob",
            Heap::Guid => "#GUID",
            Heap::UserString => "#US",
        })
    }
}

/// Something wrong in the metadata (or in the PE image holding it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// The input ends before a structure it holds (offsets within the metadata, or within
    /// the table stream for its header and row counts).
    #[error(transparent)]
    Truncated(#[from] Truncation),
    /// The metadata root does not start with the `BSJB` signature.
    #[error("metadata signature is {found:#010x}, not 0x424a5342 (\"BSJB\")")]
    BadSignature {
        /// The value found.
        found: u32,
    },
    /// The root's version string is longer than allowed.
    #[error("metadata version string length {length} is over the limit of {max}")]
    VersionTooLong {
        /// Length declared.
        length: u32,
        /// The limit.
        max: u32,
    },
    /// A stream header's name is not terminated.
    #[error("stream header {index} has no NUL-terminated name within 32 bytes")]
    BadStreamName {
        /// Position of the stream header.
        index: usize,
    },
    /// A stream header points outside the metadata.
    #[error("stream {name:?} [{offset:#x}, +{size:#x}) is outside the {len:#x}-byte metadata")]
    StreamOutOfBounds {
        /// The stream's name.
        name: String,
        /// Its declared offset.
        offset: u32,
        /// Its declared size.
        size: u32,
        /// Size of the metadata, in bytes.
        len: usize,
    },
    /// A required stream (named here) is absent.
    #[error("metadata has no {0} stream")]
    MissingStream(&'static str),
    /// An index points past the end of its heap.
    #[error("{heap} index {index:#x} is outside the {len:#x}-byte heap")]
    HeapIndexOutOfBounds {
        /// The heap.
        heap: Heap,
        /// The index.
        index: u32,
        /// Size of the heap, in bytes.
        len: usize,
    },
    /// A `#Strings` entry has no terminator within the limit.
    #[error("#Strings entry at {index:#x} has no NUL within {max} bytes")]
    StringTooLong {
        /// `#Strings` offset.
        index: u32,
        /// The limit.
        max: usize,
    },
    /// A `#Strings` entry is not UTF-8.
    #[error("#Strings entry at {index:#x} is not valid UTF-8")]
    InvalidUtf8 {
        /// `#Strings` offset.
        index: u32,
    },
    /// A blob or user string starts with an invalid compressed length.
    #[error("{heap} entry at {index:#x} has an invalid length prefix")]
    BadBlobLength {
        /// The heap.
        heap: Heap,
        /// Offset in the heap.
        index: u32,
    },
    /// A blob or user string is longer than the rest of its heap.
    #[error(
        "{heap} entry at {index:#x} says {length} byte(s), overrunning the {len:#x}-byte heap"
    )]
    BlobOverrun {
        /// The heap.
        heap: Heap,
        /// Offset in the heap.
        index: u32,
        /// Length declared.
        length: u32,
        /// Size of the heap, in bytes.
        len: usize,
    },
    /// The table stream declares a table this reader does not know.
    #[error("table stream marks table {bit:#04x} present, which this reader has no layout for")]
    UnknownTable {
        /// The table number.
        bit: u8,
    },
    /// A table declares more rows than a token can address.
    #[error("table {table:?} claims {rows} rows (more than a 24-bit row id can address)")]
    TooManyRows {
        /// The table.
        table: TableId,
        /// Rows declared.
        rows: u32,
    },
    /// The table stream is too short for the declared rows.
    #[error("table {table:?} data ends at {end:#x}, beyond the {len:#x}-byte table stream")]
    TablesTruncated {
        /// The table.
        table: TableId,
        /// Where the table's data would end.
        end: u64,
        /// Size of the table stream, in bytes.
        len: usize,
    },
    /// A row id past the end of its table.
    #[error("{table:?} row {row} does not exist (the table has {rows} row(s))")]
    RowOutOfBounds {
        /// The table.
        table: TableId,
        /// 1-based row id.
        row: u32,
        /// Rows the table has.
        rows: u32,
    },
    /// A coded index whose tag names no table of its kind.
    #[error(
        "{table:?} row {row} column {column}: coded index {value:#x} has no valid {kind:?} tag"
    )]
    InvalidCodedIndex {
        /// The table.
        table: TableId,
        /// 1-based row id.
        row: u32,
        /// Column name.
        column: &'static str,
        /// The coded-index kind of the column.
        kind: CodedIndex,
        /// The offending value.
        value: u32,
    },
    /// An error inside one column of one row.
    #[error("{table:?} row {row} column {column}: {source}")]
    InRow {
        /// The table.
        table: TableId,
        /// 1-based row id.
        row: u32,
        /// Column name.
        column: &'static str,
        /// What went wrong in the column.
        #[source]
        source: Box<MetadataError>,
    },
    /// An error inside a signature blob.
    #[error("signature blob at #Blob {blob:#x}: {source}")]
    Signature {
        /// `#Blob` index of the signature.
        blob: u32,
        /// What is wrong in it.
        #[source]
        source: SignatureError,
    },
    /// A token names no row of this metadata.
    #[error("token {token:#010x} does not name a row of this metadata")]
    InvalidToken {
        /// The token.
        token: u32,
    },
    /// A method belongs to no type.
    #[error("MethodDef row {method} is in no TypeDef's method list")]
    NoDeclaringType {
        /// The MethodDef row id.
        method: u32,
    },
    /// A structure nests deeper than the limit.
    #[error("{what} nests deeper than {limit} levels")]
    TooDeep {
        /// What nests.
        what: &'static str,
        /// The limit passed.
        limit: usize,
    },
    /// A formatted name grew past the limit.
    #[error("formatted name exceeds {limit} bytes")]
    NameTooLong {
        /// The limit passed.
        limit: usize,
    },
    /// The PE image around the metadata is unreadable (the reason).
    #[error("PE image: {0}")]
    Pe(String),
}

/// Something wrong inside one signature blob. Offsets are within the blob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The blob ends inside an element (offsets within the blob).
    #[error(transparent)]
    Truncated(#[from] Truncation),
    /// A compressed integer has an invalid first byte.
    #[error("invalid compressed integer at offset {offset}")]
    BadCompressedInt {
        /// Byte offset where it happened.
        offset: usize,
    },
    /// An element type that may not appear here.
    #[error("unexpected element type {value:#04x} at offset {offset} ({context})")]
    UnexpectedElementType {
        /// Byte offset where it happened.
        offset: usize,
        /// The offending value.
        value: u8,
        /// Where the element appeared.
        context: &'static str,
    },
    /// A calling convention of the wrong kind for this signature.
    #[error("calling convention {value:#04x} at offset {offset} is not a {expected}")]
    BadCallingConvention {
        /// Byte offset where it happened.
        offset: usize,
        /// The offending value.
        value: u8,
        /// The value expected.
        expected: &'static str,
    },
    /// A TypeDefOrRefOrSpec coded index with tag 3.
    #[error("TypeDefOrRefOrSpec value {value:#x} at offset {offset} has the invalid tag 3")]
    BadTypeToken {
        /// Byte offset where it happened.
        offset: usize,
        /// The offending value.
        value: u32,
    },
    /// An item count larger than the bytes left could hold.
    #[error("{what} count {count} at offset {offset} is impossible for the bytes left")]
    TooManyItems {
        /// What is counted.
        what: &'static str,
        /// Byte offset where it happened.
        offset: usize,
        /// The count read.
        count: u32,
    },
    /// An array shape that contradicts itself.
    #[error("array shape at offset {offset}: {problem}")]
    BadArrayShape {
        /// Byte offset where it happened.
        offset: usize,
        /// What is inconsistent.
        problem: &'static str,
    },
    /// A second vararg sentinel.
    #[error("more than one sentinel at offset {offset}")]
    SecondSentinel {
        /// Byte offset where it happened.
        offset: usize,
    },
    /// Types nest deeper than the limit.
    #[error("types nest deeper than {limit} levels")]
    TooDeep {
        /// The limit passed.
        limit: usize,
    },
}

/// Result of the metadata reader.
pub type Result<T, E = MetadataError> = std::result::Result<T, E>;
