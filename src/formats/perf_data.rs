//! perf.data, as `perf record` writes it: just enough to find the memory-mapping records
//! that keep `perf report` from naming .NET code, and to plan in-place patches that fix them.
//!
//! **Why.** `perf report` names frames in executable *anonymous* mappings (`//anon`) from
//! `/tmp/perf-PID.map`, but decides what is anonymous from the mapping's file name alone.
//! With W^X on (the .NET default), JIT'ed code runs from a shared view of a memfd, which the
//! kernel names `/memfd:doublemapper (deleted)`: perf treats it as a file it cannot open and
//! ignores the map. ReadyToRun code runs from the `*.dll` images, which perf cannot read
//! either. Renaming those mappings to `//anon` in the recording makes perf use the map.
//!
//! **Layout** (`tools/perf/Documentation/perf.data-file-format.txt`,
//! `include/uapi/linux/perf_event.h`; every number in the byte order of the recording
//! machine, told by the magic `PERFILE2` read forwards or backwards):
//!
//! * File mode: a 104-byte header; the `u64` header size at 8, the data section's offset
//!   and size at 40 and 48, a 256-bit feature bitmap at 72. Records fill the data section.
//! * Pipe mode (`perf record -o -`): the magic and a header size of 16, then records to the
//!   end of the file.
//! * A record starts with `u32 type, u16 misc, u16 size`; `size` counts the whole record.
//!   Two kinds carry a payload after it that `size` does not count: AUXTRACE (its `u64`
//!   size at 8) and, in pipe mode, HEADER_TRACING_DATA (its `u32` size at 8).
//! * MMAP (1): pid and tid at 8, address, length and file offset at 16, 24, 32, the
//!   NUL-terminated file name at 40. A data (non-executable) mapping has misc bit 13.
//! * MMAP2 (10): as MMAP up to 40; then 24 bytes that hold either device, inode and
//!   generation or, with misc bit 14, a build id; protection at 64, flags at 68, the name
//!   at 72.
//!
//! **The patch.** The name's bytes become `//anon` followed by NULs, so the record keeps its
//! size and whatever follows the name (the `sample_id` trailer, which perf reads backwards
//! from the record's end) stays where it was. An MMAP2 record without a build id also gets
//! its device and inode zeroed, as the kernel writes them for `//anon`: perf then treats all
//! renamed mappings of a process as one object, loaded from the map once.
//!
//! Compressed recordings (`perf record -z`: zstd frames holding more records) and directory
//! recordings (`perf record --threads`) are refused with an error that says so. Every length
//! is checked against the input; a record smaller than its header is an error, so a walk
//! always moves forward and ends.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Serialize;

use crate::formats::cursor::{Cursor, Endian, Truncation};

/// The magic of a version 2 perf.data, as a little-endian machine writes it.
const MAGIC: &[u8; 8] = b"PERFILE2";
/// The magic of the version 1 format, which perf stopped writing long ago.
const MAGIC_V1: &[u8; 8] = b"PERFFILE";
/// Size of the file-mode header.
const FILE_HEADER_SIZE: u64 = 104;
/// Size of the pipe-mode header.
const PIPE_HEADER_SIZE: u64 = 16;
/// Size of a record header.
const RECORD_HEADER_SIZE: usize = 8;

/// Record types this module looks at.
pub mod record_type {
    /// `PERF_RECORD_MMAP`.
    pub const MMAP: u32 = 1;
    /// `PERF_RECORD_MMAP2`.
    pub const MMAP2: u32 = 10;
    /// `PERF_RECORD_HEADER_TRACING_DATA` (pipe mode; its payload follows the record).
    pub const HEADER_TRACING_DATA: u32 = 66;
    /// `PERF_RECORD_AUXTRACE` (its payload follows the record).
    pub const AUXTRACE: u32 = 71;
    /// `PERF_RECORD_COMPRESSED` (zstd frames, `perf record -z`).
    pub const COMPRESSED: u32 = 81;
    /// `PERF_RECORD_COMPRESSED2` (the 8-byte aligned form newer perf writes).
    pub const COMPRESSED2: u32 = 83;
}

/// `misc` bit of an MMAP record for a mapping that is not executable.
const MISC_MMAP_DATA: u16 = 1 << 13;
/// `misc` bit of an MMAP2 record whose 24 bytes at 40 hold a build id.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// `PROT_EXEC` in an MMAP2 record's protection.
const PROT_EXEC: u32 = 4;
/// Feature bit of a directory recording (`HEADER_DIR_FORMAT`).
const FEATURE_DIR_FORMAT: u32 = 24;
/// Feature bit of a compressed recording (`HEADER_COMPRESSED`).
const FEATURE_COMPRESSED: u32 = 27;

