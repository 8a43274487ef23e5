//! The real [`ParentIo`]: the shared driver loop runs on the main thread and blocks in
//! [`RealIo::wait`] on a channel that the host runtime (children, channels, signals, the
//! control socket) feeds. Actions are carried out right here: spawning registers the
//! child with the host runtime, signals go straight to process groups.

use std::collections::{HashMap, VecDeque};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};

use rustix::io::Errno;
use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::Value;
use servery_core::driver::{ParentIo, Wakeup};
use servery_core::parent::{Parent, ParentAction};
use servery_core::proto::encode_parent;
use servery_core::supervisor::{Command, Event};
use servery_core::{Generation, Instant, RawConfig, Slot, WorkerId};
use tokio::runtime::Handle;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use super::cleanup::remove_worker_temp_files;
use super::spawn::Launcher;
use super::status::{ServiceInfo, status_json};
use crate::clock::Clock;

/// The outcome `ctl reload` waits for: the committed generation, or why not.
pub type ReloadReply = oneshot::Sender<Result<u64, String>>;

/// What the host runtime hands the driver.
#[derive(Debug)]
pub enum Inbound {
    Event(Event),
    /// A status snapshot is wanted; it is built in `observe`, off the hot path.
    Status(oneshot::Sender<Value>),
    /// A reload candidate, with whoever waits for its outcome.
    Reload(Box<RawConfig>, Option<ReloadReply>),
}

/// State shared with the control-socket server.
#[derive(Debug, Default)]
pub struct ControlState {
    /// Set once the listeners are closed: only `status` is served from then on.
    pub closing: AtomicBool,
}

#[derive(Debug)]
struct Channel {
    writer: UnboundedSender<Vec<u8>>,
    reader: AbortHandle,
}

#[derive(Debug)]
pub struct RealIo {
    clock: Clock,
    rt: Handle,
    events_tx: Sender<Inbound>,
    events: Receiver<Inbound>,
    /// Events the driver produced itself (Spawned, SpawnFailed), delivered first.
    inbox: VecDeque<Event>,
    listeners: Vec<TcpListener>,
    launcher: Launcher,
    channels: HashMap<WorkerId, Channel>,
    /// Live process groups; an entry goes when its worker is reaped, so a recycled pid
    /// is never signalled.
    pids: HashMap<WorkerId, u32>,
    control: Arc<ControlState>,
    info: ServiceInfo,
    root: PathBuf,
    status_waiters: Vec<oneshot::Sender<Value>>,
    /// The reload being handled in this step, then the one whose rollout is running.
    reload_new: Option<ReloadReply>,
    reload_waiting: Option<ReloadReply>,
    committed: Generation,
    announced_ready: bool,
    exit: Option<i32>,
}

/// Everything [`RealIo::new`] needs.
#[derive(Debug)]
pub struct RealIoParts {
    pub clock: Clock,
    pub rt: Handle,
    pub events_tx: Sender<Inbound>,
    pub events: Receiver<Inbound>,
    pub listeners: Vec<TcpListener>,
    pub launcher: Launcher,
    pub control: Arc<ControlState>,
    pub info: ServiceInfo,
    pub root: PathBuf,
}

impl RealIo {
    pub fn new(p: RealIoParts) -> Self {
        RealIo {
            clock: p.clock,
            rt: p.rt,
            events_tx: p.events_tx,
            events: p.events,
            inbox: VecDeque::new(),
            listeners: p.listeners,
            launcher: p.launcher,
            channels: HashMap::new(),
            pids: HashMap::new(),
            control: p.control,
            info: p.info,
            root: p.root,
            status_waiters: Vec::new(),
            reload_new: None,
            reload_waiting: None,
            committed: Generation(0),
            announced_ready: false,
            exit: None,
        }
    }

    pub fn exit_code(&self) -> Option<i32> {
        self.exit
    }

    /// Last resort when the driver stops without an exit (the host runtime died): no
    /// worker may outlive us serving.
    pub fn kill_all(&mut self) {
        let workers: Vec<WorkerId> = self.pids.keys().copied().collect();
        for worker in workers {
            self.signal_group(worker, Signal::KILL);
        }
    }

    fn signal_group(&self, worker: WorkerId, signal: Signal) {
        let Some(pid) = self
            .pids
            .get(&worker)
            .and_then(|&pid| Pid::from_raw(pid as i32))
        else {
            return;
        };
        match kill_process_group(pid, signal) {
            // Already gone, just not reaped yet.
            Ok(()) | Err(Errno::SRCH) => {}
            Err(e) => {
                tracing::warn!(%worker, ?signal, error = %e, "cannot signal the worker's process group")
            }
        }
    }

    fn reload(&mut self, raw: Box<RawConfig>, reply: Option<ReloadReply>) -> Event {
        // Record the candidate's terms for the generation it would become; if it is
        // rejected, the next reload overwrites the entry.
        if let Ok(valid) = raw.validate() {
            self.launcher
                .set_generation(Generation(self.committed.0 + 1), &valid);
        }
        if let Some(old) = self
            .reload_new
            .replace(reply.unwrap_or_else(|| oneshot::channel().0))
        {
            let _ = old.send(Err("superseded by another reload".into()));
        }
        Event::Command(Command::Reload(raw))
    }

