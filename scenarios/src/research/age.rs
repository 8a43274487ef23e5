//! Age replacement (Barlow and Proschan, 1965), as a worker-recycling question: one
//! worker with Weibull lifetimes is replaced after a crash (costing `crash_down_s` of
//! downtime) or, planned, when it reaches age T (costing `recycle_down_s`, no overlap).
//! By the renewal-reward theorem the long-run availability is
//!
//!   A(T) = ∫₀ᵀ R(t) dt / (∫₀ᵀ R(t) dt + crash_down·F(T) + recycle_down·R(T)),
//!
//! with R the survival function. With servery's N + 1 overlap a planned recycle costs
//! no downtime, only the replacement's overlap in process-seconds.

use crate::research::clock::ModelRun;
use crate::research::stats::{Estimate, normal_mean};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgeModel {
    pub shape: f64,
    pub scale_s: f64,
    pub crash_down_s: f64,
    pub recycle_down_s: f64,
}

impl AgeModel {
    /// The model: Weibull(2, 60 s), 2 s crash recovery, 0.2 s planned recycle.
    pub fn standard() -> AgeModel {
        AgeModel {
            shape: 2.0,
            scale_s: 60.0,
            crash_down_s: 2.0,
            recycle_down_s: 0.2,
        }
    }

    pub fn survival(&self, t: f64) -> f64 {
        (-(t / self.scale_s).powf(self.shape)).exp()
    }

    /// E[min(X, T)] = ∫₀ᵀ R(t) dt, by Simpson's rule (T = ∞: integrated to 20 scales).
    pub fn mean_up(&self, age: f64) -> f64 {
        let upper = age.min(20.0 * self.scale_s);
        let n = 2000;
        let h = upper / n as f64;
        let mut sum = self.survival(0.0) + self.survival(upper);
        for i in 1..n {
            let w = if i % 2 == 1 { 4.0 } else { 2.0 };
            sum += w * self.survival(i as f64 * h);
        }
        sum * h / 3.0
    }

    /// Closed-form availability with recycling at `age` seconds (∞: never), no overlap.
    pub fn availability(&self, age: f64) -> f64 {
        let up = self.mean_up(age);
        let r = if age.is_finite() {
            self.survival(age)
        } else {
            0.0
        };
        up / (up + self.crash_down_s * (1.0 - r) + self.recycle_down_s * r)
    }

    /// With N + 1 overlap: a planned recycle costs no downtime.
    pub fn availability_overlapped(&self, age: f64) -> f64 {
        let up = self.mean_up(age);
        let r = if age.is_finite() {
            self.survival(age)
        } else {
            0.0
        };
        up / (up + self.crash_down_s * (1.0 - r))
    }

    /// Planned recycles per hour of service at `age`.
    pub fn recycles_per_hour(&self, age: f64, overlapped: bool) -> f64 {
        let up = self.mean_up(age);
        let r = if age.is_finite() {
            self.survival(age)
        } else {
            0.0
        };
        let planned_down = if overlapped {
            0.0
        } else {
            self.recycle_down_s * r
        };
        3600.0 * r / (up + self.crash_down_s * (1.0 - r) + planned_down)
    }

    /// The best recycle age: a scan at 0.05 s, then golden-section refinement.
    pub fn best_age(&self) -> f64 {
        let mut best = (0.05, 0.0);
        let mut t = 0.05;
        while t < 10.0 * self.scale_s {
            let a = self.availability(t);
            if a > best.1 {
                best = (t, a);
            }
            t += 0.05;
        }
        let (mut lo, mut hi) = (best.0 - 0.05, best.0 + 0.05);
        let g = (5f64.sqrt() - 1.0) / 2.0;
        for _ in 0..60 {
            let (x1, x2) = (hi - g * (hi - lo), lo + g * (hi - lo));
            if self.availability(x1) < self.availability(x2) {
                lo = x1;
            } else {
                hi = x2;
            }
        }
        (lo + hi) / 2.0
    }

    /// One seed's availability over `horizon_s` with recycling at `age` (∞: never),
    /// measured after a warm-up of ten mean lifetimes (a run that starts with a new
    /// worker is up more at first than in the long run). The k-th lifetime is the seed's
    /// k-th draw whatever the age, so the points of a curve share their randomness
    /// (common random numbers) and their differences are sharp.
    pub fn simulate(&self, seed: u64, age: f64, horizon_s: f64) -> f64 {
        let mut run = ModelRun::new(seed, 0xa9e_2e91ace);
        let start = 10.0 * self.scale_s;
        let end = start + horizon_s;
        let mut up = 0.0;
        while run.secs() < end {
            let life = run.weibull(self.shape, self.scale_s);
            let (lived, down) = if life < age {
                (life, self.crash_down_s)
            } else {
                (age, self.recycle_down_s)
            };
            let from = run.secs();
            up += ((from + lived).min(end) - from.max(start)).max(0.0);
            run.advance(lived + down);
        }
        up / horizon_s
    }
}

