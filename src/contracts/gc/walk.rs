//! Walking the objects of the GC's segments: each object's MethodTable gives its size
//! (base size, plus component size times the count at +8 for arrays and strings), the next
//! object follows at that size aligned to 8 (24 bytes at least), and the free space of an
//! allocation context (a thread's `[pointer, limit)`) is stepped over to `limit` plus one
//! minimum object.
//!
//! Segments are read in chunks of up to [`CHUNK_BYTES`], not object by object, and each
//! MethodTable's shape is read once; types are not named here (callers name the few
//! thousand distinct MethodTables at the end, not the millions of objects).

use rustc_hash::FxHashMap;

use super::segments::{GcHeapData, GcSegment, SegmentKind};
use crate::contracts::ContractError;
use crate::memory::Target;

/// Bytes read from a segment at a time.
pub const CHUNK_BYTES: usize = 1 << 20;
/// The smallest object (MethodTable, one pointer-sized field or count, and the header of
/// the next object): also the gap the GC leaves after an allocation context's limit.
pub const MIN_OBJECT_BYTES: u64 = 24;
use crate::contracts::runtime_type_system::MTF_HAS_COMPONENT_SIZE as HAS_COMPONENT_SIZE;
/// Largest base size of any real type (a value type of a few megabytes is already absurd).
const MAX_BASE_SIZE: u32 = 1 << 24;
/// The free object MethodTable's flags (component size 1, nothing else) and base size.
const FREE_FLAGS: u32 = 0x8000_0001;
const FREE_BASE_SIZE: u32 = 24;

/// The generation an object belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectGeneration {
    /// Generation 0.
    Gen0,
    /// Generation 1.
    Gen1,
    /// Generation 2.
    Gen2,
    /// Large object heap (collected with generation 2).
    Loh,
    /// Pinned object heap (collected with generation 2).
    Poh,
    /// Frozen (NonGC) objects, never collected.
    Frozen,
}

impl ObjectGeneration {
    /// `gen0`, `gen1`, `gen2`, `loh`, `poh`, `frozen`.
    pub fn name(self) -> &'static str {
        match self {
            ObjectGeneration::Gen0 => "gen0",
            ObjectGeneration::Gen1 => "gen1",
            ObjectGeneration::Gen2 => "gen2",
            ObjectGeneration::Loh => "loh",
            ObjectGeneration::Poh => "poh",
            ObjectGeneration::Frozen => "frozen",
        }
    }
}

/// One object found by the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapObject {
    /// Its address (of the MethodTable pointer; the header is the 8 bytes before).
    pub address: u64,
    /// Its MethodTable, with the GC's mark bits cleared.
    pub method_table: u64,
    /// Its size in bytes, not aligned (as SOS and ClrMD report it), at least
    /// [`MIN_OBJECT_BYTES`].
    pub size: u64,
    /// Its generation.
    pub generation: ObjectGeneration,
    /// Whether it is a free object (a gap the GC filled), not a live one.
    pub is_free: bool,
    /// Index of its segment in the list walked.
    pub segment: usize,
    /// Its header word (the 4 bytes before the MethodTable pointer), when the walk had
    /// them in its buffer (not for the first object of each read); see
    /// [`crate::inspect::Header`].
    pub header: Option<u32>,
}

/// Where and why a segment's walk met something impossible, and where it went on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkProblem {
    /// Index of the segment in the list walked.
    pub segment: usize,
    /// The object (or position) where the walk met the damage.
    pub address: u64,
    /// What was wrong.
    pub detail: String,
    /// Where the walk found objects again (checked: a MethodTable already seen on this
    /// heap, followed by [`RESYNC_CHAIN`] well-formed objects), when it did; `None`: the
    /// rest of the segment was skipped.
    pub resumed_at: Option<u64>,
}

impl WalkProblem {
    /// Bytes of the segment skipped from [`Self::address`] on (to `resumed_at`, else to
    /// `segment_end`).
    pub fn skipped_bytes(&self, segment_end: u64) -> u64 {
        self.resumed_at
            .unwrap_or(segment_end)
            .saturating_sub(self.address)
    }
}

