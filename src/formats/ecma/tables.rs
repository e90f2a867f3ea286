//! The table stream (`#~`, or `#-` for unoptimized/edit-and-continue metadata;
//! ECMA-335 II.24.2.6) and the column layout of all 45 tables (II.22).
//!
//! Column widths: heap indexes are 2 bytes, or 4 when the heap's HeapSizes bit is set;
//! an index into one table is 2 bytes, or 4 when that table has 2^16 rows or more; a coded
//! index is 2 bytes when every table it can refer to has fewer than 2^(16 - tag bits) rows,
//! else 4.

use super::error::{MetadataError, Result};
use super::heaps::{BlobIndex, GuidIndex, StringIndex};
use crate::formats::cursor::Cursor;

/// The 45 metadata tables, numbered as in ECMA-335 II.22 (the number is also the high byte
/// of the table's tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TableId {
    /// The Module table.
    Module = 0x00,
    /// The TypeRef table.
    TypeRef = 0x01,
    /// The TypeDef table.
    TypeDef = 0x02,
    /// The FieldPtr table.
    FieldPtr = 0x03,
    /// The Field table.
    Field = 0x04,
    /// The MethodPtr table.
    MethodPtr = 0x05,
    /// The MethodDef table.
    MethodDef = 0x06,
    /// The ParamPtr table.
    ParamPtr = 0x07,
    /// The Param table.
    Param = 0x08,
    /// The InterfaceImpl table.
    InterfaceImpl = 0x09,
    /// The MemberRef table.
    MemberRef = 0x0A,
    /// The Constant table.
    Constant = 0x0B,
    /// The CustomAttribute table.
    CustomAttribute = 0x0C,
    /// The FieldMarshal table.
    FieldMarshal = 0x0D,
    /// The DeclSecurity table.
    DeclSecurity = 0x0E,
    /// The ClassLayout table.
    ClassLayout = 0x0F,
    /// The FieldLayout table.
    FieldLayout = 0x10,
    /// The StandAloneSig table.
    StandAloneSig = 0x11,
    /// The EventMap table.
    EventMap = 0x12,
    /// The EventPtr table.
    EventPtr = 0x13,
    /// The Event table.
    Event = 0x14,
    /// The PropertyMap table.
    PropertyMap = 0x15,
    /// The PropertyPtr table.
    PropertyPtr = 0x16,
    /// The Property table.
    Property = 0x17,
    /// The MethodSemantics table.
    MethodSemantics = 0x18,
    /// The MethodImpl table.
    MethodImpl = 0x19,
    /// The ModuleRef table.
    ModuleRef = 0x1A,
    /// The TypeSpec table.
    TypeSpec = 0x1B,
    /// The ImplMap table.
    ImplMap = 0x1C,
    /// The FieldRva table.
    FieldRva = 0x1D,
    /// The EncLog table.
    EncLog = 0x1E,
    /// The EncMap table.
    EncMap = 0x1F,
    /// The Assembly table.
    Assembly = 0x20,
    /// The AssemblyProcessor table.
    AssemblyProcessor = 0x21,
    /// The AssemblyOs table.
    AssemblyOs = 0x22,
    /// The AssemblyRef table.
    AssemblyRef = 0x23,
    /// The AssemblyRefProcessor table.
    AssemblyRefProcessor = 0x24,
    /// The AssemblyRefOs table.
    AssemblyRefOs = 0x25,
    /// The File table.
    File = 0x26,
    /// The ExportedType table.
    ExportedType = 0x27,
    /// The ManifestResource table.
    ManifestResource = 0x28,
    /// The NestedClass table.
    NestedClass = 0x29,
    /// The GenericParam table.
    GenericParam = 0x2A,
    /// The MethodSpec table.
    MethodSpec = 0x2B,
    /// The GenericParamConstraint table.
    GenericParamConstraint = 0x2C,
}

