//! The simulated host: virtual clock, event queue, processes, channels, listener,
//! clients, file system and log writer, all drawn from one seeded stream.

use core::time::Duration;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

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

use crate::fs::SimFs;
use crate::labels;
use crate::outcome::{Injected, Outcome, StatusAnswer, UploadEnd, UploadRecord, WorkerExit};
use crate::plan::{Behavior, Fault, FaultKind, SimCommand, SimSpec, SpawnInfo};
use crate::process::{Proc, key};
use crate::rng::SimRng;
use crate::trace::Trace;

/// Something that happens at a point of virtual time.
#[derive(Debug, Clone)]
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
        }
    }
}

struct Scheduled {
    at: Instant,
    seq: u64,
    event: SimEvent,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// A client connection waiting in, or taken from, the shared listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnKind {
    Get,
    Upload {
        target: u8,
        writer: u64,
        arrived_ms: u64,
    },
}

pub struct SimWorld {
    pub(crate) spec: SimSpec,
    pub(crate) now: Instant,
    pub(crate) rng: SimRng,
    queue: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    inbox: VecDeque<Event>,
    pub(crate) procs: BTreeMap<WorkerId, Proc>,
    decoders: BTreeMap<WorkerId, FrameDecoder>,
    next_pid: u32,
    spawn_index: u64,
    pub(crate) listener_open: bool,
    pub(crate) backlog: VecDeque<(u64, ConnKind)>,
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
    pub(crate) trace: Trace,
    pub(crate) out: Outcome,
}

