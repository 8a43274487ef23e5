//! The lock rules a worker applies, each test named for its rule; the flows are driven
//! the way both drivers drive them.

use super::*;
use crate::Generation;
use crate::proto::{DavDepth, DavLockInfo, Rejection};

fn lock(token: u128, resource: &str, depth: DavDepth) -> DavLockInfo {
    DavLockInfo {
        token: LeaseId(token),
        resource: resource.into(),
        depth,
        owner: String::new(),
        exclusive: true,
        expires_in_ms: 1,
        generation: Generation(1),
    }
}

/// A lock table and a file system: the locks, and the ETag of each existing resource.
struct World {
    locks: Vec<DavLockInfo>,
    etags: Vec<(&'static str, &'static str)>,
}

impl World {
    /// The broker's `DavQuery`: on the key, on an ancestor with depth infinity, or below.
    fn around(&self, key: &str) -> Vec<DavLockInfo> {
        let around = |l: &&DavLockInfo| applies(l, key) || covers(key, &l.resource);
        self.locks.iter().filter(around).cloned().collect()
    }

    /// Drives an `If` check on `path`; the queries it made, in order, and its result.
    fn check_if(&self, path: &str, value: Option<&str>) -> (Vec<String>, IfStep, LockViews) {
        let mut check = IfCheck::new(value);
        let mut queries = Vec::new();
        loop {
            match check.next_step() {
                IfStep::Inspect(Subject::Request) => {
                    check.inspected(Some(path.to_owned()), self.etag(path));
                }
                IfStep::Inspect(Subject::Tag(tag)) => {
                    let key = tag.strip_prefix("http://h").unwrap_or(&tag).to_owned();
                    let etag = self.etag(&key);
                    check.inspected(Some(key), etag);
                }
                IfStep::Query(key) => {
                    queries.push(key.clone());
                    let answer = self.around(&key);
                    check.answered(key, answer);
                }
                done @ IfStep::Done(_) => return (queries, done, check.into_views()),
            }
        }
    }

    fn etag(&self, path: &str) -> Option<String> {
        let found = self.etags.iter().find(|(p, _)| *p == path);
        found.map(|(_, e)| (*e).to_owned())
    }

    fn require(
        &self,
        mut views: LockViews,
        path: &str,
        reach: DavReach,
        submitted: &[LeaseId],
    ) -> Result<(), DavRefusal> {
        loop {
            match views.require(path, reach, submitted) {
                Needs::Query(key) => {
                    let answer = self.around(&key);
                    views.answer(key, answer);
                }
                Needs::Decided(result) => return result,
            }
        }
    }
}

fn uri(token: u128) -> String {
    token_uri(LeaseId(token))
}

#[test]
fn no_if_header_asks_nothing_and_submits_nothing() {
    let world = World {
        locks: vec![lock(1, "/a", DavDepth::Zero)],
        etags: vec![],
    };
    let (queries, done, _) = world.check_if("/a", None);
    assert!(queries.is_empty());
    assert_eq!(done, IfStep::Done(Ok(Vec::new())));
}

#[test]
fn a_malformed_if_header_is_a_400_never_a_panic() {
    let world = World {
        locks: vec![],
        etags: vec![],
    };
    let (_, done, _) = world.check_if("/a", Some("(<urn:a>"));
    assert!(
        matches!(done, IfStep::Done(Err(DavRefusal::BadIf(_)))),
        "rule: a malformed If header is refused with 400, got {done:?}"
    );
}

#[test]
fn a_token_of_a_lock_on_the_resource_holds_and_is_submitted() {
    let world = World {
        locks: vec![lock(7, "/a", DavDepth::Zero)],
        etags: vec![],
    };
    let (_, done, _) = world.check_if("/a", Some(&format!("(<{}>)", uri(7))));
    assert_eq!(
        done,
        IfStep::Done(Ok(vec![LeaseId(7)])),
        "rule: the If header holds when the resource is locked with the token submitted"
    );
}

#[test]
fn a_depth_infinity_lock_above_applies_and_a_depth_zero_one_does_not() {
    let deep = World {
        locks: vec![lock(7, "/d", DavDepth::Infinity)],
        etags: vec![],
    };
    let value = format!("(<{}>)", uri(7));
    let (_, done, _) = deep.check_if("/d/a", Some(&value));
    assert_eq!(
        done,
        IfStep::Done(Ok(vec![LeaseId(7)])),
        "rule: a depth-infinity lock on an ancestor applies to the resource"
    );
    let shallow = World {
        locks: vec![lock(7, "/d", DavDepth::Zero)],
        etags: vec![],
    };
    let (_, done, _) = shallow.check_if("/d/a", Some(&value));
    assert_eq!(
        done,
        IfStep::Done(Err(DavRefusal::IfFailed)),
        "rule: a depth-0 lock on the parent does not apply to a member"
    );
}

