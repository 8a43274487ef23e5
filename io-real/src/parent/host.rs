//! The host runtime: a current-thread tokio runtime on a background thread that owns the
//! children, their channels, the signal handlers and the control socket. It never decides
//! anything; it turns what happens into [`Inbound`] messages for the driver.

use std::io;
use std::thread::JoinHandle;
use std::time::Duration;

use servery_core::supervisor::{Command, Event};
use tokio::runtime::Handle;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::oneshot;

use super::control::Reparse;
use super::io::{Inbound, InboundTx};

/// The host runtime's blocking pool: tokio's default for the parent's own blocking work
/// (file cleanup, TFTP writes' disk batches) plus one thread for every TFTP read the limit
/// allows, each of which holds its thread for the whole transfer (`crate::tftp`). Threads
/// are made on demand; this is only the ceiling.
const BLOCKING_THREADS: usize = 512 + servery_core::config::MAX_TFTP_TRANSFERS as usize;

#[derive(Debug)]
pub(super) struct Host {
    handle: Handle,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Host {
    pub(super) fn start() -> io::Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let (shutdown, stop) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("servery-host".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .max_blocking_threads(BLOCKING_THREADS)
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(rt.handle().clone()));
                rt.block_on(async {
                    let _ = stop.await;
                });
                rt.shutdown_timeout(Duration::from_millis(500));
            })?;
        let handle = ready_rx
            .recv()
            .map_err(|_| io::Error::other("the host runtime thread died"))??;
        Ok(Host {
            handle,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    pub(super) fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The signals the parent handles. Registered before any worker exists, so a SIGTERM
/// that arrives early still stops the service gracefully instead of killing the parent
/// and orphaning its workers. Every signal whose default would stop or kill the parent is
/// either given a meaning or ignored here (docs/operations.md has the table).
#[derive(Debug)]
pub(super) struct Signals {
    term: Signal,
    int: Signal,
    quit: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
    ttin: Signal,
    ttou: Signal,
}

impl Signals {
    /// Must be called inside the host runtime's context.
    pub(super) fn register() -> io::Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
            ttin: signal(SignalKind::from_raw(rustix::process::Signal::TTIN.as_raw()))?,
            ttou: signal(SignalKind::from_raw(rustix::process::Signal::TTOU.as_raw()))?,
        })
    }

    /// SIGTERM and SIGQUIT stop gracefully; SIGINT too, and a second one kills the workers
    /// left (the core decides which it is); SIGHUP reloads from the original command line
    /// and environment and the `--config` file read again; SIGTTIN and SIGTTOU reload
    /// with one worker more or fewer; SIGUSR1 reopens the access log; SIGUSR2 is ignored
    /// (said in the log: servery reloads in place, it does not re-execute itself).
    pub(super) async fn forward(mut self, events: InboundTx, reparse: Reparse) {
        let stop = || Inbound::Event(Event::Command(Command::Stop));
        loop {
            let inbound = tokio::select! {
                _ = self.term.recv() => {
                    tracing::info!("SIGTERM: stopping");
                    stop()
                }
                _ = self.quit.recv() => {
                    tracing::info!("SIGQUIT: stopping");
                    stop()
                }
                _ = self.int.recv() => {
                    tracing::info!("SIGINT: stopping (a second one stops at once)");
                    Inbound::Event(Event::Command(Command::Interrupt))
                }
                _ = self.usr1.recv() => {
                    tracing::info!("SIGUSR1: reopening the access log");
                    Inbound::Control(
                        super::io::Call::Request(servery_core::control::Request::ReopenLogs),
                        None,
                    )
                }
                _ = self.usr2.recv() => {
                    tracing::warn!(
                        "SIGUSR2 ignored: servery does not re-execute itself; SIGHUP or \
                         `servery ctl reload` rolls a new generation without downtime"
                    );
                    continue;
                }
                _ = self.hup.recv() => {
                    tracing::info!("SIGHUP: reloading");
                    Inbound::Reload(reparse().map(Box::new))
                }
                _ = self.ttin.recv() => {
                    tracing::info!("SIGTTIN: reloading with one worker more");
                    Inbound::Resize(reparse().map(Box::new), 1)
                }
                _ = self.ttou.recv() => {
                    tracing::info!("SIGTTOU: reloading with one worker fewer");
                    Inbound::Resize(reparse().map(Box::new), -1)
                }
            };
            if events.send(inbound).is_err() {
                return;
            }
        }
    }
}
