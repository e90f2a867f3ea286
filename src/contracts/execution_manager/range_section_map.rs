//! The range section map: from a code address to the `RangeSection` that owns it (spec:
//! `contracts/ExecutionManager-lookup.md`, digest §7.6).
//!
//! The runtime's `ExecutionManager::g_codeRangeMap` is a radix tree over the address space.
//! Each level is an array of 256 pointer-sized entries indexed by 8 bits of the address:
//!
//! | target | levels | address bits indexed | leaf chunk |
//! | --- | --- | --- | --- |
//! | 32-bit | 2 | 31..16 (L2 = 31..24, L1 = 23..16) | 64 KiB |
//! | 64-bit | 5 | 56..17 (L5 = 56..49 … L1 = 24..17; bits 63..57 ignored) | 128 KiB |
//!
//! The top-level array lies inline in the `RangeSectionMap` object (field `TopLevelData`,
//! whose *address* is used), which the global `ExecutionManagerCodeRangeMapAddress` points at.
//! Interior entries point to the next level down, leaf entries to the first
//! `RangeSectionFragment` of the chunk; fragments chain through `Next`. Every one of these
//! pointers may carry the runtime's *collectible* flag in bit 0, which is masked off here.
//! A fragment covers `RangeBegin <= addr < RangeEndOpen` and names its `RangeSection`; a
//! section whose `NextForDelete` is set is being deleted and counts as not found.

use rustc_hash::FxHashSet;
use std::collections::BTreeSet;

use crate::contracts::ContractError;
use crate::descriptor::DataDescriptor;
use crate::limits::Limit;
use crate::memory::{ReadError, Target};

/// Entries in one level of the map.
pub const ENTRIES_PER_LEVEL: usize = 256;
/// Most level arrays [`RangeSectionMap::sections`] reads (each 256 pointers): more than a
/// fully populated five-level map of a real address space ever needs.
pub const MAX_LEVEL_ARRAYS: u64 = 16_384;

/// `RangeSection.Flags`: the section belongs to a collectible assembly.
pub const FLAG_COLLECTIBLE: u32 = 0x01;
/// `RangeSection.Flags`: the section is a JIT code heap (`HeapList` is set).
pub const FLAG_CODE_HEAP: u32 = 0x02;
/// `RangeSection.Flags`: the section is a stub range list.
pub const FLAG_RANGE_LIST: u32 = 0x04;

/// Shape of the map for a pointer size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapGeometry {
    /// Number of levels: 2 on 32-bit targets, 5 on 64-bit ones.
    pub levels: u32,
    /// Lowest address bit the map indexes (16 or 17): a leaf entry covers `1 << shift` bytes.
    pub shift: u32,
}

impl MapGeometry {
    /// The geometry for a target pointer size, `None` unless it is 4 or 8.
    pub fn for_pointer_size(pointer_size: u8) -> Option<MapGeometry> {
        match pointer_size {
            4 => Some(MapGeometry {
                levels: 2,
                shift: 16,
            }),
            8 => Some(MapGeometry {
                levels: 5,
                shift: 17,
            }),
            _ => None,
        }
    }

    /// The entry index of `addr` in a level-`level` array (1 = leaf, `levels` = top).
    pub fn index(&self, addr: u64, level: u32) -> usize {
        let shift = self.shift + 8 * (level.saturating_sub(1));
        if shift >= 64 {
            return 0;
        }
        ((addr >> shift) & 0xFF) as usize
    }

    /// Bytes of address space one leaf entry (one chunk) covers.
    pub fn chunk_size(&self) -> u64 {
        1 << self.shift
    }
}

/// A `RangeSection`, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeSection {
    /// Address of the `RangeSection` object.
    pub address: u64,
    /// First address of the section; also the image base R2R RVAs are relative to.
    pub range_begin: u64,
    /// One past the last address of the section.
    pub range_end_open: u64,
    /// Non-zero while the runtime deletes the section.
    pub next_for_delete: u64,
    /// Address of the owning `IJitManager` object.
    pub jit_manager: u64,
    /// `RangeSectionFlags` ([`FLAG_COLLECTIBLE`], [`FLAG_CODE_HEAP`], [`FLAG_RANGE_LIST`]).
    pub flags: u32,
    /// The `CodeHeapListNode` of a JIT code heap section, else 0.
    pub heap_list: u64,
    /// The `Module` of a ReadyToRun image section, else 0.
    pub r2r_module: u64,
}

