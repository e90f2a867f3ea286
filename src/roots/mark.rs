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

/// Bytes of an object read at once when following its references.
const WINDOW: u64 = 1 << 20;

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

/// One bit per 8 bytes of each segment.
struct SegmentBits {
    /// `(start, end, bits)`, sorted by start.
    segments: Vec<(u64, u64, Vec<u64>)>,
}

impl SegmentBits {
    fn new(segments: &[GcSegment]) -> SegmentBits {
        let mut v: Vec<(u64, u64, Vec<u64>)> = segments
            .iter()
            .filter(|s| s.end > s.start)
            .map(|s| {
                let words = ((s.end - s.start) / 8).div_ceil(64) as usize;
                (s.start, s.end, vec![0u64; words])
            })
            .collect();
        v.sort_by_key(|s| s.0);
        SegmentBits { segments: v }
    }

    fn find(&self, addr: u64) -> Option<usize> {
        let i = self
            .segments
            .partition_point(|s| s.0 <= addr)
            .checked_sub(1)?;
        (addr < self.segments[i].1).then_some(i)
    }

    /// Sets `addr`'s bit: `Some(true)` if it was clear, `None` outside every segment.
    fn set(&mut self, addr: u64) -> Option<bool> {
        let i = self.find(addr)?;
        let (start, _, bits) = &mut self.segments[i];
        let bit = (addr - *start) / 8;
        let word = &mut bits[(bit / 64) as usize];
        let mask = 1u64 << (bit % 64);
        let was = *word & mask != 0;
        *word |= mask;
        Some(!was)
    }

    fn get(&self, addr: u64) -> bool {
        self.find(addr).is_some_and(|i| {
            let (start, _, bits) = &self.segments[i];
            let bit = (addr - start) / 8;
            bits[(bit / 64) as usize] & (1u64 << (bit % 64)) != 0
        })
    }
}

/// Marks what the roots keep alive.
pub struct Marker<'r> {
    target: &'r Target,
    walker: ObjectWalker<'r>,
    mt_flags_offset: u64,
    mt_flags: FxHashMap<u64, u32>,
    descs: GcDescCache,
    roots: RootSet,
    bits: SegmentBits,
    levels: Vec<Vec<u64>>,
    /// The next level to expand.
    next: usize,
    summary: MarkSummary,
    buf: Vec<u8>,
}

