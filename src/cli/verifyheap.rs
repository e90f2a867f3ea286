//! `cdac verifyheap` (like SOS `verifyheap`): every object of the GC heap and every
//! reference it holds checked; corruption reported by address.

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{Addr, HeapReadsReport};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::heap::{settled_with, Location, Settle};
use cdac::verify::{verify_heap, CorruptionKind};

/// Corruptions listed (all are counted).
const LISTED: usize = 1000;
/// Corruptions whose target is placed in its object by a segment walk (one walk each).
const PLACED: usize = 20;

/// Arguments of `cdac verifyheap`.
#[derive(Debug, Args)]
pub struct VerifyHeapArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// On a live process, read without stopping its threads. By default every thread is
    /// held for the check (and how long said): a check of a heap that collections move
    /// while it is read reports the moves as corruption.
    #[arg(long)]
    no_freeze: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac verifyheap --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct VerifyHeapReport {
    /// Objects checked (free objects included).
    pub objects: u64,
    /// Non-null references checked.
    pub references: u64,
    /// Segments walked.
    pub segments: usize,
    /// Corruptions found (at most 1,000 listed).
    pub corruptions: Vec<CorruptionReport>,
    /// Every corruption found.
    pub corruptions_total: u64,
    /// Objects whose references could not be read, so not checked.
    pub unreadable: u64,
    /// How a live heap was read (absent on a dump).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads: Option<HeapReadsReport>,
}

/// One corruption.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CorruptionReport {
    /// `bad_object`, `reference_to_free`, `reference_to_no_object` or
    /// `reference_outside_heap`.
    pub kind: String,
    /// The object holding the bad reference, or where the walk met a bad object.
    pub object: Addr,
    /// The bad reference's offset in the object.
    pub slot: Option<u64>,
    /// The bad reference.
    pub target: Option<Addr>,
    /// In words (for the first 20 references to no object: where the target lies).
    pub detail: String,
}

fn kind_name(k: CorruptionKind) -> &'static str {
    match k {
        CorruptionKind::BadObject => "bad_object",
        CorruptionKind::ReferenceToFree => "reference_to_free",
        CorruptionKind::ReferenceToNoObject => "reference_to_no_object",
        CorruptionKind::ReferenceOutsideHeap => "reference_outside_heap",
    }
}

/// Runs `cdac verifyheap`.
pub fn run_verifyheap(args: &VerifyHeapArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let how = if args.no_freeze {
        Settle::Retry
    } else {
        Settle::Freeze
    };
    let settled = settled_with(
        &rt,
        how,
        || verify_heap(&rt, LISTED).map_err(Box::<dyn std::error::Error>::from),
        |r| r.corruptions_total == 0,
    )?;
    let reads = HeapReadsReport::of(&rt, &settled);
    HeapReadsReport::tell(&reads);
    if reads.as_ref().is_some_and(|r| !r.consistent) {
        status!(
            "cdac: warning: the heap kept changing while it was checked: the corruptions listed may be objects moving, not damage (run without --no-freeze)"
        );
    }
    let v = settled.value;
    let mut namer = cdac::names::MethodNamer::for_runtime(&rt);
    let mut placed = 0;
    let corruptions: Vec<CorruptionReport> = v
        .corruptions
        .iter()
        .map(|c| {
            let mut detail = c.detail.clone();
            if let (CorruptionKind::ReferenceToNoObject, Some(t)) = (c.kind, c.target) {
                if placed < PLACED {
                    placed += 1;
                    if let Ok(Location::Inside {
                        object,
                        method_table,
                        ..
                    }) = cdac::heap::locate(&rt, t)
                    {
                        let name = namer
                            .type_name(method_table)
                            .unwrap_or_else(|| format!("<MethodTable {method_table:#x}>"));
                        detail.push_str(&format!(
                            " (it lies {} bytes into {name} at {object:#x})",
                            t - object
                        ));
                    }
                }
            }
            CorruptionReport {
                kind: kind_name(c.kind).to_string(),
                object: Addr(c.object),
                slot: c.slot,
                target: c.target.map(Addr),
                detail,
            }
        })
        .collect();
    let report = VerifyHeapReport {
        objects: v.objects,
        references: v.references,
        segments: v.segments,
        corruptions,
        corruptions_total: v.corruptions_total,
        unreadable: v.unreadable,
        reads,
    };
    let outcome = if report.corruptions_total == 0 && report.unreadable == 0 {
        Outcome::Answered
    } else if report.corruptions_total == 0 {
        Outcome::Partial(format!(
            "the references of {} object(s) could not be read, so were not checked",
            report.unreadable
        ))
    } else {
        Outcome::Partial(format!(
            "{} corruption(s) in the GC heap",
            report.corruptions_total
        ))
    };
    if args.json {
        super::emit_json(&report)?;
        return Ok(outcome);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for c in &report.corruptions {
        writeln!(out, "{}: {}", hex(c.object.0), c.detail)?;
    }
    if report.corruptions_total > report.corruptions.len() as u64 {
        writeln!(
            out,
            "... and {} more (the first {LISTED} are listed)",
            report.corruptions_total - report.corruptions.len() as u64
        )?;
    }
    writeln!(
        out,
        "{} objects and {} references checked in {} segments: {}",
        report.objects,
        report.references,
        report.segments,
        if report.corruptions_total == 0 {
            "no corruption found".to_string()
        } else {
            format!("{} corruption(s)", report.corruptions_total)
        }
    )?;
    out.flush()?;
    Ok(outcome)
}
