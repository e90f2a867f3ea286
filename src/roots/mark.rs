//! The mark from the roots: breadth first, level by level, one bit per 8 bytes of each
//! segment. Memory: the bitmaps (1/64 of the heap) and one address per reached object
//! (the levels), not a parent per object; a path is rebuilt by finding, level by level
//! back, an object that refers to the next one.

use rustc_hash::FxHashMap;

use super::sources::{Root, RootSet};
use crate::contracts::gc::{GcDescCache, GcSegment, ObjectWalker};
use crate::contracts::ContractError;
use crate::memory::Target;
use crate::runtime::Runtime;

/// How an object on a path is reached from the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The root holds it.
    Root,
    /// A reference at this offset from the previous object's start.
    Slot(u64),
    /// The previous object is a dependent handle's primary, and this its secondary.
    Dependent,
}

/// One object on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStep {
    /// The object.
    pub object: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// How the object before it refers to it.
    pub via: Via,
}

/// A path from a root to an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootPath {
    /// The root.
    pub root: Root,
    /// The objects from the root's to the target.
    pub steps: Vec<PathStep>,
}

/// What a mark did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MarkSummary {
    /// Objects reached.
    pub marked: u64,
    /// Objects whose references could not be read (a bad MethodTable, unreadable memory).
    pub unreadable: u64,
    /// References that point outside every segment (not followed).
    pub outside: u64,
}

/// One bit per 8 bytes of each segment (the mark's bits; `verify` records object starts
/// in them).
pub(crate) struct SegmentBits {
    /// `(start, end, bits)`, sorted by start.
    segments: Vec<(u64, u64, Vec<u64>)>,
}

impl SegmentBits {
    /// Bits for every well-formed segment ([`GcSegment::is_well_formed`]); one read from
    /// damaged memory is left out (a reference into it counts as outside every segment), so
    /// that no bitmap is sized by a bogus range. The bitmaps are allocated fallibly: a
    /// heap too large for this machine's memory is a typed error, not an abort.
    pub(crate) fn new(segments: &[GcSegment]) -> Result<SegmentBits, ContractError> {
        let mut v: Vec<(u64, u64, Vec<u64>)> = Vec::new();
        for s in segments
            .iter()
            .filter(|s| s.is_well_formed() && s.end > s.start)
        {
            // Every address of the range has a bit, whatever its alignment (damage may
            // give a segment an odd length).
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
                        "no memory here for the mark bits of its {} bytes of objects \
                         ({:#x}..{:#x})",
                        s.end - s.start,
                        s.start,
                        s.end
                    ),
                })?;
            v.push((s.start, s.end, bits));
        }
        v.sort_by_key(|s| s.0);
        Ok(SegmentBits { segments: v })
    }

    /// The same segments, every bit clear.
    pub(super) fn empty_like(&self) -> SegmentBits {
        SegmentBits {
            segments: self
                .segments
                .iter()
                .map(|(start, end, bits)| (*start, *end, vec![0; bits.len()]))
                .collect(),
        }
    }

    /// Clears `addr`'s bit.
    pub(super) fn clear(&mut self, addr: u64) {
        if let Some(i) = self.find(addr) {
            let (start, _, bits) = &mut self.segments[i];
            let bit = (addr - *start) / 8;
            bits[(bit / 64) as usize] &= !(1u64 << (bit % 64));
        }
    }

    fn find(&self, addr: u64) -> Option<usize> {
        let i = self
            .segments
            .partition_point(|s| s.0 <= addr)
            .checked_sub(1)?;
        (addr < self.segments[i].1).then_some(i)
    }

    /// Whether `addr` is inside one of the segments.
    pub(crate) fn covers(&self, addr: u64) -> bool {
        self.find(addr).is_some()
    }

    /// Sets `addr`'s bit: `Some(true)` if it was clear, `None` outside every segment.
    pub(crate) fn set(&mut self, addr: u64) -> Option<bool> {
        let i = self.find(addr)?;
        let (start, _, bits) = &mut self.segments[i];
        let bit = (addr - *start) / 8;
        let word = &mut bits[(bit / 64) as usize];
        let mask = 1u64 << (bit % 64);
        let was = *word & mask != 0;
        *word |= mask;
        Some(!was)
    }

    /// Whether `addr`'s bit is set (false outside every segment).
    pub(crate) fn get(&self, addr: u64) -> bool {
        self.find(addr).is_some_and(|i| {
            let (start, _, bits) = &self.segments[i];
            let bit = (addr - start) / 8;
            bits[(bit / 64) as usize] & (1u64 << (bit % 64)) != 0
        })
    }
}

