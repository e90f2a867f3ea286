//! A .NET process in PID and mount namespaces of its own, as a container runs it
//! (`unshare --pid --fork --mount-proc --mount`: the runtime, and the testbed's own
//! account of its threads, see the namespace's ids; its files are bind-mounted where the
//! host has nothing), read from the host by its host pid, as an engineer on the node
//! reads it, live and from a gcore taken on the host. The runtime records its threads' ids
//! as its namespace numbers them; cdac tells each thread by the id the host sees (live by
//! the kernel's NSpid, in the dump by stack) and keeps the recorded one beside it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{self, Testbed, Variant};

/// Where the namespaced testbed's files are, in its mount namespace only.
const APP: &str = "/mnt/cdac-app";

/// The testbed started in PID and mount namespaces of its own, known by its host pid.
fn start_in_pid_namespace(variant: Variant) -> Testbed {
    let exe = common::testbed_exe(variant);
    let dir = common::scratch(&format!("namespaced-{}", variant.name()));
    let manifest_path = dir.join("manifest.json");
    // Its files bind-mounted where this process has nothing: a tmpfs over /mnt that only
    // the namespace sees.
    let folder = exe.parent().expect("the testbed's folder");
    let child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--mount", "--kill-child"])
        .args(["sh", "-c"])
        .arg(format!(
            "mount -t tmpfs none /mnt && mkdir {APP} && mount --bind '{}' {APP} && \
             exec {APP}/{} \"$@\"",
            folder.display(),
            variant.executable()
        ))
        .arg("sh")
        .arg("--manifest")
        .arg(&manifest_path)
        .args(["--max-seconds", "900"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("testbed.log")).expect("log"))
        .spawn()
        .expect("run unshare");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !manifest_path.exists() {
        assert!(
            Instant::now() < deadline,
            "the namespaced testbed wrote no manifest; see {}",
            dir.join("testbed.log").display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).expect("manifest")).expect("JSON");
    // unshare's child, the namespace's first process, is the testbed.
    let u = child.id();
    let children = std::fs::read_to_string(format!("/proc/{u}/task/{u}/children"))
        .expect("unshare's children");
    let pid: i32 = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the testbed's host pid");
    assert_eq!(
        manifest["pid"], 1,
        "the testbed sees itself as its namespace's first process"
    );
    let runtime = manifest["libcoreclr"].as_str().expect("libcoreclr");
    assert!(
        runtime.starts_with(APP) && !std::path::Path::new(runtime).exists(),
        "the runtime at {runtime}, which this process cannot open"
    );
    Testbed::adopt(variant, pid, manifest, dir, child)
}

fn cdac(args: &[&str]) -> (Value, String) {
    let out = Command::new(common::cdac_exe())
        .args(args)
        .output()
        .expect("run cdac");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("cdac {args:?}: {e}: {stderr}"));
    (v, stderr)
}

