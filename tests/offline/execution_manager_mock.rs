//! ExecutionManager (versions 1 and 2) over mock target memory.
//!
//! Reproduces the scenarios of the upstream cDAC tests in
//! `src/native/managed/cdac/tests/ExecutionManager/` — `ExecutionManagerTests.cs`,
//! `HashMapTests.cs`, `HotColdLookupTests.cs`, `RuntimeFunctionTests.cs` — for both contract
//! versions (each with the nibble map of its version) and over every `DataLayout`, adapted
//! to x64 formats where upstream uses other targets (WebAssembly funclet, GC-info, debug-info
//! and exception-clause scenarios). On top of those: stub blocks, range lists, sections
//! being deleted, JIT funclets and clauses, debug-info flag bytes (an unreadable setting
//! too), ReadyToRun thunks, unused methods, hot/cold splits with hot and cold funclets,
//! composite images, GCInfo versions, contract versions, the cache of resolved methods,
//! damaged input of every structure, and a property test that fills structures with random
//! bytes.
//!
//! The memory and the descriptor are built by `em_mock` from its own field table and
//! encoders (see there).

use crate::em_mock;

use cdac::contracts::execution_manager::exception_clauses::{ClauseKind, ExceptionClause};
use cdac::contracts::execution_manager::{
    execution_manager, hash_map, CodeBlock, ExecutionManager, JitType, RegionInfo,
};
use cdac::contracts::ContractError;
use cdac::descriptor::DataDescriptor;
use cdac::limits::{Limit, Limits};
use cdac::memory::{DataLayout, Target};
use em_mock::*;
use proptest::prelude::*;

const VERSIONS: [u64; 2] = [1, 2];

/// Upstream's arbitrary code range and MethodDesc values.
const CODE_START: u64 = 0x0a0a_0000;
const CODE_SIZE: u64 = 0xc000;
const MD: u64 = 0x0101_aaa0;
const MD2: u64 = 0x0201_aaa0;
const MD3: u64 = 0x0301_aaa0;

/// Every (layout, contract version) pair.
fn cases() -> impl Iterator<Item = (DataLayout, u64)> {
    DataLayout::ALL
        .into_iter()
        .flat_map(|l| VERSIONS.into_iter().map(move |v| (l, v)))
}

fn ctx(layout: DataLayout, version: u64) -> String {
    format!(
        "{}-bit {:?}, contract v{version}",
        layout.pointer_size * 8,
        layout.endian
    )
}

fn open<'a>(t: &'a Target, d: &'a DataDescriptor) -> Box<dyn ExecutionManager + 'a> {
    execution_manager(t, d).expect("ExecutionManager contract")
}

fn block(em: &dyn ExecutionManager, ip: u64, c: &str) -> CodeBlock {
    match em.code_block(ip) {
        Ok(Some(b)) => b,
        other => panic!("{c}: code_block({ip:#x}) = {other:?}, expected a method"),
    }
}

fn none(em: &dyn ExecutionManager, ip: u64, c: &str) {
    match em.code_block(ip) {
        Ok(None) => {}
        other => panic!("{c}: code_block({ip:#x}) = {other:?}, expected None"),
    }
}

fn is_corrupt<T: std::fmt::Debug>(r: Result<T, ContractError>, c: &str) {
    assert!(
        matches!(r, Err(ContractError::Corrupt { .. })),
        "{c}: expected Corrupt, got {r:?}"
    );
}

fn is_limit<T: std::fmt::Debug>(r: Result<T, ContractError>, c: &str) {
    assert!(
        matches!(r, Err(ContractError::LimitExceeded { .. })),
        "{c}: expected LimitExceeded, got {r:?}"
    );
}

fn is_read<T: std::fmt::Debug>(r: Result<T, ContractError>, c: &str) {
    assert!(
        matches!(r, Err(ContractError::Read(_))),
        "{c}: expected a read error, got {r:?}"
    );
}

/// A world with one code heap at upstream's code range and its range section.
fn jit_world(layout: DataLayout, version: u64) -> (World, usize, u64) {
    let mut w = World::new(layout, version);
    let h = w.add_heap(CODE_START, CODE_SIZE);
    let s = w.heap_section(h);
    (w, h, s)
}

fn method(size: u32, md: u64) -> JitSpec {
    JitSpec {
        size,
        method_desc: md,
        ..JitSpec::default()
    }
}

// =============================================================================================
// ExecutionManagerTests.cs: JIT'ed code
// =============================================================================================

/// Upstream `GetCodeBlockHandle_Null`.
#[test]
fn code_block_null() {
    for (layout, v) in cases() {
        let w = World::new(layout, v);
        let (t, d) = w.into_parts();
        none(&*open(&t, &d), 0, &ctx(layout, v));
    }
}

/// Upstream `GetCodeBlockHandle_NoRangeSections`.
#[test]
fn code_block_no_range_sections() {
    for (layout, v) in cases() {
        let w = World::new(layout, v);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for ip in [CODE_START, 0x1234, 0xffff_fff0] {
            none(&*em, ip, &ctx(layout, v));
        }
    }
}

/// Upstream `GetMethodDesc_OneRangeOneMethod`, plus the rest of the code block (start,
/// relative offset, JIT type, JIT manager, section) and the hot size from the GC info.
#[test]
fn one_range_one_method() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let (mut w, h, s) = jit_world(layout, v);
        let m = w.add_jit_method(h, &method(0x450, MD));
        let ee = w.ee_jit_manager;
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        assert_eq!(em.version(), v);
        for ip in [m.start, m.start + 0x450 / 2, m.start + 0x450 - 1] {
            let b = block(&*em, ip, &c);
            assert_eq!(b.ip, ip, "{c}");
            assert_eq!(b.method_desc, MD, "{c}");
            assert_eq!(b.start, m.start, "{c}");
            assert_eq!(b.relative_offset, ip - m.start, "{c}");
            assert_eq!(b.jit_type, JitType::Jit, "{c}");
            assert_eq!(b.jit_type.as_str(), "jit", "{c}");
            assert_eq!(b.jit_manager, ee, "{c}");
            assert_eq!(b.section.address, s, "{c}");
            assert_eq!(
                em.method_region_info(&b).expect("region"),
                RegionInfo {
                    hot_size: 0x450,
                    cold_start: None,
                    cold_size: 0
                },
                "{c}"
            );
            let gc = em.gc_info(&b).expect("gc info");
            assert_eq!((gc.address, gc.version), (m.gc_info, 4), "{c}");
        }
        // Before the method, in the heap: nothing starts there.
        none(&*em, CODE_START, &c);
    }
}

/// Upstream `GetCodeBlockHandle_OneRangeZeroMethod`.
#[test]
fn one_range_zero_methods() {
    for (layout, v) in cases() {
        let (w, _, _) = jit_world(layout, v);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for ip in [
            CODE_START,
            CODE_START + CODE_SIZE / 2,
            CODE_START + CODE_SIZE - 1,
        ] {
            none(&*em, ip, &ctx(layout, v));
        }
    }
}

/// Upstream `GetUnwindInfoBaseAddress_OneRangeOneMethod`.
#[test]
fn unwind_info_base_address_jit() {
    for (layout, v) in cases() {
        let (mut w, h, _) = jit_world(layout, v);
        let m = w.add_jit_method(h, &method(0x450, MD));
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        let b = block(&*em, m.start, &ctx(layout, v));
        assert_eq!(em.unwind_info_base_address(&b), CODE_START);
    }
}

/// Upstream `GetMethodDesc_CollectibleFragmentNext`: the mapped head fragment has an empty
/// range and a `Next` carrying the collectible bit; the tail, not in the map, covers the code.
#[test]
fn collectible_fragment_next() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut w = World::new(layout, v);
        let h = w.add_heap(CODE_START, CODE_SIZE);
        let m = w.add_jit_method(h, &method(0x450, MD));
        let node = w.heaps[h].node;
        let ee = w.ee_jit_manager;
        let section = w.write_section(
            CODE_START,
            CODE_START + CODE_SIZE,
            FLAG_CODE_HEAP,
            ee,
            node,
            0,
            0,
        );
        let f = w.f;
        let tail = w.mem.alloc(f.frag_size, f.ps);
        w.mem.ptr(tail + f.frag_begin, CODE_START);
        w.mem.ptr(tail + f.frag_end, CODE_START + CODE_SIZE);
        w.mem.ptr(tail + f.frag_section, section);
        let chunk = w.chunk();
        let mut at = CODE_START & !(chunk - 1);
        while at < CODE_START + CODE_SIZE {
            let slot = w.leaf_slot(at);
            let head = w.mem.alloc(f.frag_size, f.ps);
            w.mem.ptr(head + f.frag_section, section);
            w.mem.ptr(head + f.frag_next, tail | 1);
            w.mem.ptr(slot, head);
            at += chunk;
        }
        let (t, d) = w.into_parts();
        let b = block(&*open(&t, &d), m.start, &c);
        assert_eq!(b.method_desc, MD, "{c}");
    }
}

/// Upstream `GetEEJitManagerInfo_ReturnsManagerAddress` and `_WithCodeHeaps`, and the heap
/// list of a real heap.
#[test]
fn ee_jit_manager_info() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        for heaps in [0u64, 0x0099_aa00, u64::MAX] {
            let mut w = World::new(layout, v);
            let expected = match heaps {
                u64::MAX => {
                    let h = w.add_heap(CODE_START, CODE_SIZE);
                    w.heaps[h].node
                }
                other => other,
            };
            w.set_all_code_heaps(expected);
            let ee = w.ee_jit_manager;
            let (t, d) = w.into_parts();
            let info = open(&t, &d).ee_jit_manager_info().expect("info");
            assert_eq!(info.address, ee, "{c}");
            assert_eq!(info.code_type, 0, "{c}");
            assert_eq!(info.heap_list, expected, "{c}");
        }
    }
}

/// Upstream `GetStubKind_CodeHeapStubs` and `GetStubKind_ManagedCode`: code-heap blocks
/// whose header slot holds a stub kind (up to `StubCodeBlockLast`, compared by value) are no
/// method; a real method next to them is.
#[test]
fn stub_code_blocks_are_not_methods() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let (mut w, h, _) = jit_world(layout, v);
        let kinds = [0u64, 1, 3, 10, 11, STUB_CODE_BLOCK_LAST];
        let stubs: Vec<u64> = kinds.iter().map(|&k| w.add_stub(h, 0x20, k)).collect();
        let m = w.add_jit_method(h, &method(0x100, MD));
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for (s, k) in stubs.iter().zip(kinds) {
            none(&*em, *s, &format!("{c}, stub kind {k}"));
            none(&*em, *s + 0x10, &format!("{c}, stub kind {k}"));
        }
        assert_eq!(block(&*em, m.start + 4, &c).method_desc, MD, "{c}");
    }
}

/// A header slot value just above `StubCodeBlockLast` is a header address: unmapped here.
#[test]
fn header_slot_above_stub_kinds_is_read() {
    for (layout, v) in cases() {
        let (mut w, h, _) = jit_world(layout, v);
        let s = w.add_stub(h, 0x20, STUB_CODE_BLOCK_LAST + 1);
        let (t, d) = w.into_parts();
        is_read(open(&t, &d).code_block(s), &ctx(layout, v));
    }
}

