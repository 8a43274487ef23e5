//! Pauses that end ([`Fault::PauseWorker`]): `SIGSTOP`, then `SIGCONT` after a while.
//!
//! A stopped process runs nothing, but the world goes on around it: frames reach its
//! socket buffer, its timers come due, the requests it holds wait. All of that is held,
//! in arrival order, and handed to it again at the resume, where it happens at once —
//! the overdue heartbeat first among its timers, then the late answers. A TERM sent
//! meanwhile stays pending and its handler runs on the resume, before what was held;
//! KILL needs no cooperation and ends the process at once. The same holding serves the
//! Windows model (a suspended process; `TerminateProcess` is immediate), where the
//! parent never sends TERM. A stop that never ends ([`Fault::HangWorker`]) holds
//! nothing: its events find a process that cannot run and are dropped, as before.

use super::*;

impl SimWorld {
    /// Stop `worker` for `duration` (the fault has picked it).
    pub(super) fn pause(&mut self, worker: WorkerId, duration: Duration) {
        let from = self.now.as_nanos() / 1_000_000;
        let until = (self.now + duration).as_nanos() / 1_000_000;
        let Some(p) = self.procs.get_mut(&worker).filter(|p| p.alive) else {
            return;
        };
        p.paused = true;
        p.held = Some(Vec::new());
        self.takers.changed();
        self.pausing += 1;
        self.out.pauses.push((worker.0, from, until));
        self.injected(FaultKind::PauseWorker, Some(worker));
        self.schedule_in(duration, SimEvent::WorkerResumes { worker });
    }

    /// `event`, unless it is for a paused worker, which holds it until it resumes.
    pub(super) fn hold_for_paused(&mut self, event: SimEvent) -> Option<SimEvent> {
        let Some(worker) = event.for_a_worker() else {
            return Some(event);
        };
        match self.procs.get_mut(&worker) {
            Some(p) if p.alive => match p.held.as_mut() {
                Some(held) => {
                    held.push(event);
                    None
                }
                None => Some(event),
            },
            _ => Some(event),
        }
    }

    /// `SIGCONT`: the worker runs its pending TERM handler, then what reached it while it
    /// was stopped, and takes connections again.
    pub(super) fn worker_resumes(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker).filter(|p| p.alive) else {
            return;
        };
        let Some(held) = p.held.take() else {
            return;
        };
        p.paused = false;
        self.takers.changed();
        let term = core::mem::take(&mut p.term_pending);
        self.pausing -= 1;
        self.out.coverage.insert(labels::PAUSED_WORKER_RESUMED);
        if term {
            self.out
                .coverage
                .insert(labels::PAUSED_WORKER_RAN_PENDING_TERM);
            self.worker_terminate(worker);
        }
        for event in held {
            self.schedule_at(now, event);
        }
        self.dispatch();
    }

    /// A paused worker died (KILL, `TerminateProcess`): what it held goes with it.
    pub(crate) fn paused_worker_died(&mut self, worker: WorkerId) {
        if let Some(p) = self.procs.get_mut(&worker).filter(|p| p.alive)
            && p.held.take().is_some()
        {
            p.term_pending = false;
            self.pausing -= 1;
            self.out.coverage.insert(labels::PAUSED_WORKER_KILLED);
        }
    }
}
