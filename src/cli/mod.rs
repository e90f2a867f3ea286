//! The `cdac` command line: argument parsing and output. Every command is a thin user of
//! the library API.

/// Writes a line to standard error, like `eprintln!` but never panicking: a closed or
/// full stderr (`cdac … 2>&1 | head`) must not turn a finished command into a crash.
macro_rules! status {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` for a command's output, in a function returning `Result<_, Box<dyn Error>>`:
/// a failed write is returned instead of panicking (a reader that went away, `cdac … |
/// head`, then ends the command quietly in [`main`]).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)?;
    }};
}

mod analyze;
mod async_chains;
mod code;
mod find;
mod gcinfo;
mod gcroot;
mod gcwhere;
mod handles;
mod heap;
mod info;
mod locks;
mod md;
mod mip;
pub(crate) mod model;
mod mt;
mod names;
mod obj;
mod objsize;
mod output_file;
mod perf_inject;
mod r2r;
mod record;
mod schema;
mod sos_words;
mod stacks;
mod threadpool;
mod threads;
mod tiers;
mod verifyheap;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use cdac::limits::{Limit, Limits};
use cdac::runtime::{OpenOptions, Runtime, RuntimeError};

/// Read the internals of a running .NET process or its core dump, from outside.
#[derive(Debug, Parser)]
#[command(name = "cdac", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the runtime module, its version and its data descriptor.
    Info(info::InfoArgs),
    /// Which managed method owns each code address.
    Ip2md(code::Ip2mdArgs),
    /// The exception clauses of the method at an address.
    Eh(code::AddressArgs),
    /// How the method at an address unwinds (its RUNTIME_FUNCTION and unwind codes).
    Unwind(code::AddressArgs),
    /// The GC info of the method at an address (or of a MethodDesc): header, interruptible
    /// ranges, slot table, and the live slots at each safe point (like SOS gcinfo).
    Gcinfo(gcinfo::GcInfoArgs),
    /// The loaded modules: path, base, size, flags.
    Modules(names::ModulesArgs),
    /// Every method with code (JIT'ed and resolved ReadyToRun), with its name.
    Methods(names::MethodsArgs),
    /// Write a perf map (`START SIZE name`) so that `perf report` names managed frames.
    Perfmap(names::PerfmapArgs),
    /// Make `perf report` name .NET frames in a perf.data of a process running with W^X on
    /// (the default): renames its JIT code and image mappings to //anon and writes
    /// /tmp/perf-PID.map for each live process.
    PerfInject(perf_inject::PerfInjectArgs),
    /// Write the ReadyToRun PerfMap (.ni.r2rmap) of a ReadyToRun image, offline.
    R2rmap(r2r::R2rmapArgs),
    /// Look RVAs up in a ReadyToRun PerfMap.
    Symbolize(r2r::SymbolizeArgs),
    /// Read, merge and create LLVM MIP profiles.
    #[command(subcommand)]
    Mip(mip::MipCommand),
    /// Which managed methods have run, written as a MIP function-coverage profile.
    Coverage(mip::CoverageArgs),
    /// The runtime's threads: ids, state, explicit Frames and the exception in flight.
    Threads(threads::ThreadsArgs),
    /// Every thread's stack: managed frames named, native ones with --native (stops each
    /// live thread for a moment, one at a time; --nonblocking stops none).
    Stacks(stacks::StacksArgs),
    /// The crash summary of a dump: signal and crashing thread, the managed exceptions in
    /// flight, the crashing thread's stack.
    Analyze(analyze::AnalyzeArgs),
    /// Profile a live process: samples taken by the kernel (nothing injected, the process
    /// never stopped), unwound and named from outside; writes a flame graph (SVG),
    /// speedscope JSON or collapsed stacks.
    Record(record::RecordArgs),
    /// A live view of a process's hottest methods (self and total), refreshed each second.
    Top(record::TopArgs),
    /// The managed heap: objects per type (like dumpheap -stat), every object (--objects),
    /// or the GC's heaps and segments (--segments).
    Heap(heap::HeapArgs),
    /// Every GC handle: kind, object, type, a dependent handle's secondary (like gchandles).
    Handles(handles::HandlesArgs),
    /// The finalization queues: objects registered for finalization per generation, and
    /// those ready for their finalizer (like finalizequeue).
    Finalizequeue(handles::FinalizeQueueArgs),
    /// One object: type, size, generation, header, every field with its value, an array's
    /// elements, a string's text (like dumpobj).
    Obj(obj::ObjArgs),
    /// A path from a GC root (a handle, the finalizer queue) to an object, each step named by
    /// the field that holds the next (like gcroot).
    Gcroot(gcroot::GcRootArgs),
    /// What an object keeps alive: every object reachable from it, counted and sized per
    /// type (like objsize).
    Objsize(objsize::ObjSizeArgs),
    /// Where an address lies in the GC heap: heap, segment, generation, and the object it
    /// is or lies in (like gcwhere).
    Gcwhere(gcwhere::GcWhereArgs),
    /// What a MethodTable says about its type: name, module, token, parent, sizes and
    /// counts (like dumpmt).
    Mt(mt::MtArgs),
    /// What a MethodDesc says about its method: name, type, token, module, and every
    /// native code version with its code and tier (like dumpmd).
    Md(md::MdArgs),
    /// A type or method found by name in the loaded modules, with its token and the
    /// runtime's MethodTable or MethodDesc (like name2ee).
    Find(find::FindArgs),
    /// Every object of the GC heap and every reference it holds checked; corruption
    /// reported by address (like verifyheap).
    Verifyheap(verifyheap::VerifyHeapArgs),
    /// Every lock held or waited for (monitors, thin locks, System.Threading.Locks), who
    /// holds it, who waits for it, and the deadlocks among them (like syncblk).
    Locks(locks::LocksArgs),
    /// Async work in flight: each chain of suspended async methods, outermost first, with
    /// the await each waits at (and its line) and what the innermost waits for (like
    /// dumpasync).
    Async(async_chains::AsyncArgs),
    /// The managed thread pool: workers and limits, and the work queued in its global and
    /// per-worker queues with the method each item runs (like threadpool and
    /// threadpoolqueue).
    Threadpool(threadpool::ThreadPoolArgs),
    /// The JSON Schema of a command's `--json` output.
    Schema(schema::SchemaArgs),
}

