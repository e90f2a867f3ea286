//! `cdac threads`: the runtime's threads, their explicit Frames and the exception each has
//! in flight.

use clap::Args;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{self, nonzero, Addr, ExceptionOrError, ManagedThread, NameSource, Thread};
use super::{hex, CliResult, DescriptorArgs, Outcome, TargetArgs};
use cdac::contracts::thread::{ExceptionInfo, ExplicitFrame, ThreadInfo, Threads};
use cdac::contracts::ContractError;
use cdac::names::MethodNamer;

/// Arguments of `cdac threads`.
#[derive(Debug, Args)]
pub struct ThreadsArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    descriptor: DescriptorArgs,
    /// Print one JSON object: the thread store and an array of threads.
    #[arg(long)]
    json: bool,
}

/// What `cdac threads --json` prints.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ThreadsReport {
    /// The runtime's `ThreadStore`.
    pub thread_store: Addr,
    /// The threads the ThreadStore counts.
    pub thread_count: u32,
    /// The finalizer thread's `Thread*`.
    pub finalizer_thread: Option<Addr>,
    /// Every thread of the ThreadStore's list.
    pub threads: Vec<Thread>,
    /// Why the list was cut short.
    pub error: Option<String>,
    /// How the runtime's thread ids were tied to the target's, where they differ (a
    /// process in a PID namespace of its own: by the kernel's NSpid live, by stack in a
    /// dump).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_ids: Option<String>,
}

/// The JSON of an explicit Frame.
pub(super) fn explicit_frame(f: &ExplicitFrame) -> model::ExplicitFrame {
    model::ExplicitFrame {
        address: Addr(f.address),
        kind: f.kind.map(str::to_string),
        tag: Addr(f.tag),
        return_address: f.return_address.map(Addr),
        caller_sp: f.caller_sp.map(Addr),
        saved_fp: f.saved_fp.map(Addr),
        datum: f.datum.map(Addr),
        context_ip: f.context_ip.map(Addr),
    }
}

/// The JSON of an exception (its stack trace left `null`: `analyze` fills it in).
pub(super) fn exception(e: &ExceptionInfo) -> model::Exception {
    model::Exception {
        address: Addr(e.address),
        method_table: Addr(e.method_table),
        type_name: e.type_name.clone(),
        message: e.message.clone(),
        hresult: format!("{:#010x}", e.hresult as u32),
        stack_trace: None,
        stack_trace_error: None,
        inner: e.inner.as_deref().map(|i| Box::new(exception(i))),
        inner_error: e.inner_error.clone(),
    }
}

/// An exception read at `address`, or why it could not be.
pub(super) fn exception_or_error(
    address: u64,
    read: Result<ExceptionInfo, ContractError>,
) -> ExceptionOrError {
    match read {
        Ok(e) => ExceptionOrError::Exception(Box::new(exception(&e))),
        Err(err) => ExceptionOrError::Error {
            address: nonzero(address),
            error: err.to_string(),
        },
    }
}

/// The runtime's side of a thread.
pub(super) fn managed_thread(
    t: &ThreadInfo,
    finalizer: bool,
    explicit_frames: &[ExplicitFrame],
    explicit_frames_error: Option<String>,
    exception: Option<ExceptionOrError>,
    nested_exceptions: Vec<ExceptionOrError>,
) -> ManagedThread {
    ManagedThread {
        address: Addr(t.address),
        managed_id: t.managed_id,
        os_id_in_namespace: t.namespace_os_id,
        state: model::ThreadState {
            value: Addr(u64::from(t.state)),
            names: t.state_names().iter().map(|s| s.to_string()).collect(),
        },
        finalizer,
        preemptive_gc_disabled: t.preemptive_gc_disabled,
        explicit_frames: explicit_frames.iter().map(explicit_frame).collect(),
        explicit_frames_error,
        exception,
        nested_exceptions,
    }
}

