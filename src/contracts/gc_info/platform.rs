//! Per-architecture parameters of the GCInfo encoding: the variable-length encoding bases
//! and how quantities are normalized (scaled down) when written.
//!
//! The values are those of the runtime's `gcinfotypes.h`. The runtime picks one set at
//! compile time; a reader of another process has to pick it from the target's
//! architecture ([`GcInfoArch`]).

use crate::contracts::ContractError;

/// The GCInfo encoding variants. x86 is absent: it uses a different format altogether.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GcInfoArch {
    /// x64.
    Amd64,
    /// AArch64.
    Arm64,
    /// 32-bit ARM (Thumb-2).
    Arm,
    /// LoongArch64.
    LoongArch64,
    /// RISC-V 64.
    RiscV64,
    /// The CoreCLR interpreter's own GC info (.NET 10 and later).
    Interpreter,
}

/// Variable-length encoding bases (bits of data per chunk) and layout switches of one
/// [`GcInfoArch`]. Field names follow the runtime's constants, lower-cased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoding {
    /// Chunk size in bits of the variable-length encoding of the code length.
    pub code_length_encbase: u32,
    /// ReturnKind bits in a slim header (versions 2 and 3); `None` where the encoding
    /// never had them.
    pub return_kind_bits_slim: Option<u32>,
    /// ReturnKind bits in a fat header (versions 2 and 3).
    pub return_kind_bits_fat: Option<u32>,
    /// Chunk size in bits of the variable-length encoding of the generics inst context stack slot.
    pub generics_inst_context_stack_slot_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the gs cookie stack slot.
    pub gs_cookie_stack_slot_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the psp sym stack slot.
    pub psp_sym_stack_slot_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the security object stack slot.
    pub security_object_stack_slot_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the stack base register.
    pub stack_base_register_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the size of stack area.
    pub size_of_stack_area_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the size of edit and continue preserved area.
    pub size_of_edit_and_continue_preserved_area_encbase: u32,
    /// Present only where the fat header carries the EnC fixed stack frame size.
    pub size_of_edit_and_continue_fixed_stack_frame_encbase: Option<u32>,
    /// Chunk size in bits of the variable-length encoding of the reverse pinvoke frame.
    pub reverse_pinvoke_frame_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the num registers.
    pub num_registers_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the num stack slots.
    pub num_stack_slots_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the num untracked slots.
    pub num_untracked_slots_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the norm prolog size.
    pub norm_prolog_size_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the norm epilog size.
    pub norm_epilog_size_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the norm code offset delta.
    pub norm_code_offset_delta_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the interruptible range delta1.
    pub interruptible_range_delta1_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the interruptible range delta2.
    pub interruptible_range_delta2_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the register.
    pub register_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the register delta.
    pub register_delta_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the stack slot.
    pub stack_slot_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the stack slot delta.
    pub stack_slot_delta_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the num safe points.
    pub num_safe_points_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the num interruptible ranges.
    pub num_interruptible_ranges_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the num eh clauses.
    pub num_eh_clauses_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the pointer size.
    pub pointer_size_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the livestate rle run.
    pub livestate_rle_run_encbase: u32,
    /// Chunk size in bits of the variable-length encoding of the livestate rle skip.
    pub livestate_rle_skip_encbase: u32,
    /// The fat header carries the size of the outgoing argument / scratch area
    /// (`FIXED_STACK_PARAMETER_SCRATCH_AREA`).
    pub has_fixed_stack_parameter_scratch_area: bool,
}

/// x64, and the base of the other 64-bit tables.
const AMD64: Encoding = Encoding {
    code_length_encbase: 8,
    return_kind_bits_slim: Some(2),
    return_kind_bits_fat: Some(4),
    generics_inst_context_stack_slot_encbase: 6,
    gs_cookie_stack_slot_encbase: 6,
    psp_sym_stack_slot_encbase: 6,
    security_object_stack_slot_encbase: 6,
    stack_base_register_encbase: 3,
    size_of_stack_area_encbase: 3,
    size_of_edit_and_continue_preserved_area_encbase: 4,
    size_of_edit_and_continue_fixed_stack_frame_encbase: None,
    reverse_pinvoke_frame_encbase: 6,
    num_registers_encbase: 2,
    num_stack_slots_encbase: 2,
    num_untracked_slots_encbase: 1,
    norm_prolog_size_encbase: 5,
    norm_epilog_size_encbase: 3,
    norm_code_offset_delta_encbase: 3,
    interruptible_range_delta1_encbase: 6,
    interruptible_range_delta2_encbase: 6,
    register_encbase: 3,
    register_delta_encbase: 2,
    stack_slot_encbase: 6,
    stack_slot_delta_encbase: 4,
    num_safe_points_encbase: 2,
    num_interruptible_ranges_encbase: 1,
    num_eh_clauses_encbase: 2,
    pointer_size_encbase: 3,
    livestate_rle_run_encbase: 2,
    livestate_rle_skip_encbase: 4,
    has_fixed_stack_parameter_scratch_area: true,
};

