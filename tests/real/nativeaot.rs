//! NativeAOT executables (testbed/Cdac.Testbed.Aot: aot-net11, aot-net10, aot-net10-nost),
//! copied without their `.dbg` file, live and as kernel cores of a crash. Oracles: the
//! manifest the testbed writes (each parked thread's OS and managed id, name, and the
//! runtime's own `Environment.StackTrace` text; the crash's thread, type and message).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{cdac_exe, cdac_json, scratch, testbed_dir};

/// Builds the variant (through scripts/testbed-setup) and copies its executable alone into
/// a scratch folder: no `.dbg` beside it.
fn executable_without_symbols(variant: &str, dir: &Path) -> PathBuf {
    let status = Command::new(crate::common::repo().join("scripts/testbed-setup"))
        .args(["--variant", variant])
        .stdout(Stdio::null())
        .status()
        .expect("run scripts/testbed-setup");
    assert!(status.success(), "testbed-setup --variant {variant}");
    let built = testbed_dir().join(variant).join("Cdac.Testbed.Aot");
    assert!(
        built.with_extension("Aot.dbg").exists()
            || testbed_dir()
                .join(variant)
                .join("Cdac.Testbed.Aot.dbg")
                .exists()
    );
    let exe = dir.join("Cdac.Testbed.Aot");
    std::fs::copy(&built, &exe).expect("copy the executable");
    exe
}

struct Parked {
    child: Child,
    manifest: serde_json::Value,
}

impl Drop for Parked {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn park(variant: &str, tag: &str) -> Parked {
    let dir = scratch(&format!("aot-park-{variant}-{tag}"));
    let exe = executable_without_symbols(variant, &dir);
    let manifest = dir.join("manifest.json");
    let _ = std::fs::remove_file(&manifest);
    let child = Command::new(&exe)
        .arg("park")
        .arg(&manifest)
        .stdout(Stdio::null())
        .spawn()
        .expect("start the NativeAOT testbed");
    let started = Instant::now();
    while !manifest.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no manifest from {variant}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let manifest = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).expect("manifest");
    Parked { child, manifest }
}

/// The method names of a runtime trace (`   at A.B() + 0x1f` → `A.B()`), innermost first,
/// without the frame that captured it.
fn trace_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("at "))
        .map(|l| l.split(" + 0x").next().unwrap().trim().to_string())
        .filter(|n| n != "System.Environment.get_StackTrace()")
        .collect()
}

