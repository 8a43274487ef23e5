//! Serving from N worker processes behind one port, the control client, and configuration
//! errors that stop servery before it binds anything.

use std::collections::BTreeSet;
use std::time::Duration;

use servery_tests::*;

fn serves_with(workers: usize) {
    let tree = Tree::new(&format!("serve{workers}"));
    let mut server = Server::start(&tree, workers as u32, FAST, &[]);
    let (_, listening) = server.wait_stdout("servery: listening", Duration::from_secs(30));
    let (_, ready) = server.wait_stdout("servery: ready", Duration::from_secs(30));
    let (status, _) = server.wait_ready(workers, Duration::from_secs(10));
    eprintln!(
        "MEASURED {workers} worker(s): listening {listening:?}, generation 1 READY {ready:?} after spawn ({:?} from listening to READY)",
        ready - listening
    );
    let pids: BTreeSet<u32> = worker_pids(&status).into_iter().collect();
    assert_eq!(pids.len(), workers, "distinct pids: {status}");
    assert!(
        !pids.contains(&server.pid),
        "workers are separate processes"
    );
    assert_eq!(status["generation"], 1);
    assert_eq!(status["config"]["workers"], workers);

    for _ in 0..20 {
        let (code, body) = http_get(server.addr, "/hello.txt").expect("GET hello");
        assert_eq!(code, 200);
        assert_eq!(body, HELLO);
    }
    let (code, body) = http_get(server.addr, "/sub/big.bin").expect("GET big");
    assert_eq!(code, 200);
    assert_eq!(body, big_body());
    let (code, _) = http_get(server.addr, "/missing").expect("GET missing");
    assert_eq!(code, 404);

    // Every request is counted by some worker and reported through heartbeats.
    let (_, _) = wait_until(Duration::from_secs(5), "request counts in status", || {
        let s = server.status();
        let total: u64 = s["workers"]
            .as_array()?
            .iter()
            .filter_map(|w| w["requests"].as_u64())
            .sum();
        (total >= 22).then_some(())
    });
}

#[test]
fn one_worker_serves() {
    serves_with(1);
}

#[test]
fn two_workers_serve_one_port() {
    serves_with(2);
}

#[test]
fn four_workers_serve_one_port() {
    serves_with(4);
}

