//! Enumerating all managed code (`execution_manager::enumerate`):
//!
//! * the synthetic .NET 10-style runtime, live and from its gcore dump: exactly the host's
//!   list of JIT'ed and ReadyToRun methods (start, size, MethodDesc, cold part; no stubs);
//!   and a copy of the dump with damaged bytes gives the rest, with errors;
//! * mock runtimes over every data layout and both nibble-map versions: several heaps,
//!   stubs, a method being compiled, split ReadyToRun methods, composite images sharing
//!   one map; damaged maps, headers, lists and hash maps give partial results and errors,
//!   within the walk's bounds;
//! * the real .NET 8 testbed, live and on its full dump: every live managed perf-map entry
//!   is listed with its start and size, the extras are accounted for, ReadyToRun entries
//!   agree with `code_block`; the wall time of `all_code` is printed.

use crate::common;
use crate::em_mock;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use cdac::contracts::execution_manager::enumerate::{
    all_code, enumerate_code, enumerate_code_with, CodeEntry, CodeEnumeration, ErrorSite,
};
use cdac::contracts::execution_manager::range_section_map::all_range_sections;
use cdac::contracts::execution_manager::{execution_manager, JitType};
use cdac::contracts::ContractError;
use cdac::limits::{Limit, Limits};
use cdac::memory::DataLayout;
use cdac::runtime::{OpenOptions, Runtime};
use common::{hex, perf_map, scratch, testbed, SyntheticHost};
use em_mock::*;

// =============================================================================================
// Helpers
// =============================================================================================

/// Checks the walk's own bounds: map units read per heap, error list consistency.
fn check_bounds(en: &CodeEnumeration, what: &str) {
    for h in &en.stats.heaps {
        if h.end >= h.start {
            let bound = (h.end - h.start) / 256 + 2;
            assert!(
                h.units_read <= bound,
                "{what}: heap {:#x} read {} map units, more than {bound}",
                h.node,
                h.units_read
            );
        }
    }
    for w in en.entries.windows(2) {
        assert!(w[0].start < w[1].start, "{what}: not sorted or not unique");
    }
}

fn entry(start: u64, size: u64, md: u64, jit_type: JitType) -> CodeEntry {
    CodeEntry {
        start,
        size,
        method_desc: md,
        jit_type,
        cold_start: None,
        cold_size: 0,
    }
}

// =============================================================================================
// Synthetic runtime
// =============================================================================================

