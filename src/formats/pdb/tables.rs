//! The table stream of a portable PDB: the debug tables 0x30 - 0x37 and their column
//! layout (Portable PDB spec, "Tables"). Indexes into type-system tables (MethodDef) are
//! sized by the row counts the `#Pdb` stream gives; everything else as in ECMA-335 II.24.2.6.

use super::error::{PdbError, Result};
use crate::formats::cursor::Cursor;

/// The debug tables of a portable PDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PdbTable {
    /// Source documents (0x30).
    Document = 0x30,
    /// Per-method sequence points (0x31), one row per MethodDef.
    MethodDebugInformation = 0x31,
    /// Local scopes (0x32).
    LocalScope = 0x32,
    /// Local variables (0x33).
    LocalVariable = 0x33,
    /// Local constants (0x34).
    LocalConstant = 0x34,
    /// Import scopes (0x35).
    ImportScope = 0x35,
    /// Kickoff methods of state machines (0x36).
    StateMachineMethod = 0x36,
    /// Custom debug information (0x37).
    CustomDebugInformation = 0x37,
}

/// Number of debug tables.
pub const PDB_TABLE_COUNT: usize = 8;

impl PdbTable {
    /// All debug tables in number order.
    pub const ALL: [PdbTable; PDB_TABLE_COUNT] = [
        PdbTable::Document,
        PdbTable::MethodDebugInformation,
        PdbTable::LocalScope,
        PdbTable::LocalVariable,
        PdbTable::LocalConstant,
        PdbTable::ImportScope,
        PdbTable::StateMachineMethod,
        PdbTable::CustomDebugInformation,
    ];

    fn index(self) -> usize {
        self as usize - 0x30
    }
}

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    U16,
    U32,
    String,
    Guid,
    Blob,
    /// Index into a table by number (a debug table or a type-system one).
    Table(u8),
    /// HasCustomDebugInformation: 5 tag bits over 27 tables.
    HasCustomDebugInformation,
}

const METHOD_DEF: u8 = 0x06;

fn columns(table: PdbTable) -> &'static [Col] {
    use Col::*;
    match table {
        PdbTable::Document => &[Blob, Guid, Blob, Guid],
        PdbTable::MethodDebugInformation => &[Table(0x30), Blob],
        PdbTable::LocalScope => &[
            Table(METHOD_DEF),
            Table(0x35),
            Table(0x33),
            Table(0x34),
            U32,
            U32,
        ],
        PdbTable::LocalVariable => &[U16, U16, String],
        PdbTable::LocalConstant => &[String, Blob],
        PdbTable::ImportScope => &[Table(0x35), Blob],
        PdbTable::StateMachineMethod => &[Table(METHOD_DEF), Table(METHOD_DEF)],
        PdbTable::CustomDebugInformation => &[HasCustomDebugInformation, Guid, Blob],
    }
}

/// The tables a HasCustomDebugInformation coded index can refer to.
const HAS_CUSTOM_DEBUG_INFORMATION: [u8; 27] = [
    0x06, 0x04, 0x01, 0x02, 0x08, 0x09, 0x0A, 0x00, 0x0E, 0x17, 0x14, 0x11, 0x1A, 0x1B, 0x20, 0x23,
    0x26, 0x27, 0x28, 0x2A, 0x2C, 0x2B, 0x30, 0x32, 0x33, 0x34, 0x35,
];

/// Where one debug table's rows are and how its columns are laid out.
#[derive(Debug, Clone, Copy, Default)]
struct Layout {
    rows: u32,
    row_size: u32,
    offset: usize,
    widths: [u8; 6],
}

/// The parsed table stream of a portable PDB (owned offsets; rows are read from the bytes
/// passed to [`PdbTables::row`]).
#[derive(Debug, Clone)]
pub struct PdbTables {
    /// The HeapSizes byte.
    pub heap_sizes: u8,
    /// Row counts of all 64 possible tables: the debug tables from this stream, the
    /// type-system tables from `#Pdb`.
    pub rows: [u32; 64],
    layouts: [Layout; PDB_TABLE_COUNT],
}

