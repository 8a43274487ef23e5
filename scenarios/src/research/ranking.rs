//! The verdict of a comparison (decision 0090): for each workload, every pair of
//! policies compared on each criterion by a paired-difference bootstrap interval held
//! to a family-wise 95 % (Bonferroni over every criterion and pair of that workload),
//! the ranks those intervals allow, the Pareto front, and the answer to "which policy is
//! best under this workload".
//!
//! The criteria are the three a lifecycle policy trades against each other:
//! availability, whether the service ends `failed`, and restarts. Whether ending
//! `failed` is good depends on the fault: giving up on a transient fault (or on none) is
//! wrong, on a permanent one it is the right end (its boots were wasted), so the
//! direction of `p_failed` follows the workload's fault class.

use crate::research::compare::Cell;
use crate::research::metrics::RunMetrics;
use crate::research::stats::mean;
use crate::research::verdict::{
    self, Better, FAMILY_ALPHA, MetricSamples, PairedDifference, VerdictError,
};
use crate::research::workload::FaultClass;

/// One criterion of the verdict.
#[derive(Debug, Clone, Copy)]
pub struct Criterion {
    pub name: &'static str,
    /// Which direction is better under a workload of this fault class.
    pub better: fn(FaultClass) -> Better,
    pub value: fn(&RunMetrics) -> f64,
}

/// The criteria, in the order they are reported.
pub const CRITERIA: &[Criterion] = &[
    Criterion {
        name: "availability",
        better: |_| Better::Higher,
        value: |m| m.availability,
    },
    Criterion {
        name: "p_failed",
        better: |class| match class {
            FaultClass::Permanent => Better::Higher,
            _ => Better::Lower,
        },
        value: |m| f64::from(u8::from(m.failed)),
    },
    Criterion {
        name: "restarts",
        better: |_| Better::Lower,
        value: |m| m.restarts,
    },
];

/// The verdict under one workload.
#[derive(Debug, Clone)]
pub struct WorkloadVerdict {
    pub workload: String,
    pub class: FaultClass,
    pub seeds: usize,
    pub policies: Vec<String>,
    /// `(criterion, better)` in [`CRITERIA`] order.
    pub criteria: Vec<(&'static str, Better)>,
    /// `means[criterion][policy]`.
    pub means: Vec<Vec<f64>>,
    /// `ranks[criterion][policy]`: 1 + the policies significantly better on it.
    pub ranks: Vec<Vec<usize>>,
    pub pairs: Vec<PairedDifference>,
    /// Indices of the policies on the Pareto front.
    pub front: Vec<usize>,
    pub comparisons: usize,
    /// Two-sided level of each interval: `1 − FAMILY_ALPHA / comparisons`.
    pub level: f64,
    pub resamples: usize,
}

/// Which policy is best under one workload.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Ranked first on every criterion (several when none is significantly apart).
    Best(Vec<usize>),
    /// No policy is first on every criterion: the front is a trade-off.
    TradeOff(Vec<usize>),
}

impl WorkloadVerdict {
    pub fn answer(&self) -> Answer {
        let first_everywhere: Vec<usize> = (0..self.policies.len())
            .filter(|&p| self.ranks.iter().all(|r| r[p] == 1))
            .collect();
        if first_everywhere.is_empty() {
            Answer::TradeOff(self.front.clone())
        } else {
            Answer::Best(first_everywhere)
        }
    }

    /// The front narrowed criterion by criterion, in [`CRITERIA`] order (availability,
    /// then P(failed), then restarts): the policies a reader who puts availability first
    /// would pick. Equal to the best when there is one.
    pub fn preferred(&self) -> Vec<usize> {
        let mut keep = self.front.clone();
        for r in &self.ranks {
            let top = keep.iter().map(|&p| r[p]).min().unwrap_or(1);
            keep.retain(|&p| r[p] == top);
        }
        keep
    }

    /// The policies ranked first on criterion `k`.
    pub fn first_on(&self, k: usize) -> Vec<usize> {
        (0..self.policies.len())
            .filter(|&p| self.ranks[k][p] == 1)
            .collect()
    }

