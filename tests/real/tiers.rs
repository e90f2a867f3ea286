//! Code versions' optimization tiers and which one is current (`methods --json`, `ip2md
//! --json`, the CodeVersions contract) on the real runtimes: .NET 10.0.14 (its own
//! descriptor plus cdac's overlay), 9.0.22 (overlay) and 8.0.33 (cdac's descriptor), each
//! live, on a `createdump --full` dump and on a `gcore` dump.
//!
//! Oracles, none of them cdac's:
//! * the runtime's perf map, written with `DOTNET_PerfMapShowOptimizationTiers=1`: the tier
//!   of every code version it logged, by code start;
//! * ClrMD (the runtime's own DAC) on the full dumps: a method's `NativeCode` is the code of
//!   its current version (the DAC's `GetMethodDescData`);
//! * SOS's `dumpmd` (`dotnet-dump analyze`, the DAC again) on the full dumps: each method's
//!   versions (node, code, tier) and its current code;
//! * the testbed's manifest: the parked `spin` thread's loop method (entered through
//!   on-stack replacement), the precompiled methods, the CPU workload's loop methods once
//!   the perf map shows them at tier 1.
//!
//! The perf map and the code version legitimately differ in one case (contracts/
//! CodeVersions.md): a method the JIT itself switched to minimal optimization (too large,
//! say) is logged `[MinOptJitted]` while its code version keeps the optimized tier it was
//! asked for. Those are counted and must be few.

use crate::common;
use crate::common::SosOutput;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;

use cdac::contracts::code_versions::{CodeVersions, Tier};
use cdac::contracts::execution_manager::{execution_manager, JitType};
use cdac::names::MethodNamer;
use cdac::runtime::{OpenOptions, Runtime};
use common::{hex, perf_map, testbed_of, Testbed, Variant};

/// Perf-map entries the runtime logged for LCG methods since freed, whose code was reused
/// (the testbed's Regex and LINQ work recycles a few); more would be a lookup fault.
const MAX_STALE: usize = 16;
/// Code versions the JIT switched to minimal optimization on its own: the testbed has
/// none so far; a handful would still be plausible.
const MAX_JIT_MIN_OPTS: usize = 5;

/// Code blocks that are none of their method's versions.
const MAX_ORPHANS: usize = 2;

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

    /// The target arguments of a cdac command.
    fn args(self, tb: &Testbed) -> Vec<String> {
        match self {
            Source::Live => vec!["--pid".into(), tb.pid.to_string()],
            Source::Dump(kind) => vec!["--dump".into(), tb.dump(kind).display().to_string()],
        }
    }

    fn open(self, tb: &Testbed) -> Runtime {
        match self {
            Source::Live => Runtime::attach(tb.pid, &OpenOptions::default()).expect("attach"),
            Source::Dump(kind) => {
                Runtime::open_dump(tb.dump(kind), &OpenOptions::default()).expect("open dump")
            }
        }
    }
}

/// `cdac ARGS`' standard output as JSON (the command must succeed).
fn cdac_json(args: &[String]) -> serde_json::Value {
    let out = Command::new(crate::common::cdac_exe())
        .args(args)
        .output()
        .expect("run cdac");
    assert!(
        out.status.success(),
        "cdac {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cdac JSON")
}

/// One code block as `methods --json` lists it.
#[derive(Debug, Clone)]
struct Block {
    method_desc: u64,
    start: u64,
    jit_type: String,
    tier: String,
    current: Option<bool>,
    name: String,
}

fn methods(tb: &Testbed, source: Source) -> Vec<Block> {
    let mut args = vec!["methods".to_string(), "--json".to_string()];
    args.extend(source.args(tb));
    cdac_json(&args)
        .as_array()
        .expect("array")
        .iter()
        .map(|m| Block {
            method_desc: hex(&m["method_desc"]),
            start: hex(&m["start"]),
            jit_type: m["jit_type"].as_str().expect("jit_type").into(),
            tier: m["tier"].as_str().expect("tier").into(),
            current: m["current"].as_bool(),
            name: m["name"].as_str().unwrap_or_default().into(),
        })
        .collect()
}

