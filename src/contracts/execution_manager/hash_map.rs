//! The runtime's open-addressing hash map (`HashMap` / `PtrHashMap`), as used for a
//! ReadyToRun image's entry point → MethodDesc map.
//!
//! The bucket array's element 0 holds the bucket count; real buckets follow. A bucket
//! holds `HashMapSlotsPerBucket` keys and values; the bits of `Values[0]` outside
//! `HashMapValueMask` flag that a probe chain continues past the bucket. `PtrHashMap`
//! stores values shifted right by one.

use crate::contracts::ContractError;
use crate::descriptor::DataDescriptor;
use crate::limits::Limit;
use crate::memory::Target;

/// Largest bucket count accepted (a damaged count must not make a lookup probe forever).
pub const MAX_BUCKETS: u64 = 1 << 28;

/// Most slots a bucket may declare.
pub const MAX_SLOTS: u64 = 64;

/// Looks `key` up in the `PtrHashMap` embedded at `map`; returns the stored pointer.
pub fn lookup_pointer(
    target: &Target,
    descriptor: &DataDescriptor,
    map: u64,
    key: u64,
) -> Result<Option<u64>, ContractError> {
    // Keys 0 and 1 mark empty and deleted slots; the map stores such keys moved by 100.
    let key = if key <= 1 { key + 100 } else { key };
    Ok(lookup(target, descriptor, map, key)?.map(|v| v << 1))
}

/// Looks `key` up in the `HashMap` embedded at `map`; returns the masked stored value.
pub fn lookup(
    target: &Target,
    descriptor: &DataDescriptor,
    map: u64,
    key: u64,
) -> Result<Option<u64>, ContractError> {
    let buckets =
        target.read_pointer(map.wrapping_add(descriptor.ty("HashMap")?.offset("Buckets")?))?;
    if buckets == 0 {
        return Ok(None);
    }
    let bucket = descriptor.ty("Bucket")?;
    let bucket_size = u64::from(bucket.size()?);
    let (keys_off, values_off) = (bucket.offset("Keys")?, bucket.offset("Values")?);
    let slots = descriptor.global_value("HashMapSlotsPerBucket")?;
    if slots == 0 || slots > MAX_SLOTS {
        return Err(ContractError::Corrupt {
            what: "hash map",
            addr: map,
            detail: format!("{slots} slots per bucket"),
        });
    }
    let mask = descriptor.global_value("HashMapValueMask")?;
    let ps = u64::from(target.pointer_size());
    let size = target.read_pointer(buckets)?;
    if !(2..=MAX_BUCKETS).contains(&size) {
        return Err(ContractError::Corrupt {
            what: "hash map bucket count",
            addr: buckets,
            detail: format!("{size} buckets"),
        });
    }
    // The runtime hashes with 32-bit arithmetic.
    let mut seed = (key >> 2) as u32;
    let incr = 1 + (((key >> 5) as u32).wrapping_add(1) % (size as u32 - 1));
    // Real maps keep chains short (their load is bounded); a damaged map whose every
    // bucket claims a collision must not make each lookup read the whole table.
    let max_probes = target.limits().max_hash_chain;
    for _ in 0..size.min(max_probes) {
        let b = buckets.wrapping_add((1 + u64::from(seed) % size) * bucket_size);
        for j in 0..slots {
            if target.read_pointer(b.wrapping_add(keys_off + j * ps))? == key {
                let value = target.read_pointer(b.wrapping_add(values_off + j * ps))?;
                return Ok(Some(value & mask));
            }
        }
        let first_value = target.read_pointer(b.wrapping_add(values_off))?;
        if first_value & !mask == 0 {
            return Ok(None);
        }
        seed = seed.wrapping_add(incr);
    }
    if size > max_probes {
        return Err(ContractError::LimitExceeded {
            what: "hash map probe chain",
            addr: map,
            limit: Limit::HashChain,
            cap: max_probes,
            unit: "buckets",
        });
    }
    Ok(None)
}