/// Bytes of target memory per cached block, and blocks kept: object reads go through
/// these (large reads, which a core dump serves without mapping its pages) so that a mark
/// over a heap of any size stays within a few tens of MiB.
const BLOCK: u64 = 256 << 10;
const BLOCKS: usize = 64;

/// A small cache of target memory blocks, least recently used out first.
struct BlockCache {
    blocks: FxHashMap<u64, (u64, Vec<u8>)>,
    clock: u64,
}

impl BlockCache {
    fn new() -> BlockCache {
        BlockCache {
            blocks: FxHashMap::default(),
            clock: 0,
        }
    }

    /// Reads `out.len()` bytes at `addr` (any length; what crosses a block is read directly).
    fn read(&mut self, target: &Target, addr: u64, out: &mut [u8]) -> bool {
        let index = addr / BLOCK;
        let within = (addr % BLOCK) as usize;
        if within + out.len() > BLOCK as usize {
            return target.read_into(addr, out).is_ok();
        }
        self.clock += 1;
        let clock = self.clock;
        if let Some((used, data)) = self.blocks.get_mut(&index) {
            *used = clock;
            out.copy_from_slice(&data[within..within + out.len()]);
            return true;
        }
        if self.blocks.len() >= BLOCKS {
            if let Some(&oldest) = self
                .blocks
                .iter()
                .min_by_key(|(_, (u, _))| *u)
                .map(|(k, _)| k)
            {
                self.blocks.remove(&oldest);
            }
        }
        let mut data = vec![0u8; BLOCK as usize];
        if target.read_into(index * BLOCK, &mut data).is_err() {
            // Part of the block is not readable (before a segment's first page, after its
            // last): read just what was asked.
            return target.read_into(addr, out).is_ok();
        }
        out.copy_from_slice(&data[within..within + out.len()]);
        self.blocks.insert(index, (clock, data));
        true
    }

    fn word(&mut self, target: &Target, addr: u64) -> Option<u64> {
        let mut w = [0u8; 8];
        self.read(target, addr, &mut w)
            .then(|| u64::from_le_bytes(w))
    }
}

/// Reads objects and their references.
pub(super) struct ObjectReader<'r> {
    target: &'r Target,
    walker: ObjectWalker<'r>,
    descs: GcDescCache,
    cache: BlockCache,
    dependent: FxHashMap<u64, Vec<u64>>,
    unreadable: u64,
    /// `(start, end)` of the marked segments, sorted: an object's references are read no
    /// further than its segment's end, whatever its (possibly damaged) length says.
    bounds: Vec<(u64, u64)>,
}

impl ObjectReader<'_> {
    /// Bytes from `object` to the end of its segment (0 outside every segment).
    fn room(&self, object: u64) -> u64 {
        let i = self.bounds.partition_point(|b| b.0 <= object);
        i.checked_sub(1)
            .map(|i| self.bounds[i])
            .filter(|b| object < b.1)
            .map_or(0, |b| b.1 - object)
    }

    /// The MethodTable and size of `object`.
    pub(super) fn header(&mut self, object: u64) -> Option<(u64, u64, bool, u32)> {
        let target = self.target;
        let mt = self.cache.word(target, object)? & !self.walker.method_table_mask();
        let count_at = object + self.walker.component_count_offset();
        let cache = &mut self.cache;
        let (size, free, flags) = self.walker.size_of(mt, || {
            let mut c = [0u8; 4];
            cache
                .read(target, count_at, &mut c)
                .then(|| u32::from_le_bytes(c))
        })?;
        Some((mt, size, free, flags))
    }

    /// Calls `visit(slot offset, or None for a dependent handle's edge; referenced object)`
    /// for each non-null reference of `object` until it returns false; the object's
    /// MethodTable and size (capped at its segment's end), or `None` when the object cannot
    /// be read.
    pub(super) fn for_each_reference(
        &mut self,
        object: u64,
        mut visit: impl FnMut(Option<u64>, u64) -> bool,
    ) -> Option<(u64, u64)> {
        let Some((mt, size, is_free, flags)) = self.header(object) else {
            self.unreadable += 1;
            return None;
        };
        // A length past the segment's end is damage: read the slots that are in it.
        let room = self.room(object);
        if size > room {
            self.unreadable += 1;
        }
        let size = size.min(room);
        if let Some(secondaries) = self.dependent.get(&object) {
            for &s in secondaries {
                if !visit(None, s) {
                    return Some((mt, size));
                }
            }
        }
        if is_free {
            return Some((mt, size));
        }
        let target = self.target;
        let Some(desc) = self.descs.get(target, mt, flags) else {
            self.unreadable += 1;
            return Some((mt, size));
        };
        let cache = &mut self.cache;
        let mut failed = false;
        desc.for_each_slot(size, size / 8, |s| match cache.word(target, object + s) {
            Some(0) => true,
            Some(v) => visit(Some(s), v),
            None => {
                failed = true;
                false
            }
        });
        if failed {
            self.unreadable += 1;
        }
        Some((mt, size))
    }
}

