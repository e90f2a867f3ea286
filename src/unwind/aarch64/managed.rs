//! One unwind step through a managed arm64 frame, with the runtime's own unwind data: the
//! Windows ARM64 `RUNTIME_FUNCTION` and `.xdata` (`super::unwind_data`) that the JIT and
//! crossgen2 emit on every operating system.
//!
//! The codes describe the prolog in reverse, one code per instruction, up to `end`; each
//! epilog scope points at the code of its first instruction. So:
//! - in the body, every prolog code is undone in order;
//! - `k` instructions into a prolog of `n`, the first `n - k` codes are skipped (those
//!   instructions have not run);
//! - `j` instructions into an epilog, its codes are undone from its `j`-th on (the ones
//!   before it have already been undone by the epilog itself);
//! - last, the caller's pc is the link register (restored, or as it was).
//!
//! A fragment (a cold part, its funclets) starts its codes with `end_c`: its prolog has no
//! instruction, and the codes after it, its host's, are all undone from its body.
//!
//! Only sp, pc and the callee-saved registers (x19–x29) are meaningful in the caller's
//! context.

use super::packed::{PackedOp, PackedUnwind};
use super::unwind_data::{code_size, op, packed_flag, Arm64UnwindData, UnwindDataError};
use crate::contracts::execution_manager::{CodeBlock, ExecutionManager};
use crate::contracts::runtime_function::{RuntimeFunction as Entry, RuntimeFunctionLayout};
use crate::contracts::ContractError;
use crate::memory::Target;
use crate::regs::{arm64_reg, Arm64Context};
use crate::unwind::{StackMemory, UnwindError};

/// Most codes one step runs (a prolog has a few dozen at most).
const MAX_CODES: usize = 1024;

fn bad(ip: u64, detail: impl Into<String>) -> UnwindError {
    UnwindError::BadUnwindData {
        ip,
        detail: detail.into(),
    }
}

fn from_data(ip: u64) -> impl Fn(UnwindDataError) -> UnwindError {
    move |e| bad(ip, e.to_string())
}

/// The register state while codes are undone.
struct Unwinding<'a> {
    ctx: Arm64Context,
    mem: &'a dyn StackMemory,
    ip: u64,
}

