//! The GCInfo body decoder (x64, versions 2 to 4) against an encoder written here from the
//! format description (`contracts/GCInfo.md`), independently of the library: random slot
//! tables, safe points with their live states (plain or run-length encoded, with or
//! without the offset table) and fully interruptible ranges with live states that change
//! at random offsets must decode to exactly what was encoded; truncated and garbage
//! streams give typed errors, never panics.

use std::collections::BTreeSet;

use crate::gc_info::{lay_out, BitWriter};
use cdac::contracts::gc_info::{
    decode, FrameRegisters, GcInfoArch, GcSlotOptions, SlotAddress, SlotLocation, StackBase,
    SLOT_INTERIOR, SLOT_PINNED,
};
use cdac::contracts::ContractError;
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::DataLayout;
use proptest::prelude::*;

// x64 encoding bases (the test's own copy).
const CODE_LENGTH: u32 = 8;
const STACK_BASE_REGISTER: u32 = 3;
const STACK_AREA: u32 = 3;
const NUM_SAFE_POINTS: u32 = 2;
const NUM_RANGES: u32 = 1;
const RANGE_GAP: u32 = 6;
const RANGE_LENGTH: u32 = 6;
const NUM_REGISTERS: u32 = 2;
const NUM_STACK_SLOTS: u32 = 2;
const NUM_UNTRACKED: u32 = 1;
const REGISTER: u32 = 3;
const REGISTER_DELTA: u32 = 2;
const STACK_SLOT: u32 = 6;
const STACK_SLOT_DELTA: u32 = 4;
const POINTER_SIZE: u32 = 3;
const RLE_SKIP: u32 = 4;
const RLE_RUN: u32 = 2;
const CHUNK: usize = 64;

/// How a live-state vector is written: plain bits, or runs with the skip base counting
/// dead runs ("positive") or live runs ("negative").
#[derive(Debug, Clone, Copy)]
enum Vector {
    Plain,
    Runs,
    RunsSwapped,
}

/// A method's GC info, as the test means it.
#[derive(Debug, Clone)]
struct Method {
    version: u32,
    code_length: u32,
    frame_register: bool,
    outgoing: u64,
    /// (register, flags), in table order.
    registers: Vec<(u32, u8)>,
    /// (base 0..=2, normalized offset, flags), in table order.
    stack: Vec<(u8, i64, u8)>,
    untracked: Vec<(u8, i64, u8)>,
    /// Return-address offsets, ascending.
    safe_points: Vec<u32>,
    /// Live tracked slots at each safe point.
    safe_point_states: Vec<Vec<bool>>,
    indirection: bool,
    safe_point_vectors: Vec<Vector>,
    /// `[start, end)` code offsets, ascending and disjoint.
    ranges: Vec<(u32, u32)>,
    /// Live tracked slots at each interruptible offset, in range order.
    interruptible_states: Vec<Vec<bool>>,
    chunk_vectors: Vec<Vector>,
}

impl Method {
    fn tracked(&self) -> usize {
        self.registers.len() + self.stack.len()
    }
}

fn ceil_log2(x: u64) -> u32 {
    let mut n = 0;
    while (1u64 << n) < x {
        n += 1;
    }
    n
}

fn write_vector(w: &mut BitWriter, live: &[bool], how: Vector) {
    let (skip, run) = match how {
        Vector::Plain => {
            w.write(0, 1);
            for &b in live {
                w.write(u64::from(b), 1);
            }
            return;
        }
        Vector::Runs => {
            w.write(1, 1);
            w.write(0, 1);
            (RLE_SKIP, RLE_RUN)
        }
        Vector::RunsSwapped => {
            w.write(1, 1);
            w.write(1, 1);
            (RLE_RUN, RLE_SKIP)
        }
    };
    // Alternating runs, dead first: the first dead run as its length, every later run as
    // its length minus one; a final run is written whatever its state.
    let mut runs: Vec<(bool, usize)> = Vec::new();
    for &b in live {
        match runs.last_mut() {
            Some((s, n)) if *s == b => *n += 1,
            _ => runs.push((b, 1)),
        }
    }
    if runs.first().is_none_or(|r| r.0) {
        runs.insert(0, (false, 0));
    }
    for (i, &(state, len)) in runs.iter().enumerate() {
        let value = if i == 0 { len } else { len - 1 };
        w.var_unsigned(value as u64, if state { run } else { skip });
    }
}