/// Offset of the file name in an MMAP record.
const MMAP_NAME: usize = 40;
/// Offset of the device/inode (or build id) union in an MMAP2 record, and its size.
const MMAP2_ID: Range<usize> = 40..64;
/// Offset of the protection in an MMAP2 record.
const MMAP2_PROT: usize = 64;
/// Offset of the file name in an MMAP2 record.
const MMAP2_NAME: usize = 72;

/// The name renamed mappings get.
const ANON: &[u8] = b"//anon";
/// Prefix of the memfd the .NET runtime maps its executable JIT'ed code from under W^X.
pub const DOUBLE_MAPPER_PREFIX: &[u8] = b"/memfd:doublemapper";

/// Why a perf.data could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PerfDataError {
    /// Shorter than any header.
    #[error("not a perf.data file: only {len} bytes")]
    TooShort {
        /// Bytes in the input.
        len: usize,
    },
    /// The magic is not perf's.
    #[error("not a perf.data file: it starts with {magic:02x?}, not \"PERFILE2\"")]
    NotPerfData {
        /// The first eight bytes.
        magic: [u8; 8],
    },
    /// The version 1 format ("PERFFILE").
    #[error("a version 1 perf.data (\"PERFFILE\"), which only very old perf wrote: not supported")]
    Version1,
    /// A header size that is neither the pipe's nor the file's.
    #[error("perf.data header size {size}: expected 16 (pipe mode) or at least 104")]
    BadHeaderSize {
        /// The header's size field.
        size: u64,
    },
    /// The data section does not lie between the header and the end of the file.
    #[error(
        "perf.data data section [{offset:#x}, +{size:#x}) does not lie between the header and \
         the end of the file ({len:#x} bytes)"
    )]
    DataOutsideFile {
        /// Offset of the data section.
        offset: u64,
        /// Its size.
        size: u64,
        /// Bytes in the input.
        len: usize,
    },
    /// A recording made with `perf record -z`.
    #[error(
        "the recording is compressed (perf record -z){}: cdac cannot rename mappings inside \
         compressed records; record again without -z",
        at_offset(*.offset)
    )]
    Compressed {
        /// Offset of the first compressed record, if one was seen (else the header says so).
        offset: Option<u64>,
    },
    /// A directory recording (`perf record --threads`).
    #[error(
        "a directory-format recording (perf record --threads: perf.data/ with data.N files): \
         not supported; record without --threads"
    )]
    DirectoryFormat,
    /// A record, or the payload after one, runs past the end of the records ("record
    /// header", "record", "AUXTRACE payload", ...; offsets in the file, what is left
    /// counted to the end of the records).
    #[error(transparent)]
    Truncated(#[from] Truncation),
    /// A record whose size is smaller than its fixed part (a size below 8 would never move
    /// a walk forward).
    #[error("record of type {kind} at offset {offset:#x} has size {size}, less than the {min} bytes it needs")]
    RecordTooSmall {
        /// Where it starts.
        offset: u64,
        /// Its type.
        kind: u32,
        /// Its size field.
        size: u16,
        /// The least size this type needs.
        min: usize,
    },
    /// An MMAP or MMAP2 record whose file name has no terminating NUL.
    #[error("mapping record at offset {offset:#x}: the file name has no terminating NUL")]
    UnterminatedName {
        /// Where the record starts.
        offset: u64,
    },
}

fn at_offset(offset: Option<u64>) -> String {
    offset
        .map(|o| format!(" (record at {o:#x})"))
        .unwrap_or_default()
}

/// Byte order of a recording (that of the machine that made it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ByteOrder {
    /// Least significant byte first.
    Little,
    /// Most significant byte first.
    Big,
}

impl From<ByteOrder> for Endian {
    fn from(order: ByteOrder) -> Endian {
        match order {
            ByteOrder::Little => Endian::Little,
            ByteOrder::Big => Endian::Big,
        }
    }
}

/// How the records are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// A seekable file: header, attributes, data section, feature sections.
    File,
    /// A stream (`perf record -o -`), here saved to a file: records to the end.
    Pipe,
}

/// A perf.data header: byte order, layout and where the records are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Byte order of every number in the file.
    pub order: ByteOrder,
    /// File or pipe layout.
    pub layout: Layout,
    /// Byte range of the records.
    pub records: Range<usize>,
}

