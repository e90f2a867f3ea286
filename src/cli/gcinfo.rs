//! `cdac gcinfo ADDR`: a method's GC info decoded — the header, the interruptible ranges,
//! the slot table, and which slots are live at each safe point and wherever the live set
//! changes in fully interruptible code (like SOS `gcinfo`).

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::code::parse_address;
use super::model::{Addr, Unanswered};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::contracts::code_versions::CodeVersions;
use cdac::contracts::execution_manager::{CodeBlock, ExecutionManager};
use cdac::contracts::gc_info::{self, GcInfo, GcInfoArch, SlotLocation, StackBase};
use cdac::names::MethodNamer;
use cdac::runtime::Runtime;

/// Arguments of `cdac gcinfo`.
#[derive(Debug, Args)]
pub struct GcInfoArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print a JSON array, one object per address.
    #[arg(long)]
    json: bool,
    /// Code addresses in methods, or MethodDescs (their current code is shown); hex.
    #[arg(required = true, value_name = "ADDR", value_parser = parse_address)]
    addresses: Vec<u64>,
}

/// One answer of `gcinfo`: the method's GC info, or the address with why there is none.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum GcInfoItem {
    /// The GC info of the method at (or of) the address.
    Found(Box<GcInfoReport>),
    /// The address is neither code nor a MethodDesc with code, or its GC info could not
    /// be decoded.
    Unanswered(Unanswered),
}

/// The header fields `cdac gcinfo` shows.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GcInfoHeaderReport {
    /// A slim header (no optional fields).
    pub slim: bool,
    /// The raw header flags.
    pub flags: u32,
    /// The return kind (versions 2 and 3).
    pub return_kind: Option<u32>,
    /// Bytes of code described.
    pub code_length: u32,
    /// Prolog size in bytes, when recorded.
    pub prolog_size: Option<u32>,
    /// Epilog size in bytes, when recorded.
    pub epilog_size: Option<u32>,
    /// GS cookie stack slot (caller-SP relative).
    pub gs_cookie_stack_slot: Option<i32>,
    /// PSPSym stack slot (versions 2 and 3).
    pub psp_sym_stack_slot: Option<i32>,
    /// Generics context stack slot (caller-SP relative).
    pub generics_inst_context_stack_slot: Option<i32>,
    /// Where the generics context comes from: `methodtable`, `methoddesc` or `this`.
    pub generics_inst_context: Option<String>,
    /// The stack base register, by name.
    pub stack_base_register: Option<String>,
    /// Reverse P/Invoke frame stack slot.
    pub reverse_pinvoke_frame_stack_slot: Option<i32>,
    /// Size of the outgoing argument and scratch area in bytes.
    pub size_of_stack_outgoing_and_scratch_area: Option<u32>,
    /// The method takes variable arguments.
    pub is_vararg: bool,
    /// x64: only the leaf frame of the method is reported (funclet parents are not).
    pub wants_report_only_leaf: bool,
    /// Number of safe points.
    pub num_safe_points: u32,
    /// Number of interruptible ranges.
    pub num_interruptible_ranges: u32,
}

/// One interruptible range, `[start, end)` in code offsets.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RangeReport {
    /// First interruptible offset.
    pub start: u32,
    /// First offset past the range.
    pub end: u32,
}

/// One entry of the slot table.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SlotReport {
    /// Index in the table.
    pub index: usize,
    /// How it is written: a register (`rbx`) or a stack slot (`rbp-0x30`, `sp+0x8`,
    /// `caller.sp-0x10`).
    pub name: String,
    /// The register number, for a register.
    pub register: Option<u32>,
    /// `caller_sp`, `sp` or `frame_register`, for a stack slot.
    pub base: Option<String>,
    /// Offset from the base in bytes, for a stack slot.
    pub offset: Option<i32>,
    /// Holds an interior pointer.
    pub interior: bool,
    /// Its object is pinned.
    pub pinned: bool,
    /// Live throughout the method.
    pub untracked: bool,
}

