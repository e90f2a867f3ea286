//! The GC's roots that `cdac` reads, and the extra edges dependent handles add.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::contracts::gc::{FinalizerPart, HandleKind};
use crate::contracts::ContractError;
use crate::runtime::Runtime;
use crate::stacks::{thread_stacks_with, LiveRegisters, StacksOptions};

/// What kind of root holds an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootKind {
    /// A live GC slot of a managed frame (a local, an argument, a spilled temporary).
    Stack {
        /// The thread's kernel id.
        thread: i32,
        /// The frame's index in the thread's stack (innermost 0).
        frame: u32,
    },
    /// A strong GC handle.
    StrongHandle,
    /// A pinned GC handle (statics live in pinned `object[]`s held by these).
    PinnedHandle,
    /// An async-pinned handle (overlapped I/O buffers).
    AsyncPinnedHandle,
    /// A sized-ref handle.
    SizedRefHandle,
    /// The finalizer queue: dead, waiting for its finalizer.
    FinalizerQueue,
    /// A thread's thread-static storage (.NET 9 and 10: the array of its types'
    /// thread-static blocks, and blocks still being initialized), which the GC scans
    /// directly; .NET 8 holds thread statics with strong handles instead.
    ThreadStatic {
        /// The thread's kernel id.
        thread: i32,
    },
}

impl RootKind {
    /// The name JSON uses: `stack`, `strong_handle`, `pinned_handle`,
    /// `async_pinned_handle`, `sized_ref_handle`, `finalizer_queue`, `thread_static`.
    pub fn name(self) -> &'static str {
        match self {
            RootKind::Stack { .. } => "stack",
            RootKind::StrongHandle => "strong_handle",
            RootKind::PinnedHandle => "pinned_handle",
            RootKind::AsyncPinnedHandle => "async_pinned_handle",
            RootKind::SizedRefHandle => "sized_ref_handle",
            RootKind::FinalizerQueue => "finalizer_queue",
            RootKind::ThreadStatic { .. } => "thread_static",
        }
    }

    /// `strong handle`, `pinned handle`, ...
    pub fn describe(self) -> &'static str {
        match self {
            RootKind::Stack { .. } => "stack slot",
            RootKind::StrongHandle => "strong handle",
            RootKind::PinnedHandle => "pinned handle",
            RootKind::AsyncPinnedHandle => "async-pinned handle",
            RootKind::SizedRefHandle => "sized-ref handle",
            RootKind::FinalizerQueue => "finalizer queue (ready for finalization)",
            RootKind::ThreadStatic { .. } => "thread statics",
        }
    }
}

/// One root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Root {
    /// Its kind.
    pub kind: RootKind,
    /// Where it is: the handle, the finalizer queue's entry, or the stack slot (0 for a
    /// register).
    pub address: u64,
    /// The object it holds.
    pub object: u64,
}

/// Every root, and the edges dependent handles add (primary → secondaries: the secondary
/// lives as long as the primary).
#[derive(Debug, Clone, Default)]
pub struct RootSet {
    /// The roots, handles first.
    pub roots: Vec<Root>,
    /// Dependent handles' secondaries by primary.
    pub dependent: FxHashMap<u64, Vec<u64>>,
    /// What could not be read (the roots found are still used).
    pub problems: Vec<String>,
    /// Stack slots holding interior pointers resolved to the object containing them
    /// (their roots are in `roots`, with that object).
    pub interior_resolved: u64,
    /// Stack slots holding interior pointers not used as roots: outside every segment
    /// (into the stack, native memory), in a segment too large to walk for it (over
    /// `MAX_INTERIOR_SEGMENT` bytes of objects), or in a gap between objects.
    pub interior_skipped: u64,
    /// Whether stack roots were read.
    pub stacks_read: bool,
    /// How thread statics are rooted, and whether they were read.
    pub thread_statics: ThreadStatics,
    /// How long reading the stacks of a live process stopped its threads.
    pub pauses: Option<crate::stacks::Pauses>,
}

/// Where a runtime keeps thread statics, as far as the roots are concerned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ThreadStatics {
    /// In each thread's thread-local data, read from the threads (.NET 9 and 10).
    Read,
    /// In arrays held by strong handles (.NET 8): among the handle roots.
    HeldByHandles,
    /// Not read: the descriptor does not say where they are.
    #[default]
    NotRead,
}

