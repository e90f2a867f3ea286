//! The PrecodeStubs contract (versions 1, 2 and 3): which method a precode stub stands for.
//!
//! A method's entry point (what `MethodHandle.GetFunctionPointer()` returns, what vtable slots
//! and call sites hold) is usually not its code but a *precode*: a few instructions in a code
//! page that load their data from the page exactly `StubCodePageSize` bytes further on (a
//! "stub precode", which also passes the MethodDesc to its target, or a "fixup precode", which
//! jumps straight to the code once the method is compiled). The MethodDesc sits in that data.
//!
//! [`non_virtual_entry_to_method_desc`] answers the general question for any entry point: a
//! range section of stub range lists holds precodes, anything else is code that the
//! ExecutionManager maps to its method. The spec in our words is `contracts/PrecodeStubs.md`.
//!
//! Where the machine facts come from: the runtime's `PrecodeMachineDescriptor` object (through
//! the `PlatformMetadata` global on .NET 10, or the `PrecodeMachineDescriptor` global on
//! earlier builds that have the contract), or, for runtimes that publish no such object (.NET 8
//! with cdac's shipped descriptor), literal globals named `PrecodeMachineDescriptor.<Field>`.

use serde::Serialize;

use super::execution_manager::{execution_manager, range_section_map::find_range_section};
use super::platform_metadata::{platform_metadata, HAS_ARM32_THUMB_BIT};
use super::registry::{self, Contract, ContractContext};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;

/// Prefix of the literal globals that stand in for a `PrecodeMachineDescriptor` object in
/// descriptors of runtimes that have none (`PrecodeMachineDescriptor.StubCodePageSize`, …).
pub const LITERAL_GLOBAL_PREFIX: &str = "PrecodeMachineDescriptor.";

/// Largest stub code page size accepted (larger values are a damaged descriptor or object).
const MAX_STUB_CODE_PAGE_SIZE: u32 = 1 << 20;

/// Longest template accepted (version 3's `StubPrecodeSize` / `FixupStubPrecodeSize`).
const MAX_TEMPLATE_SIZE: u8 = 64;

/// The kinds of precode the contract knows (the cDAC's `KnownPrecodeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum KnownPrecodeType {
    /// A stub precode for a method (passes the MethodDesc to its target).
    Stub = 1,
    /// The P/Invoke import stub of a P/Invoke method (the runtime's `NDirectImportPrecode`).
    PInvokeImport = 2,
    /// A fixup precode (a method's temporary entry point; a plain jump once patched).
    Fixup = 3,
    /// The this/return-buffer swapping stub of closed delegates over static methods.
    ThisPtrRetBuf = 4,
    /// An unmanaged-to-managed entry thunk (version 3): no MethodDesc.
    UMEntry = 5,
    /// A dynamic helper (version 3): no MethodDesc.
    DynamicHelper = 6,
    /// An interpreter entry point (version 3): no MethodDesc.
    Interpreter = 7,
}

impl KnownPrecodeType {
    /// The name used in output: "stub", "pinvoke-import", "fixup", …
    pub fn as_str(self) -> &'static str {
        match self {
            KnownPrecodeType::Stub => "stub",
            KnownPrecodeType::PInvokeImport => "pinvoke-import",
            KnownPrecodeType::Fixup => "fixup",
            KnownPrecodeType::ThisPtrRetBuf => "thisptr-retbuf",
            KnownPrecodeType::UMEntry => "umentry",
            KnownPrecodeType::DynamicHelper => "dynamic-helper",
            KnownPrecodeType::Interpreter => "interpreter",
        }
    }

    /// True for kinds built on the stub precode, whose data page starts with
    /// `StubPrecodeData`.
    pub fn uses_stub_data(self) -> bool {
        !matches!(self, KnownPrecodeType::Fixup)
    }
}

/// A code template of version 3: the bytes a precode starts with, and which of them vary
/// from one precode to another (non-zero entries of `ignored`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrecodeTemplate {
    /// The expected bytes.
    pub bytes: Vec<u8>,
    /// Non-zero where the byte at the same position is not compared.
    pub ignored: Vec<u8>,
}

