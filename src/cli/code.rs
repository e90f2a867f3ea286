//! `cdac ip2md`, `cdac eh` and `cdac unwind`: which method owns an address, its exception
//! clauses, and how its frame unwinds.

use std::io::BufRead;

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{Addr, Method, Tier, Unanswered};
use super::tiers;
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::contracts::execution_manager::exception_clauses::ExceptionClause;
use cdac::contracts::execution_manager::{CodeBlock, ExecutionManager};
use cdac::contracts::runtime_function::{RuntimeFunction, RuntimeFunctionLayout};
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
    #[arg(required = true, value_name = "ADDR", value_parser = address_or_stdin)]
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
    #[arg(value_name = "ADDR", value_parser = parse_address)]
    address: u64,
}

/// An address argument, or `-` for standard input: checked when the command line is read,
/// so that a malformed one is a usage error.
fn address_or_stdin(text: &str) -> Result<String, String> {
    if text == "-" {
        return Ok(text.to_string());
    }
    parse_address(text).map(|_| text.to_string())
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
#[derive(Debug, Serialize, JsonSchema)]
pub struct Ip2md {
    /// The address asked about.
    pub address: Addr,
    /// The method (code version) whose code holds it.
    #[serde(flatten)]
    pub method: Method,
    /// The address's offset in the method (cold code counts after the hot size).
    pub relative_offset: u64,
    /// The method's GC info.
    pub gc_info: Option<Addr>,
    /// The GC info encoding version.
    pub gc_info_version: Option<u32>,
    /// The RUNTIME_FUNCTION covering the address.
    pub unwind_info: Option<Addr>,
    /// The method's debug info (IL offsets, variables).
    pub debug_info: Option<Addr>,
    /// The address is in a funclet (catch, finally, filter, fault).
    pub is_funclet: Option<bool>,
    /// The start of the funclet (or of the method's main body) holding the address.
    pub funclet_start: Option<Addr>,
    /// Parts that could not be read (field → reason); the rest is still reported.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub errors: std::collections::BTreeMap<String, String>,
}

/// Looks one address up; `Ok(None)` when it is not managed code. With a namer, the
/// method's name is filled in.
pub fn ip2md(
    em: &dyn ExecutionManager,
    namer: Option<&mut MethodNamer>,
    ip: u64,
) -> Result<Option<Ip2md>, ContractError> {
    let Some(b) = em.code_block(ip)? else {
        return Ok(None);
    };
    let mut errors = std::collections::BTreeMap::new();
    let mut keep = |field: &str, e: ContractError| {
        errors.insert(field.to_string(), e.to_string());
    };
    let region = em.method_region_info(&b).map_err(|e| keep("size", e)).ok();
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
    let (name, module) = match namer {
        Some(n) => (
            Some(n.name(b.method_desc)),
            n.module_of(b.method_desc).map(|m| n.module_label(m)),
        ),
        None => (None, None),
    };
    Ok(Some(Ip2md {
        address: Addr(ip),
        method: Method {
            method_desc: Addr(b.method_desc),
            name,
            module,
            start: Addr(b.start),
            size: region.map(|r| r.hot_size),
            jit_type: b.jit_type.as_str().to_string(),
            cold_start: region.and_then(|r| r.cold_start).map(Addr),
            cold_size: region.map(|r| r.cold_size),
            // Filled in for a batch of answers (`run_ip2md`).
            tier: Tier::Unknown,
            current: None,
        },
        relative_offset: b.relative_offset,
        gc_info: gc.map(|g| Addr(g.address)),
        gc_info_version: gc.map(|g| g.version),
        unwind_info: unwind.map(Addr),
        debug_info: debug.and_then(super::model::nonzero),
        is_funclet,
        funclet_start: funclet.map(Addr),
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
pub fn run_ip2md(args: &Ip2mdArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let em = rt.contracts().execution_manager()?;
    let mut namer = MethodNamer::for_runtime(&rt);
    // Every address is looked up first and the methods named in one batch: naming parses
    // each module's metadata once per batch, not once per address.
    let mut found = Vec::new();
    for text in read_addresses(&args.addresses)? {
        found.push(match parse_address(&text) {
            Err(e) => Err(Unanswered {
                address: text,
                error: e,
            }),
            Ok(ip) => match ip2md(em, None, ip) {
                Ok(Some(r)) => Ok(r),
                Ok(None) => Err(Unanswered {
                    address: hex(ip),
                    error: "not in managed code".into(),
                }),
                Err(e) => Err(Unanswered {
                    address: hex(ip),
                    error: e.to_string(),
                }),
            },
        });
    }
    let mds: Vec<u64> = found
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|r| r.method.method_desc.0)
        .collect();
    let mut names = namer.names(&mds).into_iter();
    let blocks: Vec<tiers::Block> = found
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|r| tiers::Block {
            method_desc: r.method.method_desc.0,
            start: r.method.start.0,
            ready_to_run: r.method.jit_type == "r2r",
        })
        .collect();
    let mut tiers = tiers::tiers(&rt, &mut namer, &blocks).into_iter();
    let results: Vec<Ip2mdItem> = found
        .into_iter()
        .map(|r| match r {
            Ok(mut r) => {
                match tiers.next() {
                    Some(Ok((tier, current))) => {
                        r.method.tier = tier;
                        r.method.current = current;
                    }
                    Some(Err(e)) => {
                        r.errors.insert("tier".into(), e);
                    }
                    None => {}
                }
                r.method.name = names.next();
                r.method.module = namer
                    .module_of(r.method.method_desc.0)
                    .map(|m| namer.module_label(m));
                Ip2mdItem::Found(Box::new(r))
            }
            Err(u) => Ip2mdItem::Unanswered(u),
        })
        .collect();
    let unanswered = results
        .iter()
        .filter(|r| matches!(r, Ip2mdItem::Unanswered(_)))
        .count();
    if args.json {
        super::emit_json(&results)?;
    } else {
        for r in &results {
            print_ip2md(r)?;
        }
    }
    Ok(if unanswered == 0 {
        Outcome::Answered
    } else {
        Outcome::Partial(format!(
            "{unanswered} of {} address(es) not answered",
            results.len()
        ))
    })
}

/// One answer of `ip2md`: the method, or the address with why there is none.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Ip2mdItem {
    /// The address is managed code.
    Found(Box<Ip2md>),
    /// It is not, or could not be looked up.
    Unanswered(Unanswered),
}

fn print_ip2md(item: &Ip2mdItem) -> Result<(), Box<dyn std::error::Error>> {
    let r = match item {
        Ip2mdItem::Unanswered(u) => {
            out!("{}: {}", u.address, u.error);
            return Ok(());
        }
        Ip2mdItem::Found(r) => r,
    };
    let dash = || "-".to_string();
    let opt_addr = |a: Option<Addr>| a.map(|a| hex(a.0)).unwrap_or_else(dash);
    let m = &r.method;
    out!("{}", hex(r.address.0));
    out!("  method desc     {}", hex(m.method_desc.0));
    out!("  name            {}", m.name.clone().unwrap_or_else(dash));
    out!(
        "  start           {} (+{:#x}), {}",
        hex(m.start.0),
        r.relative_offset,
        m.jit_type
    );
    let current = match m.current {
        Some(true) => "current",
        Some(false) => "not current",
        None => "current: unknown",
    };
    out!("  tier            {} ({current})", tiers::tier_name(m.tier));
    out!(
        "  hot size        {}",
        m.size.map(|s| s.to_string()).unwrap_or_else(dash)
    );
    if let Some(cold) = m.cold_start {
        out!(
            "  cold            {} ({} bytes)",
            hex(cold.0),
            m.cold_size.unwrap_or(0)
        );
    }
    out!(
        "  funclet         {} (is funclet: {})",
        opt_addr(r.funclet_start),
        r.is_funclet.map(|b| b.to_string()).unwrap_or_else(dash)
    );
    out!(
        "  gc info         {} (version {})",
        opt_addr(r.gc_info),
        r.gc_info_version
            .map(|v| v.to_string())
            .unwrap_or_else(dash)
    );
    out!("  unwind info     {}", opt_addr(r.unwind_info));
    out!("  debug info      {}", opt_addr(r.debug_info));
    for (k, e) in &r.errors {
        out!("  ({k} unavailable: {e})");
    }
    Ok(())
}

fn block_at(em: &dyn ExecutionManager, ip: u64) -> Result<CodeBlock, Box<dyn std::error::Error>> {
    em.code_block(ip)?
        .ok_or_else(|| format!("{} is not in managed code", hex(ip)).into())
}

fn open(args: &AddressArgs) -> Result<Runtime, Box<dyn std::error::Error>> {
    Ok(args.target.open(&args.descriptor)?)
}

/// One exception clause of a method.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Clause {
    /// `typed`, `finally`, `fault` or `filter`.
    pub kind: String,
    /// The raw flags.
    pub flags: u32,
    /// The JIT duplicated the clause for a nested funclet.
    pub duplicated: bool,
    /// Protected range, offsets in the method: `[try_start, try_end)`.
    pub try_start: u32,
    /// End of the protected range.
    pub try_end: u32,
    /// Handler range, offsets in the method: `[handler_start, handler_end)`.
    pub handler_start: u32,
    /// End of the handler.
    pub handler_end: u32,
    /// Filter clauses: offset of the filter funclet.
    pub filter_offset: Option<u32>,
    /// Typed clauses: the caught class's metadata token, when not resolved.
    pub class_token: Option<u32>,
    /// Typed clauses the runtime resolved: the TypeHandle.
    pub type_handle: Option<Addr>,
}

/// What `cdac eh --json` prints.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EhReport {
    /// The address asked about.
    pub address: Addr,
    /// The method's MethodDesc.
    pub method_desc: Addr,
    /// The start of the method's code.
    pub start: Addr,
    /// Its clauses, in the order the runtime searches them.
    pub clauses: Vec<Clause>,
}

