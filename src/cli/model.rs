//! The JSON every command prints: one shape per entity (thread, frame, method, module,
//! exception), shared by every command that shows it, with a JSON Schema generated from
//! these types (`cdac schema COMMAND`). Field names are the contract with scripts: add,
//! never rename.

use schemars::JsonSchema;
use serde::Serialize;

/// A target address: `"0x7f3a1c052f40"` (JSON numbers cannot hold every 64-bit value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Addr(pub u64);

impl Serialize for Addr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#x}", self.0))
    }
}

impl JsonSchema for Addr {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Addr".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A target address, hexadecimal with 0x.",
            "type": "string",
            "pattern": "^0x[0-9a-f]+$",
        })
    }
}

/// `Some(Addr)` for a non-zero address.
pub fn nonzero(addr: u64) -> Option<Addr> {
    (addr != 0).then_some(Addr(addr))
}

/// A managed exception object, with its inner exceptions.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Exception {
    /// The exception object.
    pub address: Addr,
    /// Its MethodTable.
    pub method_table: Addr,
    /// The type's full name (`System.InvalidOperationException`), when it could be named.
    #[serde(rename = "type")]
    pub type_name: Option<String>,
    /// `Exception.Message` as stored (`null` when unset or unreadable).
    pub message: Option<String>,
    /// `HResult`, as eight hex digits (`0x80131509`).
    pub hresult: String,
    /// The captured stack trace, innermost frame first, in the runtime's order; where the
    /// runtime prints `--- End of stack trace from previous location ---` (a rethrow, an
    /// `await`), the frame before it has `previous_location_ends` set. `null` when the
    /// command does not resolve traces (`threads`, `stacks`); empty when none was captured.
    pub stack_trace: Option<Vec<Frame>>,
    /// Why the stack trace could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_trace_error: Option<String>,
    /// The inner exception (`InnerException`).
    pub inner: Option<Box<Exception>>,
    /// Why the inner exception could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inner_error: Option<String>,
}

/// An exception, or why it could not be read.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ExceptionOrError {
    /// The exception.
    Exception(Box<Exception>),
    /// It could not be read.
    Error {
        /// Its address, when known.
        address: Option<Addr>,
        /// Why.
        error: String,
    },
}

/// Where a source line is.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Source {
    /// The document's path as the PDB records it.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

/// What code a frame runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    /// Managed code (JIT'ed or ReadyToRun).
    Managed,
    /// Anything else (the runtime, libc, stubs).
    Native,
}

/// One frame: of a thread's stack (`stacks`, `analyze`) or of an exception's captured
/// stack trace (fields a trace does not record are `null`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Frame {
    /// Position, innermost first, from 0.
    pub index: usize,
    /// Instruction pointer (a return address but for the innermost frame).
    pub ip: Addr,
    /// Stack pointer (`null` in exception traces).
    pub sp: Option<Addr>,
    /// Managed or native.
    pub kind: FrameKind,
    /// The method's name as the runtime's perf map writes it, or `module!symbol+0xoff`
    /// for native code (`??` when nothing names it).
    pub name: String,
    /// The module's file name.
    pub module: Option<String>,
    /// How the walker found the frame (`null` in exception traces).
    pub found_by: Option<String>,
    /// Managed frames: the MethodDesc.
    pub method_desc: Option<Addr>,
    /// Managed frames: the start of the code holding `ip` (the method's, or its
    /// funclet's parent method's).
    pub method_start: Option<Addr>,
    /// Managed frames: `ip`'s offset in the method.
    pub offset: Option<u64>,
    /// Managed frames: `jit` or `r2r`.
    pub jit_type: Option<String>,
    /// Managed frames: the IL offset `ip` maps to.
    pub il_offset: Option<u32>,
    /// Managed frames: where that IL offset is in the source.
    pub source: Option<Source>,
    /// Managed frames: the frame runs a funclet (catch, finally, filter, fault).
    pub funclet: Option<bool>,
    /// A funclet's frame: the index of its parent method's frame.
    pub parent_frame: Option<usize>,
    /// Exception traces: the runtime prints `--- End of stack trace from previous
    /// location ---` after this frame (always false for stack frames).
    pub previous_location_ends: bool,
    /// `stacks --gc`, managed frames: the live GC slots and what they hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gc: Option<FrameGc>,
}

