//! The target layer: reading the memory of a live process, of a core dump, or of memory
//! laid out by a test.
//!
//! Every reader implements [`MemorySource`], which only knows how to copy bytes and which
//! files are mapped. [`Target`] wraps a source with the target's data layout (pointer size
//! and endianness) and gives typed reads on top. The `unsafe` of this layer lives in `sys.rs`,
//! the audited file of system calls and memory maps (the crate denies `unsafe` elsewhere,
//! except in `process::perf_sys`).

pub mod builder;
pub mod cache;
pub mod callback;
pub mod core_dump;
mod core_images;
pub mod elf_image;
mod error;
pub mod file_bytes;
pub mod live;
#[allow(unsafe_code)]
pub(crate) mod sys;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use error::{OpenError, ReadError};

use crate::limits::{Limit, Limits};

/// Byte order of the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endian {
    /// Least significant byte first.
    Little,
    /// Most significant byte first.
    Big,
}

/// Pointer size and byte order of the target: everything typed reads need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DataLayout {
    /// Size of a pointer in bytes: 4 or 8.
    pub pointer_size: u8,
    /// Byte order.
    pub endian: Endian,
}

impl DataLayout {
    /// 64-bit little-endian, the layout of linux-x64 and linux-arm64.
    pub const LE64: DataLayout = DataLayout {
        pointer_size: 8,
        endian: Endian::Little,
    };
    /// 32-bit little-endian.
    pub const LE32: DataLayout = DataLayout {
        pointer_size: 4,
        endian: Endian::Little,
    };
    /// 64-bit big-endian.
    pub const BE64: DataLayout = DataLayout {
        pointer_size: 8,
        endian: Endian::Big,
    };
    /// 32-bit big-endian.
    pub const BE32: DataLayout = DataLayout {
        pointer_size: 4,
        endian: Endian::Big,
    };

    /// The four combinations tests run over.
    pub const ALL: [DataLayout; 4] = [Self::LE64, Self::LE32, Self::BE64, Self::BE32];
}

/// A range of the target's address space backed by a file (from `/proc/PID/maps` or a
/// core's `NT_FILE` note).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedFile {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset in the file of the byte mapped at `start`.
    pub file_offset: u64,
    /// Path of the file, as the target saw it.
    pub path: PathBuf,
}

/// One thread of the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Kernel thread id.
    pub tid: i32,
    /// Instruction pointer, when known (cores carry registers; a live process without
    /// ptrace does not expose them).
    pub ip: Option<u64>,
    /// Stack pointer, when known.
    pub sp: Option<u64>,
    /// All registers of the thread, when known (a core's `NT_PRSTATUS`, a ptrace
    /// snapshot).
    pub context: Option<crate::regs::Registers>,
}

/// What kind of target a source reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetKind {
    /// A live process.
    Live {
        /// Its process id.
        pid: i32,
    },
    /// An ELF core dump file.
    CoreDump {
        /// Path of the core file.
        path: PathBuf,
    },
    /// Memory laid out in this process (tests).
    Synthetic,
    /// Memory a host program (a debugger) reads for `cdac` through a callback.
    Host,
}

/// A source of target memory.
///
/// Implementations copy bytes; they never write to the target. Reads either fill the whole
/// buffer or fail: a short read is an error.
pub trait MemorySource: Send + Sync {
    /// Fills `buf` with the bytes at `addr`.
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError>;

    /// Fills several buffers in one go. Sources that can batch (a live process, with one
    /// `process_vm_readv` of many iovecs) override this; the default reads one by one.
    /// On failure the error names the first address that could not be read.
    fn read_many(&self, requests: &mut [(u64, &mut [u8])]) -> Result<(), ReadError> {
        for (addr, buf) in requests.iter_mut() {
            self.read_exact(*addr, buf)?;
        }
        Ok(())
    }

    /// The files mapped into the target, sorted by start address.
    fn mapped_files(&self) -> &[MappedFile];

    /// The target's threads.
    fn threads(&self) -> Result<Vec<ThreadInfo>, ReadError>;

    /// Where the target's files are here, when not at the paths the target uses (a
    /// process in a mount namespace of its own: its `/proc/PID/root`); `None` otherwise.
    fn file_root(&self) -> Option<std::path::PathBuf> {
        None
    }

    /// The target's thread ids as its own PID namespace numbers them (the ids its runtime
    /// records), each mapped to the id of the same thread in [`MemorySource::threads`];
    /// empty where they are the same (no namespace between reader and target, a dump).
    fn namespace_thread_ids(&self) -> std::collections::HashMap<u64, i32> {
        std::collections::HashMap::new()
    }

