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

/// The little-endian `u32` at `at` in `bytes`, if all four bytes are there.
pub(crate) fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The little-endian `u64` at `at` in `bytes`, if all eight bytes are there.
pub(crate) fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let lo = le_u32(bytes, at)?;
    let hi = le_u32(bytes, at.checked_add(4)?)?;
    Some(u64::from(lo) | u64::from(hi) << 32)
}

pub(crate) fn error(what: &'static str, detail: impl Into<String>) -> AotFormatError {
    AotFormatError {
        what,
        detail: detail.into(),
    }
}
