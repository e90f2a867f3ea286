//! Async methods the runtime suspends itself (runtime-async, .NET 11): no compiler-made
//! state machine, no box. Each suspended method is a `Continuation` object linked to its
//! caller's through `Next`, innermost first; its resume information names the address in
//! the method's own code where it resumes, and so the method and the await's line. The
//! Task that a caller outside runtime-async holds is an `AsyncHelpers+RuntimeAsyncTask<T>`;
//! while suspended, its `m_stateObject` is the innermost continuation.
//!
//! The innermost continuation is often one the library writes by hand to await a Task
//! (`RuntimeAsyncTaskContinuation`: `Task`, and `RuntimeAsyncTask` back to the chain's
//! Task, which is how an awaited Task's continuation leads here) or a value-task source
//! (`ValueTaskSourceContinuation`: `Source`). It has no code address: it says what the
//! chain waits for instead.

use std::collections::HashSet;

use crate::contracts::debug_info::{il_offset, DebugInfoFormat};
use crate::contracts::execution_manager::ExecutionManager;
use crate::formats::pdb::SourceLocation;
use crate::inspect::{reference_field, Inspector, ObjectView};
use crate::names::MethodNamer;
use crate::records::continuation::{ContinuationLayout, ContinuationRecord};
use crate::runtime::Runtime;
use crate::source_lines::SourceLines;

use super::frames::Awaited;
use super::MAX_CHAIN_DEPTH;

/// The start of the type name of the Task a runtime-async method's caller holds.
const RUNTIME_ASYNC_TASK_PREFIX: &str =
    "System.Runtime.CompilerServices.AsyncHelpers+RuntimeAsyncTask`1";
/// Its field holding the innermost continuation while suspended (null while running).
const HEAD_FIELD: &str = "m_stateObject";
/// The fields of hand-written continuations that hold what they wait for.
const AWAITED_FIELDS: [&str; 2] = ["Task", "Source"];

/// Whether a type (by its runtime name) is the Task of a runtime-async chain.
pub fn is_runtime_async_task(type_name: &str) -> bool {
    type_name.starts_with(RUNTIME_ASYNC_TASK_PREFIX)
}

/// One method the runtime suspended.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeAsyncFrame {
    /// Its continuation object.
    pub continuation: u64,
    /// The continuation's MethodTable (the runtime makes one per shape of saved state).
    pub method_table: u64,
    /// The continuation's type name (`Continuation_24_0_2`).
    pub type_name: String,
    /// Where in the method's code it resumes.
    pub resume_address: u64,
    /// The method (its MethodDesc), when the address is in managed code.
    pub method_desc: Option<u64>,
    /// The method (`Ns.Type.Method`).
    pub method: Option<String>,
    /// The suspension point it is at (counted from 0 in the method).
    pub state: i32,
    /// Where that await is in the source.
    pub await_location: Option<SourceLocation>,
}

/// The suspended methods of a runtime-async chain's Task.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimeAsyncMethods {
    /// The methods, outermost first.
    pub frames: Vec<RuntimeAsyncFrame>,
    /// What the innermost one waits for (a hand-written continuation's Task or source).
    pub awaiting: Option<Awaited>,
}

/// Reads runtime-async chains: the continuation layout once, the code and lines per frame.
pub struct RuntimeAsyncReader<'r> {
    rt: &'r Runtime,
    layout: Result<ContinuationLayout, String>,
    em: Option<&'r dyn ExecutionManager>,
    debug_info: Option<DebugInfoFormat>,
    /// Whether the missing layout has been reported.
    told: bool,
}

impl<'r> RuntimeAsyncReader<'r> {
    /// A reader of `rt`'s continuations.
    pub fn new(rt: &'r Runtime) -> Self {
        RuntimeAsyncReader {
            rt,
            layout: ContinuationLayout::from_descriptor(rt.descriptor()).map_err(|e| e.to_string()),
            em: rt.contracts().execution_manager().ok(),
            debug_info: rt.contracts().debug_info().ok(),
            told: false,
        }
    }

