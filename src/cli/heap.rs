//! `cdac heap`: the managed heap. `--segments` lists the GC's heaps and segments (like
//! SOS `eeheap -gc`).

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::Addr;
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::contracts::gc::{DacVarsSource, GcHeap, GcSegment};

/// Arguments of `cdac heap`.
#[derive(Debug, Args)]
pub struct HeapArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// List the GC's heaps and segments (regions): kind, object range, committed and
    /// reserved memory, like SOS `eeheap -gc`.
    #[arg(long)]
    segments: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac heap --segments --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SegmentsReport {
    /// How the GC was built and configured.
    pub gc: GcReport,
    /// The heaps (one under workstation GC).
    pub heaps: Vec<HeapReport>,
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
    /// Dynamic adaptation (DATAS) on.
    pub dynamic_adaptation: bool,
    /// The GC/DAC interface version, "major.minor".
    pub interface_version: String,
    /// Address of the GC's `GcDacVars`.
    pub dac_vars: Addr,
    /// The `g_dacTable` slot that leads to it.
    pub dac_table_slot: u64,
    /// True when the slot was found by searching the table, not where the descriptor said.
    pub found_by_search: bool,
    /// `gc_structures_invalid_cnt`: not 0 while a GC rearranged the heap (a walk may then
    /// be wrong).
    pub structures_invalid_count: i32,
}

/// One heap.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HeapReport {
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
    let rt = args.target.open(&args.descriptor)?;
    let gc = rt.contracts().gc()?;
    // Only the segment list exists so far; it is what a plain `cdac heap` shows too.
    let _ = args.segments;
    segments(gc, args.json)
}

/// `--segments`.
fn segments(gc: &GcHeap, json: bool) -> CliResult {
    let heaps = gc.heaps()?;
    let segments = gc.segments()?;
    let ids = gc.identifiers();
    let vars = gc.dac_vars();
    let invalid = gc.structures_invalid_count()?;
    let report = SegmentsReport {
        gc: GcReport {
            server: ids.server,
            regions: ids.regions,
            dynamic_adaptation: ids.dynamic_adaptation,
            interface_version: format!("{}.{}", vars.major, vars.minor),
            dac_vars: Addr(vars.address),
            dac_table_slot: gc.source().slot(),
            found_by_search: matches!(gc.source(), DacVarsSource::Search { .. }),
            structures_invalid_count: invalid,
        },
        heaps: heaps
            .iter()
            .map(|h| HeapReport {
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
    writeln!(
        out,
        "GC: {}, {}{}; GC/DAC interface {} at {} (g_dacTable slot {}{})",
        if g.server { "server" } else { "workstation" },
        if g.regions { "regions" } else { "segments" },
        if g.dynamic_adaptation { ", DATAS" } else { "" },
        g.interface_version,
        hex(g.dac_vars.0),
        g.dac_table_slot,
        if g.found_by_search {
            ", found by search"
        } else {
            ""
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
