//! Limits on the real .NET 8 testbed (8.0.33, or 8.0.0 with `CDAC_NET8_VARIANT=net8.0.0`):
//! the defaults leave every real walk far inside them, and each limit, lowered below what
//! the runtime needs, gives an error or warning that names its command-line option, while
//! the rest of the command goes on where it can.

use crate::common;

use std::process::Command;

use cdac::contracts::execution_manager::enumerate::enumerate_code;
use cdac::contracts::loader::modules;
use cdac::limits::Limits;
use cdac::names::MethodNamer;
use cdac::runtime::{OpenOptions, Runtime};
use common::{repo, testbed};

/// Runs `cdac ARGS --pid PID`; returns (exit code, stdout, stderr).
fn cdac(args: &[&str]) -> (i32, String, String) {
    let pid = testbed().pid.to_string();
    let out = Command::new(crate::common::cdac_exe())
        .args(args)
        .args(["--pid", &pid])
        .output()
        .expect("run cdac");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The number of methods `cdac methods` lists (its last line: "N method(s)").
fn method_count(stdout: &str) -> usize {
    stdout
        .lines()
        .last()
        .and_then(|l| l.strip_suffix(" method(s)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count line in {:?}", stdout.lines().last()))
}

#[test]
fn default_limits_leave_the_whole_runtime_far_inside_them() {
    let rt = Runtime::attach(testbed().pid, &OpenOptions::default()).expect("attach");
    let (t, d) = (rt.target(), rt.descriptor());
    let limits = Limits::default();
    let en = enumerate_code(t, d).expect("enumerate");
    let limit_errors: Vec<_> = en
        .errors
        .iter()
        .filter(|e| e.error.limit().is_some())
        .collect();
    assert!(limit_errors.is_empty(), "{limit_errors:?}");
    let mods = modules(t, d).expect("modules");
    let mut namer = MethodNamer::new(t, d);
    for e in &en.entries {
        namer.name(e.method_desc);
    }
    let read = t.bytes_read();
    eprintln!(
        "whole runtime: {} methods, {} modules, {} code heaps, {} ReadyToRun images; \
         {read} bytes read ({:.1} MiB)",
        en.entries.len(),
        mods.len(),
        en.stats.heaps.len(),
        en.stats.r2r_images,
        read as f64 / (1 << 20) as f64
    );
    assert!(en.entries.len() > 4000, "{} methods", en.entries.len());
    // Every list is orders of magnitude below the list-length limit, and the whole job
    // reads a small fraction of the total-read limit.
    for n in [mods.len(), en.stats.heaps.len(), en.entries.len()] {
        assert!((n as u64) < limits.max_list_length / 64, "{n}");
    }
    assert!(read > 1 << 20, "{read} bytes read");
    assert!(read < limits.max_total_read_bytes / 16, "{read} bytes read");
}

#[test]
fn a_lowered_list_length_limit_is_an_error_naming_its_option() {
    let (code, out, err) = cdac(&["modules", "--max-list-length", "5"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("AppDomain assembly list")
            && err.contains("list-length limit (--max-list-length), which is 5"),
        "{err}"
    );
    // Raised back, the same command lists every module.
    let (code, out, err) = cdac(&["modules", "--json", "--max-list-length", "1000"]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<serde_json::Value> = serde_json::from_str(&out).expect("JSON");
    assert!(listed.len() > 5, "{} modules", listed.len());
}

#[test]
fn a_lowered_total_read_limit_stops_the_command_with_its_option() {
    let (code, _, err) = cdac(&["methods", "--max-total-read", "1M"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("total-read limit (--max-total-read), which is 1048576"),
        "{err}"
    );
    let (code, out, err) = cdac(&["methods", "--max-total-read", "4G"]);
    assert_eq!(code, 0, "{err}");
    assert!(method_count(&out) > 4000);
}

#[test]
fn a_lowered_descriptor_size_limit_refuses_the_descriptor() {
    let file = repo().join("descriptors/net8.0-linux-x64.json");
    let size = std::fs::metadata(&file).expect("descriptor").len();
    let path = file.to_str().expect("utf-8 path");
    let (code, _, err) = cdac(&["info", "--descriptor", path, "--max-descriptor-bytes", "1K"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("file size is {size}"))
            && err.contains("descriptor-size limit (--max-descriptor-bytes), which is 1024"),
        "{err}"
    );
    let (code, _, err) = cdac(&["info", "--descriptor", path]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn lowered_walk_limits_give_partial_results_and_warnings_naming_them() {
    let (code, out, err) = cdac(&["methods"]);
    assert_eq!(code, 0, "{err}");
    let all = method_count(&out);

    // A map scan of 2 units per heap: JIT'ed code is mostly not found; ReadyToRun code is.
    // Methods are missing: some items not answered (exit 1).
    let (code, out, err) = cdac(&["methods", "--max-map-scan", "2"]);
    assert_eq!(code, 1, "{err}");
    let partial = method_count(&out);
    assert!(partial > 0 && partial < all, "{partial} of {all}");
    assert!(
        err.contains("map-scan limit (--max-map-scan), which is 2"),
        "{err}"
    );

    // No hash probes: no ReadyToRun entry point resolves to its method.
    let (code, out, err) = cdac(&["methods", "--max-hash-chain", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        !out.lines().any(|l| l.contains(" r2r ")),
        "R2R methods listed"
    );
    assert!(
        err.contains("hash-chain limit (--max-hash-chain), which is 0"),
        "{err}"
    );

    // Strings of 4 units: module paths are not read, the modules still are.
    let (code, out, err) = cdac(&["modules", "--json", "--max-string-length", "4"]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<serde_json::Value> = serde_json::from_str(&out).expect("JSON");
    assert!(listed.len() > 5);
    assert!(listed.iter().all(|m| m["path"].is_null()), "{out}");
    assert!(
        err.contains("string-length limit (--max-string-length), which is 4"),
        "{err}"
    );

    // Reads of at most 4 KiB: images are not read from memory (their files are).
    let (code, out, err) = cdac(&["methods", "--max-read-bytes", "4K"]);
    assert_eq!(code, 0, "{err}");
    assert!(method_count(&out) > 4000);
    assert!(err.contains("(--max-read-bytes)"), "{err}");
}

/// A reader that goes away (`cdac … | head -1`, `2>&1 | head -1`) ends the command quietly:
/// exit 0, never a panic on the failed write. The pipe is closed before the command writes
/// anything, so every write fails.
#[test]
fn closed_output_streams_end_the_command_quietly() {
    use std::process::Stdio;
    let pid = testbed().pid.to_string();
    for (args, close_stdout) in [
        (&["methods"][..], true),
        (&["info"][..], true),
        (&["modules", "--json"][..], true),
        (&["ip2md", "0x1000"][..], true),
        // Every module path over the string limit: one warning each, on a closed stderr.
        (&["modules", "--max-string-length", "4"][..], false),
    ] {
        let piped = || Stdio::piped();
        let (out, err) = if close_stdout {
            (piped(), Stdio::null())
        } else {
            (Stdio::null(), piped())
        };
        let mut child = Command::new(crate::common::cdac_exe())
            .args(args)
            .args(["--pid", &pid])
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("run cdac");
        // Close our read end at once.
        drop(child.stdout.take());
        drop(child.stderr.take());
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(0), "{args:?}: {status}");
    }
}