/// The thread's name and where it came from: the managed `Thread.Name`, else the kernel's.
pub(super) fn thread_name(
    managed: Option<&str>,
    kernel: Option<&str>,
) -> (Option<String>, Option<NameSource>) {
    match (managed, kernel) {
        (Some(m), _) => (Some(m.to_string()), Some(NameSource::Managed)),
        (None, Some(k)) => (Some(k.to_string()), Some(NameSource::Kernel)),
        (None, None) => (None, None),
    }
}

fn exception_text(e: &model::Exception) -> String {
    let mut s = format!(
        "{}: {} (HResult {})",
        e.type_name.as_deref().unwrap_or("<unnamed type>"),
        e.message.as_deref().unwrap_or("<no message>"),
        e.hresult
    );
    if let Some(inner) = &e.inner {
        s.push_str(" ---> ");
        s.push_str(&exception_text(inner));
    }
    s
}

fn exception_or_error_text(e: &ExceptionOrError) -> String {
    match e {
        ExceptionOrError::Exception(e) => exception_text(e),
        ExceptionOrError::Error { error, .. } => format!("unreadable: {error}"),
    }
}

/// Runs `cdac threads`.
pub fn run_threads(args: &ThreadsArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    if rt.is_native_aot() {
        return native_aot_threads(&rt, args);
    }
    let contract = Threads::for_runtime(&rt)?;
    let mut namer = MethodNamer::for_runtime(&rt);
    let list = contract.threads()?;
    let mut unreadable = 0;
    let mut threads = Vec::new();
    for t in &list.threads {
        let chain = contract.frame_chain(t.frame);
        let exception = t
            .exception()
            .map(|obj| exception_or_error(obj, contract.exception(obj, &mut namer)));
        let nested: Vec<ExceptionOrError> = match contract.nested_exceptions(t) {
            Ok(objs) => objs
                .into_iter()
                .map(|o| exception_or_error(o, contract.exception(o, &mut namer)))
                .collect(),
            Err(e) => vec![ExceptionOrError::Error {
                address: None,
                error: e.to_string(),
            }],
        };
        let finalizer = list.store.finalizer_thread == Some(t.address);
        let frames_error = chain.error.as_ref().map(|e| e.to_string());
        unreadable += usize::from(frames_error.is_some())
            + usize::from(matches!(exception, Some(ExceptionOrError::Error { .. })))
            + nested
                .iter()
                .filter(|n| matches!(n, ExceptionOrError::Error { .. }))
                .count();
        let managed = managed_thread(t, finalizer, &chain.frames, frames_error, exception, nested);
        let managed_name = contract.thread_name(t).ok().flatten();
        let (name, name_source) = thread_name(managed_name.as_deref(), None);
        threads.push(Thread {
            os_id: t.os_id as i64,
            name,
            name_source,
            managed: Some(managed),
            registers: None,
            stopped_us: None,
            held_us: None,
            note: None,
            frames: None,
            stack_end: None,
        });
    }
    let report = ThreadsReport {
        thread_store: Addr(list.store.address),
        thread_count: list.store.thread_count,
        finalizer_thread: list.store.finalizer_thread.and_then(nonzero),
        threads,
        error: list.error.as_ref().map(|e| e.to_string()),
        thread_ids: list.ids_matched.clone(),
    };
    if args.json {
        super::emit_json(&report)?;
    } else {
        super::emit(&threads_text(&report))?;
    }
    let mut problems = Vec::new();
    if let Some(e) = &report.error {
        problems.push(format!("the thread list was cut short: {e}"));
    }
    if unreadable > 0 {
        problems.push(format!(
            "{unreadable} Frame chain(s) or exception(s) could not be read"
        ));
    }
    Ok(if problems.is_empty() {
        Outcome::Answered
    } else {
        Outcome::Partial(problems.join("; "))
    })
}

