//! One exit-code rule for every command (docs/cli.md): 0 when everything asked was
//! answered, 1 when some item could not be (the output still says which) or the target
//! could not be read, 2 for usage errors (a malformed command line). Checked on the live
//! .NET 10 testbed and on a core that is not a .NET process.

use crate::common;

use std::process::Command;

use common::{perf_map, testbed_of, Variant};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cdac(args: &[&str]) -> Run {
    let out = Command::new(crate::common::cdac_exe())
        .args(args)
        .output()
        .expect("run cdac");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A method of the testbed from the runtime's perf map: (start, size).
fn a_method(tb: &common::Testbed) -> (u64, u64) {
    perf_map(&tb.perf_map_for(None))
        .into_iter()
        .find(|(_, _, n)| n.contains("CatchBlocker::CatchOwner("))
        .map(|(s, z, _)| (s, z))
        .expect("CatchOwner in the perf map")
}

#[test]
fn usage_errors_exit_2() {
    let tb = testbed_of(Variant::Net10);
    let pid = tb.pid.to_string();
    for args in [
        vec!["ip2md", "--pid", &pid, "zz"],
        vec!["ip2md", "--pid", &pid, "0x12", "not-hex"],
        vec!["eh", "--pid", &pid, "0xg"],
        vec!["unwind", "--pid", &pid, ""],
        vec!["stacks", "--pid", &pid, "--threads", "abc"],
        vec!["methods", "--pid", &pid, "--filter", "("],
        vec!["perfmap", "--dump", "/nonexistent.core"],
        vec!["info"],
        vec!["info", "--pid", &pid, "--dump", "x.core"],
        vec!["no-such-command"],
        vec!["ip2md", "--pid", &pid],
    ] {
        let r = cdac(&args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(!r.stderr.is_empty(), "{args:?}: says nothing");
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
    // The malformed item is named.
    let r = cdac(&["ip2md", "--pid", &pid, "0x12", "not-hex"]);
    assert!(r.stderr.contains("not-hex"), "{}", r.stderr);
}

#[test]
fn every_item_answered_exits_0_else_1_naming_the_item() {
    let tb = testbed_of(Variant::Net10);
    let pid = tb.pid.to_string();
    let (start, size) = a_method(tb);
    let inside = format!("{:#x}", start + size / 2);
    let outside = "0x1234";

    let r = cdac(&["ip2md", "--pid", &pid, &inside]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("CatchOwner"), "{}", r.stdout);
    // One address outside managed code: the others are still answered, that one named.
    let r = cdac(&["ip2md", "--pid", &pid, "--json", &inside, outside]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    assert_eq!(v[0]["start"], format!("{start:#x}"));
    assert_eq!(v[1]["address"], outside);
    assert_eq!(v[1]["error"], "not in managed code");
    assert!(
        r.stderr.contains("1 of 2 address(es) not answered"),
        "{}",
        r.stderr
    );
    // Text: the same.
    let r = cdac(&["ip2md", "--pid", &pid, outside]);
    assert_eq!(r.code, 1);
    assert!(
        r.stdout.contains("0x1234: not in managed code"),
        "{}",
        r.stdout
    );
    // Malformed lines on standard input are items, not usage errors.
    let out = Command::new(crate::common::cdac_exe())
        .args(["ip2md", "--pid", &pid, "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            writeln!(stdin, "{inside}\nbogus")?;
            drop(stdin);
            child.wait_with_output()
        })
        .expect("run cdac");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("bogus: not a hex address"));

    // eh / unwind of one address: answered, or not.
    assert_eq!(cdac(&["eh", "--pid", &pid, &inside]).code, 0);
    assert_eq!(cdac(&["unwind", "--pid", &pid, &inside]).code, 0);
    for cmd in ["eh", "unwind"] {
        let r = cdac(&[cmd, "--pid", &pid, outside]);
        assert_eq!(r.code, 1, "{cmd}");
        assert!(
            r.stderr.contains("0x1234 is not in managed code"),
            "{cmd}: {}",
            r.stderr
        );
    }

    // stacks --threads: an id the target does not have is named.
    let r = cdac(&["stacks", "--pid", &pid, "--threads", "99999"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("no thread 99999"), "{}", r.stderr);
    let r = cdac(&[
        "stacks",
        "--pid",
        &pid,
        "--threads",
        &format!("{pid},99999"),
        "--json",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    assert_eq!(v["threads"].as_array().map(Vec::len), Some(1));
    assert!(v["warnings"].to_string().contains("no thread 99999"), "{v}");
    // The main thread by its OS id and by its managed id (1).
    for id in [pid.as_str(), "1"] {
        let r = cdac(&["stacks", "--pid", &pid, "--threads", id]);
        assert_eq!(r.code, 0, "{id}: {}", r.stderr);
        assert!(r.stdout.contains(&format!("Thread {pid} ")), "{}", r.stdout);
    }

    // Commands that answer everything.
    for args in [
        vec!["info", "--pid", &pid],
        vec!["modules", "--pid", &pid],
        vec!["threads", "--pid", &pid],
        vec!["schema", "stacks"],
    ] {
        let r = cdac(&args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }
}

#[test]
fn unreadable_targets_exit_1() {
    // No such process, and a core that is not a core.
    let r = cdac(&["info", "--pid", "999999999"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("cdac: error:"), "{}", r.stderr);
    let not_core = common::scratch("exit-codes").join("not-a-core");
    std::fs::write(&not_core, b"hello").expect("write");
    let r = cdac(&["threads", "--dump", not_core.to_str().expect("path")]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("not-a-core"), "{}", r.stderr);
}
