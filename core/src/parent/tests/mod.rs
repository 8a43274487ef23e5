//! The parent's unit tests: the routing between its machines, and (in the files
//! beside this one) its rules one by one.

mod cluster;
mod final_counts;
mod intake;
mod script_groups;
mod tls_files;
mod upstreams;
use super::*;
use crate::config::RawConfig;
use crate::ids::{Generation, ReloadId, WorkerId};
use crate::proto::{BrokerRequest, TargetKey};
use crate::supervisor::ExitStatus;
use core::time::Duration;

pub(super) fn actions(p: &mut Parent) -> Vec<ParentAction> {
    std::iter::from_fn(|| p.poll_action()).collect()
}

pub(super) fn started(features: impl FnOnce(&mut RawConfig)) -> (Parent, WorkerId) {
    started_with(features, |p| p)
}

/// As [`started`], with what the driver reports before the first event (`build`).
pub(super) fn started_with(
    features: impl FnOnce(&mut RawConfig),
    build: impl FnOnce(Parent) -> Parent,
) -> (Parent, WorkerId) {
    let mut raw = RawConfig::default();
    features(&mut raw);
    let mut p = build(Parent::new(
        raw.validate().expect("valid"),
        Platform::Posix,
        [1; 32],
    ));
    let t = Instant::ZERO;
    p.handle(t, Event::Start);
    let w = WorkerId(1);
    p.handle(
        t,
        Event::Message {
            worker: w,
            message: WorkerMessage::Prepared,
        },
    );
    p.handle(
        t,
        Event::Message {
            worker: w,
            message: WorkerMessage::Ready,
        },
    );
    actions(&mut p);
    (p, w)
}

pub(super) fn dav(p: &mut Parent, w: WorkerId, now: Instant, id: u64, request: BrokerRequest) {
    p.handle(
        now,
        Event::Message {
            worker: w,
            message: WorkerMessage::Broker { id, request },
        },
    );
}

pub(super) fn lock_request(resource: &str, timeout_ms: u64) -> BrokerRequest {
    BrokerRequest::DavLock {
        resource: resource.into(),
        depth: crate::proto::DavDepth::Zero,
        owner: String::new(),
        exclusive: true,
        timeout_ms,
    }
}

#[test]
fn a_reload_may_not_change_the_parent_owned_features() {
    let (mut p, _) = started(|_| {});
    let mut next = RawConfig::default();
    next.features.mdns = true;
    p.handle(
        Instant::ZERO,
        Event::Command(Command::Reload {
            id: ReloadId(1),
            config: Box::new(next),
        }),
    );
    let acts = actions(&mut p);
    assert!(
        matches!(&acts[..], [ParentAction::Supervisor(Action::ReloadRejected { message, .. })] if message.contains("features"))
    );
    assert!(!p.supervisor().rollout_in_flight());
}

#[test]
fn singletons_start_on_commit_and_stop_before_exit() {
    let (mut p, w) = started(|r| r.features.mdns = true);
    assert!(
        p.singletons()
            .states()
            .all(|(_, s)| s == crate::singletons::SingletonState::Running(Generation(1)))
    );
    p.handle(Instant::ZERO, Event::Command(Command::Stop));
    p.handle(
        Instant::ZERO,
        Event::Exited {
            worker: w,
            status: ExitStatus::Code(0),
        },
    );
    let acts = actions(&mut p);
    let stop = acts
        .iter()
        .position(|a| matches!(a, ParentAction::Singleton(SingletonAction::Stop { .. })));
    let exit = acts
        .iter()
        .position(|a| matches!(a, ParentAction::Supervisor(Action::Exit { code: 0 })));
    assert!(stop.expect("stopped") < exit.expect("exits"));
}

#[test]
fn the_advertisement_stops_with_the_listeners_and_the_access_log_at_the_exit() {
    let (mut p, w) = started(|r| {
        r.features.mdns = true;
        r.features.access_log = true;
    });
    let stop_of = |acts: &[ParentAction], kind| {
        acts.iter()
            .position(|a| *a == ParentAction::Singleton(SingletonAction::Stop { kind }))
    };
    p.handle(Instant::ZERO, Event::Command(Command::Stop));
    let draining = actions(&mut p);
    let close = draining
        .iter()
        .position(|a| *a == ParentAction::Supervisor(Action::CloseListeners));
    let mdns = stop_of(&draining, SingletonKind::Mdns);
    assert!(
        close.expect("closes") < mdns.expect("mDNS withdrawn while draining"),
        "{draining:?}"
    );
    assert_eq!(stop_of(&draining, SingletonKind::AccessLog), None);
    p.handle(
        Instant::ZERO,
        Event::Exited {
            worker: w,
            status: ExitStatus::Code(0),
        },
    );
    let exiting = actions(&mut p);
    assert!(
        stop_of(&exiting, SingletonKind::AccessLog).is_some(),
        "{exiting:?}"
    );
    assert_eq!(stop_of(&exiting, SingletonKind::Mdns), None, "stopped once");
    p.check_invariants().expect("invariants");
}

