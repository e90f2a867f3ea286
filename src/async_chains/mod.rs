//! Async work in flight (`cdac async`, like SOS `dumpasync`, and more): every incomplete
//! Task on the heap, async state machines among them, chained through their
//! continuations into logical async stacks, each with the await its methods are suspended
//! at (source line from the PDB) and what the innermost one waits for.
//!
//! - [`scan`]: one heap walk for the Tasks (and the TaskCompletionSources that own some).
//! - `continuations`: what a Task's `m_continuationObject` leads to.
//! - [`frames`]: a state machine's method, await state, await line and awaited object.
//! - `on_threads`: the boxes that threads are running, and the async methods awaiting them.
//! - [`runtime_async`]: the methods the runtime suspends itself (.NET 11), under their Task.
//!
//! A chain starts at an incomplete Task that is nobody's continuation (the thing waited
//! for, innermost) and follows continuations outwards; it is reported outermost first.

mod continuations;
pub mod frames;
mod on_threads;
pub mod runtime_async;
pub mod scan;

use std::collections::{BTreeMap, HashSet};

use rustc_hash::FxHashMap;

use crate::contracts::ContractError;
use crate::inspect::{Inspector, Value};
use crate::names::MethodNamer;
use crate::runtime::Runtime;
use crate::source_lines::SourceLines;

pub use frames::{Awaited, StateMachineFrame};
pub use on_threads::{running_on_threads, AsyncThread, BoxMatch, RunningAsyncFrame};
pub use runtime_async::{RuntimeAsyncFrame, RuntimeAsyncMethods};

/// `Task.m_stateFlags`: ran to completion.
pub const TASK_RAN_TO_COMPLETION: u32 = 0x0100_0000;
/// `Task.m_stateFlags`: faulted.
pub const TASK_FAULTED: u32 = 0x0020_0000;
/// `Task.m_stateFlags`: canceled.
pub const TASK_CANCELED: u32 = 0x0040_0000;

/// Most objects one chain goes through (a longer one is cut and said so).
pub(crate) const MAX_CHAIN_DEPTH: usize = 4096;

/// What `read_async` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncOptions {
    /// Also completed Tasks (SOS `--completed`).
    pub completed: bool,
    /// Also chains without an async state machine (SOS `--tasks`).
    pub tasks: bool,
    /// Most chains reported.
    pub max_chains: usize,
}

impl Default for AsyncOptions {
    fn default() -> Self {
        AsyncOptions {
            completed: false,
            tasks: false,
            max_chains: 10_000,
        }
    }
}

/// One Task on the heap (a state machine box is one).
#[derive(Debug, Clone, PartialEq)]
pub struct AsyncObject {
    /// Its address.
    pub address: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// `m_stateFlags`.
    pub state_flags: u32,
    /// The async method it runs, for a state machine box.
    pub state_machine: Option<StateMachineFrame>,
    /// The methods suspended under it, for the Task of a runtime-async chain.
    pub runtime_async: Option<RuntimeAsyncMethods>,
    /// What runs when it completes, resolved (`continuations`): Tasks and boxes, or other
    /// objects (a delegate's target that is no Task).
    pub continuations: Vec<u64>,
    /// The TaskCompletionSource whose Task it is.
    pub completion_source: Option<u64>,
}

impl AsyncObject {
    /// Whether an async method is suspended in it (a state machine box, or the Task of
    /// runtime-async methods).
    pub fn has_async_method(&self) -> bool {
        self.state_machine.is_some()
            || self
                .runtime_async
                .as_ref()
                .is_some_and(|r| !r.frames.is_empty())
    }

    /// Whether it has completed (ran to completion, faulted or was canceled).
    pub fn is_completed(&self) -> bool {
        self.state_flags & (TASK_RAN_TO_COMPLETION | TASK_FAULTED | TASK_CANCELED) != 0
    }
}

/// What the innermost object of a chain waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitsFor {
    /// The object (0: none found).
    pub object: u64,
    /// Its type.
    pub type_name: String,
    /// What kind of thing it is: `task_completion_source`, `timer`, `io`, `semaphore`,
    /// `task` or `other`.
    pub kind: &'static str,
    /// The TaskCompletionSource that can complete it.
    pub completion_source: Option<u64>,
}

