//! The PrecodeStubs contract and NonVirtualEntry2MethodDesc on a real .NET 8 runtime (8.0.33,
//! or 8.0.0 with `CDAC_NET8_VARIANT=net8.0.0`; measured on 8.0.4), live and on its
//! `createdump --full` dump.
//!
//! Oracles, none of them the library's own layout tables:
//! * the testbed's manifest: `MethodHandle.Value` (the MethodDesc) and
//!   `MethodHandle.GetFunctionPointer()` of every emitted method, of framework methods of
//!   several kinds (static, instance, virtual, generic instantiation, AggressiveOptimization,
//!   P/Invoke) and of LCG lambdas (whose entry point is their JIT'ed code);
//! * the x64 instructions of each precode, decoded here: the `mov r10, [rip+disp32]` that
//!   loads the MethodDesc names the slot the contract must read;
//! * the runtime's perf map, which logs every block of temporary entry points it allocates
//!   (`AllocateTemporaryEntryPoints<…>`): each 24-byte entry of a block is the precode of one
//!   method of one MethodDescChunk.

use crate::common;

use std::collections::BTreeMap;

use cdac::contracts::execution_manager::execution_manager;
use cdac::contracts::execution_manager::range_section_map::all_range_sections;
use cdac::contracts::precode_stubs::{
    non_virtual_entry_to_method_desc, precode_stubs, resolve_entry_point, KnownPrecodeType,
    MachineDescriptorSource,
};
use cdac::runtime::{OpenOptions, Runtime};
use common::{hex, perf_map, testbed};

/// Size of one precode in a code page (x64, .NET 8): the perf map's blocks are multiples.
const PRECODE_SIZE: u64 = 24;
/// Code-to-data distance measured on this runtime (4 KiB OS pages, 16 KiB stub pages).
const STUB_PAGE: u64 = 0x4000;

/// What an entry point is expected to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Fixup,
    Stub,
    /// Either kind of precode.
    AnyPrecode,
    /// The method's own code (no precode).
    Code,
}

#[derive(Debug)]
struct Entry {
    what: String,
    method_desc: u64,
    entry: u64,
    expect: Expect,
}

/// Every entry point the manifest records.
fn manifest_entries() -> Vec<Entry> {
    let m = &testbed().manifest;
    let mut out = Vec::new();
    for e in testbed().emitted() {
        out.push(Entry {
            what: format!("emitted {}", e["name"].as_str().unwrap()),
            method_desc: hex(&e["method_desc"]),
            entry: hex(&e["function_pointer"]),
            // Static methods of an emitted type: temporary entry points, fixup precodes.
            expect: Expect::Fixup,
        });
    }
    for e in m["framework_methods"]
        .as_array()
        .expect("framework_methods")
    {
        out.push(Entry {
            what: format!("framework {}", e["label"].as_str().unwrap()),
            method_desc: hex(&e["method_desc"]),
            entry: hex(&e["function_pointer"]),
            // P/Invoke methods need the MethodDesc in r10: stub precodes.
            expect: if e["pinvoke"].as_bool().unwrap() {
                Expect::Stub
            } else {
                Expect::AnyPrecode
            },
        });
    }
    for e in m["lcg_methods"].as_array().expect("lcg_methods") {
        out.push(Entry {
            what: format!("lcg {}", e["name"].as_str().unwrap()),
            method_desc: hex(&e["method_desc"]),
            entry: hex(&e["function_pointer"]),
            // Dynamic methods are never tiered: their entry point is their code.
            expect: Expect::Code,
        });
    }
    out
}

fn disp32(code: &[u8], at: usize) -> i64 {
    i64::from(i32::from_le_bytes(code[at..at + 4].try_into().unwrap()))
}

