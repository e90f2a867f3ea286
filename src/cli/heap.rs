//! `cdac heap`: the managed heap. By default, objects per type (like SOS `dumpheap
//! -stat`); `--objects` lists them; `--segments` lists the GC's heaps and segments (like
//! SOS `eeheap -gc`).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use regex::Regex;
use schemars::JsonSchema;
use serde::Serialize;

use super::code::parse_address;
use super::model::{Addr, HeapReadsReport};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs, UsageError};
use cdac::contracts::gc::{
    DacVarsSource, GcHeap, GcSegment, GcSource, HeapObject, ObjectGeneration,
};
use cdac::heap::{self as managed_heap, HeapStats};
use cdac::names::MethodNamer;
use cdac::roots::{Marker, RootOptions, RootSet};
use cdac::runtime::Runtime;
use cdac::stacks::LiveRegisters;

/// Arguments of `cdac heap`.
#[derive(Debug, Args)]
pub struct HeapArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// List the GC's heaps and segments (regions): kind, object range, committed and
    /// reserved memory, like SOS `eeheap -gc`.
    #[arg(long, conflicts_with_all = ["objects", "stat"])]
    segments: bool,
    /// Objects per type: count and total size, smallest total first (the default).
    #[arg(long, conflicts_with = "objects")]
    stat: bool,
    /// List every object (address, MethodTable, size, generation, type) instead.
    #[arg(long)]
    objects: bool,
    /// Only objects whose type name matches this regular expression.
    #[arg(long = "type", value_name = "REGEX")]
    type_filter: Option<String>,
    /// Only objects of this MethodTable.
    #[arg(long, value_name = "ADDR", value_parser = parse_address)]
    mt: Option<u64>,
    /// Only objects of this generation.
    #[arg(long, value_enum)]
    gen: Option<GenArg>,
    /// Only objects of at least this many bytes.
    #[arg(long, value_name = "BYTES", value_parser = super::parse_amount)]
    min_size: Option<u64>,
    /// Only objects of at most this many bytes.
    #[arg(long, value_name = "BYTES", value_parser = super::parse_amount)]
    max_size: Option<u64>,
    /// Also report fragmentation: free bytes per generation, and free blocks of 512 KiB or
    /// more followed by a live object (what SOS's dumpheap -stat lists as fragmented).
    #[arg(long)]
    free: bool,
    /// Only objects reachable from the roots cdac reads (every thread's stack frames,
    /// strong and pinned handles, the finalizer queue; not thread statics nor explicit
    /// Frames, so objects only those hold are left out).
    #[arg(long)]
    live: bool,
    /// With `--live`: do not read stack roots (on a live process, reading them stops each
    /// thread for a moment, as `stacks` does).
    #[arg(long, requires = "live")]
    no_stacks: bool,
    /// On a live process: hold every thread stopped for the whole walk, so that no
    /// collection or allocation changes the heap under it, and say for how long. Without
    /// it nothing is stopped for the walk, and the heap is read again while collections run.
    #[arg(long)]
    freeze: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `--gen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum GenArg {
    #[value(name = "0")]
    Gen0,
    #[value(name = "1")]
    Gen1,
    #[value(name = "2")]
    Gen2,
    Loh,
    Poh,
    Frozen,
}

impl GenArg {
    fn generation(self) -> ObjectGeneration {
        match self {
            GenArg::Gen0 => ObjectGeneration::Gen0,
            GenArg::Gen1 => ObjectGeneration::Gen1,
            GenArg::Gen2 => ObjectGeneration::Gen2,
            GenArg::Loh => ObjectGeneration::Loh,
            GenArg::Poh => ObjectGeneration::Poh,
            GenArg::Frozen => ObjectGeneration::Frozen,
        }
    }
}

/// `cdac heap --segments --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SegmentsReport {
    /// How the GC was built and configured.
    pub gc: GcReport,
    /// The heaps (one under workstation GC).
    pub heaps: Vec<GcHeapReport>,
    /// Every segment, heap by heap: gen0, gen1, gen2 and frozen, LOH, POH.
    pub segments: Vec<SegmentReport>,
}

