//! ReadyToRun's native format: variable-length integers and the sparse `NativeArray`,
//! read from an image in target memory, bounded to one section.

use crate::contracts::ContractError;
use crate::target::Target;

/// A reader over `[start, end)` of an image; offsets are image-relative (RVAs).
pub struct NativeReader<'t> {
    target: &'t Target,
    base: u64,
    start: u64,
    end: u64,
}

impl<'t> NativeReader<'t> {
    /// Reads the section `[va, va + size)` of the image at `base`.
    pub fn new(target: &'t Target, base: u64, va: u64, size: u64) -> NativeReader<'t> {
        NativeReader {
            target,
            base,
            start: va,
            end: va.saturating_add(size),
        }
    }

    fn corrupt(&self, offset: u64, detail: &str) -> ContractError {
        ContractError::Corrupt {
            what: "ReadyToRun native data",
            addr: self.base.wrapping_add(offset),
            detail: detail.to_string(),
        }
    }

    fn byte(&self, offset: u64) -> Result<u8, ContractError> {
        if offset < self.start || offset >= self.end {
            return Err(self.corrupt(offset, "offset outside its section"));
        }
        Ok(self.target.read_u8(self.base.wrapping_add(offset))?)
    }

    /// Decodes an unsigned integer at `offset`; returns it and the offset after it. The low
    /// bits of the first byte give the length: `…0` 1 byte, `…01` 2, `…011` 3, `…0111` 4,
    /// `…01111` 5 (the value in the next 4 bytes).
    pub fn decode_unsigned(&self, offset: u64) -> Result<(u64, u64), ContractError> {
        let b0 = u64::from(self.byte(offset)?);
        let le = |n: u64| -> Result<u64, ContractError> {
            (0..n).try_fold(0u64, |acc, i| {
                Ok(acc | u64::from(self.byte(offset + i)?) << (8 * i))
            })
        };
        Ok(if b0 & 1 == 0 {
            (b0 >> 1, offset + 1)
        } else if b0 & 2 == 0 {
            (le(2)? >> 2, offset + 2)
        } else if b0 & 4 == 0 {
            (le(3)? >> 3, offset + 3)
        } else if b0 & 8 == 0 {
            (le(4)? >> 4, offset + 4)
        } else if b0 & 16 == 0 {
            ((le(5)? >> 8) & 0xffff_ffff, offset + 5)
        } else {
            return Err(self.corrupt(offset, "invalid integer encoding"));
        })
    }

    /// The data offset of element `index` of the `NativeArray` at `offset`, if present.
    pub fn array_get(&self, offset: u64, index: u64) -> Result<Option<u64>, ContractError> {
        let (header, base_offset) = self.decode_unsigned(offset)?;
        let entry_size = 1u64 << (header & 3);
        if header & 3 == 3 {
            return Err(self.corrupt(offset, "invalid block index entry size"));
        }
        if index >= header >> 2 {
            return Ok(None);
        }
        let slot = base_offset + entry_size * (index / 16);
        let block = (0..entry_size).try_fold(0u64, |acc, i| {
            Ok::<u64, ContractError>(acc | u64::from(self.byte(slot + i)?) << (8 * i))
        })?;
        let mut off = base_offset + block;
        // Each block is a binary tree of depth 4 over the low bits of the index.
        for bit in [8u64, 4, 2, 1] {
            let node = off;
            let (v, next) = self.decode_unsigned(node)?;
            if index & bit != 0 {
                if v & 2 != 0 {
                    off = node + (v >> 2);
                    continue;
                }
            } else if v & 1 != 0 {
                off = next;
                continue;
            }
            // No child that way: a leaf for exactly this index, or nothing.
            if v & 3 == 0 && (v >> 2) == (index & 15) {
                return Ok(Some(next));
            }
            return Ok(None);
        }
        Ok(Some(off))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::builder::MemoryBuilder;
    use crate::target::DataLayout;

    fn reader_over(bytes: &[u8]) -> (Target, u64) {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        let region = b.alloc(bytes.len(), 16);
        region.bytes(0, bytes);
        let base = region.addr;
        (b.into_target(), base)
    }

    #[test]
    fn integers_from_the_format_examples() {
        for (bytes, value) in [
            (&[0x18u8][..], 12u64),
            (&[0xA1, 0x0F], 1000),
            (&[0x03, 0x35, 0x0C], 100_000),
            (&[0x0F, 0x78, 0x56, 0x34, 0x12], 0x1234_5678),
        ] {
            let (t, base) = reader_over(bytes);
            let r = NativeReader::new(&t, base, 0, bytes.len() as u64);
            assert_eq!(r.decode_unsigned(0).unwrap(), (value, bytes.len() as u64));
        }
        let (t, base) = reader_over(&[0x1f, 0, 0, 0, 0]);
        assert!(NativeReader::new(&t, base, 0, 5)
            .decode_unsigned(0)
            .is_err());
        // Reading past the section is an error, not a read of the next section.
        let (t, base) = reader_over(&[0x01, 0x02]);
        assert!(NativeReader::new(&t, base, 0, 1)
            .decode_unsigned(0)
            .is_err());
    }
}
