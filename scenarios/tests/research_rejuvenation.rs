//! The published rejuvenation models run on servery's supervisor: Huang's chain (never
//! rejuvenating) and Garg et al.'s fixed interval, Dohi et al.'s TTT estimate from a
//! failure-time trace, and age replacement; each measured from the supervisor's own run
//! (regenerative cycles, one a seed) and held to its closed form, the pure model run
//! beside it as the check of the check.

use std::path::Path;

use servery_scenarios::research::age::AgeModel;
use servery_scenarios::research::cli::resolve;
use servery_scenarios::research::garg::{self, Garg, Row, SCALE_S};
use servery_scenarios::research::reproduce_rejuvenation as rejuvenation;
use servery_scenarios::research::workload::{self, FaultModel};
use servery_scenarios::research::{cycles, dohi};

/// Cycles a check runs: enough that a weekly interval sees its ~14 failures.
const SEEDS: u64 = 2000;

fn check(delta_h: f64) {
    let g = Garg::example_a(delta_h);
    let row = Row::run(g, 0..SEEDS).unwrap_or_else(|e| panic!("{e}"));
    let y = g.chain.hours_per_year;
    let (down, cost) = Row::per_year(&row.supervisor, y);
    let (pdown, pcost) = Row::per_year(&row.pure, y);
    let (cd, cc) = row.closed;
    let failures = (row.supervisor.cycles - row.supervisor.recycled) as u64;
    assert!(
        row.covered(&row.supervisor),
        "interval {delta_h} h: the supervisor ({failures} failures in {SEEDS} cycles) misses the closed form: \
         downtime {down:?} h/yr for {cd}, cost {cost:?} $/yr for {cc}"
    );
    assert!(
        row.covered(&row.pure),
        "interval {delta_h} h: the pure model misses the closed form: downtime {pdown:?} for {cd}, cost {pcost:?} for {cc}"
    );
    // Every cycle ends the way the interval says: never → every cycle is a failure; a
    // recycle lasts the interval, then the replacement's boot (1/r3), which is the
    // rejuvenation's time; a failure's downtime is the repair time 1/r1.
    let cycles = g.on_supervisor(0..SEEDS).unwrap_or_else(|e| panic!("{e}"));
    let (scale, boot, repair) = (SCALE_S, SCALE_S / g.chain.r3, SCALE_S / g.chain.r1);
    for c in &cycles {
        if c.recycled {
            assert!(
                (c.rejuvenating - boot).abs() < 0.01
                    && (c.length - delta_h * scale - boot).abs() < 0.02,
                "interval {delta_h} h: a recycle took {} s of rejuvenation in a {} s cycle, not {boot} s in {} s",
                c.rejuvenating,
                c.length,
                delta_h * scale + boot
            );
        } else {
            assert!(
                (c.failed - repair).abs() < 0.01,
                "interval {delta_h} h: a failure was down {} s, not the repair time {repair} s",
                c.failed
            );
        }
    }
    if delta_h.is_infinite() {
        assert_eq!(row.supervisor.recycled, 0, "no recycling without an age");
    } else {
        assert!(row.supervisor.recycled > 0, "an interval recycles");
    }
}

#[test]
fn huangs_chain_never_rejuvenated_on_the_supervisor_covers_huangs_closed_form() {
    // Huang's closed form at r4 = 0: 0.490 h and $490.44 a year.
    let (d, c) = servery_scenarios::research::huang::Huang::example_a()
        .with_r4(0.0)
        .closed_form();
    assert!(
        (d - 0.4904).abs() < 1e-3 && (c - 490.44).abs() < 0.01,
        "{d} {c}"
    );
    check(f64::INFINITY);
}

#[test]
fn garg_weekly_rejuvenation_on_the_supervisor_covers_the_closed_form() {
    check(168.0);
}

#[test]
fn garg_daily_rejuvenation_on_the_supervisor_covers_the_closed_form() {
    // About 0.4 failures in 2,000 cycles: judged by the failure count and each cycle's
    // times.
    check(24.0);
}

