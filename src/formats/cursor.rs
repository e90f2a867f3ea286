//! The one bounds-checked byte cursor of the offline formats, and the one error for input
//! that ends before what it says ([`Truncation`]).
//!
//! Every format's error enum wraps [`Truncation`] in its `Truncated` variant
//! (`MetadataError::Truncated`, `SignatureError::Truncated`, `PdbError::Truncated`,
//! `MipError::Truncated`, `PerfDataError::Truncated`, `R2rError::Truncated`, r2r's
//! `SigError::Truncated`), so an input that ends early is told the same way in every
//! format: what was being read, at which offset, how many bytes it needs and how many there
//! are. Where a format has a more telling error for a short read (a heap index out of
//! bounds, a blob that overruns its heap), it maps the [`Truncation`] into that instead.
//!
//! A `Cursor` (crate-internal) reads fields in order or at any offset (`Cursor::at`), in little- or
//! big-endian order, and never panics: a read past the end is a [`Truncation`] and leaves
//! the position where it was.

/// The input ends before what it says: `what` needs `needed` bytes at `offset`, and only
/// `available` bytes are there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{what} at offset {offset:#x}: needs {needed} byte(s), only {available} left")]
pub struct Truncation {
    /// What was being read.
    pub what: &'static str,
    /// Where it starts, in the input the format names offsets in (the whole file, or the
    /// stream, section or blob the format's docs say).
    pub offset: u64,
    /// Bytes it needs.
    pub needed: u64,
    /// Bytes the input has from `offset` on (0 when `offset` is past its end).
    pub available: u64,
}

/// Byte order of the integers a [`Cursor`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endian {
    /// Least significant byte first.
    Little,
    /// Most significant byte first.
    Big,
}

/// A bounds-checked reader over a byte slice: a position, a byte order, and, for error
/// offsets, where the slice starts in the input (`base`: 0, or where [`Cursor::split`]
/// cut it from its parent).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
    endian: Endian,
}

