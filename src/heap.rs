//! The managed heap of an opened runtime: every object, with the allocation contexts of
//! all threads stepped over, and statistics per type (`cdac heap`).
//!
//! The GC contract ([`crate::contracts::gc`]) knows the segments and how to step from one
//! object to the next; this module adds what it needs from other contracts (each thread's
//! allocation context) and the per-type summary, keyed by raw MethodTable and named once
//! at the end.

use rustc_hash::FxHashMap;

use crate::contracts::gc::{GcHeapData, GcSegment, HeapObject, WalkSummary};
use crate::contracts::ContractError;
use crate::runtime::Runtime;

/// The heap's layout, read once before a walk.
#[derive(Debug, Clone)]
pub struct HeapLayout {
    /// The heaps (one under workstation GC).
    pub heaps: Vec<GcHeapData>,
    /// Every segment, heap by heap.
    pub segments: Vec<GcSegment>,
    /// Allocation contexts of the runtime's threads, `(pointer, limit)`.
    pub thread_contexts: Vec<(u64, u64)>,
    /// Threads whose allocation context could not be read (each a thread address and why).
    pub context_errors: Vec<(u64, String)>,
}

/// Reads the heaps, segments and every thread's allocation context.
pub fn layout(rt: &Runtime) -> Result<HeapLayout, ContractError> {
    let gc = rt.contracts().gc()?;
    let heaps = gc.heaps()?;
    let segments = gc.segments()?;
    let mut thread_contexts = Vec::new();
    let mut context_errors = Vec::new();
    let threads = rt.contracts().threads()?;
    let list = threads.threads()?;
    for t in &list.threads {
        match threads.allocation_context(t.address) {
            Ok(Some(c)) => thread_contexts.push(c),
            Ok(None) => {}
            Err(e) => context_errors.push((t.address, e.to_string())),
        }
    }
    if let Some(e) = list.error {
        context_errors.push((list.store.address, format!("the thread list: {e}")));
    }
    Ok(HeapLayout {
        heaps,
        segments,
        thread_contexts,
        context_errors,
    })
}

/// Walks every object of the heap in `layout`, calling `visit` for each.
pub fn walk(
    rt: &Runtime,
    layout: &HeapLayout,
    visit: impl FnMut(&HeapObject),
) -> Result<WalkSummary, ContractError> {
    let gc = rt.contracts().gc()?;
    let mut walker = gc.walker(&layout.heaps, layout.thread_contexts.clone())?;
    Ok(walker.walk(&layout.segments, &layout.heaps, visit))
}

/// Objects of one type: how many and their total size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeStat {
    /// The type's MethodTable.
    pub method_table: u64,
    /// Number of objects.
    pub count: u64,
    /// Sum of their (unaligned) sizes.
    pub total_size: u64,
    /// Whether these are free objects.
    pub is_free: bool,
}

/// Counts and sizes per MethodTable, as objects arrive.
#[derive(Debug, Clone, Default)]
pub struct HeapStats {
    by_method_table: FxHashMap<u64, TypeStat>,
}

impl HeapStats {
    /// Adds one object.
    pub fn add(&mut self, o: &HeapObject) {
        let s = self
            .by_method_table
            .entry(o.method_table)
            .or_insert(TypeStat {
                method_table: o.method_table,
                is_free: o.is_free,
                ..TypeStat::default()
            });
        s.count += 1;
        s.total_size += o.size;
    }

    /// The statistics, smallest total size first (as `dumpheap -stat` prints them), ties
    /// by MethodTable.
    pub fn sorted(&self) -> Vec<TypeStat> {
        let mut v: Vec<TypeStat> = self.by_method_table.values().copied().collect();
        v.sort_by_key(|s| (s.total_size, s.method_table));
        v
    }
}
