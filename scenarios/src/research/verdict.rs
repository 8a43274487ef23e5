//! The verdict over a comparison: policies ranked per workload by paired differences
//! (every policy ran on the same seeds, so seed `i` of policy A is paired with seed `i`
//! of policy B), with percentile-bootstrap intervals corrected for multiplicity by
//! Bonferroni over every (metric, pair) comparison, and the Pareto front.
//!
//! A ranking that ignored the intervals would call a difference inside the noise a
//! win; here policy A outranks B on a metric only when the corrected interval of the
//! paired difference excludes zero.

use servery_sim::rng::SimRng;

use super::stats::{Estimate, mean, normal_quantile, quantile_sorted};

/// Bootstrap resamples per paired-difference interval: the corrected levels reach far
/// into the tails (0.05 / 30 comparisons puts a tail at 0.08 %), so far more resamples
/// than a single 95 % interval needs.
pub const VERDICT_RESAMPLES: usize = 4_000;

/// Resamples for a family of `comparisons` intervals: at least [`VERDICT_RESAMPLES`],
/// and enough that each tail of the corrected level holds ten resamples beyond its
/// endpoint (a percentile taken from one or two resamples would be noise).
pub fn resamples_for(comparisons: usize) -> usize {
    let alpha = FAMILY_ALPHA / comparisons.max(1) as f64;
    VERDICT_RESAMPLES.max((20.0 / alpha).ceil() as usize)
}

/// Family-wise error rate the whole verdict holds to.
pub const FAMILY_ALPHA: f64 = 0.05;

/// Whether a larger value of a metric is better (availability) or worse (restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

/// One metric's per-seed values for every policy, in the same seed order.
#[derive(Debug, Clone)]
pub struct MetricSamples {
    pub name: String,
    pub better: Better,
    /// `per_policy[p][i]`: policy `p` on seed `i`.
    pub per_policy: Vec<Vec<f64>>,
}

/// The paired difference `a − b` of one metric for one pair of policies.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedDifference {
    pub metric: String,
    pub a: usize,
    pub b: usize,
    pub difference: Estimate,
    /// +1: `a` is significantly better, −1: `b` is, 0: the interval holds zero.
    pub verdict: i8,
}

/// Errors of the verdict's input: unequal seed counts cannot be paired.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum VerdictError {
    #[error(
        "metric {metric}: policy {policy} has {got} seeds, policy 0 has {want}; paired differences need the same seeds for every policy"
    )]
    UnpairedSeeds {
        metric: String,
        policy: usize,
        got: usize,
        want: usize,
    },
    #[error("metric {metric}: no policies")]
    NoPolicies { metric: String },
}

/// The mean of `a[i] − b[i]` with a percentile-bootstrap interval at two-sided level
/// `1 − alpha`, resampling seed indices (so each resample keeps the pairs together).
pub fn paired_difference(
    a: &[f64],
    b: &[f64],
    alpha: f64,
    resamples: usize,
    seed: u64,
) -> Estimate {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let m = mean(&d);
    if d.len() < 2 {
        return Estimate {
            mean: m,
            lo: m,
            hi: m,
        };
    }
    let mut rng = SimRng::new(seed ^ 0x9a12_ed01);
    let n = d.len() as u64;
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..n).map(|_| d[rng.range(0, n - 1) as usize]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    Estimate {
        mean: m,
        lo: quantile_sorted(&means, alpha / 2.0),
        hi: quantile_sorted(&means, 1.0 - alpha / 2.0),
    }
}

/// Number of comparisons the family holds: every unordered pair on every metric.
pub fn comparisons(policies: usize, metrics: usize) -> usize {
    metrics * policies * policies.saturating_sub(1) / 2
}

