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
/// `MethodTable` flag: the type has a component size (arrays, strings, free objects), kept
/// in the flags' low 16 bits.
const HAS_COMPONENT_SIZE: u32 = 0x8000_0000;
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

/// Where and why a segment's walk stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkProblem {
    /// Index of the segment in the list walked.
    pub segment: usize,
    /// The object (or position) where the walk stopped.
    pub address: u64,
    /// What was wrong.
    pub detail: String,
}

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
    /// segment. A segment whose walk meets something impossible (an unreadable chunk, a
    /// pointer that is no MethodTable, an object running past the segment's end) stops
    /// there, and the summary says where.
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
            if let Err(problem) =
                self.walk_segment(index, seg, heap, &mut buf, &mut summary, &mut visit)
            {
                summary.problems.push(problem);
            }
        }
        summary
    }

    fn walk_segment(
        &mut self,
        index: usize,
        seg: &GcSegment,
        heap: Option<&GcHeapData>,
        buf: &mut [u8],
        summary: &mut WalkSummary,
        visit: &mut impl FnMut(&HeapObject),
    ) -> Result<(), WalkProblem> {
        let problem = |address: u64, detail: String| WalkProblem {
            segment: index,
            address,
            detail,
        };
        let end = seg.end;
        if end < seg.start || end - seg.start > seg.segment.reserved.saturating_sub(seg.start) {
            return Err(problem(
                seg.start,
                format!(
                    "object range {:#x}..{end:#x} is not inside the segment (reserved to {:#x})",
                    seg.start, seg.segment.reserved
                ),
            ));
        }
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
        let mut context = self.contexts.partition_point(|&(p, _)| p < seg.start);
        let (mut chunk_start, mut chunk_len) = (0u64, 0usize);
        let mut obj = seg.start;
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
