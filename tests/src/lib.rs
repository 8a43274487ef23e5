//! Black-box test helpers for the real `servery` binary: a temporary tree to serve, a
//! server guard that starts the binary on an ephemeral port and kills whatever is left on
//! drop, a plain HTTP/1.1 GET over `std::net::TcpStream`, the control socket, a load
//! generator, and [`wait_until`], the one way these tests wait: on an observable
//! condition, with a bound.
#![forbid(unsafe_code)]

pub mod netns;
pub mod scenario;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use serde_json::{Value, json};

pub use serde_json;

/// Lifecycle timings small enough for tests, large enough for a loaded 2-core machine
/// running debug builds: a beat every 0.2 s, a hang declared after 1.5 s.
pub const FAST: &[&str] = &[
    "--heartbeat-interval",
    "0.2",
    "--heartbeat-timeout",
    "1.5",
    "--restart-backoff-initial",
    "0.1",
    "--drain-timeout",
    "2",
    "--force-timeout",
    "0.5",
    "--worker-start-timeout",
    "10",
];

/// The FAST values, for computing bounds.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(1500);
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
pub const FORCE_TIMEOUT: Duration = Duration::from_millis(500);
/// Generous time for one debug-build worker process to start and report READY.
pub const START_MARGIN: Duration = Duration::from_millis(2500);

/// The body of `hello.txt` in every [`Tree`].
pub const HELLO: &[u8] = b"hello from servery\n";

// ---------------------------------------------------------------------------------------
// The binary

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
    "test fault:",
    "broker-bench",
];

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
             `cargo build -p servery --features test-hooks` or set SERVERY_BIN",
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
            "test-hooks",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if release {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p servery --features test-hooks failed:\n{}",
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

fn drain_pipe<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<String> {
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

fn join_text(h: JoinHandle<String>) -> String {
    h.join().unwrap_or_default()
}

fn wait_child(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
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

// ---------------------------------------------------------------------------------------
// Waiting

/// A loopback port free on TCP and on UDP now, for a program a test starts that must be
/// told its port. A port the kernel handed out with `bind(0)` and taken back is not safe
/// for that: until the program binds it, the kernel may give the same number to another
/// test's `bind(0)` or to any client connection as its source port (both come from the
/// ephemeral range), and the program then fails with "address in use". So the port is
/// drawn at random from below that range, where neither happens, and checked free on both
/// protocols; only if the range leaves no room below it does this fall back to `bind(0)`.
/// A port is handed out once per test process: two calls whose ports are not bound yet
/// (a CA's three ports) never get the same one; and once per run, since test binaries
/// run side by side (see [`claim_port_across_processes`]).
pub fn free_port() -> u16 {
    use std::hash::BuildHasher;
    use std::net::{TcpListener, UdpSocket};
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    const FLOOR: u16 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let free = |port: u16| {
        TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && HANDED_OUT
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(port)
            && claim_port_across_processes(port)
    };
    if ephemeral_low > FLOOR + 1_000 {
        let span = u64::from(ephemeral_low - FLOOR);
        for _ in 0..1_000 {
            // Each `RandomState` hashes with fresh keys: a draw nobody else repeats.
            let draw = std::collections::hash_map::RandomState::new().hash_one(0u8);
            let port = FLOOR + (draw % span) as u16;
            if free(port) {
                return port;
            }
        }
    }
    (0..100)
        .find_map(|_| {
            let port = TcpListener::bind("127.0.0.1:0")
                .ok()?
                .local_addr()
                .ok()?
                .port();
            free(port).then_some(port)
        })
        .expect("a free port")
}

/// Claims `port` against the other test processes of a run, which may draw the same free
/// number before either program binds it: an advisory lock on a file named after the
/// port, held until this process ends (the kernel drops it then, however the process
/// ends, so a file an earlier run left behind claims nothing).
fn claim_port_across_processes(port: u16) -> bool {
    static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("servery-test-ports");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let path = dir.join(port.to_string());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            HELD.lock().unwrap_or_else(|p| p.into_inner()).push(file);
            true
        }
        Err(_) => false,
    }
}

/// Poll `condition` until it yields a value, at most `bound`; returns the value and how
/// long it took. Panics naming `what` when the bound passes.
pub fn wait_until<T>(
    bound: Duration,
    what: &str,
    condition: impl FnMut() -> Option<T>,
) -> (T, Duration) {
    wait_until_or(bound, condition, || format!("waiting for {what}"))
}

/// [`wait_until`], with the panic's message made by `describe` when the bound passes (what
/// was seen meanwhile, say).
pub fn wait_until_or<T>(
    bound: Duration,
    mut condition: impl FnMut() -> Option<T>,
    describe: impl FnOnce() -> String,
) -> (T, Duration) {
    let start = Instant::now();
    loop {
        if let Some(v) = condition() {
            return (v, start.elapsed());
        }
        if start.elapsed() > bound {
            panic!("timed out after {bound:?} {}", describe());
        }
        std::thread::sleep(Duration::from_millis(15));
    }
}

/// A thread appending what `pipe` carries to a shared text until its end of file.
pub fn capture_text(
    mut pipe: impl Read + Send + 'static,
) -> (Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&text);
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (text, reader)
}

