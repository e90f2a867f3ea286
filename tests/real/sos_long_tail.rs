//! SOS's long tail as cdac commands, each held equal to SOS on the testbed's full dump
//! (.NET 10, 11, 9 and 8): `gcwhere` (heap, segment, generation and the segment's ranges of
//! objects, interior addresses included), `objsize` (objects and bytes an object keeps
//! alive, in total and per MethodTable) and `mt` (SOS `dumpmt`: parent, canonical
//! MethodTable, module, token, base size, GC pointers, method and interface counts) and `md`
//! (SOS `dumpmd`: MethodTable, token, module, current code, every code version with its
//! tier and node), and `find` (SOS `name2ee`: module, token, MethodTable or MethodDesc of
//! types and of a method's overloads).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::common::{self, cdac_json, testbed_of, SosOutput, Variant};
use crate::json_schema::assert_matches_schema;
use serde_json::Value;

/// Objects to ask about: a one-off object, a collection with a large graph, a string, a
/// large object and a gen0 one where the heap has them.
fn sample_objects(dump: &str) -> Vec<(u64, u64, String)> {
    let heap = cdac_json(&["heap", "--objects", "--json", "--dump", dump]);
    let list = heap["object_list"].as_array().expect("object_list");
    let pick = |f: &dyn Fn(&Value) -> bool| -> Option<(u64, u64, String)> {
        list.iter().find(|o| f(o)).map(|o| {
            (
                common::hex(&o["address"]),
                common::hex(&o["method_table"]),
                o["name"].as_str().unwrap_or_default().to_string(),
            )
        })
    };
    let name = |o: &Value| o["name"].as_str().unwrap_or_default().to_string();
    let mut picked: Vec<(u64, u64, String)> = [
        pick(&|o| name(o) == "Cdac.Testbed.Heap.UniqueMarker"),
        pick(&|o| name(o).starts_with("System.Collections.Generic.List`1")),
        pick(&|o| name(o).starts_with("System.Collections.Generic.Dictionary`2")),
        pick(&|o| name(o) == "System.String" && o["generation"] == "gen2"),
        pick(&|o| o["generation"] == "loh" && name(o) != "Free"),
        pick(&|o| o["generation"] == "gen0" && name(o) != "Free"),
    ]
    .into_iter()
    .flatten()
    .collect();
    picked.dedup();
    assert!(picked.len() >= 4, "objects to ask about: {picked:?}");
    picked
}

/// One SOS process running `commands`.
fn sos(dump: &Path, commands: &[String]) -> String {
    let mut cmd = Command::new(common::dotnet_dump());
    cmd.arg("analyze").arg(dump);
    for c in commands {
        cmd.args(["-c", c]);
    }
    cmd.args(["-c", "exit"]);
    String::from_utf8_lossy(&cmd.sos_output().stdout).into_owned()
}

fn hex_field(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// SOS's generation number as cdac names it.
fn sos_generation(g: &str) -> &'static str {
    match g {
        "0" => "gen0",
        "1" => "gen1",
        "2" => "gen2",
        "3" | "large" => "loh",
        "4" | "pinned" => "poh",
        "frozen" => "frozen",
        other => panic!("SOS generation {other}"),
    }
}

