//! The broker against a plain reference model, driven by proptest-generated operation
//! sequences (which shrink to a minimal failing sequence).

use super::*;
use crate::config::{LogPolicy, RawConfig};
use proptest::prelude::*;

const WORKERS: u64 = 3;
const KEYS: u8 = 3;

#[derive(Debug, Clone)]
enum Op {
    Reserve {
        worker: u64,
        bytes: u64,
    },
    ReleaseReservation {
        worker: u64,
        pick: usize,
    },
    Grow {
        worker: u64,
        pick: usize,
        bytes: u64,
    },
    Acquire {
        worker: u64,
        key: u8,
    },
    Renew {
        worker: u64,
        pick: usize,
    },
    ReleaseLease {
        worker: u64,
        pick: usize,
    },
    ForgedRelease {
        worker: u64,
    },
    Revoke {
        worker: u64,
    },
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..WORKERS, 0..70u64).prop_map(|(worker, bytes)| Op::Reserve { worker, bytes }),
        (0..WORKERS, any::<usize>())
            .prop_map(|(worker, pick)| Op::ReleaseReservation { worker, pick }),
        (0..WORKERS, any::<usize>(), 0..120u64).prop_map(|(worker, pick, bytes)| Op::Grow {
            worker,
            pick,
            bytes
        }),
        (0..WORKERS, 0..KEYS).prop_map(|(worker, key)| Op::Acquire { worker, key }),
        (0..WORKERS, any::<usize>()).prop_map(|(worker, pick)| Op::Renew { worker, pick }),
        (0..WORKERS, any::<usize>()).prop_map(|(worker, pick)| Op::ReleaseLease { worker, pick }),
        (0..WORKERS).prop_map(|worker| Op::ForgedRelease { worker }),
        (0..WORKERS).prop_map(|worker| Op::Revoke { worker }),
        (0..1500u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// The reference: plain vectors and linear scans.
#[derive(Default)]
struct Model {
    leases: Vec<(LeaseId, u8, u64, Instant)>,
    reservations: Vec<(LeaseId, u64, u64, Instant)>,
}

const MAX_LEASES: usize = 2;
const MAX_UPLOADS: usize = 2;
const MAX_BYTES: u64 = 100;
const TTL: Duration = Duration::from_secs(1);

fn broker() -> Broker {
    let mut raw = RawConfig::default();
    raw.broker.max_leases = MAX_LEASES as i64;
    raw.broker.max_active_uploads = MAX_UPLOADS as i64;
    raw.broker.max_upload_bytes = MAX_BYTES as i64;
    raw.broker.lease_ttl = TTL.as_secs_f64();
    raw.broker.reply_timeout = 0.5;
    let limits = raw.validate().expect("valid").broker().clone();
    Broker::new(limits, CoreRng::from_seed([7; 32]))
}

fn owner(worker: u64) -> Owner {
    Owner {
        worker: WorkerId(worker),
        generation: Generation(1),
    }
}

fn key(k: u8) -> TargetKey {
    TargetKey {
        dir_device: 1,
        dir_inode: 42,
        name: format!("file-{k}"),
    }
}

fn ask(b: &mut Broker, now: Instant, worker: u64, request: BrokerRequest) -> BrokerReply {
    b.handle_request(now, owner(worker), 0, request);
    let (w, _, reply) = b
        .poll_reply()
        .expect("every non-log request is answered at once");
    assert_eq!(w, WorkerId(worker));
    reply
}

impl Model {
    fn expire(&mut self, now: Instant) {
        self.leases.retain(|l| l.3 > now);
        self.reservations.retain(|r| r.3 > now);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn broker_matches_the_reference_model(ops in prop::collection::vec(op(), 1..60)) {
        let mut b = broker();
        let mut m = Model::default();
        let mut now = Instant::ZERO;
        let mut known: Vec<LeaseId> = Vec::new();
        let mut grants = 0u64;
        let mut busy = 0u64;
        for op in ops {
            match op {
                Op::Advance { ms } => {
                    now = now + Duration::from_millis(ms);
                    b.handle_timeout(now);
                    m.expire(now);
                }
                Op::Reserve { worker, bytes } => {
                    let reply = ask(&mut b, now, worker, BrokerRequest::ReserveUpload { bytes });
                    let used: u64 = m.reservations.iter().map(|r| r.1).sum();
                    if m.reservations.len() >= MAX_UPLOADS || used + bytes > MAX_BYTES {
                        prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::Saturated));
                    } else {
                        let BrokerReply::Granted { id, expires_in_ms } = reply else {
                            return Err(TestCaseError::fail(format!("expected a grant, got {reply:?}")));
                        };
                        prop_assert_eq!(expires_in_ms, TTL.as_millis() as u64);
                        grants += 1;
                        m.reservations.push((id, bytes, worker, now + TTL));
                        known.push(id);
                    }
                }
                Op::ReleaseReservation { worker, pick } => {
                    let Some(&id) = known.get(pick % known.len().max(1)) else { continue };
                    let reply = ask(&mut b, now, worker, BrokerRequest::ReleaseReservation { id });
                    match m.reservations.iter().position(|r| r.0 == id) {
                        None => prop_assert_eq!(reply, BrokerReply::Released),
                        Some(i) if m.reservations[i].2 != worker => {
                            prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::NotOwner));
                        }
                        Some(i) => {
                            prop_assert_eq!(reply, BrokerReply::Released);
                            m.reservations.remove(i);
                        }
                    }
                }
                Op::Grow { worker, pick, bytes } => {
                    let Some(&id) = known.get(pick % known.len().max(1)) else { continue };
                    let reply = ask(&mut b, now, worker, BrokerRequest::GrowReservation { id, bytes });
                    let used: u64 = m.reservations.iter().map(|r| r.1).sum();
                    match m.reservations.iter_mut().find(|r| r.0 == id) {
                        None => prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::NotFound)),
                        Some(r) if r.2 != worker => {
                            prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::NotOwner));
                        }
                        Some(r) if bytes > r.1 && bytes > MAX_BYTES => {
                            prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::TooLarge));
                        }
                        Some(r) if bytes > r.1 && used - r.1 + bytes > MAX_BYTES => {
                            prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::Saturated));
                        }
                        Some(r) => {
                            r.1 = r.1.max(bytes);
                            r.3 = now + TTL;
                            let granted = matches!(reply, BrokerReply::Granted { id: g, .. } if g == id);
                            prop_assert!(granted, "{reply:?}");
                            grants += 1;
                        }
                    }
                }
                Op::Acquire { worker, key: k } => {
                    let reply = ask(&mut b, now, worker, BrokerRequest::AcquireLease { key: key(k) });
                    if m.leases.iter().any(|l| l.1 == k) {
                        prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::Busy));
                        busy += 1;
                    } else if m.leases.len() >= MAX_LEASES {
                        prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::Saturated));
                    } else {
                        let BrokerReply::Granted { id, expires_in_ms } = reply else {
                            return Err(TestCaseError::fail(format!("expected a grant, got {reply:?}")));
                        };
                        prop_assert_eq!(expires_in_ms, TTL.as_millis() as u64);
                        grants += 1;
                        m.leases.push((id, k, worker, now + TTL));
                        known.push(id);
                    }
                }
                Op::Renew { worker, pick } => {
                    let Some(&id) = known.get(pick % known.len().max(1)) else { continue };
                    let reply = ask(&mut b, now, worker, BrokerRequest::RenewLease { id });
                    let lease = m.leases.iter_mut().find(|l| l.0 == id).map(|l| (&mut l.2, &mut l.3));
                    let res = m.reservations.iter_mut().find(|r| r.0 == id).map(|r| (&mut r.2, &mut r.3));
                    match lease.or(res) {
                        None => prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::NotFound)),
                        Some((w, _)) if *w != worker => {
                            prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::NotOwner));
                        }
                        Some((_, exp)) => {
                            *exp = now + TTL;
                            let granted = matches!(reply, BrokerReply::Granted { id: g, .. } if g == id);
                            prop_assert!(granted);
                            grants += 1;
                        }
                    }
                }
                Op::ReleaseLease { worker, pick } => {
                    let Some(&id) = known.get(pick % known.len().max(1)) else { continue };
                    let reply = ask(&mut b, now, worker, BrokerRequest::ReleaseLease { id });
                    match m.leases.iter().position(|l| l.0 == id) {
                        None => prop_assert_eq!(reply, BrokerReply::Released),
                        Some(i) if m.leases[i].2 != worker => {
                            prop_assert_eq!(reply, BrokerReply::Rejected(Rejection::NotOwner));
                        }
                        Some(i) => {
                            prop_assert_eq!(reply, BrokerReply::Released);
                            m.leases.remove(i);
                        }
                    }
                }
                Op::ForgedRelease { worker } => {
                    // A guessed ID releases nothing, whoever asks.
                    let before = b.leases().count();
                    let reply = ask(&mut b, now, worker, BrokerRequest::ReleaseLease { id: LeaseId(12345) });
                    prop_assert_eq!(reply, BrokerReply::Released);
                    prop_assert_eq!(b.leases().count(), before);
                }
                Op::Revoke { worker } => {
                    let revoked = b.revoke_worker(WorkerId(worker));
                    let leases = m.leases.iter().filter(|l| l.2 == worker).count();
                    let reservations = m.reservations.iter().filter(|r| r.2 == worker).count();
                    prop_assert_eq!(revoked.leases, leases);
                    prop_assert_eq!(revoked.reservations, reservations);
                    m.leases.retain(|l| l.2 != worker);
                    m.reservations.retain(|r| r.2 != worker);
                    prop_assert!(b.holders().all(|w| w != WorkerId(worker)));
                }
            }
            b.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert_eq!(b.leases().count(), m.leases.len());
            prop_assert_eq!(b.reservation_count(), m.reservations.len());
            prop_assert_eq!(b.reserved_bytes(), m.reservations.iter().map(|r| r.1).sum::<u64>());
            for k in 0..KEYS {
                let holder = m.leases.iter().find(|l| l.1 == k).map(|l| owner(l.2));
                prop_assert_eq!(b.lease_holder(&key(k)), holder);
            }
            prop_assert_eq!(b.stats().granted, grants);
            prop_assert_eq!(b.stats().busy, busy);
            let next_expiry = m.leases.iter().map(|l| l.3).chain(m.reservations.iter().map(|r| r.3)).min();
            prop_assert_eq!(b.poll_timeout(), next_expiry, "the broker wakes exactly at the next expiry");
        }
    }
}