/// A managed frame's stack roots (`stacks --gc`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FrameGc {
    /// Reported as the active frame (leaf or interrupted: scratch registers count).
    pub active: bool,
    /// A reporting rule that changed what the frame reports:
    /// `unwound_by_exception`, `funclet_parent_reports_nothing`,
    /// `funclet_parent_no_untracked`, `filter_no_untracked`,
    /// `passed_by_filtered_exception`.
    pub note: Option<String>,
    /// The live slots.
    pub slots: Vec<GcSlotValue>,
    /// Slots that could not be resolved, or why the frame could not be decoded.
    pub errors: Vec<String>,
}

/// One live slot of a frame and the reference in it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GcSlotValue {
    /// The slot: a register (`rbx`) or base and offset (`rbp-0x10`, `sp+0x20`,
    /// `caller.sp+0x8`).
    pub slot: String,
    /// Where the slot is (`null` for a register).
    pub address: Option<Addr>,
    /// The reference it holds.
    pub object: Addr,
    /// The object's type (`null` for null, interior pointers, or an unreadable object).
    pub type_name: Option<String>,
    /// An interior pointer (byref).
    pub interior: bool,
    /// Pinned while live.
    pub pinned: bool,
}

/// A runtime thread's state word.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ThreadState {
    /// `Thread::m_State`.
    pub value: Addr,
    /// The names of the bits set (`Background`, `WaitSleepJoin`, ...).
    pub names: Vec<String>,
}

/// An explicit Frame of a thread's Frame chain (transitions between managed and native
/// code the runtime records).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ExplicitFrame {
    /// The Frame's address.
    pub address: Addr,
    /// Its kind (`InlinedCallFrame`, ...), `null` when its tag names none cdac knows.
    pub kind: Option<String>,
    /// Its first word: a FrameIdentifier (.NET 10) or a vtable (.NET 8, 9).
    pub tag: Addr,
    /// Where control returns to in managed code, when recorded.
    pub return_address: Option<Addr>,
    /// The caller's stack pointer at the transition.
    pub caller_sp: Option<Addr>,
    /// The caller's frame pointer.
    pub saved_fp: Option<Addr>,
    /// The InlinedCallFrame's `Datum` (the P/Invoke's MethodDesc, or a stub argument).
    pub datum: Option<Addr>,
    /// The instruction pointer of a register context the Frame holds.
    pub context_ip: Option<Addr>,
}

/// What the runtime knows of a thread.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ManagedThread {
    /// The runtime's `Thread*`.
    pub address: Addr,
    /// `Environment.CurrentManagedThreadId`.
    pub managed_id: u32,
    /// The id the runtime recorded for the thread where it differs from the OS id: its id
    /// in the target's own PID namespace (a container's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os_id_in_namespace: Option<u64>,
    /// The state word and its bits.
    pub state: ThreadState,
    /// The thread is the finalizer thread.
    pub finalizer: bool,
    /// Cooperative mode: the thread may be running managed code.
    pub preemptive_gc_disabled: bool,
    /// Its explicit Frames, innermost first.
    pub explicit_frames: Vec<ExplicitFrame>,
    /// Why the Frame chain was cut short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explicit_frames_error: Option<String>,
    /// The exception in flight (being dispatched, or the last thrown).
    pub exception: Option<ExceptionOrError>,
    /// Exceptions of outer dispatches still in progress (nested trackers), innermost
    /// first; only `threads` reads them.
    pub nested_exceptions: Vec<ExceptionOrError>,
}

/// Where a thread's name came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NameSource {
    /// The managed `Thread.Name`, read from the thread's managed object.
    Managed,
    /// The kernel's name (`comm`, at most 15 bytes; live processes only).
    Kernel,
}

/// Why a stack walk ended.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StackEnd {
    /// `complete`, `error` or `frame_limit`.
    pub reason: String,
    /// What went wrong (`error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How many frames were kept (`frame_limit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames: Option<usize>,
}

