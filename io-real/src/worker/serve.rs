//! The worker's one lifecycle task. Control frames, heartbeat and drain timers, SIGTERM,
//! connection ends and `accept` are all awaited in one `select!`, so the lifecycle machine
//! sees every admission as it happens: when it stops admission no connection can be
//! half-accepted behind its back, and a draining worker never drops one.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use servery_core::driver::{WorkerIo, dispatch_worker};
use servery_core::proto::{
    FrameDecoder, MAX_FRAME_DEFAULT, ParentMessage, WorkerMessage, encode_worker,
};
use servery_core::worker::WorkerLifecycle;
use tokio::io::AsyncReadExt;
use tokio::net::unix::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::watch;

use super::WorkerArgs;
use super::WorkerError;
use super::accepting::{
    ACCEPTED_INHERIT_NODELAY, ClosedGuard, QUIC_ROOM_RECHECK, accept_any, has_room, listener,
    next_quic,
};
use super::admission::Admission;
use super::broker::BrokerHandle;
use super::control_writer::ControlWriter;
use super::fault::TestFault;
use super::setup::Setup;
use crate::clock::Clock;
use crate::http::conn::FIRST_REQUEST_GRACE;
use crate::http::policy::Credential;
use crate::http::{Activity, PlainStream, Site, SiteConfig, serve_plain, serve_tls};
use crate::tls::{self, ServingTls, TlsAcceptor, TlsStream};

/// How long the frames still queued (a startup failure's text above all) may take to
/// reach the parent before the worker exits anyway.
const FLUSH_BOUND: Duration = Duration::from_secs(1);