    pub fn names(&self, idx: &[usize]) -> Vec<String> {
        idx.iter().map(|&i| self.policies[i].clone()).collect()
    }
}

/// The verdict under each workload: `cells` in `run_matrix`'s order (workload-major,
/// `policies` cells a workload). `seed` fixes the bootstrap resamples.
pub fn judge(
    cells: &[Cell],
    policies: usize,
    seed: u64,
) -> Result<Vec<WorkloadVerdict>, VerdictError> {
    cells
        .chunks(policies.max(1))
        .enumerate()
        .map(|(w, group)| judge_workload(group, seed ^ ((w as u64) << 48)))
        .collect()
}

fn judge_workload(group: &[Cell], seed: u64) -> Result<WorkloadVerdict, VerdictError> {
    let class = group[0].class;
    let samples: Vec<MetricSamples> = CRITERIA
        .iter()
        .map(|c| MetricSamples {
            name: c.name.to_string(),
            better: (c.better)(class),
            per_policy: group
                .iter()
                .map(|cell| cell.runs.iter().map(c.value).collect())
                .collect(),
        })
        .collect();
    let pairs = verdict::all_pairs(&samples, seed)?;
    let n = group.len();
    let comparisons = verdict::comparisons(n, CRITERIA.len());
    Ok(WorkloadVerdict {
        workload: group[0].workload.clone(),
        class,
        seeds: group[0].runs.len(),
        policies: group.iter().map(|c| c.policy.clone()).collect(),
        criteria: CRITERIA
            .iter()
            .map(|c| (c.name, (c.better)(class)))
            .collect(),
        means: samples
            .iter()
            .map(|s| s.per_policy.iter().map(|xs| mean(xs)).collect())
            .collect(),
        ranks: CRITERIA
            .iter()
            .map(|c| verdict::ranks(&pairs, c.name, n))
            .collect(),
        front: verdict::pareto_front(&pairs, n),
        comparisons,
        level: 1.0 - FAMILY_ALPHA / comparisons.max(1) as f64,
        resamples: verdict::resamples_for(comparisons),
        pairs,
    })
}