impl RangeSection {
    /// Reads the `RangeSection` at `address`.
    pub fn read(
        target: &Target,
        descriptor: &DataDescriptor,
        address: u64,
    ) -> Result<RangeSection, ContractError> {
        let ty = descriptor.ty("RangeSection")?;
        let ptr = |name: &str| -> Result<u64, ContractError> {
            Ok(target.read_pointer(field(address, ty.offset(name)?)?)?)
        };
        Ok(RangeSection {
            address,
            range_begin: ptr("RangeBegin")?,
            range_end_open: ptr("RangeEndOpen")?,
            next_for_delete: ptr("NextForDelete")?,
            jit_manager: ptr("JitManager")?,
            flags: target.read_u32(field(address, ty.offset("Flags")?)?)?,
            heap_list: ptr("HeapList")?,
            r2r_module: ptr("R2RModule")?,
        })
    }

    /// True while the runtime deletes the section (lookups treat it as absent).
    pub fn is_being_deleted(&self) -> bool {
        self.next_for_delete != 0
    }

    /// True for a JIT code heap section.
    pub fn is_code_heap(&self) -> bool {
        self.flags & FLAG_CODE_HEAP != 0
    }

    /// True for a stub range list section.
    pub fn is_range_list(&self) -> bool {
        self.flags & FLAG_RANGE_LIST != 0
    }

    /// True for a section of a collectible assembly.
    pub fn is_collectible(&self) -> bool {
        self.flags & FLAG_COLLECTIBLE != 0
    }

    /// True when `addr` lies in `[range_begin, range_end_open)`.
    pub fn contains(&self, addr: u64) -> bool {
        self.range_begin <= addr && addr < self.range_end_open
    }
}

/// A `RangeSectionFragment`, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// Address of the fragment.
    pub address: u64,
    /// First address the fragment covers.
    pub range_begin: u64,
    /// One past the last address it covers.
    pub range_end_open: u64,
    /// Address of the owning `RangeSection`.
    pub range_section: u64,
    /// The next fragment of the chunk's list, collectible bit masked off (0 at the end).
    pub next: u64,
}

impl Fragment {
    /// True when `addr` lies in `[range_begin, range_end_open)`.
    pub fn contains(&self, addr: u64) -> bool {
        self.range_begin <= addr && addr < self.range_end_open
    }
}

/// Field offsets of `RangeSectionFragment`.
#[derive(Debug, Clone, Copy)]
struct FragmentOffsets {
    range_begin: u64,
    range_end_open: u64,
    range_section: u64,
    next: u64,
}

/// The runtime's range section map, ready for lookups.
#[derive(Debug, Clone)]
pub struct RangeSectionMap<'d> {
    descriptor: &'d DataDescriptor,
    top_level: u64,
    geometry: MapGeometry,
    fragment: FragmentOffsets,
}