/// Serves until the lifecycle ends. `fds` are the descriptors the parent passed and
/// `setup` its preamble, both read from `control` before the runtime started.
pub(super) async fn run(
    args: WorkerArgs,
    setup: Setup,
    fds: Vec<OwnedFd>,
    scoreboard: Option<OwnedFd>,
    control: UnixStream,
    fault: TestFault,
) -> Result<i32, WorkerError> {
    // Before anything else: TERM must reach the lifecycle, not kill us mid-request.
    let mut sigterm = signal(SignalKind::terminate()).map_err(WorkerError::Runtime)?;
    let passed = crate::http3::endpoint::classify(fds)
        .map_err(|e| WorkerError::Channel(io::Error::other(e)))?;
    let listeners = passed
        .listeners
        .into_iter()
        .map(listener)
        .collect::<io::Result<Vec<_>>>()
        .map_err(WorkerError::Channel)?;
    // TCP responses advertise HTTP/3 when this worker has a slot socket to serve it on.
    let alt_svc = passed
        .quic
        .first()
        .and_then(|s| s.port())
        .map(crate::http3::alt_svc);
    control
        .set_nonblocking(true)
        .map_err(WorkerError::Channel)?;
    let (mut rd, wr) = tokio::net::UnixStream::from_std(control)
        .map_err(WorkerError::Channel)?
        .into_split();
    let (out, flusher) = ControlWriter::new(wr);
    // The broker client shares the control channel: its requests go out through the same
    // writer, its replies come back through `frames`.
    let broker = {
        let out = Arc::clone(&out);
        let (capacity, reply_timeout) = setup.settings.upload.broker_client();
        BrokerHandle::new(capacity, reply_timeout, move |frame| out.send(frame))
    };
    // Each CGI script's process group is told to the parent as it starts and ends, so a
    // worker killed with SIGKILL leaves none running (decision 0092).
    let cgi_groups = {
        let out = Arc::clone(&out);
        Arc::new(crate::cgi::groups::Groups::reporting(move |message| {
            let mut frame = Vec::with_capacity(16);
            if encode_worker(&message, &mut frame).is_ok() {
                out.send(frame);
            }
        }))
    };
    let flusher = tokio::spawn(flusher);
    // The counters live in the scoreboard the parent passed (decision 0083), or, without
    // one, in this process alone: they then reach the parent only in heartbeats.
    let meter = Arc::new(
        match scoreboard.map(|fd| crate::http::meter::RequestMeter::in_scoreboard(&fd)) {
            Some(Ok(meter)) => meter,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "cannot map the scoreboard; counts travel in heartbeats only");
                crate::http::meter::RequestMeter::default()
            }
            None => crate::http::meter::RequestMeter::default(),
        },
    );
    let log = &setup.settings.access_log;
    let recorder = log.access_log.is_some().then(|| {
        Arc::new(crate::access_log::recorder::Recorder::new(
            log.access_log_format,
            log.access_log_overflow.policy(),
            args.worker_id,
            args.generation,
            broker.clone(),
            Arc::clone(&meter),
        ))
    });
    let log_task = recorder
        .clone()
        .map(|recorder| tokio::spawn(async move { recorder.run(std::future::pending()).await }));
    let (closed_tx, closed_rx) = unbounded_channel();
    let (app_down_tx, app_down_rx) = unbounded_channel();
    let (quic_tx, quic_rx) = unbounded_channel();
    let tls_wanted = setup.facts.tls;
    let max_connections = super::site_config::max_connections(&setup);
    let listening: Vec<_> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .collect();
    // Before anything is served: every check of a name consults it.
    crate::write::deny::set_denied(&setup.settings.site.deny);
    let mut site_config = super::site_config::site_config(
        args.worker_id,
        &setup,
        &broker,
        recorder.clone(),
        &meter,
        alt_svc,
        &listening,
    );
    if let Some(dav) = site_config.dav.as_mut() {
        dav.tree_kill = fault.kill_before_tree_step();
        dav.kill_after_lock_grant = fault.kill_after_lock_grant();
    }
    let mut worker = Worker {
        id: args.worker_id,
        clock: Clock::start(),
        life: WorkerLifecycle::new(),
        fault,
        site_config,
        tls_wanted,
        cleartext_listeners: setup.facts.acme_http_listeners.unwrap_or(0) as usize,
        setup,
        site: None,
        tls: if tls_wanted {
            ServingTls::new().ok().map(Arc::new)
        } else {
            None
        },
        listeners,
        quic: Quic {
            sockets: passed.quic,
            stray_rule: None,
            config: None,
            reset_key: None,
            incoming_tx: quic_tx,
            incoming: quic_rx,
            endpoints: Vec::new(),
        },
        max_connections,
        admission: Admission::default(),
        drain: watch::channel(false).0,
        requests: Arc::new(AtomicU64::new(0)),
        meter,
        heap_trim: super::memory::HeapTrim::default(),
        closed_tx,
        closed_rx,
        app_down_tx,
        app_down_rx,
        out,
        prepare_due: false,
        control_open: true,
        ready_flushed: false,
        decoder: FrameDecoder::new(MAX_FRAME_DEFAULT),
        broker,
        cgi_groups,
        upstream_down: Arc::default(),
    };
    let code = worker.run(&mut rd, &mut sigterm).await;
    // Drained (or out of time): no script outlives its worker.
    worker.cgi_groups.kill_all();
    if let (Some(task), Some(recorder)) = (log_task, recorder) {
        // Every request's line is buffered by now (it is recorded before its response
        // goes out, and the drain waited for every connection): send the rest.
        task.abort();
        worker.drain_log(&mut rd, &recorder).await;
    }
    // A startup failure's text above all must reach the parent before we go.
    worker.flush().await;
    drop(worker);
    flusher.abort();
    Ok(code)
}

/// How long an exiting worker waits for the parent to take its last access-log lines.
const LOG_DRAIN_BOUND: Duration = Duration::from_secs(5);

/// How long an exiting worker waits for its HTTP/3 endpoints to send what their closed
/// connections queued (a closing period is three probe timeouts: milliseconds on a LAN).
const ENDPOINT_CLOSE_BOUND: Duration = Duration::from_secs(1);

/// `--http3`: this worker's slot sockets until it starts accepting, the QUIC
/// configuration, and the connections its endpoints pass to the lifecycle task.
struct Quic {
    sockets: Vec<crate::http3::endpoint::SlotSocket>,
    /// A copy of a slot socket's lock, where the parent writes what a draining worker
    /// does with a connection it will not serve (decision 0084).
    stray_rule: Option<std::os::fd::OwnedFd>,
    config: Option<quinn::ServerConfig>,
    /// The parent's stateless-reset key, from the TLS material.
    reset_key: Option<servery_core::tls_material::StatelessResetKey>,
    incoming_tx: UnboundedSender<quinn::Incoming>,
    incoming: UnboundedReceiver<quinn::Incoming>,
    /// The endpoints' tasks, which the worker lets finish before it exits.
    endpoints: Vec<tokio::task::JoinHandle<()>>,
}

