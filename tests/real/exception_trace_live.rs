//! Captured stack traces of exceptions in the live testbed (.NET 10, 9, 8): the catch and
//! filter threads each hold an exception they threw (`CatchThrow`, `FilterThrow`) and park
//! in its handler. The exception object is found on the thread's stack (an object whose
//! `_message` is the message the source throws), its `_stackTrace` decoded, and the frames
//! checked against the manifest (the handler owner's MethodDesc, `MethodHandle.Value`) and
//! the perf map (the thrower's code holds the first frame's IP); `cdac analyze` (through the
//! Thread contract) names the same object and frames, the thrower at its `throw` line.

use crate::common;

use std::sync::Arc;

use cdac::contracts::exception_trace::{decode_stack_trace, ExceptionStackTrace, TraceLayout};
use cdac::memory::live::LiveProcess;
use cdac::memory::{DataLayout, Target};
use cdac::process::thread_snapshot::{peek_thread, ThreadActivity};
use common::Variant;

/// Readable mappings of the process: (start, end).
fn mappings(pid: i32) -> Vec<(u64, u64, String)> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .expect("maps")
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let range = parts.next()?;
            let perms = parts.next()?;
            if !perms.starts_with('r') {
                return None;
            }
            let name = parts.nth(3).unwrap_or("").to_string();
            let (a, b) = range.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
                name,
            ))
        })
        .collect()
}

/// The string object at `s` holds `text`.
fn is_string(t: &Target, s: u64, text: &str) -> bool {
    let units: Vec<u16> = text.encode_utf16().collect();
    t.read_u32(s + 8).ok() == Some(units.len() as u32)
        && t.read_utf16(s + 12, units.len()).ok().as_deref() == Some(text)
}

/// Objects referenced from the stack of `tid` whose reference field (one of the first 16
/// slots) is the string `message`.
fn exceptions_on_stack(t: &Target, pid: i32, tid: i32, message: &str) -> Vec<u64> {
    let peek = peek_thread(pid, tid).expect("peek");
    let sp = match peek.activity {
        ThreadActivity::InSyscall { sp, .. } | ThreadActivity::Blocked { sp, .. } => sp,
        ThreadActivity::Running => panic!("thread {tid} is running"),
    };
    let maps = mappings(pid);
    let (_, stack_end, _) = maps
        .iter()
        .find(|(a, b, _)| (*a..*b).contains(&sp))
        .cloned()
        .expect("stack mapping");
    let heap_like = |p: u64| {
        p % 8 == 0
            && maps.iter().any(|(a, b, name)| {
                (*a..*b).contains(&p) && !(*a..*b).contains(&sp) && !name.starts_with('/')
            })
    };
    let words = t
        .read_bytes(sp, (stack_end - sp) as usize)
        .expect("stack bytes");
    let mut found = Vec::new();
    for w in words.chunks_exact(8) {
        let p = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        if !heap_like(p) || found.contains(&p) {
            continue;
        }
        for slot in 1..16u64 {
            match t.read_pointer(p + 8 * slot) {
                Ok(s) if heap_like(s) && is_string(t, s, message) => {
                    found.push(p);
                    break;
                }
                _ => {}
            }
        }
    }
    found
}

/// Code ranges of the perf map whose name contains `needle`.
fn code_of(tb: &common::Testbed, needle: &str) -> Vec<(u64, u64)> {
    common::perf_map(&tb.perf_map_for(None))
        .into_iter()
        .filter(|(_, _, n)| n.contains(needle))
        .map(|(start, size, _)| (start, start + size))
        .collect()
}

