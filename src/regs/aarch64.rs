//! The registers of an AArch64 frame: x0–x30, sp and pc, as a core's `NT_PRSTATUS`
//! (`struct user_pt_regs`) holds them and the arm64 unwinders restore them. A leaf: it
//! depends on nothing else in the crate.

/// Register numbers of AArch64: x0–x30 are 0–30 (as in DWARF and the Windows ARM64 unwind
/// codes), the stack pointer is 31.
pub mod arm64_reg {
    /// `x19`, the first callee-saved general register.
    pub const X19: usize = 19;
    /// `x28`, the last callee-saved general register.
    pub const X28: usize = 28;
    /// `x29`, the frame pointer.
    pub const FP: usize = 29;
    /// `x30`, the link register (the return address).
    pub const LR: usize = 30;
    /// `sp`.
    pub const SP: usize = 31;
}

/// Bits of a code address that are address, not a pointer-authentication code: user space
/// on Linux arm64 uses at most 52-bit virtual addresses, and signed return addresses carry
/// their PAC above them.
const ADDRESS_BITS: u64 = (1 << 52) - 1;

/// The registers of one AArch64 frame: the program counter and x0–x30 plus sp (by
/// [`arm64_reg`] number), each known or not. After an unwind step only the callee-saved
/// registers (x19–x29), sp, lr and pc are meaningful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Arm64Context {
    /// Program counter.
    pub pc: u64,
    /// x0–x30, then sp; `None` where unknown.
    pub regs: [Option<u64>; 32],
}

impl Arm64Context {
    /// A context with only pc, sp and the frame pointer known.
    pub fn new(pc: u64, sp: u64, fp: Option<u64>) -> Self {
        let mut regs = [None; 32];
        regs[arm64_reg::SP] = Some(sp);
        regs[arm64_reg::FP] = fp;
        Arm64Context { pc, regs }
    }

    /// The stack pointer (always known in a valid context).
    pub fn sp(&self) -> u64 {
        self.regs[arm64_reg::SP].unwrap_or(0)
    }

    /// The frame pointer (x29), when known.
    pub fn fp(&self) -> Option<u64> {
        self.regs[arm64_reg::FP]
    }

    /// The link register (x30), when known.
    pub fn lr(&self) -> Option<u64> {
        self.regs[arm64_reg::LR]
    }

    /// `addr` without a pointer-authentication code in its top bits.
    pub fn strip_pac(addr: u64) -> u64 {
        addr & ADDRESS_BITS
    }

    /// The context of a `struct user_pt_regs` (x0–x30, sp, pc, pstate), given its words.
    pub fn from_user_pt_regs(word: &dyn Fn(usize) -> Option<u64>) -> Option<Arm64Context> {
        let mut ctx = Arm64Context {
            pc: word(32)?,
            regs: [None; 32],
        };
        for (i, slot) in ctx.regs.iter_mut().enumerate() {
            *slot = Some(word(i)?);
        }
        Some(ctx)
    }
}
