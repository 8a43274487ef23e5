//! The request path's cost in instructions, per request class, against the committed
//! baseline (`docs/benchmarks/instructions.toml`, decision 0067): growth beyond 3 % fails
//! unless the baseline says so with a reason; a fall beyond 3 % asks for the baseline to
//! be lowered. Counted by callgrind on `io-real/examples/request_instructions.rs` as the
//! release build makes it (`scripts/release_binary.py --example request_instructions`):
//! the shipped profile, whose counts are the ones that mean something.
//!
//! That build takes minutes, so the test runs only when asked: `SERVERY_CHECK_INSTRUCTIONS=1`
//! (which `scripts/test`, and so CI, sets once its background release builds are done),
//! or `SERVERY_INSTRUCTIONS_BIN=PATH` to count a program built elsewhere. A plain `cargo
//! test` says it skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use servery_tests::instructions::{self, TOLERANCE};

const BASELINE: &str = "../docs/benchmarks/instructions.toml";

fn program() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("SERVERY_INSTRUCTIONS_BIN") {
        return Some(PathBuf::from(bin));
    }
    if std::env::var_os("SERVERY_CHECK_INSTRUCTIONS").is_none_or(|v| v != "1") {
        servery_tests::skipped(
            "instructions per request are counted on the release build; set \
             SERVERY_CHECK_INSTRUCTIONS=1 (builds it) or SERVERY_INSTRUCTIONS_BIN=PATH",
        );
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/release_binary.py");
    let out = Command::new("python3")
        .arg(&script)
        .args(["--example", "request_instructions"])
        .output()
        .expect("run scripts/release_binary.py");
    assert!(
        out.status.success(),
        "the release build of request_instructions failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8(out.stdout).expect("a UTF-8 path");
    Some(PathBuf::from(path.trim()))
}

#[test]
fn instructions_per_request_stay_within_the_baseline() {
    let Some(program) = program() else {
        return;
    };
    let version = Command::new("valgrind").arg("--version").output();
    let Ok(version) = version.map(|v| String::from_utf8_lossy(&v.stdout).trim().to_owned()) else {
        panic!("valgrind is needed (scripts/debian-packages.txt): apt-get install valgrind");
    };
    let baseline_path = Path::new(env!("CARGO_MANIFEST_DIR")).join(BASELINE);
    let text = std::fs::read_to_string(&baseline_path)
        .unwrap_or_else(|e| panic!("read {}: {e}", baseline_path.display()));
    let baseline = instructions::parse_baseline(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", baseline_path.display()));

    let scratch = std::env::temp_dir().join(format!("servery-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("a scratch directory");
    let started = std::time::Instant::now();
    let measured = instructions::callgrind(&program, baseline.requests, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    let measured = measured.unwrap_or_else(|e| panic!("{e}"));
    let per_request =
        instructions::per_request(&measured.dumps, &measured.names, baseline.requests)
            .unwrap_or_else(|e| panic!("{e}"));
    let verdict = instructions::judge(&baseline, &per_request);

    println!(
        "instructions per request ({version}, K = {}, {:.0} s under callgrind, {}):",
        baseline.requests,
        started.elapsed().as_secs_f64(),
        program.display()
    );
    println!(
        "{:24} {:>12} {:>12} {:>10}",
        "class path", "baseline", "measured", "change"
    );
    for row in &verdict.table {
        println!("{row}");
    }
    let count = |name: &str| {
        per_request
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| *c as f64)
    };
    if let (Some(servery), Some(floor)) = (count("get-1k hyper"), count("floor hyper")) {
        println!(
            "a 1 KiB keep-alive GET costs {:.2}× bare hyper's instructions (issue 39's goal: at most 1.2×)",
            servery / floor
        );
    }
    for notice in &verdict.notices {
        println!("notice: {notice}");
    }
    assert!(
        verdict.failures.is_empty(),
        "instructions per request beyond the baseline (tolerance {:.0} %):\n{}",
        TOLERANCE * 100.0,
        verdict.failures.join("\n")
    );
}
