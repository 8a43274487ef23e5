//! Starting one worker: a socketpair for its control channel (the child's end becomes its
//! stdin), the listeners passed over it with `SCM_RIGHTS` before the child even exists,
//! a re-exec of our own binary in a process group of its own, and the reaper task that
//! reports its exit and the last counts of its scoreboard. The parent's end of the
//! channel goes to the driver thread, which reads and writes it itself (see `io.rs`): a
//! broker request and its answer cross no thread inside the parent.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use servery_core::supervisor::ExitStatus;
use servery_core::{Generation, Slot, ValidConfig, WorkerId};
use tokio::runtime::Handle;

use super::io::{Inbound, InboundTx};
use crate::cli::{ServeArgs, WORKER_SUBCOMMAND};
use crate::fdpass::{self, FdPassError};
use crate::http::meter::RequestMeter;
use crate::settings::LiveFields;
use crate::worker::args::WorkerArgs;
use crate::worker::setup::{Setup, SiteFacts};

/// Set (to anything) to start workers from the path the parent was started from rather
/// than `/proc/self/exe`; see [`Launcher::program`].
pub(super) const WORKER_PROGRAM_ENV: &str = "SERVERY_WORKER_FROM_START_PATH";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(super) enum SpawnError {
    #[error("the listeners are closed")]
    ListenersClosed,
    #[error("cannot create the control channel: {0}")]
    Channel(#[source] io::Error),
    #[error("cannot pass the listeners: {0}")]
    PassListeners(#[source] FdPassError),
    #[error("cannot give the worker its generation's settings: {0}")]
    Settings(String),
    #[error("cannot start {exe}: {source}", exe = .exe.display())]
    Exec {
        exe: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Async threads per worker: the CPUs shared out among the workers, at least one. The
/// workers are the parallelism; more async threads than a worker's share of the CPUs only
/// adds cross-thread wake-ups (measured in docs/benchmarks.md) and memory.
/// A pinned worker's share is its own CPUs (decision 0122).
pub(super) fn runtime_threads(
    config: &ValidConfig,
    pinned: Option<&servery_core::cpu_affinity::CpuSet>,
    hosts_app: bool,
) -> u32 {
    if let Some(set) = pinned.filter(|s| !s.is_empty()) {
        return threads_for(u32::try_from(set.len()).unwrap_or(u32::MAX), 1, hosts_app);
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    threads_for(cpus, config.workers(), hosts_app)
}

/// A worker's share of `cpus`, less the one its interpreter keeps busy when it hosts a
/// Python application (the ASGI loop's thread, or the WSGI calls, which run one at a time
/// under the interpreter's lock): an async thread more would only wake and steal work
/// from its sibling and preempt the interpreter (decision 0115). At least one.
fn threads_for(cpus: u32, workers: u32, hosts_app: bool) -> u32 {
    let share = cpus.div_ceil(workers.max(1)).max(1);
    if hosts_app {
        share.saturating_sub(1).max(1)
    } else {
        share
    }
}

/// The parent's side of one running worker.
#[derive(Debug)]
pub(super) struct Launched {
    pub pid: u32,
    /// The parent's end of the control channel, non-blocking; the setup preamble is the
    /// first thing to write on it.
    pub channel: UnixStream,
    pub setup_frame: Vec<u8>,
}

/// Which worker to start, and under what configuration (the core's `Spawn`).
#[derive(Debug, Clone, Copy)]
pub(super) struct WorkerStart<'a> {
    pub worker: WorkerId,
    pub slot: Slot,
    pub generation: Generation,
    pub config: &'a ValidConfig,
    /// The CPUs the core chose for it; `None`: not pinned.
    pub cpus: Option<&'a servery_core::cpu_affinity::CpuSet>,
}

/// How workers are started.
#[derive(Debug)]
pub(super) struct Launcher {
    exe: PathBuf,
    root: PathBuf,
    facts: SiteFacts,
    /// The settings as the parent started; each worker gets them with its generation's
    /// values of the reloadable ones.
    serve: ServeArgs,
    live: LiveFields,
    log_format: crate::parent::ops_args::LogFormat,
    /// `--http3`: every slot's UDP socket, handed to its workers with the listeners.
    quic: Option<crate::http3::sockets::QuicSockets>,
    /// `--qr`: the site whose LAN URL the page's code shows, on the port of the
    /// listeners each worker is given, and the interfaces as read at start (not read
    /// again for every spawn).
    qr: Option<(super::services::Site, Vec<(std::net::IpAddr, bool)>)>,
}

impl Launcher {
    pub(super) fn new(exe: PathBuf, root: PathBuf, facts: SiteFacts, serve: ServeArgs) -> Self {
        Launcher {
            exe,
            root,
            facts,
            serve,
            live: LiveFields::of_table(),
            log_format: crate::parent::ops_args::LogFormat::Text,
            quic: None,
            qr: None,
        }
    }

    /// Workers' pages show a QR code of the LAN URL of the listeners they are given.
    pub(super) fn with_qr(mut self, site: Option<super::services::Site>) -> Self {
        self.qr = site.map(|site| (site, super::services::context::interfaces()));
        self
    }

    /// Workers also get their slot's HTTP/3 sockets.
    pub(super) fn with_quic(mut self, sockets: Option<crate::http3::sockets::QuicSockets>) -> Self {
        self.quic = sockets;
        self
    }

    /// Workers log as the parent does (`--log-format`).
    pub(super) fn with_log_format(mut self, format: crate::parent::ops_args::LogFormat) -> Self {
        self.log_format = format;
        self
    }

    /// The core's HTTP/3 steering (decision 0079): the groups grown or shrunk and the
    /// program attached as it says.
    pub(super) fn steer_quic(&mut self, steering: &servery_core::supervisor::QuicSteering) {
        if let Some(quic) = &mut self.quic
            && let Err(e) = quic.apply(steering)
        {
            tracing::error!(error = %e, "cannot carry out the HTTP/3 steering");
        }
    }

    /// What to execute: on Linux the very binary this parent runs, even if an upgrade
    /// has replaced or deleted the file since, so workers always speak the parent's
    /// protocol version; elsewhere the path it was started from. [`WORKER_PROGRAM_ENV`]
    /// names the start path instead, for tools that run the parent under an
    /// interpreter where `/proc/self/exe` is the interpreter (the symbol-order profile).
    fn program(&self) -> &Path {
        let own = Path::new("/proc/self/exe");
        if own.exists() && std::env::var_os(WORKER_PROGRAM_ENV).is_none() {
            own
        } else {
            &self.exe
        }
    }

    pub(super) fn launch(
        &mut self,
        rt: &Handle,
        events: &InboundTx,
        start: WorkerStart<'_>,
        listeners: &[TcpListener],
    ) -> Result<Launched, SpawnError> {
        let WorkerStart {
            worker,
            slot,
            generation,
            config,
            cpus,
        } = start;
        if listeners.is_empty() {
            return Err(SpawnError::ListenersClosed);
        }
        let (ours, theirs) = UnixStream::pair().map_err(SpawnError::Channel)?;
        // The descriptors wait in the socket buffer until the child reads them, ahead of
        // HELLO, which the driver writes later on the same stream.
        // The listeners first, then the slot's UDP sockets each with its lock (the worker
        // tells them apart by socket type).
        // Ahead of them the worker's scoreboard (decision 0083), the one that is not a
        // socket: the parent reads the worker's last counts there once it is gone. Without
        // one (no memfd) its counts travel in heartbeats only.
        let scoreboard = match RequestMeter::create_scoreboard() {
            Ok(made) => Some(made),
            Err(e) => {
                tracing::warn!(%worker, error = %e, "no scoreboard for the worker: its counts since its last heartbeat die with it");
                None
            }
        };
        let mut fds: Vec<BorrowedFd<'_>> = scoreboard.iter().map(|(_, fd)| fd.as_fd()).collect();
        fds.extend(listeners.iter().map(AsFd::as_fd));
        if let Some(quic) = &self.quic {
            fds.extend(quic.for_worker(worker));
        }
        fdpass::send_fds(ours.as_fd(), &fds).map_err(SpawnError::PassListeners)?;
        drop(fds);
        // The parent keeps the mapping, not the descriptor.
        let scoreboard = scoreboard.map(|(meter, _fd)| meter);
        ours.set_nonblocking(true).map_err(SpawnError::Channel)?;

        // Everything per-generation follows from the configuration the core's Spawn
        // carried: the parent keeps no table of generations.
        let committed = super::status::config_json(config);
        let mut facts = self.facts.clone();
        if let Some((site, interfaces)) = &self.qr {
            // The page's code is of the address the terminal's code shows (decision 0020),
            // on this worker's port (decision 0035).
            let site = super::services::Site {
                addrs: listeners
                    .iter()
                    .filter_map(|l| l.local_addr().ok())
                    .collect(),
                ..site.clone()
            };
            facts.qr_url = Some(site.lan_url(interfaces));
        }
        let setup = Setup {
            root: self.root.clone(),
            runtime_threads: runtime_threads(config, cpus, self.serve.app.target().is_some()),
            cpus: cpus.map(|set| set.as_slice().to_vec()),
            partial_ttl: config.broker().partial_ttl(),
            facts,
            settings: self
                .live
                .for_generation(&self.serve, &committed)
                .map_err(SpawnError::Settings)?,
        };
        let identity = WorkerArgs {
            worker_id: worker.0,
            slot: u64::from(slot.0),
            generation: generation.0,
        };
        let mut cmd = tokio::process::Command::new(self.program());
        cmd.arg0(&self.exe)
            .arg(WORKER_SUBCOMMAND)
            .args(identity.to_args());
        // The service manager talks to the parent alone.
        cmd.env_remove("NOTIFY_SOCKET");
        cmd.env(crate::logging::FORMAT_ENV, self.log_format.name());
        cmd.stdin(Stdio::from(OwnedFd::from(theirs)))
            // Its own group, so TERM/KILL reach anything the worker starts, and a Ctrl-C
            // meant for the parent does not hit the workers directly.
            .process_group(0)
            .kill_on_drop(false);

        // Registering the child needs the runtime's context.
        let _enter = rt.enter();
        let child = cmd.spawn().map_err(|source| SpawnError::Exec {
            exe: self.exe.clone(),
            source,
        })?;
        // Dropping the command closes our copy of the child's end, so the child's death is
        // the only way the driver sees EOF.
        drop(cmd);
        let pid = child.id().unwrap_or(0);
        rt.spawn(reap(worker, child, scoreboard, events.clone()));
        Ok(Launched {
            pid,
            channel: ours,
            // First on the stream after the listeners, ahead of HELLO (the worker reads it
            // before decoding frames).
            setup_frame: setup.encode(),
        })
    }
}

/// Reports the worker's exit, with its last counts read from its scoreboard (nothing adds
/// to them any more). Whatever it wrote before dying is still in its channel; the
/// driver reads that out before it hands the supervisor the counts and the exit, so a
/// READY followed at once by a crash is a crash of a ready worker, not a startup failure,
/// and the log lines it sent are received before those it never sent are counted.
async fn reap(
    worker: WorkerId,
    mut child: tokio::process::Child,
    scoreboard: Option<RequestMeter>,
    events: InboundTx,
) {
    let status = match child.wait().await {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(signal)) => ExitStatus::Signal(signal),
            (None, None) => ExitStatus::Code(-1),
        },
        Err(e) => {
            tracing::error!(%worker, error = %e, "waiting for the worker failed");
            ExitStatus::Code(-1)
        }
    };
    let counts = scoreboard.map(|meter| Box::new(meter.final_counts()));
    let _ = events.send(Inbound::Reaped {
        worker,
        status,
        counts,
    });
}

#[cfg(test)]
mod tests {
    use super::{runtime_threads, threads_for};
    use servery_core::cpu_affinity::CpuSet;

    #[test]
    fn a_pinned_worker_has_its_own_cpus_threads() {
        let config = servery_core::RawConfig {
            workers: 2,
            ..servery_core::RawConfig::default()
        }
        .validate()
        .expect("valid");
        let three = CpuSet::new([4, 5, 6]);
        assert_eq!(
            runtime_threads(&config, Some(&three), false),
            3,
            "a worker pinned to three CPUs runs three async threads"
        );
        assert_eq!(
            runtime_threads(&config, Some(&three), true),
            2,
            "and one fewer beside an interpreter (decision 0115)"
        );
        assert_eq!(runtime_threads(&config, Some(&CpuSet::new([1])), true), 1);
    }

    #[test]
    fn a_python_worker_leaves_one_of_its_cpus_to_the_interpreter() {
        // Files only: the worker's whole share.
        assert_eq!(
            threads_for(2, 1, false),
            2,
            "a file server's worker lost a CPU"
        );
        assert_eq!(threads_for(8, 3, false), 3);
        // An application: one fewer, never none.
        assert_eq!(
            threads_for(2, 1, true),
            1,
            "a Python worker must leave one CPU to its interpreter (decision 0115)"
        );
        assert_eq!(threads_for(8, 1, true), 7);
        assert_eq!(
            threads_for(2, 2, true),
            1,
            "a worker needs one async thread"
        );
        assert_eq!(threads_for(1, 4, true), 1);
        assert_eq!(threads_for(4, 0, false), 4, "no workers is read as one");
    }
}
