//! How a test says that it, or a part of it, cannot run here: [`skipped`] prints the
//! reason and, when the test runner asks for them (`SERVERY_SKIP_LOG`, which
//! `scripts/run_tests.py` sets per test executable), appends it to the runner's file, so
//! the runner reports the test as skipped instead of counting it among those that passed
//! (libtest itself has no such outcome: a test that returns early passes).

use std::io::Write as _;

/// The variable naming the file skips are appended to.
pub const SKIP_LOG_ENV: &str = "SERVERY_SKIP_LOG";

/// Says that the current test (or the part `why` names) is skipped, and why.
pub fn skipped(why: impl std::fmt::Display) {
    let current = std::thread::current();
    let test = current.name().unwrap_or("(unnamed)");
    let line = format!("{test}: {why}");
    eprintln!("SKIPPED: {line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        // One short append per skip: whole lines even when tests skip side by side.
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{}\n", line.replace('\n', " ")).as_bytes()));
        if let Err(e) = appended {
            eprintln!(
                "could not record the skip in {}: {e}",
                path.to_string_lossy()
            );
        }
    }
}
