//! `.mipmap`: what the compiler knows about each instrumented function (size, CFG
//! signature, block offsets, name), and where its raw record is.
//!
//! The compiler cannot subtract addresses across sections, so locations are stored as
//! PC-relative offsets from the entry itself and resolved here ([`MipMap::resolve`]).

use super::bytes::{fit_u32, PutLe, Reader};
use super::error::{MipError, Result};
use super::header::{FileKind, Header, Layout, Width};

/// The PC-relative location fields of an entry, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapPcOffsets {
    /// Old layout: three `i32`s, each the distance from the entry's start to the raw
    /// section's start, to the function's raw record, and to the function's code.
    Old {
        /// Offset of the raw section's start, relative to the record.
        raw_section_start: i32,
        /// Offset of the raw profile data, relative to the record.
        raw_profile: i32,
        /// Offset of the function, relative to the record.
        function: i32,
    },
    /// New layout: two offsets from the entry's start (8 bytes each, 4 on 32-bit
    /// targets), to the raw record and to the code; the raw section's start comes from
    /// the header's `RawSectionOffset`.
    New {
        /// Offset of the raw profile data, relative to the record.
        raw_profile: i64,
        /// Offset of the function, relative to the record.
        function: i64,
    },
}

/// One function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// Where the raw record and the code are.
    pub pc_offsets: MapPcOffsets,
    /// Bytes of code.
    pub function_size: u32,
    /// Hash of the function's control-flow graph; profiles of different CFGs do not mix.
    pub cfg_signature: u32,
    /// Offset of each non-entry block from the function's start.
    pub block_offsets: Vec<u32>,
    /// The (mangled) function name.
    pub name: String,
}

/// An entry's locations relative to the raw section's start (that is, offsets in the
/// `.mipraw` file, header included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedOffsets {
    /// Where the function's raw record is.
    pub raw_profile: i64,
    /// Where the function's code starts (usually negative: code precedes data).
    pub function: i64,
}

/// A decoded `.mipmap` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MipMap {
    /// Its header (kind [`FileKind::Map`]).
    pub header: Header,
    /// The entries, in file order.
    pub entries: Vec<MapEntry>,
    /// The file ends right after the last entry's name, without the padding that would
    /// follow (a section dumped with `llvm-objcopy` ends so). False when the padding is
    /// there or the entry needs none.
    pub last_unpadded: bool,
}

/// Sizes that depend on the layout and the target word size.
#[derive(Clone, Copy)]
struct EntryShape {
    old: bool,
    /// Bytes of each new-layout PC offset.
    word: usize,
    /// Entries start at multiples of this (a file offset).
    align: usize,
}

impl EntryShape {
    fn of(header: &Header) -> EntryShape {
        match (header.layout, header.width) {
            (Layout::Old, _) => EntryShape {
                old: true,
                word: 4,
                align: 8,
            },
            (Layout::New, Width::Bits32) => EntryShape {
                old: false,
                word: 4,
                align: 4,
            },
            (Layout::New, _) => EntryShape {
                old: false,
                word: 8,
                align: 8,
            },
        }
    }

    /// Bytes of an entry without blocks and name: offsets, size, CFG, block count, name
    /// length.
    fn fixed_size(self) -> usize {
        let offsets = if self.old { 12 } else { 2 * self.word };
        offsets + 4 * 4
    }
}

impl MipMap {
    /// Reads a map file: entries follow the header until the end of the input.
    pub fn parse(bytes: &[u8]) -> Result<MipMap> {
        let header = Header::parse(bytes)?;
        header.expect_kind(FileKind::Map)?;
        let shape = EntryShape::of(&header);
        let mut r = Reader::new(bytes, header.data_offset());
        // Each entry takes at least its fixed part, which bounds the reservation.
        let mut entries = Vec::with_capacity(r.remaining() / shape.fixed_size());
        let mut last_unpadded = false;
        while r.remaining() > 0 {
            entries.push(read_entry(&mut r, shape)?);
            let pad_start = r.pos();
            r.zero_pad(shape.align, true, "map entry padding")?;
            if r.remaining() == 0 && r.pos() % shape.align != 0 {
                if r.pos() != pad_start {
                    // Some padding, then the end: not a complete entry boundary.
                    return Err(r.truncated(
                        "map entry padding",
                        r.pos().next_multiple_of(shape.align) - r.pos(),
                    ));
                }
                last_unpadded = true;
            }
        }
        Ok(MipMap {
            header,
            entries,
            last_unpadded,
        })
    }