/// A report's outcome: answered, or partial with its problems after `what`
/// ("some locks could not be read").
pub(crate) fn outcome_of(problems: &[String], what: &str) -> Outcome {
    if problems.is_empty() {
        Outcome::Answered
    } else {
        Outcome::Partial(format!("{what}: {}", first_problems(problems)))
    }
}

/// Problems shown in one line of text; the rest are counted (the JSON lists them all).
const PROBLEMS_SHOWN: usize = 3;

/// The first [`PROBLEMS_SHOWN`] problems joined by "; ", then "and N more" (a damaged heap
/// can have hundreds).
pub(crate) fn first_problems(problems: &[String]) -> String {
    let mut text = problems
        .iter()
        .take(PROBLEMS_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if problems.len() > PROBLEMS_SHOWN {
        text.push_str(&format!(
            "; and {} more (--json lists them all)",
            problems.len() - PROBLEMS_SHOWN
        ));
    }
    text
}

/// How a command that did not fail outright ended; the process exit code follows from it
/// (see [`main`]).
#[must_use]
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Everything asked was answered: exit 0.
    Answered,
    /// Some items could not be answered (the output says which): exit 1, with this summary
    /// on standard error.
    Partial(String),
}

/// What every command returns.
pub(crate) type CliResult = Result<Outcome, Box<dyn std::error::Error>>;

/// Refuses `flag` (when given) on anything but a live process: it stops the process's
/// threads, which a dump has none of.
pub(crate) fn needs_live(flag: &str, given: bool, target: &TargetArgs) -> Result<(), UsageError> {
    if given && target.pid.is_none() {
        return Err(UsageError(format!(
            "{flag} holds a live process's threads stopped: it needs --pid (a dump does not change)"
        )));
    }
    Ok(())
}

