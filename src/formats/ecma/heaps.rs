//! The `#Strings`, `#Blob`, `#GUID` and `#US` heaps (ECMA-335 II.24.2.3 - II.24.2.5).
//! A missing heap behaves as an empty one: only index 0 (the empty entry) is valid.

use std::borrow::Cow;

use super::error::{Heap, MetadataError, Result};
use crate::formats::cursor::Cursor;

/// Longest `#Strings` entry accepted (identifiers; real ones are far shorter).
pub const MAX_STRING_LENGTH: usize = 64 * 1024;

/// Index into `#Strings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct StringIndex(pub u32);
/// Index into `#Blob`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct BlobIndex(pub u32);
/// 1-based index into `#GUID` (0: no GUID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct GuidIndex(pub u32);

/// The `#Strings` heap: NUL-terminated UTF-8 identifiers.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringsHeap<'a>(pub &'a [u8]);

impl<'a> StringsHeap<'a> {
    /// The bytes of the entry at `index`, without its NUL.
    pub fn get_bytes(&self, index: StringIndex) -> Result<&'a [u8]> {
        let i = index.0 as usize;
        if i == 0 && self.0.is_empty() {
            return Ok(&[]);
        }
        let rest = self.0.get(i..).filter(|r| !r.is_empty()).ok_or(
            MetadataError::HeapIndexOutOfBounds {
                heap: Heap::Strings,
                index: index.0,
                len: self.0.len(),
            },
        )?;
        let window = &rest[..rest.len().min(MAX_STRING_LENGTH + 1)];
        let nul = window
            .iter()
            .position(|&b| b == 0)
            .ok_or(MetadataError::StringTooLong {
                index: index.0,
                max: MAX_STRING_LENGTH,
            })?;
        Ok(&rest[..nul])
    }

    /// The entry at `index` as UTF-8.
    pub fn get(&self, index: StringIndex) -> Result<&'a str> {
        std::str::from_utf8(self.get_bytes(index)?)
            .map_err(|_| MetadataError::InvalidUtf8 { index: index.0 })
    }

    /// The entry at `index`, with invalid UTF-8 replaced (names are printed this way).
    pub fn get_lossy(&self, index: StringIndex) -> Result<Cow<'a, str>> {
        Ok(String::from_utf8_lossy(self.get_bytes(index)?))
    }
}

/// Reads a length-prefixed entry of `#Blob` or `#US`.
fn prefixed(heap: Heap, data: &[u8], index: u32) -> Result<&[u8]> {
    let i = index as usize;
    if i == 0 && data.is_empty() {
        return Ok(&[]);
    }
    if i >= data.len() {
        return Err(MetadataError::HeapIndexOutOfBounds {
            heap,
            index,
            len: data.len(),
        });
    }
    let mut c = Cursor::new(data).at(i);
    let length = c
        .read_compressed_u32("blob length")
        .ok()
        .flatten()
        .ok_or(MetadataError::BadBlobLength { heap, index })?;
    c.read_bytes(length as usize, "blob")
        .map_err(|_| MetadataError::BlobOverrun {
            heap,
            index,
            length,
            len: data.len(),
        })
}

/// The `#Blob` heap: length-prefixed byte strings (signatures, constants, ...).
#[derive(Debug, Clone, Copy, Default)]
pub struct BlobHeap<'a>(pub &'a [u8]);

impl<'a> BlobHeap<'a> {
    /// The blob at `index`, without its length prefix.
    pub fn get(&self, index: BlobIndex) -> Result<&'a [u8]> {
        prefixed(Heap::Blob, self.0, index.0)
    }
}

/// The `#GUID` heap: 16-byte GUIDs, indexed from 1.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuidHeap<'a>(pub &'a [u8]);

impl GuidHeap<'_> {
    /// The GUID's 16 bytes as stored; `None` for index 0.
    pub fn get(&self, index: GuidIndex) -> Result<Option<[u8; 16]>> {
        if index.0 == 0 {
            return Ok(None);
        }
        let start = (index.0 as usize - 1).saturating_mul(16);
        let g = Cursor::new(self.0)
            .at(start)
            .read_array::<16>("GUID")
            .map_err(|_| MetadataError::HeapIndexOutOfBounds {
                heap: Heap::Guid,
                index: index.0,
                len: self.0.len(),
            })?;
        Ok(Some(g))
    }
}

/// The `#US` heap: user strings (`ldstr` literals), UTF-16 with a trailing flag byte.
#[derive(Debug, Clone, Copy, Default)]
pub struct UserStringHeap<'a>(pub &'a [u8]);

impl UserStringHeap<'_> {
    /// The string at `index` (the offset part of an `0x70` token).
    pub fn get(&self, index: u32) -> Result<String> {
        let bytes = prefixed(Heap::UserString, self.0, index)?;
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        Ok(String::from_utf16_lossy(&units))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings() {
        let h = StringsHeap(b"\0Foo\0Bar\0\xff\0noend");
        assert_eq!(h.get(StringIndex(0)).unwrap(), "");
        assert_eq!(h.get(StringIndex(1)).unwrap(), "Foo");
        assert_eq!(h.get(StringIndex(2)).unwrap(), "oo");
        assert_eq!(h.get(StringIndex(5)).unwrap(), "Bar");
        assert!(matches!(
            h.get(StringIndex(9)),
            Err(MetadataError::InvalidUtf8 { index: 9 })
        ));
        assert_eq!(h.get_lossy(StringIndex(9)).unwrap(), "\u{fffd}");
        assert!(matches!(
            h.get(StringIndex(11)),
            Err(MetadataError::StringTooLong { .. })
        ));
        assert!(matches!(
            h.get(StringIndex(100)),
            Err(MetadataError::HeapIndexOutOfBounds { .. })
        ));
        assert_eq!(StringsHeap(b"").get(StringIndex(0)).unwrap(), "");
    }

    #[test]
    fn blobs_guids_user_strings() {
        let b = BlobHeap(&[0, 3, 1, 2, 3, 0x80, 0x02, 9, 9, 5, 1]);
        assert_eq!(b.get(BlobIndex(0)).unwrap(), &[] as &[u8]);
        assert_eq!(b.get(BlobIndex(1)).unwrap(), &[1, 2, 3]);
        assert_eq!(b.get(BlobIndex(5)).unwrap(), &[9, 9]);
        assert!(matches!(
            b.get(BlobIndex(9)),
            Err(MetadataError::BlobOverrun { .. })
        ));
        let g = GuidHeap(&[7u8; 16]);
        assert_eq!(g.get(GuidIndex(0)).unwrap(), None);
        assert_eq!(g.get(GuidIndex(1)).unwrap(), Some([7u8; 16]));
        assert!(g.get(GuidIndex(2)).is_err());
        let us = UserStringHeap(&[0, 5, b'h', 0, b'i', 0, 0]);
        assert_eq!(us.get(1).unwrap(), "hi");
    }
}
