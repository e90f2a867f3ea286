//! The stacks of a target's threads: each OS thread's registers (a core's notes, a live
//! thread stopped for a moment, or the non-blocking `/proc` view), joined with the
//! runtime's Thread object (managed id, state, explicit Frames, exception in flight), and
//! walked frame by frame ([`walk`]).

pub mod roots;
pub mod walk;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use roots::{FrameNote, FrameRoots, StackRoot, StackRootError, StackRootScanner};
pub use walk::{logical_frames, FoundBy, FrameCode, Stack, StackEnd, StackFrame, StackWalker};

use crate::contracts::thread::{ExceptionInfo, ExplicitFrame, ThreadInfo, Threads};
use crate::contracts::ContractError;
use crate::memory::TargetKind;
use crate::names::MethodNamer;
use crate::process::thread_snapshot::{
    peek_threads, snapshot_thread, snapshot_threads, SnapshotError, SnapshotOptions,
};
use crate::runtime::Runtime;
use crate::unwind::{Arm64Context, X64Context};

/// How a live process's registers are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveRegisters {
    /// Stop each thread for a moment (ptrace), one at a time, copying its stack.
    Stop,
    /// Stop nothing: the kernel's `/proc/PID/task/TID/syscall` view (rip and rsp of a
    /// thread blocked in a system call; nothing for a running one). Best effort: the
    /// stack may change while it is read.
    NonBlocking,
}

/// Where a thread's registers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegisterSource {
    /// The core's `NT_PRSTATUS` note.
    Core,
    /// ptrace while the thread was stopped.
    Ptrace,
    /// `/proc/PID/task/TID/syscall`, without stopping (best effort).
    ProcSyscall,
    /// None for the thread: its walk starts at the runtime's innermost explicit Frame that
    /// records where managed code resumes (an active P/Invoke's InlinedCallFrame, a saved
    /// context), so the frames inside it are not known.
    ExplicitFrame,
}

impl RegisterSource {
    /// The name JSON uses (`core`, `ptrace`, `proc_syscall`).
    pub fn as_str(self) -> &'static str {
        match self {
            RegisterSource::Core => "core",
            RegisterSource::Ptrace => "ptrace",
            RegisterSource::ProcSyscall => "proc_syscall",
            RegisterSource::ExplicitFrame => "explicit_frame",
        }
    }
}

/// The runtime's view of a thread.
#[derive(Debug, Clone, Serialize)]
pub struct ManagedThread {
    /// The `Thread*`.
    pub address: u64,
    /// `Environment.CurrentManagedThreadId`.
    pub managed_id: u32,
    /// The id the runtime recorded, where it differs from the OS id: the thread's id in
    /// the target's own PID namespace.
    pub namespace_os_id: Option<u64>,
    /// The managed `Thread.Name` (from the thread's managed object), when it has one.
    pub name: Option<String>,
    /// The state word (`Thread::m_State`).
    pub state_bits: u32,
    /// The names of its state bits.
    pub state: Vec<&'static str>,
    /// Cooperative mode: the thread may be running managed code.
    pub preemptive_gc_disabled: bool,
    /// The runtime's finalizer thread.
    pub finalizer: bool,
    /// Its explicit Frames, innermost first.
    pub explicit_frames: Vec<ExplicitFrame>,
    /// The exception in flight (being dispatched, or last thrown).
    pub exception: Option<ExceptionInfo>,
    /// Why the exception in flight could not be read.
    pub exception_error: Option<String>,
}

/// One thread and its stack.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadStack {
    /// Kernel thread id.
    pub os_id: i32,
    /// The kernel's name of the thread (`comm`, at most 15 bytes; live only). The managed
    /// `Thread.Name` is [`ManagedThread::name`]; [`ThreadStack::display_name`] picks.
    pub name: Option<String>,
    /// What the runtime knows of it (`None` for a thread the runtime never saw).
    pub managed: Option<ManagedThread>,
    /// Where its registers came from (`None`: none could be read, e.g. a running thread
    /// in non-blocking mode).
    pub registers: Option<RegisterSource>,
    /// From asking the thread to stop to letting it go (ptrace only): includes the wait
    /// for a busy or descheduled thread to reach the stop.
    pub stopped_for: Option<Duration>,
    /// How long the thread was held stopped: from its stop to letting it go (ptrace only).
    pub held_for: Option<Duration>,
    /// Its stack, when registers were read.
    pub stack: Option<Stack>,
    /// Why there is no stack, or what is uncertain about it.
    pub note: Option<String>,
    /// The stack roots of its managed frames, when asked for ([`StacksOptions::gc_roots`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roots: Option<Vec<FrameRoots>>,
}

