//! `scripts/install`: what it installs into a temporary prefix works from there, with nothing
//! of the repository's build named. The release build must exist first (scripts/test's
//! `cargo test --release --workspace --no-run`, or `cargo build --release -p cdac --bin cdac`
//! and `cargo build --release -p cdac-capi --lib`): this test builds nothing, it installs
//! with `--no-build`.
//!
//! From the prefix, on the .NET 10 testbed: `bin/cdac --version`, `bin/cdac info --pid`
//! (the testbed's runtime and libcoreclr.so), and the installed gdb and lldb extensions on
//! the testbed's gcore dump with `CDAC_LIB` unset: each loads the prefix's `lib/libcdac.so`
//! and its `cdac modules` lists the modules the installed CLI lists (`cdac modules --json`),
//! Cdac.Testbed.dll and System.Private.CoreLib.dll among them. An extension copied where no
//! libcdac.so is found names every place it looked.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{hex, repo, testbed_of, Variant};

/// What the prefix holds after an install, with each file's mode.
const INSTALLED: [(&str, u32); 5] = [
    ("bin/cdac", 0o755),
    ("lib/libcdac.so", 0o755),
    ("include/cdac.h", 0o644),
    ("share/cdac/gdb/cdac.py", 0o644),
    ("share/cdac/lldb/cdac.py", 0o644),
];

fn run(c: &mut Command, what: &str) -> Output {
    let out = c
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The release build scripts/install installs from (cargo's target directory).
fn release() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"))
        .join("release")
}

/// The libcdac.so scripts/install takes: `cargo build` leaves it in the release folder,
/// `cargo test` only in `deps/`; the newer of the two.
fn built_library() -> PathBuf {
    let release = release();
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let (top, deps) = (release.join("libcdac.so"), release.join("deps/libcdac.so"));
    match (modified(&top), modified(&deps)) {
        (Some(t), Some(d)) if d > t => deps,
        (None, Some(_)) => deps,
        _ => top,
    }
}

/// `scripts/install --no-build --prefix PREFIX`; its stdout.
fn install(prefix: &Path) -> String {
    for f in [release().join("cdac"), built_library()] {
        assert!(
            f.is_file(),
            "{} is missing: build it first (`cargo build --release -p cdac --bin cdac && cargo \
             build --release -p cdac-capi --lib`; scripts/test builds both)",
            f.display()
        );
    }
    let out = run(
        Command::new(repo().join("scripts/install"))
            .arg("--no-build")
            .arg("--prefix")
            .arg(prefix),
        "scripts/install --no-build",
    );
    text(&out.stdout)
}

/// `(address, path)` of each `Module ADDR base ... PATH` line the extensions print (dynamic
/// modules have no path: gdb prints none, lldb `<no file>`).
fn extension_modules(output: &str) -> Vec<(u64, Option<String>)> {
    output
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("Module 0x")?;
            let (addr, rest) = rest.split_once(' ')?;
            let addr = u64::from_str_radix(addr, 16).ok()?;
            let path = rest
                .split_whitespace()
                .last()
                .filter(|p| p.starts_with('/'))
                .map(str::to_string);
            Some((addr, path))
        })
        .collect()
}

/// The part of a batch output between `@@begin NAME` and `@@end NAME`.
fn between<'a>(output: &'a str, name: &str) -> &'a str {
    let begin = format!("@@begin {name}\n");
    let end = format!("@@end {name}");
    let start = output
        .find(&begin)
        .unwrap_or_else(|| panic!("no @@begin {name} in: {output}"))
        + begin.len();
    let stop = output[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("no @@end {name} in: {output}"));
    &output[start..start + stop]
}

fn have_lldb() -> bool {
    let found = Command::new("lldb")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!(
            "SKIPPED (lldb part): lldb is not installed (`apt-get install lldb python3-lldb`; \
             CI installs it)"
        );
    }
    found
}

