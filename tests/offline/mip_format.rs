//! LLVM MIP files (`cdac::formats::mip`): fixtures written byte by byte from the format
//! document (not with the crate's writer), their decoded values, round trips, the
//! profile operations, and malformed input.

use cdac::formats::mip::{
    self, create_from_map, function_coverage_profile, merge, merge_raw_into, show_rows,
    BlockProfile, CallEdge, FileKind, Header, Layout, MapEntry, MapPcOffsets, MipError, MipMap,
    NamesEncoding, Profile, ProfileFlags, ProfileFunction, RawCounters, RawProfile, RawRecord,
    ResolvedOffsets, Width,
};
use cdac::formats::Truncation;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// A tiny little-endian byte builder, independent of the library's writer.

#[derive(Default, Clone)]
struct B(Vec<u8>);

impl B {
    fn new() -> Self {
        B(Vec::new())
    }
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    fn zeros(mut self, n: usize) -> Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn done(self) -> Vec<u8> {
        self.0
    }
}

const MAGIC: [u8; 4] = [0xFB, 0x4D, 0x49, 0x50];
const HASH_MAIN: u32 = 0xe78dd5fa; // low 32 bits of MD5("main"), from Python's hashlib
const HASH_APP: u32 = 0x4c03c65e; // MD5("app.dll")
const SIG_FOO: u64 = 0x7f8d88fcc70a347b; // MD5("_Z3foov"), first 8 bytes little-endian
const SIG_MAIN: u64 = 0xdb956436e78dd5fa;
const SIG_BAR: u64 = 0xf129122801e64264;
const SIG_A: u64 = 0xa8b6f1c0b975c10c;
const SIG_B: u64 = 0xec2faee6fe5feb92;
const SIG_C: u64 = 0x37b7379df0088a4a;
const SIG_M1: u64 = 0x3347f620ef1e1ef3;
const SIG_M2: u64 = 0x36e2670b5322839d;

/// 24-byte header: magic, version 8, file type, profile type, module hash, reserved,
/// OffsetToData 0x18.
fn old_header(file_type: u16, profile_type: u32, module_hash: u32) -> B {
    B::new()
        .bytes(&MAGIC)
        .u16(8)
        .u16(file_type)
        .u32(profile_type)
        .u32(module_hash)
        .u32(0)
        .u32(0x18)
}

/// 32-byte header: … module hash, i64 RawSectionOffset, reserved, OffsetToData 0x20.
fn new_header(file_type: u16, profile_type: u32, module_hash: u32, raw_section: i64) -> B {
    B::new()
        .bytes(&MAGIC)
        .u16(8)
        .u16(file_type)
        .u32(profile_type)
        .u32(module_hash)
        .i64(raw_section)
        .u32(0)
        .u32(0x20)
}

// ---------------------------------------------------------------------------------------
// Fixtures.

/// Old `.mipraw`, function coverage only: one byte per function.
fn old_raw_coverage() -> Vec<u8> {
    old_header(1, 0x1, HASH_MAIN)
        .u8(0x00)
        .u8(0xFF)
        .u8(0x00)
        .done()
}

/// Old `.mipraw`, function + block coverage; block counts 2, 0, 1 (those of
/// `old_map()`'s entries in raw order). Records at 0x18, 0x1b, 0x1c.
fn old_raw_blocks() -> Vec<u8> {
    old_header(1, 0x3, HASH_MAIN)
        .bytes(&[0x00, 0x00, 0xFF]) // ran; block 1 ran, block 2 did not
        .bytes(&[0xFF]) // never ran, no blocks
        .bytes(&[0x00, 0xFF]) // ran; its block did not
        .done()
}

/// New 64-bit `.mipraw`, timestamp + call count + blocks; block counts 3, 1, 0.
/// Records at 0x20, 0x2c, 0x38.
fn new_raw_counters() -> Vec<u8> {
    new_header(0x11, 0xE, HASH_APP, 0)
        .u32(5)
        .u32(7)
        .bytes(&[0x00, 0xFF, 0x00])
        .zeros(1) // 11 bytes, padded to 12
        .u32(u32::MAX)
        .u32(u32::MAX)
        .bytes(&[0xFF])
        .zeros(3)
        .u32(1)
        .u32(2)
        .done()
}

/// Old `.mipmap`: three entries; raw records at 0x18, 0x1c, 0x1b (so not in raw order),
/// code at -0x1f00, -0x1e00, -0x1d00 from the raw section.
fn old_map(pad_last: bool) -> Vec<u8> {
    let b = old_header(2, 0x3, HASH_MAIN);
    // Entry 0 at 0x18: raw section at -0x100 from here.
    assert_eq!(b.len(), 0x18);
    let b = b
        .i32(-0x100)
        .i32(-0x100 + 0x18)
        .i32(-0x100 - 0x1f00)
        .u32(0x40)
        .u32(0xABCD1234)
        .u32(2)
        .u32(0x10)
        .u32(0x20)
        .u32(7)
        .bytes(b"_Z3foov")
        .zeros(5); // 0x43 -> 0x48
                   // Entry 1 at 0x48, 0x30 further from the raw section.
    assert_eq!(b.len(), 0x48);
    let b = b
        .i32(-0x130)
        .i32(-0x130 + 0x1c)
        .i32(-0x130 - 0x1e00)
        .u32(0x20)
        .u32(0x1111)
        .u32(1)
        .u32(0x8)
        .u32(4)
        .bytes(b"main")
        .zeros(4); // 0x6c -> 0x70
    assert_eq!(b.len(), 0x70);
    let b = b
        .i32(-0x158)
        .i32(-0x158 + 0x1b)
        .i32(-0x158 - 0x1d00)
        .u32(0x10)
        .u32(0x2222)
        .u32(0)
        .u32(7)
        .bytes(b"_Z3barv"); // ends at 0x93
    assert_eq!(b.len(), 0x93);
    if pad_last {
        b.zeros(5).done()
    } else {
        b.done()
    }
}

/// New 64-bit `.mipmap`: RawSectionOffset 0x1000 from the map's start; entries "b", "a",
/// "c" with raw records at 0x2c, 0x20, 0x38 and code at -0x3000, -0x3100, -0x3200.
fn new_map64() -> Vec<u8> {
    let b = new_header(0x14, 0xE, HASH_APP, 0x1000);
    // Entry at 0x20: the raw section is 0x1000 - 0x20 = 0xfe0 ahead.
    let b = b
        .i64(0x2c + 0xfe0)
        .i64(-0x3000 + 0xfe0)
        .u32(0x30)
        .u32(0xC0FFEE)
        .u32(1)
        .u32(0x4)
        .u32(1)
        .bytes(b"b")
        .zeros(3); // 0x45 -> 0x48
    assert_eq!(b.len(), 0x48);
    let b = b
        .i64(0x20 + 0xfb8)
        .i64(-0x3100 + 0xfb8)
        .u32(0x50)
        .u32(0xDEAD)
        .u32(3)
        .u32(0x4)
        .u32(0x8)
        .u32(0xC)
        .u32(1)
        .bytes(b"a")
        .zeros(3); // 0x75 -> 0x78
    assert_eq!(b.len(), 0x78);
    b.i64(0x38 + 0xf88)
        .i64(-0x3200 + 0xf88)
        .u32(0x8)
        .u32(0xBEEF)
        .u32(0)
        .u32(1)
        .bytes(b"c")
        .zeros(7) // 0x99 -> 0xa0
        .done()
}

