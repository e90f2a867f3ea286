//! Bounds-checked little-endian reads and the ECMA-335 compressed integers (II.23.2).

use super::error::{MetadataError, Result};

/// `data[offset..offset + n]`, or a [`MetadataError::Truncated`] naming `what`.
pub(crate) fn slice<'a>(
    data: &'a [u8],
    offset: usize,
    n: usize,
    what: &'static str,
) -> Result<&'a [u8]> {
    offset
        .checked_add(n)
        .and_then(|end| data.get(offset..end))
        .ok_or(MetadataError::Truncated {
            what,
            offset,
            needed: n,
            len: data.len(),
        })
}

pub(crate) fn u8_at(data: &[u8], offset: usize, what: &'static str) -> Result<u8> {
    Ok(slice(data, offset, 1, what)?[0])
}

pub(crate) fn u16_at(data: &[u8], offset: usize, what: &'static str) -> Result<u16> {
    let b = slice(data, offset, 2, what)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

pub(crate) fn u32_at(data: &[u8], offset: usize, what: &'static str) -> Result<u32> {
    let b = slice(data, offset, 4, what)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(crate) fn u64_at(data: &[u8], offset: usize, what: &'static str) -> Result<u64> {
    let b = slice(data, offset, 8, what)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_le_bytes(a))
}

/// A little-endian unsigned value of 1, 2, 4 or 8 bytes (the caller has checked the length).
pub(crate) fn le_value(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// Decodes an ECMA-335 compressed unsigned integer at the start of `data`: the value and
/// how many bytes it took (1, 2 or 4). `None` when the bytes run out or the first byte
/// starts with `111` (no valid encoding).
pub fn decompress_u32(data: &[u8]) -> Option<(u32, usize)> {
    let b0 = *data.first()?;
    if b0 & 0x80 == 0 {
        Some((u32::from(b0), 1))
    } else if b0 & 0xC0 == 0x80 {
        let b1 = *data.get(1)?;
        Some(((u32::from(b0 & 0x3F) << 8) | u32::from(b1), 2))
    } else if b0 & 0xE0 == 0xC0 {
        let b = data.get(1..4)?;
        Some((
            (u32::from(b0 & 0x1F) << 24)
                | (u32::from(b[0]) << 16)
                | (u32::from(b[1]) << 8)
                | u32::from(b[2]),
            4,
        ))
    } else {
        None
    }
}

/// Decodes an ECMA-335 compressed signed integer (II.23.2: the sign is the rotated-in
/// low bit), as array lower bounds use them.
pub fn decompress_i32(data: &[u8]) -> Option<(i32, usize)> {
    let (raw, len) = decompress_u32(data)?;
    let negative = raw & 1 != 0;
    let magnitude = raw >> 1;
    let value = if !negative {
        magnitude as i32
    } else {
        // Sign-extend from the encoding's width: 6, 13 or 28 value bits.
        let sign_bits: u32 = match len {
            1 => 0xFFFF_FFC0,
            2 => 0xFFFF_E000,
            _ => 0xF000_0000,
        };
        (magnitude | sign_bits) as i32
    };
    Some((value, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_unsigned_examples_from_the_standard() {
        assert_eq!(decompress_u32(&[0x03]), Some((0x03, 1)));
        assert_eq!(decompress_u32(&[0x7F]), Some((0x7F, 1)));
        assert_eq!(decompress_u32(&[0x80, 0x80]), Some((0x80, 2)));
        assert_eq!(decompress_u32(&[0xAE, 0x57]), Some((0x2E57, 2)));
        assert_eq!(decompress_u32(&[0xBF, 0xFF]), Some((0x3FFF, 2)));
        assert_eq!(decompress_u32(&[0xC0, 0x00, 0x40, 0x00]), Some((0x4000, 4)));
        assert_eq!(
            decompress_u32(&[0xDF, 0xFF, 0xFF, 0xFF]),
            Some((0x1FFF_FFFF, 4))
        );
        assert_eq!(decompress_u32(&[0xE0]), None);
        assert_eq!(decompress_u32(&[0x80]), None);
        assert_eq!(decompress_u32(&[]), None);
    }

    #[test]
    fn compressed_signed_examples_from_the_standard() {
        assert_eq!(decompress_i32(&[0x06]), Some((3, 1)));
        assert_eq!(decompress_i32(&[0x7B]), Some((-3, 1)));
        assert_eq!(decompress_i32(&[0x80, 0x80]), Some((64, 2)));
        assert_eq!(decompress_i32(&[0x01]), Some((-64, 1)));
        assert_eq!(decompress_i32(&[0xC0, 0x00, 0x40, 0x00]), Some((8192, 4)));
        assert_eq!(decompress_i32(&[0x80, 0x01]), Some((-8192, 2)));
        assert_eq!(
            decompress_i32(&[0xDF, 0xFF, 0xFF, 0xFE]),
            Some((268_435_455, 4))
        );
        assert_eq!(
            decompress_i32(&[0xC0, 0x00, 0x00, 0x01]),
            Some((-268_435_456, 4))
        );
    }
}
