//! The WebDAV lock table against a small reference model of RFC 4918's lock conflicts
//! (§6.1, §7), driven by proptest-generated operation sequences (which shrink to a
//! minimal failing sequence).
//!
//! The model is written from the RFC, not from the table: paths are compared segment by
//! segment, time is kept in whole seconds, and every answer is a linear scan.

use super::*;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{TestError, TestRunner};

/// Paths locks are taken on: nested collections and siblings that share a prefix
/// without being related (`/ab` is not under `/a`, `/a/bc` is not under `/a/b`).
const LOCK_PATHS: [&str; 8] = ["/", "/a", "/a/b", "/a/b/c", "/a/bc", "/ab", "/ab/c", "/c"];

/// Paths queried: the above and some no lock is ever taken on.
const QUERY_PATHS: [&str; 12] = [
    "/", "/a", "/a/b", "/a/b/c", "/a/bc", "/ab", "/ab/c", "/c", "/a/b/c/d", "/abc", "/b", "/c/a",
];

#[derive(Debug, Clone)]
enum Op {
    Lock {
        resource: &'static str,
        depth: DavDepth,
        exclusive: bool,
        timeout_s: u64,
    },
    Advance {
        secs: u64,
    },
    Refresh {
        pick: Option<Index>,
        timeout_s: u64,
    },
    Unlock {
        pick: Option<Index>,
    },
    Query {
        resource: &'static str,
    },
}

/// A token issued earlier, or (`None`) one never issued.
fn pick() -> impl Strategy<Value = Option<Index>> {
    prop_oneof![4 => any::<Index>().prop_map(Some), 1 => Just(None)]
}

fn op() -> impl Strategy<Value = Op> {
    let depth = prop_oneof![Just(DavDepth::Zero), Just(DavDepth::Infinity)];
    prop_oneof![
        5 => (select(&LOCK_PATHS[..]), depth, any::<bool>(), 1..=10u64).prop_map(
            |(resource, depth, exclusive, timeout_s)| Op::Lock {
                resource,
                depth,
                exclusive,
                timeout_s,
            }
        ),
        2 => (0..=5u64).prop_map(|secs| Op::Advance { secs }),
        2 => (pick(), 1..=10u64).prop_map(|(pick, timeout_s)| Op::Refresh { pick, timeout_s }),
        2 => pick().prop_map(|pick| Op::Unlock { pick }),
        2 => select(&QUERY_PATHS[..]).prop_map(|resource| Op::Query { resource }),
    ]
}

/// A path's segments: `/` has none, `/a/b` has `a` and `b`.
fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// Whether `a` is `b` or an ancestor of it, segment by segment.
fn is_self_or_ancestor(a: &str, b: &str) -> bool {
    segments(b).starts_with(&segments(a))
}

#[derive(Debug, Clone)]
struct ModelLock {
    token: LeaseId,
    resource: &'static str,
    depth: DavDepth,
    exclusive: bool,
    /// Whole seconds since the epoch.
    expires_s: u64,
    owner: String,
    generation: Generation,
}

impl ModelLock {
    fn live(&self, now_s: u64) -> bool {
        self.expires_s > now_s
    }

    /// Whether this lock's scope reaches `resource`: the resource itself, or, at depth
    /// infinity, every member below it.
    fn scope_reaches(&self, resource: &str) -> bool {
        self.resource == resource
            || (self.depth == DavDepth::Infinity && is_self_or_ancestor(self.resource, resource))
    }

    /// RFC 4918 §6.1: two locks overlap when either one's scope reaches the other's root.
    fn overlaps(&self, resource: &str, depth: DavDepth) -> bool {
        self.scope_reaches(resource)
            || (depth == DavDepth::Infinity && is_self_or_ancestor(resource, self.resource))
    }
}

/// The reference: every lock taken and not yet unlocked, expired or not. The table keeps
/// expired locks until they are unlocked (the broker's reaper unlocks them at expiry), so
/// they count, can be read back and unlocked, but never conflict, show in a query or
/// refresh.
#[derive(Default)]
struct Model {
    held: Vec<ModelLock>,
}

impl Model {
    fn find(&self, token: LeaseId) -> Option<&ModelLock> {
        self.held.iter().find(|l| l.token == token)
    }

