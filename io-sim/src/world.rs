//! The simulated host: virtual clock, event queue, processes, channels, listener,
//! clients, file system and log writer, all drawn from one seeded stream.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use servery_core::config::LogPolicy;
use servery_core::driver::{ParentIo, RunEnd, Wakeup};
use servery_core::parent::{Parent, ParentAction};
use servery_core::proto::{
    FrameDecoder, MAX_FRAME_DEFAULT, ParentMessage, WorkerMessage, encode_parent,
};
use servery_core::singletons::SingletonAction;
use servery_core::supervisor::{
    Action, Command, Event, ExitReason, ExitStatus, FailureReason, Platform,
};
use servery_core::{Instant, ReloadId, WorkerId};

use crate::dav::DavSim;
use crate::fs::SimFs;
use crate::labels;
use crate::outcome::{Injected, Outcome, StatusAnswer, UploadEnd, UploadRecord, WorkerExit};
use crate::plan::{Behavior, Fault, FaultKind, SimCommand, SimSpec, SpawnInfo};
use crate::proc_table::ProcTable;
use crate::process::{Proc, key};
use crate::rng::SimRng;
use crate::trace::Trace;

mod channels;
mod delays;
mod drift;
mod faults;
mod host;
mod journal;
mod looks;
mod pause;
mod queue;

pub(crate) use drift::WorkerClock;
use queue::EventQueue;

/// Something that happens at a point of virtual time.
///
/// Laid out as a word-sized tag before its fields (`repr(u64)`): an event is moved
/// several times on its way from the queue to its handler, and with the default
/// layout each move copied it in five unaligned pieces.
#[derive(Debug, Clone)]
#[repr(u64)]
pub(crate) enum SimEvent {
    /// Bytes a worker wrote reach the parent (`piece`: the write continues in the next
    /// delivery, see [`crate::Fault::ShortWrites`]).
    ToParent {
        worker: WorkerId,
        bytes: Vec<u8>,
        piece: bool,
    },
    /// The parent sees EOF on a worker's channel.
    ToParentEof {
        worker: WorkerId,
    },
    /// The parent reaps a worker.
    Reaped {
        worker: WorkerId,
        status: ExitStatus,
    },
    /// Bytes the parent wrote reach a worker.
    ToWorker {
        worker: WorkerId,
        bytes: Vec<u8>,
        piece: bool,
    },
    ToWorkerEof {
        worker: WorkerId,
    },
    WorkerTimer {
        worker: WorkerId,
        token: u64,
    },
    BootDone {
        worker: WorkerId,
    },
    Crash {
        worker: WorkerId,
    },
    RequestDone {
        worker: WorkerId,
        conn: u64,
    },
    UploadStep {
        worker: WorkerId,
        conn: u64,
    },
    ClientArrival,
    UploadArrival,
    Fault(usize),
    Command(usize),
    LogWriterDone {
        records: usize,
    },
    Liveness,
    Stop,
    /// A stalled parent runs again.
    ParentResumes,
    /// A worker's accept works again after EMFILE.
    AcceptRecovers {
        worker: WorkerId,
    },
    /// A WebDAV lock client with drawn parameters arrives.
    DavClientArrival,
    /// A WebDAV writer without a lock arrives.
    DavWriteArrival,
    /// A WebDAV lock client sends its next request.
    DavClientStep {
        client: usize,
    },
    /// The CA, the state directory or the operator, for the certificate manager.
    Cert(crate::certs::CertStep),
    /// A worker a pause fault stopped is continued (`SIGCONT`).
    WorkerResumes {
        worker: WorkerId,
    },
    /// The WebDAV tree client sends its next request.
    DavTreeSend,
    /// The resumable-upload client sends its next request.
    ChunkSend,
    /// A chunk's bytes have reached the worker writing them.
    ChunkCopied {
        worker: WorkerId,
        conn: u64,
    },
    /// A worker's application has finished its shutdown.
    AppShutDown {
        worker: WorkerId,
    },
    /// A part of a worker's application startup finished ([`crate::Behavior::AppStartup`]).
    AppStartupStep {
        worker: WorkerId,
        stage: crate::AppStage,
    },
    /// An upstream goes down or comes back ([`crate::ProxyPlan::flips`]).
    UpstreamFlip {
        flip: usize,
    },
    /// A proxied request (or a CGI request) arrives.
    ProxyArrival {
        cgi: bool,
    },
    /// A proxied request's upstream answered or failed; a script ended.
    ProxyDone {
        worker: WorkerId,
        conn: u64,
    },
    /// The parent's probe of an upstream comes back.
    ProbeAnswered {
        /// The health table's id, and the simulated upstream the URL names.
        upstream: u32,
        target: u16,
    },
    /// A worker's clock runs true again ([`crate::Fault::ClockDrift`]).
    DriftEnds {
        worker: WorkerId,
    },
}

