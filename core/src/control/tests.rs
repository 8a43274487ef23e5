//! Every operator request answered once, by the core, in every state the service is in;
//! the driver only relays (decision 0071).

use super::*;
use crate::parent::{Parent, ParentAction};
use crate::proto::WorkerMessage;
use crate::supervisor::{Action, Event, Platform};
use crate::{Instant, RequestId, WorkerId};

fn parent(edit: impl FnOnce(&mut RawConfig)) -> Parent {
    let mut raw = RawConfig::default();
    edit(&mut raw);
    Parent::new(raw.validate().expect("valid"), Platform::Posix, [5; 32])
}

fn actions(p: &mut Parent) -> Vec<ParentAction> {
    std::iter::from_fn(|| p.poll_action()).collect()
}

/// The answers among `acts`, by request.
fn answers(acts: &[ParentAction]) -> Vec<(u64, Answer)> {
    acts.iter()
        .filter_map(|a| match a {
            ParentAction::Answer { request, answer } => Some((request.0, answer.clone())),
            _ => None,
        })
        .collect()
}

fn ask(p: &mut Parent, id: u64, request: Request) -> Vec<ParentAction> {
    p.handle(
        Instant::ZERO,
        Event::Control {
            id: RequestId(id),
            request,
        },
    );
    actions(p)
}

fn reload(id: u64, workers: i64) -> Request {
    Request::Reload {
        reload: crate::ReloadId(id),
        config: Ok(Box::new(RawConfig {
            workers,
            ..RawConfig::default()
        })),
    }
}

