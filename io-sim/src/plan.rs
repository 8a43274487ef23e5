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
    /// The process cannot be created at all: the host's `fork` fails with this error
    /// (EAGAIN under `RLIMIT_NPROC`, ENOMEM). The parent gets `SpawnFailed`.
    SpawnFails(String),
    /// Crashes (`SIGSEGV`) this long after its boot finished, whatever it is doing then:
    /// a lifetime drawn by the workload (aging, a slow crash loop).
    CrashAfter(Duration),
    /// Takes `boot` to prepare, then crashes `lifetime` after its boot finished: a
    /// drawn lifetime with a boot long enough to count (the published rejuvenation
    /// models' repair and rejuvenation times).
    SlowBootCrashAfter {
        boot: Duration,
        lifetime: Duration,
    },
    /// Hosts an application ([`Workload::app`]) whose interpreter wedges once this many
    /// requests were served (a request stuck in C code holding the GIL): the process runs
    /// on and accepts, but its requests never finish and its probe stops answering.
    AppWedgesAfterRequests(u64),
    /// Hosts an application ([`Workload::app`]) whose startup in this process — the
    /// import, then the lifespan startup — takes simulated time and may fail with the
    /// application's reason. The worker reports PREPARED only once both finished, as a
    /// real worker does; a failure is its startup failure, carrying the reason.
    AppStartup(AppStartup),
}

/// An application's startup in one worker ([`Behavior::AppStartup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppStartup {
    /// How long the import (module code, the factory call) takes.
    pub import: Duration,
    /// How long the lifespan startup then takes (ASGI; zero for WSGI).
    pub lifespan: Duration,
    /// Where it fails and the application's reason (its exception's line); `None`: it
    /// starts.
    pub fails: Option<(AppStage, String)>,
    /// The worker's `--lifespan-timeout`: a lifespan startup still running this long after
    /// it began is cancelled and is the worker's startup failure, as the real worker
    /// words it. `None`: only the parent's start timeout bounds it.
    pub lifespan_timeout: Option<Duration>,
}

impl AppStartup {
    /// The lifespan startup runs past the worker's `--lifespan-timeout` (when the import
    /// gets that far).
    pub fn overruns_lifespan_timeout(&self) -> bool {
        self.lifespan_timeout.is_some_and(|t| self.lifespan > t)
    }

    /// The startup ends in a failure: the application's own, or the lifespan timeout's.
    pub fn fails(&self) -> bool {
        self.fails.is_some() || self.overruns_lifespan_timeout()
    }
}

