//! `cdac find NAME` (like SOS `name2ee`): a type or method found by name in the loaded
//! modules' metadata, with its token and the runtime's MethodTable or MethodDesc.

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{nonzero, Addr};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::find::FoundKind;

/// Arguments of `cdac find`.
#[derive(Debug, Args)]
pub struct FindArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// `[MODULE] NAME`: a type's full name (`Ns.Outer+Inner`, a generic type with its
    /// arity: ``System.Collections.Generic.List`1``), or a method's (`Ns.Type.Method`: every
    /// overload); before it, the module to search (its file name, with or without `.dll`;
    /// `*` for every module, the default). SOS's `MODULE!NAME` works too.
    #[arg(value_name = "NAME", num_args = 1..=2, required = true)]
    names: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac find --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FindReport {
    /// The name looked for.
    pub name: String,
    /// Every match.
    pub found: Vec<FoundReport>,
    /// Modules searched.
    pub modules_searched: usize,
    /// Modules whose metadata could not be read, and why.
    pub unreadable: Vec<String>,
}

/// One match.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FoundReport {
    /// `type` or `method`.
    pub kind: String,
    /// The defining module.
    pub module: Addr,
    /// Its file name.
    pub module_file: Option<String>,
    /// The TypeDef or MethodDef token.
    pub token: String,
    /// A type's MethodTable (absent when the runtime has not loaded it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method_table: Option<Addr>,
    /// A method's MethodDesc (absent when the runtime has not made one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method_desc: Option<Addr>,
    /// Its name from the metadata (a method's with its IL signature).
    pub name: String,
}

/// Runs `cdac find`.
pub fn run_find(args: &FindArgs) -> CliResult {
    let (module, name) = match args.names.as_slice() {
        [module, name] => (Some(module.as_str()), name.as_str()),
        [name] => match name.split_once('!') {
            Some((module, name)) => (Some(module), name),
            None => (None, name.as_str()),
        },
        _ => return Err(super::UsageError("give [MODULE] NAME".into()).into()),
    };
    let rt = args.target.open(&args.descriptor)?;
    let found = cdac::find::find(&rt, module, name)?;
    let report = FindReport {
        name: name.to_string(),
        found: found
            .found
            .iter()
            .map(|f| {
                let handle = nonzero(f.runtime_handle);
                // Names from the metadata: the MethodDesc of a generic type's method is the
                // open one, which the runtime's naming cannot instantiate.
                let (kind, method_table, method_desc) = match f.kind {
                    FoundKind::Type => ("type", handle, None),
                    FoundKind::Method => ("method", None, handle),
                };
                FoundReport {
                    kind: kind.to_string(),
                    module: Addr(f.module),
                    module_file: f.module_file.clone(),
                    token: format!("{:#010x}", f.token),
                    method_table,
                    method_desc,
                    name: f.name.clone(),
                }
            })
            .collect(),
        modules_searched: found.modules_searched,
        unreadable: found
            .unreadable
            .iter()
            .map(|(m, e)| format!("module {}: {e}", hex(*m)))
            .collect(),
    };
    let outcome = if !report.unreadable.is_empty() {
        Outcome::Partial(format!(
            "the metadata of {} module(s) could not be read: {}",
            report.unreadable.len(),
            super::first_problems(&report.unreadable)
        ))
    } else if report.found.is_empty() {
        Outcome::Partial(format!(
            "{} not found in {} module(s)",
            name, report.modules_searched
        ))
    } else {
        Outcome::Answered
    };
    if args.json {
        super::emit_json(&report)?;
        return Ok(outcome);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (i, f) in report.found.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(out, "Module:      {}", hex(f.module.0))?;
        writeln!(
            out,
            "Assembly:    {}",
            f.module_file.as_deref().unwrap_or("<unknown>")
        )?;
        writeln!(out, "Token:       {}", f.token)?;
        match (f.method_table, f.method_desc, f.kind.as_str()) {
            (Some(mt), _, _) => writeln!(out, "MethodTable: {}", hex(mt.0))?,
            (_, Some(md), _) => writeln!(out, "MethodDesc:  {}", hex(md.0))?,
            (None, None, "type") => writeln!(out, "MethodTable: none (the type is not loaded)")?,
            _ => writeln!(out, "MethodDesc:  none (not made yet)")?,
        }
        writeln!(out, "Name:        {}", f.name)?;
    }
    if report.found.is_empty() {
        writeln!(
            out,
            "{} not found ({} module(s) searched)",
            report.name, report.modules_searched
        )?;
    }
    out.flush()?;
    Ok(outcome)
}
