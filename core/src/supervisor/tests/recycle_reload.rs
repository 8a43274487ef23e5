//! Recycling (age, requests, manual, failures) and reloads, and how they wait for each other.

use super::*;

#[test]
fn request_recycling_replaces_before_draining_and_never_exceeds_n_plus_one() {
    let mut h = harness(Platform::Posix, |r| {
        r.recovery.max_requests_per_worker = 10;
        r.recovery.max_requests_jitter = 0.0;
    });
    let ws = h.start();
    let acts = h.msg(
        ws[0],
        WorkerMessage::Heartbeat {
            requests: 9,
            connections: 0,
            requests_in_progress: 0,
            memory: 0,
            stats: Default::default(),
        },
    );
    assert_eq!(spawns(&acts), 0);
    let acts = h.msg(
        ws[0],
        WorkerMessage::Heartbeat {
            requests: 10,
            connections: 0,
            requests_in_progress: 0,
            memory: 0,
            stats: Default::default(),
        },
    );
    assert_eq!(spawns(&acts), 1);
    assert!(h.sup.recycle_in_flight());
    // The second worker is due too, but waits: one recycle at a time.
    let acts = h.msg(
        ws[1],
        WorkerMessage::Heartbeat {
            requests: 50,
            connections: 0,
            requests_in_progress: 0,
            memory: 0,
            stats: Default::default(),
        },
    );
    assert_eq!(spawns(&acts), 0);
    assert_eq!(h.sup.live_workers(), 3);
    let rep = WorkerId(3);
    h.on(Event::Spawned {
        worker: rep,
        pid: 7,
    });
    let acts = h.msg(rep, WorkerMessage::Prepared);
    assert!(acts.contains(&Action::Send {
        worker: rep,
        message: ParentMessage::Commit
    }));
    assert!(!acts.iter().any(|a| matches!(
        a,
        Action::Send {
            message: ParentMessage::Drain { .. },
            ..
        }
    )));
    let acts = h.msg(rep, WorkerMessage::Ready);
    assert!(acts.contains(&Action::Send {
        worker: ws[0],
        message: ParentMessage::Drain { deadline_ms: 3000 }
    }));
    let acts = h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Code(0),
    });
    assert!(
        !h.sup.recycle_in_flight() || spawns(&acts) == 1,
        "the next recycle starts after the reap"
    );
    assert_eq!(spawns(&acts), 1, "the second worker's recycle starts");
    assert!(h.sup.last_failure().is_none(), "recycling is not a failure");
}

fn beat_with_memory(memory: u64) -> WorkerMessage {
    WorkerMessage::Heartbeat {
        requests: 1,
        connections: 0,
        requests_in_progress: 0,
        memory,
        stats: Default::default(),
    }
}

#[test]
fn memory_that_stays_above_the_limit_recycles_and_a_passing_peak_does_not() {
    const MAX: u64 = 64 << 20;
    let mut h = harness(Platform::Posix, |r| {
        r.workers = 1;
        r.recovery.worker_max_rss = MAX as i64;
    });
    let ws = h.start();
    // Above once, then below: a passing peak.
    assert_eq!(
        spawns(&h.msg(ws[0], beat_with_memory(MAX + 1))),
        0,
        "memory rule: a single beat above worker_max_rss must not recycle"
    );
    assert_eq!(
        spawns(&h.msg(ws[0], beat_with_memory(MAX - 1))),
        0,
        "memory rule: one beat above the limit then one below must not recycle"
    );
    assert_eq!(spawns(&h.msg(ws[0], beat_with_memory(MAX + 1))), 0);
    assert_eq!(
        spawns(&h.msg(ws[0], beat_with_memory(MAX))),
        0,
        "at the limit is not above"
    );
    assert_eq!(spawns(&h.msg(ws[0], beat_with_memory(MAX + 1))), 0);
    // Above at two beats in a row: a zero-downtime recycle, replacement first.
    let acts = h.msg(ws[0], beat_with_memory(2 * MAX));
    assert_eq!(
        spawns(&acts),
        1,
        "memory rule: two beats in a row above worker_max_rss must start a recycle"
    );
    assert!(h.sup.recycle_in_flight());
    assert_eq!(h.sup.live_workers(), 2, "never more than N + 1");
    let rep = WorkerId(2);
    h.on(Event::Spawned {
        worker: rep,
        pid: 7,
    });
    h.msg(rep, WorkerMessage::Prepared);
    let acts = h.msg(rep, WorkerMessage::Ready);
    assert!(
        acts.contains(&Action::Send {
            worker: ws[0],
            message: ParentMessage::Drain { deadline_ms: 3000 }
        }),
        "the old worker drains once its replacement is ready"
    );
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Code(0),
    });
    assert!(h.sup.last_failure().is_none(), "recycling is not a failure");
    let status = h.sup.status(h.now);
    assert!(
        status
            .recent_exits
            .iter()
            .any(|e| e.worker == ws[0] && e.reason == ExitReason::RecycleMemory),
        "ended as recycle_memory: {:?}",
        status.recent_exits
    );
}

