//! Errors of the MIP reader, writer and profile operations. Every parse error carries the
//! byte offset in the input where it was found and what was being read.

use super::header::{FileKind, Layout};
use crate::formats::cursor::Truncation;

/// Result of the MIP functions.
pub type Result<T> = std::result::Result<T, MipError>;

/// Something wrong in a MIP file, or an operation that cannot be done on well-formed ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MipError {
    /// The input ends inside a field (offsets in the whole file).
    #[error(transparent)]
    Truncated(#[from] Truncation),
    /// The first four bytes are not `FB 4D 49 50`.
    #[error("magic at offset 0x0 is {found:02x?}, not [fb, 4d, 49, 50] (\"\\xfbMIP\")")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A version newer than 8: its layout is unknown.
    #[error("MIP version {version} at offset 0x4 is newer than 8, the last this reader knows")]
    UnsupportedVersion {
        /// The version found.
        version: u16,
    },
    /// `OffsetToData` is neither 0x18 at 0x14 (24-byte header) nor 0x20 at 0x1c (32-byte).
    #[error(
        "no known header layout: OffsetToData is {at_0x14:#x} at offset 0x14 and \
         {at_0x1c:#x} at offset 0x1c (expected 0x18 or 0x20 respectively)"
    )]
    UnknownLayout {
        /// The word at offset 0x14 of the header.
        at_0x14: u32,
        /// The word at offset 0x1c of the header.
        at_0x1c: u32,
    },
    /// `FileType` (offset 0x6) has a value or bit combination the layout does not define.
    #[error("file type {file_type:#06x} at offset 0x6 is not valid for the {layout} header")]
    UnknownFileType {
        /// The header layout.
        layout: Layout,
        /// The file type found.
        file_type: u16,
    },
    /// `ProfileType` (offset 0x8) has bits no MIP profile type defines.
    #[error("profile type {profile_type:#010x} at offset 0x8 has unknown bits")]
    UnknownProfileType {
        /// The profile type found.
        profile_type: u32,
    },
    /// The file is of another kind than the parser called (a map given as a profile, …).
    #[error("file type at offset 0x6 says {found}, expected {expected}")]
    WrongFileKind {
        /// The value expected.
        expected: FileKind,
        /// The value found.
        found: FileKind,
    },
    /// A `.mipraw` whose profile type selects neither record layout the format defines.
    #[error(
        "raw profile type {profile_type:#x} at offset 0x8 selects no raw record layout \
         (needs function coverage, or timestamp and/or call count, not both)"
    )]
    UnsupportedRawProfileType {
        /// The profile type found.
        profile_type: u32,
    },
    /// A count whose elements cannot fit in the bytes that are left.
    #[error(
        "{what}: count {count} at offset {offset:#x} needs {needed} byte(s), only {available} left"
    )]
    CountPastEnd {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it happened.
        offset: usize,
        /// The count read.
        count: u64,
        /// Bytes the count needs.
        needed: u128,
        /// Bytes left in the input.
        available: usize,
    },
    /// A name length that runs past the end of the input.
    #[error("{what}: length {length} at offset {offset:#x}, only {available} byte(s) left")]
    NameLengthPastEnd {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it happened.
        offset: usize,
        /// The length declared.
        length: u64,
        /// Bytes left in the input.
        available: usize,
    },
    /// A pad byte that is not zero (this crate requires zero padding; see the module docs).
    #[error("{what}: pad byte at offset {offset:#x} is {value:#04x}, not 0")]
    BadPadding {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it happened.
        offset: usize,
        /// The padding byte found.
        value: u8,
    },
    /// A boolean byte that is neither 0 nor 1.
    #[error("{what}: byte at offset {offset:#x} is {value:#04x}, not 0 or 1")]
    BadFlag {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it happened.
        offset: usize,
        /// The flag byte found.
        value: u8,
    },
    /// A function name that is not UTF-8.
    #[error("{what}: name at offset {offset:#x} is not valid UTF-8")]
    NameNotUtf8 {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it happened.
        offset: usize,
    },
    /// A name in the `.mip` names table with no terminating NUL before the end.
    #[error("function name at offset {offset:#x} has no terminating NUL")]
    UnterminatedName {
        /// Byte offset where it happened.
        offset: usize,
    },
    /// Bytes left over after the last structure of the file.
    #[error("{count} unexpected byte(s) at offset {offset:#x} after the {what}")]
    TrailingData {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it happened.
        offset: usize,
        /// Bytes left over.
        count: usize,
    },
    /// An offset that points outside what it must point into, or does not fit its field.
    #[error("{what}: offset {value:#x} (entry at {offset:#x}) is out of range")]
    OffsetOutOfRange {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it happened.
        offset: usize,
        /// The offset computed.
        value: i128,
    },
    /// `RawProfile::parse_without_blocks` on a raw profile that records blocks.
    #[error("raw profile has block coverage: its records can only be read with block counts")]
    NeedBlockCounts,
    /// A raw counter pair where only one of call count and timestamp is "never set".
    #[error(
        "raw record at offset {offset:#x}: call count {call_count:#x} and timestamp \
         {timestamp:#x} disagree on whether the function ran"
    )]
    CorruptCounters {
        /// Byte offset where it happened.
        offset: usize,
        /// Call count read.
        call_count: u32,
        /// Timestamp read.
        timestamp: u32,
    },
    /// Files of different link units.
    #[error("module hash {found:#010x} does not match the profile's {expected:#010x}")]
    ModuleHashMismatch {
        /// Hash in the map.
        expected: u32,
        /// Hash in the profile.
        found: u32,
    },
    /// The same function with a different control-flow graph in two profiles.
    #[error("function {function}: CFG signature {found:#010x} does not match {expected:#010x}")]
    CfgMismatch {
        /// Name of the function.
        function: String,
        /// Control-flow hash in the map.
        expected: u32,
        /// Control-flow hash in the profile.
        found: u32,
    },
    /// The same function with a different number of blocks in two inputs.
    #[error("function {function}: {found} non-entry block(s), expected {expected}")]
    BlockCountMismatch {
        /// Name of the function.
        function: String,
        /// Block count in the map.
        expected: u32,
        /// Block count in the profile.
        found: u32,
    },
    /// A raw record at an offset no function of the profile points to.
    #[error("raw record at offset {offset:#x} belongs to no function of the profile")]
    UnmatchedRawRecord {
        /// Offset of the record in the raw profile.
        offset: u64,
    },
    /// `merge` of nothing.
    #[error("no profiles to merge")]
    NothingToMerge,
    /// A value of the in-memory model that its field in the file cannot hold.
    #[error("cannot write {what}: {detail}")]
    Unwritable {
        /// What cannot be written.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
}
