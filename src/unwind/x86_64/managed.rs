//! One unwind step through a managed x64 frame, with the runtime's own unwind data: the
//! Windows x64 `RUNTIME_FUNCTION` / `UNWIND_INFO` that the JIT and crossgen2 emit on every
//! operating system.
//!
//! The rules are those of the Windows x64 virtual unwinder (which the runtime and the cDAC
//! follow):
//! - the function is the `RUNTIME_FUNCTION` that covers the IP (the method's main body or
//!   one of its funclets); chained entries (flag 4) continue with the entry they name;
//! - the establisher frame is rsp, or, once the frame register is set up, the frame
//!   register minus its scaled offset;
//! - when the IP is in an epilog (optionally `add rsp, imm` or `lea rsp, [fp+disp]`, then
//!   `pop`s of registers, then `ret` or a jump out of the function), the rest of the epilog
//!   is emulated instead of reading the unwind codes;
//! - otherwise the unwind codes are undone in order, skipping those of prolog instructions
//!   that have not run yet (code offset above the IP's offset in the prolog);
//! - last, the return address is popped (unless a machine frame gave rip and rsp).
//!
//! Only rsp, rip and the callee-saved registers are meaningful in the caller's context;
//! volatile registers are unknown unless the unwind data restored them.

use crate::contracts::execution_manager::{CodeBlock, ExecutionManager};
use crate::contracts::runtime_function::{RuntimeFunction as Entry, RuntimeFunctionLayout};
use crate::contracts::unwind_codes::{op, X64UnwindInfo, UNW_FLAG_CHAININFO};
use crate::contracts::ContractError;
use crate::memory::Target;
use crate::unwind::{x64_reg, StackMemory, UnwindError, X64Context};

/// Most chained entries followed (the runtime's unwinder stops at 32 too).
const MAX_CHAIN: usize = 32;
/// Registers callee-saved in the System V x64 ABI that managed code on Unix follows (and
/// rsp): kept from the frame's context into its caller's.
const NONVOLATILE: [usize; 7] = [
    x64_reg::RBX,
    x64_reg::RSP,
    x64_reg::RBP,
    x64_reg::R12,
    13,
    14,
    x64_reg::R15,
];

/// A `RUNTIME_FUNCTION` (read by [`crate::contracts::runtime_function`]), its addresses
/// made absolute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeFunction {
    /// First byte of the function (or funclet, or cold part).
    pub begin: u64,
    /// One past its last byte.
    pub end: u64,
    /// Its `UNWIND_INFO`.
    pub unwind_info: u64,
}

impl RuntimeFunction {
    /// Reads the 12-byte x64 `RUNTIME_FUNCTION` at `addr`, whose RVAs are relative to
    /// `base`.
    pub fn read(code: &Target, base: u64, addr: u64) -> Result<RuntimeFunction, UnwindError> {
        let entry = Entry::read(code, &RuntimeFunctionLayout::X64, addr).map_err(|e| match e {
            // A failed read stays a read error of the unwinder.
            ContractError::Read(r) => UnwindError::Read(r),
            other => UnwindError::Contract(other),
        })?;
        let rva = |v: u32| base.wrapping_add(u64::from(v));
        Ok(RuntimeFunction {
            begin: rva(entry.begin),
            // The x64 layout always has an end.
            end: rva(entry.end.unwrap_or(entry.begin)),
            unwind_info: rva(entry.unwind_data),
        })
    }
}

/// An x64 `UNWIND_INFO` (read by [`X64UnwindInfo`]) and the chained entry it names.
#[derive(Debug, Clone)]
struct UnwindInfo {
    raw: X64UnwindInfo,
    /// The chained entry, when flag 4 is set.
    chained: Option<RuntimeFunction>,
}

impl std::ops::Deref for UnwindInfo {
    type Target = X64UnwindInfo;
    fn deref(&self) -> &X64UnwindInfo {
        &self.raw
    }
}

fn bad(ip: u64, detail: impl Into<String>) -> UnwindError {
    UnwindError::BadUnwindData {
        ip,
        detail: detail.into(),
    }
}

/// The unwind-info reader's errors as the unwinder's: bad data for this IP, reads as reads.
fn at_ip(ip: u64) -> impl Fn(ContractError) -> UnwindError {
    move |e| match e {
        ContractError::Corrupt { detail, .. } => bad(ip, detail),
        ContractError::Read(r) => UnwindError::Read(r),
        other => UnwindError::Contract(other),
    }
}

