//! More than one path to an object (`cdac gcroot --all`): one path from each root that
//! reaches it, up to a bound.
//!
//! A depth-first search from each root in turn, sharing what earlier searches learnt:
//! - a search that does not reach the target leaves every object it visited marked as
//!   leading nowhere (everything it visited is reachable from that root, so none of it
//!   reaches the target), and later searches skip them: all failed searches together visit
//!   each object once;
//! - a search that reaches it records, for each object on its path, the next one, so a
//!   later search that meets one of them finishes there; the other objects it visited are
//!   unmarked, since some of them may still lead to the target by a way not yet tried.
//!
//! Memory: one more bitmap (1/64 of the heap), the search's stack, and the objects one
//! successful search visited.

use rustc_hash::FxHashMap;

use super::mark::{Marker, PathStep, RootPath, Via};

/// One object on the depth-first stack: how it was reached and its references.
struct Frame {
    object: u64,
    via: Via,
    references: Vec<(Option<u64>, u64)>,
    next: usize,
}

impl Marker<'_> {
    /// Paths to `target`, one from each root that reaches it (roots in the order read),
    /// at most `max_paths`. Paths are not the shortest: [`Marker::path_to`] gives that.
    pub fn paths_to(&mut self, target: u64, max_paths: usize) -> Vec<RootPath> {
        let mut seen = self.bits.empty_like();
        // An object known to lead to the target: the next object and how.
        let mut leads: FxHashMap<u64, (u64, Via)> = FxHashMap::default();
        let mut paths = Vec::new();
        let roots = self.roots.roots.clone();
        for root in roots {
            if paths.len() >= max_paths {
                break;
            }
            let start = root.object;
            let reached = if start == target || leads.contains_key(&start) {
                Some(vec![self.step(start, Via::Root)])
            } else if seen.set(start) == Some(true) {
                self.search(start, target, &mut seen, &mut leads)
            } else {
                None
            };
            if let Some(mut steps) = reached {
                self.follow(&mut steps, target, &leads);
                paths.push(RootPath { root, steps });
            }
        }
        paths
    }

    /// A path step for `object`.
    fn step(&mut self, object: u64, via: Via) -> PathStep {
        PathStep {
            object,
            method_table: self.reader.header(object).map_or(0, |h| h.0),
            via,
        }
    }

    fn frame(&mut self, object: u64, via: Via) -> Frame {
        let mut references = Vec::new();
        self.reader.for_each_reference(object, |slot, child| {
            references.push((slot, child));
            true
        });
        Frame {
            object,
            via,
            references,
            next: 0,
        }
    }

    /// The depth-first search from `start` (already marked in `seen`): the steps from it
    /// to the target or to an object known to lead there, or `None`.
    fn search(
        &mut self,
        start: u64,
        target: u64,
        seen: &mut super::mark::SegmentBits,
        leads: &mut FxHashMap<u64, (u64, Via)>,
    ) -> Option<Vec<PathStep>> {
        let mut visited = vec![start];
        let mut stack = vec![self.frame(start, Via::Root)];
        let mut end = None;
        while let Some(top) = stack.last_mut() {
            let Some(&(slot, child)) = top.references.get(top.next) else {
                stack.pop();
                continue;
            };
            top.next += 1;
            let via = slot.map_or(Via::Dependent, Via::Slot);
            if child == target || leads.contains_key(&child) {
                end = Some((child, via));
                break;
            }
            if seen.set(child) == Some(true) {
                visited.push(child);
                let frame = self.frame(child, via);
                stack.push(frame);
            }
        }
        let Some((last, via)) = end else {
            // Nothing reachable from this root reaches the target: keep them marked.
            return None;
        };
        // The objects on the stack lead to the target; the others visited may yet.
        for (i, f) in stack.iter().enumerate() {
            let next = stack.get(i + 1).map_or((last, via), |n| (n.object, n.via));
            leads.insert(f.object, next);
        }
        for v in visited {
            seen.clear(v);
        }
        let frames: Vec<(u64, Via)> = stack.iter().map(|f| (f.object, f.via)).collect();
        let mut steps: Vec<PathStep> = frames
            .into_iter()
            .map(|(object, via)| self.step(object, via))
            .collect();
        steps.push(self.step(last, via));
        Some(steps)
    }

    /// Extends `steps` (which end at the target or at an object known to lead to it) to
    /// the target.
    fn follow(
        &mut self,
        steps: &mut Vec<PathStep>,
        target: u64,
        leads: &FxHashMap<u64, (u64, Via)>,
    ) {
        let mut current = steps.last().map_or(target, |s| s.object);
        // A chain of known leads is a path found earlier: never longer than the map.
        for _ in 0..=leads.len() {
            if current == target {
                return;
            }
            let Some(&(next, via)) = leads.get(&current) else {
                return;
            };
            steps.push(self.step(next, via));
            current = next;
        }
    }
}