impl SimEvent {
    fn code(&self) -> (u64, u64) {
        match self {
            SimEvent::ToParent { worker, .. } => (1, worker.0),
            SimEvent::ToParentEof { worker } => (2, worker.0),
            SimEvent::Reaped { worker, .. } => (3, worker.0),
            SimEvent::ToWorker { worker, .. } => (4, worker.0),
            SimEvent::ToWorkerEof { worker } => (5, worker.0),
            SimEvent::WorkerTimer { worker, .. } => (6, worker.0),
            SimEvent::BootDone { worker } => (7, worker.0),
            SimEvent::Crash { worker } => (8, worker.0),
            SimEvent::RequestDone { worker, conn } => (9, worker.0 << 32 | conn),
            SimEvent::UploadStep { worker, conn } => (10, worker.0 << 32 | conn),
            SimEvent::ClientArrival => (11, 0),
            SimEvent::UploadArrival => (12, 0),
            SimEvent::Fault(i) => (13, *i as u64),
            SimEvent::Command(i) => (14, *i as u64),
            SimEvent::LogWriterDone { records } => (15, *records as u64),
            SimEvent::Liveness => (16, 0),
            SimEvent::Stop => (17, 0),
            SimEvent::ParentResumes => (18, 0),
            SimEvent::AcceptRecovers { worker } => (19, worker.0),
            SimEvent::DavClientArrival => (20, 0),
            SimEvent::DavWriteArrival => (21, 0),
            SimEvent::DavClientStep { client } => (22, *client as u64),
            SimEvent::Cert(step) => (23, step.code()),
            SimEvent::WorkerResumes { worker } => (24, worker.0),
            SimEvent::DavTreeSend => (25, 0),
            SimEvent::ChunkSend => (26, 0),
            SimEvent::ChunkCopied { worker, conn } => (27, worker.0 << 32 | conn),
            SimEvent::AppShutDown { worker } => (28, worker.0),
            SimEvent::AppStartupStep { worker, stage } => (29, worker.0 << 1 | *stage as u64),
            SimEvent::UpstreamFlip { flip } => (40, *flip as u64),
            SimEvent::ProxyArrival { cgi } => (41, u64::from(*cgi)),
            SimEvent::ProxyDone { worker, conn } => (42, worker.0 << 32 | conn),
            SimEvent::ProbeAnswered { upstream, .. } => (43, u64::from(*upstream)),
            SimEvent::DriftEnds { worker } => (44, worker.0),
        }
    }

    /// The worker process this event is addressed to, when it is one only that process
    /// acts on (what a paused process holds until it resumes).
    fn for_a_worker(&self) -> Option<WorkerId> {
        match self {
            SimEvent::ToWorker { worker, .. }
            | SimEvent::ToWorkerEof { worker }
            | SimEvent::WorkerTimer { worker, .. }
            | SimEvent::BootDone { worker }
            | SimEvent::Crash { worker }
            | SimEvent::RequestDone { worker, .. }
            | SimEvent::UploadStep { worker, .. }
            | SimEvent::ChunkCopied { worker, .. }
            | SimEvent::ProxyDone { worker, .. }
            | SimEvent::AppShutDown { worker }
            | SimEvent::AppStartupStep { worker, .. } => Some(*worker),
            _ => None,
        }
    }
}

