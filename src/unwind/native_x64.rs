//! Native x64 unwinding: one step from a frame to its caller by the DWARF call-frame
//! information (CFI) of the ELF module that holds the code, with the frame-pointer chain
//! as a fallback for code without CFI.
//!
//! CFI comes from `.eh_frame` (looked up through the binary-search table of
//! `.eh_frame_hdr`, else through an index built once per module) and `.debug_frame` when
//! the file has one. The module's file is read from disk (the path the target mapped)
//! when it is there and its ELF header matches the target's; otherwise `.eh_frame` is
//! read from the target's memory, found through the `PT_GNU_EH_FRAME` program header.
//!
//! # Innermost frames and return addresses
//!
//! The instruction pointer of a caller is a return address: the instruction after the
//! call, which may already belong to the next function or to another row of the CFI. The
//! CFI of such a frame is looked up at `rip - 1`. The innermost frame of a thread (and a
//! frame interrupted by a signal) is at an exact instruction and is looked up at `rip`.
//! [`NativeUnwinder::step`] takes a caller frame; [`NativeUnwinder::step_innermost`] the
//! innermost one; [`NativeUnwinder::step_frame`] takes a [`NativeFrame`] that says which
//! it is and returns one, so that a walk through a signal frame gets it right.
//!
//! # Signal frames
//!
//! glibc's `__restore_rt` (the return address of a signal handler) has CFI of its own,
//! marked as a signal frame (`S` augmentation), whose rules are DWARF expressions that
//! read every register from the `ucontext_t` on the stack: they are evaluated, and the
//! interrupted frame comes back with an exact instruction pointer. For a trampoline
//! without CFI, the bytes of `__restore_rt` (`mov rax, 15; syscall`) are recognised and
//! the `ucontext_t` is read directly.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use gimli::{
    BaseAddresses, CfaRule, DebugFrame, DebugFrameOffset, EhFrame, EhFrameHdr, EhFrameOffset,
    EndianSlice, Evaluation, EvaluationResult, FrameDescriptionEntry, LittleEndian, Location,
    Register, RegisterRule, UnwindContext, UnwindSection, UnwindTableRow, Value,
};
use object::{Object, ObjectSection};

use super::elf_modules::{self, ModuleMap, Segment};
use super::{x64_reg, StackMemory, UnwindError, X64Context};
use crate::target::Target;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// Largest CFI section accepted (bytes).
const MAX_CFI_SECTION: u64 = 64 << 20;
/// Most FDEs indexed in one section.
const MAX_FDES: usize = 2_000_000;
/// Most operations one DWARF expression may execute.
const MAX_EXPRESSION_STEPS: u32 = 1_000;
/// DWARF register number of the return address on x64.
const DWARF_RA: u16 = 16;
/// DWARF register number of rsp.
const DWARF_RSP: u16 = 7;
/// `mov rax, 15 (rt_sigreturn); syscall`: the body of glibc's `__restore_rt`.
const RESTORE_RT: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
/// Offset of `uc_mcontext.gregs` in `ucontext_t` (after `uc_flags`, `uc_link`, `uc_stack`).
const UCONTEXT_GREGS: u64 = 40;
/// Unwind-code register numbers of `gregs[0..17]` (r8–r15, rdi, rsi, rbp, rbx, rdx, rax,
/// rcx, rsp; `gregs[16]` is rip).
const GREGS_ORDER: [usize; 16] = [8, 9, 10, 11, 12, 13, 14, 15, 7, 6, 5, 3, 2, 0, 1, 4];
/// Unwind-code numbers of the callee-saved registers (rbx, rbp, r12–r15).
const CALLEE_SAVED: [usize; 6] = [3, 5, 12, 13, 14, 15];

