//! The gdb extension (`gdb/cdac.py`, libcdac.so through ctypes, memory through gdb) on a
//! gcore dump of the .NET 10 testbed, in the real gdb: `bt` of every parked thread walks
//! through its managed frames, named in order, down to `start_thread`; without the
//! extension gdb shows `??` there; `cdac ip2md` and `cdac clrstack` answer as the library
//! does.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use cdac_core::contracts::execution_manager::execution_manager;
use cdac_core::names::MethodNamer;
use cdac_core::runtime::{OpenOptions, Runtime};
use common::{perf_map, repo, testbed_of, Variant};

/// libcdac.so next to this test (`deps/`) or in the profile directory, the newer.
fn lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let deps = exe.parent().expect("deps");
    [deps, deps.parent().expect("profile")]
        .into_iter()
        .map(|d| d.join("libcdac.so"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .expect("libcdac.so")
}

/// gdb in batch mode on `exe` and `core`, with or without the extension; its stdout.
fn gdb(exe: &Path, core: &Path, extension: bool, commands: &[&str]) -> String {
    let mut c = Command::new("gdb");
    c.args(["-batch", "-nx", "-ex", "set pagination off"]);
    if extension {
        c.arg("-ex")
            .arg(format!("source {}", repo().join("gdb/cdac.py").display()));
    }
    for cmd in commands {
        c.args(["-ex", cmd]);
    }
    let out = c
        .arg(exe)
        .arg(core)
        .env("CDAC_LIB", lib())
        .output()
        .expect("run gdb (Debian package gdb)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(
        !errors.contains("Python Exception") && !errors.contains("Traceback"),
        "the extension failed: {errors}"
    );
    text
}

/// The `bt` lines of each thread in `thread apply all bt` output, by LWP.
fn backtraces(text: &str) -> Vec<(i64, Vec<String>)> {
    let mut out: Vec<(i64, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if line.starts_with("Thread ") {
            if let Some(lwp) = line
                .split("(LWP ")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .and_then(|n| n.parse().ok())
            {
                out.push((lwp, Vec::new()));
            }
        } else if line.starts_with('#') {
            if let Some((_, frames)) = out.last_mut() {
                frames.push(line.to_string());
            }
        }
    }
    out
}

#[test]
fn bt_names_managed_frames_between_the_native_ones() {
    let tb = testbed_of(Variant::Net10);
    let core = tb.dump("gcore");
    let exe = Path::new(tb.manifest["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed");
    let t0 = Instant::now();
    let without = gdb(&exe, &core, false, &["thread apply all bt"]);
    let plain = t0.elapsed();
    let t0 = Instant::now();
    let with = gdb(&exe, &core, true, &["thread apply all bt"]);
    let extended = t0.elapsed();
    let (before, after) = (backtraces(&without), backtraces(&with));
    assert!(after.len() >= 14, "{} threads", after.len());
    let mut checked = 0;
    for p in tb.manifest["threads"].as_array().expect("threads") {
        let tid = p["os_tid"].as_i64().expect("os_tid");
        let kind = p["kind"].as_str().unwrap_or("?");
        let frames = &after
            .iter()
            .find(|(t, _)| *t == tid)
            .expect("thread in bt")
            .1;
        // Our methods, in the order bt lists them: the physical frames the testbed recorded.
        let ours: Vec<String> = frames
            .iter()
            .filter_map(|f| {
                let name = f.split(" in ").nth(1)?;
                let head = name.split('(').next()?;
                let short = head.rsplit(' ').next()?.to_string();
                short.starts_with("Cdac.Testbed.Parked.").then_some(short)
            })
            .collect();
        let mut want: Vec<String> = p["physical_frames"]
            .as_array()
            .expect("physical_frames")
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect();
        let mut got = ours;
        if kind == "spin" {
            got.dedup();
            want.dedup();
        }
        assert_eq!(got, want, "{kind} thread {tid}:\n{}", frames.join("\n"));
        // Native frames below the managed ones: the thread's start.
        assert!(
            frames.last().is_some_and(|f| f.contains("clone3")),
            "{kind}: {}",
            frames.join("\n")
        );
        assert!(frames.iter().any(|f| f.contains("start_thread")), "{kind}");
        // Without the extension gdb cannot get there.
        let plain_frames = &before.iter().find(|(t, _)| *t == tid).expect("thread").1;
        assert!(
            !plain_frames
                .iter()
                .any(|f| f.contains("Cdac.Testbed.Parked.")),
            "{kind}: gdb named managed frames by itself"
        );
        checked += 1;
    }
    assert!(checked >= 8);
    eprintln!(
        "thread apply all bt on the gcore dump: {:.0} ms without the extension, {:.0} ms with it \
         ({} threads, {checked} parked threads checked)",
        plain.as_secs_f64() * 1e3,
        extended.as_secs_f64() * 1e3,
        after.len()
    );
}

#[test]
fn ip2md_and_clrstack_commands_answer_as_the_library() {
    let tb = testbed_of(Variant::Net10);
    let core = tb.dump("gcore");
    let exe = Path::new(tb.manifest["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed");
    let rt = Runtime::open_dump(&core, &OpenOptions::default()).expect("open");
    let em = execution_manager(rt.target(), rt.descriptor()).expect("em");
    let mut namer = MethodNamer::for_runtime(&rt);
    let (start, size, _) = perf_map(&tb.perf_map_for(Some("gcore")))
        .into_iter()
        .find(|(_, _, n)| n.contains("Sleeper::SleepMiddle("))
        .expect("SleepMiddle");
    let ip = start + size / 2;
    let block = em.code_block(ip).expect("lookup").expect("managed");
    let name = namer.name(block.method_desc);
    let sleeper = tb.manifest["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["kind"] == "sleep")
        .expect("sleep thread")["os_tid"]
        .as_i64()
        .expect("tid");
    let out = gdb(
        &exe,
        &core,
        true,
        &[
            &format!("cdac ip2md {ip:#x}"),
            &format!("thread find LWP {sleeper}"),
            "cdac modules",
        ],
    );
    assert!(out.contains(&name), "{out}");
    assert!(
        out.contains(&format!("MethodDesc {:#x}", block.method_desc)),
        "{out}"
    );
    assert!(out.contains("Cdac.Testbed.dll"), "{out}");
    // clrstack of the sleeping thread: gdb's thread number from `thread find`.
    let number = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("Thread ")?
                .split(' ')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .expect("thread number");
    let stack = gdb(
        &exe,
        &core,
        true,
        &[&format!("thread {number}"), "cdac clrstack"],
    );
    let order: Vec<usize> = ["SleepInner", "SleepMiddle", "SleepStart"]
        .iter()
        .map(|m| {
            stack
                .find(&format!("Sleeper::{m}("))
                .unwrap_or_else(|| panic!("{m}: {stack}"))
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{stack}");
    assert!(stack.contains("ParkedThreads.cs:"), "{stack}");
}
