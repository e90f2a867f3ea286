//! One thread's stack, frame by frame: managed frames stepped with the runtime's unwind
//! info, native frames with their module's CFI (else the frame-pointer chain), and the
//! thread's explicit Frames to cross back into managed code where neither can go on.

use serde::Serialize;

use crate::contracts::debug_info::{il_offset, DebugInfoFormat, IlOffset};
use crate::contracts::execution_manager::{CodeBlock, ExecutionManager};
use crate::contracts::thread::ExplicitFrame;
use crate::contracts::ContractError;
use crate::runtime::Runtime;
use crate::unwind::native::{NativeFrame, NativeUnwinder};
use crate::unwind::{
    aarch64, x86_64, Arm64Context, CfiContext, Registers, StackMemory, UnwindError, X64Context,
};

/// Most frames one walk returns: deeper stacks are cut there (and say so).
pub const DEFAULT_MAX_FRAMES: usize = 1024;

/// How a frame's registers were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FoundBy {
    /// The thread's own registers (the innermost frame).
    Registers,
    /// The runtime's unwind info of the managed frame below.
    UnwindInfo,
    /// The CFI of the native frame below.
    Cfi,
    /// A signal frame's saved context (the frame below was the signal trampoline).
    SignalContext,
    /// The frame-pointer chain (code without CFI).
    FramePointer,
    /// An explicit Frame of the runtime (a P/Invoke's InlinedCallFrame, a transition
    /// frame): where the unwinders could not go on.
    ExplicitFrame,
}

impl FoundBy {
    /// The name JSON uses (`registers`, `unwind_info`, `cfi`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            FoundBy::Registers => "registers",
            FoundBy::UnwindInfo => "unwind_info",
            FoundBy::Cfi => "cfi",
            FoundBy::SignalContext => "signal_context",
            FoundBy::FramePointer => "frame_pointer",
            FoundBy::ExplicitFrame => "explicit_frame",
        }
    }
}

/// What code a frame is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FrameCode {
    /// Managed code the ExecutionManager knows.
    Managed {
        /// The method's MethodDesc.
        method_desc: u64,
        /// Start of the method's (hot) code.
        method_start: u64,
        /// `jit` or `r2r` (or `unknown`).
        jit_type: &'static str,
        /// The frame runs a funclet (a catch, finally, fault or filter block) of the
        /// method.
        funclet: bool,
        /// The index of the frame of the method the funclet belongs to, when the walk
        /// reached it.
        parent_frame: Option<usize>,
    },
    /// Code of an ELF module (or anonymous memory no one describes).
    Native,
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackFrame {
    /// The frame's instruction pointer (a return address, except for the innermost frame
    /// and one interrupted by a signal).
    pub ip: u64,
    /// The frame's stack pointer.
    pub sp: u64,
    /// What code the frame is in.
    pub code: FrameCode,
    /// Offset of `ip` in its method (managed) or nothing (native: see the symbol).
    pub offset: Option<u64>,
    /// The IL offset the frame is at, from the method's debug info (managed frames).
    pub il_offset: Option<IlOffset>,
    /// How the frame's registers were found.
    pub found_by: FoundBy,
    /// The frame's registers as the unwinder knows them (after an unwind step, the
    /// callee-saved ones), kept only by a walker built
    /// [`with_registers(true)`](StackWalker::with_registers).
    #[serde(skip)]
    pub context: Option<Registers>,
    /// The caller's stack pointer: the SP the unwinder found for the next frame when it
    /// stepped from this one (not set when the step failed or went through an explicit
    /// Frame).
    #[serde(skip)]
    pub caller_sp: Option<u64>,
}

impl StackFrame {
    /// The MethodDesc of a managed frame.
    pub fn method_desc(&self) -> Option<u64> {
        match self.code {
            FrameCode::Managed { method_desc, .. } => Some(method_desc),
            FrameCode::Native => None,
        }
    }

    /// Whether the frame runs a funclet.
    pub fn is_funclet(&self) -> bool {
        matches!(self.code, FrameCode::Managed { funclet: true, .. })
    }
}

