//! `cdac_exception_text` (what the debugger extensions' `cdac pe` prints) on the dump the
//! runtime writes when the testbed dies of an unhandled exception, on .NET 10, 9 and 8:
//! the crashing thread's exception by thread id and by object address, with the type,
//! message and inner exception the testbed recorded, and the throw lines of Crash.cs found
//! by searching the source; threads without an exception, non-exception objects, small
//! buffers and bad handles come back as their status codes.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::ffi::{c_char, CString};

use cdac::*;
use common::{crash_dump, hex, repo, Variant};
use serde_json::Value;

fn last_error() -> String {
    let mut buf = vec![0u8; 1024];
    // SAFETY: buf is valid for its length.
    unsafe { cdac_last_error(buf.as_mut_ptr().cast::<c_char>(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// `cdac_exception_text`, asking for the size first; the status and the text.
fn exception_text(h: *mut CdacHandle, tid: u64, object: u64) -> (i32, String) {
    let mut needed = 0usize;
    // SAFETY: a NULL buffer with length 0 asks for the size; needed is valid.
    let rc = unsafe { cdac_exception_text(h, tid, object, std::ptr::null_mut(), 0, &mut needed) };
    if rc != CDAC_E_BUFFER_TOO_SMALL {
        return (rc, last_error());
    }
    let mut buf = vec![0u8; needed];
    // SAFETY: buf holds `needed` bytes.
    let rc = unsafe {
        cdac_exception_text(
            h,
            tid,
            object,
            buf.as_mut_ptr().cast::<c_char>(),
            buf.len(),
            &mut needed,
        )
    };
    assert_eq!(rc, CDAC_OK, "{}", last_error());
    assert_eq!(needed, buf.len());
    buf.pop();
    (rc, String::from_utf8(buf).expect("UTF-8"))
}

/// The 1-based line of the first line of Crash.cs containing `text`.
fn line_of(text: &str) -> usize {
    let source =
        std::fs::read_to_string(repo().join("testbed/Cdac.Testbed/Crash.cs")).expect("Crash.cs");
    source
        .lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("{text:?} in Crash.cs"))
        + 1
}

fn check(variant: Variant) {
    let what = variant.name();
    let (m, dump) = crash_dump(variant);
    let crash: &Value = &m["crash"];
    let tid = crash["os_tid"].as_u64().expect("os_tid");
    let path = CString::new(dump.to_str().expect("UTF-8 path")).expect("path");
    let mut h: *mut CdacHandle = std::ptr::null_mut();
    // SAFETY: path is NUL-terminated; h is a valid out pointer.
    let rc = unsafe { cdac_open_core(path.as_ptr(), &mut h) };
    assert_eq!(rc, CDAC_OK, "{what}: {}", last_error());

    let (rc, text) = exception_text(h, tid, 0);
    assert_eq!(rc, CDAC_OK, "{what}: {text}");
    let lines: Vec<&str> = text.lines().collect();
    // The outer exception first, then its inner one after "---> ".
    let head = format!(
        "{}: {}",
        crash["exception_type"].as_str().expect("type"),
        crash["message"].as_str().expect("message")
    );
    assert_eq!(lines[0], head, "{what}:\n{text}");
    let inner_head = format!(
        "---> {}: {}",
        crash["inner"]["exception_type"]
            .as_str()
            .expect("inner type"),
        crash["inner"]["message"].as_str().expect("inner message")
    );
    let at_inner = lines
        .iter()
        .position(|l| l.trim_start() == inner_head)
        .unwrap_or_else(|| panic!("{what}: no {inner_head:?} in\n{text}"));
    // Each exception's first frame is its throw, at the line of Crash.cs that throws it.
    let first_frame = |from: usize| {
        lines[from..]
            .iter()
            .find(|l| l.trim_start().starts_with("at "))
            .copied()
            .unwrap_or_else(|| panic!("{what}: no frame after line {from} in\n{text}"))
    };
    let outer_at = first_frame(0);
    let outer_line = line_of("throw new InvalidOperationException(OuterMessage");
    assert!(
        outer_at.contains(crash["method"].as_str().expect("method"))
            && outer_at.ends_with(&format!("Crash.cs:{outer_line}")),
        "{what}: {outer_at}"
    );
    let inner_at = first_frame(at_inner);
    let inner_line = line_of("throw new ArgumentException(InnerMessage");
    assert!(
        inner_at.contains(crash["inner"]["method"].as_str().expect("inner method"))
            && inner_at.ends_with(&format!("Crash.cs:{inner_line}")),
        "{what}: {inner_at}"
    );
    // The same text by the object's address, which the text gives.
    let object = lines[1]
        .rsplit("object ")
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("{what}: no object address in {:?}", lines[1]));
    let (_, by_object) = exception_text(h, 0, object);
    assert_eq!(by_object, text, "{what}: by object {object:#x}");
    // The inner exception alone, by its address.
    let inner_object = lines[at_inner + 1]
        .rsplit("object ")
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .expect("inner object address");
    let (_, inner_text) = exception_text(h, 0, inner_object);
    assert!(
        inner_text.starts_with(inner_head.trim_start_matches("---> ")),
        "{what}: {inner_text}"
    );

    // Not an exception: the MethodDesc of the thrower is no object; a thread id that is
    // not a managed thread; a thread without an exception (the finalizer, when listed).
    let md = hex(&crash["method_desc"]);
    let (rc, msg) = exception_text(h, 0, md);
    assert!(
        rc == CDAC_E_INVALID_ARGUMENT || rc == CDAC_E_READ_FAILED || rc == CDAC_E_RUNTIME_DATA,
        "{what}: {rc} {msg}"
    );
    let (rc, msg) = exception_text(h, 1, 0);
    assert_eq!(rc, CDAC_NOT_FOUND, "{what}: {msg}");
    assert!(msg.contains("not a managed thread"), "{what}: {msg}");

    // A small buffer gets the truncated text and the size.
    let mut small = [0u8; 8];
    let mut needed = 0usize;
    // SAFETY: small is valid for its length.
    let rc = unsafe {
        cdac_exception_text(
            h,
            tid,
            0,
            small.as_mut_ptr().cast::<c_char>(),
            small.len(),
            &mut needed,
        )
    };
    assert_eq!(rc, CDAC_E_BUFFER_TOO_SMALL);
    assert_eq!(needed, text.len() + 1);
    assert_eq!(&small[..7], &text.as_bytes()[..7]);
    assert_eq!(small[7], 0);

    // SAFETY: h came from cdac_open_core and is closed once.
    assert_eq!(unsafe { cdac_close(h) }, CDAC_OK);
    // SAFETY: a closed handle is refused, not dereferenced.
    let rc = unsafe { cdac_exception_text(h, tid, 0, std::ptr::null_mut(), 0, &mut needed) };
    assert_eq!(rc, CDAC_E_BAD_HANDLE);
}

#[test]
fn net10_crash_exception() {
    check(Variant::Net10);
}

#[test]
fn net9_crash_exception() {
    check(Variant::Net9);
}

#[test]
fn net8_crash_exception() {
    check(Variant::Net8);
}
