//! `cdac record` and `cdac top`: a sampling profiler of a live .NET process with nothing
//! injected. The kernel samples each thread (perf events; the process is never stopped),
//! `cdac` unwinds and names each sample from outside. Where perf events are not
//! permitted, the ptrace sampler of `cdac stacks` stands in (it stops each thread briefly
//! per sample) and the output says so.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::json;

use super::DescriptorArgs;
use super::{CliResult, Outcome};
use cdac::process::perf_sampler::{
    thread_ids, PerfSampler, Sample, SamplerError, SamplerOptions, UserRegisters,
};
use cdac::process::thread_snapshot::{snapshot_thread, stat_fields, SnapshotOptions};
use cdac::profile::output::{self, Format};
use cdac::profile::{Profiler, ProfilerOptions};
use cdac::runtime::{OpenOptions, Runtime};
use cdac::unwind::x64_reg;

/// How often new threads are looked for.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// How often ring buffers are drained (samples are named while their code still exists).
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// Which sampler takes the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SamplerKind {
    /// perf events where permitted, else ptrace (with a warning).
    Auto,
    /// The kernel's perf events: the process is never stopped.
    Perf,
    /// Stop each thread briefly per sample (ptrace), as `cdac stacks` does.
    Ptrace,
}

/// Output format of `cdac record`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Interactive flame graph (SVG).
    Svg,
    /// speedscope JSON (https://www.speedscope.app).
    Speedscope,
    /// Collapsed stacks (`frame;frame;frame count`).
    Collapsed,
}

/// Options shared by `record` and `top`.
#[derive(Debug, Args)]
pub struct SamplingArgs {
    /// The process to profile.
    #[arg(long)]
    pid: i32,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Samples per second of CPU time, per thread.
    #[arg(short = 'r', long, default_value_t = 99)]
    rate: u64,
    /// Keep native frames (by default only managed frames; a sample with none counts as
    /// its native module).
    #[arg(long)]
    native: bool,
    /// Count threads that are not running too (needs the ptrace sampler, which stops each
    /// thread briefly per sample).
    #[arg(long)]
    idle: bool,
    /// Put each thread (name and id) at the root of its stacks.
    #[arg(long)]
    threads: bool,
    /// Which sampler to use.
    #[arg(long, value_enum, default_value_t = SamplerKind::Auto)]
    sampler: SamplerKind,
    /// Bytes of user stack the kernel copies with each sample.
    #[arg(long, default_value_t = 16 * 1024, value_name = "BYTES")]
    stack_bytes: u32,
}

/// Arguments of `cdac record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Seconds to record (default: until Ctrl-C or the process exits).
    #[arg(short = 'd', long)]
    duration: Option<f64>,
    /// Where to write the profile (default: cdac-PID.svg, .json or .txt by format).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Output format (default: from the output file's extension, else svg).
    #[arg(long, value_enum)]
    format: Option<OutputFormat>,
    /// Print a JSON summary (file, samples, rates, hottest methods) instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `cdac top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Stop after this many seconds (default: until Ctrl-C or the process exits).
    #[arg(short = 'd', long)]
    duration: Option<f64>,
    /// Rows shown.
    #[arg(short = 'n', long, default_value_t = 25)]
    rows: usize,
    /// Print one JSON object per refresh (a line each) instead of the table.
    #[arg(long)]
    json: bool,
}

/// The sampler chosen, running.
enum Source {
    Perf(Box<PerfSampler>),
    Ptrace { period: Duration, next: Instant },
}

/// What a sampling session observed, for the summary.
struct SessionEnd {
    elapsed: Duration,
    /// CPU time cdac used while sampling (not counting opening the runtime).
    cpu: Option<Duration>,
    process_exited: bool,
    interrupted: bool,
    sampler: &'static str,
    lost: u64,
    throttled: u64,
    threads_followed: u64,
    excludes_kernel: bool,
}