impl UnwindInfo {
    fn read(code: &Target, base: u64, addr: u64, ip: u64) -> Result<UnwindInfo, UnwindError> {
        let raw = X64UnwindInfo::read(code, addr).map_err(at_ip(ip))?;
        if !(1..=2).contains(&raw.version) {
            return Err(bad(
                ip,
                format!("UNWIND_INFO at {addr:#x} has version {}", raw.version),
            ));
        }
        let chained = match raw.chained_entry() {
            Some(entry) => Some(RuntimeFunction::read(code, base, entry)?),
            None => None,
        };
        Ok(UnwindInfo { raw, chained })
    }

    /// Slot `i` as a number, or an error when the codes end first.
    fn slot(&self, i: usize, ip: u64) -> Result<u64, UnwindError> {
        self.raw.slot(i).map_err(at_ip(ip))
    }

    /// How many slots the operation at slot `i` takes.
    fn slots_of(&self, i: usize, ip: u64) -> Result<usize, UnwindError> {
        self.raw.slots_of(i).map_err(at_ip(ip))
    }

    /// The frame offset in bytes.
    fn frame_offset_bytes(&self, ip: u64) -> Result<u64, UnwindError> {
        self.raw.frame_offset_bytes().map_err(at_ip(ip))
    }

    /// Code offset of the instruction that set the frame register, if there is one.
    fn set_fpreg_offset(&self, ip: u64) -> Result<Option<u8>, UnwindError> {
        self.raw.set_fpreg_offset().map_err(at_ip(ip))
    }
}

/// The value of register `r`, or an error naming it when unknown.
fn reg(ctx: &X64Context, r: usize) -> Result<u64, UnwindError> {
    ctx.regs
        .get(r)
        .copied()
        .flatten()
        .ok_or_else(|| bad(ctx.rip, format!("register {r} is needed but unknown")))
}

/// Reads code bytes at the IP for epilog detection. Code that cannot be read (a dump
/// without it) is taken as not being an epilog.
struct CodeBytes<'a> {
    code: &'a Target,
    start: u64,
    bytes: Vec<u8>,
}