/// `threads` of a NativeAOT runtime: its thread list with what each thread's managed Thread
/// and exception dispatch say (NativeAOT has no explicit Frames).
fn native_aot_threads(rt: &cdac::runtime::Runtime, args: &ThreadsArgs) -> CliResult {
    let aot = cdac::nativeaot::NativeAot::new(rt)?;
    let list = aot.threads()?;
    let managed = cdac::nativeaot::stacks::managed_from(&list);
    let threads = list
        .threads
        .iter()
        .map(|t| {
            let os_id = i32::try_from(t.os_id).unwrap_or(0);
            let stack = cdac::stacks::ThreadStack {
                os_id,
                name: None,
                managed: managed.get(&os_id).cloned(),
                registers: None,
                stopped_for: None,
                held_for: None,
                stack: None,
                note: None,
                roots: None,
            };
            super::stacks::thread_model(&stack, &[])
        })
        .collect();
    let report = ThreadsReport {
        thread_store: Addr(list.store),
        thread_count: u32::try_from(list.threads.len()).unwrap_or(u32::MAX),
        finalizer_thread: list
            .threads
            .iter()
            .find(|t| t.is_finalizer())
            .map(|t| Addr(t.address)),
        threads,
        error: list.error.clone(),
        thread_ids: None,
    };
    if args.json {
        super::emit_json(&report)?;
    } else {
        super::emit(&threads_text(&report))?;
    }
    Ok(match &report.error {
        None => Outcome::Answered,
        Some(e) => Outcome::Partial(format!("the thread list was cut short: {e}")),
    })
}

fn threads_text(r: &ThreadsReport) -> String {
    let mut text = format!(
        "ThreadStore {}: {} threads counted, {} listed\n",
        hex(r.thread_store.0),
        r.thread_count,
        r.threads.len()
    );
    if let Some(ids) = &r.thread_ids {
        text.push_str(&format!("({ids})\n"));
    }
    for t in &r.threads {
        let Some(m) = &t.managed else { continue };
        text.push_str(&format!(
            "thread {} managed {} os {}{}{} state {} [{}]{}\n",
            hex(m.address.0),
            m.managed_id,
            t.os_id,
            m.os_id_in_namespace
                .map(|n| format!(" ({n} in its PID namespace)"))
                .unwrap_or_default(),
            t.name
                .as_ref()
                .map(|n| format!(" \"{n}\""))
                .unwrap_or_default(),
            hex(m.state.value.0),
            m.state.names.join(","),
            if m.finalizer { " finalizer" } else { "" }
        ));
        for f in &m.explicit_frames {
            text.push_str(&format!(
                "    frame {} {}",
                hex(f.address.0),
                f.kind
                    .clone()
                    .unwrap_or_else(|| format!("<tag {}>", hex(f.tag.0)))
            ));
            if let Some(ra) = f.return_address {
                text.push_str(&format!(" return {}", hex(ra.0)));
            }
            if let Some(ip) = f.context_ip.filter(|&ip| Some(ip) != f.return_address) {
                text.push_str(&format!(" context ip {}", hex(ip.0)));
            }
            if let Some(sp) = f.caller_sp {
                text.push_str(&format!(" sp {}", hex(sp.0)));
            }
            if let Some(fp) = f.saved_fp {
                text.push_str(&format!(" fp {}", hex(fp.0)));
            }
            text.push('\n');
        }
        if let Some(e) = &m.explicit_frames_error {
            text.push_str(&format!("    frames cut short: {e}\n"));
        }
        if let Some(e) = &m.exception {
            text.push_str(&format!("    exception {}\n", exception_or_error_text(e)));
        }
        for n in &m.nested_exceptions {
            text.push_str(&format!("    nested {}\n", exception_or_error_text(n)));
        }
    }
    if let Some(e) = &r.error {
        text.push_str(&format!("(thread list cut short: {e})\n"));
    }
    text
}
