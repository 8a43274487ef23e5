//! The supervisor: generations, the PREPARED → COMMIT → READY barrier, crash replacement,
//! hang detection, recycling, reload and shutdown, as one pure state machine.
//!
//! Feed it [`Event`]s with the time they were observed, call
//! [`Supervisor::handle_timeout`] when [`Supervisor::poll_timeout`] is due, and carry out
//! every [`Action`] from [`Supervisor::poll_action`]. `docs/lifecycle.md` describes every
//! state, transition and reason code.

mod restart;
mod status;
mod types;
mod worker;

use std::collections::{BTreeMap, VecDeque};

pub use restart::{RestartDecision, RestartWindow, SlotHistory, backoff};
pub use status::{ExitRecord, FailureRecord, Status, WorkerStatus};

/// How many reaped workers the status remembers.
pub const RECENT_EXITS: usize = 16;
pub use types::{
    Action, Command, Event, ExitReason, ExitStatus, FailureReason, Platform, ServiceState,
    WorkerState,
};
pub use worker::Role;

use crate::config::ValidConfig;
use crate::ids::{Generation, Slot, WorkerId};
use crate::proto::{ParentMessage, WorkerMessage};
use crate::rng::CoreRng;
use crate::time::{Instant, earliest};
use worker::Worker;

/// One position in the committed generation.
#[derive(Debug, Clone, Default)]
struct SlotEntry {
    member: Option<WorkerId>,
    respawn_at: Option<Instant>,
    history: SlotHistory,
}

/// A generation being brought up: the first start or a reload.
#[derive(Debug, Clone)]
struct Rollout {
    generation: Generation,
    config: ValidConfig,
    candidates: Vec<WorkerId>,
    initial: bool,
}

/// The one recycle that may be in flight.
#[derive(Debug, Clone)]
struct Recycle {
    slot: Slot,
    old: WorkerId,
    reason: ExitReason,
    replacement: Option<WorkerId>,
    /// The old worker was told to drain; the recycle ends when it is reaped.
    swapped: bool,
    failures: u32,
    retry_at: Option<Instant>,
}

#[derive(Debug, Clone)]
pub struct Supervisor {
    config: ValidConfig,
    platform: Platform,
    rng: CoreRng,
    state: ServiceState,
    failure: Option<(FailureReason, String)>,
    committed: Generation,
    next_worker: u64,
    workers: BTreeMap<WorkerId, Worker>,
    slots: Vec<SlotEntry>,
    window: RestartWindow,
    rollout: Option<Rollout>,
    recycle: Option<Recycle>,
    recycling_suspended: Option<String>,
    pending_reload: Option<ValidConfig>,
    last_reload_error: Option<String>,
    last_failure: Option<FailureRecord>,
    recent_exits: VecDeque<ExitRecord>,
    stopping: Option<i32>,
    exit_sent: bool,
    actions: VecDeque<Action>,
}

impl Supervisor {
    pub fn new(config: ValidConfig, platform: Platform, rng: CoreRng) -> Self {
        Supervisor {
            config,
            platform,
            rng,
            state: ServiceState::Idle,
            failure: None,
            committed: Generation(0),
            next_worker: 1,
            workers: BTreeMap::new(),
            slots: Vec::new(),
            window: RestartWindow::default(),
            rollout: None,
            recycle: None,
            recycling_suspended: None,
            pending_reload: None,
            last_reload_error: None,
            last_failure: None,
            recent_exits: VecDeque::new(),
            stopping: None,
            exit_sent: false,
            actions: VecDeque::new(),
        }
    }

    pub fn state(&self) -> ServiceState {
        self.state
    }

    pub fn config(&self) -> &ValidConfig {
        &self.config
    }

    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// The committed generation (0 before the first commit).
    pub fn generation(&self) -> Generation {
        self.committed
    }

    /// The generation a live worker belongs to.
    pub fn worker_generation(&self, worker: WorkerId) -> Option<Generation> {
        self.workers.get(&worker).map(|w| w.generation)
    }

    /// Whether the worker exists and its channel is still trusted.
    pub fn is_connected(&self, worker: WorkerId) -> bool {
        self.workers.get(&worker).is_some_and(|w| !w.gone)
    }

    /// Workers not yet reaped.
    pub fn live_workers(&self) -> usize {
        self.workers.len()
    }

