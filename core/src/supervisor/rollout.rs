//! Bringing a generation up: spawning workers, the first start and reloads, and a
//! rollout's commit, rejection or abort.

use super::*;

impl Supervisor {
    pub(super) fn spawn(
        &mut self,
        now: Instant,
        slot: Slot,
        generation: Generation,
        role: Role,
    ) -> WorkerId {
        let config = self.config.clone();
        self.spawn_with(now, slot, generation, role, &config)
    }

    /// Spawn under `config`: a reload's candidates carry the new generation's timings in
    /// their HELLO and are judged by them, not by the generation still committed.
    pub(super) fn spawn_with(
        &mut self,
        now: Instant,
        slot: Slot,
        generation: Generation,
        role: Role,
        config: &ValidConfig,
    ) -> WorkerId {
        let id = WorkerId(self.next_worker);
        self.next_worker += 1;
        let policy = config.recovery();
        let mut worker = Worker::new(id, slot, generation, role, now);
        let cpus = crate::cpu_affinity::worker_cpus(config, slot, &self.host_cpus);
        worker.cpus.clone_from(&cpus);
        worker.heartbeat_interval = policy.heartbeat_interval();
        worker.heartbeat_timeout = policy.heartbeat_timeout();
        worker.start_timeout = policy.worker_start_timeout();
        self.workers.insert(id, worker);
        if config.features().http3 {
            // Its own socket, in the groups before it is started with it.
            self.quic.take(id);
            self.steer_quic();
        }
        self.actions.push_back(Action::Spawn {
            worker: id,
            slot,
            generation,
            config: Box::new(config.clone()),
            cpus,
        });
        self.actions.push_back(Action::Send {
            worker: id,
            message: ParentMessage::Hello {
                worker: id,
                generation,
                heartbeat_interval_ms: policy.heartbeat_interval().as_millis() as u64,
                drain_timeout_ms: policy.drain_timeout().as_millis() as u64,
            },
        });
        id
    }

    /// Brings up the next generation under `config`: the first one (`reload` is `None`)
    /// or the one a reload asked for.
    pub(super) fn start_rollout(
        &mut self,
        now: Instant,
        config: ValidConfig,
        reload: Option<ReloadId>,
    ) {
        let generation = Generation(self.committed.0 + 1);
        let candidates = (0..config.workers())
            .map(|i| self.spawn_with(now, Slot(i), generation, Role::Candidate, &config))
            .collect();
        if let Some(reload) = reload {
            self.actions
                .push_back(Action::ReloadStarted { reload, generation });
        }
        self.rollout = Some(Rollout {
            generation,
            config,
            candidates,
            reload,
        });
    }

    pub(super) fn complete_rollout(&mut self, now: Instant) {
        let Some(rollout) = self.rollout.take() else {
            return;
        };
        // The old generation stops only now that the new one accepts: connections wait in
        // the shared listener's backlog meanwhile, never refused.
        let old: Vec<WorkerId> = self
            .workers
            .values()
            .filter(|w| w.role == Role::Member)
            .map(|w| w.id)
            .collect();
        for id in old {
            self.retire(now, id, ExitReason::CleanExit);
        }
        self.slots = rollout
            .candidates
            .iter()
            .map(|&id| SlotEntry {
                member: Some(id),
                ..SlotEntry::default()
            })
            .collect();
        for id in &rollout.candidates {
            if let Some(w) = self.workers.get_mut(id) {
                w.role = Role::Member;
            }
        }
        self.committed = rollout.generation;
        let old = core::mem::replace(&mut self.config, rollout.config);
        if old.listen() != self.config.listen() {
            self.actions.push_back(Action::ReleaseListeners {
                listen: old.listen(),
            });
        }
        if rollout.reload.is_none() {
            self.state = ServiceState::Ready;
        } else {
            self.last_reload_error = None;
            self.tally.reloads_committed += 1;
        }
        self.actions.push_back(Action::GenerationCommitted {
            generation: rollout.generation,
            reload: rollout.reload,
            connections: *self.config.connections(),
        });
        self.try_start_recycle(now);
    }