    /// Live locks on `resource`, on an ancestor of it at depth infinity, or on a
    /// descendant of it.
    fn query(&self, now_s: u64, resource: &str) -> Vec<&ModelLock> {
        self.held
            .iter()
            .filter(|l| l.live(now_s))
            .filter(|l| l.scope_reaches(resource) || is_self_or_ancestor(resource, l.resource))
            .collect()
    }
}

fn at(secs: u64) -> Instant {
    Instant::from_nanos(secs * 1_000_000_000)
}

fn unknown_token() -> LeaseId {
    LeaseId(u128::MAX)
}

fn chosen(issued: &[LeaseId], pick: &Option<Index>) -> LeaseId {
    match pick {
        Some(i) if !issued.is_empty() => issued[i.index(issued.len())],
        _ => unknown_token(),
    }
}

/// `d`'s answer to a query on `resource` equals the model's, as a set of tokens and lock
/// by lock.
fn check_query(d: &DavTable, m: &Model, now_s: u64, resource: &str) -> Result<(), TestCaseError> {
    let got = d.query(at(now_s), resource);
    let want = m.query(now_s, resource);
    let got_tokens: BTreeSet<LeaseId> = got.iter().map(|l| l.token).collect();
    let want_tokens: BTreeSet<LeaseId> = want.iter().map(|l| l.token).collect();
    prop_assert_eq!(got_tokens.len(), got.len(), "a token reported twice");
    prop_assert_eq!(
        &got_tokens,
        &want_tokens,
        "locks applying to {} at {}s",
        resource,
        now_s
    );
    for info in &got {
        let l = m.find(info.token).expect("a reported token is held");
        let expected = DavLockInfo {
            token: l.token,
            resource: l.resource.to_owned(),
            depth: l.depth,
            owner: l.owner.clone(),
            exclusive: l.exclusive,
            expires_in_ms: (l.expires_s - now_s) * 1000,
            generation: l.generation,
        };
        prop_assert_eq!(info, &expected, "query of {} at {}s", resource, now_s);
    }
    Ok(())
}

/// Everything the table answers without an operation: counts, lookups, its index, and a
/// query on every lockable path.
fn check_state(
    d: &DavTable,
    m: &Model,
    now_s: u64,
    issued: &[LeaseId],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(d.len(), m.held.len());
    prop_assert_eq!(d.is_empty(), m.held.is_empty());
    for &token in issued.iter().chain([&unknown_token()]) {
        let want = m.find(token).map(|l| DavLock {
            resource: l.resource.to_owned(),
            depth: l.depth,
            owner: l.owner.clone(),
            exclusive: l.exclusive,
            expires_at: at(l.expires_s),
            generation: l.generation,
        });
        prop_assert_eq!(d.get(token), want.as_ref(), "get({:?})", token);
        prop_assert_eq!(d.contains(token), want.is_some());
    }
    let index: BTreeSet<(String, LeaseId)> = m
        .held
        .iter()
        .map(|l| (l.resource.to_owned(), l.token))
        .collect();
    prop_assert_eq!(
        &d.by_resource,
        &index,
        "the resource index mirrors the locks"
    );
    for path in LOCK_PATHS {
        check_query(d, m, now_s, path)?;
    }
    Ok(())
}

/// The table and the model side by side, with the clock and every token issued so far.
#[derive(Default)]
struct Run {
    d: DavTable,
    m: Model,
    now_s: u64,
    issued: Vec<LeaseId>,
}

