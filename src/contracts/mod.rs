//! Versioned contract implementations over the runtime's data descriptor.
//!
//! A contract is an algorithm plus the data it reads; the runtime names the version of
//! each contract it satisfies, and [`registry`] checks it against the versions implemented
//! here (one list, [`registry::SUPPORTED`]), making the contract or a typed "unsupported
//! contract version" error. The specs, in
//! our own words, are in `contracts/` at the top of the repository.

pub mod code_versions;
pub mod debug_info;
pub mod exception_trace;
pub mod execution_manager;
pub mod field_desc;
pub(crate) mod fields;
pub mod gc;
pub mod gc_info;
pub mod loader;
pub mod platform_metadata;
pub mod precode_stubs;
pub mod registry;
pub mod runtime_function;
pub mod runtime_info;
pub mod runtime_type_system;
pub mod sync_block;
pub mod thread;
pub mod unwind_codes;
pub mod unwind_info;
pub mod versions;

use crate::descriptor::DescriptorError;
use crate::limits::Limit;
use crate::memory::ReadError;

/// Why a contract operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The runtime does not advertise the contract at all.
    #[error("the runtime does not advertise the {contract} contract")]
    Missing {
        /// Contract name.
        contract: &'static str,
    },

    /// The runtime advertises a version cdac does not implement.
    #[error("unsupported contract version: {contract} {version} (cdac implements {supported})")]
    UnsupportedVersion {
        /// Contract name.
        contract: &'static str,
        /// The version found.
        version: String,
        /// The versions cdac implements ("1 and 2").
        supported: String,
    },

    /// The contract has no implementation for the target's architecture.
    #[error(
        "{contract} is not supported on architecture {architecture} (cdac supports {supported})"
    )]
    UnsupportedArchitecture {
        /// Contract name.
        contract: &'static str,
        /// The target's architecture.
        architecture: String,
        /// What this reader supports.
        supported: &'static str,
    },

    /// The runtime is of another flavor than the reader (a CoreCLR reader on NativeAOT,
    /// or the reverse).
    #[error("{reader} reads {wanted} runtimes; this one is {found}")]
    WrongFlavor {
        /// What reads.
        reader: &'static str,
        /// The flavor it reads.
        wanted: &'static str,
        /// The runtime's flavor.
        found: &'static str,
    },

    /// A type, field or global the contract needs is missing from the descriptor.
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),

    /// Target memory could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),

    /// A runtime structure holds values that cannot be right (a damaged dump, or a
    /// structure read while the runtime was changing it).
    #[error("corrupt {what} at {addr:#x}: {detail}")]
    Corrupt {
        /// The structure being read.
        what: &'static str,
        /// Its target address.
        addr: u64,
        /// What is wrong.
        detail: String,
    },

    /// A walk over target data went past one of the [`crate::limits::Limits`] (a cycle,
    /// or a list longer than any real runtime builds), or past a bound of the format.
    #[error("{what} at {addr:#x} exceeds {limit}, which is {cap} {unit}")]
    LimitExceeded {
        /// What was being read or walked.
        what: &'static str,
        /// Target address where it happened.
        addr: u64,
        /// The limit passed.
        limit: Limit,
        /// The limit's value.
        cap: u64,
        /// Unit of the limit (bytes, entries...).
        unit: &'static str,
    },
}

impl ContractError {
    /// The limit this error reports passing, if it is a limit error (also through a read).
    pub fn limit(&self) -> Option<Limit> {
        match self {
            ContractError::LimitExceeded { limit, .. } => Some(*limit),
            ContractError::Read(e) => e.limit(),
            _ => None,
        }
    }
}
