//! `cdac stacks`: every thread's stack, managed frames named as `ip2md` names them and,
//! with `--native`, the native frames between them named from ELF symbols.

use std::collections::HashSet;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{self, Addr, ExceptionOrError};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::contracts::debug_info::IlOffset;
use cdac::contracts::thread::ExceptionInfo;
use cdac::formats::pdb::SourceLocation;
use cdac::inspect::Inspector;
use cdac::names::MethodNamer;
use cdac::source_lines::SourceLines;
use cdac::stacks::{
    thread_stacks_with, FoundBy, FrameCode, FrameRoots, LiveRegisters, StackEnd, StackFrame,
    StacksOptions, ThreadStack,
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
    /// Under each managed frame, its live GC slots (from the method's GC info at the
    /// frame's IP) and the object each holds, like SOS `clrstack -gc`.
    #[arg(long, conflicts_with = "collapsed")]
    gc: bool,
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
    namer: &mut MethodNamer,
    symbols: &ElfSymbols,
) -> Vec<Vec<Named<'a>>> {
    let mds: Vec<u64> = threads
        .iter()
        .filter_map(|t| t.stack.as_ref())
        .flat_map(|s| s.frames.iter().filter_map(StackFrame::method_desc))
        .filter(|&md| md != 0)
        .collect::<HashSet<u64>>()
        .into_iter()
        .collect();
    let names: std::collections::HashMap<u64, String> =
        mds.iter().copied().zip(namer.names(&mds)).collect();
    let lines = SourceLines::for_target(namer.target());
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
                    FrameCode::Managed {
                        method_start,
                        jit_type: cdac::nativeaot::stacks::AOT_CODE,
                        ..
                    } => Named {
                        frame,
                        name: namer
                            .native_aot_name(method_start, frame.ip)
                            .unwrap_or_else(|| format!("<managed code at {}>", hex(frame.ip))),
                        module: namer
                            .target()
                            .source()
                            .mapped_files()
                            .iter()
                            .find(|f| (f.start..f.end).contains(&frame.ip))
                            .and_then(|f| f.path.file_name())
                            .map(|n| n.to_string_lossy().into_owned()),
                        source: {
                            let exact = matches!(
                                frame.found_by,
                                FoundBy::Registers | FoundBy::SignalContext
                            );
                            namer.native_aot_source(if exact {
                                frame.ip
                            } else {
                                frame.ip.saturating_sub(1)
                            })
                        },
                    },
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

/// The JSON of one named frame.
pub(super) fn frame_model(index: usize, n: &Named<'_>) -> model::Frame {
    let f = n.frame;
    let mut out = model::Frame {
        index,
        ip: Addr(f.ip),
        sp: Some(Addr(f.sp)),
        kind: model::FrameKind::Native,
        name: n.name.clone(),
        module: n.module.clone(),
        found_by: Some(f.found_by.as_str().to_string()),
        method_desc: None,
        method_start: None,
        offset: None,
        jit_type: None,
        il_offset: None,
        source: None,
        funclet: None,
        parent_frame: None,
        previous_location_ends: false,
        gc: None,
    };
    if let FrameCode::Managed {
        method_desc,
        method_start,
        jit_type,
        funclet,
        parent_frame,
    } = &f.code
    {
        out.kind = model::FrameKind::Managed;
        out.method_desc = Some(Addr(*method_desc));
        out.method_start = Some(Addr(*method_start));
        out.offset = f.offset;
        out.jit_type = Some(jit_type.to_string());
        out.il_offset = f.il_offset.and_then(IlOffset::il);
        out.source = n.source.as_ref().map(source_model);
        out.funclet = Some(*funclet);
        out.parent_frame = *parent_frame;
    }
    out
}

