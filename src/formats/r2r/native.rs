//! The Native Format primitives ReadyToRun sections use, over a byte slice (the image file):
//! variable-length integers, relative offsets, `NativeArray` (MethodDefEntryPoints) and
//! `NativeHashtable` (InstanceMethodEntryPoints). Every read is bounds-checked; a bad
//! encoding is an [`R2rError::Native`].

use super::R2rError;

/// Most entries enumerated from one hashtable (a damaged table cannot loop for ever).
pub const MAX_HASHTABLE_ENTRIES: usize = 4 << 20;

fn bad(what: &'static str, offset: usize) -> R2rError {
    R2rError::Native { what, offset }
}

/// The bytes of a Native Format section, wherever they are: a slice of an image file, or
/// an image in target memory. The decoders below are written once over this.
pub trait NativeBytes {
    /// What a failed read or a bad encoding becomes.
    type Error;
    /// The byte at `offset` (an error past the section's end).
    fn byte(&self, offset: u64) -> Result<u8, Self::Error>;
    /// A bad encoding at `offset`.
    fn corrupt(&self, offset: u64, what: &'static str) -> Self::Error;
}

impl NativeBytes for [u8] {
    type Error = R2rError;

    fn byte(&self, offset: u64) -> Result<u8, R2rError> {
        usize::try_from(offset)
            .ok()
            .and_then(|i| self.get(i).copied())
            .ok_or(bad("read past the section's end", offset as usize))
    }

