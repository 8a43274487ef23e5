//! The barrier, hangs while ready, crashes and the restart limit, drain deadlines, reason codes.

use super::*;

#[test]
fn commit_waits_for_the_whole_quorum_and_ready_needs_commit() {
    let mut h = harness(Platform::Posix, |_| {});
    let acts = h.on(Event::Start);
    assert_eq!(spawns(&acts), 2);
    let w1 = WorkerId(1);
    let w2 = WorkerId(2);
    let a = h.msg(w1, WorkerMessage::Prepared);
    assert!(!a.iter().any(|a| matches!(
        a,
        Action::Send {
            message: ParentMessage::Commit,
            ..
        }
    )));
    let a = h.msg(w2, WorkerMessage::Prepared);
    let commits = a
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::Send {
                    message: ParentMessage::Commit,
                    ..
                }
            )
        })
        .count();
    assert_eq!(commits, 2);
    h.msg(w1, WorkerMessage::Ready);
    assert_eq!(h.sup.state(), ServiceState::Starting);
    let a = h.msg(w2, WorkerMessage::Ready);
    assert!(a.iter().any(|act| matches!(
        act,
        Action::GenerationCommitted {
            generation: Generation(1),
            reload: None,
            ..
        }
    )));
    assert_eq!(h.sup.state(), ServiceState::Ready);
    assert_eq!(h.sup.ready_workers(), 2);
    assert!(
        h.sup.last_failure().is_none(),
        "clean start records no failure"
    );
}

#[test]
fn posix_hang_is_terminated_then_killed_windows_is_killed_at_once() {
    for platform in [Platform::Posix, Platform::Windows] {
        let mut h = harness(platform, |r| {
            r.recovery.heartbeat_interval = 1.0;
            r.recovery.heartbeat_timeout = 5.0;
        });
        let ws = h.start();
        h.advance(Duration::from_secs(3));
        h.msg(
            ws[1],
            WorkerMessage::Heartbeat {
                requests: 1,
                connections: 0,
                requests_in_progress: 0,
                memory: 0,
                stats: Default::default(),
            },
        );
        let acts = h.advance(Duration::from_secs(2));
        match platform {
            Platform::Posix => {
                assert_eq!(terms(&acts), vec![ws[0]]);
                assert!(kills(&acts).is_empty());
                let acts = h.advance(Duration::from_millis(499));
                assert!(kills(&acts).is_empty(), "KILL waits for force_timeout");
                let acts = h.advance(Duration::from_millis(1));
                assert_eq!(kills(&acts), vec![ws[0]]);
            }
            Platform::Windows => {
                assert!(terms(&acts).is_empty(), "no TERM on Windows");
                assert_eq!(kills(&acts), vec![ws[0]]);
            }
        }
        let failure = h.sup.last_failure().expect("recorded");
        assert_eq!(failure.reason, ExitReason::HealthFailure);
        assert_eq!(failure.worker, ws[0]);
        let acts = h.on(Event::Exited {
            worker: ws[0],
            status: ExitStatus::Signal(9),
        });
        assert!(acts.contains(&Action::WorkerGone { worker: ws[0] }));
        assert_eq!(spawns(&acts), 0, "replacement waits for the backoff");
        let failure = h.sup.last_failure().expect("recorded");
        assert!(
            failure.message.contains("heartbeat"),
            "the reap keeps the hang's own reason: {}",
            failure.message
        );
        assert!(
            failure
                .message
                .ends_with("; exited with signal 9 (SIGKILL)"),
            "and adds how the process ended: {}",
            failure.message
        );
        let acts = h.advance(Duration::from_millis(250));
        assert_eq!(spawns(&acts), 1);
        assert_eq!(h.sup.status(h.now).restarts, 1);
        assert_eq!(
            h.sup.ready_workers(),
            1,
            "a spawning replacement is not ready"
        );
        assert_eq!(h.sup.live_workers(), 2);
    }
}