/// Upstream `GetStubKind_RangeListStubs`, `GetCodeBlockHandle_InterpreterPrecode_ReturnsNull`:
/// a stub range list (flag 4) is no method, whatever else it claims; a section with neither
/// a module nor the code-heap flag neither.
#[test]
fn range_lists_are_not_methods() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut w = World::new(layout, v);
        let ee = w.ee_jit_manager;
        let s = w.write_section(0x0b0b_0000, 0x0b0b_4000, FLAG_RANGE_LIST, ee, 0, 0, 0);
        w.map_range(0x0b0b_0000, 0x0b0b_4000, s);
        // A heap with a method whose section also has the range-list flag.
        let h = w.add_heap(CODE_START, CODE_SIZE);
        let m = w.add_jit_method(h, &method(0x100, MD));
        let node = w.heaps[h].node;
        let s2 = w.write_section(
            CODE_START,
            CODE_START + CODE_SIZE,
            FLAG_RANGE_LIST | FLAG_CODE_HEAP,
            ee,
            node,
            0,
            0,
        );
        w.map_range(CODE_START, CODE_START + CODE_SIZE, s2);
        // No flag and no module.
        let s3 = w.write_section(0x0c0c_0000, 0x0c0c_1000, 0, ee, 0, 0, 0);
        w.map_range(0x0c0c_0000, 0x0c0c_1000, s3);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        none(&*em, 0x0b0b_0100, &c);
        none(&*em, m.start, &c);
        none(&*em, 0x0c0c_0100, &c);
    }
}

/// A section whose `NextForDelete` is set is being deleted: not found (JIT and R2R).
#[test]
fn sections_being_deleted() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut w = World::new(layout, v);
        let h = w.add_heap(CODE_START, CODE_SIZE);
        let m = w.add_jit_method(h, &method(0x100, MD));
        let node = w.heaps[h].node;
        let ee = w.ee_jit_manager;
        let s = w.write_section(
            CODE_START,
            CODE_START + CODE_SIZE,
            FLAG_CODE_HEAP,
            ee,
            node,
            0,
            0x0044_4000,
        );
        w.map_range(CODE_START, CODE_START + CODE_SIZE, s);
        let mut spec = R2rSpec::new(vec![Rf::method(0x100, 0x200)], vec![(0x100, MD2)]);
        spec.base = 0x0d0d_0000;
        let img = w.add_r2r(&spec);
        let f = w.f;
        w.mem.ptr(img.section + f.sec_next_for_delete, img.section);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        none(&*em, m.start, &c);
        none(&*em, 0x0d0d_0100, &c);
    }
}

/// JIT funclets: `NumUnwindInfos` > 1; the unwind entry covering the ip picks the funclet.
#[test]
fn jit_funclets() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let (mut w, h, _) = jit_world(layout, v);
        let spec = JitSpec {
            unwind: vec![(0, 0x80), (0x80, 0xc0), (0xc0, 0x100)],
            ..method(0x100, MD)
        };
        let m = w.add_jit_method(h, &spec);
        let plain = w.add_jit_method(h, &method(0x40, MD2));
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for (off, entry, funclet) in [
            (0u64, 0u64, 0u64),
            (0x7f, 0, 0),
            (0x80, 1, 0x80),
            (0x90, 1, 0x80),
            (0xc0, 2, 0xc0),
            (0xff, 2, 0xc0),
        ] {
            let b = block(&*em, m.start + off, &c);
            assert_eq!(b.method_desc, MD, "{c}");
            assert_eq!(b.start, m.start, "{c}");
            assert_eq!(
                em.unwind_info(&b).expect("unwind"),
                Some(m.unwind_infos + 12 * entry),
                "{c} at +{off:#x}"
            );
            assert_eq!(
                em.funclet_start(&b).expect("funclet start"),
                m.start + funclet,
                "{c}"
            );
            assert_eq!(em.is_funclet(&b).expect("is funclet"), funclet != 0, "{c}");
        }
        // No unwind infos: nothing covers the ip; the funclet start is the method start.
        let b = block(&*em, plain.start + 8, &c);
        assert_eq!(em.unwind_info(&b).expect("unwind"), None, "{c}");
        assert_eq!(em.funclet_start(&b).expect("funclet"), plain.start, "{c}");
        assert!(!em.is_funclet(&b).expect("is funclet"), "{c}");
    }
}

fn clause(flags: u32, try_: (u32, u32), handler: (u32, u32), union: u32) -> Clause {
    Clause {
        flags,
        try_start: try_.0,
        try_end: try_.1,
        handler_start: handler.0,
        handler_end: handler.1,
        union,
        type_handle: 0,
    }
}

#[allow(clippy::too_many_arguments)]
fn expected_clause(
    kind: ClauseKind,
    flags: u32,
    try_: (u32, u32),
    handler: (u32, u32),
    filter_offset: Option<u32>,
    class_token: Option<u32>,
    type_handle: Option<u64>,
) -> ExceptionClause {
    ExceptionClause {
        kind,
        flags,
        duplicated: flags & CLAUSE_DUPLICATED != 0,
        try_start: try_.0,
        try_end: try_.1,
        handler_start: handler.0,
        handler_end: handler.1,
        filter_offset,
        class_token,
        type_handle,
    }
}

/// JIT exception clauses: the count in the pointer-sized slot before `EHInfo`, every kind,
/// the duplicated flag, and a cached class with its type handle.
#[test]
fn jit_exception_clauses() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let (mut w, h, _) = jit_world(layout, v);
        let mut cached = clause(CLAUSE_CACHED_CLASS, (0x10, 0x20), (0x60, 0x70), 0);
        cached.type_handle = 0x0076_5430;
        let clauses = vec![
            clause(0, (0x10, 0x20), (0x30, 0x40), 0x0200_0005),
            clause(CLAUSE_FINALLY, (0x10, 0x28), (0x40, 0x48), 0),
            clause(CLAUSE_FAULT, (0x12, 0x18), (0x48, 0x50), 0),
            clause(CLAUSE_FILTER, (0x14, 0x1c), (0x58, 0x60), 0x50),
            clause(
                CLAUSE_FINALLY | CLAUSE_DUPLICATED,
                (0x80, 0x88),
                (0x40, 0x48),
                0,
            ),
            cached,
            // Fault wins over finally and filter; finally over filter.
            clause(
                CLAUSE_FAULT | CLAUSE_FINALLY | CLAUSE_FILTER,
                (1, 2),
                (3, 4),
                9,
            ),
            clause(CLAUSE_FINALLY | CLAUSE_FILTER, (1, 2), (3, 4), 9),
        ];
        let m = w.add_jit_method(
            h,
            &JitSpec {
                eh: Some(clauses),
                ..method(0x100, MD)
            },
        );
        let empty = w.add_jit_method(
            h,
            &JitSpec {
                eh: Some(Vec::new()),
                ..method(0x40, MD2)
            },
        );
        let none_eh = w.add_jit_method(h, &method(0x40, MD3));
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        let got = em
            .exception_clauses(&block(&*em, m.start + 0x30, &c))
            .expect("clauses");
        let want = vec![
            expected_clause(
                ClauseKind::Typed,
                0,
                (0x10, 0x20),
                (0x30, 0x40),
                None,
                Some(0x0200_0005),
                None,
            ),
            expected_clause(
                ClauseKind::Finally,
                CLAUSE_FINALLY,
                (0x10, 0x28),
                (0x40, 0x48),
                None,
                None,
                None,
            ),
            expected_clause(
                ClauseKind::Fault,
                CLAUSE_FAULT,
                (0x12, 0x18),
                (0x48, 0x50),
                None,
                None,
                None,
            ),
            expected_clause(
                ClauseKind::Filter,
                CLAUSE_FILTER,
                (0x14, 0x1c),
                (0x58, 0x60),
                Some(0x50),
                None,
                None,
            ),
            expected_clause(
                ClauseKind::Finally,
                CLAUSE_FINALLY | CLAUSE_DUPLICATED,
                (0x80, 0x88),
                (0x40, 0x48),
                None,
                None,
                None,
            ),
            expected_clause(
                ClauseKind::Typed,
                CLAUSE_CACHED_CLASS,
                (0x10, 0x20),
                (0x60, 0x70),
                None,
                None,
                Some(0x0076_5430),
            ),
            expected_clause(
                ClauseKind::Fault,
                CLAUSE_FAULT | CLAUSE_FINALLY | CLAUSE_FILTER,
                (1, 2),
                (3, 4),
                None,
                None,
                None,
            ),
            expected_clause(
                ClauseKind::Finally,
                CLAUSE_FINALLY | CLAUSE_FILTER,
                (1, 2),
                (3, 4),
                None,
                None,
                None,
            ),
        ];
        assert_eq!(got, want, "{c}");
        assert!(got[4].duplicated && !got[1].duplicated, "{c}");
        let b = block(&*em, empty.start, &c);
        assert_eq!(em.exception_clauses(&b).expect("clauses"), vec![], "{c}");
        let b = block(&*em, none_eh.start, &c);
        assert_eq!(em.exception_clauses(&b).expect("clauses"), vec![], "{c}");
    }
}

/// Debug info: the header's pointer; a flag byte leads the blob when the EEJitManager stores
/// rich debug info or when `FeatureOnStackReplacement` is set.
#[test]
fn jit_debug_info_flag_byte() {
    // (rich field present, rich value, OSR global, expected)
    let combos = [
        (true, 0u8, None, false),
        (true, 1, None, true),
        (false, 0, None, false),
        (true, 0, Some(1u64), true),
        (true, 0, Some(0), false),
        (false, 0, Some(1), true),
        (true, 1, Some(0), true),
    ];
    for (layout, v) in cases() {
        for (field, rich, osr, want) in combos {
            let c = format!(
                "{} rich field {field} = {rich}, OSR {osr:?}",
                ctx(layout, v)
            );
            let (mut w, h, _) = jit_world(layout, v);
            w.opts.rich_field = field;
            w.opts.osr = osr;
            w.set_store_rich_debug_info(rich);
            let m = w.add_jit_method(
                h,
                &JitSpec {
                    debug_info: 0x0055_6670,
                    ..method(0x80, MD)
                },
            );
            let (t, d) = w.into_parts();
            let em = open(&t, &d);
            let di = em
                .debug_info(&block(&*em, m.start, &c))
                .expect("debug info");
            assert_eq!(di.address, 0x0055_6670, "{c}");
            assert_eq!(di.has_flag_byte.ok(), Some(want), "{c}");
        }
    }
}

/// A JIT code heap whose range section names a JIT manager in unmapped memory (the gap
/// after the real EEJitManager), so that its `StoreRichDebugInfo` byte cannot be read.
fn jit_world_unreadable_manager(layout: DataLayout, version: u64) -> (World, usize) {
    let mut w = World::new(layout, version);
    let h = w.add_heap(CODE_START, CODE_SIZE);
    let f = w.f;
    let manager = w.ee_jit_manager + f.eejm_size;
    assert!(!w.mem.is_mapped(manager + f.eejm_rich));
    let node = w.heaps[h].node;
    let s = w.write_section(
        CODE_START,
        CODE_START + CODE_SIZE,
        FLAG_CODE_HEAP,
        manager,
        node,
        0,
        0,
    );
    w.map_range(CODE_START, CODE_START + CODE_SIZE, s);
    (w, h)
}

/// Debug info when the EEJitManager's `StoreRichDebugInfo` byte cannot be read: the pointer
/// is still returned, with the read error in place of the flag's answer; with on-stack
/// replacement the flag byte is known without the setting, and a descriptor without the
/// setting does not read it.
#[test]
fn jit_debug_info_flag_byte_unreadable() {
    // (rich field present, OSR global, expected flag: None for a read error)
    let combos = [
        (true, None, None),
        (true, Some(0u64), None),
        (true, Some(1), Some(true)),
        (false, None, Some(false)),
        (false, Some(1), Some(true)),
    ];
    for (layout, v) in cases() {
        for (field, osr, want) in combos {
            let c = format!("{} rich field {field}, OSR {osr:?}", ctx(layout, v));
            let (mut w, h) = jit_world_unreadable_manager(layout, v);
            w.opts.rich_field = field;
            w.opts.osr = osr;
            let m = w.add_jit_method(
                h,
                &JitSpec {
                    debug_info: 0x0055_6670,
                    ..method(0x80, MD)
                },
            );
            let (t, d) = w.into_parts();
            let em = open(&t, &d);
            let b = block(&*em, m.start + 0x10, &c);
            assert_eq!(b.method_desc, MD, "{c}");
            let di = em.debug_info(&b).expect("debug info");
            assert_eq!(di.address, 0x0055_6670, "{c}");
            match want {
                Some(flag) => assert_eq!(di.has_flag_byte.ok(), Some(flag), "{c}"),
                None => is_read(di.has_flag_byte, &c),
            }
        }
    }
}

