//! ExecutionManager lookups per second against the ideal: a binary search over the sorted
//! (start, size) table of the runtime's own perf map, held in memory.
//!
//! Targets come from the environment (`scripts/bench-ip2md` sets them): `CDAC_BENCH_PID`
//! (a live .NET process), `CDAC_BENCH_DUMP` (its core), `CDAC_BENCH_PERFMAP` (its perf map).
//! Without them the bench prints a note and measures nothing.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use cdac::contracts::execution_manager::range_section_map::all_range_sections;
use cdac::contracts::execution_manager::{execution_manager, JitType};
use cdac::limits::Limits;
use cdac::runtime::{OpenOptions, Runtime};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Live managed perf-map entries (later overlapping entries make earlier ones stale).
fn perf_map(path: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(path).expect("perf map");
    let mut entries: Vec<(u64, u64)> = bytes
        .split(|&b| b == b'\n' || b == 0)
        .filter_map(|line| {
            let line = std::str::from_utf8(line).ok()?;
            let mut p = line.splitn(3, ' ');
            let start = u64::from_str_radix(p.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(p.next()?, 16).ok()?;
            // Stubs are not managed methods: `stub<Kind>` (.NET 8), `stub Kind<...>` (.NET 10).
            let name = p.next()?;
            let stub = name.starts_with("stub<") || name.starts_with("stub ");
            (!stub && size > 0).then_some((start, size))
        })
        .collect();
    let n = entries.len();
    let keep: Vec<bool> = (0..n)
        .map(|i| {
            !entries[i + 1..]
                .iter()
                .any(|(s, z)| *s < entries[i].0 + entries[i].1 && entries[i].0 < s + z)
        })
        .collect();
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        keep[i - 1]
    });
    entries.sort();
    entries
}

/// The ideal lookup: binary search in a sorted in-memory table.
fn table_lookup(table: &[(u64, u64)], ip: u64) -> Option<u64> {
    let i = table.partition_point(|(s, _)| *s <= ip).checked_sub(1)?;
    let (s, z) = table[i];
    (ip < s + z).then_some(s)
}

/// Addresses in ReadyToRun code that resolve (methods the runtime has used).
fn r2r_addresses(rt: &Runtime, rng: &mut Rng, want: usize) -> Vec<u64> {
    let em = execution_manager(rt.target(), rt.descriptor()).unwrap();
    let sections = all_range_sections(rt.target(), rt.descriptor()).unwrap();
    let image = sections
        .iter()
        .filter(|s| s.r2r_module != 0)
        .max_by_key(|s| s.range_end_open - s.range_begin)
        .expect("an R2R image");
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

fn lookups(c: &mut Criterion) {
    let (Some(perf), pid, dump) = (
        std::env::var_os("CDAC_BENCH_PERFMAP"),
        std::env::var("CDAC_BENCH_PID")
            .ok()
            .and_then(|p| p.parse::<i32>().ok()),
        std::env::var_os("CDAC_BENCH_DUMP"),
    ) else {
        eprintln!("note: set CDAC_BENCH_PERFMAP and CDAC_BENCH_PID and/or CDAC_BENCH_DUMP (scripts/bench-ip2md does)");
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

    let mut group = c.benchmark_group("ip2md");
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("ideal_sorted_table", |b| {
        b.iter(|| {
            for &ip in &jit {
                black_box(table_lookup(&table, ip));
            }
        })
    });
    // No per-command total-read limit: the full walks below read gigabytes through one
    // target over a run, which the default limit (16 GiB) would stop part-way.
    let options = OpenOptions {
        limits: Limits {
            max_total_read_bytes: u64::MAX,
            ..Limits::default()
        },
        ..OpenOptions::default()
    };
    let mut targets = Vec::new();
    if let Some(path) = &dump {
        targets.push(("dump", Runtime::open_dump(path, &options).expect("dump")));
    }
    if let Some(pid) = pid {
        targets.push(("live", Runtime::attach(pid, &options).expect("attach")));
    }
    for (kind, rt) in &targets {
        let r2r = r2r_addresses(rt, &mut rng, N);
        let em = execution_manager(rt.target(), rt.descriptor()).unwrap();
        // Warm: the same addresses again and again (caches filled by the first pass).
        for (name, addrs) in [("jit", &jit), ("r2r", &r2r)] {
            if addrs.is_empty() {
                continue;
            }
            group.throughput(Throughput::Elements(addrs.len() as u64));
            group.bench_function(BenchmarkId::new(format!("{kind}_{name}"), "warm"), |b| {
                b.iter(|| {
                    for &ip in addrs.iter() {
                        black_box(em.code_block(ip).expect("lookup"));
                    }
                })
            });
        }
    }
    group.finish();

    // Version 1's linear scan costs grow with the distance from the method start: look up
    // the last byte of methods of growing size, with a fresh ExecutionManager each time.
    if let Some((_, rt)) = targets.first() {
        let mut by_size = c.benchmark_group("v1_last_byte_by_method_size");
        for (lo, hi) in [(0u64, 256u64), (256, 4096), (4096, 65536)] {
            let Some(&(s, z)) = table.iter().find(|(_, z)| *z > lo && *z <= hi) else {
                continue;
            };
            by_size.bench_function(BenchmarkId::from_parameter(format!("{lo}-{hi}B")), |b| {
                b.iter(|| {
                    let em = execution_manager(rt.target(), rt.descriptor()).unwrap();
                    black_box(em.code_block(s + z - 1).expect("lookup"))
                })
            });
        }
        by_size.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1)).sample_size(20);
    targets = lookups
}
criterion_main!(benches);
