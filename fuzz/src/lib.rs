//! Helpers shared by the fuzz targets: a byte cursor over the fuzz input, a layout chosen
//! from a byte, and target memory made of fuzz bytes.

use std::sync::Arc;

use cdac::descriptor::{json, DataDescriptor};
use cdac::memory::builder::MemoryBuilder;
use cdac::memory::{
    check_range, DataLayout, MappedFile, MemorySource, ReadError, Target, TargetKind, ThreadInfo,
};

/// Reads values off the front of the fuzz input; past its end every value is 0.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        head
    }

    fn fixed<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let b = self.bytes(N);
        out[..b.len()].copy_from_slice(b);
        out
    }

    pub fn u8(&mut self) -> u8 {
        self.fixed::<1>()[0]
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.fixed())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.fixed())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.fixed())
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    /// The rest of the input.
    pub fn rest(&mut self) -> &'a [u8] {
        let r = self.data;
        self.data = &[];
        r
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// One of `DataLayout::ALL`, chosen by `b`.
pub fn layout(b: u8) -> DataLayout {
    DataLayout::ALL[usize::from(b) % DataLayout::ALL.len()]
}

/// Where fuzz memory is placed (below 4 GiB, so 32-bit targets reach it).
pub const BASE: u64 = 0x1000_0000;

/// Size of the window [`WrapMemory`] makes readable.
pub const WRAP_WINDOW: u64 = 1 << 20;

/// Memory in which every address of `[BASE, BASE + WRAP_WINDOW)` is readable and holds the
/// fuzz bytes repeated: any pointer into the window leads somewhere, so that walks of linked
/// structures go deep (and loops and cycles are met).
#[derive(Debug)]
pub struct WrapMemory {
    data: Vec<u8>,
}

impl MemorySource for WrapMemory {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        check_range(addr, buf.len())?;
        let end = addr.checked_add(buf.len() as u64);
        if self.data.is_empty() || addr < BASE || end.is_none_or(|e| e > BASE + WRAP_WINDOW) {
            return Err(ReadError::Unmapped {
                addr,
                len: buf.len(),
            });
        }
        let n = self.data.len() as u64;
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.data[((addr - BASE + i as u64) % n) as usize];
        }
        Ok(())
    }

    fn mapped_files(&self) -> &[MappedFile] {
        &[]
    }

    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError> {
        Ok(Vec::new())
    }

    fn kind(&self) -> TargetKind {
        TargetKind::Synthetic
    }

    fn native_layout(&self) -> Option<DataLayout> {
        None
    }
}

/// Target memory holding `data`: at [`BASE`] only (exact bounds, reads past the end fail),
/// or repeated over the whole window when `wrap` is set.
pub fn memory(layout: DataLayout, data: &[u8], wrap: bool) -> Target {
    if wrap {
        return Target::new(
            Arc::new(WrapMemory {
                data: data.to_vec(),
            }),
            layout,
        );
    }
    let mut b = MemoryBuilder::new(layout);
    if !data.is_empty() {
        b.region(BASE, data.len()).bytes(0, data);
    }
    b.into_target()
}

/// A descriptor made from fixed JSON (a test bug if it does not parse).
pub fn descriptor(layout: DataLayout, text: &str, pointer_data: &[u64]) -> DataDescriptor {
    let physical = json::parse("fuzz", text.as_bytes()).expect("fuzz descriptor parses");
    let mut d = DataDescriptor::new(layout);
    d.merge("fuzz", &physical, pointer_data)
        .expect("fuzz descriptor merges");
    d
}
