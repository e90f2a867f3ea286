//! Stack roots: for each managed frame of a walked stack, the GC slots live at the frame's
//! instruction pointer (its method's GC info) and the references they hold, with the
//! runtime's reporting rules for the active frame, funclets and their parents. See
//! `contracts/StackRoots.md`.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::walk::{FoundBy, FrameCode, Stack, StackFrame};
use crate::contracts::execution_manager::ExecutionManager;
use crate::contracts::gc_info::{
    self, FrameRegisters, GcInfo, GcInfoArch, GcSlotOptions, SlotAddress,
};
use crate::contracts::thread::ExplicitFrame;
use crate::contracts::ContractError;
use crate::memory::{StackMemory, Target};
use crate::runtime::Runtime;

/// Most live slots reported for one frame (a corrupt GC info could claim thousands).
pub const MAX_SLOTS_PER_FRAME: usize = 4096;

/// Most distinct methods whose decoded GC info is kept.
const MAX_CACHED: usize = 4096;

/// One live GC slot of a frame and the reference it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackRoot {
    /// The thread's kernel id.
    pub thread: i32,
    /// The frame's index in its stack (innermost 0).
    pub frame: usize,
    /// The frame's instruction pointer.
    pub ip: u64,
    /// The frame's stack pointer.
    pub sp: u64,
    /// The frame's MethodDesc.
    pub method_desc: u64,
    /// The slot as the GC info names it: a register (`rbx`) or base and offset
    /// (`rbp-0x10`, `sp+0x20`, `caller.sp+0x8`).
    pub slot: String,
    /// Where the slot is in memory (`None` for a register).
    pub address: Option<u64>,
    /// The reference it holds (may be null).
    pub object: u64,
    /// The reference may point inside an object (a byref).
    pub interior: bool,
    /// The object is pinned while the slot is live.
    pub pinned: bool,
}

/// Why a managed frame reports nothing, or only part of its slots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameNote {
    /// The frame lies between a catch, finally or fault funclet and its method's frame,
    /// in the run of managed frames from the exception's throw site to that method: the
    /// exception already unwound it (its memory is still there), so it reports nothing.
    UnwoundByException,
    /// The frame is the parent of a non-filter funclet and its GC info wants only the
    /// leaf reported: the funclet reported the method's slots.
    FuncletParentReportsNothing,
    /// The frame is the parent of a non-filter funclet: its untracked slots are left to
    /// the funclet.
    FuncletParentNoUntracked,
    /// A filter funclet: its untracked slots are the parent frame's, reported there.
    FilterNoUntracked,
    /// While a filter runs under the managed exception dispatcher, the frame the exception
    /// interrupted (reached through its `SoftwareExceptionFrame`), below the filter's
    /// method frame. The runtime reports nothing for it: on .NET 11.0.0 its GC moved the
    /// exception and left that frame's slot holding the old address, and SOS lists none
    /// of its slots. .NET 9 throws through a HelperMethodFrame and reports the frame.
    PassedByFilteredException,
}

/// The roots of one managed frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrameRoots {
    /// The frame's index in its stack.
    pub frame: usize,
    /// The frame was reported as the active one (leaf or interrupted): scratch registers
    /// and the outgoing argument area count.
    pub active: bool,
    /// A rule that changed what the frame reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<FrameNote>,
    /// Its live slots.
    pub roots: Vec<StackRoot>,
    /// Slots that could not be resolved (a register the unwinder does not know, an
    /// unreadable stack word), or why the frame could not be decoded at all.
    pub errors: Vec<String>,
}

/// Errors of one frame's decoding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StackRootError {
    /// The frame's code or GC info could not be read.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// The frame lacks what its slots need.
    #[error("{0}")]
    Frame(String),
}

/// Finds the stack roots of walked stacks (keeps the decoded GC info of each method).
pub struct StackRootScanner {
    target: Target,
    em: Arc<dyn ExecutionManager>,
    arch: GcInfoArch,
    cache: HashMap<u64, Arc<GcInfo>>,
}