/// A gcore of the testbed, taken from the host (its notes hold the host's thread ids).
fn gcore_from_the_host(tb: &Testbed) -> std::path::PathBuf {
    let prefix = tb.dir.join("host-gcore");
    let status = Command::new("gcore")
        .env_remove("DEBUGINFOD_URLS")
        .arg("-o")
        .arg(&prefix)
        .arg(tb.pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run gcore");
    assert!(status.success(), "gcore {}", tb.pid);
    tb.dir.join(format!("host-gcore.{}", tb.pid))
}

/// From the host, live and on a gcore: no check fails and nothing warns; the thread ids
/// are tied by the rule said (NSpid live, stacks in the dump); every parked thread is its
/// runtime thread (host id a thread of the target, namespace id the testbed's own), with
/// its frames and chain as without a namespace; the locks' deadlocks are found.
fn read_from_the_host(variant: Variant) {
    let tb = start_in_pid_namespace(variant);
    let pid = tb.pid.to_string();
    let core = gcore_from_the_host(&tb);
    let core = core.display().to_string();
    // The gcore is read with the running container's root as its sysroot, as an engineer
    // on the node would: the files that back its unwritten memory are only in there.
    let root = format!("/proc/{pid}/root");
    let live = vec!["--pid", pid.as_str()];
    let dump = vec!["--dump", core.as_str(), "--sysroot", root.as_str()];
    for (target, rule, kind) in [(live, "NSpid", "live"), (dump, "by stack", "gcore")] {
        let what = format!("{} in a PID namespace, {kind}", variant.name());
        let run = |command: &[&str]| cdac(&[command, &target[..]].concat());

        let (info, stderr) = run(&["info", "--json"]);
        let checks = info["checks"].as_array().expect("checks");
        for c in checks {
            assert_ne!(c["status"], "failed", "{what}: {c}");
        }
        assert!(!stderr.to_lowercase().contains("warn"), "{what}: {stderr}");

        let (threads, _) = run(&["threads", "--json"]);
        assert!(
            threads["thread_ids"]
                .as_str()
                .is_some_and(|r| r.contains(rule)),
            "{what}: {}",
            threads["thread_ids"]
        );
        let listed = threads["threads"].as_array().expect("threads");
        let parked = tb.manifest["threads"].as_array().expect("manifest threads");
        for p in parked {
            let t = listed
                .iter()
                .find(|t| t["managed"]["managed_id"] == p["managed_id"])
                .unwrap_or_else(|| panic!("{what}: no runtime thread for {p}"));
            assert_eq!(
                t["managed"]["os_id_in_namespace"], p["os_tid"],
                "{what}: {t}"
            );
            let host = t["os_id"].as_i64().expect("os_id");
            assert_ne!(Some(host), p["os_tid"].as_i64(), "{what}: {t}");
            assert!(
                std::path::Path::new(&format!("/proc/{pid}/task/{host}")).exists(),
                "{what}: {host} is no thread of {pid}"
            );
        }

        // Stacks: the same checks as without a namespace, on the namespace's ids.
        let (mut stacks, _) = run(&["stacks", "--json"]);
        for t in stacks["threads"].as_array_mut().expect("threads") {
            if let Some(inner) = t["managed"]["os_id_in_namespace"].as_i64() {
                t["os_id"] = Value::from(inner);
            }
        }
        crate::stacks::check_parked_threads(&tb, &stacks, &what);
        // Source lines come from the PDBs in the container's files: through the process's
        // root live, through the sysroot for the dump.
        let with_line = stacks["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .flat_map(|t| t["frames"].as_array().into_iter().flatten())
            .filter(|f| {
                f["source"]["file"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("ParkedThreads.cs"))
            })
            .count();
        assert!(with_line > 8, "{what}: {with_line} frames with a line");

        // The monitor deadlock, and the System.Threading.Lock one where the runtime has
        // Lock.
        let (locks, _) = run(&["locks", "--json"]);
        let expected = 1 + usize::from(!tb.manifest["locks"]["lock_deadlock"].is_null());
        assert_eq!(
            locks["deadlocks"].as_array().map(Vec::len),
            Some(expected),
            "{what}: {locks}"
        );
        assert!(
            locks["problems"].as_array().is_some_and(Vec::is_empty),
            "{what}: {locks}"
        );
        eprintln!(
            "{what}: {} checks, {} parked threads matched by host and namespace id ({})",
            checks.len(),
            parked.len(),
            threads["thread_ids"]
        );
    }
}

#[test]
fn a_process_in_its_own_pid_namespace_is_read_from_the_host_net10() {
    read_from_the_host(Variant::Net10);
}

#[test]
fn a_process_in_its_own_pid_namespace_is_read_from_the_host_net11() {
    read_from_the_host(Variant::Net11);
}

#[test]
fn a_process_in_its_own_pid_namespace_is_read_from_the_host_net8() {
    read_from_the_host(Variant::Net8);
}