/// Number of tables this reader knows.
pub const TABLE_COUNT: usize = 45;

impl TableId {
    /// All tables in number order.
    pub const ALL: [TableId; TABLE_COUNT] = {
        use TableId::*;
        [
            Module,
            TypeRef,
            TypeDef,
            FieldPtr,
            Field,
            MethodPtr,
            MethodDef,
            ParamPtr,
            Param,
            InterfaceImpl,
            MemberRef,
            Constant,
            CustomAttribute,
            FieldMarshal,
            DeclSecurity,
            ClassLayout,
            FieldLayout,
            StandAloneSig,
            EventMap,
            EventPtr,
            Event,
            PropertyMap,
            PropertyPtr,
            Property,
            MethodSemantics,
            MethodImpl,
            ModuleRef,
            TypeSpec,
            ImplMap,
            FieldRva,
            EncLog,
            EncMap,
            Assembly,
            AssemblyProcessor,
            AssemblyOs,
            AssemblyRef,
            AssemblyRefProcessor,
            AssemblyRefOs,
            File,
            ExportedType,
            ManifestResource,
            NestedClass,
            GenericParam,
            MethodSpec,
            GenericParamConstraint,
        ]
    };

    /// The table numbered `n`, if this reader knows it.
    pub fn from_u8(n: u8) -> Option<TableId> {
        Self::ALL.get(usize::from(n)).copied()
    }

    /// The table's columns.
    pub fn columns(self) -> &'static [Column] {
        schema(self)
    }
}

/// The kinds of coded index (II.24.2.6): a row of one of several tables, the table chosen
/// by the low tag bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodedIndex {
    /// The `TypeDefOrRef` coded index.
    TypeDefOrRef,
    /// The `HasConstant` coded index.
    HasConstant,
    /// The `HasCustomAttribute` coded index.
    HasCustomAttribute,
    /// The `HasFieldMarshal` coded index.
    HasFieldMarshal,
    /// The `HasDeclSecurity` coded index.
    HasDeclSecurity,
    /// The `MemberRefParent` coded index.
    MemberRefParent,
    /// The `HasSemantics` coded index.
    HasSemantics,
    /// The `MethodDefOrRef` coded index.
    MethodDefOrRef,
    /// The `MemberForwarded` coded index.
    MemberForwarded,
    /// The `Implementation` coded index.
    Implementation,
    /// The `CustomAttributeType` coded index.
    CustomAttributeType,
    /// The `ResolutionScope` coded index.
    ResolutionScope,
    /// The `TypeOrMethodDef` coded index.
    TypeOrMethodDef,
}

