//! The ECMA-335 metadata reader on the real framework assemblies, and its method names
//! against the runtime's own perf map.
//!
//! * every `*.dll` of the .NET 8.0.33 testbed's self-contained folder (the framework and
//!   the testbed's own assemblies) parses, in file and in mapped layout, and every row,
//!   MethodDef signature and method name decodes;
//! * the perf maps of live testbeds (or the one `CDAC_ECMA_PERF_MAP` names) are the oracle
//!   for names: each JIT'ed method of those assemblies is looked up by declaring type and
//!   name and must be formatted exactly as the runtime wrote it (minus the `[Tier]`), on
//!   .NET 8.0.33 and 10.0.14, which print whole names, and on .NET 8.0.0, whose perf map
//!   drops the last byte of some names;
//! * random bytes and mutated real metadata never make the reader panic.

use crate::common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use cdac::formats::ecma::pe::{cli_header, metadata_from_pe, PeLayout};
use cdac::formats::ecma::{
    decode_method_sig, Metadata, NestedStyle, PerfMapNameOptions, TableId, Token,
};
use common::{perf_map, testbed_exe, testbed_of, Variant};
use proptest::prelude::*;

/// A testbed variant's folder: the framework and the testbed's assemblies (built when
/// missing).
fn folder_of(variant: Variant) -> PathBuf {
    testbed_exe(variant)
        .parent()
        .expect("testbed folder")
        .to_path_buf()
}

/// The .NET 8.0.33 testbed's folder.
fn runtime_dir() -> PathBuf {
    folder_of(Variant::Net8)
}

