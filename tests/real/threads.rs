//! The Thread contract on the C# testbed (.NET 10, 9 and 8, live and from dumps): every
//! parked thread of the manifest is found with its managed and OS ids, the P/Invoke-blocked
//! thread's InlinedCallFrame returns into the method of its expected chain, the threads
//! parked in a catch and in a filter hold their exceptions, and a crash dump's crashing
//! thread holds the unhandled exception with its inner one. Damaged data gives errors or
//! partial results.

use crate::common;

use std::process::Command;
use std::sync::Arc;

use cdac::contracts::execution_manager::execution_manager;
use cdac::contracts::thread::{ThreadList, Threads, FRAME_TOP};
use cdac::memory::{DataLayout, MappedFile, MemorySource, ReadError, Target, TargetKind};
use cdac::names::MethodNamer;
use cdac::runtime::{OpenOptions, Runtime};
use common::{crash_dump, hex, testbed_of, Testbed, Variant};

fn open_live(tb: &Testbed) -> Runtime {
    Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach")
}

fn list(rt: &Runtime) -> ThreadList {
    let threads = Threads::for_runtime(rt).expect("Thread contract");
    let list = threads.threads().expect("thread list");
    assert!(list.error.is_none(), "walk cut short: {:?}", list.error);
    list
}

/// Every manifest thread is on the list with its OS id and managed id; the list is as long
/// as the ThreadStore's count.
fn check_ids(tb: &Testbed, rt: &Runtime) {
    let list = list(rt);
    assert_eq!(
        list.threads.len() as u32,
        list.store.thread_count,
        "{}: listed threads = ThreadCount",
        tb.variant.name()
    );
    for t in tb.manifest["threads"].as_array().expect("threads") {
        let os_tid = t["os_tid"].as_u64().expect("os_tid");
        let managed = t["managed_id"].as_u64().expect("managed_id") as u32;
        let found = list
            .threads
            .iter()
            .find(|x| x.os_id == os_tid)
            .unwrap_or_else(|| panic!("{}: thread {os_tid} not listed", tb.variant.name()));
        assert_eq!(
            found.managed_id,
            managed,
            "{}: {}",
            tb.variant.name(),
            t["name"]
        );
    }
    // The main thread (managed id 1) is the process's own.
    let main = list
        .threads
        .iter()
        .find(|x| x.managed_id == 1)
        .expect("main");
    assert_eq!(main.os_id, tb.pid as u64);
}

