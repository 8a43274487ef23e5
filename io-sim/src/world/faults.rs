//! Planned faults as they take effect: which worker a fault picks, what it does, and
//! what a stalled or crashed parent misses meanwhile; operator commands.

use super::*;
use servery_core::RequestId;
use servery_core::control::Request;

impl SimWorld {
    pub(super) fn pick_live(&mut self, pick: u64, serving_only: bool) -> Option<WorkerId> {
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

    /// The plan kills `worker` just before a step of a write it serves (a tree request's,
    /// a chunk's): the step's coverage `label`, one crash fault of `kind`, and `kill -9`.
    pub(crate) fn kill_before_step(
        &mut self,
        worker: WorkerId,
        label: &'static str,
        kind: FaultKind,
    ) {
        self.out.coverage.insert(label);
        self.out.crash_faults += 1;
        self.injected(kind, Some(worker));
        self.process_died(worker, ExitStatus::Signal(9));
    }

    /// A write of `worker` renamed `target` into place and is about to fsync the directory:
    /// if a torn rename is armed, the power goes here. The worker dies, and the rename
    /// survives or not as the seed draws; what the name shows is judged at once (never
    /// part of a file: the flow made its bytes durable before the rename). What the power
    /// loss did when the worker died (`None`: no power loss here).
    pub(crate) fn power_lost(
        &mut self,
        worker: WorkerId,
        target: u8,
    ) -> Option<crate::fs::AfterPowerLoss> {
        if self.torn_renames_armed == 0 {
            return None;
        }
        self.torn_renames_armed -= 1;
        let keep = self.rng.chance(0.5);
        let after = self.fs.power_loss(target, keep);
        match &after {
            Some(crate::fs::AfterPowerLoss::Torn { len, of }) => self.violation(format!(
                "torn-rename rule: the power went between {worker}'s rename into target \
                 {target} and its directory's fsync, and the name kept shows {len} of the \
                 {of} bytes renamed there (renamed before its bytes were made durable)"
            )),
            Some(crate::fs::AfterPowerLoss::Kept) => {
                self.out.torn_renames.kept += 1;
                self.out.coverage.insert(labels::TORN_RENAME_WHOLE);
            }
            Some(crate::fs::AfterPowerLoss::Undone) => {
                self.out.torn_renames.undone += 1;
                self.out.coverage.insert(labels::TORN_RENAME_WHOLE);
            }
            None => {}
        }
        self.out.crash_faults += 1;
        self.injected(FaultKind::TornRename, Some(worker));
        self.process_died(worker, ExitStatus::Signal(9));
        Some(after.unwrap_or(crate::fs::AfterPowerLoss::Kept))
    }

    /// A planned fault took effect on `worker` (`None`: on the parent).
    pub(crate) fn injected(&mut self, kind: FaultKind, worker: Option<WorkerId>) {
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

    pub(super) fn fault(&mut self, index: usize) {
        let fault = self.spec.faults[index].1.clone();
        if let Fault::ShortWrites(d)
        | Fault::AcceptFails { duration: d, .. }
        | Fault::ClockJump(d)
        | Fault::DiskFull(d)
        | Fault::RenameFails(d)
        | Fault::FsyncFails(d)
        | Fault::DirSyncFails(d)
        | Fault::StallParent(d)
        | Fault::PauseWorker { duration: d, .. }
        | Fault::ClockDrift { duration: d, .. } = fault
        {
            let from = self.now.as_nanos() / 1_000_000;
            let until = (self.now + d).as_nanos() / 1_000_000;
            self.out.fault_windows.push((fault.kind(), from, until));
        }
        if let Fault::ChannelDelay { duration, max } = fault {
            // Until the last write it delayed has arrived.
            let from = self.now.as_nanos() / 1_000_000;
            let until = (self.now + duration + max).as_nanos() / 1_000_000;
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
                        self.takers.changed();
                    }
                }
            }
            Fault::PauseWorker { pick, duration } => {
                if let Some(w) = self.pick_live(pick, true) {
                    self.pause(w, duration);
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
                    self.oracle.parent_gap(self.now, until);
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
                        self.takers.changed();
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
                    self.oracle.parent_gap(self.now, self.now + duration);
                    self.now = self.now + duration;
                }
            }
            Fault::DiskFull(duration) => {
                self.disk_full_until = self.disk_full_until.max(self.now + duration);
            }
            Fault::RenameFails(duration) => {
                self.rename_fails_until = self.rename_fails_until.max(self.now + duration);
            }
            Fault::CrashDavGranter => {
                if let Some((w, _)) = self.dav_crash_granter() {
                    self.out.crash_faults += 1;
                    self.injected(FaultKind::CrashDavGranter, Some(w));
                    self.process_died(w, ExitStatus::Signal(9));
                }
            }
            Fault::PortBusy { port } => {
                self.injected(FaultKind::PortBusy, None);
                self.listeners.busy.push(port);
            }
            Fault::FsyncFails(d) => {
                self.injected(FaultKind::FsyncFails, None);
                self.fsync_fails_until = self.fsync_fails_until.max(self.now + d);
            }
            Fault::DirSyncFails(d) => {
                self.injected(FaultKind::DirSyncFails, None);
                self.dir_sync_fails_until = self.dir_sync_fails_until.max(self.now + d);
            }
            // Injected (with its worker) where a write meets it (`power_lost`).
            Fault::TornRename => self.torn_renames_armed += 1,
            Fault::ChannelDelay { duration, max } => {
                self.injected(FaultKind::ChannelDelay, None);
                self.delays.start(self.now, duration, max);
            }
            Fault::ClockDrift {
                pick,
                rate_ppm,
                duration,
            } => {
                if let Some(w) = self.pick_live(pick, false) {
                    self.drift(w, rate_ppm, duration);
                }
            }
        }
    }

    /// Whether `event` is something only the parent process acts on (so it waits while
    /// the parent is stalled).
    pub(super) fn for_the_parent(event: &SimEvent) -> bool {
        matches!(
            event,
            SimEvent::ToParent { .. }
                | SimEvent::ToParentEof { .. }
                | SimEvent::Reaped { .. }
                | SimEvent::Command(_)
                | SimEvent::Stop
                | SimEvent::Liveness
                | SimEvent::LogWriterDone { .. }
                | SimEvent::ProbeAnswered { .. }
        ) || matches!(event, SimEvent::Cert(step) if step.for_the_parent())
    }

    /// The stalled parent runs again: what reached it meanwhile sits in its channels,
    /// unread, as in a real socket buffer. Its deadlines have passed too; the driver loop
    /// must read the waiting input before it judges them (`driver::run`), which is what
    /// this models rather than doing it for the loop.
    pub(super) fn parent_resumes(&mut self) {
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
    pub(super) fn read_unread(&mut self) -> Option<Wakeup> {
        let mut wakeup = None;
        for event in std::mem::take(&mut self.unread) {
            wakeup = wakeup.or(self.step(event));
        }
        wakeup.map(|w| w.at(self.now))
    }

    /// An operator command reaches the parent. A status request is answered after the
    /// step it wakes the driver for, as the real control socket's is.
    pub(super) fn command(&mut self, index: usize) -> Option<Wake> {
        let cmd = match &self.spec.commands[index].1 {
            SimCommand::Status => {
                self.status_asked.push(self.now);
                return Some(Wake::Timer);
            }
            SimCommand::Stop => Command::Stop,
            // The control socket's requests: decided and answered by the core, the
            // driver relays (decision 0071).
            SimCommand::Recycle => return self.request(index, Request::Recycle),
            SimCommand::CtlStop => return self.request(index, Request::Stop),
            SimCommand::Reload(raw) => {
                let request = Request::Reload {
                    reload: ReloadId(index as u64),
                    config: Ok(raw.clone()),
                };
                return self.request(index, request);
            }
            // As the real parent does: the configuration as loaded, the count core's.
            SimCommand::Resize(by) => Command::Resize {
                id: ReloadId(index as u64),
                config: Box::new(self.spec.config.clone()),
                by: *by,
            },
        };
        self.inbox.push_back(Event::Command(cmd));
        None
    }

    /// A control-socket request reaches the parent, named by its place in the plan.
    fn request(&mut self, index: usize, request: Request) -> Option<Wake> {
        let id = RequestId(index as u64);
        self.inbox.push_back(Event::Control { id, request });
        None
    }
}
