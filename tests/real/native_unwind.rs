//! Native unwinding and symbols on dumps of the real .NET 10 testbed, against gdb: for
//! every thread of a `gcore` and a `createdump --full` dump, the CFI walk from the
//! thread's `NT_PRSTATUS` registers names the same native functions, in the same order, as
//! `gdb -batch -ex 'thread apply all bt'` does before its first `??` frame. Signal frames:
//! a C program parked in a signal handler, on x64 (glibc's `__restore_rt`, against gdb)
//! and on linux-arm64 under qemu-user (qemu's `rt_sigreturn` trampoline, which gdb-multiarch
//! does not step through: against the program's own symbols).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdac::memory::core_dump::CoreDump;
use cdac::memory::{DataLayout, Target};
use cdac::symbols::ElfSymbols;
use cdac::unwind::native::{NativeFrame, NativeUnwinder};
use cdac::unwind::UnwindError;
use common::{testbed_of, Variant};

/// How a walk ended.
#[derive(Debug)]
enum End {
    /// The CFI said the last frame is the outermost one.
    Outermost,
    /// The next frame is outside every ELF module (managed code).
    LeftModules(u64),
    /// A step failed.
    Error(UnwindError),
    /// The frame limit.
    TooDeep,
}

struct Walk {
    /// `(ip, name, aliases)` of each native frame, innermost first.
    frames: Vec<(u64, String, Vec<String>)>,
    end: End,
    steps: usize,
}

fn walk(target: &Target, unw: &NativeUnwinder, syms: &ElfSymbols, frame: NativeFrame) -> Walk {
    let mut frame = frame;
    let mut frames = Vec::new();
    let mut steps = 0;
    let end = loop {
        if !unw.is_in_module(frame.ctx.rip) {
            break End::LeftModules(frame.ctx.rip);
        }
        let lookup = frame.lookup_ip();
        let sym = syms.lookup(lookup).expect("in a module");
        frames.push((
            frame.ctx.rip,
            sym.symbol.clone().unwrap_or_else(|| sym.to_string()),
            syms.aliases(lookup),
        ));
        if frames.len() > 256 {
            break End::TooDeep;
        }
        steps += 1;
        match unw.step_frame(&frame, target) {
            Ok(Some(next)) => {
                // An exact caller means this frame was a signal trampoline, whose CFI
                // starts a byte early (glibc's `nop` before `__restore_rt`): it is named
                // at its rip.
                if next.ip_is_exact {
                    if let (Some(last), Some(sym)) = (frames.last_mut(), syms.lookup(frame.ctx.rip))
                    {
                        last.1 = sym.symbol.clone().unwrap_or_else(|| sym.to_string());
                        last.2 = syms.aliases(frame.ctx.rip);
                    }
                }
                frame = next
            }
            Ok(None) => break End::Outermost,
            Err(e) => break End::Error(e),
        }
    };
    Walk { frames, end, steps }
}

/// gdb's frame types (`gdb.NORMAL_FRAME` ...).
const GDB_NORMAL: u32 = 0;
const GDB_INLINE: u32 = 2;
const GDB_TAILCALL: u32 = 3;
const GDB_SIGTRAMP: u32 = 4;

/// Prints `F LWP TYPE PC NAME` for the frames of every thread.
const GDB_SCRIPT: &str = r#"
import gdb
for inf in gdb.inferiors():
    for th in inf.threads():
        th.switch()
        f = gdb.newest_frame()
        n = 0
        while f is not None and n < 64:
            print("F %d %d 0x%x %s" % (th.ptid[1], f.type(), f.pc(), f.name()))
            try:
                f = f.older()
            except gdb.error:
                break
            n += 1
"#;

/// One frame gdb shows.
#[derive(Debug, Clone)]
struct GdbFrame {
    kind: u32,
    pc: u64,
    name: Option<String>,
}