fn frame_names(thread: &serde_json::Value) -> Vec<String> {
    thread["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .filter(|f| f["kind"] == "managed")
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

/// The managed frames as a trace shows them: a funclet's frame stands for its method, whose
/// own frame further out (and the exception dispatch between them) is not repeated.
fn logical_names(thread: &serde_json::Value) -> Vec<String> {
    let managed: Vec<&serde_json::Value> = thread["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .filter(|f| f["kind"] == "managed")
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < managed.len() {
        let name = managed[i]["name"].as_str().unwrap().to_string();
        if managed[i]["funclet"] == true {
            // Skip to the parent's own frame.
            let parent = managed[i + 1..]
                .iter()
                .position(|f| f["name"] == name.as_str());
            i += parent.map_or(0, |p| p + 1);
        }
        out.push(name);
        i += 1;
    }
    out
}

fn parked_threads_match_the_runtimes_own_traces(variant: &str) {
    let parked = park(variant, "stacks");
    let pid = parked.child.id().to_string();
    let stacks = cdac_json(&["stacks", "--pid", &pid, "--json"]);
    assert_eq!(
        stacks["warnings"],
        serde_json::json!([]),
        "{variant}: no warning on a healthy process"
    );
    let expected_threads = parked.manifest["threads"].as_array().unwrap();
    assert_eq!(expected_threads.len(), 4);
    for expected in expected_threads {
        let tid = expected["os_tid"].as_i64().unwrap();
        let thread = stacks["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["os_id"].as_i64() == Some(tid))
            .unwrap_or_else(|| panic!("{variant}: thread {tid} in the stacks"));
        assert_eq!(
            thread["name"], expected["name"],
            "{variant}: the managed Thread.Name"
        );
        assert_eq!(thread["managed"]["managed_id"], expected["managed_id"]);
        // From Park outwards the chain is the runtime's own trace, name for name.
        let names = logical_names(thread);
        let from_park: Vec<String> = names
            .iter()
            .skip_while(|n| !n.starts_with("Cdac.TestbedAot.Parking.Park("))
            .cloned()
            .collect();
        assert_eq!(
            from_park,
            trace_names(expected["stack_trace"].as_str().unwrap()),
            "{variant}: thread {} (all managed frames: {names:?})",
            expected["name"]
        );
        // The thread parked in a catch block dispatches its exception still.
        let exception = &thread["managed"]["exception"];
        match expected["exception_type"].as_str() {
            Some(ty) => {
                assert_eq!(exception["type"], ty, "{variant}: {exception}");
                assert_eq!(exception["message"], expected["exception_message"]);
                let funclet = thread["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|f| f["name"] == "Cdac.TestbedAot.Funclets.Run()")
                    .expect("the method of the catch block");
                assert_eq!(
                    funclet["funclet"], true,
                    "its first frame is the catch funclet"
                );
            }
            None => assert!(exception.is_null(), "{variant}: {exception}"),
        }
    }
    // The runtime's offsets (10 prints them) are the frames' offsets from their method.
    if variant == "aot-net10" {
        let orders = expected_threads
            .iter()
            .find(|t| t["name"] == "aot-orders")
            .unwrap();
        let text = orders["stack_trace"].as_str().unwrap();
        let checkout = text
            .lines()
            .find(|l| l.contains("Orders.Checkout("))
            .unwrap();
        let offset = u64::from_str_radix(checkout.rsplit("0x").next().unwrap(), 16).unwrap();
        let thread = stacks["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["os_id"] == orders["os_tid"])
            .unwrap();
        let frame = thread["frames"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "Cdac.TestbedAot.Orders.Checkout(Int32)")
            .unwrap();
        assert_eq!(frame["offset"].as_u64(), Some(offset));
    }
}

#[test]
fn net11_parked_threads_are_named_as_the_runtime_names_them_without_the_dbg_file() {
    parked_threads_match_the_runtimes_own_traces("aot-net11");
}

#[test]
fn net10_parked_threads_are_named_as_the_runtime_names_them_without_the_dbg_file() {
    parked_threads_match_the_runtimes_own_traces("aot-net10");
}

#[test]
fn a_build_without_stack_trace_data_keeps_addresses_and_says_so() {
    let parked = park("aot-net10-nost", "nost");
    let pid = parked.child.id().to_string();
    let stacks = cdac_json(&["stacks", "--pid", &pid, "--json"]);
    let warnings = stacks["warnings"].to_string();
    assert!(warnings.contains("StackTraceSupport=false"), "{warnings}");
    let orders = parked.manifest["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "aot-orders")
        .unwrap();
    // The runtime itself prints addresses only.
    assert!(orders["stack_trace"]
        .as_str()
        .unwrap()
        .contains("!<BaseAddress>+0x"));
    let thread = stacks["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["os_id"] == orders["os_tid"])
        .unwrap();
    let names = frame_names(thread);
    assert!(
        names.len() >= 4,
        "managed frames are still told apart: {names:?}"
    );
    for n in &names {
        assert!(
            n.starts_with("Cdac.Testbed.Aot!<BaseAddress>+0x"),
            "no guessed name: {n}"
        );
    }
}

/// Runs the crash mode under `ulimit -c unlimited`; returns the manifest and the kernel's
/// core, or `None` where this machine writes cores elsewhere.
fn crash_core(variant: &str) -> Option<(serde_json::Value, PathBuf)> {
    let dir = scratch(&format!("aot-crash-{variant}"));
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    let exe = executable_without_symbols(variant, &dir);
    let manifest = dir.join("manifest.json");
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -c unlimited && exec "$@""#)
        .arg("sh")
        .arg(&exe)
        .arg("crash")
        .arg(&manifest)
        .current_dir(&dir)
        .output()
        .expect("run the crash");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{variant} dies of SIGABRT"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Unhandled exception. System.InvalidOperationException"),
        "{stderr}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    let core = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "core" || n.starts_with("core."))
        });
    match core {
        Some(c) => Some((manifest, c)),
        None => {
            eprintln!("skipped: core_pattern does not write cores to the working directory");
            None
        }
    }
}

fn a_crash_core_names_thread_exception_and_trace(variant: &str) {
    let Some((manifest, core)) = crash_core(variant) else {
        return;
    };
    let report = cdac_json(&["analyze", "--dump", core.to_str().unwrap(), "--json"]);
    let tid = manifest["os_tid"].as_i64().unwrap();
    assert_eq!(report["signal"]["name"], "SIGABRT");
    assert_eq!(report["signal"]["thread"].as_i64(), Some(tid));
    assert_eq!(
        report["crashing_thread"]["name"], manifest["thread_name"],
        "by its managed name"
    );
    let exceptions = report["exceptions"].as_array().unwrap();
    let e = exceptions
        .iter()
        .find(|e| e["thread"].as_i64() == Some(tid))
        .expect("the crashing thread's exception");
    assert_eq!(e["exception"]["type"], manifest["exception_type"]);
    assert_eq!(e["exception"]["message"], manifest["message"]);
    // The exception's own trace, named from the executable: the runtime's, from Fail out.
    let trace: Vec<String> = e["exception"]["stack_trace"]
        .as_array()
        .unwrap_or_else(|| panic!("a trace: {e}"))
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        trace,
        trace_names(manifest["stack_trace"].as_str().unwrap())
    );
    // The runtime's crash report agrees.
    let crash = &report["runtime_crash_report"];
    assert_eq!(crash["reason"], 1);
    assert_eq!(crash["thread"].as_i64(), Some(tid));
    assert_eq!(crash["exception"]["type"], manifest["exception_type"]);
    // The crashing thread's stack names the same methods between the throw and the entry.
    let names = frame_names(&report["crashing_thread"]);
    assert!(
        names
            .iter()
            .any(|n| n == "Cdac.TestbedAot.Crasher.Fail(Int32, String)"),
        "{names:?}"
    );
}

#[test]
fn net11_kernel_core_of_an_unhandled_exception_is_analyzed() {
    a_crash_core_names_thread_exception_and_trace("aot-net11");
}

#[test]
fn net10_kernel_core_of_an_unhandled_exception_is_analyzed() {
    a_crash_core_names_thread_exception_and_trace("aot-net10");
}

#[test]
fn info_says_native_aot_and_which_descriptor() {
    for (variant, descriptor) in [("aot-net11", "embedded"), ("aot-net10", "debug-header")] {
        let parked = park(variant, "info");
        let pid = parked.child.id().to_string();
        let out = Command::new(cdac_exe())
            .args(["info", "--pid", &pid])
            .output()
            .expect("run cdac");
        let text = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("WARN") && !stderr.contains("warning"),
            "{variant}: {stderr}"
        );
        assert!(text.contains("NativeAOT"), "{variant}: {text}");
        assert!(text.contains(descriptor), "{variant}: {text}");
        let version = parked.manifest["runtime_version"].as_str().unwrap();
        assert!(
            text.contains(&format!("runtime version   {version}")),
            "{variant}: {text}"
        );
    }
}