/// Every managed assembly of a testbed folder.
fn assembly_paths_in(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("runtime dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "dll"))
        .collect();
    paths.sort();
    paths
}

/// Every managed assembly the .NET 8.0.33 testbed's perf map can name.
fn assembly_paths() -> Vec<PathBuf> {
    assembly_paths_in(&runtime_dir())
}

/// Lays a PE file out as the loader maps it: headers and each section at its RVA.
fn map_image(file: &[u8]) -> Vec<u8> {
    use object::read::pe::{ImageNtHeaders, ImageOptionalHeader};
    fn map<H: ImageNtHeaders>(file: &[u8]) -> Vec<u8> {
        let dos = object::pe::ImageDosHeader::parse(file).unwrap();
        let mut offset = dos.nt_headers_offset().into();
        let (nt, _) = H::parse(file, &mut offset).unwrap();
        let sections = nt.sections(file, offset).unwrap();
        let mut image = vec![0u8; nt.optional_header().size_of_image() as usize];
        let headers = nt.optional_header().size_of_headers() as usize;
        image[..headers].copy_from_slice(&file[..headers]);
        for s in sections.iter() {
            let data = s.pe_data(file).unwrap();
            let va = s.virtual_address.get(object::LittleEndian) as usize;
            image[va..va + data.len()].copy_from_slice(data);
        }
        image
    }
    match object::read::pe::optional_header_magic(file).unwrap() {
        object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC => map::<object::pe::ImageNtHeaders64>(file),
        _ => map::<object::pe::ImageNtHeaders32>(file),
    }
}

#[test]
fn every_framework_assembly_parses_and_every_method_signature_decodes() {
    let paths = assembly_paths();
    assert!(paths.len() > 150, "only {} assemblies", paths.len());
    let (mut types, mut methods, mut rows) = (0u64, 0u64, 0u64);
    let mut failures = Vec::new();
    for path in &paths {
        let file = std::fs::read(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let blob = match metadata_from_pe(&file, PeLayout::File) {
            Ok(b) => b,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let md = match Metadata::parse(blob) {
            Ok(md) => md,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let report = md.check_all();
        println!(
            "{name:55} {:>6} TypeDefs {:>7} MethodDefs {:>8} rows ({} {})",
            report.type_defs,
            report.method_defs,
            report.rows,
            md.root.version,
            md.tables.stream_name
        );
        types += u64::from(report.type_defs);
        methods += u64::from(report.method_defs);
        rows += report.rows;
        if report.errors != 0 || report.bad_heap_refs != 0 {
            failures.push(format!(
                "{name}: {} error(s), {} bad heap reference(s): {:?}",
                report.errors, report.bad_heap_refs, report.first_errors
            ));
        }
        assert_eq!(report.method_sigs_ok, report.method_defs, "{name}");
        assert_eq!(report.names_ok, report.method_defs, "{name}");
        // Every method has a declaring type, and every TypeDef a name.
        for rid in 1..=md.tables.rows(TableId::MethodDef) {
            assert!(
                md.method_declaring_type(rid).is_some(),
                "{name}: method {rid}"
            );
        }
    }
    println!(
        "{} assemblies: {types} TypeDefs, {methods} MethodDefs, {rows} rows",
        paths.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(methods > 100_000, "{methods} MethodDefs");
}

#[test]
fn mapped_layout_finds_the_same_metadata() {
    for name in [
        "System.Private.CoreLib.dll",
        "System.Linq.dll",
        "System.Runtime.dll",
    ] {
        let file = std::fs::read(runtime_dir().join(name)).unwrap();
        let image = map_image(&file);
        let from_file = metadata_from_pe(&file, PeLayout::File).unwrap();
        let from_image = metadata_from_pe(&image, PeLayout::Mapped).unwrap();
        assert_eq!(from_file, from_image, "{name}");
        let cli = cli_header(&image, PeLayout::Mapped).unwrap();
        assert_eq!(cli.metadata_size as usize, from_image.len());
        // CoreLib and System.Linq are ReadyToRun code: they have a ManagedNativeHeader.
        if name != "System.Runtime.dll" {
            assert_ne!(cli.managed_native_header_rva, 0, "{name}");
        }
        assert!(Metadata::parse(from_image).is_ok());
    }
}

#[test]
fn corelib_names_and_relations() {
    let file = std::fs::read(runtime_dir().join("System.Private.CoreLib.dll")).unwrap();
    let md = Metadata::parse(metadata_from_pe(&file, PeLayout::File).unwrap()).unwrap();
    assert_eq!(md.assembly_name().unwrap(), "System.Private.CoreLib");
    assert_eq!(md.root.version, "v4.0.30319");

    let list = md
        .find_type("System.Collections.Generic.List`1")
        .expect("List`1");
    assert_eq!(
        md.runtime_type_name(list, None).unwrap(),
        "System.Collections.Generic.List`1[T]"
    );
    assert_eq!(
        md.runtime_type_name(list, Some(&["System.__Canon"]))
            .unwrap(),
        "System.Collections.Generic.List`1[System.__Canon]"
    );
    assert_eq!(
        md.generic_param_names(Token::new(TableId::TypeDef, list))
            .unwrap(),
        vec!["T"]
    );
    let enumerator = md
        .find_type("System.Collections.Generic.List`1+Enumerator")
        .expect("List`1+Enumerator");
    assert_eq!(md.enclosing_type(enumerator), Some(list));
    assert_eq!(
        md.type_name(enumerator, NestedStyle::Slash).unwrap(),
        "System.Collections.Generic.List`1/Enumerator"
    );
    assert_eq!(
        md.type_name(enumerator, NestedStyle::Plus).unwrap(),
        "System.Collections.Generic.List`1+Enumerator"
    );

    // Methods by the declaring type's method list; static vs instance; signatures.
    let methods = md.type_methods(list).unwrap();
    let named = |n: &str| -> Vec<u32> {
        methods
            .iter()
            .copied()
            .filter(|&m| md.method_name(m).unwrap() == n)
            .collect()
    };
    let get_count = named("get_Count")[0];
    assert_eq!(md.method_declaring_type(get_count), Some(list));
    assert!(!md.method_is_static(get_count).unwrap());
    assert_eq!(
        md.perf_map_method_name(get_count, &PerfMapNameOptions {
            type_instantiation: Some(&["System.__Canon"]),
            ..Default::default()
        })
        .unwrap(),
        "instance int32 [System.Private.CoreLib] System.Collections.Generic.List`1[System.__Canon]::get_Count()"
    );
    let ctors: Vec<String> = named(".ctor")
        .into_iter()
        .map(|m| {
            md.perf_map_method_name(m, &PerfMapNameOptions::default())
                .unwrap()
        })
        .collect();
    assert!(
        ctors.contains(&"instance void [System.Private.CoreLib] System.Collections.Generic.List`1[T]::.ctor(class System.Collections.Generic.IEnumerable`1<!0>)".to_string()),
        "{ctors:#?}"
    );
    let add = named("Add")[0];
    let params = md.method_params(add).unwrap();
    assert_eq!(md.strings.get(params.last().unwrap().name).unwrap(), "item");

    let hash = md.find_type("System.Collections.HashHelpers").unwrap();
    let get_prime = md
        .type_methods(hash)
        .unwrap()
        .into_iter()
        .find(|&m| md.method_name(m).unwrap() == "GetPrime")
        .unwrap();
    assert!(md.method_is_static(get_prime).unwrap());
    assert_eq!(
        md.perf_map_method_name(get_prime, &PerfMapNameOptions::default())
            .unwrap(),
        "int32 [System.Private.CoreLib] System.Collections.HashHelpers::GetPrime(int32)"
    );
    assert_eq!(
        md.il_method_signature(get_prime, "").unwrap(),
        "int32(int32)"
    );

    // Generic method parameters.
    let array = md.find_type("System.Array").unwrap();
    let empty = md
        .type_methods(array)
        .unwrap()
        .into_iter()
        .find(|&m| md.method_name(m).unwrap() == "Empty")
        .unwrap();
    let sig = md.method_signature(empty).unwrap();
    assert!(sig.is_generic() && sig.generic_param_count == 1);
    assert_eq!(
        md.generic_param_names(Token::new(TableId::MethodDef, empty))
            .unwrap(),
        vec!["T"]
    );
    assert_eq!(
        md.perf_map_method_name(empty, &PerfMapNameOptions::default())
            .unwrap(),
        "!!0[] [System.Private.CoreLib] System.Array::Empty()"
    );
}

// ---------------------------------------------------------------- the perf map oracle

/// Splits a runtime type name `Ns.Outer+Inner[A,B[C]]` into the open name and the
/// top-level instantiation arguments.
fn split_instantiation(type_name: &str) -> (&str, Vec<&str>) {
    let bytes = type_name.as_bytes();
    let mut open = None;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'[' => {
                open = Some(i);
                break;
            }
            _ => {}
        }
        i += 1;
    }
    let Some(start) = open else {
        return (type_name, Vec::new());
    };
    let inner = &type_name[start + 1..type_name.len().saturating_sub(1)];
    let mut args = Vec::new();
    let (mut depth, mut from) = (0i32, 0usize);
    let ib = inner.as_bytes();
    let mut j = 0;
    while j < ib.len() {
        match ib[j] {
            b'\\' => j += 1,
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                args.push(&inner[from..j]);
                from = j + 1;
            }
            _ => {}
        }
        j += 1;
    }
    args.push(&inner[from..]);
    (&type_name[..start], args)
}

/// The perf-map name without its `[Tier]` suffix.
fn strip_tier(name: &str) -> &str {
    if let Some(open) = name.rfind('[') {
        let tier = &name[open + 1..];
        if tier.ends_with(']')
            && tier.len() > 1
            && tier[..tier.len() - 1]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric())
            && name[..open].ends_with(')')
        {
            return &name[..open];
        }
    }
    name
}

/// `(assembly, declaring type, rest after "::")` of a perf-map method name.
fn split_name<'n>(
    name: &'n str,
    assemblies: &HashSet<String>,
) -> Option<(&'n str, &'n str, &'n str)> {
    let mut from = 0;
    while let Some(p) = name[from..].find(" [") {
        let start = from + p + 2;
        if let Some(close) = name[start..].find("] ") {
            let asm = &name[start..start + close];
            if assemblies.contains(asm) {
                let rest = &name[start + close + 2..];
                let sep = rest.find("::")?;
                return Some((asm, &rest[..sep], &rest[sep + 2..]));
            }
        }
        from = start;
    }
    None
}

