//! `cdac async`: async work in flight, as logical async stacks (like SOS `dumpasync`):
//! each chain of suspended async methods, outermost first, with the await each is
//! suspended at (and its source line) and what the innermost one waits for.

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{self, Addr, HeapReadsReport};
use super::stacks::{name_frames, thread_model, thread_text_with, Named};
use super::{hex, CliResult, DescriptorArgs, TargetArgs};
use cdac::async_chains::{
    read_async, running_on_threads, AsyncObject, AsyncOptions, AsyncReport, AsyncThread, BoxMatch,
    RunningAsyncFrame, RuntimeAsyncFrame,
};
use cdac::heap::settled;
use cdac::names::MethodNamer;
use cdac::stacks::{thread_stacks_with, LiveRegisters, StacksOptions};
use cdac::symbols::ElfSymbols;

/// Arguments of `cdac async`.
#[derive(Debug, Args)]
pub struct AsyncArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// One line per chain, `outermost;…;innermost;waited-for-type 1`, for flame graph
    /// tools (inferno, flamegraph.pl).
    #[arg(long, conflicts_with = "json")]
    collapsed: bool,
    /// Also chains of plain Tasks with no async method in them.
    #[arg(long)]
    tasks: bool,
    /// Also completed Tasks.
    #[arg(long)]
    completed: bool,
    /// Most chains listed.
    #[arg(long, default_value_t = 10_000)]
    max_chains: usize,
    /// Also the threads running async methods: each thread's stack with, under every
    /// `MoveNext` frame, the box it runs and the async methods awaiting it (a live
    /// process's threads are stopped one at a time, as `cdac stacks` does).
    #[arg(long, conflicts_with = "collapsed")]
    stacks: bool,
}

/// `cdac async --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AsyncJson {
    /// Each logical async stack.
    pub chains: Vec<ChainJson>,
    /// Tasks found on the heap (incomplete ones unless `--completed`).
    pub tasks_found: usize,
    /// Objects the heap walk visited.
    pub objects_scanned: u64,
    /// What could not be read.
    pub problems: Vec<String>,
    /// With `--stacks`: the threads running async methods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<Vec<AsyncThreadJson>>,
    /// How a live heap was read (absent on a dump).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads: Option<HeapReadsReport>,
    /// With `--stacks`: how long reading the stacks stopped a live process's threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads_stopped: Option<model::PausesReport>,
}

/// A thread running async methods (`--stacks`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct AsyncThreadJson {
    /// The thread and its stack, as `cdac stacks --json` prints it.
    pub thread: model::Thread,
    /// Its `MoveNext` frames, innermost first.
    pub async_frames: Vec<RunningFrameJson>,
}

/// A `MoveNext` frame tied to the box it runs.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RunningFrameJson {
    /// The frame's index in the thread's stack.
    pub frame: usize,
    /// The box it runs (`null`: not found, see `note`).
    pub state_machine_box: Option<Addr>,
    /// `stack_slot` (a live GC slot points into the box) or `only_running_box`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched_by: Option<String>,
    /// The async methods (and Tasks) awaiting the box, nearest first.
    pub awaited_by: Vec<FrameJson>,
    /// Why no box was found, or what else is to know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One logical async stack.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChainJson {
    /// Its frames, outermost first.
    pub frames: Vec<FrameJson>,
    /// What the innermost frame waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<WaitsForJson>,
    /// Where the chain was cut (a cycle, or too long).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut_at: Option<Addr>,
    /// With `--stacks`: the OS thread running one of its methods now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_on: Option<i64>,
}

/// One frame of a chain: an async method's state machine box, a plain Task, or an async
/// method the runtime suspended (runtime-async, .NET 11: its continuation object).
#[derive(Debug, Serialize, JsonSchema)]
pub struct FrameJson {
    /// The Task, box or continuation.
    pub object: Addr,
    /// Its MethodTable.
    pub method_table: Addr,
    /// Its type.
    pub type_name: String,
    /// `state_machine`, `task` or `runtime_async`.
    pub kind: String,
    /// `Task.m_stateFlags` (absent for a runtime-async frame, which is no Task).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_flags: Option<u32>,
    /// The async method (`Ns.Type.Method`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The compiler's state machine type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_machine_type: Option<String>,
    /// Its state: N >= 0 suspended at await N, -1 running, -2 done (a runtime-async
    /// frame: the suspension point it is at, counted from 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<i32>,
    /// Where that await is in the source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub await_location: Option<LocationJson>,
    /// What that await holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub awaiting: Option<AwaitingJson>,
    /// A runtime-async frame: the address in the method's code where it resumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_address: Option<Addr>,
}

