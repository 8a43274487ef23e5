//! `reproduce garg-1995` and `reproduce dohi-2000`, and age replacement's supervisor
//! rows: each published rejuvenation model run on servery's supervisor (one worker, age
//! recycling as the rejuvenation), its closed form, and the pure model beside it.

use std::fmt::Write as _;
use std::path::Path;

use crate::research::age::AgeModel;
use crate::research::cycles::{self, Cycle, Shares};
use crate::research::dohi;
use crate::research::garg::{self, Garg, MIN_FAILURES, Row, SCALE_S};
use crate::research::huang::Huang;
use crate::research::stats::Estimate;
use crate::research::ttt_plot::Tangent;
use crate::research::workload::{self, FaultModel};

/// Seeds (one regenerative cycle each) per row by default.
pub const GARG_SEEDS: u64 = 2000;
pub const DOHI_SEEDS: u64 = 2000;
pub const AGE_SUPERVISOR_SEEDS: u64 = 1000;

/// Garg et al.'s rejuvenation intervals the report runs (hours; infinite: never).
pub const GARG_INTERVALS_H: [f64; 5] = [f64::INFINITY, 8640.0, 720.0, 168.0, 24.0];

fn ci(e: &Estimate, digits: usize) -> String {
    format!("{:.d$} [{:.d$}, {:.d$}]", e.mean, e.lo, e.hi, d = digits)
}

fn interval_label(h: f64) -> String {
    if h.is_infinite() {
        "never".into()
    } else if h >= 24.0 {
        format!("{} days", h / 24.0)
    } else {
        format!("{h} h")
    }
}

/// The closed form's best interval on a log grid from 1 h to 10⁶ h, and never.
pub fn garg_best(g: &Garg) -> (f64, f64) {
    let mut best = (f64::INFINITY, g.closed_form().1);
    for k in 0..=600 {
        let delta = 10f64.powf(k as f64 / 100.0);
        let cost = Garg {
            delta_h: delta,
            ..*g
        }
        .closed_form()
        .1;
        if cost < best.1 {
            best = (delta, cost);
        }
    }
    best
}

/// The rows of `reproduce garg-1995`.
pub fn garg_rows(seeds: u64) -> Result<Vec<Row>, String> {
    GARG_INTERVALS_H
        .iter()
        .map(|&d| Row::run(Garg::example_a(d), 0..seeds).map_err(|e| e.to_string()))
        .collect()
}

