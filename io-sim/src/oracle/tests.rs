//! Each rule of the oracle, broken alone in a sequence of orders and reads, is reported by
//! its name; the same sequence kept is not.

use super::*;
use servery_core::config::RawConfig;

fn config(workers: i64) -> ValidConfig {
    let mut raw = RawConfig {
        workers,
        ..RawConfig::default()
    };
    raw.recovery.restart_backoff_initial = 0.1;
    raw.validate().expect("valid")
}

fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

/// Two workers of generation 1, committed and ready at 10 ms.
fn two_ready() -> LifecycleOracle {
    let c = config(2);
    let mut o = LifecycleOracle::default();
    for (id, slot) in [(1, 0), (2, 1)] {
        o.spawned(at(0), WorkerId(id), slot, 1, &c);
        o.commit_sent(WorkerId(id));
        o.ready_read(at(10), WorkerId(id));
    }
    o.generation_committed(Instant::ZERO, 1);
    o
}

fn only_violation(o: &mut LifecycleOracle) -> String {
    let v = o.take_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    v[0].clone()
}

#[test]
fn a_recycle_drains_the_old_worker_only_after_its_replacements_ready() {
    let c = config(2);
    for ready_first in [true, false] {
        let mut o = two_ready();
        o.spawned(at(100), WorkerId(3), 0, 1, &c);
        o.commit_sent(WorkerId(3));
        if ready_first {
            o.ready_read(at(150), WorkerId(3));
        }
        o.drain_sent(at(150), WorkerId(1));
        let v = o.take_violations();
        if ready_first {
            assert!(v.is_empty(), "{v:?}");
        } else {
            assert_eq!(v.len(), 1, "{v:?}");
            assert!(v[0].starts_with("capacity rule: w1"), "{}", v[0]);
        }
    }
}

#[test]
fn a_reload_drains_the_old_generation_only_after_all_of_the_new_is_ready() {
    let c = config(2);
    let mut o = two_ready();
    for (id, slot) in [(3, 0), (4, 1)] {
        o.spawned(at(100), WorkerId(id), slot, 2, &c);
        o.commit_sent(WorkerId(id));
    }
    o.ready_read(at(150), WorkerId(3));
    o.drain_sent(at(150), WorkerId(1));
    assert!(only_violation(&mut o).starts_with("capacity rule: w1 (generation 1, slot 0)"));
    o.ready_read(at(160), WorkerId(4));
    o.drain_sent(at(160), WorkerId(2));
    assert!(o.take_violations().is_empty());
}

#[test]
fn a_generation_never_has_more_than_n_plus_one_workers_not_being_ended() {
    let c = config(2);
    let mut o = two_ready();
    o.spawned(at(100), WorkerId(3), 0, 1, &c);
    assert!(o.take_violations().is_empty());
    o.spawned(at(100), WorkerId(4), 1, 1, &c);
    assert!(only_violation(&mut o).starts_with("surge rule (N + 1)"));
}

#[test]
fn a_lost_members_replacement_waits_its_backoff_and_no_longer() {
    let c = config(2);
    for (spawn_ms, rule_broken) in [(1099, true), (1100, false), (1101, false), (1102, true)] {
        let mut o = two_ready();
        o.reaped_read(at(1000), WorkerId(1));
        o.spawned(at(spawn_ms), WorkerId(3), 0, 1, &c);
        let v = o.take_violations();
        assert_eq!(v.len(), usize::from(rule_broken), "{spawn_ms}: {v:?}");
        if rule_broken {
            assert!(v[0].starts_with("backoff rule: w3 (slot 0)"), "{}", v[0]);
        }
    }
}

#[test]
fn the_second_loss_in_a_row_waits_twice_as_long_and_a_stop_ends_every_wait() {
    let c = config(2);
    let mut o = two_ready();
    o.reaped_read(at(1000), WorkerId(1));
    o.spawned(at(1100), WorkerId(3), 0, 1, &c);
    o.reaped_read(at(1200), WorkerId(3));
    o.spawned(at(1300), WorkerId(4), 0, 1, &c);
    assert!(only_violation(&mut o).contains("before 1400 ms"));
    o.reaped_read(at(2000), WorkerId(4));
    o.stopping();
    o.spawned(at(2000), WorkerId(5), 0, 1, &c);
    assert!(o.take_violations().is_empty());
}

#[test]
fn a_failure_the_policy_did_not_call_for_breaks_the_accounting_rule() {
    let mut o = two_ready();
    o.reaped_read(at(1000), WorkerId(1));
    o.service_failed(at(1000), FailureReason::RestartLimit);
    assert!(only_violation(&mut o).starts_with("restart accounting rule"));
}

#[test]
fn a_drained_workers_reap_is_no_loss() {
    let c = config(2);
    let mut o = two_ready();
    o.spawned(at(100), WorkerId(3), 0, 1, &c);
    o.commit_sent(WorkerId(3));
    o.ready_read(at(150), WorkerId(3));
    o.drain_sent(at(150), WorkerId(1));
    o.reaped_read(at(300), WorkerId(1));
    assert_eq!(o.model.granted, 0);
    assert!(o.due.is_empty());
    assert!(o.take_violations().is_empty());
}

/// A worker whose recycle replacement has sent READY no longer holds its slot: dying
/// before its DRAIN goes out costs no restart attempt (the supervisor swapped it out at
/// the READY). Dying before the replacement's READY does cost one.
#[test]
fn an_old_worker_dying_after_its_replacements_ready_is_no_loss() {
    let c = config(2);
    for replacement_ready in [true, false] {
        let mut o = two_ready();
        o.spawned(at(100), WorkerId(3), 0, 1, &c);
        o.commit_sent(WorkerId(3));
        if replacement_ready {
            o.ready_read(at(150), WorkerId(3));
        }
        o.reaped_read(at(160), WorkerId(1));
        assert_eq!(
            o.model.granted,
            u64::from(!replacement_ready),
            "replacement ready: {replacement_ready}"
        );
        assert!(o.take_violations().is_empty());
    }
}
