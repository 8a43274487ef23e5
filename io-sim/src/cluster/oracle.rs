//! The cluster's predicates, judged after every step and at the end:
//!
//! - **one holder**: no two hosts may act on one name at once (held, before their grant
//!   deadline);
//! - **serialized writes**: the writes published on one name never overlap, from grant
//!   to publish, and their fences rise in publish order;
//! - **fenced publish**: a host publishes only while the store still has its key at its
//!   fence;
//! - **dead host's grants**: no key of a dead host outlives its lease at the store;
//! - **budget**: the store's shares never sum past the service's budget, and each host's
//!   share is exactly what its clients hold;
//! - **answer bound**: every request is answered within the operation time-out;
//! - **recovery**: every live host could grant within the last grant deadline of the run
//!   (faults other than message loss end well before), and no name is left held.

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::Instant;
use servery_core::cluster::{Budget, ClusterAnswer, Revision, prefix_end};

use super::clients::{Clients, shared};
use super::world::World;

#[derive(Debug, Clone, Copy)]
struct Write {
    host: usize,
    fence: Revision,
    granted: Instant,
    published: Instant,
}

#[derive(Debug, Default)]
pub(super) struct Oracle {
    pub(super) violations: Vec<String>,
    pub(super) publishes: u64,
    pub(super) regained_after_death: u64,
    writes: BTreeMap<usize, Vec<Write>>,
    /// When each host was last able to grant.
    could_grant: Vec<Option<Instant>>,
    /// Names a host held when it died, and when.
    held_at_death: Vec<(usize, String, Instant)>,
}

impl Oracle {
    pub(super) fn violation(&mut self, message: String) {
        if self.violations.len() < 5 {
            self.violations.push(message);
        }
    }

    pub(super) fn killed(&mut self, w: &World, host: usize) {
        for (key, _) in w.hosts[host].held() {
            self.held_at_death.push((host, key.clone(), w.now));
        }
    }

    pub(super) fn granted(&mut self, w: &World, host: usize, name: usize) {
        let key = w.hosts[host].layout().name(&shared(name));
        if self
            .held_at_death
            .iter()
            .any(|(h, k, _)| *h != host && *k == key)
        {
            self.regained_after_death += 1;
        }
    }

    pub(super) fn answered(&mut self, w: &World, host: usize, took: Duration, a: &ClusterAnswer) {
        // The operation time-out on the host's clock.
        let rate = w.spec.host_rates.get(host).copied().unwrap_or(1.0);
        let bound = Duration::from_secs_f64(w.spec.timing.op_timeout.as_secs_f64() / rate)
            + Duration::from_millis(1);
        if took > bound {
            self.violation(format!(
                "answer bound: host h{host} answered {a:?} {took:?} after the request, past {bound:?}"
            ));
        }
    }

    pub(super) fn published(
        &mut self,
        w: &World,
        host: usize,
        name: usize,
        fence: Revision,
        granted: Instant,
    ) {
        self.publishes += 1;
        let key = w.hosts[host].layout().name(&shared(name));
        let at_store = w.store.get(&key).map(|kv| kv.create_revision);
        if at_store != Some(fence) {
            self.violation(format!(
                "fenced publish: host h{host} published {key} under fence {fence} at {} but the store has {at_store:?}",
                w.now
            ));
        }
        let new = Write {
            host,
            fence,
            granted,
            published: w.now,
        };
        let list = self.writes.entry(name).or_default();
        let mut found = None;
        for old in list.iter() {
            let overlap = old.granted < new.published && new.granted < old.published;
            if overlap || old.fence >= new.fence {
                found = Some(*old);
                break;
            }
        }
        list.push(new);
        if let Some(old) = found {
            self.violation(format!(
                "serialized writes: {key} written by h{} (fence {}, {}..{}) and by h{} (fence {}, {}..{})",
                old.host, old.fence, old.granted, old.published, host, fence, granted, w.now
            ));
        }
    }

