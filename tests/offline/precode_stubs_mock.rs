//! PrecodeStubs over memory laid out by this file (`cdac::contracts::precode_stubs`).
//!
//! The four code layouts the contract must tell apart, x64 and arm64 stub and fixup
//! precodes, come from this file's own byte tables (encoded by hand from the instruction
//! set manuals, and for x64 checked against the bytes of the live .NET 8 testbed); the
//! structures are written from this file's own field tables; the descriptor the library
//! reads is JSON built from the same tables. Covered:
//! * template matching (version 3): each layout matches its own template whatever its
//!   ignored bytes hold, and no other layout's; any compared byte changed breaks the match;
//! * version 3 end to end through a PlatformMetadata object: stub, P/Invoke import,
//!   this/return-buffer (MethodDesc one more pointer away), UMEntry / interpreter / dynamic
//!   helper (no MethodDesc), type 0 or unknown (no precode), fixup, garbage;
//! * versions 1 and 2 (the type byte in the code, refined through the stub data) on the same
//!   layouts, with the machine descriptor as an object and as the literal globals of cdac's
//!   shipped .NET 8 descriptor; a 2-byte, shifted type field on every pointer size and byte
//!   order; the ARM32 Thumb bit;
//! * NonVirtualEntry2MethodDesc through a range section map: range lists hold precodes,
//!   other sections go to the ExecutionManager, unmapped addresses and sections being deleted
//!   hold nothing;
//! * errors: unsupported versions, a missing machine descriptor, bad widths and page sizes,
//!   unreadable data.

use std::collections::BTreeMap;

use cdac::contracts::precode_stubs::{
    method_desc_from_stub, non_virtual_entry_to_method_desc, precode_stubs, resolve_entry_point,
    KnownPrecodeType, MachineDescriptorSource, PrecodeTemplate,
};
use cdac::contracts::ContractError;
use cdac::descriptor::{json, DataDescriptor};
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::{DataLayout, Endian, Target};

// ---------------------------------------------------------------------------------------------
// The four layouts
// ---------------------------------------------------------------------------------------------

/// One architecture's precodes: code bytes (24 each) with the positions that vary from one
/// precode to another (non-zero = not compared), and the type values.
#[derive(Debug, Clone)]
struct Arch {
    name: &'static str,
    stub: [u8; 24],
    stub_ignored: [u8; 24],
    fixup: [u8; 24],
    fixup_ignored: [u8; 24],
    stub_type: u8,
    fixup_type: u8,
    fixup_code_offset: u8,
}

const PAGE: u64 = 0x4000;

/// x64, data 16 KiB after the code.
/// Stub:  mov r10, [rip+0x3ff9] (data+0); jmp [rip+0x3ffb] (data+8); nop; then whatever
///        follows the template in the runtime image (never compared).
/// Fixup: jmp [rip+0x3ffa] (data+0); mov r10, [rip+0x3ffb] (data+8);
///        jmp [rip+0x3ffd] (data+16); nop; then filler.
fn x64() -> Arch {
    let mut stub = [0u8; 24];
    stub[..14].copy_from_slice(&[
        0x4c, 0x8b, 0x15, 0xf9, 0x3f, 0x00, 0x00, 0xff, 0x25, 0xfb, 0x3f, 0x00, 0x00, 0x90,
    ]);
    stub[14..].copy_from_slice(&[0xff, 0x25, 0xfa, 0x3f, 0x00, 0x00, 0x4c, 0x8b, 0x15, 0xfb]);
    let mut stub_ignored = [0u8; 24];
    stub_ignored[14..].fill(1);
    let mut fixup = [0u8; 24];
    fixup[..20].copy_from_slice(&[
        0xff, 0x25, 0xfa, 0x3f, 0x00, 0x00, 0x4c, 0x8b, 0x15, 0xfb, 0x3f, 0x00, 0x00, 0xff, 0x25,
        0xfd, 0x3f, 0x00, 0x00, 0x90,
    ]);
    fixup[20..].copy_from_slice(&[0x48, 0x8b, 0x05, 0xf9]);
    let mut fixup_ignored = [0u8; 24];
    fixup_ignored[20..].fill(1);
    Arch {
        name: "x64",
        stub,
        stub_ignored,
        fixup,
        fixup_ignored,
        stub_type: 0x4c,
        fixup_type: 0xff,
        fixup_code_offset: 6,
    }
}

/// An A64 `LDR Xt, <literal>` at `pc_offset` loading from `target_offset` (both from the
/// precode start), little-endian.
fn ldr_literal(rt: u32, pc_offset: u64, target_offset: u64) -> [u8; 4] {
    let imm19 = ((target_offset - pc_offset) / 4) as u32;
    (0x5800_0000 | (imm19 << 5) | rt).to_le_bytes()
}

/// A64 `BR Xn`.
fn br(rn: u32) -> [u8; 4] {
    (0xd61f_0000 | (rn << 5)).to_le_bytes()
}

/// arm64, data 16 KiB after the code.
/// Stub:  ldr x10, Target (data+8); ldr x12, MethodDesc (data+0); br x10; brk #0xf000 x3.
/// Fixup: ldr x11, Target (data+0); br x11; ldr x12, MethodDesc (data+8);
///        ldr x11, PrecodeFixupThunk (data+16); br x11; then filler.
fn arm64() -> Arch {
    let brk = (0xd420_0000u32 | (0xf000 << 5)).to_le_bytes();
    let mut stub = [0u8; 24];
    for (i, word) in [
        ldr_literal(10, 0, PAGE + 8),
        ldr_literal(12, 4, PAGE),
        br(10),
        brk,
        brk,
        brk,
    ]
    .iter()
    .enumerate()
    {
        stub[i * 4..i * 4 + 4].copy_from_slice(word);
    }
    let mut fixup = [0u8; 24];
    for (i, word) in [
        ldr_literal(11, 0, PAGE),
        br(11),
        ldr_literal(12, 8, PAGE + 8),
        ldr_literal(11, 12, PAGE + 16),
        br(11),
        ldr_literal(9, 20, PAGE),
    ]
    .iter()
    .enumerate()
    {
        fixup[i * 4..i * 4 + 4].copy_from_slice(word);
    }
    let mut fixup_ignored = [0u8; 24];
    fixup_ignored[20..].fill(1);
    Arch {
        name: "arm64",
        stub,
        stub_ignored: [0; 24],
        fixup,
        fixup_ignored,
        stub_type: 0x4a,
        fixup_type: 0x0b,
        fixup_code_offset: 8,
    }
}

