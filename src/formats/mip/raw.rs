//! `.mipraw`: the counters an instrumented program dumps, one record per function.
//!
//! Records carry no length or count: how many block bytes each has comes from the
//! `.mipmap` (or the `.mip` made from it), so a raw file with block coverage can only be
//! read together with those counts, in file order.

use super::bytes::{PutLe, Reader};
use super::error::{MipError, Result};
use super::header::{FileKind, Header, ProfileFlags};

/// A coverage byte's value once the code ran: the compiler emits 0xFF and the
/// instrumentation stores zero.
pub const COVERED: u8 = 0x00;
/// A coverage byte's initial value.
pub const NOT_COVERED: u8 = 0xFF;
/// Call count and timestamp of a function that never ran.
pub const NEVER_CALLED: u32 = u32::MAX;

/// Which record layout a raw file uses; the header's profile type decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawRecordKind {
    /// One coverage byte, then the block bytes; no padding.
    Coverage,
    /// `u32` call count and `u32` timestamp, then the block bytes, padded to 4 bytes.
    CallCountTimestamp,
}

impl RawRecordKind {
    /// The layout for `profile_type`: coverage when only function coverage is recorded
    /// (block coverage aside), counters when timestamp and/or call count are.
    pub fn for_profile_type(profile_type: ProfileFlags) -> Result<RawRecordKind> {
        let coverage = profile_type.contains(ProfileFlags::FUNCTION_COVERAGE);
        let counters = profile_type.0
            & (ProfileFlags::FUNCTION_TIMESTAMP.0 | ProfileFlags::FUNCTION_CALL_COUNT.0)
            != 0;
        match (coverage, counters) {
            (true, false) => Ok(RawRecordKind::Coverage),
            (false, true) => Ok(RawRecordKind::CallCountTimestamp),
            _ => Err(MipError::UnsupportedRawProfileType {
                profile_type: profile_type.0,
            }),
        }
    }

    fn counters_size(self) -> usize {
        match self {
            RawRecordKind::Coverage => 1,
            RawRecordKind::CallCountTimestamp => 8,
        }
    }

    fn align(self) -> usize {
        match self {
            RawRecordKind::Coverage => 1,
            RawRecordKind::CallCountTimestamp => 4,
        }
    }

    /// Bytes of a record with `blocks` block bytes, padding excluded.
    fn unpadded_size(self, blocks: usize) -> usize {
        self.counters_size() + blocks
    }
}

/// The function-level counters of a record, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawCounters {
    /// The function coverage byte ([`COVERED`] once the function ran).
    Coverage(u8),
    /// Both [`NEVER_CALLED`] until the function runs.
    CallCountTimestamp {
        /// The call counter.
        call_count: u32,
        /// The timestamp counter.
        timestamp: u32,
    },
}

/// One function's raw record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// Function-level counters.
    pub counters: RawCounters,
    /// One coverage byte per non-entry block, as stored ([`COVERED`] once it ran).
    pub blocks: Vec<u8>,
}

impl RawRecord {
    /// Whether the function ran: a zero coverage byte, or a call count that is set and
    /// not zero.
    pub fn function_covered(&self) -> bool {
        match self.counters {
            RawCounters::Coverage(b) => b == COVERED,
            RawCounters::CallCountTimestamp { call_count, .. } => {
                call_count != NEVER_CALLED && call_count > 0
            }
        }
    }

    /// Whether each non-entry block ran.
    pub fn blocks_covered(&self) -> impl Iterator<Item = bool> + '_ {
        self.blocks.iter().map(|&b| b == COVERED)
    }

    fn kind(&self) -> RawRecordKind {
        match self.counters {
            RawCounters::Coverage(_) => RawRecordKind::Coverage,
            RawCounters::CallCountTimestamp { .. } => RawRecordKind::CallCountTimestamp,
        }
    }
}

/// A decoded `.mipraw` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawProfile {
    /// Its header (kind [`FileKind::Raw`]).
    pub header: Header,
    /// The records, in file order.
    pub records: Vec<RawRecord>,
    /// The file ends right after the last record's block bytes, without the padding that
    /// would follow (a dumped section can end so). False when the padding is there or the
    /// record needs none.
    pub last_unpadded: bool,
}

