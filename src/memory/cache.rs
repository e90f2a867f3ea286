//! A per-page cache in front of any [`MemorySource`].
//!
//! Contract code reads many small fields close together; for a live process each miss is a
//! system call. The cache fetches whole pages, all missing pages of one request in one
//! batched read, and keeps at most a fixed number of them. Large reads go straight to the
//! source: copying them page by page would only cost time.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

use super::{DataLayout, MappedFile, MemorySource, ReadError, TargetKind, ThreadInfo};

/// Size of one cached page.
pub const PAGE_SIZE: u64 = 4096;

/// Default cap: 16,384 pages (64 MiB).
pub const DEFAULT_MAX_PAGES: usize = 16 * 1024;

/// Reads at least this long bypass the cache.
pub const BYPASS_LEN: usize = 64 * 1024;

/// Hashes page addresses: their low 12 bits are zero and the rest is already well spread,
/// so one multiply does what SipHash would, at a fraction of the cost of a cache hit.
#[derive(Default)]
struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, page: u64) {
        self.0 = (page >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type PageMap = HashMap<u64, Box<[u8]>, BuildHasherDefault<PageHasher>>;

/// A page cache over another source.
pub struct PageCache<S> {
    inner: S,
    pages: Mutex<PageMap>,
    max_pages: usize,
}

impl<S: MemorySource> PageCache<S> {
    /// Caches `inner` with the default capacity.
    pub fn new(inner: S) -> PageCache<S> {
        Self::with_capacity(inner, DEFAULT_MAX_PAGES)
    }

    /// Caches `inner`, keeping at most `max_pages` pages.
    pub fn with_capacity(inner: S, max_pages: usize) -> PageCache<S> {
        PageCache {
            inner,
            pages: Mutex::new(PageMap::default()),
            max_pages: max_pages.max(1),
        }
    }

    /// The cached source.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Drops the cache and gives back the source.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Number of pages held now.
    pub fn cached_pages(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PageMap> {
        // A panic while holding the lock cannot leave a page half-written (pages are
        // inserted whole), so a poisoned map is still consistent.
        self.pages.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fetches the given pages from the source in one batched read. When the batch fails,
    /// pages are fetched one by one so that the error names the exact page that failed.
    fn fetch(&self, missing: &[u64]) -> Result<Vec<Box<[u8]>>, ReadError> {
        let mut bufs: Vec<Box<[u8]>> = missing
            .iter()
            .map(|_| vec![0u8; PAGE_SIZE as usize].into_boxed_slice())
            .collect();
        let mut requests: Vec<(u64, &mut [u8])> = missing
            .iter()
            .zip(bufs.iter_mut())
            .map(|(p, b)| (*p, &mut b[..]))
            .collect();
        if self.inner.read_many(&mut requests).is_err() {
            for (page, buf) in missing.iter().zip(bufs.iter_mut()) {
                self.inner.read_exact(*page, buf)?;
            }
        }
        Ok(bufs)
    }

    /// Copies the part of `page` that `[addr, end)` covers into `buf`.
    fn copy_out(page: u64, data: &[u8], addr: u64, end: u64, buf: &mut [u8]) {
        let from = addr.max(page);
        let to = end.min(page.saturating_add(PAGE_SIZE));
        let n = (to - from) as usize;
        let offset = (from - page) as usize;
        let at = (from - addr) as usize;
        buf[at..at + n].copy_from_slice(&data[offset..offset + n]);
    }
}

impl<S: MemorySource> MemorySource for PageCache<S> {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if buf.is_empty() {
            return Ok(());
        }
        if buf.len() >= BYPASS_LEN {
            return self.inner.read_exact(addr, buf);
        }
        super::check_range(addr, buf.len())?;
        let Some(end) = addr.checked_add(buf.len() as u64) else {
            // A read ending at the very top of the address space: too rare to cache.
            return self.inner.read_exact(addr, buf);
        };
        let first_page = addr & !(PAGE_SIZE - 1);

        // Copy what is cached, under one lock, and note the pages that are not.
        let mut missing: Vec<u64> = Vec::new();
        {
            let map = self.lock();
            let mut page = first_page;
            while page < end {
                match map.get(&page) {
                    Some(data) => Self::copy_out(page, data, addr, end, buf),
                    None => missing.push(page),
                }
                page = match page.checked_add(PAGE_SIZE) {
                    Some(next) => next,
                    None => break,
                };
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let Ok(fetched) = self.fetch(&missing) else {
            // Some page is unreadable. Read the request directly: its error names the exact
            // first byte that failed rather than the page, and a request that only touches
            // the readable part of a page still succeeds.
            return self.inner.read_exact(addr, buf);
        };
        let mut map = self.lock();
        if map.len() + fetched.len() > self.max_pages {
            // Bounded memory beats a perfect policy: start over when full.
            map.clear();
        }
        for (page, data) in missing.into_iter().zip(fetched) {
            Self::copy_out(page, &data, addr, end, buf);
            // One request may span more pages than the cache holds: keep only what fits.
            if map.len() < self.max_pages {
                map.insert(page, data);
            }
        }
        Ok(())
    }

    fn mapped_files(&self) -> &[MappedFile] {
        self.inner.mapped_files()
    }

    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        self.inner.threads()
    }

    fn namespace_thread_ids(&self) -> std::collections::HashMap<u64, i32> {
        self.inner.namespace_thread_ids()
    }

    fn file_root(&self) -> Option<std::path::PathBuf> {
        self.inner.file_root()
    }

    fn kind(&self) -> TargetKind {
        self.inner.kind()
    }

    fn native_layout(&self) -> Option<DataLayout> {
        self.inner.native_layout()
    }

    fn flush(&self) {
        self.lock().clear();
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    /// Two mapped regions with a gap, both spanning several pages, filled with a pattern.
    fn memory() -> crate::memory::builder::BuiltMemory {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        for (base, len) in [(0x10_0000u64, 5 * 4096 + 100), (0x20_0000, 3 * 4096)] {
            let bytes: Vec<u8> = (0..len)
                .map(|i| ((base as usize + i) * 7 % 251) as u8)
                .collect();
            b.region(base, len).bytes(0, &bytes);
        }
        b.build()
    }

    #[test]
    fn cached_reads_equal_direct_reads() {
        let direct = memory();
        let cache = PageCache::with_capacity(memory(), 4);
        let mut x = 0x1234_5678_9abc_def1u64;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let base = if x & 1 == 0 { 0x10_0000 } else { 0x20_0000 };
            let addr = base + (x >> 8) % (6 * 4096);
            let len = ((x >> 40) % 9000) as usize;
            let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
            let want = direct.read_exact(addr, &mut a);
            let got = cache.read_exact(addr, &mut b);
            match (want, got) {
                (Ok(()), Ok(())) => assert_eq!(a, b, "{addr:#x}+{len}"),
                (Err(w), Err(g)) => assert_eq!(w.address(), g.address(), "{addr:#x}+{len}"),
                (w, g) => panic!("{addr:#x}+{len}: direct {w:?}, cached {g:?}"),
            }
            assert!(cache.cached_pages() <= 4);
        }
    }

    #[test]
    fn error_names_the_first_unreadable_byte() {
        let cache = PageCache::new(memory());
        let end = 0x10_0000 + 5 * 4096 + 100;
        let err = cache
            .read_exact(end - 4, &mut [0u8; 16])
            .expect_err("runs off");
        assert!(
            matches!(err, ReadError::Unmapped { addr, .. } if addr == end),
            "{err}"
        );
        let mut top = [0u8; 2];
        assert!(cache.read_exact(u64::MAX - 1, &mut top).is_err());
    }
}
