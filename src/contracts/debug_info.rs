//! Debug info of managed code: the map from native offsets to IL offsets ("bounds") that
//! the JIT and crossgen2 record for each method, as the DebugInfo contract reads it.
//!
//! Up to .NET 10 (cdac's version 1) a blob (address from the ExecutionManager's
//! `GetDebugInfo`) is laid out as:
//! 1. for JIT'ed code when the runtime says so (`DebugInfoRef::has_flag_byte`: on-stack
//!    replacement compiled in, or rich debug info stored; see [`native_map`] for when
//!    that cannot be read), a flag byte: bit 0, a
//!    `PatchpointInfo` follows (its size: the type's size plus 4 bytes per local); bit 1,
//!    rich debug info follows (a u32 length, then that many bytes);
//! 2. a header of nibble-encoded numbers: the size of the bounds, then of the variables; or
//!    (when the JIT kept uninstrumented bounds) the marker `0xFFFFFFFF`, the size of the bounds, of the
//!    uninstrumented bounds, then of the variables;
//! 3. the bounds, then the rest.
//!
//! .NET 11 (DebugInfo "c1", cdac's version 2) has no flag byte: its header is either slim
//! (the size of the bounds, then of the variables) or fat (a 0, then the sizes of the
//! bounds, variables, uninstrumented bounds, patchpoint info, rich debug info and async
//! info), and the chunks follow in that order.
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
//!   instruction, bit 1 stack empty), the native delta, the IL offset + 3;
//! - .NET 11 ([`BoundsEncoding::PackedAsync`]): the same with 3 source-type bits (bit 2:
//!   an async suspension point).
//!
//! IL offsets −1, −2, −3 are the special values NO_MAPPING, PROLOG and EPILOG.

use serde::Serialize;

use super::execution_manager::{CodeBlock, ExecutionManager};
use super::registry::{self, Contract, ContractContext};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;

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
    /// .NET 11: the same with a third source-type bit (async suspension point).
    PackedAsync,
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
    /// The blob's header is .NET 11's (no flag byte; slim, or a 0 then six chunk sizes).
    pub chunked_header: bool,
}

/// `PatchpointInfo` of 64-bit .NET 8 and 9: callee-saved register mask (u64), count of
/// locals, total frame size, four frame offsets (32-bit each), then a 32-bit word per local.
const PATCHPOINT_NET8: (u64, u64) = (32, 8);
/// .NET 10 adds a pointer after the register mask.
const PATCHPOINT_NET10: (u64, u64) = (40, 16);

