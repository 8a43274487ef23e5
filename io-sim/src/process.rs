//! Simulated worker processes. Each runs the core's own [`WorkerLifecycle`] and
//! [`BrokerClient`], with a behavior model deciding how it misbehaves.

use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

use servery_core::broker::{BrokerClient, Completion};
use servery_core::driver::{WorkerIo, dispatch_worker};
use servery_core::proto::{
    BrokerRequest, FrameDecoder, MAX_FRAME_DEFAULT, ParentMessage, TargetKey, WorkerMessage,
    encode_worker,
};
use servery_core::supervisor::ExitStatus;
use servery_core::worker::WorkerLifecycle;
use servery_core::{Instant, ValidConfig, WorkerId};

use crate::conns::Conns;
use crate::labels;
use crate::plan::{Behavior, FaultKind};
use crate::uploads::Upload;
use crate::world::{ConnKind, SimEvent, SimWorld};

#[derive(Debug, Clone, Copy)]
pub(crate) enum Waiting {
    Upload(u64),
    Log,
    /// A WebDAV request on this connection (see `crate::dav`).
    Dav(u64),
    /// A WebDAV tree request on this connection (see `crate::dav_tree`).
    DavTree(u64),
    /// A chunk of a resumable upload on this connection (see `crate::chunks`).
    Chunk(u64),
    /// Grants for a proxied or CGI request on this connection (see `crate::proxy`).
    Proxy(u64),
}

#[derive(Debug)]
pub(crate) struct Proc {
    pub id: WorkerId,
    pub behavior: Behavior,
    pub life: WorkerLifecycle,
    pub(crate) client: BrokerClient,
    down: FrameDecoder,
    pub alive: bool,
    pub paused: bool,
    /// While a pause that ends ([`crate::Fault::PauseWorker`]) stops it: what reached it
    /// meanwhile, in order, for it to handle on resuming. `None` when it runs, and for a
    /// stop it never comes back from ([`crate::Fault::HangWorker`]).
    pub(crate) held: Option<Vec<SimEvent>>,
    /// A TERM arrived while it was paused: its handler runs on the resume.
    pub term_pending: bool,
    pub wedged: bool,
    /// Its application's interpreter is wedged ([`Behavior::AppWedgesAfterRequests`]).
    pub app_wedged: bool,
    /// Heartbeats in a row it sent reporting memory above `worker_max_rss`.
    pub memory_over_streak: u32,
    /// The misbehaviour the process is charged with, once it misbehaved (the first,
    /// when two hit it): what its failed requests are counted against.
    pub cause: Option<FaultKind>,
    pub accepting: bool,
    pub parent_closed: bool,
    pub eof_seen: bool,
    pub(crate) serving: Conns,
    pub uploads: BTreeMap<u64, Upload>,
    pub(crate) waiting: BTreeMap<u64, Waiting>,
    pub log_backlog: VecDeque<String>,
    /// Log lines it produced (those it dropped itself aside), in all: the simulated
    /// scoreboard the parent's host reads when the process is reaped.
    pub log_produced: u64,
    timer_token: u64,
    timer_at: Option<Instant>,
    /// Its own clock ([`crate::Fault::ClockDrift`]): what its lifecycle and broker
    /// client are told the time is, and when their deadlines come.
    pub(crate) clock: crate::world::WorkerClock,
    pub up_clock: Instant,
    pub down_clock: Instant,
    max_connections: usize,
    /// Slot and generation the parent spawned it for.
    pub slot: u64,
    pub generation: u64,
    /// Its lifecycle sent PREPARED: it finished preparing (its application started).
    pub prepared_sent: bool,
    /// When its PREPARED and READY reach the parent (`ZERO` until sent).
    pub prepared_arrives: Instant,
    pub ready_arrives: Instant,
    /// The parent's next write to it fails ([`crate::Fault::ControlWriteFails`]).
    pub write_fails: bool,
    /// Its control channel broke: nothing more crosses it either way.
    pub channel_broken: bool,
    /// `accept` fails with EMFILE until then.
    pub accept_fails_until: Instant,
    /// Its last delivery from the parent was part of a write still arriving.
    pieces_down: bool,
    /// Its reverse proxy and CGI (with a proxy plan only).
    pub(crate) proxy: Option<crate::proxy::WorkerProxy>,
}