/// One logical async stack.
#[derive(Debug, Clone, PartialEq)]
pub struct AsyncChain {
    /// Its objects (addresses into [`AsyncReport::objects`]), outermost first.
    pub objects: Vec<u64>,
    /// What the innermost one waits for.
    pub waits_for: Option<WaitsFor>,
    /// Where the chain was cut: the object its continuations lead back to, or the last one
    /// followed when it is longer than 4,096 objects.
    pub cut_at: Option<u64>,
}

/// Every chain of async work in flight.
#[derive(Debug, Default)]
pub struct AsyncReport {
    /// The Tasks found (incomplete ones, or all with [`AsyncOptions::completed`]).
    pub objects: BTreeMap<u64, AsyncObject>,
    /// Type names by MethodTable, of the objects and of what they wait for.
    pub type_names: FxHashMap<u64, String>,
    /// The chains, in address order of their innermost object.
    pub chains: Vec<AsyncChain>,
    /// Objects the heap walk visited.
    pub objects_scanned: u64,
    /// What could not be read.
    pub problems: Vec<String>,
}

impl AsyncReport {
    /// The continuations of `address` that are Tasks of the report, in order.
    pub fn known_continuations(&self, address: u64) -> Vec<u64> {
        self.objects.get(&address).map_or_else(Vec::new, |o| {
            o.continuations
                .iter()
                .copied()
                .filter(|c| self.objects.contains_key(c))
                .collect()
        })
    }

    /// The type name of a MethodTable the report has seen.
    pub fn type_name(&self, mt: u64) -> &str {
        self.type_names.get(&mt).map_or("?", String::as_str)
    }
}

/// Walks the heap for Tasks and chains them.
pub fn read_async(rt: &Runtime, options: AsyncOptions) -> Result<AsyncReport, ContractError> {
    let found = scan::scan(rt)?;
    let mut report = AsyncReport {
        objects_scanned: found.objects_scanned,
        problems: found.problems,
        type_names: found.type_names,
        ..AsyncReport::default()
    };
    let mut inspector = Inspector::new(rt)?;
    let mut namer = MethodNamer::for_runtime(rt);
    let lines = SourceLines::for_target(rt.target());
    let mut frame_reader = frames::FrameReader::new(rt, &mut namer, &lines);
    let mut runtime_async_reader = runtime_async::RuntimeAsyncReader::new(rt);
    let owners: FxHashMap<u64, u64> = found
        .completion_sources
        .iter()
        .map(|&(tcs, task)| (task, tcs))
        .collect();
    for (address, method_table) in found.tasks {
        match read_object(
            &mut inspector,
            &mut frame_reader,
            &mut runtime_async_reader,
            address,
            method_table,
            &mut report.problems,
        ) {
            Ok(Some(mut o)) => {
                if !options.completed && o.is_completed() {
                    continue;
                }
                o.completion_source = owners.get(&address).copied();
                report.objects.insert(address, o);
            }
            Ok(None) => {}
            Err(e) => report.problems.push(format!(
                "Task {address:#x} ({}): {e}",
                report.type_name(method_table)
            )),
        }
    }
    let awaited_types = frame_reader.take_type_names();
    report.type_names.extend(awaited_types);
    chain(&mut report, options);
    Ok(report)
}

/// One Task read: its flags, its state machine and its continuations. `None` for an
/// object without `m_stateFlags` (not a Task after all).
fn read_object(
    inspector: &mut Inspector<'_>,
    frames: &mut frames::FrameReader<'_, '_>,
    runtime_async: &mut runtime_async::RuntimeAsyncReader<'_>,
    address: u64,
    method_table: u64,
    problems: &mut Vec<String>,
) -> Result<Option<AsyncObject>, ContractError> {
    let view = inspector.view(address, 0)?;
    let Some(state_flags) = crate::inspect::int_field(&view.fields, "m_stateFlags") else {
        return Ok(None);
    };
    let state_machine = if frames::is_state_machine_box(&view.type_name) {
        Some(frames.read(inspector, &view)?)
    } else {
        None
    };
    let runtime_async = if runtime_async::is_runtime_async_task(&view.type_name) {
        let (namer, lines) = frames.namer_and_lines();
        Some(runtime_async.read(inspector, namer, lines, &view, problems))
    } else {
        None
    };
    // A continuation that cannot be read ends the chain here, and is said.
    let field = view
        .fields
        .iter()
        .find(|f| f.name == "m_continuationObject");
    let continuations = match field.map(|f| (&f.value, f.address)) {
        Some((Value::Reference { address: c, .. }, _)) if *c != 0 => {
            continuations::resolve(inspector, *c)
        }
        Some((Value::Unreadable(e), slot)) => {
            let c = inspector
                .runtime()
                .target()
                .read_pointer(slot)
                .unwrap_or_default();
            problems.push(format!(
                "Task {address:#x}: its continuation {c:#x} cannot be read: {e}"
            ));
            Vec::new()
        }
        _ => Vec::new(),
    };
    Ok(Some(AsyncObject {
        address,
        method_table,
        state_flags: state_flags as u32,
        state_machine,
        runtime_async,
        continuations,
        completion_source: None,
    }))
}