/// Why a walk ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum StackEnd {
    /// The outermost frame (the unwind data says there is no caller).
    Complete,
    /// A step failed: the frames before it stand.
    Error {
        /// What went wrong.
        message: String,
    },
    /// The walk reached the frame limit.
    FrameLimit {
        /// The limit.
        frames: usize,
    },
}

/// A walked stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stack {
    /// Frames, innermost first.
    pub frames: Vec<StackFrame>,
    /// Why the walk ended.
    pub end: StackEnd,
}

impl Stack {
    /// Its managed frames, innermost first: each frame's index and MethodDesc.
    pub fn managed_frames(&self) -> Vec<(usize, u64)> {
        self.frames
            .iter()
            .enumerate()
            .filter_map(|(i, f)| Some((i, f.method_desc()?)))
            .collect()
    }
}

/// Walks the stacks of one runtime's threads.
pub struct StackWalker {
    rt: Runtime,
    em: std::sync::Arc<dyn ExecutionManager>,
    native: NativeUnwinder,
    debug_format: DebugInfoFormat,
    max_frames: usize,
    il_offsets: bool,
    registers: bool,
}

impl StackWalker {
    /// A walker over `rt`'s code.
    /// It keeps a handle to the runtime (a cheap clone) and uses its cached contracts.
    pub fn new(rt: &Runtime) -> Result<StackWalker, ContractError> {
        check_architecture(rt)?;
        let em = rt.contracts().shared_execution_manager()?;
        let debug_format = rt.contracts().debug_info()?;
        Ok(StackWalker {
            rt: rt.clone(),
            em,
            native: NativeUnwinder::new(rt.target()),
            debug_format,
            max_frames: DEFAULT_MAX_FRAMES,
            il_offsets: true,
            registers: false,
        })
    }

    /// A walker for a runtime whose managed code the native unwinder steps through like
    /// any other (NativeAOT: the compiler writes `.eh_frame` for it): every frame is
    /// stepped by CFI; [`crate::nativeaot`] tells the managed ones apart afterwards.
    pub fn native_only(rt: &Runtime) -> Result<StackWalker, ContractError> {
        check_architecture(rt)?;
        Ok(StackWalker {
            rt: rt.clone(),
            em: std::sync::Arc::new(NoManagedCode),
            native: NativeUnwinder::new(rt.target()),
            debug_format: DebugInfoFormat {
                encoding: crate::contracts::debug_info::BoundsEncoding::Packed,
                patchpoint_info_size: 0,
                patchpoint_local_count_offset: 0,
                chunked_header: false,
            },
            max_frames: DEFAULT_MAX_FRAMES,
            il_offsets: false,
            registers: false,
        })
    }

    /// Sets the most frames a walk returns.
    pub fn with_max_frames(mut self, max_frames: usize) -> StackWalker {
        self.max_frames = max_frames.max(1);
        self
    }

    /// Whether managed frames get their IL offset (decoding a method's debug info per
    /// frame); a profiler that only names methods turns it off.
    pub fn with_il_offsets(mut self, on: bool) -> StackWalker {
        self.il_offsets = on;
        self
    }

    /// Whether each frame keeps its register context ([`StackFrame::context`]), which
    /// stack roots need (register slots, the frame register).
    pub fn with_registers(mut self, on: bool) -> StackWalker {
        self.registers = on;
        self
    }

    /// The ExecutionManager the walker looks code up with.
    pub fn execution_manager(&self) -> &dyn ExecutionManager {
        self.em.as_ref()
    }

    /// Walks a stack from a thread's registers. `mem` reads the stack (a copy taken while
    /// the thread was stopped, over the target); `transitions` are the thread's explicit
    /// Frames, used to go on where unwinding from a frame fails.
    pub fn walk(
        &self,
        start: impl Into<Registers>,
        mem: &dyn StackMemory,
        transitions: &[ExplicitFrame],
    ) -> Stack {
        match start.into() {
            Registers::X64(ctx) => self.walk_from(ctx, mem, transitions),
            Registers::Arm64(ctx) => self.walk_from(ctx, mem, transitions),
        }
    }

