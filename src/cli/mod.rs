//! The `cdac` command line: argument parsing and output. Every command is a thin user of
//! the library API.

mod code;
mod info;
mod mip;
mod names;
mod r2r;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::runtime::{OpenOptions, Runtime, RuntimeError};

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
    /// The loaded modules: path, base, size, flags.
    Modules(names::ModulesArgs),
    /// Every method with code (JIT'ed and resolved ReadyToRun), with its name.
    Methods(names::MethodsArgs),
    /// Write a perf map (`START SIZE name`) so that `perf report` names managed frames.
    Perfmap(names::PerfmapArgs),
    /// Write the ReadyToRun PerfMap (.ni.r2rmap) of a ReadyToRun image, offline.
    R2rmap(r2r::R2rmapArgs),
    /// Look RVAs up in a ReadyToRun PerfMap.
    Symbolize(r2r::SymbolizeArgs),
    /// Read, merge and create LLVM MIP profiles.
    #[command(subcommand)]
    Mip(mip::MipCommand),
    /// Which managed methods have run, written as a MIP function-coverage profile.
    Coverage(mip::CoverageArgs),
}

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

/// Descriptor options, shared by every command.
#[derive(Debug, Args)]
pub struct DescriptorArgs {
    /// Use this data descriptor instead of the runtime's own or a shipped one.
    #[arg(long, value_name = "FILE")]
    pub descriptor: Option<PathBuf>,
}

impl TargetArgs {
    /// Opens the runtime the arguments name.
    pub fn open(&self, descriptor: &DescriptorArgs) -> Result<Runtime, RuntimeError> {
        let options = OpenOptions {
            descriptor: descriptor.descriptor.clone(),
            ..OpenOptions::default()
        };
        match (&self.pid, &self.dump) {
            (Some(pid), _) => Runtime::attach(*pid, &options),
            (None, Some(path)) => Runtime::open_dump(path, &options),
            // clap's group makes one of them required.
            (None, None) => Err(RuntimeError::NoRuntime("give --pid or --dump".into())),
        }
    }
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    init_logging();
    let cli = match Cli::try_parse() {
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
        Command::Modules(args) => names::run_modules(args),
        Command::Methods(args) => names::run_methods(args),
        Command::Perfmap(args) => names::run_perfmap(args),
        Command::R2rmap(args) => r2r::run_r2rmap(args),
        Command::Symbolize(args) => r2r::run_symbolize(args),
        Command::Mip(cmd) => mip::run_mip(cmd),
        Command::Coverage(args) => mip::run_coverage(args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cdac: error: {}", error_chain(&*e));
            1
        }
    }
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
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Formats an address the way every command prints one.
pub fn hex(addr: u64) -> String {
    format!("{addr:#x}")
}

/// Writes `text` to standard output; a reader that went away (`| head`) is not an error.
pub(crate) fn emit(text: &str) -> Result<(), Box<dyn std::error::Error>> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