/// A client connection waiting in, or taken from, the shared listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnKind {
    /// A plain request, offered at this point of the run (ns).
    Get { arrived_ns: u64 },
    Upload {
        target: u8,
        writer: u64,
        arrived_ms: u64,
    },
    /// A WebDAV request: its record in [`crate::Outcome::dav`]'s log.
    Dav { rec: usize },
    /// A WebDAV tree request: its record in [`crate::Outcome::dav_tree`].
    DavTree { rec: usize },
    /// A request of a resumable upload: its record in [`crate::Outcome::chunks`].
    Chunk { rec: usize },
    /// A proxied request, or a CGI request (`cgi`), offered at this point of the run (ns).
    Proxy { arrived_ns: u64, cgi: bool },
}

/// What a simulated event wakes the parent's driver for, at the world's `now`: small,
/// where the driver's [`Wakeup`] is not, since every event's step returns one or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The parent's deadlines are to be judged ([`Wakeup::Timeout`]).
    Timer,
    /// The log writer is done ([`Wakeup::LogWritten`]).
    LogWritten,
}

impl Wake {
    pub(crate) fn at(self, now: Instant) -> Wakeup {
        match self {
            Wake::Timer => Wakeup::Timeout(now),
            Wake::LogWritten => Wakeup::LogWritten(now),
        }
    }
}

