//! `servery-scenarios reproduce MODEL`: the published models, closed form against
//! simulation, as text or JSON.

use crate::research::age::{self, AgeModel};
use crate::research::huang::{self, Huang};
use crate::research::reproduce_rejuvenation as rejuvenation;

/// The models `reproduce` knows.
pub const MODELS: &[&str] = &["huang-1995", "age-replacement", "garg-1995", "dohi-2000"];

/// Seeds the CLI uses by default for each model.
pub const HUANG_SEEDS: u64 = 4000;
pub const AGE_SEEDS: u64 = 400;
/// The age-replacement grid and each seed's horizon.
pub const AGE_STEP_S: f64 = 2.0;
pub const AGE_MAX_S: f64 = 60.0;
pub const AGE_HORIZON_S: f64 = 3600.0;
/// The fine grid around the coarse grid's best: 0.1 s steps (0.5 % of T* = 20.19 s, so
/// the grid resolves the optimum within 1 %), 6 s either side.
pub const AGE_FINE_STEP_S: f64 = 0.1;
pub const AGE_FINE_HALF_WIDTH_S: f64 = 6.0;

/// Run `model` over `seeds` seeds (its default when `None`); the report as text or JSON.
pub fn reproduce(model: &str, seeds: Option<u64>, json: bool) -> Result<String, String> {
    match model {
        "huang-1995" => {
            let n = seeds.unwrap_or(HUANG_SEEDS);
            let r = huang::reproduce(&Huang::example_a(), 0..n);
            if json {
                let mut v = r.json();
                let m = Huang::example_a();
                v["optimum"] = serde_json::json!({
                    "best_rejuvenation_rate_per_hour": if m.best_r4().is_infinite() { serde_json::json!("infinite") } else { serde_json::json!(m.best_r4()) },
                    "rejuvenation_pays_above_cost_failed_per_hour": m.rejuvenation_pays_above(),
                });
                v["provenance"] = provenance(model, n, format!("{m:?}"));
                return Ok(v.to_string());
            }
            let never = Huang::example_a().with_r4(0.0).closed_form();
            let at_once = Huang::example_a().with_r4(f64::INFINITY).closed_form();
            Ok(format!(
                "huang-1995 (Example A, {n} simulated years)\n\
                 {}\n\
                 closed form: {:.3} h downtime, ${:.2} a year (never rejuvenating: {:.3} h, ${:.2}; at once: {:.2} h, ${:.2})\n\
                 simulated:   {:.3} h [{:.3}, {:.3}], ${:.2} [{:.2}, {:.2}] (95 % intervals)\n\
                 covered: downtime {}, cost {}\n\
                 {}",
                huang_parameters(&Huang::example_a()),
                r.downtime_closed,
                r.cost_closed,
                never.0,
                never.1,
                at_once.0,
                at_once.1,
                r.downtime.mean,
                r.downtime.lo,
                r.downtime.hi,
                r.cost.mean,
                r.cost.lo,
                r.cost.hi,
                r.downtime.covers(r.downtime_closed),
                r.cost.covers(r.cost_closed),
                huang_optimum(&Huang::example_a()),
            ))
        }
        "age-replacement" => {
            let n = seeds.unwrap_or(AGE_SEEDS);
            let m = AgeModel::standard();
            let r = age::reproduce(&m, 0..n, AGE_STEP_S, AGE_MAX_S, AGE_HORIZON_S);
            let fine = age::fine_optimum(
                &m,
                0..n,
                r.best_simulated().0,
                AGE_FINE_HALF_WIDTH_S,
                AGE_FINE_STEP_S,
                AGE_HORIZON_S,
            );
            if json {
                let mut v = r.json();
                v["fine_grid"] = serde_json::json!({
                    "step_s": fine.step,
                    "from_s": fine.points.first().map(|p| p.0),
                    "to_s": fine.points.last().map(|p| p.0),
                    "closed_form_best_age_s": fine.best_closed,
                    "simulated_best_age_s": fine.best_simulated.0,
                    "simulated_availability_at_best": fine.best_simulated.1.json(),
                    "indistinguishable_from_best_s": [fine.indistinguishable.0, fine.indistinguishable.1],
                });
                let grid = format!(
                    "{m:?}, ages {AGE_STEP_S} s to {AGE_MAX_S} s in steps of {AGE_STEP_S} s, {AGE_HORIZON_S} s a seed"
                );
                v["provenance"] = provenance(model, n, grid);
                return Ok(v.to_string());
            }
            let supervisor =
                rejuvenation::age_supervisor_text(n.clamp(2, rejuvenation::AGE_SUPERVISOR_SEEDS))?;
            Ok(format!("{}{supervisor}", age_text(&m, &r, &fine, n)))
        }
        "garg-1995" => {
            let n = seeds.unwrap_or(rejuvenation::GARG_SEEDS);
            if json {
                let mut v = rejuvenation::garg_json(n)?;
                v["provenance"] =
                    provenance(model, n, format!("{:?}", Huang::example_a().with_r4(0.0)));
                return Ok(v.to_string());
            }
            rejuvenation::garg_text(n)
        }
        "dohi-2000" => {
            let n = seeds.unwrap_or(rejuvenation::DOHI_SEEDS);
            let path = crate::research::cli::resolve("failure-trace", "workloads");
            let trace = "workloads/traces/weibull-2-600.txt";
            let r = rejuvenation::dohi(&path, n)?;
            if json {
                let mut v = rejuvenation::dohi_json(&r, trace);
                v["provenance"] = provenance(model, n, format!("trace {trace}"));
                return Ok(v.to_string());
            }
            Ok(rejuvenation::dohi_text(&r, trace, n))
        }
        _ => Err(format!(
            "unknown model {model:?}: expected one of {}",
            MODELS.join(", ")
        )),
    }
}