/// The slot a .NET 8 x64 precode loads its MethodDesc from, decoded from its instructions:
/// a stub precode starts `mov r10, [rip+d]` (4c 8b 15 d), a fixup precode `jmp [rip+d]`
/// (ff 25 d) followed by that `mov r10`.
fn decoded_method_desc_slot(entry: u64, code: &[u8]) -> Option<(KnownPrecodeType, u64)> {
    if code[..3] == [0x4c, 0x8b, 0x15] {
        return Some((
            KnownPrecodeType::Stub,
            entry.wrapping_add_signed(7 + disp32(code, 3)),
        ));
    }
    if code[..2] == [0xff, 0x25] && code[6..9] == [0x4c, 0x8b, 0x15] {
        return Some((
            KnownPrecodeType::Fixup,
            entry.wrapping_add_signed(13 + disp32(code, 9)),
        ));
    }
    None
}

/// The `jmp [rip+disp32]` slots of a .NET 8 x64 precode: a stub precode's jump to its
/// target at +7, a fixup precode's jump to its target at +0 and to the fixup thunk at +13.
fn jump_slots(entry: u64, code: &[u8]) -> Vec<(&'static str, &'static str, u64)> {
    if code[..3] == [0x4c, 0x8b, 0x15] && code[7..9] == [0xff, 0x25] {
        return vec![(
            "StubPrecodeData",
            "Target",
            entry.wrapping_add_signed(13 + disp32(code, 9)),
        )];
    }
    if code[..2] == [0xff, 0x25] && code[13..15] == [0xff, 0x25] {
        return vec![
            (
                "FixupPrecodeData",
                "Target",
                entry.wrapping_add_signed(6 + disp32(code, 2)),
            ),
            (
                "FixupPrecodeData",
                "PrecodeFixupThunk",
                entry.wrapping_add_signed(19 + disp32(code, 15)),
            ),
        ];
    }
    panic!("{entry:#x}: no x64 precode: {code:02x?}");
}

fn check_manifest_entry_points(rt: &Runtime, what: &str) {
    let (t, d) = (rt.target(), rt.descriptor());
    let stubs = precode_stubs(t, d).expect("PrecodeStubs");
    assert_eq!(
        stubs.version(),
        1,
        "the shipped .NET 8 descriptor names version 1"
    );
    assert_eq!(stubs.machine().source, MachineDescriptorSource::Globals);
    assert_eq!(u64::from(stubs.machine().stub_code_page_size), STUB_PAGE);
    let em = execution_manager(t, d).expect("ExecutionManager");

    let entries = manifest_entries();
    assert!(
        entries.len() >= 20,
        "{what}: only {} entries",
        entries.len()
    );
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &entries {
        let resolved = resolve_entry_point(t, d, e.entry)
            .unwrap_or_else(|err| panic!("{what}: {}: {err}", e.what))
            .unwrap_or_else(|| panic!("{what}: {} {:#x} resolves to nothing", e.what, e.entry));
        assert_eq!(
            resolved.method_desc, e.method_desc,
            "{what}: {} {:#x}",
            e.what, e.entry
        );
        assert_eq!(
            non_virtual_entry_to_method_desc(t, d, e.entry).unwrap(),
            Some(e.method_desc),
            "{what}: {}",
            e.what
        );
        let kind = resolved.precode.map(|p| p.kind);
        let ok = match e.expect {
            Expect::Fixup => kind == Some(KnownPrecodeType::Fixup),
            Expect::Stub => kind == Some(KnownPrecodeType::Stub),
            Expect::AnyPrecode => matches!(
                kind,
                Some(KnownPrecodeType::Fixup) | Some(KnownPrecodeType::Stub)
            ),
            Expect::Code => kind.is_none(),
        };
        assert!(
            ok,
            "{what}: {}: expected {:?}, got {kind:?}",
            e.what, e.expect
        );
        *kinds
            .entry(kind.map_or("code", |k| k.as_str()))
            .or_default() += 1;

        match resolved.precode {
            Some(p) => {
                // The MethodDesc slot the instructions load r10 from is the one read.
                let code = t.read_bytes(e.entry, 24).unwrap();
                let (decoded_kind, slot) = decoded_method_desc_slot(e.entry, &code)
                    .unwrap_or_else(|| panic!("{what}: {}: code {code:02x?}", e.what));
                assert_eq!(decoded_kind, p.kind, "{what}: {}", e.what);
                assert_eq!(p.data, e.entry + STUB_PAGE, "{what}: {}", e.what);
                let field = if p.kind == KnownPrecodeType::Fixup {
                    d.ty("FixupPrecodeData")
                        .unwrap()
                        .offset("MethodDesc")
                        .unwrap()
                } else {
                    d.ty("StubPrecodeData")
                        .unwrap()
                        .offset("MethodDesc")
                        .unwrap()
                };
                assert_eq!(slot, p.data + field, "{what}: {}", e.what);
                assert_eq!(t.read_pointer(slot).unwrap(), e.method_desc);
                // The other slots the instructions name are the descriptor's other fields.
                for (ty, field, slot) in jump_slots(e.entry, &code) {
                    let off = d.ty(ty).unwrap().offset(field).unwrap();
                    assert_eq!(slot, p.data + off, "{what}: {}: {ty}.{field}", e.what);
                }
                // A precode is never code the ExecutionManager knows.
                assert!(
                    em.code_block(e.entry).unwrap().is_none(),
                    "{what}: {}",
                    e.what
                );
            }
            None => {
                let b = em.code_block(e.entry).unwrap().expect("code block");
                assert_eq!(
                    b.start, e.entry,
                    "{what}: {}: the entry is the code's start",
                    e.what
                );
                assert_eq!(b.method_desc, e.method_desc, "{what}: {}", e.what);
            }
        }
    }
    eprintln!(
        "{what}: {} manifest entry points resolved: {kinds:?}",
        entries.len()
    );
    for k in ["fixup", "stub", "code"] {
        assert!(
            kinds.get(k).copied().unwrap_or(0) > 0,
            "{what}: no {k} entry point"
        );
    }
}

