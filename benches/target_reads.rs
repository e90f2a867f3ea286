//! Benchmarks of the target layer: what one small typed read costs, and how fast large
//! reads move bytes, for a live process and for a core dump, with and without the page
//! cache.
//!
//! Targets come from the environment:
//! - `CDAC_BENCH_PID`: a live process to read (default: this benchmark's own process);
//! - `CDAC_BENCH_DUMP`: an ELF core dump to read (default: none, the dump groups are skipped).
//!
//! `scripts/bench-target` starts the .NET 8 testbed, dumps it, and runs this benchmark
//! against both. Plain `cargo bench --bench target_reads` reads its own process.
//!
//! Groups and ids:
//! - `live_u64/{vm_readv, proc_mem, page_cache_warm, page_cache_cold}`: one 8-byte
//!   `Target::read_u64` per iteration, cycling over a fixed set of addresses spread over
//!   the target's readable private memory.
//! - `live_large/{vm_readv, proc_mem}/{1MiB, 16MiB}`: one `Target::read_into` of a readable
//!   run of memory into a reused buffer (throughput in bytes); `read_bytes_vm_readv/16MiB`
//!   is the same through `Target::read_bytes`, which allocates the buffer each time.
//! - `dump_u64/{mmap, page_cache_warm, page_cache_cold}` and `dump_large/mmap/{1MiB, 16MiB}`:
//!   the same against the core dump.
//!
//! "warm" means every page of the address set is already cached; "cold" flushes the cache
//! (untimed) before each pass over a set of addresses on distinct pages, so that every timed
//! read misses and fetches its page.

use std::cell::Cell;
use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdac::limits::Limits;
use cdac::memory::cache::{PageCache, PAGE_SIZE};
use cdac::memory::core_dump::CoreDump;
use cdac::memory::live::{LiveProcess, ReadMethod};
use cdac::memory::{DataLayout, MemorySource, Target};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};

/// How many addresses the small-read benchmarks cycle over.
const SMALL_READS: usize = 1024;
/// Seed of the address picker: the same target yields the same addresses run after run.
const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
/// Sizes of the large reads.
const LARGE_SIZES: [(usize, &str); 2] = [(1 << 20, "1MiB"), (16 << 20, "16MiB")];

/// xorshift64: deterministic, good enough to spread addresses, no extra crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// A range of target addresses, `[start, end)`.
#[derive(Debug, Clone, Copy)]
struct Region {
    start: u64,
    end: u64,
}

impl Region {
    fn len(&self) -> u64 {
        self.end - self.start
    }
}

/// A target over `source` without the per-command total-read limit: a benchmark reads
/// gigabytes through one target (16 MiB reads, thousands of iterations), which the default
/// limit (16 GiB) would stop part-way, every later read failing at once.
fn bench_target(source: Arc<dyn MemorySource>) -> Target {
    Target::new(source, DataLayout::LE64).with_limits(Limits {
        max_total_read_bytes: u64::MAX,
        ..Limits::default()
    })
}

/// Readable private mappings of a live process, from `/proc/PID/maps`. `[vvar]` and
/// `[vsyscall]` are readable on paper but not through `process_vm_readv`.
fn live_regions(pid: i32) -> Vec<Region> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/maps: {e}"));
    let mut regions = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let name = fields.nth(3).unwrap_or("");
        let perms = perms.as_bytes();
        if perms.len() < 4 || perms[0] != b'r' || perms[3] != b'p' {
            continue;
        }
        if name.starts_with("[vvar") || name.starts_with("[vsyscall") {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        if end > start {
            regions.push(Region { start, end });
        }
    }
    regions.sort_by_key(|r| r.start);
    regions
}

