//! The clients of every host: writers (acquire a shared name, hold it, check the fence,
//! publish, release) and reservers (reserve from the service-wide budget, hold, give
//! back). Each keeps one request at a time.

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::Instant;
use servery_core::cluster::{ClusterAnswer, ClusterRequest, NameKind, Revision, SharedName};

use super::oracle::Oracle;
use super::world::{Ev, World};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wake {
    pub(super) host: usize,
    pub(super) client: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum State {
    Idle,
    Acquiring {
        name: usize,
    },
    Holding {
        name: usize,
        fence: Revision,
        since: Instant,
    },
    Checking {
        name: usize,
        fence: Revision,
        since: Instant,
    },
    Reserving {
        bytes: u64,
    },
    Reserved {
        bytes: u64,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Client {
    pub(super) host: usize,
    writer: bool,
    pub(super) state: State,
}

/// Every host's clients, and who waits for which answer.
pub(super) struct Clients {
    pub(super) all: Vec<Client>,
    /// request → (client, when it was asked).
    pub(super) waiting: BTreeMap<ClusterRequest, (usize, Instant)>,
}

/// Shared name `i`: even ones are target leases, odd ones DAV locks (both exclusive
/// names under the same rules).
pub(super) fn shared(i: usize) -> SharedName {
    let kind = if i.is_multiple_of(2) {
        NameKind::Lease
    } else {
        NameKind::Lock
    };
    SharedName::new(kind, &format!("share/file-{i}.txt"))
        .unwrap_or_else(|_| unreachable!("a plain path"))
}

impl Clients {
    pub(super) fn new(w: &mut World) -> Self {
        let mut all = Vec::new();
        for host in 0..w.spec.hosts {
            for _ in 0..w.spec.writers {
                all.push(Client {
                    host,
                    writer: true,
                    state: State::Idle,
                });
            }
            for _ in 0..w.spec.reservers {
                all.push(Client {
                    host,
                    writer: false,
                    state: State::Idle,
                });
            }
        }
        for (client, c) in all.iter().enumerate() {
            let first = Instant::from_nanos(w.rng.range(0, 500_000_000));
            w.at(
                first,
                Ev::Client(Wake {
                    host: c.host,
                    client,
                }),
            );
        }
        Clients {
            all,
            waiting: BTreeMap::new(),
        }
    }

    fn later(&self, w: &mut World, client: usize, lo_ms: u64, hi_ms: u64) {
        let t = w.now + Duration::from_millis(w.rng.range(lo_ms, hi_ms));
        let host = self.all[client].host;
        w.at(t, Ev::Client(Wake { host, client }));
    }

    pub(super) fn wake(&mut self, w: &mut World, oracle: &mut Oracle, wake: Wake) {
        let client = wake.client;
        let host = wake.host;
        let now = w.clock(host);
        match self.all[client].state.clone() {
            State::Idle => {
                if w.now >= w.spec.load_until {
                    return;
                }
                let request = w.request();
                self.waiting.insert(request, (client, w.now));
                if self.all[client].writer {
                    let name = w.rng.range(0, w.spec.names as u64 - 1) as usize;
                    self.all[client].state = State::Acquiring { name };
                    w.hosts[host].acquire(now, request, &shared(name));
                } else {
                    let bytes = w.rng.range(1, w.spec.limits.max_bytes / 2);
                    self.all[client].state = State::Reserving { bytes };
                    w.hosts[host].reserve(now, request, World::budget(), bytes);
                }
            }
            State::Holding { name, fence, since } => {
                let request = w.request();
                self.waiting.insert(request, (client, w.now));
                self.all[client].state = State::Checking { name, fence, since };
                w.hosts[host].check_fence(now, request, &shared(name), fence);
            }
            State::Reserved { bytes } => {
                self.all[client].state = State::Idle;
                w.hosts[host].give_back(now, World::budget(), bytes);
                self.later(w, client, 0, 300);
            }
            _ => {}
        }
        w.pump(host, self, oracle);
    }

    pub(super) fn answered(
        &mut self,
        w: &mut World,
        oracle: &mut Oracle,
        host: usize,
        request: ClusterRequest,
        answer: ClusterAnswer,
    ) {
        let Some((client, asked)) = self.waiting.remove(&request) else {
            oracle.violation(format!(
                "host h{host} answered request {request:?} nobody asked"
            ));
            return;
        };
        oracle.answered(w, host, w.now.saturating_since(asked), &answer);
        let now = w.clock(host);
        match (self.all[client].state.clone(), answer) {
            (State::Acquiring { name }, ClusterAnswer::Granted { fence }) => {
                oracle.granted(w, host, name);
                // In the simulation's time: the oracle compares hosts.
                self.all[client].state = State::Holding {
                    name,
                    fence,
                    since: w.now,
                };
                let (lo, hi) = w.spec.hold_ms;
                self.later(w, client, lo, hi);
            }
            (State::Checking { name, fence, since }, ClusterAnswer::MayPublish) => {
                oracle.published(w, host, name, fence, since);
                w.hosts[host].release(now, &shared(name), fence);
                self.all[client].state = State::Idle;
                self.later(w, client, 0, 200);
            }
            (State::Checking { name, fence, .. }, _) => {
                // Fenced or unavailable: the write fails, its grant given back.
                w.hosts[host].release(now, &shared(name), fence);
                self.all[client].state = State::Idle;
                self.later(w, client, 100, 1_000);
            }
            (State::Reserving { bytes }, ClusterAnswer::Reserved) => {
                self.all[client].state = State::Reserved { bytes };
                let (lo, hi) = w.spec.hold_ms;
                self.later(w, client, lo, hi);
            }
            (_, _) => {
                self.all[client].state = State::Idle;
                self.later(w, client, 50, 1_000);
            }
        }
    }

    /// How many reservations `host`'s clients hold.
    pub(super) fn reserved_on(&self, host: usize) -> (u64, u64) {
        self.all
            .iter()
            .filter(|c| c.host == host)
            .filter_map(|c| match c.state {
                State::Reserved { bytes } => Some(bytes),
                _ => None,
            })
            .fold((0, 0), |(n, b), x| (n + 1, b + x))
    }
}
