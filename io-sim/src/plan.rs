//! What a simulation run is made of: configuration, workload, faults, commands.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_core::supervisor::Platform;
use servery_core::{Generation, Slot};

use crate::rng::SimRng;

/// How a simulated worker process behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behavior {
    Healthy,
    /// Reports a startup error (e.g. cannot open the root) and exits.
    FailStartup(String),
    /// Dies before preparing.
    CrashAtBoot,
    /// Dies after PREPARED, before COMMIT arrives.
    CrashBetweenPrepareAndCommit,
    /// Wedges while preparing (the start timeout must catch it).
    HangAtBoot,
    /// Takes this long to prepare.
    SlowBoot(Duration),
    /// Crashes after serving this many requests.
    CrashAfterRequests(u64),
    /// Ignores TERM and never finishes its drain: only KILL ends it.
    WedgedDrain,
    /// Exits abruptly as soon as it is told to drain, dropping in-flight work.
    ExitDuringDrain,
}

/// What the scenario knows when it picks a behavior for a new process.
#[derive(Debug, Clone, Copy)]
pub struct SpawnInfo {
    /// 0 for the first process the parent spawns, 1 for the next, …
    pub index: u64,
    pub slot: Slot,
    pub generation: Generation,
    pub now: Duration,
}

pub type BehaviorFn = Box<dyn Fn(&SpawnInfo, &mut SimRng) -> Behavior>;

/// A fault injected at a moment of the run.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// `kill -9` of a live worker, picked by `pick` among live workers.
    CrashWorker { pick: u64 },
    /// `SIGSTOP` of a live ready worker.
    HangWorker { pick: u64 },
    /// The worker writes garbage on its control channel.
    MalformedFrame { pick: u64 },
    /// Crash the worker that holds the most recent lease, if any.
    CrashLeaseHolder,
    /// The parent process dies (`kill -9`).
    CrashParent,
    /// The parent stops running for this long (`SIGSTOP`, swapped out, starved) while its
    /// workers run on: their frames, exits and operator commands wait until it resumes.
    StallParent(Duration),
}

/// Operator commands at moments of the run.
#[derive(Debug, Clone, PartialEq)]
pub enum SimCommand {
    Stop,
    Reload(Box<RawConfig>),
    Recycle,
    /// `ctl status`: answered after the step it wakes the parent for
    /// ([`crate::Outcome::status_answers`]).
    Status,
}

/// Client load.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Plain GETs per second (Poisson).
    pub request_rate: f64,
    /// Service time of one request, uniform in this range (ms).
    pub service_ms: (u64, u64),
    /// Uploads per second (Poisson); 0 disables the write flow.
    pub upload_rate: f64,
    /// Uploads pick uniformly among this many targets.
    pub upload_targets: u8,
    /// Chunks per upload and time between chunks (ms).
    pub upload_chunks: u64,
    pub chunk_ms: (u64, u64),
    /// Each served request appends an access-log record.
    pub access_log: bool,
    /// Log records the parent's writer persists per second.
    pub log_write_rate: f64,
    /// Clients stop sending after this point of the run.
    pub until: Duration,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            request_rate: 20.0,
            service_ms: (1, 20),
            upload_rate: 0.0,
            upload_targets: 2,
            upload_chunks: 4,
            chunk_ms: (2, 30),
            access_log: false,
            log_write_rate: 50_000.0,
            until: Duration::from_secs(3600),
        }
    }
}

/// Everything a run needs.
pub struct SimSpec {
    pub seed: u64,
    pub platform: Platform,
    pub config: RawConfig,
    pub workload: Workload,
    pub behavior: BehaviorFn,
    pub faults: Vec<(Duration, Fault)>,
    pub commands: Vec<(Duration, SimCommand)>,
    /// When the fault phase ends and liveness is judged (status snapshot taken).
    pub liveness_at: Duration,
    /// When the graceful stop is issued (if the service still runs).
    pub stop_at: Duration,
    /// Hard bound on virtual time: reaching it is a failure (something hung).
    pub end_by: Duration,
    pub trace: bool,
}

impl core::fmt::Debug for SimSpec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SimSpec")
            .field("seed", &self.seed)
            .field("platform", &self.platform)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}
