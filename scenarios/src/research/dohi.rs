//! Dohi, Goševa-Popstojanova and Trivedi, "Statistical Non-Parametric Algorithms to
//! Estimate the Optimal Software Rejuvenation Schedule" (PRDC 2000): the rejuvenation age
//! that maximises steady-state availability, estimated from failure times alone through
//! the scaled total-time-on-test (TTT) transform; and age replacement (the Weibull model
//! of [`crate::research::age`]) run on the supervisor the same way.
//!
//! **The model.** A process fails at a time `X` with distribution `F` (mean `μ_f`); a
//! failure costs `μ_a` of repair, a rejuvenation at age `t₀` costs `μ_c < μ_a`. By
//! renewal-reward, `A(t₀) = ∫₀^{t₀} R / (∫₀^{t₀} R + μ_a F(t₀) + μ_c R(t₀))`. Dohi et
//! al.'s semi-Markov model also has a robust period of mean `μ₀` before the aging clock
//! starts; with `φ(p) = (1/μ_f) ∫₀^{F⁻¹(p)} R` the optimum is the `p*` maximising
//! `(φ(p) + α) / (p + β)`, `α = μ₀/μ_f`, `β = μ_c/(μ_a − μ_c)`: the touching point of the
//! TTT plot's tangent from `(−β, −α)`. A supervisor sees only a worker's age since its
//! boot, so the trace is of failure times from the boot and `μ₀ = 0`, `α = 0`.
//!
//! **The estimator.** From `n` ordered failure times `x₍₁₎ ≤ … ≤ x₍ₙ₎` (`x₍₀₎ = 0`), the
//! scaled TTT statistic is `φ_j = T_j / T_n` with
//! `T_j = Σ_{i ≤ j} (n − i + 1)(x₍ᵢ₎ − x₍ᵢ₋₁₎)`; the estimate is `t̂₀ = x₍ⱼ*₎` with
//! `j* = argmax_j φ_j / (j/n + β)` (`j* = n`: never rejuvenate).
//!
//! **On the supervisor.** One worker whose lifetimes are resampled from the trace (the
//! workload's `failure-trace` model, so the trace *is* the lifetime distribution), age
//! recycling at `t̂₀`, boots of `μ_c` and a restart delay of `μ_a − μ_c`. For the
//! empirical distribution the closed form is exact: at `t₀ = x₍ⱼ₎`,
//! `∫₀^{t₀} R = T_j / n` and `F(t₀) = j/n` (a worker drawn to fail exactly at `t₀` fails:
//! its crash counts from its boot, its age from its readiness a few milliseconds later).

use servery_core::supervisor::Platform;

use crate::research::age::AgeModel;
use crate::research::cycles::{self, Cycle, CycleError, Shares};
use crate::research::workload::{FaultModel, Workload};

/// The scaled TTT statistics `φ_0 = 0, φ_1, …, φ_n = 1` of `times` (sorted inside).
pub fn scaled_ttt(times: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut x = times.to_vec();
    x.sort_by(f64::total_cmp);
    let n = x.len();
    let mut t = vec![0.0; n + 1];
    let mut prev = 0.0;
    for i in 1..=n {
        t[i] = t[i - 1] + (n - i + 1) as f64 * (x[i - 1] - prev);
        prev = x[i - 1];
    }
    let total = t[n];
    (t.iter().map(|v| v / total).collect(), x)
}

/// Dohi et al.'s estimate: `(j*, t̂₀)`; `t̂₀ = None` when never rejuvenating is best.
pub fn optimal_age(times: &[f64], repair_s: f64, rejuvenation_s: f64) -> (usize, Option<f64>) {
    optimal_age_after(times, repair_s, rejuvenation_s, 0.0)
}

/// Dohi et al.'s estimate with a robust period of `robust_s` before the aging clock:
/// `j* = argmax (φ_j + α) / (j/n + β)`, `α = μ₀/μ_f`; `t̂₀` is measured from the robust
/// period's end (a supervisor recycles at the age `robust_s + t̂₀`).
pub fn optimal_age_after(
    times: &[f64],
    repair_s: f64,
    rejuvenation_s: f64,
    robust_s: f64,
) -> (usize, Option<f64>) {
    let (phi, x) = scaled_ttt(times);
    let n = x.len();
    let mean = x.iter().sum::<f64>() / n as f64;
    let alpha = robust_s / mean;
    let beta = rejuvenation_s / (repair_s - rejuvenation_s);
    let score = |j: usize| (phi[j] + alpha) / (j as f64 / n as f64 + beta);
    let best = (1..=n)
        .max_by(|&a, &b| score(a).total_cmp(&score(b)))
        .unwrap_or(n);
    (best, (best < n).then(|| x[best - 1]))
}

