//! Portable PDBs of the testbed (`target/testbed/<variant>/Cdac.Testbed.pdb`, built by
//! scripts/testbed-setup): source lines of known calls agree with the source text, every
//! method's sequence points decode, and the finder finds and checks the PDB.

use crate::common;

use std::path::{Path, PathBuf};

use cdac::formats::ecma::{pe, Metadata, TableId, Token};
use cdac::formats::pdb::{debug_directory, find_pdb, PdbFinder, PdbSource, PdbTable, PortablePdb};
use common::Variant;

fn variant_dir(variant: Variant) -> PathBuf {
    let exe = common::testbed_exe(variant);
    exe.parent().expect("testbed dir").to_path_buf()
}

/// The name of the method a call/callvirt token refers to (MethodDef or MemberRef).
fn callee_name(md: &Metadata, token: u32) -> Option<String> {
    let t = Token(token);
    match t.table()? {
        TableId::MethodDef => Some(md.method_name(t.rid()).ok()?.into_owned()),
        TableId::MemberRef => {
            let row = md.member_ref(t.rid()).ok()?;
            Some(md.strings.get(row.name).ok()?.to_string())
        }
        _ => None,
    }
}

/// The IL body of MethodDef `rid` (file layout image).
fn il_body<'a>(image: &'a [u8], md: &Metadata, rid: u32) -> &'a [u8] {
    use object::read::pe::PeFile64;
    let rva = md.method_def(rid).expect("method").rva;
    let file = PeFile64::parse(image).expect("PE");
    let (off, _) = file
        .section_table()
        .pe_file_range_at(rva)
        .expect("body in a section");
    let body = &image[off as usize..];
    if body[0] & 3 == 2 {
        let size = usize::from(body[0] >> 2);
        &body[1..1 + size]
    } else {
        let header = usize::from(body[1] >> 4) * 4;
        let size = u32::from_le_bytes([body[4], body[5], body[6], body[7]]) as usize;
        &body[header..header + size]
    }
}

/// IL offsets of the call/callvirt instructions in `il` whose callee is named `callee`.
/// (A byte scan: the methods checked are a few instructions long, and every hit must
/// resolve to a method of that name.)
fn call_offsets(md: &Metadata, il: &[u8], callee: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for i in 0..il.len().saturating_sub(4) {
        if il[i] == 0x28 || il[i] == 0x6F {
            let token = u32::from_le_bytes([il[i + 1], il[i + 2], il[i + 3], il[i + 4]]);
            if callee_name(md, token).as_deref() == Some(callee) {
                out.push(i as u32);
            }
        }
    }
    out
}

fn find_method(md: &Metadata, type_name: &str, method: &str) -> u32 {
    let t = md
        .find_type(type_name)
        .unwrap_or_else(|| panic!("type {type_name}"));
    md.type_methods(t)
        .expect("methods")
        .into_iter()
        .find(|&m| md.method_name(m).expect("name") == method)
        .unwrap_or_else(|| panic!("{type_name}::{method}"))
}

/// The 1-based line of the first line containing `needle` after the first line containing
/// `after` in the source file.
fn source_line(source: &str, after: &str, needle: &str) -> u32 {
    let lines: Vec<&str> = source.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains(after))
        .unwrap_or_else(|| panic!("{after:?} not in source"));
    let at = lines[start..]
        .iter()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} after {after:?} not in source"));
    (start + at + 1) as u32
}

/// (source file, type, method, method's declaration text, callee, call's source text)
const CALLS: &[(&str, &str, &str, &str, &str, &str)] = &[
    (
        "ParkedThreads.cs",
        "Cdac.Testbed.Parked.Sleeper",
        "SleepInner",
        "static void SleepInner(",
        "Sleep",
        "Thread.Sleep(Timeout.Infinite)",
    ),
    (
        "ParkedThreads.cs",
        "Cdac.Testbed.Parked.Sleeper",
        "SleepInner",
        "static void SleepInner(",
        "MarkReady",
        "pt.MarkReady()",
    ),
    (
        "ParkedThreads.cs",
        "Cdac.Testbed.Parked.CatchBlocker",
        "CatchOwner",
        "static void CatchOwner(",
        "CatchThrow",
        "CatchThrow();",
    ),
    (
        "ParkedThreads.cs",
        "Cdac.Testbed.Parked.CatchBlocker",
        "CatchOwner",
        "static void CatchOwner(",
        "CatchWait",
        "CatchWait(pt, e);",
    ),
    (
        "Crash.cs",
        "Cdac.Testbed.Crash",
        "CrashOuter",
        "static void CrashOuter(",
        "CrashMiddle",
        "CrashMiddle();",
    ),
    (
        "Crash.cs",
        "Cdac.Testbed.Crash",
        "CrashStart",
        "static void CrashStart(",
        "CrashOuter",
        "CrashOuter()",
    ),
];

