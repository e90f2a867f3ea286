//! `cdac r2rmap` against crossgen2's own ReadyToRun PerfMaps (`PublishReadyToRunEmitSymbols`),
//! which `scripts/testbed-setup` keeps next to the testbed's images: the plain
//! `Cdac.Testbed.R2R.dll` of .NET 10, 9 and 8 (x64, and 10 and 9 linux-arm64) and the .NET
//! 10 composite image
//! `Cdac.Testbed.r2r.dll` (the ReadyToRun library, System.Collections, System.Linq and
//! System.Text.RegularExpressions compiled together).
//!
//! * with `--names crossgen2`, the map equals crossgen2's entry for entry: the five header
//!   records, and every entry's RVA, length and name; the CLI writes the same file, byte
//!   for byte;
//! * with the default (runtime-style) names, the RVAs and lengths are crossgen2's too;
//! * a composite image's component file is refused with a typed error naming the
//!   composite;
//! * every method of the framework's own plain images (.NET 10's CoreLib and the
//!   composite's framework neighbours) gets a name in both styles, no fallback;
//! * live, on the composite testbed, the default names and sizes of the composite image's
//!   methods are those `cdac ip2md` gives the methods the runtime resolved there.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use cdac::formats::r2r::symbols::signature_of_inputs;
use cdac::formats::r2r::{
    r2r_perf_map, NameStyle, R2rError, R2rMapOptions, R2rMapReport, R2rPerfMap,
};
use common::{testbed_exe, Variant};

/// The folder of a built testbed variant.
fn variant_dir(variant: Variant) -> PathBuf {
    testbed_exe(variant)
        .parent()
        .expect("testbed folder")
        .to_path_buf()
}

fn options(names: NameStyle, search: &[PathBuf]) -> R2rMapOptions {
    R2rMapOptions {
        names,
        search_dirs: search.to_vec(),
        ..R2rMapOptions::default()
    }
}

