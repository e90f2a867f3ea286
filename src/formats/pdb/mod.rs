//! Portable PDBs: the debug tables of an ECMA-335-format metadata blob with a `#Pdb`
//! stream (the Portable PDB v1.0 spec), read for source lines of managed frames.
//!
//! A [`PortablePdb`] owns its bytes (a `.pdb` file, or an assembly's embedded PDB once
//! inflated) and decodes on demand: [`PortablePdb::method_lines`] turns a method's
//! sequence-points blob into [`SequencePoint`]s, [`PortablePdb::line_at`] maps an IL offset
//! to a file and line, [`PortablePdb::document_name`] joins a document's name parts.
//! `finder` finds the PDB of an assembly (embedded, the CodeView path, or next to it) and
//! checks its id.
//!
//! Nothing here panics on damaged input: every read is bounds-checked, sequence points are
//! bounded by their blob's length, and errors ([`PdbError`]) name the row and blob offset.

pub mod error;
mod finder;
mod pe_debug;
pub mod tables;
#[cfg(test)]
mod tests;

use crate::formats::cursor::Cursor;
use std::ops::Range;

use crate::formats::ecma::{parse_root, BlobHeap, BlobIndex, GuidHeap, GuidIndex};

pub use error::{PdbError, Result};
pub use finder::{find_pdb, FoundPdb, PdbFinder, PdbSource};
pub use pe_debug::{debug_directory, CodeViewInfo, DebugDirectory, DebugEntry};
pub use tables::{PdbTable, PdbTables};

/// The line number the compilers give hidden sequence points.
pub const HIDDEN_LINE: u32 = 0x00FE_EFEE;

/// Longest document name accepted (bytes).
pub const MAX_DOCUMENT_NAME: usize = 64 * 1024;

/// A PDB's id: the GUID and stamp an assembly's CodeView entry names (20 bytes in `#Pdb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PdbId {
    /// The GUID, as stored (the CodeView entry's GUID bytes).
    pub guid: [u8; 16],
    /// The stamp (the debug directory entry's TimeDateStamp).
    pub stamp: u32,
}

impl std::fmt::Display for PdbId {
    /// `GUID-STAMP`, the GUID in its usual text form.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = &self.guid;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}-{:08x}",
            u32::from_le_bytes([g[0], g[1], g[2], g[3]]),
            u16::from_le_bytes([g[4], g[5]]),
            u16::from_le_bytes([g[6], g[7]]),
            g[8],
            g[9],
            g[10],
            g[11],
            g[12],
            g[13],
            g[14],
            g[15],
            self.stamp
        )
    }
}

/// One sequence point of a method: an IL offset and the source span it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequencePoint {
    /// IL offset where the span's code starts.
    pub il_offset: u32,
    /// Document row id (see [`PortablePdb::document_name`]).
    pub document: u32,
    /// First line (1-based); [`HIDDEN_LINE`] for hidden points.
    pub start_line: u32,
    /// First column (1-based); 0 for hidden points.
    pub start_column: u32,
    /// Last line.
    pub end_line: u32,
    /// Column after the span.
    pub end_column: u32,
    /// A hidden sequence point (compiler-generated code with no source span).
    pub hidden: bool,
}

/// Where an IL offset is in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLocation {
    /// The document's name (a path as the compiler saw it).
    pub file: String,
    /// Line (1-based).
    pub line: u32,
    /// Column (1-based).
    pub column: u32,
}

/// A portable PDB, parsed: its id, the heaps and the debug tables' layout.
#[derive(Clone)]
pub struct PortablePdb {
    data: Vec<u8>,
    blobs: Range<usize>,
    guids: Range<usize>,
    tables_range: Range<usize>,
    pdb_stream: Range<usize>,
    /// The PDB's id.
    pub id: PdbId,
    /// The entry point's MethodDef token (0: none).
    pub entry_point: u32,
    /// The table layout (row counts of debug and type-system tables).
    pub tables: PdbTables,
}

impl std::fmt::Debug for PortablePdb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortablePdb")
            .field("id", &self.id.to_string())
            .field("bytes", &self.data.len())
            .field("documents", &self.row_count(PdbTable::Document))
            .field("methods", &self.row_count(PdbTable::MethodDebugInformation))
            .finish()
    }
}

