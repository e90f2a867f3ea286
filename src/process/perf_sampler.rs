//! Samples a live process with the kernel's perf events, without stopping it: a CPU-clock
//! event on every thread (threads that start later are followed on each
//! [`PerfSampler::follow_new_threads`]), each sample carrying the thread's user registers
//! and a copy of the top of its user stack, which the stack walker unwinds later as if the
//! thread were still there. The system calls are in `perf_sys`; this file parses what the
//! kernel writes, every length checked.

use std::collections::{HashMap, HashSet};
use std::io;

use thiserror::Error;

use super::perf_sys::{self, EventConfig, RingMap};
use super::thread_snapshot::{list_threads, SnapshotError, StackCopy};
use crate::memory::live::process_gone;

// PERF_SAMPLE_* bits asked for; the record layout below follows their order.
const SAMPLE_IP: u64 = 1 << 0;
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_REGS_USER: u64 = 1 << 12;
const SAMPLE_STACK_USER: u64 = 1 << 13;

// PERF_RECORD_* types read.
const RECORD_LOST: u32 = 2;
const RECORD_THROTTLE: u32 = 5;
const RECORD_SAMPLE: u32 = 9;

// The record header's `misc` says where the sample was taken (PERF_RECORD_MISC_*).
const CPUMODE_MASK: u16 = 7;
const CPUMODE_KERNEL: u16 = 1;

// x86-64 perf register numbers (asm/perf_regs.h) of the registers the unwinders use. The
// kernel writes the asked registers in increasing number order.
const REG_BX: u32 = 1;
const REG_BP: u32 = 6;
const REG_SP: u32 = 7;
const REG_IP: u32 = 8;
const REG_R12: u32 = 20;
const REG_R13: u32 = 21;
const REG_R14: u32 = 22;
const REG_R15: u32 = 23;
const REGS: [u32; 8] = [
    REG_BX, REG_BP, REG_SP, REG_IP, REG_R12, REG_R13, REG_R14, REG_R15,
];

/// Largest user-stack copy the kernel takes per sample: a record's size is 16 bits.
pub const MAX_STACK_BYTES: u32 = 60 * 1024;

/// How to sample.
#[derive(Debug, Clone, Copy)]
pub struct SamplerOptions {
    /// Samples per second of CPU time, per thread.
    pub frequency: u64,
    /// Bytes of user stack copied with each sample (rounded down to a multiple of 8, at
    /// most [`MAX_STACK_BYTES`]).
    pub stack_bytes: u32,
    /// Pages of ring buffer per thread (a power of two).
    pub ring_pages: usize,
}

impl Default for SamplerOptions {
    /// 99 Hz with 16 KiB of stack per sample.
    fn default() -> Self {
        SamplerOptions::for_rate(99, 16 * 1024)
    }
}

impl SamplerOptions {
    /// Options for `frequency` samples per second of `stack_bytes` each, with ring buffers
    /// that hold 50 ms of one busy thread's samples (so that a reader delayed by a loaded
    /// machine loses none), at least 16 pages.
    pub fn for_rate(frequency: u64, stack_bytes: u32) -> SamplerOptions {
        let record = u64::from(stack_bytes.min(MAX_STACK_BYTES)) + 512;
        let bytes = frequency.max(1).saturating_mul(record) / 20;
        let pages = usize::try_from(bytes.div_ceil(4096))
            .unwrap_or(usize::MAX)
            .clamp(16, 1024)
            .next_power_of_two();
        SamplerOptions {
            frequency,
            stack_bytes,
            ring_pages: pages,
        }
    }
}

/// The user registers of a sample that the unwinders need.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserRegisters {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// rbx.
    pub bx: u64,
    /// r12 to r15.
    pub r12_r15: [u64; 4],
}

/// One sample of one thread.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The thread's id.
    pub tid: i32,
    /// When it was taken (the kernel's perf clock, nanoseconds).
    pub time_ns: u64,
    /// The thread was running kernel code (a system call, a fault): the registers are those
    /// the user code had when it entered the kernel.
    pub in_kernel: bool,
    /// The thread's user registers.
    pub regs: UserRegisters,
    /// The top of its user stack, from `regs.sp` up.
    pub stack: StackCopy,
}

