//! The supervisor driven directly, one event at a time: the details the scenarios only
//! see from outside (which signal, which reason, which status field).

use core::time::Duration;

use super::*;
use crate::config::RawConfig;

struct Harness {
    sup: Supervisor,
    now: Instant,
}

fn harness(platform: Platform, edit: impl FnOnce(&mut RawConfig)) -> Harness {
    let mut raw = RawConfig {
        workers: 2,
        ..RawConfig::default()
    };
    raw.recovery.drain_timeout = 3.0;
    raw.recovery.force_timeout = 0.5;
    edit(&mut raw);
    let config = raw.validate().expect("valid");
    Harness {
        sup: Supervisor::new(config, platform, CoreRng::from_seed([9; 32])),
        now: Instant::ZERO,
    }
}

impl Harness {
    fn on(&mut self, event: Event) -> Vec<Action> {
        self.sup.handle(self.now, event);
        self.actions()
    }

    fn actions(&mut self) -> Vec<Action> {
        let acts: Vec<Action> = std::iter::from_fn(|| self.sup.poll_action()).collect();
        self.sup.check_invariants().expect("invariants");
        acts
    }

    fn advance(&mut self, d: Duration) -> Vec<Action> {
        self.now = self.now + d;
        self.sup.handle_timeout(self.now);
        self.actions()
    }

    fn msg(&mut self, worker: WorkerId, message: WorkerMessage) -> Vec<Action> {
        self.on(Event::Message { worker, message })
    }

    /// Spawned + PREPARED (+ READY once committed) for every spawn in `acts`.
    fn boot(&mut self, acts: &[Action]) -> Vec<Action> {
        let spawned: Vec<WorkerId> = acts
            .iter()
            .filter_map(|a| match a {
                Action::Spawn { worker, .. } => Some(*worker),
                _ => None,
            })
            .collect();
        let mut out = Vec::new();
        for &w in &spawned {
            out.extend(self.on(Event::Spawned {
                worker: w,
                pid: 100 + w.0 as u32,
            }));
            out.extend(self.msg(w, WorkerMessage::Prepared));
        }
        for &w in &spawned {
            out.extend(self.msg(w, WorkerMessage::Ready));
        }
        out
    }

    fn start(&mut self) -> Vec<WorkerId> {
        let acts = self.on(Event::Start);
        self.boot(&acts);
        assert_eq!(self.sup.state(), ServiceState::Ready);
        self.members()
    }

    fn members(&self) -> Vec<WorkerId> {
        self.sup
            .status(self.now)
            .workers
            .iter()
            .filter(|w| w.role == Role::Member)
            .map(|w| w.id)
            .collect()
    }

    fn beat(&mut self, requests: u64) -> Vec<Action> {
        let mut out = Vec::new();
        for w in self.members() {
            out.extend(self.msg(
                w,
                WorkerMessage::Heartbeat {
                    requests,
                    connections: 0,
                },
            ));
        }
        out
    }
}

fn kills(acts: &[Action]) -> Vec<WorkerId> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Kill { worker } => Some(*worker),
            _ => None,
        })
        .collect()
}

fn terms(acts: &[Action]) -> Vec<WorkerId> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Terminate { worker } => Some(*worker),
            _ => None,
        })
        .collect()
}

fn spawns(acts: &[Action]) -> usize {
    acts.iter()
        .filter(|a| matches!(a, Action::Spawn { .. }))
        .count()
}

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
    assert!(a.contains(&Action::GenerationCommitted {
        generation: Generation(1)
    }));
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
        },
    );
    assert_eq!(spawns(&acts), 0);
    let acts = h.msg(
        ws[0],
        WorkerMessage::Heartbeat {
            requests: 10,
            connections: 0,
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
    let acts = h.on(Event::Command(Command::Reload(Box::new(next))));
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
    assert!(acts.contains(&Action::GenerationCommitted {
        generation: Generation(2)
    }));
    assert_eq!(h.sup.generation(), Generation(2));
    assert_eq!(h.sup.config().workers(), 3);
}

#[test]
fn an_invalid_reload_changes_nothing_and_says_why() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    let mut bad = RawConfig::default();
    bad.recovery.heartbeat_timeout = 0.5;
    let acts = h.on(Event::Command(Command::Reload(Box::new(bad))));
    let message = acts.iter().find_map(|a| match a {
        Action::ReloadRejected { message } => Some(message.clone()),
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
    let acts = h.advance(Duration::from_millis(500));
    assert_eq!(kills(&acts), vec![ws[0]]);
    let acts = h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert!(acts.contains(&Action::Exit { code: 0 }));
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
        SingletonKind::Http3,
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
    let acts = h.on(Event::Command(Command::Reload(Box::new(next))));
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
    let acts = h.on(Event::Command(Command::Reload(Box::new(next))));
    assert_eq!(spawns(&acts), 2);
    assert!(h.sup.status(h.now).reload_in_flight);
    let acts = h.msg(
        ws[0],
        WorkerMessage::Heartbeat {
            requests: 50,
            connections: 0,
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
    assert_eq!(ExitReason::ALL.len(), 10, "every reason is listed");
    assert_eq!(Platform::Posix.name(), "posix");
    assert_eq!(Platform::Windows.name(), "windows");
    assert_eq!(ExitStatus::Code(3).to_string(), "exit code 3");
    assert_eq!(ExitStatus::Signal(9).to_string(), "signal 9");
    assert_eq!(Generation(4).to_string(), "g4");
    assert_eq!(WorkerId(4).to_string(), "w4");
    assert_eq!(Slot(4).to_string(), "s4");
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
        },
    );
    assert_eq!(h.sup.serving_workers(), 3, "N + 1 during a recycle");
}

fn exit_reason(h: &Harness, w: WorkerId) -> Option<ExitReason> {
    h.sup
        .status(h.now)
        .recent_exits
        .iter()
        .find(|e| e.worker == w)
        .map(|e| e.reason)
}

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
    h.on(Event::Command(Command::Reload(Box::new(next))));
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
}

// ----- hangs in every live state -----------------------------------------------------

fn beat_one(h: &mut Harness, w: WorkerId) -> Vec<Action> {
    h.msg(
        w,
        WorkerMessage::Heartbeat {
            requests: 0,
            connections: 0,
        },
    )
}

fn drains(acts: &[Action]) -> Vec<WorkerId> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Send {
                worker,
                message: ParentMessage::Drain { .. },
            } => Some(*worker),
            _ => None,
        })
        .collect()
}

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