impl<'a> CodeBytes<'a> {
    /// Up to 64 bytes from `ip` (an epilog is at most ~35 bytes: lea, 8 two-byte pops,
    /// a six-byte jump).
    fn new(code: &'a Target, ip: u64) -> CodeBytes<'a> {
        let mut bytes = Vec::new();
        for len in [64usize, 32, 16, 8] {
            if let Ok(b) = code.read_bytes(ip, len) {
                bytes = b;
                break;
            }
        }
        CodeBytes {
            code,
            start: ip,
            bytes,
        }
    }

    fn at(&self, addr: u64) -> Option<u8> {
        let i = usize::try_from(addr.checked_sub(self.start)?).ok()?;
        match self.bytes.get(i) {
            Some(&b) => Some(b),
            None => self.code.read_u8(addr).ok(),
        }
    }

    fn i32_at(&self, addr: u64) -> Option<i32> {
        Some(i32::from_le_bytes([
            self.at(addr)?,
            self.at(addr.wrapping_add(1))?,
            self.at(addr.wrapping_add(2))?,
            self.at(addr.wrapping_add(3))?,
        ]))
    }
}

fn is_rex(b: u8) -> bool {
    b & 0xf0 == 0x40
}

/// The stack adjustment an epilog starts with, decoded at `addr`: its length and what it
/// does to rsp.
enum StackAdjust {
    /// `add rsp, imm`.
    Add(i64),
    /// `lea rsp, [frame register + disp]`.
    Lea(usize, i64),
}

fn stack_adjust(c: &CodeBytes<'_>, addr: u64, frame_register: usize) -> Option<(u64, StackAdjust)> {
    let b0 = c.at(addr)?;
    let b1 = c.at(addr.wrapping_add(1))?;
    let b2 = c.at(addr.wrapping_add(2))?;
    if b0 == 0x48 && b1 == 0x83 && b2 == 0xc4 {
        return Some((
            4,
            StackAdjust::Add(i64::from(c.at(addr.wrapping_add(3))? as i8)),
        ));
    }
    if b0 == 0x48 && b1 == 0x81 && b2 == 0xc4 {
        return Some((
            7,
            StackAdjust::Add(i64::from(c.i32_at(addr.wrapping_add(3))?)),
        ));
    }
    if b0 & 0xfe == 0x48 && b1 == 0x8d {
        let fp = usize::from(((b0 & 1) << 3) | (b2 & 7));
        if fp != 0 && fp == frame_register {
            // ModRM: mod 01 (disp8) or 10 (disp32), reg 100 (rsp).
            if b2 & 0xf8 == 0x60 {
                return Some((
                    4,
                    StackAdjust::Lea(fp, i64::from(c.at(addr.wrapping_add(3))? as i8)),
                ));
            }
            if b2 & 0xf8 == 0xa0 {
                return Some((
                    7,
                    StackAdjust::Lea(fp, i64::from(c.i32_at(addr.wrapping_add(3))?)),
                ));
            }
        }
    }
    None
}

/// The register a `pop` at `addr` restores, and its length.
fn pop_at(c: &CodeBytes<'_>, addr: u64) -> Option<(u64, usize)> {
    let b0 = c.at(addr)?;
    if b0 & 0xf8 == 0x58 {
        return Some((1, usize::from(b0 & 7)));
    }
    if is_rex(b0) {
        let b1 = c.at(addr.wrapping_add(1))?;
        if b1 & 0xf8 == 0x58 {
            return Some((2, usize::from(((b0 & 1) << 3) | (b1 & 7))));
        }
    }
    None
}

/// Whether the IP is in an epilog of `func`: (optional stack adjustment) pops
/// (ret | jump out of the function). `same_function` says whether a jump target is
/// another part (cold code, funclet) of the same method.
fn in_epilog(
    c: &CodeBytes<'_>,
    func: &RuntimeFunction,
    info: &UnwindInfo,
    same_function: &dyn Fn(u64) -> bool,
) -> bool {
    let mut at = c.start;
    if let Some((len, _)) = stack_adjust(c, at, info.frame_register) {
        at = at.wrapping_add(len);
    }
    for _ in 0..16 {
        match pop_at(c, at) {
            Some((len, _)) => at += len,
            None => break,
        }
    }
    if c.at(at) == Some(0xf2) {
        at = at.wrapping_add(1);
    }
    let Some(b0) = c.at(at) else { return false };
    let b1 = c.at(at.wrapping_add(1));
    match b0 {
        0xc3 | 0xc2 => true,
        0xf3 => b1 == Some(0xc3),
        0xeb | 0xe9 => {
            let target = if b0 == 0xeb {
                b1.map(|d| at.wrapping_add(2).wrapping_add_signed(i64::from(d as i8)))
            } else {
                c.i32_at(at.wrapping_add(1))
                    .map(|d| at.wrapping_add(5).wrapping_add_signed(i64::from(d)))
            };
            let Some(target) = target else { return false };
            if target < func.begin || target >= func.end {
                !same_function(target)
            } else {
                target == func.begin && info.flags & UNW_FLAG_CHAININFO == 0
            }
        }
        0xff => b1 == Some(0x25),
        _ if b0 & 0xf8 == 0x48 => {
            b1 == Some(0xff) && c.at(at.wrapping_add(2)).is_some_and(|m| m & 0x38 == 0x20)
        }
        _ => false,
    }
}

/// Runs the rest of the epilog at the IP: the stack adjustment, the pops, the return.
fn emulate_epilog(
    c: &CodeBytes<'_>,
    info: &UnwindInfo,
    out: &mut X64Context,
    restored: &mut [bool; 16],
    mem: &dyn StackMemory,
) -> Result<(), UnwindError> {
    let mut at = c.start;
    let mut rsp = reg(out, x64_reg::RSP)?;
    if let Some((len, adjust)) = stack_adjust(c, at, info.frame_register) {
        rsp = match adjust {
            StackAdjust::Add(n) => rsp.wrapping_add_signed(n),
            StackAdjust::Lea(fp, n) => reg(out, fp)?.wrapping_add_signed(n),
        };
        at = at.wrapping_add(len);
    }
    for _ in 0..16 {
        let Some((len, r)) = pop_at(c, at) else { break };
        out.regs[r] = Some(mem.read_u64(rsp)?);
        restored[r] = true;
        rsp = rsp.wrapping_add(8);
        at = at.wrapping_add(len);
    }
    out.rip = mem.read_u64(rsp)?;
    out.regs[x64_reg::RSP] = Some(rsp.wrapping_add(8));
    Ok(())
}

/// The caller's context of the frame `ctx` in the function whose `RUNTIME_FUNCTION` is at
/// `function_entry` (RVAs relative to `image_base`), by the Windows x64 rules (see the
/// module documentation). `code` holds the unwind data and the code; `mem` the stack.
/// `same_function` says whether an address outside the entry belongs to the same method
/// (a jump there is not a tail call).
pub fn virtual_unwind(
    code: &Target,
    image_base: u64,
    function_entry: u64,
    ctx: &X64Context,
    mem: &dyn StackMemory,
    same_function: &dyn Fn(u64) -> bool,
) -> Result<X64Context, UnwindError> {
    let ip = ctx.rip;
    let func = RuntimeFunction::read(code, image_base, function_entry)?;
    if ip < func.begin || func.end <= func.begin {
        return Err(bad(
            ip,
            format!(
                "RUNTIME_FUNCTION at {function_entry:#x} covers [{:#x}, {:#x})",
                func.begin, func.end
            ),
        ));
    }
    let info = UnwindInfo::read(code, image_base, func.unwind_info, ip)?;
    let prolog_offset = ip - func.begin;

    // The establisher frame: where UWOP_SAVE_NONVOL offsets count from (worked out only
    // when needed: an epilog may have popped the frame register already).
    let establisher = || -> Result<u64, UnwindError> {
        if info.frame_register == 0 {
            return reg(ctx, x64_reg::RSP);
        }
        let established = prolog_offset >= u64::from(info.prolog_size)
            || info.chained.is_some()
            || info
                .set_fpreg_offset(ip)?
                .is_some_and(|off| prolog_offset >= u64::from(off));
        if established {
            Ok(reg(ctx, info.frame_register)?.wrapping_sub(info.frame_offset_bytes(ip)?))
        } else {
            reg(ctx, x64_reg::RSP)
        }
    };

    // The registers as they are being unwound, and which ones the unwind data restored.
    let mut out = *ctx;
    let mut restored = [false; 16];

    if info.version < 2 {
        let c = CodeBytes::new(code, ip);
        if in_epilog(&c, &func, &info, same_function) {
            emulate_epilog(&c, &info, &mut out, &mut restored, mem)?;
            return Ok(caller_registers(out, restored));
        }
    }

    // Undo the prolog, following chained entries.
    let mut rsp = reg(ctx, x64_reg::RSP)?;
    let mut machine_frame = false;
    let mut current = info.clone();
    let mut current_offset = prolog_offset;
    for depth in 0.. {
        let mut i = 0;
        // Skip the codes of prolog instructions that have not run yet.
        while i < current.slots.len() && current_offset < u64::from(current.code(i).0) {
            i += current.slots_of(i, ip)?;
        }
        while i < current.slots.len() {
            let (_, o, opinfo) = current.code(i);
            let r = usize::from(opinfo);
            match o {
                op::PUSH_NONVOL => {
                    out.regs[r] = Some(mem.read_u64(rsp)?);
                    restored[r] = true;
                    rsp = rsp.wrapping_add(8);
                }
                op::ALLOC_LARGE => {
                    let size = if opinfo == 0 {
                        current.slot(i + 1, ip)? * 8
                    } else {
                        current.slot(i + 1, ip)? | (current.slot(i + 2, ip)? << 16)
                    };
                    rsp = rsp.wrapping_add(size);
                }
                op::ALLOC_SMALL => rsp = rsp.wrapping_add(u64::from(opinfo) * 8 + 8),
                op::SET_FPREG => {
                    if current.frame_register == 0 {
                        return Err(bad(ip, "UWOP_SET_FPREG without a frame register"));
                    }
                    rsp =
                        reg(&out, current.frame_register)?.wrapping_sub(current.frame_offset * 16);
                }
                op::SET_FPREG_LARGE => {
                    if current.frame_register == 0 {
                        return Err(bad(ip, "UWOP_SET_FPREG_LARGE without a frame register"));
                    }
                    let off = current.slot(i + 1, ip)? | (current.slot(i + 2, ip)? << 16);
                    rsp = reg(&out, current.frame_register)?.wrapping_sub(off * 16);
                }
                op::SAVE_NONVOL => {
                    let off = current.slot(i + 1, ip)? * 8;
                    out.regs[r] = Some(mem.read_u64(establisher()?.wrapping_add(off))?);
                    restored[r] = true;
                }
                op::SAVE_NONVOL_FAR => {
                    let off = current.slot(i + 1, ip)? | (current.slot(i + 2, ip)? << 16);
                    out.regs[r] = Some(mem.read_u64(establisher()?.wrapping_add(off))?);
                    restored[r] = true;
                }
                op::PUSH_MACHFRAME => {
                    let frame = if opinfo != 0 {
                        rsp.wrapping_add(8)
                    } else {
                        rsp
                    };
                    out.rip = mem.read_u64(frame)?;
                    rsp = mem.read_u64(frame.wrapping_add(24))?;
                    machine_frame = true;
                }
                // xmm saves (no xmm state kept), version 2 epilog descriptions.
                _ => {}
            }
            out.regs[x64_reg::RSP] = Some(rsp);
            i += current.slots_of(i, ip)?;
        }
        let Some(next) = current.chained else { break };
        if depth + 1 >= MAX_CHAIN {
            return Err(bad(
                ip,
                format!("more than {MAX_CHAIN} chained unwind entries"),
            ));
        }
        current = UnwindInfo::read(code, image_base, next.unwind_info, ip)?;
        current_offset = ip.wrapping_sub(next.begin);
    }
    if !machine_frame {
        out.rip = mem.read_u64(rsp)?;
        rsp = rsp.wrapping_add(8);
    }
    out.regs[x64_reg::RSP] = Some(rsp);
    Ok(caller_registers(out, restored))
}

/// The caller's context from the unwound registers: rip, rsp, the callee-saved registers,
/// and any other register the unwind data restored; the rest unknown.
fn caller_registers(unwound: X64Context, restored: [bool; 16]) -> X64Context {
    let mut out = X64Context {
        rip: unwound.rip,
        regs: [None; 16],
    };
    for (r, (slot, value)) in out.regs.iter_mut().zip(unwound.regs).enumerate() {
        if restored[r] || NONVOLATILE.contains(&r) {
            *slot = value;
        }
    }
    out
}

/// The caller's context of a managed frame: `ctx` is the frame's registers (rip inside
/// `block`, the method's code found by the ExecutionManager), `mem` the stack. Unwinds with
/// the `RUNTIME_FUNCTION` covering the IP (method body or funclet) and checks that the
/// step moves up the stack.
pub fn step_managed(
    target: &Target,
    em: &dyn ExecutionManager,
    block: &CodeBlock,
    ctx: &X64Context,
    mem: &dyn StackMemory,
) -> Result<X64Context, UnwindError> {
    let ip = ctx.rip;
    let entry = em
        .unwind_info(block)?
        .ok_or(UnwindError::NoUnwindInfo { ip })?;
    let base = em.unwind_info_base_address(block);
    let same_function = |addr: u64| {
        em.code_block(addr)
            .ok()
            .flatten()
            .is_some_and(|b| b.method_desc == block.method_desc && b.start == block.start)
    };
    let caller = virtual_unwind(target, base, entry, ctx, mem, &same_function)?;
    let sp = caller.rsp();
    if sp <= ctx.rsp() {
        return Err(UnwindError::NotProgressing { ip, sp });
    }
    Ok(caller)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    const BASE: u64 = 0x10_0000;
    /// RVA of the RUNTIME_FUNCTION, the UNWIND_INFO, and the function.
    const RF: u64 = 0x10;
    const UI: u64 = 0x100;
    const CODE: u64 = 0x1000;
    const CODE_LEN: u64 = 0x100;
    /// The caller's rsp (after the return) and the return address.
    const S: u64 = 0x7000_0800;
    const RA: u64 = 0x4242_4242;

    fn code_op(offset: u8, op: u8, info: u8) -> u16 {
        u16::from(offset) | (u16::from(op) << 8) | (u16::from(info) << 12)
    }

    /// A target with one function: its unwind header `[version|flags, prolog, count,
    /// frame]`, code slots, code bytes (padded with int3), and stack slots.
    fn target(header: [u8; 4], slots: &[u16], code: &[u8], stack: &[(u64, u64)]) -> Target {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(BASE, 0x2000);
        r.u32(RF as usize, CODE as u32)
            .u32(RF as usize + 4, (CODE + CODE_LEN) as u32)
            .u32(RF as usize + 8, UI as u32);
        r.bytes(UI as usize, &header);
        for (i, s) in slots.iter().enumerate() {
            r.u16(UI as usize + 4 + 2 * i, *s);
        }
        r.bytes(CODE as usize, &[0xcc; CODE_LEN as usize]);
        r.bytes(CODE as usize, code);
        let st = b.region(S - 0x400, 0x800);
        for &(addr, v) in stack {
            st.u64((addr - (S - 0x400)) as usize, v);
        }
        b.into_target()
    }

    fn unwind(t: &Target, ctx: &X64Context) -> Result<X64Context, UnwindError> {
        virtual_unwind(t, BASE, BASE + RF, ctx, t, &|_| false)
    }

    fn ctx(offset: u64, rsp: u64, set: &[(usize, u64)]) -> X64Context {
        let mut c = X64Context::new(BASE + CODE + offset, rsp, None);
        for &(r, v) in set {
            c.regs[r] = Some(v);
        }
        c
    }

    /// JIT-style frame: push rbp; push rbx; sub rsp, 0x28; lea rbp, [rsp+0x20]; body;
    /// epilog lea rsp, [rbp+8]; pop rbx; pop rbp; ret.
    fn rbp_frame() -> Target {
        let mut code = vec![
            0x55, 0x53, 0x48, 0x83, 0xec, 0x28, 0x48, 0x8d, 0x6c, 0x24, 0x20,
        ];
        code.resize(30, 0x90);
        code.extend([0x48, 0x8d, 0x65, 0x08, 0x5b, 0x5d, 0xc3]);
        target(
            [0x01, 11, 4, 0x25],
            &[
                code_op(11, op::SET_FPREG, 0),
                code_op(6, op::ALLOC_SMALL, 4),
                code_op(2, op::PUSH_NONVOL, 3),
                code_op(1, op::PUSH_NONVOL, 5),
            ],
            &code,
            &[(S - 8, RA), (S - 16, 0xbbbb), (S - 24, 0x3333)],
        )
    }

    fn expect_caller(out: &X64Context) {
        assert_eq!(out.rip, RA);
        assert_eq!(out.rsp(), S);
        assert_eq!(out.rbp(), Some(0xbbbb));
        assert_eq!(out.regs[x64_reg::RBX], Some(0x3333));
    }

    #[test]
    fn body_uses_the_frame_register() {
        let t = rbp_frame();
        // rsp moved below the fixed frame (a localloc): only rbp locates the frame.
        let c = ctx(
            20,
            S - 64 - 0x40,
            &[
                (x64_reg::RBP, S - 32),
                (x64_reg::RAX, 7),
                (x64_reg::R12, 12),
            ],
        );
        let out = unwind(&t, &c).unwrap();
        expect_caller(&out);
        assert_eq!(
            out.regs[x64_reg::RAX],
            None,
            "volatile registers are unknown"
        );
        assert_eq!(
            out.regs[x64_reg::R12],
            Some(12),
            "untouched callee-saved kept"
        );
    }

    #[test]
    fn prolog_partway() {
        let t = rbp_frame();
        // After push rbp: only that push is undone.
        let out = unwind(&t, &ctx(1, S - 16, &[(x64_reg::RBX, 0x3333)])).unwrap();
        expect_caller(&out);
        // After both pushes.
        let out = unwind(&t, &ctx(2, S - 24, &[])).unwrap();
        expect_caller(&out);
        // After sub rsp, before lea rbp: rbp still the caller's (any value).
        let out = unwind(&t, &ctx(6, S - 64, &[(x64_reg::RBP, 0xdead)])).unwrap();
        expect_caller(&out);
        // At the first instruction: nothing done but the call.
        let out = unwind(
            &t,
            &ctx(0, S - 8, &[(x64_reg::RBP, 0xbbbb), (x64_reg::RBX, 0x3333)]),
        )
        .unwrap();
        expect_caller(&out);
    }

    #[test]
    fn epilog_is_emulated() {
        let t = rbp_frame();
        // At lea rsp, [rbp+8]: rsp anywhere, rbp the frame's.
        let out = unwind(&t, &ctx(30, S - 200, &[(x64_reg::RBP, S - 32)])).unwrap();
        expect_caller(&out);
        // At pop rbp: rbx already restored.
        let out = unwind(&t, &ctx(35, S - 16, &[(x64_reg::RBX, 0x3333)])).unwrap();
        expect_caller(&out);
        // At ret.
        let out = unwind(
            &t,
            &ctx(36, S - 8, &[(x64_reg::RBX, 0x3333), (x64_reg::RBP, 0xbbbb)]),
        )
        .unwrap();
        expect_caller(&out);
    }

    #[test]
    fn epilog_with_add_and_tail_jump() {
        // push r12; sub rsp, 0x20; ...; add rsp, 0x20; pop r12; jmp far away.
        let mut code = vec![0x41, 0x54, 0x48, 0x83, 0xec, 0x20];
        code.resize(16, 0x90);
        code.extend([
            0x48, 0x83, 0xc4, 0x20, 0x41, 0x5c, 0xe9, 0x00, 0x10, 0x00, 0x00,
        ]);
        let t = target(
            [0x01, 6, 2, 0x00],
            &[
                code_op(6, op::ALLOC_SMALL, 3),
                code_op(2, op::PUSH_NONVOL, 12),
            ],
            &code,
            &[(S - 8, RA), (S - 16, 0x1212)],
        );
        let out = unwind(&t, &ctx(16, S - 48, &[])).unwrap();
        assert_eq!((out.rip, out.rsp(), out.regs[12]), (RA, S, Some(0x1212)));
        // The same from the body (codes, not emulation).
        let out = unwind(&t, &ctx(10, S - 48, &[])).unwrap();
        assert_eq!((out.rip, out.rsp(), out.regs[12]), (RA, S, Some(0x1212)));
        // A jump inside the function is not an epilog: at `add` followed by a jump back,
        // the codes apply (rsp is the body's).
        let mut code2 = code.clone();
        code2[22..27].copy_from_slice(&[0xe9, 0xf0, 0xff, 0xff, 0xff]);
        let t2 = target(
            [0x01, 6, 2, 0x00],
            &[
                code_op(6, op::ALLOC_SMALL, 3),
                code_op(2, op::PUSH_NONVOL, 12),
            ],
            &code2,
            &[(S - 8, RA), (S - 16, 0x1212)],
        );
        let out = unwind(&t2, &ctx(16, S - 48, &[])).unwrap();
        assert_eq!((out.rip, out.rsp()), (RA, S));
        // ...while the same bytes read as an epilog would have popped at S - 48 + 0x20.
    }

    #[test]
    fn alloc_large_and_save_nonvol() {
        // sub rsp, 0x12340 (ALLOC_LARGE info 0); mov [rsp+0x10], rbx (SAVE_NONVOL).
        let frame = 0x12340u64;
        let mut code = vec![0x48, 0x81, 0xec, 0x40, 0x23, 0x01, 0x00];
        code.extend([0x48, 0x89, 0x5c, 0x24, 0x10]);
        code.resize(32, 0x90);
        let rsp = S - 8 - frame;
        let t = {
            let mut mb = MemoryBuilder::new(DataLayout::LE64);
            let r = mb.region(BASE, 0x2000);
            r.u32(RF as usize, CODE as u32)
                .u32(RF as usize + 4, (CODE + CODE_LEN) as u32)
                .u32(RF as usize + 8, UI as u32);
            r.bytes(UI as usize, &[0x01, 12, 4, 0x00]);
            for (i, s) in [
                code_op(12, op::SAVE_NONVOL, 3),
                (0x10 / 8) as u16,
                code_op(7, op::ALLOC_LARGE, 0),
                (frame / 8) as u16,
            ]
            .iter()
            .enumerate()
            {
                r.u16(UI as usize + 4 + 2 * i, *s);
            }
            r.bytes(CODE as usize, &code);
            let st = mb.region(rsp, (frame + 8) as usize);
            st.u64(0x10, 0x3b3b);
            st.u64(frame as usize, RA);
            mb.into_target()
        };
        let out = unwind(&t, &ctx(20, rsp, &[])).unwrap();
        assert_eq!(
            (out.rip, out.rsp(), out.regs[x64_reg::RBX]),
            (RA, S, Some(0x3b3b))
        );
        // Before the save ran, rbx is not restored (it still holds the caller's value).
        let out = unwind(&t, &ctx(7, rsp, &[(x64_reg::RBX, 0x77)])).unwrap();
        assert_eq!(
            (out.rip, out.rsp(), out.regs[x64_reg::RBX]),
            (RA, S, Some(0x77))
        );
    }

    #[test]
    fn alloc_large_32_bit_size() {
        let size = 0x0012_3458u64;
        let t = target(
            [0x01, 0, 3, 0x00],
            &[
                code_op(0, op::ALLOC_LARGE, 1),
                (size & 0xffff) as u16,
                (size >> 16) as u16,
            ],
            &[0x90; 8],
            &[],
        );
        let rsp = S - 8 - size;
        // Below the stack: nothing there.
        let err = unwind(&t, &ctx(4, rsp - 0x100_0000, &[])).unwrap_err();
        assert!(matches!(err, UnwindError::Read(_)), "{err}");
        // The return address found where the size says.
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(BASE, 0x2000);
        r.u32(RF as usize, CODE as u32)
            .u32(RF as usize + 4, (CODE + CODE_LEN) as u32)
            .u32(RF as usize + 8, UI as u32);
        r.bytes(UI as usize, &[0x01, 0, 3, 0x00]);
        r.u16(UI as usize + 4, code_op(0, op::ALLOC_LARGE, 1))
            .u16(UI as usize + 6, (size & 0xffff) as u16)
            .u16(UI as usize + 8, (size >> 16) as u16);
        r.bytes(CODE as usize, &[0x90; 8]);
        b.region(S - 8, 8).u64(0, RA);
        let t = b.into_target();
        let out = unwind(&t, &ctx(4, rsp, &[])).unwrap();
        assert_eq!((out.rip, out.rsp()), (RA, S));
    }

    #[test]
    fn machine_frame() {
        // An interrupt frame: rip, cs, eflags, rsp, ss at rsp (after an error code).
        for (info, skip) in [(0u8, 0u64), (1, 8)] {
            let base = S - 0x100;
            let t = target(
                [0x01, 0, 1, 0x00],
                &[code_op(0, op::PUSH_MACHFRAME, info)],
                &[0x90; 8],
                &[(base + skip, 0x5555), (base + skip + 24, 0x7000_0900)],
            );
            let out = unwind(&t, &ctx(2, base, &[])).unwrap();
            assert_eq!((out.rip, out.rsp()), (0x5555, 0x7000_0900), "info {info}");
        }
    }

    #[test]
    fn chained_entry() {
        // A cold part at CODE + 0x80 whose unwind info chains to the main body's.
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(BASE, 0x2000);
        // Main body: push rbp (1 code).
        r.u32(0x40, CODE as u32)
            .u32(0x44, (CODE + 0x80) as u32)
            .u32(0x48, 0x200);
        r.bytes(0x200, &[0x01, 1, 1, 0x00]);
        r.u16(0x204, code_op(1, op::PUSH_NONVOL, 5));
        // Cold part: no codes, chained to the body's entry.
        r.u32(RF as usize, (CODE + 0x80) as u32)
            .u32(RF as usize + 4, (CODE + 0x100) as u32)
            .u32(RF as usize + 8, UI as u32);
        r.bytes(UI as usize, &[0x01 | (UNW_FLAG_CHAININFO << 3), 0, 0, 0x00]);
        r.u32(UI as usize + 4, CODE as u32)
            .u32(UI as usize + 8, (CODE + 0x80) as u32)
            .u32(UI as usize + 12, 0x200);
        r.bytes(CODE as usize, &[0x90; 0x100]);
        let st = b.region(S - 16, 16);
        st.u64(0, 0xbbbb).u64(8, RA);
        let t = b.into_target();
        let out = unwind(&t, &ctx(0x90, S - 16, &[])).unwrap();
        assert_eq!((out.rip, out.rsp(), out.rbp()), (RA, S, Some(0xbbbb)));
    }

    #[test]
    fn damaged_unwind_info_is_an_error() {
        let bad_data = |header: [u8; 4], slots: &[u16]| {
            let t = target(header, slots, &[0x90; 8], &[(S - 8, RA)]);
            unwind(&t, &ctx(4, S - 8, &[]))
        };
        // Version 0.
        assert!(matches!(
            bad_data([0x00, 0, 0, 0], &[]),
            Err(UnwindError::BadUnwindData { .. })
        ));
        // Unknown operation 12.
        assert!(matches!(
            bad_data([0x01, 0, 1, 0], &[code_op(0, 12, 0)]),
            Err(UnwindError::BadUnwindData { .. })
        ));
        // ALLOC_LARGE whose size slot is missing.
        assert!(matches!(
            bad_data([0x01, 0, 1, 0], &[code_op(0, op::ALLOC_LARGE, 0)]),
            Err(UnwindError::BadUnwindData { .. })
        ));
        // SET_FPREG without a frame register.
        assert!(matches!(
            bad_data([0x01, 0, 1, 0], &[code_op(0, op::SET_FPREG, 0)]),
            Err(UnwindError::BadUnwindData { .. })
        ));
        // A frame register whose value is unknown.
        assert!(matches!(
            bad_data([0x01, 0, 1, 0x05], &[code_op(0, op::SET_FPREG, 0)]),
            Err(UnwindError::BadUnwindData { .. })
        ));
        // A chain that names itself: stopped after 32 entries.
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(BASE, 0x2000);
        r.u32(RF as usize, CODE as u32)
            .u32(RF as usize + 4, (CODE + CODE_LEN) as u32)
            .u32(RF as usize + 8, UI as u32);
        r.bytes(UI as usize, &[0x01 | (UNW_FLAG_CHAININFO << 3), 0, 0, 0]);
        r.u32(UI as usize + 4, CODE as u32)
            .u32(UI as usize + 8, (CODE + CODE_LEN) as u32)
            .u32(UI as usize + 12, UI as u32);
        r.bytes(CODE as usize, &[0x90; 16]);
        let t = b.into_target();
        assert!(matches!(
            unwind(&t, &ctx(4, S - 8, &[])),
            Err(UnwindError::BadUnwindData { .. })
        ));
        // An entry that does not cover the IP, and one whose unwind info is unmapped.
        let t = rbp_frame();
        let mut c = ctx(0, S - 8, &[]);
        c.rip = BASE + CODE - 1;
        assert!(matches!(
            unwind(&t, &c),
            Err(UnwindError::BadUnwindData { .. })
        ));
        assert!(matches!(
            virtual_unwind(
                &t,
                BASE + 0x100_0000,
                BASE + RF,
                &ctx(4, S - 8, &[]),
                &t,
                &|_| false
            ),
            Err(UnwindError::BadUnwindData { .. } | UnwindError::Read(_))
        ));
        // Random bytes as unwind info never panic.
        let mut seed = 0x1234_5678_u64;
        for _ in 0..2000 {
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let h = next().to_le_bytes();
            let slots: Vec<u16> = (0..8).map(|_| next() as u16).collect();
            let t = target([h[0], h[1], h[2] % 10, h[3]], &slots, &[0x90; 8], &[]);
            let mut c = ctx(h[4] as u64 % 8, S - 0x100, &[]);
            for r in 0..16 {
                c.regs[r] = Some(S - 0x100 + 8 * (next() % 16));
            }
            let _ = unwind(&t, &c);
        }
    }
}
