//! Recycling: at most one worker replaced at a time, its replacement ready before it
//! drains, retries and suspension.

use super::*;

impl Supervisor {
    pub(super) fn recycle_all(&mut self, now: Instant) {
        if self.state != ServiceState::Ready || self.stopping.is_some() {
            return;
        }
        self.recycling_suspended = None;
        for w in self.workers.values_mut() {
            if w.role == Role::Member && w.state == WorkerState::Ready {
                w.recycle_due.get_or_insert(ExitReason::RecycleManual);
            }
        }
        self.try_start_recycle(now);
    }

    pub(super) fn try_start_recycle(&mut self, now: Instant) {
        if self.state != ServiceState::Ready
            || self.stopping.is_some()
            || self.rollout.is_some()
            || self.recycle.is_some()
            || self.recycling_suspended.is_some()
        {
            return;
        }
        let due = self
            .workers
            .values()
            .filter(|w| {
                w.role == Role::Member
                    && w.state == WorkerState::Ready
                    && w.ending.is_none()
                    && w.generation == self.committed
            })
            .filter_map(|w| w.recycle_due.map(|r| (w.ready_at, w.id, w.slot, r)))
            .min();
        let Some((_, old, slot, reason)) = due else {
            return;
        };
        let replacement = self.spawn(now, slot, self.committed, Role::Replacement);
        self.recycle = Some(Recycle {
            slot,
            old,
            reason,
            replacement: Some(replacement),
            swapped: false,
            failures: 0,
            retry_at: None,
        });
    }

    pub(super) fn swap_in_replacement(&mut self, now: Instant, id: WorkerId) {
        let Some(rec) = self.recycle.as_mut() else {
            return;
        };
        if rec.replacement != Some(id) {
            return;
        }
        rec.swapped = true;
        let (slot, old, reason) = (rec.slot, rec.old, rec.reason);
        if let Some(w) = self.workers.get_mut(&id) {
            w.role = Role::Member;
        }
        if let Some(entry) = self.slots.get_mut(slot.0 as usize) {
            entry.member = Some(id);
        }
        self.retire(now, old, reason);
    }

    pub(super) fn replacement_failed(&mut self, now: Instant, described: String) {
        let retry_limit = self.config.recovery().recycle_retry_limit();
        let policy = self.config.recovery().clone();
        let Some(rec) = self.recycle.as_mut() else {
            return;
        };
        rec.replacement = None;
        rec.failures += 1;
        if rec.failures >= retry_limit {
            let message = format!(
                "recycling suspended after {} failed replacements; the old worker keeps serving: {described}",
                rec.failures
            );
            self.recycle = None;
            for w in self.workers.values_mut() {
                w.recycle_due = None;
            }
            self.recycling_suspended = Some(message.clone());
            self.actions
                .push_back(Action::RecyclingSuspended { message });
            self.after_recycle(now);
        } else {
            rec.retry_at = Some(now + backoff(&policy, rec.failures - 1));
        }
    }

    pub(super) fn after_recycle(&mut self, now: Instant) {
        if let Some((id, config)) = self.pending_reload.take() {
            if self.recycle.is_none() && self.stopping.is_none() {
                self.start_rollout(now, config, Some(id));
                return;
            }
            self.pending_reload = Some((id, config));
        }
        self.try_start_recycle(now);
    }
}
