//! Fixtures shared by the integration tests: the synthetic .NET 10-style runtime (built
//! with gcc) and the real-runtime testbed (`testbed/`, C#, built for .NET 10, 9 and 8 by
//! scripts/testbed-setup). Both are started as children of the test process and die with
//! it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The repository root (the workspace's member crates, such as `capi/`, share these
/// fixtures: their manifest directory is one below it).
pub fn repo() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if dir.join("scripts").is_dir() {
        return dir;
    }
    dir.parent().map(Path::to_path_buf).unwrap_or(dir)
}

/// Parses "0x…" into a number.
pub fn hex(v: &serde_json::Value) -> u64 {
    let s = v.as_str().expect("hex string");
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
}

/// A scratch directory under target/ for this test process. Directories that earlier,
/// finished test processes left (dumps are large) are removed.
pub fn scratch(name: &str) -> PathBuf {
    let root = repo().join("target").join("test-scratch");
    if let Ok(entries) = std::fs::read_dir(&root) {
        for e in entries.flatten() {
            let file_name = e.file_name();
            let stale = file_name
                .to_str()
                .and_then(|n| n.rsplit('-').next()?.parse::<u32>().ok())
                .is_some_and(|pid| {
                    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
                });
            if stale {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let dir = root.join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

// ---------------------------------------------------------------- synthetic runtime

/// Builds the synthetic runtime once per test process; returns its directory.
pub fn synthetic_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = repo().join("target").join("synthetic");
        let status = Command::new(repo().join("scripts/build-synthetic"))
            .arg(&out)
            .status()
            .expect("run scripts/build-synthetic");
        assert!(status.success(), "building the synthetic runtime failed");
        out
    })
    .clone()
}

/// A running synthetic host and the addresses it reported.
pub struct SyntheticHost {
    pub child: Child,
    pub pid: i32,
    pub report: serde_json::Value,
}

impl SyntheticHost {
    /// Starts the host from `dir` (which holds synthetic-host and libcoreclr.so), with
    /// extra arguments; waits for its report line.
    pub fn start_in(dir: &Path, args: &[&str]) -> SyntheticHost {
        Self::start_exe(&dir.join("synthetic-host"), args)
    }

    /// Starts a host executable (synthetic-host or singlefile-host).
    pub fn start_exe(exe: &Path, args: &[&str]) -> SyntheticHost {
        let spawn = || {
            Command::new(exe)
                .args(["--exit-on-stdin-eof", "--max-seconds", "600"])
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
        };
        // A test that has just copied the executable can race another test's fork, which
        // holds the copy's write descriptor until its exec: ETXTBSY for a moment.
        let mut attempt = 0;
        let mut child = loop {
            match spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && attempt < 100 => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other.expect("start synthetic-host"),
            }
        };
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("report line");
        let report: serde_json::Value = serde_json::from_str(&line).expect("report JSON");
        let pid = report["pid"].as_i64().expect("pid") as i32;
        SyntheticHost { child, pid, report }
    }

    /// Starts the host from the shared build.
    pub fn start(args: &[&str]) -> SyntheticHost {
        Self::start_in(&synthetic_dir(), args)
    }

    /// An address from the report's "globals" or "objects".
    pub fn addr(&self, section: &str, name: &str) -> u64 {
        hex(&self.report[section][name])
    }

    /// A top-level address of the report ("descriptor", "sub_descriptor").
    pub fn top(&self, name: &str) -> u64 {
        hex(&self.report[name])
    }

    /// Writes a gcore dump of the host to `path`.
    pub fn gcore(&self, path: &Path) {
        gcore(self.pid, path);
    }
}

impl Drop for SyntheticHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Dumps process `pid` with gdb's gcore into `path`.
pub fn gcore(pid: i32, path: &Path) {
    let prefix = path.with_extension("gcore-tmp");
    let out = Command::new("gcore")
        .arg("-o")
        .arg(&prefix)
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run gcore (from gdb)");
    assert!(out.success(), "gcore failed");
    let written = PathBuf::from(format!("{}.{pid}", prefix.display()));
    std::fs::rename(&written, path).expect("rename gcore output");
}

