//! Debug-info bounds (`contracts::debug_info::decode_bounds`), nibble- and bit-packed, from
//! input bytes; every mapping found is looked up again.
#![no_main]

use cdac::contracts::debug_info::{decode_bounds, mapping_at, BoundsEncoding};
use cdac_fuzz::{Input, BASE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let encoding = if input.bool() {
        BoundsEncoding::Packed
    } else {
        BoundsEncoding::Nibble
    };
    let bytes = input.rest();
    if let Ok(map) = decode_bounds(bytes, BASE, encoding) {
        // Each entry takes at least 4 bits of input.
        assert!(map.len() <= 2 * bytes.len());
        for m in &map {
            let found = mapping_at(&map, m.native_offset).expect("a mapping covers it");
            assert_eq!(found.native_offset, m.native_offset);
        }
    }
});
