//! Proxied and CGI requests in a simulated worker: the grant pools and the upstream
//! choice the real worker runs (both the core's), the upstream exchange and the script
//! simulated.

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::proto::{BrokerReply, BrokerRequest, WorkerMessage, encode_worker};
use servery_core::proxy_admission::{Admit, GrantPool, keep_for};
use servery_core::upstream_choice::Balancer;
use servery_core::{ValidConfig, WorkerId};

use super::{DownManner, Exchange, Flight, Script, ms_of};
use crate::labels;
use crate::process::Waiting;
use crate::world::{SimEvent, SimWorld};

/// A request of this worker's proxy or CGI.
#[derive(Debug, Clone, Copy)]
enum Req {
    /// Waiting for the broker's grants.
    Asking { cgi: bool },
    /// Sent to an upstream (by this worker's index, and the simulated upstream it names);
    /// whether it will answer.
    Upstream {
        upstream: usize,
        target: u16,
        ok: bool,
    },
    /// A script running in its group.
    Script { pgid: u32 },
}

/// One worker's proxy and CGI: the core's balancer and grant pools, its requests.
#[derive(Debug, Clone)]
pub(crate) struct WorkerProxy {
    /// Under its spawn's `proxy.balance` (a reload may change it: decision 0118).
    balancer: Balancer,
    /// Its spawn's `proxy.connect_timeout` and `proxy.first_byte_timeout`.
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    /// The simulated upstream each of its indices names: its generation's routes, in the
    /// order the core numbers them.
    pub(super) targets: Vec<u16>,
    /// The generation it was spawned for.
    pub(super) generation: u64,
    max: u32,
    cgi_max: u32,
    pool: GrantPool,
    cgi_pool: GrantPool,
    reqs: BTreeMap<u64, Req>,
}

impl WorkerProxy {
    /// Under the bounds, balance and timeouts its spawn's configuration carries, the
    /// bounds shared as the real worker shares them.
    pub(crate) fn new(config: &ValidConfig, generation: u64) -> Self {
        let b = config.broker();
        let settings = config.proxy().settings();
        let workers = config.workers();
        let (max, cgi_max) = (b.max_proxy_inflight(), b.max_cgi_concurrent());
        let targets: Vec<u16> = config
            .proxy()
            .upstreams()
            .filter_map(super::target_of)
            .collect();
        WorkerProxy {
            balancer: Balancer::new(targets.len(), settings.balance),
            connect_timeout: settings.connect_timeout,
            first_byte_timeout: settings.first_byte_timeout,
            targets,
            generation,
            max,
            cgi_max,
            pool: GrantPool::new(keep_for(max, workers)),
            cgi_pool: GrantPool::new(keep_for(cgi_max, workers)),
            reqs: BTreeMap::new(),
        }
    }

    pub(crate) fn learn(&mut self, down: &[u16]) {
        self.balancer.set_down(down);
    }

    fn bound_and_pool(&mut self, cgi: bool) -> (u32, &mut GrantPool) {
        if cgi {
            (self.cgi_max, &mut self.cgi_pool)
        } else {
            (self.max, &mut self.pool)
        }
    }
}

impl SimWorld {
    fn proxy_of(&mut self, worker: WorkerId) -> Option<&mut WorkerProxy> {
        self.procs
            .get_mut(&worker)
            .filter(|p| p.alive)
            .and_then(|p| p.proxy.as_mut())
    }

