//! The heap through the C ABI on the .NET 10 testbed's full dump: `cdac_heap_segments`,
//! `cdac_heap_stat` (with `cdac_type_name`) and `cdac_gc_handles` answer what the Rust API
//! answers, count-then-fill with a too-small buffer says so, and a bad handle is refused.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::ffi::{c_char, CString};

use cdac::*;
use common::{testbed_of, Variant};

/// Calls a count-then-fill entry point twice (the count, then the list).
fn list<T: Copy + Default>(f: impl Fn(*mut T, usize, *mut usize) -> i32) -> Vec<T> {
    let mut count = 0usize;
    let rc = f(std::ptr::null_mut(), 0, &mut count);
    assert!(
        rc == CDAC_OK || rc == CDAC_E_BUFFER_TOO_SMALL,
        "status {rc}"
    );
    let mut out = vec![T::default(); count];
    let rc = f(out.as_mut_ptr(), out.len(), &mut count);
    assert_eq!(rc, CDAC_OK);
    assert_eq!(count, out.len());
    out
}

fn type_name(h: *mut CdacHandle, mt: u64) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    let mut needed = 0usize;
    // SAFETY: buf holds its length; needed is valid.
    let rc = unsafe {
        cdac_type_name(
            h,
            mt,
            buf.as_mut_ptr().cast::<c_char>(),
            buf.len(),
            &mut needed,
        )
    };
    (rc == CDAC_OK).then(|| {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    })
}

#[test]
fn heap_through_the_abi_equals_the_rust_api() {
    let dump = testbed_of(Variant::Net10).dump("full");
    let path = CString::new(dump.to_str().expect("path")).expect("C string");
    let mut h: *mut CdacHandle = std::ptr::null_mut();
    // SAFETY: path is NUL-terminated; h is a valid out pointer.
    assert_eq!(unsafe { cdac_open_core(path.as_ptr(), &mut h) }, CDAC_OK);

    let rt = cdac_core::runtime::Runtime::open_dump(&dump, &Default::default()).expect("open");
    let gc = rt.contracts().gc().expect("GC");

    // SAFETY (closures below): h is open; out holds cap entries; count is valid.
    let segments = list(|out, cap, count| unsafe { cdac_heap_segments(h, out, cap, count) });
    let theirs = gc.segments().expect("segments");
    assert_eq!(segments.len(), theirs.len());
    for (a, b) in segments.iter().zip(&theirs) {
        assert_eq!(
            (a.segment, a.start, a.end, a.reserved),
            (b.segment.address, b.start, b.end, b.segment.reserved)
        );
    }
    assert!(segments.iter().any(|s| s.kind == 6), "a frozen segment");

    let stats = list(|out, cap, count| unsafe { cdac_heap_stat(h, out, cap, count) });
    let layout = cdac_core::heap::layout(&rt).expect("layout");
    let mut rust = cdac_core::heap::HeapStats::default();
    cdac_core::heap::walk(&rt, &layout, |o| rust.add(o)).expect("walk");
    let rust = rust.sorted();
    assert_eq!(stats.len(), rust.len());
    for (a, b) in stats.iter().zip(&rust) {
        assert_eq!(
            (a.method_table, a.count, a.total_size, a.is_free),
            (b.method_table, b.count, b.total_size, u32::from(b.is_free))
        );
    }
    let string = stats
        .iter()
        .find(|s| type_name(h, s.method_table).as_deref() == Some("System.String"))
        .expect("strings on the heap");
    assert!(string.count > 1000, "{} strings", string.count);

    let handles = list(|out, cap, count| unsafe { cdac_gc_handles(h, out, cap, count) });
    let theirs = gc.handles().expect("handles");
    assert_eq!(handles.len(), theirs.len());
    for (a, b) in handles.iter().zip(&theirs) {
        assert_eq!(
            (a.address, a.object, a.secondary, a.kind),
            (b.address, b.object, b.secondary, u32::from(b.kind.number()))
        );
    }
    assert!(handles.iter().any(|x| x.kind == 2 && x.is_strong == 1));

    // Too small a buffer, and a bad handle.
    let mut one = [CdacTypeStat::default(); 1];
    let mut count = 0usize;
    // SAFETY: one holds one entry; count is valid.
    assert_eq!(
        unsafe { cdac_heap_stat(h, one.as_mut_ptr(), 1, &mut count) },
        CDAC_E_BUFFER_TOO_SMALL
    );
    assert_eq!(count, stats.len());
    assert_eq!(one[0], stats[0]);
    // SAFETY: a NULL handle is refused before anything is read.
    assert_eq!(
        unsafe { cdac_heap_segments(std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut count) },
        CDAC_E_NULL_POINTER
    );
    // SAFETY: h is open and closed once.
    assert_eq!(unsafe { cdac_close(h) }, CDAC_OK);
}

