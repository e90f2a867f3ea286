//! The GC's heaps, their generation tables and the segments (regions) each generation
//! owns, read through the GC/DAC interface.

use std::collections::HashSet;

use super::super::ContractError;
use super::dac_vars::GENERATION_COUNT;
use super::variables::GcVariables;
use crate::limits::Limit;
use crate::memory::Target;

/// `heap_segment` flags the walk needs (`gcinterface.dac.h`).
pub mod flags {
    /// A read-only segment: frozen (NonGC) objects the runtime allocated outside the GC.
    pub const READ_ONLY: u64 = 0x1;
    /// A large-object-heap segment.
    pub const LOH: u64 = 0x8;
    /// A pinned-object-heap segment.
    pub const POH: u64 = 0x200;
}

/// Bytes of the `dac_heap_segment` prefix cdac reads (version 2, 64-bit).
const SEGMENT_BYTES: usize = 72;
/// Most server heaps a runtime makes (one per logical CPU, at most 1024 in any GC build).
const MAX_HEAPS: u64 = 1024;

/// One `heap_segment` (a segment, or a region with the regions GC), as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapSegment {
    /// Address of the `heap_segment` record.
    pub address: u64,
    /// End of the objects allocated in it (except the ephemeral segment, where the heap's
    /// `alloc_allocated` is the end).
    pub allocated: u64,
    /// End of its committed memory.
    pub committed: u64,
    /// End of its reserved memory.
    pub reserved: u64,
    /// High-water mark of memory used.
    pub used: u64,
    /// Its first object.
    pub mem: u64,
    /// `heap_segment_flags_*` ([`flags`]).
    pub flags: u64,
    /// The next segment of the same generation (0 ends the list).
    pub next: u64,
    /// Where background GC's view of allocation ends.
    pub background_allocated: u64,
    /// The server heap that owns it (0 under workstation GC).
    pub heap: u64,
}

impl HeapSegment {
    /// Reads the record at `address`.
    pub fn read(target: &Target, address: u64) -> Result<HeapSegment, ContractError> {
        let bytes = target.read_bytes(address, SEGMENT_BYTES)?;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        Ok(HeapSegment {
            address,
            allocated: word(0),
            committed: word(1),
            reserved: word(2),
            used: word(3),
            mem: word(4),
            flags: word(5),
            next: word(6),
            background_allocated: word(7),
            heap: word(8),
        })
    }
}

/// What a segment holds, as `eeheap -gc` and ClrMD name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SegmentKind {
    /// A region of generation 0.
    Gen0,
    /// A region of generation 1.
    Gen1,
    /// A region, or an older segment, of generation 2.
    Gen2,
    /// The ephemeral segment of a segments GC: generation 2's end, then 1, then 0.
    Ephemeral,
    /// Large object heap.
    Loh,
    /// Pinned object heap.
    Poh,
    /// Frozen (NonGC) objects: string literals and type objects the runtime allocated.
    Frozen,
}

impl SegmentKind {
    /// The name printed: `gen0`, `gen1`, `gen2`, `ephemeral`, `loh`, `poh`, `frozen`.
    pub fn name(self) -> &'static str {
        match self {
            SegmentKind::Gen0 => "gen0",
            SegmentKind::Gen1 => "gen1",
            SegmentKind::Gen2 => "gen2",
            SegmentKind::Ephemeral => "ephemeral",
            SegmentKind::Loh => "loh",
            SegmentKind::Poh => "poh",
            SegmentKind::Frozen => "frozen",
        }
    }
}

/// One generation of a heap's generation table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Generation {
    /// Its first segment (region).
    pub start_segment: u64,
    /// Where the generation starts in the ephemeral segment (segments GC only; 0 with
    /// regions).
    pub allocation_start: u64,
    /// The generation's allocation context: next free byte and end.
    pub alloc_ptr: u64,
    /// End of that allocation context.
    pub alloc_limit: u64,
}

/// One GC heap: the workstation heap, or one server heap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcHeapData {
    /// Its index (0 under workstation GC).
    pub index: usize,
    /// Address of the server `gc_heap` (0 under workstation GC, whose fields are globals).
    pub address: u64,
    /// Where allocation in the ephemeral segment ends.
    pub alloc_allocated: u64,
    /// The segment (region) allocation currently happens in.
    pub ephemeral_heap_segment: u64,
    /// Its finalization queue (`CFinalize*`).
    pub finalize_queue: u64,
    /// Address of its generation table.
    pub generation_table: u64,
    /// gen0, gen1, gen2, LOH, POH.
    pub generations: Vec<Generation>,
}

/// One segment of a heap with what the walk needs: its kind and object range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcSegment {
    /// The heap that owns it.
    pub heap: usize,
    /// What it holds.
    pub kind: SegmentKind,
    /// The `heap_segment` record.
    pub segment: HeapSegment,
    /// First object.
    pub start: u64,
    /// End of the objects (`allocated`, or the heap's `alloc_allocated` for the ephemeral
    /// segment).
    pub end: u64,
}

impl GcSegment {
    /// Whether its object range lies inside its reserved memory (`start <= end <=
    /// reserved`, and committed no further than reserved), as on every healthy runtime: a
    /// record read from damaged memory fails this, and nothing may be sized by its range.
    pub fn is_well_formed(&self) -> bool {
        self.start <= self.end
            && self.end <= self.segment.reserved
            && self.segment.committed <= self.segment.reserved
    }
}