/// gdb's physical frames per thread (LWP), up to its first frame outside every ELF
/// module (managed code, where gdb's unwinding loses its way): inlined frames and the
/// tail-call frames gdb rebuilds from DWARF call-site data are left out (they have no
/// frame on the stack), and counted in the second number.
fn gdb_backtraces(
    exe: &Path,
    core: &Path,
    in_module: impl Fn(u64) -> bool,
) -> BTreeMap<i32, (Vec<GdbFrame>, usize)> {
    let script = core.with_extension("gdb-bt.py");
    std::fs::write(&script, GDB_SCRIPT).expect("write gdb script");
    let out = Command::new("gdb")
        .env_remove("DEBUGINFOD_URLS")
        .args(["-nx", "-batch", "-ex", "set debuginfod enabled off"])
        .args(["-ex", "set backtrace past-main on", "-x"])
        .arg(&script)
        .arg(exe)
        .arg(core)
        .output()
        .expect("run gdb");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut threads: BTreeMap<i32, (Vec<GdbFrame>, usize, bool)> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("F ") else {
            continue;
        };
        let mut it = rest.splitn(4, ' ');
        let (Some(tid), Some(kind), Some(pc), Some(name)) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            panic!("gdb line {line}");
        };
        let tid: i32 = tid.parse().expect("lwp");
        let kind: u32 = kind.parse().expect("frame type");
        let pc = u64::from_str_radix(pc.trim_start_matches("0x"), 16).expect("pc");
        let name = (name != "None").then(|| name.to_string());
        let entry = threads.entry(tid).or_default();
        if entry.2 {
            continue;
        }
        match kind {
            GDB_INLINE | GDB_TAILCALL => entry.1 += 1,
            GDB_NORMAL | GDB_SIGTRAMP if !in_module(pc) => entry.2 = true,
            GDB_NORMAL | GDB_SIGTRAMP => entry.0.push(GdbFrame { kind, pc, name }),
            other => panic!("gdb frame type {other}"),
        }
    }
    assert!(!threads.is_empty(), "gdb printed no frames:\n{text}");
    threads
        .into_iter()
        .map(|(t, (f, n, _))| (t, (f, n)))
        .collect()
}

/// A name compared without its parameter list (gdb prints DWARF names bare, minimal
/// symbols with parameters).
fn bare(name: &str) -> &str {
    match name.find('(') {
        Some(i) if !name.starts_with("operator") => &name[..i],
        _ => name,
    }
}

fn same_function(gdb: &str, ours: &str, aliases: &[String]) -> bool {
    let g = bare(gdb);
    std::iter::once(ours)
        .chain(aliases.iter().map(String::as_str))
        .any(|n| bare(n) == g)
}

/// What a comparison with gdb found.
struct Compared {
    threads: usize,
    matched: usize,
    gdb_frames: usize,
    named: usize,
    report: String,
    /// Our walks, by thread.
    walks: BTreeMap<i32, Walk>,
}

fn check_dump(kind: &str) {
    let tb = testbed_of(Variant::Net10);
    let core = tb.dump(kind);
    let exe = common::testbed_exe(Variant::Net10);
    let c = compare_with_gdb(&exe, &core, kind);
    assert!(c.threads >= 10, "{} threads", c.threads);
    assert!(
        c.named >= c.threads,
        "most threads have a named frame: {}",
        c.named
    );
    assert!(c.matched > 100, "{}", c.report);
    // A few threads end in managed code, the others at clone3 (the outermost frame).
    let managed = c
        .walks
        .values()
        .filter(|w| matches!(w.end, End::LeftModules(_)))
        .count();
    let outermost = c
        .walks
        .values()
        .filter(|w| matches!(w.end, End::Outermost))
        .count();
    assert!(
        managed >= 5 && outermost >= 5,
        "{managed} {outermost}\n{}",
        c.report
    );
    // The parked threads of the manifest: blocked in libc under managed code.
    let parked = tb.manifest["threads"].as_array().expect("threads");
    assert_eq!(parked.len(), 8);
    for t in parked {
        let tid = t["os_tid"].as_i64().expect("os_tid") as i32;
        let w = &c.walks[&tid];
        let kind = t["kind"].as_str().expect("kind");
        assert!(matches!(w.end, End::LeftModules(_)), "{kind}: {:?}", w.end);
        let first = w.frames.first().map(|f| (f.1.as_str(), &f.2));
        match t["syscall"].as_str() {
            // futex(2): the runtime's wait on a pthread condition, called from managed code.
            Some("202") => {
                let (name, _) = first.expect("a native frame");
                assert_eq!(name, "__futex_abstimed_wait_common", "{kind}");
                assert!(w
                    .frames
                    .iter()
                    .any(|f| f.2.iter().any(|a| a.starts_with("pthread_cond"))));
            }
            // read(2) from a P/Invoke inlined into managed code: libc's read is the one
            // native frame.
            Some("0") => {
                assert_eq!(w.frames.len(), 1, "{kind}");
                let (_, aliases) = first.expect("read");
                assert!(aliases.iter().any(|a| a == "read"), "{aliases:?}");
            }
            _ => assert_eq!(kind, "spin"),
        }
    }
    for w in c.walks.values() {
        if matches!(w.end, End::Outermost) {
            let last = w.frames.last().map(|f| f.1.as_str());
            assert!(last.is_some_and(|n| n.contains("clone")), "{last:?}");
        }
    }
}