/// The host's methods (no stubs) as code entries, sorted.
fn host_entries(host: &SyntheticHost) -> Vec<CodeEntry> {
    let mut out: Vec<CodeEntry> = host.report["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["kind"] != "stub")
        .map(|m| {
            let cold = m.get("cold_start").filter(|c| !c.is_null()).map(hex);
            CodeEntry {
                start: hex(&m["start"]),
                size: m["size"].as_u64().unwrap(),
                method_desc: hex(&m["method_desc"]),
                jit_type: if m["kind"] == "jit" {
                    JitType::Jit
                } else {
                    JitType::R2r
                },
                cold_start: cold,
                cold_size: m["cold_size"].as_u64().unwrap_or(0),
            }
        })
        .collect();
    out.sort_by_key(|e| e.start);
    out
}

fn check_synthetic(rt: &Runtime, host: &SyntheticHost, what: &str) {
    let expected = host_entries(host);
    let t = Instant::now();
    let all = all_code(rt.target(), rt.descriptor()).expect("all_code");
    let elapsed = t.elapsed();
    assert_eq!(all, expected, "{what}");
    let en = enumerate_code(rt.target(), rt.descriptor()).unwrap();
    assert!(en.errors.is_empty(), "{what}: {:?}", en.errors);
    assert_eq!(en.entries, expected, "{what}");
    check_bounds(&en, what);
    let stubs: BTreeMap<u64, u64> = host.report["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["kind"] == "stub")
        .fold(BTreeMap::new(), |mut m, s| {
            *m.entry(s["stub_kind"].as_u64().unwrap()).or_default() += 1;
            m
        });
    assert_eq!(en.stats.stub_kinds, stubs, "{what}");
    // One heap on the list (the deleted heap is not), one image, one map.
    assert_eq!(en.stats.heaps.len(), 1, "{what}");
    assert_eq!(
        en.stats.heaps[0].node,
        hex(&host.report["code_heap"]["node"])
    );
    assert_eq!(en.stats.r2r_images, 1, "{what}");
    assert_eq!(en.stats.entry_point_maps, 1, "{what}");
    let jit = all.iter().filter(|e| e.jit_type == JitType::Jit).count();
    eprintln!(
        "{what}: {} entries ({jit} jit, {} r2r), {} stubs skipped, {} map units read; all_code took {elapsed:?}",
        all.len(),
        all.len() - jit,
        stubs.values().sum::<u64>(),
        en.stats.heaps[0].units_read
    );
}

#[test]
fn synthetic_live() {
    let host = SyntheticHost::start(&[]);
    let rt = Runtime::attach(host.pid, &OpenOptions::default()).unwrap();
    check_synthetic(&rt, &host, "synthetic live");
}

/// Patches `bytes` at virtual address `addr` of an ELF64 core file.
fn patch_core(core: &mut [u8], addr: u64, bytes: &[u8]) {
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let phoff = u64_at(core, 0x20) as usize;
    let phentsize = u16_at(core, 0x36) as usize;
    let phnum = u16_at(core, 0x38) as usize;
    assert_ne!(phnum, 0xffff, "too many segments for this helper");
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let p_type = u32::from_le_bytes(core[ph..ph + 4].try_into().unwrap());
        let (offset, vaddr, filesz) = (
            u64_at(core, ph + 8),
            u64_at(core, ph + 16),
            u64_at(core, ph + 32),
        );
        if p_type == 1 && vaddr <= addr && addr + bytes.len() as u64 <= vaddr + filesz {
            let at = (offset + addr - vaddr) as usize;
            core[at..at + bytes.len()].copy_from_slice(bytes);
            return;
        }
    }
    panic!("{addr:#x} is not in the core's file-backed segments");
}

#[test]
fn synthetic_gcore_and_damaged_copy() {
    let host = SyntheticHost::start(&[]);
    let dir = scratch("enumerate-synthetic");
    let core = dir.join("host.core");
    host.gcore(&core);
    {
        let rt = Runtime::open_dump(&core, &OpenOptions::default()).unwrap();
        let t = Instant::now();
        let _ = all_code(rt.target(), rt.descriptor());
        eprintln!("synthetic gcore: first all_code took {:?}", t.elapsed());
        check_synthetic(&rt, &host, "synthetic gcore");
    }

    // Damage a copy: (1) the nibble-map unit holding the start of the 3rd JIT method gets
    // nibbles the runtime never writes; (2) the code header slot of the 6th JIT method points
    // at unmapped memory; (3) one key of the entry-point map names no code.
    let expected = host_entries(&host);
    let jit: Vec<&CodeEntry> = expected
        .iter()
        .filter(|e| e.jit_type == JitType::Jit)
        .collect();
    let r2r: Vec<&CodeEntry> = expected
        .iter()
        .filter(|e| e.jit_type == JitType::R2r)
        .collect();
    let heap = &host.report["code_heap"];
    let (map_base, header_map) = (hex(&heap["map_base"]), hex(&heap["header_map"]));
    let unit = (jit[2].start - map_base) / 256;
    let mut bytes = std::fs::read(&core).unwrap();
    patch_core(
        &mut bytes,
        header_map + 4 * unit,
        &0xffff_ffffu32.to_le_bytes(),
    );
    // Every block starting in that unit is lost.
    let lost_unit: BTreeSet<u64> = jit
        .iter()
        .filter(|e| (e.start - map_base) / 256 == unit)
        .map(|e| e.start)
        .collect();
    let bad_header = jit
        .iter()
        .map(|e| e.start)
        .find(|s| !lost_unit.contains(s) && *s > jit[5].start - 1)
        .unwrap();
    patch_core(&mut bytes, bad_header - 8, &0x10u64.to_le_bytes());
    // The entry-point map: find the slot holding the 2nd R2R method's key.
    let buckets = hex(&host.report["hash_map"]["buckets"]);
    let rt = Runtime::open_dump(&core, &OpenOptions::default()).unwrap();
    let n = rt.target().read_pointer(buckets).unwrap();
    let key_slot = (1..=n)
        .flat_map(|b| (0..4).map(move |j| buckets + b * 64 + 8 * j))
        .find(|&a| rt.target().read_pointer(a).unwrap() == r2r[1].start)
        .expect("key slot");
    drop(rt);
    let bogus_key = r2r[1].start + 2; // inside the method, not its start
    patch_core(&mut bytes, key_slot, &bogus_key.to_le_bytes());
    let damaged = dir.join("damaged.core");
    std::fs::write(&damaged, &bytes).unwrap();
    drop(bytes);

    let rt = Runtime::open_dump(&damaged, &OpenOptions::default()).unwrap();
    let en = enumerate_code(rt.target(), rt.descriptor()).unwrap();
    check_bounds(&en, "damaged");
    let gone: BTreeSet<u64> = lost_unit
        .iter()
        .copied()
        .chain([bad_header, r2r[1].start])
        .collect();
    let survivors: Vec<CodeEntry> = expected
        .iter()
        .filter(|e| !gone.contains(&e.start))
        .copied()
        .collect();
    assert_eq!(en.entries, survivors, "damaged: the rest is intact");
    let sites: Vec<ErrorSite> = en.errors.iter().map(|e| e.site).collect();
    for e in &en.errors {
        eprintln!("damaged core: {e}");
    }
    let node = hex(&heap["node"]);
    assert!(
        en.errors.iter().any(|e| e.site == ErrorSite::CodeHeap { node }
            && matches!(e.error, ContractError::Corrupt { addr, .. } if addr == header_map + 4 * unit)),
        "nibble map damage reported: {sites:?}"
    );
    assert!(
        sites.contains(&ErrorSite::CodeBlock { start: bad_header }),
        "{sites:?}"
    );
    assert!(
        sites.contains(&ErrorSite::EntryPoint { entry: bogus_key }),
        "{sites:?}"
    );
    // The strict form fails.
    assert!(all_code(rt.target(), rt.descriptor()).is_err());
    drop(rt);
    std::fs::remove_dir_all(dir).ok();
}

// =============================================================================================
// Mock runtimes
// =============================================================================================

const MD: u64 = 0x0101_aaa0;
const HEAP_A: u64 = 0x0a0a_0000;
const HEAP_B: u64 = 0x0b0b_0000;
const HEAP_SIZE: u64 = 0xc000;
const IMAGE: u64 = 0x0c0c_0000;
const IMAGE2: u64 = 0x0d0d_0000;

fn cases() -> impl Iterator<Item = (DataLayout, u64)> {
    DataLayout::ALL
        .into_iter()
        .flat_map(|l| [1u64, 2].into_iter().map(move |v| (l, v)))
}

fn ctx(layout: DataLayout, version: u64) -> String {
    format!(
        "{}-bit {:?}, v{version}",
        layout.pointer_size * 8,
        layout.endian
    )
}

struct MockRuntime {
    world: World,
    expected: Vec<CodeEntry>,
    /// JIT methods (start, header) in heap order.
    jit: Vec<JitMethod>,
    image: R2rImage,
    being_compiled: u64,
}

fn jit(size: u32, md: u64) -> JitSpec {
    JitSpec {
        size,
        method_desc: md,
        unwind: vec![(0, size)],
        ..JitSpec::default()
    }
}

/// Two heaps (one with stubs and a method being compiled), a split ReadyToRun image whose
/// map is the composite image's, and a second component image sharing that map.
fn mock_runtime(layout: DataLayout, version: u64) -> MockRuntime {
    let mut w = World::new(layout, version);
    let ps = w.ps();
    let f = w.f;
    let mut expected = Vec::new();
    let mut methods = Vec::new();
    let a = w.add_heap(HEAP_A, HEAP_SIZE);
    w.heap_section(a);
    let b = w.add_heap(HEAP_B, HEAP_SIZE);
    w.heap_section(b);
    w.set_all_code_heaps(w.heaps[b].node);
    let sizes = [0x40u32, 0x1000, 0x24, 0x300, 0x2000, 0x80];
    for (i, &size) in sizes.iter().enumerate() {
        let heap = if i % 2 == 0 { a } else { b };
        if i == 2 {
            w.add_stub(heap, 0x60, 4);
        }
        let md = MD + 0x40 * i as u64;
        let m = w.add_jit_method(heap, &jit(size, md));
        expected.push(entry(m.start, size.into(), md, JitType::Jit));
        methods.push(m);
    }
    w.add_stub(a, 0x400, 1);
    // A method being compiled: its header has no GC info yet.
    let pending = w.add_jit_method(b, &jit(0x50, MD + 0x1000));
    w.mem.ptr(pending.header + f.rch_gc, 0);

    // ReadyToRun: A (hot 0x100, cold 0x400..0x500), B (hot 0x100, cold 0x500..0x600),
    // function 2 never used, D with a funclet.
    let mut spec = R2rSpec::new(
        vec![
            Rf::method_len(0x100, 0x200, 0x200),
            Rf::method_len(0x200, 0x300, 0x200),
            Rf::method(0x300, 0x400),
            Rf::part(0x400, 0x500),
            Rf::part(0x500, 0x600),
        ],
        vec![(0x100, MD + 0x2000), (0x200, MD + 0x2040)],
    );
    spec.hot_cold = vec![3, 0, 4, 1];
    spec.base = IMAGE;
    spec.composite = true;
    let img = w.add_r2r(&spec);
    expected.push(CodeEntry {
        cold_start: Some(IMAGE + 0x400),
        cold_size: 0x100,
        ..entry(IMAGE + 0x100, 0x100, MD + 0x2000, JitType::R2r)
    });
    expected.push(CodeEntry {
        cold_start: Some(IMAGE + 0x500),
        cold_size: 0x100,
        ..entry(IMAGE + 0x200, 0x100, MD + 0x2040, JitType::R2r)
    });
    // A second component image of the same composite image: its info names the same
    // CompositeInfo, so the map must be walked once.
    let info2 = w.mem.alloc(f.r2r_size, ps);
    w.mem.ptr(info2 + f.r2r_composite_info, img.composite_info);
    let module2 = w.mem.alloc(f.module_size, ps);
    w.mem.ptr(module2 + f.module_r2r, info2);
    w.mem.map(IMAGE2, 0x1000);
    let s2 = w.write_section(IMAGE2, IMAGE2 + 0x1000, 0, R2R_JIT_MANAGER, 0, module2, 0);
    w.map_range(IMAGE2, IMAGE2 + 0x1000, s2);
    expected.sort_by_key(|e| e.start);
    MockRuntime {
        world: w,
        expected,
        jit: methods,
        image: img,
        being_compiled: pending.start,
    }
}

#[test]
fn mock_runtime_is_enumerated_exactly() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let m = mock_runtime(layout, v);
        let expected = m.expected.clone();
        let (t, d) = m.world.into_parts();
        let en = enumerate_code(&t, &d).unwrap();
        assert!(en.errors.is_empty(), "{c}: {:?}", en.errors);
        assert_eq!(en.entries, expected, "{c}");
        assert!(!en.entries.iter().any(|e| e.start == m.being_compiled));
        check_bounds(&en, &c);
        assert_eq!(en.stats.heaps.len(), 2, "{c}");
        assert_eq!(en.stats.heaps[0].start, HEAP_B, "{c}: the list head first");
        assert_eq!(en.stats.stub_kinds, BTreeMap::from([(1, 1), (4, 1)]), "{c}");
        assert_eq!(en.stats.incomplete, 1, "{c}");
        assert_eq!(en.stats.r2r_images, 2, "{c}");
        assert_eq!(
            en.stats.entry_point_maps, 1,
            "{c}: composite map walked once"
        );
        assert_eq!(en.stats.entry_points, 2, "{c}");
        assert_eq!(en.stats.duplicates, 0, "{c}");
        assert_eq!(en.stats.overlaps, 0, "{c}");
        assert_eq!(all_code(&t, &d).unwrap(), expected, "{c}");
        // Each entry agrees with a lookup, and an ExecutionManager used for the walk keeps
        // answering.
        let em = execution_manager(&t, &d).unwrap();
        let again = enumerate_code_with(em.as_ref(), &t, &d);
        assert_eq!(again.entries, expected, "{c}");
        for e in &expected {
            let b = em.code_block(e.start + e.size - 1).unwrap().expect("found");
            assert_eq!((b.start, b.method_desc), (e.start, e.method_desc), "{c}");
        }
    }
}

