//! The published rejuvenation models run on servery's supervisor: Huang's chain (never
//! rejuvenating) and Garg et al.'s fixed interval, Dohi et al.'s TTT estimate from a
//! failure-time trace, and age replacement; each measured from the supervisor's own run
//! and held to its closed form, the pure model run beside it as the check of the check.

use servery_scenarios::research::age::AgeModel;
use servery_scenarios::research::dohi;
use servery_scenarios::research::garg::{Garg, Row};

const SEEDS: u64 = 300;

fn check(delta_h: f64) {
    let g = Garg::example_a(delta_h);
    let row = Row::run(g, 0..SEEDS).unwrap_or_else(|e| panic!("{e}"));
    let y = g.chain.hours_per_year;
    let (down, cost) = Row::per_year(&row.supervisor, y);
    let (pdown, pcost) = Row::per_year(&row.pure, y);
    let (cd, cc) = row.closed;
    eprintln!(
        "delta {delta_h} h: closed {cd:.3} h ${cc:.2}; supervisor {down:?} {cost:?} ({} recycled of {}); pure {pdown:?} {pcost:?}",
        row.supervisor.recycled, row.supervisor.cycles
    );
    assert!(
        down.covers(cd),
        "supervisor downtime {down:?} misses the closed form {cd}"
    );
    assert!(
        cost.covers(cc),
        "supervisor cost {cost:?} misses the closed form {cc}"
    );
    assert!(
        pdown.covers(cd),
        "pure-model downtime {pdown:?} misses the closed form {cd}"
    );
    assert!(
        pcost.covers(cc),
        "pure-model cost {pcost:?} misses the closed form {cc}"
    );
}

#[test]
fn huangs_chain_never_rejuvenated_on_the_supervisor_covers_huangs_closed_form() {
    check(f64::INFINITY);
}

#[test]
fn garg_fixed_interval_on_the_supervisor_covers_the_closed_form() {
    check(168.0);
}
