//! Every scenario × both platforms × a set of seeds, in parallel.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use servery_core::supervisor::Platform;
use servery_sim::FaultKind;

use crate::{COVERAGE_GOALS, Kinds, Mode, SCENARIOS, Scenario, replay_command_in, run_in};

pub(crate) const PLATFORMS: [Platform; 2] = [Platform::Posix, Platform::Windows];

#[derive(Debug, Clone)]
pub struct Failure {
    pub scenario: &'static str,
    pub platform: Platform,
    pub seed: u64,
    pub mode: Mode,
    pub reason: String,
}

impl Failure {
    pub fn replay(&self) -> String {
        replay_command_in(self.scenario, self.seed, self.platform, self.mode)
    }
}

/// A failure as every sweep prints it: the scenario, platform, seed and reason, then the
/// command that replays it.
impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FAILED {} {} seed={}: {}\n  replay: {}",
            self.scenario,
            self.platform.name(),
            self.seed,
            self.reason,
            self.replay()
        )
    }
}

/// How one fault kind fared over a sweep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindStats {
    /// Runs whose plan could use the kind (swarm mode: runs that enabled it).
    pub runs: u64,
    /// Of those, runs that reached the kind's goal ([`FaultKind::goal`]).
    pub reached: u64,
    /// Runs that reached the goal without the kind: a scenario that does not declare a
    /// kind it uses, or a swarm subset that leaked.
    pub leaked: u64,
}

#[derive(Debug, Default)]
pub struct SweepReport {
    pub mode: Mode,
    /// Only one scenario was swept (`--only`).
    pub filtered: bool,
    pub runs: u64,
    pub failed: u64,
    pub seconds: f64,
    pub seeds: u64,
    /// (scenario, platform) → (runs, failed)
    pub per_scenario: BTreeMap<(&'static str, &'static str), (u64, u64)>,
    pub coverage: BTreeMap<&'static str, u64>,
    pub kinds: BTreeMap<FaultKind, KindStats>,
    /// Scenarios a swarm sweep left out, with the reason.
    pub skipped: Vec<(&'static str, &'static str)>,
    pub failures: Vec<Failure>,
}

impl SweepReport {
    pub fn seeds_per_second(&self) -> f64 {
        self.seeds as f64 / self.seconds.max(1e-9)
    }

    pub fn missing_goals(&self) -> Vec<&'static str> {
        COVERAGE_GOALS
            .iter()
            .copied()
            .filter(|g| self.coverage.get(g).copied().unwrap_or(0) == 0)
            .collect()
    }

    /// Kinds some run enabled whose goal no run reached.
    pub fn unreached_kinds(&self) -> Vec<FaultKind> {
        self.kinds
            .iter()
            .filter(|(_, s)| s.runs > 0 && s.reached == 0)
            .map(|(k, _)| *k)
            .collect()
    }

    pub fn leaked_kinds(&self) -> Vec<FaultKind> {
        self.kinds
            .iter()
            .filter(|(_, s)| s.leaked > 0)
            .map(|(k, _)| *k)
            .collect()
    }

    /// What the sweep must reach to hold: every coverage goal in a full sweep of the
    /// whole catalog, every enabled fault kind's goal in a swarm sweep of it. A sweep of
    /// one scenario (`--only`) reports coverage without requiring it.
    pub fn holds(&self) -> bool {
        let reached = self.filtered
            || match self.mode {
                Mode::Full => self.missing_goals().is_empty(),
                Mode::Swarm => self.unreached_kinds().is_empty(),
            };
        self.failed == 0 && self.leaked_kinds().is_empty() && reached
    }
}

/// Run `filter`ed scenarios for every seed in `seeds` on both platforms with `jobs`
/// threads. Keeps the first 20 failures.
pub fn sweep(seeds: core::ops::Range<u64>, jobs: usize, filter: Option<&str>) -> SweepReport {
    let seeds: Vec<u64> = seeds.collect();
    sweep_seeds(&seeds, jobs, filter, Mode::Full)
}

