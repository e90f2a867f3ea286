//! The managed heap on real runtimes: `cdac heap --segments` finds the GC's table for
//! debuggers (`GcDacVars`) through `g_dacTable` and lists every segment (region) with its
//! kind, object range, committed and reserved ends exactly as ClrMD (Microsoft's DAC)
//! lists them, on .NET 10, 9 and 8, live, from a full dump and from a gcore; and on the
//! newest patch of each line, which the descriptors were not made from.

use crate::common;
use crate::common::SosOutput;
use crate::json_schema;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::{clrmd, clrmd_probe, testbed_of, Variant};
use serde_json::Value;

/// `cdac heap --segments --json` on a target (`--pid N` or `--dump FILE`).
fn cdac_segments(target: &[&str]) -> Value {
    let out = Command::new(crate::common::cdac_exe())
        .args(["heap", "--segments", "--json"])
        .args(target)
        .output()
        .expect("run cdac");
    assert!(
        out.status.success(),
        "cdac heap --segments {target:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    json_schema::assert_matches_schema("heap-segments", &v);
    v
}

/// ClrMD's `heap-segments` on the same target.
fn clrmd_segments(target: &[&str]) -> Value {
    // ClrMD attaches to a live process with ptrace: not while a dump is being taken.
    let _tracing = target.contains(&"--pid").then(common::tracing_lock);
    let out = Command::new(clrmd_probe())
        .args(target)
        .arg("heap-segments")
        .output()
        .expect("run clrmd-probe");
    assert!(
        out.status.success(),
        "clrmd-probe heap-segments {target:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("clrmd-probe JSON")
}

/// ClrMD's segment kind in cdac's words.
fn kind_of_clrmd(kind: &str) -> &str {
    match kind {
        "Generation0" => "gen0",
        "Generation1" => "gen1",
        "Generation2" => "gen2",
        "Ephemeral" => "ephemeral",
        "Large" => "loh",
        "Pinned" => "poh",
        "Frozen" => "frozen",
        other => panic!("ClrMD segment kind {other}"),
    }
}

/// Segments keyed by first object: (kind, end of objects, committed end, reserved end).
type Segments = BTreeMap<String, (String, String, String, String)>;

fn ours_by_start(v: &Value) -> Segments {
    v["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| {
            let field = |k: &str| s[k].as_str().expect(k).to_string();
            (
                field("start"),
                (
                    field("kind"),
                    field("end"),
                    field("committed"),
                    field("reserved"),
                ),
            )
        })
        .collect()
}

fn theirs_by_start(v: &Value) -> Segments {
    v["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| {
            let field = |k: &str| s[k].as_str().expect(k).to_string();
            (
                field("object_start"),
                (
                    kind_of_clrmd(s["kind"].as_str().expect("kind")).to_string(),
                    field("object_end"),
                    field("committed_end"),
                    field("reserved_end"),
                ),
            )
        })
        .collect()
}

/// The segments of a testbed, live, from a full dump and from a gcore, equal ClrMD's; the
/// GC table is where the descriptor says, of the interface version measured (`None`: the
/// GC is described by its own sub-descriptor, .NET 11).
fn segments_equal_clrmd(variant: Variant, interface: Option<&str>, slot: u64) {
    let tb = testbed_of(variant);
    let pid = tb.pid.to_string();
    let full = tb.dump("full");
    let gcore = tb.dump("gcore");
    let targets: [(&str, Vec<&str>); 3] = [
        ("live", vec!["--pid", &pid]),
        ("full dump", vec!["--dump", full.to_str().expect("path")]),
        ("gcore", vec!["--dump", gcore.to_str().expect("path")]),
    ];
    for (what, target) in targets {
        let ours = cdac_segments(&target);
        let theirs = clrmd_segments(&target);
        let gc = &ours["gc"];
        match interface {
            Some(interface) => {
                assert_eq!(gc["described_by"], "GcDacVars", "{variant:?} {what}");
                assert_eq!(gc["interface_version"], interface, "{variant:?} {what}");
                assert_eq!(gc["dac_table_slot"], slot, "{variant:?} {what}");
            }
            None => {
                assert_eq!(gc["described_by"], "sub-descriptor", "{variant:?} {what}");
                assert!(gc["dac_table_slot"].is_null(), "{variant:?} {what}");
            }
        }
        assert_eq!(gc["found_by_search"], false, "{variant:?} {what}");
        assert_eq!(gc["server"], theirs["is_server"], "{variant:?} {what}");
        assert_eq!(gc["server"], false, "the testbed runs workstation GC");
        assert_eq!(
            gc["regions"], true,
            "{variant:?} {what}: regions by default"
        );
        assert_eq!(gc["structures_invalid_count"], 0, "{variant:?} {what}");
        let heaps = ours["heaps"].as_array().expect("heaps");
        assert_eq!(
            heaps.len() as u64,
            theirs["sub_heaps"].as_u64().expect("sub_heaps")
        );
        let (o, t) = (ours_by_start(&ours), theirs_by_start(&theirs));
        assert_eq!(o, t, "{variant:?} {what}: cdac's segments, then ClrMD's");
        // Every kind a regions heap has: three generations, LOH, POH and frozen objects.
        for kind in ["gen0", "gen1", "gen2", "loh", "poh", "frozen"] {
            assert!(
                o.values().any(|s| s.0 == kind),
                "{variant:?} {what}: no {kind} segment in {o:?}"
            );
        }
        eprintln!("{variant:?} {what}: {} segments equal ClrMD's", o.len());
    }
}

