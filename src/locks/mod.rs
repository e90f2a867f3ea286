//! Who holds which lock, who waits for it, and the deadlocks among them (`cdac locks`).
//!
//! - Monitors with a sync block come from the sync table
//!   ([`crate::contracts::sync_block`]): holder, times entered, and the threads the
//!   runtime counts as waiting.
//! - Thin locks (a monitor held without contention, kept in the object's header) and
//!   `System.Threading.Lock`s (.NET 9 and later) are found by one walk of the heap
//!   ([`scan`]).
//! - Which lock each blocked thread waits for comes from its stack (`blocked`), and
//!   the deadlocks are the cycles of the resulting wait-for graph (`cycles`).

mod blocked;
mod cycles;
pub mod scan;

use std::collections::{BTreeMap, HashMap};

use crate::contracts::sync_block::Holder;
use crate::contracts::thread::ThreadInfo;
use crate::contracts::ContractError;
use crate::names::MethodNamer;
use crate::runtime::Runtime;
use crate::stacks::{thread_stacks_with, LiveRegisters, Stacks, StacksOptions};

pub use blocked::BlockedIn;

mod condition;

/// A thread, as a lock report names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRef {
    /// The `Thread*` (0 when the runtime does not know the thread).
    pub thread: u64,
    /// Its managed id.
    pub managed_id: Option<u32>,
    /// Its kernel id.
    pub os_id: u64,
    /// Its managed name.
    pub name: Option<String>,
}

/// Where a lock's state is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// A monitor whose state is in a sync block.
    SyncBlock {
        /// Its index in the sync table.
        index: u32,
        /// The sync block.
        address: u64,
    },
    /// A monitor held without a sync block: its owner and recursion are in the header.
    ThinLock,
    /// A `System.Threading.Lock` object.
    ThreadingLock,
}

/// One lock that is held or waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The object locked (for a `System.Threading.Lock`, the Lock itself).
    pub object: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// Where its state is.
    pub kind: LockKind,
    /// Who holds it (`None`: nobody, or a holder that is no thread of the runtime, which
    /// `holder_unresolved` describes).
    pub owner: Option<ThreadRef>,
    /// The holder as recorded, when it names no thread of the runtime.
    pub holder_unresolved: Option<String>,
    /// Times the holder entered it (0 when free).
    pub times_entered: u32,
    /// Threads waiting to enter it, as the lock itself counts them.
    pub waiters_counted: u32,
    /// The threads cdac found blocked on it (from their stacks).
    pub waiting: Vec<ThreadRef>,
    /// The threads waiting in `Monitor.Wait` for it to be pulsed (from its sync block's
    /// wait list); they hold it no longer and will enter it again.
    pub waiting_for_pulse: Vec<ThreadRef>,
}

/// A deadlock: threads each waiting for a lock the next one holds, the last waiting for
/// the first's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadlock {
    /// Each thread of the cycle and the lock object it waits for.
    pub waits: Vec<(ThreadRef, u64)>,
}

/// Everything [`read_locks`] found.
#[derive(Debug, Clone, Default)]
pub struct LockReport {
    /// Held or contended locks, by object address.
    pub locks: Vec<LockInfo>,
    /// Deadlocks.
    pub deadlocks: Vec<Deadlock>,
    /// Objects the heap walk visited (`None` when the heap was not walked).
    pub objects_scanned: Option<u64>,
    /// Sync table entries in use or free, and free (SOS `syncblk`'s "Total" and "Free");
    /// `None` when the table could not be read.
    pub sync_table: Option<(u32, u32)>,
    /// Whether stacks were read (without them nobody is known to be waiting).
    pub stacks_read: bool,
    /// What could not be read (the rest is still reported).
    pub problems: Vec<String>,
    /// How long reading the stacks of a live process stopped its threads.
    pub pauses: Option<crate::stacks::Pauses>,
}

/// What [`read_locks`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// Walk the heap for thin locks and `System.Threading.Lock`s.
    pub heap: bool,
    /// Read every thread's stack to find who waits for what; on a live process, how its
    /// registers are read.
    pub stacks: Option<LiveRegisters>,
}

