//! WebDAV in the simulation, opt-in through [`crate::Workload::dav`]: lock clients and
//! writers on the client side; on the worker side every method's lock decisions, which are
//! the core's (`servery_core::dav_lock`), the same machines the real worker drives, in the
//! real worker's order: every lock lives in the parent's broker, a worker learns which
//! locks apply by `DavQuery` when a core machine asks for it, and a PUT that passes goes
//! through the write flow (reservation, target lease, temp file, rename) like an upload;
//! and an oracle that watches the broker's lock table after every step and every DAV
//! answer on the control channels, and judges every request's decision against that
//! record at the end of the run.
//!
//! What the simulation's requests carry, and how their steps are performed:
//!
//! - LOCK of an existing file or collection: one `DavLock`; its refusals mean what the
//!   core says. LOCK of an unmapped URL (which creates a file): its `If`, then the core's
//!   `new_resource_lock` (403 on a read-only share) and lock check (`LockViews::require`),
//!   then `DavLock`; the empty file is not created ([`checked`]).
//! - refresh (LOCK without a body): `If: <root> (<token>)`, evaluated by the core's
//!   `IfCheck`; then a fresh `DavQuery` of the path and the core's `refresh_target`, then
//!   `DavRefresh`.
//! - UNLOCK: `Lock-Token: <token>`; `DavQuery` of the path and the core's
//!   `unlock_target`, then `DavUnlock`.
//! - PUT: with a token, `If: <root> (<token>)` naming its lock's root, evaluated by the
//!   core's `IfCheck`. Then the write flow with the lock check in its lease request
//!   (`DavWriteLease`, one request, decision 0029). A refusal (`Locked`) is answered 423
//!   once the core's lock check (`LockViews::require`, reach `MEMBER`) has named the
//!   locks, with the answers the `If` check already got.
//! - DELETE, COPY, MOVE, MKCOL, PROPPATCH: the `If` (tagged, untagged about the request's
//!   resource, or one that does not parse), then the core's lock check of each part the
//!   write reaches, in the real worker's order, every question a `DavQuery`; a write that
//!   passes ends there, not performed ([`checked`]). On a read-only share every write is
//!   refused (403) before anything is asked.
//! - PROPFIND Depth 1: one `DavQuery` of the collection, and the core's `applies` picks
//!   the locks each listed member's `lockdiscovery` shows.
//!
//! The simulated files carry no entity tags (no request's `If` has an ETag condition):
//! an inspection answers the resource's key and no ETag, at once.

mod checked;
mod client;
mod oracle;
#[cfg(test)]
mod oracle_tests;

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::broker::ClientError;
use servery_core::dav_lock::{
    self, BrokerCall, DavRefusal, IfCheck, IfStep, LockViews, Needs, Subject, reach,
};
use servery_core::proto::{
    BrokerReply, BrokerRequest, DavDepth, DavWriteCheck, Rejection, WorkerMessage,
};
use servery_core::{Instant, LeaseId, WorkerId};

use crate::outcome::{DavEnd, DavIf, DavOp};
use crate::plan::{DAV_FILES, DAV_TARGET_BASE, DavClientPlan};
use crate::process::Waiting;
use crate::world::{SimEvent, SimWorld};

/// Whether a lock rooted at `root` protects a PUT of `file`: it applies to the file
/// (rooted there, or above with depth infinity) or is rooted at the file's collection,
/// whose membership a PUT may change. The clients use it to choose what to write under
/// their lock; the workers judge with the core.
pub(crate) fn protects(root: &str, depth_infinity: bool, file: &str) -> bool {
    oracle::guards(root, depth_infinity, file, oracle::MEMBER)
}

fn ns(t: Instant) -> u64 {
    t.as_nanos()
}

/// One lock client.
#[derive(Debug)]
struct Client {
    plan: DavClientPlan,
    token: Option<LeaseId>,
    steps_left: u64,
    done: bool,
}

/// Where a worker is with one DAV request: waiting for the broker's answer to one call a
/// core machine asked for.
#[derive(Debug)]
enum Stage {
    /// The `If` check asked which locks are around `key`.
    If {
        check: IfCheck,
        key: String,
        submitted_by: Then,
    },
    /// A refresh's or UNLOCK's fresh query of the request's resource.
    Target {
        submitted: Vec<LeaseId>,
    },
    Locking,
    Refreshing,
    Unlocking,
    /// A lock-checked write's lock check asked which locks are around `key`.
    Check {
        views: LockViews,
        key: String,
        submitted: Vec<LeaseId>,
    },
    /// A PROPFIND's one question: the locks around its collection.
    Discover,
    /// A PUT the broker refused for a lock: the core's lock check asked about `key`, to
    /// name the locks in the 423.
    Naming {
        views: LockViews,
        key: String,
        submitted: Vec<LeaseId>,
    },
}

