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
//! the parent sends each worker the new set in its own generation's numbering; a new
//! worker gets it with its first messages.
//!
//! **Membership** (decision 0108): an upstream is its URL as written. The parent sets the
//! members ([`UpstreamHealth::follow`]) to the upstreams some live generation names; one
//! that leaves is forgotten with its verdict, one that enters starts up (and, with probes,
//! is probed at once). Each member has an id the table never gives another, so a probe
//! answer that comes back after its upstream left is recognised and dropped.
//!
//! **Policy** (decision 0118): the policy is reloadable; the parent hands the committed
//! generation's policy to [`UpstreamHealth::set_policy`] when a reload commits. Verdicts
//! already given are kept, and carried into the new policy's terms (see there).

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

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
    /// Its URL as the routes write it: its identity.
    url: String,
    /// Failures in a row (reported by workers or probes).
    failures: u32,
    down: Option<Down>,
    /// When it was last marked down (a new fail timeout counts from here).
    down_since: Option<Instant>,
    next_probe: Option<Instant>,
    probing: bool,
}

/// The health of every upstream.
#[derive(Debug, Clone)]
pub struct UpstreamHealth {
    policy: HealthPolicy,
    /// The members, by id.
    upstreams: BTreeMap<u32, Upstream>,
    /// The next id to give (never given twice).
    next_id: u32,
    changed: bool,
    probes: Vec<u32>,
}

impl UpstreamHealth {
    /// No upstream yet: the parent names the members ([`UpstreamHealth::follow`]).
    pub fn new(policy: HealthPolicy) -> Self {
        let policy = HealthPolicy {
            max_fails: policy.max_fails.max(1),
            ..policy
        };
        UpstreamHealth {
            policy,
            upstreams: BTreeMap::new(),
            next_id: 0,
            changed: false,
            probes: Vec::new(),
        }
    }

