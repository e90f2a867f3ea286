//! The checks `cdac` runs when it opens a target (src/validation.rs), on the newest patch of
//! each major this machine serves (10.0.15, 9.0.23, 8.0.34), which none of the shipped
//! descriptors or overlays was made from: live and on `createdump --full` and `gcore` dumps,
//! every check runs and passes, no command warns, and the perf-map methods resolve; and a
//! descriptor with a wrong value makes the check that covers it fail, naming the value.

use crate::common;

use std::process::Command;

use common::{perf_map, testbed_of, Testbed, Variant};
use serde_json::Value;

fn cdac(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(crate::common::cdac_exe())
        .args(args)
        .output()
        .expect("run cdac");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The target arguments of a testbed, live or one of its dumps.
fn target(tb: &Testbed, kind: Option<&str>) -> Vec<String> {
    match kind {
        None => vec!["--pid".into(), tb.pid.to_string()],
        Some(k) => vec!["--dump".into(), tb.dump(k).display().to_string()],
    }
}

/// Every check passes, but those about what a runtime does not have: .NET 8 keeps thread
/// statics with strong handles, .NET 10 has no HelperMethodFrame_1OBJ.
fn expected_status(variant: Variant, check: &Value) -> &'static str {
    let name = variant.name();
    match check.as_str() {
        Some("thread-statics") if name.starts_with("net8") => "skipped",
        Some("helper-frames") if name.starts_with("net10") => "skipped",
        _ => "passed",
    }
}

fn checks_pass_on(variant: Variant) {
    let tb = testbed_of(variant);
    for kind in [None, Some("full"), Some("gcore")] {
        let what = format!("{} {}", variant.name(), kind.unwrap_or("live"));
        let t = target(tb, kind);
        let t: Vec<&str> = t.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = cdac(&[&["info", "--json"], &t[..]].concat());
        assert_eq!(code, 0, "{what}: {stderr}");
        assert!(!stderr.contains("warning"), "{what}: {stderr}");
        let info: Value = serde_json::from_str(&stdout).expect("JSON");
        assert_eq!(info["runtime_version"], variant.runtime_version(), "{what}");
        // The build is not one the shipped files list: fitted by version line.
        let fits: Vec<&str> = std::iter::once(&info["descriptor_source"]["fit"])
            .chain(
                info["overlays"]
                    .as_array()
                    .expect("overlays")
                    .iter()
                    .map(|o| &o["fit"]),
            )
            .filter_map(Value::as_str)
            .collect();
        assert!(fits.contains(&"same-version-line"), "{what}: {fits:?}");
        let checks = info["checks"].as_array().expect("checks");
        assert!(checks.len() >= 9, "{what}");
        for c in checks {
            assert_eq!(
                c["status"],
                expected_status(variant, &c["name"]),
                "{what}: {c}"
            );
        }
        // Most of what the shipped files add is covered by a check that passed.
        let shipped = info["shipped_values"].as_u64().expect("shipped_values");
        let unchecked = info["unchecked_shipped_values"]
            .as_array()
            .expect("unchecked")
            .len() as u64;
        assert!(shipped > 0, "{what}");
        assert!(
            unchecked * 2 <= shipped,
            "{what}: {unchecked} of {shipped} shipped values unchecked"
        );
        eprintln!(
            "{what}: {} checks passed; {} of {shipped} shipped values covered",
            checks.len(),
            shipped - unchecked
        );
        // The other commands say nothing either, and read what they should.
        for args in [vec!["threads"], vec!["modules"], vec!["stacks", "--json"]] {
            let (code, stdout, stderr) = cdac(&[&args[..], &t[..]].concat());
            assert_eq!(code, 0, "{what} {args:?}: {stderr}");
            assert!(!stderr.contains("warning"), "{what} {args:?}: {stderr}");
            if args[0] == "stacks" {
                let v: Value = serde_json::from_str(&stdout).expect("JSON");
                assert_eq!(v["warnings"], serde_json::json!([]), "{what}");
            }
        }
    }
    // Every method of the runtime's own perf map (before the dumps) resolves to its start.
    let entries = perf_map(&tb.perf_map_for(None));
    let sample: Vec<String> = entries
        .iter()
        .filter(|(_, _, n)| n.contains("[Cdac.Testbed"))
        .map(|(s, z, _)| format!("{:#x}", s + z / 2))
        .collect();
    assert!(
        sample.len() > 50,
        "{}: {} testbed methods",
        variant.name(),
        sample.len()
    );
    let t = target(tb, None);
    let mut args: Vec<&str> = vec!["ip2md", "--json"];
    args.extend(t.iter().map(String::as_str));
    args.extend(sample.iter().map(String::as_str));
    let (code, stdout, stderr) = cdac(&args);
    assert_eq!(code, 0, "{}: {stderr}", variant.name());
    let answers: Value = serde_json::from_str(&stdout).expect("JSON");
    let starts: Vec<u64> = answers
        .as_array()
        .expect("answers")
        .iter()
        .map(|a| common::hex(&a["start"]))
        .collect();
    let want: Vec<u64> = entries
        .iter()
        .filter(|(_, _, n)| n.contains("[Cdac.Testbed"))
        .map(|(s, _, _)| *s)
        .collect();
    assert_eq!(starts, want, "{}", variant.name());
}

