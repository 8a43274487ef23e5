//! Resumable uploads in the simulation, opt-in through [`crate::Workload::resumable`]: a
//! client that uploads files in chunks (`PUT` with `Content-Range`, each chunk naming its
//! offset; after a lost answer it asks `bytes */total` and resumes from the `have` it is
//! told), workers that carry each chunk out by driving the core's
//! [`servery_core::chunk_flow`] — the machine the real worker drives
//! (`io-real/src/write/chunk_run.rs`) — against the simulated file system
//! ([`crate::fs::SimFs`]'s partial and meta files) with the broker's reservations, target
//! leases and partial reservations, and a plan that kills the worker before a chosen step.
//!
//! What the oracle records for the scenario's predicates ([`ChunkOutcome`]): every
//! request as sent and answered, and the first breaches it saw of what a client may rely
//! on — checked after every step of a flow and after every parent step.

mod client;
mod worker;

use servery_core::chunk_flow::{ChunkAction, ChunkDone, ChunkFailure};
use servery_core::proto::TargetKey;

pub(crate) use client::ChunkSim;

/// The simulated file system's target the resumable uploads publish (upload targets and
/// WebDAV's stay below it).
pub const TARGET: u8 = 250;

/// Its lease key.
pub(crate) fn target_key() -> TargetKey {
    TargetKey {
        dir_device: 1,
        dir_inode: 4,
        name: "resumable.bin".to_owned(),
    }
}

/// Where the plan kills the worker: before an action of the chunk flow, or inside one of
/// the two actions that take a while (the meta file's temp written but not yet renamed
/// over the meta file; part of the chunk appended).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChunkStep {
    Reserve,
    Lease,
    InspectTarget,
    InspectPartial,
    DiscardStale,
    TakePartial,
    TakeOver,
    Record,
    MidRecord,
    OpenAt,
    Copy,
    MidCopy,
    Sync,
    ConfirmLease,
    Publish,
    SyncDirectory,
    RemovePartial,
    KeepPartial,
    ReleasePartial,
    ReleaseLease,
    ReleaseReservation,
    Answer,
}

impl ChunkStep {
    pub const ALL: [ChunkStep; 22] = [
        ChunkStep::Reserve,
        ChunkStep::Lease,
        ChunkStep::InspectTarget,
        ChunkStep::InspectPartial,
        ChunkStep::DiscardStale,
        ChunkStep::TakePartial,
        ChunkStep::TakeOver,
        ChunkStep::Record,
        ChunkStep::MidRecord,
        ChunkStep::OpenAt,
        ChunkStep::Copy,
        ChunkStep::MidCopy,
        ChunkStep::Sync,
        ChunkStep::ConfirmLease,
        ChunkStep::Publish,
        ChunkStep::SyncDirectory,
        ChunkStep::RemovePartial,
        ChunkStep::KeepPartial,
        ChunkStep::ReleasePartial,
        ChunkStep::ReleaseLease,
        ChunkStep::ReleaseReservation,
        ChunkStep::Answer,
    ];

    pub fn of(action: &ChunkAction) -> ChunkStep {
        match action {
            ChunkAction::Reserve { .. } => ChunkStep::Reserve,
            ChunkAction::Lease => ChunkStep::Lease,
            ChunkAction::InspectTarget => ChunkStep::InspectTarget,
            ChunkAction::InspectPartial => ChunkStep::InspectPartial,
            ChunkAction::DiscardStale => ChunkStep::DiscardStale,
            ChunkAction::TakePartial { .. } => ChunkStep::TakePartial,
            ChunkAction::TakeOver(_) => ChunkStep::TakeOver,
            ChunkAction::Record(_) => ChunkStep::Record,
            ChunkAction::OpenAt { .. } => ChunkStep::OpenAt,
            ChunkAction::Copy { .. } => ChunkStep::Copy,
            ChunkAction::Sync => ChunkStep::Sync,
            ChunkAction::ConfirmLease => ChunkStep::ConfirmLease,
            ChunkAction::Publish { .. } => ChunkStep::Publish,
            ChunkAction::SyncDirectory => ChunkStep::SyncDirectory,
            ChunkAction::RemovePartial => ChunkStep::RemovePartial,
            ChunkAction::KeepPartial(_) => ChunkStep::KeepPartial,
            ChunkAction::ReleasePartial(_) => ChunkStep::ReleasePartial,
            ChunkAction::ReleaseLease(_) => ChunkStep::ReleaseLease,
            ChunkAction::ReleaseReservation(_) => ChunkStep::ReleaseReservation,
            ChunkAction::Finish(_) => ChunkStep::Answer,
        }
    }

