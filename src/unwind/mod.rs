//! Unwinding thread stacks: one frame at a time, from a register context to its caller's.
//!
//! Managed code is unwound with the runtime's own unwind data (the Windows x64
//! `UNWIND_INFO` the JIT and crossgen2 emit, found through the ExecutionManager); native
//! code with the CFI of the ELF module that holds it (`.eh_frame`), falling back to the
//! frame-pointer chain. Each unwinder is one step: given the context of a frame, the
//! context of its caller, or `None` at the outermost frame.

pub mod elf_modules;
pub mod managed_x64;
pub mod native_x64;

use crate::contracts::ContractError;
use crate::memory::ReadError;

pub use crate::memory::StackMemory;
pub use crate::regs::{x64_reg, X64Context};

/// Why a step of unwinding failed. The frames found before it stand.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnwindError {
    /// Target memory (the stack, unwind data) could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),

    /// The runtime's data about the code could not be read.
    #[error(transparent)]
    Contract(#[from] ContractError),

    /// The unwind data is not what it should be.
    #[error("bad unwind data for {ip:#x}: {detail}")]
    BadUnwindData {
        /// Instruction pointer of the frame.
        ip: u64,
        /// What is wrong.
        detail: String,
    },

    /// No unwinder knows the code at this address (no module, no managed code, and no
    /// usable frame pointer).
    #[error("no unwind information for {ip:#x}")]
    NoUnwindInfo {
        /// Instruction pointer of the frame.
        ip: u64,
    },

    /// The step did not move up the stack (a loop in damaged data).
    #[error("unwinding stopped at {ip:#x}: the caller's stack pointer {sp:#x} is not above this frame's")]
    NotProgressing {
        /// Instruction pointer of the frame.
        ip: u64,
        /// Stack pointer, unchanged by the step.
        sp: u64,
    },
}
