//! Register contexts, one file per architecture (the types every layer passes around,
//! so that the memory and process layers need nothing from the unwinders), and
//! [`Registers`], a thread's registers on whichever architecture it runs.

mod aarch64;
mod x86_64;

pub use aarch64::{arm64_reg, Arm64Context};
pub use x86_64::{x64_reg, X64Context};

/// A thread's (or a frame's) registers, of the architecture the target runs.
// A context is a value a walk copies frame by frame; boxing the larger one would allocate
// per frame for no saving.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registers {
    /// An x86-64 context.
    X64(X64Context),
    /// An AArch64 context.
    Arm64(Arm64Context),
}

impl Registers {
    /// The instruction pointer (program counter).
    pub fn pc(&self) -> u64 {
        match self {
            Registers::X64(c) => c.rip,
            Registers::Arm64(c) => c.pc,
        }
    }

    /// The stack pointer.
    pub fn sp(&self) -> u64 {
        match self {
            Registers::X64(c) => c.rsp(),
            Registers::Arm64(c) => c.sp(),
        }
    }

    /// Register `number` in the architecture's own numbering (x64: the unwind-code order
    /// rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8–r15; arm64: x0–x30, then sp), when known.
    /// GC info names registers so.
    pub fn register(&self, number: usize) -> Option<u64> {
        match self {
            Registers::X64(c) => c.regs.get(number).copied().flatten(),
            Registers::Arm64(c) => c.regs.get(number).copied().flatten(),
        }
    }

    /// The x64 context, on x64.
    pub fn as_x64(&self) -> Option<&X64Context> {
        match self {
            Registers::X64(c) => Some(c),
            Registers::Arm64(_) => None,
        }
    }

    /// The architecture's name as the runtime spells it (`x64`, `arm64`).
    pub fn architecture(&self) -> &'static str {
        match self {
            Registers::X64(_) => "x64",
            Registers::Arm64(_) => "arm64",
        }
    }
}

impl From<X64Context> for Registers {
    fn from(c: X64Context) -> Self {
        Registers::X64(c)
    }
}

impl From<Arm64Context> for Registers {
    fn from(c: Arm64Context) -> Self {
        Registers::Arm64(c)
    }
}