/// The perf map's tier suffix of a name, as cdac names tiers.
fn perf_map_tier(name: &str) -> Option<&'static str> {
    let suffix = name.strip_suffix(']')?.rsplit_once('[')?.1;
    Tier::from_perf_map(suffix).map(Tier::as_str)
}

/// What the JIT may switch to minimal optimization: a request for optimized code.
fn optimized_request(tier: &str) -> bool {
    matches!(
        tier,
        "optimized" | "optimized_tier1" | "optimized_tier1_instrumented" | "optimized_tier1_osr"
    )
}

/// Waits until the testbed's perf map has not grown for a while (at most a minute): the
/// runtime keeps promoting methods to tier 1 for a few seconds after the testbed is
/// ready, and a version caught mid-publication (its code compiled, not yet recorded as
/// the version's) is not any version yet. Reads and dumps are taken after this.
fn settle(tb: &Testbed) {
    let path = tb.perf_map_for(None);
    let len = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let (mut last, mut quiet) = (len(), 0);
    for _ in 0..120 {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = len();
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
        if quiet >= 4 {
            return;
        }
    }
}

fn check(variant: Variant, source: Source) {
    let tb = testbed_of(variant);
    settle(tb);
    let what = format!("{} {source:?}", variant.name());
    // The perf map first: everything in it was compiled before cdac reads the target.
    let map = perf_map(&tb.perf_map_for(source.dump()));
    let blocks = methods(tb, source);
    let by_start: HashMap<u64, &Block> = blocks.iter().map(|b| (b.start, b)).collect();

    let mut compared = BTreeMap::<&str, usize>::new();
    let (mut stale, mut jit_min_opts, mut failures) = (0, 0, Vec::new());
    for (start, _, name) in &map {
        let Some(want) = perf_map_tier(name) else {
            continue;
        };
        let Some(b) = by_start.get(start) else {
            assert!(
                name.contains("dynamicClass::"),
                "{what}: {start:#x} {name} is not a method start cdac lists"
            );
            stale += 1;
            continue;
        };
        if b.tier == want {
            *compared.entry(want).or_default() += 1;
        } else if want == "min_opt_jitted" && optimized_request(&b.tier) {
            jit_min_opts += 1;
        } else {
            failures.push(format!("{start:#x} {name}: cdac {}", b.tier));
        }
    }
    assert!(
        failures.is_empty(),
        "{what}: {} tier(s) differ from the perf map:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let total: usize = compared.values().sum();
    eprintln!(
        "{what}: {total} code versions' tiers equal the perf map's {compared:?}; \
         {jit_min_opts} switched to MinOpts by the JIT; {stale} stale perf-map entries"
    );
    assert!(total > 1000, "{what}: only {total} compared");
    assert!(stale <= MAX_STALE, "{what}: {stale} stale entries");
    assert!(
        jit_min_opts <= MAX_JIT_MIN_OPTS,
        "{what}: {jit_min_opts} JIT-decided MinOpts"
    );
    // Every kind the testbed makes is there: tier 0 and 1, both instrumented tiers, OSR,
    // optimized without tiering (LCG), NoOptimization (FinallyOwner).
    for tier in [
        "quick_jitted",
        "quick_jitted_instrumented",
        "optimized_tier1",
        "optimized_tier1_instrumented",
        "optimized_tier1_osr",
        "optimized",
        "min_opt_jitted",
    ] {
        assert!(
            compared.contains_key(tier),
            "{what}: no {tier} code compared"
        );
    }

    check_invariants(&what, &blocks);
    check_ip2md(&what, tb, source, &blocks);
    check_testbed_methods(&what, tb, &blocks);
    check_library(&what, tb, source, &blocks);
}

/// What holds for every block: a tier is known (but for code that is none of its
/// method's versions, which is not current: a few such orphans are allowed, such as the
/// loser of two threads compiling one method at once); precompiled code is ReadyToRun;
/// OSR code is never current; a method has at most one current version.
fn check_invariants(what: &str, blocks: &[Block]) {
    let mut current_of: HashMap<u64, usize> = HashMap::new();
    let mut orphans = Vec::new();
    for b in blocks {
        assert!(
            b.current.is_some(),
            "{what}: {:#x}: current unknown",
            b.start
        );
        if b.tier == "unknown" {
            assert_eq!(b.current, Some(false), "{what}: {:#x} {}", b.start, b.name);
            orphans.push(format!("{:#x} {}", b.start, b.name));
            continue;
        }
        assert_eq!(
            b.jit_type == "r2r",
            b.tier == "ready_to_run",
            "{what}: {:#x} {} is {} code of tier {}",
            b.start,
            b.name,
            b.jit_type,
            b.tier
        );
        if b.tier == "optimized_tier1_osr" {
            assert_eq!(
                b.current,
                Some(false),
                "{what}: current OSR code {:#x}",
                b.start
            );
        }
        if b.current == Some(true) {
            *current_of.entry(b.method_desc).or_default() += 1;
        }
    }
    for (md, n) in current_of {
        assert_eq!(n, 1, "{what}: MethodDesc {md:#x} has {n} current versions");
    }
    assert!(
        orphans.len() <= MAX_ORPHANS,
        "{what}: orphan code {orphans:?}"
    );
}

/// `ip2md` of each block's start answers with the block's tier and currency (the JSON
/// shape `methods` uses).
fn check_ip2md(what: &str, tb: &Testbed, source: Source, blocks: &[Block]) {
    let mut args = vec!["ip2md".to_string(), "--json".to_string()];
    args.extend(source.args(tb));
    args.extend(blocks.iter().map(|b| format!("{:#x}", b.start)));
    let answers = cdac_json(&args);
    let answers = answers.as_array().expect("array");
    assert_eq!(answers.len(), blocks.len());
    for (b, a) in blocks.iter().zip(answers) {
        assert_eq!(
            a["tier"].as_str(),
            Some(b.tier.as_str()),
            "{what}: ip2md {a}"
        );
        assert_eq!(a["current"].as_bool(), b.current, "{what}: ip2md {a}");
    }
}

/// The testbed's own methods: the spinning thread's loop went through OSR (an OSR version,
/// not current, beside its current tier-0 code); called precompiled methods are ReadyToRun,
/// and the hot one has tier-1 code that is current while its precompiled code is not.
fn check_testbed_methods(what: &str, tb: &Testbed, blocks: &[Block]) {
    let of = |md: u64| -> Vec<&Block> { blocks.iter().filter(|b| b.method_desc == md).collect() };
    let spin = tb.manifest["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["kind"] == "spin")
        .expect("spin thread");
    let inner = hex(&spin["chain_method_descs"][0]);
    let versions = of(inner);
    assert!(
        versions.iter().any(|b| b.tier == "optimized_tier1_osr"),
        "{what}: SpinInner has no OSR version: {versions:?}"
    );
    assert!(
        versions
            .iter()
            .any(|b| b.current == Some(true) && b.tier == "quick_jitted"),
        "{what}: SpinInner's tier-0 code is not current: {versions:?}"
    );

    let r2r = &tb.manifest["r2r"];
    let hot_calls = r2r["hot_calls_to_tier_up"]
        .as_u64()
        .expect("hot_calls_to_tier_up");
    let mut precompiled = 0;
    for m in r2r["methods"].as_array().expect("r2r methods") {
        let versions = of(hex(&m["method_desc"]));
        let label = m["label"].as_str().unwrap_or_default();
        let Some(pre) = versions.iter().find(|b| b.jit_type == "r2r") else {
            continue;
        };
        precompiled += 1;
        assert_eq!(pre.tier, "ready_to_run", "{what}: {label}");
        if m["calls"].as_u64().unwrap_or(0) >= hot_calls {
            assert_eq!(pre.current, Some(false), "{what}: {label}: {versions:?}");
            assert!(
                versions
                    .iter()
                    .any(|b| b.tier == "optimized_tier1" && b.current == Some(true)),
                "{what}: hot {label} has no current tier-1 code: {versions:?}"
            );
        } else {
            assert_eq!(pre.current, Some(true), "{what}: {label}: {versions:?}");
        }
    }
    assert!(
        precompiled >= 8,
        "{what}: {precompiled} precompiled methods"
    );
}

/// The contract's own answers agree with the command's: every block is one of its
/// method's versions (`versions`), with the same tier and currency, and the list has
/// exactly the blocks' current one.
fn check_library(what: &str, tb: &Testbed, source: Source, blocks: &[Block]) {
    let rt = source.open(tb);
    let (t, d) = (rt.target(), rt.descriptor());
    let em = execution_manager(t, d).expect("execution manager");
    let is_r2r = |code: u64| {
        em.code_block(code)
            .ok()
            .flatten()
            .is_some_and(|b| b.jit_type == JitType::R2r)
    };
    let mut cv = CodeVersions::new(t, d).expect("CodeVersions");
    let mut namer = MethodNamer::for_runtime(&rt);
    let mut mds: Vec<u64> = blocks.iter().map(|b| b.method_desc).collect();
    mds.sort_unstable();
    mds.dedup();
    let flags = namer.impl_flags(&mds);
    let mut listed = 0;
    for (&md, &impl_flags) in mds.iter().zip(&flags) {
        let v = cv.versions(md, impl_flags, &is_r2r).expect("versions");
        for b in blocks.iter().filter(|b| b.method_desc == md) {
            let Some(found) = v.versions.iter().find(|x| x.code == Some(b.start)) else {
                // A default version without a native-code slot lists no code.
                assert!(
                    v.versions[0].code.is_none() && b.current == Some(true),
                    "{what}: {:#x} {} is none of {md:#x}'s versions {v:?}",
                    b.start,
                    b.name
                );
                continue;
            };
            listed += 1;
            assert_eq!(found.tier.as_str(), b.tier, "{what}: {:#x}", b.start);
            assert_eq!(found.current, b.current, "{what}: {:#x}", b.start);
        }
    }
    assert!(
        listed > 1000,
        "{what}: {listed} blocks found among versions"
    );
}

/// On a full dump, ClrMD's `NativeCode` of every method it lists is the code of the
/// version cdac marks current (and of no other version of that method).
fn check_current_against_clrmd(variant: Variant) {
    let tb = testbed_of(variant);
    settle(tb);
    let blocks = methods(tb, Source::Dump("full"));
    let by_start: HashMap<u64, &Block> = blocks.iter().map(|b| (b.start, b)).collect();
    let clrmd = common::clrmd(&tb.dump("full"), &["methods"]);
    let mut agreed = 0;
    for m in clrmd.as_array().expect("clrmd methods") {
        let (md, code) = (hex(&m["method_desc"]), hex(&m["start"]));
        // FCalls' NativeCode is C++ in libcoreclr.so, a P/Invoke's its IL stub's.
        let Some(b) = by_start.get(&code).filter(|b| b.method_desc == md) else {
            continue;
        };
        assert_eq!(
            b.current,
            Some(true),
            "{}: ClrMD's current code of {md:#x} is {code:#x}, which cdac marks {:?}",
            variant.name(),
            b.current
        );
        agreed += 1;
    }
    eprintln!(
        "{}: ClrMD's current code is cdac's current version for {agreed} methods",
        variant.name()
    );
    assert!(agreed > 2000, "{}: only {agreed} compared", variant.name());
}

/// `dotnet-dump` (SOS over the runtime's own DAC), installed by scripts/tools-setup.
/// One method as SOS's `dumpmd` prints it: its current code (0 for none), and each version's code
/// (0 when not compiled), tier and `NativeCodeVersionNode` (0 for the default one).
#[derive(Debug)]
struct SosMethod {
    current: u64,
    versions: Vec<(u64, Tier, u64)>,
    /// What SOS printed, for a failure's message.
    text: String,
}

/// `dumpmd` of each MethodDesc, in one `dotnet-dump analyze` session on `dump`.
fn sos_dumpmd(dump: &std::path::Path, mds: &[u64]) -> Vec<SosMethod> {
    let mut cmd = Command::new(common::dotnet_dump());
    cmd.arg("analyze").arg(dump);
    for md in mds {
        cmd.args(["-c", &format!("dumpmd {md:#x}")]);
    }
    let out = cmd.args(["-c", "exit"]).sos_output();
    assert!(
        out.status.success(),
        "dotnet-dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let hex_of = |s: &str| u64::from_str_radix(s.trim(), 16).expect("SOS hex");
    // Each command's answer starts with its "Method Name:" line.
    let answers: Vec<&str> = text.split("Method Name:").skip(1).collect();
    assert_eq!(answers.len(), mds.len(), "one dumpmd answer per MethodDesc");
    answers
        .iter()
        .map(|a| {
            let mut m = SosMethod {
                current: 0,
                versions: Vec::new(),
                text: a.to_string(),
            };
            let mut code = None;
            for line in a.lines().map(str::trim) {
                if let Some(v) = line.strip_prefix("Current CodeAddr:") {
                    // -1 when the current version has no code: 0, as cdac's `None`.
                    m.current = Some(hex_of(v)).filter(|&c| c != u64::MAX).unwrap_or(0);
                } else if let Some(v) = line.strip_prefix("CodeAddr:") {
                    let (addr, tier) = v.trim().split_once(' ').expect("CodeAddr ADDR (TIER)");
                    let tier = tier.trim().trim_start_matches('(').trim_end_matches(')');
                    let tier = Tier::from_sos(tier).unwrap_or_else(|| panic!("SOS tier {tier}"));
                    code = Some((hex_of(addr), tier));
                } else if let Some(v) = line.strip_prefix("NativeCodeVersion:") {
                    let (addr, tier) = code.take().expect("CodeAddr before NativeCodeVersion");
                    m.versions.push((addr, tier, hex_of(v)));
                }
            }
            m
        })
        .collect()
}

/// On a full dump, SOS's `dumpmd` (the runtime's DAC) and the CodeVersions contract list
/// the same versions of each method (node, code, tier) and the same current code: for every
/// method with several versions and every eighth of the others.
fn check_against_sos(variant: Variant) {
    let tb = testbed_of(variant);
    settle(tb);
    let dump = tb.dump("full");
    let blocks = methods(tb, Source::Dump("full"));
    let mut per_md: BTreeMap<u64, usize> = BTreeMap::new();
    for b in &blocks {
        *per_md.entry(b.method_desc).or_default() += 1;
    }
    let mds: Vec<u64> = per_md
        .iter()
        .enumerate()
        .filter(|(i, (_, &n))| n > 1 || i % 8 == 0)
        .map(|(_, (&md, _))| md)
        .collect();
    let sos = sos_dumpmd(&dump, &mds);
    let map_tiers: HashMap<u64, Tier> = perf_map(&tb.perf_map_for(Some("full")))
        .into_iter()
        .filter_map(|(start, _, name)| {
            let suffix = name.strip_suffix(']')?.rsplit_once('[')?.1;
            Some((start, Tier::from_perf_map(suffix)?))
        })
        .collect();
    let mut sos_unknown = 0;

    let rt = Source::Dump("full").open(tb);
    let (t, d) = (rt.target(), rt.descriptor());
    let em = execution_manager(t, d).expect("execution manager");
    let is_r2r = |code: u64| {
        em.code_block(code)
            .ok()
            .flatten()
            .is_some_and(|b| b.jit_type == JitType::R2r)
    };
    let mut cv = CodeVersions::new(t, d).expect("CodeVersions");
    let flags = MethodNamer::for_runtime(&rt).impl_flags(&mds);
    let (mut versions, mut multi) = (0, 0);
    for ((&md, s), impl_flags) in mds.iter().zip(&sos).zip(flags) {
        let ours = cv.versions(md, impl_flags, &is_r2r).expect("versions");
        let mut want: Vec<(u64, Tier, u64)> = ours
            .versions
            .iter()
            .filter_map(|v| Some((v.code?, v.tier, v.node.unwrap_or(0))))
            .collect();
        // .NET 11's DAC says "Unknown Tier" for a default version whose recorded tier is
        // unset outside tiering (LCG methods); the perf map names it, and so does cdac:
        // there the perf map's tier stands in for SOS's.
        let mut got: Vec<(u64, Tier, u64)> = s
            .versions
            .iter()
            .copied()
            .filter(|v| v.0 != 0)
            .map(|(code, tier, node)| match (tier, map_tiers.get(&code)) {
                (Tier::Unknown, Some(&t)) if node == 0 => {
                    sos_unknown += 1;
                    (code, t, node)
                }
                _ => (code, tier, node),
            })
            .collect();
        want.sort_unstable_by_key(|v| (v.0, v.2));
        got.sort_unstable_by_key(|v| (v.0, v.2));
        // SOS prints at most 10 versions; none of the testbed's methods has more.
        assert_eq!(
            got,
            want,
            "{}: MethodDesc {md:#x}; SOS printed:\n{}",
            variant.name(),
            s.text
        );
        let current = ours
            .versions
            .iter()
            .find(|v| v.current == Some(true))
            .and_then(|v| v.code);
        assert_eq!(
            current.unwrap_or(0),
            s.current,
            "{}: MethodDesc {md:#x}'s current code",
            variant.name()
        );
        versions += got.len();
        multi += usize::from(got.len() > 1);
    }
    eprintln!(
        "{}: SOS and cdac agree on {} methods ({multi} with several versions), {versions} \
         versions; {sos_unknown} default versions SOS calls unknown, as the perf map names them",
        variant.name(),
        mds.len()
    );
    assert!(
        multi > 300,
        "{}: {multi} methods with several versions",
        variant.name()
    );
}

/// The CPU workload's loop methods, once the perf map shows them at tier 1: the version
/// cdac marks current is that tier-1 code (the perf map's tier for the same start).
fn check_cpu_workload(variant: Variant) {
    let _one = common::cpu_workload_lock();
    let w = common::start_cpu_workload(variant);
    let tb = &w.tb;
    settle(tb);
    let tiering = &tb.manifest["cpu_workload"]["tiering"];
    assert_eq!(
        tiering["tier1_reached"],
        true,
        "{}: {tiering}",
        variant.name()
    );
    let map = perf_map(&tb.perf_map_for(None));
    let blocks = methods(tb, Source::Live);
    let names: Vec<&str> = tiering["perf_map_tiers"]
        .as_object()
        .expect("perf_map_tiers")
        .keys()
        .map(String::as_str)
        .collect();
    assert!(names.len() >= 5, "{names:?}");
    for name in names {
        let needle = format!("] {name}(");
        let current: Vec<&Block> = blocks
            .iter()
            .filter(|b| b.name.contains(&needle) && b.current == Some(true))
            .collect();
        assert_eq!(current.len(), 1, "{}: {name}: {current:?}", variant.name());
        let b = current[0];
        let logged = map
            .iter()
            .find(|(start, _, _)| *start == b.start)
            .and_then(|(_, _, n)| perf_map_tier(n));
        assert_eq!(logged, Some(b.tier.as_str()), "{}: {name}", variant.name());
        assert_eq!(b.tier, "optimized_tier1", "{}: {name}", variant.name());
    }
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
fn net10_current_agrees_with_clrmd() {
    check_current_against_clrmd(Variant::Net10);
}

#[test]
fn net11_current_agrees_with_clrmd() {
    check_current_against_clrmd(Variant::Net11);
}

#[test]
fn net9_current_agrees_with_clrmd() {
    check_current_against_clrmd(Variant::Net9);
}

#[test]
fn net8_current_agrees_with_clrmd() {
    check_current_against_clrmd(Variant::Net8);
}

#[test]
fn net10_full_dump_agrees_with_sos() {
    check_against_sos(Variant::Net10);
}

#[test]
fn net11_full_dump_agrees_with_sos() {
    check_against_sos(Variant::Net11);
}

#[test]
fn net9_full_dump_agrees_with_sos() {
    check_against_sos(Variant::Net9);
}

#[test]
fn net8_full_dump_agrees_with_sos() {
    check_against_sos(Variant::Net8);
}

#[test]
fn net10_cpu_workload_runs_current_tier1_code() {
    check_cpu_workload(Variant::Net10);
}

#[test]
fn net11_cpu_workload_runs_current_tier1_code() {
    check_cpu_workload(Variant::Net11);
}

#[test]
fn net9_cpu_workload_runs_current_tier1_code() {
    check_cpu_workload(Variant::Net9);
}

#[test]
fn net8_cpu_workload_runs_current_tier1_code() {
    check_cpu_workload(Variant::Net8);
}