impl StackRootScanner {
    /// A scanner over `rt`'s code.
    pub fn new(rt: &Runtime) -> Result<StackRootScanner, ContractError> {
        let em = rt.contracts().shared_execution_manager()?;
        let arch = GcInfoArch::from_name(rt.descriptor().global_string("Architecture")?)?;
        Ok(StackRootScanner {
            target: rt.target().clone(),
            em,
            arch,
            cache: HashMap::new(),
        })
    }

    /// The roots of every managed frame of `stack` (walked with registers) of thread
    /// `thread`; `mem` reads the stack as it was when the registers were taken.
    /// `explicit` are the thread's explicit Frames (an exception Frame marks the managed
    /// frame above it as interrupted by the exception).
    pub fn scan(
        &mut self,
        thread: i32,
        stack: &Stack,
        mem: &dyn StackMemory,
        explicit: &[ExplicitFrame],
    ) -> Vec<FrameRoots> {
        let frames = &stack.frames;
        let interrupted = interrupted_frames(frames, explicit);
        let filter_funclet: Vec<bool> = frames
            .iter()
            .enumerate()
            .map(|(i, f)| f.is_funclet() && self.is_filter_funclet(f, i == 0))
            .collect();
        let FuncletRoles {
            parent_of,
            unwound,
            passed_by_filtered,
        } = funclet_roles(frames, &filter_funclet, &interrupted);
        let mut out = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            let FrameCode::Managed { .. } = f.code else {
                continue;
            };
            let active = i == 0 || matches!(f.found_by, FoundBy::SignalContext);
            let mut fr = FrameRoots {
                frame: i,
                active,
                note: None,
                roots: Vec::new(),
                errors: Vec::new(),
            };
            if unwound[i] {
                fr.note = Some(FrameNote::UnwoundByException);
                out.push(fr);
                continue;
            }
            if passed_by_filtered[i] {
                fr.note = Some(FrameNote::PassedByFilteredException);
                out.push(fr);
                continue;
            }
            let parent_of_funclet = parent_of[i].is_some_and(|c| !filter_funclet[c]);
            let options = GcSlotOptions {
                active_frame: active,
                execution_aborted: false,
                parent_of_funclet,
                suppress_untracked: filter_funclet[i],
                fp_based_only: false,
            };
            if let Err(e) = self.frame_roots(thread, i, f, &options, mem, &mut fr) {
                fr.errors.push(e.to_string());
            }
            out.push(fr);
        }
        out
    }

    /// Whether funclet frame `f` runs a filter (its funclet starts at a clause's filter).
    fn is_filter_funclet(&self, f: &StackFrame, exact: bool) -> bool {
        let Ok(Some(block)) = self.em.code_block(lookup_ip(f, exact)) else {
            return false;
        };
        let (Ok(start), Ok(clauses)) = (
            self.em.funclet_start(&block),
            self.em.exception_clauses(&block),
        ) else {
            return false;
        };
        let Some(offset) = start.checked_sub(block.start) else {
            return false;
        };
        clauses
            .iter()
            .any(|c| c.filter_offset.is_some_and(|o| u64::from(o) == offset))
    }

    fn gc_info(&mut self, f: &StackFrame, exact: bool) -> Result<Arc<GcInfo>, StackRootError> {
        let block = self
            .em
            .code_block(lookup_ip(f, exact))?
            .ok_or_else(|| StackRootError::Frame(format!("{:#x} is not managed code", f.ip)))?;
        let r = self.em.gc_info(&block)?;
        if let Some(info) = self.cache.get(&r.address) {
            return Ok(info.clone());
        }
        let info = Arc::new(gc_info::decode(
            &self.target,
            r.address,
            r.version,
            self.arch,
        )?);
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        self.cache.insert(r.address, info.clone());
        Ok(info)
    }

    fn frame_roots(
        &mut self,
        thread: i32,
        index: usize,
        f: &StackFrame,
        options: &GcSlotOptions,
        mem: &dyn StackMemory,
        fr: &mut FrameRoots,
    ) -> Result<(), StackRootError> {
        let info = self.gc_info(f, options.active_frame)?;
        if options.parent_of_funclet {
            fr.note = Some(if gc_info::wants_report_only_leaf(&info) {
                FrameNote::FuncletParentReportsNothing
            } else {
                FrameNote::FuncletParentNoUntracked
            });
        } else if options.suppress_untracked {
            fr.note = Some(FrameNote::FilterNoUntracked);
        }
        let offset = f
            .offset
            .and_then(|o| u32::try_from(o).ok())
            .ok_or_else(|| StackRootError::Frame("no code offset".into()))?;
        let ctx = f
            .context
            .ok_or_else(|| StackRootError::Frame("the frame's registers were not kept".into()))?;
        let frame_register = info
            .header
            .stack_base_register
            .and_then(|r| ctx.register(r as usize));
        let regs = FrameRegisters {
            sp: f.sp,
            // Without a caller (the outermost frame), caller-SP slots cannot be placed.
            caller_sp: f.caller_sp.unwrap_or(0),
            frame_register,
        };
        let method_desc = f.method_desc().unwrap_or(0);
        let offset = gc_offset(&info, offset, options.active_frame);
        let slots = info.live_slot_addresses(&self.target, offset, options, &regs)?;
        for (live, at) in slots.into_iter().take(MAX_SLOTS_PER_FRAME) {
            let name = slot_name(&info, &live.slot.location);
            let (address, value) = match at {
                SlotAddress::Register(r) => match ctx.register(r as usize) {
                    Some(v) => (None, v),
                    None => {
                        fr.errors
                            .push(format!("{name}: the register's value is not known"));
                        continue;
                    }
                },
                SlotAddress::Stack(a) => {
                    if matches!(
                        live.slot.location,
                        gc_info::SlotLocation::Stack {
                            base: gc_info::StackBase::CallerSp,
                            ..
                        }
                    ) && f.caller_sp.is_none()
                    {
                        fr.errors
                            .push(format!("{name}: the caller's stack pointer is not known"));
                        continue;
                    }
                    match mem.read_u64(a) {
                        Ok(v) => (Some(a), v),
                        Err(e) => {
                            fr.errors.push(format!("{name} at {a:#x}: {e}"));
                            continue;
                        }
                    }
                }
            };
            fr.roots.push(StackRoot {
                thread,
                frame: index,
                ip: f.ip,
                sp: f.sp,
                method_desc,
                slot: name,
                address,
                object: value,
                interior: live.slot.is_interior(),
                pinned: live.slot.is_pinned(),
            });
        }
        Ok(())
    }
}

