//! The header every MIP file starts with, in its two layouts.

use std::fmt;

use super::bytes::{PutLe, Reader};
use super::error::{MipError, Result};
use crate::formats::cursor::Cursor;

/// `FB 'M' 'I' 'P'`.
pub const MAGIC: [u8; 4] = [0xFB, b'M', b'I', b'P'];
/// The newest format version; both layouts say it.
pub const VERSION: u16 = 8;

/// Which of the two header revisions a file uses (both carry version 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// 24 bytes, `OffsetToData` = 0x18 at 0x14; `FileType` 1 = raw, 2 = map, 3 = profile.
    Old,
    /// 32 bytes with an `i64 RawSectionOffset` at 0x10, `OffsetToData` = 0x20 at 0x1c;
    /// `FileType` is bit flags.
    New,
}

impl Layout {
    /// Size of the header, which is also where the data starts.
    pub const fn header_size(self) -> usize {
        match self {
            Layout::Old => 0x18,
            Layout::New => 0x20,
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Old => "24-byte (old)",
            Layout::New => "32-byte (new)",
        })
    }
}

/// What a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// `.mipraw`: the instrumented program's counters, dumped at exit.
    Raw,
    /// `.mipmap`: per-function info from the build, locating each raw record.
    Map,
    /// `.mip`: the merged profile.
    Profile,
    /// `.mipret`, call-edge samples (new layout only). Its body is not documented, so only
    /// its header can be read.
    CallEdgeSamples,
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Raw => ".mipraw",
            FileKind::Map => ".mipmap",
            FileKind::Profile => ".mip",
            FileKind::CallEdgeSamples => ".mipret",
        })
    }
}

/// The target word size flag of a new-layout `FileType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Width {
    /// Neither flag (always so in the old layout, and in `.mip` files).
    #[default]
    Unspecified,
    /// `0x10`: 64-bit target.
    Bits64,
    /// `0x20`: 32-bit target; `.mipmap` PC offsets and `RawSectionOffset` are 32-bit.
    Bits32,
}

/// The `ProfileType` bit set: what the instrumentation recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ProfileFlags(pub u32);

impl ProfileFlags {
    /// Whether each function ran.
    pub const FUNCTION_COVERAGE: ProfileFlags = ProfileFlags(0x1);
    /// Whether each basic block ran.
    pub const BLOCK_COVERAGE: ProfileFlags = ProfileFlags(0x2);
    /// When each function first ran.
    pub const FUNCTION_TIMESTAMP: ProfileFlags = ProfileFlags(0x4);
    /// How often each function ran.
    pub const FUNCTION_CALL_COUNT: ProfileFlags = ProfileFlags(0x8);
    /// Return-address instrumentation.
    pub const RETURN_ADDRESS: ProfileFlags = ProfileFlags(0x10);
    /// Every defined bit.
    pub const ALL: ProfileFlags = ProfileFlags(0x1F);

    /// Whether all bits of `other` are set.
    pub const fn contains(self, other: ProfileFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union.
    pub const fn union(self, other: ProfileFlags) -> ProfileFlags {
        ProfileFlags(self.0 | other.0)
    }
}

/// A decoded header. Every field is kept, so that a file writes back to the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Header {
    /// Which header revision.
    pub layout: Layout,
    /// The version field (8 in every file seen; never used to pick the layout).
    pub version: u16,
    /// What the file holds.
    pub kind: FileKind,
    /// Target word size flag; only the new layout has one.
    pub width: Width,
    /// What was recorded.
    pub profile_type: ProfileFlags,
    /// Low 32 bits of the MD5 of the link unit's name ([`super::module_hash`]).
    pub module_hash: u32,
    /// New layout, `.mipmap`: where the raw section starts, relative to the start of the map
    /// section. 0 elsewhere (the old layout has no such field).
    pub raw_section_offset: i64,
    /// The reserved field, kept as found.
    pub reserved: u32,
}

impl Header {
    /// A version-8 header with everything else zero or unspecified.
    pub fn new(
        layout: Layout,
        kind: FileKind,
        profile_type: ProfileFlags,
        module_hash: u32,
    ) -> Self {
        Header {
            layout,
            version: VERSION,
            kind,
            width: Width::Unspecified,
            profile_type,
            module_hash,
            raw_section_offset: 0,
            reserved: 0,
        }
    }

    /// Where the data after the header starts.
    pub const fn data_offset(&self) -> usize {
        self.layout.header_size()
    }

