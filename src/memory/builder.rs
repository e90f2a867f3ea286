//! Target memory laid out by tests.
//!
//! [`MemoryBuilder`] places byte regions at chosen addresses for any pointer size and byte
//! order. It encodes values with its own code (`to_le_bytes`/`to_be_bytes`), never with the
//! reader's, and knows nothing of runtime structures: a test writes each structure from
//! its own table of field offsets, so a layout bug in the library cannot hide in the
//! builder too.
//!
//! ```
//! use cdac::memory::builder::MemoryBuilder;
//! use cdac::memory::DataLayout;
//!
//! // A 32-bit big-endian target with a two-node list.
//! let mut memory = MemoryBuilder::new(DataLayout::BE32);
//! let second = memory.alloc(8, 4).pointer(0, 0).u32(4, 2).addr;
//! let first = memory.alloc(8, 4).pointer(0, second).u32(4, 1).addr;
//! let target = memory.into_target();
//!
//! let mut values = Vec::new();
//! let mut at = first;
//! while at != 0 {
//!     values.push(target.read_u32(at + 4)?);
//!     at = target.read_pointer(at)?;
//! }
//! assert_eq!(values, [1, 2]);
//! # Ok::<(), cdac::memory::ReadError>(())
//! ```

use std::path::PathBuf;

use super::{
    DataLayout, Endian, MappedFile, MemorySource, ReadError, Target, TargetKind, ThreadInfo,
};
use std::sync::Arc;

/// A region under construction: bytes at a fixed address.
#[derive(Debug, Clone)]
pub struct Region {
    /// Address of the first byte.
    pub addr: u64,
    /// Contents.
    pub bytes: Vec<u8>,
    layout: DataLayout,
}

impl Region {
    /// Address of the byte at `offset` in this region.
    pub fn at(&self, offset: usize) -> u64 {
        self.addr + offset as u64
    }

    fn put(&mut self, offset: usize, bytes: &[u8]) -> &mut Self {
        let end = offset + bytes.len();
        if end > self.bytes.len() {
            self.bytes.resize(end, 0);
        }
        self.bytes[offset..end].copy_from_slice(bytes);
        self
    }

    /// Writes raw bytes at `offset` (growing the region if needed).
    pub fn bytes(&mut self, offset: usize, bytes: &[u8]) -> &mut Self {
        self.put(offset, bytes)
    }

    /// Writes a `u8`.
    pub fn u8(&mut self, offset: usize, v: u8) -> &mut Self {
        self.put(offset, &[v])
    }

    /// Writes a `u16` in the region's byte order.
    pub fn u16(&mut self, offset: usize, v: u16) -> &mut Self {
        let b = match self.layout.endian {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        };
        self.put(offset, &b)
    }

    /// Writes a `u32` in the region's byte order.
    pub fn u32(&mut self, offset: usize, v: u32) -> &mut Self {
        let b = match self.layout.endian {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        };
        self.put(offset, &b)
    }

    /// Writes a `u64` in the region's byte order.
    pub fn u64(&mut self, offset: usize, v: u64) -> &mut Self {
        let b = match self.layout.endian {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        };
        self.put(offset, &b)
    }

    /// Writes a pointer-sized value (truncated to 32 bits on 32-bit targets).
    pub fn pointer(&mut self, offset: usize, v: u64) -> &mut Self {
        if self.layout.pointer_size == 4 {
            self.u32(offset, v as u32)
        } else {
            self.u64(offset, v)
        }
    }
}

/// Lays out target memory for tests.
#[derive(Debug, Clone)]
pub struct MemoryBuilder {
    layout: DataLayout,
    regions: Vec<Region>,
    files: Vec<MappedFile>,
    threads: Vec<ThreadInfo>,
    next_alloc: u64,
}

