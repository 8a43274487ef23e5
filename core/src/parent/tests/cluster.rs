//! The parent's broker backed by the cluster (decision 0130): two parents on one store,
//! a LOCK through one refused through the other, the upload budget the service's, and
//! a store that does not answer refused as a full one (the worker's 503).

use std::collections::BTreeMap;

use super::*;
use crate::cluster::{
    Budget, BudgetLimits, ClusterHost, ClusterName, ClusterTiming, CompareTarget, KeyLayout,
    KeyValue, StoreCall, StoreReply, TxnOp,
};
use crate::ids::LeaseId;
use crate::proto::{BrokerReply, ParentMessage, Rejection};

/// A linearizable store just big enough for the calls the cluster machine makes.
#[derive(Default)]
struct Store {
    revision: i64,
    /// key → (value, create revision, mod revision, lease)
    keys: BTreeMap<String, (String, i64, i64, i64)>,
    next_lease: i64,
    /// While false, every call is lost.
    down: bool,
}

impl Store {
    fn in_range(key: &str, start: &str, end: &Option<String>) -> bool {
        match end {
            Some(end) => key >= start && key < end.as_str(),
            None => key == start,
        }
    }

    fn call(&mut self, call: &StoreCall) -> Option<StoreReply> {
        if self.down {
            return None;
        }
        Some(match call {
            StoreCall::LeaseGrant { .. } => {
                self.next_lease += 1;
                StoreReply::LeaseGranted {
                    lease: self.next_lease,
                }
            }
            StoreCall::KeepAlive { .. } => StoreReply::KeptAlive,
            StoreCall::Txn(t) => {
                let holds = t.compare.iter().all(|c| {
                    let mut hits = self
                        .keys
                        .iter()
                        .filter(|(k, _)| Store::in_range(k, &c.key, &c.range_end));
                    match &c.target {
                        CompareTarget::CreateRevisionIs(r) => {
                            hits.next().map_or(0, |(_, v)| v.1) == *r
                        }
                        CompareTarget::ModRevisionAtMost(r) => hits.all(|(_, v)| v.2 <= *r),
                        CompareTarget::ValueIs(s) => hits.next().is_some_and(|(_, v)| v.0 == *s),
                    }
                });
                let ops = if holds { &t.success } else { &t.failure };
                let mut read = Vec::new();
                let mut wrote = false;
                for op in ops {
                    match op {
                        TxnOp::Put { key, value, lease } => {
                            if !wrote {
                                self.revision += 1;
                                wrote = true;
                            }
                            let created = self.keys.get(key).map_or(self.revision, |v| v.1);
                            self.keys.insert(
                                key.clone(),
                                (value.clone(), created, self.revision, *lease),
                            );
                        }
                        TxnOp::Delete { key } => {
                            if self.keys.contains_key(key) && !wrote {
                                self.revision += 1;
                                wrote = true;
                            }
                            self.keys.remove(key);
                        }
                        TxnOp::Get { key, range_end } => read.extend(
                            self.keys
                                .iter()
                                .filter(|(k, _)| Store::in_range(k, key, range_end))
                                .map(|(k, v)| KeyValue {
                                    key: k.clone(),
                                    value: v.0.clone(),
                                    create_revision: v.1,
                                    mod_revision: v.2,
                                }),
                        ),
                    }
                }
                StoreReply::Txn {
                    succeeded: holds,
                    revision: self.revision,
                    read,
                }
            }
        })
    }
}

fn clustered(name: &str, now: Instant) -> (Parent, WorkerId) {
    clustered_with(name, now, |raw| {
        raw.broker.max_active_uploads = 1;
        raw.broker.max_partial_uploads = 2;
    })
}

fn clustered_with(
    name: &str,
    now: Instant,
    limits: impl FnOnce(&mut RawConfig),
) -> (Parent, WorkerId) {
    let (mut p, w) = started(limits);
    let host = ClusterHost::new(
        KeyLayout::new(
            &ClusterName::new("office").expect("a name"),
            &ClusterName::new(name).expect("a name"),
        ),
        ClusterTiming::default(),
        BudgetLimits::service_wide(p.broker().limits()),
    );
    p.start_cluster(now, host);
    (p, w)
}