/// New 32-bit `.mipmap`: RawSectionOffset -0x40 in the low half of the field; 4-byte PC
/// offsets, entries padded to 4, the last one not padded.
fn new_map32() -> Vec<u8> {
    let b = B::new()
        .bytes(&MAGIC)
        .u16(8)
        .u16(0x24)
        .u32(0x1)
        .u32(HASH_MAIN)
        .i32(-0x40)
        .u32(0)
        .u32(0)
        .u32(0x20);
    // Entry at 0x20: raw section at -0x40 - 0x20 = -0x60 from here.
    let b = b
        .i32(0x20 - 0x60)
        .i32(-0x500 - 0x60)
        .u32(4)
        .u32(7)
        .u32(0)
        .u32(1)
        .bytes(b"f")
        .zeros(3); // 0x39 -> 0x3c
    assert_eq!(b.len(), 0x3c);
    b.i32(0x21 - 0x7c)
        .i32(-0x400 - 0x7c)
        .u32(4)
        .u32(8)
        .u32(0)
        .u32(2)
        .bytes(b"gg") // ends at 0x56, unpadded
        .done()
}

/// Old `.mip`: two functions and a byte-length names table.
fn old_profile() -> Vec<u8> {
    old_header(3, 0x3, HASH_MAIN)
        .u64(2)
        // _Z3foov
        .u64(SIG_FOO)
        .u32(0x18)
        .i32(-0x1f00)
        .u32(0x40)
        .u32(0xABCD1234)
        .u32(2)
        .u32(3) // merge count
        .u64(3) // call count
        .u64(0) // timestamp sum
        .u32(0x10)
        .u8(1)
        .u32(0x20)
        .u8(0)
        .u32(0) // no call edges
        // main
        .u64(SIG_MAIN)
        .u32(0x1c)
        .i32(-0x1e00)
        .u32(0x20)
        .u32(0x1111)
        .u32(1)
        .u32(0)
        .u64(0)
        .u64(0)
        .u32(0x8)
        .u8(0)
        .u32(1)
        .u32(0x18)
        .u32(0x1234)
        // names: 13 bytes
        .u64(13)
        .bytes(b"_Z3foov\0main\0")
        .done()
}

/// New `.mip` whose names table starts with a name count, as LLVM's tools write it.
fn new_profile_counted() -> Vec<u8> {
    new_header(0x8, 0xE, HASH_APP, 0)
        .u64(1)
        .u64(SIG_A)
        .u32(0x20)
        .i32(-0x3100)
        .u32(0x50)
        .u32(0xDEAD)
        .u32(3)
        .u32(2)
        .u64(10)
        .u64(7)
        .u32(4)
        .u8(1)
        .u32(8)
        .u8(0)
        .u32(0xC)
        .u8(1)
        .u32(0)
        .u64(2) // two names
        .bytes(b"zz\0a\0")
        .done()
}

fn header(layout: Layout, kind: FileKind, width: Width, pt: u32, hash: u32, rso: i64) -> Header {
    Header {
        layout,
        version: 8,
        kind,
        width,
        profile_type: ProfileFlags(pt),
        module_hash: hash,
        raw_section_offset: rso,
        reserved: 0,
    }
}

fn func(sig: u64, raw: u32, start: i32, size: u32, cfg: u32) -> ProfileFunction {
    ProfileFunction {
        signature: sig,
        raw_profile_offset: raw,
        function_start_offset: start,
        function_size: size,
        cfg_signature: cfg,
        merge_count: 0,
        call_count: 0,
        timestamp_sum: 0,
        blocks: Vec::new(),
        call_edges: Vec::new(),
    }
}