/// The part of an application's startup that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppStage {
    Import,
    Lifespan,
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
    /// `SIGSTOP` of a live ready worker, then `SIGCONT` `duration` later (a GC storm, a
    /// stuck syscall, swapping): while stopped it sends, reads and serves nothing and
    /// takes no connection; what reached it meanwhile (control frames, its timers, the
    /// ends of the requests it holds) it handles on resuming, in the order it arrived.
    /// A TERM sent meanwhile stays pending until the resume (POSIX); KILL ends it at once.
    /// Under the Windows model it is `NtSuspendProcess` / `NtResumeProcess`: there is
    /// no TERM to hold, and `TerminateProcess` ends it at once, as KILL does.
    PauseWorker { pick: u64, duration: Duration },
    /// The worker writes garbage on its control channel.
    MalformedFrame { pick: u64 },
    /// Crash the worker that holds the most recent lease, if any.
    CrashLeaseHolder,
    /// The parent process dies (`kill -9`).
    CrashParent,
    /// The parent stops running for this long (`SIGSTOP`, swapped out, starved) while its
    /// workers run on: their frames, exits and operator commands wait until it resumes.
    StallParent(Duration),
    /// The control channel of a live worker (picked among live workers) breaks: the
    /// parent's next write to it fails (EPIPE), and the worker reads EOF from then on.
    ControlWriteFails { pick: u64 },
    /// For this long, writes on every control channel, both ways, may be short: a write
    /// goes out in two or three pieces, up to 5 ms apart (BUGGIFY: each write with
    /// probability ½).
    ShortWrites(Duration),
    /// `accept` fails with EMFILE for this long in one live worker (`Some(pick)`) or in
    /// every worker alive then (`None`): connections wait in the listen backlog.
    AcceptFails {
        pick: Option<u64>,
        duration: Duration,
    },
    /// The whole machine stops for this long and every process's monotonic clock jumps
    /// forward by it (a VM pause, a host suspend the clock still counts): timers due
    /// meanwhile all fire at the resume, in the order they were due.
    ClockJump(Duration),
    /// The file system is full for this long: writes to upload temp files fail (ENOSPC).
    DiskFull(Duration),
    /// For this long, the rename that publishes an upload fails (EIO): the temp file
    /// stays where it was and the target is untouched.
    RenameFails(Duration),
    /// `kill -9` of the worker that answered the most recent granted WebDAV LOCK, if it
    /// still lives (the lock belongs to the client and must outlive it).
    CrashDavGranter,
    /// From now on another program holds `port`: binding it fails (`EADDRINUSE`).
    PortBusy { port: u16 },
    /// For `duration`, every control channel delays what crosses it, both ways, by up to
    /// `max` more than its usual latency, drawn per write: a stream socket keeps each
    /// channel's order, but what crosses two channels (two workers' frames, one worker's
    /// frames and another's exit) arrives in any order the delays give. The parent finds
    /// what arrived meanwhile in one look, as a busy parent's next poll does; a worker's
    /// exit still comes after its last frames, which the reap reads out first (decision
    /// 0094). `max` stays below `heartbeat_timeout - heartbeat_interval`: a beat held
    /// longer is a hang by definition.
    ChannelDelay { duration: Duration, max: Duration },
    /// A live worker's clock (picked among live workers) runs at `rate_ppm` parts per
    /// million off the true rate (positive: fast) for `duration`, then true again: its
    /// beats, its drain deadline and its broker timeouts come early or late by that
    /// much. The parent's monotonic clock decides every deadline that ends a worker.
    ClockDrift {
        pick: u64,
        rate_ppm: i32,
        duration: Duration,
    },
    /// For this long, the fsync of an upload's temp file before its publish fails (EIO):
    /// nothing is published, the temp file goes, the client gets a 500. The same window
    /// fails the fsync of a resumable chunk's appended bytes and of a WebDAV COPY's
    /// staging copy.
    FsyncFails(Duration),
    /// For this long, the fsync of a directory after a publishing rename (an upload's, a
    /// resumable upload's last chunk's, a WebDAV COPY's or MOVE's placing) fails (EIO):
    /// the whole file is under its name, and the client is answered 500.
    DirSyncFails(Duration),
    /// The next write that has renamed into place loses the machine's power before the
    /// fsync of its directory: its worker dies there, and the rename survives the crash
    /// or not, as the seed draws (a torn rename). What was made durable before the rename
    /// is what the name shows if it survives; what was not is gone. The simulated parent
    /// goes on: what is judged is what the file system shows the restarted workers.
    TornRename,
}

/// Operator commands at moments of the run.
#[derive(Debug, Clone, PartialEq)]
pub enum SimCommand {
    /// SIGTERM.
    Stop,
    /// `ctl reload`: answered by the core when its generation commits or is rejected.
    Reload(Box<RawConfig>),
    /// SIGTTIN (+1) or SIGTTOU (-1): a reload of the spec's configuration with the
    /// committed worker count changed by this much.
    Resize(i32),
    /// `ctl recycle`: answered by the core, which the answer rule judges.
    Recycle,
    /// `ctl stop` (where [`SimCommand::Stop`] is SIGTERM, which has nobody to answer).
    CtlStop,
    /// `ctl status`: answered after the step it wakes the parent for
    /// ([`crate::Outcome::status_answers`]).
    Status,
}

