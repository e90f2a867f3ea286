//! Controlling a live process, beyond reading its memory: stopping its threads for a
//! moment to read their registers and stacks (ptrace snapshots), and having the kernel
//! sample them (perf events). Built on the memory layer ([`crate::memory`]), never the
//! other way round.

pub mod freeze;
pub mod perf_sampler;
#[allow(unsafe_code)]
mod perf_sys;
pub mod thread_snapshot;
