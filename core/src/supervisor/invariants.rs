//! The rules every state must keep, checked after every step by the simulator.

use super::*;

impl Supervisor {
    /// Check the machine's own invariants; the simulator calls this after every step and
    /// the real driver in debug builds.
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.config.workers() as usize;
        let replacements = self
            .workers
            .values()
            .filter(|w| w.role == Role::Replacement)
            .count();
        if replacements > 1 {
            return Err(format!("{replacements} recycle replacements alive"));
        }
        if replacements == 1
            && self
                .recycle
                .as_ref()
                .and_then(|r| r.replacement)
                .is_none_or(|id| {
                    self.workers
                        .get(&id)
                        .is_none_or(|w| w.role != Role::Replacement)
                })
        {
            return Err("a replacement is alive without a recycle in flight".into());
        }
        if self.rollout.is_none() && self.stopping.is_none() && self.state == ServiceState::Ready {
            let serving = self.serving_workers();
            if serving > n + 1 {
                return Err(format!(
                    "{serving} serving workers exceed N + 1 = {}",
                    n + 1
                ));
            }
        }
        for (i, s) in self.slots.iter().enumerate() {
            let members = self
                .workers
                .values()
                .filter(|w| {
                    w.role == Role::Member
                        && w.slot.0 as usize == i
                        && w.generation == self.committed
                })
                .count();
            if members > 1 {
                return Err(format!("slot {i} has {members} members"));
            }
            if let Some(m) = s.member {
                if !self.workers.contains_key(&m) {
                    return Err(format!("slot {i} names reaped worker {m}"));
                }
                if s.respawn_at.is_some() {
                    return Err(format!("slot {i} has a member and a pending respawn"));
                }
            }
        }
        for w in self.workers.values() {
            if w.state == WorkerState::Ready && !w.committed {
                return Err(format!("{} is ready without COMMIT", w.id));
            }
            if w.role == Role::Candidate
                && self
                    .rollout
                    .as_ref()
                    .is_none_or(|r| !r.candidates.contains(&w.id))
            {
                return Err(format!("{} is a candidate outside a rollout", w.id));
            }
        }
        if (self.state == ServiceState::Failed) != self.failure.is_some() {
            return Err("failed state and failure record disagree".into());
        }
        if self.state == ServiceState::Stopped && !self.workers.is_empty() {
            return Err("stopped with live workers".into());
        }
        if self.stopping.is_some() && (self.rollout.is_some() || self.recycle.is_some()) {
            return Err("stopping with a rollout or recycle in flight".into());
        }
        Ok(())
    }
}
