//! `cdac stacks` on the real testbeds (.NET 10, 9, 8), live and on `createdump --full` and
//! `gcore` dumps: every parked thread's frames of ours are the ones the testbed says are
//! on its stack, in order, with funclets tied to their methods and the native frames of
//! `read(2)` below the P/Invoke; on the full dump, the managed frames equal ClrMD's
//! `EnumerateStackTrace` (instruction pointer, stack pointer, MethodDesc).

use crate::common;
// The schema checker uses the CLI, which the C ABI's tests (sharing common/) do not build.
use crate::json_schema;

use std::collections::HashSet;
use std::process::Command;

use common::{clrmd, hex, testbed_of, Testbed, Variant};
use serde_json::Value;

pub(crate) fn cdac_stacks(args: &[&str]) -> Value {
    let out = Command::new(crate::common::cdac_exe())
        .arg("stacks")
        .args(args)
        .args(["--json", "--native"])
        .output()
        .expect("run cdac");
    // --nonblocking reads no registers of a running thread (the spinning one): that thread
    // is not answered, which the exit code says (1) and the thread's note explains.
    let partial_ok = args.contains(&"--nonblocking")
        && out.status.code() == Some(1)
        && String::from_utf8_lossy(&out.stderr).contains("without a stack");
    assert!(
        out.status.success() || partial_ok,
        "cdac stacks {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    json_schema::assert_matches_schema("stacks", &v);
    v
}

/// `Ns.Type::Method` of a frame name such as `void [Asm] Ns.Type::Method(int32)`.
fn short_name(name: &str) -> String {
    let head = name.split('(').next().unwrap_or(name);
    head.rsplit(' ').next().unwrap_or(head).to_string()
}

fn ours(name: &str) -> bool {
    name.starts_with("Cdac.Testbed.Parked.") || name.starts_with("Cdac.Testbed.Libc::")
}

fn is_managed(f: &Value) -> bool {
    f["kind"] == "managed"
}

/// The method descs of the logical frames: a funclet, then its method's frame, skipping
/// what ran between them.
fn logical_method_descs(frames: &[Value]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < frames.len() {
        let f = &frames[i];
        if is_managed(f) {
            out.push(hex(&f["method_desc"]));
            if let Some(p) = f["parent_frame"].as_u64().map(|p| p as usize) {
                if f["funclet"] == true && p > i {
                    out.push(hex(&frames[p]["method_desc"]));
                    i = p + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

fn dedup_adjacent(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in v {
        if out.last() != Some(&s) {
            out.push(s);
        }
    }
    out
}

/// Checks every parked thread of the manifest against the walked stacks.
pub(crate) fn check_parked_threads(tb: &Testbed, stacks: &Value, what: &str) {
    let threads = stacks["threads"].as_array().expect("threads");
    let parked = tb.manifest["threads"].as_array().expect("manifest threads");
    assert!(parked.len() >= 8, "{what}: {} parked threads", parked.len());
    for p in parked {
        let kind = p["kind"].as_str().unwrap_or("?");
        let tid = p["os_tid"].as_i64().expect("os_tid");
        let t = threads
            .iter()
            .find(|t| t["os_id"].as_i64() == Some(tid))
            .unwrap_or_else(|| panic!("{what}: thread {tid} ({kind}) not listed"));
        assert_eq!(
            t["managed"]["managed_id"], p["managed_id"],
            "{what}: {kind} managed id"
        );
        let frames = t["frames"].as_array().expect("frames");
        assert_eq!(
            frames.first().map(|f| &f["found_by"]),
            Some(&Value::from("registers"))
        );
        // Our frames, physically, innermost first.
        let mut got: Vec<String> = frames
            .iter()
            .filter(|f| is_managed(f))
            .map(|f| short_name(f["name"].as_str().unwrap_or("")))
            .filter(|n| ours(n))
            .collect();
        let mut want: Vec<String> = p["physical_frames"]
            .as_array()
            .expect("physical_frames")
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect();
        if kind == "spin" {
            // On-stack replacement may put the looping method's OSR frame on its tier-0
            // frame: the same name twice in a row.
            got = dedup_adjacent(got);
            want = dedup_adjacent(want);
        }
        assert_eq!(
            got,
            want,
            "{what}: {kind} thread {tid}: our frames\n{}",
            serde_json::to_string_pretty(frames).unwrap_or_default()
        );
        // The logical chain: funclets joined to their methods, in the manifest's order.
        let chain: Vec<u64> = p["chain_method_descs"]
            .as_array()
            .expect("chain_method_descs")
            .iter()
            .map(hex)
            .collect();
        let chain_names: Vec<String> = p["expected_chain"]
            .as_array()
            .expect("expected_chain")
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect();
        // A P/Invoke inlined into its caller has no frame of its own (its InlinedCallFrame
        // is checked below).
        let physical: HashSet<&String> = want.iter().collect();
        let expected: Vec<u64> = chain
            .iter()
            .zip(&chain_names)
            .filter(|(_, n)| physical.contains(n))
            .map(|(&md, _)| md)
            .collect();
        let wanted: HashSet<u64> = chain.iter().copied().collect();
        let mut logical: Vec<u64> = logical_method_descs(frames)
            .into_iter()
            .filter(|md| wanted.contains(md))
            .collect();
        logical.dedup();
        assert_eq!(logical, expected, "{what}: {kind} logical chain");
        if let Some(funclet) = p["funclet"].as_object() {
            let method = funclet["method"].as_str().unwrap_or("");
            let (i, f) = frames
                .iter()
                .enumerate()
                .find(|(_, f)| {
                    f["funclet"] == true && short_name(f["name"].as_str().unwrap_or("")) == method
                })
                .unwrap_or_else(|| panic!("{what}: {kind}: no funclet frame of {method}"));
            let parent = f["parent_frame"]
                .as_u64()
                .expect("funclet tied to its method") as usize;
            assert!(parent > i);
            assert_eq!(frames[parent]["method_desc"], f["method_desc"]);
            assert_eq!(frames[parent]["funclet"], false);
        }
        if kind == "pinvoke_read" {
            let first_ours = frames
                .iter()
                .position(|f| is_managed(f) && ours(&short_name(f["name"].as_str().unwrap_or(""))))
                .expect("our frames");
            let native: Vec<&str> = frames[..first_ours]
                .iter()
                .filter(|f| f["kind"] == "native")
                .filter_map(|f| f["name"].as_str())
                .collect();
            assert!(
                native
                    .iter()
                    .any(|n| n.starts_with("libc.so.6!") && n.contains("read")),
                "{what}: native frames below the P/Invoke: {native:?}"
            );
            let kinds = &t["managed"]["explicit_frames"];
            assert!(
                kinds
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k["kind"] == "InlinedCallFrame")),
                "{what}: {kinds}"
            );
        }
    }
}

/// The managed frames of every thread against ClrMD's, on a full dump. Returns (threads
/// compared, frames equal).
fn compare_with_clrmd(stacks: &Value, dump: &std::path::Path, what: &str) -> (usize, usize) {
    let theirs = clrmd(dump, &["stacks"]);
    let (mut threads, mut equal) = (0, 0);
    let mut icf_adjusted: Option<usize> = None;
    let mut differences = Vec::new();
    for ct in theirs.as_array().expect("ClrMD threads") {
        let tid = ct["os_thread_id"].as_i64().unwrap_or(0);
        let cf: Vec<(u64, u64, u64)> = ct["frames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["kind"] == "ManagedMethod" && f["method_desc"].is_string())
            .map(|f| (hex(&f["ip"]), hex(&f["sp"]), hex(&f["method_desc"])))
            .collect();
        if cf.is_empty() {
            continue;
        }
        let Some(ours) = stacks["threads"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["os_id"].as_i64() == Some(tid)))
        else {
            differences.push(format!("thread {tid}: not listed by cdac"));
            continue;
        };
        // Where a frame called native code through a P/Invoke, the DAC starts from the
        // InlinedCallFrame, whose recorded return address (set before the call) is a few
        // bytes before the one on the stack: take theirs when it is that frame's.
        let icf: Vec<(u64, u64)> = ours["managed"]["explicit_frames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["kind"] == "InlinedCallFrame" && f["return_address"].is_string())
            .map(|f| (hex(&f["return_address"]), hex(&f["caller_sp"])))
            .collect();
        let of: Vec<(u64, u64, u64)> = ours["frames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| is_managed(f))
            .map(|f| (hex(&f["ip"]), hex(&f["sp"]), hex(&f["method_desc"])))
            .zip(cf.iter().chain(std::iter::repeat(&(0, 0, 0))))
            .map(|(o, c)| {
                let recorded = icf.iter().any(|&(ret, _)| ret == c.0);
                if o.0 != c.0 && recorded && o.1 == c.1 && o.2 == c.2 && c.0 < o.0 && o.0 - c.0 < 64
                {
                    *icf_adjusted.get_or_insert(0) += 1;
                    *c
                } else {
                    o
                }
            })
            .collect();
        threads += 1;
        if of == cf {
            equal += of.len();
        } else {
            differences.push(format!("thread {tid}:\n  cdac  {of:x?}\n  ClrMD {cf:x?}"));
        }
    }
    assert!(
        threads >= 9,
        "{what}: {threads} threads with managed frames"
    );
    assert!(
        differences.is_empty(),
        "{what}: managed frames differ from ClrMD's:\n{}",
        differences.join("\n")
    );
    eprintln!(
        "{what}: {} frames at a P/Invoke whose IP ClrMD takes from the InlinedCallFrame",
        icf_adjusted.unwrap_or(0)
    );
    (threads, equal)
}

fn stacks_of(variant: Variant) {
    let tb = testbed_of(variant);
    let pid = tb.pid.to_string();
    let live = {
        let _tracing = common::tracing_lock();
        cdac_stacks(&["--pid", &pid])
    };
    check_parked_threads(tb, &live, &format!("{} live", variant.name()));
    // Every thread was stopped for a moment only, one at a time.
    let stops: Vec<f64> = live["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter_map(|t| t["stopped_us"].as_f64())
        .collect();
    assert!(!stops.is_empty());
    for kind in ["full", "gcore"] {
        let dump = tb.dump(kind);
        let path = dump.to_string_lossy().into_owned();
        let stacks = cdac_stacks(&["--dump", &path]);
        let what = format!("{} {kind}", variant.name());
        check_parked_threads(tb, &stacks, &what);
        if kind == "full" {
            let (threads, frames) = compare_with_clrmd(&stacks, &dump, &what);
            eprintln!("{what}: ClrMD agrees on {frames} managed frames of {threads} threads");
        }
    }
}

#[test]
fn stacks_on_net10() {
    stacks_of(Variant::Net10);
}

#[test]
fn stacks_on_net11() {
    stacks_of(Variant::Net11);
}

#[test]
fn stacks_on_net9() {
    stacks_of(Variant::Net9);
}

#[test]
fn stacks_on_net8() {
    stacks_of(Variant::Net8);
}

/// Stack memory damaged from `from` on (64 KiB): pseudo-random words, or every word
/// pointing at `from` (frame-pointer loops, return addresses that are not code).
struct Damaged<'a> {
    target: &'a cdac::memory::Target,
    from: u64,
    selfref: bool,
}

impl cdac::unwind::StackMemory for Damaged<'_> {
    fn read_u64(&self, addr: u64) -> Result<u64, cdac::memory::ReadError> {
        if addr >= self.from && addr < self.from + 0x10000 {
            if self.selfref {
                return Ok(self.from);
            }
            // A fixed mix of the address: the same garbage on every read.
            let mut x = addr ^ 0x9e37_79b9_7f4a_7c15;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            return Ok(x ^ (x >> 31));
        }
        self.target.read_u64(addr)
    }
}

#[test]
fn damaged_stacks_end_with_the_frames_before_the_damage_and_a_reason() {
    use cdac::runtime::{OpenOptions, Runtime};
    use cdac::stacks::{StackEnd, StackWalker};
    let tb = testbed_of(Variant::Net10);
    let rt = Runtime::open_dump(tb.dump("gcore"), &OpenOptions::default()).expect("open");
    let walker = StackWalker::new(&rt).expect("walker").with_max_frames(256);
    let threads = rt.target().source().threads().expect("threads");
    let (mut walks, mut stopped) = (0, 0);
    for t in &threads {
        let Some(ctx) = t.context else { continue };
        let intact = walker.walk(ctx, rt.target(), &[]);
        // Damage the stack above the third frame (or above the innermost one).
        let from = intact.frames.get(2).map_or(ctx.sp() + 64, |f| f.sp + 8);
        for selfref in [false, true] {
            let mem = Damaged {
                target: rt.target(),
                from,
                selfref,
            };
            let damaged = walker.walk(ctx, &mem, &[]);
            walks += 1;
            assert!(!damaged.frames.is_empty() && damaged.frames.len() <= 256);
            // Every frame below the damage is the intact walk's.
            let below = intact.frames.iter().take_while(|f| f.sp < from).count();
            assert!(
                damaged.frames.len() >= below.min(1),
                "thread {}: {} frames",
                t.tid,
                damaged.frames.len()
            );
            assert_eq!(
                &damaged.frames[..below.min(damaged.frames.len())],
                &intact.frames[..below.min(damaged.frames.len())],
                "thread {}",
                t.tid
            );
            match &damaged.end {
                StackEnd::Error { message } => {
                    assert!(!message.is_empty());
                    stopped += 1;
                }
                StackEnd::Complete | StackEnd::FrameLimit { .. } => {}
            }
        }
    }
    assert!(walks >= 30, "{walks} walks");
    // Most damaged walks stop with a reason (a few may end cleanly on a zero word).
    assert!(
        stopped * 2 > walks,
        "{stopped} of {walks} damaged walks stopped with an error"
    );
    eprintln!("{stopped} of {walks} damaged walks stopped with a reason");
}

/// `cdac stacks` gives managed frames their file and line from the testbed's PDB: every
/// parked thread's `…Middle` frame is at its one-line body (`=> …Inner(pt)`), and the
/// sleeping thread's `SleepInner` at its `Thread.Sleep` call.
fn source_lines_of(variant: Variant) {
    let tb = testbed_of(variant);
    let pid = tb.pid.to_string();
    let live = cdac_stacks(&["--pid", &pid, "--nonblocking"]);
    let source =
        std::fs::read_to_string(common::repo().join("testbed/Cdac.Testbed/ParkedThreads.cs"))
            .expect("ParkedThreads.cs");
    let lines: Vec<&str> = source.lines().collect();
    let line_of = |after: &str, needle: &str| {
        let start = lines
            .iter()
            .position(|l| l.contains(after))
            .expect("declaration");
        (start
            + lines[start..]
                .iter()
                .position(|l| l.contains(needle))
                .expect("call")
            + 1) as u64
    };
    let threads = live["threads"].as_array().expect("threads");
    let mut checked = 0;
    for p in tb.manifest["threads"].as_array().expect("manifest threads") {
        let tid = p["os_tid"].as_i64().expect("os_tid");
        let Some(t) = threads.iter().find(|t| t["os_id"].as_i64() == Some(tid)) else {
            continue;
        };
        // A running thread read without stopping it has no stack (`frames` is null).
        let Some(frames) = t["frames"].as_array() else {
            continue;
        };
        for f in frames {
            let name = short_name(f["name"].as_str().unwrap_or(""));
            let method = name.rsplit("::").next().unwrap_or("").to_string();
            let want = if method.ends_with("Middle") {
                let decl = format!(" {method}(ParkedThread pt) =>");
                line_of(&decl, &decl)
            } else if method == "SleepInner" {
                line_of("static void SleepInner(", "Thread.Sleep(")
            } else {
                continue;
            };
            let src = &f["source"];
            assert!(
                src["file"]
                    .as_str()
                    .is_some_and(|s| s.ends_with("Cdac.Testbed/ParkedThreads.cs")),
                "{}: {name}: {f}",
                variant.name()
            );
            assert_eq!(
                src["line"].as_u64(),
                Some(want),
                "{}: {name}: {f}",
                variant.name()
            );
            checked += 1;
        }
    }
    eprintln!("{}: {checked} frames at their source lines", variant.name());
    assert!(checked >= 5, "{}: {checked} frames checked", variant.name());
}

#[test]
fn source_lines_on_net10() {
    source_lines_of(Variant::Net10);
}

#[test]
fn source_lines_on_net11() {
    source_lines_of(Variant::Net11);
}

#[test]
fn source_lines_on_net9() {
    source_lines_of(Variant::Net9);
}

#[test]
fn source_lines_on_net8() {
    source_lines_of(Variant::Net8);
}