/// What [`thread_stacks_with`] reads besides the frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StacksOptions {
    /// Each managed frame's live GC slots and the references they hold (read from the
    /// stack while the thread is stopped, on a live process).
    pub gc_roots: bool,
}

impl Stacks {
    /// How long the threads were stopped, when a live snapshot stopped them.
    pub fn pauses(&self) -> Option<Pauses> {
        let snapshot = self.snapshot_time?;
        let worst = |f: fn(&ThreadStack) -> Option<Duration>| {
            self.threads
                .iter()
                .filter_map(f)
                .map(|d| d.as_secs_f64() * 1e6)
                .fold(0.0, f64::max)
        };
        Some(Pauses {
            threads: self.threads.iter().filter(|t| t.held_for.is_some()).count(),
            snapshot_us: snapshot.as_secs_f64() * 1e6,
            max_held_us: worst(|t| t.held_for),
            max_stopped_us: worst(|t| t.stopped_for),
        })
    }
}

impl ThreadStack {
    /// The name to show: the managed `Thread.Name` when set (whole), else the kernel's.
    pub fn display_name(&self) -> Option<&str> {
        self.managed
            .as_ref()
            .and_then(|m| m.name.as_deref())
            .or(self.name.as_deref())
    }
}

/// Why the stacks could not be read at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StacksError {
    /// The runtime's data could not be read.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// The live process's threads could not be stopped or read.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// How long reading a live process's stacks stopped its threads (one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pauses {
    /// Threads stopped.
    pub threads: usize,
    /// From the first stop to the last release, in microseconds.
    pub snapshot_us: f64,
    /// The longest any one thread was held stopped, in microseconds.
    pub max_held_us: f64,
    /// The longest from asking a thread to stop to releasing it, in microseconds.
    pub max_stopped_us: f64,
}

impl Pauses {
    /// "34 threads stopped one at a time: snapshot 12.3 ms, each held at most 180 µs".
    pub fn describe(&self) -> String {
        format!(
            "{} threads stopped one at a time: snapshot {:.1} ms, each held at most {:.0} µs \
             ({:.0} µs from interrupt to release)",
            self.threads,
            self.snapshot_us / 1e3,
            self.max_held_us,
            self.max_stopped_us
        )
    }
}

/// What [`thread_stacks`] returns: every thread, and the total snapshot time of a live
/// process.
#[derive(Debug, Clone, Serialize)]
pub struct Stacks {
    /// Threads, in kernel thread id order.
    pub threads: Vec<ThreadStack>,
    /// Wall time of the live snapshot (all threads), when one was taken.
    pub snapshot_time: Option<Duration>,
    /// Threads the runtime lists that were not read, and why (e.g. the runtime's thread
    /// list was cut short).
    pub warnings: Vec<String>,
    /// Which of the warnings mean the answer is not whole (the runtime's threads not read
    /// or cut short, threads without registers): a command that shows the stacks ends
    /// with a partial answer then.
    pub lost: Vec<String>,
}

/// The stacks of the threads of `rt`'s target whose kernel ids `filter` accepts (all with
/// `None`). `live` says how a live process's registers are read.
pub fn thread_stacks(
    rt: &Runtime,
    live: LiveRegisters,
    filter: Option<&dyn Fn(i32, Option<u32>) -> bool>,
) -> Result<Stacks, StacksError> {
    thread_stacks_with(rt, live, filter, StacksOptions::default())
}

