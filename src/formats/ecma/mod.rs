//! An ECMA-335 (CLI) metadata reader: the metadata root, its heaps and tables, signature
//! blobs, and the names the .NET runtime prints for methods (its perf map's).
//!
//! Input is the metadata blob: the bytes the CLI header's MetaData directory points to,
//! from a PE file ([`pe::metadata_from_pe`]) or read from target memory. Everything is
//! bounds-checked and returns [`MetadataError`]s that name the heap offset or the table,
//! row and column; nothing panics on any input, type nesting is capped and strings are
//! length-limited.
//!
//! ```no_run
//! use cdac::formats::ecma::{pe, Metadata, PerfMapNameOptions};
//! let image = std::fs::read("System.Linq.dll").unwrap();
//! let blob = pe::metadata_from_pe(&image, pe::PeLayout::File).unwrap();
//! let md = Metadata::parse(blob).unwrap();
//! for rid in 1..=md.tables.rows(cdac::formats::ecma::TableId::MethodDef) {
//!     if let Ok(name) = md.perf_map_method_name(rid, &PerfMapNameOptions::default()) {
//!         println!("{name}");
//!     }
//! }
//! ```
//!
//! Signature blobs decode without the rest of the metadata:
//!
//! ```
//! use cdac::formats::ecma::signature::{decode_method_sig, Primitive, TypeSig};
//!
//! // instance int32 (string, int64[]): HASTHIS, 2 parameters, I4, STRING, SZARRAY I8.
//! let sig = decode_method_sig(&[0x20, 0x02, 0x08, 0x0e, 0x1d, 0x0a])?;
//! assert!(sig.has_this());
//! assert_eq!(sig.ret, TypeSig::Primitive(Primitive::I4));
//! assert_eq!(
//!     sig.params,
//!     [
//!         TypeSig::Primitive(Primitive::String),
//!         TypeSig::SzArray(Box::new(TypeSig::Primitive(Primitive::I8))),
//!     ]
//! );
//! // A truncated blob is an error, never a panic.
//! assert!(decode_method_sig(&[0x20, 0x02, 0x08]).is_err());
//! # Ok::<(), cdac::formats::ecma::SignatureError>(())
//! ```
//!
//! The naming rules (and how they were checked against a real .NET 8 perf map) are in
//! `README.md` next to this file.

pub mod error;
mod heaps;
pub mod names;
pub mod pe;
pub mod root;
pub mod rows;
pub mod signature;
pub mod tables;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::OnceLock;

pub use error::{Heap, MetadataError, Result, SignatureError};
pub use heaps::{
    BlobHeap, BlobIndex, GuidHeap, GuidIndex, StringIndex, StringsHeap, UserStringHeap,
};
pub use names::{
    format_perf_map_name, net8_printf_drops_last_byte, CompilerNames, GenericArgNamer,
    GenericParam, IlFormatter, NestedStyle, PerfMapNameOptions,
};
pub use root::{parse_root, MetadataRoot, StreamHeader};
pub use rows::*;
pub use signature::{
    decode_field_sig, decode_locals_sig, decode_method_sig, decode_method_spec, decode_type_spec,
    decompress_i32, decompress_u32, ArrayShape, CallKind, MethodSig, Primitive, SigOptions,
    TypeSig,
};
pub use tables::{
    parse_tables, CodedIndex, Column, ColumnKind, ColumnValue, TableId, TableStream, Token,
};

/// Parsed metadata: root, heaps and tables, borrowing the blob.
pub struct Metadata<'a> {
    /// The whole metadata (from the `BSJB` root).
    pub data: &'a [u8],
    /// The root header and stream list.
    pub root: MetadataRoot<'a>,
    /// The `#Strings` heap.
    pub strings: StringsHeap<'a>,
    /// The `#Blob` heap.
    pub blobs: BlobHeap<'a>,
    /// The `#GUID` heap.
    pub guids: GuidHeap<'a>,
    /// The `#US` heap.
    pub user_strings: UserStringHeap<'a>,
    /// The table stream (`#~` or `#-`).
    pub tables: TableStream<'a>,
    index: OnceLock<Index>,
}

impl std::fmt::Debug for Metadata<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metadata")
            .field("version", &self.root.version)
            .field("tables", &self.tables.stream_name)
            .field("type_defs", &self.tables.rows(TableId::TypeDef))
            .field("method_defs", &self.tables.rows(TableId::MethodDef))
            .finish()
    }
}