/// Every 24-byte entry of every block of temporary entry points in the perf map is a
/// precode for one method; the methods of one block are distinct and share one
/// MethodDescChunk (the runtime allocates a chunk's temporary entry points together).
fn check_temporary_entry_point_blocks(rt: &Runtime, what: &str, dump: Option<&str>) {
    let (t, d) = (rt.target(), rt.descriptor());
    let stubs = precode_stubs(t, d).unwrap();
    let chunk_index = d.ty("MethodDesc").unwrap().offset("ChunkIndex").unwrap();
    let chunk_size = u64::from(d.ty("MethodDescChunk").unwrap().size().unwrap());
    let align = d.global_value("MethodDescAlignment").unwrap();
    let chunk_of = |md: u64| -> u64 {
        let i = u64::from(t.read_u8(md + chunk_index).unwrap());
        md - i * align - chunk_size
    };
    let blocks: Vec<(u64, u64)> = perf_map(&testbed().perf_map_for(dump))
        .into_iter()
        .filter(|(_, size, n)| n.contains("AllocateTemporaryEntryPoints") && *size > 0)
        .map(|(start, size, _)| (start, size))
        .collect();
    assert!(blocks.len() > 1000, "{what}: {} blocks", blocks.len());
    let (mut entries, mut by_kind, mut failures) = (0u64, BTreeMap::new(), Vec::new());
    for (start, size) in &blocks {
        assert_eq!(
            size % PRECODE_SIZE,
            0,
            "{what}: block {start:#x} size {size:#x}"
        );
        let mut mds = Vec::new();
        for entry in (*start..start + size).step_by(PRECODE_SIZE as usize) {
            entries += 1;
            match resolve_entry_point(t, d, entry) {
                Ok(Some(m)) if m.precode.is_some() => {
                    *by_kind.entry(m.precode.unwrap().kind).or_insert(0u64) += 1;
                    mds.push(m.method_desc);
                    // The contract's own lookup and the instructions agree.
                    let code = t.read_bytes(entry, 24).unwrap();
                    let (_, slot) = decoded_method_desc_slot(entry, &code).expect("x64 precode");
                    assert_eq!(t.read_pointer(slot).unwrap(), m.method_desc);
                    assert_eq!(
                        stubs.method_desc_from_stub(entry).unwrap(),
                        Some(m.method_desc)
                    );
                }
                other => failures.push(format!("{entry:#x}: {other:?}")),
            }
        }
        let mut distinct = mds.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            mds.len(),
            "{what}: block {start:#x}: repeated MethodDescs"
        );
        let chunks: Vec<u64> = mds.iter().map(|&md| chunk_of(md)).collect();
        assert!(
            chunks.windows(2).all(|w| w[0] == w[1]),
            "{what}: block {start:#x}: MethodDescs of different chunks"
        );
    }
    eprintln!(
        "{what}: {} perf-map blocks, {entries} temporary entry points: {by_kind:?}, {} unresolved",
        blocks.len(),
        failures.len()
    );
    assert!(entries > 10_000, "{what}: {entries} entries");
    assert!(
        failures.is_empty(),
        "{what}: {:?}",
        &failures[..failures.len().min(10)]
    );
}

