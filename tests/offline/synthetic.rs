//! The synthetic .NET 10-style runtime (tests/fixtures/synthetic): a gcc-built
//! `libcoreclr.so` exporting a real-format `DotNetRuntimeContractDescriptor`. `cdac` must
//! read it by pid and from its gcore dump through the discovery path a real .NET 10
//! process takes; and the target layer must fail cleanly on processes that exit, cores
//! that are truncated, and cores whose backing files are gone.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use cdac::descriptor::ContractVersion;
use cdac::memory::core_dump::CoreDump;
use cdac::memory::live::LiveProcess;
use cdac::memory::{DataLayout, MemorySource, OpenError, ReadError, Target};
use cdac::runtime::{DescriptorSource, OpenOptions, Runtime, RuntimeError};
use common::{scratch, SyntheticHost};

/// Checks everything the host reported against what cdac found.
fn check_synthetic(rt: &Runtime, host: &SyntheticHost, what: &str) {
    let d = rt.descriptor();
    assert_eq!(
        rt.descriptor_source(),
        &DescriptorSource::Embedded {
            address: host.top("descriptor")
        },
        "{what}"
    );
    assert_eq!(
        d.contract("ExecutionManager"),
        Some(&ContractVersion::Number(2)),
        "{what}"
    );
    assert_eq!(
        d.contract("PrecodeStubs"),
        Some(&ContractVersion::Number(3)),
        "{what}"
    );
    // The GC sub-descriptor's contract and globals are merged in.
    assert_eq!(
        d.contract("GC"),
        Some(&ContractVersion::Number(9)),
        "{what}"
    );
    let subs = d.sub_descriptors();
    assert_eq!(subs.len(), 1, "{what}");
    assert_eq!(subs[0].name, "GC");
    assert_eq!(subs[0].address, Some(host.top("sub_descriptor")), "{what}");
    assert_eq!(subs[0].skipped, None);
    // Every indirect global, of the main and the GC descriptor, resolves to the slot
    // content the host printed.
    let globals = host.report["globals"].as_object().expect("globals");
    assert!(globals.len() >= 9);
    for (name, value) in globals {
        assert_eq!(
            d.global_value(name).expect(name),
            common::hex(value),
            "{what}: {name}"
        );
    }
    assert_eq!(d.global("GCLowestAddress").unwrap().origin(), "GC");
    assert_eq!(d.global_string("Architecture").unwrap(), "x64");
    assert_eq!(
        d.global("SyntheticNegativeOffset")
            .unwrap()
            .value_signed()
            .unwrap(),
        -16
    );
    // Through the resolved globals, real objects: ThreadStore global → pointer variable →
    // ThreadStore, whose ThreadCount is 3 and whose first thread (its link minus the
    // LinkNext offset) has Id 1.
    let t = rt.target();
    let store = t
        .read_pointer(d.global_value("ThreadStore").unwrap())
        .unwrap();
    assert_eq!(store, host.addr("objects", "thread_store"), "{what}");
    let store_ty = d.ty("ThreadStore").unwrap();
    assert_eq!(
        t.read_i32(store + store_ty.offset("ThreadCount").unwrap())
            .unwrap(),
        3
    );
    let link = t
        .read_pointer(store + store_ty.offset("FirstThreadLink").unwrap())
        .unwrap();
    let thread_ty = d.ty("Thread").unwrap();
    let first = link - thread_ty.offset("LinkNext").unwrap();
    assert_eq!(first, host.addr("objects", "thread_0"), "{what}");
    assert_eq!(
        t.read_u32(first + thread_ty.offset("Id").unwrap()).unwrap(),
        1
    );
    let domain = t
        .read_pointer(d.global_value("AppDomain").unwrap())
        .unwrap();
    let name = t
        .read_pointer(domain + d.ty("AppDomain").unwrap().offset("FriendlyName").unwrap())
        .unwrap();
    assert_eq!(t.read_utf16_c_string(name, 256).unwrap(), "synthetic-host");
    let v = rt.version().expect("version");
    assert_eq!(v.file_version, "10.0.25.52411", "{what}");
}

#[test]
fn live_synthetic_runtime_through_export_discovery() {
    let host = SyntheticHost::start(&[]);
    let rt = Runtime::attach(host.pid, &OpenOptions::default()).expect("attach");
    check_synthetic(&rt, &host, "live");
    assert_eq!(
        rt.module().path,
        common::synthetic_dir().join("libcoreclr.so")
    );
}

