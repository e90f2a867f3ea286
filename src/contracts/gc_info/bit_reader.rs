//! The GCInfo bit stream, read lazily from target memory.
//!
//! The runtime writes GC information as a stream of bits packed into pointer-sized words
//! in the target's byte order, the first bit being bit 0 (the least significant bit) of
//! the first word. On a little-endian target this is "bytes in address order, least
//! significant bit first". A stream need not start on a word boundary: the reader aligns
//! its start down to the pointer size and skips the leading bits, as the runtime's reader
//! does, so it reads (and needs readable) the whole words around the stream.
//!
//! Words are fetched on demand, a small aligned chunk at a time, and the reader refuses to
//! go more than a fixed number of bytes past the stream's start, so that a damaged stream
//! cannot make it read without bound.

use crate::contracts::ContractError;
use crate::limits::Limit;
use crate::memory::{decode_unsigned, Endian, Target};

/// Default cap on how far past its start a stream may be read: 1 MiB, far more than the
/// GC information of any method (a header is a few dozen bytes).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 20;

/// Bytes fetched from the target at once. A power of two that divides every page size, so
/// an aligned chunk never spans two pages.
const CHUNK: u64 = 64;

/// What [`ContractError::Corrupt`] errors of the reader name.
const WHAT: &str = "GC info";

/// A cursor over a GCInfo bit stream in target memory.
#[derive(Debug)]
pub struct BitReader<'t> {
    target: &'t Target,
    /// Address of the stream's first bit, as given.
    start: u64,
    /// `start` aligned down to the word size: bit positions count from here.
    base: u64,
    /// Current position in bits from `base`.
    pos: u64,
    /// First bit position (from `base`) that may not be read.
    end_bit: u64,
    /// The cap, in bytes past `start`.
    max_bytes: u64,
    word_size: u64,
    endian: Endian,
    /// Cached bytes and the address of the first of them.
    chunk: Vec<u8>,
    chunk_addr: u64,
}