impl Header {
    /// Reads the header of `bytes` (a whole perf.data file).
    pub fn parse(bytes: &[u8]) -> Result<Header, PerfDataError> {
        let too_short = || PerfDataError::TooShort { len: bytes.len() };
        let magic: [u8; 8] = Cursor::new(bytes)
            .read_array("magic")
            .map_err(|_| too_short())?;
        let mut reversed = magic;
        reversed.reverse();
        let order = if &magic == MAGIC {
            ByteOrder::Little
        } else if &reversed == MAGIC {
            ByteOrder::Big
        } else if &magic == MAGIC_V1 || &reversed == MAGIC_V1 {
            return Err(PerfDataError::Version1);
        } else {
            return Err(PerfDataError::NotPerfData { magic });
        };
        let c = Cursor::new(bytes).with_endian(order.into());
        let u64_at = |at: usize| c.at(at).read_u64("header").map_err(|_| too_short());
        let size = u64_at(8)?;
        if size == PIPE_HEADER_SIZE {
            return Ok(Header {
                order,
                layout: Layout::Pipe,
                records: PIPE_HEADER_SIZE as usize..bytes.len(),
            });
        }
        if size < FILE_HEADER_SIZE {
            return Err(PerfDataError::BadHeaderSize { size });
        }
        let (offset, data_size) = (u64_at(40)?, u64_at(48)?);
        // Features: bit N of the bitmap is bit N % 64 of the N / 64th u64.
        let feature =
            |bit: u32| u64_at(72 + 8 * (bit as usize / 64)).map(|w| w >> (bit % 64) & 1 == 1);
        if feature(FEATURE_DIR_FORMAT)? {
            return Err(PerfDataError::DirectoryFormat);
        }
        if feature(FEATURE_COMPRESSED)? {
            return Err(PerfDataError::Compressed { offset: None });
        }
        // The data must follow the header (a patch of a record must never change the header).
        let end = offset.checked_add(data_size);
        let records = match end {
            Some(end) if offset >= size && end <= bytes.len() as u64 => {
                offset as usize..end as usize
            }
            _ => {
                return Err(PerfDataError::DataOutsideFile {
                    offset,
                    size: data_size,
                    len: bytes.len(),
                })
            }
        };
        Ok(Header {
            order,
            layout: Layout::File,
            records,
        })
    }
}

/// One record: its type, misc bits and bytes (header included, payload after it not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Offset of the record in the file.
    pub offset: u64,
    /// `PERF_RECORD_*` type.
    pub kind: u32,
    /// The header's misc bits.
    pub misc: u16,
    /// The record's `size` bytes, starting with its header.
    pub bytes: &'a [u8],
}

/// The records of a perf.data, in file order; after an error, nothing more.
pub struct Records<'a> {
    /// Over the file up to the end of the records, at the next record.
    c: Cursor<'a>,
    order: ByteOrder,
    failed: bool,
}

impl<'a> Records<'a> {
    /// The records of `bytes` (a whole file) as `header` locates them.
    pub fn new(bytes: &'a [u8], header: &Header) -> Records<'a> {
        let end = header.records.end.min(bytes.len());
        Records {
            c: Cursor::new(&bytes[..end])
                .with_endian(header.order.into())
                .at(header.records.start),
            order: header.order,
            failed: false,
        }
    }

    fn next_record(&mut self) -> Result<Record<'a>, PerfDataError> {
        let mut c = self.c;
        let offset = c.offset();
        // The header first, then the whole record from its start.
        let mut head = { c }.split(RECORD_HEADER_SIZE, "record header")?;
        let kind = head.read_u32("record type")?;
        let misc = head.read_u16("record misc")?;
        let size = head.read_u16("record size")?;
        let too_small = |min| PerfDataError::RecordTooSmall {
            offset,
            kind,
            size,
            min,
        };
        if usize::from(size) < RECORD_HEADER_SIZE {
            return Err(too_small(RECORD_HEADER_SIZE));
        }
        let bytes = c.read_bytes(usize::from(size), "record")?;
        // Payload that follows the record without being counted in its size.
        let mut fixed = Cursor::new(bytes).with_endian(self.order.into()).at(8);
        let payload = match kind {
            record_type::AUXTRACE => {
                let n = fixed.read_u64("AUXTRACE size");
                Some(("AUXTRACE payload", n.map_err(|_| too_small(16))?))
            }
            record_type::HEADER_TRACING_DATA => {
                let n = fixed.read_u32("tracing data size");
                Some(("tracing data", u64::from(n.map_err(|_| too_small(12))?)))
            }
            _ => None,
        };
        if let Some((what, n)) = payload {
            c.skip(n, what)?;
        }
        self.c = c;
        Ok(Record {
            offset,
            kind,
            misc,
            bytes,
        })
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, PerfDataError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.c.remaining() == 0 {
            return None;
        }
        let r = self.next_record();
        self.failed = r.is_err();
        Some(r)
    }
}