impl PrecodeTemplate {
    /// True when `code` (at least as long as the template) matches the template.
    pub fn matches(&self, code: &[u8]) -> bool {
        code.len() >= self.bytes.len()
            && self
                .bytes
                .iter()
                .zip(&self.ignored)
                .zip(code)
                .all(|((&want, &skip), &got)| skip != 0 || want == got)
    }

    /// Number of bytes compared.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True for an empty template (which would match anything: never used).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Where the machine descriptor's values were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "address")]
pub enum MachineDescriptorSource {
    /// The runtime's `PrecodeMachineDescriptor` object at this address.
    Object(u64),
    /// Literal `PrecodeMachineDescriptor.<Field>` globals of the descriptor.
    Globals,
}

/// The runtime's precode facts for its architecture (`PrecodeMachineDescriptor`). Fields a
/// runtime does not publish are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineDescriptor {
    /// Where the values came from.
    pub source: MachineDescriptorSource,
    /// Versions 1 and 2: offset of the type byte(s) from the entry point.
    pub offset_of_precode_type: Option<u8>,
    /// Versions 1 and 2: read width of the type (1 or 2 bytes).
    pub read_width_of_precode_type: Option<u8>,
    /// Versions 1 and 2: right shift applied to what was read.
    pub shift_of_precode_type: Option<u8>,
    /// Distance from a precode's code to its data.
    pub stub_code_page_size: u32,
    /// Mask from a code pointer to an instruction address (older descriptors).
    pub code_pointer_to_instr_pointer_mask: Option<u64>,
    /// Type value of no valid precode.
    pub invalid_precode_type: Option<u8>,
    /// Type value of stub precodes (in the code for versions 1 and 2, and in the data).
    pub stub_precode_type: u8,
    /// Type value of P/Invoke import precodes, where they exist.
    pub pinvoke_import_precode_type: Option<u8>,
    /// Type value of fixup precodes, where they exist.
    pub fixup_precode_type: Option<u8>,
    /// Type value of this/return-buffer precodes, where they exist.
    pub this_pointer_ret_buf_precode_type: Option<u8>,
    /// Version 3: type value of UMEntry thunks.
    pub um_entry_precode_type: Option<u8>,
    /// Version 3: type value of dynamic helpers.
    pub dynamic_helper_precode_type: Option<u8>,
    /// Version 3: type value of interpreter precodes.
    pub interpreter_precode_type: Option<u8>,
    /// Offset of a fixup precode's second entry (where an unpatched one jumps to).
    pub fixup_code_offset: Option<u8>,
    /// Version 3: the stub precode's code template.
    pub stub_template: Option<PrecodeTemplate>,
    /// Version 3: the fixup precode's code template.
    pub fixup_template: Option<PrecodeTemplate>,
    /// Code pointers carry the ARM32 Thumb bit.
    pub thumb_bit: bool,
}

/// Reads the machine descriptor's fields from an object or from literal globals.
struct FieldReader<'a> {
    target: &'a Target,
    descriptor: &'a DataDescriptor,
    source: MachineDescriptorSource,
}

