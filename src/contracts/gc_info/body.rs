//! The GCInfo body, after the header: the safe-point table, the interruptible ranges and
//! the slot table, decoded eagerly by [`decode`]; the live states that follow them are
//! read on demand ([`live_slots`](super::live_slots)). See `contracts/GCInfo.md`.

use serde::Serialize;

use super::bit_reader::{BitReader, DEFAULT_MAX_BYTES};
use super::header::{decode_header, GcInfoHeader};
use super::platform::GcInfoArch;
use crate::contracts::ContractError;
use crate::limits::Limit;
use crate::memory::Target;

/// Cap on the registers, and separately on the tracked and the untracked stack slots, of
/// one method. Real methods have a few dozen; the JIT tracks at most a few thousand locals.
pub const MAX_SLOTS_PER_KIND: u64 = 1 << 16;

/// Slot flag: the slot holds an interior pointer (a byref).
pub const SLOT_INTERIOR: u8 = 0x1;
/// Slot flag: the object the slot points to is pinned.
pub const SLOT_PINNED: u8 = 0x2;

/// What a stack slot's offset is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StackBase {
    /// The caller's stack pointer (the stack pointer just before the call into this frame).
    CallerSp,
    /// This frame's stack pointer.
    Sp,
    /// The frame's stack base register (rbp on x64).
    FrameRegister,
}

impl StackBase {
    fn from_bits(bits: u64) -> Option<StackBase> {
        match bits {
            0 => Some(StackBase::CallerSp),
            1 => Some(StackBase::Sp),
            2 => Some(StackBase::FrameRegister),
            _ => None,
        }
    }
}

/// Where a slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotLocation {
    /// A register, by its number in the architecture's encoding (x64: 0 = rax).
    Register(u32),
    /// A stack slot: `offset` bytes from `base`.
    Stack {
        /// The base.
        base: StackBase,
        /// Offset in bytes (may be negative).
        offset: i32,
    },
}

/// One entry of the slot table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct GcSlot {
    /// Where it is.
    pub location: SlotLocation,
    /// [`SLOT_INTERIOR`] and [`SLOT_PINNED`].
    pub flags: u8,
    /// The slot is untracked: live throughout the method (except in funclet parents).
    pub untracked: bool,
}

impl GcSlot {
    /// The slot holds an interior pointer.
    pub fn is_interior(&self) -> bool {
        self.flags & SLOT_INTERIOR != 0
    }

    /// The slot's object is pinned.
    pub fn is_pinned(&self) -> bool {
        self.flags & SLOT_PINNED != 0
    }
}

/// A method's GC info with its body decoded up to the live states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcInfo {
    /// Address of the GC info (its first bit).
    pub address: u64,
    /// The header.
    pub header: GcInfoHeader,
    /// The safe points (call sites of partially interruptible code), as offsets in bytes
    /// of the instruction after the call (the return address), ascending. Versions 2 and 3
    /// store each one less than that; this list is normalized.
    pub safe_points: Vec<u32>,
    /// The fully interruptible ranges, `[start, end)` in bytes, ascending and disjoint.
    pub interruptible_ranges: Vec<(u32, u32)>,
    /// The slot table: registers, then tracked stack slots, then untracked slots.
    pub slots: Vec<GcSlot>,
    /// How many of `slots` are registers.
    pub num_registers: usize,
    /// How many are tracked (registers and tracked stack slots); the rest are untracked.
    pub num_tracked: usize,
    /// Bit position (from the GC info's start) of the first bit after the safe-point table.
    pub(super) safe_points_end_bit: u64,
    /// Bit position of the first bit after the slot table: where live states begin.
    pub(super) live_states_bit: u64,
    /// The safe points as stored (normalized, with the version 2–3 adjustment), for lookups.
    pub(super) stored_safe_points: Vec<u32>,
    /// The ranges in normalized code offsets.
    pub(super) norm_ranges: Vec<(u32, u32)>,
}

impl GcInfo {
    /// The GCInfo encoding.
    pub fn arch(&self) -> GcInfoArch {
        self.header.arch
    }

    /// Whether `offset` lies in a fully interruptible range.
    pub fn is_interruptible(&self, offset: u32) -> bool {
        self.interruptible_ranges
            .iter()
            .any(|&(s, e)| offset >= s && offset < e)
    }

    /// The index of the safe point whose return address is at `offset`.
    pub fn safe_point_index(&self, offset: u32) -> Option<usize> {
        let stored = self.stored_safe_point(offset)?;
        let i = self.stored_safe_points.partition_point(|&p| p < stored);
        (self.stored_safe_points.get(i) == Some(&stored)).then_some(i)
    }