/// Builds the chains: from every object that is nobody's continuation, outwards.
fn chain(report: &mut AsyncReport, options: AsyncOptions) {
    let continued: HashSet<u64> = report
        .objects
        .values()
        .flat_map(|o| o.continuations.iter().copied())
        .collect();
    let roots: Vec<u64> = report
        .objects
        .keys()
        .copied()
        .filter(|a| !continued.contains(a))
        .collect();
    let mut chains = Vec::new();
    'roots: for root in roots {
        // Depth first: each path from the root to an object with no further continuation
        // is one chain.
        let mut pending: Vec<Vec<u64>> = vec![vec![root]];
        while let Some(path) = pending.pop() {
            let last = *path.last().unwrap_or(&root);
            let next = report.known_continuations(last);
            let cut = if path.len() >= MAX_CHAIN_DEPTH {
                Some(last)
            } else {
                next.iter().find(|n| path.contains(n)).copied()
            };
            if next.is_empty() || cut.is_some() {
                if chains.len() >= options.max_chains {
                    report.problems.push(format!(
                        "more than {} chains: the rest are not listed",
                        options.max_chains
                    ));
                    break 'roots;
                }
                if let Some(at) = cut {
                    report.problems.push(format!(
                        "the chain from {root:#x} is cut at {at:#x} ({})",
                        if path.len() >= MAX_CHAIN_DEPTH {
                            format!("more than {MAX_CHAIN_DEPTH} objects")
                        } else {
                            "its continuations lead back to it".into()
                        }
                    ));
                }
                chains.push((path, cut));
                continue;
            }
            for n in next.into_iter().rev() {
                let mut p = path.clone();
                p.push(n);
                pending.push(p);
            }
        }
    }
    report_rootless_cycles(report, &chains);
    for (path, cut_at) in chains {
        let has_state_machine = path.iter().any(|a| {
            report
                .objects
                .get(a)
                .is_some_and(AsyncObject::has_async_method)
        });
        if !options.tasks && !has_state_machine {
            continue;
        }
        let waits_for = path.first().and_then(|root| waits_for(report, *root));
        let mut objects = path;
        objects.reverse();
        report.chains.push(AsyncChain {
            objects,
            waits_for,
            cut_at,
        });
    }
}

/// Tasks that no chain reached because they continue each other in a cycle (no Task of
/// the cycle is free of continuations to start from): each cycle is named once.
fn report_rootless_cycles(report: &mut AsyncReport, chains: &[(Vec<u64>, Option<u64>)]) {
    let mut reached: HashSet<u64> = chains.iter().flat_map(|(p, _)| p.iter().copied()).collect();
    let mut cycles = Vec::new();
    let candidates: Vec<u64> = report.objects.keys().copied().collect();
    for start in candidates {
        if reached.contains(&start) {
            continue;
        }
        // Follow the first continuation that is a Task until an object repeats.
        let mut walk: Vec<u64> = Vec::new();
        let mut at = Some(start);
        while let Some(a) = at {
            if let Some(i) = walk.iter().position(|&w| w == a) {
                cycles.push(walk[i..].to_vec());
                break;
            }
            if reached.contains(&a) || walk.len() >= MAX_CHAIN_DEPTH {
                break;
            }
            walk.push(a);
            at = report.objects.get(&a).and_then(|o| {
                o.continuations
                    .iter()
                    .copied()
                    .find(|c| report.objects.contains_key(c))
            });
        }
        reached.extend(walk);
    }
    for cycle in cycles {
        let names: Vec<String> = cycle.iter().map(|a| format!("{a:#x}")).collect();
        report.problems.push(format!(
            "Tasks {} continue each other in a cycle: no chain starts there",
            names.join(" -> ")
        ));
    }
}

