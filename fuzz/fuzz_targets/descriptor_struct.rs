//! The in-memory contract descriptor (`DotNetRuntimeContractDescriptor`): header, JSON,
//! pointer data and sub-descriptors read from target memory by `descriptor::embedded`.
//!
//! Input: a mode byte, then either raw memory (mode bit 0 clear), or (set) the parts of a
//! well-formed structure whose fields come from the input: two descriptors, their JSON and
//! pointer data, so that sub-descriptor chains, cycles and limits are reached.
#![no_main]

use cdac::descriptor::{embedded, Limits};
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::{DataLayout, Endian};
use cdac_fuzz::{layout, memory, Input, BASE};
use libfuzzer_sys::fuzz_target;

const MAGIC: [u8; 8] = *b"DNCCDAC\0";

/// Writes a header at `at` of `region` for `layout`.
fn header(
    r: &mut cdac::memory::builder::Region,
    layout: DataLayout,
    at: usize,
    size: u32,
    json: u64,
    count: u32,
    data: u64,
) {
    let mut magic = MAGIC;
    if layout.endian == Endian::Big {
        magic.reverse();
    }
    let flags = if layout.pointer_size == 4 { 3 } else { 1 };
    let ps = usize::from(layout.pointer_size);
    r.bytes(at, &magic)
        .u32(at + 8, flags)
        .u32(at + 12, size)
        .pointer(at + 16, json)
        .u32(at + 16 + ps, count)
        .pointer(at + 16 + ps + 8, data);
}

/// Sub-descriptors loaded (the others are recorded with the reason they were skipped).
fn loaded(d: &cdac::descriptor::DataDescriptor) -> usize {
    d.sub_descriptors()
        .iter()
        .filter(|s| s.skipped.is_none())
        .count()
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mode = input.u8();
    let layout = layout(mode >> 1);
    let limits = Limits {
        max_descriptor_bytes: 1 << 16,
        max_pointer_data: 256,
        max_sub_descriptor_depth: u32::from(input.u8() % 10),
        max_sub_descriptors: u32::from(input.u8() % 70),
        max_total_descriptor_bytes: 1 << 18,
    };
    if mode & 1 == 0 {
        let wrap = mode & 0x80 != 0;
        let offset = u64::from(input.u16() % 256);
        let target = memory(layout, input.rest(), wrap);
        let _ = embedded::read_header(&target, BASE + offset, "fuzz");
        let _ = embedded::pointer_data(&target, BASE + offset, &limits);
        if let Ok(d) = embedded::load(&target, BASE + offset, &limits) {
            assert!(loaded(&d) <= limits.max_sub_descriptors as usize);
        }
        return;
    }
    // Structured: main header at BASE, sub header at BASE + 0x100, a pointer variable at
    // BASE + 0x200 holding the sub header's address (or the main's: a cycle), the pointer
    // data of each, then the two JSON texts.
    let ps = u64::from(layout.pointer_size);
    let cycle = input.bool();
    let main_len = usize::from(input.u16() % 4096);
    let main_json = input.bytes(main_len).to_vec();
    let sub_json = input.rest().to_vec();
    let mut b = MemoryBuilder::new(layout);
    let main_json_at = BASE + 0x1000;
    let sub_json_at = BASE + 0x3000;
    let r = b.region(BASE, 0x400);
    let var = BASE + 0x200;
    let data_main = BASE + 0x300;
    let data_sub = BASE + 0x380;
    header(
        r,
        layout,
        0,
        main_json.len() as u32,
        main_json_at,
        4,
        data_main,
    );
    header(
        r,
        layout,
        0x100,
        sub_json.len() as u32,
        sub_json_at,
        4,
        data_sub,
    );
    r.pointer(0x200, if cycle { BASE } else { BASE + 0x100 });
    // Slot 0: the sub-descriptor variable; 1: itself; 2: a null variable; 3: an address.
    for (i, v) in [var, var + ps, BASE + 0x208, 0x1234].iter().enumerate() {
        r.pointer(0x300 + i * ps as usize, *v);
        r.pointer(0x380 + i * ps as usize, *v);
    }
    if !main_json.is_empty() {
        b.region(main_json_at, main_json.len()).bytes(0, &main_json);
    }
    if !sub_json.is_empty() {
        b.region(sub_json_at, sub_json.len()).bytes(0, &sub_json);
    }
    let target = b.into_target();
    let h = embedded::read_header(&target, BASE, "fuzz").expect("well-formed header");
    assert_eq!(h.layout, layout);
    assert_eq!(h.descriptor, main_json_at);
    if let Ok(d) = embedded::load(&target, BASE, &limits) {
        assert_eq!(d.layout(), layout);
        assert!(loaded(&d) <= limits.max_sub_descriptors as usize);
    }
});