/// A frame as a walk sees it: its registers, and whether its instruction pointer is exact
/// (the innermost frame, or one interrupted by a signal) or a return address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeFrame {
    /// The frame's registers.
    pub ctx: X64Context,
    /// `true` when `ctx.rip` is the instruction the frame is at (look it up as is);
    /// `false` when it is a return address (look up `rip - 1`).
    pub ip_is_exact: bool,
}

impl NativeFrame {
    /// The innermost frame of a thread, at `ctx.rip`.
    pub fn innermost(ctx: X64Context) -> NativeFrame {
        NativeFrame {
            ctx,
            ip_is_exact: true,
        }
    }

    /// The address to look the frame's code up at (`rip - 1` for a return address).
    pub fn lookup_ip(&self) -> u64 {
        if self.ip_is_exact {
            self.ctx.rip
        } else {
            self.ctx.rip.saturating_sub(1)
        }
    }
}

/// One module's CFI, read once.
struct ModuleCfi {
    /// What to add to the file's addresses to get the target's.
    bias: u64,
    eh_frame: Option<Section>,
    eh_frame_hdr: Option<Section>,
    debug_frame: Option<Section>,
    /// FDEs of `.eh_frame`, sorted, when `.eh_frame_hdr` has no usable table.
    eh_index: OnceLock<Vec<FdeSpan>>,
    /// FDEs of `.debug_frame`, sorted.
    debug_index: OnceLock<Vec<FdeSpan>>,
}

/// The bytes of a section and its address in the file.
struct Section {
    addr: u64,
    data: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
struct FdeSpan {
    start: u64,
    end: u64,
    offset: usize,
}

/// Steps native x64 frames by their modules' CFI.
///
/// Cheap to create: the modules are found on first use and each module's CFI is read on
/// the first step in it, then cached. Thread-safe (`Send + Sync`); steps from several
/// threads share the cache.
pub struct NativeUnwinder {
    target: Target,
    modules: OnceLock<ModuleMap>,
    cfi: Mutex<HashMap<usize, Option<Arc<ModuleCfi>>>>,
    /// Whether each module is an ELF image (a PE file the runtime maps is not).
    is_elf: Mutex<HashMap<usize, bool>>,
}

impl std::fmt::Debug for NativeUnwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeUnwinder")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl NativeUnwinder {
    /// An unwinder over the modules mapped into `target`.
    pub fn new(target: &Target) -> NativeUnwinder {
        NativeUnwinder {
            target: target.clone(),
            modules: OnceLock::new(),
            cfi: Mutex::new(HashMap::new()),
            is_elf: Mutex::new(HashMap::new()),
        }
    }

    /// The target's ELF modules.
    pub fn modules(&self) -> &ModuleMap {
        self.modules
            .get_or_init(|| ModuleMap::new(self.target.mapped_files()))
    }

    /// Whether `ip` is in a file-backed ELF module of the target (native code). JIT'ed
    /// managed code is in anonymous memory, and ReadyToRun code in PE files the runtime
    /// maps: neither is.
    pub fn is_in_module(&self, ip: u64) -> bool {
        let Some((index, module)) = self.modules().find(ip) else {
            return false;
        };
        let mut cache = self.is_elf.lock().unwrap_or_else(|p| p.into_inner());
        *cache.entry(index).or_insert_with(|| {
            match self.target.read_bytes(module.base, 4) {
                Ok(magic) => magic == b"\x7fELF",
                // Not in the dump: the file on disk tells.
                Err(_) => crate::target::map_regular_file(&module.path)
                    .is_ok_and(|map| map.starts_with(b"\x7fELF")),
            }
        })
    }

    /// One step from a caller frame (its `rip` is a return address) to its caller.
    /// `Ok(None)` when the CFI says the frame is the outermost one.
    pub fn step(
        &self,
        ctx: &X64Context,
        mem: &dyn StackMemory,
    ) -> Result<Option<X64Context>, UnwindError> {
        let frame = NativeFrame {
            ctx: *ctx,
            ip_is_exact: false,
        };
        Ok(self.step_frame(&frame, mem)?.map(|f| f.ctx))
    }