#[test]
fn segments_equal_clrmd_net10() {
    segments_equal_clrmd(Variant::Net10, Some("2.4"), 19);
}

#[test]
fn segments_equal_clrmd_net11() {
    segments_equal_clrmd(Variant::Net11, None, 0);
}

#[test]
fn segments_equal_clrmd_net9() {
    segments_equal_clrmd(Variant::Net9, Some("2.1"), 20);
}

#[test]
fn segments_equal_clrmd_net8() {
    segments_equal_clrmd(Variant::Net8, Some("2.1"), 20);
}

/// The newest patch of each line (not what the descriptors were made from) keeps the GC's
/// table at the same slot, and its segments equal ClrMD's (from a full dump).
#[test]
fn segments_on_the_latest_patches() {
    for (variant, interface, slot) in [
        (Variant::Net10Latest, "2.4", 19),
        (Variant::Net9Latest, "2.1", 20),
        (Variant::Net8Latest, "2.1", 20),
    ] {
        let full = testbed_of(variant).dump("full");
        let target = ["--dump", full.to_str().expect("path")];
        let ours = cdac_segments(&target);
        assert_eq!(ours["gc"]["interface_version"], interface, "{variant:?}");
        assert_eq!(ours["gc"]["dac_table_slot"], slot, "{variant:?}");
        assert_eq!(ours["gc"]["found_by_search"], false, "{variant:?}");
        assert_eq!(
            ours_by_start(&ours),
            theirs_by_start(&clrmd_segments(&target)),
            "{variant:?}"
        );
    }
}

/// `cdac ARGS` (ending in `--json`) on a target; the JSON it prints.
fn cdac_heap_like(args: &[&str], target: &[&str]) -> Value {
    common::cdac_json(&[args, target].concat())
}

/// `cdac heap ARGS --json` on a target; the report.
fn cdac_heap(args: &[&str], target: &[&str]) -> Value {
    common::cdac_json(&[&["heap"], args, &["--json"], target].concat())
}

/// Every object as (address, MethodTable, size, free).
type Objects = BTreeSet<(u64, u64, u64, bool)>;

fn hex_of(v: &Value) -> u64 {
    common::hex(v)
}

fn cdac_objects(target: &[&str]) -> Objects {
    let v = cdac_heap(&["--objects"], target);
    // The schema check on the first objects (the checker is slow on 100,000 of them).
    let mut head = v.clone();
    if let Some(list) = head["object_list"].as_array_mut() {
        list.truncate(100);
    }
    json_schema::assert_matches_schema("heap", &head);
    assert_eq!(v["problems"], serde_json::json!([]), "{target:?}");
    v["object_list"]
        .as_array()
        .expect("object_list")
        .iter()
        .map(|o| {
            (
                hex_of(&o["address"]),
                hex_of(&o["method_table"]),
                o["size"].as_u64().expect("size"),
                o["name"] == "Free",
            )
        })
        .collect()
}

/// ClrMD's `heap-objects` lines: address, MethodTable, size, free flag.
fn clrmd_objects(target: &[&str]) -> Objects {
    let _tracing = target.contains(&"--pid").then(common::tracing_lock);
    let out = Command::new(clrmd_probe())
        .args(target)
        .arg("heap-objects")
        .output()
        .expect("run clrmd-probe");
    assert!(
        out.status.success(),
        "clrmd-probe heap-objects {target:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "{l}");
            (
                hex(f[0]),
                hex(f[1]),
                f[2].parse().expect("size"),
                f[3] == "1",
            )
        })
        .collect()
}