/// Walks every thread of `core` with our CFI unwinder and compares with gdb's frames.
/// Panics on any difference.
fn compare_with_gdb(exe: &Path, core: &Path, kind: &str) -> Compared {
    let target = Target::new(
        Arc::new(CoreDump::open(core).expect("open core")),
        DataLayout::LE64,
    );
    let unw = NativeUnwinder::new(&target);
    let syms = ElfSymbols::new(&target);
    let threads = target.source().threads().expect("threads");

    let t0 = Instant::now();
    let mut walks = BTreeMap::new();
    for t in &threads {
        let ctx = *t
            .context
            .as_ref()
            .and_then(|c| c.as_x64())
            .expect("NT_PRSTATUS registers");
        walks.insert(
            t.tid,
            walk(&target, &unw, &syms, NativeFrame::innermost(ctx)),
        );
    }
    let walk_time = t0.elapsed();
    // Steps alone, with every module's CFI loaded.
    let t1 = Instant::now();
    for t in &threads {
        let mut frame = NativeFrame::innermost(
            *t.context
                .as_ref()
                .and_then(|c| c.as_x64())
                .expect("registers"),
        );
        while unw.is_in_module(frame.ctx.rip) {
            match unw.step_frame(&frame, &target) {
                Ok(Some(next)) => frame = next,
                _ => break,
            }
        }
    }
    let warm_time = t1.elapsed();
    let gdb = gdb_backtraces(exe, core, |pc| unw.is_in_module(pc));

    let (mut matched, mut gdb_frames, mut steps, mut virtual_frames) = (0, 0, 0, 0);
    let (mut named, mut named_matched) = (0, 0);
    let mut report = String::new();
    let mut mismatched_lengths = 0;
    for (tid, w) in &walks {
        steps += w.steps;
        let (g, skipped) = gdb
            .get(tid)
            .unwrap_or_else(|| panic!("gdb has no thread {tid}"));
        virtual_frames += skipped;
        report.push_str(&format!(
            "thread {tid}: ours {:?} end {:?}\n      gdb {:?}\n",
            w.frames
                .iter()
                .map(|f| format!("{:#x} {}", f.0, f.1))
                .collect::<Vec<_>>(),
            w.end,
            g.iter()
                .map(|f| format!(
                    "{:#x} {}",
                    f.pc,
                    f.name.as_deref().unwrap_or("<signal handler called>")
                ))
                .collect::<Vec<_>>(),
        ));
        gdb_frames += g.len();
        for (i, gf) in g.iter().enumerate() {
            let Some((ip, ours, aliases)) = w.frames.get(i) else {
                report.push_str(&format!("  MISSING #{i}: gdb {gf:?}\n"));
                break;
            };
            // Where gdb names the function (debug info or a symbol covers it), we must
            // name the same one; where it does not (libcoreclr's internal functions have
            // no symbol), the frames must still agree.
            let same = *ip == gf.pc
                && match (&gf.name, gf.kind) {
                    (Some(name), _) => same_function(name, ours, aliases),
                    (None, GDB_SIGTRAMP) => ours.contains("restore_rt"),
                    (None, _) => true,
                };
            if same {
                matched += 1;
                if gf.name.is_some() {
                    named += 1;
                    named_matched += 1;
                }
            } else {
                report.push_str(&format!(
                    "  MISMATCH #{i} {ip:#x}: ours {ours} gdb {gf:?}\n"
                ));
                break;
            }
        }
        // Both walks end at the same place: gdb's last native frame is ours.
        if g.len() < w.frames.len() && !matches!(w.end, End::Outermost) {
            report.push_str(&format!(
                "  EXTRA: ours has {} frames, gdb {}\n",
                w.frames.len(),
                g.len()
            ));
        }
        if g.len() != w.frames.len() {
            mismatched_lengths += 1;
        }
    }
    eprintln!("{report}");
    eprintln!(
        "{kind}: {} threads, {steps} steps: {walk_time:?} with loading modules and symbols, {warm_time:?} warm ({:?}/step); {matched} of {gdb_frames} gdb frames matched ({named_matched} of {named} named ones by name), gdb's {virtual_frames} inlined and tail-call frames left out; {mismatched_lengths} threads of another length",
        walks.len(),
        warm_time / steps.max(1) as u32
    );
    assert_eq!(matched, gdb_frames, "{report}");
    assert_eq!(mismatched_lengths, 0, "{report}");
    assert!(walk_time < Duration::from_secs(10));
    // Every walk ends cleanly: at the outermost frame, or where code leaves the modules.
    for (tid, w) in &walks {
        match &w.end {
            End::Outermost => {}
            End::LeftModules(ip) => assert!(!unw.is_in_module(*ip)),
            End::Error(e) => panic!("thread {tid}: {e}\n{report}"),
            End::TooDeep => panic!("thread {tid}: too deep\n{report}"),
        }
    }
    Compared {
        threads: walks.len(),
        matched,
        gdb_frames,
        named,
        report,
        walks,
    }
}