/// Relations computed once, on first use, from the tables.
#[derive(Debug, Default)]
struct Index {
    /// Enclosing TypeDef of each TypeDef (0: not nested), by rid.
    enclosing: Vec<u32>,
    /// Declaring TypeDef of each MethodDef (0: none), by rid.
    method_owner: Vec<u32>,
    /// GenericParam rids by owner token, ordered by Number.
    generic_params: HashMap<u32, Vec<u32>>,
    /// TypeDef rids by runtime-style full name (`Ns.Outer+Inner`).
    by_name: OnceLock<HashMap<String, u32>>,
}

impl<'a> Metadata<'a> {
    /// Parses the metadata blob: root, streams, heaps and table layout. Rows are decoded on
    /// demand.
    pub fn parse(data: &'a [u8]) -> Result<Metadata<'a>> {
        let root = parse_root(data)?;
        let tables_stream = root
            .stream("#~")
            .or_else(|| root.stream("#-"))
            .ok_or(MetadataError::MissingStream("#~"))?;
        let tables = parse_tables(tables_stream.data, tables_stream.name)?;
        let heap = |name: &str| root.stream(name).map(|s| s.data).unwrap_or(&[]);
        Ok(Metadata {
            data,
            strings: StringsHeap(heap("#Strings")),
            blobs: BlobHeap(heap("#Blob")),
            guids: GuidHeap(heap("#GUID")),
            user_strings: UserStringHeap(heap("#US")),
            tables,
            root,
            index: OnceLock::new(),
        })
    }

    fn index(&self) -> &Index {
        self.index.get_or_init(|| self.build_index())
    }

    fn build_index(&self) -> Index {
        let types = self.tables.rows(TableId::TypeDef);
        let methods = self.tables.rows(TableId::MethodDef);
        let mut enclosing = vec![0u32; types as usize + 1];
        for rid in 1..=self.tables.rows(TableId::NestedClass) {
            if let Ok(n) = self.nested_class(rid) {
                if n.nested >= 1
                    && n.nested <= types
                    && n.enclosing <= types
                    && n.nested != n.enclosing
                {
                    let slot = &mut enclosing[n.nested as usize];
                    if *slot == 0 {
                        *slot = n.enclosing;
                    }
                }
            }
        }
        let mut method_owner = vec![0u32; methods as usize + 1];
        // Lists are meant to be ascending; never walk a list entry twice, so that
        // overlapping (malformed) ranges cost no more than one pass.
        let mut floor = 1u32;
        for t in 1..=types {
            if let Ok(range) = self.method_list_range(t) {
                let start = range.start.max(floor);
                let end = range.end.max(start);
                floor = end;
                for i in start..end {
                    if let Ok(m) = self.method_list_entry(i) {
                        if let Some(slot) = method_owner.get_mut(m as usize) {
                            if *slot == 0 {
                                *slot = t;
                            }
                        }
                    }
                }
            }
        }
        let mut generic_params: HashMap<u32, Vec<(u16, u32)>> = HashMap::new();
        for rid in 1..=self.tables.rows(TableId::GenericParam) {
            if let Ok(p) = self.generic_param(rid) {
                generic_params
                    .entry(p.owner.0)
                    .or_default()
                    .push((p.number, rid));
            }
        }
        let generic_params = generic_params
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_unstable();
                (k, v.into_iter().map(|(_, rid)| rid).collect())
            })
            .collect();
        Index {
            enclosing,
            method_owner,
            generic_params,
            by_name: OnceLock::new(),
        }
    }

    /// The TypeDef that `rid` is nested in (NestedClass table).
    ///
    /// A lookup by token: the table is sorted by its nested type (ECMA-335 II.22, and the
    /// header's sorted mask says so), so one binary search finds the row, and naming a
    /// few types never indexes a whole assembly. Metadata that is not marked sorted is
    /// indexed once instead.
    pub fn enclosing_type(&self, rid: u32) -> Option<u32> {
        if self.index.get().is_none() && self.tables.is_sorted(TableId::NestedClass) {
            let row = self.first_row_at_or_after(TableId::NestedClass, 0, rid)?;
            let n = self.nested_class(row).ok()?;
            let types = self.tables.rows(TableId::TypeDef);
            // The index's rules: a TypeDef of this table, not itself.
            return (n.nested == rid && n.enclosing <= types && n.enclosing != rid)
                .then_some(n.enclosing)
                .filter(|&e| e != 0);
        }
        match self.index().enclosing.get(rid as usize) {
            Some(&e) if e != 0 => Some(e),
            _ => None,
        }
    }

    /// The TypeDef whose method list holds MethodDef `rid`.
    ///
    /// TypeDef method lists are ascending runs (ECMA-335 II.22.37): the owner is the last
    /// TypeDef whose list starts at or before `rid`, found by a binary search when method
    /// lists are direct (no MethodPtr table) and checked to hold `rid`.
    pub fn method_declaring_type(&self, rid: u32) -> Option<u32> {
        if self.index.get().is_none() && !self.method_indirect() {
            let types = self.tables.rows(TableId::TypeDef);
            let start_of = |t: u32| self.tables.row(TableId::TypeDef, t).map(|r| r.raw(5));
            // The number of TypeDefs whose list starts at or before `rid`.
            let (mut lo, mut hi) = (0u32, types);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match start_of(mid + 1) {
                    Ok(start) if start <= rid => lo = mid + 1,
                    Ok(_) => hi = mid,
                    Err(_) => return None,
                }
            }
            return (lo >= 1 && self.method_list_range(lo).is_ok_and(|r| r.contains(&rid)))
                .then_some(lo);
        }
        match self.index().method_owner.get(rid as usize) {
            Some(&t) if t != 0 => Some(t),
            _ => None,
        }
    }

    /// The generic parameters of a TypeDef or MethodDef, by number.
    ///
    /// The GenericParam table is sorted by owner (ECMA-335 II.22.20): the owner's rows are
    /// found by a binary search on the owner's coded index, when the header marks the
    /// table sorted.
    pub fn generic_params_of(&self, owner: Token) -> Vec<GenericParamRow> {
        if self.index.get().is_none() && self.tables.is_sorted(TableId::GenericParam) {
            let tag = match owner.table() {
                Some(TableId::TypeDef) => 0,
                Some(TableId::MethodDef) => 1,
                _ => return Vec::new(),
            };
            let key = (owner.rid() << 1) | tag;
            let Some(first) = self.first_row_at_or_after(TableId::GenericParam, 2, key) else {
                return Vec::new();
            };
            let rows = self.tables.rows(TableId::GenericParam);
            let mut params: Vec<GenericParamRow> = (first..=rows)
                .map_while(|r| {
                    let raw = self.tables.row(TableId::GenericParam, r).ok()?;
                    (raw.raw(2) == key).then(|| self.generic_param(r).ok())?
                })
                .collect();
            params.sort_by_key(|p| p.number);
            return params;
        }
        self.index()
            .generic_params
            .get(&owner.0)
            .map(|rids| {
                rids.iter()
                    .filter_map(|&r| self.generic_param(r).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first row of a sorted `table` whose raw `column` is at least `key` (`None`
    /// when every row's is smaller, or a row cannot be read).
    fn first_row_at_or_after(&self, table: TableId, column: usize, key: u32) -> Option<u32> {
        let (mut lo, mut hi) = (1u32, self.tables.rows(table) + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.tables.row(table, mid).ok()?.raw(column) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo <= self.tables.rows(table)).then_some(lo)
    }

    /// The names of a TypeDef's or MethodDef's generic parameters, by number.
    pub fn generic_param_names(&self, owner: Token) -> Result<Vec<String>> {
        self.generic_params_of(owner)
            .iter()
            .map(|p| self.strings.get_lossy(p.name).map(|s| s.into_owned()))
            .collect()
    }

    /// A list column's range `[start, end)` for row `rid` of `table`, where the next row's
    /// value (or the end of `target`) ends it; clamped to the target's rows.
    fn list_range(
        &self,
        table: TableId,
        column: usize,
        rid: u32,
        target: TableId,
    ) -> Result<Range<u32>> {
        let rows = self.tables.rows(table);
        let limit = self.tables.rows(target) + 1;
        let start = self.tables.row(table, rid)?.raw(column).clamp(1, limit);
        let end = if rid < rows {
            self.tables.row(table, rid + 1)?.raw(column)
        } else {
            limit
        };
        Ok(start..end.clamp(start, limit))
    }

    /// Whether method lists go through MethodPtr (unoptimized metadata).
    fn method_indirect(&self) -> bool {
        self.tables.rows(TableId::MethodPtr) > 0
    }

    /// The MethodList range of TypeDef `rid`, in MethodDef rids (or MethodPtr rids for
    /// metadata with a MethodPtr table).
    pub fn method_list_range(&self, rid: u32) -> Result<Range<u32>> {
        let target = if self.method_indirect() {
            TableId::MethodPtr
        } else {
            TableId::MethodDef
        };
        self.list_range(TableId::TypeDef, 5, rid, target)
    }

    fn method_list_entry(&self, i: u32) -> Result<u32> {
        if self.method_indirect() {
            Ok(self.tables.row(TableId::MethodPtr, i)?.raw(0))
        } else {
            Ok(i)
        }
    }

    /// The MethodDef rids of TypeDef `rid`.
    pub fn type_methods(&self, rid: u32) -> Result<Vec<u32>> {
        self.method_list_range(rid)?
            .map(|i| self.method_list_entry(i))
            .collect()
    }

    /// The Field rids of TypeDef `rid`.
    pub fn type_fields(&self, rid: u32) -> Result<Vec<u32>> {
        if self.tables.rows(TableId::FieldPtr) > 0 {
            self.list_range(TableId::TypeDef, 4, rid, TableId::FieldPtr)?
                .map(|i| Ok(self.tables.row(TableId::FieldPtr, i)?.raw(0)))
                .collect()
        } else {
            Ok(self
                .list_range(TableId::TypeDef, 4, rid, TableId::Field)?
                .collect())
        }
    }

    /// Field `rid`'s name.
    pub fn field_name(&self, rid: u32) -> Result<std::borrow::Cow<'a, str>> {
        self.strings.get_lossy(self.field(rid)?.name)
    }

    /// Field `rid`'s decoded type (its FieldSig).
    pub fn field_type(&self, rid: u32) -> Result<TypeSig> {
        let row = self.field(rid)?;
        let bytes = self.blobs.get(row.signature)?;
        decode_field_sig(bytes).map_err(|source| MetadataError::Signature {
            blob: row.signature.0,
            source,
        })
    }

    /// The Param rows of MethodDef `rid` (sequence 0 is the return value).
    pub fn method_params(&self, rid: u32) -> Result<Vec<ParamRow>> {
        if self.tables.rows(TableId::ParamPtr) > 0 {
            self.list_range(TableId::MethodDef, 5, rid, TableId::ParamPtr)?
                .map(|i| self.param(self.tables.row(TableId::ParamPtr, i)?.raw(0)))
                .collect()
        } else {
            self.list_range(TableId::MethodDef, 5, rid, TableId::Param)?
                .map(|i| self.param(i))
                .collect()
        }
    }

    /// MethodDef `rid`'s name.
    pub fn method_name(&self, rid: u32) -> Result<std::borrow::Cow<'a, str>> {
        self.strings.get_lossy(self.method_def(rid)?.name)
    }

    /// Whether MethodDef `rid` is static (no `this`).
    pub fn method_is_static(&self, rid: u32) -> Result<bool> {
        Ok(self.method_def(rid)?.is_static())
    }

    /// MethodDef `rid`'s decoded signature.
    pub fn method_signature(&self, rid: u32) -> Result<MethodSig> {
        let row = self.method_def(rid)?;
        self.method_sig_blob(row.signature)
            .map_err(|e| MetadataError::InRow {
                table: TableId::MethodDef,
                row: rid,
                column: "Signature",
                source: Box::new(e),
            })
    }

    /// Decodes the method signature at a `#Blob` index.
    pub fn method_sig_blob(&self, blob: BlobIndex) -> Result<MethodSig> {
        let bytes = self.blobs.get(blob)?;
        decode_method_sig(bytes).map_err(|source| MetadataError::Signature {
            blob: blob.0,
            source,
        })
    }

    /// Decodes the type signature (TypeSpec) at a `#Blob` index.
    pub fn type_spec_sig(&self, blob: BlobIndex) -> Result<TypeSig> {
        let bytes = self.blobs.get(blob)?;
        decode_type_spec(bytes).map_err(|source| MetadataError::Signature {
            blob: blob.0,
            source,
        })
    }

    /// The TypeDef with this runtime-style full name (`Ns.Outer+Inner`, no generic
    /// arguments, escaped as the runtime escapes).
    pub fn find_type(&self, full_name: &str) -> Option<u32> {
        self.index()
            .by_name
            .get_or_init(|| {
                (1..=self.tables.rows(TableId::TypeDef))
                    .filter_map(|rid| Some((self.type_name(rid, NestedStyle::Plus).ok()?, rid)))
                    .collect()
            })
            .get(full_name)
            .copied()
    }

    /// Decodes every row of every table and every signature the naming code reads,
    /// counting what fails (for tests, fuzzing and diagnostics). Never panics.
    pub fn check_all(&self) -> CheckReport {
        let mut report = CheckReport::default();
        for table in TableId::ALL {
            for rid in 1..=self.tables.rows(table) {
                report.rows += 1;
                match self.tables.row(table, rid).and_then(|r| r.values()) {
                    Ok(values) => {
                        for v in values {
                            let bad = match v {
                                ColumnValue::String(s) => self.strings.get_bytes(s).is_err(),
                                ColumnValue::Blob(b) => self.blobs.get(b).is_err(),
                                ColumnValue::Guid(g) => self.guids.get(g).is_err(),
                                _ => false,
                            };
                            if bad {
                                report.bad_heap_refs += 1;
                            }
                        }
                    }
                    Err(e) => report.note(e),
                }
            }
        }
        report.type_defs = self.tables.rows(TableId::TypeDef);
        report.method_defs = self.tables.rows(TableId::MethodDef);
        for rid in 1..=report.type_defs {
            if let Err(e) = self.type_name(rid, NestedStyle::Plus) {
                report.note(e);
            }
        }
        for rid in 1..=report.method_defs {
            match self.method_signature(rid) {
                Ok(_) => report.method_sigs_ok += 1,
                Err(e) => report.note(e),
            }
            match self.perf_map_method_name(rid, &PerfMapNameOptions::default()) {
                Ok(_) => report.names_ok += 1,
                Err(e) => report.note(e),
            }
        }
        for rid in 1..=self.tables.rows(TableId::TypeSpec) {
            if let Err(e) = self
                .type_spec(rid)
                .and_then(|r| self.type_spec_sig(r.signature))
            {
                report.note(e);
            }
        }
        for rid in 1..=self.tables.rows(TableId::MemberRef) {
            if let Ok(r) = self.member_ref(rid) {
                if let Ok(b) = self.blobs.get(r.signature) {
                    // Field refs start with 0x06; the rest are method signatures.
                    let res = if b.first().map(|c| c & 0x0F) == Some(0x06) {
                        decode_field_sig(b).map(|_| ())
                    } else {
                        decode_method_sig(b).map(|_| ())
                    };
                    if let Err(source) = res {
                        report.note(MetadataError::Signature {
                            blob: r.signature.0,
                            source,
                        });
                    }
                }
            }
        }
        for rid in 1..=self.tables.rows(TableId::MethodSpec) {
            if let Ok(r) = self.method_spec(rid) {
                if let Ok(b) = self.blobs.get(r.instantiation) {
                    if let Err(source) = decode_method_spec(b) {
                        report.note(MetadataError::Signature {
                            blob: r.instantiation.0,
                            source,
                        });
                    }
                }
            }
        }
        report
    }
}

/// What [`Metadata::check_all`] found.
#[derive(Debug, Default, Clone)]
pub struct CheckReport {
    /// Rows read across all tables.
    pub rows: u64,
    /// TypeDef rows.
    pub type_defs: u32,
    /// MethodDef rows.
    pub method_defs: u32,
    /// Method signatures that decoded.
    pub method_sigs_ok: u32,
    /// Method names that formatted.
    pub names_ok: u32,
    /// Heap references that failed.
    pub bad_heap_refs: u64,
    /// Errors of any kind.
    pub errors: u64,
    /// The first few errors.
    pub first_errors: Vec<MetadataError>,
}

impl CheckReport {
    fn note(&mut self, e: MetadataError) {
        self.errors += 1;
        if self.first_errors.len() < 8 {
            self.first_errors.push(e);
        }
    }
}