/// The objects of a testbed's heap equal ClrMD's, object for object (address, MethodTable,
/// size, free or not), from a full dump and a gcore, and live (the testbed is idle).
fn objects_equal_clrmd(variant: Variant) {
    let tb = testbed_of(variant);
    let pid = tb.pid.to_string();
    let full = tb.dump("full");
    let gcore = tb.dump("gcore");
    let targets: [(&str, Vec<&str>); 3] = [
        ("full dump", vec!["--dump", full.to_str().expect("path")]),
        ("gcore", vec!["--dump", gcore.to_str().expect("path")]),
        ("live", vec!["--pid", &pid]),
    ];
    for (what, target) in targets {
        let ours = cdac_objects(&target);
        let theirs = clrmd_objects(&target);
        let only_ours: Vec<_> = ours.difference(&theirs).take(5).collect();
        let only_theirs: Vec<_> = theirs.difference(&ours).take(5).collect();
        assert!(
            only_ours.is_empty() && only_theirs.is_empty(),
            "{variant:?} {what}: {} objects, ClrMD {}; only cdac's (first 5): {only_ours:x?}; \
             only ClrMD's: {only_theirs:x?}",
            ours.len(),
            theirs.len()
        );
        let free = ours.iter().filter(|o| o.3).count();
        assert!(
            ours.len() > 30_000 && free > 0,
            "{variant:?} {what}: {} objects, {free} free",
            ours.len()
        );
        eprintln!(
            "{variant:?} {what}: {} objects ({free} free) equal ClrMD's",
            ours.len()
        );
    }
}

#[test]
fn objects_equal_clrmd_net10() {
    objects_equal_clrmd(Variant::Net10);
}

#[test]
fn objects_equal_clrmd_net11() {
    objects_equal_clrmd(Variant::Net11);
}

#[test]
fn objects_equal_clrmd_net9() {
    objects_equal_clrmd(Variant::Net9);
}

#[test]
fn objects_equal_clrmd_net8() {
    objects_equal_clrmd(Variant::Net8);
}

/// SOS `dumpheap -stat` rows: MethodTable → (count, total size), and the total line.
fn sos_stat(dump: &Path) -> (BTreeMap<u64, (u64, u64)>, (u64, u64)) {
    let out = Command::new(common::dotnet_dump())
        .arg("analyze")
        .arg(dump)
        .args(["-c", "dumpheap -stat", "-c", "exit"])
        .sos_output();
    assert!(
        out.status.success(),
        "dotnet-dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let number = |s: &str| s.replace(',', "").parse::<u64>().expect("SOS number");
    let mut rows = BTreeMap::new();
    let mut total = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() == Some(&"Total") && f.len() >= 4 {
            total = Some((number(f[1]), number(f[3])));
        } else if f.len() >= 4 && f[0].len() >= 8 && u64::from_str_radix(f[0], 16).is_ok() {
            if let (Ok(_), Ok(_)) = (
                f[1].replace(',', "").parse::<u64>(),
                f[2].replace(',', "").parse::<u64>(),
            ) {
                rows.insert(
                    u64::from_str_radix(f[0], 16).expect("MT"),
                    (number(f[1]), number(f[2])),
                );
            }
        }
    }
    (rows, total.expect("SOS's Total line"))
}

