//! The gdb extension (`gdb/cdac.py`, libcdac.so through ctypes, memory through gdb) in the
//! real gdb, on the testbeds of .NET 10 (a gcore dump and the live process gdb attaches
//! to), .NET 9 and .NET 8 (a `createdump --full` dump and a gcore dump each), and on the
//! dump the .NET 10 runtime writes of itself when it dies of an unhandled exception.
//!
//! One gdb process per target runs everything in one batch: `thread apply all bt` without
//! the extension (gdb shows `??` at the first managed frame and gets no further), then with
//! it (every parked thread's methods named in order, between the native frames cdac's own
//! walk finds, down to `clone3`), `cdac clrstack` of every thread, `cdac ip2md` of the
//! managed return addresses. What they print is checked against the CLI, `cdac stacks
//! --json` and `cdac ip2md --json` on the same target (live: just before gdb attaches; the
//! parked threads do not move). `cdac pe` is checked against `cdac analyze --json`.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{hex, repo, scratch, testbed_exe, testbed_of, tracing_lock, Testbed, Variant};
use serde_json::Value;
use support::{cli_json, lib};

/// Prints, for the selected thread, `@@frames LWP pc:sp ...`: the frames gdb unwinds (with
/// whatever unwinders are registered; inlined frames and the tail-call frames gdb infers
/// from debug info left out: they are not on the stack).
const FRAMES_PY: &str = r#"
import gdb

def cdac_test_frames():
    thread = gdb.selected_thread()
    frame = gdb.newest_frame()
    out = []
    while frame is not None and len(out) < 300:
        if frame.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            sp = "sp" if "aarch64" in frame.architecture().name() else "rsp"
            out.append("%x:%x" % (frame.pc(), int(frame.read_register(sp)) & (2**64 - 1)))
        try:
            frame = frame.older()
        except gdb.error:
            break
    print("@@frames %d %s" % (thread.ptid[1], " ".join(out)))
"#;

/// gdb in batch mode on `target` (`EXE CORE`, or `-p PID`) running `commands`, each a
/// separate `-ex` (a failing one does not stop the others); its stdout.
fn gdb(target: &[OsString], commands: &[String]) -> String {
    gdb_program("gdb", target, commands)
}

/// [`gdb`] with another gdb (`gdb-multiarch` for arm64 cores on this x64 host).
fn gdb_program(program: &str, target: &[OsString], commands: &[String]) -> String {
    // gdb-multiarch once spun for over 20 minutes on a qemu core that the same batch read in
    // 11 s on its next run: a batch that takes far longer than any seen is stopped and run
    // once more, so that one such stall does not hold the whole test run.
    match gdb_batch(program, target, commands) {
        Some(text) => text,
        None => {
            eprintln!("{program} did not finish in {GDB_STALL:?}: running the batch again");
            gdb_batch(program, target, commands)
                .unwrap_or_else(|| panic!("{program} did not finish in {GDB_STALL:?} twice"))
        }
    }
}

/// How long a batch may run before it counts as stalled (they take seconds).
const GDB_STALL: std::time::Duration = std::time::Duration::from_secs(300);

/// One gdb batch; `None` when it ran past [`GDB_STALL`] (it is then killed).
fn gdb_batch(program: &str, target: &[OsString], commands: &[String]) -> Option<String> {
    let helper = scratch("gdb-extension").join("frames.py");
    std::fs::write(&helper, FRAMES_PY).expect("frames.py");
    let mut c = Command::new("timeout");
    c.arg(format!("{}s", GDB_STALL.as_secs())).arg(program);
    c.args([
        "-batch",
        "-nx",
        "-ex",
        "set pagination off",
        "-ex",
        "set width 0",
    ])
    .arg("-ex")
    .arg(format!("source {}", helper.display()));
    for cmd in commands {
        c.arg("-ex").arg(cmd);
    }
    let out = c
        .args(target)
        .env("CDAC_LIB", lib())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program} (Debian packages gdb, gdb-multiarch): {e}"));
    // timeout(1) exits 124 when it had to stop the program.
    if out.status.code() == Some(124) {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(
        !errors.contains("Python Exception") && !errors.contains("Traceback"),
        "the extension failed: {errors}"
    );
    Some(text)
}

