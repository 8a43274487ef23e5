//! The reverse proxy's upstream health, owned by the parent (issue 40, decision 0095):
//! one verdict per upstream that every worker follows, from what all of them saw
//! (passive) and from the parent's own probes (active).
//!
//! - **Passive**: a worker reports a request it could not complete with an upstream
//!   (refused, unreachable, timed out, broken before the response head), and reports a
//!   success only after it had reported a failure. `max_fails` failures in a row across
//!   the service mark the upstream down (nginx's `max_fails`); a success in between
//!   clears the run.
//! - **Down for how long**: without probes, for `fail_timeout`, then it is tried again
//!   (nginx's `fail_timeout`); with probes, until a probe passes (Caddy's active checks),
//!   whatever the workers saw before.
//! - **Active**: with a probe path, every upstream is probed every `probe_interval` (one
//!   probe in flight at a time); `max_fails` failed probes in a row mark it down, one that
//!   passes marks it up.
//!
//! Whenever the set of down upstreams changes, [`UpstreamHealth::take_changed`] says so and
//! the parent sends the new set to every worker; a new worker gets it with its first
//! messages. Upstreams are numbered in the order the routes list them.

use core::time::Duration;

use crate::time::{Instant, earliest};

/// How the parent judges upstreams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthPolicy {
    /// Failures in a row (reported, or probes) that mark an upstream down; at least 1.
    pub max_fails: u32,
    /// Without probes: how long an upstream stays down before it is tried again.
    pub fail_timeout: Duration,
    /// With a probe path: how often each upstream is probed.
    pub probe_interval: Option<Duration>,
}

/// How long an upstream marked down stays down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Down {
    /// Without probes: until then.
    Until(Instant),
    /// With probes: until one passes.
    UntilAProbePasses,
}

/// One upstream's state.
#[derive(Debug, Clone, Default)]
struct Upstream {
    /// Failures in a row (reported by workers or probes).
    failures: u32,
    down: Option<Down>,
    next_probe: Option<Instant>,
    probing: bool,
}

/// The health of every upstream.
#[derive(Debug, Clone)]
pub struct UpstreamHealth {
    policy: HealthPolicy,
    upstreams: Vec<Upstream>,
    changed: bool,
    probes: Vec<u16>,
}

impl UpstreamHealth {
    /// `count` upstreams, all up; with probes, each first probed at `now`.
    pub fn new(count: u16, policy: HealthPolicy, now: Instant) -> Self {
        let policy = HealthPolicy {
            max_fails: policy.max_fails.max(1),
            ..policy
        };
        let upstreams = (0..count)
            .map(|_| Upstream {
                next_probe: policy.probe_interval.map(|_| now),
                ..Upstream::default()
            })
            .collect();
        UpstreamHealth {
            policy,
            upstreams,
            changed: false,
            probes: Vec::new(),
        }
    }

    pub fn policy(&self) -> HealthPolicy {
        self.policy
    }

    fn probing(&self) -> bool {
        self.policy.probe_interval.is_some()
    }

    /// A worker's report: a request with `upstream` failed (`ok == false`) or, after a
    /// failure it reported, succeeded. An index no route has is ignored.
    pub fn reported(&mut self, now: Instant, upstream: u16, ok: bool) {
        self.outcome(now, upstream, ok, false);
    }

    /// The parent's probe of `upstream` came back.
    pub fn probed(&mut self, now: Instant, upstream: u16, ok: bool) {
        let interval = self.policy.probe_interval;
        if let Some(u) = self.upstreams.get_mut(usize::from(upstream)) {
            u.probing = false;
            u.next_probe = interval.map(|i| now + i);
        }
        self.outcome(now, upstream, ok, true);
    }

    fn outcome(&mut self, now: Instant, upstream: u16, ok: bool, probe: bool) {
        let probing = self.probing();
        let HealthPolicy {
            max_fails,
            fail_timeout,
            ..
        } = self.policy;
        let Some(u) = self.upstreams.get_mut(usize::from(upstream)) else {
            return;
        };
        if ok {
            u.failures = 0;
            // With probes only a probe brings an upstream back: a worker's success may be
            // a request that was in flight before it went down.
            if u.down.is_some() && (probe || !probing) {
                u.down = None;
                self.changed = true;
            }
            return;
        }
        u.failures = u.failures.saturating_add(1);
        if u.failures >= max_fails && u.down.is_none() {
            u.down = Some(if probing {
                Down::UntilAProbePasses
            } else {
                Down::Until(now + fail_timeout)
            });
            self.changed = true;
        }
    }

    /// Whether `upstream` is marked down.
    pub fn is_down(&self, upstream: u16) -> bool {
        self.upstreams
            .get(usize::from(upstream))
            .is_some_and(|u| u.down.is_some())
    }

    /// The upstreams marked down, in order.
    pub fn down(&self) -> Vec<u16> {
        (0..self.upstreams.len())
            .filter_map(|i| u16::try_from(i).ok())
            .filter(|&i| self.is_down(i))
            .collect()
    }

    /// Whether the down set changed since the last call.
    pub fn take_changed(&mut self) -> bool {
        core::mem::take(&mut self.changed)
    }

    /// Probes to send now (each upstream at most one in flight).
    pub fn take_probes(&mut self) -> Vec<u16> {
        core::mem::take(&mut self.probes)
    }

    /// The next instant something is due: a probe, or a passive verdict running out.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.upstreams.iter().fold(None, |at, u| {
            let expiry = match u.down {
                Some(Down::Until(t)) => Some(t),
                _ => None,
            };
            let probe = u.next_probe.filter(|_| !u.probing);
            earliest(at, earliest(expiry, probe))
        })
    }

    /// What is due at `now`: passive verdicts that ran out, probes to send.
    pub fn handle_timeout(&mut self, now: Instant) {
        for (i, u) in self.upstreams.iter_mut().enumerate() {
            if matches!(u.down, Some(Down::Until(t)) if t <= now) {
                u.down = None;
                u.failures = 0;
                self.changed = true;
            }
            if !u.probing
                && u.next_probe.is_some_and(|t| t <= now)
                && let Ok(i) = u16::try_from(i)
            {
                u.probing = true;
                self.probes.push(i);
            }
        }
    }
}

#[cfg(test)]
#[path = "upstream_health_tests.rs"]
mod tests;