/// Client load.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Plain GETs per second (Poisson).
    pub request_rate: f64,
    /// Time-varying load: from each `(point of the run, rate)` on, plain GETs arrive at
    /// that rate instead (a Poisson process drawn by thinning at the highest rate).
    /// Empty (the default): `request_rate` throughout, drawn as before steps existed.
    pub request_rate_steps: Vec<(Duration, f64)>,
    /// Service time of one request, uniform in this range (ms).
    pub service_ms: (u64, u64),
    /// Uploads per second (Poisson); 0 disables the write flow.
    pub upload_rate: f64,
    /// A burst: uploads arrive at this rate instead until this point of the run.
    pub upload_burst: Option<(f64, Duration)>,
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
    /// WebDAV lock clients and writers; `None` (the default) models no WebDAV at all,
    /// and a run draws, schedules and traces exactly what it did before DAV existed.
    pub dav: Option<DavWorkload>,
    /// TLS with an ACME certificate manager and a simulated CA; `None` (the default)
    /// serves cleartext, and a run draws, schedules and traces what it did before.
    pub certs: Option<crate::certs::CertPlan>,
    /// TLS from certificate files that each reload reads again, their contents changing
    /// at the plan's moments; `None` (the default): none, and a run draws, schedules and
    /// traces what it did before.
    pub tls_files: Option<crate::tls_files::TlsFilesPlan>,
    /// WebDAV tree requests (MOVE, COPY, DELETE of collections) one at a time, with
    /// workers killed between steps; `None` (the default): none, and a run draws,
    /// schedules and traces what it did before.
    pub dav_tree: Option<crate::dav_tree::DavTreePlan>,
    /// Resumable uploads (chunks with `Content-Range`) one request at a time, with
    /// workers killed between steps; `None` (the default): none, and a run draws,
    /// schedules and traces what it did before.
    pub resumable: Option<crate::chunks::ResumablePlan>,
    /// The workers host an application ([`AppModel`]); `None` (the default): they serve
    /// files, and a run draws, schedules and traces what it did before.
    pub app: Option<AppModel>,
    /// A reverse-proxied prefix with simulated upstreams, and CGI scripts; `None` (the
    /// default): neither, and a run draws, schedules and traces what it did before.
    pub proxy: Option<crate::proxy::ProxyPlan>,
}

/// What the simulated workers' application does to their lifecycle: its interpreter is
/// probed (a worker beats only while it answers), and its memory grows with the requests
/// it served, with passing peaks.
#[derive(Debug, Clone, PartialEq)]
pub struct AppModel {
    /// Resident bytes of a worker that served nothing.
    pub memory_base: u64,
    /// Bytes each served request adds for good (a leak).
    pub memory_per_request: u64,
    /// At each heartbeat, the chance of a passing peak: this beat only, the memory
    /// reported is `peak_bytes` more.
    pub peak_chance: f64,
    pub peak_bytes: u64,
    /// The application has a shutdown (ASGI lifespan) that takes this long (ms, uniform);
    /// `None`: none.
    pub shutdown_ms: Option<(u64, u64)>,
    /// The kernel's memory limit (a cgroup's `memory.max`, or what the machine has): the
    /// request that takes a worker's resident bytes past it gets the worker killed by the
    /// OOM killer (`SIGKILL`), a crash its supervisor sees. Passing peaks are not counted
    /// (they are reported, not allocated for good). `None`: no limit.
    pub oom_limit: Option<u64>,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            request_rate: 20.0,
            request_rate_steps: Vec::new(),
            service_ms: (1, 20),
            upload_rate: 0.0,
            upload_burst: None,
            upload_targets: 2,
            upload_chunks: 4,
            chunk_ms: (2, 30),
            access_log: false,
            log_write_rate: 50_000.0,
            until: Duration::from_secs(3600),
            dav: None,
            certs: None,
            tls_files: None,
            dav_tree: None,
            resumable: None,
            app: None,
            proxy: None,
        }
    }
}

