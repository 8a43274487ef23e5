//! The supervisor's record of one worker process.

use core::time::Duration;

use crate::ids::{Generation, Slot, WorkerId};
use crate::time::Instant;

use super::types::{ExitReason, WorkerState};

/// Why a worker exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Part of a generation that is being rolled out (first start or reload).
    Candidate,
    /// Serves its slot in the committed generation (including crash replacements).
    Member,
    /// Recycle replacement for its slot, waiting to be committed.
    Replacement,
    /// No longer serves a slot: draining or being stopped.
    Retired,
}

impl Role {
    pub const ALL: [Role; 4] = [
        Role::Candidate,
        Role::Member,
        Role::Replacement,
        Role::Retired,
    ];

    pub fn from_name(name: &str) -> Option<Role> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Candidate => "candidate",
            Role::Member => "member",
            Role::Replacement => "replacement",
            Role::Retired => "retired",
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Worker {
    pub id: WorkerId,
    pub slot: Slot,
    pub generation: Generation,
    pub role: Role,
    pub state: WorkerState,
    pub pid: Option<u32>,
    /// The CPUs it was started on; `None`: not pinned.
    pub cpus: Option<crate::cpu_affinity::CpuSet>,
    pub spawned_at: Instant,
    pub ready_at: Option<Instant>,
    pub last_beat: Instant,
    pub requests: u64,
    /// Its request counters, as its latest heartbeat gave them.
    pub stats: std::sync::Arc<crate::request_stats::RequestStats>,
    pub request_limit: Option<u64>,
    /// Resident memory in bytes, as its latest heartbeat gave it (0: not measured).
    pub memory: u64,
    /// Connections it held at its latest heartbeat.
    pub connections: u32,
    /// Requests in progress at its latest heartbeat.
    pub requests_in_progress: u32,
    /// `worker_max_rss` as it was when the worker became ready.
    pub memory_limit: Option<u64>,
    /// Its previous heartbeat was above `worker_max_rss` too.
    pub memory_over: bool,
    pub age_deadline: Option<Instant>,
    pub recycle_due: Option<ExitReason>,
    /// COMMIT was sent.
    pub committed: bool,
    /// WorkerGone was emitted.
    pub gone: bool,
    /// The supervisor decided to end this worker, and why.
    pub ending: Option<ExitReason>,
    pub drain_deadline: Option<Instant>,
    pub term_sent: bool,
    pub kill_at: Option<Instant>,
    pub kill_sent: bool,
    /// The worker's own words about why it failed, or the supervisor's.
    pub error: Option<String>,
    /// Timings of the configuration it was spawned under, set before it is filed in the
    /// supervisor's table and never changed (the table keeps their least margin).
    pub heartbeat_interval: Duration,
    pub heartbeat_timeout: Duration,
    pub start_timeout: Duration,
    /// Time the parent did not run while this worker lived (decision 0017): it extends
    /// the start deadline, as it is not counted in any heartbeat silence.
    pub not_running: Duration,
}

impl Worker {
    /// Ordered to end by signal, or lost its channel (a kill follows): whatever its state
    /// says, it no longer counts as serving.
    pub(super) fn is_being_ended(&self) -> bool {
        self.gone || self.term_sent || self.kill_sent
    }

    pub(super) fn new(
        id: WorkerId,
        slot: Slot,
        generation: Generation,
        role: Role,
        now: Instant,
    ) -> Self {
        Worker {
            id,
            slot,
            generation,
            role,
            state: WorkerState::Spawning,
            pid: None,
            cpus: None,
            spawned_at: now,
            ready_at: None,
            last_beat: now,
            requests: 0,
            stats: std::sync::Arc::default(),
            request_limit: None,
            memory: 0,
            connections: 0,
            requests_in_progress: 0,
            memory_limit: None,
            memory_over: false,
            age_deadline: None,
            recycle_due: None,
            committed: false,
            gone: false,
            ending: None,
            drain_deadline: None,
            term_sent: false,
            kill_at: None,
            kill_sent: false,
            error: None,
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(5),
            start_timeout: Duration::from_secs(30),
            not_running: Duration::ZERO,
        }
    }

    /// When it must be ready by (`worker_start_timeout`, plus any time the parent did not
    /// run meanwhile).
    pub(super) fn start_deadline(&self) -> Instant {
        self.spawned_at + self.start_timeout + self.not_running
    }

    /// How long `heartbeat_timeout` leaves beyond one `heartbeat_interval`.
    pub(super) fn beat_margin(&self) -> Duration {
        self.heartbeat_timeout
            .saturating_sub(self.heartbeat_interval)
    }

    /// Whether new connections may be sent to it: it serves (ready, or committed and on
    /// its way to ready) and nothing is ending it.
    pub(super) fn accepts_new_connections(&self) -> bool {
        let serves = self.state == WorkerState::Ready
            || (self.state == WorkerState::Prepared && self.committed);
        serves && self.role != Role::Retired && self.ending.is_none() && !self.is_being_ended()
    }

    pub(super) fn before_ready(&self) -> bool {
        matches!(self.state, WorkerState::Spawning | WorkerState::Prepared)
    }
}