/// [`sweep`] over any list of seeds, in `mode`. A swarm sweep runs only the scenarios
/// swarm mode takes ([`Scenario::swarm_exclusion`]).
pub fn sweep_seeds(seeds: &[u64], jobs: usize, filter: Option<&str>, mode: Mode) -> SweepReport {
    let mut skipped = Vec::new();
    let scenarios: Vec<&Scenario> = SCENARIOS
        .iter()
        .filter(|s| filter.is_none_or(|f| s.name == f))
        .filter(|s| match (mode, s.swarm_exclusion()) {
            (Mode::Swarm, Some(reason)) => {
                skipped.push((s.name, reason));
                false
            }
            _ => true,
        })
        .collect();
    let per_seed = (scenarios.len() * PLATFORMS.len()) as u64;
    let total = seeds.len() as u64 * per_seed;
    let next = AtomicU64::new(0);
    let report = Mutex::new(SweepReport::default());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                let mut local = SweepReport::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let seed = seeds[(i / per_seed) as usize];
                    let rest = (i % per_seed) as usize;
                    let scenario = scenarios[rest / PLATFORMS.len()];
                    let platform = PLATFORMS[rest % PLATFORMS.len()];
                    let result = run_in(scenario, seed, platform, mode, false);
                    local.runs += 1;
                    let entry = local
                        .per_scenario
                        .entry((scenario.name, platform.name()))
                        .or_default();
                    entry.0 += 1;
                    for goal in &result.outcome.coverage {
                        *local.coverage.entry(goal).or_default() += 1;
                    }
                    count_kinds(&mut local.kinds, result.kinds, &result.outcome.coverage);
                    if let Err(reason) = result.verdict {
                        local.failed += 1;
                        entry.1 += 1;
                        if local.failures.len() < 20 {
                            local.failures.push(Failure {
                                scenario: scenario.name,
                                platform,
                                seed,
                                mode,
                                reason,
                            });
                        }
                    }
                }
                let mut r = report.lock().unwrap_or_else(|e| e.into_inner());
                r.runs += local.runs;
                r.failed += local.failed;
                for (k, (a, b)) in local.per_scenario {
                    let e = r.per_scenario.entry(k).or_default();
                    e.0 += a;
                    e.1 += b;
                }
                for (k, v) in local.coverage {
                    *r.coverage.entry(k).or_default() += v;
                }
                for (k, v) in local.kinds {
                    let e = r.kinds.entry(k).or_default();
                    e.runs += v.runs;
                    e.reached += v.reached;
                    e.leaked += v.leaked;
                }
                r.failures.extend(local.failures);
            });
        }
    });
    let mut r = report.into_inner().unwrap_or_else(|e| e.into_inner());
    r.mode = mode;
    r.filtered = filter.is_some();
    r.skipped = skipped;
    r.seconds = started.elapsed().as_secs_f64();
    r.seeds = seeds.len() as u64;
    r.failures
        .sort_by_key(|f| (f.seed, f.scenario, f.platform.name()));
    r.failures.truncate(20);
    r
}

fn count_kinds(
    stats: &mut BTreeMap<FaultKind, KindStats>,
    enabled: Kinds,
    coverage: &std::collections::BTreeSet<&'static str>,
) {
    for kind in FaultKind::ALL {
        let reached = coverage.contains(kind.goal());
        if enabled.has(kind) {
            let s = stats.entry(kind).or_default();
            s.runs += 1;
            s.reached += u64::from(reached);
        } else if reached {
            stats.entry(kind).or_default().leaked += 1;
        }
    }
}

/// Run the benchmark scenario on as many seeds as fit in `seconds` with `jobs` threads.
/// Returns (runs, failed runs, elapsed seconds).
pub fn bench(seconds: f64, jobs: usize) -> (u64, u64, f64) {
    let next = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                while started.elapsed().as_secs_f64() < seconds {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    let result = crate::run(&crate::BENCH, seed, Platform::Posix, false);
                    if result.verdict.is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    (
        next.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
    )
}