/// The tracked slots live at one code offset.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LiveAt {
    /// The code offset: for a safe point, the return address of its call.
    pub offset: u32,
    /// Indices of the live tracked slots (scratch ones included, untracked ones left out).
    pub live: Vec<usize>,
}

/// What `cdac gcinfo --json` prints.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GcInfoReport {
    /// The address asked about.
    pub address: Addr,
    /// The method's MethodDesc.
    pub method_desc: Addr,
    /// The method's name, when it could be read.
    pub name: Option<String>,
    /// The start of the method's code.
    pub start: Addr,
    /// `jit` or `r2r`.
    pub jit_type: String,
    /// Where the GC info is.
    pub gc_info: Addr,
    /// Its encoding version.
    pub version: u32,
    /// The header.
    pub header: GcInfoHeaderReport,
    /// The fully interruptible ranges.
    pub interruptible_ranges: Vec<RangeReport>,
    /// The slot table: registers, tracked stack slots, untracked slots.
    pub slots: Vec<SlotReport>,
    /// The live tracked slots at each safe point.
    pub safe_points: Vec<LiveAt>,
    /// In fully interruptible ranges, the live tracked slots at each offset where they
    /// change (every range's start included).
    pub interruptible_states: Vec<LiveAt>,
}

/// Runs `cdac gcinfo`.
pub fn run_gcinfo(args: &GcInfoArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let em = rt.contracts().execution_manager()?;
    let arch = GcInfoArch::from_name(rt.descriptor().global_string("Architecture")?)?;
    let mut namer = MethodNamer::for_runtime(&rt);
    let mut items = Vec::with_capacity(args.addresses.len());
    for &address in &args.addresses {
        items.push(match report(&rt, em, arch, &mut namer, address) {
            Ok(r) => GcInfoItem::Found(Box::new(r)),
            Err(e) => GcInfoItem::Unanswered(Unanswered {
                address: hex(address),
                error: e.to_string(),
            }),
        });
    }
    let unanswered = items
        .iter()
        .filter(|i| matches!(i, GcInfoItem::Unanswered(_)))
        .count();
    if args.json {
        super::emit_json(&items)?;
    } else {
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out!("");
            }
            match item {
                GcInfoItem::Found(r) => print_report(r)?,
                GcInfoItem::Unanswered(u) => out!("{}: {}", u.address, u.error),
            }
        }
    }
    Ok(if unanswered == 0 {
        Outcome::Answered
    } else {
        Outcome::Partial(format!(
            "{unanswered} of {} address(es) not answered",
            items.len()
        ))
    })
}

/// The report for one address.
fn report(
    rt: &Runtime,
    em: &dyn ExecutionManager,
    arch: GcInfoArch,
    namer: &mut MethodNamer,
    address: u64,
) -> Result<GcInfoReport, Box<dyn std::error::Error>> {
    let block = find_block(rt, em, address)?;
    let gc = em.gc_info(&block)?;
    let info = gc_info::decode(rt.target(), gc.address, gc.version, arch)?;
    Ok(GcInfoReport {
        address: Addr(address),
        method_desc: Addr(block.method_desc),
        name: Some(namer.name(block.method_desc)),
        start: Addr(block.start),
        jit_type: block.jit_type.as_str().to_string(),
        gc_info: Addr(gc.address),
        version: gc.version,
        header: header_report(&info),
        interruptible_ranges: info
            .interruptible_ranges
            .iter()
            .map(|&(start, end)| RangeReport { start, end })
            .collect(),
        slots: slot_reports(&info),
        safe_points: safe_point_states(rt, &info)?,
        interruptible_states: interruptible_states(rt, &info)?,
    })
}