fn write_stack(w: &mut BitWriter, slots: &[(u8, i64, u8)]) {
    let mut prev: Option<(i64, u8)> = None;
    for &(base, off, flags) in slots {
        w.write(u64::from(base), 2);
        match prev {
            Some((p, 0)) => {
                assert_eq!(flags, 0);
                w.var_unsigned((off - p) as u64, STACK_SLOT_DELTA);
            }
            _ => {
                w.var_signed(off, STACK_SLOT);
                w.write(u64::from(flags), 2);
            }
        }
        prev = Some((off, flags));
    }
}

/// Encodes `m` as an x64 fat header and body.
fn encode(m: &Method) -> Vec<bool> {
    let mut w = BitWriter::default();
    let flags = if m.frame_register { 0x40 } else { 0 };
    w.write(1, 1);
    w.write(flags, 10);
    if m.version <= 3 {
        w.write(0, 4);
    }
    w.var_unsigned(u64::from(m.code_length), CODE_LENGTH);
    if m.frame_register {
        w.var_unsigned(0, STACK_BASE_REGISTER);
    }
    w.var_unsigned(m.outgoing, STACK_AREA);
    w.var_unsigned(m.safe_points.len() as u64, NUM_SAFE_POINTS);
    w.var_unsigned(m.ranges.len() as u64, NUM_RANGES);
    // Safe points: versions 2 and 3 store the offset before the return address.
    let bits = ceil_log2(u64::from(m.code_length));
    for &p in &m.safe_points {
        let stored = if m.version >= 4 { p } else { p - 1 };
        w.write(u64::from(stored), bits);
    }
    let mut end = 0;
    for &(s, e) in &m.ranges {
        w.var_unsigned(u64::from(s - end), RANGE_GAP);
        w.var_unsigned(u64::from(e - s - 1), RANGE_LENGTH);
        end = e;
    }
    // Slot table.
    w.write(u64::from(!m.registers.is_empty()), 1);
    if !m.registers.is_empty() {
        w.var_unsigned(m.registers.len() as u64, NUM_REGISTERS);
    }
    let any_stack = !m.stack.is_empty() || !m.untracked.is_empty();
    w.write(u64::from(any_stack), 1);
    if any_stack {
        w.var_unsigned(m.stack.len() as u64, NUM_STACK_SLOTS);
        w.var_unsigned(m.untracked.len() as u64, NUM_UNTRACKED);
    }
    let mut prev: Option<(u32, u8)> = None;
    for &(reg, f) in &m.registers {
        match prev {
            Some((p, 0)) => {
                assert_eq!(f, 0);
                w.var_unsigned(u64::from(reg - p - 1), REGISTER_DELTA);
            }
            _ => {
                w.var_unsigned(u64::from(reg), REGISTER);
                w.write(u64::from(f), 2);
            }
        }
        prev = Some((reg, f));
    }
    write_stack(&mut w, &m.stack);
    write_stack(&mut w, &m.untracked);
    if m.tracked() == 0 {
        return w.bits;
    }
    // Safe-point states.
    if !m.safe_points.is_empty() {
        w.write(u64::from(m.indirection), 1);
        if m.indirection {
            // The distinct states, once each, and a table of where each safe point's is.
            let mut sets = BitWriter::default();
            let mut at: Vec<(Vec<bool>, usize)> = Vec::new();
            let mut offsets = Vec::new();
            for (state, &how) in m.safe_point_states.iter().zip(&m.safe_point_vectors) {
                let o = match at.iter().find(|(s, _)| s == state) {
                    Some(&(_, o)) => o,
                    None => {
                        let o = sets.bits.len();
                        write_vector(&mut sets, state, how);
                        at.push((state.clone(), o));
                        o
                    }
                };
                offsets.push(o);
            }
            let largest = offsets.iter().copied().max().unwrap_or(0) as u64;
            let bpo = ceil_log2(largest + 1).max(1);
            w.var_unsigned(u64::from(bpo - 1), POINTER_SIZE);
            for o in offsets {
                w.write(o as u64, bpo);
            }
            while w.bits.len() % 8 != 0 {
                w.write(0, 1);
            }
            w.bits.extend(sets.bits);
        } else {
            for state in &m.safe_point_states {
                for &b in state {
                    w.write(u64::from(b), 1);
                }
            }
        }
    }
    if m.ranges.is_empty() {
        return w.bits;
    }
    // Fully interruptible chunks of 64 interruptible offsets.
    let states = &m.interruptible_states;
    let n = m.tracked();
    let dead = vec![false; n];
    let mut data = BitWriter::default();
    let mut pointers = Vec::new();
    for (c, chunk) in states.chunks(CHUNK).enumerate() {
        let before = if c == 0 {
            &dead
        } else {
            &states[c * CHUNK - 1]
        };
        let changed = |slot: usize, d: usize| {
            let prev = if d == 0 { before } else { &chunk[d - 1] };
            prev[slot] != chunk[d][slot]
        };
        let could: Vec<bool> = (0..n)
            .map(|s| before[s] || (0..chunk.len()).any(|d| changed(s, d)))
            .collect();
        if !(0..n).any(|s| (0..chunk.len()).any(|d| changed(s, d))) {
            pointers.push(0u64);
            continue;
        }
        pointers.push(data.bits.len() as u64 + 1);
        write_vector(
            &mut data,
            &could,
            m.chunk_vectors[c % m.chunk_vectors.len()],
        );
        let last = chunk.last().expect("chunk");
        for s in (0..n).filter(|&s| could[s]) {
            data.write(u64::from(last[s]), 1);
        }
        for s in (0..n).filter(|&s| could[s]) {
            for d in 1..chunk.len() {
                if changed(s, d) {
                    data.write(1, 1);
                    data.write(d as u64, 6);
                }
            }
            data.write(0, 1);
        }
    }
    let largest = pointers.iter().copied().max().unwrap_or(0);
    let bpp = ceil_log2(largest + 1);
    w.var_unsigned(u64::from(bpp), POINTER_SIZE);
    if bpp > 0 {
        for p in pointers {
            w.write(p, bpp);
        }
        while w.bits.len() % 8 != 0 {
            w.write(0, 1);
        }
        w.bits.extend(data.bits);
    }
    w.bits
}