impl<'t> BitReader<'t> {
    /// A reader of the stream at `addr`, allowed to consume at most `max_bytes` bytes
    /// past `addr`.
    pub fn new(target: &'t Target, addr: u64, max_bytes: u64) -> BitReader<'t> {
        let word_size = u64::from(target.pointer_size()).clamp(1, 8);
        let base = addr - addr % word_size;
        let skip = (addr - base) * 8;
        BitReader {
            target,
            start: addr,
            base,
            pos: skip,
            end_bit: skip.saturating_add(max_bytes.saturating_mul(8)),
            max_bytes,
            word_size,
            endian: target.layout().endian,
            chunk: Vec::new(),
            chunk_addr: 0,
        }
    }

    /// Address of the stream's first bit.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Number of bits consumed since the stream's start.
    pub fn bits_read(&self) -> u64 {
        self.pos - (self.start - self.base) * 8
    }

    /// A "corrupt GC info" error at the stream's start.
    pub fn corrupt(&self, detail: impl Into<String>) -> ContractError {
        ContractError::Corrupt {
            what: WHAT,
            addr: self.start,
            detail: detail.into(),
        }
    }

    fn over_cap(&self) -> ContractError {
        ContractError::LimitExceeded {
            what: "GC info bit stream",
            addr: self.start,
            limit: Limit::Fixed,
            cap: self.max_bytes,
            unit: "bytes",
        }
    }

    /// The word with index `index` (counted from `base`), fetched from the chunk cache.
    fn word(&mut self, index: u64) -> Result<u64, ContractError> {
        let addr = index
            .checked_mul(self.word_size)
            .and_then(|off| self.base.checked_add(off))
            .ok_or_else(|| self.corrupt("the stream runs past the end of the address space"))?;
        let cached = addr >= self.chunk_addr
            && (addr - self.chunk_addr)
                .checked_add(self.word_size)
                .is_some_and(|end| end <= self.chunk.len() as u64);
        if !cached {
            self.fetch(addr)?;
        }
        let from = (addr - self.chunk_addr) as usize;
        let bytes = &self.chunk[from..from + self.word_size as usize];
        Ok(decode_unsigned(bytes, self.endian))
    }

    /// Fills the cache with the aligned chunk holding the word at `addr`; falls back to
    /// the word alone when the whole chunk is not readable (the end of a mapping that is
    /// not page-aligned, as in test layouts).
    fn fetch(&mut self, addr: u64) -> Result<(), ContractError> {
        let chunk_addr = addr - addr % CHUNK;
        let len = CHUNK as usize;
        match self.target.read_bytes(chunk_addr, len) {
            Ok(bytes) if bytes.len() == len => {
                self.chunk = bytes;
                self.chunk_addr = chunk_addr;
            }
            _ => {
                self.chunk = self.target.read_bytes(addr, self.word_size as usize)?;
                self.chunk_addr = addr;
            }
        }
        Ok(())
    }

    /// Reads the next `n` bits (0 to 64); the first bit read is bit 0 of the result.
    pub fn read_bits(&mut self, n: u32) -> Result<u64, ContractError> {
        if n > 64 {
            return Err(self.corrupt(format!("a read of {n} bits (at most 64 fit)")));
        }
        let n = u64::from(n);
        if self.pos.checked_add(n).is_none_or(|p| p > self.end_bit) {
            return Err(self.over_cap());
        }
        let word_bits = self.word_size * 8;
        let mut value = 0u64;
        let mut done = 0u64;
        while done < n {
            let index = self.pos / word_bits;
            let offset = self.pos % word_bits;
            let take = (word_bits - offset).min(n - done);
            let bits = (self.word(index)? >> offset) & mask(take);
            value |= bits << done;
            done += take;
            self.pos += take;
        }
        Ok(value)
    }

    /// Reads one bit.
    pub fn read_bit(&mut self) -> Result<bool, ContractError> {
        Ok(self.read_bits(1)? != 0)
    }

    /// Moves to `bits` past the stream's start (forward or back); positions beyond the cap
    /// are refused, as reads there would be.
    pub fn seek(&mut self, bits: u64) -> Result<(), ContractError> {
        let skip = (self.start - self.base) * 8;
        match skip.checked_add(bits) {
            Some(p) if p <= self.end_bit => {
                self.pos = p;
                Ok(())
            }
            _ => Err(self.over_cap()),
        }
    }

    /// Decodes a variable-length unsigned number with chunks of `base` data bits: each
    /// chunk is `base` data bits then one "more follows" bit, least significant chunk
    /// first. A value that does not fit in 64 bits is a typed error.
    pub fn decode_var_unsigned(&mut self, base: u32) -> Result<u64, ContractError> {
        check_base(self, base)?;
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            if shift >= 64 {
                return Err(self.corrupt(format!(
                    "a variable-length unsigned number (base {base}) does not fit in 64 bits"
                )));
            }
            let chunk = self.read_bits(base + 1)?;
            let data = chunk & mask(u64::from(base));
            let shifted = data << shift;
            if shifted >> shift != data {
                return Err(self.corrupt(format!(
                    "a variable-length unsigned number (base {base}) does not fit in 64 bits"
                )));
            }
            value |= shifted;
            shift += base;
            if chunk >> base == 0 {
                return Ok(value);
            }
        }
    }

    /// Decodes a variable-length signed number: the same chunks as
    /// [`decode_var_unsigned`](Self::decode_var_unsigned), sign-extended from the top data
    /// bit of the last chunk. A value that does not fit in 64 bits is a typed error.
    pub fn decode_var_signed(&mut self, base: u32) -> Result<i64, ContractError> {
        check_base(self, base)?;
        // At most 64 + 62 data bits are gathered (a chunk starts below bit 64), so an
        // i128 holds them all.
        let mut value = 0i128;
        let mut shift = 0u32;
        loop {
            if shift >= 64 {
                return Err(self.corrupt(format!(
                    "a variable-length signed number (base {base}) does not fit in 64 bits"
                )));
            }
            let chunk = self.read_bits(base + 1)?;
            let data = chunk & mask(u64::from(base));
            value |= i128::from(data) << shift;
            shift += base;
            if chunk >> base == 0 {
                // Sign-extend from bit `shift - 1`.
                let unused = 128 - shift;
                let extended = (value << unused) >> unused;
                return i64::try_from(extended).map_err(|_| {
                    self.corrupt(format!(
                        "a variable-length signed number (base {base}) does not fit in 64 bits"
                    ))
                });
            }
        }
    }
}

