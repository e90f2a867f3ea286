//! `cdac verifyheap`: no corruption on the healthy testbed heaps of .NET 10, 11, 9 and 8
//! (full dumps; .NET 10 live too, every thread held for the check), every object counted as `heap` counts them; and on a copy
//! of the .NET 10 dump with three planted faults (a reference into a free object, a
//! MethodTable pointer of 0xFF bytes, an array length past its segment), each one found
//! and named by its address.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

use crate::common::{self, cdac_json, scratch, start_testbed, testbed_of, Variant};
use crate::json_schema::assert_matches_schema;
use serde_json::Value;

fn verify(args: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(common::cdac_exe())
        .arg("verifyheap")
        .arg("--json")
        .args(args)
        .output()
        .expect("run cdac verifyheap");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_matches_schema("verifyheap", &v);
    (out.status.code(), v)
}

fn healthy(variant: Variant) {
    let tb = testbed_of(variant);
    let dump = tb.dump("full").display().to_string();
    let (code, v) = verify(&["--dump", &dump]);
    assert_eq!(v["corruptions"], serde_json::json!([]), "{variant:?}: {v}");
    assert_eq!(code, Some(0), "{variant:?}");
    let heap = cdac_json(&["heap", "--json", "--dump", &dump]);
    let free: u64 = heap["types"]
        .as_array()
        .expect("types")
        .iter()
        .filter(|t| t["name"] == "Free")
        .map(|t| t["count"].as_u64().unwrap())
        .sum();
    // `heap` counts live objects and lists free ones as a type; verifyheap checks both.
    assert_eq!(
        v["objects"].as_u64(),
        heap["objects"].as_u64(),
        "{variant:?} (free {free})"
    );
    assert!(v["references"].as_u64().unwrap() > v["objects"].as_u64().unwrap() / 4);
}

#[test]
fn no_corruption_in_healthy_heaps_net10() {
    healthy(Variant::Net10);
}

#[test]
fn no_corruption_in_healthy_heaps_net11() {
    healthy(Variant::Net11);
}

#[test]
fn no_corruption_in_healthy_heaps_net9() {
    healthy(Variant::Net9);
}

#[test]
fn no_corruption_in_healthy_heaps_net8() {
    healthy(Variant::Net8);
}

#[test]
fn no_corruption_in_a_live_allocating_process() {
    let tb = start_testbed(Variant::Net10, &["--allocate"]);
    let pid = tb.pid.to_string();
    // By default every thread is held for the check: whole, and said for how long.
    for run in 0..3 {
        let (code, v) = verify(&["--pid", &pid]);
        assert_eq!(v["corruptions"], serde_json::json!([]), "run {run}: {v}");
        assert_eq!(code, Some(0), "run {run}");
        assert_eq!(v["reads"]["consistent"], true, "run {run}");
        assert!(
            v["reads"]["frozen"]["threads"].as_u64().unwrap_or(0) > 5,
            "run {run}: {v}"
        );
    }
    // Without the freeze, a check the collections kept tearing says so.
    let out = Command::new(common::cdac_exe())
        .args(["verifyheap", "--json", "--no-freeze", "--pid", &pid])
        .output()
        .expect("run cdac verifyheap --no-freeze");
    let v: Value = serde_json::from_slice(&out.stdout).expect("verifyheap JSON");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if v["reads"]["consistent"] == true {
        assert_eq!(v["corruptions_total"], 0, "{v}");
    } else {
        assert!(
            stderr.contains("may be objects moving, not damage"),
            "{stderr}"
        );
    }
}