    /// Live workers that serve or will serve the committed generation's slots
    /// (members and the recycle replacement), i.e. everything but candidates of a
    /// rollout and retired workers.
    pub fn serving_workers(&self) -> usize {
        self.workers
            .values()
            .filter(|w| matches!(w.role, Role::Member | Role::Replacement))
            .count()
    }

    pub fn ready_workers(&self) -> usize {
        self.workers
            .values()
            .filter(|w| w.role == Role::Member && w.state == WorkerState::Ready)
            .count()
    }

    pub fn recycle_in_flight(&self) -> bool {
        self.recycle.is_some()
    }

    pub fn rollout_in_flight(&self) -> bool {
        self.rollout.is_some()
    }

    pub fn recycling_suspended(&self) -> Option<&str> {
        self.recycling_suspended.as_deref()
    }

    /// The most recent worker failure: a fault, or a hang while draining.
    pub fn last_failure(&self) -> Option<&FailureRecord> {
        self.last_failure.as_ref()
    }

    /// The worker reaped most recently, with the reason it ended.
    pub fn last_exit(&self) -> Option<&ExitRecord> {
        self.recent_exits.back()
    }

    pub fn failure(&self) -> Option<(FailureReason, &str)> {
        self.failure.as_ref().map(|(r, m)| (*r, m.as_str()))
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    // ----- events -------------------------------------------------------------------

    pub fn handle(&mut self, now: Instant, event: Event) {
        match event {
            Event::Start => self.start(now),
            Event::Spawned { worker, pid } => {
                if let Some(w) = self.workers.get_mut(&worker) {
                    w.pid = Some(pid);
                }
            }
            Event::SpawnFailed { worker, error } => {
                if let Some(w) = self.workers.get_mut(&worker) {
                    w.error = Some(format!("could not spawn: {error}"));
                    w.ending.get_or_insert(ExitReason::StartupFailure);
                    self.reaped(now, worker, None);
                }
            }
            Event::Message { worker, message } => self.message(now, worker, message),
            Event::ProtocolViolation { worker, error } => {
                self.gone(worker);
                self.fault(
                    now,
                    worker,
                    ExitReason::ProtocolError,
                    format!("malformed control frame: {error}"),
                );
            }
            Event::ChannelClosed { worker } => {
                self.gone(worker);
                let Some(w) = self.workers.get(&worker) else {
                    return;
                };
                if w.ending.is_none() {
                    let reason = if w.before_ready() {
                        ExitReason::StartupFailure
                    } else {
                        ExitReason::UnexpectedExit
                    };
                    self.fault(now, worker, reason, "control channel closed".into());
                }
            }
            Event::Exited { worker, status } => self.reaped(now, worker, Some(status)),
            Event::Command(Command::Stop) => self.begin_stop(now, 0),
            Event::Command(Command::Reload(raw)) => match raw.validate() {
                Ok(config) => self.reload(now, config),
                Err(e) => self.reject_reload(e.to_string()),
            },
            Event::Command(Command::Recycle) => self.recycle_all(now),
        }
    }

    fn start(&mut self, now: Instant) {
        if self.state != ServiceState::Idle {
            return;
        }
        self.state = ServiceState::Starting;
        self.start_rollout(now, self.config.clone(), true);
    }

    fn message(&mut self, now: Instant, id: WorkerId, message: WorkerMessage) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.gone {
            return;
        }
        match message {
            WorkerMessage::Prepared => {
                if w.state != WorkerState::Spawning {
                    return self.fault(now, id, ExitReason::ProtocolError, "PREPARED twice".into());
                }
                w.state = WorkerState::Prepared;
                w.last_beat = now;
                match w.role {
                    Role::Candidate => self.commit_rollout_if_prepared(),
                    Role::Member | Role::Replacement if self.stopping.is_none() => {
                        self.commit_worker(id);
                    }
                    _ => {}
                }
            }
            WorkerMessage::Ready => {
                if w.state == WorkerState::Draining && w.committed {
                    // Told to drain while its READY was on the way: nothing to do.
                    return;
                }
                if w.state != WorkerState::Prepared || !w.committed {
                    return self.fault(
                        now,
                        id,
                        ExitReason::ProtocolError,
                        "READY before COMMIT".into(),
                    );
                }
                self.became_ready(now, id);
            }
            WorkerMessage::StartupFailed { error } => {
                if !w.before_ready() {
                    return self.fault(
                        now,
                        id,
                        ExitReason::ProtocolError,
                        "startup failure after READY".into(),
                    );
                }
                self.fault(now, id, ExitReason::StartupFailure, error);
            }
            WorkerMessage::Heartbeat { requests, .. } => {
                w.last_beat = now;
                w.requests = w.requests.max(requests);
                if w.state == WorkerState::Ready
                    && w.role == Role::Member
                    && w.recycle_due.is_none()
                    && w.request_limit.is_some_and(|limit| w.requests >= limit)
                {
                    w.recycle_due = Some(ExitReason::RecycleRequests);
                    self.try_start_recycle(now);
                }
            }
            WorkerMessage::Broker { .. } => {}
        }
    }

