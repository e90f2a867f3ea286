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
