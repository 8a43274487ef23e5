//! Huang's chain on servery's supervisor, and Garg, Puliafito, Telek and Trivedi,
//! "Analysis of Software Rejuvenation using Markov Regenerative Stochastic Petri Net"
//! (ISSRE 1995): the same robust → failure-probable → failed chain with rejuvenation at a
//! fixed interval δ instead of Huang's exponential rate.
//!
//! **The model.** A fresh process is robust for Exp(r2), failure-probable for Exp(λ),
//! then failed; repair takes 1/r1 on average and returns it robust. A deterministic clock
//! started at the robust state's entry fires after δ, in the robust or the
//! failure-probable state, and the process is rejuvenated (1/r3 on average) and robust
//! again. Every return to the robust state is a regeneration point (the MRGP's), so with
//! `L` the lifetime (hypoexponential: Exp(r2) + Exp(λ)), `R` its survival and
//! `M(δ) = ∫₀^δ R(t) dt`, one cycle lasts on average `M(δ) + F(δ)/r1 + R(δ)/r3`, of which
//! `F(δ)/r1` failed and `R(δ)/r3` rejuvenating (renewal-reward; the steady-state shares
//! depend on the repair and rejuvenation times only through their means). With two
//! distinct rates `a = r2`, `b = λ`:
//! `R(t) = (b·e^{−at} − a·e^{−bt}) / (b − a)` and
//! `M(δ) = [(b/a)(1 − e^{−aδ}) − (a/b)(1 − e^{−bδ})] / (b − a)`.
//! At δ = ∞ this is Huang's chain at r4 = 0 (never rejuvenate), so both papers' closed
//! forms meet there.
//!
//! **On the supervisor.** One worker; its lifetime is the workload's Markov aging chain
//! (`phase_means_s = [1/r2, 1/λ]`); rejuvenation is servery's age recycling
//! (`worker_max_age = δ`, no jitter); a worker's boot takes the rejuvenation time (the
//! recycle's replacement boots beside the old worker for that long) and a crash's restart
//! delay makes up the rest of the repair time (`restart_backoff = 1/r1 − 1/r3`). Model
//! hours are [`SCALE_S`] simulated seconds, so the supervisor's few milliseconds of
//! messages are under 0.1 % of the shortest model time. Huang's own r4 is a rate out of
//! the failure-probable state, which a supervisor that sees only a worker's age cannot
//! act on; where the chains agree (r4 = 0, δ = ∞) the supervisor is held to Huang's
//! closed form too.

use servery_core::supervisor::Platform;

use crate::research::clock::ModelRun;
use crate::research::cycles::{self, Cycle, CycleError, Shares};
use crate::research::huang::Huang;
use crate::research::policy::Policy;
use crate::research::stats::Estimate;
use crate::research::workload::{FaultModel, Workload};

/// Failures below which a row is judged by its failure count alone.
pub const MIN_FAILURES: u64 = 10;

/// Simulated seconds per model hour.
pub const SCALE_S: f64 = 100.0;

/// Huang's chain with rejuvenation every `delta_h` hours of a process's life
/// (infinite: never). Rates per hour, costs per hour, as [`Huang`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Garg {
    pub chain: Huang,
    pub delta_h: f64,
}

impl Garg {
    /// Huang's Example A parameters with rejuvenation every `delta_h` hours.
    pub fn example_a(delta_h: f64) -> Garg {
        Garg {
            chain: Huang::example_a().with_r4(0.0),
            delta_h,
        }
    }

    /// The lifetime's survival at `t` hours.
    pub fn survival(&self, t: f64) -> f64 {
        let (a, b) = (self.chain.r2, self.chain.lambda);
        if t.is_infinite() {
            return 0.0;
        }
        (b * (-a * t).exp() - a * (-b * t).exp()) / (b - a)
    }

    /// `∫₀^δ R(t) dt`: the expected life before δ.
    pub fn mean_life_before(&self, delta: f64) -> f64 {
        let (a, b) = (self.chain.r2, self.chain.lambda);
        let e = |r: f64| {
            if delta.is_infinite() {
                1.0
            } else {
                1.0 - (-r * delta).exp()
            }
        };
        ((b / a) * e(a) - (a / b) * e(b)) / (b - a)
    }