/// Runs `cdac eh`.
pub fn run_eh(args: &AddressArgs) -> CliResult {
    let rt = open(args)?;
    let em = rt.contracts().execution_manager()?;
    let b = block_at(em, args.address)?;
    let clauses = em.exception_clauses(&b)?;
    if args.json {
        let report = EhReport {
            address: Addr(b.ip),
            method_desc: Addr(b.method_desc),
            start: Addr(b.start),
            clauses: clauses
                .iter()
                .map(|c| Clause {
                    kind: format!("{:?}", c.kind).to_lowercase(),
                    flags: c.flags,
                    duplicated: c.duplicated,
                    try_start: c.try_start,
                    try_end: c.try_end,
                    handler_start: c.handler_start,
                    handler_end: c.handler_end,
                    filter_offset: c.filter_offset,
                    class_token: c.class_token,
                    type_handle: c.type_handle.map(Addr),
                })
                .collect(),
        };
        super::emit_json(&report)?;
        return Ok(Outcome::Answered);
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
    Ok(Outcome::Answered)
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

/// One unwind operation of a prolog.
#[derive(Debug, Serialize, JsonSchema)]
pub struct UnwindOp {
    /// Offset in the prolog just after the instruction.
    pub code_offset: u8,
    /// What the instruction did (`push rbp`, `sub rsp, 0x28`).
    pub operation: String,
}

/// A decoded x64 UNWIND_INFO.
#[derive(Debug, Serialize, JsonSchema)]
pub struct UnwindInfo {
    /// Format version.
    pub version: u8,
    /// Flags: 1 exception handler, 2 termination handler, 4 chained.
    pub flags: u8,
    /// Bytes of prolog.
    pub prolog_size: u8,
    /// The frame pointer register, when one is set up.
    pub frame_register: Option<String>,
    /// Its scaled offset from RSP.
    pub frame_offset: u32,
    /// The operations, last prolog instruction first.
    pub codes: Vec<UnwindOp>,
}

/// What `cdac unwind --json` prints.
#[derive(Debug, Serialize, JsonSchema)]
pub struct UnwindReport {
    /// The address asked about.
    pub address: Addr,
    /// The start of the method's code.
    pub start: Addr,
    /// The RUNTIME_FUNCTION covering the address.
    pub runtime_function: Addr,
    /// The base its addresses are relative to.
    pub base: Addr,
    /// The function's first byte.
    pub begin: Addr,
    /// One past its last byte, when the RUNTIME_FUNCTION records it.
    pub end: Option<Addr>,
    /// Its UNWIND_INFO.
    pub unwind_data: Addr,
    /// The UNWIND_INFO decoded (x64 only).
    pub unwind: Option<UnwindInfo>,
    /// The unwind data decoded (arm64 only).
    pub arm64: Option<Arm64Unwind>,
}

/// Decoded arm64 unwind data: `.xdata`, or a packed word.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Arm64Unwind {
    /// `xdata`, or `packed` (the RUNTIME_FUNCTION's own word describes the frame).
    pub form: &'static str,
    /// Length of the function (or funclet, or fragment) in bytes.
    pub function_length: u64,
    /// Whether exception-handler data follows the codes.
    pub has_handler_data: bool,
    /// The prolog's instructions, in execution order, as the unwind data describes them.
    pub prolog: Vec<String>,
    /// The epilogs: where each starts and its instructions.
    pub epilogs: Vec<Arm64Epilog>,
    /// The packed word's fields (the packed form only).
    pub packed: Option<Arm64Packed>,
}

/// One arm64 epilog.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Arm64Epilog {
    /// Offset of its first instruction from the function's start.
    pub start: u64,
    /// Its instructions, the last `ret (or a tail call)`: the unwind data does not say
    /// whether the epilog returns or jumps to a tail-called method.
    pub instructions: Vec<String>,
}