/// `cdac heap` (per-type statistics) equals SOS `dumpheap -stat` on a full dump, type for
/// type by MethodTable (names are spelt differently for generics), and in total.
fn stat_equals_sos(variant: Variant) {
    let full = testbed_of(variant).dump("full");
    let target = ["--dump", full.to_str().expect("path")];
    let ours = cdac_heap(&[], &target);
    json_schema::assert_matches_schema("heap", &ours);
    let rows: BTreeMap<u64, (u64, u64)> = ours["types"]
        .as_array()
        .expect("types")
        .iter()
        .map(|t| {
            (
                hex_of(&t["method_table"]),
                (
                    t["count"].as_u64().expect("count"),
                    t["total_size"].as_u64().expect("size"),
                ),
            )
        })
        .collect();
    let (mut sos_rows, sos_total) = sos_stat(&full);
    // SOS sometimes lists a thread's allocation context as an object of MethodTable 0
    // and size 0 and steps over the object allocated right after it (seen on .NET 8 in a
    // dump taken while a thread allocated: SOS's row 0 and one System.Object fewer). ClrMD
    // and cdac list that object: there, cdac's rows must equal ClrMD's, and SOS's may
    // differ only by such rows.
    let zero_rows = sos_rows.remove(&0).map_or(0, |(n, _)| n);
    if rows != sos_rows && zero_rows > 0 {
        let mut clrmd: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for (_, mt, size, _) in clrmd_objects(&target) {
            let e = clrmd.entry(mt).or_insert((0, 0));
            e.0 += 1;
            e.1 += size;
        }
        assert_eq!(rows, clrmd, "{variant:?}: cdac's rows, then ClrMD's");
        let extra: u64 = rows
            .iter()
            .map(|(mt, (n, _))| n.saturating_sub(sos_rows.get(mt).map_or(0, |r| r.0)))
            .sum();
        assert!(
            extra <= zero_rows,
            "{variant:?}: {extra} objects beyond SOS's, {zero_rows} empty context row(s)"
        );
        eprintln!("{variant:?}: SOS's {zero_rows} row(s) of MethodTable 0; cdac equals ClrMD");
        return;
    }
    assert_eq!(rows, sos_rows, "{variant:?}: cdac's rows, then SOS's");
    assert_eq!(
        (
            ours["objects"].as_u64().expect("objects"),
            ours["total_size"].as_u64().expect("total")
        ),
        sos_total,
        "{variant:?}"
    );
    // Every type but a few is named (the free objects as SOS names them).
    let types = ours["types"].as_array().expect("types");
    let unnamed: Vec<&Value> = types
        .iter()
        .filter(|t| {
            t["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("<MethodTable"))
        })
        .collect();
    assert!(unnamed.is_empty(), "{variant:?}: unnamed types {unnamed:?}");
    assert!(types.iter().any(|t| t["name"] == "Free"), "{variant:?}");
    assert!(
        types.iter().any(|t| t["name"] == "System.String"),
        "{variant:?}"
    );
    eprintln!("{variant:?}: {} types, {sos_total:?} equal SOS", rows.len());
}

#[test]
fn stat_equals_sos_net10() {
    stat_equals_sos(Variant::Net10);
}

#[test]
fn stat_equals_sos_net11() {
    stat_equals_sos(Variant::Net11);
}

#[test]
fn stat_equals_sos_net9() {
    stat_equals_sos(Variant::Net9);
}

#[test]
fn stat_equals_sos_net8() {
    stat_equals_sos(Variant::Net8);
}

/// A GC configuration: its name, environment, whether it is server GC, and whether DATAS
/// is on as cdac reports it (`None`: the GC does not say).
type Flavour = (
    &'static str,
    &'static [(&'static str, &'static str)],
    bool,
    Option<bool>,
);

/// Server GC (with DATAS, the default on .NET 9 and 10, and without it: two heaps on two
/// cores) and the segments GC (`libclrgc.so`): the flavour is named, segments and objects
/// equal ClrMD's on a full dump, and the handles include the testbed's and ClrMD's (which
/// misses some under DATAS).
#[test]
fn gc_flavours_equal_clrmd_net10() {
    gc_flavours_equal_clrmd(Variant::Net10, &SERVER_AND_SEGMENTS);
}

/// Server GC (with DATAS, the default on .NET 9 and 10, and without it: two heaps on two
/// cores) and the segments GC (`libclrgc.so`): the flavour is named, segments and objects
/// equal ClrMD's on a full dump, and the handles include the testbed's and ClrMD's (which
/// misses some under DATAS).
#[test]
fn gc_flavours_equal_clrmd_net11() {
    gc_flavours_equal_clrmd(Variant::Net11, &SERVER_AND_SEGMENTS);
}

/// .NET 9: server GC (with DATAS, its default there too: one heap on two cores; its GC
/// interface, 2.1, does not say so, and cdac reports `dynamic_adaptation` as unknown,
/// null) and the segments GC.
#[test]
fn gc_flavours_equal_clrmd_net9() {
    const NET9_SERVER: Flavour = ("server", &[("DOTNET_gcServer", "1")], true, None);
    gc_flavours_equal_clrmd(Variant::Net9, &[NET9_SERVER]);
    gc_flavours_equal_clrmd(Variant::Net9, &SERVER_AND_SEGMENTS[2..]);
}

/// .NET 8: server GC (without DATAS, its default there) and the segments GC.
#[test]
fn gc_flavours_equal_clrmd_net8() {
    gc_flavours_equal_clrmd(Variant::Net8, &[NET8_SERVER]);
    gc_flavours_equal_clrmd(Variant::Net8, &SERVER_AND_SEGMENTS[2..]);
}

/// Server GC with DATAS, server GC without it, the segments GC.
const SERVER_AND_SEGMENTS: [Flavour; 3] = [
    (
        "server, DATAS",
        &[("DOTNET_gcServer", "1")],
        true,
        Some(true),
    ),
    (
        "server without DATAS",
        &[
            ("DOTNET_gcServer", "1"),
            ("DOTNET_GCDynamicAdaptationMode", "0"),
        ],
        true,
        Some(false),
    ),
    (
        "segments",
        &[("DOTNET_GCName", "libclrgc.so")],
        false,
        Some(false),
    ),
];

/// .NET 8's server GC: no DATAS unless asked for, and its GC interface (2.1) does not say.
const NET8_SERVER: Flavour = ("server", &[("DOTNET_gcServer", "1")], true, None);

fn gc_flavours_equal_clrmd(variant: Variant, flavours: &[Flavour]) {
    for &(what, env, server, datas) in flavours {
        let started = std::time::Instant::now();
        let tb = common::start_testbed_env(variant, &[], env);
        let full = tb.dump("full");
        let target = ["--dump", full.to_str().expect("path")];
        let ours = cdac_segments(&target);
        let theirs = clrmd_segments(&target);
        assert_eq!(ours["gc"]["server"], server, "{what}");
        assert_eq!(ours["gc"]["dynamic_adaptation"].as_bool(), datas, "{what}");
        assert_eq!(ours["gc"]["regions"], what != "segments", "{what}");
        assert_eq!(
            ours["heaps"].as_array().expect("heaps").len() as u64,
            theirs["sub_heaps"].as_u64().expect("sub_heaps"),
            "{what}"
        );
        assert_eq!(ours_by_start(&ours), theirs_by_start(&theirs), "{what}");
        let (o, t) = (cdac_objects(&target), clrmd_objects(&target));
        assert!(o == t, "{what}: {} objects, ClrMD {}", o.len(), t.len());
        // Handles: every one the testbed made is found at its address; cdac finds every
        // handle ClrMD finds, and more under server GC with DATAS, where ClrMD reads one
        // handle table per heap and the runtime keeps one per processor (runtime#124872).
        let ours = cdac_heap_like(&["handles", "--json"], &target);
        let addresses: BTreeSet<u64> = ours["handles"]
            .as_array()
            .expect("handles")
            .iter()
            .map(|h| hex_of(&h["address"]))
            .collect();
        for h in tb.manifest["heap"]["handles"]
            .as_array()
            .expect("manifest handles")
        {
            let slot = hex_of(&h["handle"]) & !1;
            assert!(
                addresses.contains(&slot),
                "{what}: the testbed's handle {h} not listed"
            );
        }
        let out = {
            // ClrMD attaches to a live process with ptrace: not while a dump is being taken.
            let _tracing = target.contains(&"--pid").then(common::tracing_lock);
            Command::new(clrmd_probe())
                .args(target)
                .arg("handles")
                .output()
                .expect("run clrmd-probe")
        };
        let theirs: BTreeSet<u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).expect("hex"))
            .collect();
        assert!(
            theirs.is_subset(&addresses),
            "{what}: ClrMD lists handles cdac does not"
        );
        if datas == Some(true) && ours["handles"].as_array().map_or(0, Vec::len) > theirs.len() {
            eprintln!(
                "{what}: {} handles, ClrMD {} (its DATAS undercount)",
                addresses.len(),
                theirs.len()
            );
        }
        eprintln!(
            "{variant:?} {what}: {} heap(s), {} segments, {} objects equal ClrMD's ({:?})",
            ours["heaps"].as_array().map_or(0, Vec::len),
            ours["segments"].as_array().map_or(0, Vec::len),
            o.len(),
            started.elapsed()
        );
    }
}