    /// Steady-state shares of time failed and rejuvenating.
    pub fn steady_state(&self) -> (f64, f64) {
        let survive = self.survival(self.delta_h);
        let failed = (1.0 - survive) / self.chain.r1;
        let rejuvenating = survive / self.chain.r3;
        let cycle = self.mean_life_before(self.delta_h) + failed + rejuvenating;
        (failed / cycle, rejuvenating / cycle)
    }

    /// The cost of an hour failed above which rejuvenating every `delta_h` costs less
    /// than never rejuvenating: both costs are linear in `c_f` and meet at
    /// `c_r · r(δ) / (f(∞) − f(δ))`, with `f` and `r` the shares of time failed and
    /// rejuvenating. Huang's exponential form has one such threshold for every rate
    /// ([`Huang::rejuvenation_pays_above`]); at fixed intervals it depends on the interval.
    /// `None` when rejuvenating does not shorten the time failed (never, or no aging).
    pub fn pays_above(&self) -> Option<f64> {
        let (failed, rejuvenating) = self.steady_state();
        let never = Garg {
            delta_h: f64::INFINITY,
            ..*self
        };
        let (failed_never, _) = never.steady_state();
        (failed_never > failed)
            .then(|| self.chain.cost_rejuvenating_per_hour * rejuvenating / (failed_never - failed))
    }

    /// Closed form: (downtime hours a year, cost a year).
    pub fn closed_form(&self) -> (f64, f64) {
        let (f, r) = self.steady_state();
        let (c, y) = (&self.chain, self.chain.hours_per_year);
        (
            (f + r) * y,
            (f * c.cost_failed_per_hour + r * c.cost_rejuvenating_per_hour) * y,
        )
    }

    /// The workload the supervisor runs: one worker aging through the chain.
    pub fn workload(&self) -> Workload {
        let c = &self.chain;
        Workload::one_aging_worker(
            "huang-chain",
            "Huang's robust -> failure-probable -> failed chain, one worker",
            SCALE_S / c.r3,
            FaultModel::MarkovAging {
                phase_means_s: vec![SCALE_S / c.r2, SCALE_S / c.lambda],
            },
        )
    }

    /// The policy the supervisor runs: age recycling every δ, the repair's remainder as
    /// the restart delay, heartbeats far apart (a crash is seen by its exit, not a beat).
    pub fn policy(&self) -> Policy {
        let c = &self.chain;
        cycles::age_policy(
            format!("age-recycle-{}h", self.delta_h),
            SCALE_S * (1.0 / c.r1 - 1.0 / c.r3),
            self.delta_h.is_finite().then_some(SCALE_S * self.delta_h),
            SCALE_S / c.r3,
        )
    }

    /// The supervisor's cycles over `seeds`.
    pub fn on_supervisor(&self, seeds: core::ops::Range<u64>) -> Result<Vec<Cycle>, CycleError> {
        let (w, p) = (self.workload(), self.policy());
        seeds
            .map(|s| cycles::supervisor_cycle(&w, &p, s, Platform::Posix))
            .collect()
    }

    /// The pure model's cycles (the check of the check): the same lifetimes, the
    /// model's repair and rejuvenation times, no supervisor.
    pub fn pure_model(&self, seeds: core::ops::Range<u64>) -> Vec<Cycle> {
        let w = self.workload();
        let c = &self.chain;
        seeds
            .map(|s| {
                let life = w.lifetime(s, 0).unwrap_or(f64::INFINITY) / SCALE_S;
                let mut run = ModelRun::new(s, 0x6a46_1995);
                if life < self.delta_h {
                    let repair = run.exp_rate(c.r1);
                    Cycle {
                        length: life + repair,
                        failed: repair,
                        rejuvenating: 0.0,
                        recycled: false,
                    }
                } else {
                    let rejuvenation = run.exp_rate(c.r3);
                    Cycle {
                        length: self.delta_h + rejuvenation,
                        failed: 0.0,
                        rejuvenating: rejuvenation,
                        recycled: true,
                    }
                }
            })
            .collect()
    }

