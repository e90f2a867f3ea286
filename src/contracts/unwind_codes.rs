//! Decoding x64 `UNWIND_INFO` (the Windows x64 format CoreCLR uses on every OS) into its
//! header and unwind operations, for people reading how a frame is unwound.

use serde::Serialize;

use super::ContractError;
use crate::memory::Target;

/// x64 register names in unwind-code numbering.
const REGISTERS: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15",
];

/// A decoded x64 UNWIND_INFO.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Amd64UnwindInfo {
    /// Format version (1 or 2).
    pub version: u8,
    /// Flags: 1 exception handler, 2 termination handler, 4 chained.
    pub flags: u8,
    /// Bytes of prolog.
    pub prolog_size: u8,
    /// Frame pointer register, when one is set up.
    pub frame_register: Option<&'static str>,
    /// Scaled offset of the frame pointer from RSP (×16).
    pub frame_offset: u32,
    /// The operations, in the order they are listed (last prolog instruction first).
    pub codes: Vec<UnwindOp>,
}

/// One unwind operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnwindOp {
    /// Offset in the prolog just after the instruction.
    pub code_offset: u8,
    /// What the instruction did, e.g. "push rbp", "sub rsp, 0x28".
    pub operation: String,
}

/// Unwind operation codes (`UWOP_*`).
pub mod op {
    #![allow(missing_docs)]
    pub const PUSH_NONVOL: u8 = 0;
    pub const ALLOC_LARGE: u8 = 1;
    pub const ALLOC_SMALL: u8 = 2;
    pub const SET_FPREG: u8 = 3;
    pub const SAVE_NONVOL: u8 = 4;
    pub const SAVE_NONVOL_FAR: u8 = 5;
    pub const EPILOG: u8 = 6;
    pub const SPARE: u8 = 7;
    pub const SAVE_XMM128: u8 = 8;
    pub const SAVE_XMM128_FAR: u8 = 9;
    pub const PUSH_MACHFRAME: u8 = 10;
    /// CoreCLR on Unix: a frame offset too large for the header's 4 bits.
    pub const SET_FPREG_LARGE: u8 = 11;
}

/// `UNW_FLAG_CHAININFO`: a `RUNTIME_FUNCTION` follows the unwind codes.
pub const UNW_FLAG_CHAININFO: u8 = 4;

/// An x64 `UNWIND_INFO` as stored: its header and unwind-code slots. The one reader of
/// this format; the managed unwinder undoes its operations, [`decode_amd64`] describes
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X64UnwindInfo {
    /// Where it is.
    pub address: u64,
    /// Format version (1 or 2 in valid data; not checked here).
    pub version: u8,
    /// Flags: 1 exception handler, 2 termination handler, 4 chained.
    pub flags: u8,
    /// Bytes of prolog.
    pub prolog_size: u8,
    /// Frame register number (0: none).
    pub frame_register: usize,
    /// The header's frame offset, in units of 16 bytes.
    pub frame_offset: u64,
    /// The unwind-code slots.
    pub slots: Vec<u16>,
}

impl X64UnwindInfo {
    /// Reads the header and the code slots at `addr`.
    pub fn read(target: &Target, addr: u64) -> Result<X64UnwindInfo, ContractError> {
        let h = target.read_bytes(addr, 4)?;
        let count = usize::from(h[2]);
        let body = target.read_bytes(addr.wrapping_add(4), 2 * count)?;
        Ok(X64UnwindInfo {
            address: addr,
            version: h[0] & 7,
            flags: h[0] >> 3,
            prolog_size: h[1],
            frame_register: usize::from(h[3] & 0xf),
            frame_offset: u64::from(h[3] >> 4),
            slots: body
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect(),
        })
    }

    fn corrupt(&self, detail: String) -> ContractError {
        ContractError::Corrupt {
            what: "x64 unwind info",
            addr: self.address,
            detail,
        }
    }

    /// Where the chained `RUNTIME_FUNCTION` is (after an even number of slots), when the
    /// chain flag is set.
    pub fn chained_entry(&self) -> Option<u64> {
        let count = self.slots.len() as u64;
        (self.flags & UNW_FLAG_CHAININFO != 0)
            .then(|| self.address.wrapping_add(4 + 2 * (count + (count & 1))))
    }

    /// (code offset, operation, operation info) of the code at slot `i` (`i` below the
    /// slot count).
    pub fn code(&self, i: usize) -> (u8, u8, u8) {
        let c = self.slots.get(i).copied().unwrap_or(0);
        ((c & 0xff) as u8, ((c >> 8) & 0xf) as u8, (c >> 12) as u8)
    }

    /// Slot `i` as a number, or an error when the codes end first.
    pub fn slot(&self, i: usize) -> Result<u64, ContractError> {
        self.slots.get(i).map(|&s| u64::from(s)).ok_or_else(|| {
            self.corrupt(format!(
                "unwind code runs past the {} slots",
                self.slots.len()
            ))
        })
    }

