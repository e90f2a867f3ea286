//! Errors of the target layer: reading memory and opening targets.

use std::path::PathBuf;

use crate::limits::Limit;

/// Why bytes could not be read from the target. Every variant names the address involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Nothing is mapped at this address in the target.
    #[error("address {addr:#x} is not mapped in the target ({len} bytes requested)")]
    Unmapped {
        /// Target address involved.
        addr: u64,
        /// Bytes requested.
        len: usize,
    },

    /// The address was mapped in the process, but the dump does not hold its bytes.
    #[error("memory at {addr:#x} was not captured in the dump ({len} bytes requested): {reason}")]
    NotCaptured {
        /// Target address involved.
        addr: u64,
        /// Bytes requested.
        len: usize,
        /// Why the bytes are missing.
        reason: String,
    },

    /// The live process went away while we were reading it.
    #[error("process {pid} exited while being read (at address {addr:#x})")]
    ProcessExited {
        /// Process id.
        pid: i32,
        /// Target address involved.
        addr: u64,
    },

    /// The kernel refused access to the live process.
    #[error("permission denied reading process {pid} at {addr:#x}: {hint}")]
    PermissionDenied {
        /// Process id.
        pid: i32,
        /// Target address involved.
        addr: u64,
        /// What may help (for example the ptrace scope).
        hint: String,
    },

    /// A read, or the reads of one command, passed one of the [`crate::limits::Limits`]:
    /// a single read larger than the read-size limit, all reads together past the
    /// total-read limit, or a string with no terminator within the string-length limit.
    #[error("reading at {addr:#x}: {value} exceeds {limit}, which is {cap}")]
    LimitExceeded {
        /// The limit passed.
        limit: Limit,
        /// Target address where it happened.
        addr: u64,
        /// The offending value.
        value: u64,
        /// The limit's value.
        cap: u64,
    },

    /// `addr + len` does not fit in the target's address space.
    #[error("address range {addr:#x} + {len} overflows the address space")]
    AddressOverflow {
        /// Target address involved.
        addr: u64,
        /// Bytes requested.
        len: usize,
    },

    /// The bytes read are not valid text in the expected encoding.
    #[error("string at {addr:#x} is not valid {encoding}")]
    InvalidString {
        /// Target address involved.
        addr: u64,
        /// The expected encoding.
        encoding: &'static str,
    },

    /// The host's read callback (see [`super::callback::CallbackSource`]) reported that it
    /// could not read these bytes.
    #[error("the host could not read {len} bytes at {addr:#x}")]
    HostReadFailed {
        /// First address of the failed read.
        addr: u64,
        /// Bytes requested.
        len: usize,
    },

    /// An operating-system error other than the ones above.
    #[error("I/O error reading {addr:#x}: {source}")]
    Io {
        /// Target address involved.
        addr: u64,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl ReadError {
    /// The target address the error is about.
    pub fn address(&self) -> u64 {
        match self {
            ReadError::Unmapped { addr, .. }
            | ReadError::NotCaptured { addr, .. }
            | ReadError::ProcessExited { addr, .. }
            | ReadError::PermissionDenied { addr, .. }
            | ReadError::LimitExceeded { addr, .. }
            | ReadError::AddressOverflow { addr, .. }
            | ReadError::InvalidString { addr, .. }
            | ReadError::HostReadFailed { addr, .. }
            | ReadError::Io { addr, .. } => *addr,
        }
    }

    /// A string at `addr` with no terminator within `cap` units.
    pub(crate) fn string_too_long(addr: u64, cap: usize) -> ReadError {
        ReadError::LimitExceeded {
            limit: Limit::StringLength,
            addr,
            value: cap as u64 + 1,
            cap: cap as u64,
        }
    }

    /// The limit this error reports passing, if it is a limit error.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            ReadError::LimitExceeded { limit, .. } => Some(*limit),
            _ => None,
        }
    }

    /// Whether the memory was in the process but the dump left it out (or was cut off
    /// before it).
    pub fn is_not_captured(&self) -> bool {
        matches!(self, ReadError::NotCaptured { .. })
    }

    /// True when the memory simply is not available (unmapped, not captured, or refused by
    /// a host's read callback), as opposed to the target itself being unreadable.
    pub fn is_missing_memory(&self) -> bool {
        matches!(
            self,
            ReadError::Unmapped { .. }
                | ReadError::NotCaptured { .. }
                | ReadError::HostReadFailed { .. }
        )
    }
}

/// Why a target could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// No process with this pid.
    #[error("no process with pid {pid}")]
    NoSuchProcess {
        /// Process id.
        pid: i32,
    },

    /// The process exists but may not be read.
    #[error("permission denied opening process {pid}: {hint}")]
    PermissionDenied {
        /// Process id.
        pid: i32,
        /// What may help (for example the ptrace scope).
        hint: String,
    },

    /// A file could not be opened or mapped.
    #[error("cannot open {path}: {source}")]
    Io {
        /// Path of the file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The file is not an ELF core dump, or its headers are damaged.
    #[error("{path} is not a usable ELF core dump: {detail}")]
    BadCore {
        /// Path of the file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },

    /// /proc data of a live process could not be parsed.
    #[error("cannot read /proc data of process {pid}: {detail}")]
    Proc {
        /// Process id.
        pid: i32,
        /// What is wrong.
        detail: String,
    },
}