// ---------------------------------------------------------------------------------------
// A tree to serve

/// A temporary directory with a few files; removed on drop.
#[derive(Debug)]
pub struct Tree {
    pub dir: PathBuf,
}

impl Tree {
    pub fn new(name: &str) -> Tree {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Short: the control socket lives here and Unix socket paths are limited.
        let dir = std::env::temp_dir().join(format!("sv-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root/sub")).expect("mkdir");
        std::fs::write(dir.join("root/hello.txt"), HELLO).expect("write");
        std::fs::write(dir.join("root/sub/big.bin"), big_body()).expect("write");
        Tree { dir }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("ctl.sock")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The body of `sub/big.bin`: large enough to take several writes.
pub fn big_body() -> Vec<u8> {
    (0..256 * 1024u32).map(|i| (i % 251) as u8).collect()
}

// ---------------------------------------------------------------------------------------
// HTTP

/// One `GET` with `Connection: close`; the status and body, or why it failed.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, Vec<u8>), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no complete response head in {} bytes", raw.len()))?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let body = raw[end + 4..].to_vec();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
            .flatten()
    });
    if let Some(length) = length
        && length != body.len()
    {
        return Err(format!("truncated body: {} of {length} bytes", body.len()));
    }
    Ok((status, body))
}

/// Client threads doing `GET path` in a loop and checking every answer.
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    threads: Vec<JoinHandle<ClientReport>>,
    started: Instant,
}

/// One client's failures: as text, and each with when it was started.
type ClientReport = (Vec<String>, Vec<(Instant, String)>);

/// What a [`Load`] saw.
#[derive(Debug)]
pub struct LoadReport {
    pub ok: u64,
    pub failed: u64,
    /// The first failures, with when they happened.
    pub failures: Vec<String>,
    /// The first failed requests of each client, with when each was started, oldest
    /// first.
    pub failed_starts: Vec<(Instant, String)>,
    pub elapsed: Duration,
}

/// A load stops by itself after this long even if a test forgets it.
pub const LOAD_LIMIT: Duration = Duration::from_secs(120);

