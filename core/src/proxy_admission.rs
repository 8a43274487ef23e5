//! The worker's side of the reverse proxy's service-wide admission (decision 0076): a pool
//! of grants leased from the broker's [`ProxyGrants`](crate::broker::ProxyGrants) in
//! blocks, so that under load most upstream requests take a grant the worker already
//! holds instead of paying a round trip to the parent.
//!
//! The rule: a worker keeps at most [`GrantPool::keep`] spare grants (held, not in use)
//! and gives back any more as requests finish. `keep` is a quarter of the bound shared
//! among the workers, so at most a quarter of the service-wide budget sits idle in
//! workers while another is refused; a bound smaller than four grants per worker keeps
//! none spare, and is then exact (one round trip per request).

/// How many spare grants each of `workers` keeps under a service-wide bound `max`.
pub fn keep_for(max: u32, workers: u32) -> u32 {
    (max / (4 * workers.max(1))).min(16)
}

/// What to do with a request that wants to go upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// A spare grant was taken: go.
    Go,
    /// Ask the broker for this many grants (one is for this request).
    Ask(u32),
}

/// The grants one worker holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantPool {
    keep: u32,
    held: u32,
    in_use: u32,
    /// Requests waiting for the broker's answer: the spare grants an earlier answer
    /// brings are kept for them rather than given back.
    asking: u32,
}

impl GrantPool {
    pub fn new(keep: u32) -> Self {
        GrantPool {
            keep,
            held: 0,
            in_use: 0,
            asking: 0,
        }
    }

    pub fn keep(&self) -> u32 {
        self.keep
    }

    pub fn held(&self) -> u32 {
        self.held
    }

    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// A request wants a grant.
    pub fn admit(&mut self) -> Admit {
        if self.held > self.in_use {
            self.in_use += 1;
            Admit::Go
        } else {
            self.asking += 1;
            Admit::Ask(self.keep + 1)
        }
    }

    /// The broker granted `granted` after an [`Admit::Ask`]: whether the request goes (it
    /// takes a grant held: one of these, or a spare one another request's answer brought
    /// meanwhile, so that a burst's answers are not left idle while requests are refused).
    /// Any beyond what the worker may keep spare are to be given back: returned second.
    pub fn granted(&mut self, granted: u32) -> (bool, u32) {
        self.asking = self.asking.saturating_sub(1);
        self.held += granted;
        let go = self.held > self.in_use;
        if go {
            self.in_use += 1;
        }
        (go, self.trim())
    }

    /// A request that asked stopped waiting without an answer (its client left, or the
    /// broker did not answer): how many grants to give back.
    pub fn abandoned(&mut self) -> u32 {
        self.asking = self.asking.saturating_sub(1);
        self.trim()
    }

    /// A request that held a grant finished: how many grants to give back.
    pub fn finished(&mut self) -> u32 {
        self.in_use = self.in_use.saturating_sub(1);
        self.trim()
    }

    /// Every spare grant, to give back (the worker is draining).
    pub fn release_spare(&mut self) -> u32 {
        let spare = self.held - self.in_use;
        self.held = self.in_use;
        spare
    }

    fn trim(&mut self) -> u32 {
        let spare = self.held - self.in_use;
        let back = spare.saturating_sub(self.keep + self.asking);
        self.held -= back;
        back
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::ProxyGrants;
    use crate::ids::WorkerId;
    use proptest::prelude::*;

    #[test]
    fn keep_is_a_quarter_of_a_workers_share() {
        assert_eq!(keep_for(4, 2), 0);
        assert_eq!(keep_for(64, 2), 8);
        assert_eq!(keep_for(10_000, 2), 16);
        assert_eq!(keep_for(8, 0), 2);
    }

    #[test]
    fn spare_grants_serve_later_requests_without_asking() {
        let mut pool = GrantPool::new(2);
        assert_eq!(pool.admit(), Admit::Ask(3));
        assert_eq!(pool.granted(3), (true, 0));
        assert_eq!(pool.admit(), Admit::Go);
        assert_eq!(pool.admit(), Admit::Go);
        assert_eq!(pool.admit(), Admit::Ask(3));
        assert_eq!(pool.granted(0), (false, 0));
        assert_eq!(pool.finished(), 0);
        assert_eq!(pool.finished(), 0);
        assert_eq!(pool.finished(), 1, "three spare, two kept");
        assert_eq!((pool.held(), pool.in_use()), (2, 0));
        assert_eq!(pool.release_spare(), 2);
    }

    #[test]
    fn a_bursts_grants_serve_the_requests_still_waiting_for_an_answer() {
        let mut pool = GrantPool::new(2);
        // Four requests ask at once; the broker grants 3 to the first and none after.
        for _ in 0..4 {
            assert_eq!(pool.admit(), Admit::Ask(3));
        }
        assert_eq!(
            pool.granted(3),
            (true, 0),
            "kept for the three still asking"
        );
        assert_eq!(pool.granted(0), (true, 0));
        assert_eq!(pool.granted(0), (true, 0));
        assert_eq!(pool.granted(0), (false, 0), "all three in use");
        assert_eq!((pool.held(), pool.in_use()), (3, 3));
    }

    #[derive(Debug, Clone)]
    enum Step {
        Arrive(usize),
        Finish(usize),
        Die(usize),
    }

    proptest! {
        /// Workers running their pools against one broker table: requests in flight
        /// service-wide never exceed the bound, every worker's pool agrees with what the
        /// table says it holds, and spare grants never pass `keep`.
        #[test]
        fn pools_and_table_keep_the_service_wide_bound(
            max in 0..12u32,
            steps in proptest::collection::vec(
                prop_oneof![
                    3 => (0..3usize).prop_map(Step::Arrive),
                    2 => (0..3usize).prop_map(Step::Finish),
                    1 => (0..3usize).prop_map(Step::Die),
                ],
                0..80,
            ),
        ) {
            let keep = keep_for(max, 3);
            let mut table = ProxyGrants::default();
            let mut pools = vec![GrantPool::new(keep); 3];
            for s in steps {
                match s {
                    Step::Arrive(w) => {
                        if let Admit::Ask(want) = pools[w].admit() {
                            let got = table.acquire(max, WorkerId(w as u64), want);
                            let (_, back) = pools[w].granted(got);
                            table.give_back(WorkerId(w as u64), back);
                        }
                    }
                    Step::Finish(w) => {
                        if pools[w].in_use() > 0 {
                            let back = pools[w].finished();
                            table.give_back(WorkerId(w as u64), back);
                        }
                    }
                    Step::Die(w) => {
                        table.revoke(WorkerId(w as u64));
                        pools[w] = GrantPool::new(keep);
                    }
                }
                let in_flight: u32 = pools.iter().map(GrantPool::in_use).sum();
                prop_assert!(in_flight <= max, "{in_flight} in flight over {max}");
                for (w, pool) in pools.iter().enumerate() {
                    prop_assert_eq!(pool.held(), table.held_by(WorkerId(w as u64)));
                    prop_assert!(pool.held() - pool.in_use() <= keep);
                }
            }
        }
    }
}
