//! Errors of the ECMA-335 metadata reader. Every error names where it happened: the
//! stream, the heap offset, or the table, row and column.

use super::tables::{CodedIndex, TableId};

/// A heap of the metadata, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heap {
    Strings,
    Blob,
    Guid,
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
pub enum MetadataError {
    #[error("{what}: needs {needed} byte(s) at offset {offset:#x}, only {len:#x} byte(s) in all")]
    Truncated {
        what: &'static str,
        offset: usize,
        needed: usize,
        len: usize,
    },
    #[error("metadata signature is {found:#010x}, not 0x424a5342 (\"BSJB\")")]
    BadSignature { found: u32 },
    #[error("metadata version string length {length} is over the limit of {max}")]
    VersionTooLong { length: u32, max: u32 },
    #[error("stream header {index} has no NUL-terminated name within 32 bytes")]
    BadStreamName { index: usize },
    #[error("stream {name:?} [{offset:#x}, +{size:#x}) is outside the {len:#x}-byte metadata")]
    StreamOutOfBounds {
        name: String,
        offset: u32,
        size: u32,
        len: usize,
    },
    #[error("metadata has no {0} stream")]
    MissingStream(&'static str),
    #[error("{heap} index {index:#x} is outside the {len:#x}-byte heap")]
    HeapIndexOutOfBounds { heap: Heap, index: u32, len: usize },
    #[error("#Strings entry at {index:#x} has no NUL within {max} bytes")]
    StringTooLong { index: u32, max: usize },
    #[error("#Strings entry at {index:#x} is not valid UTF-8")]
    InvalidUtf8 { index: u32 },
    #[error("{heap} entry at {index:#x} has an invalid length prefix")]
    BadBlobLength { heap: Heap, index: u32 },
    #[error(
        "{heap} entry at {index:#x} says {length} byte(s), overrunning the {len:#x}-byte heap"
    )]
    BlobOverrun {
        heap: Heap,
        index: u32,
        length: u32,
        len: usize,
    },
    #[error("table stream marks table {bit:#04x} present, which this reader has no layout for")]
    UnknownTable { bit: u8 },
    #[error("table {table:?} claims {rows} rows (more than a 24-bit row id can address)")]
    TooManyRows { table: TableId, rows: u32 },
    #[error("table {table:?} data ends at {end:#x}, beyond the {len:#x}-byte table stream")]
    TablesTruncated {
        table: TableId,
        end: u64,
        len: usize,
    },
    #[error("{table:?} row {row} does not exist (the table has {rows} row(s))")]
    RowOutOfBounds { table: TableId, row: u32, rows: u32 },
    #[error(
        "{table:?} row {row} column {column}: coded index {value:#x} has no valid {kind:?} tag"
    )]
    InvalidCodedIndex {
        table: TableId,
        row: u32,
        column: &'static str,
        kind: CodedIndex,
        value: u32,
    },
    #[error("{table:?} row {row} column {column}: {source}")]
    InRow {
        table: TableId,
        row: u32,
        column: &'static str,
        #[source]
        source: Box<MetadataError>,
    },
    #[error("signature blob at #Blob {blob:#x}: {source}")]
    Signature {
        blob: u32,
        #[source]
        source: SignatureError,
    },
    #[error("token {token:#010x} does not name a row of this metadata")]
    InvalidToken { token: u32 },
    #[error("MethodDef row {method} is in no TypeDef's method list")]
    NoDeclaringType { method: u32 },
    #[error("{what} nests deeper than {limit} levels")]
    TooDeep { what: &'static str, limit: usize },
    #[error("formatted name exceeds {limit} bytes")]
    NameTooLong { limit: usize },
    #[error("PE image: {0}")]
    Pe(String),
}

/// Something wrong inside one signature blob. Offsets are within the blob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("ends early at offset {offset}")]
    Truncated { offset: usize },
    #[error("invalid compressed integer at offset {offset}")]
    BadCompressedInt { offset: usize },
    #[error("unexpected element type {value:#04x} at offset {offset} ({context})")]
    UnexpectedElementType {
        offset: usize,
        value: u8,
        context: &'static str,
    },
    #[error("calling convention {value:#04x} at offset {offset} is not a {expected}")]
    BadCallingConvention {
        offset: usize,
        value: u8,
        expected: &'static str,
    },
    #[error("TypeDefOrRefOrSpec value {value:#x} at offset {offset} has the invalid tag 3")]
    BadTypeToken { offset: usize, value: u32 },
    #[error("{what} count {count} at offset {offset} is impossible for the bytes left")]
    TooManyItems {
        what: &'static str,
        offset: usize,
        count: u32,
    },
    #[error("array shape at offset {offset}: {problem}")]
    BadArrayShape {
        offset: usize,
        problem: &'static str,
    },
    #[error("more than one sentinel at offset {offset}")]
    SecondSentinel { offset: usize },
    #[error("types nest deeper than {limit} levels")]
    TooDeep { limit: usize },
}

pub type Result<T, E = MetadataError> = std::result::Result<T, E>;
