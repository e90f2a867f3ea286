//! What keeps objects alive: the GC's roots, a mark of everything reachable from them, and
//! the path from a root to one object (`cdac gcroot`, `cdac heap --live`).
//!
//! - [`sources`]: the roots (strong and pinned handles, the finalizer queue's ready
//!   objects) and dependent handles' edges.
//! - [`mark`]: a breadth-first mark from all roots with a bitmap per segment (one bit per
//!   8 bytes), level by level, so that a path is rebuilt from the levels instead of a
//!   parent per object; it stops as soon as a target is reached.
//!
//! Stack roots (every frame's live slots) are not included yet: the GC info body decoder
//! they need lands separately. Until then `gcroot` says so and `heap --live` counts only
//! what handles and the finalizer queue keep alive.

pub mod mark;
pub mod sources;

pub use mark::{MarkSummary, Marker, PathStep, RootPath, Via};
pub use sources::{Root, RootKind, RootSet};
