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

/// Seconds of the day of a log line's timestamp (`2026-12-07T19:51:26.699074Z …`).
fn log_seconds(line: &str) -> Option<f64> {
    let stamp = line.split_whitespace().next()?;
    let time = stamp.split_once('T')?.1.strip_suffix('Z')?;
    let mut parts = time.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
}

/// For each worker exit in the parent's log, the wait until the next worker's spawn.
fn waits_after_exits(log: &str) -> Vec<f64> {
    let mut waits = Vec::new();
    let mut exited: Option<f64> = None;
    for line in log.lines() {
        if line.contains("event=\"worker_exit\"") {
            exited = log_seconds(line);
        } else if line.contains("event=\"spawn\"")
            && let (Some(at), Some(spawned)) = (exited.take(), log_seconds(line))
        {
            // Across midnight the clock's seconds start again.
            waits.push((spawned - at).rem_euclid(86_400.0));
        }
    }
    waits
}

/// `--restart-backoff-keep-one` on real processes (decision 0107): the lone worker of a
/// pool killed again and again, never stable, would wait its slot's doubling delay (0.1,
/// 0.2, 0.4, 0.8, 1.6, 3.2 s); with the option each crash that leaves no worker is
/// replaced after the initial 0.1 s. The waits are read from the parent's own log (the
/// exit, then the replacement's spawn), so the time a debug build takes to start does
/// not count; the bound, half of what the slot's delay would be, is 16 times the rule's
/// wait.
#[test]
fn keep_one_replaces_the_last_worker_after_the_initial_delay() {
    const KILLS: usize = 6;
    let tree = Tree::new("backoff-keep-one");
    let args = [
        FAST,
        &[
            "--restart-backoff-keep-one",
            "--restart-stable-period",
            "60",
            "--restart-backoff-max",
            "30",
            "--worker-restart-limit",
            "100",
        ],
    ]
    .concat();
    let server = Server::start(&tree, 1, &args, &[]);
    let (status, _) = server.wait_ready(1, Duration::from_secs(20));
    assert_eq!(
        status["config"]["recovery"]["restart_backoff_keep_one"], true,
        "{status}"
    );
    let mut gone = Vec::new();
    for kill in 1..=KILLS {
        let (status, _) = wait_until(START_MARGIN * 2, "a fresh worker ready", || {
            let s = server.status();
            let ready: Vec<u32> = s["workers"]
                .as_array()?
                .iter()
                .filter(|w| w["state"] == "ready")
                .filter_map(|w| w["pid"].as_u64().map(|p| p as u32))
                .filter(|p| !gone.contains(p))
                .collect();
            (ready.len() == 1).then_some(s)
        });
        let pid = worker_pids(&status)[0];
        signal_pid(pid, Sig::KILL);
        gone.push(pid);
        eprintln!("kill {kill} of {KILLS}: worker {pid}");
    }
    wait_until(START_MARGIN * 2, "the last replacement spawned", || {
        (waits_after_exits(&server.stderr()).len() == KILLS).then_some(())
    });
    let waits = waits_after_exits(&server.stderr());
    eprintln!("MEASURED keep-one: waits after each crash {waits:?} s");
    let slot_delay = BACKOFF_INITIAL.as_secs_f64() * f64::from(1 << (KILLS - 1));
    let last = waits[KILLS - 1];
    assert!(
        last >= BACKOFF_INITIAL.as_secs_f64() - 0.005,
        "keep-one rule: the last worker's replacement still waits the initial delay, not {last} s"
    );
    assert!(
        last < slot_delay / 2.0,
        "keep-one rule: the pool's last worker is replaced after the initial {:?}, not its \
         slot's grown delay ({slot_delay} s): waited {last} s (waits {waits:?})",
        BACKOFF_INITIAL
    );
}