fn check_variant(variant: Variant) {
    let dir = variant_dir(variant);
    let dll = dir.join("Cdac.Testbed.dll");
    let image = std::fs::read(&dll).expect("dll");
    let md = Metadata::parse(pe::metadata_from_pe(&image, pe::PeLayout::File).expect("md"))
        .expect("metadata");
    let found = find_pdb(&dll).expect("find PDB");
    // The CodeView path (the build's obj/ folder) when it is still there, else the copy
    // next to the assembly: the same PDB either way (the id is checked).
    match &found.source {
        PdbSource::CodeViewPath(p) => assert!(p.ends_with("Cdac.Testbed.pdb"), "{}", p.display()),
        PdbSource::NextToAssembly(p) => assert_eq!(p, &dir.join("Cdac.Testbed.pdb")),
        PdbSource::Embedded => panic!("the testbed's PDB is not embedded"),
    }
    let pdb = &found.pdb;
    // The id is the CodeView entry's (find_pdb checked it; check it here too).
    let cv = debug_directory(&image)
        .expect("debug dir")
        .codeview(&image)
        .expect("codeview")
        .expect("a CodeView entry");
    assert_eq!(cv.id, pdb.id);
    assert!(cv.portable, "CodeView entry marked portable");
    // The compiler's PdbChecksum entry is the PDB's SHA-256 with its id zeroed.
    let sums = debug_directory(&image)
        .expect("debug dir")
        .pdb_checksums(&image)
        .expect("checksums");
    assert_eq!(sums.len(), 1, "{sums:?}");
    assert_eq!(sums[0].0, "SHA256");
    assert_eq!(
        sums[0].1,
        pdb.checksum_sha256().to_vec(),
        "{}",
        variant.name()
    );
    assert!(cv.path.ends_with("Cdac.Testbed.pdb"), "{}", cv.path);
    assert_eq!(
        pdb.row_count(PdbTable::MethodDebugInformation),
        md.tables.rows(TableId::MethodDef),
        "one MethodDebugInformation row per MethodDef"
    );
    let src_dir = common::repo().join("testbed/Cdac.Testbed");
    for &(file, ty, method, decl, callee, text) in CALLS {
        let rid = find_method(&md, ty, method);
        let il = il_body(&image, &md, rid);
        let offsets = call_offsets(&md, il, callee);
        assert_eq!(offsets.len(), 1, "{ty}::{method} calls {callee} once");
        let loc = pdb
            .line_at(rid, offsets[0])
            .expect("line_at")
            .unwrap_or_else(|| panic!("{ty}::{method} +{:#x} has a line", offsets[0]));
        let source = std::fs::read_to_string(src_dir.join(file)).expect("source");
        let want = source_line(&source, decl, text);
        assert!(
            Path::new(&loc.file.replace('\\', "/")).ends_with(format!("Cdac.Testbed/{file}")),
            "{} for {ty}::{method}",
            loc.file
        );
        assert_eq!(
            loc.line,
            want,
            "{}: {ty}::{method} IL {:#x} (call {callee})",
            variant.name(),
            offsets[0]
        );
        // The column is where the call's statement starts on that line.
        let line_text = source.lines().nth(want as usize - 1).expect("line");
        let col = line_text.find(text).expect("text on line") as u32 + 1;
        assert!(loc.column <= col, "column {} <= {col}", loc.column);
        eprintln!(
            "{}: {ty}::{method} IL_{:04x} -> {}:{}:{}",
            variant.name(),
            offsets[0],
            loc.file,
            loc.line,
            loc.column
        );
    }
    // Every row decodes; count points.
    let (mut methods, mut points, mut hidden) = (0, 0, 0);
    for rid in 1..=pdb.row_count(PdbTable::MethodDebugInformation) {
        let lines = pdb
            .method_lines(rid)
            .unwrap_or_else(|e| panic!("{}: MethodDef {rid}: {e}", variant.name()));
        if !lines.is_empty() {
            methods += 1;
        }
        for p in &lines {
            if p.hidden {
                hidden += 1;
            } else {
                assert!(p.start_line >= 1 && p.end_line >= p.start_line);
            }
            pdb.document_name(p.document).expect("document name");
        }
        points += lines.len();
        assert!(lines.windows(2).all(|w| w[0].il_offset < w[1].il_offset));
    }
    let documents = pdb.row_count(PdbTable::Document);
    for d in 1..=documents {
        pdb.document_name(d).expect("document name");
    }
    eprintln!(
        "{}: {} MethodDefs, {methods} with sequence points, {points} points ({hidden} hidden), {documents} documents",
        variant.name(),
        pdb.row_count(PdbTable::MethodDebugInformation)
    );
    assert!(methods > 100 && points > methods);
}