/// Counts kept by a sampler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SamplerStats {
    /// Samples parsed.
    pub samples: u64,
    /// Samples without user registers (the thread was in a kernel-only state).
    pub without_registers: u64,
    /// Samples the kernel dropped because a ring buffer was full.
    pub lost: u64,
    /// Times the kernel throttled an event (too many samples for its CPU budget).
    pub throttled: u64,
    /// Threads sampled so far (including those that exited).
    pub threads_followed: u64,
    /// Records too short or malformed to parse.
    pub malformed: u64,
}

/// Why sampling could not start or go on.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SamplerError {
    /// The kernel refused perf events to this user.
    #[error(
        "perf events are not permitted here ({source}): kernel.perf_event_paranoid is {}; \
         run as root or with CAP_PERFMON, or lower it (sysctl kernel.perf_event_paranoid=2 \
         lets a user sample its own processes); or use the ptrace sampler (--sampler ptrace), \
         which stops each thread briefly per sample",
         .paranoid.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into())
    )]
    NotPermitted {
        /// `/proc/sys/kernel/perf_event_paranoid`.
        paranoid: Option<i32>,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The process does not exist (or has exited).
    #[error("process {pid} does not exist")]
    NoProcess {
        /// The process id.
        pid: i32,
    },
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: io::Error,
    },
}

impl SamplerError {
    /// Whether perf events cannot be had here at all (refused, or not in this kernel or
    /// sandbox), as opposed to a problem with the process: a caller may fall back to
    /// another sampler.
    pub fn perf_unavailable(&self) -> bool {
        match self {
            SamplerError::NotPermitted { .. } => true,
            SamplerError::Io { source, .. } => matches!(
                source.raw_os_error(),
                Some(libc::ENOSYS | libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV)
            ),
            SamplerError::NoProcess { .. } => false,
        }
    }
}

/// Samples every thread of one process.
pub struct PerfSampler {
    pid: i32,
    config: EventConfig,
    ring_pages: usize,
    rings: HashMap<i32, RingMap>,
    /// Rings of threads that exited, read once more by the next drain, then dropped.
    retiring: Vec<RingMap>,
    refused: HashSet<i32>,
    bytes: Vec<u8>,
    stats: SamplerStats,
}