impl CodedIndex {
    /// The tables by tag value; `None` marks unused tags.
    pub fn tables(self) -> &'static [Option<TableId>] {
        use TableId::*;
        match self {
            CodedIndex::TypeDefOrRef => &[Some(TypeDef), Some(TypeRef), Some(TypeSpec)],
            CodedIndex::HasConstant => &[Some(Field), Some(Param), Some(Property)],
            CodedIndex::HasCustomAttribute => &[
                Some(MethodDef),
                Some(Field),
                Some(TypeRef),
                Some(TypeDef),
                Some(Param),
                Some(InterfaceImpl),
                Some(MemberRef),
                Some(Module),
                Some(DeclSecurity),
                Some(Property),
                Some(Event),
                Some(StandAloneSig),
                Some(ModuleRef),
                Some(TypeSpec),
                Some(Assembly),
                Some(AssemblyRef),
                Some(File),
                Some(ExportedType),
                Some(ManifestResource),
                Some(GenericParam),
                Some(GenericParamConstraint),
                Some(MethodSpec),
            ],
            CodedIndex::HasFieldMarshal => &[Some(Field), Some(Param)],
            CodedIndex::HasDeclSecurity => &[Some(TypeDef), Some(MethodDef), Some(Assembly)],
            CodedIndex::MemberRefParent => &[
                Some(TypeDef),
                Some(TypeRef),
                Some(ModuleRef),
                Some(MethodDef),
                Some(TypeSpec),
            ],
            CodedIndex::HasSemantics => &[Some(Event), Some(Property)],
            CodedIndex::MethodDefOrRef => &[Some(MethodDef), Some(MemberRef)],
            CodedIndex::MemberForwarded => &[Some(Field), Some(MethodDef)],
            CodedIndex::Implementation => &[Some(File), Some(AssemblyRef), Some(ExportedType)],
            CodedIndex::CustomAttributeType => {
                &[None, None, Some(MethodDef), Some(MemberRef), None]
            }
            CodedIndex::ResolutionScope => &[
                Some(Module),
                Some(ModuleRef),
                Some(AssemblyRef),
                Some(TypeRef),
            ],
            CodedIndex::TypeOrMethodDef => &[Some(TypeDef), Some(MethodDef)],
        }
    }

    /// Number of tag bits.
    pub fn tag_bits(self) -> u32 {
        let n = self.tables().len() as u32;
        32 - (n - 1).leading_zeros()
    }

    /// Splits a raw coded index into a token, `None` for an unused tag.
    pub fn decode(self, value: u32) -> Option<Token> {
        let bits = self.tag_bits();
        let tag = value & ((1 << bits) - 1);
        let table = (*self.tables().get(tag as usize)?)?;
        let rid = value >> bits;
        if rid > 0x00FF_FFFF {
            return None;
        }
        Some(Token::new(table, rid))
    }
}

/// What a column holds, which also fixes its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// A 2-byte constant (Constant.Type is one byte plus a padding byte: read as 2).
    U16,
    /// A 4-byte constant.
    U32,
    /// A `#Strings` index.
    String,
    /// A `#GUID` index.
    Guid,
    /// A `#Blob` index.
    Blob,
    /// A row index into one table.
    Table(TableId),
    /// A coded index of this kind.
    Coded(CodedIndex),
}

/// One column of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Column name.
    pub name: &'static str,
    /// What the column holds.
    pub kind: ColumnKind,
}

const fn c(name: &'static str, kind: ColumnKind) -> Column {
    Column { name, kind }
}

macro_rules! cols {
    [$($x:expr),* $(,)?] => {{
        const COLUMNS: &[Column] = &[$($x),*];
        COLUMNS
    }};
}