/// Every slot of every precode code page in the stub range lists: where this file's own
/// byte patterns see a stub or fixup precode whose data names a method, the contract finds
/// the same precode and MethodDesc; P/Invoke import stubs name P/Invoke (NDirect)
/// MethodDescs.
fn check_range_list_scan(rt: &Runtime, what: &str) {
    let (t, d) = (rt.target(), rt.descriptor());
    let stubs = precode_stubs(t, d).unwrap();
    // x64 .NET 8 templates (measured): the first 13 / 19 bytes are fixed.
    const STUB: [u8; 13] = [
        0x4c, 0x8b, 0x15, 0xf9, 0x3f, 0, 0, 0xff, 0x25, 0xfb, 0x3f, 0, 0,
    ];
    const FIXUP: [u8; 19] = [
        0xff, 0x25, 0xfa, 0x3f, 0, 0, 0x4c, 0x8b, 0x15, 0xfb, 0x3f, 0, 0, 0xff, 0x25, 0xfd, 0x3f,
        0, 0,
    ];
    // MethodDesc classification: low 3 bits of the flags word at +6; 2 = NDirect.
    let classification = |md: u64| t.read_u16(md + 6).map(|f| f & 7).unwrap_or(0xff);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut thunks: BTreeMap<u64, u64> = BTreeMap::new();
    let fixup_code_offset = u64::from(stubs.machine().fixup_code_offset.expect("FixupCodeOffset"));
    let mut sections = 0;
    for s in all_range_sections(t, d).unwrap() {
        if !s.is_range_list() {
            continue;
        }
        sections += 1;
        let mut page = s.range_begin;
        while page + PRECODE_SIZE <= s.range_end_open {
            for entry in (page..page + STUB_PAGE).step_by(PRECODE_SIZE as usize) {
                if entry + PRECODE_SIZE > page + STUB_PAGE {
                    break;
                }
                let Ok(code) = t.read_bytes(entry, 24) else {
                    break;
                };
                let mine = if code[..13] == STUB {
                    let ty = t.read_u8(entry + STUB_PAGE + 16).unwrap();
                    let md = t.read_pointer(entry + STUB_PAGE).unwrap();
                    Some((if ty == 5 { "pinvoke-import" } else { "stub" }, ty, md))
                } else if code[..19] == FIXUP {
                    Some((
                        "fixup",
                        0xff,
                        t.read_pointer(entry + STUB_PAGE + 8).unwrap(),
                    ))
                } else {
                    None
                };
                let Some((kind, ty, md)) = mine else { continue };
                if md == 0 {
                    *counts.entry(format!("{kind} (unused)")).or_default() += 1;
                    continue;
                }
                if kind == "fixup" {
                    // Unpatched fixups jump to their own second entry (FixupCodeOffset);
                    // every fixup's third slot is the same fixup thunk.
                    let target = t.read_pointer(entry + STUB_PAGE).unwrap();
                    if target == entry + fixup_code_offset {
                        *counts.entry("fixup (unpatched)".into()).or_default() += 1;
                    }
                    let thunk = t.read_pointer(entry + STUB_PAGE + 16).unwrap();
                    *thunks.entry(thunk).or_default() += 1;
                }
                let found = stubs.precode(entry).unwrap();
                if ty != 0x4c && ty != 5 && ty != 0xff {
                    assert!(
                        found.is_none(),
                        "{what}: {entry:#x}: stub data type {ty:#x}"
                    );
                    *counts.entry(format!("stub type {ty:#x}")).or_default() += 1;
                    continue;
                }
                let p = found.unwrap_or_else(|| panic!("{what}: {entry:#x} ({kind}) not found"));
                assert_eq!(p.kind.as_str(), kind, "{what}: {entry:#x}");
                assert_eq!(
                    stubs.method_desc(&p).unwrap(),
                    Some(md),
                    "{what}: {entry:#x}"
                );
                assert_eq!(
                    non_virtual_entry_to_method_desc(t, d, entry).unwrap(),
                    Some(md),
                    "{what}: {entry:#x}"
                );
                if p.kind == KnownPrecodeType::PInvokeImport {
                    assert_eq!(
                        classification(md),
                        2,
                        "{what}: {entry:#x}: not an NDirect MD"
                    );
                }
                *counts.entry(kind.to_string()).or_default() += 1;
            }
            page += STUB_PAGE;
        }
    }
    eprintln!(
        "{what}: {sections} range-list sections scanned: {counts:?}; fixup thunks {thunks:x?}"
    );
    assert_eq!(thunks.len(), 1, "{what}: fixup thunks {thunks:x?}");
    assert!(
        counts.get("fixup (unpatched)").copied().unwrap_or(0) > 1000,
        "{what}: {counts:?}"
    );
    assert!(
        counts.get("fixup").copied().unwrap_or(0) > 10_000,
        "{what}: {counts:?}"
    );
    assert!(
        counts.get("stub").copied().unwrap_or(0) > 50,
        "{what}: {counts:?}"
    );
    assert!(
        counts.get("pinvoke-import").copied().unwrap_or(0) > 50,
        "{what}: {counts:?}"
    );
}