/// Reads the locks of `rt` and the deadlocks among them.
pub fn read_locks(rt: &Runtime, options: LockOptions) -> Result<LockReport, ContractError> {
    let Some(live) = options.stacks else {
        return read_locks_from(rt, options.heap, None);
    };
    match thread_stacks_with(rt, live, None, StacksOptions { gc_roots: true }) {
        Ok(stacks) => {
            let mut report = read_locks_from(rt, options.heap, Some(&stacks))?;
            report.pauses = stacks.pauses();
            Ok(report)
        }
        Err(e) => {
            let mut report = read_locks_from(rt, options.heap, None)?;
            report.problems.push(format!("stacks: {e}"));
            Ok(report)
        }
    }
}

/// Fills the Monitor.Wait waiters of .NET 11 monitors (`(entry, waiters)`) with the
/// threads waiting with them, found on their stacks. Without stacks each waiter is listed
/// as a thread not known; with them, a waiter no stack holds is a problem, named.
fn tie_condition_waiters(
    rt: &Runtime,
    report: &mut LockReport,
    pending: &[(usize, Vec<u64>)],
    stacks: Option<&Stacks>,
    thread_of_os: &dyn Fn(u64) -> Option<ThreadRef>,
) {
    let all: std::collections::HashSet<u64> = pending
        .iter()
        .flat_map(|(_, w)| w.iter().copied())
        .collect();
    let owners = stacks.map(|s| {
        let mut namer = MethodNamer::for_runtime(rt);
        condition::threads_of_waiters(s, &mut namer, &all)
    });
    for (entry, waiters) in pending {
        let Some(l) = report.locks.get_mut(*entry) else {
            continue;
        };
        for w in waiters {
            let unknown = ThreadRef {
                thread: 0,
                managed_id: None,
                os_id: 0,
                name: None,
            };
            match &owners {
                None => l.waiting_for_pulse.push(unknown),
                Some(o) => match o.get(w).and_then(|&os| thread_of_os(os)) {
                    Some(t) => l.waiting_for_pulse.push(t),
                    None => report.problems.push(format!(
                        "Monitor.Wait waiter {w:#x} of {:#x}: no thread waits with it",
                        l.object
                    )),
                },
            }
        }
    }
}