impl FieldReader<'_> {
    /// The field's value, read `width` bytes wide from the object (1, 2, 4 or the pointer
    /// size), or the literal global's value; `None` when the runtime does not publish it.
    fn value(&self, name: &str, width: u8) -> Result<Option<u64>, ContractError> {
        match self.source {
            MachineDescriptorSource::Object(object) => {
                let ty = self.descriptor.ty("PrecodeMachineDescriptor")?;
                if !ty.has_field(name) {
                    return Ok(None);
                }
                let at = object.wrapping_add(ty.offset(name)?);
                Ok(Some(match width {
                    1 => u64::from(self.target.read_u8(at)?),
                    2 => u64::from(self.target.read_u16(at)?),
                    4 => u64::from(self.target.read_u32(at)?),
                    _ => self.target.read_pointer(at)?,
                }))
            }
            MachineDescriptorSource::Globals => {
                let key = format!("{LITERAL_GLOBAL_PREFIX}{name}");
                match self.descriptor.globals().get(&key) {
                    Some(g) => Ok(Some(g.value()?)),
                    None => Ok(None),
                }
            }
        }
    }

    fn byte(&self, name: &'static str) -> Result<Option<u8>, ContractError> {
        match self.value(name, 1)? {
            None => Ok(None),
            Some(v) => u8::try_from(v).map(Some).map_err(|_| self.corrupt(name, v)),
        }
    }

    /// A type value that exists only when its `Has…` flag (if the runtime publishes one)
    /// is set.
    fn optional_type(
        &self,
        has: Option<&'static str>,
        name: &'static str,
    ) -> Result<Option<u8>, ContractError> {
        if let Some(flag) = has {
            if self.byte(flag)? == Some(0) {
                return Ok(None);
            }
        }
        self.byte(name)
    }

    /// A version 3 template: `size` bytes of `bytes_field` and `ignored_field` (inline
    /// arrays in the object; not expressible as literal globals).
    fn template(
        &self,
        size_field: &'static str,
        bytes_field: &'static str,
        ignored_field: &'static str,
    ) -> Result<Option<PrecodeTemplate>, ContractError> {
        let MachineDescriptorSource::Object(object) = self.source else {
            return Ok(None);
        };
        let ty = self.descriptor.ty("PrecodeMachineDescriptor")?;
        if !(ty.has_field(size_field) && ty.has_field(bytes_field) && ty.has_field(ignored_field)) {
            return Ok(None);
        }
        let size = self.byte(size_field)?.unwrap_or(0);
        if size == 0 || size > MAX_TEMPLATE_SIZE {
            return Err(ContractError::Corrupt {
                what: "precode template size",
                addr: object.wrapping_add(ty.offset(size_field)?),
                detail: format!("{size_field} is {size} (expected 1..={MAX_TEMPLATE_SIZE})"),
            });
        }
        let n = usize::from(size);
        let bytes = self
            .target
            .read_bytes(object.wrapping_add(ty.offset(bytes_field)?), n)?;
        let ignored = self
            .target
            .read_bytes(object.wrapping_add(ty.offset(ignored_field)?), n)?;
        Ok(Some(PrecodeTemplate { bytes, ignored }))
    }

    fn corrupt(&self, name: &str, value: u64) -> ContractError {
        ContractError::Corrupt {
            what: "precode machine descriptor",
            addr: match self.source {
                MachineDescriptorSource::Object(a) => a,
                MachineDescriptorSource::Globals => 0,
            },
            detail: format!("{name} is {value:#x}, out of range"),
        }
    }
}

impl MachineDescriptor {
    /// Reads the runtime's precode machine descriptor: the object that the PlatformMetadata
    /// global leads to (.NET 10), else the object the `PrecodeMachineDescriptor` global
    /// names, else the descriptor's `PrecodeMachineDescriptor.<Field>` literal globals.
    pub fn read(target: &Target, descriptor: &DataDescriptor) -> Result<Self, ContractError> {
        let (source, flags) = locate(target, descriptor)?;
        let r = FieldReader {
            target,
            descriptor,
            source,
        };
        let page = r
            .value("StubCodePageSize", 4)?
            .ok_or_else(|| missing(source, "StubCodePageSize"))?;
        let stub_code_page_size = u32::try_from(page)
            .ok()
            .filter(|p| p.is_power_of_two() && *p <= MAX_STUB_CODE_PAGE_SIZE)
            .ok_or_else(|| r.corrupt("StubCodePageSize", page))?;
        Ok(MachineDescriptor {
            source,
            offset_of_precode_type: r.byte("OffsetOfPrecodeType")?,
            read_width_of_precode_type: r.byte("ReadWidthOfPrecodeType")?,
            shift_of_precode_type: r.byte("ShiftOfPrecodeType")?,
            stub_code_page_size,
            code_pointer_to_instr_pointer_mask: r
                .value("CodePointerToInstrPointerMask", target.pointer_size())?,
            invalid_precode_type: r.byte("InvalidPrecodeType")?,
            stub_precode_type: r
                .byte("StubPrecodeType")?
                .ok_or_else(|| missing(source, "StubPrecodeType"))?,
            pinvoke_import_precode_type: r
                .optional_type(Some("HasPInvokeImportPrecode"), "PInvokeImportPrecodeType")?,
            fixup_precode_type: r.optional_type(Some("HasFixupPrecode"), "FixupPrecodeType")?,
            this_pointer_ret_buf_precode_type: r
                .optional_type(None, "ThisPointerRetBufPrecodeType")?,
            um_entry_precode_type: r.optional_type(None, "UMEntryPrecodeType")?,
            dynamic_helper_precode_type: r.optional_type(None, "DynamicHelperPrecodeType")?,
            interpreter_precode_type: r.optional_type(None, "InterpreterPrecodeType")?,
            fixup_code_offset: r.byte("FixupCodeOffset")?,
            stub_template: r.template("StubPrecodeSize", "StubBytes", "StubIgnoredBytes")?,
            fixup_template: r.template(
                "FixupStubPrecodeSize",
                "FixupBytes",
                "FixupIgnoredBytes",
            )?,
            thumb_bit: flags & HAS_ARM32_THUMB_BIT != 0,
        })
    }