    /// `offset` (a return address) as the safe-point table would store it.
    fn stored_safe_point(&self, offset: u32) -> Option<u32> {
        let shift = self.arch().code_offset_shift(self.header.version);
        if self.header.version >= 4 {
            (offset & ((1 << shift) - 1) == 0).then_some(offset >> shift)
        } else {
            offset.checked_sub(1).map(|o| o >> shift)
        }
    }

    /// Bits of one safe-point offset: enough for the method's (normalized) code length.
    pub(super) fn bits_per_safe_point(header: &GcInfoHeader) -> u32 {
        let shift = header.arch.code_offset_shift(header.version);
        ceil_log2(u64::from(header.code_length >> shift))
    }
}

/// The smallest `n` with `2^n >= x` (0 for x ≤ 1).
pub(super) fn ceil_log2(x: u64) -> u32 {
    if x <= 1 {
        0
    } else {
        64 - (x - 1).leading_zeros()
    }
}

/// Decodes the header and the body up to the live states of the GC info at `addr`,
/// written with GCInfo `version` (2 to 4) for `arch`.
pub fn decode(
    target: &Target,
    addr: u64,
    version: u32,
    arch: GcInfoArch,
) -> Result<GcInfo, ContractError> {
    if version < 2 {
        return Err(ContractError::UnsupportedVersion {
            contract: "GCInfo",
            version: version.to_string(),
            supported: "GCInfo body of versions 2 to 4".into(),
        });
    }
    let header = decode_header(target, addr, version, arch)?;
    let mut r = BitReader::new(target, addr, DEFAULT_MAX_BYTES);
    r.seek(header.header_bits)?;
    let shift = arch.code_offset_shift(version);
    // Every safe point and range is a distinct code offset.
    let norm_length = header.code_length >> shift;
    if header.num_safe_points > norm_length || header.num_interruptible_ranges > norm_length {
        return Err(r.corrupt(format!(
            "{} safe points and {} interruptible ranges in {} bytes of code",
            header.num_safe_points, header.num_interruptible_ranges, header.code_length
        )));
    }

    // Safe points.
    let bits = GcInfo::bits_per_safe_point(&header);
    let mut stored_safe_points = Vec::with_capacity(header.num_safe_points as usize);
    let mut safe_points = Vec::with_capacity(header.num_safe_points as usize);
    for _ in 0..header.num_safe_points {
        let stored = r.read_bits(bits)? as u32;
        if stored_safe_points.last().is_some_and(|&p| p > stored) {
            return Err(r.corrupt("safe points are not in ascending order"));
        }
        // A return address lies inside the code or at its end.
        if stored > norm_length {
            return Err(r.corrupt(format!(
                "safe point {stored} (stored) past the code's end ({norm_length})"
            )));
        }
        stored_safe_points.push(stored);
        let bytes = arch
            .denormalize_code_offset(version, u64::from(stored))
            .and_then(|b| {
                if version >= 4 {
                    Some(b)
                } else {
                    b.checked_add(1)
                }
            })
            .ok_or_else(|| r.corrupt("a safe point offset does not fit in 32 bits"))?;
        safe_points.push(bytes);
    }
    let safe_points_end_bit = r.bits_read();

    // Interruptible ranges: gaps and lengths, each from the end of the one before.
    let enc = arch.encoding();
    let mut norm_ranges = Vec::with_capacity(header.num_interruptible_ranges as usize);
    let mut interruptible_ranges = Vec::with_capacity(norm_ranges.capacity());
    let mut last_end = 0u64;
    for _ in 0..header.num_interruptible_ranges {
        let gap = r.decode_var_unsigned(enc.interruptible_range_delta1_encbase)?;
        let len = r.decode_var_unsigned(enc.interruptible_range_delta2_encbase)?;
        let start = last_end.saturating_add(gap);
        let end = start.saturating_add(len).saturating_add(1);
        if end > u64::from(norm_length) {
            return Err(r.corrupt(format!(
                "an interruptible range ends at {end} (normalized), past the code's end"
            )));
        }
        let (start, end) = (start as u32, end as u32);
        norm_ranges.push((start, end));
        let den = |v: u32| arch.denormalize_code_offset(version, u64::from(v));
        match (den(start), den(end)) {
            (Some(s), Some(e)) => interruptible_ranges.push((s, e)),
            _ => return Err(r.corrupt("an interruptible range does not fit in 32 bits")),
        }
        last_end = u64::from(end);
    }

    let (slots, num_registers, num_tracked) = slot_table(&mut r, arch)?;
    Ok(GcInfo {
        address: addr,
        header,
        safe_points,
        interruptible_ranges,
        slots,
        num_registers,
        num_tracked,
        safe_points_end_bit,
        live_states_bit: r.bits_read(),
        stored_safe_points,
        norm_ranges,
    })
}

