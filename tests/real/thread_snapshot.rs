//! Registers and stacks of a live process's threads, on the real .NET 10 testbed (10.0.14):
//! every thread is stopped in turn (ptrace seize, interrupt, getregs, stack copy, detach),
//! each parked thread blocked in a system call is found right after its `syscall`
//! instruction in the call the testbed recorded, its stack copy matches the process's
//! memory, and afterwards nothing traces the testbed and no thread of it is stopped. The
//! non-blocking mode (`/proc/PID/task/TID/syscall`) gives the same sp and pc for blocked
//! threads. Errors: a pid that does not exist, threads and a process that exit during a
//! snapshot, a thread already traced (by strace), and missing privilege (an unprivileged
//! user, through setpriv). Cores: the crash signal and crashing thread of a kernel core of a
//! C program faulting in a second thread, and of the kernel's and createdump's cores of the
//! testbed's unhandled exception (SIGABRT); none for a gcore of a running process.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cdac::memory::core_dump::CoreDump;
use cdac::memory::live::LiveProcess;
use cdac::memory::{DataLayout, MemorySource, Target};
use cdac::process::thread_snapshot::{
    peek_thread, peek_threads, snapshot_thread, snapshot_threads, SnapshotError, SnapshotOptions,
    ThreadActivity,
};
use cdac::unwind::{x64_reg, StackMemory};
use common::{scratch, testbed_exe, testbed_of, Variant};

/// One snapshot of the shared testbed at a time: a thread has one tracer.
static TESTBED: Mutex<()> = Mutex::new(());

/// A parked thread of the manifest.
#[derive(Debug)]
struct Parked {
    tid: i32,
    kind: String,
    /// The system call it was blocked in when it parked (`None`: running, the spinner).
    syscall: Option<u64>,
}

fn parked(manifest: &serde_json::Value) -> Vec<Parked> {
    manifest["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| Parked {
            tid: t["os_tid"].as_i64().expect("os_tid") as i32,
            kind: t["kind"].as_str().expect("kind").to_string(),
            syscall: t["syscall"].as_str().and_then(|s| s.parse().ok()),
        })
        .collect()
}

fn live_target(pid: i32) -> Target {
    Target::new(
        Arc::new(LiveProcess::open(pid).expect("open the testbed")),
        DataLayout::LE64,
    )
}

/// Fields of a /proc status file.
fn status_field(path: &str, field: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(|v| v.trim().to_string())
}

/// Nothing traces the process, no thread of it is stopped, and it is still running.
fn assert_untouched(pid: i32) {
    assert_eq!(
        status_field(&format!("/proc/{pid}/status"), "TracerPid:").as_deref(),
        Some("0")
    );
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let tid = e.expect("task").file_name().into_string().expect("tid");
        let status = format!("/proc/{pid}/task/{tid}/status");
        let Some(state) = status_field(&status, "State:") else {
            continue; // exited meanwhile
        };
        assert!(
            !state.starts_with('t') && !state.starts_with('T'),
            "thread {tid} is stopped after the snapshot: {state}"
        );
        // A churning thread may exit between the two reads: then its status is gone.
        if let Some(tracer) = status_field(&status, "TracerPid:") {
            assert_eq!(tracer, "0", "thread {tid} is still traced");
        }
    }
}

