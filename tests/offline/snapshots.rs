//! Snapshots of what every command prints, text and JSON, on a gcore of the synthetic
//! .NET 10-style runtime (tests/fixtures/synthetic): a change to any output shows up as a
//! reviewed diff of `tests/snapshots/*.snap` (`cargo insta review`, or
//! `INSTA_UPDATE=always cargo test --test offline snapshots::` and `git diff`). What varies between
//! runs (addresses, the pid and thread ids, the build folder) is replaced by placeholders.

use crate::common;
// The schema checker uses the CLI, which the C ABI's tests (sharing common/) do not build.
use crate::json_schema;

use std::process::Command;

use common::{hex, scratch, SyntheticHost};

/// Runs `cdac ARGS`; returns its exit code and standard output.
fn cdac(args: &[String]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cdac"))
        .args(args)
        .output()
        .expect("run cdac");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn every_command_text_and_json() {
    // Commands list threads by id; the snapshots hold them in the order the host made them,
    // which is id order unless the machine's pid numbers wrapped around between them (a
    // busy CI run): then start another host.
    let ascending = |h: &SyntheticHost| {
        let ids: Vec<i64> = h.report["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .filter_map(|t| t["os_id"].as_i64())
            .collect();
        ids.windows(2).all(|w| w[0] < w[1])
    };
    let mut host = SyntheticHost::start(&[]);
    for _ in 0..4 {
        if ascending(&host) {
            break;
        }
        host = SyntheticHost::start(&[]);
    }
    let core = scratch("snapshots").join("synthetic.core");
    host.gcore(&core);
    let dump = core.display().to_string();
    let lib_dir = common::synthetic_dir().display().to_string();
    // The thread ids the host reported, in order: [TID0] is the process itself.
    let tids: Vec<String> = host.report["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| t["os_id"].to_string())
        .collect();
    let method = host.report["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .find(|m| m["kind"] == "jit" && m["eh_info"].is_string())
        .expect("a JIT'ed method with clauses");
    let inside = format!("{:#x}", hex(&method["start"]) + 4);
    let r2r = host.report["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .find(|m| m["kind"] == "r2r")
        .expect("a precompiled method");
    let r2r_start = format!("{:#x}", hex(&r2r["start"]));

    let mut filters: Vec<(String, String)> = Vec::new();
    filters.push((regex::escape(&dump), "[CORE]".into()));
    filters.push((regex::escape(&lib_dir), "[LIB]".into()));
    // Thread ids: longest first, so that no id is replaced inside another.
    let mut ordered: Vec<(usize, &String)> = tids.iter().enumerate().collect();
    ordered.sort_by_key(|(_, t)| std::cmp::Reverse(t.len()));
    for (i, t) in ordered {
        filters.push((format!(r"\b{t}\b"), format!("[TID{i}]")));
    }
    filters.push((r"\b[0-9a-f]{40}\b".into(), "[BUILD-ID]".into()));
    // How long the checks took (text and JSON).
    filters.push((r"passed in [0-9.]+ ms".into(), "passed in [TIME] ms".into()));
    filters.push((
        r#""(checks_us|at_us)": [0-9]+"#.into(),
        r#""$1": "[TIME]""#.into(),
    ));
    // Addresses (9 or more digits); smaller values (state words, HResults) stay.
    filters.push((r"0x[0-9a-f]{9,16}\b".into(), "[ADDR]".into()));
    let settings_filters: Vec<(&str, &str)> = filters
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let mut settings = insta::Settings::clone_current();
    settings.set_filters(settings_filters);
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path("snapshots");

    let commands: Vec<(&str, Vec<&str>)> = vec![
        ("info", vec!["info"]),
        ("modules", vec!["modules"]),
        ("methods", vec!["methods", "--filter", "Synthetic"]),
        ("ip2md", vec!["ip2md", &inside, &r2r_start, "0x10"]),
        ("eh", vec!["eh", &inside]),
        ("unwind", vec!["unwind", &inside]),
        ("threads", vec!["threads"]),
        ("stacks", vec!["stacks"]),
        ("analyze", vec!["analyze"]),
    ];
    settings.bind(|| {
        for (name, args) in &commands {
            for json in [false, true] {
                let mut full: Vec<String> = args.iter().map(|s| s.to_string()).collect();
                full.extend(["--dump".to_string(), dump.clone()]);
                if json {
                    full.push("--json".into());
                }
                let (code, stdout) = cdac(&full);
                let want = if *name == "ip2md" { 1 } else { 0 };
                assert_eq!(code, want, "cdac {full:?}");
                if json {
                    let value: serde_json::Value =
                        serde_json::from_str(&stdout).expect("JSON output");
                    json_schema::assert_matches_schema(args[0], &value);
                    insta::assert_snapshot!(format!("{name}_json"), stdout);
                } else {
                    insta::assert_snapshot!(format!("{name}_text"), stdout);
                }
            }
        }
    });
}
