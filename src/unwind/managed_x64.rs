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

use super::{x64_reg, StackMemory, UnwindError, X64Context};
use crate::contracts::execution_manager::{CodeBlock, ExecutionManager};
use crate::target::Target;

/// `UNW_FLAG_CHAININFO`: a `RUNTIME_FUNCTION` follows the unwind codes.
const UNW_FLAG_CHAININFO: u8 = 4;
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

/// Unwind operation codes (`UWOP_*`).
mod op {
    pub const PUSH_NONVOL: u8 = 0;
    pub const ALLOC_LARGE: u8 = 1;
    pub const ALLOC_SMALL: u8 = 2;
    pub const SET_FPREG: u8 = 3;
    pub const SAVE_NONVOL: u8 = 4;
    pub const SAVE_NONVOL_FAR: u8 = 5;
    pub const EPILOG: u8 = 6;
    pub const SPARE: u8 = 7;
    pub const SAVE_XMM128: u8 = 8;
    pub const SAVE_XMM128_FAR: u8 = 9;
    pub const PUSH_MACHFRAME: u8 = 10;
    /// CoreCLR on Unix: a frame offset too large for the header's 4 bits.
    pub const SET_FPREG_LARGE: u8 = 11;
}

/// A `RUNTIME_FUNCTION`, its addresses made absolute.
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
        let b = code.read_bytes(addr, 12)?;
        Ok(Self::from_bytes(base, &b))
    }

    fn from_bytes(base: u64, b: &[u8]) -> RuntimeFunction {
        let rva = |i: usize| {
            let v = b
                .get(i..i + 4)
                .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
                .unwrap_or(0);
            base.wrapping_add(u64::from(v))
        };
        RuntimeFunction {
            begin: rva(0),
            end: rva(4),
            unwind_info: rva(8),
        }
    }
}

/// A decoded x64 `UNWIND_INFO` header and its code slots.
#[derive(Debug, Clone)]
struct UnwindInfo {
    version: u8,
    flags: u8,
    prolog_size: u8,
    frame_register: usize,
    /// The header's frame offset (units of 16 bytes).
    frame_offset: u64,
    slots: Vec<u16>,
    /// The chained entry, when flag 4 is set.
    chained: Option<RuntimeFunction>,
}

fn bad(ip: u64, detail: impl Into<String>) -> UnwindError {
    UnwindError::BadUnwindData {
        ip,
        detail: detail.into(),
    }
}

impl UnwindInfo {
    fn read(code: &Target, base: u64, addr: u64, ip: u64) -> Result<UnwindInfo, UnwindError> {
        let h = code.read_bytes(addr, 4)?;
        let version = h[0] & 7;
        if !(1..=2).contains(&version) {
            return Err(bad(
                ip,
                format!("UNWIND_INFO at {addr:#x} has version {version}"),
            ));
        }
        let flags = h[0] >> 3;
        let count = usize::from(h[2]);
        let even = count + (count & 1);
        let chained = flags & UNW_FLAG_CHAININFO != 0;
        let len = 2 * even + if chained { 12 } else { 0 };
        let body = code.read_bytes(addr.wrapping_add(4), len)?;
        let slots = (0..count)
            .map(|i| u16::from_le_bytes([body[2 * i], body[2 * i + 1]]))
            .collect();
        let chained = chained.then(|| RuntimeFunction::from_bytes(base, &body[2 * even..]));
        Ok(UnwindInfo {
            version,
            flags,
            prolog_size: h[1],
            frame_register: usize::from(h[3] & 0xf),
            frame_offset: u64::from(h[3] >> 4),
            slots,
            chained,
        })
    }

    /// (code offset, operation, operation info) of the code at slot `i`.
    fn code(&self, i: usize) -> (u8, u8, u8) {
        let c = self.slots[i];
        ((c & 0xff) as u8, ((c >> 8) & 0xf) as u8, (c >> 12) as u8)
    }

    /// Slot `i` as a number, or an error when the codes end first.
    fn slot(&self, i: usize, ip: u64) -> Result<u64, UnwindError> {
        self.slots.get(i).map(|&s| u64::from(s)).ok_or_else(|| {
            bad(
                ip,
                format!("unwind code runs past the {} slots", self.slots.len()),
            )
        })
    }

    /// How many slots the operation at slot `i` takes.
    fn slots_of(&self, i: usize, ip: u64) -> Result<usize, UnwindError> {
        let (_, o, info) = self.code(i);
        Ok(match o {
            op::PUSH_NONVOL | op::ALLOC_SMALL | op::SET_FPREG | op::PUSH_MACHFRAME => 1,
            op::ALLOC_LARGE if info == 0 => 2,
            op::ALLOC_LARGE if info == 1 => 3,
            op::ALLOC_LARGE => {
                return Err(bad(ip, format!("UWOP_ALLOC_LARGE with info {info}")));
            }
            op::SAVE_NONVOL | op::SAVE_XMM128 | op::EPILOG => 2,
            op::SAVE_NONVOL_FAR | op::SAVE_XMM128_FAR | op::SPARE | op::SET_FPREG_LARGE => 3,
            _ => return Err(bad(ip, format!("unknown unwind operation {o}"))),
        })
    }

