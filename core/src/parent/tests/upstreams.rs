//! The reverse proxy's upstream health in the parent: one verdict, sent to every worker.

use super::*;
use crate::proto::BrokerReply;
use crate::upstream_health::{HealthPolicy, UpstreamHealth};

fn health_sent(acts: &[ParentAction]) -> Vec<(WorkerId, Vec<u16>)> {
    acts.iter()
        .filter_map(|a| match a {
            ParentAction::Supervisor(Action::Send {
                worker,
                message: ParentMessage::UpstreamHealth { down },
            }) => Some((*worker, down.clone())),
            _ => None,
        })
        .collect()
}

fn report(p: &mut Parent, w: WorkerId, now: Instant, upstream: u16, ok: bool) {
    p.handle(
        now,
        Event::Message {
            worker: w,
            message: WorkerMessage::Broker {
                id: 9,
                request: BrokerRequest::UpstreamOutcome { upstream, ok },
            },
        },
    );
}

#[test]
fn health_rule_a_workers_failure_reaches_every_worker_and_the_report_is_answered() {
    let (mut p, w) = started(|r| r.workers = 1);
    p.watch_upstreams(UpstreamHealth::new(
        2,
        HealthPolicy {
            max_fails: 1,
            fail_timeout: Duration::from_secs(10),
            probe_interval: None,
        },
        Instant::ZERO,
    ));
    report(&mut p, w, Instant::ZERO, 1, false);
    let acts = actions(&mut p);
    assert_eq!(
        health_sent(&acts),
        vec![(w, vec![1])],
        "health rule: the down set goes to every connected worker at once"
    );
    assert!(
        acts.iter().any(|a| matches!(
            a,
            ParentAction::Supervisor(Action::Send {
                message: ParentMessage::Broker {
                    id: 9,
                    reply: BrokerReply::Released
                },
                ..
            })
        )),
        "the report is answered, so the worker's client does not wait for it"
    );
    // After fail_timeout it is tried again, and every worker hears so.
    let acts = run_until(&mut p, Instant::from_nanos(10_000_000_000));
    assert_eq!(health_sent(&acts), vec![(w, vec![])]);
}

#[test]
fn health_rule_a_new_worker_hears_the_down_set_right_after_its_hello() {
    let (mut p, w) = started(|r| r.workers = 1);
    p.watch_upstreams(UpstreamHealth::new(
        1,
        HealthPolicy {
            max_fails: 1,
            fail_timeout: Duration::from_secs(60),
            probe_interval: None,
        },
        Instant::ZERO,
    ));
    report(&mut p, w, Instant::ZERO, 0, false);
    actions(&mut p);
    // The worker crashes; its replacement is spawned after the backoff.
    p.handle(Instant::ZERO, Event::ChannelClosed { worker: w });
    p.handle(
        Instant::ZERO,
        Event::Exited {
            worker: w,
            status: ExitStatus::Signal(9),
        },
    );
    let acts = run_until(&mut p, Instant::from_nanos(5_000_000_000));
    let hello = acts.iter().position(|a| {
        matches!(
            a,
            ParentAction::Supervisor(Action::Send {
                message: ParentMessage::Hello { .. },
                ..
            })
        )
    });
    let health = acts.iter().position(|a| {
        matches!(
            a,
            ParentAction::Supervisor(Action::Send {
                message: ParentMessage::UpstreamHealth { .. },
                ..
            })
        )
    });
    assert!(hello.is_some(), "a replacement was spawned: {acts:?}");
    assert_eq!(
        health,
        hello.map(|h| h + 1),
        "health rule: the replacement hears the down set right after its HELLO"
    );
}

#[test]
fn health_rule_probes_are_the_parents_and_their_verdicts_reach_the_workers() {
    let (mut p, w) = started(|r| r.workers = 1);
    p.watch_upstreams(UpstreamHealth::new(
        1,
        HealthPolicy {
            max_fails: 1,
            fail_timeout: Duration::from_secs(10),
            probe_interval: Some(Duration::from_secs(2)),
        },
        Instant::ZERO,
    ));
    let acts = run_until(&mut p, Instant::ZERO);
    assert!(
        acts.iter()
            .any(|a| matches!(a, ParentAction::ProbeUpstream { upstream: 0 })),
        "the first probe goes out at the start: {acts:?}"
    );
    p.handle(
        Instant::from_nanos(1_000_000),
        Event::UpstreamProbed {
            upstream: 0,
            ok: false,
        },
    );
    assert_eq!(health_sent(&actions(&mut p)), vec![(w, vec![0])]);
    assert_eq!(
        p.upstream_health().and_then(UpstreamHealth::poll_timeout),
        Some(Instant::from_nanos(2_001_000_000)),
        "the next probe is due an interval after the last came back"
    );
    p.handle(
        Instant::from_nanos(2_100_000_000),
        Event::UpstreamProbed {
            upstream: 0,
            ok: true,
        },
    );
    assert_eq!(health_sent(&actions(&mut p)), vec![(w, vec![])]);
}