/// This machine's architecture as the runtime spells it.
fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Whether the target is a live process of another architecture than this machine's (one
/// run by qemu-user), whose registers the kernel does not show.
fn emulated_live_process(rt: &Runtime) -> bool {
    matches!(rt.target().source().kind(), TargetKind::Live { .. })
        && rt.module().architecture != host_architecture()
}

/// [`thread_stacks`], with the stack roots of each managed frame when `options` asks.
/// On a live process in non-blocking mode the roots are best effort, as the stacks are.
pub fn thread_stacks_with(
    rt: &Runtime,
    live: LiveRegisters,
    filter: Option<&dyn Fn(i32, Option<u32>) -> bool>,
    options: StacksOptions,
) -> Result<Stacks, StacksError> {
    // An architecture the unwinder does not know: the threads are listed, with what the
    // runtime knows of them, and each says why it has no stack.
    let aot = if rt.is_native_aot() {
        Some(crate::nativeaot::NativeAot::new(rt)?)
    } else {
        None
    };
    let made = if aot.is_some() {
        StackWalker::native_only(rt)
    } else {
        StackWalker::new(rt)
    };
    let (walker, unwalkable) = match made {
        Ok(_) if emulated_live_process(rt) => (
            None,
            Some(format!(
                "a live {} process on this {} host runs under an emulator (qemu-user): the \
                 kernel shows the emulator's registers, not the guest's, so the stack cannot \
                 be walked live; read a core of it instead (qemu writes one on SIGQUIT)",
                rt.module().architecture,
                host_architecture()
            )),
        ),
        Ok(w) => (Some(w.with_registers(options.gc_roots)), None),
        Err(e @ ContractError::UnsupportedArchitecture { .. }) => (None, Some(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    let mut scanner = if options.gc_roots && walker.is_some() {
        Some(StackRootScanner::new(rt)?)
    } else {
        None
    };
    let mut warnings = Vec::new();
    let mut lost = Vec::new();
    let mut namer = MethodNamer::for_runtime(rt);
    // The runtime's threads, by OS id.
    let contract = match &aot {
        // NativeAOT's threads are read below.
        Some(_) => Err(ContractError::Missing { contract: "Thread" }),
        None => Threads::for_runtime(rt),
    };
    let mut managed: HashMap<i32, (ThreadInfo, Vec<ExplicitFrame>)> = HashMap::new();
    let mut finalizer = None;
    let aot_threads = match &aot {
        Some(a) => crate::nativeaot::stacks::managed_threads(a, &mut warnings),
        None => HashMap::new(),
    };
    match &contract {
        Err(_) if aot.is_some() => {}
        Ok(c) => match c.threads() {
            Ok(list) => {
                if let Some(e) = list.error {
                    lost.push(format!("the runtime's thread list was cut short: {e}"));
                }
                finalizer = list.store.finalizer_thread;
                for t in list.threads {
                    let frames = c.frames(&t).unwrap_or_default();
                    if let Ok(os) = i32::try_from(t.os_id) {
                        if os != 0 {
                            managed.insert(os, (t, frames));
                        }
                    }
                }
            }
            Err(e) => lost.push(format!("the runtime's threads could not be read: {e}")),
        },
        Err(e) => lost.push(format!("no Thread contract: {e}")),
    }
    let wanted = |os: i32| {
        filter.is_none_or(|f| {
            let id = managed
                .get(&os)
                .map(|(t, _)| t.managed_id)
                .or_else(|| aot_threads.get(&os).map(|t| t.managed_id));
            f(os, id)
        })
    };
    let managed_of = |os: i32, namer: &mut MethodNamer| {
        if let Some(t) = aot_threads.get(&os) {
            return Some(t.clone());
        }
        let (t, frames) = managed.get(&os)?;
        let (exception, exception_error) = match (&contract, t.exception()) {
            (Ok(c), Some(obj)) => match c.exception(obj, namer) {
                Ok(e) => (Some(e), None),
                Err(e) => (None, Some(format!("exception {obj:#x}: {e}"))),
            },
            _ => (None, None),
        };
        let name = match &contract {
            Ok(c) => c.thread_name(t).unwrap_or_else(|e| {
                tracing::debug!("thread {:#x}: no managed name: {e}", t.address);
                None
            }),
            Err(_) => None,
        };
        Some(ManagedThread {
            address: t.address,
            managed_id: t.managed_id,
            namespace_os_id: t.namespace_os_id,
            name,
            state_bits: t.state,
            state: t.state_names(),
            preemptive_gc_disabled: t.preemptive_gc_disabled,
            finalizer: finalizer == Some(t.address),
            explicit_frames: frames.clone(),
            exception,
            exception_error,
        })
    };
    let frames_of = |os: i32| -> &[ExplicitFrame] {
        managed.get(&os).map(|(_, f)| f.as_slice()).unwrap_or(&[])
    };
    let mut scan = |os: i32, stack: Option<&Stack>, mem: &dyn crate::memory::StackMemory| match (
        scanner.as_mut(),
        stack,
    ) {
        (Some(s), Some(st)) => Some(s.scan(os, st, mem, frames_of(os))),
        _ => None,
    };
    let target = rt.target();
    let mut threads = Vec::new();
    let mut snapshot_time = None;
    let (Some(walker), None) = (walker, unwalkable.as_ref()) else {
        let os_threads = target.source().threads().map_err(ContractError::from)?;
        for t in os_threads.into_iter().filter(|t| wanted(t.tid)) {
            threads.push(ThreadStack {
                os_id: t.tid,
                name: None,
                managed: managed_of(t.tid, &mut namer),
                registers: None,
                stopped_for: None,
                held_for: None,
                stack: None,
                note: unwalkable.clone(),
                roots: None,
            });
        }
        threads.sort_by_key(|t| t.os_id);
        warnings.extend(lost.iter().cloned());
        return Ok(Stacks {
            threads,
            snapshot_time,
            warnings,
            lost,
        });
    };
    match target.source().kind() {
        TargetKind::Live { pid } if live == LiveRegisters::Stop => {
            let options = SnapshotOptions::default();
            let snapshots = if filter.is_some() {
                // Only the threads asked for are stopped.
                let started = Instant::now();
                let mut taken = Vec::new();
                let tids = target.source().threads().map_err(ContractError::from)?;
                for tid in tids.iter().map(|t| t.tid).filter(|&tid| wanted(tid)) {
                    match snapshot_thread(pid, tid, &options) {
                        Ok(s) => taken.push(s),
                        Err(SnapshotError::NoSuchThread { .. }) => {
                            warnings.push(format!("thread {tid}: exited before its turn"))
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                snapshot_time = Some(started.elapsed());
                taken
            } else {
                let snapshot = snapshot_threads(pid, &options)?;
                snapshot_time = Some(snapshot.elapsed);
                for s in &snapshot.skipped {
                    warnings.push(format!("thread {}: {}", s.tid, s.reason));
                }
                snapshot.threads
            };
            for s in snapshots.iter().filter(|s| wanted(s.tid)) {
                let mem = s.stack_memory(target);
                let stack = walker.walk(s.context, &mem, frames_of(s.tid));
                let roots = scan(s.tid, Some(&stack), &mem);
                threads.push(ThreadStack {
                    os_id: s.tid,
                    name: s.name.clone(),
                    managed: managed_of(s.tid, &mut namer),
                    registers: Some(RegisterSource::Ptrace),
                    stopped_for: Some(s.stopped_for),
                    held_for: Some(s.held_for),
                    stack: Some(stack),
                    note: None,
                    roots,
                });
            }
        }
        TargetKind::Live { pid } => {
            for p in peek_threads(pid)?.into_iter().filter(|p| wanted(p.tid)) {
                let (stack, note) = match p.context() {
                    Some(ctx) => (
                        Some(walker.walk(ctx, target, frames_of(p.tid))),
                        Some("best effort: read without stopping the thread".to_string()),
                    ),
                    None => (
                        None,
                        Some("running: no registers without stopping it".to_string()),
                    ),
                };
                let roots = scan(p.tid, stack.as_ref(), target);
                threads.push(ThreadStack {
                    os_id: p.tid,
                    name: p.name.clone(),
                    managed: managed_of(p.tid, &mut namer),
                    registers: stack.as_ref().map(|_| RegisterSource::ProcSyscall),
                    stopped_for: None,
                    held_for: None,
                    stack,
                    note,
                    roots,
                });
            }
        }
        _ => {
            let os_threads = target.source().threads().map_err(ContractError::from)?;
            for t in os_threads.into_iter().filter(|t| wanted(t.tid)) {
                let start = t.context.or_else(|| {
                    let (ip, sp) = (t.ip?, t.sp?);
                    Some(match rt.module().architecture {
                        "arm64" => Arm64Context::new(ip, sp, None).into(),
                        _ => X64Context::new(ip, sp, None).into(),
                    })
                });
                let stack = start.map(|ctx| walker.walk(ctx, target, frames_of(t.tid)));
                let note = stack
                    .is_none()
                    .then(|| "the dump has no registers for this thread".to_string());
                let roots = scan(t.tid, stack.as_ref(), target);
                threads.push(ThreadStack {
                    os_id: t.tid,
                    name: None,
                    managed: managed_of(t.tid, &mut namer),
                    registers: stack.as_ref().map(|_| RegisterSource::Core),
                    stopped_for: None,
                    held_for: None,
                    stack,
                    note,
                    roots,
                });
            }
            // Runtime threads the dump records no registers for (its notes lost or
            // damaged): listed all the same, each walked from its explicit Frames.
            let mut missing: Vec<i32> = managed
                .keys()
                .copied()
                .filter(|os| wanted(*os) && !threads.iter().any(|t| t.os_id == *os))
                .collect();
            missing.sort_unstable();
            let mut from_frames = 0;
            for &os in &missing {
                let start = frame_start(frames_of(os), rt.module().architecture);
                let stack = start.map(|ctx| walker.walk(ctx, target, frames_of(os)));
                let note = match &stack {
                    Some(_) => {
                        from_frames += 1;
                        "the dump has no registers for this thread: its stack starts at the \
                         runtime's innermost explicit Frame that says where managed code \
                         resumes; frames inside it are not known"
                    }
                    None => {
                        "the dump has no registers for this thread, and the runtime recorded \
                         no explicit Frame to start its stack from"
                    }
                };
                let roots = scan(os, stack.as_ref(), target);
                threads.push(ThreadStack {
                    os_id: os,
                    name: None,
                    managed: managed_of(os, &mut namer),
                    registers: stack.as_ref().map(|_| RegisterSource::ExplicitFrame),
                    stopped_for: None,
                    held_for: None,
                    stack,
                    note: Some(note.to_string()),
                    roots,
                });
            }
            if !missing.is_empty() {
                lost.push(format!(
                    "the dump records no registers for {} of the runtime's threads (its \
                     notes are missing or damaged): {from_frames} of them walked from their \
                     explicit Frames, {} without a stack",
                    missing.len(),
                    missing.len() - from_frames
                ));
            }
        }
    }
    if let Some(a) = &aot {
        crate::nativeaot::stacks::mark_managed_frames(a, &mut threads, &mut warnings);
    }
    threads.sort_by_key(|t| t.os_id);
    warnings.extend(lost.iter().cloned());
    Ok(Stacks {
        threads,
        snapshot_time,
        warnings,
        lost,
    })
}

/// Registers to start a walk at for a thread the target has none for: its innermost
/// explicit Frame that records where managed code resumes (an active P/Invoke's
/// InlinedCallFrame: return address, call-site SP and frame pointer; a Frame holding a
/// saved context: that context's IP, SP and FP).
fn frame_start(frames: &[ExplicitFrame], architecture: &str) -> Option<crate::regs::Registers> {
    frames.iter().find_map(|f| {
        let ip = match f.context_ip {
            Some(ip) if ip != 0 => ip,
            _ if f.is_active_pinvoke() => f.return_address?,
            _ => return None,
        };
        let sp = f.caller_sp.filter(|&sp| sp != 0)?;
        Some(match architecture {
            "arm64" => Arm64Context::new(ip, sp, f.saved_fp).into(),
            _ => X64Context::new(ip, sp, f.saved_fp).into(),
        })
    })
}