impl<'d> RangeSectionMap<'d> {
    /// The map the runtime's `ExecutionManagerCodeRangeMapAddress` global points at.
    pub fn new(
        target: &Target,
        descriptor: &'d DataDescriptor,
    ) -> Result<RangeSectionMap<'d>, ContractError> {
        let map = descriptor.global_value("ExecutionManagerCodeRangeMapAddress")?;
        let offset = descriptor.ty("RangeSectionMap")?.offset("TopLevelData")?;
        RangeSectionMap::with_top_level(target, descriptor, field(map, offset)?)
    }

    /// A map whose top-level array is at `top_level`.
    pub fn with_top_level(
        target: &Target,
        descriptor: &'d DataDescriptor,
        top_level: u64,
    ) -> Result<RangeSectionMap<'d>, ContractError> {
        let pointer_size = target.pointer_size();
        let geometry =
            MapGeometry::for_pointer_size(pointer_size).ok_or_else(|| ContractError::Corrupt {
                what: "range section map",
                addr: top_level,
                detail: format!("no map layout for {pointer_size}-byte pointers"),
            })?;
        let ty = descriptor.ty("RangeSectionFragment")?;
        Ok(RangeSectionMap {
            descriptor,
            top_level,
            geometry,
            fragment: FragmentOffsets {
                range_begin: ty.offset("RangeBegin")?,
                range_end_open: ty.offset("RangeEndOpen")?,
                range_section: ty.offset("RangeSection")?,
                next: ty.offset("Next")?,
            },
        })
    }

    /// Address of the top-level array.
    pub fn top_level(&self) -> u64 {
        self.top_level
    }

    /// Shape of the map.
    pub fn geometry(&self) -> MapGeometry {
        self.geometry
    }

    /// The head of the fragment list of the chunk holding `addr` (bit 0 masked), or `None`
    /// when a level on the way, or the leaf entry, is empty.
    pub fn fragment_list(&self, target: &Target, addr: u64) -> Result<Option<u64>, ContractError> {
        let mut array = self.top_level;
        for level in (1..=self.geometry.levels).rev() {
            let index = self.geometry.index(addr, level);
            let slot = field(array, (index * usize::from(target.pointer_size())) as u64)?;
            let entry = target.read_pointer(slot)? & !1;
            if entry == 0 {
                return Ok(None);
            }
            array = entry;
        }
        Ok(Some(array))
    }

    /// The first fragment, in list order, that covers `addr`.
    pub fn find_fragment(
        &self,
        target: &Target,
        addr: u64,
    ) -> Result<Option<Fragment>, ContractError> {
        let Some(head) = self.fragment_list(target, addr)? else {
            return Ok(None);
        };
        let mut found = None;
        self.walk_list(target, head, |fragment| {
            if fragment.contains(addr) {
                found = Some(*fragment);
                false
            } else {
                true
            }
        })?;
        Ok(found)
    }

    /// The range section owning `addr`, or `None` when no fragment covers it or the section
    /// is being deleted.
    pub fn find(&self, target: &Target, addr: u64) -> Result<Option<RangeSection>, ContractError> {
        let Some(fragment) = self.find_fragment(target, addr)? else {
            return Ok(None);
        };
        if fragment.range_section == 0 {
            return Err(ContractError::Corrupt {
                what: "range section fragment",
                addr: fragment.address,
                detail: format!(
                    "covers {:#x}..{:#x} but names no range section",
                    fragment.range_begin, fragment.range_end_open
                ),
            });
        }
        let section = RangeSection::read(target, self.descriptor, fragment.range_section)?;
        Ok((!section.is_being_deleted()).then_some(section))
    }

    /// Every range section reachable from the map, once each, in the order of the first chunk
    /// that names it (ascending addresses), leaving out sections being deleted. Reads at most
    /// [`MAX_LEVEL_ARRAYS`] level arrays and as many fragments in all as the target's
    /// list-length limit allows. The runtime gives every slot its own level array and its
    /// own fragments, so an array or a fragment reached twice is [`ContractError::Corrupt`]
    /// (this also ends, early, a walk through memory that repeats itself).
    pub fn sections(&self, target: &Target) -> Result<Vec<RangeSection>, ContractError> {
        let mut walk = SectionWalk {
            map: self,
            target,
            arrays: 0,
            fragments: 0,
            seen: BTreeSet::new(),
            seen_arrays: FxHashSet::default(),
            seen_fragments: FxHashSet::default(),
            out: Vec::new(),
        };
        walk.level(self.top_level, self.geometry.levels)?;
        Ok(walk.out)
    }

    /// Reads the fragment at `address`.
    pub fn read_fragment(&self, target: &Target, address: u64) -> Result<Fragment, ContractError> {
        let f = &self.fragment;
        Ok(Fragment {
            address,
            range_begin: target.read_pointer(field(address, f.range_begin)?)?,
            range_end_open: target.read_pointer(field(address, f.range_end_open)?)?,
            range_section: target.read_pointer(field(address, f.range_section)?)?,
            next: target.read_pointer(field(address, f.next)?)? & !1,
        })
    }

    /// Calls `visit` on each fragment of the list at `head` until it returns false or the
    /// list ends. A list longer than the target's list-length limit, or one that loops
    /// (found early with Brent's cycle detection), is [`ContractError::LimitExceeded`].
    fn walk_list(
        &self,
        target: &Target,
        head: u64,
        mut visit: impl FnMut(&Fragment) -> bool,
    ) -> Result<u64, ContractError> {
        let max_list = target.limits().max_list_length;
        let exceeded = |what| ContractError::LimitExceeded {
            what,
            addr: head,
            limit: Limit::ListLength,
            cap: max_list,
            unit: "fragments",
        };
        let mut cursor = head;
        let mut count = 0u64;
        // Brent: compare with a fragment saved at power-of-two steps.
        let (mut saved, mut power, mut since) = (head, 1u64, 0u64);
        while cursor != 0 {
            if count == max_list {
                return Err(exceeded("range section fragment list"));
            }
            count += 1;
            let fragment = self.read_fragment(target, cursor)?;
            if !visit(&fragment) {
                break;
            }
            cursor = fragment.next;
            if cursor == saved {
                return Err(exceeded("cyclic range section fragment list"));
            }
            since += 1;
            if since == power {
                (saved, power, since) = (cursor, power * 2, 0);
            }
        }
        Ok(count)
    }
}

/// The range section of `addr` in the runtime's map (see [`RangeSectionMap::find`]).
pub fn find_range_section(
    target: &Target,
    descriptor: &DataDescriptor,
    addr: u64,
) -> Result<Option<RangeSection>, ContractError> {
    RangeSectionMap::new(target, descriptor)?.find(target, addr)
}

