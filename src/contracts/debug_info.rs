//! Debug info of managed code: the map from native offsets to IL offsets ("bounds") that
//! the JIT and crossgen2 record for each method, as the DebugInfo contract reads it.
//!
//! A blob (address from the ExecutionManager's `GetDebugInfo`) is laid out as:
//! 1. for JIT'ed code when the runtime says so (`DebugInfoRef::has_flag_byte`: on-stack
//!    replacement compiled in, or rich debug info stored), a flag byte: bit 0, a
//!    `PatchpointInfo` follows (its size: the type's size plus 4 bytes per local); bit 1,
//!    rich debug info follows (a u32 length, then that many bytes);
//! 2. a header of nibble-encoded numbers: the size of the bounds, then of the variables; or
//!    (when the JIT kept uninstrumented bounds) the marker `0xFFFFFFFF`, the size of the bounds, of the
//!    uninstrumented bounds, then of the variables;
//! 3. the bounds, then the rest.
//!
//! Nibble encoding: each 4-bit nibble carries 3 bits of the number, most significant
//! group first, and its bit 3 says that more nibbles follow; a byte's low nibble comes
//! first.
//!
//! The bounds are encoded two ways:
//! - up to .NET 9 ([`BoundsEncoding::Nibble`]): the count, then per entry the native
//!   offset's delta, the IL offset + 3, and the source-type flags (1 sequence point, 2 stack
//!   empty, 4 call site, 8 native end offset unknown, 16 call instruction), each a nibble
//!   number;
//! - from .NET 10 ([`BoundsEncoding::Packed`]): the count, the bits per native delta − 1,
//!   the bits per IL offset − 1 (nibble numbers), then from the next whole byte a
//!   little-endian bit stream of entries, each: 2 source-type bits (bit 0 call
//!   instruction, bit 1 stack empty), the native delta, the IL offset + 3.
//!
//! IL offsets −1, −2, −3 are the special values NO_MAPPING, PROLOG and EPILOG.

use serde::Serialize;

use super::execution_manager::{CodeBlock, ExecutionManager};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::target::Target;

/// Most bytes of bounds read for one method.
const MAX_BOUNDS_BYTES: u64 = 1 << 20;
/// Most bytes of rich debug info skipped (its length is read from the target).
const MAX_RICH_BYTES: u64 = 64 << 20;
/// Most locals a PatchpointInfo may describe.
const MAX_PATCHPOINT_LOCALS: u64 = 1 << 20;
/// Marker of the header with uninstrumented bounds.
const HAS_INSTRUMENTED_BOUNDS: u32 = 0xFFFF_FFFF;

/// How a runtime encodes its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BoundsEncoding {
    /// .NET 9 and earlier: three nibble numbers per entry.
    Nibble,
    /// .NET 10: fixed-width bit-packed entries with two source-type bits.
    Packed,
}

/// What the decoder needs to know of the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugInfoFormat {
    /// How bounds are encoded.
    pub encoding: BoundsEncoding,
    /// `sizeof(PatchpointInfo)` (without the per-local array), to skip patchpoint info.
    pub patchpoint_info_size: u64,
    /// Offset of `PatchpointInfo`'s count of locals.
    pub patchpoint_local_count_offset: u64,
}

/// `PatchpointInfo` of 64-bit .NET 8 and 9: callee-saved register mask (u64), count of
/// locals, total frame size, four frame offsets (32-bit each), then a 32-bit word per local.
const PATCHPOINT_NET8: (u64, u64) = (32, 8);
/// .NET 10 adds a pointer after the register mask.
const PATCHPOINT_NET10: (u64, u64) = (40, 16);