impl Unwinding<'_> {
    fn sp(&self) -> u64 {
        self.ctx.sp()
    }

    fn add_sp(&mut self, bytes: u64) {
        self.ctx.regs[arm64_reg::SP] = Some(self.sp().wrapping_add(bytes));
    }

    /// Loads integer register `reg` from `addr` (registers past x30 are not integer ones:
    /// bad data).
    fn load(&mut self, reg: usize, addr: u64) -> Result<(), UnwindError> {
        if reg > arm64_reg::LR {
            return Err(bad(self.ip, format!("unwind code restores x{reg}")));
        }
        self.ctx.regs[reg] = Some(self.mem.read_u64(addr)?);
        Ok(())
    }

    /// Loads the integer pair `reg`, `reg + 1` from `addr`, and `extra` more pairs after
    /// it (the `save_next` codes that came before).
    fn load_pairs(&mut self, reg: usize, addr: u64, extra: usize) -> Result<(), UnwindError> {
        for k in 0..=extra {
            let (r, at) = (reg + 2 * k, addr.wrapping_add(16 * k as u64));
            self.load(r, at)?;
            self.load(r + 1, at.wrapping_add(8))?;
        }
        Ok(())
    }

    fn frame_pointer(&self) -> Result<u64, UnwindError> {
        self.ctx
            .fp()
            .ok_or_else(|| bad(self.ip, "the frame pointer is unknown"))
    }

    /// Undoes the codes from byte `index` on, skipping the first `skip` of them, up to
    /// `end` (past `end_c`, which only ends the count of a fragment's prolog).
    fn run(&mut self, codes: &[u8], mut index: usize, mut skip: usize) -> Result<(), UnwindError> {
        let mut pending_next = 0usize;
        for _ in 0..MAX_CODES {
            let Some(&b) = codes.get(index) else {
                return Err(bad(self.ip, "unwind codes end without an end code"));
            };
            if b == op::END {
                return Ok(());
            }
            // `end_c` ends the codes of this fragment's own scope (a cold part or a
            // shrink-wrapped region): the host's codes after it are undone too.
            if b == op::END_C {
                if pending_next != 0 {
                    return Err(bad(self.ip, "save_next before end_c"));
                }
                index += 1;
                continue;
            }
            let size = code_size(b);
            let bytes = codes
                .get(index..index + size)
                .ok_or_else(|| bad(self.ip, format!("unwind code {b:#04x} is cut off")))?;
            index += size;
            if skip > 0 {
                skip -= 1;
                continue;
            }
            if b == op::SAVE_NEXT {
                pending_next += 1;
                continue;
            }
            let extra = std::mem::take(&mut pending_next);
            self.undo(bytes, extra)?;
        }
        Err(bad(self.ip, "more than 1024 unwind codes"))
    }

    /// Undoes one instruction of a packed prolog or epilog.
    fn undo_packed(&mut self, op: &PackedOp) -> Result<(), UnwindError> {
        let at = self.sp().wrapping_add(op.at);
        for (k, reg) in op.loads.iter().enumerate() {
            if let Some(reg) = *reg {
                self.load(reg, at.wrapping_add(8 * k as u64))?;
            }
        }
        self.add_sp(op.add_sp);
        Ok(())
    }

    /// Undoes one code (`extra`: `save_next` codes that extend a register-pair save).
    fn undo(&mut self, c: &[u8], extra: usize) -> Result<(), UnwindError> {
        let b0 = c[0];
        let b1 = c.get(1).copied().map(u64::from).unwrap_or(0);
        let z6 = b1 & 0x3f;
        // x19 + the 4-bit register field that straddles the two bytes.
        let reg4 = 19 + ((usize::from(b0 & 3) << 2) | (b1 as usize >> 6));
        match b0 {
            // alloc_s: sub sp, sp, #x*16
            0x00..=0x1f => self.add_sp(u64::from(b0) * 16),
            // save_r19r20_x: stp x19, x20, [sp, #-z*8]!
            0x20..=0x3f => {
                let sp = self.sp();
                self.load_pairs(19, sp, extra)?;
                self.add_sp(u64::from(b0 & 0x1f) * 8);
            }
            // save_fplr: stp fp, lr, [sp, #z*8]
            0x40..=0x7f => {
                let at = self.sp().wrapping_add(u64::from(b0 & 0x3f) * 8);
                self.load_pairs(arm64_reg::FP, at, 0)?;
            }
            // save_fplr_x: stp fp, lr, [sp, #-(z+1)*8]!
            0x80..=0xbf => {
                let sp = self.sp();
                self.load_pairs(arm64_reg::FP, sp, 0)?;
                self.add_sp((u64::from(b0 & 0x3f) + 1) * 8);
            }
            // alloc_m: sub sp, sp, #x*16 (11 bits)
            0xc0..=0xc7 => self.add_sp(((u64::from(b0 & 7) << 8) | b1) * 16),
            // save_regp: stp x(19+X), x(20+X), [sp, #z*8]
            0xc8..=0xcb => {
                let at = self.sp().wrapping_add(z6 * 8);
                self.load_pairs(reg4, at, extra)?;
            }
            // save_regp_x: stp x(19+X), x(20+X), [sp, #-(z+1)*8]!
            0xcc..=0xcf => {
                let sp = self.sp();
                self.load_pairs(reg4, sp, extra)?;
                self.add_sp((z6 + 1) * 8);
            }
            // save_reg: str x(19+X), [sp, #z*8]
            0xd0..=0xd3 => {
                let at = self.sp().wrapping_add(z6 * 8);
                self.load(reg4, at)?;
            }
            // save_reg_x: str x(19+X), [sp, #-(z+1)*8]! (3-bit register field, 5-bit z)
            0xd4 | 0xd5 => {
                let reg = 19 + ((usize::from(b0 & 1) << 3) | (b1 as usize >> 5));
                let sp = self.sp();
                self.load(reg, sp)?;
                self.add_sp(((b1 & 0x1f) + 1) * 8);
            }
            // save_lrpair: stp x(19+2X), lr, [sp, #z*8]
            0xd6 | 0xd7 => {
                let reg = 19 + 2 * ((usize::from(b0 & 1) << 2) | (b1 as usize >> 6));
                let at = self.sp().wrapping_add(z6 * 8);
                self.load(reg, at)?;
                self.load(arm64_reg::LR, at.wrapping_add(8))?;
            }
            // save_fregp, save_freg: floating-point registers stay unknown.
            0xd8 | 0xd9 | 0xdc | 0xdd => {}
            // save_fregp_x: stp d(8+X), d(9+X), [sp, #-(z+1)*8]!
            0xda | 0xdb => self.add_sp((z6 + 1) * 8),
            // save_freg_x: str d(8+X), [sp, #-(z+1)*8]!
            0xde => self.add_sp(((b1 & 0x1f) + 1) * 8),
            // alloc_l: sub sp, sp, #x*16 (24 bits)
            op::ALLOC_L => {
                let x = (u64::from(c[1]) << 16) | (u64::from(c[2]) << 8) | u64::from(c[3]);
                self.add_sp(x * 16);
            }
            // set_fp: mov fp, sp
            op::SET_FP => {
                let fp = self.frame_pointer()?;
                self.ctx.regs[arm64_reg::SP] = Some(fp);
            }
            // add_fp: add fp, sp, #x*8
            op::ADD_FP => {
                let fp = self.frame_pointer()?;
                self.ctx.regs[arm64_reg::SP] = Some(fp.wrapping_sub(b1 * 8));
            }
            op::NOP => {}
            // The return address was signed: its PAC is stripped from pc at the end.
            op::PAC_SIGN_LR => {}
            other => {
                return Err(bad(
                    self.ip,
                    format!("unwind code {other:#04x} is not one managed code uses"),
                ))
            }
        }
        Ok(())
    }
}

