//! `cdac async` on .NET 11, 10, 9 and 8, live and on `createdump --full` and gcore dumps,
//! against the testbed's own account of its parked async chains (`async` in its manifest:
//! on a TaskCompletionSource, on Task.Delay at the inner method's second await, on a pipe
//! read), with the await lines found by searching the testbed's source, and against SOS
//! `dumpasync`. `async --stacks` is checked against the testbed's running chain: a thread
//! blocked inside RunningInner's resumed `MoveNext`, awaited by RunningOuter. On .NET 11,
//! the chains of methods the runtime suspends itself (runtime-async) are checked against
//! the manifest's `runtime_async` entry: each method named from the code address it
//! resumes at, at its suspension point and on its await's line.

use crate::common::SosOutput;
use std::collections::BTreeSet;
use std::process::Command;

use crate::common::{self, testbed_of, Testbed, Variant};
use crate::json_schema;
use serde_json::Value;

fn target(tb: &Testbed, kind: Option<&str>) -> Vec<String> {
    match kind {
        None => vec!["--pid".into(), tb.pid.to_string()],
        Some(k) => vec!["--dump".into(), tb.dump(k).display().to_string()],
    }
}

/// `cdac async --json` on a target. A live process may allocate while its heap is walked
/// (a segment's walk then stops at the fresh allocation: exit 1, the problem named); a
/// dump answers in full.
fn async_json(t: &[String]) -> Value {
    let mut args = vec!["async", "--json"];
    args.extend(t.iter().map(String::as_str));
    let out = Command::new(common::cdac_exe())
        .args(&args)
        .output()
        .expect("run cdac");
    let v: Value = serde_json::from_slice(&out.stdout).expect("async JSON");
    json_schema::assert_matches_schema("async", &v);
    let problems = v["problems"].as_array().expect("problems");
    if t.first().is_some_and(|a| a == "--pid") {
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?}: {out:?}"
        );
        for p in problems {
            assert!(
                p.as_str()
                    .is_some_and(|p| p.starts_with("heap walk stopped")),
                "{args:?}: {p}"
            );
        }
    } else {
        assert_eq!(out.status.code(), Some(0), "{args:?}: {v}");
        assert!(problems.is_empty(), "{args:?}: {v}");
    }
    v
}

/// The line of the testbed source file `file` (relative to `testbed/`) that holds `text`
/// as code (exactly one does; the manifest's own copy of the text, in quotes, does not
/// count).
fn source_line(file: &str, text: &str) -> u32 {
    let path = common::repo().join("testbed").join(file);
    let source = std::fs::read_to_string(&path).expect("testbed source");
    let hits: Vec<u32> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(text) && !l.contains(&format!("\"{text}")))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "{text:?} in {}: lines {hits:?}",
        path.display()
    );
    hits[0]
}

/// The source file that declares a testbed method (its type's file).
fn file_of(type_name: &str) -> &'static str {
    if type_name.ends_with(".AsyncChains") {
        "Cdac.Testbed/AsyncShapes.cs"
    } else {
        "Cdac.Testbed/AsyncParked.cs"
    }
}