pub fn garg_text(seeds: u64) -> Result<String, String> {
    let rows = garg_rows(seeds)?;
    let g = Garg::example_a(f64::INFINITY);
    let c = &g.chain;
    let y = c.hours_per_year;
    let mut s = format!(
        "garg-1995 (Huang's Example A chain, rejuvenation every interval of a worker's life; \
         on the supervisor: one worker, {SCALE_S} s per model hour, {seeds} cycles a row)\n\
         parameters: robust Exp(1/r2 = {:.0} h), failure-probable Exp(1/lambda = {:.0} h), \
         repair 1/r1 = {:.2} h, rejuvenation 1/r3 = {:.3} h, c_f = ${}/h, c_r = ${}/h, {} h a year\n\
         on the supervisor: worker_max_age = interval, boot = 1/r3, restart delay = 1/r1 - 1/r3; \
         never = Huang's chain at r4 = 0\n\
         interval   closed form h/yr  $/yr     failures (closed)  supervisor h/yr             supervisor $/yr               pure model h/yr             covered (sup, pure)\n",
        1.0 / c.r2,
        1.0 / c.lambda,
        1.0 / c.r1,
        1.0 / c.r3,
        c.cost_failed_per_hour,
        c.cost_rejuvenating_per_hour,
        y
    );
    let mut all = true;
    for row in &rows {
        let (down, cost) = Row::per_year(&row.supervisor, y);
        let (pdown, pcost) = Row::per_year(&row.pure, y);
        let _ = pcost;
        let (sup, pure) = (row.covered(&row.supervisor), row.covered(&row.pure));
        all &= sup && pure;
        let failures = row.supervisor.cycles - row.supervisor.recycled;
        let expected = (1.0 - row.model.survival(row.model.delta_h)) * seeds as f64;
        let _ = writeln!(
            s,
            "{:<10} {:>16.3}  {:>7.2}  {:>5} ({:>6.1})  {:<26}  {:<28}  {:<26}  {sup}, {pure}",
            interval_label(row.model.delta_h),
            row.closed.0,
            row.closed.1,
            failures,
            expected,
            ci(&down, 3),
            ci(&cost, 2),
            ci(&pdown, 3),
        );
    }
    s.push_str(&garg_thresholds(&rows, &g));
    let (best, cost) = garg_best(&g);
    let _ = writeln!(
        s,
        "failures: cycles the supervisor ended by a crash, and the closed form's F(interval) x cycles; \
         covered: the failures within their Wilson 95 % interval and, with at least {MIN_FAILURES} failures, \
         downtime and cost within their 95 % (delta-method) intervals\n\
         every interval covered on the supervisor and in the pure model: {all}\n\
         closed form's best interval at c_f = ${}/h: {} (${cost:.2} a year); \
         as in Huang's exponential form, with these costs rejuvenating does not pay",
        c.cost_failed_per_hour,
        if best.is_infinite() {
            "never".to_string()
        } else {
            format!("{best:.1} h")
        },
    );
    Ok(s)
}

/// Where rejuvenating at each interval starts to pay: the cost of an hour failed at which
/// it costs what never rejuvenating does, in closed form and from the supervisor's
/// measured shares (the never row as the baseline), beside Huang's one threshold.
fn garg_thresholds(rows: &[Row], g: &Garg) -> String {
    let c_r = g.chain.cost_rejuvenating_per_hour;
    let never = rows
        .iter()
        .find(|r| r.model.delta_h.is_infinite())
        .map(|r| r.supervisor);
    let mut s = String::from(
        "rejuvenation pays only above c_f ($/h failed; where its cost meets never rejuvenating's):\n\
         interval   closed form  supervisor [from its shares' 95 % intervals]  covered\n",
    );
    for row in rows.iter().filter(|r| r.model.delta_h.is_finite()) {
        let Some(closed) = row.model.pays_above() else {
            continue;
        };
        let measured = never.and_then(|n| garg::pays_above_measured(&row.supervisor, &n, c_r));
        let (text, covered) = match measured {
            Some(e) => (
                format!("{:.0} [{:.0}, {:.0}]", e.mean, e.lo, e.hi),
                e.covers(closed),
            ),
            None => ("-".into(), false),
        };
        let _ = writeln!(
            s,
            "{:<10} {closed:>11.2}  {text:<44}  {covered}",
            interval_label(row.model.delta_h)
        );
    }
    let _ = writeln!(
        s,
        "Huang's exponential form (r4 a rate out of the failure-probable state): ${:.2}/h at every rate",
        Huang::example_a().rejuvenation_pays_above()
    );
    s
}