const ARM64: Encoding = Encoding {
    stack_base_register_encbase: 2,
    size_of_edit_and_continue_fixed_stack_frame_encbase: Some(4),
    num_registers_encbase: 3,
    num_safe_points_encbase: 3,
    ..AMD64
};

const ARM: Encoding = Encoding {
    code_length_encbase: 7,
    return_kind_bits_slim: Some(2),
    return_kind_bits_fat: Some(2),
    generics_inst_context_stack_slot_encbase: 5,
    gs_cookie_stack_slot_encbase: 5,
    psp_sym_stack_slot_encbase: 5,
    security_object_stack_slot_encbase: 5,
    stack_base_register_encbase: 1,
    size_of_stack_area_encbase: 3,
    size_of_edit_and_continue_preserved_area_encbase: 3,
    size_of_edit_and_continue_fixed_stack_frame_encbase: None,
    reverse_pinvoke_frame_encbase: 5,
    num_registers_encbase: 2,
    num_stack_slots_encbase: 3,
    num_untracked_slots_encbase: 3,
    norm_prolog_size_encbase: 5,
    norm_epilog_size_encbase: 3,
    norm_code_offset_delta_encbase: 3,
    interruptible_range_delta1_encbase: 4,
    interruptible_range_delta2_encbase: 6,
    register_encbase: 2,
    register_delta_encbase: 1,
    stack_slot_encbase: 6,
    stack_slot_delta_encbase: 4,
    num_safe_points_encbase: 3,
    num_interruptible_ranges_encbase: 2,
    num_eh_clauses_encbase: 3,
    pointer_size_encbase: 3,
    livestate_rle_run_encbase: 2,
    livestate_rle_skip_encbase: 4,
    has_fixed_stack_parameter_scratch_area: true,
};

const LOONGARCH64: Encoding = Encoding {
    size_of_edit_and_continue_fixed_stack_frame_encbase: None,
    ..ARM64
};

const RISCV64: Encoding = ARM64;

const INTERPRETER: Encoding = Encoding {
    return_kind_bits_slim: None,
    return_kind_bits_fat: None,
    ..AMD64
};

impl GcInfoArch {
    /// Every variant, for tests and tables.
    pub const ALL: [GcInfoArch; 6] = [
        GcInfoArch::Amd64,
        GcInfoArch::Arm64,
        GcInfoArch::Arm,
        GcInfoArch::LoongArch64,
        GcInfoArch::RiscV64,
        GcInfoArch::Interpreter,
    ];

    /// The encoding of JIT-ed and ReadyToRun code of a runtime whose descriptor names
    /// this architecture (the `Architecture` global: `x64`, `arm64`, `arm`,
    /// `loongarch64`, `riscv64`; case-insensitive, `amd64` and `aarch64` accepted).
    /// x86 and unknown names are a typed error.
    pub fn from_name(name: &str) -> Result<GcInfoArch, ContractError> {
        match name.to_ascii_lowercase().as_str() {
            "x64" | "amd64" | "x86_64" => Ok(GcInfoArch::Amd64),
            "arm64" | "aarch64" => Ok(GcInfoArch::Arm64),
            "arm" | "arm32" => Ok(GcInfoArch::Arm),
            "loongarch64" => Ok(GcInfoArch::LoongArch64),
            "riscv64" => Ok(GcInfoArch::RiscV64),
            _ => Err(ContractError::UnsupportedArchitecture {
                contract: "GCInfo",
                architecture: name.to_string(),
                supported: "x64, arm64, arm, loongarch64, riscv64",
            }),
        }
    }