/// What the innermost object `root` waits for: the object its current await holds, for a
/// state machine or runtime-async methods; the Task itself otherwise.
fn waits_for(report: &AsyncReport, root: u64) -> Option<WaitsFor> {
    let o = report.objects.get(&root)?;
    let runtime_async = o.runtime_async.as_ref().and_then(|r| r.awaiting.as_ref());
    let (object, type_name) = match (&o.state_machine, runtime_async) {
        (Some(sm), _) => {
            let a = sm.awaiting.as_ref()?;
            (a.object, a.object_type.clone())
        }
        (None, Some(a)) => (a.object, a.object_type.clone()),
        (None, None) => (root, report.type_name(o.method_table).to_string()),
    };
    let completion_source = report
        .objects
        .get(&object)
        .and_then(|t| t.completion_source);
    Some(WaitsFor {
        object,
        kind: frames::kind_of_awaited(&type_name, completion_source.is_some()),
        type_name,
        completion_source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(address: u64, continuations: &[u64]) -> AsyncObject {
        AsyncObject {
            address,
            method_table: 0x100,
            state_flags: 0,
            state_machine: None,
            runtime_async: None,
            continuations: continuations.to_vec(),
            completion_source: None,
        }
    }

    #[test]
    fn tasks_that_continue_each_other_in_a_cycle_are_named() {
        let mut report = AsyncReport::default();
        for (a, c) in [(0x10, 0x20), (0x20, 0x30), (0x30, 0x10)] {
            report.objects.insert(a, task(a, &[c]));
        }
        report.objects.insert(0x40, task(0x40, &[]));
        chain(
            &mut report,
            AsyncOptions {
                tasks: true,
                ..AsyncOptions::default()
            },
        );
        // The lone Task is a chain; the cycle has no start and is named.
        assert_eq!(report.chains.len(), 1);
        assert_eq!(report.chains[0].objects, vec![0x40]);
        assert_eq!(
            report.problems,
            vec![
                "Tasks 0x10 -> 0x20 -> 0x30 continue each other in a cycle: no chain starts there"
            ]
        );
    }

    #[test]
    fn runtime_async_methods_make_a_chain_that_waits_for_what_they_await() {
        let mut report = AsyncReport::default();
        let mut ra = task(0x10, &[]);
        ra.runtime_async = Some(RuntimeAsyncMethods {
            frames: vec![RuntimeAsyncFrame {
                continuation: 0x18,
                method_table: 0x200,
                type_name: "Continuation_24_0_2".into(),
                resume_address: 0x7000,
                method_desc: Some(0x300),
                method: Some("Ns.T.M".into()),
                state: 1,
                await_location: None,
            }],
            awaiting: Some(Awaited {
                field: "Source".into(),
                awaiter_type: "System.Runtime.CompilerServices.ValueTaskSourceContinuation".into(),
                object: 0x90,
                object_type: "System.Net.Sockets.Socket+AwaitableSocketAsyncEventArgs".into(),
            }),
        });
        report.objects.insert(0x10, ra);
        // A plain Task alone, and one whose runtime-async Task has no method suspended.
        report.objects.insert(0x40, task(0x40, &[]));
        let mut running = task(0x50, &[]);
        running.runtime_async = Some(RuntimeAsyncMethods::default());
        report.objects.insert(0x50, running);
        chain(&mut report, AsyncOptions::default());
        // Only the Task with a suspended method is a chain without --tasks, and it waits
        // for what its innermost continuation holds.
        assert_eq!(report.chains.len(), 1);
        assert_eq!(report.chains[0].objects, vec![0x10]);
        let w = report.chains[0].waits_for.as_ref().unwrap();
        assert_eq!((w.object, w.kind), (0x90, "io"));
    }

    #[test]
    fn a_chain_that_leads_back_into_itself_is_cut_where_it_loops() {
        let mut report = AsyncReport::default();
        report.objects.insert(0x10, task(0x10, &[0x20]));
        report.objects.insert(0x20, task(0x20, &[0x30]));
        report.objects.insert(0x30, task(0x30, &[0x20]));
        chain(
            &mut report,
            AsyncOptions {
                tasks: true,
                ..AsyncOptions::default()
            },
        );
        assert_eq!(report.chains.len(), 1);
        assert_eq!(report.chains[0].objects, vec![0x30, 0x20, 0x10]);
        // Cut where it leads back to.
        assert_eq!(report.chains[0].cut_at, Some(0x20));
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    }
}