    /// The instruction address a code pointer stands for (the Thumb bit cleared on ARM32).
    pub fn instruction_address(&self, code_pointer: u64) -> u64 {
        let mut a = code_pointer;
        if let Some(mask) = self.code_pointer_to_instr_pointer_mask.filter(|m| *m != 0) {
            a &= mask;
        }
        if self.thumb_bit {
            a &= !1;
        }
        a
    }
}

fn missing(source: MachineDescriptorSource, field: &str) -> ContractError {
    match source {
        MachineDescriptorSource::Object(_) => crate::descriptor::DescriptorError::MissingField {
            type_name: "PrecodeMachineDescriptor".into(),
            field: field.into(),
        }
        .into(),
        MachineDescriptorSource::Globals => crate::descriptor::DescriptorError::MissingGlobal {
            name: format!("{LITERAL_GLOBAL_PREFIX}{field}"),
        }
        .into(),
    }
}

/// Where the machine descriptor is, and the target's CodePointerFlags (PlatformMetadata's,
/// or its architecture's convention when the runtime does not advertise that contract).
fn locate(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<(MachineDescriptorSource, u8), ContractError> {
    let platform = platform_metadata(target, descriptor)?;
    let flags = platform.code_pointer_flags;
    // .NET 10: the PlatformMetadata object embeds the machine descriptor.
    if let Some(object) = platform.precode_machine_descriptor {
        return Ok((MachineDescriptorSource::Object(object), flags));
    }
    let globals = descriptor.globals();
    // Earlier builds with the contract: a global with the object's address.
    if let Some(g) = globals.get("PrecodeMachineDescriptor") {
        return Ok((MachineDescriptorSource::Object(g.value()?), flags));
    }
    // Runtimes without the object: literal globals in (cdac's shipped) descriptor.
    if globals.contains_key(&format!("{LITERAL_GLOBAL_PREFIX}StubCodePageSize")) {
        return Ok((MachineDescriptorSource::Globals, flags));
    }
    Err(crate::descriptor::DescriptorError::MissingGlobal {
        name: "PrecodeMachineDescriptor".into(),
    }
    .into())
}

/// A precode found at an entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Precode {
    /// Its kind.
    pub kind: KnownPrecodeType,
    /// Address of its first instruction.
    pub instr: u64,
    /// Address of its data (`instr` + `StubCodePageSize`).
    pub data: u64,
}

/// The PrecodeStubs contract of one runtime.
#[derive(Debug, Clone)]
pub struct PrecodeStubs {
    target: Target,
    descriptor: DataDescriptor,
    version: u64,
    machine: MachineDescriptor,
}

