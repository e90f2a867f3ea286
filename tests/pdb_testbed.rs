//! Portable PDBs of the testbed (`target/testbed/<variant>/Cdac.Testbed.pdb`, built by
//! scripts/testbed-setup): source lines of known calls agree with the source text, every
//! method's sequence points decode, and the finder finds and checks the PDB.

mod common;

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
        "CrashInner",
        "CrashInner();",
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
