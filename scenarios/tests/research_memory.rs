//! Recycling on memory on servery's supervisor (decision 0110): under the shipped `leak`
//! workload each recycling rule holds a worker's reported memory where its closed form
//! says, and an age without jitter recycles exactly as often as its multiples fit.

use servery_core::supervisor::Platform;
use servery_scenarios::research::cli::resolve;
use servery_scenarios::research::compare::run_one;
use servery_scenarios::research::memory::{self, MemoryRule};
use servery_scenarios::research::{policy, sweep, workload};

const SEEDS: std::ops::Range<u64> = 0..3;

fn leak() -> workload::Workload {
    workload::load(&resolve("leak", "workloads")).unwrap_or_else(|e| panic!("leak: {e}"))
}

fn load(name: &str) -> Vec<policy::Policy> {
    sweep::load_all(&resolve(name, "policies")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Per seed: (peak worker RSS in MiB, recycles).
fn runs(p: &policy::Policy, w: &workload::Workload) -> Vec<(f64, f64)> {
    SEEDS
        .map(|seed| {
            let m = run_one(p, w, seed, Platform::Posix).unwrap_or_else(|e| panic!("{e}"));
            assert!(!m.failed, "{}: seed {seed} failed", p.name);
            let rss = m
                .peak_worker_rss_mb
                .unwrap_or_else(|| panic!("{}: no RSS reported under a leak", p.name));
            (rss, m.recycles)
        })
        .collect()
}

#[test]
fn each_recycling_rule_holds_a_leaking_worker_where_its_closed_form_says() {
    let w = leak();
    let g = memory::leak_mib(&w);
    // A worker's share of the peak rate, a second at a time: one beat's arrivals stay
    // under 60 (Poisson with mean 15), two beats' under 90.
    let share = memory::peak_rate(&w) / w.workers as f64;
    assert_eq!(share, 15.0);
    for name in [
        "seed-defaults",
        "seed-defaults-max-requests",
        "seed-defaults-max-rss",
        "sweeps/max-age",
    ] {
        for p in load(name) {
            let rule = memory::rule(&p, &w);
            for (seed, (rss, recycles)) in SEEDS.zip(runs(&p, &w)) {
                let at = format!(
                    "{} seed {seed}: peak {rss:.3} MiB, {recycles} recycles",
                    p.name
                );
                match rule {
                    MemoryRule::None => {
                        // About 6,000 requests a worker: far past every rule's bound.
                        assert!(rss > 300.0 && recycles == 0.0, "no recycling: {at}");
                    }
                    MemoryRule::Requests { bound_mib, limit } => {
                        assert!(
                            rss >= bound_mib - 1e-9 && rss <= bound_mib + 60.0 * g,
                            "the request limit recycles at the first beat with {limit} \
                             requests: between {bound_mib:.3} and one beat more, {at}"
                        );
                        // 24,000 requests offered: at most 24,000 / limit lives end, less
                        // each slot's unfinished last one.
                        assert!(
                            (6.0..=13.0).contains(&recycles),
                            "the request limit recycles about 24,000 / {limit} times less \
                             one a slot: {at}"
                        );
                    }
                    MemoryRule::Rss { bound_mib } => {
                        assert!(
                            rss > bound_mib && rss <= bound_mib + 90.0 * g,
                            "the RSS limit recycles at the second beat over {bound_mib} MiB: \
                             above it by at most two beats' requests, {at}"
                        );
                        assert!(recycles >= 6.0, "the RSS limit recycles: {at}");
                    }
                    MemoryRule::Age { age_s, at_peak_mib } => {
                        let closed = memory::age_recycles(w.workers, w.duration_s, age_s);
                        assert_eq!(
                            recycles, closed,
                            "an age of {age_s} s without jitter recycles each slot at every \
                             multiple before the end: {at}"
                        );
                        // The peak worker served its share of the peak for up to the age.
                        assert!(
                            (at_peak_mib - 20.0..=at_peak_mib + 20.0).contains(&rss),
                            "an age of {age_s} s reaches about {at_peak_mib:.1} MiB at the \
                             peak: {at}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn without_a_per_request_leak_no_rss_is_reported() {
    let mut w = leak();
    w.memory_growth_mb_per_request = 0.0;
    w.duration_s = 30.0;
    let p = &load("seed-defaults-max-rss")[0];
    let m = run_one(p, &w, 0, Platform::Posix).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        m.peak_worker_rss_mb, None,
        "nothing reported, nothing measured"
    );
    assert_eq!(m.recycles, 0.0, "no memory reported, no RSS recycle");
}

/// The kernel's limit (`oom_limit_mb`): without a memory rule the leaking workers are
/// killed by it, a crash the supervisor restarts; an RSS limit below it recycles them
/// first, and the kernel kills none.
#[test]
fn without_a_memory_rule_the_kernel_kills_the_leaking_workers_and_an_rss_limit_forestalls_it() {
    let w = workload::load(&resolve("leak-oom", "workloads"))
        .unwrap_or_else(|e| panic!("leak-oom: {e}"));
    let limit = w
        .oom_limit_mb
        .unwrap_or_else(|| panic!("leak-oom has no limit"));
    for seed in SEEDS {
        let none = &load("seed-defaults")[0];
        let m = run_one(none, &w, seed, Platform::Posix).unwrap_or_else(|e| panic!("{e}"));
        let rss = m.peak_worker_rss_mb.unwrap_or_default();
        assert!(
            m.restarts >= 4.0 && m.recycles == 0.0 && rss <= limit,
            "OOM rule: without recycling every worker is killed at the {limit} MiB limit \
             and restarted (seed {seed}: {} restarts, {} recycles, peak reported {rss:.1} MiB)",
            m.restarts,
            m.recycles
        );
        let by_rss = &load("seed-defaults-max-rss")[0];
        let m = run_one(by_rss, &w, seed, Platform::Posix).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            m.restarts == 0.0 && m.recycles > 0.0 && !m.failed,
            "OOM rule: an RSS limit under the kernel's recycles before it kills (seed \
             {seed}: {} restarts, {} recycles)",
            m.restarts,
            m.recycles
        );
    }
    let mut unlimited = w.clone();
    unlimited.oom_limit_mb = None;
    let m = run_one(&load("seed-defaults")[0], &unlimited, 0, Platform::Posix)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.restarts, 0.0, "OOM rule: no limit, no kill");
}
