//! `cdac locks`: every lock held or waited for (monitors with a sync block, thin locks,
//! `System.Threading.Lock`s), who holds it and who waits for it, and the deadlocks among
//! them (like SOS `syncblk`, plus what it cannot see).

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{Addr, HeapReadsReport};
use super::{hex, CliResult, DescriptorArgs, TargetArgs};
use cdac::heap::settled;
use cdac::locks::{read_locks, LockKind, LockOptions, LockReport, ThreadRef};
use cdac::names::MethodNamer;
use cdac::stacks::LiveRegisters;

/// Arguments of `cdac locks`.
#[derive(Debug, Args)]
pub struct LocksArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Do not walk the heap (then thin locks and System.Threading.Locks are not found; the
    /// sync table's monitors are).
    #[arg(long)]
    no_heap: bool,
    /// Do not read stacks (then nobody is known to be waiting, and no deadlock is found;
    /// on a live process, reading them stops each thread for a moment, as `stacks` does).
    #[arg(long)]
    no_stacks: bool,
}

/// `cdac locks --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LocksReport {
    /// Every lock held or waited for, by object address.
    pub locks: Vec<LockReportItem>,
    /// Every deadlock: threads each waiting for a lock the next one holds.
    pub deadlocks: Vec<DeadlockReport>,
    /// Objects the heap walk visited (absent with `--no-heap`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects_scanned: Option<u64>,
    /// The sync table's used part (absent when it could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_table: Option<SyncTableReport>,
    /// Whether stacks were read (who waits for what).
    pub stacks_read: bool,
    /// What could not be read.
    pub problems: Vec<String>,
    /// How a live heap was read (absent on a dump, and with `--no-heap`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads: Option<HeapReadsReport>,
    /// How long reading the stacks stopped a live process's threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads_stopped: Option<super::model::PausesReport>,
}

/// The sync table's used part, as SOS `syncblk` totals it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SyncTableReport {
    /// Entries in use or free ("Total").
    pub entries: u32,
    /// Entries on the free list ("Free").
    pub free: u32,
}

/// One lock.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LockReportItem {
    /// The object locked (a `System.Threading.Lock` is its own object).
    pub object: Addr,
    /// Its type.
    pub type_name: String,
    /// `sync_block`, `thin_lock` or `threading_lock`.
    pub kind: String,
    /// A sync block's index in the sync table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_block_index: Option<u32>,
    /// The sync block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_block: Option<Addr>,
    /// Who holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<LockThread>,
    /// The holder as the lock records it, when that is no thread of the runtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_unresolved: Option<String>,
    /// Times the holder entered it (0: free).
    pub times_entered: u32,
    /// Threads waiting to enter it, as the lock counts them (a thin lock counts none).
    pub waiters_counted: u32,
    /// The threads found blocked on it, from their stacks.
    pub waiting: Vec<LockThread>,
    /// The threads waiting in `Monitor.Wait` for it to be pulsed (its sync block's wait
    /// list).
    pub waiting_for_pulse: Vec<LockThread>,
}

/// A thread.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LockThread {
    /// Kernel thread id.
    pub os_id: u64,
    /// Managed thread id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_id: Option<u32>,
    /// Managed thread name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The runtime's `Thread`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<Addr>,
}

/// One deadlock.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeadlockReport {
    /// Each thread of the cycle with the lock it waits for (held by the next thread, the
    /// last's by the first).
    pub waits: Vec<DeadlockWait>,
}

/// A thread of a deadlock and what it waits for.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeadlockWait {
    /// The thread.
    pub thread: LockThread,
    /// The lock object it waits for.
    pub waits_for: Addr,
    /// That object's type.
    pub type_name: String,
}

fn thread_report(t: &ThreadRef) -> LockThread {
    LockThread {
        os_id: t.os_id,
        managed_id: t.managed_id,
        name: t.name.clone(),
        thread: (t.thread != 0).then_some(Addr(t.thread)),
    }
}

pub(super) fn thread_text(t: &LockThread) -> String {
    // A .NET 11 Monitor.Wait waiter is tied to its thread through stacks only.
    if t.managed_id.is_none() && t.os_id == 0 && t.thread.is_none() {
        return "a thread (its stack names it: read without --no-stacks)".into();
    }
    let mut s = match t.managed_id {
        Some(id) => format!("thread {id}"),
        None => "thread ?".into(),
    };
    if let Some(n) = &t.name {
        s += &format!(" \"{n}\"");
    }
    s + &format!(" (OS {})", t.os_id)
}

