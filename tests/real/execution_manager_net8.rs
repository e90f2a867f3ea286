//! The ExecutionManager on the real .NET 8 runtime (8.0.33, or 8.0.0 with
//! `CDAC_NET8_VARIANT=net8.0.0`), checked against the runtime's own perf map (an
//! independent record of every JIT'ed method's start and size) and the MethodDesc addresses
//! and exception clauses the testbed emitted, live and on its dumps.

use crate::common;

use cdac::contracts::execution_manager::exception_clauses::ClauseKind;
use cdac::contracts::execution_manager::{execution_manager, JitType};
use cdac::runtime::{OpenOptions, Runtime};
use common::{hex, perf_map, testbed};

/// Managed perf-map entries whose code is still live: a later entry overlapping an earlier
/// one means the earlier code was freed and its memory reused (dynamic methods).
fn live_entries(dump: Option<&str>) -> (Vec<(u64, u64, String)>, usize) {
    let map = perf_map(&testbed().perf_map_for(dump));
    let managed: Vec<_> = map
        .into_iter()
        .filter(|(_, size, n)| !n.starts_with("stub<") && *size > 0)
        .collect();
    let mut live = Vec::new();
    let mut stale = 0;
    for (i, (start, size, name)) in managed.iter().enumerate() {
        let overlapped = managed[i + 1..]
            .iter()
            .any(|(s, z, _)| *s < start + size && *start < s + z);
        if overlapped {
            stale += 1;
        } else {
            live.push((*start, *size, name.clone()));
        }
    }
    (live, stale)
}

