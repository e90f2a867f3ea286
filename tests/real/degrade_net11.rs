//! A descriptor cdac does not fully know fails only the commands that need what it does
//! not know. Each case rewrites the real .NET 11.0.0 descriptor (exported by `cdac info
//! --export-descriptor` from the testbed's full dump), reads the same dump with it
//! (`--descriptor`), and runs every command of the list: those that need the rewritten part
//! fail naming the contract and the version the runtime has, all others answer, and a
//! command that still answers gives the same answer as with the runtime's own descriptor.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{self, Variant};

/// The commands tried, each with the arguments after the command name (`--json` and the
/// target are added).
const COMMANDS: &[&str] = &[
    "info", "threads", "modules", "stacks", "heap", "locks", "analyze",
];

struct Answer {
    ok: bool,
    stdout: Value,
    stderr: String,
}

fn run(dump: &Path, descriptor: Option<&Path>, command: &str) -> Answer {
    let mut cmd = Command::new(common::cdac_exe());
    cmd.arg(command).arg("--dump").arg(dump).arg("--json");
    if let Some(d) = descriptor {
        cmd.arg("--descriptor").arg(d);
    }
    let out = cmd.output().expect("run cdac");
    Answer {
        ok: out.status.success(),
        stdout: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The runtime's descriptor, every part merged, as JSON.
fn exported(dump: &Path, dir: &Path) -> Value {
    let path = dir.join("net11.json");
    let out = Command::new(common::cdac_exe())
        .args(["info", "--dump"])
        .arg(dump)
        .arg("--export-descriptor")
        .arg(&path)
        .output()
        .expect("run cdac info");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&path).expect("exported")).expect("JSON")
}

fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(v).expect("JSON")).expect("write");
    path
}

/// A summary of an answer that must not change with the descriptor: counts, not addresses
/// of cdac's own making.
fn gist(command: &str, v: &Value) -> Value {
    match command {
        "threads" => v["thread_count"].clone(),
        "modules" => Value::from(v["modules"].as_array().map_or(0, Vec::len)),
        "heap" => v["objects"].clone(),
        "stacks" => Value::from(v["threads"].as_array().map_or(0, |t| {
            t.iter()
                .filter_map(|t| t["frames"].as_array())
                .map(Vec::len)
                .sum::<usize>()
        })),
        _ => Value::Null,
    }
}

/// Reads the dump with `descriptor` and checks that exactly the commands in `fail` fail,
/// each naming `needle` (the contract and its version), and that the others answer as with
/// the runtime's own descriptor.
fn check(
    dump: &Path,
    descriptor: &Path,
    fail: &[&str],
    needle: &str,
    baseline: &[(String, Value)],
) {
    for &command in COMMANDS {
        let a = run(dump, Some(descriptor), command);
        if fail.contains(&command) {
            assert!(!a.ok, "{command} answered with {}", descriptor.display());
            assert!(
                a.stderr.contains(needle),
                "{command} with {}: the error names no {needle}: {}",
                descriptor.display(),
                a.stderr
            );
        } else {
            assert!(
                a.ok,
                "{command} failed with {}: {}",
                descriptor.display(),
                a.stderr
            );
            let want = baseline.iter().find(|(c, _)| c == command).map(|(_, g)| g);
            assert_eq!(
                Some(&gist(command, &a.stdout)),
                want,
                "{command} answered otherwise with {}",
                descriptor.display()
            );
        }
    }
}