    /// The members become `urls`: an upstream no longer named is forgotten with its
    /// verdict (and its probe's answer, if one is out, is dropped when it comes); one
    /// newly named starts up, probed at `now` when probes are on; one named before and
    /// now keeps its state. New members take ids in the order `urls` gives them.
    pub fn follow<'u>(&mut self, now: Instant, urls: impl IntoIterator<Item = &'u str>) {
        let mut wanted: Vec<&str> = Vec::new();
        for url in urls {
            if !wanted.contains(&url) {
                wanted.push(url);
            }
        }
        let keep: BTreeSet<&str> = wanted.iter().copied().collect();
        let dropped_down = self
            .upstreams
            .values()
            .any(|u| u.down.is_some() && !keep.contains(u.url.as_str()));
        self.upstreams.retain(|_, u| keep.contains(u.url.as_str()));
        if dropped_down {
            self.changed = true;
        }
        let probe_at = self.policy.probe_interval.map(|_| now);
        for url in wanted {
            if self.id(url).is_none() {
                let id = self.next_id;
                self.next_id = self.next_id.wrapping_add(1);
                self.upstreams.insert(
                    id,
                    Upstream {
                        url: url.to_owned(),
                        next_probe: probe_at,
                        ..Upstream::default()
                    },
                );
            }
        }
    }

    /// The id of the member whose URL is `url`.
    pub fn id(&self, url: &str) -> Option<u32> {
        self.upstreams
            .iter()
            .find(|(_, u)| u.url == url)
            .map(|(id, _)| *id)
    }

    /// The URL of member `id`.
    pub fn url(&self, id: u32) -> Option<&str> {
        self.upstreams.get(&id).map(|u| u.url.as_str())
    }

    /// Every member's URL, by id.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.upstreams.values().map(|u| u.url.as_str())
    }

    /// Whether the upstream at `url` is a member marked down.
    pub fn is_down_url(&self, url: &str) -> bool {
        self.id(url).is_some_and(|id| self.is_down(id))
    }

    pub fn policy(&self) -> HealthPolicy {
        self.policy
    }

    /// The committed configuration's policy, from `now` (a reload committed). Verdicts
    /// are kept; what follows from them takes the new policy's terms:
    /// - a run of failures is compared with the new `max_fails` at its next failure;
    /// - without probes before and after, an upstream down is down until its marking plus
    ///   the new `fail_timeout` (at once up, at the next timeout, if that has passed);
    /// - probes turned on: every member is probed at `now`, and an upstream down stays
    ///   down until a probe passes;
    /// - probes turned off: an upstream down is down for the `fail_timeout` from `now`
    ///   (it was waiting for a probe, not for a time);
    /// - a shorter probe interval brings a later scheduled probe forward to `now` plus it.
    pub fn set_policy(&mut self, now: Instant, policy: HealthPolicy) {
        let policy = HealthPolicy {
            max_fails: policy.max_fails.max(1),
            ..policy
        };
        let was_probing = self.probing();
        self.policy = policy;
        for u in self.upstreams.values_mut() {
            u.down = match (u.down, policy.probe_interval) {
                (None, _) => None,
                (Some(_), Some(_)) => Some(Down::UntilAProbePasses),
                (Some(Down::Until(_)), None) => Some(Down::Until(
                    u.down_since.unwrap_or(now) + policy.fail_timeout,
                )),
                (Some(Down::UntilAProbePasses), None) => {
                    Some(Down::Until(now + policy.fail_timeout))
                }
            };
            u.next_probe = match policy.probe_interval {
                None => None,
                Some(_) if !was_probing => Some(now),
                Some(interval) => Some(match u.next_probe {
                    Some(t) if t <= now + interval => t,
                    _ => now + interval,
                }),
            };
        }
    }

    fn probing(&self) -> bool {
        self.policy.probe_interval.is_some()
    }

    /// A worker's report: a request with `upstream` failed (`ok == false`) or, after a
    /// failure it reported, succeeded. An id no member has is ignored.
    pub fn reported(&mut self, now: Instant, upstream: u32, ok: bool) {
        self.outcome(now, upstream, ok, false);
    }

    /// The parent's probe of `upstream` came back.
    pub fn probed(&mut self, now: Instant, upstream: u32, ok: bool) {
        let interval = self.policy.probe_interval;
        if let Some(u) = self.upstreams.get_mut(&upstream) {
            u.probing = false;
            u.next_probe = interval.map(|i| now + i);
        }
        self.outcome(now, upstream, ok, true);
    }

    fn outcome(&mut self, now: Instant, upstream: u32, ok: bool, probe: bool) {
        let probing = self.probing();
        let HealthPolicy {
            max_fails,
            fail_timeout,
            ..
        } = self.policy;
        let Some(u) = self.upstreams.get_mut(&upstream) else {
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
            u.down_since = Some(now);
            u.down = Some(if probing {
                Down::UntilAProbePasses
            } else {
                Down::Until(now + fail_timeout)
            });
            self.changed = true;
        }
    }

    /// Whether `upstream` is marked down.
    pub fn is_down(&self, upstream: u32) -> bool {
        self.upstreams
            .get(&upstream)
            .is_some_and(|u| u.down.is_some())
    }

    /// The members marked down, by id.
    pub fn down(&self) -> Vec<u32> {
        self.upstreams
            .iter()
            .filter(|(_, u)| u.down.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// The URLs of the members marked down, by id.
    pub fn down_urls(&self) -> Vec<&str> {
        self.upstreams
            .values()
            .filter(|u| u.down.is_some())
            .map(|u| u.url.as_str())
            .collect()
    }

    /// Whether the down set changed since the last call.
    pub fn take_changed(&mut self) -> bool {
        core::mem::take(&mut self.changed)
    }

    /// Probes to send now (each upstream at most one in flight), by id and URL; a member
    /// that left before its probe was taken is not probed.
    pub fn take_probes(&mut self) -> Vec<(u32, String)> {
        let ids = core::mem::take(&mut self.probes);
        ids.into_iter()
            .filter_map(|id| self.url(id).map(|url| (id, url.to_owned())))
            .collect()
    }

    /// The next instant something is due: a probe, or a passive verdict running out.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.upstreams.values().fold(None, |at, u| {
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
        for (&id, u) in self.upstreams.iter_mut() {
            if matches!(u.down, Some(Down::Until(t)) if t <= now) {
                u.down = None;
                u.failures = 0;
                self.changed = true;
            }
            if !u.probing && u.next_probe.is_some_and(|t| t <= now) {
                u.probing = true;
                self.probes.push(id);
            }
        }
    }
}

#[cfg(test)]
#[path = "upstream_health_tests.rs"]
mod tests;
