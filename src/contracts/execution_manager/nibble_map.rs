//! The nibble map of a JIT code heap: from an address inside the heap to the start of the
//! method that contains it (spec: `contracts/ExecutionManager-lookup.md`, digest §7.7–7.9).
//!
//! The map is an array of `u32` *map units* at `HeaderMap`, read in the target's byte order,
//! describing the code addresses from `MapBase` on. Each unit covers 256 bytes of code as
//! eight 32-byte *buckets*, one nibble each; nibble index 0 is the **most significant**
//! nibble. A nibble value `v` in 1..=8 says that a method starts at byte `(v - 1) * 4` of its
//! bucket; 0 says that no method starts there.
//!
//! * [`NibbleMapVersion::Linear`] (ExecutionManager 1, every runtime up to .NET 9) records
//!   only the start nibbles, so a lookup scans backwards until it meets one: the scan is
//!   bounded here by the heap start and by [`NibbleMap::scan_limit`].
//! * [`NibbleMapVersion::Constant`] (ExecutionManager 2, .NET 10 on) also overwrites every
//!   unit that a method covers entirely with an encoded pointer to the method's start
//!   ([`encode_pointer`]), so a lookup reads at most two units. Its price: an address in the
//!   gap after a method may still be attributed to that method, for less than 512 bytes
//!   (see [`NibbleMap::find_method_start`]).
//!
//! Results are checked against the heap: a start below `StartAddress` or above the address
//! looked up, or a nibble or pointer marker that no runtime writes, is a
//! [`ContractError::Corrupt`] rather than a wrong answer.

use crate::contracts::ContractError;
use crate::descriptor::DataDescriptor;
use crate::limits::Limit;
use crate::memory::{decode_unsigned, ReadError, Target};

/// Bytes of code address space one nibble covers.
pub const BYTES_PER_BUCKET: u64 = 32;
/// Nibbles in one `u32` map unit.
pub const NIBBLES_PER_UNIT: u64 = 8;
/// Bytes of code address space one map unit covers.
pub const BYTES_PER_UNIT: u64 = BYTES_PER_BUCKET * NIBBLES_PER_UNIT;
/// Size of a map unit in the map.
pub const UNIT_SIZE: u64 = 4;
/// Default bound of a linear (v1) backward scan, in map units: 256 MiB of code without a
/// method start, far more than any real code heap leaves empty.
pub const DEFAULT_SCAN_LIMIT: u64 = 1 << 20;

/// Which nibble map scheme the runtime writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NibbleMapVersion {
    /// Start nibbles only; lookups scan backwards (ExecutionManager 1, .NET 9 and earlier).
    Linear,
    /// Start nibbles plus encoded pointers in fully covered units; lookups read at most two
    /// units (ExecutionManager 2, .NET 10 and later).
    Constant,
}

impl NibbleMapVersion {
    /// The scheme an ExecutionManager contract version uses, if it is one cdac knows.
    pub fn for_contract_version(version: u64) -> Option<NibbleMapVersion> {
        match version {
            1 => Some(NibbleMapVersion::Linear),
            2 => Some(NibbleMapVersion::Constant),
            _ => None,
        }
    }
}

/// The bucket index (`rel / 32`) of a map-relative offset and the nibble value a method
/// starting at that offset would have (`1 + (rel % 32) / 4`, in 1..=8).
pub fn decompose(rel: u64) -> (u64, u32) {
    let map_idx = rel / BYTES_PER_BUCKET;
    let probe = ((rel % BYTES_PER_BUCKET) / UNIT_SIZE) as u32 + 1;
    (map_idx, probe)
}

/// How far to shift a map unit right to bring the nibble of bucket `map_idx` to bits 0–3.
pub fn nibble_shift(map_idx: u64) -> u32 {
    28 - 4 * (map_idx % NIBBLES_PER_UNIT) as u32
}

/// The map-relative offset that bucket `map_idx` with start nibble `nibble` (1..=8) stands
/// for, or `None` when it does not fit in 64 bits or the nibble is not a start nibble.
pub fn start_offset(map_idx: u64, nibble: u32) -> Option<u64> {
    if !(1..=8).contains(&nibble) {
        return None;
    }
    map_idx
        .checked_mul(BYTES_PER_BUCKET)?
        .checked_add(u64::from(nibble - 1) * UNIT_SIZE)
}

/// The v2 map unit that points at a method starting at map-relative offset `rel` (4-byte
/// aligned): bits 4–31 of `rel`, and in bits 0–3 the marker `9 + (rel & 0xF) / 4`.
pub fn encode_pointer(rel: u32) -> u32 {
    (rel & !0xF) + ((rel & 0xF) >> 2) + 9
}

/// True when a v2 map unit holds a pointer rather than nibbles (its low nibble is above 8).
pub fn is_pointer(unit: u32) -> bool {
    unit & 0xF > 8
}