/// The columns of every table (II.22.2 - II.22.39), in stored order.
pub fn schema(table: TableId) -> &'static [Column] {
    use CodedIndex as CI;
    use ColumnKind::*;
    use TableId as T;
    match table {
        T::Module => cols![
            c("Generation", U16),
            c("Name", String),
            c("Mvid", Guid),
            c("EncId", Guid),
            c("EncBaseId", Guid),
        ],
        T::TypeRef => cols![
            c("ResolutionScope", Coded(CI::ResolutionScope)),
            c("TypeName", String),
            c("TypeNamespace", String),
        ],
        T::TypeDef => cols![
            c("Flags", U32),
            c("TypeName", String),
            c("TypeNamespace", String),
            c("Extends", Coded(CI::TypeDefOrRef)),
            c("FieldList", Table(T::Field)),
            c("MethodList", Table(T::MethodDef)),
        ],
        T::FieldPtr => cols![c("Field", Table(T::Field))],
        T::Field => cols![c("Flags", U16), c("Name", String), c("Signature", Blob)],
        T::MethodPtr => cols![c("Method", Table(T::MethodDef))],
        T::MethodDef => cols![
            c("RVA", U32),
            c("ImplFlags", U16),
            c("Flags", U16),
            c("Name", String),
            c("Signature", Blob),
            c("ParamList", Table(T::Param)),
        ],
        T::ParamPtr => cols![c("Param", Table(T::Param))],
        T::Param => cols![c("Flags", U16), c("Sequence", U16), c("Name", String)],
        T::InterfaceImpl => cols![
            c("Class", Table(T::TypeDef)),
            c("Interface", Coded(CI::TypeDefOrRef)),
        ],
        T::MemberRef => cols![
            c("Class", Coded(CI::MemberRefParent)),
            c("Name", String),
            c("Signature", Blob),
        ],
        T::Constant => cols![
            c("Type", U16),
            c("Parent", Coded(CI::HasConstant)),
            c("Value", Blob),
        ],
        T::CustomAttribute => cols![
            c("Parent", Coded(CI::HasCustomAttribute)),
            c("Type", Coded(CI::CustomAttributeType)),
            c("Value", Blob),
        ],
        T::FieldMarshal => cols![
            c("Parent", Coded(CI::HasFieldMarshal)),
            c("NativeType", Blob),
        ],
        T::DeclSecurity => cols![
            c("Action", U16),
            c("Parent", Coded(CI::HasDeclSecurity)),
            c("PermissionSet", Blob),
        ],
        T::ClassLayout => cols![
            c("PackingSize", U16),
            c("ClassSize", U32),
            c("Parent", Table(T::TypeDef)),
        ],
        T::FieldLayout => cols![c("Offset", U32), c("Field", Table(T::Field))],
        T::StandAloneSig => cols![c("Signature", Blob)],
        T::EventMap => cols![
            c("Parent", Table(T::TypeDef)),
            c("EventList", Table(T::Event))
        ],
        T::EventPtr => cols![c("Event", Table(T::Event))],
        T::Event => cols![
            c("EventFlags", U16),
            c("Name", String),
            c("EventType", Coded(CI::TypeDefOrRef)),
        ],
        T::PropertyMap => cols![
            c("Parent", Table(T::TypeDef)),
            c("PropertyList", Table(T::Property)),
        ],
        T::PropertyPtr => cols![c("Property", Table(T::Property))],
        T::Property => cols![c("Flags", U16), c("Name", String), c("Type", Blob)],
        T::MethodSemantics => cols![
            c("Semantics", U16),
            c("Method", Table(T::MethodDef)),
            c("Association", Coded(CI::HasSemantics)),
        ],
        T::MethodImpl => cols![
            c("Class", Table(T::TypeDef)),
            c("MethodBody", Coded(CI::MethodDefOrRef)),
            c("MethodDeclaration", Coded(CI::MethodDefOrRef)),
        ],
        T::ModuleRef => cols![c("Name", String)],
        T::TypeSpec => cols![c("Signature", Blob)],
        T::ImplMap => cols![
            c("MappingFlags", U16),
            c("MemberForwarded", Coded(CI::MemberForwarded)),
            c("ImportName", String),
            c("ImportScope", Table(T::ModuleRef)),
        ],
        T::FieldRva => cols![c("RVA", U32), c("Field", Table(T::Field))],
        T::EncLog => cols![c("Token", U32), c("FuncCode", U32)],
        T::EncMap => cols![c("Token", U32)],
        T::Assembly => cols![
            c("HashAlgId", U32),
            c("MajorVersion", U16),
            c("MinorVersion", U16),
            c("BuildNumber", U16),
            c("RevisionNumber", U16),
            c("Flags", U32),
            c("PublicKey", Blob),
            c("Name", String),
            c("Culture", String),
        ],
        T::AssemblyProcessor => cols![c("Processor", U32)],
        T::AssemblyOs => cols![
            c("OSPlatformID", U32),
            c("OSMajorVersion", U32),
            c("OSMinorVersion", U32),
        ],
        T::AssemblyRef => cols![
            c("MajorVersion", U16),
            c("MinorVersion", U16),
            c("BuildNumber", U16),
            c("RevisionNumber", U16),
            c("Flags", U32),
            c("PublicKeyOrToken", Blob),
            c("Name", String),
            c("Culture", String),
            c("HashValue", Blob),
        ],
        T::AssemblyRefProcessor => {
            cols![c("Processor", U32), c("AssemblyRef", Table(T::AssemblyRef)),]
        }
        T::AssemblyRefOs => cols![
            c("OSPlatformID", U32),
            c("OSMajorVersion", U32),
            c("OSMinorVersion", U32),
            c("AssemblyRef", Table(T::AssemblyRef)),
        ],
        T::File => cols![c("Flags", U32), c("Name", String), c("HashValue", Blob)],
        T::ExportedType => cols![
            c("Flags", U32),
            c("TypeDefId", U32),
            c("TypeName", String),
            c("TypeNamespace", String),
            c("Implementation", Coded(CI::Implementation)),
        ],
        T::ManifestResource => cols![
            c("Offset", U32),
            c("Flags", U32),
            c("Name", String),
            c("Implementation", Coded(CI::Implementation)),
        ],
        T::NestedClass => cols![
            c("NestedClass", Table(T::TypeDef)),
            c("EnclosingClass", Table(T::TypeDef)),
        ],
        T::GenericParam => cols![
            c("Number", U16),
            c("Flags", U16),
            c("Owner", Coded(CI::TypeOrMethodDef)),
            c("Name", String),
        ],
        T::MethodSpec => cols![
            c("Method", Coded(CI::MethodDefOrRef)),
            c("Instantiation", Blob),
        ],
        T::GenericParamConstraint => cols![
            c("Owner", Table(T::GenericParam)),
            c("Constraint", Coded(CI::TypeDefOrRef)),
        ],
    }
}

