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