/// The decoded trace of the exception held by the parked thread of `kind`, checked.
fn check(
    variant: Variant,
    kind: &str,
    message: &str,
    thrower: &str,
    analyzed: &serde_json::Value,
) -> ExceptionStackTrace {
    let tb = common::testbed_of(variant);
    let thread = tb.manifest["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["kind"] == kind)
        .unwrap_or_else(|| panic!("a {kind} thread"));
    let tid = thread["os_tid"].as_i64().expect("os_tid") as i32;
    let chain: Vec<u64> = thread["chain_method_descs"]
        .as_array()
        .expect("chain_method_descs")
        .iter()
        .map(common::hex)
        .collect();
    // [wait, owner, middle, start]: the owner's frame is where the exception was caught.
    let owner_md = chain[1];
    let t = Target::new(
        Arc::new(LiveProcess::open(tb.pid).expect("open")),
        DataLayout::LE64,
    );
    let major: u32 = variant
        .runtime_version()
        .split('.')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let layout = TraceLayout::for_runtime_major(major);
    let objects = exceptions_on_stack(&t, tb.pid, tid, message);
    assert!(
        !objects.is_empty(),
        "{}: no exception object on {kind}'s stack",
        variant.name()
    );
    // The object's reference slots: exactly one decodes to a trace through the owner.
    let mut traces = Vec::new();
    for &o in &objects {
        for slot in 1..16u64 {
            let Ok(v) = t.read_pointer(o + 8 * slot) else {
                continue;
            };
            if v == 0 {
                continue;
            }
            if let Ok(trace) = decode_stack_trace(&t, v, layout) {
                if trace.frames.iter().any(|f| f.method_desc == owner_md) {
                    traces.push((o, slot, trace));
                }
            }
        }
    }
    // Stale copies of a reference (or a view of one object at another offset) can pass the
    // message test too; every candidate must name the same trace.
    assert!(
        !traces.is_empty(),
        "{}: a _stackTrace slot decodes",
        variant.name()
    );
    assert!(
        traces.iter().all(|(_, _, tr)| tr == &traces[0].2),
        "{}: candidates disagree: {traces:x?}",
        variant.name()
    );
    let objects_seen: Vec<String> = traces
        .iter()
        .map(|(o, slot, _)| format!("{o:#x}+{:#x}", 8 * slot))
        .collect();
    let (_, _, trace) = traces.pop().expect("one");
    let thrower_code = code_of(tb, thrower);
    assert!(!thrower_code.is_empty(), "{thrower} in the perf map");
    let first = trace.frames[0];
    assert!(
        thrower_code
            .iter()
            .any(|&(a, b)| (a..b).contains(&first.ip)),
        "{}: first frame's IP {:#x} is in {thrower} ({thrower_code:x?})",
        variant.name(),
        first.ip
    );
    // Thrower, then the owner that caught it: the trace ends at the catching frame.
    assert_eq!(
        trace.frames.len(),
        2,
        "{}: {:x?}",
        variant.name(),
        trace.frames
    );
    assert_eq!(trace.frames[1].method_desc, owner_md);
    let owner_name = thread["expected_chain"][1].as_str().expect("owner name");
    let owner_code = code_of(tb, &format!("{owner_name}("));
    assert!(
        owner_code
            .iter()
            .any(|&(a, b)| (a..b).contains(&trace.frames[1].ip)),
        "{}: second frame's IP {:#x} is in the owner",
        variant.name(),
        trace.frames[1].ip
    );
    assert!(first.method_desc != 0 && first.method_desc != owner_md);
    assert!(trace.frames.iter().all(|f| f.sp != 0 && f.sp % 8 == 0));
    assert!(
        trace.frames[0].sp < trace.frames[1].sp,
        "the stack grows down"
    );
    eprintln!(
        "{} {kind}: _stackTrace at {objects_seen:?}, array {:#x}, keep-alive {:?}/{}, thread {:#x}, frames {:x?}",
        variant.name(),
        trace.array,
        trace.keep_alive_array,
        trace.keep_alive_count,
        trace.thread,
        trace.frames
    );
    // `cdac analyze` (the Thread contract's exception in flight) names the same object and
    // the same frames, the thrower at its throw statement in ParkedThreads.cs.
    let x = analyzed["exceptions"]
        .as_array()
        .expect("exceptions")
        .iter()
        .find(|x| x["thread"].as_i64() == Some(i64::from(tid)))
        .unwrap_or_else(|| panic!("{}: analyze lists {kind}'s exception", variant.name()));
    let address = common::hex(&x["exception"]["address"]);
    assert!(
        objects_seen
            .iter()
            .any(|o| o.starts_with(&format!("{address:#x}+"))),
        "{}: analyze's object {address:#x} is among {objects_seen:?}",
        variant.name()
    );
    let listed = x["exception"]["stack_trace"]
        .as_array()
        .expect("stack_trace");
    let mds: Vec<u64> = listed
        .iter()
        .map(|f| common::hex(&f["method_desc"]))
        .collect();
    let ours: Vec<u64> = trace.frames.iter().map(|f| f.method_desc).collect();
    assert_eq!(mds, ours, "{}", variant.name());
    let source =
        std::fs::read_to_string(common::repo().join("testbed/Cdac.Testbed/ParkedThreads.cs"))
            .expect("source");
    let needle = format!("throw new InvalidOperationException(\"{}", &message[..10]);
    let want = source
        .lines()
        .position(|l| l.contains(&needle))
        .expect("throw line") as u64
        + 1;
    assert_eq!(
        listed[0]["source"]["line"].as_u64(),
        Some(want),
        "{}: {}",
        variant.name(),
        listed[0]
    );
    trace
}

/// `cdac analyze --json` of the live testbed.
fn analyze(pid: i32) -> serde_json::Value {
    let out = std::process::Command::new(crate::common::cdac_exe())
        .args(["analyze", "--json", "--pid", &pid.to_string()])
        .output()
        .expect("run cdac");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

const CATCH: &str = "cdac-catch: caught, then parked in the catch block";
const FILTER: &str = "cdac-filter: thrown for a filter that never returns";

fn both(variant: Variant) {
    let analyzed = analyze(common::testbed_of(variant).pid);
    let c = check(
        variant,
        "catch",
        CATCH,
        "CatchBlocker::CatchThrow",
        &analyzed,
    );
    let f = check(
        variant,
        "filter",
        FILTER,
        "FilterBlocker::FilterThrow",
        &analyzed,
    );
    assert_ne!(c.frames[0].method_desc, f.frames[0].method_desc);
}

#[test]
fn exception_traces_net10() {
    both(Variant::Net10);
}

#[test]
fn exception_traces_net11() {
    both(Variant::Net11);
}

#[test]
fn exception_traces_net9() {
    both(Variant::Net9);
}

#[test]
fn exception_traces_net8() {
    both(Variant::Net8);
}
