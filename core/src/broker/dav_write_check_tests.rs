//! The broker's one-trip lock check of a write judges as the worker judges the answers
//! of two queries (the resource's, its parent's): the check moved, the rule did not.

use super::*;
use proptest::prelude::*;

const PATHS: [&str; 6] = ["/", "/a", "/a/b", "/a/b/c", "/a/d", "/e"];

fn applies(l: &DavLockInfo, resource: &str) -> bool {
    l.resource == resource || (l.depth == DavDepth::Infinity && covers_path(&l.resource, resource))
}

/// The worker's rule (`io-real`'s `Seen::require`) over query answers.
fn by_queries(
    t: &DavTable,
    now: Instant,
    resource: &str,
    reach: DavReach,
    submitted: &[LeaseId],
) -> bool {
    let mut protecting: Vec<DavLockInfo> = t
        .query(now, resource)
        .into_iter()
        .filter(|l| applies(l, resource) || (reach.tree && covers_path(resource, &l.resource)))
        .collect();
    if reach.membership
        && let Some(parent) = parent_path(resource)
    {
        protecting.extend(
            t.query(now, parent)
                .into_iter()
                .filter(|l| l.resource == parent),
        );
    }
    protecting.iter().all(|lock| {
        protecting
            .iter()
            .any(|l| l.resource == lock.resource && submitted.contains(&l.token))
    })
}

proptest! {
    #[test]
    fn one_trip_judges_as_two_queries(
        locks in proptest::collection::vec((0usize..6, any::<bool>(), 0u64..3), 0..6),
        resource in 0usize..6,
        membership in any::<bool>(),
        tree in any::<bool>(),
        submit in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let t0 = Instant::ZERO;
        let mut t = DavTable::default();
        let mut tokens = Vec::new();
        for (i, (at, infinite, secs)) in locks.into_iter().enumerate() {
            let token = LeaseId(i as u128 + 1);
            let depth = if infinite { DavDepth::Infinity } else { DavDepth::Zero };
            // Shared locks, so every drawn lock is held; some expire before `now`.
            if t
                .lock(t0, token, PATHS[at].to_owned(), depth, String::new(), false,
                      Duration::from_secs(secs * 2 + 1), Generation(1))
                .is_ok()
            {
                tokens.push(token);
            }
        }
        let now = t0 + Duration::from_secs(2);
        let submitted: Vec<LeaseId> = tokens
            .iter()
            .zip(&submit)
            .filter(|(_, s)| **s)
            .map(|(t, _)| *t)
            .collect();
        let reach = DavReach { membership, tree };
        let resource = PATHS[resource];
        prop_assert_eq!(
            t.write_allowed(now, resource, reach, &submitted),
            by_queries(&t, now, resource, reach, &submitted)
        );
    }
}

#[test]
fn a_lock_on_the_parent_needs_its_token_for_a_new_member() {
    let t0 = Instant::ZERO;
    let mut t = DavTable::default();
    t.lock(
        t0,
        LeaseId(9),
        "/a".into(),
        DavDepth::Zero,
        String::new(),
        true,
        Duration::from_secs(60),
        Generation(1),
    )
    .expect("lock");
    let member = DavReach {
        membership: true,
        tree: false,
    };
    let content = DavReach {
        membership: false,
        tree: false,
    };
    assert!(!t.write_allowed(t0, "/a/f", member, &[]));
    assert!(t.write_allowed(t0, "/a/f", member, &[LeaseId(9)]));
    assert!(
        t.write_allowed(t0, "/a/f", content, &[]),
        "depth 0: content only"
    );
    assert!(!t.write_allowed(t0, "/a", content, &[LeaseId(8)]));
}