/// Nibble-encodes numbers: 3 bits a nibble, most significant group first, bit 3 set on
/// every nibble but a number's last; a byte's low nibble first.
fn nibble_bytes(values: &[u32]) -> Vec<u8> {
    let mut ns = Vec::new();
    for &v in values {
        let mut groups = vec![(v & 7) as u8];
        let mut rest = v >> 3;
        while rest != 0 {
            groups.push((rest & 7) as u8 | 8);
            rest >>= 3;
        }
        ns.extend(groups.into_iter().rev());
    }
    ns.chunks(2)
        .map(|p| p[0] | (p.get(1).copied().unwrap_or(0) << 4))
        .collect()
}

/// The native-to-IL map when whether the blob has a flag byte is unknown (the setting is
/// unreadable, no on-stack replacement): a blob with a flag byte of 0 decodes as one (read
/// without it, its flag byte would be an empty header); a blob without one whose first
/// byte is above 3, or whose reading with a flag byte fails, decodes without. The same
/// blobs with the flag's presence known decode alike.
#[test]
fn jit_native_map_with_unknown_flag_byte() {
    use cdac::contracts::debug_info::{
        native_map, BoundsEncoding, DebugInfoFormat, IlOffset, OffsetMapping, SourceType,
    };
    let format = DebugInfoFormat {
        encoding: BoundsEncoding::Nibble,
        patchpoint_info_size: 40,
        patchpoint_local_count_offset: 16,
        chunked_header: false,
    };
    // (native delta, IL offset + 3, source flags): the prolog at 0, IL 0x12 at 4 (a
    // sequence point), IL 0x20 at 0x30 (a call site).
    let entries: [[u32; 3]; 3] = [[0, 1, 0], [4, 0x12 + 3, 1], [0x2c, 0x20 + 3, 4]];
    let bounds: Vec<u8> = nibble_bytes(
        &std::iter::once(entries.len() as u32)
            .chain(entries.iter().flatten().copied())
            .collect::<Vec<_>>(),
    );
    let want = vec![
        OffsetMapping {
            native_offset: 0,
            il_offset: IlOffset::Prolog,
            source: SourceType::default(),
        },
        OffsetMapping {
            native_offset: 4,
            il_offset: IlOffset::Il(0x12),
            source: SourceType {
                sequence_point: true,
                ..SourceType::default()
            },
        },
        OffsetMapping {
            native_offset: 0x30,
            il_offset: IlOffset::Il(0x20),
            source: SourceType {
                call_site: true,
                ..SourceType::default()
            },
        },
    ];
    // One entry: IL 1 at 0.
    let one_bounds = nibble_bytes(&[1, 0, 1 + 3, 0]);
    let one_want = vec![OffsetMapping {
        native_offset: 0,
        il_offset: IlOffset::Il(1),
        source: SourceType::default(),
    }];
    // (blob, has a flag byte, expected map)
    let header = |b: &[u8]| nibble_bytes(&[b.len() as u32, 0]);
    let blobs = [
        (
            [vec![0u8], header(&bounds), bounds.clone()].concat(),
            true,
            &want,
        ),
        ([header(&bounds), bounds.clone()].concat(), false, &want),
        // First byte 2: as a flag byte it announces rich debug info of a length read
        // from the bounds, which runs out of the blob's memory.
        (
            [header(&one_bounds), one_bounds.clone()].concat(),
            false,
            &one_want,
        ),
    ];
    for (layout, v) in cases() {
        for (i, (blob, flagged, expected)) in blobs.iter().enumerate() {
            let c = format!("{} blob {i}", ctx(layout, v));
            if i == 1 {
                assert!(blob[0] > 3, "{c}: {blob:x?}");
            }
            if i == 2 {
                assert_eq!(blob[0], 2, "{c}: {blob:x?}");
            }
            for unknown in [true, false] {
                let pc = format!("{c}, flag known: {}", !unknown);
                let (mut w, h) = if unknown {
                    jit_world_unreadable_manager(layout, v)
                } else {
                    let (w, h, _) = jit_world(layout, v);
                    (w, h)
                };
                if !unknown {
                    w.set_store_rich_debug_info(u8::from(*flagged));
                }
                let at = w.mem.alloc(blob.len() as u64, 8);
                w.mem.bytes(at, blob);
                let m = w.add_jit_method(
                    h,
                    &JitSpec {
                        debug_info: at,
                        ..method(0x80, MD)
                    },
                );
                let (t, d) = w.into_parts();
                let em = open(&t, &d);
                let b = block(&*em, m.start, &pc);
                let di = em.debug_info(&b).expect("debug info");
                assert_eq!(di.address, at, "{pc}");
                assert_eq!(di.has_flag_byte.is_err(), unknown, "{pc}");
                let map = native_map(&t, &*em, &b, &format).expect("native map");
                assert_eq!(&map, *expected, "{pc}");
            }
        }
    }
}

/// GC info of JIT'ed code: the header's pointer with the `GCInfoVersion` global; the hot
/// size decodes with that version (v2 headers carry ReturnKind bits, v4 ones do not).
#[test]
fn jit_gc_info_versions() {
    for (layout, v) in cases() {
        for gc_version in [2u32, 3, 4] {
            for size in [0x18u32, 0xff, 0x100, 0x450, 0x1_2345] {
                let c = format!("{} GCInfo v{gc_version} size {size:#x}", ctx(layout, v));
                let mut w = World::new(layout, v);
                w.opts.gc_version = gc_version;
                let h = w.add_heap(CODE_START, 0x2_0000);
                w.heap_section(h);
                let m = w.add_jit_method(h, &method(size, MD));
                let (t, d) = w.into_parts();
                let em = open(&t, &d);
                let b = block(&*em, m.start + u64::from(size) - 1, &c);
                let gc = em.gc_info(&b).expect("gc");
                assert_eq!((gc.address, gc.version), (m.gc_info, gc_version), "{c}");
                assert_eq!(
                    em.method_region_info(&b).expect("region").hot_size,
                    u64::from(size),
                    "{c}"
                );
            }
        }
    }
}

/// Several methods in one heap, each found from its first, middle and last byte (the maps of
/// both versions, methods longer than two map units included).
#[test]
fn many_jit_methods() {
    let sizes = [0x20u32, 0x450, 0x24, 0x1000, 0x30, 0x208, 0x2c, 0x3f0];
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let (mut w, h, _) = jit_world(layout, v);
        let ms: Vec<JitMethod> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| w.add_jit_method(h, &method(s, MD + 0x100 * i as u64)))
            .collect();
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for (i, m) in ms.iter().enumerate() {
            for ip in [m.start, m.start + m.size / 2, m.start + m.size - 1] {
                let b = block(&*em, ip, &c);
                assert_eq!(b.method_desc, MD + 0x100 * i as u64, "{c} method {i}");
                assert_eq!(b.start, m.start, "{c}");
            }
        }
    }
}

/// The nibble map must be the contract version's: a version 2 reader does not find the
/// middle of a long method in a version 1 map (no pointer units), and a version 1 reader
/// rejects version 2 pointer units as corrupt nibbles.
#[test]
fn nibble_map_follows_contract_version() {
    for layout in DataLayout::ALL {
        for (written, read) in [(1u64, 2u64), (2, 1)] {
            let c = format!("{}, map v{written} read as v{read}", ctx(layout, read));
            let (mut w, h, _) = jit_world(layout, written);
            let m = w.add_jit_method(h, &method(0x800, MD));
            w.opts = DescOpts::for_version(read);
            let (t, d) = w.into_parts();
            // A fresh ExecutionManager for each lookup: a resolved method's range would
            // otherwise be answered from the cache.
            assert_eq!(
                block(&*open(&t, &d), m.start + 0x10, &c).start,
                m.start,
                "{c}"
            );
            let r = open(&t, &d).code_block(m.start + 0x600);
            if read == 2 {
                assert!(matches!(r, Ok(None)), "{c}: {r:?}");
            } else {
                is_corrupt(r, &c);
            }
        }
    }
}

// =============================================================================================
// ExecutionManagerTests.cs: ReadyToRun code
// =============================================================================================

fn r2r_world(layout: DataLayout, version: u64, spec: &R2rSpec) -> (World, R2rImage) {
    let mut w = World::new(layout, version);
    let img = w.add_r2r(spec);
    (w, img)
}

/// Upstream `GetCodeBlockHandle_R2R_NoRuntimeFunctionMatch`.
#[test]
fn r2r_no_runtime_function_match() {
    for (layout, v) in cases() {
        let spec = R2rSpec::new(vec![Rf::method(0x100, 0x200)], vec![]);
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        none(&*em, img.base + 0x100 - 1, &ctx(layout, v));
        none(&*em, img.base, &ctx(layout, v));
    }
}

/// Upstream `GetMethodDesc_R2R_OneRuntimeFunction` (the function covers both addresses).
#[test]
fn r2r_one_runtime_function() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let spec = R2rSpec::new(vec![Rf::method(0x100, 0x300)], vec![(0x100, MD)]);
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for ip in [img.base + 0x100, img.base + 0x200] {
            let b = block(&*em, ip, &c);
            assert_eq!(b.method_desc, MD, "{c}");
            assert_eq!(b.start, img.base + 0x100, "{c}");
            assert_eq!(b.relative_offset, ip - img.base - 0x100, "{c}");
            assert_eq!(b.jit_type, JitType::R2r, "{c}");
            assert_eq!(b.jit_type.as_str(), "r2r", "{c}");
            assert_eq!(b.jit_manager, R2R_JIT_MANAGER, "{c}");
            assert_eq!(b.section.address, img.section, "{c}");
            assert_eq!(b.section.r2r_module, img.module, "{c}");
            assert_eq!(em.unwind_info(&b).expect("unwind"), Some(img.rf(0)), "{c}");
            assert_eq!(
                em.method_region_info(&b).expect("region"),
                RegionInfo {
                    hot_size: 0x200,
                    cold_start: None,
                    cold_size: 0
                },
                "{c}"
            );
            // The image's DebugInfo section (8 zero bytes) is an empty NativeArray: no
            // element for the method, so no debug info.
            let di = em.debug_info(&b).expect("debug info");
            assert_eq!((di.address, di.has_flag_byte.ok()), (0, Some(false)), "{c}");
        }
    }
}

/// Upstream `GetMethodDesc_R2R_MultipleRuntimeFunctions`, with functions long enough to
/// cover the addresses upstream probes (upstream's mock functions are 0x100 bytes and its
/// reader ignores function ends; see `r2r_addresses_between_functions`).
#[test]
fn r2r_multiple_runtime_functions() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let spec = R2rSpec::new(
            vec![Rf::method(0x100, 0xc00), Rf::method(0xc00, 0x1900)],
            vec![(0x100, MD), (0xc00, MD2)],
        );
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for (rva, md) in [(0x100u64, MD), (0x680, MD), (0xc00, MD2), (0x1800, MD2)] {
            assert_eq!(
                block(&*em, img.base + rva, &c).method_desc,
                md,
                "{c} {rva:#x}"
            );
        }
    }
}

