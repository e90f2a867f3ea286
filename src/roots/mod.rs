//! What keeps objects alive: the GC's roots, a mark of everything reachable from them, and
//! the path from a root to one object (`cdac gcroot`, `cdac heap --live`).
//!
//! - `sources`: the roots (strong and pinned handles, the finalizer queue's ready
//!   objects) and dependent handles' edges.
//! - `mark`: a breadth-first mark from all roots with a bitmap per segment (one bit per
//!   8 bytes), level by level, so that a path is rebuilt from the levels instead of a
//!   parent per object; it stops as soon as a target is reached.
//! - `paths`: one path from each root that reaches an object (`gcroot --all`).
//!
//! Stack roots (every managed frame's live slots, [`crate::stacks::roots`]) are read on
//! request ([`RootOptions::stacks`]); an interior pointer among them roots the object
//! containing it when its segment is small enough to walk. Thread statics are read from
//! each thread's thread-local data on .NET 9 and 10 ([`ThreadStatics`]); .NET 8 holds them
//! with strong handles. Explicit Frames' roots (GCFrame, HelperMethodFrame) are not read.

pub(crate) mod mark;
mod paths;
mod sources;

pub use mark::{MarkSummary, Marker, PathStep, RootPath, Via};
pub use sources::{Root, RootKind, RootOptions, RootSet, ThreadStatics};