/// A mistake in what was asked (a malformed address, a thread id the target does not
/// have): exit 2 when found before anything was read, like clap's own usage errors.
#[derive(Debug)]
pub(crate) struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Which target to read, shared by every command.
#[derive(Debug, Args)]
#[group(required = true, multiple = false, id = "target")]
pub struct TargetArgs {
    /// Read the live process with this pid (read-only; it keeps running).
    #[arg(long, group = "target")]
    pub pid: Option<i32>,
    /// Read this ELF core dump.
    #[arg(long, group = "target", value_name = "FILE")]
    pub dump: Option<PathBuf>,
}

/// Descriptor and limit options, shared by every command that reads a target.
#[derive(Debug, Args)]
pub struct DescriptorArgs {
    /// Use this data descriptor instead of the runtime's own or a shipped one.
    #[arg(long, value_name = "FILE")]
    pub descriptor: Option<PathBuf>,
    /// A core from another machine: look for the libraries it left out under DIR first
    /// (repeatable; default: the directories of CDAC_SYSROOT, colon-separated)
    #[arg(long, value_name = "DIR")]
    pub sysroot: Vec<PathBuf>,
    #[command(flatten)]
    pub limits: LimitArgs,
}

impl DescriptorArgs {
    /// `--sysroot` directories, else those of `CDAC_SYSROOT`.
    pub fn sysroots(&self) -> Vec<PathBuf> {
        if !self.sysroot.is_empty() {
            return self.sysroot.clone();
        }
        std::env::var_os("CDAC_SYSROOT")
            .map(|v| std::env::split_paths(&v).collect())
            .unwrap_or_default()
    }
}

/// Help heading of the `--max-*` options.
const LIMITS: &str = "Limits (counts and sizes take K, M, G suffixes)";

/// The `--max-*` options: each raises or lowers one of [`Limits`] (defaults suit any real
/// runtime; a damaged dump that passes one gets an error naming the option).
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Most entries of one list or array walked (modules, code heaps, clauses, ...)
    /// [default: 1M]
    #[arg(long, value_name = "N", value_parser = parse_amount, help_heading = LIMITS)]
    pub max_list_length: Option<u64>,
    /// Most probes of one hash lookup [default: 1024]
    #[arg(long, value_name = "N", value_parser = parse_amount, help_heading = LIMITS)]
    pub max_hash_chain: Option<u64>,
    /// Most nibble-map units one code lookup scans or one heap walk visits [default: 4M]
    #[arg(long, value_name = "N", value_parser = parse_amount, help_heading = LIMITS)]
    pub max_map_scan: Option<u64>,
    /// Longest string or name read, in bytes or UTF-16 units [default: 64K]
    #[arg(long, value_name = "N", value_parser = parse_amount, help_heading = LIMITS)]
    pub max_string_length: Option<u64>,
    /// Largest data descriptor, in bytes [default: 16M]
    #[arg(long, value_name = "BYTES", value_parser = parse_amount, help_heading = LIMITS)]
    pub max_descriptor_bytes: Option<u64>,
    /// Largest single read from the target, in bytes [default: 256M]
    #[arg(long, value_name = "BYTES", value_parser = parse_amount, help_heading = LIMITS)]
    pub max_read_bytes: Option<u64>,
    /// Most bytes one command reads from the target [default: 16G]
    #[arg(long, value_name = "BYTES", value_parser = parse_amount, help_heading = LIMITS)]
    pub max_total_read: Option<u64>,
}

impl LimitArgs {
    /// The default limits with the options given applied.
    pub fn limits(&self) -> Limits {
        let mut limits = Limits::default();
        let given = [
            (Limit::ListLength, self.max_list_length),
            (Limit::HashChain, self.max_hash_chain),
            (Limit::MapScan, self.max_map_scan),
            (Limit::StringLength, self.max_string_length),
            (Limit::DescriptorSize, self.max_descriptor_bytes),
            (Limit::ReadSize, self.max_read_bytes),
            (Limit::TotalRead, self.max_total_read),
        ];
        for (limit, value) in given {
            if let Some(value) = value {
                limits.set(limit, value);
            }
        }
        limits
    }
}