    fn walk_from<C: WalkArch>(
        &self,
        start: C,
        mem: &dyn StackMemory,
        transitions: &[ExplicitFrame],
    ) -> Stack {
        let mut frames: Vec<StackFrame> = Vec::new();
        let mut frame = NativeFrame::innermost(start);
        let mut found_by = FoundBy::Registers;
        let end = loop {
            if frames.len() >= self.max_frames {
                break StackEnd::FrameLimit {
                    frames: self.max_frames,
                };
            }
            let lookup = frame.lookup_ip();
            let block = self.em.code_block(lookup).ok().flatten();
            frames.push(self.describe(&frame, block.as_ref(), found_by));
            let stepped = match &block {
                Some(b) => C::step_managed(self, b, &frame, mem).map(|ctx| {
                    Some((
                        NativeFrame {
                            ctx,
                            ip_is_exact: false,
                        },
                        FoundBy::UnwindInfo,
                    ))
                }),
                None => self.step_native(&frame, mem),
            };
            match stepped {
                Ok(Some((next, how))) if next.ctx.pc() != 0 => {
                    if let Some(last) = frames.last_mut() {
                        last.caller_sp = Some(next.ctx.sp());
                    }
                    frame = next;
                    found_by = how;
                }
                Ok(_) => break StackEnd::Complete,
                Err(e) => match resume_at_transition(transitions, &frame.ctx, &frames) {
                    Some(ctx) => {
                        frame = NativeFrame {
                            ctx,
                            ip_is_exact: false,
                        };
                        found_by = FoundBy::ExplicitFrame;
                    }
                    None => {
                        break StackEnd::Error {
                            message: e.to_string(),
                        }
                    }
                },
            }
        };
        link_funclets(&mut frames);
        Stack { frames, end }
    }