/// The part of gdb's output after `echo @@section NAME` and before the next one.
fn section<'a>(text: &'a str, name: &str) -> &'a str {
    let mark = format!("@@section {name}\n");
    let start = text
        .find(&mark)
        .unwrap_or_else(|| panic!("no section {name}: {text}"))
        + mark.len();
    let rest = &text[start..];
    &rest[..rest.find("@@section ").unwrap_or(rest.len())]
}

fn echo(name: &str) -> String {
    format!("echo @@section {name}\\n")
}

/// The LWP of a `Thread N (...(LWP 123)...)` header line of `thread apply all`.
fn lwp_of(line: &str) -> Option<i64> {
    if !line.starts_with("Thread ") {
        return None;
    }
    let digits: String = line
        .split("(LWP ")
        .nth(1)?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The `#` lines of each thread of a `thread apply all` output, by LWP.
fn per_thread(text: &str) -> HashMap<i64, Vec<String>> {
    let mut out: HashMap<i64, Vec<String>> = HashMap::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(lwp) = lwp_of(line) {
            current = Some(lwp);
            out.entry(lwp).or_default();
        } else if line.starts_with('#') {
            if let Some(lwp) = current {
                out.entry(lwp).or_default().push(line.to_string());
            }
        }
    }
    out
}

/// `@@frames` lines: each thread's (pc, sp) as gdb unwinds it.
fn gdb_frames(text: &str) -> HashMap<i64, Vec<(u64, u64)>> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.strip_prefix("@@frames ")?.split(' ');
            let lwp = parts.next()?.parse().ok()?;
            let frames = parts
                .filter_map(|f| {
                    let (pc, sp) = f.split_once(':')?;
                    Some((
                        u64::from_str_radix(pc, 16).ok()?,
                        u64::from_str_radix(sp, 16).ok()?,
                    ))
                })
                .collect();
            Some((lwp, frames))
        })
        .collect()
}

/// `Ns.Type::Method` of a name such as `void [Asm] Ns.Type::Method(int32)`.
fn short_name(name: &str) -> String {
    let head = name.split('(').next().unwrap_or(name);
    head.rsplit(' ').next().unwrap_or(head).to_string()
}

/// The address gdb prints on a `bt` line (`#3  0x00007f... in ...`).
fn bt_address(line: &str) -> Option<u64> {
    let word = line.split_whitespace().nth(1)?;
    u64::from_str_radix(word.strip_prefix("0x")?, 16).ok()
}

/// The testbed's executable (gdb needs it to open a core).
fn app(tb: &Testbed) -> PathBuf {
    Path::new(tb.manifest["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed")
}

/// Where the extension runs: a dump of the testbed (its kind), the live process, or the
/// core qemu-user wrote of an arm64 testbed (in gdb-multiarch, with the arm64 C libraries
/// of Debian's cross sysroot: the core holds no NT_FILE note and no libc text).
#[derive(Clone, Copy)]
enum On<'a> {
    Dump(&'static str),
    Live,
    QemuCore(&'a Path),
}

/// The arm64 C libraries gdb-multiarch loads for a qemu core.
const ARM64_SYSROOT_LIB: &str = "/usr/aarch64-linux-gnu/lib";

/// A line of `cdac clrstack`: `#N SP IP NAME [IL_xxxx] at FILE:LINE` or `#N SP IP (native) …`.
struct ClrFrame {
    sp: u64,
    ip: u64,
    line: String,
}

fn clrstack_frames(lines: &[String]) -> Vec<ClrFrame> {
    lines
        .iter()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.next()?;
            let sp = u64::from_str_radix(words.next()?.strip_prefix("0x")?, 16).ok()?;
            let ip = u64::from_str_radix(words.next()?.strip_prefix("0x")?, 16).ok()?;
            Some(ClrFrame {
                sp,
                ip,
                line: l.clone(),
            })
        })
        .collect()
}

/// The `cdac ip2md` answers: the first line (`ADDR: NAME` or `ADDR: not managed code`) and
/// the detail line, by address.
fn ip2md_answers(text: &str) -> HashMap<u64, (String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        let Some((addr, rest)) = l.split_once(": ") else {
            continue;
        };
        let Some(addr) = addr
            .strip_prefix("0x")
            .and_then(|a| u64::from_str_radix(a, 16).ok())
        else {
            continue;
        };
        let detail = lines.get(i + 1).map(|d| d.trim().to_string());
        out.insert(addr, (rest.to_string(), detail.unwrap_or_default()));
    }
    out
}

