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
//!
//! `servery --version` and `servery_build_info` name the commit the binary was built from
//! and its features: the commit is `SERVERY_BUILD_COMMIT` when set (a container build
//! passes it, having no `.git`), else `git rev-parse --short HEAD`, else `unknown` (a
//! `cargo install` from the registry's tarball has no repository).
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::Command;

const ORDER_FILE: &str = "link/symbol-order.txt";

fn main() {
    #[cfg(feature = "python")]
    pyo3_build_config::add_libpython_rpath_link_args();
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed=SERVERY_NO_SYMBOL_ORDER");
    build_info();
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

/// `SERVERY_BUILD_COMMIT`, `SERVERY_BUILD_FEATURES` (`_SHOWN`: `none` for none) and
/// `SERVERY_BUILD_TARGET` for
/// `env!` in src/build_info.rs.
fn build_info() {
    println!("cargo:rerun-if-env-changed=SERVERY_BUILD_COMMIT");
    let commit = std::env::var("SERVERY_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SERVERY_BUILD_COMMIT={}", commit.trim());
    // Cargo tells a build script its package's features as CARGO_FEATURE_<NAME>.
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| Some(k.strip_prefix("CARGO_FEATURE_")?.to_ascii_lowercase()))
        .map(|f| f.replace('_', "-"))
        .collect();
    features.sort();
    let features = features.join(",");
    println!("cargo:rustc-env=SERVERY_BUILD_FEATURES={features}");
    let shown = if features.is_empty() {
        "none"
    } else {
        &features
    };
    println!("cargo:rustc-env=SERVERY_BUILD_FEATURES_SHOWN={shown}");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=SERVERY_BUILD_TARGET={target}");
}

/// The short hash of HEAD, if this is a git checkout and git runs; the build runs again
/// when HEAD moves (a commit, a checkout), which is what `git-path` names for worktrees too.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    let watched = ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref());
    for name in watched {
        // A path that does not exist would make cargo run this script on every build.
        if let Some(path) = git(&["rev-parse", "--git-path", name]).map(|p| absolute(&p))
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(commit)
}

/// `git rev-parse --git-path` answers relative to the directory it ran in.
fn absolute(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .display()
        .to_string()
}
