//! The reverse proxy's admission grants (`--proxy-max-inflight`, decision 0076): each the
//! right to one upstream request in flight, held by a worker. The table grants only
//! within the service-wide bound, takes back what a worker returns, and forgets
//! everything a dead worker held when the broker revokes it.

use std::collections::BTreeMap;

use crate::ids::WorkerId;

#[derive(Debug, Clone, Default)]
pub struct ProxyGrants {
    held: BTreeMap<WorkerId, u32>,
    total: u32,
}

impl ProxyGrants {
    /// Up to `want` grants for `worker` within `max` held service-wide: how many it got
    /// (0 when none is free or nothing was asked for).
    pub fn acquire(&mut self, max: u32, worker: WorkerId, want: u32) -> u32 {
        let granted = want.min(max.saturating_sub(self.total));
        if granted > 0 {
            *self.held.entry(worker).or_default() += granted;
            self.total += granted;
        }
        granted
    }

    /// `count` grants back from `worker` (never more than it holds): how many came back.
    pub fn give_back(&mut self, worker: WorkerId, count: u32) -> u32 {
        let Some(held) = self.held.get_mut(&worker) else {
            return 0;
        };
        let back = count.min(*held);
        *held -= back;
        self.total -= back;
        if *held == 0 {
            self.held.remove(&worker);
        }
        back
    }

    /// Everything `worker` held, taken back.
    pub fn revoke(&mut self, worker: WorkerId) -> u32 {
        let back = self.held.remove(&worker).unwrap_or(0);
        self.total -= back;
        back
    }

    /// Grants held service-wide.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Workers holding at least one grant.
    pub fn holders(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.held.keys().copied()
    }

    pub fn held_by(&self, worker: WorkerId) -> u32 {
        self.held.get(&worker).copied().unwrap_or(0)
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        let sum: u64 = self.held.values().map(|&n| u64::from(n)).sum();
        if sum != u64::from(self.total) || self.held.values().any(|&n| n == 0) {
            return Err(format!(
                "proxy grants: total {} but held {:?}",
                self.total, self.held
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Acquire(u64, u32),
        GiveBack(u64, u32),
        Revoke(u64),
        SetMax(u32),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (1..5u64, 0..6u32).prop_map(|(w, n)| Step::Acquire(w, n)),
            3 => (1..5u64, 0..6u32).prop_map(|(w, n)| Step::GiveBack(w, n)),
            1 => (1..5u64).prop_map(Step::Revoke),
            1 => (0..12u32).prop_map(Step::SetMax),
        ]
    }

    #[test]
    fn grants_stop_at_the_bound_and_come_back_from_the_dead() {
        let mut g = ProxyGrants::default();
        assert_eq!(g.acquire(4, WorkerId(1), 3), 3);
        assert_eq!(g.acquire(4, WorkerId(2), 3), 1, "only one left");
        assert_eq!(g.acquire(4, WorkerId(2), 1), 0, "saturated");
        assert_eq!(g.give_back(WorkerId(2), 5), 1, "no more back than held");
        assert_eq!(g.revoke(WorkerId(1)), 3);
        assert_eq!(g.total(), 0);
        assert_eq!(g.acquire(4, WorkerId(2), 9), 4);
        g.check_invariants().expect("consistent");
    }

    proptest! {
        /// Whatever workers ask, return and die, the grants held service-wide never pass
        /// the bound in force when they were granted, and match what each worker holds.
        #[test]
        fn the_bound_holds_under_any_sequence(steps in proptest::collection::vec(step(), 0..64)) {
            let mut g = ProxyGrants::default();
            let mut max = 6;
            let mut model: BTreeMap<u64, u32> = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Acquire(w, n) => {
                        let before = g.total();
                        let got = g.acquire(max, WorkerId(w), n);
                        prop_assert!(got <= n);
                        prop_assert!(before >= max || got == n.min(max - before), "refused room");
                        prop_assert!(got == 0 || g.total() <= max, "bound {max} passed: {}", g.total());
                        *model.entry(w).or_default() += got;
                    }
                    Step::GiveBack(w, n) => {
                        let back = g.give_back(WorkerId(w), n);
                        let held = model.entry(w).or_default();
                        prop_assert_eq!(back, n.min(*held));
                        *held -= back;
                    }
                    Step::Revoke(w) => {
                        prop_assert_eq!(g.revoke(WorkerId(w)), model.remove(&w).unwrap_or(0));
                    }
                    Step::SetMax(m) => max = m,
                }
                g.check_invariants().map_err(TestCaseError::fail)?;
                for (w, n) in &model {
                    prop_assert_eq!(g.held_by(WorkerId(*w)), *n);
                }
            }
        }
    }
}
