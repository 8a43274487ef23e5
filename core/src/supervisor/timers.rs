//! Deadlines: the next one due, and what happens when it passes (start, heartbeat,
//! drain and force timeouts, respawns, age recycling, retries).

use core::time::Duration;

use super::*;

impl Supervisor {
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next = Soonest::NONE;
        for w in self.workers.values() {
            if !w.kill_sent {
                next.consider(w.kill_at);
            }
            if w.ending.is_some() && w.state != WorkerState::Draining {
                continue;
            }
            self.worker_deadline(w, &mut next);
        }
        for s in &self.slots {
            next.consider(s.respawn_at);
        }
        if let Some(rec) = &self.recycle {
            next.consider(rec.retry_at);
        }
        next.get()
    }

    /// [`Supervisor::poll_timeout`] and [`Supervisor::watch_period`].
    pub fn poll_timeout_and_watch_period(&self) -> (Option<Instant>, Option<Duration>) {
        (self.poll_timeout(), self.watch_period())
    }

    /// The next deadline as far as it matters before `bound`, which the caller takes the
    /// earliest of it with: [`Supervisor::poll_timeout`], or a time between `bound` and
    /// it. `earliest(answer, bound)` is `earliest(poll_timeout(), bound)` either way.
    ///
    /// The parent works its deadline out after every step, and most steps are a
    /// heartbeat, which moves only its worker's deadline, and later; the parent's own
    /// watch period comes sooner than any. So the last deadline worked out is kept as a
    /// floor until something could bring one forward, and while the floor is at or past
    /// `bound` the pass over every worker is not needed.
    pub fn poll_timeout_before(&mut self, bound: Option<Instant>) -> Option<Instant> {
        if let (Some(floor), Some(bound)) = (self.due_floor, bound)
            && floor >= bound
        {
            return Some(floor);
        }
        let due = self.poll_timeout();
        self.due_floor = due;
        due
    }

    /// The heartbeat deadline is judged in every state in which a worker beats: prepared
    /// (waiting for its quorum), ready, and draining.
    fn worker_deadline(&self, w: &Worker, next: &mut Soonest) {
        let beat = w.last_beat + w.heartbeat_timeout;
        match w.state {
            WorkerState::Spawning => next.at(w.start_deadline()),
            WorkerState::Prepared => {
                next.at(w.start_deadline());
                next.at(beat);
            }
            WorkerState::Ready => {
                next.at(beat);
                if w.role == Role::Member
                    && w.recycle_due.is_none()
                    && self.recycling_suspended.is_none()
                {
                    next.consider(w.age_deadline);
                }
            }
            WorkerState::Draining if !w.term_sent && !w.kill_sent => {
                next.consider(w.drain_deadline);
                next.at(beat);
            }
            _ => {}
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.handle_due(now);
        self.steer_quic();
    }

    fn handle_due(&mut self, now: Instant) {
        self.due_floor = None;
        let ids: Vec<WorkerId> = self.workers.keys().copied().collect();
        for id in ids {
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            if !w.kill_sent && w.kill_at.is_some_and(|t| t <= now) {
                self.kill(id);
                continue;
            }
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            match w.state {
                WorkerState::Spawning | WorkerState::Prepared
                    if w.ending.is_none() && now >= w.start_deadline() =>
                {
                    let msg = format!(
                        "not ready within worker_start_timeout ({:?})",
                        w.start_timeout
                    );
                    self.fault(now, id, ExitReason::StartupFailure, msg);
                }
                WorkerState::Prepared
                    if w.ending.is_none() && now >= w.last_beat + w.heartbeat_timeout =>
                {
                    // Not ready yet, so a startup failure, and nothing to drain: killed
                    // at once, as on the start timeout.
                    let msg = format!(
                        "no heartbeat for {:?} while prepared (heartbeat_timeout)",
                        now.saturating_since(w.last_beat)
                    );
                    self.fault(now, id, ExitReason::StartupFailure, msg);
                }
                WorkerState::Ready if w.ending.is_none() => {
                    if now >= w.last_beat + w.heartbeat_timeout {
                        let msg = format!(
                            "no heartbeat for {:?} (heartbeat_timeout)",
                            now.saturating_since(w.last_beat)
                        );
                        self.fault(now, id, ExitReason::HealthFailure, msg);
                    } else if w.role == Role::Member
                        && w.recycle_due.is_none()
                        && w.age_deadline.is_some_and(|t| t <= now)
                    {
                        w.recycle_due = Some(ExitReason::RecycleAge);
                    }
                }
                WorkerState::Draining if !w.term_sent && !w.kill_sent => {
                    if now >= w.last_beat + w.heartbeat_timeout {
                        // A healthy drain keeps beating: this one is hung, and would
                        // otherwise hold its recycle (or the stop) until the drain deadline.
                        let msg = format!(
                            "no heartbeat for {:?} while draining (heartbeat_timeout)",
                            now.saturating_since(w.last_beat)
                        );
                        self.fault(now, id, ExitReason::DrainHang, msg);
                    } else if w.drain_deadline.is_some_and(|t| t <= now) {
                        self.escalate(now, id);
                    }
                }
                _ => {}
            }
        }
        if self.stopping.is_none() {
            let generation = self.committed;
            for i in 0..self.slots.len() {
                if self.slots[i].respawn_at.is_some_and(|t| t <= now) {
                    self.slots[i].respawn_at = None;
                    let id = self.spawn(now, Slot(i as u32), generation, Role::Member);
                    self.slots[i].member = Some(id);
                }
            }
            let retry = self
                .recycle
                .as_ref()
                .filter(|r| r.replacement.is_none() && r.retry_at.is_some_and(|t| t <= now))
                .map(|r| r.slot);
            if let Some(slot) = retry {
                let id = self.spawn(now, slot, generation, Role::Replacement);
                if let Some(rec) = self.recycle.as_mut() {
                    rec.replacement = Some(id);
                    rec.retry_at = None;
                }
            }
        }
        self.try_start_recycle(now);
    }
}

/// The earliest of the deadlines it was shown, if any: what folding them with
/// [`crate::time::earliest`] gives, kept as a number and a flag rather than an `Option` per step (the
/// parent works its next deadline out after every step).
#[derive(Debug, Clone, Copy)]
struct Soonest {
    nanos: u64,
    any: bool,
}

impl Soonest {
    const NONE: Soonest = Soonest {
        nanos: u64::MAX,
        any: false,
    };

    fn at(&mut self, t: Instant) {
        self.nanos = self.nanos.min(t.as_nanos());
        self.any = true;
    }

    fn consider(&mut self, t: Option<Instant>) {
        if let Some(t) = t {
            self.at(t);
        }
    }

    fn get(self) -> Option<Instant> {
        self.any.then_some(Instant::from_nanos(self.nanos))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::time::earliest;

    proptest! {
        #[test]
        fn the_soonest_is_what_earliest_folds_to(
            deadlines in proptest::collection::vec(
                proptest::option::of(prop_oneof![Just(u64::MAX), Just(0u64), any::<u64>()]),
                0..12,
            )
        ) {
            let mut soonest = Soonest::NONE;
            let mut folded = None;
            for d in deadlines {
                let d = d.map(Instant::from_nanos);
                soonest.consider(d);
                folded = earliest(folded, d);
            }
            prop_assert_eq!(soonest.get(), folded);
        }
    }
}