impl Proc {
    /// A process started under `config`, the one its `Spawn` carried (a reload's
    /// candidates start under the reload's budgets, as real workers do).
    pub(crate) fn new(id: WorkerId, _pid: u32, behavior: Behavior, config: &ValidConfig) -> Self {
        let b = config.broker();
        Proc {
            id,
            behavior,
            life: WorkerLifecycle::new(),
            client: BrokerClient::new(b.queue_capacity(), b.reply_timeout()),
            down: FrameDecoder::new(MAX_FRAME_DEFAULT),
            alive: true,
            paused: false,
            held: None,
            term_pending: false,
            wedged: false,
            app_wedged: false,
            memory_over_streak: 0,
            cause: None,
            accepting: false,
            parent_closed: false,
            eof_seen: false,
            serving: Conns::default(),
            uploads: BTreeMap::new(),
            waiting: BTreeMap::new(),
            log_backlog: VecDeque::new(),
            log_produced: 0,
            timer_token: 0,
            timer_at: None,
            clock: crate::world::WorkerClock::default(),
            up_clock: Instant::ZERO,
            down_clock: Instant::ZERO,
            max_connections: config.budgets().max_connections() as usize,
            slot: 0,
            generation: 0,
            prepared_sent: false,
            prepared_arrives: Instant::ZERO,
            ready_arrives: Instant::ZERO,
            write_fails: false,
            channel_broken: false,
            accept_fails_until: Instant::ZERO,
            pieces_down: false,
            proxy: None,
        }
    }

    pub(crate) fn runnable(&self) -> bool {
        self.alive && !self.paused
    }

    /// Whether it takes a connection when its `accept` works. Whatever changes this
    /// must be reported to [`crate::takers::Takers::changed`].
    pub(crate) fn could_take(&self) -> bool {
        self.runnable()
            && self.accepting
            && !self.wedged
            && self.serving.len() < self.max_connections
    }

    /// Serves `conn`. True when that leaves it no room: it can take no more connections.
    pub(crate) fn serve(&mut self, conn: u64, kind: ConnKind) -> bool {
        self.serving.insert(conn, kind);
        self.serving.len() >= self.max_connections
    }

    /// Stops serving `conn`: what it was, and whether a worker without room has room now.
    pub(crate) fn unserve(&mut self, conn: u64) -> (Option<ConnKind>, bool) {
        let was_full = self.serving.len() >= self.max_connections;
        (self.serving.remove(conn), was_full)
    }

    /// Charge the process with misbehaving as `kind` (unless it already is).
    pub(crate) fn misbehaved(&mut self, kind: FaultKind) {
        self.cause.get_or_insert(kind);
    }
}

pub(crate) fn key(target: u8) -> TargetKey {
    TargetKey {
        dir_device: 1,
        dir_inode: 2,
        name: format!("target-{target}"),
    }
}

/// One simulated worker process as the core's worker driver sees it.
struct SimWorker<'a> {
    world: &'a mut SimWorld,
    worker: WorkerId,
}

impl SimWorker<'_> {
    /// The process, while it lives: a process that died part-way through a dispatch (a
    /// fault on its drain) carries out nothing more.
    fn proc(&mut self) -> Option<&mut Proc> {
        self.world.procs.get_mut(&self.worker).filter(|p| p.alive)
    }
}