    /// How many slots the operation at slot `i` takes.
    pub fn slots_of(&self, i: usize) -> Result<usize, ContractError> {
        let (_, o, info) = self.code(i);
        Ok(match o {
            op::PUSH_NONVOL | op::ALLOC_SMALL | op::SET_FPREG | op::PUSH_MACHFRAME => 1,
            op::ALLOC_LARGE if info == 0 => 2,
            op::ALLOC_LARGE if info == 1 => 3,
            op::ALLOC_LARGE => {
                return Err(self.corrupt(format!("UWOP_ALLOC_LARGE with info {info}")));
            }
            op::SAVE_NONVOL | op::SAVE_XMM128 | op::EPILOG => 2,
            op::SAVE_NONVOL_FAR | op::SAVE_XMM128_FAR | op::SPARE | op::SET_FPREG_LARGE => 3,
            _ => return Err(self.corrupt(format!("unknown unwind operation {o} at slot {i}"))),
        })
    }

    /// The frame offset in bytes: the header's ×16, or UWOP_SET_FPREG_LARGE's when the
    /// header says 15 and such a code exists.
    pub fn frame_offset_bytes(&self) -> Result<u64, ContractError> {
        if self.frame_offset == 15 {
            let mut i = 0;
            while i < self.slots.len() {
                let (_, o, _) = self.code(i);
                if o == op::SET_FPREG_LARGE {
                    let v = self.slot(i + 1)? | (self.slot(i + 2)? << 16);
                    return Ok(v * 16);
                }
                i += self.slots_of(i)?;
            }
        }
        Ok(self.frame_offset * 16)
    }

    /// Code offset of the instruction that set the frame register (UWOP_SET_FPREG or
    /// _LARGE), if there is one.
    pub fn set_fpreg_offset(&self) -> Result<Option<u8>, ContractError> {
        let mut i = 0;
        while i < self.slots.len() {
            let (off, o, _) = self.code(i);
            if o == op::SET_FPREG || o == op::SET_FPREG_LARGE {
                return Ok(Some(off));
            }
            i += self.slots_of(i)?;
        }
        Ok(None)
    }
}

/// Decodes the UNWIND_INFO at `addr` into words.
pub fn decode_amd64(target: &Target, addr: u64) -> Result<Amd64UnwindInfo, ContractError> {
    let info = X64UnwindInfo::read(target, addr)?;
    let reg = |n: u8| REGISTERS[usize::from(n & 0xf)];
    let mut codes = Vec::new();
    let mut i = 0;
    while i < info.slots.len() {
        let (offset, o, n) = info.code(i);
        let used = info.slots_of(i)?;
        let one = |k: usize| info.slot(i + k);
        let two = |k: usize| Ok::<u64, ContractError>(one(k)? | (one(k + 1)? << 16));
        let text = match o {
            op::PUSH_NONVOL => format!("push {}", reg(n)),
            op::ALLOC_LARGE if n == 0 => format!("sub rsp, {:#x}", one(1)? * 8),
            op::ALLOC_LARGE => format!("sub rsp, {:#x}", two(1)?),
            op::ALLOC_SMALL => format!("sub rsp, {:#x}", u64::from(n) * 8 + 8),
            op::SET_FPREG => "set frame pointer".to_string(),
            op::SET_FPREG_LARGE => format!("set frame pointer, offset {:#x}", two(1)? * 16),
            op::SAVE_NONVOL => format!("mov [rsp+{:#x}], {}", one(1)? * 8, reg(n)),
            op::SAVE_NONVOL_FAR => format!("mov [rsp+{:#x}], {}", two(1)?, reg(n)),
            op::EPILOG if info.version == 2 => "epilog".to_string(),
            op::SAVE_XMM128 => format!("movaps [rsp+{:#x}], xmm{n}", one(1)? * 16),
            op::SAVE_XMM128_FAR => format!("movaps [rsp+{:#x}], xmm{n}", two(1)?),
            op::PUSH_MACHFRAME if n == 1 => "push machine frame with error code".to_string(),
            op::PUSH_MACHFRAME => "push machine frame".to_string(),
            _ => {
                return Err(ContractError::Corrupt {
                    what: "x64 unwind info",
                    addr,
                    detail: format!("unknown operation {o} at slot {i}"),
                })
            }
        };
        codes.push(UnwindOp {
            code_offset: offset,
            operation: text,
        });
        i += used;
    }
    Ok(Amd64UnwindInfo {
        version: info.version,
        flags: info.flags,
        prolog_size: info.prolog_size,
        frame_register: (info.frame_register != 0).then(|| REGISTERS[info.frame_register]),
        frame_offset: u32::try_from(info.frame_offset * 16).unwrap_or(u32::MAX),
        codes,
    })
}
