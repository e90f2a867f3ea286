//! Deadlocks: the cycles of the wait-for graph. A thread blocked entering a lock waits for
//! that lock's owner; each thread waits for at most one lock, so each node has at most one
//! edge out, and following edges from any thread ends at a thread that waits for nothing
//! or comes back to a thread already on the path: a cycle.

use std::collections::{BTreeMap, BTreeSet};

/// Every cycle of the graph `waits_for` (thread → the thread it waits for), each as its
/// threads in wait order starting from the smallest, sorted; a thread waiting for itself
/// is a cycle of one.
pub fn cycles(waits_for: &BTreeMap<u64, u64>) -> Vec<Vec<u64>> {
    let mut done: BTreeSet<u64> = BTreeSet::new();
    let mut found = BTreeSet::new();
    for &start in waits_for.keys() {
        if done.contains(&start) {
            continue;
        }
        let mut path: Vec<u64> = Vec::new();
        let mut on_path: BTreeMap<u64, usize> = BTreeMap::new();
        let mut current = start;
        loop {
            if let Some(&at) = on_path.get(&current) {
                let mut cycle = path[at..].to_vec();
                let min = cycle
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, t)| **t)
                    .map_or(0, |(i, _)| i);
                cycle.rotate_left(min);
                found.insert(cycle);
                break;
            }
            if done.contains(&current) {
                break;
            }
            on_path.insert(current, path.len());
            path.push(current);
            match waits_for.get(&current) {
                Some(&next) => current = next,
                None => break,
            }
        }
        done.extend(path);
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_threads_waiting_for_each_other_are_one_cycle() {
        let g = BTreeMap::from([(20, 21), (21, 20), (22, 20), (23, 22)]);
        assert_eq!(cycles(&g), vec![vec![20, 21]]);
    }

    #[test]
    fn chains_without_a_cycle_have_none_and_separate_cycles_are_all_found() {
        assert!(cycles(&BTreeMap::from([(1, 2), (2, 3), (4, 3)])).is_empty());
        let g = BTreeMap::from([(5, 6), (6, 7), (7, 5), (9, 8), (8, 9), (10, 10)]);
        assert_eq!(cycles(&g), vec![vec![5, 6, 7], vec![8, 9], vec![10]]);
    }
}