impl std::fmt::Debug for PerfSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfSampler")
            .field("pid", &self.pid)
            .field("threads", &self.rings.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// `kernel.perf_event_paranoid`, when readable.
pub fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The ids of the threads of `pid` now ([`SamplerError::NoProcess`] once it has exited,
/// zombie included).
pub fn thread_ids(pid: i32) -> Result<Vec<i32>, SamplerError> {
    if process_gone(pid) {
        return Err(SamplerError::NoProcess { pid });
    }
    list_threads(pid).map_err(|e| match e {
        SnapshotError::NoSuchProcess { .. } => SamplerError::NoProcess { pid },
        other => SamplerError::Io {
            context: format!("listing the threads of process {pid}"),
            source: io::Error::other(other.to_string()),
        },
    })
}

impl PerfSampler {
    /// Starts sampling every thread of `pid`. Kernel-mode samples are kept when the
    /// kernel allows it, else left out (see [`PerfSampler::excludes_kernel`]).
    pub fn open(pid: i32, options: &SamplerOptions) -> Result<PerfSampler, SamplerError> {
        let mask = REGS.iter().fold(0u64, |m, r| m | 1 << r);
        let stack = options.stack_bytes.min(MAX_STACK_BYTES) & !7;
        let ring_pages = options.ring_pages.clamp(1, 4096).next_power_of_two();
        let mut sampler = PerfSampler {
            pid,
            config: EventConfig {
                frequency: options.frequency.max(1),
                sample_type: SAMPLE_IP
                    | SAMPLE_TID
                    | SAMPLE_TIME
                    | SAMPLE_REGS_USER
                    | SAMPLE_STACK_USER,
                regs_user: mask,
                stack_user: stack,
                exclude_kernel: false,
            },
            ring_pages,
            rings: HashMap::new(),
            retiring: Vec::new(),
            refused: HashSet::new(),
            bytes: Vec::new(),
            stats: SamplerStats::default(),
        };
        let added = sampler.follow_new_threads()?;
        if added == 0 {
            return Err(SamplerError::NoProcess { pid });
        }
        Ok(sampler)
    }

    /// The sampled process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether samples taken in the kernel are left out (the kernel refused them).
    pub fn excludes_kernel(&self) -> bool {
        self.config.exclude_kernel
    }

    /// Threads being sampled now.
    pub fn threads(&self) -> usize {
        self.rings.len()
    }

    /// The counts so far.
    pub fn stats(&self) -> SamplerStats {
        self.stats
    }

    /// Whether thread `tid` is being sampled.
    pub fn is_following(&self, tid: i32) -> bool {
        self.rings.contains_key(&tid)
    }

    /// Starts sampling threads that appeared since the last call, and stops those that
    /// exited (their last samples are still handed out by the next [`PerfSampler::drain`]).
    /// Returns how many threads were added. [`SamplerError::NoProcess`] once the process is
    /// gone.
    pub fn follow_new_threads(&mut self) -> Result<usize, SamplerError> {
        let tids = thread_ids(self.pid)?;
        let live: HashSet<i32> = tids.iter().copied().collect();
        let gone: Vec<i32> = self
            .rings
            .keys()
            .copied()
            .filter(|tid| !live.contains(tid))
            .collect();
        for tid in gone {
            if let Some(ring) = self.rings.remove(&tid) {
                self.retiring.push(ring);
            }
        }
        self.refused.retain(|tid| live.contains(tid));
        let mut added = 0;
        for tid in tids {
            if self.rings.contains_key(&tid) || self.refused.contains(&tid) {
                continue;
            }
            match self.open_thread(tid) {
                Ok(ring) => {
                    self.rings.insert(tid, ring);
                    self.stats.threads_followed += 1;
                    added += 1;
                }
                // The thread exited between the listing and the open.
                Err(OpenFailure::Event(e)) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(OpenFailure::Event(e))
                    if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) =>
                {
                    return Err(SamplerError::NotPermitted {
                        paranoid: perf_event_paranoid(),
                        source: e,
                    })
                }
                Err(OpenFailure::Event(e) | OpenFailure::Buffer(e)) => {
                    // One thread that cannot be sampled (e.g. out of locked memory for its
                    // buffer) does not stop the others; it is not retried.
                    self.refused.insert(tid);
                    if self.rings.is_empty() {
                        return Err(SamplerError::Io {
                            context: format!("sampling thread {tid} of process {}", self.pid),
                            source: e,
                        });
                    }
                }
            }
        }
        Ok(added)
    }

    fn open_thread(&mut self, tid: i32) -> Result<RingMap, OpenFailure> {
        let fd = match perf_sys::open_cpu_clock(tid, &self.config) {
            Err(e)
                if !self.config.exclude_kernel
                    && matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) =>
            {
                // perf_event_paranoid >= 2 without CAP_PERFMON: user-mode samples only.
                self.config.exclude_kernel = true;
                perf_sys::open_cpu_clock(tid, &self.config).map_err(OpenFailure::Event)?
            }
            other => other.map_err(OpenFailure::Event)?,
        };
        // The smallest buffer worth having holds two samples.
        let record = self.config.stack_user as usize + 512;
        let min_pages = (2 * record)
            .div_ceil(perf_sys::page_size())
            .next_power_of_two();
        let mut pages = self.ring_pages.max(min_pages);
        loop {
            match RingMap::map(fd.try_clone().map_err(OpenFailure::Buffer)?, pages) {
                Ok(ring) => return Ok(ring),
                // The locked-memory budget (perf_event_mlock_kb) is per user: smaller
                // buffers, drained as often, still work.
                Err(e) if e.raw_os_error() == Some(libc::EPERM) && pages > min_pages => pages /= 2,
                Err(e) => return Err(OpenFailure::Buffer(e)),
            }
        }
    }

    /// Parses every sample written since the last call and hands each to `f`.
    pub fn drain(&mut self, mut f: impl FnMut(Sample)) {
        for mut ring in std::mem::take(&mut self.retiring) {
            self.bytes.clear();
            ring.drain_into(&mut self.bytes);
            let bytes = std::mem::take(&mut self.bytes);
            parse_records(&bytes, self.config.regs_user, &mut self.stats, &mut f);
            self.bytes = bytes;
        }
        let mut tids: Vec<i32> = self.rings.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let Some(ring) = self.rings.get_mut(&tid) else {
                continue;
            };
            self.bytes.clear();
            ring.drain_into(&mut self.bytes);
            let bytes = std::mem::take(&mut self.bytes);
            parse_records(&bytes, self.config.regs_user, &mut self.stats, &mut f);
            self.bytes = bytes;
        }
    }
}