/// The code block at `addr`, or, when `addr` is not code, the current code of the
/// MethodDesc at `addr`.
fn find_block(
    rt: &Runtime,
    em: &dyn ExecutionManager,
    addr: u64,
) -> Result<CodeBlock, Box<dyn std::error::Error>> {
    if let Some(b) = em.code_block(addr)? {
        return Ok(b);
    }
    let not_found = || {
        format!(
            "{} is neither managed code nor a MethodDesc with code",
            hex(addr)
        )
    };
    let mut cv = CodeVersions::new(rt.target(), rt.descriptor())?;
    let versions = cv
        .versions(addr, None, &|_| false)
        .map_err(|_| not_found())?;
    let code = versions
        .versions
        .iter()
        .find(|v| v.current == Some(true) && v.code.is_some())
        .or_else(|| versions.versions.iter().find(|v| v.code.is_some()))
        .and_then(|v| v.code)
        .ok_or_else(not_found)?;
    let block = em.code_block(code)?.ok_or_else(not_found)?;
    if block.method_desc != addr {
        return Err(not_found().into());
    }
    Ok(block)
}

fn header_report(info: &GcInfo) -> GcInfoHeaderReport {
    let h = &info.header;
    let generics = match h.generics_inst_context() {
        gc_info::header::flags::GENERICS_INST_CONTEXT_MT => Some("methodtable"),
        gc_info::header::flags::GENERICS_INST_CONTEXT_MD => Some("methoddesc"),
        gc_info::header::flags::GENERICS_INST_CONTEXT_THIS => Some("this"),
        _ => None,
    };
    GcInfoHeaderReport {
        slim: h.slim,
        flags: h.flags,
        return_kind: h.return_kind,
        code_length: h.code_length,
        prolog_size: h.prolog_size,
        epilog_size: h.epilog_size,
        gs_cookie_stack_slot: h.gs_cookie_stack_slot,
        psp_sym_stack_slot: h.psp_sym_stack_slot,
        generics_inst_context_stack_slot: h.generics_inst_context_stack_slot,
        generics_inst_context: generics.map(str::to_string),
        stack_base_register: h.stack_base_register.map(|r| h.arch.register_name(r)),
        reverse_pinvoke_frame_stack_slot: h.reverse_pinvoke_frame_stack_slot,
        size_of_stack_outgoing_and_scratch_area: h.size_of_stack_outgoing_and_scratch_area,
        is_vararg: h.is_vararg(),
        wants_report_only_leaf: gc_info::wants_report_only_leaf(info),
        num_safe_points: h.num_safe_points,
        num_interruptible_ranges: h.num_interruptible_ranges,
    }
}

fn slot_reports(info: &GcInfo) -> Vec<SlotReport> {
    info.slots
        .iter()
        .enumerate()
        .map(|(index, s)| {
            let (register, base, offset) = match s.location {
                SlotLocation::Register(r) => (Some(r), None, None),
                SlotLocation::Stack { base, offset } => {
                    let b = match base {
                        StackBase::CallerSp => "caller_sp",
                        StackBase::Sp => "sp",
                        StackBase::FrameRegister => "frame_register",
                    };
                    (None, Some(b.to_string()), Some(offset))
                }
            };
            SlotReport {
                index,
                name: cdac::stacks::roots::slot_name(info, &s.location),
                register,
                base,
                offset,
                interior: s.is_interior(),
                pinned: s.is_pinned(),
                untracked: s.untracked,
            }
        })
        .collect()
}

fn safe_point_states(
    rt: &Runtime,
    info: &GcInfo,
) -> Result<Vec<LiveAt>, Box<dyn std::error::Error>> {
    let mut out = Vec::with_capacity(info.safe_points.len());
    for &offset in &info.safe_points {
        let live = info
            .tracked_live_at(rt.target(), offset, false)?
            .unwrap_or_default();
        out.push(LiveAt { offset, live });
    }
    Ok(out)
}

fn interruptible_states(
    rt: &Runtime,
    info: &GcInfo,
) -> Result<Vec<LiveAt>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for &(start, end) in &info.interruptible_ranges {
        let mut last: Option<Vec<usize>> = None;
        for offset in start..end {
            // A safe point inside a range is looked up as a safe point; the range's own
            // state there is the aborted-frame view.
            let live = info
                .tracked_live_at(rt.target(), offset, true)?
                .unwrap_or_default();
            if last.as_ref() != Some(&live) {
                out.push(LiveAt {
                    offset,
                    live: live.clone(),
                });
                last = Some(live);
            }
        }
    }
    Ok(out)
}

