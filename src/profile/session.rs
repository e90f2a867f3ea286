//! A sampling session: samples a live process with the kernel's perf events (the process
//! is never stopped) or, where those are refused, with ptrace (each running thread stopped
//! alone, briefly, per sample), and feeds every sample to a [`Profiler`] until told to
//! stop, the time is up or the process exits. `cdac record` and `cdac top` run one; so
//! can any other front end (signals are the caller's: it passes the flag they set).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Profiler;
use crate::process::perf_sampler::{
    thread_ids, PerfSampler, Sample, SamplerError, SamplerOptions, UserRegisters,
};
use crate::process::thread_snapshot::{snapshot_thread, stat_fields, SnapshotOptions};
use crate::regs::x64_reg;

/// How often new threads are looked for.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// How often ring buffers are drained (samples are named while their code still exists).
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// Which sampler takes the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerChoice {
    /// perf events where permitted, else ptrace (with a warning).
    Auto,
    /// The kernel's perf events only.
    Perf,
    /// ptrace only.
    Ptrace,
}

/// What to sample, how.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The process.
    pub pid: i32,
    /// Samples per second of CPU time, per thread (ptrace: per second, 1 to 1000).
    pub rate: u64,
    /// Bytes of user stack copied with each sample.
    pub stack_bytes: u32,
    /// Which sampler.
    pub sampler: SamplerChoice,
    /// Sample threads that are not running too (ptrace only).
    pub idle: bool,
    /// Stop after this long (`None`: until `stop` is set or the process exits).
    pub duration: Option<Duration>,
    /// How often `tick` is called.
    pub tick_every: Duration,
}

/// What a session observed.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// How long it sampled.
    pub elapsed: Duration,
    /// CPU time the sampling thread used (not counting opening the runtime).
    pub cpu: Option<Duration>,
    /// The process exited.
    pub process_exited: bool,
    /// The caller's stop flag ended it.
    pub interrupted: bool,
    /// "perf" or "ptrace".
    pub sampler: &'static str,
    /// Records the kernel lost (perf).
    pub lost: u64,
    /// Times the kernel throttled sampling (perf).
    pub throttled: u64,
    /// Threads sampled in all, including those that exited (perf).
    pub threads_followed: u64,
    /// The kernel left out samples taken in kernel mode (perf).
    pub excludes_kernel: bool,
}

/// The sampler chosen, running.
enum Source {
    Perf(Box<PerfSampler>),
    Ptrace { period: Duration, next: Instant },
}

/// Opens the sampler; with [`SamplerChoice::Auto`], falls back to ptrace where perf events
/// cannot be had, returning why as a warning.
fn open_source(options: &SessionOptions) -> Result<(Source, Option<String>), SamplerError> {
    let ptrace = |why: Option<String>| {
        let hz = options.rate.clamp(1, 1000);
        (
            Source::Ptrace {
                period: Duration::from_secs_f64(1.0 / hz as f64),
                next: Instant::now(),
            },
            why,
        )
    };
    if options.sampler == SamplerChoice::Ptrace || options.idle {
        return Ok(ptrace(None));
    }
    let perf = SamplerOptions::for_rate(options.rate.max(1), options.stack_bytes);
    match PerfSampler::open(options.pid, &perf) {
        Ok(s) => Ok((Source::Perf(Box::new(s)), None)),
        Err(e) if options.sampler == SamplerChoice::Auto && e.perf_unavailable() => {
            Ok(ptrace(Some(format!(
                "{e}\nfalling back to the ptrace sampler: each thread is stopped briefly for every sample"
            ))))
        }
        Err(e) => Err(e),
    }
}