#[test]
fn unknown_parts_fail_only_the_commands_that_need_them() {
    let tb = common::testbed_of(Variant::Net11);
    let dump = tb.dump("full");
    let dir = common::scratch("degrade-net11");
    let own = exported(&dump, &dir);
    let baseline: Vec<(String, Value)> = COMMANDS
        .iter()
        .map(|&c| {
            let a = run(&dump, None, c);
            assert!(a.ok, "{c} on the runtime's own descriptor: {}", a.stderr);
            (c.to_string(), gist(c, &a.stdout))
        })
        .collect();
    // The export read back is the runtime's own description: every command answers alike.
    check(&dump, &write(&dir, "own", &own), &[], "", &baseline);

    // An unknown version of one contract fails the commands that need it.
    let with_version = |contract: &str, version: &str| {
        let mut v = own.clone();
        v["contracts"][contract] = Value::from(version);
        write(&dir, &format!("{contract}-{version}"), &v)
    };
    check(
        &dump,
        &with_version("SyncBlock", "c9"),
        &["locks"],
        "SyncBlock c9",
        &baseline,
    );
    check(
        &dump,
        &with_version("GC", "c9"),
        &["heap", "locks"],
        "GC c9",
        &baseline,
    );
    check(
        &dump,
        &with_version("ExecutionManager", "c9"),
        &["stacks", "locks", "analyze"],
        "ExecutionManager c9",
        &baseline,
    );

    // A contract cdac has never heard of changes nothing, and `info` says it is not used.
    let mut unknown = own.clone();
    unknown["contracts"]["Quux"] = Value::from("c1");
    let path = write(&dir, "unknown-contract", &unknown);
    check(&dump, &path, &[], "", &baseline);
    let info = run(&dump, Some(&path), "info");
    assert_eq!(info.stdout["contract_support"]["Quux"], "not used");

    // A newer format is read with format 2's rules and said so; everything answers.
    let mut newer = own.clone();
    newer["version"] = Value::from(3);
    let path = write(&dir, "format-3", &newer);
    check(&dump, &path, &[], "", &baseline);
    let threads = run(&dump, Some(&path), "threads");
    assert!(
        threads.stderr.contains("format 3"),
        "no word of the newer format: {}",
        threads.stderr
    );

    // Without the GC contract and the GC's own description (its sub-descriptor), the heap
    // is still read, through the GC's table in g_dacTable, and `info` says how.
    let mut no_gc = own.clone();
    no_gc["contracts"]
        .as_object_mut()
        .expect("contracts")
        .remove("GC");
    for (kind, names) in [("types", GC_TYPES), ("globals", GC_GLOBALS)] {
        for name in names {
            let removed = no_gc[kind].as_object_mut().expect(kind).remove(*name);
            assert!(removed.is_some(), "the export has no {kind} {name}");
        }
    }
    let path = write(&dir, "no-gc", &no_gc);
    check(&dump, &path, &[], "", &baseline);
    let info = run(&dump, Some(&path), "info");
    let gc_check = info.stdout["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "gc-heap")
        .expect("gc-heap check");
    assert_eq!(gc_check["status"], "passed", "{gc_check}");
    assert!(
        gc_check["detail"]
            .as_str()
            .is_some_and(|d| d.contains("g_dacTable slot")),
        "{gc_check}"
    );
}

/// What the GC sub-descriptor of 11.0.0 describes (read from the testbed's runtime with
/// its own descriptor): removing them leaves the main descriptor as a runtime without that
/// sub-descriptor would give it.
const GC_TYPES: &[&str] = &[
    "Generation",
    "CFinalize",
    "HeapSegment",
    "OomHistory",
    "HandleTableMap",
    "HandleTableBucket",
    "HandleTable",
    "TableSegment",
    "CardTableInfo",
    "RegionFreeList",
];

/// The globals of the same sub-descriptor.
const GC_GLOBALS: &[&str] = &[
    "TotalGenerationCount",
    "CFinalizeFillPointersLength",
    "InterestingDataLength",
    "CompactReasonsLength",
    "ExpandMechanismsLength",
    "InterestingMechanismBitsLength",
    "GlobalMechanismsLength",
    "InitialHandleTableArraySize",
    "DebugDestroyedHandleValue",
    "HandleSegmentSize",
    "HandleBlocksPerSegment",
    "HandleMaxInternalTypes",
    "HandlesPerBlock",
    "BlockInvalid",
    "CardTableInfoSize",
    "CountFreeRegionKinds",
    "GCHeapMarkArray",
    "GCHeapNextSweepObj",
    "GCHeapBackgroundMinSavedAddr",
    "GCHeapBackgroundMaxSavedAddr",
    "GCHeapAllocAllocated",
    "GCHeapEphemeralHeapSegment",
    "GCHeapCardTable",
    "GCHeapFinalizeQueue",
    "GCHeapGenerationTable",
    "GCHeapOomData",
    "GCHeapInternalRootArray",
    "GCHeapInternalRootArrayIndex",
    "GCHeapHeapAnalyzeSuccess",
    "GCHeapInterestingData",
    "GCHeapCompactReasons",
    "GCHeapExpandMechanisms",
    "GCHeapInterestingMechanismBits",
    "GCHeapFreeableSohSegment",
    "GCHeapFreeableUohSegment",
    "GCHeapFreeRegions",
    "HandleTableMap",
    "BookkeepingStart",
    "GlobalFreeHugeRegions",
    "GlobalRegionsToDecommit",
    "MaxGeneration",
    "StructureInvalidCount",
    "CurrentGCState",
    "GCGlobalMechanisms",
    "GCIdentifiers",
];