/// `cdac_object_fields` and `cdac_gcroot` on the testbed's `FieldShapes` object: its fields
/// (the struct's inside it, one deeper) with the values the testbed read by reflection, and
/// the same path the Rust API finds.
#[test]
fn object_fields_and_gcroot_through_the_abi() {
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let shapes = &tb.manifest["heap"]["field_shapes"];
    let mt = common::hex(&shapes["method_table"]);
    let rt = cdac_core::runtime::Runtime::open_dump(&dump, &Default::default()).expect("open");
    let layout = cdac_core::heap::layout(&rt).expect("layout");
    let mut object = 0;
    cdac_core::heap::walk(&rt, &layout, |o| {
        if o.method_table == mt {
            object = o.address;
        }
    })
    .expect("walk");
    assert_ne!(object, 0, "FieldShapes is on the heap");

    let path = CString::new(dump.to_str().expect("path")).expect("C string");
    let mut h: *mut CdacHandle = std::ptr::null_mut();
    // SAFETY: path is NUL-terminated; h is a valid out pointer.
    assert_eq!(unsafe { cdac_open_core(path.as_ptr(), &mut h) }, CDAC_OK);
    // SAFETY (closures below): h is open; out holds cap entries; count is valid.
    let fields: Vec<CdacField> = list(|out, cap, count| unsafe {
        cdac_object_fields(h, object, CDAC_FIELDS_STATICS, out, cap, count)
    });
    let text = |c: &[c_char]| {
        let bytes: Vec<u8> = c
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| b as u8)
            .collect();
        String::from_utf8(bytes).expect("utf-8")
    };
    let by_name = |name: &str, depth: u32| {
        fields
            .iter()
            .find(|f| text(&f.name) == name && f.depth == depth)
            .unwrap_or_else(|| panic!("no field {name} at depth {depth}"))
    };
    let values = &shapes["values"];
    let int = by_name("IntValue", 0);
    assert_eq!(int.value_kind, CDAC_VALUE_INT);
    assert_eq!(
        int.value as i64,
        values["IntValue"].as_i64().expect("IntValue")
    );
    assert_eq!(text(&int.type_name), "System.Int32");
    let point = by_name("Point", 0);
    assert_eq!(point.value_kind, CDAC_VALUE_STRUCT);
    let y = by_name("Y", 1);
    assert_eq!(y.value as i64, values["Point"]["Y"].as_i64().expect("Y"));
    assert_eq!(y.address, point.address + 4);
    let text_field = by_name("Text", 0);
    assert_eq!(text_field.value_kind, CDAC_VALUE_REFERENCE);
    assert_ne!(text_field.value, 0);
    let counter = by_name("StaticCounter", 0);
    assert_eq!(counter.is_static, 1);
    assert_eq!(
        counter.value as i64,
        shapes["static_counter"].as_i64().expect("counter")
    );

    let mut kind = 0u32;
    let mut root = 0u64;
    let mut steps = vec![CdacRootStep::default(); 64];
    let mut count = 0usize;
    // SAFETY: h is open; steps holds its length; the out pointers are valid.
    let rc = unsafe {
        cdac_gcroot(
            h,
            object,
            &mut kind,
            &mut root,
            steps.as_mut_ptr(),
            steps.len(),
            &mut count,
        )
    };
    assert_eq!(rc, CDAC_OK);
    steps.truncate(count);
    let mut marker =
        cdac_core::roots::Marker::new(&rt, cdac_core::roots::RootSet::read(&rt).expect("roots"))
            .expect("marker");
    let theirs = marker.path_to(object).expect("a path");
    assert_eq!(root, theirs.root.address);
    assert_eq!(kind, CDAC_ROOT_STRONG_HANDLE);
    let ours: Vec<u64> = steps.iter().map(|s| s.object).collect();
    let want: Vec<u64> = theirs.steps.iter().map(|s| s.object).collect();
    assert_eq!(ours, want);
    assert_eq!(steps[0].slot_offset, CDAC_VIA_ROOT);
    assert_eq!(steps.last().map(|s| s.object), Some(object));

    // SAFETY: h is open and closed once.
    assert_eq!(unsafe { cdac_close(h) }, CDAC_OK);
}