/// Largest object range of a segment walked to find the object an interior stack slot
/// points into (a region is 4 MiB or a few times that; a .NET 8 segments-GC ephemeral
/// segment can be 256 MiB, not walked).
pub const MAX_INTERIOR_SEGMENT: u64 = 32 << 20;

/// Which roots [`RootSet::read_with`] reads besides handles and the finalizer queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RootOptions {
    /// Every thread's stack roots; on a live process, how registers are read (stopping
    /// each thread for a moment, as `stacks` does).
    pub stacks: Option<LiveRegisters>,
}

impl RootSet {
    /// Reads the roots of `rt`: every strong handle, the finalizer queue's ready objects and
    /// every thread's thread statics.
    pub fn read(rt: &Runtime) -> Result<RootSet, ContractError> {
        RootSet::read_with(rt, RootOptions::default())
    }

    /// [`RootSet::read`], plus every thread's stack roots when `options` asks: the live
    /// slots of each managed frame holding a non-null reference that is not an interior
    /// pointer (those are counted in `interior_skipped`).
    pub fn read_with(rt: &Runtime, options: RootOptions) -> Result<RootSet, ContractError> {
        let mut set = RootSet::read_handles(rt)?;
        set.read_thread_statics(rt);
        let mut interior: Vec<Root> = Vec::new();
        if let Some(live) = options.stacks {
            set.stacks_read = true;
            match thread_stacks_with(rt, live, None, StacksOptions { gc_roots: true }) {
                Ok(stacks) => {
                    set.pauses = stacks.pauses();
                    for w in stacks.warnings {
                        set.problems.push(format!("stacks: {w}"));
                    }
                    for t in &stacks.threads {
                        for fr in t.roots.iter().flatten() {
                            for e in &fr.errors {
                                set.problems
                                    .push(format!("thread {} frame {}: {e}", t.os_id, fr.frame));
                            }
                            for r in &fr.roots {
                                if r.object == 0 {
                                    continue;
                                }
                                let root = Root {
                                    kind: RootKind::Stack {
                                        thread: r.thread,
                                        frame: u32::try_from(r.frame).unwrap_or(u32::MAX),
                                    },
                                    address: r.address.unwrap_or(0),
                                    object: r.object,
                                };
                                if r.interior {
                                    interior.push(root);
                                } else {
                                    set.roots.push(root);
                                }
                            }
                        }
                    }
                }
                Err(e) => set.problems.push(format!("stacks: {e}")),
            }
        }
        if !interior.is_empty() {
            let values: Vec<u64> = interior.iter().map(|r| r.object).collect();
            let containing = match containing_objects(rt, &values) {
                Ok(c) => c,
                Err(e) => {
                    set.problems
                        .push(format!("objects holding interior stack slots: {e}"));
                    FxHashMap::default()
                }
            };
            for mut r in interior {
                match containing.get(&r.object) {
                    Some(&object) => {
                        r.object = object;
                        set.roots.push(r);
                        set.interior_resolved += 1;
                    }
                    None => set.interior_skipped += 1,
                }
            }
        }
        Ok(set)
    }

    /// Each thread's thread-static storage, where the descriptor says where it is: the
    /// object array of its types' thread-static blocks and the list of blocks whose type
    /// is still being initialized (collectible types' blocks are held by their loader's
    /// handles instead).
    fn read_thread_statics(&mut self, rt: &Runtime) {
        let d = rt.descriptor();
        let described = d
            .ty("Thread")
            .is_ok_and(|t| t.has_field("ThreadLocalDataPtr"))
            && d.ty("ThreadLocalData").is_ok();
        if !described {
            if rt.contracts().context().major == Some(8) {
                self.thread_statics = ThreadStatics::HeldByHandles;
            }
            return;
        }
        match thread_static_roots(rt) {
            Ok((roots, problems)) => {
                self.roots.extend(roots);
                self.problems.extend(problems);
                self.thread_statics = ThreadStatics::Read;
            }
            Err(e) => self.problems.push(format!("thread statics: {e}")),
        }
    }

