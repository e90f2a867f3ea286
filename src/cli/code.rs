//! `cdac ip2md`, `cdac eh` and `cdac unwind`: which method owns an address, its exception
//! clauses, and how its frame unwinds.

use std::io::BufRead;

use clap::Args;
use serde::Serialize;
use serde_json::{json, Value};

use super::{hex, DescriptorArgs, TargetArgs};
use cdac::contracts::execution_manager::exception_clauses::ExceptionClause;
use cdac::contracts::execution_manager::{execution_manager, CodeBlock, ExecutionManager};
use cdac::contracts::{unwind_codes, ContractError};
use cdac::names::MethodNamer;
use cdac::runtime::Runtime;

/// Arguments of `cdac ip2md`.
#[derive(Debug, Args)]
pub struct Ip2mdArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print a JSON array, one object per address.
    #[arg(long)]
    json: bool,
    /// Code addresses (hex, with or without 0x); `-` reads them from standard input, one
    /// per line.
    #[arg(required = true, value_name = "ADDR")]
    addresses: Vec<String>,
}

/// Arguments of `cdac eh` and `cdac unwind`.
#[derive(Debug, Args)]
pub struct AddressArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// A code address in the method (hex).
    #[arg(value_name = "ADDR")]
    address: String,
}

/// Parses an address: hex, with or without `0x`.
pub fn parse_address(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    u64::from_str_radix(digits, 16).map_err(|_| format!("not a hex address: {t:?}"))
}

/// Everything `ip2md` reports for one address that is managed code.
#[derive(Debug, Serialize)]
pub struct Ip2md {
    pub address: String,
    pub method_desc: String,
    /// The method's name as the runtime's perf map writes it (tier suffix aside).
    pub name: Option<String>,
    pub start: String,
    pub relative_offset: u64,
    pub jit_type: &'static str,
    pub hot_size: Option<u64>,
    pub cold_start: Option<String>,
    pub cold_size: Option<u64>,
    pub gc_info: Option<String>,
    pub gc_info_version: Option<u32>,
    pub unwind_info: Option<String>,
    pub debug_info: Option<String>,
    pub is_funclet: Option<bool>,
    pub funclet_start: Option<String>,
    /// Parts that could not be read (field → reason); the rest is still reported.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub errors: serde_json::Map<String, Value>,
}

/// Looks one address up; `Ok(None)` when it is not managed code. With a namer, the
/// method's name is filled in.
pub fn ip2md(
    em: &dyn ExecutionManager,
    namer: Option<&mut MethodNamer<'_>>,
    ip: u64,
) -> Result<Option<Ip2md>, ContractError> {
    let Some(b) = em.code_block(ip)? else {
        return Ok(None);
    };
    let mut errors = serde_json::Map::new();
    let mut keep = |field: &str, e: ContractError| {
        errors.insert(field.to_string(), Value::String(e.to_string()));
    };
    let region = em
        .method_region_info(&b)
        .map_err(|e| keep("hot_size", e))
        .ok();
    let gc = em.gc_info(&b).map_err(|e| keep("gc_info", e)).ok();
    let unwind = em
        .unwind_info(&b)
        .map_err(|e| keep("unwind_info", e))
        .ok()
        .flatten();
    // The pointer stands even when whether its blob has a flag byte cannot be told.
    let debug = em
        .debug_info(&b)
        .map_err(|e| keep("debug_info", e))
        .ok()
        .map(|d| {
            if let Err(e) = d.has_flag_byte {
                keep("debug_info_flag_byte", e);
            }
            d.address
        });
    let funclet = em
        .funclet_start(&b)
        .map_err(|e| keep("funclet_start", e))
        .ok();
    // The ExecutionManager's IsFunclet, from the start already found.
    let is_funclet = funclet.map(|f| f != b.start);
    Ok(Some(Ip2md {
        address: hex(ip),
        method_desc: hex(b.method_desc),
        name: namer.map(|n| n.name(b.method_desc)),
        start: hex(b.start),
        relative_offset: b.relative_offset,
        jit_type: b.jit_type.as_str(),
        hot_size: region.map(|r| r.hot_size),
        cold_start: region.and_then(|r| r.cold_start).map(hex),
        cold_size: region.map(|r| r.cold_size),
        gc_info: gc.map(|g| hex(g.address)),
        gc_info_version: gc.map(|g| g.version),
        unwind_info: unwind.map(hex),
        debug_info: debug.map(hex),
        is_funclet,
        funclet_start: funclet.map(hex),
        errors,
    }))
}

