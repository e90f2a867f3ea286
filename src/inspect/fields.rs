//! Reading a field of an object view by its metadata name.

use super::{FieldView, Value};

/// The value of an integer field named `name`.
pub fn int_field(fields: &[FieldView], name: &str) -> Option<i64> {
    fields
        .iter()
        .find(|f| f.name == name)
        .and_then(|f| match f.value {
            Value::Int(v) => Some(v),
            Value::UInt(v) => i64::try_from(v).ok(),
            _ => None,
        })
}

/// The object a reference field named `name` holds (`None` for null or no such field).
pub fn reference_field(fields: &[FieldView], name: &str) -> Option<u64> {
    fields
        .iter()
        .find(|f| f.name == name)
        .and_then(|f| match f.value {
            Value::Reference { address, .. } if address != 0 => Some(address),
            _ => None,
        })
}
