//! The cluster gates (decision 0096) as `cargo test`: a bounded sweep of every cluster
//! scenario, determinism, and proof that the predicates can fail.

use core::time::Duration;

use servery_scenarios::cluster::{CLUSTER_SCENARIOS, find_cluster, run_cluster, sweep_cluster};
use servery_sim::cluster::simulate_cluster;

#[test]
fn every_cluster_scenario_holds_for_a_bounded_sweep() {
    let seeds: Vec<u64> = (0..150).collect();
    let r = sweep_cluster(&seeds, 2, None);
    for (name, seed, e) in &r.failures {
        eprintln!("FAILED {name} seed={seed}: {e}");
    }
    assert!(r.failures.is_empty(), "cluster scenario failures");
    assert_eq!(r.runs, 150 * CLUSTER_SCENARIOS.len() as u64);
    // What the scenarios are there to reach, over the sweep.
    assert!(r.publishes > 0 && r.busy > 0, "no contention: {r:?}");
    assert!(r.fenced > 0, "no publish was ever fenced: {r:?}");
    assert!(r.saturated > 0, "the budget never saturated: {r:?}");
    assert!(r.leases_lost > 0, "no host ever lost its lease: {r:?}");
    assert!(
        r.regained_after_death > 0,
        "no dead host's name was granted again: {r:?}"
    );
}

#[test]
fn a_cluster_seed_replays_bit_for_bit() {
    for s in CLUSTER_SCENARIOS {
        let a = run_cluster(s, 11).0;
        let b = run_cluster(s, 11).0;
        assert_eq!(a.trace_hash, b.trace_hash, "{}", s.name);
        assert_eq!(a.publishes, b.publishes, "{}", s.name);
    }
    let s = find_cluster("cluster-same-target").expect("in the catalog");
    assert_ne!(
        run_cluster(s, 11).0.trace_hash,
        run_cluster(s, 12).0.trace_hash
    );
}

/// The timing rule broken on purpose (a grant deadline past the TTL, which
/// `ClusterTiming::check` refuses): a host cut off keeps granting after its lease
/// expired, and the one-holder predicate names it.
#[test]
fn a_grant_deadline_past_the_ttl_is_caught_by_the_one_holder_predicate() {
    let s = find_cluster("cluster-partitioned-holder").expect("in the catalog");
    let mut caught = 0;
    for seed in 0..200 {
        let mut spec = (s.build)(seed);
        spec.host_rates.clear();
        spec.timing.grant_deadline = Duration::from_secs(30);
        assert!(spec.timing.check().is_err());
        let o = simulate_cluster(spec);
        if o.violations.iter().any(|v| v.starts_with("one holder:")) {
            caught += 1;
        }
    }
    assert!(caught > 0, "no run caught two holders at once");
}
