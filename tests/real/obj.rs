//! `cdac obj` on the testbed's heap facts (HeapFacts.cs), on .NET 10, 9 and 8, live and on
//! `createdump --full` and `gcore` dumps: every instance field of `FieldShapes` has the value
//! the testbed read by reflection, the statics (9, 10) the values it recorded, the
//! thin-locked object names its owner and recursion, the hashed object its hash code; and
//! on the full dump every field row equals SOS `dumpobj` (offset and value).

use crate::common::SosOutput;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::common::{self, cdac_json, testbed_of, Testbed, Variant};
use serde_json::Value;

/// The target arguments of a testbed, live or one of its dumps.
fn target(tb: &Testbed, kind: Option<&str>) -> Vec<String> {
    match kind {
        None => vec!["--pid".into(), tb.pid.to_string()],
        Some(k) => vec!["--dump".into(), tb.dump(k).display().to_string()],
    }
}

/// The address of the only object of a type used nowhere else.
fn only_object(t: &[String], type_name: &str) -> String {
    let mut args = vec!["heap", "--objects", "--json", "--type"];
    let pattern = format!("^{}$", type_name.replace('.', "\\."));
    args.push(&pattern);
    args.extend(t.iter().map(String::as_str));
    // A live process's thread pool may allocate while the heap is walked: a segment whose
    // walk meets a fresh allocation stops (exit 1); the object asked for is still listed.
    let out = std::process::Command::new(crate::common::cdac_exe())
        .args(&args)
        .output()
        .expect("run cdac");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{args:?}: {out:?}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("heap JSON");
    let list = v["object_list"].as_array().expect("object_list");
    assert_eq!(list.len(), 1, "{type_name}: {v}");
    list[0]["address"].as_str().expect("address").to_string()
}

fn obj(t: &[String], address: &str, extra: &[&str]) -> Value {
    let mut args = vec!["obj", address, "--json"];
    args.extend_from_slice(extra);
    args.extend(t.iter().map(String::as_str));
    cdac_json(&args)
}

/// A value as the manifest records it: numbers, booleans, chars as codes, strings, null,
/// `{X, Y}` points, arrays of those.
fn plain(v: &Value) -> Value {
    match v["kind"].as_str() {
        Some("int") | Some("u_int") | Some("float") | Some("bool") => v["value"].clone(),
        Some("char") => v["value"].clone(),
        Some("reference") if v["address"].is_null() => Value::Null,
        Some("reference") => match &v["text"] {
            Value::String(s) => Value::String(s.clone()),
            _ => Value::String("(reference)".into()),
        },
        Some("struct") => Value::Object(
            v["fields"]
                .as_array()
                .expect("fields")
                .iter()
                .map(|f| {
                    (
                        f["name"].as_str().expect("name").to_string(),
                        plain(&f["value"]),
                    )
                })
                .collect(),
        ),
        other => panic!("unexpected value kind {other:?}: {v}"),
    }
}

/// Two JSON numbers or values that are equal as the manifest means them (2.5 == 2.5).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
            }
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
            }
            _ => a == b,
        },
    }
}

