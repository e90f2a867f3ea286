//! The Thread contract (the runtime's threads, their explicit Frame chains and the
//! exception each has in flight) and the parts of the Exception contract that read a
//! managed `System.Exception`.
//!
//! Threads are found through the `ThreadStore` global: `ThreadStore.FirstThreadLink` is the
//! head of a singly linked list through `Thread.LinkNext`. Version 1 (.NET 8, 9 and 10)
//! links point at the next Thread's `LinkNext` field (a link's `Thread` is the link minus
//! that offset); version 2 (.NET 11's "c1") links point at the Thread itself. Each thread records its managed id
//! (`Id`), OS thread id (`OSId`), state bits, the head of its explicit Frame chain
//! (`Frame`, ending in the FRAME_TOP sentinel −1), the exception tracker of the exception
//! being dispatched (`ExceptionTracker`, leading to an `ExceptionInfo`: `ThrownObject`,
//! `PreviousNestedInfo`) and a handle to the last exception thrown (`LastThrownObject`).
//!
//! Frames are told apart as each runtime does: .NET 10 stores a `FrameIdentifier` in a
//! Frame's first word and publishes one `<Kind>Identifier` global per kind; .NET 8 and 9
//! store a C++ vtable pointer there. For those, the vtables are the last slots of the
//! exported `g_dacTable`, and the shipped descriptors name the slot of each kind counted
//! from the table's end (`<Kind>VtableSlotFromEnd`), the one part of the table that does
//! not move between servicing builds.
//!
//! What a `ThrownObject` holds differs: a GC handle (`m_hThrowable`: .NET 8, 9 and 10.0)
//! or, in later runtimes, the object itself (`m_exception`). A value is taken for an object when its
//! MethodTable descends from `System.Exception` (the `ExceptionMethodTable` global), else
//! for a handle to one; a field the descriptor types as `GCHandle` is always a handle.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::fields::Fields;
use super::registry::{self, Contract, ContractContext};
use super::ContractError;
use crate::descriptor::DataDescriptor;
use crate::limits::Limit;
use crate::memory::Target;
use crate::records::thread::{
    AllocContextHome, ExceptionInfoLayout, ExceptionInfoRecord, ThreadLayout, ThreadRecord,
    ThreadStoreLayout, ThreadStoreRecord,
};

/// The value ending a Frame chain (FRAME_TOP).
pub const FRAME_TOP: u64 = u64::MAX;
/// Most frames walked on one thread's chain.
const MAX_FRAMES: u64 = 4096;
/// Most inner exceptions followed.
const MAX_INNER: usize = 32;
/// Most nested exception trackers followed.
const MAX_NESTED: usize = 64;
/// Most parents followed from a MethodTable when checking it descends from Exception.
const MAX_PARENTS: usize = 64;
/// Bits of the low byte of an object's MethodTable pointer that are not part of it.
const MT_MASK_DEFAULT: u64 = 0x7;

/// Offsets of `Rsp`, `Rbp` and `Rip` in the Windows x64 `CONTEXT` the runtime uses on
/// every OS.
const AMD64_CONTEXT_RSP: u64 = 0x98;
const AMD64_CONTEXT_RBP: u64 = 0xA0;
const AMD64_CONTEXT_RIP: u64 = 0xF8;

/// The Frame kinds the runtimes name (.NET 10's `<Kind>Identifier` globals).
pub const FRAME_KINDS: &[&str] = &[
    "InlinedCallFrame",
    "ResumableFrame",
    "RedirectedThreadFrame",
    "FaultingExceptionFrame",
    "SoftwareExceptionFrame",
    "FuncEvalFrame",
    "PInvokeCalliFrame",
    "HijackFrame",
    "PrestubMethodFrame",
    "CallCountingHelperFrame",
    "StubDispatchFrame",
    "ExternalMethodFrame",
    "DynamicHelperFrame",
    "ProtectValueClassFrame",
    "DebuggerClassInitMarkFrame",
    "DebuggerSecurityCodeMarkFrame",
    "DebuggerExitFrame",
    "DebuggerU2MCatchHandlerFrame",
    "ExceptionFilterFrame",
    "HelperMethodFrame",
    "HelperMethodFrame_1OBJ",
    "HelperMethodFrame_2OBJ",
    "HelperMethodFrame_3OBJ",
    "HelperMethodFrame_PROTECTOBJ",
    "TailCallFrame",
    "MulticastFrame",
    "ProtectByRefsFrame",
];

/// `Thread.State` bits (the runtime's `ThreadState`), as named in output.
pub const THREAD_STATE_BITS: &[(u32, &str)] = &[
    (0x0000_0002, "SuspensionTrapped"),
    (0x0000_0004, "GCSuspendRedirected"),
    (0x0000_0008, "DebugSuspendPending"),
    (0x0000_0080, "Hijacked"),
    (0x0000_0200, "Background"),
    (0x0000_0400, "Unstarted"),
    (0x0000_2000, "CoInitialized"),
    (0x0000_4000, "InSTA"),
    (0x0000_8000, "InMTA"),
    (0x0001_0000, "Stopped"),
    (0x0008_0000, "SyncSuspended"),
    (0x0010_0000, "DebugWillSync"),
    (0x0100_0000, "ThreadPoolWorker"),
    (0x0200_0000, "WaitSleepJoin"),
    (0x8000_0000, "Detached"),
];

