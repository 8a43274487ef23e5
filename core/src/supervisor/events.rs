//! Events in: a worker's start, its messages (HELLO, PREPARED, READY, heartbeats,
//! startup failures), and the barrier they move it through (COMMIT, then ready).

use super::*;

impl Supervisor {
    pub fn handle(&mut self, now: Instant, event: Event) {
        self.handle_event(now, event);
        // Whatever the event changed (a worker ready, one gone) may change where new
        // QUIC connections go.
        self.steer_quic();
    }

    fn handle_event(&mut self, now: Instant, event: Event) {
        // Any event may bring a deadline forward, but a heartbeat, which says so itself
        // (see `message`): the floor under the next one is no longer known.
        if !matches!(
            event,
            Event::Message {
                message: WorkerMessage::Heartbeat { .. },
                ..
            }
        ) {
            self.due_floor = None;
        }
        match event {
            Event::Start => self.start(now),
            Event::Spawned { worker, pid } => {
                if let Some(w) = self.workers.get_mut(&worker) {
                    w.pid = Some(pid);
                }
            }
            Event::SpawnFailed { worker, error } => {
                // The host refused the process (EAGAIN, ENOMEM): a startup failure of a
                // worker that never existed, reaped at once. Unless it was already being
                // ended, it is the last failure status shows, with the host's words.
                if let Some(w) = self.workers.get_mut(&worker) {
                    let message = format!("could not spawn: {error}");
                    w.error = Some(message.clone());
                    if w.ending.is_none() {
                        w.ending = Some(ExitReason::StartupFailure);
                        self.last_failure = Some(FailureRecord {
                            worker,
                            slot: w.slot,
                            generation: w.generation,
                            reason: ExitReason::StartupFailure,
                            message,
                            at: now,
                        });
                    }
                    self.reaped(now, worker, None);
                }
            }
            Event::Message { worker, message } => self.message(now, worker, message),
            Event::ProtocolViolation { worker, error } => {
                self.gone(worker);
                self.fault(
                    now,
                    worker,
                    ExitReason::ProtocolError,
                    format!("malformed control frame: {error}"),
                );
            }
            Event::ChannelClosed { worker } => {
                self.gone(worker);
                let Some(w) = self.workers.get(&worker) else {
                    return;
                };
                if w.ending.is_none() {
                    let reason = if w.before_ready() {
                        ExitReason::StartupFailure
                    } else {
                        ExitReason::UnexpectedExit
                    };
                    self.fault(now, worker, reason, "control channel closed".into());
                }
            }
            Event::FinalCounts { worker, counts } => self.final_counts(worker, &counts.stats),
            Event::Exited { worker, status } => self.reaped(now, worker, Some(status)),
            Event::Command(Command::Stop) => self.begin_stop(now, 0),
            Event::Command(Command::Interrupt) => match self.stopping {
                None => self.begin_stop(now, 0),
                Some(_) => self.force_stop(),
            },
            Event::Command(Command::Reload { id, config }) => match config.validate() {
                Ok(config) => self.reload(now, id, config),
                Err(e) => self.reject_reload(id, e.to_string()),
            },
            Event::Command(Command::Resize { id, mut config, by }) => {
                let workers = i64::from(self.config().workers()) + i64::from(by);
                if workers < 1 {
                    self.reject_reload(id, "a service runs one worker at least".into());
                } else {
                    config.workers = workers;
                    match config.validate() {
                        Ok(config) => self.reload(now, id, config),
                        Err(e) => self.reject_reload(id, e.to_string()),
                    }
                }
            }
            Event::Command(Command::Recycle) => self.recycle_all(now),
            Event::Command(Command::ReloadUnreadable { id, message }) => {
                self.reject_reload(id, message)
            }
            // The parent's certificate manager takes these before they reach here.
            Event::Acme { .. } => {}
            // The parent decides requests and hands on what they carry out as commands.
            Event::Control { .. } => {}
            // The parent's TLS material machine takes these (`crate::parent`).
            Event::Tls(_) | Event::TlsFilesRead { .. } => {}
            // The parent's upstream health takes these, and its cluster gate the store's
            // answers.
            Event::UpstreamProbed { .. } | Event::StoreReplied { .. } => {}
            Event::ListenersBound {
                reload,
                listen,
                result,
            } => self.listeners_bound(now, reload, listen, result),
        }
    }

    pub(super) fn start(&mut self, now: Instant) {
        if self.state != ServiceState::Idle {
            return;
        }
        self.state = ServiceState::Starting;
        self.start_rollout(now, self.config.clone(), None);
    }