/// A thread of the target: the OS thread, what the runtime knows of it, and (for
/// `stacks` and `analyze`) its stack.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Thread {
    /// Kernel thread id (0 for a runtime thread without an OS thread).
    pub os_id: i64,
    /// The thread's name: the managed `Thread.Name` when set, else the kernel's.
    pub name: Option<String>,
    /// Where `name` came from.
    pub name_source: Option<NameSource>,
    /// What the runtime knows of it; `null` for a thread the runtime never saw.
    pub managed: Option<ManagedThread>,
    /// Where its registers came from (`core`, `ptrace`, `proc_syscall`); `null` when none
    /// were read (`threads` reads none).
    pub registers: Option<String>,
    /// Live: microseconds from asking the thread to stop to letting it go.
    pub stopped_us: Option<f64>,
    /// Live: microseconds the thread was held stopped.
    pub held_us: Option<f64>,
    /// Why there is no stack, or what is uncertain about it.
    pub note: Option<String>,
    /// Its frames, innermost first (`null` when the command reads no stacks, or none
    /// could be read).
    pub frames: Option<Vec<Frame>>,
    /// Why the walk ended (`null` without a stack).
    pub stack_end: Option<StackEnd>,
}

/// A method's code: one code version of one method.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Method {
    /// The method's MethodDesc.
    pub method_desc: Addr,
    /// Its name as the runtime's perf map writes it (optimization tier aside).
    pub name: Option<String>,
    /// Its module's file name.
    pub module: Option<String>,
    /// Start of the code (its entry point).
    pub start: Addr,
    /// Bytes of hot code from `start` (funclets included), when known.
    pub size: Option<u64>,
    /// `jit` or `r2r`.
    pub jit_type: String,
    /// Start of the cold part of a split method.
    pub cold_start: Option<Addr>,
    /// Bytes of cold code (0 when not split).
    pub cold_size: Option<u64>,
    /// The code version's optimization tier (`unknown` when it cannot be told).
    pub tier: Tier,
    /// The code version is the method's current one, the code its new calls run (`null`
    /// when that cannot be told).
    pub current: Option<bool>,
}

/// The optimization tier of a code version, in the terms of SOS's `dumpmd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Tier 0 (jitted quickly, call counted).
    QuickJitted,
    /// Tier 0, instrumented for profile-guided optimization.
    QuickJittedInstrumented,
    /// Tier 1 (rejitted optimized once hot).
    OptimizedTier1,
    /// Tier 1, instrumented.
    OptimizedTier1Instrumented,
    /// On-stack replacement code (entered from a loop of tier-0 code).
    OptimizedTier1Osr,
    /// Jitted optimized, without tiering.
    Optimized,
    /// Jitted with optimizations disabled.
    MinOptJitted,
    /// Precompiled (ReadyToRun).
    ReadyToRun,
    /// Not determinable from the target.
    Unknown,
}

impl From<cdac::contracts::code_versions::Tier> for Tier {
    fn from(t: cdac::contracts::code_versions::Tier) -> Tier {
        use cdac::contracts::code_versions::Tier as T;
        match t {
            T::QuickJitted => Tier::QuickJitted,
            T::QuickJittedInstrumented => Tier::QuickJittedInstrumented,
            T::OptimizedTier1 => Tier::OptimizedTier1,
            T::OptimizedTier1Instrumented => Tier::OptimizedTier1Instrumented,
            T::OptimizedTier1Osr => Tier::OptimizedTier1Osr,
            T::Optimized => Tier::Optimized,
            T::MinOptJitted => Tier::MinOptJitted,
            T::ReadyToRun => Tier::ReadyToRun,
            T::Unknown => Tier::Unknown,
        }
    }
}

/// A loaded module.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Module {
    /// The runtime's `Module*`.
    pub address: Addr,
    /// The `Assembly*` that owns it.
    pub assembly: Addr,
    /// The image file's path (`null` for dynamic modules).
    pub path: Option<String>,
    /// The path's last component.
    pub file_name: Option<String>,
    /// Where the image is loaded (`null` when it has none).
    pub base: Option<Addr>,
    /// Bytes of the loaded image.
    pub size: u64,
    /// Laid out as the loader maps it (ReadyToRun images), not flat.
    pub mapped: bool,
    /// A Reflection.Emit module.
    pub is_dynamic: bool,
    /// Its assembly can be unloaded.
    pub is_collectible: bool,
    /// The module's `ReadyToRunInfo*` (`null` for IL-only images).
    pub ready_to_run_info: Option<Addr>,
}

/// An address that could not be answered, and why.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Unanswered {
    /// The address (or the text that was given).
    pub address: String,
    /// Why.
    pub error: String,
}