#[test]
fn exit_waits_until_the_access_log_is_written() {
    let (mut p, w) = started(|r| r.features.access_log = true);
    for id in 0..3 {
        p.handle(
            Instant::ZERO,
            Event::Message {
                worker: w,
                message: WorkerMessage::Broker {
                    id,
                    request: BrokerRequest::AppendLog {
                        record: format!("r{id}"),
                    },
                },
            },
        );
    }
    actions(&mut p);
    p.handle(Instant::ZERO, Event::Command(Command::Stop));
    p.handle(
        Instant::ZERO,
        Event::Exited {
            worker: w,
            status: ExitStatus::Code(0),
        },
    );
    let acts = actions(&mut p);
    assert!(
        !acts
            .iter()
            .any(|a| matches!(a, ParentAction::Supervisor(Action::Exit { .. }))),
        "records still queued"
    );
    assert_eq!(p.take_log_batch(2).len(), 2);
    assert!(
        !actions(&mut p)
            .iter()
            .any(|a| matches!(a, ParentAction::Supervisor(Action::Exit { .. })))
    );
    assert_eq!(p.take_log_batch(2).len(), 1);
    assert!(actions(&mut p).contains(&ParentAction::Supervisor(Action::Exit { code: 0 })));
}

#[test]
fn a_gone_worker_loses_its_grants_and_is_not_served() {
    let (mut p, w) = started(|_| {});
    let key = TargetKey {
        dir_device: 1,
        dir_inode: 1,
        name: "f".into(),
    };
    let req = |id| Event::Message {
        worker: w,
        message: WorkerMessage::Broker {
            id,
            request: BrokerRequest::AcquireLease { key: key.clone() },
        },
    };
    p.handle(Instant::ZERO, req(1));
    assert_eq!(p.broker().leases().count(), 1);
    let owner = p.broker().leases().next().map(|(_, l)| l.owner);
    assert_eq!(
        owner,
        Some(crate::broker::Owner {
            worker: w,
            generation: Generation(1)
        })
    );
    assert_eq!(p.broker().holders().collect::<Vec<_>>(), vec![w]);
    p.check_invariants().expect("consistent");
    let mut broken = p.clone();
    broken
        .supervisor
        .handle(Instant::ZERO, Event::ChannelClosed { worker: w });
    broken.supervisor.poll_action();
    assert!(
        broken.check_invariants().is_err(),
        "a grant held by a disconnected worker"
    );
    actions(&mut p);
    p.handle(Instant::ZERO, Event::ChannelClosed { worker: w });
    let acts = actions(&mut p);
    assert!(acts.contains(&ParentAction::Supervisor(Action::WorkerGone { worker: w })));
    assert_eq!(p.broker().leases().count(), 0, "revoked at EOF");
    p.handle(Instant::ZERO, req(2));
    assert_eq!(
        p.broker().leases().count(),
        0,
        "a gone worker is not served"
    );
    p.check_invariants().expect("invariants");
}

#[test]
fn the_parents_own_client_shares_the_lease_table_with_workers() {
    let (mut p, w) = started(|_| {});
    let key = TargetKey {
        dir_device: 1,
        dir_inode: 1,
        name: "f".into(),
    };
    let ask = |worker, id, request| Event::Message {
        worker,
        message: WorkerMessage::Broker { id, request },
    };
    let acquire = BrokerRequest::AcquireLease { key: key.clone() };
    p.handle(Instant::ZERO, ask(PARENT_CLIENT, 1, acquire.clone()));
    let acts = actions(&mut p);
    let lease = acts.iter().find_map(|a| match a {
        ParentAction::Supervisor(Action::Send {
            worker,
            message:
                ParentMessage::Broker {
                    id: 1,
                    reply: crate::proto::BrokerReply::Granted { id, .. },
                },
        }) if *worker == PARENT_CLIENT => Some(*id),
        _ => None,
    });
    let lease = lease.expect("the parent's client is answered like a worker");
    p.check_invariants()
        .expect("the parent's client is always connected");
    // A worker's upload to the same file waits its turn.
    p.handle(Instant::ZERO, ask(w, 7, acquire.clone()));
    assert!(
        actions(&mut p).contains(&ParentAction::Supervisor(Action::Send {
            worker: w,
            message: ParentMessage::Broker {
                id: 7,
                reply: crate::proto::BrokerReply::Rejected(crate::proto::Rejection::Busy),
            },
        }))
    );
    p.handle(
        Instant::ZERO,
        ask(PARENT_CLIENT, 2, BrokerRequest::ReleaseLease { id: lease }),
    );
    p.handle(Instant::ZERO, ask(w, 8, acquire));
    assert_eq!(
        p.broker().holders().collect::<Vec<_>>(),
        vec![w],
        "released, then the worker's"
    );
    // Only broker requests are taken from the parent's id.
    p.handle(
        Instant::ZERO,
        Event::Message {
            worker: PARENT_CLIENT,
            message: WorkerMessage::Ready,
        },
    );
    assert!(p.supervisor().worker_generation(PARENT_CLIENT).is_none());
    p.check_invariants().expect("invariants");
}

