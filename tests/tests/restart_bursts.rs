//! `restart_burst_window` on real processes (decision 0033): four workers killed at once,
//! and their four replacements once more, are two faults against the restart limit with
//! the window and eight without it.

use std::time::Duration;

use servery_tests::*;

const WORKERS: usize = 4;

/// Ready members of the committed generation, none of them in `gone`.
fn fresh_ready(status: &serde_json::Value, gone: &[u32]) -> Option<Vec<u32>> {
    let pids: Vec<u32> = status["workers"]
        .as_array()?
        .iter()
        .filter(|w| w["state"] == "ready" && w["role"] == "member")
        .filter_map(|w| w["pid"].as_u64().map(|p| p as u32))
        .collect();
    (pids.len() == WORKERS && pids.iter().all(|p| !gone.contains(p))).then_some(pids)
}

/// `kill -9` of every worker in `pids`, back to back (well inside a second).
fn kill_all(pids: &[u32]) {
    for &pid in pids {
        signal_pid(pid, Sig::KILL);
    }
}

/// Start four workers with `extra` flags, kill them all, wait for four fresh ready
/// workers, and kill those too. Returns the tree (it must outlive the server), the
/// server and the pids killed.
fn two_waves(name: &str, extra: &[&str]) -> (Tree, Server, Vec<u32>) {
    let tree = Tree::new(name);
    let server = Server::start(&tree, WORKERS as u32, &[FAST, extra].concat(), &[]);
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    let first = worker_pids(&status);
    assert_eq!(first.len(), WORKERS, "{status}");
    kill_all(&first);
    let bound = BACKOFF_INITIAL + START_MARGIN * 2;
    let (second, took) = wait_until(bound, "four replacements ready", || {
        fresh_ready(&server.status(), &first)
    });
    eprintln!("MEASURED four workers killed → four replacements ready in {took:?}");
    kill_all(&second);
    (tree, server, [first, second].concat())
}

#[test]
fn with_a_burst_window_two_waves_of_four_crashes_keep_the_service_ready() {
    let (_tree, server, killed) = two_waves("burst-on", &["--restart-burst-window", "1"]);
    // Twice the backoff of a second crash in a row, then a start.
    let bound = BACKOFF_INITIAL * 2 + START_MARGIN * 2;
    let (status, took) = wait_until(bound, "four more replacements ready", || {
        let s = server.status();
        fresh_ready(&s, &killed).map(|_| s)
    });
    eprintln!("MEASURED second wave → four replacements ready in {took:?}");
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["restarts"], 8, "{status}");
    assert_eq!(
        status["config"]["recovery"]["restart_burst_window"], 1.0,
        "{status}"
    );
}

#[test]
fn without_a_burst_window_the_second_wave_exceeds_the_restart_limit() {
    let (_tree, mut server, _) = two_waves("burst-off", &[]);
    let bound = DRAIN_TIMEOUT + FORCE_TIMEOUT + START_MARGIN;
    let (exit, took) = server.wait_exit(bound);
    eprintln!("MEASURED second wave without bursts → exit {exit:?} in {took:?}");
    assert_eq!(exit.code(), Some(4), "stderr:\n{}", server.stderr());
    assert!(
        server.stderr().contains("restart_limit_exceeded"),
        "{}",
        server.stderr()
    );
}
