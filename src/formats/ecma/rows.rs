//! Typed rows of the tables that naming needs, read through [`Metadata`].

use super::error::{MetadataError, Result};
use super::heaps::{BlobIndex, GuidIndex, StringIndex};
use super::tables::{RawRow, TableId, Token};
use super::Metadata;

/// TypeDef flags (II.23.1.15) used here.
pub mod type_attributes {
    pub const VISIBILITY_MASK: u32 = 0x0000_0007;
    pub const NESTED_PUBLIC: u32 = 0x0000_0002;
    pub const INTERFACE: u32 = 0x0000_0020;
    pub const ABSTRACT: u32 = 0x0000_0080;
    pub const SEALED: u32 = 0x0000_0100;
}

/// MethodDef flags (II.23.1.10) used here.
pub mod method_attributes {
    pub const MEMBER_ACCESS_MASK: u16 = 0x0007;
    pub const STATIC: u16 = 0x0010;
    pub const FINAL: u16 = 0x0020;
    pub const VIRTUAL: u16 = 0x0040;
    pub const ABSTRACT: u16 = 0x0400;
    pub const SPECIAL_NAME: u16 = 0x0800;
    pub const PINVOKE_IMPL: u16 = 0x2000;
    pub const RT_SPECIAL_NAME: u16 = 0x1000;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleRow {
    pub generation: u16,
    pub name: StringIndex,
    pub mvid: GuidIndex,
    pub enc_id: GuidIndex,
    pub enc_base_id: GuidIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeRefRow {
    /// Module, ModuleRef, AssemblyRef or (for nested types) TypeRef; nil: "somewhere here".
    pub resolution_scope: Token,
    pub name: StringIndex,
    pub namespace: StringIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeDefRow {
    pub flags: u32,
    pub name: StringIndex,
    pub namespace: StringIndex,
    pub extends: Token,
    pub field_list: u32,
    pub method_list: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldRow {
    pub flags: u16,
    pub name: StringIndex,
    pub signature: BlobIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodDefRow {
    pub rva: u32,
    pub impl_flags: u16,
    pub flags: u16,
    pub name: StringIndex,
    pub signature: BlobIndex,
    pub param_list: u32,
}

impl MethodDefRow {
    pub fn is_static(&self) -> bool {
        self.flags & method_attributes::STATIC != 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamRow {
    pub flags: u16,
    /// 0: the return value; 1..: the parameters.
    pub sequence: u16,
    pub name: StringIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterfaceImplRow {
    pub class: u32,
    pub interface: Token,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberRefRow {
    /// TypeDef, TypeRef, ModuleRef, MethodDef or TypeSpec.
    pub class: Token,
    pub name: StringIndex,
    pub signature: BlobIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NestedClassRow {
    pub nested: u32,
    pub enclosing: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeSpecRow {
    pub signature: BlobIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleRefRow {
    pub name: StringIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssemblyRow {
    pub hash_alg_id: u32,
    pub version: [u16; 4],
    pub flags: u32,
    pub public_key: BlobIndex,
    pub name: StringIndex,
    pub culture: StringIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssemblyRefRow {
    pub version: [u16; 4],
    pub flags: u32,
    pub public_key_or_token: BlobIndex,
    pub name: StringIndex,
    pub culture: StringIndex,
    pub hash_value: BlobIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenericParamRow {
    pub number: u16,
    pub flags: u16,
    /// TypeDef or MethodDef.
    pub owner: Token,
    pub name: StringIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodSpecRow {
    /// MethodDef or MemberRef.
    pub method: Token,
    pub instantiation: BlobIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandAloneSigRow {
    pub signature: BlobIndex,
}

fn s(r: &RawRow<'_>, i: usize) -> StringIndex {
    StringIndex(r.raw(i))
}
fn b(r: &RawRow<'_>, i: usize) -> BlobIndex {
    BlobIndex(r.raw(i))
}
fn g(r: &RawRow<'_>, i: usize) -> GuidIndex {
    GuidIndex(r.raw(i))
}

impl<'a> Metadata<'a> {
    /// Row `rid` of `table`, undecoded.
    pub fn raw_row(&self, table: TableId, rid: u32) -> Result<RawRow<'_>> {
        self.tables.row(table, rid)
    }

    pub fn module(&self) -> Result<ModuleRow> {
        let r = self.raw_row(TableId::Module, 1)?;
        Ok(ModuleRow {
            generation: r.raw(0) as u16,
            name: s(&r, 1),
            mvid: g(&r, 2),
            enc_id: g(&r, 3),
            enc_base_id: g(&r, 4),
        })
    }

    pub fn type_ref(&self, rid: u32) -> Result<TypeRefRow> {
        let r = self.raw_row(TableId::TypeRef, rid)?;
        Ok(TypeRefRow {
            resolution_scope: r.token(0)?,
            name: s(&r, 1),
            namespace: s(&r, 2),
        })
    }

    pub fn type_def(&self, rid: u32) -> Result<TypeDefRow> {
        let r = self.raw_row(TableId::TypeDef, rid)?;
        Ok(TypeDefRow {
            flags: r.raw(0),
            name: s(&r, 1),
            namespace: s(&r, 2),
            extends: r.token(3)?,
            field_list: r.raw(4),
            method_list: r.raw(5),
        })
    }

    pub fn field(&self, rid: u32) -> Result<FieldRow> {
        let r = self.raw_row(TableId::Field, rid)?;
        Ok(FieldRow {
            flags: r.raw(0) as u16,
            name: s(&r, 1),
            signature: b(&r, 2),
        })
    }

    pub fn method_def(&self, rid: u32) -> Result<MethodDefRow> {
        let r = self.raw_row(TableId::MethodDef, rid)?;
        Ok(MethodDefRow {
            rva: r.raw(0),
            impl_flags: r.raw(1) as u16,
            flags: r.raw(2) as u16,
            name: s(&r, 3),
            signature: b(&r, 4),
            param_list: r.raw(5),
        })
    }

    pub fn param(&self, rid: u32) -> Result<ParamRow> {
        let r = self.raw_row(TableId::Param, rid)?;
        Ok(ParamRow {
            flags: r.raw(0) as u16,
            sequence: r.raw(1) as u16,
            name: s(&r, 2),
        })
    }

    pub fn interface_impl(&self, rid: u32) -> Result<InterfaceImplRow> {
        let r = self.raw_row(TableId::InterfaceImpl, rid)?;
        Ok(InterfaceImplRow {
            class: r.raw(0),
            interface: r.token(1)?,
        })
    }

    pub fn member_ref(&self, rid: u32) -> Result<MemberRefRow> {
        let r = self.raw_row(TableId::MemberRef, rid)?;
        Ok(MemberRefRow {
            class: r.token(0)?,
            name: s(&r, 1),
            signature: b(&r, 2),
        })
    }

    pub fn standalone_sig(&self, rid: u32) -> Result<StandAloneSigRow> {
        let r = self.raw_row(TableId::StandAloneSig, rid)?;
        Ok(StandAloneSigRow {
            signature: b(&r, 0),
        })
    }

    pub fn nested_class(&self, rid: u32) -> Result<NestedClassRow> {
        let r = self.raw_row(TableId::NestedClass, rid)?;
        Ok(NestedClassRow {
            nested: r.raw(0),
            enclosing: r.raw(1),
        })
    }

    pub fn type_spec(&self, rid: u32) -> Result<TypeSpecRow> {
        let r = self.raw_row(TableId::TypeSpec, rid)?;
        Ok(TypeSpecRow {
            signature: b(&r, 0),
        })
    }

    pub fn module_ref(&self, rid: u32) -> Result<ModuleRefRow> {
        let r = self.raw_row(TableId::ModuleRef, rid)?;
        Ok(ModuleRefRow { name: s(&r, 0) })
    }

    /// The Assembly row (absent in a netmodule).
    pub fn assembly(&self) -> Result<Option<AssemblyRow>> {
        if self.tables.rows(TableId::Assembly) == 0 {
            return Ok(None);
        }
        let r = self.raw_row(TableId::Assembly, 1)?;
        Ok(Some(AssemblyRow {
            hash_alg_id: r.raw(0),
            version: [
                r.raw(1) as u16,
                r.raw(2) as u16,
                r.raw(3) as u16,
                r.raw(4) as u16,
            ],
            flags: r.raw(5),
            public_key: b(&r, 6),
            name: s(&r, 7),
            culture: s(&r, 8),
        }))
    }

    pub fn assembly_ref(&self, rid: u32) -> Result<AssemblyRefRow> {
        let r = self.raw_row(TableId::AssemblyRef, rid)?;
        Ok(AssemblyRefRow {
            version: [
                r.raw(0) as u16,
                r.raw(1) as u16,
                r.raw(2) as u16,
                r.raw(3) as u16,
            ],
            flags: r.raw(4),
            public_key_or_token: b(&r, 5),
            name: s(&r, 6),
            culture: s(&r, 7),
            hash_value: b(&r, 8),
        })
    }

    pub fn generic_param(&self, rid: u32) -> Result<GenericParamRow> {
        let r = self.raw_row(TableId::GenericParam, rid)?;
        Ok(GenericParamRow {
            number: r.raw(0) as u16,
            flags: r.raw(1) as u16,
            owner: r.token(2)?,
            name: s(&r, 3),
        })
    }

    pub fn method_spec(&self, rid: u32) -> Result<MethodSpecRow> {
        let r = self.raw_row(TableId::MethodSpec, rid)?;
        Ok(MethodSpecRow {
            method: r.token(0)?,
            instantiation: b(&r, 1),
        })
    }

    /// Whether `token` names an existing row of one of the 45 tables.
    pub fn is_valid_token(&self, token: Token) -> bool {
        match token.table() {
            Some(t) => token.rid() >= 1 && token.rid() <= self.tables.rows(t),
            None => false,
        }
    }

    /// Checks `token` is a row of `table`.
    pub(crate) fn expect_token(&self, token: Token, table: TableId) -> Result<u32> {
        if token.table() == Some(table) && self.is_valid_token(token) {
            Ok(token.rid())
        } else {
            Err(MetadataError::InvalidToken { token: token.0 })
        }
    }
}
