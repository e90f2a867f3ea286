//! GC handles: the handle table map → buckets → handle tables (one per heap slot) → table
//! segments of 64 KiB, each with 120 blocks of 64 handles and a type per block.
//!
//! A segment's header is packed; where its fields are depends on the number of handle
//! types the build has (`HandleMaxInternalTypes`: 12 on .NET 8 and 9, 13 on .NET 10), which
//! the descriptors give and a back-pointer confirms (each segment names its table).

use std::collections::HashSet;

use super::super::ContractError;
use crate::limits::Limit;
use crate::memory::Target;

/// Blocks of a table segment.
const BLOCKS_PER_SEGMENT: u64 = 120;
/// Handles of a block.
const HANDLES_PER_BLOCK: u64 = 64;
/// Offset of the block types (one byte per block).
const BLOCK_TYPES: u64 = 0x618;
/// Offset of the blocks' user data (one byte per block: the block holding secondaries).
const BLOCK_USER_DATA: u64 = 0x690;
/// Offset of the per-type tails, after which come the hints, the free counts, the next
/// segment and the owning table.
const TYPE_TAILS: u64 = 0x780;
/// Offset of the handle values.
const VALUES: u64 = 0x1000;
/// A block type or user data byte that names no block.
const BLOCK_INVALID: u8 = 0xFF;
/// Most handle types any build has.
const MAX_TYPES: u64 = 32;
/// Most handle tables one bucket holds (one per heap or processor).
const MAX_TABLES_PER_BUCKET: u64 = 1024;

/// What a handle is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HandleKind {
    /// Weak, cleared before finalization.
    WeakShort,
    /// Weak, tracking resurrection.
    WeakLong,
    /// Strong: keeps its object alive.
    Strong,
    /// Strong and pinned.
    Pinned,
    /// Variable strength (obsolete).
    Variable,
    /// Reference counted (COM).
    RefCounted,
    /// Dependent: keeps its secondary alive while its primary is.
    Dependent,
    /// Pinned for overlapped I/O (before .NET 8).
    AsyncPinned,
    /// Sized reference (before .NET 9).
    SizedRef,
    /// Weak to a native COM object.
    WeakNativeCom,
    /// Weak with an interior pointer (secondary).
    WeakInteriorPointer,
    /// Cross-reference (Android).
    CrossReference,
    /// A type this reader does not know.
    Other(u8),
}

impl HandleKind {
    fn of(t: u8) -> HandleKind {
        match t {
            0 => HandleKind::WeakShort,
            1 => HandleKind::WeakLong,
            2 => HandleKind::Strong,
            3 => HandleKind::Pinned,
            4 => HandleKind::Variable,
            5 => HandleKind::RefCounted,
            6 => HandleKind::Dependent,
            7 => HandleKind::AsyncPinned,
            8 => HandleKind::SizedRef,
            9 => HandleKind::WeakNativeCom,
            10 => HandleKind::WeakInteriorPointer,
            11 => HandleKind::CrossReference,
            other => HandleKind::Other(other),
        }
    }

    /// The runtime's number of the type.
    pub fn number(self) -> u8 {
        match self {
            HandleKind::WeakShort => 0,
            HandleKind::WeakLong => 1,
            HandleKind::Strong => 2,
            HandleKind::Pinned => 3,
            HandleKind::Variable => 4,
            HandleKind::RefCounted => 5,
            HandleKind::Dependent => 6,
            HandleKind::AsyncPinned => 7,
            HandleKind::SizedRef => 8,
            HandleKind::WeakNativeCom => 9,
            HandleKind::WeakInteriorPointer => 10,
            HandleKind::CrossReference => 11,
            HandleKind::Other(t) => t,
        }
    }

