//! Heartbeats judged in every live state: prepared, and draining (decision 0013).

use super::*;

#[test]
fn a_prepared_worker_that_stops_beating_is_a_startup_failure_killed_at_once() {
    let mut h = harness(Platform::Posix, |r| {
        r.recovery.heartbeat_interval = 1.0;
        r.recovery.heartbeat_timeout = 5.0;
    });
    h.on(Event::Start);
    // w1 prepares and waits for its quorum; w2 is still preparing (a slow boot).
    let (w1, w2) = (WorkerId(1), WorkerId(2));
    h.msg(w1, WorkerMessage::Prepared);
    h.advance(Duration::from_secs(4));
    beat_one(&mut h, w1);
    let acts = h.advance(Duration::from_millis(4999));
    assert!(
        kills(&acts).is_empty(),
        "a prepared worker that beats waits for its quorum"
    );
    let acts = h.advance(Duration::from_millis(1));
    assert_eq!(kills(&acts), vec![w1], "silent for heartbeat_timeout");
    assert!(terms(&acts).is_empty(), "it serves nothing yet: no TERM");
    let failure = h.sup.last_failure().expect("recorded");
    assert_eq!(
        (failure.worker, failure.reason),
        (w1, ExitReason::StartupFailure)
    );
    assert!(
        failure.message.contains("while prepared"),
        "{}",
        failure.message
    );
    h.on(Event::Exited {
        worker: w1,
        status: ExitStatus::Signal(9),
    });
    assert_eq!(
        h.sup.state(),
        ServiceState::Failed,
        "a first-generation startup failure fails the service"
    );
    assert_eq!(exit_reason(&h, w1), Some(ExitReason::StartupFailure));
    assert_eq!(kills(&h.actions()), Vec::<WorkerId>::new());
    assert!(h.sup.is_connected(w2), "w2 was never judged by beats");
}

/// The hardening issue's case: `--workers 1 --heartbeat-interval 0.5 --heartbeat-timeout
/// 2`, the worker stopped, then `ctl recycle`.
#[test]
fn a_worker_that_hangs_while_draining_is_ended_for_drain_hang_and_the_recycle_completes() {
    for platform in [Platform::Posix, Platform::Windows] {
        let mut h = harness(platform, |r| {
            r.workers = 1;
            r.recovery.heartbeat_interval = 0.5;
            r.recovery.heartbeat_timeout = 2.0;
            r.recovery.drain_timeout = 30.0;
            r.recovery.force_timeout = 1.0;
        });
        let ws = h.start();
        let old = ws[0];
        h.advance(Duration::from_millis(500));
        beat_one(&mut h, old);
        h.advance(Duration::from_millis(500));
        beat_one(&mut h, old);
        // SIGSTOP now (t = 1 s): this was the last beat.
        let stopped = h.now;
        h.advance(Duration::from_millis(200));
        let acts = h.on(Event::Command(Command::Recycle));
        assert_eq!(spawns(&acts), 1);
        let rep = WorkerId(2);
        let acts = h.boot(&acts);
        assert_eq!(
            drains(&acts),
            vec![old],
            "the replacement is READY: drain the old"
        );
        assert!(h.sup.recycle_in_flight());
        // The replacement beats; the old worker, stopped, does not.
        let mut acts = Vec::new();
        while h.now < stopped + Duration::from_millis(1999) {
            beat_one(&mut h, rep);
            acts.extend(
                h.advance(
                    Duration::from_millis(100)
                        .min((stopped + Duration::from_millis(1999)).saturating_since(h.now)),
                ),
            );
        }
        assert!(
            terms(&acts).is_empty() && kills(&acts).is_empty(),
            "within heartbeat_timeout of its last beat: {acts:?}"
        );
        let acts = h.advance(Duration::from_millis(1));
        match platform {
            Platform::Posix => {
                assert_eq!(
                    terms(&acts),
                    vec![old],
                    "TERM first, as for any hung worker"
                );
                assert!(kills(&acts).is_empty());
                beat_one(&mut h, rep);
                let acts = h.advance(Duration::from_millis(999));
                assert!(kills(&acts).is_empty(), "KILL waits for force_timeout");
                let acts = h.advance(Duration::from_millis(1));
                assert_eq!(
                    kills(&acts),
                    vec![old],
                    "a stopped process runs no TERM handler: KILL follows"
                );
            }
            Platform::Windows => {
                assert!(terms(&acts).is_empty(), "no TERM on Windows");
                assert_eq!(kills(&acts), vec![old], "terminated at once");
            }
        }
        let killed_after = h.now.saturating_since(stopped);
        let bound = match platform {
            Platform::Posix => Duration::from_secs(3),
            Platform::Windows => Duration::from_secs(2),
        };
        assert_eq!(
            killed_after, bound,
            "heartbeat_timeout (+ force_timeout on POSIX) after the last beat, not the 30 s drain"
        );
        let failure = h.sup.last_failure().expect("recorded");
        assert_eq!(
            (failure.worker, failure.reason),
            (old, ExitReason::DrainHang)
        );
        assert!(
            failure.message.contains("while draining"),
            "{}",
            failure.message
        );
        assert!(h.sup.recycle_in_flight(), "until the reap");
        let acts = h.on(Event::Exited {
            worker: old,
            status: ExitStatus::Signal(9),
        });
        assert!(acts.contains(&Action::WorkerGone { worker: old }));
        assert_eq!(spawns(&acts), 0, "its replacement already serves the slot");
        assert!(!h.sup.recycle_in_flight(), "the recycle completed");
        assert_eq!(exit_reason(&h, old), Some(ExitReason::DrainHang));
        let status = h.sup.status(h.now);
        assert_eq!(status.restarts, 0, "a drain hang restarts nothing");
        assert_eq!(h.sup.ready_workers(), 1);
        assert_eq!(h.sup.state(), ServiceState::Ready);
        // Nothing holds recycling any more.
        let acts = h.on(Event::Command(Command::Recycle));
        assert_eq!(spawns(&acts), 1, "the next recycle starts");
    }
}

