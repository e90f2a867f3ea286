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
use crate::target::{ReadError, Target};

/// The memory an unwinder reads: stack slots and saved registers. A [`Target`] is one; a
/// stack copied while a thread was stopped, over the target, is another.
pub trait StackMemory {
    /// The 8 bytes at `addr`, little-endian.
    fn read_u64(&self, addr: u64) -> Result<u64, ReadError>;
}

impl StackMemory for Target {
    fn read_u64(&self, addr: u64) -> Result<u64, ReadError> {
        Target::read_u64(self, addr)
    }
}

/// Register numbers of x64, in the order of the x64 unwind codes (and of DWARF's
/// numbering's first 16, which differs: use [`X64Context::from_dwarf`] for that).
pub mod x64_reg {
    /// `rax`.
    pub const RAX: usize = 0;
    /// `rcx`.
    pub const RCX: usize = 1;
    /// `rdx`.
    pub const RDX: usize = 2;
    /// `rbx`.
    pub const RBX: usize = 3;
    /// `rsp`.
    pub const RSP: usize = 4;
    /// `rbp`.
    pub const RBP: usize = 5;
    /// `rsi`.
    pub const RSI: usize = 6;
    /// `rdi`.
    pub const RDI: usize = 7;
    /// `r8`.
    pub const R8: usize = 8;
    /// `r12`.
    pub const R12: usize = 12;
    /// `r15`.
    pub const R15: usize = 15;
}

/// The registers of one x64 frame: the instruction pointer and the 16 general registers
/// in unwind-code order (`x64_reg`), each known or not. After an unwind step only the
/// callee-saved registers (rbx, rbp, r12–r15), rsp and rip are meaningful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct X64Context {
    /// Instruction pointer.
    pub rip: u64,
    /// General registers by unwind-code number; `None` where unknown.
    pub regs: [Option<u64>; 16],
}

impl X64Context {
    /// A context with only rip, rsp and rbp known.
    pub fn new(rip: u64, rsp: u64, rbp: Option<u64>) -> Self {
        let mut regs = [None; 16];
        regs[x64_reg::RSP] = Some(rsp);
        regs[x64_reg::RBP] = rbp;
        X64Context { rip, regs }
    }

    /// The stack pointer (always known in a valid context).
    pub fn rsp(&self) -> u64 {
        self.regs[x64_reg::RSP].unwrap_or(0)
    }

    /// The frame pointer, when known.
    pub fn rbp(&self) -> Option<u64> {
        self.regs[x64_reg::RBP]
    }

    /// Unwind-code register number of DWARF register `dwarf` (0–15), which orders them
    /// rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp, r8–r15.
    pub fn from_dwarf(dwarf: u16) -> Option<usize> {
        const MAP: [usize; 16] = [0, 2, 1, 3, 6, 7, 5, 4, 8, 9, 10, 11, 12, 13, 14, 15];
        MAP.get(usize::from(dwarf)).copied()
    }
}

/// Why a step of unwinding failed. The frames found before it stand.
#[derive(Debug, thiserror::Error)]
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