pub fn garg_json(seeds: u64) -> Result<serde_json::Value, String> {
    let rows = garg_rows(seeds)?;
    let y = rows
        .first()
        .map_or(8640.0, |r| r.model.chain.hours_per_year);
    let never = rows
        .iter()
        .find(|r| r.model.delta_h.is_infinite())
        .map(|r| r.supervisor);
    Ok(serde_json::json!({
        "model": "garg-1995",
        "parameters": format!("{:?}", Garg::example_a(f64::INFINITY).chain),
        "scale_s_per_model_hour": SCALE_S,
        "rows": rows.iter().map(|r| {
            let (down, cost) = Row::per_year(&r.supervisor, y);
            let (pdown, pcost) = Row::per_year(&r.pure, y);
            serde_json::json!({
                "interval_h": if r.model.delta_h.is_finite() { serde_json::json!(r.model.delta_h) } else { serde_json::json!("never") },
                "closed_form": {"downtime_hours_per_year": r.closed.0, "cost_per_year": r.closed.1},
                "supervisor": {"downtime_hours_per_year": down.json(), "cost_per_year": cost.json(), "cycles": r.supervisor.cycles, "recycled": r.supervisor.recycled},
                "pure_model": {"downtime_hours_per_year": pdown.json(), "cost_per_year": pcost.json()},
                // Where rejuvenating at this interval starts to pay ($/h failed; an open
                // upper bound is null).
                "pays_above_cost_failed_per_hour": {
                    "closed_form": r.model.pays_above(),
                    "supervisor": never
                        .and_then(|n| garg::pays_above_measured(&r.supervisor, &n, r.model.chain.cost_rejuvenating_per_hour))
                        .map(|e| e.json()),
                },
            })
        }).collect::<Vec<_>>(),
    }))
}

/// The pure model's cycle: the lifetime, then the model's deterministic repair or
/// rejuvenation time.
pub fn pure_cycle(life: f64, age: Option<f64>, repair: f64, rejuvenation: f64) -> Cycle {
    match age {
        Some(a) if life > a => Cycle {
            length: a + rejuvenation,
            failed: 0.0,
            rejuvenating: rejuvenation,
            recycled: true,
        },
        _ => Cycle {
            length: life + repair,
            failed: repair,
            rejuvenating: 0.0,
            recycled: false,
        },
    }
}

/// Dohi et al.'s reproduction from the shipped `failure-trace` workload.
#[derive(Debug, Clone)]
pub struct DohiReport {
    pub n: usize,
    /// The trace's mean failure time, `μ_f` (seconds).
    pub mean_s: f64,
    pub repair_s: f64,
    pub rejuvenation_s: f64,
    pub j: usize,
    pub age: Option<f64>,
    pub closed: f64,
    pub never_closed: f64,
    pub supervisor: Shares,
    pub pure: Shares,
    /// The trace's source distribution, for the estimator's loss: (T*, A(T*), A(t̂₀)).
    pub parametric: (f64, f64, f64),
    /// The cost criterion at [`DOHI_COSTS`]: closed form and estimates in dollars an hour.
    pub cost: DohiCriterion,
    /// Availability with a robust period of [`DOHI_ROBUST_S`] before the trace's times.
    pub robust: DohiCriterion,
    /// With the robust period, availability at the estimate that ignores it (`α = 0`).
    pub robust_ignored: f64,
    /// The availability estimate's graphical construction (`α = 0`).
    pub tangent: Tangent,
}

/// The TTT plot and its tangent for the availability criterion of a trace (`α = 0`).
pub fn dohi_tangent(times_s: &[f64]) -> Tangent {
    let beta = DOHI_REJUVENATION_S / (DOHI_REPAIR_S - DOHI_REJUVENATION_S);
    Tangent::construct(times_s, 0.0, beta)
}

/// One more criterion of the Dohi reproduction, on the supervisor and in the pure model.
#[derive(Debug, Clone)]
pub struct DohiCriterion {
    pub j: usize,
    /// `t̂₀`, from the robust period's end (None: never).
    pub age: Option<f64>,
    /// The supervisor's `worker_max_age`: the robust period plus `t̂₀`.
    pub supervisor_age: Option<f64>,
    pub closed: f64,
    pub supervisor: Estimate,
    pub pure: Estimate,
}

/// The cost criterion's prices: Huang et al.'s Example A, $1,000 an hour failed and $40
/// an hour rejuvenating.
pub const DOHI_COSTS: dohi::Costs = dohi::Costs {
    failed_per_h: 1000.0,
    rejuvenating_per_h: 40.0,
};

/// The robust period of the reproduction's second run (seconds).
pub const DOHI_ROBUST_S: f64 = 1000.0;