    /// One step from the innermost frame of a thread (its `rip` is exact) to its caller.
    pub fn step_innermost(
        &self,
        ctx: &X64Context,
        mem: &dyn StackMemory,
    ) -> Result<Option<X64Context>, UnwindError> {
        Ok(self
            .step_frame(&NativeFrame::innermost(*ctx), mem)?
            .map(|f| f.ctx))
    }

    /// One step from `frame` to its caller, which says whether its own `rip` is exact
    /// (it is when `frame` is a signal frame). `Ok(None)` at the outermost frame (the CFI
    /// leaves the return address undefined, or it is 0).
    ///
    /// After a step, rip, rsp and the registers the CFI restores are known (the
    /// callee-saved ones, or all of them through a signal frame); the others are not.
    pub fn step_frame(
        &self,
        frame: &NativeFrame,
        mem: &dyn StackMemory,
    ) -> Result<Option<NativeFrame>, UnwindError> {
        let ip = frame.ctx.rip;
        let lookup = frame.lookup_ip();
        let found = match self.module_cfi(lookup) {
            Some(cfi) => step_by_cfi(&cfi, lookup, &frame.ctx, mem)?,
            None => None,
        };
        let next = match found {
            Some(next) => next,
            None => match step_restore_rt(&self.target, &frame.ctx, mem)? {
                Some(next) => Stepped::Caller(next, true),
                None => return Err(UnwindError::NoUnwindInfo { ip }),
            },
        };
        match next {
            Stepped::Outermost => Ok(None),
            Stepped::Caller(ctx, _) if ctx.rip == 0 => Ok(None),
            Stepped::Caller(ctx, signal) => {
                // A signal frame may come back from an alternate signal stack; any other
                // step pops at least the return address.
                if !signal && ctx.rsp() <= frame.ctx.rsp() {
                    return Err(UnwindError::NotProgressing { ip, sp: ctx.rsp() });
                }
                Ok(Some(NativeFrame {
                    ctx,
                    ip_is_exact: signal,
                }))
            }
        }
    }

    /// One step by the frame-pointer chain, for code without CFI: `[rbp]` is the caller's
    /// rbp, `[rbp + 8]` the return address, and the caller's rsp is `rbp + 16`. The
    /// caller's other registers are unknown. `Ok(None)` when the return address is 0 (the
    /// end of the chain); `NoUnwindInfo` without a usable rbp; `NotProgressing` when the
    /// caller's rsp would not be above this frame's (a cycle in damaged data).
    pub fn step_frame_pointer(
        ctx: &X64Context,
        mem: &dyn StackMemory,
    ) -> Result<Option<X64Context>, UnwindError> {
        let ip = ctx.rip;
        let rbp = match ctx.rbp() {
            Some(rbp) if rbp != 0 && rbp % 8 == 0 => rbp,
            _ => return Err(UnwindError::NoUnwindInfo { ip }),
        };
        let caller_sp = rbp
            .checked_add(16)
            .ok_or(UnwindError::NotProgressing { ip, sp: rbp })?;
        if caller_sp <= ctx.rsp() {
            return Err(UnwindError::NotProgressing { ip, sp: caller_sp });
        }
        let caller_rbp = mem.read_u64(rbp)?;
        let ret = mem.read_u64(rbp + 8)?;
        if ret == 0 {
            return Ok(None);
        }
        Ok(Some(X64Context::new(ret, caller_sp, Some(caller_rbp))))
    }

    /// The CFI of the module holding `ip`, read on first use (`None`: no module there, or
    /// its CFI could not be read).
    fn module_cfi(&self, ip: u64) -> Option<Arc<ModuleCfi>> {
        let (index, module) = self.modules().find(ip)?;
        let mut cache = self.cfi.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .entry(index)
            .or_insert_with(|| match load_cfi(&self.target, &module.path, module.base) {
                Ok(cfi) => Some(Arc::new(cfi)),
                Err(e) => {
                    tracing::debug!("no CFI for {}: {e}", module.path.display());
                    None
                }
            })
            .clone()
    }
}

