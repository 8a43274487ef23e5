#![forbid(unsafe_code)]

fn main() {
    std::process::exit(servery::entry::main())
}
