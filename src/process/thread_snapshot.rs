//! Registers and stack bytes of a live process's threads.
//!
//! This is the one place where cdac stops a thread of the target, and only briefly: each
//! thread in turn is seized (`PTRACE_SEIZE`), interrupted (`PTRACE_INTERRUPT`), waited for,
//! its registers copied (`PTRACE_GETREGS`) and the top of its stack copied
//! (`process_vm_readv`, from the red zone below rsp up to a bound), then it is let go
//! (`PTRACE_DETACH`). Never more than one thread is stopped at a time, and how long each one
//! was stopped is measured and returned. Everything slow (listing threads, reading
//! `/proc/PID/maps`, thread names) is done before the thread is stopped.
//!
//! Interrupting a thread that is blocked in a system call makes the kernel restart the call
//! when the thread resumes, as for any job-control stop: a call without a timeout is
//! re-entered as it was; one with a timeout (`futex` with a deadline, `poll`, `nanosleep`)
//! continues as `restart_syscall` (219) with the time left, so a later look at the thread
//! shows that number. A few calls (`epoll_wait`, `sigtimedwait`, …) return `EINTR` instead,
//! which programs (the .NET runtime among them) retry. Signals that arrive while a thread is
//! held are delivered when it resumes.
//!
//! [`peek_threads`] is the alternative that stops nothing: from `/proc/PID/task/TID/syscall`
//! it gives, for a thread blocked in a system call, the call's number and arguments and the
//! user-mode stack and instruction pointers; a running thread gives no registers at all.

use std::io;
use std::time::{Duration, Instant};

use crate::memory::live::{permission_hint, process_gone};
use crate::memory::StackMemory;
use crate::memory::{sys, ReadError, Target};
use crate::regs::{x64_reg, X64Context};

/// How long a thread another process traces is waited for before the snapshot gives up on
/// it ([`SnapshotError::AlreadyTraced`]): a dump writer or a second cdac lets go within it.
pub const TRACER_WAIT: Duration = Duration::from_secs(3);
/// How often the tracer is looked at meanwhile.
const TRACER_POLL: Duration = Duration::from_millis(20);

/// How long a seized thread gets to report its stop. It normally takes microseconds; a
/// thread of a process dying under us may never report, and no snapshot may hang.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// How long the exit report of a thread that is going away is waited for (to reap it).
const REAP_WAIT: Duration = Duration::from_millis(100);

/// The x64 red zone: leaf functions may keep data in the 128 bytes below rsp.
pub const RED_ZONE: u64 = 128;

/// What a snapshot copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Most bytes of stack copied per thread, from the red zone below rsp upwards. The copy
    /// stops earlier at the end of the mapping that holds rsp (the stack's top).
    pub max_stack_bytes: usize,
}

impl Default for SnapshotOptions {
    /// 256 KiB of stack per thread.
    fn default() -> Self {
        SnapshotOptions {
            max_stack_bytes: 256 * 1024,
        }
    }
}

/// Bytes of a thread's stack, copied while the thread was stopped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StackCopy {
    /// Address of the first byte copied (rsp minus the red zone, clipped to the mapping).
    pub base: u64,
    /// The bytes from `base` on.
    pub bytes: Vec<u8>,
}

impl StackCopy {
    /// One past the last address copied.
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.bytes.len() as u64)
    }

    /// True when `[addr, addr + len)` lies wholly in the copy.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.end())
    }

    /// The copied bytes at `[addr, addr + len)`, if all of them were copied.
    pub fn get(&self, addr: u64, len: usize) -> Option<&[u8]> {
        if !self.contains(addr, len) {
            return None;
        }
        let from = usize::try_from(addr - self.base).ok()?;
        self.bytes.get(from..from.checked_add(len)?)
    }
}

impl StackMemory for StackCopy {
    /// Reads from the copy only: an address outside it is `NotCaptured`.
    fn read_u64(&self, addr: u64) -> Result<u64, ReadError> {
        match self.get(addr, 8) {
            Some(b) => {
                let mut word = [0u8; 8];
                word.copy_from_slice(b);
                Ok(u64::from_le_bytes(word))
            }
            None => Err(ReadError::NotCaptured {
                addr,
                len: 8,
                reason: format!(
                    "outside the stack copied while the thread was stopped ({:#x}..{:#x})",
                    self.base,
                    self.end()
                ),
            }),
        }
    }
}

