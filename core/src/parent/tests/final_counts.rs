//! A killed worker's final counts (its scoreboard, decision 0083) reach both machines
//! that own what they hold: the request counters the supervisor's, the log lines the
//! broker's.

use super::*;

#[test]
fn a_killed_workers_unsent_lines_and_requests_are_counted_from_its_final_counts() {
    let (mut p, w) = started(|r| r.features.access_log = true);
    p.handle(
        Instant::ZERO,
        Event::Message {
            worker: w,
            message: WorkerMessage::Broker {
                id: 1,
                request: BrokerRequest::AppendLog {
                    record: "a\nb\n".into(),
                },
            },
        },
    );
    let mut stats = crate::request_stats::RequestStats::default();
    stats.record(0, crate::request_stats::RouteClass::Static, 200, 1, 1);
    p.handle(
        Instant::ZERO,
        Event::FinalCounts {
            worker: w,
            counts: Box::new(crate::supervisor::FinalCounts {
                stats,
                log_lines: 5,
                log_dropped: 0,
            }),
        },
    );
    p.handle(
        Instant::ZERO,
        Event::Exited {
            worker: w,
            status: ExitStatus::Signal(9),
        },
    );
    assert_eq!(
        p.broker().log().discarded(),
        3,
        "5 lines produced, 2 received: 3 lost with the worker"
    );
    assert_eq!(
        p.supervisor().request_stats().total(),
        1,
        "the request its final counts hold"
    );
    p.check_invariants().expect("invariants");
}