    pub(super) fn message(&mut self, now: Instant, id: WorkerId, message: WorkerMessage) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.gone {
            return;
        }
        match message {
            WorkerMessage::Prepared => {
                if w.state != WorkerState::Spawning {
                    return self.fault(now, id, ExitReason::ProtocolError, "PREPARED twice".into());
                }
                w.state = WorkerState::Prepared;
                w.last_beat = now;
                match w.role {
                    Role::Candidate => self.commit_rollout_if_prepared(),
                    Role::Member | Role::Replacement if self.stopping.is_none() => {
                        self.commit_worker(id);
                    }
                    _ => {}
                }
            }
            WorkerMessage::Ready => {
                if w.state == WorkerState::Draining && w.committed {
                    // Told to drain while its READY was on the way: nothing to do.
                    return;
                }
                if w.state != WorkerState::Prepared || !w.committed {
                    return self.fault(
                        now,
                        id,
                        ExitReason::ProtocolError,
                        "READY before COMMIT".into(),
                    );
                }
                self.became_ready(now, id);
            }
            WorkerMessage::StartupFailed { error } => {
                if !w.before_ready() {
                    return self.fault(
                        now,
                        id,
                        ExitReason::ProtocolError,
                        "startup failure after READY".into(),
                    );
                }
                self.fault(now, id, ExitReason::StartupFailure, error);
            }
            WorkerMessage::Heartbeat {
                requests,
                connections,
                requests_in_progress,
                memory,
                stats,
            } => {
                // Its heartbeat deadline moves later, unless the beat is dated before the
                // last one (never, from a driver, whose time only goes forward).
                let moved_back = now < w.last_beat;
                w.last_beat = now;
                w.requests = w.requests.max(requests);
                w.connections = connections;
                w.requests_in_progress = requests_in_progress;
                // Totals since the worker started: the latest replaces the one before.
                w.stats = stats;
                w.memory = memory;
                // Above the limit at two beats in a row: one large request's passing
                // peak does not recycle a worker, memory that stays does.
                let over = w.memory_limit.is_some_and(|max| memory > max);
                let memory_stays = over && w.memory_over;
                w.memory_over = over;
                let due = if w.request_limit.is_some_and(|limit| w.requests >= limit) {
                    Some(ExitReason::RecycleRequests)
                } else if memory_stays {
                    Some(ExitReason::RecycleMemory)
                } else {
                    None
                };
                if w.state == WorkerState::Ready
                    && w.role == Role::Member
                    && w.recycle_due.is_none()
                    && let Some(due) = due
                {
                    w.recycle_due = Some(due);
                    self.due_floor = None;
                    self.try_start_recycle(now);
                } else if moved_back {
                    self.due_floor = None;
                }
            }
            // The broker's and the parent's own records (decision 0092), not the lifecycle.
            WorkerMessage::Broker { .. }
            | WorkerMessage::ScriptStarted { .. }
            | WorkerMessage::ScriptEnded { .. } => {}
        }
    }

    pub(super) fn commit_worker(&mut self, id: WorkerId) {
        if let Some(w) = self.workers.get_mut(&id)
            && w.state == WorkerState::Prepared
            && !w.committed
            && w.ending.is_none()
        {
            w.committed = true;
            self.actions.push_back(Action::Send {
                worker: id,
                message: ParentMessage::Commit,
            });
        }
    }

    pub(super) fn commit_rollout_if_prepared(&mut self) {
        let Some(rollout) = &self.rollout else { return };
        let all_prepared = rollout.candidates.iter().all(|id| {
            self.workers
                .get(id)
                .is_some_and(|w| w.state == WorkerState::Prepared && w.ending.is_none())
        });
        if all_prepared && self.stopping.is_none() {
            for id in rollout.candidates.clone() {
                self.commit_worker(id);
            }
        }
    }

    pub(super) fn became_ready(&mut self, now: Instant, id: WorkerId) {
        let policy = self.config.recovery().clone();
        let age_draw = self.rng.unit();
        let req_draw = self.rng.unit();
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        w.state = WorkerState::Ready;
        w.ready_at = Some(now);
        w.last_beat = now;
        w.age_deadline = policy
            .worker_max_age()
            .map(|age| now + age.mul_f64(1.0 - policy.worker_max_age_jitter() * age_draw));
        w.request_limit = policy.max_requests_per_worker().map(|max| {
            ((max as f64 * (1.0 - policy.max_requests_jitter() * req_draw)).ceil() as u64).max(1)
        });
        w.memory_limit = policy.worker_max_rss();
        match w.role {
            Role::Candidate => {
                let done = self.rollout.as_ref().is_some_and(|r| {
                    r.candidates.iter().all(|c| {
                        self.workers
                            .get(c)
                            .is_some_and(|w| w.state == WorkerState::Ready && w.ending.is_none())
                    })
                });
                if done {
                    self.complete_rollout(now);
                }
            }
            Role::Replacement => self.swap_in_replacement(now, id),
            Role::Member | Role::Retired => {}
        }
    }
}
