//! Every WebDAV method's lock decision through the core's machines (decision 0117,
//! addendum): drawn lock clients LOCK, then write under their lock with its token (PUT,
//! DELETE, COPY, MOVE, MKCOL, PROPPATCH), refresh, send the token where it does not apply
//! (an UNLOCK of the lock root's collection, an untagged `If` about it) and UNLOCK, while
//! writers without a lock send every kind of write, LOCKs of unmapped URLs, `If` headers
//! that do not parse and PROPFINDs. The simulator's oracle judges each decision against
//! its record of the broker's lock table at the end of the run (a violation naming the
//! rule, e.g. `lock rule (RFC 4918 §7.4): a DELETE of /d without a token … was let
//! through … while the lock on /d/a … protected /d`); here, each seed must have exercised
//! the decisions it is there for.

use servery_sim::{DavDraw, DavEnd, DavIf, DavOp, DavWorkload, DavWriteKind, Outcome, SimCommand};

use crate::catalog::{at, expect, secs, spec, workers};
use crate::catalog_dav::dav_config;
use crate::{Ctx, End, Plan};

/// Sweep goals: the interesting branches of the lock decisions ran.
pub(crate) const TREE_WRITE_REFUSED: &str =
    "dav lock checks: a DELETE, COPY or MOVE without the token was refused (423)";
pub(crate) const TOKEN_WRITE_PASSED: &str =
    "dav lock checks: a DELETE, COPY, MOVE, MKCOL or PROPPATCH with its lock's token passed";
pub(crate) const STRAY_TOKEN_REFUSED: &str =
    "dav lock checks: a token sent where its lock does not apply was refused (412, 409)";
pub(crate) const CREATING_LOCK_REFUSED: &str =
    "dav lock checks: a LOCK of an unmapped URL was refused for its collection's lock (423)";
pub(crate) const READ_ONLY_REFUSED: &str =
    "dav lock checks: a read-only share refused a LOCK of an unmapped URL (403)";

const EVERY_WRITE: [DavWriteKind; 9] = [
    DavWriteKind::Put,
    DavWriteKind::Delete,
    DavWriteKind::Copy,
    DavWriteKind::Move,
    DavWriteKind::Mkcol,
    DavWriteKind::Proppatch,
    DavWriteKind::LockUnmapped,
    DavWriteKind::BadIf,
    DavWriteKind::Propfind,
];

/// Clients and writers arrive for this long.
const BUSY_SECS: f64 = 8.0;

fn workload(writes: &[DavWriteKind]) -> DavWorkload {
    DavWorkload {
        client_rate: 5.0,
        draw: DavDraw {
            exclusive_chance: 0.3,
            infinity_chance: 0.5,
            timeout_ms: (1_500, 4_000),
            steps: (2, 6),
            step_ms: (100, 400),
            refresh_chance: 0.25,
            write_chance: 0.6,
            stray_chance: 0.15,
            unlock_chance: 0.6,
            ..DavDraw::default()
        },
        write_rate: 20.0,
        write_mix: writes.to_vec(),
        until: secs(BUSY_SECS),
        ..DavWorkload::default()
    }
}

/// A writable share, with a recycle in the middle: every decision, through any worker.
pub(crate) fn lock_checks(ctx: &mut Ctx) -> Plan {
    let config = dav_config(workers(ctx, 2, 4));
    let mut spec = spec(ctx, config.clone(), BUSY_SECS + 1.0);
    spec.workload.dav = Some(workload(&EVERY_WRITE));
    spec.commands.push((at(ctx, 3.0, 5.0), SimCommand::Recycle));
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| exercised(o));
    Plan { spec, expect: e }
}

