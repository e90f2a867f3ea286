//! FieldDescs: the runtime's record of each field a type declares (its metadata token,
//! whether it is static, its offset and its normalized element type), and the list an
//! `EEClass` keeps of them.
//!
//! No runtime before .NET 11 describes `FieldDesc`; the shipped descriptors give its
//! layout (16 bytes on 64-bit: the enclosing MethodTable, then two 32-bit words of bit
//! fields), and the `field-descs` open-time check confirms it on `System.String`. The
//! spec is `contracts/RuntimeTypeSystem.md` ("Fields").

use serde::Serialize;

use super::fields::Fields;
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::limits::Limit;
use crate::memory::Target;

/// `DWord1` bits 0..24: the FieldDef RID.
const MB_MASK: u32 = 0x00FF_FFFF;
/// `DWord1`: a static field.
const IS_STATIC: u32 = 1 << 24;
/// `DWord1`: a thread-static field.
const IS_THREAD_STATIC: u32 = 1 << 25;
/// `DWord1`: a field whose data is in the image (an RVA field).
const IS_RVA: u32 = 1 << 26;
/// `DWord2` bits 0..27: the offset.
const OFFSET_MASK: u32 = 0x07FF_FFFF;
/// The offset of a field added by Edit and Continue (it has no place in the object).
const OFFSET_NEW_ENC: u32 = OFFSET_MASK - 4;
/// Most FieldDescs read for one type (a type declares at most 65,535 fields).
const MAX_FIELDS: u64 = 65_536;

/// A field's element type as the runtime stores it in its FieldDesc: references are
/// [`ElementType::Class`], enums their underlying integer type, structs
/// [`ElementType::ValueType`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ElementType {
    /// `bool` (1 byte).
    Boolean,
    /// `char` (2 bytes).
    Char,
    /// `sbyte`.
    I1,
    /// `byte`.
    U1,
    /// `short`.
    I2,
    /// `ushort`.
    U2,
    /// `int`.
    I4,
    /// `uint`.
    U4,
    /// `long`.
    I8,
    /// `ulong`.
    U8,
    /// `float`.
    R4,
    /// `double`.
    R8,
    /// `nint`.
    I,
    /// `nuint`.
    U,
    /// An unmanaged pointer.
    Ptr,
    /// A function pointer.
    FnPtr,
    /// A struct, stored inline.
    ValueType,
    /// An object reference (class, string, array, interface, `object`).
    Class,
    /// Anything else (the raw `CorElementType` value).
    Other(u8),
}

impl ElementType {
    /// The element type of a `CorElementType` value.
    pub fn from_cor(v: u8) -> ElementType {
        match v {
            0x02 => ElementType::Boolean,
            0x03 => ElementType::Char,
            0x04 => ElementType::I1,
            0x05 => ElementType::U1,
            0x06 => ElementType::I2,
            0x07 => ElementType::U2,
            0x08 => ElementType::I4,
            0x09 => ElementType::U4,
            0x0a => ElementType::I8,
            0x0b => ElementType::U8,
            0x0c => ElementType::R4,
            0x0d => ElementType::R8,
            0x0f => ElementType::Ptr,
            0x11 => ElementType::ValueType,
            // STRING, CLASS, ARRAY, GENERICINST, OBJECT, SZARRAY, VAR: all references in a
            // FieldDesc.
            0x0e | 0x12 | 0x14 | 0x15 | 0x1c | 0x1d | 0x13 => ElementType::Class,
            0x18 => ElementType::I,
            0x19 => ElementType::U,
            0x1b => ElementType::FnPtr,
            other => ElementType::Other(other),
        }
    }

    /// Bytes a value of this type takes in an object (0 for structs and unknown types,
    /// whose size comes from their MethodTable).
    pub fn size(self) -> u64 {
        match self {
            ElementType::Boolean | ElementType::I1 | ElementType::U1 => 1,
            ElementType::Char | ElementType::I2 | ElementType::U2 => 2,
            ElementType::I4 | ElementType::U4 | ElementType::R4 => 4,
            ElementType::I8
            | ElementType::U8
            | ElementType::R8
            | ElementType::I
            | ElementType::U
            | ElementType::Ptr
            | ElementType::FnPtr
            | ElementType::Class => 8,
            ElementType::ValueType | ElementType::Other(_) => 0,
        }
    }
}

/// One FieldDesc, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FieldDesc {
    /// Its address.
    pub address: u64,
    /// The (canonical) MethodTable of the type that declares the field.
    pub enclosing_method_table: u64,
    /// The FieldDef token (`0x04000000 | RID`).
    pub token: u32,
    /// A static field.
    pub is_static: bool,
    /// A thread-static field.
    pub is_thread_static: bool,
    /// A static whose data is in the module's image.
    pub is_rva: bool,
    /// Instance fields: bytes after the MethodTable pointer (after the start of a struct's
    /// data); statics: bytes into the type's statics block.
    pub offset: u32,
    /// Its element type.
    pub element_type: ElementType,
}