fn blocks(list: &[(u32, bool)]) -> Vec<BlockProfile> {
    list.iter()
        .map(|&(offset, covered)| BlockProfile { offset, covered })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Decoding the fixtures.

#[test]
fn old_raw_coverage_decodes() {
    let bytes = old_raw_coverage();
    let raw = RawProfile::parse_without_blocks(&bytes).unwrap();
    assert_eq!(
        raw.header,
        header(
            Layout::Old,
            FileKind::Raw,
            Width::Unspecified,
            1,
            HASH_MAIN,
            0
        )
    );
    let expected: Vec<RawRecord> = [0x00, 0xFF, 0x00]
        .iter()
        .map(|&b| RawRecord {
            counters: RawCounters::Coverage(b),
            blocks: vec![],
        })
        .collect();
    assert_eq!(raw.records, expected);
    assert_eq!(
        raw.records
            .iter()
            .map(RawRecord::function_covered)
            .collect::<Vec<_>>(),
        [true, false, true]
    );
    assert_eq!(raw.record_offsets(), [0x18, 0x19, 0x1a]);
    assert_eq!(RawProfile::parse(&bytes, &[0, 0, 0]).unwrap(), raw);
    // Only a zero byte means "ran" (the instrumentation stores 0 over the initial 0xFF).
    let odd = RawRecord {
        counters: RawCounters::Coverage(0x01),
        blocks: vec![0x7F, 0x00],
    };
    assert!(!odd.function_covered());
    assert_eq!(odd.blocks_covered().collect::<Vec<_>>(), [false, true]);
    assert_eq!(raw.to_bytes().unwrap(), bytes);
}

#[test]
fn old_raw_with_blocks_decodes() {
    let bytes = old_raw_blocks();
    let raw = RawProfile::parse(&bytes, &[2, 0, 1]).unwrap();
    assert_eq!(raw.header.profile_type, ProfileFlags(3));
    assert_eq!(
        raw.records,
        [
            RawRecord {
                counters: RawCounters::Coverage(0),
                blocks: vec![0x00, 0xFF]
            },
            RawRecord {
                counters: RawCounters::Coverage(0xFF),
                blocks: vec![]
            },
            RawRecord {
                counters: RawCounters::Coverage(0),
                blocks: vec![0xFF]
            },
        ]
    );
    assert_eq!(
        raw.records[0].blocks_covered().collect::<Vec<_>>(),
        [true, false]
    );
    assert_eq!(raw.record_offsets(), [0x18, 0x1b, 0x1c]);
    assert!(!raw.last_unpadded);
    assert_eq!(raw.to_bytes().unwrap(), bytes);
    assert_eq!(
        RawProfile::parse_without_blocks(&bytes),
        Err(MipError::NeedBlockCounts)
    );
}

#[test]
fn new_raw_counters_decode() {
    let bytes = new_raw_counters();
    let raw = RawProfile::parse(&bytes, &[3, 1, 0]).unwrap();
    assert_eq!(
        raw.header,
        header(Layout::New, FileKind::Raw, Width::Bits64, 0xE, HASH_APP, 0)
    );
    assert_eq!(
        raw.records,
        [
            RawRecord {
                counters: RawCounters::CallCountTimestamp {
                    call_count: 5,
                    timestamp: 7
                },
                blocks: vec![0x00, 0xFF, 0x00]
            },
            RawRecord {
                counters: RawCounters::CallCountTimestamp {
                    call_count: u32::MAX,
                    timestamp: u32::MAX
                },
                blocks: vec![0xFF]
            },
            RawRecord {
                counters: RawCounters::CallCountTimestamp {
                    call_count: 1,
                    timestamp: 2
                },
                blocks: vec![]
            },
        ]
    );
    assert_eq!(
        raw.records
            .iter()
            .map(RawRecord::function_covered)
            .collect::<Vec<_>>(),
        [true, false, true]
    );
    assert_eq!(raw.record_offsets(), [0x20, 0x2c, 0x38]);
    assert_eq!(raw.to_bytes().unwrap(), bytes);
}

#[test]
fn raw_last_record_may_lack_its_padding() {
    // Last record: 8 bytes of counters and 1 block byte, file ends there (no 3 pad bytes).
    let bytes = new_header(0x11, 0xE, HASH_APP, 0)
        .u32(1)
        .u32(2)
        .u8(0x00)
        .done();
    let raw = RawProfile::parse(&bytes, &[1]).unwrap();
    assert!(raw.last_unpadded);
    assert_eq!(raw.records[0].blocks, [0]);
    assert_eq!(raw.to_bytes().unwrap(), bytes);

    let mut padded = bytes.clone();
    padded.extend_from_slice(&[0, 0, 0]);
    let raw = RawProfile::parse(&padded, &[1]).unwrap();
    assert!(!raw.last_unpadded);
    assert_eq!(raw.to_bytes().unwrap(), padded);

    // Part of the padding is a truncated file.
    padded.pop();
    assert!(matches!(
        RawProfile::parse(&padded, &[1]),
        Err(MipError::Truncated(Truncation {
            what: "raw record padding",
            ..
        }))
    ));
}

fn old_map_entries() -> Vec<MapEntry> {
    vec![
        MapEntry {
            pc_offsets: MapPcOffsets::Old {
                raw_section_start: -0x100,
                raw_profile: -0xe8,
                function: -0x2000,
            },
            function_size: 0x40,
            cfg_signature: 0xABCD1234,
            block_offsets: vec![0x10, 0x20],
            name: "_Z3foov".into(),
        },
        MapEntry {
            pc_offsets: MapPcOffsets::Old {
                raw_section_start: -0x130,
                raw_profile: -0x114,
                function: -0x1f30,
            },
            function_size: 0x20,
            cfg_signature: 0x1111,
            block_offsets: vec![0x8],
            name: "main".into(),
        },
        MapEntry {
            pc_offsets: MapPcOffsets::Old {
                raw_section_start: -0x158,
                raw_profile: -0x13d,
                function: -0x1e58,
            },
            function_size: 0x10,
            cfg_signature: 0x2222,
            block_offsets: vec![],
            name: "_Z3barv".into(),
        },
    ]
}

#[test]
fn old_map_decodes_and_resolves() {
    for pad_last in [false, true] {
        let bytes = old_map(pad_last);
        let map = MipMap::parse(&bytes).unwrap();
        assert_eq!(
            map.header,
            header(
                Layout::Old,
                FileKind::Map,
                Width::Unspecified,
                3,
                HASH_MAIN,
                0
            )
        );
        assert_eq!(map.entries, old_map_entries());
        assert_eq!(map.last_unpadded, !pad_last);
        assert_eq!(map.entry_offsets(), [0x18, 0x48, 0x70]);
        assert_eq!(
            map.resolve().unwrap(),
            [
                ResolvedOffsets {
                    raw_profile: 0x18,
                    function: -0x1f00
                },
                ResolvedOffsets {
                    raw_profile: 0x1c,
                    function: -0x1e00
                },
                ResolvedOffsets {
                    raw_profile: 0x1b,
                    function: -0x1d00
                },
            ]
        );
        // Raw order is by raw offset: 0x18 (2 blocks), 0x1b (0), 0x1c (1).
        assert_eq!(map.raw_block_counts().unwrap(), [2, 0, 1]);
        assert_eq!(map.to_bytes().unwrap(), bytes);
    }
}

#[test]
fn new_map64_decodes_and_resolves() {
    let bytes = new_map64();
    let map = MipMap::parse(&bytes).unwrap();
    assert_eq!(
        map.header,
        header(
            Layout::New,
            FileKind::Map,
            Width::Bits64,
            0xE,
            HASH_APP,
            0x1000
        )
    );
    assert_eq!(map.entries.len(), 3);
    assert_eq!(
        map.entries[1],
        MapEntry {
            pc_offsets: MapPcOffsets::New {
                raw_profile: 0x20 + 0xfb8,
                function: -0x3100 + 0xfb8
            },
            function_size: 0x50,
            cfg_signature: 0xDEAD,
            block_offsets: vec![4, 8, 0xC],
            name: "a".into(),
        }
    );
    assert_eq!(
        map.entries
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>(),
        ["b", "a", "c"]
    );
    assert!(!map.last_unpadded);
    assert_eq!(map.entry_offsets(), [0x20, 0x48, 0x78]);
    let resolved = map.resolve().unwrap();
    assert_eq!(
        resolved
            .iter()
            .map(|r| (r.raw_profile, r.function))
            .collect::<Vec<_>>(),
        [(0x2c, -0x3000), (0x20, -0x3100), (0x38, -0x3200)]
    );
    assert_eq!(map.raw_block_counts().unwrap(), [3, 1, 0]);
    assert_eq!(map.to_bytes().unwrap(), bytes);
}

#[test]
fn new_map32_decodes_and_resolves() {
    let bytes = new_map32();
    let map = MipMap::parse(&bytes).unwrap();
    assert_eq!(
        map.header,
        header(
            Layout::New,
            FileKind::Map,
            Width::Bits32,
            1,
            HASH_MAIN,
            -0x40
        )
    );
    assert_eq!(
        map.entries[1],
        MapEntry {
            pc_offsets: MapPcOffsets::New {
                raw_profile: 0x21 - 0x7c,
                function: -0x400 - 0x7c
            },
            function_size: 4,
            cfg_signature: 8,
            block_offsets: vec![],
            name: "gg".into(),
        }
    );
    assert!(map.last_unpadded);
    assert_eq!(map.entry_offsets(), [0x20, 0x3c]);
    assert_eq!(
        map.resolve()
            .unwrap()
            .iter()
            .map(|r| (r.raw_profile, r.function))
            .collect::<Vec<_>>(),
        [(0x20, -0x500), (0x21, -0x400)]
    );
    assert_eq!(map.to_bytes().unwrap(), bytes);
}

fn old_profile_value() -> Profile {
    let mut foo_fn = func(SIG_FOO, 0x18, -0x1f00, 0x40, 0xABCD1234);
    foo_fn.merge_count = 3;
    foo_fn.call_count = 3;
    foo_fn.blocks = blocks(&[(0x10, true), (0x20, false)]);
    let mut main = func(SIG_MAIN, 0x1c, -0x1e00, 0x20, 0x1111);
    main.blocks = blocks(&[(0x8, false)]);
    main.call_edges = vec![CallEdge {
        callee_raw_profile_offset: 0x18,
        return_address_offset: 0x1234,
    }];
    Profile {
        header: header(
            Layout::Old,
            FileKind::Profile,
            Width::Unspecified,
            3,
            HASH_MAIN,
            0,
        ),
        functions: vec![foo_fn, main],
        names: vec!["_Z3foov".into(), "main".into()],
        names_encoding: NamesEncoding::ByteLength,
    }
}

#[test]
fn old_profile_decodes() {
    let bytes = old_profile();
    let p = Profile::parse(&bytes).unwrap();
    assert_eq!(p, old_profile_value());
    assert_eq!(p.name_of(&p.functions[1]), Some("main"));
    assert!(p.functions[0].covered());
    assert!(!p.functions[1].covered());
    assert_eq!(p.functions[0].block_coverage(), [true, true, false]);
    assert_eq!(p.raw_block_counts(), [2, 1]);
    assert_eq!(p.to_bytes().unwrap(), bytes);
}

#[test]
fn new_profile_with_name_count_decodes() {
    let bytes = new_profile_counted();
    let p = Profile::parse(&bytes).unwrap();
    assert_eq!(
        p.header,
        header(
            Layout::New,
            FileKind::Profile,
            Width::Unspecified,
            0xE,
            HASH_APP,
            0
        )
    );
    assert_eq!(p.names_encoding, NamesEncoding::NameCount);
    assert_eq!(p.names, ["zz", "a"]);
    let mut a = func(SIG_A, 0x20, -0x3100, 0x50, 0xDEAD);
    a.merge_count = 2;
    a.call_count = 10;
    a.timestamp_sum = 7;
    a.blocks = blocks(&[(4, true), (8, false), (0xC, true)]);
    assert_eq!(p.functions, [a]);
    assert_eq!(p.to_bytes().unwrap(), bytes);

    // The same profile with the byte length the format document defines.
    let mut q = p.clone();
    q.names_encoding = NamesEncoding::ByteLength;
    let qb = q.to_bytes().unwrap();
    assert_eq!(&qb[qb.len() - 13..qb.len() - 5], 5u64.to_le_bytes());
    assert_eq!(Profile::parse(&qb).unwrap(), q);
}

#[test]
fn header_parse_tells_layouts_apart() {
    let cases: [(Vec<u8>, Layout, FileKind, Width); 8] = [
        (
            old_raw_coverage(),
            Layout::Old,
            FileKind::Raw,
            Width::Unspecified,
        ),
        (
            old_map(true),
            Layout::Old,
            FileKind::Map,
            Width::Unspecified,
        ),
        (
            old_profile(),
            Layout::Old,
            FileKind::Profile,
            Width::Unspecified,
        ),
        (
            new_raw_counters(),
            Layout::New,
            FileKind::Raw,
            Width::Bits64,
        ),
        (new_map64(), Layout::New, FileKind::Map, Width::Bits64),
        (new_map32(), Layout::New, FileKind::Map, Width::Bits32),
        (
            new_profile_counted(),
            Layout::New,
            FileKind::Profile,
            Width::Unspecified,
        ),
        (
            new_header(0x12, 0x1, 1, 0).done(),
            Layout::New,
            FileKind::CallEdgeSamples,
            Width::Bits64,
        ),
    ];
    for (bytes, layout, kind, width) in cases {
        let h = Header::parse(&bytes).unwrap();
        assert_eq!((h.layout, h.kind, h.width), (layout, kind, width));
        assert_eq!(h.data_offset(), layout.header_size());
        let mut out = Vec::new();
        h.write(&mut out).unwrap();
        assert_eq!(out, bytes[..layout.header_size()]);
    }

    // An old timestamp raw whose second word of data happens to be 0x20 (where a new
    // header has OffsetToData) is still old: the old test comes first.
    let tricky = old_header(1, 0xC, 5).u32(3).u32(0x20).done();
    let raw = RawProfile::parse_without_blocks(&tricky).unwrap();
    assert_eq!(raw.header.layout, Layout::Old);
    assert_eq!(
        raw.records[0].counters,
        RawCounters::CallCountTimestamp {
            call_count: 3,
            timestamp: 0x20
        }
    );

    // The version field is kept but never decides the layout.
    let mut v1 = old_profile();
    v1[4] = 1;
    let p = Profile::parse(&v1).unwrap();
    assert_eq!((p.header.version, p.header.layout), (1, Layout::Old));
    assert_eq!(p.to_bytes().unwrap(), v1);
    let mut v8new = new_map64();
    v8new[4] = 2;
    assert_eq!(MipMap::parse(&v8new).unwrap().header.layout, Layout::New);
}

// ---------------------------------------------------------------------------------------
// Operations.

#[test]
fn create_from_old_map() {
    let map = MipMap::parse(&old_map(false)).unwrap();
    let p = create_from_map(&map).unwrap();
    assert_eq!(
        p.header,
        header(
            Layout::Old,
            FileKind::Profile,
            Width::Unspecified,
            3,
            HASH_MAIN,
            0
        )
    );
    let mut foo_fn = func(SIG_FOO, 0x18, -0x1f00, 0x40, 0xABCD1234);
    foo_fn.blocks = blocks(&[(0x10, false), (0x20, false)]);
    let mut main = func(SIG_MAIN, 0x1c, -0x1e00, 0x20, 0x1111);
    main.blocks = blocks(&[(0x8, false)]);
    let bar_fn = func(SIG_BAR, 0x1b, -0x1d00, 0x10, 0x2222);
    assert_eq!(p.functions, [foo_fn, main, bar_fn]);
    assert_eq!(p.names, ["_Z3barv", "_Z3foov", "main"]);
    assert_eq!(p.names_encoding, NamesEncoding::ByteLength);
    let bytes = p.to_bytes().unwrap();
    assert_eq!(&bytes[..0x18], &old_header(3, 3, HASH_MAIN).done()[..]);
    assert_eq!(Profile::parse(&bytes).unwrap(), p);
    assert!(show_rows(&p)
        .iter()
        .all(|r| !r.covered && r.hot_blocks() == 0));
}

#[test]
fn create_from_new_map_and_merge_counter_runs() {
    let map = MipMap::parse(&new_map64()).unwrap();
    let mut p = create_from_map(&map).unwrap();
    assert_eq!(p.header.layout, Layout::New);
    assert_eq!(p.header.width, Width::Unspecified);
    assert_eq!(p.header.kind, FileKind::Profile);
    assert_eq!(
        p.functions
            .iter()
            .map(|f| (f.signature, f.raw_profile_offset, f.function_start_offset))
            .collect::<Vec<_>>(),
        [
            (SIG_B, 0x2c, -0x3000),
            (SIG_A, 0x20, -0x3100),
            (SIG_C, 0x38, -0x3200)
        ]
    );

    let raw = RawProfile::parse(&new_raw_counters(), &map.raw_block_counts().unwrap()).unwrap();
    assert_eq!(p.raw_block_counts(), [3, 1, 0]);
    merge_raw_into(&mut p, &raw).unwrap();
    merge_raw_into(&mut p, &raw).unwrap();
    let [b, a, c] = &p.functions[..] else {
        panic!("three functions")
    };
    // "a" ran twice with 5 calls and timestamp 7 each; blocks 1 and 3 ran.
    assert_eq!((a.merge_count, a.call_count, a.timestamp_sum), (2, 10, 14));
    assert_eq!(
        a.blocks.iter().map(|x| x.covered).collect::<Vec<_>>(),
        [true, false, true]
    );
    // "b" never ran.
    assert_eq!((b.merge_count, b.call_count, b.timestamp_sum), (0, 0, 0));
    assert!(!b.blocks[0].covered);
    assert_eq!((c.merge_count, c.call_count, c.timestamp_sum), (2, 2, 4));

    let rows = show_rows(&p);
    assert_eq!(rows[1].name.as_deref(), Some("a"));
    assert_eq!((rows[1].call_count, rows[1].order_sum), (10, 14));
    assert_eq!(rows[1].blocks, [true, true, false, true]);
    assert_eq!((rows[1].hot_blocks(), rows[1].cold_blocks()), (3, 1));
    assert_eq!(
        (rows[0].covered, rows[0].hot_blocks(), rows[0].cold_blocks()),
        (false, 0, 2)
    );
    assert_eq!(rows[2].blocks, [true]);
}

#[test]
fn merge_coverage_runs() {
    let map = MipMap::parse(&old_map(true)).unwrap();
    let mut p = create_from_map(&map).unwrap();
    let raw = RawProfile::parse(&old_raw_blocks(), &map.raw_block_counts().unwrap()).unwrap();
    merge_raw_into(&mut p, &raw).unwrap();
    merge_raw_into(&mut p, &raw).unwrap();
    let [foo_fn, main, bar_fn] = &p.functions[..] else {
        panic!("three functions")
    };
    // Coverage-only runs: merge count per run, call count at least 1, never more.
    assert_eq!((foo_fn.merge_count, foo_fn.call_count), (2, 1));
    assert_eq!(
        foo_fn.blocks.iter().map(|b| b.covered).collect::<Vec<_>>(),
        [true, false]
    );
    assert_eq!((main.merge_count, main.call_count), (2, 1));
    assert!(!main.blocks[0].covered);
    assert_eq!((bar_fn.merge_count, bar_fn.call_count), (0, 0));
}

#[test]
fn merge_raw_errors() {
    let map = MipMap::parse(&new_map64()).unwrap();
    let counts = map.raw_block_counts().unwrap();
    let p = create_from_map(&map).unwrap();

    let mut other_module = new_raw_counters();
    other_module[0xC] ^= 1;
    let raw = RawProfile::parse(&other_module, &counts).unwrap();
    let mut q = p.clone();
    assert_eq!(
        merge_raw_into(&mut q, &raw),
        Err(MipError::ModuleHashMismatch {
            expected: HASH_APP,
            found: HASH_APP ^ 1
        })
    );

    // Second record: call count set, timestamp still "never".
    let mut corrupt = new_raw_counters();
    corrupt[0x2c..0x30].copy_from_slice(&9u32.to_le_bytes());
    let raw = RawProfile::parse(&corrupt, &counts).unwrap();
    assert_eq!(
        merge_raw_into(&mut q, &raw),
        Err(MipError::CorruptCounters {
            offset: 0x2c,
            call_count: 9,
            timestamp: u32::MAX
        })
    );
    assert_eq!(q, p, "a failed merge changes nothing");

    // A raw file laid out with other block counts has records nobody points to.
    let raw = RawProfile::parse(&new_raw_counters()[..0x2c], &[3]).unwrap();
    let mut r = create_from_map(&map).unwrap();
    r.functions[1].raw_profile_offset = 0x24;
    assert_eq!(
        merge_raw_into(&mut r, &raw),
        Err(MipError::UnmatchedRawRecord { offset: 0x20 })
    );
}

#[test]
fn merge_profiles() {
    let a = old_profile_value();
    let mut b = old_profile_value();
    b.functions[0].merge_count = 1;
    b.functions[0].call_count = 4;
    b.functions[0].timestamp_sum = 5;
    b.functions[0].blocks = blocks(&[(0x10, false), (0x20, true)]);
    b.functions[0].call_edges = vec![CallEdge {
        callee_raw_profile_offset: 0x1c,
        return_address_offset: 0x99,
    }];
    b.functions[1].call_edges[0].return_address_offset = 0x1234; // same edge as in `a`
    let mut bar_fn = func(SIG_BAR, 0x1b, -0x1d00, 0x10, 0x2222);
    bar_fn.merge_count = 1;
    bar_fn.call_count = 1;
    b.functions.push(bar_fn.clone());
    b.names.push("_Z3barv".into());
    b.header.profile_type = ProfileFlags(0x1 | 0x8);

    let m = merge(&[a.clone(), b]).unwrap();
    assert_eq!(
        m.header.profile_type,
        ProfileFlags(0xB),
        "profile types united"
    );
    let foo_fn = &m.functions[0];
    assert_eq!(
        (foo_fn.merge_count, foo_fn.call_count, foo_fn.timestamp_sum),
        (4, 7, 5)
    );
    assert_eq!(
        foo_fn.blocks.iter().map(|x| x.covered).collect::<Vec<_>>(),
        [true, true],
        "coverage ORs"
    );
    assert_eq!(foo_fn.call_edges.len(), 1);
    assert_eq!(
        m.functions[1].call_edges.len(),
        1,
        "equal edges are not repeated"
    );
    assert_eq!(m.functions[2], bar_fn);
    assert_eq!(m.names, ["_Z3foov", "main", "_Z3barv"]);
    assert_eq!(Profile::parse(&m.to_bytes().unwrap()).unwrap(), m);

    // Merging with itself doubles the counts and keeps the coverage.
    let twice = merge(&[a.clone(), a.clone()]).unwrap();
    assert_eq!(twice.functions[0].merge_count, 6);
    assert_eq!(twice.functions[0].blocks, a.functions[0].blocks);

    let mut changed = a.clone();
    changed.functions[1].cfg_signature = 0x9999;
    assert_eq!(
        merge(&[a.clone(), changed]),
        Err(MipError::CfgMismatch {
            function: "main".into(),
            expected: 0x1111,
            found: 0x9999
        })
    );
    let mut fewer = a.clone();
    fewer.functions[0].blocks.pop();
    assert!(matches!(
        merge(&[a.clone(), fewer]),
        Err(MipError::BlockCountMismatch {
            expected: 2,
            found: 1,
            ..
        })
    ));
    let mut elsewhere = a.clone();
    elsewhere.header.module_hash = 1;
    assert!(matches!(
        merge(&[a.clone(), elsewhere]),
        Err(MipError::ModuleHashMismatch { .. })
    ));
    assert_eq!(merge(&[]), Err(MipError::NothingToMerge));
}

#[test]
fn function_coverage_profile_bytes() {
    let p =
        function_coverage_profile("app.dll", [("M2", true), ("M1", false)], Layout::New).unwrap();
    let expected = new_header(0x8, 0x1, HASH_APP, 0)
        .u64(2)
        .u64(SIG_M2)
        .u32(0x20)
        .i32(0)
        .u32(0)
        .u32(0)
        .u32(0)
        .u32(1)
        .u64(1)
        .u64(0)
        .u32(0)
        .u64(SIG_M1)
        .u32(0x21)
        .i32(0)
        .u32(0)
        .u32(0)
        .u32(0)
        .u32(0)
        .u64(0)
        .u64(0)
        .u32(0)
        .u64(6)
        .bytes(b"M1\0M2\0")
        .done();
    assert_eq!(p.to_bytes().unwrap(), expected);
    let rows = show_rows(&p);
    assert_eq!(
        rows.iter()
            .map(|r| (r.name.as_deref(), r.covered, r.call_count))
            .collect::<Vec<_>>(),
        [(Some("M2"), true, 1), (Some("M1"), false, 0)]
    );
    assert_eq!(mip::module_hash("app.dll"), HASH_APP);
    assert_eq!(mip::md5_hash("M1"), SIG_M1);

    let old = function_coverage_profile("app.dll", [("M1", true)], Layout::Old).unwrap();
    let bytes = old.to_bytes().unwrap();
    assert_eq!(&bytes[..0x18], &old_header(3, 1, HASH_APP).done()[..]);
    assert_eq!(
        bytes[0x28..0x2c],
        0x18u32.to_le_bytes(),
        "raw offset: first record"
    );
}

// ---------------------------------------------------------------------------------------
// Malformed input.

fn all_fixtures() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("old raw coverage", old_raw_coverage()),
        ("old raw blocks", old_raw_blocks()),
        ("new raw counters", new_raw_counters()),
        ("old map", old_map(true)),
        ("old map unpadded", old_map(false)),
        ("new map 64", new_map64()),
        ("new map 32", new_map32()),
        ("old profile", old_profile()),
        ("new profile", new_profile_counted()),
    ]
}