impl std::fmt::Display for WalkProblem {
    /// "segment 3 at 0x…: `detail`; resumed at 0x… (N bytes skipped)", or "…; the rest of
    /// the segment skipped".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "segment {} at {:#x}: {}; ",
            self.segment, self.address, self.detail
        )?;
        match self.resumed_at {
            Some(at) => write!(
                f,
                "resumed at {at:#x} ({} bytes skipped)",
                at.saturating_sub(self.address)
            ),
            None => f.write_str("the rest of the segment skipped"),
        }
    }
}

/// Objects that must parse in a row, from a MethodTable already seen, before a walk that
/// met damage trusts an address as an object's start again.
pub const RESYNC_CHAIN: usize = 3;
/// Bytes scanned at a time when looking for the next object after damage.
const RESYNC_WINDOW: usize = 64 << 10;
/// Arrays and strings longer than this are checked to be followed by an object (one
/// read each): a length damaged into another that still fits would skip objects unseen.
const CHECK_BEHIND: u64 = 4096;

/// What the walk found besides the objects it visited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalkSummary {
    /// Objects visited (free ones too).
    pub objects: u64,
    /// Segments whose walk stopped before their end.
    pub problems: Vec<WalkProblem>,
    /// Bytes of segment memory read.
    pub bytes_read: u64,
}

/// Where the fields a walk reads are, from the runtime's descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectLayout {
    /// Offset of `MethodTable.MTFlags` (u32).
    pub mt_flags: u64,
    /// Offset of `MethodTable.BaseSize` (u32).
    pub mt_base_size: u64,
    /// Offset of an array's or string's component count (u32).
    pub num_components: u64,
    /// Bits of the MethodTable pointer the GC uses as marks.
    pub mt_mask: u64,
}

/// A MethodTable's size information, read once per MethodTable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    flags: u32,
    base_size: u32,
    component_size: u32,
    is_free: bool,
}

/// Walks the objects of segments.
pub struct ObjectWalker<'a> {
    target: &'a Target,
    layout: ObjectLayout,
    /// Allocation contexts `(pointer, limit)`, sorted by pointer.
    contexts: Vec<(u64, u64)>,
    /// The free object MethodTable, when the runtime names it.
    free_method_table: Option<u64>,
    shapes: FxHashMap<u64, Option<Shape>>,
    /// The last MethodTable looked up and its shape: neighbours often share a type.
    last_shape: Option<(u64, Option<Shape>)>,
}