#[test]
fn hand_encoded_arm64_words_are_the_known_ones() {
    // Spot checks of the encoder against words quoted in public sources.
    assert_eq!(ldr_literal(11, 0, PAGE), [0x0b, 0x00, 0x02, 0x58]);
    assert_eq!(ldr_literal(12, 8, PAGE + 8), [0x0c, 0x00, 0x02, 0x58]);
    assert_eq!(ldr_literal(11, 12, PAGE + 16), [0x2b, 0x00, 0x02, 0x58]);
    assert_eq!(br(11), [0x60, 0x01, 0x1f, 0xd6]);
    assert_eq!(br(10), [0x40, 0x01, 0x1f, 0xd6]);
    // The low byte is the type byte versions 1 and 2 read: 0x4a stub, 0x0b fixup, for any
    // page size the runtime uses (16, 32, 64 KiB).
    for page in [0x4000u64, 0x8000, 0x10000] {
        assert_eq!(ldr_literal(10, 0, page + 8)[0], 0x4a);
        assert_eq!(ldr_literal(11, 0, page)[0], 0x0b);
    }
}

fn template(bytes: &[u8; 24], ignored: &[u8; 24]) -> PrecodeTemplate {
    PrecodeTemplate {
        bytes: bytes.to_vec(),
        ignored: ignored.to_vec(),
    }
}

