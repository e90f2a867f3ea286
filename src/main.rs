//! The `cdac` command line, a thin user of the `cdac` library.

mod cli;

fn main() {
    std::process::exit(cli::main())
}
