//! The oracle's lock rules reject the decisions they exist to catch, each with a message
//! naming its rule, and accept the right ones.

use super::oracle::{CONTENT, MEMBER, TREE, collection_of, guards, lock_rule_breaches, under};
use crate::outcome::{DavAnswer, DavEnd, DavIf, DavLockRecord, DavOp, DavOutcome, DavRecord};

const MS: u64 = 1_000_000;

/// A lock granted at 100 ms until 10 s, seen in the table until then.
fn lock(token: u128, resource: &str, depth_infinity: bool) -> DavLockRecord {
    DavLockRecord {
        token,
        resource: resource.to_owned(),
        depth_infinity,
        exclusive: true,
        granted_to: 1,
        granted_ns: 100 * MS,
        promised_end_ns: 10_000 * MS,
        refreshes: 0,
        unlocked_ns: None,
        last_seen_ns: 10_000 * MS,
        gone_ns: Some(10_001 * MS),
    }
}

/// A request asked at 1 s and answered at 1.01 s, ended so.
fn request(op: DavOp, resource: &str, end: DavEnd) -> DavRecord {
    DavRecord {
        client: None,
        op,
        resource: resource.to_owned(),
        token: None,
        lock_root: None,
        if_header: DavIf::None,
        worker: Some(2),
        generation: 1,
        arrived_ns: 1_000 * MS,
        asked_ns: 1_000 * MS,
        answered_ns: 1_010 * MS,
        allowed: None,
        lock_answer: None,
        acted_on: None,
        discovered: Vec::new(),
        ended_ns: 1_011 * MS,
        end: Some(end),
    }
}

fn with_token(mut r: DavRecord, token: u128, root: &'static str, if_header: DavIf) -> DavRecord {
    r.token = Some(token);
    r.lock_root = Some(root);
    r.if_header = if_header;
    r
}

fn allowed(mut r: DavRecord, allowed: bool) -> DavRecord {
    r.allowed = Some(allowed);
    r
}

fn breaches(locks: Vec<DavLockRecord>, log: Vec<DavRecord>) -> Vec<String> {
    let dav = DavOutcome {
        log,
        locks,
        ..DavOutcome::default()
    };
    lock_rule_breaches(&dav)
}

fn one_breach(locks: Vec<DavLockRecord>, r: DavRecord, rule: &str) {
    let found = breaches(locks, vec![r]);
    assert!(
        found.len() == 1 && found[0].starts_with(rule),
        "expected one breach of `{rule}`, got {found:?}"
    );
}

#[test]
fn the_reference_of_what_a_lock_protects() {
    assert!(under("/", "/d/a") && under("/d", "/d/a") && under("/d", "/d"));
    assert!(!under("/d", "/dd") && !under("/d/a", "/d"));
    assert_eq!(collection_of("/d/a"), Some("/d"));
    assert_eq!(collection_of("/e"), Some("/"));
    assert_eq!(collection_of("/"), None);
    // A depth-0 lock on /d: /d's content, and /d's members by membership only.
    assert!(guards("/d", false, "/d", CONTENT));
    assert!(!guards("/d", false, "/d/a", CONTENT));
    assert!(guards("/d", false, "/d/a", MEMBER));
    // A lock below: only writes to the whole tree.
    assert!(guards("/d/a", false, "/d", TREE) && !guards("/d/a", false, "/d", MEMBER));
}

#[test]
fn a_tree_write_through_a_live_lock_below_without_its_token_breaks_the_lock_rule() {
    let locks = || vec![lock(7, "/d/a", false)];
    let let_through = allowed(request(DavOp::Delete, "/d", DavEnd::Passed), true);
    one_breach(locks(), let_through, "lock rule (RFC 4918 §7.4)");
    let refused = allowed(request(DavOp::Delete, "/d", DavEnd::Locked), false);
    assert_eq!(breaches(locks(), vec![refused]), Vec::<String>::new());
    // MOVE's destination is its tree too; COPY's source is not.
    let onto = allowed(
        request(DavOp::Move { to: "/d" }, "/e", DavEnd::Passed),
        true,
    );
    one_breach(locks(), onto, "lock rule (RFC 4918 §7.4)");
    let from = allowed(
        request(DavOp::Copy { to: "/g" }, "/d", DavEnd::Passed),
        true,
    );
    assert_eq!(breaches(locks(), vec![from]), Vec::<String>::new());
}

#[test]
fn a_membership_change_under_a_depth_0_collection_lock_needs_its_token() {
    let locks = || vec![lock(7, "/d", false)];
    let mkcol = allowed(request(DavOp::Mkcol, "/d/n", DavEnd::Passed), true);
    one_breach(locks(), mkcol, "lock rule (RFC 4918 §7.4)");
    // Its content is the member's own: a PROPPATCH of the member passes.
    let patch = allowed(request(DavOp::Proppatch, "/d/a", DavEnd::Passed), true);
    assert_eq!(breaches(locks(), vec![patch]), Vec::<String>::new());
    let refused = allowed(request(DavOp::Proppatch, "/d/a", DavEnd::Locked), false);
    one_breach(locks(), refused, "lock rule (RFC 4918 §7.4)");
}