#[test]
fn snapshot_of_every_thread_of_the_net10_testbed() {
    let tb = testbed_of(Variant::Net10);
    let _lock = TESTBED.lock().unwrap_or_else(|p| p.into_inner());
    let target = live_target(tb.pid);
    let parked = parked(&tb.manifest);
    assert!(parked.len() >= 8, "{parked:?}");

    let snap = snapshot_threads(tb.pid, &SnapshotOptions::default()).expect("snapshot");
    assert_untouched(tb.pid);

    // Figures.
    let mut stops: Vec<Duration> = snap.threads.iter().map(|t| t.stopped_for).collect();
    stops.sort();
    let median = stops[stops.len() / 2];
    let worst = stops[stops.len() - 1];
    let mut held: Vec<Duration> = snap.threads.iter().map(|t| t.held_for).collect();
    held.sort();
    let slowest = snap
        .threads
        .iter()
        .max_by_key(|t| t.stopped_for)
        .expect("threads");
    println!(
        "slowest stop: thread {} {:?} ({:?}, of which held {:?})",
        slowest.tid, slowest.name, slowest.stopped_for, slowest.held_for
    );
    let copied: usize = snap.threads.iter().map(|t| t.stack.bytes.len()).sum();
    println!(
        "snapshot of {} threads ({} skipped): per-thread stop (interrupt to detach) median {:?}, worst {:?}; held after the stop was reported: median {:?}, worst {:?}; total {:?}; {} KiB of stack copied",
        snap.threads.len(),
        snap.skipped.len(),
        median,
        worst,
        held[held.len() / 2],
        held[held.len() - 1],
        snap.elapsed,
        copied / 1024
    );
    assert!(snap.threads.len() > parked.len());
    // The main thread is the testbed's; it parks too.
    assert!(snap.thread(tb.pid).is_some(), "main thread");

    let mut blocked_checked = 0;
    for p in &parked {
        let t = snap
            .thread(p.tid)
            .unwrap_or_else(|| panic!("parked thread {} ({}) missing", p.tid, p.kind));
        let rsp = t.context.rsp();
        assert_eq!(t.context.regs[x64_reg::RSP], Some(rsp));
        assert!(t.context.regs.iter().all(Option::is_some), "all registers");
        // rsp lies in the thread's stack mapping, which /proc/PID/maps has.
        let (start, end) = t.stack_mapping.expect("rsp is in a mapping");
        assert!(start <= rsp && rsp < end, "{p:?}: rsp {rsp:#x}");
        // The copy starts at the red zone (or the mapping's start) and reaches 256 KiB or
        // the top of the stack.
        assert_eq!(t.stack.base, (rsp - 128).max(start), "{p:?}");
        let want = (end - t.stack.base).min(256 * 1024) as usize;
        assert_eq!(t.stack.bytes.len(), want, "{p:?}");
        assert_eq!(
            t.name.as_deref().map(|n| n.starts_with("cdac-")),
            Some(true)
        );
        assert!(t.held_for <= t.stopped_for);
        assert_eq!(t.redelivered_signal, None);
        // The fs base (TLS) is set for every thread and differs between threads.
        assert_ne!(t.fs_base, 0);
        // Reading through the copy over the target: the copy's word at rsp.
        let mem = t.stack_memory(&target);
        assert_eq!(
            mem.read_u64(rsp).expect("rsp in the copy"),
            u64::from_le_bytes(t.stack.get(rsp, 8).expect("8 bytes").try_into().expect("8"))
        );
        let Some(syscall) = p.syscall else {
            assert_eq!(p.kind, "spin");
            continue;
        };
        // Blocked in a system call: stopped right after the `syscall` instruction, in the
        // call the testbed recorded (rax holds the call's interim -ERESTART… result).
        let before = target
            .read_bytes(t.context.rip - 2, 2)
            .expect("code at rip");
        assert_eq!(before, [0x0f, 0x05], "{p:?}: rip {:#x}", t.context.rip);
        assert_eq!(t.syscall(), Some(syscall), "{p:?}: orig_rax");
        let rax = t.context.regs[x64_reg::RAX].expect("rax") as i64;
        assert!(
            (-516..=-512).contains(&rax),
            "{p:?}: rax {rax} is not -ERESTART…"
        );
        // The stack of a blocked thread is as it was: the copy's first KiB equals a fresh
        // read of the same range.
        let fresh = target.read_bytes(t.stack.base, 1024).expect("fresh read");
        assert_eq!(&t.stack.bytes[..1024], &fresh[..], "{p:?}");
        blocked_checked += 1;
    }
    assert_eq!(blocked_checked, parked.len() - 1, "all but the spinner");
    // The fs bases are the threads' own.
    let mut bases: Vec<u64> = snap.threads.iter().map(|t| t.fs_base).collect();
    bases.sort();
    bases.dedup();
    assert_eq!(bases.len(), snap.threads.len());
    // Still running: a thread's /proc syscall file answers, and the process is there.
    assert!(Path::new(&format!("/proc/{}", tb.pid)).exists());
    assert!(target.source().threads().expect("threads").len() >= snap.threads.len() - 1);
}

