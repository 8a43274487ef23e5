//! The parent-owned state broker: target leases, upload reservations, partial-upload
//! reservations, the DAV lock table and the access-log queue.
//!
//! Every grant carries an unguessable [`LeaseId`] bound to the worker and generation
//! that asked for it. Release is idempotent. [`Broker::revoke_worker`] drops everything a
//! worker held the moment its channel closes or it is reaped, and every grant also has a
//! monotonic expiry as the backstop for a missed notification. Tables, budgets and the
//! log queue are bounded; a full one answers [`Rejection::Saturated`], deterministically.

mod challenge;
mod client;
mod dav;
mod log_queue;
mod proxy_grants;

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use challenge::ChallengeTable;
pub use client::{BrokerClient, ClientError, Completion};
pub use dav::DavTable;
pub use log_queue::LogQueue;
pub use proxy_grants::ProxyGrants;

use crate::config::BrokerLimits;
use crate::ids::{Generation, LeaseId, WorkerId};
use crate::proto::{self, BrokerReply, BrokerRequest, Rejection, TargetKey};
use crate::rng::CoreRng;
use crate::time::Instant;

/// What a restore of journalled locks kept and what it dropped, for the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DavRestore {
    pub restored: usize,
    /// Dropped: the table was full (`max_dav_locks`).
    pub over_table_limit: usize,
    /// Kept, their time left cut to `max_dav_lock_timeout`.
    pub timeout_capped: usize,
    /// Dropped: a token already in the table.
    pub skipped: usize,
}

/// Who holds a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    pub worker: WorkerId,
    pub generation: Generation,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub key: TargetKey,
    pub owner: Owner,
    pub granted_at: Instant,
    pub expires_at: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub owner: Owner,
    pub bytes: u64,
    pub expires_at: Instant,
}

/// An outstanding resumable upload. It outlives the worker that started it (the client
/// resumes through any worker), so revocation orphans it instead of dropping it; its
/// TTL bounds how long an abandoned one counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    pub key: TargetKey,
    pub owner: Option<Owner>,
    pub bytes: u64,
    pub expires_at: Instant,
}

/// What a revocation took back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Revoked {
    pub leases: usize,
    pub reservations: usize,
    pub partials_orphaned: usize,
    pub proxy_grants: u32,
    pub cgi_grants: u32,
}

/// Counters for status and coverage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrokerStats {
    pub granted: u64,
    pub busy: u64,
    pub saturated: u64,
    pub expired: u64,
    pub revoked: u64,
    /// Every rejection, by [`Rejection::ALL`] index.
    pub rejected: [u64; Rejection::ALL.len()],
    /// Upload reservations granted (one per upload admitted).
    pub uploads_reserved: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Lease,
    Reservation,
    Partial,
    Dav,
}

