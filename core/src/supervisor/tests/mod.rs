//! The supervisor driven directly, one event at a time: the details the scenarios only
//! see from outside (which signal, which reason, which status field).

use core::time::Duration;

use super::*;
use crate::config::RawConfig;
use crate::ids::ReloadId;

struct Harness {
    sup: Supervisor,
    now: Instant,
}

fn harness(platform: Platform, edit: impl FnOnce(&mut RawConfig)) -> Harness {
    let mut raw = RawConfig {
        workers: 2,
        ..RawConfig::default()
    };
    raw.recovery.drain_timeout = 3.0;
    raw.recovery.force_timeout = 0.5;
    edit(&mut raw);
    let config = raw.validate().expect("valid");
    Harness {
        sup: Supervisor::new(config, platform, CoreRng::from_seed([9; 32])),
        now: Instant::ZERO,
    }
}

impl Harness {
    fn on(&mut self, event: Event) -> Vec<Action> {
        self.sup.handle(self.now, event);
        self.actions()
    }

    fn actions(&mut self) -> Vec<Action> {
        let acts: Vec<Action> = std::iter::from_fn(|| self.sup.poll_action()).collect();
        self.sup.check_invariants().expect("invariants");
        acts
    }

    fn advance(&mut self, d: Duration) -> Vec<Action> {
        self.now = self.now + d;
        self.sup.handle_timeout(self.now);
        self.actions()
    }

    fn msg(&mut self, worker: WorkerId, message: WorkerMessage) -> Vec<Action> {
        self.on(Event::Message { worker, message })
    }

    /// Spawned + PREPARED (+ READY once committed) for every spawn in `acts`.
    fn boot(&mut self, acts: &[Action]) -> Vec<Action> {
        let spawned: Vec<WorkerId> = acts
            .iter()
            .filter_map(|a| match a {
                Action::Spawn { worker, .. } => Some(*worker),
                _ => None,
            })
            .collect();
        let mut out = Vec::new();
        for &w in &spawned {
            out.extend(self.on(Event::Spawned {
                worker: w,
                pid: 100 + w.0 as u32,
            }));
            out.extend(self.msg(w, WorkerMessage::Prepared));
        }
        for &w in &spawned {
            out.extend(self.msg(w, WorkerMessage::Ready));
        }
        out
    }

    fn start(&mut self) -> Vec<WorkerId> {
        let acts = self.on(Event::Start);
        self.boot(&acts);
        assert_eq!(self.sup.state(), ServiceState::Ready);
        self.members()
    }

    fn members(&self) -> Vec<WorkerId> {
        self.sup
            .status(self.now)
            .workers
            .iter()
            .filter(|w| w.role == Role::Member)
            .map(|w| w.id)
            .collect()
    }

    fn beat(&mut self, requests: u64) -> Vec<Action> {
        let mut out = Vec::new();
        for w in self.members() {
            out.extend(self.msg(
                w,
                WorkerMessage::Heartbeat {
                    requests,
                    connections: 0,
                    requests_in_progress: 0,
                    memory: 0,
                    stats: Default::default(),
                },
            ));
        }
        out
    }
}

fn kills(acts: &[Action]) -> Vec<WorkerId> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Kill { worker } => Some(*worker),
            _ => None,
        })
        .collect()
}

fn terms(acts: &[Action]) -> Vec<WorkerId> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Terminate { worker } => Some(*worker),
            _ => None,
        })
        .collect()
}

fn spawns(acts: &[Action]) -> usize {
    acts.iter()
        .filter(|a| matches!(a, Action::Spawn { .. }))
        .count()
}

fn exit_reason(h: &Harness, w: WorkerId) -> Option<ExitReason> {
    h.sup
        .status(h.now)
        .recent_exits
        .iter()
        .find(|e| e.worker == w)
        .map(|e| e.reason)
}

fn beat_one(h: &mut Harness, w: WorkerId) -> Vec<Action> {
    h.msg(
        w,
        WorkerMessage::Heartbeat {
            requests: 0,
            connections: 0,
            requests_in_progress: 0,
            memory: 0,
            stats: Default::default(),
        },
    )
}

fn drains(acts: &[Action]) -> Vec<WorkerId> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Send {
                worker,
                message: ParentMessage::Drain { .. },
            } => Some(*worker),
            _ => None,
        })
        .collect()
}

mod affinity;
mod hangs;
mod lifecycle;
mod listeners;
mod protocol;
mod quic;
mod recycle_reload;
mod status;
mod tally;