#[test]
fn log_queue_blocks_or_drops_by_policy() {
    for policy in [LogPolicy::Block, LogPolicy::Drop] {
        let mut raw = RawConfig::default();
        raw.broker.log_queue_capacity = 2;
        raw.broker.log_policy = policy;
        let mut b = Broker::new(
            raw.validate().expect("valid").broker().clone(),
            CoreRng::from_seed([1; 32]),
        );
        assert_eq!(b.log().len(), 0);
        for i in 0..4 {
            b.handle_request(
                Instant::ZERO,
                owner(1),
                i,
                BrokerRequest::AppendLog {
                    record: format!("r{i}"),
                },
            );
        }
        let replies: Vec<_> = std::iter::from_fn(|| b.poll_reply()).map(|r| r.2).collect();
        match policy {
            LogPolicy::Drop => {
                assert_eq!(
                    replies,
                    [
                        BrokerReply::Logged,
                        BrokerReply::Logged,
                        BrokerReply::LogDropped,
                        BrokerReply::LogDropped
                    ]
                );
                assert_eq!(b.log().dropped(), 2);
            }
            LogPolicy::Block => {
                assert_eq!(replies, [BrokerReply::Logged, BrokerReply::Logged]);
                assert_eq!(b.log().blocked(), 2);
                assert_eq!(b.take_log_batch(10), ["r0", "r1"]);
                let admitted: Vec<_> = std::iter::from_fn(|| b.poll_reply()).map(|r| r.1).collect();
                assert_eq!(admitted, [2, 3], "blocked appends are admitted in order");
                assert_eq!(b.take_log_batch(10), ["r2", "r3"]);
            }
        }
        b.check_invariants().expect("invariants");
    }
}