/// A stack copy over the target: addresses in the copy read the bytes as they were when the
/// thread was stopped; any other address is read from the target (as it is now).
#[derive(Debug, Clone, Copy)]
pub struct StackOverTarget<'a> {
    /// The thread's stack copy.
    pub copy: &'a StackCopy,
    /// The target, for everything else.
    pub target: &'a Target,
}

impl StackMemory for StackOverTarget<'_> {
    fn read_u64(&self, addr: u64) -> Result<u64, ReadError> {
        if self.copy.contains(addr, 8) {
            self.copy.read_u64(addr)
        } else {
            self.target.read_u64(addr)
        }
    }
}

/// One thread, as it was while cdac held it stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSnapshot {
    /// Kernel thread id.
    pub tid: i32,
    /// The thread's name (`/proc/PID/task/TID/comm`), when readable.
    pub name: Option<String>,
    /// All general registers and rip.
    pub context: X64Context,
    /// `orig_rax`: the system call number when the thread was stopped inside a system call
    /// (its rax then holds the call's interim result, such as `-ERESTARTSYS`), else -1.
    pub orig_rax: u64,
    /// The flags register.
    pub eflags: u64,
    /// The fs segment base: the thread's TLS block on x86-64 Linux.
    pub fs_base: u64,
    /// The gs segment base.
    pub gs_base: u64,
    /// The top of the thread's stack.
    pub stack: StackCopy,
    /// Start and end of the mapping that held rsp (`None` when rsp was in no mapping).
    pub stack_mapping: Option<(u64, u64)>,
    /// How long the thread was held: from asking it to stop (`PTRACE_INTERRUPT`) to its
    /// detach returning. An upper bound: it includes the time the thread took to reach the
    /// stop, during which it still ran (or stayed blocked).
    pub stopped_for: Duration,
    /// The part of `stopped_for` after the stop was reported to us: registers, the stack
    /// copy and the detach.
    pub held_for: Duration,
    /// A signal that arrived for the thread while it was being stopped: the kernel reported
    /// it to us instead, and it was handed back to the thread as it resumed.
    pub redelivered_signal: Option<i32>,
}

impl ThreadSnapshot {
    /// The stack copy over the target, for unwinding.
    pub fn stack_memory<'a>(&'a self, target: &'a Target) -> StackOverTarget<'a> {
        StackOverTarget {
            copy: &self.stack,
            target,
        }
    }

    /// The system call the thread was stopped in, if any (`orig_rax` when not -1).
    pub fn syscall(&self) -> Option<u64> {
        (self.orig_rax as i64 >= 0).then_some(self.orig_rax)
    }
}

impl From<&ThreadSnapshot> for crate::memory::ThreadInfo {
    /// The thread as the target layer lists threads: id, ip, sp and every register.
    fn from(t: &ThreadSnapshot) -> Self {
        crate::memory::ThreadInfo {
            tid: t.tid,
            ip: Some(t.context.rip),
            sp: Some(t.context.rsp()),
            context: Some(t.context.into()),
        }
    }
}

/// A thread that was listed but could not be snapshotted, and why (it is not an error: a
/// thread may exit at any time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedThread {
    /// Kernel thread id.
    pub tid: i32,
    /// Why: "exited before it could be stopped", "zombie", ...
    pub reason: String,
}

/// The threads of a process, each copied while it alone was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSnapshot {
    /// The process id.
    pub pid: i32,
    /// Threads snapshotted, by increasing tid.
    pub threads: Vec<ThreadSnapshot>,
    /// Threads listed at the start that were gone (or could not be stopped) when their turn
    /// came. Threads created during the snapshot are not in either list.
    pub skipped: Vec<SkippedThread>,
    /// Wall time of the whole snapshot.
    pub elapsed: Duration,
}

impl ProcessSnapshot {
    /// The snapshot of thread `tid`, if it was taken.
    pub fn thread(&self, tid: i32) -> Option<&ThreadSnapshot> {
        self.threads.iter().find(|t| t.tid == tid)
    }
}

