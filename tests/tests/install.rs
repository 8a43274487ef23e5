//! `cargo install --path io-real` installs a `servery` that runs and serves.
//!
//! Installing from a clean target directory is a full release build (minutes), too slow to
//! repeat: this test installs with the arguments of the shipped build (on x86_64 Linux the
//! `release-static` alias's target and static flag, read from `.cargo/config.toml`;
//! elsewhere a plain release build) into this test build's own target directory,
//! `--offline --locked`. After the release-binary check has built that binary (`scripts/test`
//! runs it first) cargo finds every artifact fresh and only installs, so what this checks is
//! the installation — the package's binary target, its default features, that the
//! installed file runs from somewhere else — not the compiler. It runs when
//! `SERVERY_CHECK_INSTALL=1` (`scripts/test` sets it).

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

/// The arguments that make `cargo install` build what `cargo release-static` builds: the
/// alias's words from its `--target` on (the static flag travels with the target it is
/// confined to). None off x86_64 Linux, where the shipped build is a plain release build.
fn shipped_build_args(workspace: &Path) -> Vec<String> {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return Vec::new();
    }
    let config = std::fs::read_to_string(workspace.join(".cargo/config.toml"))
        .expect("read .cargo/config.toml");
    let alias = config
        .split_once("release-static = [")
        .and_then(|(_, rest)| rest.split_once("\n]"))
        .map(|(list, _)| list)
        .expect("the release-static alias in .cargo/config.toml");
    let words: Vec<String> = alias
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    let from = words
        .iter()
        .position(|w| w == "--target")
        .expect("the release-static alias names its --target");
    words[from..].to_vec()
}

#[test]
fn the_shipped_build_arguments_are_read_from_the_alias() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let args = shipped_build_args(&workspace);
    if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        assert_eq!(args.len(), 4, "{args:?}");
        assert_eq!(
            args[..3],
            ["--target", "x86_64-unknown-linux-gnu", "--config"]
        );
        assert!(
            args[3].contains("+crt-static") && args[3].ends_with(']'),
            "the static flag is not whole: {args:?}"
        );
    } else {
        assert!(args.is_empty());
    }
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
    let mut install = cargo_command(&cargo);
    install
        .args(["install", "--offline", "--locked"])
        .args(shipped_build_args(&workspace))
        .arg("--path")
        .arg(workspace.join("io-real"))
        .arg("--root")
        .arg(&root)
        .env("CARGO_TARGET_DIR", target_dir())
        // As scripts/release_binary.py builds it: by rustc, not through the clippy driver
        // the test command's debug builds lint with.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS");
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
    // The version, the commit (of this checkout: the install builds from it) and the
    // default features, which are none.
    let lines: Vec<&str> = version.stdout.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(format!("servery {}", env!("CARGO_PKG_VERSION")).as_str()),
        "{version:?}"
    );
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.starts_with("commit: ") && !l.ends_with("unknown")),
        "{version:?}"
    );
    assert_eq!(lines.get(2).copied(), Some("features: none"), "{version:?}");

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
