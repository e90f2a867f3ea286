//! The GCInfo header: slim or fat, the flags, the return kind (versions 2 and 3), the
//! code length, and the optional fields of a fat header, in the order the runtime writes
//! them. See `contracts/GCInfo.md` for the layout.

use super::bit_reader::BitReader;
use super::platform::GcInfoArch;
use crate::contracts::ContractError;
use crate::memory::Target;

/// Header flag bits of a fat header (a slim header implies only
/// [`HAS_STACK_BASE_REGISTER`](flags::HAS_STACK_BASE_REGISTER), from its second bit).
pub mod flags {
    /// The method takes variable arguments.
    pub const IS_VARARG: u32 = 0x001;
    /// Obsolete; read (when set) only in versions 1 to 3.
    pub const HAS_SECURITY_OBJECT: u32 = 0x002;
    /// The frame has a stack-guard (GS) cookie.
    pub const HAS_GS_COOKIE: u32 = 0x004;
    /// Obsolete since version 4; read (when set) only in versions 1 to 3.
    pub const HAS_PSP_SYM: u32 = 0x008;
    /// Where the generics instantiation context comes from: one of the `GENERICS_*`
    /// values.
    pub const GENERICS_INST_CONTEXT_MASK: u32 = 0x030;
    /// No generics context.
    pub const GENERICS_INST_CONTEXT_NONE: u32 = 0x000;
    /// The context is a MethodTable in a stack slot.
    pub const GENERICS_INST_CONTEXT_MT: u32 = 0x010;
    /// The context is a MethodDesc in a stack slot.
    pub const GENERICS_INST_CONTEXT_MD: u32 = 0x020;
    /// The context comes from `this`.
    pub const GENERICS_INST_CONTEXT_THIS: u32 = 0x030;
    /// The frame uses a base register other than the stack pointer.
    pub const HAS_STACK_BASE_REGISTER: u32 = 0x040;
    /// `WANTS_REPORT_ONLY_LEAF` on x64, `HAS_TAILCALLS` on the other architectures.
    pub const WANTS_REPORT_ONLY_LEAF_OR_HAS_TAILCALLS: u32 = 0x080;
    /// Edit-and-continue preserved-area size is recorded.
    pub const HAS_EDIT_AND_CONTINUE_INFO: u32 = 0x100;
    /// Not in version 1, whose flags are 9 bits.
    pub const REVERSE_PINVOKE_FRAME: u32 = 0x200;

    /// Width of the flags in a fat header of version 1.
    pub const BIT_SIZE_VERSION_1: u32 = 9;
    /// Width of the flags in a fat header of versions 2 to 4.
    pub const BIT_SIZE: u32 = 10;
}

/// Return kinds (versions 2 and 3): 2 bits in a slim header, 2 or 4 in a fat one.
pub mod return_kind {
    /// No GC reference returned.
    pub const SCALAR: u32 = 0;
    /// An object reference returned.
    pub const OBJECT: u32 = 1;
    /// An interior (byref) pointer returned.
    pub const BYREF: u32 = 2;
    /// "Unset" (`RT_Float` on x86).
    pub const UNSET: u32 = 3;
    /// Two registers: scalar, then object.
    pub const SCALAR_OBJ: u32 = 0x4;
    /// Two registers: scalar, then byref.
    pub const SCALAR_BYREF: u32 = 0x8;
    /// Two registers: object, then object.
    pub const OBJ_OBJ: u32 = 0x5;
    /// Two registers: object, then byref.
    pub const OBJ_BYREF: u32 = 0x9;
    /// Two registers: byref, then object.
    pub const BYREF_OBJ: u32 = 0x6;
    /// Two registers: byref, then byref.
    pub const BYREF_BYREF: u32 = 0xA;
}

/// Highest GCInfo version this decoder reads. Version 5 (.NET 11, R2R 21) changed only
/// x86's encoding (an async bit in its header); the encoding of x64, arm64 and the other
/// architectures is version 4's (dotnet/diagnostics' decoder tests only `version < 4`).
pub const MAX_VERSION: u32 = 5;

/// Cap on the bytes a header may span. The longest possible header (every optional
/// field, every number at its 64-bit limit) is under 300 bytes.
pub const HEADER_MAX_BYTES: u64 = 1024;

