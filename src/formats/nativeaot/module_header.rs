//! The module header the compiler writes for the runtime's `TypeManager` (the `__modules`
//! section points at it): `u32 "RTR\0"`, `u16` major, `u16` minor, `u32` flags, `u16`
//! section count, `u8` row size, `u8` row type; then one row per section. .NET 10 (16.x)
//! rows are 24 bytes, `i32 id, i32 flags, start, end` (length `end - start` when flag 1
//! is set, else a pointer's 8); .NET 11 (26.x) rows are 16, `i32 id, i32 length, start`.
//! Blob N of the runtime's `RhFindBlob` is section 300 + N.

use super::{error, AotFormatError};

/// The header's size.
pub const HEADER_SIZE: usize = 16;
const SIGNATURE: u32 = 0x0052_5452;
/// Section ids of blobs are 300 + the blob's number.
const BLOB_BASE: u32 = 300;

/// A module header's fixed part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleHeader {
    /// Major version (16 in .NET 10, 26 in .NET 11).
    pub major: u16,
    /// Minor version.
    pub minor: u16,
    /// Rows that follow.
    pub sections: u16,
    /// Size of a row.
    pub row_size: u8,
}

impl ModuleHeader {
    /// Decodes the first [`HEADER_SIZE`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<ModuleHeader, AotFormatError> {
        let b = bytes
            .get(..HEADER_SIZE)
            .ok_or_else(|| error("module header", "shorter than 16 bytes"))?;
        let signature = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if signature != SIGNATURE {
            return Err(error(
                "module header",
                format!("signature {signature:#x}, not \"RTR\\0\""),
            ));
        }
        let header = ModuleHeader {
            major: u16::from_le_bytes([b[4], b[5]]),
            minor: u16::from_le_bytes([b[6], b[7]]),
            sections: u16::from_le_bytes([b[12], b[13]]),
            row_size: b[14],
        };
        if !matches!(header.row_size, 16 | 24) {
            return Err(error(
                "module header",
                format!(
                    "rows of {} bytes (version {}.{}): cdac knows 24 (.NET 10) and 16 (.NET 11)",
                    header.row_size, header.major, header.minor
                ),
            ));
        }
        Ok(header)
    }

    /// Bytes the header and its rows take.
    pub fn total_size(&self) -> usize {
        HEADER_SIZE + usize::from(self.sections) * usize::from(self.row_size)
    }

    /// Decodes the rows of `bytes` (the header and its rows, [`Self::total_size`] bytes).
    pub fn rows(&self, bytes: &[u8]) -> Result<Vec<Section>, AotFormatError> {
        let size = usize::from(self.row_size);
        let rows = bytes
            .get(HEADER_SIZE..self.total_size())
            .ok_or_else(|| error("module header", "its rows are cut short"))?;
        if !matches!(size, 16 | 24) {
            return Err(error(
                "module header",
                format!("rows of {size} bytes (16 or 24 expected)"),
            ));
        }
        // Every offset read below lies inside a row of 16 or 24 bytes.
        let u32_at = |r: &[u8], o: usize| super::le_u32(r, o).unwrap_or_default();
        let u64_at = |r: &[u8], o: usize| super::le_u64(r, o).unwrap_or_default();
        Ok(rows
            .chunks_exact(size)
            .map(|r| {
                let id = u32_at(r, 0);
                let start = u64_at(r, 8);
                let length = if size == 24 {
                    if u32_at(r, 4) & 1 != 0 {
                        u64_at(r, 16).saturating_sub(start)
                    } else {
                        8
                    }
                } else {
                    u64::from(u32_at(r, 4))
                };
                Section { id, start, length }
            })
            .collect())
    }
}

/// One section of the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// Its id (blobs: 300 + blob number).
    pub id: u32,
    /// Where it starts (an address of the loaded image).
    pub start: u64,
    /// Its length in bytes.
    pub length: u64,
}

/// The section of blob `blob` among `sections`.
pub fn blob(sections: &[Section], blob: u32) -> Option<Section> {
    sections.iter().copied().find(|s| s.id == BLOB_BASE + blob)
}

/// Blob numbers the stack-trace naming reads.
pub mod blobs {
    /// NativeFormat metadata.
    pub const METADATA: u32 = 13;
    /// Method start → owning type, name, signature.
    pub const STACK_TRACE_MAP: u32 = 27;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(major: u16, rows: &[&[u8]], row_size: u8) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(SIGNATURE.to_le_bytes());
        b.extend(major.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend((rows.len() as u16).to_le_bytes());
        b.push(row_size);
        b.push(1);
        for r in rows {
            b.extend_from_slice(r);
        }
        b
    }

    #[test]
    fn rows_of_net10_and_net11_give_the_same_sections() {
        let mut r10 = Vec::new();
        r10.extend(313u32.to_le_bytes());
        r10.extend(1u32.to_le_bytes());
        r10.extend(0x1000u64.to_le_bytes());
        r10.extend(0x1400u64.to_le_bytes());
        let b10 = header(16, &[&r10], 24);
        let h = ModuleHeader::parse(&b10).unwrap();
        let s10 = h.rows(&b10).unwrap();

        let mut r11 = Vec::new();
        r11.extend(313u32.to_le_bytes());
        r11.extend(0x400u32.to_le_bytes());
        r11.extend(0x1000u64.to_le_bytes());
        let b11 = header(26, &[&r11], 16);
        let s11 = ModuleHeader::parse(&b11).unwrap().rows(&b11).unwrap();
        assert_eq!(s10, s11);
        assert_eq!(blob(&s10, blobs::METADATA).unwrap().length, 0x400);
        assert!(blob(&s10, blobs::STACK_TRACE_MAP).is_none());

        let mut bad = b10.clone();
        bad[14] = 20;
        assert!(ModuleHeader::parse(&bad)
            .unwrap_err()
            .to_string()
            .contains("20 bytes"));
        assert!(ModuleHeader::parse(&b10[..20])
            .unwrap()
            .rows(&b10[..20])
            .is_err());
        // A header built by hand with a row size parse refuses: an error, not a panic.
        let odd = ModuleHeader { row_size: 8, ..h };
        assert!(odd.rows(&b10).unwrap_err().to_string().contains("8 bytes"));
    }
}