#[test]
fn live_process() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).unwrap();
    check_manifest_entry_points(&rt, "live");
    check_temporary_entry_point_blocks(&rt, "live", None);
    check_range_list_scan(&rt, "live");
}

#[test]
fn full_dump() {
    let rt = Runtime::open_dump(testbed().dump("full"), &OpenOptions::default()).unwrap();
    check_manifest_entry_points(&rt, "full dump");
    check_temporary_entry_point_blocks(&rt, "full dump", Some("full"));
    check_range_list_scan(&rt, "full dump");
}

/// Addresses that are neither precodes nor code: no method, and no error.
#[test]
fn non_entry_points_resolve_to_nothing() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).unwrap();
    let (t, d) = (rt.target(), rt.descriptor());
    let mut checked = 0;
    for e in manifest_entries() {
        // The MethodDesc itself lives in a loader heap, not in a range section.
        assert_eq!(
            non_virtual_entry_to_method_desc(t, d, e.method_desc).unwrap(),
            None,
            "{}",
            e.what
        );
        if e.expect != Expect::Code {
            // The data page of a precode: a range-list section, but no precode code there.
            let data = e.entry + STUB_PAGE;
            assert_eq!(
                non_virtual_entry_to_method_desc(t, d, data).unwrap(),
                None,
                "{}",
                e.what
            );
            // A precode's middle is not pointer-aligned to a precode start.
            assert_eq!(
                non_virtual_entry_to_method_desc(t, d, e.entry + 3).unwrap(),
                None,
                "{}",
                e.what
            );
        }
        checked += 1;
    }
    assert!(checked > 0);
    assert_eq!(non_virtual_entry_to_method_desc(t, d, 0).unwrap(), None);
    assert_eq!(
        non_virtual_entry_to_method_desc(t, d, 0x1000).unwrap(),
        None
    );
}