#[test]
fn partials_survive_their_workers_death_and_expire() {
    let mut b = broker();
    let t0 = Instant::ZERO;
    let reply = ask(
        &mut b,
        t0,
        1,
        BrokerRequest::ReservePartial {
            key: key(0),
            bytes: 10,
        },
    );
    assert!(matches!(reply, BrokerReply::Granted { .. }));
    assert_eq!(
        ask(&mut b, t0, 2, BrokerRequest::AdoptPartial { key: key(0) }),
        BrokerReply::Rejected(Rejection::Busy)
    );
    b.check_invariants()
        .expect("invariants with an owned partial");
    let revoked = b.revoke_worker(WorkerId(1));
    assert_eq!(revoked.partials_orphaned, 1);
    b.check_invariants()
        .expect("invariants with an orphaned partial");
    assert!(matches!(
        ask(&mut b, t0, 2, BrokerRequest::AdoptPartial { key: key(0) }),
        BrokerReply::Granted { .. }
    ));
    b.handle_timeout(t0 + Duration::from_secs(25 * 3600));
    assert_eq!(b.partial_count(), 0);
    b.check_invariants().expect("invariants");
}

#[test]
fn dav_locks_are_counted_granted_with_capped_timeouts_and_expire() {
    let mut b = broker();
    let t0 = Instant::ZERO;
    assert!(b.dav().is_empty());
    let lock = |resource: &str| BrokerRequest::DavLock {
        resource: resource.into(),
        depth: crate::proto::DavDepth::Zero,
        owner: "me".into(),
        exclusive: true,
        timeout_ms: u64::MAX,
    };
    let reply = ask(&mut b, t0, 1, lock("/a"));
    let BrokerReply::Granted { id, expires_in_ms } = reply else {
        panic!("expected a grant, got {reply:?}");
    };
    let cap = b.limits().max_dav_lock_timeout();
    assert_eq!(expires_in_ms, cap.as_millis() as u64, "timeouts are capped");
    assert!(!b.dav().is_empty());
    b.check_invariants().expect("invariants with a DAV lock");
    assert_eq!(
        ask(&mut b, t0, 2, lock("/a")),
        BrokerReply::Rejected(Rejection::Busy)
    );
    // Locks belong to clients: a worker's death does not drop them.
    b.revoke_worker(WorkerId(1));
    assert_eq!(b.dav().len(), 1);
    let q = ask(
        &mut b,
        t0,
        2,
        BrokerRequest::DavQuery {
            resource: "/a".into(),
        },
    );
    assert!(matches!(q, BrokerReply::Locks(ref l) if l.len() == 1 && l[0].token == id));
    b.handle_timeout(t0 + cap);
    assert!(b.dav().is_empty(), "expired");
    b.check_invariants().expect("invariants");

    // A full table whose locks' time is up, their expiry not handled yet, has room.
    let mut raw = RawConfig::default();
    raw.broker.max_dav_locks = 3;
    let limits = raw.validate().expect("valid").broker().clone();
    let mut full = Broker::new(limits, CoreRng::from_seed([8; 32]));
    for i in 0..full.limits().max_dav_locks() {
        let r = ask(&mut full, t0, u64::from(i), lock(&format!("/l{i}")));
        assert!(matches!(r, BrokerReply::Granted { .. }), "{r:?}");
    }
    assert_eq!(
        ask(&mut full, t0, 9999, lock("/more")),
        BrokerReply::Rejected(Rejection::Saturated)
    );
    assert!(matches!(
        ask(&mut full, t0 + cap, 10_000, lock("/more")),
        BrokerReply::Granted { .. }
    ));

    // An UNLOCK that arrives after the time is up, before the expiry was handled, finds
    // nothing to release: the lock ended by itself.
    let BrokerReply::Granted { id, .. } = ask(&mut b, t0, 3, lock("/b")) else {
        panic!("a grant");
    };
    assert_eq!(
        ask(&mut b, t0 + cap, 4, BrokerRequest::DavUnlock { token: id }),
        BrokerReply::Rejected(Rejection::NotFound)
    );
    assert!(b.dav().is_empty());
    b.check_invariants().expect("invariants");
}