/// How funclets shape what each frame of a stack reports.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FuncletRoles {
    /// Per frame: the funclet frame it is the parent of.
    parent_of: Vec<Option<usize>>,
    /// Per frame: unwound by the exception a catch/finally/fault funclet handles.
    unwound: Vec<bool>,
    /// Per frame: passed by the exception a running filter looks at, below a managed
    /// dispatcher (see [`FrameNote::PassedByFilteredException`]).
    passed_by_filtered: Vec<bool>,
}

/// Per frame: a managed frame reached through an exception Frame (a managed throw's
/// `SoftwareExceptionFrame`, a fault's `FaultingExceptionFrame`): the first managed frame
/// whose SP lies above such a Frame, with no other managed frame between them.
fn interrupted_frames(frames: &[StackFrame], explicit: &[ExplicitFrame]) -> Vec<bool> {
    let mut out = vec![false; frames.len()];
    for x in explicit.iter().filter(|x| {
        matches!(
            x.kind,
            Some("SoftwareExceptionFrame" | "FaultingExceptionFrame")
        )
    }) {
        let above = frames
            .iter()
            .position(|f| matches!(f.code, FrameCode::Managed { .. }) && f.sp > x.address);
        if let Some(i) = above {
            out[i] = true;
        }
    }
    out
}

