//! NativeFormat's variable-length integers: the low bits of the first byte say how many
//! bytes follow (0 → 1 byte of 7 bits, 01 → 2 bytes of 14, 011 → 3 of 21, 0111 → 4 of 28,
//! 01111 → a plain u32 after the first byte). Signed values extend the sign of their
//! last byte.

use super::{error, AotFormatError};

/// Decodes the unsigned integer at `pos`; returns it and the position after it.
pub fn unsigned(bytes: &[u8], pos: usize) -> Result<(u32, usize), AotFormatError> {
    decode(bytes, pos, false).map(|(v, p)| (v as u32, p))
}

/// Decodes the signed integer at `pos`; returns it and the position after it.
pub fn signed(bytes: &[u8], pos: usize) -> Result<(i32, usize), AotFormatError> {
    decode(bytes, pos, true).map(|(v, p)| (v as i32, p))
}

fn decode(bytes: &[u8], pos: usize, signed: bool) -> Result<(i64, usize), AotFormatError> {
    let at = |i: usize| {
        bytes
            .get(pos + i)
            .copied()
            .ok_or_else(|| error("NativeFormat integer", format!("ends at {pos}")))
    };
    // The most significant byte carries the sign.
    let top = |b: u8| -> i64 {
        if signed {
            i64::from(b as i8)
        } else {
            i64::from(b)
        }
    };
    let b0 = at(0)?;
    let value = if b0 & 1 == 0 {
        (top(b0) >> 1, 1)
    } else if b0 & 2 == 0 {
        (i64::from(b0 >> 2) | top(at(1)?) << 6, 2)
    } else if b0 & 4 == 0 {
        (
            i64::from(b0 >> 3) | i64::from(at(1)?) << 5 | top(at(2)?) << 13,
            3,
        )
    } else if b0 & 8 == 0 {
        (
            i64::from(b0 >> 4)
                | i64::from(at(1)?) << 4
                | i64::from(at(2)?) << 12
                | top(at(3)?) << 20,
            4,
        )
    } else if b0 & 16 == 0 {
        let raw = [at(1)?, at(2)?, at(3)?, at(4)?];
        let v = if signed {
            i64::from(i32::from_le_bytes(raw))
        } else {
            i64::from(u32::from_le_bytes(raw))
        };
        (v, 5)
    } else {
        return Err(error(
            "NativeFormat integer",
            format!("first byte {b0:#04x} at {pos} announces a 64-bit value"),
        ));
    };
    Ok((value.0, pos + value.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_length_decodes_and_signed_values_extend_their_sign() {
        assert_eq!(unsigned(&[0x54], 0).unwrap(), (42, 1));
        assert_eq!(
            unsigned(&[0x01 | (300 << 2) as u8, (300 >> 6) as u8], 0).unwrap(),
            (300, 2)
        );
        let v = 100_000u32;
        let three = [0x03 | ((v << 3) as u8), (v >> 5) as u8, (v >> 13) as u8];
        assert_eq!(unsigned(&three, 0).unwrap(), (v, 3));
        assert_eq!(
            unsigned(&[0x0f, 0x78, 0x56, 0x34, 0x12], 0).unwrap(),
            (0x1234_5678, 5)
        );
        assert_eq!(signed(&[0xfe], 0).unwrap(), (-1, 1));
        assert_eq!(signed(&[0x0f, 0xff, 0xff, 0xff, 0xff], 0).unwrap(), (-1, 5));
        // -200 in two bytes: low 6 bits in the first, the rest (signed) in the second.
        let v = -200i32;
        let two = [0x01 | (((v as u32) << 2) as u8), ((v >> 6) as i8) as u8];
        assert_eq!(signed(&two, 0).unwrap(), (-200, 2));
        assert!(
            unsigned(&[0x01], 0).is_err(),
            "a truncated integer is an error"
        );
        assert!(unsigned(&[0x1f, 0, 0, 0, 0, 0, 0, 0, 0], 0).is_err());
    }
}