#[test]
fn dav_answers_that_no_frames_can_carry_are_refused() {
    use crate::proto::{DavDepth, MAX_FRAME_DEFAULT, MAX_FRAMES_PER_MESSAGE};
    let mut b = broker();
    let t0 = Instant::ZERO;
    let shared = |owner: String| BrokerRequest::DavLock {
        resource: "/s".into(),
        depth: DavDepth::Zero,
        owner,
        exclusive: false,
        timeout_ms: 60_000,
    };
    // A lock too large to report even alone is not taken.
    assert_eq!(
        ask(&mut b, t0, 1, shared("o".repeat(MAX_FRAME_DEFAULT))),
        BrokerReply::Rejected(Rejection::TooLarge)
    );
    assert!(b.dav().is_empty());
    // Shared locks that each fill a frame: a query answers as many as a message's frames
    // hold, and refuses one more.
    let filling = "o".repeat(MAX_FRAME_DEFAULT - (1 + 8 + 1 + 4) - 42 - "/s".len());
    let query = || BrokerRequest::DavQuery {
        resource: "/s".into(),
    };
    for _ in 0..MAX_FRAMES_PER_MESSAGE {
        let granted = ask(&mut b, t0, 1, shared(filling.clone()));
        assert!(
            matches!(granted, BrokerReply::Granted { .. }),
            "{granted:?}"
        );
    }
    let answer = ask(&mut b, t0, 2, query());
    assert!(matches!(answer, BrokerReply::Locks(ref l) if l.len() == MAX_FRAMES_PER_MESSAGE));
    assert!(matches!(
        ask(&mut b, t0, 1, shared(filling)),
        BrokerReply::Granted { .. }
    ));
    assert_eq!(
        ask(&mut b, t0, 2, query()),
        BrokerReply::Rejected(Rejection::TooLarge)
    );
}