/// The map-relative method start a v2 pointer unit encodes, or `None` when its marker is not
/// one of the values 9..=12 the runtime writes.
pub fn decode_pointer(unit: u32) -> Option<u32> {
    let marker = unit & 0xF;
    (9..=12)
        .contains(&marker)
        .then(|| (unit & !0xF) + (marker - 9) * 4)
}

/// One code heap's nibble map, with the heap bounds lookups are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NibbleMap {
    /// The scheme the map is written in.
    pub version: NibbleMapVersion,
    /// Code address that map offset 0 stands for (`CodeHeapListNode.MapBase`).
    pub map_base: u64,
    /// Address of the first map unit (`CodeHeapListNode.HeaderMap`).
    pub header_map: u64,
    /// First code address of the heap (`CodeHeapListNode.StartAddress`).
    pub heap_start: u64,
    /// Last code address of the heap, inclusive (`CodeHeapListNode.EndAddress`).
    pub heap_end: u64,
    /// Most map units a linear backward scan may read before giving up with
    /// [`ContractError::LimitExceeded`].
    pub scan_limit: u64,
}

impl NibbleMap {
    /// A map with the default scan limit.
    pub fn new(
        version: NibbleMapVersion,
        map_base: u64,
        header_map: u64,
        heap_start: u64,
        heap_end: u64,
    ) -> NibbleMap {
        NibbleMap {
            version,
            map_base,
            header_map,
            heap_start,
            heap_end,
            scan_limit: DEFAULT_SCAN_LIMIT,
        }
    }

    /// The map of the `CodeHeapListNode` at `node` (fields `StartAddress`, `EndAddress`,
    /// `MapBase`, `HeaderMap`), scanning at most the target's map-scan limit.
    pub fn from_heap_list_node(
        target: &Target,
        descriptor: &DataDescriptor,
        version: NibbleMapVersion,
        node: u64,
    ) -> Result<NibbleMap, ContractError> {
        let ty = descriptor.ty("CodeHeapListNode")?;
        let field = |name: &str| -> Result<u64, ContractError> {
            let offset = ty.offset(name)?;
            let addr = node.checked_add(offset).ok_or(ReadError::AddressOverflow {
                addr: node,
                len: usize::try_from(offset).unwrap_or(usize::MAX),
            })?;
            Ok(target.read_pointer(addr)?)
        };
        Ok(NibbleMap::new(
            version,
            field("MapBase")?,
            field("HeaderMap")?,
            field("StartAddress")?,
            field("EndAddress")?,
        )
        .with_scan_limit(target.limits().max_map_scan))
    }

    /// The same map with another linear-scan limit (in map units).
    pub fn with_scan_limit(self, units: u64) -> NibbleMap {
        NibbleMap {
            scan_limit: units,
            ..self
        }
    }

    /// The start of the method containing `addr`, `None` when no method does, or when
    /// `addr` lies outside `[heap_start, heap_end]`.
    ///
    /// Inside a method the answer is exact. An address in a gap after a method `M`:
    /// * [`NibbleMapVersion::Linear`]: always `M` (the map does not record lengths);
    /// * [`NibbleMapVersion::Constant`]: `M` if the address lies in the map unit (256-byte
    ///   window from `map_base`) of `M`'s start or the unit after it, or if `M` covers the
    ///   whole unit before the address's unit; else `None`. So `M` is returned at most up to
    ///   the end of the later of the unit after its start's unit and the unit holding its
    ///   first byte after the end: less than 512 bytes past the end.
    pub fn find_method_start(
        &self,
        target: &Target,
        addr: u64,
    ) -> Result<Option<u64>, ContractError> {
        if addr < self.heap_start || addr > self.heap_end {
            return Ok(None);
        }
        if self.heap_start < self.map_base {
            return Err(ContractError::Corrupt {
                what: "nibble map",
                addr: self.header_map,
                detail: format!(
                    "heap start {:#x} lies below the map base {:#x}",
                    self.heap_start, self.map_base
                ),
            });
        }
        let lookup = Lookup {
            target,
            map: self,
            addr,
            lowest_unit: (self.heap_start - self.map_base) / BYTES_PER_UNIT,
        };
        match self.version {
            NibbleMapVersion::Linear => lookup.linear(),
            NibbleMapVersion::Constant => lookup.constant(),
        }
    }
}

/// The start of the method containing `addr` in the nibble map at `header_map` (see
/// [`NibbleMap::find_method_start`]); `heap_end` is inclusive.
pub fn find_method_start(
    target: &Target,
    version: NibbleMapVersion,
    map_base: u64,
    header_map: u64,
    heap_start: u64,
    heap_end: u64,
    addr: u64,
) -> Result<Option<u64>, ContractError> {
    NibbleMap::new(version, map_base, header_map, heap_start, heap_end)
        .find_method_start(target, addr)
}