impl RawProfile {
    /// Reads a raw file whose records have `block_counts[i]` block bytes each, in file
    /// order (the map's or profile's [`raw_block_counts`](super::Profile::raw_block_counts)).
    /// Without block coverage in the header the counts are taken as zero, but their number
    /// is still the number of records. The records must end the file.
    pub fn parse(bytes: &[u8], block_counts: &[u32]) -> Result<RawProfile> {
        let header = Header::parse(bytes)?;
        header.expect_kind(FileKind::Raw)?;
        let kind = RawRecordKind::for_profile_type(header.profile_type)?;
        let with_blocks = header.profile_type.contains(ProfileFlags::BLOCK_COVERAGE);
        let mut r = Reader::new(bytes, header.data_offset());

        // Never reserve more records than the bytes left can hold.
        let cap = block_counts.len().min(r.remaining() / kind.counters_size());
        let mut records = Vec::with_capacity(cap);
        let mut last_unpadded = false;
        for (i, &count) in block_counts.iter().enumerate() {
            let at = r.pos();
            let counters = read_counters(&mut r, kind)?;
            let blocks = if with_blocks { u64::from(count) } else { 0 };
            let n = r.check_count(blocks, 1, at, "raw record block bytes")?;
            let blocks = r.take(n, "raw record block bytes")?.to_vec();
            let is_last = i + 1 == block_counts.len();
            let pad_start = r.pos();
            r.zero_pad(kind.align(), is_last, "raw record padding")?;
            if is_last && r.pos() == pad_start && pad_start % kind.align() != 0 {
                last_unpadded = true;
            } else if r.pos() % kind.align() != 0 {
                // The file ended part-way through the last record's padding.
                return Err(r.truncated(
                    "raw record padding",
                    r.pos().next_multiple_of(kind.align()) - r.pos(),
                ));
            }
            records.push(RawRecord { counters, blocks });
        }
        if r.remaining() != 0 {
            return Err(MipError::TrailingData {
                what: "last raw record",
                offset: r.pos(),
                count: r.remaining(),
            });
        }
        Ok(RawProfile {
            header,
            records,
            last_unpadded,
        })
    }

    /// Reads a raw file without block coverage, whose records all have the same size, so
    /// that their number follows from the file's length.
    pub fn parse_without_blocks(bytes: &[u8]) -> Result<RawProfile> {
        let header = Header::parse(bytes)?;
        header.expect_kind(FileKind::Raw)?;
        if header.profile_type.contains(ProfileFlags::BLOCK_COVERAGE) {
            return Err(MipError::NeedBlockCounts);
        }
        let kind = RawRecordKind::for_profile_type(header.profile_type)?;
        let mut r = Reader::new(bytes, header.data_offset());
        let size = kind.counters_size();
        let mut records = Vec::with_capacity(r.remaining() / size);
        while r.remaining() > 0 {
            records.push(RawRecord {
                counters: read_counters(&mut r, kind)?,
                blocks: Vec::new(),
            });
        }
        Ok(RawProfile {
            header,
            records,
            last_unpadded: false,
        })
    }

    /// The file offset of each record (what a map's raw profile offsets point to).
    pub fn record_offsets(&self) -> Vec<u64> {
        let align = RawRecordKind::for_profile_type(self.header.profile_type)
            .map(RawRecordKind::align)
            .unwrap_or(1);
        let mut at = self.header.data_offset();
        let mut offsets = Vec::with_capacity(self.records.len());
        for rec in &self.records {
            offsets.push(at as u64);
            at = (at + rec.kind().unpadded_size(rec.blocks.len())).next_multiple_of(align);
        }
        offsets
    }

    /// Encodes the file. Every record must match the header's record layout, and only a
    /// header with block coverage may have block bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if self.header.kind != FileKind::Raw {
            return Err(MipError::Unwritable {
                what: "raw profile header",
                detail: format!("file kind is {}", self.header.kind),
            });
        }
        let kind = RawRecordKind::for_profile_type(self.header.profile_type)?;
        let with_blocks = self
            .header
            .profile_type
            .contains(ProfileFlags::BLOCK_COVERAGE);
        let mut out = Vec::new();
        self.header.write(&mut out)?;
        for (i, rec) in self.records.iter().enumerate() {
            if rec.kind() != kind {
                return Err(MipError::Unwritable {
                    what: "raw record",
                    detail: format!("record {i} is {:?}, the header says {kind:?}", rec.kind()),
                });
            }
            if !with_blocks && !rec.blocks.is_empty() {
                return Err(MipError::Unwritable {
                    what: "raw record",
                    detail: format!(
                        "record {i} has block bytes but the header has no block coverage"
                    ),
                });
            }
            match rec.counters {
                RawCounters::Coverage(b) => out.put_u8(b),
                RawCounters::CallCountTimestamp {
                    call_count,
                    timestamp,
                } => {
                    out.put_u32(call_count);
                    out.put_u32(timestamp);
                }
            }
            out.extend_from_slice(&rec.blocks);
            if !(self.last_unpadded && i + 1 == self.records.len()) {
                out.pad_to(kind.align());
            }
        }
        Ok(out)
    }
}

fn read_counters(r: &mut Reader<'_>, kind: RawRecordKind) -> Result<RawCounters> {
    Ok(match kind {
        RawRecordKind::Coverage => RawCounters::Coverage(r.u8("raw record coverage byte")?),
        RawRecordKind::CallCountTimestamp => RawCounters::CallCountTimestamp {
            call_count: r.u32("raw record call count")?,
            timestamp: r.u32("raw record timestamp")?,
        },
    })
}
