//! Every capability on the real runtimes people run: .NET 10.0.14 (the embedded descriptor
//! and ExecutionManager 2), 9.0.22 (its embedded descriptor plus cdac's overlay) and 8.0.33
//! (cdac's shipped descriptor), each live, on a `createdump --full` dump and on a `gcore`
//! dump; 8.0.0 (the first 8.0 build) and the composite ReadyToRun build of .NET 10 live and
//! on a full dump. The oracles are independent of cdac: the runtime's own perf map (start,
//! size and name of every JIT'ed method), `MethodHandle.Value` and the exception clauses
//! the testbed emitted (its manifest), and the ReadyToRun images on disk.

use crate::common;

use std::collections::{BTreeMap, HashMap};

use cdac::contracts::execution_manager::enumerate::enumerate_code;
use cdac::contracts::execution_manager::exception_clauses::ClauseKind;
use cdac::contracts::execution_manager::{execution_manager, ExecutionManager, JitType};
use cdac::contracts::runtime_type_system::method_desc_info;
use cdac::names::MethodNamer;
use cdac::runtime::{DescriptorSource, OpenOptions, Runtime};
use common::{hex, perf_map, testbed_of, Testbed, Variant};

/// Where a runtime is read from.
#[derive(Debug, Clone, Copy)]
enum Source {
    Live,
    Dump(&'static str),
}

impl Source {
    fn dump(self) -> Option<&'static str> {
        match self {
            Source::Live => None,
            Source::Dump(kind) => Some(kind),
        }
    }
}

fn open(tb: &Testbed, source: Source) -> Runtime {
    match source {
        Source::Live => Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach"),
        Source::Dump(kind) => {
            Runtime::open_dump(tb.dump(kind), &OpenOptions::default()).expect("open dump")
        }
    }
}

/// The perf map's name without the tier the runtime appends (`[OptimizedTier1]`).
fn without_tier(name: &str) -> &str {
    match name.rfind('[') {
        Some(i)
            if name.ends_with(']')
                && name[i + 1..name.len() - 1]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric()) =>
        {
            &name[..i]
        }
        _ => name,
    }
}

/// Managed perf-map entries whose code is still live, and how many are stale: a later entry
/// overlapping an earlier one means the earlier code was freed and its memory reused.
fn live_entries(tb: &Testbed, source: Source) -> (Vec<(u64, u64, String)>, usize) {
    let managed: Vec<_> = perf_map(&tb.perf_map_for(source.dump()))
        .into_iter()
        .filter(|(_, size, n)| !n.starts_with("stub") && *size > 0)
        .collect();
    let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
    let mut live = Vec::new();
    let mut stale = 0;
    // From the last entry back: an entry is stale when a later one took its memory.
    for (start, size, name) in managed.into_iter().rev() {
        let end = start + size;
        let clash = ends
            .range(..end)
            .next_back()
            .is_some_and(|(_, &e)| e > start);
        if clash {
            stale += 1;
        } else {
            ends.insert(start, end);
            live.push((start, size, name));
        }
    }
    live.reverse();
    (live, stale)
}

fn kind_name(k: ClauseKind) -> &'static str {
    match k {
        ClauseKind::Typed => "typed",
        ClauseKind::Finally => "finally",
        ClauseKind::Fault => "fault",
        ClauseKind::Filter => "filter",
    }
}