// ---------------------------------------------------------------- real-runtime testbed

/// A build of the C# testbed (`testbed/`, built by `scripts/testbed-setup`): which runtime
/// it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// .NET 11.0.0 (a net10.0 build on the 11.0.0 runtime pack).
    Net11,
    /// .NET 10.0.14.
    Net10,
    /// .NET 9.0.22.
    Net9,
    /// .NET 8.0.33.
    Net8,
    /// .NET 8.0.0, the first 8.0 build.
    Net8_0_0,
    /// .NET 10.0.14 with the ReadyToRun library and part of the framework in one composite
    /// image.
    Net10Composite,
    /// The newest .NET 10 patch served here (10.0.15): no shipped file was made from it.
    Net10Latest,
    /// The newest .NET 9 patch served here (9.0.23).
    Net9Latest,
    /// The newest .NET 8 patch served here (8.0.34).
    Net8Latest,
    /// linux-arm64 .NET 11.0.0, run under qemu-user.
    Net11Arm64,
    /// linux-arm64 .NET 10.0.15, run under qemu-user.
    Net10Arm64,
    /// linux-arm64 .NET 9.0.23, run under qemu-user.
    Net9Arm64,
    /// The web testbed (`testbed/Cdac.Testbed.Web`, ASP.NET Core) on .NET 11.0.0.
    WebNet11,
    /// The web testbed (`testbed/Cdac.Testbed.Web`, ASP.NET Core) on .NET 10.0.14.
    WebNet10,
    /// The web testbed on .NET 9.0.22.
    WebNet9,
    /// The web testbed on .NET 8.0.33.
    WebNet8,
}

impl Variant {
    /// The three runtimes every capability is checked on, newest first.
    pub const MAIN: [Variant; 3] = [Variant::Net10, Variant::Net9, Variant::Net8];

    /// The variant's name, as `scripts/testbed-setup` and the manifest spell it.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Net11 => "net11",
            Variant::Net10 => "net10",
            Variant::Net9 => "net9",
            Variant::Net8 => "net8",
            Variant::Net8_0_0 => "net8.0.0",
            Variant::Net10Composite => "net10-composite",
            Variant::Net10Latest => "net10-latest",
            Variant::Net9Latest => "net9-latest",
            Variant::Net8Latest => "net8-latest",
            Variant::Net11Arm64 => "net11-arm64",
            Variant::Net10Arm64 => "net10-arm64",
            Variant::Net9Arm64 => "net9-arm64",
            Variant::WebNet11 => "web-net11",
            Variant::WebNet10 => "web-net10",
            Variant::WebNet9 => "web-net9",
            Variant::WebNet8 => "web-net8",
        }
    }

    /// The web testbed (ASP.NET Core), not the main one.
    pub fn is_web(self) -> bool {
        matches!(
            self,
            Variant::WebNet11 | Variant::WebNet10 | Variant::WebNet9 | Variant::WebNet8
        )
    }

    /// The executable's file name in the variant's folder.
    pub fn executable(self) -> &'static str {
        if self.is_web() {
            "Cdac.Testbed.Web"
        } else {
            "Cdac.Testbed"
        }
    }

    /// A linux-arm64 build, run under qemu-user.
    pub fn is_arm64(self) -> bool {
        matches!(
            self,
            Variant::Net11Arm64 | Variant::Net10Arm64 | Variant::Net9Arm64
        )
    }

    /// The runtime version the variant runs (`Environment.Version`).
    pub fn runtime_version(self) -> &'static str {
        match self {
            Variant::Net11 | Variant::Net11Arm64 | Variant::WebNet11 => "11.0.0",
            Variant::Net10 | Variant::Net10Composite | Variant::WebNet10 => "10.0.14",
            Variant::Net9 | Variant::WebNet9 => "9.0.22",
            Variant::Net8 | Variant::WebNet8 => "8.0.33",
            Variant::Net8_0_0 => "8.0.0",
            Variant::Net10Latest => "10.0.15",
            Variant::Net9Latest => "9.0.23",
            Variant::Net8Latest => "8.0.34",
            Variant::Net10Arm64 => "10.0.15",
            Variant::Net9Arm64 => "9.0.23",
        }
    }

    fn index(self) -> usize {
        match self {
            Variant::Net10 => 0,
            Variant::Net9 => 1,
            Variant::Net8 => 2,
            Variant::Net8_0_0 => 3,
            Variant::Net10Composite => 4,
            Variant::Net10Latest => 5,
            Variant::Net9Latest => 6,
            Variant::Net8Latest => 7,
            Variant::Net10Arm64 => 8,
            Variant::Net9Arm64 => 9,
            Variant::Net11 => 10,
            Variant::WebNet10 => 11,
            Variant::WebNet9 => 12,
            Variant::WebNet8 => 13,
            Variant::Net11Arm64 => 14,
            Variant::WebNet11 => 15,
        }
    }
}