impl PdbTables {
    /// Parses the `#~` stream of a portable PDB, given the row counts of the type-system
    /// tables (from `#Pdb`, by table number).
    pub fn parse(data: &[u8], type_system_rows: &[u32; 64]) -> Result<PdbTables> {
        let mut c = Cursor::new(data);
        c.skip(6, "PDB table stream reserved and versions")?;
        let heap_sizes = c.read_u8("PDB table stream heap sizes")?;
        c.skip(1, "PDB table stream reserved")?;
        let valid = c.read_u64("PDB table stream valid mask")?;
        c.skip(8, "PDB table stream sorted mask")?;
        let mut rows = *type_system_rows;
        for bit in 0..64u8 {
            if valid & (1u64 << bit) == 0 {
                continue;
            }
            if !(0x30..0x38).contains(&bit) {
                return Err(PdbError::UnexpectedTable { bit });
            }
            let count = c.read_u32("PDB table row counts")?;
            if count > 0x00FF_FFFF {
                return Err(PdbError::TooManyRows {
                    table: bit,
                    rows: count,
                });
            }
            rows[usize::from(bit)] = count;
        }
        // Extra data, when the heap-sizes byte says so, is not read; the rows follow it.
        let pos = c.position() + if heap_sizes & 0x40 != 0 { 4 } else { 0 };
        let wide = |flag: u8| if heap_sizes & flag != 0 { 4u8 } else { 2 };
        let small = |t: u8| rows[usize::from(t)] < (1 << 16);
        let mut layouts = [Layout::default(); PDB_TABLE_COUNT];
        let mut offset = pos;
        for table in PdbTable::ALL {
            let mut layout = Layout {
                rows: rows[table as usize],
                offset,
                ..Layout::default()
            };
            for (i, col) in columns(table).iter().enumerate() {
                let w = match *col {
                    Col::U16 => 2,
                    Col::U32 => 4,
                    Col::String => wide(0x01),
                    Col::Guid => wide(0x02),
                    Col::Blob => wide(0x04),
                    Col::Table(t) => {
                        if small(t) {
                            2
                        } else {
                            4
                        }
                    }
                    Col::HasCustomDebugInformation => {
                        let max = HAS_CUSTOM_DEBUG_INFORMATION
                            .iter()
                            .map(|&t| rows[usize::from(t)])
                            .max()
                            .unwrap_or(0);
                        if max < (1 << (16 - 5)) {
                            2
                        } else {
                            4
                        }
                    }
                };
                layout.widths[i] = w;
                layout.row_size += u32::from(w);
            }
            let end = offset as u64 + u64::from(layout.rows) * u64::from(layout.row_size);
            if end > data.len() as u64 {
                return Err(PdbError::TablesTruncated {
                    table: table as u8,
                    end,
                    len: data.len(),
                });
            }
            layouts[table.index()] = layout;
            offset = end as usize;
        }
        Ok(PdbTables {
            heap_sizes,
            rows,
            layouts,
        })
    }

    /// Number of rows of a debug table.
    pub fn row_count(&self, table: PdbTable) -> u32 {
        self.layouts[table.index()].rows
    }

    /// The raw column values of row `rid` (1-based) of `table`, read from the table
    /// stream's bytes `data` (the stream this was parsed from).
    pub fn row(&self, data: &[u8], table: PdbTable, rid: u32) -> Result<Vec<u32>> {
        let layout = &self.layouts[table.index()];
        if rid == 0 || rid > layout.rows {
            return Err(PdbError::RowOutOfBounds {
                table: table as u8,
                row: rid,
                rows: layout.rows,
            });
        }
        let start = layout.offset + (rid as usize - 1) * layout.row_size as usize;
        let mut c = Cursor::new(data).at(start);
        let mut out = Vec::with_capacity(columns(table).len());
        for &w in &layout.widths[..columns(table).len()] {
            let w = usize::from(w);
            let value =
                c.read_uint(w, "PDB table column")
                    .map_err(|t| PdbError::TablesTruncated {
                        table: table as u8,
                        end: t.offset.saturating_add(t.needed),
                        len: data.len(),
                    })?;
            // Columns are 2 or 4 bytes wide.
            out.push(value as u32);
        }
        Ok(out)
    }
}