#[test]
fn newest_net10_patch_passes_every_check() {
    checks_pass_on(Variant::Net10Latest);
}

#[test]
fn newest_net9_patch_passes_every_check() {
    checks_pass_on(Variant::Net9Latest);
}

#[test]
fn newest_net8_patch_passes_every_check() {
    checks_pass_on(Variant::Net8Latest);
}

/// A descriptor whose value is wrong: the check that covers it fails, naming it, and every
/// command warns (info in its JSON too); the exit code is unchanged (the other answers
/// stand).
#[test]
fn a_wrong_value_fails_its_check_by_name() {
    let tb = testbed_of(Variant::Net10);
    let pid = tb.pid.to_string();
    let dir = common::scratch("validation");
    let good = dir.join("net10.json");
    let (code, _, stderr) = cdac(&[
        "info",
        "--pid",
        &pid,
        "--export-descriptor",
        good.to_str().expect("path"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let mut d: Value = serde_json::from_slice(&std::fs::read(&good).expect("read")).expect("JSON");
    // The managed Thread object's back pointer, moved by one word (compact form: an
    // offset, or [offset, type]).
    let field = &mut d["types"]["ThreadObject"]["_DONT_USE_InternalThread"];
    match field {
        Value::Array(a) => {
            let offset = a[0].as_u64().expect("offset");
            a[0] = (offset + 8).into();
        }
        Value::Number(n) => *field = (n.as_u64().expect("offset") + 8).into(),
        other => panic!("{other}"),
    }
    let bad = dir.join("moved.json");
    std::fs::write(&bad, serde_json::to_string_pretty(&d).expect("JSON")).expect("write");
    let (code, stdout, stderr) = cdac(&[
        "info",
        "--json",
        "--pid",
        &pid,
        "--descriptor",
        bad.to_str().expect("path"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let info: Value = serde_json::from_str(&stdout).expect("JSON");
    let failed: Vec<&Value> = info["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["status"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["name"], "thread-objects");
    assert!(
        stderr.contains("check thread-objects failed")
            && stderr.contains("ThreadObject._DONT_USE_InternalThread"),
        "{stderr}"
    );
    let (_, _, stderr) = cdac(&[
        "threads",
        "--pid",
        &pid,
        "--descriptor",
        bad.to_str().expect("path"),
    ]);
    assert!(stderr.contains("check thread-objects failed"), "{stderr}");
    // The unchanged export passes every check, with no warning.
    let (_, stdout, stderr) = cdac(&[
        "info",
        "--json",
        "--pid",
        &pid,
        "--descriptor",
        good.to_str().expect("path"),
    ]);
    assert!(!stderr.contains("warning"), "{stderr}");
    let info: Value = serde_json::from_str(&stdout).expect("JSON");
    for c in info["checks"].as_array().expect("checks") {
        assert_eq!(
            c["status"],
            expected_status(Variant::Net10, &c["name"]),
            "{c}"
        );
    }
}