#[test]
fn gcore_native_frames_match_gdb() {
    check_dump("gcore");
}

#[test]
fn full_dump_native_frames_match_gdb() {
    check_dump("full");
}

/// A C program whose main thread is interrupted by SIGALRM while it spins, and parks in
/// the handler: its stack goes through glibc's `__restore_rt` signal frame.
const SIGNAL_PROGRAM: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile unsigned long counter;

__attribute__((noinline)) void parked_in_handler(void) {
    puts("ready");
    fflush(stdout);
    for (;;) pause();
}

__attribute__((noinline)) void on_alarm(int sig) {
    (void)sig;
    parked_in_handler();
    counter++;
}

__attribute__((noinline)) void spin(void) {
    for (;;) counter++;
}

__attribute__((noinline)) int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(1);
    spin();
    return 0;
}
"#;

#[test]
fn signal_frames_are_unwound_into_the_interrupted_code() {
    let dir = common::scratch("native-unwind-signal");
    let src = dir.join("sig.c");
    let exe = dir.join("sig");
    std::fs::write(&src, SIGNAL_PROGRAM).expect("write C source");
    let status = Command::new("cc")
        .args(["-O2", "-g", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed");
    let mut child = Command::new(&exe)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the signal program");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("read ready");
    assert_eq!(line.trim(), "ready");
    let core = dir.join("sig.core");
    common::gcore(child.id() as i32, &core);
    let _ = child.kill();
    let _ = child.wait();

    let c = compare_with_gdb(&exe, &core, "signal");
    let w = c.walks.values().next().expect("one thread");
    let names: Vec<&str> = w.frames.iter().map(|f| f.1.as_str()).collect();
    let at = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("no {name} in {names:?}"))
    };
    // pause .. parked_in_handler, on_alarm, __restore_rt, spin (the interrupted frame,
    // at an exact instruction), main, then libc's start and _start, the outermost.
    let restore = at("__restore_rt");
    assert_eq!(at("on_alarm") + 1, restore, "{names:?}");
    assert_eq!(at("spin"), restore + 1, "{names:?}");
    assert_eq!(at("main"), restore + 2, "{names:?}");
    assert_eq!(names.last(), Some(&"_start"), "{names:?}");
    assert!(matches!(w.end, End::Outermost), "{:?}", w.end);
    assert_eq!(c.matched, c.gdb_frames);
    assert_eq!(c.matched, names.len(), "gdb sees every frame we do");
}