impl<'a> Cursor<'a> {
    /// A little-endian cursor at the start of `data`; offsets in errors count from there.
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Cursor {
            data,
            pos: 0,
            base: 0,
            endian: Endian::Little,
        }
    }

    /// The same cursor reading integers in `endian` order.
    pub(crate) fn with_endian(self, endian: Endian) -> Self {
        Cursor { endian, ..self }
    }

    /// A cursor over the same data at `offset` (random access; an offset past the end is
    /// allowed, and every read there is a [`Truncation`]).
    pub(crate) fn at(&self, offset: usize) -> Self {
        Cursor {
            pos: offset,
            ..*self
        }
    }

    /// Position of the next byte, from the start of the data.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Offset of the next byte in the input (position plus base), as errors name it.
    pub(crate) fn offset(&self) -> u64 {
        self.base.saturating_add(self.pos as u64)
    }

    /// Bytes left after the position.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    /// The bytes left after the position (empty past the end).
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }

    /// The next byte, without moving.
    pub(crate) fn peek_u8(&self) -> Option<u8> {
        self.data.get(self.pos).copied()
    }

    /// The error for `what` needing `needed` bytes at the position.
    pub(crate) fn truncation(&self, what: &'static str, needed: u64) -> Truncation {
        Truncation {
            what,
            offset: self.offset(),
            needed,
            available: self.remaining() as u64,
        }
    }

    /// The next `n` bytes, as a slice of the data.
    pub(crate) fn read_bytes(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&'a [u8], Truncation> {
        let bytes = self
            .pos
            .checked_add(n)
            .and_then(|end| self.data.get(self.pos..end))
            .ok_or_else(|| self.truncation(what, n as u64))?;
        self.pos += n;
        Ok(bytes)
    }

    /// A cursor over the next `n` bytes (same byte order, offsets still those of the
    /// input); this cursor moves past them.
    pub(crate) fn split(&mut self, n: usize, what: &'static str) -> Result<Cursor<'a>, Truncation> {
        let base = self.offset();
        let data = self.read_bytes(n, what)?;
        Ok(Cursor {
            data,
            pos: 0,
            base,
            endian: self.endian,
        })
    }

    /// Moves past `n` bytes (a `u64`, as lengths read from a file are).
    pub(crate) fn skip(&mut self, n: u64, what: &'static str) -> Result<(), Truncation> {
        if n > self.remaining() as u64 {
            return Err(self.truncation(what, n));
        }
        self.pos += n as usize;
        Ok(())
    }

    /// The next `N` bytes, as an array.
    pub(crate) fn read_array<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> Result<[u8; N], Truncation> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.read_bytes(N, what)?);
        Ok(a)
    }

    /// An unsigned integer of `width` bytes in the cursor's byte order (a width over 8
    /// keeps the low 64 bits).
    pub(crate) fn read_uint(
        &mut self,
        width: usize,
        what: &'static str,
    ) -> Result<u64, Truncation> {
        let bytes = self.read_bytes(width, what)?;
        let push = |acc: u64, &b: &u8| (acc << 8) | u64::from(b);
        Ok(match self.endian {
            Endian::Little => bytes.iter().rev().fold(0, push),
            Endian::Big => bytes.iter().fold(0, push),
        })
    }

    /// A byte.
    pub(crate) fn read_u8(&mut self, what: &'static str) -> Result<u8, Truncation> {
        Ok(self.read_array::<1>(what)?[0])
    }

    /// A `u16` in the cursor's byte order.
    pub(crate) fn read_u16(&mut self, what: &'static str) -> Result<u16, Truncation> {
        let b = self.read_array(what)?;
        Ok(match self.endian {
            Endian::Little => u16::from_le_bytes(b),
            Endian::Big => u16::from_be_bytes(b),
        })
    }

    /// A `u32` in the cursor's byte order.
    pub(crate) fn read_u32(&mut self, what: &'static str) -> Result<u32, Truncation> {
        let b = self.read_array(what)?;
        Ok(match self.endian {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        })
    }

    /// A `u64` in the cursor's byte order.
    pub(crate) fn read_u64(&mut self, what: &'static str) -> Result<u64, Truncation> {
        let b = self.read_array(what)?;
        Ok(match self.endian {
            Endian::Little => u64::from_le_bytes(b),
            Endian::Big => u64::from_be_bytes(b),
        })
    }

    /// An `i32` in the cursor's byte order.
    pub(crate) fn read_i32(&mut self, what: &'static str) -> Result<i32, Truncation> {
        Ok(self.read_u32(what)? as i32)
    }

    /// An `i64` in the cursor's byte order.
    pub(crate) fn read_i64(&mut self, what: &'static str) -> Result<i64, Truncation> {
        Ok(self.read_u64(what)? as i64)
    }

    /// An ECMA-335 compressed unsigned integer (II.23.2): 1, 2 or 4 bytes, the length told
    /// by the first byte's top bits. `Ok(None)`, without moving, when the first byte starts
    /// with `111` (no valid encoding).
    pub(crate) fn read_compressed_u32(
        &mut self,
        what: &'static str,
    ) -> Result<Option<u32>, Truncation> {
        let Some(b0) = self.peek_u8() else {
            return Err(self.truncation(what, 1));
        };
        let (len, mask) = match b0 {
            _ if b0 & 0x80 == 0 => (1, 0x7F),
            _ if b0 & 0xC0 == 0x80 => (2, 0x3FFF),
            _ if b0 & 0xE0 == 0xC0 => (4, 0x1FFF_FFFF),
            _ => return Ok(None),
        };
        // Big-endian whatever the cursor's order, with the length bits masked off.
        let bytes = self.read_bytes(len, what)?;
        let value = bytes.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
        Ok(Some(value & mask))
    }

    /// An ECMA-335 compressed signed integer (II.23.2: the sign is the rotated-in low bit),
    /// as array lower bounds use them. `Ok(None)` as for [`Cursor::read_compressed_u32`].
    pub(crate) fn read_compressed_i32(
        &mut self,
        what: &'static str,
    ) -> Result<Option<i32>, Truncation> {
        let start = self.pos;
        let Some(raw) = self.read_compressed_u32(what)? else {
            return Ok(None);
        };
        let magnitude = raw >> 1;
        if raw & 1 == 0 {
            return Ok(Some(magnitude as i32));
        }
        // Sign-extend from the encoding's width: 6, 13 or 28 value bits.
        let sign_bits: u32 = match self.pos - start {
            1 => 0xFFFF_FFC0,
            2 => 0xFFFF_E000,
            _ => 0xF000_0000,
        };
        Ok(Some((magnitude | sign_bits) as i32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_either_byte_order() {
        let data = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let mut le = Cursor::new(&data);
        assert_eq!(le.read_u8("a").unwrap(), 1);
        assert_eq!(le.read_u16("b").unwrap(), 0x0302);
        assert_eq!(le.read_u32("c").unwrap(), 0x0706_0504);
        assert_eq!(le.position(), 7);
        assert_eq!(le.remaining(), 2);
        let mut be = Cursor::new(&data).with_endian(Endian::Big);
        assert_eq!(be.read_u64("d").unwrap(), 0x0102_0304_0506_0708);
        assert_eq!(
            Cursor::new(&data).at(1).read_uint(3, "e").unwrap(),
            0x04_0302
        );
        let mut be = Cursor::new(&data).with_endian(Endian::Big).at(1);
        assert_eq!(be.read_uint(3, "e").unwrap(), 0x02_0304);
        assert_eq!(be.read_i32("f").unwrap(), 0x0506_0708);
        assert_eq!(Cursor::new(&[0xff; 8]).read_i64("g").unwrap(), -1);
    }

    #[test]
    fn a_read_past_the_end_names_what_where_and_how_much() {
        let data = [0u8; 6];
        let mut c = Cursor::new(&data).at(4);
        let e = c.read_u32("table header").unwrap_err();
        assert_eq!(
            e,
            Truncation {
                what: "table header",
                offset: 4,
                needed: 4,
                available: 2
            }
        );
        assert_eq!(
            e.to_string(),
            "table header at offset 0x4: needs 4 byte(s), only 2 left"
        );
        // The failed read did not move the cursor.
        assert_eq!(c.position(), 4);
        // Past the end: nothing available, no panic.
        let e = Cursor::new(&data).at(100).read_u8("x").unwrap_err();
        assert_eq!((e.offset, e.needed, e.available), (100, 1, 0));
        let e = Cursor::new(&data).read_bytes(usize::MAX, "y").unwrap_err();
        assert_eq!((e.needed, e.available), (usize::MAX as u64, 6));
        let e = Cursor::new(&data).skip(u64::MAX, "z").unwrap_err();
        assert_eq!((e.needed, e.available), (u64::MAX, 6));
    }

    #[test]
    fn split_cursors_name_offsets_of_the_input() {
        let data = [0u8; 0x110];
        let mut c = Cursor::new(&data).at(0x100).split(0x10, "section").unwrap();
        c.skip(4, "head").unwrap();
        let mut inner = c.split(8, "record").unwrap();
        assert_eq!(c.position(), 12);
        assert_eq!(inner.read_bytes(6, "a").unwrap().len(), 6);
        let e = inner.read_u32("b").unwrap_err();
        assert_eq!((e.offset, e.needed, e.available), (0x10a, 4, 2));
        assert_eq!(c.split(5, "next").unwrap_err().offset, 0x10c);
        assert_eq!(inner.rest().len(), 2);
        assert_eq!(inner.peek_u8(), Some(0));
    }

    #[test]
    fn compressed_unsigned_examples_from_the_standard() {
        let read = |b: &[u8]| {
            let mut c = Cursor::new(b);
            c.read_compressed_u32("n")
                .map(|v| v.map(|v| (v, c.position())))
        };
        assert_eq!(read(&[0x03]), Ok(Some((0x03, 1))));
        assert_eq!(read(&[0x7F]), Ok(Some((0x7F, 1))));
        assert_eq!(read(&[0x80, 0x80]), Ok(Some((0x80, 2))));
        assert_eq!(read(&[0xAE, 0x57]), Ok(Some((0x2E57, 2))));
        assert_eq!(read(&[0xBF, 0xFF]), Ok(Some((0x3FFF, 2))));
        assert_eq!(read(&[0xC0, 0x00, 0x40, 0x00]), Ok(Some((0x4000, 4))));
        assert_eq!(read(&[0xDF, 0xFF, 0xFF, 0xFF]), Ok(Some((0x1FFF_FFFF, 4))));
        assert_eq!(read(&[0xE0]), Ok(None));
        let cut = read(&[0xC0, 0x00]).unwrap_err();
        assert_eq!((cut.offset, cut.needed, cut.available), (0, 4, 2));
        let empty = read(&[]).unwrap_err();
        assert_eq!((empty.needed, empty.available), (1, 0));
    }

    #[test]
    fn compressed_signed_examples_from_the_standard() {
        let read = |b: &[u8]| Cursor::new(b).read_compressed_i32("n").unwrap();
        assert_eq!(read(&[0x06]), Some(3));
        assert_eq!(read(&[0x7B]), Some(-3));
        assert_eq!(read(&[0x80, 0x80]), Some(64));
        assert_eq!(read(&[0x01]), Some(-64));
        assert_eq!(read(&[0xC0, 0x00, 0x40, 0x00]), Some(8192));
        assert_eq!(read(&[0x80, 0x01]), Some(-8192));
        assert_eq!(read(&[0xDF, 0xFF, 0xFF, 0xFE]), Some(268_435_455));
        assert_eq!(read(&[0xC0, 0x00, 0x00, 0x01]), Some(-268_435_456));
        assert_eq!(read(&[0xF0]), None);
    }
}
