//! The RuntimeTypeSystem contract, the parts that naming methods needs: a MethodDesc's
//! chunk, MethodTable, module, token, classification and (for dynamic methods) stored name
//! and signature; a MethodTable's module, TypeDef token, canonical MethodTable and generic
//! instantiation.
//!
//! The walks are the ones `tests/real/net8_type_layouts.rs` verifies on .NET 8:
//! chunk = MethodDesc − sizeof(MethodDescChunk) − ChunkIndex × MethodDescAlignment; the
//! MethodDef token is `0x06000000 | (chunk token range << remainder bits) | remainder`; the
//! MethodTable's TypeDef RID is the 16-bit `MethodTable.Token` (.NET 8 meaning, see
//! descriptors/README.md); `EEClassOrCanonMT` with bit 0 set points at the canonical
//! MethodTable.

use serde::Serialize;

use super::fields::Fields;
use super::registry::{self, Contract, ContractContext};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::limits::Limit;
use crate::memory::Target;

/// `MethodDesc.Flags`: classification bits.
const MDF_CLASSIFICATION: u16 = 0x7;
/// `MethodDesc.Flags`: a static method.
const MDF_STATIC: u16 = 0x80;
/// `MethodDesc.Flags`: optional slots that follow the MethodDesc, in this order (each only
/// when its bit is set): a non-vtable slot, a MethodImpl, a native code slot, and (.NET 11)
/// the `AsyncMethodData`.
const MDF_HAS_NON_VTABLE_SLOT: u16 = 0x08;
const MDF_HAS_METHOD_IMPL: u16 = 0x10;
const MDF_HAS_NATIVE_CODE_SLOT: u16 = 0x20;
const MDF_HAS_ASYNC_METHOD_DATA: u16 = 0x40;
/// `MethodDesc.Flags3AndTokenRemainder`: the unboxing stub of a value type's method.
const MDF3_IS_UNBOXING_STUB: u16 = 0x4000;
/// `StoredSigMethodDesc.ExtendedFlags`: a lightweight-code-generation (DynamicMethod) method.
const EXT_IS_LCG_METHOD: u32 = 0x4000;
/// `StoredSigMethodDesc.ExtendedFlags`: an IL stub.
const EXT_IS_IL_STUB: u32 = 0x8000;
/// `MethodTable.MTFlags2`: the type has a PerInstInfo (generic instance or array).
const MTF2_HAS_PER_INST_INFO: u16 = 0x1;
/// `MethodTable.MTFlags`: category bits.
const MTF_CATEGORY_MASK: u32 = 0x000F_0000;
/// Array categories (`Array` 0x8, `SZArray` 0xA in the category nibble).
const MTF_CATEGORY_ARRAY: u32 = 0x0008_0000;
const MTF_CATEGORY_SZARRAY: u32 = 0x000A_0000;
/// Longest stored signature read.
const MAX_SIG_BYTES: u32 = 64 * 1024;
/// Most parents followed from one MethodTable.
const MAX_PARENTS: usize = 256;
/// Low bit of a TypeHandle that is a TypeDesc, not a MethodTable.
pub const TYPE_HANDLE_TYPE_DESC: u64 = 0x2;

/// How a MethodDesc was made (its `Flags & 7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MethodClassification {
    /// An IL method with a MethodDef.
    Il,
    /// A method implemented by the runtime in native code.
    FCall,
    /// A P/Invoke method.
    PInvoke,
    /// A method the runtime implements (delegate Invoke, BeginInvoke, …).
    EEImpl,
    /// A method of an array type (Get, Set, Address, .ctor).
    Array,
    /// A method of a generic method instantiation.
    Instantiated,
    /// A COM interop method (not on Unix).
    ComInterop,
    /// A dynamic method: LCG (DynamicMethod) or an IL stub.
    Dynamic,
}

impl MethodClassification {
    /// The classification of `Flags & 7`.
    pub fn from_bits(bits: u16) -> MethodClassification {
        match bits & MDF_CLASSIFICATION {
            0 => MethodClassification::Il,
            1 => MethodClassification::FCall,
            2 => MethodClassification::PInvoke,
            3 => MethodClassification::EEImpl,
            4 => MethodClassification::Array,
            5 => MethodClassification::Instantiated,
            6 => MethodClassification::ComInterop,
            _ => MethodClassification::Dynamic,
        }
    }