/// Why a snapshot failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// No process with this pid.
    #[error("no process with pid {pid}")]
    NoSuchProcess {
        /// Process id.
        pid: i32,
    },

    /// The thread is not (or no longer) a thread of the process.
    #[error("thread {tid} is not a live thread of process {pid} (it exited, or never existed)")]
    NoSuchThread {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
    },

    /// The process exited during the snapshot; the threads copied before are kept.
    #[error("process {pid} exited during the snapshot ({} thread(s) had been copied)", partial.len())]
    ProcessExited {
        /// Process id.
        pid: i32,
        /// Threads snapshot before it exited.
        partial: Vec<ThreadSnapshot>,
    },

    /// Another tracer (a debugger, strace, or the caller itself) already traces the thread;
    /// a thread has at most one tracer. Another process's hold was waited for
    /// ([`TRACER_WAIT`]) first.
    #[error(
        "thread {tid} of process {pid} is already traced by {}: detach that tracer first, or use the non-blocking mode (peek_threads)",
        if *tracer_is_us { format!("this process (pid {tracer}), cdac's caller") } else { format!("process {tracer}") }
    )]
    AlreadyTraced {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
        /// Pid of the tracer.
        tracer: i32,
        /// True when the tracer is this process.
        tracer_is_us: bool,
    },

    /// The kernel refused to let us trace the thread.
    #[error("permission denied stopping thread {tid} of process {pid}: {hint}")]
    PermissionDenied {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
        /// What may help (for example the ptrace scope).
        hint: String,
    },

    /// A ptrace or wait call failed for another reason.
    #[error("{op} on thread {tid} of process {pid} failed: {source}")]
    Ptrace {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
        /// The ptrace request.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// `/proc` data of the process could not be read or parsed.
    #[error("cannot read /proc data of process {pid}: {detail}")]
    Proc {
        /// Process id.
        pid: i32,
        /// What is wrong.
        detail: String,
    },

    /// The process is cdac's own: the kernel lets no thread trace a thread of its own
    /// process.
    #[error("process {pid} is this process: its threads cannot be stopped from inside it (use peek_threads, or a separate process)")]
    OwnProcess {
        /// Process id.
        pid: i32,
    },

    /// Register snapshots are implemented for x86-64 only.
    #[error("thread register snapshots need cdac built for x86-64")]
    Unsupported,
}

/// Snapshots every thread of process `pid`, one at a time.
pub fn snapshot_threads(
    pid: i32,
    options: &SnapshotOptions,
) -> Result<ProcessSnapshot, SnapshotError> {
    let start = Instant::now();
    check_not_own(pid)?;
    let tids = list_threads(pid)?;
    let maps = read_maps(pid)?;
    let mut threads = Vec::with_capacity(tids.len());
    let mut skipped = Vec::new();
    for tid in tids {
        match snapshot_one(pid, tid, options, &maps) {
            Ok(Outcome::Taken(t)) => threads.push(*t),
            Ok(Outcome::Gone(reason)) => {
                if process_gone(pid) {
                    return Err(SnapshotError::ProcessExited {
                        pid,
                        partial: threads,
                    });
                }
                skipped.push(SkippedThread { tid, reason });
            }
            Err(SnapshotError::NoSuchProcess { .. }) => {
                return Err(SnapshotError::ProcessExited {
                    pid,
                    partial: threads,
                })
            }
            Err(e) => return Err(e),
        }
    }
    Ok(ProcessSnapshot {
        pid,
        threads,
        skipped,
        elapsed: start.elapsed(),
    })
}

/// Snapshots thread `tid` of process `pid`.
pub fn snapshot_thread(
    pid: i32,
    tid: i32,
    options: &SnapshotOptions,
) -> Result<ThreadSnapshot, SnapshotError> {
    if process_gone(pid) {
        return Err(SnapshotError::NoSuchProcess { pid });
    }
    check_not_own(pid)?;
    let maps = read_maps(pid)?;
    match snapshot_one(pid, tid, options, &maps)? {
        Outcome::Taken(t) => Ok(*t),
        Outcome::Gone(_) if process_gone(pid) => Err(SnapshotError::ProcessExited {
            pid,
            partial: Vec::new(),
        }),
        Outcome::Gone(_) => Err(SnapshotError::NoSuchThread { pid, tid }),
    }
}

/// Refuses cdac's own process (its thread group), which ptrace cannot stop.
fn check_not_own(pid: i32) -> Result<(), SnapshotError> {
    let own = std::process::id() as i32;
    let tgid = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))?
                .trim()
                .parse::<i32>()
                .ok()
        });
    if pid == own || tgid == Some(own) {
        return Err(SnapshotError::OwnProcess { pid });
    }
    Ok(())
}

enum Outcome {
    Taken(Box<ThreadSnapshot>),
    Gone(String),
}

/// A readable mapping of the target: start, end.
type Mapping = (u64, u64);