    fn commit_worker(&mut self, id: WorkerId) {
        if let Some(w) = self.workers.get_mut(&id)
            && w.state == WorkerState::Prepared
            && !w.committed
            && w.ending.is_none()
        {
            w.committed = true;
            self.actions.push_back(Action::Send {
                worker: id,
                message: ParentMessage::Commit,
            });
        }
    }

    fn commit_rollout_if_prepared(&mut self) {
        let Some(rollout) = &self.rollout else { return };
        let all_prepared = rollout.candidates.iter().all(|id| {
            self.workers
                .get(id)
                .is_some_and(|w| w.state == WorkerState::Prepared && w.ending.is_none())
        });
        if all_prepared && self.stopping.is_none() {
            for id in rollout.candidates.clone() {
                self.commit_worker(id);
            }
        }
    }

    fn became_ready(&mut self, now: Instant, id: WorkerId) {
        let policy = self.config.recovery().clone();
        let age_draw = self.rng.unit();
        let req_draw = self.rng.unit();
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        w.state = WorkerState::Ready;
        w.ready_at = Some(now);
        w.last_beat = now;
        w.age_deadline = policy
            .worker_max_age()
            .map(|age| now + age.mul_f64(1.0 - policy.worker_max_age_jitter() * age_draw));
        w.request_limit = policy.max_requests_per_worker().map(|max| {
            ((max as f64 * (1.0 - policy.max_requests_jitter() * req_draw)).ceil() as u64).max(1)
        });
        match w.role {
            Role::Candidate => {
                let done = self.rollout.as_ref().is_some_and(|r| {
                    r.candidates.iter().all(|c| {
                        self.workers
                            .get(c)
                            .is_some_and(|w| w.state == WorkerState::Ready && w.ending.is_none())
                    })
                });
                if done {
                    self.complete_rollout(now);
                }
            }
            Role::Replacement => self.swap_in_replacement(now, id),
            Role::Member | Role::Retired => {}
        }
    }

    // ----- generations ---------------------------------------------------------------

    fn spawn(&mut self, now: Instant, slot: Slot, generation: Generation, role: Role) -> WorkerId {
        let config = self.config.clone();
        self.spawn_with(now, slot, generation, role, &config)
    }

    /// Spawn under `config`: a reload's candidates carry the new generation's timings in
    /// their HELLO and are judged by them, not by the generation still committed.
    fn spawn_with(
        &mut self,
        now: Instant,
        slot: Slot,
        generation: Generation,
        role: Role,
        config: &ValidConfig,
    ) -> WorkerId {
        let id = WorkerId(self.next_worker);
        self.next_worker += 1;
        let policy = config.recovery();
        let mut worker = Worker::new(id, slot, generation, role, now);
        worker.heartbeat_timeout = policy.heartbeat_timeout();
        worker.start_timeout = policy.worker_start_timeout();
        self.workers.insert(id, worker);
        self.actions.push_back(Action::Spawn {
            worker: id,
            slot,
            generation,
        });
        self.actions.push_back(Action::Send {
            worker: id,
            message: ParentMessage::Hello {
                worker: id,
                generation,
                heartbeat_interval_ms: policy.heartbeat_interval().as_millis() as u64,
                drain_timeout_ms: policy.drain_timeout().as_millis() as u64,
            },
        });
        id
    }

    fn start_rollout(&mut self, now: Instant, config: ValidConfig, initial: bool) {
        let generation = Generation(self.committed.0 + 1);
        let candidates = (0..config.workers())
            .map(|i| self.spawn_with(now, Slot(i), generation, Role::Candidate, &config))
            .collect();
        self.rollout = Some(Rollout {
            generation,
            config,
            candidates,
            initial,
        });
    }

