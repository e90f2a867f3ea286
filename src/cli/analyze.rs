//! `cdac analyze`: the crash summary of a dump, or the hang report of a process or a dump
//! of a running one (the 3 a.m. command): the runtime, the crashing thread and its signal,
//! the managed exception in flight on each thread, the crashing thread's stack, managed and
//! native, the locks threads wait for and every deadlock with its threads' stacks.

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{self, Addr, FrameKind, HeapReadsReport};
use super::stacks::{name_frames, render_frame, source_model, thread_model};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};

use cdac::async_chains::{read_async, AsyncOptions};
use cdac::contracts::thread::ExceptionInfo;
use cdac::contracts::ContractError;
use cdac::exception_report::ExceptionReport;
use cdac::heap::settled;
use cdac::locks::read_locks_from;
use cdac::memory::CrashSignal;
use cdac::names::MethodNamer;
use cdac::source_lines::SourceLines;
use cdac::stacks::{thread_stacks_with, LiveRegisters, StacksOptions, ThreadStack};
use cdac::symbols::ElfSymbols;
use cdac::thread_pool::read_thread_pool;

/// Arguments of `cdac analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The runtime a report is about.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RuntimeSummary {
    /// The runtime module's path.
    pub path: String,
    /// Its product version (`10.0.14`), `unknown` when unreadable.
    pub version: String,
    /// Where the data descriptor came from.
    pub descriptor: String,
}

/// The signal a dump records.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Signal {
    /// The thread it was delivered to.
    pub thread: i64,
    /// Its number.
    pub signo: i32,
    /// Its name (`SIGABRT`).
    pub name: Option<String>,
    /// `si_code`.
    pub code: i32,
    /// The faulting address of a fault raised by the CPU.
    pub fault_address: Option<Addr>,
    /// The process that sent it (`kill`, `abort`).
    pub sender_pid: Option<i32>,
}

/// An exception in flight on a thread.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ThreadException {
    /// The thread's OS id.
    pub thread: i64,
    /// Its managed id.
    pub managed_id: Option<u32>,
    /// The exception, its stack trace resolved.
    pub exception: model::Exception,
}

/// What `cdac analyze --json` prints.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AnalyzeReport {
    /// The runtime.
    pub runtime: RuntimeSummary,
    /// The signal the dump records; `null` for a dump of a running process.
    pub signal: Option<Signal>,
    /// How many threads the target has (OS threads).
    pub threads: usize,
    /// How many of them are the runtime's (managed) threads.
    pub managed_threads: usize,
    /// Every managed exception in flight, by thread.
    pub exceptions: Vec<ThreadException>,
    /// The thread the signal was delivered to, with its stack.
    pub crashing_thread: Option<model::Thread>,
    /// Every lock held or waited for, and the deadlocks (as `cdac locks` reports them);
    /// `null` when they could not be read.
    pub locks: Option<super::locks::LocksReport>,
    /// Async work in flight (as `cdac async` reports it; a heap that cannot be walked is
    /// one of its `problems`).
    pub async_work: Option<super::async_chains::AsyncJson>,
    /// The thread pool: workers, limits and queued work (as `cdac threadpool` reports it;
    /// a heap that cannot be walked is one of its `problems`).
    pub thread_pool: Option<super::threadpool::ThreadPoolJson>,
    /// How a live heap was read for the three parts above (absent on a dump).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_reads: Option<HeapReadsReport>,
    /// NativeAOT: the report the runtime wrote before it failed fast (reason, thread,
    /// message, the exception with its type and the runtime's own frame names).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub runtime_crash_report: Option<cdac::nativeaot::CrashInfo>,
}

/// The JSON of an exception with the resolved stack traces of it and its inner ones.
fn report_model(report: &ExceptionReport, e: &ExceptionInfo) -> model::Exception {
    let mut m = super::threads::exception(e);
    m.inner = e
        .inner
        .as_deref()
        .map(|i| Box::new(report_model(report, i)));
    match report.trace(e.address) {
        Some(Ok(frames)) => {
            m.stack_trace = Some(
                frames
                    .iter()
                    .enumerate()
                    .map(|(index, f)| model::Frame {
                        index,
                        ip: Addr(f.ip),
                        sp: None,
                        kind: FrameKind::Managed,
                        name: f.name.clone(),
                        module: None,
                        found_by: None,
                        method_desc: Some(Addr(f.method_desc)),
                        method_start: None,
                        offset: None,
                        jit_type: None,
                        il_offset: f.il_offset,
                        source: f.source.as_ref().map(source_model),
                        funclet: None,
                        parent_frame: None,
                        previous_location_ends: f.previous_location_ends,
                        gc: None,
                    })
                    .collect(),
            )
        }
        Some(Err(err)) => m.stack_trace_error = Some(err.clone()),
        None => {}
    }
    m
}

