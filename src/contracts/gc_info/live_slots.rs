//! The live slots at a code offset: the live-state part of the GC info body (partially
//! interruptible states per safe point, fully interruptible chunks), then the filters the
//! runtime applies when it reports a frame to the GC. See `contracts/GCInfo.md`.

use serde::Serialize;

use super::bit_reader::{BitReader, DEFAULT_MAX_BYTES};
use super::body::{GcInfo, GcSlot, SlotLocation, StackBase};
use super::platform::{GcInfoArch, CHUNK_OFFSETS, CHUNK_OFFSETS_LOG2};
use crate::contracts::ContractError;
use crate::memory::Target;

/// How the frame being asked about is reported (the runtime's `ICodeManagerFlags` that
/// the GC info decoder looks at).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcSlotOptions {
    /// The leaf (or interrupted) frame: scratch registers and the outgoing argument area
    /// are reported too.
    pub active_frame: bool,
    /// Execution will not resume in this frame: only fully interruptible information is
    /// used (a safe point's state is not).
    pub execution_aborted: bool,
    /// The frame is the parent of a funclet already reported: untracked slots are not
    /// reported, nor anything at all when the method wants only its leaf reported.
    pub parent_of_funclet: bool,
    /// Leave untracked slots out.
    pub suppress_untracked: bool,
    /// Report only slots relative to the frame register (no registers, no SP- or
    /// caller-SP-relative slots).
    pub fp_based_only: bool,
}

/// A slot reported live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct LiveSlot {
    /// Its index in the slot table ([`GcInfo::slots`]).
    pub index: usize,
    /// The slot.
    pub slot: GcSlot,
}

/// Limit on the bits one live-state lookup may read past the GC info's start.
const MAX_BYTES: u64 = DEFAULT_MAX_BYTES;

/// On x64 the `WANTS_REPORT_ONLY_LEAF` header flag; the other encodings always want it
/// (their flag bit means "has tail calls" instead).
pub fn wants_report_only_leaf(info: &GcInfo) -> bool {
    match info.arch() {
        GcInfoArch::Amd64 => info.header.wants_report_only_leaf_or_has_tailcalls(),
        _ => true,
    }
}

impl GcInfo {
    /// The tracked slots (indices into [`slots`](GcInfo::slots), ascending) live at code
    /// `offset`, before any filter: at a safe point (the offset of a call's return
    /// address), that safe point's state unless `execution_aborted`; else, in a fully
    /// interruptible range, the state there. `None` when nothing at all is reported for
    /// the frame, untracked slots included: the offset is in neither (which the runtime
    /// only allows for aborted frames) while the method has interruptible ranges.
    pub fn tracked_live_at(
        &self,
        target: &Target,
        offset: u32,
        execution_aborted: bool,
    ) -> Result<Option<Vec<usize>>, ContractError> {
        let safe_point = match execution_aborted {
            false => self.safe_point_index(offset),
            true => None,
        };
        // Where the offset is among the fully interruptible code: the sum of the lengths
        // of the earlier ranges plus its distance from its range's start (normalized).
        let mut pseudo = None;
        let mut total = 0u32;
        if safe_point.is_none() && !self.norm_ranges.is_empty() {
            let norm = offset >> self.arch().code_offset_shift(self.header.version);
            for &(s, e) in &self.norm_ranges {
                if norm >= s && norm < e {
                    pseudo = Some(total + (norm - s));
                }
                total += e - s;
            }
            if pseudo.is_none() {
                return Ok(None);
            }
        }
        let n = self.num_tracked;
        if n == 0 {
            return Ok(Some(Vec::new()));
        }
        let mut r = BitReader::new(target, self.address, MAX_BYTES);
        r.seek(self.live_states_bit)?;
        let enc = self.arch().encoding();
        let num_sp = u64::from(self.header.num_safe_points);
        // An optional table of offsets to each safe point's state (which may be
        // run-length encoded then).
        let mut bits_per_offset = 0u32;
        if num_sp > 0 && r.read_bit()? {
            let b = r.decode_var_unsigned(enc.pointer_size_encbase)?;
            bits_per_offset = u32::try_from(b + 1)
                .ok()
                .filter(|&b| b <= 64)
                .ok_or_else(|| r.corrupt(format!("{} bits per live-state offset", b + 1)))?;
        }
        if let Some(i) = safe_point {
            let i = i as u64;
            if bits_per_offset != 0 {
                let bpo = u64::from(bits_per_offset);
                let table = r.bits_read();
                r.seek(table + i * bpo)?;
                let at = r.read_bits(bits_per_offset)?;
                let states = align_to_byte(table + num_sp * bpo);
                r.seek(states.saturating_add(at))?;
                if r.read_bit()? {
                    return run_length_vector(&mut r, n, self.arch()).map(Some);
                }
            } else {
                r.seek(r.bits_read() + i * n as u64)?;
            }
            return plain_vector(&mut r, n).map(Some);
        }
        // Fully interruptible: the decoder always steps over the per-safe-point states
        // first, even when an offset table was read (the encoder then writes none).
        r.seek(r.bits_read() + num_sp * n as u64)?;
        let Some(pseudo) = pseudo else {
            return Ok(Some(Vec::new()));
        };
        self.chunk_state(&mut r, pseudo, total).map(Some)
    }