#[test]
fn a_write_with_the_token_that_is_refused_breaks_the_lock_rule() {
    let locks = || vec![lock(7, "/d", true)];
    let r = request(DavOp::Delete, "/d/a", DavEnd::Locked);
    let refused = allowed(with_token(r, 7, "/d", DavIf::Tagged), false);
    one_breach(locks(), refused, "lock rule (RFC 4918 §7.4)");
    let r = request(DavOp::Delete, "/d/a", DavEnd::Passed);
    let passed = allowed(with_token(r, 7, "/d", DavIf::Tagged), true);
    assert_eq!(breaches(locks(), vec![passed]), Vec::<String>::new());
}

#[test]
fn an_if_naming_a_lock_below_its_resource_is_false() {
    let locks = || vec![lock(7, "/d/a", false)];
    let r = request(DavOp::Proppatch, "/d", DavEnd::Passed);
    let let_through = allowed(with_token(r, 7, "/d/a", DavIf::Untagged), true);
    one_breach(locks(), let_through, "If rule (RFC 4918 §10.4)");
    let r = request(DavOp::Proppatch, "/d", DavEnd::PreconditionFailed);
    let refused = allowed(with_token(r, 7, "/d/a", DavIf::Untagged), false);
    assert_eq!(breaches(locks(), vec![refused]), Vec::<String>::new());
}

#[test]
fn an_unlock_where_its_lock_does_not_apply_breaks_the_unlock_rule() {
    let mut r = with_token(
        request(DavOp::Unlock, "/d", DavEnd::Unlocked),
        7,
        "/d/a",
        DavIf::None,
    );
    r.acted_on = Some(7);
    one_breach(
        vec![lock(7, "/d/a", false)],
        r,
        "UNLOCK rule (RFC 4918 §9.11)",
    );
}

#[test]
fn a_refresh_that_extends_another_lock_breaks_the_refresh_rule() {
    let op = DavOp::Refresh { timeout_ms: 1_000 };
    let mut r = with_token(request(op, "/f", DavEnd::Refreshed), 7, "/f", DavIf::Tagged);
    r.acted_on = Some(8);
    let locks = vec![lock(7, "/f", false), lock(8, "/f", false)];
    one_breach(locks, r, "refresh rule (RFC 4918 §9.10.2)");
}

#[test]
fn a_conflict_answered_as_locked_breaks_the_conflict_rule() {
    let op = DavOp::Lock {
        depth_infinity: false,
        exclusive: true,
        timeout_ms: 1_000,
    };
    let mut r = request(op, "/f", DavEnd::Locked);
    r.lock_answer = Some(DavAnswer::Busy);
    one_breach(Vec::new(), r, "LOCK conflict rule");
}

#[test]
fn a_lock_that_creates_on_a_read_only_share_breaks_the_read_only_rule() {
    let op = DavOp::Lock {
        depth_infinity: false,
        exclusive: true,
        timeout_ms: 1_000,
    };
    let dav = DavOutcome {
        log: vec![request(op, "/g", DavEnd::Granted)],
        read_only: true,
        ..DavOutcome::default()
    };
    let found = lock_rule_breaches(&dav);
    assert!(
        found.len() == 1 && found[0].starts_with("read-only rule"),
        "{found:?}"
    );
    // A LOCK of what exists is no write.
    let dav = DavOutcome {
        log: vec![request(op, "/f", DavEnd::Granted)],
        read_only: true,
        ..DavOutcome::default()
    };
    assert_eq!(lock_rule_breaches(&dav), Vec::<String>::new());
}

#[test]
fn a_malformed_if_that_is_not_a_400_breaks_the_syntax_rule() {
    let mut r = request(DavOp::Put, "/e", DavEnd::Written);
    r.if_header = DavIf::Malformed;
    one_breach(Vec::new(), r, "If syntax rule");
}

#[test]
fn lockdiscovery_shows_exactly_the_locks_that_apply() {
    let locks = || vec![lock(7, "/d", false)];
    let mut r = request(DavOp::Propfind, "/d", DavEnd::Passed);
    r.discovered = vec![("/d".into(), vec![7]), ("/d/a".into(), vec![7])];
    one_breach(locks(), r, "lockdiscovery rule (RFC 4918 §15.8)");
    let mut r = request(DavOp::Propfind, "/d", DavEnd::Passed);
    r.discovered = vec![("/d".into(), vec![]), ("/d/a".into(), vec![])];
    one_breach(locks(), r, "lockdiscovery rule (RFC 4918 §15.8)");
    let mut r = request(DavOp::Propfind, "/d", DavEnd::Passed);
    r.discovered = vec![("/d".into(), vec![7]), ("/d/a".into(), vec![])];
    assert_eq!(breaches(locks(), vec![r]), Vec::<String>::new());
}

#[test]
fn a_lock_that_began_or_ended_while_asked_is_judged_neither_way() {
    // Granted between the request's question and its answer: the broker may have seen it.
    let mut l = lock(7, "/d/a", false);
    l.granted_ns = 1_005 * MS;
    let let_through = allowed(request(DavOp::Delete, "/d", DavEnd::Passed), true);
    assert_eq!(
        breaches(vec![l.clone()], vec![let_through]),
        Vec::<String>::new()
    );
    let refused = allowed(request(DavOp::Delete, "/d", DavEnd::Locked), false);
    assert_eq!(breaches(vec![l], vec![refused]), Vec::<String>::new());
}
