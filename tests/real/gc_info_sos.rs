//! `cdac gcinfo --json` against SOS `gcinfo` on the testbed's full dumps (.NET 10, 9, 8):
//! for every method the manifest names (emitted, framework, generic, async, LCG,
//! ReadyToRun, and the parked threads' chains), the header fields SOS prints, the
//! untracked slots, the interruptible ranges, the live slots SOS lists at each safe point
//! and every change of the live set in fully interruptible code.
//!
//! SOS does not print tables: it decodes the live slots at every code offset (as the
//! active frame, scratch registers included, untracked slots left out) and prints the
//! differences. The test replays that walk over cdac's JSON and compares the lines.
//! Two quirks of the SOS walk are replayed too: it labels a safe point with the return
//! address of the call but (versions 2 and 3) prints its live slots one byte earlier,
//! and from a safe point on it prints no deaths until the next change of
//! interruptibility.

use crate::common::SosOutput;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::common::{self, testbed_of, Variant};
use serde_json::Value;

/// What SOS printed for one method (or what the replay of cdac's report predicts).
#[derive(Debug, Default, PartialEq, Eq)]
struct Listing {
    code_size: u32,
    frame_pointer: String,
    wants_report_only_leaf: bool,
    parameter_area: u32,
    untracked: BTreeSet<String>,
    /// Offsets where code becomes interruptible (true) or stops being (false).
    interruptibility: Vec<(u32, bool)>,
    /// Safe point (return address offset) → the slots printed as born there.
    safe_points: BTreeMap<u32, BTreeSet<String>>,
    /// Offset → `+slot` / `-slot` printed there (outside safe-point lines).
    changes: BTreeMap<u32, BTreeSet<String>>,
}

/// Every MethodDesc the manifest names.
fn method_descs(manifest: &Value) -> Vec<u64> {
    let mut mds = Vec::new();
    let mut add = |list: &Value| {
        for m in list.as_array().into_iter().flatten() {
            if let Some(md) = m["method_desc"].as_str() {
                mds.push(common::hex(&Value::from(md)));
            }
        }
    };
    for key in [
        "emitted_methods",
        "framework_methods",
        "generics",
        "async_methods",
        "lcg_methods",
    ] {
        add(&manifest[key]);
    }
    add(&manifest["r2r"]["methods"]);
    for t in manifest["threads"].as_array().into_iter().flatten() {
        for md in t["chain_method_descs"].as_array().into_iter().flatten() {
            mds.push(common::hex(md));
        }
    }
    let mut seen = BTreeSet::new();
    mds.retain(|m| seen.insert(*m));
    mds
}

