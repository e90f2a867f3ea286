//! `cdac locks` on .NET 10, 9 and 8, live and on `createdump --full` and gcore dumps,
//! against the testbed's own account of its locks (`locks` in its manifest: a two-monitor
//! deadlock, a monitor held three times with three threads waiting, a
//! `System.Threading.Lock` deadlock on .NET 9 and 10) and against SOS `syncblk`.

use crate::common::SosOutput;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::common::{self, cdac_json, testbed_of, Testbed, Variant};
use crate::json_schema;
use serde_json::Value;

fn target(tb: &Testbed, kind: Option<&str>) -> Vec<String> {
    match kind {
        None => vec!["--pid".into(), tb.pid.to_string()],
        Some(k) => vec!["--dump".into(), tb.dump(k).display().to_string()],
    }
}

/// `cdac locks --json` on a target. A live process may allocate while its heap is walked
/// (a segment's walk then stops at the fresh allocation: exit 1, the problem named); a
/// dump answers in full.
fn locks(t: &[String]) -> Value {
    let mut args = vec!["locks", "--json"];
    args.extend(t.iter().map(String::as_str));
    let out = Command::new(common::cdac_exe())
        .args(&args)
        .output()
        .expect("run cdac");
    let v: Value = serde_json::from_slice(&out.stdout).expect("locks JSON");
    json_schema::assert_matches_schema("locks", &v);
    let problems = v["problems"].as_array().expect("problems");
    let live = t.first().is_some_and(|a| a == "--pid");
    if live {
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?}: {out:?}"
        );
        for p in problems {
            assert!(
                p.as_str()
                    .is_some_and(|p| p.starts_with("heap walk stopped")),
                "{args:?}: {p}"
            );
        }
    } else {
        assert_eq!(out.status.code(), Some(0), "{args:?}: {v}");
        assert!(problems.is_empty(), "{args:?}: {v}");
    }
    v
}

/// The lock whose object has type `type_name`, or for a `System.Threading.Lock`, the Lock
/// whose object `held_in` (the object of type `type_name` holds it in its `Gate` field).
fn lock_of<'a>(v: &'a Value, t: &[String], type_name: &str) -> &'a Value {
    let locks = v["locks"].as_array().expect("locks");
    if let Some(l) = locks.iter().find(|l| l["type_name"] == type_name) {
        return l;
    }
    // A Lock is found through its holder's Gate field.
    let pattern = format!("^{}$", type_name.replace('.', "\\."));
    let mut args = vec!["heap", "--objects", "--json", "--type", &pattern];
    args.extend(t.iter().map(String::as_str));
    let holder = cdac_json(&args)["object_list"][0]["address"]
        .as_str()
        .expect("the holder object")
        .to_string();
    let mut args = vec!["obj", holder.as_str(), "--json"];
    args.extend(t.iter().map(String::as_str));
    let fields = cdac_json(&args);
    let gate = fields["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .find(|f| f["name"] == "Gate")
        .map(|f| common::hex(&f["value"]["address"]))
        .expect("a Gate field");
    locks
        .iter()
        .find(|l| common::hex(&l["object"]) == gate)
        .unwrap_or_else(|| panic!("no lock for {type_name}'s Gate {gate:#x}: {v}"))
}

fn managed_ids(threads: &Value) -> BTreeSet<u64> {
    threads
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| t["managed_id"].as_u64().expect("managed_id"))
        .collect()
}