fn read_addresses(args: &[String]) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for a in args {
        if a == "-" {
            for line in std::io::stdin().lock().lines() {
                let line = line?;
                if !line.trim().is_empty() {
                    out.push(line.trim().to_string());
                }
            }
        } else {
            out.push(a.clone());
        }
    }
    Ok(out)
}

/// Runs `cdac ip2md`.
pub fn run_ip2md(args: &Ip2mdArgs) -> Result<(), Box<dyn std::error::Error>> {
    let rt = args.target.open(&args.descriptor)?;
    let em = execution_manager(rt.target(), rt.descriptor())?;
    let mut namer = MethodNamer::for_runtime(&rt);
    // Every address is looked up first and the methods named in one batch: naming parses
    // each module's metadata once per batch, not once per address.
    let mut found = Vec::new();
    for text in read_addresses(&args.addresses)? {
        found.push(match parse_address(&text) {
            Err(e) => Err(json!({ "address": text, "error": e })),
            Ok(ip) => match ip2md(&*em, None, ip) {
                Ok(Some(r)) => Ok(r),
                Ok(None) => Err(json!({ "address": hex(ip), "error": "not in managed code" })),
                Err(e) => Err(json!({ "address": hex(ip), "error": e.to_string() })),
            },
        });
    }
    let mds: Vec<u64> = found
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter_map(|r| parse_address(&r.method_desc).ok())
        .collect();
    let mut names = namer.names(&mds).into_iter();
    let results: Vec<Ip2mdItem> = found
        .into_iter()
        .map(|r| match r {
            Ok(mut r) => {
                r.name = names.next();
                Ip2mdItem::Found(Box::new(r))
            }
            Err(v) => Ip2mdItem::Missing(v),
        })
        .collect();
    if args.json {
        // Straight to standard output: 10,000 answers are megabytes of JSON.
        let mut w = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer_pretty(&mut w, &results).map_err(std::io::Error::from)?;
        std::io::Write::write_all(&mut w, b"\n")?;
        std::io::Write::flush(&mut w)?;
        return Ok(());
    }
    for r in &results {
        print_ip2md(&serde_json::to_value(r)?)?;
    }
    Ok(())
}

/// One answer of `ip2md`: the method, or the address with why there is none.
#[derive(Serialize)]
#[serde(untagged)]
enum Ip2mdItem {
    Found(Box<Ip2md>),
    Missing(Value),
}

fn print_ip2md(v: &Value) -> Result<(), Box<dyn std::error::Error>> {
    let s = |k: &str| match &v[k] {
        Value::Null => "-".to_string(),
        Value::String(t) => t.clone(),
        other => other.to_string(),
    };
    if let Some(e) = v.get("error") {
        out!("{}: {}", s("address"), e.as_str().unwrap_or_default());
        return Ok(());
    }
    out!("{}", s("address"));
    out!("  method desc     {}", s("method_desc"));
    out!("  name            {}", s("name"));
    out!(
        "  start           {} (+{:#x}), {}",
        s("start"),
        v["relative_offset"].as_u64().unwrap_or(0),
        s("jit_type")
    );
    out!("  hot size        {}", s("hot_size"));
    if !v["cold_start"].is_null() {
        out!(
            "  cold            {} ({} bytes)",
            s("cold_start"),
            s("cold_size")
        );
    }
    out!(
        "  funclet         {} (is funclet: {})",
        s("funclet_start"),
        s("is_funclet")
    );
    out!(
        "  gc info         {} (version {})",
        s("gc_info"),
        s("gc_info_version")
    );
    out!("  unwind info     {}", s("unwind_info"));
    out!("  debug info      {}", s("debug_info"));
    if let Some(Value::Object(errors)) = v.get("errors") {
        for (k, e) in errors {
            out!("  ({k} unavailable: {})", e.as_str().unwrap_or_default());
        }
    }
    Ok(())
}

fn block_at(
    em: &dyn ExecutionManager,
    text: &str,
) -> Result<CodeBlock, Box<dyn std::error::Error>> {
    let ip = parse_address(text)?;
    em.code_block(ip)?
        .ok_or_else(|| format!("{} is not in managed code", hex(ip)).into())
}