/// Most columns any table has (Assembly and AssemblyRef).
pub const MAX_COLUMNS: usize = 9;

/// A metadata token: table number in the high byte, 1-based row id below (0: nil).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Token(pub u32);

impl Token {
    /// The token of row `rid` of `table`.
    pub fn new(table: TableId, rid: u32) -> Token {
        Token((u32::from(table as u8) << 24) | (rid & 0x00FF_FFFF))
    }
    /// The table, if the high byte names one of the 45.
    pub fn table(self) -> Option<TableId> {
        TableId::from_u8((self.0 >> 24) as u8)
    }
    /// The high byte: the table number.
    pub fn kind(self) -> u8 {
        (self.0 >> 24) as u8
    }
    /// The row id (low 24 bits).
    pub fn rid(self) -> u32 {
        self.0 & 0x00FF_FFFF
    }
    /// True for row id 0 (no row).
    pub fn is_nil(self) -> bool {
        self.rid() == 0
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// HeapSizes bits of the table stream header.
pub const HEAP_STRINGS_WIDE: u8 = 0x01;
/// `#GUID` indexes are 4 bytes.
pub const HEAP_GUID_WIDE: u8 = 0x02;
/// `#Blob` indexes are 4 bytes.
pub const HEAP_BLOB_WIDE: u8 = 0x04;
/// An extra 4-byte value follows the row counts.
pub const HEAP_EXTRA_DATA: u8 = 0x40;

/// Where one table's rows are and how each column is laid out.
#[derive(Debug, Clone, Copy, Default)]
pub struct TableLayout {
    /// Number of rows.
    pub rows: u32,
    /// Bytes per row.
    pub row_size: u32,
    /// Offset of row 1 within the table stream.
    pub offset: u64,
    /// Offset of each column in a row.
    pub column_offsets: [u8; MAX_COLUMNS],
    /// Width of each column (2 or 4).
    pub column_widths: [u8; MAX_COLUMNS],
}

/// The table stream header (II.24.2.6).
#[derive(Debug, Clone)]
pub struct TablesHeader {
    /// Major version.
    pub major_version: u8,
    /// Minor version.
    pub minor_version: u8,
    /// Bits saying which heaps use 4-byte indexes.
    pub heap_sizes: u8,
    /// Bit mask of the tables present.
    pub valid: u64,
    /// Bit mask of the sorted tables.
    pub sorted: u64,
    /// Row counts of the 45 tables (0 when absent).
    pub rows: [u32; TABLE_COUNT],
    /// The extra 4 bytes some writers add, if flagged.
    pub extra_data: Option<u32>,
}

/// The parsed table stream: header plus the layout of every table.
#[derive(Debug, Clone)]
pub struct TableStream<'a> {
    /// The stream header.
    pub header: TablesHeader,
    /// The name of the stream it came from (`#~` or `#-`).
    pub stream_name: &'a str,
    data: &'a [u8],
    layouts: [TableLayout; TABLE_COUNT],
}

/// Parses a table stream. `stream_name` is only recorded (`#~` and `#-` share a layout).
pub fn parse_tables<'a>(data: &'a [u8], stream_name: &'a str) -> Result<TableStream<'a>> {
    let mut c = Cursor::new(data);
    c.skip(4, "table stream reserved")?;
    let major_version = c.read_u8("table stream major version")?;
    let minor_version = c.read_u8("table stream minor version")?;
    let heap_sizes = c.read_u8("table stream heap sizes")?;
    c.skip(1, "table stream reserved")?;
    let valid = c.read_u64("table stream valid mask")?;
    let sorted = c.read_u64("table stream sorted mask")?;
    let mut rows = [0u32; TABLE_COUNT];
    for bit in 0..64u8 {
        if valid & (1u64 << bit) == 0 {
            continue;
        }
        let table = TableId::from_u8(bit).ok_or(MetadataError::UnknownTable { bit })?;
        let count = c.read_u32("table row counts")?;
        if count > 0x00FF_FFFF {
            return Err(MetadataError::TooManyRows { table, rows: count });
        }
        rows[bit as usize] = count;
    }
    let extra_data = if heap_sizes & HEAP_EXTRA_DATA != 0 {
        Some(c.read_u32("table stream extra data")?)
    } else {
        None
    };
    let pos = c.position();
    let header = TablesHeader {
        major_version,
        minor_version,
        heap_sizes,
        valid,
        sorted,
        rows,
        extra_data,
    };
    let mut layouts = [TableLayout::default(); TABLE_COUNT];
    let mut offset = pos as u64;
    for table in TableId::ALL {
        let mut layout = TableLayout {
            rows: rows[table as usize],
            offset,
            ..TableLayout::default()
        };
        let mut size = 0u32;
        for (i, column) in schema(table).iter().enumerate() {
            let width = column_width(&header, column.kind);
            layout.column_offsets[i] = size as u8;
            layout.column_widths[i] = width;
            size += u32::from(width);
        }
        layout.row_size = size;
        let end = offset + u64::from(layout.rows) * u64::from(size);
        if end > data.len() as u64 {
            return Err(MetadataError::TablesTruncated {
                table,
                end,
                len: data.len(),
            });
        }
        layouts[table as usize] = layout;
        offset = end;
    }
    Ok(TableStream {
        header,
        stream_name,
        data,
        layouts,
    })
}

pub(crate) fn column_width(header: &TablesHeader, kind: ColumnKind) -> u8 {
    let wide = |flag: u8| if header.heap_sizes & flag != 0 { 4 } else { 2 };
    match kind {
        ColumnKind::U16 => 2,
        ColumnKind::U32 => 4,
        ColumnKind::String => wide(HEAP_STRINGS_WIDE),
        ColumnKind::Guid => wide(HEAP_GUID_WIDE),
        ColumnKind::Blob => wide(HEAP_BLOB_WIDE),
        ColumnKind::Table(t) => {
            if header.rows[t as usize] < (1 << 16) {
                2
            } else {
                4
            }
        }
        ColumnKind::Coded(ci) => {
            let max = ci
                .tables()
                .iter()
                .flatten()
                .map(|t| header.rows[*t as usize])
                .max()
                .unwrap_or(0);
            if max < (1u32 << (16 - ci.tag_bits())) {
                2
            } else {
                4
            }
        }
    }
}

/// One column's value, decoded by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnValue {
    /// A 2-byte constant.
    U16(u16),
    /// A 4-byte constant.
    U32(u32),
    /// A `#Strings` index.
    String(StringIndex),
    /// A `#GUID` index.
    Guid(GuidIndex),
    /// A `#Blob` index.
    Blob(BlobIndex),
    /// A row of the column's table (0: none, or the end of a list).
    Row(TableId, u32),
    /// A coded index, as a token.
    Coded(Token),
}

