//! What a run produced, for the scenario's predicates.

use std::collections::{BTreeMap, BTreeSet};

use servery_core::supervisor::{ExitReason, FailureReason, Status};

use crate::plan::FaultKind;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestStats {
    pub ok: u64,
    /// In flight on a worker that misbehaved (crash, hang, malformed frame, abrupt exit).
    pub failed_fault: u64,
    /// In flight on a healthy worker that was killed or gave up its drain.
    pub failed_forced: u64,
    /// Arrived after the listeners closed.
    pub refused: u64,
    /// Still queued when the run ended.
    pub stranded: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadStats {
    pub ok: u64,
    pub conflict: u64,
    pub saturated: u64,
    pub failed_closed: u64,
    pub failed_fault: u64,
    pub failed_forced: u64,
    /// A temp-file write failed with ENOSPC (507): nothing was published.
    pub no_space: u64,
    /// The publishing rename failed (500): nothing was published.
    pub io_error: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogStats {
    pub produced: u64,
    pub written: u64,
    /// Refused by the parent under the drop policy.
    pub dropped: u64,
    /// Not even sent: the worker's broker client was saturated under the drop policy.
    pub dropped_local: u64,
    pub lost_with_worker: u64,
    pub max_queue: usize,
}

/// How one upload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadEnd {
    Ok,
    /// The target's lease was held by another upload.
    Conflict,
    /// A broker budget, table or the client's queue was full.
    Saturated,
    /// The broker could not be asked (parent gone, no answer in time).
    FailedClosed,
    /// In flight on a worker that died.
    Lost,
    /// A temp-file write failed with ENOSPC: 507.
    NoSpace,
    /// The publishing rename failed: 500.
    IoError,
}

/// One upload, from its arrival at the listener to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadRecord {
    pub target: u8,
    /// When the client arrived (ms of virtual time).
    pub started_ms: u64,
    pub ended_ms: u64,
    pub end: UploadEnd,
}

/// What a WebDAV request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DavOp {
    Lock {
        depth_infinity: bool,
        exclusive: bool,
        timeout_ms: u64,
    },
    /// LOCK without a body, the token in `If`.
    Refresh { timeout_ms: u64 },
    /// UNLOCK, the token in `Lock-Token`.
    Unlock,
    /// PUT; with a token, in a tagged `If` naming its lock's root.
    Put,
    /// DELETE: the lock check of its tree and its collection's membership.
    Delete,
    /// COPY onto `to`: the lock check of the destination's tree.
    Copy { to: &'static str },
    /// MOVE to `to`: the lock checks of the source's tree, then the destination's.
    Move { to: &'static str },
    /// MKCOL: the lock check of its collection's membership.
    Mkcol,
    /// PROPPATCH: the lock check of the resource's own locks.
    Proppatch,
    /// PROPFIND Depth 1 of a collection: which locks `lockdiscovery` shows per member.
    Propfind,
}

/// What a WebDAV request's `If` header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DavIf {
    /// No `If` header.
    None,
    /// `If: <lock root> (<token>)`: the token, tagged with its lock's root.
    Tagged,
    /// `If: (<token>)`: the token, about the request's own resource.
    Untagged,
    /// A header that does not parse.
    Malformed,
}

/// How a WebDAV request ended, as the real worker answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DavEnd {
    /// LOCK granted (200, `Lock-Token`).
    Granted,
    /// Refresh granted (200).
    Refreshed,
    /// UNLOCK done (204).
    Unlocked,
    /// The PUT passed the lock check and was published (201/204).
    Written,
    /// 423 `lock-token-submitted`: a live lock protects the PUT's target and its token was
    /// not submitted.
    Locked,
    /// 423 `no-conflicting-lock`: the LOCK conflicts with a lock held.
    Conflict,
    /// 503: the broker's lock table is full.
    Saturated,
    /// 503: the worker's broker client had too many requests outstanding.
    ClientBusy,
    /// 412: the `If` header named a token that is no lock on its resource (an ended
    /// lock's).
    PreconditionFailed,
    /// 409: UNLOCK or refresh of a token that is no lock there.
    NoSuchLock,
    /// The PUT passed the lock check, and the write flow then ended so.
    WriteFailed(UploadEnd),
    /// The broker could not be asked (parent gone, no answer in time).
    FailedClosed,
    /// 400: the `If` header does not parse.
    BadIf,
    /// 403: a write (or a LOCK that would create a resource) on a read-only share.
    ReadOnly,
    /// The lock check passed; the simulation does not perform the write itself (DELETE,
    /// COPY, MOVE, MKCOL, PROPPATCH), nor the PROPFIND's answer.
    Passed,
    /// In flight on a worker that died.
    Lost,
    /// Arrived after the listeners closed.
    Refused,
}

