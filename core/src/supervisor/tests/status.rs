//! What the status reports, and the invariant check.

use super::*;

#[test]
fn status_reports_each_exit_with_its_reason_code() {
    let mut h = harness(Platform::Posix, |r| r.recovery.drain_timeout = 2.0);
    let acts = h.on(Event::Start);
    // Worker 1 prepares but is never committed; worker 2 never prepares.
    h.msg(WorkerId(1), WorkerMessage::Prepared);
    let acts2 = h.on(Event::Command(Command::Stop));
    assert_eq!(
        kills(&acts2),
        vec![WorkerId(1), WorkerId(2)],
        "uncommitted workers are killed, not drained"
    );
    let _ = acts;
    h.on(Event::Exited {
        worker: WorkerId(1),
        status: ExitStatus::Signal(9),
    });
    h.on(Event::Exited {
        worker: WorkerId(2),
        status: ExitStatus::Signal(9),
    });
    assert_eq!(exit_reason(&h, WorkerId(1)), Some(ExitReason::CleanExit));
    assert_eq!(exit_reason(&h, WorkerId(2)), Some(ExitReason::CleanExit));

    let mut h = harness(Platform::Posix, |r| r.recovery.drain_timeout = 2.0);
    let ws = h.start();
    h.on(Event::Command(Command::Stop));
    h.on(Event::Exited {
        worker: ws[1],
        status: ExitStatus::Code(0),
    });
    h.advance(Duration::from_secs(2));
    h.advance(Duration::from_millis(500));
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert_eq!(exit_reason(&h, ws[1]), Some(ExitReason::CleanExit));
    assert_eq!(exit_reason(&h, ws[0]), Some(ExitReason::ForcedTermination));
    assert_eq!(h.sup.status(h.now).recent_exits.len(), 2);
    assert_eq!(
        h.sup.last_exit().map(|e| (e.worker, e.reason)),
        Some((ws[0], ExitReason::ForcedTermination)),
        "the latest reaped is the last exit"
    );
    let order: Vec<WorkerId> = h.sup.recent_exits().map(|e| e.worker).collect();
    assert_eq!(order, [ws[1], ws[0]], "oldest first");
}

#[test]
fn rollouts_are_visible_and_candidates_belong_to_their_generation() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    assert!(!h.sup.rollout_in_flight());
    let next = RawConfig {
        workers: 1,
        ..RawConfig::default()
    };
    h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(next),
    }));
    assert!(h.sup.rollout_in_flight());
    assert_eq!(h.sup.worker_generation(WorkerId(1)), Some(Generation(1)));
    assert_eq!(h.sup.worker_generation(WorkerId(3)), Some(Generation(2)));
    assert_eq!(h.sup.worker_generation(WorkerId(99)), None);
}

#[test]
fn broken_states_are_reported_by_the_invariant_check() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    h.sup.check_invariants().expect("consistent");
    h.sup.state = ServiceState::Failed;
    assert!(
        h.sup.check_invariants().is_err(),
        "failed without a failure record"
    );
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    h.sup.slots[0].respawn_at = Some(h.now);
    assert!(
        h.sup.check_invariants().is_err(),
        "a member and a pending respawn"
    );
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    if let Some(w) = h.sup.workers.get_mut(&ws[1]) {
        w.committed = false;
    }
    assert!(h.sup.check_invariants().is_err(), "ready without commit");
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    if let Some(w) = h.sup.workers.get_mut(&ws[1]) {
        w.slot = Slot(0);
    }
    assert_eq!(
        h.sup.check_invariants(),
        Err("slot 0 has 2 members".to_string()),
        "two members of one slot"
    );
    // A slot naming a worker no longer in the table (reaped without the slot hearing of
    // it), in the first slot and in one the check does not file in its pass.
    for (workers, slot) in [(2, 0), (2, 1), (66, 65)] {
        let mut h = harness(Platform::Posix, |c| c.workers = workers);
        h.start();
        let member = h.sup.slots[slot].member.expect("a member");
        h.sup.workers.remove(&member);
        assert_eq!(
            h.sup.check_invariants(),
            Err(format!("slot {slot} names reaped worker {member}")),
            "a reaped member of slot {slot}"
        );
    }
    // The same, with another worker of that slot alive (a retired one, say): meeting a
    // worker of the slot is not meeting the one the slot names.
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    h.sup.workers.remove(&ws[0]);
    if let Some(w) = h.sup.workers.get_mut(&ws[1]) {
        (w.slot, w.role) = (Slot(0), Role::Retired);
    }
    assert_eq!(
        h.sup.check_invariants(),
        Err(format!("slot 0 names reaped worker {}", ws[0])),
        "a reaped member beside a live worker of its slot"
    );
}

// ----- hangs in every live state -----------------------------------------------------

