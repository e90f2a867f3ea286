//! Fixtures shared by the integration tests: the synthetic .NET 10-style runtime (built
//! with gcc) and the real .NET 8 testbed (installed from PyPI by scripts/testbed-setup).
//! Both are started as children of the test process and die with it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
        let mut child = Command::new(exe)
            .args(["--exit-on-stdin-eof", "--max-seconds", "600"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start synthetic-host");
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

// ---------------------------------------------------------------- .NET 8 testbed

/// One running .NET 8 testbed process and its dumps, shared by all tests of a binary.
pub struct Testbed {
    pub pid: i32,
    pub manifest: serde_json::Value,
    pub dir: PathBuf,
    child: Mutex<Child>,
}

impl Testbed {
    /// Path of the dump of this kind (full, heap, normal, triage, gcore), written on
    /// first use.
    pub fn dump(&self, kind: &str) -> PathBuf {
        static LOCK: Mutex<()> = Mutex::new(());
        let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
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

    /// The emitted methods of the manifest.
    pub fn emitted(&self) -> Vec<serde_json::Value> {
        self.manifest["emitted_methods"]
            .as_array()
            .expect("emitted_methods")
            .clone()
    }

    /// The libcoreclr.so path the workload loaded.
    pub fn libcoreclr(&self) -> PathBuf {
        PathBuf::from(self.manifest["libcoreclr"].as_str().expect("libcoreclr"))
    }
}

/// The shared testbed: installed if needed, started once per test binary, and stopped
/// when the test process exits (the workload polls its parent).
pub fn testbed() -> &'static Testbed {
    static TESTBED: OnceLock<Testbed> = OnceLock::new();
    TESTBED.get_or_init(start_testbed)
}

fn start_testbed() -> Testbed {
    let status = Command::new(repo().join("scripts/testbed-setup"))
        .stdout(Stdio::null())
        .status()
        .expect("run scripts/testbed-setup");
    assert!(
        status.success(),
        "scripts/testbed-setup failed (it needs PyPI)"
    );
    let testbed_dir = std::env::var_os("CDAC_TESTBED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/testbed"));
    let python = testbed_dir.join("venv/bin/python");
    let dir = scratch("testbed");
    let manifest_path = dir.join("manifest.json");
    let child = Command::new(&python)
        .arg(repo().join("testbed/workload.py"))
        .arg("--manifest")
        .arg(&manifest_path)
        .args(["--exit-with-parent", "--max-seconds", "1800"])
        .env("DOTNET_PerfMapEnabled", "1")
        .env("DOTNET_PerfMapShowOptimizationTiers", "1")
        .env("CDAC_TESTBED_DIR", &testbed_dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("workload.log")).expect("log"))
        .spawn()
        .expect("start testbed/workload.py");
    let deadline = Instant::now() + Duration::from_secs(240);
    while !manifest_path.exists() {
        assert!(
            Instant::now() < deadline,
            "testbed did not write its manifest; see {}",
            dir.join("workload.log").display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).expect("manifest"))
            .expect("manifest JSON");
    let pid = manifest["pid"].as_i64().expect("pid") as i32;
    assert_eq!(pid as u32, child.id(), "manifest pid is the child's");
    Testbed {
        pid,
        manifest,
        dir,
        child: Mutex::new(child),
    }
}

/// Entries `(start, size, name)` of a runtime perf map. Records are split on newlines and
/// on NUL bytes (the runtime sometimes writes a NUL where a newline belongs).
pub fn perf_map(path: &Path) -> Vec<(u64, u64, String)> {
    let bytes = std::fs::read(path).expect("perf map");
    bytes
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
