//! `cdac handles` (every GC handle, like SOS `gchandles`) and `cdac finalizequeue` (the
//! finalization queues, like SOS `finalizequeue`).

use std::collections::BTreeMap;
use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{nonzero, Addr};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::names::MethodNamer;
use cdac::runtime::Runtime;

/// Arguments of `cdac handles`.
#[derive(Debug, Args)]
pub struct HandlesArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Only the number of handles of each kind.
    #[arg(long)]
    stat: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac handles --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HandlesReport {
    /// Handles of each kind (`strong`, `pinned`, `weak_short`, `dependent`, ...).
    pub counts: BTreeMap<String, u64>,
    /// Every handle in use (absent with `--stat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handles: Option<Vec<HandleReport>>,
}

/// One handle.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HandleReport {
    /// The handle (what `GCHandle.ToIntPtr` gives).
    pub address: Addr,
    /// Its kind.
    pub kind: String,
    /// Whether it keeps its object alive.
    pub strong: bool,
    /// The object.
    pub object: Addr,
    /// The object's type.
    pub type_name: String,
    /// A dependent handle's secondary object (or a weak interior pointer's address).
    pub secondary: Option<Addr>,
}

/// The type name of the object at `object` (its MethodTable named once per MethodTable).
struct ObjectNamer<'a> {
    rt: &'a Runtime,
    namer: MethodNamer,
    names: std::collections::HashMap<u64, String>,
    /// Objects that are no objects: unreadable, or their MethodTable pointer leads to no
    /// readable MethodTable (damage in a dump).
    damaged: Vec<u64>,
}

impl<'a> ObjectNamer<'a> {
    fn new(rt: &'a Runtime) -> ObjectNamer<'a> {
        ObjectNamer {
            rt,
            namer: MethodNamer::for_runtime(rt),
            names: std::collections::HashMap::new(),
            damaged: Vec::new(),
        }
    }

    fn name(&mut self, object: u64) -> String {
        let mt = match self
            .rt
            .contracts()
            .threads()
            .and_then(|t| t.method_table_of(object))
        {
            Ok(mt) => mt,
            Err(e) => {
                let live = matches!(
                    self.rt.target().source().kind(),
                    cdac::memory::TargetKind::Live { .. }
                );
                if object != 0 && !live {
                    self.damaged.push(object);
                }
                return format!("<unreadable object: {e}>");
            }
        };
        let namer = &mut self.namer;
        let rt = self.rt;
        let name = self.names.entry(mt).or_insert_with(|| {
            namer.type_name(mt).unwrap_or_else(|| {
                let readable = cdac::contracts::runtime_type_system::method_table_info(
                    rt.target(),
                    rt.descriptor(),
                    mt,
                )
                .is_ok();
                if readable {
                    format!("<MethodTable {mt:#x}>")
                } else {
                    format!("<not an object: {mt:#x} is no readable MethodTable>")
                }
            })
        });
        if name.starts_with("<not an object") {
            // A running process moves and frees objects while the queue or the handle
            // table is read: an entry read just before its object went away is not damage.
            let live = matches!(
                self.rt.target().source().kind(),
                cdac::memory::TargetKind::Live { .. }
            );
            if live {
                return format!("<changed while read (the process runs): {mt:#x}>");
            }
            self.damaged.push(object);
        }
        name.clone()
    }

    /// The outcome of a listing whose objects this namer named.
    fn outcome(&self) -> Outcome {
        match self.damaged.as_slice() {
            [] => Outcome::Answered,
            some => Outcome::Partial(format!(
                "{} object(s) are not objects (damaged?), the first at {:#x}",
                some.len(),
                some[0]
            )),
        }
    }
}

/// Runs `cdac handles`.
pub fn run_handles(args: &HandlesArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let handles = rt.contracts().gc()?.handles()?;
    let mut counts = BTreeMap::new();
    for h in &handles {
        *counts.entry(h.kind.name()).or_insert(0u64) += 1;
    }
    let mut namer = ObjectNamer::new(&rt);
    let list = (!args.stat).then(|| {
        handles
            .iter()
            .map(|h| HandleReport {
                address: Addr(h.address),
                kind: h.kind.name(),
                strong: h.kind.is_strong(),
                object: Addr(h.object),
                type_name: namer.name(h.object),
                secondary: nonzero(h.secondary),
            })
            .collect::<Vec<_>>()
    });
    let report = HandlesReport {
        counts,
        handles: list,
    };
    if args.json {
        super::emit_json(&report)?;
        return Ok(namer.outcome());
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Some(list) = &report.handles {
        writeln!(
            out,
            "{:<18} {:<22} {:<18} {:<18} type",
            "handle", "kind", "object", "secondary"
        )?;
        for h in list {
            writeln!(
                out,
                "{:<18} {:<22} {:<18} {:<18} {}",
                hex(h.address.0),
                h.kind,
                hex(h.object.0),
                h.secondary.as_ref().map_or("-".to_string(), |s| hex(s.0)),
                h.type_name
            )?;
        }
        writeln!(out)?;
    }
    for (kind, n) in &report.counts {
        writeln!(out, "{n:>8} {kind}")?;
    }
    writeln!(out, "{:>8} handle(s)", handles.len())?;
    out.flush()?;
    Ok(namer.outcome())
}

/// Arguments of `cdac finalizequeue`.
#[derive(Debug, Args)]
pub struct FinalizeQueueArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// List every entry (heap, part, object, type) instead of counts per type.
    #[arg(long)]
    objects: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac finalizequeue --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FinalizeQueueReport {
    /// Entries per part of the queues: `gen0`, `gen1`, `gen2`, `loh`, `poh` (registered for
    /// finalization), `ready_critical` and `ready` (dead, waiting for their finalizer).
    pub parts: BTreeMap<String, u64>,
    /// Objects registered for finalization (every generation).
    pub registered: u64,
    /// Objects ready for finalization (roots until their finalizer has run).
    pub ready: u64,
    /// Registered and ready objects per type, smallest count first.
    pub types: Vec<FinalizerTypeReport>,
    /// Every entry (`--objects`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<FinalizerEntryReport>>,
}

/// Objects of one type in the queues.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FinalizerTypeReport {
    /// The type's name.
    pub type_name: String,
    /// Registered objects of it.
    pub registered: u64,
    /// Ready objects of it.
    pub ready: u64,
}

/// One queue entry.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FinalizerEntryReport {
    /// The heap.
    pub heap: usize,
    /// The part of its queue.
    pub part: String,
    /// The object.
    pub object: Addr,
    /// Its type.
    pub type_name: String,
}

