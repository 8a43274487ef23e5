//! The workers the shared listener can hand a connection to, kept between connections.
//!
//! Which workers can take one changes far less often than connections arrive: a worker
//! starts or stops accepting, dies, is paused or wedged, fills up or has room again, or
//! its `accept` fails for a while. The list is worked out again only after one of those
//! (the world says so through [`Takers::changed`]) or once a failing `accept` may work
//! again; in between, handing out a connection is a draw from the kept list. Debug builds
//! (every gate run) work it out afresh at every draw and assert that it is the kept one,
//! so a change the world forgot to report fails the gates instead of skewing a run.

use servery_core::{Instant, WorkerId};

use crate::proc_table::ProcTable;

#[derive(Debug, Default)]
pub(crate) struct Takers {
    /// In id order, as the listener draws among them.
    ids: Vec<WorkerId>,
    /// Something that decides who can take a connection has changed since `ids`.
    stale: bool,
    /// The earliest time a worker left out of `ids` for a failing `accept` may take
    /// connections again (`ZERO`: none is waiting).
    until: Instant,
}

impl Takers {
    /// A fresh list, to be worked out at the next draw.
    pub(crate) fn new() -> Self {
        Takers {
            ids: Vec::new(),
            stale: true,
            until: Instant::ZERO,
        }
    }

    /// Something that decides whether a worker can take a connection changed.
    pub(crate) fn changed(&mut self) {
        self.stale = true;
    }

    /// The workers that can take a connection at `now`, in id order.
    pub(crate) fn at(&mut self, now: Instant, procs: &ProcTable) -> &[WorkerId] {
        if self.stale || (self.until != Instant::ZERO && now >= self.until) {
            self.work_out(now, procs);
        } else if cfg!(debug_assertions) {
            let kept = core::mem::take(&mut self.ids);
            self.work_out(now, procs);
            assert_eq!(
                kept, self.ids,
                "the kept takers at {now} are not those the processes give: a change went \
                 unreported"
            );
        }
        &self.ids
    }

    fn work_out(&mut self, now: Instant, procs: &ProcTable) {
        self.ids.clear();
        self.until = Instant::ZERO;
        for p in procs.values().filter(|p| p.could_take()) {
            if now >= p.accept_fails_until {
                self.ids.push(p.id);
            } else if self.until == Instant::ZERO || p.accept_fails_until < self.until {
                self.until = p.accept_fails_until;
            }
        }
        self.stale = false;
    }
}

#[cfg(test)]
mod tests {
    use servery_core::config::RawConfig;

    use super::*;
    use crate::plan::Behavior;
    use crate::process::Proc;

    fn table(n: u64) -> ProcTable {
        let config = RawConfig::default().validate().expect("valid");
        let mut t = ProcTable::default();
        for id in 1..=n {
            let mut p = Proc::new(WorkerId(id), 0, Behavior::Healthy, &config);
            p.accepting = true;
            t.insert(WorkerId(id), p);
        }
        t
    }

    fn ids(list: &[WorkerId]) -> Vec<u64> {
        list.iter().map(|w| w.0).collect()
    }

    #[test]
    fn a_reported_change_is_seen_at_the_next_draw() {
        let mut procs = table(3);
        let mut takers = Takers::new();
        let t = Instant::from_nanos(10);
        assert_eq!(ids(takers.at(t, &procs)), [1, 2, 3]);
        if let Some(p) = procs.get_mut(&WorkerId(2)) {
            p.accepting = false;
        }
        takers.changed();
        assert_eq!(ids(takers.at(t, &procs)), [1, 3]);
    }

    #[test]
    fn a_worker_whose_accept_fails_joins_when_it_works_again() {
        let mut procs = table(2);
        let until = Instant::from_nanos(500);
        if let Some(p) = procs.get_mut(&WorkerId(1)) {
            p.accept_fails_until = until;
        }
        let mut takers = Takers::new();
        assert_eq!(ids(takers.at(Instant::from_nanos(499), &procs)), [2]);
        // No change reported: the time alone brings it back.
        assert_eq!(ids(takers.at(until, &procs)), [1, 2]);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a change went unreported")]
    fn an_unreported_change_fails_a_debug_build() {
        let mut procs = table(2);
        let mut takers = Takers::new();
        let t = Instant::from_nanos(1);
        let _ = takers.at(t, &procs);
        if let Some(p) = procs.get_mut(&WorkerId(1)) {
            p.paused = true;
        }
        let _ = takers.at(t, &procs);
    }
}