/// This worker's share of a service-wide bound `max` (none when 0 or less): the broker's
/// grants, kept in blocks sized for `workers` (decision 0076).
fn admission_pool(
    broker: &BrokerHandle,
    budget: crate::proxy::admission::Budget,
    max: i64,
    workers: u32,
) -> Option<Arc<crate::proxy::admission::Admission>> {
    let max = u32::try_from(max).ok().filter(|&max| max > 0)?;
    let keep = servery_core::proxy_admission::keep_for(max, workers);
    Some(crate::proxy::admission::Admission::new(
        broker.clone(),
        budget,
        keep,
    ))
}

struct Worker {
    id: u64,
    clock: Clock,
    life: WorkerLifecycle,
    fault: TestFault,
    site_config: SiteConfig,
    /// Whether the parent started us to serve TLS (the identity comes in the parent's
    /// first message, [`ParentMessage::TlsMaterial`]).
    tls_wanted: bool,
    /// How many of the listeners, the last ones, serve cleartext anyway (ACME HTTP-01).
    cleartext_listeners: usize,
    setup: Setup,
    site: Option<Arc<Site>>,
    /// The certificate and ticket keys, swapped in place as the parent sends new ones.
    tls: Option<Arc<ServingTls>>,
    listeners: Vec<TcpListener>,
    quic: Quic,
    max_connections: u32,
    /// The connections held, to choose one to close when full.
    admission: Admission,
    drain: watch::Sender<bool>,
    requests: Arc<AtomicU64>,
    /// The request counters the heartbeats carry.
    meter: Arc<crate::http::meter::RequestMeter>,
    /// When to hand the heap's freed pages back (after a burst of connections closed).
    heap_trim: super::memory::HeapTrim,
    closed_tx: UnboundedSender<usize>,
    closed_rx: UnboundedReceiver<usize>,
    /// The application's shutdown has finished (`shut_down_app`).
    app_down_tx: UnboundedSender<()>,
    app_down_rx: UnboundedReceiver<()>,
    out: Arc<ControlWriter>,
    /// The lifecycle asked to prepare: `run` awaits it after the dispatch.
    prepare_due: bool,
    control_open: bool,
    ready_flushed: bool,
    decoder: FrameDecoder,
    broker: BrokerHandle,
    /// The process groups of the CGI scripts running, killed when the worker exits.
    cgi_groups: Arc<crate::cgi::groups::Groups>,
    /// The reverse proxy's upstreams the parent says are down (it may say so before the
    /// proxy is built, right after HELLO).
    upstream_down: Arc<crate::proxy::DownSet>,
}

