//! The managed thread pool (`cdac threadpool`, like SOS `threadpool` and
//! `threadpoolqueue`): its worker counts and limits, and the work queued in its global
//! queues and in each worker's local queue, each item with the method it will run.
//!
//! The pool's objects are found by one walk of the heap, by type (so no static field needs
//! to be read): `PortableThreadPool` (limits, counts), `ThreadPoolWorkQueue` (the global
//! queues), and each worker's `ThreadPoolWorkQueueThreadLocals` with its
//! `WorkStealingQueue`.
//! - `queues`: the items of a `ConcurrentQueue` and of a `WorkStealingQueue`.
//! - [`items`]: what a queued item runs.

pub mod items;
mod queues;

use crate::contracts::ContractError;
use crate::inspect::{Inspector, Value};
use crate::names::MethodNamer;
use crate::runtime::Runtime;

pub use items::WorkItem;

const PORTABLE_THREAD_POOL: &str = "System.Threading.PortableThreadPool";
const WORK_QUEUE: &str = "System.Threading.ThreadPoolWorkQueue";
const THREAD_LOCALS: &str = "System.Threading.ThreadPoolWorkQueueThreadLocals";
const STEALING_QUEUE: &str = "System.Threading.ThreadPoolWorkQueue+WorkStealingQueue";

/// The pool's worker counts and limits (`PortableThreadPool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolCounts {
    /// The pool object.
    pub address: u64,
    /// CPU utilization the pool last measured, in percent.
    pub cpu_utilization: i64,
    /// Fewest workers it keeps.
    pub min_workers: i64,
    /// Most workers it starts.
    pub max_workers: i64,
    /// Workers that exist.
    pub workers: u64,
    /// Workers running a work item.
    pub workers_running: u64,
    /// The number of workers the pool aims for.
    pub workers_goal: u64,
}

/// A worker's own queue.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalQueue {
    /// The `WorkStealingQueue`.
    pub queue: u64,
    /// The managed id of the thread it belongs to.
    pub managed_thread_id: Option<i64>,
    /// Its items, oldest first.
    pub items: Vec<WorkItem>,
}

/// The thread pool, as read.
#[derive(Debug, Default)]
pub struct ThreadPoolReport {
    /// Counts and limits; `None` when the process has no `PortableThreadPool` (it never
    /// used the pool, or uses the Windows one).
    pub counts: Option<PoolCounts>,
    /// Items of the global queues (high priority first), oldest first.
    pub global: Vec<WorkItem>,
    /// Each worker's own queue that holds items.
    pub local: Vec<LocalQueue>,
    /// Objects the heap walk visited.
    pub objects_scanned: u64,
    /// What could not be read.
    pub problems: Vec<String>,
}

/// The pool's objects, by kind.
#[derive(Default)]
struct Found {
    pools: Vec<u64>,
    work_queues: Vec<u64>,
    thread_locals: Vec<u64>,
    stealing_queues: Vec<u64>,
}

/// The value at a path of field names (`_separated`, `counts`, `_data`).
fn path<'v>(fields: &'v [crate::inspect::FieldView], names: &[&str]) -> Option<&'v Value> {
    let (first, rest) = names.split_first()?;
    let f = fields.iter().find(|f| f.name == *first)?;
    if rest.is_empty() {
        return Some(&f.value);
    }
    match &f.value {
        Value::Struct { fields, .. } => path(fields, rest),
        _ => None,
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(i) => Some(*i),
        Value::UInt(u) => i64::try_from(*u).ok(),
        _ => None,
    }
}

fn reference(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Reference { address, .. } if *address != 0 => Some(*address),
        _ => None,
    }
}

