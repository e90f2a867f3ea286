//! `cdac` reads the internals of a running .NET (CoreCLR) process, or of its core dump,
//! from outside the process, the way the runtime's own data-contract reader (cDAC) does.
//!
//! Layers, bottom up:
//! - [`regs`]: the register context every layer above shares (a leaf).
//! - [`memory`]: memory of a live process, a core dump, a debugger's callback or a test
//!   layout, with typed reads; [`process`]: ptrace thread snapshots and perf sampling.
//! - [`descriptor`]: the runtime's data descriptor (type layouts, globals, contract
//!   versions), embedded in .NET 9+ runtimes or shipped with `cdac` for .NET 8.
//! - [`runtime`]: finding the runtime module in a target and loading its descriptor.
//! - `records` (crate-private): one typed record per runtime type, its offsets resolved once
//!   per runtime from the descriptor; contracts read records, not names.
//! - [`contracts`]: versioned algorithms over the runtime's data, each made through
//!   [`contracts::registry`] and cached by [`runtime::Runtime::contracts`].
//! - [`formats`]: file formats `cdac` reads and writes.
//! - [`unwind`]: stepping from a frame to its caller, managed and native.
//! - [`symbols`]: naming native code by the ELF symbols of its module.
//!
//! # Reading a runtime
//!
//! [`runtime::Runtime`] is the entry point: it finds the runtime in a live process
//! ([`Runtime::attach`](runtime::Runtime::attach)), a core dump
//! ([`Runtime::open_dump`](runtime::Runtime::open_dump)), memory a debugger reads for us
//! ([`Runtime::open_host`](runtime::Runtime::open_host)) or any other
//! [`memory::MemorySource`], and loads its data descriptor. Contracts then answer
//! questions about it:
//!
//! ```no_run
//! use cdac::contracts::execution_manager::ExecutionManager;
//! use cdac::names::MethodNamer;
//! use cdac::runtime::{OpenOptions, Runtime};
//! use cdac::stacks::{thread_stacks, LiveRegisters};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = Runtime::attach(1234, &OpenOptions::default())?;
//! // Which method is this code address in?
//! let em = rt.contracts().execution_manager()?;
//! let mut namer = MethodNamer::for_runtime(&rt);
//! if let Some(block) = em.code_block(0x7f3a_1c05_2f40)? {
//!     let name = namer.name(block.method_desc);
//!     println!("{name} + {:#x}", block.relative_offset);
//! }
//! // Every thread's stack, read without stopping the process.
//! let stacks = thread_stacks(&rt, LiveRegisters::NonBlocking, None)?;
//! for thread in &stacks.threads {
//!     let frames = thread.stack.as_ref().map_or(0, |s| s.frames.len());
//!     println!("thread {}: {frames} frames", thread.os_id);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Reading memory
//!
//! Below the runtime, a [`memory::Target`] gives typed, bounds-checked reads of any
//! source. Tests lay memory out with [`memory::builder::MemoryBuilder`]:
//!
//! ```
//! use cdac::memory::builder::MemoryBuilder;
//! use cdac::memory::DataLayout;
//!
//! let mut memory = MemoryBuilder::new(DataLayout::LE64);
//! let node = memory.alloc(16, 8).pointer(0, 0x1234).u32(8, 7).addr;
//! let target = memory.into_target();
//! assert_eq!(target.read_pointer(node)?, 0x1234);
//! assert_eq!(target.read_u32(node + 8)?, 7);
//! // Reads past what is mapped fail with the address that could not be read.
//! let err = target.read_u64(node + 12).unwrap_err();
//! assert_eq!(err.address(), node + 16);
//! # Ok::<(), cdac::memory::ReadError>(())
//! ```

#![deny(missing_docs)]
// `unsafe` is allowed in two audited modules only: `memory::sys` and `process::perf_sys`.
#![deny(unsafe_code)]

pub mod async_chains;
pub mod contracts;
pub mod coverage;
pub mod descriptor;
pub mod exception_report;
pub mod find;
pub mod formats;
pub mod heap;
pub mod inspect;
pub mod limits;
pub mod locks;
pub mod memory;
pub mod names;
pub mod nativeaot;
pub mod process;
pub mod profile;
pub(crate) mod records;
pub mod regs;
pub mod roots;
pub mod runtime;
pub mod source_lines;
pub mod stacks;
pub mod symbols;
pub mod thread_pool;
pub mod unwind;
pub mod validation;
pub mod verify;

// What most programs start from, at the crate root (as framehop and object do); the
// modules hold the rest.
pub use contracts::ContractError;
pub use memory::{MemorySource, ReadError, Target};
pub use regs::Registers;
pub use runtime::{OpenOptions, Runtime, RuntimeError};