impl Worker {
    async fn run(
        &mut self,
        rd: &mut OwnedReadHalf,
        sigterm: &mut tokio::signal::unix::Signal,
    ) -> i32 {
        let mut buf = vec![0u8; 4096];
        loop {
            // What the lifecycle decided, through the core's worker driver (the one the
            // simulator runs too); preparing is awaited here, between two dispatches.
            loop {
                if let Some(code) = dispatch_worker(self) {
                    // Fault branches that wait are compiled only with the hooks (see
                    // no_fault.rs); the others are constant-false without them.
                    #[cfg(feature = "test-hooks")]
                    if self.fault.wedged_drain() {
                        tracing::warn!(worker = self.id, "test fault: wedged in the drain");
                        return std::future::pending().await;
                    }
                    tracing::info!(worker = self.id, code, "exiting");
                    if self.life.app_shutdown_cut() {
                        tracing::error!(
                            worker = self.id,
                            "the application's shutdown was cut at the drain deadline"
                        );
                    }
                    self.endpoints_closed().await;
                    self.last_heartbeat();
                    return code;
                }
                if !std::mem::take(&mut self.prepare_due) {
                    break;
                }
                self.prepare().await;
            }
            if self.life.accepting() && !self.ready_flushed {
                // READY (queued right after StartAccepting) reaches the parent before the
                // first request is served, so whatever happens to us from now on happens
                // to a worker the parent knows is ready.
                self.flush().await;
                self.ready_flushed = true;
            }
            let deadline = self
                .life
                .poll_timeout()
                .map(|t| tokio::time::Instant::from_std(self.clock.to_std(t)));
            let can_accept = self.life.accepting() && !self.listeners.is_empty() && self.has_room();
            let draining = *self.drain.borrow();
            // A QUIC connection waiting for room is looked at again soon: room comes back
            // when a request ends or a client is seen holding its response, which nothing
            // wakes this loop for (a TCP one waits in the backlog for the next pass).
            let quic_waits = self.life.accepting() && !draining && !self.quic.incoming.is_empty();
            let (held, max, admission) =
                (self.life.in_flight(), self.max_connections, &self.admission);
            tokio::select! {
                read = rd.read(&mut buf), if self.control_open => match read {
                    Ok(0) => self.control_closed("EOF"),
                    Ok(n) => self.frames(n, &buf),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => self.control_closed(&e.to_string()),
                },
                _ = sigterm.recv() => {
                    tracing::info!(worker = self.id, "SIGTERM");
                    if !self.fault.wedged_drain() {
                        self.life.terminate(self.clock.now());
                    }
                }
                Some(()) = self.app_down_rx.recv() => {
                    self.life.app_shut_down(self.clock.now());
                }
                Some(index) = self.closed_rx.recv() => {
                    // Every close that is already queued, in one pass.
                    let now = self.clock.now();
                    self.admission.closed(index);
                    self.life.connection_closed(now);
                    while let Ok(index) = self.closed_rx.try_recv() {
                        self.admission.closed(index);
                        self.life.connection_closed(now);
                    }
                    self.sync_requests();
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => {
                    self.sync_requests();
                    if let Some(at) = self.site.as_ref().and_then(|s| s.app()).and_then(|a| a.last_alive()) {
                        self.life.app_alive(at);
                    }
                    if self.heap_trim.due(self.life.in_flight()) {
                        crate::os::release_free_heap();
                    }
                    self.life.set_memory(super::memory::resident_bytes());
                    self.life.set_stats(self.meter.snapshot());
                    let in_flight = self.life.in_flight();
                    let in_progress = self.admission.requests_in_progress();
                    self.life.handle_timeout(self.clock.now(), in_flight, in_progress);
                }
                (accepted, cleartext) = accept_any(&self.listeners, self.cleartext_listeners, || has_room(held, max, admission)), if can_accept => self.admit(accepted, cleartext).await,
                // While draining, what an endpoint handed over before it saw the drain is
                // set aside at once, as in `stop_accepting`, not left to be refused when the
                // worker exits.
                Some(incoming) = next_quic(&mut self.quic.incoming, || draining || has_room(held, max, admission)), if can_accept || draining => {
                    if draining {
                        self.set_aside_quic(incoming);
                    } else {
                        self.admit_quic(incoming);
                    }
                }
                () = tokio::time::sleep(QUIC_ROOM_RECHECK), if quic_waits => {}
            }
        }
    }

    fn has_room(&self) -> bool {
        has_room(self.life.in_flight(), self.max_connections, &self.admission)
    }

    fn send_message(&self, message: &WorkerMessage) {
        let mut frame = Vec::with_capacity(32);
        // Lifecycle messages always fit: numbers, and a startup failure the encoder cuts.
        match encode_worker(message, &mut frame) {
            Ok(()) => self.out.send(frame),
            Err(e) => tracing::error!(worker = self.id, error = %e, "cannot frame a message"),
        }
    }

    /// Sends the access-log lines still buffered, reading the parent's answers meanwhile;
    /// bounded by the broker's reply timeout, after which what is left is lost with us.
    async fn drain_log(
        &mut self,
        rd: &mut OwnedReadHalf,
        recorder: &crate::access_log::recorder::Recorder,
    ) {
        let mut buf = vec![0u8; 4096];
        let flush = recorder.flush();
        tokio::pin!(flush);
        let give_up = tokio::time::sleep(LOG_DRAIN_BOUND);
        tokio::pin!(give_up);
        loop {
            tokio::select! {
                () = &mut flush => return,
                () = &mut give_up => {
                    tracing::warn!(worker = self.id, "access-log lines not confirmed before exit");
                    return;
                }
                read = rd.read(&mut buf), if self.control_open => match read {
                    Ok(0) => self.control_closed("EOF"),
                    Ok(n) => self.frames(n, &buf),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => self.control_closed(&e.to_string()),
                },
            }
        }
    }

    /// Wait (bounded) until every frame sent so far is written to the channel.
    async fn flush(&self) {
        let _ = tokio::time::timeout(FLUSH_BOUND, self.out.flushed()).await;
    }

    fn frames(&mut self, n: usize, buf: &[u8]) {
        self.decoder.push(&buf[..n]);
        loop {
            match self.decoder.next_parent_message() {
                Ok(Some(ParentMessage::Broker { id, reply })) => self.broker.on_reply(id, reply),
                Ok(Some(ParentMessage::TlsMaterial(material))) => self.tls_material(&material),
                Ok(Some(ParentMessage::UpstreamHealth { down })) => self.upstream_down.set(&down),
                Ok(Some(message)) => self.life.on_message(self.clock.now(), &message),
                Ok(None) => return,
                Err(e) => return self.control_closed(&format!("malformed frame: {e}")),
            }
        }
    }

    /// New TLS material: new handshakes use it; open connections keep their sessions.
    fn tls_material(&mut self, material: &servery_core::tls_material::TlsMaterial) {
        let Some(tls) = &self.tls else {
            return;
        };
        // The same for the parent's life: kept from the first material for the endpoints.
        self.quic
            .reset_key
            .get_or_insert_with(|| material.stateless_reset_key.clone());
        match tls.apply(material) {
            Ok(()) => {
                // The names of the certificate served now pass the Host check.
                if let Some(hosts) = &self.site_config.allowed_hosts {
                    let names = crate::tls::summary::dns_names(&material.identity.cert_pem);
                    hosts.set_certificate_names(&names);
                }
                tracing::info!(
                    worker = self.id,
                    identity_generation = material.identity.generation,
                    ticket_key_generation = tls.ticketer().sealing_generation(),
                    "TLS material in use"
                )
            }
            // The parent validated it: only a damaged message gets here.
            Err(e) => {
                tracing::error!(worker = self.id, error = %e, "TLS identity refused; the previous one stays")
            }
        }
    }

    /// The parent is gone (or unintelligible): drain on our own clock and exit.
    fn control_closed(&mut self, why: &str) {
        tracing::info!(worker = self.id, why, "control channel closed");
        self.control_open = false;
        // Fail closed: whatever waits for the broker gets 503, and uploads in flight stop
        // before publishing anything.
        self.broker.channel_closed();
        self.life.channel_closed(self.clock.now());
    }

    async fn prepare(&mut self) {
        if let Some(message) = self.fault.fail_startup() {
            tracing::warn!(worker = self.id, "test fault: {message}");
            return self.life.startup_failed(message.to_owned());
        }
        #[cfg(feature = "test-hooks")]
        if self.fault.hang_at_boot() {
            tracing::warn!(worker = self.id, "test fault: hanging at boot");
            // Wedged for good: only the parent's start timeout ends this process.
            return std::future::pending().await;
        }
        #[cfg(feature = "test-hooks")]
        if let Some(delay) = self.fault.slow_boot() {
            tokio::time::sleep(delay).await;
        }
        let mut config = self.site_config.clone();
        if let Err(message) = prepare_policy(&mut config, self.tls_wanted, &self.tls, &self.setup) {
            return self.life.startup_failed(message);
        }
        if !self.quic.sockets.is_empty() {
            // QUIC shares the TCP side's configuration, so its swappable certificate
            // and the parent's ticket keys (decision 0025), with ALPN h3.
            let quic = match &self.tls {
                Some(tls) => {
                    crate::http3::endpoint::server_config(&tls.server_config(), &config.deadlines)
                        .map_err(|e| e.to_string())
                }
                None => Err("given HTTP/3 sockets but no TLS identity".to_owned()),
            };
            match quic {
                Ok(quic) => self.quic.config = Some(quic),
                Err(message) => return self.life.startup_failed(message),
            }
        }
        if let Some(spec) =
            crate::app::AppSpec::from_settings(&self.setup.settings, config.deadlines.body)
        {
            // Imported before PREPARED: an application that cannot start fails this
            // worker's start, with its traceback, and never receives a request.
            let (runtime, clock) = (tokio::runtime::Handle::current(), self.clock);
            let load = move || crate::app::App::load(&spec, runtime, clock);
            match tokio::task::spawn_blocking(load).await {
                Ok(Ok(app)) => {
                    self.life.watch_app(self.clock.now());
                    if app.has_shutdown() {
                        self.life.app_has_shutdown();
                    }
                    config.app = Some(Arc::new(app));
                }
                Ok(Err(e)) => {
                    tracing::error!(worker = self.id, error = %e, "the application cannot start");
                    return self.life.startup_failed(e.to_string());
                }
                Err(e) => {
                    return self
                        .life
                        .startup_failed(format!("loading the application failed: {e}"));
                }
            }
        }
        let settings = &self.setup.settings;
        let workers = u32::try_from(settings.workers.count()).unwrap_or(1);
        let admission = admission_pool(
            &self.broker,
            crate::proxy::admission::Budget::Proxy,
            settings.proxy.proxy_max_inflight,
            workers,
        );
        let health = crate::proxy::HealthLink {
            down: Arc::clone(&self.upstream_down),
            broker: self.broker.clone(),
        };
        match crate::proxy::Proxy::from_settings(&settings.proxy, admission, Some(health)) {
            Ok(proxy) => config.proxy = proxy.map(Arc::new),
            Err(message) => return self.life.startup_failed(message),
        }
        let cgi_admission = admission_pool(
            &self.broker,
            crate::proxy::admission::Budget::Cgi,
            settings.cgi.cgi_max_concurrent,
            workers,
        );
        match crate::cgi::Cgi::from_settings(
            &settings.cgi,
            &config.root,
            cgi_admission,
            Arc::clone(&self.cgi_groups),
        ) {
            Ok(cgi) => config.cgi = cgi.map(Arc::new),
            Err(message) => return self.life.startup_failed(message),
        }
        // On this thread: opening the site is one `open` and one `statx` of the root,
        // what every request does here too. A blocking thread for it would be the
        // worker's only one, made at start-up and kept idle for its keep-alive, with its
        // stack and its own malloc arena (decision 0124).
        match Site::open(config) {
            Ok(site) => {
                self.site = Some(Arc::new(site));
                self.life.prepared(self.clock.now());
                #[cfg(feature = "test-hooks")]
                if self.fault.crash_after_prepare() {
                    // PREPARED out first, so the crash is one after PREPARED.
                    let _ = dispatch_worker(self);
                    self.flush().await;
                    tracing::error!(worker = self.id, "test fault: crashing after PREPARED");
                    crash();
                }
            }
            Err(e) => self
                .life
                .startup_failed(format!("cannot serve the directory: {e}")),
        }
    }

    async fn admit(&mut self, accepted: io::Result<(TcpStream, SocketAddr)>, cleartext: bool) {
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or memory: pause instead of spinning on the error.
                tracing::warn!(worker = self.id, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                return;
            }
        };
        let Some(site) = self.site.clone() else {
            return;
        };
        if !ACCEPTED_INHERIT_NODELAY {
            let _ = stream.set_nodelay(true);
        }
        let closing = u32::try_from(self.admission.closing()).unwrap_or(u32::MAX);
        if self.life.in_flight().saturating_sub(closing) >= self.max_connections {
            // Full: the longest-waiting connection without a request makes room (chosen
            // before this one is counted, which has not had a chance to send anything).
            // If none may go any more (a request started between the check and the
            // accept), this one is served one over the budget rather than reset: it is
            // out of the shared backlog, and no sibling can take it now.
            self.admission.make_room();
        }
        self.life.connection_opened();
        self.heap_trim.opened(self.life.in_flight());
        // getpeername costs a system call: only the access log and an application want it.
        let peer = (site.recorder().is_some()
            || site.app().is_some()
            || site.proxy().is_some()
            || site.cgi().is_some())
        .then(|| stream.peer_addr().ok())
        .flatten();
        let activity = Activity::with_peer(tokio::time::Instant::now(), peer);
        let index = self.admission.admit(Arc::clone(&activity));
        let drain = self.drain.subscribe();
        let requests = Arc::clone(&self.requests);
        let closed = ClosedGuard(self.closed_tx.clone(), index);
        // One task per transport: the cleartext task's future is then sized for cleartext
        // alone, not for the TLS stream and handshake it would never hold (it is moved
        // into the task, and its state moved as it starts).
        match self.tls.clone().filter(|_| !cleartext) {
            None => {
                tokio::spawn(async move {
                    let _closed = closed;
                    let stream = PlainStream::new(stream);
                    serve_plain(site, stream, drain, requests, activity).await;
                });
            }
            Some(tls) => {
                let acceptor = tls.acceptor();
                tokio::spawn(async move {
                    let _closed = closed;
                    let limit = site.deadlines().tls_handshake;
                    // Under TLS too the stream holds the last response's tail for the
                    // FIN: the close_notify then leaves with the last record.
                    let stream = PlainStream::new(stream);
                    let handshake = handshake(&acceptor, stream, drain.clone(), &activity, limit);
                    let Some(stream) = handshake.await else {
                        // No request line to log; counted (decision 0056).
                        if let Some(meter) = site.meter() {
                            meter.closed_unheard(
                                servery_core::request_stats::unheard::TLS_HANDSHAKE,
                            );
                        }
                        return;
                    };
                    serve_tls(site, stream, drain, requests, activity).await;
                });
            }
        }
    }

