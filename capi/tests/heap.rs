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
