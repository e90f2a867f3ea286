//! `SyncBlock`, `SyncTableEntry` and `SyncBlockCache`: the sync table and its blocks.
//!
//! Per runtime: .NET 8, 9 and 10 keep a monitor (`AwareLock`) at the start of each sync
//! block: lock state, recursion, holder (a `Thread*` on 8 and 9, `HoldingThreadId` on 10),
//! the holder's OS id and the block's own index (`SyncIndex`); the Monitor.Wait list is
//! `Link`. .NET 11 rebuilt it: `Lock` is a handle to a managed `System.Threading.Lock`
//! (made when the monitor is contended), `ThinLock` the thin-lock word the object's header
//! held before it needed the block, `LinkNext` the wait list; no own index.

use crate::contracts::ContractError;
use crate::descriptor::{DataDescriptor, DescriptorError};
use crate::memory::Target;

use super::TypeFields;

/// Where an `AwareLock` holder is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HolderField {
    /// `HoldingThread`, a `Thread*` (.NET 8 and 9).
    Thread(u64),
    /// `HoldingThreadId`, the thin-lock id (.NET 10).
    ThinLockId(u64),
}

/// The monitor part of a sync block's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MonitorLayout {
    /// .NET 8, 9 and 10.
    AwareLock {
        lock_state: u64,
        recursion: u64,
        holder: HolderField,
        holding_os_thread_id: u64,
        sync_index: u64,
    },
    /// .NET 11.
    ManagedLock { lock_handle: u64, thin_lock: u64 },
}

/// Where a `SyncBlock`'s fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyncBlockLayout {
    monitor: MonitorLayout,
    /// The head of the Monitor.Wait list (`Link`, 11: `LinkNext`).
    wait_list: Option<u64>,
    hash_code: Option<u64>,
}

impl SyncBlockLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "SyncBlock")?;
        let monitor = if let Some(lock_handle) = t.optional("Lock") {
            MonitorLayout::ManagedLock {
                lock_handle,
                thin_lock: t.required("ThinLock")?,
            }
        } else {
            let holder = match t.optional("HoldingThread") {
                Some(at) => HolderField::Thread(at),
                None => HolderField::ThinLockId(t.required("HoldingThreadId")?),
            };
            MonitorLayout::AwareLock {
                lock_state: t.required("LockState")?,
                recursion: t.required("Recursion")?,
                holder,
                holding_os_thread_id: t.required("HoldingOSThreadId")?,
                sync_index: t.required("SyncIndex")?,
            }
        };
        Ok(SyncBlockLayout {
            monitor,
            wait_list: t.renamed(&["LinkNext", "Link"]).ok(),
            hash_code: t.optional("HashCode"),
        })
    }
}

/// A sync block's monitor, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MonitorRecord {
    /// An `AwareLock`.
    AwareLock {
        /// Bit 0 held; waiters from bit 6.
        lock_state: u32,
        /// Times entered.
        recursion: u32,
        /// The holder: a `Thread*` (8, 9) or thin-lock id (10).
        holder: HolderRecord,
        /// The holder's OS thread id.
        holding_os_thread_id: u64,
        /// The block's own index into the sync table (flag bit included).
        sync_index: u32,
    },
    /// .NET 11's: the handle of a `System.Threading.Lock` (0: none made), and the thin-lock
    /// word.
    ManagedLock { lock_handle: u64, thin_lock: u32 },
}

/// Who an `AwareLock` says holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HolderRecord {
    /// A `Thread*`.
    Thread(u64),
    /// A thin-lock id.
    ThinLockId(u32),
}

/// A `SyncBlock`, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyncBlockRecord {
    /// Its monitor.
    pub monitor: MonitorRecord,
    /// The head of its Monitor.Wait list (`None` where not described).
    pub wait_list: Option<u64>,
    /// The object's hash code kept here (0 where not described).
    pub hash_code: u32,
}

impl SyncBlockRecord {
    pub(crate) fn read(
        target: &Target,
        layout: &SyncBlockLayout,
        address: u64,
    ) -> Result<Self, ContractError> {
        let u32_at = |off: u64| target.read_u32(address.wrapping_add(off));
        let ptr = |off: u64| target.read_pointer(address.wrapping_add(off));
        let monitor = match layout.monitor {
            MonitorLayout::AwareLock {
                lock_state,
                recursion,
                holder,
                holding_os_thread_id,
                sync_index,
            } => MonitorRecord::AwareLock {
                lock_state: u32_at(lock_state)?,
                recursion: u32_at(recursion)?,
                holder: match holder {
                    HolderField::Thread(at) => HolderRecord::Thread(ptr(at)?),
                    HolderField::ThinLockId(at) => HolderRecord::ThinLockId(u32_at(at)?),
                },
                holding_os_thread_id: ptr(holding_os_thread_id)?,
                sync_index: u32_at(sync_index)?,
            },
            MonitorLayout::ManagedLock {
                lock_handle,
                thin_lock,
            } => MonitorRecord::ManagedLock {
                lock_handle: ptr(lock_handle)?,
                thin_lock: u32_at(thin_lock)?,
            },
        };
        Ok(SyncBlockRecord {
            monitor,
            wait_list: layout.wait_list.map(ptr).transpose()?,
            hash_code: layout.hash_code.map(u32_at).transpose()?.unwrap_or(0),
        })
    }
}

/// Where a `SyncTableEntry`'s fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyncTableEntryLayout {
    /// Bytes per entry.
    pub size: u64,
    sync_block: u64,
    object: u64,
}

impl SyncTableEntryLayout {
    pub(crate) fn from_descriptor(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "SyncTableEntry")?;
        Ok(SyncTableEntryLayout {
            size: u64::from(d.ty("SyncTableEntry")?.size()?),
            sync_block: t.required("SyncBlock")?,
            object: t.required("Object")?,
        })
    }
}

/// A `SyncTableEntry`, read: `(sync block, object)`.
pub(crate) fn read_entry(
    target: &Target,
    layout: &SyncTableEntryLayout,
    address: u64,
) -> Result<(u64, u64), ContractError> {
    Ok((
        target.read_pointer(address.wrapping_add(layout.sync_block))?,
        target.read_pointer(address.wrapping_add(layout.object))?,
    ))
}