/// The fields of an MMAP or MMAP2 record that decide whether it is renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping<'a> {
    /// Process id.
    pub pid: u32,
    /// First address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// True for executable code.
    pub executable: bool,
    /// The file name (without its NUL).
    pub name: &'a [u8],
    /// Offset of the name in the record.
    name_offset: usize,
    /// The device/inode union to zero (MMAP2 without a build id).
    zero_id: bool,
}

impl<'a> Mapping<'a> {
    /// The mapping an MMAP or MMAP2 record describes (`None` for other records).
    pub fn of(record: &Record<'a>, order: ByteOrder) -> Result<Option<Mapping<'a>>, PerfDataError> {
        let b = record.bytes;
        let fields = Cursor::new(b).with_endian(order.into());
        let (name_offset, executable, zero_id) = match record.kind {
            record_type::MMAP => (MMAP_NAME, record.misc & MISC_MMAP_DATA == 0, false),
            record_type::MMAP2 => {
                let prot = fields.at(MMAP2_PROT).read_u32("MMAP2 prot");
                let prot = prot.map_err(|_| PerfDataError::RecordTooSmall {
                    offset: record.offset,
                    kind: record.kind,
                    size: b.len() as u16,
                    min: MMAP2_NAME + 1,
                })?;
                let build_id = record.misc & MISC_MMAP_BUILD_ID != 0;
                (MMAP2_NAME, prot & PROT_EXEC != 0, !build_id)
            }
            _ => return Ok(None),
        };
        let tail = b.get(name_offset..).filter(|t| !t.is_empty()).ok_or(
            PerfDataError::RecordTooSmall {
                offset: record.offset,
                kind: record.kind,
                size: b.len() as u16,
                min: name_offset + 1,
            },
        )?;
        let nul = memchr::memchr(0, tail).ok_or(PerfDataError::UnterminatedName {
            offset: record.offset,
        })?;
        // The name offset is past these fields, so they are there.
        let u64_at = |at| fields.at(at).read_u64("mapping field").unwrap_or(0);
        let pid = fields.at(8).read_u32("mapping pid").unwrap_or(0);
        Ok(Some(Mapping {
            pid,
            start: u64_at(16),
            len: u64_at(24),
            executable,
            name: &tail[..nul],
            name_offset,
            zero_id,
        }))
    }
}

/// What renamed mappings held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingKind {
    /// JIT'ed code in the runtime's W^X double mapping (`/memfd:doublemapper`).
    JitCode,
    /// Executable part of a `*.dll` image: ReadyToRun code.
    Image,
}

/// Which mappings to rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewriteOptions {
    /// Also rename executable mappings of `*.dll` files (ReadyToRun code, which perf cannot
    /// name from the image; the perf map names the methods the runtime has prepared).
    pub images: bool,
}

impl Default for RewriteOptions {
    fn default() -> Self {
        RewriteOptions { images: true }
    }
}

/// Which kind of mapping `name` is, if one that gets renamed.
pub fn classify(name: &[u8], options: &RewriteOptions) -> Option<MappingKind> {
    if name.starts_with(DOUBLE_MAPPER_PREFIX) {
        return Some(MappingKind::JitCode);
    }
    // A replaced or removed image keeps its mapping under "NAME (deleted)".
    let file = name.strip_suffix(b" (deleted)").unwrap_or(name);
    let is_dll = file.len() > 4 && file[file.len() - 4..].eq_ignore_ascii_case(b".dll");
    (options.images && is_dll).then_some(MappingKind::Image)
}

/// Bytes to write at an offset of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// Offset in the file.
    pub offset: u64,
    /// The new bytes.
    pub bytes: Vec<u8>,
}

/// Renamed mappings of one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PidRewrites {
    /// JIT code mappings (the W^X double mapping) renamed.
    pub jit_code: u64,
    /// ReadyToRun image mappings renamed.
    pub images: u64,
}

impl PidRewrites {
    /// Mappings renamed in all.
    pub fn total(&self) -> u64 {
        self.jit_code + self.images
    }
}

/// What a rewrite changes, found by [`plan_rewrite`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewritePlan {
    /// The file's header.
    pub header: Header,
    /// Records walked.
    pub records: u64,
    /// MMAP and MMAP2 records among them.
    pub mappings: u64,
    /// Mappings that matched but were left alone because they are not executable (the
    /// writable view of the double mapping, recorded with `perf record -d`).
    pub skipped_not_executable: u64,
    /// Mappings that matched but whose name is too short to hold `//anon`.
    pub skipped_short_name: u64,
    /// Renamed mappings per process id.
    pub by_pid: BTreeMap<u32, PidRewrites>,
    /// The patches, in file order, none overlapping another.
    pub patches: Vec<Patch>,
}