fn facts_hold(variant: Variant) {
    let tb = testbed_of(variant);
    let heap = &tb.manifest["heap"];
    let shapes = &heap["field_shapes"];
    let values = shapes["values"].as_object().expect("values");
    for kind in [None, Some("full"), Some("gcore")] {
        let what = format!("{} {}", variant.name(), kind.unwrap_or("live"));
        let t = target(tb, kind);
        let address = only_object(&t, shapes["type"].as_str().expect("type"));
        let statics = variant != Variant::Net8;
        let v = obj(&t, &address, if statics { &["--statics"] } else { &[] });
        assert_eq!(v["method_table"], shapes["method_table"], "{what}");
        assert_eq!(v["type_name"], shapes["type"], "{what}");
        let fields: BTreeMap<&str, &Value> = v["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .map(|f| (f["name"].as_str().expect("name"), f))
            .collect();
        // Every field reflection sees, and nothing else.
        assert_eq!(fields.len(), values.len(), "{what}: {v}");
        let mut compared = 0;
        for (name, want) in values {
            let f = fields
                .get(name.as_str())
                .unwrap_or_else(|| panic!("{what}: no field {name}"));
            if want == "(not recorded)" {
                continue;
            }
            let got = if want.is_array() {
                // An array: its elements, read by `cdac obj` on the array itself.
                let a = f["value"]["address"].as_str().expect("array address");
                let arr = obj(&t, a, &[]);
                Value::Array(
                    arr["array"]["elements"]
                        .as_array()
                        .expect("elements")
                        .iter()
                        .map(plain)
                        .collect(),
                )
            } else {
                plain(&f["value"])
            };
            assert!(
                same(&got, want),
                "{what}: {name} is {got}, the testbed read {want}"
            );
            compared += 1;
        }
        assert!(compared >= 14, "{what}: {compared}");
        // The struct fields are expanded, and Point's declared type is the testbed's struct.
        assert_eq!(
            fields["Point"]["value"]["method_table"], shapes["point_method_table"],
            "{what}"
        );
        assert_eq!(fields["Id"]["value"]["type_name"], "System.Guid", "{what}");
        if statics {
            let s: BTreeMap<&str, &Value> = v["statics"]
                .as_array()
                .expect("statics")
                .iter()
                .map(|f| (f["name"].as_str().expect("name"), &f["value"]))
                .collect();
            assert_eq!(
                s["StaticCounter"]["value"], shapes["static_counter"],
                "{what}"
            );
            assert_eq!(s["StaticName"]["text"], shapes["static_name"], "{what}");
        }

        let lock = &heap["thin_lock"];
        let a = only_object(&t, lock["type"].as_str().expect("type"));
        let h = &obj(&t, &a, &[])["header"];
        assert_eq!(h["kind"], "thin_lock", "{what}: {h}");
        assert_eq!(
            h["owner_managed_id"], lock["owner_managed_id"],
            "{what}: {h}"
        );
        assert_eq!(
            h["recursion"].as_u64(),
            lock["lock_count"].as_u64().map(|n| n - 1),
            "{what}: {h}"
        );

        let hashed = &heap["hashed"];
        let a = only_object(&t, hashed["type"].as_str().expect("type"));
        let h = &obj(&t, &a, &[])["header"];
        assert_eq!(h["kind"], "hash_code", "{what}: {h}");
        assert_eq!(h["hash"], hashed["hash"], "{what}: {h}");

        // Locked and hashed: both in a sync block, with the owner and recursion.
        let inflated = &heap["inflated"];
        let a = only_object(&t, inflated["type"].as_str().expect("type"));
        let h = &obj(&t, &a, &[])["header"];
        assert_eq!(h["kind"], "sync_block", "{what}: {h}");
        assert_eq!(h["locked"], true, "{what}: {h}");
        assert_eq!(h["waiters"], 0, "{what}: {h}");
        assert_eq!(
            h["owner_managed_id"], inflated["owner_managed_id"],
            "{what}: {h}"
        );
        assert_eq!(
            h["recursion"].as_u64(),
            inflated["lock_count"].as_u64().map(|n| n - 1),
            "{what}: {h}"
        );
        assert_eq!(h["hash"], inflated["hash"], "{what}: {h}");
    }
}

#[test]
fn facts_hold_net10() {
    facts_hold(Variant::Net10);
}

#[test]
fn facts_hold_net11() {
    facts_hold(Variant::Net11);
}

#[test]
fn facts_hold_net9() {
    facts_hold(Variant::Net9);
}

#[test]
fn facts_hold_net8() {
    facts_hold(Variant::Net8);
}

/// SOS `dumpobj` rows: name → (offset, value text), instance fields only.
fn sos_dumpobj(dump: &Path, address: &str) -> BTreeMap<String, (u64, String)> {
    let out = Command::new(common::dotnet_dump())
        .arg("analyze")
        .arg(dump)
        .args(["-c", &format!("dumpobj {address}"), "-c", "exit"])
        .sos_output();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rows = BTreeMap::new();
    for line in text.lines() {
        // MT Field Offset Type VT Attr Value Name: the type may be cut ("...d.Heap.ShapePoint"),
        // never spaced, so the columns split on whitespace.
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 8 && f[5] == "instance" && u64::from_str_radix(f[0], 16).is_ok() {
            let offset = u64::from_str_radix(f[2], 16).expect("offset");
            rows.insert(f[7].to_string(), (offset, f[6].to_string()));
        }
    }
    rows
}

/// Our value as SOS prints it: integers in decimal, chars in hex, bools as 1/0, doubles with
/// six decimals, references and structs as the address.
fn as_sos(field: &Value) -> String {
    let v = &field["value"];
    match v["kind"].as_str() {
        Some("int") | Some("u_int") => v["value"].to_string(),
        Some("char") => format!("{:x}", v["value"].as_u64().expect("char")),
        Some("bool") => (if v["value"] == true { "1" } else { "0" }).into(),
        Some("float") => format!("{:.6}", v["value"].as_f64().expect("float")),
        Some("reference") => format!(
            "{:016x}",
            v["address"]
                .as_str()
                .map_or(0, |a| common::hex(&Value::String(a.into())))
        ),
        Some("struct") => format!("{:016x}", common::hex(&field["address"])),
        other => panic!("unexpected value kind {other:?}"),
    }
}

fn equals_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let shapes = &tb.manifest["heap"]["field_shapes"];
    let t = target(tb, Some("full"));
    let address = only_object(&t, shapes["type"].as_str().expect("type"));
    let ours = obj(&t, &address, &[]);
    let sos = sos_dumpobj(&tb.dump("full"), &address);
    let fields = ours["fields"].as_array().expect("fields");
    assert_eq!(fields.len(), sos.len(), "{}: SOS {sos:?}", variant.name());
    for f in fields {
        let name = f["name"].as_str().expect("name");
        let (offset, value) = &sos[name];
        assert_eq!(
            f["offset"].as_u64(),
            Some(*offset),
            "{}: {name}",
            variant.name()
        );
        assert_eq!(&as_sos(f), value, "{}: {name}", variant.name());
    }
}

