//! ReadyToRun PerfMaps made offline (`cdac::formats::r2r`) from the .NET 8 testbed
//! runtime's framework images (8.0.33, or 8.0.0 with `CDAC_NET8_VARIANT=net8.0.0`),
//! checked against the images and against the live runtime:
//!
//! * every entry's RVA is the start of one of the image's RUNTIME_FUNCTIONs, the entries
//!   cover every runtime function exactly once (counted per image), and the map's
//!   signature is the image's own PerfMap debug record, which our computation of the
//!   signature (MD5 of the MVID and the target tokens) reproduces;
//! * in a live testbed process, every ReadyToRun method the runtime has resolved in those
//!   images (`enumerate_code`) has an entry at its RVA, and the entry's name is the name
//!   `cdac ip2md` gives the address (`MethodNamer`), for every one of them (on 8.0.4 the
//!   bound was 99%).

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use cdac::contracts::execution_manager::enumerate::enumerate_code;
use cdac::contracts::execution_manager::JitType;
use cdac::contracts::loader::modules;
use cdac::formats::ecma::Metadata;
use cdac::formats::r2r::symbols::computed_signature;
use cdac::formats::r2r::{r2r_perf_map, R2rImage, R2rMapOptions, R2rPerfMap};
use cdac::names::{runtime_truncates_names, MethodNamer};
use cdac::runtime::{OpenOptions, Runtime};
use common::{testbed, Variant};

const IMAGES: [&str; 4] = [
    "System.Private.CoreLib.dll",
    "System.Linq.dll",
    "System.Collections.dll",
    "System.Text.RegularExpressions.dll",
];

fn runtime_dir() -> PathBuf {
    PathBuf::from(
        testbed().manifest["runtime_dir"]
            .as_str()
            .expect("manifest runtime_dir"),
    )
}

#[test]
fn entries_are_the_images_runtime_functions() {
    for name in IMAGES {
        let path = runtime_dir().join(name);
        let report = r2r_perf_map(&path, &R2rMapOptions::default()).expect("r2r_perf_map");
        let bytes = std::fs::read(&path).expect("image");
        let img = R2rImage::parse(&bytes).expect("image parses");
        let begins: BTreeSet<u32> = img.runtime_functions.iter().map(|f| f.begin).collect();
        assert_eq!(
            begins.len(),
            img.runtime_functions.len(),
            "{name}: duplicate begins"
        );
        for e in &report.map.entries {
            assert!(
                begins.contains(&e.rva),
                "{name}: entry {:#x} is no runtime function",
                e.rva
            );
            assert!(e.length > 0, "{name}: empty entry at {:#x}", e.rva);
        }
        // Every runtime function lies in exactly one entry: entries (sorted) do not
        // overlap, and the last entry starting at or before a function holds it.
        let entries = &report.map.entries;
        for w in entries.windows(2) {
            assert!(
                w[0].rva + w[0].length <= w[1].rva,
                "{name}: {:#x} overlaps {:#x}",
                w[0].rva,
                w[1].rva
            );
        }
        let mut covered = 0usize;
        for f in &img.runtime_functions {
            let i = entries.partition_point(|e| e.rva <= f.begin);
            let holder = i.checked_sub(1).map(|k| &entries[k]);
            assert!(
                holder.is_some_and(|e| f.begin < e.rva + e.length),
                "{name}: runtime function {:#x} in no entry",
                f.begin
            );
            covered += 1;
        }
        assert_eq!(covered, report.runtime_functions);
        assert_eq!(
            report.covered_functions,
            img.runtime_functions.len(),
            "{name}"
        );

        // The signature: the image's record, which the computation reproduces.
        let record = img
            .perf_map_entry
            .as_ref()
            .expect("framework images carry a PerfMap record");
        assert!(report.signature_from_image);
        assert_eq!(report.map.signature, record.signature, "{name}");
        let md = Metadata::parse(img.metadata).expect("metadata");
        assert_eq!(
            computed_signature(&md, report.map.os, report.map.arch, report.map.abi)
                .expect("signature"),
            record.signature,
            "{name}: computed signature"
        );
        assert_eq!(
            (report.map.os, report.map.arch, report.map.abi),
            (2, 3, 1),
            "{name}: linux x64"
        );

        // The text round-trips.
        let text = report.map.write();
        assert_eq!(
            R2rPerfMap::parse(&text).expect("parses"),
            report.map,
            "{name}"
        );
        eprintln!(
            "{name}: {} entries ({} methods) cover all {} runtime functions; {} fallback names",
            report.map.entries.len(),
            report.methods,
            report.runtime_functions,
            report.fallback_names
        );
    }
}