/// The simulated share's WebDAV tree: the collection `/d`, the files in it and at the
/// root. Locks may name any of them; PUTs go to [`DAV_FILES`]. A PUT of `DAV_FILES[i]`
/// publishes the file system's target [`DAV_TARGET_BASE`]` + i` (upload targets stay
/// below it).
pub const DAV_COLLECTIONS: [&str; 1] = ["/d"];
pub const DAV_FILES: [&str; 4] = ["/d/a", "/d/b", "/e", "/f"];
pub const DAV_TARGET_BASE: u8 = 200;
/// URLs the share does not map (their collections do exist): a LOCK of one creates an
/// empty file (RFC 4918 §7.3), a MKCOL a collection, a COPY or MOVE may land there.
/// The simulation keeps them unmapped: the lock-checked writes of [`DavWriteKind`] are
/// judged, not performed.
pub const DAV_UNMAPPED: [&str; 2] = ["/d/n", "/g"];

/// What a writer without a lock sends ([`DavWorkload::write_mix`]), each through the
/// worker's lock decisions in the core. Every kind but `Put` stops once its lock check
/// has decided: the simulated share's files do not change (the tree requests themselves
/// are the `dav_tree` workload's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DavWriteKind {
    /// PUT of one of [`DavWorkload::write_paths`], through the write flow.
    Put,
    /// DELETE of a mapped resource (reach: its tree and its collection's membership).
    Delete,
    /// COPY onto a destination (reach: the destination's tree).
    Copy,
    /// MOVE (reach: the source's tree and the destination's).
    Move,
    /// MKCOL of an unmapped URL (reach: its collection's membership).
    Mkcol,
    /// PROPPATCH of a mapped resource (reach: its content).
    Proppatch,
    /// LOCK of an unmapped URL (a write that creates the resource).
    LockUnmapped,
    /// A PUT whose `If` header does not parse (400).
    BadIf,
    /// PROPFIND Depth 1 of a collection: the locks its `lockdiscovery` shows per member.
    Propfind,
}

/// WebDAV clients ([`Workload::dav`]). A lock client sends LOCK through whichever worker
/// the listener gives it, keeps the token it is granted, then makes `steps` requests —
/// each a PUT with the token (in a tagged `If` naming the lock root) to a file the lock
/// protects, a lock-checked write with it ([`DavClientPlan::write_chance`]), a refresh
/// (LOCK without a body), or the token sent where it does not apply
/// ([`DavClientPlan::stray_chance`]) — and finally UNLOCK, or walks away and lets the lock
/// time out. Writers send what [`DavWorkload::write_mix`] draws, without any token. Every
/// request is a connection of its own, so consecutive requests of one client land on any
/// worker.
#[derive(Debug, Clone, PartialEq)]
pub struct DavWorkload {
    /// Lock clients with set parameters, each starting at its time.
    pub clients: Vec<(Duration, DavClientPlan)>,
    /// Lock clients with drawn parameters ([`DavWorkload::draw`]) per second (Poisson).
    pub client_rate: f64,
    /// A burst: drawn clients arrive at this rate instead until this point of the run.
    pub client_burst: Option<(f64, Duration)>,
    pub draw: DavDraw,
    /// PUTs without a token per second (Poisson), each to one of `write_paths`
    /// (uniformly; every path must be one of [`DAV_FILES`]).
    pub write_rate: f64,
    pub write_paths: Vec<&'static str>,
    /// What each writer sends, drawn uniformly (one kind: no draw).
    pub write_mix: Vec<DavWriteKind>,
    /// No client or writer starts after this point (nor after [`Workload::until`]).
    pub until: Duration,
}

/// One lock client's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct DavClientPlan {
    pub resource: &'static str,
    pub depth_infinity: bool,
    pub exclusive: bool,
    /// The `Timeout` it asks for (the broker caps it at `broker.max_dav_lock_timeout`).
    pub timeout_ms: u64,
    /// Requests after the grant, and the time before each (ms, uniform).
    pub steps: u64,
    pub step_ms: (u64, u64),
    /// The chance that a step is a refresh rather than a PUT.
    pub refresh_chance: f64,
    /// The chance that a step (not a refresh) is a lock-checked write under the lock with
    /// its token (DELETE, COPY, MOVE, MKCOL or PROPPATCH of what the lock protects)
    /// rather than a PUT.
    pub write_chance: f64,
    /// The chance that a step names the token where its lock does not apply: an UNLOCK
    /// sent to the lock root's collection (409), or a PROPPATCH of that collection with
    /// the token in an untagged `If` (412).
    pub stray_chance: f64,
    /// UNLOCK after the last step; otherwise the lock ends at its timeout.
    pub unlock: bool,
}

