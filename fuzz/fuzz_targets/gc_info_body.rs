//! GC info bodies (`contracts::gc_info::body` and `live_slots`): the tables after the
//! header and the live slots at the first code offsets and at every safe point, with
//! reporting options from the input, for every architecture and versions 2 to 4.
#![no_main]

use cdac::contracts::gc_info::{decode, GcInfoArch, GcSlotOptions};
use cdac::memory::DataLayout;
use cdac_fuzz::{memory, Input, BASE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let arch = GcInfoArch::ALL[usize::from(input.u8()) % GcInfoArch::ALL.len()];
    let version = 2 + u32::from(input.u8() % 3);
    let o = input.u8();
    let options = GcSlotOptions {
        active_frame: o & 1 != 0,
        execution_aborted: o & 2 != 0,
        parent_of_funclet: o & 4 != 0,
        suppress_untracked: o & 8 != 0,
        fp_based_only: o & 16 != 0,
    };
    let wrap = input.bool();
    let target = memory(DataLayout::LE64, input.rest(), wrap);
    let Ok(info) = decode(&target, BASE, version, arch) else {
        return;
    };
    assert!(info.safe_points.windows(2).all(|w| w[0] <= w[1]));
    assert!(info.num_registers <= info.num_tracked && info.num_tracked <= info.slots.len());
    assert!(info
        .interruptible_ranges
        .iter()
        .all(|&(s, e)| s < e && e <= info.header.code_length));
    let offsets = (0..info.header.code_length.min(64)).chain(info.safe_points.iter().copied());
    for offset in offsets {
        if let Ok(Some(live)) = info.tracked_live_at(&target, offset, options.execution_aborted) {
            assert!(live.iter().all(|&i| i < info.num_tracked));
            assert!(live.windows(2).all(|w| w[0] < w[1]));
        }
        if let Ok(slots) = info.enumerate_live_slots(&target, offset, &options) {
            assert!(slots
                .iter()
                .all(|s| info.slots.get(s.index) == Some(&s.slot)));
        }
    }
});
