//! LLVM MIP files (`formats::mip`): every file kind's reader, the profile operations, and
//! the round trip (a parsed file written back reparses equal, byte for byte).
#![no_main]

use cdac::formats::mip::{
    create_from_map, merge, merge_raw_into, show_rows, Header, MipMap, Profile, RawProfile,
};
use libfuzzer_sys::fuzz_target;

fn map(bytes: &[u8]) {
    let Ok(map) = MipMap::parse(bytes) else {
        return;
    };
    let out = map.to_bytes().expect("a parsed map is writable");
    assert_eq!(MipMap::parse(&out).as_ref(), Ok(&map));
    assert_eq!(out, bytes, "map round trip is byte-exact");
    let _ = map.entry_offsets();
    let _ = map.resolve();
    if let Ok(counts) = map.raw_block_counts() {
        assert_eq!(counts.len(), map.entries.len());
    }
    if let Ok(p) = create_from_map(&map) {
        profile_ops(&p);
    }
}

/// `p` was parsed or made from a map (whose names may hold NULs, which a profile cannot
/// store: writing it is then a typed error).
fn profile_ops(p: &Profile) {
    if let Ok(bytes) = p.to_bytes() {
        assert_eq!(Profile::parse(&bytes).as_ref(), Ok(p));
    }
    let _ = show_rows(p);
    let _ = p.names_by_signature();
    for f in p.functions.iter().take(64) {
        let _ = (p.name_of(f), f.covered(), f.block_coverage());
    }
    let _ = p.raw_block_counts();
    if let Ok(m) = merge(&[p.clone(), p.clone()]) {
        assert_eq!(m.functions.len(), p.functions.len());
    }
}

fn profile(bytes: &[u8]) {
    let Ok(p) = Profile::parse(bytes) else {
        return;
    };
    let out = p.to_bytes().expect("a parsed profile is writable");
    assert_eq!(Profile::parse(&out).as_ref(), Ok(&p));
    assert_eq!(out, bytes, "profile round trip is byte-exact");
    profile_ops(&p);
}

fn raw(bytes: &[u8], counts: &[u32]) {
    for parsed in [
        RawProfile::parse(bytes, counts),
        RawProfile::parse_without_blocks(bytes),
    ] {
        let Ok(r) = parsed else {
            continue;
        };
        let out = r.to_bytes().expect("a parsed raw profile is writable");
        let counts: Vec<u32> = r.records.iter().map(|x| x.blocks.len() as u32).collect();
        let again = RawProfile::parse(&out, &counts);
        assert_eq!(again.as_ref(), Ok(&r));
        assert_eq!(out, bytes, "raw round trip is byte-exact");
        let offsets = r.record_offsets();
        assert_eq!(offsets.len(), r.records.len());
        for rec in r.records.iter().take(64) {
            let _ = (rec.function_covered(), rec.blocks_covered().count());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let _ = Header::parse(rest).map(|h| h.file_type());
    match mode % 4 {
        0 => map(rest),
        1 => profile(rest),
        2 => {
            let n = usize::from(rest.first().copied().unwrap_or(0) % 16);
            let counts: Vec<u32> = rest
                .iter()
                .skip(1)
                .take(n)
                .map(|&b| u32::from(b % 8))
                .collect();
            raw(rest.get(1 + n..).unwrap_or(&[]), &counts);
        }
        _ => {
            // A profile plus a raw file merged into it.
            let n = usize::from(u16::from_le_bytes([
                rest.first().copied().unwrap_or(0),
                rest.get(1).copied().unwrap_or(0),
            ]));
            let body = rest.get(2..).unwrap_or(&[]);
            let (p, r) = body.split_at(n.min(body.len()));
            if let Ok(mut p) = Profile::parse(p) {
                let counts = p.raw_block_counts();
                if let Ok(r) = RawProfile::parse(r, &counts) {
                    let before = p.functions.len();
                    if merge_raw_into(&mut p, &r).is_ok() {
                        assert_eq!(p.functions.len(), before);
                        profile_ops(&p);
                    }
                }
            }
        }
    }
});