/// Upstream `GetMethodDesc_R2R_MultipleRuntimeFunctions` with upstream's function lengths
/// (0x100): the addresses it probes lie after the functions' ends, which cdac answers with
/// "no method" (contract spec, ReadyToRun step 3) where upstream returns the previous method.
/// Also RuntimeFunctionTests' `GetFunctionLength`: the x64 length is End − Begin.
#[test]
fn r2r_addresses_between_functions() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let spec = R2rSpec::new(
            vec![Rf::method(0x100, 0x200), Rf::method(0xc00, 0xd00)],
            vec![(0x100, MD), (0xc00, MD2)],
        );
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        assert_eq!(block(&*em, img.base + 0x1ff, &c).method_desc, MD, "{c}");
        assert_eq!(block(&*em, img.base + 0xcff, &c).method_desc, MD2, "{c}");
        for rva in [0x200u64, 0x680, 0xbff, 0xd00, 0x1800] {
            none(&*em, img.base + rva, &format!("{c} {rva:#x}"));
        }
    }
}

/// RuntimeFunctionTests `TryGetRuntimeFunctionIndexForAddress` (each entry's start finds
/// that entry), `_NoMatch`, and `GetFunctionLength` (lengths min(next − begin, 0x100)).
#[test]
fn r2r_runtime_function_index_for_address() {
    let begins = [0x100u32, 0x1f0, 0x1000, 0x2000, 0xa000];
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let fns: Vec<Rf> = begins
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let len = begins.get(i + 1).map_or(0x100, |&n| (n - b).min(0x100));
                Rf::method(b, b + len)
            })
            .collect();
        let entries = begins
            .iter()
            .enumerate()
            .map(|(i, &b)| (b, MD + 0x10 * i as u64))
            .collect();
        let mut spec = R2rSpec::new(fns.clone(), entries);
        spec.size = 0x10000;
        spec.unwind_rva = 0xb000;
        spec.eh_rva = 0xc000;
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        none(&*em, img.base + 0xff, &c);
        for (i, rf) in fns.iter().enumerate() {
            let b = block(&*em, img.base + u64::from(rf.begin), &c);
            assert_eq!(b.method_desc, MD + 0x10 * i as u64, "{c}");
            assert_eq!(em.unwind_info(&b).expect("unwind"), Some(img.rf(i)), "{c}");
            let last = block(&*em, img.base + u64::from(rf.end) - 1, &c);
            assert_eq!(last.method_desc, MD + 0x10 * i as u64, "{c}");
            // One past the end: the next function when adjacent, else nothing.
            let after = em.code_block(img.base + u64::from(rf.end)).expect("lookup");
            let adjacent = fns.get(i + 1).is_some_and(|n| n.begin == rf.end);
            assert_eq!(after.is_some(), adjacent, "{c} after function {i}");
        }
    }
}

/// Binary-then-linear search over a larger table: every function from its first and last
/// byte, the gaps between them, and each function's RUNTIME_FUNCTION.
#[test]
fn r2r_many_runtime_functions() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let fns: Vec<Rf> = (0..60u32)
            .map(|i| Rf::method(0x100 + 0x80 * i, 0x100 + 0x80 * i + 0x40 + i % 3 * 8))
            .collect();
        let entries = fns
            .iter()
            .enumerate()
            .map(|(i, f)| (f.begin, MD + 8 * i as u64))
            .collect();
        let mut spec = R2rSpec::new(fns.clone(), entries);
        spec.size = 0x20000;
        spec.unwind_rva = 0x4000;
        spec.eh_rva = 0x10000;
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for (i, f) in fns.iter().enumerate() {
            for rva in [f.begin, f.end - 1] {
                let b = block(&*em, img.base + u64::from(rva), &c);
                assert_eq!(b.method_desc, MD + 8 * i as u64, "{c} function {i}");
                assert_eq!(em.unwind_info(&b).expect("unwind"), Some(img.rf(i)), "{c}");
            }
            none(&*em, img.base + u64::from(f.end), &c);
        }
    }
}

/// Upstream `GetUnwindInfoBaseAddress_R2R_ManyRuntimeFunction`: the image base.
#[test]
fn r2r_unwind_info_base_address() {
    for (layout, v) in cases() {
        let spec = R2rSpec::new(vec![Rf::method(0x100, 0x200)], vec![(0x100, MD)]);
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        let b = block(&*em, img.base + 0x100, &ctx(layout, v));
        assert_eq!(em.unwind_info_base_address(&b), img.base);
    }
}

/// The layout of upstream `GetMethodDesc_R2R_HotColdBlock`: functions at 0x100..0x500 step
/// 0x100, hot/cold map [3, 0, 4, 1] (method A: hot 0, cold 3; method B: hot 1, cold 4).
/// Function 2, with no entry point and not in the map, lies between B's hot part and the
/// cold parts: B's hot funclet. Upstream's mock has no GC info; here each method's GC-info
/// code length spans all its code, as in a real image (A: 0x100 hot + 0x100 cold; B: 0x100
/// main body + 0x100 funclet + 0x100 cold).
fn hot_cold_spec() -> R2rSpec {
    let mut spec = R2rSpec::new(
        vec![
            Rf::method_len(0x100, 0x200, 0x200),
            Rf::method_len(0x200, 0x300, 0x300),
            Rf::part(0x300, 0x400),
            Rf::part(0x400, 0x500),
            Rf::part(0x500, 0x600),
        ],
        vec![(0x100, MD), (0x200, MD2)],
    );
    spec.hot_cold = vec![3, 0, 4, 1];
    spec
}

/// Upstream `GetMethodDesc_R2R_HotColdBlock`: the same probes (each map entry's function, at
/// +0 and +8) and MethodDescs; plus what upstream leaves out: the start (the hot start), the
/// relative offset (hot size + offset in the cold part), the region info, the unwind entry,
/// the funclet start and the GC info; and function 2, B's hot funclet between its main body
/// and the cold parts, which resolves to B as a funclet with B's cold part.
#[test]
fn r2r_hot_cold_block() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let spec = hot_cold_spec();
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        let base = img.base;
        // Per method: MethodDesc, hot index, region.
        let methods = [
            (
                MD,
                0usize,
                RegionInfo {
                    hot_size: 0x100,
                    cold_start: Some(base + 0x400),
                    cold_size: 0x100,
                },
            ),
            (
                MD2,
                1,
                RegionInfo {
                    hot_size: 0x200,
                    cold_start: Some(base + 0x500),
                    cold_size: 0x100,
                },
            ),
        ];
        // Upstream's loop: runtime function hotColdMap[i] belongs to method i / 2.
        for (i, &index) in spec.hot_cold.iter().enumerate() {
            let (md, hot, region) = methods[i / 2];
            let entry = base + u64::from(spec.functions[index as usize].begin);
            for off in [0u64, 8] {
                let ip = entry + off;
                let pc = format!("{c} ip {ip:#x}");
                let b = block(&*em, ip, &pc);
                assert_eq!(b.method_desc, md, "{pc}");
                let start = base + u64::from(spec.functions[hot].begin);
                assert_eq!(b.start, start, "{pc}");
                let cold = index >= 3;
                let want_offset = if cold {
                    region.hot_size + (ip - region.cold_start.expect("split"))
                } else {
                    ip - start
                };
                assert_eq!(b.relative_offset, want_offset, "{pc}");
                assert_eq!(em.method_region_info(&b).expect("region"), region, "{pc}");
                assert_eq!(
                    em.unwind_info(&b).expect("unwind"),
                    Some(img.rf(index as usize)),
                    "{pc}"
                );
                assert_eq!(em.funclet_start(&b).expect("funclet"), entry, "{pc}");
                if !cold {
                    assert!(!em.is_funclet(&b).expect("is funclet"), "{pc}");
                }
                assert_eq!(em.gc_info(&b).expect("gc").address, img.gc[hot], "{pc}");
            }
        }
        // Function 2: B's hot funclet (upstream never probes it).
        let (md, hot, region) = methods[1];
        for rva in [0x300u64, 0x308, 0x3ff] {
            let ip = base + rva;
            let pc = format!("{c} funclet ip {ip:#x}");
            let b = block(&*em, ip, &pc);
            assert_eq!(b.method_desc, md, "{pc}");
            assert_eq!(b.start, base + 0x200, "{pc}");
            assert_eq!(b.relative_offset, rva - 0x200, "{pc}");
            assert!(em.is_funclet(&b).expect("is funclet"), "{pc}");
            assert_eq!(em.funclet_start(&b).expect("funclet"), base + 0x300, "{pc}");
            assert_eq!(em.unwind_info(&b).expect("unwind"), Some(img.rf(2)), "{pc}");
            assert_eq!(em.method_region_info(&b).expect("region"), region, "{pc}");
            assert_eq!(em.gc_info(&b).expect("gc").address, img.gc[hot], "{pc}");
        }
    }
}

/// Upstream's hot/cold layout with function 2 an unused method (its own GC info, no entry
/// point yet) instead of B's funclet, and B's GC-info code length counting only B's main
/// body and cold part (0x200). An address in it is not attributed to B: the walk-back
/// check compares against B's hot length (code length less the cold part: 0x100, ending
/// where function 2 starts), not the whole code length, which would reach over function 2.
#[test]
fn r2r_unused_method_after_split_method() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut spec = hot_cold_spec();
        spec.functions[1] = Rf::method_len(0x200, 0x300, 0x200);
        spec.functions[2] = Rf::method(0x300, 0x400);
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for rva in [0x300u64, 0x310, 0x3ff] {
            none(&*em, img.base + rva, &c);
        }
        // B itself, hot and cold, still resolves.
        assert_eq!(block(&*em, img.base + 0x2ff, &c).method_desc, MD2, "{c}");
        assert_eq!(block(&*em, img.base + 0x510, &c).method_desc, MD2, "{c}");
    }
}

/// A hot funclet of a split method belongs to the method, cold part included: the funclet
/// block's start, offset, funclet start, unwind entry, GC info and region info are the
/// method's, whether the lookup was fresh or answered from the cache; the method's cold
/// part continues the offsets after the hot code (main body and funclet).
#[test]
fn r2r_hot_funclet_of_split_method() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut spec = R2rSpec::new(
            vec![
                Rf::method_len(0x100, 0x140, 0xa0), // 0: main body of the split method
                Rf::part(0x140, 0x160),             // 1: its hot funclet
                Rf::method(0x200, 0x280),           // 2
                Rf::part(0x400, 0x440),             // 3: its cold part
            ],
            vec![(0x100, MD), (0x200, MD2)],
        );
        spec.hot_cold = vec![3, 0];
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let base = img.base;
        let want = RegionInfo {
            hot_size: 0x60,
            cold_start: Some(base + 0x400),
            cold_size: 0x40,
        };
        let em = open(&t, &d);
        let main = block(&*em, base + 0x110, &c);
        assert_eq!(em.method_region_info(&main).expect("region"), want, "{c}");
        assert!(!em.is_funclet(&main).expect("is funclet"), "{c}");
        let fresh = open(&t, &d);
        let funclet = block(&*fresh, base + 0x150, &c);
        assert_eq!(funclet.method_desc, MD, "{c}");
        assert_eq!(funclet.start, base + 0x100, "{c}");
        assert_eq!(funclet.relative_offset, 0x50, "{c}");
        assert!(fresh.is_funclet(&funclet).expect("is funclet"), "{c}");
        assert_eq!(
            fresh.funclet_start(&funclet).expect("funclet"),
            base + 0x140,
            "{c}"
        );
        assert_eq!(
            fresh.unwind_info(&funclet).expect("unwind"),
            Some(img.rf(1)),
            "{c}"
        );
        assert_eq!(
            fresh.gc_info(&funclet).expect("gc").address,
            img.gc[0],
            "{c}"
        );
        assert_eq!(
            fresh.method_region_info(&funclet).expect("region"),
            want,
            "{c}"
        );
        let warm = block(&*em, base + 0x150, &c);
        assert_eq!(warm, funclet, "{c}");
        // The cold part: offsets continue after the 0x60 bytes of hot code.
        let cold = block(&*fresh, base + 0x410, &c);
        assert_eq!(cold.method_desc, MD, "{c}");
        assert_eq!(cold.start, base + 0x100, "{c}");
        assert_eq!(cold.relative_offset, 0x60 + 0x10, "{c}");
        assert_eq!(
            fresh.funclet_start(&cold).expect("funclet"),
            base + 0x400,
            "{c}"
        );
        assert_eq!(
            fresh.unwind_info(&cold).expect("unwind"),
            Some(img.rf(3)),
            "{c}"
        );
        assert_eq!(
            fresh.method_region_info(&cold).expect("region"),
            want,
            "{c}"
        );
    }
}

