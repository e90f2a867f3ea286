//! Managed arm64 unwinding (`unwind::aarch64::managed::virtual_unwind`): a RUNTIME_FUNCTION,
//! its `.xdata` (header, epilog scopes, unwind codes) or packed word, and a pc from the
//! input, over a stack
//! that is the input repeated, from an exact pc (prolog and epilog rules) and from a return
//! address; and the frame-record step over the same memory.
#![no_main]

use cdac::memory::DataLayout;
use cdac::unwind::aarch64::packed::PackedUnwind;
use cdac::unwind::aarch64::{managed::virtual_unwind, step_frame_record};
use cdac::unwind::Arm64Context;
use cdac_fuzz::{memory, Input, BASE, WRAP_WINDOW};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let entry = u64::from(input.u16() % 4096);
    let pc = BASE + u64::from(input.u32()) % WRAP_WINDOW;
    let sp = BASE + u64::from(input.u32()) % WRAP_WINDOW;
    let fp = BASE + u64::from(input.u32()) % WRAP_WINDOW;
    let lr = u64::from(input.u32());
    let exact = input.bool();
    let word = input.u32();
    let rest = input.rest();
    // A packed word is refused, or its prolog undone whole pops exactly its frame; every
    // plan skips no more operations than it has.
    if let Ok(p) = PackedUnwind::decode(word) {
        let popped: u64 = p.operations(false).iter().map(|o| o.add_sp).sum();
        assert_eq!(popped, p.frame_size);
        let (ops, skip) = p.plan(u64::from(word >> 16) * 4, exact);
        assert!(skip <= ops.len());
    }
    let code = memory(DataLayout::LE64, rest, false);
    let stack = memory(DataLayout::LE64, rest, true);
    let mut ctx = Arm64Context::new(pc, sp, Some(fp));
    ctx.regs[30] = Some(lr);
    if let Ok(caller) = virtual_unwind(&code, BASE, BASE + entry, &ctx, &stack, exact) {
        // The caller's stack pointer is always known, and its pc carries no PAC bits.
        assert!(caller.regs[31].is_some());
        assert_eq!(caller.pc, Arm64Context::strip_pac(caller.pc));
    }
    if let Ok(Some(caller)) = step_frame_record(&ctx, &stack) {
        assert!(caller.sp() > ctx.sp());
    }
});
