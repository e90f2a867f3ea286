//! The ReadyToRun PerfMap text format (`cdac::formats::r2r::perf_map`): a map written by
//! hand from the format's description parses to the expected values; lengths wider than
//! two hex digits; names with spaces; CRLF line ends; write → parse round trips; each kind
//! of damage gives its error with the line number.

use cdac::formats::r2r::perf_map::{enum_name, R2rPerfMapError, ABI_NAMES, ARCH_NAMES, OS_NAMES};
use cdac::formats::r2r::{R2rPerfMap, R2rPerfMapEntry};

const HAND_WRITTEN: &str = "\
FFFFFFFF 00 000102030405060708090A0B0C0D0EFF
FFFFFFFE 00 1
FFFFFFFD 00 2
FFFFFFFC 00 2
FFFFFFFB 00 1
00001000 1F void [A] N.T::M()
00001020 1A2B int32 [A] N.T::Big(int32,string)
00009000 08 void [A] N.T::M()
";

#[test]
fn hand_written_map_parses_to_its_values() {
    let m = R2rPerfMap::parse(HAND_WRITTEN).expect("parses");
    let mut sig = [0u8; 16];
    for (i, b) in sig.iter_mut().enumerate() {
        *b = i as u8;
    }
    sig[15] = 0xFF;
    assert_eq!(m.signature, sig);
    assert_eq!((m.version, m.os, m.arch, m.abi), (1, 2, 2, 1));
    assert_eq!(enum_name(&OS_NAMES, m.os), "Linux");
    assert_eq!(enum_name(&ARCH_NAMES, m.arch), "ARM64");
    assert_eq!(enum_name(&ABI_NAMES, m.abi), "Default");
    assert_eq!(enum_name(&ARCH_NAMES, 9), "Unknown(9)");
    assert_eq!(
        m.entries,
        vec![
            R2rPerfMapEntry {
                rva: 0x1000,
                length: 0x1F,
                name: "void [A] N.T::M()".into()
            },
            R2rPerfMapEntry {
                rva: 0x1020,
                length: 0x1A2B,
                name: "int32 [A] N.T::Big(int32,string)".into()
            },
            // The cold part of the first method: the same name again.
            R2rPerfMapEntry {
                rva: 0x9000,
                length: 8,
                name: "void [A] N.T::M()".into()
            },
        ]
    );
    assert_eq!(m.lookup(0x1000).map(|e| e.rva), Some(0x1000));
    assert_eq!(m.lookup(0x101E).map(|e| e.rva), Some(0x1000));
    assert_eq!(m.lookup(0x101F), None);
    assert_eq!(m.lookup(0x1020 + 0x1A2A).map(|e| e.rva), Some(0x1020));
    assert_eq!(m.lookup(0x9007).map(|e| e.rva), Some(0x9000));
    // Written back: byte for byte the hand-written text (upper-case hex, two digits at
    // least).
    assert_eq!(m.write(), HAND_WRITTEN);
}

#[test]
fn crlf_and_blank_lines_are_accepted() {
    let text = HAND_WRITTEN.replace('\n', "\r\n") + "\r\n";
    let m = R2rPerfMap::parse(&text).expect("parses");
    assert_eq!(m.entries.len(), 3);
    assert_eq!(m.entries[1].name, "int32 [A] N.T::Big(int32,string)");
}

#[test]
fn damage_gives_typed_errors_with_line_numbers() {
    let lines: Vec<&str> = HAND_WRITTEN.lines().collect();
    let with = |k: usize, line: &str| {
        let mut l = lines.clone();
        l[k] = line;
        l.join("\n")
    };
    // Header records out of order.
    assert_eq!(
        R2rPerfMap::parse(&with(1, "FFFFFFFD 00 2")),
        Err(R2rPerfMapError::HeaderToken {
            line: 2,
            index: 1,
            expected: 0xFFFF_FFFE,
            found: 0xFFFF_FFFD
        })
    );
    // A header with a length.
    assert_eq!(
        R2rPerfMap::parse(&with(2, "FFFFFFFD 01 2")),
        Err(R2rPerfMapError::HeaderLength { line: 3, found: 1 })
    );
    // A short signature, a non-numeric OS.
    assert!(matches!(
        R2rPerfMap::parse(&with(0, "FFFFFFFF 00 0011")),
        Err(R2rPerfMapError::HeaderValue { line: 1, .. })
    ));
    assert!(matches!(
        R2rPerfMap::parse(&with(2, "FFFFFFFD 00 linux")),
        Err(R2rPerfMapError::HeaderValue { line: 3, .. })
    ));
    // A newer version.
    assert_eq!(
        R2rPerfMap::parse(&with(1, "FFFFFFFE 00 2")),
        Err(R2rPerfMapError::UnknownVersion(2))
    );
    // Entries: bad numbers, a missing name, a length past 32 bits.
    assert!(matches!(
        R2rPerfMap::parse(&with(6, "0000XYZ0 10 name")),
        Err(R2rPerfMapError::Number { line: 7, .. })
    ));
    assert_eq!(
        R2rPerfMap::parse(&with(6, "00001020 10")),
        Err(R2rPerfMapError::Shape { line: 7 })
    );
    assert!(matches!(
        R2rPerfMap::parse(&with(6, "00001020 123456789 name")),
        Err(R2rPerfMapError::Number { line: 7, .. })
    ));
    // Truncated inside the header.
    for n in 0..5 {
        let text = lines[..n].join("\n");
        assert_eq!(
            R2rPerfMap::parse(&text),
            Err(R2rPerfMapError::MissingHeader { lines: n }),
            "{n} lines"
        );
    }
}

#[test]
fn random_maps_round_trip() {
    // A small deterministic generator: names with spaces and punctuation, lengths of every
    // width.
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..200 {
        let mut sig = [0u8; 16];
        for b in &mut sig {
            *b = next() as u8;
        }
        let entries = (0..(next() % 20))
            .map(|i| R2rPerfMapEntry {
                rva: next() as u32,
                length: (next() as u32) >> (next() % 32),
                name: format!(
                    "instance void [Asm {i}] Ns.T`1[System.Int32]::M{}(int32&,string)",
                    next() % 1000
                ),
            })
            .collect();
        let m = R2rPerfMap {
            signature: sig,
            version: 1,
            os: (next() % 7) as u32,
            arch: (next() % 5) as u32,
            abi: (next() % 3) as u32,
            entries,
        };
        assert_eq!(R2rPerfMap::parse(&m.write()).as_ref(), Ok(&m));
    }
}
