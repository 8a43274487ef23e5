//! The supervisor's status snapshot.

use core::time::Duration;

use crate::ids::{Generation, Slot, WorkerId};
use crate::time::Instant;

use super::types::{ExitReason, FailureReason, ServiceState, WorkerState};
use super::worker::Role;

#[derive(Debug, Clone, PartialEq)]
pub struct FailureRecord {
    pub worker: WorkerId,
    pub slot: Slot,
    pub generation: Generation,
    pub reason: ExitReason,
    pub message: String,
    pub at: Instant,
}

/// A reaped worker and the reason code it ended with.
#[derive(Debug, Clone, PartialEq)]
pub struct ExitRecord {
    pub worker: WorkerId,
    pub slot: Slot,
    pub generation: Generation,
    pub reason: ExitReason,
    pub status: Option<super::types::ExitStatus>,
    pub at: Instant,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkerStatus {
    pub id: WorkerId,
    pub slot: Slot,
    pub pid: Option<u32>,
    /// The CPUs it runs on; `None`: not pinned (decision 0122).
    pub cpus: Option<crate::cpu_affinity::CpuSet>,
    pub generation: Generation,
    pub state: WorkerState,
    pub role: Role,
    pub requests: u64,
    /// Resident memory in bytes, as its latest heartbeat gave it (0: not measured).
    pub memory: u64,
    /// Connections it held at its latest heartbeat.
    pub connections: u32,
    /// Requests in progress at its latest heartbeat.
    pub requests_in_progress: u32,
    pub age: Duration,
}

/// How much of the configured service serves now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Workers accepting requests (at most `wanted`: a recycle's overlap is not extra
    /// capacity anyone planned for).
    pub ready: u32,
    /// `workers`, as the committed generation has it.
    pub wanted: u32,
    /// `min_ready_workers`: below it the service is not ready.
    pub minimum: u32,
}

/// What the service can do for a client now: `/readyz`, `ctl status`, the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Serving with every worker.
    Ready,
    /// Serving, with fewer workers than `workers` but at least `min_ready_workers`
    /// (crashed ones waiting out their backoff, a hang being replaced).
    Degraded,
    /// Not serving enough to be sent traffic: starting, stopping, failed, or below
    /// `min_ready_workers`.
    Unready,
}

impl Readiness {
    pub fn name(self) -> &'static str {
        match self {
            Readiness::Ready => "ready",
            Readiness::Degraded => "degraded",
            Readiness::Unready => "unready",
        }
    }

    /// Whether `/readyz` answers 200: ready, or degraded above the minimum.
    pub fn takes_traffic(self) -> bool {
        self != Readiness::Unready
    }

    pub const ALL: [Readiness; 3] = [Readiness::Ready, Readiness::Degraded, Readiness::Unready];
}

#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub state: ServiceState,
    pub readiness: Readiness,
    pub capacity: Capacity,
    pub generation: Generation,
    pub workers: Vec<WorkerStatus>,
    pub restarts: u64,
    pub recent_restarts: usize,
    pub last_failure: Option<FailureRecord>,
    /// The last reaped workers, oldest first, with their reason codes.
    pub recent_exits: Vec<ExitRecord>,
    pub failure: Option<(FailureReason, String)>,
    pub recycling_suspended: Option<String>,
    pub recycle_in_flight: bool,
    pub reload_in_flight: bool,
    pub last_reload_error: Option<String>,
    /// Under `--http3`: who reads which QUIC socket and which take new connections, as
    /// the supervisor last decided it (decision 0079).
    pub http3: Option<super::QuicSteering>,
}

impl super::Supervisor {
    /// Workers accepting requests, against those configured.
    pub fn capacity(&self) -> Capacity {
        let wanted = self.config.workers();
        let ready = self
            .workers
            .values()
            .filter(|w| w.state == WorkerState::Ready && !w.is_being_ended())
            .count();
        Capacity {
            ready: u32::try_from(ready).unwrap_or(u32::MAX).min(wanted),
            wanted,
            minimum: self.config.recovery().min_ready_workers(),
        }
    }

    /// Whether the service takes traffic, and with all of its workers: only a service in
    /// the `ready` state can, and then by how many of its workers accept.
    pub fn readiness(&self) -> Readiness {
        let capacity = self.capacity();
        if self.state != ServiceState::Ready || capacity.ready < capacity.minimum {
            Readiness::Unready
        } else if capacity.ready < capacity.wanted {
            Readiness::Degraded
        } else {
            Readiness::Ready
        }
    }

    pub fn status(&self, now: Instant) -> Status {
        Status {
            state: self.state,
            readiness: self.readiness(),
            capacity: self.capacity(),
            generation: self.committed,
            workers: self
                .workers
                .values()
                .map(|w| WorkerStatus {
                    id: w.id,
                    slot: w.slot,
                    pid: w.pid,
                    cpus: w.cpus.clone(),
                    generation: w.generation,
                    state: w.state,
                    role: w.role,
                    requests: w.requests,
                    memory: w.memory,
                    connections: w.connections,
                    requests_in_progress: w.requests_in_progress,
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
            reload_in_flight: self.reload_in_flight(),
            last_reload_error: self.last_reload_error.clone(),
            http3: self.quic.steering().cloned(),
        }
    }
}