/// Every pair on every metric, each interval at the Bonferroni level
/// `1 − FAMILY_ALPHA / comparisons`, so the whole family errs with probability ≤ 5 %.
pub fn all_pairs(
    metrics: &[MetricSamples],
    seed: u64,
) -> Result<Vec<PairedDifference>, VerdictError> {
    let policies = check(metrics)?;
    let family = comparisons(policies, metrics.len());
    let alpha = FAMILY_ALPHA / family.max(1) as f64;
    let resamples = resamples_for(family);
    let mut out = Vec::new();
    for (k, metric) in metrics.iter().enumerate() {
        for a in 0..policies {
            for b in a + 1..policies {
                let pair_seed = seed ^ ((k as u64) << 40) ^ ((a as u64) << 20) ^ b as u64;
                let difference = paired_difference(
                    &metric.per_policy[a],
                    &metric.per_policy[b],
                    alpha,
                    resamples,
                    pair_seed,
                );
                let sign = match metric.better {
                    Better::Higher => 1.0,
                    Better::Lower => -1.0,
                };
                let verdict = if difference.covers(0.0) {
                    0
                } else if difference.mean * sign > 0.0 {
                    1
                } else {
                    -1
                };
                out.push(PairedDifference {
                    metric: metric.name.clone(),
                    a,
                    b,
                    difference,
                    verdict,
                });
            }
        }
    }
    Ok(out)
}

fn check(metrics: &[MetricSamples]) -> Result<usize, VerdictError> {
    let mut policies = None;
    for metric in metrics {
        let Some(first) = metric.per_policy.first() else {
            return Err(VerdictError::NoPolicies {
                metric: metric.name.clone(),
            });
        };
        for (p, xs) in metric.per_policy.iter().enumerate() {
            if xs.len() != first.len() {
                return Err(VerdictError::UnpairedSeeds {
                    metric: metric.name.clone(),
                    policy: p,
                    got: xs.len(),
                    want: first.len(),
                });
            }
        }
        policies = Some(metric.per_policy.len());
    }
    Ok(policies.unwrap_or(0))
}

/// Rank of each policy on one metric: 1 + the number of policies significantly better
/// than it. Policies whose differences hold zero share a rank.
pub fn ranks(pairs: &[PairedDifference], metric: &str, policies: usize) -> Vec<usize> {
    let mut rank = vec![1; policies];
    for p in pairs.iter().filter(|p| p.metric == metric) {
        match p.verdict {
            1 => rank[p.b] += 1,
            -1 => rank[p.a] += 1,
            _ => {}
        }
    }
    rank
}

/// The Pareto front: a policy is off the front when another is significantly better on
/// at least one metric and significantly worse on none.
pub fn pareto_front(pairs: &[PairedDifference], policies: usize) -> Vec<usize> {
    let dominated_by = |loser: usize, winner: usize| {
        let mut better_somewhere = false;
        for p in pairs {
            let v = if p.a == winner && p.b == loser {
                p.verdict
            } else if p.a == loser && p.b == winner {
                -p.verdict
            } else {
                continue;
            };
            if v < 0 {
                return false;
            }
            better_somewhere |= v > 0;
        }
        better_somewhere
    };
    (0..policies)
        .filter(|&p| !(0..policies).any(|q| q != p && dominated_by(p, q)))
        .collect()
}

