//! `cdac threadpool` on .NET 10, 9 and 8, live and on `createdump --full` and gcore dumps of a
//! testbed started with `--starve-threadpool` (every worker blocked at the pool's limit,
//! known work queued in the global queue and in one worker's own queue), against the
//! testbed's manifest and SOS `threadpool` / `threadpoolqueue`.

use crate::common::SosOutput;
use std::collections::BTreeMap;
use std::process::Command;

use crate::common::{self, start_testbed, testbed_of, Variant};
use crate::json_schema;
use serde_json::Value;

fn threadpool(t: &[&str]) -> Value {
    let mut args = vec!["threadpool", "--json"];
    args.extend(t);
    let out = Command::new(common::cdac_exe())
        .args(&args)
        .output()
        .expect("run cdac");
    let v: Value = serde_json::from_slice(&out.stdout).expect("threadpool JSON");
    json_schema::assert_matches_schema("threadpool", &v);
    let live = t.first() == Some(&"--pid");
    for p in v["problems"].as_array().expect("problems") {
        assert!(
            live && p
                .as_str()
                .is_some_and(|p| p.starts_with("heap walk stopped")),
            "{args:?}: {p}"
        );
    }
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{args:?}: {out:?}"
    );
    v
}

/// Queued items as (kind, method) → count.
fn counted(items: &[Value]) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for i in items {
        let key = (
            i["kind"].as_str().unwrap_or("?").to_string(),
            i["method"].as_str().unwrap_or("?").to_string(),
        );
        *out.entry(key).or_default() += 1;
    }
    out
}

