//! The lifecycle scenarios of servery-scenarios, run on real processes and judged by the
//! scenarios' own predicates (see `servery_tests::scenario`). Each test drives one
//! scenario for the seeds in `SERVERY_REAL_SEEDS` (`A..B`, default `1..2`); a failure
//! prints the replay commands for the simulator and for this test.

use servery_scenarios::{SCENARIOS, find};
use servery_tests::scenario::{NOT_DRIVEN, SCALE, behavior_rules, drive};

fn seeds() -> std::ops::Range<u64> {
    let spec = std::env::var("SERVERY_REAL_SEEDS").unwrap_or_default();
    spec.split_once("..")
        .and_then(|(a, b)| Some(a.parse().ok()?..b.parse().ok()?))
        .unwrap_or(1..2)
}

fn check(name: &str) {
    let scenario = find(name).unwrap_or_else(|| panic!("no scenario {name}"));
    for seed in seeds() {
        let run = drive(scenario, seed);
        let o = &run.outcome;
        eprintln!(
            "REAL {name} seed {seed} (×{SCALE} time): {} ok / {} failed on faults / {} refused, {} spawns, exit {:?} → {:?}",
            o.requests.ok,
            o.requests.failed_fault,
            o.requests.refused,
            o.spawns,
            o.exit_code,
            run.verdict
        );
        if let Err(why) = &run.verdict {
            panic!(
                "{name} seed {seed} on real processes: {why}\n\
                 simulate: {}\n\
                 real: SERVERY_REAL_SEEDS={seed}..{} cargo test -p servery-tests --test scenarios {}\n\
                 driver log:\n{}",
                servery_scenarios::replay_command(
                    name,
                    seed,
                    servery_core::supervisor::Platform::Posix
                ),
                seed + 1,
                name.replace('-', "_"),
                run.log.join("\n")
            );
        }
    }
}

macro_rules! driven {
    ($($test:ident => $name:literal;)*) => {
        $( #[test] fn $test() { check($name) } )*

        /// Every scenario of the catalog is driven here or listed with its reason.
        #[test]
        fn every_scenario_is_driven_or_says_why_not() {
            let driven = [$($name),*];
            for s in SCENARIOS {
                let skipped = NOT_DRIVEN.iter().any(|(n, _)| *n == s.name);
                assert!(
                    driven.contains(&s.name) != skipped,
                    "{}: drive it in tests/scenarios.rs or say why not in NOT_DRIVEN",
                    s.name
                );
            }
        }
    };
}

driven! {
    steady => "steady";
    crash => "crash";
    crash_during_startup => "crash-during-startup";
    startup_failure_initial => "startup-failure-initial";
    startup_failure_replacement => "startup-failure-replacement";
    hang => "hang";
    hang_during_drain => "hang-during-drain";
    crash_loop => "crash-loop";
    restart_limit_zero => "restart-limit-zero";
    backoff_at_cap_still_halts => "backoff-at-cap-still-halts";
    age_recycle => "age-recycle";
    request_recycle => "request-recycle";
    manual_recycle => "manual-recycle";
    recycle_replacement_fails => "recycle-replacement-fails";
    reload => "reload";
    reload_invalid => "reload-invalid";
    resize => "resize";
    parent_death => "parent-death";
    parent_stall => "parent-stall";
    clock_jump => "clock-jump";
    correlated_crash_counted_once => "correlated-crash-counted-once";
    burst_window_still_halts_a_loop => "burst-window-still-halts-a-loop";
}

#[test]
fn behaviours_fold_into_the_fewest_rules() {
    use servery_sim::Behavior;
    let every: servery_sim::BehaviorFn = Box::new(|_, _| Behavior::CrashAfterRequests(2));
    assert_eq!(behavior_rules(&every, 1), "* crash-after-requests=2");
    let healthy: servery_sim::BehaviorFn = Box::new(|_, _| Behavior::Healthy);
    assert_eq!(behavior_rules(&healthy, 1), "");
    let one: servery_sim::BehaviorFn = Box::new(|info, _| {
        if info.index == 3 {
            Behavior::HangAtBoot
        } else {
            Behavior::Healthy
        }
    });
    assert_eq!(behavior_rules(&one, 1), "index=3 hang-at-boot");
    let reload: servery_sim::BehaviorFn = Box::new(|info, _| {
        if info.generation.0 == 2 && info.slot.0 == 0 {
            Behavior::FailStartup("root: missing".into())
        } else {
            Behavior::Healthy
        }
    });
    assert_eq!(
        behavior_rules(&reload, 1),
        "slot=0,generation=2 fail-startup=root: missing"
    );
}

#[test]
fn a_real_outcome_passes_its_own_scenario_and_fails_another() {
    // A real crash loop ends `failed` with exit code 4: right for crash-loop, and a
    // breach of steady's predicates (which want four ready workers and exit code 0).
    use servery_core::supervisor::Platform;
    let looping = find("crash-loop").expect("crash-loop");
    let run = drive(looping, 1);
    assert!(
        run.verdict.is_ok(),
        "{:?}\n{}",
        run.verdict,
        run.log.join("\n")
    );
    let mut outcome = run.outcome;
    let steady = find("steady").expect("steady");
    let wrong = servery_scenarios::judge_as(steady, 1, Platform::Posix, &mut outcome);
    assert!(wrong.is_err(), "a real crash loop passed as steady");
}
