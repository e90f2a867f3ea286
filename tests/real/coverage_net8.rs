//! Function coverage from outside the process (`cdac::coverage`, `cdac coverage`) on the
//! real .NET 8 testbed (8.0.33, or 8.0.0 with `CDAC_NET8_VARIANT=net8.0.0`), live: written
//! as a MIP function-coverage profile and read back, every method the testbed called is
//! covered (its Reflection.Emit methods, the `MeasureShape` family, its named LCG lambdas
//! and the precompiled library's called methods), and the methods it defines but never
//! calls (`Shape.Area`, `Shape.Describe`, the precompiled `NeverCalled*`) are listed and
//! not covered. The CLI writes the same profile.

use crate::common;

use std::collections::HashMap;

use cdac::coverage::function_coverage;
use cdac::formats::mip::{function_coverage_profile, show_rows, FileKind, Header, Layout, Profile};
use cdac::runtime::{OpenOptions, Runtime};
use common::{scratch, testbed};

#[test]
fn workload_methods_are_covered_and_uncalled_ones_are_not() {
    let tb = testbed();
    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let report = function_coverage(rt.target(), rt.descriptor()).expect("coverage");
    assert_eq!(report.modules_without_metadata, 0);
    // Through the file format and back.
    let profile = function_coverage_profile(
        "testbed",
        report
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.covered)),
        Layout::New,
    )
    .expect("profile");
    let bytes = profile.to_bytes().expect("bytes");
    let header = Header::parse(&bytes).expect("header");
    assert_eq!(header.kind, FileKind::Profile);
    let back = Profile::parse(&bytes).expect("parses");
    let rows = show_rows(&back);
    assert_eq!(rows.len(), report.functions.len());
    let mut by_name: HashMap<&str, bool> = HashMap::new();
    for r in &rows {
        let name = r.name.as_deref().expect("every function is named");
        // A name listed twice (overloads print alike only if identical) is covered if any is.
        *by_name.entry(name).or_default() |= r.covered;
    }
    let covered = |needle: &str| -> Vec<bool> {
        by_name
            .iter()
            .filter(|(n, _)| n.contains(needle))
            .map(|(_, c)| *c)
            .collect()
    };
    for m in tb.manifest["emitted_methods"]
        .as_array()
        .expect("emitted_methods")
    {
        let needle = format!(
            "{}::{}(",
            m["type"].as_str().expect("type"),
            m["name"].as_str().expect("name")
        );
        let found = covered(&needle);
        assert!(!found.is_empty(), "{needle} not listed");
        assert!(found.iter().any(|c| *c), "{needle} ran but is not covered");
    }
    for name in ["MeasureShape", "MeasureObject", "MeasureEmptyIntArray"] {
        let needle = format!("Cdac.Testbed.Types.Shape::{name}(");
        assert_eq!(covered(&needle), vec![true], "{needle}");
    }
    for m in tb.manifest["lcg_methods"].as_array().expect("lcg_methods") {
        let needle = format!(
            "dynamicClass::{}(",
            m["method_name"].as_str().expect("method_name")
        );
        assert!(
            covered(&needle).iter().any(|c| *c),
            "{needle} ran but is not covered"
        );
    }
    for name in ["Area", "Describe"] {
        let needle = format!("Cdac.Testbed.Types.Shape::{name}(");
        assert_eq!(covered(&needle), vec![false], "{needle} never ran");
    }
    // The precompiled library: a method the testbed called has code (its ReadyToRun entry
    // point resolved, or JIT'ed after tiering up), one it never called has none.
    let r2r = tb.manifest["r2r"]["methods"]
        .as_array()
        .expect("r2r methods");
    let never_called = r2r.iter().filter(|m| m["called"] == false).count();
    assert!(never_called >= 3 && never_called < r2r.len(), "{r2r:?}");
    for m in r2r {
        let needle = format!(
            "{}::{}(",
            m["type"].as_str().expect("type"),
            m["name"].as_str().expect("name")
        );
        let called = m["called"].as_bool().expect("called");
        let found = covered(&needle);
        assert!(!found.is_empty(), "{needle} not listed");
        assert_eq!(
            found.iter().any(|c| *c),
            called,
            "{needle}: called {called}"
        );
    }
    let n_covered = rows.iter().filter(|r| r.covered).count();
    eprintln!(
        "coverage: {} functions listed, {n_covered} covered, from {} code blocks",
        rows.len(),
        report.code_blocks
    );
    assert!(n_covered > 1000 && rows.len() > 10 * n_covered / 2);

    // The CLI writes a profile with the same coverage.
    let out = scratch("coverage").join("testbed.mip");
    let status = std::process::Command::new(crate::common::cdac_exe())
        .args(["coverage", "--pid", &tb.pid.to_string(), "-o"])
        .arg(&out)
        .status()
        .expect("run cdac");
    assert!(status.success());
    let cli = Profile::parse(&std::fs::read(&out).expect("written")).expect("parses");
    let cli_rows = show_rows(&cli);
    let cli_covered: HashMap<&str, bool> = cli_rows
        .iter()
        .filter_map(|r| Some((r.name.as_deref()?, r.covered)))
        .collect();
    for name in [
        "Cdac.Testbed.Types.Shape::Area(",
        "Cdac.Testbed.Handlers::Drive(",
    ] {
        let (n, c) = cli_covered
            .iter()
            .find(|(n, _)| n.contains(name))
            .expect("listed");
        assert_eq!(*c, name.contains("Drive"), "{n}");
    }
}
