//! Async methods running on threads (`cdac async --stacks`): each thread's `MoveNext`
//! frame is tied to the state machine box it runs, and that box's continuations give the
//! async methods that await it. A thread's stack then reads on into its logical async
//! stack, which the thread's own frames do not show (the awaiting methods are not on it).
//!
//! A frame is tied to a box two ways, the first that answers wins:
//! 1. a live GC slot of the frame, or of the runtime frames that called it up to the next
//!    `MoveNext`, points into a box of the frame's state machine type (the `this` of a
//!    struct state machine is a byref into its box);
//! 2. exactly one box of that type is running (state -1).

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::{AsyncReport, MAX_CHAIN_DEPTH};
use crate::names::MethodNamer;
use crate::stacks::{Stacks, ThreadStack};

/// Most bytes from a box's start to a pointer into its state machine that still counts as
/// inside the box (a box is a Task's fields followed by the state machine's).
const MAX_BOX_BYTES: u64 = 4096;

/// How a `MoveNext` frame was tied to its box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BoxMatch {
    /// A live GC slot of the frame (or of its runtime callers) points into the box.
    StackSlot,
    /// The box is the only running one (state -1) of the frame's state machine type.
    OnlyRunningBox,
}

impl BoxMatch {
    /// The name JSON uses.
    pub fn as_str(self) -> &'static str {
        match self {
            BoxMatch::StackSlot => "stack_slot",
            BoxMatch::OnlyRunningBox => "only_running_box",
        }
    }
}

/// One `MoveNext` frame of a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningAsyncFrame {
    /// The frame's index in the thread's stack (innermost 0).
    pub frame: usize,
    /// The box the frame runs (`None`: not found, see `note`).
    pub state_machine_box: Option<u64>,
    /// How the box was found.
    pub matched_by: Option<BoxMatch>,
    /// The Tasks that run when the box completes, nearest first: the async methods that
    /// await it, then theirs.
    pub callers: Vec<u64>,
    /// Why no box was tied, or what else is to know (other continuations, a cut chain).
    pub note: Option<String>,
}

/// The `MoveNext` frames of one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncThread {
    /// Index of the thread in the [`Stacks`] it was found in.
    pub thread: usize,
    /// Kernel thread id.
    pub os_id: i32,
    /// Its `MoveNext` frames, innermost first.
    pub frames: Vec<RunningAsyncFrame>,
}

/// Ties the `MoveNext` frames of `stacks` (read with GC roots for the exact match) to the
/// boxes of `report`. Threads without such a frame are left out.
pub fn running_on_threads(
    report: &AsyncReport,
    stacks: &Stacks,
    namer: &mut MethodNamer,
) -> Vec<AsyncThread> {
    // Boxes by their MoveNext (module file, MethodDef token), in address order.
    let mut boxes: FxHashMap<(std::path::PathBuf, u32), Vec<u64>> = FxHashMap::default();
    for o in report.objects.values() {
        if let Some(mn) = o.state_machine.as_ref().and_then(|s| s.move_next.clone()) {
            boxes.entry(mn).or_default().push(o.address);
        }
    }
    let mut out = Vec::new();
    for (ti, t) in stacks.threads.iter().enumerate() {
        let frames = move_next_frames(t, namer, &boxes);
        if frames.is_empty() {
            continue;
        }
        let mut found = Vec::new();
        for (k, &(index, candidates)) in frames.iter().enumerate() {
            // The runtime frames between this MoveNext and the next one out are the box's.
            let until = frames.get(k + 1).map_or(usize::MAX, |(i, _)| *i);
            found.push(tie(report, t, index, until, candidates));
        }
        out.push(AsyncThread {
            thread: ti,
            os_id: t.os_id,
            frames: found,
        });
    }
    out
}

/// The frames of `t` that run a compiler state machine's `MoveNext`, with the boxes of its
/// type: a frame whose MethodDef is a box's `MoveNext`, or, with no box, one whose name
/// says it is one.
fn move_next_frames<'b>(
    t: &ThreadStack,
    namer: &mut MethodNamer,
    boxes: &'b FxHashMap<(std::path::PathBuf, u32), Vec<u64>>,
) -> Vec<(usize, &'b [u64])> {
    let Some(stack) = &t.stack else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, f) in stack.frames.iter().enumerate() {
        let Some(md) = f.method_desc() else { continue };
        // Naming the method loads its module, which `method_def` needs.
        let name = namer.name(md);
        if let Some(b) = namer.method_def(md).and_then(|d| boxes.get(&d)) {
            out.push((i, b.as_slice()));
        } else if is_state_machine_move_next(&name) {
            out.push((i, &[][..]));
        }
    }
    out
}