/// Parses ring-buffer bytes as the kernel writes them for a sampler of this module (whole
/// records: samples with this module's registers and stack copy, lost and throttle
/// records): the samples, and the counts. For tests and fuzzing; never panics.
pub fn parse_ring_bytes(bytes: &[u8]) -> (Vec<Sample>, SamplerStats) {
    let mask = REGS.iter().fold(0u64, |m, r| m | 1 << r);
    let mut stats = SamplerStats::default();
    let mut samples = Vec::new();
    parse_records(bytes, mask, &mut stats, &mut |s| samples.push(s));
    (samples, stats)
}

/// Why a thread could not be sampled.
enum OpenFailure {
    /// `perf_event_open` refused.
    Event(io::Error),
    /// The event opened, but its ring buffer could not be mapped.
    Buffer(io::Error),
}

/// Little-endian reader over one record's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn u64(&mut self) -> Option<u64> {
        let b = self.bytes.get(self.at..self.at.checked_add(8)?)?;
        self.at += 8;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        let b = self.bytes.get(self.at..self.at.checked_add(4)?)?;
        self.at += 4;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    }

    /// Skips `len` bytes; returns their range.
    fn skip(&mut self, len: usize) -> Option<std::ops::Range<usize>> {
        let range = self.at..self.at.checked_add(len)?;
        self.bytes.get(range.clone())?;
        self.at = range.end;
        Some(range)
    }
}

/// Parses the records in `bytes` (a ring buffer's new data, whole records).
fn parse_records(
    bytes: &[u8],
    regs_mask: u64,
    stats: &mut SamplerStats,
    f: &mut impl FnMut(Sample),
) {
    let mut at = 0usize;
    while at + 8 <= bytes.len() {
        let kind = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let misc = u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]);
        let size = usize::from(u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]));
        if size < 8 || at + size > bytes.len() {
            stats.malformed += 1;
            return;
        }
        let body = &bytes[at + 8..at + size];
        match kind {
            RECORD_SAMPLE => {
                match parse_sample(body, regs_mask, misc & CPUMODE_MASK == CPUMODE_KERNEL) {
                    Some(Some(sample)) => {
                        stats.samples += 1;
                        f(sample);
                    }
                    Some(None) => {
                        stats.samples += 1;
                        stats.without_registers += 1;
                    }
                    None => stats.malformed += 1,
                }
            }
            RECORD_LOST => {
                let mut c = Cursor { bytes: body, at: 8 };
                stats.lost = stats.lost.saturating_add(c.u64().unwrap_or(0));
            }
            RECORD_THROTTLE => stats.throttled += 1,
            _ => {}
        }
        at += size;
    }
}

