//! An ordinary ASP.NET Core service (the web testbed, `testbed/Cdac.Testbed.Web`: the web
//! SDK's defaults, server GC with DATAS on .NET 9 and 10) driven by local HTTP requests into
//! a leak, 600 sync blocks, 200 stuck async requests and a deadlock: every command answers
//! with exit 0 and no warning, live and on `createdump --full` and gcore dumps, on .NET 10,
//! 9 and 8, and on workstation GC. A warning that fires on a healthy runtime teaches people
//! to ignore warnings. The answers are checked against the service's own facts (`/facts`)
//! and SOS `syncblk`.

use crate::common::SosOutput;
use std::process::Command;

use crate::common::{self, cdac_json, start_testbed, start_testbed_env, Testbed, Variant};
use serde_json::Value;

/// Every command a person on call runs on a service (text output, as they read it).
const COMMANDS: &[&[&str]] = &[
    &["info"],
    &["threads"],
    &["stacks"],
    &["analyze"],
    &["heap"],
    &["heap", "--live"],
    &["heap", "--segments"],
    &["handles"],
    &["finalizequeue"],
    &["locks"],
    &["async"],
    &["threadpool"],
    &["modules"],
    &["methods"],
];

fn target(tb: &Testbed, kind: Option<&str>) -> Vec<String> {
    match kind {
        None => vec!["--pid".into(), tb.pid.to_string()],
        Some(k) => vec!["--dump".into(), tb.dump(k).display().to_string()],
    }
}

/// Runs every command on the target: each exits 0 and writes nothing on stderr that warns
/// or reports something unread.
fn no_warning_anywhere(tb: &Testbed, kind: Option<&str>) {
    let t = target(tb, kind);
    let what = format!("{} {}", tb.variant.name(), kind.unwrap_or("live"));
    for command in COMMANDS {
        let _trace = command[0] == "stacks" && kind.is_none();
        let out = Command::new(common::cdac_exe())
            .args(*command)
            .args(&t)
            .output()
            .expect("run cdac");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{what}: cdac {command:?}: {stderr}"
        );
        let alarming: Vec<&str> = stderr
            .lines()
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("warn") || l.contains("could not") || l.contains("not answered")
            })
            .collect();
        assert!(
            alarming.is_empty(),
            "{what}: cdac {command:?} warns on a healthy service: {alarming:#?}"
        );
    }
}

