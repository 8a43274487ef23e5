//! Stopping: a failed service and an orderly shutdown, once.

use super::*;

impl Supervisor {
    pub(super) fn fail(&mut self, now: Instant, reason: FailureReason, message: String) {
        if self.stopping.is_some() {
            return;
        }
        self.state = ServiceState::Failed;
        self.failure = Some((reason, message.clone()));
        self.actions
            .push_back(Action::ServiceFailed { reason, message });
        self.begin_stop(now, reason.exit_code());
    }

    /// A second interrupt while stopping: the operator will not wait for the drain. Every
    /// worker still there is killed now; the stop completes as they are reaped.
    pub(super) fn force_stop(&mut self) {
        let ids: Vec<WorkerId> = self.workers.keys().copied().collect();
        for worker in ids {
            self.actions.push_back(Action::Kill { worker });
        }
    }

    pub(super) fn begin_stop(&mut self, now: Instant, code: i32) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some(code);
        if self.state != ServiceState::Failed {
            self.state = ServiceState::Draining;
        }
        self.actions.push_back(Action::CloseListeners);
        // A reload still waiting or rolling out gets its answer: nobody waits forever.
        // Every set closes now; one still being bound is released when its answer comes.
        let binding = self.binding.take().map(|(id, _)| id);
        let waiting = self.pending_reload.take().map(|(id, _)| id);
        let rolling = self.rollout.take().and_then(|r| r.reload);
        for id in binding.into_iter().chain(waiting).chain(rolling) {
            self.reject_reload(id, "the service is stopping".into());
        }
        self.recycle = None;
        for slot in &mut self.slots {
            slot.respawn_at = None;
        }
        let ids: Vec<WorkerId> = self.workers.keys().copied().collect();
        for id in ids {
            self.retire(now, id, ExitReason::CleanExit);
        }
        self.finish_stop_if_done();
    }

    pub(super) fn finish_stop_if_done(&mut self) {
        let Some(code) = self.stopping else { return };
        if !self.workers.is_empty() || self.exit_sent {
            return;
        }
        self.exit_sent = true;
        if self.state != ServiceState::Failed {
            self.state = ServiceState::Stopped;
        }
        self.actions.push_back(Action::Exit { code });
    }
}