impl Contract for DebugInfoFormat {
    const NAME: &'static str = "DebugInfo";
    const VERSIONS: &'static [u64] = &[1, 2];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            1 => Ok(DebugInfoFormat::for_runtime(
                &context.descriptor,
                context.major,
            )),
            2 => Ok(DebugInfoFormat::chunked(&context.descriptor)),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }

    // .NET 8 and 9 do not name the contract; their format follows from their version.
    fn when_absent(context: &ContractContext) -> Option<Result<Self, ContractError>> {
        Some(Ok(DebugInfoFormat::for_runtime(
            &context.descriptor,
            context.major,
        )))
    }
}

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
            chunked_header: false,
        }
    }

    /// .NET 11's format (version 2): chunked header, three source-type bits. Patchpoint
    /// info is a chunk of its own, so its layout is not needed to skip it.
    pub fn chunked(descriptor: &DataDescriptor) -> DebugInfoFormat {
        DebugInfoFormat {
            encoding: BoundsEncoding::PackedAsync,
            chunked_header: true,
            ..DebugInfoFormat::for_runtime(descriptor, Some(10))
        }
    }

    /// Whether a JIT'ed method's blob may start with a flag byte (versions before .NET
    /// 11).
    pub fn has_flag_byte_format(&self) -> bool {
        !self.chunked_header
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
    /// An async method's suspension point (.NET 11's encoding only).
    pub async_suspension: bool,
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
                        async_suspension: false,
                    },
                });
            }
            exact(addr, r.next_byte(), bytes)?;
        }
        BoundsEncoding::Packed | BoundsEncoding::PackedAsync => {
            let source_bits: u32 = if encoding == BoundsEncoding::PackedAsync {
                3
            } else {
                2
            };
            let native_bits = r.u32()?.saturating_add(1);
            let il_bits = r.u32()?.saturating_add(1);
            if native_bits > 32 || il_bits > 32 {
                return Err(corrupt(
                    addr,
                    format!("{native_bits} bits per native delta, {il_bits} per IL offset"),
                ));
            }
            let per_entry = source_bits + native_bits + il_bits;
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
                let st = (entry & ((1u128 << source_bits) - 1)) as u32;
                let delta = ((entry >> source_bits) & ((1u128 << native_bits) - 1)) as u32;
                let il = ((entry >> (source_bits + native_bits)) & ((1u128 << il_bits) - 1)) as u32;
                native = native
                    .checked_add(delta)
                    .ok_or_else(|| corrupt(addr, "native offset overflows".into()))?;
                out.push(OffsetMapping {
                    native_offset: native,
                    il_offset: IlOffset::from_raw(il.wrapping_sub(3)),
                    source: SourceType {
                        call_instruction: st & 1 != 0,
                        stack_empty: st & 2 != 0,
                        async_suspension: st & 4 != 0,
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
    if format.chunked_header {
        // At most 7 numbers of at most 11 nibbles each.
        let header = read_up_to(target, address, 42)?;
        let mut r = Nibbles::new(&header, address);
        let first = r.u32()?;
        let bounds = if first == 0 {
            // Fat: bounds, vars, uninstrumented bounds, patchpoint, rich, async sizes.
            let bounds = r.u32()?;
            for _ in 0..5 {
                r.u32()?;
            }
            bounds
        } else {
            let _vars = r.u32()?;
            first
        };
        let start = address.wrapping_add(r.next_byte() as u64);
        return Ok(Some((start, u64::from(bounds))));
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

/// Up to `len` bytes at `addr`: fewer when the memory ends sooner (at least one).
fn read_up_to(target: &Target, addr: u64, len: usize) -> Result<Vec<u8>, ContractError> {
    if let Ok(b) = target.read_bytes(addr, len) {
        return Ok(b);
    }
    let mut out = vec![target.read_u8(addr)?];
    for i in 1..len as u64 {
        match target.read_u8(addr.wrapping_add(i)) {
            Ok(b) => out.push(b),
            Err(_) => break,
        }
    }
    Ok(out)
}

/// The native-to-IL map of the method `block` is in, in native-offset order (the
/// `GetMethodNativeMap` of the DebugInfo contract); empty when it has no debug info.
///
/// When the ExecutionManager cannot tell whether the blob starts with a flag byte (the
/// runtime's `StoreRichDebugInfo` setting is not in the dump; with on-stack replacement it
/// already answers yes), the blob decides: a flag byte holds only the format's two flags
/// (values 0 to 3), and with the blob read that way its header and bounds must decode in
/// full; otherwise it is read without one. The flag byte is tried first because a blob
/// that has one and whose flags are 0 would also read, wrongly, as a blob without bounds.
pub fn native_map(
    target: &Target,
    em: &dyn ExecutionManager,
    block: &CodeBlock,
    format: &DebugInfoFormat,
) -> Result<Vec<OffsetMapping>, ContractError> {
    let info = em.debug_info(block)?;
    if format.chunked_header {
        return map_at(target, info.address, false, format);
    }
    match info.has_flag_byte {
        Ok(flag) => map_at(target, info.address, flag, format),
        Err(_) if info.address == 0 => Ok(Vec::new()),
        Err(_) => {
            if target.read_u8(info.address)? <= 3 {
                if let Ok(map) = map_at(target, info.address, true, format) {
                    return Ok(map);
                }
            }
            map_at(target, info.address, false, format)
        }
    }
}

/// The mappings of the blob at `address` (0: none).
fn map_at(
    target: &Target,
    address: u64,
    has_flag_byte: bool,
    format: &DebugInfoFormat,
) -> Result<Vec<OffsetMapping>, ContractError> {
    let Some((start, size)) = bounds_location(target, address, has_flag_byte, format)? else {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Nibble-encodes numbers the way the runtime's NibbleWriter does.
    fn nibbles(values: &[u32]) -> Vec<u8> {
        let mut ns: Vec<u8> = Vec::new();
        for &v in values {
            let mut groups = vec![(v & 7) as u8];
            let mut rest = v >> 3;
            while rest != 0 {
                groups.push((rest & 7) as u8 | 8);
                rest >>= 3;
            }
            ns.extend(groups.iter().rev());
        }
        ns.chunks(2)
            .map(|c| c[0] | (c.get(1).copied().unwrap_or(0) << 4))
            .collect()
    }

    #[test]
    fn nibble_numbers() {
        // The runtime's examples: 0 → x0, 7 → x7, 8 → 0x09, 63 → 0x7F, 64 → 89 x0.
        assert_eq!(nibbles(&[8]), [0x09]);
        assert_eq!(nibbles(&[63]), [0x7f]);
        assert_eq!(nibbles(&[64]), [0x89, 0x00]);
        assert_eq!(nibbles(&[512]), [0x89, 0x08]);
        let mut r = Nibbles::new(&[0x89, 0x08, 0x7f], 0);
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (512, 63));
        let big = nibbles(&[u32::MAX, 5]);
        let mut r = Nibbles::new(&big, 0);
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (u32::MAX, 5));
    }

    #[test]
    fn nibble_bounds() {
        // (native, il, source): prolog at 0, IL 0 at 4, a call at 9 (IL 6), epilog at 20.
        let bytes = nibbles(&[
            4,
            0,
            (-2i32 as u32).wrapping_add(3),
            0,
            4,
            3,
            1 | 2,
            5,
            9,
            16 | 4,
            11,
            0,
            8,
        ]);
        let map = decode_bounds(&bytes, 0x1000, BoundsEncoding::Nibble).unwrap();
        let got: Vec<_> = map
            .iter()
            .map(|m| (m.native_offset, m.il_offset, m.source.call_instruction))
            .collect();
        assert_eq!(
            got,
            [
                (0, IlOffset::Prolog, false),
                (4, IlOffset::Il(0), false),
                (9, IlOffset::Il(6), true),
                (20, IlOffset::Epilog, false),
            ]
        );
        assert!(map[1].source.sequence_point && map[1].source.stack_empty);
        assert!(map[2].source.call_site);
        // The mapping of a return address one past a call at 9..14: ip − 1 = 13.
        assert_eq!(mapping_at(&map, 13).unwrap().il_offset, IlOffset::Il(6));
        assert_eq!(mapping_at(&map, 3).unwrap().il_offset, IlOffset::Prolog);
        assert_eq!(mapping_at(&map, 25).unwrap().il_offset, IlOffset::Epilog);
        assert_eq!(mapping_at(&[], 3), None);
    }

    /// Bit-packs entries (source bits, native delta, IL + 3) as the .NET 10 writer does.
    fn packed(entries: &[(u8, u32, u32)], native_bits: u32, il_bits: u32) -> Vec<u8> {
        packed_with(entries, 2, native_bits, il_bits)
    }

    /// Packed bounds with `source_bits` source-type bits per entry (2: .NET 10, 3: 11).
    fn packed_with(
        entries: &[(u8, u32, u32)],
        source_bits: u32,
        native_bits: u32,
        il_bits: u32,
    ) -> Vec<u8> {
        let mut out = nibbles(&[entries.len() as u32, native_bits - 1, il_bits - 1]);
        let (mut acc, mut have) = (0u128, 0u32);
        for &(st, delta, il) in entries {
            let v = u128::from(st)
                | (u128::from(delta) << source_bits)
                | (u128::from(il.wrapping_add(3)) << (source_bits + native_bits));
            acc |= v << have;
            have += source_bits + native_bits + il_bits;
            while have >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                have -= 8;
            }
        }
        if have > 0 {
            out.push(acc as u8);
        }
        out
    }

    #[test]
    fn packed_bounds() {
        let entries = [
            (0, 0, -2i32 as u32),
            (2, 7, 0),
            (1, 12, 0x1234),
            (3, 100, -1i32 as u32),
        ];
        let bytes = packed(&entries, 7, 32);
        let map = decode_bounds(&bytes, 0, BoundsEncoding::Packed).unwrap();
        let got: Vec<_> = map
            .iter()
            .map(|m| {
                (
                    m.native_offset,
                    m.il_offset,
                    m.source.call_instruction,
                    m.source.stack_empty,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, IlOffset::Prolog, false, false),
                (7, IlOffset::Il(0), false, true),
                (19, IlOffset::Il(0x1234), true, false),
                (119, IlOffset::NoMapping, true, true),
            ]
        );
        // Widest entries: 32 + 32 + 2 bits.
        let wide = packed(&[(1, u32::MAX, 0x7fff_0000)], 32, 32);
        let map = decode_bounds(&wide, 0, BoundsEncoding::Packed).unwrap();
        assert_eq!(map[0].native_offset, u32::MAX);
        assert_eq!(map[0].il_offset, IlOffset::Il(0x7fff_0000));
    }

    #[test]
    fn damaged_bounds_are_errors() {
        let corrupt = |r: Result<Vec<OffsetMapping>, ContractError>| {
            matches!(r, Err(ContractError::Corrupt { .. }))
        };
        // A count larger than the bytes can hold.
        assert!(corrupt(decode_bounds(
            &nibbles(&[1000, 1, 1]),
            0,
            BoundsEncoding::Packed
        )));
        assert!(corrupt(decode_bounds(
            &nibbles(&[1000, 1, 1]),
            0,
            BoundsEncoding::Nibble
        )));
        // More than 32 bits per field.
        assert!(corrupt(decode_bounds(
            &nibbles(&[1, 40, 1, 0]),
            0,
            BoundsEncoding::Packed
        )));
        // Entries running past the end.
        let mut short = packed(&[(0, 1, 1), (0, 1, 1), (0, 1, 1)], 8, 8);
        short.pop();
        assert!(corrupt(decode_bounds(&short, 0, BoundsEncoding::Packed)));
        // A number that never ends, and one over 32 bits.
        assert!(corrupt(decode_bounds(
            &[0xff; 8],
            0,
            BoundsEncoding::Nibble
        )));
        assert!(corrupt(decode_bounds(
            &[0x99, 0x99, 0x99, 0x99, 0x99, 0x01],
            0,
            BoundsEncoding::Nibble
        )));
        // Non-zero bytes after the entries.
        let mut tail = nibbles(&[1, 0, 3, 0]);
        tail.push(0x55);
        assert!(corrupt(decode_bounds(&tail, 0, BoundsEncoding::Nibble)));
        // A native offset that overflows.
        assert!(corrupt(decode_bounds(
            &nibbles(&[2, u32::MAX, 3, 0, 1, 3, 0]),
            0,
            BoundsEncoding::Nibble
        )));
        // Random bytes never panic.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for len in 0..3000usize {
            let bytes: Vec<u8> = (0..len % 64)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = decode_bounds(&bytes, 0, BoundsEncoding::Nibble);
            let _ = decode_bounds(&bytes, 0, BoundsEncoding::Packed);
        }
    }

    #[test]
    fn net11_chunked_headers_and_async_suspension_points() {
        use crate::memory::builder::MemoryBuilder;
        use crate::memory::DataLayout;
        let format = DebugInfoFormat {
            encoding: BoundsEncoding::PackedAsync,
            patchpoint_info_size: 40,
            patchpoint_local_count_offset: 16,
            chunked_header: true,
        };
        // IL 0 at 4; a call at 9 (IL 6) that is an async suspension point (bit 2).
        // (source bits, native delta, IL offset).
        let bounds = packed_with(&[(0, 4, 0), (1 | 4, 5, 6)], 3, 8, 8);
        let map = decode_bounds(&bounds, 0, BoundsEncoding::PackedAsync).unwrap();
        assert_eq!(map[1].native_offset, 9);
        assert_eq!(map[1].il_offset, IlOffset::Il(6));
        assert!(map[1].source.async_suspension && map[1].source.call_instruction);
        assert!(!map[0].source.async_suspension);
        // Fat header: 0, bounds, vars, uninstrumented, patchpoint, rich, async sizes; no
        // flag byte even for JIT'ed code. Slim: bounds, vars.
        for (header, what) in [
            (nibbles(&[0, bounds.len() as u32, 3, 0, 48, 5, 2]), "fat"),
            (nibbles(&[bounds.len() as u32, 3]), "slim"),
        ] {
            let mut blob = header.clone();
            blob.extend(&bounds);
            let mut b = MemoryBuilder::new(DataLayout::LE64);
            b.region(0x1000, blob.len()).bytes(0, &blob);
            let t = b.into_target();
            let (start, size) = bounds_location(&t, 0x1000, true, &format).unwrap().unwrap();
            assert_eq!(
                (start, size),
                (0x1000 + header.len() as u64, bounds.len() as u64),
                "{what}"
            );
        }
    }

    #[test]
    fn blob_headers() {
        use crate::memory::builder::MemoryBuilder;
        use crate::memory::DataLayout;
        let format = DebugInfoFormat {
            encoding: BoundsEncoding::Nibble,
            patchpoint_info_size: 40,
            patchpoint_local_count_offset: 16,
            chunked_header: false,
        };
        let bounds = nibbles(&[1, 0, 5, 0]);
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        // Flag byte 3: a PatchpointInfo with 2 locals (40 + 8 bytes), then 5 bytes of rich
        // info, then the header with uninstrumented bounds.
        let mut blob = vec![3u8];
        let mut pp = vec![0u8; 48];
        pp[16] = 2;
        blob.extend(pp);
        blob.extend(5u32.to_le_bytes());
        blob.extend([1, 2, 3, 4, 5]);
        let header_at = blob.len();
        blob.extend(nibbles(&[u32::MAX, bounds.len() as u32, 0, 0]));
        let bounds_at = blob.len();
        blob.extend(&bounds);
        b.region(0x1000, blob.len()).bytes(0, &blob);
        let t = b.into_target();
        let (start, size) = bounds_location(&t, 0x1000, true, &format).unwrap().unwrap();
        assert_eq!(
            (start, size),
            (0x1000 + bounds_at as u64, bounds.len() as u64)
        );
        // Without the flag byte the same header read from where it starts.
        let (start, _) = bounds_location(&t, 0x1000 + header_at as u64, false, &format)
            .unwrap()
            .unwrap();
        assert_eq!(start, 0x1000 + bounds_at as u64);
        // No debug info.
        assert_eq!(bounds_location(&t, 0, true, &format).unwrap(), None);
        // Unknown flag bits; an impossible count of locals.
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 64).bytes(0, &[0x04]);
        b.region(0x2000, 64).bytes(0, &[0x01]).u32(17, u32::MAX);
        let t = b.into_target();
        assert!(matches!(
            bounds_location(&t, 0x1000, true, &format),
            Err(ContractError::Corrupt { .. })
        ));
        assert!(matches!(
            bounds_location(&t, 0x2000, true, &format),
            Err(ContractError::Corrupt { .. })
        ));
    }
}