    /// What is being read.
    fn kind(&self) -> TargetKind;

    /// The layout the source itself knows (from a core's ELF header, or the live
    /// process's executable), if any.
    fn native_layout(&self) -> Option<DataLayout>;

    /// Drops cached bytes, so that later reads see the target's current memory.
    fn flush(&self) {}

    /// The signal that made the target dump core, and the thread it hit: known for core
    /// dumps that record it (`NT_SIGINFO`, or the dumping thread's `pr_cursig`), `None`
    /// otherwise (live processes, synthetic memory).
    fn crash_signal(&self) -> Option<CrashSignal> {
        None
    }
}

/// The signal a core dump was written for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashSignal {
    /// The thread that received the signal: the one whose `NT_PRSTATUS` carries it (the
    /// first when every thread does, as in kernel cores).
    pub tid: i32,
    /// Signal number (`si_signo`, or `pr_cursig` when the core has no `NT_SIGINFO`).
    pub signo: i32,
    /// `si_code`: for a fault, why (`SEGV_MAPERR` = 1, `SEGV_ACCERR` = 2, ...); for a sent
    /// signal, how it was sent (`SI_USER` = 0, `SI_TKILL` = -6, ...).
    pub code: i32,
    /// `si_errno`.
    pub errno: i32,
    /// The faulting address (`si_addr`) of SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGTRAP
    /// raised by the CPU (`si_code` > 0).
    pub fault_addr: Option<u64>,
    /// The process that sent the signal (`si_pid`), for a signal sent by `kill`, `tgkill`
    /// or `sigqueue` (`si_code` <= 0): `abort` sends SIGABRT to its own process.
    pub sender_pid: Option<i32>,
    /// True when the details come from `NT_SIGINFO`; false when only `pr_cursig` (and the
    /// `si_code` of `NT_PRSTATUS`) gave them.
    pub from_siginfo: bool,
}

impl CrashSignal {
    /// The signal's name ("SIGSEGV", "SIGABRT", ...), or `None` for an unknown number.
    pub fn name(&self) -> Option<&'static str> {
        signal_name(self.signo)
    }
}

/// The name of Linux signal `signo` ("SIGSEGV"), or `None` for an unknown number or a
/// real-time signal.
pub fn signal_name(signo: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signo)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| NAMES.get(i).copied())
}

/// Maps a regular file read-only (never a FIFO or a device), for callers that need bytes
/// of module files on disk.
pub fn map_regular_file(path: &std::path::Path) -> std::io::Result<memmap2::Mmap> {
    sys::map_regular_file(path)
}

/// Target memory with its data layout: typed, endian-aware reads, bounded by [`Limits`].
///
/// Clones share one count of the bytes read, so that a command's total is bounded however
/// many views of the target it makes.
#[derive(Clone)]
pub struct Target {
    source: Arc<dyn MemorySource>,
    layout: DataLayout,
    limits: Limits,
    bytes_read: Arc<AtomicU64>,
    damage: Arc<std::sync::Mutex<Vec<String>>>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("kind", &self.source.kind())
            .field("layout", &self.layout)
            .finish()
    }
}

impl Target {
    /// Wraps a source with the layout to read it with.
    pub fn new(source: Arc<dyn MemorySource>, layout: DataLayout) -> Target {
        Target {
            source,
            layout,
            limits: Limits::default(),
            bytes_read: Arc::new(AtomicU64::new(0)),
            damage: Arc::default(),
        }
    }

    /// Records damage found in the target's memory that readers worked around (a module
    /// image that differs from its file, say): answers that depend on the damaged parts
    /// may be incomplete, and commands say so. Returns whether this is news (the same
    /// words are recorded once, for this target and its clones).
    pub fn note_damage(&self, what: String) -> bool {
        let mut damage = self.damage.lock().unwrap_or_else(|p| p.into_inner());
        if damage.contains(&what) {
            return false;
        }
        damage.push(what);
        true
    }

