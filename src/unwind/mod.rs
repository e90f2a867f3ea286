//! Unwinding thread stacks: one frame at a time, from a register context to its caller's.
//!
//! Managed code is unwound with the runtime's own unwind data (the Windows x64
//! `UNWIND_INFO` or ARM64 `.xdata` the JIT and crossgen2 emit, found through the
//! ExecutionManager): one folder per architecture, [`x86_64`] and [`aarch64`]. Native code
//! is unwound with the CFI of the ELF module that holds it ([`native`], shared by both),
//! falling back to each architecture's frame chain. Each unwinder is one step: given the
//! context of a frame, the context of its caller, or `None` at the outermost frame.

pub mod aarch64;
pub(crate) mod elf_modules;
pub mod native;
pub mod x86_64;

use crate::contracts::ContractError;
use crate::memory::ReadError;

pub use crate::memory::StackMemory;
pub use crate::regs::{arm64_reg, x64_reg, Arm64Context, Registers, X64Context};

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

/// What the DWARF CFI stepper needs of an architecture's register context.
pub trait CfiContext: Copy + std::fmt::Debug {
    /// DWARF number of the stack pointer.
    const DWARF_SP: u16;

    /// The program counter.
    fn pc(&self) -> u64;

    /// The stack pointer.
    fn sp(&self) -> u64;

    /// The value of DWARF register `reg`, when known.
    fn dwarf(&self, reg: u16) -> Option<u64>;

    /// Sets DWARF register `reg` (registers the context does not hold are ignored).
    fn set_dwarf(&mut self, reg: u16, value: Option<u64>);

    /// The caller's context at `pc` (a return address), the callee-saved registers kept.
    fn caller_at(&self, pc: u64) -> Self;

    /// The return address when the CFI row has no rule for its column: on x64 the column
    /// is no register, so unknown; on arm64 it is x30, unchanged.
    fn return_address_without_rule(&self, ra: u16) -> Option<u64>;
}

impl CfiContext for X64Context {
    const DWARF_SP: u16 = 7;

    fn pc(&self) -> u64 {
        self.rip
    }

    fn sp(&self) -> u64 {
        self.rsp()
    }

    fn dwarf(&self, reg: u16) -> Option<u64> {
        // Column 16 is the return address: rip.
        if reg == 16 {
            return Some(self.rip);
        }
        self.regs[X64Context::from_dwarf(reg)?]
    }

    fn set_dwarf(&mut self, reg: u16, value: Option<u64>) {
        if let Some(r) = X64Context::from_dwarf(reg) {
            self.regs[r] = value;
        }
    }

    fn caller_at(&self, pc: u64) -> Self {
        // rbx, rbp, r12–r15 (System V callee-saved) carry over unless a rule says.
        let mut next = X64Context {
            rip: pc,
            regs: [None; 16],
        };
        for r in [3, 5, 12, 13, 14, 15] {
            next.regs[r] = self.regs[r];
        }
        next
    }

    fn return_address_without_rule(&self, _ra: u16) -> Option<u64> {
        None
    }
}

impl CfiContext for Arm64Context {
    const DWARF_SP: u16 = 31;

    fn pc(&self) -> u64 {
        self.pc
    }

    fn sp(&self) -> u64 {
        Arm64Context::sp(self)
    }

    fn dwarf(&self, reg: u16) -> Option<u64> {
        // 0–30 are x0–x30 and 31 is sp, as in the context.
        self.regs.get(usize::from(reg)).copied().flatten()
    }

    fn set_dwarf(&mut self, reg: u16, value: Option<u64>) {
        if let Some(slot) = self.regs.get_mut(usize::from(reg)) {
            *slot = value;
        }
    }

    fn caller_at(&self, pc: u64) -> Self {
        // x19–x29 (AAPCS64 callee-saved) carry over unless a rule says.
        let mut next = Arm64Context::new(Arm64Context::strip_pac(pc), 0, None);
        next.regs[arm64_reg::SP] = None;
        for r in arm64_reg::X19..=arm64_reg::FP {
            next.regs[r] = self.regs[r];
        }
        next
    }

    fn return_address_without_rule(&self, ra: u16) -> Option<u64> {
        self.dwarf(ra)
    }
}
