//! SyncBlock: the sync table and the monitors kept in sync blocks.
//!
//! An object's header names a sync block by its index in the sync table (`g_pSyncTable`):
//! an array of 16-byte entries `{SyncBlock*, Object*}`, entry 0 unused, a free entry's
//! object pointer with its low bit set. The used part ends where the sync block cache's
//! `m_FreeSyncTableIndex` says: the runtime grows the table into memory it does not clear,
//! so what lies past that index is whatever the allocator left there (on an ASP.NET Core
//! service, never a `{0, 0}` entry). The cache is `SyncBlockCache::s_pSyncBlockCache`: the
//! `SyncBlockCache` global of .NET 11, and on .NET 8, 9 and 10 the `g_dacTable` slot after
//! `g_pSyncTable`'s (the runtime's `dacvars.h` lists the two together, with nothing between
//! them on Unix). Without that count (a descriptor that lacks the field) the table is read
//! up to its first `{0, 0}` entry, as before.
//! On .NET 8, 9 and 10 a sync block starts with the runtime's monitor (`AwareLock`): its
//! lock state (bit 0 locked, bits 6.. the threads waiting to enter), recursion (times
//! entered), holder and the holder's OS thread id, and its own index back into the table;
//! the object's hash code sits further on, for an object both locked and hashed.
//!
//! The holder changed shape: a `Thread*` on .NET 8 and 9 (`HoldingThread`), the thread's
//! thin-lock id on .NET 10 (`HoldingThreadId`). No runtime before .NET 11 describes any of
//! this beyond the table's address; the layout comes from cdac's descriptors (measured on
//! each version) and the table's address on .NET 8 from a search of `g_dacTable` that
//! accepts only a table whose sync blocks name their own entries.
//!
//! .NET 11 advertises `SyncBlock` "c1" (cdac's version 1): its sync block keeps a handle
//! to a managed `System.Threading.Lock` (made when the monitor is contended) and the
//! thin-lock word the object's header held; the runtime describes it all, and the table,
//! cache and both layouts come from its descriptor. The Lock object's own state (owner,
//! waiters) is a managed object's fields: [`SyncBlockInfo::lock_object`] hands it to the
//! reader of those (the locks module). The layouts are records (`crate::records`).

use super::fields::Fields;
use super::registry::{self, Contract, ContractContext};
use super::thread::ThreadInfo;
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;
use crate::records::sync_block::{
    read_entry, HolderRecord, MonitorRecord, SyncBlockLayout, SyncBlockRecord, SyncTableEntryLayout,
};

/// The sync block's type in the descriptor.
const SYNC_BLOCK: &str = "SyncBlock";
/// The global holding the address of `g_pSyncTable`.
const TABLE_GLOBAL: &str = "SyncTableEntries";
/// The sync block cache's type and the global holding the address of its pointer
/// (`SyncBlockCache::s_pSyncBlockCache`, .NET 11).
const CACHE: &str = "SyncBlockCache";
/// Bit 0 of the lock state: the monitor is held.
const LOCKED: u32 = 1;
/// The lock state's waiter count starts at this bit.
const WAITER_SHIFT: u32 = 6;
/// The top bit of the sync block's index is a flag (the block is "precious").
const INDEX_MASK: u32 = 0x7FFF_FFFF;
/// How many entries the `.NET 8` search looks at to accept a candidate table.
const SEARCH_ENTRIES: u32 = 64;

/// How cdac found the sync table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableSource {
    /// The descriptor's `SyncTableEntries` global.
    Descriptor,
    /// A `g_dacTable` slot whose table passed the structural check (.NET 8).
    DacTableSlot(u64),
}

/// The sync table and the sync blocks of one runtime.
#[derive(Debug, Clone)]
pub struct SyncBlocks {
    target: Target,
    descriptor: DataDescriptor,
    /// The address of the variable `g_pSyncTable` (the table moves when it grows).
    table_variable: u64,
    source: TableSource,
    /// The address of `SyncBlockCache::s_pSyncBlockCache`, when found and the descriptor
    /// gives `SyncBlockCache.FreeSyncTableIndex`.
    cache_variable: Option<u64>,
    block_layout: SyncBlockLayout,
    entry_layout: SyncTableEntryLayout,
}