    /// Shares from cycles, with this model's costs.
    pub fn shares(&self, cycles: &[Cycle]) -> Shares {
        cycles::shares(
            cycles,
            self.chain.cost_failed_per_hour,
            self.chain.cost_rejuvenating_per_hour,
        )
    }
}

/// [`Garg::pays_above`] from measured shares (the supervisor's or the pure model's) at an
/// interval and at never: the point estimate and bounds from the shares' 95 % intervals
/// taken at their extremes (conservative: the box of three intervals, not a joint 95 %).
/// `None` when the measured time failed is not shorter than never's.
pub fn pays_above_measured(at: &Shares, never: &Shares, c_r: f64) -> Option<Estimate> {
    let gain = |f_never: f64, f: f64| f_never - f;
    (gain(never.failed.mean, at.failed.mean) > 0.0).then(|| Estimate {
        mean: c_r * at.rejuvenating.mean / gain(never.failed.mean, at.failed.mean),
        lo: c_r * at.rejuvenating.lo / gain(never.failed.hi, at.failed.lo),
        hi: if gain(never.failed.lo, at.failed.hi) > 0.0 {
            c_r * at.rejuvenating.hi / gain(never.failed.lo, at.failed.hi)
        } else {
            f64::INFINITY
        },
    })
}

/// One row of the supervisor reproduction: δ, closed form, supervisor and pure model.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub model: Garg,
    pub closed: (f64, f64),
    pub supervisor: Shares,
    pub pure: Shares,
}

impl Row {
    pub fn run(model: Garg, seeds: core::ops::Range<u64>) -> Result<Row, CycleError> {
        let supervisor = model.shares(&model.on_supervisor(seeds.clone())?);
        let pure = model.shares(&model.pure_model(seeds));
        Ok(Row {
            model,
            closed: model.closed_form(),
            supervisor,
            pure,
        })
    }

    /// Whether `s` (the supervisor's or the pure model's) agrees with the closed form:
    /// its share of cycles ended by a failure within the Wilson 95 % interval of `F(δ)`,
    /// and, when there are at least [`MIN_FAILURES`] failures (or only failures), its
    /// downtime and cost a year within their normal 95 % intervals. Fewer failures make
    /// the ratio's normal interval collapse (every cycle alike), so only the count is
    /// judged then.
    pub fn covered(&self, s: &Shares) -> bool {
        let n = s.cycles as u64;
        let k = n - s.recycled as u64;
        let failure = 1.0 - self.model.survival(self.model.delta_h);
        let count = crate::research::stats::wilson(k, n).covers(failure);
        let (down, cost) = Row::per_year(s, self.model.chain.hours_per_year);
        let figures = down.covers(self.closed.0) && cost.covers(self.closed.1);
        count && (figures || (k < MIN_FAILURES && k < n))
    }

