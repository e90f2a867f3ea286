//! Source file and line of managed code: a method's module (its path in the target), its
//! MethodDef token and an IL offset, looked up in the module's portable PDB
//! ([`crate::formats::pdb`]); and the frames of an exception's captured stack trace
//! ([`crate::contracts::exception_trace`]) with their IL offsets, so that a crash summary
//! can name where an exception was thrown.

use std::path::Path;

use crate::contracts::debug_info::{il_offset, IlOffset};
use crate::contracts::exception_trace::{
    decode_stack_trace, TraceFrame, TraceLayout, STEF_IP_ADJUSTED,
};
use crate::contracts::ContractError;
use crate::formats::pdb::{PdbError, PdbFinder, SourceLocation};
use crate::runtime::Runtime;

/// Finds source lines, one PDB per assembly (found once, cached).
#[derive(Debug, Default)]
pub struct SourceLines {
    finder: PdbFinder,
}

impl SourceLines {
    /// An empty cache.
    pub fn new() -> SourceLines {
        SourceLines::default()
    }

    /// An empty cache for `target`'s files: under its root when it has one of its own (a
    /// process in a container's mount namespace).
    pub fn for_target(target: &crate::memory::Target) -> SourceLines {
        SourceLines {
            finder: PdbFinder::with_root(target.source().file_root()),
        }
    }

    /// The PDB finder (and its cache).
    pub fn finder(&self) -> &PdbFinder {
        &self.finder
    }

    /// Where IL offset `il_offset` of the method with MethodDef token `method_token` of the
    /// assembly at `assembly` is in the source. `Ok(None)` when the PDB has no sequence
    /// point at or before the offset.
    pub fn locate(
        &self,
        assembly: &Path,
        method_token: u32,
        il_offset: u32,
    ) -> Result<Option<SourceLocation>, PdbError> {
        let found = self.finder.pdb_for(assembly)?;
        found.pdb.line_at(method_token & 0x00FF_FFFF, il_offset)
    }
}

/// One frame of an exception's captured trace with the IL offset its IP maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedTraceFrame {
    /// The frame as captured.
    pub frame: TraceFrame,
    /// The IL offset (of the call, for a return address), from the method's debug info.
    pub il_offset: Option<IlOffset>,
}

/// The captured stack trace `stack_trace` (an exception's `_stackTrace`) of `rt`, each
/// frame with its IL offset. An IP the runtime has not adjusted (no `STEF_IP_ADJUSTED`)
/// is taken as a return address and looked up one byte earlier, in the call.
pub fn exception_trace_frames(
    rt: &Runtime,
    stack_trace: u64,
) -> Result<Vec<ResolvedTraceFrame>, ContractError> {
    let major: Option<u32> = rt.version().and_then(|v| v.major());
    let layout = TraceLayout::for_runtime_major(major.unwrap_or(9));
    let trace = decode_stack_trace(rt.target(), stack_trace, layout)?;
    let em = rt.contracts().execution_manager()?;
    let format = rt.contracts().debug_info()?;
    Ok(trace
        .frames
        .into_iter()
        .map(|frame| {
            let at = if frame.flags & STEF_IP_ADJUSTED != 0 {
                frame.ip
            } else {
                frame.ip.saturating_sub(1)
            };
            let il = em
                .code_block(at)
                .ok()
                .flatten()
                .and_then(|b| il_offset(rt.target(), em, &b, &format, false).ok()?)
                .map(|m| m.il_offset);
            ResolvedTraceFrame {
                frame,
                il_offset: il,
            }
        })
        .collect())
}