/// One row's bytes and layout.
#[derive(Debug, Clone, Copy)]
pub struct RawRow<'a> {
    /// The table.
    pub table: TableId,
    /// 1-based row id.
    pub rid: u32,
    bytes: &'a [u8],
    layout: &'a TableLayout,
}

impl<'a> RawRow<'a> {
    /// The raw value of column `index` (0 past the last column).
    pub fn raw(&self, index: usize) -> u32 {
        if index >= schema(self.table).len() {
            return 0;
        }
        let off = usize::from(self.layout.column_offsets[index]);
        let width = usize::from(self.layout.column_widths[index]);
        // The row slice was cut to row_size, which covers every column.
        Cursor::new(self.bytes)
            .at(off)
            .read_uint(width, "table column")
            .map_or(0, |v| v as u32)
    }

    /// Column `index` decoded by its kind; coded indexes with unused tags are errors.
    pub fn value(&self, index: usize) -> Result<ColumnValue> {
        let column = schema(self.table)
            .get(index)
            .ok_or(MetadataError::RowOutOfBounds {
                table: self.table,
                row: self.rid,
                rows: 0,
            })?;
        let raw = self.raw(index);
        Ok(match column.kind {
            ColumnKind::U16 => ColumnValue::U16(raw as u16),
            ColumnKind::U32 => ColumnValue::U32(raw),
            ColumnKind::String => ColumnValue::String(StringIndex(raw)),
            ColumnKind::Guid => ColumnValue::Guid(GuidIndex(raw)),
            ColumnKind::Blob => ColumnValue::Blob(BlobIndex(raw)),
            ColumnKind::Table(t) => ColumnValue::Row(t, raw),
            ColumnKind::Coded(ci) => ColumnValue::Coded(self.coded(index, ci, raw)?),
        })
    }