/// The GC's flavour and where its table for debuggers is.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GcReport {
    /// Server GC (else workstation).
    pub server: bool,
    /// Regions (else segments).
    pub regions: bool,
    /// Dynamic adaptation (DATAS) on; null where the GC does not say (server GC on .NET 8
    /// and 9).
    pub dynamic_adaptation: Option<bool>,
    /// Where the GC was described: "GcDacVars" (its table for debuggers, .NET 8 to 10) or
    /// "sub-descriptor" (.NET 11's GC contract).
    pub described_by: String,
    /// The GC/DAC interface version, "major.minor" (the table's only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface_version: Option<String>,
    /// Address of the GC's `GcDacVars` (the table's only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dac_vars: Option<Addr>,
    /// The `g_dacTable` slot that leads to it (the table's only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dac_table_slot: Option<u64>,
    /// True when the slot was found by searching the table, not where the descriptor said.
    pub found_by_search: bool,
    /// `gc_structures_invalid_cnt`: not 0 while a GC rearranged the heap (a walk may then
    /// be wrong).
    pub structures_invalid_count: i32,
}

/// One heap.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GcHeapReport {
    /// Its index.
    pub index: usize,
    /// The server `gc_heap` (absent under workstation GC).
    pub address: Option<Addr>,
    /// Where allocation in the ephemeral segment ends.
    pub alloc_allocated: Addr,
    /// The segment allocation happens in.
    pub ephemeral_segment: Addr,
    /// Its finalization queue.
    pub finalize_queue: Addr,
}

/// One segment (region).
#[derive(Debug, Serialize, JsonSchema)]
pub struct SegmentReport {
    /// The heap that owns it.
    pub heap: usize,
    /// gen0, gen1, gen2, ephemeral, loh, poh or frozen.
    pub kind: String,
    /// Its `heap_segment` record.
    pub segment: Addr,
    /// First object.
    pub start: Addr,
    /// End of its objects.
    pub end: Addr,
    /// End of its committed memory.
    pub committed: Addr,
    /// End of its reserved memory.
    pub reserved: Addr,
    /// `heap_segment` flags.
    pub flags: u64,
    /// Bytes of objects (`end - start`).
    pub size: u64,
}

/// Runs `cdac heap`.
pub fn run_heap(args: &HeapArgs) -> CliResult {
    let type_filter = args
        .type_filter
        .as_deref()
        .map(Regex::new)
        .transpose()
        .map_err(|e| UsageError(format!("--type: {e}")))?;
    super::needs_live("--freeze", args.freeze, &args.target)?;
    let rt = args.target.open(&args.descriptor)?;
    let gc = rt.contracts().gc()?;
    // A filter no object can pass is a mistake worth a word, not an empty answer.
    if let Some(mt) = args.mt {
        if cdac::names::MethodNamer::for_runtime(&rt)
            .type_name(mt)
            .is_none()
        {
            status!(
                "cdac: warning: {} is not a MethodTable cdac can read (`cdac mt {}` says why): no object will match --mt",
                super::hex(mt),
                super::hex(mt)
            );
        }
    }
    if args.segments {
        return segments(gc, args.json);
    }
    walk(&rt, args, type_filter.as_ref())
}

/// `cdac heap --stat --json` and `cdac heap --objects --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HeapReport {
    /// Objects walked that passed the filters.
    pub objects: u64,
    /// Their total size in bytes.
    pub total_size: u64,
    /// Per type, smallest total size first (`--stat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<TypeReport>>,
    /// Each object (`--objects`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_list: Option<Vec<ObjectReport>>,
    /// Segments whose walk stopped before their end, and why.
    pub problems: Vec<ProblemReport>,
    /// Segments walked.
    pub segments: usize,
    /// Fragmentation (`--free`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fragmentation: Option<FragmentationReport>,
    /// The mark behind `--live`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveReport>,
    /// The target was read while a garbage collection was moving objects
    /// (`gc_structures_invalid_cnt` not zero): objects may be missing or listed twice.
    pub gc_in_progress: bool,
    /// Threads whose allocation context could not be read (objects in it may be counted
    /// as garbage, or the walk may stop there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocation_context_errors: Vec<String>,
    /// How a live heap was read (absent on a dump).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads: Option<HeapReadsReport>,
}

