//! LLVM MIP (Machine IR Profile) files: reader, writer and the profile operations of
//! `llvm-mipdata` (create, merge, show), plus function-coverage profiles built from names.
//!
//! MIP instruments machine code: a run dumps a `.mipraw` ([`RawProfile`]) of counters,
//! the build leaves a `.mipmap` ([`MipMap`]) saying which function each raw record belongs
//! to, and both are combined into a `.mip` ([`Profile`]). Everything is little-endian and
//! starts with a [`Header`].
//!
//! ```no_run
//! use cdac::formats::mip::{self, Layout};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let profile = mip::function_coverage_profile(
//!     "app.dll",
//!     [("void [app] Program::Main()", true), ("void [app] Program::Unused()", false)],
//!     Layout::New,
//! )?;
//! std::fs::write("app.mip", profile.to_bytes()?)?;
//! # Ok(())
//! # }
//! ```
//!
//! # Two headers, one version number
//!
//! Both revisions of the format say version 8:
//!
//! | | old (24 bytes) | new (32 bytes) |
//! |---|---|---|
//! | 0x00 | magic `FB 4D 49 50`, `u16` version, `u16` file type | same |
//! | 0x08 | `u32` profile type, `u32` module hash | same |
//! | 0x10 | `u32` reserved, `u32` OffsetToData = 0x18 | `i64` RawSectionOffset |
//! | 0x18 | data | `u32` reserved, `u32` OffsetToData = 0x20 |
//! | file type | 1 raw, 2 map, 3 profile | bits: raw 1, call-edge samples 2, map 4, profile 8, 64-bit 0x10, 32-bit 0x20 |
//! | map entry starts with | `i32` ×3: raw section, raw record, code | `i64` ×2 (`i32` on 32-bit targets): raw record, code |
//!
//! [`Header::parse`] tells them apart by `OffsetToData` and the file type, never by the
//! version: 0x18 at 0x14 with a file type of 1–3 is old, else 0x20 at 0x1c is new (the
//! new layout's file type must then be one kind bit plus at most one width bit). The old
//! test goes first: at 0x14 a new file has the upper half of `RawSectionOffset`, which
//! is 0x18 only if the raw section is ≥ 96 GiB from the map, whereas at 0x1c an old file
//! has data. The bodies of `.mipraw` and `.mip` are the same in both layouts.
//!
//! # Where the format document leaves room, and what this module does
//!
//! - **Padding** is zero: the compiler pads with the assembler's alignment fill, which is
//!   zero in data sections, and rejecting other values ([`MipError::BadPadding`]) keeps
//!   the round trip byte-exact. Map entries are padded to 8 bytes (4 on 32-bit targets),
//!   counter raw records to 4, coverage raw records not at all, all as file offsets. The
//!   last entry or record may lack its padding (a dumped section ends at the last byte
//!   of data); `last_unpadded` records that.
//! - **Raw coverage bytes** hold 0 once the code ran ([`raw::COVERED`]); the compiler
//!   initializes them to 0xFF. **Raw counters** are both 0xFFFFFFFF while the function
//!   never ran; only one of them so is [`MipError::CorruptCounters`] when merged.
//! - **Raw record layout**: function coverage alone selects the 1-byte record; timestamp
//!   and/or call count select the 8-byte one; anything else is
//!   [`MipError::UnsupportedRawProfileType`]. Raw records have no count or length, so
//!   block counts come from the map or profile, in raw-offset order.
//! - **Offsets into the raw file** (map-resolved, `.mip` `RawProfileDataOffset`) count
//!   from the start of the file, header included, because the compiler places the header
//!   at the start of the raw section.
//! - **New-layout map offsets**: `RawSectionOffset` is measured from the start of the map,
//!   each entry's offsets from the start of that entry; [`MipMap::resolve`] combines
//!   them. A new-layout file with neither width bit is read as 64-bit.
//! - **`.mip` field widths** follow the document: `RawProfileDataOffset` is a `u32`,
//!   `FunctionStartOffset` an `i32` (code usually precedes the raw section).
//! - **Call edges** are reserved in the document; they are read as LLVM's `CallEdge_t`:
//!   two `u32` (callee raw record, return address).
//! - **Names table**: the document calls the leading `u64` a byte length, LLVM's tools
//!   write and read a name count. Both are read ([`NamesEncoding`]) and written back as
//!   found; new profiles use the byte length. Each name ends with a NUL and the table
//!   must end the file. (When all names are empty the two encodings are the same bytes;
//!   parsing then says `ByteLength`.)
//! - **Block coverage in `.mip`** is a byte that must be 0 or 1 ([`MipError::BadFlag`]).
//! - **Version**: anything up to 8 is read (and kept); newer is refused. **Reserved**
//!   fields are kept as found.
//! - **Merging two `.mip` files** is not in the document; [`merge()`] adds merge counts,
//!   call counts and timestamp sums and ORs coverage, so that merging profiles equals
//!   merging all their raw runs into one.

mod bytes;
pub mod coverage;
pub mod error;
pub mod header;
pub mod map;
mod md5;
pub mod merge;
pub mod profile;
pub mod raw;
pub mod show;

pub use coverage::function_coverage_profile;
pub use error::{MipError, Result};
pub use header::{FileKind, Header, Layout, ProfileFlags, Width, MAGIC, VERSION};
pub use map::{MapEntry, MapPcOffsets, MipMap, ResolvedOffsets};
pub use md5::{md5_hash, module_hash};
pub use merge::{create_from_map, merge, merge_raw_into};
pub use profile::{BlockProfile, CallEdge, NamesEncoding, Profile, ProfileFunction};
pub use raw::{RawCounters, RawProfile, RawRecord, RawRecordKind};
pub use show::{show_rows, ShowRow};