#[test]
fn fields_equal_sos_dumpobj_net10() {
    equals_sos(Variant::Net10);
}

#[test]
fn fields_equal_sos_dumpobj_net11() {
    equals_sos(Variant::Net11);
}

#[test]
fn fields_equal_sos_dumpobj_net9() {
    equals_sos(Variant::Net9);
}

#[test]
fn fields_equal_sos_dumpobj_net8() {
    equals_sos(Variant::Net8);
}

/// One row of SOS `syncblk -all` with a sync block: index, sync block, MonitorHeld,
/// Recursion, owning Thread, owner's OS id (`None`: not held), object.
type SyncBlkRow = (u32, u64, u64, u64, u64, Option<u64>, u64);

fn sos_syncblk(dump: &Path) -> Vec<SyncBlkRow> {
    let out = Command::new(common::dotnet_dump())
        .arg("analyze")
        .arg(dump)
        .args(["-c", "syncblk -all", "-c", "exit"])
        .sos_output();
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let index = f.first()?.parse::<u32>().ok()?;
            let block = hex(f.get(1)?)?;
            if block == 0 {
                return None; // a free entry
            }
            let held = f.get(2)?.parse().ok()?;
            let recursion = f.get(3)?.parse().ok()?;
            let thread = hex(f.get(4)?)?;
            // Held: OS id (hex) and SOS's thread number; not held: "none".
            let (os, object) = if f.get(5) == Some(&"none") {
                (None, hex(f.get(6)?)?)
            } else {
                (Some(hex(f.get(5)?)?), hex(f.get(7)?)?)
            };
            Some((index, block, held, recursion, thread, os, object))
        })
        .collect()
}

/// Every sync block SOS `syncblk` lists (the testbed's inflated object, the monitor a
/// thread waits to enter, ...) is the one `cdac obj` finds in the object's header, with
/// the same holder, recursion and waiters.
fn sync_blocks_equal_sos(variant: Variant) {
    let tb = testbed_of(variant);
    let t = target(tb, Some("full"));
    let rows = sos_syncblk(&tb.dump("full"));
    assert!(
        rows.iter().any(|r| r.5.is_some()),
        "{}: SOS lists no held monitor: {rows:?}",
        variant.name()
    );
    for (index, block, held, recursion, thread, os, object) in &rows {
        let what = format!("{} sync block {index}", variant.name());
        let h = &obj(&t, &format!("{object:#x}"), &[])["header"];
        assert_eq!(h["kind"], "sync_block", "{what}: {h}");
        assert_eq!(h["sync_block_index"], *index, "{what}: {h}");
        assert_eq!(common::hex(&h["sync_block"]), *block, "{what}: {h}");
        // MonitorHeld: 1 when held, plus 2 per waiting thread (.NET 11's DAC says only
        // whether it is held: its monitors are managed Locks).
        assert_eq!(h["locked"], held & 1 == 1, "{what}: {h}");
        if variant != Variant::Net11 {
            assert_eq!(h["waiters"].as_u64(), Some(held >> 1), "{what}: {h}");
        }
        if let Some(os) = os {
            assert_eq!(common::hex(&h["owner_thread"]), *thread, "{what}: {h}");
            assert_eq!(h["owner_os_id"].as_u64(), Some(*os), "{what}: {h}");
            assert_eq!(
                h["recursion"].as_u64().map(|r| r + 1),
                Some(*recursion),
                "{what}: {h}"
            );
        }
    }
    eprintln!("{}: {} sync blocks equal SOS", variant.name(), rows.len());
}

#[test]
fn sync_blocks_equal_sos_syncblk_net10() {
    sync_blocks_equal_sos(Variant::Net10);
}

#[test]
fn sync_blocks_equal_sos_syncblk_net11() {
    sync_blocks_equal_sos(Variant::Net11);
}

#[test]
fn sync_blocks_equal_sos_syncblk_net9() {
    sync_blocks_equal_sos(Variant::Net9);
}

#[test]
fn sync_blocks_equal_sos_syncblk_net8() {
    sync_blocks_equal_sos(Variant::Net8);
}
