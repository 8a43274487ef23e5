//! The parent's broker backed by the cluster (decision 0096, wiring of decision 0130):
//! which worker requests must first be granted by the service's shared tables in etcd,
//! and what the broker is told once they are.
//!
//! - A DAV LOCK on a resource this host holds no shared name for asks etcd for the name
//!   (`locks/<resource>`) first; granted, the broker's own table decides as in a single
//!   host (shared or exclusive, depth), so locks through one host keep their RFC 4918
//!   rules and a lock through another host is refused. The name goes back to etcd when
//!   no live lock is left on the resource here.
//! - An upload reservation is first reserved from the service-wide budget
//!   (`budget/uploads/`), then made by the broker; the share is given back when the
//!   broker's reservation goes (release, expiry, a revoked worker).
//! - An upload of unknown length that reaches what it reserved grows its reservation:
//!   the bytes it adds are reserved from the service's budget first (its count is
//!   unchanged), and given back with the reservation.
//! - A new partial upload (a resumable upload's first chunk) is counted the same way in
//!   `budget/partials/`, and given back when the broker's partial goes (finished,
//!   expired). A partial this host's broker already has (the same upload resumed here)
//!   takes no second share. One resumed through another host is new there: its first
//!   host's share stays until that host's partial expires (`partial_ttl`), or the host's
//!   etcd lease does.
//! - The store unreachable, or the host past its grant deadline: the request is answered
//!   `Saturated`, which a worker answers 503 with `Retry-After`, without any change to the
//!   worker ↔ parent protocol. Every other request is the broker's alone, as before.

use std::collections::BTreeMap;

use crate::broker::{Broker, Owner};
use crate::cluster::{
    Budget, ClusterAction, ClusterAnswer, ClusterHost, ClusterRequest, NameKind, OpId, Revision,
    SharedName, StoreCall, StoreReply,
};
use crate::ids::LeaseId;
use crate::proto::{BrokerReply, BrokerRequest, Rejection};
use crate::time::Instant;

/// A worker's request waiting for the cluster's answer.
#[derive(Debug, Clone)]
struct Waiting {
    owner: Owner,
    id: u64,
    request: BrokerRequest,
    purpose: Purpose,
}

#[derive(Debug, Clone)]
enum Purpose {
    /// The shared name of the DAV lock on `resource`.
    Lock { resource: String },
    /// One upload reservation of `bytes` from the service's budget.
    Upload { bytes: u64 },
    /// One new partial upload of `bytes` from the service's partial budget.
    Partial { bytes: u64 },
    /// Upload reservation `id`, held in this host's share at `from` bytes, grown to `to`.
    Grow { id: LeaseId, from: u64, to: u64 },
}

/// What the gate did with a request.
#[derive(Debug)]
pub(super) enum Gated {
    /// The broker alone decides it, now.
    ToBroker(BrokerRequest),
    /// Held until the cluster answers.
    Held,
    /// Refused at once, with this answer.
    Refused(Rejection),
}

#[derive(Debug, Clone)]
pub(super) struct ClusterGate {
    host: ClusterHost,
    next_request: u64,
    waiting: BTreeMap<ClusterRequest, Waiting>,
    /// Resources whose shared lock name this host holds, with its fencing token.
    locks: BTreeMap<String, (SharedName, Revision)>,
    /// The broker's upload reservations counted in this host's share: id → bytes.
    uploads: BTreeMap<LeaseId, u64>,
    /// The broker's partial uploads counted in this host's share: id → bytes.
    partials: BTreeMap<LeaseId, u64>,
    /// Store calls for the driver, in order.
    calls: Vec<(OpId, StoreCall)>,
}

impl ClusterGate {
    pub(super) fn start(now: Instant, mut host: ClusterHost) -> Self {
        host.start(now);
        ClusterGate {
            host,
            next_request: 0,
            waiting: BTreeMap::new(),
            locks: BTreeMap::new(),
            uploads: BTreeMap::new(),
            partials: BTreeMap::new(),
            calls: Vec::new(),
        }
    }

    pub(super) fn host(&self) -> &ClusterHost {
        &self.host
    }

    /// The broker's limits changed (a reload): the service-wide budgets follow.
    pub(super) fn set_limits(&mut self, limits: &crate::config::BrokerLimits) {
        self.host
            .set_budget_limits(crate::cluster::BudgetLimits::service_wide(limits));
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.host.poll_timeout()
    }

    fn next(&mut self) -> ClusterRequest {
        self.next_request += 1;
        ClusterRequest(self.next_request)
    }