// ------------------------------------------------------------------ strategies

fn vector_strategy() -> impl Strategy<Value = Vector> {
    prop_oneof![
        Just(Vector::Plain),
        Just(Vector::Runs),
        Just(Vector::RunsSwapped)
    ]
}

/// Registers in an encodable order: those with flags first (each written in full), then
/// the others ascending without repeats (written as deltas).
fn registers_strategy() -> impl Strategy<Value = Vec<(u32, u8)>> {
    prop::collection::vec((0u32..16, 0u8..4), 0..6).prop_map(|regs| {
        let regs: Vec<(u32, u8)> = regs.into_iter().filter(|r| r.0 != 4).collect();
        let mut out: Vec<(u32, u8)> = regs.iter().copied().filter(|r| r.1 != 0).collect();
        let plain: BTreeSet<u32> = regs.iter().filter(|r| r.1 == 0).map(|r| r.0).collect();
        out.extend(plain.into_iter().map(|r| (r, 0)));
        out
    })
}

/// Stack slots in an encodable order: with flags first, then the others by offset.
fn stack_strategy(max: usize) -> impl Strategy<Value = Vec<(u8, i64, u8)>> {
    prop::collection::vec((0u8..3, -300i64..300, 0u8..4), 0..max).prop_map(|slots| {
        let mut out: Vec<(u8, i64, u8)> = slots.iter().copied().filter(|s| s.2 != 0).collect();
        let mut plain: Vec<(u8, i64, u8)> = slots.into_iter().filter(|s| s.2 == 0).collect();
        plain.sort_by_key(|s| s.1);
        out.extend(plain);
        out
    })
}

/// Live states over `len` offsets that change at random offsets.
fn evolve(n: usize, len: usize, seed: u64) -> Vec<Vec<bool>> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut state = vec![false; n];
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        if n > 0 && next() % 5 == 0 {
            let s = (next() as usize) % n;
            state[s] = !state[s];
        }
        out.push(state.clone());
    }
    out
}

