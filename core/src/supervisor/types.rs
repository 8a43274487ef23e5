//! Vocabulary of the supervisor: states, reasons, platforms and the events/actions it
//! exchanges with its driver.

use core::fmt;

use crate::config::{Listen, RawConfig, ValidConfig};
use crate::ids::{Generation, ReloadId, Slot, WorkerId};
use crate::proto::{ParentMessage, ProtoError, WorkerMessage};

/// How processes are ended on the host. The supervisor plans differently for each; the
/// simulator models both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    /// TERM asks a process (group) to stop; KILL cannot be refused.
    Posix,
    /// No TERM: terminating a process is immediate (TerminateProcess), so a graceful
    /// stop must be asked for over the control channel.
    Windows,
}

impl Platform {
    pub fn name(self) -> &'static str {
        match self {
            Platform::Posix => "posix",
            Platform::Windows => "windows",
        }
    }
}

/// The service as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceState {
    /// Constructed, not started.
    Idle,
    /// The first generation is preparing.
    Starting,
    /// The committed generation is serving.
    Ready,
    /// Stopping on request: listeners closed, workers draining.
    Draining,
    /// Gave up; stopping workers, then exits with the failure's code.
    Failed,
    /// Every worker reaped after a requested stop.
    Stopped,
}

impl ServiceState {
    pub const ALL: [ServiceState; 6] = [
        ServiceState::Idle,
        ServiceState::Starting,
        ServiceState::Ready,
        ServiceState::Draining,
        ServiceState::Failed,
        ServiceState::Stopped,
    ];

    /// The state a [`ServiceState::name`] names (as status reports show it).
    pub fn from_name(name: &str) -> Option<ServiceState> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            ServiceState::Idle => "idle",
            ServiceState::Starting => "starting",
            ServiceState::Ready => "ready",
            ServiceState::Draining => "draining",
            ServiceState::Failed => "failed",
            ServiceState::Stopped => "stopped",
        }
    }
}

/// One worker's lifecycle state as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WorkerState {
    Spawning,
    Prepared,
    Ready,
    Draining,
    Exited,
}

impl WorkerState {
    pub const ALL: [WorkerState; 5] = [
        WorkerState::Spawning,
        WorkerState::Prepared,
        WorkerState::Ready,
        WorkerState::Draining,
        WorkerState::Exited,
    ];

    pub fn from_name(name: &str) -> Option<WorkerState> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            WorkerState::Spawning => "spawning",
            WorkerState::Prepared => "prepared",
            WorkerState::Ready => "ready",
            WorkerState::Draining => "draining",
            WorkerState::Exited => "exited",
        }
    }
}

/// Why a worker ended. The names are the reason codes status reports and logs carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExitReason {
    /// Drained and exited when asked (shutdown, reload, failed generation cleanup).
    CleanExit,
    /// Exited or lost its channel without being asked.
    UnexpectedExit,
    /// Failed, exited or timed out before READY.
    StartupFailure,
    /// Missed heartbeats past `heartbeat_timeout`.
    HealthFailure,
    /// Sent a malformed control frame.
    ProtocolError,
    /// Recycled after `worker_max_age`.
    RecycleAge,
    /// Recycled after `max_requests_per_worker`.
    RecycleRequests,
    /// Recycled on operator request (`ctl recycle`).
    RecycleManual,
    /// Recycled above `worker_max_rss` at two heartbeats in a row.
    RecycleMemory,
    /// Did not exit by its drain deadline and was killed.
    ForcedTermination,
    /// Stopped heartbeating while draining: ended like a hung worker (TERM then KILL on
    /// POSIX, terminated at once on Windows) without waiting for the drain deadline.
    DrainHang,
}

impl ExitReason {
    pub const ALL: [ExitReason; 11] = [
        ExitReason::CleanExit,
        ExitReason::UnexpectedExit,
        ExitReason::StartupFailure,
        ExitReason::HealthFailure,
        ExitReason::ProtocolError,
        ExitReason::RecycleAge,
        ExitReason::RecycleRequests,
        ExitReason::RecycleManual,
        ExitReason::RecycleMemory,
        ExitReason::ForcedTermination,
        ExitReason::DrainHang,
    ];