/// What a direction means, in words.
pub fn better_word(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher",
        Better::Lower => "lower",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::research::verdict::paired_difference;

    fn run(seed: u64, availability: f64, failed: bool, restarts: f64) -> RunMetrics {
        RunMetrics {
            seed,
            x: None,
            availability,
            served_within_bound: availability,
            capacity_seconds_lost: 0.0,
            detect_s: Vec::new(),
            recover_s: Vec::new(),
            restarts,
            recycles: 0.0,
            boots: restarts,
            failed,
            give_up_s: None,
            peak_processes: 1.0,
            peak_memory_mb: 0.0,
            peak_worker_rss_mb: None,
            amplification: 1.0,
            ready: Vec::new(),
            boot_times: Vec::new(),
        }
    }

    fn cell(policy: &str, class: FaultClass, runs: Vec<RunMetrics>) -> Cell {
        Cell {
            policy: policy.into(),
            workload: "w".into(),
            class,
            runs,
        }
    }

    /// `n` runs whose availability is `base` plus `wiggle(i)`, failing on the seeds
    /// `fails` picks, with `restarts` each.
    fn runs(
        n: u64,
        base: f64,
        wiggle: fn(u64) -> f64,
        fails: fn(u64) -> bool,
        restarts: f64,
    ) -> Vec<RunMetrics> {
        (0..n)
            .map(|i| run(i, base + wiggle(i), fails(i), restarts))
            .collect()
    }

    /// Policy A's availability is B's + 0.25 ± 1 (alternating): the paired mean is
    /// 0.25 with a standard error of 0.1, so z ≈ 2.5 — outside one 95 % interval
    /// (1.96) but inside the 4-policy family's corrected one (18 comparisons, z ≈ 2.99).
    /// The two must share a rank.
    #[test]
    fn a_difference_significant_alone_but_not_in_the_family_does_not_rank() {
        let n = 100;
        let alt = |i: u64| if i.is_multiple_of(2) { 1.25 } else { -0.75 };
        let zero = |_| 0.0;
        let never = |_| false;
        let a = runs(n, 10.0, alt, never, 1.0);
        let b = runs(n, 10.0, zero, never, 1.0);
        let alone = paired_difference(
            &a.iter().map(|m| m.availability).collect::<Vec<_>>(),
            &b.iter().map(|m| m.availability).collect::<Vec<_>>(),
            0.05,
            4_000,
            1,
        );
        assert!(
            !alone.covers(0.0),
            "the test's premise: one 95 % interval excludes zero, got {alone:?}"
        );
        let cells = vec![
            cell("a", FaultClass::Transient, a),
            cell("b", FaultClass::Transient, b.clone()),
            cell("c", FaultClass::Transient, b.clone()),
            cell("d", FaultClass::Transient, b),
        ];
        let v = judge(&cells, 4, 7).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v[0].comparisons, 18);
        assert_eq!(
            v[0].ranks[0],
            vec![1, 1, 1, 1],
            "multiplicity rule: a difference inside the Bonferroni-corrected interval \
             (18 comparisons) must not rank, pairs {:?}",
            v[0].pairs
        );
        assert!(
            (v[0].level - (1.0 - 0.05 / 18.0)).abs() < 1e-12,
            "{}",
            v[0].level
        );
        assert!(
            v[0].resamples >= 2_000 && v[0].resamples as f64 * (0.05 / 18.0) / 2.0 >= 10.0,
            "resample rule: at least 2,000 resamples and ten beyond each corrected tail, got {}",
            v[0].resamples
        );
    }

    /// Giving up is wrong on a transient fault and right on a permanent one: the same
    /// runs rank the policy that fails first under one class and second under the other.
    #[test]
    fn the_direction_of_p_failed_follows_the_fault_class() {
        let zero = |_| 0.0;
        for (class, want) in [
            (FaultClass::Transient, vec![2, 1]),
            (FaultClass::None, vec![2, 1]),
            (FaultClass::Permanent, vec![1, 2]),
        ] {
            let cells = vec![
                cell("gives-up", class, runs(40, 0.5, zero, |_| true, 1.0)),
                cell("keeps-on", class, runs(40, 0.5, zero, |_| false, 1.0)),
            ];
            let v = judge(&cells, 2, 3).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                v[0].ranks[1],
                want,
                "p_failed direction rule under {} faults",
                class.name()
            );
        }
    }

    /// A policy better on every criterion is the answer; two that trade availability
    /// against restarts are both on the front, and `preferred` takes the available one.
    #[test]
    fn a_dominant_policy_is_best_and_a_trade_off_is_named_as_one() {
        let zero = |_| 0.0;
        let small = |i: u64| (i % 7) as f64 * 1e-3;
        let never = |_| false;
        let dominant = vec![
            cell(
                "good",
                FaultClass::Transient,
                runs(50, 0.9, small, never, 1.0),
            ),
            cell(
                "bad",
                FaultClass::Transient,
                runs(50, 0.5, zero, |i| i.is_multiple_of(2), 5.0),
            ),
        ];
        let v = judge(&dominant, 2, 5).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v[0].answer(), Answer::Best(vec![0]), "{:?}", v[0].pairs);
        assert_eq!(v[0].front, vec![0]);
        let trade = vec![
            cell(
                "frugal",
                FaultClass::Transient,
                runs(50, 0.5, small, never, 1.0),
            ),
            cell(
                "available",
                FaultClass::Transient,
                runs(50, 0.9, zero, never, 5.0),
            ),
        ];
        let v = judge(&trade, 2, 5).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v[0].answer(),
            Answer::TradeOff(vec![0, 1]),
            "best rule: no policy is first on every criterion"
        );
        assert_eq!(
            v[0].preferred(),
            vec![1],
            "preferred rule: availability first"
        );
    }

    #[test]
    fn unpaired_runs_are_an_error_not_a_verdict() {
        let zero = |_| 0.0;
        let never = |_| false;
        let cells = vec![
            cell("a", FaultClass::None, runs(5, 1.0, zero, never, 0.0)),
            cell("b", FaultClass::None, runs(4, 1.0, zero, never, 0.0)),
        ];
        let e = judge(&cells, 2, 0).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("same seeds")),
            "{e:?}"
        );
    }
}
