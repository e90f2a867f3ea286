//! `cdac mt ADDR` (like SOS `dumpmt`): what a MethodTable says about its type: name,
//! module and file, token, parent, canonical MethodTable and EEClass, sizes and counts.

use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::code::parse_address;
use super::model::{nonzero, Addr};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::contracts::runtime_type_system::{method_table_info, method_table_shape};

/// Arguments of `cdac mt`.
#[derive(Debug, Args)]
pub struct MtArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// The MethodTable's address (as `heap` and `obj` list it).
    #[arg(value_name = "ADDR", value_parser = parse_address)]
    address: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac mt --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MtReport {
    /// The MethodTable.
    pub address: Addr,
    /// The type's name.
    pub type_name: String,
    /// The canonical MethodTable (itself for a non-generic type).
    pub canonical: Addr,
    /// The EEClass (absent where it cannot be read).
    pub ee_class: Option<Addr>,
    /// The parent type's MethodTable (absent for `System.Object` and interfaces).
    pub parent: Option<Addr>,
    /// The parent type's name.
    pub parent_name: Option<String>,
    /// The module defining the type.
    pub module: Addr,
    /// That module's file.
    pub file: Option<String>,
    /// The TypeDef token.
    pub token: String,
    /// An instance's size without components, header included.
    pub base_size: u32,
    /// Bytes per array element or string character (0 for other types).
    pub component_size: u32,
    /// Whether instances hold references.
    pub contains_pointers: bool,
    /// An array type.
    pub is_array: bool,
    /// Methods the type declares (`EEClass.NumMethods`).
    pub num_methods: Option<u16>,
    /// Virtual slots.
    pub num_virtuals: Option<u16>,
    /// Interfaces in its interface map.
    pub num_interfaces: Option<u16>,
    /// Instance fields it declares.
    pub num_instance_fields: Option<u16>,
    /// Static fields it declares.
    pub num_static_fields: Option<u16>,
}

/// Runs `cdac mt`.
pub fn run_mt(args: &MtArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let (target, descriptor) = (rt.target(), rt.descriptor());
    let info = method_table_info(target, descriptor, args.address)?;
    let mut namer = cdac::names::MethodNamer::for_runtime(&rt);
    let type_name = namer.type_name(args.address).ok_or_else(|| {
        format!(
            "{} is not a MethodTable cdac can name (its module or TypeDef does not resolve)",
            hex(args.address)
        )
    })?;
    let shape = method_table_shape(target, descriptor, &info)?;
    let file = cdac::contracts::loader::modules(target, descriptor)
        .ok()
        .and_then(|ms| ms.into_iter().find(|m| m.address == info.module))
        .and_then(|m| m.path)
        .map(|p| p.display().to_string());
    let parent = nonzero(info.parent);
    let report = MtReport {
        address: Addr(args.address),
        type_name,
        canonical: Addr(info.canonical),
        ee_class: nonzero(shape.ee_class),
        parent,
        parent_name: parent.and_then(|p| namer.type_name(p.0)),
        module: Addr(info.module),
        file,
        token: format!("{:#010x}", info.token),
        base_size: shape.base_size,
        component_size: shape.component_size,
        contains_pointers: shape.contains_pointers,
        is_array: info.is_array(),
        num_methods: shape.num_methods,
        num_virtuals: shape.num_virtuals,
        num_interfaces: shape.num_interfaces,
        num_instance_fields: shape.num_instance_fields,
        num_static_fields: shape.num_static_fields,
    };
    if args.json {
        super::emit_json(&report)?;
        return Ok(Outcome::Answered);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let opt = |v: Option<u16>| v.map_or_else(|| "?".to_string(), |n| n.to_string());
    writeln!(out, "MethodTable:       {}", hex(args.address))?;
    writeln!(out, "Name:              {}", report.type_name)?;
    writeln!(out, "Canonical:         {}", hex(report.canonical.0))?;
    if let Some(c) = report.ee_class {
        writeln!(out, "EEClass:           {}", hex(c.0))?;
    }
    match (&report.parent, &report.parent_name) {
        (Some(p), Some(n)) => writeln!(out, "Parent:            {} {n}", hex(p.0))?,
        (Some(p), None) => writeln!(out, "Parent:            {}", hex(p.0))?,
        _ => writeln!(out, "Parent:            none")?,
    }
    writeln!(out, "Module:            {}", hex(report.module.0))?;
    if let Some(f) = &report.file {
        writeln!(out, "File:              {f}")?;
    }
    writeln!(out, "Token:             {}", report.token)?;
    writeln!(out, "BaseSize:          {:#x}", report.base_size)?;
    writeln!(out, "ComponentSize:     {:#x}", report.component_size)?;
    writeln!(out, "Has GC pointers:   {}", report.contains_pointers)?;
    writeln!(out, "Methods:           {}", opt(report.num_methods))?;
    writeln!(out, "Virtual slots:     {}", opt(report.num_virtuals))?;
    writeln!(out, "Interfaces:        {}", opt(report.num_interfaces))?;
    writeln!(
        out,
        "Fields:            {} instance, {} static",
        opt(report.num_instance_fields),
        opt(report.num_static_fields)
    )?;
    out.flush()?;
    Ok(Outcome::Answered)
}
