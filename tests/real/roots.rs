//! What keeps objects alive, on .NET 10, 9 and 8 full dumps: `cdac heap --live` lists the
//! objects ClrMD reaches from the same kinds of roots (following references and dependent
//! handles), and beyond them only objects thread statics hold (which ClrMD does not read);
//! `cdac gcroot` finds, for the testbed's own objects, the holder the testbed knows (a
//! static list, a handle, the finalizer queue, a thread static), with the same root and
//! objects as SOS `gcroot`.

use crate::common::SosOutput;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::common::{self, cdac_json, clrmd_probe, testbed_of, Variant};

/// The ClrMD root kinds cdac reads (its `RootKind`s).
const KINDS: &[&str] = &[
    "StrongHandle",
    "PinnedHandle",
    "AsyncPinnedHandle",
    "SizedRefHandle",
    "FinalizerQueue",
    "ThreadStaticVar",
    "StaticVar",
];

fn clrmd_live(dump: &Path) -> BTreeSet<u64> {
    let out = Command::new(clrmd_probe())
        .arg("--dump")
        .arg(dump)
        .arg("live-objects")
        .args(KINDS)
        .output()
        .expect("run clrmd-probe");
    assert!(
        out.status.success(),
        "clrmd-probe live-objects: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| u64::from_str_radix(l.trim().trim_start_matches("0x"), 16).expect("hex"))
        .collect()
}

fn live_equals_clrmd(variant: Variant) {
    let dump = testbed_of(variant).dump("full");
    let d = dump.display().to_string();
    let ours = cdac_json(&[
        "heap",
        "--live",
        "--no-stacks",
        "--objects",
        "--json",
        "--dump",
        &d,
    ]);
    let ours: BTreeSet<u64> = ours["object_list"]
        .as_array()
        .expect("object_list")
        .iter()
        .map(|o| common::hex(&o["address"]))
        .collect();
    let theirs = clrmd_live(&dump);
    let only_ours: Vec<u64> = ours.difference(&theirs).copied().collect();
    let only_theirs: Vec<_> = theirs.difference(&ours).take(10).collect();
    eprintln!(
        "{}: {} live objects (cdac), {} (ClrMD)",
        variant.name(),
        ours.len(),
        theirs.len()
    );
    assert!(
        only_theirs.is_empty(),
        "{}: only ClrMD {only_theirs:x?}",
        variant.name()
    );
    // ClrMD 4.2 reads no thread statics here (its additional roots come back empty), and
    // .NET 9 and 10 keep them outside the handle table: what cdac marks beyond ClrMD is
    // held by thread statics alone. .NET 8 holds them with handles: nothing beyond.
    if variant == Variant::Net8 {
        assert!(
            only_ours.is_empty(),
            "net8: only cdac {:x?}",
            &only_ours[..only_ours.len().min(10)]
        );
    }
    let step = (only_ours.len() / 5).max(1);
    for &o in only_ours.iter().step_by(step) {
        let v = cdac_json(&[
            "gcroot",
            &format!("{o:#x}"),
            "--no-stacks",
            "--json",
            "--dump",
            &d,
        ]);
        assert_eq!(
            v["root"]["kind"],
            "thread_static",
            "{}: {o:#x} is live for cdac only: {v}",
            variant.name()
        );
    }
    assert!(ours.len() > 1000, "{}", variant.name());
}

#[test]
fn live_equals_clrmd_net10() {
    live_equals_clrmd(Variant::Net10);
}

#[test]
fn live_equals_clrmd_net11() {
    live_equals_clrmd(Variant::Net11);
}

#[test]
fn live_equals_clrmd_net9() {
    live_equals_clrmd(Variant::Net9);
}

#[test]
fn live_equals_clrmd_net8() {
    live_equals_clrmd(Variant::Net8);
}

/// SOS `gcroot` of each address (one SOS process each: on 10.0.14 SOS dies walking the
/// stacks after it has printed the handle roots): the handle or finalizer-queue slot rooting
/// it and the objects of the first path printed under the handle table or finalizer queue.
fn sos_gcroot(dump: &Path, targets: &[u64]) -> Vec<Option<(u64, String, Vec<u64>)>> {
    targets
        .iter()
        .map(|t| {
            let out = Command::new(common::dotnet_dump())
                .arg("analyze")
                .arg(dump)
                .args(["-c", &format!("gcroot {t:#x}"), "-c", "exit"])
                .sos_output();
            first_root_path(&String::from_utf8_lossy(&out.stdout))
        })
        .collect()
}

/// The first path under `HandleTable:` or `Finalizer Queue:` in SOS `gcroot` output.
fn first_root_path(text: &str) -> Option<(u64, String, Vec<u64>)> {
    let mut lines = text
        .lines()
        .skip_while(|l| !matches!(l.trim(), "HandleTable:" | "Finalizer Queue:"))
        .skip(1);
    let (handle, kind) = lines.next()?.trim().split_once(" (")?;
    let handle = u64::from_str_radix(handle, 16).ok()?;
    let kind = kind.trim_end_matches(')').to_string();
    let objects = lines
        .map_while(|l| l.trim().strip_prefix("-> "))
        .filter_map(|rest| u64::from_str_radix(rest.split_whitespace().next()?, 16).ok())
        .collect();
    Some((handle, kind, objects))
}

/// The only object of a type used nowhere else (or the first of several).
fn first_of(dump: &str, type_name: &str) -> u64 {
    let pattern = format!("^{}$", type_name.replace('.', "\\."));
    let v = cdac_json(&[
        "heap",
        "--objects",
        "--json",
        "--type",
        &pattern,
        "--dump",
        dump,
    ]);
    common::hex(&v["object_list"][0]["address"])
}

/// The object a handle holds.
fn handle_target(dump: &str, handle: u64) -> u64 {
    let v = cdac_json(&["handles", "--json", "--dump", dump]);
    v["handles"]
        .as_array()
        .expect("handles")
        .iter()
        .find(|h| common::hex(&h["address"]) == handle)
        .map(|h| common::hex(&h["object"]))
        .expect("the manifest's handle is listed")
}

fn gcroot_finds_the_holders(variant: Variant) {
    let tb = testbed_of(variant);
    let dump = tb.dump("full");
    let d = dump.display().to_string();
    let heap = &tb.manifest["heap"];
    let handles = heap["handles"].as_array().expect("handles");
    let strong = handles
        .iter()
        .find(|h| h["kind"] == "strong")
        .expect("a strong handle");
    let targets = [
        first_of(&d, heap["marker_type"].as_str().expect("marker_type")),
        first_of(&d, heap["field_shapes"]["type"].as_str().expect("type")),
        handle_target(&d, common::hex(&strong["handle"])),
        // Unreachable, its finalizer not yet run: the long weak handle still leads to it.
        handle_target(
            &d,
            common::hex(&heap["finalizer_queued"]["weak_long_handle"]),
        ),
    ];
    let queued = targets[3];
    let sos = sos_gcroot(&dump, &targets);
    assert_eq!(
        sos.len(),
        targets.len(),
        "{}: SOS answered {sos:?}",
        variant.name()
    );
    let mut strong_seen = false;
    for (t, theirs) in targets.iter().zip(&sos) {
        let what = format!("{} {t:#x}", variant.name());
        let ours = cdac_json(&["gcroot", &format!("{t:#x}"), "--json", "--dump", &d]);
        assert_eq!(ours["found"], true, "{what}: {ours}");
        let path: Vec<u64> = ours["path"]
            .as_array()
            .expect("path")
            .iter()
            .map(|s| common::hex(&s["address"]))
            .collect();
        assert_eq!(path.last(), Some(t), "{what}");
        let root = common::hex(&ours["root"]["address"]);
        let (handle, kind, objects) = theirs
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: SOS found no root"));
        assert_eq!(root, *handle, "{what}: {ours}");
        // SOS names a finalizer-queue slot "finalizer root".
        assert_eq!(
            ours["root"]["kind"].as_str().map(|k| k
                .replace("finalizer_queue", "finalizer root")
                .replace('_', " ")),
            Some(kind.clone()),
            "{what}"
        );
        assert_eq!(&path, objects, "{what}: {ours}");
        // The holders the testbed knows: the marker list's array, then the marker.
        let steps = ours["path"].as_array().expect("path");
        if *t == targets[0] {
            let via: Vec<&str> = steps.iter().filter_map(|s| s["via"].as_str()).collect();
            assert!(via.contains(&"_items"), "{what}: {via:?}");
            assert!(
                steps
                    .iter()
                    .any(|s| s["type_name"].as_str().is_some_and(|n| n.starts_with(
                        "System.Collections.Generic.List`1[Cdac.Testbed.Heap.UniqueMarker]"
                    ))),
                "{what}"
            );
        }
        if root == common::hex(&strong["handle"]) {
            strong_seen = true;
            assert_eq!(
                path,
                vec![*t],
                "{what}: the strong handle holds its target directly"
            );
        }
    }
    let ours = cdac_json(&["gcroot", &format!("{queued:#x}"), "--json", "--dump", &d]);
    assert_eq!(
        ours["root"]["kind"],
        "finalizer_queue",
        "{}: only the finalizer queue holds the QueuedForFinalization: {ours}",
        variant.name()
    );
    assert_eq!(ours["path"].as_array().map(Vec::len), Some(1), "{ours}");

    // Held only by a [ThreadStatic] field: .NET 9 and 10 keep thread statics in the
    // thread's own storage, .NET 8 in arrays held by strong handles.
    let marker = first_of(&d, heap["thread_static"]["type"].as_str().expect("type"));
    let ours = cdac_json(&["gcroot", &format!("{marker:#x}"), "--json", "--dump", &d]);
    let threads = cdac_json(&["threads", "--json", "--dump", &d]);
    let os_id = threads["threads"]
        .as_array()
        .and_then(|ts| {
            ts.iter()
                .find(|t| t["name"] == heap["thread_static"]["thread_name"])
        })
        .and_then(|t| t["os_id"].as_i64());
    if variant == Variant::Net8 {
        assert_eq!(
            ours["root"]["kind"],
            "strong_handle",
            "{}: {ours}",
            variant.name()
        );
    } else {
        assert_eq!(
            ours["root"]["kind"],
            "thread_static",
            "{}: {ours}",
            variant.name()
        );
        assert!(
            os_id.is_some(),
            "{}: no thread cdac-thread-static",
            variant.name()
        );
        assert_eq!(ours["root"]["thread"].as_i64(), os_id, "{ours}");
    }
    let path = ours["path"].as_array().expect("path");
    assert_eq!(
        path.last().map(|s| common::hex(&s["address"])),
        Some(marker),
        "{ours}"
    );
    assert!(
        !ours["roots_not_read"]
            .as_array()
            .expect("roots_not_read")
            .iter()
            .any(|r| r == "thread statics"),
        "{ours}"
    );
    assert!(
        strong_seen,
        "{}: the manifest's strong handle roots its HandleTarget",
        variant.name()
    );
}

#[test]
fn gcroot_finds_the_holders_net10() {
    gcroot_finds_the_holders(Variant::Net10);
}

#[test]
fn gcroot_finds_the_holders_net11() {
    gcroot_finds_the_holders(Variant::Net11);
}

#[test]
fn gcroot_finds_the_holders_net9() {
    gcroot_finds_the_holders(Variant::Net9);
}

#[test]
fn gcroot_finds_the_holders_net8() {
    gcroot_finds_the_holders(Variant::Net8);
}

/// The roots SOS `gcroot` (its "unique roots") lists for `target`: handle and
/// finalizer-queue slots, and stack slots (0 for a register).
fn sos_roots(dump: &Path, target: u64, stacks: bool) -> BTreeSet<u64> {
    let command = if stacks {
        format!("gcroot {target:#x}")
    } else {
        format!("gcroot -nostacks {target:#x}")
    };
    let out = Command::new(common::dotnet_dump())
        .arg("analyze")
        .arg(dump)
        .args(["-c", &command, "-c", "exit"])
        .sos_output();
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            // "00007f9261e413e8 (strong handle)" under HandleTable / Finalizer Queue.
            if let Some((a, kind)) = l.split_once(" (") {
                if kind.ends_with(')') && !a.contains(' ') {
                    return hex(a);
                }
            }
            // "rbp-108: 00007f91d07fda68" (a stack slot) or "rbx: ..." (a register).
            let (place, value) = l.split_once(": ")?;
            if place.starts_with('r') && !place.contains(' ') && hex(value).is_some() {
                return Some(if place.contains(['+', '-']) {
                    hex(value)?
                } else {
                    0
                });
            }
            None
        })
        .collect()
}