/// Everything on one target: see the top of the file.
fn check(tb: &Testbed, on: On) {
    let variant = tb.variant;
    let what = format!(
        "{} {}",
        variant.name(),
        match on {
            On::Dump(kind) => kind,
            On::Live => "live",
            On::QemuCore(_) => "qemu core",
        }
    );
    let parked = tb.manifest["threads"].as_array().expect("threads");
    let (cli_target, gdb_target): (Vec<OsString>, Vec<OsString>) = match on {
        On::Dump(kind) => {
            let core = tb.dump(kind);
            (
                vec!["--dump".into(), core.clone().into()],
                vec![app(tb).into(), core.into()],
            )
        }
        On::Live => (
            vec!["--pid".into(), tb.pid.to_string().into()],
            vec!["-p".into(), tb.pid.to_string().into()],
        ),
        On::QemuCore(core) => (
            vec!["--dump".into(), core.into()],
            vec![
                "-iex".into(),
                "set sysroot".into(),
                "-iex".into(),
                format!("set solib-search-path {ARM64_SYSROOT_LIB}").into(),
                app(tb).into(),
                core.into(),
            ],
        ),
    };
    let qemu = matches!(on, On::QemuCore(_));
    // Live, the CLI and gdb take turns tracing the testbed.
    let _guard = matches!(on, On::Live).then(tracing_lock);
    let stacks = cli_json(&["stacks"], &cli_target);
    let cli_threads: HashMap<i64, &Vec<Value>> = stacks["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter_map(|t| Some((t["os_id"].as_i64()?, t["frames"].as_array()?)))
        .collect();
    // Addresses to look up: the parked threads' managed frames, and a native one.
    let mut addrs: Vec<u64> = Vec::new();
    let mut native = None;
    for p in parked {
        let tid = p["os_tid"].as_i64().expect("os_tid");
        for f in cli_threads.get(&tid).map(|v| v.as_slice()).unwrap_or(&[]) {
            let ip = hex(&f["ip"]);
            if f["kind"] == "managed" {
                if !addrs.contains(&ip) {
                    addrs.push(ip);
                }
            } else if f["module"] == "libcoreclr.so" {
                native.get_or_insert(ip);
            }
        }
    }
    addrs.extend(native);
    assert!(addrs.len() > 20, "{what}: {} addresses", addrs.len());
    let mut ip2md_args = vec!["ip2md".to_string()];
    ip2md_args.extend(addrs.iter().map(|a| format!("{a:#x}")));
    let ip2md_args: Vec<&str> = ip2md_args.iter().map(String::as_str).collect();
    let cli_ip2md = cli_json(&ip2md_args, &cli_target);

    let ext = repo().join("gdb/cdac.py");
    let mut commands = vec![
        echo("plain"),
        "python import time; cdac_t0 = time.time()".to_string(),
        "thread apply all bt".to_string(),
        "python print('@@time %.3f' % (time.time() - cdac_t0))".to_string(),
        echo("cdac"),
        "python cdac_t0 = time.time()".to_string(),
        format!("source {}", ext.display()),
        "thread apply all bt".to_string(),
        "python print('@@time %.3f' % (time.time() - cdac_t0))".to_string(),
        echo("frames"),
        "thread apply all -q python cdac_test_frames()".to_string(),
        echo("clrstack"),
        "thread apply all cdac clrstack".to_string(),
        echo("ip2md"),
    ];
    commands.extend(addrs.iter().map(|a| format!("cdac ip2md {a:#x}")));
    if qemu {
        // Without NT_FILE the extension places the executable too (its `.text` from `info
        // files`), not only the shared libraries.
        commands.push(
            "python print('@@exe-mapped', any(p.endswith('/Cdac.Testbed') for (_, _, _, p) in \
             Target.mappings()))"
                .into(),
        );
    }
    commands.push(echo("end"));
    let program = if qemu { "gdb-multiarch" } else { "gdb" };
    let out = gdb_program(program, &gdb_target, &commands);
    drop(_guard);

    if qemu {
        assert!(
            out.contains("@@exe-mapped True"),
            "{what}: the executable is not mapped"
        );
    }
    let times: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("@@time "))
        .collect();
    let before = per_thread(section(&out, "plain"));
    let after = per_thread(section(&out, "cdac"));
    let frames = gdb_frames(section(&out, "frames"));
    let clrstacks = per_thread(section(&out, "clrstack"));
    assert!(after.len() >= 14, "{what}: {} threads", after.len());
    let mut checked = 0;
    for p in parked {
        let tid = p["os_tid"].as_i64().expect("os_tid");
        let kind = p["kind"].as_str().unwrap_or("?");
        let bt = after
            .get(&tid)
            .unwrap_or_else(|| panic!("{what}: thread {tid} not in bt"));
        let context = format!("{what}, {kind} thread {tid}:\n{}", bt.join("\n"));
        // Our methods, in the order bt lists them: the physical frames the testbed recorded.
        let mut got: Vec<String> = bt
            .iter()
            .filter_map(|f| {
                let short = short_name(f.split(" in ").nth(1)?);
                short.starts_with("Cdac.Testbed.Parked.").then_some(short)
            })
            .collect();
        let mut want: Vec<String> = p["physical_frames"]
            .as_array()
            .expect("physical_frames")
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect();
        if kind == "spin" {
            got.dedup();
            want.dedup();
        }
        assert_eq!(got, want, "{context}");
        // Down to the thread's start (the cross sysroot's libc names neither).
        if !qemu {
            assert!(bt.last().is_some_and(|f| f.contains("clone3")), "{context}");
            assert!(bt.iter().any(|f| f.contains("start_thread")), "{context}");
        }
        // Without the extension gdb has no name for the first managed frame and stops
        // there (or wanders off): none of ours is named.
        let plain = before.get(&tid).expect("thread in plain bt");
        let first_managed = bt
            .iter()
            .find(|f| f.contains("::") && f.contains(" ["))
            .and_then(|f| bt_address(f))
            .unwrap_or_else(|| panic!("no managed frame: {context}"));
        assert!(
            plain
                .iter()
                .any(|f| bt_address(f) == Some(first_managed) && f.ends_with(" in ?? ()")),
            "{what}: plain gdb should show ?? at {first_managed:#x}:\n{}",
            plain.join("\n")
        );
        assert!(
            !plain.iter().any(|f| f.contains("Cdac.Testbed.Parked.")),
            "{what}: gdb named managed frames by itself"
        );
        // The spinning thread moves between the CLI's look and gdb's (live).
        if matches!(on, On::Live) && kind == "spin" {
            checked += 1;
            continue;
        }
        // gdb's frames (pc, sp) are those of cdac's walk: the managed ones and the native
        // ones around them.
        let cli_frames = cli_threads
            .get(&tid)
            .unwrap_or_else(|| panic!("{what}: thread {tid} not in cdac stacks"));
        let cli_pairs: Vec<(u64, u64)> = cli_frames
            .iter()
            .map(|f| (hex(&f["ip"]), hex(&f["sp"])))
            .collect();
        assert_eq!(
            frames.get(&tid),
            Some(&cli_pairs),
            "{context}\ncdac stacks: {cli_pairs:x?}"
        );
        // `cdac clrstack` is `cdac stacks`: the same frames, names, IL offsets and lines.
        let clr = clrstack_frames(clrstacks.get(&tid).expect("clrstack of the thread"));
        assert_eq!(clr.len(), cli_frames.len(), "{what} {kind}: clrstack");
        for (g, c) in clr.iter().zip(cli_frames.iter()) {
            assert_eq!((g.ip, g.sp), (hex(&c["ip"]), hex(&c["sp"])), "{}", g.line);
            if c["kind"] == "managed" {
                let name = c["name"].as_str().expect("name");
                assert!(g.line.contains(name), "{what}: {} vs {name}", g.line);
                if let Some(il) = c["il_offset"].as_u64() {
                    assert!(g.line.contains(&format!(" [IL_{il:04x}]")), "{}", g.line);
                }
                match c["source"]["file"].as_str() {
                    Some(file) => assert!(
                        g.line
                            .ends_with(&format!(" at {file}:{}", c["source"]["line"])),
                        "{what}: {} vs {}",
                        g.line,
                        c["source"]
                    ),
                    None => assert!(!g.line.contains(" at /"), "{}", g.line),
                }
            } else {
                assert!(g.line.contains("(native)"), "{}", g.line);
            }
        }
        checked += 1;
    }
    assert_eq!(checked, parked.len());
    // `cdac ip2md` answers as `cdac ip2md`.
    let answers = ip2md_answers(section(&out, "ip2md"));
    for c in cli_ip2md.as_array().expect("ip2md array") {
        let addr = hex(&c["address"]);
        let (head, detail) = answers
            .get(&addr)
            .unwrap_or_else(|| panic!("{what}: no answer for {addr:#x}"));
        if c.get("error").is_some() {
            assert_eq!(head, "not managed code", "{what}: {addr:#x}");
            continue;
        }
        assert_eq!(head, c["name"].as_str().expect("name"), "{what}");
        let want = format!(
            "MethodDesc {:#x}, start {:#x} + {:#x}, size {:#x}, {}{}",
            hex(&c["method_desc"]),
            hex(&c["start"]),
            c["relative_offset"].as_u64().expect("offset"),
            c["size"].as_u64().expect("size"),
            c["jit_type"].as_str().expect("jit_type"),
            if c["is_funclet"] == true {
                ", funclet"
            } else {
                ""
            }
        );
        assert_eq!(detail, &want, "{what}: {addr:#x}");
    }
    eprintln!(
        "{what}: thread apply all bt {} s without the extension, {} s with it ({} threads, {checked} \
         parked threads and {} addresses checked)",
        times.first().unwrap_or(&"?"),
        times.get(1).unwrap_or(&"?"),
        after.len(),
        addrs.len()
    );
}

