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
use crate::contracts::gc::{GcDescCache, GcSegment, HeapObject};
use crate::contracts::ContractError;
use crate::heap::layout;
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
    /// The corruptions found, in address order within each segment, at most the number
    /// asked for.
    pub corruptions: Vec<Corruption>,
    /// Every corruption found, listed or not.
    pub corruptions_total: u64,
}

/// One bit per 8 bytes of every well-formed segment.
struct Starts {
    /// `(start, end, bits)`, sorted by start.
    segments: Vec<(u64, u64, Vec<u64>)>,
}

impl Starts {
    fn new(segments: &[GcSegment]) -> Result<Starts, ContractError> {
        let mut v = Vec::new();
        for s in segments
            .iter()
            .filter(|s| s.is_well_formed() && s.end > s.start)
        {
            let words = (s.end - s.start).div_ceil(8).div_ceil(64);
            let mut bits = Vec::new();
            usize::try_from(words)
                .ok()
                .and_then(|w| bits.try_reserve_exact(w).ok().map(|()| w))
                .map(|w| bits.resize(w, 0u64))
                .ok_or_else(|| ContractError::Corrupt {
                    what: "GC segment",
                    addr: s.segment.address,
                    detail: format!(
                        "no memory here for a bit per 8 of its {} bytes",
                        s.end - s.start
                    ),
                })?;
            v.push((s.start, s.end, bits));
        }
        v.sort_by_key(|s| s.0);
        Ok(Starts { segments: v })
    }

    fn find(&self, addr: u64) -> Option<usize> {
        let i = self
            .segments
            .partition_point(|s| s.0 <= addr)
            .checked_sub(1)?;
        (addr < self.segments[i].1).then_some(i)
    }

    fn set(&mut self, addr: u64) {
        if let Some(i) = self.find(addr) {
            let (start, _, bits) = &mut self.segments[i];
            let bit = (addr - *start) / 8;
            bits[(bit / 64) as usize] |= 1 << (bit % 64);
        }
    }

    /// `None` outside every segment, else whether a bit is set at `addr`.
    fn get(&self, addr: u64) -> Option<bool> {
        let i = self.find(addr)?;
        let (start, _, bits) = &self.segments[i];
        let bit = (addr - start) / 8;
        Some(addr % 8 == 0 && bits[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
    }
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
    let mut starts = Starts::new(&l.segments)?;
    let mut free = Starts::new(&l.segments)?;
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
    let mut buf = Vec::new();
    walker.walk(&l.segments, &l.heaps, |o: &HeapObject| {
        if o.is_free {
            return;
        }
        let Some(mt_flags) = *flags
            .entry(o.method_table)
            .or_insert_with(|| target.read_u32(o.method_table + flags_at).ok())
        else {
            return;
        };
        let Some(desc) = descs.get(target, o.method_table, mt_flags) else {
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
            let Some(value) = value.filter(|&v| v != 0) else {
                return true;
            };
            references += 1;
            let kind = match (starts.get(value), free.get(value)) {
                (Some(true), Some(true)) => CorruptionKind::ReferenceToFree,
                (Some(true), _) => return true,
                (None, _) => CorruptionKind::ReferenceOutsideHeap,
                (Some(false), _) => CorruptionKind::ReferenceToNoObject,
            };
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
    for c in found {
        add(&mut report, c);
    }
    Ok(report)
}