/// The P/Invoke thread's first Frame is an active InlinedCallFrame whose return address is
/// in ReadInner (the expected chain's caller of the P/Invoke), with its MethodDesc.
fn check_pinvoke(tb: &Testbed, rt: &Runtime) {
    let threads = Threads::for_runtime(rt).expect("Thread contract");
    let list = list(rt);
    let em = execution_manager(rt.target(), rt.descriptor()).expect("EM");
    let pt = tb.manifest["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["kind"] == "pinvoke_read")
        .expect("pinvoke thread");
    let os_tid = pt["os_tid"].as_u64().expect("tid");
    let t = list
        .threads
        .iter()
        .find(|x| x.os_id == os_tid)
        .expect("listed");
    let frames = threads.frames(t).expect("frames");
    let icf = frames
        .iter()
        .find(|f| f.is_active_pinvoke())
        .unwrap_or_else(|| {
            panic!(
                "{}: no active InlinedCallFrame: {frames:?}",
                tb.variant.name()
            )
        });
    assert_eq!(
        icf.address, t.frame,
        "the InlinedCallFrame is the chain's head"
    );
    // An inlined P/Invoke's frame holds the target's MethodDesc (expected_chain[0]).
    assert_eq!(
        icf.datum,
        Some(hex(&pt["chain_method_descs"][0])),
        "{}: Datum is Libc::read's MethodDesc",
        tb.variant.name()
    );
    let ra = icf.return_address.expect("return address");
    let block = em
        .code_block(ra)
        .expect("lookup")
        .unwrap_or_else(|| panic!("{}: return {ra:#x} not managed", tb.variant.name()));
    // expected_chain[0] is the P/Invoke itself; [1] is ReadInner, which called it.
    let want = hex(&pt["chain_method_descs"][1]);
    assert_eq!(
        block.method_desc,
        want,
        "{}: return address in ReadInner",
        tb.variant.name()
    );
    let name = MethodNamer::for_runtime(rt).name(block.method_desc);
    assert!(name.contains("PipeReader::ReadInner"), "{name}");
    // The call site's SP and frame pointer are on this thread's stack, near the Frame.
    let sp = icf.caller_sp.expect("sp");
    let fp = icf.saved_fp.expect("fp");
    assert!(sp.abs_diff(icf.address) < 0x1000 && fp.abs_diff(icf.address) < 0x1000);
    assert!(fp > sp, "frame pointer above the call site's SP");
    // Every chain ends at FRAME_TOP.
    for t in &list.threads {
        let chain = threads.frame_chain(t.frame);
        assert!(chain.error.is_none(), "{:#x}: {:?}", t.address, chain.error);
        if let Some(last) = chain.frames.last() {
            assert_eq!(last.next, FRAME_TOP);
        }
    }
}

/// The threads parked in a catch block and in a filter hold their exceptions.
fn check_caught(tb: &Testbed, rt: &Runtime) {
    let threads = Threads::for_runtime(rt).expect("Thread contract");
    let list = list(rt);
    let mut namer = MethodNamer::for_runtime(rt);
    let em = execution_manager(rt.target(), rt.descriptor()).expect("EM");
    for (kind, message) in [
        (
            "catch",
            "cdac-catch: caught, then parked in the catch block",
        ),
        (
            "filter",
            "cdac-filter: thrown for a filter that never returns",
        ),
    ] {
        let pt = tb.manifest["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .find(|t| t["kind"] == kind)
            .expect("parked thread");
        let os_tid = pt["os_tid"].as_u64().expect("tid");
        let t = list
            .threads
            .iter()
            .find(|x| x.os_id == os_tid)
            .expect("listed");
        let obj = t
            .exception()
            .unwrap_or_else(|| panic!("{}: {kind} thread holds no exception", tb.variant.name()));
        let e = threads.exception(obj, &mut namer).expect("exception");
        assert_eq!(
            e.type_name.as_deref(),
            Some("System.InvalidOperationException"),
            "{}",
            tb.variant.name()
        );
        assert_eq!(e.message.as_deref(), Some(message));
        assert_eq!(e.hresult as u32, 0x8013_1509, "COR_E_INVALIDOPERATION");
        assert!(e.inner.is_none());
        // .NET 10 names the SoftwareExceptionFrame IL_Throw pushed: its saved context
        // returns into the method that threw (CatchThrow, FilterThrow), whose frame is
        // still on the stack (physical_frames).
        if tb.variant == Variant::Net10 {
            let frames = threads.frames(t).expect("frames");
            let sef = frames
                .iter()
                .find(|f| f.kind == Some("SoftwareExceptionFrame"))
                .unwrap_or_else(|| panic!("{kind}: no SoftwareExceptionFrame: {frames:?}"));
            let ra = sef.return_address.expect("return address");
            assert_eq!(sef.context_ip, Some(ra), "context Rip = return address");
            let block = em.code_block(ra).expect("lookup").expect("managed");
            let name = namer.name(block.method_desc);
            let thrower = if kind == "catch" {
                "CatchBlocker::CatchThrow"
            } else {
                "FilterBlocker::FilterThrow"
            };
            assert!(name.contains(thrower), "{kind}: {name}");
            let physical: Vec<&str> = pt["physical_frames"]
                .as_array()
                .expect("physical")
                .iter()
                .filter_map(|v| v.as_str())
                .collect();
            assert!(physical.iter().any(|p| p.ends_with(thrower)));
            let sp = sef.caller_sp.expect("context Rsp");
            assert!(
                sp > sef.address && sp - sef.address < 0x10000,
                "thrower's SP above the Frame"
            );
        }
    }
}

/// `cdac threads --json` lists the P/Invoke thread with its InlinedCallFrame and the catch
/// thread with its exception.
#[test]
fn cli_threads_json() {
    let tb = testbed_of(Variant::Net10);
    let out = Command::new(crate::common::cdac_exe())
        .args(["threads", "--json", "--pid", &tb.pid.to_string()])
        .output()
        .expect("run cdac");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let threads = v["threads"].as_array().expect("threads");
    assert_eq!(
        threads.len() as u64,
        v["thread_count"].as_u64().expect("count")
    );
    for t in tb.manifest["threads"].as_array().expect("threads") {
        let row = threads
            .iter()
            .find(|r| r["os_id"] == t["os_tid"])
            .expect("listed");
        let managed = &row["managed"];
        assert_eq!(managed["managed_id"], t["managed_id"]);
        // The whole managed name, even past the kernel's 15 bytes.
        assert_eq!(row["name"], t["name"], "{row}");
        assert_eq!(row["name_source"], "managed");
        if t["kind"] == "pinvoke_read" {
            assert_eq!(managed["explicit_frames"][0]["kind"], "InlinedCallFrame");
        }
        if t["kind"] == "catch" {
            let e = &managed["exception"];
            assert_eq!(e["type"], "System.InvalidOperationException");
            assert_eq!(
                e["message"],
                "cdac-catch: caught, then parked in the catch block"
            );
            assert_eq!(e["hresult"], "0x80131509");
        }
    }
}

/// Frame kinds: every parked thread, started by the runtime, has a
/// DebuggerU2MCatchHandlerFrame at the bottom of its chain; on .NET 8 the threads blocked
/// in an FCALL show its HelperMethodFrame (Thread.Sleep: the plain one; Monitor.Wait and
/// Monitor.Enter: the one protecting the monitor object); every Frame is named.
fn check_frame_kinds(tb: &Testbed, rt: &Runtime) {
    let net8 = matches!(tb.variant, Variant::Net8 | Variant::Net8_0_0);
    let threads = Threads::for_runtime(rt).expect("Thread contract");
    let list = list(rt);
    for pt in tb.manifest["threads"].as_array().expect("threads") {
        let os_tid = pt["os_tid"].as_u64().expect("tid");
        let t = list
            .threads
            .iter()
            .find(|x| x.os_id == os_tid)
            .expect("listed");
        let frames = threads.frames(t).expect("frames");
        let name = pt["name"].as_str().unwrap_or("?");
        assert_eq!(
            frames.last().and_then(|f| f.kind),
            Some("DebuggerU2MCatchHandlerFrame"),
            "{}: {name}: {frames:?}",
            tb.variant.name()
        );
        if net8 {
            let head = frames.first().and_then(|f| f.kind);
            match pt["kind"].as_str() {
                Some("sleep" | "finally" | "filter" | "catch") => {
                    assert_eq!(head, Some("HelperMethodFrame"), "{name}")
                }
                Some("monitor_wait" | "monitor_enter") => {
                    assert_eq!(head, Some("HelperMethodFrame_1OBJ"), "{name}")
                }
                Some("pinvoke_read") => assert_eq!(head, Some("InlinedCallFrame")),
                _ => {}
            }
        }
        // .NET 9: Thread.Sleep and Monitor.Wait are QCalls (an InlinedCallFrame), the
        // monitor_enter thread blocks in the JIT helper's HelperMethodFrame_1OBJ, and the
        // exception of the catch and filter threads was thrown under IL_Throw's
        // HelperMethodFrame.
        if tb.variant == Variant::Net9 {
            let head = frames.first().and_then(|f| f.kind);
            let has = |k: &str| frames.iter().any(|f| f.kind == Some(k));
            match pt["kind"].as_str() {
                Some("sleep" | "monitor_wait" | "pinvoke_read") => {
                    assert_eq!(head, Some("InlinedCallFrame"), "{name}")
                }
                Some("monitor_enter") => {
                    assert_eq!(head, Some("HelperMethodFrame_1OBJ"), "{name}")
                }
                Some("catch" | "filter") => assert!(has("HelperMethodFrame"), "{name}"),
                _ => {}
            }
        }
    }
    // Every Frame of every thread has a name.
    for t in &list.threads {
        for f in threads.frames(t).expect("frames") {
            assert!(f.kind.is_some(), "{}: unnamed {f:?}", tb.variant.name());
        }
    }
}

/// Every parked thread's managed `Thread.Name`, read from its managed object, is the name
/// the testbed gave it, whole (one is longer than the kernel's 15 bytes); the main thread
/// has none.
fn check_names(tb: &Testbed, rt: &Runtime) {
    let contract = Threads::for_runtime(rt).expect("Thread contract");
    let list = list(rt);
    let mut long = 0;
    for t in tb.manifest["threads"].as_array().expect("threads") {
        let os_tid = t["os_tid"].as_u64().expect("os_tid");
        let found = list
            .threads
            .iter()
            .find(|x| x.os_id == os_tid)
            .expect("listed");
        let name = contract.thread_name(found).expect("readable name");
        assert_eq!(name.as_deref(), t["name"].as_str(), "{}", tb.variant.name());
        long += usize::from(name.is_some_and(|n| n.len() > 15));
    }
    assert!(long >= 1, "{}: no name past 15 bytes", tb.variant.name());
    let main = list
        .threads
        .iter()
        .find(|x| x.managed_id == 1)
        .expect("main");
    assert_eq!(contract.thread_name(main).expect("readable"), None);
}

fn check_all(tb: &Testbed, rt: &Runtime) {
    check_ids(tb, rt);
    check_names(tb, rt);
    check_frame_kinds(tb, rt);
    check_pinvoke(tb, rt);
    check_caught(tb, rt);
}

#[test]
fn net10_live() {
    let tb = testbed_of(Variant::Net10);
    check_all(tb, &open_live(tb));
}

#[test]
fn net11_live() {
    let tb = testbed_of(Variant::Net11);
    check_all(tb, &open_live(tb));
}

#[test]
fn net9_live() {
    let tb = testbed_of(Variant::Net9);
    check_all(tb, &open_live(tb));
}

#[test]
fn net8_live() {
    let tb = testbed_of(Variant::Net8);
    check_all(tb, &open_live(tb));
}

/// The first .NET 8 build, whose `g_dacTable` has two slots fewer than 8.0.33's.
#[test]
fn net8_0_0_live() {
    let tb = testbed_of(Variant::Net8_0_0);
    check_all(tb, &open_live(tb));
}

#[test]
fn net10_full_dump() {
    let tb = testbed_of(Variant::Net10);
    let rt = Runtime::open_dump(tb.dump("full"), &OpenOptions::default()).expect("dump");
    check_all(tb, &rt);
}

#[test]
fn net11_full_dump() {
    let tb = testbed_of(Variant::Net11);
    let rt = Runtime::open_dump(tb.dump("full"), &OpenOptions::default()).expect("dump");
    check_all(tb, &rt);
}

#[test]
fn net9_full_dump() {
    let tb = testbed_of(Variant::Net9);
    let rt = Runtime::open_dump(tb.dump("full"), &OpenOptions::default()).expect("dump");
    check_all(tb, &rt);
}

#[test]
fn net8_gcore_dump() {
    let tb = testbed_of(Variant::Net8);
    let rt = Runtime::open_dump(tb.dump("gcore"), &OpenOptions::default()).expect("dump");
    check_all(tb, &rt);
}

fn check_crash(variant: Variant) {
    let (m, dump) = crash_dump(variant);
    let crash = &m["crash"];
    let rt = Runtime::open_dump(&dump, &OpenOptions::default()).expect("open crash dump");
    let threads = Threads::for_runtime(&rt).expect("Thread contract");
    let list = threads.threads().expect("threads");
    let tid = crash["os_tid"].as_u64().expect("os_tid");
    let t = list
        .threads
        .iter()
        .find(|x| x.os_id == tid)
        .expect("crashing thread listed");
    assert_eq!(
        u64::from(t.managed_id),
        crash["managed_id"].as_u64().expect("managed id")
    );
    let obj = t.exception().expect("crashing thread holds its exception");
    let mut namer = MethodNamer::for_runtime(&rt);
    let e = threads.exception(obj, &mut namer).expect("exception");
    assert_eq!(e.type_name.as_deref(), crash["exception_type"].as_str());
    assert_eq!(e.message.as_deref(), crash["message"].as_str());
    let inner = e.inner.as_deref().expect("inner exception");
    assert_eq!(
        inner.type_name.as_deref(),
        crash["inner"]["exception_type"].as_str()
    );
    assert_eq!(inner.message.as_deref(), crash["inner"]["message"].as_str());
    assert_eq!(inner.hresult as u32, 0x8007_0057, "COR_E_ARGUMENT");
    assert!(inner.inner.is_none());
}

#[test]
fn net10_crash_dump() {
    check_crash(Variant::Net10);
}

#[test]
fn net11_crash_dump() {
    check_crash(Variant::Net11);
}

#[test]
fn net9_crash_dump() {
    check_crash(Variant::Net9);
}

#[test]
fn net8_crash_dump() {
    check_crash(Variant::Net8);
}

// ---------------------------------------------------------------- damaged data

/// Target memory with some 8-byte words replaced.
struct Patched {
    inner: Arc<dyn MemorySource>,
    words: Vec<(u64, u64)>,
}

impl MemorySource for Patched {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.inner.read_exact(addr, buf)?;
        for &(at, value) in &self.words {
            let bytes = value.to_le_bytes();
            for (i, b) in bytes.iter().enumerate() {
                let a = at + i as u64;
                if a >= addr && a < addr + buf.len() as u64 {
                    buf[(a - addr) as usize] = *b;
                }
            }
        }
        Ok(())
    }
    fn mapped_files(&self) -> &[MappedFile] {
        self.inner.mapped_files()
    }
    fn threads(&self) -> Result<Vec<cdac::memory::ThreadInfo>, ReadError> {
        self.inner.threads()
    }
    fn kind(&self) -> TargetKind {
        self.inner.kind()
    }
    fn native_layout(&self) -> Option<DataLayout> {
        self.inner.native_layout()
    }
}

/// The Thread contract over the runtime's memory with `words` replaced.
fn with_patched<R>(rt: &Runtime, words: &[(u64, u64)], f: impl FnOnce(&Threads) -> R) -> R {
    let source = Arc::new(Patched {
        inner: rt.target().source().clone(),
        words: words.to_vec(),
    });
    let target = Target::new(source, rt.target().layout());
    let dac = rt
        .module()
        .exports
        .iter()
        .find(|s| s.name == "g_dacTable")
        .map(|s| (s.address, s.size));
    let threads = Threads::new(&target, rt.descriptor(), dac).expect("contract");
    f(&threads)
}

/// A thread list whose last link points back at the first thread: the walk stops with an
/// error naming the cycle, keeping the threads read; a Frame whose Next is wild ends its
/// chain with an error, keeping the frames before it; a cyclic Frame chain likewise.
#[test]
fn damaged_lists_give_errors_not_hangs() {
    let tb = testbed_of(Variant::Net10);
    let rt = open_live(tb);
    let threads = Threads::for_runtime(&rt).expect("contract");
    let good = threads.threads().expect("list");
    let link_off = rt
        .descriptor()
        .ty("Thread")
        .expect("Thread")
        .offset("LinkNext")
        .expect("LinkNext");
    let first = good.threads[0].address;
    let last = good.threads.last().expect("threads").address;
    let cyc = with_patched(&rt, &[(last + link_off, first + link_off)], |t| {
        t.threads().expect("list")
    });
    assert_eq!(cyc.threads.len(), good.threads.len());
    let err = cyc.error.expect("cycle reported").to_string();
    assert!(err.contains("cycle"), "{err}");

    // Wild and cyclic Frame chains.
    let t = good
        .threads
        .iter()
        .find(|t| t.frame != FRAME_TOP)
        .expect("a thread with frames");
    let next_off = rt
        .descriptor()
        .ty("Frame")
        .expect("Frame")
        .offset("Next")
        .expect("Next");
    let chain = with_patched(&rt, &[(t.frame + next_off, 0x10)], |c| {
        c.frame_chain(t.frame)
    });
    assert_eq!(chain.frames.len(), 1);
    assert!(chain.error.is_some());
    let chain = with_patched(&rt, &[(t.frame + next_off, t.frame)], |c| {
        c.frame_chain(t.frame)
    });
    assert_eq!(chain.frames.len(), 1);
    assert!(chain.error.expect("cycle").to_string().contains("cycle"));

    // An exception that is its own inner exception; one whose message is a wild pointer.
    let pt = tb.manifest["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["kind"] == "catch")
        .expect("catch thread");
    let os_tid = pt["os_tid"].as_u64().expect("tid");
    let obj = good
        .threads
        .iter()
        .find(|t| t.os_id == os_tid)
        .and_then(|t| t.exception())
        .expect("exception");
    let exc = rt.descriptor().ty("Exception").expect("Exception");
    let inner_off = exc.offset("_innerException").expect("inner");
    let message_off = exc.offset("_message").expect("message");
    let mut namer = MethodNamer::for_runtime(&rt);
    let e = with_patched(&rt, &[(obj + inner_off, obj)], |c| {
        c.exception(obj, &mut namer).expect("exception")
    });
    assert!(e.inner.is_none());
    assert!(e.inner_error.expect("cycle").contains("cycle"));
    let r = with_patched(&rt, &[(obj + message_off, 0x18)], |c| {
        c.exception(obj, &mut namer)
    });
    assert!(r.is_err(), "a wild message pointer is an error");

    // A wild exception tracker costs that thread its exception, not the list.
    let t15 = good
        .threads
        .iter()
        .find(|t| t.os_id == os_tid)
        .expect("catch thread");
    let tracker_off = rt
        .descriptor()
        .ty("Thread")
        .expect("Thread")
        .offset("ExceptionTracker")
        .expect("ExceptionTracker");
    let after = with_patched(&rt, &[(t15.address + tracker_off, 0x28)], |c| {
        c.threads().expect("list")
    });
    assert!(after.error.is_none());
    assert_eq!(after.threads.len(), good.threads.len());
    let damaged = after
        .threads
        .iter()
        .find(|t| t.os_id == os_tid)
        .expect("listed");
    assert_eq!(damaged.current_exception, None);
    assert_eq!(
        damaged.last_thrown, t15.last_thrown,
        "the handle still gives it"
    );

    // A thread whose link points into unreadable memory: the threads before it are kept.
    let second = good.threads[1].address;
    let partial = with_patched(&rt, &[(second + link_off, 0x1000 + link_off)], |c| {
        c.threads().expect("list")
    });
    assert_eq!(partial.threads.len(), 2);
    assert!(partial.error.is_some());
}
