//! `EEExceptionClause` and `R2RExceptionClause`: one exception-handling clause of JIT'ed
//! and of ReadyToRun code.
//!
//! The word after the handler's range is a union: the filter's offset, the catch type's
//! token, or (JIT'ed code, once resolved) its TypeHandle. .NET 10's overlay names it all
//! three ways; .NET 11 describes only `TypeHandle` for JIT'ed clauses and `ClassToken` for
//! ReadyToRun ones. The record reads the union under whichever name the runtime uses.

use crate::contracts::ContractError;
use crate::descriptor::{DataDescriptor, DescriptorError};
use crate::memory::Target;

use super::TypeFields;

/// Where a clause's fields are, for either kind of clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClauseLayout {
    /// Bytes per clause.
    pub stride: u64,
    flags: u64,
    try_start: u64,
    try_end: u64,
    handler_start: u64,
    handler_end: u64,
    union: u64,
    /// The union as a pointer (the cached TypeHandle), JIT'ed clauses only.
    type_handle: Option<u64>,
}

impl ClauseLayout {
    /// A JIT'ed method's clause (`EEExceptionClause`).
    pub(crate) fn jit(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "EEExceptionClause")?;
        let mut layout = Self::common(&t, d.ty("EEExceptionClause")?.size()?)?;
        layout.type_handle = t.optional("TypeHandle");
        Ok(layout)
    }

    /// A ReadyToRun method's clause (`R2RExceptionClause`).
    pub(crate) fn ready_to_run(d: &DataDescriptor) -> Result<Self, DescriptorError> {
        let t = TypeFields::of(d, "R2RExceptionClause")?;
        Self::common(&t, d.ty("R2RExceptionClause")?.size()?)
    }

    fn common(t: &TypeFields<'_>, size: u32) -> Result<Self, DescriptorError> {
        Ok(ClauseLayout {
            stride: u64::from(size),
            flags: t.required("Flags")?,
            try_start: t.required("TryStartPC")?,
            try_end: t.required("TryEndPC")?,
            handler_start: t.required("HandlerStartPC")?,
            handler_end: t.required("HandlerEndPC")?,
            union: t.renamed(&["ClassToken", "FilterOffset", "TypeHandle"])?,
            type_handle: None,
        })
    }
}

/// One clause, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClauseRecord {
    /// `COR_ILEXCEPTION_CLAUSE_*` flags.
    pub flags: u32,
    /// Try start, try end, handler start, handler end (code offsets).
    pub ranges: [u32; 4],
    /// The union's 32 bits: filter offset or class token.
    pub union: u32,
    /// The union as a pointer, where the clause can hold a TypeHandle.
    pub type_handle: Option<u64>,
}

impl ClauseRecord {
    pub(crate) fn read(
        target: &Target,
        layout: &ClauseLayout,
        address: u64,
    ) -> Result<Self, ContractError> {
        let u32_at = |off: u64| target.read_u32(address.wrapping_add(off));
        Ok(ClauseRecord {
            flags: u32_at(layout.flags)?,
            ranges: [
                u32_at(layout.try_start)?,
                u32_at(layout.try_end)?,
                u32_at(layout.handler_start)?,
                u32_at(layout.handler_end)?,
            ],
            union: u32_at(layout.union)?,
            type_handle: layout
                .type_handle
                .map(|off| target.read_pointer(address.wrapping_add(off)))
                .transpose()?,
        })
    }
}