/// One entry of the sync table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncTableEntry {
    /// Its index (the number object headers hold).
    pub index: u32,
    /// The sync block.
    pub sync_block: u64,
    /// The object it belongs to.
    pub object: u64,
}

/// The used part of the sync table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncTable {
    /// Entries with a sync block, in index order.
    pub entries: Vec<SyncTableEntry>,
    /// Entries in use or free (SOS `syncblk`'s "Total"): the runtime's count, or where
    /// cdac cannot read it, the entries before the first `{0, 0}` one.
    pub total: u32,
    /// Entries on the free list (SOS's "Free").
    pub free: u32,
    /// Whether `total` is the runtime's own count.
    pub counted_by_runtime: bool,
}

/// Who holds a monitor, in the form the runtime records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// The holding `Thread*` (.NET 8 and 9).
    Thread(u64),
    /// The holding thread's thin-lock id, `Thread.Id`, which is also its managed thread id
    /// (.NET 10's monitors, thin locks, .NET 11's Locks).
    ThinLockId(u32),
    /// The holding thread's OS id (.NET 9 and 10's `System.Threading.Lock`).
    OsThreadId(u64),
}

impl Holder {
    /// Whether `thread` is this holder.
    pub fn names(self, thread: &ThreadInfo) -> bool {
        match self {
            Holder::Thread(address) => thread.address == address,
            Holder::ThinLockId(id) => thread.managed_id == id,
            Holder::OsThreadId(id) => thread.has_os_id(id),
        }
    }

    /// The thread of `threads` this holder names.
    pub fn find(self, threads: &[ThreadInfo]) -> Option<&ThreadInfo> {
        threads.iter().find(|t| self.names(t))
    }
}

/// A sync block's monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Monitor {
    /// Some thread holds it.
    pub locked: bool,
    /// Times the holder entered it (0 when not held).
    pub recursion: u32,
    /// The holder, when held.
    pub holder: Option<Holder>,
    /// The holder's OS thread id, when held.
    pub holder_os_id: Option<u64>,
    /// Threads waiting to enter it.
    pub waiters: u32,
}

/// One sync block, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncBlockInfo {
    /// Its address.
    pub address: u64,
    /// Its index in the sync table.
    pub index: u32,
    /// Its monitor.
    pub monitor: Monitor,
    /// The object's hash code kept here (0: none).
    pub hash_code: u32,
    /// .NET 11: the `System.Threading.Lock` the monitor was inflated to, whose fields say
    /// who holds it and who waits (the `monitor` then says only what the thin-lock word
    /// says).
    pub lock_object: Option<u64>,
}

impl Contract for SyncBlocks {
    const NAME: &'static str = "SyncBlock";
    /// 1: .NET 11's "c1" (the managed Lock); .NET 8, 9 and 10 do not name the contract.
    const VERSIONS: &'static [u64] = &[1];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            1 => SyncBlocks::described(context),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }

    /// Missing unless cdac's descriptors give the monitor's layout (.NET 8, 9, 10).
    fn when_absent(context: &ContractContext) -> Option<Result<Self, ContractError>> {
        let described = context
            .descriptor
            .ty(SYNC_BLOCK)
            .is_ok_and(|t| t.has_field("LockState"));
        described.then(|| SyncBlocks::find(context))
    }
}

impl SyncBlocks {
    /// .NET 11: the table and the cache from the descriptor's globals.
    fn described(context: &ContractContext) -> Result<SyncBlocks, ContractError> {
        let d = &context.descriptor;
        let mut made = SyncBlocks {
            target: context.target.clone(),
            descriptor: d.clone(),
            table_variable: d.global_value(TABLE_GLOBAL)?,
            source: TableSource::Descriptor,
            cache_variable: None,
            block_layout: SyncBlockLayout::from_descriptor(d)?,
            entry_layout: SyncTableEntryLayout::from_descriptor(d)?,
        };
        made.cache_variable = made.find_cache(context);
        Ok(made)
    }