    /// The fully interruptible state at `pseudo` (of `total` interruptible offsets):
    /// the chunk pointer table, then the chunk holding the offset or, when that chunk
    /// has no data, the final states of the nearest earlier chunk that has.
    fn chunk_state(
        &self,
        r: &mut BitReader<'_>,
        pseudo: u32,
        total: u32,
    ) -> Result<Vec<usize>, ContractError> {
        let enc = self.arch().encoding();
        let n = self.num_tracked;
        let num_chunks = u64::from(total.div_ceil(CHUNK_OFFSETS));
        let break_chunk = u64::from(pseudo / CHUNK_OFFSETS);
        let bits_per_pointer = r.decode_var_unsigned(enc.pointer_size_encbase)?;
        if bits_per_pointer == 0 {
            return Ok(Vec::new());
        }
        if bits_per_pointer > 64 {
            return Err(r.corrupt(format!("{bits_per_pointer} bits per chunk pointer")));
        }
        let table = r.bits_read();
        let mut chunk = break_chunk;
        let pointer = loop {
            r.seek(table + chunk * bits_per_pointer)?;
            let p = r.read_bits(bits_per_pointer as u32)?;
            if p != 0 {
                break p;
            }
            if chunk == 0 {
                return Ok(Vec::new());
            }
            chunk -= 1;
        };
        let chunks_start = align_to_byte(table + num_chunks * bits_per_pointer);
        r.seek(chunks_start.saturating_add(pointer - 1))?;
        let could_be_live = if r.read_bit()? {
            run_length_vector(r, n, self.arch())?
        } else {
            plain_vector(r, n)?
        };
        let mut live = Vec::with_capacity(could_be_live.len());
        for _ in 0..could_be_live.len() {
            live.push(r.read_bit()?);
        }
        if chunk == break_chunk {
            let within = pseudo % CHUNK_OFFSETS;
            for state in live.iter_mut() {
                while r.read_bit()? {
                    let at = r.read_bits(CHUNK_OFFSETS_LOG2)? as u32;
                    if at > within {
                        *state = !*state;
                    }
                }
            }
        }
        Ok(could_be_live
            .into_iter()
            .zip(live)
            .filter_map(|(slot, l)| l.then_some(slot))
            .collect())
    }

    /// The slots the runtime reports for a frame at code `offset` (see
    /// [`tracked_live_at`](GcInfo::tracked_live_at) for which offsets have a state):
    /// the live tracked slots, then the untracked ones, after the runtime's filters —
    /// scratch registers and SP-relative slots in the outgoing argument area only for
    /// the active frame; nothing for a funclet's parent when the method wants only its
    /// leaf reported; no untracked slots for a funclet's parent or when suppressed.
    ///
    /// Without the frame's registers, a slot relative to the caller's SP or the frame
    /// register is never taken as lying in the outgoing area.
    pub fn enumerate_live_slots(
        &self,
        target: &Target,
        offset: u32,
        options: &GcSlotOptions,
    ) -> Result<Vec<LiveSlot>, ContractError> {
        if options.parent_of_funclet && wants_report_only_leaf(self) {
            return Ok(Vec::new());
        }
        let Some(tracked) = self.tracked_live_at(target, offset, options.execution_aborted)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for index in tracked {
            if let Some(&slot) = self.slots.get(index) {
                if self.reported(&slot, options.active_frame, options.fp_based_only) {
                    out.push(LiveSlot { index, slot });
                }
            }
        }
        if !(options.parent_of_funclet || options.suppress_untracked) {
            for (index, slot) in self.slots.iter().enumerate().skip(self.num_tracked) {
                // Untracked slots are never scratch slots: reported from any frame.
                if self.reported(slot, true, options.fp_based_only) {
                    out.push(LiveSlot { index, slot: *slot });
                }
            }
        }
        Ok(out)
    }

    /// Whether a live slot passes the runtime's reporting filters.
    fn reported(&self, slot: &GcSlot, report_scratch: bool, fp_based_only: bool) -> bool {
        match slot.location {
            SlotLocation::Register(reg) => {
                !fp_based_only && (report_scratch || !self.arch().is_scratch_register(reg))
            }
            SlotLocation::Stack { base, offset } => {
                (!fp_based_only || base == StackBase::FrameRegister)
                    && (report_scratch || !self.in_outgoing_area(base, offset))
            }
        }
    }

