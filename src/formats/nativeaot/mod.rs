//! What the NativeAOT compiler (ILCompiler) writes into an executable for the runtime to
//! name its own frames: a ReadyToRun-style module header listing blobs ([`module_header`]),
//! NativeFormat metadata ([`metadata`], blob 13), and the map from method start to its
//! owning type, name and signature ([`stack_trace_map`], blob 27). Bytes only: the caller
//! reads them from the file or the target.
//!
//! Verified against ILCompiler 10.0.12 (header 16.0) and 11.0.0 (header 26.1) builds, whose
//! metadata and map formats are the same.

pub mod metadata;
pub mod module_header;
pub mod native_format;
pub mod stack_trace_map;

/// Why NativeAOT data could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {detail}")]
pub struct AotFormatError {
    /// The structure being decoded.
    pub what: &'static str,
    /// What is wrong.
    pub detail: String,
}

pub(crate) fn error(what: &'static str, detail: impl Into<String>) -> AotFormatError {
    AotFormatError {
        what,
        detail: detail.into(),
    }
}