/// Where the testbed builds live.
pub fn testbed_dir() -> PathBuf {
    std::env::var_os("CDAC_TESTBED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/testbed"))
}

/// Builds the variant's testbed if needed (idempotent; concurrent calls wait for each
/// other inside the script) and returns its executable.
pub fn testbed_exe(variant: Variant) -> PathBuf {
    let status = Command::new(repo().join("scripts/testbed-setup"))
        .args(["--variant", variant.name()])
        .stdout(Stdio::null())
        .status()
        .expect("run scripts/testbed-setup");
    assert!(
        status.success(),
        "scripts/testbed-setup --variant {} failed",
        variant.name()
    );
    testbed_dir()
        .join(variant.name())
        .join(variant.executable())
}

/// One running testbed process and its dumps, shared by all tests of a binary.
pub struct Testbed {
    pub variant: Variant,
    pub pid: i32,
    pub manifest: serde_json::Value,
    pub dir: PathBuf,
    child: Mutex<Child>,
}

impl Testbed {
    /// A testbed the caller started (`child` owns the process whose pid, as this process
    /// sees it, is `pid`), kept as the others are: killed and its folder removed when
    /// dropped.
    pub fn adopt(
        variant: Variant,
        pid: i32,
        manifest: serde_json::Value,
        dir: PathBuf,
        child: Child,
    ) -> Testbed {
        Testbed {
            variant,
            pid,
            manifest,
            dir,
            child: Mutex::new(child),
        }
    }