impl DebugInfoFormat {
    /// The format of a runtime of major version `major` (from its version string). The
    /// `PatchpointInfo` layout is the descriptor's when it describes one, else that of the
    /// version (.NET 8 and 9, or 10). An unknown version is taken as .NET 10 when the
    /// descriptor names a DebugInfo contract, else as .NET 8.
    pub fn for_runtime(descriptor: &DataDescriptor, major: Option<u32>) -> DebugInfoFormat {
        let encoding = match major {
            Some(m) if m <= 9 => BoundsEncoding::Nibble,
            Some(_) => BoundsEncoding::Packed,
            None if descriptor.contract("DebugInfo").is_some() => BoundsEncoding::Packed,
            None => BoundsEncoding::Nibble,
        };
        let by_version = match major {
            Some(m) if m <= 9 => PATCHPOINT_NET8,
            Some(_) => PATCHPOINT_NET10,
            None if encoding == BoundsEncoding::Packed => PATCHPOINT_NET10,
            None => PATCHPOINT_NET8,
        };
        let described = descriptor
            .ty("PatchpointInfo")
            .ok()
            .and_then(|t| Some((u64::from(t.size_if_known()?), t.offset("LocalCount").ok()?)));
        let (size, count) = described.unwrap_or(by_version);
        DebugInfoFormat {
            encoding,
            patchpoint_info_size: size,
            patchpoint_local_count_offset: count,
        }
    }
}

/// An IL offset of a mapping, or one of its special values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IlOffset {
    /// An offset in the method's IL.
    Il(u32),
    /// No IL maps here (`NO_MAPPING`, −1).
    NoMapping,
    /// The prolog (`PROLOG`, −2).
    Prolog,
    /// An epilog (`EPILOG`, −3).
    Epilog,
}

impl IlOffset {
    fn from_raw(raw: u32) -> IlOffset {
        match raw {
            0xFFFF_FFFF => IlOffset::NoMapping,
            0xFFFF_FFFE => IlOffset::Prolog,
            0xFFFF_FFFD => IlOffset::Epilog,
            n => IlOffset::Il(n),
        }
    }

    /// The offset in the IL, when this is one.
    pub fn il(self) -> Option<u32> {
        match self {
            IlOffset::Il(n) => Some(n),
            _ => None,
        }
    }
}

/// What the code at a mapping's native offset is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SourceType {
    /// The evaluation stack is empty here.
    pub stack_empty: bool,
    /// This is a call instruction.
    pub call_instruction: bool,
    /// A sequence point the debugger asked for (nibble encoding only).
    pub sequence_point: bool,
    /// A call site (nibble encoding only).
    pub call_site: bool,
}

/// One entry of a method's native-to-IL map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OffsetMapping {
    /// Offset in the method's native code where the mapping starts.
    pub native_offset: u32,
    /// The IL offset it maps to.
    pub il_offset: IlOffset,
    /// What the code there is.
    pub source: SourceType,
}

fn corrupt(addr: u64, detail: String) -> ContractError {
    ContractError::Corrupt {
        what: "debug info",
        addr,
        detail,
    }
}

/// Reads nibble-encoded numbers from a byte buffer.
struct Nibbles<'a> {
    bytes: &'a [u8],
    /// Index of the next nibble.
    next: usize,
    /// Address of `bytes[0]`, for errors.
    addr: u64,
}

impl<'a> Nibbles<'a> {
    fn new(bytes: &'a [u8], addr: u64) -> Self {
        Nibbles {
            bytes,
            next: 0,
            addr,
        }
    }

    fn nibble(&mut self) -> Result<u8, ContractError> {
        let byte = self.bytes.get(self.next / 2).ok_or_else(|| {
            corrupt(
                self.addr,
                format!("a number runs past the {} bytes", self.bytes.len()),
            )
        })?;
        let n = if self.next % 2 == 0 {
            byte & 0xf
        } else {
            byte >> 4
        };
        self.next += 1;
        Ok(n)
    }

    fn u32(&mut self) -> Result<u32, ContractError> {
        let mut v: u64 = 0;
        for _ in 0..12 {
            let n = self.nibble()?;
            v = (v << 3) | u64::from(n & 7);
            if n & 8 == 0 {
                return u32::try_from(v)
                    .map_err(|_| corrupt(self.addr, format!("number {v:#x} is over 32 bits")));
            }
        }
        Err(corrupt(
            self.addr,
            "a number of more than 12 nibbles".into(),
        ))
    }

