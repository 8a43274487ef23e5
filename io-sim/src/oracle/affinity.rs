//! The **CPU affinity rule** (decision 0122), judged from the spawns the parent orders and
//! the CPUs the simulated host gave it, never from the supervisor's own plan:
//!
//! - a worker is pinned only under `worker_cpu_affinity = auto`, when the workers host an
//!   application and the host's CPUs are known; otherwise it runs unpinned;
//! - a pinned worker's CPUs are some of the host's, at least one;
//! - **partition**: with N workers on C ≥ N CPUs, the slots of one generation get
//!   disjoint shares of C/N CPUs (one more for some), which together cover the host's;
//!   with N > C, each slot gets one CPU and no CPU serves more than ⌈N/C⌉ slots;
//! - **replacement**: every worker of a slot of one generation (crash and recycle
//!   replacements) gets the CPUs the slot's first worker got. A reload that changes N is a
//!   new generation, judged by its own N.

use std::collections::BTreeMap;

use servery_core::WorkerId;
use servery_core::config::{CpuAffinity, ValidConfig};
use servery_core::cpu_affinity::CpuSet;

/// What one spawn showed, for the coverage labels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CpuFacts {
    /// A pinned slot's later worker, on the slot's CPUs.
    pub replaced_pinned: bool,
    /// A generation's first pinned worker, after a pinned generation with another count.
    pub repartitioned: bool,
}

/// One attempt at a generation: a rejected reload's number is used again by the next.
#[derive(Debug, Clone)]
struct Shares {
    workers: u32,
    affinity: CpuAffinity,
    by_slot: BTreeMap<u64, Option<CpuSet>>,
}

#[derive(Debug, Default)]
pub(crate) struct CpuOracle {
    host: CpuSet,
    generations: BTreeMap<u64, Shares>,
    /// The worker count of the last generation that was pinned.
    last_pinned_workers: Option<u32>,
    violations: Vec<String>,
}

impl CpuOracle {
    pub(crate) fn new(host: CpuSet) -> CpuOracle {
        CpuOracle {
            host,
            ..CpuOracle::default()
        }
    }

    pub(crate) fn take_violations(&mut self) -> Vec<String> {
        core::mem::take(&mut self.violations)
    }

    fn fail(&mut self, what: String) {
        self.violations.push(format!("CPU affinity rule: {what}"));
    }

    /// The parent ordered `id` spawned for `slot` of `generation` under `config`, on `cpus`.
    pub(crate) fn spawned(
        &mut self,
        id: WorkerId,
        slot: u64,
        generation: u64,
        config: &ValidConfig,
        cpus: Option<&CpuSet>,
    ) -> CpuFacts {
        let mut facts = CpuFacts::default();
        let n = config.workers();
        let affinity = config.worker_cpu_affinity();
        let application = config.features().application;
        let should_pin = affinity == CpuAffinity::Auto && application && !self.host.is_empty();
        match (should_pin, cpus) {
            (false, Some(set)) => {
                let why = if affinity == CpuAffinity::Off {
                    "worker_cpu_affinity is off"
                } else if !application {
                    "file-serving workers are not pinned"
                } else {
                    "the host's CPUs are unknown"
                };
                self.fail(format!(
                    "{id} (slot {slot}, generation {generation}) pinned to {set}, but {why}"
                ));
            }
            (true, None) => self.fail(format!(
                "{id} (slot {slot}, generation {generation}) of an application under auto started unpinned, with CPUs {} to share",
                self.host
            )),
            (true, Some(set)) if set.is_empty() || !set.is_subset(&self.host) => {
                self.fail(format!(
                    "{id} (slot {slot}, generation {generation}) pinned to `{set}`, not a non-empty part of the host's {}",
                    self.host
                ));
            }
            _ => {}
        }
        let fresh = self
            .generations
            .get(&generation)
            .is_none_or(|s| s.workers != n || s.affinity != affinity);
        if fresh {
            self.generations.insert(
                generation,
                Shares {
                    workers: n,
                    affinity,
                    by_slot: BTreeMap::new(),
                },
            );
        }
        let Some(shares) = self.generations.get_mut(&generation) else {
            return facts;
        };
        let cpus = cpus.cloned();
        if let Some(first) = shares.by_slot.get(&slot) {
            if *first != cpus {
                let show = |c: &Option<CpuSet>| {
                    c.as_ref().map_or("unpinned".to_owned(), |s| s.to_string())
                };
                let (was, now) = (show(first), show(&cpus));
                self.fail(format!(
                    "replacement {id} of slot {slot} (generation {generation}) started on {now}, not on its slot's CPUs {was}"
                ));
            } else {
                facts.replaced_pinned = cpus.is_some();
            }
            return facts;
        }
        shares.by_slot.insert(slot, cpus.clone());
        let Some(set) = cpus else {
            return facts;
        };
        if shares.by_slot.values().filter(|c| c.is_some()).count() == 1 {
            facts.repartitioned = self.last_pinned_workers.is_some_and(|w| w != n);
            self.last_pinned_workers = Some(n);
        }
        let c = self.host.len();
        let others: Vec<(u64, CpuSet)> = shares
            .by_slot
            .iter()
            .filter(|(s, _)| **s != slot)
            .filter_map(|(s, c)| Some((*s, c.clone()?)))
            .collect();
        let complete = shares.by_slot.len() == n as usize;
        let taken: Vec<CpuSet> = shares.by_slot.values().flatten().cloned().collect();
        if n as usize <= c {
            let (lo, hi) = (c / n as usize, c.div_ceil(n as usize));
            if set.len() < lo || set.len() > hi {
                self.fail(format!(
                    "partition: {id} (slot {slot} of {n}) got {} CPUs ({set}) of the host's {c}; a share is {lo} or {hi}",
                    set.len()
                ));
            }
            if let Some((other, theirs)) = others.iter().find(|(_, o)| !o.is_disjoint(&set)) {
                self.fail(format!(
                    "partition: {id} (slot {slot} of {n}, generation {generation}) got {set}, which overlaps slot {other}'s {theirs}; with {n} workers on {c} CPUs the slots' CPUs are disjoint"
                ));
            }
            if complete {
                let union = CpuSet::new(taken.iter().flat_map(|s| s.as_slice().iter().copied()));
                if union != self.host {
                    self.fail(format!(
                        "partition: the {n} slots of generation {generation} run on {union}, not on all of the host's {}",
                        self.host
                    ));
                }
            }
        } else {
            if set.len() != 1 {
                self.fail(format!(
                    "partition: {id} (slot {slot} of {n}) got {set}; with more workers than the {c} CPUs each gets one"
                ));
            }
            let sharing = taken.iter().filter(|s| **s == set).count();
            let most = (n as usize).div_ceil(c);
            if sharing > most {
                self.fail(format!(
                    "partition: {sharing} slots of generation {generation} on CPU {set}; {n} workers on {c} CPUs put at most {most} on one"
                ));
            }
        }
        facts
    }
}
