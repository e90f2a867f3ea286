//! Inputs the cargo-fuzz targets (`fuzz/`, `scripts/fuzz-smoke`) found to break an
//! invariant, fed through the same public API as the target that found them. Each input is
//! kept as it was found, in `tests/fixtures/fuzz/<target>-<short-name>.bin`.

use std::path::PathBuf;

use cdac::contracts::execution_manager::execution_manager;
use cdac::formats::r2r::R2rPerfMap;

mod em_mock;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fuzz")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `r2rmap`: a last line ending in `\r\r` (no newline) parsed into a name ending in `\r`,
/// which the writer's `\n`-terminated line could not carry back (the reparse dropped it as
/// a CRLF ending), so the round trip changed the map. Trailing `\r`s are now all part of the
/// line ending.
#[test]
fn r2rmap_trailing_carriage_returns_round_trip() {
    let data = fixture("r2rmap-trailing-cr.bin");
    let text = String::from_utf8_lossy(&data);
    let map = R2rPerfMap::parse(&text).expect("the input is a well-formed map");
    let last = map.entries.last().expect("entries");
    assert_eq!(last.name, "[funcleclet] x");
    assert!(map.entries.iter().all(|e| !e.name.ends_with('\r')));
    let written = map.write();
    assert_eq!(R2rPerfMap::parse(&written), Ok(map));
}

/// The same rule on a hand-written map: CRLF, several `\r`s, and a lone `\r` line.
#[test]
fn r2rmap_carriage_returns_are_line_endings() {
    let text = "FFFFFFFF 00 0123456789ABCDEF0123456789ABCDEF\r\nFFFFFFFE 00 1\r\n\
                FFFFFFFD 00 2\r\nFFFFFFFC 00 3\r\nFFFFFFFB 00 1\r\n\
                00001000 10 a\r\r\n\r\n00002000 20 b c\r\r";
    let map = R2rPerfMap::parse(text).expect("parses");
    let names: Vec<&str> = map.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a", "b c"]);
    assert_eq!(R2rPerfMap::parse(&map.write()), Ok(map));
}

/// The fuzz target's byte cursor: values off the front, 0 past the end.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (h, t) = self.0.split_at(n.min(self.0.len()));
        self.0 = t;
        h
    }
    fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }
    fn u16(&mut self) -> u16 {
        let mut b = [0u8; 2];
        let h = self.bytes(2);
        b[..h.len()].copy_from_slice(h);
        u16::from_le_bytes(b)
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn layout(b: u8) -> cdac::target::DataLayout {
    cdac::target::DataLayout::ALL[usize::from(b) % 4]
}

use em_mock::{Clause, R2rSpec, Rf, World};

const MD: u64 = 0x0101_aaa0;
const MD2: u64 = 0x0201_aaa0;
const MD3: u64 = 0x0301_aaa0;

fn clause(flags: u32, try_: (u32, u32), handler: (u32, u32), union: u32) -> Clause {
    Clause {
        flags,
        try_start: try_.0,
        try_end: try_.1,
        handler_start: handler.0,
        handler_end: handler.1,
        union,
        type_handle: 0,
    }
}

/// `r2r_lookups` mode 3: the mock runtime of `tests/em_mock` with the input's knobs and
/// damage (the same construction as the fuzz target), and the addresses it looks up.
fn mock_runtime(input: &mut Input<'_>) -> (World, [u64; 10]) {
    let flags = input.u8();
    let layout = layout(flags);
    let version = 1 + u64::from(flags >> 2 & 1);
    let split = flags & 0x08 != 0;
    let mut w = World::new(layout, version);
    let mut spec = R2rSpec::new(
        vec![
            Rf::method_len(0x100, 0x140, if split { 0xa0 } else { 0x80 }),
            if split {
                Rf::part(0x140, 0x160)
            } else {
                Rf::method(0x140, 0x160)
            },
            Rf::method(0x200, 0x280),
            Rf::method(0x280, 0x300),
            Rf::part(0x400, 0x440),
        ],
        if split {
            vec![(0x100, MD), (0x200, MD2)]
        } else {
            vec![(0x100, MD), (0x140, MD3), (0x200, MD2)]
        },
    );
    spec.base = 0x0c0c_0000;
    spec.hot_cold = vec![4, 0];
    spec.thunks = Some((0x3000, 0x100));
    spec.eh = vec![(0x100, vec![clause(4, (0, 4), (0x40, 0x60), 0)])];
    let knobs = input.u8();
    if knobs & 1 != 0 {
        spec.major = 5 + u16::from(input.u8() % 6);
        spec.minor = u16::from(input.u8() % 4);
    }
    if knobs & 2 != 0 {
        spec.num_functions_override = Some(u32::from(input.u8()));
    }
    if knobs & 4 != 0 {
        spec.num_hot_cold_override = Some(u32::from(input.u8()));
    }
    if knobs & 8 != 0 {
        spec.buckets = Some(2 + u64::from(input.u8() % 32));
    }
    spec.composite = knobs & 0x10 != 0;
    spec.eh_section = knobs & 0x20 == 0;
    let img = w.add_r2r(&spec);
    // Damage: (allocation, offset, length, bytes)...
    let allocs = w.mem.allocations.clone();
    let mut damages = 0;
    while !input.is_empty() && damages < 16 {
        damages += 1;
        let (addr, size) = allocs[usize::from(input.u8()) % allocs.len()];
        let len = u64::from(input.u8() % 9).min(size);
        let at = addr + u64::from(input.u16()) % (size - len + 1);
        let bytes = input.bytes(len as usize).to_vec();
        w.mem.bytes(at, &bytes);
    }
    let b = spec.base;
    let ips = [
        b + 0x100,
        b + 0x13f,
        b + 0x150,
        b + 0x210,
        b + 0x290,
        b + 0x420,
        b + 0x3010,
        b + 0x180,
        b,
        img.base + spec.size - 1,
    ];
    (w, ips)
}

/// `r2r_lookups`: a damaged runtime-function table made the ReadyToRun lookup answer, for
/// the image's first byte, a method starting 0x100 bytes after it (relative offset wrapped
/// to 2^64 - 0x100). Now a typed `Corrupt` error.
#[test]
fn r2r_lookups_method_never_starts_after_the_address() {
    let data = fixture("r2r_lookups-start-after-ip.bin");
    let mut input = Input(&data[1..]);
    let (w, ips) = mock_runtime(&mut input);
    let (t, d) = w.into_parts();
    let em = execution_manager(&t, &d).expect("ExecutionManager");
    let mut corrupt = 0;
    for ip in ips {
        match em.code_block(ip) {
            Ok(Some(block)) => assert!(block.start <= ip, "{block:?}"),
            Ok(None) => {}
            Err(cdac::contracts::ContractError::Corrupt { .. }) => corrupt += 1,
            Err(_) => {}
        }
    }
    assert!(corrupt >= 1, "the damage is reported");
}