impl<'a> ObjectWalker<'a> {
    /// A walker over `target` that steps over the given allocation contexts.
    pub fn new(
        target: &'a Target,
        layout: ObjectLayout,
        mut contexts: Vec<(u64, u64)>,
        free_method_table: Option<u64>,
    ) -> ObjectWalker<'a> {
        contexts.retain(|&(p, l)| p != 0 && l >= p);
        contexts.sort_unstable();
        contexts.dedup();
        ObjectWalker {
            target,
            layout,
            contexts,
            free_method_table,
            shapes: FxHashMap::default(),
            last_shape: None,
        }
    }

    /// The first address after `damaged` (8-aligned, inside `seg`) where objects parse
    /// again: a MethodTable already seen on this heap, then [`RESYNC_CHAIN`] objects in a
    /// row of well-formed shapes, each inside the segment (or the chain reaching its end
    /// exactly). A field holding a type handle can look like an object's start; the chain
    /// behind it rarely parses. `None` when nothing up to the segment's end does.
    pub fn resync(&mut self, seg: &GcSegment, damaged: u64) -> Option<u64> {
        let end = seg.end;
        let mut window = vec![0u8; RESYNC_WINDOW];
        let mut at = align8(damaged.checked_add(8)?);
        while at < end && end - at >= 16 {
            let len = usize::try_from(end - at)
                .unwrap_or(usize::MAX)
                .min(RESYNC_WINDOW);
            if self.target.read_into(at, &mut window[..len]).is_err() {
                // Unreadable here: try the next page.
                at = (at | 0xFFF).checked_add(1)?;
                continue;
            }
            for i in (0..len.saturating_sub(7)).step_by(8) {
                let word = u64::from_le_bytes(window[i..i + 8].try_into().unwrap_or_default());
                let mt = word & !self.layout.mt_mask;
                if mt != 0 && self.seen(mt) && self.chain_parses(at + i as u64, end) {
                    return Some(at + i as u64);
                }
            }
            at = at.checked_add(len as u64)?;
        }
        None
    }

    /// Whether the walk has met `mt` with a well-formed shape: the MethodTables of the
    /// objects it visited (shapes are read once per MethodTable, so this costs the walk
    /// nothing per object).
    fn seen(&self, mt: u64) -> bool {
        self.shapes.get(&mt).is_some_and(Option::is_some)
    }

    /// Whether [`RESYNC_CHAIN`] objects from `address` have MethodTables of well-formed
    /// shape and stay inside `[address, end)`.
    fn chain_parses(&mut self, mut address: u64, end: u64) -> bool {
        for _ in 0..RESYNC_CHAIN {
            if address == end {
                return true;
            }
            let Ok((_, size, _)) = self.object_at(address) else {
                return false;
            };
            let step = align8(size);
            if end - address < step {
                return false;
            }
            address += step;
        }
        true
    }

    /// The shape of `mt`, read on first use; `None` when it cannot be a MethodTable.
    fn shape(&mut self, mt: u64) -> Option<Shape> {
        if let Some((last, shape)) = self.last_shape {
            if last == mt {
                return shape;
            }
        }
        if let Some(&s) = self.shapes.get(&mt) {
            self.last_shape = Some((mt, s));
            return s;
        }
        let read = || -> Option<Shape> {
            let flags = self.target.read_u32(mt + self.layout.mt_flags).ok()?;
            let base_size = self.target.read_u32(mt + self.layout.mt_base_size).ok()?;
            if !(12..=MAX_BASE_SIZE).contains(&base_size) {
                return None;
            }
            let component_size = if flags & HAS_COMPONENT_SIZE != 0 {
                flags & 0xFFFF
            } else {
                0
            };
            let is_free = match self.free_method_table {
                Some(free) => free == mt,
                None => flags == FREE_FLAGS && base_size == FREE_BASE_SIZE,
            };
            Some(Shape {
                flags,
                base_size,
                component_size,
                is_free,
            })
        };
        let shape = if mt == 0 || mt % 8 != 0 { None } else { read() };
        self.shapes.insert(mt, shape);
        self.last_shape = Some((mt, shape));
        shape
    }

    /// The MethodTable (mark bits cleared), size (as [`HeapObject::size`]) and free flag of
    /// the one object at `address`, which is not checked to be where an object starts.
    pub fn object_at(&mut self, address: u64) -> Result<(u64, u64, bool), ContractError> {
        let mt = self.target.read_pointer(address)? & !self.layout.mt_mask;
        let shape = self.shape(mt).ok_or_else(|| ContractError::Corrupt {
            what: "object",
            addr: address,
            detail: format!("{mt:#x} is not a MethodTable"),
        })?;
        let size = if shape.component_size != 0 {
            let count = self.target.read_u32(address + self.layout.num_components)?;
            u64::from(shape.base_size) + u64::from(shape.component_size) * u64::from(count)
        } else {
            u64::from(shape.base_size)
        };
        Ok((mt, size.max(MIN_OBJECT_BYTES), shape.is_free))
    }

    /// The size (as [`HeapObject::size`]), free flag and `MTFlags` of an object of
    /// MethodTable `mt` (mark bits cleared); `count` reads its component count, asked only
    /// for arrays and strings. `None` when `mt` is no MethodTable or the count is unreadable.
    pub fn size_of(
        &mut self,
        mt: u64,
        count: impl FnOnce() -> Option<u32>,
    ) -> Option<(u64, bool, u32)> {
        let shape = self.shape(mt)?;
        let size = if shape.component_size != 0 {
            u64::from(shape.base_size) + u64::from(shape.component_size) * u64::from(count()?)
        } else {
            u64::from(shape.base_size)
        };
        Some((size.max(MIN_OBJECT_BYTES), shape.is_free, shape.flags))
    }

    /// Where an object's component count is, from its start.
    pub fn component_count_offset(&self) -> u64 {
        self.layout.num_components
    }

    /// The MethodTable bits the GC uses as marks.
    pub fn method_table_mask(&self) -> u64 {
        self.layout.mt_mask
    }

    /// Walks every segment, calling `visit` for each object in address order within a
    /// segment. Where a segment's walk meets something impossible (an unreadable chunk, a
    /// pointer that is no MethodTable, an object running past the segment's end), it looks
    /// for the next address where objects parse again ([`Self::resync`]) and goes on from
    /// there; the summary says where each gap begins and ends.
    pub fn walk(
        &mut self,
        segments: &[GcSegment],
        heaps: &[GcHeapData],
        mut visit: impl FnMut(&HeapObject),
    ) -> WalkSummary {
        let mut summary = WalkSummary::default();
        let mut buf = vec![0u8; CHUNK_BYTES];
        for (index, seg) in segments.iter().enumerate() {
            let heap = heaps.iter().find(|h| h.index == seg.heap);
            if let Some(detail) = out_of_bounds(seg) {
                // Nothing here can be trusted, not even as a place to look for objects.
                summary.problems.push(WalkProblem {
                    segment: index,
                    address: seg.start,
                    detail,
                    resumed_at: None,
                });
                continue;
            }
            let mut from = seg.start;
            // Each pass ends at the segment's end or at damage; the next starts where
            // objects parse again. Every resumption is past the damage, so this ends.
            while let Err(mut problem) =
                self.walk_segment(index, seg, from, heap, &mut buf, &mut summary, &mut visit)
            {
                problem.resumed_at = self.resync(seg, problem.address);
                let next = problem.resumed_at;
                summary.problems.push(problem);
                match next {
                    Some(at) if at > from => from = at,
                    _ => break,
                }
            }
        }
        summary
    }

    #[allow(clippy::too_many_arguments)]
    fn walk_segment(
        &mut self,
        index: usize,
        seg: &GcSegment,
        from: u64,
        heap: Option<&GcHeapData>,
        buf: &mut [u8],
        summary: &mut WalkSummary,
        visit: &mut impl FnMut(&HeapObject),
    ) -> Result<(), WalkProblem> {
        let problem = |address: u64, detail: String| WalkProblem {
            segment: index,
            address,
            detail,
            resumed_at: None,
        };
        let end = seg.end;
        // Allocation contexts live in small-object segments only.
        let small_objects = !matches!(
            seg.kind,
            SegmentKind::Loh | SegmentKind::Poh | SegmentKind::Frozen
        );
        let ephemeral_bounds = heap.and_then(|h| {
            (seg.kind == SegmentKind::Ephemeral).then(|| {
                let g = |i: usize| h.generations.get(i).map_or(0, |g| g.allocation_start);
                (g(1), g(0))
            })
        });
        let mut context = self.contexts.partition_point(|&(p, _)| p < from);
        let (mut chunk_start, mut chunk_len) = (0u64, 0usize);
        let mut obj = from;
        while obj < end {
            if small_objects {
                while context < self.contexts.len() && self.contexts[context].0 < obj {
                    context += 1;
                }
                if let Some(&(pointer, limit)) = self.contexts.get(context) {
                    if pointer == obj {
                        obj = align8(limit) + MIN_OBJECT_BYTES;
                        continue;
                    }
                }
            }
            if end - obj < 16 {
                // A gap too small for an object cannot be skipped to anything.
                return Err(problem(
                    obj,
                    format!(
                        "{} bytes left before the segment's end, less than an object",
                        end - obj
                    ),
                ));
            }
            if obj < chunk_start || obj + 16 > chunk_start + chunk_len as u64 {
                chunk_start = obj;
                chunk_len = usize::try_from(end - obj)
                    .unwrap_or(usize::MAX)
                    .min(buf.len());
                if let Err(e) = self.target.read_into(obj, &mut buf[..chunk_len]) {
                    // Fall back to what a smaller read gets (the end of a dump's memory).
                    chunk_len = 4096.min(chunk_len);
                    self.target
                        .read_into(obj, &mut buf[..chunk_len])
                        .map_err(|_| problem(obj, format!("cannot read the segment here: {e}")))?;
                }
                summary.bytes_read += chunk_len as u64;
            }
            let at = (obj - chunk_start) as usize;
            let word = |i: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&buf[i..i + 8]);
                u64::from_le_bytes(w)
            };
            let mt = word(at) & !self.layout.mt_mask;
            let shape = self
                .shape(mt)
                .ok_or_else(|| problem(obj, format!("{mt:#x} is not a MethodTable")))?;
            let size = if shape.component_size != 0 {
                let count_at = at + self.layout.num_components as usize;
                let count = if count_at + 4 <= chunk_len {
                    u32::from_le_bytes([
                        buf[count_at],
                        buf[count_at + 1],
                        buf[count_at + 2],
                        buf[count_at + 3],
                    ])
                } else {
                    self.target
                        .read_u32(obj + self.layout.num_components)
                        .map_err(|e| problem(obj, e.to_string()))?
                };
                u64::from(shape.base_size) + u64::from(shape.component_size) * u64::from(count)
            } else {
                u64::from(shape.base_size)
            };
            let step = align8(size.max(MIN_OBJECT_BYTES));
            if step > end - obj {
                return Err(problem(
                    obj,
                    format!("an object of {size} bytes (MethodTable {mt:#x}) runs past the segment's end {end:#x}"),
                ));
            }
            // A damaged length that still fits in the segment would skip every object it
            // covers without a word: behind a long array or string there must be an object
            // (or an allocation context, or the segment's end).
            if shape.component_size != 0 && step > CHECK_BEHIND && step < end - obj {
                let next = obj + step;
                let context = self
                    .contexts
                    .binary_search_by_key(&next, |&(pointer, _)| pointer)
                    .is_ok();
                let next_mt = self
                    .target
                    .read_u64(next)
                    .ok()
                    .map(|w| w & !self.layout.mt_mask);
                // Unreadable memory there is not taken for damage to this object.
                if !context && matches!(next_mt.map(|m| self.shape(m)), Some(None)) {
                    return Err(problem(
                        obj,
                        format!(
                            "an object of {size} bytes (MethodTable {mt:#x}) is followed by no \
                             object at {next:#x}: its length is damaged"
                        ),
                    ));
                }
            }
            let generation = generation_in(seg.kind, ephemeral_bounds, obj);
            summary.objects += 1;
            visit(&HeapObject {
                address: obj,
                method_table: mt,
                // No object takes less than the minimum on the heap (an empty string's
                // base size is 22): SOS and ClrMD report that, and so does cdac.
                size: size.max(MIN_OBJECT_BYTES),
                generation,
                is_free: shape.is_free,
                segment: index,
                header: at
                    .checked_sub(4)
                    .map(|h| u32::from_le_bytes([buf[h], buf[h + 1], buf[h + 2], buf[h + 3]])),
            });
            obj += step;
        }
        Ok(())
    }
}

