//! `cdac perf-inject` with the real `perf` on the .NET 10 testbed's CPU workload
//! (testbed/Cdac.Testbed/CpuWork.cs: HeavyPart, LightPart and SoloWork burn CPU), which runs
//! with W^X on (the runtime's default) and without the runtime's own perf map:
//! - before, `perf script` puts the JIT'ed samples in `/memfd:doublemapper (deleted)`, unnamed;
//! - after `cdac perf-inject` (in place, writing /tmp/perf-PID.map), at least 99% of those
//!   same samples are named and the three hot methods are leaves;
//! - `-o` into a copy gives the same bytes and leaves the input alone; a second run finds
//!   nothing left to rename;
//! - once the process has exited, a recording that needs its map makes the command exit 1.
//!
//! Skipped (with the reason printed) only when `perf` is missing or the kernel refuses
//! `perf_event_open`; scripts/ensure-tools installs perf (Debian: linux-perf).

use crate::common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{scratch, start_cpu_workload_without_perf_map, Variant};
use serde_json::Value;

fn cdac() -> Command {
    Command::new(crate::common::cdac_exe())
}

/// One frame of `perf script -F ip,sym,dso`: symbol and object.
#[derive(Debug, Clone)]
struct Frame {
    sym: String,
    dso: String,
}

/// True for a symbol perf resolved (not `[unknown]`, not a bare address).
fn is_named(sym: &str) -> bool {
    let bare = sym.trim_start_matches("0x");
    let is_address = !bare.is_empty() && bare.chars().all(|c| c.is_ascii_hexdigit());
    !sym.is_empty() && sym != "[unknown]" && !is_address
}

/// Where the trailing parenthesised object name starts (its `(`): the parentheses are
/// matched from the end, since the name itself may hold some ("(deleted)").
fn dso_start(rest: &str) -> Option<usize> {
    if !rest.ends_with(')') {
        return None;
    }
    let mut depth = 0;
    for (i, c) in rest.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The samples of a recording, each its frames leaf first.
fn perf_script(data: &Path) -> Vec<Vec<Frame>> {
    let out = Command::new("perf")
        .args(["script", "-F", "ip,sym,dso", "-i"])
        .arg(data)
        .output()
        .expect("run perf script");
    assert!(
        out.status.success(),
        "perf script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // A sample is a block of indented frame lines, "IP SYMBOL (DSO)"; blocks are separated
    // by blank lines.
    let mut samples = Vec::new();
    let mut cur: Vec<Frame> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            if !cur.is_empty() {
                samples.push(std::mem::take(&mut cur));
            }
            continue;
        }
        let (_ip, rest) = line.split_once(' ').unwrap_or((line, ""));
        let (sym, dso) = match dso_start(rest) {
            Some(i) => (&rest[..i], &rest[i + 1..rest.len() - 1]),
            None => (rest, ""),
        };
        cur.push(Frame {
            sym: sym.trim().to_string(),
            dso: dso.to_string(),
        });
    }
    if !cur.is_empty() {
        samples.push(cur);
    }
    samples
}

/// Why perf cannot be used here, if it cannot.
fn perf_missing() -> Option<String> {
    match Command::new("perf").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`perf --version` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!(
            "perf is not installed ({e}); scripts/ensure-tools installs linux-perf"
        )),
    }
}

/// True when perf record's failure is the kernel refusing perf_event_open.
fn refused(stderr: &str) -> bool {
    [
        "perf_event_paranoid",
        "Permission denied",
        "not permitted",
        "No permission",
        "Access to performance monitoring",
    ]
    .iter()
    .any(|s| stderr.contains(s))
}

fn inject(args: &[&str], data: &Path) -> (Output, Value) {
    let out = cdac()
        .args(["perf-inject", "--json", "-i"])
        .arg(data)
        .args(args)
        .output()
        .expect("run cdac perf-inject");
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "perf-inject JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, v)
}