/// The PrecodeStubs contract of the version the runtime advertises (1, 2 or 3).
pub fn precode_stubs(
    target: &Target,
    descriptor: &DataDescriptor,
) -> Result<PrecodeStubs, ContractError> {
    PrecodeStubs::new(target, descriptor)
}

impl Contract for PrecodeStubs {
    const NAME: &'static str = "PrecodeStubs";
    const VERSIONS: &'static [u64] = &[1, 2, 3];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        // The versions share one reader: 1 reads the MethodDesc of a fixup precode
        // differently, 3 adds precode kinds told apart by their code bytes.
        match version {
            1..=3 => PrecodeStubs::read(&context.target, &context.descriptor, version),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }
}

impl PrecodeStubs {
    /// The contract of the version the runtime advertises, made through the [`registry`].
    pub fn new(
        target: &Target,
        descriptor: &DataDescriptor,
    ) -> Result<PrecodeStubs, ContractError> {
        registry::create(&ContractContext::new(target, descriptor))
    }

    /// Reads the machine descriptor for contract `version`.
    fn read(
        target: &Target,
        descriptor: &DataDescriptor,
        version: u64,
    ) -> Result<PrecodeStubs, ContractError> {
        let machine = MachineDescriptor::read(target, descriptor)?;
        Ok(PrecodeStubs {
            target: target.clone(),
            descriptor: descriptor.clone(),
            version,
            machine,
        })
    }

    /// The contract version in use.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The machine descriptor in use.
    pub fn machine(&self) -> &MachineDescriptor {
        &self.machine
    }

    /// The precode at `entry`, or `None` when the bytes there are no precode this contract
    /// knows (or the address is not pointer-aligned). Only reads memory.
    pub fn precode(&self, entry: u64) -> Result<Option<Precode>, ContractError> {
        let instr = self.machine.instruction_address(entry);
        if instr % u64::from(self.target.pointer_size()) != 0 {
            return Ok(None);
        }
        let data = instr.wrapping_add(u64::from(self.machine.stub_code_page_size));
        let kind = if self.version >= 3 {
            self.kind_by_template(instr, data)?
        } else {
            self.kind_by_type_byte(instr, data)?
        };
        Ok(kind.map(|kind| Precode { kind, instr, data }))
    }

    /// The MethodDesc of a precode; `None` for kinds that carry none (UMEntry, dynamic
    /// helpers, interpreter), for this/return-buffer precodes in version 1 (which cannot
    /// read them), and for a null MethodDesc slot.
    pub fn method_desc(&self, precode: &Precode) -> Result<Option<u64>, ContractError> {
        let md = match precode.kind {
            KnownPrecodeType::Stub | KnownPrecodeType::PInvokeImport => self.read_ptr(
                precode.data,
                "StubPrecodeData",
                self.stub_method_desc_field(),
            )?,
            KnownPrecodeType::Fixup => {
                self.read_ptr(precode.data, "FixupPrecodeData", "MethodDesc")?
            }
            KnownPrecodeType::ThisPtrRetBuf => {
                if self.version == 1 {
                    return Ok(None);
                }
                let inner = self.read_ptr(precode.data, "StubPrecodeData", "SecretParam")?;
                if inner == 0 {
                    return Ok(None);
                }
                self.read_ptr(inner, "ThisPtrRetBufPrecodeData", "MethodDesc")?
            }
            KnownPrecodeType::UMEntry
            | KnownPrecodeType::DynamicHelper
            | KnownPrecodeType::Interpreter => return Ok(None),
        };
        Ok((md != 0).then_some(md))
    }

    /// `GetMethodDescFromStubAddress`: the MethodDesc of the precode at `entry`, `None`
    /// when there is no known precode there or it names no method.
    pub fn method_desc_from_stub(&self, entry: u64) -> Result<Option<u64>, ContractError> {
        match self.precode(entry)? {
            Some(p) => self.method_desc(&p),
            None => Ok(None),
        }
    }