/// SOS `gcinfo` of each code address in one `dotnet-dump analyze` session, by code start.
fn sos_gcinfo(dump: &Path, starts: &[u64]) -> BTreeMap<u64, Listing> {
    let mut cmd = Command::new(common::dotnet_dump());
    cmd.arg("analyze").arg(dump);
    for start in starts {
        cmd.args(["-c", &format!("gcinfo {start:#x}")]);
    }
    let out = cmd.args(["-c", "exit"]).sos_output();
    assert!(out.status.success(), "dotnet-dump failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut listings = BTreeMap::new();
    for block in text.split("entry point ").skip(1) {
        let mut lines = block.lines();
        let entry = u64::from_str_radix(lines.next().expect("entry").trim(), 16).expect("hex");
        listings.insert(entry, parse_listing(lines));
    }
    listings
}

fn parse_listing<'a>(lines: impl Iterator<Item = &'a str>) -> Listing {
    let mut l = Listing::default();
    let hex = |s: &str| u32::from_str_radix(s.trim(), 16).expect("SOS hex");
    for line in lines.map(str::trim) {
        if line.starts_with("No GC info") {
            break;
        }
        if let Some(v) = line.strip_prefix("Code size:") {
            l.code_size = hex(v);
        } else if let Some(v) = line.strip_prefix("Frame pointer:") {
            l.frame_pointer = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("Wants Report Only Leaf:") {
            l.wants_report_only_leaf = v.trim() == "1";
        } else if let Some(v) = line.strip_prefix("Size of parameter area:") {
            l.parameter_area = hex(v);
        } else if let Some(v) = line.strip_prefix("Untracked:") {
            l.untracked = v
                .split_whitespace()
                .map(|t| t.trim_start_matches('+').to_string())
                .collect();
        } else if line.len() > 8 && line.as_bytes()[..8].iter().all(u8::is_ascii_hexdigit) {
            let offset = hex(&line[..8]);
            let rest = line[8..].trim();
            if rest == "interruptible" {
                l.interruptibility.push((offset, true));
            } else if rest == "not interruptible" {
                l.interruptibility.push((offset, false));
            } else if let Some(tokens) = rest.strip_prefix("is a safepoint:") {
                l.safe_points.insert(
                    offset,
                    tokens
                        .split_whitespace()
                        .map(|t| t.trim_start_matches('+').to_string())
                        .collect(),
                );
            } else {
                l.changes
                    .entry(offset)
                    .or_default()
                    .extend(rest.split_whitespace().map(str::to_string));
            }
        } else {
            // SOS ends a listing it could not finish with a line saying why.
            assert!(
                !(line.starts_with("reported") || line.contains("decoder failed")),
                "SOS: {line}"
            );
        }
    }
    l
}

/// A slot as SOS prints it: `rbx`, `rbp-30`, `sp+10`, `caller.sp-8`, then `(pinned)`,
/// `(interior)`. SOS swaps the base of an SP-relative slot with a negative offset to the
/// caller's SP and of a caller-SP-relative one with a non-negative offset to the SP.
fn sos_name(slot: &Value, frame: &str) -> String {
    let mut name = match slot["register"].as_u64() {
        Some(_) => slot["name"].as_str().expect("name").to_string(),
        None => {
            let offset = slot["offset"].as_i64().expect("offset");
            let base = match (slot["base"].as_str().expect("base"), offset < 0) {
                ("sp", true) | ("caller_sp", true) => "caller.sp",
                ("sp", false) | ("caller_sp", false) => "sp",
                _ => frame,
            };
            let sign = if offset < 0 { '-' } else { '+' };
            format!("{base}{sign}{:x}", offset.unsigned_abs())
        }
    };
    if slot["pinned"].as_bool() == Some(true) {
        name.push_str("(pinned)");
    }
    if slot["interior"].as_bool() == Some(true) {
        name.push_str("(interior)");
    }
    name
}

/// The listing SOS's walk over every offset produces from cdac's report.
fn replay(r: &Value) -> Listing {
    let h = &r["header"];
    let frame = h["stack_base_register"]
        .as_str()
        .unwrap_or("<none>")
        .to_string();
    let slots: Vec<String> = r["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .map(|s| sos_name(s, &frame))
        .collect();
    let names = |live: &Value| -> BTreeSet<String> {
        live.as_array()
            .expect("live")
            .iter()
            .map(|i| slots[i.as_u64().expect("index") as usize].clone())
            .collect()
    };
    let mut l = Listing {
        code_size: h["code_length"].as_u64().expect("code length") as u32,
        frame_pointer: frame.clone(),
        wants_report_only_leaf: h["wants_report_only_leaf"].as_bool().expect("leaf"),
        parameter_area: h["size_of_stack_outgoing_and_scratch_area"]
            .as_u64()
            .unwrap_or(0) as u32,
        ..Listing::default()
    };
    for (i, s) in r["slots"].as_array().expect("slots").iter().enumerate() {
        if s["untracked"].as_bool() == Some(true) {
            l.untracked.insert(slots[i].clone());
        }
    }
    let ranges: Vec<(u32, u32)> = r["interruptible_ranges"]
        .as_array()
        .expect("ranges")
        .iter()
        .map(|x| {
            (
                x["start"].as_u64().unwrap() as u32,
                x["end"].as_u64().unwrap() as u32,
            )
        })
        .collect();
    let safe_points: BTreeMap<u32, BTreeSet<String>> = r["safe_points"]
        .as_array()
        .expect("safe points")
        .iter()
        .map(|s| (s["offset"].as_u64().unwrap() as u32, names(&s["live"])))
        .collect();
    let states: BTreeMap<u32, BTreeSet<String>> = r["interruptible_states"]
        .as_array()
        .expect("states")
        .iter()
        .map(|s| (s["offset"].as_u64().unwrap() as u32, names(&s["live"])))
        .collect();
    // The walk visits a safe point at its return address in version 4 and one byte
    // before it (the stored offset) in versions 2 and 3; it prints the births there, on
    // the safe point's line when that offset is the return address itself.
    let before = u32::from(r["version"].as_u64() < Some(4));
    let by_visit: BTreeMap<u32, u32> = safe_points.keys().map(|&p| (p - before, p)).collect();
    let mut prev = BTreeSet::new();
    let mut was_interruptible = false;
    let mut after_safe_point = false;
    for o in 0..=l.code_size {
        let interruptible = ranges.iter().any(|&(s, e)| o >= s && o < e);
        if interruptible != was_interruptible {
            l.interruptibility.push((o, interruptible));
            after_safe_point = false;
            was_interruptible = interruptible;
        }
        let safe_point = by_visit.get(&o).copied();
        let cur = match safe_point {
            Some(p) => {
                after_safe_point = true;
                l.safe_points.insert(p, BTreeSet::new());
                safe_points[&p].clone()
            }
            None if interruptible => states
                .range(..=o)
                .next_back()
                .map(|(_, s)| s.clone())
                .unwrap_or_default(),
            None => BTreeSet::new(),
        };
        let born: BTreeSet<String> = cur.difference(&prev).cloned().collect();
        match safe_point {
            Some(p) if p == o => {
                l.safe_points.insert(p, born);
            }
            _ if !born.is_empty() => {
                let e = l.changes.entry(o).or_default();
                e.extend(born.iter().map(|n| format!("+{n}")));
            }
            _ => {}
        }
        if !after_safe_point {
            let died: Vec<String> = prev.difference(&cur).map(|n| format!("-{n}")).collect();
            if !died.is_empty() {
                l.changes.entry(o).or_default().extend(died);
            }
        }
        prev = cur;
    }
    l
}

/// `cdac gcinfo --json` of each address (code or MethodDesc), in order.
fn cdac_gcinfo(dump: &Path, addresses: &[u64]) -> Vec<Value> {
    let mut cmd = Command::new(crate::common::cdac_exe());
    cmd.arg("gcinfo").arg("--json").arg("--dump").arg(dump);
    for s in addresses {
        cmd.arg(format!("{s:#x}"));
    }
    let out = cmd.output().expect("run cdac");
    // Exit 1 is a partial answer: the addresses not answered say why, checked by the caller.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "cdac gcinfo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    v.as_array().expect("array").clone()
}

fn gcinfo_equals_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let dump = tb.dump("full");
    let mds = method_descs(&tb.manifest);
    // cdac finds each MethodDesc's current code; SOS is then asked about that code (SOS's
    // own MethodDesc lookup misses some tier-1 versions: it printed entry point 0 for
    // .NET 8's `Handlers::TryFilter`).
    let t1 = Instant::now();
    let by_md = cdac_gcinfo(&dump, &mds);
    let cdac_time = t1.elapsed();
    assert_eq!(by_md.len(), mds.len());
    let mut reports: BTreeMap<u64, &Value> = BTreeMap::new();
    let mut without_code = 0;
    for (md, r) in mds.iter().zip(&by_md) {
        match r["start"].as_str() {
            Some(_) => {
                reports.insert(common::hex(&r["start"]), r);
            }
            None => {
                // Methods that never ran (lazy LCG, uncalled chain members) have no code.
                let e = r["error"].as_str().unwrap_or_default();
                assert!(e.contains("MethodDesc with code"), "{md:#x}: {r}");
                without_code += 1;
            }
        }
    }
    let starts: Vec<u64> = reports.keys().copied().collect();
    let t0 = Instant::now();
    let sos = sos_gcinfo(&dump, &starts);
    let sos_time = t0.elapsed();
    let (mut fully, mut partially, mut r2r, mut versions) = (0, 0, 0, BTreeSet::new());
    let mut mismatches = Vec::new();
    for (start, r) in &reports {
        let expected = replay(r);
        let got = sos
            .get(start)
            .unwrap_or_else(|| panic!("SOS printed no listing for {start:#x}"));
        if &expected != got {
            mismatches.push(format!(
                "{} at {start:#x} (v{}):\n  sos  {got:?}\n  cdac {expected:?}",
                r["name"], r["version"]
            ));
        }
        if !expected.interruptibility.is_empty() {
            fully += 1;
        }
        if r["safe_points"].as_array().is_some_and(|s| {
            s.iter()
                .any(|p| p["live"].as_array().is_some_and(|l| !l.is_empty()))
        }) {
            partially += 1;
        }
        if r["jit_type"] == "r2r" {
            r2r += 1;
        }
        versions.insert(r["version"].as_u64().unwrap_or(0));
    }
    eprintln!(
        "{}: {} methods compared with SOS ({fully} fully interruptible, {partially} with live \
         slots at safe points, {r2r} ReadyToRun; GCInfo versions {versions:?}) of {} \
         MethodDescs ({without_code} without code); SOS {sos_time:.1?}, cdac {cdac_time:.1?}",
        variant.name(),
        starts.len(),
        mds.len()
    );
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert!(starts.len() >= 40, "only {} methods had code", starts.len());
    assert!(fully >= 1, "no fully interruptible method");
    assert!(
        partially >= 1,
        "no partially interruptible method with live slots"
    );
    assert!(r2r >= 1, "no ReadyToRun method");
}

#[test]
fn gcinfo_equals_sos_net10() {
    gcinfo_equals_sos(Variant::Net10);
}

#[test]
fn gcinfo_equals_sos_net11() {
    gcinfo_equals_sos(Variant::Net11);
}

#[test]
fn gcinfo_equals_sos_net9() {
    gcinfo_equals_sos(Variant::Net9);
}

#[test]
fn gcinfo_equals_sos_net8() {
    gcinfo_equals_sos(Variant::Net8);
}
