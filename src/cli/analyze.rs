//! `cdac analyze`: the crash summary of a dump (the 3 a.m. command): the runtime, the
//! crashing thread and its signal, the managed exception in flight on each thread, and the
//! crashing thread's stack, managed and native.

use clap::Args;
use serde_json::{json, Value};

use super::names::CliResult;
use super::stacks::{name_frames, render_frame, thread_json};
use super::{hex, DescriptorArgs, TargetArgs};
use crate::contracts::thread::ExceptionInfo;
use crate::names::MethodNamer;
use crate::stacks::{thread_stacks, LiveRegisters, ThreadStack};
use crate::symbols::ElfSymbols;
use crate::target::CrashSignal;

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

fn exception_lines(e: &ExceptionInfo, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth + 1);
    let lead = if depth == 0 { "" } else { "---> " };
    out.push_str(&format!(
        "{pad}{lead}{}: {}\n{pad}     HResult {:#010x}, object {}\n",
        e.type_name.as_deref().unwrap_or("<unnamed type>"),
        e.message.as_deref().unwrap_or("<no message>"),
        e.hresult as u32,
        hex(e.address)
    ));
    if let Some(inner) = &e.inner {
        exception_lines(inner, depth + 1, out);
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
                "exception": super::stacks::exception_json(e),
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
        exception_lines(e, 0, &mut text);
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
