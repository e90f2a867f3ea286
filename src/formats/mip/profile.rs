//! `.mip`: the merged profile: per function, its counts, block coverage and call edges,
//! then a table of function names.

use std::collections::HashMap;

use super::bytes::{fit_u32, PutLe, Reader};
use super::error::{MipError, Result};
use super::header::{FileKind, Header};
use super::md5::md5_hash;
use crate::formats::cursor::Truncation;

/// How the names table's leading `u64` is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NamesEncoding {
    /// The table's size in bytes, as the format document defines `FunctionNamesLength`.
    #[default]
    ByteLength,
    /// The number of names, which is what LLVM's `llvm-mipdata` writes and reads.
    NameCount,
}

/// Coverage of one non-entry block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockProfile {
    /// Offset of the block from the function's start.
    pub offset: u32,
    /// Whether it ran.
    pub covered: bool,
}

/// One call edge: the callee's raw record and the return address, both relative to the
/// raw section (the format document reserves the entry; this is `CallEdge_t` of LLVM's
/// `MIPData.inc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallEdge {
    /// Raw-section offset of the callee's raw record.
    pub callee_raw_profile_offset: u32,
    /// Raw-section-relative return address of the call.
    pub return_address_offset: u32,
}

/// One function of a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileFunction {
    /// [`md5_hash`] of the function's name; the names table is matched by it.
    pub signature: u64,
    /// Where its record is in a `.mipraw` (file offset, header included).
    pub raw_profile_offset: u32,
    /// Where its code starts, relative to the raw section.
    pub function_start_offset: i32,
    /// Bytes of code.
    pub function_size: u32,
    /// Hash of its control-flow graph.
    pub cfg_signature: u32,
    /// How many merged raw profiles saw it run.
    pub merge_count: u32,
    /// Total calls (at least 1 once covered, with coverage-only instrumentation).
    pub call_count: u64,
    /// Sum of its first-call timestamps over the merged runs (ordering information).
    pub timestamp_sum: u64,
    /// The non-entry blocks (the entry block is implied: see [`ProfileFunction::covered`]).
    pub blocks: Vec<BlockProfile>,
    /// Its call edges.
    pub call_edges: Vec<CallEdge>,
}

impl ProfileFunction {
    /// Whether the function (its entry block) ran in any merged run.
    pub fn covered(&self) -> bool {
        self.call_count > 0 || self.merge_count > 0
    }

    /// Coverage of every block, the entry block first.
    pub fn block_coverage(&self) -> Vec<bool> {
        std::iter::once(self.covered())
            .chain(self.blocks.iter().map(|b| b.covered))
            .collect()
    }
}

/// A decoded `.mip` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Its header (kind [`FileKind::Profile`]).
    pub header: Header,
    /// The functions, in file order.
    pub functions: Vec<ProfileFunction>,
    /// The names table, in file order.
    pub names: Vec<String>,
    /// How the names table's length was (or is to be) written.
    pub names_encoding: NamesEncoding,
}

/// Bytes of a function without blocks and edges.
const FUNCTION_FIXED_SIZE: usize = 8 + 6 * 4 + 8 + 8 + 4;
const BLOCK_SIZE: usize = 5;
const EDGE_SIZE: usize = 8;

impl Profile {
    /// Reads a profile. The names table's length is taken as a byte length when it equals
    /// the bytes left, else as a name count (see [`NamesEncoding`]); either way every name
    /// ends with a NUL and the table ends the file.
    pub fn parse(bytes: &[u8]) -> Result<Profile> {
        let header = Header::parse(bytes)?;
        header.expect_kind(FileKind::Profile)?;
        let mut r = Reader::new(bytes, header.data_offset());

        let at = r.pos();
        let count = r.u64("profile count")?;
        let count = r.check_count(count, FUNCTION_FIXED_SIZE, at, "profile functions")?;
        let mut functions = Vec::with_capacity(count);
        for _ in 0..count {
            functions.push(read_function(&mut r)?);
        }

        let (names, names_encoding) = read_names(&mut r, bytes.len())?;
        Ok(Profile {
            header,
            functions,
            names,
            names_encoding,
        })
    }

    /// Encodes the file.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if self.header.kind != FileKind::Profile {
            return Err(MipError::Unwritable {
                what: "profile header",
                detail: format!("file kind is {}", self.header.kind),
            });
        }
        let mut out = Vec::new();
        self.header.write(&mut out)?;
        out.put_u64(self.functions.len() as u64);
        for f in &self.functions {
            out.put_u64(f.signature);
            out.put_u32(f.raw_profile_offset);
            out.put_i32(f.function_start_offset);
            out.put_u32(f.function_size);
            out.put_u32(f.cfg_signature);
            out.put_u32(fit_u32(f.blocks.len(), "profile block count")?);
            out.put_u32(f.merge_count);
            out.put_u64(f.call_count);
            out.put_u64(f.timestamp_sum);
            for b in &f.blocks {
                out.put_u32(b.offset);
                out.put_u8(u8::from(b.covered));
            }
            out.put_u32(fit_u32(f.call_edges.len(), "profile call edge count")?);
            for e in &f.call_edges {
                out.put_u32(e.callee_raw_profile_offset);
                out.put_u32(e.return_address_offset);
            }
        }

        let mut table = Vec::new();
        for name in &self.names {
            if name.contains('\0') {
                return Err(MipError::Unwritable {
                    what: "profile function name",
                    detail: format!("{name:?} contains a NUL, the table's terminator"),
                });
            }
            table.extend_from_slice(name.as_bytes());
            table.push(0);
        }
        out.put_u64(match self.names_encoding {
            NamesEncoding::ByteLength => table.len() as u64,
            NamesEncoding::NameCount => self.names.len() as u64,
        });
        out.extend_from_slice(&table);
        Ok(out)
    }

    /// Signature → name, for the names in the table.
    pub fn names_by_signature(&self) -> HashMap<u64, &str> {
        self.names
            .iter()
            .map(|n| (md5_hash(n), n.as_str()))
            .collect()
    }

    /// The name of `function`, if the table has one whose hash is its signature.
    pub fn name_of(&self, function: &ProfileFunction) -> Option<&str> {
        self.names
            .iter()
            .find(|n| md5_hash(n) == function.signature)
            .map(String::as_str)
    }

    /// The block counts of the raw records in raw-file order (functions sorted by raw
    /// offset, one per distinct offset), for [`RawProfile::parse`](super::RawProfile::parse).
    pub fn raw_block_counts(&self) -> Vec<u32> {
        let mut pairs: Vec<(u32, u32)> = self
            .functions
            .iter()
            .map(|f| (f.raw_profile_offset, f.blocks.len() as u32))
            .collect();
        pairs.sort_by_key(|&(offset, _)| offset);
        pairs.dedup_by_key(|&mut (offset, _)| offset);
        pairs.into_iter().map(|(_, n)| n).collect()
    }
}

