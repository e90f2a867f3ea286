//! Counted stacks: each distinct (thread, stack) with how many samples had it, frames
//! interned once, and what `cdac top` ranks (self and total samples per frame name).

use std::collections::{HashMap, HashSet};

/// An interned frame name.
pub type FrameId = u32;

/// Samples counted by stack.
#[derive(Debug, Default, Clone)]
pub struct Profile {
    names: Vec<String>,
    ids: HashMap<String, FrameId>,
    /// (thread label, frames root first) → samples.
    stacks: HashMap<(FrameId, Vec<FrameId>), u64>,
    samples: u64,
}

/// A frame name's share of a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameShare {
    /// The frame's name.
    pub name: String,
    /// Samples with this frame innermost.
    pub self_samples: u64,
    /// Samples with this frame anywhere on the stack (counted once per sample).
    pub total_samples: u64,
}

impl Profile {
    /// An empty profile.
    pub fn new() -> Profile {
        Profile::default()
    }

    /// The id of `name`, interning it on first use.
    pub fn intern(&mut self, name: &str) -> FrameId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = FrameId::try_from(self.names.len()).unwrap_or(FrameId::MAX);
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    /// The name of an interned frame.
    pub fn name(&self, id: FrameId) -> &str {
        self.names.get(id as usize).map_or("?", String::as_str)
    }

    /// Counts `count` samples of `thread` with `frames` (root first).
    pub fn add(&mut self, thread: FrameId, frames: Vec<FrameId>, count: u64) {
        *self.stacks.entry((thread, frames)).or_insert(0) += count;
        self.samples += count;
    }

    /// Samples counted.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Distinct (thread, stack) pairs.
    pub fn distinct_stacks(&self) -> usize {
        self.stacks.len()
    }

    /// Every counted stack as (thread label, frame names root first, samples), most
    /// samples first (ties by name, so output is stable).
    pub fn stacks(&self) -> Vec<(&str, Vec<&str>, u64)> {
        let mut out: Vec<(&str, Vec<&str>, u64)> = self
            .stacks
            .iter()
            .map(|((t, frames), &n)| {
                (
                    self.name(*t),
                    frames.iter().map(|&f| self.name(f)).collect(),
                    n,
                )
            })
            .collect();
        out.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (a.0, &a.1).cmp(&(b.0, &b.1))));
        out
    }

    /// Self and total samples of every frame name, most total first.
    pub fn shares(&self) -> Vec<FrameShare> {
        let mut self_n: HashMap<FrameId, u64> = HashMap::new();
        let mut total_n: HashMap<FrameId, u64> = HashMap::new();
        let mut seen = HashSet::new();
        for ((_, frames), &n) in &self.stacks {
            if let Some(&leaf) = frames.last() {
                *self_n.entry(leaf).or_insert(0) += n;
            }
            seen.clear();
            for &f in frames {
                // Recursion counts a sample once toward its frame's total.
                if seen.insert(f) {
                    *total_n.entry(f).or_insert(0) += n;
                }
            }
        }
        let mut out: Vec<FrameShare> = total_n
            .iter()
            .map(|(&f, &total)| FrameShare {
                name: self.name(f).to_string(),
                self_samples: self_n.get(&f).copied().unwrap_or(0),
                total_samples: total,
            })
            .collect();
        out.sort_by(|a, b| {
            b.total_samples
                .cmp(&a.total_samples)
                .then(b.self_samples.cmp(&a.self_samples))
                .then_with(|| a.name.cmp(&b.name))
        });
        out
    }

    /// Clears the counts (interned names are kept).
    pub fn clear_counts(&mut self) {
        self.stacks.clear();
        self.samples = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_and_total_count_recursion_once() {
        let mut p = Profile::new();
        let t = p.intern("t1");
        let (main, a, b) = (p.intern("Main"), p.intern("A"), p.intern("B"));
        p.add(t, vec![main, a, a, b], 3);
        p.add(t, vec![main, a], 1);
        let shares = p.shares();
        let of = |n: &str| shares.iter().find(|s| s.name == n).cloned().expect(n);
        assert_eq!(of("Main").total_samples, 4);
        assert_eq!(of("Main").self_samples, 0);
        assert_eq!(of("A").total_samples, 4);
        assert_eq!(of("A").self_samples, 1);
        assert_eq!(of("B").self_samples, 3);
        assert_eq!(p.samples(), 4);
        let stacks = p.stacks();
        assert_eq!(stacks[0], ("t1", vec!["Main", "A", "A", "B"], 3));
    }
}