    /// All columns decoded.
    pub fn values(&self) -> Result<Vec<ColumnValue>> {
        (0..schema(self.table).len())
            .map(|i| self.value(i))
            .collect()
    }

    pub(crate) fn coded(&self, index: usize, ci: CodedIndex, raw: u32) -> Result<Token> {
        ci.decode(raw).ok_or(MetadataError::InvalidCodedIndex {
            table: self.table,
            row: self.rid,
            column: schema(self.table).get(index).map_or("?", |c| c.name),
            kind: ci,
            value: raw,
        })
    }

    /// Column `index` as a token of its coded-index kind.
    pub fn token(&self, index: usize) -> Result<Token> {
        match schema(self.table).get(index).map(|c| c.kind) {
            Some(ColumnKind::Coded(ci)) => self.coded(index, ci, self.raw(index)),
            Some(ColumnKind::Table(t)) => Ok(Token::new(t, self.raw(index))),
            _ => Err(MetadataError::InvalidCodedIndex {
                table: self.table,
                row: self.rid,
                column: schema(self.table).get(index).map_or("?", |c| c.name),
                kind: CodedIndex::TypeDefOrRef,
                value: self.raw(index),
            }),
        }
    }
}

impl<'a> TableStream<'a> {
    /// Number of rows of `table`.
    pub fn rows(&self, table: TableId) -> u32 {
        self.layouts[table as usize].rows
    }