    /// The encoding parameters.
    pub fn encoding(self) -> &'static Encoding {
        match self {
            GcInfoArch::Amd64 => &AMD64,
            GcInfoArch::Arm64 => &ARM64,
            GcInfoArch::Arm => &ARM,
            GcInfoArch::LoongArch64 => &LOONGARCH64,
            GcInfoArch::RiscV64 => &RISCV64,
            GcInfoArch::Interpreter => &INTERPRETER,
        }
    }

    /// log2 of the unit code lengths are stored in (instructions are 4 bytes on ARM64,
    /// LoongArch64 and RISC-V, 2 or 4 on Thumb-2).
    pub fn code_shift(self) -> u32 {
        match self {
            GcInfoArch::Amd64 | GcInfoArch::Interpreter => 0,
            GcInfoArch::Arm => 1,
            GcInfoArch::Arm64 | GcInfoArch::LoongArch64 | GcInfoArch::RiscV64 => 2,
        }
    }

    /// log2 of the unit code offsets (prolog and epilog sizes, safe points, ranges) are
    /// stored in. Up to version 3, safe points were stored with a -1 adjustment, which
    /// made them odd, so offsets were stored in bytes everywhere; version 4 dropped the
    /// adjustment and stores offsets in instruction units like code lengths.
    pub fn code_offset_shift(self, version: u32) -> u32 {
        if version >= 4 {
            self.code_shift()
        } else {
            0
        }
    }

    /// log2 of the unit stack slots and stack area sizes are stored in (the pointer
    /// size, except for the interpreter, which stores bytes).
    pub fn stack_shift(self) -> u32 {
        match self {
            GcInfoArch::Interpreter => 0,
            GcInfoArch::Arm => 2,
            _ => 3,
        }
    }

    /// A stored code length in bytes; `None` if it does not fit in 32 bits.
    pub fn denormalize_code_length(self, stored: u64) -> Option<u32> {
        shift_u32(stored, self.code_shift())
    }

    /// A stored code offset in bytes, for GCInfo `version`; `None` if it does not fit
    /// in 32 bits.
    pub fn denormalize_code_offset(self, version: u32, stored: u64) -> Option<u32> {
        shift_u32(stored, self.code_offset_shift(version))
    }

    /// A stored stack slot offset in bytes; `None` if it does not fit in 32 bits.
    pub fn denormalize_stack_slot(self, stored: i64) -> Option<i32> {
        let bytes = stored.checked_mul(1i64 << self.stack_shift())?;
        i32::try_from(bytes).ok()
    }

    /// A stored stack area size in bytes; `None` if it does not fit in 32 bits.
    pub fn denormalize_size_of_stack_area(self, stored: u64) -> Option<u32> {
        shift_u32(stored, self.stack_shift())
    }

    /// The register number of a stored stack base register (the frame pointer is stored
    /// as 0). `None` if the stored value cannot be a register.
    pub fn denormalize_stack_base_register(self, stored: u64) -> Option<u32> {
        let x = u32::try_from(stored).ok()?;
        Some(match self {
            GcInfoArch::Amd64 => x ^ 5,                 // RBP
            GcInfoArch::Arm64 => x ^ 29,                // X29 (decimal 29)
            GcInfoArch::Arm => (x ^ 7).checked_add(4)?, // R11
            GcInfoArch::LoongArch64 => {
                if x == 0 {
                    22 // fp
                } else {
                    3 // sp
                }
            }
            GcInfoArch::RiscV64 => {
                if x == 0 {
                    8 // fp (x8)
                } else {
                    2 // sp (x2)
                }
            }
            GcInfoArch::Interpreter => x,
        })
    }

    /// Whether the fat header carries the EnC fixed stack frame size after the EnC
    /// preserved area size.
    pub fn has_enc_fixed_stack_frame(self) -> bool {
        self.encoding()
            .size_of_edit_and_continue_fixed_stack_frame_encbase
            .is_some()
    }
}

/// log2 of the number of normalized code offsets one chunk of fully interruptible live
/// state covers (64 offsets per chunk, on every architecture).
pub const CHUNK_OFFSETS_LOG2: u32 = 6;

/// Normalized code offsets one chunk of fully interruptible live state covers.
pub const CHUNK_OFFSETS: u32 = 1 << CHUNK_OFFSETS_LOG2;

/// x64 register names in encoding order (0 = rax).
const AMD64_REGISTERS: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15",
];

impl GcInfoArch {
    /// Whether register `reg` is a scratch (caller-saved) register, whose contents a GC
    /// may only take from the active frame. x64 follows the System V ABI (everything but
    /// rbx, rbp and r12 to r15, so rsi and rdi are scratch); the other architectures use
    /// the runtime's Unix lists.
    pub fn is_scratch_register(self, reg: u32) -> bool {
        match self {
            GcInfoArch::Amd64 | GcInfoArch::Interpreter => {
                !matches!(reg, 3 | 5 | 12 | 13 | 14 | 15)
            }
            GcInfoArch::Arm64 => reg <= 17 || reg >= 29,
            GcInfoArch::Arm => reg <= 3 || reg >= 12,
            GcInfoArch::LoongArch64 => (4..=21).contains(&reg),
            GcInfoArch::RiscV64 => {
                reg == 0 || (5..=7).contains(&reg) || (10..=17).contains(&reg) || reg >= 28
            }
        }
    }