/// What follows a request's `If` check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Refresh,
    /// A PUT: the write flow, its lock check riding on its lease request.
    Write,
    /// Any other write: the core's lock check, asked of the broker step by step.
    Check,
}

#[derive(Debug)]
struct Serving {
    rec: usize,
    stage: Stage,
}

/// A DAV request the parent read, until its answer goes out.
#[derive(Debug)]
enum Wire {
    Lock {
        resource: String,
        depth_infinity: bool,
        exclusive: bool,
        rec: Option<usize>,
    },
    Refresh {
        token: LeaseId,
        rec: Option<usize>,
    },
    Unlock {
        token: LeaseId,
        rec: Option<usize>,
    },
}

/// The simulation's WebDAV state: clients, what workers are doing, and the oracle's view
/// of the broker's lock table.
#[derive(Debug, Default)]
pub(crate) struct DavSim {
    clients: Vec<Client>,
    serving: BTreeMap<(WorkerId, u64), Serving>,
    wire: BTreeMap<(WorkerId, u64), Wire>,
    /// Every granted token → its record in `Outcome::dav.locks`; `live` while the table
    /// held it at the last step.
    all: BTreeMap<LeaseId, usize>,
    live: BTreeMap<LeaseId, usize>,
    /// The table's size after the last step, its limit, and the grants minus unlocks the
    /// parent answered since: the size the broker saw when it decided the next LOCK.
    table_len: usize,
    limit: usize,
    delta: isize,
    /// Tokens an UNLOCK removed since the last step.
    unlocked: Vec<LeaseId>,
    /// The worker that answered the latest granted LOCK, and its token.
    last_granter: Option<(WorkerId, LeaseId)>,
    /// Granters a fault killed, until the parent has let them go.
    killed: Vec<(WorkerId, LeaseId)>,
    /// A PUT in its write flow: the broker answers its `If` check got and the tokens it
    /// submitted, for the lock check that names the locks of a refusal.
    writing: BTreeMap<usize, (LockViews, Vec<LeaseId>)>,
    /// The request each DAV broker call was made for, by worker and call ID, until the
    /// parent reads it.
    asked: BTreeMap<(WorkerId, u64), usize>,
}

impl DavSim {
    /// The parent read `message` from `worker`: note the DAV requests among them.
    pub(crate) fn wiretap_request(&mut self, worker: WorkerId, message: &WorkerMessage) {
        let WorkerMessage::Broker { id, request } = message else {
            return;
        };
        let rec = self.asked.remove(&(worker, *id));
        let wire = match request {
            BrokerRequest::DavLock {
                resource,
                depth,
                exclusive,
                ..
            } => Wire::Lock {
                resource: resource.clone(),
                depth_infinity: *depth == DavDepth::Infinity,
                exclusive: *exclusive,
                rec,
            },
            BrokerRequest::DavRefresh { token, .. } => Wire::Refresh { token: *token, rec },
            BrokerRequest::DavUnlock { token } => Wire::Unlock { token: *token, rec },
            _ => return,
        };
        self.wire.insert((worker, *id), wire);
    }
}

impl SimWorld {
    fn dav_until(&self) -> Duration {
        let w = &self.spec.workload;
        w.dav.as_ref().map_or(w.until, |d| d.until.min(w.until))
    }

    /// Schedules the WebDAV workload's first events (only with a DAV workload).
    pub(crate) fn dav_start(&mut self) {
        let Some(w) = self.spec.workload.dav.clone() else {
            return;
        };
        let mut dav = DavSim::default();
        self.out.dav.read_only = !self.spec.config.features.uploads;
        for (at, plan) in &w.clients {
            let client = dav.clients.len();
            dav.clients.push(Client {
                steps_left: plan.steps,
                plan: plan.clone(),
                token: None,
                done: false,
            });
            self.schedule_at(
                Instant::from_nanos(at.as_nanos() as u64),
                SimEvent::DavClientStep { client },
            );
        }
        self.dav = Some(dav);
        let rate = w.client_rate_at(Duration::ZERO);
        if rate > 0.0 {
            let d = self.rng.exp(1.0 / rate);
            self.schedule_in(Duration::from_secs_f64(d), SimEvent::DavClientArrival);
        }
        if w.write_rate > 0.0 {
            let d = self.rng.exp(1.0 / w.write_rate);
            self.schedule_in(Duration::from_secs_f64(d), SimEvent::DavWriteArrival);
        }
    }

