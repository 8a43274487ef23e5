//! Starting one worker: a socketpair for its control channel (the child's end becomes its
//! stdin), the listeners passed over it with `SCM_RIGHTS` before the child even exists,
//! a re-exec of our own binary in a process group of its own, and the reaper task that
//! reports its exit. The parent's end of the channel goes to the driver thread, which
//! reads and writes it itself (see `io.rs`): a broker request and its answer cross no
//! thread inside the parent.

use std::collections::BTreeMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use servery_core::supervisor::{Event, ExitStatus};
use servery_core::{Generation, Slot, ValidConfig, WorkerId};
use tokio::runtime::Handle;

use super::io::{Inbound, InboundTx};
use crate::cli::WORKER_SUBCOMMAND;
use crate::fdpass::{self, FdPassError};
use crate::http::Deadlines;
use crate::worker::args::SiteFlags;
use crate::write::args::UploadArgs;

/// Set (to anything) to start workers from the path the parent was started from rather
/// than `/proc/self/exe`; see [`Launcher::program`].
pub const WORKER_PROGRAM_ENV: &str = "SERVERY_WORKER_FROM_START_PATH";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    #[error("the listeners are closed")]
    ListenersClosed,
    #[error("cannot create the control channel: {0}")]
    Channel(#[source] io::Error),
    #[error("cannot pass the listeners: {0}")]
    PassListeners(#[source] FdPassError),
    #[error("cannot start {exe}: {source}", exe = .exe.display())]
    Exec {
        exe: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The per-worker budgets a worker process is started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerBudget {
    pub max_connections: u32,
    pub max_blocking_threads: u32,
    pub compression_cache_size: u64,
    pub file_cache_size: u64,
    /// Async threads per worker: the CPUs shared out among the workers, at least one.
    /// The workers are the parallelism; more async threads than a worker's share of the
    /// CPUs only adds cross-thread wake-ups (measured in docs/benchmarks.md) and memory.
    pub runtime_threads: u32,
}

impl WorkerBudget {
    pub fn of(config: &ValidConfig) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        WorkerBudget {
            max_connections: config.budgets().max_connections(),
            max_blocking_threads: config.budgets().max_blocking_threads(),
            compression_cache_size: config.budgets().compression_cache_size(),
            file_cache_size: config.budgets().file_cache_size(),
            runtime_threads: cpus.div_ceil(config.workers().max(1)).max(1),
        }
    }
}

/// How every worker serves: the options passed on its command line (nothing secret), and
/// the encoded setup preamble with the TLS identity and credentials (see
/// [`crate::worker::setup`]). Fixed for the life of the parent.
#[derive(Clone, Default)]
pub struct WorkerSite {
    pub flags: SiteFlags,
    /// [`crate::worker::setup::Setup::encode`], written before HELLO.
    pub setup_frame: Vec<u8>,
}

impl std::fmt::Debug for WorkerSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerSite")
            .field("flags", &self.flags)
            .field(
                "setup_frame",
                &format_args!("<{} bytes>", self.setup_frame.len()),
            )
            .finish()
    }
}

/// The parent's side of one running worker.
#[derive(Debug)]
pub struct Launched {
    pub pid: u32,
    /// The parent's end of the control channel, non-blocking; the setup preamble is the
    /// first thing to write on it.
    pub channel: UnixStream,
    pub setup_frame: Vec<u8>,
}

/// How workers are started.
#[derive(Debug)]
pub struct Launcher {
    exe: PathBuf,
    root: PathBuf,
    site: WorkerSite,
    /// The upload flags the parent was started with (`crate::write::args`).
    upload: UploadArgs,
    /// What a worker of each generation is started with, by the generation that
    /// introduced it. The core's Spawn action names only the generation, so a reload
    /// records its candidate's terms here.
    generations: BTreeMap<u64, GenerationTerms>,
}

/// The per-generation part of a worker's command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GenerationTerms {
    budget: WorkerBudget,
    /// `--upload` and its settings, some of which (the largest upload, the broker's
    /// reply timeout and queue bound) follow reloadable broker fields.
    upload_args: Vec<String>,
    /// The connection deadlines ([`Deadlines::to_args`]).
    deadline_args: Vec<String>,
}