#[test]
fn with_example_as_costs_never_rejuvenating_is_best_at_fixed_intervals_too() {
    let g = Garg::example_a(f64::INFINITY);
    let (best, cost) = rejuvenation::garg_best(&g);
    assert!(best.is_infinite(), "best interval {best} h at ${cost}");
    // A failure a hundred times dearer makes some interval pay.
    let mut dear = g;
    dear.chain.cost_failed_per_hour = 100_000.0;
    let (best, _) = rejuvenation::garg_best(&dear);
    assert!(best.is_finite(), "with c_f = $100,000/h an interval pays");
}

#[test]
fn dohi_ttt_estimate_from_the_shipped_trace_on_the_supervisor_covers_its_closed_form() {
    let path = resolve("failure-trace", "workloads");
    let r = rejuvenation::dohi(&path, SEEDS).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.n, 50, "the shipped trace holds 50 failure times");
    let age = r
        .age
        .unwrap_or_else(|| panic!("rejuvenating pays on this trace"));
    let a = |e: &servery_scenarios::research::stats::Estimate| (1.0 - e.hi, 1.0 - e.lo);
    let (lo, hi) = a(&r.supervisor.down);
    assert!(
        lo <= r.closed && r.closed <= hi,
        "the supervisor's availability [{lo}, {hi}] at t0 = {age} s misses the closed form {}",
        r.closed
    );
    let (lo, hi) = a(&r.pure.down);
    assert!(
        lo <= r.closed && r.closed <= hi,
        "the pure model's availability [{lo}, {hi}] misses the closed form {}",
        r.closed
    );
    assert!(r.closed > r.never_closed, "rejuvenating at t0 beats never");
    // The TTT estimate is the trace's best order statistic for the empirical model.
    let w = workload::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let FaultModel::FailureTrace { times_s, .. } = &w.faults else {
        panic!("not a trace")
    };
    for x in times_s {
        let a = dohi::empirical_availability(times_s, r.repair_s, r.rejuvenation_s, Some(*x));
        assert!(
            a <= r.closed + 1e-12,
            "recycling at {x} s gives A = {a}, above the TTT estimate's {} at {age} s",
            r.closed
        );
    }
    // The trace came from Weibull(2, 600 s): the estimate costs under 0.1 % of the
    // parametric optimum's availability.
    let (_, best, at) = r.parametric;
    assert!(best - at < 1e-3 * best, "{at} vs {best}");

    // The cost criterion (decision 0111): at $1,000/h failed and $40/h rejuvenating a
    // failure is dear, so the estimate rejuvenates earlier than availability's; the
    // supervisor's dollars an hour cover the empirical closed form.
    let c = &r.cost;
    let cost_age = c.age.unwrap_or(f64::INFINITY);
    assert!(
        cost_age < age,
        "the cost criterion rejuvenates at {cost_age} s, not before {age} s"
    );
    assert!(
        c.supervisor.covers(c.closed) && c.pure.covers(c.closed),
        "cost criterion at t0 = {cost_age} s: the supervisor's ${:?}/h or the pure model's \
         ${:?}/h misses the closed form ${}/h",
        c.supervisor,
        c.pure,
        c.closed
    );
    // The robust period: the supervisor recycles at mu_0 + t0, and its availability
    // covers the closed form with alpha = mu_0/mu_f; ignoring the robust period (alpha = 0)
    // would have chosen a worse age.
    let b = &r.robust;
    assert_eq!(
        b.supervisor_age,
        b.age.map(|a| rejuvenation::DOHI_ROBUST_S + a),
        "worker_max_age is the robust period plus t0"
    );
    assert!(
        b.supervisor.covers(b.closed) && b.pure.covers(b.closed),
        "robust period: the supervisor's availability {:?} or the pure model's {:?} at age \
         {:?} misses the closed form {}",
        b.supervisor,
        b.pure,
        b.supervisor_age,
        b.closed
    );
    assert!(
        b.j != r.j && b.closed > r.robust_ignored,
        "with a robust period the alpha estimate (j* = {}, A = {}) improves on alpha = 0's \
         (j* = {}, A = {})",
        b.j,
        b.closed,
        r.j,
        r.robust_ignored
    );
}