impl WorkerIo for SimWorker<'_> {
    fn shut_down_app(&mut self) {
        let now = self.world.now;
        let shutdown = self
            .world
            .spec
            .workload
            .app
            .as_ref()
            .and_then(|a| a.shutdown_ms);
        let Some((lo, hi)) = shutdown else {
            if let Some(p) = self.proc() {
                p.life.app_shut_down(p.clock.own(now));
            }
            return;
        };
        let takes = self.world.rng.range(lo, hi);
        let worker = self.worker;
        let in_flight = self.proc().map_or(0, |p| p.serving.len() as u32);
        self.world
            .out
            .app_shutdowns
            .push(crate::outcome::AppShutdownRecord {
                worker: worker.0,
                started_ms: now.as_nanos() / 1_000_000,
                takes_ms: takes,
                in_flight,
            });
        self.world.schedule_in(
            Duration::from_millis(takes),
            SimEvent::AppShutDown { worker },
        );
    }

    fn lifecycle(&mut self) -> &mut WorkerLifecycle {
        let Some(p) = self.world.procs.get_mut(&self.worker) else {
            unreachable!("a worker is dispatched only while it exists");
        };
        &mut p.life
    }

    fn send(&mut self, message: WorkerMessage) {
        if matches!(message, WorkerMessage::Prepared)
            && let Some(p) = self.proc()
        {
            p.prepared_sent = true;
        }
        if self.proc().is_none_or(|p| p.eof_seen) {
            return;
        }
        let mut bytes = self.world.frame_buffer();
        if let Err(e) = encode_worker(&message, &mut bytes) {
            let worker = self.worker;
            self.world
                .violation(format!("{worker} cannot frame its message: {e}"));
            return;
        }
        let arrives = self.world.send_up(self.worker, bytes);
        // When the barrier's messages reach the parent (the path labels need it).
        if let (Some(at), Some(p)) = (arrives, self.proc()) {
            match message {
                WorkerMessage::Prepared => p.prepared_arrives = at,
                WorkerMessage::Ready => p.ready_arrives = at,
                _ => {}
            }
        }
    }

    fn prepare(&mut self) {
        let Some(behavior) = self.proc().map(|p| p.behavior.clone()) else {
            return;
        };
        let (world, worker) = (&mut *self.world, self.worker);
        let boot = Duration::from_millis(world.rng.range(2, 20));
        match behavior {
            Behavior::CrashAtBoot => {
                world.schedule_in(boot / 2, SimEvent::Crash { worker });
            }
            Behavior::HangAtBoot => {}
            Behavior::SlowBoot(d) | Behavior::SlowBootCrashAfter { boot: d, .. } => {
                world.schedule_in(d, SimEvent::BootDone { worker })
            }
            // The worker's own preparation, then the application's import.
            Behavior::AppStartup(startup) => world.schedule_in(
                boot + startup.import,
                SimEvent::AppStartupStep {
                    worker,
                    stage: crate::AppStage::Import,
                },
            ),
            _ => world.schedule_in(boot, SimEvent::BootDone { worker }),
        }
    }

    fn start_accepting(&mut self) {
        if let Some(p) = self.proc() {
            p.accepting = true;
            self.world.takers.changed();
            self.world.dispatch();
        }
    }

    fn stop_accepting(&mut self) {
        let now_ms = self.world.now.as_nanos() / 1_000_000;
        let Some(p) = self.proc() else {
            return;
        };
        p.accepting = false;
        if self.world.spec.workload.app.is_some() {
            self.world.out.drains_started.insert(self.worker.0, now_ms);
        }
        self.world.takers.changed();
        let Some(p) = self.proc() else {
            return;
        };
        match p.behavior {
            Behavior::WedgedDrain => {
                p.wedged = true;
                p.misbehaved(FaultKind::WedgedDrain);
            }
            Behavior::ExitDuringDrain => {
                p.misbehaved(FaultKind::ExitDuringDrain);
                self.world.out.coverage.insert(labels::EXITED_DURING_DRAIN);
                self.world.process_died(self.worker, ExitStatus::Signal(6));
            }
            _ => {}
        }
    }
}