/// A decoded GCInfo header. Optional fields are `None` when the header does not carry
/// them (the runtime's `NO_…` sentinel values); all sizes, offsets and registers are
/// denormalized (bytes and register numbers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcInfoHeader {
    /// The GCInfo version the header was decoded as.
    pub version: u32,
    /// The encoding it was decoded with.
    pub arch: GcInfoArch,
    /// A slim header (first bit 0): no optional fields, no interruptible ranges.
    pub slim: bool,
    /// Header flags (see [`flags`]); for a slim header, only `HAS_STACK_BASE_REGISTER`.
    pub flags: u32,
    /// The return kind (see [`return_kind`]); versions 2 and 3 only.
    pub return_kind: Option<u32>,
    /// Length of the method's code in bytes (all of it: hot, cold and funclets).
    pub code_length: u32,
    /// Size of the prolog in bytes (present with a GS cookie or a generics context, and
    /// in versions 1 to 3 with a security object).
    pub prolog_size: Option<u32>,
    /// Size of the epilog in bytes (present with a GS cookie).
    pub epilog_size: Option<u32>,
    /// Stack slot of the security object (obsolete; versions 1 to 3).
    pub security_object_stack_slot: Option<i32>,
    /// Stack slot of the GS cookie.
    pub gs_cookie_stack_slot: Option<i32>,
    /// Stack slot of the PSPSym (obsolete in version 4; versions 1 to 3).
    pub psp_sym_stack_slot: Option<i32>,
    /// Stack slot of the generics instantiation context.
    pub generics_inst_context_stack_slot: Option<i32>,
    /// The register stack slots are relative to, when not the stack pointer.
    pub stack_base_register: Option<u32>,
    /// Size of the Edit-and-Continue preserved area (stored as is).
    pub size_of_edit_and_continue_preserved_area: Option<u32>,
    /// Size of the Edit-and-Continue fixed stack frame (ARM64 and RISC-V; stored as is).
    pub size_of_edit_and_continue_fixed_stack_frame: Option<u32>,
    /// Stack slot of the reverse P/Invoke frame.
    pub reverse_pinvoke_frame_stack_slot: Option<i32>,
    /// Size of the outgoing argument and scratch area in bytes (0 in a slim header;
    /// `None` on encodings without one).
    pub size_of_stack_outgoing_and_scratch_area: Option<u32>,
    /// Number of safe points (call sites) in partially interruptible code.
    pub num_safe_points: u32,
    /// Number of fully interruptible ranges (0 in a slim header).
    pub num_interruptible_ranges: u32,
    /// Bits the header occupies, from the first bit of the GC info: where the body
    /// (safe point offsets) starts.
    pub header_bits: u64,
}

impl GcInfoHeader {
    /// The `WANTS_REPORT_ONLY_LEAF` (x64) / `HAS_TAILCALLS` (other) flag.
    pub fn wants_report_only_leaf_or_has_tailcalls(&self) -> bool {
        self.flags & flags::WANTS_REPORT_ONLY_LEAF_OR_HAS_TAILCALLS != 0
    }

    /// The generics context kind: one of the `flags::GENERICS_INST_CONTEXT_*` values.
    pub fn generics_inst_context(&self) -> u32 {
        self.flags & flags::GENERICS_INST_CONTEXT_MASK
    }

    /// Whether the method takes variable arguments.
    pub fn is_vararg(&self) -> bool {
        self.flags & flags::IS_VARARG != 0
    }
}

/// The GCInfo version of ReadyToRun code from the image's `READYTORUN_HEADER` version:
/// 1 for R2R 1.x, 2 up to 9.2, 3 for 9.3 up to 10.x, 4 from 11.0 on, 5 from 21.0 on (.NET
/// 11; versions 2 and 3 share one layout, and so do 4 and 5 outside x86).
pub fn r2r_gc_info_version(r2r_major: u16, r2r_minor: u16) -> u32 {
    // As the runtimes map image versions: R2R 1.x wrote the first encoding; 2.0 up to 9.2
    // the second; 9.3 (.NET 9) made safe points interruptible (version 3, same bits); 11.0
    // dropped the return-kind bits (version 4).
    match (r2r_major, r2r_minor) {
        (0..=1, _) => 1,
        (2..=8, _) | (9, 0..=2) => 2,
        (9..=10, _) => 3,
        (11..=20, _) => 4,
        _ => 5,
    }
}

