//! The `unsafe` of the sampling profiler's kernel interface: `perf_event_open`, the
//! event's ring buffer mapped into our memory, and the acquire/release handshake on its
//! head and tail. Everything above this file sees safe types; each block states why it is
//! sound. The records are parsed (safely) by [`super::perf_sampler`].

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

use perf_event_open_sys as sys;

/// What one sampling event is asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventConfig {
    /// Samples per second (the kernel adjusts the period to reach it).
    pub frequency: u64,
    /// `PERF_SAMPLE_*` bits.
    pub sample_type: u64,
    /// Which user registers each sample carries (`PERF_REG_X86_*` bits).
    pub regs_user: u64,
    /// Bytes of the user stack each sample copies (a multiple of 8).
    pub stack_user: u32,
    /// Leave out samples taken while the thread ran in the kernel (needed when
    /// `perf_event_paranoid` forbids kernel profiling to this user).
    pub exclude_kernel: bool,
}

/// Opens a CPU-clock sampling event on thread `tid` (any CPU), enabled at once.
pub(crate) fn open_cpu_clock(tid: i32, config: &EventConfig) -> io::Result<OwnedFd> {
    let mut attr = sys::bindings::perf_event_attr {
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        config: u64::from(sys::bindings::PERF_COUNT_SW_CPU_CLOCK),
        sample_type: config.sample_type,
        sample_regs_user: config.regs_user,
        sample_stack_user: config.stack_user,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_freq = config.frequency;
    attr.set_freq(1);
    attr.set_exclude_kernel(u64::from(config.exclude_kernel));
    attr.set_exclude_hv(1);
    // One wakeup per sample would cost a context switch each; the reader polls instead.
    attr.__bindgen_anon_2.wakeup_events = 0;
    // SAFETY: `attr` is a fully initialised perf_event_attr whose `size` is its own size;
    // the kernel only reads it. The other arguments are plain integers.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            tid,
            -1,
            -1,
            u64::from(sys::bindings::PERF_FLAG_FD_CLOEXEC) as _,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A perf event's ring buffer, mapped read-write (the reader writes `data_tail`).
pub(crate) struct RingMap {
    base: *mut u8,
    len: usize,
    data_offset: u64,
    data_size: u64,
    // Keeps the event open as long as its buffer is mapped.
    _fd: OwnedFd,
}

// SAFETY: the mapping is owned by this value alone; the kernel writes the data area and
// `data_head` concurrently, which the acquire/release protocol below accounts for, not
// Rust aliasing rules (we only ever copy bytes out through raw pointers).
unsafe impl Send for RingMap {}

impl RingMap {
    /// Maps `1 + data_pages` pages of `fd`'s ring buffer; `data_pages` must be a power of
    /// two.
    pub(crate) fn map(fd: OwnedFd, data_pages: usize) -> io::Result<RingMap> {
        let page = page_size();
        let len = page * (1 + data_pages);
        // SAFETY: a fresh shared mapping of the event's buffer at an address the kernel
        // chooses; nothing in our address space is replaced.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        let meta = base.cast::<sys::bindings::perf_event_mmap_page>();
        // SAFETY: the first page is the kernel's perf_event_mmap_page; these fields are set
        // before mmap returns and do not change afterwards.
        let (data_offset, data_size) = unsafe { ((*meta).data_offset, (*meta).data_size) };
        // Kernels before 4.1 leave these zero: the data area then starts at the next page.
        let (data_offset, data_size) = if data_size == 0 {
            (page as u64, (page * data_pages) as u64)
        } else {
            (data_offset, data_size)
        };
        if data_offset
            .checked_add(data_size)
            .is_none_or(|end| end > len as u64)
        {
            // SAFETY: the mapping made above, unmapped once; nothing refers to it.
            unsafe { libc::munmap(base.cast(), len) };
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the kernel's ring buffer layout ({data_offset:#x} + {data_size:#x}) exceeds the {len:#x}-byte mapping"),
            ));
        }
        Ok(RingMap {
            base,
            len,
            data_offset,
            data_size,
            _fd: fd,
        })
    }

    /// Copies the records written since the last call into `out` (appended) and hands the
    /// space back to the kernel. Returns the number of bytes copied.
    pub(crate) fn drain_into(&mut self, out: &mut Vec<u8>) -> usize {
        let meta = self.base.cast::<sys::bindings::perf_event_mmap_page>();
        // SAFETY: `meta` points at the mapped control page; `data_head` is written by the
        // kernel, so it is read volatile and followed by an acquire fence (the kernel's
        // documented protocol) before the data it covers is read.
        let head = unsafe { std::ptr::addr_of!((*meta).data_head).read_volatile() };
        fence(Ordering::Acquire);
        // SAFETY: `data_tail` is only written by us.
        let tail = unsafe { std::ptr::addr_of!((*meta).data_tail).read_volatile() };
        let available = head.wrapping_sub(tail).min(self.data_size);
        let size = self.data_size;
        let mut copied = 0u64;
        while copied < available {
            let at = (tail.wrapping_add(copied)) % size;
            let run = (size - at).min(available - copied);
            let from = self.data_offset + at;
            debug_assert!((from + run) as usize <= self.len);
            // SAFETY: `from .. from + run` lies inside the data area of the mapping
            // (`at < size`, `run <= size - at`), which the kernel finished writing before
            // it published `head` (acquire fence above).
            let bytes =
                unsafe { std::slice::from_raw_parts(self.base.add(from as usize), run as usize) };
            out.extend_from_slice(bytes);
            copied += run;
        }
        fence(Ordering::Release);
        // SAFETY: writing `data_tail` (after our reads, release fence) hands the space back;
        // the field is ours to write.
        unsafe {
            std::ptr::addr_of_mut!((*meta).data_tail).write_volatile(tail.wrapping_add(available))
        };
        available as usize
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `map`, unmapped once here.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// The system's page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}