pub struct SimWorld {
    pub(crate) spec: SimSpec,
    pub(crate) now: Instant,
    pub(crate) rng: SimRng,
    queue: EventQueue,
    pub(crate) inbox: VecDeque<Event>,
    /// How each look hands the inbox to the parent.
    looks: looks::Looks,
    /// Delays on the control channels ([`crate::Fault::ChannelDelay`]).
    delays: delays::ChannelDelays,
    pub(crate) procs: ProcTable,
    /// The parent's read end of each worker's channel, by worker id (small sequence
    /// numbers: an index, not a tree search per frame); made at the first frame and
    /// dropped at the reap.
    decoders: Vec<Option<FrameDecoder>>,
    next_pid: u32,
    spawn_index: u64,
    pub(crate) listener_open: bool,
    /// The listener sets the parent holds, as the core's actions opened and closed them.
    pub(crate) listeners: crate::listen_sets::ListenSets,
    /// The parent's HTTP/3 sockets, as the core's steering opened and closed them.
    pub(crate) quic_sockets: crate::quic_sockets::QuicSockets,
    pub(crate) backlog: VecDeque<(u64, ConnKind)>,
    /// The workers that can take a connection, kept between connections.
    pub(crate) takers: crate::takers::Takers,
    /// Buffers of frames the parent has read, kept for the next frames a worker writes.
    spare_frames: Vec<Vec<u8>>,
    pub(crate) next_conn: u64,
    pub(crate) fs: SimFs,
    /// The write-flow oracle: who holds each target right now, as workers believe.
    pub(crate) holders: BTreeMap<u8, (WorkerId, u64)>,
    pub(crate) last_holder: Option<WorkerId>,
    parent_alive: bool,
    halt_pending: bool,
    /// While the parent is stalled: until when, and what reached it meanwhile, in order.
    parent_stalled_until: Option<Instant>,
    stalled_since: Instant,
    held: Vec<SimEvent>,
    /// What reached a stalled parent, readable now that it runs again but not yet read:
    /// the driver loop must take it in ([`ParentIo::arrived`]) before judging deadlines.
    unread: Vec<SimEvent>,
    /// Status requests not answered yet, with when they were made.
    status_asked: Vec<Instant>,
    /// (generation, slot) of workers a crash fault killed, until the slot is refilled.
    crashed_slots: Vec<(u64, u64)>,
    /// (generation, slot) of workers ended for the malformed frame a fault sent, until
    /// the slot is refilled.
    malformed_slots: Vec<(u64, u64)>,
    /// Workers that died holding a target's lease: (worker, target, killed as the lease
    /// holder), until the broker no longer lists them as the holder.
    dead_holders: Vec<(WorkerId, u8, bool)>,
    /// The heartbeat interval each generation's first HELLO carried.
    hello_intervals: Vec<(u64, u64)>,
    /// Until when control-channel writes may be short, the file system is full, and
    /// publishing renames fail.
    short_writes_until: Instant,
    pub(crate) disk_full_until: Instant,
    pub(crate) rename_fails_until: Instant,
    /// Until when an upload's fsync before its publish fails.
    pub(crate) fsync_fails_until: Instant,
    /// Until then, the fsync of a directory after a publishing rename fails (EIO).
    pub(crate) dir_sync_fails_until: Instant,
    /// Torn renames planned and not yet met: the next writes to reach their directory's
    /// fsync lose the power there.
    pub(crate) torn_renames_armed: u32,
    /// With `features.dav_persistent_locks`: the locks the simulated disk's lock journal
    /// holds, with the expiry it gives each (its writes fail while the disk is full),
    /// against which the table is judged.
    pub(crate) journal: Option<BTreeMap<servery_core::LeaseId, Instant>>,
    /// Workers whose last delivery to the parent was part of a write still arriving.
    pieces_up: BTreeSet<WorkerId>,
    /// (generation, slot) of spawns the host refused, until the supervisor acts on them.
    spawn_failed_slots: Vec<(u64, u64)>,
    /// Workers whose control write failed, until they are reaped.
    write_failed: BTreeSet<WorkerId>,
    /// Connections that waited in the backlog while a worker's accept failed.
    pub(crate) waited_emfile: BTreeSet<u64>,
    /// A clock jump past the heartbeat timeout the parent has not yet been seen to
    /// notice, and what it had noticed before.
    unnoticed_jump: bool,
    not_running_seen: Duration,
    log_busy: bool,
    snapshot_due: bool,
    last_wait_at: Instant,
    spins: u32,
    pub(crate) proc_bound: usize,
    /// Workers stopped by a pause that ends (each holds what reaches it meanwhile).
    pub(crate) pausing: usize,
    /// WebDAV clients, workers' DAV requests and the lock-table oracle (with a DAV
    /// workload only).
    pub(crate) dav: Option<DavSim>,
    /// The CA and the workers' identities (with a certificate plan only).
    pub(crate) certs: Option<crate::certs::CertSim>,
    /// The WebDAV tree, its client and the tree requests workers carry out (with a tree
    /// workload only).
    pub(crate) dav_tree: Option<crate::dav_tree::DavTreeSim>,
    /// The resumable-upload client and the chunks workers carry out (with a resumable
    /// plan only).
    pub(crate) chunks: Option<crate::chunks::ChunkSim>,
    /// The upstreams, the scripts and the proxy oracle (with a proxy plan only).
    pub(crate) proxy: Option<crate::proxy::ProxySim>,
    pub(crate) trace: Trace,
    /// Capacity, backoff and restart-accounting rules, judged from the parent's orders
    /// and reads ([`crate::oracle`]).
    pub(crate) oracle: crate::oracle::LifecycleOracle,
    pub(crate) out: Outcome,
}

impl core::fmt::Debug for SimWorld {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SimWorld")
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

/// What a control frame's buffer starts with: a heartbeat (about 40 bytes with its
/// counters) and every other frame of a plain run fit without growing it.
pub(crate) const FRAME_CAPACITY: usize = 64;

pub(crate) fn ms(d: Duration) -> Instant {
    Instant::from_nanos(d.as_nanos() as u64)
}

/// How many read frames' buffers the world keeps: more than a step's frames in flight.
const SPARE_FRAMES: usize = 16;

impl SimWorld {
    /// An empty buffer for a frame a worker writes: one a read frame left, or a new one.
    pub(crate) fn frame_buffer(&mut self) -> Vec<u8> {
        self.spare_frames
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(FRAME_CAPACITY))
    }

    /// Keeps a read frame's buffer for a later frame (allocation was a tenth of a run).
    fn reuse_frame_buffer(&mut self, mut bytes: Vec<u8>) {
        if self.spare_frames.len() < SPARE_FRAMES {
            bytes.clear();
            self.spare_frames.push(bytes);
        }
    }