#[test]
fn testbed_pdb_net10() {
    check_variant(Variant::Net10);
}

#[test]
fn testbed_pdb_net11() {
    check_variant(Variant::Net11);
}

#[test]
fn testbed_pdb_net9() {
    check_variant(Variant::Net9);
}

#[test]
fn testbed_pdb_net8() {
    check_variant(Variant::Net8);
}

#[test]
fn r2r_library_pdb_decodes_and_finder_caches() {
    let dir = variant_dir(Variant::Net10);
    let dll = dir.join("Cdac.Testbed.R2R.dll");
    let finder = PdbFinder::new();
    let a = finder.pdb_for(&dll).expect("R2R library's PDB");
    let b = finder.pdb_for(&dll).expect("cached");
    assert!(
        std::sync::Arc::ptr_eq(&a, &b),
        "second lookup is the cached one"
    );
    for rid in 1..=a.pdb.row_count(PdbTable::MethodDebugInformation) {
        a.pdb.method_lines(rid).expect("decodes");
    }
    assert!(matches!(
        a.source,
        PdbSource::CodeViewPath(_) | PdbSource::NextToAssembly(_)
    ));
    // Another assembly's PDB next to this one is refused by id. The copy's CodeView path
    // is made to name no file (one byte changed), so that the finder looks next to it.
    let copy = common::scratch("pdb-mismatch");
    let mut image = std::fs::read(&dll).expect("dll");
    let cv = debug_directory(&image)
        .expect("debug dir")
        .codeview(&image)
        .expect("codeview")
        .expect("CodeView entry");
    let at = image
        .windows(cv.path.len())
        .position(|w| w == cv.path.as_bytes())
        .expect("path in image");
    image[at + 1] = b'#';
    std::fs::write(copy.join("Cdac.Testbed.R2R.dll"), &image).expect("write dll");
    // With its own PDB next to it, that one is found there.
    std::fs::copy(
        dir.join("Cdac.Testbed.R2R.pdb"),
        copy.join("Cdac.Testbed.R2R.pdb"),
    )
    .expect("copy pdb");
    let found = find_pdb(&copy.join("Cdac.Testbed.R2R.dll")).expect("found next to it");
    assert_eq!(
        found.source,
        PdbSource::NextToAssembly(copy.join("Cdac.Testbed.R2R.pdb"))
    );
    assert_eq!(found.pdb.id, cv.id);
    std::fs::copy(
        dir.join("Cdac.Testbed.pdb"),
        copy.join("Cdac.Testbed.R2R.pdb"),
    )
    .expect("copy pdb");
    let err = find_pdb(&copy.join("Cdac.Testbed.R2R.dll")).expect_err("wrong PDB refused");
    assert!(err.to_string().contains("the assembly wants"), "{err}");
    // A PDB file is not an assembly, and an assembly is not a PDB.
    assert!(PortablePdb::open(&dll).is_err());
    let _ = PortablePdb::open(&dir.join("Cdac.Testbed.pdb")).expect("opens");
}