/// How a live heap was read: again while garbage collections ran under the read (absent
/// on a dump, which is read once).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HeapReadsReport {
    /// Reads made (1 when nothing changed under the first).
    pub attempts: u32,
    /// Seconds from the first read's start to the last one's end.
    pub seconds: f64,
    /// Whether the last read saw no collection: false only when collections kept running
    /// for the whole bound (2 s), and the answer may then mix the heap's states.
    pub consistent: bool,
    /// With `--freeze`: how long the last read held every thread stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen: Option<FrozenReport>,
}

/// How long `--freeze` held a live process's threads stopped for a read.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FrozenReport {
    /// Threads held.
    pub threads: usize,
    /// From asking the first thread to stop to letting the last one go, in milliseconds.
    pub held_ms: f64,
    /// Of which stopping every thread, in milliseconds.
    pub stopping_ms: f64,
}

impl FrozenReport {
    /// The report of `freeze`, said on standard error too.
    pub fn tell(freeze: Option<cdac::process::freeze::FreezeReport>) -> Option<FrozenReport> {
        let f = freeze?;
        status!("cdac: {}", f.describe());
        Some(FrozenReport {
            threads: f.threads,
            held_ms: f.held_ms,
            stopping_ms: f.stopping_ms,
        })
    }
}

impl HeapReadsReport {
    /// The report of a settled read of a live target; `None` on a dump.
    pub fn of<T>(rt: &cdac::runtime::Runtime, s: &cdac::heap::Settled<T>) -> Option<Self> {
        matches!(
            rt.target().source().kind(),
            cdac::memory::TargetKind::Live { .. }
        )
        .then(|| HeapReadsReport {
            attempts: s.attempts,
            seconds: s.elapsed.as_secs_f64(),
            consistent: s.consistent,
            frozen: FrozenReport::tell(s.frozen),
        })
    }

    /// Says on stderr that the heap was read again, or kept changing.
    pub fn tell(this: &Option<Self>) {
        let Some(r) = this else { return };
        if !r.consistent {
            status!(
                "cdac: warning: garbage collections kept moving objects while the heap was read ({} reads in {:.2} s): the answer may mix the heap's states",
                r.attempts,
                r.seconds
            );
        } else if r.attempts > 1 && r.frozen.is_some() {
            status!(
                "cdac: a garbage collection was running when the threads were stopped: they were let go for it to finish and stopped again ({} tries in {:.2} s)",
                r.attempts,
                r.seconds
            );
        } else if r.attempts > 1 {
            status!(
                "cdac: the heap changed under the read (a garbage collection, or an allocation in progress) and was read again: {} reads in {:.2} s",
                r.attempts,
                r.seconds
            );
        }
    }
}

/// How long a command stopped a live process's threads to read their stacks (one at a
/// time); absent on dumps and when no thread was stopped.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PausesReport {
    /// Threads stopped.
    pub threads: usize,
    /// From the first stop to the last release, in microseconds.
    pub snapshot_us: f64,
    /// The longest any one thread was held stopped, in microseconds.
    pub max_held_us: f64,
    /// The longest from asking a thread to stop to releasing it, in microseconds.
    pub max_stopped_us: f64,
}

impl PausesReport {
    /// The report of `pauses`.
    pub fn of(pauses: Option<cdac::stacks::Pauses>) -> Option<PausesReport> {
        let p = pauses?;
        Some(PausesReport {
            threads: p.threads,
            snapshot_us: p.snapshot_us,
            max_held_us: p.max_held_us,
            max_stopped_us: p.max_stopped_us,
        })
    }

    /// The report of `pauses`, said on standard error too (every command that stops
    /// threads says for how long).
    pub fn tell(pauses: Option<cdac::stacks::Pauses>) -> Option<PausesReport> {
        let p = pauses?;
        status!("cdac: {}", p.describe());
        Self::of(Some(p))
    }

    /// Says an existing report on standard error.
    pub fn say(report: Option<&PausesReport>) {
        if let Some(r) = report {
            let p = cdac::stacks::Pauses {
                threads: r.threads,
                snapshot_us: r.snapshot_us,
                max_held_us: r.max_held_us,
                max_stopped_us: r.max_stopped_us,
            };
            status!("cdac: {}", p.describe());
        }
    }
}