/// What one CFI step found.
enum Stepped {
    /// The return address is undefined: no caller.
    Outermost,
    /// The caller, and whether this frame was a signal frame (the caller's ip is exact).
    Caller(X64Context, bool),
}

/// Reads a module's CFI: from the file on disk when it is there and matches the target,
/// else from the target's memory.
fn load_cfi(target: &Target, path: &Path, base: u64) -> Result<ModuleCfi, String> {
    match crate::target::map_regular_file(path) {
        Ok(map) if elf_modules::file_matches_target(&map, target, base) => {
            cfi_from_file(&map, base)
        }
        _ => cfi_from_memory(target, base),
    }
}

fn cfi_from_file(data: &[u8], base: u64) -> Result<ModuleCfi, String> {
    let segments = elf_modules::program_headers(data)?;
    let bias = elf_modules::load_bias(base, &segments).ok_or("no PT_LOAD")?;
    let file = object::read::elf::ElfFile64::<object::Endianness>::parse(data)
        .map_err(|e| e.to_string())?;
    let section = |name: &str| -> Option<Section> {
        let s = file.section_by_name(name)?;
        if s.size() > MAX_CFI_SECTION {
            return None;
        }
        // Compressed or NOBITS sections have no usable data here.
        let data = s.data().ok()?;
        (!data.is_empty() && data.len() as u64 == s.size()).then(|| Section {
            addr: s.address(),
            data: data.to_vec(),
        })
    };
    Ok(ModuleCfi::new(
        bias,
        section(".eh_frame"),
        section(".eh_frame_hdr"),
        section(".debug_frame"),
    ))
}

fn cfi_from_memory(target: &Target, base: u64) -> Result<ModuleCfi, String> {
    let segments = elf_modules::headers_from_memory(target, base)?;
    let bias = elf_modules::load_bias(base, &segments).ok_or("no PT_LOAD")?;
    let hdr_seg = segments
        .iter()
        .find(|s| s.kind == object::elf::PT_GNU_EH_FRAME)
        .ok_or("no PT_GNU_EH_FRAME")?;
    let read = |addr: u64, len: u64| -> Result<Vec<u8>, String> {
        let len = usize::try_from(len.min(MAX_CFI_SECTION)).map_err(|e| e.to_string())?;
        target
            .read_bytes(bias.wrapping_add(addr), len)
            .map_err(|e| e.to_string())
    };
    let hdr = Section {
        addr: hdr_seg.vaddr,
        data: read(hdr_seg.vaddr, hdr_seg.memsz)?,
    };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr.addr);
    let parsed = EhFrameHdr::new(&hdr.data, LittleEndian)
        .parse(&bases, 8)
        .map_err(|e| format!(".eh_frame_hdr: {e}"))?;
    let eh_addr = match parsed.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => a,
        gimli::Pointer::Indirect(_) => return Err("indirect eh_frame_ptr".into()),
    };
    // .eh_frame runs at most to the end of its segment.
    let seg: &Segment = segments
        .iter()
        .find(|s| {
            s.kind == object::elf::PT_LOAD
                && s.vaddr <= eh_addr
                && eh_addr < s.vaddr.saturating_add(s.memsz)
        })
        .ok_or(".eh_frame outside every PT_LOAD")?;
    let len = seg.vaddr.saturating_add(seg.memsz) - eh_addr;
    let eh = Section {
        addr: eh_addr,
        data: read(eh_addr, len)?,
    };
    Ok(ModuleCfi::new(bias, Some(eh), Some(hdr), None))
}