fn gcwhere_equals_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let dump_path = tb.dump("full");
    let dump = dump_path.display().to_string();
    let objects = sample_objects(&dump);
    // Each object's start and an address 8 bytes into it.
    let addresses: Vec<u64> = objects.iter().flat_map(|o| [o.0, o.0 + 8]).collect();
    let text = sos(
        &dump_path,
        &addresses
            .iter()
            .map(|a| format!("gcwhere {a:#x}"))
            .collect::<Vec<_>>(),
    );
    // `7fa30c0bdf00  0  7fa2ef253aa0  2  7fa30c000028-7fa30c0c7878  start-committed  committed-reserved`
    let mut rows: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let cols: Vec<String> = line.split_whitespace().map(String::from).collect();
        if cols.len() == 7 && cols[4].contains('-') {
            if let Ok(a) = u64::from_str_radix(&cols[0], 16) {
                rows.insert(a, cols);
            }
        }
    }
    for &a in &addresses {
        let sos_row = rows
            .get(&a)
            .unwrap_or_else(|| panic!("{variant:?}: SOS gcwhere {a:#x}:\n{text}"));
        let ours = cdac_json(&["gcwhere", &format!("{a:#x}"), "--json", "--dump", &dump]);
        assert_matches_schema("gcwhere", &ours);
        let seg = &ours["segment"];
        let (alloc_start, alloc_end) = sos_row[4].split_once('-').expect("allocated range");
        let committed_end = sos_row[5].split_once('-').expect("committed range").1;
        let reserved_end = sos_row[6].split_once('-').expect("reserved range").1;
        let what = format!("{variant:?} gcwhere {a:#x}: cdac {ours} SOS {sos_row:?}");
        assert_eq!(seg["heap"].as_u64(), sos_row[1].parse().ok(), "{what}");
        assert_eq!(
            common::hex(&seg["address"]),
            hex_field(&sos_row[2]),
            "{what}"
        );
        assert_eq!(seg["generation"], sos_generation(&sos_row[3]), "{what}");
        assert_eq!(
            common::hex(&seg["objects_start"]),
            hex_field(alloc_start),
            "{what}"
        );
        assert_eq!(
            common::hex(&seg["allocated"]),
            hex_field(alloc_end),
            "{what}"
        );
        assert_eq!(
            common::hex(&seg["committed"]),
            hex_field(committed_end),
            "{what}"
        );
        assert_eq!(
            common::hex(&seg["reserved"]),
            hex_field(reserved_end),
            "{what}"
        );
        let start = objects.iter().any(|o| o.0 == a);
        assert_eq!(
            ours["place"],
            if start { "object" } else { "inside" },
            "{what}"
        );
        let containing = objects
            .iter()
            .find(|o| o.0 == a || o.0 + 8 == a)
            .expect("object");
        assert_eq!(
            common::hex(&ours["object"]["address"]),
            containing.0,
            "{what}"
        );
    }
}

/// SOS `objsize` of one object: count and size per MethodTable, objects, bytes.
type SosObjSize = (BTreeMap<u64, (u64, u64)>, u64, u64);

fn objsize_equals_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let dump_path = tb.dump("full");
    let dump = dump_path.display().to_string();
    let objects = sample_objects(&dump);
    let text = sos(
        &dump_path,
        &objects
            .iter()
            .map(|o| format!("objsize {:#x}", o.0))
            .collect::<Vec<_>>(),
    );
    // Blocks: `Objects which ADDR (...) transitively keep alive:`, the statistics rows
    // `MT Count TotalSize Name`, then `Total N objects, M bytes`.
    let mut blocks: BTreeMap<u64, SosObjSize> = BTreeMap::new();
    let mut current: Option<u64> = None;
    let mut in_stats = false;
    let number = |s: &str| s.replace(',', "").parse::<u64>().ok();
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("Objects which ") {
            let a = u64::from_str_radix(rest.split_whitespace().next().unwrap_or(""), 16).ok();
            current = a;
            in_stats = false;
            if let Some(a) = a {
                blocks.entry(a).or_default();
            }
        } else if l.starts_with("MT ") && l.contains("Count") {
            in_stats = true;
        } else if let Some(rest) = l.strip_prefix("Total ") {
            let mut it = rest.split(' ');
            let n = it.next().and_then(number);
            let bytes = rest
                .split(", ")
                .nth(1)
                .and_then(|b| b.split(' ').next())
                .and_then(number);
            if let (Some(a), Some(n), Some(bytes)) = (current, n, bytes) {
                let b = blocks.entry(a).or_default();
                b.1 = n;
                b.2 = bytes;
            }
            in_stats = false;
        } else if in_stats {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if let (Some(a), [mt, count, size, ..]) = (current, cols.as_slice()) {
                if let (Ok(mt), Some(c), Some(s)) =
                    (u64::from_str_radix(mt, 16), number(count), number(size))
                {
                    blocks.entry(a).or_default().0.insert(mt, (c, s));
                }
            }
        }
    }
    for (address, _, name) in &objects {
        let (types, count, bytes) = blocks
            .get(address)
            .unwrap_or_else(|| panic!("{variant:?}: SOS objsize {address:#x}:\n{text}"));
        let ours = cdac_json(&[
            "objsize",
            &format!("{address:#x}"),
            "--json",
            "--dump",
            &dump,
        ]);
        let what = format!("{variant:?} objsize {address:#x} ({name})");
        assert_eq!(ours["objects"].as_u64(), Some(*count), "{what}");
        assert_eq!(ours["total_size"].as_u64(), Some(*bytes), "{what}");
        let our_types: BTreeMap<u64, (u64, u64)> = ours["types"]
            .as_array()
            .expect("types")
            .iter()
            .map(|t| {
                (
                    common::hex(&t["method_table"]),
                    (
                        t["count"].as_u64().unwrap(),
                        t["total_size"].as_u64().unwrap(),
                    ),
                )
            })
            .collect();
        assert_eq!(&our_types, types, "{what}: per MethodTable");
        assert_eq!(ours["unreadable"], 0, "{what}");
    }
}