/// The simulated curve and the closed form at each grid age.
#[derive(Debug, Clone)]
pub struct AgeReport {
    pub best_closed: f64,
    pub at_best_closed: f64,
    pub without_closed: f64,
    /// (age, closed form, simulated) per grid point.
    pub curve: Vec<(f64, f64, Estimate)>,
    pub without: Estimate,
    pub grid_step: f64,
}

impl AgeReport {
    /// The grid age with the highest simulated mean.
    pub fn best_simulated(&self) -> (f64, Estimate) {
        let mut best = self.curve[0];
        for p in &self.curve {
            if p.2.mean > best.2.mean {
                best = *p;
            }
        }
        (best.0, best.2)
    }

    pub fn json(&self) -> serde_json::Value {
        let (age, at) = self.best_simulated();
        serde_json::json!({
            "model": "age-replacement",
            "closed_form": {
                "best_age_s": self.best_closed,
                "availability_at_best": self.at_best_closed,
                "availability_without": self.without_closed,
            },
            "simulated": {
                "best_age_s": age,
                "availability_at_best": at.json(),
                "availability_without": self.without.json(),
            },
        })
    }
}

/// The optimum on a fine grid: ages `step` apart, within `half_width` of a centre.
#[derive(Debug, Clone)]
pub struct FineOptimum {
    pub step: f64,
    /// (age, closed form, simulated mean) per fine grid point.
    pub points: Vec<(f64, f64, f64)>,
    /// The fine grid age where the closed form is highest.
    pub best_closed: f64,
    /// The fine grid age where the simulated mean is highest, and its estimate.
    pub best_simulated: (f64, Estimate),
    /// The ages whose paired difference from the simulated best (same seeds, same
    /// lifetimes: common random numbers) holds zero at a family-wise 95 % over the grid:
    /// the ages the simulation cannot tell from its optimum.
    pub indistinguishable: (f64, f64),
}

/// Ages `centre − half_width` to `centre + half_width` in steps of `step`, each over the
/// same `seeds`; the best by closed form and by simulation, and the ages the simulation
/// cannot tell from its best.
pub fn fine_optimum(
    model: &AgeModel,
    seeds: core::ops::Range<u64>,
    centre: f64,
    half_width: f64,
    step: f64,
    horizon_s: f64,
) -> FineOptimum {
    let k = (half_width / step).round() as i64;
    let ages: Vec<f64> = (-k..=k)
        .map(|i| ((centre + i as f64 * step) / step).round() * step)
        .filter(|a| *a > 0.0)
        .collect();
    // runs[a][s]: age a on seed s.
    let runs: Vec<Vec<f64>> = ages
        .iter()
        .map(|&age| {
            seeds
                .clone()
                .map(|s| model.simulate(s, age, horizon_s))
                .collect()
        })
        .collect();
    let means: Vec<f64> = runs
        .iter()
        .map(|xs| crate::research::stats::mean(xs))
        .collect();
    let argmax = |xs: &[f64]| {
        (0..xs.len())
            .max_by(|&i, &j| xs[i].total_cmp(&xs[j]))
            .unwrap_or(0)
    };
    let closed: Vec<f64> = ages.iter().map(|&a| model.availability(a)).collect();
    let best = argmax(&means);
    // Bonferroni over the grid's other points: two-sided level 1 − 0.05 / (n − 1).
    let level = 1.0 - 0.05 / ages.len().saturating_sub(1).max(1) as f64;
    let tied: Vec<f64> = ages
        .iter()
        .zip(&runs)
        .filter(|(_, xs)| {
            let d: Vec<f64> = runs[best]
                .iter()
                .zip(xs.iter())
                .map(|(b, x)| b - x)
                .collect();
            normal_mean(&d).widened(level).covers(0.0)
        })
        .map(|(a, _)| *a)
        .collect();
    FineOptimum {
        step,
        points: ages
            .iter()
            .zip(&closed)
            .zip(&means)
            .map(|((a, c), m)| (*a, *c, *m))
            .collect(),
        best_closed: ages[argmax(&closed)],
        best_simulated: (ages[best], normal_mean(&runs[best])),
        indistinguishable: (
            tied.first().copied().unwrap_or(ages[best]),
            tied.last().copied().unwrap_or(ages[best]),
        ),
    }
}

/// Recycle ages `step`, 2·`step`, … up to `max` seconds, each over `seeds`.
pub fn reproduce(
    model: &AgeModel,
    seeds: core::ops::Range<u64>,
    step: f64,
    max: f64,
    horizon_s: f64,
) -> AgeReport {
    let estimate = |age: f64| {
        let xs: Vec<f64> = seeds
            .clone()
            .map(|s| model.simulate(s, age, horizon_s))
            .collect();
        normal_mean(&xs)
    };
    let mut curve = Vec::new();
    let mut k = 1.0;
    while k * step <= max + 1e-9 {
        let age = k * step;
        curve.push((age, model.availability(age), estimate(age)));
        k += 1.0;
    }
    let best_closed = model.best_age();
    AgeReport {
        best_closed,
        at_best_closed: model.availability(best_closed),
        without_closed: model.availability(f64::INFINITY),
        curve,
        without: estimate(f64::INFINITY),
        grid_step: step,
    }
}