/// Why ptrace access was refused: the diagnosis of [`permission_hint`], and what stopping a
/// thread takes.
fn ptrace_hint(pid: i32) -> String {
    let yama = if std::path::Path::new("/proc/sys/kernel/yama/ptrace_scope").exists() {
        "the same uid with kernel.yama.ptrace_scope 0 (1 allows only the tracer's descendants)"
    } else {
        "the same uid (this kernel has no Yama, so kernel.yama.ptrace_scope does not apply)"
    };
    format!(
        "{}; stopping a thread takes ptrace-attach access: CAP_SYS_PTRACE, or {yama}; \
         the non-blocking mode (peek_threads) needs the same access to /proc/PID/task/TID/syscall",
        permission_hint(pid)
    )
}

/// The thread ids of `pid`, sorted.
/// The ids of the threads of `pid`, sorted.
pub fn list_threads(pid: i32) -> Result<Vec<i32>, SnapshotError> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| {
        if process_gone(pid) {
            SnapshotError::NoSuchProcess { pid }
        } else {
            SnapshotError::Proc {
                pid,
                detail: format!("listing /proc/{pid}/task: {e}"),
            }
        }
    })?;
    let mut tids: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// The mappings of `pid`, sorted by start.
fn read_maps(pid: i32) -> Result<Vec<Mapping>, SnapshotError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| {
        if process_gone(pid) {
            SnapshotError::NoSuchProcess { pid }
        } else if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) {
            SnapshotError::PermissionDenied {
                pid,
                tid: pid,
                hint: ptrace_hint(pid),
            }
        } else {
            SnapshotError::Proc {
                pid,
                detail: format!("reading /proc/{pid}/maps: {e}"),
            }
        }
    })?;
    let mut maps: Vec<Mapping> = text
        .lines()
        .filter_map(|line| {
            let (range, _) = line.split_once(' ')?;
            let (start, end) = range.split_once('-')?;
            Some((
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
            ))
        })
        .collect();
    maps.sort_unstable();
    Ok(maps)
}

fn mapping_at(maps: &[Mapping], addr: u64) -> Option<Mapping> {
    let i = maps.partition_point(|m| m.0 <= addr);
    let m = *maps.get(i.checked_sub(1)?)?;
    (addr < m.1).then_some(m)
}

/// The thread's name and state letter, from /proc.
fn thread_name(pid: i32, tid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

/// Fields of `/proc/PID/task/TID/stat` from the state on (field 3 of proc(5) is index 0).
pub fn stat_fields(pid: i32, tid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

pub(super) fn thread_state(pid: i32, tid: i32) -> Option<char> {
    stat_fields(pid, tid)?.first()?.chars().next()
}

/// Whether a thread is gone or on its way out: no stat, a zombie or dead state, or the
/// kernel's PF_EXITING flag (an exiting task has already dropped its memory, so ptrace
/// refuses it with EPERM, which is not a privilege problem).
fn exiting(pid: i32, tid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Some(fields) = stat_fields(pid, tid) else {
        return true;
    };
    let state = fields.first().and_then(|s| s.chars().next());
    let flags = fields
        .get(6)
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0);
    matches!(state, Some('Z' | 'X')) || flags & PF_EXITING != 0
}

/// `TracerPid` of a thread.
fn tracer_of(pid: i32, tid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
        .ok()
}

/// A seized thread: detached when dropped, whatever happened in between.
pub(super) struct Seized {
    tid: i32,
    /// Known to be in a ptrace stop (detach is then possible).
    stopped: bool,
    /// Known to have exited (nothing to detach).
    exited: bool,
    /// Signal to hand back on detach.
    signal: i32,
}

impl Seized {
    pub(super) fn detach(&mut self) -> io::Result<()> {
        if self.exited {
            return Ok(());
        }
        if !self.stopped {
            // A seized thread can only be detached once stopped; the interrupt is pending,
            // so it stops promptly.
            match sys::wait_thread(self.tid, STOP_WAIT) {
                Ok(Some(status)) if libc::WIFSTOPPED(status) => self.stopped = true,
                Ok(None) => {
                    // Still running: it cannot be detached; our exit will detach it.
                    self.exited = true;
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("thread {} did not stop to be detached", self.tid),
                    ));
                }
                _ => {
                    self.exited = true;
                    return Ok(());
                }
            }
        }
        let r = sys::ptrace_detach(self.tid, self.signal);
        self.exited = true;
        match r {
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            other => other,
        }
    }
}

