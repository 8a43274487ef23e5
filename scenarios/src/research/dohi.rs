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
    let (phi, x) = scaled_ttt(times);
    let n = x.len();
    let beta = rejuvenation_s / (repair_s - rejuvenation_s);
    let score = |j: usize| phi[j] / (j as f64 / n as f64 + beta);
    let best = (1..=n)
        .max_by(|&a, &b| score(a).total_cmp(&score(b)))
        .unwrap_or(n);
    (best, (best < n).then(|| x[best - 1]))
}

/// The closed-form availability of age replacement at `age` (None: never) for the
/// empirical distribution of `times`.
pub fn empirical_availability(
    times: &[f64],
    repair_s: f64,
    rejuvenation_s: f64,
    age: Option<f64>,
) -> f64 {
    let n = times.len() as f64;
    let age = age.unwrap_or(f64::INFINITY);
    let up: f64 = times.iter().map(|x| x.min(age)).sum::<f64>() / n;
    let failed = times.iter().filter(|x| **x <= age).count() as f64 / n;
    up / (up + repair_s * failed + rejuvenation_s * (1.0 - failed))
}

/// The supervisor run of a trace: one worker resampling it, recycled at `age`.
pub fn trace_workload(times: &[f64], rejuvenation_s: f64) -> Workload {
    Workload::one_aging_worker(
        "failure-trace",
        "lifetimes resampled from a failure-time trace, one worker",
        rejuvenation_s,
        FaultModel::FailureTrace {
            trace_file: String::new(),
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
}
