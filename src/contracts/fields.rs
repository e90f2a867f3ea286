//! Reads of runtime structures' fields by the names the data descriptor gives them: the
//! one helper every contract reads fields with, failing with the contract error that
//! names the type and field.

use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::memory::Target;

/// Field reads by descriptor name, failing with the contract's error type.
pub(crate) struct Fields<'a> {
    pub t: &'a Target,
    pub d: &'a DataDescriptor,
}

impl<'a> Fields<'a> {
    pub fn new(t: &'a Target, d: &'a DataDescriptor) -> Self {
        Fields { t, d }
    }

    pub fn off(&self, ty: &str, field: &str) -> Result<u64, ContractError> {
        Ok(self.d.ty(ty)?.offset(field)?)
    }

    pub fn size(&self, ty: &str) -> Result<u64, ContractError> {
        Ok(self.d.ty(ty)?.size()? as u64)
    }

    pub fn has(&self, ty: &str, field: &str) -> bool {
        self.d.ty(ty).is_ok_and(|t| t.has_field(field))
    }

    pub fn global(&self, name: &str) -> Result<u64, ContractError> {
        Ok(self.d.global_value(name)?)
    }

    pub fn ptr(&self, addr: u64, ty: &str, field: &str) -> Result<u64, ContractError> {
        Ok(self
            .t
            .read_pointer(addr.wrapping_add(self.off(ty, field)?))?)
    }

    pub fn u8(&self, addr: u64, ty: &str, field: &str) -> Result<u8, ContractError> {
        Ok(self.t.read_u8(addr.wrapping_add(self.off(ty, field)?))?)
    }

    pub fn u16(&self, addr: u64, ty: &str, field: &str) -> Result<u16, ContractError> {
        Ok(self.t.read_u16(addr.wrapping_add(self.off(ty, field)?))?)
    }

    pub fn u32(&self, addr: u64, ty: &str, field: &str) -> Result<u32, ContractError> {
        Ok(self.t.read_u32(addr.wrapping_add(self.off(ty, field)?))?)
    }

    /// A flag read with the width the descriptor declares (`bool`/`uint8`: one byte,
    /// `uint16`: two, `uint32`/`int32`: four: .NET 8's `BOOL`s are four bytes, later
    /// runtimes' `bool`s one). A field without a type has the width `untyped` the
    /// contract gives it (runtimes publish most fields untyped).
    pub fn flag(
        &self,
        addr: u64,
        ty: &str,
        field: &str,
        untyped: FlagWidth,
    ) -> Result<bool, ContractError> {
        let f = self.d.ty(ty)?.field(field)?;
        let at = addr.wrapping_add(u64::from(f.offset));
        let width = match f.type_name.as_deref() {
            Some("bool" | "uint8" | "int8") => FlagWidth::One,
            Some("uint16" | "int16") => FlagWidth::Two,
            Some("uint32" | "int32") => FlagWidth::Four,
            _ => untyped,
        };
        Ok(match width {
            FlagWidth::One => self.t.read_u8(at)? != 0,
            FlagWidth::Two => self.t.read_u16(at)? != 0,
            FlagWidth::Four => self.t.read_u32(at)? != 0,
        })
    }
}

/// Bytes a flag field takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlagWidth {
    One,
    Two,
    Four,
}
