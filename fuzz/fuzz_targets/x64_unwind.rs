//! Managed x64 unwinding (`unwind::x86_64::managed::virtual_unwind`): a RUNTIME_FUNCTION, its
//! unwind info and the code from the input, over a stack that is the input repeated; and
//! the native frame-pointer step over the same memory.
#![no_main]

use cdac::memory::DataLayout;
use cdac::unwind::x86_64::managed::virtual_unwind;
use cdac::unwind::native::NativeUnwinder;
use cdac::unwind::X64Context;
use cdac_fuzz::{memory, Input, BASE, WRAP_WINDOW};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let entry = u64::from(input.u16() % 4096);
    let ip = BASE + u64::from(input.u32()) % WRAP_WINDOW;
    let rsp = BASE + u64::from(input.u32()) % WRAP_WINDOW;
    let rbp = BASE + u64::from(input.u32()) % WRAP_WINDOW;
    let same = input.u8();
    let rest = input.rest();
    let code = memory(DataLayout::LE64, rest, false);
    let stack = memory(DataLayout::LE64, rest, true);
    let ctx = X64Context::new(ip, rsp, Some(rbp));
    let same_function = |a: u64| a % 256 < u64::from(same);
    if let Ok(caller) = virtual_unwind(&code, BASE, BASE + entry, &ctx, &stack, &same_function) {
        // The caller's stack pointer is always known after a step.
        assert!(caller.regs[4].is_some());
    }
    if let Ok(Some(caller)) = NativeUnwinder::step_frame_pointer(&ctx, &stack) {
        assert!(caller.rsp() > ctx.rsp());
    }
});
