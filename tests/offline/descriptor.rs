//! Descriptor test suite.
//!
//! Covers the in-memory contract descriptor (`DotNetRuntimeContractDescriptor`, digest §1),
//! its compact JSON (§2: every global form, types and fields, contracts, lenient syntax,
//! duplicates), pointer data (slot 0 is a placeholder), sub-descriptors (two-hop lookup,
//! their own pointer data, skipping, duplicates across descriptors, nesting, cycles, layout
//! mismatches), the header's failure modes (magic, flags, truncation, unmapped memory,
//! absurd sizes), format versions and baselines (§3), the descriptors `cdac` ships for
//! .NET 8, and a property test that the loader never panics on arbitrary input.
//!
//! The contract descriptor structure is written from this file's own field table
//! ([`HEADER_64`], [`HEADER_32`]) and its own byte encoding, never from the library's
//! constants, so a layout bug in the library cannot hide in the tests too. Tests whose
//! result depends on the target layout run over all of `DataLayout::ALL` and name the
//! layout in their assertion messages.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cdac::descriptor::shipped::{self, Fit};
use cdac::descriptor::{
    embedded, json, ContractVersion, DataDescriptor, DescriptorError, Limits, SubDescriptorInfo,
};
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::{DataLayout, Endian, ReadError, Target};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// The contract descriptor structure, from the spec (digest §1.1), not from the library.
// ---------------------------------------------------------------------------------------------

/// Byte offsets of the contract descriptor's fields for one pointer size.
struct HeaderTable {
    magic: usize,
    flags: usize,
    descriptor_size: usize,
    descriptor: usize,
    pointer_data_count: usize,
    pad: usize,
    pointer_data: usize,
    size: usize,
}

const HEADER_64: HeaderTable = HeaderTable {
    magic: 0,
    flags: 8,
    descriptor_size: 12,
    descriptor: 16,
    pointer_data_count: 24,
    pad: 28,
    pointer_data: 32,
    size: 40,
};

const HEADER_32: HeaderTable = HeaderTable {
    magic: 0,
    flags: 8,
    descriptor_size: 12,
    descriptor: 16,
    pointer_data_count: 20,
    pad: 24,
    pointer_data: 28,
    size: 32,
};

fn header_table(layout: DataLayout) -> &'static HeaderTable {
    match layout.pointer_size {
        4 => &HEADER_32,
        8 => &HEADER_64,
        other => panic!("no pointer size {other}"),
    }
}

/// The magic as it lies in memory: "DNCCDAC\0" on little-endian, reversed on big-endian.
fn magic(layout: DataLayout) -> [u8; 8] {
    let mut m = *b"DNCCDAC\0";
    if layout.endian == Endian::Big {
        m.reverse();
    }
    m
}

/// The flags a runtime writes: bit 0 always, bit 1 for 4-byte pointers.
fn runtime_flags(layout: DataLayout) -> u32 {
    if layout.pointer_size == 4 {
        3
    } else {
        1
    }
}

fn encode_u32(layout: DataLayout, v: u32) -> [u8; 4] {
    match layout.endian {
        Endian::Little => v.to_le_bytes(),
        Endian::Big => v.to_be_bytes(),
    }
}

fn encode_pointer(layout: DataLayout, v: u64) -> Vec<u8> {
    match (layout.pointer_size, layout.endian) {
        (4, Endian::Little) => (v as u32).to_le_bytes().to_vec(),
        (4, Endian::Big) => (v as u32).to_be_bytes().to_vec(),
        (_, Endian::Little) => v.to_le_bytes().to_vec(),
        (_, Endian::Big) => v.to_be_bytes().to_vec(),
    }
}

/// Raw header fields, written as given (so tests can damage any of them).
#[derive(Debug, Clone, Copy)]
struct Header {
    /// Pointer size and byte order the header is encoded with.
    layout: DataLayout,
    magic: [u8; 8],
    flags: u32,
    descriptor_size: u32,
    descriptor: u64,
    pointer_data_count: u32,
    pointer_data: u64,
}

impl Header {
    fn valid(
        layout: DataLayout,
        descriptor: u64,
        size: u32,
        pointer_data: u64,
        count: u32,
    ) -> Header {
        Header {
            layout,
            magic: magic(layout),
            flags: runtime_flags(layout),
            descriptor_size: size,
            descriptor,
            pointer_data_count: count,
            pointer_data,
        }
    }
}

/// Writes `h` at `at` (or a fresh address) and returns its address. The padding word is
/// filled with garbage: readers must ignore it.
fn write_header(mem: &mut MemoryBuilder, at: Option<u64>, h: &Header) -> u64 {
    let t = header_table(h.layout);
    let region = match at {
        Some(addr) => mem.region(addr, t.size),
        None => mem.alloc(t.size, 8),
    };
    region
        .bytes(t.magic, &h.magic)
        .bytes(t.flags, &encode_u32(h.layout, h.flags))
        .bytes(t.descriptor_size, &encode_u32(h.layout, h.descriptor_size))
        .bytes(t.descriptor, &encode_pointer(h.layout, h.descriptor))
        .bytes(
            t.pointer_data_count,
            &encode_u32(h.layout, h.pointer_data_count),
        )
        .bytes(t.pad, &[0xA5; 4])
        .bytes(t.pointer_data, &encode_pointer(h.layout, h.pointer_data));
    region.addr
}

/// Places `bytes` at a fresh address (followed by unmapped memory).
fn put_bytes(mem: &mut MemoryBuilder, bytes: &[u8]) -> u64 {
    mem.alloc(bytes.len(), 1).bytes(0, bytes).addr
}

/// Places an array of pointer-sized values encoded for `layout`.
fn put_pointers(mem: &mut MemoryBuilder, layout: DataLayout, values: &[u64]) -> u64 {
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|&v| encode_pointer(layout, v))
        .collect();
    mem.alloc(bytes.len(), 8).bytes(0, &bytes).addr
}

/// Places one pointer variable holding `value` (what a sub-descriptor slot points at).
fn put_pointer_var(mem: &mut MemoryBuilder, layout: DataLayout, value: u64) -> u64 {
    put_pointers(mem, layout, &[value])
}

/// Writes a complete, valid descriptor (JSON text, pointer data, header) encoded for
/// `layout`; returns the header's address.
fn put_descriptor_as(
    mem: &mut MemoryBuilder,
    layout: DataLayout,
    json: &[u8],
    pointer_data: &[u64],
) -> u64 {
    let text = put_bytes(mem, json);
    let data = put_pointers(mem, layout, pointer_data);
    let header = Header::valid(
        layout,
        text,
        json.len() as u32,
        data,
        pointer_data.len() as u32,
    );
    write_header(mem, None, &header)
}

/// [`put_descriptor_as`] in the builder's own layout.
fn put_descriptor(mem: &mut MemoryBuilder, json: &str, pointer_data: &[u64]) -> u64 {
    let layout = mem.layout();
    put_descriptor_as(mem, layout, json.as_bytes(), pointer_data)
}

fn load(target: &Target, addr: u64) -> Result<DataDescriptor, DescriptorError> {
    embedded::load(target, addr, &Limits::default())
}

/// Loads a single descriptor (no sub-descriptors reachable) placed in a fresh target.
fn load_single(
    layout: DataLayout,
    json: &str,
    pointer_data: &[u64],
) -> Result<DataDescriptor, DescriptorError> {
    let mut mem = MemoryBuilder::new(layout);
    let addr = put_descriptor(&mut mem, json, pointer_data);
    load(&mem.into_target(), addr)
}

/// An address-like value that uses the whole pointer: above 4 GiB on 64-bit targets, with
/// the top bit set on 32-bit ones (so truncation or sign extension would show).
fn wide(layout: DataLayout, low: u32) -> u64 {
    if layout.pointer_size == 8 {
        0x7f00_0000_0000 | u64::from(low)
    } else {
        0x8000_0000 | u64::from(low)
    }
}

/// Nothing is ever placed here ([`MemoryBuilder::alloc`] hands out low addresses).
const UNMAPPED: u64 = 0x0f00_0000;

/// A fixed address for a pointer variable that must be written after the descriptor that
/// refers to it (cycles).
const LATE_VAR: u64 = 0x7000_0000;
const LATE_VAR_2: u64 = 0x7000_1000;

// ---------------------------------------------------------------------------------------------
// Largest single allocation, per thread, to show absurd sizes are refused before allocating.
// ---------------------------------------------------------------------------------------------

struct PeakAlloc;

thread_local! {
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note_allocation(size: usize) {
    let _ = PEAK.try_with(|p| p.set(p.get().max(size)));
}

// SAFETY: every call is forwarded unchanged to the system allocator; we only record sizes.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

/// Runs `f`; returns its result and the largest single allocation it made on this thread.
fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    PEAK.with(|p| p.set(0));
    let r = f();
    (r, PEAK.with(Cell::get))
}

// ---------------------------------------------------------------------------------------------
// The header
// ---------------------------------------------------------------------------------------------

#[test]
fn header_fields_are_read_per_layout() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let json = br#"{"version":0}"#;
        let text = put_bytes(&mut mem, json);
        let data = put_pointers(&mut mem, layout, &[0, wide(layout, 0x1230)]);
        let addr = write_header(
            &mut mem,
            None,
            &Header::valid(layout, text, json.len() as u32, data, 2),
        );
        let target = mem.into_target();

        let h = embedded::read_header(&target, addr, "main").expect("valid header");
        assert_eq!(h.address, addr, "{layout:?}");
        assert_eq!(h.layout, layout, "{layout:?}");
        assert_eq!(h.flags, runtime_flags(layout), "{layout:?}");
        assert_eq!(h.descriptor_size, json.len() as u32, "{layout:?}");
        assert_eq!(h.descriptor, text, "{layout:?}");
        assert_eq!(h.pointer_data_count, 2, "{layout:?}");
        assert_eq!(h.pointer_data, data, "{layout:?}");

        let d = load(&target, addr).expect("loads");
        assert_eq!(d.layout(), layout, "{layout:?}");
        assert!(
            d.types().is_empty() && d.globals().is_empty() && d.contracts().is_empty(),
            "{layout:?}"
        );
    }
}

/// The header is read with the layout it declares, whatever layout the target was opened with.
#[test]
fn header_layout_comes_from_magic_and_flags_not_from_the_target() {
    for layout in DataLayout::ALL {
        for opened_as in DataLayout::ALL {
            let mut mem = MemoryBuilder::new(layout);
            let addr = put_descriptor(
                &mut mem,
                r#"{"globals":{"G":[1]}}"#,
                &[0, wide(layout, 0x40)],
            );
            let target = mem.into_target().with_layout(opened_as);
            let d = load(&target, addr).expect("loads");
            assert_eq!(d.layout(), layout, "{layout:?} opened as {opened_as:?}");
            assert_eq!(
                d.global_value("G").expect("G"),
                wide(layout, 0x40),
                "{layout:?} opened as {opened_as:?}"
            );
        }
    }
}

#[test]
fn reserved_flag_bits_are_ignored() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let json = br#"{"globals":{"G":[1]}}"#;
        let text = put_bytes(&mut mem, json);
        let data = put_pointers(&mut mem, layout, &[0, wide(layout, 0x88)]);
        let mut h = Header::valid(layout, text, json.len() as u32, data, 2);
        h.flags |= 0xFFFF_FFFC;
        let addr = write_header(&mut mem, None, &h);
        let d = load(&mem.into_target(), addr).expect("reserved bits must be ignored");
        assert_eq!(d.layout(), layout, "{layout:?}");
        assert_eq!(
            d.global_value("G").expect("G"),
            wide(layout, 0x88),
            "{layout:?}"
        );
    }
}