/// One WebDAV request, from its arrival at the listener to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DavRecord {
    /// The lock client that sent it (`None`: a writer without a lock).
    pub client: Option<u64>,
    pub op: DavOp,
    /// The request's path.
    pub resource: String,
    /// The lock token it carries, or the one its LOCK was granted.
    pub token: Option<u128>,
    /// The root of the lock whose token it carries (what its `If` names).
    pub lock_root: Option<&'static str>,
    /// What its `If` header says.
    pub if_header: DavIf,
    /// The worker that took it and that worker's generation.
    pub worker: Option<u64>,
    pub generation: u64,
    pub arrived_ns: u64,
    /// When the worker sent its first broker request for it, and when the last answer its
    /// decision rests on arrived (0 when it asked nothing): the broker judged it in
    /// between.
    pub asked_ns: u64,
    pub answered_ns: u64,
    /// A write's lock check (with its `If`): passed (on to the write) or refused.
    pub allowed: Option<bool>,
    /// The broker's answer to its `DavLock`, as the parent sent it.
    pub lock_answer: Option<DavAnswer>,
    /// The lock its `DavRefresh` or `DavUnlock` named, as the parent read it.
    pub acted_on: Option<u128>,
    /// A PROPFIND's `lockdiscovery`: each member listed and the tokens shown for it.
    pub discovered: Vec<(String, Vec<u128>)>,
    pub ended_ns: u64,
    /// `None` while in flight (at the end of the run: never answered).
    pub end: Option<DavEnd>,
}

/// A lock the broker granted, as the simulator saw it: the grant and every later answer
/// for its token on the control channels, and whether the broker's table held it at each
/// step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DavLockRecord {
    pub token: u128,
    pub resource: String,
    pub depth_infinity: bool,
    pub exclusive: bool,
    /// The worker the grant was sent to.
    pub granted_to: u64,
    pub granted_ns: u64,
    /// When the broker said it ends: its grant or latest refresh plus the timeout that
    /// answer gave (ns).
    pub promised_end_ns: u64,
    pub refreshes: u32,
    /// When an UNLOCK of it was answered `Released`.
    pub unlocked_ns: Option<u64>,
    /// The last step after which the broker's table held it, and the first after which
    /// it did not.
    pub last_seen_ns: u64,
    pub gone_ns: Option<u64>,
}

/// What the broker's lock table answered to a LOCK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DavAnswer {
    Granted,
    Busy,
    Saturated,
    Other,
}

/// One LOCK the broker decided, with the table as it stood when it decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DavLockDecision {
    pub at_ns: u64,
    /// Locks in the table just before it decided, and the table's limit.
    pub table_len: usize,
    pub limit: usize,
    pub answer: DavAnswer,
}

/// The WebDAV side of a run ([`crate::DavWorkload`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DavOutcome {
    /// Every WebDAV request, in arrival order.
    pub log: Vec<DavRecord>,
    /// Every lock the broker granted, in grant order.
    pub locks: Vec<DavLockRecord>,
    /// Every LOCK the broker answered, in order.
    pub decisions: Vec<DavLockDecision>,
    /// The most locks the table held after any step.
    pub table_max: usize,
    /// Steps after which the table held entries no grant the simulator saw accounts for:
    /// (ns, entries, known live grants). The first few.
    pub untracked: Vec<(u64, usize, usize)>,
    /// Workers a [`crate::Fault::CrashDavGranter`] killed, with the lock they granted.
    pub granters_killed: Vec<(u64, u128)>,
    /// The share takes no writes (`features.uploads` off).
    pub read_only: bool,
}

