//! The object walk of the GC contract (`contracts::gc::walk`) over a segment of input bytes:
//! MethodTable pointers, base and component sizes, counts and allocation contexts are all
//! the input's. The walk must end, visit objects in address order without overlap and
//! inside the segment, and meet anything impossible with a problem, not a panic: each
//! problem after the one before, resuming (if it does) past where it met the damage.
#![no_main]

use cdac::contracts::gc::{GcSegment, HeapSegment, ObjectLayout, ObjectWalker, SegmentKind};
use cdac::memory::DataLayout;
use cdac_fuzz::{memory, Input, BASE, WRAP_WINDOW};
use libfuzzer_sys::fuzz_target;

const KINDS: [SegmentKind; 7] = [
    SegmentKind::Gen0,
    SegmentKind::Gen1,
    SegmentKind::Gen2,
    SegmentKind::Ephemeral,
    SegmentKind::Loh,
    SegmentKind::Poh,
    SegmentKind::Frozen,
];

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let flags = input.u8();
    let wrap = flags & 1 != 0;
    let kind = KINDS[usize::from(flags >> 1) % KINDS.len()];
    let start = BASE + u64::from(input.u16() & !7);
    let contexts: Vec<(u64, u64)> = (0..input.u8() % 4)
        .map(|_| {
            let p = BASE + u64::from(input.u16() & !7);
            (p, p + u64::from(input.u16()))
        })
        .collect();
    let free = input.bool().then(|| BASE + u64::from(input.u16() & !7));
    let bytes = input.rest();
    // A wrapped segment of 64 KiB: long enough for many objects, short enough for speed.
    let end = BASE + if wrap { WRAP_WINDOW.min(1 << 16) } else { bytes.len() as u64 };
    if start >= end {
        return;
    }
    let target = memory(DataLayout::LE64, bytes, wrap);
    let layout = ObjectLayout {
        mt_flags: 0,
        mt_base_size: 4,
        num_components: 8,
        mt_mask: 7,
    };
    let segment = GcSegment {
        heap: 0,
        kind,
        segment: HeapSegment {
            address: 0,
            allocated: end,
            committed: end,
            reserved: end,
            used: end,
            mem: start,
            flags: 0,
            next: 0,
            background_allocated: 0,
            heap: 0,
        },
        start,
        end,
    };
    let mut walker = ObjectWalker::new(&target, layout, contexts, free);
    let mut next_free = start;
    let mut visited = 0u64;
    let summary = walker.walk(&[segment], &[], |o| {
        assert!(o.address >= next_free, "object {:#x} overlaps the one before", o.address);
        let step = (o.size.max(24) + 7) & !7;
        assert!(o.address + step <= end, "object {:#x} of {} bytes past the end", o.address, o.size);
        next_free = o.address + step;
        visited += 1;
    });
    assert_eq!(summary.objects, visited);
    assert!(visited <= (end - start) / 24 + 1);
    let mut after = start;
    for p in &summary.problems {
        assert!(p.address >= after, "problem at {:#x} before {after:#x}", p.address);
        match p.resumed_at {
            Some(at) => {
                assert!(at > p.address && at < end, "resumed at {at:#x} from {:#x}", p.address);
                after = at;
            }
            None => after = end,
        }
    }
});
