//! The **intake rule**, judged from the looks the simulated host gave the parent: the
//! first generation fails to start only on a candidate's end found in a look before the
//! one that completed its READYs. A look hands the parent everything it found at once
//! (the simulator interleaves its sources at random, as a poll reports ready descriptors
//! in any order); what one look found was all sent before any of it was seen, so a READY
//! found with another candidate's crash counts as sent before it.

use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(crate) struct IntakeOracle {
    /// Looks given to the parent so far (the one in progress).
    look: u64,
    /// The look that found each first-generation candidate's first READY.
    ready: BTreeMap<u64, u64>,
    /// The first look that found a first-generation candidate's end (EOF, a malformed
    /// frame, its reap).
    first_end: Option<(u64, u64)>,
    /// The first generation's worker count, from its first spawn.
    size: Option<u32>,
}

impl IntakeOracle {
    pub(crate) fn look_begins(&mut self) {
        self.look += 1;
    }

    pub(crate) fn first_generation(&mut self, workers: u32) {
        self.size.get_or_insert(workers);
    }

    pub(crate) fn ready(&mut self, worker: u64, generation: u64) {
        if generation == 1 {
            self.ready.entry(worker).or_insert(self.look);
        }
    }

    pub(crate) fn ended(&mut self, worker: u64, generation: u64) {
        if generation == 1 && self.first_end.is_none() {
            self.first_end = Some((worker, self.look));
        }
    }

    /// The parent failed the start: a breach when every candidate's READY was found no
    /// later than the look that found the first end.
    pub(crate) fn start_failed(&self) -> Option<String> {
        let (worker, end) = self.first_end?;
        let size = self.size? as usize;
        let last_ready = *self.ready.values().max()?;
        (self.ready.len() >= size && last_ready <= end).then(|| {
            format!(
                "intake rule: the start failed on worker w{worker}'s end, found in look {end}, \
                 but every one of the {size} candidates' READYs had been found by then (the \
                 last in look {last_ready}): what one look finds was sent before any of it \
                 was seen, so the first generation was up and the end is a member's"
            )
        })
    }
}
