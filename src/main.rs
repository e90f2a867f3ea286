//! The `cdac` command line, a thin user of the `cdac` library.

#![deny(unsafe_code)]

mod cli;

fn main() {
    std::process::exit(cli::main())
}
