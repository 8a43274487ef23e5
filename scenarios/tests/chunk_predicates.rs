//! The predicates of `resumable-chunk-crash-between-steps` reject the outcomes they exist
//! to catch: a breach the oracle saw on the files, a grant of a let-go worker, a grant
//! held while the client is idle, a temp file the cleanup missed, an upload that never
//! completed, something left at the end. (That the oracle sees the breaches is shown by
//! mutants of the chunk flow: `docs/mutation-testing.md`.)

use servery_core::supervisor::Platform;
use servery_scenarios::{find, judge_as, run};
use servery_sim::Outcome;

const NAME: &str = "resumable-chunk-crash-between-steps";

fn passing_run() -> (u64, Outcome) {
    let scenario = find(NAME).expect("the scenario");
    let seed = 3;
    let r = run(scenario, seed, Platform::Posix, false);
    assert!(r.verdict.is_ok(), "seed {seed}: {:?}", r.verdict);
    assert!(r.outcome.chunks.completed > 0 && r.outcome.chunks.idle_observations > 0);
    (seed, r.outcome)
}

fn rejected(change: impl Fn(&mut Outcome), why: &str) {
    let (seed, mut o) = passing_run();
    change(&mut o);
    let verdict = judge_as(
        find(NAME).expect("the scenario"),
        seed,
        Platform::Posix,
        &mut o,
    );
    let err = verdict.expect_err("the predicate must reject it");
    assert!(err.contains(why), "{err}");
}

#[test]
fn a_file_breach_is_caught() {
    rejected(
        |o| {
            o.chunks
                .file_breaches
                .push((1_000_000_000, "the target shows 3 bytes".into()))
        },
        "the target shows 3 bytes",
    );
}

#[test]
fn grants_of_let_go_workers_and_grants_while_idle_are_caught() {
    rejected(
        |o| o.chunks.stale_grants.push((1_000_000_000, "lease", 7)),
        "lease of w7",
    );
    rejected(
        |o| o.chunks.idle_grants.push((1_000_000_000, 1)),
        "while no chunk was in flight",
    );
    rejected(|o| o.chunks.idle_observations = 0, "never observed");
}

#[test]
fn a_temp_file_the_cleanup_missed_is_caught() {
    rejected(
        |o| o.chunks.stale_temps.push((1_000_000_000, 7)),
        "its cleanup missed it",
    );
}

#[test]
fn an_unfinished_upload_and_leftovers_are_caught() {
    rejected(|o| o.chunks.completed -= 1, "resumable uploads completed");
    rejected(
        |o| o.chunks.partial_files_at_end = 1,
        "partial or meta files",
    );
    rejected(|o| o.chunks.partials_at_end = 1, "partial reservations");
    rejected(|o| o.chunks.temps_at_end = 1, "private temp files");
}
