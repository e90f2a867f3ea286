//! Unwinding x64 frames: managed code by the Windows x64 unwind data the runtime emits on
//! every operating system ([`managed`]), native code by the shared DWARF CFI stepper of
//! [`crate::unwind::native`], and signal trampolines without CFI (`signal`).

pub mod managed;
pub(crate) mod signal;