#[test]
fn installed_cli_and_extensions_work_from_the_prefix() {
    let tmp = tempfile::Builder::new()
        .prefix("cdac-install-")
        .tempdir()
        .expect("temporary prefix");
    let prefix = tmp.path().canonicalize().expect("prefix");

    // The install: every file, with its mode, the same bytes as the repository's; the
    // load lines and the PATH verdict printed. Again: nothing changes.
    let first = install(&prefix);
    let release = release();
    let sources = [
        release.join("cdac"),
        built_library(),
        repo().join("capi/include/cdac.h"),
        repo().join("gdb/cdac.py"),
        repo().join("lldb/cdac.py"),
    ];
    for ((rel, mode), src) in INSTALLED.iter().zip(&sources) {
        let dest = prefix.join(rel);
        assert!(
            first.contains(&format!("installed  {}", dest.display())),
            "{rel}: {first}"
        );
        let meta = std::fs::metadata(&dest).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(meta.permissions().mode() & 0o777, *mode, "{rel} mode");
        assert!(
            std::fs::read(&dest).expect("installed") == std::fs::read(src).expect("source"),
            "{rel} differs from {}",
            src.display()
        );
    }
    assert!(
        first.contains(&format!(
            "gdb -ex 'source {}'",
            prefix.join("share/cdac/gdb/cdac.py").display()
        )) && first.contains(&format!(
            "lldb -o 'command script import {}'",
            prefix.join("share/cdac/lldb/cdac.py").display()
        )),
        "{first}"
    );
    assert!(
        first.contains(&format!("{}/bin is NOT on PATH", prefix.display())),
        "{first}"
    );
    let leftovers: Vec<PathBuf> = INSTALLED
        .iter()
        .filter_map(|(rel, _)| prefix.join(rel).parent().map(Path::to_path_buf))
        .flat_map(|d| {
            std::fs::read_dir(d)
                .expect("dir")
                .flatten()
                .map(|e| e.path())
        })
        .filter(|p| p.to_string_lossy().contains(".install-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    let again = install(&prefix);
    for (rel, _) in INSTALLED {
        assert!(
            again.contains(&format!("unchanged  {}", prefix.join(rel).display())),
            "{rel} again: {again}"
        );
    }

    // The CLI from the prefix.
    let cdac = prefix.join("bin/cdac");
    let version = run(Command::new(&cdac).arg("--version"), "cdac --version");
    assert_eq!(
        text(&version.stdout).trim(),
        format!("cdac {}", env!("CARGO_PKG_VERSION"))
    );
    let tb = testbed_of(Variant::Net10);
    let info = text(
        &run(
            Command::new(&cdac).args(["info", "--pid", &tb.pid.to_string()]),
            "cdac info --pid",
        )
        .stdout,
    );
    let field = |name: &str| -> String {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no `{name}` in: {info}"))
            .trim()
            .to_string()
    };
    assert_eq!(field("target "), format!("live process {}", tb.pid));
    assert!(
        field("runtime version ").starts_with(&format!("{} ", Variant::Net10.runtime_version())),
        "{info}"
    );
    assert!(
        field("runtime module ").starts_with(&format!("{} at 0x", tb.libcoreclr().display())),
        "{info}"
    );

    // The modules of the gcore dump as the installed CLI lists them.
    let core = tb.dump("gcore");
    let exe = Path::new(tb.manifest["app_dir"].as_str().expect("app_dir")).join("Cdac.Testbed");
    let cli: serde_json::Value = serde_json::from_slice(
        &run(
            Command::new(&cdac)
                .args(["modules", "--json", "--dump"])
                .arg(&core),
            "cdac modules --dump",
        )
        .stdout,
    )
    .expect("modules JSON");
    let cli: Vec<(u64, Option<String>)> = cli
        .as_array()
        .expect("modules")
        .iter()
        .map(|m| (hex(&m["address"]), m["path"].as_str().map(str::to_string)))
        .collect();
    let app_dir = tb.manifest["app_dir"].as_str().expect("app_dir");
    for dll in ["Cdac.Testbed.dll", "System.Private.CoreLib.dll"] {
        let want = format!("{app_dir}/{dll}");
        assert!(
            cli.iter().any(|(_, p)| p.as_deref() == Some(want.as_str())),
            "CLI modules: no {want}: {cli:?}"
        );
    }
    let with_path = |mods: &[(u64, Option<String>)]| -> BTreeSet<(u64, String)> {
        mods.iter()
            .filter_map(|(a, p)| Some((*a, p.clone()?)))
            .collect()
    };
    let lib = prefix.join("lib/libcdac.so");

    // gdb: the installed extension, CDAC_LIB unset, on the gcore dump.
    let gdb_ext = prefix.join("share/cdac/gdb/cdac.py");
    let out = run(
        Command::new("gdb")
            .args(["-batch", "-nx", "-ex", "set pagination off", "-ex"])
            .arg(format!("source {}", gdb_ext.display()))
            .args(["-ex", "echo @@begin modules\\n", "-ex", "cdac modules"])
            .args(["-ex", "echo @@end modules\\n", "-ex"])
            .arg("python print('@@lib %s' % LIB._name)")
            .arg(&exe)
            .arg(&core)
            .env_remove("CDAC_LIB"),
        "gdb with the installed extension",
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !stderr.contains("Python Exception") && !stderr.contains("Traceback"),
        "gdb: the extension failed: {stderr}"
    );
    assert!(
        stdout.contains(&format!("@@lib {}\n", lib.display())),
        "gdb loaded another libcdac.so: {stdout}"
    );
    let gdb_modules = extension_modules(between(&stdout, "modules"));
    assert_eq!(gdb_modules.len(), cli.len(), "gdb: {stdout}");
    assert_eq!(with_path(&gdb_modules), with_path(&cli), "gdb cdac modules");

    // lldb likewise.
    if have_lldb() {
        let lldb_ext = prefix.join("share/cdac/lldb/cdac.py");
        let out = run(
            Command::new("lldb")
                .args(["--batch", "--no-lldbinit", "-c"])
                .arg(&core)
                .arg(&exe)
                .arg("-o")
                .arg(format!("command script import {}", lldb_ext.display()))
                .args([
                    "-o",
                    "script print('@@begin modules')",
                    "-o",
                    "cdac modules",
                ])
                .args(["-o", "script print('@@end modules')", "-o"])
                .arg("script import cdac; print('@@lib %s' % cdac._LIB._name)")
                .env_remove("CDAC_LIB"),
            "lldb with the installed extension",
        );
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            !stderr.contains("Traceback") && !stdout.contains("Traceback"),
            "lldb: the extension failed: {stderr}\n{stdout}"
        );
        assert!(!stderr.contains("error:"), "lldb: {stderr}\n{stdout}");
        assert!(
            stdout.contains(&format!("@@lib {}\n", lib.display())),
            "lldb loaded another libcdac.so: {stdout}"
        );
        let lldb_modules = extension_modules(between(&stdout, "modules"));
        assert_eq!(lldb_modules.len(), cli.len(), "lldb: {stdout}");
        assert_eq!(
            with_path(&lldb_modules),
            with_path(&cli),
            "lldb cdac modules"
        );
    }

    // An extension where no libcdac.so is found (a prefix without lib/, CDAC_LIB unset)
    // fails naming every place it looked.
    let bare = tmp.path().join("bare");
    let bare_gdb = bare.join("share/cdac/gdb/cdac.py");
    std::fs::create_dir_all(bare_gdb.parent().expect("dir")).expect("mkdir");
    std::fs::copy(&gdb_ext, &bare_gdb).expect("copy");
    let out = Command::new("gdb")
        .args(["-batch", "-nx", "-ex"])
        .arg(format!("source {}", bare_gdb.display()))
        .env_remove("CDAC_LIB")
        .stdin(Stdio::null())
        .output()
        .expect("run gdb");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    let bare = bare.canonicalize().expect("bare");
    for place in [
        bare.join("lib/libcdac.so"),
        bare.join("share/cdac/target/release/libcdac.so"),
    ] {
        assert!(
            said.contains(&format!("{} (not found)", place.display())),
            "gdb without a library: {place:?} not named in: {said}"
        );
    }
    assert!(
        said.contains("cannot load libcdac.so"),
        "gdb without a library: {said}"
    );
}
