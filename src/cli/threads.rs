//! `cdac threads`: the runtime's threads, their explicit Frames and the exception each has
//! in flight.

use clap::Args;
use serde_json::{json, Value};

use super::names::CliResult;
use super::{hex, DescriptorArgs, TargetArgs};
use cdac::contracts::thread::{ExceptionInfo, ExplicitFrame, Threads};
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

fn frame_json(f: &ExplicitFrame) -> Value {
    json!({
        "address": hex(f.address),
        "kind": f.kind,
        "tag": hex(f.tag),
        "return_address": f.return_address.map(hex),
        "caller_sp": f.caller_sp.map(hex),
        "saved_fp": f.saved_fp.map(hex),
        "datum": f.datum.map(hex),
        "context_ip": f.context_ip.map(hex),
    })
}

fn exception_json(e: &ExceptionInfo) -> Value {
    json!({
        "address": hex(e.address),
        "method_table": hex(e.method_table),
        "type": e.type_name,
        "message": e.message,
        "hresult": format!("{:#010x}", e.hresult as u32),
        "stack_trace": (e.stack_trace != 0).then(|| hex(e.stack_trace)),
        "inner": e.inner.as_deref().map(exception_json),
        "inner_error": e.inner_error,
    })
}

fn exception_text(e: &ExceptionInfo) -> String {
    let mut s = format!(
        "{}: {} (HResult {:#010x})",
        e.type_name.as_deref().unwrap_or("<unnamed type>"),
        e.message.as_deref().unwrap_or("<no message>"),
        e.hresult as u32
    );
    if let Some(inner) = &e.inner {
        s.push_str(" ---> ");
        s.push_str(&exception_text(inner));
    }
    s
}

/// Runs `cdac threads`.
pub fn run_threads(args: &ThreadsArgs) -> CliResult {
    let rt = args.target.open(&args.descriptor)?;
    let contract = Threads::for_runtime(&rt)?;
    let mut namer = MethodNamer::for_runtime(&rt);
    let list = contract.threads()?;
    if let Some(e) = &list.error {
        status!("cdac: warning: thread list cut short: {e}");
    }
    let mut rows = Vec::new();
    let mut text = String::new();
    text.push_str(&format!(
        "ThreadStore {}: {} threads counted, {} listed\n",
        hex(list.store.address),
        list.store.thread_count,
        list.threads.len()
    ));
    for t in &list.threads {
        let chain = contract.frame_chain(t.frame);
        let exception = t.exception().map(|obj| contract.exception(obj, &mut namer));
        let finalizer = list.store.finalizer_thread == Some(t.address);
        let nested: Vec<Result<ExceptionInfo, String>> = match contract.nested_exceptions(t) {
            Ok(objs) => objs
                .into_iter()
                .map(|o| contract.exception(o, &mut namer).map_err(|e| e.to_string()))
                .collect(),
            Err(e) => vec![Err(e.to_string())],
        };
        if args.json {
            rows.push(json!({
                "address": hex(t.address),
                "managed_id": t.managed_id,
                "os_id": t.os_id,
                "state": format!("{:#x}", t.state),
                "state_names": t.state_names(),
                "preemptive_gc_disabled": t.preemptive_gc_disabled,
                "finalizer": finalizer,
                "frame": hex(t.frame),
                "frames": chain.frames.iter().map(frame_json).collect::<Vec<_>>(),
                "frames_error": chain.error.as_ref().map(|e| e.to_string()),
                "exception_tracker": (t.exception_tracker != 0).then(|| hex(t.exception_tracker)),
                "current_exception": t.current_exception.map(hex),
                "last_thrown": t.last_thrown.map(hex),
                "exception": match &exception {
                    Some(Ok(e)) => exception_json(e),
                    Some(Err(e)) => json!({ "error": e.to_string() }),
                    None => Value::Null,
                },
                "nested_exceptions": nested
                    .iter()
                    .map(|n| match n {
                        Ok(e) => exception_json(e),
                        Err(e) => json!({ "error": e }),
                    })
                    .collect::<Vec<_>>(),
            }));
            continue;
        }
        text.push_str(&format!(
            "thread {} managed {} os {} state {:#x} [{}]{}\n",
            hex(t.address),
            t.managed_id,
            t.os_id,
            t.state,
            t.state_names().join(","),
            if finalizer { " finalizer" } else { "" }
        ));
        for f in &chain.frames {
            text.push_str(&format!(
                "    frame {} {}",
                hex(f.address),
                f.kind
                    .map_or_else(|| format!("<tag {}>", hex(f.tag)), str::to_string)
            ));
            if let Some(ra) = f.return_address {
                text.push_str(&format!(" return {}", hex(ra)));
            }
            if let Some(ip) = f.context_ip.filter(|&ip| Some(ip) != f.return_address) {
                text.push_str(&format!(" context ip {}", hex(ip)));
            }
            if let Some(sp) = f.caller_sp {
                text.push_str(&format!(" sp {}", hex(sp)));
            }
            if let Some(fp) = f.saved_fp {
                text.push_str(&format!(" fp {}", hex(fp)));
            }
            text.push('\n');
        }
        if let Some(e) = &chain.error {
            text.push_str(&format!("    frames cut short: {e}\n"));
        }
        match &exception {
            Some(Ok(e)) => text.push_str(&format!("    exception {}\n", exception_text(e))),
            Some(Err(e)) => text.push_str(&format!("    exception unreadable: {e}\n")),
            None => {}
        }
        for n in &nested {
            match n {
                Ok(e) => text.push_str(&format!("    nested {}\n", exception_text(e))),
                Err(e) => text.push_str(&format!("    nested exception unreadable: {e}\n")),
            }
        }
    }
    if args.json {
        let report = json!({
            "thread_store": hex(list.store.address),
            "thread_count": list.store.thread_count,
            "finalizer_thread": list.store.finalizer_thread.map(hex),
            "threads": rows,
            "error": list.error.as_ref().map(|e| e.to_string()),
        });
        out!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    super::emit(&text)
}