/// A parent with two ready workers (defaults: a beat a second, a hang after 5 s).
fn two_ready() -> (Parent, [WorkerId; 2]) {
    let raw = RawConfig {
        workers: 2,
        ..RawConfig::default()
    };
    let mut p = Parent::new(raw.validate().expect("valid"), Platform::Posix, [3; 32]);
    let t = Instant::ZERO;
    p.handle(t, Event::Start);
    let ws = [WorkerId(1), WorkerId(2)];
    for message in [WorkerMessage::Prepared, WorkerMessage::Ready] {
        for w in ws {
            p.handle(
                t,
                Event::Message {
                    worker: w,
                    message: message.clone(),
                },
            );
        }
    }
    actions(&mut p);
    (p, ws)
}

fn beat(p: &mut Parent, now: Instant, w: WorkerId) {
    p.handle(
        now,
        Event::Message {
            worker: w,
            message: WorkerMessage::Heartbeat {
                requests: 0,
                connections: 0,
                requests_in_progress: 0,
                memory: 0,
                stats: Default::default(),
            },
        },
    );
}

/// What a driver does: wake at each deadline up to `until` and judge it.
fn run_until(p: &mut Parent, until: Instant) -> Vec<ParentAction> {
    let mut acts = Vec::new();
    while let Some(due) = p.poll_timeout().filter(|d| *d <= until) {
        p.handle_timeout(due);
        acts.extend(actions(p));
    }
    acts
}

fn faulted(acts: &[ParentAction]) -> Vec<WorkerId> {
    acts.iter()
        .filter_map(|a| match a {
            // A hung worker gets TERM first; the KILL follows `force_timeout` later.
            ParentAction::Supervisor(Action::Terminate { worker }) => Some(*worker),
            _ => None,
        })
        .collect()
}

#[test]
fn the_parent_never_sleeps_past_its_watch_period_while_it_has_workers() {
    let (p, _) = two_ready();
    // (5 s − 1 s) / 2: a gap longer than that shows as lateness before it can pass
    // for four seconds of a worker's silence.
    assert_eq!(p.supervisor().watch_period(), Some(Duration::from_secs(2)));
    assert_eq!(
        p.poll_timeout(),
        Some(Instant::ZERO + Duration::from_secs(2))
    );
}

#[test]
fn a_frozen_machine_replaces_nobody_and_a_hung_worker_is_still_caught() {
    let (mut p, [a, b]) = two_ready();
    let sec = |s: u64| Instant::ZERO + Duration::from_secs(s);
    // `a` beats until 10 s, `b` (hung) last beat at 8 s; then the whole machine stops
    // for a minute: the parent wakes at 70 s, 58 s after the deadline it had asked for
    // (its watch, at 12 s).
    for t in 1..=10 {
        beat(&mut p, sec(t), a);
        if t <= 8 {
            beat(&mut p, sec(t), b);
        }
    }
    assert!(run_until(&mut p, sec(10)).is_empty());
    assert_eq!(p.poll_timeout(), Some(sec(12)));
    p.handle_timeout(sec(70));
    assert!(faulted(&actions(&mut p)).is_empty(), "nobody could beat");
    assert_eq!(p.supervisor().time_not_running(), Duration::from_secs(58));
    // `a` beats as soon as it runs again; `b` never does. Its silence counts only the
    // time the parent ran: 8 s → 12 s before the freeze, so it is caught 1 s after.
    let mut acts = Vec::new();
    for t in 70..=80 {
        beat(&mut p, sec(t), a);
        acts.extend(run_until(&mut p, sec(t)));
    }
    assert_eq!(faulted(&acts), vec![b], "{acts:?}");
    let failure = p.supervisor().last_failure().expect("a failure");
    assert_eq!(failure.reason, crate::supervisor::ExitReason::HealthFailure);
    assert_eq!((failure.worker, failure.at), (b, sec(71)));
}

#[test]
fn without_a_freeze_a_silent_worker_is_caught_at_its_deadline() {
    let (mut p, [a, b]) = two_ready();
    let sec = |s: u64| Instant::ZERO + Duration::from_secs(s);
    for t in 1..=20 {
        beat(&mut p, sec(t), a);
        if t <= 3 {
            beat(&mut p, sec(t), b);
        }
        let acts = run_until(&mut p, sec(t));
        assert_eq!(
            faulted(&acts),
            if t == 8 { vec![b] } else { vec![] },
            "at {t} s"
        );
    }
    assert_eq!(p.supervisor().time_not_running(), Duration::ZERO);
}
