//! The counters metrics show: a reaped worker's request totals stay in the service's,
//! exits and restarts are counted by reason, reloads by outcome.

use super::*;
use crate::request_stats::{RequestStats, RouteClass, method_index};

fn beat_with(h: &mut Harness, w: WorkerId, gets: u64) -> Vec<Action> {
    let mut stats = RequestStats::default();
    for _ in 0..gets {
        stats.record(method_index("GET"), RouteClass::Static, 200, 10, 100);
    }
    h.msg(
        w,
        WorkerMessage::Heartbeat {
            requests: gets,
            connections: 0,
            requests_in_progress: 0,
            memory: 0,
            stats: std::sync::Arc::new(stats),
        },
    )
}

#[test]
fn a_crashed_workers_requests_stay_counted_and_its_restart_is_counted_by_reason() {
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    beat_with(&mut h, ws[0], 3);
    beat_with(&mut h, ws[1], 4);
    // A later beat carries totals: it replaces the earlier one, never adds to it.
    beat_with(&mut h, ws[0], 5);
    assert_eq!(h.sup.request_stats().total(), 9);
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert_eq!(
        h.sup.request_stats().total(),
        9,
        "the crashed worker's 5 stay"
    );
    assert_eq!(h.sup.request_stats().bytes_sent, 90);
    let tally = h.sup.tally();
    let unexpected = super::super::tally::reason_index(ExitReason::UnexpectedExit);
    assert_eq!(tally.exits[unexpected], 1);
    assert_eq!(tally.restarts[unexpected], 1);
    assert_eq!(tally.exits.iter().sum::<u64>(), 1);
}

#[test]
fn a_killed_workers_final_counts_add_what_it_counted_after_its_last_heartbeat() {
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    beat_with(&mut h, ws[0], 3);
    beat_with(&mut h, ws[1], 4);
    // Worker 0 answered 40 requests in all, 37 of them after its last beat, then was
    // killed: its scoreboard holds the 40.
    let mut last = RequestStats::default();
    for _ in 0..40 {
        last.record(method_index("GET"), RouteClass::Static, 200, 10, 100);
    }
    h.on(Event::FinalCounts {
        worker: ws[0],
        counts: Box::new(FinalCounts {
            stats: last,
            ..FinalCounts::default()
        }),
    });
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    let stats = h.sup.request_stats();
    assert_eq!(
        stats.total(),
        44,
        "the killed worker's last counts (40) are not lost: 40 + the live worker's 4"
    );
    assert_eq!(stats.bytes_sent, 440);
    assert_eq!(stats.duration_count(RouteClass::Static), 44);
    assert_eq!(h.sup.tally().requests_recovered_at_exit, 37);
    // Final counts lower than a heartbeat's (a worker that wrote over its scoreboard)
    // never take counts back, and a worker already reaped is left alone.
    h.on(Event::FinalCounts {
        worker: ws[1],
        counts: Box::default(),
    });
    h.on(Event::FinalCounts {
        worker: ws[0],
        counts: Box::default(),
    });
    assert_eq!(
        h.sup.request_stats().total(),
        44,
        "final counts lower than a heartbeat's never take counts back"
    );
    assert_eq!(h.sup.tally().requests_recovered_at_exit, 37);
}

#[test]
fn reloads_are_counted_by_outcome() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(RawConfig {
            workers: 0,
            ..RawConfig::default()
        }),
    }));
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::ReloadRejected { .. }))
    );
    assert_eq!(h.sup.tally().reloads_rejected, 1);
    assert_eq!(h.sup.tally().reloads_committed, 0);
}

#[test]
fn an_unreadable_reload_is_rejected_counted_and_reported_with_its_reason() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    let acts = h.on(Event::Command(Command::ReloadUnreadable {
        id: ReloadId(7),
        message: "show_hidden cannot change on reload".into(),
    }));
    assert!(acts.iter().any(|a| matches!(
        a,
        Action::ReloadRejected { reload: ReloadId(7), message } if message.contains("show_hidden")
    )));
    assert_eq!(h.sup.tally().reloads_rejected, 1);
    assert!(
        !acts
            .iter()
            .any(|a| matches!(a, Action::ReloadStarted { .. } | Action::Spawn { .. })),
        "nothing starts: {acts:?}"
    );
}

fn beat_connections(h: &mut Harness, w: WorkerId, connections: u32) {
    beat_load(h, w, connections, 0);
}

fn beat_load(h: &mut Harness, w: WorkerId, connections: u32, requests_in_progress: u32) {
    h.msg(
        w,
        WorkerMessage::Heartbeat {
            requests: 0,
            connections,
            requests_in_progress,
            memory: 0,
            stats: Default::default(),
        },
    );
}

#[test]
fn open_connections_are_the_latest_beats_of_the_workers_alive() {
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    assert_eq!(h.sup.open_connections(), 0);
    beat_connections(&mut h, ws[0], 7);
    beat_connections(&mut h, ws[1], 5);
    // A later beat says how many now: it replaces the earlier figure.
    beat_connections(&mut h, ws[0], 3);
    assert_eq!(h.sup.open_connections(), 8);
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert_eq!(
        h.sup.open_connections(),
        5,
        "a reaped worker's connections are gone with it"
    );
}

#[test]
fn requests_in_progress_are_the_latest_beats_of_the_workers_alive() {
    let mut h = harness(Platform::Posix, |_| {});
    let ws = h.start();
    assert_eq!(h.sup.requests_in_progress(), 0);
    beat_load(&mut h, ws[0], 7, 4);
    beat_load(&mut h, ws[1], 5, 2);
    // A later beat says how many now: it replaces the earlier figure.
    beat_load(&mut h, ws[0], 7, 1);
    assert_eq!(h.sup.requests_in_progress(), 3);
    assert_eq!(
        h.sup
            .status(h.now)
            .workers
            .iter()
            .map(|w| w.requests_in_progress)
            .sum::<u32>(),
        3,
        "the status shows each worker's figure"
    );
    h.on(Event::Exited {
        worker: ws[0],
        status: ExitStatus::Signal(9),
    });
    assert_eq!(
        h.sup.requests_in_progress(),
        2,
        "a reaped worker's requests are gone with it"
    );
}

#[test]
fn each_exit_reason_is_counted_in_its_own_place() {
    for (i, reason) in ExitReason::ALL.into_iter().enumerate() {
        assert_eq!(
            super::super::tally::reason_index(reason),
            i,
            "tally rule: {reason:?} is counted at its place in ExitReason::ALL (the metrics read the counters by it)"
        );
    }
}

#[test]
fn live_workers_are_counted_by_their_state() {
    let mut h = harness(Platform::Posix, |_| {});
    h.start();
    let mut want = [0; WorkerState::ALL.len()];
    let ready = WorkerState::ALL
        .iter()
        .position(|s| *s == WorkerState::Ready)
        .expect("listed");
    want[ready] = 2;
    assert_eq!(
        h.sup.workers_by_state(),
        want,
        "state count rule: the two ready workers, at Ready's place in WorkerState::ALL"
    );
}
