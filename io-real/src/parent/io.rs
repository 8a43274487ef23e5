//! The real [`ParentIo`]: the shared driver loop runs on the main thread and blocks in
//! [`RealIo::wait`] on one `poll` over every worker's control channel and a waker that the
//! host runtime (reaped children, signals, the control socket) rings when it queues an
//! [`Inbound`]. The driver thread reads and writes the control channels itself, so a
//! worker's broker request is decoded, answered and written back without crossing a thread
//! inside the parent. Actions are carried out right here: spawning registers the child's
//! reaper with the host runtime, signals go straight to process groups.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SendError, Sender, TryRecvError};

use mio::net::UnixStream;
use mio::{Interest, Poll, Token, Waker};

use rustix::io::Errno;
use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::Value;
use servery_core::control::{Answer, Request};
use servery_core::driver::{ParentIo, Wakeup};
use servery_core::parent::{JournalWrite, Parent, ParentAction};
use servery_core::proto::{FrameDecoder, MAX_FRAME_DEFAULT, encode_parent};
use servery_core::supervisor::{Action, Command, Event, ExitStatus, FinalCounts};
use servery_core::{Instant, RawConfig, ReloadId, RequestId, WorkerId};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::cleanup::Cleaner;
use super::spawn::{Launcher, WorkerStart};
use super::status::{ServiceInfo, status_json};
use crate::clock::Clock;

#[path = "io_acme.rs"]
mod acme;

/// Where the core's answer to a control request goes (nowhere for a signal's).
pub(super) type AnswerReply = Option<oneshot::Sender<Answer>>;

/// A control request as the control socket or a signal read it, before the driver names
/// it for the core.
#[derive(Debug)]
pub enum Call {
    /// Handed to the core as it is.
    Request(Request),
    /// `ctl reload`: the configuration read again, or why it could not be. The driver
    /// re-reads the certificate files first and names the reload.
    Reload(Result<Box<RawConfig>, String>),
}

/// What the host runtime hands the driver.
#[derive(Debug)]
pub enum Inbound {
    Event(Event),
    /// A worker's process was reaped, with what its scoreboard held then (none when it
    /// had none).
    Reaped {
        worker: WorkerId,
        status: ExitStatus,
        counts: Option<Box<FinalCounts>>,
    },
    /// A status snapshot is wanted; it is built in `observe`, off the hot path.
    Status(oneshot::Sender<Value>),
    /// An operator's request (the control socket, SIGUSR1): the core decides it and
    /// answers, and the answer goes to `reply`.
    Control(Call, AnswerReply),
    /// SIGHUP's reload candidate, or why its configuration could not be read: the core
    /// judges it either way, so every reload is counted alike. Nobody waits for it.
    Reload(Result<Box<RawConfig>, String>),
    /// A reload with the committed worker count changed by this much (SIGTTIN, SIGTTOU).
    Resize(Result<Box<RawConfig>, String>, i32),
    /// The access-log writer finished the batch it was given.
    LogWritten,
    /// The admin listener wants the core's counters (built in `observe`, like a status).
    Metrics(oneshot::Sender<Box<super::metrics::Snapshot>>),
}

/// The host runtime's way into the driver: the channel, and a ring of the waker the
/// driver's `poll` waits on.
#[derive(Debug, Clone)]
pub struct InboundTx {
    tx: Sender<Inbound>,
    waker: Arc<Waker>,
}

impl InboundTx {
    pub fn send(&self, inbound: Inbound) -> Result<(), SendError<Inbound>> {
        self.tx.send(inbound)?;
        // A failed ring means the poll is gone with the driver; the send above already
        // reached a channel nobody will read.
        let _ = self.waker.wake();
        Ok(())
    }
}

/// The driver's `poll` and the way the host runtime wakes it.
#[derive(Debug)]
pub(super) struct DriverPoll {
    poll: Poll,
    inbound: Receiver<Inbound>,
    tx: InboundTx,
}

