//! The supervisor's own run of a rejuvenation model, measured by regenerative cycles.
//!
//! One worker ages under the workload's lifetime model; the policy's age recycling
//! (`worker_max_age`) is the rejuvenation and its crash replacement the repair. A cycle
//! begins when a worker becomes ready and ends when the next one does, so cycles are
//! independent and alike (a regenerative process): each seed runs exactly one cycle,
//! from a fresh worker, and the steady-state shares of time are ratios of sums over
//! seeds (the renewal-reward theorem). No warm-up, so no warm-up bias.
//!
//! In a cycle, time is *failed* while no worker is ready and no recycle is under way
//! (the crash, the restart delay, the replacement's boot), and *rejuvenating* from the
//! recycle's replacement spawn to its swap-in (servery overlaps the two workers, so this
//! is time spent on rejuvenation, not lost service; an old worker that crashes during it
//! leaves the rest of the recycle counted as rejuvenating, as in the models, where the
//! rejuvenation has begun).

use core::time::Duration;

use servery_core::supervisor::{ExitReason, Platform};

use crate::research::policy::Policy;
use crate::research::stats::{Estimate, Z95};
use crate::research::workload::Workload;

/// One regenerative cycle's times (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cycle {
    pub length: f64,
    pub failed: f64,
    pub rejuvenating: f64,
    /// Ended by a recycle (rejuvenation) rather than a crash (failure).
    pub recycled: bool,
}

/// Why a seed's run gave no cycle.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CycleError {
    #[error("the workload has no aging model: a cycle needs a worker lifetime")]
    NoLifetime,
    #[error("the policy's configuration is refused: {0}")]
    Config(String),
    #[error("seed {seed}: the run ended before its first cycle did ({what})")]
    Unfinished { seed: u64, what: &'static str },
}

/// The policy of a rejuvenation model on the supervisor: age recycling at `age_s`
/// (`None`: never), no jitter, a crash's restart after `restart_delay_s` every time, and
/// heartbeats far apart (a crash is seen by its exit, not by a missed beat), and room
/// for a boot of `boot_s`.
pub fn age_policy(name: String, restart_delay_s: f64, age_s: Option<f64>, boot_s: f64) -> Policy {
    let recovery = servery_core::config::RawRecovery {
        restart_backoff_initial: restart_delay_s,
        restart_backoff_max: restart_delay_s,
        worker_max_age: age_s.unwrap_or(0.0),
        worker_max_age_jitter: 0.0,
        heartbeat_interval: (1000.0 * boot_s).max(600.0),
        heartbeat_timeout: (2000.0 * boot_s).max(1200.0),
        worker_start_timeout: 2.0 * boot_s + 30.0,
        ..servery_core::config::RawRecovery::default()
    };
    Policy::new(name, recovery)
}

/// Run one cycle of `policy` under `workload` on the supervisor for `seed`.
pub fn supervisor_cycle(
    workload: &Workload,
    policy: &Policy,
    seed: u64,
    platform: Platform,
) -> Result<Cycle, CycleError> {
    let first = workload.lifetime(seed, 0).ok_or(CycleError::NoLifetime)?;
    let r = &policy.recovery;
    let age = if r.worker_max_age > 0.0 {
        r.worker_max_age
    } else {
        f64::INFINITY
    };
    let boot = workload.boot_s.unwrap_or(0.02);
    // The first worker's boot, its life (or its age), then a restart's delay and a
    // boot, with room for the messages between them.
    let horizon = boot + first.min(age) + r.restart_backoff_max + 2.0 * boot + 5.0;
    let draw = workload.draw(seed);
    let mut spec = workload.spec(policy, seed, platform, &draw);
    let stop = Duration::from_secs_f64(horizon);
    spec.workload.until = stop;
    spec.liveness_at = stop;
    spec.stop_at = stop + Duration::from_millis(1);
    spec.end_by = stop + Duration::from_secs_f64(r.drain_timeout + r.force_timeout + 30.0);
    let o = servery_sim::simulate(spec).map_err(|e| CycleError::Config(e.to_string()))?;
    cycle_of(&o).ok_or(CycleError::Unfinished {
        seed,
        what: "no second worker became ready",
    })
}