/// The heaps of the GC: one workstation heap, or `n_heaps` server heaps.
pub fn heaps(target: &Target, vars: &GcVariables) -> Result<Vec<GcHeapData>, ContractError> {
    let Some(server) = vars.server else {
        let w = vars.workstation;
        let generations = generations(target, vars, w.generation_table)?;
        return Ok(vec![GcHeapData {
            index: 0,
            address: 0,
            alloc_allocated: target.read_pointer(w.alloc_allocated)?,
            ephemeral_heap_segment: target.read_pointer(w.ephemeral_heap_segment)?,
            finalize_queue: target.read_pointer(w.finalize_queue)?,
            generation_table: w.generation_table,
            generations,
        }]);
    };
    let count = target.read_i32(server.n_heaps)?;
    let count = u64::try_from(count)
        .ok()
        .filter(|&n| (1..=MAX_HEAPS).contains(&n))
        .ok_or_else(|| ContractError::Corrupt {
            what: "server GC heap count (n_heaps)",
            addr: server.n_heaps,
            detail: format!("{count} heaps"),
        })?;
    let array = target.read_pointer(server.heaps)?;
    let f = server.fields;
    let mut heaps = Vec::new();
    for (index, heap) in target
        .read_pointers(array, count as usize)?
        .into_iter()
        .enumerate()
    {
        let pointer_at = |off: Option<u64>| -> Result<u64, ContractError> {
            match off {
                Some(o) => Ok(target.read_pointer(heap + o)?),
                None => Ok(0),
            }
        };
        let generation_table = heap + f.generation_table;
        heaps.push(GcHeapData {
            index,
            address: heap,
            alloc_allocated: pointer_at(f.alloc_allocated)?,
            ephemeral_heap_segment: pointer_at(f.ephemeral_heap_segment)?,
            finalize_queue: pointer_at(f.finalize_queue)?,
            generation_table,
            generations: generations(target, vars, generation_table)?,
        });
    }
    Ok(heaps)
}

/// The generation table at `table`, its fields where the GC's layout puts them.
fn generations(
    target: &Target,
    vars: &GcVariables,
    table: u64,
) -> Result<Vec<Generation>, ContractError> {
    let g = vars.generation;
    let mut out = Vec::new();
    for index in 0..GENERATION_COUNT {
        let entry = table + index * g.size;
        let read = |off: Option<u64>, plus: u64| -> Result<u64, ContractError> {
            match off {
                Some(o) if o + plus + 8 <= g.size => Ok(target.read_pointer(entry + o + plus)?),
                Some(o) => Err(ContractError::Corrupt {
                    what: "generation field offsets",
                    addr: table,
                    detail: format!(
                        "field at {o:#x} past the {:#x}-byte generation entry",
                        g.size
                    ),
                }),
                None => Ok(0),
            }
        };
        out.push(Generation {
            start_segment: read(g.start_segment, 0)?,
            allocation_start: read(g.allocation_start, 0)?,
            alloc_ptr: read(g.alloc_context, 0)?,
            alloc_limit: read(g.alloc_context, 8)?,
        });
    }
    Ok(out)
}

/// Every segment of `heap`: gen0, gen1, gen2 (frozen ones apart), LOH, POH with regions;
/// gen2 (the ephemeral segment last), LOH, POH with segments. Each list is bounded by the
/// list-length limit and may not loop.
pub fn segments(
    target: &Target,
    heap: &GcHeapData,
    regions: bool,
) -> Result<Vec<GcSegment>, ContractError> {
    let max = target.limits().max_list_length;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let order: &[usize] = if regions {
        &[0, 1, 2, 3, 4]
    } else {
        &[2, 3, 4]
    };
    for &g in order {
        let Some(generation) = heap.generations.get(g) else {
            continue;
        };
        let mut at = generation.start_segment;
        let mut count = 0u64;
        while at != 0 {
            if !seen.insert(at) {
                return Err(ContractError::Corrupt {
                    what: "GC segment list",
                    addr: at,
                    detail: format!("generation {g}'s list of heap {} loops", heap.index),
                });
            }
            count += 1;
            if count > max {
                return Err(ContractError::LimitExceeded {
                    what: "GC segment list",
                    addr: generation.start_segment,
                    limit: Limit::ListLength,
                    cap: max,
                    unit: "segments",
                });
            }
            let segment = HeapSegment::read(target, at)?;
            let kind = kind_of(g, &segment, regions, heap);
            let end = if at == heap.ephemeral_heap_segment {
                heap.alloc_allocated
            } else {
                segment.allocated
            };
            out.push(GcSegment {
                heap: heap.index,
                kind,
                segment,
                start: segment.mem,
                end,
            });
            at = segment.next;
        }
    }
    Ok(out)
}

/// The kind of a segment on generation `g`'s list.
fn kind_of(g: usize, segment: &HeapSegment, regions: bool, heap: &GcHeapData) -> SegmentKind {
    if segment.flags & flags::READ_ONLY != 0 {
        return SegmentKind::Frozen;
    }
    match g {
        0 => SegmentKind::Gen0,
        1 => SegmentKind::Gen1,
        3 => SegmentKind::Loh,
        4 => SegmentKind::Poh,
        _ if !regions && segment.address == heap.ephemeral_heap_segment => SegmentKind::Ephemeral,
        _ => SegmentKind::Gen2,
    }
}