#[test]
fn a_lock_below_the_resource_is_not_its_lock() {
    // The broker's query answers the locks below a resource too (a tree write needs
    // them); the `If` header's state tokens are only those that apply to it.
    let world = World {
        locks: vec![lock(7, "/d/a/b", DavDepth::Infinity)],
        etags: vec![],
    };
    let (_, done, _) = world.check_if("/d/a", Some(&format!("(<{}>)", uri(7))));
    assert_eq!(
        done,
        IfStep::Done(Err(DavRefusal::IfFailed)),
        "rule: a lock below the resource does not make the If header's token hold (412)"
    );
}

#[test]
fn a_stale_token_fails_the_if_header_with_412() {
    let world = World {
        locks: vec![lock(7, "/a", DavDepth::Zero)],
        etags: vec![],
    };
    let (_, done, _) = world.check_if("/a", Some(&format!("(<{}>)", uri(8))));
    assert_eq!(
        done,
        IfStep::Done(Err(DavRefusal::IfFailed)),
        "rule: an If header naming a token that is no lock on its resource fails with 412"
    );
}

#[test]
fn tagged_lists_are_judged_on_their_resource_each_asked_once() {
    let world = World {
        locks: vec![lock(7, "/d", DavDepth::Zero)],
        etags: vec![("/d/a", "\"x\""), ("/d", "\"y\"")],
    };
    let value = format!("</d> (<{}>) <http://h/d> ([\"y\"])", uri(7));
    let (queries, done, views) = world.check_if("/d/a", Some(&value));
    assert_eq!(done, IfStep::Done(Ok(vec![LeaseId(7)])));
    assert_eq!(
        queries,
        vec!["/d/a", "/d"],
        "the request's resource, then each tag once"
    );
    assert!(views.around("/d").is_some());
    // An ETag condition on the request's own resource.
    let (_, done, _) = world.check_if("/d/a", Some("([\"x\"])"));
    assert_eq!(done, IfStep::Done(Ok(Vec::new())));
    let (_, done, _) = world.check_if("/d/a", Some("([\"y\"])"));
    assert_eq!(done, IfStep::Done(Err(DavRefusal::IfFailed)));
}

#[test]
fn the_lock_check_reuses_the_if_headers_answers() {
    let world = World {
        locks: vec![lock(7, "/d", DavDepth::Zero)],
        etags: vec![],
    };
    let (_, _, views) = world.check_if("/d/a", Some(&format!("</d> (<{}>)", uri(7))));
    assert_eq!(
        views.require("/d/a", reach::MEMBER, &[LeaseId(7)]),
        Needs::Decided(Ok(()))
    );
}

#[test]
fn a_lock_on_the_resource_blocks_a_write_without_its_token() {
    let world = World {
        locks: vec![lock(7, "/a", DavDepth::Zero)],
        etags: vec![],
    };
    let refused = world.require(LockViews::default(), "/a", reach::CONTENT, &[]);
    assert_eq!(
        refused,
        Err(DavRefusal::Locked(vec!["/a".into()])),
        "rule: a lock on the resource blocks a write that does not submit its token (423)"
    );
    let allowed = world.require(LockViews::default(), "/a", reach::CONTENT, &[LeaseId(7)]);
    assert_eq!(
        allowed,
        Ok(()),
        "rule: submitting the token lifts the lock's protection"
    );
}

#[test]
fn a_depth_infinity_lock_on_an_ancestor_blocks_a_write() {
    let world = World {
        locks: vec![lock(7, "/d", DavDepth::Infinity)],
        etags: vec![],
    };
    let refused = world.require(LockViews::default(), "/d/e/f", reach::CONTENT, &[]);
    assert_eq!(
        refused,
        Err(DavRefusal::Locked(vec!["/d".into()])),
        "rule: a depth-infinity lock on an ancestor blocks a write below it"
    );
}

