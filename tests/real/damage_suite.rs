//! The damage suite (`scripts/damage-suite`) over the .NET 10 testbed's full dump: per
//! variant and command, how much of the intact answer survives, held to the bounds issue 34
//! sets: a heap walk goes on past damage (5,000 random writes keep at least 80 % of the
//! heap and 50 % of the live heap), a dump without notes still lists every runtime thread
//! and never exits 0 from `stacks` or `analyze`, a garbled descriptor or a zeroed runtime
//! image is read from the runtime's file, garbled CoreLib metadata names nothing wrongly,
//! and nowhere is a partial answer an exit 0, a name the intact dump does not have printed
//! without a warning, or a crash.

use std::collections::HashMap;
use std::process::Command;

use crate::common::{cdac_exe, repo, scratch, testbed_of, Variant};
use serde_json::Value;

/// One row of the suite: (variant, command) → the row.
fn suite() -> HashMap<(String, String), Value> {
    let tb = testbed_of(Variant::Net10);
    let dump = tb.dump("full");
    let work = scratch("damage-suite");
    let report = work.join("suite.json");
    let out = Command::new(repo().join("scripts/damage-suite"))
        .arg(&dump)
        .args(["--cdac", &cdac_exe(), "--seed", "1", "--out"])
        .arg(work.join("variants"))
        .arg("--json")
        .arg(&report)
        .output()
        .expect("run scripts/damage-suite");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "damage-suite failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The table, for whoever reads the test's output.
    println!("{table}");
    let value: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("suite.json")).expect("JSON");
    value["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                (
                    r["variant"].as_str().unwrap_or_default().to_string(),
                    r["command"].as_str().unwrap_or_default().to_string(),
                ),
                r.clone(),
            )
        })
        .collect()
}

#[test]
fn damaged_dumps_keep_what_survives_and_say_what_was_lost() {
    let rows = suite();
    let row = |variant: &str, command: &str| -> &Value {
        rows.get(&(variant.to_string(), command.to_string()))
            .unwrap_or_else(|| panic!("no row {variant} / {command}"))
    };
    let kept = |variant: &str, command: &str| row(variant, command)["kept"].as_f64().unwrap();
    let exit = |variant: &str, command: &str| row(variant, command)["exit"].as_i64();

    // Everywhere: no crash, no unwarned new name, no exit 0 on a partial answer.
    for ((variant, command), r) in &rows {
        assert_eq!(r["crashed"], false, "{variant} / {command}: {r}");
        assert_eq!(r["unwarned_new_names"], 0, "{variant} / {command}: {r}");
        if r["kept"].as_f64().unwrap() < 0.999 {
            assert_ne!(r["exit"], 0, "{variant} / {command}: partial, exit 0: {r}");
        }
    }

    // Random writes: the walk goes on past each damaged object.
    assert!(kept("random-writes-5000", "heap") >= 0.8);
    assert!(kept("random-writes-5000", "heap --live") >= 0.5);
    for v in ["heap-writes-200", "heap-writes-2000"] {
        assert!(kept(v, "heap") >= 0.8, "{v}: {}", row(v, "heap"));
        assert!(
            kept(v, "heap --live") >= 0.5,
            "{v}: {}",
            row(v, "heap --live")
        );
        assert_eq!(exit(v, "heap"), Some(1), "{v}: the damage is said");
    }

    // No notes: every runtime thread listed; stacks start at explicit Frames; exit 1.
    assert_eq!(kept("zeroed-notes", "threads"), 1.0);
    assert!(
        kept("zeroed-notes", "stacks") >= 0.5,
        "{}",
        row("zeroed-notes", "stacks")
    );
    for c in ["stacks", "analyze", "heap --live"] {
        assert_eq!(exit("zeroed-notes", c), Some(1), "zeroed notes, {c}");
    }

    // The descriptor or the runtime's read-only pages lost: read from the runtime's file,
    // every command answers in full, and says where the descriptor came from.
    for v in ["garbled-descriptor", "zeroed-runtime-image"] {
        for c in [
            "threads",
            "stacks",
            "heap",
            "heap --live",
            "analyze",
            "finalizequeue",
        ] {
            assert_eq!(kept(v, c), 1.0, "{v} / {c}: {}", row(v, c));
            assert_eq!(row(v, c)["warned"], true, "{v} / {c}");
        }
        let said = row(v, "threads")["stderr_tail"].to_string();
        assert!(
            said.contains("read it from") && said.contains("libcoreclr.so"),
            "{said}"
        );
    }

    // Garbled CoreLib metadata: names come from CoreLib's file, with a warning.
    for c in ["stacks", "heap"] {
        assert_eq!(
            kept("corelib-writes-5000", c),
            1.0,
            "{}",
            row("corelib-writes-5000", c)
        );
        assert_eq!(row("corelib-writes-5000", c)["new_names"], 0);
        assert!(row("corelib-writes-5000", c)["stderr_tail"]
            .to_string()
            .contains("names are read from the file"));
    }

    // Truncations lose the runtime's data (its globals are at the file's end): said, exit 1.
    for v in ["truncate-50", "truncate-90"] {
        for c in ["threads", "heap", "analyze"] {
            assert_eq!(exit(v, c), Some(1), "{v} / {c}");
        }
    }
}