/// The first cycle of a one-worker run: from the first worker ready to the next ready.
pub fn cycle_of(o: &servery_sim::Outcome) -> Option<Cycle> {
    let ms = |t: u64| t as f64 / 1000.0;
    let start = o.ready_changes.iter().find(|(_, r)| *r >= 1)?.0;
    let spawn2 = *o.spawn_times_ms.get(1)?;
    let exit1 = o.exits.iter().find(|e| e.worker == 1).map(|e| e.at_ms);
    // A recycle spawns the replacement while the first worker still lives.
    let recycled = exit1.is_none_or(|at| spawn2 < at);
    let down_from = o
        .ready_changes
        .iter()
        .find(|(t, r)| *t > start && *r == 0)
        .map(|(t, _)| *t);
    let back = |from: u64| {
        o.ready_changes
            .iter()
            .find(|(t, r)| *t > from && *r >= 1)
            .map(|(t, _)| *t)
    };
    let retired = o
        .exits
        .iter()
        .find(|e| e.worker == 1)
        .filter(|e| e.reason.is_some_and(ExitReason::is_recycle));
    let end = match (recycled, retired) {
        // The replacement became ready and the first worker, retired, drained at once
        // (no requests): when it began to drain if that was seen, else its exit.
        (true, Some(e)) => o.drains_started.get(&1).copied().unwrap_or(e.at_ms),
        // A crash (or a crash during the recycle): the next worker's readiness.
        _ => back(down_from?)?,
    };
    let length = ms(end) - ms(start);
    let (failed, rejuvenating) = if recycled {
        (0.0, ms(end) - ms(spawn2))
    } else {
        (ms(end) - ms(down_from?), 0.0)
    };
    Some(Cycle {
        length,
        failed,
        rejuvenating,
        recycled,
    })
}

/// A steady-state share of time, `Σ reward / Σ length` over independent cycles, with its
/// 95 % interval by the delta method: the ratio's variance is `Var(X − R·Y) / (n·Ȳ²)`.
pub fn ratio(rewards: &[f64], lengths: &[f64]) -> Estimate {
    let n = rewards.len().min(lengths.len());
    if n < 2 {
        return Estimate {
            mean: f64::NAN,
            lo: f64::NAN,
            hi: f64::NAN,
        };
    }
    let (sx, sy): (f64, f64) = (rewards[..n].iter().sum(), lengths[..n].iter().sum());
    let r = sx / sy;
    let ybar = sy / n as f64;
    let resid: Vec<f64> = (0..n).map(|i| rewards[i] - r * lengths[i]).collect();
    let var = resid.iter().map(|e| e * e).sum::<f64>() / (n - 1) as f64;
    let half = Z95 * (var / n as f64).sqrt() / ybar;
    Estimate {
        mean: r,
        lo: r - half,
        hi: r + half,
    }
}

/// Steady-state shares failed and rejuvenating, and a cost rate, from cycles.
#[derive(Debug, Clone, Copy)]
pub struct Shares {
    pub failed: Estimate,
    pub rejuvenating: Estimate,
    /// Failed plus rejuvenating.
    pub down: Estimate,
    /// `cost_failed · failed + cost_rejuvenating · rejuvenating` per unit of time.
    pub cost: Estimate,
    pub cycles: usize,
    pub recycled: usize,
}

pub fn shares(cycles: &[Cycle], cost_failed: f64, cost_rejuvenating: f64) -> Shares {
    let len: Vec<f64> = cycles.iter().map(|c| c.length).collect();
    let pick = |f: &dyn Fn(&Cycle) -> f64| -> Vec<f64> { cycles.iter().map(f).collect() };
    Shares {
        failed: ratio(&pick(&|c| c.failed), &len),
        rejuvenating: ratio(&pick(&|c| c.rejuvenating), &len),
        down: ratio(&pick(&|c| c.failed + c.rejuvenating), &len),
        cost: ratio(
            &pick(&|c| cost_failed * c.failed + cost_rejuvenating * c.rejuvenating),
            &len,
        ),
        cycles: cycles.len(),
        recycled: cycles.iter().filter(|c| c.recycled).count(),
    }
}

/// Scale an estimate (a share of time to hours a year, say).
pub fn scaled(e: Estimate, k: f64) -> Estimate {
    Estimate {
        mean: e.mean * k,
        lo: e.lo * k,
        hi: e.hi * k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_interval_is_the_delta_methods() {
        // Rewards exactly proportional to lengths: the ratio is known and has no spread.
        let r = ratio(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]);
        assert!((r.mean - 0.1).abs() < 1e-12 && (r.hi - r.lo).abs() < 1e-12);
        // X = [0, 1], Y = [1, 1]: R = 0.5, residuals ±0.5, var 0.5, half = z·sqrt(0.25).
        let r = ratio(&[0.0, 1.0], &[1.0, 1.0]);
        assert!((r.mean - 0.5).abs() < 1e-12);
        assert!((r.hi - 0.5 - Z95 * 0.5).abs() < 1e-12, "{r:?}");
    }
}