/// `gcroot --all` finds a path from exactly the roots SOS `gcroot` lists for the testbed's
/// objects (a marker in a static list, the strong handle's target, the object only the
/// finalizer queue holds): with stack roots on .NET 9 and 8, without them on .NET 10
/// (where SOS stops walking the stacks at the thread parked in a filter).
fn gcroot_all_equals_sos(variant: Variant, stacks: bool) {
    let tb = testbed_of(variant);
    let dump = tb.dump("full");
    let d = dump.display().to_string();
    let heap = &tb.manifest["heap"];
    let strong = heap["handles"]
        .as_array()
        .expect("handles")
        .iter()
        .find(|h| h["kind"] == "strong")
        .expect("a strong handle");
    let targets = [
        first_of(&d, heap["marker_type"].as_str().expect("marker_type")),
        handle_target(&d, common::hex(&strong["handle"])),
        handle_target(
            &d,
            common::hex(&heap["finalizer_queued"]["weak_long_handle"]),
        ),
    ];
    let mut total = 0;
    for t in targets {
        let what = format!("{} {t:#x}", variant.name());
        let mut args = vec![
            "gcroot".to_string(),
            format!("{t:#x}"),
            "--all".into(),
            "--max-paths".into(),
            "1000".into(),
            "--json".into(),
            "--dump".into(),
            d.clone(),
        ];
        if !stacks {
            args.push("--no-stacks".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ours = cdac_json(&args);
        let paths = ours["all_paths"].as_array().expect("all_paths");
        let roots: BTreeSet<u64> = paths
            .iter()
            .map(|p| common::hex(&p["root"]["address"]))
            .collect();
        assert_eq!(roots.len(), paths.len(), "{what}: one path per root");
        for p in paths {
            let steps = p["path"].as_array().expect("path");
            assert_eq!(
                steps.last().map(|s| common::hex(&s["address"])),
                Some(t),
                "{what}: {p}"
            );
        }
        assert_eq!(roots, sos_roots(&dump, t, stacks), "{what}: cdac, then SOS");
        total += roots.len();
    }
    eprintln!(
        "{}: {total} roots of 3 objects equal SOS's (stacks: {stacks})",
        variant.name()
    );
}

#[test]
fn gcroot_all_equals_sos_net10() {
    gcroot_all_equals_sos(Variant::Net10, false);
}

#[test]
fn gcroot_all_equals_sos_net11() {
    gcroot_all_equals_sos(Variant::Net11, false);
}

#[test]
fn gcroot_all_equals_sos_net9() {
    gcroot_all_equals_sos(Variant::Net9, true);
}

#[test]
fn gcroot_all_equals_sos_net8() {
    gcroot_all_equals_sos(Variant::Net8, true);
}
