//! `compare`: every policy under every workload over the same seeds, in parallel, then
//! each metric's estimate with its interval and each policy's paired difference from
//! the first.

use core::time::Duration;
use std::sync::atomic::{AtomicUsize, Ordering};

use servery_core::supervisor::Platform;

use crate::research::metrics::{RunMetrics, measure};
use crate::research::policy::Policy;
use crate::research::stats::{Estimate, bootstrap_mean, quantile, wilson};
use crate::research::workload::{FaultClass, Workload};

/// The runs of one policy under one workload, in seed order.
#[derive(Debug, Clone)]
pub struct Cell {
    pub policy: String,
    pub workload: String,
    pub class: FaultClass,
    pub runs: Vec<RunMetrics>,
}

/// Run the matrix: `seeds` paired seeds per cell, on `jobs` threads.
pub fn run_matrix(
    policies: &[Policy],
    workloads: &[Workload],
    seeds: core::ops::Range<u64>,
    jobs: usize,
    platform: Platform,
) -> Vec<Cell> {
    let n = seeds.end - seeds.start;
    let cells: Vec<(usize, usize)> = (0..workloads.len())
        .flat_map(|w| (0..policies.len()).map(move |p| (w, p)))
        .collect();
    let tasks = cells.len() * n as usize;
    let next = AtomicUsize::new(0);
    let mut results: Vec<(usize, RunMetrics)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= tasks {
                            break out;
                        }
                        let (cell, k) = (i / n as usize, i as u64 % n);
                        let (w, p) = cells[cell];
                        let seed = seeds.start + k;
                        // Every policy was validated for every workload before the run.
                        if let Ok(m) = run_one(&policies[p], &workloads[w], seed, platform) {
                            out.push((cell, m));
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    results.sort_by_key(|(cell, m)| (*cell, m.seed));
    let mut out: Vec<Cell> = cells
        .iter()
        .map(|&(w, p)| Cell {
            policy: policies[p].name.clone(),
            workload: workloads[w].name.clone(),
            class: workloads[w].fault_class,
            runs: Vec::new(),
        })
        .collect();
    for (cell, m) in results {
        out[cell].runs.push(m);
    }
    out
}

/// One seed of one policy under one workload.
pub fn run_one(
    policy: &Policy,
    workload: &Workload,
    seed: u64,
    platform: Platform,
) -> Result<RunMetrics, servery_core::ConfigError> {
    let draw = workload.draw(seed);
    let spec = workload.spec(policy, seed, platform, &draw);
    let outcome = servery_sim::simulate(spec)?;
    let refused = policy
        .start_limit()
        .and_then(|limit| limit.first_refused(&unit_starts(&outcome, workload.workers)))
        .filter(|&t| t <= workload.duration_s);
    let Some(refused) = refused else {
        return Ok(measure(workload, &draw, seed, &outcome, None));
    };
    // Up to the refused start the supervisor's run is the unit's (its own limit is off
    // and nothing else depends on it); from there the unit is `failed`. The same seed
    // is run again with the service stopped just before that start: only the stop
    // differs, so everything before it replays as it was.
    let mut spec = workload.spec(policy, seed, platform, &draw);
    // Spawn times are whole milliseconds, rounded down: the refused start is at or after
    // its millisecond, and the start before it (in an earlier millisecond) before it.
    let cut = Duration::from_millis((refused * 1000.0).round() as u64)
        .saturating_sub(Duration::from_nanos(1));
    spec.liveness_at = cut;
    spec.stop_at = cut;
    let outcome = servery_sim::simulate(spec)?;
    Ok(measure(workload, &draw, seed, &outcome, Some(refused)))
}

/// The starts a systemd unit would count: its own start (the first worker's spawn) and
/// every replacement after the first generation. A policy with a start limit has no
/// recycling (the loader refuses it), so every later spawn replaces a crash or a hang.
pub fn unit_starts(outcome: &servery_sim::Outcome, workers: i64) -> Vec<f64> {
    let secs = |ms: &u64| *ms as f64 / 1000.0;
    let spawns = &outcome.spawn_times_ms;
    spawns
        .first()
        .map(secs)
        .into_iter()
        .chain(spawns.iter().skip(workers.max(1) as usize).map(secs))
        .collect()
}

/// The scalar metrics, by name: (name, per-run value; `None` where it does not apply).
pub type Scalar = (&'static str, fn(&RunMetrics) -> Option<f64>);

pub const SCALARS: &[Scalar] = &[
    ("availability", |m| Some(m.availability)),
    ("capacity_seconds_lost", |m| Some(m.capacity_seconds_lost)),
    ("time_to_detect_s", |m| mean_of(&m.detect_s)),
    ("time_to_recover_s", |m| mean_of(&m.recover_s)),
    ("restarts", |m| Some(m.restarts)),
    ("recycles", |m| Some(m.recycles)),
    ("boots", |m| Some(m.boots)),
    ("time_to_give_up_s", |m| m.give_up_s),
    ("peak_processes", |m| Some(m.peak_processes)),
    ("peak_memory_mb", |m| Some(m.peak_memory_mb)),
    ("amplification", |m| {
        Some(m.amplification).filter(|a| a.is_finite())
    }),
    // Last, so every metric before them keeps its bootstrap stream.
    ("served_within_bound", |m| Some(m.served_within_bound)),
    ("peak_worker_rss_mb", |m| m.peak_worker_rss_mb),
];

fn mean_of(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// One cell's summary.
#[derive(Debug, Clone)]
pub struct Summary {
    pub metrics: Vec<(&'static str, Estimate)>,
    pub p_failed: Estimate,
    /// Pooled quantiles (p50, p90, p99) of the detect and recover times.
    pub detect_q: [f64; 3],
    pub recover_q: [f64; 3],
}

impl Summary {
    /// The estimate of the metric named `name`, if the summary has one.
    pub fn estimate(&self, name: &str) -> Option<Estimate> {
        self.metrics
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, e)| *e)
    }
}

pub fn summarize(cell: &Cell) -> Summary {
    let metrics = SCALARS
        .iter()
        .enumerate()
        .map(|(i, (name, f))| {
            let xs: Vec<f64> = cell.runs.iter().filter_map(f).collect();
            (*name, bootstrap_mean(&xs, i as u64))
        })
        .collect();
    let failed = cell.runs.iter().filter(|m| m.failed).count() as u64;
    let pooled = |f: fn(&RunMetrics) -> &Vec<f64>| {
        let all: Vec<f64> = cell
            .runs
            .iter()
            .flat_map(|m| f(m).iter().copied())
            .collect();
        [0.5, 0.9, 0.99].map(|q| quantile(&all, q))
    };
    Summary {
        metrics,
        p_failed: wilson(failed, cell.runs.len() as u64),
        detect_q: pooled(|m| &m.detect_s),
        recover_q: pooled(|m| &m.recover_s),
    }
}

/// The paired difference `cell − base` of each metric over the seeds both have a value
/// for, with its bootstrap interval.
pub fn paired(base: &Cell, cell: &Cell) -> Vec<(&'static str, Estimate)> {
    let mut out: Vec<(&'static str, Estimate)> = SCALARS
        .iter()
        .enumerate()
        .map(|(i, (name, f))| {
            let d: Vec<f64> = base
                .runs
                .iter()
                .zip(&cell.runs)
                .filter_map(|(a, b)| Some(f(b)? - f(a)?))
                .collect();
            (*name, bootstrap_mean(&d, 100 + i as u64))
        })
        .collect();
    let d: Vec<f64> = base
        .runs
        .iter()
        .zip(&cell.runs)
        .map(|(a, b)| f64::from(u8::from(b.failed)) - f64::from(u8::from(a.failed)))
        .collect();
    out.push(("p_failed", bootstrap_mean(&d, 99)));
    out
}