impl FieldDesc {
    /// Reads the FieldDesc at `address`.
    pub fn read(
        target: &Target,
        descriptor: &DataDescriptor,
        address: u64,
    ) -> Result<FieldDesc, ContractError> {
        let f = Fields::new(target, descriptor);
        let enclosing = f.ptr(address, "FieldDesc", "MTOfEnclosingClass")?;
        let w1 = f.u32(address, "FieldDesc", "DWord1")?;
        let w2 = f.u32(address, "FieldDesc", "DWord2")?;
        Ok(FieldDesc {
            address,
            enclosing_method_table: enclosing,
            token: 0x0400_0000 | (w1 & MB_MASK),
            is_static: w1 & IS_STATIC != 0,
            is_thread_static: w1 & IS_THREAD_STATIC != 0,
            is_rva: w1 & IS_RVA != 0,
            offset: w2 & OFFSET_MASK,
            element_type: ElementType::from_cor((w2 >> 27) as u8),
        })
    }

    /// A field added by Edit and Continue, which has no offset in the object.
    pub fn is_added_by_edit_and_continue(&self) -> bool {
        self.offset == OFFSET_NEW_ENC
    }
}

/// The `EEClass` of a canonical MethodTable (`EEClassOrCanonMT` without its low bit).
pub fn ee_class(
    target: &Target,
    descriptor: &DataDescriptor,
    canonical_mt: u64,
) -> Result<u64, ContractError> {
    let f = Fields::new(target, descriptor);
    let v = f.ptr(canonical_mt, "MethodTable", "EEClassOrCanonMT")?;
    if v & 1 != 0 {
        return Err(ContractError::Corrupt {
            what: "MethodTable",
            addr: canonical_mt,
            detail: "a canonical MethodTable points at another canonical one, not its EEClass"
                .into(),
        });
    }
    Ok(v)
}

/// The FieldDescs a type declares (not those of its base types), read from its EEClass's
/// `FieldDescList`: `count` of them, where the caller knows the count (the metadata's
/// non-constant fields, or [`declared_field_count`] where the runtime describes it).
/// Entries whose enclosing MethodTable is not `canonical_mt` end the list early (the
/// count was wrong, or the memory is damaged).
pub fn declared_field_descs(
    target: &Target,
    descriptor: &DataDescriptor,
    canonical_mt: u64,
    count: u64,
) -> Result<Vec<FieldDesc>, ContractError> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if count > MAX_FIELDS {
        return Err(ContractError::LimitExceeded {
            what: "field list",
            addr: canonical_mt,
            limit: Limit::ListLength,
            cap: MAX_FIELDS,
            unit: "fields",
        });
    }
    let f = Fields::new(target, descriptor);
    let class = ee_class(target, descriptor, canonical_mt)?;
    let list = f.ptr(class, "EEClass", "FieldDescList")?;
    let size = f.size("FieldDesc")?;
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count {
        let fd = FieldDesc::read(target, descriptor, list.wrapping_add(i * size))?;
        if fd.enclosing_method_table != canonical_mt {
            break;
        }
        out.push(fd);
    }
    Ok(out)
}

/// The number of FieldDescs a type declares, where the runtime's descriptor gives
/// `EEClass.NumInstanceFields` (which counts inherited instance fields too) and
/// `NumStaticFields` (.NET 10): `None` where it does not.
pub fn declared_field_count(
    target: &Target,
    descriptor: &DataDescriptor,
    canonical_mt: u64,
    parent_canonical_mt: u64,
) -> Result<Option<u64>, ContractError> {
    let f = Fields::new(target, descriptor);
    if !f.has("EEClass", "NumInstanceFields") || !f.has("EEClass", "NumStaticFields") {
        return Ok(None);
    }
    let class = ee_class(target, descriptor, canonical_mt)?;
    let instance = u64::from(f.u16(class, "EEClass", "NumInstanceFields")?);
    let statics = u64::from(f.u16(class, "EEClass", "NumStaticFields")?);
    let inherited = if parent_canonical_mt == 0 {
        0
    } else {
        let parent = ee_class(target, descriptor, parent_canonical_mt)?;
        u64::from(f.u16(parent, "EEClass", "NumInstanceFields")?)
    };
    Ok(Some(instance.saturating_sub(inherited) + statics))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_types_of_references_are_class() {
        for v in [0x0e, 0x12, 0x14, 0x15, 0x1c, 0x1d] {
            assert_eq!(ElementType::from_cor(v), ElementType::Class);
        }
        assert_eq!(ElementType::from_cor(0x08), ElementType::I4);
        assert_eq!(ElementType::from_cor(0x11), ElementType::ValueType);
        assert_eq!(ElementType::from_cor(0x1f), ElementType::Other(0x1f));
        assert_eq!(ElementType::Char.size(), 2);
        assert_eq!(ElementType::ValueType.size(), 0);
    }
}
