//! `cdac record` and `cdac top`: a sampling profiler of a live .NET process with nothing
//! injected. The kernel samples each thread (perf events; the process is never stopped),
//! `cdac` unwinds and names each sample from outside. Where perf events are not
//! permitted, the ptrace sampler of `cdac stacks` stands in (it stops each thread briefly
//! per sample) and the output says so.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::DescriptorArgs;
use super::{CliResult, Outcome};
use cdac::profile::output::{self, Format};
use cdac::profile::session::{run_session, SamplerChoice, SessionOptions, SessionSummary};
use cdac::profile::{Profiler, ProfilerOptions};
use cdac::runtime::{OpenOptions, Runtime};

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

/// Runs a sampling session (`cdac::profile::session`) until Ctrl-C, the duration or the
/// process's exit; `tick` is called about every `tick_every` with the profiler (to print
/// progress or a table).
fn sample(
    args: &SamplingArgs,
    profiler: &mut Profiler<'_>,
    duration: Option<Duration>,
    tick_every: Duration,
    mut tick: impl FnMut(&mut Profiler<'_>, Duration, &str) -> CliResult,
) -> Result<SessionSummary, Box<dyn std::error::Error>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let options = SessionOptions {
        pid: args.pid,
        rate: args.rate,
        stack_bytes: args.stack_bytes,
        sampler: match args.sampler {
            SamplerKind::Auto => SamplerChoice::Auto,
            SamplerKind::Perf => SamplerChoice::Perf,
            SamplerKind::Ptrace => SamplerChoice::Ptrace,
        },
        idle: args.idle,
        duration,
        tick_every,
    };
    run_session(
        &options,
        profiler,
        &stop,
        &mut |w| status!("cdac: warning: {w}"),
        |p, elapsed, sampler| tick(p, elapsed, sampler).map(|_| ()),
    )
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
        sysroots: args.descriptor.sysroots(),
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
    end: &SessionSummary,
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
