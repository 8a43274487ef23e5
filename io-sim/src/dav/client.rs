//! The simulation's WebDAV clients: lock clients (LOCK, then PUTs, lock-checked writes,
//! refreshes and stray requests with their token, then UNLOCK or nothing) and writers
//! without a lock; and how each request's end is recorded and heard.

use core::time::Duration;

use servery_core::LeaseId;

use super::{Client, checked, ns, oracle, protects};
use crate::labels;
use crate::outcome::{DavEnd, DavIf, DavOp, DavRecord};
use crate::plan::{DAV_FILES, DavClientPlan};
use crate::world::{ConnKind, SimEvent, SimWorld};

impl SimWorld {
    /// A lock client with drawn parameters arrives.
    pub(crate) fn dav_client_arrival(&mut self) {
        let Some(w) = self.spec.workload.dav.clone() else {
            return;
        };
        let now = Duration::from_nanos(ns(self.now));
        let rate = w.client_rate_at(now);
        if now < self.dav_until() && rate > 0.0 {
            let d = self.rng.exp(1.0 / rate);
            self.schedule_in(Duration::from_secs_f64(d), SimEvent::DavClientArrival);
        }
        let d = &w.draw;
        if d.resources.is_empty() {
            return;
        }
        let resource = d.resources[self.rng.range(0, d.resources.len() as u64 - 1) as usize];
        let plan = DavClientPlan {
            resource,
            depth_infinity: self.rng.chance(d.infinity_chance),
            exclusive: self.rng.chance(d.exclusive_chance),
            timeout_ms: self.rng.range(d.timeout_ms.0, d.timeout_ms.1),
            steps: self.rng.range(d.steps.0, d.steps.1),
            step_ms: d.step_ms,
            refresh_chance: d.refresh_chance,
            write_chance: d.write_chance,
            stray_chance: d.stray_chance,
            unlock: self.rng.chance(d.unlock_chance),
        };
        let Some(dav) = self.dav.as_mut() else {
            return;
        };
        let client = dav.clients.len();
        dav.clients.push(Client {
            steps_left: plan.steps,
            plan,
            token: None,
            done: false,
        });
        self.dav_client_step(client);
    }

    /// A writer without a lock sends one request of its mix (a PUT of one file by default).
    pub(crate) fn dav_write_arrival(&mut self) {
        let Some(w) = self.spec.workload.dav.as_ref() else {
            return;
        };
        let (rate, paths, mix) = (w.write_rate, w.write_paths.clone(), w.write_mix.clone());
        let now = Duration::from_nanos(ns(self.now));
        if now < self.dav_until() && rate > 0.0 {
            let d = self.rng.exp(1.0 / rate);
            self.schedule_in(Duration::from_secs_f64(d), SimEvent::DavWriteArrival);
        }
        let kind = match mix.len() {
            0 => return,
            1 => mix[0],
            n => mix[self.rng.range(0, n as u64 - 1) as usize],
        };
        let Some((op, path, if_header)) = checked::tokenless(&mut self.rng, kind, &paths) else {
            return;
        };
        let rec = self.dav_record(None, op, path, None, None, if_header);
        self.arrive(ConnKind::Dav { rec });
    }

    fn dav_record(
        &mut self,
        client: Option<usize>,
        op: DavOp,
        resource: &str,
        token: Option<LeaseId>,
        lock_root: Option<&'static str>,
        if_header: DavIf,
    ) -> usize {
        self.out.dav.log.push(DavRecord {
            client: client.map(|c| c as u64),
            op,
            resource: resource.to_owned(),
            token: token.map(|t| t.0),
            lock_root,
            if_header,
            worker: None,
            generation: 0,
            arrived_ns: ns(self.now),
            asked_ns: 0,
            answered_ns: 0,
            allowed: None,
            lock_answer: None,
            acted_on: None,
            discovered: Vec::new(),
            ended_ns: 0,
            end: None,
        });
        self.out.dav.log.len() - 1
    }