/// `reproduce MODEL --out DIR`: the model's plots, each as SVG and PDF. Only dohi-2000
/// draws one: the TTT plot and the tangent that picks the estimate (`ttt-plot`).
pub fn write_plots(model: &str, dir: &std::path::Path) -> Result<(), String> {
    if model != "dohi-2000" {
        return Err(format!("{model} draws no plot: --out is for dohi-2000"));
    }
    let path = crate::research::cli::resolve("failure-trace", "workloads");
    let w = crate::research::workload::load(&path).map_err(|e| e.to_string())?;
    let crate::research::workload::FaultModel::FailureTrace { times_s, .. } = &w.faults else {
        return Err(format!("{}: not a failure trace", path.display()));
    };
    let t = rejuvenation::dohi_tangent(times_s);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let svg = t.svg(&format!(
        "Scaled TTT plot of the shipped trace (n = {}) and the tangent from (-beta, -alpha)",
        t.n()
    ));
    crate::research::output::write_plot(dir, "ttt-plot.svg", &svg).map_err(|e| e.to_string())
}

/// The model's parameters as the paper states them (means in hours, costs an hour), so
/// the output says what it was computed from.
fn huang_parameters(m: &Huang) -> String {
    format!(
        "parameters: robust Exp(1/r2 = {:.0} h), failure-probable Exp(1/lambda = {:.0} h), \
         repair 1/r1 = {:.2} h, rejuvenation 1/r3 = {:.3} h every 1/r4 = {:.0} h from failure-probable, \
         c_f = ${}/h, c_r = ${}/h, {} h a year",
        1.0 / m.r2,
        1.0 / m.lambda,
        1.0 / m.r1,
        1.0 / m.r3,
        1.0 / m.r4,
        m.cost_failed_per_hour,
        m.cost_rejuvenating_per_hour,
        m.hours_per_year
    )
}

/// Cost and downtime against the rejuvenation interval, the best rate and the cost
/// threshold above which rejuvenating pays (closed form).
fn huang_optimum(m: &Huang) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "rejuvenation interval  downtime h/year  cost $/year   (closed form; parameters as Example A)\n",
    );
    let rows = [
        ("at once", f64::INFINITY),
        ("1 day", 1.0 / 24.0),
        ("7 days", 1.0 / (7.0 * 24.0)),
        ("30 days", 1.0 / (30.0 * 24.0)),
        ("1 year", 1.0 / 8640.0),
        ("never", 0.0),
    ];
    for (label, r4) in rows {
        let (down, cost) = m.with_r4(r4).closed_form();
        let _ = writeln!(s, "{label:<21}  {down:>15.3}  {cost:>11.2}");
    }
    let threshold = m.rejuvenation_pays_above();
    let best = if m.best_r4().is_infinite() {
        "at once"
    } else {
        "never"
    };
    let _ = write!(
        s,
        "cost falls or rises monotonically with the rate: best rate {best} at ${:.0}/h failed; \
         rejuvenating pays only above c_f = ${threshold:.2}/h failed",
        m.cost_failed_per_hour
    );
    s
}

