//! Typed rows of the tables that naming needs, read through [`Metadata`].

use super::error::{MetadataError, Result};
use super::heaps::{BlobIndex, GuidIndex, StringIndex};
use super::tables::{RawRow, TableId, Token};
use super::Metadata;

/// TypeDef flags (II.23.1.15) used here.
pub mod type_attributes {
    /// Bits holding the type's visibility.
    pub const VISIBILITY_MASK: u32 = 0x0000_0007;
    /// Visibility: nested and public.
    pub const NESTED_PUBLIC: u32 = 0x0000_0002;
    /// The type is an interface.
    pub const INTERFACE: u32 = 0x0000_0020;
    /// Abstract.
    pub const ABSTRACT: u32 = 0x0000_0080;
    /// The type is sealed.
    pub const SEALED: u32 = 0x0000_0100;
}

/// MethodDef flags (II.23.1.10) used here.
pub mod method_attributes {
    /// Bits holding the method's accessibility.
    pub const MEMBER_ACCESS_MASK: u16 = 0x0007;
    /// Static: no `this`.
    pub const STATIC: u16 = 0x0010;
    /// The method cannot be overridden.
    pub const FINAL: u16 = 0x0020;
    /// Virtual.
    pub const VIRTUAL: u16 = 0x0040;
    /// Abstract.
    pub const ABSTRACT: u16 = 0x0400;
    /// The name is special (accessors, operators).
    pub const SPECIAL_NAME: u16 = 0x0800;
    /// Implemented by platform invoke.
    pub const PINVOKE_IMPL: u16 = 0x2000;
    /// The runtime treats the name specially (`.ctor`, `.cctor`).
    pub const RT_SPECIAL_NAME: u16 = 0x1000;
}

/// A row of the Module table (0x00).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleRow {
    /// The `Generation` column.
    pub generation: u16,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
    /// The `Mvid` column (`#GUID`).
    pub mvid: GuidIndex,
    /// The `EncId` column (`#GUID`).
    pub enc_id: GuidIndex,
    /// The `EncBaseId` column (`#GUID`).
    pub enc_base_id: GuidIndex,
}

/// A row of the TypeRef table (0x01).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeRefRow {
    /// Module, ModuleRef, AssemblyRef or (for nested types) TypeRef; nil: "somewhere here".
    pub resolution_scope: Token,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
    /// The `Namespace` column (`#Strings`).
    pub namespace: StringIndex,
}

/// A row of the TypeDef table (0x02).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeDefRow {
    /// The `Flags` column.
    pub flags: u32,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
    /// The `Namespace` column (`#Strings`).
    pub namespace: StringIndex,
    /// The `Extends` column (a coded index).
    pub extends: Token,
    /// The `FieldList` column.
    pub field_list: u32,
    /// The `MethodList` column.
    pub method_list: u32,
}

/// A row of the Field table (0x04).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldRow {
    /// The `Flags` column.
    pub flags: u16,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
    /// The `Signature` column (`#Blob`).
    pub signature: BlobIndex,
}

/// A row of the MethodDef table (0x06).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodDefRow {
    /// The `Rva` column.
    pub rva: u32,
    /// The `ImplFlags` column.
    pub impl_flags: u16,
    /// The `Flags` column.
    pub flags: u16,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
    /// The `Signature` column (`#Blob`).
    pub signature: BlobIndex,
    /// The `ParamList` column.
    pub param_list: u32,
}

impl MethodDefRow {
    /// True when the method is static (no `this`).
    pub fn is_static(&self) -> bool {
        self.flags & method_attributes::STATIC != 0
    }
}

/// A row of the Param table (0x08).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamRow {
    /// The `Flags` column.
    pub flags: u16,
    /// 0: the return value; 1..: the parameters.
    pub sequence: u16,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
}

/// A row of the InterfaceImpl table (0x09).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterfaceImplRow {
    /// The `Class` column.
    pub class: u32,
    /// The `Interface` column (a coded index).
    pub interface: Token,
}

/// A row of the MemberRef table (0x0A).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberRefRow {
    /// TypeDef, TypeRef, ModuleRef, MethodDef or TypeSpec.
    pub class: Token,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
    /// The `Signature` column (`#Blob`).
    pub signature: BlobIndex,
}

/// A row of the NestedClass table (0x29).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NestedClassRow {
    /// The `Nested` column.
    pub nested: u32,
    /// The `Enclosing` column.
    pub enclosing: u32,
}

/// A row of the TypeSpec table (0x1B).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeSpecRow {
    /// The `Signature` column (`#Blob`).
    pub signature: BlobIndex,
}

/// A row of the ModuleRef table (0x1A).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleRefRow {
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
}

