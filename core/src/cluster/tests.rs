use core::time::Duration;

use super::*;
use crate::time::Instant;

fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

fn host() -> ClusterHost {
    let layout = KeyLayout::new(
        &ClusterName::new("office").expect("valid"),
        &ClusterName::new("h1").expect("valid"),
    );
    let limits = [
        BudgetLimits {
            max_count: 2,
            max_bytes: 100,
        },
        BudgetLimits {
            max_count: 2,
            max_bytes: 100,
        },
    ];
    ClusterHost::new(layout, ClusterTiming::default(), limits)
}

fn drain(h: &mut ClusterHost) -> Vec<ClusterAction> {
    core::iter::from_fn(|| h.poll_action()).collect()
}

fn calls(actions: &[ClusterAction]) -> Vec<(OpId, StoreCall)> {
    actions
        .iter()
        .filter_map(|a| match a {
            ClusterAction::Store { op, call } => Some((*op, call.clone())),
            _ => None,
        })
        .collect()
}

fn answers(actions: &[ClusterAction]) -> Vec<(ClusterRequest, ClusterAnswer)> {
    actions
        .iter()
        .filter_map(|a| match a {
            ClusterAction::Answer { request, answer } => Some((*request, answer.clone())),
            _ => None,
        })
        .collect()
}

fn txn_ok(revision: Revision) -> StoreReply {
    StoreReply::Txn {
        succeeded: true,
        revision,
        read: vec![],
    }
}

/// A host with a live lease granted at 0 ms.
fn live() -> ClusterHost {
    let mut h = host();
    h.start(at(0));
    let c = calls(&drain(&mut h));
    assert!(matches!(c[0].1, StoreCall::LeaseGrant { ttl_secs: 15 }));
    h.handle_reply(at(1), c[0].0, StoreReply::LeaseGranted { lease: 7 });
    drain(&mut h);
    h
}

fn name() -> SharedName {
    SharedName::new(NameKind::Lease, "docs/a.txt").expect("valid")
}

#[test]
fn a_grant_is_a_put_if_absent_under_the_hosts_lease_and_its_fence_the_revision() {
    let mut h = live();
    h.acquire(at(2), ClusterRequest(1), &name());
    let c = calls(&drain(&mut h));
    let StoreCall::Txn(t) = &c[0].1 else {
        panic!("{c:?}")
    };
    assert_eq!(t.compare[0].target, CompareTarget::CreateRevisionIs(0));
    assert!(
        matches!(&t.success[0], TxnOp::Put { lease: 7, key, .. } if key == "/servery/office/leases/docs/a.txt")
    );
    h.handle_reply(at(3), c[0].0, txn_ok(42));
    assert_eq!(
        answers(&drain(&mut h)),
        vec![(ClusterRequest(1), ClusterAnswer::Granted { fence: 42 })]
    );
    // A second ask on this host is answered from its cache, with no round trip.
    h.acquire(at(4), ClusterRequest(2), &name());
    let a = drain(&mut h);
    assert!(calls(&a).is_empty());
    assert_eq!(answers(&a), vec![(ClusterRequest(2), ClusterAnswer::Busy)]);
}

#[test]
fn a_name_held_elsewhere_is_busy() {
    let mut h = live();
    h.acquire(at(2), ClusterRequest(1), &name());
    let c = calls(&drain(&mut h));
    h.handle_reply(
        at(3),
        c[0].0,
        StoreReply::Txn {
            succeeded: false,
            revision: 9,
            read: vec![],
        },
    );
    assert_eq!(
        answers(&drain(&mut h)),
        vec![(ClusterRequest(1), ClusterAnswer::Busy)]
    );
}

#[test]
fn without_an_acknowledged_keepalive_the_host_stops_granting_at_its_deadline() {
    let mut h = live();
    // The lease grant was sent at 0 ms: the deadline is 10 s after.
    assert_eq!(h.grant_deadline(), Some(at(10_000)));
    assert!(h.may_grant(at(9_999)));
    assert!(!h.may_grant(at(10_000)));
    h.acquire(at(10_000), ClusterRequest(1), &name());
    let a = drain(&mut h);
    assert!(calls(&a).is_empty(), "no store call after the deadline");
    assert_eq!(
        answers(&a),
        vec![(
            ClusterRequest(1),
            ClusterAnswer::Unavailable {
                retry_after: Duration::from_secs(2)
            }
        )]
    );
}

#[test]
fn an_acknowledged_keepalive_moves_the_deadline_from_its_send_not_its_answer() {
    let mut h = live();
    h.handle_timeout(at(2_000));
    let c = calls(&drain(&mut h));
    assert!(matches!(c[0].1, StoreCall::KeepAlive { lease: 7 }));
    h.handle_reply(at(3_500), c[0].0, StoreReply::KeptAlive);
    assert_eq!(h.grant_deadline(), Some(at(12_000)));
}