    /// Offset of the first byte not (even partly) read.
    fn next_byte(&self) -> usize {
        self.next.div_ceil(2)
    }
}

/// Decodes bounds (`bytes`, read from `addr`) into mappings.
pub fn decode_bounds(
    bytes: &[u8],
    addr: u64,
    encoding: BoundsEncoding,
) -> Result<Vec<OffsetMapping>, ContractError> {
    let mut r = Nibbles::new(bytes, addr);
    let count = u64::from(r.u32()?);
    // Every entry takes at least 4 bits (packed) or 3 nibbles.
    if count > 2 * bytes.len() as u64 {
        return Err(corrupt(
            addr,
            format!("{count} entries in {} bytes of bounds", bytes.len()),
        ));
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut native: u32 = 0;
    match encoding {
        BoundsEncoding::Nibble => {
            for _ in 0..count {
                native = native
                    .checked_add(r.u32()?)
                    .ok_or_else(|| corrupt(addr, "native offset overflows".into()))?;
                let il = r.u32()?.wrapping_sub(3);
                let st = r.u32()?;
                out.push(OffsetMapping {
                    native_offset: native,
                    il_offset: IlOffset::from_raw(il),
                    source: SourceType {
                        sequence_point: st & 1 != 0,
                        stack_empty: st & 2 != 0,
                        call_site: st & 4 != 0,
                        call_instruction: st & 16 != 0,
                    },
                });
            }
            exact(addr, r.next_byte(), bytes)?;
        }
        BoundsEncoding::Packed => {
            let native_bits = r.u32()?.saturating_add(1);
            let il_bits = r.u32()?.saturating_add(1);
            if native_bits > 32 || il_bits > 32 {
                return Err(corrupt(
                    addr,
                    format!("{native_bits} bits per native delta, {il_bits} per IL offset"),
                ));
            }
            let per_entry = 2 + native_bits + il_bits;
            let mut at = r.next_byte();
            let mut acc: u128 = 0;
            let mut have: u32 = 0;
            while (out.len() as u64) < count {
                while have < per_entry {
                    let b = *bytes.get(at).ok_or_else(|| {
                        corrupt(
                            addr,
                            format!(
                                "{count} entries of {per_entry} bits run past {} bytes",
                                bytes.len()
                            ),
                        )
                    })?;
                    acc |= u128::from(b) << have;
                    have += 8;
                    at += 1;
                }
                let entry = acc & ((1u128 << per_entry) - 1);
                acc >>= per_entry;
                have -= per_entry;
                let st = (entry & 3) as u32;
                let delta = ((entry >> 2) & ((1u128 << native_bits) - 1)) as u32;
                let il = ((entry >> (2 + native_bits)) & ((1u128 << il_bits) - 1)) as u32;
                native = native
                    .checked_add(delta)
                    .ok_or_else(|| corrupt(addr, "native offset overflows".into()))?;
                out.push(OffsetMapping {
                    native_offset: native,
                    il_offset: IlOffset::from_raw(il.wrapping_sub(3)),
                    source: SourceType {
                        call_instruction: st & 1 != 0,
                        stack_empty: st & 2 != 0,
                        ..SourceType::default()
                    },
                });
            }
            exact(addr, at, bytes)?;
        }
    }
    Ok(out)
}

/// The bounds must fill their chunk: the writer sizes it exactly, but for zero bytes the
/// runtime sometimes leaves at its end.
fn exact(addr: u64, used: usize, bytes: &[u8]) -> Result<(), ContractError> {
    if bytes
        .get(used..)
        .is_some_and(|rest| rest.iter().all(|&b| b == 0))
    {
        Ok(())
    } else {
        Err(corrupt(
            addr,
            format!(
                "the bounds take {used} of their {} bytes, and the rest is not zero",
                bytes.len()
            ),
        ))
    }
}

/// Where a blob's bounds are: (address, size); `None` when the method has no debug info.
fn bounds_location(
    target: &Target,
    address: u64,
    has_flag_byte: bool,
    format: &DebugInfoFormat,
) -> Result<Option<(u64, u64)>, ContractError> {
    if address == 0 {
        return Ok(None);
    }
    let mut at = address;
    if has_flag_byte {
        let flags = target.read_u8(at)?;
        at = at.wrapping_add(1);
        if flags & !3 != 0 {
            return Err(corrupt(address, format!("unknown flag bits {flags:#x}")));
        }
        if flags & 1 != 0 {
            let locals =
                u64::from(target.read_u32(at.wrapping_add(format.patchpoint_local_count_offset))?);
            if locals > MAX_PATCHPOINT_LOCALS {
                return Err(corrupt(at, format!("patchpoint info with {locals} locals")));
            }
            at = at.wrapping_add(format.patchpoint_info_size + 4 * locals);
        }
        if flags & 2 != 0 {
            let len = u64::from(target.read_u32(at)?);
            if len > MAX_RICH_BYTES {
                return Err(corrupt(at, format!("rich debug info of {len} bytes")));
            }
            at = at.wrapping_add(4 + len);
        }
    }
    // At most 4 numbers of at most 11 nibbles each.
    let header = read_up_to(target, at, 24)?;
    let mut r = Nibbles::new(&header, at);
    let mut bounds = r.u32()?;
    if bounds == HAS_INSTRUMENTED_BOUNDS {
        bounds = r.u32()?;
        let _uninstrumented = r.u32()?;
    }
    let _vars = r.u32()?;
    let start = at.wrapping_add(r.next_byte() as u64);
    Ok(Some((start, u64::from(bounds))))
}

/// Up to `len` bytes at `addr`: fewer when the memory ends sooner.
fn read_up_to(target: &Target, addr: u64, len: usize) -> Result<Vec<u8>, ContractError> {
    let mut n = len;
    loop {
        match target.read_bytes(addr, n) {
            Ok(b) => return Ok(b),
            Err(e) if n <= 1 => return Err(e.into()),
            Err(_) => n /= 2,
        }
    }
}

/// The native-to-IL map of the method `block` is in, in native-offset order (the
/// `GetMethodNativeMap` of the DebugInfo contract); empty when it has no debug info.
pub fn native_map(
    target: &Target,
    em: &dyn ExecutionManager,
    block: &CodeBlock,
    format: &DebugInfoFormat,
) -> Result<Vec<OffsetMapping>, ContractError> {
    let info = em.debug_info(block)?;
    let Some((start, size)) = bounds_location(target, info.address, info.has_flag_byte, format)?
    else {
        return Ok(Vec::new());
    };
    if size == 0 {
        return Ok(Vec::new());
    }
    if size > MAX_BOUNDS_BYTES {
        return Err(corrupt(start, format!("{size} bytes of bounds")));
    }
    let bytes = target.read_bytes(start, size as usize)?;
    decode_bounds(&bytes, start, format.encoding)
}

/// The mapping that covers native offset `offset` in `map` (sorted by native offset): the
/// last entry starting at or before it. Where several entries start at the same offset,
/// one with a real IL offset is preferred.
pub fn mapping_at(map: &[OffsetMapping], offset: u32) -> Option<OffsetMapping> {
    let end = map.partition_point(|m| m.native_offset <= offset);
    let last = map[..end].last()?;
    map[..end]
        .iter()
        .rev()
        .take_while(|m| m.native_offset == last.native_offset)
        .find(|m| m.il_offset.il().is_some())
        .or(Some(last))
        .copied()
}

/// The IL offset the frame at `block.ip` is at. For a frame that is not the innermost one
/// the IP is a return address, and the mapping is chosen for `ip − 1` (the call).
/// `None` when the method has no debug info or no mapping covers the offset.
pub fn il_offset(
    target: &Target,
    em: &dyn ExecutionManager,
    block: &CodeBlock,
    format: &DebugInfoFormat,
    call_return: bool,
) -> Result<Option<OffsetMapping>, ContractError> {
    let map = native_map(target, em, block, format)?;
    let mut offset = block.relative_offset;
    if call_return {
        offset = offset.saturating_sub(1);
    }
    let Ok(offset) = u32::try_from(offset) else {
        return Ok(None);
    };
    Ok(mapping_at(&map, offset))
}