/// Where to start undoing codes for a pc `offset` bytes into the function: (byte index,
/// codes to skip).
fn start_of(data: &Arm64UnwindData, offset: u64, has_prolog: bool) -> (usize, usize) {
    let instruction = (offset / 4) as usize;
    let prolog = data.prolog_instructions();
    if has_prolog && instruction < prolog {
        return (0, prolog - instruction);
    }
    for scope in &data.epilogs {
        let len = data.epilog_instructions(scope.code_index) as u64 * 4;
        if offset >= scope.start && offset < scope.start + len {
            return (scope.code_index, ((offset - scope.start) / 4) as usize);
        }
    }
    (0, 0)
}

/// The caller's context of the arm64 function whose `RUNTIME_FUNCTION` is at `entry`
/// (RVAs from `base`). `ip_is_exact`: `ctx.pc` is the instruction the frame is at (the
/// innermost frame), not a return address (which is never in a prolog or epilog).
pub fn virtual_unwind(
    target: &Target,
    base: u64,
    entry: u64,
    ctx: &Arm64Context,
    mem: &dyn StackMemory,
    ip_is_exact: bool,
) -> Result<Arm64Context, UnwindError> {
    let ip = ctx.pc;
    let rf = Entry::read(target, &RuntimeFunctionLayout::ARM64, entry).map_err(|e| match e {
        ContractError::Read(r) => UnwindError::Read(r),
        other => UnwindError::Contract(other),
    })?;
    let begin = base.wrapping_add(u64::from(rf.begin));
    if packed_flag(rf.unwind_data) != 0 {
        let packed = PackedUnwind::decode(rf.unwind_data).map_err(from_data(ip))?;
        let offset = within(ip, begin, packed.function_length)?;
        let (ops, skip) = packed.plan(offset, ip_is_exact);
        let mut state = Unwinding { ctx: *ctx, mem, ip };
        for op in ops.iter().skip(skip) {
            state.undo_packed(op)?;
        }
        return caller_of(state, ip);
    }
    let data = Arm64UnwindData::read(target, base.wrapping_add(u64::from(rf.unwind_data)))
        .map_err(from_data(ip))?;
    let offset = within(ip, begin, data.function_length)?;
    let (index, skip) = if ip_is_exact {
        start_of(&data, offset, true)
    } else {
        (0, 0)
    };
    let mut state = Unwinding { ctx: *ctx, mem, ip };
    state.run(&data.codes, index, skip)?;
    caller_of(state, ip)
}

