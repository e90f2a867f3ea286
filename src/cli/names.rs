//! `cdac modules`, `cdac methods` and `cdac perfmap`: the loaded modules, every method with
//! code and its name, and a perf map for `perf report`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;

use super::model::{nonzero, Addr, Method, Module, Tier};
use super::tiers;
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs, UsageError};
use cdac::contracts::execution_manager::enumerate::{enumerate_code, CodeEntry};
use cdac::contracts::execution_manager::JitType;
use cdac::contracts::loader;
use cdac::formats::perf_map::{self, PerfMapEntry};
use cdac::memory::TargetKind;
use cdac::names::MethodNamer;
use cdac::runtime::Runtime;

/// Arguments of `cdac modules`.
#[derive(Debug, Args)]
pub struct ModulesArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    pub(super) descriptor: DescriptorArgs,
    /// Print a JSON array, one object per module.
    #[arg(long)]
    json: bool,
}

/// Arguments of `cdac methods`.
#[derive(Debug, Args)]
pub struct MethodsArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Only methods whose name matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,
    /// Print a JSON array of objects with `start`, `size`, `method_desc`, `name`,
    /// `jit_type`, `module`, `tier`, `current`.
    #[arg(long)]
    json: bool,
}

/// Arguments of `cdac perfmap`.
#[derive(Debug, Args)]
pub struct PerfmapArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Where to write the map (default for a live process: /tmp/perf-PID.map; `-` for
    /// standard output).
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    output: Option<PathBuf>,
    /// Overwrite the map even if the runtime itself has it open (it is writing it).
    #[arg(long)]
    force: bool,
}

/// Runs `cdac modules`.
pub fn run_modules(args: &ModulesArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let modules = loader::modules(rt.target(), rt.descriptor())?;
    if args.json {
        let list: Vec<Module> = modules
            .iter()
            .map(|m| Module {
                address: Addr(m.address),
                assembly: Addr(m.assembly),
                path: m.path.as_ref().map(|p| p.to_string_lossy().into_owned()),
                file_name: m.file_name.clone(),
                base: nonzero(m.base),
                size: m.size,
                mapped: m.mapped,
                is_dynamic: m.is_dynamic,
                is_collectible: m.is_collectible,
                ready_to_run_info: nonzero(m.ready_to_run_info),
            })
            .collect();
        super::emit_json(&list)?;
        return Ok(Outcome::Answered);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    writeln!(
        out,
        "{:<18} {:<18} {:>10}  {:<8} path",
        "module", "base", "size", "flags"
    )?;
    for m in &modules {
        let mut flags = String::new();
        if m.is_dynamic {
            flags.push_str("dyn ");
        }
        if m.is_collectible {
            flags.push_str("coll ");
        }
        if m.ready_to_run_info != 0 {
            flags.push_str("r2r ");
        }
        let path = match &m.path {
            Some(p) => p.display().to_string(),
            None if m.is_dynamic => "(dynamic)".to_string(),
            None => "-".to_string(),
        };
        writeln!(
            out,
            "{:<18} {:<18} {:>10}  {:<8} {path}",
            hex(m.address),
            hex(m.base),
            m.size,
            flags.trim_end()
        )?;
    }
    writeln!(out, "{} module(s)", modules.len())?;
    out.flush()?;
    Ok(Outcome::Answered)
}

/// Every method with code, with its name and module label.
struct NamedEntry {
    entry: CodeEntry,
    name: String,
    module: String,
}

/// The tier and `current` of each entry's code version (unknown where they cannot be
/// read; a warning says why when no tier can be read at all).
fn entry_tiers(
    rt: &Runtime,
    namer: &mut MethodNamer,
    entries: &[NamedEntry],
) -> Vec<(Tier, Option<bool>)> {
    let blocks: Vec<tiers::Block> = entries
        .iter()
        .map(|m| tiers::Block {
            method_desc: m.entry.method_desc,
            start: m.entry.start,
            ready_to_run: m.entry.jit_type == JitType::R2r,
        })
        .collect();
    tiers::tiers(rt, namer, &blocks)
        .into_iter()
        .map(|r| r.unwrap_or((Tier::Unknown, None)))
        .collect()
}

/// Most walks of a live process's code before its errors are reported.
const LIVE_ENUMERATION_ATTEMPTS: usize = 3;

/// Every method with code, named, how many parts of the code could not be read, and the
/// namer (its modules' metadata stays loaded).
type Named<'r> = (Vec<NamedEntry>, usize, MethodNamer);

fn named_methods(rt: &Runtime) -> Result<Named<'_>, Box<dyn std::error::Error>> {
    let (t, d) = (rt.target(), rt.descriptor());
    let mut en = enumerate_code(t, d)?;
    // A live process may add or free a range section while the walk reads the list (a
    // pointer read half-updated): read again from fresh memory before reporting a loss.
    let live = matches!(rt.target().source().kind(), TargetKind::Live { .. });
    let mut attempts = 1;
    while live && !en.errors.is_empty() && attempts < LIVE_ENUMERATION_ATTEMPTS {
        attempts += 1;
        rt.flush();
        let again = enumerate_code(t, d)?;
        if again.errors.len() <= en.errors.len() {
            en = again;
        }
    }
    for e in en.errors.iter().take(10) {
        tracing::warn!("code enumeration: {}: {}", e.site, e.error);
    }
    if en.errors.len() > 10 {
        tracing::warn!("code enumeration: {} more errors", en.errors.len() - 10);
    }
    let errors = en.errors.len();
    let mut namer = MethodNamer::for_runtime(rt);
    let mds: Vec<u64> = en.entries.iter().map(|e| e.method_desc).collect();
    let names = namer.names(&mds);
    let named = en
        .entries
        .into_iter()
        .zip(names)
        .map(|(entry, name)| {
            let module = namer
                .module_of(entry.method_desc)
                .map(|m| namer.module_label(m))
                .unwrap_or_default();
            NamedEntry {
                entry,
                name,
                module,
            }
        })
        .collect();
    Ok((named, errors, namer))
}