impl Drop for Seized {
    fn drop(&mut self) {
        if !self.exited {
            if let Err(e) = self.detach() {
                tracing::warn!(tid = self.tid, error = %e, "detaching from a thread failed");
            }
        }
    }
}

/// A thread [`stop_thread`] was asked to stop.
pub(super) enum Stop {
    /// Stopped and held (until `seized` is detached or dropped): when it was asked to stop,
    /// and when it did.
    Held {
        seized: Seized,
        asked: Instant,
        stopped: Instant,
    },
    /// It went away first, and how.
    Gone(String),
}

/// Seizes thread `tid` of `pid` and waits until it is stopped (at most [`STOP_WAIT`]);
/// another tracer's hold is waited for a little ([`TRACER_WAIT`]).
pub(super) fn stop_thread(pid: i32, tid: i32) -> Result<Stop, SnapshotError> {
    let ptrace_err = |op: &'static str, source: io::Error| SnapshotError::Ptrace {
        pid,
        tid,
        op,
        source,
    };
    let mut waited = Duration::ZERO;
    while let Err(e) = sys::ptrace_seize(tid) {
        return match e.raw_os_error() {
            Some(libc::ESRCH) => Ok(Stop::Gone("exited before it could be stopped".into())),
            Some(libc::EPERM) | Some(libc::EACCES) => match tracer_of(pid, tid) {
                Some(tracer) if tracer != 0 => {
                    let tracer_is_us = tracer as u32 == std::process::id();
                    // Another tool's hold is often brief (a dump writer, a second cdac):
                    // wait for it a little before giving up.
                    if !tracer_is_us && waited < TRACER_WAIT {
                        std::thread::sleep(TRACER_POLL);
                        waited += TRACER_POLL;
                        continue;
                    }
                    Err(SnapshotError::AlreadyTraced {
                        pid,
                        tid,
                        tracer,
                        tracer_is_us,
                    })
                }
                _ if exiting(pid, tid) => {
                    Ok(Stop::Gone("exited before it could be stopped".into()))
                }
                _ => Err(SnapshotError::PermissionDenied {
                    pid,
                    tid,
                    hint: ptrace_hint(pid),
                }),
            },
            _ => Err(ptrace_err("PTRACE_SEIZE", e)),
        };
    }
    let mut seized = Seized {
        tid,
        stopped: false,
        exited: false,
        signal: 0,
    };
    let t0 = Instant::now();
    if let Err(e) = sys::ptrace_interrupt(tid) {
        return match e.raw_os_error() {
            Some(libc::ESRCH) => {
                // Exiting: reap its exit report so that it does not linger.
                let _ = sys::wait_thread(tid, REAP_WAIT);
                seized.exited = true;
                Ok(Stop::Gone("exited while being stopped".into()))
            }
            _ => Err(ptrace_err("PTRACE_INTERRUPT", e)),
        };
    }
    let status = match sys::wait_thread(tid, STOP_WAIT) {
        Ok(Some(s)) => s,
        // No report: a thread of a process that died under us (its group leader can stay
        // unreported while it is a zombie), or one that will not stop.
        Ok(None) if exiting(pid, tid) => {
            seized.exited = true;
            return Ok(Stop::Gone("exited while being stopped".into()));
        }
        Ok(None) => {
            let e = io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the thread did not stop within {} s", STOP_WAIT.as_secs()),
            );
            return Err(ptrace_err("waitpid", e));
        }
        Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
            seized.exited = true;
            return Ok(Stop::Gone("exited while being stopped".into()));
        }
        Err(e) => return Err(ptrace_err("waitpid", e)),
    };
    if !libc::WIFSTOPPED(status) {
        seized.exited = true;
        return Ok(Stop::Gone("exited while being stopped".into()));
    }
    seized.stopped = true;
    let stopped = Instant::now();
    // A PTRACE_EVENT_STOP (ours, or a group-stop) carries the event in bits 16..; a plain
    // signal-delivery stop reports a signal meant for the thread: give it back on detach.
    if status >> 16 != libc::PTRACE_EVENT_STOP {
        seized.signal = libc::WSTOPSIG(status);
    }
    Ok(Stop::Held {
        seized,
        asked: t0,
        stopped,
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn snapshot_one(
    _pid: i32,
    _tid: i32,
    _options: &SnapshotOptions,
    _maps: &[Mapping],
) -> Result<Outcome, SnapshotError> {
    Err(SnapshotError::Unsupported)
}

#[cfg(target_arch = "x86_64")]
fn snapshot_one(
    pid: i32,
    tid: i32,
    options: &SnapshotOptions,
    maps: &[Mapping],
) -> Result<Outcome, SnapshotError> {
    let ptrace_err = |op: &'static str, source: io::Error| SnapshotError::Ptrace {
        pid,
        tid,
        op,
        source,
    };
    // Everything that needs no stop comes first.
    match thread_state(pid, tid) {
        None => return Ok(Outcome::Gone("exited before its turn".into())),
        // A zombie thread (an exited main thread whose process lives on) never stops.
        Some(s @ ('Z' | 'X')) => return Ok(Outcome::Gone(format!("in state {s} (exited)"))),
        Some(_) => {}
    }
    let name = thread_name(pid, tid);
    // A thread `--freeze` holds is already stopped, by us: read it, leave it held.
    if super::freeze::holds(pid, tid) {
        let regs = sys::ptrace_getregs(tid).map_err(|e| ptrace_err("PTRACE_GETREGS", e))?;
        let rsp = regs.rsp;
        let mapping = mapping_at(maps, rsp);
        return Ok(Outcome::Taken(Box::new(ThreadSnapshot {
            tid,
            name,
            context: context_of(&regs),
            orig_rax: regs.orig_rax,
            eflags: regs.eflags,
            fs_base: regs.fs_base,
            gs_base: regs.gs_base,
            stack: copy_stack(pid, rsp, mapping, options.max_stack_bytes),
            stack_mapping: mapping,
            stopped_for: Duration::ZERO,
            held_for: Duration::ZERO,
            redelivered_signal: None,
        })));
    }
    let (mut seized, t0, t_stopped) = match stop_thread(pid, tid)? {
        Stop::Held {
            seized,
            asked,
            stopped,
        } => (seized, asked, stopped),
        Stop::Gone(why) => return Ok(Outcome::Gone(why)),
    };
    let regs = match sys::ptrace_getregs(tid) {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
            // Killed while stopped (SIGKILL wakes even a stopped tracee).
            let _ = sys::wait_thread(tid, REAP_WAIT);
            seized.exited = true;
            return Ok(Outcome::Gone("killed while stopped".into()));
        }
        Err(e) => return Err(ptrace_err("PTRACE_GETREGS", e)),
    };
    let rsp = regs.rsp;
    let mapping = mapping_at(maps, rsp).or_else(|| {
        // A mapping made after the maps were read (a new thread's stack).
        read_maps(pid).ok().and_then(|m| mapping_at(&m, rsp))
    });
    let stack = copy_stack(pid, rsp, mapping, options.max_stack_bytes);
    let redelivered = (seized.signal != 0).then_some(seized.signal);
    let detached = seized.detach();
    let stopped_for = t0.elapsed();
    let held_for = t_stopped.elapsed();
    if let Err(e) = detached {
        return Err(ptrace_err("PTRACE_DETACH", e));
    }
    Ok(Outcome::Taken(Box::new(ThreadSnapshot {
        tid,
        name,
        context: context_of(&regs),
        orig_rax: regs.orig_rax,
        eflags: regs.eflags,
        fs_base: regs.fs_base,
        gs_base: regs.gs_base,
        stack,
        stack_mapping: mapping,
        stopped_for,
        held_for,
        redelivered_signal: redelivered,
    })))
}