#[test]
fn gcore_of_synthetic_runtime() {
    let host = SyntheticHost::start(&[]);
    let core = scratch("synthetic").join("synthetic.core");
    host.gcore(&core);
    let rt = Runtime::open_dump(&core, &OpenOptions::default()).expect("open core");
    check_synthetic(&rt, &host, "gcore");
    let threads = rt.target().source().threads().unwrap();
    assert!(
        threads.iter().any(|t| t.tid == host.pid),
        "main thread in NT_PRSTATUS"
    );
    // Registers are plausible: every ip lies in a mapped file (the host or libc is
    // waiting in a system call), every sp in readable memory of the dump.
    for t in &threads {
        let (ip, sp) = (t.ip.expect("ip"), t.sp.expect("sp"));
        assert!(
            rt.target()
                .mapped_files()
                .iter()
                .any(|f| f.start <= ip && ip < f.end),
            "thread {} ip {ip:#x} is in no mapped file",
            t.tid
        );
        assert!(
            rt.target().read_u64(sp).is_ok(),
            "thread {} sp {sp:#x} unreadable",
            t.tid
        );
    }
    // Reading the JSON text crosses from a file-backed page into an anonymous one: two
    // PT_LOAD segments stitched in one read.
    let d = cdac::descriptor::embedded::read_header(rt.target(), host.top("descriptor"), "main")
        .unwrap();
    let json = rt
        .target()
        .read_bytes(d.descriptor, d.descriptor_size as usize)
        .unwrap();
    assert!(json.starts_with(b"{\"version\":0"));
    assert!(json.ends_with(b"}"));
    std::fs::remove_file(core).ok();
}

#[test]
fn process_that_exits_while_read_gives_process_exited() {
    let mut host = SyntheticHost::start(&["--exit-after-ms", "300"]);
    let live = LiveProcess::open(host.pid).expect("open");
    let addr = host.addr("objects", "thread_store");
    let target = Target::new(Arc::new(live), DataLayout::LE64);
    let mut last = Ok(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        last = target.read_u32(addr);
        if last.is_err() {
            break;
        }
    }
    let _ = host.child.wait();
    // Reaped or not, reads now fail with a "process exited" error at that address.
    let err = target.read_u32(addr).expect_err("process is gone");
    assert!(
        matches!(err, ReadError::ProcessExited { pid, addr: a } if pid == host.pid && a == addr),
        "{err}"
    );
    assert!(
        matches!(last, Err(ReadError::ProcessExited { .. })),
        "{last:?}"
    );
    // And opening it again says there is no such process.
    assert!(matches!(
        LiveProcess::open(host.pid),
        Err(OpenError::NoSuchProcess { .. })
    ));
    assert!(matches!(
        Runtime::attach(host.pid, &OpenOptions::default()),
        Err(RuntimeError::Open(OpenError::NoSuchProcess { .. }))
    ));
}

#[test]
fn live_reads_of_unmapped_memory_name_the_address() {
    let host = SyntheticHost::start(&[]);
    let live = LiveProcess::open(host.pid).expect("open");
    let t = Target::new(
        Arc::new(cdac::memory::cache::PageCache::new(live)),
        DataLayout::LE64,
    );
    let err = t.read_u64(0x10).expect_err("page zero");
    assert!(
        matches!(err, ReadError::Unmapped { addr: 0x10, .. }),
        "{err}"
    );
    // A read that starts mapped and runs off the end of the last mapping of the library.
    let lib = t
        .mapped_files()
        .iter()
        .filter(|f| f.path.ends_with("libcoreclr.so"))
        .max_by_key(|f| f.end)
        .unwrap()
        .clone();
    let gap_follows = !t.mapped_files().iter().any(|f| f.start == lib.end);
    if gap_follows && t.read_u8(lib.end).is_err() {
        let err = t.read_bytes(lib.end - 8, 16).expect_err("crosses the end");
        assert_eq!(err.address(), lib.end, "{err}");
    }
    // The same read through /proc/PID/mem.
    let live = LiveProcess::open(host.pid).expect("open");
    live.set_method(cdac::memory::live::ReadMethod::ProcMem);
    let t = Target::new(Arc::new(live), DataLayout::LE64);
    let store = host.addr("objects", "thread_store");
    assert_eq!(
        t.read_i32(store).unwrap(),
        3,
        "ThreadCount through /proc/PID/mem"
    );
    assert!(matches!(
        t.read_u64(0x10),
        Err(ReadError::Unmapped { addr: 0x10, .. })
    ));
}

