//! The range section map walk (`contracts::execution_manager::range_section_map`) over
//! memory from the input: lookups of input-chosen addresses, and the enumeration of every
//! section.
#![no_main]

use std::collections::BTreeSet;

use cdac::contracts::execution_manager::range_section_map::{all_range_sections, RangeSectionMap};
use cdac_fuzz::{descriptor, layout, memory, Input, BASE};
use libfuzzer_sys::fuzz_target;

/// Sequential layout: every field pointer-sized (`Flags` padded to a pointer).
fn descriptor_json(ps: u64) -> String {
    format!(
        r#"{{"version":0,
        "types":{{
          "RangeSectionMap":{{"TopLevelData":0}},
          "RangeSectionFragment":{{"RangeBegin":0,"RangeEndOpen":{p1},"RangeSection":{p2},"Next":{p3}}},
          "RangeSection":{{"RangeBegin":0,"RangeEndOpen":{p1},"NextForDelete":{p2},"JitManager":{p3},
                          "Flags":{p4},"HeapList":{p5},"R2RModule":{p6}}}
        }},
        "globals":{{"ExecutionManagerCodeRangeMapAddress":[0]}}}}"#,
        p1 = ps,
        p2 = 2 * ps,
        p3 = 3 * ps,
        p4 = 4 * ps,
        p5 = 5 * ps,
        p6 = 6 * ps,
    )
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let flags = input.u8();
    let layout = layout(flags);
    let wrap = flags & 0x10 == 0;
    let top = BASE + u64::from(input.u16() % 0x1000);
    let n_addrs = usize::from(input.u8() % 8) + 1;
    let addrs: Vec<u64> = (0..n_addrs).map(|_| input.u64()).collect();
    let target = memory(layout, input.rest(), wrap);
    let d = descriptor(
        layout,
        &descriptor_json(u64::from(layout.pointer_size)),
        &[top],
    );
    let Ok(map) = RangeSectionMap::new(&target, &d) else {
        return;
    };
    assert_eq!(map.top_level(), top);
    for &addr in &addrs {
        if let Ok(Some(fragment)) = map.find_fragment(&target, addr) {
            assert!(
                fragment.contains(addr),
                "{fragment:?} does not cover {addr:#x}"
            );
        }
        if let Ok(Some(section)) = map.find(&target, addr) {
            assert!(!section.is_being_deleted());
        }
        let _ = map.fragment_list(&target, addr);
    }
    if let Ok(sections) = all_range_sections(&target, &d) {
        let unique: BTreeSet<u64> = sections.iter().map(|s| s.address).collect();
        assert_eq!(unique.len(), sections.len(), "a section listed twice");
        assert!(sections.iter().all(|s| !s.is_being_deleted()));
    }
});