#[test]
fn wrong_magic_is_bad_magic() {
    for layout in DataLayout::ALL {
        let bad_magics: [[u8; 8]; 3] = [*b"DNCCDAD\0", [0; 8], *b"CADCCND\0"];
        for bad in bad_magics {
            let mut mem = MemoryBuilder::new(layout);
            let json = br#"{"version":0}"#;
            let text = put_bytes(&mut mem, json);
            let mut h = Header::valid(layout, text, json.len() as u32, 0, 0);
            h.magic = bad;
            let addr = write_header(&mut mem, None, &h);
            let err = load(&mem.into_target(), addr).expect_err("bad magic");
            assert!(
                matches!(err, DescriptorError::BadMagic { addr: a, found } if a == addr && found == bad),
                "{layout:?} {bad:?}: {err:?}"
            );
        }
    }
}

#[test]
fn flags_without_bit_0_are_bad_flags() {
    for layout in DataLayout::ALL {
        for flags in [0u32, 2, 0xFFFF_FFFE] {
            let mut mem = MemoryBuilder::new(layout);
            let json = br#"{"version":0}"#;
            let text = put_bytes(&mut mem, json);
            let mut h = Header::valid(layout, text, json.len() as u32, 0, 0);
            h.flags = flags;
            let addr = write_header(&mut mem, None, &h);
            let err = load(&mem.into_target(), addr).expect_err("bad flags");
            assert!(
                matches!(err, DescriptorError::BadFlags { addr: a, flags: f } if a == addr && f == flags),
                "{layout:?} flags {flags:#x}: {err:?}"
            );
        }
    }
}

#[test]
fn header_in_unmapped_or_truncated_memory_is_a_read_error() {
    for layout in DataLayout::ALL {
        let target = MemoryBuilder::new(layout).into_target();
        let err = load(&target, UNMAPPED).expect_err("nothing mapped");
        assert!(
            matches!(&err, DescriptorError::Read { descriptor, what: "header", source: ReadError::Unmapped { addr, .. } }
                if descriptor == "main" && *addr == UNMAPPED),
            "{layout:?}: {err:?}"
        );

        // Magic and flags present, the rest of the structure cut off.
        let mut mem = MemoryBuilder::new(layout);
        let addr = mem
            .alloc(12, 8)
            .bytes(0, &magic(layout))
            .bytes(8, &encode_u32(layout, runtime_flags(layout)))
            .addr;
        let err = load(&mem.into_target(), addr).expect_err("truncated header");
        assert!(
            matches!(&err, DescriptorError::Read { descriptor, what: "header", source: ReadError::Unmapped { .. } } if descriptor == "main"),
            "{layout:?}: {err:?}"
        );
    }
}

#[test]
fn descriptor_text_in_unmapped_memory_is_a_read_error() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let addr = write_header(&mut mem, None, &Header::valid(layout, UNMAPPED, 16, 0, 0));
        let err = load(&mem.into_target(), addr).expect_err("JSON unmapped");
        assert!(
            matches!(&err, DescriptorError::Read { descriptor, what: "JSON text", source: ReadError::Unmapped { addr, .. } }
                if descriptor == "main" && *addr == UNMAPPED),
            "{layout:?}: {err:?}"
        );
    }
}

#[test]
fn pointer_data_in_unmapped_memory_is_a_read_error() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let json = br#"{"version":0}"#;
        let text = put_bytes(&mut mem, json);
        // Two slots claimed, one present: the read runs off the end of the array.
        let data = put_pointers(&mut mem, layout, &[0]);
        let addr = write_header(
            &mut mem,
            None,
            &Header::valid(layout, text, json.len() as u32, data, 2),
        );
        let err = load(&mem.into_target(), addr).expect_err("pointer data cut off");
        assert!(
            matches!(&err, DescriptorError::Read { descriptor, what: "pointer data", source: ReadError::Unmapped { .. } }
                if descriptor == "main"),
            "{layout:?}: {err:?}"
        );
    }
}

#[test]
fn truncated_json_is_a_json_error() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let json = br#"{"version":0,"globals":{"A":1,"B":2}}"#;
        let text = put_bytes(&mut mem, json);
        let short = json.len() as u32 - 6;
        let addr = write_header(&mut mem, None, &Header::valid(layout, text, short, 0, 0));
        let err = load(&mem.into_target(), addr).expect_err("truncated JSON");
        assert!(
            matches!(&err, DescriptorError::Json { descriptor, .. } if descriptor == "main"),
            "{layout:?}: {err:?}"
        );
    }
}

#[test]
fn json_that_is_not_utf8_is_a_json_error() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let json = b"{\"globals\":{\"Arch\":\"x\xff\xfe64\"}}";
        let addr = put_descriptor_as(&mut mem, layout, json, &[0]);
        let err = load(&mem.into_target(), addr).expect_err("not UTF-8");
        assert!(
            matches!(&err, DescriptorError::Json { descriptor, detail } if descriptor == "main" && detail.contains("UTF-8")),
            "{layout:?}: {err:?}"
        );
    }
    let err = json::parse("raw", b"{\"version\":0, \"\xc3\x28\": 1}").expect_err("not UTF-8");
    assert!(
        matches!(&err, DescriptorError::Json { descriptor, .. } if descriptor == "raw"),
        "{err:?}"
    );
}

#[test]
fn absurd_descriptor_size_is_too_large_without_allocating_it() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let json = br#"{"version":0}"#;
        let text = put_bytes(&mut mem, json);
        let addr = write_header(
            &mut mem,
            None,
            &Header::valid(layout, text, 0xFFFF_FFF0, 0, 0),
        );
        let target = mem.into_target();
        let (result, peak) = largest_allocation(|| load(&target, addr));
        let err = result.expect_err("absurd size");
        assert!(
            matches!(&err, DescriptorError::TooLarge { descriptor, what: "JSON size", value: 0xFFFF_FFF0, .. } if descriptor == "main"),
            "{layout:?}: {err:?}"
        );
        assert!(
            peak < 1 << 20,
            "{layout:?}: loader allocated {peak} bytes at once"
        );
    }
}

#[test]
fn absurd_pointer_data_count_is_too_large_without_allocating_it() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let json = br#"{"version":0}"#;
        let text = put_bytes(&mut mem, json);
        let data = put_pointers(&mut mem, layout, &[0, 1]);
        let addr = write_header(
            &mut mem,
            None,
            &Header::valid(layout, text, json.len() as u32, data, 0xFFFF_FFFF),
        );
        let target = mem.into_target();
        let (result, peak) = largest_allocation(|| load(&target, addr));
        let err = result.expect_err("absurd count");
        assert!(
            matches!(&err, DescriptorError::TooLarge { descriptor, what: "pointer-data count", value: 0xFFFF_FFFF, .. }
                if descriptor == "main"),
            "{layout:?}: {err:?}"
        );
        assert!(
            peak < 1 << 20,
            "{layout:?}: loader allocated {peak} bytes at once"
        );
    }
}

