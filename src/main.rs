fn main() {
    std::process::exit(cdac::cli::main())
}
