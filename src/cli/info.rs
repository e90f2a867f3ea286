//! `cdac info`: the runtime module, version and data descriptor of a target.

use std::collections::BTreeMap;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::descriptor::ContractVersion;
use cdac::memory::{Endian, TargetKind};
use cdac::runtime::{DescriptorSource, Runtime};

/// Arguments of `cdac info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Also write the runtime's whole descriptor (every part merged, every global a direct
    /// value) to FILE, for `--descriptor FILE` on a target whose runtime module cannot be
    /// identified (a core without its file list, say).
    #[arg(long, value_name = "FILE")]
    export_descriptor: Option<std::path::PathBuf>,
    /// Also list the target's OS threads (with their registers, from a dump).
    #[arg(long)]
    threads: bool,
}

/// What `cdac info --json` prints.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InfoReport {
    pub runtime_module: ModuleReport,
    pub runtime_version: Option<String>,
    pub runtime_file_version: Option<String>,
    pub runtime_commit: Option<String>,
    pub pointer_size: u8,
    pub endianness: &'static str,
    pub architecture: &'static str,
    /// From the RuntimeInfo contract, when the runtime advertises it.
    pub operating_system: Option<String>,
    pub runtime_flavor: Option<String>,
    pub descriptor_source: SourceReport,
    /// Shipped overlays that filled in what the descriptor lacks, most specific first.
    pub overlays: Vec<OverlayReport>,
    pub contracts: BTreeMap<String, serde_json::Value>,
    /// For each contract, the descriptor that advertised it: the runtime's own, a
    /// sub-descriptor, a shipped descriptor or an overlay.
    pub contract_origins: BTreeMap<String, String>,
    /// For each advertised contract, whether cdac reads it: "read" (with the algorithm it
    /// reads it with), "unsupported version" (with the versions it reads), "own reader:
    /// HOW" (cdac reads that data by its own means), or "not used" (no command needs it).
    pub contract_support: BTreeMap<String, String>,
    /// The physical format of each descriptor part (the runtime's and sub-descriptors).
    pub descriptor_formats: BTreeMap<String, u64>,
    /// The runtime's `RecommendedReaderVersion` (.NET 11), and this cdac's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recommended_reader_version: Option<u64>,
    /// The reader version this cdac is.
    pub reader_version: u64,
    pub types_count: usize,
    pub globals_count: usize,
    pub sub_descriptors: Vec<SubDescriptorReport>,
    pub target: String,
    /// How many OS threads the target has.
    pub thread_count: usize,
    /// The checks of the values `cdac` gave the descriptor, run when the target was opened.
    pub checks: Vec<CheckReport>,
    /// How many descriptor values came from shipped files (descriptor or overlays).
    pub shipped_values: usize,
    /// Shipped values no passed check covers.
    pub unchecked_shipped_values: Vec<String>,
    /// How long the checks took, in microseconds.
    pub checks_us: u64,
    /// The target's threads (a core's NT_PRSTATUS notes, a live process's tasks), with
    /// `--threads`; `null` otherwise.
    pub threads: Option<Vec<ThreadReport>>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ThreadReport {
    pub tid: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sp: Option<String>,
}

