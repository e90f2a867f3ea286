//! libcdac over memory a host provides through a callback: a core dump read by the test
//! (as a debugger would hand over its inferior's memory) answers `cdac_ip2md` as the
//! native core reader does; bad handles, NULL pointers, failing reads and panics come back
//! as status codes. Also times `cdac_ip2md` against the Rust API.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use cdac::*;
use cdac_core::contracts::execution_manager::execution_manager;
use cdac_core::memory::core_dump::CoreDump;
use cdac_core::memory::MemorySource;
use cdac_core::runtime::{OpenOptions, Runtime};
use common::{perf_map, testbed_of, Variant};

/// What the read callback reads, and how it misbehaves on request.
struct Host {
    core: CoreDump,
    fail: AtomicBool,
    panic: AtomicBool,
    reads: AtomicU64,
}

/// The host's read callback: the core's bytes.
unsafe extern "C-unwind" fn read_host(
    ctx: *mut c_void,
    addr: u64,
    buf: *mut u8,
    len: usize,
) -> i32 {
    // SAFETY: `ctx` is the `Host` the test passed to cdac_open_callbacks; it outlives the
    // handle.
    let host = unsafe { &*(ctx as *const Host) };
    host.reads.fetch_add(1, Ordering::Relaxed);
    if host.panic.load(Ordering::Relaxed) {
        panic!("the host's callback panics");
    }
    if host.fail.load(Ordering::Relaxed) {
        return 1;
    }
    // SAFETY: libcdac passes a writable buffer of `len` bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(buf, len) };
    match host.core.read_exact(addr, out) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

fn last_error() -> String {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let mut buf = vec![0u8; 512];
        let n = cdac_last_error(buf.as_mut_ptr().cast::<c_char>(), buf.len());
        buf.truncate(n.saturating_sub(1).min(511));
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// Opens the host's memory with the core's NT_FILE mappings.
fn open_host(host: &Host) -> (i32, *mut CdacHandle) {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let paths: Vec<CString> = host
            .core
            .mapped_files()
            .iter()
            .map(|m| CString::new(m.path.to_string_lossy().as_bytes()).expect("path"))
            .collect();
        let maps: Vec<CdacMapping> = host
            .core
            .mapped_files()
            .iter()
            .zip(&paths)
            .map(|(m, p)| CdacMapping {
                start: m.start,
                end: m.end,
                file_offset: m.file_offset,
                path: p.as_ptr(),
            })
            .collect();
        let mut h: *mut CdacHandle = std::ptr::null_mut();
        let ctx = host as *const Host as *mut c_void;
        let status = cdac_open_callbacks(Some(read_host), ctx, maps.as_ptr(), maps.len(), &mut h);
        (status, h)
    }
}

fn ip2md(h: *mut CdacHandle, ip: u64) -> (i32, CdacMethodInfo) {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let mut info = CdacMethodInfo::default();
        (cdac_ip2md(h, ip, &mut info), info)
    }
}

fn name(h: *mut CdacHandle, ip: u64) -> Option<String> {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let mut needed = 0usize;
        let status = cdac_method_name(h, ip, std::ptr::null_mut(), 0, &mut needed);
        if status != CDAC_E_BUFFER_TOO_SMALL {
            return None;
        }
        let mut buf = vec![0u8; needed];
        let status = cdac_method_name(h, ip, buf.as_mut_ptr().cast(), buf.len(), &mut needed);
        assert_eq!(status, CDAC_OK, "{}", last_error());
        buf.pop();
        Some(String::from_utf8(buf).expect("utf-8 name"))
    }
}

