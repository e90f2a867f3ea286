//! One walk of the heap for the locks no table lists: objects whose header holds a thin
//! lock, and `System.Threading.Lock` objects (.NET 9 and later), whose state is in their
//! fields.

use rustc_hash::FxHashMap;

use crate::contracts::ContractError;
use crate::inspect::{Header, HeaderState, InspectOptions, Inspector, Value};
use crate::names::MethodNamer;
use crate::runtime::Runtime;

/// The managed lock type of .NET 9 and later.
pub const THREADING_LOCK: &str = "System.Threading.Lock";
/// `Lock._state`: bit 0 held; threads waiting counted from this bit (.NET 9 and 10 keep a
/// "trivial waits" flag in bit 6).
const LOCK_WAITER_SHIFT: u32 = 7;

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

/// A `System.Threading.Lock` that is held or waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadingLock {
    /// The Lock object.
    pub object: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// The owner's id (`_owningThreadId`; 0: not held): its OS thread id on .NET 9 and 10,
    /// its managed thread id on .NET 11 ([`ThreadingLock::owner_is_managed_id`]).
    pub owner_id: u64,
    /// Whether `owner_id` is a managed thread id (.NET 11) rather than an OS one.
    pub owner_is_managed_id: bool,
    /// Times entered beyond the first (`_recursionCount`).
    pub recursion: u32,
    /// Threads waiting to enter, as its state counts them.
    pub waiters: u32,
}

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
    found.problems.extend(summary.problems.iter().map(|p| {
        format!(
            "heap walk stopped in segment {} at {:#x}: {}",
            p.segment, p.address, p.detail
        )
    }));
    if !candidates.is_empty() {
        let mut inspector = Inspector::new(rt)?;
        for (object, method_table) in candidates {
            match threading_lock(&mut inspector, object, method_table) {
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

/// A Lock's state from its fields (by name, as its metadata declares them); `None` when
/// nobody holds it or waits for it.
pub(super) fn threading_lock(
    inspector: &mut Inspector<'_>,
    object: u64,
    method_table: u64,
) -> Result<Option<ThreadingLock>, ContractError> {
    // CoreLib's Lock records its owner by OS thread id on .NET 9 and 10 and by managed
    // thread id from .NET 11 (measured: the testbed's Lock deadlock, whose owners' managed
    // ids are the manifest's).
    let owner_is_managed_id = inspector
        .runtime()
        .contracts()
        .context()
        .major
        .is_some_and(|m| m >= 11);
    let view = inspector.inspect(
        object,
        InspectOptions {
            max_elements: 0,
            statics: false,
        },
    )?;
    let field = |name: &str| -> Option<u64> {
        view.fields
            .iter()
            .find(|f| f.name == name)
            .and_then(|f| match f.value {
                Value::UInt(v) => Some(v),
                Value::Int(v) => u64::try_from(v).ok(),
                _ => None,
            })
    };
    let (Some(owner), Some(state)) = (field("_owningThreadId"), field("_state")) else {
        return Err(ContractError::Corrupt {
            what: "System.Threading.Lock",
            addr: object,
            detail: "it has no _owningThreadId or _state field".into(),
        });
    };
    let waiters = (state >> LOCK_WAITER_SHIFT) as u32;
    if owner == 0 && waiters == 0 {
        return Ok(None);
    }
    Ok(Some(ThreadingLock {
        object,
        method_table,
        owner_id: owner,
        owner_is_managed_id,
        recursion: field("_recursionCount").unwrap_or(0) as u32,
        waiters,
    }))
}
