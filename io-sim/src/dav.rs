//! WebDAV in the simulation, opt-in through [`crate::Workload::dav`]: lock clients and
//! writers on the client side; on the worker side LOCK, refresh, UNLOCK and PUT decided as
//! the real worker decides them (`io-real/src/http/dav/`): every lock lives in the
//! parent's broker, a worker learns which locks apply by `DavQuery`, and a PUT that passes
//! goes through the write flow (reservation, target lease, temp file, rename) like an
//! upload; and an oracle that watches the broker's lock table after every step and every
//! DAV answer on the control channels.
//!
//! What a worker decides, as `io-real` does:
//!
//! - LOCK: one `DavLock`; granted → 200 with the token, `Busy` → 423, `Saturated` → 503.
//!   Every locked path exists (LOCK of an unmapped URL, which creates a file, is not
//!   modelled).
//! - refresh (LOCK without a body, the token in `If`): `DavQuery` of the path; the `If`
//!   holds when a lock that applies there has the token (else 412); then `DavRefresh`
//!   (`NotFound` → 409).
//! - UNLOCK: `DavQuery` of the path; a lock that applies there with the token, else 409;
//!   then `DavUnlock`.
//! - PUT: a token is submitted in a tagged `If` naming its lock's root, which holds when
//!   a lock that applies to the root has it: `DavQuery` of the root, else 412. Then the
//!   write flow (reservation, target lease, temp file, rename) with the lock check in its
//!   lease request (`DavWriteLease`, one request, decision 0029): the broker grants the
//!   lease only if every lock the PUT would break (`Reach::MEMBER`: the file's, and
//!   those rooted at its collection) has its token submitted. A refusal (`Locked`) is
//!   answered 423 after `DavQuery` of the file and of its collection, which name the
//!   locks in the real worker's answer. A PUT without a token asks nothing before its
//!   write flow.

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::broker::ClientError;
use servery_core::parent::Parent;
use servery_core::proto::{
    BrokerReply, BrokerRequest, DavDepth, DavLockInfo, DavReach, DavWriteCheck, Rejection,
    WorkerMessage,
};
use servery_core::{Instant, LeaseId, WorkerId};

use crate::labels;
use crate::outcome::{DavAnswer, DavEnd, DavLockDecision, DavLockRecord, DavOp, DavRecord};
use crate::plan::{DAV_FILES, DAV_TARGET_BASE, DavClientPlan};
use crate::process::Waiting;
use crate::world::{ConnKind, SimEvent, SimWorld};

/// Whether `a` is `b` or one of its ancestors (canonical paths, root `/`).
pub(crate) fn covers(a: &str, b: &str) -> bool {
    a == b || a == "/" || (b.starts_with(a) && b.as_bytes().get(a.len()) == Some(&b'/'))
}

/// The collection `path` is a member of.
pub(crate) fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Whether a lock rooted at `root` protects a PUT of `file`: it applies to the file
/// (rooted there, or above with depth infinity) or is rooted at the file's collection,
/// whose membership a PUT may change.
pub(crate) fn protects(root: &str, depth_infinity: bool, file: &str) -> bool {
    file == root || (depth_infinity && covers(root, file)) || parent_of(file) == root
}

