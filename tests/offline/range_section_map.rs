//! Range section map test suite (`cdac::contracts::execution_manager::range_section_map`).
//!
//! Covers the digest's index examples (§7.6), the scenarios of the upstream cDAC tests
//! `src/native/managed/cdac/tests/ExecutionManager/RangeSectionMapTests.cs` (lookup in an
//! empty map, one inserted range, the level index of every byte value at every level) and the
//! range-section parts of `ExecutionManagerTests.cs` (null and unmapped addresses, one range
//! with one method or none, resolved through the code heap's nibble map for both contract
//! versions, and a collectible-tagged `Next` chain), plus: sections spanning many chunks,
//! several fragments in one chunk, overlapping fragments, sections being deleted, the
//! collectible bit at every level, cyclic lists, unmapped levels, fragments and sections,
//! enumeration of all sections, and randomized maps against a brute-force model.
//!
//! Structures are written from this file's own field tables ([`Fields`]) and map geometry
//! ([`geometry`]), never from the library's constants; the descriptor the library reads is
//! JSON built from the same tables. Everything runs over all of `DataLayout::ALL`.

use cdac::limits::{Limit, Limits};
use std::collections::{BTreeMap, BTreeSet};

use cdac::contracts::execution_manager::nibble_map::{NibbleMap, NibbleMapVersion};
use cdac::contracts::execution_manager::range_section_map::{
    all_range_sections, find_range_section, MapGeometry, RangeSection, RangeSectionMap,
};
use cdac::contracts::ContractError;
use cdac::descriptor::{json, DataDescriptor};
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::{DataLayout, Target};

// ---------------------------------------------------------------------------------------------
// The structures, from the spec (digest §7.2, §7.6), not from the library.
// ---------------------------------------------------------------------------------------------

/// Field offsets and sizes of the structures the map involves.
#[derive(Debug, Clone, Copy)]
struct Fields {
    /// `RangeSectionMap.TopLevelData` (the inline top-level array) and the object's size.
    top_level_data: u64,
    map_size: u64,
    frag_begin: u64,
    frag_end: u64,
    frag_section: u64,
    frag_next: u64,
    frag_size: u64,
    sec_begin: u64,
    sec_end: u64,
    sec_next_for_delete: u64,
    sec_jit_manager: u64,
    sec_flags: u64,
    sec_heap_list: u64,
    sec_r2r_module: u64,
    sec_size: u64,
    node_next: u64,
    node_start: u64,
    node_end: u64,
    node_map_base: u64,
    node_header_map: u64,
    node_size: u64,
}

/// The upstream test builder's sequential layout (each field pointer-sized, `Flags` padded),
/// except that `TopLevelData` sits one pointer into the map object, so that using the
/// field's *address* (not its content) is checked.
fn sequential(ps: u64) -> Fields {
    Fields {
        top_level_data: ps,
        map_size: ps + 256 * ps,
        frag_begin: 0,
        frag_end: ps,
        frag_section: 2 * ps,
        frag_next: 3 * ps,
        frag_size: 4 * ps,
        sec_begin: 0,
        sec_end: ps,
        sec_next_for_delete: 2 * ps,
        sec_jit_manager: 3 * ps,
        sec_flags: 4 * ps,
        sec_heap_list: 5 * ps,
        sec_r2r_module: 6 * ps,
        sec_size: 7 * ps,
        node_next: 0,
        node_start: ps,
        node_end: 2 * ps,
        node_map_base: 3 * ps,
        node_header_map: 4 * ps,
        node_size: 6 * ps,
    }
}

/// The order of the native .NET 8 structures (`Next` first in fragments, `Flags` after the
/// range, `NextForDelete` last), scaled to the pointer size.
fn native_order(ps: u64) -> Fields {
    Fields {
        top_level_data: 0,
        map_size: 256 * ps + ps,
        frag_next: 0,
        frag_begin: ps,
        frag_end: 2 * ps,
        frag_section: 3 * ps,
        frag_size: 4 * ps,
        sec_begin: 0,
        sec_end: ps,
        sec_flags: 2 * ps,
        sec_jit_manager: 3 * ps,
        sec_r2r_module: 4 * ps,
        sec_heap_list: 5 * ps,
        sec_next_for_delete: 8 * ps,
        sec_size: 9 * ps,
        node_next: 0,
        node_start: 2 * ps,
        node_end: 3 * ps,
        node_map_base: 4 * ps,
        node_header_map: 5 * ps,
        node_size: 7 * ps,
    }
}

fn field_tables(layout: DataLayout) -> [Fields; 2] {
    let ps = u64::from(layout.pointer_size);
    [sequential(ps), native_order(ps)]
}

/// Levels and lowest indexed address bit, from the spec's table.
fn geometry(layout: DataLayout) -> (u32, u32) {
    match layout.pointer_size {
        4 => (2, 16),
        _ => (5, 17),
    }
}

fn index(layout: DataLayout, addr: u64, level: u32) -> usize {
    let (_, shift) = geometry(layout);
    ((addr >> (shift + 8 * (level - 1))) & 0xFF) as usize
}

fn chunk_size(layout: DataLayout) -> u64 {
    1 << geometry(layout).1
}

