//! The reverse proxy's upstream health in the parent: one verdict, sent to every worker.

use super::*;
use crate::proto::BrokerReply;
use crate::upstream_health::{HealthPolicy, UpstreamHealth};

/// Routes under `/api` to each URL.
fn routes(raw: &mut RawConfig, urls: &[&str]) {
    raw.proxy.routes = urls.iter().map(|u| format!("/api={u}")).collect();
}

fn policy(fail_timeout_secs: u64, probe_interval: Option<Duration>) -> HealthPolicy {
    HealthPolicy {
        max_fails: 1,
        fail_timeout: Duration::from_secs(fail_timeout_secs),
        probe_interval,
    }
}

/// The configuration's health policy is `policy` (probing `/health` when it probes).
fn judged(raw: &mut RawConfig, policy: HealthPolicy) {
    raw.proxy.max_fails = i64::from(policy.max_fails);
    raw.proxy.fail_timeout = policy.fail_timeout.as_secs_f64();
    raw.proxy.health = policy.probe_interval.map(|_| "/health".to_owned());
    if let Some(interval) = policy.probe_interval {
        raw.proxy.health_interval = interval.as_secs_f64();
    }
}

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
    let (mut p, w) = started(|r| {
        r.workers = 1;
        routes(r, &["http://a", "http://b"]);
        judged(r, policy(10, None));
    });
    p.watch_upstreams();
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
    let (mut p, w) = started(|r| {
        r.workers = 1;
        routes(r, &["http://a"]);
        judged(r, policy(60, None));
    });
    p.watch_upstreams();
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
    let (mut p, w) = started(|r| {
        r.workers = 1;
        routes(r, &["http://a"]);
        judged(r, policy(10, Some(Duration::from_secs(2))));
    });
    p.watch_upstreams();
    let acts = run_until(&mut p, Instant::ZERO);
    assert!(
        acts.iter().any(
            |a| matches!(a, ParentAction::ProbeUpstream { upstream: 0, url, path, within } if url == "http://a" && path == "/health" && *within == Duration::from_secs(2))
        ),
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

fn message(p: &mut Parent, worker: WorkerId, message: WorkerMessage) -> Vec<ParentAction> {
    p.handle(Instant::ZERO, Event::Message { worker, message });
    actions(p)
}

/// Reload to `urls`; the candidate (worker 2) becomes ready and is committed.
fn reload_to(p: &mut Parent, urls: &[&str]) -> WorkerId {
    reload_with(p, |next| routes(next, urls))
}

/// Reload to the committed configuration changed by `change` (one worker), and commit.
fn reload_with(p: &mut Parent, change: impl FnOnce(&mut RawConfig)) -> WorkerId {
    let mut next = p.supervisor().config().as_written();
    next.workers = 1;
    change(&mut next);
    p.handle(
        Instant::ZERO,
        Event::Command(Command::Reload {
            id: ReloadId(1),
            config: Box::new(next),
        }),
    );
    actions(p);
    let candidate = WorkerId(2);
    message(p, candidate, WorkerMessage::Prepared);
    message(p, candidate, WorkerMessage::Ready);
    assert_eq!(
        p.supervisor().generation(),
        Generation(2),
        "the reload commits"
    );
    candidate
}

#[test]
fn membership_rule_each_generation_hears_the_verdict_in_its_own_numbering() {
    let (mut p, old) = started(|r| {
        r.workers = 1;
        routes(r, &["http://a", "http://b"]);
        judged(r, policy(60, None));
    });
    p.watch_upstreams();
    // b (index 1 of generation 1) is down before the reload.
    report(&mut p, old, Instant::ZERO, 1, false);
    actions(&mut p);
    let new = reload_to(&mut p, &["http://c", "http://a"]);
    assert_eq!(
        p.generation_upstreams(Generation(2)),
        ["http://c", "http://a"]
    );
    // The new generation's index 1 is a: its failure is a's, whoever numbers it.
    report(&mut p, new, Instant::ZERO, 1, false);
    let sent = health_sent(&actions(&mut p));
    assert!(
        sent.contains(&(new, vec![1])),
        "membership rule: the new generation hears a (its index 1) down, and never b's verdict under c's index 0: {sent:?}"
    );
    assert!(
        sent.contains(&(old, vec![0, 1])),
        "membership rule: the draining generation hears a and b down in its own numbering: {sent:?}"
    );
    // The old worker is reaped: b leaves the table with its verdict.
    p.handle(Instant::ZERO, Event::ChannelClosed { worker: old });
    p.handle(
        Instant::ZERO,
        Event::Exited {
            worker: old,
            status: ExitStatus::Code(0),
        },
    );
    actions(&mut p);
    let members: Vec<&str> = p.upstream_health().expect("watched").members().collect();
    assert_eq!(
        members,
        ["http://a", "http://c"],
        "membership rule: an upstream no live generation names is dropped"
    );
    assert_eq!(
        p.upstream_health().expect("watched").down_urls(),
        ["http://a"]
    );
}

#[test]
fn membership_rule_a_removed_upstream_that_comes_back_starts_up() {
    let (mut p, old) = started(|r| {
        r.workers = 1;
        routes(r, &["http://a", "http://b"]);
        judged(r, policy(600, None));
    });
    p.watch_upstreams();
    report(&mut p, old, Instant::ZERO, 0, false);
    actions(&mut p);
    let new = reload_to(&mut p, &["http://b"]);
    p.handle(Instant::ZERO, Event::ChannelClosed { worker: old });
    p.handle(
        Instant::ZERO,
        Event::Exited {
            worker: old,
            status: ExitStatus::Code(0),
        },
    );
    actions(&mut p);
    assert!(
        p.upstream_health()
            .expect("watched")
            .id("http://a")
            .is_none()
    );
    // The new generation's index 0 is b, which never failed.
    let told: Vec<_> = health_sent(&actions(&mut p));
    assert!(
        told.iter().all(|(w, down)| *w != new || down.is_empty()),
        "membership rule: a's verdict never reaches the generation that dropped it: {told:?}"
    );
}

#[test]
fn policy_rule_the_judge_takes_the_committed_policy_and_keeps_its_verdicts() {
    let (mut p, old) = started(|r| {
        r.workers = 1;
        routes(r, &["http://a", "http://b"]);
        judged(r, policy(600, None));
    });
    p.watch_upstreams();
    report(&mut p, old, Instant::ZERO, 1, false);
    actions(&mut p);
    let new = reload_with(&mut p, |next| {
        judged(
            next,
            HealthPolicy {
                max_fails: 3,
                ..policy(5, None)
            },
        );
    });
    let judge = p.upstream_health().expect("judged");
    assert_eq!(
        (judge.policy().max_fails, judge.policy().fail_timeout),
        (3, Duration::from_secs(5)),
        "policy rule: the judge takes the committed configuration's policy"
    );
    assert_eq!(
        judge.down_urls(),
        ["http://b"],
        "policy rule: a reload keeps the verdicts given"
    );
    assert_eq!(
        judge.poll_timeout(),
        Some(Instant::ZERO + Duration::from_secs(5)),
        "policy rule: the new fail timeout counts from when b was marked down"
    );
    // Two failures of a under max_fails 3 mark nothing; the third does.
    report(&mut p, new, Instant::ZERO, 0, false);
    report(&mut p, new, Instant::ZERO, 0, false);
    assert!(!p.upstream_health().expect("judged").is_down_url("http://a"));
    report(&mut p, new, Instant::ZERO, 0, false);
    assert!(
        p.upstream_health().expect("judged").is_down_url("http://a"),
        "policy rule: the third failure in a row meets the new max_fails"
    );
}

#[test]
fn policy_rule_probes_turned_on_by_a_reload_go_out_with_the_new_path() {
    let (mut p, _old) = started(|r| {
        r.workers = 1;
        routes(r, &["http://a"]);
        judged(r, policy(10, None));
    });
    p.watch_upstreams();
    actions(&mut p);
    reload_with(&mut p, |next| {
        next.proxy.health = Some("/ready".to_owned());
        next.proxy.health_interval = 1.0;
    });
    p.handle_timeout(Instant::ZERO);
    let acts = actions(&mut p);
    assert!(
        acts.iter().any(|a| matches!(
            a,
            ParentAction::ProbeUpstream { url, path, within, .. }
                if url == "http://a" && path == "/ready" && *within == Duration::from_secs(1)
        )),
        "policy rule: probes turned on by a reload go out at once, on the committed path: {acts:?}"
    );
}

fn probe_clients_built(acts: &[ParentAction]) -> Vec<crate::config::ProbeClients> {
    acts.iter()
        .filter_map(|a| match a {
            ParentAction::BuildProbeClients(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn probe_client_rule_the_clients_are_built_from_the_configuration_at_the_start() {
    let (mut p, _w) = started(|r| {
        r.workers = 1;
        routes(r, &["https://a"]);
        r.proxy.connect_timeout = 2.0;
    });
    p.watch_upstreams();
    let built = probe_clients_built(&actions(&mut p));
    assert_eq!(
        built,
        [crate::config::ProbeClients {
            ca: None,
            connect_timeout: Duration::from_secs(2),
            upstream_host: false,
        }],
        "probe client rule: the probes' clients are built once, from the started configuration"
    );
}

#[test]
fn probe_client_rule_a_commit_with_a_new_ca_or_connect_timeout_builds_the_clients_again() {
    let (mut p, _w) = started(|r| {
        r.workers = 1;
        routes(r, &["https://a"]);
    });
    p.watch_upstreams();
    actions(&mut p);
    // A reload that changes only the routes' health threshold: the clients stay.
    let mut acts = Vec::new();
    let _ = reload_with_actions(&mut p, &mut acts, |next| next.proxy.max_fails = 2);
    assert!(
        probe_clients_built(&acts).is_empty(),
        "probe client rule: a commit that changes neither the CA, the connect timeout nor Host builds nothing: {acts:?}"
    );
    // A CA given: built again with it, in the commit's step.
    let mut acts = Vec::new();
    reload_with_actions(&mut p, &mut acts, |next| {
        next.proxy.ca = Some("/etc/ca.pem".into());
    });
    assert_eq!(
        probe_clients_built(&acts)
            .iter()
            .map(|c| c.ca.clone())
            .collect::<Vec<_>>(),
        [Some("/etc/ca.pem".into())],
        "probe client rule: the commit of a generation with a new CA builds the probes' clients with it"
    );
    // The same CA file named again: read again (its contents may have been replaced).
    let mut acts = Vec::new();
    reload_with_actions(&mut p, &mut acts, |next| next.proxy.max_fails = 3);
    assert_eq!(
        probe_clients_built(&acts).len(),
        1,
        "probe client rule: a CA file named at a commit is read again for the probes: {acts:?}"
    );
    // Another connect timeout, no CA.
    let mut acts = Vec::new();
    reload_with_actions(&mut p, &mut acts, |next| {
        next.proxy.ca = None;
        next.proxy.connect_timeout = 0.25;
    });
    assert_eq!(
        probe_clients_built(&acts),
        [crate::config::ProbeClients {
            ca: None,
            connect_timeout: Duration::from_millis(250),
            upstream_host: false,
        }],
        "probe client rule: the commit of a generation with a new connect timeout builds the probes' clients with it"
    );
    assert_eq!(
        p.probe_clients().map(|c| c.connect_timeout),
        Some(Duration::from_millis(250))
    );
}

/// As [`reload_with`] (each reload's candidate is the next worker id), keeping every
/// action of the reload's steps in `acts`.
fn reload_with_actions(
    p: &mut Parent,
    acts: &mut Vec<ParentAction>,
    change: impl FnOnce(&mut RawConfig),
) -> WorkerId {
    let mut next = p.supervisor().config().as_written();
    next.workers = 1;
    change(&mut next);
    let before = p.supervisor().generation();
    p.handle(
        Instant::ZERO,
        Event::Command(Command::Reload {
            id: ReloadId(before.0 + 10),
            config: Box::new(next),
        }),
    );
    acts.extend(actions(p));
    let candidate = acts
        .iter()
        .find_map(|a| match a {
            ParentAction::Supervisor(Action::Spawn { worker, .. }) => Some(*worker),
            _ => None,
        })
        .expect("a candidate is spawned");
    for m in [WorkerMessage::Prepared, WorkerMessage::Ready] {
        p.handle(
            Instant::ZERO,
            Event::Message {
                worker: candidate,
                message: m,
            },
        );
        acts.extend(actions(p));
    }
    assert_eq!(
        p.supervisor().generation(),
        Generation(before.0 + 1),
        "the reload commits"
    );
    candidate
}

#[test]
fn probe_client_rule_a_reload_that_does_not_commit_builds_nothing() {
    let (mut p, _w) = started(|r| {
        r.workers = 1;
        routes(r, &["https://a"]);
    });
    p.watch_upstreams();
    actions(&mut p);
    let mut next = p.supervisor().config().as_written();
    next.proxy.ca = Some("/etc/new-ca.pem".into());
    next.proxy.connect_timeout = 0.5;
    p.handle(
        Instant::ZERO,
        Event::Command(Command::Reload {
            id: ReloadId(7),
            config: Box::new(next),
        }),
    );
    let mut acts = actions(&mut p);
    let candidate = acts
        .iter()
        .find_map(|a| match a {
            ParentAction::Supervisor(Action::Spawn { worker, .. }) => Some(*worker),
            _ => None,
        })
        .expect("a candidate is spawned");
    // The candidate dies before it is ready: the reload fails, the generation stays.
    p.handle(Instant::ZERO, Event::ChannelClosed { worker: candidate });
    p.handle(
        Instant::ZERO,
        Event::Exited {
            worker: candidate,
            status: ExitStatus::Code(1),
        },
    );
    acts.extend(run_until(&mut p, Instant::from_nanos(2_000_000_000)));
    assert_eq!(
        p.supervisor().generation(),
        Generation(1),
        "the reload does not commit"
    );
    assert!(
        probe_clients_built(&acts).is_empty(),
        "probe client rule: the probes' clients follow the committed configuration only, not a reload that failed: {acts:?}"
    );
    assert_eq!(
        p.probe_clients().map(|c| (c.ca.clone(), c.connect_timeout)),
        Some((None, Duration::from_secs(5))),
        "probe client rule: the clients stay as the committed configuration gives them"
    );
}
