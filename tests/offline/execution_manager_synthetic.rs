//! ExecutionManager version 2 on the synthetic .NET 10-style runtime, live and from its
//! gcore dump: a v2 range section map with collectible-tagged pointers, a code heap with a
//! constant-time nibble map, stubs, a range list, a section being deleted, and a
//! ReadyToRun-like image with funclets, hot/cold splitting, thunks and a colliding
//! entry-point hash map. Every answer is checked against what the host says it laid out.

use crate::common;

use cdac::contracts::execution_manager::{execution_manager, ExecutionManager, JitType};
use cdac::runtime::{OpenOptions, Runtime};
use common::{hex, scratch, SyntheticHost};
use serde_json::Value;

fn addr(v: &Value) -> u64 {
    hex(v)
}

fn check(rt: &Runtime, host: &SyntheticHost, what: &str) {
    let r = &host.report;
    let em = execution_manager(rt.target(), rt.descriptor()).expect("ExecutionManager");
    assert_eq!(em.version(), 2, "{what}");
    // PlatformMetadata: the object the global names, no code pointer flags on x64.
    let pm = cdac::contracts::platform_metadata::platform_metadata(rt.target(), rt.descriptor())
        .unwrap();
    assert_eq!(pm.code_pointer_flags, 0, "{what}");
    assert_eq!(
        pm.precode_machine_descriptor,
        Some(addr(&r["globals"]["PlatformMetadata"])),
        "{what}"
    );
    let info = em.ee_jit_manager_info().unwrap();
    assert_eq!(info.address, addr(&r["ee_jit_manager"]), "{what}");
    assert_eq!(info.heap_list, addr(&r["code_heap"]["node"]), "{what}");

    let mut checked = 0;
    for m in r["methods"].as_array().unwrap() {
        let start = addr(&m["start"]);
        let size = m["size"].as_u64().unwrap();
        let kind = m["kind"].as_str().unwrap();
        // A fresh ExecutionManager per address exercises the full walk every time.
        let fresh = || execution_manager(rt.target(), rt.descriptor()).unwrap();
        if kind == "stub" {
            for ip in [start, start + size - 1] {
                assert_eq!(
                    fresh().code_block(ip).unwrap(),
                    None,
                    "{what}: stub {ip:#x}"
                );
            }
            continue;
        }
        let md = addr(&m["method_desc"]);
        let cold_size = m["cold_size"].as_u64().unwrap_or(0);
        for ip in [start, start + size / 2, start + size - 1] {
            let em = fresh();
            let b = em
                .code_block(ip)
                .unwrap()
                .unwrap_or_else(|| panic!("{what}: {kind} {ip:#x} not found"));
            assert_eq!(
                (b.start, b.method_desc, b.relative_offset),
                (start, md, ip - start),
                "{what}: {ip:#x}"
            );
            assert_eq!(
                b.jit_type,
                if kind == "jit" {
                    JitType::Jit
                } else {
                    JitType::R2r
                }
            );
            let region = em.method_region_info(&b).unwrap();
            assert_eq!(region.hot_size, size, "{what}: {kind} at {start:#x}");
            assert_eq!(region.cold_size, cold_size, "{what}: {start:#x}");
            assert_eq!(
                region.cold_start,
                m.get("cold_start").filter(|c| !c.is_null()).map(addr)
            );
            assert_eq!(
                em.gc_info(&b).unwrap().address,
                addr(&m["gc_info"]),
                "{what}: {start:#x}"
            );
            let version = if kind == "jit" {
                4
            } else {
                r["r2r_gc_info_version"].as_u64().unwrap() as u32
            };
            assert_eq!(em.gc_info(&b).unwrap().version, version);
            let unwind: Vec<u64> = m["unwind_infos"]
                .as_array()
                .unwrap()
                .iter()
                .map(addr)
                .collect();
            assert!(
                unwind.contains(&em.unwind_info(&b).unwrap().expect("unwind info")),
                "{what}: {ip:#x}"
            );
            if ip == start {
                assert!(!em.is_funclet(&b).unwrap());
                assert_eq!(em.unwind_info(&b).unwrap(), Some(unwind[0]));
            }
            let kinds: Vec<String> = em
                .exception_clauses(&b)
                .unwrap()
                .iter()
                .map(|c| format!("{:?}", c.kind).to_lowercase())
                .collect();
            let expected: Vec<&str> = m["clauses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            assert_eq!(kinds, expected, "{what}: clauses at {start:#x}");
            checked += 1;
        }
        for f in m["funclets"].as_array().unwrap().iter().map(addr) {
            let em = fresh();
            let b = em.code_block(f).unwrap().expect("funclet");
            assert_eq!(b.start, start, "{what}: funclet {f:#x}");
            assert!(em.is_funclet(&b).unwrap(), "{what}: funclet {f:#x}");
            assert_eq!(em.funclet_start(&b).unwrap(), f);
        }
        if let Some(cold) = m.get("cold_start").filter(|c| !c.is_null()).map(addr) {
            let em = fresh();
            for ip in [cold, cold + cold_size / 2, cold + cold_size - 1] {
                let b = em.code_block(ip).unwrap().expect("cold part");
                assert_eq!(
                    (b.start, b.method_desc),
                    (start, md),
                    "{what}: cold {ip:#x}"
                );
                // Offsets in the cold part continue after the hot code.
                assert_eq!(
                    b.relative_offset,
                    size + (ip - cold),
                    "{what}: cold {ip:#x}"
                );
            }
        }
    }
    assert!(checked >= 120, "{what}: only {checked} lookups");

    // What is not a method: thunks, the range list, the section being deleted.
    let em = execution_manager(rt.target(), rt.descriptor()).unwrap();
    for range in ["thunks", "range_list", "deleted_range"] {
        let (s, e) = (addr(&r[range]["start"]), addr(&r[range]["end"]));
        for ip in [s, (s + e) / 2, e - 1] {
            assert_eq!(em.code_block(ip).unwrap(), None, "{what}: {range} {ip:#x}");
        }
    }
    assert_eq!(
        em.code_block(addr(&r["deleted_range"]["method"])).unwrap(),
        None
    );
}

fn as_em(rt: &Runtime) -> Box<dyn ExecutionManager + '_> {
    execution_manager(rt.target(), rt.descriptor()).unwrap()
}

#[test]
fn live_synthetic_runtime() {
    let host = SyntheticHost::start(&[]);
    let rt = Runtime::attach(host.pid, &OpenOptions::default()).unwrap();
    check(&rt, &host, "live");
}

#[test]
fn gcore_of_synthetic_runtime() {
    let host = SyntheticHost::start(&[]);
    let core = scratch("em-synthetic").join("host.core");
    host.gcore(&core);
    let rt = Runtime::open_dump(&core, &OpenOptions::default()).unwrap();
    check(&rt, &host, "gcore");
    std::fs::remove_file(core).ok();
}

#[test]
fn r2r_major_11_uses_gc_info_version_4() {
    // The host lays out its image with the R2R version from the environment.
    std::env::set_var("SYNTHETIC_R2R_VERSION", "11.0");
    let host = SyntheticHost::start(&[]);
    std::env::remove_var("SYNTHETIC_R2R_VERSION");
    assert_eq!(host.report["r2r_gc_info_version"], 4);
    let rt = Runtime::attach(host.pid, &OpenOptions::default()).unwrap();
    check(&rt, &host, "live, R2R 11.0");
    let _ = as_em(&rt);
}