/// The descriptor JSON for a field table, with the map global in pointer-data slot 1.
fn descriptor(layout: DataLayout, f: &Fields, map_object: u64) -> DataDescriptor {
    let text = format!(
        r#"{{
  "version": 0,
  "types": {{
    "RangeSectionMap": {{ "!": {}, "TopLevelData": [{}, "pointer"] }},
    "RangeSectionFragment": {{ "!": {}, "RangeBegin": {}, "RangeEndOpen": {}, "RangeSection": {}, "Next": {} }},
    "RangeSection": {{ "!": {}, "RangeBegin": {}, "RangeEndOpen": {}, "NextForDelete": {}, "JitManager": {},
                      "Flags": [{}, "int32"], "HeapList": {}, "R2RModule": {} }},
    "CodeHeapListNode": {{ "Next": {}, "StartAddress": {}, "EndAddress": {}, "MapBase": {}, "HeaderMap": {} }}
  }},
  "globals": {{ "ExecutionManagerCodeRangeMapAddress": [[1], "pointer"] }}
}}"#,
        f.map_size,
        f.top_level_data,
        f.frag_size,
        f.frag_begin,
        f.frag_end,
        f.frag_section,
        f.frag_next,
        f.sec_size,
        f.sec_begin,
        f.sec_end,
        f.sec_next_for_delete,
        f.sec_jit_manager,
        f.sec_flags,
        f.sec_heap_list,
        f.sec_r2r_module,
        f.node_next,
        f.node_start,
        f.node_end,
        f.node_map_base,
        f.node_header_map,
    );
    let physical = json::parse("test", text.as_bytes()).expect("test descriptor JSON");
    let mut d = DataDescriptor::new(layout);
    d.merge("test", &physical, &[0, map_object])
        .expect("merge test descriptor");
    d
}

/// A `RangeSection` as the test writes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Section {
    begin: u64,
    end: u64,
    next_for_delete: u64,
    jit_manager: u64,
    flags: u32,
    heap_list: u64,
    r2r_module: u64,
}

/// A `RangeSectionFragment` as the test writes it (`next` is the raw value, tag included).
#[derive(Debug, Clone, Copy, Default)]
struct Frag {
    begin: u64,
    end: u64,
    section: u64,
    next: u64,
}

/// A target address space holding a range section map, built the way the runtime fills it.
struct World {
    layout: DataLayout,
    f: Fields,
    next_alloc: u64,
    map_object: u64,
    top: u64,
    /// Level arrays by address: (level, raw entries).
    arrays: BTreeMap<u64, (u32, Vec<u64>)>,
    fragments: BTreeMap<u64, Frag>,
    sections: BTreeMap<u64, Section>,
    /// Levels whose entries carry the collectible bit (bit `l` for level `l`; level 1 entries
    /// point at fragments), and whether fragment `Next` links do.
    tag_levels: u32,
    tag_next: bool,
}

impl World {
    fn new(layout: DataLayout, f: Fields) -> World {
        let mut w = World {
            layout,
            f,
            next_alloc: 0x0030_0000,
            map_object: 0,
            top: 0,
            arrays: BTreeMap::new(),
            fragments: BTreeMap::new(),
            sections: BTreeMap::new(),
            tag_levels: 0,
            tag_next: false,
        };
        w.map_object = w.alloc(f.map_size);
        w.top = w.map_object + f.top_level_data;
        let levels = geometry(layout).0;
        w.arrays.insert(w.top, (levels, vec![0; 256]));
        w
    }

    fn ps(&self) -> u64 {
        u64::from(self.layout.pointer_size)
    }

    fn alloc(&mut self, size: u64) -> u64 {
        let addr = self.next_alloc.div_ceil(16) * 16;
        self.next_alloc = addr + size + 0x40;
        addr
    }

    fn tag(&self, level: u32, value: u64) -> u64 {
        if value != 0 && self.tag_levels & (1 << level) != 0 {
            value | 1
        } else {
            value
        }
    }

    /// The leaf array and index for `addr`, creating levels on the way.
    fn leaf(&mut self, addr: u64) -> (u64, usize) {
        let levels = geometry(self.layout).0;
        let mut array = self.top;
        for level in (2..=levels).rev() {
            let i = index(self.layout, addr, level);
            let raw = self.arrays[&array].1[i];
            let next = raw & !1;
            array = if next == 0 {
                let size = 256 * self.ps();
                let new = self.alloc(size);
                self.arrays.insert(new, (level - 1, vec![0; 256]));
                let tagged = self.tag(level, new);
                self.arrays.get_mut(&array).expect("array").1[i] = tagged;
                new
            } else {
                next
            };
        }
        (array, index(self.layout, addr, 1))
    }

    /// Sets the raw leaf entry of the chunk holding `addr`.
    fn set_leaf(&mut self, addr: u64, value: u64) {
        let (array, i) = self.leaf(addr);
        let tagged = self.tag(1, value);
        self.arrays.get_mut(&array).expect("leaf").1[i] = tagged;
    }

    fn leaf_value(&mut self, addr: u64) -> u64 {
        let (array, i) = self.leaf(addr);
        self.arrays[&array].1[i] & !1
    }

    fn add_section(&mut self, s: Section) -> u64 {
        let addr = self.alloc(self.f.sec_size);
        self.sections.insert(addr, s);
        addr
    }

    fn add_fragment(&mut self, frag: Frag) -> u64 {
        let addr = self.alloc(self.f.frag_size);
        self.fragments.insert(addr, frag);
        addr
    }

    fn link(&self, next: u64) -> u64 {
        if next != 0 && self.tag_next {
            next | 1
        } else {
            next
        }
    }

    /// Maps `[begin, end)` to `section` as the runtime does: one fragment per chunk touched,
    /// pushed at the head of that chunk's list.
    fn map_range(&mut self, begin: u64, end: u64, section: u64) {
        let chunk = chunk_size(self.layout);
        let mut c = begin / chunk * chunk;
        while c < end {
            let head = self.leaf_value(c);
            let next = self.link(head);
            let frag = self.add_fragment(Frag {
                begin,
                end,
                section,
                next,
            });
            self.set_leaf(c, frag);
            c += chunk;
        }
    }

    /// A section over `[begin, end)`, mapped; returns its address.
    fn add_mapped(&mut self, s: Section) -> u64 {
        let addr = self.add_section(s);
        self.map_range(s.begin, s.end, addr);
        addr
    }

    fn descriptor(&self) -> DataDescriptor {
        descriptor(self.layout, &self.f, self.map_object)
    }

