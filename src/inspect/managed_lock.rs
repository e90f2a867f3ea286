//! `System.Threading.Lock` (.NET 9 and later): who holds it and how many wait, from its
//! fields, read by the names its metadata declares. On .NET 11 a contended monitor is one
//! too (a sync block keeps a handle to it).

use super::values::Value;
use super::{InspectOptions, Inspector};
use crate::contracts::sync_block::{Holder, Monitor};
use crate::contracts::ContractError;

/// `Lock._state`: bit 0 held; threads waiting counted from this bit (.NET 9 and 10 keep a
/// "trivial waits" flag in bit 6).
const LOCK_WAITER_SHIFT: u32 = 7;

/// A `System.Threading.Lock` that is held or waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadingLock {
    /// The Lock object.
    pub object: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// Its owner as recorded (`_owningThreadId`): the OS thread id on .NET 9 and 10, the
    /// managed thread id from .NET 11 (measured: the testbed's Lock deadlock, whose
    /// owners' ids are the manifest's); `None` when not held.
    pub owner: Option<Holder>,
    /// Times entered beyond the first (`_recursionCount`).
    pub recursion: u32,
    /// Threads waiting to enter, as its state counts them.
    pub waiters: u32,
}

impl ThreadingLock {
    /// The lock as a monitor: held by its owner, entered once more than its recursion.
    pub fn as_monitor(&self) -> Monitor {
        Monitor {
            locked: self.owner.is_some(),
            recursion: if self.owner.is_some() {
                self.recursion + 1
            } else {
                0
            },
            holder: self.owner,
            holder_os_id: match self.owner {
                Some(Holder::OsThreadId(os)) => Some(os),
                _ => None,
            },
            waiters: self.waiters,
        }
    }
}

impl Inspector<'_> {
    /// The Lock at `object`, or `None` when nobody holds it or waits for it.
    pub fn threading_lock(
        &mut self,
        object: u64,
        method_table: u64,
    ) -> Result<Option<ThreadingLock>, ContractError> {
        let managed_ids = self
            .runtime()
            .contracts()
            .context()
            .major
            .is_some_and(|m| m >= 11);
        let view = self.inspect(
            object,
            InspectOptions {
                max_elements: 0,
                statics: false,
            },
        )?;
        let field = |name: &str| -> Option<u64> {
            view.fields
                .iter()
                .find(|f| f.name == name)
                .and_then(|f| match f.value {
                    Value::UInt(v) => Some(v),
                    Value::Int(v) => u64::try_from(v).ok(),
                    _ => None,
                })
        };
        let (Some(owner), Some(state)) = (field("_owningThreadId"), field("_state")) else {
            return Err(ContractError::Corrupt {
                what: "System.Threading.Lock",
                addr: object,
                detail: "it has no _owningThreadId or _state field".into(),
            });
        };
        let waiters = (state >> LOCK_WAITER_SHIFT) as u32;
        if owner == 0 && waiters == 0 {
            return Ok(None);
        }
        Ok(Some(ThreadingLock {
            object,
            method_table,
            owner: match owner {
                0 => None,
                id if managed_ids => Some(Holder::ThinLockId(id as u32)),
                id => Some(Holder::OsThreadId(id)),
            },
            recursion: field("_recursionCount").unwrap_or(0) as u32,
            waiters,
        }))
    }
}