/// ClrMD's name of a handle kind cdac names `kind` (ClrMD 4.2 has no name for 10, the weak
/// interior pointer, and prints the number).
fn clrmd_kind(kind: &str) -> &str {
    match kind {
        "weak_short" => "WeakShort",
        "weak_long" => "WeakLong",
        "strong" => "Strong",
        "pinned" => "Pinned",
        "ref_counted" => "RefCounted",
        "dependent" => "Dependent",
        "async_pinned" => "AsyncPinned",
        "sized_ref" => "SizedRef",
        "weak_interior_pointer" => "10",
        other => panic!("handle kind {other}"),
    }
}

/// Handles as (address, object, ClrMD kind, dependent secondary or 0).
type Handles = BTreeSet<(u64, u64, String, u64)>;

/// The handles and finalization queues of a testbed equal ClrMD's: every handle (address,
/// object, kind, a dependent handle's secondary), and the objects registered for and ready
/// for finalization; from a full dump and a gcore.
fn handles_and_finalizer_equal_clrmd(variant: Variant) {
    let tb = testbed_of(variant);
    for kind in ["full", "gcore"] {
        let dump = tb.dump(kind);
        let target = ["--dump", dump.to_str().expect("path")];
        let run = |args: &[&str]| -> Value {
            let out = Command::new(crate::common::cdac_exe())
                .args(args)
                .arg("--json")
                .args(target)
                .output()
                .expect("run cdac");
            assert!(
                out.status.success(),
                "cdac {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
            json_schema::assert_matches_schema(args[0], &v);
            v
        };
        let ours: Handles = run(&["handles"])["handles"]
            .as_array()
            .expect("handles")
            .iter()
            .map(|h| {
                (
                    hex_of(&h["address"]),
                    hex_of(&h["object"]),
                    clrmd_kind(h["kind"].as_str().expect("kind")).to_string(),
                    if h["kind"] == "dependent" {
                        h["secondary"]
                            .as_str()
                            .map_or(0, |_| hex_of(&h["secondary"]))
                    } else {
                        0
                    },
                )
            })
            .collect();
        let out = {
            // ClrMD attaches to a live process with ptrace: not while a dump is being taken.
            let _tracing = target.contains(&"--pid").then(common::tracing_lock);
            Command::new(clrmd_probe())
                .args(target)
                .arg("handles")
                .output()
                .expect("run clrmd-probe")
        };
        assert!(
            out.status.success(),
            "clrmd-probe handles: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
        let theirs: Handles = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let kind = f[2].to_string();
                let dependent = if kind == "Dependent" { hex(f[3]) } else { 0 };
                (hex(f[0]), hex(f[1]), kind, dependent)
            })
            .collect();
        assert_eq!(
            ours, theirs,
            "{variant:?} {kind}: cdac's handles, then ClrMD's"
        );
        for k in ["Strong", "Pinned", "WeakShort", "WeakLong", "Dependent"] {
            assert!(
                ours.iter().any(|h| h.2 == k),
                "{variant:?} {kind}: no {k} handle"
            );
        }

        let fq = run(&["finalizequeue", "--objects"]);
        let part_objects = |ready: bool| -> BTreeSet<u64> {
            fq["entries"]
                .as_array()
                .expect("entries")
                .iter()
                .filter(|e| e["part"].as_str().is_some_and(|p| p.starts_with("ready")) == ready)
                .map(|e| hex_of(&e["object"]))
                .collect()
        };
        let theirs = clrmd(&dump, &["finalizer"]);
        let set = |k: &str| -> BTreeSet<u64> {
            theirs[k].as_array().expect(k).iter().map(hex_of).collect()
        };
        // ClrMD's finalizable objects include those ready for their finalizer (the
        // testbed keeps some there: its finalizer thread is parked).
        let all: BTreeSet<u64> = part_objects(false)
            .union(&part_objects(true))
            .copied()
            .collect();
        assert_eq!(all, set("registered"), "{variant:?} {kind}: registered");
        assert!(
            !part_objects(true).is_empty(),
            "{variant:?} {kind}: the testbed's QueuedForFinalization is ready"
        );
        assert_eq!(
            part_objects(true),
            set("ready"),
            "{variant:?} {kind}: ready"
        );
        assert!(
            fq["registered"].as_u64().expect("registered") > 50,
            "{variant:?} {kind}"
        );
        eprintln!(
            "{variant:?} {kind}: {} handles, {} registered for finalization equal ClrMD's",
            ours.len(),
            fq["registered"]
        );
    }
}