fn applies(lock: &DavLockInfo, resource: &str) -> bool {
    lock.resource == resource
        || (lock.depth == DavDepth::Infinity && covers(&lock.resource, resource))
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

/// Where a worker is with one DAV request.
#[derive(Debug)]
enum Stage {
    /// Asking which locks apply to each path of `ask`, in order; answers in `got`.
    Querying {
        ask: Vec<String>,
        got: Vec<(String, Vec<DavLockInfo>)>,
    },
    Locking,
    Refreshing,
    Unlocking,
    /// A PUT the broker refused for a lock: asking which locks apply to each path of
    /// `ask`, to name them in the 423.
    Naming {
        ask: Vec<String>,
    },
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
    },
    Refresh {
        token: LeaseId,
    },
    Unlock {
        token: LeaseId,
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
}

impl DavSim {
    /// The parent read `message` from `worker`: note the DAV requests among them.
    pub(crate) fn wiretap_request(&mut self, worker: WorkerId, message: &WorkerMessage) {
        let WorkerMessage::Broker { id, request } = message else {
            return;
        };
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
            },
            BrokerRequest::DavRefresh { token, .. } => Wire::Refresh { token: *token },
            BrokerRequest::DavUnlock { token } => Wire::Unlock { token: *token },
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

    // ----- clients --------------------------------------------------------------------

    /// A lock client with drawn parameters arrives.
    pub(crate) fn dav_client_arrival(&mut self) {
        let Some(w) = self.spec.workload.dav.clone() else {
            return;
        };
        let now = Duration::from_nanos(ns(self.now));
        let rate = w.client_rate_at(now);
        if now < self.dav_until() && rate > 0.0 {
            let d = self.rng.exp(1.0 / rate);
            self.schedule_in(Duration::from_secs_f64(d), SimEvent::DavClientArrival);
        }
        let d = &w.draw;
        if d.resources.is_empty() {
            return;
        }
        let resource = d.resources[self.rng.range(0, d.resources.len() as u64 - 1) as usize];
        let plan = DavClientPlan {
            resource,
            depth_infinity: self.rng.chance(d.infinity_chance),
            exclusive: self.rng.chance(d.exclusive_chance),
            timeout_ms: self.rng.range(d.timeout_ms.0, d.timeout_ms.1),
            steps: self.rng.range(d.steps.0, d.steps.1),
            step_ms: d.step_ms,
            refresh_chance: d.refresh_chance,
            unlock: self.rng.chance(d.unlock_chance),
        };
        let Some(dav) = self.dav.as_mut() else {
            return;
        };
        let client = dav.clients.len();
        dav.clients.push(Client {
            steps_left: plan.steps,
            plan,
            token: None,
            done: false,
        });
        self.dav_client_step(client);
    }

    /// A writer without a lock PUTs one file.
    pub(crate) fn dav_write_arrival(&mut self) {
        let Some(w) = self.spec.workload.dav.as_ref() else {
            return;
        };
        let (rate, paths) = (w.write_rate, w.write_paths.clone());
        let now = Duration::from_nanos(ns(self.now));
        if now < self.dav_until() && rate > 0.0 {
            let d = self.rng.exp(1.0 / rate);
            self.schedule_in(Duration::from_secs_f64(d), SimEvent::DavWriteArrival);
        }
        if paths.is_empty() {
            return;
        }
        let path = paths[self.rng.range(0, paths.len() as u64 - 1) as usize];
        let rec = self.dav_record(None, DavOp::Put, path, None, None);
        self.arrive(ConnKind::Dav { rec });
    }

    fn dav_record(
        &mut self,
        client: Option<usize>,
        op: DavOp,
        resource: &str,
        token: Option<LeaseId>,
        lock_root: Option<&'static str>,
    ) -> usize {
        self.out.dav.log.push(DavRecord {
            client: client.map(|c| c as u64),
            op,
            resource: resource.to_owned(),
            token: token.map(|t| t.0),
            lock_root,
            worker: None,
            generation: 0,
            arrived_ns: ns(self.now),
            asked_ns: 0,
            answered_ns: 0,
            allowed: None,
            ended_ns: 0,
            end: None,
        });
        self.out.dav.log.len() - 1
    }

    /// A lock client's next request: LOCK, then its steps, then UNLOCK (or nothing).
    pub(crate) fn dav_client_step(&mut self, client: usize) {
        let now = Duration::from_nanos(ns(self.now));
        let until = self.dav_until();
        let Some(c) = self.dav.as_mut().and_then(|d| d.clients.get_mut(client)) else {
            return;
        };
        if c.done {
            return;
        }
        if now >= until {
            c.done = true;
            return;
        }
        let plan = c.plan.clone();
        let (op, resource, token, root) = match c.token {
            None => (
                DavOp::Lock {
                    depth_infinity: plan.depth_infinity,
                    exclusive: plan.exclusive,
                    timeout_ms: plan.timeout_ms,
                },
                plan.resource,
                None,
                None,
            ),
            Some(token) if c.steps_left > 0 => {
                c.steps_left -= 1;
                let files: Vec<&'static str> = DAV_FILES
                    .iter()
                    .copied()
                    .filter(|f| protects(plan.resource, plan.depth_infinity, f))
                    .collect();
                if files.is_empty() || self.rng.chance(plan.refresh_chance) {
                    (
                        DavOp::Refresh {
                            timeout_ms: plan.timeout_ms,
                        },
                        plan.resource,
                        Some(token),
                        Some(plan.resource),
                    )
                } else {
                    let file = files[self.rng.range(0, files.len() as u64 - 1) as usize];
                    (DavOp::Put, file, Some(token), Some(plan.resource))
                }
            }
            Some(token) if plan.unlock => {
                c.done = true;
                (
                    DavOp::Unlock,
                    plan.resource,
                    Some(token),
                    Some(plan.resource),
                )
            }
            Some(_) => {
                c.done = true;
                return;
            }
        };
        let rec = self.dav_record(Some(client), op, resource, token, root);
        self.arrive(ConnKind::Dav { rec });
    }

    /// The client hears how its request ended, and goes on.
    fn dav_client_heard(&mut self, rec: usize) {
        let r = &self.out.dav.log[rec];
        let (Some(client), op, end, token) = (r.client, r.op, r.end, r.token) else {
            return;
        };
        let Some(c) = self
            .dav
            .as_mut()
            .and_then(|d| d.clients.get_mut(client as usize))
        else {
            return;
        };
        if let DavOp::Lock { .. } = op {
            match (end, token) {
                (Some(DavEnd::Granted), Some(t)) => c.token = Some(LeaseId(t)),
                _ => c.done = true,
            }
        }
        if c.done {
            return;
        }
        let (lo, hi) = c.plan.step_ms;
        let d = Duration::from_micros(self.rng.range(lo * 1000, hi * 1000));
        self.schedule_in(
            d,
            SimEvent::DavClientStep {
                client: client as usize,
            },
        );
    }

    /// The request ends so: the record says how, the client hears it.
    pub(crate) fn dav_record_end(&mut self, rec: usize, end: DavEnd) {
        let now = ns(self.now);
        let Some(r) = self.out.dav.log.get_mut(rec) else {
            return;
        };
        if r.end.is_some() {
            return;
        }
        r.end = Some(end);
        r.ended_ns = now;
        let (worker, token) = (r.worker, r.token);
        match end {
            DavEnd::PreconditionFailed if token.is_some() => {
                self.out.coverage.insert(labels::DAV_STALE_TOKEN_REFUSED);
            }
            DavEnd::Locked => {
                let granted_here = self
                    .out
                    .dav
                    .locks
                    .iter()
                    .any(|l| l.gone_ns.is_none() && Some(l.granted_to) == worker);
                if !granted_here {
                    self.out.coverage.insert(labels::DAV_REFUSED_ELSEWHERE);
                }
            }
            DavEnd::Written if token.is_some() => {
                let elsewhere = self
                    .out
                    .dav
                    .locks
                    .iter()
                    .any(|l| Some(l.token) == token && Some(l.granted_to) != worker);
                if elsewhere {
                    self.out.coverage.insert(labels::DAV_TOKEN_WRITE_ELSEWHERE);
                }
            }
            _ => {}
        }
        self.dav_client_heard(rec);
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
        let (op, resource, client) = (r.op, r.resource.clone(), r.client);
        let (request, stage) = match op {
            DavOp::Lock {
                depth_infinity,
                exclusive,
                timeout_ms,
            } => (
                BrokerRequest::DavLock {
                    resource,
                    depth: if depth_infinity {
                        DavDepth::Infinity
                    } else {
                        DavDepth::Zero
                    },
                    owner: format!("client-{}", client.unwrap_or_default()),
                    exclusive,
                    timeout_ms,
                },
                Stage::Locking,
            ),
            DavOp::Refresh { .. } | DavOp::Unlock => (
                BrokerRequest::DavQuery {
                    resource: resource.clone(),
                },
                Stage::Querying {
                    ask: vec![resource],
                    got: Vec::new(),
                },
            ),
            DavOp::Put => match (r.lock_root, r.token) {
                // The `If` names a lock root: is it locked with that token?
                (Some(root), Some(_)) => (
                    BrokerRequest::DavQuery {
                        resource: root.to_owned(),
                    },
                    Stage::Querying {
                        ask: vec![root.to_owned()],
                        got: Vec::new(),
                    },
                ),
                _ => return self.dav_start_write(worker, conn, rec, Vec::new()),
            },
        };
        self.dav_ask(worker, conn, rec, request, stage);
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
        let end = match (stage, reply) {
            (Stage::Naming { mut ask }, BrokerReply::Locks(_)) => {
                ask.remove(0);
                if let Some(next) = ask.first().cloned() {
                    let request = BrokerRequest::DavQuery { resource: next };
                    return self.dav_ask(worker, conn, rec, request, Stage::Naming { ask });
                }
                DavEnd::Locked
            }
            (Stage::Naming { .. }, _) => DavEnd::Locked,
            (Stage::Querying { mut ask, mut got }, BrokerReply::Locks(locks)) => {
                let path = ask.remove(0);
                got.push((path, locks));
                if let Some(next) = ask.first().cloned() {
                    let request = BrokerRequest::DavQuery { resource: next };
                    return self.dav_ask(worker, conn, rec, request, Stage::Querying { ask, got });
                }
                return self.dav_decide(worker, conn, rec, &got);
            }
            // A list the channel could not carry: the real worker answers 503.
            (Stage::Querying { .. }, BrokerReply::Rejected(Rejection::TooLarge)) => {
                DavEnd::ClientBusy
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
            (Stage::Locking, BrokerReply::Rejected(Rejection::Busy)) => DavEnd::Conflict,
            (Stage::Locking, BrokerReply::Rejected(Rejection::Saturated)) => DavEnd::Saturated,
            (Stage::Refreshing, BrokerReply::Granted { .. }) => DavEnd::Refreshed,
            (Stage::Unlocking, BrokerReply::Released) => DavEnd::Unlocked,
            (Stage::Locking | Stage::Refreshing | Stage::Unlocking, BrokerReply::Rejected(_)) => {
                DavEnd::NoSuchLock
            }
            (_, other) => {
                self.violation(format!(
                    "{worker} got an unexpected broker answer for a DAV request: {other:?}"
                ));
                DavEnd::FailedClosed
            }
        };
        self.dav_answer(worker, conn, rec, end);
    }

    /// Every query answered: decide the request as the real worker does.
    fn dav_decide(
        &mut self,
        worker: WorkerId,
        conn: u64,
        rec: usize,
        got: &[(String, Vec<DavLockInfo>)],
    ) {
        let Some(r) = self.out.dav.log.get(rec) else {
            return;
        };
        let (op, resource, token, root) = (r.op, r.resource.clone(), r.token, r.lock_root);
        let on = |path: &str| -> Vec<&DavLockInfo> {
            got.iter()
                .filter(|(p, _)| p == path)
                .flat_map(|(_, locks)| locks.iter())
                .collect()
        };
        // `If: <root> (<token>)`: the root is locked with that token.
        let if_holds = |root: &str, token: u128| {
            on(root)
                .iter()
                .any(|l| applies(l, root) && l.token.0 == token)
        };
        match op {
            DavOp::Refresh { timeout_ms } => {
                let Some(token) = token.filter(|t| if_holds(&resource, *t)) else {
                    return self.dav_answer(worker, conn, rec, DavEnd::PreconditionFailed);
                };
                let request = BrokerRequest::DavRefresh {
                    token: LeaseId(token),
                    timeout_ms,
                };
                self.dav_ask(worker, conn, rec, request, Stage::Refreshing);
            }
            DavOp::Unlock => {
                let Some(token) = token.filter(|t| if_holds(&resource, *t)) else {
                    return self.dav_answer(worker, conn, rec, DavEnd::NoSuchLock);
                };
                let request = BrokerRequest::DavUnlock {
                    token: LeaseId(token),
                };
                self.dav_ask(worker, conn, rec, request, Stage::Unlocking);
            }
            DavOp::Put => {
                let if_fails =
                    matches!((root, token), (Some(root), Some(token)) if !if_holds(root, token));
                if if_fails {
                    if let Some(r) = self.out.dav.log.get_mut(rec) {
                        r.allowed = Some(false);
                    }
                    return self.dav_answer(worker, conn, rec, DavEnd::PreconditionFailed);
                }
                let submitted = token.map(LeaseId).into_iter().collect();
                self.dav_start_write(worker, conn, rec, submitted);
            }
            DavOp::Lock { .. } => {}
        }
    }

    /// A PUT whose `If` holds (or that has none): the write flow, its lease request
    /// carrying the lock check with the tokens submitted.
    fn dav_start_write(
        &mut self,
        worker: WorkerId,
        conn: u64,
        rec: usize,
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
            reach: DavReach {
                membership: true,
                tree: false,
            },
            submitted,
        };
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

    /// The broker refused a PUT's lease for a lock: the worker asks which locks apply to
    /// the file and its collection, to name them in its 423.
    pub(crate) fn dav_write_locked(&mut self, worker: WorkerId, conn: u64, rec: usize) {
        let Some(r) = self.out.dav.log.get(rec) else {
            return;
        };
        let resource = r.resource.clone();
        let ask = vec![resource.clone(), parent_of(&resource).to_owned()];
        let request = BrokerRequest::DavQuery { resource };
        self.dav_ask(worker, conn, rec, request, Stage::Naming { ask });
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

    // ----- the oracle ------------------------------------------------------------------

    /// The parent sends `reply` to `worker`'s request `id`: what it decided about a DAV
    /// request it read.
    pub(crate) fn dav_wiretap_reply(
        &mut self,
        now: Instant,
        worker: WorkerId,
        id: u64,
        reply: &BrokerReply,
    ) {
        let Some(dav) = self.dav.as_mut() else {
            return;
        };
        let Some(wire) = dav.wire.remove(&(worker, id)) else {
            return;
        };
        let at = ns(now);
        let out = &mut self.out;
        match wire {
            Wire::Lock {
                resource,
                depth_infinity,
                exclusive,
            } => {
                let table_len = usize::try_from(dav.table_len as isize + dav.delta).unwrap_or(0);
                let answer = match reply {
                    BrokerReply::Granted { .. } => DavAnswer::Granted,
                    BrokerReply::Rejected(Rejection::Busy) => DavAnswer::Busy,
                    BrokerReply::Rejected(Rejection::Saturated) => DavAnswer::Saturated,
                    _ => DavAnswer::Other,
                };
                out.dav.decisions.push(DavLockDecision {
                    at_ns: at,
                    table_len,
                    limit: dav.limit,
                    answer,
                });
                match reply {
                    &BrokerReply::Granted { id, expires_in_ms } => {
                        dav.delta += 1;
                        out.dav.locks.push(DavLockRecord {
                            token: id.0,
                            resource,
                            depth_infinity,
                            exclusive,
                            granted_to: worker.0,
                            granted_ns: at,
                            promised_end_ns: at + expires_in_ms * 1_000_000,
                            refreshes: 0,
                            unlocked_ns: None,
                            last_seen_ns: at,
                            gone_ns: None,
                        });
                        let i = out.dav.locks.len() - 1;
                        dav.all.insert(id, i);
                        dav.live.insert(id, i);
                    }
                    BrokerReply::Rejected(Rejection::Busy) => {
                        out.coverage.insert(labels::DAV_LOCK_CONFLICT);
                    }
                    BrokerReply::Rejected(Rejection::Saturated) => {
                        out.coverage.insert(labels::DAV_TABLE_SATURATED);
                    }
                    _ => {}
                }
            }
            Wire::Refresh { token } => {
                if let (&BrokerReply::Granted { expires_in_ms, .. }, Some(&i)) =
                    (reply, dav.all.get(&token))
                {
                    let l = &mut out.dav.locks[i];
                    l.promised_end_ns = at + expires_in_ms * 1_000_000;
                    l.refreshes += 1;
                    out.coverage.insert(labels::DAV_LOCK_REFRESHED);
                }
            }
            Wire::Unlock { token } => {
                // An UNLOCK removes a lock the table held, answered `Released` — or
                // `NotFound` when its time was up but its expiry not yet handled.
                if dav.live.contains_key(&token) && !dav.unlocked.contains(&token) {
                    dav.unlocked.push(token);
                    dav.delta -= 1;
                }
                if *reply == BrokerReply::Released
                    && let Some(&i) = dav.all.get(&token)
                {
                    out.dav.locks[i].unlocked_ns.get_or_insert(at);
                }
            }
        }
    }

    /// After every step: which granted locks the broker's table still holds.
    pub(crate) fn dav_observe(&mut self, now: Instant, parent: &Parent) {
        let Some(dav) = self.dav.as_mut() else {
            return;
        };
        let broker = parent.broker();
        let table = broker.dav();
        let at = ns(now);
        dav.limit = broker.limits().max_dav_locks() as usize;
        dav.table_len = table.len();
        dav.delta = 0;
        dav.unlocked.clear();
        let out = &mut self.out;
        out.dav.table_max = out.dav.table_max.max(table.len());
        let mut held = 0;
        dav.live.retain(|token, &mut i| {
            let l = &mut out.dav.locks[i];
            if table.contains(*token) {
                held += 1;
                l.last_seen_ns = at;
                return true;
            }
            l.gone_ns = Some(at);
            if l.unlocked_ns.is_some() {
                out.coverage.insert(labels::DAV_LOCK_UNLOCKED);
            } else if at >= l.promised_end_ns {
                out.coverage.insert(labels::DAV_LOCK_EXPIRED);
            }
            false
        });
        if held != table.len() && out.dav.untracked.len() < 8 {
            out.dav.untracked.push((at, table.len(), held));
        }
        let sup = parent.supervisor();
        dav.killed.retain(|&(worker, token)| {
            if sup.is_connected(worker) {
                return true;
            }
            // Let go (its grants revoked): the lock is the client's, still held.
            if table.contains(token) {
                out.coverage.insert(labels::DAV_LOCK_OUTLIVED_GRANTER);
            }
            false
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_lock_protects() {
        assert_eq!(parent_of("/d/a"), "/d");
        assert_eq!(parent_of("/e"), "/");
        assert!(covers("/d", "/d/a") && covers("/", "/e") && !covers("/d", "/dd"));
        // Rooted at the file, above it with depth infinity, or at its collection (a PUT
        // may add the member): a depth-0 lock on /d protects /d/a by membership.
        assert!(protects("/d/a", false, "/d/a"));
        assert!(protects("/d", false, "/d/a") && protects("/d", true, "/d/b"));
        assert!(!protects("/d/a", true, "/d/b") && !protects("/d", true, "/e"));
        assert!(protects("/", false, "/e") && !protects("/", false, "/d/a"));
        assert!(protects("/", true, "/d/a"));
    }
}
