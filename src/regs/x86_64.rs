//! The registers of an x86-64 frame: what every layer that holds a thread's context (core
//! dumps, ptrace snapshots, perf samples, the unwinders) passes around. A leaf: it depends
//! on nothing else in the crate.

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