/// The fields of a packed arm64 unwind word.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Arm64Packed {
    /// 1: one prolog and one epilog; 2: a fragment with neither.
    pub flag: u32,
    /// Bytes of stack the function allocates.
    pub frame_size: u64,
    /// Integer registers saved from x19.
    pub reg_i: u32,
    /// Floating-point registers saved from d8 (0: none, else `reg_f + 1`).
    pub reg_f: u32,
    /// Whether x0–x7 are stored into a home area.
    pub homes_parameters: bool,
    /// Frame chaining: 0 unchained, 1 unchained with lr saved, 3 chained.
    pub cr: u32,
}

/// What follows the first prolog "instruction" of an arm64 OSR method: the Tier0 frame
/// it runs on, which its unwind data allocates and its code does not.
pub const OSR_FRAME_NOTE: &str = " (the Tier0 frame this OSR code runs on: no instruction)";

/// What follows the first prolog instruction of a .NET 11 arm64 OSR method, which stands
/// for the Tier0 frame's allocation.
pub const OSR_RELOAD_NOTE: &str =
    " (the Tier0 frame this OSR code runs on: its frame pointer and return address reloaded)";

/// `ldp x29, x30, [x29]`: the first instruction of a .NET 11 arm64 OSR method.
const LDP_FP_LR_FROM_FP: u32 = 0xa940_7bbd;

