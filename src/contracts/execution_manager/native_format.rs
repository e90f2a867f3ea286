//! ReadyToRun's native format over an image in target memory, bounded to one section: the
//! decoders are those of [`crate::formats::r2r::native`], which reads image files.

use crate::contracts::ContractError;
use crate::formats::r2r::native;
use crate::memory::Target;

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

    /// Decodes an unsigned integer at `offset`; returns it and the offset after it.
    pub fn decode_unsigned(&self, offset: u64) -> Result<(u64, u64), ContractError> {
        let (value, next) = native::read_unsigned(self, offset)?;
        Ok((value.into(), next))
    }

    /// The data offset of element `index` of the `NativeArray` at `offset`, if present.
    pub fn array_get(&self, offset: u64, index: u64) -> Result<Option<u64>, ContractError> {
        // The format's indices are 32-bit: a larger one is past every array's end.
        match u32::try_from(index) {
            Ok(index) => native::read_array_element(self, offset, index),
            Err(_) => Ok(None),
        }
    }
}

/// The image's section in target memory, for the decoders of [`native`].
impl native::NativeBytes for NativeReader<'_> {
    type Error = ContractError;

    fn byte(&self, offset: u64) -> Result<u8, ContractError> {
        if offset < self.start || offset >= self.end {
            return Err(self.corrupt(offset, "offset outside its section"));
        }
        Ok(self.target.read_u8(self.base.wrapping_add(offset))?)
    }

    fn corrupt(&self, offset: u64, what: &'static str) -> ContractError {
        ContractError::Corrupt {
            what: "ReadyToRun native data",
            addr: self.base.wrapping_add(offset),
            detail: what.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

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
