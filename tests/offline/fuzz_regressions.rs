//! Inputs the cargo-fuzz targets (`fuzz/`, `scripts/fuzz-smoke`) found to break an
//! invariant, fed through the same public API as the target that found them. Each input is
//! kept as it was found, in `tests/fixtures/fuzz/<target>-<short-name>.bin`.

use std::path::PathBuf;

use cdac::contracts::execution_manager::execution_manager;
use cdac::formats::r2r::R2rPerfMap;

use crate::em_mock;

use em_mock::damaged_r2r::damaged_r2r_world;

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

/// `r2r_lookups`: a damaged runtime-function table made the ReadyToRun lookup answer, for
/// the image's first byte, a method starting 0x100 bytes after it (relative offset wrapped
/// to 2^64 - 0x100). Now a typed `Corrupt` error.
#[test]
fn r2r_lookups_method_never_starts_after_the_address() {
    let data = fixture("r2r_lookups-start-after-ip.bin");
    // The first byte chose the target's mode (3: the mock runtime).
    let (w, ips) = damaged_r2r_world(&data[1..]);
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

/// `perf_records`: two PERF_RECORD_LOST records whose counts add past `u64::MAX` overflowed
/// the lost-sample count (a panic with overflow checks). The count now saturates.
#[test]
fn perf_records_lost_counts_saturate() {
    let data = fixture("perf_records-lost-overflow.bin");
    let (samples, stats) = cdac::process::perf_sampler::parse_ring_bytes(&data);
    assert!(samples.len() as u64 <= stats.samples);
    assert_eq!(stats.lost, u64::MAX, "{stats:?}");
}

/// `gc_info_body`: a version 3 safe point stored as 2^32 − 1 (far past the code's end)
/// overflowed when turned into its return address (+1). Safe points past the code's end
/// are now corrupt.
#[test]
fn gc_info_body_safe_point_past_the_end_is_corrupt() {
    use cdac::contracts::gc_info::{decode, GcInfoArch};
    use cdac::contracts::ContractError;
    use cdac::memory::builder::MemoryBuilder;
    use cdac::memory::DataLayout;

    let data = fixture("gc_info_body-safe-point-overflow.bin");
    // The target's input: architecture, version, options and memory-kind bytes (odd:
    // the GC info repeated over the window), then the GC info.
    let arch = GcInfoArch::ALL[usize::from(data[0]) % GcInfoArch::ALL.len()];
    let version = 2 + u32::from(data[1] % 3);
    let repeated: Vec<u8> = data[4..].iter().copied().cycle().take(64 * 1024).collect();
    let mut b = MemoryBuilder::new(DataLayout::LE64);
    b.region(0x1000_0000, repeated.len()).bytes(0, &repeated);
    let t = b.into_target();
    match decode(&t, 0x1000_0000, version, arch) {
        Err(ContractError::Corrupt { .. }) | Err(ContractError::Read(_)) => {}
        other => panic!("{other:?}"),
    }
}