/// Checks that `version` is one this decoder reads for `arch`.
pub fn check_version(version: u32, arch: GcInfoArch) -> Result<(), ContractError> {
    if !(1..=MAX_VERSION).contains(&version) {
        return Err(ContractError::UnsupportedVersion {
            contract: "GCInfo",
            version: version.to_string(),
            supported: format!("GCInfo versions 1 to {MAX_VERSION}"),
        });
    }
    if arch == GcInfoArch::Interpreter && version < 4 {
        return Err(ContractError::UnsupportedVersion {
            contract: "GCInfo",
            version: format!("{version} for interpreter code"),
            supported: "interpreter GC info of version 4".into(),
        });
    }
    Ok(())
}

/// Runs `f` on a decoder of the GC info at `addr`, after checking the version.
fn with_decoder<T>(
    target: &Target,
    addr: u64,
    version: u32,
    arch: GcInfoArch,
    f: impl FnOnce(&mut Decoder<'_, '_>) -> Result<T, ContractError>,
) -> Result<T, ContractError> {
    check_version(version, arch)?;
    let mut reader = BitReader::new(target, addr, HEADER_MAX_BYTES);
    f(&mut Decoder {
        r: &mut reader,
        version,
        arch,
    })
}

/// Decodes the header of the GC info at `addr`, written with GCInfo `version` (1 to 4)
/// for `arch`.
pub fn decode_header(
    target: &Target,
    addr: u64,
    version: u32,
    arch: GcInfoArch,
) -> Result<GcInfoHeader, ContractError> {
    with_decoder(target, addr, version, arch, |d| d.header())
}

/// The code length in bytes of the method whose GC info is at `addr`: reads only the bits
/// up to the code length.
pub fn code_length(
    target: &Target,
    addr: u64,
    version: u32,
    arch: GcInfoArch,
) -> Result<u32, ContractError> {
    with_decoder(target, addr, version, arch, |d| Ok(d.prefix()?.code_length))
}

/// What precedes the optional fields.
struct Prefix {
    slim: bool,
    flags: u32,
    return_kind: Option<u32>,
    code_length: u32,
}

struct Decoder<'r, 't> {
    r: &'r mut BitReader<'t>,
    version: u32,
    arch: GcInfoArch,
}

impl Decoder<'_, '_> {
    /// IsFat bit, flags, return kind and code length.
    fn prefix(&mut self) -> Result<Prefix, ContractError> {
        let enc = self.arch.encoding();
        let slim = !self.r.read_bit()?;
        let flags = if slim {
            if self.r.read_bit()? {
                flags::HAS_STACK_BASE_REGISTER
            } else {
                0
            }
        } else {
            let width = if self.version == 1 {
                flags::BIT_SIZE_VERSION_1
            } else {
                flags::BIT_SIZE
            };
            self.r.read_bits(width)? as u32
        };
        // Return kinds exist from version 2 to version 3.
        let return_kind = if (2..=3).contains(&self.version) {
            let bits = if slim {
                enc.return_kind_bits_slim
            } else {
                enc.return_kind_bits_fat
            };
            match bits {
                Some(n) => Some(self.r.read_bits(n)? as u32),
                None => None,
            }
        } else {
            None
        };
        let stored = self.r.decode_var_unsigned(enc.code_length_encbase)?;
        let code_length = match self.arch.denormalize_code_length(stored) {
            Some(0) => return Err(self.r.corrupt("code length 0")),
            Some(n) => n,
            None => {
                return Err(self.r.corrupt(format!(
                    "code length {stored} (stored) does not fit in 32 bits"
                )))
            }
        };
        Ok(Prefix {
            slim,
            flags,
            return_kind,
            code_length,
        })
    }

