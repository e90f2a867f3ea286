//! The GCInfo header decoder against an encoder written here, independently of the
//! library: its own bit writer, its own table of encoding bases and its own
//! normalizations (from the runtime's `gcinfotypes.h` and `gcinfoencoder.cpp`). Random
//! headers of every version and architecture, on every data layout and at unaligned
//! addresses, must decode to exactly what was encoded; truncated and garbage streams must
//! give typed errors, never panics.

use cdac::contracts::gc_info::{code_length, decode_header, GcInfoArch, GcInfoHeader};
use cdac::contracts::unwind_info::{function_length, unwind_data_size, UnwindArch};
use cdac::contracts::ContractError;
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::{DataLayout, Endian, Target};
use proptest::prelude::*;

// ------------------------------------------------------------------ the test's encoder

/// Bits, first written = first in the stream.
#[derive(Default, Clone)]
pub(crate) struct BitWriter {
    pub(crate) bits: Vec<bool>,
}

impl BitWriter {
    pub(crate) fn write(&mut self, value: u64, n: u32) {
        for i in 0..n {
            self.bits.push((value >> i) & 1 == 1);
        }
    }

    pub(crate) fn var_unsigned(&mut self, mut value: u64, base: u32) {
        loop {
            let chunk = value & ((1u64 << base) - 1);
            value >>= base;
            self.write(chunk, base);
            self.write(u64::from(value != 0), 1);
            if value == 0 {
                return;
            }
        }
    }

    pub(crate) fn var_signed(&mut self, mut value: i64, base: u32) {
        loop {
            let chunk = (value as u64) & ((1u64 << base) - 1);
            value >>= base;
            let top = (chunk >> (base - 1)) & 1 == 1;
            let done = (value == 0 && !top) || (value == -1 && top);
            self.write(chunk, base);
            self.write(u64::from(!done), 1);
            if done {
                return;
            }
        }
    }
}

/// The encoding bases the header uses, per architecture (the test's own table).
struct Bases {
    code_length: u32,
    return_kind_slim: u32,
    return_kind_fat: u32,
    stack_slot: u32, // generics context, GS cookie, PSPSym, security object
    stack_base_register: u32,
    stack_area: u32,
    enc_preserved: u32,
    enc_fixed: Option<u32>,
    reverse_pinvoke: u32,
    prolog: u32,
    epilog: u32,
    safe_points: u32,
    ranges: u32,
}

fn bases(arch: GcInfoArch) -> Bases {
    let x64 = Bases {
        code_length: 8,
        return_kind_slim: 2,
        return_kind_fat: 4,
        stack_slot: 6,
        stack_base_register: 3,
        stack_area: 3,
        enc_preserved: 4,
        enc_fixed: None,
        reverse_pinvoke: 6,
        prolog: 5,
        epilog: 3,
        safe_points: 2,
        ranges: 1,
    };
    match arch {
        GcInfoArch::Amd64 | GcInfoArch::Interpreter => x64,
        GcInfoArch::Arm64 | GcInfoArch::RiscV64 => Bases {
            stack_base_register: 2,
            enc_fixed: Some(4),
            safe_points: 3,
            ..x64
        },
        GcInfoArch::LoongArch64 => Bases {
            stack_base_register: 2,
            safe_points: 3,
            ..x64
        },
        GcInfoArch::Arm => Bases {
            code_length: 7,
            return_kind_slim: 2,
            return_kind_fat: 2,
            stack_slot: 5,
            stack_base_register: 1,
            stack_area: 3,
            enc_preserved: 3,
            enc_fixed: None,
            reverse_pinvoke: 5,
            prolog: 5,
            epilog: 3,
            safe_points: 3,
            ranges: 2,
        },
    }
}

/// (code unit shift, stack unit shift) per architecture.
fn shifts(arch: GcInfoArch) -> (u32, u32) {
    match arch {
        GcInfoArch::Amd64 => (0, 3),
        GcInfoArch::Arm64 | GcInfoArch::LoongArch64 | GcInfoArch::RiscV64 => (2, 3),
        GcInfoArch::Arm => (1, 2),
        GcInfoArch::Interpreter => (0, 0),
    }
}