/// [`read_locks`] with stacks already read (with their GC roots, [`StacksOptions`]), as
/// `cdac analyze` has them; without stacks nobody is known to be waiting.
pub fn read_locks_from(
    rt: &Runtime,
    heap: bool,
    stacks: Option<&Stacks>,
) -> Result<LockReport, ContractError> {
    let mut report = LockReport::default();
    let threads = rt.contracts().threads()?;
    let list = threads.threads()?;
    let thread_ref = |t: &ThreadInfo| ThreadRef {
        thread: t.address,
        managed_id: Some(t.managed_id),
        os_id: t.os_id,
        name: threads.thread_name(t).ok().flatten(),
    };
    let by_os: HashMap<u64, &ThreadInfo> = list.threads.iter().map(|t| (t.os_id, t)).collect();
    // The thread a System.Threading.Lock names as its owner.
    let owner_of = |l: &scan::ThreadingLock| l.owner.and_then(|h| h.find(&list.threads));

    // Monitors with a sync block (and, .NET 11, the Locks they were inflated to, not
    // listed again as Locks of their own).
    let mut inflated_locks: Vec<u64> = Vec::new();
    // .NET 11: each monitor's Monitor.Wait waiters (its Lock's Condition), by the index of
    // its entry in the report; tied to their threads after the loop, in one read of the
    // threads' statics.
    let mut condition_waiters: Vec<(usize, Vec<u64>)> = Vec::new();
    // One inspector for every Lock (it keeps the types' layouts), made when one is met.
    let mut inspector = None;
    let limit = rt.target().limits().max_list_length;
    match rt.contracts().sync_blocks() {
        Ok(sync) => match sync.used_part() {
            Ok(table) => {
                report.sync_table = Some((table.total, table.free));
                for e in table.entries {
                    let block = match sync.read(e.sync_block, e.index) {
                        Ok(b) => b,
                        Err(err) => {
                            report
                                .problems
                                .push(format!("sync block {}: {err}", e.index));
                            continue;
                        }
                    };
                    let mut m = block.monitor;
                    let mut waiters_in_condition = Vec::new();
                    // .NET 11: a contended monitor is a managed Lock, whose fields say who
                    // holds it; the sync block reports it under the locked object.
                    if let Some(lock) = block.lock_object {
                        inflated_locks.push(lock);
                        let mt = rt.target().read_pointer(lock).unwrap_or(0) & !7;
                        match inspector.get_or_insert_with(|| crate::inspect::Inspector::new(rt)) {
                            Ok(i) => {
                                match i.threading_lock(lock, mt) {
                                    Ok(l) => m = l.map(|l| l.as_monitor()).unwrap_or_default(),
                                    Err(err) => report.problems.push(format!(
                                        "sync block {}: its System.Threading.Lock {lock:#x}: {err}",
                                        e.index
                                    )),
                                }
                                match condition::condition_waiters(i, lock, limit) {
                                    Ok(w) => waiters_in_condition = w,
                                    Err(err) => report.problems.push(format!(
                                        "sync block {}: the Monitor.Wait waiters of Lock {lock:#x}: {err}",
                                        e.index
                                    )),
                                }
                            }
                            Err(err) => report.problems.push(format!(
                                "sync block {}: its System.Threading.Lock {lock:#x}: {err}",
                                e.index
                            )),
                        }
                    }
                    let pulse_waiters = match sync.pulse_waiters(e.sync_block) {
                        Ok(w) => w,
                        Err(err) => {
                            report
                                .problems
                                .push(format!("sync block {}: {err}", e.index));
                            Vec::new()
                        }
                    };
                    if !m.locked
                        && m.waiters == 0
                        && pulse_waiters.is_empty()
                        && waiters_in_condition.is_empty()
                    {
                        continue;
                    }
                    if !waiters_in_condition.is_empty() {
                        condition_waiters.push((report.locks.len(), waiters_in_condition));
                    }
                    let waiting_for_pulse = pulse_waiters
                        .iter()
                        .map(|&t| match list.threads.iter().find(|x| x.address == t) {
                            Some(info) => thread_ref(info),
                            None => ThreadRef {
                                thread: t,
                                managed_id: None,
                                os_id: 0,
                                name: None,
                            },
                        })
                        .collect();
                    let holder = m.holder.and_then(|h| h.find(&list.threads));
                    let method_table = rt.target().read_pointer(e.object).unwrap_or(0) & !7;
                    report.locks.push(LockInfo {
                        object: e.object,
                        method_table,
                        kind: LockKind::SyncBlock {
                            index: e.index,
                            address: e.sync_block,
                        },
                        owner: holder.map(thread_ref),
                        holder_unresolved: match (m.holder, holder) {
                            (Some(h), None) => Some(format!("{h:?}")),
                            _ => None,
                        },
                        times_entered: m.recursion,
                        waiters_counted: m.waiters,
                        waiting: Vec::new(),
                        waiting_for_pulse,
                    });
                }
            }
            Err(e) => report.problems.push(format!("sync table: {e}")),
        },
        Err(e) => report.problems.push(format!("sync blocks: {e}")),
    }
    if !condition_waiters.is_empty() {
        tie_condition_waiters(rt, &mut report, &condition_waiters, stacks, &|os| {
            by_os.get(&os).map(|t| thread_ref(t))
        });
    }

    // Thin locks and System.Threading.Locks.
    if heap {
        match scan::scan(rt) {
            Ok(found) => {
                report.objects_scanned = Some(found.objects);
                report.problems.extend(found.problems);
                for l in found.thin {
                    let holder = Holder::ThinLockId(l.thread_id).find(&list.threads);
                    report.locks.push(LockInfo {
                        object: l.object,
                        method_table: l.method_table,
                        kind: LockKind::ThinLock,
                        owner: holder.map(thread_ref),
                        holder_unresolved: holder
                            .is_none()
                            .then(|| format!("thin-lock id {}", l.thread_id)),
                        times_entered: l.recursion + 1,
                        waiters_counted: 0,
                        waiting: Vec::new(),
                        waiting_for_pulse: Vec::new(),
                    });
                }
                for l in found
                    .threading
                    .into_iter()
                    .filter(|l| !inflated_locks.contains(&l.object))
                {
                    let holder = owner_of(&l);
                    report.locks.push(LockInfo {
                        object: l.object,
                        method_table: l.method_table,
                        kind: LockKind::ThreadingLock,
                        owner: holder.map(thread_ref),
                        holder_unresolved: match (holder, l.owner) {
                            (None, Some(Holder::ThinLockId(id))) => {
                                Some(format!("managed thread id {id}"))
                            }
                            (None, Some(Holder::OsThreadId(id))) => {
                                Some(format!("OS thread id {id}"))
                            }
                            _ => None,
                        },
                        times_entered: if l.owner.is_some() {
                            l.recursion + 1
                        } else {
                            0
                        },
                        waiters_counted: l.waiters,
                        waiting: Vec::new(),
                        waiting_for_pulse: Vec::new(),
                    });
                }
            }
            Err(e) => report.problems.push(format!("heap walk: {e}")),
        }
    }
    report.locks.sort_by_key(|l| l.object);

    // Who waits for what, and the cycles.
    if let Some(stacks) = stacks {
        report.stacks_read = true;
        report
            .problems
            .extend(stacks.warnings.iter().map(|w| format!("stacks: {w}")));
        let owner_of: HashMap<u64, u64> = report
            .locks
            .iter()
            .filter_map(|l| Some((l.object, l.owner.as_ref()?.os_id)))
            .collect();
        let held_by_other = |object: u64, os_id: i32| {
            owner_of
                .get(&object)
                .is_some_and(|&owner| owner != os_id as u64)
        };
        let protected = runtime_call_object_reader(rt);
        let mut namer = MethodNamer::for_runtime(rt);
        let blocked = blocked::blocked_threads(stacks, &mut namer, &held_by_other, &protected);
        let unknown = |os_id: u64| ThreadRef {
            thread: 0,
            managed_id: None,
            os_id,
            name: None,
        };
        let mut waits_for: BTreeMap<u64, u64> = BTreeMap::new();
        let mut waits_on: BTreeMap<u64, u64> = BTreeMap::new();
        for b in &blocked {
            let os = b.os_id as u64;
            let waiter = by_os
                .get(&os)
                .map_or_else(|| unknown(os), |t| thread_ref(t));
            if let Some(l) = report.locks.iter_mut().find(|l| l.object == b.object) {
                l.waiting.push(waiter);
            }
            if let Some(&owner) = owner_of.get(&b.object) {
                waits_for.insert(os, owner);
                waits_on.insert(os, b.object);
            }
        }
        for cycle in cycles::cycles(&waits_for) {
            let waits = cycle
                .iter()
                .map(|&os| {
                    let t = by_os
                        .get(&os)
                        .map_or_else(|| unknown(os), |t| thread_ref(t));
                    (t, waits_on.get(&os).copied().unwrap_or(0))
                })
                .collect();
            report.deadlocks.push(Deadlock { waits });
        }
    }
    Ok(report)
}

/// Reads the object a .NET 8 or 9 `HelperMethodFrame_1OBJ` protects (its first GC pointer
/// points at the slot holding it), where the descriptor gives the pointer's place.
fn runtime_call_object_reader(rt: &Runtime) -> impl Fn(u64) -> Option<u64> + '_ {
    let offset = rt
        .descriptor()
        .ty("HelperMethodFrame_1OBJ")
        .ok()
        .and_then(|t| t.offset("GCPtrs").ok());
    move |frame: u64| {
        let slot = rt.target().read_pointer(frame + offset?).ok()?;
        let object = rt.target().read_pointer(slot).ok()?;
        (object != 0).then_some(object)
    }
}