/// HotColdLookupTests (`GetHotFunctionIndex`, `_ColdFunclet`, `_EmptyMap`, `_NoEntryInMap`,
/// `TryGetColdFunctionIndex*`) through the contract: cold parts and cold funclets (an index
/// after a pair's cold index and before the next pair's) belong to the pair's hot method;
/// a method not in the map is not split; the cold range runs to the next pair's cold index −
/// 1, or to the last runtime function for the last pair.
#[test]
fn r2r_hot_cold_lookup() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut spec = R2rSpec::new(
            vec![
                Rf::method_len(0x100, 0x180, 0xe0), // 0: A hot (0x80) + cold 0x60
                Rf::method_len(0x200, 0x280, 0xc0), // 1: B hot (0x80) + cold 0x40
                Rf::method(0x300, 0x380),           // 2: D, not split
                Rf::part(0x400, 0x440),             // 3: A cold
                Rf::part(0x440, 0x460),             // 4: A cold funclet
                Rf::part(0x500, 0x540),             // 5: B cold
            ],
            vec![(0x100, MD), (0x200, MD2), (0x300, MD3)],
        );
        spec.hot_cold = vec![3, 0, 5, 1];
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        let base = img.base;
        let a = RegionInfo {
            hot_size: 0x80,
            cold_start: Some(base + 0x400),
            cold_size: 0x60,
        };
        let b_region = RegionInfo {
            hot_size: 0x80,
            cold_start: Some(base + 0x500),
            cold_size: 0x40,
        };
        // (rva, md, start rva, relative offset, region, funclet start rva, rf index)
        let probes = [
            (0x110u64, MD, 0x100u64, 0x10u64, a, 0x100u64, 0usize),
            (0x410, MD, 0x100, 0x80 + 0x10, a, 0x400, 3),
            (0x450, MD, 0x100, 0x80 + 0x50, a, 0x440, 4),
            (0x220, MD2, 0x200, 0x20, b_region, 0x200, 1),
            (0x520, MD2, 0x200, 0x80 + 0x20, b_region, 0x500, 5),
            (
                0x310,
                MD3,
                0x300,
                0x10,
                RegionInfo {
                    hot_size: 0x80,
                    cold_start: None,
                    cold_size: 0,
                },
                0x300,
                2,
            ),
        ];
        for (rva, md, start, rel, region, funclet, index) in probes {
            let pc = format!("{c} rva {rva:#x}");
            let b = block(&*em, base + rva, &pc);
            assert_eq!(b.method_desc, md, "{pc}");
            assert_eq!(b.start, base + start, "{pc}");
            assert_eq!(b.relative_offset, rel, "{pc}");
            assert_eq!(em.method_region_info(&b).expect("region"), region, "{pc}");
            assert_eq!(
                em.funclet_start(&b).expect("funclet"),
                base + funclet,
                "{pc}"
            );
            assert_eq!(
                em.unwind_info(&b).expect("unwind"),
                Some(img.rf(index)),
                "{pc}"
            );
        }
    }
}

/// Funclets follow their method and have no entry-point map entry: the lookup walks back
/// (upstream `GetMethodDesc_R2R_WasmFuncletUsesMaskedBeginAddressAndControllingMethodDesc`,
/// x64 form).
#[test]
fn r2r_funclets_walk_back() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let spec = R2rSpec::new(
            vec![
                Rf::method_len(0x100, 0x120, 0x80),
                Rf::part(0x120, 0x150),
                Rf::part(0x150, 0x180),
                Rf::method(0x200, 0x280),
            ],
            vec![(0x100, MD), (0x200, MD2)],
        );
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        let base = img.base;
        let root = block(&*em, base + 0x100, &c);
        assert_eq!(root.method_desc, MD, "{c}");
        assert!(!em.is_funclet(&root).expect("is funclet"), "{c}");
        assert_eq!(em.funclet_start(&root).expect("f"), base + 0x100, "{c}");
        assert_eq!(em.unwind_info(&root).expect("u"), Some(img.rf(0)), "{c}");
        for (rva, index, funclet) in [(0x122u64, 1usize, 0x120u64), (0x17f, 2, 0x150)] {
            let b = block(&*em, base + rva, &c);
            assert_eq!(b.method_desc, MD, "{c}");
            assert_eq!(b.start, root.start, "{c}");
            assert_eq!(b.relative_offset, rva - 0x100, "{c}");
            assert!(em.is_funclet(&b).expect("is funclet"), "{c}");
            assert_eq!(em.funclet_start(&b).expect("f"), base + funclet, "{c}");
            assert_eq!(em.unwind_info(&b).expect("u"), Some(img.rf(index)), "{c}");
            assert_eq!(em.gc_info(&b).expect("gc").address, img.gc[0], "{c}");
            assert_eq!(
                em.method_region_info(&b).expect("region").hot_size,
                0x80,
                "{c}"
            );
        }
        assert_eq!(block(&*em, base + 0x210, &c).method_desc, MD2, "{c}");
        none(&*em, base + 0x190, &c);
    }
}

/// A method the runtime never used has no map entry: its code is "not known", not the
/// previous method's (and the walk stops at the table's start).
#[test]
fn r2r_unused_method_is_not_known() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let spec = R2rSpec::new(
            vec![
                Rf::method(0x80, 0xa0),   // unused, first in the table
                Rf::method(0x100, 0x180), // A
                Rf::method(0x180, 0x200), // unused, adjacent to A
                Rf::method(0x200, 0x280), // B
            ],
            vec![(0x100, MD), (0x200, MD2)],
        );
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        assert_eq!(block(&*em, img.base + 0x17f, &c).method_desc, MD, "{c}");
        none(&*em, img.base + 0x180, &c);
        none(&*em, img.base + 0x1ff, &c);
        none(&*em, img.base + 0x90, &c);
        assert_eq!(block(&*em, img.base + 0x200, &c).method_desc, MD2, "{c}");
    }
}

/// Upstream `GetStubKind_R2R_MethodCallThunk` / `_OutsideThunkRange`: an address inside the
/// delay-load method-call thunks is no method, even inside a runtime function; one past the
/// thunks is.
#[test]
fn r2r_delay_load_thunks() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut spec = R2rSpec::new(vec![Rf::method(0x2000, 0x2200)], vec![(0x2000, MD)]);
        spec.thunks = Some((0x2000, 0x100));
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for rva in [0x2000u64, 0x2010, 0x20ff] {
            none(&*em, img.base + rva, &c);
        }
        for rva in [0x2100u64, 0x2110] {
            assert_eq!(block(&*em, img.base + rva, &c).method_desc, MD, "{c}");
        }
        // Upstream's form: no runtime functions at all.
        let mut spec = R2rSpec::new(vec![], vec![]);
        spec.thunks = Some((0x2000, 0x100));
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        none(&*em, img.base + 0x2010, &c);
        none(&*em, img.base + 0x2110, &c);
    }
}

/// GC info of ReadyToRun code: right after the unwind blob of the method's main entry
/// (`align_up(4 + 2 × codes + 4, 4)` bytes), version 4 from R2R major 11, else 3 (upstream
/// `GetGCInfo_R2R_WasmVirtualIPUsesLoadedImageBase`, x64 form). The hot size decodes only
/// with the right version (v3 headers carry ReturnKind bits).
#[test]
fn r2r_gc_info_after_unwind_blob() {
    for (layout, v) in cases() {
        for (major, minor) in [
            (2u16, 0u16),
            (9, 1),
            (9, 3),
            (10, 0),
            (11, 0),
            (12, 0),
            (16, 0),
        ] {
            for codes in [0u8, 1, 2, 3, 4, 7] {
                let c = format!("{} R2R {major}.{minor} codes {codes}", ctx(layout, v));
                let mut rf = Rf::method_len(0x100, 0x180, 0x1a3);
                rf.codes = codes;
                let mut spec = R2rSpec::new(vec![rf], vec![(0x100, MD)]);
                spec.major = major;
                spec.minor = minor;
                let (w, img) = r2r_world(layout, v, &spec);
                let (t, d) = w.into_parts();
                let em = open(&t, &d);
                let b = block(&*em, img.base + 0x140, &c);
                let gc = em.gc_info(&b).expect("gc");
                assert_eq!(gc.address, img.unwind[0] + unwind_size(codes), "{c}");
                let expected = match (major, minor) {
                    (11.., _) => 4,
                    (10, _) | (9, 3..) => 3,
                    _ => 2,
                };
                assert_eq!(gc.version, expected, "{c}");
                assert_eq!(
                    em.method_region_info(&b).expect("region").hot_size,
                    0x1a3,
                    "{c}"
                );
            }
        }
    }
}

/// A composite image: the entry-point map is the composite image's (`CompositeInfo`), not
/// the component's own (which holds decoys here).
#[test]
fn r2r_composite_image() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut spec = R2rSpec::new(
            vec![Rf::method(0x100, 0x180), Rf::method(0x200, 0x280)],
            vec![(0x100, MD), (0x200, MD2)],
        );
        spec.composite = true;
        let (w, img) = r2r_world(layout, v, &spec);
        assert_ne!(img.composite_info, img.info);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        assert_eq!(block(&*em, img.base + 0x110, &c).method_desc, MD, "{c}");
        assert_eq!(block(&*em, img.base + 0x210, &c).method_desc, MD2, "{c}");
    }
}

/// A `CompositeInfo` of 0 means the image's own info.
#[test]
fn r2r_null_composite_info_is_own_map() {
    for (layout, v) in cases() {
        let spec = R2rSpec::new(vec![Rf::method(0x100, 0x180)], vec![(0x100, MD)]);
        let (mut w, img) = r2r_world(layout, v, &spec);
        let f = w.f;
        w.mem.ptr(img.info + f.r2r_composite_info, 0);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        assert_eq!(
            block(&*em, img.base + 0x110, &ctx(layout, v)).method_desc,
            MD
        );
    }
}

/// Many entry points in few buckets: probe chains with collision flags (HashMapTests
/// `GetValue_Collision` through the contract). Keys are chosen to share their first bucket.
#[test]
fn r2r_entry_point_map_collisions() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        // (base + rva) >> 2 ≡ same value mod 5 when rva steps by 20 bytes × 3.
        let fns: Vec<Rf> = (0..12u32)
            .map(|i| Rf::method(0x100 + 60 * i, 0x100 + 60 * i + 56))
            .collect();
        let entries: Vec<(u32, u64)> = fns
            .iter()
            .enumerate()
            .map(|(i, f)| (f.begin, MD + 16 * i as u64))
            .collect();
        let mut spec = R2rSpec::new(fns.clone(), entries);
        spec.buckets = Some(5);
        let (mut w, img) = r2r_world(layout, v, &spec);
        // The first bucket of all keys is full and flagged as continuing.
        let ps = w.ps();
        let f = w.f;
        let first = ((img.base + 0x100) >> 2) % 5;
        let bucket = img.buckets + (1 + first) * f.bucket_size;
        let v0 = w.mem.read_ptr(bucket + f.bucket_values);
        assert_ne!(v0 & !w.value_mask() & (u64::MAX >> (64 - 8 * ps)), 0, "{c}");
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for (i, f) in fns.iter().enumerate() {
            let b = block(&*em, img.base + u64::from(f.begin) + 4, &c);
            assert_eq!(b.method_desc, MD + 16 * i as u64, "{c} function {i}");
        }
    }
}