/// One check of the descriptor's shipped values against the target.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CheckReport {
    /// Its name.
    pub name: String,
    /// `passed`, `failed` or `skipped`.
    pub status: String,
    /// What it verifies.
    pub what: String,
    /// What it saw, what broke, or why it could not run.
    pub detail: String,
    /// The descriptor values it vouches for.
    pub covers: Vec<String>,
    /// Those of them a shipped descriptor or overlay gave.
    pub covers_shipped: Vec<String>,
    /// Microseconds since the checks began when this one ended.
    pub at_us: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ModuleReport {
    pub path: String,
    pub base: String,
    pub build_id: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SourceReport {
    pub kind: &'static str,
    pub name: String,
    /// For shipped descriptors: "verified-build" or "same-version-line".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit: Option<&'static str>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct OverlayReport {
    pub name: String,
    /// "verified-build" or "same-version-line".
    pub fit: &'static str,
    pub added_contracts: Vec<String>,
    pub added_types: Vec<String>,
    /// `Type.Field` added to types the runtime describes.
    pub added_fields: Vec<String>,
    pub added_globals: Vec<String>,
    /// Where the overlay says something else (the runtime's own value was kept).
    pub conflicts: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SubDescriptorReport {
    pub name: String,
    pub address: Option<String>,
    pub skipped: Option<String>,
}

/// The name a value serializes to (a unit enum variant's).
fn json_name<T: Serialize>(value: &T) -> Option<String> {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
}

/// Builds the report for a runtime (with its OS threads listed when `threads`).
pub fn report(rt: &Runtime, threads: bool) -> InfoReport {
    let os_threads = rt.target().source().threads().unwrap_or_default();
    let d = rt.descriptor();
    let layout = d.layout();
    let source = rt.descriptor_source();
    InfoReport {
        runtime_module: ModuleReport {
            path: rt.module().path.display().to_string(),
            base: hex(rt.module().base),
            build_id: rt.module().build_id.clone(),
        },
        runtime_version: rt.version().map(|v| v.product_version.clone()),
        runtime_file_version: rt.version().map(|v| v.file_version.clone()),
        runtime_commit: rt.version().and_then(|v| v.commit.clone()),
        pointer_size: layout.pointer_size,
        endianness: match layout.endian {
            Endian::Little => "little",
            Endian::Big => "big",
        },
        architecture: rt.module().architecture,
        operating_system: cdac::contracts::runtime_info::runtime_info(d)
            .ok()
            .and_then(|i| json_name(&i.operating_system)),
        runtime_flavor: cdac::contracts::runtime_info::runtime_info(d)
            .ok()
            .and_then(|i| json_name(&i.flavor)),
        descriptor_source: SourceReport {
            kind: source.kind(),
            name: source.name(),
            fit: match source {
                DescriptorSource::Shipped { fit, .. } => Some(fit.as_str()),
                _ => None,
            },
        },
        overlays: rt
            .overlays()
            .iter()
            .map(|o| OverlayReport {
                name: o.name.clone(),
                fit: o.fit.as_str(),
                added_contracts: o.report.added_contracts.clone(),
                added_types: o.report.added_types.clone(),
                added_fields: o.report.added_fields.clone(),
                added_globals: o.report.added_globals.clone(),
                conflicts: o.report.conflicts.clone(),
            })
            .collect(),
        contract_origins: d
            .contracts()
            .keys()
            .map(|k| (k.clone(), d.contract_origin(k).unwrap_or("").to_string()))
            .collect(),
        contracts: d
            .contracts()
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    ContractVersion::Number(n) => serde_json::Value::from(*n),
                    ContractVersion::Tag(t) => serde_json::Value::from(t.clone()),
                };
                (k.clone(), value)
            })
            .collect(),
        contract_support: d
            .contracts()
            .keys()
            .map(|name| (name.clone(), contract_support(d, name)))
            .collect(),
        descriptor_formats: d.formats().clone(),
        recommended_reader_version: d.global_value("RecommendedReaderVersion").ok(),
        reader_version: cdac::validation::READER_VERSION,
        types_count: d.types().len(),
        globals_count: d.globals().len(),
        sub_descriptors: d
            .sub_descriptors()
            .iter()
            .map(|s| SubDescriptorReport {
                name: s.name.clone(),
                address: s.address.map(hex),
                skipped: s.skipped.clone(),
            })
            .collect(),
        target: match rt.target().source().kind() {
            TargetKind::Live { pid } => format!("live process {pid}"),
            TargetKind::CoreDump { path } => format!("core dump {}", path.display()),
            TargetKind::Synthetic => "synthetic memory".to_string(),
            TargetKind::Host => "memory read by a host".to_string(),
        },
        thread_count: os_threads.len(),
        checks: Vec::new(),
        shipped_values: 0,
        unchecked_shipped_values: Vec::new(),
        checks_us: 0,
        threads: threads.then(|| {
            os_threads
                .iter()
                .map(|t| ThreadReport {
                    tid: t.tid,
                    ip: t.ip.map(hex),
                    sp: t.sp.map(hex),
                })
                .collect()
        }),
    }
}