    /// The coverage label of a worker killed here.
    pub fn killed_label(self) -> &'static str {
        crate::labels::CHUNK_KILLED_BEFORE[self as usize]
    }

    /// Whether only the upload's last chunk (or one after every byte is held) takes it.
    pub fn last_chunk_only(self) -> bool {
        matches!(
            self,
            ChunkStep::ConfirmLease
                | ChunkStep::Publish
                | ChunkStep::SyncDirectory
                | ChunkStep::RemovePartial
        )
    }
}

/// The resumable-upload workload.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumablePlan {
    /// Files uploaded one after the other: their lengths.
    pub totals: Vec<u64>,
    /// A chunk's length (uniform) from the upload's total divided by `.0` to the total
    /// divided by `.1`.
    pub chunk_parts: (u64, u64),
    /// The chance a chunk request's worker is killed before a step, and the steps drawn
    /// from (uniformly).
    pub kill_chance: f64,
    pub kill_steps: Vec<ChunkStep>,
    /// No kill is drawn for a chunk sent after this point of the run, nor a wait past the
    /// TTL: the slots the kills emptied are refilled by the liveness point, and the
    /// client finishes its uploads.
    pub faults_until: core::time::Duration,
    /// The chance a chunk resends bytes already held (its overlap is dropped), and the
    /// chance it starts past them (a gap: 409, then the client asks).
    pub overlap_chance: f64,
    pub gap_chance: f64,
    /// The chance the client waits past the partial TTL before its next chunk (the held
    /// partial is then stale and discarded).
    pub stale_chance: f64,
    /// The first request, and the time between an answer and the next request (ms).
    pub start: core::time::Duration,
    pub gap_ms: (u64, u64),
    /// The time one chunk's bytes take to arrive (ms).
    pub copy_ms: (u64, u64),
    /// How long the client must have been idle before a lease or reservation still held
    /// counts as leaked: the releases of an answered chunk are still on their way.
    pub idle_grace: core::time::Duration,
    /// Requests one upload may take before the client gives up (the predicates then
    /// fail: every upload must complete).
    pub max_requests: u32,
}

/// What a request was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkRequest {
    /// `Content-Range: bytes start-end/total`.
    Chunk { start: u64, end: u64 },
    /// `Content-Range: bytes */total`: how much is held?
    Query,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkEnd {
    Done(ChunkDone),
    Failed(ChunkFailure),
    /// The answer to a query: this many bytes are held.
    Held(u64),
    /// Its worker died first: no answer.
    Lost,
    /// The listener was closed.
    Refused,
}

/// One request as sent and answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRecord {
    /// Which upload (from 0).
    pub upload: u32,
    pub request: ChunkRequest,
    pub kill_before: Option<(ChunkStep, u32)>,
    pub worker: Option<u64>,
    pub sent_ns: u64,
    pub ended_ns: u64,
    pub end: Option<ChunkEnd>,
    pub killed_before: Option<ChunkStep>,
}

impl ChunkRecord {
    pub fn describe(&self) -> String {
        let what = match self.request {
            ChunkRequest::Chunk { start, end } => format!("chunk {start}-{end}"),
            ChunkRequest::Query => "query */total".to_owned(),
        };
        format!(
            "upload {} {what}{} (w{}, sent at {} ms)",
            self.upload,
            self.killed_before
                .map_or(String::new(), |s| format!(", worker killed before {s:?}")),
            self.worker.unwrap_or_default(),
            self.sent_ns / 1_000_000
        )
    }
}

/// What the resumable workload's oracle saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkOutcome {
    pub requests: Vec<ChunkRecord>,
    /// Uploads answered Complete.
    pub completed: u32,
    pub planned: u32,
    /// (ns, what): the first breaches of the file-system predicates (the target seen
    /// half written, held bytes that are not the client's, a partial that went backwards,
    /// a `have` that does not match what is held, a Complete without the whole file).
    pub file_breaches: Vec<(u64, String)>,
    /// (ns, what, worker): a lease, reservation or partial reservation the broker still
    /// listed as owned by a worker the parent had let go. The first few.
    pub stale_grants: Vec<(u64, &'static str, u64)>,
    /// (ns, leases + reservations): held while the client had been idle for the grace.
    pub idle_grants: Vec<(u64, usize)>,
    /// (ns, worker): a private temp file of a worker the parent had let go.
    pub stale_temps: Vec<(u64, u64)>,
    /// Observations made while the client was idle.
    pub idle_observations: u64,
    /// Left in the broker (leases, reservations, partial reservations) and on the file
    /// system (temp files, partial or meta files) when the run ended.
    pub grants_at_end: usize,
    pub partials_at_end: usize,
    pub temps_at_end: usize,
    pub partial_files_at_end: usize,
}

/// The bytes of upload `n` of a run: a seeded pattern, so a wrong byte anywhere is seen.
pub fn content(seed: u64, n: u32, total: u64) -> Vec<u8> {
    let mut x = (seed ^ (u64::from(n) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
    (0..total)
        .map(|_| {
            // xorshift64*: every byte depends on the seed, the upload and its offset.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}