/// The report of `report`, types named.
pub(super) fn build(report: &LockReport, namer: &mut MethodNamer) -> LocksReport {
    let mut names: std::collections::HashMap<u64, String> = std::collections::HashMap::new();
    let mut type_of = |mt: u64| {
        names
            .entry(mt)
            .or_insert_with(|| {
                namer
                    .type_name(mt)
                    .unwrap_or_else(|| format!("<MethodTable {mt:#x}>"))
            })
            .clone()
    };
    let locks = report
        .locks
        .iter()
        .map(|l| {
            let (kind, index, block) = match l.kind {
                LockKind::SyncBlock { index, address } => {
                    ("sync_block", Some(index), Some(Addr(address)))
                }
                LockKind::ThinLock => ("thin_lock", None, None),
                LockKind::ThreadingLock => ("threading_lock", None, None),
            };
            LockReportItem {
                object: Addr(l.object),
                type_name: type_of(l.method_table),
                kind: kind.into(),
                sync_block_index: index,
                sync_block: block,
                owner: l.owner.as_ref().map(thread_report),
                holder_unresolved: l.holder_unresolved.clone(),
                times_entered: l.times_entered,
                waiters_counted: l.waiters_counted,
                waiting: l.waiting.iter().map(thread_report).collect(),
                waiting_for_pulse: l.waiting_for_pulse.iter().map(thread_report).collect(),
            }
        })
        .collect::<Vec<_>>();
    let deadlocks = report
        .deadlocks
        .iter()
        .map(|d| DeadlockReport {
            waits: d
                .waits
                .iter()
                .map(|(t, object)| DeadlockWait {
                    thread: thread_report(t),
                    waits_for: Addr(*object),
                    type_name: locks
                        .iter()
                        .find(|l| l.object.0 == *object)
                        .map_or_else(String::new, |l| l.type_name.clone()),
                })
                .collect(),
        })
        .collect();
    LocksReport {
        locks,
        deadlocks,
        objects_scanned: report.objects_scanned,
        sync_table: report
            .sync_table
            .map(|(entries, free)| SyncTableReport { entries, free }),
        stacks_read: report.stacks_read,
        problems: report.problems.clone(),
        reads: None,
        threads_stopped: None,
    }
}

/// Runs `cdac locks`.
pub fn run_locks(args: &LocksArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let options = LockOptions {
        heap: !args.no_heap,
        stacks: (!args.no_stacks).then_some(LiveRegisters::Stop),
    };
    let settled = settled(
        &rt,
        || read_locks(&rt, options),
        |r: &LockReport| r.problems.is_empty(),
    )?;
    let reads = if args.no_heap {
        None
    } else {
        HeapReadsReport::of(&rt, &settled)
    };
    HeapReadsReport::tell(&reads);
    let mut r = build(&settled.value, &mut MethodNamer::for_runtime(&rt));
    r.reads = reads;
    r.threads_stopped = super::model::PausesReport::tell(settled.value.pauses);
    let outcome = super::outcome_of(&r.problems, "some locks could not be read");
    if args.json {
        super::emit_json(&r)?;
        return Ok(outcome);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    print(&mut out, &r)?;
    out.flush()?;
    Ok(outcome)
}

fn print(out: &mut impl Write, r: &LocksReport) -> std::io::Result<()> {
    if r.locks.is_empty() {
        writeln!(out, "no lock is held or waited for")?;
    }
    for l in &r.locks {
        let kind = match (l.kind.as_str(), l.sync_block_index) {
            ("sync_block", Some(i)) => format!("monitor, sync block {i}"),
            ("thin_lock", _) => "monitor, thin lock".into(),
            ("threading_lock", _) => "System.Threading.Lock".into(),
            (k, _) => k.into(),
        };
        let holder = match (&l.owner, &l.holder_unresolved) {
            (Some(o), _) => format!("held by {}, entered {}x", thread_text(o), l.times_entered),
            (None, Some(h)) => format!("held by {h} (no thread of the runtime)"),
            (None, None) => "free".into(),
        };
        writeln!(
            out,
            "{} {} ({kind}): {holder}; {} waiting",
            hex(l.object.0),
            l.type_name,
            l.waiters_counted.max(l.waiting.len() as u32)
        )?;
        for w in &l.waiting {
            writeln!(out, "    waiting: {}", thread_text(w))?;
        }
        for w in &l.waiting_for_pulse {
            writeln!(
                out,
                "    waiting for a pulse (Monitor.Wait): {}",
                thread_text(w)
            )?;
        }
    }
    for (i, d) in r.deadlocks.iter().enumerate() {
        writeln!(out)?;
        writeln!(out, "DEADLOCK {}: {} threads", i + 1, d.waits.len())?;
        for w in &d.waits {
            writeln!(
                out,
                "  {} waits for {} {}",
                thread_text(&w.thread),
                hex(w.waits_for.0),
                w.type_name
            )?;
        }
    }
    if let Some(t) = &r.sync_table {
        writeln!(
            out,
            "sync table: {} entries in use or free, {} free",
            t.entries, t.free
        )?;
    }
    if !r.stacks_read {
        writeln!(out, "stacks not read: who waits for what is not known")?;
    }
    for p in &r.problems {
        writeln!(out, "problem: {p}")?;
    }
    Ok(())
}
