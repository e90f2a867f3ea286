//! Unwind data of managed code: how large a method's unwind blob is (in ReadyToRun images
//! the method's GC info follows it immediately), and a function's length from its
//! `RUNTIME_FUNCTION` or unwind data.
//!
//! The sizes follow the runtime's own rule for managed code (`GetUnwindDataBlob`), which
//! differs from the general Windows rules in one way: a personality routine slot is always
//! counted, because the runtime always sets one for managed code.
//!
//! Formats, per architecture:
//! - x64: `UNWIND_INFO` = 4 header bytes (version and flags, prolog size, count of unwind
//!   codes, frame register and offset), 2 bytes per unwind code, then the personality
//!   routine RVA; the size is `align_up(4 + 2 * count + 4, 4)`.
//! - ARM64, ARM32 (`.xdata`): a header word (function length, version, X, E, epilog count,
//!   code words), an extension word when both counts are 0, epilog scope words unless E is
//!   set, the unwind code words, then the personality routine RVA.
//! - LoongArch64, RISC-V64: the same words, but the one-word header form is used when the
//!   code-words field (bits 27–31) is nonzero, and the two-word form otherwise.
//! - x86: `UNWIND_INFO` is just the 4-byte function length.

use crate::contracts::runtime_function::{RuntimeFunction, RuntimeFunctionLayout};
use crate::contracts::ContractError;
use crate::memory::Target;

/// Architectures whose unwind data this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnwindArch {
    /// 32-bit x86.
    X86,
    /// x86-64 (Windows-style unwind codes).
    Amd64,
    /// 32-bit ARM.
    Arm,
    /// 64-bit ARM.
    Arm64,
    /// 64-bit LoongArch.
    LoongArch64,
    /// 64-bit RISC-V.
    RiscV64,
}

impl UnwindArch {
    /// From a descriptor's `Architecture` name (`x86`, `x64`, `arm`, `arm64`,
    /// `loongarch64`, `riscv64`; case-insensitive). Unknown names are a typed error.
    pub fn from_name(name: &str) -> Result<UnwindArch, ContractError> {
        match name.to_ascii_lowercase().as_str() {
            "x86" | "i386" => Ok(UnwindArch::X86),
            "x64" | "amd64" | "x86_64" => Ok(UnwindArch::Amd64),
            "arm" | "arm32" => Ok(UnwindArch::Arm),
            "arm64" | "aarch64" => Ok(UnwindArch::Arm64),
            "loongarch64" => Ok(UnwindArch::LoongArch64),
            "riscv64" => Ok(UnwindArch::RiscV64),
            _ => Err(ContractError::UnsupportedArchitecture {
                contract: "unwind data",
                architecture: name.to_string(),
                supported: "x86, x64, arm, arm64, loongarch64, riscv64",
            }),
        }
    }

    /// Size of one `RUNTIME_FUNCTION`: `{begin, end, unwind}` on x64, `{begin, unwind}`
    /// elsewhere.
    pub fn runtime_function_size(self) -> u64 {
        self.runtime_function_layout().size
    }

    /// The `RUNTIME_FUNCTION` of the architecture as the PE format lays it out (what
    /// [`unwind_data_size`] and [`function_length`] read without a descriptor).
    pub fn runtime_function_layout(self) -> RuntimeFunctionLayout {
        match self {
            UnwindArch::Amd64 => RuntimeFunctionLayout::X64,
            _ => RuntimeFunctionLayout {
                size: 8,
                begin: 0,
                end: None,
                unwind_data: 4,
            },
        }
    }

    /// Bytes per unit of the function length in `.xdata` (instructions are 2 or 4 bytes
    /// on Thumb-2, 4 on the 64-bit RISC architectures); 1 elsewhere.
    pub fn function_length_unit(self) -> u64 {
        match self {
            UnwindArch::Arm => 2,
            UnwindArch::Arm64 | UnwindArch::LoongArch64 | UnwindArch::RiscV64 => 4,
            UnwindArch::X86 | UnwindArch::Amd64 => 1,
        }
    }
}

const WHAT: &str = "unwind info";

fn corrupt(addr: u64, detail: String) -> ContractError {
    ContractError::Corrupt {
        what: WHAT,
        addr,
        detail,
    }
}