#[derive(Default)]
struct Tally {
    total: usize,
    matched: usize,
    kinds: BTreeMap<&'static str, Vec<String>>,
}

impl Tally {
    fn miss(&mut self, kind: &'static str, detail: String) {
        self.kinds.entry(kind).or_default().push(detail);
    }
    fn report(&self, what: &str) {
        println!(
            "{what}: {}/{} perf-map names reproduced exactly ({:.2}%)",
            self.matched,
            self.total,
            100.0 * self.matched as f64 / self.total.max(1) as f64
        );
        for (kind, list) in &self.kinds {
            println!("  {kind}: {}", list.len());
            for d in list.iter().take(5) {
                println!("    {d}");
            }
        }
    }
}

/// A name whose `[Asm] Type::Method` label is 41 bytes, which early .NET 8 builds print
/// one byte short (`Cdac.Testbed.Program::Mai(string[])`).
const TRUNCATED_IN_EARLY_NET8: &str = "[Cdac.Testbed] Cdac.Testbed.Program::Main(";

#[test]
fn method_names_match_the_runtime_perf_map() {
    let map_path = match std::env::var_os("CDAC_ECMA_PERF_MAP") {
        Some(p) => PathBuf::from(p),
        None => testbed_of(Variant::Net8).perf_map_for(None),
    };
    let would_truncate = names_match(&map_path, &runtime_dir(), false);
    // 8.0.33 prints whole the names early builds cut (8.0.29 fixed the printf helper).
    if std::env::var_os("CDAC_ECMA_PERF_MAP").is_none() {
        assert!(
            would_truncate
                .iter()
                .any(|n| n.contains(TRUNCATED_IN_EARLY_NET8)),
            "{would_truncate:?}"
        );
    }
}