#[test]
fn a_draining_worker_that_keeps_beating_is_judged_by_its_drain_deadline_only() {
    let mut h = harness(Platform::Posix, |r| {
        r.workers = 1;
        r.recovery.heartbeat_interval = 0.5;
        r.recovery.heartbeat_timeout = 2.0;
        r.recovery.drain_timeout = 6.0;
    });
    let ws = h.start();
    h.on(Event::Command(Command::Stop));
    let mut acts = Vec::new();
    for _ in 0..11 {
        acts.extend(h.advance(Duration::from_millis(500)));
        beat_one(&mut h, ws[0]);
    }
    assert!(
        terms(&acts).is_empty() && kills(&acts).is_empty(),
        "a slow, healthy drain is no hang: {acts:?}"
    );
    let acts = h.advance(Duration::from_millis(500));
    assert_eq!(terms(&acts), vec![ws[0]], "the drain deadline");
    h.advance(Duration::from_millis(500));
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert_eq!(exit_reason(&h, ws[0]), Some(ExitReason::ForcedTermination));
    assert!(
        h.sup.last_failure().is_none(),
        "an overrun is not a failure"
    );
}

#[test]
fn a_hung_worker_does_not_hold_a_stop_until_the_drain_deadline() {
    let mut h = harness(Platform::Posix, |r| {
        r.recovery.heartbeat_interval = 1.0;
        r.recovery.heartbeat_timeout = 5.0;
        r.recovery.drain_timeout = 30.0;
    });
    let ws = h.start();
    h.advance(Duration::from_secs(3));
    h.on(Event::Command(Command::Stop));
    h.on(Event::Exited {
        worker: ws[1],
        status: ExitStatus::Code(0),
    });
    let acts = h.advance(Duration::from_secs(2));
    assert_eq!(terms(&acts), vec![ws[0]], "silent since the start");
    let acts = h.advance(Duration::from_millis(500));
    assert_eq!(kills(&acts), vec![ws[0]]);
    let acts = h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert!(acts.contains(&Action::Exit { code: 0 }), "a clean stop");
    assert_eq!(exit_reason(&h, ws[0]), Some(ExitReason::DrainHang));
    assert_eq!(exit_reason(&h, ws[1]), Some(ExitReason::CleanExit));
}

#[test]
fn a_drain_hang_does_not_count_against_the_restart_limit() {
    // With restarts disabled, a fault fails the service; a worker that hangs after its
    // replacement took over must not.
    let mut h = harness(Platform::Windows, |r| {
        r.workers = 1;
        r.recovery.worker_restart_limit = 0;
        r.recovery.heartbeat_interval = 0.5;
        r.recovery.heartbeat_timeout = 2.0;
    });
    let ws = h.start();
    let acts = h.on(Event::Command(Command::Recycle));
    let rep = WorkerId(2);
    h.boot(&acts);
    h.advance(Duration::from_millis(1000));
    beat_one(&mut h, rep);
    let acts = h.advance(Duration::from_millis(1000));
    assert_eq!(kills(&acts), vec![ws[0]]);
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert_eq!(h.sup.state(), ServiceState::Ready);
    assert!(h.sup.failure().is_none());
    assert!(!h.sup.recycle_in_flight());
    assert_eq!(exit_reason(&h, ws[0]), Some(ExitReason::DrainHang));
}

