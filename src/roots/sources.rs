//! The GC's roots that `cdac` reads, and the extra edges dependent handles add.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::contracts::gc::{FinalizerPart, HandleKind};
use crate::contracts::ContractError;
use crate::runtime::Runtime;

/// What kind of root holds an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootKind {
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
}

impl RootKind {
    /// `strong handle`, `pinned handle`, ...
    pub fn describe(self) -> &'static str {
        match self {
            RootKind::StrongHandle => "strong handle",
            RootKind::PinnedHandle => "pinned handle",
            RootKind::AsyncPinnedHandle => "async-pinned handle",
            RootKind::SizedRefHandle => "sized-ref handle",
            RootKind::FinalizerQueue => "finalizer queue (ready for finalization)",
        }
    }
}

/// One root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Root {
    /// Its kind.
    pub kind: RootKind,
    /// Where it is: the handle, or the finalizer queue's entry.
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
}

impl RootSet {
    /// Reads the roots of `rt`: every strong handle and the finalizer queue's ready objects.
    pub fn read(rt: &Runtime) -> Result<RootSet, ContractError> {
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