impl Launcher {
    pub fn new(
        exe: PathBuf,
        root: PathBuf,
        site: WorkerSite,
        upload: UploadArgs,
        first: &ValidConfig,
    ) -> Self {
        let mut launcher = Launcher {
            exe,
            root,
            site,
            upload,
            generations: BTreeMap::new(),
        };
        launcher.set_generation(Generation(1), first);
        launcher
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

    /// Workers of `generation` (and later ones, until the next entry) run under `config`.
    pub fn set_generation(&mut self, generation: Generation, config: &ValidConfig) {
        let terms = GenerationTerms {
            budget: WorkerBudget::of(config),
            upload_args: self.upload.worker_args(config),
            deadline_args: Deadlines::of(config).to_args(),
        };
        self.generations.insert(generation.0, terms);
    }

    fn terms(&self, generation: Generation) -> Option<&GenerationTerms> {
        self.generations
            .range(..=generation.0)
            .next_back()
            .or_else(|| self.generations.iter().next())
            .map(|(_, t)| t)
    }

    pub fn launch(
        &self,
        rt: &Handle,
        events: &InboundTx,
        worker: WorkerId,
        slot: Slot,
        generation: Generation,
        listeners: &[TcpListener],
    ) -> Result<Launched, SpawnError> {
        if listeners.is_empty() {
            return Err(SpawnError::ListenersClosed);
        }
        let (ours, theirs) = UnixStream::pair().map_err(SpawnError::Channel)?;
        // The descriptors wait in the socket buffer until the child reads them, ahead of
        // HELLO, which the driver writes later on the same stream.
        let fds: Vec<BorrowedFd<'_>> = listeners.iter().map(AsFd::as_fd).collect();
        fdpass::send_fds(ours.as_fd(), &fds).map_err(SpawnError::PassListeners)?;
        ours.set_nonblocking(true).map_err(SpawnError::Channel)?;

        let terms = self.terms(generation).cloned().unwrap_or(GenerationTerms {
            budget: WorkerBudget {
                max_connections: 1024,
                max_blocking_threads: 64,
                compression_cache_size: 0,
                file_cache_size: 0,
                runtime_threads: 0,
            },
            upload_args: Vec::new(),
            deadline_args: Vec::new(),
        });
        let budget = terms.budget;
        let mut cmd = tokio::process::Command::new(self.program());
        cmd.arg0(&self.exe)
            .arg(WORKER_SUBCOMMAND)
            .arg("--root")
            .arg(&self.root)
            .arg("--worker-id")
            .arg(worker.0.to_string())
            .arg("--slot")
            .arg(slot.0.to_string())
            .arg("--generation")
            .arg(generation.0.to_string())
            .arg("--max-connections")
            .arg(budget.max_connections.to_string())
            .arg("--max-blocking-threads")
            .arg(budget.max_blocking_threads.to_string())
            .arg("--compression-cache-size")
            .arg(budget.compression_cache_size.to_string())
            .arg("--file-cache-size")
            .arg(budget.file_cache_size.to_string())
            .arg("--runtime-threads")
            .arg(budget.runtime_threads.to_string());
        cmd.args(self.site.flags.to_args());
        cmd.args(&terms.upload_args);
        cmd.args(&terms.deadline_args);
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
        rt.spawn(reap(worker, child, events.clone()));
        Ok(Launched {
            pid,
            channel: ours,
            // First on the stream after the listeners, ahead of HELLO (the worker reads it
            // before decoding frames).
            setup_frame: self.site.setup_frame.clone(),
        })
    }
}

/// Reports the worker's exit. Whatever it wrote before dying is still in its channel; the
/// driver reads that out before it hands the supervisor the exit, so a READY followed at
/// once by a crash is a crash of a ready worker, not a startup failure.
async fn reap(worker: WorkerId, mut child: tokio::process::Child, events: InboundTx) {
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
    let _ = events.send(Inbound::Event(Event::Exited { worker, status }));
}
