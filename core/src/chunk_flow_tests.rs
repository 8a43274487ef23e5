use super::*;
use proptest::prelude::*;

/// The upload every test sends: byte `i` is `i`.
const TOTAL: u64 = 12;

fn upload() -> Vec<u8> {
    (0..TOTAL as u8).collect()
}

/// Who the broker thinks owns the target's partial reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Us,
    /// A worker that died: the reservation waits for adoption (0004).
    Dead,
    /// A live worker idle on it between chunks.
    Other,
}

/// The model broker: what it holds for this worker, and the target's partial reservation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Broker {
    leases: Vec<LeaseId>,
    reservations: Vec<LeaseId>,
    partial: Option<(LeaseId, Owner)>,
    next: u128,
}

impl Broker {
    fn grant(&mut self) -> LeaseId {
        self.next += 1;
        LeaseId(100 + self.next)
    }

    /// The parent reaps a dead worker: its leases and reservations go, its partial
    /// reservation stays for whoever resumes.
    fn reap(&mut self) {
        self.leases.clear();
        self.reservations.clear();
        if let Some((_, owner @ Owner::Us)) = &mut self.partial {
            *owner = Owner::Dead;
        }
    }
}

/// The model file system: the target, and the partial's two files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Fs {
    target: Option<Vec<u8>>,
    data: Option<Vec<u8>>,
    meta: Option<Recorded>,
    /// The partial is older than `partial_ttl`.
    expired: bool,
    /// A stale partial was discarded (the one way held bytes may shrink).
    discarded: bool,
}

/// One chunk as the client sends it.
#[derive(Debug, Clone, Copy)]
struct Send {
    start: u64,
    end: u64,
    /// The body ends after this many bytes (the client went away).
    cut: Option<u64>,
}

fn options(send: Send, overwrite: bool) -> ChunkOptions {
    ChunkOptions {
        start: send.start,
        end: send.end,
        total: TOTAL,
        overwrite,
        create_only: false,
    }
}

