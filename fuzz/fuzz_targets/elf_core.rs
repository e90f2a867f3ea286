//! ELF core dumps (`memory::core_dump::CoreDump`): the file is the fuzz input (written to a
//! scratch file, since `CoreDump::open` maps a path), then threads, mapped files and reads
//! at the addresses the core itself names.
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cdac::memory::core_dump::CoreDump;
use cdac::memory::{DataLayout, MemorySource, Target};
use libfuzzer_sys::fuzz_target;

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        // scripts/fuzz-smoke points this at its scratch folder, which it removes.
        let shm = PathBuf::from("/dev/shm");
        let dir = match std::env::var_os("CDAC_FUZZ_SCRATCH") {
            Some(d) => PathBuf::from(d),
            None if shm.is_dir() => shm,
            None => std::env::temp_dir(),
        };
        dir.join(format!("cdac-fuzz-elf-core-{}.core", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    if std::fs::write(path, data).is_err() {
        return;
    }
    let Ok(core) = CoreDump::open(path) else {
        return;
    };
    let _ = (core.machine(), core.warnings().len(), core.segment_count());
    let _ = core.captured_bytes();
    let layout = core.native_layout().unwrap_or(DataLayout::LE64);
    let threads = core.threads();
    let files = core.mapped_files().to_vec();
    for pair in files.windows(2) {
        assert!(
            pair[0].start <= pair[1].start,
            "mapped files must be sorted"
        );
    }
    let core = Arc::new(core);
    let target = Target::new(core.clone(), layout);
    let mut addrs: Vec<u64> = Vec::new();
    for f in files.iter().take(64) {
        addrs.extend([f.start, f.end.wrapping_sub(1), f.end.wrapping_sub(8)]);
    }
    if let Ok(threads) = &threads {
        for t in threads.iter().take(64) {
            addrs.extend(t.ip);
            addrs.extend(t.sp);
        }
    }
    // An address from the input's tail, and the file's own first bytes as an address.
    if data.len() >= 8 {
        let tail: [u8; 8] = data[data.len() - 8..].try_into().unwrap_or_default();
        addrs.push(u64::from_le_bytes(tail));
    }
    for &a in &addrs {
        let mut buf = [0u8; 64];
        if core.read_exact(a, &mut buf).is_ok() {
            // A read that succeeded reads the same through the typed API.
            assert_eq!(target.read_bytes(a, 64).ok().as_deref(), Some(&buf[..]));
        }
        let _ = target.read_pointer(a);
        let _ = target.read_c_string(a, 256);
        let _ = target.read_bytes(a, 4096);
    }
});
