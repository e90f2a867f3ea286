//! Which lock each thread is blocked entering, from its stack: the object in the live GC
//! slots of the frames that enter it.
//!
//! - .NET 10 enters a contended monitor in managed code (`Monitor.Enter` →
//!   `Monitor.Enter_Slowpath`), and .NET 9 and 10 a `System.Threading.Lock` in
//!   `Lock.Enter` and its helpers: the object is in those frames' slots, or in their
//!   caller's.
//! - .NET 8 and 9 enter a monitor in the runtime (an FCall): the thread's innermost
//!   explicit Frame is a `HelperMethodFrame_1OBJ` that protects the object, and the
//!   managed caller holds it in a slot too.
//!
//! A candidate counts only when its lock is held by another thread, so a reference that
//! merely sits in a frame is not taken for a wait.

use crate::names::MethodNamer;
use crate::stacks::Stacks;

/// How many innermost managed frames are searched for the frames that enter a lock.
const INNERMOST: usize = 8;

/// How a thread is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockedIn {
    /// Entering a monitor (`lock (obj)`, `Monitor.Enter`).
    MonitorEnter,
    /// Entering a `System.Threading.Lock`.
    LockEnter,
    /// In a runtime call that protects the object (.NET 8's monitor entry is one).
    RuntimeCall,
}

/// A thread blocked on a lock another thread holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockedThread {
    /// The thread's kernel id.
    pub os_id: i32,
    /// The lock object it waits for.
    pub object: u64,
    /// How.
    pub how: BlockedIn,
}

/// Which frames enter a lock of which kind.
fn entering(name: &str) -> Option<BlockedIn> {
    let enters = |class: &str| {
        name.split_once(class).is_some_and(|(_, method)| {
            method.starts_with("Enter")
                || method.starts_with("TryEnter")
                || method.starts_with("ReliableEnter")
        })
    };
    if enters("System.Threading.Monitor::") {
        Some(BlockedIn::MonitorEnter)
    } else if enters("System.Threading.Lock::") {
        Some(BlockedIn::LockEnter)
    } else {
        None
    }
}

/// The threads of `stacks` (read with their GC roots) blocked on a lock held by another
/// thread. `held_by_other(object, os_id)` says whether `object`'s lock is held by a thread
/// other than `os_id`; `runtime_call_object(frame)` reads the object a .NET 8
/// `HelperMethodFrame_1OBJ` at `frame` protects.
pub fn blocked_threads(
    stacks: &Stacks,
    namer: &mut MethodNamer,
    held_by_other: &dyn Fn(u64, i32) -> bool,
    runtime_call_object: &dyn Fn(u64) -> Option<u64>,
) -> Vec<BlockedThread> {
    let mut out = Vec::new();
    for t in &stacks.threads {
        let (Some(stack), Some(roots)) = (&t.stack, &t.roots) else {
            continue;
        };
        let slots_of = |frame: usize| -> Vec<u64> {
            roots
                .iter()
                .filter(|r| r.frame == frame)
                .flat_map(|r| r.roots.iter().map(|s| s.object))
                .filter(|&o| o != 0)
                .collect()
        };
        // The innermost managed frames that enter a lock, then their caller.
        let managed = stack.managed_frames();
        // The entering frames may sit under a few frames of waiting machinery
        // (`WaitHandle`, an event): look at the innermost few.
        let kinds: Vec<Option<BlockedIn>> = managed
            .iter()
            .take(INNERMOST)
            .map(|&(_, md)| entering(&namer.name(md)))
            .collect();
        let mut how = None;
        let mut candidates = Vec::new();
        if let Some(first) = kinds.iter().position(Option::is_some) {
            how = kinds[first];
            let mut last = first;
            while kinds.get(last + 1).is_some_and(Option::is_some) {
                last += 1;
            }
            // Through the caller of the entering frames.
            let through = (last + 1).min(managed.len() - 1);
            for &(index, _) in &managed[..=through] {
                candidates.extend(slots_of(index));
            }
        }
        if how.is_none() {
            // .NET 8 and 9: the runtime call's Frame protects the object.
            let first = t.managed.as_ref().and_then(|m| m.explicit_frames.first());
            if let Some(frame) = first.filter(|f| f.kind == Some("HelperMethodFrame_1OBJ")) {
                if let Some(object) = runtime_call_object(frame.address) {
                    how = Some(BlockedIn::RuntimeCall);
                    candidates.push(object);
                }
            }
        }
        let Some(how) = how else { continue };
        if let Some(&object) = candidates.iter().find(|&&o| held_by_other(o, t.os_id)) {
            out.push(BlockedThread {
                os_id: t.os_id,
                object,
                how,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_entering_frames_are_named_by_their_class_and_method() {
        let m = "void [System.Private.CoreLib] System.Threading.Monitor::Enter_Slowpath(object)";
        assert_eq!(entering(m), Some(BlockedIn::MonitorEnter));
        let m =
            "void [System.Private.CoreLib] System.Threading.Monitor::ReliableEnter(object,bool&)";
        assert_eq!(entering(m), Some(BlockedIn::MonitorEnter));
        let l = "instance void [System.Private.CoreLib] System.Threading.Lock::Enter()";
        assert_eq!(entering(l), Some(BlockedIn::LockEnter));
        let w = "bool [System.Private.CoreLib] System.Threading.Monitor::Wait(object,int32)";
        assert_eq!(entering(w), None);
        assert_eq!(entering("void [App] App.Monitor::Enter()"), None);
    }
}