/// The mark from the roots (`--live`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct LiveReport {
    /// Objects reachable from the roots read.
    pub marked: u64,
    /// Roots read.
    pub roots: u64,
    /// Roots not read yet: objects only they hold are not counted as live.
    pub roots_not_read: Vec<String>,
    /// Stack slots holding interior pointers, resolved to the object containing them.
    pub interior_stack_slots_resolved: u64,
    /// Stack slots holding interior pointers not followed (outside the GC heap, or in a
    /// segment too large to walk for them).
    pub interior_stack_slots_skipped: u64,
    /// Roots that could not be read (a thread without a stack, a damaged handle table):
    /// objects only they hold are not counted as live.
    pub root_problems: Vec<String>,
    /// How long reading the stack roots stopped a live process's threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads_stopped: Option<super::model::PausesReport>,
}

/// Free space on the heap (`--free`).
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct FragmentationReport {
    /// Per generation (`gen0` … `frozen`): bytes in free objects, and in all objects.
    pub generations: std::collections::BTreeMap<String, FreeBytes>,
    /// Free blocks of at least 512 KiB followed by a live object, which the GC cannot
    /// give back while that object stays.
    pub blocks: Vec<FreeBlock>,
}

/// Free and total bytes of one generation.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct FreeBytes {
    /// Bytes in free objects.
    pub free: u64,
    /// Bytes in all objects, free ones included.
    pub total: u64,
}

/// A large free block and the object after it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FreeBlock {
    /// The free object.
    pub address: Addr,
    /// Its size.
    pub size: u64,
    /// The live object after it.
    pub followed_by: Addr,
    /// That object's type.
    pub followed_by_type: String,
}

/// Objects of one type.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TypeReport {
    /// The type's MethodTable.
    pub method_table: Addr,
    /// Its name ("Free" for the gaps the GC filled).
    pub name: String,
    /// Number of objects.
    pub count: u64,
    /// Their total size in bytes (unaligned sizes, as SOS adds them).
    pub total_size: u64,
}

/// One object.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ObjectReport {
    /// Its address.
    pub address: Addr,
    /// Its MethodTable.
    pub method_table: Addr,
    /// Its size in bytes (unaligned).
    pub size: u64,
    /// gen0, gen1, gen2, loh, poh or frozen.
    pub generation: String,
    /// Its type's name.
    pub name: String,
}

/// Where a segment's walk met damage, and where it went on.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProblemReport {
    /// The segment's first object.
    pub segment_start: Addr,
    /// Where the walk met the damage.
    pub address: Addr,
    /// Why.
    pub detail: String,
    /// Where objects parse again and the walk went on (null: the rest of the segment was
    /// skipped).
    pub resumed_at: Option<Addr>,
    /// Bytes of the segment skipped: objects in them are not counted.
    pub skipped_bytes: u64,
}

/// A free block at least this large, followed by a live object, counts as fragmentation
/// (the threshold SOS uses).
const FRAGMENT_BYTES: u64 = 512 * 1024;

/// Progress on standard error, when it is a terminal and the walk takes over a second.
struct Progress {
    started: Instant,
    shown: bool,
    terminal: bool,
}

impl Progress {
    fn tick(&mut self, objects: u64) {
        if self.terminal
            && objects % (1 << 20) == 0
            && self.started.elapsed() > Duration::from_secs(1)
        {
            self.shown = true;
            let _ = write!(std::io::stderr(), "\rcdac: {objects} objects walked");
        }
    }