/// Without `CodeHeapListNode.Next` in the descriptor, the heaps are those of the code-heap
/// range sections.
#[test]
fn mock_heaps_from_range_sections_without_next() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let m = mock_runtime(layout, v);
        let w = &m.world;
        let mut json: serde_json::Value =
            serde_json::from_str(&descriptor_json(&w.f, &w.opts, w.value_mask())).unwrap();
        json["types"]["CodeHeapListNode"]
            .as_object_mut()
            .unwrap()
            .remove("Next");
        let physical =
            cdac::descriptor::json::parse("em-mock", json.to_string().as_bytes()).unwrap();
        let mut d = cdac::descriptor::DataDescriptor::new(layout);
        d.merge(
            "em-mock",
            &physical,
            &[0, w.map_object, w.ee_jit_manager_var],
        )
        .unwrap();
        let expected = m.expected.clone();
        let t = m.world.mem.into_target();
        let en = enumerate_code(&t, &d).unwrap();
        assert!(en.errors.is_empty(), "{c}: {:?}", en.errors);
        assert_eq!(en.entries, expected, "{c}");
        // In range section order (ascending addresses): heap A first.
        let starts: Vec<u64> = en.stats.heaps.iter().map(|h| h.start).collect();
        assert_eq!(starts, vec![HEAP_A, HEAP_B], "{c}");
    }
}

