//! The scenario gates as `cargo test`: a bounded sweep, determinism, the regression
//! corpus and its pins, swarm mode, and proof that the predicates can fail.

use servery_core::supervisor::Platform;
use servery_scenarios::{
    Kinds, Mode, SCENARIOS, corpus, find, plan_in, run, run_in, swarm_kinds, sweep, sweep_seeds,
};
use servery_sim::FaultKind;

#[test]
fn every_scenario_holds_on_both_platforms_for_a_bounded_sweep() {
    let report = sweep(0..60, 2, None);
    for f in &report.failures {
        eprintln!("{f}");
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
    let entries =
        corpus::parse(include_str!("../regressions.txt")).unwrap_or_else(|e| panic!("{e}"));
    assert!(entries.len() >= 5);
    let drifted: Vec<String> = entries.iter().filter_map(|e| e.check().err()).collect();
    assert!(drifted.is_empty(), "\n{}", drifted.join("\n\n"));
}

#[test]
fn a_corpus_entry_that_no_longer_reaches_its_path_fails_and_says_how_to_re_pin() {
    // Seed 19 of crash-during-startup reaches the COMMIT race, not a READY in flight.
    let text = "[crash-during-startup posix 19]\n\
                caught: test\n\
                plan: workers=9\n\
                reaches: a worker was told to end with its READY in flight\n";
    let entries = corpus::parse(text).expect("parses");
    let err = entries[0].check().expect_err("the pin must not hold");
    assert!(
        err.contains("[crash-during-startup posix 19] drifted"),
        "{err}"
    );
    assert!(
        err.contains("a worker was told to end with its READY in flight"),
        "{err}"
    );
    assert!(err.contains("pinned plan: workers=9"), "{err}");
    assert!(
        err.contains("pin crash-during-startup --platform posix --seed 19"),
        "{err}"
    );
    assert!(err.contains("--search"), "{err}");

    for bad in [
        "[crash posix 1]\ncaught: x\n",
        "[crash posix 1]\ncaught: x\nreaches: a label nobody records\n",
        "[crash posix 1]\nreaches: crashed worker replaced\n",
        "[no-such-scenario posix 1]\ncaught: x\nreaches: crashed worker replaced\n",
        "caught: x\n",
    ] {
        assert!(corpus::parse(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn a_printed_pin_parses_back_and_holds() {
    let scenario = find("singleton-lifecycle").expect("scenario");
    for mode in [Mode::Full, Mode::Swarm] {
        let text = corpus::entry_text(scenario, 49, Platform::Posix, mode);
        let entries = corpus::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].mode, mode);
        assert!(!entries[0].reaches.is_empty(), "{text}");
        entries[0].check().unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn every_label_a_sweep_reaches_is_one_a_pin_may_name() {
    let report = sweep(0..10, 2, None);
    let unknown: Vec<&str> = report
        .coverage
        .keys()
        .copied()
        .filter(|l| !corpus::known_label(l))
        .collect();
    assert!(
        unknown.is_empty(),
        "labels missing from io-sim's labels::ALL: {unknown:?}"
    );
}

#[test]
fn a_swarm_subset_is_the_seeds_own() {
    let chaos = find("chaos").expect("chaos");
    let all = Kinds::of(chaos.kinds);
    let mut subsets = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let a = swarm_kinds(chaos, seed);
        assert_eq!(a, swarm_kinds(chaos, seed), "seed {seed}");
        assert_eq!(a, Mode::Swarm.kinds(chaos, seed));
        assert_eq!(a.and(all), a, "a subset of the scenario's kinds");
        subsets.insert(a.names());
        // The run replays bit for bit, on each platform.
        if seed < 4 {
            for p in [Platform::Posix, Platform::Windows] {
                let x = run_in(chaos, seed, p, Mode::Swarm, false);
                let y = run_in(chaos, seed, p, Mode::Swarm, false);
                assert_eq!(x.outcome.trace_hash, y.outcome.trace_hash);
                assert_eq!(x.kinds, a);
            }
        }
    }
    assert!(
        subsets.len() > 20,
        "seeds draw different subsets: {subsets:?}"
    );
    // Outside swarm mode every kind is enabled, and a builder draws the same with all of
    // them as it did before swarm mode existed.
    assert_eq!(Mode::Full.kinds(chaos, 3), Kinds::ALL);
    // A scenario swarm mode leaves out runs as in full mode.
    let hdd = find("hang-during-drain").expect("hang-during-drain");
    assert!(hdd.swarm_exclusion().is_some());
    assert_eq!(Mode::Swarm.kinds(hdd, 3), Kinds::ALL);
}

#[test]
fn plans_use_only_the_fault_kinds_their_scenario_declares() {
    for scenario in SCENARIOS {
        let declared = Kinds::of(scenario.kinds);
        for seed in 0..24 {
            for mode in [Mode::Full, Mode::Swarm] {
                let enabled = declared.and(mode.kinds(scenario, seed));
                let plan = plan_in(scenario, seed, Platform::Posix, mode);
                for (_, f) in &plan.spec.faults {
                    assert!(
                        enabled.has(f.kind()),
                        "{} seed {seed} {mode:?}: {} not among {}",
                        scenario.name,
                        f.kind().name(),
                        enabled.names()
                    );
                }
                let result = run_in(scenario, seed, Platform::Posix, mode, false);
                for (i, kind) in &result.outcome.misbehaving {
                    assert!(
                        enabled.has(*kind),
                        "{} seed {seed} {mode:?}: process #{i} is {} outside {}",
                        scenario.name,
                        kind.name(),
                        enabled.names()
                    );
                }
            }
        }
    }
}

#[test]
fn a_swarm_sweep_holds_and_no_disabled_kind_is_reached() {
    let seeds: Vec<u64> = (0..40).collect();
    let report = sweep_seeds(&seeds, 2, None, Mode::Swarm);
    for f in &report.failures {
        eprintln!("{f}");
    }
    assert_eq!(report.failed, 0, "swarm failures");
    assert!(report.leaked_kinds().is_empty(), "{:?}", report.kinds);
    assert!(
        report
            .failures
            .iter()
            .all(|f| f.replay().ends_with("--swarm"))
    );
    assert!(
        report
            .skipped
            .iter()
            .any(|(name, _)| *name == "hang-during-drain")
    );
    assert!(report.skipped.iter().any(|(name, _)| *name == "steady"));
    // Some runs enable each of chaos's kinds and some do not.
    let crash = report.kinds[&FaultKind::CrashWorker];
    let full = sweep(0..40, 2, Some("crash"));
    assert!(crash.runs > 0 && crash.reached > 0);
    assert!(full.kinds[&FaultKind::CrashWorker].runs == 80);
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

/// The first seed (from 0) whose run on POSIX satisfies `want`, with its result.
fn first_run(
    name: &str,
    want: impl Fn(&servery_scenarios::RunResult) -> bool,
) -> (u64, servery_scenarios::RunResult) {
    let scenario = find(name).expect("scenario");
    (0..200)
        .map(|seed| (seed, run(scenario, seed, Platform::Posix, false)))
        .find(|(_, r)| want(r))
        .unwrap_or_else(|| panic!("no seed of {name} in 0..200 fits"))
}

fn judge(name: &str, seed: u64, outcome: &mut servery_sim::Outcome) -> Result<(), String> {
    let scenario = find(name).expect("scenario");
    servery_scenarios::judge_as(scenario, seed, Platform::Posix, outcome)
}

#[test]
fn the_tightened_predicates_reject_what_they_exist_to_catch() {
    use servery_core::supervisor::ExitReason;
    use servery_scenarios::{BudgetEnd, End, crashing_boots, plan};
    use servery_sim::UploadEnd;

    // malformed-frame: a worker replaced for missed heartbeats, not for its frame.
    let (seed, r) = first_run("malformed-frame", |r| {
        r.outcome
            .injected
            .iter()
            .any(|i| i.kind == FaultKind::MalformedFrame)
    });
    assert!(r.verdict.is_ok(), "{:?}", r.verdict);
    let mut o = r.outcome;
    let victim = o.injected[0].worker;
    for exit in o.exits.iter_mut().filter(|x| Some(x.worker) == victim) {
        exit.reason = Some(ExitReason::HealthFailure);
        exit.at_ms += 2000;
    }
    let err = judge("malformed-frame", seed, &mut o).expect_err("ignored frame passed");
    assert!(err.contains("expected protocol_error"), "{err}");

    // chaos: a plan that must exceed the restart limit, ending ready.
    let chaos = find("chaos").expect("chaos");
    let (seed, r) = first_run("chaos", |r| {
        let End::Budget(b) = plan(chaos, r.outcome.seed, Platform::Posix).expect.end else {
            return false;
        };
        b.end(crashing_boots(&r.outcome)) == BudgetEnd::Failed
    });
    assert!(r.verdict.is_ok(), "{:?}", r.verdict);
    let mut o = r.outcome;
    o.failure = None;
    let err = judge("chaos", seed, &mut o).expect_err("a certain failure passed as ready");
    assert!(err.contains("certain to count"), "{err}");

    // Every failure charged to a misbehaviour that can cause it, and that was injected.
    let (seed, r) = first_run("crash", |r| r.outcome.requests.failed_fault > 0);
    let mut o = r.outcome.clone();
    let n = o
        .failed_by_cause
        .remove(&FaultKind::CrashWorker)
        .unwrap_or(0);
    o.failed_by_cause
        .insert(FaultKind::CrashBetweenPrepareAndCommit, n);
    let err = judge("crash", seed, &mut o).expect_err("a charge to a boot crash passed");
    assert!(err.contains("never take one"), "{err}");
    let mut o = r.outcome;
    o.failed_by_cause.clear();
    let err = judge("crash", seed, &mut o).expect_err("uncharged failures passed");
    assert!(err.contains("charged to a cause"), "{err}");

    // lease-holder-death: the dead holder's target never written again.
    let (seed, r) = first_run("lease-holder-death", |r| {
        r.outcome.injected.iter().any(|i| !i.targets.is_empty())
    });
    let mut o = r.outcome;
    let death = o
        .injected
        .iter()
        .find(|i| !i.targets.is_empty())
        .cloned()
        .expect("a holder's death");
    for u in o.upload_log.iter_mut() {
        if u.target == death.targets[0] && u.started_ms > death.at_ms {
            u.end = UploadEnd::Conflict;
        }
    }
    let err = judge("lease-holder-death", seed, &mut o).expect_err("a blocked target passed");
    assert!(err.contains("died holding target"), "{err}");

    // broker-saturation: saturated for good once the burst is over.
    let (seed, r) = first_run("broker-saturation", |r| r.verdict.is_ok());
    let mut o = r.outcome;
    for u in o.upload_log.iter_mut().filter(|u| u.started_ms >= 7000) {
        u.end = UploadEnd::Saturated;
    }
    let err = judge("broker-saturation", seed, &mut o).expect_err("stuck saturation passed");
    assert!(err.contains("after the burst settled"), "{err}");
}

#[test]
fn the_dav_predicates_reject_what_they_exist_to_catch() {
    use servery_sim::{DavAnswer, DavEnd, DavOp};

    // dav-lock-survives-recycle: the lock dropped when its granter died, a PUT without
    // its token let through, the lock kept past its end.
    let name = "dav-lock-survives-recycle";
    let (seed, r) = first_run(name, |r| r.verdict.is_ok());
    let lock = r.outcome.dav.locks[0].clone();
    let mut o = r.outcome.clone();
    o.dav.locks[0].gone_ns = Some(lock.granted_ns + 1_000_000_000);
    let err = judge(name, seed, &mut o).expect_err("a lock gone early passed");
    assert!(err.contains("left the broker's table"), "{err}");
    let mut o = r.outcome.clone();
    o.dav.locks[0].last_seen_ns = lock.promised_end_ns + 1;
    let err = judge(name, seed, &mut o).expect_err("a lock kept past its end passed");
    assert!(err.contains("after its end"), "{err}");
    let mut o = r.outcome.clone();
    let refused = o
        .dav
        .log
        .iter_mut()
        .find(|r| r.op == DavOp::Put && r.token.is_none() && r.end == Some(DavEnd::Locked))
        .expect("a refused PUT");
    refused.allowed = Some(true);
    refused.end = Some(DavEnd::Written);
    let err = judge(name, seed, &mut o).expect_err("an unguarded write passed");
    assert!(err.contains("was let through"), "{err}");
    let mut o = r.outcome;
    for r in o.dav.log.iter_mut().filter(|r| r.token.is_some()) {
        if r.end == Some(DavEnd::Written) && r.generation >= 2 {
            r.allowed = Some(false);
            r.end = Some(DavEnd::Locked);
        }
    }
    let err = judge(name, seed, &mut o).expect_err("a refused token passed");
    assert!(err.contains("with the lock's token"), "{err}");

    // dav-lock-table-saturation: over the limit, saturated with room, a lost and a
    // leaked lock.
    let name = "dav-lock-table-saturation";
    let (seed, r) = first_run(name, |r| r.verdict.is_ok());
    let limit = r.outcome.dav.decisions[0].limit;
    let mut o = r.outcome.clone();
    o.dav.table_max = limit + 1;
    let err = judge(name, seed, &mut o).expect_err("an overfull table passed");
    assert!(err.contains("over its limit"), "{err}");
    let mut o = r.outcome.clone();
    let d = o
        .dav
        .decisions
        .iter_mut()
        .find(|d| d.answer == DavAnswer::Granted)
        .expect("a grant");
    d.answer = DavAnswer::Saturated;
    let err = judge(name, seed, &mut o).expect_err("saturation with room passed");
    assert!(err.contains("answered Saturated with"), "{err}");
    let mut o = r.outcome.clone();
    let l = o
        .dav
        .locks
        .iter_mut()
        .find(|l| l.unlocked_ns.is_none())
        .expect("a lock that expired");
    l.gone_ns = Some(l.granted_ns);
    let err = judge(name, seed, &mut o).expect_err("a lost lock passed");
    assert!(err.contains("(lost)"), "{err}");
    let mut o = r.outcome;
    let l = o
        .dav
        .locks
        .iter_mut()
        .find(|l| l.unlocked_ns.is_some())
        .expect("an unlocked lock");
    l.last_seen_ns = l.unlocked_ns.unwrap_or_default() + 1;
    let err = judge(name, seed, &mut o).expect_err("a leaked lock passed");
    assert!(err.contains("(leaked)"), "{err}");
}
