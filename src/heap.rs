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
use crate::process::freeze::{Freeze, FreezeReport};
use crate::process::thread_snapshot::SnapshotError;
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
    if rt.is_native_aot() {
        let aot = crate::nativeaot::NativeAot::new(rt)?;
        let list = aot.threads()?;
        thread_contexts.extend(list.threads.iter().filter_map(|t| t.alloc_context));
        if let Some(e) = list.error {
            context_errors.push((list.store, format!("the thread list: {e}")));
        }
        return Ok(HeapLayout {
            heaps,
            segments,
            thread_contexts,
            context_errors,
        });
    }
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

/// What an address is on the managed heap ([`locate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// The start of an object.
    Object {
        /// Its MethodTable.
        method_table: u64,
        /// Its size.
        size: u64,
    },
    /// Inside an object, past its start.
    Inside {
        /// The object's start.
        object: u64,
        /// Its MethodTable.
        method_table: u64,
        /// Its size.
        size: u64,
    },
    /// Inside a free block (space the GC has reclaimed).
    Free {
        /// The free block's start.
        block: u64,
    },
    /// In a segment, but not in any object the walk found (past the last allocated
    /// object, in an allocation context's unused part, or in damage the walk skipped).
    Unallocated,
    /// Not in any segment of the GC heap.
    OutsideHeap,
}

/// The segment whose range (from its first object to the end of its reservation) holds
/// `address`.
pub fn segment_holding(segments: &[GcSegment], address: u64) -> Option<&GcSegment> {
    segments
        .iter()
        .find(|s| address >= s.start && address < s.segment.reserved.max(s.end))
}

/// What `address` is on the managed heap: an object's start, inside one (which), free
/// space, or not in the heap at all. Walks the one segment holding it.
pub fn locate(rt: &Runtime, address: u64) -> Result<Location, ContractError> {
    let layout = layout(rt)?;
    let Some(seg) = segment_holding(&layout.segments, address) else {
        return Ok(Location::OutsideHeap);
    };
    if address >= seg.end {
        return Ok(Location::Unallocated);
    }
    let gc = rt.contracts().gc()?;
    let mut walker = gc.walker(&layout.heaps, layout.thread_contexts.clone())?;
    let mut found = Location::Unallocated;
    let _ = walker.walk(std::slice::from_ref(seg), &layout.heaps, |o| {
        if address < o.address || address >= o.address.saturating_add(o.size.max(8)) {
            return;
        }
        found = match (o.is_free, o.address == address) {
            (true, _) => Location::Free { block: o.address },
            (false, true) => Location::Object {
                method_table: o.method_table,
                size: o.size,
            },
            (false, false) => Location::Inside {
                object: o.address,
                method_table: o.method_table,
                size: o.size,
            },
        };
    });
    Ok(found)
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

/// What a garbage collection changes and allocation does not: the GC's "structures
/// invalid" count (not 0 while it moves objects) and each heap's generation table (where
/// each generation starts: a new list of regions, or a new allocation start, after every
/// collection). Compared before and after a read of a live process's heap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcEpoch {
    /// `gc_structures_invalid_cnt`.
    pub structures_invalid: i32,
    /// `(start_segment, allocation_start)` of every generation of every heap.
    generations: Vec<(u64, u64)>,
}

impl GcEpoch {
    /// The epoch of `rt`'s GC now.
    pub fn read(rt: &Runtime) -> Result<GcEpoch, ContractError> {
        let gc = rt.contracts().gc()?;
        let structures_invalid = gc.structures_invalid_count()?;
        let generations = gc
            .heaps()?
            .iter()
            .flat_map(|h| {
                h.generations
                    .iter()
                    .map(|g| (g.start_segment, g.allocation_start))
            })
            .collect();
        Ok(GcEpoch {
            structures_invalid,
            generations,
        })
    }
}

/// How long a read of a live heap is retried while collections keep running under it.
pub const SETTLE_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

/// A read of the heap and how it settled.
#[derive(Debug, Clone)]
pub struct Settled<T> {
    /// The answer: of the last read.
    pub value: T,
    /// Tries made (1 on a dump, or when nothing changed under the first); a freeze that
    /// caught a collection and let it finish counts as one.
    pub attempts: u32,
    /// Time from the first read's start to the last one's end.
    pub elapsed: std::time::Duration,
    /// Whether the last read saw no collection and called itself whole; false only when
    /// [`SETTLE_BOUND`] passed first.
    pub consistent: bool,
    /// With [`Settle::Freeze`]: how long the last read held the process stopped.
    pub frozen: Option<FreezeReport>,
}

