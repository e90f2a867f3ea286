//! A regular file's bytes, mapped read-only: for parsers of input files that can be large
//! (a perf.data of a long system-wide recording), so that they see one byte slice without
//! the whole file being copied into memory.

use std::io;
use std::ops::Deref;
use std::path::Path;

use memmap2::Mmap;

use super::sys;

/// The bytes of a regular file, mapped read-only (an empty file gives an empty slice).
///
/// Like every memory-mapped reader, a file truncated by another process while it is mapped
/// makes reads of the lost pages fault.
pub struct FileBytes {
    map: Mmap,
}

impl FileBytes {
    /// Maps `path`, which must be a regular file: a FIFO or device is refused (it has no
    /// fixed contents to map, and opening one must not block or have side effects).
    pub fn open(path: &Path) -> io::Result<FileBytes> {
        Ok(FileBytes {
            map: sys::map_regular_file(path)?,
        })
    }
}

impl Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}