/// Runs a session. `warn` gets warnings (the fallback to ptrace, a failed thread scan);
/// `tick` is called about every `tick_every` with the profiler, the time sampled so far
/// and the sampler's name (to print progress or a table); an error from it ends the
/// session with that error.
pub fn run_session<E: From<SamplerError>>(
    options: &SessionOptions,
    profiler: &mut Profiler<'_>,
    stop: &AtomicBool,
    warn: &mut dyn FnMut(&str),
    mut tick: impl FnMut(&mut Profiler<'_>, Duration, &str) -> Result<(), E>,
) -> Result<SessionSummary, E> {
    let (mut source, warning) = open_source(options)?;
    if let Some(w) = warning {
        warn(&w);
    }
    let sampler = match source {
        Source::Perf(_) => "perf",
        Source::Ptrace { .. } => "ptrace",
    };
    let pid = options.pid;
    let started = Instant::now();
    let cpu_at_start = own_cpu_time();
    let mut last_follow = started;
    let mut last_tick = started;
    let mut process_exited = false;
    let alive = |pid: i32| !crate::memory::live::process_gone(pid);
    loop {
        let now = Instant::now();
        let elapsed = now.duration_since(started);
        if stop.load(Ordering::Relaxed) || options.duration.is_some_and(|d| elapsed >= d) {
            break;
        }
        match &mut source {
            Source::Perf(s) => {
                s.drain(|sample| profiler.add_sample(&sample));
                if now.duration_since(last_follow) >= FOLLOW_EVERY {
                    last_follow = now;
                    match s.follow_new_threads() {
                        Ok(_) => {}
                        Err(SamplerError::NoProcess { .. }) => {
                            process_exited = true;
                            break;
                        }
                        Err(e) => warn(&e.to_string()),
                    }
                }
                std::thread::sleep(DRAIN_EVERY);
            }
            Source::Ptrace { period, next } => {
                if !alive(pid) {
                    process_exited = true;
                    break;
                }
                if now >= *next {
                    *next += *period;
                    if *next < now {
                        // Fell behind (a walk took longer than a period): do not catch up.
                        *next = now + *period;
                    }
                    match take_ptrace_samples(pid, options.idle, options.stack_bytes) {
                        Ok(samples) => {
                            for sample in &samples {
                                profiler.add_sample(sample);
                            }
                        }
                        Err(_) if !alive(pid) => {
                            process_exited = true;
                            break;
                        }
                        Err(e) => warn(&e.to_string()),
                    }
                }
                let wait = next.saturating_duration_since(Instant::now());
                std::thread::sleep(wait.min(Duration::from_millis(50)));
            }
        }
        if now.duration_since(last_tick) >= options.tick_every {
            // Ticks keep their cadence: a slow walk does not push the next one later.
            last_tick += options.tick_every;
            if now.duration_since(last_tick) >= options.tick_every {
                last_tick = now;
            }
            tick(profiler, elapsed, sampler)?;
        }
    }
    let elapsed = started.elapsed();
    let (lost, throttled, threads_followed, excludes_kernel) = match &mut source {
        Source::Perf(s) => {
            // What the kernel wrote since the last drain.
            s.drain(|sample| profiler.add_sample(&sample));
            let st = s.stats();
            (
                st.lost,
                st.throttled,
                st.threads_followed,
                s.excludes_kernel(),
            )
        }
        Source::Ptrace { .. } => (0, 0, 0, false),
    };
    let cpu = own_cpu_time()
        .zip(cpu_at_start)
        .map(|(now, then)| now.saturating_sub(then));
    Ok(SessionSummary {
        elapsed,
        cpu,
        process_exited,
        interrupted: stop.load(Ordering::Relaxed),
        sampler,
        lost,
        throttled,
        threads_followed,
        excludes_kernel,
    })
}

/// One sample of each running thread of `pid` (every thread with `idle`), each stopped
/// alone for the time it takes to copy its registers and the top of its stack.
fn take_ptrace_samples(
    pid: i32,
    idle: bool,
    stack_bytes: u32,
) -> Result<Vec<Sample>, SamplerError> {
    let options = SnapshotOptions {
        max_stack_bytes: stack_bytes as usize,
    };
    let mut out = Vec::new();
    for tid in thread_ids(pid)? {
        let (running, idle_policy) = thread_state(pid, tid);
        // A SCHED_IDLE thread runs only when nothing else wants the CPU: stopping it can
        // wait a good part of a second on a busy machine, holding up every other sample.
        if !idle && (!running || idle_policy) {
            continue;
        }
        // A thread that exits or cannot be stopped now is simply not sampled this time.
        let Ok(t) = snapshot_thread(pid, tid, &options) else {
            continue;
        };
        let c = &t.context;
        let reg = |i: usize| c.regs[i].unwrap_or(0);
        out.push(Sample {
            tid,
            time_ns: 0,
            in_kernel: t.syscall().is_some(),
            regs: UserRegisters {
                ip: c.rip,
                sp: c.rsp(),
                bp: reg(x64_reg::RBP),
                bx: reg(x64_reg::RBX),
                r12_r15: [
                    reg(x64_reg::R12),
                    reg(x64_reg::R12 + 1),
                    reg(x64_reg::R12 + 2),
                    reg(x64_reg::R15),
                ],
            },
            stack: t.stack,
        });
    }
    Ok(out)
}

/// CPU time this process's main thread has used (from /proc/self/schedstat), the
/// profiler's own cost.
fn own_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Whether thread `tid` of `pid` is running or runnable (state R in /proc), and whether
/// its scheduling policy is SCHED_IDLE.
fn thread_state(pid: i32, tid: i32) -> (bool, bool) {
    const SCHED_IDLE: &str = "5";
    // Index 0 is proc(5)'s field 3, the state; the policy is field 41.
    let fields = stat_fields(pid, tid).unwrap_or_default();
    let running = fields.first().is_some_and(|s| s == "R");
    let idle_policy = fields.get(38).is_some_and(|p| p == SCHED_IDLE);
    (running, idle_policy)
}