/// Exception clauses of ReadyToRun code, through the core header's section table (.NET 8) or
/// the `ReadyToRunInfo.ExceptionInfoSection` directory (newer runtimes; upstream
/// `GetDebugInfoAndExceptionClauses_R2R_WasmUsesLoadedImageBase` values, x64 form): a
/// method's clauses run to the next entry's; funclets report their method's clauses; a
/// method without an entry, or an image without the section, has none.
#[test]
fn r2r_exception_clauses() {
    let funclet_offset = 0x20u32;
    let finally = clause(CLAUSE_FINALLY, (2, 16), (funclet_offset, 48), 0);
    let filter = clause(CLAUSE_FILTER, (2, 16), (48, 64), funclet_offset + 2);
    let typed = clause(0, (4, 8), (0x10, 0x20), 0x0200_0007);
    for (layout, v) in cases() {
        for (section, field) in [(true, false), (false, false), (true, true), (false, true)] {
            let c = format!("{} section {section} field {field}", ctx(layout, v));
            let mut spec = R2rSpec::new(
                vec![
                    Rf::method_len(0x100, 0x120, 0x60),
                    Rf::part(0x120, 0x160),
                    Rf::method(0x200, 0x240),
                    Rf::method(0x300, 0x340),
                ],
                vec![(0x100, MD), (0x200, MD2), (0x300, MD3)],
            );
            spec.eh = vec![(0x100, vec![finally, filter]), (0x200, vec![typed])];
            spec.eh_section = section;
            let (mut w, img) = r2r_world(layout, v, &spec);
            w.opts.eh_section_field = field;
            let (t, d) = w.into_parts();
            let em = open(&t, &d);
            let m1 = vec![
                expected_clause(
                    ClauseKind::Finally,
                    CLAUSE_FINALLY,
                    (2, 16),
                    (funclet_offset, 48),
                    None,
                    None,
                    None,
                ),
                expected_clause(
                    ClauseKind::Filter,
                    CLAUSE_FILTER,
                    (2, 16),
                    (48, 64),
                    Some(funclet_offset + 2),
                    None,
                    None,
                ),
            ];
            let m2 = vec![expected_clause(
                ClauseKind::Typed,
                0,
                (4, 8),
                (0x10, 0x20),
                None,
                Some(0x0200_0007),
                None,
            )];
            for (rva, want) in [
                (0x100u64, &m1),
                (0x122, &m1),
                (0x210, &m2),
                (0x310, &vec![]),
            ] {
                let b = block(&*em, img.base + rva, &c);
                let got = em.exception_clauses(&b).expect("clauses");
                if section {
                    assert_eq!(&got, want, "{c} rva {rva:#x}");
                } else {
                    assert!(got.is_empty(), "{c} rva {rva:#x}");
                }
            }
        }
    }
}

/// ReadyToRun debug info (upstream `GetDebugInfoAndExceptionClauses_R2R_WasmUsesLoadedImageBase`,
/// its debug-info half in x64 form): upstream's DebugInfo section bytes, a NativeArray of
/// three elements with only element 1 present (look-back 0: the blob follows it, at
/// section + 4, where the byte is 0xa5). Method index 1 (the root) and its funclet both
/// find it; method index 0 has none. Never a flag byte. Found through the core header's
/// section table (.NET 8) or the `ReadyToRunInfo.DebugInfoSection` directory.
#[test]
fn r2r_debug_info() {
    let section = [0x18u8, 0x01, 0x08, 0x00, 0xa5];
    for (layout, v) in cases() {
        for field in [false, true] {
            let c = format!("{} DebugInfoSection field {field}", ctx(layout, v));
            let mut spec = R2rSpec::new(
                vec![
                    Rf::method(0x80, 0xa0),
                    Rf::method_len(0x100, 0x120, 0x60),
                    Rf::part(0x120, 0x160),
                ],
                vec![(0x80, MD3), (0x100, MD)],
            );
            spec.debug = Some((0x7000, section.to_vec()));
            let (mut w, img) = r2r_world(layout, v, &spec);
            w.opts.debug_section_field = field;
            let (t, d) = w.into_parts();
            let em = open(&t, &d);
            let root = block(&*em, img.base + 0x100, &c);
            let funclet = block(&*em, img.base + 0x122, &c);
            assert_eq!(funclet.method_desc, MD, "{c}");
            assert!(em.is_funclet(&funclet).expect("is funclet"), "{c}");
            for b in [&root, &funclet] {
                let di = em.debug_info(b).expect("debug info");
                assert_eq!(di.address, img.base + 0x7004, "{c}");
                assert_eq!(di.has_flag_byte.ok(), Some(false), "{c}");
                assert_eq!(t.read_u8(di.address).expect("blob"), 0xa5, "{c}");
            }
            let other = block(&*em, img.base + 0x90, &c);
            assert_eq!(other.method_desc, MD3, "{c}");
            let di = em.debug_info(&other).expect("debug info");
            assert_eq!((di.address, di.has_flag_byte.ok()), (0, Some(false)), "{c}");
        }
    }
}

// =============================================================================================
// HashMapTests.cs
// =============================================================================================

fn map_world(
    layout: DataLayout,
    entries: &[(u64, u64)],
    ptr: bool,
) -> (Target, DataDescriptor, u64) {
    let mut w = World::new(layout, 1);
    let f = w.f;
    let map = w.mem.alloc(f.hm_size, f.ps);
    w.write_hash_map(map, entries, ptr, None);
    let (t, d) = w.into_parts();
    (t, d, map)
}

/// Upstream `HashMapTests.GetValue`: plain and pointer maps.
#[test]
fn hash_map_get_value() {
    let entries = [
        (0x100u64, 0x10u64),
        (0x200, 0x20),
        (0x300, 0x30),
        (0x400, 0x40),
    ];
    for layout in DataLayout::ALL {
        let (t, d, map) = map_world(layout, &entries, false);
        let (pt, pd, pmap) = map_world(layout, &entries, true);
        for (k, v) in entries {
            assert_eq!(hash_map::lookup(&t, &d, map, k).expect("lookup"), Some(v));
            assert_eq!(
                hash_map::lookup_pointer(&pt, &pd, pmap, k).expect("lookup"),
                Some(v)
            );
        }
    }
}

/// Upstream `HashMapTests.GetValue_Collision`: keys sharing a seed, more of them than a
/// bucket has slots, and a duplicate key (the first value wins).
#[test]
fn hash_map_get_value_collision() {
    let entries = [
        (0x04u64, 0x40u64),
        (0x04, 0x41),
        (0x05, 0x50),
        (0x06, 0x60),
        (0x07, 0x70),
    ];
    for layout in DataLayout::ALL {
        let (t, d, map) = map_world(layout, &entries, false);
        let (pt, pd, pmap) = map_world(layout, &entries, true);
        for (k, v) in entries {
            let want = if k == 0x04 { 0x40 } else { v };
            assert_eq!(
                hash_map::lookup(&t, &d, map, k).expect("lookup"),
                Some(want)
            );
            assert_eq!(
                hash_map::lookup_pointer(&pt, &pd, pmap, k).expect("lookup"),
                Some(want)
            );
        }
    }
}

/// Upstream `HashMapTests.GetValue_NoMatch`; and PtrHashMap keys 0 and 1, stored as 100
/// and 101.
#[test]
fn hash_map_get_value_no_match() {
    for layout in DataLayout::ALL {
        let (t, d, map) = map_world(layout, &[(0x100, 0x10)], false);
        assert_eq!(hash_map::lookup(&t, &d, map, 0x101).expect("lookup"), None);
        let (t, d, map) = map_world(layout, &[(0x100, 0x10)], true);
        assert_eq!(
            hash_map::lookup_pointer(&t, &d, map, 0x101).expect("lookup"),
            None
        );
        let (t, d, map) = map_world(layout, &[(0, 0x20), (1, 0x30)], true);
        assert_eq!(
            hash_map::lookup_pointer(&t, &d, map, 0).expect("l"),
            Some(0x20)
        );
        assert_eq!(
            hash_map::lookup_pointer(&t, &d, map, 1).expect("l"),
            Some(0x30)
        );
        assert_eq!(hash_map::lookup(&t, &d, map, 100).expect("l"), Some(0x10));
    }
}

// =============================================================================================
// Contract versions
// =============================================================================================

#[test]
fn contract_versions() {
    for layout in DataLayout::ALL {
        // "c1" is .NET 11's numbering: the algorithm .NET 10 called 2, never 1.
        for (raw, want) in [("1", 1u64), ("2", 2), ("\"c1\"", 2)] {
            let mut w = World::new(layout, want);
            w.opts.contract = Some(raw.into());
            let (t, d) = w.into_parts();
            assert_eq!(open(&t, &d).version(), want, "{raw}");
        }
        for (raw, shown) in [
            ("3", "3"),
            ("0", "0"),
            ("\"c9\"", "c9"),
            ("\"c2\"", "c2"),
            ("\"n1\"", "n1"),
            ("\"c3\"", "c3"),
            ("\"c01\"", "c01"),
            ("\"1\"", "1"),
        ] {
            let mut w = World::new(layout, 1);
            w.opts.contract = Some(raw.into());
            let (t, d) = w.into_parts();
            let r = execution_manager(&t, &d);
            match r {
                Err(ContractError::UnsupportedVersion {
                    contract, version, ..
                }) => {
                    assert_eq!(contract, "ExecutionManager", "{raw}");
                    assert_eq!(version, shown, "{raw}");
                }
                Err(e) => panic!("{raw}: {e:?}"),
                Ok(_) => panic!("{raw}: accepted"),
            }
        }
        let mut w = World::new(layout, 1);
        w.opts.contract = None;
        let (t, d) = w.into_parts();
        let r = execution_manager(&t, &d);
        assert!(matches!(
            r,
            Err(ContractError::Missing {
                contract: "ExecutionManager"
            })
        ));
    }
}

/// An architecture cdac has no unwind format for is a typed error, not a panic.
#[test]
fn unknown_architecture() {
    let mut w = World::new(DataLayout::LE64, 2);
    w.opts.arch = "sparc".into();
    let (t, d) = w.into_parts();
    let r = execution_manager(&t, &d);
    assert!(r.is_err());
}

// =============================================================================================
// Damaged input: typed errors, no panic, bounded time
// =============================================================================================

/// Nibble values 9..=15 where a start nibble is read, and pointer markers 13..=15 (v2).
#[test]
fn corrupt_nibble_map_units() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let (mut w, h, _) = jit_world(layout, v);
        let m = w.add_jit_method(h, &method(0x800, MD));
        let heap = w.heaps[h];
        let unit = heap.map + (m.start - heap.begin) / 256 * 4;
        w.mem.u32(unit, 0xffff_ffff);
        if v == 2 {
            let later = heap.map + ((m.start - heap.begin) / 256 + 3) * 4;
            w.mem.u32(later, 0x0000_010d);
        }
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        is_corrupt(em.code_block(m.start), &c);
        if v == 2 {
            is_corrupt(em.code_block(m.start + 3 * 256 + 0x10), &c);
        }
    }
}

