//! The lldb extension (`lldb/cdac.py`, libcdac.so through ctypes, memory through lldb's
//! `SBProcess.ReadMemory`) in the real lldb (Debian's lldb 14), on the .NET 10 testbed live
//! (`lldb -p`, detached at the end) and on its `createdump --full` and gcore dumps, on a
//! `--full` dump of the .NET 9 and .NET 8 testbeds, and `cdac pe` on the dump the .NET 10
//! runtime writes of itself when it dies of an unhandled exception.
//!
//! One lldb process per target runs everything in one batch: `bt all` before the extension
//! is loaded (lldb names no managed frame), then `cdac bt all` (every parked thread's
//! methods named in order, between native frames, down to `clone3`), and for each parked
//! thread `cdac bt` and `cdac clrstack`, then `cdac ip2md` of managed return addresses.
//! They are checked against the CLI on the same target: `cdac stacks --json` and `cdac
//! ip2md --json` (live: just before lldb attaches; the parked threads do not move, but the
//! spinning one does, so only its method names are compared), `cdac analyze --json` for
//! `cdac pe`.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::{crash_dump, hex, repo, testbed_of, tracing_lock, Testbed, Variant};
use serde_json::Value;
use support::{cli_json, lib};

/// Whether lldb is installed; when it is not, the caller skips with a message.
fn have_lldb() -> bool {
    static HAVE: OnceLock<bool> = OnceLock::new();
    *HAVE.get_or_init(|| {
        let found = Command::new("lldb")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            eprintln!(
                "SKIPPED: lldb is not installed (`apt-get install lldb python3-lldb`; CI \
                 installs it)"
            );
        }
        found
    })
}

/// What one lldb batch printed: each command's output, in order.
struct Session {
    outputs: Vec<(String, String)>,
}

impl Session {
    /// The output of the `nth` command whose text starts with `prefix`.
    fn nth(&self, prefix: &str, nth: usize) -> &str {
        self.outputs
            .iter()
            .filter(|(c, _)| c.starts_with(prefix))
            .nth(nth)
            .map(|(_, o)| o.as_str())
            .unwrap_or_else(|| panic!("no output of `{prefix}` #{nth}"))
    }

    fn of(&self, prefix: &str) -> &str {
        self.nth(prefix, 0)
    }
}

/// lldb in batch mode on `target` (`-c CORE EXE`, or `-p PID`) running `commands` (each an
/// `-o`; lldb stops at the first that fails, so none may); its output, split by command.
fn lldb(target: &[OsString], commands: &[String]) -> Session {
    let mut c = Command::new("lldb");
    c.args(["--batch", "--no-lldbinit"]).args(target);
    for cmd in commands {
        c.arg("-o").arg(cmd);
    }
    let out = c
        .env("CDAC_LIB", lib())
        .stdin(Stdio::null())
        .output()
        .expect("run lldb");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(
        !errors.contains("Traceback") && !text.contains("Traceback"),
        "the extension failed: {errors}\n{text}"
    );
    assert!(
        !errors.contains("error:"),
        "an lldb command failed: {errors}\n{text}"
    );
    let mut outputs: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(cmd) = line.strip_prefix("(lldb) ") {
            outputs.push((cmd.to_string(), String::new()));
        } else if let Some((_, o)) = outputs.last_mut() {
            o.push_str(line);
            o.push('\n');
        }
    }
    let ran = outputs.iter().filter(|(c, _)| commands.contains(c)).count();
    assert_eq!(
        ran,
        commands.len(),
        "lldb did not run every command (Python module missing? `lldb -P`): {errors}\n{text}"
    );
    Session { outputs }
}

/// Threads of a `bt all`-style listing: the header (`thread #N, ...`) and frame lines.
fn threads_of(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start_matches(['*', ' ']);
        if trimmed.starts_with("thread #") {
            out.push((trimmed.to_string(), Vec::new()));
        } else if trimmed.starts_with("frame #") || trimmed.starts_with("note:") {
            if let Some((_, frames)) = out.last_mut() {
                frames.push(trimmed.to_string());
            }
        }
    }
    out
}