    pub fn new(spec: SimSpec) -> Self {
        let rng = SimRng::new(spec.seed);
        let trace = Trace::new(spec.trace);
        let workers = spec.config.workers.max(1) as usize;
        let mut w = SimWorld {
            now: Instant::ZERO,
            rng,
            queue: EventQueue::default(),
            inbox: VecDeque::new(),
            looks: looks::Looks::new(spec.seed),
            delays: delays::ChannelDelays::new(spec.seed),
            procs: ProcTable::default(),
            decoders: Vec::new(),
            next_pid: 1000,
            spawn_index: 0,
            listener_open: true,
            listeners: crate::listen_sets::ListenSets::bound_at_start(spec.config.listen),
            quic_sockets: crate::quic_sockets::QuicSockets::default(),
            backlog: VecDeque::new(),
            takers: crate::takers::Takers::new(),
            spare_frames: Vec::new(),
            next_conn: 0,
            fs: SimFs::default(),
            holders: BTreeMap::new(),
            last_holder: None,
            parent_alive: true,
            halt_pending: false,
            parent_stalled_until: None,
            stalled_since: Instant::ZERO,
            held: Vec::new(),
            unread: Vec::new(),
            status_asked: Vec::new(),
            crashed_slots: Vec::new(),
            malformed_slots: Vec::new(),
            dead_holders: Vec::new(),
            hello_intervals: Vec::new(),
            short_writes_until: Instant::ZERO,
            disk_full_until: Instant::ZERO,
            rename_fails_until: Instant::ZERO,
            fsync_fails_until: Instant::ZERO,
            dir_sync_fails_until: Instant::ZERO,
            torn_renames_armed: 0,
            journal: spec
                .config
                .features
                .dav_persistent_locks
                .then(BTreeMap::new),
            pieces_up: BTreeSet::new(),
            spawn_failed_slots: Vec::new(),
            write_failed: BTreeSet::new(),
            waited_emfile: BTreeSet::new(),
            unnoticed_jump: false,
            not_running_seen: Duration::ZERO,
            log_busy: false,
            snapshot_due: false,
            last_wait_at: Instant::ZERO,
            spins: 0,
            proc_bound: workers + 1,
            pausing: 0,
            dav: None,
            certs: None,
            dav_tree: None,
            chunks: None,
            proxy: None,
            trace,
            oracle: crate::oracle::LifecycleOracle::on_host(spec.host_cpus.clone()),
            out: Outcome {
                seed: spec.seed,
                ..Outcome::default()
            },
            spec,
        };
        let faults: Vec<Instant> = w.spec.faults.iter().map(|(at, _)| ms(*at)).collect();
        for (i, at) in faults.into_iter().enumerate() {
            w.schedule_at(at, SimEvent::Fault(i));
        }
        let commands: Vec<(Instant, usize)> = w
            .spec
            .commands
            .iter()
            .map(|(at, cmd)| match cmd {
                SimCommand::Reload(raw) => (ms(*at), raw.workers.max(1) as usize),
                // At most the spec's count plus every resize before it.
                SimCommand::Resize(_) => (
                    ms(*at),
                    w.spec.config.workers.max(1) as usize + w.spec.commands.len(),
                ),
                _ => (ms(*at), 0),
            })
            .collect();
        for (i, (at, extra)) in commands.into_iter().enumerate() {
            w.proc_bound += extra;
            w.schedule_at(at, SimEvent::Command(i));
        }
        let liveness = ms(w.spec.liveness_at);
        let stop = ms(w.spec.stop_at);
        w.schedule_at(liveness, SimEvent::Liveness);
        w.schedule_at(stop, SimEvent::Stop);
        if w.spec.workload.peak_request_rate() > 0.0 {
            let d = w.rng.exp(1.0 / w.spec.workload.peak_request_rate());
            w.schedule_in(Duration::from_secs_f64(d), SimEvent::ClientArrival);
        }
        let upload_rate = w.spec.workload.upload_rate_at(Duration::ZERO);
        if upload_rate > 0.0 {
            let d = w.rng.exp(1.0 / upload_rate);
            w.schedule_in(Duration::from_secs_f64(d), SimEvent::UploadArrival);
        }
        w.dav_start();
        w.certs_start();
        w.dav_tree_start();
        w.chunks_start();
        w.proxy_start();
        w
    }