    /// The frame offset in bytes: the header's ×16, or UWOP_SET_FPREG_LARGE's when the
    /// header says 15 and such a code exists.
    fn frame_offset_bytes(&self, ip: u64) -> Result<u64, UnwindError> {
        if self.frame_offset == 15 {
            let mut i = 0;
            while i < self.slots.len() {
                let (_, o, _) = self.code(i);
                if o == op::SET_FPREG_LARGE {
                    let v = self.slot(i + 1, ip)? | (self.slot(i + 2, ip)? << 16);
                    return Ok(v * 16);
                }
                i += self.slots_of(i, ip)?;
            }
        }
        Ok(self.frame_offset * 16)
    }

    /// Code offset of the instruction that set the frame register (UWOP_SET_FPREG or
    /// _LARGE), if there is one.
    fn set_fpreg_offset(&self, ip: u64) -> Result<Option<u8>, UnwindError> {
        let mut i = 0;
        while i < self.slots.len() {
            let (off, o, _) = self.code(i);
            if o == op::SET_FPREG || o == op::SET_FPREG_LARGE {
                return Ok(Some(off));
            }
            i += self.slots_of(i, ip)?;
        }
        Ok(None)
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
            self.at(addr + 1)?,
            self.at(addr + 2)?,
            self.at(addr + 3)?,
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
    let b1 = c.at(addr + 1)?;
    let b2 = c.at(addr + 2)?;
    if b0 == 0x48 && b1 == 0x83 && b2 == 0xc4 {
        return Some((4, StackAdjust::Add(i64::from(c.at(addr + 3)? as i8))));
    }
    if b0 == 0x48 && b1 == 0x81 && b2 == 0xc4 {
        return Some((7, StackAdjust::Add(i64::from(c.i32_at(addr + 3)?))));
    }
    if b0 & 0xfe == 0x48 && b1 == 0x8d {
        let fp = usize::from(((b0 & 1) << 3) | (b2 & 7));
        if fp != 0 && fp == frame_register {
            // ModRM: mod 01 (disp8) or 10 (disp32), reg 100 (rsp).
            if b2 & 0xf8 == 0x60 {
                return Some((4, StackAdjust::Lea(fp, i64::from(c.at(addr + 3)? as i8))));
            }
            if b2 & 0xf8 == 0xa0 {
                return Some((7, StackAdjust::Lea(fp, i64::from(c.i32_at(addr + 3)?))));
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
        let b1 = c.at(addr + 1)?;
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
        at += len;
    }
    for _ in 0..16 {
        match pop_at(c, at) {
            Some((len, _)) => at += len,
            None => break,
        }
    }
    if c.at(at) == Some(0xf2) {
        at += 1;
    }
    let Some(b0) = c.at(at) else { return false };
    let b1 = c.at(at + 1);
    match b0 {
        0xc3 | 0xc2 => true,
        0xf3 => b1 == Some(0xc3),
        0xeb | 0xe9 => {
            let target = if b0 == 0xeb {
                b1.map(|d| (at + 2).wrapping_add_signed(i64::from(d as i8)))
            } else {
                c.i32_at(at + 1)
                    .map(|d| (at + 5).wrapping_add_signed(i64::from(d)))
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
            b1 == Some(0xff) && c.at(at + 2).is_some_and(|m| m & 0x38 == 0x20)
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
        at += len;
    }
    for _ in 0..16 {
        let Some((len, r)) = pop_at(c, at) else { break };
        out.regs[r] = Some(mem.read_u64(rsp)?);
        restored[r] = true;
        rsp = rsp.wrapping_add(8);
        at += len;
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

    // The establisher frame: where UWOP_SAVE_NONVOL offsets count from.
    let establisher = if info.frame_register == 0 {
        reg(ctx, x64_reg::RSP)?
    } else if prolog_offset >= u64::from(info.prolog_size) || info.chained.is_some() {
        reg(ctx, info.frame_register)?.wrapping_sub(info.frame_offset_bytes(ip)?)
    } else {
        match info.set_fpreg_offset(ip)? {
            Some(off) if prolog_offset >= u64::from(off) => {
                reg(ctx, info.frame_register)?.wrapping_sub(info.frame_offset_bytes(ip)?)
            }
            _ => reg(ctx, x64_reg::RSP)?,
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
    let mut current = info;
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
                    out.regs[r] = Some(mem.read_u64(establisher.wrapping_add(off))?);
                    restored[r] = true;
                }
                op::SAVE_NONVOL_FAR => {
                    let off = current.slot(i + 1, ip)? | (current.slot(i + 2, ip)? << 16);
                    out.regs[r] = Some(mem.read_u64(establisher.wrapping_add(off))?);
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
    for r in 0..16 {
        if restored[r] || NONVOLATILE.contains(&r) {
            out.regs[r] = unwound.regs[r];
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
