//! The two table shapes the code-version state is kept in: the runtime's open-addressing
//! `SHash` of pointers (.NET 8's versioning states, every runtime's call-counting records)
//! and a module's RID-indexed `ModuleLookupMap` (.NET 9+'s IL versioning states).

use crate::contracts::fields::Fields;
use crate::contracts::ContractError;
use crate::limits::Limit;

/// Pointers read from a table at once.
const CHUNK: usize = 4096;

/// The non-null elements of the `SHash` at `hash` (its whole table, slot by slot: the
/// elements are pointers and the readers match on what they point at, so the hash
/// function does not matter). Bounded by the list-length limit; a count above the table's
/// size is corrupt.
pub(crate) fn shash_elements(
    f: &Fields<'_>,
    hash: u64,
    what: &'static str,
) -> Result<Vec<u64>, ContractError> {
    let table = f.ptr(hash, "SHash", "Table")?;
    let size = u64::from(f.u32(hash, "SHash", "TableSize")?);
    let count = u64::from(f.u32(hash, "SHash", "Count")?);
    if table == 0 || size == 0 {
        return Ok(Vec::new());
    }
    let cap = f.t.limits().max_list_length;
    if size > cap {
        return Err(ContractError::LimitExceeded {
            what,
            addr: hash,
            limit: Limit::ListLength,
            cap,
            unit: "slots",
        });
    }
    if count > size {
        return Err(ContractError::Corrupt {
            what,
            addr: hash,
            detail: format!("{count} elements in a table of {size} slots"),
        });
    }
    let step = u64::from(f.t.pointer_size());
    let mut out = Vec::with_capacity(count as usize);
    let mut done = 0u64;
    while done < size {
        let n = (size - done).min(CHUNK as u64);
        let slots =
            f.t.read_pointers(table.wrapping_add(done * step), n as usize)?;
        out.extend(slots.into_iter().filter(|&p| p != 0));
        done += n;
    }
    Ok(out)
}

/// The entry for `rid` of the `ModuleLookupMap` at `map` (0 when the map has none): the
/// first segment holds RIDs below its `Count`, each `Next` segment the following ones;
/// the value's `SupportedFlagsMask` bits are flags, not address. Segments walked are
/// bounded by the list-length limit.
pub(crate) fn lookup_map_entry(f: &Fields<'_>, map: u64, rid: u32) -> Result<u64, ContractError> {
    let cap = f.t.limits().max_list_length;
    let mut segment = map;
    let mut index = u64::from(rid);
    let mut walked = 0u64;
    while segment != 0 {
        walked += 1;
        if walked > cap {
            return Err(ContractError::LimitExceeded {
                what: "module lookup map",
                addr: map,
                limit: Limit::ListLength,
                cap,
                unit: "segments (or a cycle)",
            });
        }
        let count = u64::from(f.u32(segment, "ModuleLookupMap", "Count")?);
        if index < count {
            let data = f.ptr(segment, "ModuleLookupMap", "TableData")?;
            if data == 0 {
                return Ok(0);
            }
            let mask = f.ptr(segment, "ModuleLookupMap", "SupportedFlagsMask")?;
            let slot = data.wrapping_add(index * u64::from(f.t.pointer_size()));
            return Ok(f.t.read_pointer(slot)? & !mask);
        }
        index -= count;
        segment = f.ptr(segment, "ModuleLookupMap", "Next")?;
    }
    Ok(0)
}
