//! Unwinding arm64 frames: managed code by the Windows ARM64 unwind data the runtime emits
//! on every operating system ([`managed`], `unwind_data`), native code by its module's
//! DWARF CFI (the shared CFI stepper of [`crate::unwind::native`]), out of a signal
//! handler through its `rt_sigreturn` trampoline ([`signal`]), or else the frame record
//! chain ([`step_frame_record`]).

pub mod managed;
pub mod packed;
pub mod signal;
pub mod unwind_data;

use crate::regs::{arm64_reg, Arm64Context};
use crate::unwind::{StackMemory, UnwindError};

/// One step by the AAPCS64 frame record chain, for code without CFI: x29 points at the
/// frame record `{caller's x29, return address}`, and the caller's sp is above it (taken
/// as x29 + 16, exact for the usual `stp x29, x30, [sp, #-N]!; mov x29, sp` frames that put
/// the record at the bottom). `Ok(None)` at the chain's end: x29 is 0 (the ABI's mark of
/// the outermost frame, which `_start` sets) or the return address is.
pub fn step_frame_record(
    ctx: &Arm64Context,
    mem: &dyn StackMemory,
) -> Result<Option<Arm64Context>, UnwindError> {
    let ip = ctx.pc;
    let fp = match ctx.fp() {
        Some(0) => return Ok(None),
        Some(fp) if fp % 8 == 0 && fp >= ctx.sp() => fp,
        _ => return Err(UnwindError::NoUnwindInfo { ip }),
    };
    let caller_sp = fp
        .checked_add(16)
        .ok_or(UnwindError::NotProgressing { ip, sp: fp })?;
    let caller_fp = mem.read_u64(fp)?;
    let ret = Arm64Context::strip_pac(mem.read_u64(fp + 8)?);
    if ret == 0 {
        return Ok(None);
    }
    if caller_fp != 0 && caller_fp <= fp {
        return Err(UnwindError::NotProgressing { ip, sp: caller_fp });
    }
    let mut caller = Arm64Context::new(ret, caller_sp, Some(caller_fp));
    for r in arm64_reg::X19..=arm64_reg::X28 {
        caller.regs[r] = ctx.regs[r];
    }
    Ok(Some(caller))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    #[test]
    fn frame_records_chain_and_their_cycles_stop() {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let st = b.region(0x1000, 0x100);
        // Record at 0x1010 → record at 0x1040 → end (return address 0).
        st.u64(0x10, 0x1040).u64(0x18, 0xaaaa);
        st.u64(0x40, 0).u64(0x48, 0);
        // A record that points at itself.
        st.u64(0x80, 0x1080).u64(0x88, 0xbbbb);
        let t = b.into_target();
        let leaf = Arm64Context::new(0x500, 0x1000, Some(0x1010));
        let c = step_frame_record(&leaf, &t)
            .expect("steps")
            .expect("a caller");
        assert_eq!((c.pc, c.sp(), c.fp()), (0xaaaa, 0x1020, Some(0x1040)));
        assert!(step_frame_record(&c, &t).expect("steps").is_none());
        let looped = Arm64Context::new(0x500, 0x1000, Some(0x1080));
        assert!(matches!(
            step_frame_record(&looped, &t),
            Err(UnwindError::NotProgressing { .. })
        ));
        let no_fp = Arm64Context::new(0x500, 0x1000, None);
        assert!(matches!(
            step_frame_record(&no_fp, &t),
            Err(UnwindError::NoUnwindInfo { .. })
        ));
        let below_sp = Arm64Context::new(0x500, 0x1040, Some(0x1010));
        assert!(matches!(
            step_frame_record(&below_sp, &t),
            Err(UnwindError::NoUnwindInfo { .. })
        ));
        let outermost = Arm64Context::new(0x500, 0x1000, Some(0));
        assert!(step_frame_record(&outermost, &t).expect("steps").is_none());
    }
}
