//! The managed heap on real runtimes: `cdac heap --segments` finds the GC's table for
//! debuggers (`GcDacVars`) through `g_dacTable` and lists every segment (region) with its
//! kind, object range, committed and reserved ends exactly as ClrMD (Microsoft's DAC)
//! lists them, on .NET 10, 9 and 8, live, from a full dump and from a gcore; and on the
//! newest patch of each line, which the descriptors were not made from.

use crate::common;
use crate::json_schema;

use std::collections::BTreeMap;
use std::process::Command;

use common::{clrmd_probe, testbed_of, Variant};
use serde_json::Value;

/// `cdac heap --segments --json` on a target (`--pid N` or `--dump FILE`).
fn cdac_segments(target: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_cdac"))
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
    json_schema::assert_matches_schema("heap", &v);
    v
}

/// ClrMD's `heap-segments` on the same target.
fn clrmd_segments(target: &[&str]) -> Value {
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
/// GC table is where the descriptor says, of the interface version measured.
fn segments_equal_clrmd(variant: Variant, interface: &str, slot: u64) {
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
        assert_eq!(gc["interface_version"], interface, "{variant:?} {what}");
        assert_eq!(gc["dac_table_slot"], slot, "{variant:?} {what}");
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
    segments_equal_clrmd(Variant::Net10, "2.4", 19);
}

#[test]
fn segments_equal_clrmd_net9() {
    segments_equal_clrmd(Variant::Net9, "2.1", 20);
}

#[test]
fn segments_equal_clrmd_net8() {
    segments_equal_clrmd(Variant::Net8, "2.1", 20);
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
