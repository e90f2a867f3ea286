//! What a Task's `m_continuationObject` leads to. The runtime stores there, depending on
//! how the continuation was registered: a state machine box (an `await` with
//! `ConfigureAwait(false)`), a `TaskContinuation` holding a Task (`m_task`) or an Action
//! (`m_action`), an Action whose target is a box or a `ContinuationWrapper` around
//! another Action, a `RuntimeAsyncTaskContinuation` (runtime-async methods awaiting the
//! Task: its `RuntimeAsyncTask`), or a `List<object>` of several of these. Each is followed to the Task
//! or object that will run.

use crate::inspect::{int_field, reference_field, Inspector, Value};

/// Most continuations read from one list.
const MAX_LIST_CONTINUATIONS: usize = 4096;
/// The wrapper the runtime puts around an Action to keep its async method for debuggers.
const CONTINUATION_WRAPPER: &str =
    "System.Runtime.CompilerServices.AsyncMethodBuilderCore+ContinuationWrapper";

/// What the continuation object `object` runs: the Tasks or objects it leads to.
pub fn resolve(inspector: &mut Inspector<'_>, object: u64) -> Vec<u64> {
    let Some(v) = inspector.view(object, 0).ok() else {
        return vec![object];
    };
    if v.type_name.starts_with("System.Collections.Generic.List`1") {
        let count = int_field(&v.fields, "_size")
            .unwrap_or(0)
            .clamp(0, MAX_LIST_CONTINUATIONS as i64);
        let Some(items) = reference_field(&v.fields, "_items") else {
            return Vec::new();
        };
        let Some(array) = inspector
            .view(items, count as usize)
            .ok()
            .and_then(|a| a.array)
        else {
            return Vec::new();
        };
        return array
            .elements
            .iter()
            .filter_map(|e| match e {
                Value::Reference { address, .. } if *address != 0 => Some(*address),
                _ => None,
            })
            .map(|c| resolve_one(inspector, c))
            .collect();
    }
    vec![resolve_one(inspector, object)]
}

/// One continuation (not a list), followed to what it runs.
fn resolve_one(inspector: &mut Inspector<'_>, object: u64) -> u64 {
    let Some(v) = inspector.view(object, 0).ok() else {
        return object;
    };
    // A Task (a state machine box, or a ContinueWith Task) runs itself.
    if int_field(&v.fields, "m_stateFlags").is_some() {
        return object;
    }
    if let Some(task) = reference_field(&v.fields, "m_task") {
        return task;
    }
    // A runtime-async chain awaiting a Task: the chain's own Task runs next.
    if let Some(task) = reference_field(&v.fields, "RuntimeAsyncTask") {
        return task;
    }
    let mut current = object;
    let mut fields = v.fields;
    if let Some(action) = reference_field(&fields, "m_action") {
        current = action;
        match inspector.view(action, 0).ok() {
            Some(a) => fields = a.fields,
            None => return current,
        }
    }
    if let Some(target) = reference_field(&fields, "_target") {
        current = target;
        let Some(t) = inspector.view(target, 0).ok() else {
            return current;
        };
        if t.type_name == CONTINUATION_WRAPPER {
            if let Some(inner) = reference_field(&t.fields, "_continuation") {
                current = inner;
                if let Some(inner_target) = inspector
                    .view(inner, 0)
                    .ok()
                    .and_then(|i| reference_field(&i.fields, "_target"))
                {
                    current = inner_target;
                }
            }
        }
    }
    current
}