    /// The methods suspended under the RuntimeAsyncTask `task`; an empty list while it
    /// runs. What cannot be read is added to `problems`, and what was read is kept.
    pub fn read(
        &mut self,
        inspector: &mut Inspector<'_>,
        namer: &mut MethodNamer,
        lines: &SourceLines,
        task: &ObjectView,
        problems: &mut Vec<String>,
    ) -> RuntimeAsyncMethods {
        let mut out = RuntimeAsyncMethods::default();
        let Some(head) = reference_field(&task.fields, HEAD_FIELD) else {
            return out;
        };
        let layout = match &self.layout {
            Ok(l) => *l,
            Err(e) => {
                if !self.told {
                    self.told = true;
                    problems.push(format!(
                        "runtime-async methods are not named: this runtime does not describe its continuations ({e})"
                    ));
                }
                return out;
            }
        };
        let mut seen = HashSet::new();
        let mut at = head;
        while at != 0 {
            if !seen.insert(at) || seen.len() > MAX_CHAIN_DEPTH {
                problems.push(format!(
                    "the continuations of {:#x} are cut at {at:#x} (a cycle, or more than {MAX_CHAIN_DEPTH})",
                    task.address
                ));
                break;
            }
            let record = match ContinuationRecord::read(self.rt.target(), &layout, at) {
                Ok(r) => r,
                Err(e) => {
                    problems.push(format!(
                        "continuation {at:#x} of {:#x} cannot be read: {e}",
                        task.address
                    ));
                    break;
                }
            };
            let view = inspector.view(at, 0).ok();
            if record.resume_address == 0 {
                // A hand-written continuation: what the chain waits for, not a method.
                if out.awaiting.is_none() {
                    out.awaiting = view.as_ref().and_then(|v| awaited_by(inspector, v));
                }
            } else {
                out.frames
                    .push(self.frame(namer, lines, at, view.as_ref(), &record));
            }
            at = record.next;
        }
        out.frames.reverse();
        out
    }

    /// One suspended method: named by the code it resumes in.
    fn frame(
        &self,
        namer: &mut MethodNamer,
        lines: &SourceLines,
        continuation: u64,
        view: Option<&ObjectView>,
        record: &ContinuationRecord,
    ) -> RuntimeAsyncFrame {
        let block = self
            .em
            .and_then(|em| em.code_block(record.resume_address).ok().flatten());
        let method_desc = block.as_ref().map(|b| b.method_desc);
        let await_location = match (self.em, &self.debug_info, &block) {
            (Some(em), Some(format), Some(b)) => {
                let il = il_offset(self.rt.target(), em, b, format, false)
                    .ok()
                    .flatten()
                    .and_then(|m| m.il_offset.il());
                let def = method_desc.and_then(|md| namer.method_def(md));
                match (il, def) {
                    (Some(il), Some((path, token))) => {
                        lines.locate(&path, token, il).ok().flatten()
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        RuntimeAsyncFrame {
            continuation,
            method_table: view.map_or(0, |v| v.method_table),
            type_name: view.map_or_else(String::new, |v| v.type_name.clone()),
            resume_address: record.resume_address,
            method_desc,
            method: method_desc.and_then(|md| namer.qualified_name(md)),
            state: record.state,
            await_location,
        }
    }
}

/// What a hand-written continuation waits for: its `Task` or `Source`.
fn awaited_by(inspector: &mut Inspector<'_>, continuation: &ObjectView) -> Option<Awaited> {
    AWAITED_FIELDS.iter().find_map(|&field| {
        let object = reference_field(&continuation.fields, field)?;
        let object_type = inspector
            .view(object, 0)
            .map_or_else(|_| "?".to_string(), |v| v.type_name);
        Some(Awaited {
            field: field.to_string(),
            awaiter_type: continuation.type_name.clone(),
            object,
            object_type,
        })
    })
}
