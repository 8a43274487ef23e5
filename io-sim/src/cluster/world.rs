//! The cluster world's event loop: hosts, links to the store, and the store.

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::Instant;
use servery_core::cluster::{
    Budget, BudgetLimits, ClusterAction, ClusterHost, ClusterName, ClusterRequest, ClusterTiming,
    HostStats, KeyLayout, OpId, StoreCall, StoreReply,
};

use super::clients::{Clients, Wake};
use super::etcd::EtcdModel;
use super::oracle::Oracle;
use crate::rng::SimRng;

/// A host cut off from the store (both ways) for `[from, until)`; `host: None` cuts
/// every host (the store is down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub host: Option<usize>,
    pub from: Instant,
    pub until: Instant,
}

#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub seed: u64,
    pub hosts: usize,
    pub timing: ClusterTiming,
    pub limits: BudgetLimits,
    /// Shared target names the writers pick from.
    pub names: usize,
    pub writers: usize,
    pub reservers: usize,
    /// How long a writer holds its grant before the fence check, in ms.
    pub hold_ms: (u64, u64),
    /// One-way latency between a host and the store, in µs.
    pub latency_us: (u64, u64),
    /// Chance each message is lost.
    pub loss: f64,
    /// The store's clock: a TTL lasts `ttl × store_rate` (≤ 1: fast by up to the skew).
    pub store_rate: f64,
    pub cuts: Vec<Cut>,
    /// Each host's clock rate (1: true time). A rate below `1 - skew / TTL` breaks the
    /// skew bound the timing rule assumes: only the fence then keeps its writes safe.
    pub host_rates: Vec<f64>,
    /// Hosts killed (kill -9) at these times.
    pub kills: Vec<(usize, Instant)>,
    /// Clients start nothing new after this; faults end before it.
    pub load_until: Instant,
    pub end: Instant,
}

/// What a run did and what the oracle found.
#[derive(Debug, Clone, Default)]
pub struct ClusterOutcome {
    pub violations: Vec<String>,
    pub hosts: Vec<HostStats>,
    pub publishes: u64,
    /// Grants whose name a dead host had held, made after its death.
    pub regained_after_death: u64,
    pub trace_hash: u64,
}

impl ClusterOutcome {
    pub fn total(&self, f: impl Fn(&HostStats) -> u64) -> u64 {
        self.hosts.iter().map(f).sum()
    }
}

#[derive(Debug)]
pub(super) enum Ev {
    ToStore {
        host: usize,
        op: OpId,
        call: StoreCall,
    },
    ToHost {
        host: usize,
        op: OpId,
        reply: StoreReply,
    },
    Client(Wake),
}

pub(super) struct World {
    pub(super) spec: ClusterSpec,
    pub(super) rng: SimRng,
    pub(super) now: Instant,
    pub(super) hosts: Vec<ClusterHost>,
    pub(super) dead: Vec<Option<Instant>>,
    pub(super) store: EtcdModel,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    hash: u64,
}

fn host_name(i: usize) -> ClusterName {
    ClusterName::new(&format!("h{i}")).unwrap_or_else(|_| unreachable!("h<digits> is a name"))
}

impl World {
    fn new(spec: ClusterSpec) -> Self {
        let cluster = ClusterName::new("sim").unwrap_or_else(|_| unreachable!("a valid name"));
        let hosts = (0..spec.hosts)
            .map(|i| {
                ClusterHost::new(
                    KeyLayout::new(&cluster, &host_name(i)),
                    spec.timing,
                    [spec.limits; 2],
                )
            })
            .collect();
        World {
            rng: SimRng::new(spec.seed),
            now: Instant::ZERO,
            dead: vec![None; spec.hosts],
            store: EtcdModel::new(spec.store_rate),
            hosts,
            spec,
            queue: BTreeMap::new(),
            seq: 0,
            hash: 0xcbf2_9ce4_8422_2325,
        }
    }

    pub(super) fn at(&mut self, t: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((t, self.seq), ev);
    }