/// A deadlock of the manifest (`monitor_deadlock` or `lock_deadlock`) is reported: exactly
/// its two threads, each waiting for the lock the manifest says, held by the other.
fn deadlock_found(v: &Value, t: &[String], facts: &Value, what: &str) {
    let expected = facts["threads"].as_array().expect("threads");
    let ids: BTreeSet<u64> = managed_ids(&facts["threads"]);
    let cycle = v["deadlocks"]
        .as_array()
        .expect("deadlocks")
        .iter()
        .find(|d| {
            d["waits"].as_array().is_some_and(|w| {
                w.iter()
                    .map(|w| w["thread"]["managed_id"].as_u64().unwrap_or(0))
                    .collect::<BTreeSet<_>>()
                    == ids
            })
        })
        .unwrap_or_else(|| panic!("{what}: no deadlock of threads {ids:?}: {}", v["deadlocks"]));
    let waits = cycle["waits"].as_array().expect("waits");
    assert_eq!(waits.len(), 2, "{what}: {cycle}");
    for e in expected {
        let id = e["managed_id"].as_u64();
        let w = waits
            .iter()
            .find(|w| w["thread"]["managed_id"].as_u64() == id)
            .expect("the thread");
        assert_eq!(w["thread"]["os_id"], e["os_tid"], "{what}: {w}");
        let wanted = lock_of(v, t, e["waits_for"].as_str().expect("waits_for"));
        assert_eq!(w["waits_for"], wanted["object"], "{what}: {w}");
        let held = lock_of(v, t, e["holds"].as_str().expect("holds"));
        assert_eq!(held["owner"]["managed_id"].as_u64(), id, "{what}: {held}");
        assert_eq!(held["times_entered"], 1, "{what}: {held}");
    }
}

fn facts_hold(variant: Variant) {
    let tb = testbed_of(variant);
    for kind in [None, Some("full"), Some("gcore")] {
        let what = format!("{} {}", variant.name(), kind.unwrap_or("live"));
        facts_hold_on(tb, &target(tb, kind), &what);
    }
}

/// The manifest's lock facts on target `t` of testbed `tb`: both deadlocks, the waiter of
/// a pulse, the contended monitor with its owner and waiters, the thin lock.
pub(crate) fn facts_hold_on(tb: &Testbed, t: &[String], what: &str) {
    let facts = &tb.manifest["locks"];
    let t = t.to_vec();
    let v = locks(&t);
    assert_eq!(v["stacks_read"], true, "{what}");

    deadlock_found(&v, &t, &facts["monitor_deadlock"], what);
    if !facts["lock_deadlock"].is_null() {
        deadlock_found(&v, &t, &facts["lock_deadlock"], what);
    }
    let deadlocks = v["deadlocks"].as_array().expect("deadlocks").len();
    let expected = 1 + usize::from(!facts["lock_deadlock"].is_null());
    assert_eq!(deadlocks, expected, "{what}: {}", v["deadlocks"]);

    // The thread parked in Monitor.Wait(Monitors.Cond) while it holds Monitors.Held:
    // it waits for a pulse of a free monitor, and owns the one the enter-blocked thread
    // waits for. (.NET 11 keeps the waiters in the monitor's Lock's Condition, tied to
    // their threads through their stacks.)
    let waiter = tb.manifest["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["kind"] == "monitor_wait")
        .expect("a monitor_wait thread");
    let pulsed: Vec<&Value> = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            l["waiting_for_pulse"]
                .as_array()
                .is_some_and(|w| w.iter().any(|t| t["os_id"] == waiter["os_tid"]))
        })
        .collect();
    assert_eq!(pulsed.len(), 1, "{what}: {}", v["locks"]);
    assert!(pulsed[0]["owner"].is_null(), "{what}: {}", pulsed[0]);
    assert_eq!(pulsed[0]["kind"], "sync_block", "{what}: {}", pulsed[0]);
    assert!(
        v["locks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["owner"]["os_id"] == waiter["os_tid"] && l["object"] != pulsed[0]["object"]),
        "{what}: the waiting thread holds no other lock: {}",
        v["locks"]
    );

    other_locks_hold(tb, &v, &t, what);
}

