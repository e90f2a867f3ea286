//! One walk of the heap for the locks no table lists: objects whose header holds a thin
//! lock, and `System.Threading.Lock` objects (.NET 9 and later), whose state is in their
//! fields.

use rustc_hash::FxHashMap;

use crate::contracts::ContractError;
use crate::inspect::{Header, HeaderState, Inspector};
use crate::names::MethodNamer;
use crate::runtime::Runtime;

/// The managed lock type of .NET 9 and later.
pub const THREADING_LOCK: &str = "System.Threading.Lock";

/// A thin lock found in an object's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinLock {
    /// The object.
    pub object: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// The owner's thin-lock id (`Thread.Id`).
    pub thread_id: u32,
    /// Times entered beyond the first.
    pub recursion: u32,
}

pub use crate::inspect::ThreadingLock;

/// What the walk found.
#[derive(Debug, Default)]
pub struct HeapLocks {
    /// Thin locks.
    pub thin: Vec<ThinLock>,
    /// Held or contended `System.Threading.Lock`s.
    pub threading: Vec<ThreadingLock>,
    /// Objects visited.
    pub objects: u64,
    /// Where the walk stopped early, and what could not be read.
    pub problems: Vec<String>,
}

/// Walks every segment once, reading each object's header.
pub fn scan(rt: &Runtime) -> Result<HeapLocks, ContractError> {
    let layout = crate::heap::layout(rt)?;
    let gc = rt.contracts().gc()?;
    let mut found = HeapLocks::default();
    let in_gc = gc.structures_invalid_count().unwrap_or(0);
    if in_gc != 0 {
        found.problems.push(format!(
            "the target was taken while a garbage collection was moving objects \
             (gc_structures_invalid_cnt = {in_gc}): thin locks and Locks may be missing"
        ));
    }
    let mut walker = gc.walker(&layout.heaps, layout.thread_contexts.clone())?;
    let target = rt.target();
    let mut namer = MethodNamer::for_runtime(rt);
    // Whether a MethodTable is System.Threading.Lock's, by name, once per MethodTable.
    let mut is_lock: FxHashMap<u64, bool> = FxHashMap::default();
    let mut candidates = Vec::new();
    let summary = walker.walk(&layout.segments, &layout.heaps, |o| {
        if o.is_free {
            return;
        }
        // The walk's own buffer has the header, but for the first object of each read.
        let header = o
            .header
            .or_else(|| target.read_u32(o.address.wrapping_sub(4)).ok());
        if let Some(word) = header {
            if let HeaderState::ThinLock {
                thread_id,
                recursion,
            } = Header::decode(word).state
            {
                found.thin.push(ThinLock {
                    object: o.address,
                    method_table: o.method_table,
                    thread_id,
                    recursion,
                });
            }
        }
        let lock = *is_lock
            .entry(o.method_table)
            .or_insert_with(|| namer.type_name(o.method_table).as_deref() == Some(THREADING_LOCK));
        if lock {
            candidates.push((o.address, o.method_table));
        }
    });
    found.objects = summary.objects;
    found
        .problems
        .extend(summary.problems.iter().map(|p| format!("heap walk: {p}")));
    if !candidates.is_empty() {
        let mut inspector = Inspector::new(rt)?;
        for (object, method_table) in candidates {
            match inspector.threading_lock(object, method_table) {
                Ok(Some(l)) => found.threading.push(l),
                Ok(None) => {}
                Err(e) => found
                    .problems
                    .push(format!("System.Threading.Lock {object:#x}: {e}")),
            }
        }
    }
    Ok(found)
}