fn print_report(r: &GcInfoReport) -> Result<(), Box<dyn std::error::Error>> {
    let h = &r.header;
    let dash = || "-".to_string();
    let slot = |s: Option<i32>| {
        s.map(|o| {
            let sign = if o < 0 { '-' } else { '+' };
            format!("caller.sp{sign}{:#x}", o.unsigned_abs())
        })
        .unwrap_or_else(dash)
    };
    out!(
        "{} (method desc {}), {} code at {}",
        r.name.clone().unwrap_or_else(dash),
        hex(r.method_desc.0),
        r.jit_type,
        hex(r.start.0)
    );
    out!("GC info {} (version {})", hex(r.gc_info.0), r.version);
    out!(
        "  header          {}, flags {:#x}, code length {:#x}",
        if h.slim { "slim" } else { "fat" },
        h.flags,
        h.code_length
    );
    if let Some(k) = h.return_kind {
        out!("  return kind     {k}");
    }
    out!(
        "  prolog/epilog   {} / {}",
        h.prolog_size
            .map(|s| format!("{s:#x}"))
            .unwrap_or_else(dash),
        h.epilog_size
            .map(|s| format!("{s:#x}"))
            .unwrap_or_else(dash)
    );
    out!("  GS cookie       {}", slot(h.gs_cookie_stack_slot));
    if h.psp_sym_stack_slot.is_some() {
        out!("  PSPSym          {}", slot(h.psp_sym_stack_slot));
    }
    out!(
        "  generics ctx    {}{}",
        slot(h.generics_inst_context_stack_slot),
        h.generics_inst_context
            .as_ref()
            .map(|k| format!(" ({k})"))
            .unwrap_or_default()
    );
    out!(
        "  frame register  {}",
        h.stack_base_register.clone().unwrap_or_else(dash)
    );
    if h.reverse_pinvoke_frame_stack_slot.is_some() {
        out!(
            "  reverse P/Invoke frame {}",
            slot(h.reverse_pinvoke_frame_stack_slot)
        );
    }
    out!(
        "  outgoing area   {:#x}",
        h.size_of_stack_outgoing_and_scratch_area.unwrap_or(0)
    );
    out!(
        "  vararg {}, wants report only leaf {}",
        h.is_vararg,
        h.wants_report_only_leaf
    );
    out!(
        "Interruptible ranges: {}",
        if r.interruptible_ranges.is_empty() {
            "none".to_string()
        } else {
            r.interruptible_ranges
                .iter()
                .map(|x| format!("[{:#x}, {:#x})", x.start, x.end))
                .collect::<Vec<_>>()
                .join(" ")
        }
    );
    out!("Slots: {}", r.slots.len());
    for s in &r.slots {
        let mut flags = Vec::new();
        if s.interior {
            flags.push("interior");
        }
        if s.pinned {
            flags.push("pinned");
        }
        if s.untracked {
            flags.push("untracked");
        }
        let line = format!("  [{:>3}] {:<16} {}", s.index, s.name, flags.join(" "));
        out!("{}", line.trim_end());
    }
    let names = |live: &[usize]| {
        if live.is_empty() {
            return "(none)".to_string();
        }
        live.iter()
            .map(|&i| {
                r.slots
                    .get(i)
                    .map_or_else(|| format!("#{i}"), |s| s.name.clone())
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    out!("Safe points: {}", r.safe_points.len());
    for sp in &r.safe_points {
        out!("  {:08x}  {}", sp.offset, names(&sp.live));
    }
    if !r.interruptible_states.is_empty() {
        out!("Interruptible states (where the live set changes):");
        for st in &r.interruptible_states {
            out!("  {:08x}  {}", st.offset, names(&st.live));
        }
    }
    Ok(())
}