/// The outcome of a command that lists every method: partial when parts of the code could
/// not be read (their methods are missing).
fn methods_outcome(errors: usize) -> Outcome {
    if errors == 0 {
        Outcome::Answered
    } else {
        Outcome::Partial(format!(
            "{errors} part(s) of the code could not be read; their methods are missing (RUST_LOG=warn shows them)"
        ))
    }
}

/// Runs `cdac methods`.
pub fn run_methods(args: &MethodsArgs) -> CliResult {
    let filter = args
        .filter
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .map_err(|e| UsageError(format!("--filter: {e}")))?;
    let rt = args.target.open(&args.descriptor)?;
    let (all, errors, mut namer) = named_methods(&rt)?;
    let methods: Vec<NamedEntry> = all
        .into_iter()
        .filter(|m| filter.as_ref().is_none_or(|f| f.is_match(&m.name)))
        .collect();
    let tiers = entry_tiers(&rt, &mut namer, &methods);
    if args.json {
        let list: Vec<Method> = methods
            .iter()
            .zip(&tiers)
            .map(|(m, &(tier, current))| Method {
                method_desc: Addr(m.entry.method_desc),
                name: Some(m.name.clone()),
                module: (!m.module.is_empty()).then(|| m.module.clone()),
                start: Addr(m.entry.start),
                size: Some(m.entry.size),
                jit_type: m.entry.jit_type.as_str().to_string(),
                cold_start: m.entry.cold_start.map(Addr),
                cold_size: Some(m.entry.cold_size),
                tier,
                current,
            })
            .collect();
        super::emit_json(&list)?;
        return Ok(methods_outcome(errors));
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (m, &(tier, current)) in methods.iter().zip(&tiers) {
        writeln!(
            out,
            "{} {:>6} {:<3} {} {:<28} {}",
            hex(m.entry.start),
            m.entry.size,
            m.entry.jit_type.as_str(),
            tiers::current_mark(current),
            tiers::tier_name(tier),
            m.name
        )?;
    }
    writeln!(out, "{} method(s)", methods.len())?;
    out.flush()?;
    Ok(methods_outcome(errors))
}

/// True when process `pid` has `path` open (a map the runtime is writing). Only a regular
/// file can be such a map (every process has /dev/null open, for one).
pub(crate) fn open_in_process(pid: i32, path: &Path) -> bool {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(want) = std::fs::canonicalize(path) else {
        return false;
    };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| target == want)
}

/// Runs `cdac perfmap`.
pub fn run_perfmap(args: &PerfmapArgs) -> CliResult {
    let output = match (&args.output, args.target.pid) {
        (Some(p), _) => p.clone(),
        (None, Some(pid)) => PathBuf::from(format!("/tmp/perf-{pid}.map")),
        (None, None) => {
            return Err(UsageError("give -o PATH (there is no default for a dump)".into()).into())
        }
    };
    let to_stdout = output.as_os_str() == "-";
    if !to_stdout && output.exists() && !args.force {
        if let Some(pid) = args.target.pid {
            if open_in_process(pid, &output) {
                return Err(format!(
                    "{} is open in process {pid}: the runtime is writing its own perf map \
                     (DOTNET_PerfMapEnabled); give --force to overwrite it, or -o another path",
                    output.display()
                )
                .into());
            }
        }
    }
    let rt = args.target.open(&args.descriptor)?;
    let (entries, errors) = perf_map_entries(&rt)?;
    if to_stdout {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        perf_map::write(&mut out, &entries)?;
        out.flush()?;
    } else {
        write_perf_map(&output, &entries)?;
        status!("wrote {} method(s) to {}", entries.len(), output.display());
    }
    Ok(methods_outcome(errors))
}

/// The entries `cdac perfmap` writes: every method with code, named; and how many parts
/// of the code could not be read.
pub(crate) fn perf_map_entries(
    rt: &Runtime,
) -> Result<(Vec<PerfMapEntry>, usize), Box<dyn std::error::Error>> {
    let (methods, errors, _) = named_methods(rt)?;
    let entries = methods
        .into_iter()
        .map(|m| PerfMapEntry {
            start: m.entry.start,
            size: m.entry.size,
            name: m.name,
        })
        .collect();
    Ok((entries, errors))
}

/// Writes a perf map to `path` (a reader never sees half a map: see `output_file`).
pub(crate) fn write_perf_map(
    path: &Path,
    entries: &[PerfMapEntry],
) -> Result<(), super::output_file::OutputError> {
    super::output_file::write_with(path, super::output_file::DEFAULT_MODE, |mut out| {
        Ok(perf_map::write(&mut out, entries)?)
    })
}