/// The contended monitor (its owner, entered three times, and its three waiters) and the
/// thin lock of the heap facts.
fn other_locks_hold(tb: &Testbed, v: &Value, t: &[String], what: &str) {
    let c = &tb.manifest["locks"]["contended"];
    let l = lock_of(v, t, c["type"].as_str().expect("type"));
    assert_eq!(l["kind"], "sync_block", "{what}: {l}");
    assert_eq!(
        l["owner"]["managed_id"], c["owner"]["managed_id"],
        "{what}: {l}"
    );
    assert_eq!(l["owner"]["os_id"], c["owner"]["os_tid"], "{what}: {l}");
    assert_eq!(l["times_entered"], c["lock_count"], "{what}: {l}");
    assert_eq!(l["waiters_counted"], 3, "{what}: {l}");
    assert_eq!(
        managed_ids(&l["waiting"]),
        managed_ids(&c["waiters"]),
        "{what}: {l}"
    );

    // The thin lock of the heap facts, three times by its thread, nobody waiting.
    let thin = &tb.manifest["heap"]["thin_lock"];
    let l = lock_of(v, t, thin["type"].as_str().expect("type"));
    assert_eq!(l["kind"], "thin_lock", "{what}: {l}");
    assert_eq!(
        l["owner"]["managed_id"], thin["owner_managed_id"],
        "{what}: {l}"
    );
    assert_eq!(l["times_entered"], thin["lock_count"], "{what}: {l}");
    assert!(
        l["waiting"].as_array().expect("waiting").is_empty(),
        "{what}: {l}"
    );
    eprintln!(
        "{what}: {} locks, {} deadlock(s), {} objects scanned",
        v["locks"].as_array().map_or(0, Vec::len),
        v["deadlocks"].as_array().map_or(0, Vec::len),
        v["objects_scanned"]
    );
}

#[test]
fn facts_hold_net10() {
    facts_hold(Variant::Net10);
}

#[test]
fn facts_hold_net11() {
    facts_hold(Variant::Net11);
}

#[test]
fn facts_hold_net9() {
    facts_hold(Variant::Net9);
}

#[test]
fn facts_hold_net8() {
    facts_hold(Variant::Net8);
}

/// A monitor as SOS `syncblk` lists it: (sync block, MonitorHeld, Recursion, owning Thread).
type SosMonitor = (u64, u64, u64, u64);

/// SOS `syncblk`'s held monitors, and its "Total" and "Free" sync table entries.
fn sos_syncblk(dump: &Path) -> (Vec<SosMonitor>, (u64, u64)) {
    let out = Command::new(common::dotnet_dump())
        .arg("analyze")
        .arg(dump)
        .args(["-c", "syncblk", "-c", "exit"])
        .sos_output();
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let text = String::from_utf8_lossy(&out.stdout);
    let total = |word: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(word)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {word} line in SOS syncblk: {text}"))
    };
    let counts = (total("Total"), total("Free"));
    let held = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first()?.parse::<u32>().ok()?;
            let block = hex(f.get(1)?)?;
            let held = f.get(2)?.parse().ok()?;
            let recursion = f.get(3)?.parse().ok()?;
            let thread = hex(f.get(4)?)?;
            (block != 0 && held != 0).then_some((block, held, recursion, thread))
        })
        .collect();
    (held, counts)
}

/// Every monitor SOS `syncblk` lists as held or waited for is a `sync_block` lock of
/// `cdac locks` with the same owner, times entered and waiters, and no other; the sync
/// table's entries in use or free, and free ones, are SOS's "Total" and "Free" (the
/// runtime's own count, not the table up to its first zero entry).
fn equals_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let dump = tb.dump("full");
    let t = target(tb, Some("full"));
    let v = locks(&t);
    let ours: BTreeSet<(u64, u64, u64, u64)> = v["locks"]
        .as_array()
        .expect("locks")
        .iter()
        // SOS lists the monitors it counts as held (MonitorHeld != 0): not those listed
        // only for their Monitor.Wait waiters.
        .filter(|l| {
            l["kind"] == "sync_block"
                && (l["times_entered"].as_u64() > Some(0)
                    || l["waiters_counted"].as_u64() > Some(0))
        })
        .map(|l| {
            (
                common::hex(&l["sync_block"]),
                // SOS's MonitorHeld: bit 0 held, the waiters above it; .NET 11's DAC
                // (the monitor a managed Lock) says only whether it is held.
                u64::from(l["owner"].is_object())
                    + if variant == Variant::Net11 {
                        0
                    } else {
                        2 * l["waiters_counted"].as_u64().unwrap_or(0)
                    },
                l["times_entered"].as_u64().unwrap_or(0),
                l["owner"]["thread"]
                    .as_str()
                    .map_or(0, |a| common::hex(&Value::String(a.into()))),
            )
        })
        .collect();
    let (held, (total, free)) = sos_syncblk(&dump);
    let theirs: BTreeSet<SosMonitor> = held.into_iter().collect();
    assert_eq!(ours, theirs, "{}: cdac's, then SOS's", variant.name());
    assert_eq!(
        (
            v["sync_table"]["entries"].as_u64(),
            v["sync_table"]["free"].as_u64()
        ),
        (Some(total), Some(free)),
        "{}: the sync table's Total and Free",
        variant.name()
    );
    assert!(theirs.len() >= 5, "{}: {theirs:?}", variant.name());
}