    fn finish(&self) {
        if self.shown {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// The walk: statistics per type (default) or the object list, with the filters; on a
/// live process read again while garbage collections run under it.
fn walk(rt: &Runtime, args: &HeapArgs, type_filter: Option<&Regex>) -> CliResult {
    let how = if args.freeze {
        managed_heap::Settle::Freeze
    } else {
        managed_heap::Settle::Retry
    };
    let settled = managed_heap::settled_with(
        rt,
        how,
        || read_walk(rt, args, type_filter),
        |r: &HeapReport| {
            r.problems.is_empty() && !r.gc_in_progress && r.allocation_context_errors.is_empty()
        },
    )?;
    let reads = HeapReadsReport::of(rt, &settled);
    let mut report = settled.value;
    report.reads = reads;
    super::model::PausesReport::say(
        report
            .live
            .as_ref()
            .and_then(|l| l.threads_stopped.as_ref()),
    );
    // A dump taken in the middle of a GC: said first, then walked as far as each segment's
    // objects can be trusted (a segment stops at the first that cannot).
    if report.gc_in_progress {
        status!(
            "cdac: warning: the target was taken while a garbage collection was moving objects (gc_structures_invalid_cnt not 0): the heap may be inconsistent, objects may be missing or listed twice"
        );
    }
    for e in &report.allocation_context_errors {
        status!("cdac: warning: the allocation context of {e}");
    }
    HeapReadsReport::tell(&report.reads);
    if args.json {
        super::emit_json(&report)?;
    } else {
        print_walk(&report)?;
    }
    const DAMAGE_SHOWN: usize = 5;
    for p in report.problems.iter().take(DAMAGE_SHOWN) {
        let went_on = match &p.resumed_at {
            Some(at) => format!(
                "went on at {} ({} bytes skipped)",
                hex(at.0),
                p.skipped_bytes
            ),
            None => format!(
                "skipped the rest of the segment ({} bytes)",
                p.skipped_bytes
            ),
        };
        status!(
            "cdac: warning: the walk of the segment at {} met damage at {}: {}; {went_on}",
            hex(p.segment_start.0),
            hex(p.address.0),
            p.detail
        );
    }
    if report.problems.len() > DAMAGE_SHOWN {
        status!(
            "cdac: warning: {} more damaged place(s) in the heap (--json lists them all)",
            report.problems.len() - DAMAGE_SHOWN
        );
    }
    Ok(if report.gc_in_progress {
        Outcome::Partial(
            "the heap could not be read consistently: a garbage collection was moving objects"
                .into(),
        )
    } else if let Some(lost) = report.live.as_ref().filter(|l| !l.root_problems.is_empty()) {
        for p in lost.root_problems.iter().take(5) {
            status!("cdac: warning: roots not read: {p}");
        }
        Outcome::Partial(format!(
            "{} problem(s) reading the roots: objects only they hold are not counted as live{}",
            lost.root_problems.len(),
            if report.problems.is_empty() {
                String::new()
            } else {
                format!("; {} damaged place(s) in the heap", report.problems.len())
            }
        ))
    } else if report.problems.is_empty() {
        Outcome::Answered
    } else {
        Outcome::Partial(format!(
            "{} damaged place(s) in the heap's {} segment(s): {} bytes skipped, their objects not counted",
            report.problems.len(),
            report.segments,
            report.problems.iter().map(|p| p.skipped_bytes).sum::<u64>()
        ))
    })
}

/// One read of the heap for [`walk`].
fn read_walk(
    rt: &Runtime,
    args: &HeapArgs,
    type_filter: Option<&Regex>,
) -> Result<HeapReport, Box<dyn std::error::Error>> {
    let layout = managed_heap::layout(rt)?;
    let in_gc = rt.contracts().gc()?.structures_invalid_count().unwrap_or(0);
    let mut namer = MethodNamer::for_runtime(rt);
    let mut names: std::collections::HashMap<u64, String> = std::collections::HashMap::new();
    let mut name_of = |mt: u64, is_free: bool| -> String {
        if is_free {
            return "Free".into();
        }
        names
            .entry(mt)
            .or_insert_with(|| {
                namer
                    .type_name(mt)
                    .unwrap_or_else(|| format!("<MethodTable {mt:#x}>"))
            })
            .clone()
    };
    // Filters on raw values apply during the walk; the name filter needs names, which are
    // made once per MethodTable.
    let keep_raw = |o: &HeapObject| {
        args.mt.is_none_or(|mt| o.method_table == mt)
            && args.gen.is_none_or(|g| o.generation == g.generation())
            && args.min_size.is_none_or(|m| o.size >= m)
            && args.max_size.is_none_or(|m| o.size <= m)
    };
    // --live: mark from the roots first; the walk then keeps marked objects only.
    let marker = if args.live {
        let roots = RootSet::read_with(
            rt,
            RootOptions {
                stacks: (!args.no_stacks).then_some(LiveRegisters::Stop),
            },
        )?;
        let mut m = Marker::new(rt, roots)?;
        m.mark_all();
        Some(m)
    } else {
        None
    };
    let keep_raw = |o: &HeapObject| {
        keep_raw(o)
            && marker
                .as_ref()
                .is_none_or(|m| !o.is_free && m.is_marked(o.address))
    };
    let mut stats = HeapStats::default();
    let mut objects: Vec<HeapObject> = Vec::new();
    let mut progress = Progress {
        started: Instant::now(),
        shown: false,
        terminal: std::io::stderr().is_terminal(),
    };
    let mut walked = 0u64;
    // --free: bytes per generation, and large free blocks with the object after them.
    let mut generations: std::collections::BTreeMap<String, FreeBytes> = Default::default();
    let mut large_free: Vec<(HeapObject, HeapObject)> = Vec::new();
    let mut previous_free: Option<HeapObject> = None;
    let summary = managed_heap::walk(rt, &layout, |o| {
        walked += 1;
        progress.tick(walked);
        if args.free {
            let g = generations
                .entry(o.generation.name().to_string())
                .or_default();
            g.total += o.size;
            if o.is_free {
                g.free += o.size;
            }
            if let Some(f) = previous_free.take() {
                if !o.is_free && f.segment == o.segment && f.size >= FRAGMENT_BYTES {
                    large_free.push((f, *o));
                }
            }
            if o.is_free {
                previous_free = Some(*o);
            }
        }
        if !keep_raw(o) {
            return;
        }
        if args.objects {
            objects.push(*o);
        } else {
            stats.add(o);
        }
    })?;
    progress.finish();
    let problems: Vec<ProblemReport> = summary
        .problems
        .iter()
        .map(|p| ProblemReport {
            segment_start: Addr(layout.segments.get(p.segment).map_or(0, |s| s.start)),
            address: Addr(p.address),
            detail: p.detail.clone(),
            resumed_at: p.resumed_at.map(Addr),
            skipped_bytes: p.skipped_bytes(layout.segments.get(p.segment).map_or(0, |s| s.end)),
        })
        .collect();
    let mut report = HeapReport {
        objects: 0,
        total_size: 0,
        types: None,
        object_list: None,
        problems,
        segments: layout.segments.len(),
        fragmentation: None,
        gc_in_progress: in_gc != 0,
        allocation_context_errors: layout
            .context_errors
            .iter()
            .map(|(thread, e)| format!("thread {}: {e}", hex(*thread)))
            .collect(),
        reads: None,
        live: marker.as_ref().map(|m| LiveReport {
            marked: m.summary().marked,
            roots: m.roots().roots.len() as u64,
            roots_not_read: super::gcroot::not_read(m.roots()),
            interior_stack_slots_resolved: m.roots().interior_resolved,
            interior_stack_slots_skipped: m.roots().interior_skipped,
            root_problems: m.roots().problems.clone(),
            // Under --freeze every thread was already held: the freeze's report says how long.
            threads_stopped: if args.freeze {
                None
            } else {
                super::model::PausesReport::of(m.roots().pauses)
            },
        }),
    };
    if args.free {
        let blocks = large_free
            .iter()
            .map(|(f, next)| FreeBlock {
                address: Addr(f.address),
                size: f.size,
                followed_by: Addr(next.address),
                followed_by_type: name_of(next.method_table, next.is_free),
            })
            .collect();
        report.fragmentation = Some(FragmentationReport {
            generations,
            blocks,
        });
    }
    if args.objects {
        let mut list = Vec::new();
        for o in &objects {
            let name = name_of(o.method_table, o.is_free);
            if type_filter.is_some_and(|re| !re.is_match(&name)) {
                continue;
            }
            report.objects += 1;
            report.total_size += o.size;
            list.push(ObjectReport {
                address: Addr(o.address),
                method_table: Addr(o.method_table),
                size: o.size,
                generation: o.generation.name().to_string(),
                name,
            });
        }
        report.object_list = Some(list);
    } else {
        let mut types = Vec::new();
        for s in stats.sorted() {
            let name = name_of(s.method_table, s.is_free);
            if type_filter.is_some_and(|re| !re.is_match(&name)) {
                continue;
            }
            report.objects += s.count;
            report.total_size += s.total_size;
            types.push(TypeReport {
                method_table: Addr(s.method_table),
                name,
                count: s.count,
                total_size: s.total_size,
            });
        }
        report.types = Some(types);
    }
    Ok(report)
}

fn print_walk(r: &HeapReport) -> Result<(), Box<dyn std::error::Error>> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Some(list) = &r.object_list {
        writeln!(
            out,
            "{:<18} {:<18} {:>10} {:<6} type",
            "address", "method table", "size", "gen"
        )?;
        for o in list {
            writeln!(
                out,
                "{:<18} {:<18} {:>10} {:<6} {}",
                hex(o.address.0),
                hex(o.method_table.0),
                o.size,
                o.generation,
                o.name
            )?;
        }
    }
    if let Some(types) = &r.types {
        writeln!(
            out,
            "{:<18} {:>10} {:>14} type",
            "method table", "count", "total size"
        )?;
        for t in types {
            writeln!(
                out,
                "{:<18} {:>10} {:>14} {}",
                hex(t.method_table.0),
                t.count,
                t.total_size,
                t.name
            )?;
        }
    }
    writeln!(out, "{} object(s), {} bytes", r.objects, r.total_size)?;
    if let Some(f) = &r.fragmentation {
        writeln!(out, "\nfree space per generation:")?;
        for (g, b) in &f.generations {
            let percent = if b.total == 0 {
                0.0
            } else {
                b.free as f64 * 100.0 / b.total as f64
            };
            writeln!(
                out,
                "  {g:<7} {:>14} of {:>14} bytes free ({percent:.1}%)",
                b.free, b.total
            )?;
        }
        writeln!(
            out,
            "free blocks of 512 KiB or more followed by a live object: {}",
            f.blocks.len()
        )?;
        for b in &f.blocks {
            writeln!(
                out,
                "  {} {:>12} bytes, followed by {} {}",
                hex(b.address.0),
                b.size,
                hex(b.followed_by.0),
                b.followed_by_type
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

/// `--segments`.
fn segments(gc: &GcHeap, json: bool) -> CliResult {
    let heaps = gc.heaps()?;
    let segments = gc.segments()?;
    let ids = gc.identifiers();
    let invalid = gc.structures_invalid_count()?;
    let (described_by, interface_version, dac_vars, dac_table_slot, found_by_search) =
        match gc.source() {
            GcSource::DacVars(vars, source) => (
                "GcDacVars",
                Some(format!("{}.{}", vars.major, vars.minor)),
                Some(Addr(vars.address)),
                source.slot(),
                matches!(source, DacVarsSource::Search { .. }),
            ),
            GcSource::SubDescriptor => ("sub-descriptor", None, None, None, false),
        };
    let report = SegmentsReport {
        gc: GcReport {
            server: ids.server,
            regions: ids.regions,
            dynamic_adaptation: ids.dynamic_adaptation,
            described_by: described_by.into(),
            interface_version,
            dac_vars,
            dac_table_slot,
            found_by_search,
            structures_invalid_count: invalid,
        },
        heaps: heaps
            .iter()
            .map(|h| GcHeapReport {
                index: h.index,
                address: (h.address != 0).then_some(Addr(h.address)),
                alloc_allocated: Addr(h.alloc_allocated),
                ephemeral_segment: Addr(h.ephemeral_heap_segment),
                finalize_queue: Addr(h.finalize_queue),
            })
            .collect(),
        segments: segments.iter().map(segment_report).collect(),
    };
    if json {
        super::emit_json(&report)?;
        return Ok(Outcome::Answered);
    }
    print_segments(&report)?;
    Ok(Outcome::Answered)
}

fn segment_report(s: &GcSegment) -> SegmentReport {
    SegmentReport {
        heap: s.heap,
        kind: s.kind.name().to_string(),
        segment: Addr(s.segment.address),
        start: Addr(s.start),
        end: Addr(s.end),
        committed: Addr(s.segment.committed),
        reserved: Addr(s.segment.reserved),
        flags: s.segment.flags,
        size: s.end.saturating_sub(s.start),
    }
}

fn print_segments(r: &SegmentsReport) -> Result<(), Box<dyn std::error::Error>> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let g = &r.gc;
    let described = match (&g.interface_version, g.dac_vars, g.dac_table_slot) {
        (Some(version), Some(vars), Some(slot)) => format!(
            "GC/DAC interface {version} at {} (g_dacTable slot {slot}{})",
            hex(vars.0),
            if g.found_by_search {
                ", found by search"
            } else {
                ""
            },
        ),
        _ => "described by the GC's sub-descriptor".to_string(),
    };
    writeln!(
        out,
        "GC: {}, {}{}; {described}",
        if g.server { "server" } else { "workstation" },
        if g.regions { "regions" } else { "segments" },
        match g.dynamic_adaptation {
            Some(true) => ", DATAS",
            Some(false) => "",
            None => ", DATAS not told (GC/DAC interface before 2.4)",
        },
    )?;
    if g.structures_invalid_count != 0 {
        writeln!(
            out,
            "warning: a GC was rearranging the heap (gc_structures_invalid_cnt {}): segment ends may be stale",
            g.structures_invalid_count
        )?;
    }
    for h in &r.heaps {
        writeln!(
            out,
            "\nheap {}{}: alloc_allocated {}, ephemeral segment {}, finalize queue {}",
            h.index,
            h.address
                .map(|a| format!(" ({})", hex(a.0)))
                .unwrap_or_default(),
            hex(h.alloc_allocated.0),
            hex(h.ephemeral_segment.0),
            hex(h.finalize_queue.0)
        )?;
        writeln!(
            out,
            "{:<9} {:<18} {:<18} {:<18} {:<18} {:<18} {:>12}",
            "kind", "segment", "begin", "allocated", "committed", "reserved", "size"
        )?;
        for s in r.segments.iter().filter(|s| s.heap == h.index) {
            writeln!(
                out,
                "{:<9} {:<18} {:<18} {:<18} {:<18} {:<18} {:>12}",
                s.kind,
                hex(s.segment.0),
                hex(s.start.0),
                hex(s.end.0),
                hex(s.committed.0),
                hex(s.reserved.0),
                s.size
            )?;
        }
    }
    let total: u64 = r.segments.iter().map(|s| s.size).sum();
    writeln!(
        out,
        "\n{} segment(s) in {} heap(s), {} bytes of objects",
        r.segments.len(),
        r.heaps.len(),
        total
    )?;
    out.flush()?;
    Ok(())
}