/// Copies from the red zone below `rsp` up to `max` bytes, within the mapping. A copy that
/// the kernel cuts short (the mapping changed) keeps what was read.
fn copy_stack(pid: i32, rsp: u64, mapping: Option<Mapping>, max: usize) -> StackCopy {
    let Some((start, end)) = mapping else {
        return StackCopy {
            base: rsp,
            bytes: Vec::new(),
        };
    };
    let base = rsp.saturating_sub(RED_ZONE).max(start);
    let len = usize::try_from(end - base).unwrap_or(usize::MAX).min(max);
    let mut bytes = vec![0u8; len];
    let n = match sys::process_vm_read(pid, &mut [(base, &mut bytes[..])]) {
        Ok(n) => n,
        Err(e) => {
            tracing::debug!(pid, error = %e, "copying a stack failed");
            0
        }
    };
    bytes.truncate(n);
    StackCopy { base, bytes }
}

#[cfg(target_arch = "x86_64")]
fn context_of(r: &libc::user_regs_struct) -> X64Context {
    // Unwind-code order: rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8 ... r15.
    let values = [
        r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi, r.r8, r.r9, r.r10, r.r11, r.r12,
        r.r13, r.r14, r.r15,
    ];
    let mut context = X64Context {
        rip: r.rip,
        regs: [None; 16],
    };
    for (slot, v) in context.regs.iter_mut().zip(values) {
        *slot = Some(v);
    }
    context
}

