//! A worker's choice among a prefix's upstreams (decisions 0095 and 0100): the parent's
//! verdict as last received, the balancing policy, this worker's requests in flight to
//! each upstream, and which of its reports the parent must hear.
//!
//! Both drivers run it: the real worker's proxy (`io-real/src/proxy/health.rs`) and the
//! simulated worker (`io-sim/src/proxy`), so the rule the simulator judges — a worker
//! never sends to an upstream once it learned the parent marked it down — is the one
//! production follows.
//!
//! - **Round robin** (the default): the next upstream in this worker's turn that is not
//!   down.
//! - **Least in flight**: the upstream not down with the fewest requests this worker has
//!   in flight to it, ties broken by the round-robin turn (nginx's `least_conn`, whose
//!   counts are per worker too unless a shared zone is configured).
//!
//! A group of one upstream ignores the verdict: it has nowhere else to send (nginx ignores
//! `max_fails` for a group of one).

use core::ops::Range;

use crate::proto::BrokerRequest;

/// How a worker spreads a prefix's requests over its upstreams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Balance {
    /// Each in turn (the default).
    #[default]
    RoundRobin,
    /// The one with the fewest requests in flight from this worker.
    LeastInflight,
}

impl Balance {
    /// Its name on the command line and in `ctl status`.
    pub fn name(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round-robin",
            Balance::LeastInflight => "least-inflight",
        }
    }

    /// The policy a name gives (`round-robin`, `least-inflight`).
    pub fn parse(name: &str) -> Option<Balance> {
        match name {
            "round-robin" => Some(Balance::RoundRobin),
            "least-inflight" => Some(Balance::LeastInflight),
            _ => None,
        }
    }
}

/// One worker's view of its upstreams.
#[derive(Debug, Clone)]
pub struct Balancer {
    balance: Balance,
    /// The parent's verdict, by upstream index.
    down: Vec<bool>,
    /// Requests in flight from this worker, by upstream.
    in_flight: Vec<u32>,
    /// Upstreams this worker reported failing and has not seen answer since.
    failing: Vec<bool>,
    /// Round-robin position per group, by the group's first index.
    turn: Vec<usize>,
}

impl Balancer {
    /// `upstreams` upstreams, every one believed up.
    pub fn new(upstreams: usize, balance: Balance) -> Self {
        Balancer {
            balance,
            down: vec![false; upstreams],
            in_flight: vec![0; upstreams],
            failing: vec![false; upstreams],
            turn: vec![0; upstreams],
        }
    }

    pub fn balance(&self) -> Balance {
        self.balance
    }

    /// The parent's new verdict (`ParentMessage::UpstreamHealth`): these are down, every
    /// other one is up.
    pub fn set_down(&mut self, down: &[u16]) {
        self.down.iter_mut().for_each(|d| *d = false);
        for &u in down {
            if let Some(d) = self.down.get_mut(usize::from(u)) {
                *d = true;
            }
        }
    }

    /// Whether the parent's last verdict marks `upstream` down.
    pub fn is_down(&self, upstream: usize) -> bool {
        self.down.get(upstream).copied().unwrap_or(false)
    }

    /// Requests in flight from this worker to `upstream`.
    pub fn in_flight(&self, upstream: usize) -> u32 {
        self.in_flight.get(upstream).copied().unwrap_or(0)
    }

    /// The upstream of `group` to send the next request to, counted in flight from now
    /// until [`Balancer::finished`]; `None` when every upstream of a group of several is
    /// down (answered 502).
    pub fn choose(&mut self, group: Range<usize>) -> Option<usize> {
        let len = group.len();
        if len == 0 || group.end > self.down.len() {
            return None;
        }
        let chosen = if len == 1 {
            group.start
        } else {
            let turn = self.turn.get(group.start).copied().unwrap_or(0);
            if let Some(t) = self.turn.get_mut(group.start) {
                *t = t.wrapping_add(1);
            }
            let order = (0..len).map(|k| group.start + (turn.wrapping_add(k)) % len);
            let mut up = order.filter(|&i| !self.down[i]);
            match self.balance {
                Balance::RoundRobin => up.next()?,
                // The first of the fewest, in turn order: `min_by_key` keeps the first.
                Balance::LeastInflight => up.min_by_key(|&i| self.in_flight[i])?,
            }
        };
        self.in_flight[chosen] += 1;
        Some(chosen)
    }

    /// A request chosen for `upstream` is over. `answered`: whether a response head came
    /// back (`Some(true)`), the exchange failed before one (`Some(false)`: refused,
    /// unreachable, timed out, broken), or it ended before it was tried (`None`: refused
    /// admission, its client left). What the parent must hear, if anything: every
    /// failure, and a success only after this worker had reported a failure (one message
    /// per recovery, not per request).
    pub fn finished(&mut self, upstream: usize, answered: Option<bool>) -> Option<BrokerRequest> {
        if let Some(n) = self.in_flight.get_mut(upstream) {
            *n = n.saturating_sub(1);
        }
        let ok = answered?;
        let failing = self.failing.get_mut(upstream)?;
        let report = !ok || *failing;
        *failing = !ok;
        let upstream = u16::try_from(upstream).ok()?;
        report.then_some(BrokerRequest::UpstreamOutcome { upstream, ok })
    }

    /// A response head came back while the request is still in flight (its body still
    /// streaming): what the parent must hear, as [`Balancer::finished`] would say.
    pub fn answered(&mut self, upstream: usize) -> Option<BrokerRequest> {
        let failing = self.failing.get_mut(upstream)?;
        let report = core::mem::take(failing);
        let upstream = u16::try_from(upstream).ok()?;
        report.then_some(BrokerRequest::UpstreamOutcome { upstream, ok: true })
    }

    /// A request in flight to `upstream` is over after [`Balancer::answered`].
    pub fn done(&mut self, upstream: usize) {
        if let Some(n) = self.in_flight.get_mut(upstream) {
            *n = n.saturating_sub(1);
        }
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.down.len();
        if self.in_flight.len() != n || self.failing.len() != n || self.turn.len() != n {
            return Err("upstream choice: its tables disagree on the upstreams".into());
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "upstream_choice_tests.rs"]
mod tests;