#[test]
fn handles_and_finalizer_equal_clrmd_net10() {
    handles_and_finalizer_equal_clrmd(Variant::Net10);
}

#[test]
fn handles_and_finalizer_equal_clrmd_net11() {
    handles_and_finalizer_equal_clrmd(Variant::Net11);
}

#[test]
fn handles_and_finalizer_equal_clrmd_net9() {
    handles_and_finalizer_equal_clrmd(Variant::Net9);
}

#[test]
fn handles_and_finalizer_equal_clrmd_net8() {
    handles_and_finalizer_equal_clrmd(Variant::Net8);
}

/// The facts the testbed wrote about its own heap (`heap` in its manifest): the type with
/// exactly 1,000 instances, the large, pinned and frozen objects at their addresses with
/// their sizes and kinds of segment, every handle at its `GCHandle.ToIntPtr` with its kind
/// and its object's type (a dependent handle's secondary too), and the finalizable objects;
/// live, from a full dump and from a gcore.
fn manifest_heap_facts(variant: Variant) {
    let tb = testbed_of(variant);
    let facts = &tb.manifest["heap"];
    let pid = tb.pid.to_string();
    let full = tb.dump("full");
    let gcore = tb.dump("gcore");
    let targets: [(&str, Vec<&str>); 3] = [
        ("live", vec!["--pid", &pid]),
        ("full dump", vec!["--dump", full.to_str().expect("path")]),
        ("gcore", vec!["--dump", gcore.to_str().expect("path")]),
    ];
    for (what, target) in targets {
        let cdac = |args: &[&str]| -> Value {
            let out = Command::new(crate::common::cdac_exe())
                .args(args)
                .arg("--json")
                .args(&target)
                .output()
                .expect("run cdac");
            assert!(
                out.status.success(),
                "cdac {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).expect("JSON")
        };
        // Exactly 1,000 objects of the marker type, found by MethodTable and by name.
        let mt = facts["marker_method_table"].as_str().expect("marker MT");
        let by_mt = cdac(&["heap", "--mt", mt]);
        assert_eq!(
            by_mt["objects"], facts["marker_count"],
            "{variant:?} {what}"
        );
        assert_eq!(
            by_mt["types"][0]["name"], facts["marker_type"],
            "{variant:?} {what}"
        );
        let by_name = cdac(&["heap", "--type", "^Cdac\\.Testbed\\.Heap\\.UniqueMarker$"]);
        assert_eq!(
            by_name["objects"], facts["marker_count"],
            "{variant:?} {what}"
        );
        // The objects that do not move, in segments of their kind, with their sizes.
        for (key, generation, args) in [
            (
                "large_array",
                "loh",
                vec!["heap", "--objects", "--gen", "loh"],
            ),
            (
                "pinned_array",
                "poh",
                vec!["heap", "--objects", "--gen", "poh"],
            ),
            (
                "frozen_string",
                "frozen",
                vec![
                    "heap",
                    "--objects",
                    "--gen",
                    "frozen",
                    "--type",
                    "^System\\.String$",
                ],
            ),
        ] {
            let list = cdac(&args);
            let fact = &facts[key];
            let found = list["object_list"]
                .as_array()
                .expect("object_list")
                .iter()
                .find(|o| o["address"] == fact["address"])
                .unwrap_or_else(|| {
                    panic!(
                        "{variant:?} {what}: {key} at {} not listed",
                        fact["address"]
                    )
                });
            assert_eq!(found["size"], fact["size"], "{variant:?} {what}: {key}");
            assert_eq!(found["generation"], generation, "{variant:?} {what}: {key}");
        }
        // Every handle the testbed made, at its address, of its kind, holding its object.
        let handles = cdac(&["handles"]);
        let secondaries = cdac(&["heap", "--objects", "--type", "DependentSecondary$"]);
        let secondary = secondaries["object_list"][0]["address"].clone();
        for h in facts["handles"].as_array().expect("handles") {
            // GCHandle.ToIntPtr sets the low bit of a pinned handle: the slot is the rest.
            let slot = hex_of(&h["handle"]) & !1;
            let found = handles["handles"]
                .as_array()
                .expect("handles")
                .iter()
                .find(|x| hex_of(&x["address"]) == slot)
                .unwrap_or_else(|| panic!("{variant:?} {what}: handle {h} not listed"));
            assert_eq!(found["kind"], h["kind"], "{variant:?} {what}: {h}");
            let type_name = h["type"].as_str().expect("type").replace('+', ".");
            assert_eq!(
                found["type_name"].as_str().map(|t| t.replace('+', ".")),
                Some(type_name),
                "{variant:?} {what}: {h}"
            );
            if h["kind"] == "dependent" {
                assert_eq!(
                    found["secondary"], secondary,
                    "{variant:?} {what}: the secondary"
                );
            }
        }
        // The finalizable objects are registered for finalization.
        let fq = cdac(&["finalizequeue"]);
        let marker = fq["types"]
            .as_array()
            .expect("types")
            .iter()
            .find(|t| t["type_name"] == facts["finalizable_type"])
            .unwrap_or_else(|| panic!("{variant:?} {what}: no finalizable markers"));
        assert_eq!(
            marker["registered"], facts["finalizable_count"],
            "{variant:?} {what}"
        );
        eprintln!("{variant:?} {what}: the manifest's heap facts hold");
    }
}

#[test]
fn manifest_heap_facts_net10() {
    manifest_heap_facts(Variant::Net10);
}

#[test]
fn manifest_heap_facts_net11() {
    manifest_heap_facts(Variant::Net11);
}

#[test]
fn manifest_heap_facts_net9() {
    manifest_heap_facts(Variant::Net9);
}

#[test]
fn manifest_heap_facts_net8() {
    manifest_heap_facts(Variant::Net8);
}

/// `heap --free`: the free bytes per generation add up to the `Free` type's total, the
/// total bytes per generation to the heap's, and every large block listed is a free object
/// of at least 512 KiB followed by a live one (all from the same walk and its object list).
#[test]
fn free_space_adds_up_net10() {
    let full = testbed_of(Variant::Net10).dump("full");
    let target = ["--dump", full.to_str().expect("path")];
    let stat = cdac_heap(&["--free"], &target);
    json_schema::assert_matches_schema("heap", &stat);
    let f = &stat["fragmentation"];
    let gens = f["generations"].as_object().expect("generations");
    let sum = |k: &str| -> u64 { gens.values().map(|g| g[k].as_u64().expect(k)).sum() };
    let free_row = stat["types"]
        .as_array()
        .expect("types")
        .iter()
        .find(|t| t["name"] == "Free")
        .expect("free objects");
    assert_eq!(sum("free"), free_row["total_size"].as_u64().unwrap());
    assert_eq!(sum("total"), stat["total_size"].as_u64().unwrap());
    for g in ["gen0", "gen1", "gen2", "loh", "poh", "frozen"] {
        assert!(gens.contains_key(g), "{g} missing from {gens:?}");
    }
    let objects = cdac_heap(&["--objects"], &target);
    let by_address: BTreeMap<u64, &Value> = objects["object_list"]
        .as_array()
        .expect("object_list")
        .iter()
        .map(|o| (hex_of(&o["address"]), o))
        .collect();
    for b in f["blocks"].as_array().expect("blocks") {
        let free = by_address[&hex_of(&b["address"])];
        assert_eq!(free["name"], "Free");
        assert!(b["size"].as_u64().unwrap() >= 512 * 1024);
        let (&next, o) = by_address
            .range(hex_of(&b["address"]) + 1..)
            .next()
            .expect("an object after the block");
        assert_eq!(next, hex_of(&b["followed_by"]));
        assert_ne!(o["name"], "Free");
    }
}

/// `heap --free`: the free bytes per generation add up to the `Free` type's total, the
/// total bytes per generation to the heap's, and every large block listed is a free object
/// of at least 512 KiB followed by a live one (all from the same walk and its object list).
#[test]
fn free_space_adds_up_net11() {
    let full = testbed_of(Variant::Net11).dump("full");
    let target = ["--dump", full.to_str().expect("path")];
    let stat = cdac_heap(&["--free"], &target);
    json_schema::assert_matches_schema("heap", &stat);
    let f = &stat["fragmentation"];
    let gens = f["generations"].as_object().expect("generations");
    let sum = |k: &str| -> u64 { gens.values().map(|g| g[k].as_u64().expect(k)).sum() };
    let free_row = stat["types"]
        .as_array()
        .expect("types")
        .iter()
        .find(|t| t["name"] == "Free")
        .expect("free objects");
    assert_eq!(sum("free"), free_row["total_size"].as_u64().unwrap());
    assert_eq!(sum("total"), stat["total_size"].as_u64().unwrap());
    for g in ["gen0", "gen1", "gen2", "loh", "poh", "frozen"] {
        assert!(gens.contains_key(g), "{g} missing from {gens:?}");
    }
    let objects = cdac_heap(&["--objects"], &target);
    let by_address: BTreeMap<u64, &Value> = objects["object_list"]
        .as_array()
        .expect("object_list")
        .iter()
        .map(|o| (hex_of(&o["address"]), o))
        .collect();
    for b in f["blocks"].as_array().expect("blocks") {
        let free = by_address[&hex_of(&b["address"])];
        assert_eq!(free["name"], "Free");
        assert!(b["size"].as_u64().unwrap() >= 512 * 1024);
        let (&next, o) = by_address
            .range(hex_of(&b["address"]) + 1..)
            .next()
            .expect("an object after the block");
        assert_eq!(next, hex_of(&b["followed_by"]));
        assert_ne!(o["name"], "Free");
    }
}
