//! `cdac gcroot ADDR` (like SOS `gcroot`): a path from a root to the object, each step
//! named by the field (or array element) that refers to the next.

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::code::parse_address;
use super::model::Addr;
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::inspect::{FieldView, InspectOptions, Inspector, Value};
use cdac::roots::{Marker, RootKind, RootOptions, RootPath, RootSet, ThreadStatics, Via};
use cdac::stacks::LiveRegisters;

/// Arguments of `cdac gcroot`.
#[derive(Debug, Args)]
pub struct GcRootArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// The object's address.
    #[arg(value_name = "ADDR", value_parser = parse_address)]
    address: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Do not read stack roots (on a live process, reading them stops each thread for a
    /// moment, as `stacks` does).
    #[arg(long)]
    no_stacks: bool,
    /// On a live process: hold every thread stopped while the roots are read and the heap
    /// marked, so that no collection moves an object under the search, and say for how
    /// long. Without it threads are stopped one at a time for their stacks only.
    #[arg(long)]
    freeze: bool,
    /// A path from each root that reaches the object (not only the shortest), at most
    /// `--max-paths`.
    #[arg(long)]
    all: bool,
    /// The most paths `--all` prints.
    #[arg(long, value_name = "N", default_value_t = 20, requires = "all")]
    max_paths: usize,
}

/// `cdac gcroot --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GcRootReport {
    /// The object asked about.
    pub target: Addr,
    /// A root reaches it.
    pub found: bool,
    /// The root: `stack`, `strong_handle`, `pinned_handle`, `async_pinned_handle`,
    /// `sized_ref_handle`, `finalizer_queue`, `thread_static`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<RootReport>,
    /// The objects from the root's to the target, each with how the one before refers to it.
    pub path: Vec<StepReport>,
    /// With `--all`: a path from each root that reaches the object, at most
    /// `--max-paths` (the first is not always the shortest one `path` shows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all_paths: Option<Vec<PathReport>>,
    /// Roots read, by kind.
    pub roots: std::collections::BTreeMap<String, u64>,
    /// Objects marked before the path was found (or all reachable ones).
    pub objects_marked: u64,
    /// Which roots are not read yet (so an object may be alive through them alone).
    pub roots_not_read: Vec<String>,
    /// Stack slots holding interior pointers, resolved to the object containing them.
    pub interior_stack_slots_resolved: u64,
    /// Stack slots holding interior pointers not followed (outside the GC heap, or in a
    /// segment too large to walk for them).
    pub interior_stack_slots_skipped: u64,
    /// What could not be read.
    pub problems: Vec<String>,
    /// How long reading the stack roots stopped a live process's threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads_stopped: Option<super::model::PausesReport>,
    /// With `--freeze`: how long every thread was held stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen: Option<super::model::FrozenReport>,
}

/// The root of a path.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RootReport {
    /// Its kind.
    pub kind: String,
    /// The handle, the finalizer queue entry, the stack slot (0 for a register), or the
    /// thread-static storage's slot.
    pub address: Addr,
    /// A stack or thread-static root: the thread's kernel id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<i32>,
    /// A stack root: the frame's index in the thread's stack (as `cdac stacks` numbers
    /// them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frame: Option<u32>,
    /// The kind in words (as the human output prints it).
    #[serde(skip)]
    pub description: String,
}

/// One path of `--all`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PathReport {
    /// Its root.
    pub root: RootReport,
    /// The objects from the root's to the target.
    pub path: Vec<StepReport>,
}

/// One object on a path.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StepReport {
    /// The object.
    pub address: Addr,
    /// Its type.
    pub type_name: String,
    /// How the previous object refers to it: a field name (`_items`, `Point.Inner`), an
    /// element (`[3]`), `dependent` (a dependent handle's secondary), or `root`.
    pub via: String,
}

/// The roots `gcroot` and `heap --live` do not read on any runtime.
pub(super) const NOT_READ: &[&str] =
    &["explicit Frames' roots (GCFrame, HelperMethodFrame, transition frames' arguments)"];