#[test]
fn a_clean_exit_after_a_drain_is_not_a_failure() {
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    let acts = h.on(Event::Command(Command::Stop));
    assert!(acts.contains(&Action::CloseListeners));
    for &w in &ws {
        h.on(Event::Exited {
            worker: w,
            status: ExitStatus::Code(0),
        });
    }
    assert!(h.sup.last_failure().is_none());
    assert_eq!(h.sup.state(), ServiceState::Stopped);
    assert!(
        h.on(Event::Command(Command::Stop)).is_empty(),
        "stop is idempotent"
    );
}

#[test]
fn restart_limit_zero_fails_on_the_first_crash_and_says_why() {
    let mut h = harness(Platform::Posix, |r| r.recovery.worker_restart_limit = 0);
    let ws = h.start();
    let acts = h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    let failed = acts.iter().find_map(|a| match a {
        Action::ServiceFailed { reason, message } => Some((*reason, message.clone())),
        _ => None,
    });
    let (reason, message) = failed.expect("the service fails");
    assert_eq!(reason, FailureReason::RestartsDisabled);
    assert!(message.contains("worker_restart_limit is 0"), "{message}");
    assert_eq!(reason.exit_code(), 4);
    assert_eq!(h.sup.state(), ServiceState::Failed);
}

#[test]
fn age_deadlines_respect_the_jitter_band() {
    for seed in 0..20u8 {
        let mut raw = RawConfig {
            workers: 1,
            ..RawConfig::default()
        };
        raw.recovery.worker_max_age = 100.0;
        raw.recovery.worker_max_age_jitter = 0.5;
        let mut h = Harness {
            sup: Supervisor::new(
                raw.validate().expect("valid"),
                Platform::Posix,
                CoreRng::from_seed([seed; 32]),
            ),
            now: Instant::ZERO,
        };
        h.start();
        let mut recycled_at = None;
        for s in 1..=101 {
            h.beat(0);
            let acts = h.advance(Duration::from_secs(1));
            if spawns(&acts) > 0 {
                recycled_at = Some(s);
                break;
            }
        }
        let at = recycled_at.expect("recycled within max age");
        assert!(
            (50..=101).contains(&at),
            "recycled after {at} s, band is [50, 100]"
        );
    }
}

#[test]
fn a_drain_that_overruns_is_terminated_then_killed_as_forced() {
    let mut h = harness(Platform::Posix, |r| r.recovery.drain_timeout = 2.0);
    let ws = h.start();
    h.on(Event::Command(Command::Stop));
    h.on(Event::Exited {
        worker: ws[1],
        status: ExitStatus::Code(0),
    });
    let acts = h.advance(Duration::from_secs(2));
    assert_eq!(terms(&acts), vec![ws[0]]);
    // A driver sleeps until the next deadline: the KILL's must be it, or the KILL waits
    // for whatever deadline comes later.
    assert_eq!(
        h.sup.poll_timeout(),
        Some(h.now + Duration::from_millis(500)),
        "the KILL is the next deadline"
    );
    let acts = h.advance(Duration::from_millis(500));
    assert_eq!(kills(&acts), vec![ws[0]]);
    let acts = h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert!(acts.contains(&Action::Exit { code: 0 }));
}

/// The kept floor under the next deadline ([`Supervisor::poll_timeout_before`]) is only
/// a shortcut: after heartbeats have moved every deadline later, a bound past the floor
/// still gets the full answer, never the stale floor.
#[test]
fn the_deadline_floor_never_stands_for_a_deadline_that_moved_later() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    let far = Some(h.now + Duration::from_secs(3600));
    let first = h.sup.poll_timeout_before(far);
    assert_eq!(first, h.sup.poll_timeout());
    h.now = h.now + Duration::from_secs(1);
    h.beat(0);
    let later = h.sup.poll_timeout();
    assert!(
        later > first,
        "the beats moved the deadline: {first:?} → {later:?}"
    );
    assert_eq!(h.sup.poll_timeout_before(far), later);
    // A bound before the floor may be answered by the floor: the caller takes the
    // earliest of the two, which is the bound either way.
    let near = Some(h.now);
    let answer = h.sup.poll_timeout_before(near);
    assert_eq!(
        crate::time::earliest(answer, near),
        crate::time::earliest(later, near)
    );
}

