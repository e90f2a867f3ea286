//! `cdac stacks`: every thread's stack, managed frames named as `ip2md` names them and,
//! with `--native`, the native frames between them named from ELF symbols.

use std::collections::HashSet;

use clap::Args;
use serde_json::{json, Value};

use super::names::CliResult;
use super::{hex, DescriptorArgs, TargetArgs};
use cdac::contracts::debug_info::IlOffset;
use cdac::contracts::thread::ExceptionInfo;
use cdac::formats::pdb::SourceLocation;
use cdac::names::MethodNamer;
use cdac::source_lines::SourceLines;
use cdac::stacks::{
    thread_stacks, FoundBy, FrameCode, LiveRegisters, StackEnd, StackFrame, ThreadStack,
};
use cdac::symbols::ElfSymbols;

/// Arguments of `cdac stacks`.
#[derive(Debug, Args)]
pub struct StacksArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print one JSON object (threads, their frames, the snapshot time).
    #[arg(long, conflicts_with = "collapsed")]
    json: bool,
    /// One line per thread, `thread;outermost;…;innermost 1`: the input of flame-graph
    /// tools.
    #[arg(long)]
    collapsed: bool,
    /// Show native frames too (by default only managed frames, with a count of the
    /// native ones between them).
    #[arg(long)]
    native: bool,
    /// Only these threads: OS thread ids or managed thread ids, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "ID,...")]
    threads: Vec<u64>,
    /// Live: do not stop any thread; read registers of threads blocked in a system call
    /// from /proc (running threads get no stack). Best effort.
    #[arg(long)]
    nonblocking: bool,
}

/// A frame with its name.
pub(super) struct Named<'a> {
    frame: &'a StackFrame,
    name: String,
    module: Option<String>,
    /// File and line of a managed frame's IL offset, from its module's portable PDB.
    source: Option<SourceLocation>,
}

/// Names every frame of every stack: managed frames in one batch, native ones from ELF
/// symbols.
pub(super) fn name_frames<'a>(
    threads: &'a [ThreadStack],
    namer: &mut MethodNamer<'_>,
    symbols: &ElfSymbols,
) -> Vec<Vec<Named<'a>>> {
    let mds: Vec<u64> = threads
        .iter()
        .filter_map(|t| t.stack.as_ref())
        .flat_map(|s| s.frames.iter().filter_map(StackFrame::method_desc))
        .collect::<HashSet<u64>>()
        .into_iter()
        .collect();
    let names: std::collections::HashMap<u64, String> =
        mds.iter().copied().zip(namer.names(&mds)).collect();
    let lines = SourceLines::new();
    let namer = &*namer;
    let source_of = |frame: &StackFrame, method_desc: u64| {
        let il = frame.il_offset.and_then(IlOffset::il)?;
        let (path, token) = namer.method_def(method_desc)?;
        lines.locate(&path, token, il).ok().flatten()
    };
    threads
        .iter()
        .map(|t| {
            let Some(stack) = &t.stack else {
                return Vec::new();
            };
            stack
                .frames
                .iter()
                .map(|frame| match frame.code {
                    FrameCode::Managed { method_desc, .. } => Named {
                        frame,
                        name: names
                            .get(&method_desc)
                            .cloned()
                            .unwrap_or_else(|| format!("<MethodDesc {}>", hex(method_desc))),
                        module: namer.module_of(method_desc).map(|m| namer.module_label(m)),
                        source: source_of(frame, method_desc),
                    },
                    FrameCode::Native => {
                        // A return address names the call: look up the byte before it.
                        let exact =
                            matches!(frame.found_by, FoundBy::Registers | FoundBy::SignalContext);
                        let at = if exact {
                            frame.ip
                        } else {
                            frame.ip.saturating_sub(1)
                        };
                        match symbols.lookup(at) {
                            Some(mut s) => {
                                s.offset += frame.ip - at;
                                Named {
                                    frame,
                                    module: s
                                        .module
                                        .file_name()
                                        .map(|n| n.to_string_lossy().into_owned()),
                                    name: s.to_string(),
                                    source: None,
                                }
                            }
                            None => Named {
                                frame,
                                name: "??".to_string(),
                                module: None,
                                source: None,
                            },
                        }
                    }
                })
                .collect()
        })
        .collect()
}

fn il_text(il: Option<IlOffset>) -> String {
    match il {
        Some(IlOffset::Il(n)) => format!("IL_{n:04x}"),
        Some(IlOffset::Prolog) => "prolog".into(),
        Some(IlOffset::Epilog) => "epilog".into(),
        Some(IlOffset::NoMapping) | None => String::new(),
    }
}