/// What the ThreadStore says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadStoreInfo {
    /// The `ThreadStore*`.
    pub address: u64,
    /// Threads the runtime counts (`ThreadStore.ThreadCount`).
    pub thread_count: u32,
    /// The first `Thread*` of the list (0 for none).
    pub first_thread: u64,
    /// The finalizer's `Thread*`, when the runtime publishes it.
    pub finalizer_thread: Option<u64>,
}

/// One runtime thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadInfo {
    /// The `Thread*`.
    pub address: u64,
    /// The managed thread id (`Environment.CurrentManagedThreadId`).
    pub managed_id: u32,
    /// The OS thread id (0 for a thread not started or gone), as the reader sees it: for a
    /// target in a PID namespace of its own, the id the reader's namespace gives it.
    pub os_id: u64,
    /// The id the runtime recorded, where it differs from `os_id`: the thread's id in the
    /// target's own PID namespace (a container's).
    pub namespace_os_id: Option<u64>,
    /// `Thread.State` bits ([`THREAD_STATE_BITS`]).
    pub state: u32,
    /// Cooperative mode: the thread may be running managed code.
    pub preemptive_gc_disabled: bool,
    /// The head of its explicit Frame chain ([`FRAME_TOP`] for none).
    pub frame: u64,
    /// The `ExceptionInfo` (ExInfo / ExceptionTracker) of the exception being dispatched,
    /// 0 for none.
    pub exception_tracker: u64,
    /// The exception object the tracker holds, when there is one.
    pub current_exception: Option<u64>,
    /// The last exception object the thread threw (its `LastThrownObject` handle), when
    /// there is one.
    pub last_thrown: Option<u64>,
    /// The next `Thread*` of the list (0 at the end).
    pub next: u64,
}

impl ThreadInfo {
    /// Whether `id` is this thread's OS id: the one the reader sees, or the one the
    /// runtime recorded in the target's own PID namespace.
    pub fn has_os_id(&self, id: u64) -> bool {
        self.os_id == id || self.namespace_os_id == Some(id)
    }

    /// The names of the state bits set.
    pub fn state_names(&self) -> Vec<&'static str> {
        THREAD_STATE_BITS
            .iter()
            .filter(|(bit, _)| self.state & bit != 0)
            .map(|&(_, name)| name)
            .collect()
    }

    /// The exception in flight: the tracker's, else the last thrown.
    pub fn exception(&self) -> Option<u64> {
        self.current_exception.or(self.last_thrown)
    }
}

/// The threads of the ThreadStore's list, and why the walk stopped early if it did.
#[derive(Debug)]
pub struct ThreadList {
    /// The ThreadStore.
    pub store: ThreadStoreInfo,
    /// The threads read, in list order.
    pub threads: Vec<ThreadInfo>,
    /// What ended the walk before the list's end (a cycle, a bad pointer, a limit).
    pub error: Option<ContractError>,
    /// How the runtime's thread ids were tied to the target's, where they differ (a
    /// process in a PID namespace of its own); `None` where they are the same.
    pub ids_matched: Option<String>,
}

/// Largest distance from a thread's stack pointer to its innermost explicit Frame.
const MAX_STACK_SPAN: u64 = 256 << 20;

/// For a dump of a process in a PID namespace of its own (most runtime thread ids are no
/// thread of the dump): each runtime thread tied to the dump's thread whose stack holds its
/// innermost explicit Frame, the one with the closest stack pointer below it. An
/// ambiguous tie (two runtime threads to one dump thread) ties neither. `None` when the
/// ids agree, or when no thread can be tied.
fn ids_by_stack(target: &Target, threads: &[ThreadInfo]) -> Option<(HashMap<u64, i32>, String)> {
    let dumped = target.source().threads().ok()?;
    let known: HashSet<u64> = dumped.iter().map(|t| t.tid as u64).collect();
    let started: Vec<&ThreadInfo> = threads.iter().filter(|t| t.os_id != 0).collect();
    let strangers = started.iter().filter(|t| !known.contains(&t.os_id)).count();
    if strangers * 2 <= started.len() {
        return None;
    }
    let mut picks: HashMap<i32, Vec<u64>> = HashMap::new();
    for t in &started {
        if t.frame == 0 || t.frame == u64::MAX {
            continue;
        }
        let holder = dumped
            .iter()
            .filter_map(|d| Some((d.tid, d.sp?)))
            .filter(|&(_, sp)| sp <= t.frame && t.frame - sp <= MAX_STACK_SPAN)
            .max_by_key(|&(_, sp)| sp);
        if let Some((tid, _)) = holder {
            picks.entry(tid).or_default().push(t.os_id);
        }
    }
    let ids: HashMap<u64, i32> = picks
        .into_iter()
        .filter(|(_, ours)| ours.len() == 1)
        .map(|(tid, ours)| (ours[0], tid))
        .collect();
    if ids.is_empty() {
        return None;
    }
    let note = format!(
        "the runtime's thread ids are not the dump's (a PID namespace of its own): {} of {} \
         threads tied to the dump's by stack (the thread whose stack holds the innermost \
         explicit Frame)",
        ids.len(),
        started.len()
    );
    Some((ids, note))
}