/// Size in bytes of the unwind blob at `unwind_addr` (image base + the
/// `RUNTIME_FUNCTION`'s unwind data RVA), personality routine slot included. In a
/// ReadyToRun image the method's GC info starts right after it.
pub fn unwind_data_size(
    target: &Target,
    unwind_addr: u64,
    arch: UnwindArch,
) -> Result<u64, ContractError> {
    match arch {
        UnwindArch::X86 => Ok(4),
        UnwindArch::Amd64 => {
            let header = target.read_bytes(unwind_addr, 4)?;
            let version = header[0] & 0x7;
            if !(1..=2).contains(&version) {
                return Err(corrupt(
                    unwind_addr,
                    format!("UNWIND_INFO version {version} (expected 1 or 2)"),
                ));
            }
            let count = u64::from(header[2]);
            Ok(align_up4(4 + 2 * count + 4))
        }
        UnwindArch::Arm | UnwindArch::Arm64 => xdata_size_arm(target, unwind_addr, arch),
        UnwindArch::LoongArch64 | UnwindArch::RiscV64 => xdata_size_loongarch(target, unwind_addr),
    }
}

fn align_up4(n: u64) -> u64 {
    (n + 3) & !3
}

/// The ARM / ARM64 `.xdata` rule.
fn xdata_size_arm(target: &Target, addr: u64, arch: UnwindArch) -> Result<u64, ContractError> {
    let word0 = target.read_u32(addr)?;
    let vers = (word0 >> 18) & 0x3;
    if vers != 0 {
        return Err(corrupt(
            addr,
            format!("xdata version {vers} (expected 0) in header word {word0:#010x}"),
        ));
    }
    let (mut unwind_words, mut epilog_scopes) = match arch {
        UnwindArch::Arm => (word0 >> 28, (word0 >> 23) & 0x1F),
        _ => (word0 >> 27, (word0 >> 22) & 0x1F),
    };
    let mut size = 4u64;
    if unwind_words == 0 && epilog_scopes == 0 {
        let word1 = target.read_u32(addr.checked_add(4).ok_or_else(|| {
            corrupt(
                addr,
                "extension word past the end of the address space".into(),
            )
        })?)?;
        size += 4;
        epilog_scopes = word1 & 0xFFFF;
        unwind_words = (word1 >> 16) & 0xFF;
    }
    Ok(size + scopes_and_codes(word0, epilog_scopes, unwind_words))
}

/// The LoongArch64 / RISC-V64 rule: one header word when the code-words field is
/// nonzero, two otherwise.
fn xdata_size_loongarch(target: &Target, addr: u64) -> Result<u64, ContractError> {
    let word0 = target.read_u32(addr)?;
    let (size, epilog_scopes, unwind_words) = if word0 >> 27 != 0 {
        (4u64, (word0 >> 22) & 0x1F, (word0 >> 27) & 0x1F)
    } else {
        let word1 = target.read_u32(addr.checked_add(4).ok_or_else(|| {
            corrupt(
                addr,
                "extension word past the end of the address space".into(),
            )
        })?)?;
        (8u64, word1 & 0xFFFF, (word1 >> 16) & 0xFF)
    };
    Ok(size + scopes_and_codes(word0, epilog_scopes, unwind_words))
}

/// Epilog scope words (only when the E bit, bit 21, is clear: with E set the single
/// epilog is described in the header), unwind code words and the personality routine.
fn scopes_and_codes(word0: u32, epilog_scopes: u32, unwind_words: u32) -> u64 {
    let e_bit = word0 & (1 << 21) != 0;
    let scopes = if e_bit { 0 } else { u64::from(epilog_scopes) };
    4 * scopes + 4 * u64::from(unwind_words) + 4
}

/// Length in bytes of the function described by the `RUNTIME_FUNCTION` at
/// `runtime_function` in the image loaded at `image_base`: `End - Begin` on x64; on x86
/// the length in its `UNWIND_INFO`; elsewhere the 18-bit function length of its `.xdata`
/// (or the 11-bit length of packed unwind data) times the instruction unit.
pub fn function_length(
    target: &Target,
    image_base: u64,
    runtime_function: u64,
    arch: UnwindArch,
) -> Result<u64, ContractError> {
    let layout = arch.runtime_function_layout();
    let entry = RuntimeFunction::read(target, &layout, runtime_function)?;
    if let Some(length) = entry.stored_length(runtime_function) {
        return length;
    }
    match arch {
        UnwindArch::Amd64 => Err(corrupt(
            runtime_function,
            "an x64 RUNTIME_FUNCTION without an end".into(),
        )),
        _ => {
            let unwind = entry.unwind_data;
            if arch != UnwindArch::X86 && unwind & 3 != 0 {
                // Packed unwind data: the length is bits 2-12 of the word itself.
                return Ok(u64::from((unwind >> 2) & 0x7FF) * arch.function_length_unit());
            }
            let unwind_addr = image_base.checked_add(u64::from(unwind)).ok_or_else(|| {
                corrupt(
                    runtime_function,
                    "unwind data past the end of the address space".into(),
                )
            })?;
            match arch {
                UnwindArch::X86 => Ok(u64::from(target.read_u32(unwind_addr)?)),
                _ => xdata_function_length(target, unwind_addr, arch),
            }
        }
    }
}