#[test]
fn method_names_match_the_net10_perf_map() {
    names_match(
        &testbed_of(Variant::Net10).perf_map_for(None),
        &folder_of(Variant::Net10),
        false,
    );
}

#[test]
fn method_names_match_a_truncating_runtime_perf_map() {
    // 8.0.0's perf map drops the last byte of names whose "[Asm] Type::Method" label is
    // 41, 81, 161, ... bytes: reproduced on demand.
    let tb = testbed_of(Variant::Net8_0_0);
    let truncated = names_match(&tb.perf_map_for(None), &tb.runtime_dir(), true);
    let cut = &TRUNCATED_IN_EARLY_NET8[..TRUNCATED_IN_EARLY_NET8.len() - 2];
    assert!(
        truncated.iter().any(|n| n.contains(&format!("{cut}("))),
        "{truncated:?}"
    );
}

/// Checks every name of the perf map at `map_path` against the assemblies of `dir`, with or
/// without early .NET 8's truncation; returns the matched names the other choice would have
/// printed differently (with the truncation: the names it cut; without: the names early
/// .NET 8 builds would have cut).
fn names_match(map_path: &Path, dir: &Path, net8_truncation: bool) -> Vec<String> {
    let images: Vec<(PathBuf, Vec<u8>)> = assembly_paths_in(dir)
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    let mut by_assembly: HashMap<String, Metadata<'_>> = HashMap::new();
    for (path, bytes) in &images {
        let md = Metadata::parse(metadata_from_pe(bytes, PeLayout::File).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        by_assembly.insert(md.assembly_name().unwrap().into_owned(), md);
    }
    let names: HashSet<String> = by_assembly.keys().cloned().collect();

    let mut seen = HashSet::new();
    let (mut plain, mut generic) = (Tally::default(), Tally::default());
    let mut per_assembly: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut examples = Vec::new();
    let mut changed = Vec::new();
    for (_, _, raw) in perf_map(Path::new(&map_path)) {
        let name = strip_tier(&raw);
        if name.starts_with("stub<") || !seen.insert(name.to_string()) {
            continue;
        }
        let Some((asm, type_name, _)) = split_name(name, &names) else {
            continue;
        };
        if type_name == "dynamicClass" {
            continue;
        }
        let md = &by_assembly[asm];
        let (open, args) = split_instantiation(type_name);
        let tally = if args.is_empty() {
            &mut plain
        } else {
            &mut generic
        };
        tally.total += 1;
        let entry = per_assembly.entry(asm.to_string()).or_default();
        entry.0 += 1;
        let Some(rid) = md.find_type(open) else {
            tally.miss("declaring type not found", name.to_string());
            continue;
        };
        let options = PerfMapNameOptions {
            type_instantiation: if args.is_empty() { None } else { Some(&args) },
            net8_truncation,
            ..Default::default()
        };
        let methods = md.type_methods(rid).unwrap();
        let ours: Vec<String> = methods
            .iter()
            .filter_map(|&m| md.perf_map_method_name(m, &options).ok())
            .collect();
        if let Some(i) = ours.iter().position(|o| o == name) {
            tally.matched += 1;
            entry.1 += 1;
            let other = PerfMapNameOptions {
                net8_truncation: !net8_truncation,
                ..options
            };
            let differs = methods
                .iter()
                .filter_map(|&m| md.perf_map_method_name(m, &options).ok().map(|n| (m, n)))
                .nth(i)
                .and_then(|(m, _)| md.perf_map_method_name(m, &other).ok())
                .is_some_and(|alt| alt != name);
            if differs {
                changed.push(name.to_string());
            }
            if examples.len() < 12 && tally.matched % 40 == 1 {
                examples.push(name.to_string());
            }
            continue;
        }
        // Classify: is there a method of that name at all (the name as printed)?
        let method_part = &name[name.find("::").unwrap() + 2..];
        let printed = &method_part[..method_part.find('(').unwrap_or(method_part.len())];
        let same_name: Vec<&String> = ours
            .iter()
            .filter(|o| o.contains(&format!("::{printed}(")))
            .collect();
        if same_name.is_empty() {
            tally.miss("method name not found", name.to_string());
        } else {
            tally.miss(
                "signature formatted differently",
                format!("{name}\n      ours: {}", same_name[0]),
            );
        }
    }
    println!("perf map {}", map_path.display());
    for e in &examples {
        println!("  e.g. {e}");
    }
    for (asm, (total, ok)) in &per_assembly {
        println!("  {asm:40} {ok}/{total}");
    }
    println!(
        "{} matched name(s) early .NET 8's printf truncation changes, e.g. {:?}",
        changed.len(),
        changed.iter().take(3).collect::<Vec<_>>()
    );
    plain.report("non-generic declaring types");
    generic.report("generic declaring types (instantiation taken from the perf map)");
    assert!(
        plain.total >= 200,
        "only {} non-generic perf-map names",
        plain.total
    );
    assert_eq!(
        plain.matched, plain.total,
        "every non-generic name must match"
    );
    assert_eq!(
        generic.matched, generic.total,
        "every generic name must match"
    );
    changed
}

// ---------------------------------------------------------------- robustness

fn small_metadata() -> &'static [u8] {
    use std::sync::OnceLock;
    static BLOB: OnceLock<Vec<u8>> = OnceLock::new();
    BLOB.get_or_init(|| {
        let file = std::fs::read(runtime_dir().join("System.Collections.Specialized.dll")).unwrap();
        metadata_from_pe(&file, PeLayout::File).unwrap().to_vec()
    })
}

