//! Exception clauses of a method: the JIT's `EE_ILEXCEPTION` clauses (JIT'ed code) and
//! the ReadyToRun `READYTORUN_EXCEPTION_CLAUSE`s (precompiled code), decoded into one
//! form. Offsets are native code offsets from the method start.

use serde::Serialize;

use crate::contracts::ContractError;
use crate::descriptor::DataDescriptor;
use crate::limits::Limit;
use crate::memory::Target;
use crate::records::exception_clause::{ClauseLayout, ClauseRecord};

/// Clause flag bits (`CorExceptionFlag` plus the runtime's own).
pub mod flags {
    /// A filter clause.
    pub const FILTER: u32 = 0x1;
    /// A finally clause.
    pub const FINALLY: u32 = 0x2;
    /// A fault clause.
    pub const FAULT: u32 = 0x4;
    /// The clause duplicates one of an enclosing funclet (the JIT adds these).
    pub const DUPLICATED: u32 = 0x8;
    /// The union holds a resolved type handle instead of a class token.
    pub const CACHED_CLASS: u32 = 0x1000_0000;
}

/// What a clause handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClauseKind {
    /// `catch (T)`.
    Typed,
    /// `finally`.
    Finally,
    /// `fault` (also what optimized code turns some `finally` clauses into).
    Fault,
    /// `catch when (filter)`.
    Filter,
}

impl ClauseKind {
    /// The kind a flags word names: fault, else finally, else filter, else typed.
    pub fn from_flags(flags: u32) -> ClauseKind {
        if flags & self::flags::FAULT != 0 {
            ClauseKind::Fault
        } else if flags & self::flags::FINALLY != 0 {
            ClauseKind::Finally
        } else if flags & self::flags::FILTER != 0 {
            ClauseKind::Filter
        } else {
            ClauseKind::Typed
        }
    }
}

/// One decoded clause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExceptionClause {
    /// What the clause handles.
    pub kind: ClauseKind,
    /// Raw flags.
    pub flags: u32,
    /// The clause duplicates an enclosing funclet's (flag 0x8).
    pub duplicated: bool,
    /// Protected range, native offsets `[try_start, try_end)`.
    pub try_start: u32,
    /// End of the protected range (offset in the method, exclusive).
    pub try_end: u32,
    /// Handler range, native offsets `[handler_start, handler_end)`.
    pub handler_start: u32,
    /// End of the handler (offset in the method, exclusive).
    pub handler_end: u32,
    /// Filter clauses: native offset of the filter funclet.
    pub filter_offset: Option<u32>,
    /// Typed clauses: the metadata token of the caught class, when not cached.
    pub class_token: Option<u32>,
    /// Typed clauses whose class the runtime resolved: the TypeHandle.
    pub type_handle: Option<u64>,
}

/// Reads the clauses of JIT'ed code from its `EHInfo` pointer (the clause count is the
/// pointer-sized value just before it). A null pointer means no clauses.
pub fn read_jit_clauses(
    target: &Target,
    descriptor: &DataDescriptor,
    eh_info: u64,
) -> Result<Vec<ExceptionClause>, ContractError> {
    if eh_info == 0 {
        return Ok(Vec::new());
    }
    let ps = u64::from(target.pointer_size());
    let count_addr = eh_info.checked_sub(ps).ok_or(ContractError::Corrupt {
        what: "exception info",
        addr: eh_info,
        detail: "pointer below the clause count".into(),
    })?;
    let count = target.read_pointer(count_addr)?;
    let max_list = target.limits().max_list_length;
    if count > max_list {
        return Err(ContractError::LimitExceeded {
            what: "exception clause count",
            addr: count_addr,
            limit: Limit::ListLength,
            cap: max_list,
            unit: "clauses",
        });
    }
    let first = eh_info.wrapping_add(descriptor.ty("EEILException")?.offset("Clauses")?);
    let layout = ClauseLayout::jit(descriptor)?;
    (0..count)
        .map(|i| {
            let r = ClauseRecord::read(target, &layout, first.wrapping_add(i * layout.stride))?;
            // The union holds a TypeHandle once the runtime has resolved the catch type.
            let cached = r.flags & flags::CACHED_CLASS != 0;
            clause(
                r.flags,
                r.ranges,
                r.union,
                if cached { r.type_handle } else { None },
            )
        })
        .collect()
}

/// Reads `count` ReadyToRun clauses starting at `first`.
pub fn read_r2r_clauses(
    target: &Target,
    descriptor: &DataDescriptor,
    first: u64,
    count: u64,
) -> Result<Vec<ExceptionClause>, ContractError> {
    let max_list = target.limits().max_list_length;
    if count > max_list {
        return Err(ContractError::LimitExceeded {
            what: "ReadyToRun exception clause count",
            addr: first,
            limit: Limit::ListLength,
            cap: max_list,
            unit: "clauses",
        });
    }
    let layout = ClauseLayout::ready_to_run(descriptor)?;
    (0..count)
        .map(|i| {
            let r = ClauseRecord::read(target, &layout, first.wrapping_add(i * layout.stride))?;
            clause(r.flags, r.ranges, r.union, None)
        })
        .collect()
}

fn clause(
    flags: u32,
    [try_start, try_end, handler_start, handler_end]: [u32; 4],
    union: u32,
    type_handle: Option<u64>,
) -> Result<ExceptionClause, ContractError> {
    let kind = ClauseKind::from_flags(flags);
    Ok(ExceptionClause {
        kind,
        flags,
        duplicated: flags & self::flags::DUPLICATED != 0,
        try_start,
        try_end,
        handler_start,
        handler_end,
        filter_offset: (kind == ClauseKind::Filter).then_some(union),
        class_token: (kind == ClauseKind::Typed && type_handle.is_none()).then_some(union),
        type_handle: if kind == ClauseKind::Typed {
            type_handle
        } else {
            None
        },
    })
}
