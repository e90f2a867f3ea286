//! `cdac threadpool`: the managed thread pool's workers and limits, and the work queued in
//! its global queues and each worker's own queue, each item with the method it runs (like
//! SOS `threadpool` and `threadpoolqueue`).

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{Addr, HeapReadsReport};
use super::{hex, CliResult, DescriptorArgs, TargetArgs};
use cdac::heap::settled;
use cdac::thread_pool::{read_thread_pool, ThreadPoolReport, WorkItem};

/// Arguments of `cdac threadpool`.
#[derive(Debug, Args)]
pub struct ThreadPoolArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac threadpool --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ThreadPoolJson {
    /// Worker counts and limits; absent when the process has no managed thread pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkersJson>,
    /// The global queues' items, oldest first (high priority ones first).
    pub global: Vec<WorkItemJson>,
    /// Each worker's own queue that holds items.
    pub local: Vec<LocalQueueJson>,
    /// Queued items by kind and method (or type), most first.
    pub by_method: Vec<CountJson>,
    /// Objects the heap walk visited.
    pub objects_scanned: u64,
    /// What could not be read.
    pub problems: Vec<String>,
    /// How a live heap was read (absent on a dump).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads: Option<HeapReadsReport>,
}

/// The pool's workers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WorkersJson {
    /// The `PortableThreadPool` object.
    pub pool: Addr,
    /// Workers that exist.
    pub total: u64,
    /// Workers running a work item.
    pub running: u64,
    /// Workers waiting for work.
    pub idle: u64,
    /// The number of workers the pool aims for.
    pub goal: u64,
    /// Fewest workers it keeps.
    pub min: i64,
    /// Most workers it starts.
    pub max: i64,
    /// CPU utilization it last measured, in percent.
    pub cpu_utilization: i64,
}

/// One queued item.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WorkItemJson {
    /// The queued object.
    pub object: Addr,
    /// Its type.
    pub type_name: String,
    /// `work` (a callback), `task`, `async` (an async method to resume) or `other`.
    pub kind: String,
    /// The method it runs (`Ns.Type.Method`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// That method's MethodDesc.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method_desc: Option<Addr>,
}

/// A worker's own queue.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LocalQueueJson {
    /// The `WorkStealingQueue`.
    pub queue: Addr,
    /// The managed id of its thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_thread_id: Option<i64>,
    /// Its items, oldest first.
    pub items: Vec<WorkItemJson>,
}

/// How many queued items run one method.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CountJson {
    /// Items.
    pub count: usize,
    /// Their kind.
    pub kind: String,
    /// The method (or, when unknown, the type).
    pub name: String,
}

fn item(w: &WorkItem) -> WorkItemJson {
    WorkItemJson {
        object: Addr(w.object),
        type_name: w.type_name.clone(),
        kind: w.kind.into(),
        method: w.method.clone(),
        method_desc: w.method_desc.map(Addr),
    }
}

/// The report, as printed.
pub(super) fn build(r: &ThreadPoolReport) -> ThreadPoolJson {
    let global: Vec<WorkItemJson> = r.global.iter().map(item).collect();
    let local: Vec<LocalQueueJson> = r
        .local
        .iter()
        .map(|l| LocalQueueJson {
            queue: Addr(l.queue),
            managed_thread_id: l.managed_thread_id,
            items: l.items.iter().map(item).collect(),
        })
        .collect();
    let mut counts: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for w in global.iter().chain(local.iter().flat_map(|l| &l.items)) {
        let name = w.method.clone().unwrap_or_else(|| w.type_name.clone());
        *counts.entry((w.kind.clone(), name)).or_default() += 1;
    }
    let mut by_method: Vec<CountJson> = counts
        .into_iter()
        .map(|((kind, name), count)| CountJson { count, kind, name })
        .collect();
    by_method.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    ThreadPoolJson {
        workers: r.counts.map(|c| WorkersJson {
            pool: Addr(c.address),
            total: c.workers,
            running: c.workers_running,
            idle: c.workers.saturating_sub(c.workers_running),
            goal: c.workers_goal,
            min: c.min_workers,
            max: c.max_workers,
            cpu_utilization: c.cpu_utilization,
        }),
        global,
        local,
        by_method,
        objects_scanned: r.objects_scanned,
        problems: r.problems.clone(),
        reads: None,
    }
}

/// Runs `cdac threadpool`.
pub fn run_threadpool(args: &ThreadPoolArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let settled = settled(
        &rt,
        || read_thread_pool(&rt),
        |r: &ThreadPoolReport| r.problems.is_empty(),
    )?;
    let reads = HeapReadsReport::of(&rt, &settled);
    HeapReadsReport::tell(&reads);
    let mut r = build(&settled.value);
    r.reads = reads;
    let outcome = super::outcome_of(&r.problems, "some of the thread pool could not be read");
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

fn item_line(w: &WorkItemJson) -> String {
    format!(
        "  {} {:<5} {}",
        hex(w.object.0),
        w.kind,
        w.method.as_deref().unwrap_or(&w.type_name)
    )
}

/// The pool in a few lines (also the thread pool part of `cdac analyze`).
pub(super) fn summary_text(r: &ThreadPoolJson) -> String {
    let queued = r.global.len() + r.local.iter().map(|l| l.items.len()).sum::<usize>();
    let mut s = match &r.workers {
        Some(w) => format!(
            "Thread pool: {} workers ({} running, {} idle), limits {}-{}, CPU {}%; {queued} work items queued\n",
            w.total, w.running, w.idle, w.min, w.max, w.cpu_utilization
        ),
        None => format!("Thread pool: none started; {queued} work items queued\n"),
    };
    if let Some(w) = &r.workers {
        if queued > 0 && w.idle == 0 && w.total >= u64::try_from(w.max).unwrap_or(u64::MAX) {
            s += "  every worker is busy and the pool is at its limit: queued work waits (starvation)\n";
        }
    }
    s
}

fn print(out: &mut impl Write, r: &ThreadPoolJson) -> std::io::Result<()> {
    write!(out, "{}", summary_text(r))?;
    if !r.global.is_empty() {
        writeln!(out, "\nGlobal queue: {} items", r.global.len())?;
        for w in &r.global {
            writeln!(out, "{}", item_line(w))?;
        }
    }
    for l in &r.local {
        let thread = l
            .managed_thread_id
            .map_or("an unknown thread".into(), |id| format!("thread {id}"));
        writeln!(
            out,
            "\nLocal queue {} of {thread}: {} items",
            hex(l.queue.0),
            l.items.len()
        )?;
        for w in &l.items {
            writeln!(out, "{}", item_line(w))?;
        }
    }
    if !r.by_method.is_empty() {
        writeln!(out, "\nQueued, by method:")?;
        for c in &r.by_method {
            writeln!(out, "  {:>5} {:<5} {}", c.count, c.kind, c.name)?;
        }
    }
    for p in &r.problems {
        writeln!(out, "problem: {p}")?;
    }
    Ok(())
}