/// A fragment list that loops (with and without the collectible tag) and a self-loop.
#[test]
fn cyclic_fragment_lists() {
    for (layout, v) in cases() {
        for tag in [0u64, 1] {
            let c = format!("{} tag {tag}", ctx(layout, v));
            let mut w = World::new(layout, v);
            let f = w.f;
            let a = w.push_fragment(CODE_START, 0x10, 0x20, 0x40, 0);
            let b = w.push_fragment(CODE_START, 0x30, 0x40, 0x40, 0);
            // b → a → b …
            w.mem.ptr(a + f.frag_next, b | tag);
            let self_loop = w.push_fragment(0x0c0c_0000, 0x10, 0x20, 0x40, 0);
            w.mem.ptr(self_loop + f.frag_next, self_loop | tag);
            let (t, d) = w.into_parts();
            let em = open(&t, &d);
            is_limit(em.code_block(CODE_START + 0x100), &c);
            is_limit(em.code_block(0x0c0c_0100), &c);
            // Brent's detection ends each loop after a few laps, not at the list limit.
            assert!(
                t.bytes_read() < 64 << 10,
                "{c}: {} bytes read",
                t.bytes_read()
            );
        }
    }
}

/// A method start below the pointer size leaves no room for its header slot.
#[test]
fn method_start_below_pointer_size() {
    for (layout, v) in cases() {
        let mut w = World::new(layout, v);
        let h = w.add_heap(0, 0x1000);
        w.heap_section(h);
        w.nibble_mark(h, 0, 0x100);
        let (t, d) = w.into_parts();
        is_corrupt(open(&t, &d).code_block(0x10), &ctx(layout, v));
    }
}

/// `NumRuntimeFunctions` beyond the list-length limit, at the limit over unmapped memory,
/// and a table pointer to unmapped memory.
#[test]
fn r2r_runtime_function_count_and_table() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let max = Limits::default().max_list_length as u32;
        for (count, limit) in [(u32::MAX, true), (max + 1, true), (max, false)] {
            let mut spec = R2rSpec::new(vec![Rf::method(0x100, 0x200)], vec![(0x100, MD)]);
            spec.num_functions_override = Some(count);
            let (w, img) = r2r_world(layout, v, &spec);
            let (t, d) = w.into_parts();
            let em = open(&t, &d);
            let r = em.code_block(img.base + 0x100);
            if limit {
                is_limit(r, &c);
            } else {
                is_read(r, &c);
            }
            // The binary search reads a handful of entries, never the table.
            assert!(
                t.bytes_read() < 64 << 10,
                "{c}: {} bytes read",
                t.bytes_read()
            );
        }
        let spec = R2rSpec::new(vec![Rf::method(0x100, 0x200)], vec![(0x100, MD)]);
        let (mut w, img) = r2r_world(layout, v, &spec);
        let f = w.f;
        w.mem.ptr(img.info + f.r2r_functions, 0x0fff_0000);
        let (t, d) = w.into_parts();
        is_read(open(&t, &d).code_block(img.base + 0x100), &c);
    }
}

/// Runtime-function indices in the hot/cold map beyond the table: typed errors (or a
/// consistent answer), no panic.
#[test]
fn r2r_hot_cold_indices_out_of_range() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let fns = vec![
            Rf::method_len(0x100, 0x180, 0x100),
            Rf::part(0x180, 0x200),
            Rf::method(0x200, 0x280),
        ];
        // Cold part 1 claims a hot index far beyond the table.
        let mut spec = R2rSpec::new(fns.clone(), vec![(0x100, MD), (0x200, MD2)]);
        spec.hot_cold = vec![1, 0xffff_fff0];
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        // A hot index after the code that maps to it cannot be right.
        match em.code_block(img.base + 0x190) {
            Err(ContractError::Corrupt { what, .. }) => {
                assert_eq!(what, "ReadyToRun hot/cold map", "{c}")
            }
            other => panic!("{c}: expected a corrupt hot/cold map, got {other:?}"),
        }
        assert_eq!(block(&*em, img.base + 0x110, &c).method_desc, MD, "{c}");
        // A hot method whose cold index lies beyond the table.
        let mut spec = R2rSpec::new(fns, vec![(0x100, MD), (0x200, MD2)]);
        spec.hot_cold = vec![0x50, 0];
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        // The lookup reads the cold start; either it or the region info fails.
        match em.code_block(img.base + 0x110) {
            Ok(Some(b)) => is_read(em.method_region_info(&b), &c),
            r => is_read(r, &c),
        }
    }
}

/// An odd hot/cold map length is corrupt; a huge one is over the cap.
#[test]
fn r2r_hot_cold_map_odd_or_huge() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        for (n, corrupt) in [(3u32, true), (1, true), (0xffff_fffe, false)] {
            let mut spec = hot_cold_spec();
            spec.num_hot_cold_override = Some(n);
            let (w, img) = r2r_world(layout, v, &spec);
            let (t, d) = w.into_parts();
            let r = open(&t, &d).code_block(img.base + 0x110);
            if corrupt {
                is_corrupt(r, &c);
            } else {
                is_limit(r, &c);
            }
        }
    }
}

/// Bucket counts 0 and 1 (no valid hash step) and beyond the cap are corrupt; a null bucket
/// array is an empty map.
#[test]
fn r2r_bad_bucket_counts() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let huge = if layout.pointer_size == 4 {
            vec![(1 << 28) + 1, u64::from(u32::MAX)]
        } else {
            vec![(1 << 28) + 1, 1 << 40, u64::MAX]
        };
        for count in [0u64, 1].into_iter().chain(huge) {
            let spec = R2rSpec::new(vec![Rf::method(0x100, 0x200)], vec![(0x100, MD)]);
            let (mut w, img) = r2r_world(layout, v, &spec);
            w.mem.ptr(img.buckets, count);
            let (t, d) = w.into_parts();
            is_corrupt(
                open(&t, &d).code_block(img.base + 0x110),
                &format!("{c} count {count:#x}"),
            );
        }
        let spec = R2rSpec::new(vec![Rf::method(0x100, 0x200)], vec![(0x100, MD)]);
        let (mut w, img) = r2r_world(layout, v, &spec);
        let f = w.f;
        w.mem.ptr(img.map + f.hm_buckets, 0);
        let (t, d) = w.into_parts();
        none(&*open(&t, &d), img.base + 0x110, &c);
    }
}

/// A probe chain whose collision flags never end: every bucket full of other keys and
/// flagged. The lookup stops after `count` probes.
#[test]
fn r2r_endless_collision_chain() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let spec = R2rSpec::new(vec![Rf::method(0x100, 0x200)], vec![]);
        let (mut w, img) = r2r_world(layout, v, &spec);
        let f = w.f;
        let ps = w.ps();
        let count = 4099u64;
        let buckets = w.mem.alloc((count + 1) * f.bucket_size, ps);
        w.mem.ptr(buckets, count);
        let flag = !w.value_mask() & (u64::MAX >> (64 - 8 * ps));
        for b in 1..=count {
            let at = buckets + b * f.bucket_size;
            for j in 0..f.slots {
                w.mem
                    .ptr(at + f.bucket_keys + j * ps, 0x0777_0000 + 4 * (b * 4 + j));
                w.mem.ptr(at + f.bucket_values + j * ps, 0x10 | flag);
            }
        }
        w.mem.ptr(img.map + f.hm_buckets, buckets);
        let (t, d) = w.into_parts();
        // Every bucket claims a collision: the probe budget ends the chain.
        match open(&t, &d).code_block(img.base + 0x110) {
            Err(ContractError::LimitExceeded {
                what,
                limit: Limit::HashChain,
                cap: 1024,
                ..
            }) => {
                assert_eq!(what, "hash map probe chain", "{c}")
            }
            other => panic!("{c}: expected the probe budget to run out, got {other:?}"),
        }
        // Raised past the table's size, the limit lets the probe visit every bucket: the
        // key is in none, so the method has no entry point and no code block is found.
        let raised = t.clone().with_limits(Limits {
            max_hash_chain: 8192,
            ..Limits::default()
        });
        assert!(
            matches!(open(&raised, &d).code_block(img.base + 0x110), Ok(None)),
            "{c}"
        );
    }
}

/// `NumUnwindInfos` beyond the list-length limit, and below it over unmapped memory.
#[test]
fn jit_huge_unwind_info_count() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let over = Limits::default().max_list_length as u32 + 1;
        for (n, limit) in [(u32::MAX, true), (over, true), (60_000, false)] {
            let (mut w, h, _) = jit_world(layout, v);
            let m = w.add_jit_method(
                h,
                &JitSpec {
                    unwind: vec![(0, 0x40)],
                    num_unwind_override: Some(n),
                    ..method(0x40, MD)
                },
            );
            let (t, d) = w.into_parts();
            let em = open(&t, &d);
            let b = block(&*em, m.start + 0x10, &c);
            if limit {
                is_limit(em.unwind_info(&b), &c);
                is_limit(em.funclet_start(&b), &c);
                is_limit(em.is_funclet(&b), &c);
            } else {
                is_read(em.unwind_info(&b), &c);
            }
        }
    }
}

/// A JIT clause count beyond the cap, or over unmapped memory; ReadyToRun clause spans and
/// section counts beyond their caps.
#[test]
fn huge_exception_clause_counts() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let over = Limits::default().max_list_length + 1;
        for (count, limit) in [(u64::from(u32::MAX), true), (over, true), (1000, false)] {
            let (mut w, h, _) = jit_world(layout, v);
            let m = w.add_jit_method(
                h,
                &JitSpec {
                    eh: Some(vec![clause(CLAUSE_FINALLY, (0, 4), (8, 12), 0)]),
                    ..method(0x40, MD)
                },
            );
            let ps = w.ps();
            w.mem.ptr(m.eh_info - ps, count);
            let (t, d) = w.into_parts();
            let em = open(&t, &d);
            let r = em.exception_clauses(&block(&*em, m.start, &c));
            if limit {
                is_limit(r, &c);
            } else {
                is_read(r, &c);
            }
        }
        // ReadyToRun: the sentinel's clause RVA far beyond the method's; a section count
        // beyond the cap.
        let mut spec = R2rSpec::new(vec![Rf::method(0x100, 0x140)], vec![(0x100, MD)]);
        spec.eh = vec![(0x100, vec![clause(CLAUSE_FAULT, (0, 4), (8, 12), 0)])];
        let (mut w, img) = r2r_world(layout, v, &spec);
        w.mem.u32(img.base + 0xa000 + 8 + 4, 0xffff_fff0);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        is_limit(em.exception_clauses(&block(&*em, img.base + 0x100, &c)), &c);
        let (mut w, img) = r2r_world(layout, v, &spec);
        w.mem.u32(img.core_header + 4, 0x7fff_ffff);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        is_limit(em.exception_clauses(&block(&*em, img.base + 0x100, &c)), &c);
    }
}

/// `EHInfo` at the top of a 64-bit address space (clause count readable just below it):
/// the first clause's fields up to `HandlerEndPC` are readable, and the address of its
/// union (offset 24) is 2^64.
#[test]

fn jit_eh_info_at_top_of_address_space() {
    for v in VERSIONS {
        let (mut w, h, _) = jit_world(DataLayout::LE64, v);
        let m = w.add_jit_method(h, &method(0x40, MD));
        let f = w.f;
        let top = 0xffff_ffff_ffff_ff00u64;
        w.mem.map(top, 0xff);
        // Clauses at EHInfo + 8; the union at clause + 24.
        assert_eq!((f.eh_clauses, f.ee_clause_union), (8, 24));
        let eh = 0xffff_ffff_ffff_ffe0u64;
        w.mem.ptr(eh - 8, 1);
        w.mem.ptr(m.header + f.rch_eh, eh);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        let b = block(&*em, m.start, "top");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| em.exception_clauses(&b)));
        match r {
            Ok(Err(_)) => {}
            Ok(Ok(cl)) => panic!("clauses read across the end of the address space: {cl:?}"),
            Err(_) => panic!("exception_clauses panicked"),
        }
    }
}

/// `GCInfo` at the top of a 64-bit address space: the GC-info bit reader's cache check
/// overflows. `code_block` itself decodes the GC info (to remember the method's range).
#[test]