fn signal_text(c: &CrashSignal) -> String {
    let mut s = format!(
        "{} ({}) on thread {}",
        c.name().unwrap_or("signal"),
        c.signo,
        c.tid
    );
    if let Some(addr) = c.fault_addr {
        s.push_str(&format!(", fault address {}", hex(addr)));
    }
    if let Some(pid) = c.sender_pid {
        s.push_str(&format!(", sent by pid {pid}"));
    }
    s
}

/// Runs `cdac analyze`.
pub fn run_analyze(args: &AnalyzeArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let crash = rt.target().crash_signal();
    let stacks = thread_stacks_with(
        &rt,
        LiveRegisters::Stop,
        None,
        StacksOptions {
            gc_roots: !rt.is_native_aot(),
        },
    )?;
    for w in &stacks.warnings {
        status!("cdac: warning: {w}");
    }
    // The crashing thread: the one the signal was delivered to.
    let crash_index = crash
        .as_ref()
        .and_then(|c| stacks.threads.iter().position(|t| t.os_id == c.tid));
    let mut namer = MethodNamer::for_runtime(&rt);
    let symbols = ElfSymbols::new(rt.target());
    let named = name_frames(&stacks.threads, &mut namer, &symbols);
    let with_exceptions: Vec<(&ThreadStack, &ExceptionInfo)> = stacks
        .threads
        .iter()
        .filter_map(|t| Some((t, t.managed.as_ref()?.exception.as_ref()?)))
        .collect();
    let source_lines = SourceLines::for_target(rt.target());
    let aot = if rt.is_native_aot() {
        Some(cdac::nativeaot::NativeAot::new(&rt)?)
    } else {
        None
    };
    let reports: Vec<ExceptionReport> = with_exceptions
        .iter()
        .map(|(_, e)| match &aot {
            Some(a) => aot_exception_report(a, e),
            None => ExceptionReport::new(&rt, e, &mut namer, &source_lines),
        })
        .collect();
    // NativeAOT's own crash report: why it failed fast.
    let crash_report = match aot
        .as_ref()
        .map(|a| cdac::nativeaot::CrashInfo::read(a.runtime()))
    {
        Some(Ok(report)) => report,
        Some(Err(e)) => {
            status!("cdac: warning: the runtime's crash report: {e}");
            None
        }
        None => None,
    };
    let version = rt
        .version()
        .map(|v| v.product_version.clone())
        .unwrap_or_else(|| "unknown".into());
    let unreadable = stacks
        .threads
        .iter()
        .filter(|t| {
            t.managed
                .as_ref()
                .is_some_and(|m| m.exception_error.is_some())
        })
        .count()
        + reports
            .iter()
            .flat_map(|r| r.traces.values())
            .filter(|t| t.is_err())
            .count();
    // The heap's parts (locks, async work, the thread pool) in one settled read: on a live
    // process, read again while garbage collections run under them.
    // NativeAOT's heap types are not described: locks, async work and the thread pool are
    // read from CoreCLR runtimes only.
    let heap_parts = settled(
        &rt,
        || -> Result<_, ContractError> {
            if rt.is_native_aot() {
                return Ok((Err(not_for_native_aot()), None, None));
            }
            let mut namer = MethodNamer::for_runtime(&rt);
            let locks = read_locks_from(&rt, true, Some(&stacks))
                .map(|report| super::locks::build(&report, &mut namer));
            // As with the locks, a heap that cannot be walked is a problem of this part only.
            let async_work = match read_async(&rt, AsyncOptions::default()) {
                Ok(report) => super::async_chains::build(&report),
                Err(e) => super::async_chains::AsyncJson {
                    chains: Vec::new(),
                    tasks_found: 0,
                    objects_scanned: 0,
                    problems: vec![format!("heap walk: {e}")],
                    threads: None,
                    reads: None,
                    threads_stopped: None,
                },
            };
            let thread_pool = match read_thread_pool(&rt) {
                Ok(report) => super::threadpool::build(&report),
                Err(e) => super::threadpool::ThreadPoolJson {
                    workers: None,
                    global: Vec::new(),
                    local: Vec::new(),
                    by_method: Vec::new(),
                    objects_scanned: 0,
                    problems: vec![format!("heap walk: {e}")],
                    reads: None,
                },
            };
            Ok((locks, Some(async_work), Some(thread_pool)))
        },
        |(locks, async_work, thread_pool)| {
            rt.is_native_aot()
                || locks.as_ref().is_ok_and(|l| l.problems.is_empty())
                    && async_work.as_ref().is_some_and(|a| a.problems.is_empty())
                    && thread_pool.as_ref().is_some_and(|t| t.problems.is_empty())
        },
    )?;
    let reads = HeapReadsReport::of(&rt, &heap_parts);
    HeapReadsReport::tell(&reads);
    let (locks, async_work, thread_pool) = heap_parts.value;
    // A contract this runtime has in a version cdac does not read (or not at all) is a gap
    // the report states, not a partial answer; anything else that stops a part is.
    let gap = |e: Option<cdac::contracts::ContractError>| {
        matches!(
            e,
            Some(
                cdac::contracts::ContractError::UnsupportedVersion { .. }
                    | cdac::contracts::ContractError::Missing { .. }
                    | cdac::contracts::ContractError::Descriptor(_)
            )
        )
    };
    let gc_gap = gap(rt.contracts().gc().err());
    let sync_gap = gap(rt.contracts().sync_blocks().err());
    let mut lost = stacks.lost.clone();
    let locks = match locks {
        Ok(l) => Some(l),
        Err(_) if rt.is_native_aot() => None,
        Err(e) => {
            status!("cdac: warning: the locks could not be read: {e}");
            if !gc_gap && !sync_gap {
                lost.push(format!("the locks could not be read: {e}"));
            }
            None
        }
    };
    if unreadable != 0 {
        lost.push(format!(
            "{unreadable} exception(s) or stack trace(s) could not be read"
        ));
    }
    // Parts this runtime cannot describe (a GC or SyncBlock contract of a version cdac
    // does not read, a descriptor without the types) are said in the report and are not
    // a partial answer; problems reading what it does describe are.
    let counted = |problems: &[String]| {
        if gc_gap {
            return 0;
        }
        problems
            .iter()
            .filter(|p| !sync_gap || !p.starts_with("sync "))
            .count()
    };
    let parts_with_problems = [
        ("locks", locks.as_ref().map_or(0, |l| counted(&l.problems))),
        (
            "async work",
            async_work.as_ref().map_or(0, |a| counted(&a.problems)),
        ),
        (
            "thread pool",
            thread_pool.as_ref().map_or(0, |t| counted(&t.problems)),
        ),
    ];
    for (part, n) in parts_with_problems {
        if n > 0 {
            lost.push(format!("{part}: {n} problem(s), listed in the report"));
        }
    }
    let outcome = if lost.is_empty() {
        Outcome::Answered
    } else {
        Outcome::Partial(lost.join("; "))
    };
    let managed_threads = stacks
        .threads
        .iter()
        .filter(|t| t.managed.is_some())
        .count();
    if args.json {
        let report = AnalyzeReport {
            runtime: RuntimeSummary {
                path: rt.module().path.display().to_string(),
                version,
                descriptor: rt.descriptor_source().name(),
            },
            signal: crash.as_ref().map(|c| Signal {
                thread: i64::from(c.tid),
                signo: c.signo,
                name: c.name().map(str::to_string),
                code: c.code,
                fault_address: c.fault_addr.map(Addr),
                sender_pid: c.sender_pid,
            }),
            threads: stacks.threads.len(),
            managed_threads,
            exceptions: with_exceptions
                .iter()
                .zip(&reports)
                .map(|((t, e), r)| ThreadException {
                    thread: i64::from(t.os_id),
                    managed_id: t.managed.as_ref().map(|m| m.managed_id),
                    exception: report_model(r, e),
                })
                .collect(),
            crashing_thread: crash_index.map(|i| thread_model(&stacks.threads[i], &named[i])),
            locks,
            async_work,
            thread_pool,
            heap_reads: reads,
            runtime_crash_report: crash_report,
        };
        super::emit_json(&report)?;
        return Ok(outcome);
    }
    let runtime = format!(
        "{} {} ({}), descriptor: {} {}",
        rt.module().path.display(),
        version,
        rt.descriptor().global_string("Architecture").unwrap_or("?"),
        rt.descriptor_source().kind(),
        rt.descriptor_source().name()
    );
    let mut text = format!("Runtime: {runtime}\n");
    match &crash {
        Some(c) => text.push_str(&format!("Signal: {}\n", signal_text(c))),
        None => text.push_str("Signal: none recorded (a dump of a running process)\n"),
    }
    text.push_str(&format!(
        "Threads: {} (OS threads), {} of them the runtime's (managed)\n",
        stacks.threads.len(),
        managed_threads
    ));
    if let Some(c) = &crash_report {
        text.push_str(&format!(
            "Runtime's crash report: {} on thread {}{}\n",
            cdac::nativeaot::crash_info::reason_name(c.reason as u32),
            c.thread,
            c.message
                .as_deref()
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    if with_exceptions.is_empty() {
        text.push_str("Exceptions in flight: none\n");
    }
    for ((t, _), report) in with_exceptions.iter().zip(&reports) {
        let mark = if crash.as_ref().is_some_and(|c| c.tid == t.os_id) {
            " (crashing thread)"
        } else {
            ""
        };
        text.push_str(&format!(
            "Exception on thread {}{}{}{mark}:\n",
            t.os_id,
            t.display_name()
                .map(|n| format!(" \"{n}\""))
                .unwrap_or_default(),
            t.managed
                .as_ref()
                .map(|m| format!(" (managed id {})", m.managed_id))
                .unwrap_or_default()
        ));
        text.push_str(&report.text(2));
    }
    if let Some(i) = crash_index {
        let t = &stacks.threads[i];
        text.push_str(&format!(
            "\nCrashing thread {}{}:\n",
            t.os_id,
            t.display_name()
                .map(|n| format!(" \"{n}\""))
                .unwrap_or_default()
        ));
        for (index, n) in named[i].iter().enumerate() {
            text.push_str(&render_frame(index, n));
            text.push('\n');
        }
    }
    if let Some(l) = &locks {
        text.push_str(&locks_text(l, &stacks.threads, &named));
    }
    if let Some(a) = &async_work {
        text.push_str(&async_text(a));
    }
    if let Some(p) = &thread_pool {
        text.push('\n');
        text.push_str(&super::threadpool::summary_text(p));
        for c in p.by_method.iter().take(MAX_ASYNC_CHAINS_SHOWN) {
            text.push_str(&format!(
                "  {:>5} queued {:<5} {}\n",
                c.count, c.kind, c.name
            ));
        }
        text.push_str(&not_read_lines(&p.problems));
    }
    if aot.is_some() {
        text.push_str(
            "\nLocks, async work and the thread pool: not read (NativeAOT runtimes do not \
             describe the managed types they live in)\n",
        );
    }
    super::emit(&text)?;
    Ok(outcome)
}

fn not_for_native_aot() -> ContractError {
    ContractError::WrongFlavor {
        reader: "the lock, async and thread-pool readers",
        wanted: "CoreCLR",
        found: "NativeAOT",
    }
}

/// An exception of a NativeAOT runtime with the trace it recorded, named from the
/// executable's stack-trace data.
fn aot_exception_report(aot: &cdac::nativeaot::NativeAot, e: &ExceptionInfo) -> ExceptionReport {
    let mut traces = std::collections::HashMap::new();
    let mut next = Some(e);
    while let Some(x) = next {
        let trace = aot
            .exception_trace(x.address)
            .map(|frames| {
                frames
                    .into_iter()
                    .map(|(ip, method)| cdac::exception_report::TraceLine {
                        ip,
                        method_desc: 0,
                        name: method.map_or_else(|| format!("<code at {ip:#x}>"), |m| m.name),
                        il_offset: None,
                        source: None,
                        previous_location_ends: false,
                    })
                    .collect()
            })
            .map_err(|err| err.to_string());
        traces.insert(x.address, trace);
        next = x.inner.as_deref();
    }
    ExceptionReport {
        exception: e.clone(),
        traces,
    }
}

/// Most distinct async chains the report prints.
const MAX_ASYNC_CHAINS_SHOWN: usize = 20;

/// The async part of the hang report: each distinct chain of suspended async methods (how
/// many alike), outermost first, with where the innermost waits and what for.
fn async_text(a: &super::async_chains::AsyncJson) -> String {
    let mut alike: Vec<(String, usize)> = Vec::new();
    for c in &a.chains {
        let methods: Vec<String> = c
            .frames
            .iter()
            .filter_map(|f| {
                let m = f.method.clone()?;
                Some(match &f.await_location {
                    Some(l) => format!("{m} ({}:{})", file_name(&l.file), l.line),
                    None => m,
                })
            })
            .collect();
        let waits = c
            .waits_for
            .as_ref()
            .map(|w| {
                format!(
                    " -> waits for {} {} ({})",
                    w.kind,
                    hex(w.object.0),
                    w.type_name
                )
            })
            .unwrap_or_default();
        let line = format!("{}{waits}", methods.join(" > "));
        match alike.iter_mut().find(|(l, _)| {
            // Chains alike but for the objects' addresses count together.
            l.split(" -> ").next() == line.split(" -> ").next()
        }) {
            Some((_, n)) => *n += 1,
            None => alike.push((line, 1)),
        }
    }
    let mut text = format!(
        "\nAsync work: {} chain(s) of suspended async methods ({} incomplete Tasks)\n",
        a.chains.len(),
        a.tasks_found
    );
    text.push_str(&not_read_lines(&a.problems));
    for (line, n) in alike.iter().take(MAX_ASYNC_CHAINS_SHOWN) {
        let count = if *n > 1 {
            format!("{n}x ")
        } else {
            String::new()
        };
        text.push_str(&format!("  {count}{line}\n"));
    }
    if alike.len() > MAX_ASYNC_CHAINS_SHOWN {
        text.push_str(&format!(
            "  … {} more (cdac async lists them all)\n",
            alike.len() - MAX_ASYNC_CHAINS_SHOWN
        ));
    }
    text
}

/// The last component of a path.
fn file_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// The hang part of the report: contended locks, then each deadlock with its threads'
/// stacks.
fn locks_text(
    l: &super::locks::LocksReport,
    threads: &[ThreadStack],
    named: &[Vec<super::stacks::Named<'_>>],
) -> String {
    let contended: Vec<_> = l
        .locks
        .iter()
        .filter(|x| x.waiters_counted > 0 || !x.waiting.is_empty())
        .collect();
    let mut text = format!(
        "\nLocks: {} held or waited for, {} with waiting threads; deadlocks: {}\n",
        l.locks.len(),
        contended.len(),
        if l.deadlocks.is_empty() {
            "none".to_string()
        } else {
            l.deadlocks.len().to_string()
        }
    );
    text.push_str(&not_read_lines(&l.problems));
    for x in &contended {
        text.push_str(&format!(
            "  {} {}: held by {}, {} waiting\n",
            hex(x.object.0),
            x.type_name,
            x.owner
                .as_ref()
                .map_or("nobody".into(), super::locks::thread_text),
            x.waiters_counted.max(x.waiting.len() as u32)
        ));
    }
    for (i, d) in l.deadlocks.iter().enumerate() {
        text.push_str(&format!("\nDEADLOCK {}:\n", i + 1));
        for w in &d.waits {
            text.push_str(&format!(
                "  {} waits for {} {}\n",
                super::locks::thread_text(&w.thread),
                hex(w.waits_for.0),
                w.type_name
            ));
        }
        for w in &d.waits {
            let Some(index) = threads
                .iter()
                .position(|t| t.os_id as u64 == w.thread.os_id)
            else {
                continue;
            };
            text.push_str(&format!(
                "\n  Stack of {}:\n",
                super::locks::thread_text(&w.thread)
            ));
            for (k, n) in named[index].iter().enumerate() {
                text.push_str("  ");
                text.push_str(&render_frame(k, n));
                text.push('\n');
            }
        }
    }
    text
}

/// The "not read" lines under a part of the report: the first few problems, then a count.
fn not_read_lines(problems: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = String::new();
    for p in problems.iter().take(SHOWN) {
        text.push_str(&format!("  not read: {p}\n"));
    }
    if problems.len() > SHOWN {
        text.push_str(&format!(
            "  not read: {} more problem(s) (--json lists them all)\n",
            problems.len() - SHOWN
        ));
    }
    text
}