/// The roots `gcroot` and `heap --live` did not read from `roots`: stack frames when they
/// were left out, thread statics where the descriptor does not say where they are.
pub(super) fn not_read(roots: &RootSet) -> Vec<String> {
    let mut v: Vec<String> = NOT_READ.iter().map(|s| s.to_string()).collect();
    if roots.thread_statics == ThreadStatics::NotRead {
        v.insert(0, "thread statics".into());
    }
    if !roots.stacks_read {
        v.insert(0, "stack frames (every thread's live slots)".into());
    }
    v
}

/// Every thread of `pid` held, at a moment no garbage collection is moving objects: a
/// freeze that catches one lets the threads go for it to finish and takes them again,
/// within [`cdac::heap::SETTLE_BOUND`].
fn freeze_between_collections(
    rt: &cdac::runtime::Runtime,
    pid: i32,
) -> Result<cdac::process::freeze::Freeze, Box<dyn std::error::Error>> {
    let started = std::time::Instant::now();
    loop {
        let f = cdac::process::freeze::Freeze::take(pid)?;
        // Nothing read before the threads stopped is trusted.
        rt.flush();
        let moving = cdac::heap::GcEpoch::read(rt).is_ok_and(|e| e.structures_invalid != 0);
        if !moving || started.elapsed() >= cdac::heap::SETTLE_BOUND {
            return Ok(f);
        }
        drop(f);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Runs `cdac gcroot`.
pub fn run_gcroot(args: &GcRootArgs) -> CliResult {
    super::needs_live("--freeze", args.freeze, &args.target)?;
    let rt = args.target.open(&args.descriptor)?;
    let freeze = match args.target.pid.filter(|_| args.freeze) {
        Some(pid) => Some(freeze_between_collections(&rt, pid)?),
        None => None,
    };
    if let Some(why) = super::obj::not_an_object(&rt, args.address) {
        return Err(why.into());
    }
    let roots = RootSet::read_with(
        &rt,
        RootOptions {
            stacks: (!args.no_stacks).then_some(LiveRegisters::Stop),
        },
    )?;
    let mut counts = std::collections::BTreeMap::new();
    for r in &roots.roots {
        *counts.entry(r.kind.name().to_string()).or_insert(0u64) += 1;
    }
    let problems = roots.problems.clone();
    let threads_stopped = if freeze.is_some() {
        None
    } else {
        super::model::PausesReport::tell(roots.pauses)
    };
    let interior_skipped = roots.interior_skipped;
    let interior_resolved = roots.interior_resolved;
    let not_read = not_read(&roots);
    let mut marker = Marker::new(&rt, roots)?;
    let path = marker.path_to(args.address);
    let mut inspector = Inspector::new(&rt)?;
    let all_paths = args.all.then(|| {
        marker
            .paths_to(args.address, args.max_paths)
            .iter()
            .map(|p| path_report(&mut inspector, p))
            .collect::<Vec<_>>()
    });
    let first = path.as_ref().map(|p| path_report(&mut inspector, p));
    let frozen = super::model::FrozenReport::tell(freeze.map(|f| f.release()));
    let report = GcRootReport {
        target: Addr(args.address),
        found: path.is_some(),
        root: first.as_ref().map(|p| p.root.clone()),
        path: first.map(|p| p.path).unwrap_or_default(),
        all_paths,
        roots: counts,
        objects_marked: marker.summary().marked,
        roots_not_read: not_read.clone(),
        interior_stack_slots_resolved: interior_resolved,
        interior_stack_slots_skipped: interior_skipped,
        problems,
        threads_stopped,
        frozen,
    };
    if args.json {
        super::emit_json(&report)?;
        return Ok(outcome(&report));
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match (&report.root, &report.all_paths) {
        (Some(_), Some(all)) => {
            for (i, p) in all.iter().enumerate() {
                if i > 0 {
                    writeln!(out)?;
                }
                print_path(&mut out, &p.root, &p.path)?;
            }
            writeln!(
                out,
                "{} path(s){}",
                all.len(),
                if all.len() >= args.max_paths {
                    format!(" (--max-paths {}: there may be more)", args.max_paths)
                } else {
                    String::new()
                }
            )?;
        }
        (Some(root), None) => print_path(&mut out, root, &report.path)?,
        _ => writeln!(
            out,
            "no root read by cdac reaches {} ({} objects reachable from them)",
            hex(args.address),
            report.objects_marked
        )?,
    }
    writeln!(out, "roots not read yet: {}", not_read.join(", "))?;
    for p in &report.problems {
        writeln!(out, "problem: {p}")?;
    }
    out.flush()?;
    Ok(outcome(&report))
}

/// A path as reported: its root and each step named by the field that refers to it.
fn path_report(inspector: &mut Inspector<'_>, p: &RootPath) -> PathReport {
    let (thread, frame) = match p.root.kind {
        RootKind::Stack { thread, frame } => (Some(thread), Some(frame)),
        RootKind::ThreadStatic { thread } => (Some(thread), None),
        _ => (None, None),
    };
    let mut steps = Vec::new();
    let mut previous: Option<u64> = None;
    for s in &p.steps {
        let via = match (s.via, previous) {
            (Via::Root, _) => "root".to_string(),
            (Via::Dependent, _) => "dependent".to_string(),
            (Via::Slot(offset), Some(parent)) => field_name(inspector, parent, offset),
            (Via::Slot(offset), None) => format!("+{offset:#x}"),
        };
        steps.push(StepReport {
            address: Addr(s.object),
            type_name: inspector.type_name(s.method_table),
            via,
        });
        previous = Some(s.object);
    }
    PathReport {
        root: RootReport {
            kind: p.root.kind.name().to_string(),
            address: Addr(p.root.address),
            thread,
            frame,
            description: p.root.kind.describe().to_string(),
        },
        path: steps,
    }
}

/// Prints a root and its path, one object per line.
fn print_path(out: &mut impl Write, root: &RootReport, path: &[StepReport]) -> std::io::Result<()> {
    match (root.thread, root.frame) {
        (Some(thread), Some(frame)) => writeln!(
            out,
            "{} {} (thread {thread}, frame #{frame})",
            root.description,
            if root.address.0 == 0 {
                "(register)".to_string()
            } else {
                hex(root.address.0)
            }
        )?,
        (Some(thread), None) => writeln!(
            out,
            "{} {} (thread {thread})",
            root.description,
            hex(root.address.0)
        )?,
        _ => writeln!(out, "{} {}", root.description, hex(root.address.0))?,
    }
    for s in path {
        writeln!(
            out,
            "  -> {} {}{}",
            hex(s.address.0),
            s.type_name,
            match s.via.as_str() {
                "root" => String::new(),
                v => format!("  (via {v})"),
            }
        )?;
    }
    Ok(())
}

/// Exit 1 when no root read reaches the object (a root not read might).
fn outcome(report: &GcRootReport) -> Outcome {
    if report.found {
        Outcome::Answered
    } else {
        Outcome::Partial(format!(
            "no root read reaches {:#x} (some roots are not read: {})",
            report.target.0,
            report.roots_not_read.join(", ")
        ))
    }
}

/// The name of the field or element of `parent` at `offset` from its start.
fn field_name(inspector: &mut Inspector<'_>, parent: u64, offset: u64) -> String {
    let view = match inspector.inspect(
        parent,
        InspectOptions {
            max_elements: 0,
            statics: false,
        },
    ) {
        Ok(v) => v,
        Err(_) => return format!("+{offset:#x}"),
    };
    if let Some(a) = &view.array {
        let at = parent + offset;
        // Statics live in object[]s held by handles: name the static field.
        if let Some(name) = inspector.static_at(at) {
            return format!("static {name}");
        }
        if a.component_size > 0 && at >= a.data {
            let index = (at - a.data) / u64::from(a.component_size);
            let within = (at - a.data) % u64::from(a.component_size);
            return if within == 0 {
                format!("[{index}]")
            } else {
                format!("[{index}]+{within:#x}")
            };
        }
    }
    find_field(&view.fields, parent + offset).unwrap_or_else(|| format!("+{offset:#x}"))
}

/// The dotted name of the field stored at `address`, looking inside structs.
fn find_field(fields: &[FieldView], address: u64) -> Option<String> {
    for f in fields {
        if f.address == address && !matches!(f.value, Value::Struct { .. }) {
            return Some(f.name.clone());
        }
        if let Value::Struct { fields: inner, .. } = &f.value {
            if let Some(n) = find_field(inner, address) {
                return Some(format!("{}.{n}", f.name));
            }
        }
    }
    None
}
