//! How workers end: retirement, drain, TERM then KILL, faults, and the reap that
//! decides a member's replacement.

use super::*;

impl Supervisor {
    /// Take a worker out of service: drain it if it serves, otherwise end it now.
    pub(super) fn retire(&mut self, now: Instant, id: WorkerId, reason: ExitReason) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        w.role = Role::Retired;
        match w.state {
            // A committed worker may already accept even if its READY is still on the
            // way: it gets a drain, never a kill, so its requests finish.
            WorkerState::Ready => self.drain(now, id, reason),
            WorkerState::Prepared if w.committed => self.drain(now, id, reason),
            WorkerState::Spawning | WorkerState::Prepared => {
                w.ending.get_or_insert(reason);
                self.kill(id);
            }
            WorkerState::Draining | WorkerState::Exited => {}
        }
    }

    pub(super) fn drain(&mut self, now: Instant, id: WorkerId, reason: ExitReason) {
        let drain_timeout = self.config.recovery().drain_timeout();
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.state == WorkerState::Draining || w.kill_sent {
            return;
        }
        w.ending.get_or_insert(reason);
        w.state = WorkerState::Draining;
        w.drain_deadline = Some(now + drain_timeout);
        let gone = w.gone;
        // New QUIC connections go elsewhere before the worker is told to drain, so it
        // never has to refuse one (decision 0079).
        self.steer_quic();
        if !gone {
            self.actions.push_back(Action::Send {
                worker: id,
                message: ParentMessage::Drain {
                    deadline_ms: drain_timeout.as_millis() as u64,
                },
            });
        }
        if drain_timeout.is_zero() {
            self.escalate(now, id);
        }
    }

    /// The polite stop did not work (or there is no time for it): TERM then KILL on
    /// POSIX, immediate termination on Windows.
    pub(super) fn escalate(&mut self, now: Instant, id: WorkerId) {
        let force = self.config.recovery().force_timeout();
        let platform = self.platform;
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.kill_sent || w.term_sent {
            return;
        }
        match platform {
            Platform::Posix if !force.is_zero() => {
                w.term_sent = true;
                w.kill_at = Some(now + force);
                self.steer_quic();
                self.actions.push_back(Action::Terminate { worker: id });
            }
            _ => self.kill(id),
        }
    }

    pub(super) fn kill(&mut self, id: WorkerId) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.kill_sent {
            return;
        }
        w.kill_sent = true;
        w.kill_at = None;
        // A drained worker that had to be killed did not finish in time (unless it was
        // ended for hanging, which says more).
        if w.state == WorkerState::Draining && w.ending.is_none_or(|r| !r.is_failure()) {
            w.ending = Some(ExitReason::ForcedTermination);
        }
        self.steer_quic();
        self.actions.push_back(Action::Kill { worker: id });
    }

    /// Revoke what the worker holds: its channel is closed or untrusted. Its HTTP/3
    /// socket stays its own until the reap: the process may still read it (decision
    /// 0119).
    pub(super) fn gone(&mut self, id: WorkerId) {
        if let Some(w) = self.workers.get_mut(&id)
            && !w.gone
        {
            w.gone = true;
            self.actions.push_back(Action::WorkerGone { worker: id });
            self.steer_quic();
        }
    }

    /// Emits where QUIC datagrams go when that changed (decision 0079): new connections
    /// to the sockets of workers that serve and are not being ended.
    pub(super) fn steer_quic(&mut self) {
        if !self.quic.in_use() {
            return;
        }
        let workers = &self.workers;
        let accepts = |id: WorkerId| {
            workers
                .get(&id)
                .is_some_and(Worker::accepts_new_connections)
        };
        if let Some(steering) = self.quic.changed(accepts) {
            self.actions.push_back(Action::QuicSteering(steering));
        }
    }

    /// The worker misbehaved: end it, and let the reap decide what follows.
    pub(super) fn fault(
        &mut self,
        now: Instant,
        id: WorkerId,
        reason: ExitReason,
        message: String,
    ) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        if w.ending.is_some_and(|r| r.is_failure()) {
            return;
        }
        w.ending = Some(reason);
        w.error = Some(message.clone());
        self.last_failure = Some(FailureRecord {
            worker: id,
            slot: w.slot,
            generation: w.generation,
            reason,
            message,
            at: now,
        });
        // A hung worker gets TERM first (POSIX), as any worker that may hold requests;
        // a stopped process runs no handler, so the KILL after `force_timeout` ends it.
        if matches!(reason, ExitReason::HealthFailure | ExitReason::DrainHang) {
            self.escalate(now, id);
        } else {
            self.kill(id);
        }
    }

    pub(super) fn reaped(&mut self, now: Instant, id: WorkerId, status: Option<ExitStatus>) {
        // The process is gone, and with it its copy of its HTTP/3 socket: the socket is
        // free for the next worker, and leaves the groups if it is at their end, before a
        // replacement below takes one (decision 0119).
        self.quic.release(id);
        self.gone(id);
        self.steer_quic();
        let Some(mut w) = self.workers.remove(&id) else {
            return;
        };
        w.state = WorkerState::Exited;
        self.tally.retired_requests.add(&w.stats);
        let reason = w.ending.unwrap_or(if w.before_ready() {
            ExitReason::StartupFailure
        } else {
            ExitReason::UnexpectedExit
        });
        self.tally.exits[tally::reason_index(reason)] += 1;
        if self.recent_exits.len() == RECENT_EXITS {
            self.recent_exits.pop_front();
        }
        self.recent_exits.push_back(ExitRecord {
            worker: id,
            slot: w.slot,
            generation: w.generation,
            reason,
            status,
            at: now,
        });
        let message = match (&w.error, status) {
            (Some(e), _) => e.clone(),
            (None, Some(s)) => format!("exited with {s}"),
            (None, None) => "did not start".into(),
        };
        if reason.is_fault() && w.ending.is_none() {
            self.last_failure = Some(FailureRecord {
                worker: id,
                slot: w.slot,
                generation: w.generation,
                reason,
                message: message.clone(),
                at: now,
            });
        }
        // A failure judged before the reap (a closed channel, a missed heartbeat) is told
        // how the process then ended: which signal killed it, or its exit code.
        if let (Some(status), Some(failure)) = (status, self.last_failure.as_mut())
            && w.ending.is_some()
            && failure.worker == id
            && !failure.message.contains("exited with")
        {
            failure.message = format!("{}; exited with {status}", failure.message);
        }
        if self.stopping.is_some() {
            if let Some(slot) = self.slots.iter_mut().find(|s| s.member == Some(id)) {
                slot.member = None;
            }
            return self.finish_stop_if_done();
        }
        let described = format!(
            "worker {id} ({}, {}) {reason}: {message}",
            w.slot, w.generation
        );
        match w.role {
            Role::Candidate => self.abort_rollout(now, described),
            Role::Replacement => self.replacement_failed(now, described),
            Role::Member => self.member_lost(now, &w, reason, described),
            Role::Retired => {
                if self
                    .recycle
                    .as_ref()
                    .is_some_and(|r| r.old == id && r.swapped)
                {
                    self.recycle = None;
                    self.after_recycle(now);
                }
            }
        }
    }

    pub(super) fn member_lost(
        &mut self,
        now: Instant,
        w: &Worker,
        reason: ExitReason,
        described: String,
    ) {
        let slot_index = w.slot.0 as usize;
        if self.slots.get(slot_index).and_then(|s| s.member) != Some(w.id) {
            return;
        }
        let stable = w.ready_at.is_some_and(|r| {
            now.saturating_since(r) >= self.config.recovery().restart_stable_period()
        });
        let decision = {
            let policy = self.config.recovery().clone();
            let slot = &mut self.slots[slot_index];
            let rng = &mut self.rng;
            self.window
                .decide_with(now, &policy, &mut slot.history, stable, &mut || rng.unit())
        };
        self.slots[slot_index].member = None;
        // A recycle of this slot loses its old worker: the replacement, if any, takes
        // the slot directly.
        if let Some(rec) = self.recycle.take_if(|r| r.old == w.id)
            && let Some(rep) = rec.replacement
            && let Some(rw) = self.workers.get_mut(&rep)
        {
            rw.role = Role::Member;
            self.slots[slot_index].member = Some(rep);
        }
        match decision {
            RestartDecision::GiveUp(reason) => {
                let why = match reason {
                    FailureReason::RestartsDisabled => "worker_restart_limit is 0".to_string(),
                    _ => format!(
                        "more than {} restarts (in {:?} or in a row)",
                        self.config.recovery().worker_restart_limit(),
                        self.config.recovery().worker_restart_window()
                    ),
                };
                self.fail(now, reason, format!("{described}; {why}"));
            }
            RestartDecision::Replace { after } => {
                self.tally.restarts[tally::reason_index(reason)] += 1;
                let policy = self.config.recovery();
                // Shared: one backoff for the pool, grown by every unstable restart.
                let after = if policy.restart_backoff_shared() {
                    if stable {
                        self.pool_run = 0;
                    }
                    let pool = super::restart::backoff(policy, self.pool_run);
                    self.pool_run = self.pool_run.saturating_add(1);
                    after.max(pool)
                } else {
                    after
                };
                // Pool-aware: the last slot standing is not held in its grown backoff.
                let after = if policy.restart_backoff_keep_one()
                    && self.slots.iter().all(|s| s.member.is_none())
                {
                    after.min(policy.restart_backoff_initial())
                } else {
                    after
                };
                if self.slots[slot_index].member.is_none() {
                    self.slots[slot_index].respawn_at = Some(now + after);
                }
                if self.recycle.is_none() {
                    self.after_recycle(now);
                }
            }
        }
    }
}
