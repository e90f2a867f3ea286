//! Nibble map test suite (`cdac::contracts::execution_manager::nibble_map`).
//!
//! Covers the digest's worked examples (§7.8, §7.9), the scenarios of the upstream cDAC tests
//! `src/native/managed/cdac/tests/ExecutionManager/NibbleMapTests.cs` (round trip of
//! addresses, exhaustive nibble shifts, one method looked up at every address, for the linear
//! and the constant-time map), randomized heaps checked at every address against a
//! brute-force model of what each version must answer, the bounds of the backward scan
//! (heap start, scan limit), the v2 promise of at most two map units read, and damaged maps
//! (random units never panic and give an answer inside the heap or a typed error).
//!
//! The map is written here from the spec's write rules (`write_v1`, `write_v2`), in target
//! byte order by the `MemoryBuilder`, never with the library's helpers. Every test runs over
//! all of `DataLayout::ALL` (the map is a `u32` array, so the pointer size only changes how a
//! `CodeHeapListNode` is laid out).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cdac::contracts::execution_manager::nibble_map::{
    decompose, find_method_start, nibble_shift, start_offset, NibbleMap, NibbleMapVersion,
};
use cdac::contracts::ContractError;
use cdac::descriptor::{json, DataDescriptor};
use cdac::limits::Limit;
use cdac::memory::builder::{BuiltMemory, MemoryBuilder};
use cdac::memory::{
    DataLayout, MappedFile, MemorySource, ReadError, Target, TargetKind, ThreadInfo,
};
use proptest::prelude::*;

const VERSIONS: [NibbleMapVersion; 2] = [NibbleMapVersion::Linear, NibbleMapVersion::Constant];

// ---------------------------------------------------------------------------------------------
// The write side, from the spec (digest §7.7–7.9).
// ---------------------------------------------------------------------------------------------

/// A nibble map under construction: units indexed from map offset 0.
#[derive(Clone)]
struct MapImage {
    units: Vec<u32>,
}

impl MapImage {
    /// A zeroed map covering map-relative offsets `0..=last_rel`.
    fn covering(last_rel: u64) -> MapImage {
        MapImage {
            units: vec![0; (last_rel / 256 + 1) as usize],
        }
    }

    /// Records a method start (4-byte aligned, map-relative): nibble `1 + (rel % 32) / 4` at
    /// nibble index `(rel / 32) % 8` (index 0 = most significant) of unit `rel / 256`.
    fn write_v1(&mut self, rel: u64) {
        assert_eq!(rel % 4, 0, "code starts are 4-byte aligned");
        let bucket = rel / 32;
        let value = (1 + (rel % 32) / 4) as u32;
        let shift = 28 - 4 * (bucket % 8) as u32;
        let unit = &mut self.units[(rel / 256) as usize];
        assert_eq!(
            (*unit >> shift) & 0xF,
            0,
            "two starts in one bucket at {rel:#x}"
        );
        *unit |= value << shift;
    }

    /// v1 start nibble, plus the encoded pointer in every unit after the start's unit that
    /// the method covers entirely (`(unit + 1) * 256 <= rel + size`).
    fn write_v2(&mut self, rel: u64, size: u64) {
        self.write_v1(rel);
        let encoded = ((rel as u32) & !0xF) + (((rel as u32) & 0xF) >> 2) + 9;
        let mut unit = rel / 256 + 1;
        while (unit + 1) * 256 <= rel + size {
            assert_eq!(self.units[unit as usize], 0, "unit {unit} written twice");
            self.units[unit as usize] = encoded;
            unit += 1;
        }
    }

    fn write(&mut self, version: NibbleMapVersion, rel: u64, size: u64) {
        match version {
            NibbleMapVersion::Linear => self.write_v1(rel),
            NibbleMapVersion::Constant => self.write_v2(rel, size),
        }
    }
}

/// Counts the reads made through a source.
struct Counting {
    inner: BuiltMemory,
    reads: AtomicU64,
    bytes: AtomicU64,
}

impl MemorySource for Counting {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.read_exact(addr, buf)
    }
    fn mapped_files(&self) -> &[MappedFile] {
        self.inner.mapped_files()
    }
    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        self.inner.threads()
    }
    fn kind(&self) -> TargetKind {
        self.inner.kind()
    }
    fn native_layout(&self) -> Option<DataLayout> {
        self.inner.native_layout()
    }
}

/// A code heap and its map in target memory.
struct Heap {
    target: Target,
    counter: Arc<Counting>,
    map: NibbleMap,
}