/// The answers that matter on this service, against its own facts.
fn answers_match_the_facts(tb: &Testbed, kind: Option<&str>, facts: &Value) {
    let t = target(tb, kind);
    let args = |cmd: &[&'static str]| -> Vec<String> {
        cmd.iter()
            .map(|s| s.to_string())
            .chain(t.iter().cloned())
            .collect()
    };
    let run = |cmd: &[&'static str]| {
        let a = args(cmd);
        cdac_json(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let what = format!("{} {}", tb.variant.name(), kind.unwrap_or("live"));

    // The GC as the service's own configuration says: server or workstation, DATAS.
    let segments = run(&["heap", "--segments", "--json"]);
    let config = &facts["gc_config"];
    assert_eq!(
        segments["gc"]["server"].as_bool(),
        Some(config["ServerGC"] == "True"),
        "{what}: {}",
        segments["gc"]
    );
    // DATAS adapts server GC only; the GC says whether it is on from .NET 10 (GC/DAC
    // interface 2.4), and before that cdac says it cannot tell.
    let server = config["ServerGC"] == "True";
    let datas = &segments["gc"]["dynamic_adaptation"];
    if !server {
        assert_eq!(datas.as_bool(), Some(false), "{what}");
    } else if matches!(tb.variant, Variant::WebNet10 | Variant::WebNet11) {
        assert_eq!(
            datas.as_bool(),
            Some(config["GCDynamicAdaptationMode"] == "1"),
            "{what}"
        );
    } else {
        assert!(datas.is_null(), "{what}: {datas}");
    }

    // The leak: every order the service kept, each with its one line, and every object it
    // gave a sync block.
    let heap = run(&["heap", "--json"]);
    let count = |name: &str| {
        heap["types"]
            .as_array()
            .expect("types")
            .iter()
            .find(|t| t["name"] == name)
            .and_then(|t| t["count"].as_u64())
            .unwrap_or(0)
    };
    let kept = facts["orders_kept"].as_u64().expect("orders_kept");
    assert_eq!(count("Cdac.Testbed.Web.Order"), kept, "{what}");
    assert_eq!(count("Cdac.Testbed.Web.OrderLine"), kept, "{what}");
    assert_eq!(
        count("Cdac.Testbed.Web.Monitored"),
        facts["monitored_kept"].as_u64().expect("monitored_kept"),
        "{what}"
    );

    // The deadlock between the service's two threads, and a sync table the size the
    // runtime counts (each Monitored object has an entry).
    let locks = run(&["locks", "--json"]);
    let deadlocked: Vec<u64> = locks["deadlocks"][0]["waits"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no deadlock: {locks}"))
        .iter()
        .filter_map(|w| w["thread"]["managed_id"].as_u64())
        .collect();
    let mut expected: Vec<u64> = facts["deadlock_threads"]
        .as_array()
        .expect("deadlock_threads")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let mut found = deadlocked.clone();
    expected.sort_unstable();
    found.sort_unstable();
    assert_eq!(found, expected, "{what}: {locks}");
    let entries = locks["sync_table"]["entries"].as_u64().expect("sync_table");
    assert!(
        entries >= facts["monitored_kept"].as_u64().expect("monitored_kept"),
        "{what}: {entries} sync table entries"
    );
}

/// SOS `syncblk`'s totals on a dump: "Total" and "Free".
fn sos_sync_table(dump: &std::path::Path) -> (u64, u64) {
    let out = Command::new(common::dotnet_dump())
        .arg("analyze")
        .arg(dump)
        .args(["-c", "syncblk", "-c", "exit"])
        .sos_output();
    let text = String::from_utf8_lossy(&out.stdout);
    let total = |word: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(word)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {word} line in SOS syncblk: {text}"))
    };
    (total("Total"), total("Free"))
}

fn healthy_service(variant: Variant, env: &[(&str, &str)]) {
    let tb = if env.is_empty() {
        start_testbed(variant, &[])
    } else {
        start_testbed_env(variant, &[], env)
    };
    let facts = tb.drive_web();
    assert_eq!(facts["deadlock_threads"].as_array().map(Vec::len), Some(2));
    for kind in [None, Some("full"), Some("gcore")] {
        no_warning_anywhere(&tb, kind);
        answers_match_the_facts(&tb, kind, &facts);
    }
    let locks = cdac_json(&[
        "locks",
        "--json",
        "--dump",
        &tb.dump("full").to_string_lossy(),
    ]);
    let (total, free) = sos_sync_table(&tb.dump("full"));
    assert_eq!(
        (
            locks["sync_table"]["entries"].as_u64(),
            locks["sync_table"]["free"].as_u64()
        ),
        (Some(total), Some(free)),
        "{}: the sync table's Total and Free against SOS",
        variant.name()
    );
}

#[test]
fn a_healthy_service_gets_no_warning_net11() {
    healthy_service(Variant::WebNet11, &[]);
}

#[test]
fn a_healthy_service_gets_no_warning_net10() {
    healthy_service(Variant::WebNet10, &[]);
}

#[test]
fn a_healthy_service_gets_no_warning_net9() {
    healthy_service(Variant::WebNet9, &[]);
}

#[test]
fn a_healthy_service_gets_no_warning_net8() {
    healthy_service(Variant::WebNet8, &[]);
}

#[test]
fn a_healthy_service_on_workstation_gc_gets_no_warning_net10() {
    healthy_service(Variant::WebNet10, &[("DOTNET_gcServer", "0")]);
}
