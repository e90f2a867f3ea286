//! Reading one value of a field or array element by its element type, a string's text,
//! an array element type's kind and a type's statics blocks.

use crate::contracts::field_desc::{self, ElementType};
use crate::contracts::fields::Fields;
use crate::contracts::ContractError;
use crate::memory::Target;
use crate::runtime::Runtime;

use super::FieldView;

/// A value read from the target.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A signed integer (`sbyte` … `long`, `nint`).
    Int(i64),
    /// An unsigned integer (`byte` … `ulong`, `nuint`).
    UInt(u64),
    /// A `float` or `double`.
    Float(f64),
    /// A `bool`.
    Bool(bool),
    /// A `char` (a UTF-16 unit).
    Char(u16),
    /// An unmanaged or function pointer.
    Pointer(u64),
    /// An object reference: 0 for null; the referenced object's type and, for a string,
    /// its text.
    Reference {
        /// The object's address (0: null).
        address: u64,
        /// Its type's name.
        type_name: Option<String>,
        /// A string's text.
        text: Option<String>,
    },
    /// A struct stored inline, with its fields.
    Struct {
        /// Its type's MethodTable.
        method_table: u64,
        /// Its type's name.
        type_name: String,
        /// Its fields (offsets from the start of the struct's data).
        fields: Vec<FieldView>,
    },
    /// A struct whose fields cdac does not list, and why.
    NotExpanded {
        /// Why.
        reason: String,
    },
    /// The value could not be read.
    Unreadable(String),
}

/// Reads a value that is not a struct.
pub fn read_scalar(target: &Target, et: ElementType, at: u64) -> Result<Value, ContractError> {
    Ok(match et {
        ElementType::Boolean => Value::Bool(target.read_u8(at)? != 0),
        ElementType::Char => Value::Char(target.read_u16(at)?),
        ElementType::I1 => Value::Int(i64::from(target.read_u8(at)? as i8)),
        ElementType::U1 => Value::UInt(u64::from(target.read_u8(at)?)),
        ElementType::I2 => Value::Int(i64::from(target.read_u16(at)? as i16)),
        ElementType::U2 => Value::UInt(u64::from(target.read_u16(at)?)),
        ElementType::I4 => Value::Int(i64::from(target.read_u32(at)? as i32)),
        ElementType::U4 => Value::UInt(u64::from(target.read_u32(at)?)),
        ElementType::I8 | ElementType::I => Value::Int(target.read_u64(at)? as i64),
        ElementType::U8 | ElementType::U => Value::UInt(target.read_u64(at)?),
        ElementType::R4 => Value::Float(f64::from(f32::from_bits(target.read_u32(at)?))),
        ElementType::R8 => Value::Float(f64::from_bits(target.read_u64(at)?)),
        ElementType::Ptr | ElementType::FnPtr => Value::Pointer(target.read_pointer(at)?),
        ElementType::Class => Value::Reference {
            address: target.read_pointer(at)?,
            type_name: None,
            text: None,
        },
        ElementType::ValueType | ElementType::Other(_) => {
            return Err(ContractError::Corrupt {
                what: "field",
                addr: at,
                detail: format!("element type {et:?} has no scalar value"),
            })
        }
    })
}

/// The text of the `System.String` at `address`, cut at the string-length limit.
pub fn string_text(rt: &Runtime, address: u64) -> Result<String, ContractError> {
    let target = rt.target();
    let f = Fields::new(target, rt.descriptor());
    let length = u64::from(f.u32(address, "String", "m_StringLength")?);
    let first = address + f.off("String", "m_FirstChar")?;
    let cap = target.limits().max_string_length;
    let units = length.min(cap);
    let mut bytes = vec![0u8; (units * 2) as usize];
    target.read_into(first, &mut bytes)?;
    let utf16: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let mut text = String::from_utf16_lossy(&utf16);
    if units < length {
        text.push('…');
    }
    Ok(text)
}

/// The element type of values of the type `mt` (an array's element type): its EEClass's
/// `InternalCorElementType` (an enum's underlying integer type; `ValueType` for structs;
/// `Class` for references).
pub fn element_type_of(rt: &Runtime, mt: u64) -> Result<ElementType, ContractError> {
    let target = rt.target();
    let info =
        crate::contracts::runtime_type_system::method_table_info(target, rt.descriptor(), mt)?;
    // Arrays of arrays: the element is a reference, and an array's EEClass is shared.
    if info.is_array() {
        return Ok(ElementType::Class);
    }
    let class = field_desc::ee_class(target, rt.descriptor(), info.canonical)?;
    let f = Fields::new(target, rt.descriptor());
    Ok(ElementType::from_cor(f.u8(
        class,
        "EEClass",
        "InternalCorElementType",
    )?))
}

/// Where a type's static fields are: references and structs in the GC statics block,
/// everything else in the non-GC one (0 when not allocated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticsBases {
    /// The GC statics block.
    pub gc: u64,
    /// The non-GC statics block.
    pub non_gc: u64,
}

/// The statics blocks of `mt`, from the `DynamicStaticsInfo` just before its
/// `MethodTableAuxiliaryData` (.NET 9 and later; .NET 8 keeps statics elsewhere and is
/// refused with an error that says so).
pub fn statics_bases(rt: &Runtime, mt: u64) -> Result<StaticsBases, ContractError> {
    let target = rt.target();
    let f = Fields::new(target, rt.descriptor());
    if !f.has("DynamicStaticsInfo", "GCStatics") {
        return Err(ContractError::Corrupt {
            what: "statics",
            addr: mt,
            detail: "this runtime's statics layout (before .NET 9) is not read yet".into(),
        });
    }
    let aux = f.ptr(mt, "MethodTable", "AuxiliaryData")?;
    let info = aux.wrapping_sub(f.size("DynamicStaticsInfo")?);
    let mask = f.global("StaticsPointerMask").unwrap_or(!1);
    Ok(StaticsBases {
        gc: f.ptr(info, "DynamicStaticsInfo", "GCStatics")? & mask,
        non_gc: f.ptr(info, "DynamicStaticsInfo", "NonGCStatics")? & mask,
    })
}
