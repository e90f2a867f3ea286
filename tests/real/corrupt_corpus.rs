//! Damaged dumps: every `--dump` command of the CLI, on a corpus of damaged copies of a real
//! .NET 8 testbed dump (a `createdump --withheap` dump of the C# testbed on 8.0.33, or 8.0.0
//! with `CDAC_NET8_VARIANT=net8.0.0`; scripts/corrupt-corpus: truncations, broken ELF
//! headers and notes, bit flips, zeroed bytes and 0xFF fills inside the runtime's own
//! structures, random damage with fixed seeds), ends in bounded time and memory without
//! panicking. Each command runs under scripts/run-bounded (a timeout that kills, an
//! address-space limit, peak RSS measured).
//!
//! The intact dump must give success for every command (so that the bounds mean something),
//! and the damaged ones must fail with a typed error naming the problem or give a partial
//! result: a dump cut inside its program headers names them and the truncation; one with
//! damaged code headers still lists nearly every method.
//!
//! CI runs the quick set (`scripts/corrupt-corpus --quick`); `CDAC_CORPUS_FULL=1` runs all
//! variants, and `CDAC_CORPUS_SEED=N` damages with seed N instead of the script's default
//! (the random variants differ per seed). Each variant is written, used and deleted before
//! the next.

use crate::common;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{hex, repo, scratch, testbed};

/// Seconds a command may run before it is killed (and the test fails).
const TIMEOUT_SECONDS: u32 = 60;
/// Peak resident set size a command may reach. The intact dump needs about 90 MiB (debug
/// build, coverage); the bound leaves room for slower machines, not for unbounded growth.
const MAX_PEAK_RSS_KIB: u64 = 1 << 20;
/// Address-space limit of each command (RLIMIT_AS): a runaway allocation aborts the command
/// (a failure) instead of taking the machine. The dump and module files are mapped, not read.
const ADDRESS_SPACE_LIMIT: u64 = 4 << 30;

/// What scripts/run-bounded reports of one command.
#[derive(Debug, Clone)]
struct Outcome {
    exit: Option<i64>,
    signal: Option<i64>,
    timed_out: bool,
    panicked: bool,
    seconds: f64,
    peak_rss_kib: u64,
    stderr: String,
    stdout: String,
    /// The dump it read (left out of the table's notes).
    dump: String,
}

impl Outcome {
    fn ok(&self) -> bool {
        self.exit == Some(0)
    }

    /// The command printed its answer: everything (0), or with some items it names as
    /// not answered (1, with its summary rather than an error).
    fn answered(&self) -> bool {
        self.ok() || (self.exit == Some(1) && !self.stderr.contains("cdac: error: "))
    }

    /// The command ended by itself, within its bounds, with status 0 or 1 (status 1 with a
    /// typed error, one line `cdac: error: …`, or with the summary of what it could not
    /// answer, `cdac: … not answered` / `could not be read`), and did not panic.
    fn bounded(&self) -> Result<(), String> {
        if self.panicked {
            return Err("panicked".into());
        }
        if self.timed_out {
            return Err(format!("timed out after {TIMEOUT_SECONDS} s"));
        }
        if let Some(sig) = self.signal {
            return Err(format!("killed by signal {sig}"));
        }
        match self.exit {
            Some(0) => {}
            Some(1)
                if self.stderr.contains("cdac: error: ")
                    || self.stderr.lines().any(|l| {
                        l.starts_with("cdac: ")
                            && (l.contains("not answered")
                                || l.contains("could not be read")
                                || l.contains("damaged place(s) in the heap")
                                || l.contains("corruption(s) in the GC heap")
                                || l.contains("listed in the report")
                                || l.contains("(damage in the dump)")
                                || l.contains("problem(s) reading the roots")
                                || l.contains("is not an object")
                                || l.contains("are not objects")
                                || l.contains("without a stack")
                                || l.contains("records no registers")
                                || l.contains("without a stack")
                                || l.contains("no root read reaches")
                                || l.contains("cut short"))
                    }) => {}
            other => return Err(format!("exit status {other:?} without a typed error")),
        }
        if self.peak_rss_kib > MAX_PEAK_RSS_KIB {
            return Err(format!(
                "peak RSS {} MiB is over the bound of {} MiB",
                self.peak_rss_kib / 1024,
                MAX_PEAK_RSS_KIB / 1024
            ));
        }
        Ok(())
    }