#[derive(Debug, Clone)]
pub struct Broker {
    limits: BrokerLimits,
    rng: CoreRng,
    leases: BTreeMap<LeaseId, Lease>,
    lease_by_key: BTreeMap<TargetKey, LeaseId>,
    reservations: BTreeMap<LeaseId, Reservation>,
    reserved_bytes: u64,
    partials: BTreeMap<LeaseId, Partial>,
    partial_by_key: BTreeMap<TargetKey, LeaseId>,
    dav: DavTable,
    challenges: ChallengeTable,
    log: LogQueue,
    proxy: ProxyGrants,
    /// `--cgi-max-concurrent`: the same table for another budget.
    cgi: ProxyGrants,
    expiries: BTreeSet<(Instant, Kind, LeaseId)>,
    by_owner: BTreeMap<WorkerId, BTreeSet<LeaseId>>,
    replies: VecDeque<(WorkerId, u64, BrokerReply)>,
    stats: BrokerStats,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl Broker {
    pub fn new(limits: BrokerLimits, rng: CoreRng) -> Self {
        let log = LogQueue::new(limits.log_queue_capacity(), limits.log_policy());
        Broker {
            limits,
            rng,
            leases: BTreeMap::new(),
            lease_by_key: BTreeMap::new(),
            reservations: BTreeMap::new(),
            reserved_bytes: 0,
            partials: BTreeMap::new(),
            partial_by_key: BTreeMap::new(),
            dav: DavTable::default(),
            challenges: ChallengeTable::default(),
            log,
            proxy: ProxyGrants::default(),
            cgi: ProxyGrants::default(),
            expiries: BTreeSet::new(),
            by_owner: BTreeMap::new(),
            replies: VecDeque::new(),
            stats: BrokerStats::default(),
        }
    }

    /// Limits apply to new requests; grants already made keep their terms.
    pub fn set_limits(&mut self, limits: BrokerLimits) {
        self.log
            .set_capacity(limits.log_queue_capacity(), limits.log_policy());
        self.limits = limits;
    }

    pub fn limits(&self) -> &BrokerLimits {
        &self.limits
    }

    pub fn stats(&self) -> BrokerStats {
        self.stats
    }

    pub fn leases(&self) -> impl Iterator<Item = (&LeaseId, &Lease)> {
        self.leases.iter()
    }

    pub fn lease_holder(&self, key: &TargetKey) -> Option<Owner> {
        self.lease_by_key
            .get(key)
            .and_then(|id| self.leases.get(id))
            .map(|l| l.owner)
    }

    pub fn reservations(&self) -> impl Iterator<Item = (&LeaseId, &Reservation)> {
        self.reservations.iter()
    }

    pub fn partials(&self) -> impl Iterator<Item = (&LeaseId, &Partial)> {
        self.partials.iter()
    }

    pub fn reservation_count(&self) -> usize {
        self.reservations.len()
    }

    pub fn reserved_bytes(&self) -> u64 {
        self.reserved_bytes
    }

    pub fn partial_count(&self) -> usize {
        self.partials.len()
    }

    pub fn dav(&self) -> &DavTable {
        &self.dav
    }

    /// Whether the lock table changed since the last call (see [`DavTable::take_changed`]).
    pub fn take_dav_changed(&mut self) -> bool {
        self.dav.take_changed()
    }

    /// Takes a refresh back: the lock `token` expires at `at` again, the journal on disk's
    /// expiry, as the parent decides when that refresh's journal could not be written
    /// ([`crate::parent::Parent::dav_journal_written`]).
    pub fn revert_dav_expiry(&mut self, token: LeaseId, at: Instant) {
        if let Some(old) = self.dav.set_expiry(token, at) {
            self.expiries.remove(&(old, Kind::Dav, token));
            self.expiries.insert((at, Kind::Dav, token));
        }
    }

    /// Drops a lock its journal could not hold (its grant is refused instead, by the
    /// parent: [`crate::parent::Parent::dav_journal_written`]).
    pub fn forget_dav_lock(&mut self, token: LeaseId) {
        if let Some(expires_at) = self.dav.forget(token) {
            self.expiries.remove(&(expires_at, Kind::Dav, token));
        }
    }

    /// Puts journalled locks back at startup, with their expiries armed, under the limits a
    /// LOCK has: no lock longer than `max_dav_lock_timeout` (a longer one is cut to it),
    /// no more than `max_dav_locks` in the table (those with the most time left are kept:
    /// the likeliest still in use; ties by token). A journal is a file anyone who could
    /// write the state directory could have edited, so it gets no more than a client does.
    pub fn restore_dav_locks(
        &mut self,
        now: Instant,
        mut locks: Vec<proto::DavLockInfo>,
    ) -> DavRestore {
        let mut report = DavRestore::default();
        let cap = ms(self.limits.max_dav_lock_timeout());
        locks.retain(|l| l.expires_in_ms > 0);
        for l in &mut locks {
            if l.expires_in_ms > cap {
                l.expires_in_ms = cap;
                report.timeout_capped += 1;
            }
        }
        locks.sort_by(|a, b| {
            b.expires_in_ms
                .cmp(&a.expires_in_ms)
                .then(a.token.cmp(&b.token))
        });
        let room = (self.limits.max_dav_locks() as usize).saturating_sub(self.dav.live(now));
        report.over_table_limit = locks.len().saturating_sub(room);
        locks.truncate(room);
        let offered = locks.len();
        let restored = self.dav.restore(now, locks);
        for (token, expires_at) in &restored {
            self.expiries.insert((*expires_at, Kind::Dav, *token));
        }
        self.dav.take_changed();
        report.restored = restored.len();
        report.skipped = offered - restored.len();
        report
    }

    /// The ACME challenges workers answer (published by the parent's certificate manager).
    pub fn challenges(&self) -> &ChallengeTable {
        &self.challenges
    }

    pub fn challenges_mut(&mut self) -> &mut ChallengeTable {
        &mut self.challenges
    }

    /// The reverse proxy's admission grants.
    pub fn proxy_grants(&self) -> &ProxyGrants {
        &self.proxy
    }

    /// The grants of `--cgi-max-concurrent` held by workers.
    pub fn cgi_grants(&self) -> &ProxyGrants {
        &self.cgi
    }

    pub fn log(&self) -> &LogQueue {
        &self.log
    }

    /// A worker's final access-log counts: what it produced and never sent is counted
    /// lost with it ([`LogQueue::worker_ended`]).
    pub fn worker_log_ended(&mut self, worker: WorkerId, produced: u64, dropped: u64) -> u64 {
        self.log.worker_ended(worker, produced, dropped)
    }

    /// Workers that hold at least one lease, reservation or proxy grant (a worker may be
    /// named twice).
    pub fn holders(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.by_owner
            .iter()
            .filter(|(_, ids)| !ids.is_empty())
            .map(|(w, _)| *w)
            .chain(self.proxy.holders())
            .chain(self.cgi.holders())
    }

    pub fn poll_reply(&mut self) -> Option<(WorkerId, u64, BrokerReply)> {
        self.replies.pop_front()
    }

    fn fresh_id(&mut self) -> LeaseId {
        loop {
            let id = LeaseId(self.rng.next_u128());
            // A collision in 128 bits is not going to happen, but a duplicate grant
            // would be a correctness bug, so it costs one lookup to rule it out.
            if !self.leases.contains_key(&id)
                && !self.reservations.contains_key(&id)
                && !self.partials.contains_key(&id)
                && !self.dav.contains(id)
            {
                return id;
            }
        }
    }

    fn reply(&mut self, owner: Owner, id: u64, reply: BrokerReply) {
        match &reply {
            BrokerReply::Granted { .. } => self.stats.granted += 1,
            BrokerReply::Rejected(Rejection::Busy) => self.stats.busy += 1,
            BrokerReply::Rejected(Rejection::Saturated) => self.stats.saturated += 1,
            _ => {}
        }
        if let BrokerReply::Rejected(rejection) = &reply
            && let Some(i) = Rejection::ALL.iter().position(|r| r == rejection)
        {
            self.stats.rejected[i] += 1;
        }
        self.replies.push_back((owner.worker, id, reply));
    }

    /// Answers request `id` of `owner` with `reply`, decided outside the broker's own
    /// tables (the cluster's refusals, decision 0130).
    pub fn answer(&mut self, owner: Owner, id: u64, reply: BrokerReply) {
        self.reply(owner, id, reply);
    }

    fn owned(&mut self, owner: Owner, id: LeaseId) {
        self.by_owner.entry(owner.worker).or_default().insert(id);
    }

    fn disown(&mut self, worker: WorkerId, id: LeaseId) {
        if let Some(set) = self.by_owner.get_mut(&worker) {
            set.remove(&id);
            if set.is_empty() {
                self.by_owner.remove(&worker);
            }
        }
    }

    /// Handle one request from `owner`. The answer is queued for [`Broker::poll_reply`]
    /// (a blocked log append is answered later, when the queue has room).
    pub fn handle_request(&mut self, now: Instant, owner: Owner, id: u64, request: BrokerRequest) {
        let reply = match request {
            BrokerRequest::ReserveUpload { bytes } => {
                let reply = self.reserve_upload(now, owner, bytes);
                if matches!(reply, BrokerReply::Granted { .. }) {
                    self.stats.uploads_reserved += 1;
                }
                reply
            }
            BrokerRequest::GrowReservation { id, bytes } => {
                self.grow_reservation(now, owner, id, bytes)
            }
            BrokerRequest::ReleaseReservation { id } => self.release_reservation(owner, id),
            BrokerRequest::AcquireLease { key } => self.acquire_lease(now, owner, key),
            BrokerRequest::DavWriteLease { key, check } => {
                if self
                    .dav
                    .write_allowed(now, &check.resource, check.reach, &check.submitted)
                {
                    self.acquire_lease(now, owner, key)
                } else {
                    BrokerReply::Rejected(Rejection::Locked)
                }
            }
            BrokerRequest::RenewLease { id } => self.renew(now, owner, id),
            BrokerRequest::ReleaseLease { id } => self.release_lease(owner, id),
            BrokerRequest::ReservePartial { key, bytes } => {
                self.reserve_partial(now, owner, key, bytes, false)
            }
            BrokerRequest::AdoptPartial { key } => self.reserve_partial(now, owner, key, 0, true),
            BrokerRequest::ReleasePartial { id } => self.release_partial(id),
            BrokerRequest::DavLock {
                resource,
                depth,
                owner: who,
                exclusive,
                timeout_ms,
            } => {
                let timeout =
                    Duration::from_millis(timeout_ms).min(self.limits.max_dav_lock_timeout());
                let timeout = if timeout.is_zero() {
                    self.limits.max_dav_lock_timeout()
                } else {
                    timeout
                };
                if proto::check_lock_reportable(&resource, &who).is_err() {
                    // A lock no query answer could report: refused, not held unseen.
                    BrokerReply::Rejected(Rejection::TooLarge)
                } else if self.dav.live(now) >= self.limits.max_dav_locks() as usize {
                    // Counted live: a lock whose time is up but whose expiry has not been
                    // handled yet (input is read before deadlines) takes no room.
                    BrokerReply::Rejected(Rejection::Saturated)
                } else {
                    let token = self.fresh_id();
                    match self.dav.lock(
                        now,
                        token,
                        resource,
                        depth,
                        who,
                        exclusive,
                        timeout,
                        owner.generation,
                    ) {
                        Ok(expires_at) => {
                            self.expiries.insert((expires_at, Kind::Dav, token));
                            BrokerReply::Granted {
                                id: token,
                                expires_in_ms: ms(timeout),
                            }
                        }
                        Err(rej) => BrokerReply::Rejected(rej),
                    }
                }
            }
            BrokerRequest::DavRefresh { token, timeout_ms } => {
                let timeout =
                    Duration::from_millis(timeout_ms).min(self.limits.max_dav_lock_timeout());
                let timeout = if timeout.is_zero() {
                    self.limits.max_dav_lock_timeout()
                } else {
                    timeout
                };
                match self.dav.refresh(now, token, timeout) {
                    Some((old, new)) => {
                        self.expiries.remove(&(old, Kind::Dav, token));
                        self.expiries.insert((new, Kind::Dav, token));
                        BrokerReply::Granted {
                            id: token,
                            expires_in_ms: ms(timeout),
                        }
                    }
                    None => BrokerReply::Rejected(Rejection::NotFound),
                }
            }
            BrokerRequest::DavUnlock { token } => match self.dav.unlock(token) {
                // A lock whose time is up is gone already (RFC 4918 §6.6), even when its
                // expiry has not been handled yet: it goes, and the answer says so.
                Some(expires_at) => {
                    self.expiries.remove(&(expires_at, Kind::Dav, token));
                    if expires_at > now {
                        BrokerReply::Released
                    } else {
                        BrokerReply::Rejected(Rejection::NotFound)
                    }
                }
                None => BrokerReply::Rejected(Rejection::NotFound),
            },
            BrokerRequest::DavQuery { resource } => {
                // A list longer than the frames one message may take cannot be sent: the
                // worker hears a refusal (and fails closed), not nothing.
                let locks = BrokerReply::Locks(self.dav.query(now, &resource));
                match proto::check_reply(&locks) {
                    Ok(()) => locks,
                    Err(_) => BrokerReply::Rejected(Rejection::TooLarge),
                }
            }
            BrokerRequest::AcmeChallenge { token } => {
                BrokerReply::KeyAuthorization(self.challenges.answer(&token).map(str::to_owned))
            }
            BrokerRequest::AcquireProxyGrants { want } => {
                match self
                    .proxy
                    .acquire(self.limits.max_proxy_inflight(), owner.worker, want)
                {
                    0 => BrokerReply::Rejected(Rejection::Saturated),
                    granted => BrokerReply::ProxyGrants { granted },
                }
            }
            BrokerRequest::ReturnProxyGrants { count } => {
                self.proxy.give_back(owner.worker, count);
                BrokerReply::Released
            }
            BrokerRequest::AcquireCgiGrants { want } => {
                match self
                    .cgi
                    .acquire(self.limits.max_cgi_concurrent(), owner.worker, want)
                {
                    0 => BrokerReply::Rejected(Rejection::Saturated),
                    granted => BrokerReply::CgiGrants { granted },
                }
            }
            BrokerRequest::ReturnCgiGrants { count } => {
                self.cgi.give_back(owner.worker, count);
                BrokerReply::Released
            }
            // The parent's upstream health took the report before it reached the broker
            // (`crate::parent`); the broker only answers it.
            BrokerRequest::UpstreamOutcome { .. } => BrokerReply::Released,
            BrokerRequest::LogDroppedLocally { lines } => {
                self.log.count_dropped(owner.worker, lines);
                BrokerReply::Logged
            }
            BrokerRequest::AppendLog { record } => {
                match self.log.append(owner.worker, id, record) {
                    Some(reply) => reply,
                    None => return,
                }
            }
        };
        self.reply(owner, id, reply);
    }

    fn reserve_upload(&mut self, now: Instant, owner: Owner, bytes: u64) -> BrokerReply {
        if bytes > self.limits.max_upload_bytes() {
            return BrokerReply::Rejected(Rejection::TooLarge);
        }
        if self.reservations.len() >= self.limits.max_active_uploads() as usize
            || self.reserved_bytes.saturating_add(bytes) > self.limits.max_upload_bytes()
        {
            return BrokerReply::Rejected(Rejection::Saturated);
        }
        let id = self.fresh_id();
        let expires_at = now + self.limits.lease_ttl();
        self.reservations.insert(
            id,
            Reservation {
                owner,
                bytes,
                expires_at,
            },
        );
        self.reserved_bytes += bytes;
        self.expiries.insert((expires_at, Kind::Reservation, id));
        self.owned(owner, id);
        BrokerReply::Granted {
            id,
            expires_in_ms: ms(self.limits.lease_ttl()),
        }
    }

    /// Grows reservation `id` to `bytes` in all when the byte budget has room, and renews
    /// it; a reservation that cannot grow keeps what it had (its upload then ends, and
    /// releases it). Asking for no more than is held only renews.
    fn grow_reservation(
        &mut self,
        now: Instant,
        owner: Owner,
        id: LeaseId,
        bytes: u64,
    ) -> BrokerReply {
        let held = match self.reservations.get(&id) {
            None => return BrokerReply::Rejected(Rejection::NotFound),
            Some(r) if r.owner != owner => return BrokerReply::Rejected(Rejection::NotOwner),
            Some(r) => r.bytes,
        };
        if bytes > held {
            if bytes > self.limits.max_upload_bytes() {
                return BrokerReply::Rejected(Rejection::TooLarge);
            }
            let more = bytes - held;
            if self.reserved_bytes.saturating_add(more) > self.limits.max_upload_bytes() {
                return BrokerReply::Rejected(Rejection::Saturated);
            }
            if let Some(r) = self.reservations.get_mut(&id) {
                r.bytes = bytes;
                self.reserved_bytes += more;
            }
        }
        self.renew(now, owner, id)
    }

    fn release_reservation(&mut self, owner: Owner, id: LeaseId) -> BrokerReply {
        match self.reservations.get(&id) {
            None => BrokerReply::Released,
            Some(r) if r.owner != owner => BrokerReply::Rejected(Rejection::NotOwner),
            Some(_) => {
                self.drop_reservation(id);
                BrokerReply::Released
            }
        }
    }

    fn drop_reservation(&mut self, id: LeaseId) {
        if let Some(r) = self.reservations.remove(&id) {
            self.reserved_bytes -= r.bytes;
            self.expiries.remove(&(r.expires_at, Kind::Reservation, id));
            self.disown(r.owner.worker, id);
        }
    }

    fn acquire_lease(&mut self, now: Instant, owner: Owner, key: TargetKey) -> BrokerReply {
        if self.lease_by_key.contains_key(&key) {
            return BrokerReply::Rejected(Rejection::Busy);
        }
        if self.leases.len() >= self.limits.max_leases() as usize {
            return BrokerReply::Rejected(Rejection::Saturated);
        }
        let id = self.fresh_id();
        let expires_at = now + self.limits.lease_ttl();
        self.lease_by_key.insert(key.clone(), id);
        self.leases.insert(
            id,
            Lease {
                key,
                owner,
                granted_at: now,
                expires_at,
            },
        );
        self.expiries.insert((expires_at, Kind::Lease, id));
        self.owned(owner, id);
        BrokerReply::Granted {
            id,
            expires_in_ms: ms(self.limits.lease_ttl()),
        }
    }

    fn renew(&mut self, now: Instant, owner: Owner, id: LeaseId) -> BrokerReply {
        let ttl = self.limits.lease_ttl();
        let expires_at = now + ttl;
        let (kind, old) = if let Some(l) = self.leases.get_mut(&id) {
            if l.owner != owner {
                return BrokerReply::Rejected(Rejection::NotOwner);
            }
            (
                Kind::Lease,
                core::mem::replace(&mut l.expires_at, expires_at),
            )
        } else if let Some(r) = self.reservations.get_mut(&id) {
            if r.owner != owner {
                return BrokerReply::Rejected(Rejection::NotOwner);
            }
            (
                Kind::Reservation,
                core::mem::replace(&mut r.expires_at, expires_at),
            )
        } else {
            return BrokerReply::Rejected(Rejection::NotFound);
        };
        self.expiries.remove(&(old, kind, id));
        self.expiries.insert((expires_at, kind, id));
        BrokerReply::Granted {
            id,
            expires_in_ms: ms(ttl),
        }
    }

    fn release_lease(&mut self, owner: Owner, id: LeaseId) -> BrokerReply {
        match self.leases.get(&id) {
            None => BrokerReply::Released,
            Some(l) if l.owner != owner => BrokerReply::Rejected(Rejection::NotOwner),
            Some(_) => {
                self.drop_lease(id);
                BrokerReply::Released
            }
        }
    }

    fn drop_lease(&mut self, id: LeaseId) {
        if let Some(l) = self.leases.remove(&id) {
            self.lease_by_key.remove(&l.key);
            self.expiries.remove(&(l.expires_at, Kind::Lease, id));
            self.disown(l.owner.worker, id);
        }
    }

    fn reserve_partial(
        &mut self,
        now: Instant,
        owner: Owner,
        key: TargetKey,
        bytes: u64,
        adopt: bool,
    ) -> BrokerReply {
        let ttl = self.limits.partial_ttl();
        if let Some(&id) = self.partial_by_key.get(&key) {
            let Some(p) = self.partials.get_mut(&id) else {
                return BrokerReply::Rejected(Rejection::NotFound);
            };
            if p.owner.is_some_and(|o| o.worker != owner.worker) {
                return BrokerReply::Rejected(Rejection::Busy);
            }
            let old = core::mem::replace(&mut p.expires_at, now + ttl);
            let new = p.expires_at;
            if !adopt {
                p.bytes = p.bytes.max(bytes);
            }
            let newly_owned = p.owner.is_none();
            p.owner = Some(owner);
            self.expiries.remove(&(old, Kind::Partial, id));
            self.expiries.insert((new, Kind::Partial, id));
            if newly_owned {
                self.owned(owner, id);
            }
            return BrokerReply::Granted {
                id,
                expires_in_ms: ms(ttl),
            };
        }
        if adopt {
            return BrokerReply::Rejected(Rejection::NotFound);
        }
        if self.partials.len() >= self.limits.max_partial_uploads() as usize {
            return BrokerReply::Rejected(Rejection::Saturated);
        }
        if bytes > self.limits.max_upload_bytes() {
            return BrokerReply::Rejected(Rejection::TooLarge);
        }
        let id = self.fresh_id();
        let expires_at = now + ttl;
        self.partial_by_key.insert(key.clone(), id);
        self.partials.insert(
            id,
            Partial {
                key,
                owner: Some(owner),
                bytes,
                expires_at,
            },
        );
        self.expiries.insert((expires_at, Kind::Partial, id));
        self.owned(owner, id);
        BrokerReply::Granted {
            id,
            expires_in_ms: ms(ttl),
        }
    }

    fn release_partial(&mut self, id: LeaseId) -> BrokerReply {
        // Any worker may finish a partial upload: the client resumes wherever it lands.
        self.drop_partial(id);
        BrokerReply::Released
    }

    fn drop_partial(&mut self, id: LeaseId) {
        if let Some(p) = self.partials.remove(&id) {
            self.partial_by_key.remove(&p.key);
            self.expiries.remove(&(p.expires_at, Kind::Partial, id));
            if let Some(o) = p.owner {
                self.disown(o.worker, id);
            }
        }
    }

    /// Everything `worker` held is taken back: leases and reservations dropped, partial
    /// uploads orphaned for another worker to resume, blocked log appends discarded.
    pub fn revoke_worker(&mut self, worker: WorkerId) -> Revoked {
        let mut revoked = Revoked::default();
        let ids = self.by_owner.remove(&worker).unwrap_or_default();
        for id in ids {
            if self.leases.contains_key(&id) {
                self.drop_lease(id);
                revoked.leases += 1;
            } else if self.reservations.contains_key(&id) {
                self.drop_reservation(id);
                revoked.reservations += 1;
            } else if let Some(p) = self.partials.get_mut(&id) {
                p.owner = None;
                revoked.partials_orphaned += 1;
            }
        }
        revoked.proxy_grants = self.proxy.revoke(worker);
        revoked.cgi_grants = self.cgi.revoke(worker);
        self.log.forget_worker(worker);
        self.replies.retain(|(w, _, _)| *w != worker);
        self.stats.revoked += (revoked.leases + revoked.reservations) as u64;
        revoked
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.expiries.first().map(|(t, _, _)| *t)
    }

    /// Expire everything whose monotonic deadline has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, kind, id)) = self.expiries.first() {
            if t > now {
                break;
            }
            self.expiries.pop_first();
            self.stats.expired += 1;
            match kind {
                Kind::Lease => self.drop_lease(id),
                Kind::Reservation => self.drop_reservation(id),
                Kind::Partial => self.drop_partial(id),
                Kind::Dav => {
                    self.dav.unlock(id);
                }
            }
        }
    }

    /// Take up to `max` access-log records for the sole writer. Room made here admits
    /// blocked appends, whose answers then appear in [`Broker::poll_reply`].
    pub fn take_log_batch(&mut self, max: usize) -> Vec<String> {
        let (batch, admitted) = self.log.take(max);
        for (worker, id) in admitted {
            self.replies.push_back((worker, id, BrokerReply::Logged));
        }
        batch
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        self.proxy.check_invariants()?;
        self.cgi.check_invariants()?;
        // Nothing granted, as between most steps: every rule below holds but the log's
        // (the simulator checks after every step, and walking empty tables cost more
        // than the rest of its per-step checking of the broker).
        if self.leases.is_empty()
            && self.lease_by_key.is_empty()
            && self.reservations.is_empty()
            && self.reserved_bytes == 0
            && self.partials.is_empty()
            && self.by_owner.is_empty()
            && self.expiries.len() == self.dav.len()
        {
            return self.log.check_invariants();
        }
        if self.lease_by_key.len() != self.leases.len() {
            return Err("lease key index out of step".into());
        }
        for (id, l) in &self.leases {
            if self.lease_by_key.get(&l.key) != Some(id) {
                return Err(format!("lease {id:?} not indexed by key"));
            }
            if !self.expiries.contains(&(l.expires_at, Kind::Lease, *id)) {
                return Err(format!("lease {id:?} has no expiry"));
            }
        }
        let bytes: u64 = self.reservations.values().map(|r| r.bytes).sum();
        if bytes != self.reserved_bytes {
            return Err(format!(
                "reserved bytes {} != sum {bytes}",
                self.reserved_bytes
            ));
        }
        let owned: usize = self.by_owner.values().map(BTreeSet::len).sum();
        let expected = self.leases.len()
            + self.reservations.len()
            + self.partials.values().filter(|p| p.owner.is_some()).count();
        if owned != expected {
            return Err(format!("owner index has {owned} grants, tables {expected}"));
        }
        let expiries =
            self.leases.len() + self.reservations.len() + self.partials.len() + self.dav.len();
        if self.expiries.len() != expiries {
            return Err(format!(
                "{} expiries for {expiries} grants",
                self.expiries.len()
            ));
        }
        self.log.check_invariants()
    }
}

#[cfg(test)]
mod tests;