fn open_source(args: &SamplingArgs) -> Result<(Source, Option<String>), SamplerError> {
    let ptrace = |why: Option<String>| {
        let hz = args.rate.clamp(1, 1000);
        (
            Source::Ptrace {
                period: Duration::from_secs_f64(1.0 / hz as f64),
                next: Instant::now(),
            },
            why,
        )
    };
    if args.sampler == SamplerKind::Ptrace || args.idle {
        return Ok(ptrace(None));
    }
    let options = SamplerOptions::for_rate(args.rate.max(1), args.stack_bytes);
    match PerfSampler::open(args.pid, &options) {
        Ok(s) => Ok((Source::Perf(Box::new(s)), None)),
        Err(e) if args.sampler == SamplerKind::Auto && e.perf_unavailable() => {
            Ok(ptrace(Some(format!(
                "{e}\ncdac: falling back to the ptrace sampler: each thread is stopped briefly for every sample"
            ))))
        }
        Err(e) => Err(e),
    }
}

/// Runs a sampling session until `until` says stop; `tick` is called about every
/// `tick_every` with the profiler (to print progress or a table).
fn sample(
    args: &SamplingArgs,
    profiler: &mut Profiler<'_>,
    duration: Option<Duration>,
    tick_every: Duration,
    mut tick: impl FnMut(&mut Profiler<'_>, Duration, &str) -> CliResult,
) -> Result<SessionEnd, Box<dyn std::error::Error>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let (mut source, warning) = open_source(args)?;
    if let Some(w) = warning {
        status!("cdac: {w}");
    }
    let sampler_name = match source {
        Source::Perf(_) => "perf",
        Source::Ptrace { .. } => "ptrace",
    };
    let started = Instant::now();
    let cpu_at_start = own_cpu_time();
    let mut last_follow = started;
    let mut last_tick = started;
    let mut process_exited = false;
    let alive = |pid: i32| !cdac::memory::live::process_gone(pid);
    loop {
        let now = Instant::now();
        let elapsed = now.duration_since(started);
        if stop.load(Ordering::Relaxed) || duration.is_some_and(|d| elapsed >= d) {
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
                        Err(e) => status!("cdac: warning: {e}"),
                    }
                }
                std::thread::sleep(DRAIN_EVERY);
            }
            Source::Ptrace { period, next } => {
                if !alive(args.pid) {
                    process_exited = true;
                    break;
                }
                if now >= *next {
                    *next += *period;
                    if *next < now {
                        // Fell behind (a walk took longer than a period): do not catch up.
                        *next = now + *period;
                    }
                    match take_ptrace_samples(args.pid, args.idle, args.stack_bytes) {
                        Ok(samples) => {
                            for sample in &samples {
                                profiler.add_sample(sample);
                            }
                        }
                        Err(_) if !alive(args.pid) => {
                            process_exited = true;
                            break;
                        }
                        Err(e) => status!("cdac: warning: {e}"),
                    }
                }
                let wait = next.saturating_duration_since(Instant::now());
                std::thread::sleep(wait.min(Duration::from_millis(50)));
            }
        }
        if now.duration_since(last_tick) >= tick_every {
            // Ticks keep their cadence: a slow walk does not push the next one later.
            last_tick += tick_every;
            if now.duration_since(last_tick) >= tick_every {
                last_tick = now;
            }
            let _ = tick(profiler, elapsed, sampler_name)?;
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
    Ok(SessionEnd {
        elapsed,
        cpu,
        process_exited,
        interrupted: stop.load(Ordering::Relaxed),
        sampler: sampler_name,
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

/// A number of seconds given on the command line, checked.
fn seconds(option: &str, value: Option<f64>) -> Result<Option<Duration>, String> {
    value
        .map(|v| {
            Duration::try_from_secs_f64(v)
                .map_err(|_| format!("{option} {v}: not a number of seconds"))
        })
        .transpose()
}

fn open_runtime(args: &SamplingArgs) -> Result<Runtime, Box<dyn std::error::Error>> {
    let options = OpenOptions {
        descriptor: args.descriptor.descriptor.clone(),
        limits: args.descriptor.limits.limits(),
    };
    Ok(Runtime::attach(args.pid, &options)?)
}

fn profiler_options(args: &SamplingArgs) -> ProfilerOptions {
    ProfilerOptions {
        native: args.native,
        threads: args.threads,
        ..ProfilerOptions::default()
    }
}

fn format_of(args: &RecordArgs) -> Format {
    let chosen = args.format.or_else(|| {
        let ext = args
            .output
            .as_ref()?
            .extension()?
            .to_str()?
            .to_ascii_lowercase();
        match ext.as_str() {
            "svg" => Some(OutputFormat::Svg),
            "json" => Some(OutputFormat::Speedscope),
            "txt" | "folded" | "collapsed" => Some(OutputFormat::Collapsed),
            _ => None,
        }
    });
    match chosen.unwrap_or(OutputFormat::Svg) {
        OutputFormat::Svg => Format::Svg,
        OutputFormat::Speedscope => Format::Speedscope,
        OutputFormat::Collapsed => Format::Collapsed,
    }
}

/// Runs `cdac record`.
pub fn run_record(args: &RecordArgs) -> CliResult {
    let s = &args.sampling;
    let rt = open_runtime(s)?;
    let mut profiler = Profiler::new(&rt, Some(s.pid), profiler_options(s))?;
    let format = format_of(args);
    let path = args.output.clone().unwrap_or_else(|| {
        let ext = match format {
            Format::Svg => "svg",
            Format::Speedscope => "json",
            Format::Collapsed => "txt",
        };
        PathBuf::from(format!("cdac-{}.{ext}", s.pid))
    });
    let progress = std::io::stderr().is_terminal();
    let duration = seconds("--duration", args.duration)?;
    let end = sample(
        s,
        &mut profiler,
        duration,
        Duration::from_secs(1),
        |p, elapsed, sampler| {
            if progress {
                let st = p.stats();
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\rcdac: recording pid {} ({sampler}): {:.0} s, {} samples ({:.0}/s)   ",
                    s.pid,
                    elapsed.as_secs_f64(),
                    st.samples,
                    st.samples as f64 / elapsed.as_secs_f64().max(1e-3)
                );
                let _ = err.flush();
            }
            Ok(Outcome::Answered)
        },
    )?;
    if progress {
        status!("");
    }
    let title = format!(
        "cdac record: pid {} ({} samples, {:.1} s, {} Hz, {} sampler)",
        s.pid,
        profiler.stats().samples,
        end.elapsed.as_secs_f64(),
        s.rate,
        end.sampler
    );
    super::output_file::write_with(&path, super::output_file::DEFAULT_MODE, |out| {
        Ok(output::write(profiler.profile(), format, &title, out)?)
    })?;
    summarize(args, &profiler, &end, &path)
}

fn summarize(
    args: &RecordArgs,
    profiler: &Profiler<'_>,
    end: &SessionEnd,
    path: &std::path::Path,
) -> CliResult {
    let st = profiler.stats();
    let secs = end.elapsed.as_secs_f64().max(1e-3);
    let shares = profiler.profile().shares();
    let total = profiler.profile().samples().max(1) as f64;
    let ended_by = if end.process_exited {
        "the process exited"
    } else if end.interrupted {
        "interrupted"
    } else {
        "duration reached"
    };
    if args.json {
        let top: Vec<serde_json::Value> = shares
            .iter()
            .take(20)
            .map(|f| {
                json!({
                    "name": f.name,
                    "self": f.self_samples,
                    "total": f.total_samples,
                })
            })
            .collect();
        let v = json!({
            "pid": args.sampling.pid,
            "output": path,
            "sampler": end.sampler,
            "rate_hz": args.sampling.rate,
            "seconds": secs,
            "samples": st.samples,
            "samples_per_second": st.samples as f64 / secs,
            "managed_samples": st.managed_samples,
            "partial_walks": st.partial_walks,
            "lost": end.lost,
            "throttled": end.throttled,
            "threads_followed": end.threads_followed,
            "kernel_samples_excluded": end.excludes_kernel,
            "walk_micros_per_sample": st.walk_micros as f64 / st.samples.max(1) as f64,
            "cdac_cpu_seconds": end.cpu.map(|c| c.as_secs_f64()),
            "cache_refreshes": st.refreshes,
            "ended_by": ended_by,
            "distinct_stacks": profiler.profile().distinct_stacks(),
            "top": top,
        });
        out!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(Outcome::Answered);
    }
    out!(
        "wrote {} ({} samples in {:.1} s, {:.0}/s kept; {} sampler; {ended_by})",
        path.display(),
        st.samples,
        secs,
        st.samples as f64 / secs,
        end.sampler
    );
    if end.lost > 0 || end.throttled > 0 {
        out!(
            "  {} samples lost (buffers full), throttled {} times",
            end.lost,
            end.throttled
        );
    }
    if let Some(cpu) = end.cpu {
        out!(
            "  cdac used {:.2} s of CPU ({:.1}% of one core, {:.0} µs per sample); {} walks ended early",
            cpu.as_secs_f64(),
            cpu.as_secs_f64() * 100.0 / secs,
            cpu.as_secs_f64() * 1e6 / st.samples.max(1) as f64,
            st.partial_walks
        );
    }
    let mut by_self: Vec<_> = shares.iter().filter(|f| f.self_samples > 0).collect();
    by_self.sort_by_key(|f| std::cmp::Reverse(f.self_samples));
    out!("  hottest (self):");
    for f in by_self.iter().take(5) {
        out!(
            "  {:5.1}%  {}",
            f.self_samples as f64 * 100.0 / total,
            f.name
        );
    }
    Ok(Outcome::Answered)
}

/// Runs `cdac top`.
pub fn run_top(args: &TopArgs) -> CliResult {
    let s = &args.sampling;
    let rt = open_runtime(s)?;
    let mut profiler = Profiler::new(&rt, Some(s.pid), profiler_options(s))?;
    let interactive = std::io::stdout().is_terminal() && !args.json;
    let rows = args.rows.max(1);
    let json = args.json;
    let mut shown = 0usize;
    let end = sample(
        s,
        &mut profiler,
        seconds("--duration", args.duration)?,
        seconds("--interval", Some(args.interval))?
            .unwrap_or_default()
            .max(Duration::from_millis(100)),
        |p, elapsed, sampler| {
            let text = top_view(p, s.pid, elapsed, sampler, rows, json);
            if interactive {
                // Clear the screen and draw the table from the top-left corner.
                out!("\x1b[2J\x1b[H{text}");
            } else {
                out!("{text}");
            }
            shown += 1;
            p.clear_counts();
            Ok(Outcome::Answered)
        },
    )?;
    if end.process_exited {
        status!("cdac: process {} exited", s.pid);
    }
    if shown == 0 {
        let text = top_view(&profiler, s.pid, end.elapsed, end.sampler, rows, json);
        out!("{text}");
    }
    Ok(Outcome::Answered)
}

/// One refresh of `cdac top`: the hottest frames of the last interval.
fn top_view(
    p: &Profiler<'_>,
    pid: i32,
    elapsed: Duration,
    sampler: &str,
    rows: usize,
    json: bool,
) -> String {
    let profile = p.profile();
    let total = profile.samples().max(1) as f64;
    let mut shares = profile.shares();
    shares.sort_by(|a, b| {
        b.self_samples
            .cmp(&a.self_samples)
            .then(b.total_samples.cmp(&a.total_samples))
    });
    if json {
        let v = json!({
            "pid": pid,
            "elapsed": elapsed.as_secs_f64(),
            "sampler": sampler,
            "samples": profile.samples(),
            "rows": shares.iter().take(rows).map(|f| json!({
                "name": f.name,
                "self": f.self_samples,
                "total": f.total_samples,
            })).collect::<Vec<_>>(),
        });
        return v.to_string();
    }
    let mut text = format!(
        "cdac top: pid {pid}, {:.0} s, {} samples in the last interval ({sampler} sampler)\n\n  %self  %total  method\n",
        elapsed.as_secs_f64(),
        profile.samples()
    );
    for f in shares.iter().take(rows) {
        text.push_str(&format!(
            "{:6.1}%  {:5.1}%  {}\n",
            f.self_samples as f64 * 100.0 / total,
            f.total_samples as f64 * 100.0 / total,
            f.name
        ));
    }
    text
}