#[test]
fn monitors_equal_sos_syncblk_net10() {
    equals_sos(Variant::Net10);
}

#[test]
fn monitors_equal_sos_syncblk_net11() {
    equals_sos(Variant::Net11);
}

#[test]
fn monitors_equal_sos_syncblk_net9() {
    equals_sos(Variant::Net9);
}

#[test]
fn monitors_equal_sos_syncblk_net8() {
    equals_sos(Variant::Net8);
}

/// `cdac analyze` ends with the hang report: on a dump of the running testbed, the
/// deadlocks of `cdac locks`, each thread of them with its stack, and the async chains of
/// `cdac async`.
fn analyze_reports_the_deadlocks(variant: Variant) {
    let tb = testbed_of(variant);
    let t = target(tb, Some("full"));
    let mut args = vec!["analyze", "--json"];
    args.extend(t.iter().map(String::as_str));
    let v = cdac_json(&args);
    json_schema::assert_matches_schema("analyze", &v);
    let facts = &tb.manifest["locks"];
    let expected = 1 + usize::from(!facts["lock_deadlock"].is_null());
    let deadlocks = v["locks"]["deadlocks"].as_array().expect("deadlocks");
    assert_eq!(
        deadlocks.len(),
        expected,
        "{}: {}",
        variant.name(),
        v["locks"]
    );
    let mut args = vec!["analyze"];
    args.extend(t.iter().map(String::as_str));
    let out = Command::new(common::cdac_exe())
        .args(&args)
        .output()
        .expect("run cdac");
    let text = String::from_utf8_lossy(&out.stdout);
    for thread in facts["monitor_deadlock"]["threads"]
        .as_array()
        .expect("threads")
    {
        let name = thread["name"].as_str().expect("name");
        assert!(
            text.contains(&format!(
                "Stack of thread {} \"{name}\"",
                thread["managed_id"]
            )),
            "{}: {text}",
            variant.name()
        );
    }
    assert!(text.contains("DEADLOCK 1:"), "{}: {text}", variant.name());
    // Every parked async chain of the manifest, its outermost method first.
    let chains = v["async_work"]["chains"].as_array().expect("async chains");
    for want in tb.manifest["async"]["chains"]
        .as_array()
        .expect("manifest async")
    {
        let outer = &want["frames"][0];
        let method = format!(
            "{}.{}",
            outer["type"].as_str().unwrap(),
            outer["name"].as_str().unwrap()
        );
        assert!(
            chains
                .iter()
                .any(|c| c["frames"][0]["method"] == method.as_str()),
            "{}: no async chain from {method}: {}",
            variant.name(),
            v["async_work"]
        );
        assert!(
            text.contains(&format!("{method} (")),
            "{}: {text}",
            variant.name()
        );
    }
}

#[test]
fn analyze_reports_the_deadlocks_net10() {
    analyze_reports_the_deadlocks(Variant::Net10);
}

#[test]
fn analyze_reports_the_deadlocks_net11() {
    analyze_reports_the_deadlocks(Variant::Net11);
}

#[test]
fn analyze_reports_the_deadlocks_net8() {
    analyze_reports_the_deadlocks(Variant::Net8);
}