/// Runs `cdac finalizequeue`.
pub fn run_finalizequeue(args: &FinalizeQueueArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let entries = rt.contracts().gc()?.finalizer_entries()?;
    let mut namer = ObjectNamer::new(&rt);
    let mut parts: BTreeMap<String, u64> = BTreeMap::new();
    let mut types: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut list = Vec::new();
    let (mut registered, mut ready) = (0u64, 0u64);
    for e in &entries {
        *parts.entry(e.part.name().to_string()).or_insert(0) += 1;
        let name = namer.name(e.object);
        let t = types.entry(name.clone()).or_insert((0, 0));
        if e.part.is_ready() {
            ready += 1;
            t.1 += 1;
        } else {
            registered += 1;
            t.0 += 1;
        }
        if args.objects {
            list.push(FinalizerEntryReport {
                heap: e.heap,
                part: e.part.name().to_string(),
                object: Addr(e.object),
                type_name: name,
            });
        }
    }
    let mut types: Vec<FinalizerTypeReport> = types
        .into_iter()
        .map(|(type_name, (registered, ready))| FinalizerTypeReport {
            type_name,
            registered,
            ready,
        })
        .collect();
    types.sort_by(|a, b| {
        (a.registered + a.ready, &a.type_name).cmp(&(b.registered + b.ready, &b.type_name))
    });
    let report = FinalizeQueueReport {
        parts,
        registered,
        ready,
        types,
        entries: args.objects.then_some(list),
    };
    if args.json {
        super::emit_json(&report)?;
        return Ok(namer.outcome());
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Some(list) = &report.entries {
        writeln!(out, "{:<5} {:<15} {:<18} type", "heap", "part", "object")?;
        for e in list {
            writeln!(
                out,
                "{:<5} {:<15} {:<18} {}",
                e.heap,
                e.part,
                hex(e.object.0),
                e.type_name
            )?;
        }
    } else {
        writeln!(out, "{:>10} {:>10} type", "registered", "ready")?;
        for t in &report.types {
            writeln!(out, "{:>10} {:>10} {}", t.registered, t.ready, t.type_name)?;
        }
    }
    let part = |p: &str| report.parts.get(p).copied().unwrap_or(0);
    writeln!(
        out,
        "{} registered for finalization (gen0 {}, gen1 {}, gen2 {}, loh {}, poh {}); {} ready for finalization",
        report.registered,
        part("gen0"),
        part("gen1"),
        part("gen2"),
        part("loh"),
        part("poh"),
        report.ready
    )?;
    out.flush()?;
    Ok(namer.outcome())
}