/// Every parser the fixture's kind has.
fn parse_as_its_kind(name: &str, bytes: &[u8]) -> Result<(), MipError> {
    match name {
        "old raw coverage" => RawProfile::parse_without_blocks(bytes).map(drop),
        "old raw blocks" => RawProfile::parse(bytes, &[2, 0, 1]).map(drop),
        "new raw counters" => RawProfile::parse(bytes, &[3, 1, 0]).map(drop),
        n if n.contains("map") => MipMap::parse(bytes).map(drop),
        _ => Profile::parse(bytes).map(drop),
    }
}

#[test]
fn truncated_header_at_every_length() {
    for (name, bytes) in all_fixtures() {
        let size = Header::parse(&bytes).unwrap().data_offset();
        for len in 0..size {
            let needed = match len {
                0..=3 => 4,
                4..=23 => 24,
                _ => 32,
            };
            // The whole input is what is left from offset 0.
            let expected = MipError::Truncated(Truncation {
                what: "header",
                offset: 0,
                needed,
                available: len as u64,
            });
            assert_eq!(
                Header::parse(&bytes[..len]),
                Err(expected.clone()),
                "{name} at {len}"
            );
            assert_eq!(
                parse_as_its_kind(name, &bytes[..len]),
                Err(expected),
                "{name} at {len}"
            );
        }
    }
}