#[test]
fn without_a_memory_limit_no_amount_of_memory_recycles() {
    let mut h = harness(Platform::Posix, |r| r.workers = 1);
    let ws = h.start();
    for _ in 0..5 {
        assert_eq!(spawns(&h.msg(ws[0], beat_with_memory(u64::MAX))), 0);
    }
}

#[test]
fn failed_recycle_replacements_suspend_recycling_and_keep_the_old_worker() {
    let mut h = harness(Platform::Posix, |r| {
        r.workers = 1;
        r.recovery.max_requests_per_worker = 5;
        r.recovery.max_requests_jitter = 0.0;
        r.recovery.recycle_retry_limit = 2;
    });
    let ws = h.start();
    h.msg(
        ws[0],
        WorkerMessage::Heartbeat {
            requests: 5,
            connections: 0,
            requests_in_progress: 0,
            memory: 0,
            stats: Default::default(),
        },
    );
    let rep = WorkerId(2);
    h.msg(rep, WorkerMessage::StartupFailed { error: "no".into() });
    let acts = h.on(Event::Exited {
        worker: rep,
        status: ExitStatus::Code(1),
    });
    assert_eq!(spawns(&acts), 0);
    assert!(h.sup.recycling_suspended().is_none());
    let acts = h.advance(Duration::from_millis(249));
    assert_eq!(spawns(&acts), 0, "no retry before the backoff");
    let acts = h.advance(Duration::from_millis(1));
    assert_eq!(spawns(&acts), 1, "retry after backoff");
    let rep2 = WorkerId(3);
    h.msg(
        rep2,
        WorkerMessage::StartupFailed {
            error: "still no".into(),
        },
    );
    let acts = h.on(Event::Exited {
        worker: rep2,
        status: ExitStatus::Code(1),
    });
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::RecyclingSuspended { .. }))
    );
    let why = h.sup.recycling_suspended().expect("suspended");
    assert!(why.contains("still no"), "{why}");
    assert_eq!(h.sup.ready_workers(), 1, "the old worker keeps serving");
    assert_eq!(
        h.sup.status(h.now).restarts,
        0,
        "recycle failures are not restarts"
    );
    // ctl recycle clears the suspension and tries again.
    let acts = h.on(Event::Command(Command::Recycle));
    assert_eq!(spawns(&acts), 1);
    assert!(h.sup.recycling_suspended().is_none());
}

#[test]
fn manual_recycle_only_when_ready() {
    let mut h = harness(Platform::Posix, |_| {});
    let acts = h.on(Event::Start);
    assert_eq!(
        spawns(&h.on(Event::Command(Command::Recycle))),
        0,
        "no recycle while starting"
    );
    h.boot(&acts);
    let acts = h.on(Event::Command(Command::Recycle));
    assert_eq!(spawns(&acts), 1);
    h.on(Event::Command(Command::Stop));
    assert_eq!(
        spawns(&h.on(Event::Command(Command::Recycle))),
        0,
        "no recycle while stopping"
    );
}

