//! The binary the tests run, built with the test hooks, and commands run to their end
//! with a bound.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::*;

/// What a binary with the test and benchmark hooks compiled in contains, and one without
/// them (built without the `test-hooks` feature of the `servery` package) does not: the
/// names of the variables they read (`SERVERY_TEST_FAULT`, io-real/src/worker/fault.rs;
/// `SERVERY_BENCH_BROKER`, io-real/src/worker/broker.rs; `SERVERY_TEST_STALL_SERVICE`,
/// io-real/src/parent/services/stall.rs) and the prefixes of the lines
/// they print (a fault's log lines, the benchmark's result).
pub const TEST_HOOK_MARKERS: &[&str] = &[
    "SERVERY_TEST_FAULT",
    "SERVERY_BENCH_BROKER",
    "SERVERY_TEST_STALL_SERVICE",
    "SERVERY_TEST_WS_PING_MS",
    "test fault:",
    "broker-bench",
];

/// What a binary built with the `python` feature contains: the name its WSGI support
/// module is compiled under (io-real/src/app/python/mod.rs). The tests' binary has it
/// (the black-box tests of applications need it); the release binary does not.
pub const PYTHON_MARKER: &str = "servery_wsgi.py";

/// Whether the file at `path` is a build that hosts Python applications.
pub fn has_python(path: &Path) -> bool {
    std::fs::read(path)
        .is_ok_and(|bytes| memchr::memmem::find(&bytes, PYTHON_MARKER.as_bytes()).is_some())
}

/// Which of [`TEST_HOOK_MARKERS`] the file at `path` contains.
pub fn test_hooks_in(path: &Path) -> std::io::Result<Vec<&'static str>> {
    let bytes = std::fs::read(path)?;
    Ok(TEST_HOOK_MARKERS
        .iter()
        .copied()
        .filter(|marker| memchr::memmem::find(&bytes, marker.as_bytes()).is_some())
        .collect())
}

/// The `servery` binary under test: `$SERVERY_BIN`, or the workspace's own, built with the
/// `test-hooks` feature (the fault and scenario tests drive `SERVERY_TEST_FAULT`).
///
/// `cargo test --workspace` builds it so: this package's dev-dependency on `servery`
/// turns the feature on for the whole test build. When it is missing, older than the
/// sources it is built from, or without the hooks (as after `cargo test -p
/// servery-tests` alone, which does not build other packages' binaries, or after a
/// build of the package by itself), it is built once per test process with the cargo
/// that runs the tests: `cargo build -p servery --bin servery --features test-hooks`.
pub fn servery_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("SERVERY_BIN") {
            return PathBuf::from(bin);
        }
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test> → target/<profile>/servery
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable lives in target/<profile>/deps")
            .to_path_buf();
        let bin = profile_dir.join("servery");
        let fresh = std::fs::metadata(&bin)
            .and_then(|m| m.modified())
            .is_ok_and(|built| newest_source().is_none_or(|newest| newest <= built));
        let has_hooks = |bin: &Path| {
            test_hooks_in(bin).is_ok_and(|found| found.len() == TEST_HOOK_MARKERS.len())
                && has_python(bin)
        };
        let bin = match std::env::var_os("CARGO") {
            Some(cargo) if !(fresh && has_hooks(&bin)) => {
                let release = profile_dir.file_name().is_some_and(|n| n == "release");
                build_with_hooks(&cargo, release)
            }
            _ => bin,
        };
        assert!(
            has_hooks(&bin),
            "{} is missing or was built without the test hooks: run \
             `cargo build -p servery --features test-hooks,python` or set SERVERY_BIN",
            bin.display()
        );
        bin
    })
    .clone()
}

/// `cargo` as a shell would run it. A test process inherits the variables cargo sets for
/// the test (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, ...), and build scripts such as
/// ring's rerun when one of those they watch differs from the last build: a cargo run
/// from a test would rebuild ring and everything above it, and the next cargo run from a
/// shell would rebuild it all back.
pub fn cargo_command(cargo: &std::ffi::OsStr) -> Command {
    let mut cmd = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || name.starts_with("CARGO_BIN_")
            || matches!(
                name,
                "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR"
            )
        {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// Build the binary with the test hooks; where cargo put it.
fn build_with_hooks(cargo: &std::ffi::OsStr, release: bool) -> PathBuf {
    let mut cmd = cargo_command(cargo);
    cmd.args(["build", "-q", "-p", "servery", "--bin", "servery"])
        .args([
            "--features",
            "test-hooks,python",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if release {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p servery --features test-hooks,python failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact")
        .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
        .expect("cargo reports the executable it built")
}

/// The newest modification time among the sources of the binary.
fn newest_source() -> Option<std::time::SystemTime> {
    fn walk(path: &Path, newest: &mut Option<std::time::SystemTime>) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                walk(&entry.path(), newest);
            }
        } else if let Ok(modified) = meta.modified() {
            *newest = (*newest).max(Some(modified));
        }
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    let mut newest = None;
    for part in [
        "io-real/src",
        "io-real/build.rs",
        "io-real/Cargo.toml",
        "core/src",
        "core/Cargo.toml",
        "Cargo.lock",
    ] {
        walk(&workspace.join(part), &mut newest);
    }
    newest
}

/// Run the binary to completion (for `--check-config`, `ctl`, usage errors).
pub fn run_servery(args: &[&str], env: &[(&str, &str)], bound: Duration) -> Finished {
    let mut cmd = Command::new(servery_bin());
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_command(cmd, bound)
}

/// Run `cmd` to completion with no stdin, collecting its output; panics (after killing
/// it) when it takes longer than `bound`.
pub fn run_command(mut cmd: Command, bound: Duration) -> Finished {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let stdout = drain_pipe(child.stdout.take());
    let stderr = drain_pipe(child.stderr.take());
    let status = wait_child(&mut child, bound).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{cmd:?} did not finish within {bound:?}")
    });
    Finished {
        status,
        stdout: join_text(stdout),
        stderr: join_text(stderr),
    }
}

#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

pub(crate) fn drain_pipe<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

pub(crate) fn join_text(h: JoinHandle<String>) -> String {
    h.join().unwrap_or_default()
}

pub(crate) fn wait_child(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if start.elapsed() > bound {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