    /// A register's name as debuggers print it (`rbx`, `x19`); `reg<N>` for a number the
    /// architecture does not have.
    pub fn register_name(self, reg: u32) -> String {
        match self {
            GcInfoArch::Amd64 | GcInfoArch::Interpreter => AMD64_REGISTERS
                .get(reg as usize)
                .map_or_else(|| format!("reg{reg}"), |n| (*n).to_string()),
            GcInfoArch::Arm64 => match reg {
                0..=28 => format!("x{reg}"),
                29 => "fp".into(),
                30 => "lr".into(),
                31 => "sp".into(),
                _ => format!("reg{reg}"),
            },
            GcInfoArch::Arm if reg <= 15 => format!("r{reg}"),
            GcInfoArch::LoongArch64 | GcInfoArch::RiscV64 if reg <= 31 => format!("r{reg}"),
            _ => format!("reg{reg}"),
        }
    }
}

fn shift_u32(stored: u64, shift: u32) -> Option<u32> {
    let v = u32::try_from(stored).ok()?;
    v.checked_mul(1u32 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_spot_checks() {
        assert_eq!(GcInfoArch::Amd64.encoding().code_length_encbase, 8);
        assert_eq!(GcInfoArch::Arm.encoding().code_length_encbase, 7);
        assert_eq!(GcInfoArch::Arm.encoding().return_kind_bits_fat, Some(2));
        assert_eq!(GcInfoArch::Arm64.encoding().return_kind_bits_fat, Some(4));
        assert_eq!(GcInfoArch::Arm64.encoding().num_safe_points_encbase, 3);
        assert_eq!(GcInfoArch::Amd64.encoding().num_safe_points_encbase, 2);
        assert_eq!(
            GcInfoArch::Arm.encoding().num_interruptible_ranges_encbase,
            2
        );
        assert_eq!(
            GcInfoArch::Interpreter.encoding().return_kind_bits_slim,
            None
        );
        assert!(GcInfoArch::Arm64.has_enc_fixed_stack_frame());
        assert!(GcInfoArch::RiscV64.has_enc_fixed_stack_frame());
        assert!(!GcInfoArch::LoongArch64.has_enc_fixed_stack_frame());
        assert!(!GcInfoArch::Amd64.has_enc_fixed_stack_frame());
    }

    #[test]
    fn denormalization() {
        assert_eq!(GcInfoArch::Amd64.denormalize_code_length(83), Some(83));
        assert_eq!(GcInfoArch::Arm64.denormalize_code_length(83), Some(332));
        assert_eq!(GcInfoArch::Arm.denormalize_code_length(83), Some(166));
        assert_eq!(GcInfoArch::Arm64.denormalize_code_length(1 << 31), None);
        assert_eq!(
            GcInfoArch::Amd64.denormalize_stack_base_register(0),
            Some(5)
        );
        assert_eq!(
            GcInfoArch::Arm64.denormalize_stack_base_register(0),
            Some(29)
        );
        assert_eq!(
            GcInfoArch::Arm64.denormalize_stack_base_register(2),
            Some(31)
        );
        assert_eq!(GcInfoArch::Arm.denormalize_stack_base_register(0), Some(11));
        assert_eq!(
            GcInfoArch::LoongArch64.denormalize_stack_base_register(1),
            Some(3)
        );
        assert_eq!(
            GcInfoArch::RiscV64.denormalize_stack_base_register(0),
            Some(8)
        );
        assert_eq!(GcInfoArch::Amd64.denormalize_stack_slot(-3), Some(-24));
        assert_eq!(GcInfoArch::Arm.denormalize_stack_slot(5), Some(20));
        assert_eq!(GcInfoArch::Interpreter.denormalize_stack_slot(5), Some(5));
        assert_eq!(GcInfoArch::Amd64.denormalize_stack_slot(i64::MAX), None);
        assert_eq!(GcInfoArch::Arm64.denormalize_code_offset(3, 5), Some(5));
        assert_eq!(GcInfoArch::Arm64.denormalize_code_offset(4, 5), Some(20));
        assert_eq!(GcInfoArch::Arm.denormalize_code_offset(4, 5), Some(10));
        assert_eq!(GcInfoArch::Amd64.denormalize_code_offset(4, 5), Some(5));
    }

    #[test]
    fn names() {
        assert_eq!(GcInfoArch::from_name("x64").ok(), Some(GcInfoArch::Amd64));
        assert_eq!(GcInfoArch::from_name("ARM64").ok(), Some(GcInfoArch::Arm64));
        assert!(matches!(
            GcInfoArch::from_name("x86"),
            Err(ContractError::UnsupportedArchitecture { .. })
        ));
    }
}