/// Runs one chunk against the model. The worker dies while performing action number
/// `crash_after` (a copy leaves half of its bytes, as a killed writer does); `None`
/// runs to the end. Returns the answer if one was given.
fn run(
    fs: &mut Fs,
    broker: &mut Broker,
    send: Send,
    overwrite: bool,
    crash_after: Option<usize>,
) -> Option<ChunkAnswer> {
    let mut flow = ChunkFlow::new(options(send, overwrite));
    let mut taken = 0;
    // The lease was confirmed after the last byte was written.
    let mut confirmed = false;
    // Every byte of the open partial file is durable (no write since its last fsync).
    let mut durable = false;
    while let Some(action) = flow.next_action() {
        let crash = crash_after == Some(taken);
        taken += 1;
        assert!(taken < 100, "the flow ends");
        if crash && !matches!(action, ChunkAction::Copy { .. }) {
            broker.reap();
            return None;
        }
        let event = match action {
            ChunkAction::Reserve { bytes } => {
                assert_eq!(bytes, send.end - send.start + 1);
                let id = broker.grant();
                broker.reservations.push(id);
                ChunkEvent::Granted(id)
            }
            ChunkAction::Lease => {
                let id = broker.grant();
                broker.leases.push(id);
                ChunkEvent::Granted(id)
            }
            ChunkAction::InspectTarget => ChunkEvent::Target(match fs.target {
                Some(_) => Existing::File,
                None => Existing::Nothing,
            }),
            ChunkAction::InspectPartial => ChunkEvent::Held(Held {
                meta: fs.meta,
                data: fs.data.is_some(),
                have: fs.data.as_ref().map_or(0, |d| d.len() as u64),
                expired: fs.expired,
            }),
            ChunkAction::DiscardStale => {
                fs.data = None;
                fs.meta = None;
                fs.expired = false;
                fs.discarded = true;
                ChunkEvent::Discarded
            }
            // As the broker does: adopting and reserving both grant a partial reservation
            // that is ours or orphaned, and refuse one a live worker owns.
            ChunkAction::TakePartial { adopt } => match (adopt, broker.partial) {
                (_, Some((id, Owner::Us | Owner::Dead))) => {
                    broker.partial = Some((id, Owner::Us));
                    ChunkEvent::Granted(id)
                }
                (true, None) => ChunkEvent::Refused(Rejection::NotFound),
                (_, Some(_)) => ChunkEvent::Refused(Rejection::Busy),
                (false, None) => {
                    let id = broker.grant();
                    broker.partial = Some((id, Owner::Us));
                    ChunkEvent::Granted(id)
                }
            },
            ChunkAction::TakeOver(id) => {
                if broker.partial.is_some_and(|(p, _)| p == id) {
                    broker.partial = None;
                }
                continue;
            }
            ChunkAction::Record(id) => {
                fs.meta = Some(Recorded {
                    total: TOTAL,
                    grant: Some(id),
                });
                ChunkEvent::Recorded
            }
            ChunkAction::OpenAt { at } => {
                let mut data = fs.data.take().unwrap_or_default();
                data.resize(at as usize, 0);
                fs.data = Some(data);
                // A file opened by this worker may hold bytes another wrote and never
                // synced (it died before its sync).
                durable = false;
                ChunkEvent::Opened
            }
            ChunkAction::Copy { skip } => {
                assert!(!broker.leases.is_empty(), "appending without the lease");
                durable = false;
                let sent = &upload()[send.start as usize..=send.end as usize];
                let arrived = send
                    .cut
                    .map_or(sent.len(), |c| (c as usize).min(sent.len()));
                let mut new = &sent[(skip as usize).min(arrived)..arrived];
                if crash {
                    new = &new[..new.len() / 2];
                }
                let data = fs.data.as_mut().expect("copying into no partial file");
                data.extend_from_slice(new);
                confirmed = false;
                if crash {
                    broker.reap();
                    return None;
                }
                ChunkEvent::Copied {
                    written: new.len() as u64,
                    file: true,
                    result: if arrived < sent.len() {
                        Err(WriteFailure::Source)
                    } else {
                        Ok(())
                    },
                }
            }
            ChunkAction::Sync => {
                durable = true;
                ChunkEvent::Synced
            }
            ChunkAction::SyncDirectory => ChunkEvent::Synced,
            ChunkAction::ConfirmLease => {
                confirmed = true;
                ChunkEvent::Granted(broker.leases[0])
            }
            ChunkAction::Publish { overwrite } => {
                assert!(!broker.leases.is_empty(), "published without the lease");
                assert!(confirmed, "published without confirming the lease");
                assert!(
                    durable,
                    "torn-rename rule: renamed into place before its bytes were made durable"
                );
                if fs.target.is_some() && !overwrite {
                    ChunkEvent::Failed(WriteFailure::Exists)
                } else {
                    let replaced = fs.target.is_some();
                    fs.target = fs.data.take();
                    ChunkEvent::Published { replaced }
                }
            }
            ChunkAction::RemovePartial => {
                fs.data = None;
                fs.meta = None;
                ChunkEvent::Removed
            }
            ChunkAction::KeepPartial(id) => {
                assert_eq!(
                    broker.partial,
                    Some((id, Owner::Us)),
                    "keeping what we hold"
                );
                continue;
            }
            ChunkAction::ReleasePartial(id) => {
                assert_eq!(
                    broker.partial,
                    Some((id, Owner::Us)),
                    "releasing what we hold"
                );
                broker.partial = None;
                continue;
            }
            ChunkAction::ReleaseLease(id) => {
                broker.leases.retain(|&l| l != id);
                continue;
            }
            ChunkAction::ReleaseReservation(id) => {
                broker.reservations.retain(|&r| r != id);
                continue;
            }
            ChunkAction::Finish(answer) => {
                assert!(flow.next_action().is_none(), "Finish is the last action");
                return Some(answer);
            }
        };
        flow.handle(event);
    }
    panic!("no answer")
}