/// One lookup: the map, the address looked up, and the lowest unit it may read (the unit of
/// the heap start).
struct Lookup<'a> {
    target: &'a Target,
    map: &'a NibbleMap,
    addr: u64,
    lowest_unit: u64,
}

impl Lookup<'_> {
    /// Lookup in a v1 map.
    fn linear(&self) -> Result<Option<u64>, ContractError> {
        let (map_idx, probe) = decompose(self.addr - self.map.map_base);
        let unit_idx = map_idx / NIBBLES_PER_UNIT;
        let value = self.read_unit(unit_idx)?;
        if let Some(start) = self.in_unit(unit_idx, value, map_idx, probe)? {
            return Ok(Some(start));
        }
        if unit_idx == self.lowest_unit {
            return Ok(None);
        }
        match self.scan_back(unit_idx - 1)? {
            Some((idx, value)) => self.last_start(idx, value, NIBBLES_PER_UNIT - 1),
            None => Ok(None),
        }
    }

    /// Lookup in a v2 map.
    fn constant(&self) -> Result<Option<u64>, ContractError> {
        let (map_idx, probe) = decompose(self.addr - self.map.map_base);
        let unit_idx = map_idx / NIBBLES_PER_UNIT;
        let value = self.read_unit(unit_idx)?;
        if is_pointer(value) {
            return self.pointer(unit_idx, value).map(Some);
        }
        if let Some(start) = self.in_unit(unit_idx, value, map_idx, probe)? {
            return Ok(Some(start));
        }
        if unit_idx == self.lowest_unit {
            return Ok(None);
        }
        // A method covering the address but starting before this unit left either its start
        // nibble or a pointer in the previous unit: nothing there means no method.
        let prev = unit_idx - 1;
        let value = self.read_unit(prev)?;
        if value == 0 {
            Ok(None)
        } else if is_pointer(value) {
            self.pointer(prev, value).map(Some)
        } else {
            self.last_start(prev, value, NIBBLES_PER_UNIT - 1)
        }
    }

    /// The start found in the unit holding the address: the bucket's own nibble if the method
    /// starts at or before the address, else the last start nibble of an earlier bucket.
    fn in_unit(
        &self,
        unit_idx: u64,
        value: u32,
        map_idx: u64,
        probe: u32,
    ) -> Result<Option<u64>, ContractError> {
        let pos = map_idx % NIBBLES_PER_UNIT;
        let nibble = (value >> nibble_shift(map_idx)) & 0xF;
        if nibble > 8 {
            return Err(self.bad_nibble(unit_idx, value, pos, nibble));
        }
        if nibble != 0 && nibble <= probe {
            return self.start(unit_idx, value, map_idx, nibble).map(Some);
        }
        match pos {
            0 => Ok(None),
            _ => self.last_start(unit_idx, value, pos - 1),
        }
    }

    /// The start of the last non-zero nibble at positions `max_pos` down to 0 of a unit.
    fn last_start(
        &self,
        unit_idx: u64,
        value: u32,
        max_pos: u64,
    ) -> Result<Option<u64>, ContractError> {
        for pos in (0..=max_pos).rev() {
            let map_idx = unit_idx * NIBBLES_PER_UNIT + pos;
            let nibble = (value >> nibble_shift(map_idx)) & 0xF;
            match nibble {
                0 => continue,
                1..=8 => return self.start(unit_idx, value, map_idx, nibble).map(Some),
                _ => return Err(self.bad_nibble(unit_idx, value, pos, nibble)),
            }
        }
        Ok(None)
    }

    /// The first non-zero unit at or below `from` and not below the heap start's unit,
    /// reading aligned blocks of up to 256 bytes of map at a time.
    fn scan_back(&self, from: u64) -> Result<Option<(u64, u32)>, ContractError> {
        let endian = self.target.layout().endian;
        let mut unit = from;
        let mut examined = 0u64;
        loop {
            if examined >= self.map.scan_limit {
                return Err(ContractError::LimitExceeded {
                    what: "backward nibble-map scan for code address",
                    addr: self.addr,
                    limit: Limit::MapScan,
                    cap: self.map.scan_limit,
                    unit: "map units",
                });
            }
            // Stay inside one 256-byte block of the map: never across a page boundary.
            let unit_addr = self.unit_addr(unit)?;
            let room = (unit_addr % BYTES_PER_UNIT) / UNIT_SIZE;
            let count = room
                .min(unit - self.lowest_unit)
                .min(self.map.scan_limit - examined - 1)
                + 1;
            let first = unit - (count - 1);
            let bytes = self
                .target
                .read_bytes(self.unit_addr(first)?, (count * UNIT_SIZE) as usize)?;
            for (i, chunk) in bytes.chunks_exact(UNIT_SIZE as usize).enumerate().rev() {
                let value = decode_unsigned(chunk, endian) as u32;
                if value != 0 {
                    return Ok(Some((first + i as u64, value)));
                }
            }
            examined += count;
            if first == self.lowest_unit {
                return Ok(None);
            }
            unit = first - 1;
        }
    }

    /// The method start a start nibble stands for, checked against the heap.
    fn start(
        &self,
        unit_idx: u64,
        value: u32,
        map_idx: u64,
        nibble: u32,
    ) -> Result<u64, ContractError> {
        let start =
            start_offset(map_idx, nibble).and_then(|rel| self.map.map_base.checked_add(rel));
        self.checked(unit_idx, value, start, "start nibble")
    }

    /// The method start a v2 pointer unit encodes, checked against the heap.
    fn pointer(&self, unit_idx: u64, value: u32) -> Result<u64, ContractError> {
        let Some(rel) = decode_pointer(value) else {
            return Err(ContractError::Corrupt {
                what: "nibble map unit",
                addr: self.unit_addr_or_base(unit_idx),
                detail: format!(
                    "{value:#010x} has pointer marker {} (the runtime writes 9..=12)",
                    value & 0xF
                ),
            });
        };
        let start = self.map.map_base.checked_add(u64::from(rel));
        self.checked(unit_idx, value, start, "pointer")
    }

    /// `start` if it lies in `[heap_start, addr]`, else a corruption error about the unit.
    fn checked(
        &self,
        unit_idx: u64,
        value: u32,
        start: Option<u64>,
        kind: &str,
    ) -> Result<u64, ContractError> {
        match start {
            Some(s) if s >= self.map.heap_start && s <= self.addr => Ok(s),
            _ => Err(ContractError::Corrupt {
                what: "nibble map unit",
                addr: self.unit_addr_or_base(unit_idx),
                detail: format!(
                    "{kind} in {value:#010x} gives method start {} for code address {:#x}, outside [heap start {:#x}, {:#x}]",
                    start.map_or_else(|| "beyond the address space".to_string(), |s| format!("{s:#x}")),
                    self.addr,
                    self.map.heap_start,
                    self.addr
                ),
            }),
        }
    }

    fn bad_nibble(&self, unit_idx: u64, value: u32, pos: u64, nibble: u32) -> ContractError {
        ContractError::Corrupt {
            what: "nibble map unit",
            addr: self.unit_addr_or_base(unit_idx),
            detail: format!(
                "{value:#010x} has nibble {nibble} at index {pos} (start nibbles are 1..=8)"
            ),
        }
    }

    fn unit_addr(&self, unit_idx: u64) -> Result<u64, ContractError> {
        unit_idx
            .checked_mul(UNIT_SIZE)
            .and_then(|off| self.map.header_map.checked_add(off))
            .ok_or(ContractError::Read(ReadError::AddressOverflow {
                addr: self.map.header_map,
                len: usize::MAX,
            }))
    }

    fn unit_addr_or_base(&self, unit_idx: u64) -> u64 {
        self.unit_addr(unit_idx).unwrap_or(self.map.header_map)
    }

    fn read_unit(&self, unit_idx: u64) -> Result<u32, ContractError> {
        Ok(self.target.read_u32(self.unit_addr(unit_idx)?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_encoding_examples() {
        // Digest §7.9: 0x130 → 0x139 (the upstream doc's 0x137 is a slip), and neighbours.
        assert_eq!(encode_pointer(0x130), 0x139);
        assert_eq!(encode_pointer(0x134), 0x13A);
        assert_eq!(encode_pointer(0x138), 0x13B);
        assert_eq!(encode_pointer(0x13C), 0x13C);
        for rel in (0..0x10_0000u32).step_by(4) {
            let unit = encode_pointer(rel);
            assert!(is_pointer(unit), "{rel:#x}");
            assert_eq!(decode_pointer(unit), Some(rel), "{rel:#x}");
        }
        for marker in [0u32, 1, 8, 13, 14, 15] {
            assert_eq!(decode_pointer(0x1230 | marker), None);
        }
    }

    #[test]
    fn nibble_positions() {
        // Nibble index 0 is the most significant nibble.
        for map_idx in 0..256u64 {
            assert_eq!(nibble_shift(map_idx), 28 - 4 * (map_idx % 8) as u32);
        }
        assert_eq!(decompose(0x130), (9, 5));
        assert_eq!(decompose(0x132), (9, 5));
        assert_eq!(decompose(0x12E), (9, 4));
        assert_eq!(start_offset(9, 5), Some(0x130));
        assert_eq!(start_offset(9, 0), None);
        assert_eq!(start_offset(9, 9), None);
        assert_eq!(start_offset(u64::MAX / 16, 8), None);
    }
}