    /// One native step: the module's CFI, else the architecture's frame chain (the
    /// frame pointer on x64, the frame record on arm64) for code without CFI.
    fn step_native<C: WalkArch>(
        &self,
        frame: &NativeFrame<C>,
        mem: &dyn StackMemory,
    ) -> Result<Option<(NativeFrame<C>, FoundBy)>, UnwindError> {
        if self.native.is_in_module(frame.ctx.pc()) {
            match C::step_cfi(&self.native, frame, mem) {
                Ok(Some(next)) => {
                    let how = if next.ip_is_exact {
                        FoundBy::SignalContext
                    } else {
                        FoundBy::Cfi
                    };
                    return Ok(Some((next, how)));
                }
                Ok(None) => return Ok(None),
                // No CFI covers the address (hand-written code): try the frame chain.
                Err(UnwindError::NoUnwindInfo { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // A signal trampoline outside every module (the vDSO, qemu-user's page).
        if let Some(next) = C::step_signal(&self.native, frame, mem)? {
            return Ok(Some((next, FoundBy::SignalContext)));
        }
        C::step_frame_chain(&frame.ctx, mem).map(|next| {
            next.map(|ctx| {
                (
                    NativeFrame {
                        ctx,
                        ip_is_exact: false,
                    },
                    FoundBy::FramePointer,
                )
            })
        })
    }

    fn describe<C: WalkArch>(
        &self,
        frame: &NativeFrame<C>,
        block: Option<&CodeBlock>,
        found_by: FoundBy,
    ) -> StackFrame {
        let ip = frame.ctx.pc();
        let sp = frame.ctx.sp();
        let context = self.registers.then(|| frame.ctx.into());
        let Some(b) = block else {
            return StackFrame {
                ip,
                sp,
                code: FrameCode::Native,
                offset: None,
                il_offset: None,
                found_by,
                context,
                caller_sp: None,
            };
        };
        let funclet = self.em.is_funclet(b).unwrap_or(false);
        // `b` was found at `ip - 1` for a return address: the IL offset is the call's.
        let il = self
            .il_offsets
            .then(|| {
                il_offset(
                    self.rt.target(),
                    self.em.as_ref(),
                    b,
                    &self.debug_format,
                    false,
                )
                .ok()
                .flatten()
            })
            .flatten()
            .map(|m| m.il_offset);
        StackFrame {
            ip,
            sp,
            code: FrameCode::Managed {
                method_desc: b.method_desc,
                method_start: b.start,
                jit_type: b.jit_type.as_str(),
                funclet,
                parent_frame: None,
            },
            offset: Some(b.relative_offset + (ip - b.ip)),
            il_offset: il,
            found_by,
            context,
            caller_sp: None,
        }
    }
}

/// Where to go on after a failed step from `ctx`: the innermost explicit Frame above it
/// that records a managed return address and the stack pointer there (an active
/// InlinedCallFrame, a transition frame, a saved context), not already walked past.
fn resume_at_transition<C: WalkArch>(
    transitions: &[ExplicitFrame],
    ctx: &C,
    frames: &[StackFrame],
) -> Option<C> {
    let sp = ctx.sp();
    transitions
        .iter()
        .filter_map(|f| {
            let ip = f.context_ip.or(f.return_address).filter(|&a| a != 0)?;
            let caller_sp = f.caller_sp.filter(|&s| s > sp)?;
            Some((caller_sp, C::at_transition(ip, caller_sp, f.saved_fp)))
        })
        .filter(|(caller_sp, c)| {
            !frames
                .iter()
                .any(|fr| fr.ip == c.pc() && fr.sp == *caller_sp)
        })
        .min_by_key(|(caller_sp, _)| *caller_sp)
        .map(|(_, c)| c)
}

/// What the walk needs of an architecture: its register context, how to step a managed
/// frame and a native one, and the context an explicit Frame gives.
trait WalkArch: CfiContext + Into<Registers> {
    /// The context at a transition: pc, sp and the saved frame pointer.
    fn at_transition(ip: u64, sp: u64, fp: Option<u64>) -> Self;

    /// One step through managed code by the runtime's unwind data.
    fn step_managed(
        w: &StackWalker,
        block: &CodeBlock,
        frame: &NativeFrame<Self>,
        mem: &dyn StackMemory,
    ) -> Result<Self, UnwindError>;

    /// One step through native code by its module's CFI.
    fn step_cfi(
        native: &NativeUnwinder,
        frame: &NativeFrame<Self>,
        mem: &dyn StackMemory,
    ) -> Result<Option<NativeFrame<Self>>, UnwindError>;

    /// One step by the frame chain, for native code without CFI.
    fn step_frame_chain(ctx: &Self, mem: &dyn StackMemory) -> Result<Option<Self>, UnwindError>;

    /// One step out of a signal handler whose trampoline no module covers, if the frame
    /// is at one.
    fn step_signal(
        native: &NativeUnwinder,
        frame: &NativeFrame<Self>,
        mem: &dyn StackMemory,
    ) -> Result<Option<NativeFrame<Self>>, UnwindError>;
}

impl WalkArch for X64Context {
    fn at_transition(ip: u64, sp: u64, fp: Option<u64>) -> Self {
        X64Context::new(ip, sp, fp)
    }

    fn step_managed(
        w: &StackWalker,
        block: &CodeBlock,
        frame: &NativeFrame<Self>,
        mem: &dyn StackMemory,
    ) -> Result<Self, UnwindError> {
        x86_64::managed::step_managed(w.rt.target(), w.em.as_ref(), block, &frame.ctx, mem)
    }

    fn step_cfi(
        native: &NativeUnwinder,
        frame: &NativeFrame<Self>,
        mem: &dyn StackMemory,
    ) -> Result<Option<NativeFrame<Self>>, UnwindError> {
        native.step_frame(frame, mem)
    }

    fn step_frame_chain(ctx: &Self, mem: &dyn StackMemory) -> Result<Option<Self>, UnwindError> {
        NativeUnwinder::step_frame_pointer(ctx, mem)
    }

    // glibc's x64 trampoline (`__restore_rt`) is in libc, found by its CFI step.
    fn step_signal(
        _native: &NativeUnwinder,
        _frame: &NativeFrame<Self>,
        _mem: &dyn StackMemory,
    ) -> Result<Option<NativeFrame<Self>>, UnwindError> {
        Ok(None)
    }
}

impl WalkArch for Arm64Context {
    fn at_transition(ip: u64, sp: u64, fp: Option<u64>) -> Self {
        Arm64Context::new(ip, sp, fp)
    }

    fn step_managed(
        w: &StackWalker,
        block: &CodeBlock,
        frame: &NativeFrame<Self>,
        mem: &dyn StackMemory,
    ) -> Result<Self, UnwindError> {
        aarch64::managed::step_managed(
            w.rt.target(),
            w.em.as_ref(),
            block,
            &frame.ctx,
            mem,
            frame.ip_is_exact,
        )
    }

    fn step_cfi(
        native: &NativeUnwinder,
        frame: &NativeFrame<Self>,
        mem: &dyn StackMemory,
    ) -> Result<Option<NativeFrame<Self>>, UnwindError> {
        native.step_frame_arm64(frame, mem)
    }

    fn step_frame_chain(ctx: &Self, mem: &dyn StackMemory) -> Result<Option<Self>, UnwindError> {
        aarch64::step_frame_record(ctx, mem)
    }

    fn step_signal(
        native: &NativeUnwinder,
        frame: &NativeFrame<Self>,
        mem: &dyn StackMemory,
    ) -> Result<Option<NativeFrame<Self>>, UnwindError> {
        native.step_signal_arm64(frame, mem)
    }
}

/// Ties each funclet frame to the frame of its method further up the stack: the next
/// frame of the same MethodDesc that is not a funclet.
fn link_funclets(frames: &mut [StackFrame]) {
    for i in 0..frames.len() {
        let Some(md) = frames[i].method_desc() else {
            continue;
        };
        if !frames[i].is_funclet() {
            continue;
        }
        let parent = (i + 1..frames.len())
            .find(|&j| frames[j].method_desc() == Some(md) && !frames[j].is_funclet());
        if let FrameCode::Managed { parent_frame, .. } = &mut frames[i].code {
            *parent_frame = parent;
        }
    }
}

/// The logical frames of a stack: each funclet frame followed directly by its method's
/// frame, with what ran between them (the exception dispatch and, during a filter, the
/// frames it is filtering for) left out; native frames kept.
pub fn logical_frames(stack: &Stack) -> Vec<&StackFrame> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < stack.frames.len() {
        let f = &stack.frames[i];
        out.push(f);
        match f.code {
            FrameCode::Managed {
                parent_frame: Some(p),
                ..
            } if p > i => {
                out.push(&stack.frames[p]);
                i = p + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// Each architecture has its own unwind data and registers: on another one a walker would
/// guess, so it says so instead.
fn check_architecture(rt: &Runtime) -> Result<(), ContractError> {
    let architecture = rt.module().architecture;
    if matches!(architecture, "x64" | "arm64") {
        return Ok(());
    }
    Err(ContractError::UnsupportedArchitecture {
        contract: "StackWalk (stack unwinding)",
        architecture: architecture.to_string(),
        supported: "x64, arm64",
    })
}

/// The ExecutionManager of a runtime without JIT'ed or ReadyToRun code (NativeAOT): it
/// knows no code, so every frame is a native one.
struct NoManagedCode;

impl NoManagedCode {
    fn none<T>() -> Result<T, ContractError> {
        Err(ContractError::Missing {
            contract: "ExecutionManager",
        })
    }
}

impl ExecutionManager for NoManagedCode {
    fn version(&self) -> u64 {
        0
    }
    fn code_block(&self, _ip: u64) -> Result<Option<CodeBlock>, ContractError> {
        Ok(None)
    }
    fn method_region_info(
        &self,
        _block: &CodeBlock,
    ) -> Result<crate::contracts::execution_manager::RegionInfo, ContractError> {
        Self::none()
    }
    fn unwind_info(&self, _block: &CodeBlock) -> Result<Option<u64>, ContractError> {
        Self::none()
    }
    fn gc_info(
        &self,
        _block: &CodeBlock,
    ) -> Result<crate::contracts::execution_manager::GcInfoRef, ContractError> {
        Self::none()
    }
    fn debug_info(
        &self,
        _block: &CodeBlock,
    ) -> Result<crate::contracts::execution_manager::DebugInfoRef, ContractError> {
        Self::none()
    }
    fn funclet_start(&self, _block: &CodeBlock) -> Result<u64, ContractError> {
        Self::none()
    }
    fn exception_clauses(
        &self,
        _block: &CodeBlock,
    ) -> Result<
        Vec<crate::contracts::execution_manager::exception_clauses::ExceptionClause>,
        ContractError,
    > {
        Self::none()
    }
    fn ee_jit_manager_info(
        &self,
    ) -> Result<crate::contracts::execution_manager::EeJitManagerInfo, ContractError> {
        Self::none()
    }
    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn managed(md: u64, funclet: bool) -> StackFrame {
        StackFrame {
            ip: md,
            sp: md,
            code: FrameCode::Managed {
                method_desc: md,
                method_start: md,
                jit_type: "jit",
                funclet,
                parent_frame: None,
            },
            offset: Some(0),
            il_offset: None,
            found_by: FoundBy::UnwindInfo,
            context: None,
            caller_sp: None,
        }
    }

    fn native() -> StackFrame {
        StackFrame {
            ip: 1,
            sp: 1,
            code: FrameCode::Native,
            offset: None,
            il_offset: None,
            found_by: FoundBy::Cfi,
            context: None,
            caller_sp: None,
        }
    }

    #[test]
    fn a_filter_funclet_links_past_the_frames_it_filters_for() {
        // wait <- filter funclet of owner <- dispatch (native) <- thrower <- owner <- middle
        let mut frames = vec![
            managed(1, false),
            managed(2, true),
            native(),
            managed(3, false),
            managed(2, false),
            managed(4, false),
        ];
        link_funclets(&mut frames);
        assert!(matches!(
            frames[1].code,
            FrameCode::Managed {
                parent_frame: Some(4),
                ..
            }
        ));
        let stack = Stack {
            frames,
            end: StackEnd::Complete,
        };
        let logical: Vec<Option<u64>> = logical_frames(&stack)
            .iter()
            .map(|f| f.method_desc())
            .collect();
        assert_eq!(logical, vec![Some(1), Some(2), Some(2), Some(4)]);
    }

    #[test]
    fn a_funclet_without_its_method_stays_unlinked() {
        let mut frames = vec![managed(2, true), managed(3, false)];
        link_funclets(&mut frames);
        assert!(matches!(
            frames[0].code,
            FrameCode::Managed {
                parent_frame: None,
                ..
            }
        ));
    }

    #[test]
    fn transitions_resume_above_the_failed_frame_once() {
        let icf = |ret: u64, sp: u64| ExplicitFrame {
            address: sp - 0x40,
            kind: Some("InlinedCallFrame"),
            tag: 0,
            return_address: Some(ret),
            caller_sp: Some(sp),
            saved_fp: Some(sp + 0x20),
            datum: None,
            context_ip: None,
            next: 0,
        };
        let frames_list = [icf(0xAAA, 0x2000), icf(0xBBB, 0x3000), icf(0xCCC, 0x1000)];
        let ctx = X64Context::new(0x10, 0x1800, None);
        let resumed = resume_at_transition(&frames_list, &ctx, &[]).expect("a frame above");
        assert_eq!((resumed.rip, resumed.rsp()), (0xAAA, 0x2000));
        assert_eq!(resumed.rbp(), Some(0x2020));
        // Already walked: the next one up.
        let walked = StackFrame {
            ip: 0xAAA,
            sp: 0x2000,
            ..native()
        };
        let resumed = resume_at_transition(&frames_list, &ctx, &[walked]).expect("next");
        assert_eq!(resumed.rip, 0xBBB);
        let high = X64Context::new(0x10, 0x4000, None);
        assert!(resume_at_transition(&frames_list, &high, &[]).is_none());
    }
}
