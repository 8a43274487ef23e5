//! The cluster scenarios.

use core::time::Duration;

use servery_core::Instant;
use servery_core::cluster::{BudgetLimits, ClusterTiming};
use servery_sim::cluster::{ClusterOutcome, ClusterSpec, Cut};
use servery_sim::rng::SimRng;

use super::ClusterScenario;

pub static CLUSTER_SCENARIOS: &[ClusterScenario] = &[
    ClusterScenario {
        name: "cluster-same-target",
        about: "writers on 2-3 hosts contend for two shared names over lossy links: one holder at a time, writes serialized, fences rising",
        build: same_target,
        expect: published_and_contended,
    },
    ClusterScenario {
        name: "cluster-partitioned-holder",
        about: "hosts cut off from etcd for 3-30 s while holding names: they stop granting at their deadline, and cannot publish after their fence moved",
        build: partitioned_holder,
        expect: published,
    },
    ClusterScenario {
        name: "cluster-dead-host",
        about: "a host killed while holding names: its keys leave with its etcd lease (TTL on a fast store clock), and other hosts are granted them",
        build: dead_host,
        expect: published,
    },
    ClusterScenario {
        name: "cluster-budget-saturation",
        about: "reservers on every host saturate the service-wide upload budget: the store's shares never sum past it, each host's share is what it holds",
        build: budget_saturation,
        expect: saturated,
    },
    ClusterScenario {
        name: "cluster-store-outage",
        about: "etcd unreachable from every host for 5-25 s: writes answered 503 within the operation time-out, and granted again after it without a restart",
        build: store_outage,
        expect: unavailable_then_recovered,
    },
];

fn secs(s: f64) -> Instant {
    Instant::ZERO + Duration::from_secs_f64(s)
}

fn base(seed: u64) -> (ClusterSpec, SimRng) {
    // The builder's draws, apart from the simulation's own stream.
    let mut rng = SimRng::new(seed ^ 0x0c1a_5731_e7c0_96d0);
    let timing = ClusterTiming::default();
    let skew = timing.skew_bound.as_secs_f64() / timing.lease_ttl.as_secs_f64();
    let spec = ClusterSpec {
        seed,
        hosts: rng.range(2, 3) as usize,
        timing,
        limits: BudgetLimits {
            max_count: 4,
            max_bytes: 10_000,
        },
        names: 2,
        writers: 2,
        reservers: 0,
        hold_ms: (20, 1_500),
        latency_us: (200, 5_000),
        loss: 0.01 + rng.unit() * 0.04,
        // The store's clock runs fast by up to the skew bound over one TTL.
        store_rate: 1.0 - rng.unit() * skew,
        cuts: Vec::new(),
        host_rates: Vec::new(),
        kills: Vec::new(),
        load_until: secs(60.0),
        end: secs(100.0),
    };
    (spec, rng)
}

fn same_target(seed: u64) -> ClusterSpec {
    let (mut s, _) = base(seed);
    s.writers = 3;
    s
}

fn partitioned_holder(seed: u64) -> ClusterSpec {
    let (mut s, mut rng) = base(seed);
    s.names = 3;
    s.hold_ms = (20, 4_000);
    // Host 0's clock runs slow past the skew bound in half the runs: it believes in
    // its grants after its lease expired at the store, and only the fence stops it.
    if rng.chance(0.5) {
        s.host_rates = vec![0.4 + rng.unit() * 0.3];
        // Some writes hold their grant across the whole cut.
        s.hold_ms = (20, 25_000);
        // Cut long enough for its lease to expire at the store, not long enough for
        // its slow clock to reach its deadline.
        let from = 3.0 + rng.unit() * 20.0;
        s.cuts.push(Cut {
            host: Some(0),
            from: secs(from),
            until: secs(from + 14.0 + rng.unit() * 8.0),
        });
    }
    for _ in 0..rng.range(1, 3) {
        let from = 3.0 + rng.unit() * 40.0;
        let len = 3.0 + rng.unit() * 27.0;
        s.cuts.push(Cut {
            host: Some(rng.range(0, s.hosts as u64 - 1) as usize),
            from: secs(from),
            until: secs((from + len).min(58.0)),
        });
    }
    s
}

fn dead_host(seed: u64) -> ClusterSpec {
    let (mut s, mut rng) = base(seed);
    s.hosts = 3;
    s.writers = 3;
    s.hold_ms = (200, 3_000);
    let victim = rng.range(0, 2) as usize;
    s.kills.push((victim, secs(5.0 + rng.unit() * 30.0)));
    s
}

fn budget_saturation(seed: u64) -> ClusterSpec {
    let (mut s, mut rng) = base(seed);
    s.hosts = 3;
    s.writers = 0;
    s.reservers = 3;
    s.hold_ms = (100, 2_000);
    if rng.chance(0.5) {
        let from = 5.0 + rng.unit() * 30.0;
        s.cuts.push(Cut {
            host: Some(rng.range(0, 2) as usize),
            from: secs(from),
            until: secs(from + 2.0 + rng.unit() * 20.0),
        });
    }
    s
}

fn store_outage(seed: u64) -> ClusterSpec {
    let (mut s, mut rng) = base(seed);
    s.writers = 2;
    s.reservers = 1;
    let from = 10.0 + rng.unit() * 20.0;
    s.cuts.push(Cut {
        host: None,
        from: secs(from),
        until: secs(from + 5.0 + rng.unit() * 20.0),
    });
    s
}

fn published(o: &ClusterOutcome) -> Result<(), String> {
    if o.publishes == 0 {
        return Err("no write was published in the whole run".into());
    }
    Ok(())
}

fn published_and_contended(o: &ClusterOutcome) -> Result<(), String> {
    published(o)?;
    if o.total(|h| h.busy) == 0 {
        return Err("no acquire found its name busy: the hosts never contended".into());
    }
    Ok(())
}

fn saturated(o: &ClusterOutcome) -> Result<(), String> {
    if o.total(|h| h.reserved) == 0 || o.total(|h| h.saturated) == 0 {
        return Err(format!(
            "the budget was not saturated: {} reserved, {} saturated",
            o.total(|h| h.reserved),
            o.total(|h| h.saturated)
        ));
    }
    Ok(())
}

fn unavailable_then_recovered(o: &ClusterOutcome) -> Result<(), String> {
    published(o)?;
    if o.total(|h| h.unavailable) == 0 {
        return Err("no write was refused while etcd was unreachable".into());
    }
    Ok(())
}