#[test]
fn net10_gcore() {
    check(testbed_of(Variant::Net10), On::Dump("gcore"));
}

#[test]
fn net10_live() {
    check(testbed_of(Variant::Net10), On::Live);
}

#[test]
fn net9_full_dump() {
    check(testbed_of(Variant::Net9), On::Dump("full"));
}

#[test]
fn net9_gcore() {
    check(testbed_of(Variant::Net9), On::Dump("gcore"));
}

#[test]
fn net8_full_dump() {
    check(testbed_of(Variant::Net8), On::Dump("full"));
}

#[test]
fn net8_gcore() {
    check(testbed_of(Variant::Net8), On::Dump("gcore"));
}

/// gdb-multiarch on qemu's core of the .NET 10.0.15 linux-arm64 testbed: the extension
/// finds the libraries' mappings from gdb's shared-library list (the core has no NT_FILE
/// note) and unwinds and names the managed frames with the arm64 C ABI.
#[test]
fn net10_arm64_qemu_core() {
    let _qemu = common::qemu_lock();
    let tb = common::start_testbed(Variant::Net10Arm64, &[]);
    let core = tb.qemu_core();
    check(&tb, On::QemuCore(&core));
}

/// `pe` text of one exception (and its inner ones) checked against `cdac analyze`'s JSON:
/// type and message, HResult, each captured frame with its file:line, in order.
fn assert_exception_text(text: &str, e: &Value) {
    let mut at = 0;
    let mut next = Some(e);
    while let Some(e) = next.filter(|e| !e.is_null()) {
        let mut expect = vec![
            format!(
                "{}: {}",
                e["type"].as_str().expect("type"),
                e["message"].as_str().expect("message")
            ),
            format!("HResult {}", e["hresult"].as_str().expect("hresult")),
        ];
        for f in e["stack_trace"].as_array().expect("stack_trace") {
            expect.push(format!("at {}", f["name"].as_str().expect("name")));
            if let Some(file) = f["source"]["file"].as_str() {
                expect.push(format!(" in {file}:{}", f["source"]["line"]));
            }
        }
        for piece in expect {
            let found = text[at..]
                .find(&piece)
                .unwrap_or_else(|| panic!("{piece:?} (in order) in:\n{text}"));
            at += found + piece.len();
        }
        next = e.get("inner");
    }
}