#[test]
fn the_non_blocking_mode_gives_the_same_sp_and_pc_for_blocked_threads() {
    let tb = testbed_of(Variant::Net10);
    let _lock = TESTBED.lock().unwrap_or_else(|p| p.into_inner());
    let all = peek_threads(tb.pid).expect("peek");
    assert!(all.len() > 8);
    assert_untouched(tb.pid);
    for p in parked(&tb.manifest) {
        let peek = peek_thread(tb.pid, p.tid).expect("peek thread");
        assert!(all.iter().any(|a| a.tid == p.tid));
        // kstkesp/kstkeip of /proc/PID/task/TID/stat: 0 for a live, blocked thread.
        assert_eq!(peek.stat_sp_pc, None, "{p:?}");
        if p.kind == "spin" {
            assert_eq!(peek.activity, ThreadActivity::Running, "{p:?}");
            assert_eq!(peek.context(), None);
            continue;
        }
        let ThreadActivity::InSyscall { nr, sp, pc, .. } = peek.activity else {
            panic!("{p:?}: {:?}", peek.activity);
        };
        assert_eq!(Some(nr), p.syscall, "{p:?}");
        let ctx = peek.context().expect("best-effort context");
        assert_eq!((ctx.rip, ctx.rsp(), ctx.rbp()), (pc, sp, None));
        let t = snapshot_thread(tb.pid, p.tid, &SnapshotOptions::default()).expect("snapshot");
        assert_eq!((t.context.rip, t.context.rsp()), (pc, sp), "{p:?}");
        assert_eq!(t.syscall(), Some(nr), "{p:?}");
        println!(
            "{} (tid {}): /proc says syscall {nr} sp {sp:#x} pc {pc:#x}; ptrace agrees (stopped {:?})",
            p.kind, p.tid, t.stopped_for
        );
        let info = cdac::memory::ThreadInfo::from(&t);
        assert_eq!((info.ip, info.sp), (Some(pc), Some(sp)));
    }
    assert_untouched(tb.pid);
    // Undisturbed: each blocked thread went back into the same system call (restarted, not
    // failed with EINTR) at the same place.
    for p in parked(&tb.manifest) {
        let Some(syscall) = p.syscall else { continue };
        let deadline = Instant::now() + Duration::from_secs(5);
        let peek = loop {
            let peek = peek_thread(tb.pid, p.tid).expect("peek");
            if peek.syscall().is_some() || Instant::now() > deadline {
                break peek;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(peek.syscall(), Some(syscall), "{p:?}: {peek:?}");
    }
}

// ---------------------------------------------------------------- a C helper

const HELPER_C: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void nap_us(long us) {
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

static void *crasher(void *arg) {
    (void)arg;
    printf("%ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    nap_us(100000);
    *(volatile int *)0x1234 = 1;
    return NULL;
}

static void *short_lived(void *arg) {
    nap_us((long)(size_t)arg);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "crash") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, crasher, NULL);
        pthread_join(t, NULL);
        return 0;
    }
    /* churn [EXIT_AFTER_MS]: about 40 threads at any time, each living 0.1 to 3 ms. */
    long exit_after_ms = argc > 2 ? atol(argv[2]) : 600000;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    printf("ready\n");
    fflush(stdout);
    unsigned seed = 1;
    for (;;) {
        for (int i = 0; i < 40; i++) {
            pthread_t t;
            size_t us = 100 + rand_r(&seed) % 2900;
            if (pthread_create(&t, NULL, short_lived, (void *)us) == 0) pthread_detach(t);
        }
        nap_us(1000);
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (ms > exit_after_ms) _exit(0);
    }
}
"#;

fn helper() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = scratch("thread-helper");
        let src = dir.join("helper.c");
        std::fs::write(&src, HELPER_C).expect("write helper.c");
        let exe = dir.join("helper");
        let status = Command::new("gcc")
            .args(["-O1", "-g", "-pthread", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("run gcc");
        assert!(status.success(), "gcc failed");
        exe
    })
    .clone()
}

/// Kills and reaps a child when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_churn(exit_after_ms: Option<u64>) -> (Reaped, i32) {
    let mut cmd = Command::new(helper());
    cmd.arg("churn");
    if let Some(ms) = exit_after_ms {
        cmd.arg(ms.to_string());
    }
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start helper");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("ready line");
    assert_eq!(line.trim(), "ready");
    let pid = child.id() as i32;
    (Reaped(child), pid)
}

