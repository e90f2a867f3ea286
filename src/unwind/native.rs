//! Native unwinding: one step from a frame to its caller by the DWARF call-frame
//! information (CFI) of the ELF module that holds the code, for x64 and arm64 contexts
//! alike ([`CfiContext`] says how each numbers its registers), with each architecture's
//! fallbacks for code without CFI (`x86_64`: the frame-pointer chain and `__restore_rt`;
//! `aarch64`: the frame-record chain).
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
use super::x86_64::signal::step_restore_rt;
use super::{Arm64Context, CfiContext, StackMemory, UnwindError, X64Context};
use crate::memory::Target;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// Largest CFI section accepted (bytes).
const MAX_CFI_SECTION: u64 = 64 << 20;
/// Most FDEs indexed in one section.
const MAX_FDES: usize = 2_000_000;
/// Most operations one DWARF expression may execute.
const MAX_EXPRESSION_STEPS: u32 = 1_000;

/// A frame as a walk sees it: its registers, and whether its instruction pointer is exact
/// (the innermost frame, or one interrupted by a signal) or a return address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeFrame<C = X64Context> {
    /// The frame's registers.
    pub ctx: C,
    /// `true` when `ctx.rip` is the instruction the frame is at (look it up as is);
    /// `false` when it is a return address (look up `rip - 1`).
    pub ip_is_exact: bool,
}

impl<C: CfiContext> NativeFrame<C> {
    /// The innermost frame of a thread, at its pc.
    pub fn innermost(ctx: C) -> NativeFrame<C> {
        NativeFrame {
            ctx,
            ip_is_exact: true,
        }
    }