    /// An HTTP/3 connection: admitted as a TCP connection is (`admission`): counted (the
    /// drain waits for it), and when the worker is full the longest-idle connection
    /// without a request in progress, TCP or HTTP/3, is asked to close to make room; an
    /// HTTP/3 one closes with GOAWAY, then H3_NO_ERROR.
    fn admit_quic(&mut self, incoming: quinn::Incoming) {
        let Some(site) = self.site.clone() else {
            incoming.refuse();
            return;
        };
        let closing = u32::try_from(self.admission.closing()).unwrap_or(u32::MAX);
        if self.life.in_flight().saturating_sub(closing) >= self.max_connections {
            self.admission.make_room();
        }
        self.life.connection_opened();
        self.heap_trim.opened(self.life.in_flight());
        let activity =
            Activity::with_peer(tokio::time::Instant::now(), Some(incoming.remote_address()));
        let index = self.admission.admit(Arc::clone(&activity));
        let closed = ClosedGuard(self.closed_tx.clone(), index);
        let drain = self.drain.subscribe();
        let requests = Arc::clone(&self.requests);
        tokio::spawn(async move {
            let _closed = closed;
            crate::http3::serve::serve_connection(site, incoming, drain, requests, activity).await;
        });
    }

    /// A QUIC connection this draining worker will not serve (see `stop_accepting`).
    fn set_aside_quic(&self, incoming: quinn::Incoming) {
        let others_take_new = self
            .quic
            .stray_rule
            .as_ref()
            .is_some_and(crate::http3::endpoint::others_take_new_connections);
        crate::http3::endpoint::set_aside(incoming, others_take_new);
    }