/// The function length in bytes recorded in the `.xdata` header word at `xdata` (ARM,
/// ARM64, LoongArch64, RISC-V64): bits 0–17 times the instruction unit.
pub fn xdata_function_length(
    target: &Target,
    xdata: u64,
    arch: UnwindArch,
) -> Result<u64, ContractError> {
    if matches!(arch, UnwindArch::X86 | UnwindArch::Amd64) {
        return Err(ContractError::UnsupportedArchitecture {
            contract: "xdata unwind data",
            architecture: format!("{arch:?}"),
            supported: "arm, arm64, loongarch64, riscv64",
        });
    }
    let word0 = target.read_u32(xdata)?;
    Ok(u64::from(word0 & 0x3FFFF) * arch.function_length_unit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    fn words(layout: DataLayout, ws: &[u32]) -> Target {
        let mut b = MemoryBuilder::new(layout);
        let r = b.region(0x1000, ws.len() * 4);
        for (i, w) in ws.iter().enumerate() {
            r.u32(i * 4, *w);
        }
        b.into_target()
    }

    #[test]
    fn amd64_examples() {
        for (count, size) in [(3u8, 16u64), (4, 16), (0, 8), (1, 12), (2, 12), (5, 20)] {
            let mut b = MemoryBuilder::new(DataLayout::LE64);
            b.region(0x1000, 4).bytes(0, &[0x19, 0x10, count, 0x05]);
            let t = b.into_target();
            assert_eq!(
                unwind_data_size(&t, 0x1000, UnwindArch::Amd64).expect("size"),
                size,
                "{count} codes"
            );
        }
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 4).bytes(0, &[0x00, 0x10, 3, 0x05]);
        assert!(matches!(
            unwind_data_size(&b.into_target(), 0x1000, UnwindArch::Amd64),
            Err(ContractError::Corrupt { .. })
        ));
    }

    #[test]
    fn arm64_xdata() {
        let x = 1 << 20;
        let e = 1 << 21;
        // 2 epilog scopes, 3 code words, E clear: 4 + 8 + 12 + 4.
        let w0 = 100 | x | (2 << 22) | (3 << 27);
        let t = words(DataLayout::LE64, &[w0]);
        assert_eq!(
            unwind_data_size(&t, 0x1000, UnwindArch::Arm64).expect("size"),
            28
        );
        assert_eq!(
            xdata_function_length(&t, 0x1000, UnwindArch::Arm64).expect("len"),
            400
        );
        // Same with E set: the epilog field is an index, no scope words.
        let t = words(DataLayout::LE64, &[w0 | e]);
        assert_eq!(
            unwind_data_size(&t, 0x1000, UnwindArch::Arm64).expect("size"),
            20
        );
        // Extension word: 40 scopes, 300 code words.
        let t = words(DataLayout::LE64, &[7 | x, 40 | (300 & 0xFF) << 16]);
        assert_eq!(
            unwind_data_size(&t, 0x1000, UnwindArch::Arm64).expect("size"),
            4 + 4 + 160 + 4 * (300 & 0xFF) + 4
        );
        // Extension word with E set.
        let t = words(DataLayout::LE64, &[7 | x | e, 40 | 9 << 16]);
        assert_eq!(
            unwind_data_size(&t, 0x1000, UnwindArch::Arm64).expect("size"),
            4 + 4 + 36 + 4
        );
        // Version field must be 0.
        let t = words(DataLayout::LE64, &[w0 | 1 << 18]);
        assert!(matches!(
            unwind_data_size(&t, 0x1000, UnwindArch::Arm64),
            Err(ContractError::Corrupt { .. })
        ));
        // Extension word missing.
        let t = words(DataLayout::LE64, &[7 | x]);
        assert!(matches!(
            unwind_data_size(&t, 0x1000, UnwindArch::Arm64),
            Err(ContractError::Read(_))
        ));
    }

    #[test]
    fn arm32_xdata() {
        // ARM32: epilog count at 23-27, code words at 28-31, F at 22.
        let w0 = 50 | (1 << 20) | (1 << 22) | (3 << 23) | (2 << 28);
        let t = words(DataLayout::LE32, &[w0]);
        assert_eq!(
            unwind_data_size(&t, 0x1000, UnwindArch::Arm).expect("size"),
            4 + 12 + 8 + 4
        );
        assert_eq!(
            xdata_function_length(&t, 0x1000, UnwindArch::Arm).expect("len"),
            100
        );
    }

    #[test]
    fn loongarch_and_riscv_xdata() {
        let w0 = 10 | (1 << 20) | (2 << 22) | (3 << 27);
        for arch in [UnwindArch::LoongArch64, UnwindArch::RiscV64] {
            let t = words(DataLayout::LE64, &[w0]);
            assert_eq!(
                unwind_data_size(&t, 0x1000, arch).expect("size"),
                4 + 8 + 12 + 4
            );
            // Code words 0 selects the two-word header even with an epilog count.
            let t = words(DataLayout::LE64, &[10 | (2 << 22), 5 | (6 << 16)]);
            assert_eq!(
                unwind_data_size(&t, 0x1000, arch).expect("size"),
                8 + 20 + 24 + 4
            );
            let t = words(DataLayout::LE64, &[10 | (1 << 21), 5 | (6 << 16)]);
            assert_eq!(
                unwind_data_size(&t, 0x1000, arch).expect("size"),
                8 + 24 + 4
            );
        }
    }

    #[test]
    fn x86_and_big_endian() {
        let t = words(DataLayout::BE64, &[(2 << 22) | (1 << 27) | 9]);
        assert_eq!(
            unwind_data_size(&t, 0x1000, UnwindArch::X86).expect("size"),
            4
        );
        assert_eq!(
            unwind_data_size(&t, 0x1000, UnwindArch::Arm64).expect("size"),
            4 + 8 + 4 + 4
        );
    }

    #[test]
    fn function_lengths() {
        // x64 RUNTIME_FUNCTION {begin, end, unwind}.
        let t = words(DataLayout::LE64, &[0x100, 0x180, 0x2000]);
        assert_eq!(
            function_length(&t, 0, 0x1000, UnwindArch::Amd64).expect("len"),
            0x80
        );
        let t = words(DataLayout::LE64, &[0x180, 0x100, 0x2000]);
        assert!(matches!(
            function_length(&t, 0, 0x1000, UnwindArch::Amd64),
            Err(ContractError::Corrupt { .. })
        ));
        // ARM64 {begin, unwind RVA} with xdata at image base + RVA.
        let t = words(DataLayout::LE64, &[0x100, 0x8, 25 | (1 << 27) | (1 << 20)]);
        assert_eq!(
            function_length(&t, 0x1000, 0x1000, UnwindArch::Arm64).expect("len"),
            100
        );
        // Packed ARM64 unwind data: flag 1, length 30 instructions.
        let t = words(DataLayout::LE64, &[0x100, 1 | (30 << 2)]);
        assert_eq!(
            function_length(&t, 0x1000, 0x1000, UnwindArch::Arm64).expect("len"),
            120
        );
        // x86 {begin, unwind RVA}, UNWIND_INFO = {function length}.
        let t = words(DataLayout::LE32, &[0x100, 0x8, 77]);
        assert_eq!(
            function_length(&t, 0x1000, 0x1000, UnwindArch::X86).expect("len"),
            77
        );
        assert!(matches!(
            xdata_function_length(&t, 0x1000, UnwindArch::Amd64),
            Err(ContractError::UnsupportedArchitecture { .. })
        ));
    }

    #[test]
    fn names() {
        assert_eq!(UnwindArch::from_name("x64").ok(), Some(UnwindArch::Amd64));
        assert_eq!(UnwindArch::from_name("x86").ok(), Some(UnwindArch::X86));
        assert!(UnwindArch::from_name("mips").is_err());
        assert_eq!(UnwindArch::Amd64.runtime_function_size(), 12);
        assert_eq!(UnwindArch::Arm64.runtime_function_size(), 8);
    }
}