    fn note(&mut self, what: u64) {
        for b in what
            .to_le_bytes()
            .iter()
            .chain(&self.now.as_nanos().to_le_bytes())
        {
            self.hash ^= u64::from(*b);
            self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn cut(&self, host: usize, t: Instant) -> bool {
        self.spec
            .cuts
            .iter()
            .any(|c| c.host.is_none_or(|h| h == host) && c.from <= t && t < c.until)
    }

    fn latency(&mut self) -> Duration {
        let (lo, hi) = self.spec.latency_us;
        Duration::from_micros(self.rng.range(lo, hi))
    }

    /// Host `h`'s clock at the simulation's `now`.
    pub(super) fn clock(&self, h: usize) -> Instant {
        let rate = self.spec.host_rates.get(h).copied().unwrap_or(1.0);
        if rate == 1.0 {
            return self.now;
        }
        Instant::from_nanos((self.now.as_nanos() as f64 * rate) as u64)
    }

    /// When host `h`'s clock reads `t` (never earlier).
    fn real(&self, h: usize, t: Instant) -> Instant {
        let rate = self.spec.host_rates.get(h).copied().unwrap_or(1.0);
        if rate == 1.0 {
            return t;
        }
        let mut real = Instant::from_nanos((t.as_nanos() as f64 / rate).ceil() as u64);
        while Instant::from_nanos((real.as_nanos() as f64 * rate) as u64) < t {
            real = real + Duration::from_nanos(1);
        }
        real
    }

    /// Whether host `h`'s clock breaks the skew bound.
    pub(super) fn rogue(&self, h: usize) -> bool {
        let skew =
            self.spec.timing.skew_bound.as_secs_f64() / self.spec.timing.lease_ttl.as_secs_f64();
        self.spec.host_rates.get(h).is_some_and(|r| *r < 1.0 - skew)
    }

    pub(super) fn alive(&self, host: usize) -> bool {
        self.dead[host].is_none()
    }

    /// Carries out what host `h` asked for; answers go to its clients.
    pub(super) fn pump(&mut self, h: usize, clients: &mut Clients, oracle: &mut Oracle) {
        while let Some(action) = self.hosts[h].poll_action() {
            match action {
                ClusterAction::Store { op, call } => {
                    self.note(1);
                    let lost = self.rng.chance(self.spec.loss);
                    let lat = self.latency();
                    if !lost && !self.cut(h, self.now) {
                        self.at(self.now + lat, Ev::ToStore { host: h, op, call });
                    }
                }
                ClusterAction::Answer { request, answer } => {
                    self.note(2);
                    clients.answered(self, oracle, h, request, answer);
                }
                _ => {}
            }
        }
    }

    fn step(&mut self, ev: Ev, clients: &mut Clients, oracle: &mut Oracle) {
        match ev {
            Ev::ToStore { host, op, call } => {
                if self.cut(host, self.now) {
                    return;
                }
                self.note(3);
                let reply = self.store.apply(self.now, &call);
                let lost = self.rng.chance(self.spec.loss);
                let lat = self.latency();
                if !lost {
                    self.at(self.now + lat, Ev::ToHost { host, op, reply });
                }
            }
            Ev::ToHost { host, op, reply } => {
                if !self.alive(host) || self.cut(host, self.now) {
                    return;
                }
                self.note(4);
                let now = self.clock(host);
                self.hosts[host].handle_reply(now, op, reply);
                self.pump(host, clients, oracle);
            }
            Ev::Client(wake) => {
                if self.alive(wake.host) {
                    self.note(5);
                    clients.wake(self, oracle, wake);
                }
            }
        }
    }

    pub(super) fn request(&mut self) -> ClusterRequest {
        self.seq += 1;
        ClusterRequest(self.seq)
    }

    pub(super) fn budget() -> Budget {
        Budget::Uploads
    }
}

/// Runs one cluster simulation to `spec.end`.
pub fn simulate_cluster(spec: ClusterSpec) -> ClusterOutcome {
    let mut w = World::new(spec);
    let mut clients = Clients::new(&mut w);
    let mut oracle = Oracle::default();
    for h in 0..w.hosts.len() {
        let now = w.clock(h);
        w.hosts[h].start(now);
        w.pump(h, &mut clients, &mut oracle);
    }
    let mut kills = w.spec.kills.clone();
    kills.sort_by_key(|(_, t)| *t);
    let mut kills = kills.into_iter().peekable();
    loop {
        let host_due = (0..w.hosts.len())
            .filter(|&h| w.alive(h))
            .filter_map(|h| w.hosts[h].poll_timeout().map(|t| w.real(h, t)))
            .min();
        let queue_due = w.queue.keys().next().map(|(t, _)| *t);
        let kill_due = kills.peek().map(|(_, t)| *t);
        let Some(next) = [host_due, queue_due, kill_due, w.store.next_expiry()]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        if next > w.spec.end {
            break;
        }
        w.now = next;
        w.store.expire(next);
        if kill_due == Some(next)
            && let Some((h, t)) = kills.next()
        {
            w.dead[h] = Some(t);
            oracle.killed(&w, h);
        } else if host_due == Some(next) {
            for h in 0..w.hosts.len() {
                let now = w.clock(h);
                if w.alive(h) && w.hosts[h].poll_timeout().is_some_and(|t| t <= now) {
                    w.hosts[h].handle_timeout(now);
                    w.pump(h, &mut clients, &mut oracle);
                }
            }
        } else if queue_due == Some(next)
            && let Some((_, ev)) = w.queue.pop_first()
        {
            w.step(ev, &mut clients, &mut oracle);
        }
        oracle.check_step(&w, &clients);
        if oracle.violations.len() >= 5 {
            break;
        }
    }
    oracle.check_end(&w, &clients);
    ClusterOutcome {
        violations: oracle.violations,
        hosts: w.hosts.iter().map(ClusterHost::stats).collect(),
        publishes: oracle.publishes,
        regained_after_death: oracle.regained_after_death,
        trace_hash: w.hash,
    }
}