/// A fault that took effect: when, what, and on which worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    pub at_ms: u64,
    pub kind: FaultKind,
    /// The worker it hit (`None` for the parent's own faults).
    pub worker: Option<u64>,
    /// The upload targets the worker held a lease on when it was hit.
    pub targets: Vec<u8>,
}

/// An application shutdown a simulated worker started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppShutdownRecord {
    pub worker: u64,
    /// When it started, and how long it takes when it is not cut (ms).
    pub started_ms: u64,
    pub takes_ms: u64,
    /// Connections the worker still held when it started.
    pub in_flight: u32,
}

/// A worker the parent reaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerExit {
    pub worker: u64,
    /// Why it ended. A real run learns it only for a worker that was the last failure.
    pub reason: Option<ExitReason>,
    /// When it was reaped (ms of virtual time).
    pub at_ms: u64,
}

/// What the power losses of torn renames did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TornRenames {
    pub kept: u64,
    pub undone: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub seed: u64,
    pub exit_code: Option<i32>,
    pub parent_crashed: bool,
    pub exit_at_ms: Option<u64>,
    /// Invariant breaches seen during the run (empty when all held).
    pub violations: Vec<String>,
    /// The simulation could not make progress or ran past its bound.
    pub stalled: Option<String>,
    pub liveness: Option<Status>,
    pub failure: Option<FailureReason>,
    pub failure_message: Option<String>,
    /// When the service failed (ms of virtual time).
    pub failure_at_ms: Option<u64>,
    /// When the parent exited or crashed (ms of virtual time).
    pub parent_gone_ms: u64,
    /// When the plan's graceful stop was issued (ms of virtual time), if it was.
    pub stop_ms: Option<u64>,
    pub requests: RequestStats,
    /// Each plain request answered (`requests.ok`), in the order answered: µs from its
    /// arrival at the listener to its answer. Failed and refused requests have none.
    pub request_latency_us: Vec<u64>,
    pub uploads: UploadStats,
    /// Each successful upload: its target and when it was answered (ms).
    pub upload_oks: Vec<(u8, u64)>,
    pub log: LogStats,
    pub max_live_processes: usize,
    /// Every change of the committed generation's ready workers: (ms of virtual time,
    /// ready workers from then on), the first entry the first change.
    pub ready_changes: Vec<(u64, u32)>,
    pub spawns: u64,
    /// When each process was spawned (ms of virtual time), in spawn order.
    pub spawn_times_ms: Vec<u64>,
    /// TERMs the parent sent.
    pub terms_sent: u64,
    pub processes_alive_at_end: usize,
    pub last_process_exit_ms: u64,
    pub temp_files_at_end: usize,
    pub torn_files: usize,
    /// Torn renames met ([`crate::Fault::TornRename`]): how many renames the power loss
    /// kept, how many it undid.
    pub torn_renames: TornRenames,
    /// Writes answered as failed because the fsync of their directory after the
    /// publishing rename failed ([`crate::Fault::DirSyncFails`]): the whole file is in
    /// place, its durability unknown.
    pub unsynced_renames: u64,
    pub leases_at_exit: usize,
    pub reload_rejections: Vec<String>,
    /// Each control-socket request's answer as relayed, by the request's place in the
    /// plan's commands (the answer rule judges them as they come).
    pub answers: Vec<(u64, servery_core::control::Answer)>,
    /// Each status request: when it was made and when it was answered (ms), and the ready
    /// workers and restarts the answer reported.
    pub status_answers: Vec<StatusAnswer>,
    pub recycling_suspended: bool,
    pub generations_committed: Vec<u64>,
    pub singleton_starts: u32,
    pub singleton_stops: u32,
    pub singleton_switches: u32,
    /// WebDAV tree requests and what the oracle saw ([`crate::DavTreePlan`]).
    pub dav_tree: crate::dav_tree::TreeOutcome,
    /// Resumable uploads and what the oracle saw ([`crate::ResumablePlan`]).
    pub chunks: crate::chunks::ChunkOutcome,
    /// What the proxy and CGI oracle saw ([`crate::ProxyPlan`]).
    pub proxy: crate::proxy::ProxyOutcome,
    pub crash_faults: u64,
    pub hangs_injected: u64,
    /// Workers a hang fault stopped: (worker id, ms of virtual time).
    pub hangs: Vec<(u64, u64)>,
    /// Workers whose application wedged ([`crate::Behavior::AppWedgesAfterRequests`]):
    /// (worker id, ms of virtual time).
    pub app_wedges: Vec<(u64, u64)>,
    /// With an application ([`crate::Workload::app`]): per worker, the most heartbeats
    /// in a row it sent reporting memory above `worker_max_rss`.
    pub memory_streaks: std::collections::BTreeMap<u64, u32>,
    /// Workers the modelled OOM killer ended (`AppModel::oom_limit`), with when (ms).
    pub oom_kills: Vec<(u64, u64)>,
    /// With an application: per worker, the most memory (bytes) it reported in a
    /// heartbeat, what an RSS limit is judged on.
    pub memory_peaks: std::collections::BTreeMap<u64, u64>,
    /// Per worker, when it stopped accepting (ms of virtual time): its drain began.
    pub drains_started: std::collections::BTreeMap<u64, u64>,
    /// Each application shutdown a worker started ([`crate::AppModel::shutdown_ms`]).
    pub app_shutdowns: Vec<AppShutdownRecord>,
    /// Workers a pause fault stopped: (worker id, ms stopped, ms its resume is due).
    pub pauses: Vec<(u64, u64, u64)>,
    /// Every worker the parent reaped, in order.
    pub exits: Vec<WorkerExit>,
    /// Spawns the host refused ([`crate::Behavior::SpawnFails`]).
    pub spawn_failures: u64,
    /// Workers whose control channel broke on a parent write: (worker id, ms).
    pub write_failures: Vec<(u64, u64)>,
    /// Clock jumps: (ms of virtual time before the jump, length in ms).
    pub clock_jumps: Vec<(u64, u64)>,
    /// Frames written in pieces ([`crate::Fault::ShortWrites`]).
    pub short_writes: u64,
    /// Faults that last a while, as they ran: (kind, from ms, until ms).
    pub fault_windows: Vec<(FaultKind, u64, u64)>,
    pub parent_eof_exits: u64,
    /// Processes that misbehaved by design: (spawn index, kind), in spawn order.
    pub misbehaving: Vec<(u64, FaultKind)>,
    /// Every planned fault that took effect, in order (a fault that found no victim is
    /// not listed).
    pub injected: Vec<Injected>,
    /// Requests and uploads that failed on a misbehaving worker, by the kind of
    /// misbehaviour that worker was charged with (the first, when two hit it). Sums to
    /// `requests.failed_fault + uploads.failed_fault`.
    pub failed_by_cause: BTreeMap<FaultKind, u64>,
    /// Every upload that reached a worker or the listener, in the order they ended.
    pub upload_log: Vec<UploadRecord>,
    /// WebDAV requests and the broker's lock table (empty without a DAV workload).
    pub dav: DavOutcome,
    /// The certificate manager and the workers' identities (with a certificate plan).
    pub certs: crate::certs::CertOutcome,
    /// The certificate files read on reload (with a certificate-files plan).
    pub tls_files: crate::tls_files::TlsFilesOutcome,
    /// Coverage labels reached (see [`crate::labels`] and the scenarios' goals).
    pub coverage: BTreeSet<&'static str>,
    pub events: u64,
    pub trace_hash: u64,
    pub trace: Vec<String>,
}

impl Outcome {
    pub fn failed_requests(&self) -> u64 {
        self.requests.failed_fault + self.requests.failed_forced
    }

    /// The fault kinds the run injected: planned faults that took effect and the
    /// behaviours of processes that misbehaved by design.
    pub fn injected_kinds(&self) -> BTreeSet<FaultKind> {
        self.injected
            .iter()
            .map(|i| i.kind)
            .chain(self.misbehaving.iter().map(|(_, k)| *k))
            .collect()
    }
}

/// One answered status request ([`crate::SimCommand::Status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusAnswer {
    pub asked_ms: u64,
    pub answered_ms: u64,
    pub ready_workers: usize,
    pub restarts: u64,
}
