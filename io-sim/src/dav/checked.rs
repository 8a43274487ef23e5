//! The lock-checked WebDAV writes other than PUT — DELETE, COPY, MOVE, MKCOL, PROPPATCH,
//! a LOCK of an unmapped URL — and PROPFIND's `lockdiscovery`, on the worker's side:
//! each runs the core's decisions in the real worker's order (`If` first, then the lock
//! check of each part the write reaches, the source's before the destination's), every
//! question a `DavQuery` to the simulated parent's broker. The simulated share does not
//! change: once its lock check has decided, a write ends (`Passed`) without being
//! performed, and a LOCK of an unmapped URL goes to the broker without creating its file.
//! What the checks decided is judged against the lock table by the oracle.

use servery_core::dav_lock::{self, LockViews, Needs, Write};
use servery_core::proto::{BrokerRequest, DavDepth, DavLockInfo, DavReach};
use servery_core::{LeaseId, WorkerId};

use super::{Stage, oracle};
use crate::outcome::{DavEnd, DavIf, DavOp};
use crate::plan::{DAV_UNMAPPED, DavWriteKind};
use crate::rng::SimRng;
use crate::world::SimWorld;

/// Every resource the simulated share maps: the root, its collection `/d` and the files.
const MAPPED: [&str; 6] = ["/", "/d", "/d/a", "/d/b", "/e", "/f"];
/// The mapped resources a write may name (the root is never deleted, moved or patched).
const MEMBERS: [&str; 5] = ["/d", "/d/a", "/d/b", "/e", "/f"];
/// The collections a PROPFIND lists.
const COLLECTIONS: [&str; 2] = ["/", "/d"];

/// Whether the share maps `path`.
pub(super) fn mapped(path: &str) -> bool {
    MAPPED.contains(&path)
}

/// Whether a COPY or MOVE between the two would be refused as overlapping (403).
fn overlap(a: &str, b: &str) -> bool {
    oracle::under(a, b) || oracle::under(b, a)
}

