//! Checking the GC heap object by object (what SOS `verifyheap` does): every object's
//! MethodTable and size (the walk's own checks), and every reference every object holds:
//! it must be null or the start of an object on the heap. A reference to a free object, to
//! a place in a segment where no object starts, or outside the heap is corruption, named by
//! the object and slot that hold it.
//!
//! Two walks: the first records where objects (and free objects) start, one bit per 8
//! bytes of each segment (1/64 of the heap); the second reads each object's references
//! through its GC descriptor and looks each one up.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::contracts::fields::Fields;
use crate::contracts::gc::{GcDescCache, HeapObject};
use crate::contracts::ContractError;
use crate::heap::layout;
use crate::roots::mark::SegmentBits;
use crate::runtime::Runtime;

/// What is wrong at one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CorruptionKind {
    /// The walk met an object it could not parse (a MethodTable that is none, a length
    /// past the segment's end, unreadable memory).
    BadObject,
    /// A reference to a free object (space the GC reclaimed).
    ReferenceToFree,
    /// A reference into a segment where no object starts (inside an object, in space not
    /// allocated, or in damage the walk skipped).
    ReferenceToNoObject,
    /// A reference outside every segment of the GC heap.
    ReferenceOutsideHeap,
}

/// One corruption found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Corruption {
    /// What is wrong.
    pub kind: CorruptionKind,
    /// The object (or, for [`CorruptionKind::BadObject`], the place) where it was found.
    pub object: u64,
    /// The offset of the bad reference in the object.
    pub slot: Option<u64>,
    /// The bad reference.
    pub target: Option<u64>,
    /// Said in words.
    pub detail: String,
}

/// What [`verify_heap`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Objects checked (free objects included).
    pub objects: u64,
    /// Non-null references checked.
    pub references: u64,
    /// Segments walked.
    pub segments: usize,
    /// The corruptions found, at most the number asked for: the objects the walk could
    /// not parse first, then the bad references in address order within each segment.
    pub corruptions: Vec<Corruption>,
    /// Every corruption found, listed or not.
    pub corruptions_total: u64,
    /// Objects whose references could not be read (a MethodTable or GC descriptor that
    /// cannot be read, a slot in memory the target lacks): not checked.
    pub unreadable: u64,
}

/// Objects read at once for their references.
const MAX_OBJECT_READ: u64 = 1 << 20;

/// Walks `rt`'s heap and checks every object and reference; lists at most `max_listed`
/// corruptions (all are counted).
pub fn verify_heap(rt: &Runtime, max_listed: usize) -> Result<VerifyReport, ContractError> {
    let gc = rt.contracts().gc()?;
    let l = layout(rt)?;
    let target = rt.target();
    let mut report = VerifyReport {
        segments: l.segments.len(),
        ..VerifyReport::default()
    };
    let add = |report: &mut VerifyReport, c: Corruption| {
        report.corruptions_total += 1;
        if report.corruptions.len() < max_listed {
            report.corruptions.push(c);
        }
    };

    // First walk: where objects and free objects start.
    let mut starts = SegmentBits::new(&l.segments)?;
    let mut free = SegmentBits::new(&l.segments)?;
    let mut walker = gc.walker(&l.heaps, l.thread_contexts.clone())?;
    let summary = walker.walk(&l.segments, &l.heaps, |o: &HeapObject| {
        starts.set(o.address);
        if o.is_free {
            free.set(o.address);
        }
    });
    report.objects = summary.objects;
    for p in &summary.problems {
        add(
            &mut report,
            Corruption {
                kind: CorruptionKind::BadObject,
                object: p.address,
                slot: None,
                target: None,
                detail: p.to_string(),
            },
        );
    }

    // Second walk: each object's references.
    let f = Fields::new(target, rt.descriptor());
    let flags_at = f.off("MethodTable", "MTFlags")?;
    let mut flags: FxHashMap<u64, Option<u32>> = FxHashMap::default();
    let mut descs = GcDescCache::default();
    let mut walker = gc.walker(&l.heaps, l.thread_contexts.clone())?;
    let mut found: Vec<Corruption> = Vec::new();
    let mut references = 0u64;
    let mut bad_references = 0u64;
    let mut unreadable = 0u64;
    let mut buf = Vec::new();
    walker.walk(&l.segments, &l.heaps, |o: &HeapObject| {
        if o.is_free {
            return;
        }
        let Some(mt_flags) = *flags
            .entry(o.method_table)
            .or_insert_with(|| target.read_u32(o.method_table + flags_at).ok())
        else {
            unreadable += 1;
            return;
        };
        let Some(desc) = descs.get(target, o.method_table, mt_flags) else {
            unreadable += 1;
            return;
        };
        let len = o.size.min(MAX_OBJECT_READ);
        buf.resize(len as usize, 0);
        let whole = target.read_into(o.address, &mut buf).is_ok();
        desc.for_each_slot(o.size, o.size / 8, |slot| {
            let value = if whole && slot + 8 <= len {
                let at = slot as usize;
                buf.get(at..at + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
            } else {
                target.read_u64(o.address + slot).ok()
            };
            let Some(value) = value else {
                // The rest of this object cannot be checked.
                unreadable += 1;
                return false;
            };
            if value == 0 {
                return true;
            }
            references += 1;
            let kind = if !starts.covers(value) {
                CorruptionKind::ReferenceOutsideHeap
            } else if value % 8 != 0 || !starts.get(value) {
                CorruptionKind::ReferenceToNoObject
            } else if free.get(value) {
                CorruptionKind::ReferenceToFree
            } else {
                return true;
            };
            bad_references += 1;
            if found.len() >= max_listed {
                return true;
            }
            found.push(Corruption {
                kind,
                object: o.address,
                slot: Some(slot),
                target: Some(value),
                detail: format!(
                    "the reference at +{slot:#x} of the object at {:#x} is {value:#x}: {}",
                    o.address,
                    match kind {
                        CorruptionKind::ReferenceToFree => "a free object",
                        CorruptionKind::ReferenceToNoObject => "no object starts there",
                        _ => "outside the GC heap",
                    }
                ),
            });
            true
        });
    });
    report.references = references;
    report.unreadable = unreadable;
    for c in found {
        add(&mut report, c);
    }
    // Counted, not listed, past the bound.
    report.corruptions_total +=
        bad_references.saturating_sub(bad_references.min(max_listed as u64));
    Ok(report)
}