#[test]
fn template_matching_over_the_four_layouts() {
    let arches = [x64(), arm64()];
    let mut layouts = Vec::new();
    for a in &arches {
        layouts.push((format!("{} stub", a.name), a.stub, a.stub_ignored));
        layouts.push((format!("{} fixup", a.name), a.fixup, a.fixup_ignored));
    }
    for (name, bytes, ignored) in &layouts {
        let t = template(bytes, ignored);
        assert!(t.matches(bytes), "{name} matches itself");
        // Ignored positions may hold anything.
        let mut noisy = *bytes;
        for (i, b) in noisy.iter_mut().enumerate() {
            if ignored[i] != 0 {
                *b = b.wrapping_add(0x5a);
            }
        }
        assert!(t.matches(&noisy), "{name}: ignored bytes changed");
        // Longer input is fine (only the template's length is compared), shorter is not.
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(&[0xcc; 8]);
        assert!(t.matches(&longer), "{name}: longer input");
        assert!(!t.matches(&bytes[..23]), "{name}: shorter input");
        // Every compared byte matters.
        for i in (0..24).filter(|&i| ignored[i] == 0) {
            let mut changed = *bytes;
            changed[i] ^= 0x01;
            assert!(
                !t.matches(&changed),
                "{name}: byte {i} changed still matches"
            );
        }
        // No other layout matches.
        for (other, other_bytes, _) in &layouts {
            if other != name {
                assert!(!t.matches(other_bytes), "{name} template matches {other}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Structures and descriptors (this file's field tables)
// ---------------------------------------------------------------------------------------------

/// Offsets in this file's `PrecodeMachineDescriptor` object.
mod pmd {
    pub const STUB_CODE_PAGE_SIZE: usize = 0; // uint32
    pub const OFFSET_OF_PRECODE_TYPE: usize = 4;
    pub const READ_WIDTH_OF_PRECODE_TYPE: usize = 5;
    pub const SHIFT_OF_PRECODE_TYPE: usize = 6;
    pub const INVALID_PRECODE_TYPE: usize = 7;
    pub const STUB_PRECODE_TYPE: usize = 8;
    pub const HAS_PINVOKE_IMPORT_PRECODE: usize = 9;
    pub const PINVOKE_IMPORT_PRECODE_TYPE: usize = 10;
    pub const HAS_FIXUP_PRECODE: usize = 11;
    pub const FIXUP_PRECODE_TYPE: usize = 12;
    pub const THIS_POINTER_RET_BUF_PRECODE_TYPE: usize = 13;
    pub const UM_ENTRY_PRECODE_TYPE: usize = 14;
    pub const INTERPRETER_PRECODE_TYPE: usize = 15;
    pub const DYNAMIC_HELPER_PRECODE_TYPE: usize = 16;
    pub const FIXUP_CODE_OFFSET: usize = 17;
    pub const STUB_PRECODE_SIZE: usize = 18;
    pub const FIXUP_STUB_PRECODE_SIZE: usize = 19;
    pub const STUB_BYTES: usize = 20;
    pub const STUB_IGNORED_BYTES: usize = 52;
    pub const FIXUP_BYTES: usize = 84;
    pub const FIXUP_IGNORED_BYTES: usize = 116;
    pub const SIZE: usize = 148;
}

/// `PlatformMetadata`: the flags byte, then the embedded machine descriptor.
const PM_CODE_POINTER_FLAGS: usize = 0;
const PM_PRECODE_MACHINE_DESCRIPTOR: usize = 8;

/// .NET 10 type values (v3); v1/v2 use the stub and fixup values of the arch.
const PINVOKE_TYPE: u8 = 0x05;
const INTERPRETER_TYPE: u8 = 0x06;
const UMENTRY_TYPE: u8 = 0x07;
const THISPTR_TYPE: u8 = 0x08;
const DYNAMIC_HELPER_TYPE: u8 = 0x0a;

/// How the test descriptor describes the machine descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MdForm {
    /// Object inside PlatformMetadata (.NET 10).
    PlatformMetadata,
    /// Object named by a `PrecodeMachineDescriptor` global (earlier builds).
    Global,
    /// Literal `PrecodeMachineDescriptor.<Field>` globals (cdac's .NET 8 descriptor).
    Literals,
}

/// Field offsets of the data structures for a pointer size.
fn data_types(version: u64, ps: u64) -> String {
    let first = if version == 1 {
        "MethodDesc"
    } else {
        "SecretParam"
    };
    let type_kind = if version >= 3 { "nuint" } else { "uint8" };
    format!(
        r#""StubPrecodeData": {{ "{first}": [0, "pointer"], "Target": [{ps}, "pointer"], "Type": [{}, "{type_kind}"] }},
    "FixupPrecodeData": {{ "Target": [0, "pointer"], "MethodDesc": [{ps}, "pointer"], "PrecodeFixupThunk": [{}, "pointer"] }},
    "ThisPtrRetBufPrecodeData": {{ "Target": [0, "pointer"], "MethodDesc": [{ps}, "pointer"] }}"#,
        2 * ps,
        2 * ps
    )
}

fn pmd_type(version: u64) -> String {
    use pmd::*;
    let mut fields = vec![
        format!(r#""StubCodePageSize": [{STUB_CODE_PAGE_SIZE}, "uint32"]"#),
        format!(r#""InvalidPrecodeType": [{INVALID_PRECODE_TYPE}, "uint8"]"#),
        format!(r#""StubPrecodeType": [{STUB_PRECODE_TYPE}, "uint8"]"#),
        format!(r#""HasPInvokeImportPrecode": [{HAS_PINVOKE_IMPORT_PRECODE}, "uint8"]"#),
        format!(r#""PInvokeImportPrecodeType": [{PINVOKE_IMPORT_PRECODE_TYPE}, "uint8"]"#),
        format!(r#""HasFixupPrecode": [{HAS_FIXUP_PRECODE}, "uint8"]"#),
        format!(r#""FixupPrecodeType": [{FIXUP_PRECODE_TYPE}, "uint8"]"#),
        format!(
            r#""ThisPointerRetBufPrecodeType": [{THIS_POINTER_RET_BUF_PRECODE_TYPE}, "uint8"]"#
        ),
    ];
    if version < 3 {
        fields.push(format!(
            r#""OffsetOfPrecodeType": [{OFFSET_OF_PRECODE_TYPE}, "uint8"]"#
        ));
        fields.push(format!(
            r#""ReadWidthOfPrecodeType": [{READ_WIDTH_OF_PRECODE_TYPE}, "uint8"]"#
        ));
        fields.push(format!(
            r#""ShiftOfPrecodeType": [{SHIFT_OF_PRECODE_TYPE}, "uint8"]"#
        ));
    } else {
        fields.push(format!(
            r#""UMEntryPrecodeType": [{UM_ENTRY_PRECODE_TYPE}, "uint8"]"#
        ));
        fields.push(format!(
            r#""InterpreterPrecodeType": [{INTERPRETER_PRECODE_TYPE}, "uint8"]"#
        ));
        fields.push(format!(
            r#""DynamicHelperPrecodeType": [{DYNAMIC_HELPER_PRECODE_TYPE}, "uint8"]"#
        ));
        fields.push(format!(
            r#""FixupCodeOffset": [{FIXUP_CODE_OFFSET}, "uint8"]"#
        ));
        fields.push(format!(
            r#""StubPrecodeSize": [{STUB_PRECODE_SIZE}, "uint8"]"#
        ));
        fields.push(format!(
            r#""FixupStubPrecodeSize": [{FIXUP_STUB_PRECODE_SIZE}, "uint8"]"#
        ));
        fields.push(format!(r#""StubBytes": {STUB_BYTES}"#));
        fields.push(format!(r#""StubIgnoredBytes": {STUB_IGNORED_BYTES}"#));
        fields.push(format!(r#""FixupBytes": {FIXUP_BYTES}"#));
        fields.push(format!(r#""FixupIgnoredBytes": {FIXUP_IGNORED_BYTES}"#));
    }
    format!(
        r#""PrecodeMachineDescriptor": {{ "!": {}, {} }}"#,
        SIZE,
        fields.join(", ")
    )
}

/// The machine-descriptor values a test uses.
#[derive(Debug, Clone)]
struct Machine {
    page: u32,
    offset_of_type: u8,
    width: u8,
    shift: u8,
    stub_type: u8,
    fixup_type: u8,
    fixup_code_offset: u8,
    stub_template: Option<PrecodeTemplate>,
    fixup_template: Option<PrecodeTemplate>,
    code_pointer_flags: u8,
}

impl Machine {
    fn for_arch(a: &Arch) -> Machine {
        Machine {
            page: PAGE as u32,
            offset_of_type: 0,
            width: 1,
            shift: 0,
            stub_type: a.stub_type,
            fixup_type: a.fixup_type,
            fixup_code_offset: a.fixup_code_offset,
            stub_template: Some(template(&a.stub, &a.stub_ignored)),
            fixup_template: Some(template(&a.fixup, &a.fixup_ignored)),
            code_pointer_flags: 0,
        }
    }

    /// Writes the object form at `offset` of `r`.
    fn write(&self, r: &mut cdac::memory::builder::Region, offset: usize) {
        use pmd::*;
        r.u32(offset + STUB_CODE_PAGE_SIZE, self.page)
            .u8(offset + OFFSET_OF_PRECODE_TYPE, self.offset_of_type)
            .u8(offset + READ_WIDTH_OF_PRECODE_TYPE, self.width)
            .u8(offset + SHIFT_OF_PRECODE_TYPE, self.shift)
            .u8(offset + INVALID_PRECODE_TYPE, 0xcc)
            .u8(offset + STUB_PRECODE_TYPE, self.stub_type)
            .u8(offset + HAS_PINVOKE_IMPORT_PRECODE, 1)
            .u8(offset + PINVOKE_IMPORT_PRECODE_TYPE, PINVOKE_TYPE)
            .u8(offset + HAS_FIXUP_PRECODE, 1)
            .u8(offset + FIXUP_PRECODE_TYPE, self.fixup_type)
            .u8(offset + THIS_POINTER_RET_BUF_PRECODE_TYPE, THISPTR_TYPE)
            .u8(offset + UM_ENTRY_PRECODE_TYPE, UMENTRY_TYPE)
            .u8(offset + INTERPRETER_PRECODE_TYPE, INTERPRETER_TYPE)
            .u8(offset + DYNAMIC_HELPER_PRECODE_TYPE, DYNAMIC_HELPER_TYPE)
            .u8(offset + FIXUP_CODE_OFFSET, self.fixup_code_offset);
        if let Some(t) = &self.stub_template {
            r.u8(offset + STUB_PRECODE_SIZE, t.bytes.len() as u8)
                .bytes(offset + STUB_BYTES, &t.bytes)
                .bytes(offset + STUB_IGNORED_BYTES, &t.ignored);
        }
        if let Some(t) = &self.fixup_template {
            r.u8(offset + FIXUP_STUB_PRECODE_SIZE, t.bytes.len() as u8)
                .bytes(offset + FIXUP_BYTES, &t.bytes)
                .bytes(offset + FIXUP_IGNORED_BYTES, &t.ignored);
        }
    }

    /// The literal-globals form.
    fn literals(&self) -> String {
        let p = "PrecodeMachineDescriptor.";
        [
            format!(r#""{p}StubCodePageSize": ["{:#x}", "uint32"]"#, self.page),
            format!(
                r#""{p}OffsetOfPrecodeType": ["{:#x}", "uint8"]"#,
                self.offset_of_type
            ),
            format!(
                r#""{p}ReadWidthOfPrecodeType": ["{:#x}", "uint8"]"#,
                self.width
            ),
            format!(r#""{p}ShiftOfPrecodeType": ["{:#x}", "uint8"]"#, self.shift),
            format!(
                r#""{p}StubPrecodeType": ["{:#x}", "uint8"]"#,
                self.stub_type
            ),
            format!(r#""{p}HasPInvokeImportPrecode": ["0x1", "uint8"]"#),
            format!(r#""{p}PInvokeImportPrecodeType": ["{PINVOKE_TYPE:#x}", "uint8"]"#),
            format!(r#""{p}HasFixupPrecode": ["0x1", "uint8"]"#),
            format!(
                r#""{p}FixupPrecodeType": ["{:#x}", "uint8"]"#,
                self.fixup_type
            ),
            format!(
                r#""{p}FixupCodeOffset": ["{:#x}", "uint8"]"#,
                self.fixup_code_offset
            ),
        ]
        .join(",\n    ")
    }
}

/// Builds the descriptor: contract version, data types, and the machine descriptor in the
/// requested form (object at `md_object` / PlatformMetadata at `pm_object`).
fn descriptor(
    layout: DataLayout,
    version: u64,
    form: MdForm,
    machine: &Machine,
    object: u64,
    extra_globals: &str,
) -> DataDescriptor {
    let ps = u64::from(layout.pointer_size);
    let (types, globals, contracts) = match form {
        MdForm::PlatformMetadata => (
            format!(
                r#"{}, "PlatformMetadata": {{ "CodePointerFlags": [{PM_CODE_POINTER_FLAGS}, "uint8"], "PrecodeMachineDescriptor": {PM_PRECODE_MACHINE_DESCRIPTOR} }}"#,
                pmd_type(version)
            ),
            r#""PlatformMetadata": [[1], "pointer"]"#.to_string(),
            r#", "PlatformMetadata": 1"#.to_string(),
        ),
        MdForm::Global => (
            pmd_type(version),
            r#""PrecodeMachineDescriptor": [[1], "pointer"]"#.to_string(),
            String::new(),
        ),
        MdForm::Literals => (
            r#""Unused": {}"#.to_string(),
            machine.literals(),
            String::new(),
        ),
    };
    let text = format!(
        r#"{{
  "version": 0,
  "contracts": {{ "PrecodeStubs": {version}{contracts} }},
  "types": {{
    {types},
    {}
  }},
  "globals": {{
    {globals}{extra_globals}
  }}
}}"#,
        data_types(version, ps)
    );
    let physical = json::parse("test", text.as_bytes()).expect("test descriptor JSON");
    let mut d = DataDescriptor::new(layout);
    d.merge("test", &physical, &[0, object])
        .expect("merge test descriptor");
    d
}

// ---------------------------------------------------------------------------------------------
// Precode pages
// ---------------------------------------------------------------------------------------------

/// What the test puts in one precode slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// A stub precode whose data Type is this value.
    Stub(u8),
    /// A fixup precode.
    Fixup,
    /// Bytes that are no precode.
    Garbage,
}

const CODE_64: u64 = 0x7f00_0000_0000;
const CODE_32: u64 = 0x4000_0000;
const MD_BASE: u64 = 0x5500_0000;
const RETBUF_DATA: u64 = 0x5600_0000;

fn code_base(layout: DataLayout) -> u64 {
    if layout.pointer_size == 8 {
        CODE_64
    } else {
        CODE_32
    }
}

/// The MethodDesc the test stores for slot `i`.
fn md_of(i: usize) -> u64 {
    MD_BASE + 0x40 * i as u64
}

/// Lays out a code page with `slots` (24 bytes each) and its data page `page` bytes later.
/// Returns the entry points. `code` writes one slot's code bytes.
fn write_precodes(
    b: &mut MemoryBuilder,
    version: u64,
    page: u64,
    slots: &[Slot],
    code: &dyn Fn(Slot, &mut [u8; 24]),
) -> Vec<u64> {
    let ps = b.layout().pointer_size as usize;
    let base = code_base(b.layout());
    let n = slots.len();
    let mut code_bytes = vec![0u8; n * 24];
    for (i, s) in slots.iter().enumerate() {
        let mut c = [0u8; 24];
        code(*s, &mut c);
        code_bytes[i * 24..i * 24 + 24].copy_from_slice(&c);
    }
    b.region(base, n * 24).bytes(0, &code_bytes);
    let data = b.region(base + page, n * 24 + 8);
    for (i, s) in slots.iter().enumerate() {
        let o = i * 24;
        match s {
            Slot::Stub(ty) => {
                // Stub data: MethodDesc / SecretParam, Target, Type (a byte, or a whole
                // pointer-sized word in version 3).
                let secret = if *ty == THISPTR_TYPE && version >= 2 {
                    RETBUF_DATA + 0x20 * i as u64
                } else {
                    md_of(i)
                };
                data.pointer(o, secret).pointer(o + ps, 0x1234_5670);
                if version >= 3 {
                    data.pointer(o + 2 * ps, u64::from(*ty));
                } else {
                    data.u8(o + 2 * ps, *ty);
                }
            }
            Slot::Fixup => {
                data.pointer(o, base + (i * 24) as u64 + 6)
                    .pointer(o + ps, md_of(i))
                    .pointer(o + 2 * ps, 0x1234_5670);
            }
            Slot::Garbage => {
                data.pointer(o, md_of(i));
            }
        }
    }
    // This/return-buffer data (version 2 and later): Target, MethodDesc.
    if slots.contains(&Slot::Stub(THISPTR_TYPE)) && version >= 2 {
        let r = b.region(RETBUF_DATA, 0x20 * n);
        for (i, s) in slots.iter().enumerate() {
            if *s == Slot::Stub(THISPTR_TYPE) {
                r.pointer(0x20 * i, 0x1234_5670)
                    .pointer(0x20 * i + ps, md_of(i));
            }
        }
    }
    (0..n).map(|i| base + (i * 24) as u64).collect()
}

/// Code bytes of the real layouts.
fn arch_code(a: &Arch) -> impl Fn(Slot, &mut [u8; 24]) + '_ {
    move |s, c| match s {
        Slot::Stub(_) => *c = a.stub,
        Slot::Fixup => *c = a.fixup,
        Slot::Garbage => c.copy_from_slice(&[0xcc; 24]),
    }
}

// ---------------------------------------------------------------------------------------------
// Version 3: templates
// ---------------------------------------------------------------------------------------------

#[test]
fn version_3_classifies_by_template_on_x64_and_arm64() {
    for a in [x64(), arm64()] {
        let layout = DataLayout::LE64;
        let machine = Machine::for_arch(&a);
        let slots = [
            Slot::Stub(a.stub_type),
            Slot::Stub(PINVOKE_TYPE),
            Slot::Fixup,
            Slot::Stub(THISPTR_TYPE),
            Slot::Stub(UMENTRY_TYPE),
            Slot::Stub(INTERPRETER_TYPE),
            Slot::Stub(DYNAMIC_HELPER_TYPE),
            Slot::Stub(0),
            Slot::Stub(0x77),
            Slot::Garbage,
        ];
        let mut b = MemoryBuilder::new(layout);
        let entries = write_precodes(&mut b, 3, PAGE, &slots, &arch_code(&a));
        let pm = b.alloc(PM_PRECODE_MACHINE_DESCRIPTOR + pmd::SIZE, 8);
        let pm_addr = pm.addr;
        pm.u8(PM_CODE_POINTER_FLAGS, 0);
        machine.write(pm, PM_PRECODE_MACHINE_DESCRIPTOR);
        let target = b.into_target();
        let d = descriptor(layout, 3, MdForm::PlatformMetadata, &machine, pm_addr, "");
        let stubs = precode_stubs(&target, &d).unwrap();
        assert_eq!(stubs.version(), 3);
        assert_eq!(
            stubs.machine().source,
            MachineDescriptorSource::Object(pm_addr + PM_PRECODE_MACHINE_DESCRIPTOR as u64)
        );
        assert_eq!(stubs.machine().stub_template, machine.stub_template);
        assert_eq!(stubs.machine().fixup_code_offset, Some(a.fixup_code_offset));

        let expect: [(Option<KnownPrecodeType>, Option<u64>); 10] = [
            (Some(KnownPrecodeType::Stub), Some(md_of(0))),
            (Some(KnownPrecodeType::PInvokeImport), Some(md_of(1))),
            (Some(KnownPrecodeType::Fixup), Some(md_of(2))),
            (Some(KnownPrecodeType::ThisPtrRetBuf), Some(md_of(3))),
            (Some(KnownPrecodeType::UMEntry), None),
            (Some(KnownPrecodeType::Interpreter), None),
            (Some(KnownPrecodeType::DynamicHelper), None),
            (None, None),
            (None, None),
            (None, None),
        ];
        for (i, (kind, md)) in expect.iter().enumerate() {
            let p = stubs.precode(entries[i]).unwrap();
            assert_eq!(p.map(|p| p.kind), *kind, "{} slot {i}", a.name);
            if let Some(p) = p {
                assert_eq!(p.instr, entries[i]);
                assert_eq!(p.data, entries[i] + PAGE);
            }
            assert_eq!(
                stubs.method_desc_from_stub(entries[i]).unwrap(),
                *md,
                "{} slot {i}",
                a.name
            );
            assert_eq!(method_desc_from_stub(&target, &d, entries[i]).unwrap(), *md);
        }
        // Misaligned entries are no precode.
        assert_eq!(stubs.precode(entries[0] + 4).unwrap(), None);
        // Candidate entry points: the pointer-aligned addresses a 24-byte precode holding
        // the address could start at, nearest first.
        assert_eq!(
            stubs.candidate_entry_points(entries[1] + 13),
            vec![entries[1] + 8, entries[1], entries[0] + 16]
        );
        // The other architecture's precodes are not precodes here.
        let other = if a.name == "x64" { arm64() } else { x64() };
        let mut b = MemoryBuilder::new(layout);
        let foreign = write_precodes(
            &mut b,
            3,
            PAGE,
            &[Slot::Stub(a.stub_type), Slot::Fixup],
            &arch_code(&other),
        );
        let pm = b.alloc(PM_PRECODE_MACHINE_DESCRIPTOR + pmd::SIZE, 8);
        let pm_addr = pm.addr;
        machine.write(pm, PM_PRECODE_MACHINE_DESCRIPTOR);
        let target = b.into_target();
        let d = descriptor(layout, 3, MdForm::PlatformMetadata, &machine, pm_addr, "");
        for e in foreign {
            assert_eq!(
                method_desc_from_stub(&target, &d, e).unwrap(),
                None,
                "{}",
                a.name
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Versions 1 and 2: the type byte
// ---------------------------------------------------------------------------------------------

#[test]
fn versions_1_and_2_classify_by_type_byte_on_x64_and_arm64() {
    for a in [x64(), arm64()] {
        for version in [1u64, 2] {
            for form in [MdForm::PlatformMetadata, MdForm::Global, MdForm::Literals] {
                let layout = DataLayout::LE64;
                let mut machine = Machine::for_arch(&a);
                machine.stub_template = None;
                machine.fixup_template = None;
                let slots = [
                    Slot::Stub(a.stub_type),
                    Slot::Stub(PINVOKE_TYPE),
                    Slot::Fixup,
                    Slot::Stub(THISPTR_TYPE),
                    Slot::Stub(0),
                    Slot::Garbage,
                ];
                let mut b = MemoryBuilder::new(layout);
                let entries = write_precodes(&mut b, version, PAGE, &slots, &arch_code(&a));
                let obj = b.alloc(PM_PRECODE_MACHINE_DESCRIPTOR + pmd::SIZE, 8);
                let object = match form {
                    MdForm::PlatformMetadata => {
                        machine.write(obj, PM_PRECODE_MACHINE_DESCRIPTOR);
                        obj.addr
                    }
                    _ => {
                        machine.write(obj, 0);
                        obj.addr
                    }
                };
                let target = b.into_target();
                let d = descriptor(layout, version, form, &machine, object, "");
                let stubs = precode_stubs(&target, &d).unwrap();
                let what = format!("{} v{version} {form:?}", a.name);
                assert_eq!(
                    stubs.machine().source == MachineDescriptorSource::Globals,
                    form == MdForm::Literals,
                    "{what}"
                );
                let retbuf = if version == 1 { None } else { Some(md_of(3)) };
                let expect: [(Option<KnownPrecodeType>, Option<u64>); 6] = [
                    (Some(KnownPrecodeType::Stub), Some(md_of(0))),
                    (Some(KnownPrecodeType::PInvokeImport), Some(md_of(1))),
                    (Some(KnownPrecodeType::Fixup), Some(md_of(2))),
                    // Literal globals carry no this/return-buffer type value.
                    (
                        (form != MdForm::Literals).then_some(KnownPrecodeType::ThisPtrRetBuf),
                        if form == MdForm::Literals {
                            None
                        } else {
                            retbuf
                        },
                    ),
                    (None, None),
                    (None, None),
                ];
                for (i, (kind, md)) in expect.iter().enumerate() {
                    assert_eq!(
                        stubs.precode(entries[i]).unwrap().map(|p| p.kind),
                        *kind,
                        "{what} slot {i}"
                    );
                    assert_eq!(
                        stubs.method_desc_from_stub(entries[i]).unwrap(),
                        *md,
                        "{what} slot {i}"
                    );
                }
                // Versions 1 and 2 have no templates, so no candidate entry points.
                assert!(stubs.candidate_entry_points(entries[0]).is_empty());
            }
        }
    }
}

/// A 2-byte type field shifted right (the LoongArch form) on every pointer size and byte
/// order: the read honours the target's byte order.
#[test]
fn two_byte_shifted_type_on_every_layout() {
    const STUB: u8 = 0x4;
    const FIXUP: u8 = 0x3;
    for layout in DataLayout::ALL {
        for version in [1u64, 2] {
            let page = if layout.pointer_size == 8 {
                0x4000u32
            } else {
                0x1000
            };
            let machine = Machine {
                page,
                offset_of_type: 0,
                width: 2,
                shift: 5,
                stub_type: STUB,
                fixup_type: FIXUP,
                fixup_code_offset: 12,
                stub_template: None,
                fixup_template: None,
                code_pointer_flags: 0,
            };
            let code = move |s: Slot, c: &mut [u8; 24]| {
                let ty: u16 = match s {
                    Slot::Stub(_) => u16::from(STUB) << 5 | 0x15,
                    Slot::Fixup => u16::from(FIXUP) << 5 | 0x0e,
                    Slot::Garbage => 0x7 << 5,
                };
                let bytes = match layout.endian {
                    Endian::Little => ty.to_le_bytes(),
                    Endian::Big => ty.to_be_bytes(),
                };
                c[..2].copy_from_slice(&bytes);
            };
            let slots = [
                Slot::Stub(STUB),
                Slot::Fixup,
                Slot::Garbage,
                Slot::Stub(PINVOKE_TYPE),
            ];
            let mut b = MemoryBuilder::new(layout);
            let entries = write_precodes(&mut b, version, u64::from(page), &slots, &code);
            let obj = b.alloc(pmd::SIZE, 8);
            machine.write(obj, 0);
            let object = obj.addr;
            let target = b.into_target();
            let d = descriptor(layout, version, MdForm::Global, &machine, object, "");
            let what = format!("{layout:?} v{version}");
            let got: Vec<_> = entries
                .iter()
                .map(|&e| method_desc_from_stub(&target, &d, e).unwrap())
                .collect();
            assert_eq!(
                got,
                vec![Some(md_of(0)), Some(md_of(1)), None, Some(md_of(3))],
                "{what}"
            );
        }
    }
}

/// ARM32: entry points carry the Thumb bit; the precode starts one byte earlier.
#[test]
fn thumb_bit_is_cleared() {
    for form in [MdForm::PlatformMetadata, MdForm::Literals] {
        let layout = DataLayout::LE32;
        let machine = Machine {
            page: 0x1000,
            offset_of_type: 7,
            width: 1,
            shift: 0,
            stub_type: 0xff,
            fixup_type: 0xcf,
            fixup_code_offset: 5,
            stub_template: None,
            fixup_template: None,
            code_pointer_flags: 1,
        };
        let code = |s: Slot, c: &mut [u8; 24]| {
            c[7] = match s {
                Slot::Stub(_) => 0xff,
                Slot::Fixup => 0xcf,
                Slot::Garbage => 0x11,
            }
        };
        let mut b = MemoryBuilder::new(layout);
        let entries = write_precodes(&mut b, 1, 0x1000, &[Slot::Stub(0xff), Slot::Fixup], &code);
        let pm = b.alloc(PM_PRECODE_MACHINE_DESCRIPTOR + pmd::SIZE, 8);
        pm.u8(PM_CODE_POINTER_FLAGS, machine.code_pointer_flags);
        machine.write(pm, PM_PRECODE_MACHINE_DESCRIPTOR);
        let object = pm.addr;
        let target = b.into_target();
        // The literal form learns about Thumb from the Architecture global.
        let arch = r#", "Architecture": "arm""#;
        let d = descriptor(layout, 1, form, &machine, object, arch);
        let stubs = precode_stubs(&target, &d).unwrap();
        assert!(stubs.machine().thumb_bit, "{form:?}");
        for (i, e) in entries.iter().enumerate() {
            let p = stubs.precode(e | 1).unwrap().expect("precode");
            assert_eq!(p.instr, *e);
            assert_eq!(
                stubs.method_desc(&p).unwrap(),
                Some(md_of(i)),
                "{form:?} {i}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// NonVirtualEntry2MethodDesc through a range section map
// ---------------------------------------------------------------------------------------------

/// This file's range-section structures (sequential pointer-sized fields).
struct RsLayout {
    ps: u64,
}

impl RsLayout {
    fn frag(&self, i: u64) -> u64 {
        i * self.ps // RangeBegin, RangeEndOpen, RangeSection, Next
    }
    fn sec(&self, i: u64) -> u64 {
        i * self.ps // RangeBegin, RangeEndOpen, NextForDelete, JitManager, Flags, HeapList, R2RModule
    }
    fn json(&self) -> String {
        let p = self.ps;
        format!(
            r#",
    "RangeSectionMap": {{ "TopLevelData": 0 }},
    "RangeSectionFragment": {{ "RangeBegin": 0, "RangeEndOpen": {}, "RangeSection": {}, "Next": {} }},
    "RangeSection": {{ "RangeBegin": 0, "RangeEndOpen": {}, "NextForDelete": {}, "JitManager": {},
                      "Flags": [{}, "int32"], "HeapList": {}, "R2RModule": {} }}"#,
            p,
            2 * p,
            3 * p,
            p,
            2 * p,
            3 * p,
            4 * p,
            5 * p,
            6 * p
        )
    }
}

/// A section the test maps.
struct MappedSection {
    begin: u64,
    end: u64,
    flags: u32,
    deleting: bool,
}

/// Writes a range section map (5 levels over address bits 17.. on 64-bit targets, 2 levels
/// over bits 16.. on 32-bit ones) holding `sections`, one fragment per chunk, with the map
/// object at `map`.
fn write_map(b: &mut MemoryBuilder, map: u64, sections: &[MappedSection]) {
    let ps = u64::from(b.layout().pointer_size);
    let (levels, shift) = if ps == 8 { (5u32, 17u32) } else { (2, 16) };
    let rs = RsLayout { ps };
    let index = |a: u64, level: u32| ((a >> (shift + 8 * (level - 1))) & 0xff) as usize;
    let key = |a: u64, level: u32| (level, a.checked_shr(shift + 8 * level).unwrap_or(0));
    let mut next = if ps == 8 { 0x6000_0000u64 } else { 0x2000_0000 };
    let mut bump = |size: u64| {
        let a = next;
        next += size.div_ceil(0x100) * 0x100 + 0x100;
        a
    };
    let mut arrays: BTreeMap<(u32, u64), (u64, BTreeMap<usize, u64>)> = BTreeMap::new();
    arrays.insert((levels, 0), (map, BTreeMap::new()));
    for s in sections {
        let sec = bump(7 * ps);
        let r = b.region(sec, (7 * ps) as usize);
        r.pointer(rs.sec(0) as usize, s.begin)
            .pointer(rs.sec(1) as usize, s.end)
            .pointer(rs.sec(2) as usize, if s.deleting { sec } else { 0 })
            .pointer(rs.sec(3) as usize, 0x4a4a_0000)
            .u32(rs.sec(4) as usize, s.flags);
        for chunk in (s.begin >> shift)..=((s.end - 1) >> shift) {
            let a = chunk << shift;
            let frag = bump(4 * ps);
            b.region(frag, (4 * ps) as usize)
                .pointer(rs.frag(0) as usize, s.begin)
                .pointer(rs.frag(1) as usize, s.end)
                .pointer(rs.frag(2) as usize, sec);
            for level in (1..=levels).rev() {
                let this = if level == levels {
                    (levels, 0)
                } else {
                    key(a, level)
                };
                let value = if level == 1 {
                    frag
                } else {
                    let child = key(a, level - 1);
                    arrays
                        .entry(child)
                        .or_insert_with(|| (bump(256 * ps), BTreeMap::new()))
                        .0
                };
                arrays
                    .get_mut(&this)
                    .unwrap()
                    .1
                    .insert(index(a, level), value);
            }
        }
    }
    for (_, (addr, entries)) in arrays {
        let r = b.region(addr, (256 * ps) as usize);
        for (i, v) in entries {
            r.pointer(i * ps as usize, v);
        }
    }
}

#[test]
fn non_virtual_entry_to_method_desc_goes_by_range_section() {
    let a = x64();
    for layout in [DataLayout::LE64, DataLayout::LE32] {
        let ps = u64::from(layout.pointer_size);
        let mut machine = Machine::for_arch(&a);
        machine.stub_template = None;
        machine.fixup_template = None;
        let slots = [Slot::Stub(a.stub_type), Slot::Fixup, Slot::Garbage];
        let mut b = MemoryBuilder::new(layout);
        let entries = write_precodes(&mut b, 1, PAGE, &slots, &arch_code(&a));
        let base = code_base(layout);
        // A second precode page, in a section being deleted.
        let gone = base + 0x10_0000;
        b.region(gone, 24).bytes(0, &a.fixup);
        b.region(gone + PAGE, 24).pointer(ps as usize, md_of(9));
        // Precodes outside every range section.
        let stray = base + 0x40_0000;
        b.region(stray, 24).bytes(0, &a.fixup);
        b.region(stray + PAGE, 24).pointer(ps as usize, md_of(8));
        // A code heap section with no heap list: the ExecutionManager finds no method.
        let heap = base + 0x20_0000;
        b.region(heap, 24).bytes(0, &a.fixup);
        b.region(heap + PAGE, 24).pointer(ps as usize, md_of(7));
        let map = if ps == 8 { 0x5000_0000u64 } else { 0x1000_0000 };
        write_map(
            &mut b,
            map,
            &[
                MappedSection {
                    begin: base,
                    end: base + 2 * PAGE,
                    flags: 4,
                    deleting: false,
                },
                MappedSection {
                    begin: gone,
                    end: gone + 2 * PAGE,
                    flags: 4,
                    deleting: true,
                },
                MappedSection {
                    begin: heap,
                    end: heap + 0x3_0000,
                    flags: 2,
                    deleting: false,
                },
            ],
        );
        let target = b.into_target();
        let rs = RsLayout { ps }.json();
        let globals = format!(
            r#",
    "PrecodeMachineDescriptor.StubCodePageSize": ["{PAGE:#x}", "uint32"],
    "ExecutionManagerCodeRangeMapAddress": ["{map:#x}", "pointer"],
    "StubCodeBlockLast": ["0xf", "uint8"],
    "Architecture": "x64""#
        );
        // Machine facts as literal globals (the .NET 8 form), minus the page size given
        // above.
        let literals = machine
            .literals()
            .split(",\n    ")
            .filter(|l| !l.contains("StubCodePageSize"))
            .map(|l| format!(",\n    {l}"))
            .collect::<String>();
        let text = format!(
            r#"{{ "version": 0,
  "contracts": {{ "PrecodeStubs": 1, "ExecutionManager": 1 }},
  "types": {{ {}{rs} }},
  "globals": {{ "Unused": "0x0"{globals}{literals} }} }}"#,
            data_types(1, ps)
        );
        let physical = json::parse("test", text.as_bytes()).expect("JSON");
        let mut d = DataDescriptor::new(layout);
        d.merge("test", &physical, &[0]).expect("merge");

        let what = format!("{layout:?}");
        let r = resolve_entry_point(&target, &d, entries[0])
            .unwrap()
            .expect("stub");
        assert_eq!(r.method_desc, md_of(0), "{what}");
        assert_eq!(r.precode.map(|p| p.kind), Some(KnownPrecodeType::Stub));
        assert_eq!(
            non_virtual_entry_to_method_desc(&target, &d, entries[1]).unwrap(),
            Some(md_of(1)),
            "{what}"
        );
        // In a range list but no precode there: nothing.
        assert_eq!(
            non_virtual_entry_to_method_desc(&target, &d, entries[2]).unwrap(),
            None
        );
        // The data page is in the section too; it is no precode.
        assert_eq!(
            non_virtual_entry_to_method_desc(&target, &d, entries[0] + PAGE).unwrap(),
            None
        );
        // A section being deleted, and no section at all: nothing, although the bytes are
        // precodes (the contract alone still reads them).
        assert_eq!(
            non_virtual_entry_to_method_desc(&target, &d, gone).unwrap(),
            None
        );
        assert_eq!(
            non_virtual_entry_to_method_desc(&target, &d, stray).unwrap(),
            None
        );
        assert_eq!(
            method_desc_from_stub(&target, &d, stray).unwrap(),
            Some(md_of(8))
        );
        // A code heap section: the ExecutionManager decides, not the precode bytes.
        assert_eq!(
            non_virtual_entry_to_method_desc(&target, &d, heap).unwrap(),
            None
        );
        assert_eq!(
            method_desc_from_stub(&target, &d, heap).unwrap(),
            Some(md_of(7))
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

fn simple(version: u64, machine: &Machine, form: MdForm) -> (Target, DataDescriptor, Vec<u64>) {
    let a = x64();
    let layout = DataLayout::LE64;
    let mut b = MemoryBuilder::new(layout);
    let entries = write_precodes(
        &mut b,
        version,
        u64::from(machine.page),
        &[Slot::Fixup],
        &arch_code(&a),
    );
    let obj = b.alloc(pmd::SIZE, 8);
    machine.write(obj, 0);
    let object = obj.addr;
    let target = b.into_target();
    let d = descriptor(layout, version, form, machine, object, "");
    (target, d, entries)
}

#[test]
fn errors_are_typed() {
    let a = x64();
    let mut machine = Machine::for_arch(&a);
    machine.stub_template = None;
    machine.fixup_template = None;

    // A version this build does not implement.
    let (t, d, _) = simple(4, &machine, MdForm::Global);
    assert!(matches!(
        precode_stubs(&t, &d),
        Err(ContractError::UnsupportedVersion {
            contract: "PrecodeStubs",
            ..
        })
    ));

    // No machine descriptor of any form.
    let physical = json::parse(
        "test",
        br#"{ "version": 0, "contracts": { "PrecodeStubs": 1 }, "types": {}, "globals": {} }"#,
    )
    .unwrap();
    let mut empty = DataDescriptor::new(DataLayout::LE64);
    empty.merge("test", &physical, &[0]).unwrap();
    let err = precode_stubs(&t, &empty).unwrap_err();
    assert!(matches!(err, ContractError::Descriptor(_)), "{err}");
    assert!(
        err.to_string().contains("PrecodeMachineDescriptor"),
        "{err}"
    );

    // A read width the contract does not know.
    let mut bad = machine.clone();
    bad.width = 3;
    let (t, d, e) = simple(1, &bad, MdForm::Global);
    let err = precode_stubs(&t, &d).unwrap().precode(e[0]).unwrap_err();
    assert!(matches!(err, ContractError::Corrupt { .. }), "{err}");

    // A page size that is no power of two.
    let mut bad = machine.clone();
    bad.page = 0x3000;
    let (t, d, _) = simple(1, &bad, MdForm::Literals);
    let err = precode_stubs(&t, &d).unwrap_err();
    assert!(matches!(err, ContractError::Corrupt { .. }), "{err}");

    // Version 3 with template sizes of 0: damaged.
    let (t, d, _) = simple(3, &machine, MdForm::Global);
    let err = precode_stubs(&t, &d).unwrap_err();
    assert!(matches!(err, ContractError::Corrupt { .. }), "{err}");
    // Version 3 with no templates at all (literal globals cannot hold them).
    let (t, d, e) = simple(3, &machine, MdForm::Literals);
    let err = precode_stubs(&t, &d).unwrap().precode(e[0]).unwrap_err();
    assert!(matches!(err, ContractError::Descriptor(_)), "{err}");

    // The data page is not readable: a read error, not a guess.
    let mut b = MemoryBuilder::new(DataLayout::LE64);
    let entry = code_base(DataLayout::LE64);
    b.region(entry, 24).bytes(0, &a.stub);
    let obj = b.alloc(pmd::SIZE, 8);
    machine.write(obj, 0);
    let object = obj.addr;
    let t = b.into_target();
    let d = descriptor(DataLayout::LE64, 1, MdForm::Global, &machine, object, "");
    let err = precode_stubs(&t, &d).unwrap().precode(entry).unwrap_err();
    assert!(matches!(err, ContractError::Read(_)), "{err}");
}