#[test]
fn perf_inject_names_jit_frames_of_a_wx_process() {
    if let Some(why) = perf_missing() {
        eprintln!("perf_inject: skipped: {why}");
        return;
    }
    let _one = common::cpu_workload_lock();
    let workload = start_cpu_workload_without_perf_map(Variant::Net10);
    let pid = workload.tb.pid;
    let map_path = format!("/tmp/perf-{pid}.map");
    assert!(
        !Path::new(&map_path).exists(),
        "the runtime wrote its own map; the test needs one written by cdac"
    );
    let dir = scratch("perf-inject");
    let data = dir.join("perf.data");
    let rec = Command::new("perf")
        .args(["record", "-q", "-N", "-F", "499", "-g", "-p"])
        .arg(pid.to_string())
        .arg("-o")
        .arg(&data)
        .args(["--", "sleep", "4"])
        .output()
        .expect("run perf record");
    let stderr = String::from_utf8_lossy(&rec.stderr);
    if !rec.status.success() && refused(&stderr) {
        eprintln!("perf_inject: skipped: the kernel refused perf_event_open: {stderr}");
        return;
    }
    assert!(rec.status.success(), "perf record: {stderr}");
    let original = std::fs::read(&data).expect("perf.data");

    // Before: the JIT'ed samples sit in the double mapping, unnamed.
    let before = perf_script(&data);
    let jit: Vec<usize> = (0..before.len())
        .filter(|&i| before[i][0].dso.starts_with("/memfd:doublemapper"))
        .collect();
    assert!(
        jit.len() >= 200,
        "only {} of {} samples in JIT'ed code",
        jit.len(),
        before.len()
    );
    let named_before = jit.iter().filter(|&&i| is_named(&before[i][0].sym)).count();
    assert_eq!(named_before, 0, "perf named JIT'ed code before the rewrite");

    // The rewrite, in place, with the map.
    let (out, summary) = inject(&[], &data);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary["in_place"], true);
    let procs = summary["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 1, "{summary}");
    let p = &procs[0];
    assert_eq!(p["pid"].as_i64(), Some(i64::from(pid)));
    assert!(p["jit_code"].as_u64() >= Some(1), "{p}");
    assert!(p["images"].as_u64() >= Some(1), "the CoreLib image: {p}");
    assert_eq!(p["map"]["status"], "written", "{p}");
    assert!(p["map"]["methods"].as_u64() > Some(100), "{p}");
    assert_eq!(summary["ok"], true);

    // After: the same samples, named from the map.
    let after = perf_script(&data);
    assert_eq!(after.len(), before.len(), "the same samples");
    let named = jit.iter().filter(|&&i| is_named(&after[i][0].sym)).count();
    eprintln!(
        "perf_inject: JIT'ed leaf samples named: before 0/{n} (0%), after {named}/{n} ({:.2}%)",
        100.0 * named as f64 / jit.len() as f64,
        n = jit.len()
    );
    assert!(
        named as f64 >= 0.99 * jit.len() as f64,
        "{named} of {} JIT'ed samples named",
        jit.len()
    );
    for m in ["HeavyPart", "LightPart", "SoloWork"] {
        let want = format!("Cdac.Testbed.CpuWork::{m}(");
        let leaves = jit
            .iter()
            .filter(|&&i| after[i][0].sym.contains(&want))
            .count();
        assert!(
            leaves as f64 >= 0.02 * jit.len() as f64,
            "{m}: {leaves} of {} JIT'ed leaf samples",
            jit.len()
        );
        assert!(
            jit.iter().all(|&i| !before[i][0].sym.contains(&want)),
            "{m} was named before the rewrite"
        );
    }

    // -o into a copy: the same bytes, the input untouched. Then nothing is left to do.
    let input = dir.join("original.data");
    std::fs::write(&input, &original).expect("copy");
    let copy = dir.join("copy.data");
    let (out, s) = inject(&["--no-map", "-o", copy.to_str().expect("utf-8")], &input);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert_eq!(s["rewritten"], summary["rewritten"]);
    assert!(std::fs::read(&copy).expect("copy") == std::fs::read(&data).expect("data"));
    assert!(
        std::fs::read(&input).expect("input") == original,
        "-o changed the input"
    );
    let (out, s) = inject(&[], &data);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert_eq!(s["rewritten"], 0, "{s}");

    // The process gone: its map cannot be written, and the command says so.
    drop(workload);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (out, s) = inject(&[], &input);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert_eq!(s["processes"][0]["map"]["status"], "exited", "{s}");
    assert_eq!(s["ok"], false);
    let _ = std::fs::remove_file(&map_path);
}
