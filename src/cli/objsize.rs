//! `cdac objsize ADDR` (like SOS `objsize`): what an object keeps alive: every object
//! reachable from it through references (itself included), counted and sized per type.

use std::collections::BTreeMap;
use std::io::Write;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::code::parse_address;
use super::model::Addr;
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::roots::Marker;

/// Arguments of `cdac objsize`.
#[derive(Debug, Args)]
pub struct ObjSizeArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// The object's address.
    #[arg(value_name = "ADDR", value_parser = parse_address)]
    address: u64,
    /// Also list every object reached (address, MethodTable, size).
    #[arg(long)]
    objects: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `cdac objsize --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ObjSizeReport {
    /// The object.
    pub address: Addr,
    /// Its type.
    pub type_name: String,
    /// Objects reachable from it, itself included (what it keeps alive as far as it is
    /// concerned; others may hold some of them too).
    pub objects: u64,
    /// Their total size in bytes.
    pub total_size: u64,
    /// Per type, smallest total size first.
    pub types: Vec<ObjSizeType>,
    /// Every object reached, in the order reached (`--objects`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_list: Option<Vec<ObjSizeObject>>,
    /// Objects whose references could not be read (their sizes are counted, what they
    /// refer to is not).
    pub unreadable: u64,
    /// References that point outside the GC heap (not followed).
    pub outside_heap: u64,
}

/// Objects of one type.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ObjSizeType {
    /// The MethodTable.
    pub method_table: Addr,
    /// Its type.
    pub type_name: String,
    /// Objects.
    pub count: u64,
    /// Their total size in bytes.
    pub total_size: u64,
}

/// One object reached.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ObjSizeObject {
    /// The object.
    pub address: Addr,
    /// Its MethodTable.
    pub method_table: Addr,
    /// Its size in bytes.
    pub size: u64,
}

/// Runs `cdac objsize`.
pub fn run_objsize(args: &ObjSizeArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    if let Some(why) = super::obj::not_an_object(&rt, args.address) {
        return Err(why.into());
    }
    let mut marker = Marker::from_objects(&rt, &[args.address])?;
    let mut by_type: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut list = Vec::new();
    let summary = marker.mark_all_visiting(|object, method_table, size| {
        let e = by_type.entry(method_table).or_default();
        e.0 += 1;
        e.1 += size;
        if args.objects {
            list.push(ObjSizeObject {
                address: Addr(object),
                method_table: Addr(method_table),
                size,
            });
        }
    });
    let mut namer = cdac::names::MethodNamer::for_runtime(&rt);
    let mut name = |mt: u64| {
        namer
            .type_name(mt)
            .unwrap_or_else(|| format!("<MethodTable {mt:#x}>"))
    };
    let own_type = marker
        .method_table_of(args.address)
        .map_or_else(|| "<unreadable>".to_string(), &mut name);
    let mut types: Vec<ObjSizeType> = by_type
        .iter()
        .map(|(&mt, &(count, total_size))| ObjSizeType {
            method_table: Addr(mt),
            type_name: name(mt),
            count,
            total_size,
        })
        .collect();
    types.sort_by_key(|t| (t.total_size, t.method_table.0));
    let report = ObjSizeReport {
        address: Addr(args.address),
        type_name: own_type,
        objects: types.iter().map(|t| t.count).sum(),
        total_size: types.iter().map(|t| t.total_size).sum(),
        types,
        object_list: args.objects.then_some(list),
        unreadable: summary.unreadable,
        outside_heap: summary.outside,
    };
    let outcome = if report.unreadable == 0 {
        Outcome::Answered
    } else {
        Outcome::Partial(format!(
            "the references of {} object(s) could not be read: what they keep alive is not counted",
            report.unreadable
        ))
    };
    if args.json {
        super::emit_json(&report)?;
        return Ok(outcome);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if let Some(list) = &report.object_list {
        writeln!(out, "{:>18} {:>18} {:>10}", "Address", "MT", "Size")?;
        for o in list {
            writeln!(
                out,
                "{:>18} {:>18} {:>10}",
                hex(o.address.0),
                hex(o.method_table.0),
                o.size
            )?;
        }
        writeln!(out)?;
    }
    writeln!(out, "{:>18} {:>10} {:>12} Type", "MT", "Count", "TotalSize")?;
    for t in &report.types {
        writeln!(
            out,
            "{:>18} {:>10} {:>12} {}",
            hex(t.method_table.0),
            t.count,
            t.total_size,
            t.type_name
        )?;
    }
    writeln!(
        out,
        "{} ({}) keeps {} object(s) alive, {} bytes",
        hex(args.address),
        report.type_name,
        report.objects,
        report.total_size
    )?;
    out.flush()?;
    Ok(outcome)
}