    /// Finds the sync table: the descriptor's global, else a `g_dacTable` slot that passes
    /// the structural check.
    fn find(context: &ContractContext) -> Result<SyncBlocks, ContractError> {
        let d = &context.descriptor;
        // The layouts must be known before anything is read with them.
        let mut made = SyncBlocks {
            target: context.target.clone(),
            descriptor: d.clone(),
            table_variable: 0,
            source: TableSource::Descriptor,
            cache_variable: None,
            block_layout: SyncBlockLayout::from_descriptor(d)?,
            entry_layout: SyncTableEntryLayout::from_descriptor(d)?,
        };
        if let Ok(variable) = d.global_value(TABLE_GLOBAL) {
            made.table_variable = variable;
            made.cache_variable = made.find_cache(context);
            return Ok(made);
        }
        let Some((table, size)) = context.dac_table else {
            return Err(ContractError::Missing {
                contract: "SyncBlock (no SyncTableEntries global and no g_dacTable)",
            });
        };
        for slot in 0..size / 8 {
            let Ok(variable) = context.target.read_pointer(table + slot * 8) else {
                continue;
            };
            made.table_variable = variable;
            // The candidate's count bounds the entries its check reads.
            made.cache_variable = made.find_cache(context);
            if made.looks_like_the_sync_table() {
                made.source = TableSource::DacTableSlot(slot);
                return Ok(made);
            }
        }
        Err(ContractError::Corrupt {
            what: "g_dacTable",
            addr: table,
            detail: format!(
                "none of its {} slots leads to a sync table whose sync blocks name their \
                 own entries",
                size / 8
            ),
        })
    }

    /// Whether the table `table_variable` points at has at least one used entry in its
    /// first [`SEARCH_ENTRIES`] and every used one's sync block names its own index.
    fn looks_like_the_sync_table(&self) -> bool {
        let mut matched = 0;
        for index in 1..SEARCH_ENTRIES {
            match self.entry(index) {
                Ok(None) => break,
                Ok(Some(e)) if e.object & 1 != 0 || e.sync_block == 0 => {}
                Ok(Some(e)) => match self.sync_index(e.sync_block) {
                    Ok(Some(i)) if i == index => matched += 1,
                    _ => return false,
                },
                Err(_) => return false,
            }
        }
        matched > 0
    }

    /// Where `SyncBlockCache::s_pSyncBlockCache` is: the descriptor's `SyncBlockCache`
    /// global, else the `g_dacTable` slot after the one that holds the table's variable.
    /// `None` when the descriptor does not give `SyncBlockCache.FreeSyncTableIndex` or
    /// neither place is there.
    fn find_cache(&self, context: &ContractContext) -> Option<u64> {
        let d = &context.descriptor;
        d.ty(CACHE).ok()?.field("FreeSyncTableIndex").ok()?;
        if let Ok(variable) = d.global_value(CACHE) {
            return Some(variable);
        }
        let (table, size) = context.dac_table?;
        let slots = size / 8;
        let slot = (0..slots).find(|s| {
            self.target
                .read_pointer(table + s * 8)
                .is_ok_and(|v| v == self.table_variable)
        })?;
        (slot + 1 < slots)
            .then(|| self.target.read_pointer(table + (slot + 1) * 8).ok())
            .flatten()
            .filter(|&v| v != 0)
    }

    /// The runtime's count of sync table entries ever used (`m_FreeSyncTableIndex - 1`:
    /// entries 1 to this are in use or on the free list, those past it never were), or
    /// `None` when cdac cannot find the sync block cache. Read each time (a live table
    /// grows).
    pub fn used_entries(&self) -> Result<Option<u32>, ContractError> {
        let Some(variable) = self.cache_variable else {
            return Ok(None);
        };
        let cache = self.target.read_pointer(variable)?;
        if cache == 0 {
            return Err(ContractError::Corrupt {
                what: "sync block cache",
                addr: variable,
                detail: "SyncBlockCache::s_pSyncBlockCache is null".into(),
            });
        }
        let free_index = self.fields().u32(cache, CACHE, "FreeSyncTableIndex")?;
        let limit = self.target.limits().max_list_length;
        if free_index == 0 || u64::from(free_index) > limit {
            return Err(ContractError::Corrupt {
                what: "sync block cache",
                addr: cache,
                detail: format!(
                    "its next never-used sync table index is {free_index}, not between 1 \
                     and {limit}"
                ),
            });
        }
        Ok(Some(free_index - 1))
    }