#[test]
fn force_timeout_zero_kills_without_term() {
    let mut h = harness(Platform::Posix, |r| {
        r.recovery.drain_timeout = 0.0;
        r.recovery.force_timeout = 0.0;
    });
    let ws = h.start();
    let acts = h.on(Event::Command(Command::Stop));
    assert!(terms(&acts).is_empty());
    assert_eq!(kills(&acts), ws);
}

#[test]
fn request_limits_respect_the_jitter_band() {
    for seed in 0..20u8 {
        let mut raw = RawConfig {
            workers: 1,
            ..RawConfig::default()
        };
        raw.recovery.max_requests_per_worker = 100;
        raw.recovery.max_requests_jitter = 0.5;
        let mut h = Harness {
            sup: Supervisor::new(
                raw.validate().expect("valid"),
                Platform::Posix,
                CoreRng::from_seed([seed; 32]),
            ),
            now: Instant::ZERO,
        };
        let ws = h.start();
        let mut recycled_at = None;
        for n in 1..=101 {
            let acts = h.msg(
                ws[0],
                WorkerMessage::Heartbeat {
                    requests: n,
                    connections: 0,
                    requests_in_progress: 0,
                    memory: 0,
                    stats: Default::default(),
                },
            );
            if spawns(&acts) > 0 {
                recycled_at = Some(n);
                break;
            }
        }
        let at = recycled_at.expect("recycled within the limit");
        assert!(
            (50..=100).contains(&at),
            "recycled after {at} requests, band is [50, 100]"
        );
    }
}

#[test]
fn names_are_distinct_and_lease_ids_stay_secret_in_debug_output() {
    use crate::singletons::SingletonKind;
    let kinds = [
        SingletonKind::AccessLog,
        SingletonKind::Mdns,
        SingletonKind::Qr,
        SingletonKind::Tftp,
        SingletonKind::Acme,
    ];
    let states = ServiceState::ALL;
    let state_names: std::collections::BTreeSet<&str> = states.iter().map(|s| s.name()).collect();
    assert!(state_names.contains("ready") && state_names.contains("failed"));
    assert_eq!(state_names.len(), states.len());
    let roles = Role::ALL;
    let role_names: std::collections::BTreeSet<&str> = roles.iter().map(|r| r.name()).collect();
    assert_eq!(role_names.len(), roles.len());
    assert!(role_names.contains("member"));
    for state in ServiceState::ALL {
        assert_eq!(ServiceState::from_name(state.name()), Some(state));
    }
    for state in WorkerState::ALL {
        assert_eq!(WorkerState::from_name(state.name()), Some(state));
    }
    for role in Role::ALL {
        assert_eq!(Role::from_name(role.name()), Some(role));
    }
    for reason in ExitReason::ALL {
        assert_eq!(ExitReason::from_code(reason.code()), Some(reason));
    }
    for reason in FailureReason::ALL {
        assert_eq!(FailureReason::from_code(reason.code()), Some(reason));
    }
    assert_eq!(ServiceState::from_name("bogus"), None);
    let names: std::collections::BTreeSet<&str> = kinds.iter().map(|k| k.name()).collect();
    assert_eq!(names.len(), kinds.len());
    assert!(names.iter().all(|n| !n.is_empty()));
    let id = crate::ids::LeaseId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
    let shown = format!("{id:?}");
    assert!(shown.starts_with("LeaseId(01234567"), "{shown}");
    assert!(
        !shown.contains("4455"),
        "debug output must not reveal the whole secret: {shown}"
    );
    assert_eq!(id.to_string(), "0123456789abcdef0011223344556677");
}