/// Repair and rejuvenation times of the Dohi reproduction: the age model's, ten times.
pub const DOHI_REPAIR_S: f64 = 20.0;
pub const DOHI_REJUVENATION_S: f64 = 2.0;

pub fn dohi(trace_workload: &Path, seeds: u64) -> Result<DohiReport, String> {
    let w = workload::load(trace_workload).map_err(|e| e.to_string())?;
    let FaultModel::FailureTrace { times_s, .. } = &w.faults else {
        return Err(format!(
            "{}: the workload's faults must be a failure-trace",
            trace_workload.display()
        ));
    };
    let (repair, rejuv) = (DOHI_REPAIR_S, DOHI_REJUVENATION_S);
    let (j, age) = dohi::optimal_age(times_s, repair, rejuv);
    let w = dohi::trace_workload(times_s, rejuv);
    let sup = dohi::on_supervisor(&w, repair, rejuv, age, 0..seeds).map_err(|e| e.to_string())?;
    let pure: Vec<Cycle> = (0..seeds)
        .map(|s| pure_cycle(w.lifetime(s, 0).unwrap_or(0.0), age, repair, rejuv))
        .collect();
    let run = |robust: f64, age: Option<f64>| -> Result<(Vec<Cycle>, Vec<Cycle>), String> {
        let w = dohi::trace_workload_after(times_s, rejuv, robust);
        let supervisor_age = age.map(|a| robust + a);
        let sup = dohi::on_supervisor(&w, repair, rejuv, supervisor_age, 0..seeds)
            .map_err(|e| e.to_string())?;
        let pure = (0..seeds)
            .map(|s| {
                pure_cycle(
                    w.lifetime(s, 0).unwrap_or(0.0),
                    supervisor_age,
                    repair,
                    rejuv,
                )
            })
            .collect();
        Ok((sup, pure))
    };
    let costs = DOHI_COSTS;
    let (cj, cage) = dohi::cost_optimal_age(times_s, repair, rejuv, 0.0, costs);
    let (csup, cpure) = run(0.0, cage)?;
    let dollars =
        |c: &[Cycle]| cycles::shares(c, costs.failed_per_h, costs.rejuvenating_per_h).cost;
    let cost = DohiCriterion {
        j: cj,
        age: cage,
        supervisor_age: cage,
        closed: dohi::empirical_cost_rate(times_s, repair, rejuv, 0.0, cage, costs),
        supervisor: dollars(&csup),
        pure: dollars(&cpure),
    };
    let robust_s = DOHI_ROBUST_S;
    let (rj, rage) = dohi::optimal_age_after(times_s, repair, rejuv, robust_s);
    let (rsup, rpure) = run(robust_s, rage)?;
    let robust = DohiCriterion {
        j: rj,
        age: rage,
        supervisor_age: rage.map(|a| robust_s + a),
        closed: dohi::empirical_availability_after(times_s, repair, rejuv, robust_s, rage),
        supervisor: availability(&dohi::down_share(&rsup).down),
        pure: availability(&dohi::down_share(&rpure).down),
    };
    let robust_ignored = dohi::empirical_availability_after(times_s, repair, rejuv, robust_s, age);
    let weibull = AgeModel {
        shape: 2.0,
        scale_s: 600.0,
        crash_down_s: repair,
        recycle_down_s: rejuv,
    };
    let best = weibull.best_age();
    Ok(DohiReport {
        n: times_s.len(),
        mean_s: times_s.iter().sum::<f64>() / times_s.len() as f64,
        repair_s: repair,
        rejuvenation_s: rejuv,
        j,
        age,
        closed: dohi::empirical_availability(times_s, repair, rejuv, age),
        never_closed: dohi::empirical_availability(times_s, repair, rejuv, None),
        supervisor: dohi::down_share(&sup),
        pure: dohi::down_share(&pure),
        parametric: (
            best,
            weibull.availability(best),
            weibull.availability(age.unwrap_or(f64::INFINITY)),
        ),
        cost,
        robust,
        robust_ignored,
        tangent: dohi_tangent(times_s),
    })
}

