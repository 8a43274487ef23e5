//! The supervisor's live workers by id.
//!
//! A service has a handful of live workers, and every step of the parent looks at all of
//! them several times (its next deadline, the invariants, the ready count), so they sit in
//! one vector kept in id order rather than in a B-tree: the same lookups and the same
//! order, without a tree's node handling on every pass. Ids are handed out in increasing
//! order, so a new worker nearly always goes at the end.

use core::fmt;
use core::time::Duration;

use crate::ids::WorkerId;

use super::worker::Worker;

#[derive(Clone, Default)]
pub(super) struct WorkerTable {
    /// Ordered by id, each id once.
    workers: Vec<Worker>,
    /// The least margin [`Worker::beat_margin`] of the workers in the table, kept as they
    /// come and go: the parent's watch period is worked out from it after every step, and
    /// a worker's timings never change once it is filed.
    least_margin: Option<Duration>,
}

impl WorkerTable {
    fn find(&self, id: WorkerId) -> Result<usize, usize> {
        // Nearly every worker looked up is one of the last few (the newest generation),
        // but there are few enough that a binary search is as cheap as anything.
        self.workers.binary_search_by_key(&id, |w| w.id)
    }

    pub(super) fn get(&self, id: &WorkerId) -> Option<&Worker> {
        self.find(*id).ok().map(|i| &self.workers[i])
    }

    pub(super) fn get_mut(&mut self, id: &WorkerId) -> Option<&mut Worker> {
        self.find(*id).ok().map(|i| &mut self.workers[i])
    }

    pub(super) fn contains_key(&self, id: &WorkerId) -> bool {
        self.find(*id).is_ok()
    }

    /// Adds `worker` under `id` (its own id), replacing one already there.
    pub(super) fn insert(&mut self, id: WorkerId, worker: Worker) {
        debug_assert_eq!(id, worker.id, "a worker is filed under its own id");
        match self.find(id) {
            Ok(i) => self.workers[i] = worker,
            Err(i) => self.workers.insert(i, worker),
        }
        self.least_margin = self.workers.iter().map(Worker::beat_margin).min();
    }

    pub(super) fn remove(&mut self, id: &WorkerId) -> Option<Worker> {
        let i = self.find(*id).ok()?;
        let worker = self.workers.remove(i);
        self.least_margin = self.workers.iter().map(Worker::beat_margin).min();
        Some(worker)
    }

    /// The least [`Worker::beat_margin`] of the workers, if there are any.
    pub(super) fn least_margin(&self) -> Option<Duration> {
        self.least_margin
    }

    /// Every worker, in id order.
    pub(super) fn values(&self) -> core::slice::Iter<'_, Worker> {
        self.workers.iter()
    }

    pub(super) fn values_mut(&mut self) -> core::slice::IterMut<'_, Worker> {
        self.workers.iter_mut()
    }

    /// Every worker's id, in order.
    pub(super) fn keys(&self) -> impl Iterator<Item = &WorkerId> {
        self.workers.iter().map(|w| &w.id)
    }

    /// Every worker with its id, in id order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&WorkerId, &Worker)> {
        self.workers.iter().map(|w| (&w.id, w))
    }

    pub(super) fn len(&self) -> usize {
        self.workers.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }
}

/// As the map it stands for prints.
impl fmt::Debug for WorkerTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::ids::{Generation, Slot};
    use crate::supervisor::Role;
    use crate::time::Instant;

    fn worker(id: u64, requests: u64) -> Worker {
        let mut w = Worker::new(
            WorkerId(id),
            Slot(0),
            Generation(1),
            Role::Member,
            Instant::ZERO,
        );
        w.requests = requests;
        w
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Remove(u64),
        Bump(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..24u64, any::<u64>()).prop_map(|(id, n)| Op::Insert(id, n)),
            (0..24u64).prop_map(Op::Remove),
            (0..24u64).prop_map(Op::Bump),
        ]
    }

    /// What the table answers, as the map it replaced would.
    fn seen(t: &WorkerTable) -> Vec<(u64, u64)> {
        t.iter().map(|(id, w)| (id.0, w.requests)).collect()
    }

    proptest! {
        #[test]
        fn it_answers_as_an_ordered_map_does(ops in proptest::collection::vec(op(), 0..64)) {
            let mut table = WorkerTable::default();
            let mut map: BTreeMap<WorkerId, Worker> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(id, n) => {
                        table.insert(WorkerId(id), worker(id, n));
                        map.insert(WorkerId(id), worker(id, n));
                    }
                    Op::Remove(id) => {
                        let a = table.remove(&WorkerId(id)).map(|w| w.requests);
                        let b = map.remove(&WorkerId(id)).map(|w| w.requests);
                        prop_assert_eq!(a, b);
                    }
                    Op::Bump(id) => {
                        if let Some(w) = table.get_mut(&WorkerId(id)) {
                            w.requests = w.requests.wrapping_add(1);
                        }
                        if let Some(w) = map.get_mut(&WorkerId(id)) {
                            w.requests = w.requests.wrapping_add(1);
                        }
                    }
                }
                let expected: Vec<(u64, u64)> =
                    map.iter().map(|(id, w)| (id.0, w.requests)).collect();
                prop_assert_eq!(seen(&table), expected);
                prop_assert_eq!(table.len(), map.len());
                prop_assert_eq!(table.is_empty(), map.is_empty());
                for id in 0..24 {
                    let id = WorkerId(id);
                    prop_assert_eq!(table.contains_key(&id), map.contains_key(&id));
                    prop_assert_eq!(
                        table.get(&id).map(|w| w.requests),
                        map.get(&id).map(|w| w.requests)
                    );
                }
                prop_assert!(table.keys().copied().eq(map.keys().copied()));
            }
        }
    }
}