    /// Takes one request of a connected worker (or the parent's own client).
    pub(super) fn gate(
        &mut self,
        now: Instant,
        broker: &Broker,
        owner: Owner,
        id: u64,
        request: BrokerRequest,
    ) -> Gated {
        let purpose = match &request {
            BrokerRequest::DavLock { resource, .. } if !self.locks.contains_key(resource) => {
                Purpose::Lock {
                    resource: resource.clone(),
                }
            }
            // A reservation larger than the whole budget is the broker's `TooLarge`.
            BrokerRequest::ReserveUpload { bytes }
                if *bytes <= broker.limits().max_upload_bytes() =>
            {
                Purpose::Upload { bytes: *bytes }
            }
            // Growth of a reservation counted here: only the bytes it adds.
            // A second growth of one reservation while the first waits would be counted
            // from the same size: refused as a full budget (the worker's upload fails
            // as when the budget has no room; a worker grows one at a time anyway).
            BrokerRequest::GrowReservation { id, .. } if self.growing(*id) => {
                return Gated::Refused(Rejection::Saturated);
            }
            BrokerRequest::GrowReservation { id, bytes }
                if self.uploads.get(id).is_some_and(|held| held < bytes)
                    && *bytes <= broker.limits().max_upload_bytes() =>
            {
                Purpose::Grow {
                    id: *id,
                    from: self.uploads[id],
                    to: *bytes,
                }
            }
            // A new partial only: resuming one this broker has takes no second share,
            // and one larger than an upload may be is the broker's `TooLarge`.
            BrokerRequest::ReservePartial { key, bytes }
                if *bytes <= broker.limits().max_upload_bytes()
                    && !broker.partials().any(|(_, p)| p.key == *key) =>
            {
                Purpose::Partial { bytes: *bytes }
            }
            _ => return Gated::ToBroker(request),
        };
        let asked = self.next();
        match &purpose {
            Purpose::Lock { resource } => match SharedName::new(NameKind::Lock, resource) {
                Ok(name) => self.host.acquire(now, asked, &name),
                // A path no key can hold (`..`): the broker's table refuses what it would.
                Err(_) => return Gated::ToBroker(request),
            },
            Purpose::Upload { bytes } => self.host.reserve(now, asked, Budget::Uploads, *bytes),
            Purpose::Partial { bytes } => self.host.reserve(now, asked, Budget::Partials, *bytes),
            Purpose::Grow { from, to, .. } => {
                self.host.grow(now, asked, Budget::Uploads, to - from)
            }
        }
        self.waiting.insert(
            asked,
            Waiting {
                owner,
                id,
                request,
                purpose,
            },
        );
        Gated::Held
    }

    /// Whether a growth of reservation `id` is waiting for the cluster (one at a time: a
    /// second would be counted from the same size).
    fn growing(&self, id: LeaseId) -> bool {
        self.waiting
            .values()
            .any(|w| matches!(w.purpose, Purpose::Grow { id: g, .. } if g == id))
    }

    pub(super) fn store_replied(&mut self, now: Instant, op: OpId, reply: StoreReply) {
        self.host.handle_reply(now, op, reply);
    }

    pub(super) fn handle_timeout(&mut self, now: Instant) {
        if self.host.poll_timeout().is_some_and(|due| due <= now) {
            self.host.handle_timeout(now);
        }
    }

    /// Carries out the cluster's answers against the broker (`connected` says whether a
    /// worker may still be granted anything), then gives back what the broker no longer
    /// holds. The store calls are left in [`ClusterGate::take_calls`].
    pub(super) fn pump(
        &mut self,
        now: Instant,
        broker: &mut Broker,
        connected: impl Fn(Owner) -> bool,
    ) {
        while let Some(action) = self.host.poll_action() {
            match action {
                ClusterAction::Store { op, call } => self.calls.push((op, call)),
                ClusterAction::Answer { request, answer } => {
                    if let Some(w) = self.waiting.remove(&request) {
                        self.answered(now, broker, w, answer, &connected);
                    }
                }
            }
        }
        self.give_back_unheld(now, broker);
        // Giving back may have queued store calls.
        while let Some(action) = self.host.poll_action() {
            if let ClusterAction::Store { op, call } = action {
                self.calls.push((op, call));
            }
        }
    }

    pub(super) fn take_calls(&mut self) -> Vec<(OpId, StoreCall)> {
        std::mem::take(&mut self.calls)
    }