/// Damage in one heap, one block, one image: the rest is listed, each damage is reported
/// where it is.
#[test]
fn mock_damage_gives_partial_results() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut m = mock_runtime(layout, v);
        let ps = m.world.ps();
        let f = m.world.f;
        let mut gone = BTreeSet::new();
        // (1) A nibble value the runtime never writes, in the unit of method 0's start.
        let heap_a = m.world.heaps[0];
        let m0 = m.jit[0].start;
        let unit = heap_a.map + (m0 - HEAP_A) / 256 * 4;
        let old = m.world.mem.read_u32(unit);
        m.world.mem.u32(unit, 0xF000_0000 | old);
        // (2) Method 1's header slot points nowhere.
        let m1 = m.jit[1].start;
        m.world.mem.ptr(m1 - ps, 0xdead_0000);
        gone.insert(m1);
        // (3) Method 3's GC info gives a length past the heap end.
        let m3 = m.jit[3];
        let gc = m.world.mem.alloc(32, 8);
        let version = m.world.opts.gc_version;
        m.world
            .mem
            .gc_stream(gc, &gc_header_bits(version, 0x0100_0000, true));
        m.world.mem.ptr(m3.header + f.rch_gc, gc);
        gone.insert(m3.start);
        // (4) The hash map's second key names no code.
        let key_b = IMAGE + 0x200;
        let buckets = m.image.buckets;
        let n = m.world.mem.read_ptr(buckets);
        let slot = (1..=n)
            .flat_map(|b| (0..f.slots).map(move |j| buckets + b * f.bucket_size + j * ps))
            .find(|&a| m.world.mem.read_ptr(a) == key_b)
            .expect("key slot");
        m.world.mem.ptr(slot, IMAGE + 0x800);
        gone.insert(key_b);
        let survivors: Vec<CodeEntry> = m
            .expected
            .iter()
            .filter(|e| !gone.contains(&e.start))
            .copied()
            .collect();
        let (t, d) = m.world.into_parts();
        let en = enumerate_code(&t, &d).unwrap();
        check_bounds(&en, &c);
        // Method 0's unit had only its own start (the top nibble was 0 in every layout
        // where it starts 16-aligned in a fresh unit); the bad nibble is one error. Method
        // 0 stays found when its start nibble is not the top one.
        let sites: Vec<ErrorSite> = en.errors.iter().map(|e| e.site).collect();
        let unit_errors = en
            .errors
            .iter()
            .filter(|e| matches!(e.error, ContractError::Corrupt { addr, .. } if addr == unit))
            .count();
        assert!(unit_errors >= 1, "{c}: {sites:?}");
        let found: BTreeSet<u64> = en.entries.iter().map(|e| e.start).collect();
        for s in &survivors {
            if s.start != m0 {
                assert!(found.contains(&s.start), "{c}: lost {:#x}", s.start);
                assert!(en.entries.contains(s), "{c}: changed {s:?}");
            }
        }
        for g in &gone {
            assert!(!found.contains(g), "{c}: {g:#x} listed");
        }
        assert!(sites.contains(&ErrorSite::CodeBlock { start: m1 }), "{c}");
        assert!(
            sites.contains(&ErrorSite::CodeBlock { start: m3.start }),
            "{c}"
        );
        assert!(
            sites.contains(&ErrorSite::EntryPoint {
                entry: IMAGE + 0x800
            }),
            "{c}: {sites:?}"
        );
        assert!(all_code(&t, &d).is_err(), "{c}");
    }
}