    /// Path of the dump of this kind (full, heap, normal, triage, gcore), written on
    /// first use.
    pub fn dump(&self, kind: &str) -> PathBuf {
        let _guard = tracing_lock();
        let path = self.dir.join(format!("{kind}.core"));
        if !path.exists() {
            // The perf map as it was before the dump: later entries may not be in it.
            if let Some(map) = self.manifest["perf_map"].as_str() {
                let _ = std::fs::copy(map, self.dir.join(format!("{kind}.perfmap")));
            }
            let status = Command::new(repo().join("scripts/testbed-dumps"))
                .args(["--only", kind])
                .arg(self.dir.join("manifest.json"))
                .arg(&self.dir)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(self.dir.join(format!("{kind}.log"))).expect("log"))
                .status()
                .expect("run scripts/testbed-dumps");
            assert!(status.success(), "testbed-dumps --only {kind} failed");
        }
        path
    }

    /// The runtime's perf map as it was just before the dump of this kind was taken (the
    /// current one for `None`, the live process).
    pub fn perf_map_for(&self, dump: Option<&str>) -> PathBuf {
        match dump {
            Some(kind) => {
                self.dump(kind);
                self.dir.join(format!("{kind}.perfmap"))
            }
            None => PathBuf::from(self.manifest["perf_map"].as_str().expect("perf_map")),
        }
    }

    /// An arm64 testbed's core, as qemu-user writes it when the guest dies of SIGQUIT: the
    /// process ends. The perf map as it was just before is kept beside it (`qemu.perfmap`).
    pub fn qemu_core(&self) -> PathBuf {
        assert!(
            self.variant.is_arm64(),
            "only qemu testbeds write qemu cores"
        );
        if let Some(map) = self.manifest["perf_map"].as_str() {
            let _ = std::fs::copy(map, self.dir.join("qemu.perfmap"));
        }
        let status = Command::new("kill")
            .args(["-QUIT", &self.pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -QUIT {}", self.pid);
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        // qemu writes the whole guest (about 400 MiB) itself: minutes on a loaded 2-core
        // machine.
        let deadline = Instant::now() + Duration::from_secs(360);
        while child.try_wait().ok().flatten().is_none() {
            assert!(Instant::now() < deadline, "qemu did not end after SIGQUIT");
            std::thread::sleep(Duration::from_millis(100));
        }
        qemu_core_in(&self.dir).unwrap_or_else(|| panic!("no qemu core in {}", self.dir.display()))
    }

    /// The emitted methods of the manifest.
    pub fn emitted(&self) -> Vec<serde_json::Value> {
        self.manifest["emitted_methods"]
            .as_array()
            .expect("emitted_methods")
            .clone()
    }

    /// The libcoreclr.so path the testbed loaded.
    pub fn libcoreclr(&self) -> PathBuf {
        PathBuf::from(self.manifest["libcoreclr"].as_str().expect("libcoreclr"))
    }

    /// The folder holding the runtime (libcoreclr.so, createdump, the framework).
    pub fn runtime_dir(&self) -> PathBuf {
        PathBuf::from(self.manifest["runtime_dir"].as_str().expect("runtime_dir"))
    }
}

impl Testbed {
    /// A web testbed's answer to `GET path` (its body as JSON), over plain HTTP/1.1 to the
    /// address its manifest gives.
    pub fn http_get(&self, path: &str) -> serde_json::Value {
        use std::io::{Read, Write};
        let url = self.manifest["url"].as_str().expect("a web testbed's url");
        let host = url.trim_start_matches("http://").trim_end_matches('/');
        let mut stream = std::net::TcpStream::connect(host).expect("connect to the web testbed");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .expect("send the request");
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .expect("read the response");
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
        // Kestrel answers small bodies with a length, larger ones chunked.
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            let mut out = String::new();
            let mut rest = body;
            while let Some((size, after)) = rest.split_once("\r\n") {
                let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
                if n == 0 {
                    break;
                }
                out.push_str(&after[..n]);
                rest = &after[n + 2..];
            }
            out
        } else {
            body.to_string()
        };
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// Drives a web testbed as a service is driven: orders made and kept (the leak), JSON
    /// answers, 600 objects given sync blocks (the sync table grows past its first 250
    /// entries), 200 async requests left waiting, the deadlock; then its facts.
    pub fn drive_web(&self) -> serde_json::Value {
        assert!(
            self.variant.is_web(),
            "{} is no web testbed",
            self.variant.name()
        );
        for _ in 0..20 {
            self.http_get("/orders?n=250");
            self.http_get("/json");
        }
        self.http_get("/monitors?n=600");
        self.http_get("/stuck?n=200");
        self.http_get("/deadlock");
        self.http_get("/facts")
    }
}

impl Drop for Testbed {
    // Only private testbeds are dropped (the shared ones live in statics).
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        for p in ["perf_map", "perfinfo", "jitdump"] {
            if let Some(f) = self.manifest[p].as_str() {
                let _ = std::fs::remove_file(f);
            }
        }
        // Its dumps: a run starts dozens of private testbeds and CI's disk is not large.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The shared .NET 8 testbed, for the checks of the shipped .NET 8 descriptor: 8.0.33, or
/// 8.0.0 when `CDAC_NET8_VARIANT=net8.0.0` (scripts/test runs those checks on both).
pub fn testbed() -> &'static Testbed {
    match std::env::var("CDAC_NET8_VARIANT").as_deref() {
        Ok("net8.0.0") => testbed_of(Variant::Net8_0_0),
        Ok("net8") | Err(_) => testbed_of(Variant::Net8),
        Ok(other) => panic!("CDAC_NET8_VARIANT={other}: net8 or net8.0.0"),
    }
}

/// The shared testbed of a variant: built if needed, started once per test binary, and
/// stopped when the test process exits (the testbed polls its parent).
pub fn testbed_of(variant: Variant) -> &'static Testbed {
    static TESTBEDS: [OnceLock<Testbed>; 16] = [const { OnceLock::new() }; 16];
    TESTBEDS[variant.index()].get_or_init(|| start_testbed(variant, &[]))
}

