//! `cdac analyze`: the crash summary of a dump (the 3 a.m. command): the runtime, the
//! crashing thread and its signal, the managed exception in flight on each thread, and the
//! crashing thread's stack, managed and native.

use clap::Args;
use serde_json::{json, Value};

use super::names::CliResult;
use super::stacks::{name_frames, render_frame, thread_json};
use super::{hex, DescriptorArgs, TargetArgs};
use std::collections::HashMap;

use cdac::contracts::debug_info::IlOffset;
use cdac::contracts::thread::ExceptionInfo;
use cdac::formats::pdb::SourceLocation;
use cdac::names::MethodNamer;
use cdac::source_lines::{exception_trace_frames, SourceLines};
use cdac::stacks::{thread_stacks, LiveRegisters, ThreadStack};
use cdac::symbols::ElfSymbols;
use cdac::target::CrashSignal;

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

/// One frame of an exception's captured stack trace, named and placed in the source.
struct TraceLine {
    ip: u64,
    method_desc: u64,
    name: String,
    il_offset: Option<u32>,
    source: Option<SourceLocation>,
}

/// The captured stack traces of an exception and its inner exceptions, by object address.
fn exception_traces(
    rt: &cdac::runtime::Runtime,
    e: &ExceptionInfo,
    namer: &mut MethodNamer<'_>,
    lines: &SourceLines,
    out: &mut HashMap<u64, Result<Vec<TraceLine>, String>>,
) {
    let resolved = exception_trace_frames(rt, e.stack_trace).map_err(|err| err.to_string());
    let traced = resolved.map(|frames| {
        let mds: Vec<u64> = frames.iter().map(|f| f.frame.method_desc).collect();
        let names = namer.names(&mds);
        frames
            .iter()
            .zip(names)
            .map(|(f, name)| {
                let il = f.il_offset.and_then(IlOffset::il);
                let source = il.and_then(|il| {
                    let (path, token) = namer.method_def(f.frame.method_desc)?;
                    lines.locate(&path, token, il).ok().flatten()
                });
                TraceLine {
                    ip: f.frame.ip,
                    method_desc: f.frame.method_desc,
                    name,
                    il_offset: il,
                    source,
                }
            })
            .collect()
    });
    out.insert(e.address, traced);
    if let Some(inner) = &e.inner {
        exception_traces(rt, inner, namer, lines, out);
    }
}

fn trace_json(traces: &HashMap<u64, Result<Vec<TraceLine>, String>>, e: &ExceptionInfo) -> Value {
    let mut v = super::stacks::exception_json(e);
    add_traces(traces, e, &mut v);
    v
}

fn add_traces(
    traces: &HashMap<u64, Result<Vec<TraceLine>, String>>,
    e: &ExceptionInfo,
    v: &mut Value,
) {
    v["stack_trace"] = match traces.get(&e.address) {
        Some(Ok(frames)) => json!(frames
            .iter()
            .map(|f| json!({
                "ip": hex(f.ip),
                "method_desc": hex(f.method_desc),
                "name": f.name,
                "il_offset": f.il_offset,
                "source": f.source.as_ref().map(|s| json!({
                    "file": s.file,
                    "line": s.line,
                    "column": s.column,
                })),
            }))
            .collect::<Vec<Value>>()),
        Some(Err(err)) => json!({ "error": err }),
        None => Value::Null,
    };
    if let Some(inner) = &e.inner {
        add_traces(traces, inner, &mut v["inner"]);
    }
}