    /// The descriptor type of a MethodDesc of this classification (the runtime's own
    /// positional list).
    pub fn type_name(self) -> &'static str {
        match self {
            MethodClassification::Il => "MethodDesc",
            MethodClassification::FCall => "FCallMethodDesc",
            MethodClassification::PInvoke => "PInvokeMethodDesc",
            MethodClassification::EEImpl => "EEImplMethodDesc",
            MethodClassification::Array => "ArrayMethodDesc",
            MethodClassification::Instantiated => "InstantiatedMethodDesc",
            MethodClassification::ComInterop => "CLRToCOMCallMethodDesc",
            MethodClassification::Dynamic => "DynamicMethodDesc",
        }
    }
}

/// What a MethodDesc says about its method.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MethodDescInfo {
    /// The MethodDesc.
    pub address: u64,
    /// Its MethodDescChunk.
    pub chunk: u64,
    /// The MethodTable of the declaring type (possibly an exact instantiation).
    pub method_table: u64,
    /// The declaring type's module (`MethodTable.Module`).
    pub module: u64,
    /// The MethodDef token (meaningless for dynamic and array methods).
    pub token: u32,
    /// How the MethodDesc was made.
    pub classification: MethodClassification,
    /// `MethodDesc.Flags` has Static.
    pub is_static: bool,
    /// The unboxing stub of a value type's method.
    pub is_unboxing_stub: bool,
    /// The stored name of a dynamic method (`lambda_method12`, `IL_STUB_PInvoke`).
    pub dynamic_name: Option<String>,
    /// LCG method (DynamicMethod).
    pub is_lcg: bool,
    /// IL stub.
    pub is_il_stub: bool,
    /// The stored signature of dynamic, array and EE-implemented methods (may hold
    /// `ELEMENT_TYPE_INTERNAL` type handles).
    pub stored_sig: Option<Vec<u8>>,
    /// .NET 11: the signature the runtime gave this MethodDesc in its `AsyncMethodData`
    /// (an async variant of a Task-returning method returns the task's result type, not
    /// the task: its metadata signature is the original's).
    pub async_sig: Option<Vec<u8>>,
}

/// The RuntimeTypeSystem contract (version 1) of one runtime: MethodDescs and
/// MethodTables, as far as naming and code versions need them. The free functions below do
/// the same over borrowed memory and descriptor.
#[derive(Debug, Clone)]
pub struct RuntimeTypeSystem {
    target: Target,
    descriptor: DataDescriptor,
}

impl Contract for RuntimeTypeSystem {
    const NAME: &'static str = "RuntimeTypeSystem";
    const VERSIONS: &'static [u64] = &[1];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            1 => Ok(RuntimeTypeSystem {
                target: context.target.clone(),
                descriptor: context.descriptor.clone(),
            }),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }
}

impl RuntimeTypeSystem {
    /// A MethodDesc ([`method_desc_info`]).
    pub fn method_desc(&self, md: u64) -> Result<MethodDescInfo, ContractError> {
        method_desc_info(&self.target, &self.descriptor, md)
    }

    /// A MethodTable ([`method_table_info`]).
    pub fn method_table(&self, mt: u64) -> Result<MethodTableInfo, ContractError> {
        method_table_info(&self.target, &self.descriptor, mt)
    }

    /// A generic instantiation's type arguments ([`type_instantiation`]).
    pub fn instantiation(
        &self,
        mt: &MethodTableInfo,
        count: usize,
    ) -> Result<Vec<u64>, ContractError> {
        type_instantiation(&self.target, &self.descriptor, mt, count)
    }
}