/// The funclet roles of `frames` (linked by `parent_frame`); `filter[i]` says that frame
/// `i` runs a filter, `interrupted[i]` that an exception Frame leads to it. A filter runs in the exception's first pass: nothing is unwound
/// and its parent reports as usual. Any other funclet runs in the second pass: the
/// exception unwound the run of managed frames right below the parent (from the throw
/// site); managed frames nearer the funclet, before native code, are the dispatcher that
/// called it (.NET 9's `EH.DispatchEx`) and stay live.
fn funclet_roles(frames: &[StackFrame], filter: &[bool], interrupted: &[bool]) -> FuncletRoles {
    let mut parent_of: Vec<Option<usize>> = vec![None; frames.len()];
    let mut unwound = vec![false; frames.len()];
    let mut passed_by_filtered = vec![false; frames.len()];
    for (i, f) in frames.iter().enumerate() {
        let FrameCode::Managed {
            funclet: true,
            parent_frame: Some(p),
            ..
        } = f.code
        else {
            continue;
        };
        if p <= i || p >= frames.len() {
            continue;
        }
        parent_of[p] = Some(i);
        let last_native = (i + 1..p)
            .rev()
            .find(|&k| matches!(frames[k].code, FrameCode::Native));
        if filter.get(i).copied().unwrap_or(false) {
            // Under a managed dispatcher (one of its frames lies between the filter and
            // the last native frame), a passed frame the exception interrupted reports
            // nothing. .NET 9 throws through a HelperMethodFrame: no frame is interrupted.
            let Some(native) = last_native else { continue };
            let dispatcher =
                (i + 1..native).any(|k| matches!(frames[k].code, FrameCode::Managed { .. }));
            if dispatcher {
                for (k, passed) in passed_by_filtered
                    .iter_mut()
                    .enumerate()
                    .take(p)
                    .skip(native + 1)
                {
                    *passed = interrupted.get(k).copied().unwrap_or(false);
                }
            }
            continue;
        }
        let from = last_native.map_or(i + 1, |k| k + 1);
        for u in unwound.iter_mut().take(p).skip(from) {
            *u = true;
        }
    }
    FuncletRoles {
        parent_of,
        unwound,
        passed_by_filtered,
    }
}

/// The code offset whose GC state applies to a frame at `offset`. A frame that is not
/// the active one stands at a return address. GC info versions 2 and 3 describe the
/// state there one byte earlier, inside the call: safe points are stored that way (the
/// lookup already adjusts), and so is a fully interruptible state, which the runtime
/// (and ClrMD through the DAC) reads at `offset - 1`. Version 4 describes the state at the
/// return address itself.
fn gc_offset(info: &GcInfo, offset: u32, active: bool) -> u32 {
    if active || info.header.version >= 4 || info.safe_point_index(offset).is_some() {
        offset
    } else {
        offset.saturating_sub(1)
    }
}

/// The address to look a frame's code up at: a return address's call instruction.
fn lookup_ip(f: &StackFrame, exact: bool) -> u64 {
    if exact || matches!(f.found_by, FoundBy::Registers | FoundBy::SignalContext) {
        f.ip
    } else {
        f.ip.wrapping_sub(1)
    }
}