/// The testbed's assembly with its PDB embedded: the Reproducible entry of the copy's
/// debug directory is turned into an Embedded Portable PDB entry whose data ("MPDB", size,
/// deflate) is appended to the file, and the CodeView path made to name no file.
#[test]
fn embedded_pdb_is_found_first_and_reads_the_same() {
    let dir = variant_dir(Variant::Net10);
    let dll = dir.join("Cdac.Testbed.dll");
    let mut image = std::fs::read(&dll).expect("dll");
    let pdb_bytes = std::fs::read(dir.join("Cdac.Testbed.pdb")).expect("pdb");
    let dd = debug_directory(&image).expect("debug dir");
    let cv_entry = *dd
        .entries
        .iter()
        .find(|e| e.kind == 2)
        .expect("CodeView entry");
    let repro = dd
        .entries
        .iter()
        .position(|e| e.kind == 16)
        .expect("Reproducible entry");
    let mut pattern = Vec::new();
    pattern.extend_from_slice(&0u32.to_le_bytes());
    pattern.extend_from_slice(&cv_entry.time_date_stamp.to_le_bytes());
    pattern.extend_from_slice(&cv_entry.major_version.to_le_bytes());
    pattern.extend_from_slice(&cv_entry.minor_version.to_le_bytes());
    pattern.extend_from_slice(&2u32.to_le_bytes());
    let cv_index = dd.entries.iter().position(|e| e.kind == 2).expect("cv");
    let dir_at = image
        .windows(pattern.len())
        .position(|w| w == pattern.as_slice())
        .expect("CodeView entry in the file")
        - cv_index * 28;
    let mut blob = b"MPDB".to_vec();
    blob.extend_from_slice(&(pdb_bytes.len() as u32).to_le_bytes());
    blob.extend_from_slice(&miniz_oxide::deflate::compress_to_vec(&pdb_bytes, 6));
    let data_at = image.len() as u32;
    let e = dir_at + repro * 28;
    image[e + 8..e + 12].copy_from_slice(&0x0100u32.to_le_bytes()); // version 1.0x100
    image[e + 12..e + 16].copy_from_slice(&17u32.to_le_bytes());
    image[e + 16..e + 20].copy_from_slice(&(blob.len() as u32).to_le_bytes());
    image[e + 20..e + 24].copy_from_slice(&0u32.to_le_bytes());
    image[e + 24..e + 28].copy_from_slice(&data_at.to_le_bytes());
    image.extend_from_slice(&blob);
    let cv = debug_directory(&image)
        .unwrap()
        .codeview(&image)
        .unwrap()
        .unwrap();
    let at = image
        .windows(cv.path.len())
        .position(|w| w == cv.path.as_bytes())
        .expect("path in image");
    image[at + 1] = b'#';
    let copy = common::scratch("pdb-embedded");
    let path = copy.join("Cdac.Testbed.dll");
    std::fs::write(&path, &image).expect("write");
    let found = find_pdb(&path).expect("embedded PDB found");
    assert_eq!(found.source, PdbSource::Embedded);
    assert_eq!(found.pdb.id, cv.id);
    assert_eq!(found.pdb.bytes(), pdb_bytes.as_slice());
    let direct = PortablePdb::from_embedded(&image)
        .expect("embedded")
        .expect("present");
    assert_eq!(direct.id, cv.id);
    // A corrupt deflate stream is an error, and the finder falls back (here: to nothing,
    // since neither the CodeView path nor NAME.pdb exists).
    let n = image.len();
    for b in &mut image[n - 40..n - 8] {
        *b ^= 0x5a;
    }
    assert!(PortablePdb::from_embedded(&image).is_err());
    std::fs::write(&path, &image).expect("write");
    let err = find_pdb(&path).expect_err("no PDB");
    assert!(err.to_string().contains("embedded"), "{err}");
}

/// Damaged PDB bytes (bytes changed, or cut short) never panic: parse, every row's
/// sequence points, every document name and line lookups return values or errors.
#[test]
fn damaged_pdb_never_panics() {
    use proptest::prelude::*;
    let pdb_bytes =
        std::fs::read(variant_dir(Variant::Net10).join("Cdac.Testbed.pdb")).expect("pdb");
    let len = pdb_bytes.len();
    let exercise = |bytes: Vec<u8>| {
        if let Ok(pdb) = PortablePdb::parse(bytes) {
            for rid in 1..=pdb.row_count(PdbTable::MethodDebugInformation).min(400) {
                let _ = pdb.method_lines(rid);
                let _ = pdb.line_at(rid, 7);
            }
            for d in 0..=pdb.row_count(PdbTable::Document) + 1 {
                let _ = pdb.document_name(d);
                let _ = pdb.document_language(d);
            }
        }
    };
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 300,
        ..Default::default()
    });
    runner
        .run(
            &(
                proptest::collection::vec((0..len, any::<u8>()), 1..16),
                0..=len,
            ),
            |(edits, cut)| {
                let mut bytes = pdb_bytes.clone();
                for (at, v) in edits {
                    bytes[at] = v;
                }
                bytes.truncate(cut.max(1));
                exercise(bytes);
                Ok(())
            },
        )
        .expect("no panic");
    // Every single byte of the header and table area set to 0xFF, one at a time.
    for at in 0..len.min(800) {
        let mut bytes = pdb_bytes.clone();
        bytes[at] = 0xFF;
        exercise(bytes);
    }
}

#[test]
fn testbed_pdb_net8_0_0() {
    check_variant(Variant::Net8_0_0);
}

#[test]
fn testbed_pdb_net10_composite() {
    check_variant(Variant::Net10Composite);
}