/// The caps are inclusive: exactly at the limit loads, one over is refused.
#[test]
fn size_caps_are_exact_boundaries() {
    let layout = DataLayout::LE64;
    let json = r#"{"globals":{"G":[2]}}"#;
    let mut mem = MemoryBuilder::new(layout);
    let addr = put_descriptor(&mut mem, json, &[0, 0, 0x55]);
    let target = mem.into_target();
    let exact = Limits {
        max_descriptor_bytes: json.len() as u32,
        max_pointer_data: 3,
        ..Limits::default()
    };
    let d = embedded::load(&target, addr, &exact).expect("at the caps");
    assert_eq!(d.global_value("G").expect("G"), 0x55);

    let text_cap = Limits {
        max_descriptor_bytes: json.len() as u32 - 1,
        ..exact
    };
    let err = embedded::load(&target, addr, &text_cap).expect_err("text over cap");
    assert!(
        matches!(err, DescriptorError::TooLarge { what: "JSON size", value, cap, .. } if value == json.len() as u64 && cap + 1 == value),
        "{err:?}"
    );
    let count_cap = Limits {
        max_pointer_data: 2,
        ..exact
    };
    let err = embedded::load(&target, addr, &count_cap).expect_err("count over cap");
    assert!(
        matches!(
            err,
            DescriptorError::TooLarge {
                what: "pointer-data count",
                value: 3,
                cap: 2,
                ..
            }
        ),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Format version and baseline
// ---------------------------------------------------------------------------------------------

#[test]
fn version_zero_as_number_or_string_is_accepted() {
    for layout in DataLayout::ALL {
        for version in ["0", r#""0""#, r#""0x0""#, "null"] {
            let json = format!(r#"{{"version":{version},"baseline":"empty","globals":{{"G":7}}}}"#);
            let d = load_single(layout, &json, &[0])
                .unwrap_or_else(|e| panic!("{layout:?} version {version}: {e}"));
            assert_eq!(
                d.global_value("G").expect("G"),
                7,
                "{layout:?} version {version}"
            );
        }
    }
}

#[test]
fn formats_up_to_2_are_read_and_newer_ones_recorded() {
    for layout in DataLayout::ALL {
        for (version, format) in [("1", 1), (r#""1""#, 1), ("2", 2), ("3", 3)] {
            let json = format!(r#"{{"version":{version},"globals":{{"A":"0x7"}}}}"#);
            let d = load_single(layout, &json, &[0]).expect("loaded");
            assert_eq!(d.global_value("A").ok(), Some(7), "{version}");
            assert_eq!(d.formats().get("main"), Some(&format), "{version}");
            // A runtime's format newer than cdac knows is read with format 2's grammar
            // and said to be newer: refusing it would stop every command.
            let newer: Vec<(&str, u64)> = d.newer_formats();
            if format > 2 {
                assert_eq!(newer, [("main", format)]);
            } else {
                assert!(newer.is_empty(), "{version}");
            }
        }
    }
    for bad in ["-1", r#""zero""#, "1.0", "[0]"] {
        let err = json::parse("v", format!(r#"{{"version":{bad}}}"#).as_bytes())
            .expect_err("bad version");
        assert!(
            matches!(&err, DescriptorError::Invalid { descriptor, detail } if descriptor == "v" && detail.contains("version")),
            "{bad}: {err:?}"
        );
    }
}

#[test]
fn baseline_other_than_empty_is_unsupported() {
    for layout in DataLayout::ALL {
        let json = r#"{"version":0,"baseline":"net9.0/coreclr/linux-arm64","globals":{}}"#;
        let err = load_single(layout, json, &[0]).expect_err("baseline");
        assert!(
            matches!(&err, DescriptorError::UnsupportedBaseline { descriptor, baseline }
                if descriptor == "main" && baseline == "net9.0/coreclr/linux-arm64"),
            "{layout:?}: {err:?}"
        );
    }
    let err = json::parse("b", br#"{"baseline":3}"#).expect_err("baseline not a string");
    assert!(
        matches!(&err, DescriptorError::Invalid { descriptor, .. } if descriptor == "b"),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Globals
// ---------------------------------------------------------------------------------------------

#[test]
fn global_bare_json_number() {
    for layout in DataLayout::ALL {
        let d = load_single(
            layout,
            r#"{"globals":{"G":4096,"Max":18446744073709551615}}"#,
            &[0],
        )
        .expect("loads");
        let g = d.global("G").expect("G");
        assert_eq!(g.value().expect("numeric"), 4096, "{layout:?}");
        assert_eq!(g.type_name(), None, "{layout:?}");
        assert_eq!(g.pointer_data_index(), None, "{layout:?}");
        assert_eq!(g.text(), None, "{layout:?}");
        assert_eq!(d.global_value("Max").expect("Max"), u64::MAX, "{layout:?}");
    }
}

#[test]
fn global_negative_json_number() {
    for layout in DataLayout::ALL {
        let d = load_single(
            layout,
            r#"{"globals":{"G":-5,"Min":-9223372036854775808}}"#,
            &[0],
        )
        .expect("loads");
        let g = d.global("G").expect("G");
        assert_eq!(g.value_signed().expect("numeric"), -5, "{layout:?}");
        assert_eq!(g.value().expect("numeric"), (-5i64) as u64, "{layout:?}");
        assert_eq!(
            d.global("Min")
                .expect("Min")
                .value_signed()
                .expect("numeric"),
            i64::MIN,
            "{layout:?}"
        );
    }
}

#[test]
fn global_decimal_strings_keep_their_text() {
    for layout in DataLayout::ALL {
        let d =
            load_single(layout, r#"{"globals":{"Dec":"123","Neg":"-42"}}"#, &[0]).expect("loads");
        let dec = d.global("Dec").expect("Dec");
        assert_eq!(dec.value().expect("numeric"), 123, "{layout:?}");
        assert_eq!(dec.text(), Some("123"), "{layout:?}");
        let neg = d.global("Neg").expect("Neg");
        assert_eq!(neg.value_signed().expect("numeric"), -42, "{layout:?}");
        assert_eq!(neg.text(), Some("-42"), "{layout:?}");
        // A numeric string is a number, not a string global.
        let err = dec.string().expect_err("numeric");
        assert!(
            matches!(&err, DescriptorError::GlobalKind { name, .. } if name == "Dec"),
            "{layout:?}: {err:?}"
        );
    }
}

#[test]
fn global_hex_strings() {
    for layout in DataLayout::ALL {
        let json = r#"{"globals":{"Hex":"0x1f","Upper":"0X7FFFFFFFFFFFFFFF","NegHex":"-0x10","Big":"0xffffffffffffffff"}}"#;
        let d = load_single(layout, json, &[0]).expect("loads");
        assert_eq!(d.global_value("Hex").expect("Hex"), 0x1f, "{layout:?}");
        assert_eq!(
            d.global_value("Upper").expect("Upper"),
            0x7FFF_FFFF_FFFF_FFFF,
            "{layout:?}"
        );
        assert_eq!(
            d.global("NegHex")
                .expect("NegHex")
                .value_signed()
                .expect("numeric"),
            -16,
            "{layout:?}"
        );
        assert_eq!(
            d.global("NegHex").expect("NegHex").text(),
            Some("-0x10"),
            "{layout:?}"
        );
        assert_eq!(d.global_value("Big").expect("Big"), u64::MAX, "{layout:?}");
    }
}

#[test]
fn global_value_with_type() {
    for layout in DataLayout::ALL {
        let json =
            r#"{"globals":{"Bits":["0xc","uint8"],"Align":[8,"uint64"],"Neg":["-0x1","int32"]}}"#;
        let d = load_single(layout, json, &[0]).expect("loads");
        let bits = d.global("Bits").expect("Bits");
        assert_eq!(bits.value().expect("numeric"), 12, "{layout:?}");
        assert_eq!(bits.type_name(), Some("uint8"), "{layout:?}");
        assert_eq!(bits.pointer_data_index(), None, "{layout:?}");
        let align = d.global("Align").expect("Align");
        assert_eq!(
            (align.value().expect("numeric"), align.type_name()),
            (8, Some("uint64")),
            "{layout:?}"
        );
        let neg = d.global("Neg").expect("Neg");
        assert_eq!(
            (neg.value_signed().expect("numeric"), neg.type_name()),
            (-1, Some("int32")),
            "{layout:?}"
        );
    }
}

#[test]
fn indirect_globals_resolve_through_pointer_data() {
    for layout in DataLayout::ALL {
        let json = r#"{"globals":{
            "AppDomain":[[1],"pointer"],
            "ThreadStore":[[2],"pointer"],
            "Untyped":[3],
            "StringIndex":[["0x2"],"pointer"]
        }}"#;
        let pointer_data = [
            0,
            wide(layout, 0x1000),
            wide(layout, 0x2008),
            wide(layout, 0x3010),
        ];
        let d = load_single(layout, json, &pointer_data).expect("loads");
        let app = d.global("AppDomain").expect("AppDomain");
        assert_eq!(
            app.value().expect("numeric"),
            wide(layout, 0x1000),
            "{layout:?}"
        );
        assert_eq!(app.type_name(), Some("pointer"), "{layout:?}");
        assert_eq!(app.pointer_data_index(), Some(1), "{layout:?}");
        assert_eq!(
            d.global_value("ThreadStore").expect("ThreadStore"),
            wide(layout, 0x2008),
            "{layout:?}"
        );
        let untyped = d.global("Untyped").expect("Untyped");
        assert_eq!(
            untyped.value().expect("numeric"),
            wide(layout, 0x3010),
            "{layout:?}"
        );
        assert_eq!(untyped.type_name(), None, "{layout:?}");
        assert_eq!(untyped.pointer_data_index(), Some(3), "{layout:?}");
        assert_eq!(
            d.global_value("StringIndex").expect("StringIndex"),
            wide(layout, 0x2008),
            "{layout:?}"
        );
        assert_eq!(app.origin(), "main", "{layout:?}");
    }
}

/// Slot 0 is the runtime's placeholder: the first real index is 1, and an index is never
/// shifted (index 0 still reads slot 0).
#[test]
fn pointer_data_slot_zero_is_a_placeholder() {
    for layout in DataLayout::ALL {
        let json = r#"{"globals":{"First":[[1],"pointer"],"Placeholder":[[0],"pointer"]}}"#;
        let d = load_single(layout, json, &[0, wide(layout, 0xAB0)]).expect("loads");
        assert_eq!(
            d.global_value("First").expect("First"),
            wide(layout, 0xAB0),
            "{layout:?}"
        );
        assert_eq!(
            d.global_value("Placeholder").expect("Placeholder"),
            0,
            "{layout:?}"
        );
    }
}

#[test]
fn pointer_data_index_out_of_range() {
    for layout in DataLayout::ALL {
        let err = load_single(
            layout,
            r#"{"globals":{"Ok":[2],"Past":[[3],"pointer"]}}"#,
            &[0, 1, 2],
        )
        .expect_err("index 3 of 3");
        assert!(
            matches!(&err, DescriptorError::PointerDataIndex { descriptor, name, index: 3, count: 3 } if descriptor == "main" && name == "Past"),
            "{layout:?}: {err:?}"
        );
        let err = load_single(
            layout,
            r#"{"globals":{"Huge":[18446744073709551615]}}"#,
            &[0],
        )
        .expect_err("huge index");
        assert!(
            matches!(&err, DescriptorError::PointerDataIndex { name, index: u64::MAX, count: 1, .. } if name == "Huge"),
            "{layout:?}: {err:?}"
        );
    }
    let err = json::parse("n", br#"{"globals":{"Neg":[-1]}}"#).expect_err("negative index");
    assert!(
        matches!(&err, DescriptorError::Invalid { detail, .. } if detail.contains("Neg")),
        "{err:?}"
    );
}

#[test]
fn string_globals() {
    for layout in DataLayout::ALL {
        let json = r#"{"globals":{"Architecture":"x64","OperatingSystem":["unix","string"],"RID":"linux-x64"}}"#;
        let d = load_single(layout, json, &[0]).expect("loads");
        assert_eq!(
            d.global_string("Architecture").expect("string"),
            "x64",
            "{layout:?}"
        );
        assert_eq!(
            d.global("Architecture").expect("Architecture").text(),
            Some("x64"),
            "{layout:?}"
        );
        let os = d.global("OperatingSystem").expect("OperatingSystem");
        assert_eq!(
            (os.string().expect("string"), os.type_name()),
            ("unix", Some("string")),
            "{layout:?}"
        );
        assert_eq!(
            d.global_string("RID").expect("string"),
            "linux-x64",
            "{layout:?}"
        );
        let err = d.global_value("Architecture").expect_err("not numeric");
        assert!(
            matches!(&err, DescriptorError::GlobalKind { name, expected: "numeric" } if name == "Architecture"),
            "{layout:?}: {err:?}"
        );
    }
}

#[test]
fn string_of_a_numeric_global_is_global_kind() {
    for layout in DataLayout::ALL {
        let d = load_single(
            layout,
            r#"{"globals":{"N":["0x8","uint64"],"P":[[1],"pointer"]}}"#,
            &[0, 0x10],
        )
        .expect("loads");
        for name in ["N", "P"] {
            let err = d
                .global(name)
                .expect("global")
                .string()
                .expect_err("numeric");
            assert!(
                matches!(&err, DescriptorError::GlobalKind { name: n, expected: "a string" } if n == name),
                "{layout:?}: {err:?}"
            );
            let err = d.global_string(name).expect_err("numeric");
            assert!(
                matches!(&err, DescriptorError::GlobalKind { name: n, .. } if n == name),
                "{layout:?}: {err:?}"
            );
        }
    }
}

#[test]
fn malformed_globals_are_invalid() {
    for bad in [
        r#"true"#,
        r#"1.5"#,
        r#"{}"#,
        r#"[]"#,
        r#"[1,2,3]"#,
        r#"[[1,2],"pointer"]"#,
        r#"[[],"pointer"]"#,
        // A bare one-element array is the untyped indirect form; `[[INDEX]]` is not a form.
        r#"[[1]]"#,
        r#"[[1],"pointer","extra"]"#,
        r#"[1,"pointer",2]"#,
    ] {
        let text = format!(r#"{{"globals":{{"Bad":{bad}}}}}"#);
        let err = json::parse("m", text.as_bytes()).expect_err(bad);
        assert!(
            matches!(&err, DescriptorError::Invalid { descriptor, detail } if descriptor == "m" && detail.contains("Bad")),
            "{bad}: {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Types and fields
// ---------------------------------------------------------------------------------------------

#[test]
fn types_with_and_without_size() {
    for layout in DataLayout::ALL {
        let json = r#"{"types":{
            "MethodDescChunk":{"!":24,"MethodTable":0,"Next":8,"Size":16,"Count":17},
            "MethodDesc":{"ChunkIndex":2,"Slot":4},
            "MethodImpl":{"!":"0x10"}
        }}"#;
        let d = load_single(layout, json, &[0]).expect("loads");
        let chunk = d.ty("MethodDescChunk").expect("type");
        assert_eq!(chunk.size().expect("size"), 24, "{layout:?}");
        assert_eq!(chunk.name(), "MethodDescChunk", "{layout:?}");
        assert_eq!(chunk.fields().len(), 4, "{layout:?}");
        assert!(
            !chunk.has_field("!"),
            "{layout:?}: the size key is not a field"
        );
        let md = d.ty("MethodDesc").expect("type");
        assert_eq!(md.size_if_known(), None, "{layout:?}");
        let err = md.size().expect_err("no size");
        assert!(
            matches!(&err, DescriptorError::IndeterminateSize { type_name } if type_name == "MethodDesc"),
            "{layout:?}: {err:?}"
        );
        let opaque = d.ty("MethodImpl").expect("type");
        assert_eq!(
            (opaque.size().expect("size"), opaque.fields().len()),
            (16, 0),
            "{layout:?}"
        );
        assert_eq!(d.types().len(), 3, "{layout:?}");
    }
}

#[test]
fn fields_bare_and_typed() {
    for layout in DataLayout::ALL {
        let json =
            r#"{"types":{"Thread":{"Id":8,"GCHandle":[312,"GCHandle"],"Next":[0,"pointer"]}}}"#;
        let d = load_single(layout, json, &[0]).expect("loads");
        let t = d.ty("Thread").expect("Thread");
        let id = t.field("Id").expect("Id");
        assert_eq!(
            (id.offset, id.type_name.as_deref()),
            (8, None),
            "{layout:?}"
        );
        let h = t.field("GCHandle").expect("GCHandle");
        assert_eq!(
            (h.offset, h.type_name.as_deref()),
            (312, Some("GCHandle")),
            "{layout:?}"
        );
        assert_eq!(t.offset("Next").expect("Next"), 0, "{layout:?}");
        assert_eq!(
            t.field("Next").expect("Next").type_name.as_deref(),
            Some("pointer"),
            "{layout:?}"
        );
        assert!(
            t.has_field("Id") && !t.has_field("id"),
            "{layout:?}: names are case-sensitive"
        );
    }
}

#[test]
fn offsets_and_sizes_given_as_strings() {
    for layout in DataLayout::ALL {
        let json =
            r#"{"types":{"T":{"!":"0x40","Dec":"24","Hex":"0x1C","Typed":["0x30","uint32"]}}}"#;
        let d = load_single(layout, json, &[0]).expect("loads");
        let t = d.ty("T").expect("T");
        assert_eq!(t.size().expect("size"), 0x40, "{layout:?}");
        assert_eq!(t.offset("Dec").expect("Dec"), 24, "{layout:?}");
        assert_eq!(t.offset("Hex").expect("Hex"), 0x1C, "{layout:?}");
        let typed = t.field("Typed").expect("Typed");
        assert_eq!(
            (typed.offset, typed.type_name.as_deref()),
            (0x30, Some("uint32")),
            "{layout:?}"
        );
    }
}

#[test]
fn malformed_fields_and_sizes_are_invalid() {
    let cases = [
        (r#"{"F":-8}"#, "F"),
        (r#"{"F":"-0x8"}"#, "F"),
        (r#"{"F":4294967296}"#, "F"),
        (r#"{"F":[8,"t",1]}"#, "F"),
        (r#"{"F":"eight"}"#, "F"),
        (r#"{"F":1.5}"#, "F"),
        (r#"{"!":-1}"#, "size"),
        (r#"{"!":[8,"t"]}"#, "size"),
    ];
    for (fields, mention) in cases {
        let text = format!(r#"{{"types":{{"T":{fields}}}}}"#);
        let err = json::parse("f", text.as_bytes()).expect_err(fields);
        assert!(
            matches!(&err, DescriptorError::Invalid { descriptor, detail }
                if descriptor == "f" && detail.contains("type T") && detail.contains(mention)),
            "{fields}: {err:?}"
        );
    }
}

#[test]
fn missing_type_field_and_global_name_the_thing() {
    for layout in DataLayout::ALL {
        let d = load_single(
            layout,
            r#"{"types":{"Thread":{"Next":0}},"globals":{"G":1}}"#,
            &[0],
        )
        .expect("loads");
        let err = d.ty("AppDomain").expect_err("no type");
        assert!(
            matches!(&err, DescriptorError::MissingType { name } if name == "AppDomain"),
            "{layout:?}: {err:?}"
        );
        assert!(err.to_string().contains("AppDomain"), "{layout:?}: {err}");

        let thread = d.ty("Thread").expect("Thread");
        for err in [
            thread.field("Prev").expect_err("no field").to_string(),
            thread.offset("Prev").expect_err("no field").to_string(),
        ] {
            assert!(
                err.contains("Thread") && err.contains("Prev"),
                "{layout:?}: {err}"
            );
        }
        let err = thread.offset("next").expect_err("case-sensitive");
        assert!(
            matches!(&err, DescriptorError::MissingField { type_name, field } if type_name == "Thread" && field == "next"),
            "{layout:?}: {err:?}"
        );

        for err in [
            d.global("ThreadStore").expect_err("no global"),
            d.global_value("ThreadStore").expect_err("no global"),
            d.global_string("ThreadStore").expect_err("no global"),
        ] {
            assert!(
                matches!(&err, DescriptorError::MissingGlobal { name } if name == "ThreadStore"),
                "{layout:?}: {err:?}"
            );
            assert!(err.to_string().contains("ThreadStore"), "{layout:?}: {err}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Contracts
// ---------------------------------------------------------------------------------------------

#[test]
fn contract_versions_as_integers_and_strings() {
    for layout in DataLayout::ALL {
        let json = r#"{"contracts":{"Thread":1,"ExecutionManager":2,"Loader":"c1","StackWalk":"c2","Aot":"n1"}}"#;
        let d = load_single(layout, json, &[0]).expect("loads");
        assert_eq!(
            d.contract("Thread"),
            Some(&ContractVersion::Number(1)),
            "{layout:?}"
        );
        assert_eq!(
            d.contract("ExecutionManager")
                .and_then(ContractVersion::coreclr_number),
            Some(2),
            "{layout:?}"
        );
        assert_eq!(
            d.contract("Loader"),
            Some(&ContractVersion::Tag("c1".into())),
            "{layout:?}"
        );
        assert_eq!(
            d.contract("Loader")
                .and_then(ContractVersion::coreclr_number),
            Some(1),
            "{layout:?}"
        );
        assert_eq!(
            d.contract("StackWalk")
                .and_then(ContractVersion::coreclr_number),
            Some(2),
            "{layout:?}"
        );
        assert_eq!(
            d.contract("Aot"),
            Some(&ContractVersion::Tag("n1".into())),
            "{layout:?}"
        );
        assert_eq!(
            d.contract("Aot").and_then(ContractVersion::coreclr_number),
            None,
            "{layout:?}: n1 is not CoreCLR"
        );
        assert_eq!(d.contract("GC"), None, "{layout:?}");
        assert_eq!(d.contracts().len(), 5, "{layout:?}");
        assert_eq!(ContractVersion::Tag("c2".into()).to_string(), "c2");
        assert_eq!(ContractVersion::Number(3).to_string(), "3");
    }
}

#[test]
fn malformed_contract_versions_are_invalid() {
    for bad in ["-1", "1.5", r#""""#, "true", "[1]", "{}"] {
        let text = format!(r#"{{"contracts":{{"Thread":{bad}}}}}"#);
        let err = json::parse("c", text.as_bytes()).expect_err(bad);
        assert!(
            matches!(&err, DescriptorError::Invalid { descriptor, detail } if descriptor == "c" && detail.contains("Thread")),
            "{bad}: {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Lenient JSON and duplicates
// ---------------------------------------------------------------------------------------------

#[test]
fn comments_and_trailing_commas_are_accepted() {
    let json = r#"
        // Written by hand.
        {
          "version": 0, /* format */
          "types": { "T": { "!": 8, "A": 0, /* last */ "B": 4, }, },
          "globals": { "G": [[1], "pointer"], "S": "x64", // string
            "Url": "http://host/*not a comment*/", },
          "contracts": { "Thread": 1, },
        }
    "#;
    for layout in DataLayout::ALL {
        let d = load_single(layout, json, &[0, wide(layout, 0x77)]).expect("lenient JSON loads");
        assert_eq!(
            d.ty("T").expect("T").offset("B").expect("B"),
            4,
            "{layout:?}"
        );
        assert_eq!(d.ty("T").expect("T").size().expect("size"), 8, "{layout:?}");
        assert_eq!(
            d.global_value("G").expect("G"),
            wide(layout, 0x77),
            "{layout:?}"
        );
        assert_eq!(d.global_string("S").expect("S"), "x64", "{layout:?}");
        assert_eq!(
            d.global_string("Url").expect("Url"),
            "http://host/*not a comment*/",
            "{layout:?}: comment markers inside strings are text"
        );
        assert_eq!(
            d.contract("Thread"),
            Some(&ContractVersion::Number(1)),
            "{layout:?}"
        );
    }
}

#[test]
fn null_sections_are_accepted() {
    let json = r#"{"version":0,"baseline":null,"types":null,"globals":null,"contracts":null,"subDescriptors":null}"#;
    let p = json::parse("n", json.as_bytes()).expect("null sections");
    assert_eq!(p.version, 0);
    assert_eq!(p.baseline, None);
    assert!(
        p.types.is_empty()
            && p.globals.is_empty()
            && p.contracts.is_empty()
            && p.sub_descriptors.is_empty()
    );
    for layout in DataLayout::ALL {
        let d = load_single(layout, json, &[0]).expect("loads");
        assert!(
            d.types().is_empty() && d.globals().is_empty() && d.sub_descriptors().is_empty(),
            "{layout:?}"
        );
    }
}

#[test]
fn unknown_top_level_keys_are_kept_as_extras() {
    let p = json::parse(
        "x",
        br#"{"version":0,"note":{"a":[1,2]},"globals":{"G":1}}"#,
    )
    .expect("parses");
    assert_eq!(p.extras.get("note"), Some(&serde_json::json!({"a":[1,2]})));
    let d = load_single(DataLayout::BE32, r#"{"version":0,"note":"hi"}"#, &[0]).expect("loads");
    assert_eq!(d.extras().get("note"), Some(&serde_json::json!("hi")));
}

#[test]
fn duplicates_within_one_descriptor_are_invalid() {
    let cases = [
        (r#"{"types":{"T":{"A":0,"A":8}}}"#, "A"),
        (r#"{"types":{"T":{"!":8,"A":0,"!":16}}}"#, "!"),
        (r#"{"types":{"T":{"A":0},"T":{"B":0}}}"#, "T"),
        (r#"{"globals":{"G":1,"H":2,"G":[1]}}"#, "G"),
        (r#"{"contracts":{"Thread":1,"Thread":"c2"}}"#, "Thread"),
        (r#"{"subDescriptors":{"GC":[[1]],"GC":[2]}}"#, "GC"),
        (r#"{"globals":{"G":1},"globals":{"H":1}}"#, "globals"),
    ];
    for (json, name) in cases {
        let err = json::parse("dup", json.as_bytes()).expect_err(json);
        assert!(
            matches!(&err, DescriptorError::Invalid { descriptor, detail } if descriptor == "dup" && detail.contains(name)),
            "{json}: {err:?}"
        );
        // Through memory too: the error names the descriptor.
        for layout in DataLayout::ALL {
            let err = load_single(layout, json, &[0, 0, 0]).expect_err(json);
            assert!(
                matches!(&err, DescriptorError::Invalid { descriptor, .. } if descriptor == "main"),
                "{layout:?} {json}: {err:?}"
            );
        }
    }
}

#[test]
fn malformed_json_is_a_json_error() {
    for bad in [
        "",
        "   ",
        "[]",
        "42",
        r#"{"types":[]}"#,
        r#"{"globals":{"G":1}"#,
        r#"{"types":{"T":null}}"#,
        "{/* unterminated",
    ] {
        let err = json::parse("j", bad.as_bytes()).expect_err(bad);
        assert!(
            matches!(&err, DescriptorError::Json { descriptor, .. } if descriptor == "j"),
            "{bad:?}: {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Sub-descriptors
// ---------------------------------------------------------------------------------------------

const SUB_GC: &str = r#"{"version":0,"baseline":"empty",
    "types":{"GCHeap":{"!":16,"Alloc":8}},
    "globals":{"GCGlobal":[[1],"pointer"],"GCUntyped":[2],"GCLiteral":["0x3","uint8"]},
    "contracts":{"GC":"c1"}}"#;

#[test]
fn sub_descriptor_two_hops_with_its_own_pointer_data() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let sub = put_descriptor(
            &mut mem,
            SUB_GC,
            &[0, wide(layout, 0x5000), wide(layout, 0x6000)],
        );
        let var = put_pointer_var(&mut mem, layout, sub);
        let main_json = r#"{"version":0,"globals":{"MainGlobal":[[1],"pointer"],"Other":[2]},
            "contracts":{"Thread":1},"subDescriptors":{"GC":[[3],"pointer"]}}"#;
        let main = put_descriptor(
            &mut mem,
            main_json,
            &[0, wide(layout, 0x1000), wide(layout, 0x2000), var],
        );
        let d = load(&mem.into_target(), main).expect("loads with sub-descriptor");

        // Each descriptor's indirect globals read its own slots.
        assert_eq!(
            d.global_value("MainGlobal").expect("main"),
            wide(layout, 0x1000),
            "{layout:?}"
        );
        assert_eq!(
            d.global_value("Other").expect("main"),
            wide(layout, 0x2000),
            "{layout:?}"
        );
        assert_eq!(
            d.global_value("GCGlobal").expect("sub"),
            wide(layout, 0x5000),
            "{layout:?}"
        );
        assert_eq!(
            d.global_value("GCUntyped").expect("sub"),
            wide(layout, 0x6000),
            "{layout:?}"
        );
        assert_eq!(d.global_value("GCLiteral").expect("sub"), 3, "{layout:?}");
        assert_eq!(
            d.global("GCGlobal").expect("sub").origin(),
            "GC",
            "{layout:?}"
        );
        assert_eq!(
            d.global("MainGlobal").expect("main").origin(),
            "main",
            "{layout:?}"
        );
        assert_eq!(
            d.ty("GCHeap")
                .expect("sub type")
                .offset("Alloc")
                .expect("Alloc"),
            8,
            "{layout:?}"
        );
        assert_eq!(
            d.ty("GCHeap").expect("sub type").origin(),
            "GC",
            "{layout:?}"
        );
        assert_eq!(
            d.contract("GC"),
            Some(&ContractVersion::Tag("c1".into())),
            "{layout:?}"
        );
        assert_eq!(
            d.contract("Thread"),
            Some(&ContractVersion::Number(1)),
            "{layout:?}"
        );
        // The sub-descriptor entry itself is not a global.
        assert!(
            matches!(d.global("GC"), Err(DescriptorError::MissingGlobal { .. })),
            "{layout:?}"
        );
        assert_eq!(
            d.sub_descriptors(),
            &[SubDescriptorInfo {
                name: "GC".into(),
                address: Some(sub),
                skipped: None
            }],
            "{layout:?}"
        );
    }
}

#[test]
fn sub_descriptor_behind_null_pointers_is_skipped() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        // The GC has not published its descriptor: the variable holds null.
        let var = put_pointer_var(&mut mem, layout, 0);
        let main_json = r#"{"globals":{"G":[1]},"subDescriptors":{"GC":[[2],"pointer"],"Late":[[3],"pointer"]}}"#;
        // "Late": the slot itself is null.
        let main = put_descriptor(&mut mem, main_json, &[0, 0x42, var, 0]);
        let d = load(&mem.into_target(), main).expect("null sub-descriptors are not errors");
        assert_eq!(d.global_value("G").expect("G"), 0x42, "{layout:?}");
        assert_eq!(d.sub_descriptors().len(), 2, "{layout:?}");
        for name in ["GC", "Late"] {
            let info = d
                .sub_descriptors()
                .iter()
                .find(|s| s.name == name)
                .expect("recorded");
            assert_eq!(info.address, None, "{layout:?} {name}");
            assert!(
                info.skipped.as_deref().is_some_and(|r| r.contains("null")),
                "{layout:?} {name}: {info:?}"
            );
        }
    }
}

#[test]
fn sub_descriptor_in_unreadable_memory_is_skipped() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        // A sub-descriptor whose JSON text is not captured (a small dump).
        let sub = write_header(&mut mem, None, &Header::valid(layout, UNMAPPED, 32, 0, 0));
        let var = put_pointer_var(&mut mem, layout, sub);
        // And one whose variable points nowhere.
        let json =
            r#"{"globals":{"G":5},"subDescriptors":{"GC":[[1],"pointer"],"Wild":[[2],"pointer"]}}"#;
        let main = put_descriptor(&mut mem, json, &[0, var, UNMAPPED + 0x100]);
        let d = load(&mem.into_target(), main).expect("unreadable sub-descriptors are not fatal");
        assert_eq!(d.global_value("G").expect("G"), 5, "{layout:?}");
        let gc = d
            .sub_descriptors()
            .iter()
            .find(|s| s.name == "GC")
            .expect("GC recorded");
        assert_eq!(gc.address, Some(sub), "{layout:?}");
        assert!(
            gc.skipped
                .as_deref()
                .is_some_and(|r| r.contains("JSON text")),
            "{layout:?}: {gc:?}"
        );
        let wild = d
            .sub_descriptors()
            .iter()
            .find(|s| s.name == "Wild")
            .expect("Wild recorded");
        assert_eq!(wild.address, None, "{layout:?}");
        assert!(wild.skipped.is_some(), "{layout:?}: {wild:?}");
    }
}

#[test]
fn same_name_in_main_and_sub_is_duplicate() {
    let cases = [
        ("global", r#""globals":{"Shared":[[1],"pointer"]}"#),
        ("type", r#""types":{"Shared":{"A":0}}"#),
        ("contract", r#""contracts":{"Shared":1}"#),
    ];
    for layout in DataLayout::ALL {
        for (kind, section) in cases {
            let mut mem = MemoryBuilder::new(layout);
            let sub_json = format!("{{{section}}}");
            let sub = put_descriptor(&mut mem, &sub_json, &[0, 1]);
            let var = put_pointer_var(&mut mem, layout, sub);
            let main_json = format!(r#"{{{section},"subDescriptors":{{"GC":[[2],"pointer"]}}}}"#);
            let main = put_descriptor(&mut mem, &main_json, &[0, 1, var]);
            let err = load(&mem.into_target(), main).expect_err("duplicate");
            assert!(
                matches!(&err, DescriptorError::Duplicate { kind: k, name, first, second }
                    if *k == kind && name == "Shared" && first == "main" && second == "GC"),
                "{layout:?} {kind}: {err:?}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains("main") && msg.contains("GC") && msg.contains("Shared"),
                "{layout:?}: {msg}"
            );
        }
    }
}

#[test]
fn nested_sub_sub_descriptor() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let inner_json =
            r#"{"globals":{"InnerPtr":[[1],"pointer"]},"types":{"Region":{"!":32,"Start":0}}}"#;
        let inner = put_descriptor(&mut mem, inner_json, &[0, wide(layout, 0x9990)]);
        let inner_var = put_pointer_var(&mut mem, layout, inner);
        let gc_json =
            r#"{"globals":{"GCPtr":[[1],"pointer"]},"subDescriptors":{"Regions":[[2],"pointer"]}}"#;
        let gc = put_descriptor(&mut mem, gc_json, &[0, wide(layout, 0x8880), inner_var]);
        let gc_var = put_pointer_var(&mut mem, layout, gc);
        let main_json =
            r#"{"globals":{"MainPtr":[[1],"pointer"]},"subDescriptors":{"GC":[[2],"pointer"]}}"#;
        let main = put_descriptor(&mut mem, main_json, &[0, wide(layout, 0x7770), gc_var]);
        let d = load(&mem.into_target(), main).expect("nested loads");

        assert_eq!(
            d.global_value("MainPtr").expect("main"),
            wide(layout, 0x7770),
            "{layout:?}"
        );
        assert_eq!(
            d.global_value("GCPtr").expect("gc"),
            wide(layout, 0x8880),
            "{layout:?}"
        );
        assert_eq!(
            d.global_value("InnerPtr").expect("inner"),
            wide(layout, 0x9990),
            "{layout:?}"
        );
        assert_eq!(
            d.global("InnerPtr").expect("inner").origin(),
            "Regions",
            "{layout:?}"
        );
        assert_eq!(
            d.ty("Region").expect("Region").size().expect("size"),
            32,
            "{layout:?}"
        );
        let mut subs: Vec<_> = d
            .sub_descriptors()
            .iter()
            .map(|s| (s.name.as_str(), s.address, s.skipped.is_none()))
            .collect();
        subs.sort();
        assert_eq!(
            subs,
            vec![("GC", Some(gc), true), ("Regions", Some(inner), true)],
            "{layout:?}"
        );
    }
}

/// The reason a sub-descriptor was skipped, or a panic naming what was loaded instead.
fn skipped(d: &DataDescriptor, name: &str) -> String {
    let info = d
        .sub_descriptors()
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} not recorded: {:?}", d.sub_descriptors()));
    info.skipped
        .clone()
        .unwrap_or_else(|| panic!("{name} was loaded, not skipped"))
}

#[test]
fn sub_descriptor_cycles_are_skipped() {
    for layout in DataLayout::ALL {
        // main -> main.
        let mut mem = MemoryBuilder::new(layout);
        let main = put_descriptor(
            &mut mem,
            r#"{"globals":{"G":1},"subDescriptors":{"Self":[[1],"pointer"]}}"#,
            &[0, LATE_VAR],
        );
        mem.region(LATE_VAR, 8)
            .bytes(0, &encode_pointer(layout, main));
        let d = load(&mem.into_target(), main).expect("a cycle is skipped, not fatal");
        let why = skipped(&d, "Self");
        assert!(
            why.contains("cycle") && why.contains("main"),
            "{layout:?}: {why}"
        );
        assert_eq!(d.global_value("G").unwrap(), 1, "{layout:?}");

        // main -> A -> main.
        let mut mem = MemoryBuilder::new(layout);
        let a = put_descriptor(
            &mut mem,
            r#"{"globals":{"AG":2},"subDescriptors":{"Back":[[1],"pointer"]}}"#,
            &[0, LATE_VAR_2],
        );
        let a_var = put_pointer_var(&mut mem, layout, a);
        let main = put_descriptor(
            &mut mem,
            r#"{"globals":{"G":1},"subDescriptors":{"A":[[1],"pointer"]}}"#,
            &[0, a_var],
        );
        mem.region(LATE_VAR_2, 8)
            .bytes(0, &encode_pointer(layout, main));
        let d = load(&mem.into_target(), main).expect("a cycle is skipped, not fatal");
        let why = skipped(&d, "Back");
        assert!(
            why.contains("cycle") && why.contains("descriptor A"),
            "{layout:?}: {why}"
        );
        // A itself loaded; its back edge did not.
        assert_eq!(d.global_value("AG").unwrap(), 2, "{layout:?}");
    }
}

#[test]
fn sub_descriptor_nesting_is_capped() {
    let layout = DataLayout::LE64;
    let mut mem = MemoryBuilder::new(layout);
    let b = put_descriptor(&mut mem, r#"{"globals":{"B":2}}"#, &[0]);
    let b_var = put_pointer_var(&mut mem, layout, b);
    let a = put_descriptor(
        &mut mem,
        r#"{"globals":{"A":1},"subDescriptors":{"B":[1]}}"#,
        &[0, b_var],
    );
    let a_var = put_pointer_var(&mut mem, layout, a);
    let main = put_descriptor(&mut mem, r#"{"subDescriptors":{"A":[1]}}"#, &[0, a_var]);
    let target = mem.into_target();

    let d = load(&target, main).expect("depth 2 is within the default cap");
    assert_eq!(
        (
            d.global_value("A").expect("A"),
            d.global_value("B").expect("B")
        ),
        (1, 2)
    );
    let shallow = Limits {
        max_sub_descriptor_depth: 1,
        ..Limits::default()
    };
    let d = embedded::load(&target, main, &shallow).expect("depth over the cap is skipped");
    let why = skipped(&d, "B");
    assert!(
        why.contains("nesting is 2, over cdac's fixed limit, which is 1"),
        "{why}"
    );
    assert_eq!(d.global_value("A").unwrap(), 1);
    assert!(d.global("B").is_err());
}

#[test]
fn sub_descriptor_with_another_pointer_size_is_skipped_as_a_layout_mismatch() {
    for layout in DataLayout::ALL {
        let other = DataLayout {
            pointer_size: if layout.pointer_size == 8 { 4 } else { 8 },
            ..layout
        };
        let mut mem = MemoryBuilder::new(layout);
        let sub = put_descriptor_as(&mut mem, other, br#"{"globals":{"S":1}}"#, &[0]);
        let var = put_pointer_var(&mut mem, layout, sub);
        let main = put_descriptor(
            &mut mem,
            r#"{"subDescriptors":{"GC":[[1],"pointer"]}}"#,
            &[0, var],
        );
        let d = load(&mem.into_target(), main).expect("a mismatched sub-descriptor is skipped");
        let why = skipped(&d, "GC");
        assert!(
            why.contains("descriptor GC has a different pointer size or byte order"),
            "{layout:?}: {why}"
        );
        assert!(d.global("S").is_err(), "{layout:?}");
    }
}

#[test]
fn sub_descriptor_with_another_byte_order_is_skipped_as_a_layout_mismatch() {
    for layout in DataLayout::ALL {
        let other = DataLayout {
            endian: if layout.endian == Endian::Little {
                Endian::Big
            } else {
                Endian::Little
            },
            ..layout
        };
        let mut mem = MemoryBuilder::new(layout);
        let sub = put_descriptor_as(&mut mem, other, br#"{"globals":{"S":1}}"#, &[0]);
        let var = put_pointer_var(&mut mem, layout, sub);
        let main = put_descriptor(
            &mut mem,
            r#"{"subDescriptors":{"GC":[[1],"pointer"]}}"#,
            &[0, var],
        );
        let d = load(&mem.into_target(), main).expect("a mismatched sub-descriptor is skipped");
        let why = skipped(&d, "GC");
        assert!(
            why.contains("descriptor GC has a different pointer size or byte order"),
            "{layout:?}: {why}"
        );
        assert!(d.global("S").is_err(), "{layout:?}");
    }
}

#[test]
fn malformed_sub_descriptors_are_skipped_with_the_reason() {
    for layout in DataLayout::ALL {
        // The slot index is out of range.
        let err = load_single(
            layout,
            r#"{"subDescriptors":{"GC":[[5],"pointer"]}}"#,
            &[0, 1],
        )
        .expect("skipped");
        let why = skipped(&err, "GC");
        assert!(
            why.contains("GC uses pointer-data index 5, but there are only 2 slots"),
            "{layout:?}: {why}"
        );
        // Bad magic behind the pointer: the damaged sub-descriptor is skipped with the reason.
        let mut mem = MemoryBuilder::new(layout);
        let junk = put_bytes(&mut mem, &[0x11; 48]);
        let var = put_pointer_var(&mut mem, layout, junk);
        let main = put_descriptor(&mut mem, r#"{"subDescriptors":{"GC":[1]}}"#, &[0, var]);
        let d = load(&mem.into_target(), main).expect("skipped");
        let why = skipped(&d, "GC");
        assert!(
            why.contains(&format!("no contract descriptor at {junk:#x}")),
            "{layout:?}: {why}"
        );
    }
    let err =
        json::parse("s", br#"{"subDescriptors":{"GC":"x64"}}"#).expect_err("string sub-descriptor");
    assert!(
        matches!(&err, DescriptorError::Invalid { detail, .. } if detail.contains("GC")),
        "{err:?}"
    );
}

/// A sub-descriptor pointer read from (damaged) target memory may point at the very top of
/// the address space; the header fields after the magic then lie past `u64::MAX`.
#[test]
fn sub_descriptor_at_the_top_of_the_address_space_is_not_a_panic() {
    let layout = DataLayout::LE64;
    let top = u64::MAX - 7;
    let mut mem = MemoryBuilder::new(layout);
    mem.region(top, 8).bytes(0, &magic(layout));
    let var = put_pointer_var(&mut mem, layout, top);
    let main = put_descriptor(
        &mut mem,
        r#"{"globals":{"G":1},"subDescriptors":{"GC":[1]}}"#,
        &[0, var],
    );
    let target = mem.into_target();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load(&target, main)));
    let outcome = result.expect("the loader must not panic");
    // The header cannot be read past the end of the address space: skipped or a Read error.
    match outcome {
        Ok(d) => {
            let gc = d
                .sub_descriptors()
                .iter()
                .find(|s| s.name == "GC")
                .expect("recorded");
            assert!(gc.skipped.is_some(), "{gc:?}");
        }
        Err(e) => assert!(matches!(e, DescriptorError::Read { .. }), "{e:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Shipped descriptors (.NET 8)
// ---------------------------------------------------------------------------------------------

const NET8_BUILD_ID: &str = "7c3796010ffdb407df859c3884e92bcad0cf7925";

#[test]
fn shipped_net8_descriptor_parses() {
    let all = shipped::builtin().expect("builtin descriptors parse");
    let complete: Vec<_> = all.iter().filter(|d| !d.meta.overlay).collect();
    assert_eq!(complete.len(), 1);
    let net8 = complete[0];
    assert_eq!(net8.source, "net8.0-linux-x64.json");
    assert_eq!(net8.meta.name, "net8.0-linux-x64");
    assert_eq!(net8.meta.version_prefix, "8.0.");
    assert_eq!(net8.meta.architecture, "x64");
    assert_eq!(
        net8.meta.verified_build_ids,
        vec![
            NET8_BUILD_ID.to_string(),
            "be4af8fbe7201f286fe16d9afb6e7ac51280e11c".to_string(),
            "00bbee3860797ccca61bc5bffd3a5da9a60c1108".to_string()
        ]
    );
    let pd = net8
        .meta
        .pointer_data
        .as_ref()
        .expect("pointer data source");
    assert_eq!((pd.symbol.as_str(), pd.count), ("g_dacTable", 23));
    assert_eq!(net8.physical.version, 0);
    assert_eq!(net8.physical.baseline.as_deref(), Some("empty"));
    assert_eq!(
        net8.physical.contracts.get("ExecutionManager"),
        Some(&ContractVersion::Number(1))
    );
    let rs = net8
        .physical
        .types
        .get("RangeSection")
        .expect("RangeSection");
    assert_eq!(rs.fields.get("JitManager").map(|f| f.offset), Some(24));
    assert_eq!(
        net8.physical
            .types
            .get("RangeSectionMap")
            .and_then(|t| t.size),
        Some(2056)
    );
}

#[test]
fn shipped_select_by_build_id_or_version_line() {
    let all = shipped::builtin().expect("builtin");
    let (d, fit) = shipped::select(&all, Some(NET8_BUILD_ID), None, "x64").expect("by build id");
    assert_eq!(
        (d.meta.name.as_str(), fit),
        ("net8.0-linux-x64", Fit::VerifiedBuild)
    );
    let (d, fit) = shipped::select(
        &all,
        Some(&NET8_BUILD_ID.to_uppercase()),
        Some("8.0.7"),
        "x64",
    )
    .expect("build id, any case");
    assert_eq!(
        (d.meta.name.as_str(), fit),
        ("net8.0-linux-x64", Fit::VerifiedBuild)
    );
    let (d, fit) = shipped::select(&all, None, Some("8.0.7"), "x64").expect("by version");
    assert_eq!(
        (d.meta.name.as_str(), fit),
        ("net8.0-linux-x64", Fit::SameVersionLine)
    );
    let (_, fit) = shipped::select(&all, Some("00ff"), Some("8.0.11"), "x64")
        .expect("unknown build, same line");
    assert_eq!(fit, Fit::SameVersionLine);
}

#[test]
fn shipped_select_refuses_other_runtimes() {
    let all = shipped::builtin().expect("builtin");
    for (build, version, arch) in [
        (None, Some("9.0.1"), "x64"),
        (None, Some("8.0.7"), "arm64"),
        (Some("00ff"), None, "x64"),
        (None, None, "x64"),
    ] {
        let err = shipped::select(&all, build, version, arch).expect_err("no fit");
        assert!(
            matches!(&err, DescriptorError::NotFound(msg) if msg.contains(version.unwrap_or("unknown")) && msg.contains(arch) && msg.contains("net8.0-linux-x64")),
            "{version:?} {arch}: {err:?}"
        );
    }
}

#[test]
fn shipped_instantiate_resolves_against_the_exported_table() {
    let all = shipped::builtin().expect("builtin");
    let net8 = &all[0];
    let layout = DataLayout::LE64;
    // 8.0.0's table has 155 slots; the descriptor reads only the first 23.
    let slots: Vec<u64> = (0..155u64).map(|i| 0x7f12_0000_0000 + i * 0x100).collect();
    let mut mem = MemoryBuilder::new(layout);
    let table = put_pointers(&mut mem, layout, &slots);
    let target = mem.into_target();
    let resolve = |name: &str| (name == "g_dacTable").then_some((table, 155 * 8));

    let d =
        shipped::instantiate(net8, &target, &resolve, &Limits::default()).expect("instantiates");
    assert_eq!(d.layout(), layout);
    assert_eq!(
        d.global_value("ExecutionManagerCodeRangeMapAddress")
            .expect("global"),
        slots[0]
    );
    assert_eq!(
        d.global_value("EEJitManagerAddress").expect("global"),
        slots[4]
    );
    assert_eq!(d.global_value("AppDomain").expect("global"), slots[21]);
    assert_eq!(
        d.global("SystemDomain")
            .expect("global")
            .pointer_data_index(),
        Some(22)
    );
    assert_eq!(
        d.global_value("HashMapValueMask").expect("global"),
        0x7fff_ffff_ffff_ffff
    );
    assert_eq!(d.global_string("Architecture").expect("global"), "x64");
    assert_eq!(d.global_string("OperatingSystem").expect("global"), "unix");
    assert_eq!(
        d.ty("RangeSection")
            .expect("type")
            .offset("HeapList")
            .expect("field"),
        40
    );
    assert_eq!(
        d.contract("ExecutionManager")
            .and_then(ContractVersion::coreclr_number),
        Some(1)
    );
    assert_eq!(
        d.global("GCInfoVersion").expect("global").origin(),
        "net8.0-linux-x64.json"
    );
}

#[test]
fn shipped_instantiate_errors() {
    let all = shipped::builtin().expect("builtin");
    let net8 = &all[0];
    let layout = DataLayout::LE64;
    let mut mem = MemoryBuilder::new(layout);
    // Only 10 of the 23 slots read are mapped.
    let table = put_pointers(&mut mem, layout, &[1; 10]);
    let target = mem.into_target();

    let err = shipped::instantiate(net8, &target, &|_: &str| None, &Limits::default())
        .expect_err("no export");
    assert!(
        matches!(&err, DescriptorError::NotFound(msg) if msg.contains("g_dacTable")),
        "{err:?}"
    );

    // The export's size says the table is too small for the descriptor: another build.
    let err = shipped::instantiate(
        net8,
        &target,
        &|_: &str| Some((table, 80)),
        &Limits::default(),
    )
    .expect_err("symbol too small");
    assert!(
        matches!(&err, DescriptorError::Invalid { detail, .. } if detail.contains("23 slots of g_dacTable need 184 bytes")),
        "{err:?}"
    );
    // Size unknown (0): the read itself finds the table short.
    let err = shipped::instantiate(
        net8,
        &target,
        &|_: &str| Some((table, 0)),
        &Limits::default(),
    )
    .expect_err("short table");
    assert!(
        matches!(&err, DescriptorError::Read { descriptor, what: "pointer data", .. } if descriptor == "net8.0-linux-x64.json"),
        "{err:?}"
    );

    let small = Limits {
        max_pointer_data: 20,
        ..Limits::default()
    };
    let err = shipped::instantiate(net8, &target, &|_: &str| Some((table, 0)), &small)
        .expect_err("over cap");
    assert!(
        matches!(
            err,
            DescriptorError::TooLarge {
                what: "pointer-data count",
                value: 23,
                cap: 20,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn shipped_parse_requires_the_cdac_key() {
    let err =
        shipped::parse("plain.json", br#"{"version":0,"globals":{}}"#).expect_err("no cdac key");
    assert!(
        matches!(&err, DescriptorError::Invalid { descriptor, detail } if descriptor == "plain.json" && detail.contains("cdac")),
        "{err:?}"
    );
    let text =
        br#"{"cdac":{"name":"x","versionPrefix":"8.0.","architecture":"x64","colour":"red"}}"#;
    let err = shipped::parse("extra.json", text).expect_err("unknown meta key");
    assert!(
        matches!(&err, DescriptorError::Invalid { descriptor, detail } if descriptor == "extra.json" && detail.contains("colour")),
        "{err:?}"
    );
    let ok = shipped::parse(
        "min.json",
        br#"{"cdac":{"name":"m","versionPrefix":"8.0.","architecture":"arm64"}}"#,
    )
    .expect("minimal");
    assert_eq!(
        (
            ok.meta.verified_build_ids.len(),
            ok.meta.pointer_data.is_none()
        ),
        (0, true)
    );
}

// ---------------------------------------------------------------------------------------------
// Property tests: arbitrary input never panics.
// ---------------------------------------------------------------------------------------------

/// Fragments generated descriptors are assembled from: mostly well-formed values (so that
/// loading gets deep: indirect globals, sub-descriptor chains, merges), some malformed ones.
const GOOD_GLOBALS: &[&str] = &[
    "0",
    "-1",
    "18446744073709551615",
    "-9223372036854775808",
    r#""0x10""#,
    r#""-0x10""#,
    r#""-0x8000000000000000""#,
    r#""-0x8000000000000001""#,
    r#""x64""#,
    r#""""#,
    "[1]",
    "[3]",
    r#"[[1],"pointer"]"#,
    r#"[[2],"pointer"]"#,
    r#"["0x8","uint8"]"#,
];
const BAD_GLOBALS: &[&str] = &[
    "1e3",
    "1.5",
    "[9]",
    "[[3]]",
    r#"[[4294967296],"pointer"]"#,
    r#"[[1,2],"pointer"]"#,
    "[]",
    "{}",
    "null",
    "true",
];
const GOOD_TYPES: &[&str] = &[
    r#"{"!":8,"A":0}"#,
    r#"{"A":[4,"pointer"]}"#,
    r#"{"!":"0x10"}"#,
    r#"{"A":[1]}"#,
    "{}",
];
const BAD_TYPES: &[&str] = &[
    r#"{"!":-1}"#,
    r#"{"A":4294967296}"#,
    r#"{"A":[]}"#,
    "null",
    "[]",
    r#"{"A":0,"A":1}"#,
];
const GOOD_SUBS: &[&str] = &[r#"[[1],"pointer"]"#, "[2]", "[3]", r#"[["0x1"],"pointer"]"#];
const BAD_SUBS: &[&str] = &["[[2]]", "[7]", "0", "65536", r#""GC""#];
const GOOD_CONTRACTS: &[&str] = &["1", r#""c2""#, r#""n1""#];
const BAD_CONTRACTS: &[&str] = &["-1", r#""""#, "[1]"];
const ODD_VERSIONS: &[&str] = &[r#""0""#, "1", "null", r#""x""#];
const ODD_BASELINES: &[&str] = &[r#""other""#, "null", "3"];
const NAMES: &[&str] = &[
    "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "GC", "Shared",
];

/// A value that is usually from `good`, sometimes from `bad`.
fn mostly(
    good: &'static [&'static str],
    bad: &'static [&'static str],
) -> impl Strategy<Value = &'static str> {
    prop_oneof![12 => proptest::sample::select(good), 1 => proptest::sample::select(bad)]
}

/// A JSON object of up to three entries with distinct names (rarely, the first one again).
fn section(values: impl Strategy<Value = &'static str>) -> impl Strategy<Value = String> {
    section_of(values, 0..4)
}

fn section_of(
    values: impl Strategy<Value = &'static str>,
    size: std::ops::Range<usize>,
) -> impl Strategy<Value = String> {
    (
        proptest::sample::subsequence(NAMES, size),
        proptest::collection::vec(values, 4),
        proptest::bool::weighted(0.05),
    )
        .prop_map(|(names, values, repeat)| {
            let mut body: Vec<String> = names
                .iter()
                .zip(&values)
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            if let (true, Some(first)) = (repeat, body.first().cloned()) {
                body.push(first);
            }
            format!("{{{}}}", body.join(","))
        })
}

/// Descriptor-shaped JSON with random content.
fn descriptor_json() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![8 => Just("0"), 1 => proptest::sample::select(ODD_VERSIONS)],
        prop_oneof![8 => Just(r#""empty""#), 1 => proptest::sample::select(ODD_BASELINES)],
        section(mostly(GOOD_GLOBALS, BAD_GLOBALS)),
        section(mostly(GOOD_TYPES, BAD_TYPES)),
        section_of(mostly(GOOD_SUBS, BAD_SUBS), 0..3),
        section(mostly(GOOD_CONTRACTS, BAD_CONTRACTS)),
        any::<bool>(),
    )
        .prop_map(|(version, baseline, globals, types, subs, contracts, comment)| {
            let lead = if comment { "// c\n" } else { "" };
            format!(
                r#"{lead}{{"version":{version},"baseline":{baseline},"globals":{globals},"types":{types},"subDescriptors":{subs},"contracts":{contracts},}}"#
            )
            .into_bytes()
        })
}

/// Arbitrary bytes or descriptor-shaped JSON.
fn json_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![1 => proptest::collection::vec(any::<u8>(), 0..256), 6 => descriptor_json()]
}

/// One in-memory descriptor: a valid header, possibly with one field damaged.
#[derive(Debug, Clone)]
struct FuzzDescriptor {
    /// Encoded with another layout than the target's (a mismatching sub-descriptor).
    other_layout: Option<DataLayout>,
    /// Header field to damage (0..8) and the raw value to damage it with.
    damage: Option<(u8, u64)>,
    json: Vec<u8>,
    /// Pointer-data slots: kind 0 null, 1..=3 the address of a variable (descriptor k's
    /// slot 1 is variable k, which usually holds descriptor k + 1), 4 the raw value.
    pointer_data: Vec<(u8, u64)>,
}

fn fuzz_descriptor() -> impl Strategy<Value = FuzzDescriptor> {
    (
        proptest::option::weighted(0.1, proptest::sample::select(DataLayout::ALL.to_vec())),
        proptest::option::weighted(0.2, (0u8..8, any::<u64>())),
        json_bytes(),
        prop_oneof![
            // Null placeholder, then the three variables: sub-descriptor chains form.
            3 => Just(vec![(0, 0), (1, 0), (2, 0), (3, 0)]),
            1 => proptest::collection::vec((0u8..5, any::<u64>()), 1..6),
        ],
    )
        .prop_map(
            |(other_layout, damage, json, pointer_data)| FuzzDescriptor {
                other_layout,
                damage,
                json,
                pointer_data,
            },
        )
}

/// Where fuzzed descriptor k's header goes, and the pointer variable that may hold it.
const FUZZ_HEADERS: [u64; 3] = [0x4000_0000, 0x4000_1000, 0x4000_2000];
const FUZZ_VARS: [u64; 3] = [0x5000_0000, 0x5000_1000, 0x5000_2000];

/// Writes descriptor `k` at `FUZZ_HEADERS[k]`; its pointer data may point at the variables
/// that hold the descriptors' addresses (so sub-descriptor chains, cycles and layout
/// mismatches come up).
fn place_fuzz(mem: &mut MemoryBuilder, k: usize, f: &FuzzDescriptor) {
    let layout = f.other_layout.unwrap_or(mem.layout());
    let text = put_bytes(mem, &f.json);
    let slots: Vec<u64> = f
        .pointer_data
        .iter()
        .map(|&(kind, v)| match kind {
            0 => 0,
            1..=3 => FUZZ_VARS[(k + usize::from(kind) - 1) % 3],
            _ => v,
        })
        .collect();
    let data = put_pointers(mem, layout, &slots);
    let mut h = Header::valid(layout, text, f.json.len() as u32, data, slots.len() as u32);
    match f.damage {
        None => {}
        Some((0, v)) => h.magic = v.to_le_bytes(),
        Some((1, v)) => h.flags = v as u32,
        Some((2, v)) => h.descriptor_size = (v % (f.json.len() as u64 + 64)) as u32,
        Some((3, v)) => h.descriptor_size = v as u32,
        Some((4, v)) => h.descriptor = v,
        Some((5, v)) => h.pointer_data_count = (v % 16) as u32,
        Some((6, v)) => h.pointer_data_count = v as u32,
        Some((_, v)) => h.pointer_data = v,
    }
    write_header(mem, Some(FUZZ_HEADERS[k]), &h);
}

/// Lays out up to three fuzzed descriptors and the variables pointing at them.
fn fuzz_target(
    layout: DataLayout,
    descriptors: &[FuzzDescriptor],
    var_targets: &[usize],
) -> Target {
    let mut mem = MemoryBuilder::new(layout);
    for (k, f) in descriptors.iter().enumerate() {
        place_fuzz(&mut mem, k, f);
    }
    for (v, &t) in var_targets.iter().enumerate() {
        let value = FUZZ_HEADERS.get(t).copied().unwrap_or(0);
        mem.region(FUZZ_VARS[v], 8)
            .bytes(0, &encode_pointer(layout, value));
    }
    mem.into_target()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn json_parse_never_panics(bytes in json_bytes()) {
        let _ = json::parse("fuzz", &bytes);
        let _ = shipped::parse("fuzz", &bytes);
    }

    #[test]
    fn random_header_bytes_never_panic(
        layout in proptest::sample::select(DataLayout::ALL.to_vec()),
        keep_magic in any::<bool>(),
        mut bytes in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        if keep_magic && bytes.len() >= 8 {
            bytes[..8].copy_from_slice(&magic(layout));
        }
        let mut mem = MemoryBuilder::new(layout);
        let addr = put_bytes(&mut mem, &bytes);
        let target = mem.into_target();
        let result = embedded::load(&target, addr, &Limits::default());
        // Nothing but a header is mapped: no descriptor can load from it (but JSON of
        // length 0 at any address is still not valid JSON).
        prop_assert!(result.is_err(), "{:?}", result);
    }

    #[test]
    fn loading_random_descriptors_never_panics(
        layout in proptest::sample::select(DataLayout::ALL.to_vec()),
        descriptors in proptest::collection::vec(fuzz_descriptor(), 2..=3),
        var_targets in prop_oneof![
            // Variable k holds descriptor k + 1 (the last one null), or anything.
            3 => Just(vec![1usize, 2, 3]),
            1 => proptest::collection::vec(0usize..4, 3),
        ],
    ) {
        let target = fuzz_target(layout, &descriptors, &var_targets);
        // Errors are fine; a descriptor that loads has the layout its header declares, and
        // every loaded sub-descriptor is one of those laid out.
        if let Ok(d) = embedded::load(&target, FUZZ_HEADERS[0], &Limits::default()) {
            // Damaged flags may declare the other pointer size, which the reader then
            // follows (and the rest of the header may still read as a valid one).
            if !matches!(descriptors[0].damage, Some((1, _))) {
                prop_assert_eq!(d.layout(), descriptors[0].other_layout.unwrap_or(layout));
            }
            for s in d.sub_descriptors() {
                if let (Some(addr), None) = (s.address, &s.skipped) {
                    prop_assert!(FUZZ_HEADERS[1..].contains(&addr), "{:?}", s);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Leniencies and strictness added after review
// ---------------------------------------------------------------------------------------------

#[test]
fn a_terminator_counted_in_descriptor_size_is_accepted() {
    for layout in DataLayout::ALL {
        let mut mem = MemoryBuilder::new(layout);
        let addr = put_descriptor_as(
            &mut mem,
            layout,
            b"{\"version\":0,\"globals\":{\"G\":\"0x5\"}}\0",
            &[0],
        );
        let d = load(&mem.into_target(), addr).unwrap_or_else(|e| panic!("{layout:?}: {e}"));
        assert_eq!(d.global_value("G").unwrap(), 5, "{layout:?}");
    }
}

#[test]
fn contract_tags_must_be_canonical_to_have_a_number() {
    let tag = |t: &str| ContractVersion::Tag(t.to_string()).coreclr_number();
    assert_eq!(tag("c0"), Some(0));
    assert_eq!(tag("c12"), Some(12));
    for odd in ["c01", "c+1", "c-1", "c", "c1a", "n1", "C1"] {
        assert_eq!(tag(odd), None, "{odd}");
    }
}

#[test]
fn shipped_selection_ignores_architecture_case() {
    let all = shipped::builtin().unwrap();
    let (d, fit) = shipped::select(&all, None, Some("8.0.11"), "X64").expect("X64 is x64");
    assert_eq!(d.meta.name, "net8.0-linux-x64");
    assert_eq!(fit, Fit::SameVersionLine);
}

#[test]
fn sub_descriptor_count_is_budgeted() {
    let layout = DataLayout::LE64;
    let mut mem = MemoryBuilder::new(layout);
    let mut slots = vec![0u64];
    let mut entries = Vec::new();
    for i in 0..70 {
        let sub = put_descriptor(&mut mem, &format!(r#"{{"globals":{{"S{i}":{i}}}}}"#), &[0]);
        slots.push(put_pointer_var(&mut mem, layout, sub));
        entries.push(format!(r#""Sub{i:02}":[[{}],"pointer"]"#, i + 1));
    }
    let main = put_descriptor(
        &mut mem,
        &format!(r#"{{"subDescriptors":{{{}}}}}"#, entries.join(",")),
        &slots,
    );
    let d = load(&mem.into_target(), main).expect("over-budget subs are skipped");
    let loaded = d
        .sub_descriptors()
        .iter()
        .filter(|s| s.skipped.is_none())
        .count();
    assert_eq!(loaded, Limits::default().max_sub_descriptors as usize);
    let over: Vec<_> = d
        .sub_descriptors()
        .iter()
        .filter_map(|s| s.skipped.clone())
        .collect();
    assert_eq!(over.len(), 70 - loaded);
    assert!(
        over.iter().all(|w| w.contains("number of sub-descriptors")),
        "{over:?}"
    );
}

#[test]
fn direct_value_sub_descriptors_are_skipped() {
    for layout in DataLayout::ALL {
        let d = load_single(
            layout,
            r#"{"globals":{"G":1},"subDescriptors":{"GC":"0x1000"}}"#,
            &[0],
        )
        .expect("loads");
        assert!(skipped(&d, "GC").contains("not an indirect"), "{layout:?}");
        assert_eq!(d.global_value("G").unwrap(), 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Overlays: shipped descriptors that fill in what a runtime's own descriptor lacks
// ---------------------------------------------------------------------------------------------

/// A runtime-like descriptor: one type with one field, one global, one contract.
fn runtime_part() -> DataDescriptor {
    let mut d = DataDescriptor::new(DataLayout::LE64);
    let own = json::parse(
        "runtime",
        br#"{"version":0,"types":{"RealCodeHeader":{"GCInfo":16,"MethodDesc":24}},
             "globals":{"GCInfoVersion":["0x4","uint32"]},"contracts":{"ExecutionManager":2}}"#,
    )
    .expect("runtime part");
    d.merge("runtime", &own, &[0]).expect("merge");
    d
}

#[test]
fn an_overlay_fills_what_the_runtime_lacks_and_keeps_what_it_has() {
    let mut d = runtime_part();
    let overlay = json::parse(
        "overlay",
        br#"{"version":0,
             "types":{"RealCodeHeader":{"EHInfo":8,"MethodDesc":32},"EEILException":{"Clauses":8}},
             "globals":{"GCInfoVersion":["0x2","uint32"],"Slot":[[1],"pointer"]},
             "contracts":{"ExecutionManager":1,"RuntimeInfo":1}}"#,
    )
    .expect("overlay");
    let report = d.fill("net-test", &overlay, &[0, 0x1234]).expect("fill");
    // Added: a field of a type the runtime has, a type, a global (through the overlay's
    // own pointer data), a contract.
    assert_eq!(report.added_fields, vec!["RealCodeHeader.EHInfo"]);
    assert_eq!(report.added_types, vec!["EEILException"]);
    assert_eq!(report.added_globals, vec!["Slot"]);
    assert_eq!(report.added_contracts, vec!["RuntimeInfo"]);
    let header = d.ty("RealCodeHeader").unwrap();
    assert_eq!(header.offset("EHInfo").unwrap(), 8);
    assert_eq!(header.field("EHInfo").unwrap().origin, "net-test");
    assert_eq!(header.field("GCInfo").unwrap().origin, "runtime");
    assert_eq!(d.global_value("Slot").unwrap(), 0x1234);
    assert_eq!(d.contract_origin("RuntimeInfo"), Some("net-test"));
    // Kept: the runtime's offset, global value and contract version, each disagreement
    // reported.
    assert_eq!(header.offset("MethodDesc").unwrap(), 24);
    assert_eq!(d.global_value("GCInfoVersion").unwrap(), 4);
    assert_eq!(
        d.contract("ExecutionManager"),
        Some(&ContractVersion::Number(2))
    );
    assert_eq!(d.contract_origin("ExecutionManager"), Some("runtime"));
    assert_eq!(report.conflicts.len(), 3, "{:?}", report.conflicts);
    assert!(report
        .conflicts
        .iter()
        .any(|c| c.contains("RealCodeHeader.MethodDesc")));
}

#[test]
fn an_overlay_with_a_bad_pointer_index_changes_nothing() {
    let mut d = runtime_part();
    let before = d.clone();
    let overlay = json::parse(
        "overlay",
        br#"{"version":0,"types":{"New":{"A":0}},"globals":{"Far":[[9],"pointer"]}}"#,
    )
    .expect("overlay");
    let err = d
        .fill("bad", &overlay, &[0])
        .expect_err("index 9 of 1 slot");
    assert!(
        matches!(err, DescriptorError::PointerDataIndex { index: 9, .. }),
        "{err}"
    );
    assert_eq!(d, before);
}

#[test]
fn overlays_are_chosen_by_version_line_and_build() {
    let (all, native_aot): (Vec<_>, Vec<_>) = shipped::builtin()
        .unwrap()
        .into_iter()
        .partition(|d| d.meta.is_for_flavor("coreclr"));
    // NativeAOT runtimes get their own, and the formats' (which fit every flavor).
    let aot: Vec<String> = native_aot
        .iter()
        .filter(|d| d.meta.is_for_flavor("nativeaot"))
        .map(|d| d.meta.name.clone())
        .collect();
    assert_eq!(
        aot,
        [
            "nativeaot10.0-linux-x64",
            "nativeaot11.0-linux-x64",
            "nativeaot"
        ]
    );
    assert!(all
        .iter()
        .any(|d| d.meta.name == "formats" && d.meta.is_for_flavor("nativeaot")));
    assert!(!all.iter().any(|d| d.meta.name.starts_with("nativeaot")));
    let names = |v: &str, build: Option<&str>| -> Vec<(String, Fit)> {
        shipped::overlays_for(&all, build, Some(v), "x64")
            .into_iter()
            .map(|(d, f)| (d.meta.name.clone(), f))
            .collect()
    };
    // Every runtime gets the formats' overlay, last; .NET 9 and 10 their own first.
    assert_eq!(
        names("9.0.22", None),
        vec![
            ("net9.0-linux-x64".to_string(), Fit::SameVersionLine),
            ("formats".to_string(), Fit::EveryRuntime)
        ]
    );
    assert_eq!(names("10.0.14", None)[0].0, "net10.0-linux-x64");
    assert_eq!(
        names("8.0.33", None),
        vec![("formats".to_string(), Fit::EveryRuntime)]
    );
    // Each architecture its own (the formats' for every one).
    let arm64: Vec<String> = shipped::overlays_for(&all, None, Some("9.0.22"), "arm64")
        .into_iter()
        .map(|(d, _)| d.meta.name.clone())
        .collect();
    assert_eq!(arm64, vec!["net9.0-linux-arm64", "formats"]);
    assert_eq!(
        shipped::overlays_for(&all, None, Some("9.0.22"), "riscv64").len(),
        1
    );
    // A complete descriptor is never picked as an overlay, nor an overlay as complete.
    let (complete, _) = shipped::select(&all, None, Some("9.0.22"), "x64")
        .map(|(d, f)| (d.meta.name.clone(), f))
        .unwrap_or_else(|_| ("none".into(), Fit::SameVersionLine));
    assert_eq!(complete, "none");
}