    /// Lets the HTTP/3 endpoints finish (at most [`ENDPOINT_CLOSE_BOUND`]). A connection
    /// closed during the drain has only queued its CONNECTION_CLOSE: the endpoint's task
    /// sends it. A worker that exited first left its clients to learn from the slot's next
    /// worker, by a stateless reset, what should have been a clean close.
    async fn endpoints_closed(&mut self) {
        let by = tokio::time::Instant::now() + ENDPOINT_CLOSE_BOUND;
        for endpoint in std::mem::take(&mut self.quic.endpoints) {
            let _ = tokio::time::timeout_at(by, endpoint).await;
        }
        // A connection an endpoint handed over after the drain's last look at the channel
        // (a worker with nothing in flight exits at once) would be refused as the channel
        // is dropped with it: it is set aside like the rest.
        while let Ok(incoming) = self.quic.incoming.try_recv() {
            self.set_aside_quic(incoming);
        }
    }

    /// One more heartbeat as the worker exits, with every request it answered since the
    /// last: the parent's totals then lose none of a recycled worker's requests.
    fn last_heartbeat(&mut self) {
        if !self.control_open {
            return;
        }
        self.sync_requests();
        self.life.set_stats(self.meter.snapshot());
        let beat = self.life.final_heartbeat();
        self.send_message(&beat);
    }