/// The costs of the cost criterion: dollars an hour the service is down failed (`c_f`,
/// Dohi et al.'s `c_s`) and rejuvenating (`c_r`, their `c_p`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    pub failed_per_h: f64,
    pub rejuvenating_per_h: f64,
}

/// Dohi et al.'s cost criterion estimated from the trace: the `j*` minimising the
/// expected cost an hour of the empirical distribution, written in the TTT statistics,
/// `C_j = (c_f μ_a p + c_r μ_c (1 − p)) / (μ₀ + μ_f φ_j + μ_a p + μ_c (1 − p))`,
/// `p = j/n`; `j* = n` is never rejuvenating (`t̂₀ = None`).
pub fn cost_optimal_age(
    times: &[f64],
    repair_s: f64,
    rejuvenation_s: f64,
    robust_s: f64,
    costs: Costs,
) -> (usize, Option<f64>) {
    let (phi, x) = scaled_ttt(times);
    let n = x.len();
    let mean = x.iter().sum::<f64>() / n as f64;
    let cost = |j: usize| {
        let p = j as f64 / n as f64;
        (costs.failed_per_h * repair_s * p + costs.rejuvenating_per_h * rejuvenation_s * (1.0 - p))
            / (robust_s + mean * phi[j] + repair_s * p + rejuvenation_s * (1.0 - p))
    };
    let best = (1..=n)
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
        .unwrap_or(n);
    (best, (best < n).then(|| x[best - 1]))
}

/// One renewal cycle of age replacement under the empirical distribution of `times`
/// after a robust period, recycled `age` after it (None: never): (mean up time, the
/// probability a cycle ends failed).
fn empirical_cycle(times: &[f64], robust_s: f64, age: Option<f64>) -> (f64, f64) {
    let n = times.len() as f64;
    let age = age.unwrap_or(f64::INFINITY);
    let up: f64 = robust_s + times.iter().map(|x| x.min(age)).sum::<f64>() / n;
    let failed = times.iter().filter(|x| **x <= age).count() as f64 / n;
    (up, failed)
}

/// The closed-form availability of age replacement at `age` (None: never) for the
/// empirical distribution of `times`.
pub fn empirical_availability(
    times: &[f64],
    repair_s: f64,
    rejuvenation_s: f64,
    age: Option<f64>,
) -> f64 {
    empirical_availability_after(times, repair_s, rejuvenation_s, 0.0, age)
}

/// As [`empirical_availability`], after a robust period of `robust_s` (`age` counted
/// from its end).
pub fn empirical_availability_after(
    times: &[f64],
    repair_s: f64,
    rejuvenation_s: f64,
    robust_s: f64,
    age: Option<f64>,
) -> f64 {
    let (up, failed) = empirical_cycle(times, robust_s, age);
    up / (up + repair_s * failed + rejuvenation_s * (1.0 - failed))
}

/// The closed-form expected cost an hour (dollars) of age replacement at `age` for the
/// empirical distribution of `times`, after a robust period of `robust_s`.
pub fn empirical_cost_rate(
    times: &[f64],
    repair_s: f64,
    rejuvenation_s: f64,
    robust_s: f64,
    age: Option<f64>,
    costs: Costs,
) -> f64 {
    let (up, failed) = empirical_cycle(times, robust_s, age);
    let (down_failed, down_rejuvenating) = (repair_s * failed, rejuvenation_s * (1.0 - failed));
    (costs.failed_per_h * down_failed + costs.rejuvenating_per_h * down_rejuvenating)
        / (up + down_failed + down_rejuvenating)
}

/// The supervisor run of a trace: one worker resampling it, recycled at `age`.
pub fn trace_workload(times: &[f64], rejuvenation_s: f64) -> Workload {
    trace_workload_after(times, rejuvenation_s, 0.0)
}