/// Starts a private testbed of a variant (a test that runs it in a special mode or must
/// not share it), with extra testbed arguments.
pub fn start_testbed(variant: Variant, extra: &[&str]) -> Testbed {
    spawn_testbed(variant, extra, false).0
}

/// Starts a private testbed as [`start_testbed`] does, with extra environment variables
/// (`DOTNET_gcServer=1`, ...).
pub fn start_testbed_env(variant: Variant, extra: &[&str], env: &[(&str, &str)]) -> Testbed {
    spawn_testbed_env(variant, extra, false, env).0
}

/// Starts a private testbed as [`start_testbed`] does, with its stdin and stdout piped to
/// the caller: for `--rounds N` (a line on stdin starts the rounds, stdout then carries
/// `round I HEX` lines and `done`, and the testbed exits at the end of its stdin).
pub fn start_testbed_piped(
    variant: Variant,
    extra: &[&str],
) -> (Testbed, ChildStdin, BufReader<ChildStdout>) {
    let (tb, stdio) = spawn_testbed(variant, extra, true);
    let (stdin, stdout) = stdio.expect("piped stdio");
    (tb, stdin, BufReader::new(stdout))
}

type PipedStdio = Option<(ChildStdin, ChildStdout)>;

fn spawn_testbed(variant: Variant, extra: &[&str], piped: bool) -> (Testbed, PipedStdio) {
    spawn_testbed_env(variant, extra, piped, &[])
}

/// As [`spawn_testbed`], with environment variables set after the defaults (which they
/// override).
fn spawn_testbed_env(
    variant: Variant,
    extra: &[&str],
    piped: bool,
    env: &[(&str, &str)],
) -> (Testbed, PipedStdio) {
    let exe = testbed_exe(variant);
    // Each testbed of the process has a folder of its own (twins of one variant too).
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let dir = match STARTED.fetch_add(1, Ordering::Relaxed) {
        0 => scratch(&format!("testbed-{}", variant.name())),
        n => scratch(&format!("testbed-{}-{n}", variant.name())),
    };
    let manifest_path = dir.join("manifest.json");
    let stdio = || if piped { Stdio::piped() } else { Stdio::null() };
    let mut child = testbed_command(variant, &dir)
        .arg("--manifest")
        .arg(&manifest_path)
        .args(["--exit-with-parent", "--max-seconds", "1800"])
        .args(extra)
        .env("DOTNET_PerfMapEnabled", "1")
        .env("DOTNET_PerfMapShowOptimizationTiers", "1")
        .envs(env.iter().copied())
        .stdin(stdio())
        .stdout(stdio())
        .stderr(std::fs::File::create(dir.join("testbed.log")).expect("log"))
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
    let stdio = child.stdin.take().zip(child.stdout.take());
    let wait = if variant.is_arm64() { 300 } else { 120 };
    let deadline = Instant::now() + Duration::from_secs(wait);
    while !manifest_path.exists() {
        assert!(
            Instant::now() < deadline,
            "testbed {} did not write its manifest; see {}",
            variant.name(),
            dir.join("testbed.log").display()
        );
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "testbed {} exited ({status}) before writing its manifest; see {}",
                variant.name(),
                dir.join("testbed.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).expect("manifest"))
            .expect("manifest JSON");
    let pid = manifest["pid"].as_i64().expect("pid") as i32;
    assert_eq!(pid as u32, child.id(), "manifest pid is the child's");
    assert_eq!(
        manifest["runtime_version"].as_str(),
        Some(variant.runtime_version()),
        "{} runs the pinned runtime",
        variant.name()
    );
    let tb = Testbed {
        variant,
        pid,
        manifest,
        dir,
        child: Mutex::new(child),
    };
    (tb, stdio)
}

/// Held while something of this test process traces a testbed: a dump being written
/// (gcore and createdump attach with ptrace) or `cdac stacks --pid` stopping its threads.
/// A process has one tracer at a time, so the two must not overlap.
pub fn tracing_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Entries `(start, size, name)` of a runtime perf map. Records are split on newlines and
/// on NUL bytes (the runtime sometimes writes a NUL where a newline belongs). A last record
/// without its terminator is still being written (.NET 11 buffers the map) and is left out.
pub fn perf_map(path: &Path) -> Vec<(u64, u64, String)> {
    let bytes = std::fs::read(path).expect("perf map");
    let end = bytes
        .iter()
        .rposition(|&b| b == b'\n' || b == 0)
        .map_or(0, |i| i + 1);
    bytes[..end]
        .split(|&b| b == b'\n' || b == 0)
        .filter_map(|line| {
            let line = std::str::from_utf8(line).ok()?;
            let mut parts = line.splitn(3, ' ');
            let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((start, size, parts.next()?.to_string()))
        })
        .collect()
}

// ---------------------------------------------------------------- ClrMD side by side

/// Builds `tests/clrmd-probe` (ClrMD 4.2 over the runtime's own DAC) once per test process
/// and returns its executable.
pub fn clrmd_probe() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let status = Command::new(repo().join("scripts/clrmd-probe"))
            .arg("--build-only")
            .stdout(Stdio::null())
            .status()
            .expect("run scripts/clrmd-probe");
        assert!(status.success(), "building tests/clrmd-probe failed");
        repo().join("target/clrmd-probe/bin/Release/net10.0/clrmd-probe")
    })
    .clone()
}

