//! The perf-event sampler on this test process: a thread started after sampling began is
//! followed, its samples carry its registers (the instruction pointer in this executable's
//! code, the stack pointer in its stack) and a copy of the top of its stack that starts at
//! the stack pointer; a process that does not exist is a typed error.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdac::process::perf_sampler::{PerfSampler, SamplerError, SamplerOptions};

/// The start and end of the mapping of /proc/self/maps that holds `addr`, and its path.
fn mapping_of(addr: u64) -> Option<(u64, u64, String)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let mut parts = l.split_whitespace();
        let (a, b) = parts.next()?.split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        let path = parts.nth(4).unwrap_or("").to_string();
        (a <= addr && addr < b).then_some((a, b, path))
    })
}

#[inline(never)]
fn burn(stop: &AtomicBool, work: &AtomicU64) {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
        }
        work.fetch_add(x & 1, Ordering::Relaxed);
    }
}

#[test]
fn a_new_thread_is_followed_and_its_samples_carry_registers_and_stack() {
    let pid = std::process::id() as i32;
    let options = SamplerOptions::for_rate(997, 8 * 1024);
    let mut sampler = PerfSampler::open(pid, &options).expect("perf events on ourselves");
    let stop = Arc::new(AtomicBool::new(false));
    let work = Arc::new(AtomicU64::new(0));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let worker = {
        let (stop, work) = (Arc::clone(&stop), Arc::clone(&work));
        std::thread::spawn(move || {
            // The thread id, from /proc/thread-self (a link to task/TID).
            let tid: i32 = std::fs::read_link("/proc/thread-self")
                .ok()
                .and_then(|p| p.file_name()?.to_str()?.parse().ok())
                .expect("own tid");
            tid_tx.send(tid).expect("send tid");
            burn(&stop, &work);
        })
    };
    let tid = tid_rx.recv().expect("worker tid");
    assert!(sampler.follow_new_threads().expect("follow") >= 1);
    assert!(sampler.is_following(tid));
    let mut samples = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        sampler.drain(|s| {
            if s.tid == tid {
                samples.push(s)
            }
        });
        if samples.len() >= 100 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().expect("worker");
    assert!(
        samples.len() >= 20,
        "{} samples of the worker",
        samples.len()
    );
    let exe = std::env::current_exe().expect("exe");
    let mut in_exe = 0;
    for s in &samples {
        assert_eq!(s.stack.base, s.regs.sp);
        assert!(!s.stack.bytes.is_empty() && s.stack.bytes.len() <= 8 * 1024);
        // The kernel copies from sp up as far as memory is readable, so the copy may run
        // past the stack's mapping into the next one; sp itself is in a mapping.
        assert!(
            mapping_of(s.regs.sp).is_some(),
            "sp {:#x} unmapped",
            s.regs.sp
        );
        if !s.in_kernel {
            if let Some((_, _, path)) = mapping_of(s.regs.ip) {
                if std::path::Path::new(&path) == exe {
                    in_exe += 1;
                }
            }
        }
    }
    // The worker spends its time in `burn`, code of this executable.
    assert!(
        in_exe * 10 >= samples.len() * 8,
        "{in_exe} of {} samples in this executable",
        samples.len()
    );
    let stats = sampler.stats();
    assert!(stats.samples >= samples.len() as u64);
    assert_eq!(stats.malformed, 0);
}

#[test]
fn a_missing_process_is_a_typed_error() {
    // Pids are below 2^22 on Linux.
    match PerfSampler::open(1 << 23, &SamplerOptions::default()) {
        Err(SamplerError::NoProcess { pid }) => assert_eq!(pid, 1 << 23),
        other => panic!("{other:?}"),
    }
}

/// Set in the child that runs as an unprivileged user.
const UNPRIVILEGED_CHILD: &str = "CDAC_PERF_UNPRIVILEGED_CHILD";

/// As `nobody`, sampling one's own process: where `kernel.perf_event_paranoid` is 2 (the
/// kernel's default), allowed for user-mode samples only, which the sampler falls back to;
/// where it is higher (Debian's 3), refused with an error naming the setting and the ptrace
/// fallback; below 2, allowed in full.
#[test]
fn unprivileged_sampling_follows_perf_event_paranoid() {
    if std::env::var_os(UNPRIVILEGED_CHILD).is_some() {
        let pid = std::process::id() as i32;
        let stop = Arc::new(AtomicBool::new(false));
        let work = Arc::new(AtomicU64::new(0));
        let worker = {
            let (stop, work) = (Arc::clone(&stop), Arc::clone(&work));
            std::thread::spawn(move || burn(&stop, &work))
        };
        match PerfSampler::open(pid, &SamplerOptions::for_rate(499, 4096)) {
            Ok(mut sampler) => {
                std::thread::sleep(Duration::from_millis(500));
                let mut n = 0;
                sampler.drain(|_| n += 1);
                println!(
                    "PERF-CHILD-OK excludes_kernel={} samples={n}",
                    sampler.excludes_kernel()
                );
            }
            Err(e) => println!("PERF-CHILD-DENIED {e}"),
        }
        stop.store(true, Ordering::Relaxed);
        worker.join().expect("worker");
        return;
    }
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !setpriv.exists() || !root {
        eprintln!("skipped: needs root and setpriv to run a child as another user");
        return;
    }
    let paranoid = cdac::process::perf_sampler::perf_event_paranoid().expect("perf_event_paranoid");
    let out = std::process::Command::new(setpriv)
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(std::env::current_exe().expect("test exe"))
        .args([
            "--exact",
            &listed_name("unprivileged_sampling_follows_perf_event_paranoid"),
            "--nocapture",
        ])
        .env(UNPRIVILEGED_CHILD, "1")
        .output()
        .expect("run the test as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("PERF-CHILD-"))
        .unwrap_or_else(|| panic!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    println!("perf_event_paranoid {paranoid}: {line}");
    match paranoid {
        i32::MIN..=1 => assert!(
            line.starts_with("PERF-CHILD-OK excludes_kernel=false"),
            "{line}"
        ),
        2 => assert!(
            line.starts_with("PERF-CHILD-OK excludes_kernel=true"),
            "{line}"
        ),
        _ => assert!(
            line.starts_with("PERF-CHILD-DENIED")
                && line.contains(&format!("perf_event_paranoid is {paranoid}"))
                && line.contains("--sampler ptrace"),
            "{line}"
        ),
    }
    if line.starts_with("PERF-CHILD-OK") {
        let n: u64 = line
            .rsplit("samples=")
            .next()
            .and_then(|n| n.parse().ok())
            .expect("sample count");
        assert!(n > 0, "{line}");
    }
}

/// A test's name as this test binary lists it (`module::test`), for running it alone.
fn listed_name(test: &str) -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}