fn check_base(reader: &BitReader<'_>, base: u32) -> Result<(), ContractError> {
    if (1..=63).contains(&base) {
        Ok(())
    } else {
        Err(reader.corrupt(format!(
            "variable-length encoding base {base} (must be 1 to 63)"
        )))
    }
}

/// The low `n` bits set (n ≤ 64).
fn mask(n: u64) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    fn target_with(layout: DataLayout, addr: u64, bytes: &[u8]) -> Target {
        let mut b = MemoryBuilder::new(layout);
        b.region(addr, bytes.len()).bytes(0, bytes);
        b.into_target()
    }

    #[test]
    fn reads_lsb_first_across_words() {
        // 64-bit LE: bytes in address order, LSB first.
        let bytes: Vec<u8> = (0u8..16).map(|i| i.wrapping_mul(37) ^ 0x5A).collect();
        let t = target_with(DataLayout::LE64, 0x1000, &bytes);
        let mut r = BitReader::new(&t, 0x1000, 16);
        let mut all = 0u128;
        for (i, b) in bytes.iter().enumerate() {
            all |= u128::from(*b) << (8 * i);
        }
        // Read in uneven pieces that cross the word boundary at bit 64.
        let mut pos = 0;
        for n in [3u32, 13, 40, 9, 1, 62] {
            let got = r.read_bits(n).expect("read");
            let want = ((all >> pos) as u64) & mask(u64::from(n));
            assert_eq!(got, want, "{n} bits at {pos}");
            pos += n;
        }
        assert_eq!(r.bits_read(), 128);
        assert!(matches!(
            r.read_bits(1),
            Err(ContractError::LimitExceeded { .. })
        ));
    }

    #[test]
    fn big_endian_words_are_read_as_numbers() {
        // 32-bit BE: the word 0x00000153 holds bits 0.. = 1,1,0,0,1,0,1,0,1.
        let t = target_with(DataLayout::BE32, 0x2000, &[0, 0, 0x01, 0x53, 0, 0, 0, 0]);
        let mut r = BitReader::new(&t, 0x2000, 8);
        assert_eq!(r.read_bits(9).expect("read"), 0x153);
    }

    #[test]
    fn unaligned_start_skips_leading_bits() {
        // Stream starts at 0x1003: bits come from byte 3 on, within the aligned word.
        let t = target_with(
            DataLayout::LE64,
            0x1000,
            &[0xFF, 0xFF, 0xFF, 0xA5, 0, 0, 0, 0],
        );
        let mut r = BitReader::new(&t, 0x1003, 5);
        assert_eq!(r.read_bits(8).expect("read"), 0xA5);
        assert_eq!(r.bits_read(), 8);
    }

    #[test]
    fn var_length_examples_base_8_and_3() {
        // Base 8: 83 is one 9-bit chunk; 300 is (44 | more, 1).
        let mut bits: Vec<(u64, u32)> = vec![(83, 9), (44 | 0x100, 9), (1, 9)];
        // Base 3: 7 is one 4-bit chunk; 8 is (0 | more, 1); 63 is (7|more, 7).
        bits.extend([(7, 4), (0b1000, 4), (1, 4), (0xF, 4), (7, 4)]);
        let bytes = pack(&bits);
        let t = target_with(DataLayout::LE64, 0x1000, &bytes);
        let mut r = BitReader::new(&t, 0x1000, 64);
        assert_eq!(r.decode_var_unsigned(8).expect("83"), 83);
        assert_eq!(r.bits_read(), 9);
        assert_eq!(r.decode_var_unsigned(8).expect("300"), 300);
        assert_eq!(r.decode_var_unsigned(3).expect("7"), 7);
        assert_eq!(r.bits_read(), 31);
        assert_eq!(r.decode_var_unsigned(3).expect("8"), 8);
        assert_eq!(r.decode_var_unsigned(3).expect("63"), 63);
    }

    #[test]
    fn var_length_signed_examples() {
        // Base 3: -1 = 0b111 and -4 = 0b100 in one chunk; 3 = 0b011 fits in one chunk
        // (top data bit 0); 4 needs two chunks: (0b100 | more, 0b000).
        let bits = [
            (0b0111, 4),
            (0b0100, 4),
            (0b0011, 4),
            (0b1100, 4),
            (0b0000, 4),
        ];
        let bytes = pack(&bits);
        let t = target_with(DataLayout::LE64, 0x1000, &bytes);
        let mut r = BitReader::new(&t, 0x1000, 64);
        assert_eq!(r.decode_var_signed(3).expect("-1"), -1);
        assert_eq!(r.decode_var_signed(3).expect("-4"), -4);
        assert_eq!(r.decode_var_signed(3).expect("3"), 3);
        assert_eq!(r.decode_var_signed(3).expect("4"), 4);
    }

    #[test]
    fn overflowing_var_length_is_a_typed_error() {
        // Base 8, every chunk 0xFF with "more": 9 chunks = 72 data bits.
        let bits: Vec<(u64, u32)> = (0..12).map(|_| (0x1FF, 9)).collect();
        let bytes = pack(&bits);
        let t = target_with(DataLayout::LE64, 0x1000, &bytes);
        let e = BitReader::new(&t, 0x1000, 64)
            .decode_var_unsigned(8)
            .expect_err("overflow");
        assert!(matches!(e, ContractError::Corrupt { .. }), "{e}");
        let e = BitReader::new(&t, 0x1000, 64)
            .decode_var_signed(8)
            .expect_err("overflow");
        assert!(matches!(e, ContractError::Corrupt { .. }), "{e}");
        // u64::MAX itself fits: 8 chunks of 0xFF, the last without "more".
        let mut bits: Vec<(u64, u32)> = (0..7).map(|_| (0x1FF, 9)).collect();
        bits.push((0xFF, 9));
        let t = target_with(DataLayout::LE64, 0x1000, &pack(&bits));
        assert_eq!(
            BitReader::new(&t, 0x1000, 64)
                .decode_var_unsigned(8)
                .expect("max"),
            u64::MAX
        );
    }

    #[test]
    fn cap_and_unreadable_memory_are_typed_errors() {
        let t = target_with(DataLayout::LE64, 0x1000, &[0xFF; 8]);
        let mut r = BitReader::new(&t, 0x1000, 2);
        assert!(matches!(
            r.read_bits(17),
            Err(ContractError::LimitExceeded { .. })
        ));
        let mut r = BitReader::new(&t, 0x1000, 100);
        r.read_bits(64).expect("first word");
        assert!(matches!(r.read_bits(1), Err(ContractError::Read(_))));
        let mut r = BitReader::new(&t, 0x1000, 100);
        assert!(matches!(
            r.read_bits(65),
            Err(ContractError::Corrupt { .. })
        ));
        assert!(matches!(
            r.decode_var_unsigned(0),
            Err(ContractError::Corrupt { .. })
        ));
    }

    /// Packs (value, bit count) pieces LSB-first into 32 bytes.
    fn pack(pieces: &[(u64, u32)]) -> Vec<u8> {
        let mut out = vec![0u8; 32];
        let mut pos = 0usize;
        for &(v, n) in pieces {
            for i in 0..n as usize {
                if (v >> i) & 1 == 1 {
                    out[(pos + i) / 8] |= 1 << ((pos + i) % 8);
                }
            }
            pos += n as usize;
        }
        out
    }
}