#[test]
fn pe_prints_the_crash_exception_as_analyze_does() {
    let (m, dump) = common::crash_dump(Variant::Net10);
    let exe = testbed_exe(Variant::Net10);
    let crash = &m["crash"];
    let tid = crash["os_tid"].as_i64().expect("os_tid");
    let analyzed = cli_json(
        &["analyze"],
        &["--dump".into(), dump.clone().into_os_string()],
    );
    let x = analyzed["exceptions"]
        .as_array()
        .expect("exceptions")
        .iter()
        .find(|x| x["thread"] == tid)
        .expect("the crashing thread's exception");
    let e = &x["exception"];
    let object = hex(&e["address"]);
    let inner = hex(&e["inner"]["address"]);
    let out = gdb(
        &[exe.into_os_string(), dump.clone().into_os_string()],
        &[
            format!("source {}", repo().join("gdb/cdac.py").display()),
            format!(
                "python gdb.execute('thread %d' % [t.num for t in gdb.selected_inferior().threads() \
                 if t.ptid[1] == {tid}][0])"
            ),
            echo("thread"),
            "cdac pe".to_string(),
            echo("object"),
            format!("cdac pe {object:#x}"),
            echo("inner"),
            format!("cdac pe {inner:#x}"),
            echo("none"),
            "thread 1".to_string(),
            "thread apply all -q cdac pe".to_string(),
            echo("end"),
        ],
    );
    let thread = section(&out, "thread");
    assert_eq!(
        thread
            .lines()
            .next()
            .and_then(|l| l.split(": ").next())
            .map(str::trim),
        crash["exception_type"].as_str(),
        "{out}"
    );
    assert_exception_text(thread, e);
    assert!(
        thread.contains(&format!(
            "---> {}",
            crash["inner"]["exception_type"].as_str().unwrap()
        )),
        "{thread}"
    );
    // By address: the same exception, and the inner one on its own.
    assert_exception_text(section(&out, "object"), e);
    let inner_text = section(&out, "inner");
    assert_exception_text(inner_text, &e["inner"]);
    assert!(
        !inner_text.contains(crash["message"].as_str().unwrap()),
        "{inner_text}"
    );
    // Threads with no exception say so.
    assert!(
        section(&out, "none").contains("no managed exception on thread"),
        "{out}"
    );
    let _ = std::fs::remove_file(&dump);
}