    // ----- the worker's side ----------------------------------------------------------

    /// `worker` took the connection of DAV request `rec`.
    pub(crate) fn dav_accept(&mut self, worker: WorkerId, conn: u64, rec: usize) {
        let generation = self.procs.get(&worker).map_or(0, |p| p.generation);
        let Some(r) = self.out.dav.log.get_mut(rec) else {
            return;
        };
        r.worker = Some(worker.0);
        r.generation = generation;
        let (op, resource, client, token) = (r.op, r.resource.clone(), r.client, r.token);
        // The `If` header the client sends: its token, tagged with its lock's root or
        // about the request's resource; or one that does not parse.
        let uri = token.map(|t| dav_lock::token_uri(LeaseId(t)));
        let if_value = match (r.if_header, r.lock_root, uri) {
            (DavIf::Tagged, Some(root), Some(uri)) => Some(format!("<{root}> (<{uri}>)")),
            (DavIf::Untagged, _, Some(uri)) => Some(format!("(<{uri}>)")),
            (DavIf::Malformed, _, _) => Some("(<opaquelocktoken:".to_owned()),
            _ => None,
        };
        let writes = !matches!(
            op,
            DavOp::Lock { .. } | DavOp::Refresh { .. } | DavOp::Unlock | DavOp::Propfind
        );
        if writes && self.out.dav.read_only {
            // The worker refuses every write on a read-only share before anything else.
            return self.dav_refused(worker, conn, rec, &DavRefusal::ReadOnly);
        }
        match op {
            // A LOCK of an unmapped URL creates a resource: a write, with its `If` and its
            // lock check first.
            DavOp::Lock { .. } if !checked::mapped(&resource) => {
                let check = IfCheck::new(if_value.as_deref());
                self.dav_if(worker, conn, rec, check, Then::Check);
            }
            DavOp::Lock { .. } => {
                let Some(request) = checked::lock_request(op, resource, client) else {
                    return;
                };
                self.dav_ask(worker, conn, rec, request, Stage::Locking);
            }
            DavOp::Delete
            | DavOp::Copy { .. }
            | DavOp::Move { .. }
            | DavOp::Mkcol
            | DavOp::Proppatch => {
                let check = IfCheck::new(if_value.as_deref());
                self.dav_if(worker, conn, rec, check, Then::Check);
            }
            DavOp::Propfind => {
                let request = BrokerRequest::DavQuery { resource };
                self.dav_ask(worker, conn, rec, request, Stage::Discover);
            }
            DavOp::Refresh { .. } => {
                let check = IfCheck::new(if_value.as_deref());
                self.dav_if(worker, conn, rec, check, Then::Refresh);
            }
            DavOp::Put => {
                let check = IfCheck::new(if_value.as_deref());
                self.dav_if(worker, conn, rec, check, Then::Write);
            }
            DavOp::Unlock => {
                let header = token.map(|t| format!("<{}>", dav_lock::token_uri(LeaseId(t))));
                if let Err(refusal) = dav_lock::unlock_token(header.as_deref()) {
                    return self.dav_refused(worker, conn, rec, &refusal);
                }
                let request = BrokerRequest::DavQuery { resource };
                let stage = Stage::Target {
                    submitted: Vec::new(),
                };
                self.dav_ask(worker, conn, rec, request, stage);
            }
        }
    }

    /// Runs the core's `If` check until it needs the broker, or has decided.
    fn dav_if(&mut self, worker: WorkerId, conn: u64, rec: usize, mut check: IfCheck, then: Then) {
        let Some(resource) = self.out.dav.log.get(rec).map(|r| r.resource.clone()) else {
            return;
        };
        let submitted = loop {
            match check.next_step() {
                IfStep::Inspect(Subject::Request) => check.inspected(Some(resource.clone()), None),
                // Tags are the lock roots the clients name: absolute paths, lock-table keys.
                IfStep::Inspect(Subject::Tag(tag)) => {
                    let key = tag.starts_with('/').then_some(tag);
                    check.inspected(key, None);
                }
                IfStep::Query(key) => {
                    let request = BrokerRequest::DavQuery {
                        resource: key.clone(),
                    };
                    let stage = Stage::If {
                        check,
                        key,
                        submitted_by: then,
                    };
                    return self.dav_ask(worker, conn, rec, request, stage);
                }
                IfStep::Done(Ok(submitted)) => break (submitted, check.into_views()),
                IfStep::Done(Err(refusal)) => {
                    if then != Then::Refresh
                        && let Some(r) = self.out.dav.log.get_mut(rec)
                    {
                        r.allowed = Some(false);
                    }
                    return self.dav_refused(worker, conn, rec, &refusal);
                }
            }
        };
        let (submitted, views) = submitted;
        match then {
            Then::Refresh => {
                let request = BrokerRequest::DavQuery { resource };
                self.dav_ask(worker, conn, rec, request, Stage::Target { submitted });
            }
            Then::Write => self.dav_start_write(worker, conn, rec, views, submitted),
            Then::Check => self.dav_check(worker, conn, rec, views, submitted),
        }
    }