    fn header(&mut self) -> Result<GcInfoHeader, ContractError> {
        let enc = self.arch.encoding();
        let p = self.prefix()?;
        let mut h = GcInfoHeader {
            version: self.version,
            arch: self.arch,
            slim: p.slim,
            flags: p.flags,
            return_kind: p.return_kind,
            code_length: p.code_length,
            prolog_size: None,
            epilog_size: None,
            security_object_stack_slot: None,
            gs_cookie_stack_slot: None,
            psp_sym_stack_slot: None,
            generics_inst_context_stack_slot: None,
            stack_base_register: None,
            size_of_edit_and_continue_preserved_area: None,
            size_of_edit_and_continue_fixed_stack_frame: None,
            reverse_pinvoke_frame_stack_slot: None,
            size_of_stack_outgoing_and_scratch_area: None,
            num_safe_points: 0,
            num_interruptible_ranges: 0,
            header_bits: 0,
        };
        if p.slim {
            if p.flags & flags::HAS_STACK_BASE_REGISTER != 0 {
                h.stack_base_register = Some(self.register(0)?);
            }
            if enc.has_fixed_stack_parameter_scratch_area {
                h.size_of_stack_outgoing_and_scratch_area = Some(0);
            }
        } else {
            self.fat_fields(&mut h)?;
        }
        h.num_safe_points = self.unsigned_u32(enc.num_safe_points_encbase, "safe point count")?;
        if !p.slim {
            h.num_interruptible_ranges = self.unsigned_u32(
                enc.num_interruptible_ranges_encbase,
                "interruptible range count",
            )?;
        }
        h.header_bits = self.r.bits_read();
        Ok(h)
    }

    /// The optional fields of a fat header, from the prolog size to the outgoing area.
    fn fat_fields(&mut self, h: &mut GcInfoHeader) -> Result<(), ContractError> {
        let enc = self.arch.encoding();
        let f = h.flags;
        let legacy = self.version <= 3;
        let has_gs_cookie = f & flags::HAS_GS_COOKIE != 0;
        let has_generics = f & flags::GENERICS_INST_CONTEXT_MASK != 0;
        let has_security = legacy && f & flags::HAS_SECURITY_OBJECT != 0;
        let has_psp_sym = legacy && f & flags::HAS_PSP_SYM != 0;

        if has_gs_cookie || has_generics || has_security {
            let norm = self.r.decode_var_unsigned(enc.norm_prolog_size_encbase)?;
            let norm = norm
                .checked_add(1)
                .ok_or_else(|| self.r.corrupt("prolog size overflows"))?;
            h.prolog_size = Some(self.code_offset(norm, "prolog size")?);
            if has_gs_cookie {
                let norm = self.r.decode_var_unsigned(enc.norm_epilog_size_encbase)?;
                h.epilog_size = Some(self.code_offset(norm, "epilog size")?);
            }
        }
        if has_security {
            h.security_object_stack_slot = Some(self.stack_slot(
                enc.security_object_stack_slot_encbase,
                "security object stack slot",
            )?);
        }
        if has_gs_cookie {
            h.gs_cookie_stack_slot =
                Some(self.stack_slot(enc.gs_cookie_stack_slot_encbase, "GS cookie stack slot")?);
        }
        if has_psp_sym {
            h.psp_sym_stack_slot =
                Some(self.stack_slot(enc.psp_sym_stack_slot_encbase, "PSPSym stack slot")?);
        }
        if has_generics {
            h.generics_inst_context_stack_slot = Some(self.stack_slot(
                enc.generics_inst_context_stack_slot_encbase,
                "generics context stack slot",
            )?);
        }
        if f & flags::HAS_STACK_BASE_REGISTER != 0 {
            let stored = self
                .r
                .decode_var_unsigned(enc.stack_base_register_encbase)?;
            h.stack_base_register = Some(self.register(stored)?);
        }
        if f & flags::HAS_EDIT_AND_CONTINUE_INFO != 0 {
            h.size_of_edit_and_continue_preserved_area = Some(self.unsigned_u32(
                enc.size_of_edit_and_continue_preserved_area_encbase,
                "EnC preserved area size",
            )?);
            if let Some(base) = enc.size_of_edit_and_continue_fixed_stack_frame_encbase {
                h.size_of_edit_and_continue_fixed_stack_frame =
                    Some(self.unsigned_u32(base, "EnC fixed stack frame size")?);
            }
        }
        if f & flags::REVERSE_PINVOKE_FRAME != 0 {
            h.reverse_pinvoke_frame_stack_slot = Some(self.stack_slot(
                enc.reverse_pinvoke_frame_encbase,
                "reverse P/Invoke frame slot",
            )?);
        }
        if enc.has_fixed_stack_parameter_scratch_area {
            let stored = self.r.decode_var_unsigned(enc.size_of_stack_area_encbase)?;
            let size = self
                .arch
                .denormalize_size_of_stack_area(stored)
                .ok_or_else(|| {
                    self.r.corrupt(format!(
                        "outgoing stack area size {stored} (stored) is too large"
                    ))
                })?;
            h.size_of_stack_outgoing_and_scratch_area = Some(size);
        }
        Ok(())
    }

