//! A per-page cache in front of any [`MemorySource`].
//!
//! Contract code reads many small fields close together; for a live process each miss is a
//! system call. The cache fetches whole pages, all missing pages of one request in one
//! batched read, and keeps at most a fixed number of them. Large reads go straight to the
//! source: copying them page by page would only cost time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{DataLayout, MappedFile, MemorySource, ReadError, TargetKind, ThreadInfo};

/// Size of one cached page.
pub const PAGE_SIZE: u64 = 4096;

/// Default cap: 16,384 pages (64 MiB).
pub const DEFAULT_MAX_PAGES: usize = 16 * 1024;

/// A cached page: its address and bytes.
type Page = (u64, Arc<[u8]>);

/// Reads at least this long bypass the cache.
pub const BYPASS_LEN: usize = 64 * 1024;

/// A page cache over another source.
pub struct PageCache<S> {
    inner: S,
    pages: Mutex<HashMap<u64, Arc<[u8]>>>,
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
            pages: Mutex::new(HashMap::new()),
            max_pages: max_pages.max(1),
        }
    }

    /// The cached source.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Number of pages held now.
    pub fn cached_pages(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<[u8]>>> {
        // A panic while holding the lock cannot leave a page half-written (pages are
        // inserted whole), so a poisoned map is still consistent.
        self.pages.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fetches the given pages from the source in one batched read. When the batch fails,
    /// pages are fetched one by one so that the readable ones are still cached and the
    /// error names the exact page that failed.
    fn fetch(&self, missing: &[u64]) -> Result<Vec<Page>, ReadError> {
        let mut bufs: Vec<Vec<u8>> = missing
            .iter()
            .map(|_| vec![0u8; PAGE_SIZE as usize])
            .collect();
        let mut requests: Vec<(u64, &mut [u8])> = missing
            .iter()
            .zip(bufs.iter_mut())
            .map(|(p, b)| (*p, b.as_mut_slice()))
            .collect();
        if self.inner.read_many(&mut requests).is_ok() {
            return Ok(missing
                .iter()
                .zip(bufs)
                .map(|(p, b)| (*p, Arc::from(b)))
                .collect());
        }
        let mut out = Vec::with_capacity(missing.len());
        for &page in missing {
            let mut buf = vec![0u8; PAGE_SIZE as usize];
            self.inner.read_exact(page, &mut buf)?;
            out.push((page, Arc::from(buf)));
        }
        Ok(out)
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
        // The last byte of the address space is a valid end: saturate one past it.
        let end = addr.saturating_add(buf.len() as u64);
        let first_page = addr & !(PAGE_SIZE - 1);
        let pages: Vec<u64> = (first_page..end).step_by(PAGE_SIZE as usize).collect();

        let mut held: Vec<Option<Arc<[u8]>>> = {
            let map = self.lock();
            pages.iter().map(|p| map.get(p).cloned()).collect()
        };
        let missing: Vec<u64> = pages
            .iter()
            .zip(&held)
            .filter(|(_, h)| h.is_none())
            .map(|(p, _)| *p)
            .collect();
        if !missing.is_empty() {
            let Ok(fetched) = self.fetch(&missing) else {
                // Some page is unreadable. Read the request directly: its error names the
                // exact first byte that failed rather than the page, and a request that
                // only touches the readable part of a page still succeeds.
                return self.inner.read_exact(addr, buf);
            };
            let mut map = self.lock();
            if map.len() + fetched.len() > self.max_pages {
                // Bounded memory beats a perfect policy: start over when full.
                map.clear();
            }
            for (page, data) in fetched {
                if let Some(slot) = pages.iter().position(|p| *p == page) {
                    held[slot] = Some(data.clone());
                }
                map.insert(page, data);
            }
        }

        let mut written = 0usize;
        for (page, data) in pages.iter().zip(held) {
            let Some(data) = data else {
                return self.inner.read_exact(addr, buf);
            };
            let from = addr.max(*page);
            let to = end.min(page.saturating_add(PAGE_SIZE));
            let n = (to - from) as usize;
            let offset = (from - page) as usize;
            buf[written..written + n].copy_from_slice(&data[offset..offset + n]);
            written += n;
        }
        Ok(())
    }

    fn mapped_files(&self) -> &[MappedFile] {
        self.inner.mapped_files()
    }

    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        self.inner.threads()
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