/// Reads what naming needs from a MethodDesc.
pub fn method_desc_info(
    target: &Target,
    descriptor: &DataDescriptor,
    md: u64,
) -> Result<MethodDescInfo, ContractError> {
    let f = Fields::new(target, descriptor);
    let index = u64::from(f.u8(md, "MethodDesc", "ChunkIndex")?);
    let align = f.global("MethodDescAlignment")?;
    let chunk = md
        .checked_sub(f.size("MethodDescChunk")?)
        .and_then(|c| c.checked_sub(index.saturating_mul(align)))
        .ok_or(ContractError::Corrupt {
            what: "MethodDesc",
            addr: md,
            detail: format!("chunk index {index} points below address 0"),
        })?;
    let method_table = f.ptr(chunk, "MethodDescChunk", "MethodTable")?;
    if method_table == 0 {
        return Err(ContractError::Corrupt {
            what: "MethodDescChunk",
            addr: chunk,
            detail: "null MethodTable".into(),
        });
    }
    let module = f.ptr(method_table, "MethodTable", "Module")?;
    let bits = f.global("MethodDescTokenRemainderBitCount")?.min(24) as u32;
    let flags3 = f.u16(md, "MethodDesc", "Flags3AndTokenRemainder")?;
    let remainder = u32::from(flags3) & ((1u32 << bits) - 1);
    let range = u32::from(f.u16(chunk, "MethodDescChunk", "FlagsAndTokenRange")?)
        & ((1u32 << (24 - bits)) - 1);
    let token = 0x0600_0000 | (range << bits) | remainder;
    let flags = f.u16(md, "MethodDesc", "Flags")?;
    let classification = MethodClassification::from_bits(flags);
    let mut info = MethodDescInfo {
        address: md,
        chunk,
        method_table,
        module,
        token,
        classification,
        is_static: flags & MDF_STATIC != 0,
        is_unboxing_stub: flags3 & MDF3_IS_UNBOXING_STUB != 0,
        dynamic_name: None,
        is_lcg: false,
        is_il_stub: false,
        stored_sig: None,
        async_sig: None,
    };
    if flags & MDF_HAS_ASYNC_METHOD_DATA != 0 {
        info.async_sig = async_signature(target, descriptor, md, flags)?;
    }
    if matches!(
        classification,
        MethodClassification::Dynamic | MethodClassification::EEImpl | MethodClassification::Array
    ) {
        let sig = f.ptr(md, "StoredSigMethodDesc", "Sig")?;
        let len = f.u32(md, "StoredSigMethodDesc", "cSig")?;
        if sig != 0 && len > 0 && len <= MAX_SIG_BYTES {
            info.stored_sig = Some(target.read_bytes(sig, len as usize)?);
        }
    }
    if classification == MethodClassification::Dynamic {
        let ext = f.u32(md, "StoredSigMethodDesc", "ExtendedFlags")?;
        info.is_lcg = ext & EXT_IS_LCG_METHOD != 0;
        info.is_il_stub = ext & EXT_IS_IL_STUB != 0;
        let name = f.ptr(md, "DynamicMethodDesc", "MethodName")?;
        if name != 0 {
            let bytes = target.read_c_bytes(name, target.limits().string_cap())?;
            info.dynamic_name = Some(String::from_utf8_lossy(&bytes).into_owned());
        }
    }
    Ok(info)
}

/// The signature a .NET 11 MethodDesc's `AsyncMethodData` holds (`None` where it holds
/// none, or the descriptor does not describe it): the data follows the MethodDesc's other
/// optional slots, whose sizes the descriptor gives (`NonVtableSlot`, `MethodImpl`,
/// `NativeCodeSlot`), after the size of its classification's type.
fn async_signature(
    target: &Target,
    descriptor: &DataDescriptor,
    md: u64,
    flags: u16,
) -> Result<Option<Vec<u8>>, ContractError> {
    let size_of = |name: &str| descriptor.ty(name).ok().and_then(|t| t.size_if_known());
    let Some(data) = descriptor.ty("AsyncMethodData").ok() else {
        return Ok(None);
    };
    let Some(base) = size_of(MethodClassification::from_bits(flags).type_name()) else {
        return Ok(None);
    };
    let mut at = md + u64::from(base);
    for (bit, slot) in [
        (MDF_HAS_NON_VTABLE_SLOT, "NonVtableSlot"),
        (MDF_HAS_METHOD_IMPL, "MethodImpl"),
        (MDF_HAS_NATIVE_CODE_SLOT, "NativeCodeSlot"),
    ] {
        if flags & bit != 0 {
            match size_of(slot) {
                Some(size) => at += u64::from(size),
                None => return Ok(None),
            }
        }
    }
    // `Signature` is a pointer and a 32-bit length.
    let sig_at = at + data.offset("Signature")?;
    let sig = target.read_pointer(sig_at)?;
    let len = target.read_u32(sig_at + u64::from(target.pointer_size()))?;
    if sig == 0 || len == 0 || len > MAX_SIG_BYTES {
        return Ok(None);
    }
    Ok(Some(target.read_bytes(sig, len as usize)?))
}