fn read_function(r: &mut Reader<'_>) -> Result<ProfileFunction> {
    let signature = r.u64("profile function signature")?;
    let raw_profile_offset = r.u32("profile raw profile data offset")?;
    let function_start_offset = r.i32("profile function start offset")?;
    let function_size = r.u32("profile function size")?;
    let cfg_signature = r.u32("profile CFG signature")?;
    let blocks_at = r.pos();
    let block_count = r.u32("profile non-entry block count")?;
    let merge_count = r.u32("profile merge count")?;
    let call_count = r.u64("profile call count")?;
    let timestamp_sum = r.u64("profile timestamp sum")?;

    let n = r.check_count(
        u64::from(block_count),
        BLOCK_SIZE,
        blocks_at,
        "profile block profiles",
    )?;
    let mut blocks = Vec::with_capacity(n);
    for _ in 0..n {
        blocks.push(BlockProfile {
            offset: r.u32("profile block offset")?,
            covered: r.flag("profile block coverage")?,
        });
    }

    let at = r.pos();
    let edge_count = r.u32("profile call edge count")?;
    let n = r.check_count(u64::from(edge_count), EDGE_SIZE, at, "profile call edges")?;
    let mut call_edges = Vec::with_capacity(n);
    for _ in 0..n {
        call_edges.push(CallEdge {
            callee_raw_profile_offset: r.u32("profile call edge callee")?,
            return_address_offset: r.u32("profile call edge return address")?,
        });
    }

    Ok(ProfileFunction {
        signature,
        raw_profile_offset,
        function_start_offset,
        function_size,
        cfg_signature,
        merge_count,
        call_count,
        timestamp_sum,
        blocks,
        call_edges,
    })
}

fn read_names(r: &mut Reader<'_>, len: usize) -> Result<(Vec<String>, NamesEncoding)> {
    let at = r.pos();
    let value = r.u64("profile function names length")?;
    let start = r.pos();
    let available = r.remaining();
    if value > available as u64 {
        // Too long as a byte length, and too many as a count (each name takes a byte).
        return Err(MipError::NameLengthPastEnd {
            what: "profile function names",
            offset: at,
            length: value,
            available,
        });
    }
    let table = r.take(available, "profile function names")?;
    if value == available as u64 {
        let (names, _) = split_names(table, start, None)?;
        return Ok((names, NamesEncoding::ByteLength));
    }

    // `value` names, which must end exactly at the end of the file.
    let as_count = split_names(table, start, Some(value as usize)).and_then(|(names, used)| {
        if (names.len() as u64) < value {
            // Fewer names than the count says before the end of the file.
            Err(MipError::Truncated(Truncation {
                what: "profile function name",
                offset: (start + used) as u64,
                needed: 1,
                available: len.saturating_sub(start + used) as u64,
            }))
        } else if used != table.len() {
            Err(MipError::TrailingData {
                what: "profile names table",
                offset: start + used,
                count: len - (start + used),
            })
        } else {
            Ok(names)
        }
    });
    match as_count {
        Ok(names) => Ok((names, NamesEncoding::NameCount)),
        Err(count_error) => {
            // When the value is a byte length that ends on a name, the table is fine and
            // something follows it: say that rather than what the count reading hit.
            let end = value as usize;
            let whole_names =
                table[..end].last() == Some(&0) && split_names(&table[..end], start, None).is_ok();
            if whole_names {
                Err(MipError::TrailingData {
                    what: "profile names table",
                    offset: start + end,
                    count: len - (start + end),
                })
            } else {
                Err(count_error)
            }
        }
    }
}

/// NUL-terminated UTF-8 names from the start of `table` (at file offset `start`), up to
/// `limit` of them; the names and the bytes they took.
fn split_names(table: &[u8], start: usize, limit: Option<usize>) -> Result<(Vec<String>, usize)> {
    let mut names = Vec::new();
    let mut pos = 0;
    while pos < table.len() && limit.is_none_or(|n| names.len() < n) {
        let nul = table[pos..]
            .iter()
            .position(|&b| b == 0)
            .ok_or(MipError::UnterminatedName {
                offset: start + pos,
            })?;
        let name =
            std::str::from_utf8(&table[pos..pos + nul]).map_err(|_| MipError::NameNotUtf8 {
                what: "profile function name",
                offset: start + pos,
            })?;
        names.push(name.to_string());
        pos += nul + 1;
    }
    Ok((names, pos))
}
