//! Release builds of the servery binary on x86_64 Linux (where rustc links with lld) lay
//! out the functions a worker runs — starting, idling, serving — next to each other, in
//! the order `scripts/order-symbols.py` recorded them. The kernel maps executable pages
//! in 64 KiB runs around each first touch, so scattered hot functions would bring most of
//! the binary's text into every worker's memory; packed together they bring a fraction.
//! A stale list (new dependencies, another compiler) costs memory, never correctness:
//! names the binary no longer has are skipped. See docs/decisions/0008-static-binary-and-symbol-order.md.
//!
//! With the `python` feature the binary finds the shared libpython it was linked against
//! by an rpath to that interpreter's library directory, so a worker loads the same
//! interpreter (and so the same site-packages) that was found at build time, not whichever
//! libpython of the same version the loader's default path holds (decision 0038).
#![forbid(unsafe_code)]

use std::path::Path;

const ORDER_FILE: &str = "link/symbol-order.txt";

fn main() {
    #[cfg(feature = "python")]
    pyo3_build_config::add_libpython_rpath_link_args();
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed=SERVERY_NO_SYMBOL_ORDER");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let lld_target = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    let opted_out = std::env::var_os("SERVERY_NO_SYMBOL_ORDER").is_some();
    let order = Path::new(env!("CARGO_MANIFEST_DIR")).join(ORDER_FILE);
    if release && lld_target && !opted_out && order.is_file() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