/// What a MethodTable says about its type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MethodTableInfo {
    /// The MethodTable.
    pub address: u64,
    /// The module that defines the type (for generic instances, the generic type's module).
    pub module: u64,
    /// The TypeDef token (`0x02000000 | Token`).
    pub token: u32,
    /// The canonical MethodTable (itself when this one is canonical).
    pub canonical: u64,
    /// `MTFlags`.
    pub flags: u32,
    /// `MTFlags2`.
    pub flags2: u16,
    /// The parent type's MethodTable (0 for none).
    pub parent: u64,
    /// `PerInstInfo` (0 without one). For arrays, the element type's handle.
    pub per_inst_info: u64,
}

impl MethodTableInfo {
    /// A single-dimensional, zero-based array type.
    pub fn is_sz_array(&self) -> bool {
        self.flags & MTF_CATEGORY_MASK == MTF_CATEGORY_SZARRAY
    }

    /// Any array type.
    pub fn is_array(&self) -> bool {
        let c = self.flags & MTF_CATEGORY_MASK;
        c == MTF_CATEGORY_ARRAY || c == MTF_CATEGORY_SZARRAY
    }

    /// Has a PerInstInfo (generic instantiation or array).
    pub fn has_per_inst_info(&self) -> bool {
        self.flags2 & MTF2_HAS_PER_INST_INFO != 0
    }
}

/// Reads what naming needs from a MethodTable.
pub fn method_table_info(
    target: &Target,
    descriptor: &DataDescriptor,
    mt: u64,
) -> Result<MethodTableInfo, ContractError> {
    let f = Fields::new(target, descriptor);
    let flags = f.u32(mt, "MethodTable", "MTFlags")?;
    let flags2 = f.u16(mt, "MethodTable", "MTFlags2")?;
    // .NET 8: a separate 16-bit TypeDef RID; .NET 9+: the RID in MTFlags2 bits 8..31.
    let rid = if f.has("MethodTable", "Token") {
        u32::from(f.u16(mt, "MethodTable", "Token")?)
    } else {
        f.u32(mt, "MethodTable", "MTFlags2")? >> 8
    };
    let canon_or_class = f.ptr(mt, "MethodTable", "EEClassOrCanonMT")?;
    let canonical = if canon_or_class & 1 != 0 {
        canon_or_class & !3
    } else {
        mt
    };
    let mut info = MethodTableInfo {
        address: mt,
        module: f.ptr(mt, "MethodTable", "Module")?,
        token: 0x0200_0000 | (rid & 0x00FF_FFFF),
        canonical,
        flags,
        flags2,
        parent: f.ptr(mt, "MethodTable", "ParentMethodTable")?,
        per_inst_info: 0,
    };
    // An array keeps its element type in the same slot, without the PerInstInfo flag.
    if flags2 & MTF2_HAS_PER_INST_INFO != 0 || info.is_array() {
        info.per_inst_info = f.ptr(mt, "MethodTable", "PerInstInfo")?;
    }
    Ok(info)
}

/// `MTFlags`: the type has a component size (arrays, strings, free objects), kept in the
/// flags' low 16 bits. The one definition: the heap walk and the exception reader use it too.
pub(crate) const MTF_HAS_COMPONENT_SIZE: u32 = 0x8000_0000;

/// The sizes and counts of a type that `cdac mt` (SOS `dumpmt`) shows. Counts the
/// descriptor does not describe are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MethodTableShape {
    /// `BaseSize`: an instance's size without components, header included.
    pub base_size: u32,
    /// Bytes per element of an array or character of a string (0 for other types).
    pub component_size: u32,
    /// Whether instances hold references the GC follows.
    pub contains_pointers: bool,
    /// The EEClass (shared by every instantiation of a generic type).
    pub ee_class: u64,
    /// `NumInterfaces`.
    pub num_interfaces: Option<u16>,
    /// `NumVirtuals`.
    pub num_virtuals: Option<u16>,
    /// `EEClass.NumMethods`: methods the type declares.
    pub num_methods: Option<u16>,
    /// `EEClass.NumInstanceFields`.
    pub num_instance_fields: Option<u16>,
    /// `EEClass.NumStaticFields`.
    pub num_static_fields: Option<u16>,
}