    fn unsigned_u32(&mut self, base: u32, what: &str) -> Result<u32, ContractError> {
        let v = self.r.decode_var_unsigned(base)?;
        u32::try_from(v).map_err(|_| {
            self.r
                .corrupt(format!("{what} {v} does not fit in 32 bits"))
        })
    }

    fn stack_slot(&mut self, base: u32, what: &str) -> Result<i32, ContractError> {
        let stored = self.r.decode_var_signed(base)?;
        self.arch.denormalize_stack_slot(stored).ok_or_else(|| {
            self.r
                .corrupt(format!("{what} {stored} (stored) is too large"))
        })
    }

    fn code_offset(&mut self, stored: u64, what: &str) -> Result<u32, ContractError> {
        self.arch
            .denormalize_code_offset(self.version, stored)
            .ok_or_else(|| {
                self.r
                    .corrupt(format!("{what} {stored} (stored) is too large"))
            })
    }

    fn register(&mut self, stored: u64) -> Result<u32, ContractError> {
        self.arch
            .denormalize_stack_base_register(stored)
            .ok_or_else(|| {
                self.r.corrupt(format!(
                    "stack base register {stored} (stored) is not a register"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    fn target(bytes: &[u8]) -> Target {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(8) * 8 + 8, 0);
        b.region(0x1000, padded.len()).bytes(0, &padded);
        b.into_target()
    }

    #[test]
    fn digest_example_amd64_v4_slim_83() {
        // bits 0,1 = 0,0; bits 2..10 = 83 as one 9-bit chunk.
        let t = target(&[0x4C, 0x01, 0x00]);
        assert_eq!(
            code_length(&t, 0x1000, 4, GcInfoArch::Amd64).expect("len"),
            83
        );
        // The same bits on ARM64 mean 83 instructions.
        assert_eq!(
            code_length(&t, 0x1000, 4, GcInfoArch::Arm64).expect("len"),
            332
        );
        let h = decode_header(&t, 0x1000, 4, GcInfoArch::Amd64).expect("header");
        assert!(h.slim);
        assert_eq!(h.return_kind, None);
        assert_eq!(h.stack_base_register, None);
        assert_eq!(h.num_safe_points, 0);
        assert_eq!(h.header_bits, 11 + 3);
    }

    #[test]
    fn digest_example_v3_has_return_kind_bits() {
        // bits 0,1 = 0,0; bits 2,3 = ReturnKind 2 (ByRef); bits 4..12 = 83.
        let bits: u32 = (2 << 2) | (83 << 4);
        let t = target(&bits.to_le_bytes());
        let h = decode_header(&t, 0x1000, 3, GcInfoArch::Amd64).expect("header");
        assert_eq!(h.return_kind, Some(return_kind::BYREF));
        assert_eq!(h.code_length, 83);
        // Read as version 4, the ReturnKind bits become part of the length.
        assert_ne!(
            code_length(&t, 0x1000, 4, GcInfoArch::Amd64).expect("len"),
            83
        );
    }

    #[test]
    fn versions_and_architectures_are_checked() {
        let t = target(&[0x4C, 0x01]);
        for v in [0, 6, 99] {
            assert!(matches!(
                decode_header(&t, 0x1000, v, GcInfoArch::Amd64),
                Err(ContractError::UnsupportedVersion { .. })
            ));
        }
        assert!(matches!(
            code_length(&t, 0x1000, 3, GcInfoArch::Interpreter),
            Err(ContractError::UnsupportedVersion { .. })
        ));
        assert_eq!(r2r_gc_info_version(1, 1), 1);
        assert_eq!(r2r_gc_info_version(2, 0), 2);
        assert_eq!(r2r_gc_info_version(9, 1), 2);
        assert_eq!(r2r_gc_info_version(9, 2), 2);
        assert_eq!(r2r_gc_info_version(9, 3), 3);
        assert_eq!(r2r_gc_info_version(10, 0), 3);
        assert_eq!(r2r_gc_info_version(11, 0), 4);
        assert_eq!(r2r_gc_info_version(17, 0), 4);
        assert_eq!(r2r_gc_info_version(20, 9), 4);
        assert_eq!(r2r_gc_info_version(21, 0), 5);
    }
}