#[test]
fn blocked_log_appends_of_a_dead_worker_are_discarded_and_counted() {
    let mut raw = RawConfig::default();
    raw.broker.log_queue_capacity = 1;
    let mut b = Broker::new(
        raw.validate().expect("valid").broker().clone(),
        CoreRng::from_seed([2; 32]),
    );
    for i in 0..3 {
        b.handle_request(
            Instant::ZERO,
            owner(1),
            i,
            BrokerRequest::AppendLog { record: "r".into() },
        );
    }
    assert_eq!(b.log().len(), 1);
    assert_eq!(b.log().blocked(), 2);
    b.revoke_worker(WorkerId(1));
    assert_eq!(b.log().discarded(), 2);
    assert_eq!(b.log().blocked(), 0);
}

/// Every counter of [`BrokerStats`] moves by exactly what happened (status and metrics
/// report them), each from zero so that a counter multiplied instead of added shows.
#[test]
fn the_broker_counts_grants_rejections_expiries_and_revocations() {
    let mut b = broker();
    let t0 = Instant::ZERO;
    let at = |ms| t0 + Duration::from_millis(ms);
    let rejected = |b: &Broker, r: Rejection| {
        let i = Rejection::ALL.iter().position(|x| *x == r).expect("listed");
        b.stats().rejected[i]
    };
    // One upload reserved, one lease granted, the same key busy for another worker.
    assert!(matches!(
        ask(&mut b, t0, 1, BrokerRequest::ReserveUpload { bytes: 10 }),
        BrokerReply::Granted { .. }
    ));
    assert!(matches!(
        ask(&mut b, t0, 1, BrokerRequest::AcquireLease { key: key(0) }),
        BrokerReply::Granted { .. }
    ));
    assert_eq!(
        ask(&mut b, t0, 2, BrokerRequest::AcquireLease { key: key(0) }),
        BrokerReply::Rejected(Rejection::Busy)
    );
    // Over the byte budget: too large, counted as such and not as saturation.
    assert_eq!(
        ask(
            &mut b,
            t0,
            2,
            BrokerRequest::ReserveUpload {
                bytes: MAX_BYTES + 1
            }
        ),
        BrokerReply::Rejected(Rejection::TooLarge)
    );
    // The second upload fills the table; the third is refused as saturated.
    assert!(matches!(
        ask(&mut b, t0, 2, BrokerRequest::ReserveUpload { bytes: 10 }),
        BrokerReply::Granted { .. }
    ));
    assert_eq!(
        ask(&mut b, t0, 2, BrokerRequest::ReserveUpload { bytes: 10 }),
        BrokerReply::Rejected(Rejection::Saturated)
    );
    let s = b.stats();
    assert_eq!(
        (s.granted, s.busy, s.saturated, s.uploads_reserved),
        (3, 1, 1, 2),
        "{s:?}"
    );
    assert_eq!(rejected(&b, Rejection::Busy), 1);
    assert_eq!(rejected(&b, Rejection::Saturated), 1);
    assert_eq!(rejected(&b, Rejection::TooLarge), 1);
    assert_eq!(b.reservations().count(), 2, "both reservations are listed");
    // Worker 1 goes: its lease and its reservation are revoked, two in all.
    let gone = b.revoke_worker(WorkerId(1));
    assert_eq!((gone.leases, gone.reservations), (1, 1));
    assert_eq!(b.stats().revoked, 2);
    // Worker 2's reservation expires with its TTL.
    assert_eq!(b.stats().expired, 0);
    b.handle_timeout(at(TTL.as_millis() as u64 + 1));
    assert_eq!(b.stats().expired, 1);
    assert_eq!(b.reservation_count(), 0);
}

