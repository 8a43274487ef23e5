//! The cluster gates (decision 0096): two or three hosts sharing leases, locks and
//! budgets through the simulator's etcd model, each judged by the oracle of
//! `servery_sim::cluster` after every step, plus a predicate of its own.

mod catalog;

use std::time::Instant as WallInstant;

pub use catalog::CLUSTER_SCENARIOS;
use servery_sim::cluster::{ClusterOutcome, ClusterSpec, simulate_cluster};

/// A cluster scenario: a spec drawn from the seed, and what the run must show.
pub struct ClusterScenario {
    pub name: &'static str,
    pub about: &'static str,
    pub build: fn(u64) -> ClusterSpec,
    pub expect: fn(&ClusterOutcome) -> Result<(), String>,
}

impl core::fmt::Debug for ClusterScenario {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name)
    }
}

pub fn find_cluster(name: &str) -> Option<&'static ClusterScenario> {
    CLUSTER_SCENARIOS.iter().find(|s| s.name == name)
}

/// One run: the oracle's violations and the scenario's own predicate, first failure
/// first.
pub fn run_cluster(s: &ClusterScenario, seed: u64) -> (ClusterOutcome, Result<(), String>) {
    let outcome = simulate_cluster((s.build)(seed));
    let verdict = match outcome.violations.first() {
        Some(v) => Err(v.clone()),
        None => (s.expect)(&outcome),
    };
    (outcome, verdict)
}

/// What a cluster sweep found.
#[derive(Debug, Default)]
pub struct ClusterSweep {
    pub runs: u64,
    pub failures: Vec<(&'static str, u64, String)>,
    pub publishes: u64,
    pub fenced: u64,
    pub busy: u64,
    pub unavailable: u64,
    pub saturated: u64,
    pub leases_lost: u64,
    pub regained_after_death: u64,
    pub seconds: f64,
}

/// Every seed of `seeds` on `only` (or every cluster scenario), on `jobs` threads.
pub fn sweep_cluster(seeds: &[u64], jobs: usize, only: Option<&str>) -> ClusterSweep {
    let started = WallInstant::now();
    let scenarios: Vec<&'static ClusterScenario> = CLUSTER_SCENARIOS
        .iter()
        .filter(|s| only.is_none_or(|n| n == s.name))
        .collect();
    let work: Vec<(&'static ClusterScenario, u64)> = scenarios
        .iter()
        .flat_map(|s| seeds.iter().map(move |seed| (*s, *seed)))
        .collect();
    let jobs = jobs.max(1);
    let chunks: Vec<Vec<(&'static ClusterScenario, u64)>> = (0..jobs)
        .map(|j| work.iter().skip(j).step_by(jobs).copied().collect())
        .collect();
    let parts: Vec<ClusterSweep> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    let mut r = ClusterSweep::default();
                    for (s, seed) in chunk {
                        let (o, verdict) = run_cluster(s, seed);
                        r.runs += 1;
                        r.publishes += o.publishes;
                        r.fenced += o.total(|h| h.fenced);
                        r.busy += o.total(|h| h.busy);
                        r.unavailable += o.total(|h| h.unavailable);
                        r.saturated += o.total(|h| h.saturated);
                        r.leases_lost += o.total(|h| h.leases_lost);
                        r.regained_after_death += o.regained_after_death;
                        if let Err(e) = verdict {
                            r.failures.push((s.name, seed, e));
                        }
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut all = ClusterSweep::default();
    for p in parts {
        all.runs += p.runs;
        all.failures.extend(p.failures);
        all.publishes += p.publishes;
        all.fenced += p.fenced;
        all.busy += p.busy;
        all.unavailable += p.unavailable;
        all.saturated += p.saturated;
        all.leases_lost += p.leases_lost;
        all.regained_after_death += p.regained_after_death;
    }
    all.failures.sort_by_key(|(n, s, _)| (*n, *s));
    all.seconds = started.elapsed().as_secs_f64();
    all
}
