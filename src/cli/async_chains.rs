//! `cdac async`: async work in flight, as logical async stacks (like SOS `dumpasync`):
//! each chain of suspended async methods, outermost first, with the await each is
//! suspended at (and its source line) and what the innermost one waits for.

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::Addr;
use super::{hex, CliResult, DescriptorArgs, TargetArgs};
use cdac::async_chains::{read_async, AsyncOptions, AsyncReport};

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
}

/// One Task of a chain: an async method's state machine box, or a plain Task.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FrameJson {
    /// The Task (or box).
    pub object: Addr,
    /// Its MethodTable.
    pub method_table: Addr,
    /// Its type.
    pub type_name: String,
    /// `state_machine` or `task`.
    pub kind: String,
    /// `Task.m_stateFlags`.
    pub state_flags: u32,
    /// The async method (`Ns.Type.Method`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The compiler's state machine type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_machine_type: Option<String>,
    /// Its state: N >= 0 suspended at await N, -1 running, -2 done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<i32>,
    /// Where that await is in the source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub await_location: Option<LocationJson>,
    /// What that await holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub awaiting: Option<AwaitingJson>,
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
                .map(|o| {
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
                        state_flags: o.state_flags,
                        method: sm.map(|s| s.method.clone()),
                        state_machine_type: sm.map(|s| s.type_name.clone()),
                        state: sm.and_then(|s| s.state),
                        await_location: sm.and_then(|s| s.await_location.as_ref()).map(|l| {
                            LocationJson {
                                file: l.file.clone(),
                                line: l.line,
                                column: l.column,
                            }
                        }),
                        awaiting: sm.and_then(|s| s.awaiting.as_ref()).map(|a| AwaitingJson {
                            field: a.field.clone(),
                            awaiter_type: a.awaiter_type.clone(),
                            object: Addr(a.object),
                            object_type: a.object_type.clone(),
                        }),
                    }
                })
                .collect(),
            waits_for: c.waits_for.as_ref().map(|w| WaitsForJson {
                object: Addr(w.object),
                type_name: w.type_name.clone(),
                kind: w.kind.into(),
                completion_source: w.completion_source.map(Addr),
            }),
            cut_at: c.cut_at.map(Addr),
        })
        .collect();
    AsyncJson {
        chains,
        tasks_found: report.objects.len(),
        objects_scanned: report.objects_scanned,
        problems: report.problems.clone(),
    }
}

/// Runs `cdac async`.
pub fn run_async(args: &AsyncArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let report = read_async(
        &rt,
        AsyncOptions {
            completed: args.completed,
            tasks: args.tasks,
            max_chains: args.max_chains,
        },
    )?;
    let r = build(&report);
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
    out.flush()?;
    Ok(outcome)
}

/// A frame's name in a chain: its async method, or its Task type.
fn frame_name(f: &FrameJson) -> String {
    f.method.clone().unwrap_or_else(|| f.type_name.clone())
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
        for f in &c.frames {
            let at = match f.state {
                Some(s) if s >= 0 => format!("  at await {s}"),
                Some(-1) => "  running".into(),
                Some(s) => format!("  state {s}"),
                None if f.kind == "task" => format!("  (Task, flags {:#x})", f.state_flags),
                None => String::new(),
            };
            let line = f
                .await_location
                .as_ref()
                .map(|l| format!("  {}:{}", l.file, l.line))
                .unwrap_or_default();
            writeln!(out, "  {} {}{at}{line}", hex(f.object.0), frame_name(f))?;
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