/// Marks what the roots keep alive.
pub struct Marker<'r> {
    pub(super) reader: ObjectReader<'r>,
    /// The roots (their dependent-handle edges moved to the reader).
    pub(super) roots: RootSet,
    pub(super) bits: SegmentBits,
    levels: Vec<Vec<u64>>,
    /// The next level to expand.
    next: usize,
    /// Keep every level (for paths); without, a level is dropped once expanded.
    keep_levels: bool,
    summary: MarkSummary,
}

impl<'r> Marker<'r> {
    /// A marker over `rt`'s heap from `roots`.
    pub fn new(rt: &'r Runtime, roots: RootSet) -> Result<Marker<'r>, ContractError> {
        let gc = rt.contracts().gc()?;
        let heaps = gc.heaps()?;
        let segments = gc.segments()?;
        Marker::over(
            rt.target(),
            gc.walker(&heaps, Vec::new())?,
            &segments,
            roots,
        )
    }

    /// A marker over `segments` of `target`, reading objects with `walker`: what
    /// [`Marker::new`] builds from a runtime's GC, and what a test or fuzz target builds
    /// from memory it laid out.
    pub fn over(
        target: &'r Target,
        walker: ObjectWalker<'r>,
        segments: &[GcSegment],
        mut roots: RootSet,
    ) -> Result<Marker<'r>, ContractError> {
        let bits = SegmentBits::new(segments)?;
        let bounds = bits.segments.iter().map(|s| (s.0, s.1)).collect();
        let starts: Vec<u64> = roots.roots.iter().map(|r| r.object).collect();
        let mut marker = Marker {
            reader: ObjectReader {
                target,
                walker,
                descs: GcDescCache::default(),
                cache: BlockCache::new(),
                dependent: std::mem::take(&mut roots.dependent),
                unreadable: 0,
                bounds,
            },
            roots,
            bits,
            levels: vec![Vec::new()],
            next: 0,
            keep_levels: true,
            summary: MarkSummary::default(),
        };
        marker.seed(&starts);
        Ok(marker)
    }

    /// Marks `objects` as the first level (those outside every segment are counted).
    fn seed(&mut self, objects: &[u64]) {
        for &o in objects {
            match self.bits.set(o) {
                Some(true) => self.levels[0].push(o),
                Some(false) => {}
                None => self.summary.outside += 1,
            }
        }
        self.summary.marked = self.levels[0].len() as u64;
    }

