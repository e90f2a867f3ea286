//! `cdac mip show|merge|create` (LLVM MIP profiles) and `cdac coverage` (which managed
//! methods ran, written as a MIP function-coverage profile).

/// `writeln!` into the output buffer (writing to a `String` cannot fail).
macro_rules! outln {
    ($o:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o, $($t)*);
    }};
}

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use super::{CliResult, Outcome};
use super::{DescriptorArgs, TargetArgs};
use cdac::coverage::function_coverage;
use cdac::formats::mip::{
    create_from_map, function_coverage_profile, merge, show_rows, FileKind, Header, Layout, MipMap,
    Profile, RawProfile,
};

/// `cdac mip` subcommands.
#[derive(Debug, Subcommand)]
pub enum MipCommand {
    /// Print a profile's functions (or a map's / raw file's contents).
    Show(ShowArgs),
    /// Merge profiles: call counts and timestamps add, coverage ORs.
    Merge(MergeArgs),
    /// An empty profile for the functions of a map.
    Create(CreateArgs),
}

/// Arguments of `cdac mip show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    file: PathBuf,
    /// Only functions whose name matches this regular expression.
    #[arg(long)]
    regex: Option<String>,
    #[arg(long)]
    json: bool,
}

/// Arguments of `cdac mip merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: PathBuf,
    #[arg(required = true, value_name = "IN")]
    inputs: Vec<PathBuf>,
}

/// Arguments of `cdac mip create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: PathBuf,
    /// The `.mipmap`.
    map: PathBuf,
}

/// Header layout of written profiles.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LayoutArg {
    /// 24-byte header, file types 1/2/3.
    Old,
    /// 32-byte header with the raw section offset, bit-flag file types.
    New,
}

/// Arguments of `cdac coverage`.
#[derive(Debug, Args)]
pub struct CoverageArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// The `.mip` to write.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// The name whose hash becomes the profile's module hash (default: `dotnet`).
    #[arg(long, default_value = "dotnet")]
    link_unit: String,
    #[arg(long, value_enum, default_value = "new")]
    layout: LayoutArg,
}

fn read(path: &PathBuf) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &std::path::Path, bytes: &[u8]) -> Result<(), super::output_file::OutputError> {
    super::output_file::write_bytes(path, bytes)
}

/// Runs `cdac mip ...`.
pub fn run_mip(cmd: &MipCommand) -> CliResult {
    match cmd {
        MipCommand::Show(a) => show(a),
        MipCommand::Merge(a) => {
            let mut profiles = Vec::new();
            for p in &a.inputs {
                profiles
                    .push(Profile::parse(&read(p)?).map_err(|e| format!("{}: {e}", p.display()))?);
            }
            let merged = merge(&profiles)?;
            write(&a.output, &merged.to_bytes()?)?;
            status!(
                "merged {} profile(s): {} functions",
                profiles.len(),
                merged.functions.len()
            );
            Ok(Outcome::Answered)
        }
        MipCommand::Create(a) => {
            let map =
                MipMap::parse(&read(&a.map)?).map_err(|e| format!("{}: {e}", a.map.display()))?;
            let profile = create_from_map(&map)?;
            write(&a.output, &profile.to_bytes()?)?;
            status!("created a profile of {} functions", profile.functions.len());
            Ok(Outcome::Answered)
        }
    }
}

fn show(a: &ShowArgs) -> CliResult {
    let mut out = String::new();
    let bytes = read(&a.file)?;
    let header = Header::parse(&bytes).map_err(|e| format!("{}: {e}", a.file.display()))?;
    let filter = a
        .regex
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .map_err(|e| super::UsageError(format!("regular expression: {e}")))?;
    let keep = |name: &str| filter.as_ref().is_none_or(|r| r.is_match(name));
    match header.kind {
        FileKind::Profile => {
            let profile =
                Profile::parse(&bytes).map_err(|e| format!("{}: {e}", a.file.display()))?;
            let rows: Vec<_> = show_rows(&profile)
                .into_iter()
                .filter(|r| keep(r.name.as_deref().unwrap_or("")))
                .collect();
            if a.json {
                outln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "layout": format!("{:?}", header.layout),
                        "profile_type": header.profile_type.0,
                        "module_hash": format!("{:#010x}", header.module_hash),
                        "functions": rows,
                    }))?
                );
            } else {
                outln!(
                    out,
                    "{:<8} {:>10} {:>12} {:>7} {:>9}  name",
                    "covered",
                    "calls",
                    "order sum",
                    "merges",
                    "blocks"
                );
                for r in &rows {
                    outln!(
                        out,
                        "{:<8} {:>10} {:>12} {:>7} {:>4}/{:<4}  {}",
                        if r.covered { "yes" } else { "no" },
                        r.call_count,
                        r.order_sum,
                        r.merge_count,
                        r.hot_blocks(),
                        r.blocks.len(),
                        r.name.as_deref().unwrap_or("<unnamed>")
                    );
                }
                status!(
                    "{} function(s), {} covered",
                    rows.len(),
                    rows.iter().filter(|r| r.covered).count()
                );
            }
        }
        FileKind::Map => {
            let map = MipMap::parse(&bytes).map_err(|e| format!("{}: {e}", a.file.display()))?;
            let entries: Vec<_> = map.entries.iter().filter(|e| keep(&e.name)).collect();
            if a.json {
                let list: Vec<_> = entries.iter().map(|e| json!({
                    "name": e.name, "function_size": e.function_size,
                    "cfg_signature": format!("{:#x}", e.cfg_signature), "blocks": e.block_offsets.len() + 1,
                })).collect();
                outln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(
                        &json!({"layout": format!("{:?}", header.layout), "functions": list})
                    )?
                );
            } else {
                for e in entries {
                    outln!(
                        out,
                        "{:>8} {:#018x} {:>4}  {}",
                        e.function_size,
                        e.cfg_signature,
                        e.block_offsets.len() + 1,
                        e.name
                    );
                }
            }
        }
        FileKind::Raw => {
            let raw = RawProfile::parse_without_blocks(&bytes)
                .map_err(|e| format!("{}: {e}", a.file.display()))?;
            outln!(
                out,
                "raw profile ({:?} layout): {} record(s)",
                header.layout,
                raw.records.len()
            );
        }
        FileKind::CallEdgeSamples => outln!(
            out,
            "call-edge samples ({:?} layout): body not described by the format",
            header.layout
        ),
    }
    super::emit(&out)?;
    Ok(Outcome::Answered)
}

/// Runs `cdac coverage`.
pub fn run_coverage(args: &CoverageArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let report = function_coverage(rt.target(), rt.descriptor())?;
    let layout = match args.layout {
        LayoutArg::Old => Layout::Old,
        LayoutArg::New => Layout::New,
    };
    let profile = function_coverage_profile(
        &args.link_unit,
        report
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.covered)),
        layout,
    )?;
    write(&args.output, &profile.to_bytes()?)?;
    let covered = report.functions.iter().filter(|f| f.covered).count();
    status!(
        "wrote {}: {} functions, {covered} covered ({} code blocks; {} module(s) without metadata; {} enumeration error(s))",
        args.output.display(),
        report.functions.len(),
        report.code_blocks,
        report.modules_without_metadata,
        report.enumeration_errors,
    );
    Ok(Outcome::Answered)
}