#[test]
fn reason_codes_and_what_counts_against_the_limit() {
    use ExitReason::*;
    for (reason, code, fault) in [
        (CleanExit, "clean_exit", false),
        (UnexpectedExit, "unexpected_exit", true),
        (StartupFailure, "startup_failure", true),
        (HealthFailure, "health_failure", true),
        (ProtocolError, "protocol_error", true),
        (RecycleAge, "recycle_age", false),
        (RecycleRequests, "recycle_requests", false),
        (RecycleManual, "recycle_manual", false),
        (RecycleMemory, "recycle_memory", false),
        (ForcedTermination, "forced_termination", false),
        (DrainHang, "drain_hang", false),
    ] {
        assert_eq!(reason.code(), code);
        assert_eq!(reason.to_string(), code);
        assert_eq!(reason.is_fault(), fault, "{code}");
        assert_eq!(
            reason.is_failure(),
            fault || reason == DrainHang,
            "{code}: a failure is a fault or a drain hang"
        );
    }
    assert_eq!(ExitReason::ALL.len(), 11, "every reason is listed");
    assert_eq!(Platform::Posix.name(), "posix");
    assert_eq!(Platform::Windows.name(), "windows");
    assert_eq!(ExitStatus::Code(3).to_string(), "exit code 3");
    assert_eq!(ExitStatus::Signal(9).to_string(), "signal 9 (SIGKILL)");
    assert_eq!(ExitStatus::Signal(6).to_string(), "signal 6 (SIGABRT)");
    assert_eq!(ExitStatus::Signal(10).to_string(), "signal 10");
    assert_eq!(Generation(4).to_string(), "g4");
    assert_eq!(WorkerId(4).to_string(), "w4");
    assert_eq!(Slot(4).to_string(), "s4");
}

#[test]
fn a_refused_spawn_is_a_startup_failure_that_status_names() {
    // In the first generation it fails the service before it was ever ready.
    let mut h = harness(Platform::Posix, |_| {});
    let acts = h.on(Event::Start);
    assert_eq!(spawns(&acts), 2);
    let error = "cannot start servery: Resource temporarily unavailable (os error 11)";
    let acts = h.on(Event::SpawnFailed {
        worker: WorkerId(2),
        error: error.into(),
    });
    let failed = acts.iter().find_map(|a| match a {
        Action::ServiceFailed { reason, message } => Some((*reason, message.clone())),
        _ => None,
    });
    let (reason, message) = failed.expect("the service fails");
    assert_eq!(reason, FailureReason::StartupFailure);
    assert!(
        message.contains(&format!("could not spawn: {error}")),
        "{message}"
    );
    let last = h.sup.last_failure().expect("a last failure");
    assert_eq!(
        (last.worker, last.reason),
        (WorkerId(2), ExitReason::StartupFailure)
    );
    assert_eq!(
        exit_reason(&h, WorkerId(2)),
        Some(ExitReason::StartupFailure)
    );

    // After the first commit, a refused replacement is a restart of its slot, retried
    // after the next backoff.
    let mut h = harness(Platform::Posix, |r| {
        r.recovery.restart_backoff_initial = 1.0;
        r.recovery.restart_backoff_max = 10.0;
    });
    let ws = h.start();
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    let acts = h.advance(Duration::from_secs(1));
    assert_eq!(spawns(&acts), 1, "{acts:?}");
    let acts = h.on(Event::SpawnFailed {
        worker: WorkerId(3),
        error: error.into(),
    });
    assert_eq!(spawns(&acts), 0, "not at once: {acts:?}");
    let last = h.sup.last_failure().expect("a last failure");
    assert_eq!(
        (last.worker, last.reason),
        (WorkerId(3), ExitReason::StartupFailure)
    );
    assert!(last.message.contains("could not spawn"), "{}", last.message);
    assert_eq!(h.sup.status(h.now).restarts, 2);
    assert_eq!(spawns(&h.advance(Duration::from_millis(1999))), 0);
    assert_eq!(spawns(&h.advance(Duration::from_millis(1))), 1, "after 2 s");
    assert_eq!(h.sup.state(), ServiceState::Ready);
}