fn method_strategy() -> impl Strategy<Value = Method> {
    (
        (2u32..=4, 16u32..400, any::<bool>(), 0u64..8),
        (registers_strategy(), stack_strategy(6), stack_strategy(4)),
        (
            0usize..3,
            prop::collection::vec(any::<u32>(), 12),
            any::<bool>(),
        ),
        (prop::collection::vec(vector_strategy(), 8), any::<u64>()),
    )
        .prop_map(
            |(
                (version, code_length, frame_register, outgoing),
                (registers, stack, untracked),
                (mode, picks, indirection),
                (vectors, seed),
            )| {
                let n = registers.len() + stack.len();
                // Ranges (mode 1 and 2): up to three, from the random picks.
                let mut ranges = Vec::new();
                if mode >= 1 {
                    let mut cuts: Vec<u32> = picks[..6]
                        .iter()
                        .map(|p| p % code_length)
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    if cuts.len() % 2 == 1 {
                        cuts.pop();
                    }
                    for pair in cuts.chunks(2) {
                        ranges.push((pair[0], pair[1]));
                    }
                }
                let in_range = |o: u32| ranges.iter().any(|&(s, e)| o >= s && o < e);
                // Safe points (mode 0 and 2), never inside a range; version 4 stores the
                // return address itself, so it must be below the code length.
                let top = if version >= 4 {
                    code_length - 1
                } else {
                    code_length
                };
                let safe_points: Vec<u32> = if mode != 1 {
                    picks[6..]
                        .iter()
                        .map(|p| 1 + p % top)
                        .filter(|&p| !in_range(p))
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect()
                } else {
                    Vec::new()
                };
                let safe_point_states = evolve(n, safe_points.len(), seed);
                let total: u32 = ranges.iter().map(|&(s, e)| e - s).sum();
                Method {
                    version,
                    code_length,
                    frame_register,
                    outgoing,
                    registers,
                    stack,
                    untracked,
                    safe_point_vectors: (0..safe_points.len())
                        .map(|i| vectors[i % vectors.len()])
                        .collect(),
                    safe_points,
                    safe_point_states,
                    // The offset table and fully interruptible data do not go together.
                    indirection: indirection && ranges.is_empty(),
                    interruptible_states: evolve(n, total as usize, seed.rotate_left(17)),
                    ranges,
                    chunk_vectors: vectors,
                }
            },
        )
}

