//! Real .NET 8 runtimes, the latest servicing build (8.0.33) and the first (8.0.0), each in
//! the C# testbed: `cdac` must find them, tell their version and load the shipped
//! descriptor verified on their build, live and from every kind of dump; and the shipped
//! descriptor's offsets must hold in the real process. The walk below is written in the
//! test from the descriptor alone, and checked against the runtime's own perf map and the
//! MethodDesc addresses the testbed printed.

use crate::common;

use std::process::Command;

use cdac::descriptor::shipped::Fit;
use cdac::memory::Target;
use cdac::runtime::{DescriptorSource, OpenOptions, Runtime};
use common::{hex, perf_map, testbed_of, Testbed, Variant};

/// A .NET 8 build the shipped descriptor is verified on.
struct Build {
    variant: Variant,
    version: &'static str,
    file_version: &'static str,
    build_id: &'static str,
    /// The `g_dacTable` slots holding the EEJitManager's and the ReadyToRunJitManager's
    /// vtables (96 and 97 in 8.0.4; the shipped descriptor reads no slot past 22, since
    /// these move between builds).
    vtable_slots: [u64; 2],
}

/// The builds of the testbed (8.0.4, the first build verified, is no longer served).
const BUILDS: [Build; 2] = [
    Build {
        variant: Variant::Net8,
        version: "8.0.33",
        file_version: "8.0.3326.52219",
        build_id: "be4af8fbe7201f286fe16d9afb6e7ac51280e11c",
        vtable_slots: [97, 98],
    },
    Build {
        variant: Variant::Net8_0_0,
        version: "8.0.0",
        file_version: "8.0.23.53103",
        build_id: "00bbee3860797ccca61bc5bffd3a5da9a60c1108",
        vtable_slots: [95, 96],
    },
];

fn check_runtime(rt: &Runtime, build: &Build, what: &str) {
    let tb = testbed_of(build.variant);
    let v = rt.version().unwrap_or_else(|| panic!("{what}: no version"));
    assert_eq!(v.product_version, build.version, "{what}");
    assert_eq!(v.file_version, build.file_version, "{what}");
    assert_eq!(rt.descriptor().layout().pointer_size, 8, "{what}");
    assert_eq!(
        rt.descriptor_source(),
        &DescriptorSource::Shipped {
            name: "net8.0-linux-x64".into(),
            fit: Fit::VerifiedBuild
        },
        "{what}"
    );
    assert_eq!(rt.module().path, tb.libcoreclr(), "{what}");
    assert_eq!(
        rt.module().build_id.as_deref(),
        Some(build.build_id),
        "{what}"
    );
    assert_eq!(
        rt.descriptor()
            .contract("ExecutionManager")
            .and_then(|v| v.coreclr_number()),
        Some(1),
        "{what}"
    );
}

/// Base of libcoreclr.so from /proc/PID/maps, parsed here independently of the library.
fn maps_base(pid: i32, path: &std::path::Path) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    maps.lines()
        .filter(|l| l.ends_with(&*path.to_string_lossy()))
        .find(|l| l.split_whitespace().nth(2) == Some("00000000"))
        .map(|l| u64::from_str_radix(l.split('-').next().expect("range"), 16).expect("hex"))
        .expect("libcoreclr mapped at offset 0")
}

#[test]
fn live_process_reports_net8_and_shipped_descriptor() {
    for build in &BUILDS {
        let tb = testbed_of(build.variant);
        let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
        check_runtime(&rt, build, &format!("{} live", build.version));
        assert_eq!(rt.module().base, maps_base(tb.pid, &tb.libcoreclr()));
    }
}

#[test]
fn every_dump_kind_reports_the_same_runtime() {
    for build in &BUILDS {
        let tb = testbed_of(build.variant);
        let base = maps_base(tb.pid, &tb.libcoreclr());
        for kind in ["full", "gcore", "heap", "normal", "triage"] {
            let rt = Runtime::open_dump(tb.dump(kind), &OpenOptions::default())
                .unwrap_or_else(|e| panic!("{kind} dump: {e}"));
            check_runtime(&rt, build, &format!("{} {kind}", build.version));
            assert_eq!(rt.module().base, base, "{kind}");
        }
    }
}