/// Carries every store call `p` asked for to `store` and back, until none is left; the
/// broker's answers to `w` are returned by request id.
fn settle(p: &mut Parent, store: &mut Store, now: Instant) -> BTreeMap<u64, BrokerReply> {
    let mut answers = BTreeMap::new();
    loop {
        let mut calls = Vec::new();
        for a in actions(p) {
            match a {
                ParentAction::Store { op, call } => calls.push((op, call)),
                ParentAction::Supervisor(Action::Send {
                    message: ParentMessage::Broker { id, reply },
                    ..
                }) => {
                    answers.insert(id, reply);
                }
                _ => {}
            }
        }
        if calls.is_empty() {
            return answers;
        }
        for (op, call) in calls {
            if let Some(reply) = store.call(&call) {
                p.store_replied(now, op, reply);
            }
        }
    }
}

fn ask(
    p: &mut Parent,
    w: WorkerId,
    store: &mut Store,
    now: Instant,
    id: u64,
    request: BrokerRequest,
) -> Option<BrokerReply> {
    dav(p, w, now, id, request);
    settle(p, store, now).remove(&id)
}

fn granted_token(reply: Option<BrokerReply>) -> LeaseId {
    match reply {
        Some(BrokerReply::Granted { id, .. }) => id,
        other => panic!("not granted: {other:?}"),
    }
}

#[test]
fn a_lock_taken_through_one_host_is_refused_through_another_until_unlocked() {
    let t = Instant::ZERO;
    let mut store = Store::default();
    let (mut a, wa) = clustered("a", t);
    let (mut b, wb) = clustered("b", t);
    settle(&mut a, &mut store, t);
    settle(&mut b, &mut store, t);
    let lock = lock_request("/docs/report.odt", 60_000);
    let token = granted_token(ask(&mut a, wa, &mut store, t, 1, lock.clone()));
    assert_eq!(
        ask(&mut b, wb, &mut store, t, 2, lock.clone()),
        Some(BrokerReply::Rejected(Rejection::Busy)),
        "cluster: a lock held through host a must be refused through host b"
    );
    assert_eq!(
        ask(
            &mut a,
            wa,
            &mut store,
            t,
            3,
            BrokerRequest::DavUnlock { token }
        ),
        Some(BrokerReply::Released)
    );
    assert!(
        matches!(
            ask(&mut b, wb, &mut store, t, 4, lock),
            Some(BrokerReply::Granted { .. })
        ),
        "cluster: an unlocked resource's shared name must go back to the store"
    );
}

#[test]
fn the_upload_budget_is_the_services_not_each_hosts() {
    let t = Instant::ZERO;
    let mut store = Store::default();
    let (mut a, wa) = clustered("a", t);
    let (mut b, wb) = clustered("b", t);
    settle(&mut a, &mut store, t);
    settle(&mut b, &mut store, t);
    let reserve = BrokerRequest::ReserveUpload { bytes: 100 };
    let id = granted_token(ask(&mut a, wa, &mut store, t, 1, reserve.clone()));
    assert_eq!(
        ask(&mut b, wb, &mut store, t, 2, reserve.clone()),
        Some(BrokerReply::Rejected(Rejection::Saturated)),
        "cluster: one upload slot in the service, taken through host a"
    );
    assert_eq!(
        ask(
            &mut a,
            wa,
            &mut store,
            t,
            3,
            BrokerRequest::ReleaseReservation { id }
        ),
        Some(BrokerReply::Released)
    );
    // a's share is written back at once; b reads the fresh shares on its next try.
    assert!(
        matches!(
            ask(&mut b, wb, &mut store, t, 4, reserve),
            Some(BrokerReply::Granted { .. })
        ),
        "cluster: a released reservation must give its share back"
    );
    a.check_invariants().expect("a's invariants");
    b.check_invariants().expect("b's invariants");
}