/// `thread #N` of a header line.
fn thread_index(header: &str) -> u32 {
    header["thread #".len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("thread index")
}

/// `Ns.Type::Method` of a frame line's method, when the frame is a method of ours.
fn parked_method(frame: &str) -> Option<String> {
    let text = frame.split(": 0x").nth(1)?;
    let head = text.split('(').next()?;
    let short = head.rsplit(' ').next()?;
    short
        .starts_with("Cdac.Testbed.Parked.")
        .then(|| short.to_string())
}

/// A native frame line, as lldb prints one: `0x… module`symbol…`.
fn is_native(frame: &str) -> bool {
    frame
        .split(": 0x")
        .nth(1)
        .and_then(|t| t.split(' ').nth(1))
        .is_some_and(|m| m.contains(".so") && m.contains('`'))
}

/// A frame line of an address lldb knows no module for: `frame #N: 0x…` and nothing else.
fn is_bare_address(frame: &str) -> bool {
    frame
        .split(": 0x")
        .nth(1)
        .is_some_and(|t| t.trim().chars().all(|c| c.is_ascii_hexdigit()))
}

/// The frames of a `cdac clrstack` listing: (ip, sp, `Some((name, IL offset, file:line))`
/// for managed frames).
type ClrFrame = (u64, u64, Option<(String, Option<u32>, Option<String>)>);

fn clrstack_frames(text: &str) -> Vec<ClrFrame> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with('#')) {
        // `#N  SP IP` then the frame's text.
        let sp_text = line.split_whitespace().nth(1).expect("sp");
        let sp = u64::from_str_radix(sp_text.trim_start_matches("0x"), 16).expect("sp");
        let ip_text = line.split_whitespace().nth(2).expect("ip");
        let ip = u64::from_str_radix(ip_text.trim_start_matches("0x"), 16).expect("ip");
        let rest = line
            .split_once(&format!(" {ip_text} "))
            .map_or("", |(_, r)| r)
            .trim();
        if rest.starts_with("(native)") {
            out.push((ip, sp, None));
            continue;
        }
        let (name_il, file_line) = match rest.rsplit_once(" at ") {
            Some((a, b)) => (a, Some(b.to_string())),
            None => (rest, None),
        };
        let (name, il) = match name_il.rsplit_once(" [IL_") {
            Some((n, il)) => (
                n,
                Some(u32::from_str_radix(il.trim_end_matches(']'), 16).expect("IL offset")),
            ),
            None => (name_il, None),
        };
        out.push((ip, sp, Some((name.to_string(), il, file_line))));
    }
    out
}

/// The CLI's frames of thread `tid` in `cdac stacks --json`, as `clrstack_frames` gives them.
fn cli_frames(stacks: &Value, tid: i64) -> Vec<ClrFrame> {
    let thread = stacks["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["os_id"].as_i64() == Some(tid))
        .unwrap_or_else(|| panic!("thread {tid} in cdac stacks"));
    thread["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .map(|f| {
            let (ip, sp) = (hex(&f["ip"]), hex(&f["sp"]));
            if f["kind"] != "managed" {
                return (ip, sp, None);
            }
            let source = f["source"].as_object().map(|s| {
                format!(
                    "{}:{}",
                    s["file"].as_str().expect("file"),
                    s["line"].as_u64().expect("line")
                )
            });
            let il = f["il_offset"].as_u64().map(|v| v as u32);
            (
                ip,
                sp,
                Some((f["name"].as_str().expect("name").to_string(), il, source)),
            )
        })
        .collect()
}