    /// The error, else the first warning, shortened for the table.
    fn note(&self) -> String {
        let e = self.error().trim_start_matches("cdac: error: ");
        let note = if e.is_empty() {
            self.stderr
                .lines()
                .find_map(|l| l.split_once(" WARN ").map(|(_, w)| format!("warning: {w}")))
                .unwrap_or_default()
        } else {
            e.to_string()
        };
        note.replace(&self.dump, "<dump>")
            .chars()
            .take(100)
            .collect()
    }

    /// The last `cdac: error:` line, or "".
    fn error(&self) -> &str {
        self.stderr
            .lines()
            .rev()
            .find(|l| l.contains("cdac: error: "))
            .unwrap_or("")
    }
}

/// What run-bounded reports as JSON, with the command's stdout when `keep_stdout`.
fn outcome_of(
    v: &serde_json::Value,
    args: &[OsString],
    stdout_file: &Path,
    keep_stdout: bool,
) -> Outcome {
    let dump = args
        .iter()
        .position(|a| a == "--dump")
        .and_then(|i| args.get(i + 1))
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stdout = if keep_stdout {
        std::fs::read_to_string(stdout_file).unwrap_or_default()
    } else {
        String::new()
    };
    let _ = std::fs::remove_file(stdout_file);
    Outcome {
        exit: v["exit"].as_i64(),
        signal: v["signal"].as_i64(),
        timed_out: v["timed_out"].as_bool().expect("timed_out"),
        panicked: v["panicked"].as_bool().expect("panicked"),
        seconds: v["seconds"].as_f64().expect("seconds"),
        peak_rss_kib: v["peak_rss_kib"].as_u64().expect("peak_rss_kib"),
        stderr: v["stderr"].as_str().unwrap_or_default().to_string(),
        stdout,
        dump,
    }
}

/// One cdac run of a batch: its arguments, where its stdout goes, whether to keep it.
struct Run {
    args: Vec<OsString>,
    stdout_file: PathBuf,
    keep_stdout: bool,
}