/// A row of the Assembly table (0x20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssemblyRow {
    /// The `HashAlgId` column.
    pub hash_alg_id: u32,
    /// The `Version` column.
    pub version: [u16; 4],
    /// The `Flags` column.
    pub flags: u32,
    /// The `PublicKey` column (`#Blob`).
    pub public_key: BlobIndex,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
    /// The `Culture` column (`#Strings`).
    pub culture: StringIndex,
}

/// A row of the AssemblyRef table (0x23).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssemblyRefRow {
    /// The `Version` column.
    pub version: [u16; 4],
    /// The `Flags` column.
    pub flags: u32,
    /// The `PublicKeyOrToken` column (`#Blob`).
    pub public_key_or_token: BlobIndex,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
    /// The `Culture` column (`#Strings`).
    pub culture: StringIndex,
    /// The `HashValue` column (`#Blob`).
    pub hash_value: BlobIndex,
}

/// A row of the GenericParam table (0x2A).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenericParamRow {
    /// The `Number` column.
    pub number: u16,
    /// The `Flags` column.
    pub flags: u16,
    /// TypeDef or MethodDef.
    pub owner: Token,
    /// The `Name` column (`#Strings`).
    pub name: StringIndex,
}

/// A row of the MethodSpec table (0x2B).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodSpecRow {
    /// MethodDef or MemberRef.
    pub method: Token,
    /// The `Instantiation` column (`#Blob`).
    pub instantiation: BlobIndex,
}

/// A row of the StandAloneSig table (0x11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandAloneSigRow {
    /// The `Signature` column (`#Blob`).
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

    /// The Module table's first row.
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

    /// TypeRef row `rid` (1-based).
    pub fn type_ref(&self, rid: u32) -> Result<TypeRefRow> {
        let r = self.raw_row(TableId::TypeRef, rid)?;
        Ok(TypeRefRow {
            resolution_scope: r.token(0)?,
            name: s(&r, 1),
            namespace: s(&r, 2),
        })
    }

    /// TypeDef row `rid` (1-based).
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

    /// Field row `rid` (1-based).
    pub fn field(&self, rid: u32) -> Result<FieldRow> {
        let r = self.raw_row(TableId::Field, rid)?;
        Ok(FieldRow {
            flags: r.raw(0) as u16,
            name: s(&r, 1),
            signature: b(&r, 2),
        })
    }

    /// MethodDef row `rid` (1-based).
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

    /// Param row `rid` (1-based).
    pub fn param(&self, rid: u32) -> Result<ParamRow> {
        let r = self.raw_row(TableId::Param, rid)?;
        Ok(ParamRow {
            flags: r.raw(0) as u16,
            sequence: r.raw(1) as u16,
            name: s(&r, 2),
        })
    }

    /// InterfaceImpl row `rid` (1-based).
    pub fn interface_impl(&self, rid: u32) -> Result<InterfaceImplRow> {
        let r = self.raw_row(TableId::InterfaceImpl, rid)?;
        Ok(InterfaceImplRow {
            class: r.raw(0),
            interface: r.token(1)?,
        })
    }

    /// MemberRef row `rid` (1-based).
    pub fn member_ref(&self, rid: u32) -> Result<MemberRefRow> {
        let r = self.raw_row(TableId::MemberRef, rid)?;
        Ok(MemberRefRow {
            class: r.token(0)?,
            name: s(&r, 1),
            signature: b(&r, 2),
        })
    }

    /// StandAloneSig row `rid` (1-based).
    pub fn standalone_sig(&self, rid: u32) -> Result<StandAloneSigRow> {
        let r = self.raw_row(TableId::StandAloneSig, rid)?;
        Ok(StandAloneSigRow {
            signature: b(&r, 0),
        })
    }

    /// NestedClass row `rid` (1-based).
    pub fn nested_class(&self, rid: u32) -> Result<NestedClassRow> {
        let r = self.raw_row(TableId::NestedClass, rid)?;
        Ok(NestedClassRow {
            nested: r.raw(0),
            enclosing: r.raw(1),
        })
    }

    /// TypeSpec row `rid` (1-based).
    pub fn type_spec(&self, rid: u32) -> Result<TypeSpecRow> {
        let r = self.raw_row(TableId::TypeSpec, rid)?;
        Ok(TypeSpecRow {
            signature: b(&r, 0),
        })
    }

    /// ModuleRef row `rid` (1-based).
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

    /// AssemblyRef row `rid` (1-based).
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

    /// GenericParam row `rid` (1-based).
    pub fn generic_param(&self, rid: u32) -> Result<GenericParamRow> {
        let r = self.raw_row(TableId::GenericParam, rid)?;
        Ok(GenericParamRow {
            number: r.raw(0) as u16,
            flags: r.raw(1) as u16,
            owner: r.token(2)?,
            name: s(&r, 3),
        })
    }

    /// MethodSpec row `rid` (1-based).
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
