//! Reading a live process is safe for it: the real .NET 10 testbed (10.0.14), hammered with
//! cdac commands (methods, perfmap, ip2md, modules, eh, unwind, info, coverage) in a loop
//! while it runs deterministic managed computations (`Cdac.Testbed --rounds`: emitted methods
//! with their exception handlers, framework code, LINQ over LCG lambdas, sorting), prints
//! exactly what an unobserved twin prints; none of its threads is ever seen stopped (`t` or
//! `T` in /proc/PID/task/*/stat) and nothing ever traces it (TracerPid 0), sampled thousands
//! of times; the code of JIT'ed methods is byte-for-byte the same afterwards; and cdac only
//! reads: under strace it calls process_vm_readv, opens /proc/PID/mem (if at all) read-only,
//! and never calls ptrace or process_vm_writev.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{hex, scratch, start_testbed_piped, Testbed, Variant};

/// The twins' runtime: .NET 10, the one people run, read through its embedded descriptor.
const VARIANT: Variant = Variant::Net10;
/// Rounds of the deterministic workload: about 15 s on a 2-core machine under hammering
/// (hundreds of cdac runs and thousands of thread-state samples).
const ROUNDS: usize = 40;

/// A private testbed started in deterministic mode (`--rounds`), waiting for its go line.
struct Workload {
    tb: Testbed,
    pid: i32,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Workload {
    fn start() -> Workload {
        let (tb, stdin, stdout) = start_testbed_piped(VARIANT, &["--rounds", &ROUNDS.to_string()]);
        Workload {
            pid: tb.pid,
            tb,
            stdin,
            stdout,
        }
    }

    /// Starts the rounds.
    fn go(&mut self) {
        self.stdin.write_all(b"go\n").expect("go");
        self.stdin.flush().expect("go");
    }

    /// The round lines, up to `done`.
    fn rounds(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read the workload");
            assert!(
                n > 0,
                "testbed {} ended before 'done' after {lines:?}; see {}",
                self.pid,
                self.tb.dir.join("testbed.log").display()
            );
            let line = line.trim_end().to_string();
            if line == "done" {
                return lines;
            }
            lines.push(line);
        }
    }
}

fn cdac(args: &[&str]) -> std::process::Output {
    Command::new(crate::common::cdac_exe())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run cdac")
}

/// The state letter of every thread of `pid` (the field after the command name).
fn thread_states(pid: i32) -> Vec<(String, char)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            let state = stat[stat.rfind(')')? + 1..].trim_start().chars().next()?;
            Some((t.file_name().to_string_lossy().into_owned(), state))
        })
        .collect()
}

fn tracer_pid(pid: i32) -> Option<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// FNV-1a of the bytes of `regions` of `pid`'s memory, read through /proc/PID/mem (read-only).
fn hash_regions(pid: i32, regions: &[(u64, u64)]) -> Vec<u64> {
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open /proc/PID/mem");
    regions
        .iter()
        .map(|&(start, len)| {
            let mut buf = vec![0u8; len as usize];
            mem.read_exact_at(&mut buf, start)
                .unwrap_or_else(|e| panic!("read {len} bytes at {start:#x}: {e}"));
            buf.iter().fold(0xcbf29ce484222325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
            })
        })
        .collect()
}