/// Why a segment's object range cannot be walked at all (it is not inside its reserved
/// memory), if it cannot.
fn out_of_bounds(seg: &GcSegment) -> Option<String> {
    let (start, end) = (seg.start, seg.end);
    (end < start || end - start > seg.segment.reserved.saturating_sub(start)).then(|| {
        format!(
            "object range {start:#x}..{end:#x} is not inside the segment (reserved to {:#x})",
            seg.segment.reserved
        )
    })
}

/// The generation of an object at `address` in a segment of `kind`; for the ephemeral
/// segment, `bounds` are the allocation starts of generations 1 and 0.
fn generation_in(kind: SegmentKind, bounds: Option<(u64, u64)>, address: u64) -> ObjectGeneration {
    match (kind, bounds) {
        (SegmentKind::Ephemeral, Some((_, gen0))) if address >= gen0 && gen0 != 0 => {
            ObjectGeneration::Gen0
        }
        (SegmentKind::Ephemeral, Some((gen1, _))) if address >= gen1 && gen1 != 0 => {
            ObjectGeneration::Gen1
        }
        (kind, _) => generation_of_kind(kind),
    }
}

/// The segment holding `address` (between its first object and its end) and the
/// generation an object there belongs to.
pub fn locate(
    segments: &[GcSegment],
    heaps: &[GcHeapData],
    address: u64,
) -> Option<(usize, ObjectGeneration)> {
    let index = segments
        .iter()
        .position(|s| address >= s.start && address < s.end)?;
    let seg = &segments[index];
    let bounds = heaps.iter().find(|h| h.index == seg.heap).and_then(|h| {
        (seg.kind == SegmentKind::Ephemeral).then(|| {
            let g = |i: usize| h.generations.get(i).map_or(0, |g| g.allocation_start);
            (g(1), g(0))
        })
    });
    Some((index, generation_in(seg.kind, bounds, address)))
}

