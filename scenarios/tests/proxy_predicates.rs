//! The predicates of the proxy and CGI scenarios reject the outcomes they exist to catch:
//! a breach the oracle recorded (the message naming its rule), a dead grant holder whose
//! grants never came back, a service that never saturated, a script left at the end.
//! (That the oracle sees the breaches is shown by mutants of the core:
//! `docs/mutation-testing.md`.)

use servery_core::supervisor::Platform;
use servery_scenarios::{find, judge_as, run};
use servery_sim::Outcome;

fn passing_run(name: &str, want: impl Fn(&Outcome) -> bool) -> (u64, Outcome) {
    let scenario = find(name).expect("the scenario");
    for seed in 0..50 {
        let r = run(scenario, seed, Platform::Posix, false);
        assert!(r.verdict.is_ok(), "{name} seed {seed}: {:?}", r.verdict);
        if want(&r.outcome) {
            return (seed, r.outcome);
        }
    }
    panic!("{name}: no seed of 50 gives the outcome wanted");
}

fn rejected(name: &str, want: impl Fn(&Outcome) -> bool, change: impl Fn(&mut Outcome), why: &str) {
    let (seed, mut o) = passing_run(name, want);
    change(&mut o);
    let verdict = judge_as(
        find(name).expect("the scenario"),
        seed,
        Platform::Posix,
        &mut o,
    );
    let err = verdict.expect_err("the predicate must reject it");
    assert!(err.contains(why), "{err}");
}

#[test]
fn a_breach_the_oracle_recorded_fails_the_run_naming_its_rule() {
    for name in ["upstream-flapping", "proxy-admission-kill", "cgi-scripts"] {
        rejected(
            name,
            |_| true,
            |o| {
                o.proxy.breaches.push((
                    1_234,
                    "health rule (no worker sends to an upstream it learned is down): w1 sent"
                        .into(),
                ))
            },
            "at 1234 ms health rule (no worker sends to an upstream it learned is down)",
        );
    }
}

#[test]
fn grants_that_never_came_back_and_no_saturation_are_caught() {
    let killed = |o: &Outcome| !o.proxy.killed_holding.is_empty();
    rejected(
        "proxy-admission-kill",
        killed,
        |o| o.proxy.most_in_flight_after_kill = o.proxy.bound - 1,
        "admission rule (a dead worker's grants return)",
    );
    rejected(
        "proxy-admission-kill",
        |_| true,
        |o| o.proxy.refused = 0,
        "admission saturated no request",
    );
}

#[test]
fn a_script_left_at_the_end_is_caught() {
    rejected(
        "cgi-scripts",
        |_| true,
        |o| o.proxy.scripts_at_end = 1,
        "CGI orphan rule (no script outlives its worker)",
    );
    rejected(
        "cgi-scripts",
        |_| true,
        |o| o.proxy.scripts = 0,
        "no script ran",
    );
}