    fn complete_rollout(&mut self, now: Instant) {
        let Some(rollout) = self.rollout.take() else {
            return;
        };
        // The old generation stops only now that the new one accepts: connections wait in
        // the shared listener's backlog meanwhile, never refused.
        let old: Vec<WorkerId> = self
            .workers
            .values()
            .filter(|w| w.role == Role::Member)
            .map(|w| w.id)
            .collect();
        for id in old {
            self.retire(now, id, ExitReason::CleanExit);
        }
        self.slots = rollout
            .candidates
            .iter()
            .map(|&id| SlotEntry {
                member: Some(id),
                ..SlotEntry::default()
            })
            .collect();
        for id in &rollout.candidates {
            if let Some(w) = self.workers.get_mut(id) {
                w.role = Role::Member;
            }
        }
        self.committed = rollout.generation;
        self.config = rollout.config;
        if rollout.initial {
            self.state = ServiceState::Ready;
        } else {
            self.last_reload_error = None;
        }
        self.actions.push_back(Action::GenerationCommitted {
            generation: rollout.generation,
        });
        self.try_start_recycle(now);
    }

    fn reload(&mut self, now: Instant, config: ValidConfig) {
        if self.stopping.is_some() {
            return self.reject_reload("the service is stopping".into());
        }
        if self.state != ServiceState::Ready {
            return self.reject_reload("the service is not ready yet".into());
        }
        if self.rollout.is_some() || self.pending_reload.is_some() {
            return self.reject_reload("a reload is already in progress".into());
        }
        if self.recycle.is_some() {
            // One overlap at a time: the reload starts when the recycle completes.
            self.pending_reload = Some(config);
        } else {
            self.start_rollout(now, config, false);
        }
    }

    fn reject_reload(&mut self, message: String) {
        self.last_reload_error = Some(message.clone());
        self.actions.push_back(Action::ReloadRejected { message });
    }

    fn abort_rollout(&mut self, now: Instant, message: String) {
        let Some(rollout) = self.rollout.take() else {
            return;
        };
        if rollout.initial {
            return self.fail(now, FailureReason::StartupFailure, message);
        }
        for id in rollout.candidates {
            self.retire(now, id, ExitReason::CleanExit);
        }
        self.reject_reload(format!(
            "reload failed, the old generation keeps serving: {message}"
        ));
        self.try_start_recycle(now);
    }

    // ----- ending workers ------------------------------------------------------------