/// What ClrMD says about a dump: `clrmd-probe --dump DUMP COMMAND ARGS...`, parsed.
pub fn clrmd(dump: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(clrmd_probe())
        .arg("--dump")
        .arg(dump)
        .args(args)
        .output()
        .expect("run clrmd-probe");
    assert!(
        out.status.success(),
        "clrmd-probe {args:?} on {}: {}",
        dump.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("clrmd-probe JSON")
}

/// Runs the testbed of `variant` with `--crash` under the runtime's own crash dumping
/// (createdump, full: an InvalidOperationException thrown from a catch block, with the
/// caught ArgumentException as its inner exception); returns its manifest and the dump.
/// Made once per test process and variant.
pub fn crash_dump(variant: Variant) -> (serde_json::Value, PathBuf) {
    made_crash_dump(variant, "--crash")
}

/// As [`crash_dump`], with the exception thrown on a named background thread
/// (`--crash-on-thread`) while the main thread sleeps; the runtime's own crash report
/// (`DOTNET_EnableCrashReport=1`) is beside the dump, as `<dump>.crashreport.json`.
pub fn crash_dump_on_thread(variant: Variant) -> (serde_json::Value, PathBuf) {
    made_crash_dump(variant, "--crash-on-thread")
}

/// The core qemu-user wrote into `dir` (`qemu_<exe>_<time>_<pid>.core`), if any.
pub fn qemu_core_in(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("qemu_") && n.ends_with(".core"))
        })
}

/// Held while a test runs the CPU workload (`--cpu-workload`): one at a time, in every
/// file that starts one (each keeps two cores busy; two at once would starve the other
/// tests and each other's samplers).
pub fn cpu_workload_lock() -> std::sync::MutexGuard<'static, ()> {
    static WORKLOAD: Mutex<()> = Mutex::new(());
    WORKLOAD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held while a test runs a testbed under qemu-user: one emulated process at a time (each
/// takes a core to itself while it starts and while it writes its core).
pub fn qemu_lock() -> std::sync::MutexGuard<'static, ()> {
    static QEMU: Mutex<()> = Mutex::new(());
    QEMU.lock().unwrap_or_else(|e| e.into_inner())
}

/// The command that runs a testbed variant, in `dir`: the executable itself, or for an arm64
/// build qemu-user running it. qemu writes the guest's core itself (into `dir`) when the
/// guest dies of a signal; the kernel's core of qemu is kept empty. No arm64 libicu is
/// installed, and W^X's second mapping of code hides code patches from qemu.
fn testbed_command(variant: Variant, dir: &Path) -> Command {
    let exe = testbed_exe(variant);
    if !variant.is_arm64() {
        return Command::new(&exe);
    }
    let mut c = qemu_command(&exe, dir);
    c.env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
        .env("DOTNET_EnableWriteXorExecute", "0");
    c
}