/// The register a stored stack base register means (the test's own mapping).
fn register(arch: GcInfoArch, stored: u32) -> u32 {
    match arch {
        GcInfoArch::Amd64 => stored ^ 5,
        GcInfoArch::Arm64 => stored ^ 29,
        GcInfoArch::Arm => (stored ^ 7) + 4,
        GcInfoArch::LoongArch64 => [22, 3][usize::from(stored != 0)],
        GcInfoArch::RiscV64 => [8, 2][usize::from(stored != 0)],
        GcInfoArch::Interpreter => stored,
    }
}

/// Stored (normalized) header values, chosen by the property tests.
#[derive(Debug, Clone)]
struct Stored {
    slim: bool,
    flags: u32,
    return_kind: u32,
    code_length: u64,
    prolog_minus_1: u64,
    epilog: u64,
    security: i64,
    gs_cookie: i64,
    psp_sym: i64,
    generics: i64,
    stack_base: u64,
    enc_preserved: u64,
    enc_fixed: u64,
    reverse_pinvoke: i64,
    stack_area: u64,
    safe_points: u64,
    ranges: u64,
}

/// Writes `s` as a header of `version` for `arch`; returns the expected decoding.
fn encode(w: &mut BitWriter, s: &Stored, version: u32, arch: GcInfoArch) -> GcInfoHeader {
    let b = bases(arch);
    let (code_shift, stack_shift) = shifts(arch);
    // Code offsets are stored in bytes up to version 3, in instruction units from 4.
    let offset_shift = if version >= 4 { code_shift } else { 0 };
    let legacy = version <= 3;
    let has_rk = version == 2 || version == 3;
    let slot = |v: i64| (v << stack_shift) as i32;
    let mut h = GcInfoHeader {
        version,
        arch,
        slim: s.slim,
        flags: 0,
        return_kind: None,
        code_length: (s.code_length << code_shift) as u32,
        prolog_size: None,
        epilog_size: None,
        security_object_stack_slot: None,
        gs_cookie_stack_slot: None,
        psp_sym_stack_slot: None,
        generics_inst_context_stack_slot: None,
        stack_base_register: None,
        size_of_edit_and_continue_preserved_area: None,
        size_of_edit_and_continue_fixed_stack_frame: None,
        reverse_pinvoke_frame_stack_slot: None,
        size_of_stack_outgoing_and_scratch_area: Some(0),
        num_safe_points: s.safe_points as u32,
        num_interruptible_ranges: 0,
        header_bits: 0,
    };
    let start = w.bits.len();
    if s.slim {
        let sbr = s.flags & 0x40 != 0;
        w.write(0, 1);
        w.write(u64::from(sbr), 1);
        h.flags = s.flags & 0x40;
        if sbr {
            h.stack_base_register = Some(register(arch, 0));
        }
        if has_rk {
            let rk = s.return_kind & ((1 << b.return_kind_slim) - 1);
            w.write(u64::from(rk), b.return_kind_slim);
            h.return_kind = Some(rk);
        }
        w.var_unsigned(s.code_length, b.code_length);
        w.var_unsigned(s.safe_points, b.safe_points);
    } else {
        let width = if version == 1 { 9 } else { 10 };
        let f = s.flags & ((1 << width) - 1);
        h.flags = f;
        w.write(1, 1);
        w.write(u64::from(f), width);
        if has_rk {
            let rk = s.return_kind & ((1 << b.return_kind_fat) - 1);
            w.write(u64::from(rk), b.return_kind_fat);
            h.return_kind = Some(rk);
        }
        w.var_unsigned(s.code_length, b.code_length);
        let gs = f & 0x4 != 0;
        let generics = f & 0x30 != 0;
        let security = legacy && f & 0x2 != 0;
        let psp = legacy && f & 0x8 != 0;
        if gs || generics || security {
            w.var_unsigned(s.prolog_minus_1, b.prolog);
            h.prolog_size = Some(((s.prolog_minus_1 + 1) << offset_shift) as u32);
            if gs {
                w.var_unsigned(s.epilog, b.epilog);
                h.epilog_size = Some((s.epilog << offset_shift) as u32);
            }
        }
        if security {
            w.var_signed(s.security, b.stack_slot);
            h.security_object_stack_slot = Some(slot(s.security));
        }
        if gs {
            w.var_signed(s.gs_cookie, b.stack_slot);
            h.gs_cookie_stack_slot = Some(slot(s.gs_cookie));
        }
        if psp {
            w.var_signed(s.psp_sym, b.stack_slot);
            h.psp_sym_stack_slot = Some(slot(s.psp_sym));
        }
        if generics {
            w.var_signed(s.generics, b.stack_slot);
            h.generics_inst_context_stack_slot = Some(slot(s.generics));
        }
        if f & 0x40 != 0 {
            w.var_unsigned(s.stack_base, b.stack_base_register);
            h.stack_base_register = Some(register(arch, s.stack_base as u32));
        }
        if f & 0x100 != 0 {
            w.var_unsigned(s.enc_preserved, b.enc_preserved);
            h.size_of_edit_and_continue_preserved_area = Some(s.enc_preserved as u32);
            if let Some(base) = b.enc_fixed {
                w.var_unsigned(s.enc_fixed, base);
                h.size_of_edit_and_continue_fixed_stack_frame = Some(s.enc_fixed as u32);
            }
        }
        if f & 0x200 != 0 {
            w.var_signed(s.reverse_pinvoke, b.reverse_pinvoke);
            h.reverse_pinvoke_frame_stack_slot = Some(slot(s.reverse_pinvoke));
        }
        w.var_unsigned(s.stack_area, b.stack_area);
        h.size_of_stack_outgoing_and_scratch_area = Some((s.stack_area << stack_shift) as u32);
        w.var_unsigned(s.safe_points, b.safe_points);
        w.var_unsigned(s.ranges, b.ranges);
        h.num_interruptible_ranges = s.ranges as u32;
    }
    h.header_bits = (w.bits.len() - start) as u64;
    h
}