/// Copies the first `len` bytes of `from` to `to`.
fn truncated_copy(from: &Path, to: &Path, len: u64) {
    let data = std::fs::read(from).unwrap();
    std::fs::write(to, &data[..len.min(data.len() as u64) as usize]).unwrap();
}

#[test]
fn truncated_cores_fail_with_typed_errors() {
    let host = SyntheticHost::start(&[]);
    let dir = scratch("truncated");
    let core = dir.join("whole.core");
    host.gcore(&core);
    let size = std::fs::metadata(&core).unwrap().len();
    let store = host.addr("objects", "thread_store");
    let whole = CoreDump::open(&core).unwrap();
    let mut expected = [0u8; 8];
    whole.read_exact(store, &mut expected).unwrap();

    // Shorter than an ELF header: not a core.
    for len in [0, 3, 40] {
        let path = dir.join(format!("cut{len}.core"));
        truncated_copy(&core, &path, len);
        assert!(
            matches!(CoreDump::open(&path), Err(OpenError::BadCore { .. })),
            "cut at {len}"
        );
    }
    // Cut at several points: opening works or fails with BadCore; reads either return the
    // right bytes or say the memory is not captured. Never a panic.
    for len in [64, 4096, size / 4, size / 2, size - 4096, size - 1] {
        let path = dir.join(format!("cut{len}.core"));
        truncated_copy(&core, &path, len);
        match CoreDump::open(&path) {
            Err(OpenError::BadCore { .. }) => {}
            Err(e) => panic!("cut at {len}: unexpected {e}"),
            Ok(dump) => {
                let mut buf = [0u8; 8];
                match dump.read_exact(store, &mut buf) {
                    Ok(()) => assert_eq!(buf, expected, "cut at {len}"),
                    Err(e) => assert!(e.is_missing_memory(), "cut at {len}: {e}"),
                }
                // (A cut in trailing bytes no header describes is undetectable and harmless.)
                if len <= size / 2 {
                    assert!(
                        dump.warnings().iter().any(|w| w.contains("truncated"))
                            || dump.segment_count() == 0,
                        "cut at {len}: no truncation warning in {:?}",
                        dump.warnings()
                    );
                }
                // The runtime either opens, or fails with a typed error.
                let _ = Runtime::open(Arc::new(dump), &OpenOptions::default());
            }
        }
        std::fs::remove_file(&path).ok();
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn core_whose_backing_file_is_missing_says_so() {
    // Run the host from a private copy of the build, dump it, then delete the library.
    let dir = scratch("missing-file");
    for f in ["synthetic-host", "libcoreclr.so"] {
        std::fs::copy(common::synthetic_dir().join(f), dir.join(f)).unwrap();
    }
    let host = SyntheticHost::start_in(&dir, &[]);
    let core = dir.join("host.core");
    host.gcore(&core);
    drop(host);
    let lib = dir.join("libcoreclr.so");
    std::fs::remove_file(&lib).unwrap();

    let dump = CoreDump::open(&core).expect("open");
    let lib_text = lib.display().to_string();
    assert!(
        dump.warnings().iter().any(|w| w.contains(&lib_text)),
        "{:?}",
        dump.warnings()
    );
    // A read-only mapping of the library that gcore left out: not captured, naming the file.
    let left_out = dump
        .mapped_files()
        .iter()
        .filter(|f| f.path == lib)
        .find_map(|f| dump.read_exact(f.start, &mut [0u8; 8]).err())
        .expect("gcore leaves out some read-only mapping of the library");
    match &left_out {
        ReadError::NotCaptured { reason, .. } => {
            assert!(
                reason.contains(&lib_text) && reason.contains("not on this machine"),
                "{reason}"
            )
        }
        other => panic!("expected NotCaptured, got {other}"),
    }
    // Opening the runtime still works or fails with a typed error; never a panic.
    match Runtime::open(Arc::new(dump), &OpenOptions::default()) {
        Ok(rt) => assert!(
            rt.version().is_none(),
            "the version string lives only in the missing file"
        ),
        Err(e) => eprintln!("runtime not opened without its file: {e}"),
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn reading_another_users_process_explains_the_missing_privilege() {
    // The host runs as root; cdac runs as nobody (uid 65534) without CAP_SYS_PTRACE.
    let host = SyntheticHost::start(&[]);
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_cdac"))
        .args(["info", "--pid", &host.pid.to_string()])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "cdac: error: permission denied opening process {}",
            host.pid
        )),
        "{err}"
    );
    assert!(
        err.contains("runs as uid 0 and we run as uid 65534"),
        "{err}"
    );
}

#[test]
fn single_file_host_exporting_the_descriptor_is_found() {
    // No libcoreclr.so is mapped: the executable itself exports the descriptor.
    let exe = common::synthetic_dir().join("singlefile-host");
    let host = SyntheticHost::start_exe(&exe, &[]);
    let rt = Runtime::attach(host.pid, &OpenOptions::default()).expect("attach");
    assert_eq!(rt.module().path, exe);
    assert!(!rt
        .target()
        .mapped_files()
        .iter()
        .any(|f| f.path.ends_with("libcoreclr.so")));
    check_synthetic(&rt, &host, "single-file");
}

#[test]
fn descriptor_override_file_replaces_discovery() {
    let host = SyntheticHost::start(&[]);
    let dir = scratch("override");
    // A plain descriptor (no pointer data): only direct values.
    let plain = dir.join("plain.json");
    std::fs::write(
        &plain,
        r#"{"version":0,"types":{"Thread":{"!":48,"Id":4}},"globals":{"Answer":"0x2a"},"contracts":{"Thread":"c9"}}"#,
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cdac"))
        .args([
            "info",
            "--json",
            "--pid",
            &host.pid.to_string(),
            "--descriptor",
        ])
        .arg(&plain)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["descriptor_source"]["kind"], "override");
    assert_eq!(j["descriptor_source"]["name"], plain.display().to_string());
    assert_eq!(j["contracts"]["Thread"], "c9");
    assert_eq!(j["types_count"], 1);
    assert_eq!(j["globals_count"], 1);
    // A plain descriptor's indirect globals index the runtime's own pointer data (slot 1
    // of the synthetic runtime holds the AppDomain variable's address)...
    std::fs::write(&plain, r#"{"version":0,"globals":{"X":[[1],"pointer"]}}"#).unwrap();
    let rt = Runtime::attach(
        host.pid,
        &OpenOptions {
            descriptor: Some(plain.clone()),
            ..OpenOptions::default()
        },
    )
    .expect("override");
    assert_eq!(
        rt.descriptor().global_value("X").unwrap(),
        host.addr("globals", "AppDomain")
    );
    // ...and an index past it is a typed error.
    std::fs::write(&plain, r#"{"version":0,"globals":{"X":[[99],"pointer"]}}"#).unwrap();
    let err = Runtime::attach(
        host.pid,
        &OpenOptions {
            descriptor: Some(plain.clone()),
            ..OpenOptions::default()
        },
    )
    .expect_err("index out of range");
    assert!(err.to_string().contains("pointer-data index 99"), "{err}");
    // A missing file is a typed error naming it.
    let missing = dir.join("nope.json");
    let err = Runtime::attach(
        host.pid,
        &OpenOptions {
            descriptor: Some(missing.clone()),
            ..OpenOptions::default()
        },
    )
    .expect_err("missing");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn core_whose_backing_file_changed_does_not_use_it() {
    // Dump a host run from a private copy, then put a different build at the library's path.
    let dir = scratch("changed-file");
    for f in ["synthetic-host", "libcoreclr.so"] {
        std::fs::copy(common::synthetic_dir().join(f), dir.join(f)).unwrap();
    }
    let host = SyntheticHost::start_in(&dir, &[]);
    let core = dir.join("host.core");
    host.gcore(&core);
    drop(host);
    let lib = dir.join("libcoreclr.so");
    let mut other = std::fs::read(&lib).unwrap();
    // Same size, different build id: flip bytes of the GNU build-id note in the first page.
    let note = other
        .windows(4)
        .position(|w| w == b"GNU\0")
        .expect("build-id note");
    for b in &mut other[note + 4..note + 12] {
        *b ^= 0xff;
    }
    std::fs::write(&lib, &other).unwrap();

    let dump = CoreDump::open(&core).expect("open");
    let refused = dump
        .mapped_files()
        .iter()
        .filter(|f| f.path == lib)
        .find_map(|f| dump.read_exact(f.start + 0x1000, &mut [0u8; 8]).err())
        .expect("some part of the library is left out of the core");
    match &refused {
        ReadError::NotCaptured { reason, .. } => {
            assert!(
                reason.contains("differs from the file the dumped process had mapped"),
                "{reason}"
            )
        }
        other => panic!("expected NotCaptured, got {other}"),
    }
    std::fs::remove_dir_all(&dir).ok();
}
