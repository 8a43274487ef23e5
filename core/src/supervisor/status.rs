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