/// Position of a stream within the metadata bytes.
fn stream_range(data: &[u8], stream: &[u8]) -> Range<usize> {
    let start = (stream.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
    start..start + stream.len()
}

impl PortablePdb {
    /// Parses a portable PDB (the whole `.pdb` file, which starts with the metadata root).
    pub fn parse(data: Vec<u8>) -> Result<PortablePdb> {
        let root = parse_root(&data)?;
        let pdb = root.stream("#Pdb").ok_or(PdbError::NoPdbStream)?.data;
        let tables = root
            .stream("#~")
            .or_else(|| root.stream("#-"))
            .ok_or(PdbError::NoTableStream)?
            .data;
        let mut c = Cursor::new(pdb);
        let guid = c.read_array::<16>("#Pdb stream PDB id GUID")?;
        let stamp = c.read_u32("#Pdb stream PDB id stamp")?;
        let entry_point = c.read_u32("#Pdb stream entry point")?;
        let referenced = c.read_u64("#Pdb stream referenced type-system tables")?;
        let mut type_system_rows = [0u32; 64];
        for (bit, rows) in type_system_rows.iter_mut().enumerate() {
            if referenced & (1u64 << bit) == 0 {
                continue;
            }
            *rows = c.read_u32("#Pdb stream type-system row counts")?;
        }
        let parsed = PdbTables::parse(tables, &type_system_rows)?;
        let heap = |name: &str| {
            root.stream(name)
                .map(|s| stream_range(&data, s.data))
                .unwrap_or(0..0)
        };
        let blobs = heap("#Blob");
        let guids = heap("#GUID");
        let tables_range = stream_range(&data, tables);
        let pdb_stream = stream_range(&data, pdb);
        Ok(PortablePdb {
            blobs,
            pdb_stream,
            guids,
            tables_range,
            id: PdbId { guid, stamp },
            entry_point,
            tables: parsed,
            data,
        })
    }

    /// Reads and parses a `.pdb` file (a regular file only: never a FIFO or a device).
    pub fn open(path: &std::path::Path) -> Result<PortablePdb> {
        let map = crate::memory::map_regular_file(path).map_err(|e| PdbError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        PortablePdb::parse(map.to_vec())
    }

    /// The embedded portable PDB of an assembly (a PE image in file layout), if it has one.
    pub fn from_embedded(image: &[u8]) -> Result<Option<PortablePdb>> {
        let dir = debug_directory(image)?;
        match dir.embedded_pdb(image)? {
            Some(bytes) => Ok(Some(PortablePdb::parse(bytes)?)),
            None => Ok(None),
        }
    }

    /// The PDB's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// SHA-256 of the PDB's bytes with its 20-byte id (the start of `#Pdb`) zeroed: what an
    /// assembly's PdbChecksum debug entry of algorithm `SHA256` holds.
    pub fn checksum_sha256(&self) -> [u8; 32] {
        use sha2::Digest;
        let id_start = self.pdb_stream.start.min(self.data.len());
        let id_end = (id_start + 20).min(self.data.len());
        let mut h = sha2::Sha256::new();
        h.update(&self.data[..id_start]);
        h.update([0u8; 20].get(..id_end - id_start).unwrap_or(&[]));
        h.update(&self.data[id_end..]);
        h.finalize().into()
    }

    fn blob_heap(&self) -> BlobHeap<'_> {
        BlobHeap(self.data.get(self.blobs.clone()).unwrap_or(&[]))
    }

    fn guid_heap(&self) -> GuidHeap<'_> {
        GuidHeap(self.data.get(self.guids.clone()).unwrap_or(&[]))
    }

    fn row(&self, table: PdbTable, rid: u32) -> Result<Vec<u32>> {
        let data = self.data.get(self.tables_range.clone()).unwrap_or(&[]);
        self.tables.row(data, table, rid)
    }

    /// Number of rows of a debug table.
    pub fn row_count(&self, table: PdbTable) -> u32 {
        self.tables.row_count(table)
    }

    /// The name of Document `rid`: its name blob's parts joined by its separator.
    pub fn document_name(&self, rid: u32) -> Result<String> {
        let row = self.row(PdbTable::Document, rid)?;
        let blob = self.blob_heap().get(BlobIndex(row[0]))?;
        let bad = |reason| PdbError::BadDocumentName {
            document: rid,
            reason,
        };
        let mut c = Cursor::new(blob);
        let sep = c
            .read_u8("document name separator")
            .map_err(|_| bad("empty name blob"))?;
        let mut name: Vec<u8> = Vec::new();
        let mut first = true;
        while c.remaining() > 0 {
            let part = c
                .read_compressed_u32("document name part")
                .ok()
                .flatten()
                .ok_or(bad("bad part index"))?;
            if !first && sep != 0 {
                name.push(sep);
            }
            first = false;
            if part != 0 {
                let bytes = self.blob_heap().get(BlobIndex(part))?;
                name.extend_from_slice(bytes);
            }
            if name.len() > MAX_DOCUMENT_NAME {
                return Err(bad("name longer than 64 KiB"));
            }
        }
        String::from_utf8(name).map_err(|_| bad("name is not UTF-8"))
    }

    /// The language GUID of Document `rid` (C#: `3f5162f8-07c6-11d3-9053-00c04fa302a1`).
    pub fn document_language(&self, rid: u32) -> Result<Option<[u8; 16]>> {
        let row = self.row(PdbTable::Document, rid)?;
        Ok(self.guid_heap().get(GuidIndex(row[3]))?)
    }

    /// The sequence points of MethodDef `method` (its MethodDebugInformation row), in blob
    /// order (ascending IL offsets). Empty when the method has none.
    pub fn method_lines(&self, method: u32) -> Result<Vec<SequencePoint>> {
        let row = self.row(PdbTable::MethodDebugInformation, method)?;
        let blob = self.blob_heap().get(BlobIndex(row[1]))?;
        decode_sequence_points(method, row[0], blob, self.row_count(PdbTable::Document))
    }

    /// Where IL offset `il_offset` of MethodDef `method` is: the last non-hidden sequence
    /// point at or before it. `None` when the method has no such point.
    pub fn line_at(&self, method: u32, il_offset: u32) -> Result<Option<SourceLocation>> {
        let points = self.method_lines(method)?;
        match point_at(&points, il_offset) {
            None => Ok(None),
            Some(p) => Ok(Some(SourceLocation {
                file: self.document_name(p.document)?,
                line: p.start_line,
                column: p.start_column,
            })),
        }
    }
}