    pub fn from_code(code: &str) -> Option<ExitReason> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }

    pub fn code(self) -> &'static str {
        match self {
            ExitReason::CleanExit => "clean_exit",
            ExitReason::UnexpectedExit => "unexpected_exit",
            ExitReason::StartupFailure => "startup_failure",
            ExitReason::HealthFailure => "health_failure",
            ExitReason::ProtocolError => "protocol_error",
            ExitReason::RecycleAge => "recycle_age",
            ExitReason::RecycleRequests => "recycle_requests",
            ExitReason::RecycleManual => "recycle_manual",
            ExitReason::RecycleMemory => "recycle_memory",
            ExitReason::ForcedTermination => "forced_termination",
            ExitReason::DrainHang => "drain_hang",
        }
    }

    /// A zero-downtime recycle: its replacement was ready before it drained.
    pub fn is_recycle(self) -> bool {
        matches!(
            self,
            ExitReason::RecycleAge
                | ExitReason::RecycleRequests
                | ExitReason::RecycleManual
                | ExitReason::RecycleMemory
        )
    }

    /// Reasons that count against the restart limit.
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            ExitReason::UnexpectedExit
                | ExitReason::StartupFailure
                | ExitReason::HealthFailure
                | ExitReason::ProtocolError
        )
    }

    /// The worker misbehaved: a fault, or a hang while draining. The status reports each
    /// as `last_failure`, and no later decision (a drain deadline, another fault) renames
    /// it. A drain hang is not a fault: the worker no longer served a slot, so ending it
    /// restarts nothing (decision 0013).
    pub fn is_failure(self) -> bool {
        self.is_fault() || self == ExitReason::DrainHang
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// Why the service failed. Each has its own process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// The first generation could not start.
    StartupFailure,
    /// Crash replacement exceeded `worker_restart_limit` (within the window or as a run
    /// of consecutive unstable restarts).
    RestartLimit,
    /// `worker_restart_limit` is 0 and a worker crashed.
    RestartsDisabled,
}

impl FailureReason {
    pub const ALL: [FailureReason; 3] = [
        FailureReason::StartupFailure,
        FailureReason::RestartLimit,
        FailureReason::RestartsDisabled,
    ];

    pub fn from_code(code: &str) -> Option<FailureReason> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }

    pub fn code(self) -> &'static str {
        match self {
            FailureReason::StartupFailure => "startup_failure",
            FailureReason::RestartLimit => "restart_limit_exceeded",
            FailureReason::RestartsDisabled => "restarts_disabled",
        }
    }

    /// The parent's process exit code. Distinct from 0 (clean stop), 1 (runtime error)
    /// and 2 (configuration error).
    pub fn exit_code(self) -> i32 {
        match self {
            FailureReason::StartupFailure => 3,
            FailureReason::RestartLimit | FailureReason::RestartsDisabled => 4,
        }
    }
}

/// How a reaped process ended, as the host reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    /// The name of a signal whose number is the same on Linux (every architecture), the
    /// BSDs and macOS, so that `ctl status` says `SIGKILL` rather than only `9`; `None`
    /// for the numbers that differ between them (7, 10, 12 and above 15).
    pub fn signal_name(signal: i32) -> Option<&'static str> {
        Some(match signal {
            1 => "SIGHUP",
            2 => "SIGINT",
            3 => "SIGQUIT",
            4 => "SIGILL",
            5 => "SIGTRAP",
            6 => "SIGABRT",
            8 => "SIGFPE",
            9 => "SIGKILL",
            11 => "SIGSEGV",
            13 => "SIGPIPE",
            14 => "SIGALRM",
            15 => "SIGTERM",
            _ => return None,
        })
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal(s) => match ExitStatus::signal_name(*s) {
                Some(name) => write!(f, "signal {s} ({name})"),
                None => write!(f, "signal {s}"),
            },
        }
    }
}

/// Operator commands.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Graceful stop. Idempotent.
    Stop,
    /// An interrupt (Ctrl-C, SIGINT): a graceful stop, and when the service is already
    /// stopping, a forced one — every worker left is killed at once.
    Interrupt,
    /// Validate this configuration and roll a new generation onto it. `id` names the
    /// request in the answer.
    Reload {
        id: ReloadId,
        config: Box<RawConfig>,
    },
    /// A reload to `config` with the committed generation's worker count changed by `by`
    /// (SIGTTIN +1, SIGTTOU -1): the count is the core's to know. Fewer than one worker is
    /// rejected like an invalid configuration.
    Resize {
        id: ReloadId,
        config: Box<RawConfig>,
        by: i32,
    },
    /// Recycle every worker of the committed generation, one at a time.
    Recycle,
    /// A reload whose configuration the driver could not read (a file that does not
    /// parse, a setting that cannot change live): rejected like an invalid one, so it is
    /// counted, reported and answered the same way.
    ReloadUnreadable { id: ReloadId, message: String },
}

/// A worker's counters as it left them when it ended: totals since it started, like a
/// heartbeat's, read from its scoreboard (a memory mapping the parent shares with it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinalCounts {
    /// Its request counters.
    pub stats: crate::request_stats::RequestStats,
    /// Access-log lines it produced (put in its buffer to send), in all.
    pub log_lines: u64,
    /// Access-log lines it dropped itself under the drop policy, in all.
    pub log_dropped: u64,
}

