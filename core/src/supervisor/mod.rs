//! The supervisor: generations, the PREPARED → COMMIT → READY barrier, crash replacement,
//! hang detection, recycling, reload and shutdown, as one pure state machine.
//!
//! Feed it [`Event`]s with the time they were observed, call
//! [`Supervisor::handle_timeout`] when [`Supervisor::poll_timeout`] is due, and carry out
//! every [`Action`] from [`Supervisor::poll_action`]. `docs/lifecycle.md` describes every
//! state, transition and reason code.

mod admission;
mod events;
mod exits;
mod invariants;
mod quic;
mod recycle;
mod restart;
mod rollout;
mod status;
mod stop;
mod table;
mod tally;
mod timers;
mod types;
mod watch;
mod worker;

use std::collections::VecDeque;

pub use admission::PortFixedBy;
pub use quic::{QuicSteering, StrayConnection};
pub use restart::{RestartDecision, RestartWindow, SlotHistory, backoff};
pub use status::{Capacity, ExitRecord, FailureRecord, Readiness, Status, WorkerStatus};
pub use tally::Tally;

/// How many reaped workers the status remembers.
pub const RECENT_EXITS: usize = 16;
pub use types::{
    Action, Command, Event, ExitReason, ExitStatus, FailureReason, FinalCounts, Platform,
    ServiceState, WorkerState,
};
pub use worker::Role;

use crate::config::{Listen, ValidConfig};
use crate::ids::{Generation, ReloadId, Slot, WorkerId};
use crate::proto::{ParentMessage, WorkerMessage};
use crate::rng::CoreRng;
use crate::time::Instant;
use table::WorkerTable;
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
    /// The reload this rollout answers; `None` for the first generation.
    reload: Option<ReloadId>,
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
    /// The CPUs the parent may run on, as the driver found them at start: what
    /// `worker_cpu_affinity` shares out among the slots (empty: unknown, nobody pinned).
    host_cpus: crate::cpu_affinity::CpuSet,
    rng: CoreRng,
    state: ServiceState,
    failure: Option<(FailureReason, String)>,
    committed: Generation,
    next_worker: u64,
    workers: WorkerTable,
    slots: Vec<SlotEntry>,
    window: RestartWindow,
    /// Unstable restarts in a row across the pool, for `restart_backoff_shared`.
    pool_run: u32,
    rollout: Option<Rollout>,
    recycle: Option<Recycle>,
    /// Who reads which HTTP/3 socket, and where new connections go (decision 0079).
    quic: quic::QuicSockets,
    recycling_suspended: Option<String>,
    pending_reload: Option<(ReloadId, ValidConfig)>,
    /// A reload that changes the listener set, waiting for the set to be bound.
    binding: Option<(ReloadId, ValidConfig)>,
    /// The driver reported the serving listeners as the service manager's.
    listeners_inherited: bool,
    last_reload_error: Option<String>,
    last_failure: Option<FailureRecord>,
    recent_exits: VecDeque<ExitRecord>,
    stopping: Option<i32>,
    exit_sent: bool,
    /// Time the parent noticed it did not run, summed (decision 0017).
    not_running: core::time::Duration,
    tally: Tally,
    actions: VecDeque<Action>,
    /// A time no later than [`Supervisor::poll_timeout`], while one is known: the last
    /// deadline worked out, kept for as long as nothing has happened that could bring a
    /// deadline forward (only heartbeats have, which move their worker's later). See
    /// [`Supervisor::poll_timeout_before`].
    due_floor: Option<Instant>,
}

impl Supervisor {
    pub fn new(config: ValidConfig, platform: Platform, rng: CoreRng) -> Self {
        Supervisor {
            config,
            platform,
            host_cpus: crate::cpu_affinity::CpuSet::default(),
            rng,
            state: ServiceState::Idle,
            failure: None,
            committed: Generation(0),
            next_worker: 1,
            workers: WorkerTable::default(),
            slots: Vec::new(),
            window: RestartWindow::default(),
            pool_run: 0,
            rollout: None,
            recycle: None,
            quic: quic::QuicSockets::default(),
            recycling_suspended: None,
            pending_reload: None,
            binding: None,
            listeners_inherited: false,
            last_reload_error: None,
            last_failure: None,
            recent_exits: VecDeque::new(),
            stopping: None,
            exit_sent: false,
            not_running: core::time::Duration::ZERO,
            tally: Tally::default(),
            actions: VecDeque::new(),
            due_floor: None,
        }
    }

    pub fn state(&self) -> ServiceState {
        self.state
    }

    /// The driver's report, before the first event: the CPUs the parent may run on
    /// (read once at start; decision 0122).
    pub fn set_host_cpus(&mut self, cpus: crate::cpu_affinity::CpuSet) {
        self.host_cpus = cpus;
    }

    /// The CPUs the parent may run on, as the driver reported them.
    pub fn host_cpus(&self) -> &crate::cpu_affinity::CpuSet {
        &self.host_cpus
    }

    /// A stop has begun (asked for, or after a failure): the listeners are closed.
    pub fn stopping(&self) -> bool {
        self.stopping.is_some()
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

    /// Every worker whose channel is still trusted, in id order.
    pub fn connected_workers(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.workers
            .iter()
            .filter(|(_, w)| !w.gone)
            .map(|(id, _)| *id)
    }

    /// The generations of the workers not yet reaped, each once, in order.
    pub fn live_generations(&self) -> impl Iterator<Item = Generation> + '_ {
        let mut seen = std::collections::BTreeSet::new();
        self.workers
            .values()
            .map(|w| w.generation)
            .filter(move |g| seen.insert(*g))
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

    /// The last [`RECENT_EXITS`] reaped workers, oldest first.
    pub fn recent_exits(&self) -> impl Iterator<Item = &ExitRecord> {
        self.recent_exits.iter()
    }

    pub fn failure(&self) -> Option<(FailureReason, &str)> {
        self.failure.as_ref().map(|(r, m)| (*r, m.as_str()))
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }
}

#[cfg(test)]
mod tests;