#[test]
fn cli_info_json_has_the_documented_keys() {
    let tb = testbed_of(Variant::Net8);
    let targets = [
        vec!["--pid".to_string(), tb.pid.to_string()],
        vec!["--dump".to_string(), tb.dump("full").display().to_string()],
        vec!["--dump".to_string(), tb.dump("gcore").display().to_string()],
    ];
    for args in targets {
        let out = Command::new(crate::common::cdac_exe())
            .arg("info")
            .args(&args)
            .args(["--json", "--threads"])
            .output()
            .expect("run cdac");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(j["runtime_version"], "8.0.33", "{args:?}");
        assert_eq!(j["pointer_size"], 8);
        assert_eq!(j["descriptor_source"]["kind"], "shipped");
        assert_eq!(j["descriptor_source"]["name"], "net8.0-linux-x64");
        assert_eq!(j["contracts"]["ExecutionManager"], 1);
        assert_eq!(
            j["runtime_module"]["path"],
            tb.libcoreclr().display().to_string()
        );
        assert_eq!(
            hex(&j["runtime_module"]["base"]),
            maps_base(tb.pid, &tb.libcoreclr())
        );
        assert!(j["types_count"].as_u64().expect("types_count") >= 8);
        assert!(j["globals_count"].as_u64().expect("globals_count") >= 10);
        // The process's own thread is listed; dumps carry each thread's registers.
        let threads = j["threads"].as_array().expect("threads");
        assert!(threads.iter().any(|t| t["tid"] == tb.pid), "{args:?}");
        if args[0] == "--dump" {
            assert!(
                threads
                    .iter()
                    .all(|t| t["ip"].is_string() && t["sp"].is_string()),
                "{args:?}"
            );
        }
    }
}

#[test]
fn cli_human_output_and_error_line() {
    let tb = testbed_of(Variant::Net8);
    let out = Command::new(crate::common::cdac_exe())
        .args(["info", "--pid", &tb.pid.to_string()])
        .output()
        .expect("run cdac");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("runtime version   8.0.33"), "{text}");
    assert!(
        text.contains("descriptor        shipped: net8.0-linux-x64"),
        "{text}"
    );

    // A pid that does not exist: one line on stderr, non-zero exit.
    let out = Command::new(crate::common::cdac_exe())
        .args(["info", "--pid", "999999999"])
        .output()
        .expect("run cdac");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("cdac: error: no process with pid 999999999"),
        "{err}"
    );
}

/// What the range-section walk finds for one address.
struct Found {
    begin: u64,
    end: u64,
    flags: u32,
    jit_manager: u64,
    r2r_module: u64,
    heap_list: u64,
}

/// Looks `addr` up in the .NET 8 range section map using only descriptor offsets: five
/// levels of 256 pointers over address bits 56..17, then a fragment list.
fn find_range_section(t: &Target, rt: &Runtime, addr: u64) -> Option<Found> {
    let d = rt.descriptor();
    let map = d
        .global_value("ExecutionManagerCodeRangeMapAddress")
        .expect("global");
    let mut level = map
        + d.ty("RangeSectionMap")
            .unwrap()
            .offset("TopLevelData")
            .unwrap();
    for shift in [49u32, 41, 33, 25] {
        let entry = t.read_pointer(level + ((addr >> shift) & 0xff) * 8).ok()? & !1;
        if entry == 0 {
            return None;
        }
        level = entry;
    }
    let frag_ty = d.ty("RangeSectionFragment").unwrap();
    let mut frag = t.read_pointer(level + ((addr >> 17) & 0xff) * 8).ok()? & !1;
    let mut steps = 0;
    while frag != 0 && steps < 1000 {
        let begin = t
            .read_pointer(frag + frag_ty.offset("RangeBegin").unwrap())
            .ok()?;
        let end = t
            .read_pointer(frag + frag_ty.offset("RangeEndOpen").unwrap())
            .ok()?;
        if begin <= addr && addr < end {
            let rs = t
                .read_pointer(frag + frag_ty.offset("RangeSection").unwrap())
                .ok()?;
            let ty = d.ty("RangeSection").unwrap();
            let p = |f: &str| t.read_pointer(rs + ty.offset(f).unwrap()).expect(f);
            return Some(Found {
                begin: p("RangeBegin"),
                end: p("RangeEndOpen"),
                flags: t.read_u32(rs + ty.offset("Flags").unwrap()).expect("flags"),
                jit_manager: p("JitManager"),
                r2r_module: p("R2RModule"),
                heap_list: p("HeapList"),
            });
        }
        frag = t
            .read_pointer(frag + frag_ty.offset("Next").unwrap())
            .ok()?
            & !1;
        steps += 1;
    }
    None
}