#[test]
fn a_reload_during_a_recycle_waits_for_it() {
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    h.on(Event::Command(Command::Recycle));
    let mut next = RawConfig {
        workers: 3,
        ..RawConfig::default()
    };
    next.recovery.drain_timeout = 3.0;
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(next),
    }));
    assert_eq!(
        spawns(&acts),
        0,
        "the reload waits for the recycle in flight"
    );
    assert!(h.sup.status(h.now).reload_in_flight);
    let rep = WorkerId(3);
    h.boot(&[Action::Spawn {
        worker: rep,
        slot: Slot(0),
        generation: Generation(1),
        config: Box::new(h.sup.config().clone()),
        cpus: None,
    }]);
    let acts = h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Code(0),
    });
    assert_eq!(
        spawns(&acts),
        3,
        "the reload's generation starts once the recycle ends"
    );
    let acts = h.boot(&acts);
    assert!(
        acts.iter().any(|a| matches!(
            a,
            Action::GenerationCommitted {
                generation: Generation(2),
                reload: Some(ReloadId(1)),
                ..
            }
        )),
        "the commit names the reload it answers"
    );
    assert_eq!(h.sup.generation(), Generation(2));
    assert_eq!(h.sup.config().workers(), 3);
}

#[test]
fn every_spawn_carries_the_configuration_its_worker_starts_with() {
    let mut h = harness(Platform::Posix, |_| {});
    let workers = h.start().len();
    let mut next = RawConfig {
        workers: workers as i64,
        ..RawConfig::default()
    };
    next.budgets.max_connections = 77;
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(9),
        config: Box::new(next),
    }));
    let configs: Vec<u32> = acts
        .iter()
        .filter_map(|a| match a {
            Action::Spawn { config, .. } => Some(config.budgets().max_connections()),
            _ => None,
        })
        .collect();
    assert_eq!(
        configs,
        vec![77; workers],
        "candidates start under the reload's budgets"
    );
    assert_eq!(
        h.sup.config().budgets().max_connections(),
        1024,
        "the committed generation keeps its own until the commit"
    );
}

#[test]
fn a_stop_answers_the_reload_it_cuts_short() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    h.on(Event::Command(Command::Recycle));
    h.on(Event::Command(Command::Reload {
        id: ReloadId(4),
        config: Box::new(RawConfig::default()),
    }));
    let acts = h.on(Event::Command(Command::Stop));
    assert!(
        acts.iter().any(|a| matches!(
            a,
            Action::ReloadRejected { reload: ReloadId(4), message } if message.contains("stopping")
        )),
        "{acts:?}"
    );
}

#[test]
fn an_invalid_reload_changes_nothing_and_says_why() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    let mut bad = RawConfig::default();
    bad.recovery.heartbeat_timeout = 0.5;
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(bad),
    }));
    let message = acts.iter().find_map(|a| match a {
        Action::ReloadRejected {
            reload: ReloadId(1),
            message,
        } => Some(message.clone()),
        _ => None,
    });
    assert!(
        message
            .expect("rejected")
            .contains("recovery.heartbeat_timeout")
    );
    assert_eq!(spawns(&acts), 0);
    assert_eq!(h.sup.generation(), Generation(1));
    assert!(h.sup.status(h.now).last_reload_error.is_some());
}

#[test]
fn reload_candidates_live_by_the_new_configuration() {
    let mut h = harness(Platform::Posix, |r| {
        r.recovery.heartbeat_interval = 1.0;
        r.recovery.heartbeat_timeout = 3.0;
    });
    h.start();
    let mut next = RawConfig {
        workers: 1,
        ..RawConfig::default()
    };
    next.recovery.heartbeat_interval = 0.1;
    next.recovery.heartbeat_timeout = 0.5;
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(next),
    }));
    let hello = acts.iter().find_map(|a| match a {
        Action::Send {
            message:
                ParentMessage::Hello {
                    heartbeat_interval_ms,
                    ..
                },
            ..
        } => Some(*heartbeat_interval_ms),
        _ => None,
    });
    assert_eq!(hello, Some(100), "the candidate beats at the new interval");
    let candidate = WorkerId(3);
    h.boot(&acts);
    assert_eq!(h.sup.generation(), Generation(2));
    let acts = h.advance(Duration::from_millis(500));
    assert_eq!(
        terms(&acts),
        vec![candidate],
        "and is judged by the new timeout"
    );
}

