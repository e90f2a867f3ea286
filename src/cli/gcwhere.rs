//! `cdac gcwhere ADDR` (like SOS `gcwhere`): where an address lies in the GC heap: its
//! heap, segment (region), generation and the segment's ranges, and whether it is an
//! object's start, inside one (which), free space or space not yet allocated.

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::code::parse_address;
use super::model::Addr;
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::contracts::gc::{walk, GcSegment, SegmentKind};
use cdac::heap::Location;

/// Arguments of `cdac gcwhere`.
#[derive(Debug, Args)]
pub struct GcWhereArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// The address.
    #[arg(value_name = "ADDR", value_parser = parse_address)]
    address: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac gcwhere --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GcWhereReport {
    /// The address asked about.
    pub address: Addr,
    /// The segment holding it; absent when it is in no segment of the GC heap.
    pub segment: Option<SegmentPlace>,
    /// `object` (an object starts here), `inside` (past an object's start), `free` (in
    /// space the GC reclaimed), `unallocated` (in the segment, in no object) or
    /// `outside_heap`.
    pub place: String,
    /// The object it is or lies in (`object` and `inside`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectPlace>,
}

/// A segment (region) and where the address falls in it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SegmentPlace {
    /// The GC heap's number (0 under workstation GC).
    pub heap: usize,
    /// The segment's `heap_segment`.
    pub address: Addr,
    /// `gen0`, `gen1`, `gen2`, `ephemeral`, `loh`, `poh` or `frozen`.
    pub kind: String,
    /// The generation of an object at the address (`gen0`…`frozen`).
    pub generation: String,
    /// Where its objects start.
    pub objects_start: Addr,
    /// Where its allocated objects end.
    pub allocated: Addr,
    /// The end of its committed memory.
    pub committed: Addr,
    /// The end of its reserved range.
    pub reserved: Addr,
}

/// An object the address is, or is inside.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ObjectPlace {
    /// Its start.
    pub address: Addr,
    /// Its MethodTable.
    pub method_table: Addr,
    /// Its type.
    pub type_name: String,
    /// Its size in bytes.
    pub size: u64,
    /// How far into it the address is.
    pub offset: u64,
}

/// Runs `cdac gcwhere`.
pub fn run_gcwhere(args: &GcWhereArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let layout = cdac::heap::layout(&rt)?;
    let address = args.address;
    let segment = cdac::heap::segment_holding(&layout.segments, address).map(|s: &GcSegment| {
        // Past the objects (the segment's unused part) an object would be of the
        // segment's own generation; in the ephemeral segment (segments GC), gen0.
        let generation = match walk::locate(std::slice::from_ref(s), &layout.heaps, address) {
            Some((_, g)) => g.name(),
            None if s.kind == SegmentKind::Ephemeral => "gen0",
            None => walk::locate(std::slice::from_ref(s), &layout.heaps, s.start)
                .map_or(s.kind.name(), |(_, g)| g.name()),
        };
        SegmentPlace {
            heap: s.heap,
            address: Addr(s.segment.address),
            kind: s.kind.name().to_string(),
            generation: generation.to_string(),
            objects_start: Addr(s.start),
            allocated: Addr(s.end),
            committed: Addr(s.segment.committed),
            reserved: Addr(s.segment.reserved),
        }
    });
    let location = cdac::heap::locate(&rt, address)?;
    let mut namer = cdac::names::MethodNamer::for_runtime(&rt);
    let mut object = |start: u64, method_table: u64, size: u64| ObjectPlace {
        address: Addr(start),
        method_table: Addr(method_table),
        type_name: namer
            .type_name(method_table)
            .unwrap_or_else(|| format!("<MethodTable {method_table:#x}>")),
        size,
        offset: address - start,
    };
    let (place, object) = match location {
        Location::Object { method_table, size } => {
            ("object", Some(object(address, method_table, size)))
        }
        Location::Inside {
            object: start,
            method_table,
            size,
        } => ("inside", Some(object(start, method_table, size))),
        Location::Free { .. } => ("free", None),
        Location::Unallocated => ("unallocated", None),
        Location::OutsideHeap => ("outside_heap", None),
    };
    let report = GcWhereReport {
        address: Addr(address),
        segment,
        place: place.to_string(),
        object,
    };
    let outcome = if report.segment.is_some() {
        Outcome::Answered
    } else {
        Outcome::Partial(format!("{} is not in the GC heap", hex(address)))
    };
    if args.json {
        super::emit_json(&report)?;
        return Ok(outcome);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Some(s) = &report.segment {
        writeln!(
            out,
            "{:<18} {:>4}  {:<18} {:<10} {:<37} {:<18} Reserved",
            "Address", "Heap", "Segment", "Generation", "Objects (start-allocated)", "Committed",
        )?;
        writeln!(
            out,
            "{:<18} {:>4}  {:<18} {:<10} {:<37} {:<18} {}",
            hex(address),
            s.heap,
            hex(s.address.0),
            s.generation,
            format!("{}-{}", hex(s.objects_start.0), hex(s.allocated.0)),
            hex(s.committed.0),
            hex(s.reserved.0)
        )?;
    }
    match (&report.object, report.place.as_str()) {
        (Some(o), "object") => writeln!(
            out,
            "{} is an object: {} ({} bytes)",
            hex(address),
            o.type_name,
            o.size
        )?,
        (Some(o), _) => writeln!(
            out,
            "{} lies {} bytes into {} at {} ({} bytes)",
            hex(address),
            o.offset,
            o.type_name,
            hex(o.address.0),
            o.size
        )?,
        (None, "free") => writeln!(out, "{} lies in free space", hex(address))?,
        (None, "unallocated") => writeln!(
            out,
            "{} lies in the segment but in no object (space not allocated yet)",
            hex(address)
        )?,
        _ => writeln!(out, "{} is not in the GC heap", hex(address))?,
    }
    out.flush()?;
    Ok(outcome)
}