/// Every range section in the runtime's map (see [`RangeSectionMap::sections`]).
pub fn all_range_sections(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<Vec<RangeSection>, ContractError> {
    RangeSectionMap::new(target, descriptor)?.sections(target)
}

/// State of [`RangeSectionMap::sections`].
struct SectionWalk<'a, 'd> {
    map: &'a RangeSectionMap<'d>,
    target: &'a Target,
    arrays: u64,
    fragments: u64,
    seen: BTreeSet<u64>,
    seen_arrays: FxHashSet<u64>,
    seen_fragments: FxHashSet<u64>,
    out: Vec<RangeSection>,
}

impl SectionWalk<'_, '_> {
    fn level(&mut self, array: u64, level: u32) -> Result<(), ContractError> {
        if self.arrays == MAX_LEVEL_ARRAYS {
            return Err(ContractError::LimitExceeded {
                what: "range section map walk",
                addr: self.map.top_level,
                limit: Limit::Fixed,
                cap: MAX_LEVEL_ARRAYS,
                unit: "level arrays",
            });
        }
        self.arrays += 1;
        if !self.seen_arrays.insert(array) {
            return Err(ContractError::Corrupt {
                what: "range section map",
                addr: array,
                detail: "a level array is reached from two slots".to_string(),
            });
        }
        let entries = self.target.read_pointers(array, ENTRIES_PER_LEVEL)?;
        for entry in entries {
            let next = entry & !1;
            if next == 0 {
                continue;
            }
            if level > 1 {
                self.level(next, level - 1)?;
            } else {
                self.list(next)?;
            }
        }
        Ok(())
    }

    fn list(&mut self, head: u64) -> Result<(), ContractError> {
        let mut sections = Vec::new();
        let count = self.map.walk_list(self.target, head, |fragment| {
            sections.push((fragment.address, fragment.range_section));
            true
        })?;
        self.fragments += count;
        let max_list = self.target.limits().max_list_length;
        if self.fragments > max_list {
            return Err(ContractError::LimitExceeded {
                what: "range section map walk",
                addr: self.map.top_level,
                limit: Limit::ListLength,
                cap: max_list,
                unit: "fragments",
            });
        }
        for (fragment, section) in sections {
            if !self.seen_fragments.insert(fragment) {
                return Err(ContractError::Corrupt {
                    what: "range section fragment",
                    addr: fragment,
                    detail: "is in the lists of two slots".to_string(),
                });
            }
            if section == 0 {
                return Err(ContractError::Corrupt {
                    what: "range section fragment",
                    addr: fragment,
                    detail: "names no range section".to_string(),
                });
            }
            if self.seen.insert(section) {
                let section = RangeSection::read(self.target, self.map.descriptor, section)?;
                if !section.is_being_deleted() {
                    self.out.push(section);
                }
            }
        }
        Ok(())
    }
}

/// `base + offset`, or an overflow error naming `base`.
fn field(base: u64, offset: u64) -> Result<u64, ContractError> {
    base.checked_add(offset)
        .ok_or(ContractError::Read(ReadError::AddressOverflow {
            addr: base,
            len: usize::try_from(offset).unwrap_or(usize::MAX),
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_index_examples() {
        let g64 = MapGeometry::for_pointer_size(8).unwrap_or(MapGeometry {
            levels: 0,
            shift: 0,
        });
        let ip = 0x0000_7F12_3456_7890u64;
        assert_eq!(ip >> 17, 0x3F89_1A2B);
        let got: Vec<usize> = (1..=5).rev().map(|l| g64.index(ip, l)).collect();
        assert_eq!(got, vec![0x00, 0x3F, 0x89, 0x1A, 0x2B]);
        assert_eq!(g64.chunk_size(), 128 << 10);

        let g32 = MapGeometry::for_pointer_size(4).unwrap_or(g64);
        assert_eq!(g32.levels, 2);
        assert_eq!(g32.index(0x7A3B_4C5D, 2), 0x7A);
        assert_eq!(g32.index(0x7A3B_4C5D, 1), 0x3B);
        assert_eq!(g32.chunk_size(), 64 << 10);
        assert_eq!(MapGeometry::for_pointer_size(2), None);
    }

    #[test]
    fn bits_above_56_are_ignored_on_64_bit() {
        let g = MapGeometry {
            levels: 5,
            shift: 17,
        };
        let low = 0x01AB_CDEF_1234_5678u64;
        for high in [0u64, 0xFE00_0000_0000_0000, 0x0200_0000_0000_0000] {
            for level in 1..=5 {
                assert_eq!(g.index(low | high, level), g.index(low, level));
            }
        }
    }
}
