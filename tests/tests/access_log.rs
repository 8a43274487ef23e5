//! The access log against the real binary: four workers and `h2load` produce exactly one
//! whole line per request in every format; under the drop policy with a writer stalled
//! on purpose, written + dropped = requests; SIGUSR1 and `ctl reopen-logs` follow a
//! rotation; the queue drains on stop; a symlink planted at the path is refused before
//! anything binds.

use std::path::Path;
use std::time::Duration;

use servery_tests::serde_json::{self, Value, json};
use servery_tests::{FAST, HELLO, Server, Sig, Tree, run_servery, wait_until};

const REQUESTS: u64 = 10_000;

fn h2load(addr: std::net::SocketAddr) {
    h2load_n(addr, REQUESTS);
}

fn h2load_n(addr: std::net::SocketAddr, requests: u64) {
    servery_tests::h2load_hello(addr, requests, 16);
}

fn log_status(server: &Server) -> Value {
    server.status()["access_log"].clone()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether `line` is a whole line of `format` for a GET of /hello.txt answered 200.
fn well_formed(format: &str, line: &str) -> bool {
    match format {
        "json" => serde_json::from_str::<Value>(line).is_ok_and(|v| {
            v["method"] == "GET" && v["target"] == "/hello.txt" && v["status"] == 200
        }),
        "clf" => {
            line.starts_with("127.0.0.1 - - [")
                && line.ends_with(&format!("\"GET /hello.txt HTTP/1.1\" 200 {}", HELLO.len()))
        }
        _ => {
            line.starts_with("127.0.0.1 - - [")
                && line.contains(&format!(
                    "\"GET /hello.txt HTTP/1.1\" 200 {} \"-\" \"h2load",
                    HELLO.len()
                ))
        }
    }
}

#[test]
fn four_workers_log_exactly_one_whole_line_per_request_in_every_format() {
    for format in ["combined", "clf", "json"] {
        let tree = Tree::new(&format!("alog-{format}"));
        let path = tree.root().with_file_name("access.log");
        let path_arg = path.to_str().expect("utf-8").to_owned();
        let mut args = FAST.to_vec();
        args.extend(["--access-log", &path_arg, "--access-log-format", format]);
        let mut server = Server::start(&tree, 4, &args, &[]);
        server.wait_ready(4, Duration::from_secs(30));
        h2load(server.addr);
        wait_until(Duration::from_secs(10), "every line written", || {
            (log_status(&server)["written"] == REQUESTS).then_some(())
        });
        server.signal(Sig::TERM);
        server.wait_exit(Duration::from_secs(30));
        let lines = lines(&path);
        assert_eq!(lines.len() as u64, REQUESTS, "{format}");
        let bad: Vec<&String> = lines
            .iter()
            .filter(|l| !well_formed(format, l))
            .take(3)
            .collect();
        assert!(bad.is_empty(), "{format}: {bad:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("log").permissions().mode() & 0o777;
        assert_eq!(mode & !0o640, 0, "made with mode 0640 at most: {mode:o}");
    }
}

#[test]
fn with_the_drop_policy_a_stalled_writer_costs_lines_that_are_all_counted() {
    let tree = Tree::new("alog-drop");
    let path = tree.root().with_file_name("access.log");
    let path_arg = path.to_str().expect("utf-8").to_owned();
    let mut args = FAST.to_vec();
    args.extend([
        "--access-log",
        &path_arg,
        "--access-log-overflow",
        "drop",
        "--access-log-queue",
        "2",
    ]);
    let server = Server::start(&tree, 4, &args, &[("SERVERY_TEST_LOG_STALL_MS", "200")]);
    server.wait_ready(4, Duration::from_secs(30));
    h2load(server.addr);
    let (status, _) = wait_until(Duration::from_secs(30), "the queue to drain", || {
        let s = log_status(&server);
        let settled = s["queue"] == 0
            && s["written"].as_u64().unwrap_or(0) + s["dropped"].as_u64().unwrap_or(0) == REQUESTS;
        settled.then_some(s)
    });
    let dropped = status["dropped"].as_u64().unwrap_or(0);
    assert!(
        dropped > 0,
        "a stalled writer with room for 2 batches drops: {status}"
    );
    assert_eq!(lines(&path).len() as u64, REQUESTS - dropped, "{status}");
}

#[test]
fn sigusr1_and_ctl_reopen_logs_follow_a_rotation_and_stop_drains_the_queue() {
    let tree = Tree::new("alog-rotate");
    let path = tree.root().with_file_name("access.log");
    let path_arg = path.to_str().expect("utf-8").to_owned();
    let mut args = FAST.to_vec();
    args.extend(["--access-log", &path_arg]);
    let mut server = Server::start(&tree, 2, &args, &[]);
    server.wait_ready(2, Duration::from_secs(30));
    let get = |n: usize| {
        for _ in 0..n {
            let (status, _) = servery_tests::http_get(server.addr, "/hello.txt").expect("GET");
            assert_eq!(status, 200);
        }
    };
    get(5);
    wait_until(Duration::from_secs(10), "5 lines", || {
        (lines(&path).len() == 5).then_some(())
    });
    let rotated = path.with_extension("log.1");
    std::fs::rename(&path, &rotated).expect("rotate");
    server.signal(Sig::USR1);
    wait_until(Duration::from_secs(10), "the reopen", || {
        (log_status(&server)["reopens"] == 1).then_some(())
    });
    get(3);
    wait_until(Duration::from_secs(10), "3 lines in the new file", || {
        (lines(&path).len() == 3).then_some(())
    });
    std::fs::rename(&path, path.with_extension("log.2")).expect("rotate again");
    assert_eq!(
        server.ctl(&json!({"cmd": "reopen-logs"})).expect("ctl")["ok"],
        true
    );
    wait_until(Duration::from_secs(10), "the second reopen", || {
        (log_status(&server)["reopens"] == 2).then_some(())
    });
    get(4);
    // Stopping right away: the lines still buffered in the workers and queued in the
    // parent are written before it exits.
    server.signal(Sig::TERM);
    server.wait_exit(Duration::from_secs(30));
    assert_eq!(lines(&rotated).len(), 5);
    assert_eq!(lines(&path.with_extension("log.2")).len(), 3);
    assert_eq!(lines(&path).len(), 4);
}

#[test]
fn a_symlink_at_the_log_path_is_a_configuration_error_before_anything_binds() {
    let tree = Tree::new("alog-link");
    let target = tree.root().with_file_name("elsewhere");
    std::fs::write(&target, "precious\n").expect("write");
    let link = tree.root().with_file_name("access.log");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let done = run_servery(
        &[
            tree.root().to_str().expect("utf-8"),
            "--port",
            "0",
            "--access-log",
            link.to_str().expect("utf-8"),
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
    assert!(done.stderr.contains("--access-log"), "{}", done.stderr);
    assert!(!done.stdout.contains("listening"));
    assert_eq!(
        std::fs::read_to_string(&target).expect("intact"),
        "precious\n"
    );
}

#[test]
fn a_worker_killed_with_batches_waiting_leaves_only_whole_lines() {
    let tree = Tree::new("alog-kill");
    let path = tree.root().with_file_name("access.log");
    let path_arg = path.to_str().expect("utf-8").to_owned();
    let mut args = FAST.to_vec();
    args.extend(["--access-log", &path_arg, "--access-log-queue", "1"]);
    // The writer is slow and the queue holds one batch: workers' batches wait in the
    // parent (blocked) when one of them is killed.
    let server = Server::start(&tree, 2, &args, &[("SERVERY_TEST_LOG_STALL_MS", "300")]);
    let (status, _) = server.wait_ready(2, Duration::from_secs(30));
    server.note_pids(&status);
    let victim = servery_tests::worker_pids(&status)[0];
    h2load_n(server.addr, 2000);
    servery_tests::signal_pid(victim, Sig::KILL);
    // Settled: the victim replaced, nothing queued, and the written count unchanged for
    // longer than the stalled writer takes with a batch it was handed (the queue empties
    // when a batch is handed over, before it is written and counted).
    let mut unchanged_since: Option<(Value, std::time::Instant)> = None;
    let (settled, _) = wait_until(Duration::from_secs(60), "the log to settle", || {
        let s = server.status();
        server.note_pids(&s);
        let log = &s["access_log"];
        let pids = servery_tests::worker_pids(&s);
        let quiet = log["queue"] == 0 && pids.len() == 2 && !pids.contains(&victim);
        let written = log["written"].clone();
        match &unchanged_since {
            Some((w, since)) if quiet && *w == written => {
                (since.elapsed() >= Duration::from_secs(1)).then(|| log.clone())
            }
            _ => {
                unchanged_since = quiet.then(|| (written, std::time::Instant::now()));
                None
            }
        }
    });
    let written = settled["written"].as_u64().unwrap_or(0);
    let lost = settled["lost_with_workers"].as_u64().unwrap_or(0);
    let lines = lines(&path);
    assert_eq!(lines.len() as u64, written, "{settled}");
    assert!(written + lost <= 2000, "{settled}");
    let torn: Vec<&String> = lines
        .iter()
        .filter(|l| !well_formed("combined", l))
        .take(3)
        .collect();
    assert!(torn.is_empty(), "whole lines only: {torn:?}");
}