impl ModuleCfi {
    fn new(
        bias: u64,
        eh_frame: Option<Section>,
        eh_frame_hdr: Option<Section>,
        debug_frame: Option<Section>,
    ) -> ModuleCfi {
        ModuleCfi {
            bias,
            eh_frame,
            eh_frame_hdr,
            debug_frame,
            eh_index: OnceLock::new(),
            debug_index: OnceLock::new(),
        }
    }

    fn eh_bases(&self) -> BaseAddresses {
        let mut bases = BaseAddresses::default();
        if let Some(eh) = &self.eh_frame {
            bases = bases.set_eh_frame(eh.addr);
        }
        if let Some(hdr) = &self.eh_frame_hdr {
            bases = bases.set_eh_frame_hdr(hdr.addr);
        }
        bases
    }
}

/// Sorted spans of the FDEs of a section (at most [`MAX_FDES`]; parsing stops at the
/// first damaged entry).
fn index_fdes<'a, S>(section: &S, bases: &BaseAddresses) -> Vec<FdeSpan>
where
    S: UnwindSection<Slice<'a>>,
{
    let mut spans = Vec::new();
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            let Ok(fde) = partial.parse(S::cie_from_offset) else {
                continue;
            };
            spans.push(FdeSpan {
                start: fde.initial_address(),
                end: fde.end_address(),
                offset: fde.offset(),
            });
            if spans.len() >= MAX_FDES {
                break;
            }
        }
    }
    spans.sort_unstable_by_key(|s| (s.start, s.end));
    spans
}

fn find_span(spans: &[FdeSpan], addr: u64) -> Option<FdeSpan> {
    let i = spans.partition_point(|s| s.start <= addr);
    spans[..i]
        .iter()
        .rev()
        .take(4)
        .find(|s| addr < s.end)
        .copied()
}

/// One step by the CFI of `cfi`'s module; `Ok(None)` when the module has no FDE for
/// `lookup`.
fn step_by_cfi(
    cfi: &ModuleCfi,
    lookup: u64,
    ctx: &X64Context,
    mem: &dyn StackMemory,
) -> Result<Option<Stepped>, UnwindError> {
    let ip = ctx.rip;
    let svma = lookup.wrapping_sub(cfi.bias);
    let bad = |detail: String| UnwindError::BadUnwindData { ip, detail };
    if let Some(eh) = &cfi.eh_frame {
        let section = EhFrame::new(&eh.data, LittleEndian);
        let bases = cfi.eh_bases();
        let table_fde = cfi.eh_frame_hdr.as_ref().and_then(|hdr| {
            let parsed = EhFrameHdr::new(&hdr.data, LittleEndian)
                .parse(&bases, 8)
                .ok()?;
            let table = parsed.table()?;
            Some(table.fde_for_address(&section, &bases, svma, EhFrame::cie_from_offset))
        });
        let fde = match table_fde {
            Some(Ok(fde)) => Some(fde),
            Some(Err(gimli::Error::NoUnwindInfoForAddress)) => None,
            Some(Err(e)) => return Err(bad(format!(".eh_frame_hdr lookup: {e}"))),
            None => {
                let spans = cfi.eh_index.get_or_init(|| index_fdes(&section, &bases));
                match find_span(spans, svma) {
                    Some(span) => Some(
                        section
                            .fde_from_offset(
                                &bases,
                                EhFrameOffset(span.offset),
                                EhFrame::cie_from_offset,
                            )
                            .map_err(|e| bad(format!(".eh_frame FDE: {e}")))?,
                    ),
                    None => None,
                }
            }
        };
        if let Some(fde) = fde {
            return step_with_fde(&section, &bases, &fde, svma, ctx, mem).map(Some);
        }
    }
    if let Some(df) = &cfi.debug_frame {
        let mut section = DebugFrame::new(&df.data, LittleEndian);
        section.set_address_size(8);
        let bases = BaseAddresses::default();
        let spans = cfi.debug_index.get_or_init(|| index_fdes(&section, &bases));
        if let Some(span) = find_span(spans, svma) {
            let fde = section
                .fde_from_offset(
                    &bases,
                    DebugFrameOffset(span.offset),
                    DebugFrame::cie_from_offset,
                )
                .map_err(|e| bad(format!(".debug_frame FDE: {e}")))?;
            return step_with_fde(&section, &bases, &fde, svma, ctx, mem).map(Some);
        }
    }
    Ok(None)
}