/// A full dump of the .NET 10 testbed, the start and middle of `count` of its methods, and
/// the middle of methods between those (looked up by no test before, so their code headers
/// are read afresh).
fn sample(count: usize) -> (std::path::PathBuf, Vec<u64>, Vec<u64>) {
    let tb = testbed_of(Variant::Net10);
    let core = tb.dump("full");
    let entries: Vec<(u64, u64, String)> = perf_map(&tb.perf_map_for(Some("full")))
        .into_iter()
        .filter(|(_, size, name)| *size > 1 && !name.starts_with("stub"))
        .collect();
    let step = (entries.len() / count).max(1);
    let addrs = entries
        .iter()
        .step_by(step)
        .take(count)
        .flat_map(|(s, z, _)| [*s, s + z / 2])
        .collect();
    let untouched = entries
        .iter()
        .skip(step / 2)
        .step_by(step)
        .filter(|_| step > 1)
        .map(|(s, z, _)| s + z / 2)
        .collect();
    (core, addrs, untouched)
}

#[test]
fn callback_target_answers_as_the_core_reader() {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let (core, addrs, untouched) = sample(60);
        let host = Host {
            core: CoreDump::open(&core).expect("open core"),
            fail: AtomicBool::new(false),
            panic: AtomicBool::new(false),
            reads: AtomicU64::new(0),
        };
        let (status, cb) = open_host(&host);
        assert_eq!(status, CDAC_OK, "{}", last_error());
        let path = CString::new(core.to_string_lossy().as_bytes()).expect("path");
        let mut native: *mut CdacHandle = std::ptr::null_mut();
        assert_eq!(
            cdac_open_core(path.as_ptr(), &mut native),
            CDAC_OK,
            "{}",
            last_error()
        );

        let mut managed = 0;
        for &ip in &addrs {
            let (s1, a) = ip2md(cb, ip);
            let (s2, b) = ip2md(native, ip);
            assert_eq!((s1, a), (s2, b), "{ip:#x}: {}", last_error());
            if s1 == CDAC_OK {
                managed += 1;
                assert_eq!(name(cb, ip), name(native, ip), "{ip:#x}");
                assert!(a.hot_size > 0 && a.start <= ip && ip < a.start + a.hot_size);
            }
        }
        assert!(
            managed * 10 >= addrs.len() * 9,
            "{managed} of {}",
            addrs.len()
        );
        assert_eq!(ip2md(cb, 0x1000).0, CDAC_NOT_FOUND);
        eprintln!(
            "callback target: {managed} of {} addresses managed, same answers; {} callback reads",
            addrs.len(),
            host.reads.load(Ordering::Relaxed)
        );

        // A read that fails: a method not looked up yet cannot be found.
        let fresh = addrs[addrs.len() / 2] + 1;
        host.fail.store(true, Ordering::Relaxed);
        // Methods nobody looked up: their data is not in the page cache yet.
        let cold = untouched.iter().copied().find(|&a| {
            let (s, _) = ip2md(cb, a);
            s != CDAC_OK && s != CDAC_NOT_FOUND
        });
        let s = cold.map(|a| ip2md(cb, a).0);
        assert_eq!(s, Some(CDAC_E_READ_FAILED), "{}", last_error());
        assert!(
            last_error().contains("read callback failed"),
            "{}",
            last_error()
        );
        host.fail.store(false, Ordering::Relaxed);

        // A callback that panics: caught at the boundary.
        host.panic.store(true, Ordering::Relaxed);
        let (s, _) = ip2md(cb, fresh + 0x10_0000_0000);
        assert_eq!(s, CDAC_E_PANIC, "{}", last_error());
        assert!(last_error().contains("panics"), "{}", last_error());
        host.panic.store(false, Ordering::Relaxed);

        assert_eq!(cdac_close(cb), CDAC_OK);
        assert_eq!(cdac_close(native), CDAC_OK);
        // Closed handles are refused, not dereferenced.
        assert_eq!(ip2md(cb, addrs[0]).0, CDAC_E_BAD_HANDLE);
        assert_eq!(cdac_close(cb), CDAC_E_BAD_HANDLE);

        // Opening over a callback that always fails.
        host.fail.store(true, Ordering::Relaxed);
        let (s, h) = open_host(&host);
        assert_eq!(s, CDAC_E_OPEN_FAILED, "{}", last_error());
        assert!(h.is_null());
    }
}