/// The captured memory of an ELF64 little-endian core: its `PT_LOAD` segments, cut to the
/// bytes the file holds (`p_filesz`).
fn core_regions(path: &Path) -> Result<Vec<Region>, String> {
    let mut file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut ehdr = [0u8; 64];
    file.read_exact(&mut ehdr)
        .map_err(|e| format!("cannot read the ELF header: {e}"))?;
    if &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 || ehdr[5] != 1 {
        return Err("not an ELF64 little-endian file".into());
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let phoff = u64_at(&ehdr, 0x20);
    let shoff = u64_at(&ehdr, 0x28);
    let phentsize = usize::from(u16_at(&ehdr, 0x36));
    let mut phnum = u64::from(u16_at(&ehdr, 0x38));
    if phnum == 0xffff {
        // PN_XNUM: the real count is in section header 0's sh_info.
        let mut shdr = [0u8; 64];
        file.read_exact_at(&mut shdr, shoff)
            .map_err(|e| format!("cannot read section header 0: {e}"))?;
        phnum = u64::from(u32_at(&shdr, 44));
    }
    if phnum > 1 << 20 {
        return Err(format!("{phnum} program headers: a damaged header?"));
    }
    if phentsize < 56 {
        return Err(format!("program header entries of {phentsize} bytes"));
    }
    let mut table = vec![0u8; phentsize * phnum as usize];
    file.read_exact_at(&mut table, phoff)
        .map_err(|e| format!("cannot read the program headers: {e}"))?;
    let mut regions: Vec<Region> = table
        .chunks_exact(phentsize)
        .filter(|ph| u32_at(ph, 0) == 1) // PT_LOAD
        .map(|ph| {
            let vaddr = u64_at(ph, 16);
            let filesz = u64_at(ph, 32);
            Region {
                start: vaddr,
                end: vaddr.saturating_add(filesz),
            }
        })
        .filter(|r| r.len() > 0)
        .collect();
    regions.sort_by_key(|r| r.start);
    Ok(regions)
}

/// Picks up to `count` 8-byte-aligned addresses, uniformly over the bytes of `regions`,
/// keeping only those `source` can read now.
fn pick_addresses(regions: &[Region], source: &dyn MemorySource, count: usize) -> Vec<u64> {
    let usable: Vec<Region> = regions.iter().copied().filter(|r| r.len() >= 8).collect();
    let mut ends = Vec::with_capacity(usable.len());
    let mut total = 0u64;
    for r in &usable {
        total += r.len();
        ends.push(total);
    }
    assert!(total > 0, "the target has no readable memory");
    let mut rng = XorShift(SEED);
    let mut picked = Vec::with_capacity(count);
    let mut attempts = 0;
    while picked.len() < count && attempts < count * 20 {
        attempts += 1;
        let at = rng.next() % total;
        let i = ends.partition_point(|&e| e <= at);
        let region = usable[i];
        let offset = (at - (ends[i] - region.len())) & !7;
        let addr = (region.start + offset).min(region.end - 8) & !7;
        if addr < region.start {
            continue;
        }
        let mut word = [0u8; 8];
        if source.read_exact(addr, &mut word).is_ok() {
            picked.push(addr);
        }
    }
    assert!(
        !picked.is_empty(),
        "no readable address found in the target"
    );
    picked
}

/// The addresses of `addrs` that are first on their page, in order.
fn distinct_pages(addrs: &[u64]) -> Vec<u64> {
    let mut seen = std::collections::HashSet::new();
    addrs
        .iter()
        .copied()
        .filter(|a| seen.insert(a / PAGE_SIZE))
        .collect()
}

/// Start of a run of `size` readable bytes: adjacent regions are joined into runs, the
/// longest runs tried first, and the whole read is checked.
fn pick_large(regions: &[Region], source: &dyn MemorySource, size: usize) -> Option<u64> {
    let mut runs: Vec<Region> = Vec::new();
    for r in regions {
        match runs.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => runs.push(*r),
        }
    }
    runs.retain(|r| r.len() >= size as u64);
    runs.sort_by_key(|r| (std::cmp::Reverse(r.len()), r.start));
    let mut buf = vec![0u8; size];
    runs.iter()
        .map(|r| r.start)
        .find(|&addr| source.read_exact(addr, &mut buf).is_ok())
}