    /// (downtime, cost) a year, as estimates, of the supervisor or the pure model.
    pub fn per_year(
        s: &Shares,
        hours_per_year: f64,
    ) -> (
        crate::research::stats::Estimate,
        crate::research::stats::Estimate,
    ) {
        (
            cycles::scaled(s.down, hours_per_year),
            cycles::scaled(s.cost, hours_per_year),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_threshold_an_interval_costs_what_never_does_and_above_it_less() {
        for delta in [8640.0, 720.0, 168.0, 24.0] {
            let g = Garg::example_a(delta);
            let c_f = g
                .pays_above()
                .unwrap_or_else(|| panic!("{delta} h shortens nothing"));
            let cost = |c_f: f64, delta_h: f64| {
                let mut m = Garg::example_a(delta_h);
                m.chain.cost_failed_per_hour = c_f;
                m.closed_form().1
            };
            let (at, never) = (cost(c_f, delta), cost(c_f, f64::INFINITY));
            assert!(
                (at - never).abs() < 1e-6 * never,
                "threshold rule: at c_f = {c_f} every {delta} h costs {at}, never {never}"
            );
            assert!(
                cost(1.01 * c_f, delta) < cost(1.01 * c_f, f64::INFINITY)
                    && cost(0.99 * c_f, delta) > cost(0.99 * c_f, f64::INFINITY),
                "threshold rule: above c_f = {c_f} rejuvenating every {delta} h pays, below not"
            );
        }
        assert_eq!(Garg::example_a(f64::INFINITY).pays_above(), None);
    }

    #[test]
    fn the_measured_threshold_is_the_same_ratio_of_the_measured_shares() {
        let share = |mean: f64, half: f64| Estimate {
            mean,
            lo: mean - half,
            hi: mean + half,
        };
        let shares = |failed: Estimate, rejuvenating: Estimate| Shares {
            failed,
            rejuvenating,
            down: failed,
            cost: failed,
            cycles: 1,
            recycled: 0,
        };
        // Exact shares: the closed form's ratio, with no spread.
        let at = shares(share(0.01, 0.0), share(0.02, 0.0));
        let never = shares(share(0.05, 0.0), share(0.0, 0.0));
        let e = pays_above_measured(&at, &never, 40.0).unwrap_or_else(|| panic!("no gain"));
        assert!(
            (e.mean - 40.0 * 0.02 / 0.04).abs() < 1e-9 && e.lo == e.mean && e.hi == e.mean,
            "threshold rule: c_r r / (f_never - f) of the measured shares, got {e:?}"
        );
        // Spread: the bounds hold the point, and a gain the intervals cannot rule out
        // leaves the upper bound open.
        let at = shares(share(0.01, 0.005), share(0.02, 0.001));
        let never = shares(share(0.05, 0.038), share(0.0, 0.0));
        let e = pays_above_measured(&at, &never, 40.0).unwrap_or_else(|| panic!("no gain"));
        assert!(
            e.lo < e.mean && e.hi == f64::INFINITY,
            "threshold rule: bounds from the intervals' extremes, got {e:?}"
        );
        assert!(pays_above_measured(&never, &at, 40.0).is_none());
    }

    #[test]
    fn never_rejuvenating_is_huangs_chain_at_r4_zero() {
        let g = Garg::example_a(f64::INFINITY);
        let (down, cost) = g.closed_form();
        let (hd, hc) = Huang::example_a().with_r4(0.0).closed_form();
        assert!(
            (down - hd).abs() < 1e-9 && (cost - hc).abs() < 1e-6,
            "{down} {hd} {cost} {hc}"
        );
    }

    #[test]
    fn a_row_with_few_failures_is_judged_by_its_failure_count() {
        let g = Garg::example_a(24.0);
        let boot = SCALE_S / g.chain.r3;
        let recycle = Cycle {
            length: 24.0 * SCALE_S + boot,
            failed: 0.0,
            rejuvenating: boot,
            recycled: true,
        };
        let mut row = Row {
            model: g,
            closed: g.closed_form(),
            supervisor: g.shares(&[recycle; 100]),
            pure: g.shares(&[recycle; 100]),
        };
        // No failure in 100 cycles (0.02 expected): the ratio's interval collapses onto
        // a figure just off the closed form, and the count decides.
        let (down, _) = Row::per_year(&row.supervisor, g.chain.hours_per_year);
        assert!(!down.covers(row.closed.0), "{down:?}");
        assert!(row.covered(&row.supervisor));
        // Half the cycles failed: the count is far outside its interval.
        let failure = Cycle {
            length: 10.0 * SCALE_S + SCALE_S / g.chain.r1,
            failed: SCALE_S / g.chain.r1,
            rejuvenating: 0.0,
            recycled: false,
        };
        let mixed: Vec<Cycle> = (0..100)
            .map(|i| if i % 2 == 0 { recycle } else { failure })
            .collect();
        row.supervisor = g.shares(&mixed);
        assert!(!row.covered(&row.supervisor));
    }

    #[test]
    fn the_mean_life_before_delta_is_the_survivals_integral() {
        let g = Garg::example_a(168.0);
        // Trapezoids over [0, 500] h.
        let n = 100_000;
        let h = 500.0 / n as f64;
        let sum: f64 = (0..n)
            .map(|i| 0.5 * h * (g.survival(i as f64 * h) + g.survival((i + 1) as f64 * h)))
            .sum();
        let m = g.mean_life_before(500.0);
        assert!((sum - m).abs() < 1e-6 * m, "{sum} {m}");
        assert!((g.survival(0.0) - 1.0).abs() < 1e-12);
    }
}