impl Heap {
    /// Lays out `image` at `header_map`, but only its units from the heap start's unit on, so
    /// that any read below the heap start fails.
    fn new(
        layout: DataLayout,
        version: NibbleMapVersion,
        map_base: u64,
        header_map: u64,
        heap_start: u64,
        heap_end: u64,
        image: &MapImage,
    ) -> Heap {
        let first = ((heap_start - map_base) / 256) as usize;
        Heap::with_units_from(
            layout, version, map_base, header_map, heap_start, heap_end, image, first,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn with_units_from(
        layout: DataLayout,
        version: NibbleMapVersion,
        map_base: u64,
        header_map: u64,
        heap_start: u64,
        heap_end: u64,
        image: &MapImage,
        first: usize,
    ) -> Heap {
        let mut b = MemoryBuilder::new(layout);
        let units = &image.units[first..];
        let region = b.region(header_map + 4 * first as u64, 4 * units.len());
        for (i, u) in units.iter().enumerate() {
            region.u32(4 * i, *u);
        }
        let counter = Arc::new(Counting {
            inner: b.build(),
            reads: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        });
        let target = Target::new(counter.clone(), layout);
        Heap {
            target,
            counter,
            map: NibbleMap::new(version, map_base, header_map, heap_start, heap_end),
        }
    }

    fn find(&self, addr: u64) -> Result<Option<u64>, ContractError> {
        self.map.find_method_start(&self.target, addr)
    }

    /// Looks `addr` up, panicking on an error, and returns the answer with the number of
    /// reads and bytes it took.
    fn find_counted(&self, addr: u64) -> (Option<u64>, u64, u64) {
        let r0 = self.counter.reads.load(Ordering::Relaxed);
        let b0 = self.counter.bytes.load(Ordering::Relaxed);
        let got = self
            .find(addr)
            .unwrap_or_else(|e| panic!("lookup of {addr:#x} failed: {e}"));
        (
            got,
            self.counter.reads.load(Ordering::Relaxed) - r0,
            self.counter.bytes.load(Ordering::Relaxed) - b0,
        )
    }
}

/// A code block: absolute start and size in bytes.
#[derive(Debug, Clone, Copy)]
struct Method {
    start: u64,
    size: u64,
}

/// What a lookup must answer, from the spec (digest §7.8, §7.9), given the methods (sorted,
/// non-overlapping, one start per 32-byte bucket).
fn model(
    version: NibbleMapVersion,
    methods: &[Method],
    map_base: u64,
    heap_start: u64,
    heap_end: u64,
    addr: u64,
) -> Option<u64> {
    if addr < heap_start || addr > heap_end {
        return None;
    }
    // The last method starting at or before the address.
    let i = methods.partition_point(|m| m.start <= addr);
    let p = methods[..i].last()?;
    match version {
        // The backward scan finds the previous start whatever lies between.
        NibbleMapVersion::Linear => Some(p.start),
        NibbleMapVersion::Constant => {
            if addr < p.start + p.size {
                return Some(p.start); // inside the method: exact
            }
            // In the gap after p: found only through the address's own unit (p starts there)
            // or the unit before it (p starts there, or covers it whole, leaving a pointer).
            let unit = (addr - map_base) / 256;
            let p_unit = (p.start - map_base) / 256;
            let covers_prev = unit >= 1 && p.start + p.size - map_base >= unit * 256;
            (p_unit + 1 >= unit || covers_prev).then_some(p.start)
        }
    }
}

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
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Random methods after `heap_start`: 4-byte aligned starts, one per bucket at most, sizes
/// and gaps from tiny to several map units.
fn random_methods(rng: &mut Rng, heap_start: u64, count: usize) -> Vec<Method> {
    let mut out: Vec<Method> = Vec::new();
    let mut cursor = heap_start;
    for _ in 0..count {
        let gap = match rng.range(0, 9) {
            0..=3 => 0,
            4..=6 => rng.range(1, 64),
            7 | 8 => rng.range(65, 700),
            _ => rng.range(701, 3000),
        };
        let mut start = (cursor + gap).div_ceil(4) * 4;
        if let Some(prev) = out.last() {
            if start / 32 == prev.start / 32 {
                start = (start / 32 + 1) * 32;
            }
        }
        let size = match rng.range(0, 9) {
            0..=2 => rng.range(1, 40),
            3..=6 => rng.range(41, 600),
            _ => rng.range(601, 3000),
        };
        out.push(Method { start, size });
        cursor = start + size;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Digest worked examples.
// ---------------------------------------------------------------------------------------------

#[test]
fn digest_example_v1() {
    for layout in DataLayout::ALL {
        let mut image = MapImage::covering(0x5FF);
        image.write_v1(0x130);
        // Nibble 5 at nibble index 1 of unit 1 (shift 24, not the upstream doc's 22).
        assert_eq!(image.units[1], 0x0500_0000);
        let heap = Heap::new(
            layout,
            NibbleMapVersion::Linear,
            0,
            0x0456_1000,
            0,
            0x5FF,
            &image,
        );
        let cases = [
            (0x130, Some(0x130)),
            (0x132, Some(0x130)),
            (0x12E, None),
            (0x1F0, Some(0x130)),
        ];
        for (addr, want) in cases {
            assert_eq!(heap.find(addr).ok(), Some(want), "{layout:?} {addr:#x}");
        }
    }
}

#[test]
fn digest_example_v2() {
    for layout in DataLayout::ALL {
        let mut image = MapImage::covering(0x5FF);
        image.write_v2(0x130, 0x400);
        // 0x139, not the upstream doc's 0x137.
        assert_eq!(image.units[..6], [0, 0x0500_0000, 0x139, 0x139, 0x139, 0]);
        let heap = Heap::new(
            layout,
            NibbleMapVersion::Constant,
            0,
            0x0456_1000,
            0,
            0x5FF,
            &image,
        );
        for addr in [0x514, 0x350, 0x1F0, 0x130, 0x52F] {
            assert_eq!(
                heap.find(addr).ok(),
                Some(Some(0x130)),
                "{layout:?} {addr:#x}"
            );
        }
        assert_eq!(heap.find(0x12E).ok(), Some(None), "{layout:?}");
    }
}

#[test]
fn digest_pointer_encodings_as_written() {
    // The write rule's encodings, read back by a lookup in the covered unit.
    for (start, unit) in [
        (0x130u64, 0x139u32),
        (0x134, 0x13A),
        (0x138, 0x13B),
        (0x13C, 0x13C),
    ] {
        let mut image = MapImage::covering(0x3FF);
        image.write_v2(start, 0x300);
        assert_eq!(image.units[2], unit, "{start:#x}");
        for layout in DataLayout::ALL {
            let heap = Heap::new(
                layout,
                NibbleMapVersion::Constant,
                0x7000_0000,
                0x0456_1000,
                0x7000_0000,
                0x7000_03FF,
                &MapImage {
                    units: image.units.clone(),
                },
            );
            let got = heap.find(0x7000_0200 + 0x80).ok();
            assert_eq!(
                got,
                Some(Some(0x7000_0000 + start)),
                "{layout:?} {start:#x}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream NibbleMapTests.cs.
// ---------------------------------------------------------------------------------------------

/// Upstream `RoundTripAddressTest`: decomposing an aligned address into bucket and nibble and
/// back gives the address.
#[test]
fn round_trip_address() {
    let map_base = 0u64;
    for p in (map_base..map_base + 0x1000).step_by(0x10) {
        let (map_idx, nibble) = decompose(p - map_base);
        assert_eq!(start_offset(map_idx, nibble).map(|r| map_base + r), Some(p));
    }
    // Every 4-byte aligned offset, not only multiples of 16.
    for p in (0..0x1000u64).step_by(4) {
        let (map_idx, nibble) = decompose(p);
        assert_eq!(start_offset(map_idx, nibble), Some(p));
    }
}

/// Upstream `ExhaustiveNibbbleShifts`: nibble index 0 is the most significant nibble, for
/// any map index.
#[test]
fn exhaustive_nibble_shifts() {
    for irrelevant in [0u64, 0x100, 0xab00, 0xabcd_abcd_7fff_ff00] {
        let mut expected = 28i64;
        for i in 0..255u64 {
            assert_eq!(
                i64::from(nibble_shift(irrelevant + i)),
                expected,
                "map index {:#x}",
                irrelevant + i
            );
            expected -= 4;
            if expected == -4 {
                expected = 28;
            }
        }
    }
}

/// Upstream `NibbleMapLinearLookupTests.NibbleMapOneItemLookupOk`: one method of 0x80 bytes
/// at map base + 0x200 in a 0x1000-byte range; every address of the method and every
/// address after it maps to its start, every address before it to nothing.
#[test]
fn linear_one_item_lookup() {
    let map_base = 0x5f5f_0000u64;
    let map_start = 0x0456_1000u64;
    let range = 0x1000u64;
    let map_end = map_base + range;
    let pc = map_base + 0x200;
    let size = 0x80u64;
    let mut image = MapImage::covering(range - 1);
    image.write_v1(pc - map_base);
    for layout in DataLayout::ALL {
        let heap = Heap::new(
            layout,
            NibbleMapVersion::Linear,
            map_base,
            map_start,
            map_base,
            map_end - 1,
            &image,
        );
        assert_eq!(heap.find(pc).ok(), Some(Some(pc)), "{layout:?}");
        for a in pc..pc + size {
            assert_eq!(heap.find(a).ok(), Some(Some(pc)), "{layout:?} {a:#x}");
        }
        for a in map_base..pc {
            assert_eq!(heap.find(a).ok(), Some(None), "{layout:?} {a:#x}");
        }
        assert_eq!(heap.find(pc + 0x100).ok(), Some(Some(pc)), "{layout:?}");
        // The map does not record lengths: everything after the method maps to it.
        for a in pc + size..map_end {
            assert_eq!(heap.find(a).ok(), Some(Some(pc)), "{layout:?} {a:#x}");
        }
    }
}

/// Upstream `NibbleMapConstantLookupTests.NibbleMapOneItemLookupOk`: one method of 0x400
/// bytes at map base + 0x200; every address of the method maps to its start, every address
/// before it and every address 512 bytes or more after its end to nothing. (The model test
/// below pins the addresses in between exactly.)
#[test]
fn constant_one_item_lookup() {
    let map_base = 0x5f5f_0000u64;
    let map_start = 0x0456_1000u64;
    let range = 0x1000u64;
    let map_end = map_base + range;
    let pc = map_base + 0x200;
    let size = 0x400u64;
    let mut image = MapImage::covering(range - 1);
    image.write_v2(pc - map_base, size);
    let methods = [Method { start: pc, size }];
    for layout in DataLayout::ALL {
        let heap = Heap::new(
            layout,
            NibbleMapVersion::Constant,
            map_base,
            map_start,
            map_base,
            map_end - 1,
            &image,
        );
        assert_eq!(heap.find(pc).ok(), Some(Some(pc)), "{layout:?}");
        for a in pc..pc + size {
            assert_eq!(heap.find(a).ok(), Some(Some(pc)), "{layout:?} {a:#x}");
        }
        for a in map_base..pc {
            assert_eq!(heap.find(a).ok(), Some(None), "{layout:?} {a:#x}");
        }
        for a in pc + size + 512..map_end {
            assert_eq!(heap.find(a).ok(), Some(None), "{layout:?} {a:#x}");
        }
        for a in pc + size..pc + size + 512 {
            let want = model(
                NibbleMapVersion::Constant,
                &methods,
                map_base,
                map_base,
                map_end - 1,
                a,
            );
            assert_eq!(heap.find(a).ok(), Some(want), "{layout:?} {a:#x}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Randomized heaps against the model.
// ---------------------------------------------------------------------------------------------

/// Builds a random heap for `version` and checks every address from below the map base to
/// past the heap end against the model; also that v2 reads at most two units per lookup and
/// v1 never reads a unit outside `[heap start's unit, address's unit]`.
fn check_random_heap(seed: u64, layout: DataLayout, version: NibbleMapVersion) {
    let mut rng = Rng::new(seed);
    let map_base = 0x7f00_0000u64 + rng.range(0, 0xff) * 0x1000;
    let header_map = 0x0100_0000u64 + rng.range(0, 0xfff) * 4;
    // The heap starts anywhere in its first pages, not necessarily aligned.
    let heap_start = map_base
        + match rng.range(0, 3) {
            0 => 0,
            1 => rng.range(1, 255),
            _ => rng.range(256, 1500),
        };
    let count = rng.range(0, 24) as usize;
    let methods = random_methods(&mut rng, heap_start, count);
    let used_end = methods.last().map_or(heap_start, |m| m.start + m.size);
    let heap_end = used_end.max(heap_start + 1) - 1 + rng.range(0, 700);
    let mut image = MapImage::covering(heap_end - map_base);
    for m in &methods {
        image.write(version, m.start - map_base, m.size);
    }
    let heap = Heap::new(
        layout, version, map_base, header_map, heap_start, heap_end, &image,
    );
    let lowest_unit = (heap_start - map_base) / 256;
    for addr in map_base.saturating_sub(40)..=heap_end + 40 {
        let want = model(version, &methods, map_base, heap_start, heap_end, addr);
        let (got, reads, bytes) = heap.find_counted(addr);
        assert_eq!(
            got, want,
            "seed {seed} {layout:?} {version:?} addr {addr:#x} methods {methods:x?} heap {heap_start:#x}..={heap_end:#x}"
        );
        if addr < heap_start || addr > heap_end {
            assert_eq!(reads, 0, "seed {seed}: out-of-heap lookup read the map");
            continue;
        }
        match version {
            NibbleMapVersion::Constant => {
                assert!(
                    reads <= 2 && bytes <= 8,
                    "seed {seed} {addr:#x}: {reads} reads"
                )
            }
            NibbleMapVersion::Linear => {
                let span = (addr - map_base) / 256 - lowest_unit + 1;
                assert!(
                    bytes <= 4 * span,
                    "seed {seed} {addr:#x}: {bytes} bytes read"
                );
            }
        }
    }
}

#[test]
fn random_heaps_match_model_linear() {
    for seed in 0..96 {
        let layout = DataLayout::ALL[(seed % 4) as usize];
        check_random_heap(seed, layout, NibbleMapVersion::Linear);
    }
}

#[test]
fn random_heaps_match_model_constant() {
    for seed in 0..96 {
        let layout = DataLayout::ALL[(seed % 4) as usize];
        check_random_heap(1000 + seed, layout, NibbleMapVersion::Constant);
    }
}

/// Dense heaps: back-to-back methods with no gaps, starts in consecutive buckets where
/// possible, so that every nibble position and every marker value occurs.
#[test]
fn packed_heaps_match_model() {
    for version in VERSIONS {
        for layout in DataLayout::ALL {
            for (k, sizes) in [
                vec![32u64; 40],
                vec![36; 40],
                vec![4; 1],
                (0..60).map(|i| 32 + 4 * (i % 9)).collect::<Vec<_>>(),
                vec![256, 512, 257, 255, 1024, 300, 4, 260],
            ]
            .into_iter()
            .enumerate()
            {
                let map_base = 0x10_0000u64;
                let mut methods = Vec::new();
                let mut cursor = map_base;
                for s in sizes {
                    let mut start = cursor.div_ceil(4) * 4;
                    if let Some(p) = methods.last().map(|m: &Method| m.start / 32) {
                        if start / 32 == p {
                            start = (p + 1) * 32;
                        }
                    }
                    methods.push(Method { start, size: s });
                    cursor = start + s;
                }
                let heap_end = cursor + 300;
                let mut image = MapImage::covering(heap_end - map_base);
                for m in &methods {
                    image.write(version, m.start - map_base, m.size);
                }
                let heap = Heap::new(
                    layout, version, map_base, 0x2000, map_base, heap_end, &image,
                );
                for addr in map_base..=heap_end {
                    let want = model(version, &methods, map_base, map_base, heap_end, addr);
                    assert_eq!(
                        heap.find(addr).ok(),
                        Some(want),
                        "case {k} {layout:?} {version:?} {addr:#x}"
                    );
                }
            }
        }
    }
}

/// Big heap, sampled: methods spread over 1 MiB with large gaps.
#[test]
fn large_sparse_heap_sampled() {
    for version in VERSIONS {
        for layout in DataLayout::ALL {
            let mut rng = Rng::new(77);
            let map_base = 0x4000_0000u64;
            let mut methods = Vec::new();
            let mut cursor = map_base + 0x40;
            while cursor < map_base + (1 << 20) {
                let mut start = (cursor + rng.range(0, 20_000)).div_ceil(4) * 4;
                if let Some(p) = methods.last().map(|m: &Method| m.start / 32) {
                    if start / 32 == p {
                        start = (p + 1) * 32;
                    }
                }
                let size = rng.range(1, 5000);
                methods.push(Method { start, size });
                cursor = start + size;
            }
            let heap_end = cursor + 100;
            let mut image = MapImage::covering(heap_end - map_base);
            for m in &methods {
                image.write(version, m.start - map_base, m.size);
            }
            let heap = Heap::new(
                layout,
                version,
                map_base,
                0x0200_0000,
                map_base + 0x40,
                heap_end,
                &image,
            );
            let mut probes: Vec<u64> = (0..4000).map(|_| rng.range(map_base, heap_end)).collect();
            for m in &methods {
                probes.extend([m.start - 1, m.start, m.start + m.size - 1, m.start + m.size]);
            }
            for addr in probes {
                let want = model(version, &methods, map_base, map_base + 0x40, heap_end, addr);
                assert_eq!(
                    heap.find(addr).ok(),
                    Some(want),
                    "{layout:?} {version:?} {addr:#x}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bounds: heap range guard, heap start, scan limit.
// ---------------------------------------------------------------------------------------------

/// `addr < StartAddress` or `addr > EndAddress` is not found without reading the map;
/// `EndAddress` itself is inside.
#[test]
fn range_guard_is_inclusive_of_end() {
    for version in VERSIONS {
        for layout in DataLayout::ALL {
            let map_base = 0x10_0000u64;
            let mut image = MapImage::covering(0xFFF);
            image.write(version, 0x100, 0x200);
            let heap = Heap::new(
                layout,
                version,
                map_base,
                0x2000,
                map_base + 0x80,
                map_base + 0x2FF,
                &image,
            );
            assert_eq!(heap.find_counted(map_base + 0x7F), (None, 0, 0));
            assert_eq!(heap.find_counted(map_base + 0x300), (None, 0, 0));
            assert_eq!(heap.find_counted(0), (None, 0, 0));
            assert_eq!(heap.find_counted(u64::MAX), (None, 0, 0));
            assert_eq!(
                heap.find(map_base + 0x2FF).ok(),
                Some(Some(map_base + 0x100))
            );
            // The free function gives the same answers.
            let f = |a| {
                find_method_start(
                    &heap.target,
                    version,
                    map_base,
                    0x2000,
                    map_base + 0x80,
                    map_base + 0x2FF,
                    a,
                )
                .ok()
            };
            assert_eq!(f(map_base + 0x2FF), Some(Some(map_base + 0x100)));
            assert_eq!(f(map_base + 0x300), Some(None));
        }
    }
}

/// The linear scan stops at the unit of the heap start: units below it, even non-zero, are
/// never read (they are mapped here, full of garbage).
#[test]
fn linear_scan_stops_at_heap_start() {
    for layout in DataLayout::ALL {
        let map_base = 0x10_0000u64;
        let heap_start = map_base + 0x10 * 256 + 0x40;
        let mut image = MapImage::covering(0x3FFF);
        for u in &mut image.units[..0x10] {
            *u = 0x1234_5678;
        }
        image.write_v1(heap_start + 0x2000 - map_base);
        let heap = Heap::with_units_from(
            layout,
            NibbleMapVersion::Linear,
            map_base,
            0x2000,
            heap_start,
            map_base + 0x3FFF,
            &image,
            0,
        );
        for addr in [heap_start, heap_start + 1, heap_start + 0x1FFF] {
            let (got, _, bytes) = heap.find_counted(addr);
            assert_eq!(got, None, "{layout:?} {addr:#x}");
            let span = (addr - map_base) / 256 - 0x10 + 1;
            assert!(
                bytes <= 4 * span,
                "{layout:?} {addr:#x}: read {bytes} bytes"
            );
        }
        assert_eq!(
            heap.find(heap_start + 0x2000).ok(),
            Some(Some(heap_start + 0x2000))
        );
    }
}

/// The scan limit: a start `d` units back needs `d` units scanned; one fewer is
/// `LimitExceeded`, naming the address and the limit.
#[test]
fn linear_scan_limit() {
    for layout in DataLayout::ALL {
        let map_base = 0x10_0000u64;
        let mut image = MapImage::covering(0x1_0000 * 256 - 1);
        image.write_v1(0x40);
        let last = map_base + 0x1_0000 * 256 - 1;
        let heap = Heap::new(
            layout,
            NibbleMapVersion::Linear,
            map_base,
            0x0100_0000,
            map_base,
            last,
            &image,
        );
        // Unit of `last` is 0xFFFF: units 0xFFFE down to 0 are scanned, 0xFFFF of them.
        let needed = 0xFFFF;
        let ok = heap.map.with_scan_limit(needed);
        assert_eq!(
            ok.find_method_start(&heap.target, last).ok(),
            Some(Some(map_base + 0x40))
        );
        let short = heap.map.with_scan_limit(needed - 1);
        match short.find_method_start(&heap.target, last) {
            Err(ContractError::LimitExceeded {
                addr, limit, cap, ..
            }) => {
                assert_eq!(
                    (addr, limit, cap),
                    (last, Limit::MapScan, needed - 1),
                    "{layout:?}"
                );
            }
            other => panic!("{layout:?}: expected LimitExceeded, got {other:?}"),
        }
        // The default limit is far above real heaps.
        assert_eq!(heap.find(last).ok(), Some(Some(map_base + 0x40)));
        // Limit 0: any scan at all fails, a hit in the address's own unit does not.
        let zero = heap.map.with_scan_limit(0);
        assert_eq!(
            zero.find_method_start(&heap.target, map_base + 0x44).ok(),
            Some(Some(map_base + 0x40))
        );
        assert!(matches!(
            zero.find_method_start(&heap.target, map_base + 0x100),
            Err(ContractError::LimitExceeded { .. })
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Damaged maps.
// ---------------------------------------------------------------------------------------------

/// A heap start below the map base is corrupt (it would make offsets negative).
#[test]
fn heap_start_below_map_base_is_corrupt() {
    for version in VERSIONS {
        let heap = Heap::with_units_from(
            DataLayout::LE64,
            version,
            0x10_1000,
            0x2000,
            0x10_1000,
            0x10_2000,
            &MapImage::covering(0xFFF),
            0,
        );
        let bad = NibbleMap {
            heap_start: 0x10_0F00,
            ..heap.map
        };
        assert!(matches!(
            bad.find_method_start(&heap.target, 0x10_1000),
            Err(ContractError::Corrupt { .. })
        ));
    }
}

/// Specific impossible units give `Corrupt` naming the unit's address.
#[test]
fn impossible_units_are_corrupt() {
    let map_base = 0x10_0000u64;
    let header_map = 0x2000u64;
    // (version, unit index, unit value, address looked up (relative))
    let cases: [(NibbleMapVersion, usize, u32, u64); 8] = [
        // A nibble value 9..15 where a start nibble belongs.
        (NibbleMapVersion::Linear, 1, 0x0900_0000, 0x1F0),
        (NibbleMapVersion::Linear, 1, 0x0000_000F, 0x1FC),
        (NibbleMapVersion::Linear, 0, 0xA000_0000, 0x1F0),
        // v2: a pointer marker 13..15.
        (NibbleMapVersion::Constant, 1, 0x0000_013D, 0x1F0),
        // v2: a pointer to a start after the address.
        (NibbleMapVersion::Constant, 1, 0x0000_0209, 0x110),
        // v2: a pointer below the heap start (0x40).
        (NibbleMapVersion::Constant, 1, 0x0000_0009, 0x110),
        // v2: a nibble 9..15 in a non-pointer unit.
        (NibbleMapVersion::Constant, 1, 0xB000_0000, 0x1F0),
        // v1: a start nibble below the heap start, in the heap start's unit.
        (NibbleMapVersion::Linear, 0, 0x1000_0000, 0x1F0),
    ];
    for (version, unit, value, rel) in cases {
        for layout in DataLayout::ALL {
            let mut image = MapImage::covering(0x3FF);
            image.units[unit] = value;
            let heap = Heap::new(
                layout,
                version,
                map_base,
                header_map,
                map_base + 0x40,
                map_base + 0x3FF,
                &image,
            );
            match heap.find(map_base + rel) {
                Err(ContractError::Corrupt { addr, .. }) => {
                    assert_eq!(addr, header_map + 4 * unit as u64, "{version:?} {value:#x}")
                }
                other => {
                    panic!("{version:?} {layout:?} {value:#x}: expected Corrupt, got {other:?}")
                }
            }
        }
    }
}

/// A map whose units cannot be read gives the read error, naming the unit's address.
#[test]
fn unreadable_map_is_a_read_error() {
    for version in VERSIONS {
        let target = MemoryBuilder::new(DataLayout::LE64).into_target();
        let map = NibbleMap::new(version, 0x10_0000, 0x2000, 0x10_0000, 0x10_0FFF);
        match map.find_method_start(&target, 0x10_0345) {
            Err(ContractError::Read(e)) => assert_eq!(e.address(), 0x2000 + 4 * 3),
            other => panic!("{version:?}: expected a read error, got {other:?}"),
        }
    }
}

/// Checks one lookup in a damaged map: no panic, and either a typed error or an answer
/// inside `[heap_start, addr]`.
fn check_garbage(
    layout: DataLayout,
    version: NibbleMapVersion,
    units: &[u32],
    start_off: u64,
    addr_off: u64,
) {
    let map_base = 0x0800_0000u64;
    let last_rel = units.len() as u64 * 256 - 1;
    let heap_start = map_base + start_off % (last_rel + 1);
    let heap_end = map_base + last_rel;
    let image = MapImage {
        units: units.to_vec(),
    };
    let heap = Heap::new(
        layout, version, map_base, 0x3000, heap_start, heap_end, &image,
    );
    let addr = map_base + addr_off % (last_rel + 64);
    match heap.find(addr) {
        Ok(None) => {}
        Ok(Some(s)) => assert!(
            s >= heap_start && s <= addr,
            "{version:?}: start {s:#x} outside [{heap_start:#x}, {addr:#x}]"
        ),
        Err(ContractError::Corrupt { .. }) | Err(ContractError::LimitExceeded { .. }) => {}
        Err(e) => panic!("{version:?}: unexpected error {e}"),
    }
}

/// Units biased towards the values that matter: zero, start nibbles, pointer markers.
fn unit_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => Just(0u32),
        2 => any::<u32>(),
        2 => (0u32..8, 1u32..=8).prop_map(|(pos, v)| v << (28 - 4 * pos)),
        2 => (0u32..0x1000, 9u32..=15).prop_map(|(hi, m)| (hi << 4) | m),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn garbage_maps_never_panic(
        units in proptest::collection::vec(unit_strategy(), 1..24),
        start_off in any::<u64>(),
        addr_off in any::<u64>(),
        layout in 0usize..4,
        constant in any::<bool>(),
    ) {
        let version = if constant { NibbleMapVersion::Constant } else { NibbleMapVersion::Linear };
        check_garbage(DataLayout::ALL[layout], version, &units, start_off, addr_off);
    }
}

/// Extreme map parameters: arithmetic near the top of the address space never panics.
#[test]
fn extreme_parameters_never_panic() {
    let target = MemoryBuilder::new(DataLayout::LE64).into_target();
    for version in VERSIONS {
        for (map_base, header_map, start, end, addr) in [
            (0, u64::MAX - 3, 0, u64::MAX, u64::MAX),
            (0, u64::MAX, 0, u64::MAX, 0x1_0000),
            (
                u64::MAX - 0x100,
                0x1000,
                u64::MAX - 0x100,
                u64::MAX,
                u64::MAX,
            ),
            (0, 0, 0, u64::MAX, u64::MAX - 1),
        ] {
            let map = NibbleMap::new(version, map_base, header_map, start, end).with_scan_limit(64);
            let _ = map.find_method_start(&target, addr);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the map's description from a CodeHeapListNode.
// ---------------------------------------------------------------------------------------------

/// `NibbleMap::from_heap_list_node` reads the four fields at the descriptor's offsets.
#[test]
fn from_heap_list_node_reads_descriptor_fields() {
    for layout in DataLayout::ALL {
        let p = layout.pointer_size as u64;
        // Our own layout, deliberately not sequential in the fields we read.
        let (next, start, end, base, map) = (0, 3 * p, 2 * p, 5 * p, 4 * p);
        let text = format!(
            r#"{{"version":0,"types":{{"CodeHeapListNode":{{"Next":{next},"StartAddress":{start},"EndAddress":{end},"MapBase":{base},"HeaderMap":{map}}}}}}}"#
        );
        let physical = json::parse("test", text.as_bytes()).expect("descriptor JSON");
        let mut d = DataDescriptor::new(layout);
        d.merge("test", &physical, &[0]).expect("merge");
        let mut b = MemoryBuilder::new(layout);
        let node = b.alloc(8 * p as usize, 8);
        node.pointer(start as usize, 0x7010_0040)
            .pointer(end as usize, 0x7010_0FFF)
            .pointer(base as usize, 0x7010_0000)
            .pointer(map as usize, 0x0300_0000);
        let node_addr = node.addr;
        let mut image = MapImage::covering(0xFFF);
        image.write_v1(0x100);
        let region = b.region(0x0300_0000, 4 * image.units.len());
        for (i, u) in image.units.iter().enumerate() {
            region.u32(4 * i, *u);
        }
        let target = b.into_target();
        let nm = NibbleMap::from_heap_list_node(&target, &d, NibbleMapVersion::Linear, node_addr)
            .expect("node");
        assert_eq!(
            (nm.map_base, nm.header_map, nm.heap_start, nm.heap_end),
            (0x7010_0000, 0x0300_0000, 0x7010_0040, 0x7010_0FFF),
            "{layout:?}"
        );
        assert_eq!(
            nm.find_method_start(&target, 0x7010_0180).ok(),
            Some(Some(0x7010_0100))
        );
        // A descriptor without the type is a descriptor error.
        let empty = DataDescriptor::new(layout);
        assert!(matches!(
            NibbleMap::from_heap_list_node(&target, &empty, NibbleMapVersion::Linear, node_addr),
            Err(ContractError::Descriptor(_))
        ));
    }
}

#[test]
fn contract_versions_map_to_schemes() {
    assert_eq!(
        NibbleMapVersion::for_contract_version(1),
        Some(NibbleMapVersion::Linear)
    );
    assert_eq!(
        NibbleMapVersion::for_contract_version(2),
        Some(NibbleMapVersion::Constant)
    );
    assert_eq!(NibbleMapVersion::for_contract_version(3), None);
}
