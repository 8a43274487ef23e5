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

/// Pids in `status` that are not in `gone`: the replacements spawned so far.
fn spawned_since(status: &serde_json::Value, gone: &[u32]) -> usize {
    worker_pids(status)
        .iter()
        .filter(|p| !gone.contains(p))
        .count()
}

/// `--restart-backoff-shared` on real processes (decision 0107): four workers killed
/// at once, none of them stable, grow one backoff for the pool, so the k-th replacement
/// waits 2^(k−1) × the initial delay after its crash (0.1, 0.2, 0.4, 0.8 s) instead of
/// all four waiting 0.1 s. Each crash is seen after the kills, so no status answered
/// sooner than 0.8 s after the first kill can show the fourth replacement: a bound the
/// rule guarantees, whatever the machine's load, checked on every status that came
/// back in time; then the four replacements are waited for.
#[test]
fn a_shared_backoff_staggers_a_burst_of_unstable_restarts() {
    let tree = Tree::new("backoff-shared");
    let server = Server::start(
        &tree,
        WORKERS as u32,
        &[FAST, &["--restart-backoff-shared"]].concat(),
        &[],
    );
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    assert_eq!(
        status["config"]["recovery"]["restart_backoff_shared"], true,
        "{status}"
    );
    let first = worker_pids(&status);
    assert_eq!(first.len(), WORKERS, "{status}");
    let killed_at = std::time::Instant::now();
    kill_all(&first);
    let fourth_not_before = BACKOFF_INITIAL * 8;
    let mut checked = 0;
    loop {
        let s = server.status();
        if killed_at.elapsed() >= fourth_not_before {
            break;
        }
        checked += 1;
        assert!(
            spawned_since(&s, &first) < WORKERS,
            "shared backoff rule: the fourth replacement waits the pool's 0.8 s, but a \
             status {:?} after the kills shows {WORKERS} new workers: {:?}",
            killed_at.elapsed(),
            s["workers"].as_array().map(|ws| ws
                .iter()
                .map(|w| (w["slot"].clone(), w["state"].clone(), w["age_ms"].clone()))
                .collect::<Vec<_>>())
        );
    }
    let bound = fourth_not_before + START_MARGIN * 2;
    let (status, took) = wait_until(bound, "four replacements ready", || {
        let s = server.status();
        fresh_ready(&s, &first).map(|_| s)
    });
    eprintln!(
        "MEASURED shared backoff: four replacements ready in {took:?} ({checked} early statuses checked)"
    );
    assert_eq!(status["restarts"], 4, "{status}");
}