fn frame_json(index: usize, n: &Named<'_>) -> Value {
    let f = n.frame;
    let mut o = json!({
        "index": index,
        "ip": hex(f.ip),
        "sp": hex(f.sp),
        "name": n.name,
        "module": n.module,
        "found_by": f.found_by,
    });
    match &f.code {
        FrameCode::Managed {
            method_desc,
            method_start,
            jit_type,
            funclet,
            parent_frame,
        } => {
            o["kind"] = json!("managed");
            o["method_desc"] = json!(hex(*method_desc));
            o["method_start"] = json!(hex(*method_start));
            o["offset"] = json!(f.offset);
            o["jit_type"] = json!(jit_type);
            o["il_offset"] = json!(f.il_offset.and_then(IlOffset::il));
            o["source"] = json!(n.source.as_ref().map(|s| json!({
                "file": s.file,
                "line": s.line,
                "column": s.column,
            })));
            o["funclet"] = json!(funclet);
            o["parent_frame"] = json!(parent_frame);
        }
        FrameCode::Native => o["kind"] = json!("native"),
    }
    o
}

pub(super) fn exception_json(e: &ExceptionInfo) -> Value {
    json!({
        "address": hex(e.address),
        "type": e.type_name,
        "message": e.message,
        "hresult": format!("{:#010x}", e.hresult as u32),
        "inner": e.inner.as_deref().map(exception_json),
    })
}

fn end_text(end: &StackEnd) -> Option<String> {
    match end {
        StackEnd::Complete => None,
        StackEnd::Error { message } => Some(format!("stack walk stopped: {message}")),
        StackEnd::FrameLimit { frames } => Some(format!("stack cut at {frames} frames")),
    }
}

fn thread_header(t: &ThreadStack) -> String {
    let mut s = format!("Thread {}", t.os_id);
    if let Some(name) = &t.name {
        s.push_str(&format!(" \"{name}\""));
    }
    match &t.managed {
        Some(m) => {
            s.push_str(&format!(" managed id {}", m.managed_id));
            if !m.state.is_empty() {
                s.push_str(&format!(" [{}]", m.state.join(", ")));
            }
        }
        None => s.push_str(" (not a runtime thread)"),
    }
    if let (Some(d), Some(h)) = (t.stopped_for, t.held_for) {
        s.push_str(&format!(
            " held {:.0} µs ({:.0} µs from interrupt to release)",
            h.as_secs_f64() * 1e6,
            d.as_secs_f64() * 1e6
        ));
    }
    s
}

fn exception_text(e: &ExceptionInfo) -> String {
    let mut s = format!(
        "{}: {}",
        e.type_name.as_deref().unwrap_or("<unnamed type>"),
        e.message.as_deref().unwrap_or("<no message>")
    );
    if let Some(inner) = &e.inner {
        s.push_str(" ---> ");
        s.push_str(&exception_text(inner));
    }
    s
}

/// The text line of one frame: index, address, name, offset, IL offset, funclet.
pub(super) fn render_frame(i: usize, n: &Named<'_>) -> String {
    let mut line = format!("  #{i:<3} {:#014x}  {}", n.frame.ip, n.name);
    if let FrameCode::Managed {
        funclet,
        parent_frame,
        ..
    } = n.frame.code
    {
        if let Some(off) = n.frame.offset {
            line.push_str(&format!(" + {off:#x}"));
        }
        let il = il_text(n.frame.il_offset);
        if !il.is_empty() {
            line.push_str(&format!(" [{il}]"));
        }
        if funclet {
            match parent_frame {
                Some(p) => line.push_str(&format!(" (funclet of #{p})")),
                None => line.push_str(" (funclet)"),
            }
        }
        if let Some(s) = &n.source {
            line.push_str(&format!(" at {}:{}", s.file, s.line));
        }
    }
    line
}

