//! A target whose memory a host program reads for `cdac`.
//!
//! A debugger that already has the process (or dump) open hands `cdac` a read callback,
//! the files mapped into the target and its threads; [`CallbackSource`] turns these into a
//! [`MemorySource`], with the same page cache a live process gets, so that the runtime and
//! its contracts can be read through the host.
//!
//! ```
//! use cdac::memory::callback::CallbackSource;
//! use cdac::memory::{DataLayout, ReadError};
//!
//! // The host's memory: 4 KiB at 0x1000 holding a pointer at 0x1010.
//! let mut page = vec![0u8; 4096];
//! page[0x10..0x18].copy_from_slice(&0xdead_beef_u64.to_le_bytes());
//! let source = CallbackSource::new(
//!     move |addr, buf: &mut [u8]| {
//!         let Some(offset) = addr.checked_sub(0x1000) else { return false };
//!         let Ok(offset) = usize::try_from(offset) else { return false };
//!         match page.get(offset..offset.saturating_add(buf.len())) {
//!             Some(bytes) => {
//!                 buf.copy_from_slice(bytes);
//!                 true
//!             }
//!             None => false,
//!         }
//!     },
//!     Vec::new(),
//!     Vec::new(),
//! )
//! .with_layout(DataLayout::LE64);
//! let target = source.into_target();
//! assert_eq!(target.read_pointer(0x1010)?, 0xdead_beef);
//! // A read the host refuses is an error, never a panic.
//! assert!(matches!(
//!     target.read_pointer(0x9000),
//!     Err(ReadError::HostReadFailed { .. })
//! ));
//! # Ok::<(), ReadError>(())
//! ```

use std::sync::Arc;

use super::cache::PageCache;
use super::{DataLayout, MappedFile, MemorySource, ReadError, Target, TargetKind, ThreadInfo};

/// The host's read function: fills the buffer with the bytes at the address and returns
/// true, or returns false when any of them cannot be read.
type ReadFn = dyn Fn(u64, &mut [u8]) -> bool + Send + Sync;

/// Memory, mapped files and threads given by a host program.
///
/// Reads go through a page cache (as for a live process); [`MemorySource::flush`] drops
/// it, for hosts whose target runs between two uses.
pub struct CallbackSource {
    cache: PageCache<HostMemory>,
}

impl std::fmt::Debug for CallbackSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = self.cache.inner();
        f.debug_struct("CallbackSource")
            .field("files", &host.files.len())
            .field("threads", &host.threads.len())
            .field("layout", &host.layout)
            .finish()
    }
}

/// The uncached part: the callback and the host's lists.
struct HostMemory {
    read: Box<ReadFn>,
    files: Vec<MappedFile>,
    threads: Vec<ThreadInfo>,
    layout: Option<DataLayout>,
}

impl CallbackSource {
    /// A source reading through `read`, which must fill the whole buffer and return true,
    /// or return false (the read then fails with [`ReadError::HostReadFailed`]).
    /// `files` lists the files mapped into the target (the runtime is found among them);
    /// `threads` lists its threads, with registers where the host knows them.
    pub fn new(
        read: impl Fn(u64, &mut [u8]) -> bool + Send + Sync + 'static,
        mut files: Vec<MappedFile>,
        threads: Vec<ThreadInfo>,
    ) -> CallbackSource {
        files.sort_by_key(|f| (f.start, f.end));
        CallbackSource {
            cache: PageCache::new(HostMemory {
                read: Box::new(read),
                files,
                threads,
                layout: None,
            }),
        }
    }

    /// Declares the target's pointer size and byte order. Without it, opening a runtime
    /// assumes 64-bit little-endian until the runtime's descriptor tells.
    pub fn with_layout(self, layout: DataLayout) -> CallbackSource {
        let mut host = self.cache.into_inner();
        host.layout = Some(layout);
        CallbackSource {
            cache: PageCache::new(host),
        }
    }

    /// Wraps the source in a [`Target`] of its declared layout (64-bit little-endian when
    /// none was declared), for typed reads without opening a runtime.
    pub fn into_target(self) -> Target {
        let layout = self.native_layout().unwrap_or(DataLayout::LE64);
        Target::new(Arc::new(self), layout)
    }
}

impl MemorySource for HostMemory {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        super::check_range(addr, buf.len())?;
        if buf.is_empty() || (self.read)(addr, buf) {
            Ok(())
        } else {
            Err(ReadError::HostReadFailed {
                addr,
                len: buf.len(),
            })
        }
    }

    fn mapped_files(&self) -> &[MappedFile] {
        &self.files
    }

    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        Ok(self.threads.clone())
    }

    fn kind(&self) -> TargetKind {
        TargetKind::Host
    }

    fn native_layout(&self) -> Option<DataLayout> {
        self.layout
    }
}

impl MemorySource for CallbackSource {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.cache.read_exact(addr, buf)
    }

    fn read_many(&self, requests: &mut [(u64, &mut [u8])]) -> Result<(), ReadError> {
        self.cache.read_many(requests)
    }

    fn mapped_files(&self) -> &[MappedFile] {
        self.cache.mapped_files()
    }

    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        self.cache.threads()
    }

    fn kind(&self) -> TargetKind {
        TargetKind::Host
    }

    fn native_layout(&self) -> Option<DataLayout> {
        self.cache.native_layout()
    }

    fn flush(&self) {
        self.cache.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> CallbackSource {
        CallbackSource::new(
            |addr, buf: &mut [u8]| {
                // Readable: [0x10000, 0x13000), each byte its address's low bits.
                let end = addr.saturating_add(buf.len() as u64);
                if addr < 0x10000 || end > 0x13000 {
                    return false;
                }
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = (addr as usize + i) as u8;
                }
                true
            },
            Vec::new(),
            vec![ThreadInfo {
                tid: 7,
                ip: None,
                sp: None,
                context: None,
            }],
        )
    }

    #[test]
    fn reads_through_the_cache() {
        let s = source();
        let mut buf = [0u8; 8];
        s.read_exact(0x10ffc, &mut buf).expect("readable");
        assert_eq!(buf, [0xfc, 0xfd, 0xfe, 0xff, 0, 1, 2, 3]);
        assert_eq!(s.threads().expect("threads")[0].tid, 7);
        assert_eq!(s.kind(), TargetKind::Host);
        assert_eq!(s.native_layout(), None);
    }

    #[test]
    fn flush_drops_cached_pages() {
        use std::sync::atomic::{AtomicU8, Ordering};
        let value = Arc::new(AtomicU8::new(1));
        let seen = value.clone();
        let s = CallbackSource::new(
            move |_, buf: &mut [u8]| {
                buf.fill(seen.load(Ordering::Relaxed));
                true
            },
            Vec::new(),
            Vec::new(),
        )
        .with_layout(DataLayout::BE32);
        let target = s.into_target();
        assert_eq!(target.layout(), DataLayout::BE32);
        assert_eq!(target.read_u8(0x5000).expect("read"), 1);
        value.store(2, Ordering::Relaxed);
        assert_eq!(target.read_u8(0x5000).expect("cached"), 1);
        target.flush();
        assert_eq!(target.read_u8(0x5000).expect("fresh"), 2);
    }

    #[test]
    fn a_refused_read_is_a_typed_error() {
        let s = source();
        let err = s
            .read_exact(0x12ff0, &mut [0u8; 0x20])
            .expect_err("runs past the readable range");
        assert!(matches!(
            err,
            ReadError::HostReadFailed {
                addr: 0x12ff0,
                len: 0x20
            }
        ));
        assert!(err.is_missing_memory());
    }
}