/// A budget admits a request of exactly its size and refuses one byte more, for a whole
/// upload and for a resumable one.
#[test]
fn a_request_of_exactly_the_budget_fits_and_one_byte_more_does_not() {
    let mut b = broker();
    let t0 = Instant::ZERO;
    assert!(matches!(
        ask(
            &mut b,
            t0,
            1,
            BrokerRequest::ReserveUpload { bytes: MAX_BYTES }
        ),
        BrokerReply::Granted { .. }
    ));
    assert_eq!(b.reserved_bytes(), MAX_BYTES);
    assert!(matches!(
        ask(
            &mut b,
            t0,
            1,
            BrokerRequest::ReservePartial {
                key: key(1),
                bytes: MAX_BYTES
            }
        ),
        BrokerReply::Granted { .. }
    ));
    assert_eq!(b.partial_count(), 1);
    assert_eq!(b.partials().count(), 1);
    assert_eq!(
        ask(
            &mut b,
            t0,
            1,
            BrokerRequest::ReservePartial {
                key: key(2),
                bytes: MAX_BYTES + 1
            }
        ),
        BrokerReply::Rejected(Rejection::TooLarge)
    );
    assert_eq!(b.partial_count(), 1);
}

/// New limits govern the requests after them, and the log queue takes its new size.
#[test]
fn new_limits_apply_to_later_requests_and_to_the_log_queue() {
    let mut b = broker();
    let t0 = Instant::ZERO;
    let mut raw = RawConfig::default();
    raw.broker.max_upload_bytes = 5;
    raw.broker.log_queue_capacity = 3;
    raw.broker.log_policy = LogPolicy::Drop;
    let limits = raw.validate().expect("valid").broker().clone();
    b.set_limits(limits.clone());
    assert_eq!(b.limits(), &limits);
    assert_eq!(b.log().capacity(), 3);
    assert_eq!(
        ask(&mut b, t0, 1, BrokerRequest::ReserveUpload { bytes: 6 }),
        BrokerReply::Rejected(Rejection::TooLarge)
    );
}

/// The broker's own checker notices each table out of step with the others, whether
/// the broker holds a grant or nothing (where it takes its shortcut past empty tables).
#[test]
fn the_invariant_check_notices_each_broken_table() {
    let t0 = Instant::ZERO;
    let holding = |request: BrokerRequest| {
        let mut b = broker();
        assert!(matches!(
            ask(&mut b, t0, 1, request),
            BrokerReply::Granted { .. }
        ));
        b.check_invariants().expect("a sound broker passes");
        b
    };
    let lease = || holding(BrokerRequest::AcquireLease { key: key(0) });
    let reservation = || holding(BrokerRequest::ReserveUpload { bytes: 10 });
    let partial = || {
        holding(BrokerRequest::ReservePartial {
            key: key(0),
            bytes: 10,
        })
    };
    type Breaking = fn(&mut Broker);
    let broken: [(&str, Broker, Breaking); 9] = [
        ("a lease missing from the key index", lease(), |b| {
            b.lease_by_key.clear()
        }),
        ("a key index entry without its lease", lease(), |b| {
            b.leases.clear()
        }),
        ("a lease without its expiry", lease(), |b| {
            b.expiries.clear()
        }),
        ("a lease missing from its owner's grants", lease(), |b| {
            b.by_owner.clear()
        }),
        (
            "reserved bytes that are not the reservations' sum",
            reservation(),
            |b| b.reserved_bytes += 1,
        ),
        ("a reservation counted in bytes only", reservation(), |b| {
            b.reservations.clear()
        }),
        ("a partial upload without its expiry", partial(), |b| {
            b.expiries.clear()
        }),
        ("reserved bytes with nothing reserved", broker(), |b| {
            b.reserved_bytes = 1
        }),
        ("an expiry left with nothing granted", lease(), |b| {
            b.leases.clear();
            b.lease_by_key.clear();
            b.by_owner.clear();
        }),
    ];
    for (what, mut b, breaking) in broken {
        breaking(&mut b);
        assert!(b.check_invariants().is_err(), "not noticed: {what}");
    }
}