fn tables_stream_offset() -> usize {
    let md = Metadata::parse(small_metadata()).unwrap();
    md.root.stream("#~").unwrap().offset as usize
}

fn exercise(data: &[u8]) {
    if let Ok(md) = Metadata::parse(data) {
        let _ = md.check_all();
        for rid in 1..=md.tables.rows(TableId::TypeDef).min(200) {
            let _ = md.runtime_type_name(rid, None);
            let _ = md.type_name(rid, NestedStyle::Slash);
        }
    }
    let _ = metadata_from_pe(data, PeLayout::File);
    let _ = metadata_from_pe(data, PeLayout::Mapped);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        exercise(&data);
        // A valid root in front of random streams.
        let mut with_root = small_metadata()[..small_metadata().len().min(256)].to_vec();
        with_root.extend_from_slice(&data);
        exercise(&with_root);
    }

    #[test]
    fn mutated_real_metadata_never_panics(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..24),
        header_flips in proptest::collection::vec((0usize..320, any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        truncate in 0u8..8,
    ) {
        let mut data = small_metadata().to_vec();
        for (at, value) in &flips {
            let i = at.index(data.len());
            data[i] = *value;
        }
        // The table stream's header, row counts and first rows decide every layout.
        let tables_at = tables_stream_offset();
        for (at, value) in &header_flips {
            if let Some(b) = data.get_mut(tables_at + at) {
                *b = *value;
            }
        }
        if truncate == 0 {
            data.truncate(cut.index(data.len() + 1));
        }
        exercise(&data);
    }

    #[test]
    fn random_signatures_never_panic(sig in proptest::collection::vec(any::<u8>(), 0..64)) {
        let md = Metadata::parse(small_metadata()).unwrap();
        if let Ok(s) = decode_method_sig(&sig) {
            let mut out = String::new();
            let _ = md.il().method_sig(&s, "[A] T::M", &mut out);
        }
        if let Ok(t) = cdac::formats::ecma::decode_type_spec(&sig) {
            let _ = md.il().type_string(&t);
        }
    }
}
