//! The simulated host as the parent's driver loop sees it: `ParentIo` (waiting, reading
//! what arrived, carrying out actions, the log writer, the per-step checks).

use super::*;

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
        let end = ms(self.spec.end_by);
        loop {
            if self.halt_pending {
                self.halt_pending = false;
                return Wakeup::Crashed;
            }
            if let Some(look) = self.one_look() {
                return look;
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
            let next = self.queue.peek_at();
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
            // The next event is due at `next`: taken without its time, which `next`
            // already holds (an event moved out with its time was copied twice over,
            // in pieces the processor could not forward from store to load).
            let (Some(at), Some(event)) = (next, self.queue.pop_event()) else {
                continue;
            };
            if at > end {
                self.out.stalled =
                    Some(format!("still running at the {:?} bound", self.spec.end_by));
                return Wakeup::HostFailed;
            }
            self.now = self.now.max(at);
            if let Some(wake) = self.step(event) {
                return wake.at(self.now);
            }
            self.gather_arrivals();
        }
    }

    fn arrived(&mut self) -> Vec<Wakeup> {
        // Besides same-instant events, what waited in a resumed parent's channels.
        let woke = self.read_unread();
        let mut arrived: Vec<Wakeup> = self.one_look().into_iter().collect();
        arrived.extend(woke);
        arrived
    }

    fn perform(&mut self, now: Instant, action: ParentAction) {
        match &action {
            ParentAction::Supervisor(Action::ReloadStarted { reload, generation }) => {
                // An announcement for a service manager, and nothing else happens: it is
                // left out of the trace, whose hashes pin what the machines do. The oracle
                // learns which generation the reload brings up.
                self.oracle.reload_started(reload.0, generation.0);
                return;
            }
            // Relayed to whoever asked, which is what the answer rule judges; left out of
            // the trace like the announcement (it follows from what the machines did).
            ParentAction::Answer { request, answer } => {
                self.oracle.answers.answered(now, *request, answer);
                self.out.answers.push((request.0, answer.clone()));
                return;
            }
            // The simulated host's access log has no file to reopen.
            ParentAction::ReopenAccessLog => return,
            // The simulated upstreams' probes need no client (they answer with the
            // truth); left out of the trace, which pins the other machines' steps.
            ParentAction::BuildProbeClients(_) => return,
            // The simulated parents run as one host each (the cluster is simulated on
            // its own, `crate::cluster`): no store calls.
            ParentAction::Store { .. } => return,
            _ => {}
        }
        let (code, arg) = action_code(&action);
        self.trace.record(&[now.as_nanos(), 200 + code, arg], || {
            format!("{now} parent: {action:?}")
        });
        let action = match action {
            ParentAction::Singleton(action) => return self.singleton(action),
            // Handed to `persist_dav_locks` by the loop, never here.
            ParentAction::PersistDavLocks(_) => return,
            ParentAction::Acme(action) => return self.acme_action(now, action),
            ParentAction::Answer { .. }
            | ParentAction::ReopenAccessLog
            | ParentAction::BuildProbeClients(_)
            | ParentAction::Store { .. } => return,
            ParentAction::KillScriptGroups { worker, pgids } => {
                self.kill_script_groups(worker, &pgids);
                return self.proxy_kill_groups(worker, &pgids);
            }
            ParentAction::ReadTlsFiles { reload } => return self.read_tls_files(now, reload),
            // Answered by the simulated upstream; without a proxy plan, the core's mistake.
            ParentAction::ProbeUpstream { upstream, url, .. } => {
                return self.probe_upstream(upstream, &url);
            }
            // The randomness a ticket key is minted from: the simulated host's own.
            ParentAction::Tls(servery_core::tls_material::TlsAction::MintTicketKey) => {
                let mut bytes = [0u8; servery_core::tls_material::TICKET_ENTROPY_LEN];
                for chunk in bytes.chunks_mut(8) {
                    let draw = self.rng.next_u64().to_be_bytes();
                    chunk.copy_from_slice(&draw[..chunk.len()]);
                }
                let input = servery_core::tls_material::TlsInput::TicketEntropy(Box::new(bytes));
                self.inbox.push_back(Event::Tls(input));
                return;
            }
            ParentAction::Supervisor(action) => action,
        };
        match action {
            Action::Spawn {
                worker,
                slot,
                generation,
                config,
                cpus,
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
                self.oracle
                    .spawned(now, worker, u64::from(slot.0), generation.0, &config);
                self.oracle.quic.spawned(worker, config.features().http3);
                let pinning = self.oracle.cpus.spawned(
                    worker,
                    u64::from(slot.0),
                    generation.0,
                    &config,
                    cpus.as_ref(),
                );
                if pinning.replaced_pinned {
                    self.out.coverage.insert(labels::PINNED_SLOT_REPLACED);
                }
                if pinning.repartitioned {
                    self.out.coverage.insert(labels::CPUS_SHARED_OUT_AGAIN);
                }
                if !self.listeners.is_open(config.listen()) {
                    self.violation(format!(
                        "{worker} started on {}, which the parent does not hold",
                        config.listen()
                    ));
                }
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
                proc.proxy = self
                    .spec
                    .workload
                    .proxy
                    .as_ref()
                    .map(|_| crate::proxy::WorkerProxy::new(&config, key.0));
                if let Some(wp) = &proc.proxy {
                    self.proxy_spawned(key.0, wp);
                }
                proc.slot = key.1;
                proc.generation = key.0;
                self.procs.insert(worker, proc);
                // Its HTTP/3 socket goes with it, as a descriptor the process holds.
                let mut broken = Vec::new();
                self.quic_sockets.hand(worker, &mut broken);
                for v in broken {
                    self.violation(v);
                }
                self.takers.changed();
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
                    ParentMessage::Broker { id, reply } if self.dav.is_some() => {
                        self.dav_wiretap_reply(now, worker, *id, reply)
                    }
                    ParentMessage::Drain { .. } => {
                        self.oracle.drain_sent(now, worker);
                        self.oracle.quic.ending(worker);
                        self.ending(worker)
                    }
                    ParentMessage::Commit => self.oracle.commit_sent(worker),
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
                self.oracle.ended(worker);
                self.oracle.quic.ending(worker);
                self.ending(worker);
                self.out.terms_sent += 1;
                if self.spec.platform == Platform::Windows {
                    self.violation(format!("TERM sent to {worker} under Windows semantics"));
                }
                self.worker_terminate(worker);
            }
            Action::Kill { worker } => {
                self.oracle.ended(worker);
                self.oracle.quic.ending(worker);
                self.ending(worker);
                if let Some(p) = self.procs.get(&worker).filter(|p| p.alive) {
                    if p.wedged {
                        self.out.coverage.insert(labels::WEDGED_DRAIN_KILLED);
                    }
                    if p.paused && p.held.is_none() {
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
            Action::BindListeners { reload, listen } => {
                if self.listeners.is_open(listen) || self.listeners.all_closed {
                    self.violation(format!("{listen} bound while held or after the close"));
                }
                // HTTP/3's UDP sockets and ACME's ports are bound once, and a service
                // manager's sockets are its own: a host running them cannot move the
                // port (decision 0072).
                let features = &self.spec.config.features;
                let fixed_by = [
                    (
                        self.spec.listeners_from_service_manager,
                        "sockets from the service manager",
                    ),
                    (features.http3, "--http3"),
                    (features.acme, "--acme"),
                ]
                .into_iter()
                .find_map(|(on, what)| on.then_some(what));
                if let Some(what) = fixed_by {
                    self.violation(format!(
                        "fixed-port rule: the parent asked to bind {listen} for reload {} while {what} fixes the port",
                        reload.0
                    ));
                }
                let result = self.listeners.bind(reload, listen);
                // The bind is the parent's own system call: answered in the next step.
                self.inbox.push_back(Event::ListenersBound {
                    reload,
                    listen,
                    result,
                });
            }
            Action::ReleaseListeners { listen } => {
                if !self.listeners.release(listen, now) {
                    self.violation(format!("{listen} released but not held"));
                }
            }
            Action::CloseListeners => {
                self.oracle.stopping();
                self.listeners.close_all();
                self.listener_open = false;
                self.out.requests.refused += self.backlog.len() as u64;
                for (_, kind) in core::mem::take(&mut self.backlog) {
                    if let ConnKind::Dav { rec } = kind {
                        self.dav_record_end(rec, crate::outcome::DavEnd::Refused);
                    }
                    if let ConnKind::DavTree { rec } = kind {
                        self.dav_tree_ended(rec, crate::dav_tree::TreeEnd::Refused);
                    }
                    if let ConnKind::Chunk { rec } = kind {
                        self.chunk_ended(rec, crate::chunks::ChunkEnd::Refused);
                    }
                }
            }
            Action::QuicSteering(steering) => {
                self.oracle.quic.steered(&steering);
                let mut broken = Vec::new();
                let procs = &self.procs;
                let gone = |w: WorkerId| procs.get(&w).is_some_and(|p| p.parent_closed);
                let applied = self.quic_sockets.apply(&steering, gone, &mut broken);
                for v in broken {
                    self.violation(v);
                }
                if applied.closed > 0 {
                    self.out
                        .coverage
                        .insert(labels::QUIC_TRAILING_SOCKETS_CLOSED);
                }
                if applied.kept_for_unreaped {
                    self.out
                        .coverage
                        .insert(labels::QUIC_SOCKET_KEPT_UNTIL_REAPED);
                }
            }
            Action::WorkerGone { worker } => {
                self.fs.remove_temps_of(worker);
                self.oracle.quic.gone(worker);
                self.dav_tree_cleanup(worker);
                let lat = self.latency();
                if let Some(p) = self.procs.get_mut(&worker) {
                    p.parent_closed = true;
                    if p.alive {
                        let at = (self.now + lat).max(p.down_clock);
                        self.schedule_at(at, SimEvent::ToWorkerEof { worker });
                    }
                }
            }
            Action::GenerationCommitted {
                generation, reload, ..
            } => {
                self.oracle.generation_committed(now, generation.0);
                self.oracle.answers.committed(generation.0, reload);
                if let Some(reload) = reload {
                    self.tls_files_reload_ended(reload.0, None);
                }
                if !self.out.generations_committed.is_empty() {
                    self.out.coverage.insert(labels::RELOAD_COMMITTED);
                }
                if self.listeners.released_at == Some(now) {
                    self.out.coverage.insert(labels::LISTENERS_MOVED);
                }
                self.out.generations_committed.push(generation.0);
            }
            Action::ServiceFailed { reason, message } => {
                self.oracle.service_failed(now, reason);
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
            Action::ReloadRejected { message, reload } => {
                if self.listeners.was_refused(reload) {
                    self.out.coverage.insert(labels::PORT_BUSY_RELOAD_REJECTED);
                }
                self.spawn_failure_given_up(false);
                self.oracle.reload_rejected(now, reload.0, &message);
                self.tls_files_reload_ended(reload.0, Some(&message));
                self.out.coverage.insert(labels::RELOAD_REJECTED);
                self.out.reload_rejections.push(message);
            }
            Action::ReloadStarted { .. } => {}
            Action::RecyclingSuspended { .. } => {
                self.spawn_failure_given_up(false);
                self.out.recycling_suspended = true;
            }
            Action::Exit { .. } => {
                self.oracle.answers.exiting();
                if !self.listeners.open().is_empty() {
                    self.violation(format!("parent exits holding {:?}", self.listeners.open()));
                }
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

    /// The simulated disk holds the journal (its parent never restarts, so nothing reads
    /// it back): a write fails while the disk is full, and the table is judged against
    /// what it holds after every step (`observe`).
    fn persist_dav_locks(
        &mut self,
        now: Instant,
        locks: &[servery_core::proto::DavLockInfo],
    ) -> servery_core::parent::JournalWrite {
        use servery_core::parent::JournalWrite;
        let Some(journal) = self.journal.as_mut() else {
            return JournalWrite::Written;
        };
        if now < self.disk_full_until {
            return JournalWrite::Failed;
        }
        *journal = locks
            .iter()
            .map(|l| (l.token, now + Duration::from_millis(l.expires_in_ms)))
            .collect();
        JournalWrite::Written
    }

    fn dav_locks_refused(&mut self, _now: Instant, refused: &[servery_core::LeaseId]) {
        if refused.is_empty() {
            // The driver is told only of locks the journal's failure dropped: a report
            // without one would have an operator read of refusals that never were.
            self.violation(
                "journal rule: the driver was told of WebDAV locks the journal refused, \
                 but none was refused"
                    .to_owned(),
            );
            return;
        }
        self.out.coverage.insert(labels::DAV_JOURNAL_REFUSED);
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
        self.judge_journal(now, parent);
        let sup = parent.supervisor();
        let broker = parent.broker();
        self.judge_listeners(sup);
        self.oracle.judge_step(now, sup);
        for breach in self.oracle.take_violations() {
            self.violation(breach);
        }
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
        let ready = sup.ready_workers() as u32;
        if self.out.ready_changes.last().map_or(0, |c| c.1) != ready {
            self.out
                .ready_changes
                .push((now.as_nanos() / 1_000_000, ready));
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
        self.record_exits(sup);
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
        if self.dav.is_some() {
            self.dav_observe(now, parent);
        }
        if self.certs.is_some() {
            self.certs_observe(now, parent);
        }
        if self.spec.workload.tls_files.is_some() {
            self.tls_files_observe(now, parent);
        }
        if self.dav_tree.is_some() {
            self.dav_tree_observe(now, parent);
        }
        if self.chunks.is_some() {
            self.chunks_observe(now, parent);
        }
        if self.proxy.is_some() {
            self.proxy_observe(now, parent);
        }
    }
}

/// The trace's code for an action (stable: regression entries pin trace hashes).
pub(super) fn action_code(action: &ParentAction) -> (u64, u64) {
    let action = match action {
        ParentAction::Singleton(_) => return (7, 0),
        // 8 is `GenerationCommitted`'s.
        ParentAction::PersistDavLocks(locks) => return (13, locks.len() as u64),
        ParentAction::Acme(_) => return (17, 0),
        ParentAction::Tls(_) => return (15, 0),
        // Never traced (see `perform`).
        ParentAction::Answer { .. }
        | ParentAction::ReopenAccessLog
        | ParentAction::BuildProbeClients(_)
        | ParentAction::Store { .. } => return (20, 0),
        ParentAction::KillScriptGroups { worker, .. } => return (22, worker.0),
        ParentAction::ProbeUpstream { upstream, .. } => return (21, u64::from(*upstream)),
        ParentAction::ReadTlsFiles { reload } => return (23, reload.0),
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
        Action::ReloadStarted { generation, .. } => (14, generation.0),
        Action::Exit { code } => (12, *code as u64),
        Action::BindListeners { listen, .. } => (18, listen.port.map_or(1 << 16, u64::from)),
        Action::ReleaseListeners { listen } => (19, listen.port.map_or(1 << 16, u64::from)),
        Action::QuicSteering(steering) => (21, u64::from(steering.sockets())),
    }
}

impl SimWorld {
    /// The parent's driver takes `event` in: what the lifecycle oracle learns from it.
    pub(super) fn parent_reads(&mut self, event: &Event) {
        let now = self.now;
        match event {
            Event::Message {
                worker,
                message: WorkerMessage::Ready,
            } => self.oracle.ready_read(now, *worker),
            Event::Message {
                worker,
                message: WorkerMessage::StartupFailed { error },
            } => self.oracle.startup_failure_read(*worker, error),
            Event::Exited { worker, .. } | Event::SpawnFailed { worker, .. } => {
                self.oracle.reaped_read(now, *worker)
            }
            Event::ChannelClosed { worker } | Event::ProtocolViolation { worker, .. } => {
                self.oracle.channel_end_read(*worker)
            }
            Event::Command(Command::Stop | Command::Interrupt) => self.oracle.stopping(),
            Event::Control { id, request } => {
                self.oracle.answers.read(now, *id, request);
                if matches!(request, servery_core::control::Request::Stop) {
                    self.oracle.stopping();
                }
            }
            _ => {}
        }
    }

    /// Exits since the last one recorded (several may be reaped in one step).
    fn record_exits(&mut self, sup: &servery_core::supervisor::Supervisor) {
        let last = self.out.exits.last().map(|e| e.worker);
        // None when the latest is the one recorded last, as after most steps.
        if sup.last_exit().map(|e| e.worker.0) == last {
            return;
        }
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
    }

    /// After every step: until the close, the parent holds the committed generation's set,
    /// and besides it only a reload's while one is in flight (a set held past its last
    /// use is a leak; a set missing is one workers could not be started on).
    fn judge_listeners(&mut self, sup: &servery_core::supervisor::Supervisor) {
        if self.listeners.all_closed {
            return;
        }
        let committed = sup.config().listen();
        let held = self.listeners.open();
        let extra = held.iter().filter(|l| **l != committed).count();
        if extra == held.len() || (extra > 0 && extra > usize::from(sup.reload_in_flight())) {
            self.violation(format!(
                "the parent holds {held:?} with {committed} committed (reload in flight: {})",
                sup.reload_in_flight()
            ));
        }
    }
}

impl SimWorld {
    /// The parent kills what a gone worker's CGI scripts left running (decision 0092).
    /// Simulated workers run no scripts yet, so this checks the rule's order only: the
    /// groups of a worker are killed only after the parent let the worker go.
    fn kill_script_groups(&mut self, worker: WorkerId, pgids: &[u32]) {
        let gone = self.procs.get(&worker).is_none_or(|p| p.parent_closed);
        if !gone {
            self.violation(format!(
                "script groups {pgids:?} of {worker} killed while the parent still holds it"
            ));
        }
    }

    /// The singletons' actions: counted, and a switch backwards is a violation.
    pub(super) fn singleton(&mut self, action: SingletonAction) {
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
    pub(super) fn spawn_failure_given_up(&mut self, service_failed: bool) {
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
    pub(super) fn ending(&mut self, worker: WorkerId) {
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
    pub(super) fn hello(&mut self, generation: u64, interval_ms: u64) {
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

    /// The CPUs the simulated parent may run on (decision 0122).
    pub fn host_cpus(&self) -> servery_core::cpu_affinity::CpuSet {
        self.spec.host_cpus.clone()
    }
}