fn check_every_perf_map_entry(rt: &Runtime, what: &str, dump: Option<&str>) {
    let em = execution_manager(rt.target(), rt.descriptor()).expect("ExecutionManager");
    assert_eq!(
        em.version(),
        1,
        "the shipped .NET 8 descriptor names version 1"
    );
    let (live, stale) = live_entries(dump);
    assert!(
        live.len() > 1000,
        "{what}: only {} live entries",
        live.len()
    );
    let mut failures = Vec::new();
    let mut with_debug = 0;
    let mut freed_dynamic = 0;
    for (start, size, name) in &live {
        // A dynamic method (LCG) is collectible: its code may have been freed since the
        // perf map logged it (its MethodDesc recycled for another), with nothing
        // overlapping it in the map. Such an entry no longer starts a code block.
        if name.contains("dynamicClass::") {
            let em = execution_manager(rt.target(), rt.descriptor()).expect("ExecutionManager");
            if em
                .code_block(*start)
                .ok()
                .flatten()
                .is_none_or(|b| b.start != *start)
            {
                freed_dynamic += 1;
                continue;
            }
        }
        for ip in [*start, start + size / 2, start + size - 1] {
            // A fresh ExecutionManager per address: the full walk, not the cache of
            // resolved methods (checked separately below).
            let em = execution_manager(rt.target(), rt.descriptor()).expect("ExecutionManager");
            match em.code_block(ip) {
                Ok(Some(b)) => {
                    let hot = em.method_region_info(&b).map(|r| r.hot_size);
                    // .NET 8 JIT debug info starts with a flag byte (bit 0: OSR patchpoint).
                    let debug = em.debug_info(&b).unwrap();
                    if debug.address != 0 {
                        with_debug += 1;
                        let flags = rt.target().read_u8(debug.address).unwrap();
                        if !matches!(debug.has_flag_byte, Ok(true)) || flags > 3 {
                            failures.push(format!(
                                "{name}: debug info flag byte {flags:#x}, reported {:?}",
                                debug.has_flag_byte
                            ));
                        }
                    }
                    if b.start != *start
                        || hot.as_ref().ok() != Some(size)
                        || b.jit_type != JitType::Jit
                        || b.relative_offset != ip - start
                    {
                        failures.push(format!(
                            "{name} {ip:#x}: start {:#x} hot {hot:?} {:?}",
                            b.start, b.jit_type
                        ));
                    }
                }
                other => failures.push(format!("{name} {ip:#x}: {other:?}")),
            }
        }
    }
    eprintln!(
        "{what}: {} live perf-map entries checked at 3 addresses each, {} stale, {freed_dynamic} freed dynamic methods, {} failures; {} lookups found debug info with its flag byte",
        live.len(),
        stale,
        failures.len(),
        with_debug
    );
    assert!(
        freed_dynamic * 100 <= live.len(),
        "{what}: {freed_dynamic} dynamic methods gone of {}",
        live.len()
    );
    assert!(
        with_debug * 10 >= live.len() * 3 * 9,
        "{what}: only {with_debug} lookups found debug info"
    );
    // The cache of resolved methods answers exactly as the full walk does.
    let cached = execution_manager(rt.target(), rt.descriptor()).unwrap();
    for (start, size, name) in &live {
        for ip in [*start, start + size / 2, start + size - 1, start + size / 3] {
            let fresh = execution_manager(rt.target(), rt.descriptor()).unwrap();
            assert_eq!(
                cached.code_block(ip).unwrap(),
                fresh.code_block(ip).unwrap(),
                "{what}: {name} {ip:#x}"
            );
        }
    }
    assert!(
        failures.is_empty(),
        "{what}: {} failures, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

fn check_emitted_methods(rt: &Runtime, what: &str, dump: Option<&str>) {
    let em = execution_manager(rt.target(), rt.descriptor()).unwrap();
    let (live, _) = live_entries(dump);
    let mut checked = 0;
    for m in testbed().emitted() {
        let needle = format!(
            "{}::{}(",
            m["type"].as_str().unwrap(),
            m["name"].as_str().unwrap()
        );
        let expected: Vec<&str> = m["clauses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        for (start, size, name) in live.iter().filter(|(_, _, n)| n.contains(&needle)) {
            let b = em.code_block(start + size / 2).unwrap().expect("resolves");
            assert_eq!(b.method_desc, hex(&m["method_desc"]), "{what}: {name}");
            let clauses = em.exception_clauses(&b).unwrap();
            let kinds: Vec<&str> = clauses
                .iter()
                .filter(|c| !c.duplicated)
                .map(|c| match c.kind {
                    ClauseKind::Typed => "typed",
                    ClauseKind::Finally => "finally",
                    ClauseKind::Fault => "fault",
                    ClauseKind::Filter => "filter",
                })
                .collect();
            // Optimized code may clone a finally into a fault clause.
            let same = kinds.len() == expected.len()
                && kinds
                    .iter()
                    .zip(&expected)
                    .all(|(k, e)| k == e || (*e == "finally" && *k == "fault"));
            assert!(
                same,
                "{what}: {name}: clauses {kinds:?}, emitted {expected:?}"
            );
            for c in &clauses {
                assert!(
                    u64::from(c.try_end) <= *size && u64::from(c.handler_end) <= *size,
                    "{what}: {name}: {c:?}"
                );
            }
            // Every handler begins a funclet: looking it up gives a funclet of the method.
            for c in clauses.iter().filter(|c| !c.duplicated) {
                let h = em
                    .code_block(start + u64::from(c.handler_start))
                    .unwrap()
                    .expect("handler");
                assert_eq!(h.start, *start, "{what}: {name}");
                assert!(
                    em.is_funclet(&h).unwrap(),
                    "{what}: {name}: handler not a funclet"
                );
                assert_eq!(
                    em.funclet_start(&h).unwrap(),
                    start + u64::from(c.handler_start)
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 20,
        "{what}: only {checked} emitted code versions checked"
    );
}

fn check_ready_to_run(rt: &Runtime, what: &str) {
    let em = execution_manager(rt.target(), rt.descriptor()).unwrap();
    // The largest ReadyToRun image section is CoreLib's.
    let sections = cdac::contracts::execution_manager::range_section_map::all_range_sections(
        rt.target(),
        rt.descriptor(),
    )
    .unwrap();
    let image = sections
        .iter()
        .filter(|s| s.r2r_module != 0)
        .max_by_key(|s| s.range_end_open - s.range_begin)
        .expect("a ReadyToRun image");
    assert!(
        rt.target()
            .mapped_files()
            .iter()
            .any(|f| f.path.ends_with("System.Private.CoreLib.dll")
                && f.start <= image.range_begin
                && image.range_begin < f.end),
        "{what}: the largest R2R image is not CoreLib"
    );
    let corelib = (image.range_begin, image.range_end_open);
    // Sample the image: addresses in methods the runtime has used resolve as r2r, with a
    // MethodDesc, a start at or before the address and a hot size that covers it.
    let (mut resolved, mut unresolved, mut with_debug) = (0, 0, 0);
    let debug_section = r2r_section(rt, image.r2r_module, 105);
    let step = ((corelib.1 - corelib.0) / 4000).max(1);
    let mut ip = corelib.0;
    while ip < corelib.1 {
        if let Ok(Some(b)) = em.code_block(ip) {
            assert_eq!(b.jit_type, JitType::R2r, "{what}: {ip:#x}");
            assert_ne!(b.method_desc, 0);
            let region = em.method_region_info(&b).unwrap();
            // The method's code (funclets included) covers the address.
            assert!(
                b.start <= ip && ip < b.start + region.hot_size,
                "{what}: {ip:#x} {b:?} {region:?}"
            );
            assert_eq!(b.relative_offset, ip - b.start);
            let gc = em.gc_info(&b).unwrap();
            assert_eq!(gc.version, 2, "R2R 9.1 (.NET 8) code uses GCInfo version 2");
            assert!(em.unwind_info(&b).unwrap().is_some());
            // Debug info lies in the image's DebugInfo section (105).
            let debug = em.debug_info(&b).unwrap();
            assert!(matches!(debug.has_flag_byte, Ok(false)), "{debug:?}");
            if debug.address != 0 {
                let rva = debug.address - image.range_begin;
                assert!(
                    debug_section.0 <= rva && rva < debug_section.0 + debug_section.1,
                    "{what}: {ip:#x} debug info at RVA {rva:#x}, section {debug_section:x?}"
                );
                with_debug += 1;
            }
            resolved += 1;
        } else {
            unresolved += 1;
        }
        ip += step;
    }
    eprintln!("{what}: of the sampled CoreLib addresses, {resolved} resolved as ReadyToRun code, {unresolved} are in methods never used (or not code)");
    assert!(
        resolved >= 50,
        "{what}: only {resolved} CoreLib addresses resolved"
    );
    eprintln!("{what}: {with_debug} of them have debug info in section 105");
    assert!(
        with_debug * 10 >= resolved * 9,
        "{what}: only {with_debug} of {resolved} have debug info"
    );
}

#[test]
fn live_process() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).unwrap();
    check_every_perf_map_entry(&rt, "live", None);
    check_emitted_methods(&rt, "live", None);
    check_ready_to_run(&rt, "live");
}

#[test]
fn full_and_gcore_dumps() {
    for kind in ["full", "gcore"] {
        let rt = Runtime::open_dump(testbed().dump(kind), &OpenOptions::default()).unwrap();
        check_every_perf_map_entry(&rt, kind, Some(kind));
        check_emitted_methods(&rt, kind, Some(kind));
        check_ready_to_run(&rt, kind);
    }
}

#[test]
fn small_dumps_report_code_as_not_captured() {
    for kind in ["normal", "triage"] {
        let (live, _) = live_entries(Some(kind));
        let (start, _, _) = &live[live.len() / 2];
        let rt = Runtime::open_dump(testbed().dump(kind), &OpenOptions::default()).unwrap();
        let em = execution_manager(rt.target(), rt.descriptor()).unwrap();
        match em.code_block(*start) {
            Err(e) => assert!(e.to_string().contains("not captured"), "{kind}: {e}"),
            Ok(r) => panic!("{kind}: expected a not-captured error, got {r:?}"),
        }
    }
}

#[test]
fn cli_ip2md_json() {
    let tb = testbed();
    let (live, _) = live_entries(None);
    let (start, size, _) = &live[0];
    let out = std::process::Command::new(crate::common::cdac_exe())
        .args(["ip2md", "--json", "--pid", &tb.pid.to_string()])
        .arg(format!("{:#x}", start + size - 1))
        .arg("0x10")
        .output()
        .unwrap();
    // 0x10 is not managed code: answered as such, and the exit code says one was not.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &j.as_array().unwrap()[0];
    for key in [
        "address",
        "method_desc",
        "start",
        "relative_offset",
        "jit_type",
        "size",
        "cold_start",
        "cold_size",
        "gc_info",
        "gc_info_version",
        "unwind_info",
        "debug_info",
        "is_funclet",
        "funclet_start",
    ] {
        assert!(a.get(key).is_some(), "missing {key} in {a}");
    }
    assert_eq!(hex(&a["start"]), *start);
    assert_eq!(a["size"].as_u64(), Some(*size));
    assert_eq!(a["relative_offset"].as_u64(), Some(size - 1));
    assert_eq!(a["jit_type"], "jit");
    assert_eq!(a["gc_info_version"], 2);
    let b = &j.as_array().unwrap()[1];
    assert_eq!(b["address"], "0x10");
    assert!(b["error"].is_string());
}

/// (RVA, size) of section `kind` of an R2R image, read here from the image's core header:
/// Module → ReadyToRunInfo → Composite → Header → { Flags, NumberOfSections, sections }.
fn r2r_section(rt: &Runtime, module: u64, kind: u32) -> (u64, u64) {
    let (t, d) = (rt.target(), rt.descriptor());
    let off = |ty: &str, f: &str| d.ty(ty).unwrap().offset(f).unwrap();
    let info = t
        .read_pointer(module + off("Module", "ReadyToRunInfo"))
        .unwrap();
    let composite = t
        .read_pointer(info + off("ReadyToRunInfo", "Composite"))
        .unwrap();
    let header = t
        .read_pointer(composite + off("ReadyToRunCoreInfo", "Header"))
        .unwrap();
    let count = t.read_u32(header + 4).unwrap() as u64;
    (0..count)
        .map(|i| header + 8 + i * 12)
        .find(|s| t.read_u32(*s).unwrap() == kind)
        .map(|s| {
            (
                t.read_u32(s + 4).unwrap() as u64,
                t.read_u32(s + 8).unwrap() as u64,
            )
        })
        .expect("section")
}

#[test]
fn cli_ip2md_reads_addresses_from_stdin_and_eh_unwind_run() {
    use std::io::Write;
    let tb = testbed();
    let (live, _) = live_entries(None);
    let input: String = live
        .iter()
        .take(50)
        .map(|(s, _, _)| format!("{s:#x}\n"))
        .collect();
    let mut child = std::process::Command::new(crate::common::cdac_exe())
        .args(["ip2md", "--json", "--pid", &tb.pid.to_string(), "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let starts: Vec<u64> = j
        .as_array()
        .unwrap()
        .iter()
        .map(|a| hex(&a["start"]))
        .collect();
    let expected: Vec<u64> = live.iter().take(50).map(|(s, _, _)| *s).collect();
    assert_eq!(starts, expected, "one object per address, in order");

    // eh and unwind on an emitted method with a filter.
    let (start, _, _) = live
        .iter()
        .find(|(_, _, n)| n.contains("Handlers::TryFilter("))
        .unwrap();
    let run = |cmd: &str| {
        let out = std::process::Command::new(crate::common::cdac_exe())
            .args([
                cmd,
                "--json",
                "--pid",
                &tb.pid.to_string(),
                &format!("{start:#x}"),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let eh = run("eh");
    assert_eq!(eh["clauses"][0]["kind"], "filter");
    assert!(eh["clauses"][0]["filter_offset"].is_u64());
    let unwind = run("unwind");
    assert_eq!(hex(&unwind["begin"]), *start);
    assert_eq!(unwind["unwind"]["version"], 1);
    assert!(!unwind["unwind"]["codes"].as_array().unwrap().is_empty());
}
