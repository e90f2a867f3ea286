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

impl Parked {
    /// The manifest's entry of the thread parked in `Orders.Checkout`.
    fn orders(&self) -> &serde_json::Value {
        self.manifest["threads"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["name"] == "aot-orders"))
            .expect("the aot-orders thread in the manifest")
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn park(variant: &str, tag: &str) -> Parked {
    park_with(variant, tag, false)
}

/// Starts the variant parked; `with_symbols` keeps its `.dbg` beside it.
fn park_with(variant: &str, tag: &str, with_symbols: bool) -> Parked {
    let dir = scratch(&format!("aot-park-{variant}-{tag}"));
    let exe = executable_without_symbols(variant, &dir);
    if with_symbols {
        let dbg = testbed_dir().join(variant).join("Cdac.Testbed.Aot.dbg");
        std::fs::copy(dbg, dir.join("Cdac.Testbed.Aot.dbg")).expect("copy the .dbg");
    }
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
    let live = cdac_json(&["stacks", "--pid", &pid, "--json"]);
    check_parked_threads(variant, &parked, &live);
    // The same from a gcore of it.
    let core = scratch(&format!("aot-gcore-{variant}")).join("core");
    crate::common::gcore(parked.child.id() as i32, &core);
    let dumped = cdac_json(&["stacks", "--dump", core.to_str().unwrap(), "--json"]);
    check_parked_threads(variant, &parked, &dumped);
}

fn check_parked_threads(variant: &str, parked: &Parked, stacks: &serde_json::Value) {
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
    let orders = parked.orders();
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

#[test]
fn heap_counts_and_names_types_and_matches_the_gcs_own_figures() {
    for variant in ["aot-net11", "aot-net10"] {
        let parked = park(variant, "heap");
        let pid = parked.child.id().to_string();
        let heap = cdac_json(&["heap", "--pid", &pid, "--json"]);
        assert_eq!(heap["problems"], serde_json::json!([]), "{variant}");
        let types = heap["types"].as_array().unwrap();
        let of = |name: &str| types.iter().find(|t| t["name"] == name).cloned();
        let widget = of(parked.manifest["widget_type"].as_str().unwrap())
            .unwrap_or_else(|| panic!("{variant}: Widget named by its MethodTable's hash"));
        assert_eq!(
            widget["count"], parked.manifest["widget_count"],
            "{variant}"
        );
        let array =
            of("Cdac.TestbedAot.Widget[]").expect("the array of them, named by its element");
        assert_eq!(array["count"], 1);
        assert!(of("System.String").is_some());
        // A nested type (the lambdas' class), whose hash folds in its enclosing type's.
        assert_eq!(
            of("Cdac.TestbedAot.Parking.<>c").map(|t| t["count"].clone()),
            Some(1.into())
        );
        // The GC's figures after its last (full, compacting) collection: gen2 and the pinned
        // heap have not changed since (new objects go to gen0).
        let free = cdac_json(&["heap", "--pid", &pid, "--free", "--json"]);
        let ours = &free["fragmentation"]["generations"];
        let gc = parked.manifest["generations_after_gc"].as_array().unwrap();
        assert_eq!(
            ours["gen2"]["free"], gc[2]["fragmentation"],
            "{variant}: gen2 free bytes"
        );
        assert_eq!(
            ours["poh"]["total"], gc[4]["size"],
            "{variant}: the pinned heap"
        );
        // gen2's size: the GC counts a few bytes more than its objects and free blocks (184
        // and 188 here, fewer than one object per region); not explained yet.
        let (walked, counted) = (
            ours["gen2"]["total"].as_u64().unwrap(),
            gc[2]["size"].as_u64().unwrap(),
        );
        assert!(
            walked <= counted && counted - walked < 512,
            "{variant}: gen2 {walked} vs the GC's {counted}"
        );
    }
}

#[test]
fn threads_lists_ids_names_and_the_exception_in_flight() {
    let parked = park("aot-net11", "threads");
    let pid = parked.child.id().to_string();
    let threads = cdac_json(&["threads", "--pid", &pid, "--json"]);
    let list = threads["threads"].as_array().unwrap();
    for expected in parked.manifest["threads"].as_array().unwrap() {
        let t = list
            .iter()
            .find(|t| t["os_id"] == expected["os_tid"])
            .expect("each parked thread");
        assert_eq!(t["name"], expected["name"]);
        assert_eq!(t["managed"]["managed_id"], expected["managed_id"]);
    }
    assert_eq!(
        list.iter()
            .filter(|t| t["managed"]["finalizer"] == true)
            .count(),
        1
    );
}

/// With the `.dbg` beside the executable gdb names every frame; cdac's frames of a gcore are
/// gdb's, pc and sp, each managed one is the method gdb's symbol names, at the file and line
/// gdb finds (cdac reads the `.dbg`'s DWARF too).
#[test]
fn frames_equal_gdbs_with_the_dbg_file() {
    let parked = park_with("aot-net10", "gdb", true);
    let dir = scratch("aot-park-aot-net10-gdb");
    let core = dir.join("core");
    crate::common::gcore(parked.child.id() as i32, &core);
    let orders = parked.orders();
    let tid = orders["os_tid"].as_i64().unwrap();
    let script = format!(
        r#"
import gdb
for t in gdb.selected_inferior().threads():
    if t.ptid[1] == {tid}:
        t.switch()
        f = gdb.newest_frame()
        while f is not None:
            if f.type() != gdb.INLINE_FRAME:
                sal = f.find_sal()
                where = "%s|%d" % (sal.symtab.fullname() if sal.symtab else "", sal.line)
                print("FRAME %x %x %s %s" % (f.pc(), int(f.read_register("rsp")), where, f.name()))
            f = f.older()
"#
    );
    let script_path = dir.join("frames.py");
    std::fs::write(&script_path, script).unwrap();
    let out = Command::new("gdb")
        .args(["-batch", "-nx"])
        .arg(dir.join("Cdac.Testbed.Aot"))
        .arg(&core)
        .arg("-ex")
        .arg(format!("source {}", script_path.display()))
        .output()
        .expect("run gdb");
    let text = String::from_utf8_lossy(&out.stdout);
    let gdb: Vec<(u64, u64, String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("FRAME "))
        .map(|l| {
            let mut w = l.splitn(4, ' ');
            let pc = u64::from_str_radix(w.next().unwrap(), 16).unwrap();
            let sp = u64::from_str_radix(w.next().unwrap(), 16).unwrap();
            let at = w.next().unwrap_or("").to_string();
            (pc, sp, w.next().unwrap_or("").to_string(), at)
        })
        .collect();
    assert!(gdb.len() >= 8, "gdb's frames: {text}");
    let stacks = cdac_json(&[
        "stacks",
        "--dump",
        core.to_str().unwrap(),
        "--native",
        "--json",
    ]);
    let thread = stacks["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["os_id"].as_i64() == Some(tid))
        .unwrap();
    let ours = thread["frames"].as_array().unwrap();
    let hex = |v: &serde_json::Value| {
        u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    };
    // From the first frame in the executable on (libc's own frames below it are unwound by
    // gdb with libc's debug information, which may show one more), frame for frame.
    let first = ours
        .iter()
        .position(|f| f["kind"] == "managed")
        .expect("a managed frame");
    let at = gdb
        .iter()
        .position(|(pc, _, _, _)| *pc == hex(&ours[first]["ip"]))
        .unwrap_or_else(|| panic!("gdb has our first managed frame: {gdb:x?}"));
    let (ours, gdb) = (&ours[first..], &gdb[at..]);
    assert_eq!(ours.len(), gdb.len(), "gdb: {gdb:x?}\nours: {ours:?}");
    let mut managed = 0;
    let mut lines = 0;
    for (f, (pc, sp, symbol, at)) in ours.iter().zip(gdb) {
        assert_eq!(hex(&f["ip"]), *pc, "{f} vs gdb {symbol}");
        assert_eq!(hex(&f["sp"]), *sp, "{f} vs gdb {symbol}");
        if f["kind"] == "managed" {
            // The file and line of the .dbg's DWARF, as gdb finds them.
            let (file, line) = at.split_once('|').unwrap();
            if !file.is_empty() {
                assert_eq!(f["source"]["file"], file, "{f} vs gdb {symbol} at {at}");
                assert_eq!(
                    f["source"]["line"].as_u64(),
                    line.parse::<u64>().ok(),
                    "{f} vs gdb at {at}"
                );
                lines += 1;
            }
            // `Ns.Type.Method(Args)` is gdb's `…Ns_Type__Method`.
            let name = f["name"].as_str().unwrap();
            let method = name.split('(').next().unwrap();
            let (owner, simple) = method.rsplit_once('.').unwrap();
            let owner = owner.replace(['.', '`'], "_");
            if !owner.contains('_') || name.contains('[') {
                continue;
            }
            assert!(
                symbol.ends_with(&format!("{owner}__{simple}")),
                "{name} vs gdb's {symbol}"
            );
            managed += 1;
        }
    }
    assert!(managed >= 5, "managed frames compared: {managed}");
    assert!(lines >= 5, "managed frames with a line compared: {lines}");
}

/// `libcdac.so` of the build under test: beside the installed CLI scripts/test runs
/// (`PREFIX/bin/cdac` → `PREFIX/lib/libcdac.so`), else this tree's release build.
fn libcdac() -> PathBuf {
    let installed = std::env::var_os("CDAC_TEST_BIN")
        .map(PathBuf::from)
        .and_then(|bin| Some(bin.parent()?.parent()?.join("lib/libcdac.so")));
    let lib = installed
        .filter(|p| p.exists())
        .unwrap_or_else(|| crate::common::repo().join("target/release/libcdac.so"));
    assert!(
        lib.exists(),
        "no libcdac.so at {} (cargo build --release -p cdac-capi)",
        lib.display()
    );
    lib
}

/// The lines of one thread's backtrace in a debugger's `thread apply all bt`-style output:
/// from the line naming its LWP / tid to the next thread's header.
fn thread_section<'a>(text: &'a str, header: &str) -> &'a str {
    let start = text
        .find(header)
        .unwrap_or_else(|| panic!("{header} in:\n{text}"));
    let rest = &text[start + header.len()..];
    let end = rest
        .find("\nThread ")
        .or_else(|| rest.find("\n* thread"))
        .or_else(|| rest.find("\n  thread"))
        .unwrap_or(rest.len());
    &rest[..end]
}

fn in_order(section: &str, names: &[&str]) -> bool {
    let mut at = 0;
    names.iter().all(|n| match section[at..].find(n) {
        Some(i) => {
            at += i + n.len();
            true
        }
        None => false,
    })
}

/// gdb's `bt` and lldb's `cdac bt` name NativeAOT frames through libcdac.so, without the
/// `.dbg` file (gdb alone shows `??` there).
#[test]
fn debuggers_name_native_aot_frames_without_the_dbg_file() {
    let parked = park("aot-net11", "debuggers");
    let dir = scratch("aot-park-aot-net11-debuggers");
    let core = dir.join("core");
    crate::common::gcore(parked.child.id() as i32, &core);
    let exe = dir.join("Cdac.Testbed.Aot");
    let tid = parked.orders()["os_tid"].as_i64().unwrap();
    let chain = [
        "Cdac.TestbedAot.Parking.Park(Exception)",
        "Cdac.TestbedAot.Orders.Validate(String, Order)",
        "Cdac.TestbedAot.Orders.Checkout(Int32)",
        "System.Threading.Thread.StartThread(IntPtr)",
    ];
    let gdb = |extension: bool| {
        let mut c = Command::new("gdb");
        c.args(["-batch", "-nx", "-ex", "set pagination off"]);
        if extension {
            c.arg("-ex").arg(format!(
                "source {}",
                crate::common::repo().join("gdb/cdac.py").display()
            ));
        }
        let out = c
            .args(["-ex", "thread apply all bt"])
            .arg(&exe)
            .arg(&core)
            .env("CDAC_LIB", libcdac())
            .output()
            .expect("run gdb");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let header = format!("(LWP {tid}))");
    let plain = gdb(false);
    assert!(
        !in_order(thread_section(&plain, &header), &chain[..1]),
        "gdb alone has no names"
    );
    let named = gdb(true);
    let section = thread_section(&named, &header);
    assert!(
        in_order(section, &chain),
        "gdb with the extension:\n{section}"
    );

    let out = Command::new("lldb")
        .args(["--batch", "-o"])
        .arg(format!(
            "command script import {}",
            crate::common::repo().join("lldb/cdac.py").display()
        ))
        .args(["-o", "cdac bt all", "-c"])
        .arg(&core)
        .arg(&exe)
        .env("CDAC_LIB", libcdac())
        .output()
        .expect("run lldb");
    let text = String::from_utf8_lossy(&out.stdout);
    let section = thread_section(&text, &format!("tid = {tid}\n"));
    assert!(in_order(section, &chain), "lldb cdac bt:\n{section}");
}