/// The signal program built for linux-arm64 (clang and Debian's cross binutils and C
/// library), run under qemu-user, and its core written by qemu (SIGQUIT) while the handler
/// is parked: the handler returns to qemu's `rt_sigreturn` trampoline, outside every
/// module, and the walk goes from it through the signal frame into `spin`, at the
/// instruction the signal interrupted, then `main` and the C start-up below it.
#[test]
fn arm64_signal_frames_are_unwound_into_the_interrupted_code() {
    use cdac::unwind::aarch64::signal::is_sigreturn_trampoline;
    use cdac::unwind::aarch64::step_frame_record;
    use cdac::unwind::{Arm64Context, Registers};
    const LIB: &str = "/usr/aarch64-linux-gnu/lib";
    let _qemu = common::qemu_lock();
    let dir = common::scratch("native-unwind-signal-arm64");
    let src = dir.join("sig.c");
    let obj = dir.join("sig.o");
    let exe = dir.join("sig");
    std::fs::write(&src, SIGNAL_PROGRAM).expect("write C source");
    let clang = ["clang-14", "clang"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("clang (scripts/ensure-tools installs clang-14)");
    let status = Command::new(clang)
        .args([
            "--target=aarch64-linux-gnu",
            "-I/usr/aarch64-linux-gnu/include",
        ])
        .args([
            "-O2",
            "-g",
            "-fno-omit-frame-pointer",
            "-fno-optimize-sibling-calls",
        ])
        .args(["-c", "-o"])
        .arg(&obj)
        .arg(&src)
        .status()
        .expect("run clang");
    assert!(status.success(), "clang failed");
    let status = Command::new("aarch64-linux-gnu-ld")
        // Headers in a segment of their own, as toolchains lay programs out by default:
        // qemu's core keeps no executable file-backed page, so the program is found by
        // its header page.
        .args(["-z", "separate-code"])
        .args(["-dynamic-linker", "/lib/ld-linux-aarch64.so.1", "-o"])
        .arg(&exe)
        .args([format!("{LIB}/crt1.o"), format!("{LIB}/crti.o")])
        .arg(&obj)
        .args([format!("-L{LIB}"), "-lc".into(), format!("{LIB}/crtn.o")])
        .status()
        .expect("run aarch64-linux-gnu-ld (binutils-aarch64-linux-gnu)");
    assert!(status.success(), "aarch64-linux-gnu-ld failed");
    let mut child = common::qemu_command(&exe, &dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the signal program under qemu");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("read ready");
    assert_eq!(line.trim(), "ready");
    let status = Command::new("kill")
        .args(["-QUIT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let _ = child.wait();
    let core = common::qemu_core_in(&dir).expect("qemu wrote a core");

    // The core has no NT_FILE note: its images are found from the loader's list, the C
    // libraries under the cross sysroot.
    let opened = CoreDump::open_with_sysroots(&core, &[]).expect("open core");
    let modules: Vec<String> = cdac::memory::MemorySource::mapped_files(&opened)
        .iter()
        .map(|f| f.path.display().to_string())
        .collect();
    assert!(
        modules.iter().any(|p| p.ends_with("/libc.so.6")),
        "{modules:?}"
    );
    let target = Target::new(Arc::new(opened), DataLayout::LE64);
    let unw = NativeUnwinder::new(&target);
    // The program's functions by address, from its symbol table (qemu's core names no
    // file for the main program, and its text has no dynamic symbols).
    let exe_bytes = std::fs::read(&exe).expect("read the program");
    let exe_file = object::File::parse(&*exe_bytes).expect("an ELF file");
    let functions: Vec<(u64, u64, String)> = {
        use object::{Object, ObjectSymbol, SymbolKind};
        exe_file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect()
    };
    let threads = target.source().threads().expect("threads");
    let Some(Registers::Arm64(ctx)) = threads.first().and_then(|t| t.context) else {
        panic!("no arm64 registers in the core");
    };
    let name = |f: &NativeFrame<Arm64Context>| -> String {
        if is_sigreturn_trampoline(&target, f.ctx.pc) {
            return "(rt_sigreturn trampoline)".into();
        }
        let at = f.lookup_ip();
        functions
            .iter()
            .find(|(start, size, _)| (*start..start + size).contains(&at))
            .map(|(_, _, n)| n.clone())
            .unwrap_or_else(|| format!("{:#x}", f.ctx.pc))
    };
    let mut frame = NativeFrame::innermost(ctx);
    let mut names = vec![name(&frame)];
    let mut exact_after_trampoline = None;
    while names.len() < 64 {
        let next = match unw.step_frame_arm64(&frame, &target) {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(UnwindError::NoUnwindInfo { .. }) => {
                match step_frame_record(&frame.ctx, &target).expect("frame record") {
                    Some(ctx) => NativeFrame {
                        ctx,
                        ip_is_exact: false,
                    },
                    None => break,
                }
            }
            Err(e) => panic!("after {names:?}: {e}"),
        };
        if is_sigreturn_trampoline(&target, frame.ctx.pc) {
            exact_after_trampoline = Some(next.ip_is_exact);
        }
        frame = next;
        names.push(name(&frame));
    }
    let at = |n: &str| {
        names
            .iter()
            .position(|x| x == n)
            .unwrap_or_else(|| panic!("no {n} in {names:?}"))
    };
    let trampoline = at("(rt_sigreturn trampoline)");
    assert_eq!(at("parked_in_handler") + 1, at("on_alarm"), "{names:?}");
    assert_eq!(at("on_alarm") + 1, trampoline, "{names:?}");
    assert_eq!(at("spin"), trampoline + 1, "{names:?}");
    assert_eq!(at("main"), trampoline + 2, "{names:?}");
    assert_eq!(
        exact_after_trampoline,
        Some(true),
        "the interrupted pc is exact"
    );
    assert!(
        names.len() > trampoline + 3,
        "C start-up below main: {names:?}"
    );
    eprintln!("arm64 signal program under qemu: {names:?}");
}

/// The memory of another source with every mapped file renamed to a path that does not
/// exist: modules must then be read from the target's memory.
struct FilesElsewhere {
    inner: Arc<dyn cdac::memory::MemorySource>,
    files: Vec<cdac::memory::MappedFile>,
}

impl cdac::memory::MemorySource for FilesElsewhere {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> Result<(), cdac::memory::ReadError> {
        self.inner.read_exact(addr, buf)
    }
    fn mapped_files(&self) -> &[cdac::memory::MappedFile] {
        &self.files
    }
    fn threads(&self) -> Result<Vec<cdac::memory::ThreadInfo>, cdac::memory::ReadError> {
        self.inner.threads()
    }
    fn kind(&self) -> cdac::memory::TargetKind {
        self.inner.kind()
    }
    fn native_layout(&self) -> Option<DataLayout> {
        self.inner.native_layout()
    }
}

#[test]
fn modules_not_on_disk_are_read_from_memory() {
    let core = testbed_of(Variant::Net10).dump("full");
    let source: Arc<dyn cdac::memory::MemorySource> =
        Arc::new(CoreDump::open(&core).expect("open core"));
    let on_disk = Target::new(source.clone(), DataLayout::LE64);
    let files = source
        .mapped_files()
        .iter()
        .map(|f| {
            let mut f = f.clone();
            let name = f
                .path
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default();
            f.path = Path::new("/nonexistent/cdac-test").join(name);
            f
        })
        .collect();
    let in_memory = Target::new(
        Arc::new(FilesElsewhere {
            inner: source,
            files,
        }),
        DataLayout::LE64,
    );
    let (unw_disk, syms_disk) = (NativeUnwinder::new(&on_disk), ElfSymbols::new(&on_disk));
    let (unw_mem, syms_mem) = (NativeUnwinder::new(&in_memory), ElfSymbols::new(&in_memory));
    let (mut frames, mut named_from_memory) = (0, 0);
    for t in on_disk.source().threads().expect("threads") {
        let ctx = *t
            .context
            .as_ref()
            .and_then(|c| c.as_x64())
            .expect("registers");
        let a = walk(&on_disk, &unw_disk, &syms_disk, NativeFrame::innermost(ctx));
        let b = walk(&in_memory, &unw_mem, &syms_mem, NativeFrame::innermost(ctx));
        let ips = |w: &Walk| w.frames.iter().map(|f| f.0).collect::<Vec<_>>();
        assert_eq!(
            ips(&a),
            ips(&b),
            "thread {}: the same frames from memory",
            t.tid
        );
        frames += a.frames.len();
        // The dynamic symbols in memory name what they cover: the same function as the
        // file's full symbol table (one of its aliases).
        for (fa, fb) in a.frames.iter().zip(&b.frames) {
            if let Some(sym) = syms_mem.lookup(fb.0 - 1).and_then(|s| s.symbol) {
                assert!(fa.2.contains(&sym), "{sym} not among {:?}", fa.2);
                named_from_memory += 1;
            }
        }
    }
    eprintln!("{frames} frames the same from memory; {named_from_memory} named by dynamic symbols in memory");
    assert!(frames > 100);
    assert!(named_from_memory >= 10, "{named_from_memory}");
}