/// A slot as `rbx`, `rbp-0x30`, `sp+0x8` or `caller.sp-0x10`.
pub fn slot_name(info: &GcInfo, location: &gc_info::SlotLocation) -> String {
    use gc_info::{SlotLocation, StackBase};
    match *location {
        SlotLocation::Register(r) => info.arch().register_name(r),
        SlotLocation::Stack { base, offset } => {
            let base = match base {
                StackBase::CallerSp => "caller.sp".to_string(),
                StackBase::Sp => "sp".to_string(),
                StackBase::FrameRegister => info
                    .header
                    .stack_base_register
                    .map_or_else(|| "fp".to_string(), |r| info.arch().register_name(r)),
            };
            let sign = if offset < 0 { '-' } else { '+' };
            format!("{base}{sign}{:#x}", offset.unsigned_abs())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(code: FrameCode) -> StackFrame {
        StackFrame {
            ip: 0x1000,
            sp: 0x2000,
            code,
            offset: Some(0),
            il_offset: None,
            found_by: FoundBy::UnwindInfo,
            context: None,
            caller_sp: None,
        }
    }

    fn managed(md: u64, funclet: bool, parent_frame: Option<usize>) -> StackFrame {
        frame(FrameCode::Managed {
            method_desc: md,
            method_start: md,
            jit_type: "jit",
            funclet,
            parent_frame,
        })
    }

    fn native() -> StackFrame {
        frame(FrameCode::Native)
    }

    // sleep <- catch funclet of owner <- native <- dispatcher <- native <- thrower <- helper
    // <- owner <- caller
    fn catch_stack() -> Vec<StackFrame> {
        vec![
            managed(1, false, None),
            managed(2, true, Some(7)),
            native(),
            managed(3, false, None),
            native(),
            managed(4, false, None),
            managed(5, false, None),
            managed(2, false, None),
            managed(6, false, None),
        ]
    }

    #[test]
    fn a_catch_unwinds_the_managed_run_below_its_parent_not_the_dispatcher() {
        let frames = catch_stack();
        let roles = funclet_roles(&frames, &[false; 9], &[false; 9]);
        assert_eq!(roles.parent_of[7], Some(1));
        let unwound: Vec<usize> = (0..9).filter(|&i| roles.unwound[i]).collect();
        assert_eq!(unwound, vec![5, 6]);
    }

    #[test]
    fn a_filter_unwinds_nothing_and_silences_the_frame_its_exception_interrupted() {
        let frames = catch_stack();
        let mut filter = [false; 9];
        filter[1] = true;
        let mut interrupted = [false; 9];
        interrupted[5] = true;
        let roles = funclet_roles(&frames, &filter, &interrupted);
        assert_eq!(roles.parent_of[7], Some(1));
        assert!(roles.unwound.iter().all(|&u| !u));
        let passed: Vec<usize> = (0..9).filter(|&i| roles.passed_by_filtered[i]).collect();
        assert_eq!(passed, vec![5]);
        // Thrown through a helper frame (.NET 9): nothing interrupted, nothing silenced.
        let roles = funclet_roles(&frames, &filter, &[false; 9]);
        assert!(roles.passed_by_filtered.iter().all(|&u| !u));
    }

    #[test]
    fn a_filter_called_by_native_dispatch_silences_nothing() {
        // .NET 8: only native frames between the filter and the thrower.
        let frames = vec![
            managed(1, false, None),
            managed(2, true, Some(5)),
            native(),
            native(),
            managed(4, false, None),
            managed(2, false, None),
        ];
        let mut filter = [false; 6];
        filter[1] = true;
        let mut interrupted = [false; 6];
        interrupted[4] = true;
        let roles = funclet_roles(&frames, &filter, &interrupted);
        assert!(roles.passed_by_filtered.iter().all(|&u| !u));
    }

    #[test]
    fn a_funclet_called_by_its_parent_unwinds_nothing_between() {
        // A finally run by its method (no exception): the parent is the next frame.
        let frames = vec![
            managed(1, false, None),
            managed(2, true, Some(2)),
            managed(2, false, None),
        ];
        let roles = funclet_roles(&frames, &[false; 3], &[false; 3]);
        assert_eq!(roles.parent_of[2], Some(1));
        assert!(roles.unwound.iter().all(|&u| !u));
    }

    #[test]
    fn without_native_frames_everything_between_is_unwound() {
        let frames = vec![
            managed(2, true, Some(3)),
            managed(4, false, None),
            managed(5, false, None),
            managed(2, false, None),
        ];
        let roles = funclet_roles(&frames, &[false; 4], &[false; 4]);
        assert_eq!(roles.unwound, vec![false, true, true, false]);
    }

    #[test]
    fn a_bad_parent_link_is_ignored() {
        let frames = vec![managed(2, true, Some(9)), managed(2, true, Some(0))];
        let roles = funclet_roles(&frames, &[false; 2], &[false; 2]);
        assert!(roles.parent_of.iter().all(Option::is_none));
        assert!(roles.unwound.iter().all(|&u| !u));
    }
}