fn pick(rng: &mut SimRng, from: &[&'static str]) -> Option<&'static str> {
    let last = from.len().checked_sub(1)?;
    Some(from[rng.range(0, last as u64) as usize])
}

/// Destinations of a COPY or MOVE from `from`: every mapped member or unmapped URL that
/// does not overlap it.
fn destinations(from: &str) -> Vec<&'static str> {
    let all = MEMBERS.iter().chain(&DAV_UNMAPPED).copied();
    all.filter(|to| !overlap(from, to)).collect()
}

/// What a writer without a lock sends: the request, its path and its `If`.
pub(super) fn tokenless(
    rng: &mut SimRng,
    kind: DavWriteKind,
    put_paths: &[&'static str],
) -> Option<(DavOp, &'static str, DavIf)> {
    Some(match kind {
        DavWriteKind::Put => (DavOp::Put, pick(rng, put_paths)?, DavIf::None),
        DavWriteKind::BadIf => (DavOp::Put, pick(rng, put_paths)?, DavIf::Malformed),
        DavWriteKind::Delete => (DavOp::Delete, pick(rng, &MEMBERS)?, DavIf::None),
        DavWriteKind::Proppatch => (DavOp::Proppatch, pick(rng, &MEMBERS)?, DavIf::None),
        DavWriteKind::Mkcol => (DavOp::Mkcol, pick(rng, &DAV_UNMAPPED)?, DavIf::None),
        DavWriteKind::Propfind => (DavOp::Propfind, pick(rng, &COLLECTIONS)?, DavIf::None),
        DavWriteKind::LockUnmapped => {
            let op = DavOp::Lock {
                depth_infinity: false,
                exclusive: rng.chance(0.5),
                timeout_ms: rng.range(500, 2_000),
            };
            (op, pick(rng, &DAV_UNMAPPED)?, DavIf::None)
        }
        DavWriteKind::Copy | DavWriteKind::Move => {
            let from = pick(rng, &MEMBERS)?;
            let to = pick(rng, &destinations(from))?;
            let op = if kind == DavWriteKind::Copy {
                DavOp::Copy { to }
            } else {
                DavOp::Move { to }
            };
            (op, from, DavIf::None)
        }
    })
}

/// A lock-checked write a lock client makes under its lock (rooted at `root`) with its
/// token: one of DELETE, COPY, MOVE, MKCOL, PROPPATCH of something the lock protects, so
/// that its token is what the write needs (other clients' locks may still refuse it).
/// `None` when the lock protects nothing that write could name.
pub(super) fn under_lock(
    rng: &mut SimRng,
    root: &str,
    infinity: bool,
) -> Option<(DavOp, &'static str)> {
    let guarded = |p: &str, reach: oracle::Reach| oracle::guards(root, infinity, p, reach);
    let members = || MEMBERS.iter().copied();
    let targets = || MEMBERS.iter().chain(&DAV_UNMAPPED).copied();
    match rng.range(0, 4) {
        0 => {
            let at: Vec<_> = members().filter(|p| guarded(p, oracle::TREE)).collect();
            Some((DavOp::Delete, pick(rng, &at)?))
        }
        1 => {
            let to: Vec<_> = targets().filter(|p| guarded(p, oracle::TREE)).collect();
            let to = pick(rng, &to)?;
            let from: Vec<_> = members().filter(|p| !overlap(p, to)).collect();
            Some((DavOp::Copy { to }, pick(rng, &from)?))
        }
        2 => {
            let from: Vec<_> = members().filter(|p| guarded(p, oracle::TREE)).collect();
            let from = pick(rng, &from)?;
            let to = pick(rng, &destinations(from))?;
            Some((DavOp::Move { to }, from))
        }
        3 => {
            let at: Vec<_> = DAV_UNMAPPED
                .iter()
                .copied()
                .filter(|p| guarded(p, oracle::MEMBER))
                .collect();
            Some((DavOp::Mkcol, pick(rng, &at)?))
        }
        _ => {
            let at: Vec<_> = members().filter(|p| guarded(p, oracle::CONTENT)).collect();
            Some((DavOp::Proppatch, pick(rng, &at)?))
        }
    }
}

/// The `DavLock` a LOCK request sends.
pub(super) fn lock_request(
    op: DavOp,
    resource: String,
    client: Option<u64>,
) -> Option<BrokerRequest> {
    let DavOp::Lock {
        depth_infinity,
        exclusive,
        timeout_ms,
    } = op
    else {
        return None;
    };
    Some(BrokerRequest::DavLock {
        resource,
        depth: if depth_infinity {
            DavDepth::Infinity
        } else {
            DavDepth::Zero
        },
        owner: format!("client-{}", client.unwrap_or_default()),
        exclusive,
        timeout_ms,
    })
}

/// What a write's lock check covers, the core's answer (`dav_lock::lock_checks`, which
/// the real worker asks too): a MOVE its source's tree, then its destination's; a COPY
/// only its destination's; a LOCK of an unmapped URL its collection's membership (or its
/// refusal on a read-only share).
fn reaches(
    op: DavOp,
    resource: &str,
    writable: bool,
) -> Result<Vec<(String, DavReach)>, dav_lock::DavRefusal> {
    let write = match op {
        DavOp::Lock { .. } => Write::CreatingLock { resource, writable },
        DavOp::Delete => Write::Delete(resource),
        DavOp::Copy { to } => Write::Copy { from: resource, to },
        DavOp::Move { to } => Write::Move { from: resource, to },
        DavOp::Mkcol => Write::Mkcol(resource),
        DavOp::Proppatch => Write::Proppatch(resource),
        DavOp::Put | DavOp::Refresh { .. } | DavOp::Unlock | DavOp::Propfind => {
            return Ok(Vec::new());
        }
    };
    let checks = dav_lock::lock_checks(write)?;
    Ok(checks.into_iter().map(|(k, r)| (k.to_owned(), r)).collect())
}

impl SimWorld {
    /// A lock-checked write whose `If` holds (or that has none): the core's lock check of
    /// each part it reaches, asking the broker what the check needs; then a LOCK of an
    /// unmapped URL goes to the broker, any other write ends there.
    pub(super) fn dav_check(
        &mut self,
        worker: WorkerId,
        conn: u64,
        rec: usize,
        views: LockViews,
        submitted: Vec<LeaseId>,
    ) {
        let Some(r) = self.out.dav.log.get(rec) else {
            return;
        };
        let (op, resource, client) = (r.op, r.resource.clone(), r.client);
        let parts = match reaches(op, &resource, !self.out.dav.read_only) {
            Ok(parts) => parts,
            Err(refusal) => return self.dav_refused(worker, conn, rec, &refusal),
        };
        for (at, reach) in &parts {
            match views.require(at, *reach, &submitted) {
                Needs::Query(key) => {
                    let request = BrokerRequest::DavQuery {
                        resource: key.clone(),
                    };
                    let stage = Stage::Check {
                        views,
                        key,
                        submitted,
                    };
                    return self.dav_ask(worker, conn, rec, request, stage);
                }
                Needs::Decided(Ok(())) => {}
                Needs::Decided(Err(refusal)) => {
                    if let Some(r) = self.out.dav.log.get_mut(rec) {
                        r.allowed = Some(false);
                    }
                    return self.dav_refused(worker, conn, rec, &refusal);
                }
            }
        }
        if let Some(r) = self.out.dav.log.get_mut(rec) {
            r.allowed = Some(true);
        }
        match lock_request(op, resource, client) {
            Some(request) => self.dav_ask(worker, conn, rec, request, Stage::Locking),
            None => self.dav_answer(worker, conn, rec, DavEnd::Passed),
        }
    }

    /// A PROPFIND Depth 1's answer about its collection: which locks `lockdiscovery`
    /// shows for the collection and each member, by the core's `applies` over that one
    /// answer, as the real worker lists them.
    pub(super) fn dav_discovered(
        &mut self,
        worker: WorkerId,
        conn: u64,
        rec: usize,
        around: &[DavLockInfo],
    ) {
        let Some(r) = self.out.dav.log.get_mut(rec) else {
            return;
        };
        let start = r.resource.clone();
        let listed = MAPPED
            .iter()
            .filter(|m| **m == start || oracle::collection_of(m) == Some(start.as_str()));
        r.discovered = listed
            .map(|m| {
                let shown = around.iter().filter(|l| dav_lock::applies(l, m));
                (m.to_string(), shown.map(|l| l.token.0).collect())
            })
            .collect();
        self.dav_answer(worker, conn, rec, DavEnd::Passed);
    }
}