impl SimWorld {
    /// Carry out what the worker's lifecycle (through the core's worker driver) and its
    /// broker client want, then re-arm its timer.
    pub(crate) fn pump(&mut self, worker: WorkerId) {
        loop {
            if !self.procs.get(&worker).is_some_and(|p| p.alive) {
                return;
            }
            let exit = dispatch_worker(&mut SimWorker {
                world: self,
                worker,
            });
            let Some(p) = self.procs.get_mut(&worker).filter(|p| p.alive) else {
                return;
            };
            if let Some(code) = exit {
                if p.clock.rate_ppm() != 0 {
                    self.out.coverage.insert(labels::DRIFTING_WORKER_DRAINED);
                }
                if p.eof_seen {
                    self.out.parent_eof_exits += 1;
                    if self.out.parent_crashed {
                        self.out.coverage.insert(labels::ORPHAN_EXITED);
                    }
                }
                self.process_died(worker, ExitStatus::Code(code));
                return;
            }
            // The broker client's requests, one at a time after what the lifecycle wanted.
            let Some(message) = p.client.poll_outgoing() else {
                break;
            };
            if !p.eof_seen {
                let mut bytes = self.frame_buffer();
                match encode_worker(&message, &mut bytes) {
                    Ok(()) => self.send_up(worker, bytes),
                    Err(e) => {
                        self.violation(format!("{worker} cannot frame its message: {e}"));
                        None
                    }
                };
            }
        }
        self.arm_timer(worker);
    }

    fn arm_timer(&mut self, worker: WorkerId) {
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if let Err(e) = p
            .life
            .check_invariants()
            .and_then(|()| p.client.check_invariants())
        {
            self.violation(format!("{worker}: {e}"));
            return;
        }
        let next = servery_core::time::earliest(p.life.poll_timeout(), p.client.poll_timeout());
        if next != p.timer_at {
            p.timer_at = next;
            p.timer_token += 1;
            let token = p.timer_token;
            if let Some(at) = next {
                // Due when the worker's own clock reaches it.
                let at = p.clock.host(at);
                self.schedule_at(at.max(self.now), SimEvent::WorkerTimer { worker, token });
            }
        }
    }

    /// Re-arms `worker`'s timer after its clock changed rate: its deadlines, in its own
    /// time, fall at other host times.
    pub(crate) fn rearm_timer(&mut self, worker: WorkerId) {
        if let Some(p) = self.procs.get_mut(&worker) {
            p.timer_at = None;
        }
        self.arm_timer(worker);
    }