/// What drawn lock clients draw from.
#[derive(Debug, Clone, PartialEq)]
pub struct DavDraw {
    pub resources: Vec<&'static str>,
    pub exclusive_chance: f64,
    pub infinity_chance: f64,
    pub timeout_ms: (u64, u64),
    pub steps: (u64, u64),
    pub step_ms: (u64, u64),
    pub refresh_chance: f64,
    pub write_chance: f64,
    pub stray_chance: f64,
    pub unlock_chance: f64,
}

impl Default for DavDraw {
    fn default() -> Self {
        DavDraw {
            resources: DAV_COLLECTIONS.iter().chain(&DAV_FILES).copied().collect(),
            exclusive_chance: 0.5,
            infinity_chance: 0.5,
            timeout_ms: (1000, 5000),
            steps: (0, 3),
            step_ms: (50, 500),
            refresh_chance: 0.3,
            write_chance: 0.0,
            stray_chance: 0.0,
            unlock_chance: 0.7,
        }
    }
}

impl Default for DavWorkload {
    fn default() -> Self {
        DavWorkload {
            clients: Vec::new(),
            client_rate: 0.0,
            client_burst: None,
            draw: DavDraw::default(),
            write_rate: 0.0,
            write_paths: DAV_FILES.to_vec(),
            write_mix: vec![DavWriteKind::Put],
            until: Duration::from_secs(3600),
        }
    }
}