/// One PERF_RECORD_SAMPLE body: `None` when malformed, `Some(None)` when it has no user
/// registers.
fn parse_sample(body: &[u8], regs_mask: u64, in_kernel: bool) -> Option<Option<Sample>> {
    let mut c = Cursor { bytes: body, at: 0 };
    let _ip = c.u64()?;
    let _pid = c.u32()?;
    let tid = c.u32()?;
    let time_ns = c.u64()?;
    let abi = c.u64()?;
    let mut values = [0u64; REGS.len()];
    if abi != 0 {
        for v in values.iter_mut().take(regs_mask.count_ones() as usize) {
            *v = c.u64()?;
        }
    }
    let size = usize::try_from(c.u64()?).ok()?;
    let data = c.skip(size)?;
    let dyn_size = if size != 0 {
        usize::try_from(c.u64()?).ok()?.min(size)
    } else {
        0
    };
    if abi == 0 {
        return Some(None);
    }
    // The registers come in increasing perf number order, which is the order of REGS.
    let regs = UserRegisters {
        bx: values[0],
        bp: values[1],
        sp: values[2],
        ip: values[3],
        r12_r15: [values[4], values[5], values[6], values[7]],
    };
    Some(Some(Sample {
        tid: i32::try_from(tid).ok()?,
        time_ns,
        in_kernel,
        regs,
        stack: StackCopy {
            base: regs.sp,
            bytes: body[data.start..data.start + dyn_size].to_vec(),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample record as the kernel lays it out, built field by field.
    fn sample_record(tid: u32, regs: [u64; 8], stack: &[u8], dyn_size: u64) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&0x4000_1234u64.to_le_bytes()); // ip
        body.extend_from_slice(&77u32.to_le_bytes()); // pid
        body.extend_from_slice(&tid.to_le_bytes());
        body.extend_from_slice(&123_456u64.to_le_bytes()); // time
        body.extend_from_slice(&2u64.to_le_bytes()); // PERF_SAMPLE_REGS_ABI_64
        for r in regs {
            body.extend_from_slice(&r.to_le_bytes());
        }
        body.extend_from_slice(&(stack.len() as u64).to_le_bytes());
        body.extend_from_slice(stack);
        body.extend_from_slice(&dyn_size.to_le_bytes());
        let mut rec = Vec::new();
        rec.extend_from_slice(&RECORD_SAMPLE.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&((body.len() + 8) as u16).to_le_bytes());
        rec.extend_from_slice(&body);
        rec
    }

    fn mask() -> u64 {
        REGS.iter().fold(0u64, |m, r| m | 1 << r)
    }

    #[test]
    fn samples_parse_with_registers_in_perf_order() {
        let stack: Vec<u8> = (0..64u8).collect();
        let mut bytes = sample_record(9, [1, 2, 0x7000, 0x4000_1234, 5, 6, 7, 8], &stack, 40);
        // A LOST record between two samples.
        bytes.extend_from_slice(&RECORD_LOST.to_le_bytes());
        bytes.extend_from_slice(&0u16.to_le_bytes());
        bytes.extend_from_slice(&24u16.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&3u64.to_le_bytes());
        bytes.extend(sample_record(10, [0; 8], &[], 0));
        let mut stats = SamplerStats::default();
        let mut got = Vec::new();
        parse_records(&bytes, mask(), &mut stats, &mut |s| got.push(s));
        assert_eq!(got.len(), 2);
        let s = &got[0];
        assert_eq!((s.tid, s.time_ns, s.in_kernel), (9, 123_456, false));
        assert_eq!(s.regs.bx, 1);
        assert_eq!(s.regs.bp, 2);
        assert_eq!(s.regs.sp, 0x7000);
        assert_eq!(s.regs.ip, 0x4000_1234);
        assert_eq!(s.regs.r12_r15, [5, 6, 7, 8]);
        assert_eq!(s.stack.base, 0x7000);
        assert_eq!(s.stack.bytes, stack[..40].to_vec());
        assert_eq!(got[1].stack.bytes.len(), 0);
        assert_eq!(stats.lost, 3);
        assert_eq!(stats.samples, 2);
        assert_eq!(stats.malformed, 0);
    }

    #[test]
    fn truncated_and_lying_records_are_counted_not_trusted() {
        let stack = [0u8; 32];
        let good = sample_record(9, [0; 8], &stack, 32);
        for cut in 0..good.len() {
            let mut stats = SamplerStats::default();
            let mut n = 0;
            parse_records(&good[..cut], mask(), &mut stats, &mut |_| n += 1);
            assert_eq!(n, 0, "cut at {cut}");
        }
        // A stack size field larger than the record.
        let mut lying = good.clone();
        let size_at = 8 + 8 + 8 + 8 + 8 + 64;
        lying[size_at..size_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let mut stats = SamplerStats::default();
        let mut n = 0;
        parse_records(&lying, mask(), &mut stats, &mut |_| n += 1);
        assert_eq!((n, stats.malformed), (0, 1));
        // dyn_size larger than the copy is clipped to it.
        let big = sample_record(9, [0; 8], &stack, 1 << 40);
        let mut got = Vec::new();
        parse_records(&big, mask(), &mut stats, &mut |s| got.push(s));
        assert_eq!(got[0].stack.bytes.len(), 32);
    }
}