    /// Encodes the file.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if self.header.kind != FileKind::Map {
            return Err(MipError::Unwritable {
                what: "map header",
                detail: format!("file kind is {}", self.header.kind),
            });
        }
        let shape = EntryShape::of(&self.header);
        let mut out = Vec::new();
        self.header.write(&mut out)?;
        for (i, e) in self.entries.iter().enumerate() {
            match (e.pc_offsets, shape.old) {
                (
                    MapPcOffsets::Old {
                        raw_section_start,
                        raw_profile,
                        function,
                    },
                    true,
                ) => {
                    out.put_i32(raw_section_start);
                    out.put_i32(raw_profile);
                    out.put_i32(function);
                }
                (
                    MapPcOffsets::New {
                        raw_profile,
                        function,
                    },
                    false,
                ) => {
                    for v in [raw_profile, function] {
                        if shape.word == 4 {
                            out.put_i32(i32::try_from(v).map_err(|_| MipError::Unwritable {
                                what: "map entry PC offset",
                                detail: format!("{v} does not fit a 32-bit target's field"),
                            })?);
                        } else {
                            out.put_i64(v);
                        }
                    }
                }
                _ => {
                    return Err(MipError::Unwritable {
                        what: "map entry PC offsets",
                        detail: format!(
                            "entry {i} does not match the {} header",
                            self.header.layout
                        ),
                    })
                }
            }
            out.put_u32(e.function_size);
            out.put_u32(e.cfg_signature);
            out.put_u32(fit_u32(e.block_offsets.len(), "map entry block count")?);
            for &b in &e.block_offsets {
                out.put_u32(b);
            }
            out.put_u32(fit_u32(e.name.len(), "map entry name length")?);
            out.extend_from_slice(e.name.as_bytes());
            if !(self.last_unpadded && i + 1 == self.entries.len()) {
                out.pad_to(shape.align);
            }
        }
        Ok(out)
    }

    /// The file offset of each entry (what new-layout PC offsets are relative to).
    pub fn entry_offsets(&self) -> Vec<u64> {
        let shape = EntryShape::of(&self.header);
        let mut at = self.header.data_offset();
        let mut offsets = Vec::with_capacity(self.entries.len());
        for e in &self.entries {
            offsets.push(at as u64);
            at = (at + shape.fixed_size() + 4 * e.block_offsets.len() + e.name.len())
                .next_multiple_of(shape.align);
        }
        offsets
    }

    /// Each entry's raw record and code locations relative to the raw section's start.
    ///
    /// Old layout: the entry's own offsets minus its offset to the raw section. New
    /// layout: the entry's offsets minus (`RawSectionOffset` − the entry's file offset),
    /// since the header's offset is measured from the start of the map.
    pub fn resolve(&self) -> Result<Vec<ResolvedOffsets>> {
        self.entries
            .iter()
            .zip(self.entry_offsets())
            .map(|(e, at)| {
                let out_of_range = |value: i128| MipError::OffsetOutOfRange {
                    what: "map entry PC offset",
                    offset: at as usize,
                    value,
                };
                let (base, raw_profile, function) = match e.pc_offsets {
                    MapPcOffsets::Old {
                        raw_section_start,
                        raw_profile,
                        function,
                    } => (
                        i128::from(raw_section_start),
                        i128::from(raw_profile),
                        i128::from(function),
                    ),
                    MapPcOffsets::New {
                        raw_profile,
                        function,
                    } => (
                        i128::from(self.header.raw_section_offset) - i128::from(at),
                        i128::from(raw_profile),
                        i128::from(function),
                    ),
                };
                let to_i64 = |v: i128| i64::try_from(v).map_err(|_| out_of_range(v));
                Ok(ResolvedOffsets {
                    raw_profile: to_i64(raw_profile - base)?,
                    function: to_i64(function - base)?,
                })
            })
            .collect()
    }

    /// The block counts of the raw records in raw-file order (entries sorted by their raw
    /// offset), for [`RawProfile::parse`](super::RawProfile::parse).
    pub fn raw_block_counts(&self) -> Result<Vec<u32>> {
        let resolved = self.resolve()?;
        let mut pairs: Vec<(i64, u32)> = resolved
            .iter()
            .zip(&self.entries)
            .map(|(o, e)| {
                Ok((
                    o.raw_profile,
                    fit_u32(e.block_offsets.len(), "map entry block count")?,
                ))
            })
            .collect::<Result<_>>()?;
        pairs.sort_by_key(|&(offset, _)| offset);
        Ok(pairs.into_iter().map(|(_, n)| n).collect())
    }
}

fn read_entry(r: &mut Reader<'_>, shape: EntryShape) -> Result<MapEntry> {
    let pc_offsets = if shape.old {
        MapPcOffsets::Old {
            raw_section_start: r.i32("map entry raw section start PC offset")?,
            raw_profile: r.i32("map entry raw profile PC offset")?,
            function: r.i32("map entry function PC offset")?,
        }
    } else if shape.word == 4 {
        MapPcOffsets::New {
            raw_profile: i64::from(r.i32("map entry raw profile PC offset")?),
            function: i64::from(r.i32("map entry function PC offset")?),
        }
    } else {
        MapPcOffsets::New {
            raw_profile: r.i64("map entry raw profile PC offset")?,
            function: r.i64("map entry function PC offset")?,
        }
    };
    let function_size = r.u32("map entry function size")?;
    let cfg_signature = r.u32("map entry CFG signature")?;
    let at = r.pos();
    let count = r.u32("map entry non-entry block count")?;
    let count = r.check_count(u64::from(count), 4, at, "map entry block offsets")?;
    let mut block_offsets = Vec::with_capacity(count);
    for _ in 0..count {
        block_offsets.push(r.u32("map entry block offset")?);
    }
    let at = r.pos();
    let len = r.u32("map entry function name length")?;
    let name = r.name(u64::from(len), at, "map entry function name")?;
    Ok(MapEntry {
        pc_offsets,
        function_size,
        cfg_signature,
        block_offsets,
        name,
    })
}
