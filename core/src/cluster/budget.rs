//! Service-wide budgets (upload and partial-upload reservations): each host's share is
//! one key under its lease, the service's total is the sum of the shares, and a
//! reservation is a put guarded by "no share changed since my view" (decision 0096).

use std::collections::{BTreeMap, VecDeque};

use super::host::{ClusterAnswer, ClusterHost, ClusterRequest, Purpose};
use super::keys::Budget;
use super::store::{Compare, CompareTarget, KeyValue, Revision, StoreCall, StoreReply, Txn, TxnOp};
use crate::time::Instant;

/// A reservation that lost this many races in a row is answered 503.
const MAX_TRIES: u8 = 4;

/// One service-wide budget: at most `max_count` reservations of `max_bytes` in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    pub max_count: u64,
    pub max_bytes: u64,
}

impl BudgetLimits {
    /// The service-wide budgets of the broker's limits, indexed as [`Budget::ALL`]:
    /// uploads (`max_active_uploads` reservations of `max_upload_bytes` in all) and
    /// partial uploads (`max_partial_uploads`). A partial's size is bounded one by one,
    /// as on one host (the broker refuses one larger than `max_upload_bytes`), not as a
    /// sum: its bytes are counted in the share but never limit it.
    pub fn service_wide(limits: &crate::config::BrokerLimits) -> [BudgetLimits; 2] {
        [
            BudgetLimits {
                max_count: u64::from(limits.max_active_uploads()),
                max_bytes: limits.max_upload_bytes(),
            },
            BudgetLimits {
                max_count: u64::from(limits.max_partial_uploads()),
                max_bytes: u64::MAX,
            },
        ]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BudgetJob {
    Reserve {
        request: ClusterRequest,
        /// When the request must have its answer (asked + the operation time-out).
        answer_by: Instant,
        /// Reservations it adds: 1 for a new one, 0 for the growth of one held.
        count: u64,
        bytes: u64,
        tries: u8,
        /// The view was read fresh for this reservation already.
        refreshed: bool,
        /// The operation in flight is that read (not the guarded put).
        reading: bool,
    },
    /// Write this host's share as it is now.
    Sync,
}

#[derive(Debug, Clone, Default)]
struct Share {
    count: u64,
    bytes: u64,
}

#[derive(Debug, Clone, Default)]
struct BudgetState {
    /// Every other host's share as last read, by key.
    others: BTreeMap<String, Share>,
    /// The store's revision that view is exact at.
    view: Revision,
    /// What this host's workers hold.
    own: Share,
    queue: VecDeque<BudgetJob>,
    busy: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Budgets {
    limits: [BudgetLimits; 2],
    states: [BudgetState; 2],
}

impl Budgets {
    pub(super) fn new(limits: [BudgetLimits; 2]) -> Self {
        Budgets {
            limits,
            states: Default::default(),
        }
    }

    pub(super) fn queue(&mut self, budget: Budget, job: BudgetJob) {
        let s = &mut self.states[budget.index()];
        if job == BudgetJob::Sync && s.queue.contains(&BudgetJob::Sync) {
            return;
        }
        s.queue.push_back(job);
    }

    /// The lease went, and this host's shares with it: they are written again under
    /// the next lease (queued by the host when it has one).
    pub(super) fn lease_lost(&mut self) {}

    /// The earliest time a queued reservation must be answered by.
    pub(super) fn next_answer_by(&self) -> Option<Instant> {
        self.states
            .iter()
            .flat_map(|s| s.queue.iter())
            .filter_map(|j| match j {
                BudgetJob::Reserve { answer_by, .. } => Some(*answer_by),
                BudgetJob::Sync => None,
            })
            .min()
    }

    /// Takes out the queued reservations whose answer is due by `now`.
    pub(super) fn overdue(&mut self, now: Instant) -> Vec<ClusterRequest> {
        let mut due = Vec::new();
        for s in &mut self.states {
            s.queue.retain(|j| match j {
                BudgetJob::Reserve {
                    request, answer_by, ..
                } if *answer_by <= now => {
                    due.push(*request);
                    false
                }
                _ => true,
            });
        }
        due
    }

    pub(super) fn check_invariants(&self) -> Result<(), String> {
        for s in &self.states {
            if s.queue.iter().filter(|j| **j == BudgetJob::Sync).count() > 1 {
                return Err("two share writes queued for one budget".into());
            }
        }
        Ok(())
    }
}

fn parse_share(v: &str) -> Share {
    let mut it = v.split(' ').map(|n| n.parse::<u64>().unwrap_or(0));
    Share {
        count: it.next().unwrap_or(0),
        bytes: it.next().unwrap_or(0),
    }
}

impl ClusterHost {
    /// Reserves one upload (or partial upload) of `bytes` against the service's budget.
    pub fn reserve(&mut self, now: Instant, request: ClusterRequest, budget: Budget, bytes: u64) {
        self.reserve_share(now, request, budget, 1, bytes);
    }

    /// Grows a reservation this host holds by `bytes` (an upload of unknown length that
    /// reached what it holds): the service's bytes must have room, its count does not
    /// change.
    pub fn grow(&mut self, now: Instant, request: ClusterRequest, budget: Budget, bytes: u64) {
        self.reserve_share(now, request, budget, 0, bytes);
    }

    fn reserve_share(
        &mut self,
        now: Instant,
        request: ClusterRequest,
        budget: Budget,
        count: u64,
        bytes: u64,
    ) {
        if !self.may_grant(now) {
            let a = self.unavailable();
            return self.answer(request, a);
        }
        self.budgets.queue(
            budget,
            BudgetJob::Reserve {
                request,
                answer_by: now + self.timing.op_timeout,
                count,
                bytes,
                tries: 0,
                refreshed: false,
                reading: false,
            },
        );
        self.pump_budgets(now);
    }

    /// Gives back one reservation of `bytes`: this host's share shrinks at once, and is
    /// written when the store can be reached.
    pub fn give_back(&mut self, now: Instant, budget: Budget, bytes: u64) {
        self.give_back_share(now, budget, 1, bytes);
    }

    /// Gives back `bytes` of a growth that did not happen (the reservation keeps its
    /// count).
    pub fn give_back_growth(&mut self, now: Instant, budget: Budget, bytes: u64) {
        self.give_back_share(now, budget, 0, bytes);
    }

    fn give_back_share(&mut self, now: Instant, budget: Budget, count: u64, bytes: u64) {
        let own = &mut self.budgets.states[budget.index()].own;
        own.count = own.count.saturating_sub(count);
        own.bytes = own.bytes.saturating_sub(bytes);
        self.budgets.queue(budget, BudgetJob::Sync);
        self.pump_budgets(now);
    }

    /// New limits (a reload): they apply to reservations asked for from now on; what is
    /// held stays held.
    pub fn set_budget_limits(&mut self, limits: [BudgetLimits; 2]) {
        self.budgets.limits = limits;
    }

    /// This host's share of `budget`: (reservations, bytes).
    pub fn budget_share(&self, budget: Budget) -> (u64, u64) {
        let own = &self.budgets.states[budget.index()].own;
        (own.count, own.bytes)
    }

    pub(super) fn pump_budgets(&mut self, now: Instant) {
        for budget in Budget::ALL {
            self.pump_budget(now, budget);
        }
    }

    fn pump_budget(&mut self, now: Instant, budget: Budget) {
        let i = budget.index();
        while !self.budgets.states[i].busy {
            let Some(job) = self.budgets.states[i].queue.pop_front() else {
                return;
            };
            let Some(lease) = self.live_lease() else {
                // Nothing can be written without a lease: reservations are refused,
                // the share written once there is one.
                if let BudgetJob::Reserve { request, .. } = job {
                    let a = self.unavailable();
                    self.answer(request, a);
                    continue;
                }
                self.budgets.states[i].queue.push_front(job);
                return;
            };
            let (start, end) = self.layout.budget_range(budget);
            let share_key = self.layout.budget_share(budget);
            let guard = Compare {
                key: start.clone(),
                range_end: Some(end.clone()),
                target: CompareTarget::ModRevisionAtMost(self.budgets.states[i].view),
            };
            let read = TxnOp::Get {
                key: start,
                range_end: Some(end),
            };
            let s = &self.budgets.states[i];
            let limits = self.budgets.limits[i];
            let (call, job) = match job {
                BudgetJob::Sync => {
                    let put = TxnOp::Put {
                        key: share_key,
                        value: format!("{} {}", s.own.count, s.own.bytes),
                        lease,
                    };
                    let call = Txn {
                        compare: vec![guard],
                        success: vec![put.clone()],
                        failure: vec![put, read],
                    };
                    (call, BudgetJob::Sync)
                }
                BudgetJob::Reserve {
                    request,
                    answer_by,
                    count: adds,
                    bytes,
                    tries,
                    refreshed,
                    ..
                } => {
                    if !self.may_grant(now) || answer_by <= now {
                        let a = self.unavailable();
                        self.answer(request, a);
                        continue;
                    }
                    let count: u64 = s.others.values().map(|o| o.count).sum::<u64>() + s.own.count;
                    let held: u64 = s.others.values().map(|o| o.bytes).sum::<u64>() + s.own.bytes;
                    // A growth adds bytes only: the count it was reserved under holds.
                    let fits = (adds == 0 || count < limits.max_count)
                        && held.saturating_add(bytes) <= limits.max_bytes;
                    if fits {
                        let put = TxnOp::Put {
                            key: share_key,
                            value: format!("{} {}", s.own.count + adds, s.own.bytes + bytes),
                            lease,
                        };
                        let call = Txn {
                            compare: vec![guard],
                            success: vec![put],
                            failure: vec![read],
                        };
                        let job = BudgetJob::Reserve {
                            request,
                            answer_by,
                            count: adds,
                            bytes,
                            tries,
                            refreshed,
                            reading: false,
                        };
                        (call, job)
                    } else if !refreshed {
                        // The view may hold a share that has gone since: read it again.
                        let call = Txn {
                            compare: vec![],
                            success: vec![read],
                            failure: vec![],
                        };
                        let job = BudgetJob::Reserve {
                            request,
                            answer_by,
                            count: adds,
                            bytes,
                            tries,
                            refreshed: true,
                            reading: true,
                        };
                        (call, job)
                    } else {
                        self.answer(request, ClusterAnswer::Saturated);
                        continue;
                    }
                }
            };
            self.budgets.states[i].busy = true;
            // A reservation's operation ends when its answer is due.
            let until = match &job {
                BudgetJob::Reserve { answer_by, .. } => Some(*answer_by),
                BudgetJob::Sync => None,
            };
            let op = self.send(now, StoreCall::Txn(call), Purpose::Budget { budget, job });
            if let Some(until) = until {
                self.cut_deadline(op, until);
            }
        }
    }

    fn take_view(&mut self, budget: Budget, revision: Revision, read: &[KeyValue]) {
        let own_key = self.layout.budget_share(budget);
        let s = &mut self.budgets.states[budget.index()];
        s.others = read
            .iter()
            .filter(|kv| kv.key != own_key)
            .map(|kv| (kv.key.clone(), parse_share(&kv.value)))
            .collect();
        s.view = revision;
    }

    pub(super) fn budget_answered(
        &mut self,
        now: Instant,
        _sent_at: Instant,
        budget: Budget,
        job: BudgetJob,
        reply: StoreReply,
    ) {
        let i = budget.index();
        self.budgets.states[i].busy = false;
        match (job, reply) {
            (
                BudgetJob::Sync,
                StoreReply::Txn {
                    succeeded,
                    revision,
                    read,
                },
            ) => {
                if succeeded {
                    self.budgets.states[i].view = revision;
                } else {
                    self.take_view(budget, revision, &read);
                }
            }
            // Refused (the lease is gone): written again under the next lease.
            (BudgetJob::Sync, _) => {}
            (
                BudgetJob::Reserve {
                    request,
                    answer_by,
                    count,
                    bytes,
                    tries,
                    refreshed,
                    reading,
                },
                StoreReply::Txn {
                    succeeded,
                    revision,
                    read,
                },
            ) => {
                if succeeded && !reading {
                    let s = &mut self.budgets.states[i];
                    s.own.count += count;
                    s.own.bytes += bytes;
                    s.view = revision;
                    if self.may_grant(now) {
                        self.answer(request, ClusterAnswer::Reserved);
                    } else {
                        self.give_back_share(now, budget, count, bytes);
                        let a = self.unavailable();
                        self.answer(request, a);
                    }
                } else {
                    self.take_view(budget, revision, &read);
                    let tries = if reading { tries } else { tries + 1 };
                    if tries >= MAX_TRIES {
                        let a = self.unavailable();
                        self.answer(request, a);
                    } else {
                        self.budgets.states[i].queue.push_front(BudgetJob::Reserve {
                            request,
                            answer_by,
                            count,
                            bytes,
                            tries,
                            refreshed,
                            reading: false,
                        });
                    }
                }
            }
            (BudgetJob::Reserve { request, .. }, _) => {
                let a = self.unavailable();
                self.answer(request, a);
            }
        }
        self.pump_budget(now, budget);
    }

    /// A budget operation timed out: a reservation may or may not have been written, so
    /// it is refused and the share written again as this host knows it.
    pub(super) fn budget_lost(&mut self, now: Instant, budget: Budget, job: BudgetJob) {
        let i = budget.index();
        self.budgets.states[i].busy = false;
        if let BudgetJob::Reserve { request, .. } = job {
            let a = self.unavailable();
            self.answer(request, a);
        }
        self.budgets.queue(budget, BudgetJob::Sync);
        self.pump_budget(now, budget);
    }
}