/// A source location.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LocationJson {
    /// The file as the compiler saw it.
    pub file: String,
    /// Line (1-based).
    pub line: u32,
    /// Column (1-based).
    pub column: u32,
}

/// An await's awaiter and the object it holds.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AwaitingJson {
    /// The awaiter field (`<>u__1`).
    pub field: String,
    /// Its type.
    pub awaiter_type: String,
    /// The object it holds.
    pub object: Addr,
    /// That object's type.
    pub object_type: String,
}

/// What a chain waits for.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WaitsForJson {
    /// The object.
    pub object: Addr,
    /// Its type.
    pub type_name: String,
    /// `task_completion_source`, `timer`, `io`, `semaphore`, `task` or `other`.
    pub kind: String,
    /// The TaskCompletionSource that can complete it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_source: Option<Addr>,
}

/// One object of a chain, as printed: a Task or box; the Task of runtime-async methods
/// is followed by the methods, outermost first, the innermost with what it awaits.
fn frames_json(report: &AsyncReport, o: &AsyncObject) -> Vec<FrameJson> {
    let mut out = vec![frame_json(report, o)];
    if let Some(ra) = &o.runtime_async {
        out.extend(ra.frames.iter().map(runtime_async_frame_json));
        if let (Some(last), Some(a)) = (out.last_mut(), &ra.awaiting) {
            if last.kind == "runtime_async" {
                last.awaiting = Some(awaiting_json(a));
            }
        }
    }
    out
}

fn awaiting_json(a: &cdac::async_chains::Awaited) -> AwaitingJson {
    AwaitingJson {
        field: a.field.clone(),
        awaiter_type: a.awaiter_type.clone(),
        object: Addr(a.object),
        object_type: a.object_type.clone(),
    }
}

fn location_json(l: &cdac::formats::pdb::SourceLocation) -> LocationJson {
    LocationJson {
        file: l.file.clone(),
        line: l.line,
        column: l.column,
    }
}

/// A method the runtime suspended, as printed.
fn runtime_async_frame_json(f: &RuntimeAsyncFrame) -> FrameJson {
    FrameJson {
        object: Addr(f.continuation),
        method_table: Addr(f.method_table),
        type_name: f.type_name.clone(),
        kind: "runtime_async".into(),
        state_flags: None,
        method: f.method.clone(),
        state_machine_type: None,
        state: Some(f.state),
        await_location: f.await_location.as_ref().map(location_json),
        awaiting: None,
        resume_address: Some(Addr(f.resume_address)),
    }
}

/// One Task of a chain, as printed.
fn frame_json(report: &AsyncReport, o: &AsyncObject) -> FrameJson {
    let sm = o.state_machine.as_ref();
    FrameJson {
        object: Addr(o.address),
        method_table: Addr(o.method_table),
        type_name: report.type_name(o.method_table).to_string(),
        kind: if sm.is_some() {
            "state_machine"
        } else {
            "task"
        }
        .into(),
        state_flags: Some(o.state_flags),
        method: sm.map(|s| s.method.clone()),
        state_machine_type: sm.map(|s| s.type_name.clone()),
        state: sm.and_then(|s| s.state),
        await_location: sm
            .and_then(|s| s.await_location.as_ref())
            .map(location_json),
        awaiting: sm.and_then(|s| s.awaiting.as_ref()).map(awaiting_json),
        resume_address: None,
    }
}