fn mt_equals_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let dump_path = tb.dump("full");
    let dump = dump_path.display().to_string();
    let mut mts: Vec<(u64, String)> = sample_objects(&dump)
        .into_iter()
        .map(|o| (o.1, o.2))
        .collect();
    mts.sort();
    mts.dedup();
    for (mt, name) in &mts {
        let text = sos(&dump_path, &[format!("dumpmt {mt:#x}")]);
        let field = |label: &str| -> Option<String> {
            text.lines()
                .find_map(|l| l.strip_prefix(label))
                .map(|v| v.trim().to_string())
        };
        let ours = cdac_json(&["mt", &format!("{mt:#x}"), "--json", "--dump", &dump]);
        assert_matches_schema("mt", &ours);
        let what = format!("{variant:?} dumpmt {mt:#x} ({name}): cdac {ours}\nSOS {text}");
        assert_eq!(
            Some(common::hex(&ours["parent"])),
            field("Parent:").map(|v| hex_field(&v)),
            "{what}"
        );
        if let Some(c) = field("Canonical:") {
            assert_eq!(common::hex(&ours["canonical"]), hex_field(&c), "{what}");
        }
        assert_eq!(
            Some(common::hex(&ours["module"])),
            field("Module:").map(|v| hex_field(&v)),
            "{what}"
        );
        let token =
            u32::from_str_radix(ours["token"].as_str().unwrap().trim_start_matches("0x"), 16)
                .unwrap();
        assert_eq!(
            Some(u64::from(token)),
            field("mdToken:").map(|v| hex_field(&v)),
            "{what}"
        );
        // The MethodTable's own BaseSize; for System.String it counts the terminating
        // character, which SOS (through ClrMD) leaves out.
        let terminator = if name == "System.String" { 2 } else { 0 };
        assert_eq!(
            ours["base_size"].as_u64(),
            field("BaseSize:").map(|v| hex_field(&v) + terminator),
            "{what}"
        );
        let pointers = field("Has GC Pointers:").or_else(|| field("ContainsPointers:"));
        assert_eq!(
            Some(ours["contains_pointers"].as_bool().unwrap().to_string()),
            pointers.map(|p| p.to_lowercase()),
            "{what}"
        );
        // .NET 8 keeps EEClass's counts packed (EEClassPackedFields), which cdac does not
        // decode: the count is then absent, never a wrong number.
        let sos_methods: Option<u64> = field("Number of Methods:").and_then(|v| v.parse().ok());
        match ours["num_methods"].as_u64() {
            None => assert_eq!(variant, Variant::Net8, "{what}"),
            methods => assert_eq!(methods, sos_methods, "{what}"),
        }
        assert_eq!(
            ours["num_interfaces"].as_u64(),
            field("Number of IFaces in IFaceMap:").and_then(|v| v.parse().ok()),
            "{what}"
        );
        if !name.contains('`') {
            assert_eq!(
                ours["type_name"].as_str(),
                field("Name:").as_deref(),
                "{what}"
            );
        }
        if let Some(file) = field("File:") {
            assert_eq!(ours["file"].as_str(), Some(file.as_str()), "{what}");
        }
    }
}