#[test]
fn truncated_body_at_every_length() {
    for (name, bytes) in all_fixtures() {
        let size = Header::parse(&bytes).unwrap().data_offset();
        for len in size..bytes.len() {
            let cut = &bytes[..len];
            if name.contains("map") {
                // A map cut at an entry boundary is a shorter map; anything else is an error.
                if let Ok(m) = MipMap::parse(cut) {
                    let full = MipMap::parse(&bytes).unwrap();
                    // All entries only when just the last one's padding is cut off.
                    assert!(
                        m.entries.len() < full.entries.len()
                            || (m.last_unpadded && !full.last_unpadded),
                        "{name} at {len}"
                    );
                    assert_eq!(m.entries[..], full.entries[..m.entries.len()]);
                }
            } else if name == "old raw coverage" {
                // Fewer coverage bytes are fewer functions.
                assert_eq!(
                    RawProfile::parse_without_blocks(cut).unwrap().records.len(),
                    len - size
                );
            } else {
                assert!(parse_as_its_kind(name, cut).is_err(), "{name} at {len}");
            }
        }
    }
    // Where the truncation is, is reported. Two functions need at least 2 x 52 bytes.
    assert_eq!(
        Profile::parse(&old_profile()[..0x30]),
        Err(MipError::CountPastEnd {
            what: "profile functions",
            offset: 0x18,
            count: 2,
            needed: 104,
            available: 0x10
        })
    );
    let full = old_profile();
    let names_at = full.len() - 13 - 8;
    assert_eq!(
        Profile::parse(&full[..names_at + 4]),
        Err(MipError::Truncated(Truncation {
            what: "profile function names length",
            offset: names_at as u64,
            needed: 8,
            available: 4
        }))
    );
}