    /// How the table was found.
    pub fn source(&self) -> TableSource {
        self.source
    }

    fn fields(&self) -> Fields<'_> {
        Fields::new(&self.target, &self.descriptor)
    }

    /// The table's first entry (it moves when the table grows, so read each time).
    fn table(&self) -> Result<u64, ContractError> {
        let table = self.target.read_pointer(self.table_variable)?;
        if table == 0 {
            return Err(ContractError::Corrupt {
                what: "sync table",
                addr: self.table_variable,
                detail: "g_pSyncTable is null".into(),
            });
        }
        Ok(table)
    }

    /// Entry `index`; `None` past the used part: past the runtime's count of used entries
    /// ([`SyncBlocks::used_entries`]), or, where that count is unknown, at a `{0, 0}` entry.
    pub fn entry(&self, index: u32) -> Result<Option<SyncTableEntry>, ContractError> {
        if let Some(used) = self.used_entries()? {
            if index > used {
                return Ok(None);
            }
        }
        self.entry_unbounded(index)
    }

    /// Entry `index` as stored; `None` for a `{0, 0}` entry.
    fn entry_unbounded(&self, index: u32) -> Result<Option<SyncTableEntry>, ContractError> {
        let at = self
            .table()?
            .wrapping_add(u64::from(index) * self.entry_layout.size);
        let (sync_block, object) = read_entry(&self.target, &self.entry_layout, at)?;
        if sync_block == 0 && object == 0 {
            return Ok(None);
        }
        Ok(Some(SyncTableEntry {
            index,
            sync_block,
            object,
        }))
    }

    /// The used part of the table: the entries with a sync block, in index order, and
    /// what SOS's `syncblk` totals (entries in use or free, free ones). At most the
    /// target's list-length limit of entries.
    pub fn used_part(&self) -> Result<SyncTable, ContractError> {
        let used = self.used_entries()?;
        let limit = used.map_or(self.target.limits().max_list_length, u64::from);
        let mut table = SyncTable {
            counted_by_runtime: used.is_some(),
            ..SyncTable::default()
        };
        for index in 1u64..=limit {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            match self.entry_unbounded(index)? {
                // Inside the runtime's count a `{0, 0}` entry ends nothing.
                None if used.is_some() => {}
                None => return Ok(table),
                Some(e) if e.object & 1 != 0 => table.free += 1,
                Some(e) if e.sync_block == 0 => {}
                Some(e) => table.entries.push(e),
            }
            table.total = index;
        }
        if used.is_some() {
            return Ok(table);
        }
        Err(ContractError::LimitExceeded {
            what: "sync table",
            addr: self.table_variable,
            limit: crate::limits::Limit::ListLength,
            cap: limit,
            unit: "entries",
        })
    }

    /// The sync block of `object`, whose header holds `index`: checked to be the entry
    /// of that object and to name that index back.
    pub fn of_object(&self, index: u32, object: u64) -> Result<SyncBlockInfo, ContractError> {
        let entry = self.entry(index)?.ok_or(ContractError::Corrupt {
            what: "sync table entry",
            addr: self.table_variable,
            detail: format!("entry {index} is past the used part of the table"),
        })?;
        if entry.object != object {
            return Err(ContractError::Corrupt {
                what: "sync table entry",
                addr: entry.sync_block,
                detail: format!(
                    "entry {index} belongs to object {:#x}, not {object:#x}",
                    entry.object
                ),
            });
        }
        self.read(entry.sync_block, index)
    }

    /// The index a sync block names as its own (.NET 8 to 10; `None` on .NET 11, whose
    /// blocks do not keep one).
    fn sync_index(&self, sync_block: u64) -> Result<Option<u32>, ContractError> {
        match self.record(sync_block)?.monitor {
            MonitorRecord::AwareLock { sync_index, .. } => Ok(Some(sync_index & INDEX_MASK)),
            MonitorRecord::ManagedLock { .. } => Ok(None),
        }
    }

    fn record(&self, sync_block: u64) -> Result<SyncBlockRecord, ContractError> {
        SyncBlockRecord::read(&self.target, &self.block_layout, sync_block)
    }

    /// The sync block at `address`, expected at `index` of the table.
    pub fn read(&self, address: u64, index: u32) -> Result<SyncBlockInfo, ContractError> {
        let record = self.record(address)?;
        let (monitor, lock_object) = match record.monitor {
            MonitorRecord::AwareLock {
                lock_state,
                recursion,
                holder,
                holding_os_thread_id,
                sync_index,
            } => {
                let own = sync_index & INDEX_MASK;
                if own != index {
                    return Err(ContractError::Corrupt {
                        what: "sync block",
                        addr: address,
                        detail: format!("it names sync table entry {own}, not {index}"),
                    });
                }
                let locked = lock_state & LOCKED != 0;
                let monitor = Monitor {
                    locked,
                    recursion: if locked { recursion } else { 0 },
                    holder: locked.then_some(match holder {
                        HolderRecord::Thread(t) => Holder::Thread(t),
                        HolderRecord::ThinLockId(id) => Holder::ThinLockId(id),
                    }),
                    holder_os_id: locked.then_some(holding_os_thread_id),
                    waiters: lock_state >> WAITER_SHIFT,
                };
                (monitor, None)
            }
            MonitorRecord::ManagedLock {
                lock_handle,
                thin_lock,
            } => {
                let lock_object = match lock_handle {
                    0 => None,
                    h => Some(self.target.read_pointer(h)?).filter(|&o| o != 0),
                };
                (self.thin_lock_monitor(thin_lock), lock_object)
            }
        };
        Ok(SyncBlockInfo {
            address,
            index,
            monitor,
            hash_code: record.hash_code,
            lock_object,
        })
    }

    /// The monitor a thin-lock word describes (.NET 11 keeps the header's in the block):
    /// the holder's thin-lock id and its recursion level, by the runtime's masks.
    fn thin_lock_monitor(&self, word: u32) -> Monitor {
        let global =
            |name: &str, default: u64| self.descriptor.global_value(name).unwrap_or(default);
        let id_mask = global("SyncBlockMaskLockThreadId", 0xFFFF) as u32;
        let level_mask = global("SyncBlockMaskLockRecursionLevel", 0x3F_0000) as u32;
        let level_shift = global("SyncBlockRecursionLevelShift", 16) as u32;
        let id = word & id_mask;
        Monitor {
            locked: id != 0,
            recursion: if id != 0 {
                ((word & level_mask) >> level_shift) + 1
            } else {
                0
            },
            holder: (id != 0).then_some(Holder::ThinLockId(id)),
            holder_os_id: None,
            waiters: 0,
        }
    }
}