/// Lays the bits out as words of the layout's pointer size and byte order, preceded by
/// `lead` bytes of `fill` (so the stream starts at an unaligned address) and followed by
/// `tail` bytes of it; returns the target and the stream's address.
pub(crate) fn lay_out(
    layout: DataLayout,
    lead: usize,
    fill: u8,
    bits: &[bool],
    tail: usize,
) -> (Target, u64) {
    let ps = usize::from(layout.pointer_size);
    let mut all: Vec<bool> = Vec::new();
    for _ in 0..lead {
        for i in 0..8 {
            all.push((fill >> i) & 1 == 1);
        }
    }
    all.extend_from_slice(bits);
    for _ in 0..tail * 8 {
        all.push(fill & 1 == 1);
    }
    while all.len() % (ps * 8) != 0 {
        all.push(fill & 1 == 1);
    }
    let mut b = MemoryBuilder::new(layout);
    let base = 0x10_0000u64;
    let region = b.region(base, all.len() / 8);
    for (k, word) in all.chunks(ps * 8).enumerate() {
        let v = word
            .iter()
            .enumerate()
            .fold(0u64, |acc, (i, bit)| acc | (u64::from(*bit) << i));
        if ps == 4 {
            region.u32(k * 4, v as u32);
        } else {
            region.u64(k * 8, v);
        }
    }
    (b.into_target(), base + lead as u64)
}

// ------------------------------------------------------------------ strategies

fn arch_strategy() -> impl Strategy<Value = GcInfoArch> {
    prop::sample::select(GcInfoArch::ALL.to_vec())
}

fn layout_strategy() -> impl Strategy<Value = DataLayout> {
    prop::sample::select(DataLayout::ALL.to_vec())
}

/// Stored values that denormalize into 32 bits on every architecture.
fn stored_strategy() -> impl Strategy<Value = Stored> {
    let slot = || -(1i64 << 28)..(1i64 << 28);
    let small = || prop_oneof![0u64..16, 0u64..(1 << 20), 0u64..(1 << 29)];
    (
        (any::<bool>(), any::<u32>(), any::<u32>(), 1u64..(1 << 29)),
        (small(), small(), slot(), slot(), slot(), slot()),
        (0u64..32, small(), small(), slot(), small()),
        (
            prop_oneof![0u64..8, 0u64..=u64::from(u32::MAX)],
            prop_oneof![0u64..4, 0u64..=u64::from(u32::MAX)],
        ),
    )
        .prop_map(
            |(
                (slim, flags, return_kind, code_length),
                (prolog_minus_1, epilog, security, gs_cookie, psp_sym, generics),
                (stack_base, enc_preserved, enc_fixed, reverse_pinvoke, stack_area),
                (safe_points, ranges),
            )| Stored {
                slim,
                flags,
                return_kind,
                code_length,
                prolog_minus_1,
                epilog,
                security,
                gs_cookie,
                psp_sym,
                generics,
                stack_base,
                enc_preserved,
                enc_fixed,
                reverse_pinvoke,
                stack_area,
                safe_points,
                ranges,
            },
        )
}

