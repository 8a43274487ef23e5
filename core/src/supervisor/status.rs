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
    pub generation: Generation,
    pub state: WorkerState,
    pub role: Role,
    pub requests: u64,
    /// Resident memory in bytes, as its latest heartbeat gave it (0: not measured).
    pub memory: u64,
    pub age: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub state: ServiceState,
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
}

impl super::Supervisor {
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
                    memory: w.memory,
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
        }
    }
}
