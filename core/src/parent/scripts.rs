//! The CGI scripts each worker is running, by process group, as the workers report them
//! (decision 0092): when a worker is gone — killed with SIGKILL, crashed, or exited
//! without ending them — the groups it still had are the parent's to kill, since the
//! worker's own process group never held them (each script leads its own).

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::WorkerId;

/// The most groups recorded for one worker: far above any `--cgi-max-concurrent` a
/// machine can run, so a worker that reports without end cannot grow the parent.
pub(super) const MAX_GROUPS_PER_WORKER: usize = 1 << 16;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ScriptGroups {
    live: BTreeMap<WorkerId, BTreeSet<u32>>,
}

impl ScriptGroups {
    /// `worker` started a script leading group `pgid`. A pgid of 0 or 1 (which would
    /// signal the parent's own group, or every process) is never recorded.
    pub(super) fn started(&mut self, worker: WorkerId, pgid: u32) {
        if pgid <= 1 {
            return;
        }
        let groups = self.live.entry(worker).or_default();
        if groups.len() < MAX_GROUPS_PER_WORKER {
            groups.insert(pgid);
        }
    }

    /// `worker`'s script leading `pgid` ended (its group was killed by the worker).
    pub(super) fn ended(&mut self, worker: WorkerId, pgid: u32) {
        if let Some(groups) = self.live.get_mut(&worker) {
            groups.remove(&pgid);
            if groups.is_empty() {
                self.live.remove(&worker);
            }
        }
    }

    /// `worker` is gone: the groups it left, to be killed, and forgotten.
    pub(super) fn gone(&mut self, worker: WorkerId) -> Vec<u32> {
        self.live
            .remove(&worker)
            .map(|g| g.into_iter().collect())
            .unwrap_or_default()
    }

    /// Workers with at least one group recorded.
    pub(super) fn workers(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.live.keys().copied()
    }

    /// Groups recorded for `worker`.
    #[cfg(test)]
    pub(super) fn of(&self, worker: WorkerId) -> usize {
        self.live.get(&worker).map_or(0, BTreeSet::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_workers_groups_are_given_once_and_ended_ones_never() {
        let mut s = ScriptGroups::default();
        s.started(WorkerId(1), 100);
        s.started(WorkerId(1), 101);
        s.started(WorkerId(2), 200);
        s.started(WorkerId(1), 1);
        s.started(WorkerId(1), 0);
        assert_eq!(
            s.workers().collect::<Vec<_>>(),
            [WorkerId(1), WorkerId(2)],
            "the workers with groups recorded"
        );
        s.ended(WorkerId(1), 101);
        assert_eq!(
            s.gone(WorkerId(1)),
            vec![100],
            "ended groups and pgids 0/1 never killed"
        );
        assert_eq!(s.gone(WorkerId(1)), Vec::<u32>::new(), "given once");
        assert_eq!(s.of(WorkerId(2)), 1, "another worker's groups stay");
    }

    #[test]
    fn no_more_groups_than_the_cap_are_recorded_for_a_worker() {
        let mut s = ScriptGroups::default();
        let cap = MAX_GROUPS_PER_WORKER as u32;
        for pgid in 2..cap + 12 {
            s.started(WorkerId(1), pgid);
        }
        assert_eq!(
            s.of(WorkerId(1)),
            MAX_GROUPS_PER_WORKER,
            "cap rule: at most MAX_GROUPS_PER_WORKER groups for one worker"
        );
    }
}