/// Where things are in libcoreclr.so, as (address, size) relative to the load base, read
/// from the file with the `object` crate.
struct ElfFacts {
    rel_ro: (u64, u64),
    text: (u64, u64),
    /// The exported `g_dacTable`.
    dac_table: (u64, u64),
}

fn elf_facts(path: &std::path::Path) -> ElfFacts {
    use object::{Object, ObjectSection, ObjectSymbol};
    let data = std::fs::read(path).expect("read libcoreclr.so");
    let file = object::File::parse(&*data).expect("libcoreclr.so parses");
    let section = |name: &str| {
        let s = file
            .section_by_name(name)
            .unwrap_or_else(|| panic!("{name}"));
        (s.address(), s.size())
    };
    let dac_table = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok("g_dacTable"))
        .map(|s| (s.address(), s.size()))
        .expect("g_dacTable exported");
    ElfFacts {
        rel_ro: section(".data.rel.ro"),
        text: section(".text"),
        dac_table,
    }
}

/// Checks the shipped descriptor's layouts on one target: every emitted method's JIT'ed
/// code is found through the range section map, inside its code heap, and its code
/// header names the MethodDesc the testbed printed.
fn verify_layouts(rt: &Runtime, tb: &Testbed, build: &Build, dump: Option<&str>, what: &str) {
    let t = rt.target();
    let d = rt.descriptor();
    let ee_manager = t
        .read_pointer(d.global_value("EEJitManagerAddress").unwrap())
        .unwrap();
    let r2r_manager = t
        .read_pointer(d.global_value("ReadyToRunJitManagerAddress").unwrap())
        .unwrap();
    // The managers are C++ objects: their first word is a vtable in libcoreclr.so's
    // relocated read-only data (`.data.rel.ro`), one per manager class, whose first
    // entries are functions in its `.text`; g_dacTable names the same vtables, at the
    // build's slots.
    let elf = elf_facts(&rt.module().path);
    let (rel_ro, text) = (elf.rel_ro, elf.text);
    let base = rt.module().base;
    let inside = |(start, size): (u64, u64), a: u64| base + start <= a && a < base + start + size;
    let vtables = [ee_manager, r2r_manager].map(|m| t.read_pointer(m).unwrap());
    for v in vtables {
        assert!(
            inside(rel_ro, v),
            "{what}: vtable {v:#x} not in .data.rel.ro"
        );
        for slot in 0..4 {
            let f = t.read_pointer(v + slot * 8).unwrap();
            assert!(
                inside(text, f),
                "{what}: vtable {v:#x} slot {slot} = {f:#x} not in .text"
            );
        }
    }
    assert_ne!(vtables[0], vtables[1], "{what}");
    for (v, slot) in vtables.iter().zip(build.vtable_slots) {
        assert!(slot * 8 < elf.dac_table.1, "{what}: slot {slot}");
        assert_eq!(
            t.read_pointer(base + elf.dac_table.0 + slot * 8).unwrap(),
            *v,
            "{what}: g_dacTable[{slot}]"
        );
    }

    // The EEJitManager's list of code heaps, through CodeHeapListNode.Next.
    let heap_ty = d.ty("CodeHeapListNode").unwrap();
    let mut heaps = Vec::new();
    let mut node = t
        .read_pointer(
            ee_manager
                + d.ty("EEJitManager")
                    .unwrap()
                    .offset("AllCodeHeaps")
                    .unwrap(),
        )
        .unwrap();
    while node != 0 && heaps.len() < 10_000 {
        heaps.push(node);
        node = t
            .read_pointer(node + heap_ty.offset("Next").unwrap())
            .unwrap();
    }
    assert!(!heaps.is_empty(), "{what}: no code heaps");

    // The perf map as it was when the dump was taken: code JIT'ed later is not in it.
    let map = perf_map(&tb.perf_map_for(dump));
    let header_ty = d.ty("RealCodeHeader").unwrap();
    let mut checked = 0;
    for m in tb.emitted() {
        let needle = format!(
            "{}::{}(",
            m["type"].as_str().unwrap(),
            m["name"].as_str().unwrap()
        );
        let entries: Vec<_> = map.iter().filter(|(_, _, n)| n.contains(&needle)).collect();
        assert!(!entries.is_empty(), "{what}: {needle} not in the perf map");
        for (start, size, name) in entries {
            for ip in [*start, start + size / 2, start + size - 1] {
                let f = find_range_section(t, rt, ip).unwrap_or_else(|| {
                    panic!("{what}: {name} {ip:#x} not in the range section map")
                });
                assert!(f.begin <= ip && ip < f.end, "{what}: {name}");
                assert_eq!(f.flags & 2, 2, "{what}: {name} not in a code heap section");
                assert_eq!(f.jit_manager, ee_manager, "{what}: {name}");
                assert_eq!(f.r2r_module, 0, "{what}: {name}");
                let heap_start = t
                    .read_pointer(f.heap_list + heap_ty.offset("StartAddress").unwrap())
                    .unwrap();
                let heap_end = t
                    .read_pointer(f.heap_list + heap_ty.offset("EndAddress").unwrap())
                    .unwrap();
                assert!(
                    heap_start <= ip && ip < heap_end,
                    "{what}: {name} {ip:#x} outside its heap {heap_start:#x}..{heap_end:#x}"
                );
                assert!(
                    heaps.contains(&f.heap_list),
                    "{what}: {name}'s heap is not in EEJitManager.AllCodeHeaps"
                );
            }
            let header = t.read_pointer(start - 8).unwrap();
            let md = t
                .read_pointer(header + header_ty.offset("MethodDesc").unwrap())
                .unwrap();
            assert_eq!(md, hex(&m["method_desc"]), "{what}: {name}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "{what}: only {checked} code blocks checked");

    // ReadyToRun code: System.Private.CoreLib's text lies in a section owned by the R2R
    // manager, whose Module has a ReadyToRunInfo.
    let corelib = rt
        .target()
        .mapped_files()
        .iter()
        .find(|f| f.path.ends_with("System.Private.CoreLib.dll") && f.file_offset > 0)
        .expect("CoreLib mapped");
    let ip = corelib.start + 0x100;
    let f =
        find_range_section(t, rt, ip).unwrap_or_else(|| panic!("{what}: CoreLib not in the map"));
    assert_eq!(f.jit_manager, r2r_manager, "{what}");
    assert_ne!(f.r2r_module, 0, "{what}");
    let r2r_info = t
        .read_pointer(f.r2r_module + d.ty("Module").unwrap().offset("ReadyToRunInfo").unwrap())
        .unwrap();
    assert_ne!(
        r2r_info, 0,
        "{what}: CoreLib's Module has no ReadyToRunInfo"
    );
    // A real ReadyToRunInfo points at the image's READYTORUN_HEADER, whose signature is
    // "RTR" (0x00525452), within its first few fields.
    let reaches_header = (0..32u64).any(|i| {
        let p = t.read_pointer(r2r_info + i * 8).unwrap_or(0);
        p >= corelib.start.saturating_sub(corelib.file_offset)
            && t.read_u32(p).ok() == Some(0x0052_5452)
    });
    assert!(
        reaches_header,
        "{what}: Module.ReadyToRunInfo does not lead to an RTR header"
    );
}

#[test]
fn shipped_layouts_hold_in_the_live_process() {
    for build in &BUILDS {
        let tb = testbed_of(build.variant);
        let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
        verify_layouts(&rt, tb, build, None, &format!("{} live", build.version));
    }
}

#[test]
fn shipped_layouts_hold_in_full_and_gcore_dumps() {
    for build in &BUILDS {
        let tb = testbed_of(build.variant);
        for kind in ["full", "gcore"] {
            let rt = Runtime::open_dump(tb.dump(kind), &OpenOptions::default()).expect("open");
            verify_layouts(
                &rt,
                tb,
                build,
                Some(kind),
                &format!("{} {kind}", build.version),
            );
        }
    }
}

#[test]
fn small_dumps_say_memory_was_not_captured() {
    // The normal and triage dumps leave out JIT'ed code: reading it must say so.
    let tb = testbed_of(Variant::Net8);
    let map = perf_map(std::path::Path::new(
        tb.manifest["perf_map"].as_str().unwrap(),
    ));
    let (start, _, name) = map
        .iter()
        .find(|(_, _, n)| n.contains("Cdac.Testbed.Big::Large"))
        .expect("Large in perf map");
    for kind in ["normal", "triage"] {
        let rt = Runtime::open_dump(tb.dump(kind), &OpenOptions::default()).expect("open");
        let err = rt.target().read_u64(*start).expect_err(name);
        assert!(err.is_missing_memory(), "{kind}: {err}");
        assert_eq!(err.address(), *start, "{kind}");
    }
}
