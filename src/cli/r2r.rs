//! `cdac r2rmap` (a ReadyToRun PerfMap made offline from an image) and `cdac symbolize`
//! (RVAs looked up in one).

/// `writeln!` into the output buffer (writing to a `String` cannot fail).
macro_rules! outln {
    ($o:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o, $($t)*);
    }};
}

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::{CliResult, Outcome};
use cdac::formats::r2r::perf_map::{enum_name, ABI_NAMES, ARCH_NAMES, OS_NAMES};
use cdac::formats::r2r::{r2r_perf_map, NameStyle, R2rError, R2rMapOptions, R2rPerfMap};

/// Arguments of `cdac r2rmap`.
#[derive(Debug, Args)]
pub struct R2rmapArgs {
    /// The ReadyToRun image (a .dll compiled by crossgen2).
    image: PathBuf,
    /// Where to write the map (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// More folders to look for referenced assemblies in (the image's own is searched
    /// first).
    #[arg(long = "search", value_name = "DIR")]
    search: Vec<PathBuf>,
    /// Names as .NET 8 builds before 8.0.29 print them in their perf maps: one character
    /// short at some lengths (a runtime bug); by default names are exact.
    #[arg(long)]
    net8_truncated_names: bool,
    /// How methods are named: `runtime` (the runtime's perf map, what `cdac ip2md` and
    /// `cdac perfmap` print) or `crossgen2` (the names crossgen2 writes to its own
    /// r2rmap, `PublishReadyToRunEmitSymbols`).
    #[arg(long, value_name = "STYLE", default_value = "runtime", value_parser = parse_style)]
    names: NameStyle,
}

fn parse_style(s: &str) -> Result<NameStyle, String> {
    match s {
        "runtime" => Ok(NameStyle::Runtime),
        "crossgen2" => Ok(NameStyle::Crossgen2),
        _ => Err(format!("{s:?}: `runtime` or `crossgen2`")),
    }
}

/// Arguments of `cdac symbolize`.
#[derive(Debug, Args)]
pub struct SymbolizeArgs {
    /// The ReadyToRun PerfMap (.ni.r2rmap) to look RVAs up in.
    #[arg(long, value_name = "FILE")]
    r2rmap: PathBuf,
    /// RVAs (hex, with or without 0x).
    #[arg(required = true)]
    rvas: Vec<String>,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// Runs `cdac r2rmap`.
pub fn run_r2rmap(args: &R2rmapArgs) -> CliResult {
    let report = match r2r_perf_map(
        &args.image,
        &R2rMapOptions {
            search_dirs: args.search.clone(),
            net8_truncation: args.net8_truncated_names,
            names: args.names,
        },
    ) {
        Ok(r) => r,
        // A rewritten component of a composite image: its code is in the composite.
        Err(R2rError::ComponentOfComposite { composite }) => {
            let owner = args
                .image
                .parent()
                .map(|d| d.join(&composite))
                .unwrap_or_else(|| PathBuf::from(&composite));
            return Err(format!(
                "{}: a component of the composite ReadyToRun image {composite:?}, which holds \
                 its code; its methods are in that image's map: cdac r2rmap {}",
                args.image.display(),
                owner.display()
            )
            .into());
        }
        // (a file that cannot be read names itself already)
        Err(e @ R2rError::Pe(_)) => return Err(e.into()),
        Err(e) => return Err(format!("{}: {e}", args.image.display()).into()),
    };
    let text = report.map.write();
    match &args.output {
        Some(path) if path.as_os_str() != "-" => {
            super::output_file::write_bytes(path, text.as_bytes())?;
        }
        _ => super::emit(&text)?,
    }
    let composite = if report.components > 0 {
        format!("composite image of {} components; ", report.components)
    } else {
        String::new()
    };
    status!(
        "{}: {composite}{} entries for {} methods; {} of {} runtime functions covered{}; {} fallback names; signature {}",
        args.image.display(),
        report.map.entries.len(),
        report.methods,
        report.covered_functions,
        report.runtime_functions,
        if report.unlisted_cold_functions > 0 {
            format!(
                " ({} more in {} cold part(s), which crossgen2-style maps leave out)",
                report.unlisted_cold_functions, report.cold_parts
            )
        } else {
            String::new()
        },
        report.fallback_names,
        if report.signature_from_image { "from the image's PerfMap record" } else { "computed (the image has no PerfMap record)" },
    );
    if !report.missing_assemblies.is_empty() {
        status!(
            "not found (--search DIR adds folders): {}",
            report.missing_assemblies.join(", ")
        );
    }
    Ok(Outcome::Answered)
}

/// Runs `cdac symbolize`.
pub fn run_symbolize(args: &SymbolizeArgs) -> CliResult {
    let text = std::fs::read_to_string(&args.r2rmap)
        .map_err(|e| format!("{}: {e}", args.r2rmap.display()))?;
    let map = R2rPerfMap::parse(&text).map_err(|e| format!("{}: {e}", args.r2rmap.display()))?;
    let mut out = String::new();
    let mut results = Vec::new();
    let mut unanswered = 0;
    for raw in &args.rvas {
        let digits = raw.trim_start_matches("0x").trim_start_matches("0X");
        let result = match u32::from_str_radix(digits, 16) {
            Ok(rva) => match map.lookup(rva) {
                Some(e) => {
                    json!({"rva": format!("{rva:#x}"), "name": e.name, "start": format!("{:#x}", e.rva), "offset": format!("{:#x}", rva - e.rva), "length": e.length})
                }
                None => json!({"rva": format!("{rva:#x}"), "error": "no entry holds this RVA"}),
            },
            Err(_) => json!({"rva": raw, "error": "not a hex number"}),
        };
        unanswered += usize::from(result.get("error").is_some());
        results.push(result);
    }
    if args.json {
        outln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "signature": map.signature.iter().map(|b| format!("{b:02X}")).collect::<String>(),
                "version": map.version,
                "os": enum_name(&OS_NAMES, map.os),
                "architecture": enum_name(&ARCH_NAMES, map.arch),
                "abi": enum_name(&ABI_NAMES, map.abi),
                "results": results,
            }))?
        );
    } else {
        for r in &results {
            match (r.get("name"), r.get("error")) {
                (Some(name), _) => outln!(
                    out,
                    "{}  {}+{}",
                    r["rva"].as_str().unwrap_or(""),
                    name.as_str().unwrap_or(""),
                    r["offset"].as_str().unwrap_or("")
                ),
                (_, Some(err)) => outln!(
                    out,
                    "{}  error: {}",
                    r["rva"].as_str().unwrap_or(""),
                    err.as_str().unwrap_or("")
                ),
                _ => {}
            }
        }
    }
    super::emit(&out)?;
    Ok(if unanswered == 0 {
        Outcome::Answered
    } else {
        Outcome::Partial(format!(
            "{unanswered} of {} RVA(s) not answered",
            results.len()
        ))
    })
}
