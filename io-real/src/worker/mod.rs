//! A worker process (`servery __worker`): receives its listeners over the control channel
//! on stdin, then runs [`servery_core::worker::WorkerLifecycle`] in the same tokio runtime
//! that serves requests, so a wedged runtime stops heartbeating and gets replaced.

mod accepting;
mod admission;
pub mod args;
pub mod broker;
mod control_writer;
pub(crate) mod memory;
// Fault injection for the black-box tests, only with the `test-hooks` feature; otherwise
// a stand-in that injects nothing (see Cargo.toml and no_fault.rs).
#[cfg(feature = "test-hooks")]
pub mod fault;
#[cfg(not(feature = "test-hooks"))]
#[path = "no_fault.rs"]
pub mod fault;
mod serve;
pub mod setup;
pub mod site_config;

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

pub use args::WorkerArgs;
use fault::TestFault;
pub(crate) use serve::crash;

/// Errors that end a worker before its lifecycle runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    #[error("no control channel on stdin: {0}")]
    Channel(#[source] std::io::Error),
    #[error("cannot receive the listeners: {0}")]
    Listeners(#[from] crate::fdpass::FdPassError),
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("{0}")]
    Fault(String),
    #[error(transparent)]
    Setup(#[from] setup::SetupError),
}

/// Runs the worker and exits the process; never returns.
pub fn run(args: WorkerArgs) -> ! {
    let code = match start(args) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = %e, "worker cannot start");
            1
        }
    };
    std::process::exit(code)
}

fn start(args: WorkerArgs) -> Result<i32, WorkerError> {
    // Worker ids count spawns from 1.
    let index = args.worker_id.saturating_sub(1);
    let fault =
        TestFault::from_env(index, args.slot, args.generation).map_err(WorkerError::Fault)?;
    // Named in `ps` and `top` as an operator looks for it, once its arguments are read.
    let title = format!(
        "servery: worker {} (slot {}, gen {})",
        args.worker_id, args.slot, args.generation
    );
    if let Err(e) = crate::os::set_process_title(&title) {
        tracing::debug!(error = %e, "the process title stays the command line");
    }
    if fault.exit_at_start() {
        tracing::warn!(worker = args.worker_id, "test fault: exiting at start");
        return Ok(1);
    }
    let control: UnixStream = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(UnixStream::from)
        .map_err(WorkerError::Channel)?;
    // The listeners, then the preamble: the parent sends both ahead of any frame. They
    // are read before the runtime exists because its size is in the preamble.
    let mut fds = crate::fdpass::recv_fds(control.as_fd())?;
    // The scoreboard, when the parent made one, comes first: the one descriptor that is
    // not a socket.
    let scoreboard = fds
        .first()
        .is_some_and(|fd| rustix::net::sockopt::socket_type(fd) == Err(rustix::io::Errno::NOTSOCK))
        .then(|| fds.remove(0));
    let setup = setup::Setup::read_from(&control)?;
    // Before the runtime and the interpreter start a thread: every thread they start
    // inherits it (decision 0122). Pinning is a gain, not a condition: a worker whose
    // CPUs were taken away since the parent read them serves unpinned.
    if let Some(cpus) = &setup.cpus {
        let set = servery_core::cpu_affinity::CpuSet::new(cpus.iter().copied());
        match crate::os::pin_to_cpus(&set) {
            Ok(()) => tracing::debug!(cpus = %set, "pinned to its CPUs"),
            Err(e) => {
                tracing::warn!(cpus = %set, error = %e, "cannot keep to its CPUs: it runs where the system puts it")
            }
        }
    }
    // Likewise before any thread starts: they inherit the policy (decision 0129). Also a
    // gain, not a condition.
    if setup.settings.worker_scheduling == crate::cli::Scheduling::Batch
        && let Err(e) = crate::os::schedule_as_batch()
    {
        tracing::warn!(error = %e, "cannot schedule as a batch: every wake-up may preempt");
    }
    let threads = match setup.runtime_threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(2)),
        n => n as usize,
    };
    // One thread: a current-thread runtime, as in nginx's process-per-core model. Every
    // wake-up then stays on this thread instead of unparking a sibling that may steal
    // the task (the dominant cost per small request on the multi-thread runtime), and the
    // idle worker is one thread and one malloc arena smaller.
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let rt = builder
        .max_blocking_threads(site_config::max_blocking_threads(&setup))
        .thread_name("servery-worker")
        .enable_all()
        .build()
        .map_err(WorkerError::Runtime)?;
    // On a runtime thread, not on this one: on the multi-thread runtime `block_on` polls
    // its future here, outside the runtime's threads, so every accepted connection and
    // every broker reply the lifecycle loop hands on would cross to another thread.
    let code = match rt.block_on(rt.spawn(serve::run(args, setup, fds, scoreboard, control, fault)))
    {
        Ok(served) => served?,
        // A panic ends the worker as it would have on this thread.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => return Err(WorkerError::Runtime(std::io::Error::other(e))),
    };
    // Exit without waiting for blocking file reads or connections still open past the
    // drain deadline: the lifecycle already decided that time is up.
    std::mem::forget(rt);
    Ok(code)
}