    /// Decodes the header at the start of `bytes`.
    ///
    /// The layout is decided by `OffsetToData` and `FileType`: 0x18 at offset 0x14 with a
    /// `FileType` of 1–3 is the old layout, else 0x20 at 0x1c is the new one. The old check
    /// comes first because in a new file offset 0x14 holds the upper half of
    /// `RawSectionOffset`, which is 0x18 only for a raw section 96 GiB away, while in an
    /// old file offset 0x1c is data and can hold anything.
    pub fn parse(bytes: &[u8]) -> Result<Header> {
        // A header cut short is told as a whole: what it needs from offset 0.
        let truncated = |needed: usize| {
            MipError::Truncated(Cursor::new(bytes).truncation("header", needed as u64))
        };
        let found = Cursor::new(bytes)
            .read_array::<4>("header")
            .map_err(|_| truncated(4))?;
        if found != MAGIC {
            return Err(MipError::BadMagic { found });
        }
        // Both layouts share the first 0x18 bytes; the shorter header must be all there.
        if bytes.len() < Layout::Old.header_size() {
            return Err(truncated(Layout::Old.header_size()));
        }
        let version = Reader::new(bytes, 4).u16("header version")?;
        let file_type = Reader::new(bytes, 6).u16("header file type")?;
        let at_0x14 = Reader::new(bytes, 0x14).u32("header offset to data")?;

        let old = at_0x14 == Layout::Old.header_size() as u32 && (1..=3).contains(&file_type);
        let layout = if old {
            Layout::Old
        } else {
            if bytes.len() < Layout::New.header_size() {
                return Err(truncated(Layout::New.header_size()));
            }
            let at_0x1c = Reader::new(bytes, 0x1c).u32("header offset to data")?;
            if at_0x1c != Layout::New.header_size() as u32 {
                if at_0x14 == Layout::Old.header_size() as u32 {
                    // Old OffsetToData with a file type the old layout does not define.
                    return Err(MipError::UnknownFileType {
                        layout: Layout::Old,
                        file_type,
                    });
                }
                return Err(MipError::UnknownLayout { at_0x14, at_0x1c });
            }
            Layout::New
        };

        if version > VERSION {
            return Err(MipError::UnsupportedVersion { version });
        }
        let (kind, width) = decode_file_type(layout, file_type)?;

        let mut r = Reader::new(bytes, 8);
        let profile_type = r.u32("header profile type")?;
        if profile_type & !ProfileFlags::ALL.0 != 0 {
            return Err(MipError::UnknownProfileType { profile_type });
        }
        let module_hash = r.u32("header module hash")?;
        let raw_section_offset = match (layout, width) {
            (Layout::Old, _) => 0,
            (Layout::New, Width::Bits32) => {
                let value = r.i32("header raw section offset")?;
                // The field is 8 bytes wide; a 32-bit target fills only the low half.
                r.zero_pad(8, false, "header raw section offset (upper half)")?;
                i64::from(value)
            }
            (Layout::New, _) => r.i64("header raw section offset")?,
        };
        let reserved = r.u32("header reserved")?;

        Ok(Header {
            layout,
            version,
            kind,
            width,
            profile_type: ProfileFlags(profile_type),
            module_hash,
            raw_section_offset,
            reserved,
        })
    }

    /// Checks that the header is of `kind`.
    pub fn expect_kind(&self, kind: FileKind) -> Result<()> {
        if self.kind == kind {
            Ok(())
        } else {
            Err(MipError::WrongFileKind {
                expected: kind,
                found: self.kind,
            })
        }
    }

    /// The `FileType` field this header writes.
    pub fn file_type(&self) -> Result<u16> {
        let unwritable = |detail: &str| MipError::Unwritable {
            what: "header file type",
            detail: detail.to_string(),
        };
        match self.layout {
            Layout::Old => {
                if self.width != Width::Unspecified {
                    return Err(unwritable("the old layout has no word-size flag"));
                }
                match self.kind {
                    FileKind::Raw => Ok(1),
                    FileKind::Map => Ok(2),
                    FileKind::Profile => Ok(3),
                    FileKind::CallEdgeSamples => {
                        Err(unwritable("the old layout has no call-edge sample files"))
                    }
                }
            }
            Layout::New => {
                let kind = match self.kind {
                    FileKind::Raw => 0x1,
                    FileKind::CallEdgeSamples => 0x2,
                    FileKind::Map => 0x4,
                    FileKind::Profile => 0x8,
                };
                let width = match self.width {
                    Width::Unspecified => 0,
                    Width::Bits64 => 0x10,
                    Width::Bits32 => 0x20,
                };
                Ok(kind | width)
            }
        }
    }

    /// Appends the encoded header to `out`.
    pub fn write(&self, out: &mut Vec<u8>) -> Result<()> {
        let file_type = self.file_type()?;
        if self.profile_type.0 & !ProfileFlags::ALL.0 != 0 {
            return Err(MipError::Unwritable {
                what: "header profile type",
                detail: format!("unknown bits in {:#x}", self.profile_type.0),
            });
        }
        out.extend_from_slice(&MAGIC);
        out.put_u16(self.version);
        out.put_u16(file_type);
        out.put_u32(self.profile_type.0);
        out.put_u32(self.module_hash);
        match (self.layout, self.width) {
            (Layout::Old, _) => {
                if self.raw_section_offset != 0 {
                    return Err(MipError::Unwritable {
                        what: "header raw section offset",
                        detail: "the old layout has no such field".into(),
                    });
                }
            }
            (Layout::New, Width::Bits32) => {
                let value =
                    i32::try_from(self.raw_section_offset).map_err(|_| MipError::Unwritable {
                        what: "header raw section offset",
                        detail: format!("{} does not fit in 32 bits", self.raw_section_offset),
                    })?;
                out.put_i32(value);
                out.put_u32(0);
            }
            (Layout::New, _) => out.put_i64(self.raw_section_offset),
        }
        out.put_u32(self.reserved);
        out.put_u32(self.layout.header_size() as u32);
        Ok(())
    }
}

fn decode_file_type(layout: Layout, file_type: u16) -> Result<(FileKind, Width)> {
    let unknown = MipError::UnknownFileType { layout, file_type };
    match layout {
        Layout::Old => match file_type {
            1 => Ok((FileKind::Raw, Width::Unspecified)),
            2 => Ok((FileKind::Map, Width::Unspecified)),
            3 => Ok((FileKind::Profile, Width::Unspecified)),
            _ => Err(unknown),
        },
        Layout::New => {
            // Exactly one kind bit, at most one width bit, nothing else.
            let kind = match file_type & 0x0F {
                0x1 => FileKind::Raw,
                0x2 => FileKind::CallEdgeSamples,
                0x4 => FileKind::Map,
                0x8 => FileKind::Profile,
                _ => return Err(unknown),
            };
            let width = match file_type & !0x0F {
                0 => Width::Unspecified,
                0x10 => Width::Bits64,
                0x20 => Width::Bits32,
                _ => return Err(unknown),
            };
            Ok((kind, width))
        }
    }
}