    fn dav_ask(
        &mut self,
        worker: WorkerId,
        conn: u64,
        rec: usize,
        request: BrokerRequest,
        stage: Stage,
    ) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        match p.client.request(p.clock.own(now), request) {
            Ok(id) => {
                p.waiting.insert(id, Waiting::Dav(conn));
                if let Some(dav) = self.dav.as_mut() {
                    dav.asked.insert((worker, id), rec);
                }
                if let Some(r) = self.out.dav.log.get_mut(rec)
                    && r.asked_ns == 0
                {
                    r.asked_ns = ns(now);
                }
                if let Some(dav) = self.dav.as_mut() {
                    dav.serving.insert((worker, conn), Serving { rec, stage });
                }
                self.pump(worker);
            }
            Err(ClientError::Saturated) => self.dav_answer(worker, conn, rec, DavEnd::ClientBusy),
            Err(_) => self.dav_answer(worker, conn, rec, DavEnd::FailedClosed),
        }
    }

    /// The broker's answer to what `worker` asked for DAV connection `conn` (`None`: no
    /// answer, the request failed closed).
    pub(crate) fn dav_reply(&mut self, worker: WorkerId, conn: u64, reply: Option<BrokerReply>) {
        let Some(Serving { rec, stage }) = self
            .dav
            .as_mut()
            .and_then(|d| d.serving.remove(&(worker, conn)))
        else {
            return;
        };
        let Some(reply) = reply else {
            return self.dav_answer(worker, conn, rec, DavEnd::FailedClosed);
        };
        // A refusal's naming comes after the decision, which rests on what came before.
        if !matches!(stage, Stage::Naming { .. })
            && let Some(r) = self.out.dav.log.get_mut(rec)
        {
            r.answered_ns = ns(self.now);
        }
        let call = match &stage {
            Stage::If { .. }
            | Stage::Target { .. }
            | Stage::Naming { .. }
            | Stage::Check { .. }
            | Stage::Discover => BrokerCall::Query,
            Stage::Locking => BrokerCall::Lock(""),
            Stage::Refreshing => BrokerCall::Refresh,
            Stage::Unlocking => BrokerCall::Unlock,
        };
        if let Stage::Naming { .. } = stage
            && !matches!(reply, BrokerReply::Locks(_))
        {
            // The PUT was refused for a lock already; only naming the locks failed.
            return self.dav_answer(worker, conn, rec, DavEnd::Locked);
        }
        if let BrokerReply::Rejected(rejection) = reply {
            let refusal = dav_lock::refusal_of(call, rejection);
            return self.dav_refused(worker, conn, rec, &refusal);
        }
        let end = match (stage, reply) {
            (
                Stage::If {
                    mut check,
                    key,
                    submitted_by,
                },
                BrokerReply::Locks(locks),
            ) => {
                check.answered(key, locks);
                return self.dav_if(worker, conn, rec, check, submitted_by);
            }
            (Stage::Target { submitted }, BrokerReply::Locks(locks)) => {
                return self.dav_target(worker, conn, rec, &locks, &submitted);
            }
            (
                Stage::Check {
                    mut views,
                    key,
                    submitted,
                },
                BrokerReply::Locks(locks),
            ) => {
                views.answer(key, locks);
                return self.dav_check(worker, conn, rec, views, submitted);
            }
            (Stage::Discover, BrokerReply::Locks(locks)) => {
                return self.dav_discovered(worker, conn, rec, &locks);
            }
            (
                Stage::Naming {
                    mut views,
                    key,
                    submitted,
                },
                BrokerReply::Locks(locks),
            ) => {
                views.answer(key, locks);
                return self.dav_name_locks(worker, conn, rec, views, submitted);
            }
            (Stage::Locking, BrokerReply::Granted { id, .. }) => {
                if let Some(r) = self.out.dav.log.get_mut(rec) {
                    r.token = Some(id.0);
                }
                if let Some(dav) = self.dav.as_mut() {
                    dav.last_granter = Some((worker, id));
                }
                DavEnd::Granted
            }
            (Stage::Refreshing, BrokerReply::Granted { .. }) => DavEnd::Refreshed,
            (Stage::Unlocking, BrokerReply::Released) => DavEnd::Unlocked,
            (_, other) => {
                self.violation(format!(
                    "{worker} got an unexpected broker answer for a DAV request: {other:?}"
                ));
                DavEnd::FailedClosed
            }
        };
        self.dav_answer(worker, conn, rec, end);
    }

    /// A refresh's or UNLOCK's query answered: the core names the lock it acts on.
    fn dav_target(
        &mut self,
        worker: WorkerId,
        conn: u64,
        rec: usize,
        around: &[servery_core::proto::DavLockInfo],
        submitted: &[LeaseId],
    ) {
        let Some(r) = self.out.dav.log.get(rec) else {
            return;
        };
        let (op, resource, token) = (r.op, r.resource.clone(), r.token);
        let (request, stage) = match op {
            DavOp::Refresh { timeout_ms } => {
                match dav_lock::refresh_target(&resource, around, submitted) {
                    Ok(lock) => (
                        BrokerRequest::DavRefresh {
                            token: lock.token,
                            timeout_ms,
                        },
                        Stage::Refreshing,
                    ),
                    Err(refusal) => return self.dav_refused(worker, conn, rec, &refusal),
                }
            }
            _ => {
                let uri = token.map(|t| dav_lock::token_uri(LeaseId(t)));
                match dav_lock::unlock_target(&resource, uri.as_deref().unwrap_or(""), around) {
                    Ok(token) => (BrokerRequest::DavUnlock { token }, Stage::Unlocking),
                    Err(refusal) => return self.dav_refused(worker, conn, rec, &refusal),
                }
            }
        };
        self.dav_ask(worker, conn, rec, request, stage);
    }

    /// The core refused the request: the client hears the status the real worker sends.
    fn dav_refused(&mut self, worker: WorkerId, conn: u64, rec: usize, refusal: &DavRefusal) {
        let end = match refusal {
            DavRefusal::IfFailed => DavEnd::PreconditionFailed,
            DavRefusal::Locked(_) => DavEnd::Locked,
            DavRefusal::ConflictingLock(_) => DavEnd::Conflict,
            DavRefusal::NoSuchLock => DavEnd::NoSuchLock,
            DavRefusal::Saturated => DavEnd::Saturated,
            // A list the channel could not carry: the real worker answers 503.
            DavRefusal::TooLarge => DavEnd::ClientBusy,
            DavRefusal::ReadOnly => DavEnd::ReadOnly,
            DavRefusal::BadIf(_)
                if self.out.dav.log.get(rec).map(|r| r.if_header) == Some(DavIf::Malformed) =>
            {
                DavEnd::BadIf
            }
            other => {
                self.violation(format!(
                    "{worker} refused a simulated DAV request, which is well-formed: {other}"
                ));
                DavEnd::FailedClosed
            }
        };
        self.dav_answer(worker, conn, rec, end);
    }

    /// A PUT whose `If` holds (or that has none): the write flow, its lease request
    /// carrying the lock check with the tokens submitted.
    fn dav_start_write(
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
        let resource = r.resource.clone();
        let Some(i) = DAV_FILES.iter().position(|f| *f == resource) else {
            self.violation(format!("a DAV PUT of {resource}, which is no file"));
            return self.dav_answer(worker, conn, rec, DavEnd::FailedClosed);
        };
        let check = DavWriteCheck {
            resource,
            reach: reach::MEMBER,
            submitted: submitted.clone(),
        };
        if let Some(dav) = self.dav.as_mut() {
            dav.writing.insert(rec, (views, submitted));
        }
        self.next_conn += 1;
        let writer = self.next_conn;
        let arrived_ms = r.arrived_ns / 1_000_000;
        let target = DAV_TARGET_BASE + i as u8;
        self.start_upload(worker, conn, target, writer, arrived_ms, Some((rec, check)));
    }

    /// A PUT's lease request (with its lock check) goes to the broker.
    pub(crate) fn dav_lease_asked(&mut self, rec: usize) {
        let now = self.now;
        if let Some(r) = self.out.dav.log.get_mut(rec)
            && r.asked_ns == 0
        {
            r.asked_ns = ns(now);
        }
    }

    /// The broker answered a PUT's lease request: granted, or busy (another write holds
    /// the target), means the lock check passed; `Locked` that it did not.
    pub(crate) fn dav_lease_answered(&mut self, rec: usize, reply: Option<&BrokerReply>) {
        let now = self.now;
        let Some(r) = self.out.dav.log.get_mut(rec) else {
            return;
        };
        let allowed = match reply {
            Some(BrokerReply::Granted { .. } | BrokerReply::Rejected(Rejection::Busy)) => true,
            Some(BrokerReply::Rejected(Rejection::Locked)) => false,
            _ => return,
        };
        r.answered_ns = ns(now);
        r.allowed = Some(allowed);
    }

    /// The broker refused a PUT's lease for a lock: the core's lock check, with what the
    /// `If` check already knows, asks which locks apply to the file and its collection,
    /// to name them in the 423.
    pub(crate) fn dav_write_locked(&mut self, worker: WorkerId, conn: u64, rec: usize) {
        let kept = self.dav.as_mut().and_then(|d| d.writing.remove(&rec));
        let (views, submitted) = kept.unwrap_or_default();
        self.dav_name_locks(worker, conn, rec, views, submitted);
    }

    fn dav_name_locks(
        &mut self,
        worker: WorkerId,
        conn: u64,
        rec: usize,
        views: LockViews,
        submitted: Vec<LeaseId>,
    ) {
        let Some(resource) = self.out.dav.log.get(rec).map(|r| r.resource.clone()) else {
            return;
        };
        match views.require(&resource, reach::MEMBER, &submitted) {
            Needs::Query(key) => {
                let request = BrokerRequest::DavQuery {
                    resource: key.clone(),
                };
                let stage = Stage::Naming {
                    views,
                    key,
                    submitted,
                };
                self.dav_ask(worker, conn, rec, request, stage);
            }
            // Refused by the broker, whatever the table says now: 423.
            Needs::Decided(_) => self.dav_answer(worker, conn, rec, DavEnd::Locked),
        }
    }

    /// Answer the client and close the connection.
    fn dav_answer(&mut self, worker: WorkerId, conn: u64, rec: usize, end: DavEnd) {
        if let Some(dav) = self.dav.as_mut() {
            dav.serving.remove(&(worker, conn));
        }
        self.close_served(worker, conn);
        self.dav_record_end(rec, end);
        self.pump(worker);
        self.dispatch();
    }

    /// A PUT's write flow ended (`finish_upload` has closed the connection).
    pub(crate) fn dav_write_ended(&mut self, rec: usize, end: crate::outcome::UploadEnd) {
        let end = match end {
            crate::outcome::UploadEnd::Ok => DavEnd::Written,
            crate::outcome::UploadEnd::Lost => DavEnd::Lost,
            other => DavEnd::WriteFailed(other),
        };
        self.dav_record_end(rec, end);
    }

    /// `worker` died with these DAV requests in flight.
    pub(crate) fn dav_lost(&mut self, worker: WorkerId, recs: Vec<usize>) {
        if let Some(dav) = self.dav.as_mut() {
            dav.serving.retain(|(w, _), _| *w != worker);
        }
        for rec in recs {
            self.dav_record_end(rec, DavEnd::Lost);
        }
    }

    /// Fault: kill the worker that answered the latest granted LOCK.
    pub(crate) fn dav_crash_granter(&mut self) -> Option<(WorkerId, LeaseId)> {
        let (worker, token) = self.dav.as_ref()?.last_granter?;
        if !self.procs.get(&worker).is_some_and(|p| p.alive) {
            return None;
        }
        if let Some(dav) = self.dav.as_mut() {
            dav.killed.push((worker, token));
        }
        self.out.dav.granters_killed.push((worker.0, token.0));
        Some((worker, token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_lock_protects() {
        // Rooted at the file, above it with depth infinity, or at its collection (a PUT
        // may add the member): a depth-0 lock on /d protects /d/a by membership.
        assert!(protects("/d/a", false, "/d/a"));
        assert!(protects("/d", false, "/d/a") && protects("/d", true, "/d/b"));
        assert!(!protects("/d/a", true, "/d/b") && !protects("/d", true, "/e"));
        assert!(protects("/", false, "/e") && !protects("/", false, "/d/a"));
        assert!(protects("/", true, "/d/a"));
    }
}