/// The normal quantile the corrected level implies, for the report's text.
pub fn corrected_z(policies: usize, metrics: usize) -> f64 {
    let alpha = FAMILY_ALPHA / comparisons(policies, metrics).max(1) as f64;
    normal_quantile(1.0 - alpha / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy(n: usize, shift: f64, seed: u64) -> Vec<f64> {
        let mut rng = SimRng::new(seed);
        (0..n)
            .map(|_| shift + rng.range(0, 1_000_000) as f64 / 1_000_000.0)
            .collect()
    }

    /// By construction B = A + 0.25 on every seed, plus shared noise: the paired
    /// difference is exactly −0.25 and its interval must be that point.
    #[test]
    fn a_difference_known_by_construction_is_recovered() {
        let a = noisy(200, 0.0, 3);
        let b: Vec<f64> = a.iter().map(|x| x + 0.25).collect();
        let d = paired_difference(&a, &b, 0.05, VERDICT_RESAMPLES, 1);
        assert!(
            (d.mean + 0.25).abs() < 1e-12,
            "paired mean {} is not −0.25",
            d.mean
        );
        assert!(
            d.lo <= -0.25 + 1e-9 && d.hi >= -0.25 - 1e-9 && d.hi - d.lo < 1e-9,
            "pairing rule: a constant per-seed difference has a zero-width interval, got {d:?}"
        );
    }

    /// Independent uniform noise, true difference 0.1: over 200 replicate experiments
    /// the nominal 95 % interval must cover 0.1 in about 95 % of them (binomial 99 %
    /// band for 200 draws: 176..=198), and its width must be near
    /// 2·1.96·sqrt(2/12/100) ≈ 0.160.
    #[test]
    fn the_interval_covers_at_its_nominal_rate() {
        let mut covered = 0;
        let mut widths = Vec::new();
        for r in 0..200u64 {
            let a = noisy(100, 0.1, 1_000 + 2 * r);
            let b = noisy(100, 0.0, 1_001 + 2 * r);
            let d = paired_difference(&a, &b, 0.05, 1_000, r);
            covered += usize::from(d.covers(0.1));
            widths.push(d.hi - d.lo);
        }
        let width = mean(&widths);
        assert!(
            (176..=198).contains(&covered),
            "coverage rule: 95 % intervals covered the true difference in {covered} of 200"
        );
        assert!(
            (0.14..0.18).contains(&width),
            "mean interval width {width} far from 0.160"
        );
    }

    /// Two policies whose means differ a little inside the noise must share a rank; a
    /// ranking by means alone would put one ahead.
    #[test]
    fn a_difference_inside_the_noise_does_not_rank() {
        let a = noisy(30, 0.01, 8);
        let b = noisy(30, 0.0, 9);
        let far = noisy(30, 5.0, 10);
        let metrics = [MetricSamples {
            name: "availability".into(),
            better: Better::Higher,
            per_policy: vec![a, b, far],
        }];
        let pairs = all_pairs(&metrics, 4).expect("paired input");
        let r = ranks(&pairs, "availability", 3);
        assert_eq!(
            r,
            vec![2, 2, 1],
            "ranking rule: only corrected intervals excluding zero rank, got {r:?} from {pairs:?}"
        );
        assert_eq!(pareto_front(&pairs, 3), vec![2]);
    }

    #[test]
    fn lower_is_better_ranks_the_smaller_first_and_trade_offs_stay_on_the_front() {
        let few = noisy(100, 0.0, 11);
        let many = noisy(100, 3.0, 12);
        let metrics = [
            MetricSamples {
                name: "restarts".into(),
                better: Better::Lower,
                per_policy: vec![few.clone(), many.clone()],
            },
            MetricSamples {
                name: "availability".into(),
                better: Better::Higher,
                per_policy: vec![few, many],
            },
        ];
        let pairs = all_pairs(&metrics, 4).expect("paired input");
        assert_eq!(ranks(&pairs, "restarts", 2), vec![1, 2]);
        assert_eq!(ranks(&pairs, "availability", 2), vec![2, 1]);
        assert_eq!(
            pareto_front(&pairs, 2),
            vec![0, 1],
            "a trade-off leaves both on the front"
        );
    }

    #[test]
    fn unpaired_seeds_are_an_error_naming_the_metric() {
        let metrics = [MetricSamples {
            name: "restarts".into(),
            better: Better::Lower,
            per_policy: vec![vec![1.0; 3], vec![1.0; 2]],
        }];
        let Err(e) = all_pairs(&metrics, 0) else {
            panic!("unpaired seeds were accepted");
        };
        assert!(
            e.to_string().contains("restarts") && e.to_string().contains("same seeds"),
            "{e}"
        );
    }

    #[test]
    fn bonferroni_counts_every_pair_on_every_metric() {
        assert_eq!(comparisons(4, 3), 18);
        assert!(
            corrected_z(4, 3) > 2.9,
            "z at 0.05/18 two-sided is about 2.99"
        );
    }
}