    pub fn platform(&self) -> Platform {
        self.spec.platform
    }

    #[inline(always)]
    pub(crate) fn schedule_at(&mut self, at: Instant, event: SimEvent) {
        self.queue.push(at, event);
    }

    #[inline(always)]
    pub(crate) fn schedule_in(&mut self, d: Duration, event: SimEvent) {
        let at = self.now + d;
        self.schedule_at(at, event);
    }

    pub(crate) fn violation(&mut self, what: String) {
        if self.out.violations.len() < 16 {
            self.out.violations.push(format!("t={} {what}", self.now));
        }
    }

    /// One-way channel latency: 20–300 µs.
    pub(crate) fn latency(&mut self) -> Duration {
        Duration::from_micros(self.rng.range(20, 300))
    }

    pub(crate) fn parent_alive(&self) -> bool {
        self.parent_alive
    }

    /// Deliver bytes a worker wrote to the parent, in channel order. Returns when they
    /// arrive.
    pub(crate) fn send_up(&mut self, worker: WorkerId, bytes: Vec<u8>) -> Option<Instant> {
        if !self.parent_alive {
            return None;
        }
        let lat = self.latency();
        let p = self.procs.get_mut(&worker)?;
        if p.channel_broken {
            return None;
        }
        let after = p.up_clock;
        let at = self.up_arrival(worker, lat, after);
        if let Some(p) = self.procs.get_mut(&worker) {
            p.up_clock = at;
        }
        if self.short_write_now(&bytes) {
            let last = self.write_in_pieces(at, bytes, |bytes, piece| SimEvent::ToParent {
                worker,
                bytes,
                piece,
            });
            if let Some(p) = self.procs.get_mut(&worker) {
                p.up_clock = last;
            }
            return Some(last);
        }
        self.schedule_at(
            at,
            SimEvent::ToParent {
                worker,
                bytes,
                piece: false,
            },
        );
        Some(at)
    }

    fn live_count(&self) -> usize {
        self.procs.values().filter(|p| p.alive).count()
    }

    /// Process one simulation event. Returns a wakeup for the parent when the event is
    /// the parent's own.
    #[inline(always)]
    fn step(&mut self, event: SimEvent) -> Option<Wake> {
        self.out.events += 1;
        let (code, arg) = event.code();
        let now = self.now;
        self.trace
            .record(&[now.as_nanos(), code, arg], || format!("{now} {event:?}"));
        if self.parent_stalled_until.is_some() && Self::for_the_parent(&event) {
            self.held.push(event);
            return None;
        }
        if self.pausing > 0 {
            let event = self.hold_for_paused(event)?;
            return self.step_now(event);
        }
        self.step_now(event)
    }