impl Load {
    pub fn start(addr: SocketAddr, path: &str, expected: &[u8], clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let threads = (0..clients)
            .map(|_| {
                let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
                let (path, expected) = (path.to_owned(), expected.to_vec());
                std::thread::spawn(move || {
                    let mut failures = Vec::new();
                    let mut failed_starts: Vec<(Instant, String)> = Vec::new();
                    while !stop.load(Ordering::Relaxed) && started.elapsed() < LOAD_LIMIT {
                        let start = Instant::now();
                        match http_get(addr, &path) {
                            Ok((200, body)) if body == expected => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            other => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                let what = match other {
                                    Ok((status, body)) => {
                                        format!("status {status}, {} bytes", body.len())
                                    }
                                    Err(e) => e,
                                };
                                if failures.len() < 20 {
                                    failures.push(format!("{:?}: {what}", started.elapsed()));
                                }
                                if failed_starts.len() < 100 {
                                    failed_starts.push((start, what));
                                }
                                // A refused or reset connection returns at once; do not
                                // spin while the service has no worker.
                                std::thread::sleep(Duration::from_millis(5));
                            }
                        }
                    }
                    (failures, failed_starts)
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            threads,
            started,
        }
    }

    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Wait until `n` more requests succeed than now.
    pub fn wait_for_more(&self, n: u64, bound: Duration) {
        let target = self.ok() + n;
        wait_until(bound, &format!("{n} more successful requests"), || {
            (self.ok() >= target).then_some(())
        });
    }

    pub fn stop(self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        let mut failures = Vec::new();
        let mut failed_starts = Vec::new();
        for t in self.threads {
            let (theirs, starts) = t.join().unwrap_or_default();
            failures.extend(theirs);
            failed_starts.extend(starts);
        }
        failed_starts.sort_by_key(|(start, _)| *start);
        LoadReport {
            ok: self.ok.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            failures,
            failed_starts,
            elapsed: self.started.elapsed(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The server

/// Servers in one test process run one at a time: lifecycle timings are tight, and a
/// 2-core machine running several supervisors at once would test the scheduler instead.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How [`Server::launch`] departs from [`Server::start`].
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// Pass no `--control-socket`: the socket goes where servery puts it by default, and
    /// [`Server::socket`] is read from the banner.
    pub default_socket: bool,
    /// Start servery under this umask (through `sh -c 'umask …; exec …'`).
    pub umask: Option<u32>,
    /// Run servery as this (uid, gid), with no supplementary groups, through `setpriv`
    /// (which execs it: the pid is servery's). The tree's directory must be writable by
    /// it, for the control socket.
    pub user: Option<(u32, u32)>,
    /// Start servery with `WATCHDOG_PID` set to its own pid (through `sh -c`, which
    /// execs it), as a service manager does.
    pub watchdog_pid: bool,
    /// Run servery inside this network namespace (through `nsenter`, which execs it).
    pub netns: Option<std::sync::Arc<netns::Netns>>,
}

/// A running `servery` parent. Dropping it kills its process group and every worker it
/// was seen to have.
#[derive(Debug)]
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub socket: PathBuf,
    pub pid: u32,
    /// When the process was spawned.
    pub spawned: Instant,
    stdout: Arc<Mutex<Vec<(Instant, String)>>>,
    stderr: Arc<Mutex<String>>,
    /// The threads reading stdout and stderr: done at end of file.
    readers: Vec<std::thread::JoinHandle<()>>,
    pids: Mutex<BTreeSet<u32>>,
    exit: Option<ExitStatus>,
    _serial: MutexGuard<'static, ()>,
}

impl Server {
    /// Start `servery ROOT --port 0 --workers N --control-socket … ARGS` with `env`, and
    /// wait for its listening line.
    pub fn start(tree: &Tree, workers: u32, args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::launch(tree, workers, args, env, &Launch::default())
    }

    /// [`Server::start`], with the departures from it that `launch` asks for.
    pub fn launch(
        tree: &Tree,
        workers: u32,
        args: &[&str],
        env: &[(&str, &str)],
        launch: &Launch,
    ) -> Server {
        let serial = serial();
        let socket = tree.socket();
        let mut cmd = match (launch.umask, launch.user) {
            (None, None) if launch.netns.is_some() => launch
                .netns
                .as_ref()
                .map(|ns| ns.command(servery_bin()))
                .expect("a namespace"),
            // `exec` keeps the pid, so the guard still signals servery itself.
            (Some(mask), None) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("umask {mask:03o} && exec \"$0\" \"$@\""))
                    .arg(servery_bin());
                sh
            }
            (None, Some((uid, gid))) => {
                let mut setpriv = Command::new("setpriv");
                setpriv
                    .arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .args(["--clear-groups", "--"])
                    .arg(servery_bin());
                setpriv
            }
            (None, None) if launch.watchdog_pid => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg("WATCHDOG_PID=$$ && export WATCHDOG_PID && exec \"$0\" \"$@\"")
                    .arg(servery_bin());
                sh
            }
            (None, None) => Command::new(servery_bin()),
            (Some(_), Some(_)) => panic!("a umask and another user at once are not supported"),
        };
        cmd.arg(tree.root())
            .args(["--port", "0", "--workers", &workers.to_string()]);
        if !launch.default_socket {
            cmd.arg("--control-socket").arg(&socket);
        }
        cmd.args(args)
            .env("SERVERY_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let spawned = Instant::now();
        let mut child = cmd.spawn().expect("spawn servery");
        let pid = child.id();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            let lines = Arc::clone(&stdout);
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((Instant::now(), line));
                }
            }));
        }
        let stderr = match child.stderr.take() {
            Some(err) => {
                let (text, reader) = capture_text(err);
                readers.push(reader);
                text
            }
            None => Arc::default(),
        };
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            socket,
            pid,
            spawned,
            stdout,
            stderr,
            readers,
            pids: Mutex::new(BTreeSet::new()),
            exit: None,
            _serial: serial,
        };
        let (line, _) = server.wait_stdout("servery: listening on ", Duration::from_secs(20));
        // `http://ADDR/`, or `https://ADDR/` with TLS.
        let addr = line
            .trim_start_matches("servery: listening on ")
            .split_once("://")
            .map_or("", |(_, rest)| rest)
            .trim_end_matches('/');
        server.addr = addr.parse().expect("listening address");
        if launch.default_socket {
            // `servery: serving ROOT with N workers; control socket PATH`
            let (line, _) = server.wait_stdout("servery: serving ", Duration::from_secs(20));
            server.socket = line
                .split_once("; control socket ")
                .map(|(_, path)| PathBuf::from(path))
                .unwrap_or_else(|| panic!("no control socket in {line:?}"));
        }
        server
    }

    /// The first stdout line starting with `prefix`, waiting at most `bound`, and how
    /// long after the spawn it was printed.
    pub fn wait_stdout(&mut self, prefix: &str, bound: Duration) -> (String, Duration) {
        let stdout = Arc::clone(&self.stdout);
        let what = format!("stdout line `{prefix}…`");
        let mut exited = None;
        let found = wait_until(bound, &what, || {
            let lines = stdout.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, l)) = lines.iter().find(|(_, l)| l.starts_with(prefix)) {
                return Some(Some((l.clone(), *at)));
            }
            drop(lines);
            exited = self.child.try_wait().ok().flatten();
            exited.map(|_| None)
        });
        match found {
            (Some((line, at)), _) => (line, at.duration_since(self.spawned)),
            (None, _) => panic!(
                "servery exited ({exited:?}) before printing `{prefix}`; stderr:\n{}",
                self.stderr()
            ),
        }
    }

    pub fn stdout(&self) -> Vec<String> {
        self.stdout
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, l)| l.clone())
            .collect()
    }

    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One control request; the answer, or the refusal's text.
    pub fn ctl(&self, request: &Value) -> Result<Value, String> {
        let answer = ctl_at(&self.socket, request);
        if let Ok(status) = &answer {
            self.note_pids(&status["status"]);
        }
        answer
    }

    /// Remember the worker pids in `status`, so that dropping the guard kills them.
    pub fn note_pids(&self, status: &Value) {
        let mut pids = self.pids.lock().unwrap_or_else(|p| p.into_inner());
        pids.extend(worker_pids(status));
    }

    /// `status` over the control socket; remembers every worker pid it shows.
    pub fn status(&self) -> Value {
        self.ctl(&json!({"cmd": "status"}))
            .unwrap_or_else(|e| panic!("status: {e}; stderr:\n{}", self.stderr()))["status"]
            .take()
    }

    /// Every worker pid ever seen in a status.
    pub fn seen_pids(&self) -> BTreeSet<u32> {
        self.pids.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Wait until the service is ready with exactly `n` ready workers (and no other),
    /// all of the committed generation; returns the status.
    pub fn wait_ready(&self, n: usize, bound: Duration) -> (Value, Duration) {
        wait_until(bound, &format!("{n} ready workers"), || {
            let s = self.status();
            let workers = s["workers"].as_array()?;
            let generation = &s["generation"];
            let all_ready = workers.len() == n
                && workers
                    .iter()
                    .all(|w| w["state"] == "ready" && &w["generation"] == generation);
            (s["state"] == "ready" && all_ready).then_some(s)
        })
    }

    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// The parent's exit status if it has exited (without waiting).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Kill the parent alone (`kill -9`), leaving its workers to notice; reaps it.
    pub fn kill_parent(&mut self) -> ExitStatus {
        signal_pid(self.pid, Signal::KILL);
        let status = self.child.wait().expect("reap the parent");
        self.exit = Some(status);
        status
    }

    /// Wait for the parent to exit, at most `bound`; returns its status and how long
    /// after the spawn it exited.
    pub fn wait_exit(&mut self, bound: Duration) -> (ExitStatus, Duration) {
        let status = wait_child(&mut self.child, bound).unwrap_or_else(|| {
            panic!(
                "servery did not exit within {bound:?}; stderr:\n{}",
                self.stderr()
            )
        });
        self.exit = Some(status);
        let exited = self.spawned.elapsed();
        // What it printed up to its exit: the readers reach the end of the pipes once no
        // process holds them, which a worker outliving a killed parent may still do.
        let until = Instant::now() + Duration::from_secs(2);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        (status, exited)
    }
}