#[test]
fn gcwhere_equals_sos_net10() {
    gcwhere_equals_sos(Variant::Net10);
}

#[test]
fn gcwhere_equals_sos_net11() {
    gcwhere_equals_sos(Variant::Net11);
}

#[test]
fn gcwhere_equals_sos_net8() {
    gcwhere_equals_sos(Variant::Net8);
}

#[test]
fn objsize_equals_sos_net10() {
    objsize_equals_sos(Variant::Net10);
}

#[test]
fn objsize_equals_sos_net11() {
    objsize_equals_sos(Variant::Net11);
}

#[test]
fn objsize_equals_sos_net9() {
    objsize_equals_sos(Variant::Net9);
}

#[test]
fn objsize_equals_sos_net8() {
    objsize_equals_sos(Variant::Net8);
}

#[test]
fn mt_equals_sos_net10() {
    mt_equals_sos(Variant::Net10);
}

#[test]
fn mt_equals_sos_net11() {
    mt_equals_sos(Variant::Net11);
}

#[test]
fn mt_equals_sos_net9() {
    mt_equals_sos(Variant::Net9);
}

#[test]
fn mt_equals_sos_net8() {
    mt_equals_sos(Variant::Net8);
}

/// SOS `dumpmd`'s version history: `(code, tier, node)` per version.
fn sos_versions(text: &str) -> Vec<(u64, String, u64)> {
    let mut out = Vec::new();
    let mut pending: Option<(u64, String)> = None;
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("CodeAddr:") {
            let rest = rest.trim();
            let (code, tier) = rest.split_once(' ').unwrap_or((rest, ""));
            let tier = tier.trim().trim_start_matches('(').trim_end_matches(')');
            pending = Some((hex_field(code), tier.to_string()));
        } else if let Some(node) = l.strip_prefix("NativeCodeVersion:") {
            if let Some((code, tier)) = pending.take() {
                out.push((code, tier, hex_field(node)));
            }
        }
    }
    out.sort();
    out
}

fn md_equals_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let dump_path = tb.dump("full");
    let dump = dump_path.display().to_string();
    // Methods with code: ones with several versions (tiered up) first, then others.
    let methods = cdac_json(&["methods", "--json", "--dump", &dump]);
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for m in methods.as_array().expect("methods") {
        *counts.entry(common::hex(&m["method_desc"])).or_default() += 1;
    }
    let mut mds: Vec<u64> = counts
        .iter()
        .filter(|(_, &n)| n >= 2)
        .map(|(&md, _)| md)
        .take(4)
        .collect();
    mds.extend(
        counts
            .iter()
            .filter(|(_, &n)| n == 1)
            .map(|(&md, _)| md)
            .take(3),
    );
    assert!(
        mds.len() >= 5,
        "{variant:?}: methods to ask about: {mds:x?}"
    );
    for md in mds {
        let text = sos(&dump_path, &[format!("dumpmd {md:#x}")]);
        let field = |label: &str| -> Option<u64> {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(label))
                .map(hex_field)
        };
        let ours = cdac_json(&["md", &format!("{md:#x}"), "--json", "--dump", &dump]);
        assert_matches_schema("md", &ours);
        let what = format!("{variant:?} dumpmd {md:#x}: cdac {ours}\nSOS {text}");
        assert_eq!(
            Some(common::hex(&ours["method_table"])),
            field("MethodTable:"),
            "{what}"
        );
        assert_eq!(
            Some(common::hex(&ours["module"])),
            field("Module:"),
            "{what}"
        );
        assert_eq!(
            Some(common::hex(&ours["token"])),
            field("mdToken:"),
            "{what}"
        );
        assert_eq!(
            ours["code"].as_str().map(hex_field),
            field("Current CodeAddr:"),
            "{what}"
        );
        let mut our_versions: Vec<(u64, String, u64)> = ours["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| {
                let tier: String = serde_json::from_value(v["tier"].clone()).expect("tier");
                (
                    // A version not compiled yet: SOS prints its code address as 0.
                    v["code"].as_str().map_or(0, hex_field),
                    tier,
                    v["node"].as_str().map_or(0, hex_field),
                )
            })
            .collect();
        our_versions.sort();
        let sos_versions: Vec<(u64, String, u64)> = sos_versions(&text)
            .into_iter()
            .map(|(code, tier, node)| {
                let tier = cdac::contracts::code_versions::Tier::from_sos(&tier)
                    .map_or(tier, |t| t.as_str().to_string());
                (code, tier, node)
            })
            .collect();
        // SOS lists the history only for methods with explicit versions.
        if !sos_versions.is_empty() {
            assert_eq!(our_versions, sos_versions, "{what}");
        }
    }
}