    /// Carry out one simulation event (the trace has recorded it).
    fn step_now(&mut self, event: SimEvent) -> Option<Wake> {
        match event {
            SimEvent::ToParent {
                worker,
                bytes,
                piece,
            } => {
                // (Mostly empty: short writes happen only under their fault.)
                let mut split = !self.pieces_up.is_empty() && self.pieces_up.remove(&worker);
                if piece {
                    self.pieces_up.insert(worker);
                }
                let i = worker.0 as usize;
                if self.decoders.len() <= i {
                    self.decoders.resize_with(i + 1, || None);
                }
                let dec =
                    self.decoders[i].get_or_insert_with(|| FrameDecoder::new(MAX_FRAME_DEFAULT));
                dec.push(&bytes);
                loop {
                    match dec.next_worker_message() {
                        Ok(Some(message)) => {
                            if let Some(dav) = self.dav.as_mut() {
                                dav.wiretap_request(worker, &message);
                            }
                            if split {
                                split = false;
                                self.out.coverage.insert(labels::FRAME_IN_PIECES_DECODED);
                                if matches!(message, WorkerMessage::Heartbeat { .. }) {
                                    self.out.coverage.insert(labels::HEARTBEAT_IN_PIECES);
                                }
                            }
                            self.inbox.push_back(Event::Message { worker, message })
                        }
                        Ok(None) => break,
                        Err(error) => {
                            self.inbox
                                .push_back(Event::ProtocolViolation { worker, error });
                            break;
                        }
                    }
                }
                self.reuse_frame_buffer(bytes);
            }
            SimEvent::ToParentEof { worker } => {
                self.inbox.push_back(Event::ChannelClosed { worker })
            }
            SimEvent::Reaped { worker, status } => {
                if let Some(dec) = self.decoders.get_mut(worker.0 as usize) {
                    *dec = None;
                }
                if self.write_failed.remove(&worker) {
                    self.out.coverage.insert(labels::CONTROL_WRITE_FAILED_ENDED);
                }
                // What its scoreboard holds, read after its last words, as the real host
                // does: the lines it produced. Its own drops stay out: a simulated worker
                // never reports them to the parent (the outcome counts them), so the
                // parent has nothing to compare them with.
                if let Some(p) = self.procs.get(&worker) {
                    let counts = servery_core::supervisor::FinalCounts {
                        log_lines: p.log_produced,
                        ..Default::default()
                    };
                    self.inbox.push_back(Event::FinalCounts {
                        worker,
                        counts: Box::new(counts),
                    });
                }
                self.inbox.push_back(Event::Exited { worker, status });
            }
            SimEvent::ToWorker {
                worker,
                bytes,
                piece,
            } => self.worker_receive(worker, &bytes, piece),
            SimEvent::ToWorkerEof { worker } => self.worker_eof(worker),
            SimEvent::WorkerTimer { worker, token } => self.worker_timer(worker, token),
            SimEvent::BootDone { worker } => self.worker_boot_done(worker),
            SimEvent::Crash { worker } => {
                if let Some(p) = self.procs.get_mut(&worker) {
                    let (label, kind) = match p.behavior {
                        Behavior::CrashAtBoot => (labels::CRASHED_AT_BOOT, FaultKind::CrashAtBoot),
                        Behavior::CrashAfter(_) | Behavior::SlowBootCrashAfter { .. } => {
                            (labels::CRASHED_AFTER_UPTIME, FaultKind::CrashAfterUptime)
                        }
                        _ => (
                            labels::CRASH_BETWEEN_PREPARE_AND_COMMIT,
                            FaultKind::CrashBetweenPrepareAndCommit,
                        ),
                    };
                    if p.alive {
                        self.out.coverage.insert(label);
                    }
                    p.misbehaved(kind);
                }
                self.process_died(worker, ExitStatus::Signal(11));
            }
            SimEvent::RequestDone { worker, conn } => self.request_done(worker, conn),
            SimEvent::UploadStep { worker, conn } => self.upload_step(worker, conn),
            SimEvent::ClientArrival => self.client_arrival(),
            SimEvent::UploadArrival => self.upload_arrival(),
            SimEvent::Fault(i) => self.fault(i),
            SimEvent::Command(i) => {
                if self.parent_alive {
                    return self.command(i);
                }
            }
            SimEvent::LogWriterDone { records } => {
                self.log_busy = false;
                self.out.log.written += records as u64;
                return Some(Wake::LogWritten);
            }
            SimEvent::Liveness => {
                self.snapshot_due = true;
                return Some(Wake::Timer);
            }
            SimEvent::Stop => {
                self.out.stop_ms = Some(self.now.as_nanos() / 1_000_000);
                if self.parent_alive {
                    self.inbox.push_back(Event::Command(Command::Stop));
                }
            }
            SimEvent::ParentResumes => self.parent_resumes(),
            SimEvent::AcceptRecovers { .. } => self.dispatch(),
            SimEvent::DavClientArrival => self.dav_client_arrival(),
            SimEvent::DavWriteArrival => self.dav_write_arrival(),
            SimEvent::DavClientStep { client } => self.dav_client_step(client),
            SimEvent::Cert(step) => self.cert_step(step),
            SimEvent::WorkerResumes { worker } => self.worker_resumes(worker),
            SimEvent::DavTreeSend => self.dav_tree_send(),
            SimEvent::ChunkSend => self.chunk_send(),
            SimEvent::ChunkCopied { worker, conn } => self.chunk_copied(worker, conn),
            SimEvent::AppShutDown { worker } => self.app_shut_down(worker),
            SimEvent::AppStartupStep { worker, stage } => self.app_startup_step(worker, stage),
            SimEvent::UpstreamFlip { flip } => self.upstream_flip(flip),
            SimEvent::ProxyArrival { cgi } => self.proxy_arrival(cgi),
            SimEvent::ProxyDone { worker, conn } => self.proxy_done(worker, conn),
            SimEvent::ProbeAnswered { upstream, target } => self.probe_answered(upstream, target),
            SimEvent::DriftEnds { worker } => self.drift_ends(worker),
        }
        None
    }

