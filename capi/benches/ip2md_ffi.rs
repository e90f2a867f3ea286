//! The per-call cost of the C ABI's `cdac_ip2md` against the Rust API on the same dump and
//! the same addresses (those of benches/ip2md.rs: 1000 addresses inside the perf map's
//! methods, 1000 resolving ReadyToRun addresses), caches warm.
//!
//! - `rust_code_block`: `ExecutionManager::code_block` alone (what benches/ip2md.rs times);
//! - `rust_ip2md`: what `cdac_ip2md` computes, through the Rust API: the code block, the
//!   hot size and whether it is a funclet;
//! - `abi_cdac_ip2md`: `cdac_ip2md` on a `cdac_open_core` handle of the same dump.
//!
//! Targets come from the environment (`scripts/bench-gdb` sets them): `CDAC_BENCH_DUMP` (a
//! core of a .NET process), `CDAC_BENCH_PERFMAP` (its perf map). Without them the bench
//! prints a note and measures nothing. Criterion's `thrpt` is calls per second; `time` is
//! per 1000 calls.

use std::ffi::CString;
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use cdac::{cdac_close, cdac_ip2md, cdac_open_core, CdacHandle, CdacMethodInfo, CDAC_OK};
use cdac_core::contracts::execution_manager::range_section_map::all_range_sections;
use cdac_core::contracts::execution_manager::{execution_manager, JitType};
use cdac_core::runtime::{OpenOptions, Runtime};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// benches/ip2md.rs's generator and seed, so that both benches look up the same addresses.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Live managed perf-map entries, sorted (as benches/ip2md.rs reads them: stubs and
/// entries a later one overlaps left out).
fn perf_map(path: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(path).expect("perf map");
    let entries: Vec<(u64, u64)> = bytes
        .split(|&b| b == b'\n' || b == 0)
        .filter_map(|line| {
            let line = std::str::from_utf8(line).ok()?;
            let mut p = line.splitn(3, ' ');
            let start = u64::from_str_radix(p.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(p.next()?, 16).ok()?;
            let name = p.next()?;
            let stub = name.starts_with("stub<") || name.starts_with("stub ");
            (!stub && size > 0).then_some((start, size))
        })
        .collect();
    let mut live: Vec<(u64, u64)> = entries
        .iter()
        .enumerate()
        .filter(|(i, (s, z))| {
            !entries[i + 1..]
                .iter()
                .any(|(s2, z2)| *s2 < s + z && *s < s2 + z2)
        })
        .map(|(_, e)| *e)
        .collect();
    live.sort();
    live
}

/// Addresses in ReadyToRun code that resolve (methods the runtime has used).
fn r2r_addresses(rt: &Runtime, rng: &mut Rng, want: usize) -> Vec<u64> {
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let sections = all_range_sections(rt.target(), rt.descriptor()).expect("range sections");
    let Some(image) = sections
        .iter()
        .filter(|s| s.r2r_module != 0)
        .max_by_key(|s| s.range_end_open - s.range_begin)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for _ in 0..want * 200 {
        let ip = image.range_begin + rng.next() % (image.range_end_open - image.range_begin);
        if let Ok(Some(b)) = em.code_block(ip) {
            if b.jit_type == JitType::R2r {
                out.push(ip);
                if out.len() == want {
                    break;
                }
            }
        }
    }
    out
}

fn ip2md_ffi(c: &mut Criterion) {
    let (Some(perf), Some(dump)) = (
        std::env::var_os("CDAC_BENCH_PERFMAP"),
        std::env::var_os("CDAC_BENCH_DUMP"),
    ) else {
        eprintln!("note: set CDAC_BENCH_PERFMAP and CDAC_BENCH_DUMP (scripts/bench-gdb does)");
        return;
    };
    let table = perf_map(Path::new(&perf));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    const N: usize = 1000;
    let jit: Vec<u64> = (0..N)
        .map(|_| {
            let (s, z) = table[(rng.next() % table.len() as u64) as usize];
            s + rng.next() % z
        })
        .collect();
    let rt = Runtime::open_dump(Path::new(&dump), &OpenOptions::default()).expect("open dump");
    let r2r = r2r_addresses(&rt, &mut rng, N);
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let path = CString::new(Path::new(&dump).to_string_lossy().as_bytes()).expect("path");
    let mut h: *mut CdacHandle = std::ptr::null_mut();
    // SAFETY: `path` is a NUL-terminated string and `h` a live local.
    assert_eq!(unsafe { cdac_open_core(path.as_ptr(), &mut h) }, CDAC_OK);

    let mut group = c.benchmark_group("ip2md_ffi");
    for (name, addrs) in [("jit", &jit), ("r2r", &r2r)] {
        if addrs.is_empty() {
            continue;
        }
        // Both sides answer the same.
        for &ip in addrs.iter() {
            let mut info = CdacMethodInfo::default();
            // SAFETY: `h` is an open handle, `info` a live local.
            let status = unsafe { cdac_ip2md(h, ip, &mut info) };
            match em.code_block(ip).expect("lookup") {
                Some(b) => assert_eq!((status, info.method_desc), (CDAC_OK, b.method_desc)),
                None => assert_ne!(status, CDAC_OK),
            }
        }
        group.throughput(Throughput::Elements(addrs.len() as u64));
        group.bench_function(BenchmarkId::new("rust_code_block", name), |b| {
            b.iter(|| {
                for &ip in addrs.iter() {
                    black_box(em.code_block(ip).expect("lookup"));
                }
            })
        });
        group.bench_function(BenchmarkId::new("rust_ip2md", name), |b| {
            b.iter(|| {
                for &ip in addrs.iter() {
                    if let Ok(Some(block)) = em.code_block(ip) {
                        let size = em.method_region_info(&block).map(|r| r.hot_size);
                        let funclet = em.is_funclet(&block).unwrap_or(false);
                        black_box((block.method_desc, size.ok(), funclet));
                    }
                }
            })
        });
        group.bench_function(BenchmarkId::new("abi_cdac_ip2md", name), |b| {
            b.iter(|| {
                for &ip in addrs.iter() {
                    let mut info = CdacMethodInfo::default();
                    // SAFETY: `h` is an open handle, `info` a live local.
                    black_box(unsafe { cdac_ip2md(h, ip, &mut info) });
                    black_box(info);
                }
            })
        });
    }
    group.finish();
    // SAFETY: `h` came from cdac_open_core and is closed once.
    unsafe { cdac_close(h) };
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1)).sample_size(20);
    targets = ip2md_ffi
}
criterion_main!(benches);
