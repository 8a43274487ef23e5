//! Counters the supervisor keeps for metrics: how workers ended, why slots were
//! restarted, reloads, and the request counters of workers that are gone (their last
//! heartbeat's totals), so the service's totals never go down when a worker is replaced.

use super::*;
use crate::request_stats::RequestStats;

/// What the supervisor has counted since it started. Every counter only grows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Reaped workers, by [`ExitReason::ALL`] index.
    pub exits: [u64; ExitReason::ALL.len()],
    /// Slots whose member was lost and is replaced, by [`ExitReason::ALL`] index of the
    /// reason it was lost for.
    pub restarts: [u64; ExitReason::ALL.len()],
    pub reloads_committed: u64,
    pub reloads_rejected: u64,
    /// The request counters of every reaped worker, summed.
    pub retired_requests: RequestStats,
    /// Requests a worker counted after its last heartbeat, found in its final counts
    /// when it ended (they are in `retired_requests` too): what a parent that kept only
    /// heartbeats would have lost.
    pub requests_recovered_at_exit: u64,
}

pub(super) fn reason_index(reason: ExitReason) -> usize {
    ExitReason::ALL
        .iter()
        .position(|r| *r == reason)
        .unwrap_or_default()
}

impl Supervisor {
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// A worker's final counts (its scoreboard, read after it ended): its counters are
    /// raised to them, so what it counted after its last heartbeat is added when it is
    /// reaped. Totals only grow: a counter the final counts hold lower than a heartbeat
    /// did (a worker that wrote over its scoreboard) keeps the heartbeat's.
    pub(super) fn final_counts(&mut self, id: WorkerId, last: &RequestStats) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        let before = w.stats.total();
        let mut raised = (*w.stats).clone();
        raised.raise_to(last);
        self.tally.requests_recovered_at_exit = self
            .tally
            .requests_recovered_at_exit
            .saturating_add(raised.total().saturating_sub(before));
        w.stats = std::sync::Arc::new(raised);
    }

    /// The service's request counters: those of reaped workers and the latest of every
    /// live one.
    pub fn request_stats(&self) -> RequestStats {
        let mut sum = self.tally.retired_requests.clone();
        for w in self.workers.values() {
            sum.add(&w.stats);
        }
        sum
    }

    /// Connections the workers held at their latest heartbeats: what `/metrics` shows as
    /// open connections. A worker's go with it when it is reaped; between its death and
    /// the reap (a step or two) its last figure still counts.
    pub fn open_connections(&self) -> u64 {
        self.workers
            .values()
            .map(|w| u64::from(w.connections))
            .sum()
    }

    /// Requests the workers had in progress at their latest heartbeats (as
    /// [`Self::open_connections`]: a dead worker's last figure counts until it is reaped).
    pub fn requests_in_progress(&self) -> u64 {
        self.workers
            .values()
            .map(|w| u64::from(w.requests_in_progress))
            .sum()
    }

    /// Live workers by state.
    pub fn workers_by_state(&self) -> [usize; WorkerState::ALL.len()] {
        let mut by = [0; WorkerState::ALL.len()];
        for w in self.workers.values() {
            if let Some(i) = WorkerState::ALL.iter().position(|s| *s == w.state) {
                by[i] += 1;
            }
        }
        by
    }
}