fn crossgen2_map(path: &Path) -> R2rPerfMap {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (crossgen2's map)", path.display()));
    R2rPerfMap::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Compares our map with crossgen2's, entry for entry; `names` says whether names count.
/// Prints every difference (the first 40) and returns how many entries are equal.
fn compare(label: &str, ours: &R2rPerfMap, theirs: &R2rPerfMap, names: bool) -> usize {
    let header = |m: &R2rPerfMap| (m.signature, m.version, m.os, m.arch, m.abi);
    assert_eq!(header(ours), header(theirs), "{label}: header records");
    let mut equal = 0;
    let mut differences = Vec::new();
    let n = ours.entries.len().max(theirs.entries.len());
    for i in 0..n {
        let (a, b) = (ours.entries.get(i), theirs.entries.get(i));
        let same = match (a, b) {
            (Some(a), Some(b)) => {
                a.rva == b.rva && a.length == b.length && (!names || a.name == b.name)
            }
            _ => false,
        };
        if same {
            equal += 1;
        } else {
            let show = |e: Option<&cdac::formats::r2r::R2rPerfMapEntry>| match e {
                Some(e) => format!("{:08X} {:02X} {}", e.rva, e.length, e.name),
                None => "(none)".into(),
            };
            differences.push(format!(
                "  #{i}\n    cdac      {}\n    crossgen2 {}",
                show(a),
                show(b)
            ));
        }
    }
    for d in differences.iter().take(40) {
        eprintln!("{d}");
    }
    eprintln!(
        "{label}: {equal} of {} entries equal ({} in cdac's map, {} in crossgen2's){}",
        n,
        ours.entries.len(),
        theirs.entries.len(),
        if names { "" } else { " in RVA and length" }
    );
    equal
}

/// Both styles of one image against crossgen2's map; returns the crossgen2-style report.
fn check_image(label: &str, image: &Path, crossgen2: &Path, search: &[PathBuf]) -> R2rMapReport {
    let theirs = crossgen2_map(crossgen2);
    let started = Instant::now();
    let ours = r2r_perf_map(image, &options(NameStyle::Crossgen2, search)).expect("r2r_perf_map");
    let elapsed = started.elapsed();
    let equal = compare(
        &format!("{label}, crossgen2 names"),
        &ours.map,
        &theirs,
        true,
    );
    assert_eq!(ours.fallback_names, 0, "{label}: fallback names");
    assert_eq!(
        ours.covered_functions + ours.unlisted_cold_functions,
        ours.runtime_functions,
        "{label}: runtime functions outside every entry"
    );
    assert!(
        ours.missing_assemblies.is_empty(),
        "{label}: {:?}",
        ours.missing_assemblies
    );
    eprintln!(
        "{label}: {} methods, {} runtime functions, made in {:.1} ms",
        ours.methods,
        ours.runtime_functions,
        elapsed.as_secs_f64() * 1e3
    );

    let mut runtime =
        r2r_perf_map(image, &options(NameStyle::Runtime, search)).expect("r2r_perf_map");
    // The runtime-style map lists each cold part too, named as its method (whose hot part
    // is listed before it); crossgen2's lists the hot part only.
    assert_eq!(runtime.unlisted_cold_functions, 0, "{label}");
    assert_eq!(
        runtime.covered_functions, runtime.runtime_functions,
        "{label}"
    );
    let hot: std::collections::BTreeSet<u32> = ours.map.entries.iter().map(|e| e.rva).collect();
    let (cold, listed): (Vec<_>, Vec<_>) = runtime
        .map
        .entries
        .iter()
        .cloned()
        .partition(|e| !hot.contains(&e.rva));
    assert_eq!(cold.len(), runtime.cold_parts, "{label}: cold lines");
    for c in &cold {
        assert!(
            listed.iter().any(|h| h.rva < c.rva && h.name == c.name),
            "{label}: cold part {:#x} {} has no hot part listed before it",
            c.rva,
            c.name
        );
    }
    runtime.map.entries = listed;
    let equal_spans = compare(
        &format!("{label}, runtime names"),
        &runtime.map,
        &theirs,
        false,
    );
    assert_eq!(
        runtime.fallback_names, 0,
        "{label}: runtime-style fallback names"
    );
    assert_eq!(
        (equal, equal_spans),
        (theirs.entries.len(), theirs.entries.len()),
        "{label}: maps differ"
    );
    assert_eq!(ours.map.entries.len(), theirs.entries.len(), "{label}");
    ours
}

/// `cdac r2rmap --names crossgen2 IMAGE -o FILE` writes crossgen2's file byte for byte.
fn check_cli(label: &str, image: &Path, crossgen2: &Path, search: &[PathBuf]) {
    let out = common::scratch("r2rmap-crossgen2").join(format!("{label}.ni.r2rmap"));
    let mut cmd = std::process::Command::new(crate::common::cdac_exe());
    cmd.args(["r2rmap", "--names", "crossgen2"]);
    for dir in search {
        cmd.arg("--search").arg(dir);
    }
    let status = cmd
        .arg(image)
        .arg("-o")
        .arg(&out)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run cdac r2rmap");
    assert!(status.success(), "{label}: cdac r2rmap failed");
    let ours = std::fs::read(&out).expect("written map");
    let theirs = std::fs::read(crossgen2).expect("crossgen2's map");
    assert!(ours == theirs, "{label}: the files differ");
}

fn plain(variant: Variant) {
    let dir = variant_dir(variant);
    let image = dir.join("Cdac.Testbed.R2R.dll");
    let map = dir.join("Cdac.Testbed.R2R.ni.r2rmap");
    let report = check_image(variant.name(), &image, &map, &[]);
    check_cli(variant.name(), &image, &map, &[]);
    assert_eq!(report.cold_parts, 0, "{}", variant.name());
}

/// The hot/cold-split build of the arm64 library (crossgen2 `--hot-cold-splitting`, kept in
/// net10-arm64's `split/`): crossgen2 lists the hot parts only, and so does cdac in its
/// style; the runtime style adds each cold part, named as its method.
#[test]
fn split_net10_arm64_equals_crossgen2() {
    let dir = variant_dir(Variant::Net10Arm64);
    let split = dir.join("split");
    let image = split.join("Cdac.Testbed.R2R.dll");
    let map = split.join("Cdac.Testbed.R2R.ni.r2rmap");
    let report = check_image(
        "net10-arm64 split",
        &image,
        &map,
        std::slice::from_ref(&dir),
    );
    check_cli(
        "net10-arm64-split",
        &image,
        &map,
        std::slice::from_ref(&dir),
    );
    assert!(report.cold_parts >= 1, "no cold part");
    assert!(report.unlisted_cold_functions >= report.cold_parts);
    eprintln!(
        "net10-arm64 split: {} cold part(s) of {} runtime functions",
        report.cold_parts, report.unlisted_cold_functions
    );
}

#[test]
fn plain_net10_equals_crossgen2() {
    plain(Variant::Net10);
}

#[test]
fn plain_net9_equals_crossgen2() {
    plain(Variant::Net9);
}

#[test]
fn plain_net8_equals_crossgen2() {
    plain(Variant::Net8);
}

/// linux-arm64 images, read on this x64 host: lengths come from the arm64 unwind data.
#[test]
fn plain_net10_arm64_equals_crossgen2() {
    plain(Variant::Net10Arm64);
}

#[test]
fn plain_net11_arm64_equals_crossgen2() {
    plain(Variant::Net11Arm64);
}

#[test]
fn plain_net9_arm64_equals_crossgen2() {
    plain(Variant::Net9Arm64);
}

#[test]
fn composite_net10_equals_crossgen2() {
    let dir = variant_dir(Variant::Net10Composite);
    let image = dir.join("Cdac.Testbed.r2r.dll");
    let map = dir.join("Cdac.Testbed.r2r.ni.r2rmap");
    let report = check_image("net10-composite", &image, &map, &[]);
    check_cli("net10-composite", &image, &map, &[]);

    // The components are those the testbed build lists.
    let listed =
        std::fs::read_to_string(dir.join("cdac-composite-components.txt")).expect("component list");
    assert_eq!(
        report.components,
        listed.lines().filter(|l| !l.is_empty()).count()
    );

    // The signature crossgen2 computes (MD5 of the components' MVIDs in name order and
    // the target), which the image also records.
    assert!(report.signature_from_image);
    let mut inputs = Vec::new();
    for name in listed.lines().filter(|l| !l.is_empty()) {
        let bytes = std::fs::read(dir.join(name)).expect("component file");
        let blob = cdac::formats::ecma::pe::metadata_from_pe(
            &bytes,
            cdac::formats::ecma::pe::PeLayout::File,
        )
        .expect("component metadata");
        let md = cdac::formats::ecma::Metadata::parse(blob).expect("metadata");
        let mvid = md
            .guids
            .get(md.module().expect("module").mvid)
            .expect("guid")
            .expect("mvid");
        let assembly = md.assembly_name().expect("name").into_owned();
        inputs.push((assembly, mvid));
    }
    let inputs: Vec<(&str, [u8; 16])> = inputs.iter().map(|(n, m)| (n.as_str(), *m)).collect();
    let (os, arch, abi) = (report.map.os, report.map.arch, report.map.abi);
    assert_eq!(
        signature_of_inputs(&inputs, os, arch, abi),
        report.map.signature,
        "computed composite signature"
    );

    // A component's own file holds no code: a typed error naming the composite.
    for name in listed.lines().filter(|l| !l.is_empty()) {
        match r2r_perf_map(&dir.join(name), &R2rMapOptions::default()) {
            Err(R2rError::ComponentOfComposite { composite }) => {
                assert_eq!(composite, "Cdac.Testbed.r2r.dll", "{name}")
            }
            other => panic!("{name}: {:?}", other.map(|r| r.map.entries.len())),
        }
    }
}

/// Every method of the framework's plain images gets a name in both styles (no
/// fallback), and the entries cover every runtime function.
#[test]
fn framework_images_are_all_named() {
    let dir = variant_dir(Variant::Net10);
    let composite = variant_dir(Variant::Net10Composite);
    all_named(&[
        dir.join("System.Private.CoreLib.dll"),
        composite.join("System.Private.CoreLib.dll"),
        composite.join("System.Runtime.dll"),
        composite.join("System.Console.dll"),
    ]);
}

/// The linux-arm64 CoreLib of .NET 10 and 9, read on this x64 host: every method named,
/// every runtime function covered (arm64 lengths come from the unwind data).
#[test]
fn arm64_framework_images_are_all_named() {
    all_named(&[
        variant_dir(Variant::Net10Arm64).join("System.Private.CoreLib.dll"),
        variant_dir(Variant::Net9Arm64).join("System.Private.CoreLib.dll"),
    ]);
}

fn all_named(images: &[PathBuf]) {
    for image in images {
        for style in [NameStyle::Runtime, NameStyle::Crossgen2] {
            let started = Instant::now();
            let report = match r2r_perf_map(image, &options(style, &[])) {
                Ok(r) => r,
                // Facades hold no code.
                Err(R2rError::NotReadyToRun) => continue,
                Err(e) => panic!("{}: {e}", image.display()),
            };
            let elapsed = started.elapsed();
            let label = format!("{} ({style:?})", image.display());
            assert_eq!(report.fallback_names, 0, "{label}");
            assert_eq!(report.undecoded_instances, 0, "{label}");
            assert_eq!(
                report.covered_functions + report.unlisted_cold_functions,
                report.runtime_functions,
                "{label}"
            );
            let unnamed = report
                .map
                .entries
                .iter()
                .filter(|e| e.name.contains("<token ") || e.name.contains("<instantiation "))
                .count();
            assert_eq!(unnamed, 0, "{label}");
            eprintln!(
                "{label}: {} entries, {} methods, all named, in {:.0} ms",
                report.map.entries.len(),
                report.methods,
                elapsed.as_secs_f64() * 1e3
            );
        }
    }
}

/// The default (runtime-style) names of the composite image are the names `cdac ip2md`
/// gives: in a live composite testbed, every ReadyToRun method the runtime has resolved in
/// the composite image has an entry at its RVA with its name and its size.
#[test]
fn composite_runtime_names_agree_with_ip2md_live() {
    use cdac::contracts::execution_manager::enumerate::enumerate_code;
    use cdac::contracts::execution_manager::JitType;
    use cdac::names::MethodNamer;
    use cdac::runtime::{OpenOptions, Runtime};
    use std::collections::HashMap;

    let tb = common::testbed_of(Variant::Net10Composite);
    let image = variant_dir(Variant::Net10Composite).join("Cdac.Testbed.r2r.dll");
    let report = r2r_perf_map(&image, &R2rMapOptions::default()).expect("r2r_perf_map");
    let by_rva: HashMap<u32, (u32, &str)> = report
        .map
        .entries
        .iter()
        .map(|e| (e.rva, (e.length, e.name.as_str())))
        .collect();
    // Where the runtime mapped the composite image: its mappings of the file.
    let canonical = std::fs::canonicalize(&image).expect("image path");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", tb.pid)).expect("maps");
    let ranges: Vec<(u64, u64)> = maps
        .lines()
        .filter(|l| l.ends_with(canonical.to_str().expect("utf-8 path")))
        .filter_map(|l| {
            let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(lo, 16).ok()?,
                u64::from_str_radix(hi, 16).ok()?,
            ))
        })
        .collect();
    let base = ranges
        .iter()
        .map(|r| r.0)
        .min()
        .expect("composite image mapped");
    let end = ranges
        .iter()
        .map(|r| r.1)
        .max()
        .expect("composite image mapped");

    let rt = Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach");
    let (t, d) = (rt.target(), rt.descriptor());
    let en = enumerate_code(t, d).expect("enumerate_code");
    let resolved: Vec<_> = en
        .entries
        .iter()
        .filter(|e| e.jit_type == JitType::R2r && e.start >= base && e.start < end)
        .collect();
    let mds: Vec<u64> = resolved.iter().map(|e| e.method_desc).collect();
    let names = MethodNamer::new(t, d).names(&mds);
    let mut mismatches = Vec::new();
    for (e, ip2md) in resolved.iter().zip(&names) {
        let rva = (e.start - base) as u32;
        match by_rva.get(&rva) {
            Some((length, name)) if name == ip2md && u64::from(*length) == e.size => {}
            Some((length, name)) => mismatches.push(format!(
                "{rva:#x}: r2rmap {name} ({length:#x} bytes) / ip2md {ip2md} ({:#x} bytes)",
                e.size
            )),
            None => mismatches.push(format!("{rva:#x}: no entry (ip2md {ip2md})")),
        }
    }
    for m in mismatches.iter().take(20) {
        eprintln!("  {m}");
    }
    eprintln!(
        "composite, live: {} resolved methods in the composite image, {} alike (RVA, size, name)",
        resolved.len(),
        resolved.len() - mismatches.len()
    );
    assert!(resolved.len() > 100, "too few resolved methods");
    assert!(mismatches.is_empty(), "{} names differ", mismatches.len());
}