fn step_with_fde<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    bases: &BaseAddresses,
    fde: &FrameDescriptionEntry<Slice<'a>>,
    svma: u64,
    ctx: &X64Context,
    mem: &dyn StackMemory,
) -> Result<Stepped, UnwindError> {
    let ip = ctx.rip;
    let bad = |detail: String| UnwindError::BadUnwindData { ip, detail };
    let mut uctx = UnwindContext::new();
    let row = fde
        .unwind_info_for_address(section, bases, &mut uctx, svma)
        .map_err(|e| bad(format!("CFI program: {e}")))?;
    let ra = fde.cie().return_address_register();
    let signal = fde.is_signal_trampoline();
    let next = apply_row(section, row, ra, ctx, mem)?;
    Ok(match next {
        Some(next) => Stepped::Caller(next, signal),
        None => Stepped::Outermost,
    })
}

/// The caller's registers by the rules of `row`; `None` when the return address is
/// undefined.
fn apply_row<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    row: &UnwindTableRow<usize>,
    ra: Register,
    ctx: &X64Context,
    mem: &dyn StackMemory,
) -> Result<Option<X64Context>, UnwindError> {
    let ip = ctx.rip;
    let bad = |detail: String| UnwindError::BadUnwindData { ip, detail };
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => register_value(ctx, *register)
            .ok_or_else(|| bad(format!("CFA register {} is unknown", register.0)))?
            .wrapping_add(*offset as u64),
        CfaRule::Expression(e) => {
            let expr = e.get(section).map_err(|e| bad(e.to_string()))?;
            evaluate(expr, None, ctx, mem)?
        }
    };
    let rule_value = |rule: RegisterRule<usize>| -> Result<Option<u64>, UnwindError> {
        Ok(match rule {
            RegisterRule::Undefined | RegisterRule::Architectural => None,
            RegisterRule::SameValue => None,
            RegisterRule::Offset(n) => Some(mem.read_u64(cfa.wrapping_add(n as u64))?),
            RegisterRule::ValOffset(n) => Some(cfa.wrapping_add(n as u64)),
            RegisterRule::Register(r) => register_value(ctx, r),
            RegisterRule::Expression(e) => {
                let expr = e.get(section).map_err(|e| bad(e.to_string()))?;
                Some(mem.read_u64(evaluate(expr, Some(cfa), ctx, mem)?)?)
            }
            RegisterRule::ValExpression(e) => {
                let expr = e.get(section).map_err(|e| bad(e.to_string()))?;
                Some(evaluate(expr, Some(cfa), ctx, mem)?)
            }
            RegisterRule::Constant(v) => Some(v),
        })
    };
    let rip = match row.register(ra) {
        Some(RegisterRule::Undefined) => return Ok(None),
        Some(RegisterRule::SameValue) => register_value(ctx, ra),
        Some(rule) => rule_value(rule)?,
        None => None,
    }
    .ok_or_else(|| bad(format!("no rule gives the return address (r{})", ra.0)))?;
    let mut next = X64Context {
        rip,
        regs: [None; 16],
    };
    for reg in CALLEE_SAVED {
        next.regs[reg] = ctx.regs[reg];
    }
    for (dwarf, rule) in row.registers() {
        if dwarf.0 == ra.0 {
            continue;
        }
        let Some(reg) = X64Context::from_dwarf(dwarf.0) else {
            continue;
        };
        next.regs[reg] = match rule {
            RegisterRule::SameValue => ctx.regs[reg],
            rule => rule_value(rule.clone())?,
        };
    }
    if row.register(Register(DWARF_RSP)).is_none() || next.regs[x64_reg::RSP].is_none() {
        next.regs[x64_reg::RSP] = Some(cfa);
    }
    Ok(Some(next))
}

