//! `cdac md ADDR` (like SOS `dumpmd`): what a MethodDesc says about its method: name,
//! declaring type, token, module, and every native code version with its code and tier.

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::code::parse_address;
use super::model::{Addr, Tier};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::contracts::code_versions::CodeVersions;

/// Arguments of `cdac md`.
#[derive(Debug, Args)]
pub struct MdArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// The MethodDesc's address (as `ip2md` and `methods` list it).
    #[arg(value_name = "ADDR", value_parser = parse_address)]
    address: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac md --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MdReport {
    /// The MethodDesc.
    pub address: Addr,
    /// The method's name and signature.
    pub name: String,
    /// The declaring type's MethodTable.
    pub method_table: Addr,
    /// The declaring type's name.
    pub type_name: Option<String>,
    /// The module defining it.
    pub module: Addr,
    /// That module, as `modules` labels it.
    pub module_name: String,
    /// The MethodDef token.
    pub token: String,
    /// The kind of MethodDesc (`MethodDesc` for an IL method, `FCallMethodDesc`,
    /// `PInvokeMethodDesc`, `InstantiatedMethodDesc`, `DynamicMethodDesc`, ...).
    pub classification: String,
    /// A static method.
    pub is_static: bool,
    /// The current version's code (absent when it has none yet, or when which version is
    /// current cannot be told).
    pub code: Option<Addr>,
    /// Every native code version: the default one first, then the explicit ones newest
    /// first (the runtime's order).
    pub versions: Vec<CodeVersionReport>,
    /// Why the code versions could not be read, when they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versions_error: Option<String>,
}

/// One native code version of a method.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CodeVersionReport {
    /// Its `NativeCodeVersionNode` (absent for the default version).
    pub node: Option<Addr>,
    /// Start of its code (absent when it has none yet).
    pub code: Option<Addr>,
    /// Its optimization tier.
    pub tier: Tier,
    /// The ReJIT id of the IL version it compiles (0: the original IL).
    pub il_version_id: u64,
    /// The active version of its IL version.
    pub active: bool,
    /// The method's current version (`null` when that cannot be told).
    pub current: Option<bool>,
}

/// Runs `cdac md`.
pub fn run_md(args: &MdArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let info = rt
        .contracts()
        .runtime_type_system()?
        .method_desc(args.address)?;
    let mut namer = cdac::names::MethodNamer::for_runtime(&rt);
    let name = namer.name(args.address);
    let impl_flags = namer.impl_flags(&[args.address]).pop().flatten();
    let em = rt.contracts().execution_manager()?;
    // Precompiled code is in a ReadyToRun image: the ExecutionManager says which.
    let is_ready_to_run = |code: u64| {
        em.code_block(code)
            .ok()
            .flatten()
            .is_some_and(|b| b.jit_type.as_str() == "r2r")
    };
    let (versions, versions_error) = match CodeVersions::new(rt.target(), rt.descriptor())
        .and_then(|mut cv| cv.versions(args.address, impl_flags, &is_ready_to_run))
    {
        Ok(v) => (v.versions, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let versions: Vec<CodeVersionReport> = versions
        .iter()
        .map(|v| CodeVersionReport {
            node: v.node.map(Addr),
            code: v.code.map(Addr),
            tier: v.tier.into(),
            il_version_id: v.il_version_id,
            active: v.active,
            current: v.current,
        })
        .collect();
    let code = versions
        .iter()
        .find(|v| v.current == Some(true))
        .and_then(|v| v.code);
    let report = MdReport {
        address: Addr(args.address),
        name,
        method_table: Addr(info.method_table),
        type_name: namer.type_name(info.method_table),
        module: Addr(info.module),
        module_name: namer.module_label(info.module),
        token: format!("{:#010x}", info.token),
        classification: info.classification.type_name().to_string(),
        is_static: info.is_static,
        code,
        versions,
        versions_error,
    };
    let outcome = match &report.versions_error {
        None => Outcome::Answered,
        Some(e) => Outcome::Partial(format!("code versions not read: {e}")),
    };
    if args.json {
        super::emit_json(&report)?;
        return Ok(outcome);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    writeln!(out, "MethodDesc:      {}", hex(args.address))?;
    writeln!(out, "Name:            {}", report.name)?;
    writeln!(
        out,
        "MethodTable:     {} {}",
        hex(report.method_table.0),
        report.type_name.as_deref().unwrap_or("")
    )?;
    writeln!(
        out,
        "Module:          {} {}",
        hex(report.module.0),
        report.module_name
    )?;
    writeln!(out, "Token:           {}", report.token)?;
    writeln!(
        out,
        "Kind:            {}{}",
        report.classification,
        if report.is_static { ", static" } else { "" }
    )?;
    match report.code {
        Some(c) => writeln!(out, "Current code:    {}", hex(c.0))?,
        None => writeln!(out, "Current code:    none")?,
    }
    if !report.versions.is_empty() {
        writeln!(out, "Code versions:")?;
        for v in &report.versions {
            writeln!(
                out,
                "  {:<18} {:<28} {}{}",
                v.code.map_or_else(|| "(no code)".to_string(), |c| hex(c.0)),
                super::tiers::tier_name(v.tier),
                v.node
                    .map_or_else(|| "default".to_string(), |n| format!("node {}", hex(n.0))),
                if v.current == Some(true) {
                    ", current"
                } else {
                    ""
                }
            )?;
        }
    }
    if let Some(e) = &report.versions_error {
        writeln!(out, "Code versions not read: {e}")?;
    }
    out.flush()?;
    Ok(outcome)
}