/// The report, as printed.
pub(super) fn build(report: &AsyncReport) -> AsyncJson {
    let chains = report
        .chains
        .iter()
        .map(|c| ChainJson {
            frames: c
                .objects
                .iter()
                .filter_map(|a| report.objects.get(a))
                .flat_map(|o| frames_json(report, o))
                .collect(),
            waits_for: c.waits_for.as_ref().map(|w| WaitsForJson {
                object: Addr(w.object),
                type_name: w.type_name.clone(),
                kind: w.kind.into(),
                completion_source: w.completion_source.map(Addr),
            }),
            cut_at: c.cut_at.map(Addr),
            running_on: None,
        })
        .collect();
    AsyncJson {
        chains,
        tasks_found: report.objects.len(),
        objects_scanned: report.objects_scanned,
        problems: report.problems.clone(),
        threads: None,
        reads: None,
        threads_stopped: None,
    }
}

/// The `--stacks` part: threads running async methods, and which chain each runs.
fn add_threads(
    r: &mut AsyncJson,
    report: &AsyncReport,
    found: &[AsyncThread],
    threads: &[cdac::stacks::ThreadStack],
    named: &[Vec<Named<'_>>],
) {
    let mut out = Vec::new();
    for a in found {
        let (Some(t), Some(n)) = (threads.get(a.thread), named.get(a.thread)) else {
            continue;
        };
        for f in &a.frames {
            let Some(b) = f.state_machine_box else {
                continue;
            };
            for c in &mut r.chains {
                if c.frames.iter().any(|x| x.object.0 == b) {
                    c.running_on = Some(i64::from(a.os_id));
                }
            }
        }
        out.push(AsyncThreadJson {
            thread: thread_model(t, n),
            async_frames: a
                .frames
                .iter()
                .map(|f| RunningFrameJson {
                    frame: f.frame,
                    state_machine_box: f.state_machine_box.map(Addr),
                    matched_by: f.matched_by.map(|m| m.as_str().to_string()),
                    awaited_by: f
                        .callers
                        .iter()
                        .filter_map(|c| report.objects.get(c))
                        .flat_map(|o| frames_json(report, o))
                        .collect(),
                    note: f.note.clone(),
                })
                .collect(),
        });
    }
    r.threads = Some(out);
}

/// Runs `cdac async`.
pub fn run_async(args: &AsyncArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let options = AsyncOptions {
        completed: args.completed,
        tasks: args.tasks,
        max_chains: args.max_chains,
    };
    let settled = settled(
        &rt,
        || read_async(&rt, options),
        |r: &AsyncReport| r.problems.is_empty(),
    )?;
    let reads = HeapReadsReport::of(&rt, &settled);
    HeapReadsReport::tell(&reads);
    let report = settled.value;
    let mut r = build(&report);
    r.reads = reads;
    let mut thread_texts = Vec::new();
    if args.stacks {
        let stacks = thread_stacks_with(
            &rt,
            LiveRegisters::Stop,
            None,
            StacksOptions { gc_roots: true },
        )?;
        r.problems.extend(stacks.warnings.iter().cloned());
        r.threads_stopped = model::PausesReport::tell(stacks.pauses());
        let mut namer = MethodNamer::for_runtime(&rt);
        let found = running_on_threads(&report, &stacks, &mut namer);
        let symbols = ElfSymbols::new(rt.target());
        let named = name_frames(&stacks.threads, &mut namer, &symbols);
        add_threads(&mut r, &report, &found, &stacks.threads, &named);
        if !args.json {
            for a in &found {
                let (Some(t), Some(n)) = (stacks.threads.get(a.thread), named.get(a.thread)) else {
                    continue;
                };
                let after = |i: usize| {
                    a.frames
                        .iter()
                        .find(|f| f.frame == i)
                        .map(|f| running_text(&report, f))
                };
                thread_texts.push(thread_text_with(t, n, false, &after));
            }
        }
    }
    let outcome = super::outcome_of(&r.problems, "some async work could not be read");
    if args.json {
        super::emit_json(&r)?;
        return Ok(outcome);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.collapsed {
        print_collapsed(&mut out, &r)?;
    } else {
        print(&mut out, &r)?;
    }
    if args.stacks {
        writeln!(out)?;
        if thread_texts.is_empty() {
            writeln!(out, "no thread is running an async method")?;
        } else {
            writeln!(out, "Threads running async methods:")?;
        }
        for t in &thread_texts {
            writeln!(out)?;
            write!(out, "{t}")?;
        }
    }
    out.flush()?;
    Ok(outcome)
}

/// The lines under a `MoveNext` frame: the box it runs and the methods awaiting it.
fn running_text(report: &AsyncReport, f: &RunningAsyncFrame) -> String {
    let mut s = String::new();
    if let (Some(b), Some(how)) = (f.state_machine_box, f.matched_by) {
        let how = match how {
            BoxMatch::StackSlot => "a stack slot points into it",
            BoxMatch::OnlyRunningBox => "the only running box of its type",
        };
        s += &format!("         runs box {} ({how})\n", hex(b));
    }
    for c in f.callers.iter().filter_map(|c| report.objects.get(c)) {
        let fj = frame_json(report, c);
        s += &format!(
            "         awaited by {}{}\n",
            hex(c.address),
            frame_tail(&fj)
        );
    }
    if let Some(n) = &f.note {
        s += &format!("         ({n})\n");
    }
    s
}

/// A frame's name in a chain: its async method, or its Task type.
fn frame_name(f: &FrameJson) -> String {
    f.method.clone().unwrap_or_else(|| f.type_name.clone())
}

/// A chain frame after its address: name, state and await line.
fn frame_tail(f: &FrameJson) -> String {
    let at = match f.state {
        Some(s) if s >= 0 => format!("  at await {s}"),
        Some(-1) => "  running".into(),
        Some(s) => format!("  state {s}"),
        None if f.kind == "task" => format!("  (Task, flags {:#x})", f.state_flags.unwrap_or(0)),
        None => String::new(),
    };
    let line = f
        .await_location
        .as_ref()
        .map(|l| format!("  {}:{}", l.file, l.line))
        .unwrap_or_default();
    format!(" {}{at}{line}", frame_name(f))
}

fn waits_text(w: &WaitsForJson) -> String {
    let what = match w.kind.as_str() {
        "task_completion_source" => "a TaskCompletionSource's Task",
        "timer" => "a timer (Task.Delay)",
        "io" => "I/O",
        "semaphore" => "a SemaphoreSlim",
        "task" => "a Task",
        _ => "an object",
    };
    let mut s = format!("{what} {} ({})", hex(w.object.0), w.type_name);
    if let Some(src) = &w.completion_source {
        s += &format!(", completed through TaskCompletionSource {}", hex(src.0));
    }
    s
}

fn print(out: &mut impl Write, r: &AsyncJson) -> std::io::Result<()> {
    if r.chains.is_empty() {
        writeln!(
            out,
            "no async method is suspended ({} incomplete Tasks, {} objects scanned)",
            r.tasks_found, r.objects_scanned
        )?;
    }
    for (i, c) in r.chains.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        match &c.waits_for {
            Some(w) => writeln!(out, "Async chain {}: waits for {}", i + 1, waits_text(w))?,
            None => writeln!(out, "Async chain {}", i + 1)?,
        }
        if let Some(os) = c.running_on {
            writeln!(out, "  (running on thread {os}: see below)")?;
        }
        for f in &c.frames {
            writeln!(out, "  {}{}", hex(f.object.0), frame_tail(f))?;
        }
        if let Some(at) = &c.cut_at {
            writeln!(out, "  … cut at {} (a cycle or too long)", hex(at.0))?;
        }
    }
    if !r.problems.is_empty() {
        writeln!(out)?;
        for p in &r.problems {
            writeln!(out, "problem: {p}")?;
        }
    }
    Ok(())
}

/// Collapsed stacks: outermost first, then what the chain waits for.
fn print_collapsed(out: &mut impl Write, r: &AsyncJson) -> std::io::Result<()> {
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for c in &r.chains {
        let mut parts: Vec<String> = c.frames.iter().map(frame_name).collect();
        if let Some(w) = &c.waits_for {
            if c.frames.last().map(|f| f.object.0) != Some(w.object.0) {
                parts.push(w.type_name.clone());
            }
        }
        let key = parts
            .iter()
            .map(|p| p.replace(';', ":"))
            .collect::<Vec<_>>()
            .join(";");
        *counts.entry(key).or_default() += 1;
    }
    for (k, n) in counts {
        writeln!(out, "{k} {n}")?;
    }
    Ok(())
}