    /// The name printed (`strong`, `weak_short`, ...).
    pub fn name(self) -> String {
        let name = match self {
            HandleKind::WeakShort => "weak_short",
            HandleKind::WeakLong => "weak_long",
            HandleKind::Strong => "strong",
            HandleKind::Pinned => "pinned",
            HandleKind::Variable => "variable",
            HandleKind::RefCounted => "ref_counted",
            HandleKind::Dependent => "dependent",
            HandleKind::AsyncPinned => "async_pinned",
            HandleKind::SizedRef => "sized_ref",
            HandleKind::WeakNativeCom => "weak_native_com",
            HandleKind::WeakInteriorPointer => "weak_interior_pointer",
            HandleKind::CrossReference => "cross_reference",
            HandleKind::Other(t) => return format!("type_{t}"),
        };
        name.to_string()
    }

    /// Whether the handle keeps its object alive (a root for `gcroot`).
    pub fn is_strong(self) -> bool {
        matches!(
            self,
            HandleKind::Strong
                | HandleKind::Pinned
                | HandleKind::AsyncPinned
                | HandleKind::SizedRef
        )
    }

    /// Whether the handle has a secondary object (its block's data block holds it).
    pub fn has_secondary(self) -> bool {
        matches!(
            self,
            HandleKind::Dependent | HandleKind::WeakInteriorPointer
        )
    }
}

/// One handle in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    /// The handle (the address of its slot: what `GCHandle.ToIntPtr` gives).
    pub address: u64,
    /// The object it refers to.
    pub object: u64,
    /// What it is for.
    pub kind: HandleKind,
    /// A dependent handle's secondary object, or a weak interior pointer's interior
    /// address (0 when none).
    pub secondary: u64,
}

/// Where a handle table's fields are, from the number of handle types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandleLayout {
    /// `HandleMaxInternalTypes`: the public types and one internal type for data blocks.
    pub types: u64,
}

impl HandleLayout {
    /// Offset of `HandleTable.pSegmentList`: after one 32-bit flag word per type.
    pub fn segment_list(&self) -> u64 {
        (self.types * 4 + 7) & !7
    }

    /// Offset of `TableSegment.pNextSegment`: after the tails and hints (a byte per type)
    /// and the free counts (a 32-bit word per type); packed, so not aligned.
    pub fn next_segment(&self) -> u64 {
        TYPE_TAILS + self.types * 6
    }

    /// Offset of `TableSegment.pHandleTable`, the segment's table.
    pub fn owning_table(&self) -> u64 {
        self.next_segment() + 8
    }

    /// The block type of data blocks (secondaries), not of handles.
    pub fn data_block_type(&self) -> u64 {
        self.types - 1
    }
}

/// Whether `table`'s first segment names `table` as its owner under `layout`.
fn owns_first_segment(target: &Target, table: u64, layout: HandleLayout) -> bool {
    let Ok(segment) = target.read_pointer(table + layout.segment_list()) else {
        return false;
    };
    segment != 0
        && target
            .read_pointer(segment + layout.owning_table())
            .is_ok_and(|owner| owner == table)
}

/// Every handle table the map at `map` lists: each bucket's tables, as many as are set
/// and own their first segment.
pub fn handle_tables(
    target: &Target,
    map: u64,
    layout: HandleLayout,
) -> Result<Vec<u64>, ContractError> {
    let max = target.limits().max_list_length;
    let mut tables = Vec::new();
    let mut at = map;
    let mut seen = HashSet::new();
    let mut previous_max = 0u64;
    while at != 0 {
        if !seen.insert(at) || seen.len() as u64 > max {
            return Err(ContractError::Corrupt {
                what: "handle table map list",
                addr: at,
                detail: "it loops".into(),
            });
        }
        let buckets = target.read_pointer(at)?;
        let next = target.read_pointer(at + 8)?;
        let max_index = u64::from(target.read_u32(at + 16)?);
        let count = max_index.saturating_sub(previous_max);
        if count > MAX_TABLES_PER_BUCKET {
            return Err(ContractError::LimitExceeded {
                what: "handle table buckets",
                addr: at,
                limit: Limit::Fixed,
                cap: MAX_TABLES_PER_BUCKET,
                unit: "buckets",
            });
        }
        previous_max = max_index;
        for bucket in target.read_pointers(buckets, count as usize)? {
            if bucket == 0 {
                continue;
            }
            let array = target.read_pointer(bucket)?;
            for j in 0..MAX_TABLES_PER_BUCKET {
                let table = target.read_pointer(array + j * 8)?;
                // The array has one slot per heap (workstation: one) or, under server
                // GC, per processor; past its end the memory is something else, which
                // the back-pointer test tells apart.
                if table == 0 || !owns_first_segment(target, table, layout) {
                    break;
                }
                tables.push(table);
            }
        }
        at = next;
    }
    Ok(tables)
}

