//! The object header: the 32-bit word just before an object's MethodTable pointer, which
//! holds a thin lock, a hash code or the index of a sync block (`cdac obj`, and the lock
//! work after it).
//!
//! Bits, the same on .NET 8, 9 and 10 (measured by `tests/real/obj.rs` on each):
//! - bit 27 set: bit 26 set means the low 26 bits are the hash code, clear means they are
//!   the sync block's index in the sync table;
//! - bit 27 clear: a thin lock, the owner's thin-lock thread id in bits 0..16 (0: not
//!   locked) and the recursion level (times taken − 1) in bits 16..22;
//! - bit 28: a spin lock on the header; bit 30: the finalizer has run.

use serde::Serialize;

/// Index or hash follows in the low bits.
const HASH_OR_SYNC_BLOCK: u32 = 0x0800_0000;
/// With [`HASH_OR_SYNC_BLOCK`]: the low bits are the hash code.
const IS_HASH_CODE: u32 = 0x0400_0000;
/// The low 26 bits.
const LOW_26: u32 = 0x03FF_FFFF;
/// A thin lock's owner (thin-lock thread id).
const THIN_LOCK_THREAD: u32 = 0xFFFF;
/// A thin lock's recursion level.
const THIN_LOCK_RECURSION: u32 = 0x003F_0000;
/// The header is being changed (a spin lock).
const SPIN_LOCK: u32 = 0x1000_0000;
/// The object's finalizer has run.
const FINALIZER_RUN: u32 = 0x4000_0000;

/// What an object's header holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HeaderState {
    /// Nothing: not locked, no hash code, no sync block.
    Empty,
    /// Locked without a sync block.
    ThinLock {
        /// The owner's thin-lock thread id (`Thread.Id`, not the managed id).
        thread_id: u32,
        /// Times taken beyond the first.
        recursion: u32,
    },
    /// The hash code `RuntimeHelpers.GetHashCode` returns.
    HashCode {
        /// The hash code.
        hash: u32,
    },
    /// A sync block holds the lock, hash code or interop data.
    SyncBlock {
        /// Its index in the sync table.
        index: u32,
    },
}

/// An object header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Header {
    /// The raw 32-bit word.
    pub raw: u32,
    /// What it holds.
    pub state: HeaderState,
    /// The runtime was changing the header when it was read.
    pub spin_locked: bool,
    /// The object's finalizer has run.
    pub finalizer_run: bool,
}

impl Header {
    /// Decodes a header word.
    pub fn decode(raw: u32) -> Header {
        let state = if raw & HASH_OR_SYNC_BLOCK != 0 {
            if raw & IS_HASH_CODE != 0 {
                HeaderState::HashCode { hash: raw & LOW_26 }
            } else {
                HeaderState::SyncBlock {
                    index: raw & LOW_26,
                }
            }
        } else if raw & THIN_LOCK_THREAD != 0 {
            HeaderState::ThinLock {
                thread_id: raw & THIN_LOCK_THREAD,
                recursion: (raw & THIN_LOCK_RECURSION) >> 16,
            }
        } else {
            HeaderState::Empty
        };
        Header {
            raw,
            state,
            spin_locked: raw & SPIN_LOCK != 0,
            finalizer_run: raw & FINALIZER_RUN != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_words_decode() {
        assert_eq!(Header::decode(0).state, HeaderState::Empty);
        // Three nested locks by thin-lock thread 4.
        assert_eq!(
            Header::decode(0x0002_0004).state,
            HeaderState::ThinLock {
                thread_id: 4,
                recursion: 2
            }
        );
        assert_eq!(
            Header::decode(0x0C00_0000 | 7_658_356).state,
            HeaderState::HashCode { hash: 7_658_356 }
        );
        assert_eq!(
            Header::decode(0x0800_0003).state,
            HeaderState::SyncBlock { index: 3 }
        );
        let h = Header::decode(0x4000_0000);
        assert!(h.finalizer_run && !h.spin_locked);
        assert_eq!(h.state, HeaderState::Empty);
    }
}
