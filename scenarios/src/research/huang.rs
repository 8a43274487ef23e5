//! Huang, Kintala, Kolettis and Fulton, "Software Rejuvenation: Analysis, Module and
//! Applications" (FTCS-25, 1995), Example A: the four-state model. A robust process
//! (S0) becomes failure-probable (SP) at rate r2; from SP it fails (SF) at rate λ or is
//! rejuvenated (SR) at rate r4; repair (r1) and rejuvenation (r3) both return it to S0.
//! The closed form is the chain's steady state; the simulation runs the chain on the
//! simulator's clock and stream, one year after a year of warm-up per seed.

use crate::research::clock::ModelRun;
use crate::research::stats::{Estimate, normal_mean};

const HOUR: f64 = 3600.0;

/// The model's parameters (rates per hour) and costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Huang {
    /// S0 → SP: 1 / mean time to the failure-probable state.
    pub r2: f64,
    /// SP → SF.
    pub lambda: f64,
    /// SF → S0: 1 / mean repair time.
    pub r1: f64,
    /// SP → SR: 1 / rejuvenation interval (0: never; infinite: at once).
    pub r4: f64,
    /// SR → S0: 1 / mean rejuvenation time.
    pub r3: f64,
    pub cost_failed_per_hour: f64,
    pub cost_rejuvenating_per_hour: f64,
    pub hours_per_year: f64,
}

impl Huang {
    /// Example A: failure-probable after 7 days on average, failing at 1 / 12 months
    /// from there, 30 min repair, 20 min rejuvenation every 7 days; $1,000 / h failed,
    /// $40 / h rejuvenating; a year of 8,640 h (12 months of 720 h).
    pub fn example_a() -> Huang {
        Huang {
            r2: 1.0 / (7.0 * 24.0),
            lambda: 1.0 / 8640.0,
            r1: 2.0,
            r4: 1.0 / (7.0 * 24.0),
            r3: 3.0,
            cost_failed_per_hour: 1000.0,
            cost_rejuvenating_per_hour: 40.0,
            hours_per_year: 8640.0,
        }
    }

    pub fn with_r4(self, r4: f64) -> Huang {
        Huang { r4, ..self }
    }

    /// Steady-state shares of time failed and rejuvenating. Balance: πP(λ + r4) = r2·π0,
    /// πF·r1 = λ·πP, πR·r3 = r4·πP; at r4 = ∞ the chain leaves SP at once, through SR.
    pub fn steady_state(&self) -> (f64, f64) {
        let (p_f, p_r) = if self.r4.is_infinite() {
            (0.0, self.r2 / self.r3)
        } else {
            let p_p = self.r2 / (self.lambda + self.r4);
            (p_p * self.lambda / self.r1, p_p * self.r4 / self.r3)
        };
        let p_p = if self.r4.is_infinite() {
            0.0
        } else {
            self.r2 / (self.lambda + self.r4)
        };
        let total = 1.0 + p_p + p_f + p_r;
        (p_f / total, p_r / total)
    }

    /// Closed form: (downtime hours per year, cost per year).
    pub fn closed_form(&self) -> (f64, f64) {
        let (p_f, p_r) = self.steady_state();
        let y = self.hours_per_year;
        (
            (p_f + p_r) * y,
            (p_f * self.cost_failed_per_hour + p_r * self.cost_rejuvenating_per_hour) * y,
        )
    }

    /// The cost of an hour failed above which rejuvenating pays. Per unit time the cost
    /// is `r2·(a + b·r4) / (c + d·r4)` with `a = λ·c_f/r1`, `b = c_r/r3`,
    /// `c = λ + r2·(1 + λ/r1)`, `d = 1 + r2/r3` (the steady state with S0's weight 1), a
    /// Möbius function of r4 and so monotone: it falls with r4 exactly when `b·c < a·d`.
    /// So the best rate is never (r4 = 0) or at once (r4 = ∞), whichever side of this
    /// threshold `cost_failed_per_hour` is on; there is no interior optimum.
    pub fn rejuvenation_pays_above(&self) -> f64 {
        let b = self.cost_rejuvenating_per_hour / self.r3;
        let c = self.lambda + self.r2 * (1.0 + self.lambda / self.r1);
        let d = 1.0 + self.r2 / self.r3;
        b * c * self.r1 / (self.lambda * d)
    }

    /// The best rejuvenation rate (per hour): 0 (never) or ∞ (at once), by the threshold.
    pub fn best_r4(&self) -> f64 {
        if self.cost_failed_per_hour > self.rejuvenation_pays_above() {
            f64::INFINITY
        } else {
            0.0
        }
    }

    /// One seed: hours failed and rejuvenating in a year that follows a year of warm-up
    /// (so the year starts near the steady state the closed form describes).
    pub fn simulate_year(&self, seed: u64) -> (f64, f64) {
        let mut run = ModelRun::new(seed, 0x4a06_1995);
        let per_sec = |per_hour: f64| per_hour / HOUR;
        let year = self.hours_per_year * HOUR;
        let (start, end) = (year, 2.0 * year);
        let (mut failed, mut rejuvenating) = (0.0, 0.0);
        let mut state = State::Robust;
        while run.secs() < end {
            let (hold, next) = match state {
                State::Robust => (run.exp_rate(per_sec(self.r2)), State::Probable),
                State::Probable => {
                    let fail = run.exp_rate(per_sec(self.lambda));
                    let rejuvenate = run.exp_rate(per_sec(self.r4));
                    if fail < rejuvenate {
                        (fail, State::Failed)
                    } else {
                        (rejuvenate, State::Rejuvenating)
                    }
                }
                State::Failed => (run.exp_rate(per_sec(self.r1)), State::Robust),
                State::Rejuvenating => (run.exp_rate(per_sec(self.r3)), State::Robust),
            };
            let from = run.secs();
            run.advance(hold.min(end - from + 1.0));
            let counted = (run.secs().min(end) - from.max(start)).max(0.0);
            match state {
                State::Failed => failed += counted,
                State::Rejuvenating => rejuvenating += counted,
                _ => {}
            }
            state = next;
        }
        (failed / HOUR, rejuvenating / HOUR)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Robust,
    Probable,
    Failed,
    Rejuvenating,
}

/// The reproduction: closed form and simulated estimates over `seeds` seeds.
#[derive(Debug, Clone, Copy)]
pub struct HuangReport {
    pub downtime_closed: f64,
    pub cost_closed: f64,
    pub downtime: Estimate,
    pub cost: Estimate,
}

pub fn reproduce(model: &Huang, seeds: core::ops::Range<u64>) -> HuangReport {
    let (downtime_closed, cost_closed) = model.closed_form();
    let years: Vec<(f64, f64)> = seeds.map(|s| model.simulate_year(s)).collect();
    let downtime: Vec<f64> = years.iter().map(|(f, r)| f + r).collect();
    let cost: Vec<f64> = years
        .iter()
        .map(|(f, r)| f * model.cost_failed_per_hour + r * model.cost_rejuvenating_per_hour)
        .collect();
    HuangReport {
        downtime_closed,
        cost_closed,
        downtime: normal_mean(&downtime),
        cost: normal_mean(&cost),
    }
}

impl HuangReport {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "model": "huang-1995",
            "closed_form": {
                "downtime_hours_per_year": self.downtime_closed,
                "cost_per_year": self.cost_closed,
            },
            "simulated": {
                "downtime_hours_per_year": self.downtime.json(),
                "cost_per_year": self.cost.json(),
            },
        })
    }
}
