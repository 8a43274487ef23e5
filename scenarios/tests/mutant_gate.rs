//! The scenarios a mutation campaign names for one source file (`scripts/mutants.py`,
//! `scripts/mutants-map.toml`): `SERVERY_MUTANT_SCENARIOS` is a comma-separated list of
//! scenario names ("*" for every one), `SERVERY_MUTANT_SEEDS` how many seeds each runs
//! on both platform models (20 unless set). Without the variable the test sweeps
//! `steady` for two seeds, so that it still judges something when run alone.

use servery_scenarios::{SCENARIOS, sweep};

#[test]
fn the_scenarios_mapped_to_a_mutated_file_hold() {
    let names = std::env::var("SERVERY_MUTANT_SCENARIOS").unwrap_or_else(|_| "steady".into());
    let seeds: u64 = std::env::var("SERVERY_MUTANT_SEEDS")
        .ok()
        .map(|s| s.parse().expect("SERVERY_MUTANT_SEEDS is a number"))
        .unwrap_or(if names == "steady" { 2 } else { 20 });
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let filters: Vec<Option<&str>> = if names.trim() == "*" {
        vec![None]
    } else {
        names.split(',').map(|n| Some(n.trim())).collect()
    };
    for filter in filters {
        if let Some(name) = filter {
            assert!(
                SCENARIOS.iter().any(|s| s.name == name),
                "no scenario is named {name:?} (scripts/mutants-map.toml)"
            );
        }
        let report = sweep(0..seeds, jobs, filter);
        for f in &report.failures {
            eprintln!("{f}");
        }
        assert!(report.runs > 0, "{filter:?} ran nothing");
        assert_eq!(report.failed, 0, "scenario failures in {filter:?}");
    }
}