/// Most threads read from one sync block's wait list.
const MAX_PULSE_WAITERS: usize = 4096;

impl SyncBlocks {
    /// The threads (`Thread*`) waiting in `Monitor.Wait` on the sync block at `address`,
    /// from its wait list: `SyncBlock.Link` heads a list of each waiter's `WaitEventLink`
    /// (linked through their `LinkSB`). Each entry must name this sync block as the one it
    /// waits on, else the list is refused. Empty when the descriptors do not give the list.
    pub fn pulse_waiters(&self, address: u64) -> Result<Vec<u64>, ContractError> {
        let f = self.fields();
        let Some(mut next) = self.record(address)?.wait_list else {
            return Ok(Vec::new());
        };
        if !f.has("WaitEventLink", "WaitSB") {
            return Ok(Vec::new());
        }
        let link_sb = f.off("WaitEventLink", "LinkSB")?;
        let mut threads = Vec::new();
        let mut seen = std::collections::HashSet::new();
        while next != 0 {
            if !seen.insert(next) || threads.len() >= MAX_PULSE_WAITERS {
                return Err(ContractError::Corrupt {
                    what: "sync block wait list",
                    addr: address,
                    detail: format!(
                        "it loops or holds more than {MAX_PULSE_WAITERS} threads (at {next:#x})"
                    ),
                });
            }
            let link = next.wrapping_sub(link_sb);
            let waits_on = f.ptr(link, "WaitEventLink", "WaitSB")?;
            if waits_on != address {
                return Err(ContractError::Corrupt {
                    what: "sync block wait list",
                    addr: address,
                    detail: format!(
                        "its entry {link:#x} waits on sync block {waits_on:#x}, not this one"
                    ),
                });
            }
            threads.push(f.ptr(link, "WaitEventLink", "Thread")?);
            // SLink: its next pointer is its only field.
            next = self.target.read_pointer(next)?;
        }
        Ok(threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    /// The .NET 9 shape: `HoldingThread` a pointer, no `SyncTableEntries` global.
    const DESCRIPTOR: &str = r#"{"types":{
        "SyncTableEntry":{"!":16,"SyncBlock":[0,"pointer"],"Object":[8,"pointer"]},
        "SyncBlock":{"LockState":[0,"uint32"],"Recursion":[4,"uint32"],
            "HoldingThread":[8,"pointer"],"HoldingOSThreadId":[16,"nuint"],
            "SyncIndex":[28,"uint32"],"HashCode":[80,"uint32"]}},
        "globals":{"Architecture":"x64"}}"#;

