use super::*;

fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

/// Members `http://u0`, `http://u1`, ... with ids 0, 1, ...
fn with_members(count: u32, policy: HealthPolicy) -> UpstreamHealth {
    let mut h = UpstreamHealth::new(policy);
    let urls: Vec<String> = (0..count).map(|i| format!("http://u{i}")).collect();
    h.follow(at(0), urls.iter().map(String::as_str));
    h
}

fn passive(max_fails: u32) -> UpstreamHealth {
    with_members(
        3,
        HealthPolicy {
            max_fails,
            fail_timeout: Duration::from_secs(10),
            probe_interval: None,
        },
    )
}

fn probed() -> UpstreamHealth {
    with_members(
        2,
        HealthPolicy {
            max_fails: 2,
            fail_timeout: Duration::from_secs(10),
            probe_interval: Some(Duration::from_secs(5)),
        },
    )
}

fn ids(probes: Vec<(u32, String)>) -> Vec<u32> {
    probes.into_iter().map(|(id, _)| id).collect()
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
        vec![(0, "http://u0".to_owned()), (1, "http://u1".to_owned())],
        "every upstream is probed at the start, by its URL"
    );
    assert_eq!(ids(h.take_probes()), Vec::<u32>::new());
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
    assert_eq!(ids(h.take_probes()), vec![0, 1]);
    assert_eq!(h.poll_timeout(), None, "both probes in flight");
    h.probed(at(5020), 1, true);
    assert!(!h.is_down(1), "health rule: a passing probe brings it back");
}

#[test]
fn an_id_no_member_has_is_ignored() {
    let mut h = passive(1);
    h.reported(at(0), 7, false);
    h.probed(at(0), 9, false);
    assert!(h.down().is_empty() && !h.take_changed());
}

#[test]
fn membership_rule_a_removed_upstream_is_forgotten_with_its_verdict() {
    let mut h = passive(1);
    h.reported(at(0), 1, false);
    assert!(h.is_down_url("http://u1"));
    h.take_changed();
    // u1 leaves; u3 enters; u0 and u2 stay.
    h.follow(at(1), ["http://u0", "http://u2", "http://u3"]);
    assert!(
        h.take_changed(),
        "membership rule: dropping a down upstream changes the down set"
    );
    assert!(
        h.down_urls().is_empty() && h.id("http://u1").is_none(),
        "membership rule: a removed upstream's verdict is forgotten"
    );
    assert_eq!(h.id("http://u3"), Some(3), "a new member takes a new id");
    // It comes back: a new member again, up, under an id never given before.
    h.follow(at(2), ["http://u1"]);
    assert!(
        !h.is_down_url("http://u1"),
        "membership rule: an upstream that enters starts up, whatever it was before"
    );
    assert_eq!(h.id("http://u1"), Some(4));
    h.reported(at(3), 1, false);
    assert!(
        h.down().is_empty(),
        "a report under the id it had before it left is ignored"
    );
}

#[test]
fn membership_rule_a_kept_upstream_keeps_its_verdict_and_a_new_one_is_probed_at_once() {
    let mut h = probed();
    h.handle_timeout(at(0));
    h.take_probes();
    h.probed(at(1), 0, false);
    h.probed(at(1), 0, false);
    assert!(h.is_down_url("http://u0"));
    h.follow(at(2), ["http://u0", "http://new"]);
    assert!(
        h.is_down_url("http://u0"),
        "membership rule: an upstream both sets name keeps its verdict"
    );
    h.handle_timeout(at(2));
    assert_eq!(
        h.take_probes(),
        vec![(2, "http://new".to_owned())],
        "a new member is probed when it enters"
    );
    // The answer of a probe of a member that left is dropped.
    h.follow(at(3), ["http://u0"]);
    h.probed(at(4), 2, false);
    h.probed(at(4), 2, false);
    assert_eq!(h.down_urls(), ["http://u0"]);
}

fn policy(max_fails: u32, fail_timeout_secs: u64, probe_secs: Option<u64>) -> HealthPolicy {
    HealthPolicy {
        max_fails,
        fail_timeout: Duration::from_secs(fail_timeout_secs),
        probe_interval: probe_secs.map(Duration::from_secs),
    }
}