fn bits_of(state: &[bool]) -> Vec<usize> {
    (0..state.len()).filter(|&i| state[i]).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// The tables and every live state survive encoding and decoding.
    #[test]
    fn random_bodies_round_trip(m in method_strategy(), lead in 0usize..8) {
        let bits = encode(&m);
        let (t, addr) = lay_out(DataLayout::LE64, lead, 0xA5, &bits, 8);
        let info = decode(&t, addr, m.version, GcInfoArch::Amd64).expect("decode");
        prop_assert_eq!(&info.safe_points, &m.safe_points);
        prop_assert_eq!(&info.interruptible_ranges, &m.ranges);
        prop_assert_eq!(info.num_registers, m.registers.len());
        prop_assert_eq!(info.num_tracked, m.tracked());
        prop_assert_eq!(info.slots.len(), m.tracked() + m.untracked.len());
        for (slot, &(reg, flags)) in info.slots.iter().zip(&m.registers) {
            prop_assert_eq!(slot.location, SlotLocation::Register(reg));
            prop_assert_eq!(slot.flags, flags);
        }
        let stack = m.stack.iter().map(|s| (s, false)).chain(m.untracked.iter().map(|s| (s, true)));
        for (slot, (&(base, off, flags), untracked)) in info.slots[m.registers.len()..].iter().zip(stack) {
            let base = [StackBase::CallerSp, StackBase::Sp, StackBase::FrameRegister][base as usize];
            prop_assert_eq!(slot.location, SlotLocation::Stack { base, offset: (off * 8) as i32 });
            prop_assert_eq!(slot.flags, flags);
            prop_assert_eq!(slot.untracked, untracked);
        }
        for (p, state) in m.safe_points.iter().zip(&m.safe_point_states) {
            let got = info.tracked_live_at(&t, *p, false).expect("safe point state");
            prop_assert_eq!(got, Some(bits_of(state)), "safe point {:#x}", p);
        }
        let offsets = m.ranges.iter().flat_map(|&(s, e)| s..e);
        for (o, state) in offsets.zip(&m.interruptible_states) {
            let got = info.tracked_live_at(&t, o, true).expect("interruptible state");
            prop_assert_eq!(got, Some(bits_of(state)), "offset {:#x}", o);
        }
    }

    /// A body cut short gives an error (or, cut inside data a query never reads, an
    /// answer), never a panic.
    #[test]
    fn truncated_bodies_never_panic(m in method_strategy(), cut in any::<prop::sample::Index>()) {
        let bits = encode(&m);
        let words = bits.len().div_ceil(64);
        let keep = cut.index(words.max(1));
        let mut bits = bits;
        bits.truncate(keep * 64);
        let (t, addr) = if keep == 0 {
            (MemoryBuilder::new(DataLayout::LE64).into_target(), 0x10_0000)
        } else {
            lay_out(DataLayout::LE64, 0, 0, &bits, 0)
        };
        if let Ok(info) = decode(&t, addr, m.version, GcInfoArch::Amd64) {
            for o in 0..=m.code_length {
                for aborted in [false, true] {
                    let _ = info.tracked_live_at(&t, o, aborted);
                }
            }
        }
    }

    /// Garbage decodes to tables or a typed error, never a panic; so do its live states.
    #[test]
    fn garbage_bodies_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 1..256),
        version in 2u32..=4,
    ) {
        let mut bytes = bytes;
        bytes.resize(bytes.len().div_ceil(8) * 8, 0);
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x10_0000, bytes.len()).bytes(0, &bytes);
        let t = b.into_target();
        match decode(&t, 0x10_0000, version, GcInfoArch::Amd64) {
            Ok(info) => {
                let options = GcSlotOptions { active_frame: true, ..GcSlotOptions::default() };
                for o in 0..info.header.code_length.min(512) {
                    let _ = info.enumerate_live_slots(&t, o, &options);
                    let _ = info.tracked_live_at(&t, o, true);
                }
            }
            Err(ContractError::Read(_))
            | Err(ContractError::Corrupt { .. })
            | Err(ContractError::LimitExceeded { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

/// The reporting filters on one method: scratch registers and the outgoing area only for
/// the active frame, untracked slots unless suppressed or in a funclet's parent, nothing
/// for a funclet's parent when only the leaf is wanted, frame-register slots only.
#[test]
fn reporting_filters() {
    let m = Method {
        version: 4,
        code_length: 64,
        frame_register: true,
        outgoing: 2, // 16 bytes
        // rax (scratch), rbx (preserved).
        registers: vec![(0, 0), (3, 0)],
        // rbp-16 (interior), caller.sp-8, sp+8 (in the outgoing area).
        stack: vec![(2, -2, SLOT_INTERIOR), (0, -1, 0), (1, 1, 0)],
        untracked: vec![(2, -3, SLOT_PINNED)],
        safe_points: vec![0x10],
        safe_point_states: vec![vec![true; 5]],
        indirection: false,
        safe_point_vectors: vec![Vector::Plain],
        ranges: vec![],
        interruptible_states: vec![],
        chunk_vectors: vec![Vector::Plain],
    };
    let bits = encode(&m);
    let (t, addr) = lay_out(DataLayout::LE64, 0, 0, &bits, 8);
    let info = decode(&t, addr, 4, GcInfoArch::Amd64).expect("decode");
    let names = |options: GcSlotOptions| -> Vec<usize> {
        info.enumerate_live_slots(&t, 0x10, &options)
            .expect("live")
            .into_iter()
            .map(|l| l.index)
            .collect()
    };
    // Table order: rax, rbx, rbp-16, caller.sp-8, sp+8, rbp-24 (untracked).
    let active = GcSlotOptions {
        active_frame: true,
        ..GcSlotOptions::default()
    };
    assert_eq!(names(active), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(names(GcSlotOptions::default()), vec![1, 2, 3, 5]);
    assert_eq!(
        names(GcSlotOptions {
            suppress_untracked: true,
            ..active
        }),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        names(GcSlotOptions {
            fp_based_only: true,
            ..active
        }),
        vec![2, 5]
    );
    // Not a safe point and no ranges: no tracked slot, the untracked one still.
    assert_eq!(
        info.enumerate_live_slots(&t, 0x11, &active)
            .expect("live")
            .iter()
            .map(|l| l.index)
            .collect::<Vec<_>>(),
        vec![5]
    );
    // Aborted at a safe point: the safe point's state is not used.
    assert_eq!(
        names(GcSlotOptions {
            execution_aborted: true,
            ..active
        }),
        vec![5]
    );
    // A funclet's parent: no untracked slots; WANTS_REPORT_ONLY_LEAF is clear here.
    assert_eq!(
        names(GcSlotOptions {
            parent_of_funclet: true,
            ..GcSlotOptions::default()
        }),
        vec![1, 2, 3]
    );
    assert!(info.slots[5].untracked && info.slots[5].is_pinned());
    assert!(info.slots[2].is_interior());

    // Locations in a frame with SP 0x1000, caller SP 0x1100 and rbp 0x10f0.
    let frame = FrameRegisters {
        sp: 0x1000,
        caller_sp: 0x1100,
        frame_register: Some(0x10f0),
    };
    let located = |options: GcSlotOptions, frame: &FrameRegisters| -> Vec<(usize, SlotAddress)> {
        info.live_slot_addresses(&t, 0x10, &options, frame)
            .expect("addresses")
            .into_iter()
            .map(|(l, a)| (l.index, a))
            .collect()
    };
    let all = vec![
        (0, SlotAddress::Register(0)),
        (1, SlotAddress::Register(3)),
        (2, SlotAddress::Stack(0x10e0)),
        (3, SlotAddress::Stack(0x10f8)),
        (4, SlotAddress::Stack(0x1008)),
        (5, SlotAddress::Stack(0x10d8)),
    ];
    assert_eq!(located(active, &frame), all);
    let not_active: Vec<_> = all
        .iter()
        .copied()
        .filter(|(i, _)| ![0, 4].contains(i))
        .collect();
    assert_eq!(located(GcSlotOptions::default(), &frame), not_active);
    // A caller-SP-relative slot that falls in the outgoing area is scratch too once the
    // frame is known: caller SP 0x1010 puts caller.sp-8 at 0x1008.
    let tight = FrameRegisters {
        caller_sp: 0x1010,
        ..frame
    };
    assert_eq!(
        located(GcSlotOptions::default(), &tight)
            .iter()
            .map(|x| x.0)
            .collect::<Vec<_>>(),
        vec![1, 2, 5]
    );
    // A frame-register-relative slot needs the register.
    let no_fp = FrameRegisters {
        frame_register: None,
        ..frame
    };
    assert!(info.live_slot_addresses(&t, 0x10, &active, &no_fp).is_err());
}

/// A version 3 safe point is stored one byte before its return address: the same bits
/// decoded as version 3 and as version 4 differ by one.
#[test]
fn version_3_safe_points_are_return_address_minus_one() {
    let mut m = Method {
        version: 3,
        code_length: 40,
        frame_register: false,
        outgoing: 0,
        registers: vec![(3, 0)],
        stack: vec![],
        untracked: vec![],
        safe_points: vec![0x10, 0x20],
        safe_point_states: vec![vec![true], vec![false]],
        indirection: false,
        safe_point_vectors: vec![Vector::Plain; 2],
        ranges: vec![],
        interruptible_states: vec![],
        chunk_vectors: vec![Vector::Plain],
    };
    let (t, addr) = lay_out(DataLayout::LE64, 0, 0, &encode(&m), 8);
    let info = decode(&t, addr, 3, GcInfoArch::Amd64).expect("v3");
    assert_eq!(info.safe_points, vec![0x10, 0x20]);
    assert_eq!(
        info.tracked_live_at(&t, 0x10, false).expect("live"),
        Some(vec![0])
    );
    assert_eq!(info.safe_point_index(0x0f), None);
    m.version = 4;
    let (t4, addr4) = lay_out(DataLayout::LE64, 0, 0, &encode(&m), 8);
    let info4 = decode(&t4, addr4, 4, GcInfoArch::Amd64).expect("v4");
    assert_eq!(info4.safe_points, vec![0x10, 0x20]);
    // The same table decoded with the other version's convention is one byte off.
    let (t3as4, addr3as4) = {
        m.version = 3;
        let mut bits = encode(&m);
        // Drop the 4 return-kind bits after the 11 flag bits: a version 4 header.
        bits.drain(11..15);
        lay_out(DataLayout::LE64, 0, 0, &bits, 8)
    };
    let read_as_4 = decode(&t3as4, addr3as4, 4, GcInfoArch::Amd64).expect("as v4");
    assert_eq!(read_as_4.safe_points, vec![0x0f, 0x1f]);
}
