//! One host's cluster machine: its etcd lease, the grant deadline, operations in flight
//! and their time-outs. Shared names are in `names.rs`, budgets in `budget.rs`.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::BudgetLimits;
use super::budget::{BudgetJob, Budgets};
use super::keys::{Budget, KeyLayout};
use super::store::{Revision, StoreCall, StoreLease, StoreReply, Txn, TxnOp};
use super::timing::ClusterTiming;
use crate::time::Instant;

/// Names one store operation; its reply or time-out comes back with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

/// The caller's name for a request; its one answer comes back with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterRequest(pub u64);

/// What the host's broker is told.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterAnswer {
    /// The name is this host's; its fencing token is `fence`.
    Granted {
        fence: Revision,
    },
    /// Someone holds the name.
    Busy,
    /// The store could not be asked, or not in time: 503 with this `Retry-After`.
    Unavailable {
        retry_after: Duration,
    },
    /// The fence still holds: publish now.
    MayPublish,
    /// The name is someone else's now: do not publish.
    Fenced,
    Reserved,
    Saturated,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterAction {
    Store {
        op: OpId,
        call: StoreCall,
    },
    Answer {
        request: ClusterRequest,
        answer: ClusterAnswer,
    },
}

/// Counters for status and the scenarios.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    pub granted: u64,
    pub busy: u64,
    pub unavailable: u64,
    pub fenced: u64,
    pub published: u64,
    pub reserved: u64,
    pub saturated: u64,
    pub leases_lost: u64,
    pub ops_timed_out: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeaseState {
    Idle,
    Granting,
    Live(StoreLease),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Purpose {
    LeaseGrant,
    KeepAlive,
    Membership,
    Acquire {
        request: ClusterRequest,
        key: String,
        value: String,
    },
    Fence {
        request: ClusterRequest,
        key: String,
        fence: Revision,
    },
    Release {
        key: String,
    },
    Cleanup {
        key: String,
    },
    Budget {
        budget: Budget,
        job: BudgetJob,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub(super) sent_at: Instant,
    pub(super) deadline: Instant,
    pub(super) purpose: Purpose,
}

#[derive(Debug, Clone)]
pub struct ClusterHost {
    pub(super) layout: KeyLayout,
    pub(super) timing: ClusterTiming,
    pub(super) lease: LeaseState,
    /// The grant deadline: the host grants and publishes only before it.
    pub(super) valid_until: Option<Instant>,
    pub(super) next_tick: Option<Instant>,
    pub(super) pending: BTreeMap<OpId, Pending>,
    pub(super) next_op: u64,
    pub(super) next_grant: u64,
    /// This host's grants: key → fencing token.
    pub(super) held: BTreeMap<String, Revision>,
    pub(super) acquiring: BTreeSet<String>,
    /// Releases etcd has not acknowledged: key → token, sent again each tick.
    pub(super) releasing: BTreeMap<String, Revision>,
    /// Keys a lost acquire may have created: key → the value it would hold.
    pub(super) cleanups: BTreeMap<String, String>,
    pub(super) budgets: Budgets,
    pub(super) actions: VecDeque<ClusterAction>,
    pub(super) stats: HostStats,
}

impl ClusterHost {
    /// A host that has not started: [`ClusterHost::start`] grants its lease.
    pub fn new(layout: KeyLayout, timing: ClusterTiming, limits: [BudgetLimits; 2]) -> Self {
        ClusterHost {
            layout,
            timing,
            lease: LeaseState::Idle,
            valid_until: None,
            next_tick: None,
            pending: BTreeMap::new(),
            next_op: 0,
            next_grant: 0,
            held: BTreeMap::new(),
            acquiring: BTreeSet::new(),
            releasing: BTreeMap::new(),
            cleanups: BTreeMap::new(),
            budgets: Budgets::new(limits),
            actions: VecDeque::new(),
            stats: HostStats::default(),
        }
    }

    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    pub fn timing(&self) -> &ClusterTiming {
        &self.timing
    }

    pub fn stats(&self) -> HostStats {
        self.stats
    }

    /// The grant deadline, while the host has one.
    pub fn grant_deadline(&self) -> Option<Instant> {
        self.valid_until
    }

    /// Whether the host may grant and publish at `now`.
    pub fn may_grant(&self, now: Instant) -> bool {
        matches!(self.lease, LeaseState::Live(_)) && self.valid_until.is_some_and(|v| now < v)
    }

    /// The grants this host believes it holds: key → fencing token.
    pub fn held(&self) -> impl Iterator<Item = (&String, &Revision)> {
        self.held.iter()
    }

    pub fn start(&mut self, now: Instant) {
        self.next_tick = Some(now + self.timing.keepalive_every);
        self.grant_lease(now);
    }

    pub fn poll_action(&mut self) -> Option<ClusterAction> {
        self.actions.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let op = self.pending.values().map(|p| p.deadline).min();
        let queued = self.budgets.next_answer_by();
        crate::time::earliest(crate::time::earliest(self.next_tick, op), queued)
    }

    /// Ends operation `op` no later than `until`.
    pub(super) fn cut_deadline(&mut self, op: OpId, until: Instant) {
        if let Some(p) = self.pending.get_mut(&op) {
            p.deadline = p.deadline.min(until);
        }
    }

    pub(super) fn answer(&mut self, request: ClusterRequest, answer: ClusterAnswer) {
        match answer {
            ClusterAnswer::Granted { .. } => self.stats.granted += 1,
            ClusterAnswer::Busy => self.stats.busy += 1,
            ClusterAnswer::Unavailable { .. } => self.stats.unavailable += 1,
            ClusterAnswer::Fenced => self.stats.fenced += 1,
            ClusterAnswer::MayPublish => self.stats.published += 1,
            ClusterAnswer::Reserved => self.stats.reserved += 1,
            ClusterAnswer::Saturated => self.stats.saturated += 1,
        }
        self.actions
            .push_back(ClusterAction::Answer { request, answer });
    }

    pub(super) fn unavailable(&self) -> ClusterAnswer {
        ClusterAnswer::Unavailable {
            retry_after: self.timing.retry_after,
        }
    }

    pub(super) fn send(&mut self, now: Instant, call: StoreCall, purpose: Purpose) -> OpId {
        let op = OpId(self.next_op);
        self.next_op += 1;
        self.pending.insert(
            op,
            Pending {
                sent_at: now,
                deadline: now + self.timing.op_timeout,
                purpose,
            },
        );
        self.actions.push_back(ClusterAction::Store { op, call });
        op
    }

    pub(super) fn live_lease(&self) -> Option<StoreLease> {
        match self.lease {
            LeaseState::Live(l) => Some(l),
            _ => None,
        }
    }

    pub(super) fn in_flight(&self, f: impl Fn(&Purpose) -> bool) -> bool {
        self.pending.values().any(|p| f(&p.purpose))
    }

    fn grant_lease(&mut self, now: Instant) {
        self.lease = LeaseState::Granting;
        let ttl_secs = self.timing.lease_ttl.as_secs() as i64;
        self.send(now, StoreCall::LeaseGrant { ttl_secs }, Purpose::LeaseGrant);
    }

    /// The store said the lease is gone: every key this host wrote went with it.
    fn lease_lost(&mut self, now: Instant) {
        self.stats.leases_lost += 1;
        self.valid_until = None;
        self.held.clear();
        self.releasing.clear();
        self.cleanups.clear();
        self.budgets.lease_lost();
        self.grant_lease(now);
    }

    /// Moves the grant deadline for an acknowledgement of something sent at `sent_at`.
    fn acknowledged(&mut self, sent_at: Instant) {
        let until = sent_at + self.timing.grant_deadline;
        self.valid_until = Some(self.valid_until.map_or(until, |v| v.max(until)));
    }

    pub fn handle_reply(&mut self, now: Instant, op: OpId, reply: StoreReply) {
        // A reply after its time-out was already handled as lost.
        let Some(p) = self.pending.remove(&op) else {
            return;
        };
        match p.purpose {
            Purpose::LeaseGrant => match reply {
                StoreReply::LeaseGranted { lease } => {
                    self.lease = LeaseState::Live(lease);
                    self.valid_until = None;
                    self.acknowledged(p.sent_at);
                    let call = StoreCall::Txn(Txn {
                        compare: vec![],
                        success: vec![TxnOp::Put {
                            key: self.layout.host_key(),
                            value: self.layout.host().to_owned(),
                            lease,
                        }],
                        failure: vec![],
                    });
                    self.send(now, call, Purpose::Membership);
                    for b in Budget::ALL {
                        self.budgets.queue(b, BudgetJob::Sync);
                    }
                    self.pump_budgets(now);
                }
                _ => self.lease = LeaseState::Idle,
            },
            Purpose::KeepAlive => match reply {
                StoreReply::KeptAlive => self.acknowledged(p.sent_at),
                StoreReply::LeaseNotFound => {
                    if matches!(self.lease, LeaseState::Live(_)) {
                        self.lease_lost(now);
                    }
                }
                _ => {}
            },
            Purpose::Membership => {}
            Purpose::Acquire {
                request,
                key,
                value,
            } => self.acquire_answered(now, request, key, value, reply),
            Purpose::Fence {
                request,
                key,
                fence,
            } => self.fence_answered(now, request, key, fence, reply),
            Purpose::Release { key } => {
                if matches!(reply, StoreReply::Txn { .. }) {
                    self.releasing.remove(&key);
                }
            }
            Purpose::Cleanup { key } => {
                if matches!(reply, StoreReply::Txn { .. }) {
                    self.cleanups.remove(&key);
                }
            }
            Purpose::Budget { budget, job } => {
                self.budget_answered(now, p.sent_at, budget, job, reply)
            }
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        let lost: Vec<OpId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(op, _)| *op)
            .collect();
        for op in lost {
            let Some(p) = self.pending.remove(&op) else {
                continue;
            };
            self.stats.ops_timed_out += 1;
            match p.purpose {
                Purpose::LeaseGrant => self.lease = LeaseState::Idle,
                Purpose::KeepAlive | Purpose::Membership => {}
                Purpose::Acquire {
                    request,
                    key,
                    value,
                } => {
                    // The put may have happened: the key is deleted if it holds our value.
                    self.acquiring.remove(&key);
                    self.cleanups.insert(key.clone(), value);
                    self.send_cleanup(now, key);
                    let a = self.unavailable();
                    self.answer(request, a);
                }
                Purpose::Fence { request, .. } => {
                    let a = self.unavailable();
                    self.answer(request, a);
                }
                // Sent again at the next tick.
                Purpose::Release { .. } | Purpose::Cleanup { .. } => {}
                Purpose::Budget { budget, job } => self.budget_lost(now, budget, job),
            }
        }
        for request in self.budgets.overdue(now) {
            let a = self.unavailable();
            self.answer(request, a);
        }
        if self.next_tick.is_some_and(|t| t <= now) {
            self.next_tick = Some(now + self.timing.keepalive_every);
            self.tick(now);
        }
    }

    /// The keep-alive period: keep the lease alive (or get one), and send again what
    /// etcd has not acknowledged.
    fn tick(&mut self, now: Instant) {
        match self.lease {
            LeaseState::Idle => self.grant_lease(now),
            LeaseState::Granting => {}
            LeaseState::Live(lease) => {
                if !self.in_flight(|p| matches!(p, Purpose::KeepAlive)) {
                    self.send(now, StoreCall::KeepAlive { lease }, Purpose::KeepAlive);
                }
                let releases: Vec<String> = self.releasing.keys().cloned().collect();
                for key in releases {
                    self.send_release(now, key);
                }
                let cleanups: Vec<String> = self.cleanups.keys().cloned().collect();
                for key in cleanups {
                    self.send_cleanup(now, key);
                }
                self.pump_budgets(now);
            }
        }
    }

    pub(super) fn send_release(&mut self, now: Instant, key: String) {
        let Some(&fence) = self.releasing.get(&key) else {
            return;
        };
        if self.in_flight(|p| matches!(p, Purpose::Release { key: k } if *k == key)) {
            return;
        }
        let call = StoreCall::Txn(Txn {
            compare: vec![super::store::Compare {
                key: key.clone(),
                range_end: None,
                target: super::store::CompareTarget::CreateRevisionIs(fence),
            }],
            success: vec![TxnOp::Delete { key: key.clone() }],
            failure: vec![],
        });
        self.send(now, call, Purpose::Release { key });
    }

    fn send_cleanup(&mut self, now: Instant, key: String) {
        let Some(value) = self.cleanups.get(&key).cloned() else {
            return;
        };
        if self.in_flight(|p| matches!(p, Purpose::Cleanup { key: k } if *k == key)) {
            return;
        }
        let call = StoreCall::Txn(Txn {
            compare: vec![super::store::Compare {
                key: key.clone(),
                range_end: None,
                target: super::store::CompareTarget::ValueIs(value),
            }],
            success: vec![TxnOp::Delete { key: key.clone() }],
            failure: vec![],
        });
        self.send(now, call, Purpose::Cleanup { key });
    }

    /// Checks the machine's own bookkeeping (the simulator runs it after every step).
    pub fn check_invariants(&self) -> Result<(), String> {
        for key in self.held.keys() {
            if self.acquiring.contains(key) || self.releasing.contains_key(key) {
                return Err(format!("{key} both held and acquiring or releasing"));
            }
        }
        if self.valid_until.is_some() && !matches!(self.lease, LeaseState::Live(_)) {
            return Err("a grant deadline without a live lease".into());
        }
        self.budgets.check_invariants()
    }
}