/// Parses a count or size: digits with an optional K, M or G (powers of 1024) suffix.
pub fn parse_amount(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("not a number (with an optional K, M or G): {t:?}"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{t:?} does not fit in 64 bits"))
}

/// The warnings of the checks run when the target was opened (each names a check that
/// failed and the descriptor values it covers), for commands that put warnings in their
/// JSON too.
static CHECK_WARNINGS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The warnings of the checks run on the target this command opened.
pub(crate) fn check_warnings() -> Vec<String> {
    CHECK_WARNINGS.lock().map(|w| w.clone()).unwrap_or_default()
}

impl TargetArgs {
    /// Opens the runtime the arguments name and checks the values `cdac` gave its
    /// descriptor against it ([`cdac::validation`]), warning about each check that fails.
    pub fn open(&self, descriptor: &DescriptorArgs) -> Result<Runtime, RuntimeError> {
        self.open_checked(descriptor).map(|(rt, _)| rt)
    }

    /// [`TargetArgs::open`], with the checks' report.
    pub fn open_checked(
        &self,
        descriptor: &DescriptorArgs,
    ) -> Result<(Runtime, cdac::validation::ValidationReport), RuntimeError> {
        let options = OpenOptions {
            descriptor: descriptor.descriptor.clone(),
            limits: descriptor.limits.limits(),
            sysroots: descriptor.sysroots(),
        };
        let rt = match (&self.pid, &self.dump) {
            (Some(pid), _) => Runtime::attach(*pid, &options),
            (None, Some(path)) => Runtime::open_dump(path, &options),
            // clap's group makes one of them required.
            (None, None) => Err(RuntimeError::NoRuntime("give --pid or --dump".into())),
        }?;
        let report = cdac::validation::validate(&rt);
        let warnings = report.warnings();
        for w in &warnings {
            status!("cdac: warning: {w}");
        }
        if let Ok(mut w) = CHECK_WARNINGS.lock() {
            *w = warnings;
        }
        Ok((rt, report))
    }
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    init_logging();
    // SOS's words (`dumpheap -stat`, `clrstack -all`, ...) run their cdac commands.
    let args = match sos_words::translate(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(why) => {
            status!("cdac: {why}");
            return 2;
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let result = match &cli.command {
        Command::Info(args) => info::run(args),
        Command::Ip2md(args) => code::run_ip2md(args),
        Command::Eh(args) => code::run_eh(args),
        Command::Unwind(args) => code::run_unwind(args),
        Command::Gcinfo(args) => gcinfo::run_gcinfo(args),
        Command::Modules(args) => names::run_modules(args),
        Command::Methods(args) => names::run_methods(args),
        Command::Perfmap(args) => names::run_perfmap(args),
        Command::R2rmap(args) => r2r::run_r2rmap(args),
        Command::Symbolize(args) => r2r::run_symbolize(args),
        Command::Mip(cmd) => mip::run_mip(cmd),
        Command::Coverage(args) => mip::run_coverage(args),
        Command::Threads(args) => threads::run_threads(args),
        Command::Stacks(args) => stacks::run_stacks(args),
        Command::Analyze(args) => analyze::run_analyze(args),
        Command::Record(args) => record::run_record(args),
        Command::Top(args) => record::run_top(args),
        Command::Heap(args) => heap::run_heap(args),
        Command::Handles(args) => handles::run_handles(args),
        Command::Finalizequeue(args) => handles::run_finalizequeue(args),
        Command::Obj(args) => obj::run_obj(args),
        Command::Gcroot(args) => gcroot::run_gcroot(args),
        Command::Objsize(args) => objsize::run_objsize(args),
        Command::Gcwhere(args) => gcwhere::run_gcwhere(args),
        Command::Mt(args) => mt::run_mt(args),
        Command::Md(args) => md::run_md(args),
        Command::Find(args) => find::run_find(args),
        Command::Verifyheap(args) => verifyheap::run_verifyheap(args),
        Command::Locks(args) => locks::run_locks(args),
        Command::Async(args) => async_chains::run_async(args),
        Command::Threadpool(args) => threadpool::run_threadpool(args),
        Command::Schema(args) => schema::run_schema(args),
        Command::PerfInject(args) => perf_inject::run_perf_inject(args),
    };
    exit_code(result)
}

/// The exit code of a command's result, with its summary or error on standard error: 0
/// when everything asked was answered, 1 when some item could not be (or nothing could be
/// read), 2 for usage errors.
fn exit_code(result: CliResult) -> i32 {
    match result {
        Ok(Outcome::Answered) => 0,
        Ok(Outcome::Partial(summary)) => {
            status!("cdac: {summary}");
            1
        }
        // The reader of our output went away (`| head`): like other Unix tools, stop quietly.
        Err(e) if is_broken_pipe(&*e) => 0,
        Err(e) if e.downcast_ref::<UsageError>().is_some() => {
            status!("cdac: error: {e}");
            2
        }
        Err(e) => {
            status!("cdac: error: {}", error_chain(&*e));
            1
        }
    }
}

/// True when the error, or one of its sources, is a write to a closed pipe.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The error and its sources on one line, without repeating a message that a wrapper
/// already included.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Its own report of a failed write would go through `eprintln!`, which panics
        // when stderr is closed.
        .log_internal_errors(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Formats an address the way every command prints one.
pub fn hex(addr: u64) -> String {
    format!("{addr:#x}")
}

/// Writes `value` as pretty JSON and a newline to standard output, buffered (answers can be
/// megabytes).
pub(crate) fn emit_json<T: serde::Serialize + ?Sized>(
    value: &T,
) -> Result<(), Box<dyn std::error::Error>> {
    use std::io::Write as _;
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut w, value).map_err(std::io::Error::from)?;
    w.write_all(b"\n")?;
    w.flush()?;
    Ok(())
}

/// Writes `text` to standard output (a reader that went away is handled in [`main`]).
pub(crate) fn emit(text: &str) -> Result<(), Box<dyn std::error::Error>> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn amounts_take_binary_suffixes() {
        assert_eq!(parse_amount("1024"), Ok(1024));
        assert_eq!(parse_amount("64K"), Ok(64 << 10));
        assert_eq!(parse_amount("16g"), Ok(16 << 30));
        assert_eq!(parse_amount(" 3M "), Ok(3 << 20));
        assert!(parse_amount("").is_err());
        assert!(parse_amount("1T").is_err());
        assert!(parse_amount("-1").is_err());
        assert!(parse_amount("17179869184G").is_err());
    }

    /// The defaults the help text states are the library's.
    #[test]
    fn help_states_the_library_defaults() {
        let cmd = Cli::command();
        let info = cmd.find_subcommand("info").expect("info command");
        let defaults = Limits::default();
        for limit in Limit::ADJUSTABLE {
            let option = limit.option().expect("adjustable");
            let arg = info
                .get_arguments()
                .find(|a| a.get_long() == option.strip_prefix("--"))
                .unwrap_or_else(|| panic!("{option} missing"));
            let help = arg.get_help().expect("help").to_string();
            let stated = help
                .rsplit_once("[default: ")
                .and_then(|(_, d)| d.strip_suffix(']'))
                .unwrap_or_else(|| panic!("{option}: no default in {help:?}"));
            assert_eq!(parse_amount(stated), Ok(defaults.get(limit)), "{option}");
        }
    }

    #[test]
    fn options_given_override_only_their_limit() {
        let cli = Cli::try_parse_from([
            "cdac",
            "modules",
            "--dump",
            "x.core",
            "--max-list-length",
            "10",
            "--max-total-read",
            "1G",
        ])
        .expect("parses");
        let Command::Modules(args) = cli.command else {
            panic!("modules")
        };
        let limits = args.descriptor.limits.limits();
        assert_eq!(limits.max_list_length, 10);
        assert_eq!(limits.max_total_read_bytes, 1 << 30);
        assert_eq!(limits.max_hash_chain, Limits::default().max_hash_chain);
    }
}
