//! The shipped binary: built without the `test-hooks` feature, so it neither reads nor even
//! names `SERVERY_TEST_FAULT` and `SERVERY_BENCH_BROKER`, nor holds the hooks' code (their
//! log lines); and, on x86_64 Linux, it is statically linked and position-independent
//! (docs/decisions/0008-static-binary-and-symbol-order.md), and laid out in the recorded
//! symbol order: most functions the order lists are in it, so an idle worker maps only the
//! few pages of code it runs.
//!
//! Which binary: `$SERVERY_RELEASE_BIN`, or with `SERVERY_CHECK_RELEASE=1` the one the
//! documented release build produces (`scripts/release_binary.py`, that is `cargo
//! release-static` on x86_64 Linux; a full release build, several minutes). With neither
//! there is no release binary to look at and the tests say so and pass: a plain `cargo
//! test` does not build one. `scripts/test` (and so CI) runs them with
//! `SERVERY_CHECK_RELEASE=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use servery_tests::{TEST_HOOK_MARKERS, servery_bin, test_hooks_in};

fn release_binary() -> Option<PathBuf> {
    static BIN: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("SERVERY_RELEASE_BIN") {
            return Some(PathBuf::from(bin));
        }
        if std::env::var_os("SERVERY_CHECK_RELEASE").is_none_or(|v| v != "1") {
            eprintln!(
                "no release binary to check: set SERVERY_CHECK_RELEASE=1 (builds one) or \
                 SERVERY_RELEASE_BIN=PATH"
            );
            return None;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/release_binary.py");
        let out = Command::new("python3")
            .arg(&script)
            .output()
            .expect("run scripts/release_binary.py");
        assert!(
            out.status.success(),
            "the release build failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = String::from_utf8(out.stdout).expect("a UTF-8 path");
        Some(PathBuf::from(path.trim()))
    })
    .clone()
}

#[test]
fn the_release_binary_has_no_test_hooks() {
    let Some(bin) = release_binary() else {
        return;
    };
    let found = test_hooks_in(&bin).unwrap_or_else(|e| panic!("read {}: {e}", bin.display()));
    assert!(
        found.is_empty(),
        "{} names {found:?}: the test hooks are compiled in (the `test-hooks` feature \
         must stay off in release builds)",
        bin.display()
    );
    // The same scan finds them where they are: in the binary the black-box tests run.
    let test_bin = servery_bin();
    assert_eq!(
        test_hooks_in(&test_bin).expect("read the test binary"),
        TEST_HOOK_MARKERS,
        "{}",
        test_bin.display()
    );
}

/// What the ELF headers say about linking: the object type and whether a program
/// interpreter (the dynamic loader) is named.
fn elf_linking(path: &Path) -> (u16, bool) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x7fELF\x02\x01"),
        "{} is not a 64-bit little-endian ELF file",
        path.display()
    );
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    const PT_INTERP: u32 = 3;
    let e_type = u16_at(16);
    let (phoff, phentsize, phnum) = (u64_at(32) as usize, u16_at(54) as usize, u16_at(56));
    let interp = (0..usize::from(phnum)).any(|i| u32_at(phoff + i * phentsize) == PT_INTERP);
    (e_type, interp)
}

#[test]
fn the_release_binary_is_static_and_position_independent_on_x86_64_linux() {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        eprintln!("not x86_64 Linux: the release build there is dynamically linked");
        return;
    }
    let Some(bin) = release_binary() else {
        return;
    };
    const ET_DYN: u16 = 3;
    assert_eq!(
        elf_linking(&bin),
        (ET_DYN, false),
        "{}: a static-pie executable is ET_DYN and names no program interpreter",
        bin.display()
    );
    // The check can tell: the test binary is dynamically linked.
    assert_eq!(elf_linking(&servery_bin()), (ET_DYN, true));
}

/// The functions `io-real/link/symbol-order.txt` lists are the binary's: at least 90 % of
/// them (`scripts/order-symbols.py --check`). Symbol names carry a hash of their crate's
/// dependencies and build settings, so new dependencies or another compiler leave the list
/// naming functions the binary no longer has; the link then scatters the worker's hot
/// functions and an idle worker maps megabytes more of the binary (its file-backed RSS went
/// from about 2 to 9 MiB when 663 of 1,749 names still matched). Regenerate the list with
/// `scripts/order-symbols.py` (valgrind, a release build).
#[test]
fn the_release_binary_is_laid_out_in_a_fresh_symbol_order() {
    let Some(bin) = release_binary() else {
        return;
    };
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        servery_tests::skipped("the symbol order is applied on x86_64 Linux only");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/order-symbols.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--check")
        .env("SERVERY_RELEASE_BIN", &bin)
        .output()
        .expect("run scripts/order-symbols.py --check");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stale symbol order ({}): regenerate io-real/link/symbol-order.txt with \
         scripts/order-symbols.py\n{}",
        said.trim(),
        String::from_utf8_lossy(&out.stderr)
    );
}