/// The value of DWARF register `reg` in `ctx` (16, the return address column, is rip).
fn register_value(ctx: &X64Context, reg: Register) -> Option<u64> {
    if reg.0 == DWARF_RA {
        return Some(ctx.rip);
    }
    ctx.regs[X64Context::from_dwarf(reg.0)?]
}

/// Evaluates a CFI expression (with `initial` pushed first, for register rules) to the
/// address or value it computes.
fn evaluate(
    expr: gimli::Expression<Slice<'_>>,
    initial: Option<u64>,
    ctx: &X64Context,
    mem: &dyn StackMemory,
) -> Result<u64, UnwindError> {
    let ip = ctx.rip;
    let bad = |detail: String| UnwindError::BadUnwindData { ip, detail };
    let encoding = gimli::Encoding {
        format: gimli::Format::Dwarf32,
        version: 4,
        address_size: 8,
    };
    let mut eval: Evaluation<Slice<'_>> = expr.evaluation(encoding);
    eval.set_max_iterations(MAX_EXPRESSION_STEPS);
    if let Some(v) = initial {
        eval.set_initial_value(v);
    }
    let mut state = eval
        .evaluate()
        .map_err(|e| bad(format!("expression: {e}")))?;
    loop {
        state = match state {
            EvaluationResult::Complete => break,
            EvaluationResult::RequiresMemory { address, size, .. } => {
                let v = mem.read_u64(address)?;
                let v = match size {
                    1..=7 => v & ((1u64 << (u32::from(size) * 8)) - 1),
                    _ => v,
                };
                eval.resume_with_memory(Value::Generic(v))
            }
            EvaluationResult::RequiresRegister { register, .. } => {
                let v = register_value(ctx, register).ok_or_else(|| {
                    bad(format!("expression reads unknown register {}", register.0))
                })?;
                eval.resume_with_register(Value::Generic(v))
            }
            other => return Err(bad(format!("expression needs {other:?}"))),
        }
        .map_err(|e| bad(format!("expression: {e}")))?;
    }
    let pieces = eval.result();
    match pieces.as_slice() {
        [piece] => match &piece.location {
            Location::Address { address } => Ok(*address),
            Location::Value { value } => value
                .to_u64(u64::MAX)
                .map_err(|e| bad(format!("expression value: {e}"))),
            other => Err(bad(format!("expression gives {other:?}"))),
        },
        _ => Err(bad(format!("expression gives {} pieces", pieces.len()))),
    }
}

/// A step through a signal trampoline recognised by its bytes (`__restore_rt` without
/// CFI): the interrupted registers are the `ucontext_t` at rsp. `Ok(None)` when `rip` is
/// not at the trampoline.
fn step_restore_rt(
    target: &Target,
    ctx: &X64Context,
    mem: &dyn StackMemory,
) -> Result<Option<X64Context>, UnwindError> {
    match target.read_bytes(ctx.rip, RESTORE_RT.len()) {
        Ok(bytes) if bytes == RESTORE_RT => {}
        _ => return Ok(None),
    }
    Ok(Some(read_sigcontext(ctx.rsp(), mem)?))
}

/// The registers saved in the `ucontext_t` at `uc` (the interrupted frame of a signal).
pub fn read_sigcontext(uc: u64, mem: &dyn StackMemory) -> Result<X64Context, UnwindError> {
    let gregs = uc.wrapping_add(UCONTEXT_GREGS);
    let mut next = X64Context::default();
    for (i, reg) in GREGS_ORDER.iter().enumerate() {
        next.regs[*reg] = Some(mem.read_u64(gregs.wrapping_add(8 * i as u64))?);
    }
    next.rip = mem.read_u64(gregs.wrapping_add(8 * 16))?;
    Ok(next)
}