#[test]
fn wrong_magic() {
    for (name, bytes) in all_fixtures() {
        let mut b = bytes.clone();
        b[3] = b'Q';
        assert_eq!(
            parse_as_its_kind(name, &b),
            Err(MipError::BadMagic {
                found: [0xFB, b'M', b'I', b'Q']
            })
        );
    }
}

#[test]
fn unknown_file_types_and_layouts() {
    let mut b = old_profile();
    b[6] = 7;
    assert_eq!(
        Header::parse(&b),
        Err(MipError::UnknownFileType {
            layout: Layout::Old,
            file_type: 7
        })
    );
    for ft in [0x0u16, 0x44, 0x34, 0x5, 0x0C, 0x100] {
        let mut b = new_map64();
        b[6..8].copy_from_slice(&ft.to_le_bytes());
        assert_eq!(
            Header::parse(&b),
            Err(MipError::UnknownFileType {
                layout: Layout::New,
                file_type: ft
            }),
            "{ft:#x}"
        );
    }
    let mut b = new_map64();
    b[0x1c] = 0x30;
    assert_eq!(
        Header::parse(&b),
        Err(MipError::UnknownLayout {
            at_0x14: 0,
            at_0x1c: 0x30
        })
    );
    let mut b = old_profile();
    b[8] = 0x20;
    assert_eq!(
        Profile::parse(&b),
        Err(MipError::UnknownProfileType { profile_type: 0x20 })
    );
    let mut b = old_profile();
    b[4] = 9;
    assert_eq!(
        Profile::parse(&b),
        Err(MipError::UnsupportedVersion { version: 9 })
    );
    assert_eq!(
        Profile::parse(&new_map64()),
        Err(MipError::WrongFileKind {
            expected: FileKind::Profile,
            found: FileKind::Map
        })
    );
    assert_eq!(
        MipMap::parse(&old_raw_coverage()),
        Err(MipError::WrongFileKind {
            expected: FileKind::Map,
            found: FileKind::Raw
        })
    );
    // Coverage and counters at once, or block coverage alone: no raw record layout.
    for pt in [0x5u32, 0x2] {
        let b = old_header(1, pt, 0).u32(0).done();
        assert_eq!(
            RawProfile::parse(&b, &[]),
            Err(MipError::UnsupportedRawProfileType { profile_type: pt })
        );
    }
}

#[test]
fn counts_past_the_end() {
    let mut b = old_profile();
    b[0x18..0x20].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        Profile::parse(&b),
        Err(MipError::CountPastEnd {
            what: "profile functions",
            offset: 0x18,
            count: u64::MAX,
            ..
        })
    ));
    // First function's block count (at 0x20 + 8 + 4 * 4).
    let mut b = old_profile();
    b[0x38..0x3c].copy_from_slice(&0x1000_0000u32.to_le_bytes());
    assert!(matches!(
        Profile::parse(&b),
        Err(MipError::CountPastEnd {
            what: "profile block profiles",
            offset: 0x38,
            count: 0x1000_0000,
            ..
        })
    ));
    // First function's call edge count, after its two 5-byte blocks.
    let edges_at = 0x20 + 48 + 10;
    let mut b = old_profile();
    b[edges_at..edges_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Profile::parse(&b),
        Err(MipError::CountPastEnd {
            what: "profile call edges",
            offset,
            ..
        }) if offset == edges_at
    ));
    // Map entry 0's block count at 0x18 + 20.
    let mut b = old_map(true);
    b[0x2c..0x30].copy_from_slice(&0x4000_0000u32.to_le_bytes());
    assert_eq!(
        MipMap::parse(&b),
        Err(MipError::CountPastEnd {
            what: "map entry block offsets",
            offset: 0x2c,
            count: 0x4000_0000,
            needed: 0x1_0000_0000,
            available: b.len() - 0x30
        })
    );
    // Raw block counts larger than the file.
    assert!(matches!(
        RawProfile::parse(&old_raw_blocks(), &[2, 0, 100]),
        Err(MipError::CountPastEnd {
            what: "raw record block bytes",
            offset: 0x1c,
            count: 100,
            ..
        })
    ));
    // More records than the file holds.
    assert!(matches!(
        RawProfile::parse(&old_raw_blocks(), &[2, 0, 1, 0]),
        Err(MipError::Truncated(Truncation { offset: 0x1e, .. }))
    ));
    // Fewer records than the file holds.
    assert_eq!(
        RawProfile::parse(&old_raw_blocks(), &[2, 0]),
        Err(MipError::TrailingData {
            what: "last raw record",
            offset: 0x1c,
            count: 2
        })
    );
}

