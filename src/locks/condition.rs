//! .NET 11's `Monitor.Wait` waiters. A monitor's `System.Threading.Lock` keeps a managed
//! `Condition` in `_waitEventOrCondition` once a thread has waited on it; the condition's
//! waiters (`_waitersHead`, linked by `next`) are one object per waiting thread. No waiter
//! names its thread (11.0.0 keeps it in no thread static either): each is found on the
//! stack of the thread waiting with it, in a live slot of its `Condition::Wait` frame.

use std::collections::{HashMap, HashSet};

use crate::contracts::ContractError;
use crate::inspect::{reference_field, Inspector};
use crate::names::MethodNamer;
use crate::stacks::Stacks;

/// The Lock's field holding its wait event or, once waited on, its Condition.
const WAIT_FIELD: &str = "_waitEventOrCondition";
/// The Condition's type.
const CONDITION: &str = "System.Threading.Condition";
/// The method a thread waits in (its frame holds the thread's waiter).
const WAIT_METHOD: &str = "System.Threading.Condition::Wait";
/// How many innermost managed frames are searched for it (under a wait handle's frames).
const INNERMOST: usize = 8;

/// The waiters of the Condition of the Lock at `lock`, head first (empty when nobody has
/// waited on it). `limit` bounds the list: a longer one (a cycle) fails.
pub(crate) fn condition_waiters(
    inspector: &mut Inspector<'_>,
    lock: u64,
    limit: u64,
) -> Result<Vec<u64>, ContractError> {
    let view = inspector.view(lock, 0)?;
    let Some(condition) = reference_field(&view.fields, WAIT_FIELD) else {
        return Ok(Vec::new());
    };
    let c = inspector.view(condition, 0)?;
    if c.type_name != CONDITION {
        return Ok(Vec::new());
    }
    let mut waiters = Vec::new();
    let mut at = reference_field(&c.fields, "_waitersHead");
    while let Some(w) = at {
        if waiters.len() as u64 >= limit || waiters.contains(&w) {
            return Err(ContractError::Corrupt {
                what: "Condition waiter list",
                addr: condition,
                detail: format!("more than {limit} waiters, or a cycle at {w:#x}"),
            });
        }
        waiters.push(w);
        at = reference_field(&inspector.view(w, 0)?.fields, "next");
    }
    Ok(waiters)
}

/// The OS id of the thread waiting on each of `waiters` (those found): the waiter is in
/// a live GC slot of that thread's `Condition::Wait` frame or of the frames it called
/// (stacks read with their GC roots). A thread pulsing the condition may hold a waiter
/// too, but not under `Condition::Wait`.
pub(crate) fn threads_of_waiters(
    stacks: &Stacks,
    namer: &mut MethodNamer,
    waiters: &HashSet<u64>,
) -> HashMap<u64, u64> {
    let mut found = HashMap::new();
    for t in &stacks.threads {
        let (Some(stack), Some(roots)) = (&t.stack, &t.roots) else {
            continue;
        };
        let managed: Vec<(usize, u64)> =
            stack.managed_frames().into_iter().take(INNERMOST).collect();
        let Some(&(wait_frame, _)) = managed
            .iter()
            .find(|&&(_, md)| namer.name(md).contains(WAIT_METHOD))
        else {
            continue;
        };
        for r in roots.iter().filter(|r| r.frame <= wait_frame) {
            for slot in &r.roots {
                if waiters.contains(&slot.object) {
                    found.insert(slot.object, t.os_id as u32 as u64);
                }
            }
        }
    }
    found
}