/// What a client learns from `bytes */TOTAL`: the bytes held (0 if none or stale).
fn query(fs: &Fs) -> u64 {
    let same = fs.meta.is_some_and(|m| m.total == TOTAL);
    if same && !fs.expired {
        fs.data.as_ref().map_or(0, |d| d.len() as u64)
    } else {
        0
    }
}

/// The state before the chunk: `have` bytes held, the partial reservation's owner.
fn before(have: u64, owner: Option<Owner>, expired: bool, target: bool) -> (Fs, Broker) {
    let mut broker = Broker::default();
    // The broker forgets a partial reservation after `partial_ttl`, as the files expire.
    let recorded = match owner.filter(|_| !expired) {
        Some(o) => {
            let id = broker.grant();
            broker.partial = Some((id, o));
            id
        }
        // The broker forgot it (its TTL passed, or the parent restarted).
        None => LeaseId(99),
    };
    let held = have > 0 || owner.is_some();
    let fs = Fs {
        target: target.then(|| b"old".to_vec()),
        data: held.then(|| upload()[..have as usize].to_vec()),
        meta: held.then_some(Recorded {
            total: TOTAL,
            grant: Some(recorded),
        }),
        expired,
        discarded: false,
    };
    (fs, broker)
}

/// The invariants after a chunk, finished or killed.
fn check(was: &Fs, fs: &Fs, broker: &Broker, answer: Option<&ChunkAnswer>) {
    let whole = upload();
    if let Some(t) = &fs.target {
        assert!(
            t == &whole || was.target.as_ref() == Some(t),
            "a published partial file: {t:?}"
        );
    }
    if let Some(d) = &fs.data {
        assert!(whole.starts_with(d), "held bytes are not a prefix: {d:?}");
    }
    let len = |f: &Fs| f.data.as_ref().map_or(0, Vec::len);
    let published = fs.target.as_ref() == Some(&whole);
    assert!(
        len(fs) >= len(was) || fs.discarded || published,
        "held bytes went back from {} to {}",
        len(was),
        len(fs)
    );
    assert!(broker.leases.is_empty(), "lease leaked: {broker:?}");
    assert!(
        broker.reservations.is_empty(),
        "reservation leaked: {broker:?}"
    );
    if let Some((id, _)) = broker.partial
        && fs.data.is_some()
        && answer.is_some()
    {
        // A partial that is kept names the reservation the next chunk adopts (a killed
        // worker may leave an older one recorded: the next chunk adopts by target and
        // records the new one).
        assert_eq!(fs.meta.and_then(|m| m.grant), Some(id), "{fs:?} {broker:?}");
    }
    if let Some(Ok(ChunkDone::Complete(_))) = answer {
        assert!(published, "complete but not published");
        assert_eq!((&fs.data, &fs.meta), (&None, &None), "partial left behind");
        assert_eq!(broker.partial, None, "partial reservation left behind");
    }
    if let Some(Ok(ChunkDone::Incomplete { have })) = answer {
        assert_eq!(*have, len(fs) as u64, "answered a length not held");
        assert!(
            broker.partial.is_some(),
            "an incomplete upload lost its reservation"
        );
    }
}