impl core::fmt::Debug for SimWorld {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SimWorld")
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

pub(crate) fn ms(d: Duration) -> Instant {
    Instant::from_nanos(d.as_nanos() as u64)
}

impl SimWorld {
    pub fn new(spec: SimSpec) -> Self {
        let rng = SimRng::new(spec.seed);
        let trace = Trace::new(spec.trace);
        let workers = spec.config.workers.max(1) as usize;
        let mut w = SimWorld {
            now: Instant::ZERO,
            rng,
            queue: BinaryHeap::new(),
            seq: 0,
            inbox: VecDeque::new(),
            procs: BTreeMap::new(),
            decoders: BTreeMap::new(),
            next_pid: 1000,
            spawn_index: 0,
            listener_open: true,
            backlog: VecDeque::new(),
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
            trace,
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
        if w.spec.workload.request_rate > 0.0 {
            let d = w.rng.exp(1.0 / w.spec.workload.request_rate);
            w.schedule_in(Duration::from_secs_f64(d), SimEvent::ClientArrival);
        }
        let upload_rate = w.spec.workload.upload_rate_at(Duration::ZERO);
        if upload_rate > 0.0 {
            let d = w.rng.exp(1.0 / upload_rate);
            w.schedule_in(Duration::from_secs_f64(d), SimEvent::UploadArrival);
        }
        w
    }

    pub fn platform(&self) -> Platform {
        self.spec.platform
    }

    pub(crate) fn schedule_at(&mut self, at: Instant, event: SimEvent) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at,
            seq: self.seq,
            event,
        }));
    }

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
        let at = (self.now + lat).max(p.up_clock);
        p.up_clock = at;
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

    fn send_down(&mut self, worker: WorkerId, message: &ParentMessage) {
        let lat = self.latency();
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.alive || p.parent_closed || p.channel_broken {
            return;
        }
        if p.write_fails {
            // EPIPE: the channel is broken both ways. The driver reports it as the
            // channel's end, as the real one does, and the worker reads EOF.
            p.write_fails = false;
            p.channel_broken = true;
            p.misbehaved(FaultKind::ControlWriteFails);
            let at = (self.now + lat).max(p.down_clock);
            p.down_clock = at;
            self.write_failed.insert(worker);
            self.injected(FaultKind::ControlWriteFails, Some(worker));
            self.out
                .write_failures
                .push((worker.0, self.now.as_nanos() / 1_000_000));
            if matches!(message, ParentMessage::Broker { .. }) {
                self.out
                    .coverage
                    .insert(labels::WRITE_FAILED_ON_BROKER_REPLY);
            }
            self.trace
                .record(&[self.now.as_nanos(), 101, worker.0], || {
                    format!("{} write to {worker} failed: EPIPE", self.now)
                });
            self.inbox.push_back(Event::ChannelClosed { worker });
            self.schedule_at(at, SimEvent::ToWorkerEof { worker });
            return;
        }
        let mut bytes = Vec::with_capacity(32);
        if let Err(e) = encode_parent(message, &mut bytes) {
            // The core promises every message it sends fits the channel's frames.
            return self.violation(format!(
                "the parent cannot frame a message to {worker}: {e}"
            ));
        }
        let at = (self.now + lat).max(p.down_clock);
        p.down_clock = at;
        if self.short_write_now(&bytes) {
            let last = self.write_in_pieces(at, bytes, |bytes, piece| SimEvent::ToWorker {
                worker,
                bytes,
                piece,
            });
            if let Some(p) = self.procs.get_mut(&worker) {
                p.down_clock = last;
            }
            return;
        }
        self.schedule_at(
            at,
            SimEvent::ToWorker {
                worker,
                bytes,
                piece: false,
            },
        );
    }

    /// Whether this write is short (BUGGIFY: half the writes while the fault lasts).
    fn short_write_now(&mut self, bytes: &[u8]) -> bool {
        self.now < self.short_writes_until && bytes.len() > 1 && self.rng.chance(0.5)
    }

    /// A write the kernel takes in two or three parts: each piece arrives on its own, up
    /// to 5 ms after the one before. Returns when the last piece arrives.
    fn write_in_pieces(
        &mut self,
        at: Instant,
        bytes: Vec<u8>,
        event: impl Fn(Vec<u8>, bool) -> SimEvent,
    ) -> Instant {
        let len = bytes.len() as u64;
        let mut cuts: Vec<u64> = (0..self.rng.range(1, 2))
            .map(|_| self.rng.range(1, len - 1))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        cuts.push(len);
        self.out.short_writes += 1;
        let mut t = at;
        let mut start = 0;
        for cut in cuts {
            let last = cut == len;
            self.schedule_at(
                t,
                event(bytes[start as usize..cut as usize].to_vec(), !last),
            );
            if !last {
                t = t + Duration::from_micros(self.rng.range(0, 5000));
            }
            start = cut;
        }
        t
    }

    /// The process ends (crash, kill, or its own exit).
    pub(crate) fn process_died(&mut self, worker: WorkerId, status: ExitStatus) {
        let lat = self.latency();
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.alive {
            return;
        }
        p.alive = false;
        p.accepting = false;
        if p.prepared_arrives > self.now {
            self.out
                .coverage
                .insert(labels::DIED_WITH_PREPARED_IN_FLIGHT);
        }
        if p.ready_arrives > self.now {
            self.out.coverage.insert(labels::DIED_WITH_READY_IN_FLIGHT);
        }
        let cause = p.cause;
        let conns: Vec<(u64, ConnKind)> = core::mem::take(&mut p.serving).into_iter().collect();
        p.uploads.clear();
        let lost_logs = p.log_backlog.len() as u64;
        p.log_backlog.clear();
        let eof_at = (self.now + lat).max(p.up_clock);
        p.up_clock = eof_at;
        self.out.log.lost_with_worker += lost_logs;
        for (_, kind) in conns {
            match (kind, cause) {
                (ConnKind::Get, Some(_)) => self.out.requests.failed_fault += 1,
                (ConnKind::Get, None) => self.out.requests.failed_forced += 1,
                (ConnKind::Upload { .. }, Some(_)) => self.out.uploads.failed_fault += 1,
                (ConnKind::Upload { .. }, None) => self.out.uploads.failed_forced += 1,
            }
            if let Some(cause) = cause {
                *self.out.failed_by_cause.entry(cause).or_default() += 1;
            }
            if let ConnKind::Upload {
                target, arrived_ms, ..
            } = kind
            {
                self.out.upload_log.push(UploadRecord {
                    target,
                    started_ms: arrived_ms,
                    ended_ms: self.now.as_nanos() / 1_000_000,
                    end: UploadEnd::Lost,
                });
            }
        }
        for (&target, _) in self.holders.iter().filter(|(_, (w, _))| *w == worker) {
            self.dead_holders.push((worker, target, false));
        }
        self.holders.retain(|_, (w, _)| *w != worker);
        self.out.last_process_exit_ms = self.now.as_nanos() / 1_000_000;
        let code = match status {
            ExitStatus::Code(c) => c as u64,
            ExitStatus::Signal(s) => 1000 + s as u64,
        };
        self.trace
            .record(&[self.now.as_nanos(), 100, worker.0, code], || {
                format!("{} {worker} died: {status}", self.now)
            });
        if self.parent_alive {
            self.schedule_at(eof_at, SimEvent::ToParentEof { worker });
            let reap = eof_at + Duration::from_micros(self.rng.range(50, 2000));
            self.schedule_at(reap, SimEvent::Reaped { worker, status });
        }
        self.dispatch();
    }

    fn live_count(&self) -> usize {
        self.procs.values().filter(|p| p.alive).count()
    }

    fn pick_live(&mut self, pick: u64, serving_only: bool) -> Option<WorkerId> {
        let live: Vec<WorkerId> = self
            .procs
            .values()
            .filter(|p| p.alive && !p.paused && (!serving_only || p.life.accepting()))
            .map(|p| p.id)
            .collect();
        if live.is_empty() {
            return None;
        }
        Some(live[(pick % live.len() as u64) as usize])
    }

    /// A planned fault took effect on `worker` (`None`: on the parent).
    fn injected(&mut self, kind: FaultKind, worker: Option<WorkerId>) {
        let targets = worker.map_or_else(Vec::new, |w| {
            self.holders
                .iter()
                .filter(|(_, (h, _))| *h == w)
                .map(|(t, _)| *t)
                .collect()
        });
        self.out.injected.push(Injected {
            at_ms: self.now.as_nanos() / 1_000_000,
            kind,
            worker: worker.map(|w| w.0),
            targets,
        });
        if let Some(p) = worker.and_then(|w| self.procs.get_mut(&w)) {
            p.misbehaved(kind);
        }
    }

    fn fault(&mut self, index: usize) {
        let fault = self.spec.faults[index].1.clone();
        if let Fault::ShortWrites(d)
        | Fault::AcceptFails { duration: d, .. }
        | Fault::ClockJump(d)
        | Fault::DiskFull(d)
        | Fault::RenameFails(d) = fault
        {
            let from = self.now.as_nanos() / 1_000_000;
            let until = (self.now + d).as_nanos() / 1_000_000;
            self.out.fault_windows.push((fault.kind(), from, until));
        }
        match fault {
            Fault::CrashWorker { pick } => {
                if let Some(w) = self.pick_live(pick, false) {
                    self.out.crash_faults += 1;
                    self.injected(FaultKind::CrashWorker, Some(w));
                    let committed = self.out.generations_committed.last().copied();
                    if let Some(p) = self.procs.get_mut(&w) {
                        self.crashed_slots.push((p.generation, p.slot));
                        if committed.is_some_and(|g| p.generation > g) {
                            self.out.coverage.insert(labels::CRASH_HIT_RELOAD_CANDIDATE);
                        }
                    }
                    self.process_died(w, ExitStatus::Signal(9));
                }
            }
            Fault::CrashLeaseHolder => {
                let holder = self
                    .last_holder
                    .filter(|w| self.procs.get(w).is_some_and(|p| p.alive));
                if let Some(w) = holder {
                    self.out.crash_faults += 1;
                    self.injected(FaultKind::CrashLeaseHolder, Some(w));
                    self.process_died(w, ExitStatus::Signal(9));
                    // Its leases, once the broker took them back, are the kind's goal.
                    for held in self.dead_holders.iter_mut().filter(|h| h.0 == w) {
                        held.2 = true;
                    }
                }
            }
            Fault::HangWorker { pick } => {
                if let Some(w) = self.pick_live(pick, true) {
                    self.out.hangs_injected += 1;
                    let at_ms = self.now.as_nanos() / 1_000_000;
                    self.out.hangs.push((w.0, at_ms));
                    self.injected(FaultKind::HangWorker, Some(w));
                    if let Some(p) = self.procs.get_mut(&w) {
                        p.paused = true;
                    }
                }
            }
            Fault::MalformedFrame { pick } => {
                if let Some(w) = self.pick_live(pick, true) {
                    self.injected(FaultKind::MalformedFrame, Some(w));
                    self.send_up(w, vec![0, 0, 0, 3, 0xee, 0xee, 0xee]);
                }
            }
            Fault::CrashParent => {
                if self.parent_alive {
                    self.parent_alive = false;
                    self.halt_pending = true;
                    self.out.parent_crashed = true;
                    self.injected(FaultKind::CrashParent, None);
                }
            }
            Fault::StallParent(duration) => {
                if self.parent_alive && self.parent_stalled_until.is_none() {
                    self.injected(FaultKind::StallParent, None);
                    let until = self.now + duration;
                    self.parent_stalled_until = Some(until);
                    self.stalled_since = self.now;
                    self.schedule_at(until, SimEvent::ParentResumes);
                }
            }
            Fault::ControlWriteFails { pick } => {
                if let Some(w) = self.pick_live(pick, false)
                    && let Some(p) = self.procs.get_mut(&w)
                {
                    p.write_fails = true;
                }
            }
            Fault::ShortWrites(duration) => {
                self.short_writes_until = self.short_writes_until.max(self.now + duration);
            }
            Fault::AcceptFails { pick, duration } => {
                let targets: Vec<WorkerId> = match pick {
                    Some(pick) => self.pick_live(pick, false).into_iter().collect(),
                    None => self
                        .procs
                        .values()
                        .filter(|p| p.alive)
                        .map(|p| p.id)
                        .collect(),
                };
                let until = self.now + duration;
                for worker in targets {
                    if let Some(p) = self.procs.get_mut(&worker) {
                        p.accept_fails_until = p.accept_fails_until.max(until);
                        self.schedule_at(until, SimEvent::AcceptRecovers { worker });
                    }
                }
            }
            Fault::ClockJump(duration) => {
                if self.parent_alive {
                    self.out
                        .clock_jumps
                        .push((self.now.as_nanos() / 1_000_000, duration.as_millis() as u64));
                    let timeout = self.spec.config.recovery.heartbeat_timeout;
                    if duration.as_secs_f64() > timeout {
                        self.unnoticed_jump = true;
                    }
                    // Everything due meanwhile happens at the resume, in the order it
                    // was due: the queue keeps its order, the clock moves on.
                    self.now = self.now + duration;
                }
            }
            Fault::DiskFull(duration) => {
                self.disk_full_until = self.disk_full_until.max(self.now + duration);
            }
            Fault::RenameFails(duration) => {
                self.rename_fails_until = self.rename_fails_until.max(self.now + duration);
            }
        }
    }

    /// Whether `event` is something only the parent process acts on (so it waits while
    /// the parent is stalled).
    fn for_the_parent(event: &SimEvent) -> bool {
        matches!(
            event,
            SimEvent::ToParent { .. }
                | SimEvent::ToParentEof { .. }
                | SimEvent::Reaped { .. }
                | SimEvent::Command(_)
                | SimEvent::Stop
                | SimEvent::Liveness
                | SimEvent::LogWriterDone { .. }
        )
    }

    /// The stalled parent runs again: what reached it meanwhile sits in its channels,
    /// unread, as in a real socket buffer. Its deadlines have passed too; the driver loop
    /// must read the waiting input before it judges them (`driver::run`), which is what
    /// this models rather than doing it for the loop.
    fn parent_resumes(&mut self) {
        self.parent_stalled_until = None;
        self.out.coverage.insert(labels::STALLED_PARENT_RESUMED);
        let stalled = self.now - self.stalled_since;
        let timeout = Duration::from_secs_f64(
            self.spec
                .config
                .recovery
                .heartbeat_timeout
                .clamp(0.0, 1.0e6),
        );
        if stalled > timeout
            && self
                .held
                .iter()
                .any(|e| matches!(e, SimEvent::ToParent { .. }))
        {
            self.out.coverage.insert(labels::RESUMED_WITH_OVERDUE_BEATS);
        }
        for event in std::mem::take(&mut self.held) {
            match event {
                // These wake the driver themselves, after what waited in the channels.
                SimEvent::Liveness | SimEvent::LogWriterDone { .. } => {
                    self.schedule_at(self.now, event)
                }
                other => self.unread.push(other),
            }
        }
    }

    /// Reads what waited in the channels of a parent that was stalled.
    fn read_unread(&mut self) -> Option<Wakeup> {
        let mut wakeup = None;
        for event in std::mem::take(&mut self.unread) {
            wakeup = wakeup.or(self.step(event));
        }
        wakeup
    }

    /// An operator command reaches the parent. A status request is answered after the
    /// step it wakes the driver for, as the real control socket's is.
    fn command(&mut self, index: usize) -> Option<Wakeup> {
        let cmd = match &self.spec.commands[index].1 {
            SimCommand::Status => {
                self.status_asked.push(self.now);
                return Some(Wakeup::Timeout(self.now));
            }
            SimCommand::Stop => Command::Stop,
            SimCommand::Recycle => Command::Recycle,
            SimCommand::Reload(raw) => Command::Reload {
                id: ReloadId(index as u64),
                config: raw.clone(),
            },
        };
        self.inbox.push_back(Event::Command(cmd));
        None
    }

    /// Process one simulation event. Returns a wakeup for the parent when the event is
    /// the parent's own.
    fn step(&mut self, event: SimEvent) -> Option<Wakeup> {
        self.out.events += 1;
        let (code, arg) = event.code();
        let now = self.now;
        self.trace
            .record(&[now.as_nanos(), code, arg], || format!("{now} {event:?}"));
        if self.parent_stalled_until.is_some() && Self::for_the_parent(&event) {
            self.held.push(event);
            return None;
        }
        match event {
            SimEvent::ToParent {
                worker,
                bytes,
                piece,
            } => {
                let mut split = self.pieces_up.remove(&worker);
                if piece {
                    self.pieces_up.insert(worker);
                }
                let dec = self
                    .decoders
                    .entry(worker)
                    .or_insert_with(|| FrameDecoder::new(MAX_FRAME_DEFAULT));
                dec.push(&bytes);
                loop {
                    match dec.next_worker_message() {
                        Ok(Some(message)) => {
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
            }
            SimEvent::ToParentEof { worker } => {
                self.inbox.push_back(Event::ChannelClosed { worker })
            }
            SimEvent::Reaped { worker, status } => {
                self.decoders.remove(&worker);
                if self.write_failed.remove(&worker) {
                    self.out.coverage.insert(labels::CONTROL_WRITE_FAILED_ENDED);
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
                return Some(Wakeup::LogWritten(self.now));
            }
            SimEvent::Liveness => {
                self.snapshot_due = true;
                return Some(Wakeup::Timeout(self.now));
            }
            SimEvent::Stop => {
                if self.parent_alive {
                    self.inbox.push_back(Event::Command(Command::Stop));
                }
            }
            SimEvent::ParentResumes => self.parent_resumes(),
            SimEvent::AcceptRecovers { .. } => self.dispatch(),
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
        while let Some(Reverse(s)) = self.queue.pop() {
            if s.at > end {
                break;
            }
            if !self.procs.values().any(|p| p.alive) {
                break;
            }
            self.now = s.at;
            match s.event {
                SimEvent::ClientArrival | SimEvent::UploadArrival => {
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
        self.out.torn_files = self
            .fs
            .files
            .values()
            .filter(|(writer, bytes)| {
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

impl ParentIo for SimWorld {
    fn wait(&mut self, deadline: Option<Instant>) -> Wakeup {
        // A machine whose deadline stays in the past after being handled would spin the
        // driver forever at one instant; catch that as a stall, not a hang.
        if self.now == self.last_wait_at {
            self.spins += 1;
            if self.spins > 100_000 {
                self.out.stalled =
                    Some(format!("the parent spins without progress at {}", self.now));
                return Wakeup::HostFailed;
            }
        } else {
            self.last_wait_at = self.now;
            self.spins = 0;
        }
        loop {
            if self.halt_pending {
                self.halt_pending = false;
                return Wakeup::Crashed;
            }
            if let Some(event) = self.inbox.pop_front() {
                return Wakeup::Event(self.now, event);
            }
            if !self.unread.is_empty() {
                // A parent that has just resumed: its passed deadlines are reported at
                // once, as a real poll reports them, with the input still unread.
                if deadline.is_some_and(|d| d <= self.now) {
                    return Wakeup::Timeout(self.now);
                }
                if let Some(wakeup) = self.read_unread() {
                    return wakeup;
                }
                continue;
            }
            let next = self.queue.peek().map(|Reverse(s)| s.at);
            let end = ms(self.spec.end_by);
            // A stalled parent's timers cannot fire before it runs again.
            let deadline = match (deadline, self.parent_stalled_until) {
                (Some(d), Some(until)) => Some(d.max(until)),
                (d, _) => d,
            };
            match (next, deadline) {
                (_, Some(d)) if next.is_none_or(|n| d < n) => {
                    if d > end {
                        self.out.stalled =
                            Some(format!("still running at the {:?} bound", self.spec.end_by));
                        return Wakeup::HostFailed;
                    }
                    self.now = self.now.max(d);
                    return Wakeup::Timeout(self.now);
                }
                (None, None) => {
                    self.out.stalled = Some("nothing left to happen and no deadline".into());
                    return Wakeup::HostFailed;
                }
                _ => {}
            }
            let Some(Reverse(s)) = self.queue.pop() else {
                continue;
            };
            if s.at > end {
                self.out.stalled =
                    Some(format!("still running at the {:?} bound", self.spec.end_by));
                return Wakeup::HostFailed;
            }
            self.now = self.now.max(s.at);
            if let Some(wakeup) = self.step(s.event) {
                return wakeup;
            }
        }
    }

    fn arrived(&mut self) -> Vec<Wakeup> {
        // Besides same-instant events, what waited in a resumed parent's channels.
        let now = self.now;
        let woke = self.read_unread();
        let mut arrived: Vec<Wakeup> = self
            .inbox
            .drain(..)
            .map(|e| Wakeup::Event(now, e))
            .collect();
        arrived.extend(woke);
        arrived
    }

    fn perform(&mut self, now: Instant, action: ParentAction) {
        let (code, arg) = action_code(&action);
        self.trace.record(&[now.as_nanos(), 200 + code, arg], || {
            format!("{now} parent: {action:?}")
        });
        let action = match action {
            ParentAction::Singleton(action) => return self.singleton(action),
            ParentAction::Supervisor(action) => action,
        };
        match action {
            Action::Spawn {
                worker,
                slot,
                generation,
                config,
            } => {
                let info = SpawnInfo {
                    index: self.spawn_index,
                    slot,
                    generation,
                    now: Duration::from_nanos(now.as_nanos()),
                };
                self.spawn_index += 1;
                self.out.spawns = self.spawn_index;
                self.out.spawn_times_ms.push(now.as_nanos() / 1_000_000);
                let behavior = (self.spec.behavior)(&info, &mut self.rng);
                if let Some(kind) = behavior.kind() {
                    self.out.misbehaving.push((info.index, kind));
                }
                let key = (generation.0, slot.0 as u64);
                let retried = self.spawn_failed_slots.contains(&key);
                if retried {
                    self.spawn_failed_slots.retain(|k| *k != key);
                    self.out.coverage.insert(labels::SPAWN_FAILURE_HANDLED);
                }
                if let Behavior::SpawnFails(error) = behavior {
                    // fork failed: no process, no pid; the parent hears it at once.
                    self.out.spawn_failures += 1;
                    self.spawn_failed_slots.push(key);
                    self.inbox.push_back(Event::SpawnFailed { worker, error });
                    return;
                }
                if retried {
                    self.out.coverage.insert(labels::SPAWN_RETRIED);
                }
                if let Some(i) = self.crashed_slots.iter().position(|k| *k == key) {
                    self.crashed_slots.swap_remove(i);
                    self.out.coverage.insert(labels::CRASHED_WORKER_REPLACED);
                }
                if let Some(i) = self.malformed_slots.iter().position(|k| *k == key) {
                    self.malformed_slots.swap_remove(i);
                    self.out.coverage.insert(labels::MALFORMED_FRAME_REPLACED);
                }
                self.next_pid += 1;
                let pid = self.next_pid;
                let mut proc = Proc::new(worker, pid, behavior, &config);
                proc.slot = key.1;
                proc.generation = key.0;
                self.procs.insert(worker, proc);
                self.inbox.push_back(Event::Spawned { worker, pid });
                let live = self.live_count();
                self.out.max_live_processes = self.out.max_live_processes.max(live);
                if live > self.proc_bound {
                    self.violation(format!(
                        "{live} live worker processes exceed the bound {}",
                        self.proc_bound
                    ));
                }
            }
            Action::Send { worker, message } => {
                match &message {
                    ParentMessage::Drain { .. } => self.ending(worker),
                    &ParentMessage::Hello {
                        generation,
                        heartbeat_interval_ms,
                        ..
                    } => self.hello(generation.0, heartbeat_interval_ms),
                    _ => {}
                }
                self.send_down(worker, &message);
            }
            Action::Terminate { worker } => {
                self.ending(worker);
                self.out.terms_sent += 1;
                if self.spec.platform == Platform::Windows {
                    self.violation(format!("TERM sent to {worker} under Windows semantics"));
                }
                self.worker_terminate(worker);
            }
            Action::Kill { worker } => {
                self.ending(worker);
                if let Some(p) = self.procs.get(&worker).filter(|p| p.alive) {
                    if p.wedged {
                        self.out.coverage.insert(labels::WEDGED_DRAIN_KILLED);
                    }
                    if p.paused {
                        self.out.coverage.insert(labels::HUNG_WORKER_KILLED);
                        let hung_at = self.out.hangs.iter().find(|h| h.0 == worker.0);
                        if hung_at.is_some_and(|&(_, at)| {
                            self.out.clock_jumps.iter().any(|&(jump, _)| jump >= at)
                        }) {
                            self.out
                                .coverage
                                .insert(labels::HUNG_ACROSS_CLOCK_JUMP_KILLED);
                        }
                    }
                }
                self.process_died(worker, ExitStatus::Signal(9));
            }
            Action::CloseListeners => {
                self.listener_open = false;
                self.out.requests.refused += self.backlog.len() as u64;
                self.backlog.clear();
            }
            Action::WorkerGone { worker } => {
                self.fs.remove_temps_of(worker);
                let lat = self.latency();
                if let Some(p) = self.procs.get_mut(&worker) {
                    p.parent_closed = true;
                    if p.alive {
                        let at = (self.now + lat).max(p.down_clock);
                        self.schedule_at(at, SimEvent::ToWorkerEof { worker });
                    }
                }
            }
            Action::GenerationCommitted { generation, .. } => {
                if !self.out.generations_committed.is_empty() {
                    self.out.coverage.insert(labels::RELOAD_COMMITTED);
                }
                self.out.generations_committed.push(generation.0);
            }
            Action::ServiceFailed { reason, message } => {
                self.spawn_failure_given_up(true);
                self.out.failure_at_ms = Some(now.as_nanos() / 1_000_000);
                if reason == FailureReason::RestartLimit
                    && !self.out.generations_committed.is_empty()
                {
                    self.out
                        .coverage
                        .insert(labels::LIMIT_FAILED_COMMITTED_SERVICE);
                }
                self.out.failure = Some(reason);
                self.out.failure_message = Some(message);
            }
            Action::ReloadRejected { message, .. } => {
                self.spawn_failure_given_up(false);
                self.out.coverage.insert(labels::RELOAD_REJECTED);
                self.out.reload_rejections.push(message);
            }
            Action::RecyclingSuspended { .. } => {
                self.spawn_failure_given_up(false);
                self.out.recycling_suspended = true;
            }
            Action::Exit { .. } => {
                self.out.exit_at_ms = Some(now.as_nanos() / 1_000_000);
                if self.live_count() > 0 {
                    self.violation(format!(
                        "parent exits with {} live workers",
                        self.live_count()
                    ));
                }
            }
        }
    }

    fn log_writer_idle(&self) -> bool {
        !self.log_busy
    }

    fn write_log(&mut self, _now: Instant, batch: Vec<String>) {
        self.log_busy = true;
        let secs = batch.len() as f64 / self.spec.workload.log_write_rate;
        let records = batch.len();
        self.schedule_in(
            Duration::from_secs_f64(secs),
            SimEvent::LogWriterDone { records },
        );
    }

    fn observe(&mut self, now: Instant, parent: &Parent) {
        if let Err(e) = parent.check_invariants() {
            self.violation(format!("invariant: {e}"));
        }
        let sup = parent.supervisor();
        let broker = parent.broker();
        if !self.status_asked.is_empty() {
            let status = sup.status(now);
            for asked in std::mem::take(&mut self.status_asked) {
                self.out.status_answers.push(StatusAnswer {
                    asked_ms: asked.as_nanos() / 1_000_000,
                    answered_ms: now.as_nanos() / 1_000_000,
                    ready_workers: sup.ready_workers(),
                    restarts: status.restarts,
                });
            }
        }
        let not_running = sup.time_not_running();
        if not_running > self.not_running_seen {
            self.not_running_seen = not_running;
            if core::mem::take(&mut self.unnoticed_jump) {
                self.out.coverage.insert(labels::CLOCK_JUMP_NOTICED);
            }
        }
        self.out.log.max_queue = self.out.log.max_queue.max(broker.log().len());
        // A dead holder's lease the broker no longer lists as its: revoked.
        if !self.dead_holders.is_empty() {
            let before = self.dead_holders.len();
            let mut revoked = Vec::new();
            self.dead_holders.retain(|&(worker, target, as_holder)| {
                let held = broker
                    .lease_holder(&key(target))
                    .is_some_and(|o| o.worker == worker);
                if !held {
                    revoked.push(as_holder);
                }
                held
            });
            if self.dead_holders.len() < before {
                self.out.coverage.insert(labels::LEASE_REVOKED_ON_DEATH);
            }
            if revoked.contains(&true) {
                self.out.coverage.insert(labels::LEASE_HOLDER_KILLED);
            }
        }
        if broker.log().dropped() > 0 && sup.config().broker().log_policy() == LogPolicy::Drop {
            self.out.coverage.insert(labels::LOG_DROPPED);
            self.out.log.dropped = broker.log().dropped();
        }
        if broker.stats().saturated > 0 {
            self.out.coverage.insert(labels::BROKER_SATURATED);
        }
        match sup.last_failure().map(|f| f.reason) {
            Some(ExitReason::HealthFailure) => {
                self.out.coverage.insert(labels::HANG_KILLED);
            }
            Some(ExitReason::DrainHang) => {
                self.out.coverage.insert(labels::HANG_WHILE_DRAINING_KILLED);
            }
            _ => {}
        }
        // Exits since the last one recorded (several may be reaped in one step).
        let last = self.out.exits.last().map(|e| e.worker);
        let seen = last
            .and_then(|w| sup.recent_exits().position(|e| e.worker.0 == w))
            .map_or(0, |i| i + 1);
        for exit in sup.recent_exits().skip(seen) {
            self.out.exits.push(WorkerExit {
                worker: exit.worker.0,
                reason: Some(exit.reason),
                at_ms: exit.at.as_nanos() / 1_000_000,
            });
            // A worker a malformed frame hit, ended for it: its slot's next spawn
            // replaces it.
            if exit.reason == ExitReason::ProtocolError
                && self
                    .out
                    .injected
                    .iter()
                    .any(|i| i.kind == FaultKind::MalformedFrame && i.worker == Some(exit.worker.0))
            {
                self.malformed_slots
                    .push((exit.generation.0, u64::from(exit.slot.0)));
            }
        }
        if sup.recycling_suspended().is_some()
            && sup.ready_workers() == sup.config().workers() as usize
        {
            self.out.coverage.insert(labels::RECYCLE_ABORTED);
        }
        if self.snapshot_due {
            self.snapshot_due = false;
            self.out.liveness = Some(sup.status(now));
        }
        self.out.leases_at_exit = broker.leases().count() + broker.reservation_count();
    }
}

/// The trace's code for an action (stable: regression entries pin trace hashes).
fn action_code(action: &ParentAction) -> (u64, u64) {
    let action = match action {
        ParentAction::Singleton(_) => return (7, 0),
        ParentAction::Supervisor(action) => action,
    };
    match action {
        Action::Spawn { worker, .. } => (1, worker.0),
        Action::Send { worker, .. } => (2, worker.0),
        Action::Terminate { worker } => (3, worker.0),
        Action::Kill { worker } => (4, worker.0),
        Action::CloseListeners => (5, 0),
        Action::WorkerGone { worker } => (6, worker.0),
        Action::GenerationCommitted { generation, .. } => (8, generation.0),
        Action::ServiceFailed { .. } => (9, 0),
        Action::ReloadRejected { .. } => (10, 0),
        Action::RecyclingSuspended { .. } => (11, 0),
        Action::Exit { code } => (12, *code as u64),
    }
}

impl SimWorld {
    /// The singletons' actions: counted, and a switch backwards is a violation.
    fn singleton(&mut self, action: SingletonAction) {
        match action {
            SingletonAction::Start { .. } => self.out.singleton_starts += 1,
            SingletonAction::Switch { from, to, .. } => {
                if to <= from {
                    self.violation(format!("singleton switched backwards {from} → {to}"));
                }
                self.out.singleton_switches += 1;
            }
            SingletonAction::Stop { .. } => self.out.singleton_stops += 1,
        }
    }

    /// The supervisor gave up on what a refused spawn was for (the service, a reload, a
    /// recycle).
    fn spawn_failure_given_up(&mut self, service_failed: bool) {
        if !self.spawn_failed_slots.is_empty() {
            self.spawn_failed_slots.clear();
            self.out.coverage.insert(labels::SPAWN_FAILURE_HANDLED);
            if service_failed {
                self.out
                    .coverage
                    .insert(labels::SPAWN_FAILURES_FAILED_SERVICE);
            }
        }
    }

    /// The parent drains, terminates or kills `worker`: note the races that reach.
    fn ending(&mut self, worker: WorkerId) {
        let Some(p) = self.procs.get(&worker).filter(|p| p.alive) else {
            return;
        };
        if p.ready_arrives > self.now {
            self.out.coverage.insert(labels::ENDED_WITH_READY_IN_FLIGHT);
        }
        if p.behavior == Behavior::HangAtBoot {
            self.out.coverage.insert(labels::HUNG_BOOT_ENDED);
        }
    }

    /// A HELLO for `generation` carries `interval_ms`: note a later generation whose
    /// timings differ from the one before it.
    fn hello(&mut self, generation: u64, interval_ms: u64) {
        if self.hello_intervals.iter().any(|(g, _)| *g == generation) {
            return;
        }
        if self
            .hello_intervals
            .iter()
            .any(|&(g, ms)| g + 1 == generation && ms != interval_ms)
        {
            self.out.coverage.insert(labels::CANDIDATE_OWN_TIMINGS);
        }
        self.hello_intervals.push((generation, interval_ms));
    }

    /// The seed for the parent's ChaCha generator, drawn from the run's stream.
    pub fn rng_seed(&mut self) -> [u8; 32] {
        self.rng.seed32()
    }
}