    /// `GetCandidateEntryPoints`: the entry points a precode holding `address` could start
    /// at, nearest first (version 3, whose stub template gives the precode size; empty
    /// otherwise).
    pub fn candidate_entry_points(&self, address: u64) -> Vec<u64> {
        let ps = u64::from(self.target.pointer_size());
        let Some(size) = self.machine.stub_template.as_ref().map(|t| t.len() as u64) else {
            return Vec::new();
        };
        let aligned = self.machine.instruction_address(address) & !(ps - 1);
        (0..size / ps)
            .filter_map(|i| aligned.checked_sub(i * ps))
            .map(|a| if self.machine.thumb_bit { a | 1 } else { a })
            .collect()
    }

    /// `StubPrecodeData`'s MethodDesc field: `MethodDesc` in version 1, `SecretParam` after.
    fn stub_method_desc_field(&self) -> &'static str {
        if self.version == 1 {
            "MethodDesc"
        } else {
            "SecretParam"
        }
    }

    fn read_ptr(&self, base: u64, ty: &str, field: &str) -> Result<u64, ContractError> {
        let off = self.descriptor.ty(ty)?.offset(field)?;
        Ok(self.target.read_pointer(base.wrapping_add(off))?)
    }

    /// `StubPrecodeData.Type` (one byte in .NET 8 and 9, pointer-sized later: read as its
    /// descriptor type says). A value that is no single byte is no type.
    fn stub_data_type(&self, data: u64) -> Result<u8, ContractError> {
        let field = self.descriptor.ty("StubPrecodeData")?.field("Type")?;
        let at = data.wrapping_add(u64::from(field.offset));
        let value = match field.type_name.as_deref() {
            Some("uint16") | Some("int16") => u64::from(self.target.read_u16(at)?),
            Some("uint32") | Some("int32") => u64::from(self.target.read_u32(at)?),
            Some("uint64") | Some("int64") => self.target.read_u64(at)?,
            Some("pointer") | Some("nuint") | Some("nint") | Some("TADDR") => {
                self.target.read_pointer(at)?
            }
            _ => u64::from(self.target.read_u8(at)?),
        };
        Ok(u8::try_from(value).unwrap_or(0))
    }

    /// Versions 1 and 2: the type byte in the code, refined through the stub data when it
    /// says "stub".
    fn kind_by_type_byte(
        &self,
        instr: u64,
        data: u64,
    ) -> Result<Option<KnownPrecodeType>, ContractError> {
        let m = &self.machine;
        let (Some(offset), Some(width)) = (m.offset_of_precode_type, m.read_width_of_precode_type)
        else {
            return Err(missing(m.source, "OffsetOfPrecodeType"));
        };
        let shift = u32::from(m.shift_of_precode_type.unwrap_or(0));
        let at = instr.wrapping_add(u64::from(offset));
        let raw = match width {
            1 => u64::from(self.target.read_u8(at)?),
            2 => u64::from(self.target.read_u16(at)?),
            w => {
                return Err(ContractError::Corrupt {
                    what: "precode machine descriptor",
                    addr: match m.source {
                        MachineDescriptorSource::Object(a) => a,
                        MachineDescriptorSource::Globals => 0,
                    },
                    detail: format!("ReadWidthOfPrecodeType is {w} (expected 1 or 2)"),
                })
            }
        };
        let approx = (raw.checked_shr(shift).unwrap_or(0) & 0xff) as u8;
        let exact = if approx == m.stub_precode_type {
            self.stub_data_type(data)?
        } else {
            approx
        };
        Ok(if exact == m.stub_precode_type {
            Some(KnownPrecodeType::Stub)
        } else if m.pinvoke_import_precode_type == Some(exact) {
            Some(KnownPrecodeType::PInvokeImport)
        } else if m.fixup_precode_type == Some(exact) {
            Some(KnownPrecodeType::Fixup)
        } else if m.this_pointer_ret_buf_precode_type == Some(exact) {
            Some(KnownPrecodeType::ThisPtrRetBuf)
        } else {
            None
        })
    }

    /// Version 3: the code compared with the stub and fixup templates; a stub's exact kind
    /// from its data.
    fn kind_by_template(
        &self,
        instr: u64,
        data: u64,
    ) -> Result<Option<KnownPrecodeType>, ContractError> {
        let m = &self.machine;
        let (Some(stub), Some(fixup)) = (&m.stub_template, &m.fixup_template) else {
            return Err(missing(m.source, "StubBytes"));
        };
        let longest = stub.len().max(fixup.len());
        let code = self.target.read_bytes(instr, longest)?;
        if !stub.is_empty() && stub.matches(&code) {
            let exact = self.stub_data_type(data)?;
            if exact == 0 {
                return Ok(None);
            }
            let kinds = [
                (Some(m.stub_precode_type), KnownPrecodeType::Stub),
                (
                    m.pinvoke_import_precode_type,
                    KnownPrecodeType::PInvokeImport,
                ),
                (
                    m.this_pointer_ret_buf_precode_type,
                    KnownPrecodeType::ThisPtrRetBuf,
                ),
                (m.um_entry_precode_type, KnownPrecodeType::UMEntry),
                (m.interpreter_precode_type, KnownPrecodeType::Interpreter),
                (
                    m.dynamic_helper_precode_type,
                    KnownPrecodeType::DynamicHelper,
                ),
            ];
            return Ok(kinds
                .iter()
                .find(|(t, _)| *t == Some(exact))
                .map(|(_, k)| *k));
        }
        if !fixup.is_empty() && fixup.matches(&code) {
            return Ok(Some(KnownPrecodeType::Fixup));
        }
        Ok(None)
    }
}