    fn answered(
        &mut self,
        now: Instant,
        broker: &mut Broker,
        w: Waiting,
        answer: ClusterAnswer,
        connected: &impl Fn(Owner) -> bool,
    ) {
        let refusal = match answer {
            ClusterAnswer::Granted { .. } | ClusterAnswer::Reserved => None,
            ClusterAnswer::Busy => Some(Rejection::Busy),
            // Unreachable store, past the grant deadline, or a full service-wide budget:
            // the worker's 503 with Retry-After.
            _ => Some(Rejection::Saturated),
        };
        if let Some(rejection) = refusal {
            if connected(w.owner) {
                broker.answer(w.owner, w.id, BrokerReply::Rejected(rejection));
            }
            return;
        }
        match (&w.purpose, answer) {
            (Purpose::Lock { resource }, ClusterAnswer::Granted { fence }) => {
                if let Ok(name) = SharedName::new(NameKind::Lock, resource) {
                    self.locks.insert(resource.clone(), (name, fence));
                }
            }
            (Purpose::Upload { bytes }, _) => {
                let bytes = *bytes;
                return self.hand_over(now, broker, w, connected, Budget::Uploads, bytes);
            }
            (Purpose::Grow { id, from, to }, _) => {
                if connected(w.owner) {
                    broker.handle_request(now, w.owner, w.id, w.request);
                }
                let grown = broker
                    .reservations()
                    .any(|(r, held)| r == id && held.bytes >= *to);
                if grown && self.uploads.contains_key(id) {
                    self.uploads.insert(*id, *to);
                } else {
                    // Refused by the broker, or the reservation went meanwhile: the
                    // bytes go back (a gone reservation's own share goes with it).
                    self.host.give_back_growth(now, Budget::Uploads, to - from);
                }
                return;
            }
            (Purpose::Partial { bytes }, _) => {
                let bytes = *bytes;
                return self.hand_over(now, broker, w, connected, Budget::Partials, bytes);
            }
            _ => {}
        }
        if connected(w.owner) {
            broker.handle_request(now, w.owner, w.id, w.request);
        }
    }

    /// Shared names with no live lock left here, and reservations the broker no longer
    /// has, go back to the cluster; a lock name the cluster no longer backs (the host's
    /// lease was lost) takes this host's locks on that resource with it.
    fn give_back_unheld(&mut self, now: Instant, broker: &mut Broker) {
        let held: Vec<(String, SharedName, Revision)> = self
            .locks
            .iter()
            .map(|(r, (n, f))| (r.clone(), n.clone(), *f))
            .collect();
        for (resource, name, fence) in held {
            let acquiring = self
                .waiting
                .values()
                .any(|w| matches!(&w.purpose, Purpose::Lock { resource: r } if *r == resource));
            if !self.host.holds_name(&name, fence) {
                self.locks.remove(&resource);
                for token in broker.dav().tokens_on(&resource) {
                    broker.forget_dav_lock(token);
                }
            } else if !acquiring && !broker.dav().locked_on(now, &resource) {
                self.locks.remove(&resource);
                self.host.release(now, &name, fence);
            }
        }
        for budget in Budget::ALL {
            let live = broker_ids(broker, budget);
            let held = self.held_mut(budget);
            let gone: Vec<LeaseId> = held
                .keys()
                .filter(|id| !live.contains(id))
                .copied()
                .collect();
            for id in gone {
                if let Some(bytes) = self.held_mut(budget).remove(&id) {
                    self.host.give_back(now, budget, bytes);
                }
            }
        }
    }

    /// What this host's share of `budget` counts: the broker's ids, with their bytes.
    fn held_mut(&mut self, budget: Budget) -> &mut BTreeMap<LeaseId, u64> {
        match budget {
            Budget::Uploads => &mut self.uploads,
            Budget::Partials => &mut self.partials,
        }
    }

    /// Hands a request the cluster reserved `bytes` of `budget` for to the broker, and
    /// counts what the broker made in this host's share; refused by the broker (or made
    /// meanwhile by another request for the same upload, or nobody left to grant), the
    /// share goes back.
    fn hand_over(
        &mut self,
        now: Instant,
        broker: &mut Broker,
        w: Waiting,
        connected: &impl Fn(Owner) -> bool,
        budget: Budget,
        bytes: u64,
    ) {
        let before = broker_ids(broker, budget);
        if connected(w.owner) {
            broker.handle_request(now, w.owner, w.id, w.request);
        }
        let made = broker_ids(broker, budget)
            .into_iter()
            .find(|id| !before.contains(id));
        match made {
            Some(id) => {
                self.held_mut(budget).insert(id, bytes);
            }
            None => self.host.give_back(now, budget, bytes),
        }
    }

    pub(super) fn check_invariants(&self) -> Result<(), String> {
        self.host.check_invariants()?;
        for (budget, held, what) in [
            (Budget::Uploads, &self.uploads, "upload reservations"),
            (Budget::Partials, &self.partials, "partial uploads"),
        ] {
            let (count, bytes) = self.host.budget_share(budget);
            let (ours, our_bytes) = (held.len() as u64, held.values().sum::<u64>());
            if count < ours || bytes < our_bytes {
                return Err(format!(
                    "cluster: the broker holds {ours} {what} ({our_bytes} bytes) but this host's share counts {count} ({bytes} bytes)"
                ));
            }
        }
        Ok(())
    }
}

/// The broker's grants that `budget` counts: upload reservations or partial uploads.
fn broker_ids(broker: &Broker, budget: Budget) -> Vec<LeaseId> {
    match budget {
        Budget::Uploads => broker.reservations().map(|(id, _)| *id).collect(),
        Budget::Partials => broker.partials().map(|(id, _)| *id).collect(),
    }
}