    fn corrupt(&self, offset: u64, what: &'static str) -> R2rError {
        bad(what, usize::try_from(offset).unwrap_or(usize::MAX))
    }
}

/// Reads a Native Format unsigned integer at `off` of any [`NativeBytes`]: (value, offset
/// after it). The low bits of the first byte give the length: `…0` 1 byte, `…01` 2, `…011`
/// 3, `…0111` 4, `…01111` 5 (the value is then the next 4 bytes).
pub fn read_unsigned<B: NativeBytes + ?Sized>(b: &B, off: u64) -> Result<(u32, u64), B::Error> {
    // Offsets saturate: one past the end of the address space is past every section.
    let at = |i: u64| -> Result<u32, B::Error> { Ok(u32::from(b.byte(off.saturating_add(i))?)) };
    let first = at(0)?;
    Ok(if first & 1 == 0 {
        (first >> 1, off.saturating_add(1))
    } else if first & 2 == 0 {
        ((first >> 2) | (at(1)? << 6), off.saturating_add(2))
    } else if first & 4 == 0 {
        (
            (first >> 3) | (at(1)? << 5) | (at(2)? << 13),
            off.saturating_add(3),
        )
    } else if first & 8 == 0 {
        (
            (first >> 4) | (at(1)? << 4) | (at(2)? << 12) | (at(3)? << 20),
            off.saturating_add(4),
        )
    } else if first & 16 == 0 {
        (
            at(1)? | (at(2)? << 8) | (at(3)? << 16) | (at(4)? << 24),
            off.saturating_add(5),
        )
    } else {
        return Err(b.corrupt(off, "integer with an unknown length prefix"));
    })
}

/// Element `index` of the `NativeArray` at `array` in any [`NativeBytes`]: the offset of
/// its data, or `None` when the array has no element there.
pub fn read_array_element<B: NativeBytes + ?Sized>(
    b: &B,
    array: u64,
    index: u32,
) -> Result<Option<u64>, B::Error> {
    let (header, base) = read_unsigned(b, array)?;
    let entry_size: u64 = match header & 3 {
        0 => 1,
        1 => 2,
        2 => 4,
        _ => return Err(b.corrupt(array, "array with an unknown entry size")),
    };
    if index >= header >> 2 {
        return Ok(None);
    }
    // One root offset per block of 16 elements, then a 4-level tree inside the block.
    let slot = base.saturating_add(entry_size * u64::from(index / 16));
    let mut block = 0u64;
    for k in 0..entry_size {
        block |= u64::from(b.byte(slot.saturating_add(k))?) << (8 * k);
    }
    let mut offset = base.saturating_add(block);
    for bit in [8u32, 4, 2, 1] {
        let (v, next) = read_unsigned(b, offset)?;
        if index & bit != 0 {
            if v & 2 != 0 {
                offset = offset.saturating_add(u64::from(v >> 2));
                continue;
            }
        } else if v & 1 != 0 {
            offset = next;
            continue;
        }
        // A leaf: present only if it is this element's.
        if v & 3 == 0 && (v >> 2) == (index & 15) {
            return Ok(Some(next));
        }
        return Ok(None);
    }
    // Four levels descended: the element is here.
    Ok(Some(offset))
}

/// Reads a Native Format unsigned integer at `off`: (value, offset after it).
pub fn decode_unsigned(buf: &[u8], off: usize) -> Result<(u32, usize), R2rError> {
    let (value, next) = read_unsigned(buf, off as u64)?;
    Ok((value, next as usize))
}

/// Reads a Native Format signed integer at `off`: (value, offset after it).
pub fn decode_signed(buf: &[u8], off: usize) -> Result<(i32, usize), R2rError> {
    let (raw, next) = decode_unsigned(buf, off)?;
    // The unsigned decoding leaves the value's bits in place; sign-extend from the width
    // the prefix gave (7, 14, 21, 28 or 32 bits).
    let bits = match next - off {
        1 => 7,
        2 => 14,
        3 => 21,
        4 => 28,
        _ => 32,
    };
    let shift = 32 - bits;
    Ok((((raw << shift) as i32) >> shift, next))
}

/// The offset a relative offset at `off` points to: (target, offset after the delta).
pub fn relative_offset(buf: &[u8], off: usize) -> Result<(usize, usize), R2rError> {
    let (delta, next) = decode_signed(buf, off)?;
    let target = (off as i64) + i64::from(delta);
    if target < 0 || target as usize >= buf.len() {
        return Err(bad("relative offset outside the section", off));
    }
    Ok((target as usize, next))
}

/// A `NativeArray` at the start of `buf`: element `index`'s offset in `buf`, or `None`
/// when the array has no element there.
pub fn array_get(buf: &[u8], index: u32) -> Result<Option<usize>, R2rError> {
    Ok(read_array_element(buf, 0, index)?.map(|o| o as usize))
}

/// Every entry of the `NativeHashtable` at `start` in `buf`: the offsets of the entries'
/// data, bucket by bucket.
pub fn hashtable_entries(buf: &[u8], start: usize) -> Result<Vec<usize>, R2rError> {
    let header = *buf.get(start).ok_or(bad("hashtable past the end", start))?;
    let base = start + 1;
    let shift = u32::from(header >> 2);
    if shift > 24 {
        return Err(bad("hashtable with too many buckets", start));
    }
    let entry_size = match header & 3 {
        0 => 1usize,
        1 => 2,
        2 => 4,
        _ => return Err(bad("hashtable with an unknown entry size", start)),
    };
    let buckets = 1usize << shift;
    let bucket_bound = |i: usize| -> Result<usize, R2rError> {
        let at = base + i * entry_size;
        let mut v = 0usize;
        for k in 0..entry_size {
            let byte = *buf
                .get(at + k)
                .ok_or(bad("bucket table past the end", at))?;
            v |= usize::from(byte) << (8 * k);
        }
        Ok(base + v)
    };
    let mut out = Vec::new();
    for bucket in 0..buckets {
        let (mut at, end) = (bucket_bound(bucket)?, bucket_bound(bucket + 1)?);
        if end > buf.len() || at > end {
            return Err(bad("bucket outside the section", at));
        }
        while at < end {
            // One byte of the entry's hash code, then a relative offset to its data.
            let (target, next) = relative_offset(buf, at + 1)?;
            out.push(target);
            if out.len() > MAX_HASHTABLE_ENTRIES {
                return Err(bad("hashtable with too many entries", start));
            }
            at = next;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes `v` the way the format's writer does (shortest form).
    fn enc(v: u32) -> Vec<u8> {
        if v < 128 {
            vec![(v << 1) as u8]
        } else if v < 1 << 14 {
            vec![((v << 2) | 1) as u8, (v >> 6) as u8]
        } else if v < 1 << 21 {
            vec![((v << 3) | 3) as u8, (v >> 5) as u8, (v >> 13) as u8]
        } else if v < 1 << 28 {
            vec![
                ((v << 4) | 7) as u8,
                (v >> 4) as u8,
                (v >> 12) as u8,
                (v >> 20) as u8,
            ]
        } else {
            let mut b = vec![0x0f];
            b.extend(v.to_le_bytes());
            b
        }
    }

    #[test]
    fn unsigned_round_trip_at_every_width() {
        for v in [
            0,
            1,
            127,
            128,
            16383,
            16384,
            (1 << 21) - 1,
            1 << 21,
            (1 << 28) - 1,
            1 << 28,
            u32::MAX,
        ] {
            let b = enc(v);
            assert_eq!(decode_unsigned(&b, 0).ok(), Some((v, b.len())), "{v}");
            // Truncated: an error, never a panic.
            if b.len() > 1 {
                assert!(decode_unsigned(&b[..b.len() - 1], 0).is_err());
            }
        }
        assert!(decode_unsigned(&[0x1f], 0).is_err());
        assert!(decode_unsigned(&[], 0).is_err());
    }

    #[test]
    fn signed_values_sign_extend() {
        // -1 in one byte: 0x7f << 1; -100 in two bytes.
        assert_eq!(decode_signed(&[0xfe], 0).ok(), Some((-1, 1)));
        let v: i32 = -100;
        let raw = ((v as u32) << 2) | 1;
        assert_eq!(
            decode_signed(&[raw as u8, (v >> 6) as u8], 0).ok(),
            Some((-100, 2))
        );
    }

    #[test]
    fn hashtable_rejects_damage() {
        // One bucket (shift 0), 1-byte bounds [0, 3): an entry whose offset points back
        // before the section.
        let buf = [0x00, 2, 5, 0xaa, 0x81];
        assert!(hashtable_entries(&buf, 0).is_err());
        // Bucket bound past the end.
        assert!(hashtable_entries(&[0x00, 0, 200], 0).is_err());
        // Unknown entry size.
        assert!(hashtable_entries(&[0x03], 0).is_err());
    }
}