    /// After the parent has exited or crashed: let the workers run out their own clocks
    /// (parent death: EOF, drain, exit), then settle the books.
    fn live_workers(&self) -> Vec<WorkerId> {
        self.procs
            .values()
            .filter(|p| p.alive)
            .map(|p| p.id)
            .collect()
    }

    /// Runs the world on after the parent's loop ended: a crashed parent's workers learn
    /// of it by EOF; after a host failure every live worker is killed, as the real driver
    /// does.
    pub fn finish(mut self, end: RunEnd) -> Outcome {
        self.out.exit_code = match end {
            RunEnd::Exited(code) => Some(code),
            RunEnd::Crashed | RunEnd::HostFailed => None,
        };
        if end == RunEnd::HostFailed {
            for w in self.live_workers() {
                self.process_died(w, ExitStatus::Signal(9));
            }
        }
        self.out.parent_gone_ms = self.now.as_nanos() / 1_000_000;
        self.parent_alive = false;
        for w in self.live_workers() {
            let lat = self.latency();
            self.schedule_in(lat, SimEvent::ToWorkerEof { worker: w });
        }
        let end = ms(self.spec.end_by);
        while let Some((at, event)) = self.queue.pop() {
            if at > end {
                break;
            }
            if !self.procs.values().any(|p| p.alive) {
                break;
            }
            self.now = at;
            match event {
                SimEvent::ClientArrival
                | SimEvent::UploadArrival
                | SimEvent::DavClientArrival
                | SimEvent::DavWriteArrival
                | SimEvent::DavTreeSend
                | SimEvent::ProxyArrival { .. }
                | SimEvent::ChunkSend => {
                    // Clients keep trying; the listener is gone with the parent or
                    // orphaned workers, which must not accept.
                    self.client_after_parent();
                }
                e => {
                    self.step(e);
                }
            }
        }
        self.out.processes_alive_at_end = self.live_count();
        self.out.requests.stranded += self.backlog.len() as u64;
        self.out.temp_files_at_end = self.fs.temp_count();
        self.dav_tree_finish();
        self.dav_judge();
        self.chunks_finish();
        self.proxy_finish();
        self.out.torn_files = self
            .fs
            .files
            .iter()
            // The resumable uploads' target is judged by their own oracle.
            .filter(|(target, _)| **target != crate::chunks::TARGET)
            .filter(|(_, (writer, bytes))| {
                bytes.len() as u64 != self.spec.workload.upload_chunks * 4
                    || bytes.iter().any(|b| *b != (*writer % 251) as u8)
            })
            .count();
        self.out.trace_hash = self.trace.hash();
        if let Some(lines) = self.trace.lines.take() {
            self.out.trace = lines;
        }
        self.out
    }

    fn client_after_parent(&mut self) {
        if self
            .procs
            .values()
            .any(|p| p.alive && !p.eof_seen && p.life.accepting())
        {
            self.out.coverage.insert(labels::CLIENT_BEFORE_ORPHAN_EOF);
        }
        if self
            .procs
            .values()
            .any(|p| p.alive && p.eof_seen && p.life.accepting())
        {
            self.violation("an orphaned worker still accepts after its parent died".into());
        }
    }
}