impl DavWorkload {
    /// The drawn clients' arrival rate at `now`.
    pub fn client_rate_at(&self, now: Duration) -> f64 {
        match self.client_burst {
            Some((rate, until)) if now < until => rate,
            _ => self.client_rate,
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
    /// The CPUs the simulated parent may run on, which `worker_cpu_affinity` shares out
    /// among application workers (decision 0122); empty: unknown, nobody is pinned.
    pub host_cpus: servery_core::cpu_affinity::CpuSet,
    /// When the fault phase ends and liveness is judged (status snapshot taken).
    pub liveness_at: Duration,
    /// When the graceful stop is issued (if the service still runs).
    pub stop_at: Duration,
    /// Hard bound on virtual time: reaching it is a failure (something hung).
    pub end_by: Duration,
    pub trace: bool,
    /// The host's fact that the serving listeners came from the service manager (socket
    /// activation): the simulated driver reports it to the core before the first event,
    /// as the real one does, and the core's reload admission judges by it (decision 0072).
    pub listeners_from_service_manager: bool,
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

/// The kinds of misbehaviour a plan can inject: each [`Fault`] variant and each
/// misbehaving [`Behavior`]. Swarm sweeps enable a subset of them per seed; every kind
/// names the coverage label that proves its handling ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    CrashWorker,
    HangWorker,
    MalformedFrame,
    CrashLeaseHolder,
    CrashParent,
    StallParent,
    FailStartup,
    CrashAtBoot,
    CrashBetweenPrepareAndCommit,
    HangAtBoot,
    SlowBoot,
    CrashAfterRequests,
    WedgedDrain,
    ExitDuringDrain,
    SpawnFails,
    ControlWriteFails,
    ShortWrites,
    AcceptFails,
    ClockJump,
    DiskFull,
    RenameFails,
    CrashDavGranter,
    CrashAfterUptime,
    PauseWorker,
    /// A worker carrying out a WebDAV tree request is killed before a step the plan
    /// names ([`crate::TreeOpPlan::kill_before`]).
    CrashDavTreeStep,
    /// A worker carrying out a chunk of a resumable upload is killed before a step the
    /// plan names ([`crate::ChunkRecord::kill_before`]).
    CrashChunkStep,
    /// A reload's new port is held by another program ([`Fault::PortBusy`]).
    PortBusy,
    /// An application's interpreter wedges ([`Behavior::AppWedgesAfterRequests`]).
    AppWedge,
    /// An application fails its import or lifespan startup ([`Behavior::AppStartup`]).
    AppStartupFails,
    /// Control channels delay and cross-reorder what they carry ([`Fault::ChannelDelay`]).
    ChannelDelay,
    /// A worker's clock runs fast or slow ([`Fault::ClockDrift`]).
    ClockDrift,
    /// An upload's fsync fails ([`Fault::FsyncFails`]).
    FsyncFails,
    /// A directory's fsync after a publishing rename fails ([`Fault::DirSyncFails`]).
    DirSyncFails,
    /// The power goes between a rename and its directory's fsync ([`Fault::TornRename`]).
    TornRename,
}

impl FaultKind {
    pub const ALL: [FaultKind; 34] = [
        FaultKind::CrashWorker,
        FaultKind::HangWorker,
        FaultKind::MalformedFrame,
        FaultKind::CrashLeaseHolder,
        FaultKind::CrashParent,
        FaultKind::StallParent,
        FaultKind::FailStartup,
        FaultKind::CrashAtBoot,
        FaultKind::CrashBetweenPrepareAndCommit,
        FaultKind::HangAtBoot,
        FaultKind::SlowBoot,
        FaultKind::CrashAfterRequests,
        FaultKind::WedgedDrain,
        FaultKind::ExitDuringDrain,
        FaultKind::SpawnFails,
        FaultKind::ControlWriteFails,
        FaultKind::ShortWrites,
        FaultKind::AcceptFails,
        FaultKind::ClockJump,
        FaultKind::DiskFull,
        FaultKind::RenameFails,
        FaultKind::CrashDavGranter,
        FaultKind::CrashAfterUptime,
        FaultKind::PauseWorker,
        FaultKind::CrashDavTreeStep,
        FaultKind::CrashChunkStep,
        FaultKind::PortBusy,
        FaultKind::AppWedge,
        FaultKind::AppStartupFails,
        FaultKind::ChannelDelay,
        FaultKind::ClockDrift,
        FaultKind::FsyncFails,
        FaultKind::DirSyncFails,
        FaultKind::TornRename,
    ];

    /// A stable index (its place in [`FaultKind::ALL`]).
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::CrashWorker => "crash-worker",
            FaultKind::HangWorker => "hang-worker",
            FaultKind::MalformedFrame => "malformed-frame",
            FaultKind::CrashLeaseHolder => "crash-lease-holder",
            FaultKind::CrashParent => "crash-parent",
            FaultKind::StallParent => "stall-parent",
            FaultKind::FailStartup => "fail-startup",
            FaultKind::CrashAtBoot => "crash-at-boot",
            FaultKind::CrashBetweenPrepareAndCommit => "crash-between-prepare-and-commit",
            FaultKind::HangAtBoot => "hang-at-boot",
            FaultKind::SlowBoot => "slow-boot",
            FaultKind::CrashAfterRequests => "crash-after-requests",
            FaultKind::WedgedDrain => "wedged-drain",
            FaultKind::ExitDuringDrain => "exit-during-drain",
            FaultKind::SpawnFails => "spawn-fails",
            FaultKind::ControlWriteFails => "control-write-fails",
            FaultKind::ShortWrites => "short-writes",
            FaultKind::AcceptFails => "accept-fails",
            FaultKind::ClockJump => "clock-jump",
            FaultKind::DiskFull => "disk-full",
            FaultKind::RenameFails => "rename-fails",
            FaultKind::CrashDavGranter => "crash-dav-granter",
            FaultKind::CrashAfterUptime => "crash-after-uptime",
            FaultKind::PauseWorker => "pause-worker",
            FaultKind::CrashDavTreeStep => "crash-dav-tree-step",
            FaultKind::CrashChunkStep => "crash-chunk-step",
            FaultKind::PortBusy => "port-busy",
            FaultKind::AppWedge => "app-wedge",
            FaultKind::AppStartupFails => "app-startup-fails",
            FaultKind::ChannelDelay => "channel-delay",
            FaultKind::ClockDrift => "clock-drift",
            FaultKind::FsyncFails => "fsync-fails",
            FaultKind::DirSyncFails => "dir-sync-fails",
            FaultKind::TornRename => "torn-rename",
        }
    }