/// qemu-user running the linux-arm64 program `exe` in `dir`, with Debian's arm64 C
/// libraries; qemu writes the guest's core into `dir` when the guest dies of a signal
/// (SIGQUIT), and the kernel's core of qemu is kept empty.
pub fn qemu_command(exe: &Path, dir: &Path) -> Command {
    // The wrapper also gives SIGQUIT and SIGINT back their default action: a shell's
    // background job starts with both ignored, qemu would inherit that, and the guest would
    // never get the SIGQUIT that makes qemu write its core (no shell can undo it).
    let mut c = Command::new("python3");
    c.arg("-c")
        .arg(
            "import os, resource, signal, sys\n\
             hard = resource.getrlimit(resource.RLIMIT_CORE)[1]\n\
             resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))\n\
             open('/proc/self/coredump_filter', 'w').write('0')\n\
             signal.signal(signal.SIGQUIT, signal.SIG_DFL)\n\
             signal.signal(signal.SIGINT, signal.SIG_DFL)\n\
             os.execvp(sys.argv[1], sys.argv[1:])",
        )
        .args(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"])
        .arg(exe)
        .current_dir(dir);
    c
}

fn made_crash_dump(variant: Variant, mode: &'static str) -> (serde_json::Value, PathBuf) {
    type Made = Vec<(&'static str, &'static str, serde_json::Value, PathBuf)>;
    static MADE: Mutex<Made> = Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, m, dump)) = made
        .iter()
        .find(|(v, how, _, _)| *v == variant.name() && *how == mode)
    {
        return (m.clone(), dump.clone());
    }
    let dir = scratch(&format!(
        "crash{}-{}",
        mode.trim_start_matches("--crash"),
        variant.name()
    ));
    let manifest = dir.join("manifest.json");
    let dump = dir.join("crash.core");
    let _ = std::fs::remove_file(&dump);
    let log = dir.join("testbed.log");
    let _qemu = variant.is_arm64().then(qemu_lock);
    let mut command = testbed_command(variant, &dir);
    command
        .arg("--manifest")
        .arg(&manifest)
        .args([mode, "--max-seconds", "300"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    if !variant.is_arm64() {
        // createdump, as the runtime starts it on a crash. Under qemu the guest's abort
        // makes qemu write the core itself.
        command
            .env("DOTNET_DbgEnableMiniDump", "1")
            .env("DOTNET_DbgMiniDumpType", "4")
            .env("DOTNET_DbgMiniDumpName", &dump)
            .env("DOTNET_EnableCrashReport", "1");
    }
    let status = command.status().expect("run the testbed with --crash");
    assert!(!status.success(), "the testbed was meant to crash");
    if variant.is_arm64() {
        let core = qemu_core_in(&dir)
            .unwrap_or_else(|| panic!("qemu wrote no core; see {}", log.display()));
        std::fs::rename(&core, &dump).expect("name the core");
    }
    assert!(
        dump.exists(),
        "createdump wrote no dump; see {}",
        log.display()
    );
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).expect("manifest")).expect("JSON");
    made.push((variant.name(), mode, m.clone(), dump.clone()));
    (m, dump)
}

// ---------------------------------------------------------------- CPU workload

