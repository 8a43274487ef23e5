//! The intake rule: what one look at the host found is taken in messages first, then
//! channel ends, then final counts, then exits, whatever order the driver found it in.

use super::*;
use crate::supervisor::{FailureReason, ServiceState};

/// Every order of `found` that keeps each source's own order (worker `a`'s channel;
/// worker `b`'s channel; the reaper), as a poll may report them.
fn interleavings(sources: &[Vec<Event>]) -> Vec<Vec<Event>> {
    if sources.iter().all(Vec::is_empty) {
        return vec![Vec::new()];
    }
    let mut all = Vec::new();
    for (i, source) in sources.iter().enumerate() {
        let Some((first, rest)) = source.split_first() else {
            continue;
        };
        let mut left = sources.to_vec();
        left[i] = rest.to_vec();
        for mut tail in interleavings(&left) {
            tail.insert(0, first.clone());
            all.push(tail);
        }
    }
    all
}

/// A look's events by kind and worker, for messages.
fn shown(found: &[Event]) -> String {
    let names: Vec<String> = found
        .iter()
        .map(|e| match e {
            Event::Message { worker, message } => {
                let kind = format!("{message:?}");
                let kind = kind
                    .split([' ', '(', '{'])
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                format!("{kind} from {worker}")
            }
            Event::ChannelClosed { worker } => format!("EOF of {worker}"),
            Event::FinalCounts { worker, .. } => format!("final counts of {worker}"),
            Event::Exited { worker, .. } => format!("exit of {worker}"),
            other => format!("{other:?}"),
        })
        .collect();
    names.join(", ")
}

fn message(worker: WorkerId, message: WorkerMessage) -> Event {
    Event::Message { worker, message }
}

/// Two candidates of the first generation, both committed and one of them READY.
fn first_rollout_one_ready() -> (Parent, [WorkerId; 2]) {
    let raw = RawConfig {
        workers: 2,
        ..RawConfig::default()
    };
    let mut p = Parent::new(raw.validate().expect("valid"), Platform::Posix, [3; 32]);
    let t = Instant::ZERO;
    p.handle(t, Event::Start);
    let ws = [WorkerId(1), WorkerId(2)];
    for w in ws {
        p.handle(t, message(w, WorkerMessage::Prepared));
    }
    p.handle(t, message(ws[1], WorkerMessage::Ready));
    actions(&mut p);
    (p, ws)
}

/// The look that found worker 1's READY, and worker 2's end and death: in every order a
/// poll and a reap may report them, the first generation is up (both READY before the
/// crash was learned) and the crash is a member's, replaced — never a failed start.
#[test]
fn intake_rule_a_ready_found_with_another_workers_crash_completes_the_rollout_first() {
    let (a, b) = (WorkerId(1), WorkerId(2));
    let sources = [
        vec![message(a, WorkerMessage::Ready)],
        vec![Event::ChannelClosed { worker: b }],
        vec![Event::Exited {
            worker: b,
            status: ExitStatus::Signal(9),
        }],
    ];
    let orders = interleavings(&sources);
    assert_eq!(orders.len(), 6);
    for found in orders {
        let (mut p, _) = first_rollout_one_ready();
        let shown = shown(&found);
        p.intake(Instant::from_nanos(10_000_000), found);
        assert!(
            p.supervisor()
                .failure()
                .is_none_or(|(r, _)| r != FailureReason::StartupFailure),
            "intake rule: a READY found in the same look as another candidate's crash was \
             judged after it, failing the start ({:?}); found {shown}",
            p.supervisor().failure()
        );
        assert_eq!(
            p.supervisor().state(),
            ServiceState::Ready,
            "intake rule: the first generation is up (both READY before the crash was \
             learned); found {shown}"
        );
        // Replaced after its backoff.
        let mut done = actions(&mut p);
        done.extend(run_until(&mut p, Instant::from_nanos(5_000_000_000)));
        let respawned = done
            .iter()
            .any(|a| matches!(a, ParentAction::Supervisor(Action::Spawn { .. })));
        assert!(
            respawned,
            "intake rule: the crashed member is replaced; found {shown}"
        );
        p.check_invariants().expect("invariants");
    }
}

/// A killed worker's last lines and its final counts found in one look: whatever the
/// order, the lines it sent are written and only the ones it never sent are counted lost.
#[test]
fn intake_rule_final_counts_are_taken_after_everything_the_dead_worker_sent() {
    let sent = message(
        WorkerId(1),
        WorkerMessage::Broker {
            id: 1,
            request: BrokerRequest::AppendLog {
                record: "a\nb\n".into(),
            },
        },
    );
    let w = WorkerId(1);
    let counts = Event::FinalCounts {
        worker: w,
        counts: Box::new(crate::supervisor::FinalCounts {
            log_lines: 5,
            ..Default::default()
        }),
    };
    let exited = Event::Exited {
        worker: w,
        status: ExitStatus::Signal(9),
    };
    // The reaper's two in their order, the channel's message anywhere among them.
    let sources = [vec![sent], vec![counts, exited]];
    for found in interleavings(&sources) {
        let (mut p, _) = started(|r| r.features.access_log = true);
        let shown = shown(&found);
        p.intake(Instant::ZERO, found);
        let written = p.take_log_batch(16).len();
        assert_eq!(
            (written, p.broker().log().discarded()),
            (1, 3),
            "intake rule: a dead worker's final counts are compared with everything it \
             sent (one record of 2 lines written, 3 of 5 lost); found {shown}"
        );
    }
}