/// A PDB source location as JSON.
pub(super) fn source_model(s: &SourceLocation) -> model::Source {
    model::Source {
        file: s.file.clone(),
        line: s.line,
        column: s.column,
    }
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
    if let Some(n) = t.managed.as_ref().and_then(|m| m.namespace_os_id) {
        s.push_str(&format!(" ({n} in its PID namespace)"));
    }
    if let Some(name) = t.display_name() {
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
    thread_text_with(t, named, native, &|_| None)
}

/// The `--gc` models of every thread's managed frames, by frame index.
fn gc_models(
    rt: &cdac::runtime::Runtime,
    threads: &[ThreadStack],
) -> Vec<std::collections::HashMap<usize, model::FrameGc>> {
    let mut inspector = Inspector::new(rt).ok();
    let target = rt.target();
    let mut type_of = |obj: u64, interior: bool| -> Option<String> {
        if obj == 0 || interior {
            return None;
        }
        let mt = target.read_u64(obj).ok()? & !7;
        inspector.as_mut().map(|i| i.type_name(mt))
    };
    threads
        .iter()
        .map(|t| {
            t.roots
                .iter()
                .flatten()
                .map(|fr: &FrameRoots| {
                    let slots = fr
                        .roots
                        .iter()
                        .map(|r| model::GcSlotValue {
                            slot: r.slot.clone(),
                            address: r.address.map(Addr),
                            object: Addr(r.object),
                            type_name: type_of(r.object, r.interior),
                            interior: r.interior,
                            pinned: r.pinned,
                        })
                        .collect();
                    (
                        fr.frame,
                        model::FrameGc {
                            active: fr.active,
                            note: fr.note.as_ref().map(|n| {
                                serde_json::to_value(n)
                                    .ok()
                                    .and_then(|v| v.as_str().map(str::to_string))
                                    .unwrap_or_default()
                            }),
                            slots,
                            errors: fr.errors.clone(),
                        },
                    )
                })
                .collect()
        })
        .collect()
}

/// The text lines of a frame's live slots.
fn gc_text(gc: &model::FrameGc) -> String {
    let mut s = String::new();
    if let Some(n) = &gc.note {
        s.push_str(&format!("        gc: {}\n", n.replace('_', " ")));
    }
    for v in &gc.slots {
        let at = v
            .address
            .map_or_else(String::new, |a| format!(" ({})", hex(a.0)));
        let mut flags = String::new();
        if v.interior {
            flags.push_str(" interior");
        }
        if v.pinned {
            flags.push_str(" pinned");
        }
        s.push_str(&format!(
            "        {}{at}: {} {}{flags}\n",
            v.slot,
            hex(v.object.0),
            v.type_name.as_deref().unwrap_or("")
        ));
    }
    for e in &gc.errors {
        s.push_str(&format!("        gc error: {e}\n"));
    }
    s
}

/// The human text of one thread, with each managed frame's live slots when `gc` has them.
/// The human text of one thread, with `after(i)`'s lines under frame `i` (its GC slots,
/// the async methods awaiting it).
pub(super) fn thread_text_with(
    t: &ThreadStack,
    named: &[Named<'_>],
    native: bool,
    after: &dyn Fn(usize) -> Option<String>,
) -> String {
    let mut s = thread_header(t);
    s.push('\n');
    if let Some(m) = &t.managed {
        if let Some(e) = &m.exception {
            s.push_str(&format!("  exception: {}\n", exception_text(e)));
        }
        if let Some(e) = &m.exception_error {
            s.push_str(&format!("  exception unreadable: {e}\n"));
        }
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
        if let Some(more) = after(i) {
            s.push_str(&more);
        }
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
        .display_name()
        .map(|n| n.replace(';', ":"))
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
pub(super) fn thread_model(t: &ThreadStack, n: &[Named<'_>]) -> model::Thread {
    let managed = t.managed.as_ref().map(|m| model::ManagedThread {
        address: Addr(m.address),
        managed_id: m.managed_id,
        os_id_in_namespace: m.namespace_os_id,
        state: model::ThreadState {
            value: Addr(u64::from(m.state_bits)),
            names: m.state.iter().map(|s| s.to_string()).collect(),
        },
        finalizer: m.finalizer,
        preemptive_gc_disabled: m.preemptive_gc_disabled,
        explicit_frames: m
            .explicit_frames
            .iter()
            .map(super::threads::explicit_frame)
            .collect(),
        explicit_frames_error: None,
        exception: match (&m.exception, &m.exception_error) {
            (Some(e), _) => Some(ExceptionOrError::Exception(Box::new(
                super::threads::exception(e),
            ))),
            (None, Some(error)) => Some(ExceptionOrError::Error {
                address: None,
                error: error.clone(),
            }),
            (None, None) => None,
        },
        nested_exceptions: Vec::new(),
    });
    let (name, name_source) = super::threads::thread_name(
        t.managed.as_ref().and_then(|m| m.name.as_deref()),
        t.name.as_deref(),
    );
    model::Thread {
        os_id: i64::from(t.os_id),
        name,
        name_source,
        managed,
        registers: t.registers.map(|r| r.as_str().to_string()),
        stopped_us: t.stopped_for.map(|d| d.as_secs_f64() * 1e6),
        held_us: t.held_for.map(|d| d.as_secs_f64() * 1e6),
        note: t.note.clone(),
        frames: t.stack.as_ref().map(|_| {
            n.iter()
                .enumerate()
                .map(|(i, f)| frame_model(i, f))
                .collect()
        }),
        stack_end: t.stack.as_ref().map(|s| match &s.end {
            StackEnd::Complete => model::StackEnd {
                reason: "complete".into(),
                message: None,
                frames: None,
            },
            StackEnd::Error { message } => model::StackEnd {
                reason: "error".into(),
                message: Some(message.clone()),
                frames: None,
            },
            StackEnd::FrameLimit { frames } => model::StackEnd {
                reason: "frame_limit".into(),
                message: None,
                frames: Some(*frames),
            },
        }),
    }
}

/// What `cdac stacks --json` prints.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StacksReport {
    /// Every thread asked for, in OS thread id order.
    pub threads: Vec<model::Thread>,
    /// Live: microseconds the whole snapshot took.
    pub snapshot_us: Option<f64>,
    /// Threads that could not be read, and other things to know.
    pub warnings: Vec<String>,
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
    let stacks = thread_stacks_with(
        &rt,
        live,
        (!args.threads.is_empty()).then_some(&filter as &dyn Fn(i32, Option<u32>) -> bool),
        StacksOptions { gc_roots: args.gc },
    )?;
    let mut gc_models = if args.gc {
        gc_models(&rt, &stacks.threads)
    } else {
        Vec::new()
    };
    for w in &stacks.warnings {
        status!("cdac: warning: {w}");
    }
    let mut namer = MethodNamer::for_runtime(&rt);
    let symbols = ElfSymbols::new(rt.target());
    let named = name_frames(&stacks.threads, &mut namer, &symbols);
    // Every id asked for must name a thread (OS or managed id).
    let unknown: Vec<u64> = args
        .threads
        .iter()
        .copied()
        .filter(|&w| {
            !stacks.threads.iter().any(|t| {
                u64::try_from(t.os_id).is_ok_and(|o| o == w)
                    || t.managed
                        .as_ref()
                        .is_some_and(|m| u64::from(m.managed_id) == w)
            })
        })
        .collect();
    let unwalked = stacks.threads.iter().filter(|t| t.stack.is_none()).count();
    let mut problems: Vec<String> = unknown
        .iter()
        .map(|id| format!("no thread {id} in the target (neither an OS nor a managed thread id)"))
        .collect();
    if unwalked > 0 {
        problems.push(format!(
            "{unwalked} thread(s) without a stack (see their notes)"
        ));
    }
    problems.extend(stacks.lost.iter().cloned());
    for d in rt.target().damage_noted() {
        // Names come from the file then, but the code's unwind and debug data in the
        // damaged image may not: frames there may be missing or lack IL offsets.
        problems.push(format!(
            "{d} (damage in the dump): frames in its code may be missing or lack IL offsets"
        ));
    }
    let outcome = if problems.is_empty() {
        Outcome::Answered
    } else {
        Outcome::Partial(problems.join("; "))
    };
    if args.json {
        let report = StacksReport {
            threads: stacks
                .threads
                .iter()
                .zip(&named)
                .enumerate()
                .map(|(ti, (t, n))| {
                    let mut m = thread_model(t, n);
                    if let (Some(frames), Some(gc)) = (m.frames.as_mut(), gc_models.get_mut(ti)) {
                        for f in frames.iter_mut() {
                            f.gc = gc.remove(&f.index);
                        }
                    }
                    m
                })
                .collect(),
            snapshot_us: stacks.snapshot_time.map(|d| d.as_secs_f64() * 1e6),
            warnings: super::check_warnings()
                .into_iter()
                .chain(stacks.warnings.iter().cloned())
                .chain(problems.iter().cloned())
                .collect(),
        };
        super::emit_json(&report)?;
        return Ok(outcome);
    }
    let mut text = String::new();
    for (ti, (t, n)) in stacks.threads.iter().zip(&named).enumerate() {
        if args.gc {
            let gc = gc_models.get(ti);
            let after = |i: usize| gc.and_then(|g| g.get(&i)).map(gc_text);
            text.push_str(&thread_text_with(t, n, args.native, &after));
            text.push('\n');
        } else if args.collapsed {
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
        if let Some(p) = stacks.pauses() {
            text.push_str(&p.describe());
            text.push('\n');
        }
    }
    super::emit(&text)?;
    Ok(outcome)
}