    /// Bring the lifecycle's request count up to what the connections served, and apply
    /// the crash fault when its count is reached.
    fn sync_requests(&mut self) {
        let served = self.requests.load(Ordering::Relaxed);
        while self.life.requests() < served {
            self.life.request_served();
        }
        if let Some(k) = self.fault.crash_after_requests()
            && served >= k
        {
            tracing::error!(
                worker = self.id,
                served,
                "test fault: crashing after {k} requests"
            );
            crash();
        }
    }
}

impl WorkerIo for Worker {
    fn lifecycle(&mut self) -> &mut WorkerLifecycle {
        &mut self.life
    }

    fn send(&mut self, message: WorkerMessage) {
        self.send_message(&message);
    }

    fn prepare(&mut self) {
        // Awaited by `run` right after this dispatch.
        self.prepare_due = true;
    }

    fn start_accepting(&mut self) {
        tracing::info!(worker = self.id, "accepting");
        if let (Some(config), Some(reset_key)) = (&self.quic.config, &self.quic.reset_key) {
            for socket in std::mem::take(&mut self.quic.sockets) {
                if self.quic.stray_rule.is_none() {
                    self.quic.stray_rule = socket.lock_copy().ok();
                }
                let endpoint = crate::http3::endpoint::endpoint_config(reset_key, socket.index());
                self.quic
                    .endpoints
                    .push(tokio::spawn(crate::http3::endpoint::run(
                        socket,
                        endpoint,
                        config.clone(),
                        self.quic.incoming_tx.clone(),
                        self.drain.subscribe(),
                    )));
            }
        }
    }

