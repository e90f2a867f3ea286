//! The sampling profiler's core: a sample (a thread's user registers and a copy of the top
//! of its stack, taken by the kernel while the process runs; see
//! [`crate::process::perf_sampler`]) is unwound with the stack walker of `cdac stacks` (the
//! runtime's unwind data for managed frames, CFI for native ones) over the copy, named at
//! once (code that tiering or an unloading context frees later keeps the name it had), and
//! counted by stack in a [`Profile`]. [`output`] writes what was counted.

mod aggregate;
pub mod output;
pub mod session;

use std::collections::HashMap;
use std::time::{Duration, Instant};

pub use aggregate::{FrameId, FrameShare, Profile};

use crate::contracts::ContractError;
use crate::memory::live::LiveProcess;
use crate::memory::{MemorySource, ReadError};
use crate::names::MethodNamer;
use crate::process::perf_sampler::Sample;
use crate::process::thread_snapshot::StackCopy;
use crate::runtime::Runtime;
use crate::stacks::walk::{FoundBy, FrameCode, Stack, StackWalker};
use crate::symbols::ElfSymbols;
use crate::unwind::{x64_reg, StackMemory, X64Context};

/// How often cached target memory is dropped at the latest, so that code the runtime
/// compiled since is found (a lookup that misses drops it sooner).
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// Most cached names of each kind: past it, the cache starts afresh (names are found
/// again as needed), so a long recording's memory stays bounded.
const MAX_CACHED_NAMES: usize = 1 << 16;
/// The soonest a miss may drop the cache again.
const REFRESH_ON_MISS_AFTER: Duration = Duration::from_millis(200);

/// What the profiler keeps of each sample.
#[derive(Debug, Clone, Copy)]
pub struct ProfilerOptions {
    /// Keep native frames (else only managed ones; a sample with none is counted as its
    /// innermost native module).
    pub native: bool,
    /// Put the thread (name and id) at the root of each stack.
    pub threads: bool,
    /// The most frames one sample's walk goes.
    pub max_frames: usize,
}

impl Default for ProfilerOptions {
    fn default() -> Self {
        ProfilerOptions {
            native: false,
            threads: false,
            max_frames: 256,
        }
    }
}

/// Counts of the profiler's own work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProfilerStats {
    /// Samples walked and counted.
    pub samples: u64,
    /// Samples whose walk ended early (an unreadable or unknown frame): counted with the
    /// frames found.
    pub partial_walks: u64,
    /// Samples with at least one managed frame.
    pub managed_samples: u64,
    /// Times cached target memory was dropped to find new code.
    pub refreshes: u64,
    /// Time spent walking and naming, in microseconds.
    pub walk_micros: u64,
}

/// The stack of a sample: its copy, then the live process (uncached: stacks change).
struct SampleMemory<'a> {
    copy: &'a StackCopy,
    live: Option<&'a LiveProcess>,
}

impl StackMemory for SampleMemory<'_> {
    fn read_u64(&self, addr: u64) -> Result<u64, ReadError> {
        if self.copy.contains(addr, 8) {
            return self.copy.read_u64(addr);
        }
        let Some(live) = self.live else {
            return self.copy.read_u64(addr);
        };
        let mut word = [0u8; 8];
        live.read_exact(addr, &mut word)?;
        Ok(u64::from_le_bytes(word))
    }
}

/// Unwinds, names and counts samples of one runtime's process.
pub struct Profiler<'a> {
    rt: &'a Runtime,
    walker: StackWalker,
    namer: MethodNamer,
    symbols: ElfSymbols,
    live: Option<LiveProcess>,
    options: ProfilerOptions,
    method_names: HashMap<u64, FrameId>,
    native_names: HashMap<u64, FrameId>,
    module_names: HashMap<u64, FrameId>,
    thread_labels: HashMap<i32, FrameId>,
    profile: Profile,
    stats: ProfilerStats,
    last_refresh: Instant,
}

