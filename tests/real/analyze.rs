//! `cdac analyze` on the dump the runtime writes (createdump, full) when the testbed dies of
//! an unhandled exception (`--crash`: an InvalidOperationException thrown from a catch block
//! with the caught ArgumentException as its inner exception, messages known), on .NET 10, 9
//! and 8 (and on linux-arm64 10 and 9, from the core qemu-user writes when the guest
//! aborts): the crashing thread and signal, the exception's type, message and inner
//! exception, and the crashing thread's stack through the throwing method.

use crate::common;
// The schema checker uses the CLI, which the C ABI's tests (sharing common/) do not build.
use crate::json_schema;

use std::process::Command;

use common::{crash_dump, Variant};

use serde_json::Value;

fn analyze(dump: &std::path::Path) -> Value {
    let out = Command::new(crate::common::cdac_exe())
        .args(["analyze", "--json", "--dump"])
        .arg(dump)
        .output()
        .expect("run cdac");
    assert!(
        out.status.success(),
        "cdac analyze: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    json_schema::assert_matches_schema("analyze", &v);
    v
}

/// `Ns.Type::Method` of a frame name such as `void [Asm] Ns.Type::Method(int32)`.
fn short_name(name: &str) -> String {
    let head = name.split('(').next().unwrap_or(name);
    head.rsplit(' ').next().unwrap_or(head).to_string()
}

fn analyze_crash_of(variant: Variant) {
    let (m, dump) = crash_dump(variant);
    let crash = &m["crash"];
    let a = analyze(&dump);
    let what = variant.name();
    // OS threads and, of them, the runtime's: as many as `threads` lists.
    let runtime_threads =
        crate::common::cdac_json(&["threads", "--json", "--dump", &dump.display().to_string()]);
    let listed = runtime_threads["threads"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(a["managed_threads"].as_u64(), Some(listed), "{what}");
    assert!(a["threads"].as_u64().unwrap_or(0) >= listed, "{what}");
    // The signal and the crashing thread.
    assert_eq!(a["signal"]["name"], "SIGABRT", "{what}: {}", a["signal"]);
    assert_eq!(a["signal"]["thread"], crash["os_tid"], "{what}");
    let thread = &a["crashing_thread"];
    assert_eq!(thread["os_id"], crash["os_tid"], "{what}");
    assert_eq!(
        thread["managed"]["managed_id"], crash["managed_id"],
        "{what}"
    );
    // The exception in flight on it, with its inner exception.
    let e = &thread["managed"]["exception"];
    assert_eq!(e["type"], crash["exception_type"], "{what}: {e}");
    assert_eq!(e["message"], crash["message"], "{what}");
    assert_eq!(
        e["inner"]["type"], crash["inner"]["exception_type"],
        "{what}"
    );
    assert_eq!(e["inner"]["message"], crash["inner"]["message"], "{what}");
    let listed = a["exceptions"].as_array().expect("exceptions");
    assert!(
        listed
            .iter()
            .any(|x| x["thread"] == crash["os_tid"]
                && x["exception"]["type"] == crash["exception_type"]),
        "{what}: {listed:?}"
    );
    // The stack: the throwing method's funclet (the catch block that threw) tied to its
    // frame, the inner thrower below that frame, and the chain up to Main.
    let frames = thread["frames"].as_array().expect("frames");
    let names: Vec<String> = frames
        .iter()
        .filter(|f| f["kind"] == "managed")
        .map(|f| short_name(f["name"].as_str().unwrap_or("")))
        .collect();
    let thrower = crash["method"].as_str().expect("method");
    let inner = crash["inner"]["method"].as_str().expect("inner method");
    let chain: Vec<String> = crash["expected_chain"]
        .as_array()
        .expect("chain")
        .iter()
        .map(|v| v.as_str().unwrap_or("").to_string())
        .collect();
    // The inner thrower's frame, then the chain from the outer thrower up to Main.
    let at_inner = names
        .iter()
        .rposition(|n| n == inner)
        .unwrap_or_else(|| panic!("{what}: no frame of {inner} in {names:?}"));
    let above: Vec<String> = names[at_inner + 1..]
        .iter()
        .filter(|n| chain.contains(n))
        .cloned()
        .collect();
    assert_eq!(above, chain, "{what}: {names:?}");
    if variant == Variant::Net8 {
        // .NET 8 dispatches the exception thrown in the catch block with the catch funclet
        // already off the stack (ClrMD's walk of these dumps shows the same frames).
        assert!(!frames.iter().any(
            |f| f["funclet"] == true && short_name(f["name"].as_str().unwrap_or("")) == thrower
        ));
    } else {
        // .NET 9 and 10 dispatch in managed code on top of the catch funclet that threw:
        // it is there, tied to its method's frame.
        let funclet = frames
            .iter()
            .find(|f| {
                f["funclet"] == true && short_name(f["name"].as_str().unwrap_or("")) == thrower
            })
            .unwrap_or_else(|| panic!("{what}: no catch funclet of {thrower} in {names:?}"));
        assert_eq!(funclet["method_desc"], crash["method_desc"], "{what}");
        let parent = funclet["parent_frame"]
            .as_u64()
            .expect("tied to its method") as usize;
        assert_eq!(
            frames[parent]["method_desc"], crash["method_desc"],
            "{what}"
        );
        assert_eq!(frames[parent]["funclet"], false, "{what}");
    }
    // The captured stack traces name the throwing methods, with file and line from the
    // testbed's PDB: the outer exception's first frame is the throw in CrashOuter's catch
    // block, the inner one's the throw in CrashInner.
    let x = listed
        .iter()
        .find(|x| x["thread"] == crash["os_tid"])
        .expect("the crashing thread's exception");
    let source = std::fs::read_to_string(common::repo().join("testbed/Cdac.Testbed/Crash.cs"))
        .expect("Crash.cs");
    let line_of = |text: &str| {
        source
            .lines()
            .position(|l| l.contains(text))
            .unwrap_or_else(|| panic!("{text:?} in Crash.cs")) as u64
            + 1
    };
    for (e, want, text) in [
        (
            &x["exception"],
            &crash["method_desc"],
            "throw new InvalidOperationException(OuterMessage",
        ),
        (
            &x["exception"]["inner"],
            &crash["inner"]["method_desc"],
            "throw new ArgumentException(InnerMessage)",
        ),
    ] {
        let frames = e["stack_trace"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: stack_trace of {e}"));
        let first = &frames[0];
        assert_eq!(
            common::hex(&first["method_desc"]),
            common::hex(want),
            "{what}: {e}"
        );
        let src = &first["source"];
        assert!(
            src["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("Cdac.Testbed/Crash.cs")),
            "{what}: {first}"
        );
        assert_eq!(src["line"].as_u64(), Some(line_of(text)), "{what}: {first}");
        eprintln!(
            "{what}: {} thrown at {}:{}",
            first["name"], src["file"], src["line"]
        );
    }
}

#[test]
fn analyze_names_the_crash_on_net10() {
    analyze_crash_of(Variant::Net10);
}

#[test]
fn analyze_names_the_crash_on_net11() {
    analyze_crash_of(Variant::Net11);
}

#[test]
fn analyze_names_the_crash_on_net9() {
    analyze_crash_of(Variant::Net9);
}

#[test]
fn analyze_names_the_crash_on_net8() {
    analyze_crash_of(Variant::Net8);
}

/// linux-arm64 under qemu-user: the guest's abort makes qemu write the core.
#[test]
fn analyze_names_the_crash_on_net10_arm64() {
    analyze_crash_of(Variant::Net10Arm64);
}

#[test]
fn analyze_names_the_crash_on_net11_arm64() {
    analyze_crash_of(Variant::Net11Arm64);
}

#[test]
fn analyze_names_the_crash_on_net9_arm64() {
    analyze_crash_of(Variant::Net9Arm64);
}

/// The thread the runtime's own crash report (`DOTNET_EnableCrashReport=1`, beside the dump)
/// says crashed: its `native_thread_id` (hex) where `crashed` is "true".
fn crash_report_thread(dump: &std::path::Path) -> u64 {
    let path = format!("{}.crashreport.json", dump.display());
    let report: Value = serde_json::from_slice(&std::fs::read(&path).expect("crash report"))
        .expect("crash report JSON");
    let crashed: Vec<u64> = report["payload"]["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["crashed"] == "true")
        .map(|t| common::hex(&t["native_thread_id"]))
        .collect();
    assert_eq!(crashed.len(), 1, "{path}: {crashed:?}");
    crashed[0]
}

/// An unhandled exception on a background thread: the signal and the crashing thread are
/// that thread's (createdump writes the threads in creation order and gives the signal only
/// to it), as the runtime's own crash report says, with the exception and the stack up to
/// the thread's start method.
fn analyze_background_crash_of(variant: Variant) {
    let (m, dump) = common::crash_dump_on_thread(variant);
    let crash = &m["crash"];
    let what = variant.name();
    assert_eq!(crash["thread"], "background", "{what}");
    let tid = crash["os_tid"].as_u64().expect("os_tid");
    assert_ne!(tid, m["pid"].as_u64().expect("pid"), "{what}");
    assert_eq!(
        crash_report_thread(&dump),
        tid,
        "{what}: the runtime's crash report"
    );
    let a = analyze(&dump);
    assert_eq!(a["signal"]["name"], "SIGABRT", "{what}: {}", a["signal"]);
    assert_eq!(a["signal"]["thread"].as_u64(), Some(tid), "{what}");
    let thread = &a["crashing_thread"];
    assert_eq!(thread["os_id"].as_u64(), Some(tid), "{what}");
    // Its whole managed name (the kernel keeps 15 bytes; a dump none).
    assert_eq!(thread["name"], crash["thread_name"], "{what}");
    assert_eq!(thread["name_source"], "managed", "{what}");
    let e = &thread["managed"]["exception"];
    assert_eq!(e["type"], crash["exception_type"], "{what}: {e}");
    assert_eq!(e["message"], crash["message"], "{what}");
    let names: Vec<String> = thread["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .filter(|f| f["kind"] == "managed")
        .map(|f| short_name(f["name"].as_str().unwrap_or("")))
        .collect();
    let chain: Vec<String> = crash["expected_chain"]
        .as_array()
        .expect("chain")
        .iter()
        .map(|v| v.as_str().unwrap_or("").to_string())
        .collect();
    let ours: Vec<String> = names
        .iter()
        .filter(|n| chain.contains(n))
        .cloned()
        .collect();
    // The chain, innermost first, ends the thread's managed frames (a funclet repeats its
    // method's name; keep each name's outermost frame).
    let mut outermost: Vec<String> = Vec::new();
    for n in ours.iter().rev() {
        if !outermost.contains(n) {
            outermost.push(n.clone());
        }
    }
    outermost.reverse();
    assert_eq!(outermost, chain, "{what}: {names:?}");
    // The text names the same thread and marks its exception as the crashing thread's.
    let out = Command::new(crate::common::cdac_exe())
        .args(["analyze", "--dump"])
        .arg(&dump)
        .output()
        .expect("run cdac");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("Signal: SIGABRT (6) on thread {tid}")),
        "{what}: {text}"
    );
    assert!(
        text.contains(&format!(
            "Crashing thread {tid} \"{}\"",
            crash["thread_name"].as_str().expect("name")
        )),
        "{what}: {text}"
    );
    same_traces_as_the_runtime(&a, &dump, &text, what);
}

/// Our frames of the testbed (`Cdac.Testbed.Type::Method`) and the runtime's separators
/// (`SEP`) in a trace as `cdac analyze` prints it, and as the runtime printed the unhandled
/// exception on stderr (`Cdac.Testbed.Type.Method`): the inner exception was rethrown
/// through ExceptionDispatchInfo, so both show where its trace continues "from previous
/// location". Frames of the framework are left out (the runtime hides some of them).
fn same_traces_as_the_runtime(a: &Value, dump: &std::path::Path, text: &str, what: &str) {
    const SEP: &str = "--- End of stack trace from previous location ---";
    let log = std::fs::read_to_string(dump.with_file_name("testbed.log")).expect("testbed log");
    // The runtime's inner exception trace: after " ---> ", up to "--- End of inner".
    let runtime_inner: Vec<String> = log
        .lines()
        .skip_while(|l| !l.contains(" ---> System.ArgumentException"))
        .skip(1)
        .take_while(|l| !l.contains("--- End of inner exception stack trace ---"))
        .filter_map(|l| {
            let l = l.trim();
            if l == SEP {
                return Some("SEP".to_string());
            }
            let m = l.strip_prefix("at Cdac.Testbed.")?.split('(').next()?;
            let (ty, method) = m.rsplit_once('.')?;
            Some(format!("Cdac.Testbed.{ty}::{method}"))
        })
        .collect();
    assert!(runtime_inner.contains(&"SEP".to_string()), "{what}: {log}");
    let x = a["exceptions"]
        .as_array()
        .expect("exceptions")
        .iter()
        .find(|x| x["thread"] == a["signal"]["thread"])
        .expect("the crashing thread's exception");
    let mut ours = Vec::new();
    for f in x["exception"]["inner"]["stack_trace"]
        .as_array()
        .expect("trace")
    {
        let name = short_name(f["name"].as_str().unwrap_or(""));
        if name.starts_with("Cdac.Testbed.") {
            ours.push(name);
        }
        if f["previous_location_ends"] == true {
            ours.push("SEP".to_string());
        }
    }
    assert_eq!(ours, runtime_inner, "{what}: JSON");
    // The text prints the separator after the same frame.
    let inner_text: Vec<String> = text
        .lines()
        .skip_while(|l| !l.contains("---> System.ArgumentException"))
        .skip(1)
        .take_while(|l| {
            l.trim_start().starts_with("at ") || l.trim() == SEP || l.contains("HResult")
        })
        .filter_map(|l| {
            let l = l.trim();
            if l == SEP {
                return Some("SEP".to_string());
            }
            let name = short_name(l.strip_prefix("at ")?);
            name.starts_with("Cdac.Testbed.").then_some(name)
        })
        .collect();
    assert_eq!(inner_text, runtime_inner, "{what}: text");
}

#[test]
fn analyze_names_a_background_crash_on_net10() {
    analyze_background_crash_of(Variant::Net10);
}

#[test]
fn analyze_names_a_background_crash_on_net11() {
    analyze_background_crash_of(Variant::Net11);
}

#[test]
fn analyze_names_a_background_crash_on_net9() {
    analyze_background_crash_of(Variant::Net9);
}

#[test]
fn analyze_names_a_background_crash_on_net8() {
    analyze_background_crash_of(Variant::Net8);
}

/// A gcore of a running process records gdb's own attach stop, not a crash: no signal is
/// claimed, and no thread is called the crashing one.
#[test]
fn analyze_claims_no_signal_for_a_gcore_of_a_running_process() {
    let tb = common::testbed_of(Variant::Net10);
    let a = analyze(&tb.dump("gcore"));
    assert!(a["signal"].is_null(), "{}", a["signal"]);
    assert!(a["crashing_thread"].is_null(), "{}", a["crashing_thread"]);
    let out = Command::new(crate::common::cdac_exe())
        .args(["analyze", "--dump"])
        .arg(tb.dump("gcore"))
        .output()
        .expect("run cdac");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Signal: none recorded"), "{text}");
}