/// Whether `b` is the code of an on-stack-replacement version of its method.
fn is_osr(rt: &Runtime, b: &CodeBlock) -> bool {
    let mut namer = MethodNamer::for_runtime(rt);
    let block = tiers::Block {
        method_desc: b.method_desc,
        start: b.start,
        ready_to_run: b.jit_type.as_str() == "r2r",
    };
    matches!(
        tiers::tiers(rt, &mut namer, &[block]).first(),
        Some(Ok((Tier::OptimizedTier1Osr, _)))
    )
}

/// Decodes the arm64 unwind data of a `RUNTIME_FUNCTION` whose unwind word is `word`.
fn arm64_unwind(
    t: &cdac::memory::Target,
    base: u64,
    word: u32,
) -> Result<Arm64Unwind, Box<dyn std::error::Error>> {
    use cdac::unwind::aarch64::packed::PackedUnwind;
    use cdac::unwind::aarch64::unwind_data::{self, packed_flag, Arm64UnwindData};
    if packed_flag(word) != 0 {
        let p = PackedUnwind::decode(word)?;
        let mut prolog: Vec<String> = p
            .operations(false)
            .into_iter()
            .map(|o| o.instruction)
            .collect();
        prolog.reverse();
        if p.cr == 3 {
            prolog.push("mov x29, sp".to_string());
        }
        let epilogs = if p.flag == 1 {
            let mut instructions: Vec<String> = p
                .operations(true)
                .iter()
                .map(|o| o.epilog_instruction())
                .collect();
            instructions.push(unwind_data::EPILOG_END.to_string());
            vec![Arm64Epilog {
                start: p
                    .function_length
                    .saturating_sub(4 * instructions.len() as u64),
                instructions,
            }]
        } else {
            Vec::new()
        };
        return Ok(Arm64Unwind {
            form: "packed",
            function_length: p.function_length,
            has_handler_data: false,
            prolog,
            epilogs,
            packed: Some(Arm64Packed {
                flag: p.flag,
                frame_size: p.frame_size,
                reg_i: p.reg_i,
                reg_f: p.reg_f,
                homes_parameters: p.homes_parameters,
                cr: p.cr,
            }),
        });
    }
    let d = Arm64UnwindData::read(t, base.wrapping_add(u64::from(word)))?;
    Ok(Arm64Unwind {
        form: "xdata",
        function_length: d.function_length,
        has_handler_data: d.has_handler_data,
        prolog: d.prolog_text(),
        epilogs: d
            .epilogs
            .iter()
            .map(|e| Arm64Epilog {
                start: e.start,
                instructions: d.epilog_text(e.code_index),
            })
            .collect(),
        packed: None,
    })
}

