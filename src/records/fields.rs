//! Resolving a record's fields from the descriptor, once: required, optional, renamed.

use crate::contracts::ContractError;
use crate::descriptor::{DataDescriptor, DescriptorError, TypeLayout};

/// One runtime type's fields, as a layout resolves them.
pub(crate) struct TypeFields<'d> {
    ty: &'d TypeLayout,
}

impl<'d> TypeFields<'d> {
    /// The type `name` of `descriptor`, or the error naming it.
    pub(crate) fn of(descriptor: &'d DataDescriptor, name: &str) -> Result<Self, DescriptorError> {
        Ok(TypeFields {
            ty: descriptor.ty(name)?,
        })
    }

    /// The offset of a field every runtime has.
    pub(crate) fn required(&self, field: &str) -> Result<u64, DescriptorError> {
        self.ty.offset(field)
    }

    /// The offset of a field some runtimes have.
    pub(crate) fn optional(&self, field: &str) -> Option<u64> {
        self.ty.offset(field).ok()
    }

    /// The offset of a field that runtimes name differently: the first of `names` this
    /// one has. The error names the first (the newest name).
    pub(crate) fn renamed(&self, names: &[&str]) -> Result<u64, DescriptorError> {
        names
            .iter()
            .find_map(|n| self.optional(n))
            .ok_or_else(|| DescriptorError::MissingField {
                type_name: self.ty.name().to_string(),
                field: names.first().copied().unwrap_or_default().to_string(),
            })
    }

    /// The type the descriptor gives a field, if any (.NET 11 gives none).
    pub(crate) fn type_name(&self, field: &str) -> Option<&'d str> {
        self.ty.field(field).ok()?.type_name.as_deref()
    }
}

/// The error of an accessor whose field this runtime's descriptor does not place.
pub(crate) fn missing_field(type_name: &str, field: &str) -> ContractError {
    ContractError::Descriptor(DescriptorError::MissingField {
        type_name: type_name.into(),
        field: field.into(),
    })
}

/// A 64-bit little-endian descriptor from descriptor JSON text, for the records' tests.
#[cfg(test)]
pub(crate) fn test_descriptor(text: &str) -> DataDescriptor {
    let physical = crate::descriptor::json::parse("test", text.as_bytes()).expect("descriptor");
    let mut d = DataDescriptor::new(crate::memory::DataLayout::LE64);
    d.merge("test", &physical, &[]).expect("merge");
    d
}