    /// A marker over `rt`'s heap that starts from `objects` rather than from roots (what
    /// `objsize` measures: everything one object keeps alive); no path leads to a root.
    pub fn from_objects(rt: &'r Runtime, objects: &[u64]) -> Result<Marker<'r>, ContractError> {
        let mut marker = Marker::new(rt, RootSet::default())?;
        marker.seed(objects);
        Ok(marker)
    }

    /// The roots marked from (without the dependent handles' edges, which the mark holds).
    pub fn roots(&self) -> &RootSet {
        &self.roots
    }

    /// What the mark has done so far.
    pub fn summary(&self) -> MarkSummary {
        MarkSummary {
            unreadable: self.reader.unreadable,
            ..self.summary
        }
    }

    /// Whether `object` is reached (after [`Marker::mark_all`], whether it is live as far as
    /// the roots read tell).
    pub fn is_marked(&self, object: u64) -> bool {
        self.bits.get(object)
    }

    /// Marks everything reachable, keeping no path (levels are dropped once expanded).
    pub fn mark_all(&mut self) -> MarkSummary {
        self.mark_all_visiting(|_, _, _| {})
    }

    /// [`Marker::mark_all`], calling `visit(object, MethodTable, size)` once for each
    /// object reached whose header could be read, in the order reached (what `objsize`
    /// counts).
    pub fn mark_all_visiting(&mut self, mut visit: impl FnMut(u64, u64, u64)) -> MarkSummary {
        self.keep_levels = false;
        while self.expand_level(None, &mut visit) {}
        self.summary()
    }

    /// The MethodTable of `object` as the mark reads it (`None` when its header cannot
    /// be read).
    pub fn method_table_of(&mut self, object: u64) -> Option<u64> {
        self.reader.header(object).map(|h| h.0)
    }

    /// Expands the next level (whole, so that a later mark goes on from the next one),
    /// calling `visit` for each object expanded. False when there is nothing more to expand
    /// or the level reached `target`.
    fn expand_level(&mut self, target: Option<u64>, visit: &mut dyn FnMut(u64, u64, u64)) -> bool {
        let index = self.next;
        let count = self.levels.get(index).map_or(0, Vec::len);
        if count == 0 {
            return false;
        }
        self.next += 1;
        let mut found = Vec::new();
        let mut reached = false;
        let mut outside = 0u64;
        for i in 0..count {
            let object = self.levels[index][i];
            let bits = &mut self.bits;
            let read = self.reader.for_each_reference(object, |_, child| {
                match bits.set(child) {
                    Some(true) => {
                        reached |= Some(child) == target;
                        found.push(child);
                    }
                    Some(false) => {}
                    None => outside += 1,
                }
                true
            });
            if let Some((mt, size)) = read {
                visit(object, mt, size);
            }
        }
        if !self.keep_levels {
            self.levels[index] = Vec::new();
        }
        self.summary.outside += outside;
        self.summary.marked += found.len() as u64;
        self.levels.push(found);
        !reached
    }

    /// A shortest path (fewest references) from a root to `target`, or `None` when no root
    /// reaches it (or the levels were dropped by [`Marker::mark_all`]).
    pub fn path_to(&mut self, target: u64) -> Option<RootPath> {
        if !self.bits.get(target) {
            while self.expand_level(Some(target), &mut |_, _, _| {}) {}
        }
        let depth = self.levels.iter().position(|l| l.contains(&target))?;
        let mut steps = Vec::with_capacity(depth + 1);
        let mut current = target;
        for k in (0..depth).rev() {
            let mut parent = None;
            for i in 0..self.levels[k].len() {
                let object = self.levels[k][i];
                let mut via = None;
                let mt = self.reader.for_each_reference(object, |slot, child| {
                    if child == current {
                        via = Some(slot);
                        return false;
                    }
                    true
                });
                if let (Some(slot), Some(_)) = (via, mt) {
                    parent = Some((object, slot));
                    break;
                }
            }
            let (object, slot) = parent?;
            let mt = self.reader.header(current).map_or(0, |h| h.0);
            steps.push(PathStep {
                object: current,
                method_table: mt,
                via: slot.map_or(Via::Dependent, Via::Slot),
            });
            current = object;
        }
        let mt = self.reader.header(current).map_or(0, |h| h.0);
        steps.push(PathStep {
            object: current,
            method_table: mt,
            via: Via::Root,
        });
        steps.reverse();
        let root = *self.roots.roots.iter().find(|r| r.object == current)?;
        Some(RootPath { root, steps })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::gc::{HeapSegment, SegmentKind};

    fn segment(start: u64, end: u64, reserved: u64) -> GcSegment {
        GcSegment {
            heap: 0,
            kind: SegmentKind::Gen0,
            segment: HeapSegment {
                address: 0x1000,
                allocated: end,
                committed: reserved,
                reserved,
                used: end,
                mem: start,
                flags: 0,
                next: 0,
                background_allocated: 0,
                heap: 0,
            },
            start,
            end,
        }
    }

    #[test]
    fn a_segment_read_from_zeroed_memory_gets_no_bits() {
        // A zeroed heap_segment record with the heap's alloc_allocated as its end: a
        // bitmap sized by it would be 2 TB (the corrupt corpus's random-pages-zero abort).
        let zeroed = segment(0, 0x7f06_9280_0270, 0);
        let healthy = segment(0x7f00_0000_0000, 0x7f00_0000_1000, 0x7f00_0040_0000);
        let mut bits = SegmentBits::new(&[zeroed, healthy]).expect("bits");
        assert_eq!(bits.segments.len(), 1);
        assert_eq!(bits.set(0x7f00_0000_0010), Some(true));
        assert_eq!(bits.set(0x7f00_0000_0010), Some(false));
        assert_eq!(
            bits.set(0x10),
            None,
            "the damaged range is outside every segment"
        );
        assert!(bits.get(0x7f00_0000_0010));
    }

    #[test]
    fn a_segment_of_odd_length_has_a_bit_for_every_address() {
        // Damage can end a segment 4 bytes after its start: its one address still has a bit
        // (the fuzz target's first find was an index out of bounds here).
        let mut bits = SegmentBits::new(&[segment(
            0x7f00_0000_0000,
            0x7f00_0000_0004,
            0x7f00_0000_1000,
        )])
        .expect("bits");
        assert_eq!(bits.set(0x7f00_0000_0000), Some(true));
        assert!(bits.get(0x7f00_0000_0000));
        assert_eq!(bits.set(0x7f00_0000_0008), None);
    }
}