fn owners() -> impl Strategy<Value = Option<Owner>> {
    prop_oneof![
        Just(None),
        Just(Some(Owner::Us)),
        Just(Some(Owner::Dead)),
        Just(Some(Owner::Other)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// The worker dies in every step of a chunk: what is left is a prefix that the
    /// client resumes from its `Range` to a whole published file, and the parent's
    /// reaping leaves nothing held.
    #[test]
    fn a_crash_at_any_step_leaves_a_resumable_prefix(
        have in 0..=TOTAL,
        owner in owners(),
        expired in any::<bool>(),
        target in any::<bool>(),
        back in 0..4u64,
        len in 1..TOTAL,
        cut in proptest::option::of(0..TOTAL),
        crash_after in 0..24usize,
    ) {
        let (mut fs, mut broker) = before(have, owner, expired, target);
        // A client that holds nothing more to send resends its last byte.
        let start = query(&fs).min(TOTAL - 1).saturating_sub(back);
        let end = (start + len - 1).min(TOTAL - 1);
        let send = Send { start, end, cut };
        let was = fs.clone();
        let answer = run(&mut fs, &mut broker, send, true, Some(crash_after));
        check(&was, &fs, &broker, answer.as_ref());

        // The client asks what is held and sends the rest in one piece.
        let at = query(&fs);
        let rest = Send { start: at.min(TOTAL - 1), end: TOTAL - 1, cut: None };
        let was = fs.clone();
        fs.discarded = false;
        let answer = run(&mut fs, &mut broker, rest, true, None);
        check(&was, &fs, &broker, answer.as_ref());
        prop_assert!(
            matches!(answer, Some(Ok(ChunkDone::Complete(_)))),
            "resuming at {} after a crash after {} actions: {:?}", at, crash_after, answer
        );
        prop_assert_eq!(fs.target, Some(upload()));
    }

    /// Whatever the driver reports, in whatever order: no panic, an answer at the end,
    /// and every grant given (or, the partial reservation, kept) exactly once.
    #[test]
    fn any_events_end_with_an_answer_and_everything_back(
        picks in proptest::collection::vec(any::<u8>(), 40),
        have in 0..=TOTAL,
    ) {
        let mut flow = ChunkFlow::new(ChunkOptions {
            start: have / 2, end: TOTAL - 1, total: TOTAL, overwrite: true, create_only: false,
        });
        let mut granted: Vec<LeaseId> = Vec::new();
        let mut returned: Vec<LeaseId> = Vec::new();
        let mut picks = picks.into_iter().cycle();
        let mut finished = false;
        for _ in 0..100 {
            let Some(action) = flow.next_action() else { break };
            let pick = picks.next().unwrap_or(0);
            let fresh = LeaseId(1000 + granted.len() as u128);
            let failures = [
                ChunkEvent::Failed(WriteFailure::Io),
                ChunkEvent::Refused(Rejection::Busy),
                ChunkEvent::Refused(Rejection::NotFound),
                ChunkEvent::NoAnswer,
                ChunkEvent::Opened,
            ];
            let right = match action {
                ChunkAction::Reserve { .. }
                | ChunkAction::Lease
                | ChunkAction::TakePartial { .. } => ChunkEvent::Granted(fresh),
                ChunkAction::ConfirmLease => ChunkEvent::Granted(granted.get(1).copied().unwrap_or(fresh)),
                ChunkAction::InspectTarget => ChunkEvent::Target(match pick % 3 {
                    0 => Existing::Nothing, 1 => Existing::File, _ => Existing::Directory,
                }),
                ChunkAction::InspectPartial => ChunkEvent::Held(Held {
                    meta: (pick % 2 == 0).then_some(Recorded {
                        total: TOTAL - u64::from(pick % 5 == 0), grant: Some(LeaseId(7)),
                    }),
                    data: pick % 3 != 0, have, expired: pick % 7 == 0,
                }),
                ChunkAction::DiscardStale => ChunkEvent::Discarded,
                ChunkAction::Record(_) => ChunkEvent::Recorded,
                ChunkAction::OpenAt { .. } => ChunkEvent::Opened,
                ChunkAction::Copy { .. } => ChunkEvent::Copied {
                    written: u64::from(pick % 8),
                    file: pick % 3 != 0,
                    result: if pick % 4 == 0 { Err(WriteFailure::Source) } else { Ok(()) },
                },
                ChunkAction::Sync | ChunkAction::SyncDirectory => ChunkEvent::Synced,
                ChunkAction::Publish { .. } => ChunkEvent::Published { replaced: pick % 2 == 0 },
                ChunkAction::RemovePartial => ChunkEvent::Removed,
                ChunkAction::KeepPartial(id)
                | ChunkAction::ReleasePartial(id)
                | ChunkAction::ReleaseLease(id)
                | ChunkAction::ReleaseReservation(id) => {
                    prop_assert!(!returned.contains(&id), "{:?} given back twice", id);
                    returned.push(id);
                    continue;
                }
                ChunkAction::TakeOver(_) => continue,
                ChunkAction::Finish(_) => {
                    finished = true;
                    prop_assert!(flow.next_action().is_none());
                    break;
                }
            };
            let event = if pick >= 200 { failures[usize::from(pick) % failures.len()] } else { right };
            if let ChunkEvent::Granted(id) = event
                && id == fresh
            {
                granted.push(id);
            }
            flow.handle(event);
        }
        prop_assert!(finished, "no answer");
        prop_assert!(flow.is_done());
        granted.sort();
        returned.sort();
        prop_assert_eq!(granted, returned);
    }
}

#[test]
fn the_last_chunk_in_order() {
    let mut flow = ChunkFlow::new(ChunkOptions {
        start: 4,
        end: TOTAL - 1,
        total: TOTAL,
        overwrite: false,
        create_only: false,
    });
    let (r, l, p) = (LeaseId(1), LeaseId(2), LeaseId(3));
    let script = [
        (
            ChunkAction::Reserve { bytes: 8 },
            Some(ChunkEvent::Granted(r)),
        ),
        (ChunkAction::Lease, Some(ChunkEvent::Granted(l))),
        (
            ChunkAction::InspectTarget,
            Some(ChunkEvent::Target(Existing::Nothing)),
        ),
        (
            ChunkAction::InspectPartial,
            Some(ChunkEvent::Held(Held {
                meta: Some(Recorded {
                    total: TOTAL,
                    grant: Some(p),
                }),
                data: true,
                have: 6,
                expired: false,
            })),
        ),
        (
            ChunkAction::TakePartial { adopt: true },
            Some(ChunkEvent::Granted(p)),
        ),
        (ChunkAction::OpenAt { at: 6 }, Some(ChunkEvent::Opened)),
        (
            ChunkAction::Copy { skip: 2 },
            Some(ChunkEvent::Copied {
                written: 6,
                file: true,
                result: Ok(()),
            }),
        ),
        (ChunkAction::Sync, Some(ChunkEvent::Synced)),
        (ChunkAction::ConfirmLease, Some(ChunkEvent::Granted(l))),
        (ChunkAction::OpenAt { at: TOTAL }, Some(ChunkEvent::Opened)),
        (ChunkAction::Sync, Some(ChunkEvent::Synced)),
        (
            ChunkAction::Publish { overwrite: false },
            Some(ChunkEvent::Published { replaced: false }),
        ),
        (ChunkAction::SyncDirectory, Some(ChunkEvent::Synced)),
        (ChunkAction::RemovePartial, Some(ChunkEvent::Removed)),
        (ChunkAction::ReleasePartial(p), None),
        (ChunkAction::ReleaseLease(l), None),
        (ChunkAction::ReleaseReservation(r), None),
        (
            ChunkAction::Finish(Ok(ChunkDone::Complete(Published::Created))),
            None,
        ),
    ];
    for (want, event) in script {
        assert_eq!(flow.next_action(), Some(want));
        if let Some(e) = event {
            flow.handle(e);
        }
    }
    assert_eq!(flow.next_action(), None);
    assert!(flow.is_done());
}

/// The answer for one chunk sent to a model state.
fn answer_for(
    have: u64,
    owner: Option<Owner>,
    target: bool,
    overwrite: bool,
    send: Send,
) -> (ChunkAnswer, Fs, Broker) {
    let (mut fs, mut broker) = before(have, owner, false, target);
    let answer = run(&mut fs, &mut broker, send, overwrite, None).expect("an answer");
    (answer, fs, broker)
}

#[test]
fn the_answers_of_today() {
    let chunk = |start, end| Send {
        start,
        end,
        cut: None,
    };
    // A gap, and the `Range` held in the answer.
    let (a, ..) = answer_for(4, Some(Owner::Us), false, true, chunk(6, 8));
    assert_eq!(a, Err(ChunkFailure::RangeGap { start: 6, have: 4 }));
    // A retransmission of what is held: nothing read, the partial kept.
    let (a, _, broker) = answer_for(8, Some(Owner::Us), false, true, chunk(0, 3));
    assert_eq!(a, Ok(ChunkDone::Incomplete { have: 8 }));
    assert!(broker.partial.is_some());
    // An overlap is dropped.
    let (a, fs, _) = answer_for(4, Some(Owner::Us), false, true, chunk(2, 7));
    assert_eq!(a, Ok(ChunkDone::Incomplete { have: 8 }));
    assert_eq!(fs.data, Some(upload()[..8].to_vec()));
    // The target exists and overwriting is off.
    let (a, ..) = answer_for(0, None, true, false, chunk(0, 3));
    assert_eq!(a, Err(ChunkFailure::Write(WriteFailure::Exists)));
    // A client that went away keeps what arrived.
    let cut = Send {
        start: 0,
        end: TOTAL - 1,
        cut: Some(5),
    };
    let (a, fs, broker) = answer_for(0, None, false, true, cut);
    assert_eq!(a, Err(ChunkFailure::Write(WriteFailure::Source)));
    assert_eq!(fs.data, Some(upload()[..5].to_vec()));
    assert_eq!(broker.partial.map(|(_, o)| o), Some(Owner::Us));

    // Decided from what the driver reports.
    let first = |target, held, create_only| {
        let mut flow = ChunkFlow::new(ChunkOptions {
            start: 0,
            end: 3,
            total: TOTAL,
            overwrite: true,
            create_only,
        });
        let mut last = None;
        while let Some(a) = flow.next_action() {
            last = Some(a);
            flow.handle(match a {
                ChunkAction::Reserve { .. } | ChunkAction::Lease => ChunkEvent::Granted(LeaseId(1)),
                ChunkAction::InspectTarget => ChunkEvent::Target(target),
                ChunkAction::InspectPartial => ChunkEvent::Held(held),
                _ => continue,
            });
        }
        last
    };
    let finish = |r| Some(ChunkAction::Finish(Err(r)));
    let none = Held::default();
    assert_eq!(
        first(Existing::Directory, none, false),
        finish(ChunkFailure::Write(WriteFailure::IsDirectory))
    );
    assert_eq!(
        first(Existing::File, none, true),
        finish(ChunkFailure::Write(WriteFailure::PreconditionFailed))
    );
    let other_total = Held {
        meta: Some(Recorded {
            total: 99,
            grant: None,
        }),
        data: true,
        have: 3,
        expired: false,
    };
    assert_eq!(
        first(Existing::Nothing, other_total, false),
        finish(ChunkFailure::RangeMismatch {
            total: TOTAL,
            held: 99
        })
    );
    // A stale upload of another total is discarded, not refused.
    let stale = Held {
        expired: true,
        ..other_total
    };
    assert_eq!(
        first(Existing::Nothing, stale, false),
        Some(ChunkAction::DiscardStale)
    );
    // So is a meta file of another total with no bytes behind it (its writer was killed
    // after publishing and before removing it): it holds nothing to resume.
    let meta_alone = Held {
        data: false,
        have: 0,
        ..other_total
    };
    assert_eq!(
        first(Existing::File, meta_alone, false),
        Some(ChunkAction::DiscardStale)
    );
    // Of the same total it is adopted as before.
    let same_total = Held {
        meta: Some(Recorded {
            total: TOTAL,
            grant: None,
        }),
        ..meta_alone
    };
    assert_ne!(
        first(Existing::Nothing, same_total, false),
        Some(ChunkAction::DiscardStale)
    );
}

#[test]
fn a_live_owner_is_taken_over_and_a_forgotten_one_reserved_again() {
    let send = Send {
        start: 4,
        end: 7,
        cut: None,
    };
    for owner in [Some(Owner::Other), None] {
        let (a, fs, broker) = answer_for(4, owner, false, true, send);
        assert_eq!(a, Ok(ChunkDone::Incomplete { have: 8 }), "{owner:?}");
        let (id, o) = broker.partial.expect("a partial reservation");
        assert_eq!(o, Owner::Us);
        assert_eq!(fs.meta.and_then(|m| m.grant), Some(id), "recorded anew");
    }
}

/// Which failures give the partial reservation back and which keep it: as before the
/// flow, a file that could not be opened, synced or recorded gives it back; a copy, a
/// lease confirmation or a publication that failed keeps the bytes resumable.
#[test]
fn failures_keep_the_partial_only_where_its_bytes_are_resumable() {
    let fate = |failing: fn(&ChunkAction) -> bool| {
        let mut flow = ChunkFlow::new(ChunkOptions {
            start: 0,
            end: TOTAL - 1,
            total: TOTAL,
            overwrite: true,
            create_only: false,
        });
        let mut taken = Vec::new();
        while let Some(a) = flow.next_action() {
            taken.push(a);
            let event = if failing(&a) {
                ChunkEvent::Failed(WriteFailure::NoSpace)
            } else {
                let Some(event) = success(&a) else { continue };
                event
            };
            flow.handle(event);
        }
        let kept = taken.contains(&ChunkAction::KeepPartial(LeaseId(3)));
        let released = taken.contains(&ChunkAction::ReleasePartial(LeaseId(3)));
        assert!(kept != released, "{taken:?}");
        assert!(taken.contains(&ChunkAction::ReleaseLease(LeaseId(2))));
        assert!(taken.contains(&ChunkAction::ReleaseReservation(LeaseId(1))));
        assert_eq!(
            taken.last(),
            Some(&ChunkAction::Finish(Err(ChunkFailure::Write(
                WriteFailure::NoSpace
            ))))
        );
        kept
    };
    assert!(!fate(|a| matches!(a, ChunkAction::Record(_))));
    assert!(!fate(|a| *a == ChunkAction::OpenAt { at: 0 }));
    assert!(!fate(|a| *a == ChunkAction::Sync));
    assert!(!fate(|a| *a == ChunkAction::OpenAt { at: TOTAL }));
    assert!(!fate(|a| *a == ChunkAction::RemovePartial));
    assert!(!fate(|a| *a == ChunkAction::SyncDirectory));
    assert!(fate(|a| *a == ChunkAction::ConfirmLease));
    assert!(fate(|a| matches!(a, ChunkAction::Publish { .. })));
}

#[test]
fn a_target_that_appeared_is_never_replaced_and_nothing_is_left_to_resume() {
    let mut flow = ChunkFlow::new(ChunkOptions {
        start: 0,
        end: TOTAL - 1,
        total: TOTAL,
        overwrite: false,
        create_only: false,
    });
    let mut taken = Vec::new();
    while let Some(a) = flow.next_action() {
        taken.push(a);
        let event = match a {
            ChunkAction::Publish { .. } => ChunkEvent::Failed(WriteFailure::Exists),
            a => {
                let Some(event) = success(&a) else { continue };
                event
            }
        };
        flow.handle(event);
    }
    assert_eq!(
        &taken[taken.len() - 5..],
        &[
            ChunkAction::RemovePartial,
            ChunkAction::ReleasePartial(LeaseId(3)),
            ChunkAction::ReleaseLease(LeaseId(2)),
            ChunkAction::ReleaseReservation(LeaseId(1)),
            ChunkAction::Finish(Err(ChunkFailure::Write(WriteFailure::Exists))),
        ]
    );
}

/// A worker killed after the last chunk was synced, before it was published, leaves
/// every byte held: the client's resend of its last chunk publishes it.
#[test]
fn an_upload_held_whole_is_published_by_its_next_chunk() {
    let resend = Send {
        start: TOTAL - 4,
        end: TOTAL - 1,
        cut: None,
    };
    let (a, fs, broker) = answer_for(TOTAL, Some(Owner::Dead), false, true, resend);
    assert_eq!(a, Ok(ChunkDone::Complete(Published::Created)));
    assert_eq!(fs.target, Some(upload()));
    assert_eq!((fs.data, fs.meta, broker.partial), (None, None, None));
}

/// What a whole first chunk into an empty place meets at each step when all goes well
/// (the reservation is grant 1, the target lease 2, the partial 3); `None` for an action
/// nothing answers.
fn success(a: &ChunkAction) -> Option<ChunkEvent> {
    Some(match a {
        ChunkAction::Reserve { .. } => ChunkEvent::Granted(LeaseId(1)),
        ChunkAction::Lease | ChunkAction::ConfirmLease => ChunkEvent::Granted(LeaseId(2)),
        ChunkAction::TakePartial { .. } => ChunkEvent::Granted(LeaseId(3)),
        ChunkAction::InspectTarget => ChunkEvent::Target(Existing::Nothing),
        ChunkAction::InspectPartial => ChunkEvent::Held(Held::default()),
        ChunkAction::Record(_) => ChunkEvent::Recorded,
        ChunkAction::OpenAt { .. } => ChunkEvent::Opened,
        ChunkAction::Copy { .. } => ChunkEvent::Copied {
            written: TOTAL,
            file: true,
            result: Ok(()),
        },
        ChunkAction::Sync | ChunkAction::SyncDirectory => ChunkEvent::Synced,
        ChunkAction::Publish { .. } => ChunkEvent::Published { replaced: false },
        ChunkAction::RemovePartial => ChunkEvent::Removed,
        _ => return None,
    })
}

/// Runs one whole first chunk with `fail` failing the first action it names.
fn run_failing(fail: ChunkAction, failure: WriteFailure) -> Vec<ChunkAction> {
    let mut flow = ChunkFlow::new(ChunkOptions {
        start: 0,
        end: TOTAL - 1,
        total: TOTAL,
        overwrite: false,
        create_only: false,
    });
    let mut taken = Vec::new();
    while let Some(a) = flow.next_action() {
        taken.push(a);
        let event = if a == fail {
            ChunkEvent::Failed(failure)
        } else {
            let Some(event) = success(&a) else { continue };
            event
        };
        flow.handle(event);
    }
    taken
}

/// An fsync of the appended bytes that fails leaves nothing to resume from: the partial's
/// files go, and so does its reservation (decision 0131).
#[test]
fn a_failed_fsync_of_a_chunk_discards_what_it_could_not_make_durable() {
    for failure in [WriteFailure::Io, WriteFailure::NoSpace] {
        let taken = run_failing(ChunkAction::Sync, failure);
        assert_eq!(
            &taken[taken.len() - 5..],
            &[
                ChunkAction::RemovePartial,
                ChunkAction::ReleasePartial(LeaseId(3)),
                ChunkAction::ReleaseLease(LeaseId(2)),
                ChunkAction::ReleaseReservation(LeaseId(1)),
                ChunkAction::Finish(Err(ChunkFailure::Write(failure))),
            ],
            "chunk-fsync rule: bytes the disk may not hold are discarded, not resumed"
        );
        assert!(
            !taken
                .iter()
                .any(|a| matches!(a, ChunkAction::Publish { .. }))
        );
    }
}

/// A directory fsync that fails after the publishing rename is not answered as complete.
#[test]
fn a_failed_fsync_of_the_directory_after_the_last_chunk_is_a_failure() {
    let taken = run_failing(ChunkAction::SyncDirectory, WriteFailure::Io);
    assert_eq!(
        &taken[taken.len() - 6..],
        &[
            ChunkAction::SyncDirectory,
            ChunkAction::RemovePartial,
            ChunkAction::ReleasePartial(LeaseId(3)),
            ChunkAction::ReleaseLease(LeaseId(2)),
            ChunkAction::ReleaseReservation(LeaseId(1)),
            ChunkAction::Finish(Err(ChunkFailure::Write(WriteFailure::Io))),
        ],
        "directory-fsync rule: a rename not made durable is answered 500, not complete"
    );
}