/// One `read_u64` per iteration, cycling over `addrs`.
fn bench_u64(group: &mut BenchmarkGroup<'_, WallTime>, id: &str, target: &Target, addrs: &[u64]) {
    let failures = Cell::new(0u64);
    group.bench_function(id, |b| {
        let mut i = 0;
        b.iter(|| {
            let addr = addrs[i];
            i += 1;
            if i == addrs.len() {
                i = 0;
            }
            target.read_u64(black_box(addr)).unwrap_or_else(|_| {
                failures.set(failures.get() + 1);
                0
            })
        })
    });
    warn_failures(id, failures.get());
}

/// One `read_u64` per iteration through a page cache that is flushed (untimed) before each
/// pass over `addrs`, which are on distinct pages: every timed read is a miss.
fn bench_u64_cold(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    target: &Target,
    addrs: &[u64],
) {
    let failures = Cell::new(0u64);
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                target.source().flush();
                let n = left.min(addrs.len() as u64) as usize;
                let started = Instant::now();
                for &addr in &addrs[..n] {
                    let value = target.read_u64(black_box(addr)).unwrap_or_else(|_| {
                        failures.set(failures.get() + 1);
                        0
                    });
                    black_box(value);
                }
                total += started.elapsed();
                left -= n as u64;
            }
            total
        })
    });
    warn_failures(id, failures.get());
}

fn warn_failures(id: &str, failures: u64) {
    if failures > 0 {
        eprintln!(
            "warning: {id}: {failures} reads failed during measurement (the target changed?)"
        );
    }
}

/// One large read per iteration into a reused buffer, for each size that has a readable
/// run of memory.
fn bench_large(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    target: &Target,
    starts: &[(usize, &str, Option<u64>)],
) {
    for &(size, label, start) in starts {
        let Some(addr) = start else {
            continue;
        };
        let mut buf = vec![0u8; size];
        let failures = Cell::new(0u64);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(BenchmarkId::new(id, label), |b| {
            b.iter(|| {
                if target.read_into(black_box(addr), &mut buf).is_err() {
                    failures.set(failures.get() + 1);
                }
                black_box(&buf);
            })
        });
        warn_failures(id, failures.get());
    }
}

fn large_starts(
    regions: &[Region],
    source: &dyn MemorySource,
    what: &str,
) -> Vec<(usize, &'static str, Option<u64>)> {
    LARGE_SIZES
        .iter()
        .map(|&(size, label)| {
            let start = pick_large(regions, source, size);
            match start {
                Some(addr) => eprintln!("{what}: {label} reads at {addr:#x}"),
                None => eprintln!("note: {what}: no readable run of {label}; skipping that size"),
            }
            (size, label, start)
        })
        .collect()
}

fn open_live(pid: i32) -> LiveProcess {
    LiveProcess::open(pid).unwrap_or_else(|e| panic!("cannot open process {pid}: {e}"))
}

fn bench_live(c: &mut Criterion, pid: i32) {
    let regions = live_regions(pid);
    let readable: u64 = regions.iter().map(Region::len).sum();

    let direct = Arc::new(open_live(pid));
    let proc_mem = Arc::new(open_live(pid));
    proc_mem.set_method(ReadMethod::ProcMem);
    let cached = Arc::new(PageCache::new(open_live(pid)));
    let cached_cold = Arc::new(PageCache::new(open_live(pid)));

    let addrs = pick_addresses(&regions, direct.as_ref(), SMALL_READS);
    let cold_addrs = distinct_pages(&addrs);
    eprintln!(
        "live: pid {pid}, {} readable private regions ({:.1} MiB), {} addresses on {} pages",
        regions.len(),
        readable as f64 / (1 << 20) as f64,
        addrs.len(),
        cold_addrs.len()
    );

    let direct_target = bench_target(direct.clone());
    let proc_mem_target = bench_target(proc_mem.clone());
    let cached_target = bench_target(cached.clone());
    let cold_target = bench_target(cached_cold.clone());

    // Warm the cache with exactly the pages the warm benchmark reads.
    for &addr in &addrs {
        let _ = cached_target.read_u64(addr);
    }
    eprintln!(
        "live: page cache warmed with {} pages",
        cached.cached_pages()
    );

    {
        let mut group = c.benchmark_group("live_u64");
        bench_u64(&mut group, "vm_readv", &direct_target, &addrs);
        bench_u64(&mut group, "proc_mem", &proc_mem_target, &addrs);
        bench_u64(&mut group, "page_cache_warm", &cached_target, &addrs);
        bench_u64_cold(&mut group, "page_cache_cold", &cold_target, &cold_addrs);
        group.finish();
    }

    let starts = large_starts(&regions, direct.as_ref(), "live");
    {
        let mut group = c.benchmark_group("live_large");
        group.sample_size(20);
        bench_large(&mut group, "vm_readv", &direct_target, &starts);
        bench_large(&mut group, "proc_mem", &proc_mem_target, &starts);
        // The same through read_bytes, which allocates (and zeroes) the buffer each time.
        if let Some(&(size, label, Some(addr))) = starts.last() {
            group.throughput(Throughput::Bytes(size as u64));
            group.bench_function(BenchmarkId::new("read_bytes_vm_readv", label), |b| {
                b.iter(|| {
                    direct_target
                        .read_bytes(black_box(addr), size)
                        .map(|v| v.len())
                })
            });
        }
        group.finish();
    }

    // process_vm_readv falls back to /proc/PID/mem by itself when the kernel refuses it;
    // then the "vm_readv" figures are not what they say.
    if direct.method() != ReadMethod::VmReadv {
        eprintln!(
            "warning: process_vm_readv was refused; the vm_readv benchmarks measured /proc/PID/mem"
        );
    }
}