/// DAV PUTs (lock clients with their tokens, writers without locks) while the file system
/// fills part-way through a body, an fsync of the written file or of the directory after
/// the rename fails, or the power goes between that rename and its fsync (decision 0131):
/// the upload driver's `fsync rule:`, `directory-fsync rule:` and `torn-rename rule:`
/// judge each write, every grant comes back, and PUTs are written again once the faults
/// end.
pub(crate) fn put_storage_faults(ctx: &mut Ctx) -> Plan {
    let config = dav_config(workers(ctx, 2, 3));
    let mut spec = spec(ctx, config.clone(), BUSY_SECS + 1.0);
    spec.workload.dav = Some(DavWorkload {
        // Few locks: most PUTs are let through to the file system.
        client_rate: 1.0,
        ..workload(&[
            DavWriteKind::Put,
            DavWriteKind::Put,
            DavWriteKind::Put,
            DavWriteKind::Propfind,
        ])
    });
    crate::catalog_chunks::storage_faults(ctx, &mut spec, BUSY_SECS * 0.7);
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        crate::catalog_io_faults::storage_faults_answered(o)?;
        let last = o
            .fault_windows
            .iter()
            .map(|&(_, _, until)| until)
            .chain(o.injected.iter().map(|i| i.at_ms))
            .max()
            .unwrap_or(0);
        let written_after = o.dav.log.iter().any(|r| {
            r.op == DavOp::Put && r.end == Some(DavEnd::Written) && r.arrived_ns / 1_000_000 > last
        });
        if !written_after {
            return Err(format!(
                "no DAV PUT was written after the storage faults ended at {last} ms (a lease \
                 or reservation not given back?)"
            ));
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// A read-only share (`features.uploads` off): LOCKs, refreshes and UNLOCKs as anywhere,
/// and every write refused with 403 before any lock decision, a LOCK of an unmapped URL
/// (which would create it) included.
pub(crate) fn lock_checks_read_only(ctx: &mut Ctx) -> Plan {
    let mut config = dav_config(workers(ctx, 1, 3));
    config.features.uploads = false;
    let mut spec = spec(ctx, config.clone(), BUSY_SECS + 1.0);
    spec.workload.dav = Some(workload(&[
        DavWriteKind::LockUnmapped,
        DavWriteKind::LockUnmapped,
        DavWriteKind::Delete,
        DavWriteKind::Proppatch,
        DavWriteKind::Put,
        DavWriteKind::Propfind,
    ]));
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| read_only_exercised(o));
    Plan { spec, expect: e }
}

fn is_tree(op: DavOp) -> bool {
    matches!(op, DavOp::Delete | DavOp::Copy { .. } | DavOp::Move { .. })
}

fn is_checked(op: DavOp) -> bool {
    is_tree(op) || matches!(op, DavOp::Mkcol | DavOp::Proppatch)
}

/// The seed made the lock decisions this scenario is for: a tree write refused for a
/// lock, a lock-checked write passed with its token, a stray token refused; and, as a
/// goal of the sweep, a LOCK of an unmapped URL refused for its collection's lock.
fn exercised(o: &mut Outcome) -> Result<(), String> {
    let log = &o.dav.log;
    let refused = log
        .iter()
        .any(|r| is_tree(r.op) && r.token.is_none() && r.end == Some(DavEnd::Locked));
    let passed = log
        .iter()
        .any(|r| is_checked(r.op) && r.token.is_some() && r.end == Some(DavEnd::Passed));
    let stray = log.iter().any(|r| {
        (r.op == DavOp::Unlock && r.end == Some(DavEnd::NoSuchLock))
            || (r.if_header == DavIf::Untagged && r.end == Some(DavEnd::PreconditionFailed))
    });
    let creating = log.iter().any(|r| {
        matches!(r.op, DavOp::Lock { .. }) && r.token.is_none() && r.end == Some(DavEnd::Locked)
    });
    let counts = format!(
        "{} requests: tree write refused {refused}, token write passed {passed}, stray token \
         refused {stray}",
        log.len()
    );
    if !(refused && passed && stray) {
        return Err(format!(
            "the run did not exercise every lock decision it is for ({counts})"
        ));
    }
    o.coverage.insert(TREE_WRITE_REFUSED);
    o.coverage.insert(TOKEN_WRITE_PASSED);
    o.coverage.insert(STRAY_TOKEN_REFUSED);
    if creating {
        o.coverage.insert(CREATING_LOCK_REFUSED);
    }
    Ok(())
}

/// The read-only share refused a LOCK of an unmapped URL.
fn read_only_exercised(o: &mut Outcome) -> Result<(), String> {
    let refused = o
        .dav
        .log
        .iter()
        .any(|r| matches!(r.op, DavOp::Lock { .. }) && r.end == Some(DavEnd::ReadOnly));
    if !refused {
        return Err(format!(
            "no LOCK of an unmapped URL was refused on the read-only share ({} requests)",
            o.dav.log.len()
        ));
    }
    o.coverage.insert(READ_ONLY_REFUSED);
    Ok(())
}