/// Runs cdac commands under scripts/run-bounded's batch mode (one Python start for the lot,
/// `jobs` at a time); outcomes in the order given.
fn run_bounded_batch(runs: &[Run], jobs: usize) -> Vec<Outcome> {
    let batch: Vec<serde_json::Value> = runs
        .iter()
        .map(|r| {
            let mut argv = vec![cdac_bin()];
            argv.extend(r.args.iter().map(|a| a.to_string_lossy().into_owned()));
            serde_json::json!({ "args": argv, "stdout": r.stdout_file })
        })
        .collect();
    let mut child = Command::new(repo().join("scripts/run-bounded"))
        .arg("--batch")
        .arg("--jobs")
        .arg(jobs.to_string())
        .arg("--timeout")
        .arg(TIMEOUT_SECONDS.to_string())
        .arg("--max-as")
        .arg(ADDRESS_SPACE_LIMIT.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run scripts/run-bounded");
    serde_json::to_writer(child.stdin.take().expect("stdin"), &batch).expect("write the batch");
    let out = child.wait_with_output().expect("run-bounded output");
    assert!(
        out.status.success(),
        "run-bounded failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).expect("run-bounded JSON");
    assert_eq!(reports.len(), runs.len(), "one report per command");
    runs.iter()
        .zip(&reports)
        .map(|(r, v)| outcome_of(v, &r.args, &r.stdout_file, r.keep_stdout))
        .collect()
}

/// Runs one cdac command under scripts/run-bounded; stdout is kept when `keep_stdout`.
fn run_bounded(args: &[OsString], stdout_file: &Path, keep_stdout: bool) -> Outcome {
    let run = Run {
        args: args.to_vec(),
        stdout_file: stdout_file.to_path_buf(),
        keep_stdout,
    };
    run_bounded_batch(std::slice::from_ref(&run), 1).remove(0)
}

/// One command line, with `{dump}` and `{out}` (an output file) filled in per run.
struct Cmd {
    label: String,
    args: Vec<String>,
}

/// Every `--dump` command: info, modules, methods, perfmap, coverage, ip2md, eh, unwind,
/// stacks, threads and analyze, each also with `--json` where it has one.
fn commands(ip2md_addrs: &[String], eh_addr: &str, object: &str) -> Vec<Cmd> {
    let mut cmds = Vec::new();
    let mut add = |label: &str, args: &[&str]| {
        cmds.push(Cmd {
            label: label.to_string(),
            args: args.iter().map(|s| s.to_string()).collect(),
        })
    };
    for json in [false, true] {
        let j: &[&str] = if json { &["--json"] } else { &[] };
        let suffix = if json { " --json" } else { "" };
        add(&format!("info{suffix}"), &[&["info"], j].concat());
        add(&format!("modules{suffix}"), &[&["modules"], j].concat());
        add(&format!("methods{suffix}"), &[&["methods"], j].concat());
        let addrs: Vec<&str> = ip2md_addrs.iter().map(String::as_str).collect();
        add(&format!("ip2md{suffix}"), &[&["ip2md"], j, &addrs].concat());
        add(&format!("eh{suffix}"), &[&["eh"], j, &[eh_addr]].concat());
        add(
            &format!("unwind{suffix}"),
            &[&["unwind"], j, &[eh_addr]].concat(),
        );
    }
    add("stacks --json --native", &["stacks", "--json", "--native"]);
    add("stacks", &["stacks"]);
    add("threads --json", &["threads", "--json"]);
    add("analyze --json", &["analyze", "--json"]);
    add("perfmap -o", &["perfmap", "-o", "{out}"]);
    add("coverage -o", &["coverage", "-o", "{out}"]);
    add("heap", &["heap"]);
    add("heap --segments --json", &["heap", "--segments", "--json"]);
    add("handles --json", &["handles", "--json"]);
    add("finalizequeue --json", &["finalizequeue", "--json"]);
    add("heap --live", &["heap", "--live"]);
    add(
        "obj --statics --json",
        &["obj", object, "--statics", "--json"],
    );
    add("gcroot --json", &["gcroot", object, "--json"]);
    add("gcinfo --json", &["gcinfo", eh_addr, "--json"]);
    add("locks --json", &["locks", "--json"]);
    add("async --json", &["async", "--json"]);
    add("threadpool --json", &["threadpool", "--json"]);
    add("verifyheap", &["verifyheap"]);
    cmds
}

/// Runs every command on `dump`, spread over the machine's cores; outcomes in command order.
fn run_all(cmds: &[Cmd], dump: &Path, work: &Path, tag: &str) -> Vec<Outcome> {
    let jobs = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .min(4);
    let out_files: Vec<PathBuf> = (0..cmds.len())
        .map(|i| work.join(format!("{tag}-{i}.out")))
        .collect();
    let runs: Vec<Run> = cmds
        .iter()
        .zip(&out_files)
        .enumerate()
        .map(|(i, (cmd, out_file))| Run {
            args: std::iter::once(OsString::from(&cmd.args[0]))
                .chain(["--dump".into(), dump.as_os_str().to_owned()])
                .chain(cmd.args[1..].iter().map(|a| {
                    if a == "{out}" {
                        out_file.clone().into_os_string()
                    } else {
                        OsString::from(a)
                    }
                }))
                .collect(),
            stdout_file: work.join(format!("{tag}-{i}.stdout")),
            keep_stdout: cmd.label == "methods --json",
        })
        .collect();
    let outcomes = run_bounded_batch(&runs, jobs);
    for f in &out_files {
        let _ = std::fs::remove_file(f);
    }
    outcomes
}

/// Number of methods in `methods --json` output, if it is a JSON array.
fn method_count(o: &Outcome) -> Option<usize> {
    serde_json::from_str::<serde_json::Value>(&o.stdout)
        .ok()?
        .as_array()
        .map(Vec::len)
}

#[test]
fn damaged_dumps_give_bounded_typed_results() {
    let started = Instant::now();
    let full = std::env::var("CDAC_CORPUS_FULL").is_ok_and(|v| v == "1");
    let seed: Vec<String> = match std::env::var("CDAC_CORPUS_SEED") {
        Ok(n) => vec!["--seed".into(), n],
        Err(_) => Vec::new(),
    };
    let tb = testbed();
    let dump = tb.dump("heap");
    let work = scratch("corrupt-corpus");
    let corpus = work.join("corpus");

    // The intact dump's method list gives the addresses for ip2md, eh and unwind.
    let listed = run_bounded(
        &[
            "methods".into(),
            "--dump".into(),
            dump.clone().into_os_string(),
            "--json".into(),
        ],
        &work.join("intact-methods.json"),
        true,
    );
    assert!(listed.ok(), "methods on the intact dump: {listed:?}");
    let methods: Vec<serde_json::Value> =
        serde_json::from_str(&listed.stdout).expect("methods JSON");
    let intact_methods = methods.len();
    assert!(intact_methods > 1000, "{intact_methods} methods");
    let of_type = |t: &str| -> Vec<&serde_json::Value> {
        methods.iter().filter(|m| m["jit_type"] == t).collect()
    };
    let (jit, r2r) = (of_type("jit"), of_type("r2r"));
    assert!(!jit.is_empty() && !r2r.is_empty());
    let handler = methods
        .iter()
        .find(|m| {
            m["name"]
                .as_str()
                .is_some_and(|n| n.contains("Cdac.Testbed.Handlers::NestedTryCatchFinally("))
        })
        .expect("the emitted NestedTryCatchFinally is listed");
    let eh_addr = format!("{:#x}", hex(&handler["start"]) + 4);
    let middle = |m: &serde_json::Value| {
        format!(
            "{:#x}",
            hex(&m["start"]) + m["size"].as_u64().expect("size") / 2
        )
    };
    let mut ip2md_addrs: Vec<String> = (0..6).map(|k| middle(jit[k * jit.len() / 6])).collect();
    ip2md_addrs.extend((0..3).map(|k| middle(r2r[k * r2r.len() / 3])));
    ip2md_addrs.push(eh_addr.clone());
    ip2md_addrs.push("0x1000".into()); // not managed code: an error entry, not a failure
                                       // An object held by a static list, for obj and gcroot.
    let markers = run_bounded(
        &[
            "heap".into(),
            "--dump".into(),
            dump.clone().into_os_string(),
            "--objects".into(),
            "--json".into(),
            "--type".into(),
            "UniqueMarker$".into(),
        ],
        &work.join("intact-markers.json"),
        true,
    );
    assert!(markers.ok(), "heap on the intact dump: {markers:?}");
    let markers: serde_json::Value = serde_json::from_str(&markers.stdout).expect("heap JSON");
    let object = markers["object_list"][0]["address"]
        .as_str()
        .expect("a UniqueMarker")
        .to_string();
    let cmds = commands(&ip2md_addrs, &eh_addr, &object);

    // Every command succeeds on the intact dump; ip2md answers all but 0x1000, which it
    // names (exit 1: one item not answered).
    let intact = run_all(&cmds, &dump, &work, "intact");
    for (cmd, o) in cmds.iter().zip(&intact) {
        let answered = if cmd.label.starts_with("ip2md") {
            o.exit == Some(1) && o.stderr.contains("1 of 11 address(es) not answered")
        } else {
            o.ok()
        };
        assert!(
            answered && o.bounded().is_ok(),
            "{} on the intact dump: {o:?}",
            cmd.label
        );
    }
    let methods_json = cmds
        .iter()
        .position(|c| c.label == "methods --json")
        .expect("methods --json");
    assert_eq!(method_count(&intact[methods_json]), Some(intact_methods));

    // The corpus: listed first, then each variant written, run and deleted in turn.
    let mut list = Command::new(repo().join("scripts/corrupt-corpus"));
    list.arg(&dump).arg(&corpus).arg("--list").args(&seed);
    if !full {
        list.arg("--quick");
    }
    let status = list
        .env("CDAC_BIN", cdac_bin())
        .status()
        .expect("run scripts/corrupt-corpus");
    assert!(status.success(), "corrupt-corpus --list failed");
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(corpus.join("manifest.json")).expect("corpus manifest"),
    )
    .expect("manifest JSON");
    let all_variants = manifest["variants"].as_array().expect("variants");
    let variants: Vec<&serde_json::Value> = all_variants
        .iter()
        .filter(|v| v.get("skipped").is_none())
        .collect();
    // Every variant of the quick set finds its structure in a heap dump (the checks below
    // name them); the full set has some only full and gcore dumps hold (module images).
    if !full {
        let skipped: Vec<&str> = all_variants
            .iter()
            .filter(|v| v.get("skipped").is_some())
            .map(|v| v["name"].as_str().unwrap_or("?"))
            .collect();
        assert!(
            skipped.is_empty(),
            "quick-set variants skipped: {skipped:?}"
        );
    }
    assert!(variants.len() >= if full { 44 } else { 19 });

    // Writes one variant (a full copy of the dump, damaged).
    let write_variant = |name: &str| {
        let mut cmd = Command::new(repo().join("scripts/corrupt-corpus"));
        cmd.arg(&dump)
            .arg(&corpus)
            .args(["--only", name])
            .args(&seed);
        if !full {
            cmd.arg("--quick");
        }
        let status = cmd
            .env("CDAC_BIN", cdac_bin())
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("run scripts/corrupt-corpus");
        assert!(status.success(), "corrupt-corpus --only {name} failed");
    };
    let mut table: BTreeMap<String, Vec<Outcome>> = BTreeMap::new();
    let mut order = Vec::new();
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["name"].as_str().expect("name"))
        .collect();
    std::thread::scope(|s| {
        // The next variant is written while the commands run on this one: at most two on disk.
        let write_variant = &write_variant;
        let first = names[0];
        let mut next = Some(s.spawn(move || write_variant(first)));
        for (i, (v, &name)) in variants.iter().zip(&names).enumerate() {
            next.take()
                .expect("the variant is being written")
                .join()
                .expect("writing the variant");
            if let Some(&following) = names.get(i + 1) {
                next = Some(s.spawn(move || write_variant(following)));
            }
            let path = PathBuf::from(v["path"].as_str().expect("path"));
            let outcomes = run_all(&cmds, &path, &work, name);
            std::fs::remove_file(&path).expect("delete the variant");
            order.push(name.to_string());
            table.insert(name.to_string(), outcomes);
        }
    });
    let _ = std::fs::remove_dir_all(&corpus);

    // The table: variant × command, exit status, seconds, peak RSS.
    println!(
        "\ncorrupt corpus: {} variant(s) of {} ({} set), {} command(s) each",
        variants.len(),
        dump.display(),
        if full { "full" } else { "quick" },
        cmds.len()
    );
    println!(
        "{:<28} {:<14} {:>4} {:>7} {:>8}  error / note",
        "variant", "command", "exit", "seconds", "peak MiB"
    );
    let mut rows: Vec<(&str, &str, &Outcome)> = cmds
        .iter()
        .zip(&intact)
        .map(|(c, o)| ("(intact)", c.label.as_str(), o))
        .collect();
    for name in &order {
        for (c, o) in cmds.iter().zip(&table[name]) {
            rows.push((name.as_str(), c.label.as_str(), o));
        }
    }
    for (variant, label, o) in &rows {
        let note = if label.starts_with("methods --json") && o.answered() {
            format!("{} method(s)", method_count(o).unwrap_or(0))
        } else {
            o.note()
        };
        let exit = match (o.exit, o.signal) {
            (Some(e), _) => e.to_string(),
            (None, Some(s)) => format!("sig{s}"),
            _ => "?".into(),
        };
        println!(
            "{variant:<28} {label:<14} {exit:>4} {:>7.2} {:>8.1}  {note}",
            o.seconds,
            o.peak_rss_kib as f64 / 1024.0
        );
    }
    let worst_rss = rows.iter().max_by_key(|r| r.2.peak_rss_kib).unwrap();
    let slowest = rows
        .iter()
        .max_by(|a, b| a.2.seconds.total_cmp(&b.2.seconds))
        .unwrap();
    println!(
        "worst-case peak RSS: {:.1} MiB ({} on {}); slowest: {:.2} s ({} on {}); {} run(s) in {:.1} s",
        worst_rss.2.peak_rss_kib as f64 / 1024.0,
        worst_rss.1,
        worst_rss.0,
        slowest.2.seconds,
        slowest.1,
        slowest.0,
        rows.len(),
        started.elapsed().as_secs_f64()
    );

    // No panic, no hang, bounded memory, and only typed errors, everywhere.
    let failures: Vec<String> = rows
        .iter()
        .filter_map(|(v, l, o)| {
            o.bounded()
                .err()
                .map(|why| format!("{v} / {l}: {why}: {}", o.stderr.trim()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );

    // What the damage must give.
    let outcome = |variant: &str, label: &str| -> &Outcome {
        let i = cmds.iter().position(|c| c.label == label).expect("command");
        &table
            .get(variant)
            .unwrap_or_else(|| panic!("variant {variant}"))[i]
    };
    // Cut inside the program headers: every command fails, naming the headers and the cut.
    for c in &cmds {
        let o = outcome("trunc-phdrs", &c.label);
        let e = o.error();
        assert!(
            !o.ok()
                && e.contains("is not a usable ELF core dump")
                && e.contains("program headers")
                && e.contains("truncated"),
            "trunc-phdrs / {}: {e}",
            c.label
        );
    }
    // An impossible program header count is named too.
    let e = outcome("ehdr-phnum-ffff", "info").error().to_string();
    assert!(e.contains("is not a usable ELF core dump"), "{e}");
    // Cut inside the notes or the memory data: the truncation is reported.
    for v in ["trunc-notes", "trunc-50pct"] {
        let o = outcome(v, "info");
        assert!(
            o.stderr.contains("the core file is truncated"),
            "{v}: {o:?}"
        );
    }
    // Damage to per-method structures leaves the rest readable: nearly every method listed.
    for v in [
        "codeheader-flip",
        "realcodeheader-ff",
        "gcinfo-flip",
        "ehinfo-ff",
        "methoddesc-ff",
    ] {
        let o = outcome(v, "methods --json");
        let n = method_count(o).unwrap_or(0);
        assert!(
            o.answered() && n * 100 >= intact_methods * 95,
            "{v}: {n} of {intact_methods} methods listed: {}",
            o.stderr.trim()
        );
    }
    // A range section fragment list that loops, and ReadyToRun counts of four billion: the
    // walks stop at their limits with a warning, and the JIT'ed methods are still listed.
    for (v, why) in [
        ("rsm-fragment-loop", "cyclic range section fragment list"),
        ("r2rinfo-counts-huge", "limit"),
    ] {
        let o = outcome(v, "methods --json");
        let n = method_count(o).unwrap_or(0);
        assert!(
            o.answered() && n >= jit.len() * 9 / 10 && o.stderr.contains(why),
            "{v}: {n} methods listed ({} JIT'ed in the intact dump): {}",
            jit.len(),
            o.stderr.trim()
        );
    }
    // A nibble map of 0xFF bytes: the lookup names the bad unit instead of guessing.
    let e = outcome("nibblemap-ff", "eh").error().to_string();
    assert!(e.contains("corrupt nibble map"), "{e}");
    // The GC's table for debuggers destroyed: the heap commands fail naming it; the others
    // are not touched (every method still listed).
    for label in [
        "heap",
        "heap --segments --json",
        "handles --json",
        "finalizequeue --json",
        "heap --live",
        "obj --statics --json",
        "gcroot --json",
    ] {
        let o = outcome("gc-dacvars-ff", label);
        assert!(
            !o.ok() && o.error().contains("GcDacVars"),
            "gc-dacvars-ff / {label}: {o:?}"
        );
    }
    let o = outcome("gc-dacvars-ff", "methods --json");
    assert_eq!(
        method_count(o),
        Some(intact_methods),
        "gc-dacvars-ff: {o:?}"
    );
    // A segment list that loops is named; where an object's MethodTable or length is wrong
    // the walk skips to the next place objects parse again (exit 1, a warning).
    let e = outcome("gc-segment-loop", "heap --segments --json")
        .error()
        .to_string();
    assert!(e.contains("GC segment list") && e.contains("loops"), "{e}");
    for (v, why) in [
        ("gc-object-mt-ff", "is not a MethodTable"),
        ("gc-array-length-huge", "runs past the segment's end"),
    ] {
        let o = outcome(v, "heap");
        assert!(
            o.exit == Some(1)
                && o.stderr.contains(why)
                && o.stderr.contains("damaged place(s) in the heap"),
            "{v}: {o:?}"
        );
        // verifyheap reports the same places as corruption (exit 1).
        let o = outcome(v, "verifyheap");
        assert!(
            o.exit == Some(1) && o.stderr.contains("corruption(s) in the GC heap"),
            "{v} / verifyheap: {o:?}"
        );
    }

    // Async chains whose continuations loop or lead to wild pointers end, naming the Task
    // (exit 1, the problem said); damaged sync blocks are named by the locks report.
    let o = outcome("async-continuation-cycle", "async --json");
    assert!(
        o.exit == Some(1) && o.stderr.contains("continue each other in a cycle"),
        "async-continuation-cycle: {o:?}"
    );
    let o = outcome("async-continuation-wild", "async --json");
    assert!(
        o.exit == Some(1)
            && o.stderr
                .contains("its continuation 0x414141414140 cannot be read"),
        "async-continuation-wild: {o:?}"
    );
    let o = outcome("syncblock-ff", "locks --json");
    assert!(
        o.exit == Some(1) && o.stderr.contains("sync block"),
        "syncblock-ff: {o:?}"
    );
    // A dump taken while a GC moved objects says so, and still walks (exit 1, a warning).
    for label in ["heap", "heap --live", "locks --json", "async --json"] {
        let o = outcome("gc-in-progress", label);
        assert!(
            o.exit == Some(1)
                && o.stderr
                    .contains("while a garbage collection was moving objects"),
            "gc-in-progress / {label}: {o:?}"
        );
    }
    // Damaged globals (the runtime's g_dacTable): what cannot be read through them is
    // reported with the unreadable address (an error, or warnings beside a partial result).
    for label in ["methods", "modules"] {
        let o = outcome("dactable-flip", label);
        assert!(
            o.stderr.contains("was not captured in the dump"),
            "dactable-flip / {label}: {o:?}"
        );
    }
}

/// The cdac the corpus runs: this test build's, or a release build of the same tree when
/// `CDAC_CORPUS_BIN` names one (scripts/test passes the one it just installed: the corpus's
/// few hundred commands take minutes in a debug build, seconds in release).
fn cdac_bin() -> String {
    std::env::var("CDAC_CORPUS_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cdac").to_string())
}