/// A version 2 pointer unit that names another block than the one started last.
#[test]
fn mock_v2_pointer_checked_against_last_start() {
    for layout in DataLayout::ALL {
        let mut w = World::new(layout, 2);
        let h = w.add_heap(HEAP_A, HEAP_SIZE);
        w.heap_section(h);
        w.set_all_code_heaps(w.heaps[h].node);
        let a = w.add_jit_method(h, &jit(0x40, MD));
        let b = w.add_jit_method(h, &jit(0x800, MD + 0x40));
        // The first unit fully covered by b now points at a.
        let unit = w.heaps[h].map + ((b.start - HEAP_A) / 256 + 1) * 4;
        let rel = (a.start - HEAP_A) as u32;
        w.mem.u32(unit, (rel & !0xF) + ((rel & 0xF) >> 2) + 9);
        let (t, d) = w.into_parts();
        let en = enumerate_code(&t, &d).unwrap();
        assert_eq!(en.entries.len(), 2, "both blocks still listed");
        assert_eq!(en.errors.len(), 1, "{:?}", en.errors);
        assert!(matches!(
            en.errors[0].error,
            ContractError::Corrupt { addr, .. } if addr == unit
        ));
    }
}

/// Damaged lists and sizes stay within the walk's bounds.
#[test]
fn mock_damaged_lists_and_sizes_are_bounded() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let m = mock_runtime(layout, v);
        let mut w = m.world;
        let f = w.f;
        // (1) The heap list loops: B → A → B.
        let (na, nb) = (w.heaps[0].node, w.heaps[1].node);
        w.mem.ptr(na + f.node_next, nb);
        // (2) Heap A's end is far away: the scan reads its map until it runs out.
        let far = if w.ps() == 4 {
            0xfff0_0000
        } else {
            0x7fff_0000_0000
        };
        w.mem.ptr(na + f.node_end, far);
        // (3) The entry-point map claims 2^27 buckets.
        let buckets = m.image.buckets;
        w.mem.ptr(buckets, 1 << 27);
        let (t, d) = w.into_parts();
        let en = enumerate_code(&t, &d).unwrap();
        let sites: Vec<ErrorSite> = en.errors.iter().map(|e| e.site).collect();
        assert!(
            en.errors.iter().any(|e| matches!(
                e.error,
                ContractError::LimitExceeded {
                    what: "cyclic code heap list",
                    ..
                }
            )),
            "{c}: {sites:?}"
        );
        assert_eq!(en.stats.heaps.len(), 2, "{c}: each heap once");
        let a = en.stats.heaps.iter().find(|h| h.node == na).unwrap();
        // Heap A's map runs into other allocations and then unmapped memory: the scan
        // stops after a few unreadable chunks, or at its cap.
        assert!(
            a.units_read <= Limits::default().max_map_scan,
            "{c}: {} units",
            a.units_read
        );
        eprintln!(
            "{c}: damaged lists: {} entries, {} errors, heap A {} map units read",
            en.entries.len(),
            en.errors.len(),
            a.units_read
        );
        assert!(en.errors.iter().any(|e| matches!(
            e.error,
            ContractError::LimitExceeded {
                what: "unreadable code heap nibble map" | "code heap nibble map",
                ..
            }
        )));
        assert!(
            en.errors.iter().any(|e| matches!(
                e.error,
                ContractError::LimitExceeded {
                    what: "entry point map walk",
                    limit: Limit::ListLength,
                    cap,
                    ..
                } if cap == Limits::default().max_list_length
            )),
            "{c}: {sites:?}"
        );
        // Every JIT method is still found.
        for e in m.expected.iter().filter(|e| e.jit_type == JitType::Jit) {
            assert!(en.entries.contains(e), "{c}: {e:?}");
        }
    }
}