#[test]
fn a_lock_on_the_parent_blocks_adding_or_removing_a_member_only() {
    let world = World {
        locks: vec![lock(7, "/d", DavDepth::Zero)],
        etags: vec![],
    };
    let refused = world.require(LockViews::default(), "/d/a", reach::MEMBER, &[]);
    assert_eq!(
        refused,
        Err(DavRefusal::Locked(vec!["/d".into()])),
        "rule: a lock on the parent collection blocks a write that changes its membership"
    );
    let content = world.require(LockViews::default(), "/d/a", reach::CONTENT, &[]);
    assert_eq!(
        content,
        Ok(()),
        "rule: a depth-0 parent lock leaves a member's content alone"
    );
}

#[test]
fn a_tree_write_is_blocked_by_any_lock_below() {
    let world = World {
        locks: vec![lock(7, "/d/e/f", DavDepth::Zero)],
        etags: vec![],
    };
    let refused = world.require(LockViews::default(), "/d", reach::TREE, &[]);
    assert_eq!(
        refused,
        Err(DavRefusal::Locked(vec!["/d/e/f".into()])),
        "rule: deleting or moving a collection is blocked by a lock anywhere below it"
    );
    let member = world.require(LockViews::default(), "/d", reach::MEMBER, &[]);
    assert_eq!(member, Ok(()));
}

#[test]
fn one_token_per_lock_root_satisfies_shared_locks() {
    let mut shared = lock(8, "/a", DavDepth::Zero);
    shared.exclusive = false;
    let mut first = lock(7, "/a", DavDepth::Zero);
    first.exclusive = false;
    let world = World {
        locks: vec![first, shared],
        etags: vec![],
    };
    let allowed = world.require(LockViews::default(), "/a", reach::CONTENT, &[LeaseId(8)]);
    assert_eq!(
        allowed,
        Ok(()),
        "rule: one holder of a shared lock may write"
    );
}

#[test]
fn refresh_extends_only_a_submitted_lock_that_applies() {
    let locks = vec![
        lock(7, "/d", DavDepth::Infinity),
        lock(9, "/x", DavDepth::Zero),
    ];
    let found = refresh_target("/d/a", &locks, &[LeaseId(7)]).map(|l| l.token);
    assert_eq!(found, Ok(LeaseId(7)));
    assert_eq!(
        refresh_target("/d/a", &locks, &[LeaseId(9)]).map(|l| l.token),
        Err(DavRefusal::IfFailed),
        "rule: a refresh names a lock that applies to the resource, else 412"
    );
}

#[test]
fn unlock_removes_only_a_lock_that_applies_here() {
    let locks = vec![lock(7, "/d", DavDepth::Zero)];
    assert_eq!(unlock_target("/d", &uri(7), &locks), Ok(LeaseId(7)));
    assert_eq!(
        unlock_target("/d/a", &uri(7), &locks),
        Err(DavRefusal::NoSuchLock),
        "rule: UNLOCK of a lock that does not apply to the resource is a 409"
    );
    assert_eq!(
        unlock_target("/d", "urn:x", &locks),
        Err(DavRefusal::NoSuchLock)
    );
    assert_eq!(
        unlock_token(Some(&format!("<{}>", uri(7)))),
        Ok(uri(7).as_str())
    );
    assert_eq!(unlock_token(None), Err(DavRefusal::NoLockToken));
    assert_eq!(unlock_token(Some("urn:x")), Err(DavRefusal::NoLockToken));
}

#[test]
fn lock_requests() {
    assert_eq!(lock_depth(None), Ok(DavDepth::Infinity));
    assert_eq!(lock_depth(Some("Infinity")), Ok(DavDepth::Infinity));
    assert_eq!(lock_depth(Some("0")), Ok(DavDepth::Zero));
    assert_eq!(lock_depth(Some("1")), Err(DavRefusal::Depth));
    assert_eq!(new_resource_lock(true), Ok(reach::MEMBER));
    assert_eq!(
        new_resource_lock(false),
        Err(DavRefusal::ReadOnly),
        "rule: a LOCK of an unmapped URL on a read-only share is refused (it would create)"
    );
}