fn exception_lines(
    e: &ExceptionInfo,
    depth: usize,
    traces: &HashMap<u64, Result<Vec<TraceLine>, String>>,
    out: &mut String,
) {
    let pad = "  ".repeat(depth + 1);
    let lead = if depth == 0 { "" } else { "---> " };
    out.push_str(&format!(
        "{pad}{lead}{}: {}\n{pad}     HResult {:#010x}, object {}\n",
        e.type_name.as_deref().unwrap_or("<unnamed type>"),
        e.message.as_deref().unwrap_or("<no message>"),
        e.hresult as u32,
        hex(e.address)
    ));
    match traces.get(&e.address) {
        Some(Ok(frames)) => {
            for f in frames {
                let il = f
                    .il_offset
                    .map(|n| format!(" + IL_{n:04x}"))
                    .unwrap_or_default();
                let at = f
                    .source
                    .as_ref()
                    .map(|s| format!(" in {}:{}", s.file, s.line))
                    .unwrap_or_default();
                out.push_str(&format!("{pad}     at {}{il}{at}\n", f.name));
            }
        }
        Some(Err(err)) => out.push_str(&format!("{pad}     (stack trace unreadable: {err})\n")),
        None => {}
    }
    if let Some(inner) = &e.inner {
        exception_lines(inner, depth + 1, traces, out);
    }
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
    let stacks = thread_stacks(&rt, LiveRegisters::Stop, None)?;
    for w in &stacks.warnings {
        status!("cdac: warning: {w}");
    }
    // The crashing thread: the signal's, else the first with an exception in flight.
    let crashing: Option<&ThreadStack> = match &crash {
        Some(c) => stacks.threads.iter().find(|t| t.os_id == c.tid),
        None => None,
    };
    let mut namer = MethodNamer::for_runtime(&rt);
    let symbols = ElfSymbols::new(rt.target());
    let named = name_frames(&stacks.threads, &mut namer, &symbols);
    let with_exceptions: Vec<(&ThreadStack, &ExceptionInfo)> = stacks
        .threads
        .iter()
        .filter_map(|t| Some((t, t.managed.as_ref()?.exception.as_ref()?)))
        .collect();
    let source_lines = SourceLines::new();
    let mut traces = HashMap::new();
    for (_, e) in &with_exceptions {
        exception_traces(&rt, e, &mut namer, &source_lines, &mut traces);
    }
    let version = rt
        .version()
        .map(|v| v.product_version.clone())
        .unwrap_or_else(|| "unknown".into());
    let runtime = format!(
        "{} {} ({}), descriptor: {} {}",
        rt.module().path.display(),
        version,
        rt.descriptor().global_string("Architecture").unwrap_or("?"),
        rt.descriptor_source().kind(),
        rt.descriptor_source().name()
    );
    if args.json {
        let crash_index =
            crashing.and_then(|c| stacks.threads.iter().position(|t| std::ptr::eq(t, c)));
        let out = json!({
            "runtime": {
                "path": rt.module().path,
                "version": version,
                "descriptor": rt.descriptor_source().name(),
            },
            "signal": crash.as_ref().map(|c| json!({
                "thread": c.tid,
                "signo": c.signo,
                "name": c.name(),
                "code": c.code,
                "fault_address": c.fault_addr.map(hex),
                "sender_pid": c.sender_pid,
            })),
            "threads": stacks.threads.len(),
            "exceptions": with_exceptions.iter().map(|(t, e)| json!({
                "thread": t.os_id,
                "managed_id": t.managed.as_ref().map(|m| m.managed_id),
                "exception": trace_json(&traces, e),
            })).collect::<Vec<Value>>(),
            "crashing_thread": crash_index.map(|i| thread_json(&stacks.threads[i], &named[i])),
        });
        super::emit(&format!("{}\n", serde_json::to_string_pretty(&out)?))?;
        return Ok(());
    }
    let mut text = format!("Runtime: {runtime}\n");
    match &crash {
        Some(c) => text.push_str(&format!("Signal: {}\n", signal_text(c))),
        None => text.push_str("Signal: none recorded (a dump of a running process)\n"),
    }
    text.push_str(&format!("Threads: {}\n", stacks.threads.len()));
    if with_exceptions.is_empty() {
        text.push_str("Exceptions in flight: none\n");
    }
    for (t, e) in &with_exceptions {
        let mark = if crash.as_ref().is_some_and(|c| c.tid == t.os_id) {
            " (crashing thread)"
        } else {
            ""
        };
        text.push_str(&format!(
            "Exception on thread {}{}{mark}:\n",
            t.os_id,
            t.managed
                .as_ref()
                .map(|m| format!(" (managed id {})", m.managed_id))
                .unwrap_or_default()
        ));
        exception_lines(e, 0, &traces, &mut text);
    }
    if let Some(i) = crashing.and_then(|c| stacks.threads.iter().position(|t| std::ptr::eq(t, c))) {
        text.push_str(&format!("\nCrashing thread {}:\n", stacks.threads[i].os_id));
        for (index, n) in named[i].iter().enumerate() {
            text.push_str(&render_frame(index, n));
            text.push('\n');
        }
    }
    super::emit(&text)?;
    Ok(())
}