/// The waker's token; worker channels use their worker id (ids start at 1).
const WAKE: Token = Token(0);

impl DriverPoll {
    pub(super) fn new() -> io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let (tx, inbound) = std::sync::mpsc::channel();
        Ok(DriverPoll {
            poll,
            inbound,
            tx: InboundTx { tx, waker },
        })
    }

    pub(super) fn sender(&self) -> InboundTx {
        self.tx.clone()
    }
}

/// The parent's end of one worker's control channel.
#[derive(Debug)]
struct Channel {
    stream: UnixStream,
    decoder: FrameDecoder,
    /// Encoded frames not yet taken by the socket, oldest first.
    out: Vec<u8>,
    /// Reading has ended (EOF, error or a malformed frame): nothing more is delivered.
    read_closed: bool,
    /// Registered for writability, which only a backlog in `out` asks for: every byte the
    /// worker reads frees room on our end, and a standing writable interest would wake
    /// the driver for each of them.
    awaits_room: bool,
}

#[derive(Debug)]
pub(super) struct RealIo {
    clock: Clock,
    rt: Handle,
    store: Option<crate::cluster::StoreDriver>,
    /// `--proxy-health`: sends the probes the core asks for.
    prober: Option<super::upstream_probe::Prober>,
    poll: DriverPoll,
    ready: mio::Events,
    read_buf: Vec<u8>,
    /// Events waiting to be handed to the driver, in order: the driver's own (Spawned,
    /// SpawnFailed) and what was read from the channels.
    inbox: VecDeque<Event>,
    listeners: super::listener_sets::ListenerSets,
    launcher: Launcher,
    cleaner: Cleaner,
    channels: HashMap<WorkerId, Channel>,
    /// Live process groups; an entry goes when its worker is reaped, so a recycled pid
    /// is never signalled.
    pids: HashMap<WorkerId, u32>,
    journal: Option<super::dav_journal::Journal>,
    log_writer: Option<crate::access_log::writer::LogWriter>,
    /// The singleton services (`None` once finished).
    services: Option<super::services::ServiceHost>,
    /// A batch is with the writer (it takes one at a time: the queue stays in the core).
    log_busy: bool,
    tftp_replies: crate::tftp::TftpReplies,
    /// `--tls-cert/--tls-key`, read again on every reload.
    tls_files: Option<super::tls_material::TlsFiles>,
    info: ServiceInfo,
    status_waiters: Vec<oneshot::Sender<Value>>,
    metrics_waiters: Vec<oneshot::Sender<Box<super::metrics::Snapshot>>>,
    /// Who waits for each control request's answer.
    answers: HashMap<RequestId, oneshot::Sender<Answer>>,
    next_request: u64,
    next_reload: u64,
    announced_ready: bool,
    /// What the service manager is told (`NOTIFY_SOCKET`), and its watchdog.
    notifier: super::systemd::Notifier,
    /// The core's `time_not_running` at the last step.
    not_running_seen: core::time::Duration,
    /// How many worker exits have had their log record.
    exits_logged: u64,
    /// The ACME task, with `--acme` (see `io_acme.rs`).
    acme: Option<super::services::acme::AcmeLink>,
    /// `--admin`: where the committed generation's deadlines go (a reload may change them).
    admin_deadlines: Option<tokio::sync::watch::Sender<crate::http::Deadlines>>,
}

/// A late wake worth a log line: more than scheduling noise.
const NOT_RUNNING_WORTH_A_LINE: core::time::Duration = core::time::Duration::from_millis(100);