impl std::fmt::Debug for Profiler<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiler")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<'a> Profiler<'a> {
    /// A profiler over `rt`. `pid`, when given, is the live process: stack beyond a
    /// sample's copy is read from it.
    pub fn new(
        rt: &'a Runtime,
        pid: Option<i32>,
        options: ProfilerOptions,
    ) -> Result<Profiler<'a>, ContractError> {
        let walker = StackWalker::new(rt)?
            .with_max_frames(options.max_frames)
            .with_il_offsets(false);
        Ok(Profiler {
            rt,
            walker,
            namer: MethodNamer::for_runtime(rt),
            symbols: ElfSymbols::new(rt.target()),
            live: pid.and_then(|p| LiveProcess::open(p).ok()),
            options,
            method_names: HashMap::new(),
            native_names: HashMap::new(),
            module_names: HashMap::new(),
            thread_labels: HashMap::new(),
            profile: Profile::new(),
            stats: ProfilerStats::default(),
            last_refresh: Instant::now(),
        })
    }

    /// What was counted so far.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Counts of the profiler's work.
    pub fn stats(&self) -> ProfilerStats {
        self.stats
    }

    /// Drops counted samples (names stay cached): `cdac top` starts each interval afresh.
    pub fn clear_counts(&mut self) {
        self.profile.clear_counts();
    }

    /// Walks a sample's stack from its registers over its stack copy.
    pub fn walk(&self, sample: &Sample) -> Stack {
        let r = &sample.regs;
        let mut ctx = X64Context::new(r.ip, r.sp, Some(r.bp));
        ctx.regs[x64_reg::RBX] = Some(r.bx);
        for (i, v) in r.r12_r15.iter().enumerate() {
            ctx.regs[x64_reg::R12 + i] = Some(*v);
        }
        let mem = SampleMemory {
            copy: &sample.stack,
            live: self.live.as_ref(),
        };
        self.walker.walk(ctx, &mem, &[])
    }

    /// Unwinds, names and counts one sample.
    pub fn add_sample(&mut self, sample: &Sample) {
        let started = Instant::now();
        if started.duration_since(self.last_refresh) >= REFRESH_EVERY {
            self.refresh();
        }
        let mut stack = self.walk(sample);
        if self.has_unknown_code(&stack)
            && started.duration_since(self.last_refresh) >= REFRESH_ON_MISS_AFTER
        {
            // Code compiled since the cached pages were read: read them again.
            self.refresh();
            stack = self.walk(sample);
        }
        self.add_stack(sample.tid, &stack, sample.in_kernel);
        self.stats.walk_micros += started.elapsed().as_micros() as u64;
    }

    /// Names and counts one walked stack of thread `tid` (`in_kernel`: the thread was in a
    /// system call or fault when the sample was taken).
    pub fn add_stack(&mut self, tid: i32, stack: &Stack, in_kernel: bool) {
        let frames = self.name_stack(stack, in_kernel);
        let thread = self.thread_label(tid);
        self.profile.add(thread, frames, 1);
        self.stats.samples += 1;
        if !matches!(stack.end, crate::stacks::walk::StackEnd::Complete) {
            self.stats.partial_walks += 1;
        }
        if stack.frames.iter().any(|f| f.method_desc().is_some()) {
            self.stats.managed_samples += 1;
        }
    }

    /// Drops cached target memory (and restarts the per-command read count).
    pub fn refresh(&mut self) {
        self.rt.flush();
        self.last_refresh = Instant::now();
        self.stats.refreshes += 1;
    }

    /// A native frame in memory no ELF module maps: JIT'ed code the cached pages do not
    /// know yet, or a stub.
    fn has_unknown_code(&self, stack: &Stack) -> bool {
        stack
            .frames
            .iter()
            .any(|f| matches!(f.code, FrameCode::Native) && self.symbols.lookup(f.ip).is_none())
    }

    fn thread_label(&mut self, tid: i32) -> FrameId {
        if !self.options.threads {
            // One shared root-less label; output leaves it out.
            return self.profile.intern("");
        }
        if let Some(&id) = self.thread_labels.get(&tid) {
            return id;
        }
        let pid = self.live.as_ref().map(LiveProcess::pid);
        // The managed Thread.Name (whole), else the kernel's name (15 bytes at most). A
        // thread names itself: keep it to one line without the collapsed separator.
        let comm: String = self
            .managed_thread_name(tid)
            .or_else(|| {
                pid.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/task/{tid}/comm")).ok())
            })
            .map(|s| {
                s.trim()
                    .chars()
                    .map(|c| if c == ';' || c.is_control() { '_' } else { c })
                    .collect()
            })
            .unwrap_or_else(|| "thread".into());
        if self.thread_labels.len() >= MAX_CACHED_NAMES {
            self.thread_labels.clear();
        }
        let id = self.profile.intern(&format!("{comm} ({tid})"));
        self.thread_labels.insert(tid, id);
        id
    }

    /// The managed `Thread.Name` of OS thread `tid`, when the runtime knows the thread and
    /// it has a name (read once per thread label).
    fn managed_thread_name(&self, tid: i32) -> Option<String> {
        let contract = crate::contracts::thread::Threads::for_runtime(self.rt).ok()?;
        let list = contract.threads().ok()?;
        let thread = list
            .threads
            .iter()
            .find(|t| i32::try_from(t.os_id).is_ok_and(|os| os == tid))?;
        contract.thread_name(thread).ok().flatten()
    }

    /// The frame ids of a walked stack, root first.
    fn name_stack(&mut self, stack: &Stack, in_kernel: bool) -> Vec<FrameId> {
        let mut out = Vec::with_capacity(stack.frames.len() + 1);
        let mut any_managed = false;
        for f in &stack.frames {
            match f.code {
                FrameCode::Managed { method_desc, .. } => {
                    any_managed = true;
                    let id = match self.method_names.get(&method_desc) {
                        Some(&id) => id,
                        None => {
                            if self.method_names.len() >= MAX_CACHED_NAMES {
                                self.method_names.clear();
                            }
                            let name = self.namer.name(method_desc).replace(';', ":");
                            let id = self.profile.intern(&name);
                            self.method_names.insert(method_desc, id);
                            id
                        }
                    };
                    out.push(id);
                }
                FrameCode::Native if self.options.native => {
                    let exact = matches!(f.found_by, FoundBy::Registers | FoundBy::SignalContext);
                    let at = if exact { f.ip } else { f.ip.saturating_sub(1) };
                    let id = self.native_name(at);
                    out.push(id);
                }
                FrameCode::Native => {}
            }
        }
        if self.options.native && in_kernel {
            out.insert(0, self.profile.intern("[kernel]"));
        }
        if !any_managed && !self.options.native {
            // No managed frame: the innermost native module stands for the sample.
            let leaf = stack.frames.first().map_or(0, |f| f.ip);
            out.push(self.module_name(leaf));
        }
        out.reverse();
        out
    }

    fn native_name(&mut self, at: u64) -> FrameId {
        if let Some(&id) = self.native_names.get(&at) {
            return id;
        }
        let name = match self.symbols.lookup(at) {
            Some(s) => {
                let module = s
                    .module
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                match &s.symbol {
                    Some(sym) => format!("{module}!{}", crate::symbols::demangle(sym)),
                    None => format!("{module}!?"),
                }
            }
            None => "[unknown code]".to_string(),
        };
        let id = self.profile.intern(&name.replace(';', ":"));
        if self.native_names.len() >= MAX_CACHED_NAMES {
            // Keyed by address: a long --native recording would otherwise keep one entry
            // per distinct return address.
            self.native_names.clear();
        }
        self.native_names.insert(at, id);
        id
    }

    fn module_name(&mut self, ip: u64) -> FrameId {
        let found = self.symbols.lookup(ip);
        let key = found.as_ref().map_or(0, |s| s.module_base);
        if let Some(&id) = self.module_names.get(&key) {
            return id;
        }
        let module = found
            .and_then(|s| Some(s.module.file_name()?.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "unknown code".into());
        let id = self.profile.intern(&format!("[native: {module}]"));
        self.module_names.insert(key, id);
        id
    }
}