/// The GUID of the custom debug information "async method stepping information"
/// (`54FD2AC5-E925-401A-9C2A-F94F171072F8`), in its stored byte order.
const ASYNC_METHOD_STEPPING_INFORMATION: [u8; 16] = [
    0xC5, 0x2A, 0xFD, 0x54, 0x25, 0xE9, 0x1A, 0x40, 0x9C, 0x2A, 0xF9, 0x4F, 0x17, 0x10, 0x72, 0xF8,
];

/// Most await points read for one method.
const MAX_AWAIT_POINTS: usize = 1 << 16;

/// One await of an async method's `MoveNext`: where it yields and where it resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwaitPoint {
    /// IL offset at which the method yields when the awaited thing is not done.
    pub yield_offset: u32,
    /// IL offset at which it resumes.
    pub resume_offset: u32,
    /// The MethodDef row of the method that resumes (the same `MoveNext`).
    pub resume_method: u32,
}

impl PortablePdb {
    /// The awaits of the async state machine whose `MoveNext` is MethodDef `move_next` (row
    /// id), in the order the compiler numbered them: state N of the state machine is
    /// suspended at await N. Empty when the PDB has no stepping information for it.
    pub fn async_await_points(&self, move_next: u32) -> Result<Vec<AwaitPoint>> {
        // HasCustomDebugInformation: 5 tag bits, tag 0 = MethodDef.
        let parent = move_next << 5;
        for rid in 1..=self.row_count(PdbTable::CustomDebugInformation) {
            let row = self.row(PdbTable::CustomDebugInformation, rid)?;
            if row[0] != parent {
                continue;
            }
            if self.guid_heap().get(GuidIndex(row[1]))? != Some(ASYNC_METHOD_STEPPING_INFORMATION) {
                continue;
            }
            let blob = self.blob_heap().get(BlobIndex(row[2]))?;
            let mut c = Cursor::new(blob);
            c.skip(4, "async stepping catch handler offset")?;
            let mut points = Vec::new();
            while c.remaining() > 0 && points.len() < MAX_AWAIT_POINTS {
                let yield_offset = c.read_u32("async stepping yield offset")?;
                let resume_offset = c.read_u32("async stepping resume offset")?;
                let resume_method = c
                    .read_compressed_u32("async stepping resume method")?
                    .unwrap_or(0);
                points.push(AwaitPoint {
                    yield_offset,
                    resume_offset,
                    resume_method,
                });
            }
            return Ok(points);
        }
        Ok(Vec::new())
    }
}