impl Run {
    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now_s = self.now_s;
        let Run { d, m, issued, .. } = self;
        let now = at(now_s);
        match *op {
            Op::Lock {
                resource,
                depth,
                exclusive,
                timeout_s,
            } => {
                let n = issued.len() as u64 + 1;
                // Distinct in the top 32 bits, the part `LeaseId`'s `Debug` shows.
                let token = LeaseId(u128::from(n) << 96);
                let owner = format!("owner-{n}");
                let generation = Generation(n % 3);
                let got = d.lock(
                    now,
                    token,
                    resource.to_owned(),
                    depth,
                    owner.clone(),
                    exclusive,
                    Duration::from_secs(timeout_s),
                    generation,
                );
                let scope = if exclusive { "exclusive" } else { "shared" };
                let blocker = m.held.iter().find(|l| {
                    l.live(now_s) && l.overlaps(resource, depth) && (l.exclusive || exclusive)
                });
                if let Some(b) = blocker {
                    prop_assert_eq!(
                        got,
                        Err(Rejection::Busy),
                        "a {:?} {} lock on {} at {}s must meet {:?}",
                        depth,
                        scope,
                        resource,
                        now_s,
                        b
                    );
                } else {
                    prop_assert_eq!(
                        got,
                        Ok(at(now_s + timeout_s)),
                        "a {:?} {} lock on {} at {}s is free; held: {:?}",
                        depth,
                        scope,
                        resource,
                        now_s,
                        m.held
                    );
                    m.held.push(ModelLock {
                        token,
                        resource,
                        depth,
                        exclusive,
                        expires_s: now_s + timeout_s,
                        owner,
                        generation,
                    });
                    issued.push(token);
                }
            }
            Op::Advance { secs } => self.now_s += secs,
            Op::Refresh { pick, timeout_s } => {
                let token = chosen(issued, &pick);
                let got = d.refresh(now, token, Duration::from_secs(timeout_s));
                match m
                    .held
                    .iter_mut()
                    .find(|l| l.token == token && l.live(now_s))
                {
                    Some(l) => {
                        let old = l.expires_s;
                        l.expires_s = now_s + timeout_s;
                        prop_assert_eq!(
                            got,
                            Some((at(old), at(l.expires_s))),
                            "refresh of live {:?} at {}s",
                            token,
                            now_s
                        );
                    }
                    None => prop_assert_eq!(
                        got,
                        None,
                        "refresh of unknown or expired {:?} at {}s",
                        token,
                        now_s
                    ),
                }
            }
            Op::Unlock { pick } => {
                let token = chosen(issued, &pick);
                let got = d.unlock(token);
                match m.held.iter().position(|l| l.token == token) {
                    Some(i) => {
                        let l = m.held.remove(i);
                        prop_assert_eq!(got, Some(at(l.expires_s)), "unlock of held {:?}", token);
                    }
                    None => prop_assert_eq!(got, None, "unlock of unknown {:?}", token),
                }
            }
            Op::Query { resource } => check_query(d, m, now_s, resource)?,
        }
        check_state(&self.d, &self.m, self.now_s, &self.issued)
    }
}

/// Runs `ops` on a fresh table and model: the index of the first operation after which
/// they disagree, and how.
fn first_failure(ops: &[Op]) -> Option<(usize, String)> {
    let mut run = Run::default();
    for (i, op) in ops.iter().enumerate() {
        if let Err(TestCaseError::Fail(why) | TestCaseError::Reject(why)) = run.step(op) {
            return Some((i, why.message().to_owned()));
        }
    }
    None
}

/// Proptest stops leaving out operations once it starts shrinking their fields, so a
/// shrunk sequence may still carry some that do not matter. Leave them out one at a time
/// while the sequence still fails.
fn minimise(mut ops: Vec<Op>) -> (Vec<Op>, String) {
    let (last, mut why) = first_failure(&ops).expect("a failing sequence");
    ops.truncate(last + 1);
    let mut i = 0;
    while i < ops.len() {
        let mut fewer = ops.clone();
        fewer.remove(i);
        match first_failure(&fewer) {
            Some((last, w)) => {
                fewer.truncate(last + 1);
                (ops, why, i) = (fewer, w, 0);
            }
            None => i += 1,
        }
    }
    (ops, why)
}

#[test]
fn dav_table_matches_the_rfc_4918_model() {
    let mut config = ProptestConfig::with_cases(1024);
    config.source_file = Some(file!());
    let mut runner = TestRunner::new(config);
    let result = runner.run(
        &prop::collection::vec(op(), 1..40),
        |ops| match first_failure(&ops) {
            Some((_, why)) => Err(TestCaseError::fail(why)),
            None => Ok(()),
        },
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(_, ops)) => {
            let (ops, why) = minimise(ops);
            panic!("{why}\nafter the operations (none of which can be left out) {ops:#?}");
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_model_reads_paths_segment_by_segment() {
    assert!(is_self_or_ancestor("/", "/"));
    assert!(is_self_or_ancestor("/", "/ab/c"));
    assert!(is_self_or_ancestor("/a", "/a"));
    assert!(is_self_or_ancestor("/a", "/a/b/c"));
    assert!(!is_self_or_ancestor("/a", "/ab"));
    assert!(!is_self_or_ancestor("/a/b", "/a/bc"));
    assert!(!is_self_or_ancestor("/a/b", "/a"));
    assert!(!is_self_or_ancestor("/a", "/"));
}