/// Reads the [`MethodTableShape`] of `info`'s MethodTable.
pub fn method_table_shape(
    target: &Target,
    descriptor: &DataDescriptor,
    info: &MethodTableInfo,
) -> Result<MethodTableShape, ContractError> {
    let f = Fields::new(target, descriptor);
    let mt = info.address;
    let optional_u16 = |addr: u64, ty: &str, field: &str| -> Result<Option<u16>, ContractError> {
        if f.has(ty, field) {
            f.u16(addr, ty, field).map(Some)
        } else {
            Ok(None)
        }
    };
    // A non-canonical MethodTable points at its canonical one, whose slot holds the EEClass.
    let class_slot = if info.canonical == mt {
        f.ptr(mt, "MethodTable", "EEClassOrCanonMT")?
    } else {
        f.ptr(info.canonical, "MethodTable", "EEClassOrCanonMT")?
    };
    let ee_class = if class_slot & 1 == 0 { class_slot } else { 0 };
    let class_u16 = |field: &str| -> Result<Option<u16>, ContractError> {
        if ee_class == 0 {
            return Ok(None);
        }
        optional_u16(ee_class, "EEClass", field)
    };
    Ok(MethodTableShape {
        base_size: f.u32(mt, "MethodTable", "BaseSize")?,
        component_size: if info.flags & MTF_HAS_COMPONENT_SIZE != 0 {
            info.flags & 0xFFFF
        } else {
            0
        },
        contains_pointers: info.flags & crate::contracts::gc::CONTAINS_GC_POINTERS != 0,
        ee_class,
        num_interfaces: optional_u16(mt, "MethodTable", "NumInterfaces")?,
        num_virtuals: optional_u16(mt, "MethodTable", "NumVirtuals")?,
        num_methods: class_u16("NumMethods")?,
        num_instance_fields: class_u16("NumInstanceFields")?,
        num_static_fields: class_u16("NumStaticFields")?,
    })
}

/// The type handles of a generic instantiation's `count` arguments (the caller knows the
/// count from the TypeDef's generic parameters). The type's own dictionary is the last of
/// its PerInstInfo array, after one per generic ancestor. Empty when the type has no
/// PerInstInfo.
pub fn type_instantiation(
    target: &Target,
    descriptor: &DataDescriptor,
    mt: &MethodTableInfo,
    count: usize,
) -> Result<Vec<u64>, ContractError> {
    if count == 0 || !mt.has_per_inst_info() || mt.is_array() || mt.per_inst_info == 0 {
        return Ok(Vec::new());
    }
    let max_list = target.limits().max_list_length;
    if count as u64 > max_list {
        return Err(ContractError::LimitExceeded {
            what: "generic instantiation",
            addr: mt.address,
            limit: Limit::ListLength,
            cap: max_list,
            unit: "arguments",
        });
    }
    let mut ancestors = 0u64;
    let mut parent = mt.parent;
    let mut steps = 0;
    while parent != 0 {
        steps += 1;
        if steps > MAX_PARENTS {
            return Err(ContractError::LimitExceeded {
                what: "MethodTable parent chain",
                addr: mt.address,
                limit: Limit::Fixed,
                cap: MAX_PARENTS as u64,
                unit: "parents",
            });
        }
        let p = method_table_info(target, descriptor, parent)?;
        if p.has_per_inst_info() {
            ancestors += 1;
        }
        parent = p.parent;
    }
    let slot = mt
        .per_inst_info
        .wrapping_add(ancestors * u64::from(target.pointer_size()));
    let dict = target.read_pointer(slot)?;
    if dict == 0 {
        return Err(ContractError::Corrupt {
            what: "MethodTable",
            addr: mt.address,
            detail: "null generic dictionary".into(),
        });
    }
    Ok(target.read_pointers(dict, count)?)
}