/// The generation of the objects of a segment of this kind (the ephemeral segment's
/// older part).
fn generation_of_kind(kind: SegmentKind) -> ObjectGeneration {
    match kind {
        SegmentKind::Gen0 => ObjectGeneration::Gen0,
        SegmentKind::Gen1 => ObjectGeneration::Gen1,
        SegmentKind::Gen2 | SegmentKind::Ephemeral => ObjectGeneration::Gen2,
        SegmentKind::Loh => ObjectGeneration::Loh,
        SegmentKind::Poh => ObjectGeneration::Poh,
        SegmentKind::Frozen => ObjectGeneration::Frozen,
    }
}

fn align8(v: u64) -> u64 {
    v.saturating_add(7) & !7
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::gc::HeapSegment;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    const BASE: u64 = 0x1000_0000;
    const OBJECTS: u64 = BASE + 0x1000;
    const END: u64 = OBJECTS + 0x8000;
    const PLAIN_MT: u64 = BASE + 0x100;
    const INT_ARRAY_MT: u64 = BASE + 0x200;

    /// A segment of 32-byte objects with one `int[10]` second, its count set to `count`.
    fn heap(count: u32) -> (crate::memory::Target, GcSegment) {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(BASE, (END - BASE) as usize);
        r.u32(0x100, 0).u32(0x104, 32);
        r.u32(0x200, HAS_COMPONENT_SIZE | 4).u32(0x204, 24);
        let mut at = OBJECTS;
        let mut first = true;
        while at + 32 <= END {
            let off = (at - BASE) as usize;
            if !first && at == OBJECTS + 32 {
                r.u64(off, INT_ARRAY_MT).u32(off + 8, count);
                at += 64;
                continue;
            }
            first = false;
            r.u64(off, PLAIN_MT);
            at += 32;
        }
        let target = b.into_target();
        let seg = GcSegment {
            heap: 0,
            kind: SegmentKind::Gen2,
            segment: HeapSegment {
                address: 0,
                allocated: END,
                committed: END,
                reserved: END,
                used: END,
                mem: OBJECTS,
                flags: 0,
                next: 0,
                background_allocated: 0,
                heap: 0,
            },
            start: OBJECTS,
            end: END,
        };
        (target, seg)
    }

    fn walk(count: u32) -> (u64, Vec<WalkProblem>) {
        let (target, seg) = heap(count);
        let layout = ObjectLayout {
            mt_flags: 0,
            mt_base_size: 4,
            num_components: 8,
            mt_mask: 7,
        };
        let mut walker = ObjectWalker::new(&target, layout, Vec::new(), None);
        let summary = walker.walk(&[seg], &[], |_| {});
        (summary.objects, summary.problems)
    }

    #[test]
    fn a_length_damaged_into_another_that_fits_is_caught_and_the_walk_goes_on() {
        let (intact, problems) = walk(10);
        assert!(problems.is_empty(), "{problems:?}");
        // 2,000 elements: 8,024 bytes, inside the segment, ending in the middle of an
        // object. Without the check behind it the walk would skip 250 objects unseen.
        let (damaged, problems) = walk(2000);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].address, OBJECTS + 32);
        assert!(
            problems[0].detail.contains("is followed by no object"),
            "{problems:?}"
        );
        assert_eq!(problems[0].resumed_at, Some(OBJECTS + 96));
        assert_eq!(damaged, intact - 1, "only the damaged array is lost");
    }
}