    /// The layout of `table` (row count and column widths).
    pub fn layout(&self, table: TableId) -> &TableLayout {
        &self.layouts[table as usize]
    }

    /// Whether the header marks `table` sorted.
    pub fn is_sorted(&self, table: TableId) -> bool {
        self.header.sorted & (1u64 << (table as u8)) != 0
    }

    /// Row `rid` (1-based) of `table`.
    pub fn row(&'a self, table: TableId, rid: u32) -> Result<RawRow<'a>> {
        let layout = &self.layouts[table as usize];
        if rid == 0 || rid > layout.rows {
            return Err(MetadataError::RowOutOfBounds {
                table,
                row: rid,
                rows: layout.rows,
            });
        }
        let start = layout.offset + u64::from(rid - 1) * u64::from(layout.row_size);
        let end = start + u64::from(layout.row_size);
        // parse_tables checked that every table lies within the stream.
        let bytes =
            self.data
                .get(start as usize..end as usize)
                .ok_or(MetadataError::TablesTruncated {
                    table,
                    end,
                    len: self.data.len(),
                })?;
        Ok(RawRow {
            table,
            rid,
            bytes,
            layout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_a_schema_within_limits() {
        for t in TableId::ALL {
            let cols = schema(t);
            assert!(!cols.is_empty() && cols.len() <= MAX_COLUMNS, "{t:?}");
            assert_eq!(TableId::from_u8(t as u8), Some(t));
        }
        assert_eq!(TableId::from_u8(45), None);
    }

    #[test]
    fn tag_bits_match_the_standard() {
        assert_eq!(CodedIndex::TypeDefOrRef.tag_bits(), 2);
        assert_eq!(CodedIndex::HasCustomAttribute.tag_bits(), 5);
        assert_eq!(CodedIndex::MemberRefParent.tag_bits(), 3);
        assert_eq!(CodedIndex::CustomAttributeType.tag_bits(), 3);
        assert_eq!(CodedIndex::HasSemantics.tag_bits(), 1);
        assert_eq!(CodedIndex::ResolutionScope.tag_bits(), 2);
        assert_eq!(
            CodedIndex::TypeDefOrRef.decode(0x49),
            Some(Token::new(TableId::TypeRef, 0x12))
        );
        assert_eq!(CodedIndex::TypeDefOrRef.decode(0x03), None);
        assert_eq!(CodedIndex::CustomAttributeType.decode(0x01), None);
    }

    fn header(heap_sizes: u8, rows: &[(TableId, u32)]) -> TablesHeader {
        let mut r = [0u32; TABLE_COUNT];
        for (t, n) in rows {
            r[*t as usize] = *n;
        }
        TablesHeader {
            major_version: 2,
            minor_version: 0,
            heap_sizes,
            valid: 0,
            sorted: 0,
            rows: r,
            extra_data: None,
        }
    }

    #[test]
    fn widths_follow_row_counts_and_heap_flags() {
        let h = header(HEAP_BLOB_WIDE, &[(TableId::TypeRef, 0x3FFF)]);
        assert_eq!(column_width(&h, ColumnKind::Blob), 4);
        assert_eq!(column_width(&h, ColumnKind::String), 2);
        assert_eq!(
            column_width(&h, ColumnKind::Coded(CodedIndex::TypeDefOrRef)),
            2
        );
        let h = header(0, &[(TableId::TypeRef, 0x4000)]);
        assert_eq!(
            column_width(&h, ColumnKind::Coded(CodedIndex::TypeDefOrRef)),
            4
        );
        assert_eq!(
            column_width(&h, ColumnKind::Coded(CodedIndex::MethodDefOrRef)),
            2
        );
        let h = header(0, &[(TableId::MethodDef, 0x10000)]);
        assert_eq!(column_width(&h, ColumnKind::Table(TableId::MethodDef)), 4);
        assert_eq!(column_width(&h, ColumnKind::Table(TableId::Field)), 2);
    }
}