/// A manifest chain's methods, outermost first, as `Ns.Type.Method`.
fn manifest_methods(chain: &Value) -> Vec<String> {
    chain["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .map(|f| {
            format!(
                "{}.{}",
                f["type"].as_str().unwrap(),
                f["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// The methods of one of cdac's chains, outermost first.
fn chain_methods(chain: &Value) -> Vec<&str> {
    chain["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["method"].as_str())
        .collect()
}

/// Every chain of the manifest is one of cdac's: its methods, outermost first, begin
/// cdac's chain's async methods (the framework may add inner ones, as PipeStream does);
/// each is at the manifest's await state, on the line of the await's text in the source;
/// the chain waits for the manifest's type, a TaskCompletionSource's Task naming its source.
fn facts_hold(variant: Variant, kind: Option<&str>) {
    let tb = testbed_of(variant);
    facts_hold_on(tb, &target(tb, kind), &format!("{variant:?} {kind:?}"));
}

/// The manifest's async chains are among cdac's on target `t` of testbed `tb`, each frame
/// in its state at its await's source line, each chain waiting for what it waits for.
pub(crate) fn facts_hold_on(tb: &Testbed, t: &[String], what: &str) {
    let v = async_json(t);
    let chains = v["chains"].as_array().expect("chains");
    let expected = tb.manifest["async"]["chains"]
        .as_array()
        .expect("manifest async");
    for want in expected {
        let methods = manifest_methods(want);
        let chain = chains
            .iter()
            .find(|c| {
                let ours = chain_methods(c);
                ours.len() >= methods.len() && ours.iter().zip(&methods).all(|(a, b)| a == b)
            })
            .unwrap_or_else(|| panic!("{what}: no chain {methods:?} in {v:#}"));
        let frames: Vec<&Value> = chain["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "state_machine")
            .collect();
        for (f, w) in frames.iter().zip(want["frames"].as_array().unwrap()) {
            assert_eq!(f["state"], w["state"], "{what}: {f}");
            assert_eq!(
                f["state_machine_type"], w["state_machine_type"],
                "{what}: {f}"
            );
            let file = file_of(w["type"].as_str().unwrap());
            let line = source_line(file, w["await"].as_str().unwrap());
            let loc = &f["await_location"];
            assert!(
                loc["file"].as_str().is_some_and(|p| p.ends_with(file)) && loc["line"] == line,
                "{what}: {} should wait at {file}:{line}, cdac says {loc}",
                f["method"]
            );
        }
        let waits = &chain["waits_for"];
        assert_eq!(waits["type_name"], want["waits_for"], "{what}: {chain}");
        if want["name"] == "task_completion_source" {
            assert_eq!(waits["kind"], "task_completion_source", "{chain}");
            assert!(waits["completion_source"].is_string(), "{chain}");
        }
    }
    eprintln!(
        "{what}: {} manifest chains among cdac's {}",
        expected.len(),
        chains.len()
    );
}

/// `cdac async --stacks --json`: the manifest's running chain is tied to its thread. The
/// resumer thread's stack holds BlockForGood under RunningInner's `MoveNext`; that frame runs
/// a box of RunningInner's state machine in state -1, found through a stack slot, and the
/// box is awaited by RunningOuter at its await's source line; the chain that holds the box
/// says it runs on that thread.
fn running_chain_on_its_thread(variant: Variant, kind: Option<&str>) {
    let tb = testbed_of(variant);
    let t = target(tb, kind);
    let _tracing = kind.is_none().then(common::tracing_lock);
    running_chain_on_its_thread_on(tb, &t, &format!("{variant:?} {kind:?}"));
}

/// [`running_chain_on_its_thread`] on target `t` of testbed `tb`.
pub(crate) fn running_chain_on_its_thread_on(tb: &Testbed, t: &[String], what: &str) {
    let mut args = vec!["async", "--stacks", "--json"];
    args.extend(t.iter().map(String::as_str));
    let out = Command::new(common::cdac_exe())
        .args(&args)
        .output()
        .expect("run cdac");
    let v: Value = serde_json::from_slice(&out.stdout).expect("async JSON");
    json_schema::assert_matches_schema("async", &v);
    let want = &tb.manifest["async"]["running"];
    let os_tid = want["os_tid"].as_i64().expect("running os_tid");
    let threads = v["threads"].as_array().expect("threads");
    let thread = threads
        .iter()
        .find(|x| x["thread"]["os_id"] == os_tid)
        .unwrap_or_else(|| panic!("{what}: thread {os_tid} is not among {threads:#?}"));
    assert_eq!(thread["thread"]["name"], want["thread_name"], "{what}");
    assert_eq!(
        thread["thread"]["managed"]["managed_id"], want["managed_id"],
        "{what}"
    );
    let frames = thread["thread"]["frames"].as_array().expect("frames");
    let blocked_md = want["blocked_in"]["method_desc"].as_str().expect("md");
    let blocked_at = frames
        .iter()
        .position(|f| f["method_desc"].as_str() == Some(blocked_md))
        .unwrap_or_else(|| panic!("{what}: no BlockForGood frame in {thread:#}"));
    let inner = &want["frames"][1];
    let outer = &want["frames"][0];
    let async_frames = thread["async_frames"].as_array().expect("async_frames");
    let running = async_frames
        .iter()
        .find(|f| f["frame"].as_u64().is_some_and(|i| i as usize > blocked_at))
        .unwrap_or_else(|| panic!("{what}: no MoveNext frame above BlockForGood: {thread:#}"));
    let index = running["frame"].as_u64().unwrap() as usize;
    let name = frames[index]["name"].as_str().unwrap_or_default();
    assert!(
        name.contains(&format!(
            " {}::MoveNext(",
            inner["state_machine_type"].as_str().unwrap()
        )),
        "{what}: frame {index} runs {name}"
    );
    // A dump is read whole and the frame's slots are exact; a live read is too, as the
    // thread is stopped while its stack is read.
    assert_eq!(running["matched_by"], "stack_slot", "{what}: {running:#}");
    let boxed = running["state_machine_box"].as_str().expect("box");
    let chain = v["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["object"] == boxed)
        })
        .unwrap_or_else(|| panic!("{what}: box {boxed} is in no chain"));
    assert_eq!(chain["running_on"], os_tid, "{what}: {chain:#}");
    let inner_frame = chain["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["object"] == boxed)
        .unwrap();
    assert_eq!(inner_frame["state"], -1, "{what}: {inner_frame}");
    assert_eq!(
        inner_frame["state_machine_type"], inner["state_machine_type"],
        "{what}"
    );
    let caller = &running["awaited_by"][0];
    assert_eq!(
        caller["method"].as_str(),
        Some(
            format!(
                "{}.{}",
                outer["type"].as_str().unwrap(),
                outer["name"].as_str().unwrap()
            )
            .as_str()
        ),
        "{what}: {running:#}"
    );
    assert_eq!(caller["state"], outer["state"], "{what}: {caller}");
    let line = source_line(
        "Cdac.Testbed/AsyncParked.cs",
        outer["await"].as_str().unwrap(),
    );
    assert_eq!(caller["await_location"]["line"], line, "{what}: {caller}");
    // The human form says the same under the frame.
    let mut args = vec!["async", "--stacks"];
    args.extend(t.iter().map(String::as_str));
    let out = Command::new(common::cdac_exe())
        .args(&args)
        .output()
        .expect("run cdac");
    let text = String::from_utf8_lossy(&out.stdout);
    let awaited = format!("awaited by {}", caller["object"].as_str().unwrap());
    assert!(
        text.contains(&format!("runs box {boxed}")) && text.contains(&awaited),
        "{what}: {text}"
    );
}

/// SOS `dumpasync`'s stacks as paths from each top-level object to each object with no
/// further continuation (innermost first), each object with its state (`0`, `1`… for a
/// state machine, `-` for a Task).
fn sos_dumpasync(dump: &std::path::Path) -> BTreeSet<Vec<(u64, String)>> {
    let out = Command::new(common::dotnet_dump())
        .arg("analyze")
        .arg(dump)
        .args(["-c", "dumpasync", "-c", "exit"])
        .sos_output();
    assert!(out.status.success(), "dotnet-dump: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    // Each stack's object lines with their indentation.
    let mut stacks: Vec<Vec<(usize, (u64, String))>> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("STACK") {
            stacks.push(Vec::new());
            continue;
        }
        let depth = line.len() - trimmed.len();
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        // 00007ef989078a78 00007f0564ca0bb0 (0) Type
        let [addr, mt, rest @ ..] = words.as_slice() else {
            continue;
        };
        if addr.len() != 16 || mt.len() != 16 {
            continue;
        }
        let Ok(address) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let state = rest
            .first()
            .map(|s| s.trim_matches(|c| c == '(' || c == ')'))
            .filter(|s| s.parse::<i32>().is_ok())
            .unwrap_or("-")
            .to_string();
        if let Some(s) = stacks.last_mut() {
            s.push((depth, (address, state)));
        }
    }
    // A line is a leaf when the next is not indented deeper; its path is its ancestors.
    let mut paths = BTreeSet::new();
    for lines in &stacks {
        let mut ancestors: Vec<(usize, (u64, String))> = Vec::new();
        for (i, (depth, object)) in lines.iter().enumerate() {
            while ancestors.last().is_some_and(|(d, _)| d >= depth) {
                ancestors.pop();
            }
            ancestors.push((*depth, object.clone()));
            if lines.get(i + 1).is_none_or(|(d, _)| d <= depth) {
                paths.insert(ancestors.iter().map(|(_, o)| o.clone()).collect());
            }
        }
    }
    paths
}

/// The start of the type name of the Task of runtime-async methods.
const RUNTIME_ASYNC_TASK: &str = "System.Runtime.CompilerServices.AsyncHelpers+RuntimeAsyncTask`1";

/// cdac's chains as SOS prints them: innermost first, states alike. SOS `dumpasync` does
/// not follow runtime-async methods (it warns so on .NET 11): their frames are left out,
/// a chain with no state machine left is not printed, and a chain that reaches the Task of
/// runtime-async methods from the Task they await (through a `RuntimeAsyncTaskContinuation`,
/// which SOS does not follow) starts at that Task.
fn cdac_paths(v: &Value) -> BTreeSet<Vec<(u64, String)>> {
    v["chains"]
        .as_array()
        .expect("chains")
        .iter()
        .filter_map(|c| {
            let mut path: Vec<(u64, String)> = c["frames"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["kind"] != "runtime_async")
                .map(|f| {
                    let state = match f["state"].as_i64() {
                        Some(s) if f["kind"] == "state_machine" => s.to_string(),
                        _ => "-".into(),
                    };
                    (common::hex(&f["object"]), state)
                })
                .collect();
            path.reverse();
            let tasks = runtime_async_tasks(c);
            if let Some(i) = path.iter().position(|(a, _)| tasks.contains(a)) {
                path.drain(..i);
            }
            path.iter().any(|(_, s)| s != "-").then_some(path)
        })
        .collect()
}

/// The Tasks of runtime-async methods in a chain of cdac's.
fn runtime_async_tasks(chain: &Value) -> BTreeSet<u64> {
    chain["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["type_name"]
                .as_str()
                .is_some_and(|t| t.starts_with(RUNTIME_ASYNC_TASK))
        })
        .map(|f| common::hex(&f["object"]))
        .collect()
}

/// Every chain SOS `dumpasync` prints is one of cdac's and the reverse: the same objects
/// in the same order, the same await states.
fn chains_equal_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let dump = tb.dump("full");
    let v = async_json(&["--dump".into(), dump.display().to_string()]);
    let ours = cdac_paths(&v);
    let theirs = sos_dumpasync(&dump);
    assert!(theirs.len() >= 3, "{variant:?}: SOS printed {theirs:?}");
    assert_eq!(ours, theirs, "{variant:?}: cdac's chains, then SOS's");
    eprintln!("{variant:?}: {} chains equal SOS dumpasync", ours.len());
}

#[test]
fn facts_hold_net10_live() {
    facts_hold(Variant::Net10, None);
}

#[test]
fn facts_hold_net10_full() {
    facts_hold(Variant::Net10, Some("full"));
}

#[test]
fn facts_hold_net10_gcore() {
    facts_hold(Variant::Net10, Some("gcore"));
}

#[test]
fn facts_hold_net9_full() {
    facts_hold(Variant::Net9, Some("full"));
}

#[test]
fn facts_hold_net9_live() {
    facts_hold(Variant::Net9, None);
}

#[test]
fn facts_hold_net9_gcore() {
    facts_hold(Variant::Net9, Some("gcore"));
}

#[test]
fn facts_hold_net8_live() {
    facts_hold(Variant::Net8, None);
}

#[test]
fn facts_hold_net8_full() {
    facts_hold(Variant::Net8, Some("full"));
}

#[test]
fn facts_hold_net8_gcore() {
    facts_hold(Variant::Net8, Some("gcore"));
}

/// .NET 11: every runtime-async chain of the manifest is one of cdac's, its async
/// methods exactly the manifest's, outermost first: each runtime-async method under the
/// RuntimeAsyncTask its caller holds, named from the code address it resumes at, at the
/// manifest's suspension point and on the line of its await; the mixed chain's state
/// machine awaiting that Task; each chain waiting for what the manifest says.
fn runtime_async_facts_hold(kind: Option<&str>) {
    let tb = testbed_of(Variant::Net11);
    let what = format!("Net11 {kind:?}");
    let v = async_json(&target(tb, kind));
    let chains = v["chains"].as_array().expect("chains");
    let expected = tb.manifest["async"]["runtime_async"]["chains"]
        .as_array()
        .expect("manifest runtime_async chains");
    for want in expected {
        let wanted = want["frames"].as_array().expect("frames");
        let methods = manifest_methods(want);
        let chain = chains
            .iter()
            .find(|c| chain_methods(c) == methods)
            .unwrap_or_else(|| panic!("{what}: no chain {methods:?} in {v:#}"));
        let frames = chain["frames"].as_array().unwrap();
        let with_method: Vec<(usize, &Value)> = frames
            .iter()
            .enumerate()
            .filter(|(_, f)| f["method"].is_string())
            .collect();
        for ((i, f), w) in with_method.iter().zip(wanted) {
            assert_eq!(f["kind"], w["kind"], "{what}: {f}");
            assert_eq!(f["state"], w["state"], "{what}: {f}");
            let file = w["file"].as_str().unwrap();
            let line = source_line(file, w["await"].as_str().unwrap());
            let loc = &f["await_location"];
            assert!(
                loc["file"].as_str().is_some_and(|p| p.ends_with(file)) && loc["line"] == line,
                "{what}: {} should wait at {file}:{line}, cdac says {loc}",
                f["method"]
            );
            if w["kind"] == "runtime_async" {
                assert!(f["resume_address"].is_string(), "{what}: {f}");
                // Under the Task its caller holds, or under its caller.
                let above = &frames[*i - 1];
                assert!(
                    above["kind"] == "runtime_async"
                        || above["type_name"]
                            .as_str()
                            .is_some_and(|t| t.starts_with(RUNTIME_ASYNC_TASK)),
                    "{what}: {above} above {f}"
                );
            }
        }
        let waits = &chain["waits_for"];
        assert_eq!(waits["type_name"], want["waits_for"], "{what}: {chain}");
        if want["name"] != "delay" {
            assert_eq!(waits["kind"], "task_completion_source", "{what}: {chain}");
            assert!(waits["completion_source"].is_string(), "{what}: {chain}");
        } else {
            assert_eq!(waits["kind"], "timer", "{what}: {chain}");
        }
    }
    eprintln!(
        "{what}: {} runtime-async chains among cdac's {}",
        expected.len(),
        chains.len()
    );
}

#[test]
fn runtime_async_facts_hold_net11_live() {
    runtime_async_facts_hold(None);
}

#[test]
fn runtime_async_facts_hold_net11_full() {
    runtime_async_facts_hold(Some("full"));
}

#[test]
fn runtime_async_facts_hold_net11_gcore() {
    runtime_async_facts_hold(Some("gcore"));
}

#[test]
fn facts_hold_net11_full() {
    facts_hold(Variant::Net11, Some("full"));
}

#[test]
fn chains_equal_sos_dumpasync_net10() {
    chains_equal_sos(Variant::Net10);
}

#[test]
fn chains_equal_sos_dumpasync_net11() {
    chains_equal_sos(Variant::Net11);
}

#[test]
fn chains_equal_sos_dumpasync_net9() {
    chains_equal_sos(Variant::Net9);
}

#[test]
fn chains_equal_sos_dumpasync_net8() {
    chains_equal_sos(Variant::Net8);
}

#[test]
fn running_chain_on_its_thread_net10_live() {
    running_chain_on_its_thread(Variant::Net10, None);
}

#[test]
fn running_chain_on_its_thread_net10_full() {
    running_chain_on_its_thread(Variant::Net10, Some("full"));
}

#[test]
fn running_chain_on_its_thread_net10_gcore() {
    running_chain_on_its_thread(Variant::Net10, Some("gcore"));
}

#[test]
fn running_chain_on_its_thread_net9_full() {
    running_chain_on_its_thread(Variant::Net9, Some("full"));
}

#[test]
fn running_chain_on_its_thread_net8_full() {
    running_chain_on_its_thread(Variant::Net8, Some("full"));
}