#[test]
fn threads_that_exit_during_a_snapshot_are_skipped() {
    let (_child, pid) = start_churn(None);
    let mut skipped = 0;
    let mut taken = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut rounds = 0;
    while (skipped == 0 || rounds < 5) && Instant::now() < deadline {
        let snap = snapshot_threads(pid, &SnapshotOptions::default())
            .unwrap_or_else(|e| panic!("round {rounds}: {e}"));
        assert!(snap.thread(pid).is_some(), "the main thread");
        skipped += snap.skipped.len();
        taken += snap.threads.len();
        for s in &snap.skipped {
            assert!(s.reason.contains("exited"), "{s:?}");
        }
        rounds += 1;
    }
    println!("{rounds} snapshots of a churning process: {taken} threads taken, {skipped} skipped");
    assert!(skipped > 0, "no thread exited during {rounds} snapshots");
    assert_untouched(pid);
    // A single thread that is gone: a typed error, not a panic or a hang.
    let gone = (1..)
        .map(|i| pid + 100_000 + i)
        .find(|t| !Path::new(&format!("/proc/{pid}/task/{t}")).exists())
        .expect("a free tid");
    match snapshot_thread(pid, gone, &SnapshotOptions::default()) {
        Err(SnapshotError::NoSuchThread { tid, .. }) => assert_eq!(tid, gone),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_process_that_exits_during_snapshots_gives_a_typed_error() {
    let (mut child, pid) = start_churn(Some(300));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut outcome = None;
    while Instant::now() < deadline {
        match snapshot_threads(pid, &SnapshotOptions::default()) {
            Ok(_) => continue,
            Err(e) => {
                outcome = Some(e);
                break;
            }
        }
    }
    let _ = child.0.wait();
    match outcome {
        Some(SnapshotError::ProcessExited { pid: p, partial }) => {
            assert_eq!(p, pid);
            println!(
                "exited mid-snapshot after {} thread(s) were copied",
                partial.len()
            );
        }
        Some(SnapshotError::NoSuchProcess { pid: p }) => assert_eq!(p, pid),
        other => panic!("{other:?}"),
    }
    // Once reaped, the pid names no process.
    match snapshot_threads(pid, &SnapshotOptions::default()) {
        Err(SnapshotError::NoSuchProcess { pid: p }) => assert_eq!(p, pid),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_pid_that_does_not_exist() {
    let pid = (1_000_000..)
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .expect("a free pid");
    let opts = SnapshotOptions::default();
    assert!(matches!(
        snapshot_threads(pid, &opts),
        Err(SnapshotError::NoSuchProcess { pid: p }) if p == pid
    ));
    assert!(matches!(
        snapshot_thread(pid, pid, &opts),
        Err(SnapshotError::NoSuchProcess { pid: p }) if p == pid
    ));
    assert!(matches!(
        peek_threads(pid),
        Err(SnapshotError::NoSuchProcess { pid: p }) if p == pid
    ));
    assert!(matches!(
        peek_thread(pid, pid),
        Err(SnapshotError::NoSuchProcess { pid: p }) if p == pid
    ));
    // Our own process cannot be stopped from inside.
    let own = std::process::id() as i32;
    assert!(matches!(
        snapshot_threads(own, &opts),
        Err(SnapshotError::OwnProcess { pid: p }) if p == own
    ));
    assert!(peek_threads(own).is_ok());
}

fn sleeper() -> (Reaped, i32) {
    let child = Command::new("sleep").arg("600").spawn().expect("sleep");
    let pid = child.id() as i32;
    // Wait until it sleeps in nanosleep (not still starting up).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(
        peek_thread(pid, pid).map(|p| p.activity),
        Ok(ThreadActivity::InSyscall { .. })
    ) {
        assert!(Instant::now() < deadline, "sleep did not go to sleep");
        std::thread::sleep(Duration::from_millis(5));
    }
    (Reaped(child), pid)
}

#[test]
fn a_thread_already_traced_is_named_with_its_tracer() {
    let (_sleep, pid) = sleeper();
    // Untraced: fine.
    let t = snapshot_thread(pid, pid, &SnapshotOptions::default()).expect("snapshot");
    assert!(t.syscall().is_some(), "sleep sleeps in a system call");
    let strace = Command::new("strace")
        .args(["-o", "/dev/null", "-p"])
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace");
    let strace_pid = strace.id() as i32;
    let _strace = Reaped(strace);
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_field(&format!("/proc/{pid}/status"), "TracerPid:").as_deref() == Some("0") {
        assert!(Instant::now() < deadline, "strace did not attach");
        std::thread::sleep(Duration::from_millis(10));
    }
    match snapshot_thread(pid, pid, &SnapshotOptions::default()) {
        Err(e @ SnapshotError::AlreadyTraced { .. }) => {
            let SnapshotError::AlreadyTraced {
                tracer,
                tracer_is_us,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((*tracer, *tracer_is_us), (strace_pid, false));
            let text = e.to_string();
            assert!(
                text.contains("already traced by process") && text.contains("peek_threads"),
                "{text}"
            );
            println!("{text}");
        }
        other => panic!("{other:?}"),
    }
    // The non-blocking mode still works on a traced thread.
    assert!(peek_thread(pid, pid).is_ok());
}

/// Set in the child run of [`missing_privilege_names_ptrace_scope_or_cap_sys_ptrace`].
const PERM_CHILD: &str = "CDAC_SNAPSHOT_PERMISSION_CHILD_PID";

#[test]
fn missing_privilege_names_ptrace_scope_or_cap_sys_ptrace() {
    if let Ok(pid) = std::env::var(PERM_CHILD) {
        // The child: an unprivileged user, snapshotting root's process.
        let pid: i32 = pid.parse().expect("pid");
        match snapshot_thread(pid, pid, &SnapshotOptions::default()) {
            Err(e @ SnapshotError::PermissionDenied { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains("CAP_SYS_PTRACE") || text.contains("ptrace_scope"),
                    "{text}"
                );
                println!("PERMISSION-DENIED-OK {text}");
            }
            other => panic!("{other:?}"),
        }
        // /proc/PID/task/TID/syscall needs the same access.
        assert!(
            matches!(
                peek_thread(pid, pid),
                Err(SnapshotError::PermissionDenied { .. })
            ),
            "{:?}",
            peek_thread(pid, pid)
        );
        return;
    }
    let setpriv = Path::new("/usr/bin/setpriv");
    if !setpriv.exists() || !cdac_runs_as_root() {
        eprintln!("skipped: needs root and setpriv to run a child as another user");
        return;
    }
    let (_sleep, pid) = sleeper();
    let exe = std::env::current_exe().expect("test exe");
    let out = Command::new(setpriv)
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(&exe)
        .args([
            "--exact",
            &listed_name("missing_privilege_names_ptrace_scope_or_cap_sys_ptrace"),
            "--nocapture",
        ])
        .env(PERM_CHILD, pid.to_string())
        .output()
        .expect("run the test as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("PERMISSION-DENIED-OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "{}",
        stdout
            .lines()
            .find(|l| l.contains("PERMISSION-DENIED-OK"))
            .unwrap_or("")
    );
}

fn cdac_runs_as_root() -> bool {
    status_field("/proc/self/status", "Uid:")
        .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

// ---------------------------------------------------------------- crash signals of cores

/// Runs `exe args` in `dir` under `ulimit -c unlimited` with a coredump_filter of 0 (notes
/// only: registers, siginfo, files); returns the kernel's core (core_pattern "core" or
/// "core.PID" in the working directory), or `None` when this machine writes cores elsewhere.
fn kernel_core_of(
    dir: &Path,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<PathBuf>, String, i32) {
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -c unlimited && echo 0 > /proc/self/coredump_filter && exec "$@""#)
        .arg("sh")
        .arg(exe)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .stderr(Stdio::null())
        .output()
        .expect("run the crashing program");
    use std::os::unix::process::ExitStatusExt;
    let signal = out.status.signal().unwrap_or(0);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let pattern = pattern.trim();
    let core = if pattern.starts_with('|') || pattern.contains('/') {
        None
    } else {
        std::fs::read_dir(dir)
            .expect("dir")
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n == "core" || n.starts_with("core."))
            })
    };
    (core, stdout, signal)
}

#[test]
fn a_kernel_core_names_the_faulting_thread_signal_and_address() {
    let dir = scratch("crash-c");
    let (core, stdout, signal) = kernel_core_of(&dir, &helper(), &["crash"], &[]);
    assert_eq!(signal, libc::SIGSEGV);
    let Some(core) = core else {
        eprintln!("skipped: core_pattern does not write cores to the working directory");
        return;
    };
    let crashing_tid: i32 = stdout.trim().parse().expect("the crashing thread's tid");
    let dump = CoreDump::open(&core).expect("open the core");
    let target = Target::new(Arc::new(dump), DataLayout::LE64);
    let crash = target.crash_signal().expect("crash signal");
    println!("{crash:?}");
    assert_eq!(
        crash.tid, crashing_tid,
        "the second thread crashed, not main"
    );
    assert_ne!(
        crash.tid,
        target.source().threads().expect("threads")[1].tid
    );
    assert_eq!(crash.signo, libc::SIGSEGV);
    assert_eq!(crash.name(), Some("SIGSEGV"));
    assert_eq!(crash.code, 1, "SEGV_MAPERR");
    assert_eq!(crash.fault_addr, Some(0x1234));
    assert_eq!(crash.sender_pid, None);
    assert!(crash.from_siginfo);
    // The first thread of the core is the crashing one, and its rip is the faulting store.
    let first = &target.source().threads().expect("threads")[0];
    assert_eq!(first.tid, crashing_tid);
    assert_eq!(target.source().threads().expect("threads").len(), 2);
}

#[test]
fn a_gcore_of_a_running_process_has_no_crash_signal() {
    let (_sleep, pid) = sleeper();
    let core = scratch("gcore-sleep").join("sleep.core");
    common::gcore(pid, &core);
    let dump = CoreDump::open(&core).expect("gcore's core");
    assert_eq!(dump.threads().expect("threads")[0].tid, pid);
    // gdb records the SIGSTOP of its attach in NT_SIGINFO, with pr_cursig 0: not a crash.
    assert_eq!(dump.crash_signal(), None);
}

#[test]
fn the_testbeds_unhandled_exception_is_sigabrt_of_the_main_thread_in_both_cores() {
    let dir = scratch("crash-net10");
    let exe = testbed_exe(Variant::Net10);
    let manifest = dir.join("manifest.json");
    let createdump_core = dir.join("createdump.core");
    let manifest_arg = manifest.display().to_string();
    let name = createdump_core.display().to_string();
    let (core, _, signal) = kernel_core_of(
        &dir,
        &exe,
        &[
            "--manifest",
            &manifest_arg,
            "--max-seconds",
            "120",
            "--crash",
        ],
        &[
            ("DOTNET_DbgEnableMiniDump", "1"),
            ("DOTNET_DbgMiniDumpType", "1"),
            ("DOTNET_DbgMiniDumpName", &name),
        ],
    );
    assert_eq!(signal, libc::SIGABRT);
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).expect("manifest")).expect("JSON");
    let pid = m["pid"].as_i64().expect("pid") as i32;
    let main_tid = m["crash"]["os_tid"].as_i64().expect("crash os_tid") as i32;
    assert_eq!(main_tid, pid, "the testbed crashes on its main thread");

    // createdump's core, written by the runtime before it aborts: SIGABRT on the main
    // thread, with no sender (createdump writes si_code 0 and no pid).
    let dump = CoreDump::open(&createdump_core).expect("createdump's core");
    let crash = dump.crash_signal().expect("createdump writes NT_SIGINFO");
    println!("createdump: {crash:?}");
    assert_eq!((crash.tid, crash.signo), (main_tid, libc::SIGABRT));
    assert_eq!(crash.name(), Some("SIGABRT"));
    assert_eq!(crash.fault_addr, None);
    assert!(crash.from_siginfo);
    let threads = dump.threads().expect("threads");
    assert!(threads.len() > parked(&m).len());
    assert_eq!(threads[0].tid, main_tid);

    // The kernel's core: abort() raised SIGABRT with tgkill (SI_TKILL, from the process
    // itself).
    let Some(core) = core else {
        eprintln!("kernel core skipped: core_pattern does not write to the working directory");
        return;
    };
    let dump = CoreDump::open(&core).expect("kernel core");
    let crash = dump.crash_signal().expect("NT_SIGINFO");
    println!("kernel: {crash:?}");
    assert_eq!((crash.tid, crash.signo), (main_tid, libc::SIGABRT));
    assert_eq!(crash.code, -6, "SI_TKILL");
    assert_eq!(crash.sender_pid, Some(pid));
    assert_eq!(crash.fault_addr, None);
    let parked_tids: Vec<i32> = parked(&m).iter().map(|p| p.tid).collect();
    let core_tids: Vec<i32> = dump
        .threads()
        .expect("threads")
        .iter()
        .map(|t| t.tid)
        .collect();
    assert!(parked_tids.iter().all(|t| core_tids.contains(t)));
}

/// A test's name as this test binary lists it (`module::test`), for running it alone.
fn listed_name(test: &str) -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}