    /// The address to look the frame's code up at (`pc - 1` for a return address).
    pub fn lookup_ip(&self) -> u64 {
        if self.ip_is_exact {
            self.ctx.pc()
        } else {
            self.ctx.pc().saturating_sub(1)
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
                Ok(magic) if magic == b"\x7fELF" => true,
                // Another header (a PE image the runtime mapped).
                Ok(magic) if magic != [0; 4] => false,
                // Not in the dump (or zeros where a debugger's reader fills what a dump
                // left out, as gdb does for qemu's cores): the file on disk tells.
                _ => crate::memory::map_regular_file(&module.path)
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
    ///
    /// A caller that comes back with `ip_is_exact` means `frame` was a signal
    /// trampoline, which is entered by a return and not a call: name that frame at
    /// `frame.ctx.rip` rather than at [`NativeFrame::lookup_ip`] (glibc's CFI for
    /// `__restore_rt` starts at the `nop` a byte before the symbol).
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
                Some(next) => Stepped::Caller(Box::new(next), true),
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
                    ctx: *ctx,
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

    /// One step out of a signal handler: `frame` is at an `rt_sigreturn` trampoline (which
    /// no module's CFI covers: the kernel's vDSO or qemu-user's page), and its caller is
    /// the interrupted code, at the exact instruction. `Ok(None)` when it is no trampoline.
    pub fn step_signal_arm64(
        &self,
        frame: &NativeFrame<Arm64Context>,
        mem: &dyn StackMemory,
    ) -> Result<Option<NativeFrame<Arm64Context>>, UnwindError> {
        Ok(
            super::aarch64::signal::step_sigreturn(&self.target, &frame.ctx, mem)?.map(|ctx| {
                NativeFrame {
                    ctx,
                    ip_is_exact: true,
                }
            }),
        )
    }

    /// One step from an arm64 `frame` to its caller by its module's CFI, or out of a
    /// signal handler through its trampoline. `Ok(None)` at the outermost frame;
    /// `NoUnwindInfo` where neither applies.
    pub fn step_frame_arm64(
        &self,
        frame: &NativeFrame<Arm64Context>,
        mem: &dyn StackMemory,
    ) -> Result<Option<NativeFrame<Arm64Context>>, UnwindError> {
        let ip = frame.ctx.pc;
        let lookup = frame.lookup_ip();
        let found = match self.module_cfi(lookup) {
            Some(cfi) => step_by_cfi(&cfi, lookup, &frame.ctx, mem)?,
            None => None,
        };
        match found {
            None => match self.step_signal_arm64(frame, mem)? {
                Some(next) => Ok(Some(next)),
                None => Err(UnwindError::NoUnwindInfo { ip }),
            },
            Some(Stepped::Outermost) => Ok(None),
            Some(Stepped::Caller(ctx, _)) if ctx.pc == 0 => Ok(None),
            Some(Stepped::Caller(ctx, signal)) => {
                // A leaf keeps its sp (the return address is in lr); then pc must move.
                let same = ctx.sp() == frame.ctx.sp() && ctx.pc == frame.ctx.pc;
                if !signal && (ctx.sp() < frame.ctx.sp() || same) {
                    return Err(UnwindError::NotProgressing { ip, sp: ctx.sp() });
                }
                Ok(Some(NativeFrame {
                    ctx: *ctx,
                    ip_is_exact: signal,
                }))
            }
        }
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
enum Stepped<C = X64Context> {
    /// The return address is undefined: no caller.
    Outermost,
    /// The caller, and whether this frame was a signal frame (the caller's ip is exact).
    Caller(Box<C>, bool),
}

/// Reads a module's CFI: from the file on disk when it is there and matches the target,
/// else from the target's memory.
fn load_cfi(target: &Target, path: &Path, base: u64) -> Result<ModuleCfi, String> {
    match crate::memory::map_regular_file(path) {
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
fn step_by_cfi<C: CfiContext>(
    cfi: &ModuleCfi,
    lookup: u64,
    ctx: &C,
    mem: &dyn StackMemory,
) -> Result<Option<Stepped<C>>, UnwindError> {
    let ip = ctx.pc();
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

fn step_with_fde<'a, S: UnwindSection<Slice<'a>>, C: CfiContext>(
    section: &S,
    bases: &BaseAddresses,
    fde: &FrameDescriptionEntry<Slice<'a>>,
    svma: u64,
    ctx: &C,
    mem: &dyn StackMemory,
) -> Result<Stepped<C>, UnwindError> {
    let ip = ctx.pc();
    let bad = |detail: String| UnwindError::BadUnwindData { ip, detail };
    let mut uctx = UnwindContext::new();
    let row = fde
        .unwind_info_for_address(section, bases, &mut uctx, svma)
        .map_err(|e| bad(format!("CFI program: {e}")))?;
    let ra = fde.cie().return_address_register();
    let signal = fde.is_signal_trampoline();
    let next = apply_row(section, row, ra, ctx, mem)?;
    Ok(match next {
        Some(next) => Stepped::Caller(Box::new(next), signal),
        None => Stepped::Outermost,
    })
}

/// The caller's registers by the rules of `row`; `None` when the return address is
/// undefined.
fn apply_row<'a, S: UnwindSection<Slice<'a>>, C: CfiContext>(
    section: &S,
    row: &UnwindTableRow<usize>,
    ra: Register,
    ctx: &C,
    mem: &dyn StackMemory,
) -> Result<Option<C>, UnwindError> {
    let ip = ctx.pc();
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
        None => ctx.return_address_without_rule(ra.0),
    }
    .ok_or_else(|| bad(format!("no rule gives the return address (r{})", ra.0)))?;
    let mut next = ctx.caller_at(rip);
    for (dwarf, rule) in row.registers() {
        if dwarf.0 == ra.0 {
            continue;
        }
        let value = match rule {
            RegisterRule::SameValue => ctx.dwarf(dwarf.0),
            rule => rule_value(rule.clone())?,
        };
        next.set_dwarf(dwarf.0, value);
    }
    if row.register(Register(C::DWARF_SP)).is_none() || next.dwarf(C::DWARF_SP).is_none() {
        next.set_dwarf(C::DWARF_SP, Some(cfa));
    }
    Ok(Some(next))
}

/// The value of DWARF register `reg` in `ctx` (on x64, 16, the return address column, is
/// rip).
fn register_value<C: CfiContext>(ctx: &C, reg: Register) -> Option<u64> {
    ctx.dwarf(reg.0)
}

/// Evaluates a CFI expression (with `initial` pushed first, for register rules) to the
/// address or value it computes.
fn evaluate<C: CfiContext>(
    expr: gimli::Expression<Slice<'_>>,
    initial: Option<u64>,
    ctx: &C,
    mem: &dyn StackMemory,
) -> Result<u64, UnwindError> {
    let ip = ctx.pc();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;
    use crate::regs::x64_reg;
    use crate::unwind::x86_64::signal::{GREGS_ORDER, RESTORE_RT};
    use gimli::write::{
        self, Address, CallFrameInstruction as I, CommonInformationEntry, EndianVec, Expression,
        FrameDescriptionEntry, FrameTable,
    };
    use gimli::X86_64;

    /// Where the synthetic module is loaded (its file addresses start at 0).
    const BASE: u64 = 0x40_0000;
    const STACK: u64 = 0x7000_0000;
    const STACK_SIZE: usize = 0x2000;
    /// Offsets in the module of its parts.
    const HDR: u64 = 0x200;
    const EH: u64 = 0x400;
    const MODULE_SIZE: usize = 0x4000;
    /// Functions (file addresses): F1 saves rbp and rbx, F2 is outermost, SIG is a signal
    /// trampoline described like glibc's `__restore_rt`, F4's CFA is rbp-based, and
    /// RESTORE is a trampoline without CFI.
    const F1: u64 = 0x1000;
    const F2: u64 = 0x1100;
    const SIG: u64 = 0x1200;
    const F4: u64 = 0x1300;
    const LOOPING: u64 = 0x1400;
    const RESTORE: u64 = 0x1800;

    fn encoding() -> gimli::Encoding {
        gimli::Encoding {
            format: gimli::Format::Dwarf32,
            version: 1,
            address_size: 8,
        }
    }

    /// The `.eh_frame` of the synthetic module.
    fn eh_frame() -> Vec<u8> {
        let mut table = FrameTable::default();
        let mut cie = CommonInformationEntry::new(encoding(), 1, -8, X86_64::RA);
        cie.add_instruction(I::Cfa(X86_64::RSP, 8));
        cie.add_instruction(I::Offset(X86_64::RA, -8));
        let cie = table.add_cie(cie);

        let mut f1 = FrameDescriptionEntry::new(Address::Constant(F1), 0x100);
        f1.add_instruction(4, I::CfaOffset(16));
        f1.add_instruction(4, I::Offset(X86_64::RBP, -16));
        f1.add_instruction(8, I::CfaOffset(32));
        f1.add_instruction(8, I::Offset(X86_64::RBX, -24));
        table.add_fde(cie, f1);

        let mut f2 = FrameDescriptionEntry::new(Address::Constant(F2), 0x100);
        f2.add_instruction(0, I::Undefined(X86_64::RA));
        table.add_fde(cie, f2);

        let mut f4 = FrameDescriptionEntry::new(Address::Constant(F4), 0x100);
        f4.add_instruction(0, I::Cfa(X86_64::RBP, 16));
        f4.add_instruction(0, I::Offset(X86_64::RBP, -16));
        table.add_fde(cie, f4);

        // An expression that jumps to itself forever.
        let mut looping = FrameDescriptionEntry::new(Address::Constant(LOOPING), 0x100);
        looping.add_instruction(0, I::CfaExpression(Expression::raw(vec![0x2f, 0xfd, 0xff])));
        table.add_fde(cie, looping);

        // glibc's __restore_rt: the CFA and every register read from the ucontext_t at rsp
        // (DW_OP_breg7 offset, DW_OP_deref for the CFA; register rules are addresses).
        let mut sig_cie = CommonInformationEntry::new(encoding(), 1, -8, X86_64::RA);
        sig_cie.signal_trampoline = true;
        let sig_cie = table.add_cie(sig_cie);
        let mut sig = FrameDescriptionEntry::new(Address::Constant(SIG), 0x10);
        let mut cfa = Expression::new();
        cfa.op_breg(X86_64::RSP, 40 + 15 * 8);
        cfa.op_deref();
        sig.add_instruction(0, I::CfaExpression(cfa));
        let gregs = [
            X86_64::R8,
            X86_64::R9,
            X86_64::R10,
            X86_64::R11,
            X86_64::R12,
            X86_64::R13,
            X86_64::R14,
            X86_64::R15,
            X86_64::RDI,
            X86_64::RSI,
            X86_64::RBP,
            X86_64::RBX,
            X86_64::RDX,
            X86_64::RAX,
            X86_64::RCX,
            X86_64::RSP,
            X86_64::RA,
        ];
        for (i, reg) in gregs.into_iter().enumerate() {
            let mut e = Expression::new();
            e.op_breg(X86_64::RSP, 40 + 8 * i as i64);
            sig.add_instruction(0, I::Expression(reg, e));
        }
        table.add_fde(sig_cie, sig);

        let mut out = write::EhFrame(EndianVec::new(LittleEndian));
        table.write_eh_frame(&mut out).expect("write .eh_frame");
        out.0.into_vec()
    }

    /// An `.eh_frame_hdr` for `eh` (at file address `EH`), with a search table or not.
    fn eh_frame_hdr(eh: &[u8], with_table: bool) -> Vec<u8> {
        let mut fdes = Vec::new();
        let section = EhFrame::new(eh, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(EH);
        let mut entries = section.entries(&bases);
        while let Some(entry) = entries.next().expect("entry") {
            if let gimli::CieOrFde::Fde(partial) = entry {
                let fde = partial.parse(EhFrame::cie_from_offset).expect("fde");
                fdes.push((fde.initial_address(), EH + fde.offset() as u64));
            }
        }
        fdes.sort();
        let rel = |addr: u64| ((addr as i64 - HDR as i64) as i32).to_le_bytes();
        let mut hdr = vec![1, 0x1b, 0x03, if with_table { 0x3b } else { 0xff }];
        hdr.extend_from_slice(&((EH as i64 - (HDR as i64 + 4)) as i32).to_le_bytes());
        if with_table {
            hdr.extend_from_slice(&(fdes.len() as u32).to_le_bytes());
            for (start, fde) in fdes {
                hdr.extend_from_slice(&rel(start));
                hdr.extend_from_slice(&rel(fde));
            }
        } else {
            hdr.extend_from_slice(&0u32.to_le_bytes());
        }
        hdr
    }

    /// An ELF header and two program headers (PT_LOAD of the module, PT_GNU_EH_FRAME).
    fn elf_headers(hdr_len: u64) -> Vec<u8> {
        let mut h = vec![0u8; 64 + 2 * 56];
        h[..8].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
        h[16..18].copy_from_slice(&3u16.to_le_bytes());
        h[18..20].copy_from_slice(&62u16.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[32..40].copy_from_slice(&64u64.to_le_bytes());
        h[52..54].copy_from_slice(&64u16.to_le_bytes());
        h[54..56].copy_from_slice(&56u16.to_le_bytes());
        h[56..58].copy_from_slice(&2u16.to_le_bytes());
        h[58..60].copy_from_slice(&64u16.to_le_bytes());
        let phdr = |h: &mut Vec<u8>, at: usize, kind: u32, vaddr: u64, size: u64| {
            h[at..at + 4].copy_from_slice(&kind.to_le_bytes());
            h[at + 4..at + 8].copy_from_slice(&5u32.to_le_bytes());
            h[at + 8..at + 16].copy_from_slice(&vaddr.to_le_bytes());
            h[at + 16..at + 24].copy_from_slice(&vaddr.to_le_bytes());
            h[at + 24..at + 32].copy_from_slice(&vaddr.to_le_bytes());
            h[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
            h[at + 40..at + 48].copy_from_slice(&size.to_le_bytes());
            h[at + 48..at + 56].copy_from_slice(&0x1000u64.to_le_bytes());
        };
        phdr(&mut h, 64, 1, 0, MODULE_SIZE as u64);
        phdr(&mut h, 120, 0x6474_e550, HDR, hdr_len);
        h
    }

    /// A target with the synthetic module (only in memory: its path is not on disk) and
    /// a stack whose 8-byte slots are `stack` from `STACK`.
    fn target_with(eh: &[u8], with_table: bool, stack: &[u64]) -> Target {
        target_with_hdr(eh, &eh_frame_hdr_or_raw(eh, with_table), stack)
    }

    fn target_with_hdr(eh: &[u8], hdr: &[u8], stack: &[u64]) -> Target {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        {
            let m = b.region(BASE, MODULE_SIZE);
            m.bytes(0, &elf_headers(hdr.len() as u64));
            m.bytes(HDR as usize, hdr);
            m.bytes(EH as usize, eh);
            m.bytes(RESTORE as usize, &RESTORE_RT);
        }
        {
            let s = b.region(STACK, STACK_SIZE);
            for (i, v) in stack.iter().enumerate() {
                s.u64(i * 8, *v);
            }
        }
        b.map_file(
            BASE,
            BASE + MODULE_SIZE as u64,
            "/nonexistent/cdac-test/libsynthetic.so",
        );
        b.into_target()
    }

    /// The header for `eh` when it is the real `.eh_frame`; for damaged bytes, a header
    /// without a table (the search table could not be built over them).
    fn eh_frame_hdr_or_raw(eh: &[u8], with_table: bool) -> Vec<u8> {
        if with_table {
            eh_frame_hdr(eh, true)
        } else {
            let mut hdr = vec![1, 0x1b, 0x03, 0xff];
            hdr.extend_from_slice(&((EH as i64 - (HDR as i64 + 4)) as i32).to_le_bytes());
            hdr.extend_from_slice(&0u32.to_le_bytes());
            hdr
        }
    }

    fn slot(i: u64) -> u64 {
        STACK + 8 * i
    }

    fn ctx(rip: u64, rsp: u64) -> X64Context {
        let mut regs = [None; 16];
        for (i, r) in regs.iter_mut().enumerate() {
            *r = Some(0x1111 * (i as u64 + 1));
        }
        regs[x64_reg::RSP] = Some(rsp);
        X64Context { rip, regs }
    }

    /// The frame of F1 at F1+0x10: rsp at slot 0, CFA = rsp+32, saved rbx at CFA-24,
    /// rbp at CFA-16, return address at CFA-8 (pointing into F2's start).
    fn f1_stack() -> Vec<u64> {
        let mut s = vec![0u64; 16];
        s[1] = 0xb0b0; // rbx (slot 1 = CFA-24)
        s[2] = 0xbebe; // rbp (CFA-16)
        s[3] = BASE + F2; // return address (CFA-8)
        s
    }

    #[test]
    fn restores_rip_rsp_and_callee_saved_by_the_rules() {
        for with_table in [true, false] {
            let eh = eh_frame();
            let target = target_with(&eh, with_table, &f1_stack());
            let unw = NativeUnwinder::new(&target);
            let start = ctx(BASE + F1 + 0x10, slot(0));
            let next = unw
                .step_innermost(&start, &target)
                .expect("step")
                .expect("a caller");
            assert_eq!(next.rip, BASE + F2);
            assert_eq!(next.rsp(), slot(4), "rsp = CFA");
            assert_eq!(next.regs[x64_reg::RBX], Some(0xb0b0));
            assert_eq!(next.rbp(), Some(0xbebe));
            assert_eq!(
                next.regs[x64_reg::R12],
                start.regs[x64_reg::R12],
                "callee-saved without a rule keep their value"
            );
            for caller_saved in [x64_reg::RAX, x64_reg::RCX, x64_reg::RDX, x64_reg::RSI] {
                assert_eq!(next.regs[caller_saved], None);
            }
            // As a caller, F2 is looked up at F2 - 1, in F1 (CFA = slot 8, whose return
            // address slot 7 holds 0: the end of the stack); as innermost, it is F2,
            // whose return address is undefined. Both say: no caller.
            assert_eq!(unw.step(&next, &target).expect("F1 again"), None);
            assert_eq!(unw.step_innermost(&next, &target).expect("F2"), None);
            // Before F1's prologue: CFA = rsp + 8.
            let at_entry = unw
                .step_innermost(&ctx(BASE + F1, slot(3)), &target)
                .expect("step")
                .expect("caller");
            assert_eq!((at_entry.rip, at_entry.rsp()), (BASE + F2, slot(4)));
            assert_eq!(at_entry.rbp(), start.rbp(), "rbp not saved yet");
        }
    }

    #[test]
    fn a_return_address_is_looked_up_one_byte_back() {
        let eh = eh_frame();
        let mut stack = f1_stack();
        stack[7] = BASE + F1 + 0x20; // F1's frame at slot 4: CFA = slot 8
        let target = target_with(&eh, true, &stack);
        let unw = NativeUnwinder::new(&target);
        // A caller whose return address is the first byte of F2 (the call was F1's
        // last instruction): F1's rules apply.
        let caller = ctx(BASE + F2, slot(4));
        let next = unw.step(&caller, &target).expect("step").expect("caller");
        assert_eq!((next.rip, next.rsp()), (BASE + F1 + 0x20, slot(8)));
        let frame = NativeFrame {
            ctx: caller,
            ip_is_exact: false,
        };
        assert_eq!(frame.lookup_ip(), BASE + F2 - 1);
    }

    #[test]
    fn cfa_from_an_unknown_register_is_bad_unwind_data() {
        let target = target_with(&eh_frame(), true, &f1_stack());
        let unw = NativeUnwinder::new(&target);
        let mut c = ctx(BASE + F4 + 8, slot(0));
        c.regs[x64_reg::RBP] = Some(slot(2));
        let next = unw
            .step_innermost(&c, &target)
            .expect("step")
            .expect("caller");
        assert_eq!(next.rip, BASE + F2, "[rbp + 8]");
        assert_eq!(next.rsp(), slot(4), "rbp + 16");
        assert_eq!(next.rbp(), Some(0xbebe), "[rbp]");
        c.regs[x64_reg::RBP] = None;
        match unw.step_innermost(&c, &target) {
            Err(UnwindError::BadUnwindData { ip, detail }) => {
                assert_eq!(ip, BASE + F4 + 8);
                assert!(detail.contains("CFA register 6"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// A ucontext_t at slot `at` whose registers are `0x100 + i` for greg i, with rsp
    /// and rip of the interrupted frame.
    fn ucontext(stack: &mut [u64], at: usize, rsp: u64, rip: u64) {
        for i in 0..16 {
            stack[at + 5 + i] = 0x100 + i as u64;
        }
        stack[at + 5 + 15] = rsp;
        stack[at + 5 + 16] = rip;
    }

    fn check_interrupted(next: &X64Context, rsp: u64, rip: u64) {
        assert_eq!((next.rip, next.rsp()), (rip, rsp));
        for (i, reg) in GREGS_ORDER.iter().enumerate().take(15) {
            assert_eq!(next.regs[*reg], Some(0x100 + i as u64), "greg {i}");
        }
    }

    #[test]
    fn signal_frames_by_cfi_expressions_come_back_with_an_exact_ip() {
        // The handler returned to SIG+1 with rsp at the ucontext_t (slot 0); the
        // interrupted frame is at F1's first instruction, rsp at slot 40 (F1's return
        // address there).
        let mut stack = vec![0u64; 64];
        ucontext(&mut stack, 0, slot(40), BASE + F1);
        stack[40] = BASE + F2;
        let target = target_with(&eh_frame(), true, &stack);
        let unw = NativeUnwinder::new(&target);
        let handler_return = NativeFrame {
            ctx: ctx(BASE + SIG + 1, slot(0)),
            ip_is_exact: false,
        };
        let interrupted = unw
            .step_frame(&handler_return, &target)
            .expect("step")
            .expect("interrupted frame");
        assert!(interrupted.ip_is_exact, "a signal frame's caller is exact");
        check_interrupted(&interrupted.ctx, slot(40), BASE + F1);
        // Looked up at F1 itself (not F1 - 1, which no FDE covers): CFA = rsp + 8.
        let caller = unw
            .step_frame(&interrupted, &target)
            .expect("step")
            .expect("caller");
        assert_eq!((caller.ctx.rip, caller.ctx.rsp()), (BASE + F2, slot(41)));
        assert!(!caller.ip_is_exact);
        // The same frame taken for a return address finds no CFI at F1 - 1.
        let wrong = NativeFrame {
            ip_is_exact: false,
            ..interrupted
        };
        assert!(matches!(
            unw.step_frame(&wrong, &target),
            Err(UnwindError::NoUnwindInfo { .. })
        ));
    }

    #[test]
    fn a_trampoline_without_cfi_is_recognised_by_its_bytes() {
        let mut stack = vec![0u64; 64];
        ucontext(&mut stack, 0, slot(40), BASE + F1);
        let target = target_with(&eh_frame(), true, &stack);
        let unw = NativeUnwinder::new(&target);
        let next = unw
            .step_frame(
                &NativeFrame {
                    ctx: ctx(BASE + RESTORE, slot(0)),
                    ip_is_exact: false,
                },
                &target,
            )
            .expect("step")
            .expect("interrupted");
        assert!(next.ip_is_exact);
        check_interrupted(&next.ctx, slot(40), BASE + F1);
        // Elsewhere without CFI: no unwind info.
        assert!(matches!(
            unw.step_innermost(&ctx(BASE + RESTORE + 0x10, slot(0)), &target),
            Err(UnwindError::NoUnwindInfo { ip }) if ip == BASE + RESTORE + 0x10
        ));
        assert!(unw.is_in_module(BASE + RESTORE));
        assert!(!unw.is_in_module(STACK));
    }

    #[test]
    fn an_endless_expression_is_cut_off() {
        let target = target_with(&eh_frame(), true, &f1_stack());
        let unw = NativeUnwinder::new(&target);
        match unw.step_innermost(&ctx(BASE + LOOPING, slot(0)), &target) {
            Err(UnwindError::BadUnwindData { detail, .. }) => {
                assert!(detail.contains("expression"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// xorshift64*: deterministic noise.
    fn noise(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn random_bytes_as_eh_frame_give_typed_errors() {
        let mut next = noise(7);
        let intact_target = target_with(&eh_frame(), true, &f1_stack());
        let intact = NativeUnwinder::new(&intact_target);
        for round in 0..200 {
            let len = 8 + (next() % 600) as usize;
            let mut eh: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Half the time, a plausible length prefix so that parsing goes deeper.
            if round % 2 == 0 {
                eh[..4].copy_from_slice(&((len - 4) as u32).to_le_bytes());
                eh[4..8].copy_from_slice(&0u32.to_le_bytes());
            }
            let target = match round % 4 {
                // A search table of random entries over the random .eh_frame.
                1 => {
                    let mut hdr = vec![1, 0x1b, 0x03, 0x3b];
                    hdr.extend_from_slice(&((EH as i64 - (HDR as i64 + 4)) as i32).to_le_bytes());
                    hdr.extend_from_slice(&(next() as u32 % 64).to_le_bytes());
                    hdr.extend((0..(next() % 512)).map(|_| next() as u8));
                    target_with_hdr(&eh, &hdr, &f1_stack())
                }
                // A real .eh_frame cut short.
                3 => {
                    let real = eh_frame();
                    let cut = (next() as usize) % real.len();
                    let hdr = eh_frame_hdr(&real, true);
                    target_with_hdr(&real[..cut], &hdr, &f1_stack())
                }
                _ => target_with(&eh, false, &f1_stack()),
            };
            let unw = NativeUnwinder::new(&target);
            for ip in [F1 + 0x10, F2, SIG + 1] {
                let r = unw.step_innermost(&ctx(BASE + ip, slot(0)), &target);
                match r {
                    Err(UnwindError::NoUnwindInfo { .. } | UnwindError::BadUnwindData { .. }) => {}
                    // What a truncated .eh_frame still holds whole is right.
                    Ok(found) if round % 4 == 3 => assert_eq!(
                        found,
                        intact
                            .step_innermost(&ctx(BASE + ip, slot(0)), &intact_target)
                            .expect("intact CFI"),
                        "round {round}"
                    ),
                    other => panic!("round {round}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_stack_of_garbage_ends_in_typed_errors() {
        let mut next = noise(11);
        for round in 0..50 {
            let mut stack: Vec<u64> = (0..STACK_SIZE / 8).map(|_| next()).collect();
            // Some slots point back into the module, so that walks go on a while.
            for i in (0..stack.len()).step_by(3) {
                stack[i] = BASE + F1 + (stack[i] % 0x100);
            }
            let target = target_with(&eh_frame(), true, &stack);
            let unw = NativeUnwinder::new(&target);
            let mut frame = NativeFrame::innermost(ctx(BASE + F1 + 0x10, slot(0)));
            let mut steps = 0;
            let end = loop {
                steps += 1;
                assert!(steps < STACK_SIZE, "round {round}: no end");
                match unw.step_frame(&frame, &target) {
                    Ok(Some(f)) => frame = f,
                    other => break other,
                }
            };
            assert!(
                matches!(
                    end,
                    Err(UnwindError::NoUnwindInfo { .. }
                        | UnwindError::Read(_)
                        | UnwindError::BadUnwindData { .. }
                        | UnwindError::NotProgressing { .. })
                        | Ok(None)
                ),
                "round {round}: {end:?}"
            );
        }
    }

    #[test]
    fn debug_frame_is_used_where_eh_frame_has_no_fde() {
        // .eh_frame without an FDE for F1 (only F2), .debug_frame with F1's.
        let mut eh_table = FrameTable::default();
        let cie = CommonInformationEntry::new(encoding(), 1, -8, X86_64::RA);
        let cie_id = eh_table.add_cie(cie.clone());
        let mut f2 = FrameDescriptionEntry::new(Address::Constant(F2), 0x100);
        f2.add_instruction(0, I::Undefined(X86_64::RA));
        eh_table.add_fde(cie_id, f2);
        let mut eh = write::EhFrame(EndianVec::new(LittleEndian));
        eh_table.write_eh_frame(&mut eh).expect("eh_frame");

        let mut debug_table = FrameTable::default();
        let mut dcie = CommonInformationEntry::new(
            gimli::Encoding {
                version: 4,
                ..encoding()
            },
            1,
            -8,
            X86_64::RA,
        );
        dcie.add_instruction(I::Cfa(X86_64::RSP, 8));
        dcie.add_instruction(I::Offset(X86_64::RA, -8));
        let dcie = debug_table.add_cie(dcie);
        let mut f1 = FrameDescriptionEntry::new(Address::Constant(F1), 0x100);
        f1.add_instruction(4, I::CfaOffset(16));
        f1.add_instruction(4, I::Offset(X86_64::RBP, -16));
        debug_table.add_fde(dcie, f1);
        let mut df = write::DebugFrame(EndianVec::new(LittleEndian));
        debug_table.write_debug_frame(&mut df).expect("debug_frame");

        let cfi = ModuleCfi::new(
            BASE,
            Some(Section {
                addr: EH,
                data: eh.0.into_vec(),
            }),
            None,
            Some(Section {
                addr: 0,
                data: df.0.into_vec(),
            }),
        );
        let mut stack = vec![0u64; 8];
        stack[0] = 0xbebe;
        stack[1] = BASE + F2;
        let target = target_with(&eh_frame(), true, &stack);
        let c = ctx(BASE + F1 + 8, slot(0));
        match step_by_cfi(&cfi, c.rip, &c, &target).expect("step") {
            Some(Stepped::Caller(next, false)) => {
                assert_eq!(
                    (next.rip, next.rsp(), next.rbp()),
                    (BASE + F2, slot(2), Some(0xbebe))
                );
            }
            _ => panic!("no caller from .debug_frame"),
        }
        assert!(matches!(
            step_by_cfi(&cfi, BASE + F2, &c, &target),
            Ok(Some(Stepped::Outermost))
        ));
        assert!(matches!(
            step_by_cfi(&cfi, BASE + 0x3000, &c, &target),
            Ok(None)
        ));
    }

    #[test]
    fn unwinder_and_symbols_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<NativeUnwinder>();
        check::<crate::symbols::ElfSymbols>();
    }

    #[test]
    fn frame_pointer_chain_and_its_cycles() {
        // slot 4: [rbp] = slot 8, ret F1; slot 8: [rbp] = slot 4 (a cycle), ret F1.
        let mut stack = vec![0u64; 16];
        stack[4] = slot(8);
        stack[5] = BASE + F1;
        stack[8] = slot(4);
        stack[9] = BASE + F1 + 1;
        stack[12] = slot(12); // a frame pointing at itself
        stack[13] = BASE + F1 + 2;
        let target = target_with(&eh_frame(), true, &stack);
        let c = X64Context::new(0x1234, slot(0), Some(slot(4)));
        let one = NativeUnwinder::step_frame_pointer(&c, &target)
            .expect("step")
            .expect("caller");
        assert_eq!(one, X64Context::new(BASE + F1, slot(6), Some(slot(8))));
        let two = NativeUnwinder::step_frame_pointer(&one, &target)
            .expect("step")
            .expect("caller");
        assert_eq!(two, X64Context::new(BASE + F1 + 1, slot(10), Some(slot(4))));
        assert!(matches!(
            NativeUnwinder::step_frame_pointer(&two, &target),
            Err(UnwindError::NotProgressing { sp, .. }) if sp == slot(6)
        ));
        let own = X64Context::new(0x1234, slot(11), Some(slot(12)));
        let once = NativeUnwinder::step_frame_pointer(&own, &target)
            .expect("step")
            .expect("caller");
        assert!(matches!(
            NativeUnwinder::step_frame_pointer(&once, &target),
            Err(UnwindError::NotProgressing { .. })
        ));
        // No rbp, a misaligned one, and one off the stack.
        for rbp in [None, Some(slot(4) + 1), Some(0x10)] {
            let c = X64Context::new(0x1234, slot(0), rbp);
            let r = NativeUnwinder::step_frame_pointer(&c, &target);
            assert!(
                matches!(
                    r,
                    Err(UnwindError::NoUnwindInfo { .. } | UnwindError::NotProgressing { .. })
                ),
                "{rbp:?}: {r:?}"
            );
        }
        let c = X64Context::new(0x1234, 0x10, Some(0x8000_0000));
        assert!(matches!(
            NativeUnwinder::step_frame_pointer(&c, &target),
            Err(UnwindError::Read(_))
        ));
    }
}
