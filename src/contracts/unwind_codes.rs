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

/// Decodes the UNWIND_INFO at `addr`.
pub fn decode_amd64(target: &Target, addr: u64) -> Result<Amd64UnwindInfo, ContractError> {
    let header = target.read_bytes(addr, 4)?;
    let version = header[0] & 7;
    let count = usize::from(header[2]);
    let slots_bytes = target.read_bytes(addr.wrapping_add(4), count * 2)?;
    let slot = |i: usize| -> Option<u16> {
        slots_bytes
            .get(i * 2..i * 2 + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let corrupt = |detail: String| ContractError::Corrupt {
        what: "x64 unwind info",
        addr,
        detail,
    };
    let mut codes = Vec::new();
    let mut i = 0;
    while i < count {
        let Some(code) = slot(i) else { break };
        let (offset, op, info) = (
            (code & 0xff) as u8,
            ((code >> 8) & 0xf) as u8,
            (code >> 12) as usize,
        );
        let next = |k: usize| {
            slot(i + k)
                .map(u32::from)
                .ok_or_else(|| corrupt(format!("operation {op} at slot {i} runs past the codes")))
        };
        let (text, used) = match op {
            0 => (format!("push {}", REGISTERS[info]), 1),
            1 if info == 0 => (format!("sub rsp, {:#x}", next(1)? * 8), 2),
            1 => (format!("sub rsp, {:#x}", next(1)? | (next(2)? << 16)), 3),
            2 => (format!("sub rsp, {:#x}", info * 8 + 8), 1),
            3 => ("set frame pointer".to_string(), 1),
            4 => (
                format!("mov [rsp+{:#x}], {}", next(1)? * 8, REGISTERS[info]),
                2,
            ),
            5 => (
                format!(
                    "mov [rsp+{:#x}], {}",
                    next(1)? | (next(2)? << 16),
                    REGISTERS[info]
                ),
                3,
            ),
            6 if version == 2 => ("epilog".to_string(), 2),
            8 => (format!("movaps [rsp+{:#x}], xmm{info}", next(1)? * 16), 2),
            9 => (
                format!("movaps [rsp+{:#x}], xmm{info}", next(1)? | (next(2)? << 16)),
                3,
            ),
            10 => (
                format!(
                    "push machine frame{}",
                    if info == 1 { " with error code" } else { "" }
                ),
                1,
            ),
            _ => return Err(corrupt(format!("unknown operation {op} at slot {i}"))),
        };
        codes.push(UnwindOp {
            code_offset: offset,
            operation: text,
        });
        i += used;
    }
    let frame = header[3] & 0xf;
    Ok(Amd64UnwindInfo {
        version,
        flags: header[0] >> 3,
        prolog_size: header[1],
        frame_register: (frame != 0).then(|| REGISTERS[usize::from(frame)]),
        frame_offset: u32::from(header[3] >> 4) * 16,
        codes,
    })
}