    /// Take a worker out of service: drain it if it serves, otherwise end it now.
    fn retire(&mut self, now: Instant, id: WorkerId, reason: ExitReason) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        w.role = Role::Retired;
        match w.state {
            // A committed worker may already accept even if its READY is still on the
            // way: it gets a drain, never a kill, so its requests finish.
            WorkerState::Ready => self.drain(now, id, reason),
            WorkerState::Prepared if w.committed => self.drain(now, id, reason),
            WorkerState::Spawning | WorkerState::Prepared => {
                w.ending.get_or_insert(reason);
                self.kill(id);
            }
            WorkerState::Draining | WorkerState::Exited => {}
        }
    }

    fn drain(&mut self, now: Instant, id: WorkerId, reason: ExitReason) {
        let drain_timeout = self.config.recovery().drain_timeout();
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.state == WorkerState::Draining || w.kill_sent {
            return;
        }
        w.ending.get_or_insert(reason);
        w.state = WorkerState::Draining;
        w.drain_deadline = Some(now + drain_timeout);
        if !w.gone {
            self.actions.push_back(Action::Send {
                worker: id,
                message: ParentMessage::Drain {
                    deadline_ms: drain_timeout.as_millis() as u64,
                },
            });
        }
        if drain_timeout.is_zero() {
            self.escalate(now, id);
        }
    }

    /// The polite stop did not work (or there is no time for it): TERM then KILL on
    /// POSIX, immediate termination on Windows.
    fn escalate(&mut self, now: Instant, id: WorkerId) {
        let force = self.config.recovery().force_timeout();
        let platform = self.platform;
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.kill_sent || w.term_sent {
            return;
        }
        match platform {
            Platform::Posix if !force.is_zero() => {
                w.term_sent = true;
                w.kill_at = Some(now + force);
                self.actions.push_back(Action::Terminate { worker: id });
            }
            _ => self.kill(id),
        }
    }

    fn kill(&mut self, id: WorkerId) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.kill_sent {
            return;
        }
        w.kill_sent = true;
        w.kill_at = None;
        // A drained worker that had to be killed did not finish in time (unless it was
        // ended for hanging, which says more).
        if w.state == WorkerState::Draining && w.ending.is_none_or(|r| !r.is_failure()) {
            w.ending = Some(ExitReason::ForcedTermination);
        }
        self.actions.push_back(Action::Kill { worker: id });
    }

    /// Revoke what the worker holds: its channel is closed or untrusted.
    fn gone(&mut self, id: WorkerId) {
        if let Some(w) = self.workers.get_mut(&id)
            && !w.gone
        {
            w.gone = true;
            self.actions.push_back(Action::WorkerGone { worker: id });
        }
    }

    /// The worker misbehaved: end it, and let the reap decide what follows.
    fn fault(&mut self, now: Instant, id: WorkerId, reason: ExitReason, message: String) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.ending.is_some_and(|r| r.is_failure()) {
            return;
        }
        w.ending = Some(reason);
        w.error = Some(message.clone());
        self.last_failure = Some(FailureRecord {
            worker: id,
            slot: w.slot,
            generation: w.generation,
            reason,
            message,
            at: now,
        });
        // A hung worker gets TERM first (POSIX), as any worker that may hold requests;
        // a stopped process runs no handler, so the KILL after `force_timeout` ends it.
        if matches!(reason, ExitReason::HealthFailure | ExitReason::DrainHang) {
            self.escalate(now, id);
        } else {
            self.kill(id);
        }
    }

    fn reaped(&mut self, now: Instant, id: WorkerId, status: Option<ExitStatus>) {
        self.gone(id);
        let Some(mut w) = self.workers.remove(&id) else {
            return;
        };
        w.state = WorkerState::Exited;
        let reason = w.ending.unwrap_or(if w.before_ready() {
            ExitReason::StartupFailure
        } else {
            ExitReason::UnexpectedExit
        });
        if self.recent_exits.len() == RECENT_EXITS {
            self.recent_exits.pop_front();
        }
        self.recent_exits.push_back(ExitRecord {
            worker: id,
            slot: w.slot,
            generation: w.generation,
            reason,
            status,
            at: now,
        });
        let message = match (&w.error, status) {
            (Some(e), _) => e.clone(),
            (None, Some(s)) => format!("exited with {s}"),
            (None, None) => "did not start".into(),
        };
        if reason.is_fault() && w.ending.is_none() {
            self.last_failure = Some(FailureRecord {
                worker: id,
                slot: w.slot,
                generation: w.generation,
                reason,
                message: message.clone(),
                at: now,
            });
        }
        if self.stopping.is_some() {
            if let Some(slot) = self.slots.iter_mut().find(|s| s.member == Some(id)) {
                slot.member = None;
            }
            return self.finish_stop_if_done();
        }
        let described = format!(
            "worker {id} ({}, {}) {reason}: {message}",
            w.slot, w.generation
        );
        match w.role {
            Role::Candidate => self.abort_rollout(now, described),
            Role::Replacement => self.replacement_failed(now, described),
            Role::Member => self.member_lost(now, &w, reason, described),
            Role::Retired => {
                if self
                    .recycle
                    .as_ref()
                    .is_some_and(|r| r.old == id && r.swapped)
                {
                    self.recycle = None;
                    self.after_recycle(now);
                }
            }
        }
    }

    fn member_lost(&mut self, now: Instant, w: &Worker, reason: ExitReason, described: String) {
        let slot_index = w.slot.0 as usize;
        if self.slots.get(slot_index).and_then(|s| s.member) != Some(w.id) {
            return;
        }
        let stable = w.ready_at.is_some_and(|r| {
            now.saturating_since(r) >= self.config.recovery().restart_stable_period()
        });
        let decision = {
            let policy = self.config.recovery().clone();
            let slot = &mut self.slots[slot_index];
            self.window.decide(now, &policy, &mut slot.history, stable)
        };
        self.slots[slot_index].member = None;
        let _ = reason;
        // A recycle of this slot loses its old worker: the replacement, if any, takes
        // the slot directly.
        if let Some(rec) = self.recycle.take_if(|r| r.old == w.id)
            && let Some(rep) = rec.replacement
            && let Some(rw) = self.workers.get_mut(&rep)
        {
            rw.role = Role::Member;
            self.slots[slot_index].member = Some(rep);
        }
        match decision {
            RestartDecision::GiveUp(reason) => {
                let why = match reason {
                    FailureReason::RestartsDisabled => "worker_restart_limit is 0".to_string(),
                    _ => format!(
                        "more than {} restarts (in {:?} or in a row)",
                        self.config.recovery().worker_restart_limit(),
                        self.config.recovery().worker_restart_window()
                    ),
                };
                self.fail(now, reason, format!("{described}; {why}"));
            }
            RestartDecision::Replace { after } => {
                if self.slots[slot_index].member.is_none() {
                    self.slots[slot_index].respawn_at = Some(now + after);
                }
                if self.recycle.is_none() {
                    self.after_recycle(now);
                }
            }
        }
    }

    // ----- recycling -----------------------------------------------------------------

    fn recycle_all(&mut self, now: Instant) {
        if self.state != ServiceState::Ready || self.stopping.is_some() {
            return;
        }
        self.recycling_suspended = None;
        for w in self.workers.values_mut() {
            if w.role == Role::Member && w.state == WorkerState::Ready {
                w.recycle_due.get_or_insert(ExitReason::RecycleManual);
            }
        }
        self.try_start_recycle(now);
    }

    fn try_start_recycle(&mut self, now: Instant) {
        if self.state != ServiceState::Ready
            || self.stopping.is_some()
            || self.rollout.is_some()
            || self.recycle.is_some()
            || self.recycling_suspended.is_some()
        {
            return;
        }
        let due = self
            .workers
            .values()
            .filter(|w| {
                w.role == Role::Member
                    && w.state == WorkerState::Ready
                    && w.ending.is_none()
                    && w.generation == self.committed
            })
            .filter_map(|w| w.recycle_due.map(|r| (w.ready_at, w.id, w.slot, r)))
            .min();
        let Some((_, old, slot, reason)) = due else {
            return;
        };
        let replacement = self.spawn(now, slot, self.committed, Role::Replacement);
        self.recycle = Some(Recycle {
            slot,
            old,
            reason,
            replacement: Some(replacement),
            swapped: false,
            failures: 0,
            retry_at: None,
        });
    }

    fn swap_in_replacement(&mut self, now: Instant, id: WorkerId) {
        let Some(rec) = self.recycle.as_mut() else {
            return;
        };
        if rec.replacement != Some(id) {
            return;
        }
        rec.swapped = true;
        let (slot, old, reason) = (rec.slot, rec.old, rec.reason);
        if let Some(w) = self.workers.get_mut(&id) {
            w.role = Role::Member;
        }
        if let Some(entry) = self.slots.get_mut(slot.0 as usize) {
            entry.member = Some(id);
        }
        self.retire(now, old, reason);
    }

    fn replacement_failed(&mut self, now: Instant, described: String) {
        let retry_limit = self.config.recovery().recycle_retry_limit();
        let policy = self.config.recovery().clone();
        let Some(rec) = self.recycle.as_mut() else {
            return;
        };
        rec.replacement = None;
        rec.failures += 1;
        if rec.failures >= retry_limit {
            let message = format!(
                "recycling suspended after {} failed replacements; the old worker keeps serving: {described}",
                rec.failures
            );
            self.recycle = None;
            for w in self.workers.values_mut() {
                w.recycle_due = None;
            }
            self.recycling_suspended = Some(message.clone());
            self.actions
                .push_back(Action::RecyclingSuspended { message });
            self.after_recycle(now);
        } else {
            rec.retry_at = Some(now + backoff(&policy, rec.failures - 1));
        }
    }

    fn after_recycle(&mut self, now: Instant) {
        if let Some(config) = self.pending_reload.take() {
            if self.recycle.is_none() && self.stopping.is_none() {
                self.start_rollout(now, config, false);
                return;
            }
            self.pending_reload = Some(config);
        }
        self.try_start_recycle(now);
    }

    // ----- stopping ------------------------------------------------------------------

    fn fail(&mut self, now: Instant, reason: FailureReason, message: String) {
        if self.stopping.is_some() {
            return;
        }
        self.state = ServiceState::Failed;
        self.failure = Some((reason, message.clone()));
        self.actions
            .push_back(Action::ServiceFailed { reason, message });
        self.begin_stop(now, reason.exit_code());
    }

    fn begin_stop(&mut self, now: Instant, code: i32) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some(code);
        if self.state != ServiceState::Failed {
            self.state = ServiceState::Draining;
        }
        self.actions.push_back(Action::CloseListeners);
        self.rollout = None;
        self.recycle = None;
        self.pending_reload = None;
        for slot in &mut self.slots {
            slot.respawn_at = None;
        }
        let ids: Vec<WorkerId> = self.workers.keys().copied().collect();
        for id in ids {
            self.retire(now, id, ExitReason::CleanExit);
        }
        self.finish_stop_if_done();
    }

    fn finish_stop_if_done(&mut self) {
        let Some(code) = self.stopping else { return };
        if !self.workers.is_empty() || self.exit_sent {
            return;
        }
        self.exit_sent = true;
        if self.state != ServiceState::Failed {
            self.state = ServiceState::Stopped;
        }
        self.actions.push_back(Action::Exit { code });
    }

    // ----- time ----------------------------------------------------------------------

    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next = None;
        for w in self.workers.values() {
            if !w.kill_sent {
                next = earliest(next, w.kill_at);
            }
            if w.ending.is_some() && w.state != WorkerState::Draining {
                continue;
            }
            next = earliest(next, self.worker_deadline(w));
        }
        for s in &self.slots {
            next = earliest(next, s.respawn_at);
        }
        if let Some(rec) = &self.recycle {
            next = earliest(next, rec.retry_at);
        }
        next
    }

    /// The heartbeat deadline is judged in every state in which a worker beats: prepared
    /// (waiting for its quorum), ready, and draining.
    fn worker_deadline(&self, w: &Worker) -> Option<Instant> {
        let beat = Some(w.last_beat + w.heartbeat_timeout);
        match w.state {
            WorkerState::Spawning => Some(w.spawned_at + w.start_timeout),
            WorkerState::Prepared => earliest(Some(w.spawned_at + w.start_timeout), beat),
            WorkerState::Ready => {
                let age = (w.role == Role::Member
                    && w.recycle_due.is_none()
                    && self.recycling_suspended.is_none())
                .then_some(w.age_deadline)
                .flatten();
                earliest(beat, age)
            }
            WorkerState::Draining if !w.term_sent && !w.kill_sent => {
                earliest(w.drain_deadline, beat)
            }
            _ => None,
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        let ids: Vec<WorkerId> = self.workers.keys().copied().collect();
        for id in ids {
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            if !w.kill_sent && w.kill_at.is_some_and(|t| t <= now) {
                self.kill(id);
                continue;
            }
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            match w.state {
                WorkerState::Spawning | WorkerState::Prepared
                    if w.ending.is_none() && now >= w.spawned_at + w.start_timeout =>
                {
                    let msg = format!(
                        "not ready within worker_start_timeout ({:?})",
                        w.start_timeout
                    );
                    self.fault(now, id, ExitReason::StartupFailure, msg);
                }
                WorkerState::Prepared
                    if w.ending.is_none() && now >= w.last_beat + w.heartbeat_timeout =>
                {
                    // Not ready yet, so a startup failure, and nothing to drain: killed
                    // at once, as on the start timeout.
                    let msg = format!(
                        "no heartbeat for {:?} while prepared (heartbeat_timeout)",
                        now.saturating_since(w.last_beat)
                    );
                    self.fault(now, id, ExitReason::StartupFailure, msg);
                }
                WorkerState::Ready if w.ending.is_none() => {
                    if now >= w.last_beat + w.heartbeat_timeout {
                        let msg = format!(
                            "no heartbeat for {:?} (heartbeat_timeout)",
                            now.saturating_since(w.last_beat)
                        );
                        self.fault(now, id, ExitReason::HealthFailure, msg);
                    } else if w.role == Role::Member
                        && w.recycle_due.is_none()
                        && w.age_deadline.is_some_and(|t| t <= now)
                    {
                        w.recycle_due = Some(ExitReason::RecycleAge);
                    }
                }
                WorkerState::Draining if !w.term_sent && !w.kill_sent => {
                    if now >= w.last_beat + w.heartbeat_timeout {
                        // A healthy drain keeps beating: this one is hung, and would
                        // otherwise hold its recycle (or the stop) until the drain deadline.
                        let msg = format!(
                            "no heartbeat for {:?} while draining (heartbeat_timeout)",
                            now.saturating_since(w.last_beat)
                        );
                        self.fault(now, id, ExitReason::DrainHang, msg);
                    } else if w.drain_deadline.is_some_and(|t| t <= now) {
                        self.escalate(now, id);
                    }
                }
                _ => {}
            }
        }
        if self.stopping.is_none() {
            let generation = self.committed;
            for i in 0..self.slots.len() {
                if self.slots[i].respawn_at.is_some_and(|t| t <= now) {
                    self.slots[i].respawn_at = None;
                    let id = self.spawn(now, Slot(i as u32), generation, Role::Member);
                    self.slots[i].member = Some(id);
                }
            }
            let retry = self
                .recycle
                .as_ref()
                .filter(|r| r.replacement.is_none() && r.retry_at.is_some_and(|t| t <= now))
                .map(|r| r.slot);
            if let Some(slot) = retry {
                let id = self.spawn(now, slot, generation, Role::Replacement);
                if let Some(rec) = self.recycle.as_mut() {
                    rec.replacement = Some(id);
                    rec.retry_at = None;
                }
            }
        }
        self.try_start_recycle(now);
    }

    // ----- inspection ----------------------------------------------------------------

    pub fn status(&self, now: Instant) -> Status {
        Status {
            state: self.state,
            generation: self.committed,
            workers: self
                .workers
                .values()
                .map(|w| WorkerStatus {
                    id: w.id,
                    slot: w.slot,
                    pid: w.pid,
                    generation: w.generation,
                    state: w.state,
                    role: w.role,
                    requests: w.requests,
                    age: now.saturating_since(w.spawned_at),
                })
                .collect(),
            restarts: self.window.total,
            recent_restarts: self.window.recent(),
            last_failure: self.last_failure.clone(),
            recent_exits: self.recent_exits.iter().cloned().collect(),
            failure: self.failure.clone(),
            recycling_suspended: self.recycling_suspended.clone(),
            recycle_in_flight: self.recycle.is_some(),
            reload_in_flight: self.rollout.as_ref().is_some_and(|r| !r.initial)
                || self.pending_reload.is_some(),
            last_reload_error: self.last_reload_error.clone(),
        }
    }

    /// Check the machine's own invariants; the simulator calls this after every step and
    /// the real driver in debug builds.
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.config.workers() as usize;
        let replacements = self
            .workers
            .values()
            .filter(|w| w.role == Role::Replacement)
            .count();
        if replacements > 1 {
            return Err(format!("{replacements} recycle replacements alive"));
        }
        if replacements == 1
            && self
                .recycle
                .as_ref()
                .and_then(|r| r.replacement)
                .is_none_or(|id| {
                    self.workers
                        .get(&id)
                        .is_none_or(|w| w.role != Role::Replacement)
                })
        {
            return Err("a replacement is alive without a recycle in flight".into());
        }
        if self.rollout.is_none() && self.stopping.is_none() && self.state == ServiceState::Ready {
            let serving = self.serving_workers();
            if serving > n + 1 {
                return Err(format!(
                    "{serving} serving workers exceed N + 1 = {}",
                    n + 1
                ));
            }
        }
        for (i, s) in self.slots.iter().enumerate() {
            let members = self
                .workers
                .values()
                .filter(|w| {
                    w.role == Role::Member
                        && w.slot.0 as usize == i
                        && w.generation == self.committed
                })
                .count();
            if members > 1 {
                return Err(format!("slot {i} has {members} members"));
            }
            if let Some(m) = s.member {
                if !self.workers.contains_key(&m) {
                    return Err(format!("slot {i} names reaped worker {m}"));
                }
                if s.respawn_at.is_some() {
                    return Err(format!("slot {i} has a member and a pending respawn"));
                }
            }
        }
        for w in self.workers.values() {
            if w.state == WorkerState::Ready && !w.committed {
                return Err(format!("{} is ready without COMMIT", w.id));
            }
            if w.role == Role::Candidate
                && self
                    .rollout
                    .as_ref()
                    .is_none_or(|r| !r.candidates.contains(&w.id))
            {
                return Err(format!("{} is a candidate outside a rollout", w.id));
            }
        }
        if (self.state == ServiceState::Failed) != self.failure.is_some() {
            return Err("failed state and failure record disagree".into());
        }
        if self.state == ServiceState::Stopped && !self.workers.is_empty() {
            return Err("stopped with live workers".into());
        }
        if self.stopping.is_some() && (self.rollout.is_some() || self.recycle.is_some()) {
            return Err("stopping with a rollout or recycle in flight".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