    pub(crate) fn worker_timer(&mut self, worker: WorkerId, token: u64) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if p.timer_token != token || !p.runnable() || p.wedged {
            return;
        }
        p.timer_at = None;
        // A simulated connection carries one request: as many in progress as held.
        let conns = p.serving.len() as u32;
        if let Some(app) = &self.spec.workload.app {
            // The driver's observations of its application: the probe's answer (none
            // while wedged) and the memory, with a passing peak now and then.
            if !p.app_wedged {
                p.life.app_alive(p.clock.own(now));
            }
            let peak = self.rng.unit() < app.peak_chance;
            let memory = app.memory_base
                + app.memory_per_request * p.life.requests()
                + if peak { app.peak_bytes } else { 0 };
            p.life.set_memory(memory);
            let beats = p.life.beats_sent();
            p.life.handle_timeout(p.clock.own(now), conns, conns);
            if p.life.beats_sent() > beats {
                // The oracle: what the parent was told, beat by beat.
                let peak = self.out.memory_peaks.entry(worker.0).or_insert(0);
                *peak = (*peak).max(memory);
                let limit = self.spec.config.recovery.worker_max_rss;
                if limit > 0 && memory > limit as u64 {
                    p.memory_over_streak += 1;
                    let most = self.out.memory_streaks.entry(worker.0).or_insert(0);
                    *most = (*most).max(p.memory_over_streak);
                } else {
                    if p.memory_over_streak == 1 {
                        self.out.coverage.insert(labels::MEMORY_PEAK_PASSED);
                    }
                    p.memory_over_streak = 0;
                }
            }
        } else {
            p.life.handle_timeout(p.clock.own(now), conns, conns);
        }
        if p.life.poll_timeout().is_some_and(|t| t <= p.clock.own(now)) {
            // A deadline the lifecycle judged and left due would fire again at once,
            // forever, at this instant: the run could never move on.
            self.violation(format!(
                "{worker}: a deadline at or before {now} is still due after its timeout was handled"
            ));
            return;
        }
        let failed = p.client.handle_timeout(p.clock.own(now));
        for c in failed {
            self.completion(worker, c);
        }
        self.pump(worker);
    }

    pub(crate) fn worker_receive(&mut self, worker: WorkerId, bytes: &[u8], piece: bool) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.runnable() {
            return;
        }
        let mut split = core::mem::replace(&mut p.pieces_down, piece);
        p.down.push(bytes);
        let mut messages = Vec::new();
        loop {
            match p.down.next_parent_message() {
                Ok(Some(m)) => {
                    if core::mem::take(&mut split) {
                        self.out.coverage.insert(labels::FRAME_IN_PIECES_DECODED);
                    }
                    messages.push(m)
                }
                Ok(None) => break,
                Err(_) => {
                    self.violation(format!("{worker} got a malformed frame from the parent"));
                    return;
                }
            }
        }
        for m in messages {
            let Some(p) = self.procs.get_mut(&worker) else {
                return;
            };
            if p.wedged {
                break;
            }
            self.certs_worker_message(worker, &m);
            let Some(p) = self.procs.get_mut(&worker) else {
                return;
            };
            match m {
                ParentMessage::Broker { id, reply } => {
                    if let Some(c) = p.client.on_reply(p.clock.own(now), id, reply) {
                        self.completion(worker, c);
                    }
                }
                ParentMessage::Commit if p.behavior == Behavior::CrashBetweenPrepareAndCommit => {
                    p.misbehaved(FaultKind::CrashBetweenPrepareAndCommit);
                    self.out
                        .coverage
                        .insert(labels::COMMIT_REACHED_DOOMED_WORKER);
                    self.out
                        .coverage
                        .insert(labels::CRASH_BETWEEN_PREPARE_AND_COMMIT);
                    self.process_died(worker, ExitStatus::Signal(11));
                    return;
                }
                ParentMessage::UpstreamHealth { down } => self.proxy_learned(worker, &down),
                other => p.life.on_message(p.clock.own(now), &other),
            }
            self.pump(worker);
        }
    }

    pub(crate) fn worker_eof(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.runnable() || p.eof_seen {
            return;
        }
        p.eof_seen = true;
        let failed = p.client.channel_closed();
        p.life.channel_closed(p.clock.own(now));
        // Broker-dependent work fails closed: nothing is published without the parent.
        let uploads: Vec<u64> = p.uploads.keys().copied().collect();
        for c in failed {
            self.completion(worker, c);
        }
        for conn in uploads {
            self.abort_upload(worker, conn);
        }
        if let Some(p) = self.procs.get_mut(&worker) {
            let lost = p.log_backlog.len();
            p.log_backlog.clear();
            for _ in 0..lost {
                p.life.connection_closed(p.clock.own(now));
            }
            self.out.log.lost_with_worker += lost as u64;
        }
        self.pump(worker);
    }

    pub(crate) fn worker_terminate(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        // A paused process runs its TERM handler when it is continued.
        if p.alive && p.held.is_some() {
            p.term_pending = true;
            return;
        }
        // A stopped process does not run its TERM handler; a wedged one ignores it.
        if !p.runnable() || p.wedged || p.behavior == Behavior::WedgedDrain {
            return;
        }
        p.life.terminate(p.clock.own(now));
        self.pump(worker);
    }

    /// A worker's application finished its shutdown ([`crate::AppModel::shutdown_ms`]).
    pub(crate) fn app_shut_down(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.runnable() {
            return;
        }
        p.life.app_shut_down(p.clock.own(now));
        self.pump(worker);
    }

    pub(crate) fn worker_boot_done(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.runnable() {
            return;
        }
        if let Some(app) = &self.spec.workload.app {
            // The application imported: its interpreter is probed from now on.
            p.life.watch_app(p.clock.own(now));
            if app.shutdown_ms.is_some() {
                p.life.app_has_shutdown();
            }
        }
        match p.behavior.clone() {
            Behavior::FailStartup(error) => {
                p.life.startup_failed(error);
                self.out.coverage.insert(labels::STARTUP_ERROR_REPORTED);
            }
            Behavior::SlowBoot(_) => {
                p.life.prepared(p.clock.own(now));
                self.out.coverage.insert(labels::SLOW_BOOT_FINISHED);
            }
            Behavior::CrashBetweenPrepareAndCommit => {
                p.life.prepared(p.clock.own(now));
                let d = Duration::from_micros(self.rng.range(1, 400));
                self.schedule_in(d, SimEvent::Crash { worker });
            }
            Behavior::CrashAfter(lifetime) | Behavior::SlowBootCrashAfter { lifetime, .. } => {
                p.life.prepared(p.clock.own(now));
                self.schedule_in(lifetime, SimEvent::Crash { worker });
            }
            _ => p.life.prepared(p.clock.own(now)),
        }
        self.pump(worker);
    }

    // ----- clients --------------------------------------------------------------------

    pub(crate) fn client_arrival(&mut self) {
        let rate = self.spec.workload.peak_request_rate();
        let now_d = Duration::from_nanos(self.now.as_nanos());
        if now_d < self.spec.workload.until {
            let d = self.rng.exp(1.0 / rate);
            self.schedule_in(Duration::from_secs_f64(d), SimEvent::ClientArrival);
        }
        // Thinning: a candidate at the peak rate is a request with probability
        // rate(now) / peak. Without steps nothing is drawn, as before.
        if !self.spec.workload.request_rate_steps.is_empty()
            && self.rng.unit() * rate >= self.spec.workload.request_rate_at(now_d)
        {
            return;
        }
        let arrived_ns = self.now.as_nanos();
        self.arrive(ConnKind::Get { arrived_ns });
    }

    pub(crate) fn upload_arrival(&mut self) {
        let w = &self.spec.workload;
        let now = Duration::from_nanos(self.now.as_nanos());
        let (rate, targets, until) = (w.upload_rate_at(now), w.upload_targets.max(1), w.until);
        if now < until && rate > 0.0 {
            let d = self.rng.exp(1.0 / rate);
            self.schedule_in(Duration::from_secs_f64(d), SimEvent::UploadArrival);
        }
        let target = self.rng.range(0, u64::from(targets) - 1) as u8;
        self.next_conn += 1;
        let writer = self.next_conn;
        let arrived_ms = self.now.as_nanos() / 1_000_000;
        self.arrive(ConnKind::Upload {
            target,
            writer,
            arrived_ms,
        });
    }

    pub(crate) fn arrive(&mut self, kind: ConnKind) {
        if !self.listener_open || !self.parent_alive() {
            self.out.requests.refused += 1;
            if let ConnKind::Dav { rec } = kind {
                self.dav_record_end(rec, crate::outcome::DavEnd::Refused);
            }
            if let ConnKind::DavTree { rec } = kind {
                self.dav_tree_ended(rec, crate::dav_tree::TreeEnd::Refused);
            }
            if let ConnKind::Chunk { rec } = kind {
                self.chunk_ended(rec, crate::chunks::ChunkEnd::Refused);
            }
            return;
        }
        self.next_conn += 1;
        let conn = self.next_conn;
        // Alone in the listener's queue, it goes to a worker at once, drawn as `dispatch`
        // would draw it, without being queued to be taken straight back.
        if self.backlog.is_empty()
            && let Some(pick) = self.pick_taker()
        {
            self.accept(pick, conn, kind);
        } else {
            self.backlog.push_back((conn, kind));
        }
        self.dispatch();
    }

    /// Hand queued connections to accepting workers, as the shared listener would.
    pub(crate) fn dispatch(&mut self) {
        while !self.backlog.is_empty() {
            let Some(pick) = self.pick_taker() else {
                // Out of descriptors: accept fails and the connections stay queued.
                if self.procs.values().any(Proc::could_take) {
                    let queued: Vec<u64> = self.backlog.iter().map(|(c, _)| *c).collect();
                    self.waited_emfile.extend(queued);
                    self.out
                        .coverage
                        .insert(labels::EVERY_WORKER_OUT_OF_DESCRIPTORS);
                }
                return;
            };
            let Some((conn, kind)) = self.backlog.pop_front() else {
                return;
            };
            self.accept(pick, conn, kind);
        }
    }

    /// The worker the listener hands the next connection to: drawn among those that can
    /// take one now, in id order; none (and no draw) when none can.
    fn pick_taker(&mut self) -> Option<WorkerId> {
        let takers = self.takers.at(self.now, &self.procs);
        if takers.is_empty() {
            return None;
        }
        Some(takers[self.rng.range(0, takers.len() as u64 - 1) as usize])
    }

    fn accept(&mut self, worker: WorkerId, conn: u64, kind: ConnKind) {
        let (lo, hi) = self.spec.workload.service_ms;
        let service = Duration::from_micros(self.rng.range(lo * 1000, hi * 1000));
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.prepared_sent {
            let now = self.now;
            self.violation(format!(
                "startup rule: connection {conn} was handed to {worker} at {now}, before it reported PREPARED (a worker takes requests only once it, and its application, started)"
            ));
            return;
        }
        if p.serve(conn, kind) {
            self.takers.changed();
        }
        p.life.connection_opened();
        match kind {
            ConnKind::Get { .. } => {
                self.schedule_in(service, SimEvent::RequestDone { worker, conn })
            }
            ConnKind::Upload {
                target,
                writer,
                arrived_ms,
            } => self.start_upload(worker, conn, target, writer, arrived_ms, None),
            ConnKind::Dav { rec } => self.dav_accept(worker, conn, rec),
            ConnKind::DavTree { rec } => self.dav_tree_accept(worker, conn, rec),
            ConnKind::Chunk { rec } => self.chunk_accept(worker, conn, rec),
            ConnKind::Proxy { cgi, .. } => self.proxy_accept(worker, conn, cgi),
        }
    }

    /// Closes connection `conn` of `worker` once a write it served (a DAV request's, a
    /// chunk's, a tree request's) is answered.
    pub(crate) fn close_served(&mut self, worker: WorkerId, conn: u64) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        let (served, had_no_room) = p.unserve(conn);
        if served.is_some() {
            p.life.connection_closed(p.clock.own(now));
        }
        if had_no_room {
            self.takers.changed();
        }
    }

    pub(crate) fn request_done(&mut self, worker: WorkerId, conn: u64) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        // A stopped or wedged worker's request stalls with it: it fails when the worker
        // is killed (a paused worker's is held, and ends when the worker resumes). So does
        // one whose application is wedged: the request never leaves the interpreter.
        if !p.runnable() || p.wedged || p.app_wedged {
            return;
        }
        let (served, had_no_room) = p.unserve(conn);
        let Some(kind) = served else {
            return;
        };
        if had_no_room {
            self.takers.changed();
        }
        p.life.request_served();
        p.life.connection_closed(p.clock.own(now));
        let crash_after = match p.behavior {
            Behavior::CrashAfterRequests(n) => p.life.requests() >= n,
            _ => false,
        };
        // The kernel kills a worker whose leak passes its memory limit, whatever the
        // supervisor's rules: the allocation for this request is the one refused.
        let out_of_memory = self.spec.workload.app.as_ref().is_some_and(|app| {
            app.oom_limit.is_some_and(|limit| {
                app.memory_base + app.memory_per_request * p.life.requests() > limit
            })
        });
        if let Behavior::AppWedgesAfterRequests(n) = p.behavior
            && p.life.requests() >= n
            && !p.app_wedged
        {
            // The next request sticks in the interpreter, holding its lock.
            p.app_wedged = true;
            p.misbehaved(FaultKind::AppWedge);
            self.out
                .app_wedges
                .push((worker.0, now.as_nanos() / 1_000_000));
        }
        // Over TLS, a worker holding no identity fails the handshake.
        if self.certs_served(worker) {
            self.out.requests.ok += 1;
            if let ConnKind::Get { arrived_ns } = kind {
                let waited = now.as_nanos().saturating_sub(arrived_ns) / 1_000;
                self.out.request_latency_us.push(waited);
            }
        }
        // (Mostly empty: a look first spares the tree its search.)
        if !self.waited_emfile.is_empty() && self.waited_emfile.remove(&conn) {
            self.out.coverage.insert(labels::BACKLOG_WAITED_OUT_EMFILE);
        }
        if self.spec.workload.access_log {
            self.out.log.produced += 1;
            self.append_log(worker, "GET / 200".to_string());
        }
        if crash_after {
            if let Some(p) = self.procs.get_mut(&worker) {
                p.misbehaved(FaultKind::CrashAfterRequests);
            }
            self.out.coverage.insert(labels::CRASHED_AFTER_REQUESTS);
            self.process_died(worker, ExitStatus::Signal(11));
            return;
        }
        if out_of_memory {
            self.out
                .oom_kills
                .push((worker.0, now.as_nanos() / 1_000_000));
            self.process_died(worker, ExitStatus::Signal(9));
            return;
        }
        self.pump(worker);
        self.dispatch();
    }

    /// A log record is work the worker owes: it keeps the worker's drain open until the
    /// parent has taken it, so a graceful stop loses no record.
    fn append_log(&mut self, worker: WorkerId, record: String) {
        let now = self.now;
        let policy = self.spec.config.broker.log_policy;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        p.log_produced += 1;
        if !p.log_backlog.is_empty() {
            p.life.connection_opened();
            p.log_backlog.push_back(record);
            return;
        }
        match p.client.request(
            p.clock.own(now),
            BrokerRequest::AppendLog {
                record: record.clone(),
            },
        ) {
            Ok(id) => {
                p.life.connection_opened();
                p.waiting.insert(id, Waiting::Log);
            }
            Err(servery_core::broker::ClientError::Saturated) => match policy {
                servery_core::config::LogPolicy::Block => {
                    p.life.connection_opened();
                    p.log_backlog.push_back(record);
                }
                servery_core::config::LogPolicy::Drop => {
                    p.log_produced -= 1;
                    self.out.log.dropped_local += 1;
                }
            },
            Err(_) => self.out.log.lost_with_worker += 1,
        }
    }

    fn flush_log_backlog(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        while let Some(record) = p.log_backlog.front().cloned() {
            match p
                .client
                .request(p.clock.own(now), BrokerRequest::AppendLog { record })
            {
                Ok(id) => {
                    p.log_backlog.pop_front();
                    p.waiting.insert(id, Waiting::Log);
                }
                Err(_) => break,
            }
        }
    }

    fn completion(&mut self, worker: WorkerId, c: Completion) {
        let (id, reply) = match c {
            Completion::Reply { id, reply } => (id, Some(reply)),
            Completion::Failed { id, .. } => (id, None),
        };
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        let Some(waiting) = p.waiting.remove(&id) else {
            return;
        };
        match waiting {
            Waiting::Log => {
                if reply.is_none() {
                    self.out.log.lost_with_worker += 1;
                }
                let now = self.now;
                p.life.connection_closed(p.clock.own(now));
                self.flush_log_backlog(worker);
                self.pump(worker);
            }
            Waiting::Upload(conn) => self.upload_reply(worker, conn, reply),
            Waiting::Dav(conn) => self.dav_reply(worker, conn, reply),
            Waiting::DavTree(conn) => self.dav_tree_reply(worker, conn, reply),
            Waiting::Chunk(conn) => self.chunk_reply(worker, conn, reply),
            Waiting::Proxy(conn) => self.proxy_reply(worker, conn, reply),
        }
    }
}
