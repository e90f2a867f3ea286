//! Errors of the portable PDB reader and of the PDB finder.

use crate::formats::cursor::Truncation;
use crate::formats::ecma::MetadataError;

/// Something wrong with a portable PDB, with the assembly that names it, or with finding it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PdbError {
    /// The metadata root or a heap of the PDB is damaged.
    #[error("portable PDB metadata: {0}")]
    Metadata(#[from] MetadataError),
    /// The metadata has no `#Pdb` stream (it is an assembly's metadata, not a PDB's).
    #[error("not a portable PDB: the metadata has no #Pdb stream")]
    NoPdbStream,
    /// The metadata has no `#~` table stream.
    #[error("portable PDB has no #~ table stream")]
    NoTableStream,
    /// A fixed-size structure is cut short (offsets within the `#Pdb` stream for its
    /// header, within the `#~` stream for the table header and row counts).
    #[error(transparent)]
    Truncated(#[from] Truncation),
    /// The table stream marks a table present that a portable PDB does not have.
    #[error(
        "the PDB's table stream marks table {bit:#04x} present, which a portable PDB does not hold"
    )]
    UnexpectedTable {
        /// The table number.
        bit: u8,
    },
    /// A row count over what a 24-bit row id can address.
    #[error("table {table:#04x} claims {rows} rows (more than a 24-bit row id can address)")]
    TooManyRows {
        /// The table number.
        table: u8,
        /// The claimed count.
        rows: u32,
    },
    /// The tables run past the end of the table stream.
    #[error("PDB table {table:#04x} ends at {end:#x}, beyond the {len:#x}-byte table stream")]
    TablesTruncated {
        /// The table number.
        table: u8,
        /// Where its rows would end.
        end: u64,
        /// The stream's length.
        len: usize,
    },
    /// A row that does not exist.
    #[error("PDB table {table:#04x} has no row {row} (it has {rows})")]
    RowOutOfBounds {
        /// The table number.
        table: u8,
        /// The row asked for.
        row: u32,
        /// The rows it has.
        rows: u32,
    },
    /// A sequence-points blob that does not decode.
    #[error("sequence points of MethodDef {method}: {reason} at blob offset {offset}")]
    BadSequencePoints {
        /// The MethodDef row id.
        method: u32,
        /// Offset within the blob.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A document name blob that does not decode.
    #[error("name of Document {document}: {reason}")]
    BadDocumentName {
        /// The Document row id.
        document: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// The PE image is damaged or not a .NET image.
    #[error("PE image: {0}")]
    Pe(String),
    /// An embedded PDB that does not inflate to its stated size.
    #[error("embedded PDB: {0}")]
    Embedded(String),
    /// A file could not be read.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        message: String,
    },
    /// The PDB's id is not the one the assembly names.
    #[error("PDB {path} has id {found}, the assembly wants {wanted}")]
    IdMismatch {
        /// The PDB file (or "embedded").
        path: String,
        /// The id the assembly's CodeView entry names.
        wanted: String,
        /// The PDB's own id.
        found: String,
    },
    /// The PDB's SHA-256 checksum is none of those the assembly's PdbChecksum entries hold.
    #[error("PDB {path}: its SHA-256 checksum is not the one the assembly names")]
    ChecksumMismatch {
        /// The PDB file (or "embedded").
        path: String,
    },
    /// No PDB was found for the assembly.
    #[error("no portable PDB for {assembly}: {tried}")]
    NotFound {
        /// The assembly.
        assembly: String,
        /// What was tried, and why each failed.
        tried: String,
    },
}

/// Result of the portable PDB reader.
pub type Result<T> = std::result::Result<T, PdbError>;