impl MemoryBuilder {
    /// An empty address space of the given layout. [`alloc`](Self::alloc) hands out
    /// addresses from `0x10000` on (below 4 GiB, so 32-bit targets work too).
    pub fn new(layout: DataLayout) -> MemoryBuilder {
        MemoryBuilder {
            layout,
            regions: Vec::new(),
            files: Vec::new(),
            threads: Vec::new(),
            next_alloc: 0x1_0000,
        }
    }

    /// The layout values are written in.
    pub fn layout(&self) -> DataLayout {
        self.layout
    }

    /// A new zeroed region of `size` bytes at `addr`. Overlapping regions are a test bug
    /// and panic at [`build`](Self::build).
    pub fn region(&mut self, addr: u64, size: usize) -> &mut Region {
        self.regions.push(Region {
            addr,
            bytes: vec![0; size],
            layout: self.layout,
        });
        let last = self.regions.len() - 1;
        &mut self.regions[last]
    }

    /// A new zeroed region of `size` bytes at a fresh address aligned to `align`, with an
    /// unmapped gap before it so that reads past a region's end fail as they would in a
    /// real target.
    pub fn alloc(&mut self, size: usize, align: u64) -> &mut Region {
        let align = align.max(1);
        let addr = self.next_alloc.div_ceil(align) * align;
        self.next_alloc = addr + size as u64 + 0x100;
        self.region(addr, size)
    }

    /// Records that a file is mapped at `[start, end)`.
    pub fn map_file(&mut self, start: u64, end: u64, path: impl Into<PathBuf>) -> &mut Self {
        self.files.push(MappedFile {
            start,
            end,
            file_offset: 0,
            path: path.into(),
        });
        self
    }

    /// Records a thread of the target, as a dump's notes give it: its id and its
    /// instruction and stack pointers.
    pub fn thread(&mut self, tid: i32, ip: u64, sp: u64) -> &mut Self {
        self.threads.push(ThreadInfo {
            tid,
            ip: Some(ip),
            sp: Some(sp),
            context: None,
        });
        self
    }

    /// Freezes the layout into a readable source.
    pub fn build(mut self) -> BuiltMemory {
        self.regions.sort_by_key(|r| r.addr);
        for pair in self.regions.windows(2) {
            let end = pair[0].addr + pair[0].bytes.len() as u64;
            assert!(
                end <= pair[1].addr,
                "test regions overlap: {:#x}..{:#x} and {:#x}",
                pair[0].addr,
                end,
                pair[1].addr
            );
        }
        self.files.sort_by_key(|f| f.start);
        BuiltMemory {
            layout: self.layout,
            regions: self.regions,
            files: self.files,
            threads: self.threads,
        }
    }

    /// Builds and wraps the memory in a [`Target`] of the builder's layout.
    pub fn into_target(self) -> Target {
        let layout = self.layout;
        Target::new(Arc::new(self.build()), layout)
    }
}

/// Memory produced by [`MemoryBuilder`].
#[derive(Debug, Clone)]
pub struct BuiltMemory {
    layout: DataLayout,
    regions: Vec<Region>,
    files: Vec<MappedFile>,
    threads: Vec<ThreadInfo>,
}

impl MemorySource for BuiltMemory {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        super::check_range(addr, buf.len())?;
        let mut done = 0usize;
        while done < buf.len() {
            let at = addr + done as u64;
            let i = self.regions.partition_point(|r| r.addr <= at);
            let region = i
                .checked_sub(1)
                .map(|i| &self.regions[i])
                .filter(|r| at - r.addr < r.bytes.len() as u64)
                .ok_or(ReadError::Unmapped {
                    addr: at,
                    len: buf.len() - done,
                })?;
            let from = (at - region.addr) as usize;
            let n = (region.bytes.len() - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&region.bytes[from..from + n]);
            done += n;
        }
        Ok(())
    }

    fn mapped_files(&self) -> &[MappedFile] {
        &self.files
    }

    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        Ok(self.threads.clone())
    }

    fn kind(&self) -> TargetKind {
        TargetKind::Synthetic
    }

    fn native_layout(&self) -> Option<DataLayout> {
        Some(self.layout)
    }
}
