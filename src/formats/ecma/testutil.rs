//! A small metadata writer for unit tests: heaps, rows by table, the `#~` (or `#-`)
//! stream and the root, with column widths chosen as a reader computes them.

use std::collections::BTreeMap;

use super::root::METADATA_SIGNATURE;
use super::tables::{column_width, schema, TableId, TablesHeader, TABLE_COUNT};

pub(crate) struct Builder {
    strings: Vec<u8>,
    blobs: Vec<u8>,
    rows: BTreeMap<TableId, Vec<Vec<u32>>>,
    pub tables_stream_name: &'static str,
    pub heap_sizes: u8,
}

impl Builder {
    pub fn new() -> Builder {
        Builder {
            strings: vec![0],
            blobs: vec![0],
            rows: BTreeMap::new(),
            tables_stream_name: "#~",
            heap_sizes: 0,
        }
    }

    /// Adds a `#Strings` entry.
    pub fn string(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let at = self.strings.len() as u32;
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        at
    }

    /// Adds a `#Blob` entry (length below 128).
    pub fn blob(&mut self, b: &[u8]) -> u32 {
        let at = self.blobs.len() as u32;
        assert!(b.len() < 128);
        self.blobs.push(b.len() as u8);
        self.blobs.extend_from_slice(b);
        at
    }

    /// Appends a row of raw column values; returns its rid.
    pub fn row(&mut self, table: TableId, values: &[u32]) -> u32 {
        assert_eq!(values.len(), schema(table).len(), "{table:?}");
        let rows = self.rows.entry(table).or_default();
        rows.push(values.to_vec());
        rows.len() as u32
    }

    pub fn build(&self) -> Vec<u8> {
        let mut counts = [0u32; TABLE_COUNT];
        let mut valid = 0u64;
        for (t, rows) in &self.rows {
            counts[*t as usize] = rows.len() as u32;
            valid |= 1 << (*t as u8);
        }
        let header = TablesHeader {
            major_version: 2,
            minor_version: 0,
            heap_sizes: self.heap_sizes,
            valid,
            sorted: 0,
            rows: counts,
            extra_data: None,
        };
        let mut tables = Vec::new();
        tables.extend_from_slice(&0u32.to_le_bytes());
        tables.extend_from_slice(&[2, 0, self.heap_sizes, 1]);
        tables.extend_from_slice(&valid.to_le_bytes());
        tables.extend_from_slice(&0u64.to_le_bytes());
        for rows in self.rows.values() {
            tables.extend_from_slice(&(rows.len() as u32).to_le_bytes());
        }
        for (t, rows) in &self.rows {
            for row in rows {
                for (value, column) in row.iter().zip(schema(*t)) {
                    let width = column_width(&header, column.kind) as usize;
                    tables.extend_from_slice(&value.to_le_bytes()[..width]);
                }
            }
        }
        let pad = |v: &mut Vec<u8>| {
            while v.len() % 4 != 0 {
                v.push(0);
            }
        };
        let mut strings = self.strings.clone();
        pad(&mut strings);
        let mut blobs = self.blobs.clone();
        pad(&mut blobs);
        pad(&mut tables);
        let guids = vec![0u8; 16];
        let us = vec![0u8; 4];
        let streams: [(&str, &Vec<u8>); 5] = [
            (self.tables_stream_name, &tables),
            ("#Strings", &strings),
            ("#Blob", &blobs),
            ("#GUID", &guids),
            ("#US", &us),
        ];
        let mut head = Vec::new();
        head.extend_from_slice(&METADATA_SIGNATURE.to_le_bytes());
        head.extend_from_slice(&1u16.to_le_bytes());
        head.extend_from_slice(&1u16.to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        head.extend_from_slice(&12u32.to_le_bytes());
        head.extend_from_slice(b"v4.0.30319\0\0");
        head.extend_from_slice(&0u16.to_le_bytes());
        head.extend_from_slice(&(streams.len() as u16).to_le_bytes());
        let header_len: usize = head.len()
            + streams
                .iter()
                .map(|(n, _)| 8 + ((n.len() + 1 + 3) & !3))
                .sum::<usize>();
        let mut offset = header_len;
        let mut body = Vec::new();
        for (name, data) in &streams {
            head.extend_from_slice(&(offset as u32).to_le_bytes());
            head.extend_from_slice(&(data.len() as u32).to_le_bytes());
            head.extend_from_slice(name.as_bytes());
            head.push(0);
            pad(&mut head);
            body.extend_from_slice(data);
            offset += data.len();
        }
        head.extend_from_slice(&body);
        head
    }
}