/// The clause kinds of a method's code, without the duplicates the JIT adds for nested
/// funclets, against the kinds the testbed emitted. Optimized code may turn a `finally`
/// into a `fault`, or drop a `finally` whose protected code cannot throw (.NET 10's JIT
/// clones the handler into the normal path and removes the region: `TryFinally`'s
/// `r = x + 7`).
fn same_clauses(found: &[&str], emitted: &[&str], optimized: bool) -> bool {
    let mut rest: Vec<&str> = found.to_vec();
    for e in emitted {
        let at = rest
            .iter()
            .position(|f| f == e || (*e == "finally" && *f == "fault"));
        match at {
            Some(i) => {
                rest.remove(i);
            }
            None if optimized && *e == "finally" => {}
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether the perf map says the code was optimized (any tier but the unoptimized ones).
fn is_optimized(perf_name: &str) -> bool {
    !["[QuickJitted]", "[MinOptJitted]", "[InstrumentedTier]"]
        .iter()
        .any(|t| perf_name.ends_with(t))
}

/// Collects failures instead of stopping at the first, so one run shows them all.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    fn assert_none(&self, what: &str) {
        assert!(
            self.0.is_empty(),
            "{what}: {} failures, first: {:#?}",
            self.0.len(),
            &self.0[..self.0.len().min(12)]
        );
    }
}

/// `info`: the pinned version, the descriptor from where it should come, and the
/// ExecutionManager of the version each runtime has.
fn check_info(rt: &Runtime, variant: Variant, f: &mut Failures) {
    let version = rt.version().map(|v| v.product_version.clone());
    f.check(
        version.as_deref() == Some(variant.runtime_version()),
        || format!("runtime version {version:?}"),
    );
    let em = execution_manager(rt.target(), rt.descriptor()).map(|em| em.version());
    let overlays: Vec<&str> = rt.overlays().iter().map(|o| o.name.as_str()).collect();
    let kind = rt.descriptor_source().kind();
    let (want_kind, want_em, want_overlay) = match variant {
        Variant::Net10 | Variant::Net10Composite | Variant::Net10Latest | Variant::WebNet10 => {
            ("embedded", 2, Some("net10.0-linux-x64"))
        }
        Variant::Net9 | Variant::Net9Latest | Variant::WebNet9 => {
            ("embedded", 1, Some("net9.0-linux-x64"))
        }
        Variant::Net8 | Variant::Net8_0_0 | Variant::Net8Latest | Variant::WebNet8 => {
            ("shipped", 1, None)
        }
        // ExecutionManager "c1" is the algorithm .NET 10 numbered 2.
        Variant::Net11 | Variant::Net11Arm64 | Variant::WebNet11 => ("embedded", 2, None),
        // No arm64 overlay yet: what the embedded descriptor gives.
        Variant::Net10Arm64 => ("embedded", 2, None),
        Variant::Net9Arm64 => ("embedded", 1, None),
    };
    f.check(kind == want_kind, || format!("descriptor {kind}"));
    f.check(em.as_ref().ok() == Some(&want_em), || {
        format!("ExecutionManager {em:?}")
    });
    if let Some(o) = want_overlay {
        f.check(overlays.first() == Some(&o), || {
            format!("overlays {overlays:?}")
        });
        // These exact builds are the ones the overlays were verified on (by this test);
        // the newest patches are fitted by version line (and checked when opened).
        let fit = rt.overlays().first().map(|o| o.fit);
        let want_fit = if matches!(variant, Variant::Net10Latest | Variant::Net9Latest) {
            cdac::descriptor::shipped::Fit::SameVersionLine
        } else {
            cdac::descriptor::shipped::Fit::VerifiedBuild
        };
        f.check(fit == Some(want_fit), || format!("overlay fit {fit:?}"));
        for o in rt.overlays() {
            f.check(o.report.conflicts.is_empty(), || {
                format!("overlay {} conflicts: {:?}", o.name, o.report.conflicts)
            });
        }
    }
    // .NET 9 advertises no ExecutionManager: it comes from the overlay, and says so.
    if variant == Variant::Net9 {
        let origin = rt.descriptor().contract_origin("ExecutionManager");
        f.check(origin == Some("net9.0-linux-x64"), || {
            format!("ExecutionManager from {origin:?}")
        });
    }
}

/// `ip2md` of the first, middle and last byte of every live perf-map method: the perf map's
/// start and size, JIT'ed, with the perf map's name. Returns the MethodDesc of each entry.
fn check_perf_map(
    rt: &Runtime,
    em: &dyn ExecutionManager,
    tb: &Testbed,
    source: Source,
    what: &str,
    f: &mut Failures,
) -> Vec<(u64, u64, String, u64)> {
    let (live, stale) = live_entries(tb, source);
    f.check(live.len() > 1000, || {
        format!("only {} live entries", live.len())
    });
    let mut resolved = Vec::new();
    let mut with_debug = 0;
    let mut freed_dynamic = 0;
    let debug_format = rt.contracts().debug_info().expect("DebugInfo");
    let flag_byte_format = debug_format.has_flag_byte_format();
    for (start, size, name) in &live {
        // A dynamic method (LCG) is collectible: its code may have been freed since the
        // perf map logged it and its memory reused, with nothing overlapping it in the map
        // (the shared testbed runs reflection for the diagnostics other tests attach).
        // Such an entry no longer starts a code block.
        if name.contains("dynamicClass::")
            && em
                .code_block(*start)
                .ok()
                .flatten()
                .is_none_or(|b| b.start != *start)
        {
            freed_dynamic += 1;
            continue;
        }
        let mut md = None;
        for ip in [*start, start + size / 2, start + size - 1] {
            match em.code_block(ip) {
                Ok(Some(b)) => {
                    let hot = em.method_region_info(&b).map(|r| r.hot_size);
                    f.check(
                        b.start == *start
                            && hot.as_ref().ok() == Some(size)
                            && b.jit_type == JitType::Jit
                            && b.relative_offset == ip - start,
                        || {
                            format!(
                                "{name} {ip:#x}: start {:#x} hot {hot:?} {:?}",
                                b.start, b.jit_type
                            )
                        },
                    );
                    md.get_or_insert(b.method_desc);
                    // JIT'ed debug info starts with a flag byte (bit 0: OSR patchpoint info,
                    // bit 1: rich debug info) up to .NET 10: its offset and the flag's
                    // presence are the shipped overlays' on .NET 9 and 10. .NET 11's has
                    // none: its header must decode, with its bounds.
                    if ip == *start {
                        match em.debug_info(&b) {
                            Ok(d) if d.address != 0 && flag_byte_format => {
                                with_debug += 1;
                                let flag = rt.target().read_u8(d.address);
                                f.check(
                                    matches!(d.has_flag_byte, Ok(true))
                                        && matches!(flag, Ok(0..=3)),
                                    || format!("{name}: debug info {d:?}, first byte {flag:?}"),
                                );
                            }
                            Ok(d) if d.address != 0 => {
                                with_debug += 1;
                                let map = cdac::contracts::debug_info::native_map(
                                    rt.target(),
                                    em,
                                    &b,
                                    &debug_format,
                                );
                                f.check(map.as_ref().is_ok_and(|m| !m.is_empty()), || {
                                    format!("{name}: debug info {d:?}: {map:?}")
                                });
                            }
                            Ok(_) => {}
                            Err(e) => f.check(false, || format!("{name}: debug info: {e}")),
                        }
                    }
                }
                other => f.check(false, || format!("{name} {ip:#x}: {other:?}")),
            }
        }
        if let Some(md) = md {
            resolved.push((*start, *size, name.clone(), md));
        }
    }
    f.check(freed_dynamic * 100 <= live.len(), || {
        format!("{freed_dynamic} dynamic methods gone of {}", live.len())
    });
    // Names, all at once (the namer caches each module's metadata).
    let mut namer = MethodNamer::for_runtime(rt);
    let mds: Vec<u64> = resolved.iter().map(|r| r.3).collect();
    let names = namer.names(&mds);
    let mut named = 0;
    for ((_, _, perf, _), ours) in resolved.iter().zip(&names) {
        if without_tier(perf) == ours {
            named += 1;
        } else {
            f.check(false, || format!("name {ours:?}, perf map {perf:?}"));
        }
    }
    f.check(with_debug * 10 >= live.len() * 9, || {
        format!(
            "only {with_debug} of {} methods have debug info",
            live.len()
        )
    });
    eprintln!(
        "{what}: {} live perf-map methods (and {stale} stale entries) checked at 3 addresses each: {} resolved to their start and size, {named} named as the runtime names them, {with_debug} with debug info that reads (led by its flag byte up to .NET 10)",
        live.len(),
        resolved.len(),
    );
    resolved
}

/// The MethodDescs the testbed read through `MethodHandle.Value`, by the name the perf map
/// gives their code: `Type::Method(` with the method's own name.
fn named_methods(tb: &Testbed) -> Vec<(String, u64)> {
    let m = &tb.manifest;
    let mut out = Vec::new();
    let mut add = |needle: String, md: &serde_json::Value| {
        if let Some(s) = md.as_str() {
            out.push((needle, hex(&serde_json::Value::from(s))));
        }
    };
    for e in m["emitted_methods"].as_array().unwrap() {
        add(
            format!(
                "{}::{}(",
                e["type"].as_str().unwrap(),
                e["name"].as_str().unwrap()
            ),
            &e["method_desc"],
        );
    }
    for e in m["lcg_methods"].as_array().unwrap() {
        add(
            format!("dynamicClass::{}(", e["method_name"].as_str().unwrap()),
            &e["method_desc"],
        );
    }
    for e in m["async_methods"].as_array().unwrap() {
        add(
            format!("{}(", e["move_next"].as_str().unwrap()),
            &e["move_next_method_desc"],
        );
    }
    for t in m["threads"].as_array().unwrap() {
        let chain = t["expected_chain"].as_array().unwrap();
        let mds = t["chain_method_descs"].as_array().unwrap();
        for (name, md) in chain.iter().zip(mds) {
            // The P/Invoke is inlined into its caller on every version: no code of its own.
            if name.as_str().unwrap().starts_with("Cdac.Testbed.Libc::") {
                continue;
            }
            add(format!("{}(", name.as_str().unwrap()), md);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `method_desc` = `MethodHandle.Value` for every named method whose code the perf map
/// lists, and `eh` shows the clause kinds the testbed emitted. A value type's method has
/// two MethodDescs, its unboxing stub (what reflection hands out for the async state
/// machines' `MoveNext`) and the method its code belongs to: the two are the same method.
fn check_manifest_methods(
    rt: &Runtime,
    em: &dyn ExecutionManager,
    tb: &Testbed,
    resolved: &[(u64, u64, String, u64)],
    what: &str,
    f: &mut Failures,
) {
    let mut matched = 0;
    for (needle, md) in named_methods(tb) {
        let versions: Vec<_> = resolved.iter().filter(|r| r.2.contains(&needle)).collect();
        f.check(!versions.is_empty(), || {
            format!("no perf-map entry for {needle}")
        });
        for (_, _, name, found) in versions {
            matched += 1;
            let same = *found == md || unboxing_twins(rt, md, *found);
            f.check(same, || {
                format!("{name}: MethodDesc {found:#x}, MethodHandle.Value {md:#x}")
            });
        }
    }
    let mut eh_checked = 0;
    for m in tb.emitted() {
        let needle = format!(
            "{}::{}(",
            m["type"].as_str().unwrap(),
            m["name"].as_str().unwrap()
        );
        let emitted: Vec<&str> = m["clauses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        for (start, size, name, _) in resolved.iter().filter(|r| r.2.contains(&needle)) {
            let b = em.code_block(start + size / 2).ok().flatten();
            let clauses = b.as_ref().map(|b| em.exception_clauses(b));
            let Some(Ok(clauses)) = clauses else {
                f.check(false, || format!("{name}: clauses {clauses:?}"));
                continue;
            };
            let kinds: Vec<&str> = clauses
                .iter()
                .filter(|c| !c.duplicated)
                .map(|c| kind_name(c.kind))
                .collect();
            // Drive calls the other handler methods, and .NET 10's JIT inlines methods
            // with handlers: its optimized code may hold their clauses too.
            let inliner = m["name"] == "Drive" && is_optimized(name);
            let ok = if inliner {
                kinds
                    .iter()
                    .all(|k| ["typed", "finally", "fault", "filter"].contains(k))
            } else {
                same_clauses(&kinds, &emitted, is_optimized(name))
            };
            f.check(ok, || {
                format!("{name}: clauses {kinds:?}, emitted {emitted:?}")
            });
            eh_checked += 1;
        }
    }
    f.check(eh_checked >= 15, || {
        format!("only {eh_checked} emitted code versions had their clauses checked")
    });
    eprintln!("{what}: {matched} code versions of named methods have their MethodHandle.Value; {eh_checked} emitted code versions have the emitted clause kinds");
}

/// True when `stub` is the unboxing stub of the value-type method `method`: same module,
/// token and MethodTable, the stub flagged as such.
fn unboxing_twins(rt: &Runtime, stub: u64, method: u64) -> bool {
    let info = |md| method_desc_info(rt.target(), rt.descriptor(), md).ok();
    match (info(stub), info(method)) {
        (Some(s), Some(m)) => {
            s.is_unboxing_stub
                && !m.is_unboxing_stub
                && (s.module, s.token, s.method_table) == (m.module, m.token, m.method_table)
        }
        _ => false,
    }
}

/// The precompiled library: methods that were called have resolved ReadyToRun code with
/// their MethodDesc (and their clauses); methods never called are not listed.
fn check_ready_to_run(
    rt: &Runtime,
    em: &dyn ExecutionManager,
    tb: &Testbed,
    what: &str,
    f: &mut Failures,
) {
    let listing = enumerate_code(rt.target(), rt.descriptor()).expect("enumerate");
    f.check(listing.errors.is_empty(), || {
        format!(
            "code enumeration errors: {:?}",
            &listing.errors[..listing.errors.len().min(5)]
        )
    });
    let by_md: HashMap<u64, Vec<_>> = listing.entries.iter().fold(HashMap::new(), |mut m, e| {
        m.entry(e.method_desc).or_default().push(*e);
        m
    });
    let mut r2r = 0;
    for m in tb.manifest["r2r"]["methods"].as_array().unwrap() {
        let label = m["label"].as_str().unwrap();
        let md = hex(&m["method_desc"]);
        let called = m["called"].as_bool().unwrap();
        let precompiled: Vec<_> = by_md
            .get(&md)
            .into_iter()
            .flatten()
            .filter(|e| e.jit_type == JitType::R2r)
            .collect();
        let generic = m["is_generic"].as_bool().unwrap_or(false)
            || !m["generic_args"].as_array().is_none_or(|a| a.is_empty());
        if !called {
            f.check(precompiled.is_empty(), || {
                format!("{label} never ran but is listed")
            });
            continue;
        }
        if generic {
            // Instantiations over reference types share canonical code; the MethodDesc the
            // manifest has may be an instantiating stub's.
            continue;
        }
        f.check(precompiled.len() == 1, || {
            format!(
                "{label} (MethodDesc {md:#x}) ran; precompiled code listed {} times",
                precompiled.len()
            )
        });
        for e in precompiled {
            r2r += 1;
            let b = em.code_block(e.start).ok().flatten();
            f.check(
                b.as_ref()
                    .is_some_and(|b| b.jit_type == JitType::R2r && b.method_desc == md),
                || format!("{label}: ip2md of {:#x}: {b:?}", e.start),
            );
            let emitted: Vec<&str> = m["clauses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            if let Some(b) = b {
                let kinds: Vec<&str> = em
                    .exception_clauses(&b)
                    .unwrap_or_default()
                    .iter()
                    .filter(|c| !c.duplicated)
                    .map(|c| kind_name(c.kind))
                    .collect();
                f.check(same_clauses(&kinds, &emitted, true), || {
                    format!("{label}: clauses {kinds:?}, compiled from {emitted:?}")
                });
            }
        }
    }
    f.check(r2r >= 3, || {
        format!("only {r2r} precompiled methods checked")
    });
    eprintln!(
        "{what}: {} methods with code listed ({} errors); {r2r} precompiled testbed methods resolve as r2r with their MethodDesc and clauses",
        listing.entries.len(),
        listing.errors.len()
    );
}

/// `modules`: every assembly reflection lists in the testbed is there, with its `Module*`,
/// path, and whether it is dynamic or collectible; the image of each file-backed module is
/// where the file is mapped (or loaded flat) and its metadata is found.
fn check_modules(rt: &Runtime, tb: &Testbed, what: &str, f: &mut Failures) {
    let modules = match cdac::contracts::loader::modules(rt.target(), rt.descriptor()) {
        Ok(m) => m,
        Err(e) => return f.check(false, || format!("modules: {e}")),
    };
    let by_address: HashMap<u64, _> = modules.iter().map(|m| (m.address, m)).collect();
    let assemblies = tb.manifest["type_system"]["assemblies"].as_array().unwrap();
    for a in assemblies {
        let name = a["name"].as_str().unwrap();
        let address = hex(&a["module_handle"]);
        let Some(m) = by_address.get(&address) else {
            f.check(false, || {
                format!("assembly {name}: module {address:#x} not listed")
            });
            continue;
        };
        let location = a["location"].as_str().unwrap_or("");
        let path = m
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        f.check(
            m.is_dynamic == a["is_dynamic"].as_bool().unwrap()
                && m.is_collectible == a["is_collectible"].as_bool().unwrap()
                && (location.is_empty() || path == location),
            || format!("assembly {name}: listed as {m:?}, reflection says {a}"),
        );
        if !m.is_dynamic {
            let md = cdac::contracts::loader::module_metadata(rt.target(), rt.descriptor(), m);
            f.check(matches!(md, Ok(Some(_))), || {
                format!("{name}: metadata {md:?}")
            });
        }
    }
    f.check(modules.len() >= assemblies.len(), || {
        format!(
            "{} modules for {} assemblies",
            modules.len(),
            assemblies.len()
        )
    });
    eprintln!(
        "{what}: {} modules listed; all {} assemblies reflection knows are there with their Module*, path, dynamic and collectible flags",
        modules.len(),
        assemblies.len()
    );
}

fn check(variant: Variant, source: Source) {
    let tb = testbed_of(variant);
    let what = format!("{} {source:?}", variant.name());
    let rt = open(tb, source);
    let mut f = Failures::default();
    check_info(&rt, variant, &mut f);
    check_modules(&rt, tb, &what, &mut f);
    let em = execution_manager(rt.target(), rt.descriptor()).expect("ExecutionManager");
    let resolved = check_perf_map(&rt, em.as_ref(), tb, source, &what, &mut f);
    check_manifest_methods(&rt, em.as_ref(), tb, &resolved, &what, &mut f);
    check_ready_to_run(&rt, em.as_ref(), tb, &what, &mut f);
    f.assert_none(&what);
}

#[test]
fn net10_live() {
    check(Variant::Net10, Source::Live);
}

#[test]
fn net11_live() {
    check(Variant::Net11, Source::Live);
}

#[test]
fn net10_full_dump() {
    check(Variant::Net10, Source::Dump("full"));
}

#[test]
fn net11_full_dump() {
    check(Variant::Net11, Source::Dump("full"));
}

#[test]
fn net10_gcore() {
    check(Variant::Net10, Source::Dump("gcore"));
}

#[test]
fn net11_gcore() {
    check(Variant::Net11, Source::Dump("gcore"));
}

#[test]
fn net9_live() {
    check(Variant::Net9, Source::Live);
}

#[test]
fn net9_full_dump() {
    check(Variant::Net9, Source::Dump("full"));
}

#[test]
fn net9_gcore() {
    check(Variant::Net9, Source::Dump("gcore"));
}

#[test]
fn net8_live() {
    check(Variant::Net8, Source::Live);
}

#[test]
fn net8_full_dump() {
    check(Variant::Net8, Source::Dump("full"));
}

#[test]
fn net8_gcore() {
    check(Variant::Net8, Source::Dump("gcore"));
}

#[test]
fn net8_0_0_live() {
    check(Variant::Net8_0_0, Source::Live);
}

#[test]
fn net8_0_0_full_dump() {
    check(Variant::Net8_0_0, Source::Dump("full"));
}

#[test]
fn net10_composite_live() {
    check(Variant::Net10Composite, Source::Live);
}

#[test]
fn net10_composite_full_dump() {
    check(Variant::Net10Composite, Source::Dump("full"));
}

#[test]
fn descriptor_source_is_reported() {
    // One runtime per descriptor origin, as `info` tells it.
    for (variant, kind) in [
        (Variant::Net10, "embedded"),
        (Variant::Net9, "embedded"),
        (Variant::Net8, "shipped"),
    ] {
        let rt = open(testbed_of(variant), Source::Live);
        assert_eq!(rt.descriptor_source().kind(), kind, "{variant:?}");
        if let DescriptorSource::Embedded { address } = rt.descriptor_source() {
            assert_eq!(
                Some(*address),
                rt.module()
                    .export(cdac::descriptor::CONTRACT_DESCRIPTOR_SYMBOL)
            );
        }
    }
}

/// Copies a core dump, turning its `NT_FILE` note (the list of mapped files) into a note of
/// a type nobody reads: a core from which no module can be identified.
fn without_file_list(core: &std::path::Path, out: &std::path::Path) {
    let mut data = std::fs::read(core).expect("read core");
    let u16_at = |d: &[u8], o: usize| u16::from_le_bytes([d[o], d[o + 1]]) as usize;
    let u32_at = |d: &[u8], o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |d: &[u8], o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap()) as usize;
    const NT_FILE: usize = 0x4649_4c45;
    let (phoff, phentsize, phnum) = (
        u64_at(&data, 0x20),
        u16_at(&data, 0x36),
        u16_at(&data, 0x38),
    );
    let mut patched = 0;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(&data, ph) != 4 {
            continue; // not PT_NOTE
        }
        let (mut at, end) = (
            u64_at(&data, ph + 8),
            u64_at(&data, ph + 8) + u64_at(&data, ph + 32),
        );
        while at + 12 <= end {
            let (namesz, descsz, kind) = (
                u32_at(&data, at),
                u32_at(&data, at + 4),
                u32_at(&data, at + 8),
            );
            if kind == NT_FILE {
                data[at + 8..at + 12].copy_from_slice(&0x4649_4c00u32.to_le_bytes());
                patched += 1;
            }
            at += 12 + namesz.div_ceil(4) * 4 + descsz.div_ceil(4) * 4;
        }
    }
    assert_eq!(patched, 1, "one NT_FILE note in {}", core.display());
    std::fs::write(out, data).expect("write core");
}

#[test]
fn a_complete_descriptor_file_reads_a_core_without_its_file_list() {
    let tb = testbed_of(Variant::Net10);
    let rt = open(tb, Source::Dump("full"));
    let file = tb.dir.join("complete-descriptor.json");
    std::fs::write(&file, rt.descriptor().to_complete_json().to_string()).unwrap();
    let stripped = tb.dir.join("full-no-nt-file.core");
    without_file_list(&tb.dump("full"), &stripped);

    // No module list: the runtime is found by its ELF header in the dump's memory and
    // named from the dynamic loader's list (as for qemu's cores, which have none).
    let found = Runtime::open_dump(&stripped, &OpenOptions::default()).expect("found in memory");
    assert_eq!(found.module().path, tb.libcoreclr());
    assert_eq!(
        found.version().map(|v| v.product_version.as_str()),
        Some(Variant::Net10.runtime_version())
    );

    // The exported descriptor alone describes it: every lookup gives what the intact dump
    // gives.
    let options = OpenOptions {
        descriptor: Some(file.clone()),
        ..OpenOptions::default()
    };
    let alone = Runtime::open_dump(&stripped, &options).expect("the file is enough");
    assert!(matches!(
        alone.descriptor_source(),
        DescriptorSource::Override { .. }
    ));
    // The module, found in memory, gives the version the file does not.
    assert_eq!(
        alone.version().map(|v| v.product_version.as_str()),
        Some(Variant::Net10.runtime_version())
    );
    let (a, b) = (
        execution_manager(rt.target(), rt.descriptor()).unwrap(),
        execution_manager(alone.target(), alone.descriptor()).unwrap(),
    );
    let (live, _) = live_entries(tb, Source::Dump("full"));
    let mut names = MethodNamer::new(alone.target(), alone.descriptor());
    let mut checked = 0;
    for (start, size, name) in live.iter().step_by(7) {
        let (x, y) = (
            a.code_block(start + size / 2).unwrap(),
            b.code_block(start + size / 2).unwrap(),
        );
        assert_eq!(x, y, "{name}");
        let md = y.expect("resolves").method_desc;
        let got = names.name(md);
        // A collected dynamic method's code reused by another one since the perf map logged
        // it (the testbed collects garbage before its manifest): both readers agree above,
        // which is what this test is about.
        if got != without_tier(name)
            && name.contains("dynamicClass::")
            && got.contains("dynamicClass::")
        {
            continue;
        }
        assert_eq!(got, without_tier(name), "{name}");
        checked += 1;
    }
    assert!(checked > 100, "{checked}");
    // A descriptor whose globals index pointer data reads them from the module found in
    // memory: the same value as the intact dump's.
    let indirect = tb.dir.join("indirect-descriptor.json");
    std::fs::write(
        &indirect,
        br#"{"version":0,"globals":{"AppDomain":[[1],"pointer"]}}"#,
    )
    .unwrap();
    let via_memory = Runtime::open_dump(
        &stripped,
        &OpenOptions {
            descriptor: Some(indirect),
            ..OpenOptions::default()
        },
    )
    .expect("indirect global read through the module found in memory");
    assert_eq!(
        via_memory.descriptor().global_value("AppDomain").ok(),
        rt.descriptor().global_value("AppDomain").ok()
    );
    std::fs::remove_file(&stripped).ok();
}

// ---------------------------------------------------------------------------------------------
// ClrMD (Microsoft's DAC-based reader) side by side
// ---------------------------------------------------------------------------------------------

/// Where cdac and ClrMD differ for reasons that are understood, counted per kind.
#[derive(Debug, Default)]
struct Explained {
    /// ClrMD gives no name: its metadata reader cannot read the modules of a gcore dump
    /// (`Module.dll!Unknown`).
    clrmd_unnamed: usize,
    /// ClrMD's "native code" of an FCall is the runtime's C++ function in libcoreclr.so, not
    /// managed code (cdac's `methods` lists managed code only; `ip2md` says it is not managed).
    fcalls: usize,
    /// An address just past a precompiled method's code (alignment padding before the next
    /// one): the runtime's lookup, and so the DAC's, attributes it to the method before;
    /// cdac checks the method's extent and says it is in no method.
    padding: usize,
    /// A JIT'ed code version the perf map has not logged (yet: .NET 11 buffers later
    /// tiers), of a method it logs under another version's address.
    unlogged_version: usize,
    /// ClrMD's `start` is the method's current entry point (a later JIT'ed tier, or a
    /// precode), not the start of the code holding the address: the MethodDesc agrees.
    other_code_version: usize,
    /// Code ClrMD does not find in a gcore dump (precompiled code, and JIT'ed code) but
    /// finds in the `createdump --full` dump of the same process; cdac's answer is checked
    /// against the runtime's perf map (JIT'ed code) or its answer on the full dump.
    clrmd_blind_in_gcore: usize,
}

/// `modules` equals ClrMD's module list: the same `Module*`s, image bases, sizes, dynamic
/// flags and paths.
fn check_modules_against_clrmd(rt: &Runtime, clrmd: &serde_json::Value, f: &mut Failures) -> usize {
    let ours = cdac::contracts::loader::modules(rt.target(), rt.descriptor()).expect("modules");
    let by_address: HashMap<u64, _> = ours.iter().map(|m| (m.address, m)).collect();
    let theirs = clrmd.as_array().unwrap();
    f.check(ours.len() == theirs.len(), || {
        format!("{} modules, ClrMD {}", ours.len(), theirs.len())
    });
    for m in theirs {
        let address = hex(&m["address"]);
        let Some(o) = by_address.get(&address) else {
            f.check(false, || {
                format!("ClrMD's module {address:#x} ({}) not listed", m["name"])
            });
            continue;
        };
        let path = o.path.as_ref().map(|p| p.display().to_string());
        let dynamic = m["is_dynamic"].as_bool().unwrap();
        let image = dynamic
            || (o.base == hex(&m["image_base"])
                && o.size == m["size"].as_u64().unwrap()
                && path.as_deref() == m["name"].as_str());
        f.check(o.is_dynamic == dynamic && image, || {
            format!("module {address:#x}: ours {o:?}, ClrMD {m}")
        });
    }
    theirs.len()
}

/// True when `address` lies in the runtime module's own image (an FCall's C++ code).
fn in_runtime_module(rt: &Runtime, address: u64) -> bool {
    (rt.module().base..rt.module().end).contains(&address)
}

/// Every method ClrMD reports with native code is in cdac's `methods`: the same start,
/// hot size and MethodDesc, and a name of the same type and method.
fn check_methods_against_clrmd(
    rt: &Runtime,
    clrmd: &serde_json::Value,
    explained: &mut Explained,
    f: &mut Failures,
) -> usize {
    let listing = enumerate_code(rt.target(), rt.descriptor()).expect("enumerate");
    let by_start: HashMap<u64, _> = listing.entries.iter().map(|e| (e.start, *e)).collect();
    let mut namer = MethodNamer::for_runtime(rt);
    let theirs = clrmd.as_array().unwrap();
    for m in theirs {
        let start = hex(&m["start"]);
        let md = hex(&m["method_desc"]);
        let Some(e) = by_start.get(&start) else {
            if in_runtime_module(rt, start) {
                explained.fcalls += 1;
            } else {
                f.check(false, || {
                    format!("ClrMD's {} at {start:#x} is not listed", m["signature"])
                });
            }
            continue;
        };
        let jit = match m["compilation"].as_str().unwrap() {
            "Jit" => JitType::Jit,
            _ => JitType::R2r,
        };
        f.check(
            e.method_desc == md && e.size == m["hot_size"].as_u64().unwrap() && e.jit_type == jit,
            || format!("{}: ours {e:?}, ClrMD {m}", m["signature"]),
        );
        // ClrMD's signature is the DAC's `Ns.Type.Method(Params)`: compared without generic
        // arguments and parameters.
        let signature = m["signature"].as_str().unwrap_or("");
        if signature.ends_with("!Unknown") || signature.is_empty() {
            explained.clrmd_unnamed += 1;
            continue;
        }
        let name = namer.name(md);
        f.check(qualified_stem(&name) == clrmd_stem(signature), || {
            format!("name {name:?}, ClrMD {signature:?}")
        });
    }
    theirs.len()
}

/// `Ns.Type.Method` of a cdac name (`RET [Asm] Ns.Type[Args]::Method(PARAMS)`; the return
/// type may hold brackets and parentheses of its own: `modreq(...)`).
fn qualified_stem(name: &str) -> String {
    let sep = name.find("::").unwrap_or(0);
    let open = name[sep..].find('(').map_or(name.len(), |i| sep + i);
    let owner_start = name[..sep].rfind("] ").map_or(0, |i| i + 2);
    without_generic_args(&name[owner_start..open].replace("::", "."))
}

/// `Ns.Type.Method` of a ClrMD signature (`Ns.Type<Args>.Method(Params)`).
fn clrmd_stem(signature: &str) -> String {
    without_generic_args(&signature[..signature.find('(').unwrap_or(signature.len())])
}

/// Drops `[...]`, `<...>` and `` `N `` parts (generic arguments and arities).
fn without_generic_args(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut depth = 0;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '[' | '<' => depth += 1,
            ']' | '>' => depth -= 1,
            '`' if depth == 0 => {
                while chars.peek().is_some_and(char::is_ascii_digit) {
                    chars.next();
                }
            }
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// What else tells that code cdac finds and ClrMD does not is real.
struct OtherWitnesses<'a> {
    /// MethodDescs of the dynamic methods the testbed made (its manifest).
    named: &'a std::collections::HashSet<u64>,
    /// Method names the perf map logged.
    logged_names: &'a std::collections::HashSet<String>,
    /// The live process the dump was taken of (for a runtime whose perf map is buffered).
    live: Option<&'a dyn ExecutionManager>,
}

/// `GetMethodByInstructionPointer` against `ip2md` for an address inside every method cdac
/// lists and one just past each: the same MethodDesc, and the same start wherever ClrMD's
/// answer is the code holding the address.
fn check_ip2md_against_clrmd(
    rt: &Runtime,
    dump: &std::path::Path,
    blind_check: Option<(&HashMap<u64, u64>, &dyn ExecutionManager)>,
    known: &OtherWitnesses<'_>,
    explained: &mut Explained,
    f: &mut Failures,
) -> usize {
    let mut namer = cdac::names::MethodNamer::for_runtime(rt);
    let listing = enumerate_code(rt.target(), rt.descriptor()).expect("enumerate");
    // (address, the MethodDesc of the method it follows when it is past one's end)
    let mut addresses = Vec::new();
    for (i, e) in listing.entries.iter().enumerate() {
        addresses.push((e.start + (i as u64 * 7919) % e.size.max(1), None));
        addresses.push((e.end() + 1, Some(e.method_desc)));
    }
    let list = dump.with_extension("addresses");
    let text: String = addresses.iter().map(|(a, _)| format!("{a:#x}\n")).collect();
    std::fs::write(&list, text).unwrap();
    let theirs = common::clrmd(dump, &["ip2md", list.to_str().unwrap()]);
    let em = execution_manager(rt.target(), rt.descriptor()).unwrap();
    let mut agreed = 0;
    for ((ip, after), m) in addresses.iter().zip(theirs.as_array().unwrap()) {
        let ours = em.code_block(*ip).ok().flatten();
        let theirs_md = (!m["method_desc"].is_null()).then(|| hex(&m["method_desc"]));
        match (&ours, theirs_md) {
            (None, None) => agreed += 1,
            (Some(b), Some(md)) => {
                let (hot, size) = (hex(&m["hot_start"]), m["hot_size"].as_u64().unwrap());
                let holds = (hot..hot + size).contains(ip);
                f.check(b.method_desc == md && (!holds || b.start == hot), || {
                    format!("{ip:#x}: ours {b:?}, ClrMD {m}")
                });
                if !holds {
                    explained.other_code_version += 1;
                }
                agreed += 1;
            }
            (None, Some(md)) if *after == Some(md) => explained.padding += 1,
            // Held against the runtime's perf map (JIT'ed code) or the full dump (precompiled
            // code, whose entry point may also have been resolved after that dump was taken).
            (Some(b), None) if blind_check.is_some() => {
                let (perf, full) = blind_check.unwrap();
                let same = match b.jit_type {
                    // (An address just past JIT'ed code, before the next method, is the
                    // method's for the nibble map, as for the runtime: only its start is
                    // held against the perf map.)
                    // The runtime writes a garbled record for the DynamicMethod with the
                    // non-ASCII name (its start and size are not hex): its MethodDesc is
                    // the manifest's instead.
                    JitType::Jit
                        if perf.contains_key(&b.start) || known.named.contains(&b.method_desc) =>
                    {
                        true
                    }
                    // Code the perf map does not name yet: .NET 11 buffers its perf map,
                    // so a method compiled while gdb was dumping may not be written out.
                    // JIT'ed code stays where it is: the live process must have the same
                    // code there.
                    JitType::Jit => {
                        let logged = known.logged_names.contains(&namer.name(b.method_desc))
                            || known.live.is_some_and(|em| {
                                em.code_block(*ip).ok().flatten().is_some_and(|l| {
                                    (l.method_desc, l.start) == (b.method_desc, b.start)
                                })
                            });
                        explained.unlogged_version += usize::from(logged);
                        logged
                    }
                    _ => full
                        .code_block(*ip)
                        .ok()
                        .flatten()
                        .is_none_or(|a| (a.method_desc, a.start) == (b.method_desc, b.start)),
                };
                f.check(same, || format!("{ip:#x}: ours {b:?}, none from ClrMD"));
                explained.clrmd_blind_in_gcore += 1;
            }
            _ => f.check(false, || format!("{ip:#x}: ours {ours:?}, ClrMD {m}")),
        }
    }
    agreed
}

fn against_clrmd(variant: Variant, kind: &'static str) {
    let tb = testbed_of(variant);
    let what = format!("{} {kind}", variant.name());
    let dump = tb.dump(kind);
    let rt = open(tb, Source::Dump(kind));
    let mut f = Failures::default();
    let mut explained = Explained::default();
    let modules = check_modules_against_clrmd(&rt, &common::clrmd(&dump, &["modules"]), &mut f);
    let clrmd_methods = common::clrmd(&dump, &["methods"]);
    let methods = check_methods_against_clrmd(&rt, &clrmd_methods, &mut explained, &mut f);
    // Where ClrMD is blind in a gcore dump, cdac's answer is held against the full dump.
    let full_rt = (kind == "gcore").then(|| open(tb, Source::Dump("full")));
    let full_em = full_rt
        .as_ref()
        .map(|r| execution_manager(r.target(), r.descriptor()).unwrap());
    // The perf map now (append-only): it also has the code compiled while gdb was dumping.
    let perf: HashMap<u64, u64> = perf_map(&tb.perf_map_for(None))
        .into_iter()
        .map(|(start, size, _)| (start, size))
        .collect();
    let blind_check = full_em.as_deref().map(|em| (&perf, em));
    let logged_names: std::collections::HashSet<String> = perf_map(&tb.perf_map_for(None))
        .into_iter()
        .map(|(_, _, name)| without_tier(&name).to_string())
        .collect();
    let named = tb.manifest["type_system"]["dynamic_methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| hex(&m["method_desc"]))
        .collect();
    let live_rt = (variant == Variant::Net11).then(|| open(tb, Source::Live));
    let live_em = live_rt
        .as_ref()
        .map(|r| execution_manager(r.target(), r.descriptor()).unwrap());
    let ips = check_ip2md_against_clrmd(
        &rt,
        &dump,
        blind_check,
        &OtherWitnesses {
            named: &named,
            logged_names: &logged_names,
            live: live_em.as_deref(),
        },
        &mut explained,
        &mut f,
    );
    eprintln!(
        "{what}: ClrMD's {modules} modules and {methods} methods with code checked, {ips} \
         addresses resolved alike; explained differences: {explained:?}"
    );
    f.assert_none(&what);
}

#[test]
fn net10_full_dump_agrees_with_clrmd() {
    against_clrmd(Variant::Net10, "full");
}

#[test]
fn net11_full_dump_agrees_with_clrmd() {
    against_clrmd(Variant::Net11, "full");
}

#[test]
fn net10_gcore_agrees_with_clrmd() {
    against_clrmd(Variant::Net10, "gcore");
}

#[test]
fn net11_gcore_agrees_with_clrmd() {
    against_clrmd(Variant::Net11, "gcore");
}

#[test]
fn net9_full_dump_agrees_with_clrmd() {
    against_clrmd(Variant::Net9, "full");
}

#[test]
fn net9_gcore_agrees_with_clrmd() {
    against_clrmd(Variant::Net9, "gcore");
}

#[test]
fn net8_full_dump_agrees_with_clrmd() {
    against_clrmd(Variant::Net8, "full");
}

#[test]
fn net8_gcore_agrees_with_clrmd() {
    against_clrmd(Variant::Net8, "gcore");
}