/// The layout of the handle tables: `types` from the descriptor when its back-pointer test
/// passes on the first table, else the first count that passes (with a warning).
pub fn find_layout(
    target: &Target,
    map: u64,
    types: Option<u64>,
) -> Result<HandleLayout, ContractError> {
    let first_table = || -> Result<u64, ContractError> {
        let buckets = target.read_pointer(map)?;
        let bucket = target.read_pointer(buckets)?;
        Ok(target.read_pointer(target.read_pointer(bucket)?)?)
    };
    let table = first_table()?;
    if let Some(n) = types.filter(|&n| (2..=MAX_TYPES).contains(&n)) {
        if owns_first_segment(target, table, HandleLayout { types: n }) {
            return Ok(HandleLayout { types: n });
        }
    }
    for n in 2..=MAX_TYPES {
        if owns_first_segment(target, table, HandleLayout { types: n }) {
            // Only a count the descriptor stated and the table contradicts is news; a
            // descriptor that states none (NativeAOT 10's header) is answered quietly.
            match types {
                Some(stated) => tracing::warn!(
                    "the handle table at {table:#x} fits {n} handle types, not the descriptor's \
                     HandleMaxInternalTypes {stated}; reading it with {n}"
                ),
                None => tracing::debug!("the handle table at {table:#x} fits {n} handle types"),
            }
            return Ok(HandleLayout { types: n });
        }
    }
    Err(ContractError::Corrupt {
        what: "handle table",
        addr: table,
        detail: format!(
            "its first segment does not name it as its table for any count of handle types \
             (the descriptor's HandleMaxInternalTypes: {types:?})"
        ),
    })
}

/// Every handle in use in `table`'s segments.
pub fn handles_of_table(
    target: &Target,
    table: u64,
    layout: HandleLayout,
    out: &mut Vec<Handle>,
) -> Result<(), ContractError> {
    let max = target.limits().max_list_length;
    let mut seen = HashSet::new();
    let mut segment = target.read_pointer(table + layout.segment_list())?;
    while segment != 0 {
        if !seen.insert(segment) || seen.len() as u64 > max {
            return Err(ContractError::Corrupt {
                what: "handle table segment list",
                addr: segment,
                detail: format!("the list of table {table:#x} loops"),
            });
        }
        let types = target.read_bytes(segment + BLOCK_TYPES, BLOCKS_PER_SEGMENT as usize)?;
        let user_data =
            target.read_bytes(segment + BLOCK_USER_DATA, BLOCKS_PER_SEGMENT as usize)?;
        for (block, &t) in types.iter().enumerate() {
            if t == BLOCK_INVALID || u64::from(t) >= layout.data_block_type() {
                continue;
            }
            let kind = HandleKind::of(t);
            let first = segment + VALUES + block as u64 * HANDLES_PER_BLOCK * 8;
            let values = target.read_pointers(first, HANDLES_PER_BLOCK as usize)?;
            let data = user_data[block];
            let secondaries = if kind.has_secondary() && data != BLOCK_INVALID {
                let at = segment + VALUES + u64::from(data) * HANDLES_PER_BLOCK * 8;
                target.read_pointers(at, HANDLES_PER_BLOCK as usize).ok()
            } else {
                None
            };
            for (i, &object) in values.iter().enumerate() {
                if object == 0 {
                    continue;
                }
                out.push(Handle {
                    address: first + i as u64 * 8,
                    object,
                    kind,
                    secondary: secondaries.as_ref().map_or(0, |s| s[i]),
                });
            }
        }
        segment = target.read_pointer(segment + layout.next_segment())?;
    }
    Ok(())
}