/// `reproduce --json`'s provenance: the commit, the command, the seeds and the model's
/// full parameters.
fn provenance(model: &str, seeds: u64, parameters: String) -> serde_json::Value {
    serde_json::json!({
        "commit": crate::research::provenance::commit(),
        "command": format!(
            "cargo run --release -p servery-scenarios -- reproduce {model} --seeds {seeds} --json"
        ),
        "seeds": {"first": 0, "end_exclusive": seeds, "count": seeds},
        "parameters": parameters,
    })
}

fn age_text(m: &AgeModel, r: &age::AgeReport, fine: &age::FineOptimum, n: u64) -> String {
    use std::fmt::Write as _;
    let (best, at) = r.best_simulated();
    let mut s = format!(
        "age-replacement (Weibull({}, {} s) lifetimes, {} s crash recovery, {} s planned recycle, no overlap; {n} seeds x {} s)\n\
         closed form: best age {:.2} s, A = {:.4}; without recycling A = {:.4}\n\
         simulated:   best grid age {best} s, A = {:.4} [{:.4}, {:.4}]; without {:.4} [{:.4}, {:.4}]\n\
         age_s  closed   simulated [95 % interval]  covered\n",
        m.shape,
        m.scale_s,
        m.crash_down_s,
        m.recycle_down_s,
        AGE_HORIZON_S,
        r.best_closed,
        r.at_best_closed,
        r.without_closed,
        at.mean,
        at.lo,
        at.hi,
        r.without.mean,
        r.without.lo,
        r.without.hi,
    );
    for (age, closed, sim) in &r.curve {
        let _ = writeln!(
            s,
            "{age:5}  {closed:.4}   {:.4} [{:.4}, {:.4}]  {}",
            sim.mean,
            sim.lo,
            sim.hi,
            sim.covers(*closed)
        );
    }
    let points = r.curve.len();
    let covered = r.curve.iter().filter(|(_, c, sim)| sim.covers(*c)).count();
    let family = 1.0 - 0.05 / points.max(1) as f64;
    let covered_family = r
        .curve
        .iter()
        .filter(|(_, c, sim)| sim.widened(family).covers(*c))
        .count();
    let _ = writeln!(
        s,
        "covered: {covered} of {points} grid points at 95 % each ({:.1} misses expected by chance); \
         at the family-wise 95 % (Bonferroni, {:.2} % each): {covered_family} of {points}",
        0.05 * points as f64,
        100.0 * family
    );
    let (from, to) = (
        fine.points.first().map_or(0.0, |p| p.0),
        fine.points.last().map_or(0.0, |p| p.0),
    );
    let (best, at) = fine.best_simulated;
    let (lo, hi) = fine.indistinguishable;
    let _ = writeln!(
        s,
        "fine grid: {} s steps from {from:.1} to {to:.1} s ({} ages; a step is {:.1} % of the closed form's best)\n\
         closed form on it: best {:.1} s (exact {:.2} s)\n\
         simulated on it:   best {best:.1} s, A = {:.4} [{:.4}, {:.4}]; ages it cannot tell from its best \
         (paired differences over the same seeds, family-wise 95 %): {lo:.1} to {hi:.1} s, holding {:.2} s: {}",
        fine.step,
        fine.points.len(),
        100.0 * fine.step / r.best_closed,
        fine.best_closed,
        r.best_closed,
        at.mean,
        at.lo,
        at.hi,
        r.best_closed,
        lo <= r.best_closed && r.best_closed <= hi,
    );
    let _ = writeln!(
        s,
        "\nwith servery's N + 1 overlap (a planned recycle costs no downtime, one extra process for its {} s boot):\n\
         age_s  A(no overlap)  A(overlap)  recycles/h  extra process-s/h  peak processes",
        m.recycle_down_s
    );
    for age in [5.0, 10.0, 20.0, 30.0, 60.0, f64::INFINITY] {
        let per_hour = m.recycles_per_hour(age, true);
        let _ = writeln!(
            s,
            "{age:5}  {:.4}         {:.4}      {per_hour:8.1}    {:8.1}           {}",
            m.availability(age),
            m.availability_overlapped(age),
            per_hour * m.recycle_down_s,
            if age.is_finite() { 2 } else { 1 },
        );
    }
    s.push_str(
        "with overlap, availability rises monotonically as the age falls: the optimum moves to the\n\
         shortest age the boot budget allows, and what it costs is boots (process-seconds, and a\n\
         second process's memory during each overlap), not downtime.\n",
    );
    s
}