fn availability(e: &Estimate) -> Estimate {
    Estimate {
        mean: 1.0 - e.mean,
        lo: 1.0 - e.hi,
        hi: 1.0 - e.lo,
    }
}

pub fn dohi_text(r: &DohiReport, trace: &str, seeds: u64) -> String {
    let beta = r.rejuvenation_s / (r.repair_s - r.rejuvenation_s);
    let (sup, pure) = (availability(&r.supervisor.down), availability(&r.pure.down));
    let age = r.age.map_or("never".to_string(), |a| format!("{a:.1} s"));
    format!(
        "dohi-2000 (optimal rejuvenation age from failure data, scaled TTT; trace {trace}, n = {}; \
         on the supervisor: one worker resampling the trace, {seeds} cycles)\n\
         parameters: repair mu_a = {} s, rejuvenation mu_c = {} s, beta = mu_c/(mu_a - mu_c) = {beta:.4}, \
         alpha = 0 (age from the boot)\n\
         estimate: j* = {} of {}, t0 = {age}\n\
         availability at t0: closed form (empirical distribution) {:.5}; supervisor {}; pure model {}; \
         covered: {}, {}\n\
         never rejuvenating: closed form {:.5}\n\
         the trace's source, Weibull(2, 600 s): best age {:.1} s, A = {:.5}; A at the estimate {:.5} \
         ({:.3} % below the best)\n",
        r.n,
        r.repair_s,
        r.rejuvenation_s,
        r.j,
        r.n,
        r.closed,
        ci(&sup, 5),
        ci(&pure, 5),
        sup.covers(r.closed),
        pure.covers(r.closed),
        r.never_closed,
        r.parametric.0,
        r.parametric.1,
        r.parametric.2,
        100.0 * (1.0 - r.parametric.2 / r.parametric.1),
    ) + &dohi_more_text(r)
}

fn age_text(a: Option<f64>) -> String {
    a.map_or("never".to_string(), |a| format!("{a:.1} s"))
}

/// The cost criterion and the robust period, after the availability criterion.
fn dohi_more_text(r: &DohiReport) -> String {
    let (c, b) = (&r.cost, &r.robust);
    let costs = DOHI_COSTS;
    let beta_cost = costs.rejuvenating_per_h * r.rejuvenation_s
        / (costs.failed_per_h * r.repair_s - costs.rejuvenating_per_h * r.rejuvenation_s);
    format!(
        "cost criterion at c_f = ${}/h failed, c_r = ${}/h rejuvenating (c_r mu_c / (c_f mu_a - c_r mu_c) = {beta_cost:.4}): \
         j* = {} of {}, t0 = {}\n\
         cost at t0, $/h: closed form {:.4}; supervisor {}; pure model {}; covered: {}, {}\n\
         robust period mu_0 = {DOHI_ROBUST_S} s before the trace's times (alpha = mu_0/mu_f = {:.4}): j* = {} of {}, \
         t0 = {} after it, worker_max_age = {}\n\
         availability at it: closed form {:.5}; supervisor {}; pure model {}; covered: {}, {}; \
         the alpha = 0 estimate with this robust period: {:.5}\n\
         graphical construction (--out DIR draws ttt-plot.svg and .pdf): the line from (-beta, -alpha) = \
         ({:.4}, {:.4}) tangent to the scaled TTT plot touches it at (j/n, phi_j) = ({:.3}, {:.4}), slope {:.4}; \
         no point above it: {}; the same j* as the estimate: {}\n",
        costs.failed_per_h,
        costs.rejuvenating_per_h,
        c.j,
        r.n,
        age_text(c.age),
        c.closed,
        ci(&c.supervisor, 4),
        ci(&c.pure, 4),
        c.supervisor.covers(c.closed),
        c.pure.covers(c.closed),
        DOHI_ROBUST_S / r.mean_s,
        b.j,
        r.n,
        age_text(b.age),
        age_text(b.supervisor_age),
        b.closed,
        ci(&b.supervisor, 5),
        ci(&b.pure, 5),
        b.supervisor.covers(b.closed),
        b.pure.covers(b.closed),
        r.robust_ignored,
        -r.tangent.beta,
        // + 0.0: α = 0 prints as 0, not -0.
        -r.tangent.alpha + 0.0,
        r.tangent.j as f64 / r.n as f64,
        r.tangent.phi[r.tangent.j],
        r.tangent.slope,
        r.tangent.supports_the_plot(),
        r.tangent.j == r.j,
    )
}