    pub fn by_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether a worker misbehaving this way can fail requests it took: it served before
    /// it misbehaved. A worker that fails or dies before READY never accepted one; the
    /// parent's own faults fail nothing on a worker; a slow boot is no fault.
    pub fn can_fail_requests(self) -> bool {
        matches!(
            self,
            FaultKind::CrashWorker
                | FaultKind::HangWorker
                | FaultKind::MalformedFrame
                | FaultKind::CrashLeaseHolder
                | FaultKind::CrashAfterRequests
                | FaultKind::WedgedDrain
                | FaultKind::ExitDuringDrain
                | FaultKind::ControlWriteFails
                | FaultKind::CrashDavGranter
                | FaultKind::CrashAfterUptime
                | FaultKind::PauseWorker
                | FaultKind::CrashDavTreeStep
                | FaultKind::CrashChunkStep
                | FaultKind::AppWedge
                | FaultKind::TornRename
        )
    }

    /// The coverage label a run records when this kind's fault took effect and the
    /// service handled it (see [`crate::labels`]).
    pub fn goal(self) -> &'static str {
        use crate::labels as l;
        match self {
            FaultKind::CrashWorker => l::CRASHED_WORKER_REPLACED,
            FaultKind::HangWorker => l::HUNG_WORKER_KILLED,
            FaultKind::MalformedFrame => l::MALFORMED_FRAME_REPLACED,
            FaultKind::CrashLeaseHolder => l::LEASE_HOLDER_KILLED,
            FaultKind::CrashParent => l::ORPHAN_EXITED,
            FaultKind::StallParent => l::STALLED_PARENT_RESUMED,
            FaultKind::FailStartup => l::STARTUP_ERROR_REPORTED,
            FaultKind::CrashAtBoot => l::CRASHED_AT_BOOT,
            FaultKind::CrashBetweenPrepareAndCommit => l::CRASH_BETWEEN_PREPARE_AND_COMMIT,
            FaultKind::HangAtBoot => l::HUNG_BOOT_ENDED,
            FaultKind::SlowBoot => l::SLOW_BOOT_FINISHED,
            FaultKind::CrashAfterRequests => l::CRASHED_AFTER_REQUESTS,
            FaultKind::WedgedDrain => l::WEDGED_DRAIN_KILLED,
            FaultKind::ExitDuringDrain => l::EXITED_DURING_DRAIN,
            FaultKind::SpawnFails => l::SPAWN_FAILURE_HANDLED,
            FaultKind::ControlWriteFails => l::CONTROL_WRITE_FAILED_ENDED,
            FaultKind::ShortWrites => l::FRAME_IN_PIECES_DECODED,
            FaultKind::AcceptFails => l::BACKLOG_WAITED_OUT_EMFILE,
            FaultKind::ClockJump => l::CLOCK_JUMP_NOTICED,
            FaultKind::DiskFull => l::UPLOAD_ENOSPC_CLEANED,
            FaultKind::RenameFails => l::RENAME_FAILED_CLEANED,
            FaultKind::CrashDavGranter => l::DAV_LOCK_OUTLIVED_GRANTER,
            FaultKind::CrashAfterUptime => l::CRASHED_AFTER_UPTIME,
            FaultKind::PauseWorker => l::PAUSED_WORKER_RESUMED,
            FaultKind::CrashDavTreeStep => l::DAV_TREE_KILL_SWEPT,
            FaultKind::CrashChunkStep => l::CHUNK_KILL_SWEPT,
            FaultKind::PortBusy => l::PORT_BUSY_RELOAD_REJECTED,
            FaultKind::AppWedge => l::APP_WEDGE_REPLACED,
            FaultKind::AppStartupFails => l::APP_STARTUP_FAILURE_REPORTED,
            FaultKind::ChannelDelay => l::DELAYED_FRAME_OVERTAKEN,
            FaultKind::ClockDrift => l::DRIFTING_WORKER_KEPT,
            FaultKind::FsyncFails => l::FSYNC_FAILED_CLEANED,
            FaultKind::DirSyncFails => l::DIR_SYNC_FAILED_ANSWERED,
            FaultKind::TornRename => l::TORN_RENAME_WHOLE,
        }
    }
}