/// PREPARED then READY from each worker spawned in `acts`.
fn boot(p: &mut Parent, acts: &[ParentAction]) -> Vec<ParentAction> {
    let spawned: Vec<WorkerId> = acts
        .iter()
        .filter_map(|a| match a {
            ParentAction::Supervisor(Action::Spawn { worker, .. }) => Some(*worker),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for message in [WorkerMessage::Prepared, WorkerMessage::Ready] {
        for &worker in &spawned {
            let message = message.clone();
            p.handle(Instant::ZERO, Event::Message { worker, message });
            out.extend(actions(p));
        }
    }
    out
}

fn refused(why: Refusal) -> Answer {
    Answer::Refused(why)
}

#[test]
fn every_request_is_answered_once_by_the_core_in_every_state() {
    let mut p = parent(|_| {});
    p.handle(Instant::ZERO, Event::Start);
    let first = actions(&mut p);
    // Starting: nothing serves to be recycled. The core used to ignore such a recycle,
    // and the driver answered `ok` for it.
    assert_eq!(
        answers(&ask(&mut p, 1, Request::Recycle)),
        [(1, refused(Refusal::NotServing))]
    );
    assert_eq!(
        answers(&ask(&mut p, 2, Request::ReopenLogs)),
        [(2, refused(Refusal::NoAccessLog))]
    );
    let wall = crate::acme::UnixTime(0);
    assert_eq!(
        answers(&ask(&mut p, 3, Request::AcmeRenew { wall })),
        [(3, refused(Refusal::NoAcme))]
    );
    boot(&mut p, &first);
    // Serving: a recycle starts, answered at once.
    let acts = ask(&mut p, 4, Request::Recycle);
    assert_eq!(answers(&acts), [(4, Answer::Accepted)]);
    assert!(p.supervisor().recycle_in_flight(), "{acts:?}");
    // A stop: its answer comes after the listeners it closed.
    let acts = ask(&mut p, 5, Request::Stop);
    let close = acts
        .iter()
        .position(|a| *a == ParentAction::Supervisor(Action::CloseListeners));
    let answer = acts
        .iter()
        .position(|a| matches!(a, ParentAction::Answer { .. }));
    assert!(
        close.expect("closed") < answer.expect("answered"),
        "{acts:?}"
    );
    assert_eq!(answers(&acts), [(5, Answer::Accepted)]);
    // Closing: what would start work is refused with why; a stop is already done.
    assert_eq!(
        answers(&ask(&mut p, 6, reload(6, 2))),
        [(6, refused(Refusal::Stopping))]
    );
    assert_eq!(
        answers(&ask(&mut p, 7, Request::Recycle)),
        [(7, refused(Refusal::Stopping))]
    );
    assert_eq!(
        answers(&ask(&mut p, 8, Request::Stop)),
        [(8, Answer::AlreadyStopping)]
    );
    assert_eq!(
        p.supervisor().tally().reloads_rejected,
        0,
        "a closing refusal is no reload"
    );
}

#[test]
fn a_reload_is_answered_at_its_commit_its_rejection_or_the_stop_that_ends_it() {
    let mut p = parent(|_| {});
    p.handle(Instant::ZERO, Event::Start);
    let first = actions(&mut p);
    boot(&mut p, &first);
    // Committed: the answer names the generation, after the commit.
    let acts = ask(&mut p, 1, reload(1, 2));
    assert!(
        answers(&acts).is_empty(),
        "answered at its outcome: {acts:?}"
    );
    assert_eq!(p.awaiting_answers(), 1);
    let acts = boot(&mut p, &acts);
    assert_eq!(
        answers(&acts),
        [(
            1,
            Answer::Committed {
                generation: crate::Generation(2)
            }
        )]
    );
    // Rejected by the supervisor (a second reload while one is in flight), with its words.
    let pending = ask(&mut p, 2, reload(2, 1));
    assert!(answers(&pending).is_empty());
    let acts = ask(&mut p, 3, reload(3, 1));
    assert_eq!(
        answers(&acts),
        [(
            3,
            refused(Refusal::Reload("a reload is already in progress".into()))
        )]
    );
    // A configuration the driver could not read: rejected and answered alike.
    let acts = ask(
        &mut p,
        4,
        Request::Reload {
            reload: crate::ReloadId(4),
            config: Err("line 3: expected a number".into()),
        },
    );
    assert_eq!(
        answers(&acts),
        [(
            4,
            refused(Refusal::Reload("line 3: expected a number".into()))
        )]
    );
    // The stop ends the reload still rolling out: it is answered, with the stop's reason.
    let acts = ask(&mut p, 5, Request::Stop);
    assert_eq!(
        answers(&acts),
        [
            (5, Answer::Accepted),
            (
                2,
                refused(Refusal::Reload("the service is stopping".into()))
            )
        ]
    );
    assert_eq!(p.awaiting_answers(), 0);
}

#[test]
fn a_feature_change_refused_by_the_parent_is_answered_too() {
    let mut p = parent(|_| {});
    p.handle(Instant::ZERO, Event::Start);
    let first = actions(&mut p);
    boot(&mut p, &first);
    let mut next = RawConfig::default();
    next.features.mdns = true;
    let acts = ask(
        &mut p,
        1,
        Request::Reload {
            reload: crate::ReloadId(1),
            config: Ok(Box::new(next)),
        },
    );
    assert!(
        matches!(&answers(&acts)[..], [(1, Answer::Refused(Refusal::Reload(m)))] if m.contains("features")),
        "{acts:?}"
    );
}

#[test]
fn logs_reopen_while_stopping_and_a_renewal_needs_acme() {
    let mut p = parent(|raw| raw.features.access_log = true);
    p.handle(Instant::ZERO, Event::Start);
    let first = actions(&mut p);
    boot(&mut p, &first);
    ask(&mut p, 1, Request::Stop);
    let acts = ask(&mut p, 2, Request::ReopenLogs);
    assert_eq!(answers(&acts), [(2, Answer::Accepted)]);
    assert!(acts.contains(&ParentAction::ReopenAccessLog), "{acts:?}");
}

#[test]
fn the_rule_refuses_nothing_it_need_not() {
    let view = |stopping, serving| ServiceView {
        stopping,
        serving,
        access_log: true,
        acme: true,
    };
    let wall = crate::acme::UnixTime(0);
    let every = || {
        [
            Request::Stop,
            Request::Recycle,
            reload(1, 1),
            Request::ReopenLogs,
            Request::AcmeRenew { wall },
        ]
    };
    for request in every() {
        let name = request.name();
        let decided = decide(request, view(false, true));
        assert!(
            !matches!(decided, Decision::Answer(_)),
            "{name} refused while serving: {decided:?}"
        );
    }
    for request in every() {
        let name = request.name();
        match (name, decide(request, view(true, false))) {
            ("stop", Decision::Answer(Answer::AlreadyStopping)) => {}
            ("reopen-logs", Decision::CarryOut(Carry::ReopenLogs, Answer::Accepted)) => {}
            (_, Decision::Answer(Answer::Refused(Refusal::Stopping))) => {}
            (name, other) => panic!("{name} while stopping: {other:?}"),
        }
    }
}

/// The answer rule as an operator reads it: `ok` is true for every answer but a refusal
/// (the control protocol's `"ok"`), and each answer prints what happened, a refusal its
/// reason.
#[test]
fn an_answer_says_whether_it_was_carried_out_and_why_not() {
    let generation = crate::ids::Generation(3);
    let cases = [
        (Answer::Accepted, true, "accepted".to_string()),
        (
            Answer::AlreadyStopping,
            true,
            "already stopping".to_string(),
        ),
        (
            Answer::Committed { generation },
            true,
            "committed as generation 3".to_string(),
        ),
        (
            refused(Refusal::NoAcme),
            false,
            format!("refused: {}", Refusal::NoAcme),
        ),
    ];
    for (answer, ok, text) in cases {
        assert_eq!(
            answer.ok(),
            ok,
            "answer rule: {answer:?} is ok only if not refused"
        );
        assert_eq!(answer.to_string(), text, "answer rule: {answer:?} printed");
    }
    assert!(refused(Refusal::NoAcme).to_string().contains("--acme"));
}