/// The sequence point IL offset `il_offset` belongs to: the last non-hidden point at or
/// before it.
pub fn point_at(points: &[SequencePoint], il_offset: u32) -> Option<&SequencePoint> {
    points
        .iter()
        .filter(|p| !p.hidden && p.il_offset <= il_offset)
        .max_by_key(|p| p.il_offset)
}

/// Decodes a sequence-points blob (Portable PDB spec, "Sequence Points Blob").
/// `document` is the MethodDebugInformation row's Document (0: the blob names it);
/// `documents` the Document table's row count.
pub fn decode_sequence_points(
    method: u32,
    document: u32,
    blob: &[u8],
    documents: u32,
) -> Result<Vec<SequencePoint>> {
    let mut points = Vec::new();
    if blob.is_empty() {
        return Ok(points);
    }
    let mut c = Cursor::new(blob);
    let bad = |offset: usize, reason: &'static str| PdbError::BadSequencePoints {
        method,
        offset,
        reason,
    };
    // A value that runs past the blob or has no valid encoding is the same damage here.
    let read_u = |c: &mut Cursor, reason| -> Result<u32> {
        let at = c.position();
        c.read_compressed_u32(reason)
            .ok()
            .flatten()
            .ok_or(bad(at, reason))
    };
    let read_i = |c: &mut Cursor, reason| -> Result<i32> {
        let at = c.position();
        c.read_compressed_i32(reason)
            .ok()
            .flatten()
            .ok_or(bad(at, reason))
    };
    // Header: LocalSignature, then InitialDocument when the row has none.
    let _local_signature = read_u(&mut c, "bad LocalSignature")?;
    let mut doc = document;
    if doc == 0 {
        doc = read_u(&mut c, "bad InitialDocument")?;
    }
    let check_doc = |d: u32, at: usize| {
        if d == 0 || d > documents {
            Err(bad(at, "document row out of range"))
        } else {
            Ok(())
        }
    };
    check_doc(doc, c.position())?;
    let mut il_offset: u32 = 0;
    let mut first = true;
    let mut prev_line: Option<(u32, u32)> = None;
    while c.remaining() > 0 {
        let at = c.position();
        let delta_il = read_u(&mut c, "bad IL offset delta")?;
        if !first && delta_il == 0 {
            doc = read_u(&mut c, "bad document record")?;
            check_doc(doc, at)?;
            continue;
        }
        il_offset = if first {
            delta_il
        } else {
            il_offset
                .checked_add(delta_il)
                .ok_or(bad(at, "IL offset overflows"))?
        };
        if il_offset >= 0x2000_0000 {
            return Err(bad(at, "IL offset out of range"));
        }
        first = false;
        let delta_lines = read_u(&mut c, "bad line delta")?;
        let delta_columns: i64 = if delta_lines == 0 {
            i64::from(read_u(&mut c, "bad column delta")?)
        } else {
            i64::from(read_i(&mut c, "bad column delta")?)
        };
        if delta_lines == 0 && delta_columns == 0 {
            points.push(SequencePoint {
                il_offset,
                document: doc,
                start_line: HIDDEN_LINE,
                start_column: 0,
                end_line: HIDDEN_LINE,
                end_column: 0,
                hidden: true,
            });
            continue;
        }
        let (start_line, start_column) = match prev_line {
            None => (
                i64::from(read_u(&mut c, "bad start line")?),
                i64::from(read_u(&mut c, "bad start column")?),
            ),
            Some((line, column)) => (
                i64::from(line) + i64::from(read_i(&mut c, "bad start line delta")?),
                i64::from(column) + i64::from(read_i(&mut c, "bad start column delta")?),
            ),
        };
        let end_line = start_line + i64::from(delta_lines);
        let end_column = start_column + delta_columns;
        let line_ok = |l: i64| (0..0x2000_0000).contains(&l) && l != i64::from(HIDDEN_LINE);
        let col_ok = |c: i64| (0..0x1_0000).contains(&c);
        if !line_ok(start_line) || !line_ok(end_line) {
            return Err(bad(at, "line out of range"));
        }
        if !col_ok(start_column) || !col_ok(end_column) {
            return Err(bad(at, "column out of range"));
        }
        // In range, so these fit.
        let (sl, sc, el, ec) = (
            start_line as u32,
            start_column as u32,
            end_line as u32,
            end_column as u32,
        );
        prev_line = Some((sl, sc));
        points.push(SequencePoint {
            il_offset,
            document: doc,
            start_line: sl,
            start_column: sc,
            end_line: el,
            end_column: ec,
            hidden: false,
        });
    }
    Ok(points)
}