#[test]
fn name_lengths_past_the_end() {
    // Map entry 2's name length at 0x70 + 24 (no blocks).
    let mut b = old_map(false);
    b[0x88..0x8c].copy_from_slice(&0xFFFFu32.to_le_bytes());
    assert_eq!(
        MipMap::parse(&b),
        Err(MipError::NameLengthPastEnd {
            what: "map entry function name",
            offset: 0x88,
            length: 0xFFFF,
            available: 7
        })
    );
    let mut b = old_profile();
    let at = b.len() - 13 - 8;
    b[at..at + 8].copy_from_slice(&1000u64.to_le_bytes());
    assert_eq!(
        Profile::parse(&b),
        Err(MipError::NameLengthPastEnd {
            what: "profile function names",
            offset: at,
            length: 1000,
            available: 13
        })
    );
    // A count of names larger than the names there (and not a byte length that ends on
    // a name either: 4 bytes are "zz\0a").
    let mut b = new_profile_counted();
    let at = b.len() - 5 - 8;
    b[at] = 4;
    assert!(matches!(
        Profile::parse(&b),
        Err(MipError::Truncated(Truncation {
            what: "profile function name",
            ..
        }))
    ));
    // The last name without its NUL.
    let mut b = old_profile();
    *b.last_mut().unwrap() = b'x';
    let len = b.len();
    assert_eq!(
        Profile::parse(&b),
        Err(MipError::UnterminatedName { offset: len - 5 })
    );
    // Non-UTF-8 map name.
    let mut b = old_map(false);
    b[0x8c] = 0xFF;
    assert_eq!(
        MipMap::parse(&b),
        Err(MipError::NameNotUtf8 {
            what: "map entry function name",
            offset: 0x8c
        })
    );
}

#[test]
fn bad_padding_and_flags() {
    let mut b = old_map(true);
    b[0x45] = 1;
    assert_eq!(
        MipMap::parse(&b),
        Err(MipError::BadPadding {
            what: "map entry padding",
            offset: 0x45,
            value: 1
        })
    );
    let mut b = new_raw_counters();
    b[0x2b] = 0xAA;
    assert_eq!(
        RawProfile::parse(&b, &[3, 1, 0]),
        Err(MipError::BadPadding {
            what: "raw record padding",
            offset: 0x2b,
            value: 0xAA
        })
    );
    // A 32-bit target's RawSectionOffset fills only the low half of its field.
    let mut b = new_map32();
    b[0x16] = 1;
    assert_eq!(
        MipMap::parse(&b),
        Err(MipError::BadPadding {
            what: "header raw section offset (upper half)",
            offset: 0x16,
            value: 1
        })
    );
    // A block coverage byte of the profile that is not 0 or 1 (first block's, at 0x54).
    let mut b = old_profile();
    assert_eq!(b[0x54], 1);
    b[0x54] = 2;
    assert_eq!(
        Profile::parse(&b),
        Err(MipError::BadFlag {
            what: "profile block coverage",
            offset: 0x54,
            value: 2
        })
    );
    // Bytes after the names table.
    let mut b = old_profile();
    b.push(0);
    let len = b.len();
    assert_eq!(
        Profile::parse(&b),
        Err(MipError::TrailingData {
            what: "profile names table",
            offset: len - 1,
            count: 1
        })
    );
    let mut b = new_profile_counted();
    b.extend_from_slice(b"x\0");
    assert!(matches!(
        Profile::parse(&b),
        Err(MipError::TrailingData { count: 2, .. })
    ));
}

#[test]
fn writer_refuses_what_the_format_cannot_hold() {
    let mut p = old_profile_value();
    p.names[0] = "a\0b".into();
    assert!(matches!(p.to_bytes(), Err(MipError::Unwritable { .. })));
    let mut p = old_profile_value();
    p.header.width = Width::Bits64;
    assert!(matches!(p.to_bytes(), Err(MipError::Unwritable { .. })));
    let mut m = MipMap::parse(&new_map32()).unwrap();
    m.entries[0].pc_offsets = MapPcOffsets::New {
        raw_profile: 1 << 40,
        function: 0,
    };
    assert!(matches!(m.to_bytes(), Err(MipError::Unwritable { .. })));
    let mut m = MipMap::parse(&old_map(true)).unwrap();
    m.entries[0].pc_offsets = MapPcOffsets::New {
        raw_profile: 0,
        function: 0,
    };
    assert!(matches!(m.to_bytes(), Err(MipError::Unwritable { .. })));
    let mut r = RawProfile::parse_without_blocks(&old_raw_coverage()).unwrap();
    r.records[0].blocks = vec![0];
    assert!(matches!(r.to_bytes(), Err(MipError::Unwritable { .. })));
}

// ---------------------------------------------------------------------------------------
// Properties.

