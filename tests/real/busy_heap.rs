//! `heap --pid` on a process whose heap never stands still: the .NET 10 testbed with
//! `--allocate` (two threads allocating without pause, a full GC every 200 ms). At least 8 of
//! 10 runs must answer consistently: exit 0, no damaged place, per-type counts and sizes
//! that add up to the totals, and the re-reads the GCs forced said on stderr and in the
//! JSON (`reads`). No open-time check may blame the runtime for a torn read. Commands that
//! stop the threads for their stacks (`heap --live`, `locks`, `async --stacks`) say for how
//! long.

use std::process::Command;

use crate::common::{cdac_exe, start_testbed, Variant};
use serde_json::Value;

#[test]
fn heap_of_an_allocating_process_answers_consistently() {
    let tb = start_testbed(Variant::Net10, &["--allocate"]);
    assert_eq!(
        tb.manifest["allocate"], true,
        "the testbed knows --allocate"
    );
    let pid = tb.pid.to_string();
    let mut consistent = 0;
    let mut report = Vec::new();
    for run in 0..10 {
        let out = Command::new(cdac_exe())
            .args(["heap", "--json", "--pid", &pid])
            .output()
            .expect("run cdac heap");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !stderr.contains("on this runtime build"),
            "run {run}: a check blamed the build for a busy heap: {stderr}"
        );
        let heap: Value = match serde_json::from_slice(&out.stdout) {
            Ok(v) => v,
            Err(e) => {
                report.push(format!("run {run}: no JSON ({e}): {stderr}"));
                continue;
            }
        };
        let types = heap["types"].as_array().cloned().unwrap_or_default();
        let count: u64 = types.iter().map(|t| t["count"].as_u64().unwrap()).sum();
        let size: u64 = types
            .iter()
            .map(|t| t["total_size"].as_u64().unwrap())
            .sum();
        let attempts = heap["reads"]["attempts"].as_u64().unwrap_or(1);
        let whole = out.status.success()
            && heap["problems"].as_array().is_some_and(Vec::is_empty)
            && count == heap["objects"].as_u64().unwrap()
            && size == heap["total_size"].as_u64().unwrap()
            && heap["reads"]["consistent"] != false;
        if whole {
            consistent += 1;
            // Reads the GCs made cdac repeat are said.
            if attempts > 1 {
                assert!(stderr.contains("read again"), "run {run}: {stderr}");
            }
        }
        report.push(format!(
            "run {run}: exit {:?}, {count} objects, {attempts} read(s), whole {whole}",
            out.status.code()
        ));
    }
    println!("{}", report.join("\n"));
    assert!(
        consistent >= 8,
        "{consistent} of 10 consistent:\n{}",
        report.join("\n")
    );
}

/// Whether any thread of `pid` is still traced or in a tracing stop.
fn still_held(pid: i32) -> Vec<String> {
    let mut held = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let path = task.expect("task").path();
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        if field("TracerPid:") != "0" || field("State:").starts_with('t') {
            held.push(format!("{}: {}", path.display(), field("State:")));
        }
    }
    held
}

#[test]
fn heap_and_gcroot_with_freeze_hold_every_thread_and_say_for_how_long() {
    let tb = start_testbed(Variant::Net10, &["--allocate"]);
    let pid = tb.pid.to_string();
    let mut report = Vec::new();
    for run in 0..5 {
        let threads_before = std::fs::read_dir(format!("/proc/{pid}/task"))
            .expect("tasks")
            .count() as u64;
        let out = Command::new(cdac_exe())
            .args(["heap", "--json", "--freeze", "--pid", &pid])
            .output()
            .expect("run cdac heap --freeze");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "run {run}: {stderr}");
        let heap: Value = serde_json::from_slice(&out.stdout).expect("heap JSON");
        let frozen = &heap["reads"]["frozen"];
        let threads = frozen["threads"].as_u64().expect("frozen.threads");
        let held = frozen["held_ms"].as_f64().expect("frozen.held_ms");
        let stopping = frozen["stopping_ms"].as_f64().expect("frozen.stopping_ms");
        // Every thread the process had is held (threads may end between the two looks).
        assert!(
            threads + 2 >= threads_before && threads > 5,
            "run {run}: {threads} held of {threads_before}"
        );
        assert!(held > 0.0 && stopping <= held, "run {run}: {frozen}");
        assert!(
            stderr.contains(&format!("{threads} threads held stopped for")),
            "run {run}: {stderr}"
        );
        // Held for the walk: the answer is whole and adds up.
        let types = heap["types"].as_array().cloned().unwrap_or_default();
        let count: u64 = types.iter().map(|t| t["count"].as_u64().unwrap()).sum();
        assert_eq!(count, heap["objects"].as_u64().unwrap(), "run {run}");
        assert!(heap["problems"].as_array().is_some_and(Vec::is_empty));
        assert_eq!(heap["reads"]["consistent"], true, "run {run}");
        // And let go afterwards: no thread left traced or stopped.
        assert_eq!(still_held(tb.pid), Vec::<String>::new(), "run {run}");
        report.push(format!(
            "run {run}: {count} objects, {threads} threads held {held:.1} ms ({stopping:.1} ms to stop), {} read(s)",
            heap["reads"]["attempts"]
        ));
    }
    println!("{}", report.join("\n"));

    // gcroot under a freeze: a gen2 string held by the workload's statics.
    let listing = Command::new(cdac_exe())
        .args([
            "heap",
            "--json",
            "--objects",
            "--gen",
            "2",
            "--type",
            "^System.String$",
        ])
        .args(["--freeze", "--pid", &pid])
        .output()
        .expect("run cdac heap --objects");
    let listing: Value = serde_json::from_slice(&listing.stdout).expect("objects JSON");
    let objects = listing["object_list"].as_array().expect("object_list");
    let address = objects[objects.len() / 2]["address"]
        .as_str()
        .expect("address")
        .to_string();
    let out = Command::new(cdac_exe())
        .args(["gcroot", "--json", "--freeze", "--pid", &pid, &address])
        .output()
        .expect("run cdac gcroot --freeze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let root: Value = serde_json::from_slice(&out.stdout).expect("gcroot JSON");
    assert!(
        root["frozen"]["threads"].as_u64().unwrap_or(0) > 5,
        "{root}"
    );
    assert!(root["threads_stopped"].is_null(), "no second pause report");
    assert!(stderr.contains("threads held stopped for"), "{stderr}");
    assert_eq!(still_held(tb.pid), Vec::<String>::new());

    // A dump does not change: --freeze is refused before anything is read.
    let out = Command::new(cdac_exe())
        .args(["heap", "--freeze", "--dump", "/nonexistent.core"])
        .output()
        .expect("run cdac heap --freeze --dump");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --pid"));
}