fn version_ok(version: u32, arch: GcInfoArch) -> bool {
    arch != GcInfoArch::Interpreter || version == 4
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Every field of random slim and fat headers survives encoding and decoding, for
    /// every version, architecture and data layout, from unaligned addresses.
    #[test]
    fn random_headers_round_trip(
        s in stored_strategy(),
        version in 1u32..=4,
        arch in arch_strategy(),
        layout in layout_strategy(),
        lead in 0usize..8,
        fill in any::<u8>(),
        tail in 0usize..16,
    ) {
        prop_assume!(version_ok(version, arch));
        let mut w = BitWriter::default();
        let expected = encode(&mut w, &s, version, arch);
        let lead = lead % usize::from(layout.pointer_size);
        let (t, addr) = lay_out(layout, lead, fill, &w.bits, tail);
        let got = decode_header(&t, addr, version, arch);
        prop_assert_eq!(got.as_ref().ok(), Some(&expected), "{:?}", got);
        prop_assert_eq!(
            code_length(&t, addr, version, arch).ok(),
            Some(expected.code_length)
        );
    }

    /// A stream cut short inside its header is a read error.
    #[test]
    fn truncated_headers_are_read_errors(
        s in stored_strategy(),
        version in 1u32..=4,
        arch in arch_strategy(),
        layout in layout_strategy(),
        cut in any::<prop::sample::Index>(),
    ) {
        prop_assume!(version_ok(version, arch));
        let mut w = BitWriter::default();
        let expected = encode(&mut w, &s, version, arch);
        let word_bits = 8 * usize::from(layout.pointer_size);
        // Keep whole words strictly before the one holding the header's last bit.
        let words_needed = (expected.header_bits as usize).div_ceil(word_bits);
        let keep = cut.index(words_needed);
        let mut bits = w.bits.clone();
        bits.truncate(keep * word_bits);
        let (t, addr) = if keep == 0 {
            (MemoryBuilder::new(layout).into_target(), 0x10_0000)
        } else {
            lay_out(layout, 0, 0, &bits, 0)
        };
        let got = decode_header(&t, addr, version, arch);
        prop_assert!(matches!(got, Err(ContractError::Read(_))), "{:?}", got);
    }

    /// Garbage decodes to a header or a typed error, never a panic; what decodes is
    /// self-consistent.
    #[test]
    fn garbage_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..64),
        version in 0u32..=6,
        arch in arch_strategy(),
        layout in layout_strategy(),
    ) {
        let mut b = MemoryBuilder::new(layout);
        let mut bytes = bytes;
        let ps = usize::from(layout.pointer_size);
        bytes.resize(bytes.len().div_ceil(ps) * ps, 0);
        if !bytes.is_empty() {
            b.region(0x10_0000, bytes.len()).bytes(0, &bytes);
        }
        let t = b.into_target();
        match decode_header(&t, 0x10_0000, version, arch) {
            Ok(h) => {
                prop_assert!(h.code_length > 0);
                prop_assert!(h.header_bits <= 8 * bytes.len() as u64);
                prop_assert_eq!(code_length(&t, 0x10_0000, version, arch).ok(), Some(h.code_length));
            }
            Err(ContractError::Read(_))
            | Err(ContractError::Corrupt { .. })
            | Err(ContractError::UnsupportedVersion { .. })
            | Err(ContractError::LimitExceeded { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    /// Unwind sizes of garbage: a size or a typed error, never a panic.
    #[test]
    fn unwind_garbage_never_panics(
        w0 in any::<u32>(),
        w1 in any::<u32>(),
        two_words in any::<bool>(),
        arch in prop::sample::select(vec![
            UnwindArch::X86, UnwindArch::Amd64, UnwindArch::Arm,
            UnwindArch::Arm64, UnwindArch::LoongArch64, UnwindArch::RiscV64,
        ]),
    ) {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(0x1000, if two_words { 8 } else { 4 });
        r.u32(0, w0);
        if two_words {
            r.u32(4, w1);
        }
        let t = b.into_target();
        match unwind_data_size(&t, 0x1000, arch) {
            Ok(size) => {
                prop_assert!(size >= 4 && size % 4 == 0);
                prop_assert!(size <= 8 + 4 * 0xFFFF + 4 * 0xFF + 4);
            }
            Err(ContractError::Read(_)) | Err(ContractError::Corrupt { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
        let _ = function_length(&t, 0, 0x1000, arch);
    }
}

// ------------------------------------------------------------------ fixed examples

/// The digest's worked example: AMD64, slim, no stack base register, code length 83.
#[test]
fn worked_example_v4_and_v3() {
    let mut b = MemoryBuilder::new(DataLayout::LE64);
    b.region(0x1000, 8).bytes(0, &[0x4C, 0x01]);
    let t = b.into_target();
    assert_eq!(
        code_length(&t, 0x1000, 4, GcInfoArch::Amd64).expect("v4"),
        83
    );
    assert_eq!(
        code_length(&t, 0x1000, 4, GcInfoArch::Arm64).expect("arm64"),
        332
    );
    assert_eq!(
        code_length(&t, 0x1000, 4, GcInfoArch::LoongArch64).expect("la"),
        332
    );
    assert_eq!(
        code_length(&t, 0x1000, 4, GcInfoArch::RiscV64).expect("rv"),
        332
    );

    // Version 3: two ReturnKind bits at bits 2-3, the length from bit 4.
    let mut w = BitWriter::default();
    w.write(0, 1);
    w.write(0, 1);
    w.write(1, 2); // Object
    w.var_unsigned(83, 8);
    w.var_unsigned(0, 2);
    let (t, addr) = lay_out(DataLayout::LE64, 0, 0, &w.bits, 0);
    let h = decode_header(&t, addr, 3, GcInfoArch::Amd64).expect("v3");
    assert_eq!(h.code_length, 83);
    assert_eq!(h.return_kind, Some(1));
    assert_eq!(h.header_bits, 4 + 9 + 3);
    // Version 1 has no ReturnKind bits: the same bits give another length.
    assert_ne!(code_length(&t, addr, 1, GcInfoArch::Amd64).expect("v1"), 83);
    // Arm32 doubles.
    assert_eq!(code_length(&t, addr, 3, GcInfoArch::Arm).expect("arm"), 166);
}

/// Version 1 fat headers have 9 flag bits; version 2 has 10.
#[test]
fn version_1_has_nine_flag_bits() {
    for (version, width) in [(1u32, 9u32), (2, 10)] {
        let mut w = BitWriter::default();
        w.write(1, 1);
        w.write(0, width);
        if version == 2 {
            w.write(0, 4);
        }
        w.var_unsigned(1000, 8);
        w.var_unsigned(2, 3); // stack area
        w.var_unsigned(5, 2); // safe points
        w.var_unsigned(1, 1); // ranges
        let (t, addr) = lay_out(DataLayout::LE64, 0, 0xA5, &w.bits, 8);
        let h = decode_header(&t, addr, version, GcInfoArch::Amd64).expect("header");
        assert!(!h.slim);
        assert_eq!(h.code_length, 1000);
        assert_eq!(h.size_of_stack_outgoing_and_scratch_area, Some(16));
        assert_eq!(h.num_safe_points, 5);
        assert_eq!(h.num_interruptible_ranges, 1);
    }
}

/// Version 4 ignores the obsolete security object and PSPSym flags.
#[test]
fn version_4_ignores_obsolete_flags() {
    let mut w = BitWriter::default();
    w.write(1, 1);
    w.write(0x2 | 0x8, 10);
    w.var_unsigned(64, 8);
    w.var_unsigned(0, 3);
    w.var_unsigned(0, 2);
    w.var_unsigned(0, 1);
    let (t, addr) = lay_out(DataLayout::LE64, 0, 0, &w.bits, 8);
    let h = decode_header(&t, addr, 4, GcInfoArch::Amd64).expect("header");
    assert_eq!(h.code_length, 64);
    assert_eq!(h.security_object_stack_slot, None);
    assert_eq!(h.psp_sym_stack_slot, None);
    assert_eq!(h.prolog_size, None);
}

/// Values a real header cannot hold are typed errors.
#[test]
fn impossible_values_are_corrupt() {
    // Code length 0.
    let mut w = BitWriter::default();
    w.write(0, 2);
    w.var_unsigned(0, 8);
    w.var_unsigned(0, 2);
    let (t, addr) = lay_out(DataLayout::LE64, 0, 0, &w.bits, 8);
    assert!(matches!(
        code_length(&t, addr, 4, GcInfoArch::Amd64),
        Err(ContractError::Corrupt { .. })
    ));
    // Code length beyond 32 bits once denormalized.
    let mut w = BitWriter::default();
    w.write(0, 2);
    w.var_unsigned(1 << 31, 8);
    let (t, addr) = lay_out(DataLayout::LE64, 0, 0, &w.bits, 8);
    assert!(matches!(
        code_length(&t, addr, 4, GcInfoArch::Arm64),
        Err(ContractError::Corrupt { .. })
    ));
    assert_eq!(
        code_length(&t, addr, 4, GcInfoArch::Amd64).expect("fits"),
        1 << 31
    );
    // A stack slot beyond 32 bits.
    let mut w = BitWriter::default();
    w.write(1, 1);
    w.write(0x4, 10);
    w.var_unsigned(100, 8);
    w.var_unsigned(1, 5);
    w.var_unsigned(1, 3);
    w.var_signed(1 << 40, 6);
    let (t, addr) = lay_out(DataLayout::LE64, 0, 0, &w.bits, 8);
    assert!(matches!(
        decode_header(&t, addr, 4, GcInfoArch::Amd64),
        Err(ContractError::Corrupt { .. })
    ));
    // All ones: a fat header whose numbers never end.
    let mut b = MemoryBuilder::new(DataLayout::LE64);
    b.region(0x1000, 64).bytes(0, &[0xFF; 64]);
    let t = b.into_target();
    assert!(matches!(
        decode_header(&t, 0x1000, 2, GcInfoArch::Amd64),
        Err(ContractError::Corrupt { .. })
    ));
}

/// The encoder's byte order matches what the runtime writes on little-endian targets:
/// the words, read as bytes, are the stream LSB-first.
#[test]
fn encoder_layout_is_lsb_first_bytes_on_little_endian() {
    let mut w = BitWriter::default();
    w.write(0, 2);
    w.var_unsigned(83, 8);
    let (t, addr) = lay_out(DataLayout::LE64, 0, 0, &w.bits, 0);
    assert_eq!(t.read_bytes(addr, 2).expect("bytes"), vec![0x4C, 0x01]);
    assert_eq!(t.layout().endian, Endian::Little);
}

/// Unwind blob sizes: the digest's x64 examples and ARM64 xdata with and without the
/// extension word and the E bit.
#[test]
fn unwind_examples() {
    for (codes, size) in [(3u8, 16u64), (4, 16), (0, 8)] {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 4).bytes(0, &[0x09, 0x04, codes, 0x00]);
        assert_eq!(
            unwind_data_size(&b.into_target(), 0x1000, UnwindArch::Amd64).expect("size"),
            size
        );
    }
    let x = 1u32 << 20;
    let e = 1u32 << 21;
    let cases: [(&[u32], u64); 4] = [
        // 1 epilog scope, 2 code words: 4 + 4 + 8 + 4.
        (&[40 | x | (1 << 22) | (2 << 27)], 20),
        // E set: the epilog field is an index, no scope words: 4 + 8 + 4.
        (&[40 | x | e | (1 << 22) | (2 << 27)], 16),
        // Extension word: 3 scopes, 5 code words: 8 + 12 + 20 + 4.
        (&[40 | x, 3 | (5 << 16)], 44),
        // Extension word and E: 8 + 20 + 4.
        (&[40 | x | e, 3 | (5 << 16)], 32),
    ];
    for (words, size) in cases {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(0x1000, 4 * words.len());
        for (i, w) in words.iter().enumerate() {
            r.u32(4 * i, *w);
        }
        assert_eq!(
            unwind_data_size(&b.into_target(), 0x1000, UnwindArch::Arm64).expect("size"),
            size,
            "{words:x?}"
        );
    }
}