    /// An SP-relative slot inside the outgoing argument and scratch area.
    fn in_outgoing_area(&self, base: StackBase, offset: i32) -> bool {
        let size = self
            .header
            .size_of_stack_outgoing_and_scratch_area
            .unwrap_or(0);
        base == StackBase::Sp && offset >= 0 && (offset as u32) < size
    }
}

/// `bits` rounded up to a whole byte.
fn align_to_byte(bits: u64) -> u64 {
    bits.saturating_add(7) & !7
}

/// A plain live-state bit vector: one bit per tracked slot.
fn plain_vector(r: &mut BitReader<'_>, n: usize) -> Result<Vec<usize>, ContractError> {
    let mut out = Vec::new();
    for i in 0..n {
        if r.read_bit()? {
            out.push(i);
        }
    }
    Ok(out)
}

/// A run-length encoded live-state vector (its leading "RLE" bit already read): one bit
/// choosing which of the two encoding bases counts the dead runs (the other counts the
/// live ones); the first dead run's length as is; then alternately a live run and a dead
/// run, each of its length minus one, until every slot is covered.
fn run_length_vector(
    r: &mut BitReader<'_>,
    n: usize,
    arch: GcInfoArch,
) -> Result<Vec<usize>, ContractError> {
    let enc = arch.encoding();
    let (skip, run) = (
        enc.livestate_rle_skip_encbase,
        enc.livestate_rle_run_encbase,
    );
    let (skip_base, run_base) = if r.read_bit()? {
        (run, skip)
    } else {
        (skip, run)
    };
    let mut at = r.decode_var_unsigned(skip_base)?;
    let mut out = Vec::new();
    let mut live = true;
    let n64 = n as u64;
    while at < n64 {
        let base = if live { run_base } else { skip_base };
        let len = r
            .decode_var_unsigned(base)?
            .checked_add(1)
            .ok_or_else(|| r.corrupt("a live-state run overflows"))?;
        let end = at.saturating_add(len);
        if live {
            if end > n64 {
                return Err(r.corrupt(format!(
                    "a live-state run reaches slot {end} of {n} tracked slots"
                )));
            }
            out.extend((at as usize)..(end as usize));
        }
        at = end;
        live = !live;
    }
    Ok(out)
}

/// What a frame gives to turn slots into locations: its stack pointer, its caller's stack
/// pointer (from unwinding it once) and the value of its stack base register (rbp on x64)
/// when the method has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRegisters {
    /// The frame's stack pointer.
    pub sp: u64,
    /// The caller's stack pointer.
    pub caller_sp: u64,
    /// The value of the GC info's stack base register in this frame.
    pub frame_register: Option<u64>,
}

/// Where a live slot is in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotAddress {
    /// The reference is in this register (its value in the frame's context).
    Register(u32),
    /// The reference is in memory at this address.
    Stack(u64),
}

impl GcInfo {
    /// Where `slot` is in a frame: a register, or the base's value plus the offset. A
    /// frame-register-relative slot needs `frame.frame_register`.
    pub fn slot_address(
        &self,
        slot: &GcSlot,
        frame: &FrameRegisters,
    ) -> Result<SlotAddress, ContractError> {
        let (base, offset) = match slot.location {
            SlotLocation::Register(r) => return Ok(SlotAddress::Register(r)),
            SlotLocation::Stack { base, offset } => (base, offset),
        };
        let from = match base {
            StackBase::CallerSp => frame.caller_sp,
            StackBase::Sp => frame.sp,
            StackBase::FrameRegister => frame.frame_register.ok_or(ContractError::Corrupt {
                what: "GC info",
                addr: self.address,
                detail: "a frame-register-relative slot without the frame register's value".into(),
            })?,
        };
        Ok(SlotAddress::Stack(
            from.wrapping_add_signed(i64::from(offset)),
        ))
    }

    /// The slots reported for a frame at code `offset`, with their locations: as
    /// [`enumerate_live_slots`](GcInfo::enumerate_live_slots), except that, the frame
    /// being known, a tracked stack slot of any base lying in the outgoing argument area
    /// (`[sp, sp + size)`) is left out when the frame is not the active one.
    pub fn live_slot_addresses(
        &self,
        target: &Target,
        offset: u32,
        options: &GcSlotOptions,
        frame: &FrameRegisters,
    ) -> Result<Vec<(LiveSlot, SlotAddress)>, ContractError> {
        let area = u64::from(
            self.header
                .size_of_stack_outgoing_and_scratch_area
                .unwrap_or(0),
        );
        let mut out = Vec::new();
        for live in self.enumerate_live_slots(target, offset, options)? {
            let at = self.slot_address(&live.slot, frame)?;
            let scratch = matches!(at, SlotAddress::Stack(a)
                if a >= frame.sp && a - frame.sp < area);
            if options.active_frame || live.slot.untracked || !scratch {
                out.push((live, at));
            }
        }
        Ok(out)
    }
}
