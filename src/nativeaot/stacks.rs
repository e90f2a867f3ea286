//! NativeAOT's part of [`crate::stacks`]: the runtime's threads as [`ManagedThread`]s, and
//! the frames in the executable's managed code told apart from native ones and tied to
//! their method (named later from [`super::MethodNames`]).

use std::collections::HashMap;

use crate::stacks::walk::{FoundBy, FrameCode};
use crate::stacks::{ManagedThread, ThreadStack};

use super::method_names::{CodeAt, NO_STACK_TRACE_DATA};
use super::NativeAot;

/// What a frame of NativeAOT managed code says its code is (`jit_type`).
pub const AOT_CODE: &str = "aot";

/// The runtime's threads by OS id; what could not be read becomes a warning.
pub fn managed_threads(aot: &NativeAot, warnings: &mut Vec<String>) -> HashMap<i32, ManagedThread> {
    let list = match aot.threads() {
        Ok(l) => l,
        Err(e) => {
            warnings.push(format!("the runtime's threads could not be read: {e}"));
            return HashMap::new();
        }
    };
    if let Some(e) = &list.error {
        warnings.push(format!("the runtime's thread list was cut short: {e}"));
    }
    managed_from(&list)
}

/// The threads of a list already read, by OS id.
pub fn managed_from(list: &super::AotThreadList) -> HashMap<i32, ManagedThread> {
    let mut out = HashMap::new();
    for t in &list.threads {
        let Ok(os) = i32::try_from(t.os_id) else {
            continue;
        };
        out.insert(
            os,
            ManagedThread {
                address: t.address,
                // 0 where the managed Thread was not found (the finalizer thread has none).
                managed_id: t.managed_id.unwrap_or(0),
                namespace_os_id: t.namespace_os_id,
                name: t.name.clone(),
                state_bits: t.state_bits.unwrap_or(0),
                state: t.state.clone(),
                preemptive_gc_disabled: false,
                finalizer: t.is_finalizer(),
                explicit_frames: Vec::new(),
                exception: t.exceptions.first().cloned(),
                exception_error: t.exception_error.clone(),
            },
        );
    }
    out
}

/// Marks every frame whose code is the executable's managed code as managed, with its
/// method's start (0 where no method could be told) and its offset in it.
pub fn mark_managed_frames(
    aot: &NativeAot,
    threads: &mut [ThreadStack],
    warnings: &mut Vec<String>,
) {
    let names = match aot.method_names() {
        Ok(n) => n,
        Err(e) => {
            warnings.push(format!(
                "managed frames cannot be told from native ones: {e}"
            ));
            return;
        }
    };
    if !names.has_stack_trace_data() {
        warnings.push(NO_STACK_TRACE_DATA.to_string());
    }
    for t in threads.iter_mut() {
        if let Some(stack) = t.stack.as_mut() {
            mark_stack(&names, stack);
        }
    }
}

/// [`mark_managed_frames`] for one walked stack, with the executable's names at hand.
pub fn mark_stack(names: &super::MethodNames, stack: &mut crate::stacks::walk::Stack) {
    for frame in &mut stack.frames {
        // A return address names the call: look up the byte before it.
        let exact = matches!(frame.found_by, FoundBy::Registers | FoundBy::SignalContext);
        let at = if exact {
            frame.ip
        } else {
            frame.ip.saturating_sub(1)
        };
        let (start, named) = match names.lookup(at) {
            None => continue,
            Some(CodeAt::Method(m, _)) => (m.start, !m.name.starts_with('.')),
            Some(CodeAt::Unnamed(start)) => (start, false),
        };
        frame.code = FrameCode::Managed {
            method_desc: 0,
            method_start: start,
            jit_type: AOT_CODE,
            funclet: names.is_funclet(at),
            parent_frame: None,
        };
        // Unnamed code is shown at its address in the module, as the runtime does.
        frame.offset = named.then(|| frame.ip - start);
    }
}
