//! Stepping out of a Linux arm64 signal handler: the handler returns to a trampoline that
//! calls `rt_sigreturn` (`mov x8, #139; svc #0`: the kernel's in the vDSO, qemu-user's in
//! a page of its own), and the interrupted registers sit in the signal frame the kernel
//! pushed, where the handler's caller-side sp points: `struct rt_sigframe { siginfo_t
//! (128 bytes); struct ucontext }`, whose `uc_mcontext` (a `struct sigcontext`: the fault
//! address, x0–x30, sp, pc, pstate) starts 176 bytes in, 16-aligned after the flags, link,
//! stack and the 128 bytes of signal mask.

use crate::memory::Target;
use crate::regs::{arm64_reg, Arm64Context};
use crate::unwind::{StackMemory, UnwindError};

/// `mov x8, #139` (`__NR_rt_sigreturn`) and `svc #0`, little-endian.
const SIGRETURN: [u32; 2] = [0xd280_1168, 0xd400_0001];
/// Offset of x0 of the `struct sigcontext` from the signal frame: `siginfo_t`, the
/// ucontext header up to `uc_mcontext`, then `fault_address`.
const REGS: u64 = 128 + 176 + 8;

/// Whether `pc` is at an `rt_sigreturn` trampoline.
pub fn is_sigreturn_trampoline(target: &Target, pc: u64) -> bool {
    let word = |at: u64| target.read_u32(at).ok();
    word(pc) == Some(SIGRETURN[0]) && word(pc.wrapping_add(4)) == Some(SIGRETURN[1])
}

/// The interrupted context of a signal whose handler returned to the trampoline at
/// `ctx.pc`, with `ctx.sp` at the signal frame: every general register, sp and pc (exact:
/// the instruction the signal interrupted). `Ok(None)` when `ctx.pc` is no trampoline.
pub fn step_sigreturn(
    target: &Target,
    ctx: &Arm64Context,
    mem: &dyn StackMemory,
) -> Result<Option<Arm64Context>, UnwindError> {
    if !is_sigreturn_trampoline(target, ctx.pc) {
        return Ok(None);
    }
    let regs = ctx.sp().wrapping_add(REGS);
    let mut next = Arm64Context::default();
    for r in 0..=arm64_reg::LR {
        next.regs[r] = Some(mem.read_u64(regs.wrapping_add(8 * r as u64))?);
    }
    next.regs[arm64_reg::SP] = Some(mem.read_u64(regs.wrapping_add(8 * 31))?);
    next.pc = Arm64Context::strip_pac(mem.read_u64(regs.wrapping_add(8 * 32))?);
    Ok(Some(next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    #[test]
    fn the_signal_frame_gives_the_interrupted_registers() {
        const CODE: u64 = 0x5000;
        const FRAME: u64 = 0x7000;
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(CODE, 16).u32(0, SIGRETURN[0]).u32(4, SIGRETURN[1]);
        let st = b.region(FRAME, 0x400);
        for r in 0..31 {
            st.u64(312 + 8 * r, 0x100 + r as u64);
        }
        st.u64(312 + 8 * 31, 0x9000).u64(312 + 8 * 32, 0x4242);
        let t = b.into_target();
        let ctx = Arm64Context::new(CODE, FRAME, None);
        let next = step_sigreturn(&t, &ctx, &t)
            .expect("reads")
            .expect("a trampoline");
        assert_eq!((next.pc, next.sp()), (0x4242, 0x9000));
        assert_eq!(next.fp(), Some(0x100 + 29));
        assert_eq!(next.regs[19], Some(0x100 + 19));
        // Anything else is no trampoline.
        let other = Arm64Context::new(CODE + 4, FRAME, None);
        assert_eq!(step_sigreturn(&t, &other, &t).expect("reads"), None);
    }
}
