//! The WebDAV lock table, keyed by canonical resource path (`/a/b`, root `/`).
//!
//! Locks belong to clients, not workers: they survive worker recycling and crashes and
//! end by UNLOCK or timeout. A restart of the parent loses them unless the driver keeps
//! the journal the parent hands it ([`crate::parent::ParentAction::PersistDavLocks`]) and
//! gives it back at the next start ([`DavTable::restore`]).

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{Generation, LeaseId};
use crate::proto::{DavDepth, DavLockInfo, DavReach, Rejection};
use crate::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DavLock {
    pub resource: String,
    pub depth: DavDepth,
    pub owner: String,
    pub exclusive: bool,
    pub expires_at: Instant,
    pub generation: Generation,
}

#[derive(Debug, Clone, Default)]
pub struct DavTable {
    locks: BTreeMap<LeaseId, DavLock>,
    by_resource: BTreeSet<(String, LeaseId)>,
    /// Something was granted, refreshed or removed since [`DavTable::take_changed`].
    changed: bool,
}

/// Whether `a` is `b` or one of its ancestors.
fn covers_path(a: &str, b: &str) -> bool {
    a == b || a == "/" || (b.starts_with(a) && b.as_bytes().get(a.len()) == Some(&b'/'))
}

/// The collection `path` is a member of; `None` for the root.
fn parent_path(path: &str) -> Option<&str> {
    match path.rfind('/') {
        _ if path == "/" => None,
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

impl DavTable {
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// Locks whose time is not up at `now`.
    pub fn live(&self, now: Instant) -> usize {
        self.locks.values().filter(|l| l.expires_at > now).count()
    }

    pub fn contains(&self, token: LeaseId) -> bool {
        self.locks.contains_key(&token)
    }

    /// When the lock `token` expires, if it is in the table.
    pub fn expiry(&self, token: LeaseId) -> Option<Instant> {
        self.locks.get(&token).map(|l| l.expires_at)
    }

    /// Sets a lock's expiry back to `at` without marking the table changed: a refresh
    /// whose journal could not be written, taken back so the table promises no more than
    /// the journal on disk. Returns the expiry it replaced.
    pub fn set_expiry(&mut self, token: LeaseId, at: Instant) -> Option<Instant> {
        let l = self.locks.get_mut(&token)?;
        Some(std::mem::replace(&mut l.expires_at, at))
    }

    /// Whether a lock whose time is not up is on exactly `resource`.
    pub fn locked_on(&self, now: Instant, resource: &str) -> bool {
        self.tokens_on(resource)
            .iter()
            .any(|t| self.locks.get(t).is_some_and(|l| l.expires_at > now))
    }

    /// Every lock on exactly `resource`, live or not.
    pub fn tokens_on(&self, resource: &str) -> Vec<LeaseId> {
        self.by_resource
            .range((resource.to_owned(), LeaseId(0))..)
            .take_while(|(r, _)| r == resource)
            .map(|(_, t)| *t)
            .collect()
    }

    pub fn get(&self, token: LeaseId) -> Option<&DavLock> {
        self.locks.get(&token)
    }

    /// Live locks that apply to `resource`: on it, on an ancestor with infinite depth,
    /// or on a descendant (which a write to a collection would disturb).
    fn relevant(&self, now: Instant, resource: &str) -> impl Iterator<Item = (LeaseId, &DavLock)> {
        self.locks.iter().filter_map(move |(t, l)| {
            let applies = l.resource == resource
                || (l.depth == DavDepth::Infinity && covers_path(&l.resource, resource))
                || covers_path(resource, &l.resource);
            (applies && l.expires_at > now).then_some((*t, l))
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn lock(
        &mut self,
        now: Instant,
        token: LeaseId,
        resource: String,
        depth: DavDepth,
        owner: String,
        exclusive: bool,
        timeout: Duration,
        generation: Generation,
    ) -> Result<Instant, Rejection> {
        let conflict = self.relevant(now, &resource).any(|(_, l)| {
            let reaches = l.resource == resource
                || (l.depth == DavDepth::Infinity && covers_path(&l.resource, &resource))
                || (depth == DavDepth::Infinity && covers_path(&resource, &l.resource));
            reaches && (l.exclusive || exclusive)
        });
        if conflict {
            return Err(Rejection::Busy);
        }
        let expires_at = now + timeout;
        self.changed = true;
        self.by_resource.insert((resource.clone(), token));
        self.locks.insert(
            token,
            DavLock {
                resource,
                depth,
                owner,
                exclusive,
                expires_at,
                generation,
            },
        );
        Ok(expires_at)
    }

    /// Returns (old expiry, new expiry).
    pub fn refresh(
        &mut self,
        now: Instant,
        token: LeaseId,
        timeout: Duration,
    ) -> Option<(Instant, Instant)> {
        let l = self.locks.get_mut(&token)?;
        if l.expires_at <= now {
            return None;
        }
        let old = l.expires_at;
        l.expires_at = now + timeout;
        self.changed = true;
        Some((old, l.expires_at))
    }

    /// Returns the removed lock's expiry.
    pub fn unlock(&mut self, token: LeaseId) -> Option<Instant> {
        let l = self.locks.remove(&token)?;
        self.changed = true;
        self.by_resource.remove(&(l.resource, token));
        Some(l.expires_at)
    }

    /// Removes a lock without marking the table changed: one whose journal could not be
    /// written, which the table drops to hold no more than the journal on disk (so there
    /// is nothing new to journal). Returns its expiry.
    pub fn forget(&mut self, token: LeaseId) -> Option<Instant> {
        let l = self.locks.remove(&token)?;
        self.by_resource.remove(&(l.resource, token));
        Some(l.expires_at)
    }

    /// Whether the table changed since the last call (and clears the mark).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Every live lock, as a journal entry: what [`DavTable::restore`] takes back.
    pub fn snapshot(&self, now: Instant) -> Vec<DavLockInfo> {
        self.locks
            .iter()
            .filter(|(_, l)| l.expires_at > now)
            .map(|(token, l)| info(now, *token, l))
            .collect()
    }

    /// Puts journalled locks back (a restarted parent): each expires `expires_in_ms` from
    /// `now`. Entries already expired, or whose token is taken, are skipped; returns how
    /// many were restored.
    pub fn restore(&mut self, now: Instant, locks: Vec<DavLockInfo>) -> Vec<(LeaseId, Instant)> {
        let mut restored = Vec::new();
        for l in locks {
            if l.expires_in_ms == 0 || self.locks.contains_key(&l.token) {
                continue;
            }
            let expires_at = now + Duration::from_millis(l.expires_in_ms);
            self.by_resource.insert((l.resource.clone(), l.token));
            self.locks.insert(
                l.token,
                DavLock {
                    resource: l.resource,
                    depth: l.depth,
                    owner: l.owner,
                    exclusive: l.exclusive,
                    expires_at,
                    generation: l.generation,
                },
            );
            restored.push((l.token, expires_at));
        }
        restored
    }

    /// Whether a write that changes `reach` of `resource` breaks no live lock: for every
    /// lock protecting what it changes (one that applies to the resource, one below it
    /// when the whole tree changes, one rooted at its parent collection when its
    /// membership does), a token of a lock with the same root was submitted (RFC 4918
    /// §7.4: one token per lock root is enough). The worker's own check of a query's
    /// answer judges the same way.
    pub fn write_allowed(
        &self,
        now: Instant,
        resource: &str,
        reach: DavReach,
        submitted: &[LeaseId],
    ) -> bool {
        let parent = parent_path(resource);
        let protecting = |l: &DavLock| {
            l.expires_at > now
                && (l.resource == resource
                    || (l.depth == DavDepth::Infinity && covers_path(&l.resource, resource))
                    || (reach.tree && covers_path(resource, &l.resource))
                    || (reach.membership && parent == Some(l.resource.as_str())))
        };
        self.locks.values().filter(|l| protecting(l)).all(|lock| {
            self.locks.iter().any(|(token, l)| {
                l.resource == lock.resource && protecting(l) && submitted.contains(token)
            })
        })
    }

    pub fn query(&self, now: Instant, resource: &str) -> Vec<DavLockInfo> {
        self.relevant(now, resource)
            .map(|(token, l)| info(now, token, l))
            .collect()
    }
}

fn info(now: Instant, token: LeaseId, l: &DavLock) -> DavLockInfo {
    DavLockInfo {
        token,
        resource: l.resource.clone(),
        depth: l.depth,
        owner: l.owner.clone(),
        exclusive: l.exclusive,
        expires_in_ms: l.expires_at.saturating_since(now).as_millis() as u64,
        generation: l.generation,
    }
}

#[cfg(test)]
#[path = "dav_model_tests.rs"]
mod model_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u128) -> LeaseId {
        LeaseId(n)
    }

    #[test]
    fn depth_and_scope_decide_conflicts() {
        let mut d = DavTable::default();
        let now = Instant::ZERO;
        let s = Duration::from_secs(10);
        let g = Generation(1);
        d.lock(
            now,
            t(1),
            "/a".into(),
            DavDepth::Infinity,
            "x".into(),
            true,
            s,
            g,
        )
        .expect("free");
        assert_eq!(
            d.lock(
                now,
                t(2),
                "/a/b".into(),
                DavDepth::Zero,
                "y".into(),
                false,
                s,
                g
            ),
            Err(Rejection::Busy),
            "an infinite exclusive lock covers descendants"
        );
        d.lock(
            now,
            t(3),
            "/ab".into(),
            DavDepth::Zero,
            "y".into(),
            true,
            s,
            g,
        )
        .expect("sibling with a shared prefix is free");
        d.lock(
            now,
            t(4),
            "/c".into(),
            DavDepth::Zero,
            "y".into(),
            false,
            s,
            g,
        )
        .expect("free");
        d.lock(
            now,
            t(5),
            "/c".into(),
            DavDepth::Zero,
            "z".into(),
            false,
            s,
            g,
        )
        .expect("shared locks coexist");
        assert_eq!(
            d.lock(
                now,
                t(6),
                "/".into(),
                DavDepth::Infinity,
                "w".into(),
                false,
                s,
                g
            ),
            Err(Rejection::Busy),
            "an infinite lock on the root meets the exclusive lock below"
        );
        assert_eq!(d.query(now, "/a/b/c").len(), 1);
        assert_eq!(
            d.query(now + s, "/a/b/c").len(),
            0,
            "expired locks do not apply"
        );
        assert_eq!(d.get(t(1)).map(|l| l.owner.as_str()), Some("x"));
        assert_eq!(
            d.lock(
                now,
                t(8),
                "/c".into(),
                DavDepth::Zero,
                "q".into(),
                true,
                s,
                g
            ),
            Err(Rejection::Busy),
            "an exclusive lock conflicts with shared ones on the same resource"
        );
        d.lock(
            now,
            t(9),
            "/e".into(),
            DavDepth::Zero,
            "q".into(),
            true,
            s,
            g,
        )
        .expect("free");
        assert_eq!(
            d.lock(
                now,
                t(10),
                "/e".into(),
                DavDepth::Zero,
                "r".into(),
                true,
                s,
                g
            ),
            Err(Rejection::Busy),
            "two exclusive zero-depth locks on one resource"
        );
        assert!(d.unlock(t(1)).is_some());
        assert!(d.unlock(t(1)).is_none());
        d.lock(
            now,
            t(7),
            "/a/b".into(),
            DavDepth::Zero,
            "y".into(),
            true,
            s,
            g,
        )
        .expect("free after unlock");
    }
}

#[cfg(test)]
#[path = "dav_write_check_tests.rs"]
mod write_check_tests;