/// The human text of one thread.
fn thread_text(t: &ThreadStack, named: &[Named<'_>], native: bool) -> String {
    let mut s = thread_header(t);
    s.push('\n');
    if let Some(e) = t.managed.as_ref().and_then(|m| m.exception.as_ref()) {
        s.push_str(&format!("  exception: {}\n", exception_text(e)));
    }
    if let Some(note) = &t.note {
        s.push_str(&format!("  ({note})\n"));
    }
    let mut hidden = 0;
    for (i, n) in named.iter().enumerate() {
        let managed = matches!(n.frame.code, FrameCode::Managed { .. });
        if !managed && !native {
            hidden += 1;
            continue;
        }
        if hidden > 0 {
            s.push_str(&format!("      ... {hidden} native frame(s)\n"));
            hidden = 0;
        }
        let line = render_frame(i, n);
        s.push_str(&line);
        s.push('\n');
    }
    if hidden > 0 {
        s.push_str(&format!("      ... {hidden} native frame(s)\n"));
    }
    if let Some(end) = t.stack.as_ref().and_then(|st| end_text(&st.end)) {
        s.push_str(&format!("  ({end})\n"));
    }
    s
}

/// The collapsed line of one thread: root first, `;`-separated, then ` 1`.
fn collapsed_line(t: &ThreadStack, named: &[Named<'_>], native: bool) -> Option<String> {
    t.stack.as_ref()?;
    let label = t
        .name
        .clone()
        .unwrap_or_else(|| format!("thread-{}", t.os_id));
    let mut parts = vec![label];
    for n in named.iter().rev() {
        if native || matches!(n.frame.code, FrameCode::Managed { .. }) {
            parts.push(n.name.replace(';', ":"));
        }
    }
    Some(format!("{} 1", parts.join(";")))
}

/// The JSON of one thread and its named frames.
pub(super) fn thread_json(t: &ThreadStack, n: &[Named<'_>]) -> Value {
    json!({
        "os_id": t.os_id,
        "name": t.name,
        "managed": t.managed.as_ref().map(|m| json!({
            "address": hex(m.address),
            "managed_id": m.managed_id,
            "state": m.state,
            "explicit_frames": m.explicit_frames.iter().map(|f| json!({
                "address": hex(f.address),
                "kind": f.kind,
                "return_address": f.return_address.map(hex),
                "caller_sp": f.caller_sp.map(hex),
            })).collect::<Vec<_>>(),
            "exception": m.exception.as_ref().map(exception_json),
        })),
        "registers": t.registers,
        "stopped_us": t.stopped_for.map(|d| d.as_secs_f64() * 1e6),
        "held_us": t.held_for.map(|d| d.as_secs_f64() * 1e6),
        "note": t.note,
        "frames": n.iter().enumerate().map(|(i, f)| frame_json(i, f)).collect::<Vec<_>>(),
        "end": t.stack.as_ref().map(|s| json!(s.end)),
    })
}

/// Runs `cdac stacks`.
pub fn run_stacks(args: &StacksArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let live = if args.nonblocking {
        LiveRegisters::NonBlocking
    } else {
        LiveRegisters::Stop
    };
    let wanted: Vec<u64> = args.threads.clone();
    let filter = move |os: i32, managed: Option<u32>| {
        wanted.iter().any(|&w| {
            u64::try_from(os).is_ok_and(|o| o == w) || managed.is_some_and(|m| u64::from(m) == w)
        })
    };
    let stacks = thread_stacks(
        &rt,
        live,
        (!args.threads.is_empty()).then_some(&filter as &dyn Fn(i32, Option<u32>) -> bool),
    )?;
    for w in &stacks.warnings {
        status!("cdac: warning: {w}");
    }
    let mut namer = MethodNamer::for_runtime(&rt);
    let symbols = ElfSymbols::new(rt.target());
    let named = name_frames(&stacks.threads, &mut namer, &symbols);
    if args.json {
        let threads: Vec<Value> = stacks
            .threads
            .iter()
            .zip(&named)
            .map(|(t, n)| thread_json(t, n))
            .collect();
        let out = json!({
            "threads": threads,
            "snapshot_us": stacks.snapshot_time.map(|d| d.as_secs_f64() * 1e6),
            "warnings": stacks.warnings,
        });
        super::emit(&format!("{}\n", serde_json::to_string_pretty(&out)?))?;
        return Ok(());
    }
    let mut text = String::new();
    for (t, n) in stacks.threads.iter().zip(&named) {
        if args.collapsed {
            if let Some(line) = collapsed_line(t, n, args.native) {
                text.push_str(&line);
                text.push('\n');
            }
        } else {
            text.push_str(&thread_text(t, n, args.native));
            text.push('\n');
        }
    }
    if !args.collapsed {
        if let Some(d) = stacks.snapshot_time {
            let worst = |f: fn(&ThreadStack) -> Option<std::time::Duration>| {
                stacks
                    .threads
                    .iter()
                    .filter_map(f)
                    .map(|d| d.as_secs_f64() * 1e6)
                    .fold(0.0, f64::max)
            };
            text.push_str(&format!(
                "{} threads, one stopped at a time; snapshot {:.1} ms; each held at most {:.0} µs \
                 ({:.0} µs from interrupt to release)\n",
                stacks.threads.len(),
                d.as_secs_f64() * 1e3,
                worst(|t| t.held_for),
                worst(|t| t.stopped_for)
            ));
        }
    }
    super::emit(&text)?;
    Ok(())
}