/// Everything [`RealIo::new`] needs.
#[derive(Debug)]
pub(super) struct RealIoParts {
    pub clock: Clock,
    pub rt: Handle,
    /// With `--cluster`: carries the core's store calls to etcd.
    pub store: Option<crate::cluster::StoreDriver>,
    pub prober: Option<super::upstream_probe::Prober>,
    pub poll: DriverPoll,
    pub listeners: super::listener_sets::ListenerSets,
    pub launcher: Launcher,
    pub cleaner: Cleaner,
    /// Where the WebDAV lock journal goes (`--state-dir`).
    pub journal: Option<super::dav_journal::Journal>,
    /// The access log's one writer (`--access-log`).
    pub log_writer: Option<crate::access_log::writer::LogWriter>,
    /// The owners of the singletons' actions.
    pub services: super::services::ServiceHost,
    /// Where broker answers to the parent's own client (TFTP writes) go.
    pub tftp_replies: crate::tftp::TftpReplies,
    /// `--tls-cert/--tls-key`, read again on every reload.
    pub tls_files: Option<super::tls_material::TlsFiles>,
    pub info: ServiceInfo,
    pub notifier: super::systemd::Notifier,
    pub acme: Option<super::services::acme::AcmeLink>,
    /// `--admin`: the committed generation's deadlines, for the connections it accepts.
    pub admin_deadlines: Option<tokio::sync::watch::Sender<crate::http::Deadlines>>,
}

impl RealIo {
    pub(super) fn new(p: RealIoParts) -> Self {
        RealIo {
            clock: p.clock,
            rt: p.rt,
            store: p.store,
            prober: p.prober,
            poll: p.poll,
            ready: mio::Events::with_capacity(64),
            read_buf: vec![0u8; 16 * 1024],
            inbox: VecDeque::new(),
            listeners: p.listeners,
            launcher: p.launcher,
            cleaner: p.cleaner,
            channels: HashMap::new(),
            pids: HashMap::new(),
            journal: p.journal,
            log_writer: p.log_writer,
            services: Some(p.services),
            log_busy: false,
            tftp_replies: p.tftp_replies,
            tls_files: p.tls_files,
            info: p.info,
            status_waiters: Vec::new(),
            metrics_waiters: Vec::new(),
            answers: HashMap::new(),
            next_request: 0,
            next_reload: 0,
            announced_ready: false,
            notifier: p.notifier,
            not_running_seen: core::time::Duration::ZERO,
            exits_logged: 0,
            acme: p.acme,
            admin_deadlines: p.admin_deadlines,
        }
    }

    /// After the exit: give the services their bounded time to finish (their stops).
    pub(super) fn finish_services(&mut self, bound: std::time::Duration) {
        if let Some(services) = self.services.take() {
            services.finish(bound);
        }
    }

