//! What the debugger-extension tests share: the `libcdac.so` and `cdac` CLI of the test's
//! build profile, and the CLI's JSON answers to compare the extensions with.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::repo;

/// The profile directory of this test (`target/debug` or `target/release`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("profile dir")
        .to_path_buf()
}

/// libcdac.so next to this test (`deps/`) or in the profile directory, the newer.
pub fn lib() -> PathBuf {
    let profile = profile_dir();
    [profile.join("deps"), profile.clone()]
        .into_iter()
        .map(|d| d.join("libcdac.so"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .expect("libcdac.so")
}

/// The `cdac` CLI: `CDAC_TEST_BIN` when set (scripts/test sets it to the build it just
/// installed), else the one of this test's profile, built (or found up to date) once per
/// process: this crate's tests do not build the main crate's binary themselves. (Building
/// it here resolves the library's features apart from the test build's and recompiles it:
/// a minute on CI.)
pub fn cli() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        if let Some(exe) = std::env::var_os("CDAC_TEST_BIN") {
            return PathBuf::from(exe);
        }
        let profile = profile_dir();
        let target_dir = profile.parent().expect("target dir");
        let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        c.args(["build", "--quiet", "--bin", "cdac", "-p", "cdac"])
            .arg("--manifest-path")
            .arg(repo().join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir);
        if profile.file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        let status = c.status().expect("run cargo build --bin cdac");
        assert!(status.success(), "building the cdac CLI failed");
        profile.join("cdac")
    })
    .clone()
}

/// `cdac ARGS... --json`, parsed. Some items may be unanswered (an `ip2md` address in
/// native code: exit 1, each such item answered with its error in the JSON); a failure of
/// the whole command is not accepted.
pub fn cli_json(args: &[&str], target: &[OsString]) -> Value {
    let out = Command::new(cli())
        .args(args)
        .args(target)
        .arg("--json")
        .output()
        .expect("run cdac");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let partial = out.status.code() == Some(1) && !stderr.contains("cdac: error:");
    assert!(out.status.success() || partial, "cdac {args:?}: {stderr}");
    serde_json::from_slice(&out.stdout).expect("cdac JSON")
}