fn expected(list: &Value) -> BTreeMap<(String, String), u64> {
    list.as_array()
        .expect("manifest list")
        .iter()
        .map(|e| {
            (
                (
                    e["kind"].as_str().unwrap().to_string(),
                    e["method"].as_str().unwrap().to_string(),
                ),
                e["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The workers and the queued items are the ones the testbed made.
fn facts_hold(v: &Value, facts: &Value, what: &str) {
    let w = &v["workers"];
    let blocked = &facts["blocked_workers"];
    assert_eq!(w["total"], *blocked, "{what}: {v}");
    assert_eq!(w["running"], *blocked, "{what}: {v}");
    assert_eq!(w["idle"], 0, "{what}: {v}");
    assert_eq!(w["min"], facts["min_workers"], "{what}: {v}");
    assert_eq!(w["max"], facts["max_workers"], "{what}: {v}");
    assert_eq!(
        counted(v["global"].as_array().unwrap()),
        expected(&facts["global"]),
        "{what}: global queue"
    );
    let local: Vec<Value> = v["local"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["items"].as_array().unwrap().clone())
        .collect();
    assert_eq!(
        counted(&local),
        expected(&facts["local"]),
        "{what}: local queues"
    );
    assert_eq!(v["local"].as_array().unwrap().len(), 1, "{what}: {v}");
    assert!(v["local"][0]["managed_thread_id"].is_i64(), "{what}: {v}");
}

/// SOS's `threadpool` counts and `threadpoolqueue` items.
struct Sos {
    counts: BTreeMap<String, i64>,
    /// Global then local items: (address, text after the address).
    items: Vec<(u64, String)>,
}

fn sos(dump: &std::path::Path) -> Sos {
    let out = Command::new(common::dotnet_dump())
        .arg("analyze")
        .arg(dump)
        .args(["-c", "threadpool", "-c", "threadpoolqueue", "-c", "exit"])
        .sos_output();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut counts = BTreeMap::new();
    let mut items = Vec::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(':') {
            if let Ok(n) = v.trim().trim_end_matches('%').parse::<i64>() {
                counts.insert(k.trim().to_string(), n);
            }
        }
        if let Some(rest) = line.strip_prefix("0x") {
            if let Some((addr, what)) = rest.split_once(' ') {
                if let Ok(a) = u64::from_str_radix(addr, 16) {
                    items.push((a, what.trim().to_string()));
                }
            }
        }
    }
    Sos { counts, items }
}

/// Every count SOS `threadpool` prints and every item `threadpoolqueue` lists are cdac's:
/// the same objects in the same order, each with the method SOS names (SOS names a
/// callback's method only in the global queue, and a Task's as `(DelegateType)Method`).
fn equals_sos(v: &Value, dump: &std::path::Path, what: &str) {
    let s = sos(dump);
    let w = &v["workers"];
    for (label, ours) in [
        ("Workers Total", &w["total"]),
        ("Workers Running", &w["running"]),
        ("Workers Idle", &w["idle"]),
        ("Worker Min Limit", &w["min"]),
        ("Worker Max Limit", &w["max"]),
        ("CPU utilization", &w["cpu_utilization"]),
    ] {
        assert_eq!(
            s.counts.get(label).copied(),
            ours.as_i64(),
            "{what}: SOS {label}, cdac {w}"
        );
    }
    let ours: Vec<&Value> = v["global"]
        .as_array()
        .unwrap()
        .iter()
        .chain(
            v["local"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|l| l["items"].as_array().unwrap()),
        )
        .collect();
    assert_eq!(
        ours.iter()
            .map(|i| common::hex(&i["object"]))
            .collect::<Vec<_>>(),
        s.items.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
        "{what}: queued objects, cdac's then SOS's {:?}",
        s.items
    );
    for (i, (_, text)) in ours.iter().zip(&s.items) {
        if let Some(sos_method) = text.strip_prefix("Work | ").or_else(|| {
            text.strip_prefix("Task | ")
                .map(|t| t.rsplit(')').next().unwrap_or(t))
        }) {
            assert_eq!(i["method"], sos_method, "{what}: {i} / SOS {text}");
        }
    }
    eprintln!(
        "{what}: {} queued items equal SOS threadpoolqueue",
        ours.len()
    );
}

fn starved(variant: Variant) {
    let tb = start_testbed(variant, &["--starve-threadpool"]);
    let facts = &tb.manifest["threadpool"];
    assert!(facts.is_object(), "no threadpool facts: {}", tb.manifest);
    let pid = tb.pid.to_string();
    // A live heap walk stops at an allocation made while it runs (the testbed's main
    // thread and the runtime's own threads still allocate now and then): the walk that
    // completes is the one checked.
    // Once, on .NET 8, a completed walk right after the start found no item in the local
    // queue that every later read (and the dump) holds: the read is tried again, 200 ms
    // apart, and the last one is checked in full.
    let mut live = Value::Null;
    for attempt in 0..5 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        live = threadpool(&["--pid", &pid]);
        let complete = live["problems"].as_array().is_some_and(Vec::is_empty);
        let local = live["local"].as_array().map_or(0, Vec::len);
        if complete && local > 0 {
            break;
        }
    }
    assert!(
        live["problems"].as_array().is_some_and(Vec::is_empty),
        "{variant:?}: no live heap walk completed in 5 tries: {live}"
    );
    facts_hold(&live, facts, &format!("{variant:?} live"));
    let dump = tb.dump("full");
    let d = dump.display().to_string();
    let v = threadpool(&["--dump", &d]);
    facts_hold(&v, facts, &format!("{variant:?} full"));
    equals_sos(&v, &dump, &format!("{variant:?} full"));
    let gcore = tb.dump("gcore");
    let v = threadpool(&["--dump", &gcore.display().to_string()]);
    facts_hold(&v, facts, &format!("{variant:?} gcore"));
}

#[test]
fn starved_pool_equals_manifest_and_sos_net10() {
    starved(Variant::Net10);
}

#[test]
fn starved_pool_equals_manifest_and_sos_net11() {
    starved(Variant::Net11);
}

#[test]
fn starved_pool_equals_manifest_and_sos_net9() {
    starved(Variant::Net9);
}

#[test]
fn starved_pool_equals_manifest_and_sos_net8() {
    starved(Variant::Net8);
}

/// An idle pool: the counts equal SOS's and nothing is queued.
#[test]
fn idle_pool_equals_sos_net10() {
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let d = dump.display().to_string();
    let v = threadpool(&["--dump", &d]);
    assert_eq!(v["global"].as_array().map(Vec::len), Some(0), "{v}");
    equals_sos(&v, &dump, "Net10 idle");
}

/// An idle pool: the counts equal SOS's and nothing is queued.
#[test]
fn idle_pool_equals_sos_net11() {
    let tb = testbed_of(Variant::Net11);
    let dump = tb.dump("full");
    let d = dump.display().to_string();
    let v = threadpool(&["--dump", &d]);
    assert_eq!(v["global"].as_array().map(Vec::len), Some(0), "{v}");
    equals_sos(&v, &dump, "Net10 idle");
}