    /// A lock client's next request: LOCK, then its steps, then UNLOCK (or nothing).
    pub(crate) fn dav_client_step(&mut self, client: usize) {
        let now = Duration::from_nanos(ns(self.now));
        let until = self.dav_until();
        let Some(c) = self.dav.as_mut().and_then(|d| d.clients.get_mut(client)) else {
            return;
        };
        if c.done {
            return;
        }
        if now >= until {
            c.done = true;
            return;
        }
        let plan = c.plan.clone();
        let root = plan.resource;
        let (op, resource, token, if_header) = match c.token {
            None => (
                DavOp::Lock {
                    depth_infinity: plan.depth_infinity,
                    exclusive: plan.exclusive,
                    timeout_ms: plan.timeout_ms,
                },
                root,
                None,
                DavIf::None,
            ),
            Some(token) if c.steps_left > 0 => {
                c.steps_left -= 1;
                let stray = oracle::collection_of(root)
                    .filter(|_| plan.stray_chance > 0.0 && self.rng.chance(plan.stray_chance));
                let files: Vec<&'static str> = DAV_FILES
                    .iter()
                    .copied()
                    .filter(|f| protects(root, plan.depth_infinity, f))
                    .collect();
                if let Some(collection) = stray {
                    // The token where its lock does not apply: 409 for an UNLOCK, 412
                    // for a write whose `If` names it.
                    if self.rng.chance(0.5) {
                        (DavOp::Unlock, collection, Some(token), DavIf::None)
                    } else {
                        (DavOp::Proppatch, collection, Some(token), DavIf::Untagged)
                    }
                } else if files.is_empty() || self.rng.chance(plan.refresh_chance) {
                    (
                        DavOp::Refresh {
                            timeout_ms: plan.timeout_ms,
                        },
                        root,
                        Some(token),
                        DavIf::Tagged,
                    )
                } else {
                    let write = plan.write_chance > 0.0 && self.rng.chance(plan.write_chance);
                    let under = if write {
                        checked::under_lock(&mut self.rng, root, plan.depth_infinity)
                    } else {
                        None
                    };
                    match under {
                        Some((op, at)) => (op, at, Some(token), DavIf::Tagged),
                        None => {
                            let file = files[self.rng.range(0, files.len() as u64 - 1) as usize];
                            (DavOp::Put, file, Some(token), DavIf::Tagged)
                        }
                    }
                }
            }
            Some(token) if plan.unlock => {
                c.done = true;
                (DavOp::Unlock, root, Some(token), DavIf::None)
            }
            Some(_) => {
                c.done = true;
                return;
            }
        };
        let lock_root = token.map(|_| root);
        let rec = self.dav_record(Some(client), op, resource, token, lock_root, if_header);
        self.arrive(ConnKind::Dav { rec });
    }

    /// The client hears how its request ended, and goes on.
    fn dav_client_heard(&mut self, rec: usize) {
        let r = &self.out.dav.log[rec];
        let (Some(client), op, end, token) = (r.client, r.op, r.end, r.token) else {
            return;
        };
        let Some(c) = self
            .dav
            .as_mut()
            .and_then(|d| d.clients.get_mut(client as usize))
        else {
            return;
        };
        if let DavOp::Lock { .. } = op {
            match (end, token) {
                (Some(DavEnd::Granted), Some(t)) => c.token = Some(LeaseId(t)),
                _ => c.done = true,
            }
        }
        if c.done {
            return;
        }
        let (lo, hi) = c.plan.step_ms;
        let d = Duration::from_micros(self.rng.range(lo * 1000, hi * 1000));
        self.schedule_in(
            d,
            SimEvent::DavClientStep {
                client: client as usize,
            },
        );
    }

    /// The request ends so: the record says how, the client hears it.
    pub(crate) fn dav_record_end(&mut self, rec: usize, end: DavEnd) {
        let now = ns(self.now);
        let Some(r) = self.out.dav.log.get_mut(rec) else {
            return;
        };
        if r.end.is_some() {
            return;
        }
        r.end = Some(end);
        r.ended_ns = now;
        if let Some(dav) = self.dav.as_mut() {
            dav.writing.remove(&rec);
        }
        let (worker, token, if_header) = (r.worker, r.token, r.if_header);
        match end {
            DavEnd::PreconditionFailed if token.is_some() && if_header == DavIf::Tagged => {
                self.out.coverage.insert(labels::DAV_STALE_TOKEN_REFUSED);
            }
            DavEnd::Locked => {
                let granted_here = self
                    .out
                    .dav
                    .locks
                    .iter()
                    .any(|l| l.gone_ns.is_none() && Some(l.granted_to) == worker);
                if !granted_here {
                    self.out.coverage.insert(labels::DAV_REFUSED_ELSEWHERE);
                }
            }
            DavEnd::Written if token.is_some() => {
                let elsewhere = self
                    .out
                    .dav
                    .locks
                    .iter()
                    .any(|l| Some(l.token) == token && Some(l.granted_to) != worker);
                if elsewhere {
                    self.out.coverage.insert(labels::DAV_TOKEN_WRITE_ELSEWHERE);
                }
            }
            _ => {}
        }
        self.dav_client_heard(rec);
    }
}