    /// The damage recorded so far ([`Target::note_damage`]).
    pub fn damage_noted(&self) -> Vec<String> {
        self.damage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The same memory read with another layout (for example once a contract descriptor
    /// has told the real pointer size).
    pub fn with_layout(&self, layout: DataLayout) -> Target {
        Target {
            layout,
            ..self.clone()
        }
    }

    /// The same memory read under other limits (the count of bytes read goes on).
    pub fn with_limits(mut self, limits: Limits) -> Target {
        self.limits = limits;
        self
    }

    /// The limits reads and walks over this target obey.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Bytes read so far through this target and its clones (as requested: cached bytes
    /// count too).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// Starts counting bytes read from zero again (between commands of one session).
    pub fn reset_bytes_read(&self) {
        self.bytes_read.store(0, Ordering::Relaxed);
    }

    /// The layout reads use.
    pub fn layout(&self) -> DataLayout {
        self.layout
    }

    /// Pointer size in bytes.
    pub fn pointer_size(&self) -> u8 {
        self.layout.pointer_size
    }

    /// The underlying source.
    pub fn source(&self) -> &Arc<dyn MemorySource> {
        &self.source
    }

    /// Where the target's file `path` is on this machine: under the target's own root
    /// ([`MemorySource::file_root`]) when it is there, else at `path`.
    pub fn local_path(&self, path: &std::path::Path) -> std::path::PathBuf {
        match (self.source.file_root(), path.strip_prefix("/")) {
            (Some(root), Ok(relative)) if root.join(relative).exists() => root.join(relative),
            _ => path.to_path_buf(),
        }
    }

    /// Drops cached bytes, so that later reads of a live process see its current memory,
    /// and starts the count of bytes read (the total-read limit) from zero. (Reads of a
    /// running process are a moving snapshot: call this between commands that must see
    /// fresh data.)
    pub fn flush(&self) {
        self.source.flush();
        self.reset_bytes_read();
    }

    /// The signal that made the target dump core, and the thread it hit (core dumps that
    /// record it; `None` for live processes).
    pub fn crash_signal(&self) -> Option<CrashSignal> {
        self.source.crash_signal()
    }

    /// Files mapped into the target.
    pub fn mapped_files(&self) -> &[MappedFile] {
        self.source.mapped_files()
    }

    /// Fills `buf` from `addr`.
    pub fn read_into(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if buf.is_empty() {
            return Ok(());
        }
        check_range(addr, buf.len())?;
        let len = buf.len() as u64;
        // A request that would pass the budget is refused without being charged, and a
        // read that fails costs nothing: one absurd length read from damaged data must not
        // use up the budget every later read of the command needs.
        let total = self.bytes_read.load(Ordering::Relaxed).saturating_add(len);
        if total > self.limits.max_total_read_bytes {
            return Err(ReadError::LimitExceeded {
                limit: Limit::TotalRead,
                addr,
                value: total,
                cap: self.limits.max_total_read_bytes,
            });
        }
        self.source.read_exact(addr, buf)?;
        self.bytes_read.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Reads `len` bytes at `addr` into a new vector (at most [`Limits::max_read_bytes`]).
    pub fn read_bytes(&self, addr: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        if len as u64 > self.limits.max_read_bytes {
            return Err(ReadError::LimitExceeded {
                limit: Limit::ReadSize,
                addr,
                value: len as u64,
                cap: self.limits.max_read_bytes,
            });
        }
        let mut buf = vec![0u8; len];
        self.read_into(addr, &mut buf)?;
        Ok(buf)
    }

    fn read_array<const N: usize>(&self, addr: u64) -> Result<[u8; N], ReadError> {
        let mut buf = [0u8; N];
        self.read_into(addr, &mut buf)?;
        Ok(buf)
    }

    /// Reads a `u8`.
    pub fn read_u8(&self, addr: u64) -> Result<u8, ReadError> {
        Ok(self.read_array::<1>(addr)?[0])
    }

    /// Reads a `u16` in target byte order.
    pub fn read_u16(&self, addr: u64) -> Result<u16, ReadError> {
        let b = self.read_array::<2>(addr)?;
        Ok(decode_unsigned(&b, self.layout.endian) as u16)
    }

    /// Reads a `u32` in target byte order.
    pub fn read_u32(&self, addr: u64) -> Result<u32, ReadError> {
        let b = self.read_array::<4>(addr)?;
        Ok(decode_unsigned(&b, self.layout.endian) as u32)
    }

    /// Reads a `u64` in target byte order.
    pub fn read_u64(&self, addr: u64) -> Result<u64, ReadError> {
        let b = self.read_array::<8>(addr)?;
        Ok(decode_unsigned(&b, self.layout.endian))
    }

    /// Reads an `i32` in target byte order.
    pub fn read_i32(&self, addr: u64) -> Result<i32, ReadError> {
        Ok(self.read_u32(addr)? as i32)
    }

    /// Reads an `i64` in target byte order.
    pub fn read_i64(&self, addr: u64) -> Result<i64, ReadError> {
        Ok(self.read_u64(addr)? as i64)
    }

    /// Reads a pointer-sized unsigned value (a pointer or `nuint`).
    pub fn read_pointer(&self, addr: u64) -> Result<u64, ReadError> {
        match self.layout.pointer_size {
            4 => Ok(u64::from(self.read_u32(addr)?)),
            _ => self.read_u64(addr),
        }
    }

    /// Reads a pointer-sized signed value (`nint`), sign-extended.
    pub fn read_nint(&self, addr: u64) -> Result<i64, ReadError> {
        match self.layout.pointer_size {
            4 => Ok(i64::from(self.read_i32(addr)?)),
            _ => self.read_i64(addr),
        }
    }

    /// Reads `count` pointers starting at `addr`, in one read.
    pub fn read_pointers(&self, addr: u64, count: usize) -> Result<Vec<u64>, ReadError> {
        let size = usize::from(self.layout.pointer_size);
        let len = count.checked_mul(size).ok_or(ReadError::AddressOverflow {
            addr,
            len: usize::MAX,
        })?;
        let bytes = self.read_bytes(addr, len)?;
        Ok(bytes
            .chunks_exact(size)
            .map(|c| decode_unsigned(c, self.layout.endian))
            .collect())
    }

    /// Reads a NUL-terminated byte string of at most `max_len` bytes (terminator
    /// excluded). Reads in small chunks so that a string near the end of a mapping works.
    pub fn read_c_bytes(&self, addr: u64, max_len: usize) -> Result<Vec<u8>, ReadError> {
        const CHUNK: u64 = 64;
        let mut out = Vec::new();
        let mut cur = addr;
        loop {
            // Never cross a chunk boundary so a read does not run into an unmapped page.
            let room = CHUNK - (cur % CHUNK);
            let want =
                room.min(max_len.saturating_add(1).saturating_sub(out.len()) as u64) as usize;
            let mut buf = [0u8; CHUNK as usize];
            self.read_into(cur, &mut buf[..want])?;
            if let Some(nul) = buf[..want].iter().position(|&b| b == 0) {
                out.extend_from_slice(&buf[..nul]);
                return Ok(out);
            }
            out.extend_from_slice(&buf[..want]);
            if out.len() > max_len {
                return Err(ReadError::string_too_long(addr, max_len));
            }
            cur = cur
                .checked_add(want as u64)
                .ok_or(ReadError::AddressOverflow {
                    addr,
                    len: out.len(),
                })?;
        }
    }

    /// Reads a NUL-terminated UTF-8 string of at most `max_len` bytes.
    pub fn read_c_string(&self, addr: u64, max_len: usize) -> Result<String, ReadError> {
        let bytes = self.read_c_bytes(addr, max_len)?;
        String::from_utf8(bytes).map_err(|_| ReadError::InvalidString {
            addr,
            encoding: "UTF-8",
        })
    }

    /// Reads a NUL-terminated UTF-16 string (target byte order) of at most `max_chars`
    /// code units.
    pub fn read_utf16_c_string(&self, addr: u64, max_chars: usize) -> Result<String, ReadError> {
        let mut units = Vec::new();
        let mut cur = addr;
        loop {
            let unit = self.read_u16(cur)?;
            if unit == 0 {
                break;
            }
            if units.len() == max_chars {
                return Err(ReadError::string_too_long(addr, max_chars));
            }
            units.push(unit);
            cur = cur.checked_add(2).ok_or(ReadError::AddressOverflow {
                addr,
                len: units.len() * 2,
            })?;
        }
        String::from_utf16(&units).map_err(|_| ReadError::InvalidString {
            addr,
            encoding: "UTF-16",
        })
    }

    /// Reads a UTF-16 string of exactly `chars` code units (target byte order), such as a
    /// length-prefixed managed string.
    pub fn read_utf16(&self, addr: u64, chars: usize) -> Result<String, ReadError> {
        let len = chars.checked_mul(2).ok_or(ReadError::AddressOverflow {
            addr,
            len: usize::MAX,
        })?;
        let bytes = self.read_bytes(addr, len)?;
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|c| decode_unsigned(c, self.layout.endian) as u16)
            .collect();
        String::from_utf16(&units).map_err(|_| ReadError::InvalidString {
            addr,
            encoding: "UTF-16",
        })
    }
}

/// Checks that `[addr, addr + len)` fits in a 64-bit address space. Every source calls it
/// first, so that address arithmetic inside sources cannot overflow.
pub fn check_range(addr: u64, len: usize) -> Result<(), ReadError> {
    if len > 0 && addr.checked_add(len as u64 - 1).is_none() {
        return Err(ReadError::AddressOverflow { addr, len });
    }
    Ok(())
}

/// Decodes 1 to 8 bytes as an unsigned integer in the given byte order.
pub fn decode_unsigned(bytes: &[u8], endian: Endian) -> u64 {
    let fold = |acc: u64, b: &u8| (acc << 8) | u64::from(*b);
    match endian {
        Endian::Big => bytes.iter().fold(0, fold),
        Endian::Little => bytes.iter().rev().fold(0, fold),
    }
}

/// The memory an unwinder reads: stack slots and saved registers. A [`Target`] is one; a
/// stack copied while a thread was stopped, over the target, is another.
pub trait StackMemory {
    /// The 8 bytes at `addr`, little-endian.
    fn read_u64(&self, addr: u64) -> Result<u64, ReadError>;
}

impl StackMemory for Target {
    fn read_u64(&self, addr: u64) -> Result<u64, ReadError> {
        Target::read_u64(self, addr)
    }
}

#[cfg(test)]
mod tests {
    use super::builder::MemoryBuilder;
    use super::*;

    fn memory() -> Target {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        b.region(0x1000, 0x1000).bytes(0, b"abcdefgh\0").u64(64, 7);
        b.into_target()
    }

    #[test]
    fn clones_share_one_count_and_the_total_limit_names_itself() {
        let t = memory().with_limits(Limits {
            max_total_read_bytes: 24,
            ..Limits::default()
        });
        let view = t.with_layout(DataLayout::LE32);
        assert_eq!(t.read_u64(0x1040).ok(), Some(7));
        assert_eq!(view.read_u64(0x1040).ok(), Some(7));
        assert_eq!((t.bytes_read(), view.bytes_read()), (16, 16));
        t.read_u64(0x1040).expect("24 bytes: at the limit");
        match view.read_u8(0x1040) {
            Err(e @ ReadError::LimitExceeded { .. }) => {
                assert_eq!(e.limit(), Some(Limit::TotalRead));
                assert!(
                    e.to_string().contains("(--max-total-read), which is 24"),
                    "{e}"
                );
            }
            other => panic!("{other:?}"),
        }
        t.reset_bytes_read();
        assert_eq!(view.read_u8(0x1000).ok(), Some(b'a'));
        // A flush between commands starts the count again too.
        t.read_u64(0x1040).expect("1 + 8 bytes");
        t.read_u64(0x1040).expect("1 + 16 bytes");
        assert!(t.read_u64(0x1040).is_err(), "1 + 24 bytes");
        view.flush();
        assert_eq!(t.read_u64(0x1040).ok(), Some(7));
        assert_eq!(t.bytes_read(), 8);
    }

    #[test]
    fn refused_and_failed_reads_cost_nothing() {
        let t = memory().with_limits(Limits {
            max_total_read_bytes: 24,
            ..Limits::default()
        });
        // A length read from damaged data: refused, and not charged.
        let mut huge = vec![0u8; 4096];
        let e = t.read_into(0x1000, &mut huge).expect_err("past the budget");
        assert_eq!(e.limit(), Some(Limit::TotalRead));
        // A read of memory that is not there fails for its own reason, uncharged.
        assert!(matches!(
            t.read_u64(0x9000),
            Err(ReadError::Unmapped { .. })
        ));
        assert_eq!(t.bytes_read(), 0);
        for _ in 0..3 {
            assert_eq!(t.read_u64(0x1040).ok(), Some(7));
        }
        assert_eq!(t.bytes_read(), 24);
    }

    #[test]
    fn read_size_and_string_limits_name_themselves() {
        let t = memory().with_limits(Limits {
            max_read_bytes: 8,
            ..Limits::default()
        });
        assert_eq!(t.read_bytes(0x1000, 8).ok(), Some(b"abcdefgh".to_vec()));
        let e = t.read_bytes(0x1000, 9).expect_err("over the read size");
        assert_eq!(e.limit(), Some(Limit::ReadSize));
        assert_eq!(t.read_c_string(0x1000, 8).ok().as_deref(), Some("abcdefgh"));
        let e = t.read_c_string(0x1000, 7).expect_err("no NUL within 7");
        assert_eq!(e.limit(), Some(Limit::StringLength));
        assert!(
            e.to_string().contains("(--max-string-length), which is 7"),
            "{e}"
        );
        // Not a limit: memory that is not there.
        assert_eq!(t.read_u8(0x9000).expect_err("unmapped").limit(), None);
    }
}