/// MethodTable → (count, total size).
type HeapRows = HashMap<u64, (u64, u64)>;

/// The rows of a `dumpheap`-style table, and the total (objects, bytes).
fn dumpheap_rows(text: &str) -> (HeapRows, Option<(u64, u64)>) {
    let mut rows = HashMap::new();
    let mut total = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() == Some(&"Total") && f.len() >= 4 {
            total = Some((f[1].parse().expect("count"), f[3].parse().expect("bytes")));
        } else if f.len() >= 4 && f[0].starts_with("0x") {
            let mt = u64::from_str_radix(&f[0][2..], 16).expect("MT");
            rows.insert(
                mt,
                (f[1].parse().expect("count"), f[2].parse().expect("size")),
            );
        }
    }
    (rows, total)
}

/// `cdac dumpheap -stat` and `cdac gchandles -stat` in gdb print what the CLI's `heap` and
/// `handles` print on the same dump (memory read through gdb).
#[test]
fn dumpheap_and_gchandles_equal_the_cli() {
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let target: Vec<OsString> = vec!["--dump".into(), dump.clone().into_os_string()];
    let stat = cli_json(&["heap"], &target);
    let handles = cli_json(&["handles", "--stat"], &target);
    let out = gdb(
        &[
            testbed_exe(Variant::Net10).into_os_string(),
            dump.into_os_string(),
        ],
        &[
            format!("source {}", repo().join("gdb/cdac.py").display()),
            echo("dumpheap"),
            "cdac dumpheap -stat".to_string(),
            echo("strings"),
            "cdac dumpheap -stat -type System.String".to_string(),
            echo("gchandles"),
            "cdac gchandles -stat".to_string(),
            echo("end"),
        ],
    );
    let (rows, total) = dumpheap_rows(section(&out, "dumpheap"));
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
    assert_eq!(rows, cli, "{out}");
    assert_eq!(
        total,
        Some((
            stat["objects"].as_u64().unwrap(),
            stat["total_size"].as_u64().unwrap()
        ))
    );
    let strings = section(&out, "strings");
    assert!(
        strings
            .lines()
            .all(|l| l.starts_with("MT") || l.starts_with("Total") || l.contains("System.String")),
        "{strings}"
    );
    let gc = section(&out, "gchandles");
    let strong = handles["counts"]["strong"]
        .as_u64()
        .expect("strong handles");
    assert!(gc.contains(&format!("{strong:>8} Strong")), "{gc}");
    let all: u64 = handles["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(gc.contains(&format!("{all:>8} handles")), "{gc}");
}

/// `cdac dumpobj` and `cdac gcroot` in gdb on the testbed's `FieldShapes` object print the
/// fields and values the CLI's `obj` prints and the path its `gcroot` finds (memory read
/// through gdb).
#[test]
fn dumpobj_and_gcroot_equal_the_cli() {
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
    let out = gdb(
        &[
            testbed_exe(Variant::Net10).into_os_string(),
            dump.into_os_string(),
        ],
        &[
            format!("source {}", repo().join("gdb/cdac.py").display()),
            echo("dumpobj"),
            format!("cdac dumpobj {address}"),
            echo("gcroot"),
            format!("cdac gcroot {address}"),
            echo("end"),
        ],
    );
    let fields = section(&out, "dumpobj");
    for f in obj["fields"].as_array().expect("fields") {
        let name = f["name"].as_str().expect("name");
        let value = &f["value"];
        let shown = match value["kind"].as_str() {
            Some("int") | Some("u_int") => value["value"].to_string(),
            Some("reference") => value["address"].as_str().unwrap_or("null").to_string(),
            _ => continue,
        };
        let line = fields
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{fields}"));
        assert!(
            line.contains(&format!("{:#x}", f["offset"].as_u64().expect("offset")))
                && line.split_whitespace().nth(3) == Some(shown.as_str()),
            "{name}: {line} (CLI {shown})"
        );
    }
    let path = section(&out, "gcroot");
    let root_handle = root["root"]["address"].as_str().expect("root");
    assert!(
        path.lines()
            .next()
            .is_some_and(|l| l.ends_with(root_handle)),
        "{path}"
    );
    for step in root["path"].as_array().expect("path") {
        let a = step["address"].as_str().expect("address");
        assert!(path.contains(&format!("-> {a} ")), "{a}: {path}");
    }
}

/// `cdac syncblk` and `cdac dumpasync` in gdb list the locks the CLI's `locks --no-stacks`
/// lists (same objects, owners, recursion) and the async chains its `async` finds (same
/// objects in the same order, each async method named and at its await), on the same dump
/// (memory read through gdb).
#[test]
fn syncblk_and_dumpasync_equal_the_cli() {
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let target: Vec<OsString> = vec!["--dump".into(), dump.clone().into_os_string()];
    let locks = cli_json(&["locks", "--no-stacks"], &target);
    let chains = cli_json(&["async"], &target);
    let out = gdb(
        &[
            testbed_exe(Variant::Net10).into_os_string(),
            dump.into_os_string(),
        ],
        &[
            format!("source {}", repo().join("gdb/cdac.py").display()),
            echo("syncblk"),
            "cdac syncblk".to_string(),
            echo("dumpasync"),
            "cdac dumpasync".to_string(),
            echo("end"),
        ],
    );
    let syncblk = section(&out, "syncblk");
    let cli_locks = locks["locks"].as_array().expect("locks");
    assert!(!cli_locks.is_empty(), "{locks}");
    for l in cli_locks {
        let object = format!("{:#x}", hex(&l["object"]));
        let row = syncblk
            .lines()
            .find(|r| r.split_whitespace().next() == Some(object.as_str()))
            .unwrap_or_else(|| panic!("no row for {object} in:\n{syncblk}"));
        let f: Vec<&str> = row.split_whitespace().collect();
        let owner = l["owner"]["managed_id"]
            .as_u64()
            .map_or("-".to_string(), |m| m.to_string());
        assert_eq!(f[3], owner, "{row}");
        assert_eq!(f[5], l["times_entered"].to_string(), "{row}");
        assert_eq!(f[6], l["waiters_counted"].to_string(), "{row}");
        assert!(row.ends_with(l["type_name"].as_str().unwrap()), "{row}");
    }
    assert!(
        syncblk.contains(&format!("{} locks", cli_locks.len())),
        "{syncblk}"
    );
    let dumpasync = section(&out, "dumpasync");
    let rows: Vec<&str> = dumpasync
        .lines()
        .filter(|r| r.trim_start().starts_with("0x"))
        .collect();
    let frames: Vec<&Value> = chains["chains"]
        .as_array()
        .expect("chains")
        .iter()
        .flat_map(|c| c["frames"].as_array().unwrap())
        .collect();
    assert_eq!(rows.len(), frames.len(), "{dumpasync}");
    for (row, f) in rows.iter().zip(&frames) {
        let object = format!("{:#x}", hex(&f["object"]));
        assert!(row.trim_start().starts_with(&object), "{row} / {f}");
        match f["method"].as_str() {
            Some(m) => assert!(
                row.ends_with(&format!("({}) {m}", f["state"])),
                "{row} / {f}"
            ),
            None => assert!(row.ends_with(f["type_name"].as_str().unwrap()), "{row}"),
        }
    }
}