/// `restart_backoff_keep_one`: a crash that leaves no worker running or starting is
/// replaced after the initial delay, not its slot's grown backoff; off, the slot waits.
#[test]
fn pool_aware_backoff_keeps_the_last_slot_out_of_its_grown_delay() {
    let run = |keep_one: bool| {
        let mut h = harness(Platform::Posix, |r| {
            r.recovery.restart_backoff_initial = 1.0;
            r.recovery.restart_backoff_max = 10.0;
            r.recovery.restart_backoff_keep_one = keep_one;
        });
        let ws = h.start();
        let crash = |h: &mut Harness, worker| {
            h.on(Event::Exited {
                worker,
                status: ExitStatus::Signal(9),
            })
        };
        // Slot 1 crashes twice in a row (its backoff grows to 2 s, then 4 s) ...
        crash(&mut h, ws[1]);
        assert_eq!(spawns(&h.advance(Duration::from_secs(1))), 1);
        crash(&mut h, WorkerId(3));
        assert_eq!(
            spawns(&h.advance(Duration::from_secs(1))),
            0,
            "slot 0 still runs: slot 1 waits its grown 2 s (keep-one {keep_one})"
        );
        assert_eq!(spawns(&h.advance(Duration::from_secs(1))), 1);
        // ... then slot 0's worker and slot 1's replacement are lost: nothing runs.
        crash(&mut h, ws[0]);
        crash(&mut h, WorkerId(4));
        spawns(&h.advance(Duration::from_secs(1)))
    };
    assert_eq!(
        run(true),
        2,
        "keep-one: both slots come back after the initial 1 s"
    );
    assert_eq!(
        run(false),
        1,
        "per slot: slot 1 waits out its 4 s, only slot 0 returns at 1 s"
    );
}

/// `restart_backoff_shared`: every unstable restart grows one delay for the pool, so a
/// slot's first crash after another slot's waits the pool's grown delay; a stable
/// worker's crash resets it to the initial delay. Off, each slot starts at the initial.
#[test]
fn shared_backoff_grows_one_delay_for_the_pool_and_a_stable_crash_resets_it() {
    let run = |shared: bool| {
        let mut h = harness(Platform::Posix, |r| {
            r.recovery.restart_backoff_initial = 1.0;
            r.recovery.restart_backoff_max = 10.0;
            r.recovery.restart_stable_period = 30.0;
            r.recovery.restart_backoff_shared = shared;
        });
        let ws = h.start();
        let crash = |h: &mut Harness, worker| {
            h.on(Event::Exited {
                worker,
                status: ExitStatus::Signal(9),
            })
        };
        // Slot 1's first unstable crash: 1 s either way.
        crash(&mut h, ws[1]);
        let acts = h.advance(Duration::from_secs(1));
        assert_eq!(
            spawns(&acts),
            1,
            "the pool's first restart waits the initial 1 s (shared {shared})"
        );
        h.boot(&acts);
        // Slot 0's first crash: its own delay is 1 s; the pool's has grown to 2 s.
        crash(&mut h, ws[0]);
        let first = h.advance(Duration::from_secs(1));
        h.boot(&first);
        let second = h.advance(Duration::from_secs(1));
        h.boot(&second);
        // Both run past the stable period; then one crashes: a stable worker's crash
        // starts the pool's delay again.
        for _ in 0..40 {
            h.advance(Duration::from_secs(1));
            h.beat(0);
        }
        let member = h.members()[0];
        crash(&mut h, member);
        let stable = spawns(&h.advance(Duration::from_secs(1)));
        (spawns(&first), spawns(&second), stable)
    };
    assert_eq!(
        run(true),
        (0, 1, 1),
        "shared: slot 0 waits the pool's 2 s; a stable crash waits the initial 1 s"
    );
    assert_eq!(
        run(false),
        (1, 0, 1),
        "per slot: slot 0's first crash waits its own 1 s"
    );
}