/// One explicit Frame of a thread's chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExplicitFrame {
    /// The Frame's address (on the thread's stack).
    pub address: u64,
    /// Its kind (`InlinedCallFrame`, ...), `None` when the first word names none cdac knows.
    pub kind: Option<&'static str>,
    /// The first word: a `FrameIdentifier` (.NET 10) or a vtable (.NET 8 and 9).
    pub tag: u64,
    /// Where control returns to in managed code (the InlinedCallFrame's
    /// `CallerReturnAddress`, a transition frame's return address), when recorded.
    pub return_address: Option<u64>,
    /// The caller's stack pointer at the transition (the InlinedCallFrame's `CallSiteSP`).
    pub caller_sp: Option<u64>,
    /// The caller's frame pointer (the InlinedCallFrame's `CalleeSavedFP`).
    pub saved_fp: Option<u64>,
    /// The InlinedCallFrame's `Datum` (the P/Invoke's MethodDesc, or a stub's secret arg).
    pub datum: Option<u64>,
    /// The instruction pointer of the saved register context a frame holds
    /// (SoftwareExceptionFrame, FaultingExceptionFrame, ResumableFrame); with it,
    /// `caller_sp` and `saved_fp` are that context's `Rsp` and `Rbp`.
    pub context_ip: Option<u64>,
    /// The next Frame.
    pub next: u64,
}

impl ExplicitFrame {
    /// An InlinedCallFrame whose call is in progress (its return address is set): the
    /// thread is in native code called from managed code.
    pub fn is_active_pinvoke(&self) -> bool {
        self.kind == Some("InlinedCallFrame") && self.return_address.is_some_and(|a| a != 0)
    }
}

/// The frames of one chain, and why the walk stopped early if it did.
#[derive(Debug)]
pub struct FrameChain {
    /// The frames read, innermost first.
    pub frames: Vec<ExplicitFrame>,
    /// What ended the walk before FRAME_TOP (a wild pointer, a cycle, the limit).
    pub error: Option<ContractError>,
}

/// A managed exception object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExceptionInfo {
    /// The object.
    pub address: u64,
    /// Its MethodTable.
    pub method_table: u64,
    /// The type's name (`System.InvalidOperationException`), when it could be named.
    pub type_name: Option<String>,
    /// `_message` (`None` for null or unreadable).
    pub message: Option<String>,
    /// `_HResult`.
    pub hresult: i32,
    /// `_innerException`.
    pub inner: Option<Box<ExceptionInfo>>,
    /// `_stackTrace` (the runtime's raw stack trace array object, 0 for none).
    pub stack_trace: u64,
    /// `_stackTraceString` (set when the trace was captured as text), when readable.
    pub stack_trace_string: Option<String>,
    /// The inner exception could not be read (why).
    pub inner_error: Option<String>,
}

/// Reads threads, frames and exceptions of one runtime.
#[derive(Debug, Clone)]
pub struct Threads {
    target: Target,
    descriptor: DataDescriptor,
    /// Frame tag → kind.
    kinds: Vec<(u64, &'static str)>,
    /// The algorithm: 1 links point at `LinkNext`, 2 at the Thread.
    version: u64,
    store_layout: ThreadStoreLayout,
    thread_layout: ThreadLayout,
    /// `None` where the descriptor does not describe `ExceptionInfo` (then no thread has
    /// an exception in flight that cdac can read).
    exception_info_layout: Option<ExceptionInfoLayout>,
}

impl Contract for Threads {
    const NAME: &'static str = "Thread";
    const VERSIONS: &'static [u64] = &[1, 2];

    fn create(context: &ContractContext, version: u64) -> Result<Self, ContractError> {
        match version {
            1 | 2 => Threads::with_version(
                &context.target,
                &context.descriptor,
                context.dac_table,
                version,
            ),
            other => registry::unsupported(Self::NAME, other, Self::VERSIONS),
        }
    }
}

impl Threads {
    /// The Thread contract of a runtime: checks its version, and learns how its Frames are
    /// told apart. `dac_table` is the exported `g_dacTable` (address and size in bytes),
    /// where .NET 8 and 9 keep their Frame vtables.
    pub fn new(
        target: &Target,
        descriptor: &DataDescriptor,
        dac_table: Option<(u64, u64)>,
    ) -> Result<Threads, ContractError> {
        let mut context = ContractContext::new(target, descriptor);
        context.dac_table = dac_table;
        registry::create(&context)
    }