    fn shut_down_app(&mut self) {
        // On a blocking thread (it runs the application's code), while this task goes on
        // beating; the lifecycle hears of its end through `app_down`.
        let Some(app) = self.site.as_ref().and_then(|s| s.app()).cloned() else {
            return self.life.app_shut_down(self.clock.now());
        };
        let done = self.app_down_tx.clone();
        tokio::task::spawn_blocking(move || {
            app.shutdown();
            let _ = done.send(());
        });
    }

    fn stop_accepting(&mut self) {
        tracing::info!(
            worker = self.id,
            in_flight = self.life.in_flight(),
            "draining"
        );
        // Our copies only: the parent and the other workers keep theirs, so queued
        // connections go to a worker that still accepts.
        self.listeners.clear();
        let _ = self.drain.send(true);
        // HTTP/3 connections not admitted yet are set aside as the endpoints set aside
        // those that reach them from now on: left for a serving worker while another takes
        // new connections, refused otherwise (the core's rule, decision 0084).
        while let Ok(incoming) = self.quic.incoming.try_recv() {
            self.set_aside_quic(incoming);
        }
        if self.fault.exit_during_drain() {
            tracing::error!(worker = self.id, "test fault: exiting mid-drain");
            std::process::exit(1);
        }
    }
}

/// Die the way a crashing worker does (SIGABRT), without leaving a core file behind.
pub(crate) fn crash() -> ! {
    let no_core = rustix::process::Rlimit {
        current: Some(0),
        maximum: Some(0),
    };
    let _ = rustix::process::setrlimit(rustix::process::Resource::Core, no_core);
    std::process::abort()
}

/// The TLS handshake of one accepted connection, bounded by `limit` (the
/// `--tls-handshake-timeout`) and, once the worker drains, by [`FIRST_REQUEST_GRACE`]: a
/// client that has not even finished its handshake gets the same grace as one that has
/// not sent its first request, so a slow or silent peer cannot hold up a drain. A full
/// worker may also close it to make room ([`Admission`]).
async fn handshake(
    acceptor: &TlsAcceptor,
    stream: PlainStream,
    mut drain: watch::Receiver<bool>,
    activity: &Activity,
    limit: Duration,
) -> Option<TlsStream<PlainStream>> {
    let grace = async {
        let _ = drain.wait_for(|&d| d).await;
        tokio::time::sleep(FIRST_REQUEST_GRACE).await;
    };
    tokio::select! {
        result = tls::accept(acceptor, stream, limit) => match result {
            Ok(stream) => Some(stream),
            Err(e) => {
                // Scanners and clients that distrust the certificate: routine.
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
        },
        () = grace => {
            tracing::debug!("draining: TLS handshake not finished within the grace");
            None
        }
        () = activity.evicted() => {
            tracing::debug!("closing a connection still in its TLS handshake to admit a new one");
            None
        }
    }
}

/// The access policy from the setup preamble, and the check that a TLS worker has its
/// identity (the parent's first message). The parent validated both before starting
/// anyone, so an error here means a damaged preamble or message.
fn prepare_policy(
    config: &mut SiteConfig,
    tls_wanted: bool,
    tls: &Option<Arc<ServingTls>>,
    setup: &Setup,
) -> Result<(), String> {
    config.auth = setup
        .settings
        .site
        .auth
        .iter()
        .enumerate()
        .map(|(i, a)| {
            a.parse::<Credential>()
                .map_err(|e| format!("--auth entry {}: {e}", i + 1))
        })
        .collect::<Result<_, _>>()?;
    match (tls, tls_wanted) {
        (Some(tls), true) if tls.has_identity() => Ok(()),
        (_, true) => Err("started for TLS but the parent sent no identity".into()),
        (_, false) => Ok(()),
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400)
}