    const DAC_TABLE: u64 = 0x1000;
    const VARIABLE: u64 = 0x2000;
    const TABLE: u64 = 0x3000;
    const BLOCKS: u64 = 0x4000;

    /// A `g_dacTable` of 4 slots whose slot 2 leads to a sync table with a free entry 1, a
    /// held block at entry 2 (recursion 3, two waiters) and the end at entry 3; `index_of_2`
    /// is the index block 2 names.
    fn context(index_of_2: u32) -> ContractContext {
        let physical = crate::descriptor::json::parse("test", DESCRIPTOR.as_bytes()).unwrap();
        let mut d = DataDescriptor::new(DataLayout::LE64);
        d.merge("test", &physical, &[]).unwrap();
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(DAC_TABLE, 32)
            .pointer(0, 0x10)
            .pointer(8, 0x9999_0000)
            .pointer(16, VARIABLE)
            .pointer(24, 0);
        b.region(0x10, 8).pointer(0, 0);
        b.region(VARIABLE, 8).pointer(0, TABLE);
        b.region(TABLE, 64)
            .pointer(16, 0)
            .pointer(24, 0x11) // free: a link with its low bit set
            .pointer(32, BLOCKS)
            .pointer(40, 0x7f00_0000_1000);
        b.region(BLOCKS, 96)
            .u32(0, 1 | (2 << 6))
            .u32(4, 3)
            .pointer(8, 0x5500_0000_0000)
            .u64(16, 4242)
            .u32(28, 0x8000_0000 | index_of_2)
            .u32(80, 77);
        let mut c = ContractContext::new(&b.into_target(), &d);
        c.dac_table = Some((DAC_TABLE, 32));
        c
    }

    #[test]
    fn the_table_is_found_by_its_blocks_and_a_held_monitor_reads_back() {
        let c = context(2);
        let s = registry::create::<SyncBlocks>(&c).expect("found");
        assert_eq!(s.source(), TableSource::DacTableSlot(2));
        let table = s.used_part().expect("entries");
        assert_eq!((table.total, table.free), (2, 1));
        assert_eq!(
            table.entries,
            [SyncTableEntry {
                index: 2,
                sync_block: BLOCKS,
                object: 0x7f00_0000_1000
            }]
        );
        let sb = s.of_object(2, 0x7f00_0000_1000).expect("read");
        assert_eq!(sb.hash_code, 77);
        assert_eq!(
            sb.monitor,
            Monitor {
                locked: true,
                recursion: 3,
                holder: Some(Holder::Thread(0x5500_0000_0000)),
                holder_os_id: Some(4242),
                waiters: 2,
            }
        );
    }

