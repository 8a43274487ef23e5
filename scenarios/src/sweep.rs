//! Every scenario × both platforms × a range of seeds, in parallel.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use servery_core::supervisor::Platform;

use crate::{COVERAGE_GOALS, SCENARIOS, replay_command, run};

pub const PLATFORMS: [Platform; 2] = [Platform::Posix, Platform::Windows];

#[derive(Debug, Clone)]
pub struct Failure {
    pub scenario: &'static str,
    pub platform: Platform,
    pub seed: u64,
    pub reason: String,
}

impl Failure {
    pub fn replay(&self) -> String {
        replay_command(self.scenario, self.seed, self.platform)
    }
}

#[derive(Debug, Default)]
pub struct SweepReport {
    pub runs: u64,
    pub failed: u64,
    pub seconds: f64,
    pub seeds: u64,
    /// (scenario, platform) → (runs, failed)
    pub per_scenario: BTreeMap<(&'static str, &'static str), (u64, u64)>,
    pub coverage: BTreeMap<&'static str, u64>,
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

    pub fn holds(&self) -> bool {
        self.failed == 0 && self.missing_goals().is_empty()
    }
}

/// Run `filter`ed scenarios for every seed in `seeds` on both platforms with `jobs`
/// threads. Keeps the first 20 failures.
pub fn sweep(seeds: core::ops::Range<u64>, jobs: usize, filter: Option<&str>) -> SweepReport {
    let scenarios: Vec<_> = SCENARIOS
        .iter()
        .filter(|s| filter.is_none_or(|f| s.name == f))
        .collect();
    let per_seed = (scenarios.len() * PLATFORMS.len()) as u64;
    let total = (seeds.end - seeds.start) * per_seed;
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
                    let seed = seeds.start + i / per_seed;
                    let rest = (i % per_seed) as usize;
                    let scenario = scenarios[rest / PLATFORMS.len()];
                    let platform = PLATFORMS[rest % PLATFORMS.len()];
                    let result = run(scenario, seed, platform, false);
                    local.runs += 1;
                    let entry = local
                        .per_scenario
                        .entry((scenario.name, platform.name()))
                        .or_default();
                    entry.0 += 1;
                    for goal in &result.outcome.coverage {
                        *local.coverage.entry(goal).or_default() += 1;
                    }
                    if let Err(reason) = result.verdict {
                        local.failed += 1;
                        entry.1 += 1;
                        if local.failures.len() < 20 {
                            local.failures.push(Failure {
                                scenario: scenario.name,
                                platform,
                                seed,
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
                r.failures.extend(local.failures);
            });
        }
    });
    let mut r = report.into_inner().unwrap_or_else(|e| e.into_inner());
    r.seconds = started.elapsed().as_secs_f64();
    r.seeds = seeds.end - seeds.start;
    r.failures
        .sort_by_key(|f| (f.seed, f.scenario, f.platform.name()));
    r.failures.truncate(20);
    r
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
                    let result = run(&crate::BENCH, seed, Platform::Posix, false);
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
