//! The scenario gates as `cargo test`: a bounded sweep, determinism, the regression
//! corpus, and proof that the predicates can fail.

use servery_core::supervisor::Platform;
use servery_scenarios::{SCENARIOS, find, platform_by_name, run, sweep};

#[test]
fn every_scenario_holds_on_both_platforms_for_a_bounded_sweep() {
    let report = sweep(0..60, 2, None);
    for f in &report.failures {
        eprintln!(
            "FAILED {} {} seed={}: {}\n  replay: {}",
            f.scenario,
            f.platform.name(),
            f.seed,
            f.reason,
            f.replay()
        );
    }
    assert_eq!(report.failed, 0, "scenario failures");
    assert_eq!(report.runs, 60 * SCENARIOS.len() as u64 * 2);
    assert!(
        report.missing_goals().is_empty(),
        "coverage goals not reached: {:?}",
        report.missing_goals()
    );
}

#[test]
fn a_seed_replays_bit_for_bit() {
    for scenario in SCENARIOS {
        for platform in [Platform::Posix, Platform::Windows] {
            let a = run(scenario, 7, platform, true);
            let b = run(scenario, 7, platform, true);
            assert_eq!(
                a.outcome.trace_hash,
                b.outcome.trace_hash,
                "{} {}",
                scenario.name,
                platform.name()
            );
            assert_eq!(
                a.outcome.trace,
                b.outcome.trace,
                "{} {}",
                scenario.name,
                platform.name()
            );
            assert!(a.outcome.events > 0);
        }
    }
    let a = run(&SCENARIOS[1], 7, Platform::Posix, false);
    let b = run(&SCENARIOS[1], 8, Platform::Posix, false);
    assert_ne!(
        a.outcome.trace_hash, b.outcome.trace_hash,
        "different seeds must differ"
    );
}

#[test]
fn the_regression_corpus_holds() {
    let corpus = include_str!("../regressions.txt");
    let mut count = 0;
    for line in corpus.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [name, platform, seed] = parts[..] else {
            panic!("bad corpus line: {line}");
        };
        let scenario = find(name).unwrap_or_else(|| panic!("unknown scenario {name}"));
        let platform =
            platform_by_name(platform).unwrap_or_else(|| panic!("unknown platform {platform}"));
        let seed: u64 = seed.parse().expect("seed");
        // Each corpus seed runs on both platforms, whichever it was recorded on.
        for p in [
            platform,
            if platform == Platform::Posix {
                Platform::Windows
            } else {
                Platform::Posix
            },
        ] {
            let result = run(scenario, seed, p, false);
            assert!(
                result.verdict.is_ok(),
                "{name} {} {seed}: {:?}",
                p.name(),
                result.verdict
            );
        }
        count += 1;
    }
    assert!(count >= 5);
}

#[test]
fn the_predicates_reject_outcomes_that_break_them() {
    // The crash-loop scenario's outcome, judged as if it were the steady one, must fail:
    // the service ends `failed` and requests fail.
    let steady = find("steady").expect("steady");
    let looping = find("crash-loop").expect("crash-loop");
    let result = run(looping, 3, Platform::Posix, false);
    assert!(result.verdict.is_ok(), "{:?}", result.verdict);
    assert!(result.outcome.failure.is_some());
    let mut outcome = result.outcome;
    let wrong = servery_scenarios::judge_as(steady, 3, Platform::Posix, &mut outcome);
    assert!(wrong.is_err(), "a failed service passed as steady");
}