/// Reads the pool: one heap walk, then its objects' fields.
pub fn read_thread_pool(rt: &Runtime) -> Result<ThreadPoolReport, ContractError> {
    let layout = crate::heap::layout(rt)?;
    let mut namer = MethodNamer::for_runtime(rt);
    let mut kinds: rustc_hash::FxHashMap<u64, u8> = rustc_hash::FxHashMap::default();
    let mut found = Found::default();
    let summary = crate::heap::walk(rt, &layout, |o| {
        if o.is_free {
            return;
        }
        let kind = *kinds.entry(o.method_table).or_insert_with(|| {
            match namer.type_name(o.method_table).as_deref() {
                Some(PORTABLE_THREAD_POOL) => 1,
                Some(WORK_QUEUE) => 2,
                Some(THREAD_LOCALS) => 3,
                Some(STEALING_QUEUE) => 4,
                _ => 0,
            }
        });
        match kind {
            1 => found.pools.push(o.address),
            2 => found.work_queues.push(o.address),
            3 => found.thread_locals.push(o.address),
            4 => found.stealing_queues.push(o.address),
            _ => {}
        }
    })?;
    let mut report = ThreadPoolReport {
        objects_scanned: summary.objects,
        ..ThreadPoolReport::default()
    };
    report
        .problems
        .extend(summary.problems.iter().map(|p| format!("heap walk: {p}")));
    let mut inspector = Inspector::new(rt)?;
    let mut describer = items::Describer::new(rt);
    if found.pools.len() > 1 || found.work_queues.len() > 1 {
        report.problems.push(format!(
            "{} PortableThreadPool and {} ThreadPoolWorkQueue objects: the first of each is read",
            found.pools.len(),
            found.work_queues.len()
        ));
    }
    if let Some(&pool) = found.pools.first() {
        match pool_counts(&mut inspector, pool) {
            Ok(c) => report.counts = Some(c),
            Err(e) => report
                .problems
                .push(format!("PortableThreadPool {pool:#x}: {e}")),
        }
    }
    if let Some(&queue) = found.work_queues.first() {
        match global_items(&mut inspector, &mut describer, queue) {
            Ok(items) => report.global = items,
            Err(e) => report
                .problems
                .push(format!("ThreadPoolWorkQueue {queue:#x}: {e}")),
        }
    }
    // Each stealing queue's thread, from the thread locals that hold it.
    let mut owners: rustc_hash::FxHashMap<u64, i64> = rustc_hash::FxHashMap::default();
    for &locals in &found.thread_locals {
        let Ok(v) = inspector.view(locals, 0) else {
            continue;
        };
        let (Some(queue), Some(thread)) = (
            reference(path(&v.fields, &["workStealingQueue"])),
            reference(path(&v.fields, &["currentThread"])),
        ) else {
            continue;
        };
        if let Some(id) = inspector
            .view(thread, 0)
            .ok()
            .and_then(|t| int(path(&t.fields, &["_managedThreadId"])))
        {
            owners.insert(queue, id);
        }
    }
    for &queue in &found.stealing_queues {
        match queues::stealing_queue_items(&mut inspector, queue) {
            Ok(objects) if objects.is_empty() => {}
            Ok(objects) => report.local.push(LocalQueue {
                queue,
                managed_thread_id: owners.get(&queue).copied(),
                items: objects
                    .into_iter()
                    .map(|o| describer.describe(&mut inspector, o))
                    .collect(),
            }),
            Err(e) => report
                .problems
                .push(format!("WorkStealingQueue {queue:#x}: {e}")),
        }
    }
    Ok(report)
}

/// `PortableThreadPool`'s limits and its counts word (`_separated.counts._data`: bits 0-15
/// workers running a work item, 16-31 workers that exist, 32-47 the goal).
fn pool_counts(inspector: &mut Inspector<'_>, pool: u64) -> Result<PoolCounts, ContractError> {
    let v = inspector.view(pool, 0)?;
    let missing = |what: &str| ContractError::Corrupt {
        what: "PortableThreadPool",
        addr: pool,
        detail: format!("it has no {what} field"),
    };
    let data = match path(&v.fields, &["_separated", "counts", "_data"]) {
        Some(Value::UInt(d)) => *d,
        Some(Value::Int(d)) => *d as u64,
        _ => return Err(missing("_separated.counts._data")),
    };
    Ok(PoolCounts {
        address: pool,
        cpu_utilization: int(path(&v.fields, &["_cpuUtilization"]))
            .ok_or_else(|| missing("_cpuUtilization"))?,
        min_workers: int(path(&v.fields, &["_minThreads"]))
            .ok_or_else(|| missing("_minThreads"))?,
        max_workers: int(path(&v.fields, &["_maxThreads"]))
            .ok_or_else(|| missing("_maxThreads"))?,
        workers_running: data & 0xFFFF,
        workers: (data >> 16) & 0xFFFF,
        workers_goal: (data >> 32) & 0xFFFF,
    })
}

/// The global queues' items: high priority first, then the normal queue, then the queues
/// assigned to groups of workers (.NET 8 and later, on machines with many cores), then the
/// low priority queue.
fn global_items(
    inspector: &mut Inspector<'_>,
    describer: &mut items::Describer<'_>,
    queue: u64,
) -> Result<Vec<WorkItem>, ContractError> {
    let v = inspector.view(queue, 0)?;
    let mut queues: Vec<u64> = ["highPriorityWorkItems", "workItems"]
        .iter()
        .filter_map(|n| reference(path(&v.fields, &[n])))
        .collect();
    if let Some(array) = reference(path(&v.fields, &["_assignableWorkItemQueues"])) {
        queues.extend(queues::reference_array(inspector, array)?);
    }
    if let Some(low) = reference(path(&v.fields, &["lowPriorityWorkItems"])) {
        queues.push(low);
    }
    let mut items = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for q in queues {
        if !seen.insert(q) {
            continue;
        }
        for o in queues::concurrent_queue_items(inspector, q)? {
            items.push(describer.describe(inspector, o));
        }
    }
    Ok(items)
}