    /// Versions 1 and 2: resolves the records' layouts, and learns the Frame kinds from
    /// the descriptor's identifiers, or from the vtables in `g_dacTable`.
    fn with_version(
        target: &Target,
        descriptor: &DataDescriptor,
        dac_table: Option<(u64, u64)>,
        version: u64,
    ) -> Result<Threads, ContractError> {
        let mut kinds = Vec::new();
        for &kind in FRAME_KINDS {
            if let Ok(v) = descriptor.global_value(&format!("{kind}Identifier")) {
                kinds.push((v, kind));
            }
        }
        if let Some((table, size)) = dac_table {
            let slots = size / u64::from(target.pointer_size());
            for &kind in FRAME_KINDS {
                let Ok(from_end) = descriptor.global_value(&format!("{kind}VtableSlotFromEnd"))
                else {
                    continue;
                };
                if from_end == 0 || from_end > slots {
                    continue;
                }
                let slot = table + (slots - from_end) * u64::from(target.pointer_size());
                match target.read_pointer(slot) {
                    Ok(vtable) if vtable != 0 => kinds.push((vtable, kind)),
                    Ok(_) => {}
                    Err(e) => tracing::warn!("g_dacTable slot of {kind}: {e}"),
                }
            }
        }
        Ok(Threads {
            target: target.clone(),
            descriptor: descriptor.clone(),
            kinds,
            version,
            store_layout: ThreadStoreLayout::from_descriptor(descriptor)?,
            thread_layout: ThreadLayout::from_descriptor(descriptor)?,
            exception_info_layout: ExceptionInfoLayout::from_descriptor(descriptor).ok(),
        })
    }

    /// The Thread contract of an opened runtime (a copy of the one it caches).
    pub fn for_runtime(rt: &crate::runtime::Runtime) -> Result<Threads, ContractError> {
        rt.contracts().threads().cloned()
    }

    fn f(&self) -> Fields<'_> {
        Fields::new(&self.target, &self.descriptor)
    }