#[test]
fn age_replacement_on_the_supervisor_covers_the_closed_form() {
    let rows = rejuvenation::age_supervisor_rows(300).unwrap_or_else(|e| panic!("{e}"));
    for (age, closed, a) in rows {
        assert!(
            a.covers(closed),
            "age {age:?}: the supervisor's availability {a:?} misses the closed form {closed}"
        );
    }
    let _ = AgeModel::standard();
}

#[test]
fn the_shipped_aging_workloads_load_and_draw_their_models() {
    let w = workload::load(&resolve("huang-chain", "workloads")).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(&w.faults, FaultModel::MarkovAging { phase_means_s } if phase_means_s.len() == 2)
    );
    // Hypoexponential: the mean of many draws is the sum of the phase means.
    let mean: f64 = (0..4000).filter_map(|k| w.lifetime(1, k)).sum::<f64>() / 4000.0;
    assert!((mean - 88_080.0).abs() < 0.05 * 88_080.0, "{mean}");
    let t =
        workload::load(&resolve("failure-trace", "workloads")).unwrap_or_else(|e| panic!("{e}"));
    let FaultModel::FailureTrace { times_s, .. } = &t.faults else {
        panic!("not a trace")
    };
    // Every drawn lifetime is one of the trace's times.
    for k in 0..200 {
        let life = t.lifetime(3, k).unwrap_or(f64::NAN);
        assert!(times_s.contains(&life), "{life}");
    }
}