fn jit_gc_info_at_top_of_address_space() {
    for v in VERSIONS {
        for gc in [u64::MAX, 0xffff_ffff_ffff_fff8] {
            let (mut w, h, _) = jit_world(DataLayout::LE64, v);
            let m = w.add_jit_method(h, &method(0x40, MD));
            let f = w.f;
            w.mem.ptr(m.header + f.rch_gc, gc);
            let (t, d) = w.into_parts();
            let em = open(&t, &d);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                em.code_block(m.start)
                    .map(|b| b.map(|b| em.method_region_info(&b)))
            }));
            assert!(r.is_ok(), "GCInfo {gc:#x}: panicked");
        }
    }
}

/// Answers from the cache of resolved methods equal fresh walks, in any lookup order, with
/// the split ReadyToRun method's hot funclet and without.
#[test]
fn cached_lookups_equal_fresh_lookups() {
    for ((layout, v), split_funclet) in cases().flat_map(|c| [(c, false), (c, true)]) {
        let c = format!("{} hot funclet {split_funclet}", ctx(layout, v));
        let (w, mut ips) = full_world_with(layout, v, split_funclet);
        let (t, d) = w.into_parts();
        for ip in ips.clone() {
            ips.extend([ip + 1, ip + 0x11, ip + 0x3f, ip.saturating_sub(1)]);
        }
        let warm = open(&t, &d);
        // Twice forwards, then backwards, through one ExecutionManager.
        let order: Vec<u64> = ips
            .iter()
            .chain(ips.iter())
            .chain(ips.iter().rev())
            .copied()
            .collect();
        for ip in order {
            let fresh = open(&t, &d).code_block(ip).expect("fresh");
            let cached = warm.code_block(ip).expect("warm");
            assert_eq!(cached, fresh, "{c} ip {ip:#x}");
        }
    }
}

/// The cache of resolved methods answers only where a fresh lookup does: not in alignment
/// padding between a method's main body and its funclet (inside the method's GC-info
/// length, outside every runtime function), and not, for a function whose length reaches
/// into the next one (a damaged table), in that next function.
#[test]
fn cache_respects_gaps_between_functions() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let spec = R2rSpec::new(
            vec![
                Rf::method_len(0x100, 0x130, 0x60), // main body, padding to 0x140
                Rf::part(0x140, 0x160),             // its funclet
                Rf::method(0x200, 0x300),           // length reaching into the next
                Rf::method(0x280, 0x300),
            ],
            vec![(0x100, MD), (0x200, MD2), (0x280, MD3)],
        );
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let base = img.base;
        let warm = open(&t, &d);
        for rva in [0x110u64, 0x150, 0x210] {
            block(&*warm, base + rva, &c);
        }
        for rva in [0x130u64, 0x138, 0x13f, 0x160, 0x1ff] {
            none(&*open(&t, &d), base + rva, &c);
            none(&*warm, base + rva, &c);
        }
        for (rva, md, start) in [(0x290u64, MD3, 0x280u64), (0x27f, MD2, 0x200)] {
            let fresh = block(&*open(&t, &d), base + rva, &c);
            assert_eq!((fresh.method_desc, fresh.start), (md, base + start), "{c}");
            assert_eq!(block(&*warm, base + rva, &c), fresh, "{c} rva {rva:#x}");
        }
        let funclet = block(&*warm, base + 0x15f, &c);
        assert_eq!(
            (funclet.method_desc, funclet.relative_offset),
            (MD, 0x5f),
            "{c}"
        );
    }
}

/// A delay-load thunk range inside a runtime function (damaged image): once a later address
/// of the function was resolved, the cache answers for the thunk addresses too, where a
/// fresh walk says "no method".
#[test]
fn cache_respects_thunk_ranges() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let mut spec = R2rSpec::new(vec![Rf::method(0x2000, 0x2200)], vec![(0x2000, MD)]);
        spec.thunks = Some((0x2000, 0x100));
        let (w, img) = r2r_world(layout, v, &spec);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        assert_eq!(block(&*em, img.base + 0x2110, &c).method_desc, MD, "{c}");
        none(&*em, img.base + 0x2010, &c);
    }
}

/// Zero-sized descriptor types must not divide by zero.
#[test]

fn r2r_zero_sized_descriptor_types() {
    for ty in ["ExceptionLookupTableEntry", "R2RExceptionClause"] {
        let mut spec = R2rSpec::new(vec![Rf::method(0x100, 0x140)], vec![(0x100, MD)]);
        spec.eh = vec![(0x100, vec![clause(CLAUSE_FAULT, (0, 4), (8, 12), 0)])];
        let (mut w, img) = r2r_world(DataLayout::LE64, 2, &spec);
        w.opts.sizes = vec![(ty, 0)];
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        let b = block(&*em, img.base + 0x100, ty);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| em.exception_clauses(&b)));
        assert!(r.is_ok(), "{ty} of size 0: exception_clauses panicked");
    }
}

// =============================================================================================
// Random damage
// =============================================================================================

/// A world with every kind of structure: a code heap with methods (funclets, clauses, debug
/// info), stubs, a range list, and a ReadyToRun image with funclets, a hot/cold split,
/// thunks, clauses and an unused method. Returns it with addresses worth looking up.
fn full_world(layout: DataLayout, version: u64) -> (World, Vec<u64>) {
    full_world_with(layout, version, true)
}

/// [`full_world`]; `split_funclet`: whether the split ReadyToRun method has a hot funclet
/// (see `r2r_hot_funclet_of_split_method`).
fn full_world_with(layout: DataLayout, version: u64, split_funclet: bool) -> (World, Vec<u64>) {
    let mut w = World::new(layout, version);
    let h = w.add_heap(CODE_START, 0x4000);
    w.heap_section(h);
    w.set_all_code_heaps(w.heaps[h].node);
    w.set_store_rich_debug_info(1);
    let m1 = w.add_jit_method(
        h,
        &JitSpec {
            unwind: vec![(0, 0x100), (0x100, 0x180), (0x180, 0x300)],
            eh: Some(vec![
                clause(CLAUSE_FINALLY, (4, 8), (0x100, 0x180), 0),
                clause(CLAUSE_FILTER, (4, 8), (0x200, 0x300), 0x180),
            ]),
            debug_info: 0x0066_0000,
            ..method(0x300, MD)
        },
    );
    let stub = w.add_stub(h, 0x40, 4);
    let m2 = w.add_jit_method(h, &method(0x60, MD2));
    let ee = w.ee_jit_manager;
    let rl = w.write_section(0x0b0b_0000, 0x0b0b_1000, FLAG_RANGE_LIST, ee, 0, 0, 0);
    w.map_range(0x0b0b_0000, 0x0b0b_1000, rl);
    // Hot 0x40 (+ a 0x20 hot funclet) + cold 0x40.
    let spec = em_mock::damaged_r2r::split_image(split_funclet);
    w.add_r2r(&spec);
    let b = spec.base;
    let ips = vec![
        m1.start,
        m1.start + 0x120,
        m1.start + 0x2ff,
        stub,
        m2.start + 8,
        CODE_START,
        0x0b0b_0010,
        b + 0x100,
        b + 0x150,
        b + 0x210,
        b + 0x290,
        b + 0x420,
        b + 0x3010,
        b + 0x180,
        0,
    ];
    (w, ips)
}

fn exercise(em: &dyn ExecutionManager, ip: u64) {
    if let Ok(Some(b)) = em.code_block(ip) {
        let _ = em.method_region_info(&b);
        let _ = em.unwind_info(&b);
        let _ = em.unwind_info_base_address(&b);
        let _ = em.gc_info(&b);
        let _ = em.debug_info(&b);
        let _ = em.funclet_start(&b);
        let _ = em.is_funclet(&b);
        let _ = em.exception_clauses(&b);
    }
    let _ = em.ee_jit_manager_info();
}

/// The undamaged full world answers every lookup (a baseline for the property test).
#[test]
fn full_world_baseline() {
    for (layout, v) in cases() {
        let c = ctx(layout, v);
        let (w, ips) = full_world(layout, v);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        let found: Vec<bool> = ips
            .iter()
            .map(|&ip| em.code_block(ip).expect("lookup").is_some())
            .collect();
        assert_eq!(
            found,
            vec![
                true, true, true, false, true, false, false, true, true, true, false, true, false,
                false, false
            ],
            "{c}"
        );
        for ip in ips {
            if let Some(b) = em.code_block(ip).expect("lookup") {
                em.method_region_info(&b).expect("region");
                em.unwind_info(&b).expect("unwind");
                em.gc_info(&b).expect("gc");
                em.debug_info(&b).expect("debug");
                em.funclet_start(&b).expect("funclet");
                em.exception_clauses(&b).expect("clauses");
            }
        }
    }
}

/// A patch: which allocation, where in it, and the bytes written there.
#[derive(Debug, Clone)]
enum Damage {
    Bytes(usize, u64, Vec<u8>),
    Fill(usize, u64),
    Pointer(usize, u64, u64),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        4 => (any::<usize>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 1..9))
            .prop_map(|(a, o, b)| Damage::Bytes(a, o, b)),
        1 => (any::<usize>(), any::<u64>()).prop_map(|(a, s)| Damage::Fill(a, s)),
        3 => (any::<usize>(), any::<u64>(), prop_oneof![
                Just(0u64), Just(1), Just(0xf), Just(0x10), Just(0xffff_ffff_fffe_fff8),
                Just(0xffff_ffff), Just(0x7fff_ffff), Just(0x8000_0000), 0u64..0x1_0000,
                any::<u64>().prop_map(below_top),
                Just(CODE_START), Just(0x0c0c_0000), Just(0x0030_0000),
             ])
            .prop_map(|(a, o, v)| Damage::Pointer(a, o, v)),
    ]
}

/// Damage values are used as they are, including pointers at the very top of the 64-bit
/// address space (the overflow cases `jit_gc_info_at_top_of_address_space` and
/// `jit_eh_info_at_top_of_address_space` pin down).
fn below_top(v: u64) -> u64 {
    v
}

fn apply(w: &mut World, d: &Damage) {
    let allocs = w.mem.allocations.clone();
    let pick = |i: usize| allocs[i % allocs.len()];
    match d {
        Damage::Bytes(a, o, bytes) => {
            let (addr, size) = pick(*a);
            let n = (bytes.len() as u64).min(size);
            let at = addr + o % (size - n + 1);
            w.mem.bytes(at, &bytes[..n as usize]);
        }
        Damage::Fill(a, seed) => {
            let (addr, size) = pick(*a);
            let mut x = *seed | 1;
            let len = size.min(0x2000);
            let mut bytes = Vec::with_capacity(len as usize);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bytes.push(x as u8);
            }
            w.mem.bytes(addr, &bytes);
        }
        Damage::Pointer(a, o, v) => {
            let (addr, size) = pick(*a);
            let ps = w.ps();
            if size >= ps {
                let at = addr + (o % (size - ps + 1)) / ps * ps;
                w.mem.ptr(at, *v);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random bytes, fills and pointers written into any structure never make any operation
    /// panic, and every lookup reads a bounded amount of memory.
    #[test]
    fn damaged_structures_never_panic(
        layout in proptest::sample::select(DataLayout::ALL.to_vec()),
        version in 1u64..=2,
        damages in proptest::collection::vec(damage(), 1..6),
        extra_ip in any::<u32>(),
    ) {
        let (mut w, mut ips) = full_world(layout, version);
        for d in &damages {
            apply(&mut w, d);
        }
        ips.push(CODE_START + u64::from(extra_ip) % 0x4000);
        ips.push(0x0c0c_0000 + u64::from(extra_ip) % 0xc000);
        let (t, d) = w.into_parts();
        let em = open(&t, &d);
        for ip in ips {
            exercise(&*em, ip);
        }
        prop_assert!(t.bytes_read() < 256 << 20, "read {} bytes", t.bytes_read());
    }
}
