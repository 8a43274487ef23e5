use super::*;
use proptest::prelude::*;

fn report(upstream: u16, ok: bool) -> Option<BrokerRequest> {
    Some(BrokerRequest::UpstreamOutcome { upstream, ok })
}

#[test]
fn round_robin_takes_each_in_turn_and_skips_the_down() {
    let mut b = Balancer::new(4, Balance::RoundRobin);
    let picks: Vec<_> = (0..6).map(|_| b.choose(1..4)).collect();
    assert_eq!(
        picks,
        [1, 2, 3, 1, 2, 3].map(Some),
        "round robin: each in turn"
    );
    b.set_down(&[2]);
    let picks: Vec<_> = (0..4).map(|_| b.choose(1..4)).collect();
    assert!(
        picks.iter().all(|p| *p != Some(2)),
        "health rule: a worker never chooses an upstream it learned is down: {picks:?}"
    );
    b.set_down(&[1, 2, 3]);
    assert_eq!(b.choose(1..4), None, "every upstream of the group is down");
    assert_eq!(
        b.choose(0..1),
        Some(0),
        "a group of one ignores the verdict"
    );
    b.set_down(&[0]);
    assert_eq!(
        b.choose(0..1),
        Some(0),
        "a group of one ignores the verdict"
    );
    b.set_down(&[]);
    assert!(b.choose(1..4).is_some(), "a verdict lifted");
}

#[test]
fn least_inflight_takes_the_least_busy_ties_in_turn() {
    let mut b = Balancer::new(3, Balance::LeastInflight);
    assert_eq!(b.choose(0..3), Some(0));
    assert_eq!(b.choose(0..3), Some(1));
    assert_eq!(b.choose(0..3), Some(2));
    // 0 finishes: it is the only one with none in flight.
    b.finished(0, Some(true));
    assert_eq!(
        b.choose(0..3),
        Some(0),
        "least in flight: the idle one, whatever the turn"
    );
    b.finished(1, Some(true));
    b.finished(2, Some(true));
    // 0 has one in flight, 1 and 2 none: the next in turn among them.
    let next = b.choose(0..3);
    assert!(
        matches!(next, Some(1 | 2)),
        "least in flight: {next:?} chosen while 0 is busy"
    );
    b.set_down(&[1, 2]);
    assert_eq!(
        b.choose(0..3),
        Some(0),
        "health rule: the least busy but down is skipped"
    );
    assert_eq!(b.in_flight(0), 2);
}

#[test]
fn reports_every_failure_and_one_success_per_recovery() {
    let mut b = Balancer::new(2, Balance::RoundRobin);
    b.choose(0..1);
    assert_eq!(
        b.finished(0, Some(true)),
        None,
        "a healthy upstream costs no message"
    );
    b.choose(0..1);
    assert_eq!(b.finished(0, Some(false)), report(0, false));
    b.choose(0..1);
    assert_eq!(b.finished(0, Some(false)), report(0, false));
    b.choose(0..1);
    assert_eq!(b.answered(0), report(0, true), "the recovery is reported");
    b.done(0);
    b.choose(0..1);
    assert_eq!(b.finished(0, Some(true)), None, "once");
    b.choose(0..1);
    assert_eq!(
        b.finished(0, None),
        None,
        "a request never tried says nothing"
    );
    assert_eq!(b.in_flight(0), 0);
    assert!(b.check_invariants().is_ok());
}

#[test]
fn names_round_trip() {
    for b in [Balance::RoundRobin, Balance::LeastInflight] {
        assert_eq!(Balance::parse(b.name()), Some(b));
    }
    assert_eq!(Balance::parse("random"), None);
    assert_eq!(Balance::default(), Balance::RoundRobin);
}

proptest! {
    /// Whatever the verdicts and the order requests end in: the choice is never a down
    /// upstream of a group of several, least in flight never picks one busier than an up
    /// alternative, and the counts return to zero.
    #[test]
    fn the_choice_follows_the_verdict(
        least in any::<bool>(),
        steps in proptest::collection::vec((0..3u8, 0..8u16), 0..120),
    ) {
        let balance = if least { Balance::LeastInflight } else { Balance::RoundRobin };
        let mut b = Balancer::new(4, balance);
        let mut open: Vec<usize> = Vec::new();
        for (kind, arg) in steps {
            match kind {
                0 => {
                    let down: Vec<u16> = (0..4).filter(|i| arg & (1 << i) != 0).collect();
                    b.set_down(&down);
                }
                1 => {
                    let before: Vec<u32> = (0..4).map(|i| b.in_flight(i)).collect();
                    match b.choose(0..4) {
                        Some(i) => {
                            prop_assert!(!b.is_down(i), "health rule: chose down {i}");
                            if least {
                                let fewest = (0..4).filter(|&j| !b.is_down(j)).map(|j| before[j]).min();
                                prop_assert_eq!(Some(before[i]), fewest, "least in flight");
                            }
                            open.push(i);
                        }
                        None => prop_assert!((0..4).all(|i| b.is_down(i))),
                    }
                }
                _ => {
                    if !open.is_empty() {
                        let i = open.swap_remove(usize::from(arg) % open.len());
                        b.finished(i, Some(arg % 2 == 0));
                    }
                }
            }
        }
        for i in open {
            b.finished(i, None);
        }
        prop_assert!((0..4).all(|i| b.in_flight(i) == 0));
    }
}
