//! x64 signal frames without CFI: glibc's `__restore_rt` recognised by its bytes, and the
//! interrupted registers read from the `ucontext_t` it returns through.

use crate::memory::Target;
use crate::regs::X64Context;
use crate::unwind::{StackMemory, UnwindError};

/// `mov rax, 15 (rt_sigreturn); syscall`: the body of glibc's `__restore_rt`.
pub(crate) const RESTORE_RT: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
/// Offset of `uc_mcontext.gregs` in `ucontext_t` (after `uc_flags`, `uc_link`, `uc_stack`).
const UCONTEXT_GREGS: u64 = 40;
/// Unwind-code register numbers of `gregs[0..17]` (r8–r15, rdi, rsi, rbp, rbx, rdx, rax,
/// rcx, rsp; `gregs[16]` is rip).
pub(crate) const GREGS_ORDER: [usize; 16] = [8, 9, 10, 11, 12, 13, 14, 15, 7, 6, 5, 3, 2, 0, 1, 4];

/// A step through a signal trampoline recognised by its bytes (`__restore_rt` without
/// CFI): the interrupted registers are the `ucontext_t` at rsp. `Ok(None)` when `rip` is
/// not at the trampoline.
pub(crate) fn step_restore_rt(
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
