#![forbid(unsafe_code)]

fn main() {
    std::process::exit(servery::app::main())
}
