//! The mark from the roots and the path search (`roots::Marker`) over a segment of input
//! bytes: objects, their MethodTables and GC descriptors, the roots and a dependent edge are
//! all the input's. Marking must end with no more objects than the segment has 8-byte
//! slots; a path found must start at a root, end at the object asked for and stay in the
//! segment; an object a path reaches is marked by the whole mark too.
#![no_main]

use cdac::contracts::gc::{GcSegment, HeapSegment, ObjectLayout, ObjectWalker, SegmentKind};
use cdac::memory::DataLayout;
use cdac::roots::{Marker, Root, RootKind, RootSet, Via};
use cdac_fuzz::{memory, Input, BASE, WRAP_WINDOW};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let wrap = input.bool();
    let mut at = || BASE + u64::from(input.u16() & !7);
    let roots: Vec<u64> = (0..4).map(|_| at()).collect();
    let (primary, secondary) = (at(), at());
    let wanted = at();
    let bytes = input.rest();
    // A wrapped segment of 16 KiB: many objects and references, quick to mark.
    let end = BASE + if wrap { WRAP_WINDOW.min(1 << 14) } else { bytes.len() as u64 };
    if end <= BASE {
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
        kind: SegmentKind::Gen0,
        segment: HeapSegment {
            address: 0,
            allocated: end,
            committed: end,
            reserved: end,
            used: end,
            mem: BASE,
            flags: 0,
            next: 0,
            background_allocated: 0,
            heap: 0,
        },
        start: BASE,
        end,
    };
    let root_set = || {
        let mut set = RootSet {
            roots: roots
                .iter()
                .map(|&object| Root {
                    kind: RootKind::StrongHandle,
                    address: 0,
                    object,
                })
                .collect(),
            ..RootSet::default()
        };
        set.dependent.insert(primary, vec![secondary]);
        set
    };
    let walker = || ObjectWalker::new(&target, layout, Vec::new(), None);
    let slots = (end - BASE).div_ceil(8);

    let mut whole = Marker::over(&target, walker(), &[segment], root_set()).expect("marker");
    let summary = whole.mark_all();
    assert!(summary.marked <= slots, "{} marked in {slots} slots", summary.marked);

    let mut searching = Marker::over(&target, walker(), &[segment], root_set()).expect("marker");
    let Some(path) = searching.path_to(wanted) else {
        return;
    };
    assert!(whole.is_marked(wanted), "a path reaches {wanted:#x}, the mark does not");
    let first = path.steps.first().expect("a path has a step");
    assert_eq!(first.via, Via::Root);
    assert_eq!(first.object, path.root.object);
    assert_eq!(path.steps.last().map(|s| s.object), Some(wanted));
    assert!(path.steps.len() as u64 <= searching.summary().marked);
    for s in &path.steps {
        assert!((BASE..end).contains(&s.object), "step {:#x} outside", s.object);
    }
    for p in searching.paths_to(wanted, 3) {
        assert_eq!(p.steps.last().map(|s| s.object), Some(wanted));
        assert_eq!(p.steps.first().map(|s| s.object), Some(p.root.object));
    }
});
