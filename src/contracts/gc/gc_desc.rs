//! Where an object's references are: the `GCDesc` the runtime stores just before every
//! MethodTable of a type with references (`MTFlags` bit 24, `ContainsGCPointers`).
//!
//! The word at MethodTable − 8 is a series count N.
//! - N > 0: N series of two words below it (the highest at MT − 24), each a size and a
//!   start offset. A series covers `size + object size` bytes from `object + offset`, every
//!   pointer-sized word a reference (the stored size is the run's length minus the base
//!   size, so one series covers all elements of an array of references).
//! - N < 0 (arrays of structs with references): the word at MT − 16 is the first
//!   element's offset, and −N pairs of 32-bit words from MT − 24 downwards say, for each
//!   element in turn: so many references, then so many bytes to skip. The pattern repeats
//!   until the object's end (its size less the header word before it).

use rustc_hash::FxHashMap;

use crate::contracts::ContractError;
use crate::memory::Target;

/// `MethodTable.MTFlags`: the type has references.
pub const CONTAINS_GC_POINTERS: u32 = 0x0100_0000;
/// Most series one GCDesc may have (a type has fewer than 64 K fields).
const MAX_SERIES: i64 = 1 << 16;

/// A type's reference layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GcDesc {
    /// No references.
    None,
    /// Runs of references: `(start offset, stored size)`.
    Series(Vec<(u64, i64)>),
    /// A repeating pattern from `start`: `(references, bytes to skip)` per step.
    Repeating {
        /// Offset of the first element.
        start: u64,
        /// The pattern.
        steps: Vec<(u32, u32)>,
    },
}

impl GcDesc {
    /// Reads the GCDesc of MethodTable `mt` whose flags are `mt_flags`.
    pub fn read(target: &Target, mt: u64, mt_flags: u32) -> Result<GcDesc, ContractError> {
        if mt_flags & CONTAINS_GC_POINTERS == 0 {
            return Ok(GcDesc::None);
        }
        let n = target.read_u64(mt.wrapping_sub(8))? as i64;
        let corrupt = |detail: String| ContractError::Corrupt {
            what: "GCDesc",
            addr: mt,
            detail,
        };
        if n == 0 || !(-MAX_SERIES..=MAX_SERIES).contains(&n) {
            return Err(corrupt(format!("{n} series")));
        }
        if n > 0 {
            let mut series = Vec::with_capacity(n as usize);
            for i in 0..n as u64 {
                let at = mt.wrapping_sub(24 + 16 * i);
                let size = target.read_u64(at)? as i64;
                let offset = target.read_u64(at + 8)?;
                series.push((offset, size));
            }
            return Ok(GcDesc::Series(series));
        }
        let start = target.read_u64(mt.wrapping_sub(16))?;
        let mut steps = Vec::with_capacity((-n) as usize);
        for i in 0..(-n) as u64 {
            let at = mt.wrapping_sub(24 + 8 * i);
            let refs = target.read_u32(at)?;
            let skip = target.read_u32(at + 4)?;
            steps.push((refs, skip));
        }
        if steps.iter().all(|&(refs, skip)| refs == 0 && skip == 0) {
            return Err(corrupt("a repeating pattern that never advances".into()));
        }
        Ok(GcDesc::Repeating { start, steps })
    }

    /// Calls `visit(slot offset)` for each reference slot of an object of `size` bytes
    /// (as the heap walk reports it), at most `max` of them, until `visit` returns false.
    pub fn for_each_slot(&self, size: u64, max: u64, mut visit: impl FnMut(u64) -> bool) {
        let mut seen = 0u64;
        match self {
            GcDesc::None => {}
            GcDesc::Series(series) => {
                // The GC walks the series from the highest in memory (the first listed).
                for &(offset, stored) in series {
                    let len = (stored as i128) + i128::from(size);
                    let end = offset as i128 + len.max(0);
                    let mut at = offset;
                    while (at as i128) < end && at + 16 <= size {
                        if seen >= max || !visit(at) {
                            return;
                        }
                        seen += 1;
                        at += 8;
                    }
                }
            }
            GcDesc::Repeating { start, steps } => {
                // The object's end: its size less the header word before it.
                let end = size.saturating_sub(8);
                let mut at = *start;
                while at < end {
                    let before = at;
                    for &(refs, skip) in steps {
                        for _ in 0..refs {
                            if at >= end || seen >= max || !visit(at) {
                                return;
                            }
                            seen += 1;
                            at += 8;
                        }
                        at += u64::from(skip);
                    }
                    if at == before {
                        return;
                    }
                }
            }
        }
    }
}

/// GCDescs read once per MethodTable.
#[derive(Debug, Default)]
pub struct GcDescCache {
    descs: FxHashMap<u64, Option<std::rc::Rc<GcDesc>>>,
}

impl GcDescCache {
    /// The GCDesc of `mt` (`None` when it cannot be read: the object's references are then
    /// not followed).
    pub fn get(&mut self, target: &Target, mt: u64, mt_flags: u32) -> Option<std::rc::Rc<GcDesc>> {
        self.descs
            .entry(mt)
            .or_insert_with(|| {
                GcDesc::read(target, mt, mt_flags)
                    .ok()
                    .map(std::rc::Rc::new)
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(d: &GcDesc, size: u64) -> Vec<u64> {
        let mut v = Vec::new();
        d.for_each_slot(size, u64::MAX, |s| {
            v.push(s);
            true
        });
        v
    }

    #[test]
    fn a_class_with_two_references() {
        // Base size 32: header, MethodTable, two references at 8 and 16.
        let d = GcDesc::Series(vec![(8, 16 - 32)]);
        assert_eq!(slots(&d, 32), vec![8, 16]);
    }

    #[test]
    fn an_array_of_references() {
        // One series from the first element, stored size minus the base size 24.
        let d = GcDesc::Series(vec![(16, -24)]);
        assert_eq!(slots(&d, 24 + 3 * 8), vec![16, 24, 32]);
        assert_eq!(slots(&d, 24), Vec::<u64>::new());
    }

    #[test]
    fn an_array_of_structs_with_a_reference_and_an_int() {
        // Elements of 16 bytes: a reference, then 8 bytes without.
        let d = GcDesc::Repeating {
            start: 16,
            steps: vec![(1, 8)],
        };
        assert_eq!(slots(&d, 24 + 2 * 16), vec![16, 32]);
    }

    #[test]
    fn bounded() {
        let d = GcDesc::Series(vec![(16, -24)]);
        let mut n = 0;
        d.for_each_slot(24 + 1000 * 8, 10, |_| {
            n += 1;
            true
        });
        assert_eq!(n, 10);
        let stuck = GcDesc::Repeating {
            start: 16,
            steps: vec![(0, 0)],
        };
        assert!(slots(&stuck, 1 << 40).is_empty());
    }
}