/// One target of a testbed: its live process or one of its dumps.
enum Source<'a> {
    Live,
    Dump(&'a Path),
    /// The core qemu-user wrote of an arm64 testbed: lldb needs the architecture named
    /// (the core says no OS) and the cross sysroot for the C libraries, whose symbols name
    /// no `clone3` or `start_thread` below the threads' frames.
    QemuCore(&'a Path),
}

/// Everything on one target in one lldb process: the checks of the module comment.
/// Returns the session, for callers with more to look at.
fn check_target(tb: &Testbed, source: Source, extra: &[String]) -> Session {
    let what = match source {
        Source::Live => format!("{} live", tb.variant.name()),
        Source::Dump(p) | Source::QemuCore(p) => format!("{} {}", tb.variant.name(), p.display()),
    };
    let exe = Path::new(tb.manifest["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed");
    let (target, cli_target): (Vec<OsString>, Vec<OsString>) = match source {
        Source::Live => (
            vec!["-p".into(), tb.pid.to_string().into()],
            vec!["--pid".into(), tb.pid.to_string().into()],
        ),
        Source::Dump(core) => (
            vec!["-c".into(), core.into(), exe.into()],
            vec!["--dump".into(), core.into()],
        ),
        Source::QemuCore(core) => (
            vec![
                // The arm64 C libraries the core lacks, from Debian's cross sysroot.
                "-O".into(),
                "platform select remote-linux --sysroot /usr/aarch64-linux-gnu".into(),
                "--arch".into(),
                "aarch64-unknown-linux-gnu".into(),
                "-c".into(),
                core.into(),
                exe.into(),
            ],
            vec!["--dump".into(), core.into()],
        ),
    };
    let live = matches!(source, Source::Live);
    let has_libc = !matches!(source, Source::QemuCore(_));
    let parked: Vec<&Value> = tb.manifest["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .collect();
    // Live, the CLI and lldb each stop the threads (a process has one tracer at a time).
    let tracing = live.then(tracing_lock);
    let stacks = cli_json(&["stacks"], &cli_target);
    // ip2md of each parked thread's managed return addresses (the call: ip - 1).
    let mut addrs: Vec<u64> = Vec::new();
    for p in &parked {
        let tid = p["os_tid"].as_i64().expect("os_tid");
        if p["kind"] == "spin" && live {
            continue;
        }
        for (k, (ip, _, managed)) in cli_frames(&stacks, tid).into_iter().enumerate() {
            if managed.is_some() && k > 0 && !addrs.contains(&(ip - 1)) {
                addrs.push(ip - 1);
            }
        }
    }
    addrs.truncate(24);
    let mut ip2md_args: Vec<String> = vec!["ip2md".into()];
    ip2md_args.extend(addrs.iter().map(|a| format!("{a:#x}")));
    let ip2md_args: Vec<&str> = ip2md_args.iter().map(String::as_str).collect();
    let cli_ip2md = cli_json(&ip2md_args, &cli_target);

    let ext = repo().join("lldb/cdac.py");
    let mut cmds: Vec<String> = vec![
        "script import time; cdac_t0 = time.perf_counter()".into(),
        "bt all".into(),
        "script print('@@time bt-all %.3f' % (time.perf_counter() - cdac_t0))".into(),
        format!("command script import {}", ext.display()),
        "script cdac_t0 = time.perf_counter()".into(),
        "cdac bt all".into(),
        "script print('@@time cdac-bt-all %.3f' % (time.perf_counter() - cdac_t0))".into(),
        "script cdac_t0 = time.perf_counter()".into(),
        "cdac bt all".into(),
        "script print('@@time cdac-bt-all-again %.3f' % (time.perf_counter() - cdac_t0))".into(),
        "cdac modules".into(),
    ];
    for p in &parked {
        let tid = p["os_tid"].as_i64().expect("os_tid");
        cmds.push(format!("script lldb.process.SetSelectedThreadByID({tid})"));
        cmds.push("cdac bt".into());
        cmds.push("cdac clrstack".into());
    }
    for a in &addrs {
        cmds.push(format!("cdac ip2md {a:#x}"));
    }
    // `cdac pe` of the threads parked in a catch block and a filter (their exception) and
    // of the sleeping one (none).
    let pe_threads: Vec<(&str, i64)> = parked
        .iter()
        .filter_map(|p| {
            let kind = p["kind"].as_str()?;
            ["catch", "filter", "sleep"]
                .contains(&kind)
                .then(|| (kind, p["os_tid"].as_i64().expect("os_tid")))
        })
        .collect();
    for (_, tid) in &pe_threads {
        cmds.push(format!("script lldb.process.SetSelectedThreadByID({tid})"));
        cmds.push("cdac pe".into());
    }
    cmds.extend(extra.iter().cloned());
    if live {
        cmds.push("detach".into());
    }
    let session = lldb(&target, &cmds);
    drop(tracing);

    // Before: lldb's own `bt all`, by thread index; after: `cdac bt all`, by OS thread id.
    let before: HashMap<u32, Vec<String>> = threads_of(session.of("bt all"))
        .into_iter()
        .map(|(h, f)| (thread_index(&h), f))
        .collect();
    let after = threads_of(session.of("cdac bt all"));
    assert_eq!(
        threads_of(session.nth("cdac bt all", 1)),
        after,
        "{what}: cdac bt all twice"
    );
    assert!(after.len() >= 14, "{what}: {} threads", after.len());
    let by_tid: HashMap<i64, (u32, &Vec<String>)> = after
        .iter()
        .map(|(h, f)| {
            let tid = h
                .split("tid = ")
                .nth(1)
                .and_then(|t| t.split(',').next())
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or_else(|| panic!("{what}: tid in {h}"));
            (tid, (thread_index(h), f))
        })
        .collect();
    let modules = session.of("cdac modules");
    assert!(modules.contains("Cdac.Testbed.dll"), "{what}: {modules}");
    assert!(modules.contains("System.Private.CoreLib.dll"), "{what}");

    let mut checked = 0;
    for (i, p) in parked.iter().enumerate() {
        let tid = p["os_tid"].as_i64().expect("os_tid");
        let kind = p["kind"].as_str().unwrap_or("?");
        let spin = kind == "spin";
        let (index, frames) = by_tid
            .get(&tid)
            .unwrap_or_else(|| panic!("{what}: thread {tid} in cdac bt all"));
        let shown = frames.join("\n");
        // Our methods, named, in the order of the physical frames the testbed recorded.
        let mut got: Vec<String> = frames.iter().filter_map(|f| parked_method(f)).collect();
        let mut want: Vec<String> = p["physical_frames"]
            .as_array()
            .expect("physical_frames")
            .iter()
            .map(|v| v.as_str().expect("name").to_string())
            .collect();
        if spin {
            got.dedup();
            want.dedup();
        }
        assert_eq!(got, want, "{what}: {kind} thread {tid}:\n{shown}");
        // Between native frames: the thread's start below, and above (but for the
        // spinning thread) the runtime or libc it waits in.
        let frame_lines: Vec<&String> = frames.iter().filter(|f| f.starts_with("frame")).collect();
        let first = frame_lines
            .iter()
            .position(|f| parked_method(f).is_some())
            .expect("a method of ours");
        let last = frame_lines
            .iter()
            .rposition(|f| parked_method(f).is_some())
            .expect("a method of ours");
        assert!(
            frame_lines[last + 1..].iter().any(|f| is_native(f)),
            "{what}: {kind}: no native frame below:\n{shown}"
        );
        if has_libc {
            assert!(
                frame_lines.last().is_some_and(|f| f.contains("clone3")),
                "{what}: {kind}:\n{shown}"
            );
            assert!(shown.contains("start_thread"), "{what}: {kind}:\n{shown}");
        }
        // Without libc in the core, lldb names no module for the frames in it (the
        // syscall wrappers a parked thread waits in): a bare address.
        let native_or_bare = |f: &&String| is_native(f) || (!has_libc && is_bare_address(f));
        if !spin {
            assert!(
                frame_lines[..first].iter().any(native_or_bare),
                "{what}: {kind}: no native frame above:\n{shown}"
            );
        }
        // Before the extension lldb named none of them.
        let plain = before
            .get(index)
            .unwrap_or_else(|| panic!("{what}: thread #{index} in bt all"));
        assert!(
            !plain.iter().any(|f| f.contains("Cdac.Testbed.")),
            "{what}: {kind}: lldb named managed frames by itself:\n{}",
            plain.join("\n")
        );
        // `cdac bt` of the selected thread is its part of `cdac bt all`.
        let one = threads_of(session.nth("cdac bt", 2 + i));
        assert_eq!(one.len(), 1, "{what}");
        assert_eq!(&one[0].1, *frames, "{what}: {kind}: cdac bt");
        // `cdac clrstack` walks as `cdac stacks` does.
        let ours = clrstack_frames(session.nth("cdac clrstack", i));
        let theirs = cli_frames(&stacks, tid);
        if spin && live {
            let names = |fs: &[ClrFrame]| -> Vec<String> {
                let mut v: Vec<String> = fs
                    .iter()
                    .filter_map(|(_, _, m)| Some(m.as_ref()?.0.clone()))
                    .collect();
                v.dedup();
                v
            };
            assert_eq!(names(&ours), names(&theirs), "{what}: {kind} clrstack");
        } else {
            assert_eq!(
                ours,
                theirs,
                "{what}: {kind} thread {tid} clrstack:\n{}",
                session.nth("cdac clrstack", i)
            );
            assert!(ours
                .iter()
                .any(|(_, _, m)| m.as_ref().is_some_and(|m| m.2.is_some())));
        }
        checked += 1;
    }
    assert!(checked >= 8, "{what}: {checked} parked threads");

    // `cdac ip2md` answers as `cdac ip2md --json`.
    for (k, a) in addrs.iter().enumerate() {
        let out = session.nth("cdac ip2md", k);
        let want = &cli_ip2md[k];
        assert_eq!(hex(&want["address"]), *a);
        let first = format!("{a:#x}: {}\n", want["name"].as_str().expect("name"));
        assert!(out.starts_with(&first), "{what}: {out} vs {want}");
        let kind = match want["jit_type"].as_str() {
            Some("jit") => "jit",
            Some("r2r") => "r2r",
            _ => "unknown",
        };
        let detail = format!(
            "  MethodDesc {:#x}, start {:#x} + {:#x}, size {:#x}, {kind}{}\n",
            hex(&want["method_desc"]),
            hex(&want["start"]),
            want["relative_offset"].as_u64().expect("offset"),
            want["size"].as_u64().expect("size"),
            if want["is_funclet"] == true {
                ", funclet"
            } else {
                ""
            }
        );
        assert!(out.contains(&detail), "{what}: {out} vs {detail}");
    }
    for (k, (kind, tid)) in pe_threads.iter().enumerate() {
        let out = session.nth("cdac pe", k);
        let first = out.lines().next().unwrap_or("");
        if *kind == "sleep" {
            assert!(
                first.ends_with(&format!("(tid {tid}) has no exception")),
                "{what}: {out}"
            );
        } else {
            assert!(
                first.starts_with(&format!("System.InvalidOperationException: cdac-{kind}:")),
                "{what}: {kind}: {out}"
            );
            assert!(
                out.contains(&format!("Parked.{}Blocker::", capitalized(kind))),
                "{what}: {kind}: {out}"
            );
        }
    }
    eprintln!(
        "{what}: {checked} parked threads, {} addresses checked; {}",
        addrs.len(),
        timings(&session).join(", ")
    );
    session
}

/// `catch` → `Catch`.
fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// The `@@time NAME SECONDS` lines of a session.
fn timings(session: &Session) -> Vec<String> {
    session
        .outputs
        .iter()
        .filter_map(|(_, o)| o.lines().find_map(|l| l.strip_prefix("@@time ")))
        .map(|t| {
            let (name, secs) = t.split_once(' ').unwrap_or((t, "?"));
            format!("{name} {secs} s")
        })
        .collect()
}

#[test]
fn net10_live() {
    if !have_lldb() {
        return;
    }
    let tb = testbed_of(Variant::Net10);
    check_target(tb, Source::Live, &[]);
    // The testbed runs on after lldb detached.
    assert!(Path::new(&format!("/proc/{}", tb.pid)).exists());
}

#[test]
fn net10_full_dump() {
    if !have_lldb() {
        return;
    }
    let tb = testbed_of(Variant::Net10);
    check_target(tb, Source::Dump(&tb.dump("full")), &[]);
}

#[test]
fn net10_gcore_dump() {
    if !have_lldb() {
        return;
    }
    let tb = testbed_of(Variant::Net10);
    // Also: commands that fail print cdac's message, not a traceback (last: lldb's batch
    // mode stops at a failing command).
    let session = check_target(
        tb,
        Source::Dump(&tb.dump("gcore")),
        &["cdac ip2md 0x10".into(), "cdac reset".into()],
    );
    assert!(session
        .of("cdac ip2md 0x10")
        .contains("0x10: not managed code"));
}

#[test]
fn net9_full_dump() {
    if !have_lldb() {
        return;
    }
    let tb = testbed_of(Variant::Net9);
    check_target(tb, Source::Dump(&tb.dump("full")), &[]);
}

#[test]
fn net8_full_dump() {
    if !have_lldb() {
        return;
    }
    let tb = testbed_of(Variant::Net8);
    check_target(tb, Source::Dump(&tb.dump("full")), &[]);
}

#[test]
fn net10_arm64_qemu_core() {
    if !have_lldb() {
        return;
    }
    let _qemu = common::qemu_lock();
    let tb = common::start_testbed(Variant::Net10Arm64, &[]);
    let core = tb.qemu_core();
    check_target(&tb, Source::QemuCore(&core), &[]);
}

/// One exception of `cdac analyze --json` as `cdac pe` prints it (the layout of
/// `cdac_exception_text`): type and message, HResult and object, stack trace, inner ones.
fn exception_lines(e: &Value, depth: usize, out: &mut Vec<String>) {
    let pad = "  ".repeat(depth);
    let lead = if depth == 0 { "" } else { "---> " };
    out.push(format!(
        "{pad}{lead}{}: {}",
        e["type"].as_str().expect("type"),
        e["message"].as_str().unwrap_or("")
    ));
    out.push(format!(
        "HResult {}, object {:#x}",
        e["hresult"].as_str().expect("hresult"),
        hex(&e["address"])
    ));
    for f in e["stack_trace"].as_array().into_iter().flatten() {
        let mut line = format!("at {}", f["name"].as_str().expect("name"));
        if let Some(il) = f["il_offset"].as_u64() {
            line.push_str(&format!(" + IL_{il:04x}"));
        }
        if let Some(s) = f["source"].as_object() {
            line.push_str(&format!(
                " in {}:{}",
                s["file"].as_str().expect("file"),
                s["line"]
            ));
        }
        out.push(line);
        // The runtime's separator after the frames captured before a rethrow.
        if f["previous_location_ends"].as_bool() == Some(true) {
            out.push("--- End of stack trace from previous location ---".into());
        }
    }
    if e["inner"].is_object() {
        exception_lines(&e["inner"], depth + 1, out);
    }
}

#[test]
fn net10_crash_dump_pe() {
    if !have_lldb() {
        return;
    }
    let (m, dump) = crash_dump(Variant::Net10);
    let crash = &m["crash"];
    let tid = crash["os_tid"].as_i64().expect("os_tid");
    let analyze = cli_json(&["analyze"], &["--dump".into(), dump.clone().into()]);
    let exception = analyze["exceptions"]
        .as_array()
        .expect("exceptions")
        .iter()
        .find(|x| x["thread"].as_i64() == Some(tid))
        .map(|x| &x["exception"])
        .expect("the crashing thread's exception");
    let inner = hex(&exception["inner"]["address"]);
    let exe = Path::new(m["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed");
    let session = lldb(
        &["-c".into(), dump.into(), exe.into()],
        &[
            format!(
                "command script import {}",
                repo().join("lldb/cdac.py").display()
            ),
            format!("script lldb.process.SetSelectedThreadByID({tid})"),
            "cdac pe".into(),
            format!("cdac pe {inner:#x}"),
            "cdac bt".into(),
        ],
    );
    let mut want = Vec::new();
    exception_lines(exception, 0, &mut want);
    let got: Vec<String> = session
        .of("cdac pe")
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    let want_trimmed: Vec<String> = want.iter().map(|l| l.trim().to_string()).collect();
    assert_eq!(got, want_trimmed, "cdac pe vs cdac analyze");
    assert_eq!(
        got.first().map(String::as_str),
        Some(
            format!(
                "{}: {}",
                crash["exception_type"].as_str().expect("type"),
                crash["message"].as_str().expect("message")
            )
            .as_str()
        )
    );
    // The inner exception by its address.
    let mut want_inner = Vec::new();
    exception_lines(&exception["inner"], 0, &mut want_inner);
    let got_inner: Vec<String> = session
        .of(&format!("cdac pe {inner:#x}"))
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    let want_inner: Vec<String> = want_inner.iter().map(|l| l.trim().to_string()).collect();
    assert_eq!(got_inner, want_inner, "cdac pe {inner:#x}");
    // The crashing thread's backtrace names the throwing method.
    let bt = session.of("cdac bt");
    let thrower = crash["method"].as_str().expect("method");
    assert!(bt.contains(thrower), "{bt}");
}

/// `cdac dumpheap -stat` and `cdac gchandles -stat` in lldb print what the CLI's `heap` and
/// `handles` print on the same dump (memory read through lldb).
#[test]
fn dumpheap_and_gchandles_equal_the_cli() {
    if !have_lldb() {
        return;
    }
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let target: Vec<OsString> = vec!["--dump".into(), dump.clone().into_os_string()];
    let stat = cli_json(&["heap"], &target);
    let handles = cli_json(&["handles", "--stat"], &target);
    let exe = Path::new(tb.manifest["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed");
    let session = lldb(
        &["-c".into(), dump.into_os_string(), exe.into()],
        &[
            format!(
                "command script import {}",
                repo().join("lldb/cdac.py").display()
            ),
            "cdac dumpheap -stat".into(),
            "cdac gchandles -stat".into(),
        ],
    );
    let mut rows = HashMap::new();
    let mut total = None;
    for line in session.of("cdac dumpheap").lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() == Some(&"Total") && f.len() >= 4 {
            total = Some((f[1].parse::<u64>().unwrap(), f[3].parse::<u64>().unwrap()));
        } else if f.len() >= 4 && f[0].starts_with("0x") {
            let mt = u64::from_str_radix(&f[0][2..], 16).expect("MT");
            rows.insert(
                mt,
                (f[1].parse::<u64>().unwrap(), f[2].parse::<u64>().unwrap()),
            );
        }
    }
    let cli: HashMap<u64, (u64, u64)> = stat["types"]
        .as_array()
        .expect("types")
        .iter()
        .map(|t| {
            (
                hex(&t["method_table"]),
                (
                    t["count"].as_u64().unwrap(),
                    t["total_size"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(rows, cli);
    assert_eq!(
        total,
        Some((
            stat["objects"].as_u64().unwrap(),
            stat["total_size"].as_u64().unwrap()
        ))
    );
    let gc = session.of("cdac gchandles");
    let all: u64 = handles["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(gc.contains(&format!("{all:>8} handles")), "{gc}");
}

/// `cdac dumpobj` and `cdac gcroot` in lldb on the testbed's `FieldShapes` object print the
/// fields and values the CLI's `obj` prints and the path its `gcroot` finds.
#[test]
fn dumpobj_and_gcroot_equal_the_cli() {
    if !have_lldb() {
        return;
    }
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let target: Vec<OsString> = vec!["--dump".into(), dump.clone().into_os_string()];
    let objects = cli_json(
        &[
            "heap",
            "--objects",
            "--type",
            "^Cdac\\.Testbed\\.Heap\\.FieldShapes$",
        ],
        &target,
    );
    let address = objects["object_list"][0]["address"]
        .as_str()
        .expect("FieldShapes")
        .to_string();
    let obj = cli_json(&["obj", &address], &target);
    let root = cli_json(&["gcroot", &address], &target);
    let exe = Path::new(tb.manifest["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed");
    let session = lldb(
        &["-c".into(), dump.into_os_string(), exe.into()],
        &[
            format!(
                "command script import {}",
                repo().join("lldb/cdac.py").display()
            ),
            format!("cdac dumpobj {address}"),
            format!("cdac gcroot {address}"),
        ],
    );
    let fields = session.of("cdac dumpobj");
    let mut compared = 0;
    for f in obj["fields"].as_array().expect("fields") {
        let name = f["name"].as_str().expect("name");
        let shown = match f["value"]["kind"].as_str() {
            Some("int") | Some("u_int") => f["value"]["value"].to_string(),
            _ => continue,
        };
        let line = fields
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{fields}"));
        assert_eq!(
            line.split_whitespace().nth(3),
            Some(shown.as_str()),
            "{line}"
        );
        compared += 1;
    }
    assert!(compared >= 5, "{fields}");
    let path = session.of("cdac gcroot");
    let root_handle = root["root"]["address"].as_str().expect("root");
    assert!(path.contains(root_handle), "{path}");
    for step in root["path"].as_array().expect("path") {
        let a = step["address"].as_str().expect("address");
        assert!(path.contains(&format!("-> {a} ")), "{a}: {path}");
    }
}

/// `cdac syncblk` and `cdac dumpasync` in lldb list the objects the CLI's
/// `locks --no-stacks` and `async` list on the same dump, in the same order for the chains.
#[test]
fn syncblk_and_dumpasync_equal_the_cli() {
    if !have_lldb() {
        return;
    }
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let target: Vec<OsString> = vec!["--dump".into(), dump.clone().into_os_string()];
    let locks = cli_json(&["locks", "--no-stacks"], &target);
    let chains = cli_json(&["async"], &target);
    let exe = Path::new(tb.manifest["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed");
    let session = lldb(
        &["-c".into(), dump.into_os_string(), exe.into()],
        &[
            format!(
                "command script import {}",
                repo().join("lldb/cdac.py").display()
            ),
            "cdac syncblk".into(),
            "cdac dumpasync".into(),
        ],
    );
    let first_words = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|w| w.starts_with("0x"))
            .map(str::to_string)
            .collect()
    };
    let mut ours = first_words(session.of("cdac syncblk"));
    ours.sort();
    let mut cli: Vec<String> = locks["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|l| format!("{:#x}", hex(&l["object"])))
        .collect();
    cli.sort();
    assert!(!cli.is_empty());
    assert_eq!(ours, cli, "{}", session.of("cdac syncblk"));
    let frames: Vec<String> = chains["chains"]
        .as_array()
        .expect("chains")
        .iter()
        .flat_map(|c| c["frames"].as_array().unwrap())
        .map(|f| format!("{:#x}", hex(&f["object"])))
        .collect();
    assert!(!frames.is_empty());
    assert_eq!(
        first_words(session.of("cdac dumpasync")),
        frames,
        "{}",
        session.of("cdac dumpasync")
    );
}