    /// A proxied or CGI request reached `worker` on `conn`: admitted first.
    pub(crate) fn proxy_accept(&mut self, worker: WorkerId, conn: u64, cgi: bool) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        let Some(wp) = p.proxy.as_mut() else {
            return self.proxy_refuse(worker, conn, cgi);
        };
        let (max, pool) = wp.bound_and_pool(cgi);
        if max == 0 {
            return self.proxy_go(worker, conn, cgi);
        }
        let want = match pool.admit() {
            Admit::Go => return self.proxy_go(worker, conn, cgi),
            Admit::Ask(want) => want,
        };
        let request = if cgi {
            BrokerRequest::AcquireCgiGrants { want }
        } else {
            BrokerRequest::AcquireProxyGrants { want }
        };
        match p.client.request(p.clock.own(now), request) {
            Ok(id) => {
                p.waiting.insert(id, Waiting::Proxy(conn));
                wp.reqs.insert(conn, Req::Asking { cgi });
                self.pump(worker);
            }
            Err(_) => {
                let back = pool.granted(0).1;
                self.give_back(worker, cgi, back);
                self.proxy_refuse(worker, conn, cgi);
            }
        }
    }

    /// The broker's answer about grants (`None`: no answer).
    pub(crate) fn proxy_reply(&mut self, worker: WorkerId, conn: u64, reply: Option<BrokerReply>) {
        let Some(wp) = self.proxy_of(worker) else {
            return;
        };
        let Some(Req::Asking { cgi }) = wp.reqs.remove(&conn) else {
            return;
        };
        let granted = match reply {
            Some(BrokerReply::ProxyGrants { granted }) if !cgi => granted,
            Some(BrokerReply::CgiGrants { granted }) if cgi => granted,
            _ => 0,
        };
        let (go, back) = wp.bound_and_pool(cgi).1.granted(granted);
        self.give_back(worker, cgi, back);
        if go {
            self.proxy_go(worker, conn, cgi);
        } else {
            self.proxy_refuse(worker, conn, cgi);
        }
    }

    fn give_back(&mut self, worker: WorkerId, cgi: bool, count: u32) {
        if count == 0 {
            return;
        }
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker).filter(|p| p.alive) else {
            return;
        };
        let request = if cgi {
            BrokerRequest::ReturnCgiGrants { count }
        } else {
            BrokerRequest::ReturnProxyGrants { count }
        };
        p.client.release(p.clock.own(now), request);
        self.pump(worker);
    }

    /// No grant: 503 before the body is read.
    fn proxy_refuse(&mut self, worker: WorkerId, conn: u64, cgi: bool) {
        if cgi {
            self.out.proxy.cgi_refused += 1;
        } else {
            self.out.proxy.refused += 1;
        }
        self.proxy_close(worker, conn);
    }

    fn proxy_close(&mut self, worker: WorkerId, conn: u64) {
        self.close_served(worker, conn);
        self.pump(worker);
        self.dispatch();
    }

    /// Admitted: the script starts, or the request goes to the upstream the balancer
    /// picks.
    fn proxy_go(&mut self, worker: WorkerId, conn: u64, cgi: bool) {
        let now = self.now;
        let Some(sim) = self.proxy.as_mut() else {
            return;
        };
        if cgi {
            sim.next_pgid += 1;
            let pgid = sim.next_pgid;
            sim.scripts.insert(
                pgid,
                Script {
                    worker,
                    orphaned: None,
                },
            );
            let running = sim.scripts.len() as u32;
            let (lo, hi) = sim.plan.script_ms;
            let out = &mut self.out.proxy;
            out.scripts += 1;
            out.most_scripts = out.most_scripts.max(running);
            let Some(wp) = self.proxy_of(worker) else {
                return;
            };
            wp.reqs.insert(conn, Req::Script { pgid });
            let bound = wp.cgi_max;
            if bound > 0 && running > bound {
                self.breach(
                    "CGI bound rule (--cgi-max-concurrent is service-wide)",
                    format!("{running} scripts run at once, over the bound {bound}"),
                );
            }
            self.send_message(worker, &WorkerMessage::ScriptStarted { pgid });
            let d = Duration::from_millis(self.rng.range(lo, hi));
            self.schedule_in(d, SimEvent::ProxyDone { worker, conn });
            return;
        }
        let learned = self.learned_down(worker);
        let Some(wp) = self.proxy_of(worker) else {
            return;
        };
        let choice = wp.balancer.choose(0..wp.targets.len());
        let (generation, len) = (wp.generation, wp.targets.len());
        self.judge_choice(worker, generation, len, &learned, choice);
        let Some(upstream) = choice else {
            // Every upstream down: 502, and the grant back.
            self.out.proxy.all_down += 1;
            self.out
                .coverage
                .insert(labels::EVERY_UPSTREAM_DOWN_ANSWERED);
            self.proxy_release_grant(worker, false);
            return self.proxy_close(worker, conn);
        };
        let Some(wp) = self.proxy_of(worker) else {
            return;
        };
        let several = len > 1;
        let max = wp.max;
        let Some(&target) = wp.targets.get(upstream) else {
            return;
        };
        let Some(sim) = self.proxy.as_mut() else {
            return;
        };
        let up = sim.up.get(usize::from(target)).copied().unwrap_or(false);
        let outside = sim
            .generation_targets
            .get(&generation)
            .filter(|set| !set.contains(&target))
            .cloned();
        // What the upstream does with it (its answer or failure time drawn as before).
        let manner = sim
            .plan
            .down_manners
            .get(usize::from(target))
            .copied()
            .unwrap_or_default();
        let draw = match (up, manner) {
            (true, _) => Some(sim.plan.service_ms),
            (false, DownManner::Refuses) => Some(sim.plan.fail_ms),
            (false, _) => None,
        };
        let count = sim.in_flight.len() as u32 + 1;
        let after_kill = sim
            .last_kill
            .is_some_and(|k| now >= k + Duration::from_secs(1));
        let exchange = match (draw, manner) {
            (Some((lo, hi)), _) => {
                let d = Duration::from_millis(self.rng.range(lo, hi));
                if up {
                    Exchange::Answers(d)
                } else {
                    Exchange::Refused(d)
                }
            }
            (None, DownManner::Silent) => Exchange::Silent,
            (None, _) => Exchange::Unreachable,
        };
        // The worker gives up by its own generation's timeouts.
        let Some(wp) = self.proxy_of(worker) else {
            return;
        };
        let (d, ok) = exchange.ends(wp.connect_timeout, wp.first_byte_timeout);
        let Some(sim) = self.proxy.as_mut() else {
            return;
        };
        sim.in_flight.insert(
            (worker, conn),
            Flight {
                target,
                upstream,
                sent: now,
                exchange,
            },
        );
        let out = &mut self.out.proxy;
        out.sent += 1;
        out.most_in_flight = out.most_in_flight.max(count);
        if after_kill {
            out.most_in_flight_after_kill = out.most_in_flight_after_kill.max(count);
        }
        if several && learned.contains(&(upstream as u16)) {
            self.breach(
                "health rule (no worker sends to an upstream it learned is down)",
                format!(
                    "{worker} sent a request to upstream {upstream} at {} ms, after it learned the parent's verdict {learned:?}",
                    ms_of(now)
                ),
            );
        } else if several && !ok {
            self.out
                .coverage
                .insert(labels::UPSTREAM_FAILED_BEFORE_VERDICT);
        }
        if let Some(set) = outside {
            self.breach(
                "route rule (a committed generation's worker sends only to its generation's upstreams)",
                format!(
                    "{worker} of generation {generation} sent a request to {} at {} ms; generation {generation}'s upstreams are {:?}",
                    super::upstream_url(target),
                    ms_of(now),
                    set.iter().map(|&t| super::upstream_url(t)).collect::<Vec<_>>()
                ),
            );
        }
        if max > 0 && count > max {
            self.breach(
                "admission rule (--proxy-max-inflight is service-wide)",
                format!("{count} upstream requests in flight at once, over the bound {max}"),
            );
        }
        if let Some(wp) = self.proxy_of(worker) {
            wp.reqs.insert(
                conn,
                Req::Upstream {
                    upstream,
                    target,
                    ok,
                },
            );
        }
        self.schedule_in(d, SimEvent::ProxyDone { worker, conn });
    }

    /// A grant of a request that ended, back to the pool (and what it may not keep, to
    /// the broker).
    fn proxy_release_grant(&mut self, worker: WorkerId, cgi: bool) {
        let Some(wp) = self.proxy_of(worker) else {
            return;
        };
        let (max, pool) = wp.bound_and_pool(cgi);
        if max == 0 {
            return;
        }
        let back = pool.finished();
        self.give_back(worker, cgi, back);
    }

    /// The upstream answered or failed; the script ended by itself. A dead worker's
    /// requests ended with it; its scripts run on.
    pub(crate) fn proxy_done(&mut self, worker: WorkerId, conn: u64) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.runnable() || p.wedged {
            return;
        }
        let Some(wp) = p.proxy.as_mut() else {
            return;
        };
        match wp.reqs.remove(&conn) {
            Some(Req::Upstream {
                upstream,
                target,
                ok,
            }) => {
                if let Some(report) = wp.balancer.finished(upstream, Some(ok)) {
                    p.client.release(p.clock.own(now), report);
                }
                let mut flight = None;
                if let Some(sim) = self.proxy.as_mut() {
                    flight = sim.in_flight.remove(&(worker, conn));
                    if !ok {
                        // Seen failing: a verdict marking it down may follow.
                        sim.failed_since_entered.insert(target);
                    }
                }
                if let Some(flight) = flight {
                    self.judge_exchange(worker, flight, ok);
                }
                if ok {
                    self.out.proxy.answered += 1;
                } else {
                    self.out.proxy.failed += 1;
                }
                self.proxy_release_grant(worker, false);
            }
            Some(Req::Script { pgid }) => {
                if let Some(sim) = self.proxy.as_mut() {
                    sim.scripts.remove(&pgid);
                }
                self.send_message(worker, &WorkerMessage::ScriptEnded { pgid });
                self.proxy_release_grant(worker, true);
            }
            _ => return,
        }
        self.proxy_close(worker, conn);
    }

    /// `worker` died: its upstream requests ended with it, its scripts run on (orphans
    /// until the parent kills their groups), and the grants it held are the broker's to
    /// take back.
    pub(crate) fn proxy_worker_died(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(held) = self
            .procs
            .get_mut(&worker)
            .and_then(|p| p.proxy.as_mut())
            .map(|wp| {
                wp.reqs.clear();
                wp.pool.held()
            })
        else {
            return;
        };
        let Some(sim) = self.proxy.as_mut() else {
            return;
        };
        sim.in_flight.retain(|(w, _), _| *w != worker);
        let mut orphaned = false;
        for s in sim.scripts.values_mut().filter(|s| s.worker == worker) {
            s.orphaned = Some(now);
            orphaned = true;
        }
        if held > 0 {
            sim.last_kill = Some(now);
            self.out
                .proxy
                .killed_holding
                .push((worker.0, ms_of(now), held));
            self.out.coverage.insert(labels::PROXY_GRANT_HOLDER_KILLED);
        }
        if orphaned {
            self.out.coverage.insert(labels::SCRIPT_OUTLIVED_ITS_WORKER);
        }
    }

    /// A message the worker writes on its control channel itself (a script's start or
    /// end, as the real worker's CGI reports them).
    fn send_message(&mut self, worker: WorkerId, message: &WorkerMessage) {
        if self
            .procs
            .get(&worker)
            .is_none_or(|p| !p.alive || p.eof_seen)
        {
            return;
        }
        let mut bytes = self.frame_buffer();
        match encode_worker(message, &mut bytes) {
            Ok(()) => {
                self.send_up(worker, bytes);
            }
            Err(e) => self.violation(format!("{worker} cannot frame its message: {e}")),
        }
    }
}