/// A private testbed running `--cpu-workload` (testbed/README.md): threads `cpu-split`
/// (HeavyPart 3/4, LightPart 1/4) and `cpu-solo` (SoloWork) burning CPU in tier-1 code;
/// `tb.manifest["cpu_workload"]` lists them and the `expected` shares.
pub struct CpuWorkload {
    pub tb: Testbed,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl CpuWorkload {
    /// Units (of equal work) each thread completed since the previous call (or since the
    /// manifest), and the seconds that took: `(split, solo, seconds)`.
    pub fn rate(&mut self) -> (u64, u64, f64) {
        use std::io::Write;
        writeln!(self.stdin, "rate").expect("write to the workload");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("rate line");
        let f: Vec<&str> = line.split_whitespace().collect();
        assert!(
            f.len() == 4 && f[0] == "rate",
            "unexpected rate line {line:?}"
        );
        (
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        )
    }

    /// `(method, share of the workload's samples)` of the hot methods ("Ns.Type::Method").
    pub fn expected(&self) -> Vec<(String, f64)> {
        self.tb.manifest["cpu_workload"]["expected"]
            .as_array()
            .expect("cpu_workload.expected")
            .iter()
            .map(|e| {
                let m = e["method"].as_str().expect("method").to_string();
                (m, e["share_of_workload"].as_f64().expect("share"))
            })
            .collect()
    }
}

/// Starts a private testbed of `variant` in CPU-workload mode; it returns once the loops run
/// tier-1 code (the manifest is written then).
pub fn start_cpu_workload(variant: Variant) -> CpuWorkload {
    let (tb, stdin, stdout) = start_testbed_piped(variant, &["--cpu-workload"]);
    CpuWorkload { tb, stdin, stdout }
}

/// As [`start_cpu_workload`], with the runtime's own perf map off
/// (`DOTNET_PerfMapEnabled=0`): for tests of the maps cdac writes.
pub fn start_cpu_workload_without_perf_map(variant: Variant) -> CpuWorkload {
    let (tb, stdio) = spawn_testbed_env(
        variant,
        &["--cpu-workload"],
        true,
        &[("DOTNET_PerfMapEnabled", "0")],
    );
    let (stdin, stdout) = stdio.expect("piped stdio");
    CpuWorkload {
        tb,
        stdin,
        stdout: BufReader::new(stdout),
    }
}

/// The `dotnet-dump` (SOS) that scripts/tools-setup installs (once per machine).
pub fn dotnet_dump() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let out = Command::new(repo().join("scripts/tools-setup"))
            .stderr(Stdio::null())
            .output()
            .expect("run scripts/tools-setup");
        assert!(out.status.success(), "scripts/tools-setup failed");
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        PathBuf::from(dir).join("dotnet-dump")
    })
    .clone()
}

/// Runs dotnet-dump (SOS), once more when it fails: on a loaded 2-core machine it has
/// exited with an error and nothing on stderr once in a few hundred runs, an oracle's
/// hiccup and not an answer. A second failure is returned as it is, for the caller's
/// assertion to show.
pub trait SosOutput {
    /// The output of the command, run again once if it fails.
    fn sos_output(&mut self) -> std::process::Output;
}

impl SosOutput for Command {
    fn sos_output(&mut self) -> std::process::Output {
        let first = self.output().expect("run dotnet-dump");
        if first.status.success() {
            return first;
        }
        eprintln!(
            "dotnet-dump failed ({}; stderr {:?}, last stdout {:?}): running it again",
            first.status,
            String::from_utf8_lossy(&first.stderr),
            String::from_utf8_lossy(&first.stdout)
                .lines()
                .last()
                .unwrap_or_default()
        );
        self.output().expect("run dotnet-dump")
    }
}

/// The `cdac` the tests run: `CDAC_TEST_BIN` when set (scripts/test sets it to the release
/// build of this tree it has just installed: the real-runtime tests run a few thousand
/// commands, which take minutes in a debug build), else this test build's own.
pub fn cdac_exe() -> String {
    if let Ok(exe) = std::env::var("CDAC_TEST_BIN") {
        return exe;
    }
    // Only the cdac package's own tests have the binary (capi's include this file too).
    match option_env!("CARGO_BIN_EXE_cdac") {
        Some(exe) => exe.to_string(),
        None => panic!("no cdac binary: set CDAC_TEST_BIN, or run the cdac package's tests"),
    }
}

/// `cdac ARGS` (which should include `--json`): the JSON it prints; panics, with its
/// stderr, when it fails.
pub fn cdac_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(cdac_exe())
        .args(args)
        .output()
        .expect("run cdac");
    assert!(
        out.status.success(),
        "cdac {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cdac printed JSON")
}