impl<'r> Marker<'r> {
    /// A marker over `rt`'s heap from `roots`.
    pub fn new(rt: &'r Runtime, roots: RootSet) -> Result<Marker<'r>, ContractError> {
        let gc = rt.contracts().gc()?;
        let heaps = gc.heaps()?;
        let segments = gc.segments()?;
        let layout = gc.object_layout()?;
        let mut bits = SegmentBits::new(&segments);
        let mut level0 = Vec::new();
        let mut summary = MarkSummary::default();
        for r in &roots.roots {
            match bits.set(r.object) {
                Some(true) => level0.push(r.object),
                Some(false) => {}
                None => summary.outside += 1,
            }
        }
        summary.marked = level0.len() as u64;
        Ok(Marker {
            target: rt.target(),
            walker: gc.walker(&heaps, Vec::new())?,
            mt_flags_offset: layout.mt_flags,
            mt_flags: FxHashMap::default(),
            descs: GcDescCache::default(),
            roots,
            bits,
            levels: vec![level0],
            next: 0,
            summary,
            buf: Vec::new(),
        })
    }

    /// The roots marked from.
    pub fn roots(&self) -> &RootSet {
        &self.roots
    }

    /// What the mark has done so far.
    pub fn summary(&self) -> MarkSummary {
        self.summary
    }

    /// Whether `object` is reached (after [`Marker::mark_all`], whether it is live as far as
    /// the roots read tell).
    pub fn is_marked(&self, object: u64) -> bool {
        self.bits.get(object)
    }

    /// Marks everything reachable.
    pub fn mark_all(&mut self) -> MarkSummary {
        while self.expand_level(None) {}
        self.summary
    }

    /// The MethodTable and references of `object`: `(slot offset or None for a dependent
    /// edge, referenced object)`.
    fn references(&mut self, object: u64, out: &mut Vec<(Option<u64>, u64)>) -> Option<u64> {
        out.clear();
        let Ok((mt, size, is_free)) = self.walker.object_at(object) else {
            self.summary.unreadable += 1;
            return None;
        };
        if let Some(secondaries) = self.roots.dependent.get(&object) {
            out.extend(secondaries.iter().map(|&s| (None, s)));
        }
        if is_free {
            return Some(mt);
        }
        let target = self.target;
        let offset = self.mt_flags_offset;
        let flags = *self
            .mt_flags
            .entry(mt)
            .or_insert_with(|| target.read_u32(mt + offset).unwrap_or(0));
        let Some(desc) = self.descs.get(target, mt, flags) else {
            self.summary.unreadable += 1;
            return Some(mt);
        };
        let mut slots = Vec::new();
        desc.for_each_slot(size, size / 8, |s| slots.push(s));
        let (mut wstart, mut wlen) = (0u64, 0u64);
        for s in slots {
            if s < wstart || s + 8 > wstart + wlen {
                wstart = s;
                wlen = WINDOW.min(size.saturating_sub(8).saturating_sub(s)).max(8);
                self.buf.resize(wlen as usize, 0);
                if target.read_into(object + s, &mut self.buf).is_err() {
                    self.summary.unreadable += 1;
                    wlen = 0;
                    continue;
                }
            }
            let i = (s - wstart) as usize;
            let mut w = [0u8; 8];
            w.copy_from_slice(&self.buf[i..i + 8]);
            let v = u64::from_le_bytes(w);
            if v != 0 {
                out.push((Some(s), v));
            }
        }
        Some(mt)
    }

    /// Expands the next level (whole, so that a later mark goes on from the next one).
    /// False when there is nothing more to expand or the level reached `target`.
    fn expand_level(&mut self, target: Option<u64>) -> bool {
        let index = self.next;
        let count = self.levels.get(index).map_or(0, Vec::len);
        if count == 0 {
            return false;
        }
        self.next += 1;
        let mut found = Vec::new();
        let mut refs = Vec::new();
        let mut reached = false;
        for i in 0..count {
            let object = self.levels[index][i];
            self.references(object, &mut refs);
            for &(_, child) in &refs {
                match self.bits.set(child) {
                    Some(true) => {
                        reached |= Some(child) == target;
                        found.push(child);
                    }
                    Some(false) => {}
                    None => self.summary.outside += 1,
                }
            }
        }
        self.summary.marked += found.len() as u64;
        self.levels.push(found);
        !reached
    }

    /// A shortest path (fewest references) from a root to `target`, or `None` when no root
    /// reaches it.
    pub fn path_to(&mut self, target: u64) -> Option<RootPath> {
        if !self.bits.get(target) {
            while self.expand_level(Some(target)) {}
        }
        let depth = self.levels.iter().position(|l| l.contains(&target))?;
        let mut steps = Vec::with_capacity(depth + 1);
        let mut current = target;
        let mut refs = Vec::new();
        for k in (0..depth).rev() {
            let mut parent = None;
            for i in 0..self.levels[k].len() {
                let object = self.levels[k][i];
                let Some(mt) = self.references(object, &mut refs) else {
                    continue;
                };
                if let Some(&(slot, _)) = refs.iter().find(|&&(_, c)| c == current) {
                    parent = Some((object, mt, slot));
                    break;
                }
            }
            let (object, _, slot) = parent?;
            let mt = self.walker.object_at(current).map_or(0, |o| o.0);
            steps.push(PathStep {
                object: current,
                method_table: mt,
                via: slot.map_or(Via::Dependent, Via::Slot),
            });
            current = object;
        }
        let mt = self.walker.object_at(current).map_or(0, |o| o.0);
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