    /// The kind a Frame's first word names.
    pub fn frame_kind(&self, tag: u64) -> Option<&'static str> {
        self.kinds.iter().find(|(t, _)| *t == tag).map(|&(_, k)| k)
    }

    /// What the ThreadStore says.
    pub fn thread_store(&self) -> Result<ThreadStoreInfo, ContractError> {
        let f = self.f();
        let store = self.target.read_pointer(f.global("ThreadStore")?)?;
        if store == 0 {
            return Err(ContractError::Corrupt {
                what: "ThreadStore global",
                addr: f.global("ThreadStore")?,
                detail: "null ThreadStore".into(),
            });
        }
        let record = ThreadStoreRecord::read(&self.target, &self.store_layout, store)?;
        let first_thread = self.thread_of_link(record.first_thread_link)?;
        let finalizer_thread = match f.global("FinalizerThread") {
            Ok(g) => Some(self.target.read_pointer(g)?),
            Err(_) => None,
        };
        Ok(ThreadStoreInfo {
            address: store,
            thread_count: record.thread_count,
            first_thread,
            finalizer_thread,
        })
    }

    /// The Thread a list link leads to: the link itself (version 2), or the link minus
    /// the offset of `LinkNext` (version 1).
    fn thread_of_link(&self, link: u64) -> Result<u64, ContractError> {
        if link == 0 || self.version >= 2 {
            return Ok(link);
        }
        let off = self.thread_layout.link_next;
        link.checked_sub(off).ok_or(ContractError::Corrupt {
            what: "thread list link",
            addr: link,
            detail: format!("below the LinkNext offset {off}"),
        })
    }

    /// Every thread of the ThreadStore's list. A walk cut short (a cycle, an unreadable
    /// thread, more threads than [`crate::limits::Limits::max_list_length`]) keeps the
    /// threads read before, with the reason in [`ThreadList::error`].
    pub fn threads(&self) -> Result<ThreadList, ContractError> {
        let store = self.thread_store()?;
        let max = self.target.limits().max_list_length;
        let mut seen = HashSet::new();
        let mut threads = Vec::new();
        let mut error = None;
        let mut cur = store.first_thread;
        while cur != 0 {
            if threads.len() as u64 >= max {
                error = Some(ContractError::LimitExceeded {
                    what: "ThreadStore thread list",
                    addr: store.address,
                    limit: Limit::ListLength,
                    cap: max,
                    unit: "threads",
                });
                break;
            }
            if !seen.insert(cur) {
                error = Some(ContractError::Corrupt {
                    what: "ThreadStore thread list",
                    addr: cur,
                    detail: format!("thread {cur:#x} is on the list twice (a cycle)"),
                });
                break;
            }
            match self.thread(cur) {
                Ok(t) => {
                    cur = t.next;
                    threads.push(t);
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        // A target in a PID namespace of its own records the ids that namespace gives its
        // threads: each is told by the id the reader sees, the recorded one kept beside it.
        // Live, the kernel says which is which; a dump's notes hold only the reader's ids.
        let mut ids = self.target.source().namespace_thread_ids();
        let mut ids_matched = (!ids.is_empty()).then(|| {
            "the runtime's thread ids are its PID namespace's: tied to this reader's by the \
             kernel's NSpid"
                .to_string()
        });
        if ids.is_empty() {
            if let Some((by_stack, note)) = ids_by_stack(&self.target, &threads) {
                ids = by_stack;
                ids_matched = Some(note);
            }
        }
        for t in threads.iter_mut() {
            if let Some(&seen) = ids.get(&t.os_id) {
                t.namespace_os_id = Some(t.os_id);
                t.os_id = seen as u64;
            }
        }
        Ok(ThreadList {
            store,
            threads,
            error,
            ids_matched,
        })
    }

    /// One thread.
    pub fn thread(&self, address: u64) -> Result<ThreadInfo, ContractError> {
        let t = address;
        let record = ThreadRecord::read(&self.target, &self.thread_layout, t)?;
        let next = self.thread_of_link(record.link_next)?;
        let exception_tracker = record.exception_tracker;
        // A damaged tracker or handle loses the thread its exception, not the list its
        // remaining threads.
        let current_exception = if exception_tracker != 0 {
            self.tracker_exception(exception_tracker)
                .unwrap_or_else(|e| {
                    tracing::warn!("thread {t:#x}: exception tracker {exception_tracker:#x}: {e}");
                    None
                })
        } else {
            None
        };
        let last_thrown = match record.last_thrown_object() {
            Some(handle) => self.deref_handle(handle).unwrap_or_else(|e| {
                tracing::warn!("thread {t:#x}: last thrown object handle {handle:#x}: {e}");
                None
            }),
            None => None,
        };
        Ok(ThreadInfo {
            address: t,
            managed_id: record.id,
            os_id: record.os_id,
            namespace_os_id: None,
            state: record.state,
            preemptive_gc_disabled: record.preemptive_gc_disabled,
            frame: record.frame,
            exception_tracker,
            current_exception,
            last_thrown,
            next,
        })
    }

    /// The thread's record, read again (the fields `ThreadInfo` does not keep).
    pub(crate) fn record(&self, thread: u64) -> Result<ThreadRecord, ContractError> {
        ThreadRecord::read(&self.target, &self.thread_layout, thread)
    }

    /// The `ExceptionInfo` at `tracker`.
    fn tracker(&self, tracker: u64) -> Result<ExceptionInfoRecord, ContractError> {
        let layout = self
            .exception_info_layout
            .ok_or_else(|| crate::records::missing_field("ExceptionInfo", "ThrownObject"))?;
        ExceptionInfoRecord::read(&self.target, &layout, tracker)
    }

    /// The object a GC handle holds (`None` for a null handle or object).
    fn deref_handle(&self, handle: u64) -> Result<Option<u64>, ContractError> {
        if handle == 0 {
            return Ok(None);
        }
        let obj = self.target.read_pointer(handle)?;
        Ok((obj != 0).then_some(obj))
    }

    /// The exception object an `ExceptionInfo` holds.
    fn tracker_exception(&self, tracker: u64) -> Result<Option<u64>, ContractError> {
        let record = self.tracker(tracker)?;
        let value = record.thrown_object;
        if value == 0 {
            return Ok(None);
        }
        if !record.thrown_object_is_handle && self.is_exception_object(value) {
            return Ok(Some(value));
        }
        self.deref_handle(value)
    }

    /// The exception trackers nested under this one (`PreviousNestedInfo` chain), this one
    /// first. Empty where the runtime does not describe the chain.
    pub fn nested_trackers(&self, tracker: u64) -> Result<Vec<u64>, ContractError> {
        let mut out = Vec::new();
        if tracker == 0 {
            return Ok(out);
        }
        out.push(tracker);
        let Some(mut cur) = self.tracker(tracker)?.previous_nested_info else {
            return Ok(out);
        };
        while cur != 0 {
            if out.len() >= MAX_NESTED || out.contains(&cur) {
                return Err(ContractError::LimitExceeded {
                    what: "nested exception trackers",
                    addr: tracker,
                    limit: Limit::Fixed,
                    cap: MAX_NESTED as u64,
                    unit: "trackers (or a cycle)",
                });
            }
            out.push(cur);
            cur = self.tracker(cur)?.previous_nested_info.unwrap_or(0);
        }
        Ok(out)
    }

    /// The exception objects of the trackers nested under the thread's current one
    /// (exceptions thrown while an earlier one was being dispatched), innermost first,
    /// without the current exception itself.
    pub fn nested_exceptions(&self, thread: &ThreadInfo) -> Result<Vec<u64>, ContractError> {
        let mut out = Vec::new();
        for tracker in self
            .nested_trackers(thread.exception_tracker)?
            .into_iter()
            .skip(1)
        {
            if let Some(obj) = self.tracker_exception(tracker)? {
                out.push(obj);
            }
        }
        Ok(out)
    }

    /// The thread's allocation context: the free bytes `[pointer, limit)` it allocates
    /// small objects from, which a heap walk must step over; `None` when it has none.
    /// .NET 10 keeps it in `RuntimeThreadLocals` inside an `EEAllocContext`, .NET 9 in
    /// `RuntimeThreadLocals` directly, .NET 8 inline in the Thread (`Thread.AllocContext`).
    pub fn allocation_context(&self, thread: u64) -> Result<Option<(u64, u64)>, ContractError> {
        let f = self.f();
        let context = match self.record(thread)?.alloc_context_home()? {
            AllocContextHome::None => return Ok(None),
            AllocContextHome::Inline(at) => at,
            AllocContextHome::ThreadLocals(locals) => {
                let mut at = locals.wrapping_add(f.off("RuntimeThreadLocals", "AllocContext")?);
                if let Ok(ee) = self.descriptor.ty("EEAllocContext") {
                    if ee.has_field("GCAllocationContext") {
                        at = at.wrapping_add(ee.offset("GCAllocationContext")?);
                    }
                }
                at
            }
        };
        let pointer = f.ptr(context, "GCAllocContext", "Pointer")?;
        let limit = f.ptr(context, "GCAllocContext", "Limit")?;
        Ok((pointer != 0 && limit >= pointer).then_some((pointer, limit)))
    }

    /// The MethodTable of an object.
    pub fn method_table_of(&self, object: u64) -> Result<u64, ContractError> {
        let mask = self
            .descriptor
            .global_value("ObjectToMethodTableUnmask")
            .unwrap_or(MT_MASK_DEFAULT);
        let off = self.f().off("Object", "m_pMethTab").unwrap_or(0);
        Ok(self.target.read_pointer(object.wrapping_add(off))? & !mask)
    }

    /// Whether the object's type is `System.Exception` or derives from it. Without the
    /// `ExceptionMethodTable` global, any object with a readable MethodTable passes.
    pub fn is_exception_object(&self, object: u64) -> bool {
        let Ok(mut mt) = self.method_table_of(object) else {
            return false;
        };
        let exception_mt = match self.descriptor.global_value("ExceptionMethodTable") {
            Ok(g) => match self.target.read_pointer(g) {
                Ok(v) if v != 0 => v,
                _ => return false,
            },
            Err(_) => {
                return mt != 0 && self.f().ptr(mt, "MethodTable", "ParentMethodTable").is_ok()
            }
        };
        for _ in 0..MAX_PARENTS {
            if mt == 0 {
                return false;
            }
            if mt == exception_mt {
                return true;
            }
            match self.f().ptr(mt, "MethodTable", "ParentMethodTable") {
                Ok(p) => mt = p,
                Err(_) => return false,
            }
        }
        false
    }

    /// The explicit Frames of a thread, innermost first, up to FRAME_TOP.
    pub fn frames(&self, thread: &ThreadInfo) -> Result<Vec<ExplicitFrame>, ContractError> {
        let chain = self.frame_chain(thread.frame);
        match chain.error {
            Some(e) => Err(e),
            None => Ok(chain.frames),
        }
    }

    /// The Frame chain from `head`, keeping what was read before a wild pointer, a cycle
    /// or the bound ([`FrameChain::error`]).
    pub fn frame_chain(&self, head: u64) -> FrameChain {
        let mut frames = Vec::new();
        let mut seen = HashSet::new();
        let mut cur = head;
        let mut error = None;
        while cur != FRAME_TOP && cur != 0 {
            if frames.len() as u64 >= MAX_FRAMES {
                error = Some(ContractError::LimitExceeded {
                    what: "Frame chain",
                    addr: head,
                    limit: Limit::Fixed,
                    cap: MAX_FRAMES,
                    unit: "frames",
                });
                break;
            }
            if !seen.insert(cur) {
                error = Some(ContractError::Corrupt {
                    what: "Frame chain",
                    addr: cur,
                    detail: format!("frame {cur:#x} is on the chain twice (a cycle)"),
                });
                break;
            }
            match self.frame(cur) {
                Ok(fr) => {
                    cur = fr.next;
                    frames.push(fr);
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        FrameChain { frames, error }
    }

    /// One Frame.
    pub fn frame(&self, address: u64) -> Result<ExplicitFrame, ContractError> {
        let f = self.f();
        let tag = self.target.read_pointer(address)?;
        let next = f.ptr(address, "Frame", "Next")?;
        let kind = self.frame_kind(tag);
        let mut fr = ExplicitFrame {
            address,
            kind,
            tag,
            return_address: None,
            caller_sp: None,
            saved_fp: None,
            datum: None,
            context_ip: None,
            next,
        };
        let opt = |ty: &str, field: &str| -> Result<Option<u64>, ContractError> {
            if f.has(ty, field) {
                Ok(Some(f.ptr(address, ty, field)?))
            } else {
                Ok(None)
            }
        };
        match kind {
            Some("InlinedCallFrame") => {
                fr.return_address = opt("InlinedCallFrame", "CallerReturnAddress")?;
                fr.caller_sp = opt("InlinedCallFrame", "CallSiteSP")?;
                fr.saved_fp = opt("InlinedCallFrame", "CalleeSavedFP")?;
                fr.datum = opt("InlinedCallFrame", "Datum")?;
            }
            Some("SoftwareExceptionFrame") => {
                fr.return_address = opt("SoftwareExceptionFrame", "ReturnAddress")?;
                if f.has("SoftwareExceptionFrame", "TargetContext") {
                    let ctx =
                        address.wrapping_add(f.off("SoftwareExceptionFrame", "TargetContext")?);
                    self.context_registers(ctx, &mut fr)?;
                }
            }
            Some("FaultingExceptionFrame") if f.has("FaultingExceptionFrame", "TargetContext") => {
                let ctx = address.wrapping_add(f.off("FaultingExceptionFrame", "TargetContext")?);
                self.context_registers(ctx, &mut fr)?;
                fr.return_address = fr.context_ip;
            }
            Some("ResumableFrame" | "RedirectedThreadFrame")
                if f.has("ResumableFrame", "TargetContextPtr") =>
            {
                let ctx = f.ptr(address, "ResumableFrame", "TargetContextPtr")?;
                if ctx != 0 {
                    self.context_registers(ctx, &mut fr)?;
                    fr.return_address = fr.context_ip;
                }
            }
            Some("HijackFrame") => {
                fr.return_address = opt("HijackFrame", "ReturnAddress")?;
                // The hijacked method resumes with its SP just past the saved HijackArgs.
                if let Some(args) = opt("HijackFrame", "HijackArgsPtr")? {
                    if args != 0 && f.has("HijackArgs", "CalleeSavedRegisters") {
                        fr.caller_sp = Some(args.wrapping_add(f.size("HijackArgs")?));
                        let regs = args.wrapping_add(f.off("HijackArgs", "CalleeSavedRegisters")?);
                        fr.saved_fp = Some(f.ptr(regs, "CalleeSavedRegisters", "Rbp")?);
                    }
                }
            }
            Some(
                "PrestubMethodFrame"
                | "CallCountingHelperFrame"
                | "StubDispatchFrame"
                | "ExternalMethodFrame"
                | "DynamicHelperFrame"
                | "PInvokeCalliFrame",
            ) if f.has("FramedMethodFrame", "TransitionBlockPtr")
                && f.has("TransitionBlock", "ReturnAddress") =>
            {
                // A stub's transition block: the return address into the managed caller,
                // the caller's SP just past the block, its callee-saved registers.
                let tb = f.ptr(address, "FramedMethodFrame", "TransitionBlockPtr")?;
                if tb != 0 {
                    fr.return_address = Some(f.ptr(tb, "TransitionBlock", "ReturnAddress")?);
                    fr.caller_sp = Some(tb.wrapping_add(f.size("TransitionBlock")?));
                    if f.has("TransitionBlock", "CalleeSavedRegisters") {
                        let regs =
                            tb.wrapping_add(f.off("TransitionBlock", "CalleeSavedRegisters")?);
                        fr.saved_fp = Some(f.ptr(regs, "CalleeSavedRegisters", "Rbp")?);
                    }
                }
            }
            _ => {}
        }
        Ok(fr)
    }

    /// Reads the instruction, stack and frame pointers of a saved x64 `CONTEXT` into the
    /// frame (other architectures: left unset).
    fn context_registers(&self, ctx: u64, fr: &mut ExplicitFrame) -> Result<(), ContractError> {
        if self.descriptor.global_string("Architecture").ok() != Some("x64") {
            return Ok(());
        }
        fr.context_ip = Some(self.target.read_u64(ctx.wrapping_add(AMD64_CONTEXT_RIP))?);
        fr.caller_sp = Some(self.target.read_u64(ctx.wrapping_add(AMD64_CONTEXT_RSP))?);
        fr.saved_fp = Some(self.target.read_u64(ctx.wrapping_add(AMD64_CONTEXT_RBP))?);
        Ok(())
    }

    /// The managed `System.Threading.Thread` object of a thread (its handle:
    /// `Thread.ExposedObject`, `GCHandle` before .NET 11), `None` when the runtime has not
    /// made one (a thread that never ran managed code).
    pub fn thread_object(&self, t: &ThreadInfo) -> Result<Option<u64>, ContractError> {
        let handle = self.record(t.address)?.exposed_object()?;
        self.deref_handle(handle)
    }

    /// The managed `Thread.Name` of a thread, read from its managed object (`None` when the
    /// thread has no managed object or no name). The object must point back at the
    /// thread (its `_DONT_USE_InternalThread`), which also checks the object layout the
    /// descriptor gives: a mismatch is an error, not a wrong name.
    pub fn thread_name(&self, t: &ThreadInfo) -> Result<Option<String>, ContractError> {
        let f = self.f();
        let Some(object) = self.thread_object(t)? else {
            return Ok(None);
        };
        let back = f.ptr(object, "ThreadObject", "_DONT_USE_InternalThread")?;
        if back != t.address {
            return Err(ContractError::Corrupt {
                what: "managed Thread object",
                addr: object,
                detail: format!(
                    "its _DONT_USE_InternalThread is {back:#x}, not the thread {:#x} whose \
                     handle leads to it",
                    t.address
                ),
            });
        }
        match f.ptr(object, "ThreadObject", "_name")? {
            0 => Ok(None),
            name => self.string(name).map(Some),
        }
    }

    /// The managed exception object at `object`: its type, message, HResult and inner
    /// exceptions (bounded, cycle-safe).
    pub fn exception(
        &self,
        object: u64,
        namer: &mut crate::names::MethodNamer,
    ) -> Result<ExceptionInfo, ContractError> {
        let mut seen = HashSet::new();
        self.exception_at(object, namer, &mut seen, 0)
    }

    fn exception_at(
        &self,
        object: u64,
        namer: &mut crate::names::MethodNamer,
        seen: &mut HashSet<u64>,
        depth: usize,
    ) -> Result<ExceptionInfo, ContractError> {
        let f = self.f();
        seen.insert(object);
        let method_table = self.method_table_of(object)?;
        let type_name = namer.type_name(method_table);
        let message_obj = f.ptr(object, "Exception", "_message")?;
        let message = if message_obj != 0 {
            Some(self.string(message_obj)?)
        } else {
            None
        };
        let hresult = f.u32(object, "Exception", "_HResult")? as i32;
        let stack_trace = if f.has("Exception", "_stackTrace") {
            f.ptr(object, "Exception", "_stackTrace")?
        } else {
            0
        };
        let stack_trace_string = if f.has("Exception", "_stackTraceString") {
            match f.ptr(object, "Exception", "_stackTraceString")? {
                0 => None,
                s => self.string(s).ok(),
            }
        } else {
            None
        };
        let inner_obj = f.ptr(object, "Exception", "_innerException")?;
        let mut inner_error = None;
        let inner = if inner_obj == 0 {
            None
        } else if seen.contains(&inner_obj) {
            inner_error = Some(format!("inner exception {inner_obj:#x} repeats (a cycle)"));
            None
        } else if depth + 1 >= MAX_INNER {
            inner_error = Some(format!("more than {MAX_INNER} inner exceptions"));
            None
        } else {
            match self.exception_at(inner_obj, namer, seen, depth + 1) {
                Ok(e) => Some(Box::new(e)),
                Err(e) => {
                    inner_error = Some(e.to_string());
                    None
                }
            }
        };
        Ok(ExceptionInfo {
            address: object,
            method_table,
            type_name,
            message,
            hresult,
            inner,
            stack_trace,
            stack_trace_string,
            inner_error,
        })
    }

    /// A managed `System.String`, read as UTF-16 (at most
    /// [`crate::limits::Limits::max_string_length`] code units).
    pub fn string(&self, object: u64) -> Result<String, ContractError> {
        let f = self.f();
        let len = u64::from(f.u32(object, "String", "m_StringLength")?);
        let cap = self.target.limits().max_string_length;
        if len > cap {
            return Err(ContractError::LimitExceeded {
                what: "managed string",
                addr: object,
                limit: Limit::StringLength,
                cap,
                unit: "UTF-16 code units",
            });
        }
        let first = object.wrapping_add(f.off("String", "m_FirstChar")?);
        Ok(self.target.read_utf16(first, len as usize)?)
    }
}

#[cfg(test)]
mod namespace_tests {
    use super::*;
    use crate::memory::builder::MemoryBuilder;
    use crate::memory::DataLayout;

    fn runtime_thread(os_id: u64, frame: u64) -> ThreadInfo {
        ThreadInfo {
            address: 0x5000 + os_id,
            managed_id: os_id as u32,
            os_id,
            namespace_os_id: None,
            state: 0,
            preemptive_gc_disabled: false,
            frame,
            exception_tracker: 0,
            current_exception: None,
            last_thrown: None,
            next: 0,
        }
    }

    #[test]
    fn namespaced_ids_are_tied_to_the_dump_threads_whose_stacks_hold_their_frames() {
        let mut b = MemoryBuilder::new(DataLayout::LE64);
        // Three dump threads (host ids), stacks a megabyte apart.
        b.thread(4001, 0x10, 0x7000_0100)
            .thread(4002, 0x10, 0x7010_0100)
            .thread(4003, 0x10, 0x7020_0100);
        let t = b.into_target();
        // The runtime's (namespace) ids 1, 6, 7; 7 has no Frame.
        let threads = [
            runtime_thread(1, 0x7000_0800),
            runtime_thread(6, 0x7010_0900),
            runtime_thread(7, u64::MAX),
        ];
        let (ids, note) = ids_by_stack(&t, &threads).expect("tied");
        assert_eq!(ids.get(&1), Some(&4001));
        assert_eq!(ids.get(&6), Some(&4002));
        assert_eq!(ids.len(), 2, "{ids:?}");
        assert!(note.contains("2 of 3"), "{note}");
        // Two runtime threads on one stack: neither is tied.
        let mut ambiguous = threads.to_vec();
        ambiguous.push(runtime_thread(9, 0x7010_0a00));
        let (ids, _) = ids_by_stack(&t, &ambiguous).expect("tied");
        assert_eq!((ids.get(&6), ids.get(&9)), (None, None));
        // Ids the dump has: nothing to tie.
        let same = [
            runtime_thread(4001, 0x7000_0800),
            runtime_thread(4002, 0x7010_0900),
        ];
        assert!(ids_by_stack(&t, &same).is_none());
    }
}