/// Runs every parser (and what follows a successful parse) on `bytes`; whatever parses
/// must write back to the same bytes.
fn parse_everything(bytes: &[u8]) {
    let _ = Header::parse(bytes);
    for counts in [&[][..], &[2, 0, 1], &[3, 1, 0], &[u32::MAX]] {
        if let Ok(raw) = RawProfile::parse(bytes, counts) {
            assert_eq!(raw.to_bytes().unwrap(), bytes);
            let _ = raw.record_offsets();
        }
    }
    if let Ok(raw) = RawProfile::parse_without_blocks(bytes) {
        assert_eq!(raw.to_bytes().unwrap(), bytes);
    }
    if let Ok(map) = MipMap::parse(bytes) {
        assert_eq!(map.to_bytes().unwrap(), bytes);
        let _ = map.raw_block_counts();
        if let Ok(mut p) = create_from_map(&map) {
            let _ = p.to_bytes();
            if let Ok(raw) = RawProfile::parse(bytes, &p.raw_block_counts()) {
                let _ = merge_raw_into(&mut p, &raw);
            }
        }
    }
    if let Ok(p) = Profile::parse(bytes) {
        assert_eq!(p.to_bytes().unwrap(), bytes);
        let _ = show_rows(&p);
        let _ = merge(&[p.clone(), p]);
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Flip(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Truncate(usize),
    /// A 32-bit value at a 4-aligned offset: counts and lengths.
    Word(usize, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let pos = 0usize..256;
    prop_oneof![
        (pos.clone(), any::<u8>()).prop_map(|(p, v)| Mutation::Set(p, v)),
        (pos.clone(), 0u8..8).prop_map(|(p, b)| Mutation::Flip(p, b)),
        (pos.clone(), any::<u8>()).prop_map(|(p, v)| Mutation::Insert(p, v)),
        pos.clone().prop_map(Mutation::Remove),
        pos.clone().prop_map(Mutation::Truncate),
        (
            pos,
            prop_oneof![
                Just(0u32),
                Just(1),
                Just(0x18),
                Just(0x20),
                any::<u32>(),
                Just(u32::MAX)
            ]
        )
            .prop_map(|(p, v)| Mutation::Word(p & !3, v)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let n = bytes.len();
    match *m {
        Mutation::Set(p, v) if n > 0 => bytes[p % n] = v,
        Mutation::Flip(p, b) if n > 0 => bytes[p % n] ^= 1 << b,
        Mutation::Insert(p, v) => bytes.insert(p % (n + 1), v),
        Mutation::Remove(p) if n > 0 => {
            bytes.remove(p % n);
        }
        Mutation::Truncate(p) => bytes.truncate(p % (n + 1)),
        Mutation::Word(p, v) if p + 4 <= n => bytes[p..p + 4].copy_from_slice(&v.to_le_bytes()),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Thousands of mutated and truncated fixtures: no panic, no huge allocation, and
    /// whatever is accepted writes back byte for byte.
    #[test]
    fn mutated_inputs_never_panic(
        which in 0usize..9,
        mutations in proptest::collection::vec(mutation(), 1..6),
    ) {
        let mut bytes = all_fixtures()[which].1.clone();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        parse_everything(&bytes);
    }

    /// Arbitrary bytes after a valid header of each kind and layout.
    #[test]
    fn random_bodies_never_panic(
        which in 0usize..9,
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let fixture = all_fixtures()[which].1.clone();
        let size = Header::parse(&fixture).unwrap().data_offset();
        let mut bytes = fixture[..size].to_vec();
        bytes.extend_from_slice(&body);
        parse_everything(&bytes);
    }

    #[test]
    fn profiles_round_trip(p in profile_strategy()) {
        let bytes = p.to_bytes().unwrap();
        let back = Profile::parse(&bytes).unwrap();
        let mut expected = p.clone();
        if expected.names.iter().all(String::is_empty) {
            // Both encodings give the same bytes; parsing reports the byte length.
            expected.names_encoding = NamesEncoding::ByteLength;
        }
        prop_assert_eq!(back, expected);
    }

    #[test]
    fn maps_round_trip(m in map_strategy()) {
        let bytes = m.to_bytes().unwrap();
        let back = MipMap::parse(&bytes).unwrap();
        let mut expected = m.clone();
        let align = if m.header.width == Width::Bits32 { 4 } else { 8 };
        if bytes.len() % align == 0 {
            // The last entry (if any) ended on a boundary: there was nothing to leave out.
            expected.last_unpadded = false;
        }
        prop_assert_eq!(&back, &expected);
        prop_assert_eq!(back.to_bytes().unwrap(), bytes);
    }

    #[test]
    fn raw_round_trip(
        counters in any::<bool>(),
        recs in proptest::collection::vec((any::<u32>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..7)), 0..8),
        last_unpadded in any::<bool>(),
        layout_new in any::<bool>(),
    ) {
        let layout = if layout_new { Layout::New } else { Layout::Old };
        let pt = if counters { 0xE } else { 0x3 };
        let raw = RawProfile {
            header: Header::new(layout, FileKind::Raw, ProfileFlags(pt), 42),
            records: recs
                .iter()
                .map(|(a, b, blocks)| RawRecord {
                    counters: if counters {
                        RawCounters::CallCountTimestamp { call_count: *a, timestamp: *b }
                    } else {
                        RawCounters::Coverage(*a as u8)
                    },
                    blocks: blocks.clone(),
                })
                .collect(),
            last_unpadded,
        };
        let bytes = raw.to_bytes().unwrap();
        let counts: Vec<u32> = recs.iter().map(|r| r.2.len() as u32).collect();
        let back = RawProfile::parse(&bytes, &counts).unwrap();
        let needs_pad = counters
            && recs.last().is_some_and(|r| (8 + r.2.len()) % 4 != 0);
        let mut expected = raw.clone();
        expected.last_unpadded = last_unpadded && needs_pad;
        prop_assert_eq!(back, expected);
    }
}

fn name_strategy() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_:.<>é ]{0,12}"
}

fn profile_strategy() -> impl Strategy<Value = Profile> {
    let function = (
        any::<u64>(),
        any::<u32>(),
        any::<i32>(),
        any::<(u32, u32, u32, u64, u64)>(),
        proptest::collection::vec((any::<u32>(), any::<bool>()), 0..5),
        proptest::collection::vec((any::<u32>(), any::<u32>()), 0..3),
    )
        .prop_map(
            |(sig, raw, start, (size, cfg, merges, calls, ts), bl, edges)| ProfileFunction {
                signature: sig,
                raw_profile_offset: raw,
                function_start_offset: start,
                function_size: size,
                cfg_signature: cfg,
                merge_count: merges,
                call_count: calls,
                timestamp_sum: ts,
                blocks: blocks(&bl),
                call_edges: edges
                    .into_iter()
                    .map(|(c, r)| CallEdge {
                        callee_raw_profile_offset: c,
                        return_address_offset: r,
                    })
                    .collect(),
            },
        );
    (
        any::<bool>(),
        any::<(u16, u32, u32)>(),
        proptest::collection::vec(function, 0..5),
        proptest::collection::vec(name_strategy(), 0..5),
        any::<bool>(),
    )
        .prop_map(|(new, (version, pt, hash), functions, names, counted)| {
            let mut header = Header::new(
                if new { Layout::New } else { Layout::Old },
                FileKind::Profile,
                ProfileFlags(pt & 0x1F),
                hash,
            );
            header.version = version % 9;
            header.reserved = pt;
            if new {
                header.width =
                    [Width::Unspecified, Width::Bits64, Width::Bits32][(hash % 3) as usize];
            }
            Profile {
                header,
                functions,
                names,
                names_encoding: if counted {
                    NamesEncoding::NameCount
                } else {
                    NamesEncoding::ByteLength
                },
            }
        })
}

fn map_strategy() -> impl Strategy<Value = MipMap> {
    let entry = (
        any::<(i32, i32, i32)>(),
        any::<(u32, u32)>(),
        proptest::collection::vec(any::<u32>(), 0..4),
        name_strategy(),
    );
    (
        0u8..3,
        any::<(u32, i32)>(),
        proptest::collection::vec(entry, 0..5),
        any::<bool>(),
    )
        .prop_map(|(shape, (hash, rso), entries, last_unpadded)| {
            let (layout, width) = match shape {
                0 => (Layout::Old, Width::Unspecified),
                1 => (Layout::New, Width::Bits64),
                _ => (Layout::New, Width::Bits32),
            };
            let mut header = Header::new(layout, FileKind::Map, ProfileFlags(0x3), hash);
            header.width = width;
            if layout == Layout::New {
                header.raw_section_offset = i64::from(rso);
            }
            MipMap {
                header,
                entries: entries
                    .into_iter()
                    .map(|((a, b, c), (size, cfg), block_offsets, name)| MapEntry {
                        pc_offsets: if layout == Layout::Old {
                            MapPcOffsets::Old {
                                raw_section_start: a,
                                raw_profile: b,
                                function: c,
                            }
                        } else {
                            MapPcOffsets::New {
                                raw_profile: i64::from(b),
                                function: i64::from(c),
                            }
                        },
                        function_size: size,
                        cfg_signature: cfg,
                        block_offsets,
                        name,
                    })
                    .collect(),
                last_unpadded,
            }
        })
}

/// `cdac mip merge` and `cdac mip show` on files written by the library: counts add,
/// coverage ORs, and the JSON rows say so.
#[test]
fn cli_merge_and_show() {
    use cdac::formats::mip::{function_coverage_profile, Layout, Profile};
    let dir = std::env::temp_dir().join(format!("cdac-mip-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let a = function_coverage_profile(
        "app",
        [("f", true), ("g", false), ("h", false)],
        Layout::Old,
    )
    .expect("a");
    let b = function_coverage_profile("app", [("f", true), ("g", true), ("h", false)], Layout::Old)
        .expect("b");
    let (pa, pb, out) = (dir.join("a.mip"), dir.join("b.mip"), dir.join("all.mip"));
    std::fs::write(&pa, a.to_bytes().expect("bytes")).expect("write");
    std::fs::write(&pb, b.to_bytes().expect("bytes")).expect("write");
    let cdac = env!("CARGO_BIN_EXE_cdac");
    let status = std::process::Command::new(cdac)
        .args(["mip", "merge", "-o"])
        .args([&out, &pa, &pb])
        .status()
        .expect("run cdac mip merge");
    assert!(status.success());
    let merged = Profile::parse(&std::fs::read(&out).expect("merged")).expect("parses");
    let output = std::process::Command::new(cdac)
        .args(["mip", "show", "--json", "--regex", "^[fg]$"])
        .arg(&out)
        .output()
        .expect("run cdac mip show");
    assert!(output.status.success());
    let v: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let rows = v["functions"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "h filtered out");
    for r in rows {
        match r["name"].as_str() {
            Some("f") => assert_eq!(
                (r["covered"].as_bool(), r["call_count"].as_u64()),
                (Some(true), Some(2))
            ),
            Some("g") => assert_eq!(
                (r["covered"].as_bool(), r["call_count"].as_u64()),
                (Some(true), Some(1))
            ),
            other => panic!("unexpected row {other:?}"),
        }
    }
    assert_eq!(merged.functions.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}
