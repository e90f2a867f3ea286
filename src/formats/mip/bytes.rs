//! The MIP reader over the shared cursor (fields in order, offsets in the whole file,
//! a read past the end a [`MipError::Truncated`]), with the checks MIP fields need, and
//! the matching writers.

use super::error::{MipError, Result};
use crate::formats::cursor::Cursor;

/// Reads fields in order from `data`, starting at an absolute offset, so that errors name
/// offsets in the whole file.
pub(crate) struct Reader<'a> {
    c: Cursor<'a>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8], pos: usize) -> Self {
        Reader {
            c: Cursor::new(data).at(pos),
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.c.position()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.c.remaining()
    }

    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        Ok(self.c.read_bytes(n, what)?)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.c.read_u8(what)?)
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(self.c.read_u16(what)?)
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(self.c.read_u32(what)?)
    }

    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32> {
        Ok(self.c.read_i32(what)?)
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(self.c.read_u64(what)?)
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64> {
        Ok(self.c.read_i64(what)?)
    }

    /// The error for `what` needing `needed` bytes at the position, when the input ends
    /// part-way through something the reader does not read itself (padding).
    pub(crate) fn truncated(&self, what: &'static str, needed: usize) -> MipError {
        MipError::Truncated(self.c.truncation(what, needed as u64))
    }

    /// A boolean byte, which must be 0 or 1.
    pub(crate) fn flag(&mut self, what: &'static str) -> Result<bool> {
        let offset = self.pos();
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(MipError::BadFlag {
                what,
                offset,
                value,
            }),
        }
    }

    /// Checks that `count` elements of `size` bytes fit in what is left, before anything
    /// is allocated for them; `at` is where the count was read.
    pub(crate) fn check_count(
        &self,
        count: u64,
        size: usize,
        at: usize,
        what: &'static str,
    ) -> Result<usize> {
        let needed = u128::from(count) * size as u128;
        if needed > self.remaining() as u128 {
            return Err(MipError::CountPastEnd {
                what,
                offset: at,
                count,
                needed,
                available: self.remaining(),
            });
        }
        // Fits in the input, so it fits in usize.
        Ok(count as usize)
    }

    /// Skips zero bytes up to the next multiple of `align` (a file offset). With
    /// `allow_eof`, the input may end inside the padding.
    pub(crate) fn zero_pad(
        &mut self,
        align: usize,
        allow_eof: bool,
        what: &'static str,
    ) -> Result<()> {
        let target = self.pos().next_multiple_of(align);
        while self.pos() < target {
            if allow_eof && self.remaining() == 0 {
                return Ok(());
            }
            let offset = self.pos();
            let value = self.u8(what)?;
            if value != 0 {
                return Err(MipError::BadPadding {
                    what,
                    offset,
                    value,
                });
            }
        }
        Ok(())
    }

    /// A UTF-8 name of `len` bytes whose length field was read at `at`.
    pub(crate) fn name(&mut self, len: u64, at: usize, what: &'static str) -> Result<String> {
        if len > self.remaining() as u64 {
            return Err(MipError::NameLengthPastEnd {
                what,
                offset: at,
                length: len,
                available: self.remaining(),
            });
        }
        let start = self.pos();
        let bytes = self.take(len as usize, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| MipError::NameNotUtf8 {
            what,
            offset: start,
        })
    }
}

/// Appends little-endian fields; the counterpart of [`Reader`].
pub(crate) trait PutLe {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_i32(&mut self, v: i32);
    fn put_u64(&mut self, v: u64);
    fn put_i64(&mut self, v: i64);
    /// Zero bytes up to the next multiple of `align` of the length.
    fn pad_to(&mut self, align: usize);
}

impl PutLe for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i32(&mut self, v: i32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn pad_to(&mut self, align: usize) {
        let target = self.len().next_multiple_of(align);
        self.resize(target, 0);
    }
}

/// `value` as a `u32` field, or [`MipError::Unwritable`] naming `what`.
pub(crate) fn fit_u32(value: usize, what: &'static str) -> Result<u32> {
    u32::try_from(value).map_err(|_| MipError::Unwritable {
        what,
        detail: format!("{value} does not fit in 32 bits"),
    })
}