#[test]
fn null_pointers_and_bad_arguments_are_status_codes() {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let mut h: *mut CdacHandle = std::ptr::null_mut();
        assert_eq!(
            cdac_open_core(std::ptr::null(), &mut h),
            CDAC_E_NULL_POINTER
        );
        assert!(last_error().contains("NULL"));
        let path = CString::new("/nonexistent/core").expect("path");
        assert_eq!(
            cdac_open_core(path.as_ptr(), std::ptr::null_mut()),
            CDAC_E_NULL_POINTER
        );
        assert_eq!(cdac_open_core(path.as_ptr(), &mut h), CDAC_E_OPEN_FAILED);
        assert!(!last_error().is_empty());
        assert_eq!(
            cdac_open_callbacks(None, std::ptr::null_mut(), std::ptr::null(), 0, &mut h),
            CDAC_E_NULL_POINTER
        );
        let mut info = CdacMethodInfo::default();
        assert_eq!(
            cdac_ip2md(std::ptr::null_mut(), 1, &mut info),
            CDAC_E_NULL_POINTER
        );
        let fake = &mut info as *mut CdacMethodInfo as *mut CdacHandle;
        assert_eq!(cdac_ip2md(fake, 1, &mut info), CDAC_E_BAD_HANDLE);
        assert_eq!(cdac_close(std::ptr::null_mut()), CDAC_OK);
        // The message buffer is truncated, not overrun, and reports the size it needs.
        let mut small = [0x55u8; 4];
        let needed = cdac_last_error(small.as_mut_ptr().cast(), small.len());
        assert!(needed > 4);
        assert_eq!(small[3], 0);
        assert!(cdac_last_error(std::ptr::null_mut(), 0) == needed);
    }
}

#[test]
fn handle_errors_and_unwind_inputs_on_a_core() {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let (core, addrs, _) = sample(10);
        let path = CString::new(core.to_string_lossy().as_bytes()).expect("path");
        let mut h: *mut CdacHandle = std::ptr::null_mut();
        assert_eq!(
            cdac_open_core(path.as_ptr(), &mut h),
            CDAC_OK,
            "{}",
            last_error()
        );
        assert_eq!(
            cdac_ip2md(h, addrs[0], std::ptr::null_mut()),
            CDAC_E_NULL_POINTER
        );
        // A name buffer too small: truncated, the size needed reported.
        let mut buf = [0u8; 8];
        let mut needed = 0;
        let s = cdac_method_name(h, addrs[0], buf.as_mut_ptr().cast(), buf.len(), &mut needed);
        assert_eq!(s, CDAC_E_BUFFER_TOO_SMALL);
        assert!(needed > 8 && buf[7] == 0);
        // Registers without rsp are refused; an address that is not code is "not found".
        let regs = CdacX64Regs {
            rip: addrs[0],
            valid_mask: CDAC_REG_RIP,
            ..Default::default()
        };
        let mut out = CdacX64Regs::default();
        assert_eq!(
            cdac_unwind_step(h, &regs, &mut out),
            CDAC_E_INVALID_ARGUMENT
        );
        let regs = CdacX64Regs {
            rip: 0x1000,
            rsp: 0x7fff_0000,
            valid_mask: CDAC_REG_RIP | CDAC_REG_RSP,
            ..Default::default()
        };
        assert_eq!(cdac_unwind_step(h, &regs, &mut out), CDAC_NOT_FOUND);
        let mut count = 0;
        assert_eq!(
            cdac_stack(h, std::ptr::null(), std::ptr::null_mut(), 0, &mut count),
            CDAC_E_NULL_POINTER
        );
        assert_eq!(cdac_close(h), CDAC_OK);
    }
}