/// Damaged copies of the composite image (truncated; bytes changed in its sections, its
/// components' sections and the manifest metadata) give a map or a typed error, in both
/// name styles, never a panic.
#[test]
fn damaged_composite_never_panics() {
    use cdac::formats::r2r::symbols::r2r_perf_map_from_bytes;
    use cdac::formats::r2r::R2rImage;
    let dir = variant_dir(Variant::Net10Composite);
    let original = std::fs::read(dir.join("Cdac.Testbed.r2r.dll")).expect("image");
    let img = R2rImage::parse(&original).expect("parses");
    let offset_of = |rva: u32, size: u32| {
        img.at(rva, size, "x")
            .ok()
            .map(|s| (s.as_ptr() as usize - original.as_ptr() as usize, s.len()))
    };
    let mut ranges: Vec<(usize, usize)> = img
        .r2r_sections
        .iter()
        .chain(img.components.iter().flat_map(|c| c.sections.iter()))
        .filter_map(|s| offset_of(s.rva, s.size))
        .collect();
    // The header and section tables themselves (the first KiB of .text holds them).
    ranges.push((0, 0x1000.min(original.len())));
    let dirs = vec![dir.clone()];
    // More rounds (and another seed) on request: CDAC_DAMAGE_ROUNDS=N.
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let rounds: u64 = std::env::var("CDAC_DAMAGE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    if rounds != 120 {
        seed ^= rounds;
    }
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut ok, mut err) = (0, 0);
    let started = Instant::now();
    for round in 0..rounds {
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
        let names = if round % 2 == 0 {
            NameStyle::Runtime
        } else {
            NameStyle::Crossgen2
        };
        match r2r_perf_map_from_bytes(&bytes, &dirs, &options(names, &[])) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
    }
    eprintln!(
        "damaged composite images: {ok} maps, {err} errors, in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(ok + err, rounds);
}