fn journalled(token: u128, resource: &str, expires_in_ms: u64) -> proto::DavLockInfo {
    proto::DavLockInfo {
        token: LeaseId(token),
        resource: resource.into(),
        depth: proto::DavDepth::Zero,
        owner: String::new(),
        exclusive: true,
        expires_in_ms,
        generation: Generation(0),
    }
}

#[test]
fn a_restored_journal_gets_the_limits_a_lock_gets() {
    let mut raw = RawConfig::default();
    raw.broker.max_dav_locks = 3;
    let limits = raw.validate().expect("valid").broker().clone();
    let cap = ms(limits.max_dav_lock_timeout());
    let mut b = Broker::new(limits, CoreRng::from_seed([9; 32]));
    let t0 = Instant::ZERO;
    // Ten locks for a table of three, one of them "until the year 9999".
    let mut locks: Vec<_> = (1..=10u128)
        .map(|i| journalled(i, &format!("/r{i}"), 1_000 * i as u64))
        .collect();
    locks.push(journalled(99, "/forever", 253_402_300_799_000));
    let report = b.restore_dav_locks(t0, locks);
    assert_eq!(
        report,
        DavRestore {
            restored: 3,
            over_table_limit: 8,
            timeout_capped: 1,
            skipped: 0
        },
        "rule: a restore fills the table no further than max_dav_locks and says what it dropped"
    );
    assert_eq!(b.dav().live(t0), 3);
    let forever = b.dav().get(LeaseId(99)).expect("kept: the most time left");
    assert_eq!(
        forever.expires_at,
        t0 + Duration::from_millis(cap),
        "rule: a restored lock lasts no longer than max_dav_lock_timeout"
    );
    assert!(b.dav().contains(LeaseId(10)) && b.dav().contains(LeaseId(9)));
    assert!(
        !b.dav().contains(LeaseId(1)),
        "the least time left is dropped"
    );
    b.check_invariants().expect("invariants");
    // Its expiry is armed at the cap, not at the year 9999.
    b.handle_timeout(t0 + Duration::from_millis(cap));
    assert!(b.dav().is_empty(), "every restored lock expired by the cap");
}

/// A reservation grows within the byte budget, keeps its size when the budget is full,
/// and gives back all it grew to when released (decision 0064).
#[test]
fn a_reservation_grows_within_the_budget_and_keeps_its_size_when_it_cannot() {
    let mut b = broker();
    let t0 = Instant::ZERO;
    let grant = |reply| match reply {
        BrokerReply::Granted { id, .. } => id,
        other => panic!("expected a grant, got {other:?}"),
    };
    let a = grant(ask(
        &mut b,
        t0,
        1,
        BrokerRequest::ReserveUpload { bytes: 10 },
    ));
    let c = grant(ask(
        &mut b,
        t0,
        2,
        BrokerRequest::ReserveUpload { bytes: 10 },
    ));
    grant(ask(
        &mut b,
        t0,
        1,
        BrokerRequest::GrowReservation { id: a, bytes: 60 },
    ));
    assert_eq!(b.reserved_bytes(), 70);
    // 60 + 41 > 100: the budget is full; nothing changes.
    assert_eq!(
        ask(
            &mut b,
            t0,
            2,
            BrokerRequest::GrowReservation { id: c, bytes: 41 }
        ),
        BrokerReply::Rejected(Rejection::Saturated)
    );
    assert_eq!(b.reserved_bytes(), 70);
    // Exactly the budget fits.
    grant(ask(
        &mut b,
        t0,
        2,
        BrokerRequest::GrowReservation { id: c, bytes: 40 },
    ));
    assert_eq!(b.reserved_bytes(), MAX_BYTES);
    // More than the budget itself, and another worker's reservation: refused.
    assert_eq!(
        ask(
            &mut b,
            t0,
            1,
            BrokerRequest::GrowReservation {
                id: a,
                bytes: MAX_BYTES + 1
            }
        ),
        BrokerReply::Rejected(Rejection::TooLarge)
    );
    assert_eq!(
        ask(
            &mut b,
            t0,
            1,
            BrokerRequest::GrowReservation { id: c, bytes: 50 }
        ),
        BrokerReply::Rejected(Rejection::NotOwner)
    );
    // Asking for less only renews.
    grant(ask(
        &mut b,
        t0,
        1,
        BrokerRequest::GrowReservation { id: a, bytes: 5 },
    ));
    assert_eq!(b.reserved_bytes(), MAX_BYTES);
    assert_eq!(
        ask(&mut b, t0, 1, BrokerRequest::ReleaseReservation { id: a }),
        BrokerReply::Released
    );
    assert_eq!(b.reserved_bytes(), 40);
    b.check_invariants().expect("invariants");
}

