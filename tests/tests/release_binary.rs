//! The shipped binary: built without the `test-hooks` feature, so it neither reads nor even
//! names `SERVERY_TEST_FAULT` and `SERVERY_BENCH_BROKER`, nor holds the hooks' code (their
//! log lines).
//!
//! Which binary: `$SERVERY_RELEASE_BIN`, or with `SERVERY_CHECK_RELEASE=1` the one the
//! documented release build produces (`scripts/release_binary.py`; a full release build,
//! several minutes). With neither
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
