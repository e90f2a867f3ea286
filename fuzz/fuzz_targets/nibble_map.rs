//! Nibble maps of both versions (`contracts::execution_manager::nibble_map`) over map units
//! from the input: lookups of input-chosen addresses in and around the heap.
#![no_main]

use cdac::contracts::execution_manager::nibble_map::{NibbleMap, NibbleMapVersion};
use cdac::contracts::ContractError;
use cdac_fuzz::{layout, memory, Input, BASE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let flags = input.u8();
    let layout = layout(flags);
    let wrap = flags & 0x10 != 0;
    let wild = flags & 0x20 != 0;
    let scan_limit = 1 + u64::from(input.u16());
    // Map base and heap bounds: near the map (so lookups read it) unless `wild`.
    let (map_base, heap_start, heap_end) = if wild {
        (input.u64(), input.u64(), input.u64())
    } else {
        let map_base = 0x4000_0000u64 + u64::from(input.u16()) * 4;
        let start = map_base + u64::from(input.u16());
        let end = start + u64::from(input.u32() % (1 << 20));
        (map_base, start, end)
    };
    let n_addrs = usize::from(input.u8() % 16) + 1;
    let addrs: Vec<u64> = (0..n_addrs)
        .map(|_| {
            let v = input.u32();
            if wild {
                u64::from(v) | (u64::from(input.u32()) << 32)
            } else {
                heap_start
                    .wrapping_add(u64::from(v % (1 << 21)))
                    .wrapping_sub(1 << 10)
            }
        })
        .collect();
    let target = memory(layout, input.rest(), wrap);
    for version in [NibbleMapVersion::Linear, NibbleMapVersion::Constant] {
        let map = NibbleMap::new(version, map_base, BASE, heap_start, heap_end)
            .with_scan_limit(scan_limit);
        for &addr in &addrs {
            match map.find_method_start(&target, addr) {
                Ok(None) => {}
                Ok(Some(start)) => assert!(
                    start >= heap_start && start <= addr && addr <= heap_end,
                    "{version:?}: start {start:#x} for {addr:#x} outside [{heap_start:#x}, {heap_end:#x}]"
                ),
                Err(ContractError::Corrupt { .. })
                | Err(ContractError::LimitExceeded { .. })
                | Err(ContractError::Read(_)) => {}
                Err(e) => panic!("{version:?}: unexpected error {e}"),
            }
        }
    }
});
