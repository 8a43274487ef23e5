use super::*;

fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

fn passive(max_fails: u32) -> UpstreamHealth {
    UpstreamHealth::new(
        3,
        HealthPolicy {
            max_fails,
            fail_timeout: Duration::from_secs(10),
            probe_interval: None,
        },
        at(0),
    )
}

fn probed() -> UpstreamHealth {
    UpstreamHealth::new(
        2,
        HealthPolicy {
            max_fails: 2,
            fail_timeout: Duration::from_secs(10),
            probe_interval: Some(Duration::from_secs(5)),
        },
        at(0),
    )
}

#[test]
fn max_fails_in_a_row_mark_an_upstream_down_and_a_success_between_clears_the_run() {
    let mut h = passive(3);
    h.reported(at(1), 1, false);
    h.reported(at(2), 1, false);
    h.reported(at(3), 1, true);
    h.reported(at(4), 1, false);
    h.reported(at(5), 1, false);
    assert!(
        !h.is_down(1) && !h.take_changed(),
        "health rule: two failures after a success are not three in a row"
    );
    h.reported(at(6), 1, false);
    assert!(
        h.is_down(1),
        "health rule: the third failure in a row marks it down"
    );
    assert!(h.take_changed(), "the change is announced");
    assert!(!h.take_changed(), "once");
    assert_eq!(h.down(), vec![1]);
}

#[test]
fn without_probes_a_down_upstream_is_tried_again_after_fail_timeout() {
    let mut h = passive(1);
    h.reported(at(1000), 0, false);
    assert!(h.is_down(0));
    h.take_changed();
    assert_eq!(
        h.poll_timeout(),
        Some(at(11_000)),
        "the verdict runs out then"
    );
    h.handle_timeout(at(10_999));
    assert!(h.is_down(0), "health rule: down for the whole fail_timeout");
    h.handle_timeout(at(11_000));
    assert!(
        !h.is_down(0) && h.take_changed(),
        "health rule: tried again after fail_timeout"
    );
    assert_eq!(h.poll_timeout(), None);
}

#[test]
fn without_probes_a_reported_success_brings_an_upstream_back_at_once() {
    let mut h = passive(1);
    h.reported(at(0), 2, false);
    h.reported(at(5), 2, true);
    assert!(!h.is_down(2));
}

#[test]
fn with_probes_only_a_passing_probe_brings_an_upstream_back() {
    let mut h = probed();
    h.handle_timeout(at(0));
    assert_eq!(
        h.take_probes(),
        vec![0, 1],
        "every upstream is probed at the start"
    );
    assert_eq!(h.take_probes(), Vec::<u16>::new());
    h.probed(at(10), 0, true);
    h.probed(at(10), 1, false);
    assert!(!h.is_down(1), "one failed probe of two allowed");
    h.reported(at(20), 1, false);
    assert!(
        h.is_down(1),
        "health rule: a probe's failure and a worker's make two in a row"
    );
    h.reported(at(30), 1, true);
    assert!(
        h.is_down(1),
        "health rule: with probes a worker's success (perhaps a request begun before) does not bring it back"
    );
    assert_eq!(
        h.poll_timeout(),
        Some(at(5010)),
        "the next probes are due an interval after the last came back"
    );
    h.handle_timeout(at(5010));
    assert_eq!(h.take_probes(), vec![0, 1]);
    assert_eq!(h.poll_timeout(), None, "both probes in flight");
    h.probed(at(5020), 1, true);
    assert!(!h.is_down(1), "health rule: a passing probe brings it back");
}

#[test]
fn an_index_no_route_has_is_ignored() {
    let mut h = passive(1);
    h.reported(at(0), 7, false);
    h.probed(at(0), 9, false);
    assert!(h.down().is_empty() && !h.take_changed());
}
