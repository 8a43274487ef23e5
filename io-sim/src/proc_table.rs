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
        self.by_id.iter().flatten()
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
