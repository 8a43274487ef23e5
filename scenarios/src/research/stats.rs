//! Estimates with their uncertainty: means with percentile-bootstrap intervals, rare
//! events with Wilson score intervals, quantiles. Resampling draws from the simulator's
//! own seeded stream, so a report replays exactly.

use servery_sim::rng::SimRng;

/// Two-sided 95 % normal quantile.
pub const Z95: f64 = 1.959_963_984_540_054;

/// Bootstrap resamples per interval: 2,000, so each 2.5 % tail holds 50 resamples and the
/// percentile endpoints are stable to the digits the report prints (at 400 the endpoint
/// rested on 10 resamples and moved with the bootstrap's seed).
pub const RESAMPLES: usize = 2_000;

/// A point estimate and its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Estimate {
    pub fn covers(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({"mean": finite(self.mean), "ci": [finite(self.lo), finite(self.hi)]})
    }
}

/// JSON has no NaN: an estimate over no samples is `null`.
fn finite(x: f64) -> serde_json::Value {
    if x.is_finite() {
        serde_json::json!(x)
    } else {
        serde_json::Value::Null
    }
}

pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The mean of `xs` with a percentile-bootstrap 95 % interval (`seed` fixes the
/// resamples). Empty input gives NaN throughout.
pub fn bootstrap_mean(xs: &[f64], seed: u64) -> Estimate {
    let m = mean(xs);
    if xs.len() < 2 {
        return Estimate {
            mean: m,
            lo: m,
            hi: m,
        };
    }
    let mut rng = SimRng::new(seed ^ 0xb007_57a9);
    let n = xs.len() as u64;
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let sum: f64 = (0..n).map(|_| xs[rng.range(0, n - 1) as usize]).sum();
            sum / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    Estimate {
        mean: m,
        lo: quantile_sorted(&means, 0.025),
        hi: quantile_sorted(&means, 0.975),
    }
}

/// The mean with a normal-approximation 95 % interval (mean ± z·s/√n): for the large,
/// independent samples of the published-model reproductions.
pub fn normal_mean(xs: &[f64]) -> Estimate {
    let m = mean(xs);
    let n = xs.len() as f64;
    if xs.len() < 2 {
        return Estimate {
            mean: m,
            lo: m,
            hi: m,
        };
    }
    let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    let half = Z95 * (var / n).sqrt();
    Estimate {
        mean: m,
        lo: m - half,
        hi: m + half,
    }
}

impl Estimate {
    /// The interval widened from 95 % to `level` (a symmetric, normal-theory interval):
    /// e.g. a family-wise level for a whole curve (Bonferroni: 1 − 0.05 / points).
    pub fn widened(&self, level: f64) -> Estimate {
        let scale = normal_quantile(0.5 + level / 2.0) / Z95;
        Estimate {
            mean: self.mean,
            lo: self.mean - (self.mean - self.lo) * scale,
            hi: self.mean + (self.hi - self.mean) * scale,
        }
    }
}

/// The standard normal quantile (Acklam's rational approximation, relative error below
/// 1.2e-9), for `p` in (0, 1).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// The share of `k` successes in `n` trials with its Wilson score 95 % interval, which
/// stays inside [0, 1] and is honest at 0 and n, where the normal interval collapses.
pub fn wilson(k: u64, n: u64) -> Estimate {
    if n == 0 {
        return Estimate {
            mean: f64::NAN,
            lo: f64::NAN,
            hi: f64::NAN,
        };
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    Estimate {
        mean: p,
        // At 0 and n the bound is exactly 0 or 1; rounding would leave 1e-18.
        lo: if k == 0.0 {
            0.0
        } else {
            (centre - half).max(0.0)
        },
        hi: if k == n {
            1.0
        } else {
            (centre + half).min(1.0)
        },
    }
}

/// The `q` quantile of sorted data, interpolated linearly (NaN when empty).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let i = pos.floor() as usize;
            let frac = pos - i as f64;
            match sorted.get(i + 1) {
                Some(next) => sorted[i] + frac * (next - sorted[i]),
                None => sorted[i],
            }
        }
    }
}

pub fn quantile(xs: &[f64], q: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    quantile_sorted(&v, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_a_worked_value_and_stays_in_bounds() {
        // 0 of 10: the normal interval would be [0, 0]; Wilson's upper bound is 0.2775.
        let w = wilson(0, 10);
        assert_eq!(w.lo, 0.0);
        assert!((w.hi - 0.2775).abs() < 1e-3, "{w:?}");
        let w = wilson(10, 10);
        assert_eq!(w.hi, 1.0);
        assert!((w.lo - 0.7225).abs() < 1e-3, "{w:?}");
    }

    #[test]
    fn bootstrap_interval_brackets_the_mean_and_shrinks_with_n() {
        let mut rng = SimRng::new(7);
        let small: Vec<f64> = (0..50).map(|_| rng.exp(1.0)).collect();
        let large: Vec<f64> = (0..2000).map(|_| rng.exp(1.0)).collect();
        let (s, l) = (bootstrap_mean(&small, 1), bootstrap_mean(&large, 1));
        assert!(s.lo < s.mean && s.mean < s.hi, "{s:?}");
        assert!(l.hi - l.lo < (s.hi - s.lo) / 3.0, "{s:?} {l:?}");
        assert!(l.covers(1.0), "{l:?}");
    }

    #[test]
    fn normal_quantile_matches_tables() {
        assert!((normal_quantile(0.975) - Z95).abs() < 1e-8);
        assert!((normal_quantile(0.5)).abs() < 1e-12);
        assert!((normal_quantile(0.001) + 3.090_232).abs() < 1e-5);
    }

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(quantile(&[3.0, 1.0, 2.0, 4.0], 0.5), 2.5);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