impl RewritePlan {
    /// Mappings renamed in all.
    pub fn rewritten(&self) -> u64 {
        self.by_pid.values().map(PidRewrites::total).sum()
    }
}

/// Walks a whole perf.data and plans the patches that rename its .NET code mappings to
/// `//anon` (see the module documentation). Nothing is changed; apply the patches to the
/// file, or write it out through [`patched_chunks`].
pub fn plan_rewrite(bytes: &[u8], options: &RewriteOptions) -> Result<RewritePlan, PerfDataError> {
    let header = Header::parse(bytes)?;
    let order = header.order;
    let mut plan = RewritePlan {
        header: header.clone(),
        records: 0,
        mappings: 0,
        skipped_not_executable: 0,
        skipped_short_name: 0,
        by_pid: BTreeMap::new(),
        patches: Vec::new(),
    };
    for record in Records::new(bytes, &header) {
        let record = record?;
        plan.records += 1;
        if matches!(
            record.kind,
            record_type::COMPRESSED | record_type::COMPRESSED2
        ) {
            return Err(PerfDataError::Compressed {
                offset: Some(record.offset),
            });
        }
        let Some(m) = Mapping::of(&record, order)? else {
            continue;
        };
        plan.mappings += 1;
        let Some(kind) = classify(m.name, options) else {
            continue;
        };
        if !m.executable {
            plan.skipped_not_executable += 1;
            continue;
        }
        if m.name.len() < ANON.len() {
            plan.skipped_short_name += 1;
            continue;
        }
        if m.zero_id {
            plan.patches.push(Patch {
                offset: record.offset + MMAP2_ID.start as u64,
                bytes: vec![0; MMAP2_ID.len()],
            });
        }
        let mut name = vec![0; m.name.len()];
        name[..ANON.len()].copy_from_slice(ANON);
        plan.patches.push(Patch {
            offset: record.offset + m.name_offset as u64,
            bytes: name,
        });
        let counts = plan.by_pid.entry(m.pid).or_default();
        match kind {
            MappingKind::JitCode => counts.jit_code += 1,
            MappingKind::Image => counts.images += 1,
        }
    }
    Ok(plan)
}

/// The bytes of `input` with `patches` (in file order, not overlapping, as
/// [`plan_rewrite`] makes them) applied, as a sequence of slices to write out in order.
/// Patches that do not fit inside `input` are left out.
pub fn patched_chunks<'a>(input: &'a [u8], patches: &'a [Patch]) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(2 * patches.len() + 1);
    let mut pos = 0usize;
    for p in patches {
        let Ok(start) = usize::try_from(p.offset) else {
            continue;
        };
        let end = start.checked_add(p.bytes.len());
        if start < pos || end.is_none_or(|e| e > input.len()) {
            continue;
        }
        out.push(&input[pos..start]);
        out.push(&p.bytes[..]);
        pos = start + p.bytes.len();
    }
    out.push(&input[pos..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_classified_by_prefix_and_extension() {
        let all = RewriteOptions { images: true };
        let jit_only = RewriteOptions { images: false };
        assert_eq!(
            classify(b"/memfd:doublemapper (deleted)", &jit_only),
            Some(MappingKind::JitCode)
        );
        assert_eq!(
            classify(b"/usr/share/dotnet/System.Private.CoreLib.dll", &all),
            Some(MappingKind::Image)
        );
        assert_eq!(
            classify(b"/app/App.DLL (deleted)", &all),
            Some(MappingKind::Image)
        );
        assert_eq!(classify(b"/app/App.dll", &jit_only), None);
        assert_eq!(classify(b"/usr/lib/libcoreclr.so", &all), None);
        assert_eq!(classify(b"//anon", &all), None);
        assert_eq!(classify(b".dll", &all), None);
    }

    #[test]
    fn chunks_splice_patches_in_order() {
        let input = b"0123456789";
        let patches = [
            Patch {
                offset: 2,
                bytes: b"ab".to_vec(),
            },
            Patch {
                offset: 7,
                bytes: b"xyz".to_vec(),
            },
            // Past the end: left out.
            Patch {
                offset: 9,
                bytes: b"qq".to_vec(),
            },
        ];
        let joined: Vec<u8> = patched_chunks(input, &patches).concat();
        assert_eq!(joined, b"01ab456xyz");
    }
}
