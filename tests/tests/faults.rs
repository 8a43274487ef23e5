//! Real faults against real processes: a killed worker under load, a stopped (hung)
//! worker, a crash loop, crash replacement disabled, and startup failures.

use std::time::{Duration, Instant};

use servery_tests::*;

/// Ready workers of the committed generation, as (slot, pid).
fn ready_members(status: &serde_json::Value) -> Vec<(u64, u32)> {
    status["workers"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter(|w| w["state"] == "ready" && w["role"] == "member")
                .filter_map(|w| Some((w["slot"].as_u64()?, w["pid"].as_u64()? as u32)))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_killed_worker_is_replaced_under_load_losing_at_most_its_in_flight_requests() {
    const WORKERS: usize = 2;
    const CLIENTS: usize = 2;
    let tree = Tree::new("kill9");
    let server = Server::start(&tree, WORKERS as u32, FAST, &[]);
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    let victim = worker_pids(&status)[0];

    let load = Load::start(server.addr, "/hello.txt", HELLO, CLIENTS);
    load.wait_for_more(100, Duration::from_secs(20));
    signal_pid(victim, Sig::KILL);
    let bound = BACKOFF_INITIAL + START_MARGIN;
    let (_, replaced) = wait_until(
        bound,
        "a replacement READY in the killed worker's slot",
        || {
            let s = server.status();
            let members = ready_members(&s);
            (members.len() == WORKERS && members.iter().all(|(_, pid)| *pid != victim)).then_some(s)
        },
    );
    assert!(!alive(victim), "the killed worker was reaped");
    load.wait_for_more(100, Duration::from_secs(20));
    let report = load.stop();

    let status = server.status();
    eprintln!(
        "MEASURED kill -9 → replacement READY in {replaced:?} (bound {bound:?}, backoff {BACKOFF_INITIAL:?}); \
         {} ok, {} failed of {:?} of load: {:?}",
        report.ok, report.failed, report.elapsed, report.failures
    );
    assert_eq!(status["restarts"], 1, "{status}");
    assert_eq!(
        status["last_failure"]["reason"], "unexpected_exit",
        "{status}"
    );
    // Which signal ended it, by name, in the JSON and in `ctl status`'s text.
    let message = status["last_failure"]["message"].as_str().unwrap_or("");
    assert!(
        message.ends_with("exited with signal 9 (SIGKILL)"),
        "{status}"
    );
    let socket = tree.socket();
    let socket = socket.to_string_lossy();
    let text = run_servery(
        &["ctl", "--socket", &socket, "status"],
        &[],
        Duration::from_secs(10),
    );
    assert!(
        text.stdout.contains("unexpected_exit: ") && text.stdout.contains("signal 9 (SIGKILL)"),
        "{}{}",
        text.stdout,
        text.stderr
    );
    // Only connections the victim had already accepted can fail: at most one per client
    // (each client has one request in flight at a time).
    assert!(
        report.failed <= CLIENTS as u64,
        "{} failed requests, more than the {CLIENTS} that could be in flight: {:?}",
        report.failed,
        report.failures
    );
}

#[test]
fn a_stopped_worker_is_detected_by_heartbeat_and_replaced() {
    const WORKERS: usize = 2;
    let tree = Tree::new("sigstop");
    let server = Server::start(&tree, WORKERS as u32, FAST, &[]);
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    let victim = worker_pids(&status)[1];
    signal_pid(victim, Sig::STOP);
    // Silence is noticed after heartbeat_timeout, TERM cannot reach a stopped process,
    // KILL follows force_timeout later, then the backoff and a fresh start.
    let bound = HEARTBEAT_TIMEOUT + FORCE_TIMEOUT + BACKOFF_INITIAL + START_MARGIN;
    let (status, took) = wait_until(bound, "the hung worker replaced", || {
        let s = server.status();
        let members = ready_members(&s);
        let replaced = members.len() == WORKERS && members.iter().all(|(_, pid)| *pid != victim);
        (replaced && s["last_failure"]["reason"] == "health_failure").then_some(s)
    });
    eprintln!("MEASURED SIGSTOP → replacement READY in {took:?} (bound {bound:?})");
    assert!(!alive(victim), "the hung worker was killed and reaped");
    let message = status["last_failure"]["message"].as_str().unwrap_or("");
    assert!(message.contains("heartbeat"), "{status}");
    assert_eq!(status["restarts"], 1, "{status}");
    let (code, body) = http_get(server.addr, "/hello.txt").expect("still serving");
    assert_eq!((code, body.as_slice()), (200, HELLO));
}

/// Σ backoff over `limit` restarts, each followed by a start, then the final drain.
fn crash_loop_bound(limit: u32) -> Duration {
    let backoffs: Duration = (0..limit).map(|n| BACKOFF_INITIAL * 2u32.pow(n)).sum();
    backoffs + START_MARGIN * (limit + 1) + DRAIN_TIMEOUT + FORCE_TIMEOUT
}

#[test]
fn a_crash_loop_under_load_fails_the_service_with_exit_code_4() {
    let tree = Tree::new("crashloop");
    let mut server = Server::start(
        &tree,
        1,
        FAST,
        &[("SERVERY_TEST_FAULT", "crash-after-requests=1")],
    );
    let load = Load::start(server.addr, "/hello.txt", HELLO, 2);
    let bound = crash_loop_bound(5);
    let (status, took) = server.wait_exit(bound);
    let report = load.stop();
    eprintln!(
        "MEASURED crash loop (limit 5) → exit {:?} {took:?} after spawn (bound {bound:?}); load {} ok / {} failed",
        status.code(),
        report.ok,
        report.failed
    );
    assert_eq!(status.code(), Some(4), "stderr:\n{}", server.stderr());
    let stderr = server.stderr();
    assert!(stderr.contains("restart_limit_exceeded"), "{stderr}");
    assert!(
        report.ok >= 6,
        "each of the 6 workers served its one request: {report:?}"
    );
    assert!(!tree.socket().exists(), "control socket removed on exit");
}

#[test]
fn with_restarts_disabled_the_first_crash_fails_the_service() {
    let tree = Tree::new("nolimit");
    let mut server = Server::start(
        &tree,
        2,
        &[FAST, &["--worker-restart-limit", "0"]].concat(),
        &[("SERVERY_TEST_FAULT", "crash-after-requests=1")],
    );
    server.wait_ready(2, Duration::from_secs(20));
    let load = Load::start(server.addr, "/hello.txt", HELLO, 1);
    let bound = START_MARGIN + DRAIN_TIMEOUT + FORCE_TIMEOUT;
    let (status, took) = server.wait_exit(bound);
    let report = load.stop();
    eprintln!(
        "MEASURED restart limit 0 → exit {:?} {took:?} after spawn",
        status.code()
    );
    assert_eq!(status.code(), Some(4), "stderr:\n{}", server.stderr());
    assert!(
        server.stderr().contains("restarts_disabled"),
        "{}",
        server.stderr()
    );
    assert!(report.ok >= 1, "{report:?}");
}

#[test]
fn a_startup_failure_of_the_first_generation_exits_3_with_the_workers_words() {
    let tree = Tree::new("failstart");
    let mut server = Server::start(&tree, 2, FAST, &[("SERVERY_TEST_FAULT", "fail-startup")]);
    let (status, took) = server.wait_exit(START_MARGIN + DRAIN_TIMEOUT + FORCE_TIMEOUT);
    eprintln!(
        "MEASURED fail-startup → exit {:?} {took:?} after spawn",
        status.code()
    );
    assert_eq!(status.code(), Some(3), "stderr:\n{}", server.stderr());
    let stderr = server.stderr();
    assert!(
        stderr.contains("service failed (startup_failure)"),
        "{stderr}"
    );
    assert!(stderr.contains("this worker refuses to start"), "{stderr}");
    assert!(
        !server
            .stdout()
            .iter()
            .any(|l| l.starts_with("servery: ready")),
        "nothing half-started reports ready"
    );
}

#[test]
fn a_worker_that_exits_at_start_fails_the_first_generation() {
    let tree = Tree::new("exitstart");
    let mut server = Server::start(&tree, 1, FAST, &[("SERVERY_TEST_FAULT", "exit-at-start")]);
    let (status, _) = server.wait_exit(START_MARGIN + DRAIN_TIMEOUT + FORCE_TIMEOUT);
    assert_eq!(status.code(), Some(3), "stderr:\n{}", server.stderr());
}

#[test]
fn a_parent_stopped_past_the_heartbeat_timeout_does_not_kill_healthy_workers() {
    // The workers kept beating while the parent was stopped; their beats wait in the
    // control channels. On resuming, the parent must read them before judging deadlines.
    const WORKERS: usize = 2;
    let tree = Tree::new("parentstop");
    let server = Server::start(&tree, WORKERS as u32, FAST, &[]);
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    let pids = worker_pids(&status);
    server.signal(Sig::STOP);
    let stopped = Instant::now();
    // A status request queued while the parent is stopped reaches it on resuming, next to
    // the unread heartbeats: answering it must not judge deadlines before reading them.
    let queued_status = std::thread::scope(|scope| {
        let pending = scope.spawn(|| server.ctl(&serde_json::json!({"cmd": "status"})));
        // Twice the heartbeat timeout, measured against the wall clock.
        while stopped.elapsed() < HEARTBEAT_TIMEOUT * 2 {
            std::thread::sleep(Duration::from_millis(50));
        }
        server.signal(Sig::CONT);
        pending.join().expect("status thread")
    });
    let queued_status = queued_status.expect("the status queued during the stop is answered");
    assert_eq!(
        queued_status["status"]["restarts"], 0,
        "a healthy worker was replaced: {queued_status}"
    );
    // Give the resumed parent a few heartbeat intervals to act on what it sees.
    let settle = Instant::now();
    let mut last = server.status();
    while settle.elapsed() < Duration::from_secs(1) {
        last = server.status();
        assert_eq!(last["restarts"], 0, "a healthy worker was replaced: {last}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(worker_pids(&last), pids, "{last}");
    let (code, body) = http_get(server.addr, "/hello.txt").expect("still serving");
    assert_eq!((code, body.as_slice()), (200, HELLO));
}