#[test]
fn a_grant_answered_after_the_deadline_is_given_back_and_refused() {
    let mut h = live();
    h.acquire(at(9_000), ClusterRequest(1), &name());
    let c = calls(&drain(&mut h));
    h.handle_reply(at(10_500), c[0].0, txn_ok(42));
    let a = drain(&mut h);
    assert!(matches!(
        answers(&a)[0].1,
        ClusterAnswer::Unavailable { .. }
    ));
    assert!(h.held().next().is_none());
}

#[test]
fn a_lost_acquire_is_refused_within_the_op_timeout_and_cleaned_up() {
    let mut h = live();
    h.acquire(at(100), ClusterRequest(1), &name());
    drain(&mut h);
    // The keep-alive tick comes first; the acquire's own deadline is 2 s after it was sent.
    assert_eq!(h.poll_timeout(), Some(at(2_000)));
    h.handle_timeout(at(2_100));
    let a = drain(&mut h);
    assert!(matches!(
        answers(&a)[0].1,
        ClusterAnswer::Unavailable { .. }
    ));
    let cleanup = calls(&a).into_iter().any(|(_, c)| match c {
        StoreCall::Txn(t) => t
            .compare
            .first()
            .is_some_and(|c| c.target == CompareTarget::ValueIs("h1 1".into())),
        _ => false,
    });
    assert!(cleanup, "{a:?}");
}

#[test]
fn a_moved_fence_refuses_the_publish() {
    let mut h = live();
    h.acquire(at(2), ClusterRequest(1), &name());
    let c = calls(&drain(&mut h));
    h.handle_reply(at(3), c[0].0, txn_ok(42));
    drain(&mut h);
    h.check_fence(at(4), ClusterRequest(2), &name(), 42);
    let c = calls(&drain(&mut h));
    let StoreCall::Txn(t) = &c[0].1 else { panic!() };
    assert_eq!(t.compare[0].target, CompareTarget::CreateRevisionIs(42));
    h.handle_reply(
        at(5),
        c[0].0,
        StoreReply::Txn {
            succeeded: false,
            revision: 50,
            read: vec![],
        },
    );
    assert_eq!(
        answers(&drain(&mut h)),
        vec![(ClusterRequest(2), ClusterAnswer::Fenced)]
    );
    assert!(h.held().next().is_none());
}

#[test]
fn a_lease_the_store_forgot_drops_every_grant_and_a_new_one_is_asked() {
    let mut h = live();
    h.acquire(at(2), ClusterRequest(1), &name());
    let c = calls(&drain(&mut h));
    h.handle_reply(at(3), c[0].0, txn_ok(42));
    drain(&mut h);
    h.handle_timeout(at(2_000));
    let c = calls(&drain(&mut h));
    h.handle_reply(at(2_001), c[0].0, StoreReply::LeaseNotFound);
    let c = calls(&drain(&mut h));
    assert!(matches!(c[0].1, StoreCall::LeaseGrant { .. }));
    assert!(h.held().next().is_none());
    assert!(!h.may_grant(at(2_002)));
}

#[test]
fn an_unacknowledged_release_is_sent_again_with_the_keepalive() {
    let mut h = live();
    h.acquire(at(2), ClusterRequest(1), &name());
    let c = calls(&drain(&mut h));
    h.handle_reply(at(3), c[0].0, txn_ok(42));
    drain(&mut h);
    h.release(at(4), &name(), 42);
    assert_eq!(calls(&drain(&mut h)).len(), 1);
    h.handle_timeout(at(2_004));
    let again = calls(&drain(&mut h));
    assert!(again.iter().any(|(_, c)| matches!(c, StoreCall::Txn(t)
        if matches!(&t.success[..], [TxnOp::Delete { .. }]))));
}

#[test]
fn a_budget_reservation_is_a_put_guarded_by_the_view_and_saturates() {
    let mut h = live();
    // The lease's share writes (uploads and partials) go first.
    h.reserve(at(2), ClusterRequest(1), Budget::Uploads, 60);
    let a = drain(&mut h);
    assert!(answers(&a).is_empty());
    h.handle_reply(at(3), OpId(2), txn_ok(10));
    let c = calls(&drain(&mut h));
    let StoreCall::Txn(t) = &c[0].1 else { panic!() };
    assert_eq!(t.compare[0].target, CompareTarget::ModRevisionAtMost(10));
    assert!(matches!(&t.success[0], TxnOp::Put { value, .. } if value == "1 60"));
    h.handle_reply(at(4), c[0].0, txn_ok(11));
    assert_eq!(
        answers(&drain(&mut h)),
        vec![(ClusterRequest(1), ClusterAnswer::Reserved)]
    );
    // 60 + 60 > 100: read again once, then saturated.
    h.reserve(at(5), ClusterRequest(2), Budget::Uploads, 60);
    let c = calls(&drain(&mut h));
    h.handle_reply(at(6), c[0].0, txn_ok(11));
    assert_eq!(
        answers(&drain(&mut h)),
        vec![(ClusterRequest(2), ClusterAnswer::Saturated)]
    );
    assert_eq!(h.budget_share(Budget::Uploads), (1, 60));
}