#[test]
fn a_hammered_live_process_runs_undisturbed() {
    let started = Instant::now();
    let dir = scratch("live-safety");
    // Both twins start together; only B is read.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(Workload::start);
        let b = s.spawn(Workload::start);
        (a.join().expect("start A"), b.join().expect("start B"))
    });
    let (mut a, mut b) = (a, b);
    let pid = b.pid.to_string();
    println!(
        "twins ready in {:.1} s: A pid {} (unobserved), B pid {pid} (hammered)",
        started.elapsed().as_secs_f64(),
        a.pid
    );

    // B's JIT'ed methods; the code of some of them is hashed before and after.
    let listed = cdac(&["methods", "--pid", &pid, "--json"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let methods: Vec<serde_json::Value> =
        serde_json::from_slice(&listed.stdout).expect("methods JSON");
    let stable: Vec<&serde_json::Value> = methods
        .iter()
        .filter(|m| {
            // Dynamic (LCG) and collectible code can be freed; emitted and framework code not.
            let name = m["name"].as_str().unwrap_or("");
            m["jit_type"] == "jit"
                && !name.contains("[Anonymously Hosted DynamicMethods Assembly]")
                && !name.contains("[Cdac.Testbed.Collectible]")
                && !name.contains("[Cdac.Testbed.Plugin]")
        })
        .collect();
    assert!(stable.len() >= 20, "{} stable JIT'ed methods", stable.len());
    // Every emitted method (the large one included) and 30 others across the list.
    let regions: Vec<(u64, u64)> = stable
        .iter()
        .filter(|m| {
            m["name"]
                .as_str()
                .is_some_and(|n| n.contains("[Cdac.Testbed.Emitted]"))
        })
        .chain((0..30).map(|k| &stable[k * stable.len() / 30]))
        .map(|m| (hex(&m["start"]), m["size"].as_u64().expect("size")))
        .collect();
    let before = hash_regions(b.pid, &regions);
    let emitted = methods
        .iter()
        .find(|m| {
            m["name"]
                .as_str()
                .is_some_and(|n| n.contains("Cdac.Testbed.Handlers::NestedTryCatchFinally("))
        })
        .expect("NestedTryCatchFinally is listed");
    let eh_addr = format!("{:#x}", hex(&emitted["start"]) + 4);
    let ip2md_addrs: Vec<String> = (0..8)
        .map(|k| {
            let m = &methods[k * methods.len() / 8];
            format!(
                "{:#x}",
                hex(&m["start"]) + m["size"].as_u64().unwrap_or(0) / 2
            )
        })
        .collect();

    // cdac only reads: seen through strace (when installed).
    let strace_log = dir.join("strace.log");
    let traced = Command::new("strace")
        .args(["-f", "-qq", "-e"])
        .arg("trace=open,openat,openat2,ptrace,process_vm_readv,process_vm_writev")
        .arg("-o")
        .arg(&strace_log)
        .arg(crate::common::cdac_exe())
        .args(["methods", "--pid", &pid])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match traced {
        Ok(status) if status.success() => {
            let log = std::fs::read_to_string(&strace_log).expect("strace log");
            let mem = format!("/proc/{pid}/mem");
            let readv = log.matches("process_vm_readv(").count();
            for line in log.lines() {
                assert!(!line.contains("ptrace("), "cdac called ptrace: {line}");
                assert!(
                    !line.contains("process_vm_writev("),
                    "cdac wrote to the target: {line}"
                );
                if line.contains(&mem) {
                    assert!(
                        line.contains("O_RDONLY") && !line.contains("O_RDWR"),
                        "{mem} opened for writing: {line}"
                    );
                }
            }
            assert!(readv > 0 || log.contains(&mem), "no reads seen: {log}");
            println!(
                "strace: {readv} process_vm_readv call(s), /proc/PID/mem opened {} time(s) (read-only), no ptrace, no process_vm_writev",
                log.lines().filter(|l| l.contains(&mem)).count()
            );
        }
        Ok(status) => {
            // strace itself may be refused (no ptrace in some containers): only a cdac that
            // fails on its own is a failure.
            let alone = cdac(&["methods", "--pid", &pid]);
            assert!(
                alone.status.success(),
                "cdac methods failed: {}",
                String::from_utf8_lossy(&alone.stderr)
            );
            println!("strace could not trace here ({status}); syscall check skipped");
        }
        Err(e) => println!("strace not available ({e}); syscall check skipped"),
    }

    // Hammer B with every live command, sample its threads, run both twins' rounds.
    let stop = AtomicBool::new(false);
    let runs = AtomicUsize::new(0);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let samples = AtomicUsize::new(0);
    let stopped_seen: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let perf_out = dir.join("hammer.map");
    let mip_out = dir.join("hammer.mip");
    let perf_out = perf_out.to_str().expect("utf-8 path");
    let mip_out = mip_out.to_str().expect("utf-8 path");
    let ip2md: Vec<&str> = std::iter::once("ip2md")
        .chain(["--pid", &pid])
        .chain(ip2md_addrs.iter().map(String::as_str))
        .collect();
    let ip2md_json: Vec<&str> = ip2md.iter().copied().chain(["--json"]).collect();
    // Heavy commands (whole enumerations) between light ones (single lookups).
    let commands: Vec<Vec<&str>> = vec![
        vec!["methods", "--pid", &pid, "--json"],
        ip2md.clone(),
        vec!["modules", "--pid", &pid],
        vec!["eh", "--pid", &pid, &eh_addr],
        vec!["perfmap", "--pid", &pid, "-o", perf_out],
        vec!["unwind", "--pid", &pid, "--json", &eh_addr],
        vec!["info", "--pid", &pid, "--json"],
        ip2md_json,
        vec!["coverage", "--pid", &pid, "-o", mip_out],
        vec!["modules", "--pid", &pid, "--json"],
        vec!["eh", "--pid", &pid, "--json", &eh_addr],
        vec!["methods", "--pid", &pid],
    ];
    let (out_a, out_b, rounds_seconds) = std::thread::scope(|s| {
        for worker in 0..2 {
            let (stop, runs, failures, commands) = (&stop, &runs, &failures, &commands);
            s.spawn(move || {
                let mut k = worker;
                while !stop.load(Ordering::Relaxed) {
                    let args = &commands[k % commands.len()];
                    let out = cdac(args);
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    if out.status.code() == Some(101) || stderr.contains("panicked") {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{}: panicked: {stderr}", args.join(" ")));
                    } else if !out.status.success() {
                        failures.lock().unwrap().push(format!(
                            "{}: {}",
                            args.join(" "),
                            stderr.trim()
                        ));
                    }
                    runs.fetch_add(1, Ordering::Relaxed);
                    k += 1;
                }
            });
        }
        let (stop, samples, stopped_seen) = (&stop, &samples, &stopped_seen);
        let target = b.pid;
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for (tid, state) in thread_states(target) {
                    if state == 't' || state == 'T' {
                        stopped_seen
                            .lock()
                            .unwrap()
                            .push(format!("thread {tid} state {state}"));
                    }
                }
                match tracer_pid(target) {
                    Some(0) | None => {}
                    Some(t) => stopped_seen.lock().unwrap().push(format!("TracerPid {t}")),
                }
                samples.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        // Let the hammering start, then both twins compute.
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        a.go();
        b.go();
        let out_b = b.rounds();
        let runs_during = runs.load(Ordering::Relaxed);
        let out_a = a.rounds();
        let seconds = t0.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        assert!(
            runs_during >= 10,
            "only {runs_during} cdac run(s) while the rounds ran"
        );
        (out_a, out_b, seconds)
    });
    let after = hash_regions(b.pid, &regions);

    let runs = runs.load(Ordering::Relaxed);
    let samples = samples.load(Ordering::Relaxed);
    let failures = failures.into_inner().unwrap();
    let stopped_seen = stopped_seen.into_inner().unwrap();
    println!(
        "{ROUNDS} rounds in {rounds_seconds:.1} s; {runs} cdac run(s) on B ({} failed); {samples} thread-state samples, {} stopped or traced; {} code regions ({} bytes) unchanged: {}; total {:.1} s",
        failures.len(),
        stopped_seen.len(),
        regions.len(),
        regions.iter().map(|r| r.1).sum::<u64>(),
        before == after,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(out_a.len(), ROUNDS, "{out_a:?}");
    assert_eq!(
        out_b, out_a,
        "the hammered process printed something else than its unobserved twin"
    );
    assert!(
        stopped_seen.is_empty(),
        "the target was stopped or traced: {stopped_seen:?}"
    );
    assert!(samples >= 1000, "only {samples} samples");
    assert_eq!(before, after, "JIT'ed code changed while it was read");
    assert!(
        failures.is_empty(),
        "{} of {runs} cdac run(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