#[test]
fn the_watch_period_follows_the_tightest_live_worker() {
    // Defaults: heartbeats every 1 s, silence judged at 5 s → (5 − 1) / 2 = 2 s.
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    assert_eq!(h.sup.watch_period(), Some(Duration::from_secs(2)));
    // A reload to a 3 s timeout: while its candidates live beside the old workers, the
    // parent must wake often enough for the tighter of the two, (3 − 1) / 2 = 1 s.
    let mut next = RawConfig {
        workers: 2,
        ..RawConfig::default()
    };
    next.recovery.heartbeat_timeout = 3.0;
    h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(next),
    }));
    assert!(h.sup.rollout_in_flight());
    assert_eq!(h.sup.watch_period(), Some(Duration::from_secs(1)));
    let (due, watch) = h.sup.poll_timeout_and_watch_period();
    assert_eq!((due, watch), (h.sup.poll_timeout(), h.sup.watch_period()));
}

/// Whatever the bound, the earliest of the answer and the bound is the earliest of the
/// deadline and the bound: with the floor kept across heartbeats, and dropped when a beat
/// dated before its worker's last one brings that worker's deadline forward.
#[test]
fn the_deadline_before_a_bound_decides_as_the_deadline_would() {
    let at = |secs: f64| Instant::from_nanos((secs * 1e9) as u64);
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    let check = |h: &mut Harness| {
        let due = h.sup.poll_timeout().expect("live workers have deadlines");
        for bound in [
            None,
            Some(Instant::ZERO),
            Some(Instant::from_nanos(due.as_nanos() - 1)),
            Some(due),
            Some(due + Duration::from_secs(1)),
        ] {
            let answer = h.sup.poll_timeout_before(bound);
            assert_eq!(
                crate::time::earliest(answer, bound),
                crate::time::earliest(Some(due), bound),
                "bound {bound:?}, deadline {due:?}"
            );
        }
    };
    check(&mut h);
    // Both beat at 2 s (silence judged at 7 s), and the floor is worked out there.
    h.now = at(2.0);
    h.beat(0);
    assert_eq!(h.sup.poll_timeout_before(None), Some(at(7.0)));
    // One beats later: its deadline moves on, the other's stays the next.
    h.now = at(3.0);
    beat_one(&mut h, ws[0]);
    check(&mut h);
    assert_eq!(h.sup.poll_timeout_before(Some(at(6.0))), Some(at(7.0)));
    // A beat dated before the last of its worker's brings its deadline forward (6.5 s):
    // the floor no longer holds, and a bound past the new deadline must not hide it.
    h.now = at(1.5);
    beat_one(&mut h, ws[1]);
    assert_eq!(h.sup.poll_timeout(), Some(at(6.5)));
    assert_eq!(h.sup.poll_timeout_before(Some(at(6.8))), Some(at(6.5)));
    check(&mut h);
    h.now = at(3.0);
    h.advance(Duration::from_secs(1));
    check(&mut h);
}

#[test]
fn readiness_follows_the_ready_workers_against_the_configured_and_the_minimum() {
    for (minimum, after_one_crash) in [(1, Readiness::Degraded), (2, Readiness::Unready)] {
        let mut h = harness(Platform::Posix, |r| {
            r.recovery.min_ready_workers = minimum;
            // A long backoff: the crashed slot stays empty while the test looks.
            r.recovery.restart_backoff_initial = 10.0;
        });
        assert_eq!(h.sup.readiness(), Readiness::Unready, "not started");
        let ws = h.start();
        assert_eq!(h.sup.readiness(), Readiness::Ready);
        assert_eq!(
            h.sup.capacity(),
            Capacity {
                ready: 2,
                wanted: 2,
                minimum: minimum as u32
            }
        );
        h.on(Event::Exited {
            worker: ws[0],
            status: ExitStatus::Signal(9),
        });
        assert_eq!(h.sup.capacity().ready, 1);
        assert_eq!(h.sup.readiness(), after_one_crash, "minimum {minimum}");
        h.on(Event::Exited {
            worker: ws[1],
            status: ExitStatus::Signal(9),
        });
        assert_eq!(h.sup.status(h.now).readiness, Readiness::Unready);
        assert_eq!(
            h.sup.state(),
            ServiceState::Ready,
            "still in service, serving nothing"
        );
    }
}

#[test]
fn each_readiness_is_printed_by_its_own_name() {
    let names: Vec<&str> = Readiness::ALL.iter().map(|r| r.name()).collect();
    assert_eq!(
        names,
        ["ready", "degraded", "unready"],
        "readiness name rule: `/status` and the readiness metric's label print these names"
    );
}

#[test]
fn only_an_unready_service_is_refused_traffic() {
    let takes: Vec<bool> = Readiness::ALL.iter().map(|r| r.takes_traffic()).collect();
    assert_eq!(
        takes,
        [true, true, false],
        "readyz rule: ready and degraded answer 200, unready 503"
    );
}

#[test]
fn a_starting_worker_adds_nothing_to_the_capacity() {
    let mut h = harness(Platform::Posix, |_| {});
    h.on(Event::Start);
    assert_eq!(
        h.sup.capacity().ready,
        0,
        "capacity rule: only a ready worker that nothing is ending counts (both are spawning)"
    );
}
