//! The simulated processes by worker id.
//!
//! The supervisor numbers workers from 1 upwards and the simulator keeps every process
//! it started until the run ends, so a vector indexed by id finds one without a search
//! and lists them in id order, as the `BTreeMap` it replaces did. Looking a process up
//! is most of what every simulated event does.

use servery_core::WorkerId;

use crate::process::Proc;

#[derive(Debug, Default)]
pub(crate) struct ProcTable {
    by_id: Vec<Option<Proc>>,
}

impl ProcTable {
    pub(crate) fn get(&self, id: &WorkerId) -> Option<&Proc> {
        self.by_id.get(usize::try_from(id.0).ok()?)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, id: &WorkerId) -> Option<&mut Proc> {
        self.by_id.get_mut(usize::try_from(id.0).ok()?)?.as_mut()
    }

    /// Every process, in id order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Proc> {
        // Not `flatten`, whose state per item cost more than the item's own test.
        self.by_id.iter().filter_map(Option::as_ref)
    }

    pub(crate) fn insert(&mut self, id: WorkerId, proc: Proc) {
        let Ok(i) = usize::try_from(id.0) else {
            unreachable!("worker ids are small sequence numbers");
        };
        if i >= self.by_id.len() {
            self.by_id.resize_with(i + 1, || None);
        }
        self.by_id[i] = Some(proc);
    }
}

#[cfg(test)]
mod tests {
    use servery_core::config::RawConfig;

    use super::*;
    use crate::plan::Behavior;

    #[test]
    fn processes_are_found_by_id_and_listed_in_id_order() {
        let config = RawConfig::default().validate().expect("valid");
        let mut t = ProcTable::default();
        for id in [3, 1, 7] {
            t.insert(
                WorkerId(id),
                Proc::new(WorkerId(id), 0, Behavior::Healthy, &config),
            );
        }
        let ids: Vec<u64> = t.values().map(|p| p.id.0).collect();
        assert_eq!(ids, [1, 3, 7]);
        assert_eq!(t.get(&WorkerId(3)).map(|p| p.id), Some(WorkerId(3)));
        assert!(t.get(&WorkerId(2)).is_none(), "a gap is no process");
        assert!(
            t.get_mut(&WorkerId(99)).is_none(),
            "past the end is no process"
        );
    }
}