    pub(super) fn reload(&mut self, now: Instant, id: ReloadId, config: ValidConfig) {
        if self.stopping.is_some() {
            return self.reject_reload(id, "the service is stopping".into());
        }
        if self.state != ServiceState::Ready {
            return self.reject_reload(id, "the service is not ready yet".into());
        }
        if self.rollout.is_some() || self.pending_reload.is_some() || self.binding.is_some() {
            return self.reject_reload(id, "a reload is already in progress".into());
        }
        if let Some(refusal) = self.refuse_port_move(config.listen()) {
            return self.reject_reload(id, refusal);
        }
        if config.listen() != self.config.listen() {
            // Bound before any candidate exists: a port that cannot be had rejects the
            // reload with nothing started.
            self.actions.push_back(Action::BindListeners {
                reload: id,
                listen: config.listen(),
            });
            self.binding = Some((id, config));
            return;
        }
        self.roll_out_reload(now, id, config);
    }

    fn roll_out_reload(&mut self, now: Instant, id: ReloadId, config: ValidConfig) {
        if self.recycle.is_some() {
            // One overlap at a time: the reload starts when the recycle completes.
            self.pending_reload = Some((id, config));
        } else {
            self.start_rollout(now, config, Some(id));
        }
    }

    /// The driver's answer to `BindListeners`.
    pub(super) fn listeners_bound(
        &mut self,
        now: Instant,
        reload: ReloadId,
        listen: Listen,
        result: Result<(), String>,
    ) {
        let waiting = self
            .binding
            .take_if(|(id, config)| *id == reload && config.listen() == listen);
        match (waiting, result) {
            (Some((id, _)), Err(e)) => {
                self.reject_reload(id, format!("cannot listen on the new {listen}: {e}"))
            }
            (Some((id, config)), Ok(())) => self.roll_out_reload(now, id, config),
            // Its reload was answered meanwhile (a stop): nobody will start on the set.
            (None, Ok(())) if !self.uses_listen(listen) => {
                self.actions.push_back(Action::ReleaseListeners { listen })
            }
            (None, _) => {}
        }
    }

    /// A reload is being bound, waits for a recycle, or rolls out.
    pub fn reload_in_flight(&self) -> bool {
        self.rollout.as_ref().is_some_and(|r| r.reload.is_some())
            || self.pending_reload.is_some()
            || self.binding.is_some()
    }

    /// Whether a generation that may still start workers uses `listen`.
    fn uses_listen(&self, listen: Listen) -> bool {
        self.config.listen() == listen
            || self
                .rollout
                .as_ref()
                .is_some_and(|r| r.config.listen() == listen)
            || self
                .pending_reload
                .as_ref()
                .is_some_and(|(_, c)| c.listen() == listen)
            || self
                .binding
                .as_ref()
                .is_some_and(|(_, c)| c.listen() == listen)
    }

    pub(super) fn reject_reload(&mut self, reload: ReloadId, message: String) {
        self.last_reload_error = Some(message.clone());
        self.tally.reloads_rejected += 1;
        self.actions
            .push_back(Action::ReloadRejected { reload, message });
    }

    pub(super) fn abort_rollout(&mut self, now: Instant, message: String) {
        let Some(rollout) = self.rollout.take() else {
            return;
        };
        let Some(reload) = rollout.reload else {
            return self.fail(now, FailureReason::StartupFailure, message);
        };
        for id in rollout.candidates {
            self.retire(now, id, ExitReason::CleanExit);
        }
        let listen = rollout.config.listen();
        if !self.uses_listen(listen) {
            self.actions.push_back(Action::ReleaseListeners { listen });
        }
        self.reject_reload(
            reload,
            format!("reload failed, the old generation keeps serving: {message}"),
        );
        self.try_start_recycle(now);
    }
}
