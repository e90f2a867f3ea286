//! `cdac` reads the internals of a running .NET (CoreCLR) process, or of its core dump,
//! from outside the process, the way the runtime's own data-contract reader (cDAC) does.
//!
//! Layers, bottom up:
//! - [`target`]: memory of a live process, a core dump, or a test layout, with typed reads.
//! - [`descriptor`]: the runtime's data descriptor (type layouts, globals, contract
//!   versions), embedded in .NET 9+ runtimes or shipped with `cdac` for .NET 8.
//! - [`runtime`]: finding the runtime module in a target and loading its descriptor.
//! - [`contracts`]: versioned algorithms over the runtime's data.
//! - [`formats`]: file formats `cdac` reads and writes.
//! - [`unwind`]: stepping from a frame to its caller, managed and native.
//! - [`symbols`]: naming native code by the ELF symbols of its module.

#![deny(missing_docs)]

pub mod contracts;
pub mod coverage;
pub mod descriptor;
pub mod formats;
pub mod limits;
pub mod names;
pub mod runtime;
pub mod source_lines;
pub mod stacks;
pub mod symbols;
pub mod target;
pub mod unwind;
