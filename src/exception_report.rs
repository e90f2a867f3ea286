//! A managed exception described for people: its type, message and HResult, the frames of
//! its captured stack trace named and placed in the source, and the same for each inner
//! exception. The crash summary (`cdac analyze`), the C ABI's `cdac_exception_text` and the
//! debugger extensions' `cdac pe` all print it, so it lives here once.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::contracts::debug_info::IlOffset;
use crate::contracts::thread::ExceptionInfo;
use crate::formats::pdb::SourceLocation;
use crate::names::MethodNamer;
use crate::runtime::Runtime;
use crate::source_lines::{exception_trace_frames, SourceLines};

/// One frame of an exception's captured stack trace, named and placed in the source.
#[derive(Debug, Clone)]
pub struct TraceLine {
    /// The frame's code address as the runtime recorded it.
    pub ip: u64,
    /// The frame's method.
    pub method_desc: u64,
    /// The method's name, as the runtime's perf map writes it.
    pub name: String,
    /// The IL offset the address maps to, when the debug info has one.
    pub il_offset: Option<u32>,
    /// Where that IL offset is in the source, when a PDB says.
    pub source: Option<SourceLocation>,
    /// The trace continues with frames captured elsewhere after this one (a rethrow
    /// through `ExceptionDispatchInfo`, an `await`): .NET prints `--- End of stack trace
    /// from previous location ---` after it.
    pub previous_location_ends: bool,
}

/// The line .NET prints between the frames of a trace captured before a rethrow and the
/// frames after it.
pub const PREVIOUS_LOCATION_SEPARATOR: &str = "--- End of stack trace from previous location ---";

/// An exception with the resolved stack traces of it and its inner exceptions.
#[derive(Debug, Clone)]
pub struct ExceptionReport {
    /// The exception (with its inner chain).
    pub exception: ExceptionInfo,
    /// Each exception's stack trace by object address, or why it could not be read.
    pub traces: HashMap<u64, Result<Vec<TraceLine>, String>>,
}

impl ExceptionReport {
    /// Resolves the stack traces of `exception` and its inner exceptions. Never fails as a
    /// whole: a trace that cannot be read is kept as its error.
    pub fn new(
        rt: &Runtime,
        exception: &ExceptionInfo,
        namer: &mut MethodNamer,
        lines: &SourceLines,
    ) -> ExceptionReport {
        let mut traces = HashMap::new();
        let mut next = Some(exception);
        // The inner chain was read with a depth bound and a cycle check; the loop follows it.
        while let Some(e) = next {
            traces.insert(e.address, resolve_trace(rt, e, namer, lines));
            next = e.inner.as_deref();
        }
        ExceptionReport {
            exception: exception.clone(),
            traces,
        }
    }

    /// The stack trace of the exception at `object` (this one or an inner one).
    pub fn trace(&self, object: u64) -> Option<&Result<Vec<TraceLine>, String>> {
        self.traces.get(&object)
    }

    /// The report as text, in the shape .NET prints an unhandled exception: each exception
    /// on a line (`Type: message`), its HResult and object, its frames as `at Method + IL_xxxx
    /// in file:line`, inner exceptions indented after `---> `. `indent` spaces start every
    /// line.
    pub fn text(&self, indent: usize) -> String {
        let mut out = String::new();
        let mut next = Some(&self.exception);
        let mut depth = 0;
        while let Some(e) = next {
            self.write_one(e, indent + 2 * depth, depth > 0, &mut out);
            next = e.inner.as_deref();
            depth += 1;
        }
        out
    }

    fn write_one(&self, e: &ExceptionInfo, indent: usize, inner: bool, out: &mut String) {
        let pad = " ".repeat(indent);
        let lead = if inner { "---> " } else { "" };
        let _ = writeln!(
            out,
            "{pad}{lead}{}: {}",
            e.type_name.as_deref().unwrap_or("<unnamed type>"),
            e.message.as_deref().unwrap_or("<no message>"),
        );
        let _ = writeln!(
            out,
            "{pad}     HResult {:#010x}, object {:#x}",
            e.hresult as u32, e.address
        );
        match self.traces.get(&e.address) {
            Some(Ok(frames)) => {
                for f in frames {
                    let il = f
                        .il_offset
                        .map(|n| format!(" + IL_{n:04x}"))
                        .unwrap_or_default();
                    let at = f
                        .source
                        .as_ref()
                        .map(|s| format!(" in {}:{}", s.file, s.line))
                        .unwrap_or_default();
                    let _ = writeln!(out, "{pad}     at {}{il}{at}", f.name);
                    if f.previous_location_ends {
                        let _ = writeln!(out, "{pad}     {PREVIOUS_LOCATION_SEPARATOR}");
                    }
                }
            }
            Some(Err(err)) => {
                let _ = writeln!(out, "{pad}     (stack trace unreadable: {err})");
            }
            None => {}
        }
    }
}

/// The named frames of one exception's `_stackTrace`.
fn resolve_trace(
    rt: &Runtime,
    e: &ExceptionInfo,
    namer: &mut MethodNamer,
    lines: &SourceLines,
) -> Result<Vec<TraceLine>, String> {
    let frames = exception_trace_frames(rt, e.stack_trace).map_err(|err| err.to_string())?;
    let mds: Vec<u64> = frames.iter().map(|f| f.frame.method_desc).collect();
    let names = namer.names(&mds);
    Ok(frames
        .iter()
        .zip(names)
        .map(|(f, name)| {
            let il = f.il_offset.and_then(IlOffset::il);
            let source = il.and_then(|il| {
                let (path, token) = namer.method_def(f.frame.method_desc)?;
                lines.locate(&path, token, il).ok().flatten()
            });
            TraceLine {
                ip: f.frame.ip,
                method_desc: f.frame.method_desc,
                name,
                il_offset: il,
                source,
                previous_location_ends: f.frame.is_last_foreign_frame(),
            }
        })
        .collect())
}