/// The proxy's grants go through the broker's requests within `--proxy-max-inflight`, and
/// a worker's revocation gives back every grant it held (decision 0076).
#[test]
fn proxy_grants_are_bounded_and_revoked_with_their_worker() {
    let mut raw = RawConfig::default();
    raw.broker.max_proxy_inflight = 3;
    let limits = raw.validate().expect("valid").broker().clone();
    let mut b = Broker::new(limits, CoreRng::from_seed([7; 32]));
    let t0 = Instant::ZERO;
    let acquire = |want| BrokerRequest::AcquireProxyGrants { want };
    assert_eq!(
        ask(&mut b, t0, 1, acquire(2)),
        BrokerReply::ProxyGrants { granted: 2 }
    );
    assert_eq!(
        ask(&mut b, t0, 2, acquire(2)),
        BrokerReply::ProxyGrants { granted: 1 }
    );
    assert_eq!(
        ask(&mut b, t0, 2, acquire(1)),
        BrokerReply::Rejected(Rejection::Saturated)
    );
    assert_eq!(
        ask(&mut b, t0, 2, BrokerRequest::ReturnProxyGrants { count: 9 }),
        BrokerReply::Released
    );
    assert_eq!(
        b.proxy_grants().total(),
        2,
        "only what worker 2 held came back"
    );
    assert_eq!(b.revoke_worker(WorkerId(1)).proxy_grants, 2);
    assert_eq!(b.proxy_grants().total(), 0);
    b.check_invariants().expect("invariants");
    assert_eq!(
        ask(&mut b, t0, 2, acquire(5)),
        BrokerReply::ProxyGrants { granted: 3 }
    );
}

/// CGI's grants are the proxy's table for another budget: bounded by
/// `--cgi-max-concurrent` independently of the proxy's, and revoked with their worker
/// (decision 0092).
#[test]
fn cgi_grants_have_their_own_bound_and_are_revoked_with_their_worker() {
    let mut raw = RawConfig::default();
    raw.broker.max_proxy_inflight = 1;
    raw.broker.max_cgi_concurrent = 2;
    let limits = raw.validate().expect("valid").broker().clone();
    let mut b = Broker::new(limits, CoreRng::from_seed([7; 32]));
    let t0 = Instant::ZERO;
    let acquire = |want| BrokerRequest::AcquireCgiGrants { want };
    assert_eq!(
        ask(&mut b, t0, 1, BrokerRequest::AcquireProxyGrants { want: 1 }),
        BrokerReply::ProxyGrants { granted: 1 }
    );
    assert_eq!(
        ask(&mut b, t0, 1, acquire(5)),
        BrokerReply::CgiGrants { granted: 2 },
        "the CGI bound is its own, not the proxy's"
    );
    assert_eq!(
        ask(&mut b, t0, 2, acquire(1)),
        BrokerReply::Rejected(Rejection::Saturated),
        "--cgi-max-concurrent is service-wide"
    );
    let revoked = b.revoke_worker(WorkerId(1));
    assert_eq!((revoked.proxy_grants, revoked.cgi_grants), (1, 2));
    assert_eq!(b.cgi_grants().total(), 0);
    b.check_invariants().expect("invariants");
    assert_eq!(
        ask(&mut b, t0, 2, acquire(1)),
        BrokerReply::CgiGrants { granted: 1 },
        "a dead worker's CGI grants came back"
    );
    assert_eq!(
        ask(&mut b, t0, 2, BrokerRequest::ReturnCgiGrants { count: 4 }),
        BrokerReply::Released
    );
    assert_eq!(b.cgi_grants().total(), 0);
}
