//! The finalization queue of a heap (`CFinalize`): one array of object pointers cut into
//! seven parts by fill pointers: objects registered for finalization by generation (pinned
//! object heap, large object heap, gen2, gen1, gen0), then the objects found dead and ready
//! for their finalizer (critical finalizers first), which are roots until it has run.

use super::super::ContractError;
use super::walk::ObjectGeneration;
use crate::memory::Target;

/// Fill pointers: one per generation and two for the objects ready for finalization.
pub const FILL_POINTERS: usize = 7;
/// Offset of the array's start, after the fill pointers.
const ARRAY: u64 = FILL_POINTERS as u64 * 8;
/// Most entries a queue may have (each is an object pointer of the heap).
const MAX_ENTRIES: u64 = 1 << 28;

/// What a part of the queue holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalizerPart {
    /// Registered, in this generation.
    Registered(ObjectGeneration),
    /// Dead, its critical finalizer not yet run.
    ReadyCritical,
    /// Dead, its finalizer not yet run (the f-reachable queue).
    Ready,
}

impl FinalizerPart {
    /// The part of fill pointer `i`.
    fn of(i: usize) -> FinalizerPart {
        match i {
            0 => FinalizerPart::Registered(ObjectGeneration::Poh),
            1 => FinalizerPart::Registered(ObjectGeneration::Loh),
            2 => FinalizerPart::Registered(ObjectGeneration::Gen2),
            3 => FinalizerPart::Registered(ObjectGeneration::Gen1),
            4 => FinalizerPart::Registered(ObjectGeneration::Gen0),
            5 => FinalizerPart::ReadyCritical,
            _ => FinalizerPart::Ready,
        }
    }

    /// Whether the objects are waiting for their finalizer (roots).
    pub fn is_ready(self) -> bool {
        matches!(self, FinalizerPart::ReadyCritical | FinalizerPart::Ready)
    }

    /// `gen0` … `poh`, `ready_critical`, `ready`.
    pub fn name(self) -> &'static str {
        match self {
            FinalizerPart::Registered(g) => g.name(),
            FinalizerPart::ReadyCritical => "ready_critical",
            FinalizerPart::Ready => "ready",
        }
    }
}

/// One entry of a finalization queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalizerEntry {
    /// The heap whose queue holds it.
    pub heap: usize,
    /// The entry's address (in the queue's array).
    pub address: u64,
    /// The object.
    pub object: u64,
    /// Which part of the queue.
    pub part: FinalizerPart,
}

/// Every entry of the queue at `queue` (a `CFinalize`) of heap `heap`.
pub fn entries(
    target: &Target,
    heap: usize,
    queue: u64,
) -> Result<Vec<FinalizerEntry>, ContractError> {
    if queue == 0 {
        return Ok(Vec::new());
    }
    let fill = target.read_pointers(queue, FILL_POINTERS)?;
    let array = target.read_pointer(queue + ARRAY)?;
    let corrupt = |detail: String| ContractError::Corrupt {
        what: "finalization queue",
        addr: queue,
        detail,
    };
    let mut start = array;
    for (i, &end) in fill.iter().enumerate() {
        if end < start || (end - start) % 8 != 0 {
            return Err(corrupt(format!(
                "fill pointer {i} ({end:#x}) is before the part's start {start:#x} or not a whole entry"
            )));
        }
        start = end;
    }
    let total = (start - array) / 8;
    if total > MAX_ENTRIES {
        return Err(corrupt(format!("{total} entries")));
    }
    let objects = target.read_pointers(array, total as usize)?;
    let mut out = Vec::with_capacity(objects.len());
    let mut part_start = array;
    let mut index = 0usize;
    for (i, &end) in fill.iter().enumerate() {
        let part = FinalizerPart::of(i);
        let count = ((end - part_start) / 8) as usize;
        for k in 0..count {
            out.push(FinalizerEntry {
                heap,
                address: part_start + k as u64 * 8,
                object: objects[index + k],
                part,
            });
        }
        index += count;
        part_start = end;
    }
    Ok(out)
}
