//! `cdac perf-inject`: makes `perf report` name .NET frames in a recording of a process that
//! runs with W^X on (the .NET default), where `/tmp/perf-PID.map` alone does not help.
//!
//! perf only reads a perf map for executable mappings it sees as anonymous, and W^X puts
//! JIT'ed code in `/memfd:doublemapper (deleted)` (ReadyToRun code is in `*.dll` images,
//! which perf cannot read either). This command renames those mappings to `//anon` in the
//! recording (`cdac::formats::perf_data`), in place or into a copy, then writes the perf
//! map of each process concerned that still runs, as `cdac perfmap --pid` does.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;

use super::names::{open_in_process, perf_map_entries, write_perf_map};
use super::output_file;
use super::{CliResult, Outcome};
use cdac::formats::perf_data::{self, PidRewrites, RewriteOptions, RewritePlan};
use cdac::memory::file_bytes::FileBytes;
use cdac::memory::live::process_gone;
use cdac::memory::OpenError;
use cdac::runtime::{OpenOptions, Runtime, RuntimeError};

/// Help shown after the options of `cdac perf-inject --help`.
const WORKFLOW: &str = "\
Workflow (the process must still run when perf-inject does; the map is a snapshot):
  perf record -g -p PID -- sleep 10      # frame pointers: .NET JIT code keeps them
  cdac perf-inject                        # fixes perf.data, writes /tmp/perf-PID.map
  perf report                             # or perf script

Not fixed: perf top (it reads live, nothing to rewrite); --call-graph dwarf stops at the
first JIT'ed frame (no unwind tables for JIT code, W^X or not); perf record -z recordings
are refused. Code freed before the map is written (unloaded collectible assemblies,
collected dynamic methods) stays unnamed, and code reused at the same address is named
after its last owner.

Exit status: 0 when everything was done, 1 when a process needed a map and got none (or
the recording could not be fixed), 2 for usage errors.";

/// Arguments of `cdac perf-inject`.
#[derive(Debug, Args)]
#[command(after_long_help = WORKFLOW)]
pub struct PerfInjectArgs {
    /// The recording (`perf record -o`; a file or a saved pipe-mode stream).
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "perf.data"
    )]
    input: PathBuf,
    /// Write the fixed recording here (default: fix the input in place, writing only the
    /// bytes that change).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Leave the mappings of `*.dll` images alone (by default they are renamed too, so that
    /// ReadyToRun frames are named from the map).
    #[arg(long)]
    keep_images: bool,
    /// Only fix the recording; write no perf maps.
    #[arg(long)]
    no_map: bool,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

/// What became of one process's perf map.
#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum MapOutcome {
    /// cdac wrote the map.
    Written { path: PathBuf, methods: usize },
    /// The runtime writes its own map (`DOTNET_PerfMapEnabled`), which is kept.
    RuntimeOwn { path: PathBuf },
    /// The process is gone.
    Exited,
    /// The process has no .NET runtime cdac can read.
    NotDotnet { reason: String },
    /// We may not read the process.
    Permission { reason: String },
    /// Reading the process or writing the map failed.
    Failed { reason: String },
}

impl MapOutcome {
    /// True when perf will find a map for the process.
    fn has_map(&self) -> bool {
        matches!(
            self,
            MapOutcome::Written { .. } | MapOutcome::RuntimeOwn { .. }
        )
    }

    fn describe(&self) -> String {
        match self {
            MapOutcome::Written { path, methods } => {
                format!("wrote {} ({methods} methods)", path.display())
            }
            MapOutcome::RuntimeOwn { path } => {
                format!("kept {}: the runtime writes its own map", path.display())
            }
            MapOutcome::Exited => "no map: the process has exited".into(),
            MapOutcome::NotDotnet { reason } => format!("no map: not a .NET process ({reason})"),
            MapOutcome::Permission { reason } => format!("no map: permission denied ({reason})"),
            MapOutcome::Failed { reason } => format!("no map: {reason}"),
        }
    }
}

/// One process of the summary.
#[derive(Debug, Serialize)]
struct ProcessSummary {
    pid: u32,
    #[serde(flatten)]
    rewritten: PidRewrites,
    /// `None` with `--no-map`.
    map: Option<MapOutcome>,
}

/// The `--json` summary.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    input: &'a Path,
    output: &'a Path,
    in_place: bool,
    layout: perf_data::Layout,
    byte_order: perf_data::ByteOrder,
    records: u64,
    mappings: u64,
    rewritten: u64,
    skipped_not_executable: u64,
    processes: Vec<ProcessSummary>,
    /// True when every process that needed a map has one (or --no-map).
    ok: bool,
}