#[test]
fn a_drain_hang_keeps_its_reason_through_a_later_fault() {
    let mut h = harness(Platform::Posix, |r| {
        r.workers = 1;
        r.recovery.heartbeat_interval = 0.5;
        r.recovery.heartbeat_timeout = 2.0;
    });
    let ws = h.start();
    let acts = h.on(Event::Command(Command::Recycle));
    let rep = WorkerId(2);
    h.boot(&acts);
    h.advance(Duration::from_secs(1));
    beat_one(&mut h, rep);
    let acts = h.advance(Duration::from_secs(1));
    assert_eq!(terms(&acts), vec![ws[0]]);
    // Whatever else goes wrong with it now, it was ended for hanging.
    let acts = h.on(Event::ProtocolViolation {
        worker: ws[0],
        error: crate::proto::ProtoError::EmptyFrame,
    });
    assert!(
        kills(&acts).is_empty(),
        "the KILL still waits for force_timeout"
    );
    let acts = h.advance(Duration::from_millis(500));
    assert_eq!(kills(&acts), vec![ws[0]]);
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert_eq!(exit_reason(&h, ws[0]), Some(ExitReason::DrainHang));
    assert_eq!(
        h.sup.last_failure().map(|f| f.reason),
        Some(ExitReason::DrainHang)
    );
}

// ----- time the parent did not run (decision 0017) ------------------------------------

/// The parent froze for `late` and woke at `h.now + late`.
fn freeze(h: &mut Harness, late: Duration) {
    h.now = h.now + late;
    h.sup.not_running(h.now, late);
}

#[test]
fn a_freeze_moves_the_drain_and_the_term_to_kill_deadlines_on_by_its_length() {
    // The harness's drain_timeout 3 s and force_timeout 0.5 s; heartbeats judged at 5 s.
    let mut h = harness(Platform::Posix, |r| r.workers = 1);
    let ws = h.start();
    h.on(Event::Command(Command::Stop));
    h.advance(Duration::from_secs(1));
    beat_one(&mut h, ws[0]);
    // Drain deadline at 3 s; the parent does not run from 1 s to 11 s.
    freeze(&mut h, Duration::from_secs(10));
    beat_one(&mut h, ws[0]);
    let mut acts = h.advance(Duration::ZERO);
    for _ in 0..2 {
        beat_one(&mut h, ws[0]);
        acts.extend(h.advance(Duration::from_millis(999)));
    }
    assert!(
        terms(&acts).is_empty() && kills(&acts).is_empty(),
        "freeze rule: the drain deadline (3 s) moves on by the 10 s the parent did not run: {acts:?}"
    );
    beat_one(&mut h, ws[0]);
    let acts = h.advance(Duration::from_millis(2));
    assert_eq!(
        terms(&acts),
        vec![ws[0]],
        "freeze rule: the drain deadline is 13 s"
    );
    // TERM at 13 s, KILL due at 13.5 s; the parent does not run from 13 s to 18 s.
    freeze(&mut h, Duration::from_secs(5));
    let acts = h.advance(Duration::from_millis(499));
    assert!(
        kills(&acts).is_empty(),
        "freeze rule: the KILL after TERM (13.5 s) moves on by the 5 s the parent did not run"
    );
    let acts = h.advance(Duration::from_millis(1));
    assert_eq!(
        kills(&acts),
        vec![ws[0]],
        "freeze rule: the KILL is due at 18.5 s"
    );
}

#[test]
fn a_freeze_while_a_worker_starts_moves_its_start_deadline_on() {
    // worker_start_timeout 30 s (the default): the first worker never prepares; the
    // parent does not run from 10 s to 50 s.
    let mut h = harness(Platform::Posix, |r| r.workers = 1);
    h.on(Event::Start);
    let w = WorkerId(1);
    h.on(Event::Spawned {
        worker: w,
        pid: 101,
    });
    h.advance(Duration::from_secs(10));
    freeze(&mut h, Duration::from_secs(40));
    let acts = h.advance(Duration::from_millis(19_999));
    assert!(
        kills(&acts).is_empty() && h.sup.last_failure().is_none(),
        "freeze rule: the start deadline (30 s) moves on by the 40 s the parent did not run: {acts:?}"
    );
    let acts = h.advance(Duration::from_millis(1));
    assert_eq!(
        kills(&acts),
        vec![w],
        "freeze rule: the start deadline is 70 s"
    );
    assert_eq!(
        h.sup.last_failure().map(|f| f.reason),
        Some(ExitReason::StartupFailure)
    );
}