/// What the driver tells the supervisor.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Start,
    /// The host created the process.
    Spawned {
        worker: WorkerId,
        pid: u32,
    },
    /// The host could not create the process at all.
    SpawnFailed {
        worker: WorkerId,
        error: String,
    },
    Message {
        worker: WorkerId,
        message: WorkerMessage,
    },
    /// The worker's channel produced a malformed frame.
    ProtocolViolation {
        worker: WorkerId,
        error: ProtoError,
    },
    /// The worker's channel reached EOF.
    ChannelClosed {
        worker: WorkerId,
    },
    /// What the worker had counted when it ended, read by the host from the memory it
    /// shared with the worker (its scoreboard) after the process was gone and its channel
    /// read out: handed over just before its [`Event::Exited`], so what it counted after
    /// its last heartbeat is not lost with it.
    FinalCounts {
        worker: WorkerId,
        counts: Box<FinalCounts>,
    },
    /// The host reaped the process.
    Exited {
        worker: WorkerId,
        status: ExitStatus,
    },
    Command(Command),
    /// An operator's request from the control socket, named so its one answer
    /// ([`crate::parent::ParentAction::Answer`]) finds its requester. The parent decides
    /// it ([`crate::control`]); the supervisor never sees it as such.
    Control {
        id: crate::ids::RequestId,
        request: crate::control::Request,
    },
    /// What the parent's ACME service observed, at the driver's wall time (for the
    /// parent's certificate manager; the supervisor ignores it).
    Acme {
        wall: crate::acme::UnixTime,
        /// Boxed: a certificate is large, and every other event is small.
        event: Box<crate::acme::AcmeEvent>,
    },
    /// For the parent's TLS material ([`crate::tls_material`]): a new identity, or the
    /// randomness a ticket key was asked for with.
    Tls(crate::tls_material::TlsInput),
    /// The answer to [`crate::parent::ParentAction::ReadTlsFiles`]: the identity the
    /// certificate files hold now, or why they could not be taken (the words a refused
    /// reload answers with).
    TlsFilesRead {
        reload: ReloadId,
        read: Result<crate::tls_material::TlsInput, String>,
    },
    /// The parent's probe of a reverse-proxy upstream ([`crate::parent::ParentAction::
    /// ProbeUpstream`]) came back: `ok` when it answered 2xx or 3xx in time.
    UpstreamProbed {
        upstream: u32,
        ok: bool,
    },
    /// The cluster's store answered [`crate::parent::ParentAction::Store`] `op`.
    StoreReplied {
        op: crate::cluster::OpId,
        reply: crate::cluster::StoreReply,
    },
    /// The answer to [`Action::BindListeners`]: the set is bound, or why it is not.
    ListenersBound {
        reload: ReloadId,
        listen: Listen,
        result: Result<(), String>,
    },
}

/// What the supervisor asks the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Start a worker process for `slot` of `generation`, under `config` (the committed
    /// generation's, or a reload candidate's): everything the process is started with
    /// follows from it, so a driver keeps no table of generations.
    Spawn {
        worker: WorkerId,
        slot: Slot,
        generation: Generation,
        config: Box<ValidConfig>,
        /// The CPUs the process and all its threads are to run on, set before it starts
        /// a thread; `None`: wherever the parent may (decision 0122). Its slot's share
        /// under `config` ([`crate::cpu_affinity::worker_cpus`]).
        cpus: Option<crate::cpu_affinity::CpuSet>,
    },
    Send {
        worker: WorkerId,
        message: ParentMessage,
    },
    /// POSIX only: TERM to the worker's process group.
    Terminate { worker: WorkerId },
    /// KILL (POSIX, to the process group) or TerminateProcess (Windows).
    Kill { worker: WorkerId },
    /// Close every listener set: nothing is accepted from here on (a stop or a failure).
    CloseListeners,
    /// Bind the listener set `listen` for a reload that changes it, and answer with
    /// [`Event::ListenersBound`]; the reload's candidates are started on it only then.
    BindListeners { reload: ReloadId, listen: Listen },
    /// No generation will start a worker on `listen` again: close the parent's copy (the
    /// workers still holding theirs close them as they exit).
    ReleaseListeners { listen: Listen },
    /// The worker's channel closed or it was reaped: revoke what it held. Emitted exactly
    /// once per worker, always before any replacement in its slot is spawned.
    WorkerGone { worker: WorkerId },
    /// HTTP/3 (`--http3`): the sockets each address's group holds, who reads each, and
    /// which receive new connections (decision 0079). Emitted whenever that changes:
    /// before a `Spawn` whose worker is given a new socket, and before the `Drain` of a
    /// worker whose socket stops receiving new connections.
    QuicSteering(super::QuicSteering),
    /// A generation is committed and serving; `reload` names the reload it answers
    /// (none for the first generation). `connections` are its connection deadlines, for
    /// what the parent serves itself (the admin listener), carried out before any answer
    /// that says the reload committed.
    GenerationCommitted {
        generation: Generation,
        reload: Option<ReloadId>,
        connections: crate::config::ConnectionLimits,
    },
    /// A reload's candidate generation is being brought up (the committed one serves on
    /// until it commits or is rejected). An announcement only: the driver tells a
    /// service manager, say, that the service is reloading.
    ReloadStarted {
        reload: ReloadId,
        generation: Generation,
    },
    /// The service entered `failed`.
    ServiceFailed {
        reason: FailureReason,
        message: String,
    },
    /// A reload was refused or its candidate generation failed; the old one serves on.
    ReloadRejected { reload: ReloadId, message: String },
    /// Recycling is suspended after repeated replacement failures.
    RecyclingSuspended { message: String },
    /// Every worker is reaped; the parent should exit with this code.
    Exit { code: i32 },
}