// ---------------------------------------------------------------- the non-blocking mode

/// What `/proc/PID/task/TID/syscall` says a thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadActivity {
    /// Blocked in system call `nr`, with its six arguments; `sp` and `pc` are the user-mode
    /// stack pointer and the address after the `syscall` instruction.
    InSyscall {
        /// System call number.
        nr: u64,
        /// System call arguments.
        args: [u64; 6],
        /// Stack pointer.
        sp: u64,
        /// Program counter.
        pc: u64,
    },
    /// Off the CPU but not in a system call (a page fault, a stop): user-mode sp and pc.
    Blocked {
        /// Stack pointer.
        sp: u64,
        /// Program counter.
        pc: u64,
    },
    /// On a CPU (or about to be): the kernel gives no registers.
    Running,
}

/// A thread of a live process, seen without stopping it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPeek {
    /// Kernel thread id.
    pub tid: i32,
    /// The thread's name (`comm`), when readable.
    pub name: Option<String>,
    /// Its state letter (`R`, `S`, `D`, `t`, …) from `/proc/PID/task/TID/stat`.
    pub state: Option<char>,
    /// What `/proc/PID/task/TID/syscall` said.
    pub activity: ThreadActivity,
    /// `kstkesp` and `kstkeip` of the `stat` file when not zero. Kernels since 4.x report
    /// them only for a thread that is exiting or dumping core, so this is almost always
    /// `None`.
    pub stat_sp_pc: Option<(u64, u64)>,
}

impl ThreadPeek {
    /// Best-effort context: rip and rsp from the kernel, every other register unknown
    /// (rbp included). `None` for a running thread.
    pub fn context(&self) -> Option<X64Context> {
        let (sp, pc) = match self.activity {
            ThreadActivity::InSyscall { sp, pc, .. } | ThreadActivity::Blocked { sp, pc } => {
                (sp, pc)
            }
            ThreadActivity::Running => self.stat_sp_pc?,
        };
        let mut regs = [None; 16];
        regs[x64_reg::RSP] = Some(sp);
        Some(X64Context { rip: pc, regs })
    }

    /// The system call the thread is blocked in, if any.
    pub fn syscall(&self) -> Option<u64> {
        match self.activity {
            ThreadActivity::InSyscall { nr, .. } => Some(nr),
            _ => None,
        }
    }
}

