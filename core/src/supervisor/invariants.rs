//! The rules every state must keep, checked after every step by the simulator.

use super::*;

impl Supervisor {
    /// Check the machine's own invariants; the simulator calls this after every step and
    /// the real driver in debug builds.
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.config.workers() as usize;
        // One pass over the workers gathers what the rules below judge (they run after
        // every simulated step, so a pass per rule, and one per slot, was most of a
        // sweep's checking); the rules are then judged in their order, so a broken
        // state reports the same first error as it would rule by rule.
        let mut replacements = 0usize;
        let mut serving = 0usize;
        let mut inline = [0u32; 16];
        let mut spilled = Vec::new();
        let members: &mut [u32] = if self.slots.len() <= inline.len() {
            &mut inline[..self.slots.len()]
        } else {
            spilled.resize(self.slots.len(), 0);
            &mut spilled
        };
        // Slots (the first 64) whose named member the pass met, filed under that slot:
        // that member is live without a lookup.
        let mut members_met = 0u64;
        let mut broken_worker = None;
        for w in self.workers.values() {
            let slot = w.slot.0 as usize;
            if slot < 64 && self.slots.get(slot).is_some_and(|s| s.member == Some(w.id)) {
                members_met |= 1 << slot;
            }
            match w.role {
                Role::Replacement => {
                    replacements += 1;
                    serving += 1;
                }
                Role::Member => {
                    serving += 1;
                    if w.generation == self.committed
                        && let Some(count) = members.get_mut(w.slot.0 as usize)
                    {
                        *count += 1;
                    }
                }
                _ => {}
            }
            if broken_worker.is_none() {
                broken_worker = self.broken_worker(w).map(|fault| (w.id, fault));
            }
        }
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
        if self.rollout.is_none()
            && self.stopping.is_none()
            && self.state == ServiceState::Ready
            && serving > n + 1
        {
            return Err(format!(
                "{serving} serving workers exceed N + 1 = {}",
                n + 1
            ));
        }
        for (i, (s, &members)) in self.slots.iter().zip(members.iter()).enumerate() {
            if members > 1 {
                return Err(format!("slot {i} has {members} members"));
            }
            if let Some(m) = s.member {
                let met = i < 64 && members_met & (1 << i) != 0;
                if !met && !self.workers.contains_key(&m) {
                    return Err(format!("slot {i} names reaped worker {m}"));
                }
                if s.respawn_at.is_some() {
                    return Err(format!("slot {i} has a member and a pending respawn"));
                }
            }
        }
        if let Some((id, fault)) = broken_worker {
            return Err(match fault {
                WorkerFault::ReadyWithoutCommit => format!("{id} is ready without COMMIT"),
                WorkerFault::CandidateOutsideRollout => {
                    format!("{id} is a candidate outside a rollout")
                }
            });
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
        self.quic
            .check(self.workers.len(), |w| self.workers.contains_key(&w))
    }

    /// What is wrong with `w` on its own, if anything (told in words only for the first
    /// worker found so: the check runs after every simulated step).
    fn broken_worker(&self, w: &Worker) -> Option<WorkerFault> {
        if w.state == WorkerState::Ready && !w.committed {
            return Some(WorkerFault::ReadyWithoutCommit);
        }
        if w.role == Role::Candidate
            && self
                .rollout
                .as_ref()
                .is_none_or(|r| !r.candidates.contains(&w.id))
        {
            return Some(WorkerFault::CandidateOutsideRollout);
        }
        None
    }
}

/// What can be wrong with a worker on its own.
#[derive(Debug, Clone, Copy)]
enum WorkerFault {
    ReadyWithoutCommit,
    CandidateOutsideRollout,
}