    /// Writes everything; `extra` may add more regions.
    fn build_with(&self, extra: impl FnOnce(&mut MemoryBuilder)) -> (Target, DataDescriptor) {
        let f = &self.f;
        let ps = self.ps() as usize;
        let mut b = MemoryBuilder::new(self.layout);
        if f.top_level_data > 0 {
            b.region(self.map_object, f.top_level_data as usize);
        }
        let after = f.top_level_data + 256 * self.ps();
        if f.map_size > after {
            b.region(self.map_object + after, (f.map_size - after) as usize);
        }
        for (addr, (_, entries)) in &self.arrays {
            let r = b.region(*addr, 256 * ps);
            for (i, e) in entries.iter().enumerate() {
                r.pointer(i * ps, *e);
            }
        }
        for (addr, fr) in &self.fragments {
            let r = b.region(*addr, f.frag_size as usize);
            r.pointer(f.frag_begin as usize, fr.begin)
                .pointer(f.frag_end as usize, fr.end)
                .pointer(f.frag_section as usize, fr.section)
                .pointer(f.frag_next as usize, fr.next);
        }
        for (addr, s) in &self.sections {
            let r = b.region(*addr, f.sec_size as usize);
            r.pointer(f.sec_begin as usize, s.begin)
                .pointer(f.sec_end as usize, s.end)
                .pointer(f.sec_next_for_delete as usize, s.next_for_delete)
                .pointer(f.sec_jit_manager as usize, s.jit_manager)
                .u32(f.sec_flags as usize, s.flags)
                .pointer(f.sec_heap_list as usize, s.heap_list)
                .pointer(f.sec_r2r_module as usize, s.r2r_module);
        }
        extra(&mut b);
        (b.into_target(), self.descriptor())
    }

    fn build(&self) -> (Target, DataDescriptor) {
        self.build_with(|_| {})
    }
}

/// Every (layout, field table) combination.
fn worlds() -> Vec<(DataLayout, Fields)> {
    DataLayout::ALL
        .into_iter()
        .flat_map(|l| field_tables(l).into_iter().map(move |f| (l, f)))
        .collect()
}

fn find(target: &Target, d: &DataDescriptor, addr: u64) -> Option<u64> {
    find_range_section(target, d, addr)
        .unwrap_or_else(|e| panic!("lookup of {addr:#x} failed: {e}"))
        .map(|s| s.address)
}