    #[test]
    fn blocks_that_do_not_name_their_entries_are_refused() {
        // No slot passes: the only table's block names entry 5.
        let c = context(5);
        match registry::create::<SyncBlocks>(&c) {
            Err(ContractError::Corrupt { what, detail, .. }) => {
                assert_eq!(what, "g_dacTable");
                assert!(detail.contains("4 slots"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // Found (through the global), the block still does not name its entry, and an
        // entry of another object is refused.
        let mut c = context(5);
        let json = DESCRIPTOR.replace(
            r#""globals":{"#,
            &format!(r#""globals":{{"SyncTableEntries":"{VARIABLE:#x}","#),
        );
        let physical = crate::descriptor::json::parse("test", json.as_bytes()).unwrap();
        let mut d = DataDescriptor::new(DataLayout::LE64);
        d.merge("test", &physical, &[]).unwrap();
        c.descriptor = d;
        let s = registry::create::<SyncBlocks>(&c).expect("found by the global");
        assert_eq!(s.source(), TableSource::Descriptor);
        assert!(matches!(
            s.of_object(2, 0x7f00_0000_1000),
            Err(ContractError::Corrupt {
                what: "sync block",
                ..
            })
        ));
        assert!(matches!(
            s.of_object(2, 0x7f00_0000_2000),
            Err(ContractError::Corrupt {
                what: "sync table entry",
                ..
            })
        ));
        assert!(s.of_object(3, 0).is_err(), "past the used part");
    }

    #[test]
    fn the_used_part_ends_at_the_caches_count_not_at_a_zero_entry() {
        // The runtime grows the table into memory it does not clear: past entry 2 lie
        // entries that are not zero and lead nowhere. The sync block cache (the g_dacTable
        // slot after g_pSyncTable's) says 3 is the next never-used index.
        const CACHE_VARIABLE: u64 = 0x5000;
        const CACHE: u64 = 0x6000;
        let json = DESCRIPTOR.replace(
            r#""SyncBlock":{"LockState""#,
            r#""SyncBlockCache":{"FreeSyncTableIndex":[108,"uint32"]},"SyncBlock":{"LockState""#,
        );
        let physical = crate::descriptor::json::parse("test", json.as_bytes()).unwrap();
        let mut d = DataDescriptor::new(DataLayout::LE64);
        d.merge("test", &physical, &[]).unwrap();
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(DAC_TABLE, 32)
            .pointer(0, 0x10)
            .pointer(8, 0x9999_0000)
            .pointer(16, VARIABLE)
            .pointer(24, CACHE_VARIABLE);
        b.region(0x10, 8).pointer(0, 0);
        b.region(VARIABLE, 8).pointer(0, TABLE);
        b.region(CACHE_VARIABLE, 8).pointer(0, CACHE);
        b.region(CACHE, 128).u32(108, 3);
        b.region(TABLE, 96)
            .pointer(24, 0x11)
            .pointer(32, BLOCKS)
            .pointer(40, 0x7f00_0000_1000)
            .pointer(48, 0xdead_beef_0000) // garbage past the used part
            .pointer(56, 0x4141_4141_4141)
            .pointer(64, 0x1234)
            .pointer(72, 0x5678);
        b.region(BLOCKS, 96).u32(28, 2);
        let mut c = ContractContext::new(&b.into_target(), &d);
        c.dac_table = Some((DAC_TABLE, 32));
        let s = registry::create::<SyncBlocks>(&c).expect("found");
        assert_eq!(s.used_entries().expect("count"), Some(2));
        let table = s.used_part().expect("entries");
        assert_eq!((table.entries.len(), table.total, table.free), (1, 2, 1));
        assert!(table.counted_by_runtime);
        assert_eq!(s.entry(3).expect("read"), None);
        // Without the cache's layout the table is read to a {0, 0} entry, and the garbage
        // counts as used.
        let c = context(2);
        let s = registry::create::<SyncBlocks>(&c).expect("found");
        assert_eq!(s.used_entries().expect("no count"), None);
    }

    #[test]
    fn a_runtime_without_the_layout_has_no_sync_block_contract() {
        let physical =
            crate::descriptor::json::parse("test", br#"{"globals":{"Architecture":"x64"}}"#)
                .unwrap();
        let mut d = DataDescriptor::new(DataLayout::LE64);
        d.merge("test", &physical, &[]).unwrap();
        let c = ContractContext::new(&MemoryBuilder::new(DataLayout::LE64).into_target(), &d);
        assert!(matches!(
            registry::create::<SyncBlocks>(&c),
            Err(ContractError::Missing { .. })
        ));
    }
}