/// One control request to the socket at `socket`; the answer, or the refusal's text.
pub fn ctl_at(socket: &Path, request: &Value) -> Result<Value, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    writeln!(s, "{request}").map_err(|e| format!("write: {e}"))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("read: {e}"))?;
    let answer: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line:?}"))?;
    if answer["ok"] == json!(true) {
        Ok(answer)
    } else {
        Err(answer["error"].as_str().unwrap_or("refused").to_owned())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.exit.is_none() {
            if let Some(pid) = Pid::from_raw(self.pid as i32) {
                let _ = rustix::process::kill_process_group(pid, Signal::KILL);
            }
            let _ = self.child.wait();
        }
        for pid in self.seen_pids() {
            if is_worker(pid)
                && let Some(p) = Pid::from_raw(pid as i32)
            {
                let _ = rustix::process::kill_process_group(p, Signal::KILL);
            }
        }
        if std::thread::panicking() {
            eprintln!("--- servery stderr ---\n{}", self.stderr());
        }
    }
}

/// The pids of the workers in a status.
pub fn worker_pids(status: &Value) -> Vec<u32> {
    status["workers"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter_map(|w| w["pid"].as_u64().map(|p| p as u32))
                .collect()
        })
        .unwrap_or_default()
}

/// The ids of the workers in a status.
pub fn worker_ids(status: &Value) -> Vec<u64> {
    status["workers"]
        .as_array()
        .map(|ws| ws.iter().filter_map(|w| w["id"].as_u64()).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Another local user

/// A throwaway system user (`servery-test-<random>`, no home directory), for tests about
/// what another local user can do; removed when dropped, also when the test fails.
/// Created only when the tests run as root: [`OtherUser::create`] otherwise says why not.
#[derive(Debug)]
pub struct OtherUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// `useradd` and `userdel` lock `/etc/passwd`: one at a time within this process.
fn accounts() -> MutexGuard<'static, ()> {
    static ACCOUNTS: Mutex<()> = Mutex::new(());
    ACCOUNTS.lock().unwrap_or_else(|p| p.into_inner())
}

impl OtherUser {
    /// A new user, or why none can be made here (the test then skips, saying so).
    pub fn create() -> Result<OtherUser, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not running as root, so no second user can be created".into());
        }
        for tool in ["useradd", "userdel", "setpriv"] {
            if Command::new(tool).arg("--help").output().is_err() {
                return Err(format!("`{tool}` is not installed"));
            }
        }
        let random = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            (std::process::id(), Instant::now()),
        );
        let name = format!("servery-test-{:08x}", random as u32);
        let added = {
            let _lock = accounts();
            Command::new("useradd")
                .args(["--system", "--no-create-home", "--user-group"])
                .arg(&name)
                .output()
                .map_err(|e| format!("useradd: {e}"))?
        };
        if !added.status.success() {
            return Err(format!(
                "useradd {name} failed: {}",
                String::from_utf8_lossy(&added.stderr).trim()
            ));
        }
        // From here on the guard removes the user, whatever happens next.
        let mut user = OtherUser {
            name,
            uid: 0,
            gid: 0,
        };
        user.uid = user.id("-u")?;
        user.gid = user.id("-g")?;
        assert!(user.uid != 0 && user.gid != 0, "{user:?}");
        Ok(user)
    }

    fn id(&self, which: &str) -> Result<u32, String> {
        let out = Command::new("id")
            .args([which, &self.name])
            .output()
            .map_err(|e| format!("id: {e}"))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|e| format!("id {which} {}: {e}", self.name))
    }

    /// `program` run as this user (its uid, its group, no supplementary groups), through
    /// `setpriv`, which execs it: the pid is the program's.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--clear-groups", "--"])
            .arg(program);
        cmd
    }
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        let _lock = accounts();
        let removed = Command::new("userdel").arg(&self.name).output();
        match removed {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "WARNING: userdel {} failed: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!("WARNING: userdel {}: {e}", self.name),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Processes

/// `/proc/<pid>/stat` fields after the command name: state, ppid, pgrp.
fn proc_stat(pid: u32) -> Option<(char, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Whether `pid` is a running (not zombie) process.
pub fn alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(state, _, _)| state != 'Z' && state != 'X')
}

/// Whether `pid` is a live servery worker (so a guard never kills a recycled pid).
fn is_worker(pid: u32) -> bool {
    alive(pid)
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"__worker"))
}

/// Live processes whose process group is one of `groups`.
pub fn processes_in_groups(groups: &BTreeSet<u32>) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            proc_stat(pid).is_some_and(|(state, _, pgrp)| state != 'Z' && groups.contains(&pgrp))
        })
        .collect()
}

/// Send `signal` to one process.
pub fn signal_pid(pid: u32, signal: Signal) {
    if let Some(p) = Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, signal);
    }
}

pub use rustix::process::Signal as Sig;