fn code_section(begin: u64, end: u64) -> Section {
    Section {
        begin,
        end,
        jit_manager: 0x000b_ff00,
        flags: 0x02,
        ..Section::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Indexing (digest §7.6, upstream TestGetIndexForLevel).
// ---------------------------------------------------------------------------------------------

#[test]
fn geometry_matches_spec() {
    for layout in DataLayout::ALL {
        let g = MapGeometry::for_pointer_size(layout.pointer_size).expect("geometry");
        let (levels, shift) = geometry(layout);
        assert_eq!(
            (g.levels, g.shift, g.chunk_size()),
            (levels, shift, 1 << shift)
        );
    }
    assert_eq!(MapGeometry::for_pointer_size(2), None);
    assert_eq!(MapGeometry::for_pointer_size(16), None);
}

/// Upstream `TestGetIndexForLevel`: for every level and byte value, an address with that
/// byte at the level's bits, all bits above the level set (including the ignored ones) and
/// irrelevant low bits, indexes to that byte.
#[test]
fn index_for_every_level_and_byte() {
    for layout in DataLayout::ALL {
        let g = MapGeometry::for_pointer_size(layout.pointer_size).expect("geometry");
        let (levels, effective) = geometry(layout);
        let irrelevant_low = 0xcccc_cccc_cccc_ccccu64 & ((1u64 << (effective - 1)) - 1);
        for i in 0..256u64 {
            for level in 1..=levels {
                let upper_shift = effective + 8 * level;
                let upper = if upper_shift >= 64 {
                    0
                } else {
                    !0u64 << upper_shift
                };
                let working = (i << (8 * (level - 1))) << effective;
                let addr = upper | working | irrelevant_low;
                assert_eq!(
                    g.index(addr, level),
                    i as usize,
                    "{layout:?} level {level} byte {i:#x}"
                );
                assert_eq!(index(layout, addr, level), i as usize);
            }
        }
    }
}

#[test]
fn digest_index_examples() {
    let g = MapGeometry::for_pointer_size(8).expect("64-bit");
    let ip = 0x0000_7F12_3456_7890u64;
    let by_level: Vec<usize> = (1..=5).rev().map(|l| g.index(ip, l)).collect();
    assert_eq!(by_level, [0x00, 0x3F, 0x89, 0x1A, 0x2B]);
    assert_eq!(ip % g.chunk_size(), 0x7890);
    let g = MapGeometry::for_pointer_size(4).expect("32-bit");
    assert_eq!(
        (g.index(0x7A3B_4C5D, 2), g.index(0x7A3B_4C5D, 1)),
        (0x7A, 0x3B)
    );
}

// ---------------------------------------------------------------------------------------------
// Upstream RangeSectionMapTests.cs.
// ---------------------------------------------------------------------------------------------

/// Upstream `TestLookupFail`: an empty map finds nothing.
#[test]
fn lookup_in_empty_map_fails() {
    for (layout, f) in worlds() {
        let w = World::new(layout, f);
        let (target, d) = w.build();
        let map = RangeSectionMap::with_top_level(&target, &d, w.top).expect("map");
        assert_eq!(map.fragment_list(&target, 0x007f_0000).ok(), Some(None));
        assert_eq!(map.find_fragment(&target, 0x007f_0000).ok(), Some(None));
        assert_eq!(find(&target, &d, 0x007f_0000), None, "{layout:?}");
        assert_eq!(all_range_sections(&target, &d).ok(), Some(vec![]));
    }
}

/// Upstream `TestLookupOne`: a range inserted at 0x007f_0000 with leaf value 0x0a0a_0a0a is
/// found at that leaf.
#[test]
fn lookup_one_inserted_range() {
    for (layout, f) in worlds() {
        let mut w = World::new(layout, f);
        let chunk = chunk_size(layout);
        let (start, len) = (0x007f_0000u64, 0x1000u64);
        let mut c = start / chunk * chunk;
        while c < start + len {
            w.set_leaf(c, 0x0a0a_0a0a);
            c += chunk;
        }
        let (target, d) = w.build();
        let map = RangeSectionMap::new(&target, &d).expect("map");
        assert_eq!(map.top_level(), w.top);
        assert_eq!(
            map.fragment_list(&target, start).ok(),
            Some(Some(0x0a0a_0a0a)),
            "{layout:?}"
        );
        // Nothing is mapped there: following it is a read error naming that memory.
        match map.find_fragment(&target, start) {
            Err(ContractError::Read(e)) => {
                assert!((0x0a0a_0a0a..0x0a0a_0a0a + f.frag_size).contains(&e.address()))
            }
            other => panic!("{layout:?}: expected a read error, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream ExecutionManagerTests.cs, range-section parts, through the code heap's nibble map.
// ---------------------------------------------------------------------------------------------

const CODE_RANGE_START: u64 = 0x0a0a_0000;
const CODE_RANGE_SIZE: u64 = 0xc000;
const METHOD_SIZE: u64 = 0x450;

/// One code range as a JIT code heap section, its `CodeHeapListNode` and nibble map (with
/// one method after its code header when `with_method`); the head fragment is either the
/// covering fragment or, when `collectible_chain`, an empty fragment whose tagged `Next` leads
/// to the covering one (which is in no leaf).
fn one_range_world(
    layout: DataLayout,
    f: Fields,
    version: NibbleMapVersion,
    with_method: bool,
    collectible_chain: bool,
) -> (Target, DataDescriptor, u64, u64) {
    let ps = u64::from(layout.pointer_size);
    let mut w = World::new(layout, f);
    let method_start = CODE_RANGE_START + ps; // after the code header slot
    let node = w.alloc(f.node_size);
    let header_map = w.alloc(CODE_RANGE_SIZE / 64);
    let section = w.add_section(Section {
        heap_list: node,
        ..code_section(CODE_RANGE_START, CODE_RANGE_START + CODE_RANGE_SIZE)
    });
    if collectible_chain {
        let tail = w.add_fragment(Frag {
            begin: CODE_RANGE_START,
            end: CODE_RANGE_START + CODE_RANGE_SIZE,
            section,
            next: 0,
        });
        let head = w.add_fragment(Frag {
            begin: 0,
            end: 0,
            section,
            next: tail | 1,
        });
        w.set_leaf(CODE_RANGE_START, head);
    } else {
        w.map_range(
            CODE_RANGE_START,
            CODE_RANGE_START + CODE_RANGE_SIZE,
            section,
        );
    }
    // The nibble map, written from the spec's rules.
    let mut units = vec![0u32; (CODE_RANGE_SIZE / 256) as usize];
    if with_method {
        let rel = method_start - CODE_RANGE_START;
        units[(rel / 256) as usize] |= ((1 + (rel % 32) / 4) as u32) << (28 - 4 * ((rel / 32) % 8));
        if version == NibbleMapVersion::Constant {
            let encoded = ((rel as u32) & !0xF) + (((rel as u32) & 0xF) >> 2) + 9;
            let mut u = rel / 256 + 1;
            while (u + 1) * 256 <= rel + METHOD_SIZE {
                units[u as usize] = encoded;
                u += 1;
            }
        }
    }
    let (target, d) = w.build_with(|b| {
        let r = b.region(node, f.node_size as usize);
        r.pointer(f.node_start as usize, CODE_RANGE_START)
            .pointer(f.node_end as usize, CODE_RANGE_START + CODE_RANGE_SIZE)
            .pointer(f.node_map_base as usize, CODE_RANGE_START)
            .pointer(f.node_header_map as usize, header_map);
        let m = b.region(header_map, 4 * units.len());
        for (i, u) in units.iter().enumerate() {
            m.u32(4 * i, *u);
        }
    });
    (target, d, section, method_start)
}

/// The method start owning `ip`: range section, then its heap's nibble map.
fn method_of(
    target: &Target,
    d: &DataDescriptor,
    version: NibbleMapVersion,
    ip: u64,
) -> Option<u64> {
    let section = find_range_section(target, d, ip).expect("range lookup")?;
    assert!(section.is_code_heap() && !section.is_range_list());
    let map = NibbleMap::from_heap_list_node(target, d, version, section.heap_list).expect("node");
    map.find_method_start(target, ip).expect("nibble lookup")
}

const VERSIONS: [NibbleMapVersion; 2] = [NibbleMapVersion::Linear, NibbleMapVersion::Constant];

/// Upstream `GetCodeBlockHandle_Null` and `GetCodeBlockHandle_NoRangeSections`.
#[test]
fn null_and_unmapped_addresses_have_no_section() {
    for (layout, f) in worlds() {
        let (target, d) = World::new(layout, f).build();
        assert_eq!(find(&target, &d, 0), None);
        assert_eq!(find(&target, &d, 0x0a0a_0000), None);
    }
}

/// Upstream `GetMethodDesc_OneRangeOneMethod`: the method's start, middle and last byte
/// resolve to the method, for both nibble map versions.
#[test]
fn one_range_one_method() {
    for version in VERSIONS {
        for (layout, f) in worlds() {
            let (target, d, section, start) = one_range_world(layout, f, version, true, false);
            for ip in [start, start + METHOD_SIZE / 2, start + METHOD_SIZE - 1] {
                assert_eq!(find(&target, &d, ip), Some(section), "{layout:?} {ip:#x}");
                assert_eq!(
                    method_of(&target, &d, version, ip),
                    Some(start),
                    "{layout:?} {version:?} {ip:#x}"
                );
            }
            // The section's fields as written; its begin is the unwind-info base.
            let s = find_range_section(&target, &d, start)
                .ok()
                .flatten()
                .expect("section");
            assert_eq!(s.range_begin, CODE_RANGE_START);
            assert_eq!(s.range_end_open, CODE_RANGE_START + CODE_RANGE_SIZE);
            assert_eq!(s.jit_manager, 0x000b_ff00);
        }
    }
}

/// Upstream `GetCodeBlockHandle_OneRangeZeroMethod`: the section is found, the nibble map
/// has nothing at its start, middle or last byte.
#[test]
fn one_range_zero_methods() {
    for version in VERSIONS {
        for (layout, f) in worlds() {
            let (target, d, section, _) = one_range_world(layout, f, version, false, false);
            for ip in [
                CODE_RANGE_START,
                CODE_RANGE_START + CODE_RANGE_SIZE / 2,
                CODE_RANGE_START + CODE_RANGE_SIZE - 1,
            ] {
                assert_eq!(find(&target, &d, ip), Some(section));
                assert_eq!(
                    method_of(&target, &d, version, ip),
                    None,
                    "{layout:?} {ip:#x}"
                );
            }
            assert_eq!(find(&target, &d, CODE_RANGE_START + CODE_RANGE_SIZE), None);
            assert_eq!(find(&target, &d, CODE_RANGE_START - 1), None);
        }
    }
}

/// Upstream `GetMethodDesc_CollectibleFragmentNext`: the head fragment covers nothing and
/// its `Next` carries the collectible bit; the tail, in no leaf, covers the range.
#[test]
fn collectible_fragment_next() {
    for version in VERSIONS {
        for (layout, f) in worlds() {
            let (target, d, section, start) = one_range_world(layout, f, version, true, true);
            assert_eq!(find(&target, &d, start), Some(section), "{layout:?}");
            assert_eq!(method_of(&target, &d, version, start), Some(start));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Map shapes.
// ---------------------------------------------------------------------------------------------

/// A section over several chunks (one fragment each) is found at every chunk boundary and
/// its ends; one byte outside is not.
#[test]
fn section_spanning_many_chunks() {
    for (layout, f) in worlds() {
        let chunk = chunk_size(layout);
        let begin = 0x1234_0000u64 + chunk / 2 + 0x40;
        let end = begin + 5 * chunk + 0x123;
        let mut w = World::new(layout, f);
        let s = w.add_mapped(code_section(begin, end));
        let (target, d) = w.build();
        let mut probes = vec![begin, end - 1];
        let mut c = begin / chunk * chunk + chunk;
        while c < end {
            probes.extend([c - 1, c]);
            c += chunk;
        }
        for ip in probes {
            assert_eq!(find(&target, &d, ip), Some(s), "{layout:?} {ip:#x}");
        }
        assert_eq!(find(&target, &d, begin - 1), None);
        assert_eq!(find(&target, &d, end), None);
        assert_eq!(find(&target, &d, begin - chunk), None);
        assert_eq!(find(&target, &d, end + chunk), None);
    }
}

/// Several small sections in one chunk share its fragment list; each address finds its
/// own, gaps find none.
#[test]
fn several_sections_in_one_chunk() {
    for (layout, f) in worlds() {
        let base = 0x4440_0000u64;
        let mut w = World::new(layout, f);
        let a = w.add_mapped(code_section(base + 0x100, base + 0x800));
        let b = w.add_mapped(code_section(base + 0x800, base + 0x900));
        let c = w.add_mapped(code_section(base + 0x2000, base + 0x2004));
        let (target, d) = w.build();
        let cases = [
            (base, None),
            (base + 0xFF, None),
            (base + 0x100, Some(a)),
            (base + 0x7FF, Some(a)),
            (base + 0x800, Some(b)),
            (base + 0x8FF, Some(b)),
            (base + 0x900, None),
            (base + 0x1FFF, None),
            (base + 0x2000, Some(c)),
            (base + 0x2003, Some(c)),
            (base + 0x2004, None),
        ];
        for (ip, want) in cases {
            assert_eq!(find(&target, &d, ip), want, "{layout:?} {ip:#x}");
        }
        let all: Vec<u64> = all_range_sections(&target, &d)
            .expect("enumerate")
            .iter()
            .map(|s| s.address)
            .collect();
        assert_eq!(
            all.iter().copied().collect::<BTreeSet<_>>(),
            BTreeSet::from([a, b, c])
        );
        assert_eq!(all.len(), 3);
    }
}

/// Overlapping fragments: the first in list order wins.
#[test]
fn overlapping_fragments_first_in_list_wins() {
    for (layout, f) in worlds() {
        let base = 0x5550_0000u64;
        let mut w = World::new(layout, f);
        let s1 = w.add_section(code_section(base, base + 0x8000));
        let s2 = w.add_section(code_section(base + 0x4000, base + 0xC000));
        let second = w.add_fragment(Frag {
            begin: base + 0x4000,
            end: base + 0xC000,
            section: s2,
            next: 0,
        });
        let first = w.add_fragment(Frag {
            begin: base,
            end: base + 0x8000,
            section: s1,
            next: second,
        });
        w.set_leaf(base, first);
        let (target, d) = w.build();
        assert_eq!(find(&target, &d, base + 0x5000), Some(s1), "{layout:?}");
        assert_eq!(find(&target, &d, base + 0x9000), Some(s2), "{layout:?}");
        assert_eq!(find(&target, &d, base + 0xC000), None, "{layout:?}");
        let map = RangeSectionMap::new(&target, &d).expect("map");
        let frag = map.find_fragment(&target, base + 0x5000).ok().flatten();
        assert_eq!(frag.map(|f| (f.address, f.next)), Some((first, second)));
    }
}

/// A section with `NextForDelete` set counts as not found, and is not enumerated.
#[test]
fn section_being_deleted_is_not_found() {
    for (layout, f) in worlds() {
        let base = 0x6660_0000u64;
        let mut w = World::new(layout, f);
        let live = w.add_mapped(code_section(base, base + 0x1000));
        let dying = w.add_mapped(Section {
            next_for_delete: 0x0777_0000,
            ..code_section(base + 0x1000, base + 0x2000)
        });
        let (target, d) = w.build();
        assert_eq!(find(&target, &d, base + 0x10), Some(live));
        assert_eq!(find(&target, &d, base + 0x1010), None, "{layout:?}");
        // The fragment itself is there.
        let map = RangeSectionMap::new(&target, &d).expect("map");
        let frag = map.find_fragment(&target, base + 0x1010).ok().flatten();
        assert_eq!(frag.map(|f| f.range_section), Some(dying));
        let all = all_range_sections(&target, &d).expect("enumerate");
        assert_eq!(
            all.iter().map(|s| s.address).collect::<Vec<_>>(),
            vec![live]
        );
        let read = RangeSection::read(&target, &d, dying).expect("read");
        assert!(read.is_being_deleted());
    }
}

/// Every field of a `RangeSection` is read from its descriptor offset.
#[test]
fn range_section_fields() {
    for (layout, f) in worlds() {
        let base = 0x0120_0000u64;
        let mut w = World::new(layout, f);
        let want = Section {
            begin: base,
            end: base + 0x3000,
            next_for_delete: 0,
            jit_manager: 0x0b0b_0b00,
            flags: 0x01 | 0x04,
            heap_list: 0x0c0c_0c00,
            r2r_module: 0x0d0d_0d00,
        };
        let addr = w.add_mapped(want);
        let (target, d) = w.build();
        let s = find_range_section(&target, &d, base + 0x2FFF)
            .expect("lookup")
            .expect("found");
        assert_eq!(
            (
                s.address,
                s.range_begin,
                s.range_end_open,
                s.next_for_delete
            ),
            (addr, want.begin, want.end, 0)
        );
        assert_eq!(
            (s.jit_manager, s.flags, s.heap_list, s.r2r_module),
            (
                want.jit_manager,
                want.flags,
                want.heap_list,
                want.r2r_module
            ),
            "{layout:?}"
        );
        assert!(s.is_collectible() && s.is_range_list() && !s.is_code_heap());
        assert!(s.contains(base) && s.contains(base + 0x2FFF) && !s.contains(base + 0x3000));
    }
}

/// The collectible bit 0 on the entries of each level alone, on all levels, and on `Next`
/// links, never changes an answer.
#[test]
fn collectible_bit_at_every_level() {
    for (layout, f) in worlds() {
        let levels = geometry(layout).0;
        let mut masks: Vec<u32> = (1..=levels).map(|l| 1 << l).collect();
        masks.push(!0);
        for mask in masks {
            for tag_next in [false, true] {
                let chunk = chunk_size(layout);
                let base = 0x7770_0000u64;
                let mut w = World::new(layout, f);
                w.tag_levels = mask;
                w.tag_next = tag_next;
                let a = w.add_mapped(code_section(base + 0x100, base + 0x200));
                let b = w.add_mapped(code_section(base + 0x300, base + 2 * chunk));
                let (target, d) = w.build();
                let what = format!("{layout:?} mask {mask:#x} next {tag_next}");
                assert_eq!(find(&target, &d, base + 0x180), Some(a), "{what}");
                assert_eq!(find(&target, &d, base + 0x300), Some(b), "{what}");
                assert_eq!(find(&target, &d, base + chunk + 5), Some(b), "{what}");
                assert_eq!(find(&target, &d, base + 0x280), None, "{what}");
                let all = all_range_sections(&target, &d).expect("enumerate");
                assert_eq!(all.len(), 2, "{what}");
            }
        }
    }
}

/// On 64-bit targets the map spans all five levels: sections far apart in the address space
/// (different indexes at every level) are told apart.
#[test]
fn distant_sections_on_64_bit() {
    for (layout, f) in worlds().into_iter().filter(|(l, _)| l.pointer_size == 8) {
        let addrs = [
            0x0000_0000_0042_0000u64,
            0x0000_7F12_3456_0000,
            0x0000_7F12_3458_0000, // same L5..L2, next leaf entry
            0x0001_0000_0000_0000,
            0x01FF_FFFF_FFF0_0000, // bit 56 set, the highest indexed bit
        ];
        let mut w = World::new(layout, f);
        let sections: Vec<u64> = addrs
            .iter()
            .map(|a| w.add_mapped(code_section(*a, *a + 0x1000)))
            .collect();
        let (target, d) = w.build();
        for (a, s) in addrs.iter().zip(&sections) {
            assert_eq!(find(&target, &d, *a + 0x800), Some(*s), "{a:#x}");
            assert_eq!(find(&target, &d, *a + 0x1000), None, "{a:#x}");
            // Bits 57..63 do not select another map entry, but the address is outside the
            // fragment's range.
            assert_eq!(find(&target, &d, *a | 0xFE00_0000_0000_0000), None);
        }
        let all = all_range_sections(&target, &d).expect("enumerate");
        assert_eq!(all.iter().map(|s| s.address).collect::<Vec<_>>(), sections);
    }
}

/// On 32-bit targets an address above 4 GiB indexes the chunk of its low 32 bits but is
/// outside every fragment.
#[test]
fn address_above_4gib_on_32_bit() {
    for (layout, f) in worlds().into_iter().filter(|(l, _)| l.pointer_size == 4) {
        let mut w = World::new(layout, f);
        let s = w.add_mapped(code_section(CODE_RANGE_START, CODE_RANGE_START + 0x1000));
        let (target, d) = w.build();
        assert_eq!(find(&target, &d, CODE_RANGE_START + 0x10), Some(s));
        assert_eq!(
            find(&target, &d, 0x1_0000_0000 + CODE_RANGE_START + 0x10),
            None
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input.
// ---------------------------------------------------------------------------------------------

/// A cyclic fragment list that covers nothing is `LimitExceeded`, naming the list head.
#[test]
fn cyclic_fragment_list() {
    for (layout, f) in worlds() {
        for tag_next in [false, true] {
            let base = 0x0880_0000u64;
            let mut w = World::new(layout, f);
            w.tag_next = tag_next;
            let s = w.add_section(code_section(base, base + 0x100));
            let a = w.alloc(f.frag_size);
            let b = w.alloc(f.frag_size);
            let (la, lb) = (w.link(a), w.link(b));
            w.fragments.insert(
                a,
                Frag {
                    begin: base,
                    end: base + 0x100,
                    section: s,
                    next: lb,
                },
            );
            w.fragments.insert(
                b,
                Frag {
                    begin: base + 0x200,
                    end: base + 0x300,
                    section: s,
                    next: la,
                },
            );
            // A self-loop in another chunk.
            let c = w.alloc(f.frag_size);
            let lc = w.link(c);
            let other = base + 16 * chunk_size(layout);
            w.fragments.insert(
                c,
                Frag {
                    begin: other,
                    end: other + 1,
                    section: s,
                    next: lc,
                },
            );
            w.set_leaf(base, a);
            w.set_leaf(other, c);
            let (target, d) = w.build();
            // Covered addresses are still found before the cycle matters.
            assert_eq!(find(&target, &d, base + 0x10), Some(s));
            assert_eq!(find(&target, &d, base + 0x210), Some(s));
            assert_eq!(find(&target, &d, other), Some(s));
            for (ip, head) in [(base + 0x150, a), (other + 0x10, c)] {
                match find_range_section(&target, &d, ip) {
                    Err(ContractError::LimitExceeded { addr, limit, .. }) => {
                        assert_eq!((addr, limit), (head, Limit::ListLength), "{layout:?}")
                    }
                    other => panic!("{layout:?}: expected LimitExceeded, got {other:?}"),
                }
            }
            assert!(matches!(
                all_range_sections(&target, &d),
                Err(ContractError::LimitExceeded { .. })
            ));
        }
    }
}

/// Under a list-length limit of 65,536, a list longer than that (not a cycle) is
/// `LimitExceeded` naming the limit; one of exactly 65,536 is walked to its end.
#[test]
fn long_fragment_list_hits_limit() {
    for layout in [DataLayout::LE64, DataLayout::BE32] {
        for (len, ok) in [(65_536u64, true), (65_537, false)] {
            let f = sequential(u64::from(layout.pointer_size));
            let mut w = World::new(layout, f);
            let base = 0x0990_0000u64;
            let s = w.add_section(code_section(base, base + 0x100));
            // Fragments in one block, each covering one byte; the last covers the probe.
            let first = w.alloc(len * f.frag_size);
            for i in 0..len {
                let next = if i + 1 < len {
                    first + (i + 1) * f.frag_size
                } else {
                    0
                };
                let at = if i + 1 < len {
                    base + 0x200 + i
                } else {
                    base + 0x10
                };
                w.fragments.insert(
                    first + i * f.frag_size,
                    Frag {
                        begin: at,
                        end: at + 1,
                        section: s,
                        next,
                    },
                );
            }
            w.set_leaf(base, first);
            let (target, d) = w.build();
            let target = target.with_limits(Limits {
                max_list_length: 65_536,
                ..Limits::default()
            });
            let got = find_range_section(&target, &d, base + 0x10);
            match (ok, got) {
                (true, Ok(Some(found))) => assert_eq!(found.address, s),
                (
                    false,
                    Err(ContractError::LimitExceeded {
                        addr, limit, cap, ..
                    }),
                ) => {
                    assert_eq!((addr, limit, cap), (first, Limit::ListLength, 65_536))
                }
                (_, other) => panic!("{layout:?} {len}: got {other:?}"),
            }
        }
    }
}

/// A level pointer into unmapped memory is a read error naming the slot read, at every
/// level; so are unmapped fragments and sections.
#[test]
fn unmapped_levels_fragments_and_sections() {
    for (layout, f) in worlds() {
        let levels = geometry(layout).0;
        let ps = u64::from(layout.pointer_size);
        let ip = 0x0999_1234u64;
        for broken in 1..levels {
            // Point the level-(broken+1) entry at nothing: the level-`broken` read fails.
            let mut w = World::new(layout, f);
            let s = w.add_mapped(code_section(ip & !0xFFF, (ip & !0xFFF) + 0x1000));
            let _ = s;
            let mut array = w.top;
            for level in ((broken + 1)..=levels).rev() {
                let i = index(layout, ip, level);
                if level == broken + 1 {
                    w.arrays.get_mut(&array).expect("array").1[i] = 0x0dea_0000 | 1;
                } else {
                    array = w.arrays[&array].1[i] & !1;
                }
            }
            let (target, d) = w.build();
            match find_range_section(&target, &d, ip) {
                Err(ContractError::Read(e)) => assert_eq!(
                    e.address(),
                    0x0dea_0000 + index(layout, ip, broken) as u64 * ps,
                    "{layout:?} level {broken}"
                ),
                other => panic!("{layout:?} level {broken}: expected a read error, got {other:?}"),
            }
            assert!(matches!(
                all_range_sections(&target, &d),
                Err(ContractError::Read(_))
            ));
        }
        // Leaf entry to an unmapped fragment.
        let mut w = World::new(layout, f);
        w.set_leaf(ip, 0x0dec_0000);
        let (target, d) = w.build();
        match find_range_section(&target, &d, ip) {
            Err(ContractError::Read(e)) => {
                assert!((0x0dec_0000..0x0dec_0000 + f.frag_size).contains(&e.address()))
            }
            other => panic!("{layout:?}: expected a read error, got {other:?}"),
        }
        // Fragment naming an unmapped section.
        let mut w = World::new(layout, f);
        w.map_range(ip, ip + 0x10, 0x0ded_0000);
        let (target, d) = w.build();
        match find_range_section(&target, &d, ip) {
            Err(ContractError::Read(e)) => {
                assert!((0x0ded_0000..0x0ded_0000 + f.sec_size).contains(&e.address()))
            }
            other => panic!("{layout:?}: expected a read error, got {other:?}"),
        }
        // Fragment naming no section.
        let mut w = World::new(layout, f);
        w.map_range(ip, ip + 0x10, 0);
        let (target, d) = w.build();
        assert!(matches!(
            find_range_section(&target, &d, ip),
            Err(ContractError::Corrupt { .. })
        ));
        assert!(matches!(
            all_range_sections(&target, &d),
            Err(ContractError::Corrupt { .. })
        ));
    }
}

/// Missing descriptor pieces are descriptor errors.
#[test]
fn missing_descriptor_pieces() {
    let layout = DataLayout::LE64;
    let w = World::new(layout, sequential(8));
    let (target, _) = w.build();
    let empty = DataDescriptor::new(layout);
    assert!(matches!(
        find_range_section(&target, &empty, 0x1000),
        Err(ContractError::Descriptor(_))
    ));
    let physical = json::parse(
        "partial",
        br#"{"types":{"RangeSectionMap":{"TopLevelData":0}},"globals":{"ExecutionManagerCodeRangeMapAddress":"0x300000"}}"#,
    )
    .expect("json");
    let mut partial = DataDescriptor::new(layout);
    partial.merge("partial", &physical, &[0]).expect("merge");
    assert!(matches!(
        find_range_section(&target, &partial, 0x1000),
        Err(ContractError::Descriptor(_))
    ));
}

/// A map whose interior entries point back at the top level is walked within bounds: the
/// top array, reached again from its own slot, is named as damaged.
#[test]
fn self_referencing_map_is_bounded() {
    for (layout, f) in worlds() {
        let mut w = World::new(layout, f);
        let top = w.top;
        w.arrays
            .insert(top, (geometry(layout).0, vec![top | 1; 256]));
        let (target, d) = w.build();
        // A lookup ends after `levels` reads, at a "fragment" that is really the top array.
        let _ = find_range_section(&target, &d, 0x1234_5678);
        assert!(matches!(
            all_range_sections(&target, &d),
            Err(ContractError::Corrupt { addr, .. }) if addr == top
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Randomized maps against a model.
// ---------------------------------------------------------------------------------------------

/// Deterministic xorshift64* generator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn check_random_map(seed: u64, layout: DataLayout, f: Fields) {
    let mut rng = Rng::new(seed);
    let chunk = chunk_size(layout);
    let levels = geometry(layout).0;
    let mut w = World::new(layout, f);
    w.tag_levels = rng.next() as u32 & (((1 << (levels + 1)) - 1) & !1);
    w.tag_next = rng.range(0, 1) == 1;
    // Non-overlapping sections, clustered so that chunks are shared, in a window of the
    // address space the pointer size allows (avoiding the test's own structures).
    let window = if layout.pointer_size == 4 {
        0x4000_0000u64 + rng.range(0, 0x3000) * 0x1_0000
    } else {
        rng.range(0, (1 << 57) / chunk - 0x1000) * chunk
    };
    let mut cursor = window;
    let mut model: Vec<(u64, u64, u64, bool)> = Vec::new(); // begin, end, address, deleted
    for _ in 0..rng.range(1, 12) {
        let gap = match rng.range(0, 3) {
            0 => 0,
            1 => rng.range(1, 0x100),
            2 => rng.range(0x100, chunk),
            _ => rng.range(chunk, 8 * chunk),
        };
        let size = match rng.range(0, 3) {
            0 => rng.range(1, 0x40),
            1 => rng.range(0x40, chunk),
            _ => rng.range(chunk, 4 * chunk),
        };
        let begin = cursor + gap;
        let deleted = rng.range(0, 7) == 0;
        let s = Section {
            next_for_delete: if deleted { 0x0111_0000 } else { 0 },
            ..code_section(begin, begin + size)
        };
        let addr = w.add_mapped(s);
        model.push((begin, begin + size, addr, deleted));
        cursor = begin + size;
    }
    let (target, d) = w.build();
    let mut probes = Vec::new();
    for (b, e, _, _) in &model {
        probes.extend([b.wrapping_sub(1), *b, b + 1, e - 1, *e, e + 1]);
        let mut c = b / chunk * chunk;
        while c <= *e {
            probes.extend([c.wrapping_sub(1), c]);
            c += chunk;
        }
    }
    for _ in 0..200 {
        probes.push(rng.range(window.saturating_sub(chunk), cursor + chunk));
    }
    for ip in probes {
        let want = model
            .iter()
            .find(|(b, e, _, _)| *b <= ip && ip < *e)
            .and_then(|(_, _, a, deleted)| (!deleted).then_some(*a));
        assert_eq!(
            find(&target, &d, ip),
            want,
            "seed {seed} {layout:?} ip {ip:#x} model {model:x?}"
        );
    }
    let all = all_range_sections(&target, &d).expect("enumerate");
    let got: BTreeSet<u64> = all.iter().map(|s| s.address).collect();
    let want: BTreeSet<u64> = model.iter().filter(|m| !m.3).map(|m| m.2).collect();
    assert_eq!(got, want, "seed {seed} {layout:?}");
    assert_eq!(got.len(), all.len(), "seed {seed}: a section listed twice");
    // Listed in the order of their first chunk.
    let first_chunks: Vec<u64> = all.iter().map(|s| s.range_begin / chunk).collect();
    assert!(first_chunks.windows(2).all(|p| p[0] <= p[1]), "seed {seed}");
}

#[test]
fn random_maps_match_model() {
    for seed in 0..64u64 {
        for (layout, f) in worlds() {
            check_random_map(seed, layout, f);
        }
    }
}