/// A heap whose map unit holds a start below the heap, and one whose start lies below its
/// map base, are reported; nothing panics on garbage nodes.
#[test]
fn mock_garbage_heap_nodes() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut w = World::new(layout, v);
        let f = w.f;
        let h = w.add_heap(HEAP_A, HEAP_SIZE);
        w.heap_section(h);
        let good = w.add_jit_method(h, &jit(0x100, MD));
        let node = w.heaps[h].node;
        // A second node full of garbage, then a third pointing to unmapped memory.
        let bad = w.mem.alloc(f.node_size, 8);
        for i in 0..f.node_size / 4 {
            w.mem
                .u32(bad + 4 * i, 0xdead_beef ^ (i as u32 * 0x0101_0101));
        }
        w.mem.ptr(bad + f.node_next, node);
        let below = w.mem.alloc(f.node_size, 8);
        w.mem.ptr(below + f.node_next, bad);
        w.mem.ptr(below + f.node_start, HEAP_A);
        w.mem.ptr(below + f.node_end, HEAP_A + 0x100);
        w.mem.ptr(below + f.node_map_base, HEAP_A + 0x1000);
        w.set_all_code_heaps(below);
        let (t, d) = w.into_parts();
        let en = enumerate_code(&t, &d).unwrap();
        assert_eq!(
            en.entries,
            vec![entry(good.start, 0x100, MD, JitType::Jit)],
            "{c}"
        );
        assert!(
            en.errors
                .iter()
                .any(|e| e.site == ErrorSite::CodeHeap { node: below }),
            "{c}"
        );
        check_bounds(&en, &c);
    }
}

// =============================================================================================
// Real .NET 8
// =============================================================================================

/// A perf-map record: start, size, name.
type PerfEntry = (u64, u64, String);

/// Managed perf-map entries split into live ones and stale ones (overlapped by a later
/// entry: the code was freed and the memory reused).
fn perf_entries(dump: Option<&str>) -> (Vec<PerfEntry>, Vec<PerfEntry>) {
    let map = perf_map(&testbed().perf_map_for(dump));
    let managed: Vec<_> = map
        .into_iter()
        .filter(|(_, size, n)| !n.starts_with("stub<") && *size > 0)
        .collect();
    let (mut live, mut stale) = (Vec::new(), Vec::new());
    for (i, e) in managed.iter().enumerate() {
        let overlapped = managed[i + 1..]
            .iter()
            .any(|(s, z, _)| *s < e.0 + e.1 && e.0 < s + z);
        if overlapped {
            stale.push(e.clone());
        } else {
            live.push(e.clone());
        }
    }
    (live, stale)
}