#[test]
fn no_recycle_starts_while_a_reload_rolls_out() {
    let mut h = harness(Platform::Posix, |r| {
        r.recovery.max_requests_per_worker = 10;
        r.recovery.max_requests_jitter = 0.0;
    });
    let ws = h.start();
    assert!(
        !h.sup.status(h.now).reload_in_flight,
        "the first start is not a reload"
    );
    let mut next = RawConfig {
        workers: 2,
        ..RawConfig::default()
    };
    next.recovery.max_requests_per_worker = 10;
    next.recovery.max_requests_jitter = 0.0;
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(next),
    }));
    assert_eq!(spawns(&acts), 2);
    assert!(h.sup.status(h.now).reload_in_flight);
    let acts = h.msg(
        ws[0],
        WorkerMessage::Heartbeat {
            requests: 50,
            connections: 0,
            requests_in_progress: 0,
            memory: 0,
            stats: Default::default(),
        },
    );
    assert_eq!(spawns(&acts), 0, "no recycle during a rollout");
    assert!(!h.sup.recycle_in_flight());
    assert_eq!(
        h.sup.serving_workers(),
        2,
        "candidates do not serve slots yet"
    );
}

#[test]
fn serving_workers_count_the_recycle_overlap() {
    let mut h = harness(Platform::Posix, |r| {
        r.recovery.max_requests_per_worker = 10;
        r.recovery.max_requests_jitter = 0.0;
    });
    let ws = h.start();
    assert_eq!(h.sup.serving_workers(), 2);
    h.msg(
        ws[0],
        WorkerMessage::Heartbeat {
            requests: 10,
            connections: 0,
            requests_in_progress: 0,
            memory: 0,
            stats: Default::default(),
        },
    );
    assert_eq!(h.sup.serving_workers(), 3, "N + 1 during a recycle");
}

#[test]
fn a_resize_reloads_with_the_committed_count_changed_and_never_below_one() {
    let mut h = harness(Platform::Posix, |c| c.workers = 1);
    h.start();
    // The configuration a signal's reload reads again says 1 worker; the resize counts
    // from the committed generation's, whatever the file says.
    let from_file = || {
        let mut raw = RawConfig {
            workers: 1,
            ..RawConfig::default()
        };
        raw.recovery.drain_timeout = 3.0;
        Box::new(raw)
    };
    let acts = h.on(Event::Command(Command::Resize {
        id: ReloadId(1),
        config: from_file(),
        by: 1,
    }));
    assert_eq!(spawns(&acts), 2, "a generation of two");
    h.boot(&acts);
    assert_eq!(h.sup.config().workers(), 2);
    let acts = h.on(Event::Command(Command::Resize {
        id: ReloadId(2),
        config: from_file(),
        by: 1,
    }));
    assert_eq!(spawns(&acts), 3, "two and one more");
    h.boot(&acts);
    assert_eq!(h.sup.config().workers(), 3);

    let mut one = harness(Platform::Posix, |c| c.workers = 1);
    one.start();
    let acts = one.on(Event::Command(Command::Resize {
        id: ReloadId(3),
        config: from_file(),
        by: -1,
    }));
    assert_eq!(spawns(&acts), 0);
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::ReloadRejected { reload, message }
            if *reload == ReloadId(3) && message.contains("one worker at least"))),
        "{acts:?}"
    );
    assert_eq!(one.sup.config().workers(), 1);
}

#[test]
fn a_second_interrupt_kills_the_draining_workers_and_the_stop_completes() {
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    let first = h.on(Event::Command(Command::Interrupt));
    assert!(
        !first.iter().any(|a| matches!(a, Action::Kill { .. })),
        "the first interrupt drains: {first:?}"
    );
    let second = h.on(Event::Command(Command::Interrupt));
    for w in &ws {
        assert!(
            second.contains(&Action::Kill { worker: *w }),
            "{w:?} killed at once: {second:?}"
        );
    }
    let mut last = Vec::new();
    for w in &ws {
        last = h.on(Event::Exited {
            worker: *w,
            status: ExitStatus::Signal(9),
        });
    }
    assert!(
        last.iter().any(|a| matches!(a, Action::Exit { code: 0 })),
        "the service exits as stopped: {last:?}"
    );
}