fn criterion_json(c: &DohiCriterion) -> serde_json::Value {
    serde_json::json!({
        "j": c.j, "age_s": c.age, "worker_max_age_s": c.supervisor_age,
        "closed_form": c.closed, "supervisor": c.supervisor.json(), "pure_model": c.pure.json(),
    })
}

pub fn dohi_json(r: &DohiReport, trace: &str) -> serde_json::Value {
    let (sup, pure) = (availability(&r.supervisor.down), availability(&r.pure.down));
    serde_json::json!({
        "model": "dohi-2000",
        "trace": trace,
        "parameters": {"n": r.n, "repair_s": r.repair_s, "rejuvenation_s": r.rejuvenation_s, "alpha": 0.0},
        "estimate": {"j": r.j, "age_s": r.age},
        "availability": {"closed_form": r.closed, "supervisor": sup.json(), "pure_model": pure.json(), "never_closed_form": r.never_closed},
        "source_weibull": {"best_age_s": r.parametric.0, "best_availability": r.parametric.1, "availability_at_estimate": r.parametric.2},
        "cost_criterion": {"failed_per_h": DOHI_COSTS.failed_per_h, "rejuvenating_per_h": DOHI_COSTS.rejuvenating_per_h, "dollars_per_h": criterion_json(&r.cost)},
        "robust_period": {"robust_s": DOHI_ROBUST_S, "availability": criterion_json(&r.robust), "availability_ignoring_it": r.robust_ignored},
        "graphical_construction": {"from": [-r.tangent.beta, -r.tangent.alpha + 0.0], "j": r.tangent.j, "slope": r.tangent.slope, "no_point_above": r.tangent.supports_the_plot()},
    })
}

/// Age replacement on the supervisor, by cycles: (age, closed A without overlap, the
/// supervisor's A counting each recycle's boot as downtime).
pub fn age_supervisor_rows(seeds: u64) -> Result<Vec<(Option<f64>, f64, Estimate)>, String> {
    let m = AgeModel::standard();
    [Some(10.0), Some(20.0), Some(30.0), None]
        .into_iter()
        .map(|age| {
            let c = dohi::age_model_on_supervisor(&m, age, 0..seeds).map_err(|e| e.to_string())?;
            let a = availability(&cycles::shares(&c, 1.0, 1.0).down);
            Ok((age, m.availability(age.unwrap_or(f64::INFINITY)), a))
        })
        .collect()
}

pub fn age_supervisor_text(seeds: u64) -> Result<String, String> {
    let mut s = format!(
        "\non the supervisor, by regenerative cycles ({seeds} a row; time x {}: one worker, \
         boots of the recycle's downtime, the rest of the crash recovery as restart delay; \
         a recycle's boot counted as down, as the model counts it):\n\
         age_s  closed   supervisor [95 %]          covered\n",
        dohi::AGE_SCALE
    );
    for (age, closed, a) in age_supervisor_rows(seeds)? {
        let label = age.map_or("never".to_string(), |a| format!("{a}"));
        let _ = writeln!(
            s,
            "{label:<5}  {closed:.4}   {}   {}",
            ci(&a, 4),
            a.covers(closed)
        );
    }
    Ok(s)
}