/// Reads a slot count, refusing more than [`MAX_SLOTS_PER_KIND`].
fn slot_count(
    r: &mut BitReader<'_>,
    base: u32,
    what: &'static str,
) -> Result<usize, ContractError> {
    let n = r.decode_var_unsigned(base)?;
    if n > MAX_SLOTS_PER_KIND {
        return Err(ContractError::LimitExceeded {
            what,
            addr: r.start(),
            limit: Limit::Fixed,
            cap: MAX_SLOTS_PER_KIND,
            unit: "slots",
        });
    }
    Ok(n as usize)
}

/// The slot table: counts, then registers, tracked stack slots and untracked slots.
/// Returns the slots, the number of registers and the number of tracked slots.
fn slot_table(
    r: &mut BitReader<'_>,
    arch: GcInfoArch,
) -> Result<(Vec<GcSlot>, usize, usize), ContractError> {
    let enc = arch.encoding();
    let num_registers = if r.read_bit()? {
        slot_count(r, enc.num_registers_encbase, "GC info registers")?
    } else {
        0
    };
    let (num_stack, num_untracked) = if r.read_bit()? {
        let s = slot_count(r, enc.num_stack_slots_encbase, "GC info stack slots")?;
        let u = slot_count(
            r,
            enc.num_untracked_slots_encbase,
            "GC info untracked slots",
        )?;
        (s, u)
    } else {
        (0, 0)
    };
    let mut slots = Vec::with_capacity(num_registers + num_stack + num_untracked);

    // Registers: the first absolute; then, after a slot with flags, absolute with flags
    // again, else a delta (at least 1) keeping the flags (which are 0).
    let mut reg = 0u64;
    let mut flags = 0u8;
    for i in 0..num_registers {
        if i == 0 || flags != 0 {
            reg = r.decode_var_unsigned(enc.register_encbase)?;
            flags = r.read_bits(2)? as u8;
        } else {
            let delta = r.decode_var_unsigned(enc.register_delta_encbase)?;
            reg = reg
                .checked_add(delta)
                .and_then(|v| v.checked_add(1))
                .ok_or_else(|| r.corrupt("a register number overflows"))?;
        }
        let number = u32::try_from(reg).map_err(|_| r.corrupt(format!("register number {reg}")))?;
        slots.push(GcSlot {
            location: SlotLocation::Register(number),
            flags,
            untracked: false,
        });
    }
    stack_slots(r, arch, num_stack, false, &mut slots)?;
    stack_slots(r, arch, num_untracked, true, &mut slots)?;
    Ok((slots, num_registers, num_registers + num_stack))
}

/// `count` stack slots of one kind (tracked or untracked): each has its base; the first
/// an absolute offset and flags; the next ones, after a slot with flags, absolute with
/// flags again, else an unsigned delta keeping the flags.
fn stack_slots(
    r: &mut BitReader<'_>,
    arch: GcInfoArch,
    count: usize,
    untracked: bool,
    slots: &mut Vec<GcSlot>,
) -> Result<(), ContractError> {
    let enc = arch.encoding();
    let mut norm = 0i64;
    let mut flags = 0u8;
    for i in 0..count {
        let base_bits = r.read_bits(2)?;
        let base = StackBase::from_bits(base_bits)
            .ok_or_else(|| r.corrupt(format!("stack slot base {base_bits}")))?;
        if i == 0 || flags != 0 {
            norm = r.decode_var_signed(enc.stack_slot_encbase)?;
            flags = r.read_bits(2)? as u8;
        } else {
            let delta = r.decode_var_unsigned(enc.stack_slot_delta_encbase)?;
            norm = i64::try_from(delta)
                .ok()
                .and_then(|d| norm.checked_add(d))
                .ok_or_else(|| r.corrupt("a stack slot offset overflows"))?;
        }
        let offset = arch
            .denormalize_stack_slot(norm)
            .ok_or_else(|| r.corrupt(format!("stack slot {norm} (stored) is too large")))?;
        slots.push(GcSlot {
            location: SlotLocation::Stack { base, offset },
            flags,
            untracked,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_log2_values() {
        assert_eq!(ceil_log2(0), 0);
        assert_eq!(ceil_log2(1), 0);
        assert_eq!(ceil_log2(2), 1);
        assert_eq!(ceil_log2(3), 2);
        assert_eq!(ceil_log2(4), 2);
        assert_eq!(ceil_log2(5), 3);
        assert_eq!(ceil_log2(0x856e), 16);
    }
}
