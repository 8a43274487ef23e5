//! The simulated host: virtual clock, event queue, processes, channels, listener,
//! clients, file system and log writer, all drawn from one seeded stream.

use core::time::Duration;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use servery_core::config::LogPolicy;
use servery_core::driver::{ParentIo, Wakeup};
use servery_core::parent::{Parent, ParentAction};
use servery_core::proto::{FrameDecoder, MAX_FRAME_DEFAULT, ParentMessage, encode_parent};
use servery_core::singletons::SingletonAction;
use servery_core::supervisor::{Command, Event, ExitReason, ExitStatus, Platform};
use servery_core::{Instant, WorkerId};

use crate::fs::SimFs;
use crate::outcome::Outcome;
use crate::plan::{Fault, SimCommand, SimSpec, SpawnInfo};
use crate::process::Proc;
use crate::rng::SimRng;
use crate::trace::Trace;

/// Something that happens at a point of virtual time.
#[derive(Debug, Clone)]
pub(crate) enum SimEvent {
    /// Bytes a worker wrote reach the parent.
    ToParent {
        worker: WorkerId,
        bytes: Vec<u8>,
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
    Upload { target: u8, writer: u64 },
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
    held: Vec<SimEvent>,
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
            held: Vec::new(),
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
        if w.spec.workload.upload_rate > 0.0 {
            let d = w.rng.exp(1.0 / w.spec.workload.upload_rate);
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

    /// Deliver bytes a worker wrote to the parent, in channel order.
    pub(crate) fn send_up(&mut self, worker: WorkerId, bytes: Vec<u8>) {
        if !self.parent_alive {
            return;
        }
        let lat = self.latency();
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        let at = (self.now + lat).max(p.up_clock);
        p.up_clock = at;
        self.schedule_at(at, SimEvent::ToParent { worker, bytes });
    }

    fn send_down(&mut self, worker: WorkerId, message: &ParentMessage) {
        let lat = self.latency();
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        if !p.alive || p.parent_closed {
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
        self.schedule_at(at, SimEvent::ToWorker { worker, bytes });
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
        let faulty = p.faulty;
        let conns: Vec<(u64, ConnKind)> = core::mem::take(&mut p.serving).into_iter().collect();
        p.uploads.clear();
        let lost_logs = p.log_backlog.len() as u64;
        p.log_backlog.clear();
        let eof_at = (self.now + lat).max(p.up_clock);
        p.up_clock = eof_at;
        self.out.log.lost_with_worker += lost_logs;
        for (_, kind) in conns {
            match (kind, faulty) {
                (ConnKind::Get, true) => self.out.requests.failed_fault += 1,
                (ConnKind::Get, false) => self.out.requests.failed_forced += 1,
                (ConnKind::Upload { .. }, true) => self.out.uploads.failed_fault += 1,
                (ConnKind::Upload { .. }, false) => self.out.uploads.failed_forced += 1,
            }
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

    fn fault(&mut self, index: usize) {
        let fault = self.spec.faults[index].1.clone();
        match fault {
            Fault::CrashWorker { pick } => {
                if let Some(w) = self.pick_live(pick, false) {
                    self.out.crash_faults += 1;
                    if let Some(p) = self.procs.get_mut(&w) {
                        p.faulty = true;
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
                    self.out.coverage.insert("lease holder killed");
                    if let Some(p) = self.procs.get_mut(&w) {
                        p.faulty = true;
                    }
                    self.process_died(w, ExitStatus::Signal(9));
                }
            }
            Fault::HangWorker { pick } => {
                if let Some(w) = self.pick_live(pick, true) {
                    self.out.hangs_injected += 1;
                    if let Some(p) = self.procs.get_mut(&w) {
                        p.paused = true;
                        p.faulty = true;
                    }
                }
            }
            Fault::MalformedFrame { pick } => {
                if let Some(w) = self.pick_live(pick, true) {
                    if let Some(p) = self.procs.get_mut(&w) {
                        p.faulty = true;
                    }
                    self.send_up(w, vec![0, 0, 0, 3, 0xee, 0xee, 0xee]);
                }
            }
            Fault::CrashParent => {
                if self.parent_alive {
                    self.parent_alive = false;
                    self.halt_pending = true;
                    self.out.parent_crashed = true;
                }
            }
            Fault::StallParent(duration) => {
                if self.parent_alive && self.parent_stalled_until.is_none() {
                    let until = self.now + duration;
                    self.parent_stalled_until = Some(until);
                    self.schedule_at(until, SimEvent::ParentResumes);
                }
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

    /// The stalled parent runs again: what reached it meanwhile is read before anything
    /// else it does, timers included (the `ParentIo::wait` contract).
    fn parent_resumes(&mut self) {
        self.parent_stalled_until = None;
        for event in std::mem::take(&mut self.held) {
            match event {
                // These wake the driver themselves: after the inbox has been read.
                SimEvent::Liveness | SimEvent::LogWriterDone { .. } => {
                    self.schedule_at(self.now, event)
                }
                other => {
                    let _ = self.step(other);
                }
            }
        }
    }

    fn command(&mut self, index: usize) {
        let cmd = match &self.spec.commands[index].1 {
            SimCommand::Stop => Command::Stop,
            SimCommand::Recycle => Command::Recycle,
            SimCommand::Reload(raw) => Command::Reload(raw.clone()),
        };
        self.inbox.push_back(Event::Command(cmd));
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
            SimEvent::ToParent { worker, bytes } => {
                let dec = self
                    .decoders
                    .entry(worker)
                    .or_insert_with(|| FrameDecoder::new(MAX_FRAME_DEFAULT));
                dec.push(&bytes);
                loop {
                    match dec.next_worker_message() {
                        Ok(Some(message)) => {
                            self.inbox.push_back(Event::Message { worker, message })
                        }
                        Ok(None) => break,
                        Err(error) => {
                            self.out.coverage.insert("malformed frame replaced worker");
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
                self.inbox.push_back(Event::Exited { worker, status });
            }
            SimEvent::ToWorker { worker, bytes } => self.worker_receive(worker, &bytes),
            SimEvent::ToWorkerEof { worker } => self.worker_eof(worker),
            SimEvent::WorkerTimer { worker, token } => self.worker_timer(worker, token),
            SimEvent::BootDone { worker } => self.worker_boot_done(worker),
            SimEvent::Crash { worker } => {
                if let Some(p) = self.procs.get_mut(&worker) {
                    p.faulty = true;
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
                    self.command(i);
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
        }
        None
    }

    /// After the parent has exited or crashed: let the workers run out their own clocks
    /// (parent death: EOF, drain, exit), then settle the books.
    pub fn finish(mut self, exit: Option<i32>) -> Outcome {
        self.out.exit_code = exit;
        self.out.parent_gone_ms = self.now.as_nanos() / 1_000_000;
        self.parent_alive = false;
        let live: Vec<WorkerId> = self
            .procs
            .values()
            .filter(|p| p.alive)
            .map(|p| p.id)
            .collect();
        for w in live {
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
                return Wakeup::Halt;
            }
        } else {
            self.last_wait_at = self.now;
            self.spins = 0;
        }
        loop {
            if self.halt_pending {
                self.halt_pending = false;
                return Wakeup::Halt;
            }
            if let Some(event) = self.inbox.pop_front() {
                return Wakeup::Event(self.now, event);
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
                        return Wakeup::Halt;
                    }
                    self.now = self.now.max(d);
                    return Wakeup::Timeout(self.now);
                }
                (None, None) => {
                    self.out.stalled = Some("nothing left to happen and no deadline".into());
                    return Wakeup::Halt;
                }
                _ => {}
            }
            let Some(Reverse(s)) = self.queue.pop() else {
                continue;
            };
            if s.at > end {
                self.out.stalled =
                    Some(format!("still running at the {:?} bound", self.spec.end_by));
                return Wakeup::Halt;
            }
            self.now = self.now.max(s.at);
            if let Some(wakeup) = self.step(s.event) {
                return wakeup;
            }
        }
    }

    fn perform(&mut self, now: Instant, action: ParentAction) {
        let (code, arg) = action_code(&action);
        self.trace.record(&[now.as_nanos(), 200 + code, arg], || {
            format!("{now} parent: {action:?}")
        });
        match action {
            ParentAction::Spawn {
                worker,
                slot,
                generation,
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
                self.next_pid += 1;
                let pid = self.next_pid;
                self.procs
                    .insert(worker, Proc::new(worker, pid, behavior, &self.spec));
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
            ParentAction::Send { worker, message } => self.send_down(worker, &message),
            ParentAction::Terminate { worker } => {
                self.out.terms_sent += 1;
                if self.spec.platform == Platform::Windows {
                    self.violation(format!("TERM sent to {worker} under Windows semantics"));
                }
                self.worker_terminate(worker);
            }
            ParentAction::Kill { worker } => {
                if self.procs.get(&worker).is_some_and(|p| p.alive && p.wedged) {
                    self.out.coverage.insert("wedged drain killed");
                }
                self.process_died(worker, ExitStatus::Signal(9));
            }
            ParentAction::CloseListeners => {
                self.listener_open = false;
                self.out.requests.refused += self.backlog.len() as u64;
                self.backlog.clear();
            }
            ParentAction::CleanupWorker { worker } => {
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
            ParentAction::Singleton(action) => match action {
                SingletonAction::Start { .. } => self.out.singleton_starts += 1,
                SingletonAction::Switch { from, to, .. } => {
                    if to <= from {
                        self.violation(format!("singleton switched backwards {from} → {to}"));
                    }
                    self.out.singleton_switches += 1;
                }
                SingletonAction::Stop { .. } => self.out.singleton_stops += 1,
            },
            ParentAction::GenerationCommitted { generation } => {
                self.out.generations_committed.push(generation.0);
            }
            ParentAction::ServiceFailed { reason, message } => {
                self.out.failure = Some(reason);
                self.out.failure_message = Some(message);
            }
            ParentAction::ReloadRejected { message } => self.out.reload_rejections.push(message),
            ParentAction::RecyclingSuspended { .. } => self.out.recycling_suspended = true,
            ParentAction::Exit { .. } => {
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
        self.out.log.max_queue = self.out.log.max_queue.max(broker.log().len());
        if broker.stats().revoked > 0 {
            self.out.coverage.insert("lease revoked on death");
        }
        if broker.log().dropped() > 0 && sup.config().broker().log_policy() == LogPolicy::Drop {
            self.out
                .coverage
                .insert("log queue dropped under the drop policy");
            self.out.log.dropped = broker.log().dropped();
        }
        if broker.stats().saturated > 0 {
            self.out.coverage.insert("broker saturation rejected");
        }
        if sup
            .last_failure()
            .is_some_and(|f| f.reason == ExitReason::HealthFailure)
        {
            self.out.coverage.insert("hang killed");
        }
        if sup.recycling_suspended().is_some()
            && sup.ready_workers() == sup.config().workers() as usize
        {
            self.out
                .coverage
                .insert("recycle aborted kept the old worker");
        }
        if self.snapshot_due {
            self.snapshot_due = false;
            self.out.liveness = Some(sup.status(now));
        }
        self.out.leases_at_exit = broker.leases().count() + broker.reservation_count();
    }
}

fn action_code(action: &ParentAction) -> (u64, u64) {
    match action {
        ParentAction::Spawn { worker, .. } => (1, worker.0),
        ParentAction::Send { worker, .. } => (2, worker.0),
        ParentAction::Terminate { worker } => (3, worker.0),
        ParentAction::Kill { worker } => (4, worker.0),
        ParentAction::CloseListeners => (5, 0),
        ParentAction::CleanupWorker { worker } => (6, worker.0),
        ParentAction::Singleton(_) => (7, 0),
        ParentAction::GenerationCommitted { generation } => (8, generation.0),
        ParentAction::ServiceFailed { .. } => (9, 0),
        ParentAction::ReloadRejected { .. } => (10, 0),
        ParentAction::RecyclingSuspended { .. } => (11, 0),
        ParentAction::Exit { code } => (12, *code as u64),
    }
}

impl SimWorld {
    /// The seed for the parent's ChaCha generator, drawn from the run's stream.
    pub fn rng_seed(&mut self) -> [u8; 32] {
        self.rng.seed32()
    }
}