/// Whether a method name (`Ns.Type+<Method>d__8.MoveNext`, or the perf map's
/// `instance void [Module] Ns.Type+<Method>d__8::MoveNext()`) is a compiler state machine's
/// `MoveNext`.
pub fn is_state_machine_move_next(method: &str) -> bool {
    let head = method.split('(').next().unwrap_or(method);
    let Some(ty) = head
        .strip_suffix("::MoveNext")
        .or_else(|| head.strip_suffix(".MoveNext"))
    else {
        return false;
    };
    // The state machine is nested in the async method's type, perhaps generic after its
    // ordinal.
    let nested = ty.rsplit_once('+').map_or(ty, |(_, n)| n);
    let nested = nested.split(['[', '`']).next().unwrap_or(nested);
    nested.starts_with('<')
        && nested.rfind(">d__").is_some_and(|at| {
            let ordinal = &nested[at + 4..];
            !ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit())
        })
}

/// Ties the MoveNext frame at `index` to one of `candidates` (boxes of its type).
fn tie(
    report: &AsyncReport,
    t: &ThreadStack,
    index: usize,
    until: usize,
    candidates: &[u64],
) -> RunningAsyncFrame {
    let mut frame = RunningAsyncFrame {
        frame: index,
        state_machine_box: None,
        matched_by: None,
        callers: Vec::new(),
        note: None,
    };
    if candidates.is_empty() {
        frame.note = Some(
            "no box of its state machine is incomplete on the heap: it runs on the stack \
             (before its first await that suspends) or has completed"
                .into(),
        );
        return frame;
    }
    let by_slot = t
        .roots
        .iter()
        .flatten()
        .filter(|r| r.frame >= index && r.frame < until);
    let in_box = |object: u64| {
        // The candidate that starts at or before the pointer, nearest.
        let at = candidates.partition_point(|&b| b <= object);
        at.checked_sub(1)
            .map(|i| candidates[i])
            .filter(|&b| object - b < MAX_BOX_BYTES)
    };
    let slot_box = by_slot
        .flat_map(|r| r.roots.iter())
        .find_map(|r| in_box(r.object));
    let found = match slot_box {
        Some(b) => Some((b, BoxMatch::StackSlot)),
        None => {
            let running: Vec<u64> = candidates
                .iter()
                .copied()
                .filter(|b| {
                    report
                        .objects
                        .get(b)
                        .and_then(|o| o.state_machine.as_ref())
                        .is_some_and(|s| s.state == Some(-1))
                })
                .collect();
            match running.as_slice() {
                [only] => Some((*only, BoxMatch::OnlyRunningBox)),
                [] => {
                    frame.note = Some(format!(
                        "none of the {} boxes of its state machine is running (state -1) and \
                         no stack slot points into one",
                        candidates.len()
                    ));
                    None
                }
                many => {
                    frame.note = Some(format!(
                        "{} boxes of its state machine are running and no stack slot tells \
                         which this frame runs",
                        many.len()
                    ));
                    None
                }
            }
        }
    };
    let Some((b, how)) = found else {
        return frame;
    };
    frame.state_machine_box = Some(b);
    frame.matched_by = Some(how);
    let (callers, note) = callers_of(report, b);
    frame.callers = callers;
    frame.note = note;
    frame
}

/// The Tasks that await `start`, nearest first, following first continuations; a note
/// when a Task has several or the chain leads back on itself.
fn callers_of(report: &AsyncReport, start: u64) -> (Vec<u64>, Option<String>) {
    let mut callers = Vec::new();
    let mut seen = rustc_hash::FxHashSet::default();
    seen.insert(start);
    let mut note = None;
    let mut at = start;
    while callers.len() < MAX_CHAIN_DEPTH {
        let next = report.known_continuations(at);
        let Some(&first) = next.first() else { break };
        if next.len() > 1 && note.is_none() {
            note = Some(format!(
                "{at:#x} has {} continuations: the first is followed",
                next.len()
            ));
        }
        if !seen.insert(first) {
            note = Some(format!("the continuations lead back to {first:#x}"));
            break;
        }
        callers.push(first);
        at = first;
    }
    (callers, note)
}

#[cfg(test)]
mod tests {
    use super::is_state_machine_move_next;

    #[test]
    fn state_machine_move_next_is_told_from_other_methods() {
        assert!(is_state_machine_move_next(
            "Cdac.Testbed.Async.AsyncParked+<RunningInner>d__14.MoveNext()"
        ));
        assert!(is_state_machine_move_next(
            "N.T+<Run>d__3`1[System.Int32].MoveNext"
        ));
        assert!(is_state_machine_move_next(
            "instance void [Cdac.Testbed] Cdac.Testbed.Async.AsyncParked+<RunningInner>d__17::MoveNext()"
        ));
        // The box's own MoveNext names the state machine only as a generic argument.
        assert!(!is_state_machine_move_next(
            "instance void [System.Private.CoreLib] System.Runtime.CompilerServices.\
             AsyncTaskMethodBuilder`1+AsyncStateMachineBox`1[System.Int32,N.T+<Run>d__17]::MoveNext()"
        ));
        assert!(!is_state_machine_move_next("N.T+<>c.<Run>b__3_0()"));
        assert!(!is_state_machine_move_next("N.Enumerator.MoveNext()"));
        assert!(!is_state_machine_move_next("N.T+<Items>d__.MoveNext()"));
    }
}