fn partial(name: &str, bytes: u64) -> BrokerRequest {
    BrokerRequest::ReservePartial {
        key: crate::proto::TargetKey {
            dir_device: 1,
            dir_inode: 1,
            name: name.into(),
        },
        bytes,
    }
}

#[test]
fn the_partial_upload_budget_is_the_services_and_a_resume_takes_no_second_share() {
    let t = Instant::ZERO;
    let mut store = Store::default();
    let (mut a, wa) = clustered("a", t);
    let (mut b, wb) = clustered("b", t);
    settle(&mut a, &mut store, t);
    settle(&mut b, &mut store, t);
    // Two partial uploads in the service, each as large as an upload may be: sizes are
    // bounded one by one, as on one host, not summed.
    let max = a.broker().limits().max_upload_bytes();
    let id = granted_token(ask(&mut a, wa, &mut store, t, 1, partial("big.iso", max)));
    // The same upload resumed through a: the broker's own partial, no second share.
    assert_eq!(
        granted_token(ask(&mut a, wa, &mut store, t, 2, partial("big.iso", max))),
        id,
        "cluster: a partial resumed through the host that holds it is the same partial"
    );
    assert_eq!(
        a.cluster().map(|h| h.budget_share(Budget::Partials)),
        Some((1, max)),
        "cluster: a partial resumed through the host that holds it takes no second share"
    );
    assert!(
        matches!(
            ask(&mut b, wb, &mut store, t, 3, partial("other.iso", max)),
            Some(BrokerReply::Granted { .. })
        ),
        "cluster: the partial budget's bytes are not summed (two of max_upload_bytes fit)"
    );
    assert_eq!(
        ask(&mut b, wb, &mut store, t, 4, partial("third.iso", 10)),
        Some(BrokerReply::Rejected(Rejection::Saturated)),
        "cluster: two partial uploads in the service, one through each host"
    );
    // The service full, the upload held through a still resumes there.
    let resumed = ask(&mut a, wa, &mut store, t, 7, partial("big.iso", max));
    assert!(
        matches!(resumed, Some(BrokerReply::Granted { id: again, .. }) if again == id),
        "cluster: a partial resumed through the host that holds it is not refused for a full service: {resumed:?}"
    );
    assert_eq!(
        ask(
            &mut a,
            wa,
            &mut store,
            t,
            5,
            BrokerRequest::ReleasePartial { id }
        ),
        Some(BrokerReply::Released)
    );
    assert_eq!(
        a.cluster().map(|h| h.budget_share(Budget::Partials)),
        Some((0, 0)),
        "cluster: a finished partial must give its share back"
    );
    assert!(
        matches!(
            ask(&mut b, wb, &mut store, t, 6, partial("third.iso", 10)),
            Some(BrokerReply::Granted { .. })
        ),
        "cluster: a finished partial's slot is the service's again"
    );
    a.check_invariants().expect("a's invariants");
    b.check_invariants().expect("b's invariants");
}