fn load_text(name: &str, text: &str) -> Result<workload::Workload, String> {
    let dir = std::env::temp_dir().join(format!("servery-trace-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join("w.toml");
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    workload::load(&path).map_err(|e| e.to_string())
}

#[test]
fn bad_aging_workloads_are_refused_naming_the_field_and_the_rule() {
    let head = "name = \"w\"\nfault_class = \"transient\"\nduration_s = 60.0\n";
    let e = load_text(
        "phases",
        &format!("{head}[faults]\nkind = \"markov-aging\"\nphase_means_s = []\n"),
    )
    .err()
    .unwrap_or_default();
    assert!(
        e.contains("faults.phase_means_s: must list at least one phase"),
        "{e}"
    );
    let e = load_text(
        "boot",
        &format!("{head}boot_s = 0.0\n[faults]\nkind = \"steady\"\n"),
    )
    .err()
    .unwrap_or_default();
    assert!(e.contains("boot_s: must be in (0, 3600]"), "{e}");
    let e = load_text(
        "missing",
        &format!("{head}[faults]\nkind = \"failure-trace\"\ntrace_file = \"nope.txt\"\n"),
    )
    .err()
    .unwrap_or_default();
    assert!(e.contains("nope.txt") && e.contains("cannot read"), "{e}");
    let dir = std::env::temp_dir().join(format!("servery-trace-{}-robust", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("t.txt"), "10\n20\n").unwrap_or_else(|e| panic!("{e}"));
    let e = load_text(
        "robust",
        &format!(
            "{head}[faults]\nkind = \"failure-trace\"\ntrace_file = \"t.txt\"\nrobust_s = -1.0\n"
        ),
    )
    .err()
    .unwrap_or_default();
    assert!(
        e.contains("faults.robust_s: must be a finite number of seconds >= 0"),
        "{e}"
    );
    let bad = workload::parse_trace(Path::new("t.txt"), "# c\n12.5\nabc\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        bad.contains("faults.trace_file: line 3: \"abc\" is not a number of seconds"),
        "{bad}"
    );
    let bad = workload::parse_trace(Path::new("t.txt"), "3\n-1\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        bad.contains("line 2: a failure time must be finite and > 0"),
        "{bad}"
    );
    let bad = workload::parse_trace(Path::new("t.txt"), "3\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(bad.contains("at least two failure times"), "{bad}");
}

#[test]
fn a_cycle_is_read_from_the_supervisors_run() {
    // One worker, Garg's chain at a 7-day interval: seed 0's first worker lives past it,
    // so its cycle is a recycle: the age, then the replacement's boot.
    let g = Garg::example_a(168.0);
    let c = cycles::supervisor_cycle(
        &g.workload(),
        &g.policy(),
        0,
        servery_core::supervisor::Platform::Posix,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.recycled && c.failed == 0.0, "{c:?}");
    let boot = 100.0 / 3.0;
    assert!((c.rejuvenating - boot).abs() < 0.01, "{c:?}");
    assert!((c.length - (16_800.0 + boot)).abs() < 0.02, "{c:?}");
    let _ = dohi::AGE_SCALE;
}

#[test]
fn several_fault_models_act_in_one_run() {
    let w =
        workload::load(&resolve("storm-on-aging", "workloads")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(w.also_faults.len(), 2);
    let draw = w.draw(7);
    // The storm's crash per worker at 300 s and the hang model's pauses, merged in order.
    let at_300 = draw
        .faults
        .iter()
        .filter(|(at, f)| {
            at.as_secs_f64() == 300.0 && matches!(f, servery_sim::Fault::CrashWorker { .. })
        })
        .count();
    assert_eq!(at_300, 4, "one crash per worker when the storm begins");
    assert!(
        draw.faults
            .iter()
            .any(|(_, f)| matches!(f, servery_sim::Fault::PauseWorker { .. })),
        "the hang model's pauses are in the plan"
    );
    assert!(
        draw.faults.windows(2).all(|p| p[0].0 <= p[1].0),
        "in time order"
    );
    assert_eq!(draw.xs.len(), 3);
    assert_eq!(draw.x, None, "[faults] (aging) draws no parameter");
    assert!(
        draw.xs[1].is_some_and(|d| (5.0..=20.0).contains(&d)),
        "{:?}",
        draw.xs
    );
    // On the supervisor: workers crash of age and in the storm, and pauses are seen.
    let p = servery_scenarios::research::policy::load(&resolve("seed-defaults", "policies"))
        .unwrap_or_else(|e| panic!("{e}"));
    let m = servery_scenarios::research::compare::run_one(
        &p,
        &w,
        7,
        servery_core::supervisor::Platform::Posix,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let before = m.boot_times.iter().filter(|t| **t < 300.0).count();
    let storm = m
        .boot_times
        .iter()
        .filter(|t| (300.0..330.0).contains(*t))
        .count();
    assert!(
        before >= 1 && storm >= 1,
        "aging restarts workers before the storm ({before}) and the storm after ({storm}): {:?} (failed {})",
        m.boot_times,
        m.failed
    );
}

#[test]
fn a_lone_fault_model_draws_as_before_there_could_be_several() {
    // The same model alone and first of several: the same plan for it.
    let head = "name = \"w\"\nfault_class = \"transient\"\nduration_s = 600.0\n";
    let storm = "[faults]\nkind = \"crash-storm\"\nstart_s = 100.0\noutage_s = [1.0, 9.0]\n";
    let alone = load_text("alone", &format!("{head}{storm}")).unwrap_or_else(|e| panic!("{e}"));
    let more = load_text(
        "more",
        &format!("{head}{storm}[[also_faults]]\nkind = \"poison-request\"\nrequests = 2\nwindow_s = [400.0, 500.0]\nretries = 0\nretry_gap_s = 1.0\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for seed in 0..20 {
        let (a, m) = (alone.draw(seed), more.draw(seed));
        assert_eq!(a.x, m.x, "seed {seed}");
        let before_400: Vec<_> = m
            .faults
            .iter()
            .filter(|(t, _)| t.as_secs_f64() < 400.0)
            .cloned()
            .collect();
        assert_eq!(a.faults, before_400, "seed {seed}");
    }
    let two = load_text(
        "two",
        &format!("{head}[faults]\nkind = \"aging\"\nshape = 2.0\nscale_s = 60.0\n[[also_faults]]\nkind = \"markov-aging\"\nphase_means_s = [10.0]\n"),
    )
    .err()
    .unwrap_or_default();
    assert!(
        two.contains("also_faults: at most one fault model may set a worker's lifetime"),
        "{two}"
    );
    let old = load_text(
        "faults2",
        &format!("{head}{storm}[faults2]\nkind = \"steady\"\n"),
    )
    .err()
    .unwrap_or_default();
    assert!(
        old.contains("faults2"),
        "an unknown table is still named: {old}"
    );
}

#[test]
fn time_varying_load_offers_each_steps_rate() {
    let w = workload::load(&resolve("daily-peak", "workloads")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(w.rate_at(0.0), 10.0);
    assert_eq!(w.rate_at(450.0), 60.0);
    assert_eq!(w.rate_at(899.0), 10.0);
    // 300 s at 10, 300 at 60, 300 at 10.
    assert!((w.offered_between(0.0, 900.0) - 24_000.0).abs() < 1e-9);
    assert!((w.offered_between(250.0, 350.0) - (500.0 + 3000.0)).abs() < 1e-9);
    // On the supervisor, over 20 seeds: the requests offered follow the steps (within
    // 3 %, a Poisson count of 24,000 has a 0.6 % standard deviation).
    let p = servery_scenarios::research::policy::load(&resolve("seed-defaults", "policies"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut steady = w.clone();
    steady.load_steps.clear();
    steady.faults = FaultModel::Steady;
    let mut peak = steady.clone();
    peak.load_steps = w.load_steps.clone();
    for (wl, want) in [(&steady, 9_000.0), (&peak, 24_000.0)] {
        let draw = wl.draw(3);
        let spec = wl.spec(&p, 3, servery_core::supervisor::Platform::Posix, &draw);
        let o = servery_sim::simulate(spec).unwrap_or_else(|e| panic!("{e}"));
        let r = &o.requests;
        let offered = (r.ok + r.failed_fault + r.failed_forced + r.refused + r.stranded) as f64;
        assert!(
            (offered - want).abs() < 0.03 * want,
            "{} offered {offered} requests, not about {want}",
            if wl.load_steps.is_empty() {
                "a steady 10/s"
            } else {
                "the peak"
            }
        );
    }
    let bad = load_text(
        "steps",
        "name = \"w\"\nfault_class = \"none\"\nduration_s = 60.0\nload_steps = [[30.0, 5.0], [10.0, 1.0]]\n[faults]\nkind = \"steady\"\n",
    )
    .err()
    .unwrap_or_default();
    assert!(
        bad.contains("load_steps: must be [from_s, rate] pairs with from_s >= 0 rising"),
        "{bad}"
    );
}

/// Rejuvenating weekly on the supervisor pays only above a cost of failure: the closed
/// form's threshold (where weekly costs what never does) lies within the bounds the
/// supervisor's measured shares give, and above Example A's $1,000/h, so never is best.
#[test]
fn weekly_rejuvenation_on_the_supervisor_pays_only_above_its_closed_form_threshold() {
    let never =
        garg::Row::run(Garg::example_a(f64::INFINITY), 0..SEEDS).unwrap_or_else(|e| panic!("{e}"));
    let weekly = garg::Row::run(Garg::example_a(168.0), 0..SEEDS).unwrap_or_else(|e| panic!("{e}"));
    let closed = weekly
        .model
        .pays_above()
        .unwrap_or_else(|| panic!("weekly rejuvenation shortens the time failed"));
    let c_r = weekly.model.chain.cost_rejuvenating_per_hour;
    let measured = garg::pays_above_measured(&weekly.supervisor, &never.supervisor, c_r)
        .unwrap_or_else(|| panic!("the supervisor failed less with weekly rejuvenation"));
    assert!(
        measured.covers(closed) && closed > 1_000.0,
        "threshold rule: weekly rejuvenation pays above c_f = ${closed:.2}/h (closed form), \
         above Example A's $1,000/h; the supervisor's shares give {measured:?}"
    );
}

/// `reproduce dohi-2000 --out DIR` draws the TTT plot and its tangent, as SVG and PDF;
/// a model without a plot refuses `--out`.
#[test]
fn the_ttt_plot_is_written_as_svg_and_pdf() {
    let dir = std::env::temp_dir().join(format!("servery-ttt-{}", std::process::id()));
    servery_scenarios::research::reproduce::write_plots("dohi-2000", &dir)
        .unwrap_or_else(|e| panic!("{e}"));
    let svg = std::fs::read_to_string(dir.join("ttt-plot.svg")).unwrap_or_else(|e| panic!("{e}"));
    let pdf = std::fs::read(dir.join("ttt-plot.pdf")).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        svg.contains("j* = 3 of 50") && pdf.starts_with(b"%PDF"),
        "the plot names the estimate the text reports (j* = 3 of 50) and has its PDF"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(servery_scenarios::research::reproduce::write_plots("huang-1995", &dir).is_err());
}