/// Every thread of `pid`, seen without stopping anything.
pub fn peek_threads(pid: i32) -> Result<Vec<ThreadPeek>, SnapshotError> {
    let mut out = Vec::new();
    for tid in list_threads(pid)? {
        match peek_thread(pid, tid) {
            Ok(p) => out.push(p),
            Err(SnapshotError::NoSuchThread { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    if out.is_empty() && process_gone(pid) {
        return Err(SnapshotError::NoSuchProcess { pid });
    }
    Ok(out)
}

/// Thread `tid` of `pid`, seen without stopping it.
pub fn peek_thread(pid: i32, tid: i32) -> Result<ThreadPeek, SnapshotError> {
    let path = format!("/proc/{pid}/task/{tid}/syscall");
    let text = std::fs::read_to_string(&path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) if process_gone(pid) => {
            SnapshotError::NoSuchProcess { pid }
        }
        Some(libc::ENOENT) | Some(libc::ESRCH) => SnapshotError::NoSuchThread { pid, tid },
        Some(libc::EACCES) | Some(libc::EPERM) => SnapshotError::PermissionDenied {
            pid,
            tid,
            hint: ptrace_hint(pid),
        },
        _ => SnapshotError::Proc {
            pid,
            detail: format!("reading {path}: {e}"),
        },
    })?;
    let activity = parse_syscall_file(&text).ok_or_else(|| SnapshotError::Proc {
        pid,
        detail: format!("unexpected contents of {path}: {:?}", text.trim_end()),
    })?;
    let stat = stat_fields(pid, tid);
    let state = stat
        .as_ref()
        .and_then(|f| f.first())
        .and_then(|s| s.chars().next());
    // kstkesp and kstkeip are fields 29 and 30 of proc(5); index 0 here is field 3.
    let stat_sp_pc = stat.as_ref().and_then(|f| {
        let sp = f.get(26)?.parse::<u64>().ok()?;
        let pc = f.get(27)?.parse::<u64>().ok()?;
        (sp != 0 || pc != 0).then_some((sp, pc))
    });
    Ok(ThreadPeek {
        tid,
        name: thread_name(pid, tid),
        state,
        activity,
        stat_sp_pc,
    })
}

/// Parses `/proc/PID/task/TID/syscall`: `running`, `-1 SP PC`, or
/// `NR ARG1 … ARG6 SP PC` (the number in decimal, the rest in hex).
fn parse_syscall_file(text: &str) -> Option<ThreadActivity> {
    let text = text.trim();
    if text == "running" {
        return Some(ThreadActivity::Running);
    }
    let mut fields = text.split_whitespace();
    let nr: i64 = fields.next()?.parse().ok()?;
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let rest: Vec<u64> = fields.map(hex).collect::<Option<_>>()?;
    match (nr, rest.as_slice()) {
        (n, [sp, pc]) if n < 0 => Some(ThreadActivity::Blocked { sp: *sp, pc: *pc }),
        (n, [a0, a1, a2, a3, a4, a5, sp, pc]) if n >= 0 => Some(ThreadActivity::InSyscall {
            nr: n as u64,
            args: [*a0, *a1, *a2, *a3, *a4, *a5],
            sp: *sp,
            pc: *pc,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_file_forms() {
        assert_eq!(
            parse_syscall_file("running\n"),
            Some(ThreadActivity::Running)
        );
        assert_eq!(
            parse_syscall_file("-1 0x7ffc0 0x4010\n"),
            Some(ThreadActivity::Blocked {
                sp: 0x7ffc0,
                pc: 0x4010
            })
        );
        assert_eq!(
            parse_syscall_file("202 0x1 0x80 0x0 0x0 0x0 0x0 0x7f00 0x7e05\n"),
            Some(ThreadActivity::InSyscall {
                nr: 202,
                args: [1, 0x80, 0, 0, 0, 0],
                sp: 0x7f00,
                pc: 0x7e05
            })
        );
        assert_eq!(parse_syscall_file("202 0x1 0x2"), None);
        assert_eq!(parse_syscall_file("x"), None);
    }

    #[test]
    fn stack_copy_reads_inside_only() {
        let copy = StackCopy {
            base: 0x1000,
            bytes: (0u8..16).collect(),
        };
        assert_eq!(copy.read_u64(0x1000).ok(), Some(0x0706050403020100));
        assert_eq!(copy.read_u64(0x1008).ok(), Some(0x0f0e0d0c0b0a0908));
        assert!(copy.read_u64(0x1009).is_err());
        assert!(copy.read_u64(0xff8).is_err());
        assert!(copy.read_u64(u64::MAX - 3).is_err());
        assert!(copy.contains(0x1000, 16) && !copy.contains(0x1000, 17));
    }

    #[test]
    fn stack_over_target_falls_back() {
        let mut b = crate::memory::builder::MemoryBuilder::new(crate::memory::DataLayout::LE64);
        b.region(0x1000, 0x100).u64(0, 0xaaaa).u64(0x40, 0xbbbb);
        let target = b.into_target();
        // The copy holds another value at 0x1000: the value as it was when stopped wins.
        let copy = StackCopy {
            base: 0x1000,
            bytes: 0x1234u64.to_le_bytes().to_vec(),
        };
        let mem = StackOverTarget {
            copy: &copy,
            target: &target,
        };
        assert_eq!(mem.read_u64(0x1000).ok(), Some(0x1234));
        assert_eq!(mem.read_u64(0x1040).ok(), Some(0xbbbb));
        assert!(mem.read_u64(0x5000).is_err());
    }

    #[test]
    fn mapping_lookup() {
        let maps = [(0x1000, 0x2000), (0x3000, 0x5000)];
        assert_eq!(mapping_at(&maps, 0x1000), Some((0x1000, 0x2000)));
        assert_eq!(mapping_at(&maps, 0x1fff), Some((0x1000, 0x2000)));
        assert_eq!(mapping_at(&maps, 0x2000), None);
        assert_eq!(mapping_at(&maps, 0x4000), Some((0x3000, 0x5000)));
        assert_eq!(mapping_at(&maps, 0x10), None);
    }
}