#[test]
fn policy_rule_a_reload_keeps_verdicts_and_a_run_meets_the_new_threshold_at_its_next_failure() {
    let mut h = passive(5);
    h.reported(at(1), 0, false);
    h.reported(at(2), 0, false);
    h.reported(at(3), 1, false);
    h.set_policy(at(10), policy(2, 10, None));
    assert!(
        !h.is_down(0) && !h.take_changed(),
        "policy rule: a new max_fails alone marks nothing down (the run is compared at its next failure)"
    );
    h.reported(at(11), 0, false);
    assert!(
        h.is_down(0) && h.take_changed(),
        "policy rule: a run of three failures meets the new max_fails of 2 at its next failure"
    );
    h.reported(at(12), 1, false);
    assert!(
        h.is_down(1),
        "policy rule: a run of two under the new max_fails of 2 marks it down"
    );
    h.set_policy(at(13), policy(9, 10, None));
    assert_eq!(
        h.down(),
        vec![0, 1],
        "policy rule: a higher max_fails keeps the verdicts given"
    );
}

#[test]
fn policy_rule_a_new_fail_timeout_counts_from_when_the_upstream_was_marked_down() {
    let mut h = passive(1);
    h.reported(at(1_000), 0, false);
    h.reported(at(4_000), 1, false);
    h.take_changed();
    // From 10 s to 5 s: upstream 0 (down at 1 s) is due at 6 s, upstream 1 at 9 s.
    h.set_policy(at(5_000), policy(1, 5, None));
    assert_eq!(
        h.poll_timeout(),
        Some(at(6_000)),
        "policy rule: the shorter fail timeout counts from the marking, not the reload"
    );
    h.handle_timeout(at(6_000));
    assert!(
        !h.is_down(0) && h.is_down(1) && h.take_changed(),
        "policy rule: the upstream marked down 5 s ago is tried again at once"
    );
    // Longer again: 1 is down until 4 s + 60 s.
    h.set_policy(at(7_000), policy(1, 60, None));
    assert_eq!(
        h.poll_timeout(),
        Some(at(64_000)),
        "policy rule: a longer fail timeout also counts from the marking"
    );
}

#[test]
fn policy_rule_probes_turned_on_probe_every_member_at_once_and_hold_the_down() {
    let mut h = passive(1);
    h.reported(at(1_000), 0, false);
    h.take_changed();
    h.set_policy(at(2_000), policy(1, 10, Some(5)));
    assert_eq!(
        h.poll_timeout(),
        Some(at(2_000)),
        "policy rule: probes turned on are due at once"
    );
    h.handle_timeout(at(2_000));
    assert_eq!(
        ids(h.take_probes()),
        vec![0, 1, 2],
        "policy rule: every member is probed when probes are turned on"
    );
    // The old fail timeout (1 s + 10 s) no longer brings it back: only a probe does.
    h.handle_timeout(at(20_000));
    assert!(
        h.is_down(0),
        "policy rule: with probes, a down upstream waits for a probe, not for its old fail timeout"
    );
    h.reported(at(20_001), 0, true);
    assert!(
        h.is_down(0),
        "policy rule: with probes, a worker's success does not bring it back"
    );
    h.probed(at(20_002), 0, true);
    assert!(!h.is_down(0), "policy rule: a passing probe brings it back");
}

#[test]
fn policy_rule_probes_turned_off_give_the_down_the_fail_timeout_from_the_commit() {
    let mut h = probed();
    h.handle_timeout(at(0));
    h.take_probes();
    h.probed(at(10), 1, false);
    h.probed(at(20), 1, false);
    assert!(h.is_down(1) && h.take_changed());
    h.set_policy(at(30_000), policy(2, 4, None));
    assert_eq!(
        h.poll_timeout(),
        Some(at(34_000)),
        "policy rule: probes turned off: the down upstream is tried again the fail timeout after the commit (no probe is scheduled)"
    );
    h.handle_timeout(at(34_000));
    assert!(
        !h.is_down(1) && h.take_changed() && h.take_probes().is_empty(),
        "policy rule: it comes back at the fail timeout, and nothing is probed"
    );
}

#[test]
fn policy_rule_a_shorter_probe_interval_brings_the_next_probe_forward() {
    let mut h = probed();
    h.handle_timeout(at(0));
    h.take_probes();
    h.probed(at(100), 0, true);
    h.probed(at(100), 1, true);
    // Next probes at 5.1 s; the interval becomes 1 s at 1 s: due at 2 s.
    h.set_policy(at(1_000), policy(2, 10, Some(1)));
    assert_eq!(
        h.poll_timeout(),
        Some(at(2_000)),
        "policy rule: a shorter interval brings a later probe forward"
    );
    h.set_policy(at(1_500), policy(2, 10, Some(30)));
    assert_eq!(
        h.poll_timeout(),
        Some(at(2_000)),
        "policy rule: a longer interval keeps a probe already due sooner"
    );
}
