//! `cdac analyze`: the crash summary of a dump (the 3 a.m. command): the runtime, the
//! crashing thread and its signal, the managed exception in flight on each thread, and the
//! crashing thread's stack, managed and native.

use clap::Args;
use serde_json::{json, Value};

use super::names::CliResult;
use super::stacks::{name_frames, render_frame, thread_json};
use super::{hex, DescriptorArgs, TargetArgs};

use cdac::contracts::thread::ExceptionInfo;
use cdac::exception_report::ExceptionReport;
use cdac::names::MethodNamer;
use cdac::source_lines::SourceLines;
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

/// The JSON of an exception with its resolved stack trace and its inner exceptions'
fn report_json(report: &ExceptionReport) -> Value {
    let mut v = super::stacks::exception_json(&report.exception);
    add_traces(report, &report.exception, &mut v);
    v
}

fn add_traces(report: &ExceptionReport, e: &ExceptionInfo, v: &mut Value) {
    v["stack_trace"] = match report.trace(e.address) {
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
        add_traces(report, inner, &mut v["inner"]);
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
    let reports: Vec<ExceptionReport> = with_exceptions
        .iter()
        .map(|(_, e)| ExceptionReport::new(&rt, e, &mut namer, &source_lines))
        .collect();
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
            "exceptions": with_exceptions.iter().zip(&reports).map(|((t, _), r)| json!({
                "thread": t.os_id,
                "managed_id": t.managed.as_ref().map(|m| m.managed_id),
                "exception": report_json(r),
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
    for ((t, _), report) in with_exceptions.iter().zip(&reports) {
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
        text.push_str(&report.text(2));
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