fn open(args: &AddressArgs) -> Result<Runtime, Box<dyn std::error::Error>> {
    Ok(args.target.open(&args.descriptor)?)
}

/// Runs `cdac eh`.
pub fn run_eh(args: &AddressArgs) -> Result<(), Box<dyn std::error::Error>> {
    let rt = open(args)?;
    let em = execution_manager(rt.target(), rt.descriptor())?;
    let b = block_at(&*em, &args.address)?;
    let clauses = em.exception_clauses(&b)?;
    if args.json {
        let out = json!({
            "address": hex(b.ip),
            "method_desc": hex(b.method_desc),
            "start": hex(b.start),
            "clauses": clauses,
        });
        out!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    out!(
        "method desc {} starting at {}: {} clause(s)",
        hex(b.method_desc),
        hex(b.start),
        clauses.len()
    );
    for (i, c) in clauses.iter().enumerate() {
        print_clause(i, c, b.start)?;
    }
    Ok(())
}

fn print_clause(
    i: usize,
    c: &ExceptionClause,
    start: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let kind = format!("{:?}", c.kind).to_uppercase();
    let extra = match (c.filter_offset, c.class_token, c.type_handle) {
        (Some(f), _, _) => format!(
            " filter at +{f:#x} ({})",
            hex(start.wrapping_add(u64::from(f)))
        ),
        (_, Some(t), _) => format!(" class token {t:#010x}"),
        (_, _, Some(th)) => format!(" type handle {}", hex(th)),
        _ => String::new(),
    };
    out!(
        "  [{i}] {kind:<7}{} try [+{:#x}, +{:#x}) handler [+{:#x}, +{:#x}){extra}",
        if c.duplicated { " (duplicated)" } else { "" },
        c.try_start,
        c.try_end,
        c.handler_start,
        c.handler_end
    );
    Ok(())
}

/// Runs `cdac unwind`.
pub fn run_unwind(args: &AddressArgs) -> Result<(), Box<dyn std::error::Error>> {
    let rt = open(args)?;
    let em = execution_manager(rt.target(), rt.descriptor())?;
    let b = block_at(&*em, &args.address)?;
    let rf = em
        .unwind_info(&b)?
        .ok_or_else(|| format!("no unwind info covers {}", hex(b.ip)))?;
    let base = em.unwind_info_base_address(&b);
    let t = rt.target();
    let d = rt.descriptor();
    let ty = d.ty("RuntimeFunction")?;
    let begin = u64::from(t.read_u32(rf.wrapping_add(ty.offset("BeginAddress")?))?);
    let end = match ty.has_field("EndAddress") {
        true => Some(u64::from(
            t.read_u32(rf.wrapping_add(ty.offset("EndAddress")?))?,
        )),
        false => None,
    };
    let unwind = u64::from(t.read_u32(rf.wrapping_add(ty.offset("UnwindData")?))?);
    let decoded = match d.global_string("Architecture")? {
        "x64" => Some(unwind_codes::decode_amd64(t, base.wrapping_add(unwind))?),
        _ => None,
    };
    if args.json {
        let out = json!({
            "address": hex(b.ip),
            "start": hex(b.start),
            "runtime_function": hex(rf),
            "base": hex(base),
            "begin": hex(base.wrapping_add(begin)),
            "end": end.map(|e| hex(base.wrapping_add(e))),
            "unwind_data": hex(base.wrapping_add(unwind)),
            "unwind": decoded,
        });
        out!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    out!(
        "method at {} (method desc {})",
        hex(b.start),
        hex(b.method_desc)
    );
    out!(
        "  RUNTIME_FUNCTION at {}: begin {}{}, unwind data {} (relative to {})",
        hex(rf),
        hex(base.wrapping_add(begin)),
        end.map(|e| format!(", end {}", hex(base.wrapping_add(e))))
            .unwrap_or_default(),
        hex(base.wrapping_add(unwind)),
        hex(base)
    );
    if let Some(u) = decoded {
        out!(
            "  version {}, flags {:#x}, prolog {} bytes, frame register {}",
            u.version,
            u.flags,
            u.prolog_size,
            u.frame_register.map_or("none".to_string(), |r| format!(
                "{r} (rsp+{:#x})",
                u.frame_offset
            ))
        );
        for op in &u.codes {
            out!("    +{:#04x}  {}", op.code_offset, op.operation);
        }
    }
    Ok(())
}
