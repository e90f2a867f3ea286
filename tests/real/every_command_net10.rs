//! Every `cdac` command on the real .NET 10 testbed, live and on its `createdump --full`
//! and `gcore` dumps, through the command line: each runs, and says something checkable
//! about a method the testbed parked a thread in (`CatchBlocker::CatchOwner`, which has a
//! catch clause) against the runtime's own perf map; every `--json` output matches the
//! schema `cdac schema COMMAND` prints.

use crate::common;
// The schema checker uses the CLI, which the C ABI's tests (sharing common/) do not build.
use crate::json_schema;

use std::path::Path;
use std::process::Command;

use common::{perf_map, scratch, testbed_of, Variant};
use serde_json::Value;

fn cdac(args: &[&str]) -> String {
    let out = Command::new(crate::common::cdac_exe())
        .args(args)
        .output()
        .expect("run cdac");
    assert!(
        out.status.success(),
        "cdac {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&cdac(args)).unwrap_or_else(|e| panic!("cdac {args:?}: {e}"))
}

fn every_command(kind: Option<&'static str>) {
    let tb = testbed_of(Variant::Net10);
    let what = kind.unwrap_or("live");
    let pid = tb.pid.to_string();
    let dump = kind.map(|k| tb.dump(k).to_string_lossy().into_owned());
    let target: Vec<&str> = match &dump {
        Some(d) => vec!["--dump", d],
        None => vec!["--pid", &pid],
    };
    let with = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.extend(target.iter().map(|s| s.to_string()));
        v
    };
    // Every --json output is held against the schema `cdac schema` gives for it.
    let run_json = |args: &[&str]| {
        let v = with(args);
        let value = json(&v.iter().map(String::as_str).collect::<Vec<_>>());
        json_schema::assert_matches_schema(args[0], &value);
        value
    };
    let run = |args: &[&str]| {
        let v = with(args);
        cdac(&v.iter().map(String::as_str).collect::<Vec<_>>())
    };
    // The method, from the runtime's perf map as it was when the dump was taken.
    let (start, size, name) = perf_map(&tb.perf_map_for(kind))
        .into_iter()
        .find(|(_, _, n)| n.contains("CatchBlocker::CatchOwner("))
        .expect("CatchOwner in the perf map");
    let start_hex = format!("{start:#x}");
    let middle = format!("{:#x}", start + size / 2);

    let info = run_json(&["info", "--json"]);
    assert!(
        info["contracts"]["ExecutionManager"].is_number(),
        "{what}: {info}"
    );
    assert_eq!(info["runtime_version"], "10.0.14", "{what}");

    let ip2md = run_json(&["ip2md", "--json", &middle]);
    assert_eq!(ip2md[0]["start"], start_hex, "{what}: {ip2md}");
    assert_eq!(ip2md[0]["jit_type"], "jit", "{what}");
    let md = ip2md[0]["method_desc"]
        .as_str()
        .expect("method_desc")
        .to_string();

    let eh = run_json(&["eh", "--json", &middle]);
    let clauses = eh["clauses"]
        .as_array()
        .or_else(|| eh.as_array())
        .expect("clauses");
    assert!(
        clauses
            .iter()
            .any(|c| c.to_string().contains("typed") || c.to_string().contains("catch")),
        "{what}: {eh}"
    );

    let unwind = run_json(&["unwind", "--json", &start_hex]);
    assert!(unwind.to_string().contains("push rbp"), "{what}: {unwind}");

    // The same method's GC info, by code address and by MethodDesc.
    let gc = run_json(&["gcinfo", "--json", &middle, &md]);
    assert_eq!(gc[0]["start"], start_hex, "{what}: {gc}");
    assert_eq!(gc[1]["start"], start_hex, "{what}: {gc}");
    assert_eq!(gc[0]["version"], 4, "{what}");
    assert_eq!(
        gc[0]["header"]["code_length"].as_u64(),
        Some(size),
        "{what}: {gc}"
    );

    let modules = run_json(&["modules", "--json"]);
    assert!(
        modules
            .as_array()
            .expect("modules")
            .iter()
            .any(|m| m["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/Cdac.Testbed.dll"))),
        "{what}"
    );

    let methods = run_json(&["methods", "--json"]);
    assert!(
        methods
            .as_array()
            .expect("methods")
            .iter()
            .any(|m| m["start"] == start_hex.as_str() && m["method_desc"] == md.as_str()),
        "{what}: CatchOwner not among the methods"
    );

    let dir = scratch(&format!("every-command-{what}"));
    let map = dir.join("perf.map");
    run(&["perfmap", "-o", map.to_str().expect("path")]);
    let ours = perf_map(&map);
    let short = name.split('[').next().unwrap_or(&name).trim().to_string();
    assert!(
        ours.iter()
            .any(|(s, z, n)| *s == start && *z == size && n.contains("CatchOwner(")),
        "{what}: {short} not in our perf map"
    );

    let mip = dir.join("coverage.mip");
    run(&["coverage", "-o", mip.to_str().expect("path")]);
    assert!(std::fs::metadata(&mip).expect("coverage file").len() > 32);
    let shown = cdac(&["mip", "show", mip.to_str().expect("path")]);
    assert!(!shown.trim().is_empty(), "{what}");

    let threads = run_json(&["threads", "--json"]);
    assert!(
        threads["threads"].as_array().is_some_and(|t| t.len() >= 10),
        "{what}"
    );
    let stacks = run_json(&["stacks", "--json"]);
    assert!(
        stacks.to_string().contains("CatchBlocker::CatchOwner"),
        "{what}: no stack shows CatchOwner"
    );
    if kind.is_some() {
        let analyze = run_json(&["analyze", "--json"]);
        assert!(
            analyze["threads"].as_u64().is_some_and(|n| n >= 10),
            "{what}"
        );
    }
}

/// Live first, then the dumps, one after another: `gcore` attaches to the testbed, and
/// `cdac stacks --pid` rightly refuses a process another tracer holds.
#[test]
fn every_command_live_then_full_and_gcore_dumps() {
    every_command(None);
    every_command(Some("full"));
    every_command(Some("gcore"));
}

#[test]
fn r2rmap_and_symbolize_on_the_testbed_library() {
    let tb = testbed_of(Variant::Net10);
    let dll =
        Path::new(tb.manifest["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed.R2R.dll");
    let dir = scratch("every-command-r2rmap");
    let map = dir.join("Cdac.Testbed.R2R.ni.r2rmap");
    cdac(&[
        "r2rmap",
        dll.to_str().expect("path"),
        "-o",
        map.to_str().expect("path"),
    ]);
    let text = std::fs::read_to_string(&map).expect("map");
    // A method line: RVA LENGTH NAME.
    let line = text
        .lines()
        .find(|l| l.contains("Precompiled::"))
        .expect("a precompiled method");
    let mut parts = line.splitn(3, ' ');
    let rva =
        u64::from_str_radix(parts.next().expect("rva").trim_start_matches("0x"), 16).expect("hex");
    let len =
        u64::from_str_radix(parts.next().expect("len").trim_start_matches("0x"), 16).expect("hex");
    let name = parts.next().expect("name");
    let inside = format!("{:#x}", rva + len / 2);
    let found = json(&[
        "symbolize",
        "--json",
        "--r2rmap",
        map.to_str().expect("path"),
        &inside,
    ]);
    assert!(found.to_string().contains(name), "{found} lacks {name}");
}