/// Runs `cdac perf-inject`; the exit status is 1 when a process that needed a map got none.
pub fn run_perf_inject(args: &PerfInjectArgs) -> CliResult {
    let input = &args.input;
    if input.is_dir() {
        return Err(format!(
            "{}: {}",
            input.display(),
            perf_data::PerfDataError::DirectoryFormat
        )
        .into());
    }
    let options = RewriteOptions {
        images: !args.keep_images,
    };
    let plan = {
        let bytes = FileBytes::open(input).map_err(|e| format!("{}: {e}", input.display()))?;
        let plan = perf_data::plan_rewrite(&bytes, &options)
            .map_err(|e| format!("{}: {e}", input.display()))?;
        if let Some(output) = &args.output {
            // A new output file gets the recording's mode (perf record makes it 0600).
            let mode =
                std::fs::metadata(input).map_or(output_file::DEFAULT_MODE, |m| m.mode() & 0o777);
            output_file::write_with(output, mode, |out| {
                for chunk in perf_data::patched_chunks(&bytes, &plan.patches) {
                    out.write_all(chunk)?;
                }
                Ok(())
            })?;
        }
        plan
    };
    if args.output.is_none() && !plan.patches.is_empty() {
        patch_in_place(input, &plan)?;
    }
    let processes: Vec<ProcessSummary> = plan
        .by_pid
        .iter()
        .map(|(&pid, &rewritten)| ProcessSummary {
            pid,
            rewritten,
            map: (!args.no_map).then(|| map_for(pid)),
        })
        .collect();
    let ok = processes
        .iter()
        .all(|p| p.map.as_ref().is_none_or(MapOutcome::has_map));
    let summary = Summary {
        input,
        output: args.output.as_deref().unwrap_or(input),
        in_place: args.output.is_none(),
        layout: plan.header.layout,
        byte_order: plan.header.order,
        records: plan.records,
        mappings: plan.mappings,
        rewritten: plan.rewritten(),
        skipped_not_executable: plan.skipped_not_executable,
        processes,
        ok,
    };
    if args.json {
        out!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary)?;
    }
    let missing = summary
        .processes
        .iter()
        .filter(|p| p.map.as_ref().is_some_and(|m| !m.has_map()))
        .count();
    Ok(if ok {
        Outcome::Answered
    } else {
        Outcome::Partial(format!(
            "{missing} process(es) whose code was renamed got no perf map"
        ))
    })
}

/// Writes the patches into the input file itself (only the changed bytes).
fn patch_in_place(path: &Path, plan: &RewritePlan) -> Result<(), Box<dyn std::error::Error>> {
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    // No truncation, no creation: the recording is changed where it lies.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(err)?;
    for p in &plan.patches {
        file.write_all_at(&p.bytes, p.offset).map_err(err)?;
    }
    file.sync_data().map_err(err)?;
    Ok(())
}

/// Writes `/tmp/perf-PID.map` for a process, as `cdac perfmap --pid` does.
fn map_for(pid: u32) -> MapOutcome {
    let Ok(pid) = i32::try_from(pid) else {
        return MapOutcome::Failed {
            reason: format!("pid {pid} is not a process id"),
        };
    };
    if process_gone(pid) {
        return MapOutcome::Exited;
    }
    let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    // A map the runtime itself is writing is complete and current (stubs included).
    if path.exists() && open_in_process(pid, &path) {
        return MapOutcome::RuntimeOwn { path };
    }
    let rt = match Runtime::attach(pid, &OpenOptions::default()) {
        Ok(rt) => rt,
        Err(e) => return attach_failure(pid, e),
    };
    let entries = match perf_map_entries(&rt) {
        Ok((entries, _unreadable)) => entries,
        Err(e) => {
            return MapOutcome::Failed {
                reason: e.to_string(),
            }
        }
    };
    match write_perf_map(&path, &entries) {
        Ok(()) => MapOutcome::Written {
            path,
            methods: entries.len(),
        },
        Err(e) => MapOutcome::Failed {
            reason: e.to_string(),
        },
    }
}

fn attach_failure(pid: i32, e: RuntimeError) -> MapOutcome {
    match e {
        // It may have exited between the check and the attach.
        RuntimeError::Open(OpenError::NoSuchProcess { .. }) => MapOutcome::Exited,
        _ if process_gone(pid) => MapOutcome::Exited,
        RuntimeError::Open(OpenError::PermissionDenied { hint, .. }) => {
            MapOutcome::Permission { reason: hint }
        }
        RuntimeError::NoRuntime(reason) => MapOutcome::NotDotnet { reason },
        other => MapOutcome::Failed {
            reason: other.to_string(),
        },
    }
}

fn print_summary(s: &Summary<'_>) -> Result<(), Box<dyn std::error::Error>> {
    let layout = match s.layout {
        perf_data::Layout::File => "file",
        perf_data::Layout::Pipe => "pipe-mode",
    };
    let order = match s.byte_order {
        perf_data::ByteOrder::Little => "little-endian",
        perf_data::ByteOrder::Big => "big-endian",
    };
    let written_to = if s.in_place {
        "in place".to_string()
    } else {
        format!("into {}", s.output.display())
    };
    out!(
        "{}: {} records ({layout}, {order}), {} mappings; renamed {} to //anon {written_to}",
        s.input.display(),
        s.records,
        s.mappings,
        s.rewritten
    );
    if s.processes.is_empty() {
        out!(
            "no .NET code mappings to rename (W^X off? then `cdac perfmap --pid PID` alone \
             names JIT'ed frames)"
        );
    }
    let mut by_outcome: BTreeMap<bool, usize> = BTreeMap::new();
    for p in &s.processes {
        let map = p.map.as_ref().map_or_else(
            || "no map written (--no-map)".to_string(),
            MapOutcome::describe,
        );
        out!(
            "  pid {}: {} JIT code, {} image mapping(s): {map}",
            p.pid,
            p.rewritten.jit_code,
            p.rewritten.images
        );
        *by_outcome
            .entry(p.map.as_ref().is_none_or(MapOutcome::has_map))
            .or_default() += 1;
    }
    if let Some(&missing) = by_outcome.get(&false) {
        out!(
            "{missing} process(es) got no map: their JIT'ed frames stay unnamed (run \
             perf-inject while the process is alive)"
        );
    }
    Ok(())
}