    /// Last resort when the driver stops without an exit (the host runtime died): no
    /// worker may outlive us serving.
    pub(super) fn kill_all(&mut self) {
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

    /// A name for the next reload.
    fn reload_id(&mut self) -> ReloadId {
        self.next_reload += 1;
        ReloadId(self.next_reload)
    }

    /// A reload (SIGHUP's, SIGTTIN's, SIGTTOU's): named here, judged by the core.
    fn reload(&mut self, raw: Result<Box<RawConfig>, String>) -> Event {
        let id = self.reload_id();
        Event::Command(match raw {
            Ok(config) => Command::Reload { id, config },
            Err(message) => Command::ReloadUnreadable { id, message },
        })
    }

    /// The core's [`ParentAction::ReadTlsFiles`]: the certificate files read and checked
    /// now, answered at once (what the reload does with the answer is the core's,
    /// decision 0093).
    fn read_tls_files(&mut self, reload: ReloadId) {
        let read = match &self.tls_files {
            Some(files) => super::tls_material::reread(files).map_err(|e| {
                let reason = super::tls_material::refusal(files, &e);
                tracing::error!(error = %reason, "reload refused");
                reason
            }),
            None => Err("no certificate files were given to read again".to_owned()),
        };
        self.inbox.push_back(Event::TlsFilesRead { reload, read });
    }

    fn perform_spawn(&mut self, start: WorkerStart<'_>) {
        let WorkerStart {
            worker, generation, ..
        } = start;
        let launched = self
            .launcher
            .launch(
                &self.rt,
                &self.poll.sender(),
                start,
                self.listeners.get(start.config.listen()),
            )
            .and_then(|launched| {
                let mut stream = UnixStream::from_std(launched.channel);
                self.poll
                    .poll
                    .registry()
                    .register(&mut stream, Token(worker.0 as usize), Interest::READABLE)
                    .map_err(super::spawn::SpawnError::Channel)?;
                Ok((launched.pid, launched.setup_frame, stream))
            });
        match launched {
            Ok((pid, setup_frame, stream)) => {
                tracing::debug!(%worker, pid, %generation, "worker spawned");
                self.pids.insert(worker, pid);
                self.channels.insert(
                    worker,
                    Channel {
                        stream,
                        decoder: FrameDecoder::new(MAX_FRAME_DEFAULT),
                        out: setup_frame,
                        read_closed: false,
                        awaits_room: false,
                    },
                );
                self.flush(worker);
                self.inbox.push_back(Event::Spawned { worker, pid });
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
        if let Some(mut channel) = self.channels.remove(&worker) {
            // Closing our end is what a lingering descendant of the worker sees as EOF.
            let _ = self.poll.poll.registry().deregister(&mut channel.stream);
        }
        self.cleaner.clean(worker);
    }
    /// Read everything the worker's channel holds now, queueing its messages (and its
    /// end, if it ended) in order.
    fn read_channel(&mut self, worker: WorkerId) {
        let Some(channel) = self.channels.get_mut(&worker) else {
            return;
        };
        while !channel.read_closed {
            match channel.stream.read(&mut self.read_buf) {
                Ok(0) => {
                    channel.read_closed = true;
                    self.inbox.push_back(Event::ChannelClosed { worker });
                }
                Ok(n) => {
                    // Read on until the socket would block, even after a short read:
                    // edge-triggered readiness promises a new event only after that.
                    // (Trusting a short read as "drained" lost heartbeats once the channel
                    // stopped being registered for writability, whose extra wake-ups had
                    // been reading them: the real parent-stall scenario caught it.)
                    channel.decoder.push(&self.read_buf[..n]);
                    loop {
                        match channel.decoder.next_worker_message() {
                            Ok(Some(message)) => {
                                super::lifecycle_log::message(worker, &message);
                                self.inbox.push_back(Event::Message { worker, message })
                            }
                            Ok(None) => break,
                            Err(error) => {
                                tracing::warn!(%worker, %error, "malformed control frame");
                                channel.read_closed = true;
                                self.inbox
                                    .push_back(Event::ProtocolViolation { worker, error });
                                break;
                            }
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // A worker that dies with unread data in its socket resets the stream;
                    // to the supervisor that is the same as EOF.
                    tracing::debug!(%worker, error = %e, "control channel read failed");
                    channel.read_closed = true;
                    self.inbox.push_back(Event::ChannelClosed { worker });
                }
            }
        }
    }

    /// Wait up to `timeout` for the channels, then write and read each one that is
    /// ready. `false` if polling failed for good.
    fn poll_channels(&mut self, timeout: Option<core::time::Duration>) -> bool {
        if let Err(e) = self.poll.poll.poll(&mut self.ready, timeout)
            && e.kind() != io::ErrorKind::Interrupted
        {
            tracing::error!(error = %e, "the driver's poll failed");
            return false;
        }
        let ready: Vec<(Token, bool, bool)> = self
            .ready
            .iter()
            .map(|e| {
                let read = e.is_readable() || e.is_read_closed() || e.is_error();
                (e.token(), read, e.is_writable())
            })
            .collect();
        for (token, read, write) in ready {
            if token == WAKE {
                continue;
            }
            let worker = WorkerId(token.0 as u64);
            if write {
                self.flush(worker);
            }
            if read {
                self.read_channel(worker);
            }
        }
        true
    }

    /// Write what the socket takes now; the rest waits for the channel's next writable
    /// edge, which only then is asked for.
    fn flush(&mut self, worker: WorkerId) {
        let Some(channel) = self.channels.get_mut(&worker) else {
            return;
        };
        let mut broken = None;
        while !channel.out.is_empty() {
            match channel.stream.write(&channel.out) {
                Ok(n) => {
                    channel.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    channel.out.clear();
                    broken = Some(e);
                }
            }
        }
        if let Some(e) = broken {
            // EPIPE / ECONNRESET: the channel is broken, and a worker we cannot reach is
            // gone, as the core decides for a channel's end (revoke its grants, end it if
            // nobody asked it to end). What it wrote before is read out first, in order.
            tracing::warn!(%worker, error = %e, "cannot write to the worker's control channel");
            self.read_channel(worker);
            if let Some(channel) = self.channels.get_mut(&worker)
                && !channel.read_closed
            {
                channel.read_closed = true;
                self.inbox.push_back(Event::ChannelClosed { worker });
            }
            return;
        }
        let Some(channel) = self.channels.get_mut(&worker) else {
            return;
        };
        let wanted = !channel.out.is_empty();
        if wanted != channel.awaits_room {
            let interest = if wanted {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            match self.poll.poll.registry().reregister(
                &mut channel.stream,
                Token(worker.0 as usize),
                interest,
            ) {
                Ok(()) => channel.awaits_room = wanted,
                Err(e) => {
                    tracing::warn!(%worker, error = %e, "cannot change the channel's interest")
                }
            }
        }
    }

    /// Turn what the host runtime sent into the driver's next wakeup; `None` when it only
    /// needs the driver to run once more (a status request is answered as the driver
    /// observes the machine, before its next wait).
    fn inbound(&mut self, inbound: Inbound) -> Option<Wakeup> {
        let now = self.clock.now();
        match inbound {
            Inbound::Reaped {
                worker,
                status,
                counts,
            } => {
                self.pids.remove(&worker);
                // A death is learned in one look with everything every channel holds at
                // that moment, the dying worker's own last words included; the core
                // takes the exit after them (`Parent::intake`: a READY another candidate
                // sent completes the first rollout, and the crash is then a member's).
                if !self.poll_channels(Some(core::time::Duration::ZERO)) {
                    return Some(Wakeup::HostFailed);
                }
                self.read_channel(worker);
                if let Some(channel) = self.channels.get_mut(&worker) {
                    channel.read_closed = true;
                }
                if let Some(counts) = counts {
                    self.inbox.push_back(Event::FinalCounts { worker, counts });
                }
                self.inbox.push_back(Event::Exited { worker, status });
                // One look: the core orders what it found (`Parent::intake`).
                Some(Wakeup::Found(now, self.inbox.drain(..).collect()))
            }
            Inbound::Event(event) => Some(Wakeup::Event(now, event)),
            Inbound::Status(reply) => {
                self.status_waiters.push(reply);
                None
            }
            Inbound::Metrics(reply) => {
                self.metrics_waiters.push(reply);
                None
            }
            Inbound::Resize(raw, by) => {
                // As a reload (below), with the count the core holds changed by `by`.
                let event = match self.reload(raw) {
                    Event::Command(Command::Reload { id, config }) => {
                        Event::Command(Command::Resize { id, config, by })
                    }
                    refused => refused,
                };
                self.inbox.push_back(event);
                self.inbox
                    .pop_front()
                    .map(|event| Wakeup::Event(now, event))
            }
            Inbound::Reload(raw) => {
                let event = self.reload(raw);
                self.inbox.push_back(event);
                self.inbox
                    .pop_front()
                    .map(|event| Wakeup::Event(now, event))
            }
            Inbound::Control(call, reply) => {
                let request = match call {
                    Call::Request(request) => request,
                    Call::Reload(raw) => Request::Reload {
                        config: raw,
                        reload: self.reload_id(),
                    },
                };
                self.next_request += 1;
                let id = RequestId(self.next_request);
                if let Some(reply) = reply {
                    self.answers.insert(id, reply);
                }
                self.inbox.push_back(Event::Control { id, request });
                self.inbox
                    .pop_front()
                    .map(|event| Wakeup::Event(now, event))
            }
            Inbound::LogWritten => {
                self.log_busy = false;
                Some(Wakeup::LogWritten(now))
            }
        }
    }
}

impl ParentIo for RealIo {
    fn wait(&mut self, deadline: Option<Instant>) -> Wakeup {
        // Also here, not only before polling: a loop kept busy by input still pings.
        self.notifier.watchdog(None);
        loop {
            // Everything the last look found, in the order found: the core orders it.
            if !self.inbox.is_empty() {
                return Wakeup::Found(self.clock.now(), self.inbox.drain(..).collect());
            }
            match self.poll.inbound.try_recv() {
                Ok(inbound) => match self.inbound(inbound) {
                    Some(wakeup) => return wakeup,
                    // Something other than a deadline needs the driver to run (a status
                    // request): it is woken as a timer check wakes it, so a request queued
                    // while the parent was stopped goes through the same catch-up
                    // (`driver::run` reads what arrived before judging deadlines).
                    None => return Wakeup::Timeout(self.clock.now()),
                },
                Err(TryRecvError::Disconnected) => return Wakeup::HostFailed,
                Err(TryRecvError::Empty) => {}
            }
            let now = self.clock.now();
            let timeout = match deadline {
                Some(deadline) if deadline <= now => return Wakeup::Timeout(now),
                Some(deadline) => Some(deadline - now),
                None => None,
            };
            // The watchdog is pinged from this loop, so a wedged loop stops pinging.
            let timeout = self.notifier.watchdog(timeout);
            if !self.poll_channels(timeout) {
                return Wakeup::HostFailed;
            }
        }
    }

    fn arrived(&mut self) -> Vec<Wakeup> {
        if !self.poll_channels(Some(core::time::Duration::ZERO)) {
            return vec![Wakeup::HostFailed];
        }
        let now = self.clock.now();
        let mut arrived = vec![Wakeup::Found(now, self.inbox.drain(..).collect())];
        loop {
            match self.poll.inbound.try_recv() {
                Ok(inbound) => arrived.extend(self.inbound(inbound)),
                Err(TryRecvError::Disconnected) => {
                    arrived.push(Wakeup::HostFailed);
                    break;
                }
                Err(TryRecvError::Empty) => break,
            }
        }
        arrived
    }

    fn perform(&mut self, _now: Instant, action: ParentAction) {
        let action = match action {
            ParentAction::Singleton(action) => {
                tracing::info!(event = "singleton", ?action, "singleton");
                if let Some(services) = &self.services {
                    services.perform(action, |listen| self.listeners.addrs(listen));
                }
                return;
            }
            // The loop hands journals to `persist_dav_locks`.
            ParentAction::PersistDavLocks(_) => return,
            ParentAction::Acme(action) => return self.perform_acme(action),
            ParentAction::Answer { request, answer } => {
                tracing::info!(request = request.0, %answer, "control request answered");
                // A client that went away (or a signal's request) has nobody to tell.
                if let Some(reply) = self.answers.remove(&request) {
                    let _ = reply.send(answer);
                }
                return;
            }
            ParentAction::KillScriptGroups { worker, pgids } => {
                tracing::warn!(%worker, groups = ?pgids, "killing the CGI scripts a gone worker left running");
                for pgid in pgids {
                    if let Ok(pgid) = i32::try_from(pgid) {
                        crate::cgi::groups::kill_group(pgid);
                    }
                }
                return;
            }
            ParentAction::ReadTlsFiles { reload } => return self.read_tls_files(reload),
            ParentAction::BuildProbeClients(settings) => {
                match &self.prober {
                    Some(prober) => prober.build_clients(settings),
                    None => tracing::warn!("probe clients asked for with no prober"),
                }
                return;
            }
            ParentAction::ProbeUpstream {
                upstream,
                url,
                path,
                within,
            } => {
                let probe = super::upstream_probe::Probe {
                    upstream,
                    url: &url,
                    path: &path,
                    within,
                };
                match &self.prober {
                    Some(prober) => prober.probe(&self.rt, self.poll.sender(), probe),
                    None => tracing::warn!(upstream = %url, "a probe asked for with no prober"),
                }
                return;
            }
            ParentAction::ReopenAccessLog => {
                match &self.log_writer {
                    Some(writer) => writer.reopen(),
                    // The core reopens only what the settings say is written.
                    None => tracing::warn!("the access log to reopen has no writer"),
                }
                return;
            }
            ParentAction::Tls(servery_core::tls_material::TlsAction::MintTicketKey) => {
                match super::tls_material::entropy() {
                    Ok(bytes) => {
                        let input =
                            servery_core::tls_material::TlsInput::TicketEntropy(Box::new(bytes));
                        self.inbox.push_back(Event::Tls(input));
                    }
                    // The current key keeps sealing; the core asks again.
                    Err(_) => tracing::error!("cannot read OS randomness for a ticket key"),
                }
                return;
            }
            ParentAction::Store { op, call } => {
                match &self.store {
                    Some(store) => store.perform(op, call),
                    None => tracing::warn!("a store call asked for with no --cluster"),
                }
                return;
            }
            ParentAction::Supervisor(action) => action,
        };
        super::lifecycle_log::action(&action);
        match action {
            Action::Spawn {
                worker,
                slot,
                generation,
                config,
                cpus,
            } => self.perform_spawn(WorkerStart {
                worker,
                slot,
                generation,
                config: &config,
                cpus: cpus.as_ref(),
            }),
            Action::Send { worker, message } if worker == servery_core::parent::PARENT_CLIENT => {
                self.tftp_replies.deliver(message)
            }
            Action::Send { worker, message } => {
                if let Some(channel) = self.channels.get_mut(&worker) {
                    // The core sends only what fits the frames (it refuses a broker answer
                    // that would not), so this cannot fail; were it to, nothing is sent
                    // rather than a frame the worker would refuse.
                    if let Err(e) = encode_parent(&message, &mut channel.out) {
                        tracing::error!(%worker, error = %e, "cannot frame a message to the worker");
                    }
                    self.flush(worker);
                }
            }
            Action::Terminate { worker } => self.signal_group(worker, Signal::TERM),
            Action::Kill { worker } => self.signal_group(worker, Signal::KILL),
            Action::BindListeners { reload, listen } => {
                let result = self.listeners.bind(listen).map_err(|e| e.to_string());
                match &result {
                    Ok(()) => {
                        for url in self.listeners.urls(listen) {
                            crate::banner::say(
                                "listening",
                                &format!("servery: listening on {url} (for reload {})", reload.0),
                                &[("url", url.as_str().into()), ("reload", reload.0.into())],
                            );
                        }
                    }
                    Err(e) => {
                        tracing::warn!(%listen, error = %e, "cannot bind the reload's listeners")
                    }
                }
                // The bind is done here, on this thread: the core has its answer next step.
                self.inbox.push_back(Event::ListenersBound {
                    reload,
                    listen,
                    result,
                });
            }
            Action::ReleaseListeners { listen } => {
                let urls = self.listeners.urls(listen);
                if self.listeners.release(listen) {
                    for url in urls {
                        crate::banner::say(
                            "stopped_listening",
                            &format!("servery: stopped listening on {url}"),
                            &[("url", url.as_str().into())],
                        );
                    }
                }
            }
            Action::CloseListeners => {
                self.listeners.close_all();
                self.notifier.stopping();
            }
            Action::WorkerGone { worker } => self.cleanup(worker),
            Action::QuicSteering(steering) => self.launcher.steer_quic(&steering),
            Action::GenerationCommitted {
                generation,
                connections,
                ..
            } => {
                if let Some(admin) = &self.admin_deadlines {
                    // The committed generation's deadlines reach the admin listener's
                    // next connections as they reach the new workers, before the answer
                    // that says the reload committed goes out.
                    let committed = crate::http::Deadlines::of_limits(&connections);
                    admin.send_if_modified(|d| core::mem::replace(d, committed) != committed);
                }
                self.notifier.committed();
                if !self.announced_ready {
                    self.announced_ready = true;
                    crate::banner::say(
                        "ready",
                        &format!("servery: ready (generation {})", generation.0),
                        &[("generation", generation.0.into())],
                    );
                }
            }
            Action::ServiceFailed { reason, message } => {
                tell!("servery: service failed ({}): {message}", reason.code());
            }
            Action::ReloadRejected { message, .. } => self.notifier.reload_rejected(&message),
            Action::ReloadStarted { .. } => self.notifier.reload_started(),
            // Their records are all there is to do.
            Action::RecyclingSuspended { .. } | Action::Exit { .. } => {}
        }
    }

    fn persist_dav_locks(
        &mut self,
        _now: Instant,
        locks: &[servery_core::proto::DavLockInfo],
    ) -> JournalWrite {
        // On this thread, before the answers queued after it are written: a LOCK is only
        // answered once its lock is on disk, and the parent decides what a failure means.
        let Some(journal) = &self.journal else {
            return JournalWrite::Written;
        };
        match journal.store(locks) {
            Ok(()) => JournalWrite::Written,
            Err(e) => {
                tracing::error!(error = %e, path = %journal.path().display(), "cannot journal the WebDAV locks: the locks not on disk yet are refused (503) and dropped");
                JournalWrite::Failed
            }
        }
    }

    fn dav_locks_refused(&mut self, _now: Instant, refused: &[servery_core::LeaseId]) {
        tracing::warn!(
            refused = refused.len(),
            "WebDAV locks the journal could not hold were refused (503) and dropped"
        );
    }

    fn log_writer_idle(&self) -> bool {
        !self.log_busy
    }

    fn write_log(&mut self, _now: Instant, batch: Vec<String>) {
        match &self.log_writer {
            Some(writer) => {
                self.log_busy = true;
                writer.write(batch);
            }
            // Only the access log fills the queue; without a writer there is none.
            None => tracing::debug!(records = batch.len(), "access-log batch with no log"),
        }
    }

    fn observe(&mut self, now: Instant, parent: &Parent) {
        let not_running = parent.supervisor().time_not_running();
        let late = not_running.saturating_sub(self.not_running_seen);
        self.not_running_seen = not_running;
        if late >= NOT_RUNNING_WORTH_A_LINE {
            tracing::warn!(
                ?late,
                "the parent woke this long after its deadline (a frozen or stopped host); that time is not counted as any worker's silence"
            );
        }
        if cfg!(debug_assertions)
            && let Err(e) = parent.check_invariants()
        {
            // Debug builds only: a broken invariant is a bug in the core or this driver.
            panic!("core invariant violated: {e}");
        }
        if !self.status_waiters.is_empty() {
            let listen = self.listeners.urls(parent.supervisor().config().listen());
            let status = status_json(parent, now, &self.info, &listen);
            for waiter in self.status_waiters.drain(..) {
                let _ = waiter.send(status.clone());
            }
        }
        self.exits_logged = super::lifecycle_log::exits(parent, self.exits_logged);
        let sup = parent.supervisor();
        self.notifier
            .status(sup.state().name(), sup.generation().0, sup.ready_workers());
        if !self.metrics_waiters.is_empty() {
            let pids = self.pids.values().copied().collect();
            let snapshot = Box::new(super::metrics::Snapshot::of(parent, &self.info, pids));
            for waiter in self.metrics_waiters.drain(..) {
                let _ = waiter.send(snapshot.clone());
            }
        }
    }
}