impl Workload {
    /// The upload rate at `now`.
    /// The plain-GET rate at `now` (`request_rate` before the first step).
    pub fn request_rate_at(&self, now: Duration) -> f64 {
        self.request_rate_steps
            .iter()
            .rev()
            .find(|(from, _)| *from <= now)
            .map_or(self.request_rate, |(_, rate)| *rate)
    }

    /// The rate arrivals are drawn at: the highest the run reaches.
    pub fn peak_request_rate(&self) -> f64 {
        self.request_rate_steps
            .iter()
            .map(|(_, r)| *r)
            .fold(self.request_rate, f64::max)
    }

    pub fn upload_rate_at(&self, now: Duration) -> f64 {
        match self.upload_burst {
            Some((rate, until)) if now < until => rate,
            _ => self.upload_rate,
        }
    }
}

impl Fault {
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::CrashWorker { .. } => FaultKind::CrashWorker,
            Fault::HangWorker { .. } => FaultKind::HangWorker,
            Fault::PauseWorker { .. } => FaultKind::PauseWorker,
            Fault::MalformedFrame { .. } => FaultKind::MalformedFrame,
            Fault::CrashLeaseHolder => FaultKind::CrashLeaseHolder,
            Fault::CrashParent => FaultKind::CrashParent,
            Fault::StallParent(_) => FaultKind::StallParent,
            Fault::ControlWriteFails { .. } => FaultKind::ControlWriteFails,
            Fault::ShortWrites(_) => FaultKind::ShortWrites,
            Fault::AcceptFails { .. } => FaultKind::AcceptFails,
            Fault::ClockJump(_) => FaultKind::ClockJump,
            Fault::DiskFull(_) => FaultKind::DiskFull,
            Fault::RenameFails(_) => FaultKind::RenameFails,
            Fault::CrashDavGranter => FaultKind::CrashDavGranter,
            Fault::PortBusy { .. } => FaultKind::PortBusy,
            Fault::ChannelDelay { .. } => FaultKind::ChannelDelay,
            Fault::ClockDrift { .. } => FaultKind::ClockDrift,
            Fault::FsyncFails(_) => FaultKind::FsyncFails,
            Fault::DirSyncFails(_) => FaultKind::DirSyncFails,
            Fault::TornRename => FaultKind::TornRename,
        }
    }
}

impl Behavior {
    /// The fault kind of a misbehaving process; `None` when it is healthy.
    pub fn kind(&self) -> Option<FaultKind> {
        Some(match self {
            Behavior::Healthy => return None,
            Behavior::FailStartup(_) => FaultKind::FailStartup,
            Behavior::CrashAtBoot => FaultKind::CrashAtBoot,
            Behavior::CrashBetweenPrepareAndCommit => FaultKind::CrashBetweenPrepareAndCommit,
            Behavior::HangAtBoot => FaultKind::HangAtBoot,
            Behavior::SlowBoot(_) => FaultKind::SlowBoot,
            Behavior::CrashAfterRequests(_) => FaultKind::CrashAfterRequests,
            Behavior::WedgedDrain => FaultKind::WedgedDrain,
            Behavior::ExitDuringDrain => FaultKind::ExitDuringDrain,
            Behavior::SpawnFails(_) => FaultKind::SpawnFails,
            Behavior::CrashAfter(_) | Behavior::SlowBootCrashAfter { .. } => {
                FaultKind::CrashAfterUptime
            }
            Behavior::AppWedgesAfterRequests(_) => FaultKind::AppWedge,
            // An application that starts, however slowly, is no fault.
            Behavior::AppStartup(startup) if !startup.fails() => return None,
            Behavior::AppStartup(_) => FaultKind::AppStartupFails,
        })
    }
}