#[test]
fn ip2md_cost_through_the_abi_and_the_rust_api() {
    // SAFETY: the pointers passed to libcdac are live locals (or NULL, or made up, on purpose: the library checks them), and handles come from cdac_open_*.
    unsafe {
        let (core, addrs, _) = sample(200);
        let path = CString::new(core.to_string_lossy().as_bytes()).expect("path");
        let mut h: *mut CdacHandle = std::ptr::null_mut();
        assert_eq!(
            cdac_open_core(path.as_ptr(), &mut h),
            CDAC_OK,
            "{}",
            last_error()
        );
        let rt = Runtime::open_dump(&core, &OpenOptions::default()).expect("open");
        let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
        const ROUNDS: usize = 20;
        // First round warms both caches; then time the rest.
        let rust_round = || {
            let mut n = 0u64;
            for &ip in &addrs {
                if let Ok(Some(b)) = em.code_block(ip) {
                    let size = em.method_region_info(&b).map(|r| r.hot_size).unwrap_or(0);
                    let f = em.is_funclet(&b).unwrap_or(false);
                    n = n.wrapping_add(b.method_desc ^ size ^ u64::from(f));
                }
            }
            n
        };
        let abi_round = || {
            let mut n = 0u64;
            for &ip in &addrs {
                let (s, i) = ip2md(h, ip);
                if s == CDAC_OK {
                    n = n.wrapping_add(i.method_desc ^ i.hot_size ^ u64::from(i.is_funclet));
                }
            }
            n
        };
        let cold_rust = Instant::now();
        let a = rust_round();
        let cold_rust = cold_rust.elapsed();
        let cold_abi = Instant::now();
        let b = abi_round();
        let cold_abi = cold_abi.elapsed();
        assert_eq!(a, b);
        let t = Instant::now();
        for _ in 0..ROUNDS {
            std::hint::black_box(rust_round());
        }
        let rust = t.elapsed();
        let t = Instant::now();
        for _ in 0..ROUNDS {
            std::hint::black_box(abi_round());
        }
        let abi = t.elapsed();
        let calls = (ROUNDS * addrs.len()) as f64;
        eprintln!(
        "ip2md over {} addresses of a .NET 10 core: first lookup {:.1} us (Rust) / {:.1} us (ABI); \
         repeated {:.2} us (Rust API) vs {:.2} us (cdac_ip2md) per call",
        addrs.len(),
        cold_rust.as_secs_f64() * 1e6 / addrs.len() as f64,
        cold_abi.as_secs_f64() * 1e6 / addrs.len() as f64,
        rust.as_secs_f64() * 1e6 / calls,
        abi.as_secs_f64() * 1e6 / calls,
    );
        assert_eq!(cdac_close(h), CDAC_OK);
    }
}

#[test]
fn live_process_answers_as_the_rust_api() {
    let tb = testbed_of(Variant::Net10);
    let entries: Vec<(u64, u64, String)> = perf_map(&tb.perf_map_for(None))
        .into_iter()
        .filter(|(_, size, name)| *size > 1 && !name.starts_with("stub"))
        .collect();
    let addrs: Vec<u64> = entries
        .iter()
        .step_by((entries.len() / 20).max(1))
        .map(|(s, z, _)| s + z / 2)
        .collect();
    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    // SAFETY: the pointers passed to libcdac are live locals, and the handle comes from
    // cdac_open_pid.
    unsafe {
        let mut h: *mut CdacHandle = std::ptr::null_mut();
        assert_eq!(cdac_open_pid(tb.pid, &mut h), CDAC_OK, "{}", last_error());
        let mut managed = 0;
        for &ip in &addrs {
            let (s, info) = ip2md(h, ip);
            match em.code_block(ip).expect("code_block") {
                Some(b) => {
                    assert_eq!(s, CDAC_OK, "{}", last_error());
                    assert_eq!((info.method_desc, info.start), (b.method_desc, b.start));
                    managed += 1;
                }
                None => assert_eq!(s, CDAC_NOT_FOUND),
            }
        }
        assert!(managed > addrs.len() / 2, "{managed} of {}", addrs.len());
        assert_eq!(cdac_close(h), CDAC_OK);
        // No such process.
        assert_eq!(cdac_open_pid(-5, &mut h), CDAC_E_OPEN_FAILED);
    }
}