/// The raw perf-map bytes around the first record naming `addr` (the runtime sometimes
/// writes NULs over part of a record).
fn perf_map_context(raw: &[u8], addr: u64) -> Option<String> {
    let needle = format!("{addr:x}");
    let at = raw
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))?;
    let (s, e) = (at.saturating_sub(40), (at + 120).min(raw.len()));
    Some(
        String::from_utf8_lossy(&raw[s..e])
            .escape_debug()
            .to_string(),
    )
}

fn check_net8(rt: &Runtime, what: &str, dump: Option<&str>) {
    let (t, d) = (rt.target(), rt.descriptor());
    // The perf map as it was before the dump (or the walk).
    let (live, _) = perf_entries(dump);

    let start = Instant::now();
    let all = all_code(t, d);
    let first = start.elapsed();
    let start = Instant::now();
    let en = enumerate_code(t, d).unwrap();
    let again = start.elapsed();
    for e in en.errors.iter().take(20) {
        eprintln!("{what}: error: {e}");
    }
    assert!(en.errors.is_empty(), "{what}: {} errors", en.errors.len());
    let all = all.expect("all_code");
    assert_eq!(all, en.entries, "{what}");
    check_bounds(&en, what);

    // The perf map as it is now: methods compiled after the first snapshot are in it.
    let (live_now, stale_now) = perf_entries(None);
    let by_start: BTreeMap<u64, &CodeEntry> = all.iter().map(|e| (e.start, e)).collect();
    let mut failures = Vec::new();
    let mut freed_dynamic_methods = 0;
    let fresh_em = execution_manager(t, d).unwrap();
    for (s, size, name) in &live {
        match by_start.get(s) {
            Some(e) if e.size == *size && e.jit_type == JitType::Jit => {}
            Some(e) => failures.push(format!("{name}: {e:?}, perf map size {size}")),
            None => {
                // Freed after the first snapshot (overlapped now)? A dynamic method (LCG)
                // is collectible: its code can be freed, and its recycled MethodDesc given
                // to a new one, without anything overlapping it; then no code block starts
                // there any more.
                let freed_dynamic = name.contains("dynamicClass::")
                    && fresh_em
                        .code_block(*s)
                        .ok()
                        .flatten()
                        .is_none_or(|b| b.start != *s);
                if freed_dynamic {
                    freed_dynamic_methods += 1;
                } else if !stale_now.iter().any(|(a, _, _)| a == s) {
                    failures.push(format!("{name} at {s:#x} (size {size}) not listed"));
                }
            }
        }
    }
    let jit: Vec<&CodeEntry> = all.iter().filter(|e| e.jit_type == JitType::Jit).collect();
    let r2r: Vec<&CodeEntry> = all.iter().filter(|e| e.jit_type == JitType::R2r).collect();
    let logged: BTreeMap<u64, (u64, &str)> = live_now
        .iter()
        .chain(stale_now.iter())
        .map(|(s, z, n)| (*s, (*z, n.as_str())))
        .collect();
    let in_first: BTreeSet<u64> = live.iter().map(|e| e.0).collect();
    let extras: Vec<&&CodeEntry> = jit
        .iter()
        .filter(|e| !in_first.contains(&e.start))
        .collect();

    // What the extras are. The workload's dynamic methods (LCG) with their MethodDescs, if
    // its manifest lists them: .NET 8 garbles the perf-map record of a method whose name is
    // not ASCII (its address is overwritten and the record runs into the next one).
    let dynamic: BTreeMap<u64, String> = testbed().manifest["type_system"]["dynamic_methods"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| {
                    let md = m["method_desc"].as_str()?;
                    let md = u64::from_str_radix(md.trim_start_matches("0x"), 16).ok()?;
                    Some((md, m["method_name"].as_str()?.to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    let raw = std::fs::read(testbed().perf_map_for(None)).unwrap();
    let em = execution_manager(t, d).unwrap();
    let mut extra_kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &extras {
        let b = em.code_block(e.start).unwrap().expect("extra resolves");
        assert_eq!((b.start, b.method_desc), (e.start, e.method_desc), "{what}");
        let kind = match logged.get(&e.start) {
            Some((size, _)) if *size == e.size => "logged after the first snapshot",
            Some(_) => "logged after the first snapshot, other size",
            None => match perf_map_context(&raw, e.start) {
                Some(ctx) => {
                    eprintln!("{what}: extra {e:x?} in a damaged perf-map record: {ctx}");
                    "in a damaged perf-map record"
                }
                None => match dynamic.get(&e.method_desc) {
                    Some(name) if !name.is_ascii() => {
                        eprintln!("{what}: extra {e:x?} is the dynamic method {name}");
                        "dynamic method with a non-ASCII name (garbled perf-map record)"
                    }
                    _ => {
                        eprintln!("{what}: extra {e:x?} never logged");
                        "never logged"
                    }
                },
            },
        };
        *extra_kinds.entry(kind).or_default() += 1;
    }

    // ReadyToRun entries: per image, and each agrees with a fresh lookup.
    let sections = all_range_sections(t, d).unwrap();
    let files = t.mapped_files();
    let mut per_image: BTreeMap<String, usize> = BTreeMap::new();
    let fresh = execution_manager(t, d).unwrap();
    let mut split = 0;
    for e in &r2r {
        let b = fresh
            .code_block(e.start)
            .unwrap()
            .expect("r2r entry resolves");
        assert_eq!(
            (b.start, b.method_desc, b.jit_type),
            (e.start, e.method_desc, JitType::R2r),
            "{what}"
        );
        let region = fresh.method_region_info(&b).unwrap();
        assert_eq!(region.hot_size, e.size, "{what}");
        assert_eq!(
            (region.cold_start, region.cold_size),
            (e.cold_start, e.cold_size)
        );
        split += usize::from(e.cold_start.is_some());
        let section = sections.iter().find(|s| s.contains(e.start)).unwrap();
        let name = files
            .iter()
            .find(|f| f.start <= section.range_begin && section.range_begin < f.end)
            .and_then(|f| f.path.file_name())
            .map_or("?".to_string(), |n| n.to_string_lossy().into_owned());
        *per_image.entry(name).or_default() += 1;
    }
    let corelib = per_image
        .get("System.Private.CoreLib.dll")
        .copied()
        .unwrap_or(0);
    assert!(corelib > 100, "{what}: {corelib} CoreLib R2R methods");

    // The JIT sizes through the per-method lookup (code_block + method_region_info), for
    // comparison with the direct decode of the walk.
    let em = execution_manager(t, d).unwrap();
    let start = Instant::now();
    for e in &jit {
        let b = em.code_block(e.start).unwrap().expect("jit entry resolves");
        let r = em.method_region_info(&b).unwrap();
        assert_eq!((b.method_desc, r.hot_size), (e.method_desc, e.size));
    }
    let via_lookup = start.elapsed();

    let heaps = &en.stats.heaps;
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    eprintln!(
        "{what} ({profile} build): all_code {first:?} (first call), enumerate_code {again:?} (JIT walk {:?}, R2R walk {:?}); JIT sizes by lookup instead of direct decode: +{via_lookup:?}",
        en.stats.jit_time, en.stats.r2r_time
    );
    eprintln!(
        "{what}: {} entries: {} JIT in {} heaps ({} map units read), {} R2R ({split} split) from {} images ({} maps, {} entry points)",
        all.len(),
        jit.len(),
        heaps.len(),
        heaps.iter().map(|h| h.units_read).sum::<u64>(),
        r2r.len(),
        en.stats.r2r_images,
        en.stats.entry_point_maps,
        en.stats.entry_points
    );
    eprintln!(
        "{what}: perf map: {} live managed entries before, all with the same start and size: {} failures ({freed_dynamic_methods} dynamic methods freed since); {} JIT blocks not in it: {extra_kinds:?}",
        live.len(),
        failures.len(),
        extras.len()
    );
    eprintln!(
        "{what}: stubs in code heaps by kind {:?}, {} incomplete, {} overlaps",
        en.stats.stub_kinds, en.stats.incomplete, en.stats.overlaps
    );
    eprintln!("{what}: R2R methods per image: {per_image:?}");
    assert!(live.len() > 1000, "{what}: {} live entries", live.len());
    assert!(
        failures.is_empty(),
        "{what}: {} failures, first {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert!(
        !extra_kinds.contains_key("never logged"),
        "{what}: JIT blocks the perf map never named"
    );
}

#[test]
fn net8_live() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).unwrap();
    check_net8(&rt, "live", None);
}

#[test]
fn net8_full_dump() {
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).unwrap();
    check_net8(&rt, "full dump", Some("full"));
}

/// The normal and triage dumps leave the JIT code heaps out: the walk reports them as not
/// captured instead of failing or listing garbage.
#[test]
fn net8_small_dump_reports_missing_code() {
    let rt = Runtime::open_dump(testbed().dump("triage"), &OpenOptions::default()).unwrap();
    let en = enumerate_code(rt.target(), rt.descriptor()).unwrap();
    eprintln!(
        "triage dump: {} entries, {} errors",
        en.entries.len(),
        en.errors.len()
    );
    for e in &en.errors {
        eprintln!("triage dump: {e}");
    }
    check_bounds(&en, "triage");
    assert!(en.errors.len() <= cdac::contracts::execution_manager::enumerate::MAX_ERRORS);
}