/// How a live heap is kept still enough to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Settle {
    /// Stop nothing; read again while collections run under the read.
    #[default]
    Retry,
    /// Hold every thread stopped for each read (`--freeze`): a collection in progress is
    /// let finish and the read made again, within the same bound.
    Freeze,
}

/// Reads `rt`'s heap with `read` until the answer is consistent: on a live process, again
/// (its cached memory dropped) while a garbage collection ran during the read or the read
/// met something half made (`whole` says it did not), for at most [`SETTLE_BOUND`]; once on
/// a dump, which cannot change. Unless the threads are held ([`settled_with`] and
/// [`Settle::Freeze`]), a collection that starts during a walk moves the objects the walk
/// is about to read. Errors of `read` are its own;
/// where the GC itself cannot be read, `read` runs once.
pub fn settled<T, E>(
    rt: &Runtime,
    read: impl FnMut() -> Result<T, E>,
    whole: impl Fn(&T) -> bool,
) -> Result<Settled<T>, E>
where
    E: From<ContractError>,
{
    settle(rt, |_| Ok(None), read, whole)
}

/// [`settled`], holding the process's threads stopped for each read with
/// [`Settle::Freeze`] (on a live process; a dump is read once either way).
pub fn settled_with<T, E>(
    rt: &Runtime,
    how: Settle,
    read: impl FnMut() -> Result<T, E>,
    whole: impl Fn(&T) -> bool,
) -> Result<Settled<T>, E>
where
    E: From<ContractError> + From<SnapshotError>,
{
    let take = |pid| match how {
        Settle::Freeze => Ok(Some(Freeze::take(pid)?)),
        Settle::Retry => Ok(None),
    };
    settle(rt, take, read, whole)
}

/// The loop of [`settled_with`]: `take` holds the threads of a live process for a read.
fn settle<T, E>(
    rt: &Runtime,
    take: impl Fn(i32) -> Result<Option<Freeze>, E>,
    mut read: impl FnMut() -> Result<T, E>,
    whole: impl Fn(&T) -> bool,
) -> Result<Settled<T>, E>
where
    E: From<ContractError>,
{
    let started = std::time::Instant::now();
    let live = match rt.target().source().kind() {
        crate::memory::TargetKind::Live { pid } => Some(pid),
        _ => None,
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        if live.is_some() && attempts > 1 {
            rt.flush();
        }
        let freeze = match live {
            Some(pid) => take(pid)?,
            None => None,
        };
        if freeze.is_some() {
            // What was cached before the threads stopped may already be stale.
            rt.flush();
        }
        // Without a GC to ask (no GC contract), the read is what it is: its own errors say
        // what it could not do.
        let before = live.and_then(|_| GcEpoch::read(rt).ok());
        // Frozen in the middle of a collection: let it finish rather than walk a heap
        // being moved (until the bound, after which the read is made all the same).
        if freeze.is_some()
            && before.as_ref().is_some_and(|b| b.structures_invalid != 0)
            && started.elapsed() < SETTLE_BOUND
        {
            drop(freeze);
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        let value = read();
        let after = before.as_ref().map(|_| {
            rt.target().flush();
            GcEpoch::read(rt)
        });
        let frozen = freeze.map(Freeze::release);
        let value = value?;
        let (Some(before), Some(after)) = (before, after) else {
            return Ok(Settled {
                value,
                attempts,
                elapsed: started.elapsed(),
                consistent: true,
                frozen,
            });
        };
        let after = after?;

        let is_whole = whole(&value);
        let consistent = before == after && before.structures_invalid == 0 && is_whole;
        tracing::debug!(
            attempts,
            unchanged = before == after,
            structures_invalid = before.structures_invalid,
            whole = is_whole,
            "a live heap read"
        );
        if consistent || started.elapsed() >= SETTLE_BOUND {
            return Ok(Settled {
                value,
                attempts,
                elapsed: started.elapsed(),
                consistent,
                frozen,
            });
        }
        // A collection in progress ends within milliseconds; do not spin on it.
        if after.structures_invalid != 0 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