/// As [`trace_workload`], every lifetime `robust_s` longer (the robust period).
pub fn trace_workload_after(times: &[f64], rejuvenation_s: f64, robust_s: f64) -> Workload {
    Workload::one_aging_worker(
        "failure-trace",
        "lifetimes resampled from a failure-time trace, one worker",
        rejuvenation_s,
        FaultModel::FailureTrace {
            trace_file: String::new(),
            robust_s,
            times_s: times.to_vec(),
        },
    )
}

/// `seeds` cycles of `workload` on the supervisor with age recycling at `age`.
pub fn on_supervisor(
    workload: &Workload,
    repair_s: f64,
    rejuvenation_s: f64,
    age: Option<f64>,
    seeds: core::ops::Range<u64>,
) -> Result<Vec<Cycle>, CycleError> {
    let policy = cycles::age_policy("age".into(), repair_s - rejuvenation_s, age, rejuvenation_s);
    seeds
        .map(|s| cycles::supervisor_cycle(workload, &policy, s, Platform::Posix))
        .collect()
}

/// Unavailability from cycles (costs 1 per second down, failed or rejuvenating).
pub fn down_share(cycles: &[Cycle]) -> Shares {
    cycles::shares(cycles, 1.0, 1.0)
}

/// Simulated seconds per model second for age replacement on the supervisor: its
/// 0.2 s recycle becomes 2 s, so the supervisor's milliseconds of messages stay small.
pub const AGE_SCALE: f64 = 10.0;

/// Age replacement on the supervisor: Weibull lifetimes (the workload's `aging` model),
/// `crash_down_s` repair, `recycle_down_s` rejuvenation, recycling at `age_s`.
pub fn age_model_workload(m: &AgeModel) -> Workload {
    Workload {
        name: "weibull-aging".into(),
        about: "age replacement's Weibull lifetimes, one worker".into(),
        boot_s: Some(AGE_SCALE * m.recycle_down_s),
        faults: FaultModel::Aging {
            shape: m.shape,
            scale_s: AGE_SCALE * m.scale_s,
        },
        ..trace_workload(&[], 0.0)
    }
}