#[test]
fn the_ctl_subcommand_talks_to_the_socket() {
    let tree = Tree::new("ctl");
    let server = Server::start(&tree, 2, FAST, &[]);
    server.wait_ready(2, Duration::from_secs(20));
    let socket = server.socket.to_str().expect("utf-8 path").to_owned();

    let text = run_servery(
        &["ctl", "--socket", &socket, "status"],
        &[],
        Duration::from_secs(10),
    );
    assert!(text.status.success(), "{text:?}");
    assert!(text.stdout.contains("state ready"), "{}", text.stdout);
    let ready_rows = text
        .stdout
        .lines()
        .filter(|l| l.starts_with('w') && l.contains(" ready "))
        .count();
    assert_eq!(ready_rows, 2, "{}", text.stdout);

    let json = run_servery(
        &["ctl", "--socket", &socket, "status", "--json"],
        &[],
        Duration::from_secs(10),
    );
    assert!(json.status.success(), "{json:?}");
    let v: serde_json::Value = serde_json::from_str(json.stdout.trim()).expect("JSON status");
    for key in ["state", "generation", "workers", "restarts", "last_failure"] {
        assert!(v.get(key).is_some(), "status lacks {key}: {v}");
    }
    for w in v["workers"].as_array().expect("workers") {
        for key in ["id", "pid", "generation", "state", "requests", "age_ms"] {
            assert!(w.get(key).is_some(), "worker lacks {key}: {w}");
        }
    }

    let missing = tree.dir.join("nope.sock");
    let bad = run_servery(
        &[
            "ctl",
            "--socket",
            missing.to_str().expect("utf-8"),
            "status",
        ],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    assert!(
        bad.stderr.contains("cannot reach servery"),
        "{}",
        bad.stderr
    );
}

#[test]
fn invalid_flags_exit_2_naming_every_field_without_listening() {
    let tree = Tree::new("badcfg");
    let root = tree.root();
    let socket = tree.socket();
    let bad = [
        "--workers",
        "0",
        "--restart-backoff-initial",
        "-1",
        "--heartbeat-interval",
        "5",
        "--heartbeat-timeout",
        "5",
        "--worker-max-age-jitter",
        "2",
        "--drain-timeout",
        "nan",
    ];
    let expected = [
        ("workers", "--workers"),
        (
            "recovery.restart_backoff_initial",
            "--restart-backoff-initial",
        ),
        ("recovery.heartbeat_timeout", "--heartbeat-timeout"),
        ("recovery.worker_max_age_jitter", "--worker-max-age-jitter"),
        ("recovery.drain_timeout", "--drain-timeout"),
    ];
    for check in [true, false] {
        let mut args = vec![root.to_str().expect("utf-8"), "--port", "0"];
        args.extend(["--control-socket", socket.to_str().expect("utf-8")]);
        if check {
            args.push("--check-config");
        }
        args.extend(bad);
        let run = run_servery(&args, &[], Duration::from_secs(10));
        assert_eq!(run.status.code(), Some(2), "check={check}: {run:?}");
        for (field, flag) in expected {
            assert!(
                run.stderr.contains(&format!("{field} ({flag}):")),
                "check={check}: {field} not named in:\n{}",
                run.stderr
            );
        }
        assert!(!run.stdout.contains("listening"), "{}", run.stdout);
        assert!(!socket.exists(), "nothing may be created before validation");
    }

    // The same rules through the environment.
    let run = run_servery(
        &["--check-config", root.to_str().expect("utf-8")],
        &[
            ("SERVERY_FORCE_TIMEOUT", "-3"),
            ("SERVERY_MAX_CONNECTIONS", "0"),
        ],
        Duration::from_secs(10),
    );
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(
        run.stderr.contains("recovery.force_timeout"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("budgets.max_connections"),
        "{}",
        run.stderr
    );

    // A directory that does not exist is a configuration error too.
    let run = run_servery(
        &[
            "--check-config",
            tree.dir.join("absent").to_str().expect("utf-8"),
        ],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(run.stderr.contains("dir:"), "{}", run.stderr);
}

#[test]
fn check_config_prints_the_config_and_exact_aggregates() {
    let tree = Tree::new("okcfg");
    let run = run_servery(
        &[
            tree.root().to_str().expect("utf-8"),
            "--check-config",
            "--workers",
            "4",
            "--max-connections",
            "100",
            "--compression-cache-size",
            "10",
            "--file-cache-size",
            "3",
        ],
        &[("SERVERY_DRAIN_TIMEOUT", "7.5")],
        Duration::from_secs(10),
    );
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    for line in [
        "workers = 4",
        "aggregate_connection_limit = 400",
        "aggregate_compression_cache_size = 40",
        "recycling_overlap_compression_bound = 50",
        "budgets.file_cache_size = 3",
        "aggregate_file_cache_size = 12",
        "recycling_overlap_file_cache_bound = 15",
        "recovery.drain_timeout = 7.5",
    ] {
        assert!(
            run.stdout.contains(line),
            "missing `{line}` in:\n{}",
            run.stdout
        );
    }
    assert!(!run.stdout.contains("listening"), "{}", run.stdout);
}

#[test]
fn a_busy_port_is_a_runtime_error() {
    let tree = Tree::new("busy");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let run = run_servery(
        &[
            tree.root().to_str().expect("utf-8"),
            "--port",
            &port,
            "--control-socket",
            tree.socket().to_str().expect("utf-8"),
        ],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(run.stderr.contains("cannot listen"), "{}", run.stderr);
}

/// One `GET` with extra header lines and `Connection: close`: the status and the head.
fn get_with(addr: std::net::SocketAddr, path: &str, headers: &str) -> (u16, String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n"
    )
    .expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    (status, head, raw[end + 4..].to_vec())
}

fn base64(input: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn serving_options_reach_every_worker() {
    use sha2::{Digest, Sha256};
    let tree = Tree::new("siteopts");
    std::fs::write(tree.root().join("index.html"), "<p>app</p>").expect("write");
    let hashed: String = Sha256::digest(b"pw")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // Two credentials through the environment (one per line), one of them hashed.
    let auth = format!("alice:s3cret\nbob:sha256:{hashed}");
    let mut args = FAST.to_vec();
    args.extend(["--cors", "--spa", "--cache", "60", "--no-security-headers"]);
    let server = Server::start(&tree, 2, &args, &[("SERVERY_AUTH", &auth)]);
    let (status, _) = server.wait_ready(2, Duration::from_secs(20));
    // The password never reaches a worker's command line: the settings travel in the
    // setup preamble, and the command line only names the worker, which then shows its
    // title in its place (`ps`), and the title's first 15 bytes as its name (`ps -e`).
    for worker in status["workers"].as_array().expect("workers") {
        let pid = worker["pid"].as_u64().expect("pid");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        let cmdline = String::from_utf8_lossy(&cmdline);
        assert!(!cmdline.contains("s3cret"), "{cmdline}");
        let title = format!(
            "servery: worker {} (slot {}, gen 1)",
            worker["id"], worker["slot"]
        );
        assert_eq!(
            cmdline.trim_end_matches('\0'),
            title,
            "a worker is titled in `ps` by its id, slot and generation"
        );
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
        assert_eq!(
            comm.trim_end(),
            "servery: worker",
            "a worker's name in `ps -e`"
        );
    }
    let alice = format!("Authorization: Basic {}\r\n", base64(b"alice:s3cret"));
    let bob = format!("Authorization: Basic {}\r\n", base64(b"bob:pw"));
    // Enough rounds that both workers answer some (each round is a new connection).
    for _ in 0..10 {
        let (code, head, _) = get_with(server.addr, "/hello.txt", "");
        assert_eq!(code, 401, "{head}");
        assert!(head.contains("www-authenticate: basic"), "{head}");
        let (code, _, _) = get_with(server.addr, "/hello.txt", "Authorization: Basic eDp5\r\n");
        assert_eq!(code, 401);

        let (code, head, body) = get_with(server.addr, "/hello.txt", &alice);
        assert_eq!((code, body.as_slice()), (200, HELLO), "{head}");
        assert!(
            head.contains("cache-control: private, max-age=60"),
            "{head}"
        );
        assert!(head.contains("access-control-allow-origin: *"), "{head}");
        assert!(!head.contains("x-content-type-options"), "{head}");

        let (code, head, body) = get_with(
            server.addr,
            "/no/such/page",
            &format!("{bob}Accept: text/html\r\n"),
        );
        assert_eq!((code, body.as_slice()), (200, &b"<p>app</p>"[..]), "{head}");
    }
}

/// The names of `pid`'s threads.
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

/// A file worker whose share of the CPUs is one runs one thread when idle (decision
/// 0124): nothing at start-up takes a thread of the blocking pool, which would then sit
/// out its keep-alive with its stack and its own malloc arena, and small files the page
/// cache holds are served on the runtime thread.
#[test]
fn an_idle_file_worker_with_one_cpu_is_one_thread() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cfg!(not(target_os = "linux")) || cpus > 8 {
        skipped(format!(
            "needs /proc and a worker per CPU ({cpus} CPUs here)"
        ));
        return;
    }
    let tree = Tree::new("one_thread");
    let mut server = Server::start(&tree, cpus as u32, FAST, &[]);
    server.wait_stdout("servery: ready", Duration::from_secs(30));
    let (status, _) = server.wait_ready(cpus, Duration::from_secs(10));
    for _ in 0..10 {
        let (code, body) = http_get(server.addr, "/hello.txt").expect("GET hello");
        assert_eq!((code, body.as_slice()), (200, HELLO));
    }
    for pid in worker_pids(&status) {
        let names = thread_names(pid);
        assert_eq!(
            names.len(),
            1,
            "worker {pid} runs the threads {names:?}: an idle file worker with one CPU's share runs one"
        );
    }
}