/// The file offset of virtual address `addr` in an ELF core (its PT_LOAD segments).
fn file_offset(core: &Path, addr: u64) -> u64 {
    let mut f = std::fs::File::open(core).expect("open core");
    let mut ehdr = [0u8; 64];
    f.read_exact(&mut ehdr).expect("ELF header");
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let phoff = u64_at(&ehdr, 0x20);
    let (phentsize, phnum) = (u16_at(&ehdr, 0x36) as u64, u16_at(&ehdr, 0x38) as u64);
    let mut phdrs = vec![0u8; (phentsize * phnum) as usize];
    f.seek(SeekFrom::Start(phoff)).expect("seek");
    f.read_exact(&mut phdrs).expect("program headers");
    for i in 0..phnum as usize {
        let p = &phdrs[i * phentsize as usize..];
        let kind = u32::from_le_bytes(p[0..4].try_into().unwrap());
        let (offset, vaddr, filesz) = (u64_at(p, 8), u64_at(p, 16), u64_at(p, 32));
        if kind == 1 && addr >= vaddr && addr + 8 <= vaddr + filesz {
            return offset + (addr - vaddr);
        }
    }
    panic!("{addr:#x} is in no PT_LOAD of {}", core.display());
}

fn patch(core: &Path, addr: u64, bytes: &[u8]) {
    let at = file_offset(core, addr);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(core)
        .expect("open core for writing");
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(bytes).expect("patch");
}

#[test]
fn planted_faults_are_found_by_address() {
    let tb = testbed_of(Variant::Net10);
    let intact = tb.dump("full");
    let dump = scratch("verifyheap").join("planted.core");
    std::fs::copy(&intact, &dump).expect("copy the dump");
    let d = dump.display().to_string();
    let objects = cdac_json(&["heap", "--objects", "--json", "--dump", &d]);
    let list = objects["object_list"].as_array().expect("object_list");
    let addr = |o: &Value| common::hex(&o["address"]);
    let gen = |o: &Value| o["generation"].as_str().unwrap_or_default().to_string();
    // A List`1 in gen2 whose _items (offset 8) gets a free object's address.
    let list_obj = list
        .iter()
        .find(|o| {
            o["name"]
                .as_str()
                .unwrap_or("")
                .starts_with("System.Collections.Generic.List`1")
                && gen(o) == "gen2"
        })
        .map(addr)
        .expect("a List in gen2");
    let free = list
        .iter()
        .find(|o| o["name"] == "Free" && gen(o) == "gen2")
        .map(addr)
        .expect("a free object in gen2");
    // Two int[]s in gen2 (not the first of their segment): one MethodTable destroyed, one
    // length made huge.
    let arrays: Vec<u64> = list
        .iter()
        .filter(|o| o["name"] == "System.Int32[]" && gen(o) == "gen2")
        .map(addr)
        .skip(3)
        .step_by(50)
        .take(2)
        .collect();
    assert_eq!(arrays.len(), 2, "two int[]s");
    patch(&dump, list_obj + 8, &free.to_le_bytes());
    patch(&dump, arrays[0], &[0xff; 8]);
    patch(&dump, arrays[1] + 8, &0x7fff_ffffu32.to_le_bytes());

    let (code, v) = verify(&["--dump", &d]);
    assert_eq!(code, Some(1), "{v}");
    let found = v["corruptions"].as_array().expect("corruptions");
    let has = |kind: &str, object: u64| {
        found
            .iter()
            .any(|c| c["kind"] == kind && common::hex(&c["object"]) == object)
    };
    assert!(
        found.iter().any(|c| c["kind"] == "reference_to_free"
            && common::hex(&c["object"]) == list_obj
            && c["slot"] == 8
            && common::hex(&c["target"]) == free),
        "the reference into free space: {v}"
    );
    assert!(
        has("bad_object", arrays[0]),
        "the destroyed MethodTable: {v}"
    );
    assert!(has("bad_object", arrays[1]), "the huge length: {v}");
    // Nothing else: the three faults, and the references into what the walk skipped
    // after the two bad objects (objects it could not see), nothing more.
    for c in found {
        let object = common::hex(&c["object"]);
        assert!(
            object == list_obj || arrays.contains(&object) || c["kind"] == "reference_to_no_object",
            "an unexpected corruption: {c}"
        );
    }
    std::fs::remove_file(&dump).ok();
}
