//! ReadyToRun lookups, in target memory and over image bytes:
//! - mode 0: the byte-slice Native Format (`formats::r2r::native`): integers, relative
//!   offsets, `NativeArray`, `NativeHashtable`;
//! - mode 1: an image file (`formats::r2r::image::R2rImage::parse`), its sections and
//!   runtime functions, and the whole r2rmap pipeline (`r2r_perf_map_from_bytes`: metadata,
//!   MethodDefEntryPoints, InstanceMethodEntryPoints, names);
//! - mode 2: the in-memory Native Format reader (`contracts::execution_manager::
//!   native_format`) and the entry-point hash map (`hash_map`) over input memory;
//! - mode 3: the ExecutionManager's ReadyToRun path (runtime-function search, hot/cold map,
//!   entry-point hash map, unwind, GC and exception info) over a mock runtime (the tests'
//!   `tests/em_mock`) whose structures the input then damages.
#![no_main]

#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../tests/em_mock/mod.rs"]
mod em_mock;

use cdac::contracts::execution_manager::native_format::NativeReader;
use cdac::contracts::execution_manager::{execution_manager, hash_map, JitType};
use cdac::formats::r2r::image::R2rImage;
use cdac::formats::r2r::{native, r2r_perf_map_from_bytes, R2rMapOptions};
use cdac_fuzz::{descriptor, layout, memory, Input, BASE};
use libfuzzer_sys::fuzz_target;

fn slices(input: &mut Input<'_>) {
    let start = usize::from(input.u16());
    let index = input.u32();
    let buf = input.rest();
    for off in [start % (buf.len() + 8), 0] {
        if let Ok((_, next)) = native::decode_unsigned(buf, off) {
            assert!(next > off && next <= buf.len());
        }
        if let Ok((_, next)) = native::decode_signed(buf, off) {
            assert!(next > off && next <= buf.len());
        }
        if let Ok((to, _)) = native::relative_offset(buf, off) {
            assert!(to < buf.len());
        }
        if let Ok(entries) = native::hashtable_entries(buf, off) {
            assert!(entries.len() <= native::MAX_HASHTABLE_ENTRIES);
        }
    }
    for i in [index, index % 64, 0, 1, 15, 16] {
        let _ = native::array_get(buf, i);
    }
}

fn image(bytes: &[u8]) {
    if let Ok(img) = R2rImage::parse(bytes) {
        for s in img.r2r_sections.clone() {
            let _ = img.section_bytes(s.kind);
            let _ = img.at(s.rva, s.size, "section");
        }
        for i in 0..img.runtime_functions.len().min(256) {
            let _ = img.function_end(i);
        }
    }
    if let Ok(report) = r2r_perf_map_from_bytes(bytes, &[], &R2rMapOptions::default()) {
        let text = report.map.write();
        assert_eq!(
            cdac::formats::r2r::R2rPerfMap::parse(&text).as_ref(),
            Ok(&report.map)
        );
    }
}

fn memory_readers(input: &mut Input<'_>) {
    let flags = input.u8();
    let layout = layout(flags);
    let va = u64::from(input.u16());
    let size = u64::from(input.u16());
    let offset = u64::from(input.u16());
    let index = u64::from(input.u32());
    let key = input.u64();
    let slots = 1 + u64::from(input.u8() % 8);
    let mask_bits = input.u8();
    let target = memory(layout, input.rest(), flags & 0x10 != 0);
    let reader = NativeReader::new(&target, BASE, va, size);
    if let Ok((_, next)) = reader.decode_unsigned(offset) {
        assert!(next > offset && next <= va + size);
    }
    let _ = reader.array_get(va, index);
    let _ = reader.array_get(offset, index % 64);
    // HashMap { Buckets at 0 }, Bucket { Keys, Values } of `slots` pointers each.
    let ps = u64::from(layout.pointer_size);
    let text = format!(
        r#"{{"version":0,
        "types":{{"HashMap":{{"Buckets":0}},"Bucket":{{"!":{size},"Keys":0,"Values":{values}}}}},
        "globals":{{"HashMapSlotsPerBucket":{slots},"HashMapValueMask":[0]}}}}"#,
        size = 2 * slots * ps,
        values = slots * ps,
    );
    let mask = if mask_bits & 1 == 0 {
        u64::MAX >> (65 - 8 * ps)
    } else {
        u64::MAX
    };
    let d = descriptor(layout, &text, &[mask]);
    for map in [BASE, BASE + offset] {
        if let Ok(Some(v)) = hash_map::lookup(&target, &d, map, key) {
            assert_eq!(v & !mask, 0, "a value outside the mask");
        }
        let _ = hash_map::lookup_pointer(&target, &d, map, key);
    }
}

fn mock_runtime(input: &mut Input<'_>) {
    let (w, ips) = em_mock::damaged_r2r::damaged_r2r_world(input.rest());
    let (t, d) = w.into_parts();
    let Ok(em) = execution_manager(&t, &d) else {
        return;
    };
    for ip in ips {
        let Ok(Some(block)) = em.code_block(ip) else {
            continue;
        };
        assert_eq!(block.ip, ip);
        // (`relative_offset` of cold code counts from the hot part's end, so it is not
        // `ip - start` there.)
        assert!(block.start <= ip, "{block:?}");
        let _ = block.jit_type == JitType::R2r;
        if let Ok(region) = em.method_region_info(&block) {
            let _ = region.cold_start;
        }
        let _ = em.unwind_info(&block);
        let _ = em.gc_info(&block);
        let _ = em.debug_info(&block);
        if let Ok(f) = em.funclet_start(&block) {
            assert!(f <= ip, "funclet start {f:#x} after {ip:#x}");
        }
        let _ = em.exception_clauses(&block);
        // A second lookup (answered from the methods already resolved) agrees.
        let again = em.code_block(ip);
        assert!(
            matches!(&again, Ok(Some(b2)) if b2.start == block.start && b2.method_desc == block.method_desc),
            "{block:?} then {again:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    match input.u8() % 4 {
        0 => slices(&mut input),
        1 => image(input.rest()),
        2 => memory_readers(&mut input),
        _ => mock_runtime(&mut input),
    }
});