/// Runs `cdac info`.
/// What cdac answers of a NativeAOT runtime.
pub(super) const NATIVE_AOT_COMMANDS: &str = "threads, stacks, analyze and heap read it (methods \
    and types named from the executable's stack-trace metadata, no .dbg needed); obj, gcroot, \
    locks, async, threadpool and the commands of JIT'ed and ReadyToRun code do not (its managed \
    types' fields are not described)";

pub fn run(args: &InfoArgs) -> CliResult {
    let (rt, checks) = args.target.open_checked(&args.descriptor)?;
    if let Some(path) = &args.export_descriptor {
        let text = serde_json::to_string_pretty(&rt.descriptor().to_complete_json())?;
        super::output_file::write_bytes(path, (text + "\n").as_bytes())?;
    }
    let mut r = report(&rt, args.threads);
    r.checks = checks
        .checks
        .iter()
        .map(|c| CheckReport {
            name: c.name.to_string(),
            status: format!("{:?}", c.status).to_lowercase(),
            what: c.what.to_string(),
            detail: c.detail.clone(),
            covers: c.covers.clone(),
            covers_shipped: c.covers_shipped.clone(),
            at_us: c.at_us,
        })
        .collect();
    r.shipped_values = checks.shipped_values;
    r.unchecked_shipped_values = checks.unchecked_shipped.clone();
    r.checks_us = checks.elapsed_us;
    if args.json {
        super::emit_json(&r)?;
        return Ok(Outcome::Answered);
    }
    let unknown = || "unknown".to_string();
    out!("target            {}", r.target);
    out!(
        "runtime module    {} at {}",
        r.runtime_module.path,
        r.runtime_module.base
    );
    out!(
        "build id          {}",
        r.runtime_module.build_id.clone().unwrap_or_else(unknown)
    );
    out!(
        "runtime version   {} (file version {}, commit {})",
        r.runtime_version.clone().unwrap_or_else(unknown),
        r.runtime_file_version.clone().unwrap_or_else(unknown),
        r.runtime_commit.clone().unwrap_or_else(unknown)
    );
    if rt.is_native_aot() {
        out!("runtime           NativeAOT (linked into the executable): {NATIVE_AOT_COMMANDS}");
    }
    out!(
        "architecture      {} ({}-bit pointers, {}-endian)",
        r.architecture,
        u32::from(r.pointer_size) * 8,
        r.endianness
    );
    let fit = r
        .descriptor_source
        .fit
        .map(|f| format!(", {f}"))
        .unwrap_or_default();
    out!(
        "descriptor        {}: {}{fit}",
        r.descriptor_source.kind,
        r.descriptor_source.name
    );
    for o in &r.overlays {
        let mut added = Vec::new();
        if !o.added_contracts.is_empty() {
            added.push(format!("{} contract(s)", o.added_contracts.len()));
        }
        if !o.added_types.is_empty() {
            added.push(format!("{} type(s)", o.added_types.len()));
        }
        if !o.added_fields.is_empty() {
            added.push(format!("{} field(s)", o.added_fields.len()));
        }
        if !o.added_globals.is_empty() {
            added.push(format!("{} global(s)", o.added_globals.len()));
        }
        if added.is_empty() {
            continue;
        }
        let conflicts = if o.conflicts.is_empty() {
            String::new()
        } else {
            format!("; {} conflict(s), the runtime's kept", o.conflicts.len())
        };
        out!(
            "overlay           {} ({}): added {}{conflicts}",
            o.name,
            o.fit,
            added.join(", ")
        );
    }
    // Contracts that did not come from the descriptor itself say where they came from.
    let own = |origin: &str| r.overlays.iter().all(|o| o.name != origin);
    let contracts: Vec<String> = r
        .contracts
        .iter()
        .map(|(k, v)| {
            let version = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            let support = match r.contract_support.get(k).map(String::as_str) {
                Some(s) if s.starts_with("read") => String::new(),
                Some(s) if s.starts_with("own reader") => " [own reader]".into(),
                Some(s) => format!(" [{s}]"),
                None => String::new(),
            };
            match r.contract_origins.get(k) {
                Some(origin) if !own(origin) => {
                    format!("{k} {version}{support} (from {origin})")
                }
                _ => format!("{k} {version}{support}"),
            }
        })
        .collect();
    out!(
        "contracts         {}",
        if contracts.is_empty() {
            "none".to_string()
        } else {
            contracts.join(", ")
        }
    );
    let formats: Vec<String> = r
        .descriptor_formats
        .iter()
        .map(|(part, f)| format!("{part} {f}"))
        .collect();
    if !formats.is_empty() {
        out!(
            "formats           {}{}",
            formats.join(", "),
            match r.recommended_reader_version {
                Some(v) => format!(
                    "; recommended reader version {v} (cdac is {})",
                    r.reader_version
                ),
                None => String::new(),
            }
        );
    }
    out!("types             {}", r.types_count);
    out!("globals           {}", r.globals_count);
    let passed = r.checks.iter().filter(|c| c.status == "passed").count();
    let shipped_checked: std::collections::BTreeSet<&str> = r
        .checks
        .iter()
        .filter(|c| c.status == "passed")
        .flat_map(|c| c.covers_shipped.iter().map(String::as_str))
        .collect();
    out!(
        "checks            {passed} of {} passed in {:.1} ms; {} of the {} values cdac added are covered by passed checks",
        r.checks.len(),
        r.checks_us as f64 / 1e3,
        shipped_checked.len(),
        r.shipped_values
    );
    for c in &r.checks {
        out!("  {:<8} {:<18} {}", c.status, c.name, c.detail);
        if std::env::var_os("CDAC_CHECK_TIMES").is_some() {
            out!("           at {} us", c.at_us);
        }
    }
    out!("threads           {}", r.thread_count);
    for t in r.threads.iter().flatten() {
        match (&t.ip, &t.sp) {
            (Some(ip), Some(sp)) => out!("  tid {:<8} ip {ip:<18} sp {sp}", t.tid),
            _ => out!("  tid {}", t.tid),
        }
    }
    for s in &r.sub_descriptors {
        match (&s.address, &s.skipped) {
            (Some(a), None) => out!("sub-descriptor    {} at {a}", s.name),
            (_, Some(why)) => out!("sub-descriptor    {} not loaded: {why}", s.name),
            (None, None) => out!("sub-descriptor    {}", s.name),
        }
    }
    Ok(Outcome::Answered)
}

/// Whether cdac reads contract `name` as `d` advertises it, in words.
fn contract_support(d: &cdac::descriptor::DataDescriptor, name: &str) -> String {
    use cdac::contracts::registry::{self, advertised_version_of};
    match registry::supported_versions(name) {
        None => match registry::read_by_own_means(name) {
            Some(how) => format!("own reader: {how}"),
            None => "not used".into(),
        },
        Some(versions) => match advertised_version_of(d, name, versions) {
            Ok(Some(algorithm)) => format!("read (algorithm {algorithm})"),
            Ok(None) => "read".into(),
            Err(_) => format!(
                "unsupported version (cdac reads {})",
                registry::readable_versions(name, versions)
            ),
        },
    }
}