/// `GetMethodDescFromStubAddress` for the runtime's advertised PrecodeStubs version.
pub fn method_desc_from_stub(
    target: &Target,
    descriptor: &DataDescriptor,
    entry: u64,
) -> Result<Option<u64>, ContractError> {
    PrecodeStubs::new(target, descriptor)?.method_desc_from_stub(entry)
}

/// What an entry point resolved to, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EntryPointMethod {
    /// The MethodDesc.
    pub method_desc: u64,
    /// The precode at the entry point; `None` when the entry point is the method's code.
    pub precode: Option<Precode>,
}

/// `NonVirtualEntry2MethodDesc` with the way it was answered: the range section holding
/// `entry` decides; a stub range list holds precodes (read with this contract), a code
/// heap or ReadyToRun image holds code (the ExecutionManager's method for it). `None` for
/// addresses no range section holds and stubs that name no method.
pub fn resolve_entry_point(
    target: &Target,
    descriptor: &DataDescriptor,
    entry: u64,
) -> Result<Option<EntryPointMethod>, ContractError> {
    // Range sections hold code addresses: clear an ARM32 Thumb bit for the lookup.
    let lookup = platform_metadata(target, descriptor)?.code_address(entry);
    let Some(section) = find_range_section(target, descriptor, lookup)? else {
        return Ok(None);
    };
    if section.is_range_list() {
        // As the contract specifies, an entry point the precode reader cannot make sense
        // of maps to no method (range lists also hold other stubs); the reason is logged.
        let stubs = PrecodeStubs::new(target, descriptor)?;
        let resolved = stubs.precode(entry).and_then(|p| match p {
            Some(precode) => Ok(stubs
                .method_desc(&precode)?
                .map(|method_desc| EntryPointMethod {
                    method_desc,
                    precode: Some(precode),
                })),
            None => Ok(None),
        });
        return Ok(resolved.unwrap_or_else(|e| {
            tracing::debug!(entry, "not a readable precode: {e}");
            None
        }));
    }
    Ok(execution_manager(target, descriptor)?
        .code_block(entry)?
        .map(|block| EntryPointMethod {
            method_desc: block.method_desc,
            precode: None,
        }))
}

/// `NonVirtualEntry2MethodDesc`: the MethodDesc of the method an entry point calls, whether
/// the entry point is a precode or the method's code; `None` when it is neither.
pub fn non_virtual_entry_to_method_desc(
    target: &Target,
    descriptor: &DataDescriptor,
    entry: u64,
) -> Result<Option<u64>, ContractError> {
    Ok(resolve_entry_point(target, descriptor, entry)?.map(|m| m.method_desc))
}
