//! Every command of the CLI on the synthetic .NET 10-style runtime (tests/fixtures/synthetic),
//! live and on a gcore of it: `info`, `threads`, `stacks`, `modules`, `methods`, `ip2md` and
//! `analyze` must each give a complete answer (no warnings), and every value is checked
//! against what the host says it laid out (its report line): thread ids (the OS ids are the
//! host's real threads), Frames, the exception in flight with its inner exception and
//! captured stack trace, the modules and their images, and the method names the two
//! embedded assemblies' metadata give.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::{hex, scratch, SyntheticHost};
use serde_json::Value;

/// Where the CLI reads from: a live process or a core.
#[derive(Clone, Copy)]
enum Source<'a> {
    Live(i32),
    Core(&'a Path),
}

impl Source<'_> {
    fn args(&self) -> Vec<String> {
        match self {
            Source::Live(pid) => vec!["--pid".into(), pid.to_string()],
            Source::Core(p) => vec!["--dump".into(), p.display().to_string()],
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Source::Live(_) => "live",
            Source::Core(_) => "gcore",
        }
    }
}

/// Runs `cdac COMMAND --json <target> EXTRA…`; returns its JSON. The command must succeed
/// and print no warning.
fn cdac_json(command: &str, from: Source<'_>, extra: &[String]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_cdac"))
        .arg(command)
        .arg("--json")
        .args(from.args())
        .args(extra)
        .output()
        .expect("run cdac");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // ip2md is asked about a thunk too: that address is answered as not managed code,
    // which its exit code says (1, "1 of N address(es) not answered").
    let partial_ok = command == "ip2md"
        && out.status.code() == Some(1)
        && stderr.contains("1 of ")
        && stderr.contains("not answered");
    assert!(
        out.status.success() || partial_ok,
        "{} cdac {command}: {stderr}",
        from.what()
    );
    assert!(
        !stderr.contains("WARN") && !stderr.contains("warning:"),
        "{} cdac {command} warned: {stderr}",
        from.what()
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{} cdac {command}: {e}", from.what()))
}

fn opt_hex(v: &Value) -> Option<u64> {
    (!v.is_null()).then(|| hex(v))
}

/// The host's methods that have code (no stubs), by start.
fn host_methods(host: &SyntheticHost) -> HashMap<u64, &Value> {
    host.report["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["kind"] != "stub")
        .map(|m| (hex(&m["start"]), m))
        .collect()
}

fn check_info(from: Source<'_>) {
    let info = cdac_json("info", from, &[]);
    assert_eq!(info["runtime_version"], "10.0.0", "{}", from.what());
    // A .NET 10 build the net10 overlay was not verified on, but it describes everything
    // itself: the overlay fits its version line and adds nothing (so no warning) but the
    // FieldDesc layout and the values cdac reads the GC with on runtimes without a GC contract (this one advertises
    // one, which cdac does not read yet: the gc-heap check skips it).
    let overlays = info["overlays"].as_array().unwrap();
    let net10 = overlays
        .iter()
        .find(|o| o["name"] == "net10.0-linux-x64")
        .expect("net10 overlay considered");
    assert_eq!(net10["fit"], "same-version-line");
    for key in ["added_contracts", "added_fields", "conflicts"] {
        assert_eq!(net10[key], serde_json::json!([]), "{}: {key}", from.what());
    }
    // No runtime before .NET 11 describes FieldDesc (`cdac obj` reads fields with it), the
    // sync block's monitor and wait list (`WaitEventLink`), the sync block cache's count of
    // used table entries, and a thread-local data's back pointer (a runtime that names none
    // of these types gets cdac's).
    assert_eq!(
        net10["added_types"],
        serde_json::json!([
            "FieldDesc",
            "SyncBlock",
            "SyncBlockCache",
            "SyncTableEntry",
            "ThreadLocalData",
            "WaitEventLink"
        ]),
        "{}",
        from.what()
    );
    assert_eq!(
        net10["added_globals"],
        serde_json::json!(["GcDacGlobalsDacTableSlot", "HandleMaxInternalTypes"]),
        "{}",
        from.what()
    );
    let gc = info["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "gc-heap")
        .expect("gc-heap check");
    assert_eq!(gc["status"], "skipped", "{}: {gc}", from.what());
}

fn check_threads(host: &SyntheticHost, from: Source<'_>) {
    let what = from.what();
    let r = &host.report;
    let j = cdac_json("threads", from, &[]);
    assert_eq!(j["error"], Value::Null, "{what}");
    assert_eq!(hex(&j["thread_store"]), hex(&r["thread_store"]["address"]));
    assert_eq!(j["thread_count"], 3);
    assert_eq!(
        hex(&j["finalizer_thread"]),
        hex(&r["thread_store"]["finalizer"])
    );
    let got = j["threads"].as_array().unwrap();
    let want = r["threads"].as_array().unwrap();
    assert_eq!(got.len(), 3, "{what}");
    // The OS ids are the host's own threads: the main thread, and two it started.
    assert_eq!(want[0]["os_id"].as_i64(), Some(i64::from(host.pid)));
    for (g, w) in got.iter().zip(want) {
        let id = &w["managed_id"];
        // One thread shape for every command: the runtime's side under `managed`.
        let m = &g["managed"];
        assert_eq!(
            hex(&m["address"]),
            hex(&w["address"]),
            "{what}: thread {id}"
        );
        assert_eq!(m["managed_id"], w["managed_id"], "{what}");
        assert_eq!(g["os_id"], w["os_id"], "{what}: thread {id}");
        assert!(
            Path::new(&format!("/proc/{}/task/{}", host.pid, w["os_id"])).exists(),
            "thread {id}'s OS id is one of the host's threads"
        );
        assert_eq!(
            hex(&m["state"]["value"]),
            hex(&w["state"]),
            "{what}: thread {id}"
        );
        assert_eq!(m["finalizer"], w["finalizer"], "{what}: thread {id}");
        assert_eq!(m.get("explicit_frames_error"), None, "{what}: thread {id}");
        let frames = m["explicit_frames"].as_array().unwrap();
        let want_frames = w["frames"].as_array().unwrap();
        assert_eq!(frames.len(), want_frames.len(), "{what}: thread {id}");
        for (f, wf) in frames.iter().zip(want_frames) {
            assert_eq!(hex(&f["address"]), hex(&wf["address"]), "{what}");
            assert_eq!(f["kind"], wf["kind"], "{what}: thread {id}");
            if wf["kind"] == "InlinedCallFrame" {
                assert_eq!(
                    hex(&f["return_address"]),
                    hex(&wf["return_address"]),
                    "{what}"
                );
                assert_eq!(hex(&f["caller_sp"]), hex(&wf["caller_sp"]), "{what}");
                assert_eq!(hex(&f["saved_fp"]), hex(&wf["saved_fp"]), "{what}");
            }
        }
        match opt_hex(&w["exception"]) {
            None => assert_eq!(m["exception"], Value::Null, "{what}: thread {id}"),
            Some(obj) => {
                assert_eq!(hex(&m["exception"]["address"]), obj, "{what}");
                check_exception(&m["exception"], &r["exception"], what);
                assert!(m["nested_exceptions"].as_array().unwrap().is_empty());
            }
        }
        // The worker's managed Thread.Name; the others have none.
        assert_eq!(g["name"], w["name"], "{what}: thread {id}");
    }
}

/// An exception as cdac printed it against the host's: type, message, HResult, inner.
fn check_exception(got: &Value, want: &Value, what: &str) {
    assert_eq!(hex(&got["address"]), hex(&want["address"]), "{what}");
    assert_eq!(got["type"], want["type"], "{what}");
    assert_eq!(got["message"], want["message"], "{what}");
    assert_eq!(got["hresult"], want["hresult"], "{what}");
    if want["inner"].is_null() {
        assert_eq!(got["inner"], Value::Null, "{what}");
    } else {
        check_exception(&got["inner"], &want["inner"], what);
    }
}

fn check_stacks(host: &SyntheticHost, from: Source<'_>) {
    let what = from.what();
    let j = cdac_json("stacks", from, &["--native".to_string()]);
    assert_eq!(j["warnings"], serde_json::json!([]), "{what}");
    let by_os: HashMap<i64, &Value> = j["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["os_id"].as_i64().unwrap(), t))
        .collect();
    for w in host.report["threads"].as_array().unwrap() {
        let os = w["os_id"].as_i64().unwrap();
        let t = by_os
            .get(&os)
            .unwrap_or_else(|| panic!("{what}: no stack for thread {os}"));
        assert_eq!(t["managed"]["managed_id"], w["managed_id"], "{what}");
        assert_eq!(hex(&t["managed"]["address"]), hex(&w["address"]));
        assert_eq!(t["stack_end"]["reason"], "complete", "{what}: {os}");
        let frames = t["frames"].as_array().unwrap();
        let managed: Vec<&Value> = frames.iter().filter(|f| f["kind"] == "managed").collect();
        match w["managed_frame"].as_str() {
            None => assert!(managed.is_empty(), "{what}: thread {os}"),
            Some(name) => {
                // The parked thread runs its JIT'ed method: one managed frame, named, at the
                // InlinedCallFrame's return address, between native frames.
                assert_eq!(managed.len(), 1, "{what}: thread {os}: {frames:?}");
                let f = managed[0];
                assert_eq!(f["name"], name, "{what}: thread {os}");
                assert_eq!(f["module"], "Synthetic", "{what}");
                assert_eq!(f["jit_type"], "jit");
                let icf = &w["frames"][0];
                assert_eq!(hex(&f["ip"]), hex(&icf["return_address"]), "{what}");
                assert_eq!(hex(&f["sp"]), hex(&icf["caller_sp"]), "{what}");
                let index = f["index"].as_u64().unwrap() as usize;
                assert!(index > 0 && index + 1 < frames.len(), "{what}: {frames:?}");
                // Unwound through it by its own unwind info into the native caller.
                assert_eq!(frames[index + 1]["found_by"], "unwind_info", "{what}");
                assert!(
                    frames[index + 1]["name"]
                        .as_str()
                        .unwrap()
                        .contains("parked_main"),
                    "{what}: {:?}",
                    frames[index + 1]
                );
                // The managed Thread.Name where the thread has one, else (live) the
                // kernel's name.
                if !w["name"].is_null() {
                    assert_eq!(t["name"], w["name"], "{what}: {os}");
                    assert_eq!(t["name_source"], "managed", "{what}: {os}");
                } else if let Source::Live(_) = from {
                    assert!(t["name"].as_str().unwrap().starts_with("syn-"));
                    assert_eq!(t["name_source"], "kernel", "{what}: {os}");
                }
            }
        }
        match opt_hex(&w["exception"]) {
            None => assert_eq!(t["managed"]["exception"], Value::Null),
            Some(_) => check_exception(&t["managed"]["exception"], &host.report["exception"], what),
        }
    }
}

fn check_modules(host: &SyntheticHost, from: Source<'_>) {
    let what = from.what();
    let got = cdac_json("modules", from, &[]);
    let want = host.report["modules"].as_array().unwrap();
    let got = got.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{what}");
    assert_eq!(want.len(), 2);
    for (g, w) in got.iter().zip(want) {
        assert_eq!(hex(&g["address"]), hex(&w["address"]), "{what}");
        assert_eq!(hex(&g["assembly"]), hex(&w["assembly"]), "{what}");
        assert_eq!(g["path"], w["path"], "{what}");
        assert_eq!(g["file_name"], w["file_name"], "{what}");
        assert_eq!(hex(&g["base"]), hex(&w["base"]), "{what}");
        assert_eq!(g["size"], w["size"], "{what}");
        assert_eq!(g["mapped"], w["mapped"], "{what}");
        assert_eq!(g["is_dynamic"], false);
        assert_eq!(g["is_collectible"], false);
        assert_eq!(
            opt_hex(&g["ready_to_run_info"]),
            opt_hex(&w["ready_to_run_info"]),
            "{what}"
        );
    }
    // The modules' files are where their paths say (the build puts them beside the library).
    for w in want {
        assert!(Path::new(w["path"].as_str().unwrap()).is_file(), "{w}");
    }
    // The precompiled module's image is the ReadyToRun image the ExecutionManager knows.
    assert_eq!(hex(&want[0]["base"]), hex(&host.report["image_base"]));
    assert_eq!(hex(&want[0]["address"]), hex(&host.report["r2r_module"]));
}

fn check_methods(host: &SyntheticHost, from: Source<'_>) {
    let what = from.what();
    let want = host_methods(host);
    let got = cdac_json("methods", from, &[]);
    let got = got.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{what}");
    assert_eq!(got.len(), 43);
    for g in got {
        let start = hex(&g["start"]);
        let w = want
            .get(&start)
            .unwrap_or_else(|| panic!("{what}: {start:#x} is no method of the host"));
        assert_eq!(hex(&g["method_desc"]), hex(&w["method_desc"]), "{what}");
        assert_eq!(g["size"], w["size"], "{what}");
        assert_eq!(g["jit_type"], w["kind"], "{what}");
        assert_eq!(g["name"], w["name"], "{what}: {start:#x}");
        assert_eq!(g["module"], w["module"], "{what}: {start:#x}");
    }
    // The names are the metadata's: spot-check a few exactly.
    let names: Vec<&str> = got.iter().map(|g| g["name"].as_str().unwrap()).collect();
    for n in [
        "int32 [Synthetic] Synthetic.Program::Work(int32)",
        "bool [Synthetic] Synthetic.Program::TryParse(string,int32&)",
        "instance int32 [Synthetic.Precompiled] Synthetic.Precompiled.Library::Scale(int32)",
        "int32[] [Synthetic.Precompiled] Synthetic.Precompiled.Library::Range(int32,int32)",
    ] {
        assert!(names.contains(&n), "{what}: {n} missing from {names:?}");
    }
}

fn check_ip2md(host: &SyntheticHost, from: Source<'_>) {
    let what = from.what();
    let want = host_methods(host);
    let mut addrs: Vec<u64> = Vec::new();
    for (&start, m) in &want {
        addrs.push(start);
        addrs.push(start + m["size"].as_u64().unwrap() - 1);
    }
    addrs.sort_unstable();
    let returns: Vec<u64> = host.report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| {
            t["frames"]
                .as_array()?
                .first()
                .map(|f| hex(&f["return_address"]))
        })
        .collect();
    assert_eq!(returns.len(), 2);
    addrs.extend(&returns);
    let thunk = hex(&host.report["thunks"]["start"]);
    addrs.push(thunk);
    let args: Vec<String> = addrs.iter().map(|a| format!("{a:#x}")).collect();
    let got = cdac_json("ip2md", from, &args);
    let got = got.as_array().unwrap();
    assert_eq!(got.len(), addrs.len());
    for (g, &ip) in got.iter().zip(&addrs) {
        assert_eq!(hex(&g["address"]), ip, "{what}");
        if ip == thunk {
            assert_eq!(g["error"], "not in managed code", "{what}");
            continue;
        }
        let start = hex(&g["start"]);
        let w = want[&start];
        assert!(start <= ip && ip < start + w["size"].as_u64().unwrap());
        assert_eq!(g["relative_offset"].as_u64(), Some(ip - start), "{what}");
        assert_eq!(hex(&g["method_desc"]), hex(&w["method_desc"]), "{what}");
        assert_eq!(g["name"], w["name"], "{what}: {ip:#x}");
    }
    // The parked threads' return addresses are 12 bytes into their trampolines.
    for (g, ip) in got[got.len() - 3..got.len() - 1].iter().zip(&returns) {
        assert_eq!(g["relative_offset"], 12, "{what}: {ip:#x}");
    }
}

fn check_analyze(host: &SyntheticHost, from: Source<'_>) {
    let what = from.what();
    let j = cdac_json("analyze", from, &[]);
    assert_eq!(j["runtime"]["version"], "10.0.0");
    assert_eq!(j["signal"], Value::Null, "{what}: no signal in a gcore");
    assert_eq!(j["threads"], 3, "{what}");
    let exceptions = j["exceptions"].as_array().unwrap();
    assert_eq!(exceptions.len(), 1, "{what}");
    let worker = &host.report["threads"][2];
    assert_eq!(exceptions[0]["thread"], worker["os_id"], "{what}");
    assert_eq!(exceptions[0]["managed_id"], worker["managed_id"], "{what}");
    let e = &exceptions[0]["exception"];
    let want = &host.report["exception"];
    check_exception(e, want, what);
    // The captured stack trace, named.
    let names: Vec<&Value> = e["stack_trace"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: stack trace {}", e["stack_trace"]))
        .iter()
        .map(|f| &f["name"])
        .collect();
    let want_names: Vec<&Value> = want["stack_trace"].as_array().unwrap().iter().collect();
    assert_eq!(names, want_names, "{what}");
    assert_eq!(e["inner"]["stack_trace"], serde_json::json!([]), "{what}");
}

#[test]
fn every_command_live() {
    let host = SyntheticHost::start(&[]);
    let from = Source::Live(host.pid);
    check_info(from);
    check_threads(&host, from);
    check_stacks(&host, from);
    check_modules(&host, from);
    check_methods(&host, from);
    check_ip2md(&host, from);
    check_analyze(&host, from);
}

#[test]
fn every_command_on_a_gcore() {
    let host = SyntheticHost::start(&[]);
    let core = scratch("synthetic-commands").join("host.core");
    host.gcore(&core);
    let from = Source::Core(&core);
    check_info(from);
    check_threads(&host, from);
    check_stacks(&host, from);
    check_modules(&host, from);
    check_methods(&host, from);
    check_ip2md(&host, from);
    check_analyze(&host, from);
    std::fs::remove_file(&core).ok();
}

#[test]
fn thread_objects_are_reserved_for_thread_names() {
    // Each Thread's GCHandle leads to its managed System.Threading.Thread, described as
    // `ThreadObject` with .NET 10.0.14's offsets: `_name`, `_managedThreadId`, and the
    // back pointer to the native Thread.
    use cdac::runtime::{OpenOptions, Runtime};
    let host = SyntheticHost::start(&[]);
    let rt = Runtime::attach(host.pid, &OpenOptions::default()).expect("attach");
    let (t, d) = (rt.target(), rt.descriptor());
    let handle_off = d.ty("Thread").unwrap().offset("GCHandle").unwrap();
    let obj_ty = d.ty("ThreadObject").unwrap();
    assert_eq!(obj_ty.offset("_name").unwrap(), 24);
    assert_eq!(obj_ty.offset("_managedThreadId").unwrap(), 52);
    assert_eq!(obj_ty.offset("_DONT_USE_InternalThread").unwrap(), 40);
    let string_ty = d.ty("String").unwrap();
    for w in host.report["threads"].as_array().unwrap() {
        let thread = hex(&w["address"]);
        let handle = t.read_pointer(thread + handle_off).unwrap();
        let obj = t.read_pointer(handle).unwrap();
        assert_eq!(obj, hex(&w["thread_object"]));
        assert_eq!(
            t.read_pointer(obj + obj_ty.offset("_DONT_USE_InternalThread").unwrap())
                .unwrap(),
            thread
        );
        assert_eq!(
            Some(u64::from(
                t.read_u32(obj + obj_ty.offset("_managedThreadId").unwrap())
                    .unwrap()
            )),
            w["managed_id"].as_u64()
        );
        let name = t
            .read_pointer(obj + obj_ty.offset("_name").unwrap())
            .unwrap();
        let got = (name != 0).then(|| {
            let len = t
                .read_u32(name + string_ty.offset("m_StringLength").unwrap())
                .unwrap();
            t.read_utf16(
                name + string_ty.offset("m_FirstChar").unwrap(),
                len as usize,
            )
            .unwrap()
        });
        assert_eq!(
            got.as_deref(),
            w["name"].as_str(),
            "thread {}",
            w["managed_id"]
        );
    }
    assert_eq!(host.report["threads"][2]["name"], "synthetic-worker");
}