    pub(super) fn check_step(&mut self, w: &World, clients: &Clients) {
        let now = w.now;
        let mut holders: BTreeMap<&String, Vec<usize>> = BTreeMap::new();
        for (h, host) in w.hosts.iter().enumerate() {
            if !w.alive(h) {
                continue;
            }
            if host.may_grant(w.clock(h)) {
                if self.could_grant.len() <= h {
                    self.could_grant.resize(h + 1, None);
                }
                self.could_grant[h] = Some(now);
            }
            if let Err(e) = host.check_invariants() {
                self.violation(format!("host h{h}: {e}"));
            }
            // A host whose clock breaks the skew bound is judged by the fence alone.
            if !w.rogue(h) && host.may_grant(w.clock(h)) {
                for (key, _) in host.held() {
                    holders.entry(key).or_default().push(h);
                }
            }
            let share = host.budget_share(Budget::Uploads);
            let held = clients.reserved_on(h);
            if share != held {
                self.violation(format!(
                    "budget: host h{h}'s share {share:?} is not what its clients hold {held:?}"
                ));
            }
        }
        let two: Vec<String> = holders
            .iter()
            .filter(|(_, hs)| hs.len() > 1)
            .map(|(k, hs)| format!("{k} by {hs:?}"))
            .collect();
        for t in two {
            self.violation(format!("one holder: two hosts may act on {t} at {now}"));
        }
        let prefix = format!("{}budget/uploads/", w.hosts[0].layout().prefix());
        let (count, bytes) = w
            .store
            .range(&prefix, &prefix_end(&prefix))
            .iter()
            .map(|kv| {
                let mut it = kv.value.split(' ').map(|n| n.parse::<u64>().unwrap_or(0));
                (it.next().unwrap_or(0), it.next().unwrap_or(0))
            })
            .fold((0, 0), |(c, b), (x, y)| (c + x, b + y));
        let l = w.spec.limits;
        if count > l.max_count || bytes > l.max_bytes {
            self.violation(format!(
                "budget: the store's shares sum to {count} uploads, {bytes} bytes, past {} and {}",
                l.max_count, l.max_bytes
            ));
        }
        let grace =
            Duration::from_secs_f64(w.spec.timing.lease_ttl.as_secs_f64() * w.spec.store_rate)
                + Duration::from_secs(1);
        for (h, died) in w.dead.iter().enumerate() {
            let Some(died) = died else { continue };
            if now < *died + grace {
                continue;
            }
            let tag = format!("h{h} ");
            let prefix = w.hosts[0].layout().prefix();
            if let Some(kv) = ["leases/", "locks/"]
                .iter()
                .flat_map(|dir| w.store.with_prefix(&format!("{prefix}{dir}")))
                .find(|kv| kv.value.starts_with(&tag))
            {
                self.violation(format!(
                    "dead host's grants: {} of h{h} (dead at {died}) is still in the store at {now}",
                    kv.key
                ));
            }
        }
    }

    pub(super) fn check_end(&mut self, w: &World, clients: &Clients) {
        let now = w.now;
        for h in 0..w.hosts.len() {
            // Message loss goes on to the end: a host may be between keep-alives that
            // were lost, but not for a whole grant deadline.
            let recent = self
                .could_grant
                .get(h)
                .copied()
                .flatten()
                .is_some_and(|t| now.saturating_since(t) <= w.spec.timing.grant_deadline);
            if w.alive(h) && !recent {
                self.violation(format!(
                    "recovery: live host h{h} could not grant at any time in the run's last {:?} (end {now}), with every fault but message loss over",
                    w.spec.timing.grant_deadline
                ));
            }
        }
        let prefix = w.hosts[0].layout().prefix();
        let held: Vec<_> = ["leases/", "locks/"]
            .iter()
            .flat_map(|dir| w.store.with_prefix(&format!("{prefix}{dir}")))
            .collect();
        for kv in held {
            self.violation(format!(
                "recovery: {} ({}) is still held at the end ({now})",
                kv.key, kv.value
            ));
        }
        for (request, (client, asked)) in &clients.waiting {
            let host = clients.all[*client].host;
            if w.alive(host) {
                self.violation(format!(
                    "answer bound: request {request:?} on h{host}, asked at {asked}, never answered"
                ));
            }
        }
    }
}