    fn read_handles(rt: &Runtime) -> Result<RootSet, ContractError> {
        let gc = rt.contracts().gc()?;
        let mut set = RootSet::default();
        match gc.handles() {
            Ok(handles) => {
                for h in handles {
                    if h.object == 0 {
                        continue;
                    }
                    let kind = match h.kind {
                        HandleKind::Strong => RootKind::StrongHandle,
                        HandleKind::Pinned => RootKind::PinnedHandle,
                        HandleKind::AsyncPinned => RootKind::AsyncPinnedHandle,
                        HandleKind::SizedRef => RootKind::SizedRefHandle,
                        HandleKind::Dependent => {
                            if h.secondary != 0 {
                                set.dependent.entry(h.object).or_default().push(h.secondary);
                            }
                            continue;
                        }
                        _ => continue,
                    };
                    set.roots.push(Root {
                        kind,
                        address: h.address,
                        object: h.object,
                    });
                }
            }
            Err(e) => set.problems.push(format!("handles: {e}")),
        }
        match gc.finalizer_entries() {
            Ok(entries) => set.roots.extend(
                entries
                    .iter()
                    .filter(|e| {
                        e.object != 0
                            && matches!(e.part, FinalizerPart::Ready | FinalizerPart::ReadyCritical)
                    })
                    .map(|e| Root {
                        kind: RootKind::FinalizerQueue,
                        address: e.address,
                        object: e.object,
                    }),
            ),
            Err(e) => set.problems.push(format!("finalizer queue: {e}")),
        }
        Ok(set)
    }
}

/// Every thread's thread-static roots, and what could not be read of them.
fn thread_static_roots(rt: &Runtime) -> Result<(Vec<Root>, Vec<String>), ContractError> {
    let f = crate::contracts::fields::Fields::new(rt.target(), rt.descriptor());
    let contract = rt.contracts().threads()?;
    let threads = contract.threads()?;
    let limit = rt.target().limits().max_list_length;
    let (mut roots, mut problems) = (Vec::new(), Vec::new());
    for t in &threads.threads {
        let kind = RootKind::ThreadStatic {
            thread: t.os_id as i32,
        };
        let read = || -> Result<Vec<Root>, ContractError> {
            let mut out = Vec::new();
            let data = contract.record(t.address)?.thread_local_data()?;
            if data == 0 {
                return Ok(out);
            }
            let at = data + f.off("ThreadLocalData", "NonCollectibleTlsArrayData")?;
            out.push(Root {
                kind,
                address: at,
                object: rt.target().read_pointer(at)?,
            });
            // Blocks of types whose static constructor has not finished.
            let mut next = f.ptr(data, "ThreadLocalData", "InFlightData")?;
            let mut seen = 0u64;
            while next != 0 {
                seen += 1;
                if seen > limit {
                    return Err(ContractError::LimitExceeded {
                        what: "in-flight thread-static list",
                        addr: data,
                        limit: crate::limits::Limit::ListLength,
                        cap: limit,
                        unit: "entries",
                    });
                }
                let at = next + f.off("InFlightTLSData", "TLSData")?;
                out.push(Root {
                    kind,
                    address: at,
                    object: rt.target().read_pointer(at)?,
                });
                next = f.ptr(next, "InFlightTLSData", "Next")?;
            }
            Ok(out)
        };
        match read() {
            Ok(r) => roots.extend(r.into_iter().filter(|r| r.object != 0)),
            Err(e) => problems.push(format!("thread {}'s thread statics: {e}", t.os_id)),
        }
    }
    Ok((roots, problems))
}

/// The object (not a free one) containing each of `values`, for those inside a segment of
/// at most [`MAX_INTERIOR_SEGMENT`] bytes of objects: each such segment is walked once.
fn containing_objects(rt: &Runtime, values: &[u64]) -> Result<FxHashMap<u64, u64>, ContractError> {
    let layout = crate::heap::layout(rt)?;
    let gc = rt.contracts().gc()?;
    let mut walker = gc.walker(&layout.heaps, layout.thread_contexts.clone())?;
    let mut out = FxHashMap::default();
    for seg in &layout.segments {
        if seg.end.saturating_sub(seg.start) > MAX_INTERIOR_SEGMENT {
            continue;
        }
        let mut inside: Vec<u64> = values
            .iter()
            .copied()
            .filter(|&v| v >= seg.start && v < seg.end)
            .collect();
        if inside.is_empty() {
            continue;
        }
        inside.sort_unstable();
        inside.dedup();
        let _ = walker.walk(std::slice::from_ref(seg), &layout.heaps, |o| {
            if o.is_free {
                return;
            }
            let end = o.address.saturating_add(o.size);
            let from = inside.partition_point(|&v| v < o.address);
            for &v in inside[from..].iter().take_while(|&&v| v < end) {
                out.insert(v, o.address);
            }
        });
    }
    Ok(out)
}