#[test]
fn broker_refusals() {
    let busy = refusal_of(BrokerCall::Lock("/a"), Rejection::Busy);
    assert_eq!(
        busy,
        DavRefusal::ConflictingLock(vec!["/a".into()]),
        "rule: a LOCK the broker finds in conflict is a 423 no-conflicting-lock naming it"
    );
    assert_eq!(
        refusal_of(BrokerCall::Lock("/a"), Rejection::TooLarge),
        DavRefusal::OwnerTooLarge
    );
    assert_eq!(
        refusal_of(BrokerCall::Query, Rejection::TooLarge),
        DavRefusal::TooLarge
    );
    assert_eq!(
        refusal_of(BrokerCall::Refresh, Rejection::NotFound),
        DavRefusal::NoSuchLock
    );
    assert_eq!(
        refusal_of(BrokerCall::Unlock, Rejection::Revoked),
        DavRefusal::NoSuchLock
    );
    assert_eq!(
        refusal_of(BrokerCall::Lock("/a"), Rejection::Saturated),
        DavRefusal::Saturated
    );
}

#[test]
fn tokens_round_trip_and_foreign_ones_are_refused() {
    for id in [0, 1, u128::MAX, 0x0123_4567_89ab_cdef_0011_2233_4455_6677] {
        let uri = token_uri(LeaseId(id));
        assert_eq!(uri.len(), TOKEN_SCHEME.len() + 36);
        assert_eq!(parse_token(&uri), Some(LeaseId(id)), "{uri}");
    }
    assert_eq!(parse_token("opaquelocktoken:not-a-uuid"), None);
    assert_eq!(
        parse_token("urn:uuid:00000000-0000-0000-0000-000000000000"),
        None
    );
    assert_eq!(
        parse_token("opaquelocktoken:0000000000000000000000000000000000-0"),
        None
    );
}

#[test]
fn timeouts() {
    assert_eq!(timeout_ms(None), 0);
    assert_eq!(timeout_ms(Some("Infinite")), 0);
    assert_eq!(timeout_ms(Some("Second-3600")), 3_600_000);
    assert_eq!(timeout_ms(Some("second-0")), 1000, "at least a second");
    assert_eq!(timeout_ms(Some("Extended, Second-5")), 5000);
    assert_eq!(timeout_ms(Some("Second-x")), 0);
    assert_eq!(timeout_ms(Some("Second-99999999999999999999")), 0);
    assert_eq!(timeout_ms(Some("Second-é")), 0);
}

#[test]
fn which_locks_apply_and_paths() {
    assert!(applies(&lock(1, "/a", DavDepth::Zero), "/a"));
    assert!(!applies(&lock(1, "/a", DavDepth::Zero), "/a/b"));
    assert!(applies(&lock(1, "/a", DavDepth::Infinity), "/a/b"));
    assert!(applies(&lock(1, "/", DavDepth::Infinity), "/x"));
    assert!(!applies(&lock(1, "/a/b", DavDepth::Infinity), "/a"));
    assert!(!applies(&lock(1, "/a", DavDepth::Infinity), "/ab"));
    assert_eq!(parent_of("/d/a"), Some("/d"));
    assert_eq!(parent_of("/e"), Some("/"));
    assert_eq!(parent_of("/"), None);
}

#[test]
fn each_write_checks_what_it_changes_in_the_workers_order() {
    let checks = |w| lock_checks(w).expect("writable");
    assert_eq!(
        checks(Write::Move {
            from: "/a",
            to: "/b"
        }),
        vec![("/a", reach::TREE), ("/b", reach::TREE)],
        "rule: a MOVE checks its source's tree, then its destination's"
    );
    assert_eq!(
        checks(Write::Copy {
            from: "/a",
            to: "/b"
        }),
        vec![("/b", reach::TREE)],
        "rule: a COPY leaves its source alone and checks its destination's tree"
    );
    assert_eq!(
        checks(Write::Delete("/a")),
        vec![("/a", reach::TREE)],
        "rule: a DELETE checks its tree"
    );
    assert_eq!(checks(Write::Put("/a")), vec![("/a", reach::MEMBER)]);
    assert_eq!(checks(Write::Mkcol("/a")), vec![("/a", reach::MEMBER)]);
    assert_eq!(checks(Write::Post("/d")), vec![("/d", reach::INSIDE)]);
    assert_eq!(
        checks(Write::Proppatch("/a")),
        vec![("/a", reach::CONTENT)],
        "rule: a PROPPATCH changes only the resource's own properties"
    );
    let creating = |writable| {
        lock_checks(Write::CreatingLock {
            resource: "/n",
            writable,
        })
    };
    assert_eq!(creating(true), Ok(vec![("/n", reach::MEMBER)]));
    assert_eq!(
        creating(false),
        Err(DavRefusal::ReadOnly),
        "rule: a LOCK that would create a resource on a read-only share is a 403"
    );
}