#[test]
fn md_equals_sos_net10() {
    md_equals_sos(Variant::Net10);
}

#[test]
fn md_equals_sos_net11() {
    md_equals_sos(Variant::Net11);
}

#[test]
fn md_equals_sos_net9() {
    md_equals_sos(Variant::Net9);
}

#[test]
fn md_equals_sos_net8() {
    md_equals_sos(Variant::Net8);
}

/// SOS `name2ee` answers: `(module, token, MethodTable or MethodDesc)` per match.
fn sos_name2ee(text: &str) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let (mut module, mut token) = (0, 0);
    for line in text.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("Module:") {
            module = hex_field(v);
        } else if let Some(v) = l.strip_prefix("Token:") {
            token = hex_field(v);
        } else if let Some(v) = l
            .strip_prefix("MethodTable:")
            .or_else(|| l.strip_prefix("MethodDesc:"))
        {
            out.push((module, token, hex_field(v)));
        }
    }
    out
}

fn find_equals_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let dump_path = tb.dump("full");
    let dump = dump_path.display().to_string();
    let corelib = "System.Private.CoreLib.dll";
    let asks = [
        ("Cdac.Testbed.dll", "Cdac.Testbed.Heap.UniqueMarker"),
        (corelib, "System.String"),
        (corelib, "System.Collections.Generic.Dictionary`2+Entry"),
        (corelib, "System.String.Concat"),
    ];
    for (module, name) in asks {
        let text = sos(&dump_path, &[format!("name2ee {module} {name}")]);
        let theirs = sos_name2ee(&text);
        let ours = cdac_json(&["find", module, name, "--json", "--dump", &dump]);
        assert_matches_schema("find", &ours);
        let ours_found: Vec<(u64, u64, u64)> = ours["found"]
            .as_array()
            .expect("found")
            .iter()
            .map(|f| {
                let handle = f.get("method_table").or_else(|| f.get("method_desc"));
                (
                    common::hex(&f["module"]),
                    common::hex(&f["token"]),
                    handle.map_or(0, common::hex),
                )
            })
            .collect();
        let what = format!("{variant:?} name2ee {module} {name}: cdac {ours}\nSOS {text}");
        assert!(!theirs.is_empty(), "{what}");
        if name.ends_with(".Concat") {
            // SOS lists one overload of a method (the first with code); cdac lists each.
            assert!(ours_found.len() > theirs.len(), "{what}");
            for t in &theirs {
                assert!(ours_found.contains(t), "{what}");
            }
        } else {
            // SOS also lists types whose names start with the one asked (`System.String`
            // brings `System.StringComparer`), after the exact match.
            assert_eq!(ours_found, theirs[..1], "{what}");
        }
    }
    // SOS's word, both spellings.
    let a = cdac_json(&[
        "name2ee",
        corelib,
        "System.String",
        "--json",
        "--dump",
        &dump,
    ]);
    let b = cdac_json(&[
        "find",
        "System.Private.CoreLib!System.String",
        "--json",
        "--dump",
        &dump,
    ]);
    assert_eq!(a, b);
}

#[test]
fn find_equals_sos_net10() {
    find_equals_sos(Variant::Net10);
}

#[test]
fn find_equals_sos_net11() {
    find_equals_sos(Variant::Net11);
}

#[test]
fn find_equals_sos_net8() {
    find_equals_sos(Variant::Net8);
}