#[test]
fn an_uploads_growth_takes_the_services_bytes_not_only_this_hosts() {
    let t = Instant::ZERO;
    let mut store = Store::default();
    let limits = |raw: &mut RawConfig| {
        raw.broker.max_active_uploads = 2;
        raw.broker.max_upload_bytes = 1_000;
    };
    let (mut a, wa) = clustered_with("a", t, limits);
    let (mut b, wb) = clustered_with("b", t, limits);
    settle(&mut a, &mut store, t);
    settle(&mut b, &mut store, t);
    let reserve = BrokerRequest::ReserveUpload { bytes: 400 };
    let ra = granted_token(ask(&mut a, wa, &mut store, t, 1, reserve.clone()));
    let rb = granted_token(ask(&mut b, wb, &mut store, t, 2, reserve));
    let grow = |id, bytes| BrokerRequest::GrowReservation { id, bytes };
    assert!(
        matches!(
            ask(&mut a, wa, &mut store, t, 3, grow(ra, 600)),
            Some(BrokerReply::Granted { .. })
        ),
        "cluster: a growth the service's bytes have room for is granted"
    );
    assert_eq!(
        a.cluster().map(|h| h.budget_share(Budget::Uploads)),
        Some((1, 600)),
        "cluster: a growth adds its bytes to the host's share, not a reservation"
    );
    assert_eq!(
        ask(&mut b, wb, &mut store, t, 4, grow(rb, 500)),
        Some(BrokerReply::Rejected(Rejection::Saturated)),
        "cluster: an upload's growth past the service's bytes (600 + 500 > 1,000) is refused, though this host's own bytes had room"
    );
    assert_eq!(
        b.cluster().map(|h| h.budget_share(Budget::Uploads)),
        Some((1, 400)),
        "cluster: a refused growth leaves the share as it was"
    );
    assert_eq!(
        ask(
            &mut a,
            wa,
            &mut store,
            t,
            5,
            BrokerRequest::ReleaseReservation { id: ra }
        ),
        Some(BrokerReply::Released)
    );
    assert_eq!(
        a.cluster().map(|h| h.budget_share(Budget::Uploads)),
        Some((0, 0)),
        "cluster: a grown reservation gives back all its bytes"
    );
    assert!(
        matches!(
            ask(&mut b, wb, &mut store, t, 6, grow(rb, 500)),
            Some(BrokerReply::Granted { .. })
        ),
        "cluster: the growth fits once the other host's upload is done"
    );
    a.check_invariants().expect("a's invariants");
    b.check_invariants().expect("b's invariants");
}

#[test]
fn a_growth_whose_reservation_went_meanwhile_gives_its_bytes_back() {
    let t = Instant::ZERO;
    let mut store = Store::default();
    let (mut a, wa) = clustered_with("a", t, |raw| {
        raw.broker.max_upload_bytes = 1_000;
    });
    settle(&mut a, &mut store, t);
    let id = granted_token(ask(
        &mut a,
        wa,
        &mut store,
        t,
        1,
        BrokerRequest::ReserveUpload { bytes: 400 },
    ));
    // The growth waits for the store while the upload ends and releases its reservation.
    dav(
        &mut a,
        wa,
        t,
        2,
        BrokerRequest::GrowReservation { id, bytes: 700 },
    );
    dav(&mut a, wa, t, 3, BrokerRequest::ReleaseReservation { id });
    let answers = settle(&mut a, &mut store, t);
    assert_eq!(answers.get(&3), Some(&BrokerReply::Released));
    assert_eq!(
        a.cluster().map(|h| h.budget_share(Budget::Uploads)),
        Some((0, 0)),
        "cluster: a growth granted for a reservation that went must give its bytes back"
    );
    a.check_invariants().expect("a's invariants");
}

#[test]
fn a_store_that_does_not_answer_refuses_writes_as_full_within_the_operation_timeout() {
    let t = Instant::ZERO;
    let mut store = Store::default();
    let (mut a, wa) = clustered("a", t);
    settle(&mut a, &mut store, t);
    store.down = true;
    assert_eq!(
        ask(&mut a, wa, &mut store, t, 1, lock_request("/x", 1_000)),
        None,
        "held while the store is asked"
    );
    let due = a.poll_timeout().expect("the operation's deadline");
    assert!(due <= t + ClusterTiming::default().op_timeout);
    a.handle_timeout(due);
    let answers = settle(&mut a, &mut store, due);
    assert_eq!(
        answers.get(&1),
        Some(&BrokerReply::Rejected(Rejection::Saturated)),
        "cluster: an unreachable store is a 503 (Saturated), not a 423"
    );
    // Reads and everything else stay the broker's alone.
    assert!(matches!(
        ask(
            &mut a,
            wa,
            &mut store,
            due,
            2,
            BrokerRequest::DavQuery {
                resource: "/x".into()
            }
        ),
        Some(BrokerReply::Locks(_))
    ));
    // The store back: the next keep-alive moves the deadline and locks are granted again.
    store.down = false;
    let mut now = due;
    for _ in 0..3 {
        now = a.poll_timeout().expect("a keep-alive is due");
        a.handle_timeout(now);
        settle(&mut a, &mut store, now);
    }
    assert!(matches!(
        ask(&mut a, wa, &mut store, now, 3, lock_request("/x", 1_000)),
        Some(BrokerReply::Granted { .. })
    ));
}

