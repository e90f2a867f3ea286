//! ReadyToRun PerfMaps (`formats::r2r::perf_map`): parse, lookups, and the round trip (a
//! parsed map written back reparses equal, and writing is stable).
#![no_main]

use cdac::formats::r2r::R2rPerfMap;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(map) = R2rPerfMap::parse(&text) else {
        return;
    };
    let written = map.write();
    let again = R2rPerfMap::parse(&written).expect("a written map parses");
    assert_eq!(again, map);
    assert_eq!(again.write(), written);
    for e in map.entries.iter().take(64) {
        for rva in [
            e.rva,
            e.rva.wrapping_add(e.length / 2),
            e.rva.wrapping_add(e.length),
        ] {
            if let Some(hit) = map.lookup(rva) {
                assert!(
                    rva >= hit.rva && u64::from(rva) < u64::from(hit.rva) + u64::from(hit.length)
                );
            }
        }
    }
});