/// The offset of `ip` in the function of `length` bytes at `begin`, which must cover it.
fn within(ip: u64, begin: u64, length: u64) -> Result<u64, UnwindError> {
    let offset = ip.wrapping_sub(begin);
    if offset >= length {
        return Err(bad(
            ip,
            format!("pc is {offset:#x} into a function of {length:#x} bytes at {begin:#x}"),
        ));
    }
    Ok(offset)
}

/// The caller's context once the frame's codes are undone: pc from lr, the callee-saved
/// registers as restored or kept.
fn caller_of(state: Unwinding<'_>, ip: u64) -> Result<Arm64Context, UnwindError> {
    let lr = state
        .ctx
        .lr()
        .ok_or_else(|| bad(ip, "the return address (lr) is unknown"))?;
    let mut caller = Arm64Context::new(Arm64Context::strip_pac(lr), state.sp(), state.ctx.fp());
    for r in arm64_reg::X19..=arm64_reg::X28 {
        caller.regs[r] = state.ctx.regs[r];
    }
    Ok(caller)
}

/// The caller's context of a managed arm64 frame: `ctx` is the frame's registers (pc inside
/// `block`, found by the ExecutionManager). Checks that the step moves up the stack.
pub fn step_managed(
    target: &Target,
    em: &dyn ExecutionManager,
    block: &CodeBlock,
    ctx: &Arm64Context,
    mem: &dyn StackMemory,
    ip_is_exact: bool,
) -> Result<Arm64Context, UnwindError> {
    let ip = ctx.pc;
    let entry = em
        .unwind_info(block)?
        .ok_or(UnwindError::NoUnwindInfo { ip })?;
    let base = em.unwind_info_base_address(block);
    let caller = virtual_unwind(target, base, entry, ctx, mem, ip_is_exact)?;
    // A leaf may keep sp (its return address is in lr); the caller must then be elsewhere.
    let sp = caller.sp();
    if sp < ctx.sp() || (sp == ctx.sp() && caller.pc == ctx.pc) {
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
    const RF: u64 = 0x10;
    const XDATA: u64 = 0x100;
    const CODE: u64 = 0x1000;
    /// The frame's sp in the body, and the caller's return address.
    const SP: u64 = 0x7000_0000;
    const RA: u64 = 0x4242_4240;

    /// A function of 0x40 instructions with the usual managed prolog
    /// `stp fp, lr, [sp, #-48]!; mov fp, sp; stp x19, x20, [sp, #16]; str x21, [sp, #32]`
    /// and one epilog at instruction 0x3b:
    /// `ldr x21, [sp, #32]; ldp x19, x20, [sp, #16]; ldp fp, lr, [sp], #48; ret`.
    fn target() -> Target {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(BASE, 0x2000);
        r.u32(RF as usize, CODE as u32)
            .u32(RF as usize + 4, XDATA as u32);
        // Codes, prolog reversed: save_reg x21 at 32 (0xd0 0x84), save_regp x19 at 16
        // (0xc8 0x02), set_fp (0xe1), save_fplr_x 48 (0x85), end; the epilog has codes of
        // its own at index 7 (no `mov sp, fp`).
        let codes = [
            0xd0, 0x84, 0xc8, 0x02, 0xe1, 0x85, 0xe4, // prolog, 4 instructions
            0xd0, 0x84, 0xc8, 0x02, 0x85, 0xe4, 0xe3, // epilog at index 7, 4 with ret
        ];
        let header: u32 = 0x40 | (1 << 22) | (4 << 27);
        r.u32(XDATA as usize, header);
        r.u32(XDATA as usize + 4, 0x3b | (7 << 22));
        r.bytes(XDATA as usize + 8, &codes);
        let st = b.region(SP - 0x100, 0x200);
        // Frame record at SP: caller fp, return address; x19, x20 at +16, x21 at +32.
        st.u64(0x100, SP + 0x90).u64(0x108, RA);
        st.u64(0x110, 19).u64(0x118, 20).u64(0x120, 21);
        b.into_target()
    }

    fn ctx(offset: u64, sp: u64) -> Arm64Context {
        let mut c = Arm64Context::new(BASE + CODE + offset, sp, Some(SP));
        c.regs[arm64_reg::LR] = Some(0xdead);
        c
    }

    fn unwind(offset: u64, sp: u64, exact: bool) -> Result<Arm64Context, UnwindError> {
        let t = target();
        virtual_unwind(&t, BASE, BASE + RF, &ctx(offset, sp), &t, exact)
    }

    /// Found by the `arm64_unwind` fuzz target: a save at `sp + z*8` with sp near the top of
    /// the address space overflowed; the load is now of a wrapped address, unreadable here.
    #[test]
    fn a_save_near_the_top_of_the_address_space_is_a_read_error() {
        let t = target();
        let sp = u64::MAX - 8;
        for offset in [0x80, 0x3b * 4 + 8] {
            let err = virtual_unwind(&t, BASE, BASE + RF, &ctx(offset, sp), &t, true)
                .expect_err("nothing is mapped there");
            assert!(matches!(err, UnwindError::Read(_)), "{err:?}");
        }
    }

    #[test]
    fn the_body_undoes_the_whole_prolog() {
        let c = unwind(0x80, SP, false).expect("unwinds");
        assert_eq!((c.pc, c.sp(), c.fp()), (RA, SP + 48, Some(SP + 0x90)));
        assert_eq!(c.regs[19..=21], [Some(19), Some(20), Some(21)]);
    }

    #[test]
    fn in_the_prolog_only_what_ran_is_undone() {
        // At instruction 0 nothing ran: the return address is still in lr.
        let c = unwind(0, SP + 48, true).expect("unwinds");
        assert_eq!((c.pc, c.sp()), (0xdead, SP + 48));
        // After `stp fp, lr, [sp, #-48]!` (instruction 1): fp and lr are on the stack.
        let c = unwind(4, SP, true).expect("unwinds");
        assert_eq!((c.pc, c.sp(), c.fp()), (RA, SP + 48, Some(SP + 0x90)));
        assert_eq!(c.regs[19], None);
    }

    #[test]
    fn in_the_epilog_only_what_is_left_is_undone() {
        // After `ldr x21` and `ldp x19, x20` (2 of 4 instructions), at `ldp fp, lr`.
        let c = unwind(0x3b * 4 + 8, SP, true).expect("unwinds");
        assert_eq!((c.pc, c.sp()), (RA, SP + 48));
        assert_eq!(c.regs[21], None, "x21 was already restored by the epilog");
        // At the `ret`: sp is the caller's, lr holds the return address.
        let c = unwind(0x3b * 4 + 12, SP + 48, true).expect("unwinds");
        assert_eq!((c.pc, c.sp()), (0xdead, SP + 48));
    }

    #[test]
    fn a_pc_outside_the_function_and_a_reserved_packed_word_are_bad_data() {
        assert!(matches!(
            unwind(0x100, SP, false),
            Err(UnwindError::BadUnwindData { .. })
        ));
        // Packed, CR 2: reserved.
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(BASE, 0x100)
            .u32(RF as usize, CODE as u32)
            .u32(RF as usize + 4, 0x0040_0021);
        let t = b.into_target();
        let e = virtual_unwind(&t, BASE, BASE + RF, &ctx(0, SP), &t, false).unwrap_err();
        assert!(e.to_string().contains("packed"), "{e}");
        assert!(e.to_string().contains("CR 2"), "{e}");
    }

    /// Microsoft's packed example (`0x416101ed`, 492 bytes): `str x19, [sp, #-16]!; sub
    /// sp, sp, #2064; stp x29, x30, [sp]; mov x29, sp`, and at the end `ldp x29, x30,
    /// [sp]; add sp, sp, #2064; ldr x19, [sp], #16; ret`.
    fn packed_target() -> Target {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(BASE, 0x100)
            .u32(RF as usize, CODE as u32)
            .u32(RF as usize + 4, 0x416101ed);
        let st = b.region(SP, 0x900);
        st.u64(0, SP + 0x1000).u64(8, RA).u64(2064, 19);
        b.into_target()
    }

    #[test]
    fn packed_data_unwinds_the_body_the_prolog_and_the_epilog() {
        let t = packed_target();
        let step = |offset: u64, sp: u64, exact: bool| {
            virtual_unwind(&t, BASE, BASE + RF, &ctx(offset, sp), &t, exact).expect("unwinds")
        };
        // The body: the frame record and x19 restored, the whole frame popped.
        let c = step(0x80, SP, false);
        assert_eq!((c.pc, c.sp(), c.fp()), (RA, SP + 2080, Some(SP + 0x1000)));
        assert_eq!(c.regs[19], Some(19));
        // In the prolog, after `str x19` and `sub` (the frame record not stored yet): lr
        // still holds the return address.
        let c = step(8, SP, true);
        assert_eq!((c.pc, c.sp(), c.regs[19]), (0xdead, SP + 2080, Some(19)));
        // The epilog starts at instruction 119; after its `ldp x29, x30`, fp and lr are
        // the caller's already and only the rest is undone.
        let c = step(120 * 4, SP, true);
        assert_eq!((c.pc, c.sp(), c.fp()), (0xdead, SP + 2080, Some(SP)));
        assert_eq!(c.regs[19], Some(19));
        // A pc past the function is bad data.
        let e = virtual_unwind(&t, BASE, BASE + RF, &ctx(492, SP), &t, true).unwrap_err();
        assert!(e.to_string().contains("0x1ec bytes"), "{e}");
    }

    /// A cold fragment as crossgen2 writes it for arm64: `end_c` (no prolog of its own),
    /// then its host's codes: `str x19, [sp, #24]`, `stp fp, lr, [sp, #-32]!`.
    #[test]
    fn a_cold_fragment_undoes_its_hosts_codes() {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(BASE, 0x2000);
        r.u32(RF as usize, CODE as u32)
            .u32(RF as usize + 4, XDATA as u32);
        // 0x10 instructions, E bit with the epilog's codes at index 1, 2 code words.
        r.u32(XDATA as usize, 0x10 | (1 << 21) | (1 << 22) | (2 << 27));
        r.bytes(
            XDATA as usize + 4,
            &[0xe5, 0xd0, 0x03, 0x83, 0xe4, 0xe4, 0xe4, 0xe4],
        );
        let st = b.region(SP, 0x100);
        st.u64(0, SP + 0x80).u64(8, RA).u64(24, 19);
        let t = b.into_target();
        // Its first instruction is body, not prolog: everything is undone.
        for (offset, exact) in [(0, true), (0x10, false)] {
            let c =
                virtual_unwind(&t, BASE, BASE + RF, &ctx(offset, SP), &t, exact).expect("unwinds");
            assert_eq!((c.pc, c.sp(), c.fp()), (RA, SP + 32, Some(SP + 0x80)));
            assert_eq!(c.regs[19], Some(19));
        }
    }

    #[test]
    fn save_next_restores_the_following_pairs() {
        // stp x19, x20, [sp, #-32]!; stp x21, x22, [sp, #16] → save_next, save_regp_x.
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(BASE, 0x2000);
        r.u32(RF as usize, CODE as u32)
            .u32(RF as usize + 4, XDATA as u32);
        r.u32(XDATA as usize, 0x10 | (1 << 27) | (1 << 21));
        r.bytes(XDATA as usize + 4, &[0xe6, 0xcc, 0x03, 0xe4]);
        let st = b.region(SP, 0x100);
        st.u64(0, 19).u64(8, 20).u64(16, 21).u64(24, 22);
        let t = b.into_target();
        let c = virtual_unwind(&t, BASE, BASE + RF, &ctx(0x20, SP), &t, false).expect("unwinds");
        assert_eq!(c.sp(), SP + 32);
        assert_eq!(c.regs[19..=22], [Some(19), Some(20), Some(21), Some(22)]);
        assert_eq!(c.pc, 0xdead);
    }

    #[test]
    fn codes_without_an_end_are_bad_data() {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let r = b.region(BASE, 0x2000);
        r.u32(RF as usize, CODE as u32)
            .u32(RF as usize + 4, XDATA as u32);
        r.u32(XDATA as usize, 0x10 | (1 << 27) | (1 << 21));
        r.bytes(XDATA as usize + 4, &[0x01, 0x01, 0x01, 0x01]);
        let t = b.into_target();
        let e = virtual_unwind(&t, BASE, BASE + RF, &ctx(0x20, SP), &t, false).unwrap_err();
        assert!(e.to_string().contains("without an end"), "{e}");
    }
}