#[test]
fn a_lost_etcd_lease_takes_this_hosts_locks_with_it() {
    let t = Instant::ZERO;
    let mut store = Store::default();
    let (mut a, wa) = clustered("a", t);
    settle(&mut a, &mut store, t);
    granted_token(ask(
        &mut a,
        wa,
        &mut store,
        t,
        1,
        lock_request("/x", 60_000),
    ));
    assert_eq!(a.broker().dav().live(t), 1);
    // The next keep-alive finds the lease gone (it expired while this host was away).
    let now = a.poll_timeout().expect("a keep-alive is due");
    a.handle_timeout(now);
    let mut calls = Vec::new();
    for act in actions(&mut a) {
        if let ParentAction::Store { op, call } = act {
            calls.push((op, call));
        }
    }
    for (op, call) in calls {
        let reply = match call {
            StoreCall::KeepAlive { .. } => StoreReply::LeaseNotFound,
            other => store.call(&other).expect("up"),
        };
        a.store_replied(now, op, reply);
    }
    settle(&mut a, &mut store, now);
    assert_eq!(
        a.broker().dav().live(now),
        0,
        "cluster: a lock whose shared name went with the lease must not stay granted here"
    );
}

#[test]
fn a_reservation_answered_after_its_worker_went_is_given_back_not_granted() {
    let t = Instant::ZERO;
    let mut store = Store::default();
    let (mut a, wa) = clustered("a", t);
    settle(&mut a, &mut store, t);
    dav(
        &mut a,
        wa,
        t,
        1,
        BrokerRequest::ReserveUpload { bytes: 100 },
    );
    // The reservation's store calls are held while the worker's channel ends.
    let held: Vec<_> = actions(&mut a)
        .into_iter()
        .filter_map(|act| match act {
            ParentAction::Store { op, call } => Some((op, call)),
            _ => None,
        })
        .collect();
    assert!(!held.is_empty(), "the reservation asks the store");
    a.handle(t, Event::ChannelClosed { worker: wa });
    for (op, call) in held {
        if let Some(reply) = store.call(&call) {
            a.store_replied(t, op, reply);
        }
    }
    settle(&mut a, &mut store, t);
    a.check_invariants().expect(
        "cluster: a reservation the store granted after its worker went is not the broker's",
    );
    assert_eq!(a.broker().reservation_count(), 0);
    assert_eq!(
        a.cluster()
            .map(|h| h.budget_share(crate::cluster::Budget::Uploads)),
        Some((0, 0)),
        "cluster: the share taken for a gone worker is given back"
    );
}

#[test]
fn a_reload_of_the_upload_limits_moves_the_service_wide_budget() {
    let t = Instant::ZERO;
    let mut store = Store::default();
    let (mut a, _) = clustered("a", t);
    settle(&mut a, &mut store, t);
    let mut next = a.supervisor().config().as_written();
    next.workers = 1;
    next.broker.max_active_uploads = 2;
    a.handle(
        t,
        Event::Command(Command::Reload {
            id: ReloadId(1),
            config: Box::new(next),
        }),
    );
    settle(&mut a, &mut store, t);
    let w = WorkerId(2);
    for message in [WorkerMessage::Prepared, WorkerMessage::Ready] {
        a.handle(t, Event::Message { worker: w, message });
    }
    settle(&mut a, &mut store, t);
    assert_eq!(
        a.supervisor().generation(),
        Generation(2),
        "the reload commits"
    );
    let reserve = BrokerRequest::ReserveUpload { bytes: 100 };
    granted_token(ask(&mut a, w, &mut store, t, 1, reserve.clone()));
    assert!(
        matches!(
            ask(&mut a, w, &mut store, t, 2, reserve),
            Some(BrokerReply::Granted { .. })
        ),
        "cluster: two uploads in the service after a reload to --max-active-uploads 2"
    );
}