/// Runs `cdac unwind`.
pub fn run_unwind(args: &AddressArgs) -> CliResult {
    let rt = open(args)?;
    let em = rt.contracts().execution_manager()?;
    let b = block_at(em, args.address)?;
    let rf = em
        .unwind_info(&b)?
        .ok_or_else(|| format!("no unwind info covers {}", hex(b.ip)))?;
    let base = em.unwind_info_base_address(&b);
    let t = rt.target();
    let d = rt.descriptor();
    let entry = RuntimeFunction::read(t, &RuntimeFunctionLayout::from_descriptor(d)?, rf)?;
    let begin = u64::from(entry.begin);
    let end = entry.end.map(u64::from);
    let unwind = u64::from(entry.unwind_data);
    let architecture = d.global_string("Architecture")?;
    let decoded = match architecture {
        "x64" => Some(unwind_codes::decode_amd64(t, base.wrapping_add(unwind))?),
        _ => None,
    };
    let arm64 = match architecture {
        "arm64" => {
            let mut a = arm64_unwind(t, base, entry.unwind_data)?;
            // An OSR method runs on the frame of the Tier0 code it replaced, and its first
            // unwind code allocates that frame: no instruction of its own before .NET 11;
            // .NET 11 puts there the reload of the Tier0 frame's FP and LR.
            if base.wrapping_add(begin) == b.start && is_osr(&rt, &b) {
                let reloads = t.read_u32(b.start).ok() == Some(LDP_FP_LR_FROM_FP);
                if let Some(first) = a.prolog.first_mut() {
                    if reloads {
                        *first = format!("ldp x29, x30, [x29]{OSR_RELOAD_NOTE}");
                    } else {
                        first.push_str(OSR_FRAME_NOTE);
                    }
                }
            }
            Some(a)
        }
        _ => None,
    };
    if args.json {
        let report = UnwindReport {
            address: Addr(b.ip),
            start: Addr(b.start),
            runtime_function: Addr(rf),
            base: Addr(base),
            begin: Addr(base.wrapping_add(begin)),
            end: end.map(|e| Addr(base.wrapping_add(e))),
            unwind_data: Addr(base.wrapping_add(unwind)),
            unwind: decoded.as_ref().map(|u| UnwindInfo {
                version: u.version,
                flags: u.flags,
                prolog_size: u.prolog_size,
                frame_register: u.frame_register.map(str::to_string),
                frame_offset: u.frame_offset,
                codes: u
                    .codes
                    .iter()
                    .map(|c| UnwindOp {
                        code_offset: c.code_offset,
                        operation: c.operation.clone(),
                    })
                    .collect(),
            }),
            arm64,
        };
        super::emit_json(&report)?;
        return Ok(Outcome::Answered);
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
    if let Some(a) = arm64 {
        out!(
            "  {} unwind data, function {:#x} bytes{}",
            a.form,
            a.function_length,
            if a.has_handler_data {
                ", exception handler data"
            } else {
                ""
            }
        );
        if let Some(p) = &a.packed {
            out!(
                "  flag {}, frame {} bytes, x19 + {} registers, d8 + {} registers, CR {}{}",
                p.flag,
                p.frame_size,
                p.reg_i,
                if p.reg_f == 0 { 0 } else { p.reg_f + 1 },
                p.cr,
                if p.homes_parameters {
                    ", parameters homed"
                } else {
                    ""
                }
            );
        }
        let own = a
            .prolog
            .iter()
            .filter(|t| !t.ends_with(OSR_FRAME_NOTE))
            .count();
        out!("  prolog ({own} instruction(s) from begin):");
        let mut offset = 0;
        for text in &a.prolog {
            if text.ends_with(OSR_FRAME_NOTE) {
                out!("    (none)  {text}");
                continue;
            }
            out!("    +{offset:#04x}  {text}");
            offset += 4;
        }
        for e in &a.epilogs {
            out!("  epilog at +{:#x}:", e.start);
            for (k, text) in e.instructions.iter().enumerate() {
                out!("    +{:#04x}  {text}", e.start + 4 * k as u64);
            }
        }
    }
    Ok(Outcome::Answered)
}
