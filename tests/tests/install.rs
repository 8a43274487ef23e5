//! `cargo install --path io-real` installs a `servery` that runs and serves.
//!
//! Installing from a clean target directory is a full build (minutes), too slow for every
//! test run; this test reuses the test build's own target directory (`--debug`, the dev
//! profile the tests are built with, `--offline --locked`: the dependencies already
//! built), so what it checks is the installation — the package's binary target, its
//! default features, that the installed file runs from somewhere else — not the compiler.
//! It runs when `SERVERY_CHECK_INSTALL=1` (`scripts/test` sets it): it builds the package
//! without the test hooks, which took 137 s on top of a test build on a loaded 2-core
//! machine — more than a normal test run should spend. The hook-less binary it leaves in
//! `target/<profile>/servery` is noticed and replaced by the next test's `servery_bin`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use servery_tests::*;

/// `target/` of this test build: the test executable is `target/<profile>/deps/<name>`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .nth(3)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

#[test]
fn cargo_install_gives_a_servery_that_serves() {
    if std::env::var_os("SERVERY_CHECK_INSTALL").is_none_or(|v| v != "1") {
        eprintln!("cargo install not checked: set SERVERY_CHECK_INSTALL=1 (scripts/test does)");
        return;
    }
    let tree = Tree::new("install");
    let root = tree.dir.join("prefix");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let mut install = Command::new(&cargo);
    install
        .args(["install", "--debug", "--offline", "--locked", "--path"])
        .arg(workspace.join("io-real"))
        .arg("--root")
        .arg(&root)
        .env("CARGO_TARGET_DIR", target_dir());
    let done = run_command(install, Duration::from_secs(900));
    assert!(
        done.status.success(),
        "cargo install failed:\n{}",
        done.stderr
    );
    eprintln!("cargo install took {:?}", started.elapsed());
    let bin = root.join("bin").join("servery");

    let version = run_command(
        {
            let mut c = Command::new(&bin);
            c.arg("--version");
            c
        },
        Duration::from_secs(10),
    );
    assert!(version.status.success(), "{version:?}");
    assert_eq!(
        version.stdout.trim(),
        format!("servery {}", env!("CARGO_PKG_VERSION"))
    );

    // Serves one file, from its installed place.
    let mut child = Command::new(&bin)
        .arg(tree.root())
        .args(["--port", "0", "--control-socket"])
        .arg(tree.socket())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the installed servery");
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).unwrap_or_else(|e| {
            let _ = child.kill();
            panic!("no listening line from the installed servery: {e}")
        });
        if let Some(url) = line.strip_prefix("servery: listening on http://") {
            break url.trim_end_matches('/').parse().expect("an address");
        }
    };
    let answer = wait_until(Duration::from_secs(20), "the file served", || {
        http_get(addr, "/hello.txt")
            .ok()
            .filter(|(code, _)| *code == 200)
    });
    assert_eq!(answer.0.1, HELLO);
    signal_pid(child.id(), Sig::TERM);
    let stopped = wait_until(
        Duration::from_secs(20),
        "the installed servery stopped",
        || child.try_wait().ok().flatten(),
    );
    assert!(stopped.0.success(), "{:?}", stopped.0);
}