/// The age model's cycles on the supervisor at `age_s` model seconds (None: never).
pub fn age_model_on_supervisor(
    m: &AgeModel,
    age_s: Option<f64>,
    seeds: core::ops::Range<u64>,
) -> Result<Vec<Cycle>, CycleError> {
    on_supervisor(
        &age_model_workload(m),
        AGE_SCALE * m.crash_down_s,
        AGE_SCALE * m.recycle_down_s,
        age_s.map(|a| AGE_SCALE * a),
        seeds,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttt_statistic_by_hand() {
        // x = 1, 2, 4: T1 = 3·1, T2 = 3 + 2·1, T3 = 5 + 1·2 = 7 (the sum of the times).
        let (phi, x) = scaled_ttt(&[4.0, 1.0, 2.0]);
        assert_eq!(x, vec![1.0, 2.0, 4.0]);
        let want = [0.0, 3.0 / 7.0, 5.0 / 7.0, 1.0];
        for (p, w) in phi.iter().zip(want) {
            assert!((p - w).abs() < 1e-12, "{phi:?}");
        }
    }

    #[test]
    fn the_ttt_optimum_is_the_empirical_availabilitys_best_order_statistic() {
        // Increasing failure rate: lifetimes near 10 s, one early and one late.
        let times = [2.0, 9.0, 9.5, 10.0, 10.5, 11.0, 30.0];
        let (repair, rejuv) = (5.0, 0.5);
        let (j, age) = optimal_age(&times, repair, rejuv);
        let at = |a: Option<f64>| empirical_availability(&times, repair, rejuv, a);
        let best = at(age);
        let mut sorted = times.to_vec();
        sorted.sort_by(f64::total_cmp);
        for x in &sorted {
            assert!(
                at(Some(*x)) <= best + 1e-12,
                "{x}: {} > {best}",
                at(Some(*x))
            );
        }
        assert!(at(None) <= best + 1e-12);
        assert_eq!((j, age), (2, Some(9.0)), "{best}");
    }

    const TIMES: [f64; 7] = [2.0, 9.0, 9.5, 10.0, 10.5, 11.0, 30.0];

    /// The best of every order statistic and never, by the direct closed form.
    fn brute_force(f: impl Fn(Option<f64>) -> f64, lowest: bool) -> Option<f64> {
        let mut ages: Vec<Option<f64>> = TIMES.iter().map(|x| Some(*x)).collect();
        ages.push(None);
        let key = |a: &Option<f64>| if lowest { f(*a) } else { -f(*a) };
        let best = ages.iter().map(key).fold(f64::INFINITY, f64::min);
        // Never and the last order statistic are the same policy: report never.
        ages.into_iter()
            .rev()
            .find(|a| key(a) <= best + 1e-12)
            .map(|a| a.filter(|x| *x < 30.0))
            .unwrap_or(None)
    }

    #[test]
    fn a_robust_period_moves_the_ttt_optimum_as_the_direct_closed_form_does() {
        let (repair, rejuv) = (5.0, 0.5);
        for robust in [0.0, 3.0, 20.0, 200.0] {
            let (_, age) = optimal_age_after(&TIMES, repair, rejuv, robust);
            let direct = brute_force(
                |a| empirical_availability_after(&TIMES, repair, rejuv, robust, a),
                false,
            );
            let at = |a| empirical_availability_after(&TIMES, repair, rejuv, robust, a);
            assert!(
                (at(age) - at(direct)).abs() < 1e-12,
                "robust {robust} s: the TTT estimate {age:?} (A = {}) is not the direct best \
                 {direct:?} (A = {})",
                at(age),
                at(direct)
            );
        }
        // alpha = 0 is the estimate without a robust period. A long robust period is up
        // time every rejuvenation renews, so rejuvenating soon after it ends pays.
        assert_eq!(
            optimal_age_after(&TIMES, 5.0, 0.5, 0.0),
            optimal_age(&TIMES, 5.0, 0.5)
        );
        let without = optimal_age_after(&TIMES, 5.0, 0.5, 0.0)
            .1
            .unwrap_or(f64::INFINITY);
        let after = optimal_age_after(&TIMES, 5.0, 0.5, 200.0)
            .1
            .unwrap_or(f64::INFINITY);
        assert!(
            after < without,
            "a robust period of 200 s: rejuvenate {after} s after it, not before {without} s"
        );
    }

    #[test]
    fn the_cost_criterion_is_the_direct_closed_forms_best_and_equal_costs_are_availability() {
        let (repair, rejuv) = (5.0, 0.5);
        for (c_f, c_r) in [(1000.0, 40.0), (100.0, 100.0), (10.0, 400.0)] {
            let costs = Costs {
                failed_per_h: c_f,
                rejuvenating_per_h: c_r,
            };
            for robust in [0.0, 20.0] {
                let (_, age) = cost_optimal_age(&TIMES, repair, rejuv, robust, costs);
                let at = |a| empirical_cost_rate(&TIMES, repair, rejuv, robust, a, costs);
                let direct = brute_force(at, true);
                assert!(
                    (at(age) - at(direct)).abs() < 1e-9,
                    "c_f {c_f}, c_r {c_r}, robust {robust}: the TTT cost estimate {age:?} \
                     (${}/h) is not the direct best {direct:?} (${}/h)",
                    at(age),
                    at(direct)
                );
            }
        }
        // One price for every hour down: the cost an hour is c (1 - A), so the cost
        // criterion picks availability's age.
        let same = Costs {
            failed_per_h: 100.0,
            rejuvenating_per_h: 100.0,
        };
        let a = empirical_availability(&TIMES, repair, rejuv, Some(9.0));
        let c = empirical_cost_rate(&TIMES, repair, rejuv, 0.0, Some(9.0), same);
        assert!((c - 100.0 * (1.0 - a)).abs() < 1e-9, "{c} for A = {a}");
        assert_eq!(
            cost_optimal_age(&TIMES, repair, rejuv, 0.0, same).1,
            optimal_age(&TIMES, repair, rejuv).1
        );
        // Rejuvenating dearer than failing: never rejuvenate.
        let dear = Costs {
            failed_per_h: 10.0,
            rejuvenating_per_h: 400.0,
        };
        assert_eq!(cost_optimal_age(&TIMES, repair, rejuv, 0.0, dear).1, None);
    }
}