fn bench_dump(c: &mut Criterion, path: &Path) {
    let regions = core_regions(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let captured: u64 = regions.iter().map(Region::len).sum();
    let open =
        || CoreDump::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));

    let direct = Arc::new(open());
    let cached = Arc::new(PageCache::new(open()));
    let cached_cold = Arc::new(PageCache::new(open()));

    let addrs = pick_addresses(&regions, direct.as_ref(), SMALL_READS);
    let cold_addrs = distinct_pages(&addrs);
    eprintln!(
        "dump: {}, {} PT_LOAD segments with data ({:.1} MiB), {} addresses on {} pages",
        path.display(),
        regions.len(),
        captured as f64 / (1 << 20) as f64,
        addrs.len(),
        cold_addrs.len()
    );

    let direct_target = bench_target(direct.clone());
    let cached_target = bench_target(cached.clone());
    let cold_target = bench_target(cached_cold.clone());
    for &addr in &addrs {
        let _ = cached_target.read_u64(addr);
    }
    eprintln!(
        "dump: page cache warmed with {} pages",
        cached.cached_pages()
    );

    {
        let mut group = c.benchmark_group("dump_u64");
        bench_u64(&mut group, "mmap", &direct_target, &addrs);
        bench_u64(&mut group, "page_cache_warm", &cached_target, &addrs);
        bench_u64_cold(&mut group, "page_cache_cold", &cold_target, &cold_addrs);
        group.finish();
    }

    let starts = large_starts(&regions, direct.as_ref(), "dump");
    {
        let mut group = c.benchmark_group("dump_large");
        group.sample_size(20);
        bench_large(&mut group, "mmap", &direct_target, &starts);
        group.finish();
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();

    let own_pid = std::process::id() as i32;
    let pid = match std::env::var("CDAC_BENCH_PID") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<i32>()
            .unwrap_or_else(|_| panic!("CDAC_BENCH_PID is not a pid: {v:?}")),
        _ => {
            eprintln!("note: CDAC_BENCH_PID is unset; reading this benchmark's own process");
            own_pid
        }
    };
    // Reading ourselves: make sure a run of 16 MiB of touched memory exists.
    let ballast: Vec<u8> = if pid == own_pid {
        (0..(32usize << 20)).map(|i| (i % 251) as u8).collect()
    } else {
        Vec::new()
    };
    bench_live(&mut c, pid);
    black_box(&ballast);

    match std::env::var_os("CDAC_BENCH_DUMP") {
        Some(path) if !path.is_empty() => bench_dump(&mut c, Path::new(&path)),
        _ => {
            eprintln!("note: CDAC_BENCH_DUMP is unset; skipping the dump_u64 and dump_large groups")
        }
    }

    c.final_summary();
}