    fn perform_spawn(&mut self, worker: WorkerId, slot: Slot, generation: Generation) {
        match self.launcher.launch(
            &self.rt,
            &self.events_tx,
            worker,
            slot,
            generation,
            &self.listeners,
        ) {
            Ok(launched) => {
                tracing::debug!(%worker, pid = launched.pid, %generation, "worker spawned");
                self.pids.insert(worker, launched.pid);
                self.channels.insert(
                    worker,
                    Channel {
                        writer: launched.writer,
                        reader: launched.reader,
                    },
                );
                self.inbox.push_back(Event::Spawned {
                    worker,
                    pid: launched.pid,
                });
            }
            Err(e) => {
                tracing::error!(%worker, error = %e, "cannot spawn a worker");
                self.inbox.push_back(Event::SpawnFailed {
                    worker,
                    error: e.to_string(),
                });
            }
        }
    }

    fn cleanup(&mut self, worker: WorkerId) {
        if let Some(channel) = self.channels.remove(&worker) {
            channel.reader.abort();
            drop(channel.writer);
        }
        let root = self.root.clone();
        self.rt.spawn_blocking(move || match remove_worker_temp_files(&root, worker) {
            Ok(0) => {}
            Ok(n) => tracing::info!(%worker, files = n, "removed the worker's temporary files"),
            Err(e) => tracing::warn!(%worker, error = %e, "cannot remove the worker's temporary files"),
        });
    }
}

impl ParentIo for RealIo {
    fn wait(&mut self, deadline: Option<Instant>) -> Wakeup {
        if let Some(event) = self.inbox.pop_front() {
            return Wakeup::Event(self.clock.now(), event);
        }
        let received = match deadline {
            None => self
                .events
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected),
            Some(deadline) => {
                let now = self.clock.now();
                if deadline <= now {
                    return Wakeup::Timeout(now);
                }
                self.events.recv_timeout(deadline - now)
            }
        };
        let now = self.clock.now();
        match received {
            Ok(Inbound::Event(event)) => {
                if let Event::Exited { worker, .. } = &event {
                    self.pids.remove(worker);
                }
                Wakeup::Event(now, event)
            }
            Ok(Inbound::Status(reply)) => {
                self.status_waiters.push(reply);
                Wakeup::Timeout(now)
            }
            Ok(Inbound::Reload(raw, reply)) => {
                let event = self.reload(raw, reply);
                Wakeup::Event(now, event)
            }
            Err(RecvTimeoutError::Timeout) => Wakeup::Timeout(now),
            Err(RecvTimeoutError::Disconnected) => Wakeup::Halt,
        }
    }

    fn perform(&mut self, _now: Instant, action: ParentAction) {
        match action {
            ParentAction::Spawn {
                worker,
                slot,
                generation,
            } => self.perform_spawn(worker, slot, generation),
            ParentAction::Send { worker, message } => {
                if let Some(channel) = self.channels.get(&worker) {
                    let mut frame = Vec::with_capacity(48);
                    encode_parent(&message, &mut frame);
                    // A closed writer means the worker is going; its reap follows.
                    let _ = channel.writer.send(frame);
                }
            }
            ParentAction::Terminate { worker } => {
                tracing::info!(%worker, "terminating (SIGTERM to its process group)");
                self.signal_group(worker, Signal::TERM);
            }
            ParentAction::Kill { worker } => {
                tracing::info!(%worker, "killing (SIGKILL to its process group)");
                self.signal_group(worker, Signal::KILL);
            }
            ParentAction::CloseListeners => {
                tracing::info!("closing the listeners");
                self.listeners.clear();
                self.control.closing.store(true, Ordering::Release);
            }
            ParentAction::CleanupWorker { worker } => self.cleanup(worker),
            ParentAction::Singleton(action) => tracing::info!(?action, "singleton"),
            ParentAction::GenerationCommitted { generation } => {
                if self.announced_ready {
                    tracing::info!(%generation, "generation committed");
                } else {
                    self.announced_ready = true;
                    say!("servery: ready (generation {})", generation.0);
                }
                if let Some(reply) = self.reload_waiting.take() {
                    let _ = reply.send(Ok(generation.0));
                }
            }
            ParentAction::ServiceFailed { reason, message } => {
                tracing::error!(reason = reason.code(), %message, "service failed");
                tell!("servery: service failed ({}): {message}", reason.code());
            }
            ParentAction::ReloadRejected { message } => {
                tracing::warn!(%message, "reload rejected");
                if let Some(reply) = self
                    .reload_new
                    .take()
                    .or_else(|| self.reload_waiting.take())
                {
                    let _ = reply.send(Err(message));
                }
            }
            ParentAction::RecyclingSuspended { message } => {
                tracing::warn!(%message, "recycling suspended");
            }
            ParentAction::Exit { code } => {
                tracing::info!(code, "exiting");
                self.exit = Some(code);
            }
        }
    }

    fn log_writer_idle(&self) -> bool {
        true
    }

    fn write_log(&mut self, _now: Instant, _batch: Vec<String>) {}

    fn observe(&mut self, now: Instant, parent: &Parent) {
        if cfg!(debug_assertions)
            && let Err(e) = parent.check_invariants()
        {
            // Debug builds only: a broken invariant is a bug in the core or this driver.
            panic!("core invariant violated: {e}");
        }
        self.committed = parent.supervisor().generation();
        if let Some(reply) = self.reload_new.take()
            && let Some(old) = self.reload_waiting.replace(reply)
        {
            let _ = old.send(Err("superseded by another reload".into()));
        }
        if !self.status_waiters.is_empty() {
            let status = status_json(parent, now, &self.info);
            for waiter in self.status_waiters.drain(..) {
                let _ = waiter.send(status.clone());
            }
        }
    }
}