#[test]
fn names_agree_with_ip2md_on_the_live_testbed() {
    let tb = testbed();
    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let (t, d) = (rt.target(), rt.descriptor());
    let mods = modules(t, d).expect("modules");
    let en = enumerate_code(t, d).expect("enumerate_code");
    // Exact names (r2rmap's default), then as this build's own perf map and `cdac ip2md`
    // print them (`--net8-truncated-names`: one byte short at some lengths on 8.0.0).
    let truncates = runtime_truncates_names(rt.version().map(|v| v.product_version.as_str()));
    assert_eq!(truncates, tb.variant == Variant::Net8_0_0);
    for net8_truncation in [false, true] {
        let mut namer = MethodNamer::new(t, d).with_net8_truncation(net8_truncation);
        let options = R2rMapOptions {
            net8_truncation,
            ..R2rMapOptions::default()
        };
        let (mut total_checked, mut total_matched, mut differ) = (0usize, 0usize, 0usize);
        for name in IMAGES {
            let path = runtime_dir().join(name);
            let report = r2r_perf_map(&path, &options).expect("r2r_perf_map");
            let by_rva: HashMap<u32, &str> = report
                .map
                .entries
                .iter()
                .map(|e| (e.rva, e.name.as_str()))
                .collect();
            let module = mods
                .iter()
                .find(|m| m.file_name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{name} is not loaded"));
            let (base, end) = (module.base, module.base + module.size);
            let resolved: Vec<_> = en
                .entries
                .iter()
                .filter(|e| e.jit_type == JitType::R2r && e.start >= base && e.start < end)
                .collect();
            let mds: Vec<u64> = resolved.iter().map(|e| e.method_desc).collect();
            let names = namer.names(&mds);
            differ += names
                .iter()
                .zip(MethodNamer::new(t, d).names(&mds))
                .filter(|(a, b)| *a != b)
                .count();
            let mut matched = 0usize;
            let mut mismatches = Vec::new();
            for (e, ours) in resolved.iter().zip(&names) {
                let rva = (e.start - base) as u32;
                match by_rva.get(&rva) {
                    Some(n) if n == ours => matched += 1,
                    Some(n) => mismatches.push(format!("{rva:#x}: r2rmap {n} / ip2md {ours}")),
                    None => mismatches.push(format!("{rva:#x}: no entry (ip2md {ours})")),
                }
            }
            eprintln!(
                "{name} (net8 truncation {net8_truncation}): {} resolved methods, names equal for {matched}",
                resolved.len()
            );
            for m in mismatches.iter().take(6) {
                eprintln!("  {m}");
            }
            assert!(!resolved.is_empty(), "{name}: no resolved methods");
            total_checked += resolved.len();
            total_matched += matched;
        }
        eprintln!(
            "all (net8 truncation {net8_truncation}): {total_matched} of {total_checked}, {differ} cut short"
        );
        assert_eq!(
            total_matched, total_checked,
            "net8 truncation {net8_truncation}: names differ (mismatches above)"
        );
        // The truncation applies to some names (labels of 41, 81, 161... bytes).
        assert_eq!(differ > 0, net8_truncation, "{differ} names cut short");
    }
}

/// Damaged copies of a real image (truncated, bytes changed inside the ReadyToRun header,
/// sections and metadata) give a map or a typed error, never a panic.
#[test]
fn damaged_images_never_panic() {
    use cdac::formats::r2r::symbols::r2r_perf_map_from_bytes;
    let path = runtime_dir().join("System.Collections.dll");
    let original = std::fs::read(&path).expect("image");
    let img = R2rImage::parse(&original).expect("parses");
    // File offsets of the interesting ranges: every R2R section and the metadata.
    let offset_of = |rva: u32, size: u32| {
        img.at(rva, size, "x")
            .ok()
            .map(|s| (s.as_ptr() as usize - original.as_ptr() as usize, s.len()))
    };
    let mut ranges: Vec<(usize, usize)> = img
        .r2r_sections
        .iter()
        .filter_map(|s| offset_of(s.rva, s.size))
        .collect();
    ranges.push((
        img.metadata.as_ptr() as usize - original.as_ptr() as usize,
        img.metadata.len(),
    ));
    let dirs = vec![];
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut ok, mut err) = (0, 0);
    for round in 0..150 {
        let mut bytes = original.clone();
        if round % 10 == 0 {
            bytes.truncate((next() as usize) % original.len());
        } else {
            let (start, len) = ranges[(next() as usize) % ranges.len()];
            for _ in 0..1 + next() % 16 {
                let at = start + (next() as usize) % len.max(1);
                bytes[at] = next() as u8;
            }
        }
        match r2r_perf_map_from_bytes(&bytes, &dirs, &R2rMapOptions::default()) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
    }
    eprintln!("damaged images: {ok} maps, {err} errors");
    assert_eq!(ok + err, 150);
}

/// `cdac r2rmap` writes the map `r2r_perf_map` makes, and `cdac symbolize` finds the
/// method of an RVA inside a method (and reports one outside every entry).
#[test]
fn cli_r2rmap_and_symbolize() {
    let image = runtime_dir().join("System.Linq.dll");
    let out = common::scratch("r2rmap").join("System.Linq.ni.r2rmap");
    let cdac = crate::common::cdac_exe();
    let status = std::process::Command::new(&cdac)
        .arg("r2rmap")
        .arg(&image)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run cdac r2rmap");
    assert!(status.success());
    let written = R2rPerfMap::parse(&std::fs::read_to_string(&out).expect("map")).expect("parses");
    let made = r2r_perf_map(&image, &R2rMapOptions::default()).expect("map");
    assert_eq!(written, made.map);
    let e = &made.map.entries[made.map.entries.len() / 2];
    let inside = e.rva + e.length / 2;
    let output = std::process::Command::new(&cdac)
        .args(["symbolize", "--json", "--r2rmap"])
        .arg(&out)
        .arg(format!("{inside:x}"))
        .arg("0x10")
        .output()
        .expect("run cdac symbolize");
    // One of the two RVAs has no method: answered in part, exit 1 (docs/cli.md).
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let v: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(v["os"], "Linux");
    assert_eq!(v["architecture"], "X64");
    assert_eq!(v["results"][0]["name"], e.name.as_str());
    assert_eq!(v["results"][0]["offset"], format!("{:#x}", inside - e.rva));
    assert!(
        v["results"][1]["error"].is_string(),
        "RVA 0x10 is in the headers"
    );
}
