//! The reverse proxy and CGI (issue 40): upstreams that go down and come back while
//! workers crash and recycle, admission saturated while a worker holding grants is
//! killed, CGI scripts bounded across workers and killed with their worker.
//!
//! The predicates judge the simulator's proxy oracle (`Outcome::proxy`): the first breach
//! it saw of a rule, the message naming the rule, and what the plan makes certain.

use servery_core::RawConfig;
use servery_core::upstream_choice::Balance;
use servery_core::upstream_health::HealthPolicy;
use servery_sim::{DownManner, Fault, Outcome, ProxyPlan, SimCommand, judged_by, proxy_routes};

use crate::catalog::{at, expect, fault, secs, spec, workers};
use crate::{Ctx, End, Expect, Plan, fast_config};

/// Upstreams change until this point of the run (s); faults too.
const CHANGES_UNTIL: f64 = 12.0;

/// The plan, its health policy written into `config` (the parent judges by it).
fn plan(ctx: &mut Ctx, config: &mut RawConfig, upstreams: u16, probes: bool) -> ProxyPlan {
    let max_fails = ctx.rng.range(1, 3) as u32;
    let interval = secs(0.2 + ctx.rng.unit() * 0.8);
    let balance = if ctx.rng.chance(0.5) {
        Balance::LeastInflight
    } else {
        Balance::RoundRobin
    };
    config.proxy.balance = balance.name().to_owned();
    let plan = ProxyPlan {
        upstreams,
        down_manners: Vec::new(),
        policy: HealthPolicy {
            max_fails,
            fail_timeout: secs(0.5 + ctx.rng.unit() * 2.5),
            probe_interval: probes.then_some(interval),
        },
        rate: 0.0,
        service_ms: (5, 50),
        fail_ms: (1, 20),
        probe_ms: (1, 50),
        flips: Vec::new(),
        cgi_rate: 0.0,
        script_ms: (200, 800),
        start: secs(0.5),
        until: secs(CHANGES_UNTIL + 2.0),
        converged_by: None,
    };
    judged_by(&mut config.proxy, &plan.policy);
    plan
}

/// The first breach the oracle saw, as the scenario's failure.
pub(crate) fn no_breach(o: &Outcome) -> Result<(), String> {
    match o.proxy.breaches.first() {
        Some((at, what)) => Err(format!("at {at} ms {what}")),
        None => Ok(()),
    }
}

pub(crate) fn upstream_flapping(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 2, 4));
    // Workers also recycle by age: a new one must learn the verdict with its first
    // messages.
    config.recovery.worker_max_age = 2.0 + ctx.rng.unit() * 4.0;
    config.broker.max_proxy_inflight = if ctx.rng.chance(0.5) { 0 } else { 16 };
    let upstreams = ctx.rng.range(2, 4) as u16;
    let probes = ctx.rng.chance(0.5);
    let mut p = plan(ctx, &mut config, upstreams, probes);
    config.proxy.routes = proxy_routes(0..upstreams);
    p.rate = 60.0 + ctx.rng.unit() * 60.0;
    for u in 0..upstreams {
        let mut times: Vec<f64> = (0..ctx.rng.range(0, 5))
            .map(|_| 1.0 + ctx.rng.unit() * (CHANGES_UNTIL - 1.0))
            .collect();
        times.sort_by(f64::total_cmp);
        for (i, t) in times.into_iter().enumerate() {
            p.flips.push((secs(t), u, i % 2 == 1));
        }
    }
    if let Some(interval) = p.policy.probe_interval {
        // Failing probes in a row, one more interval, the longest probe, and a margin.
        let settle = interval.as_secs_f64() * f64::from(p.policy.max_fails + 1) + 0.05 + 0.5;
        p.converged_by = Some(secs(CHANGES_UNTIL + settle));
    }
    let mut spec = spec(ctx, config.clone(), CHANGES_UNTIL + 3.0);
    spec.workload.request_rate = 5.0;
    spec.workload.proxy = Some(p);
    for _ in 0..ctx.rng.range(1, 4) {
        let t = at(ctx, 1.0, CHANGES_UNTIL);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick });
    }
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        no_breach(o)?;
        let x = &o.proxy;
        if x.sent == 0 {
            return Err("no proxied request was sent".into());
        }
        if x.verdict_changes > 0 && x.verdicts_learned == 0 {
            return Err(
                "health rule (every worker holds the parent's verdict): the parent changed its verdict and no worker learned it".into(),
            );
        }
        o.coverage
            .insert("upstream flapping: every worker followed the parent's verdict");
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn proxy_admission_kill(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 4);
    let mut config = fast_config(n);
    // Under four grants per worker none is kept spare (`keep_for`): the bound is exact,
    // and a saturated service holds every grant in a request.
    config.broker.max_proxy_inflight = ctx.rng.range(2, 7) as i64;
    config.recovery.worker_restart_limit = 10;
    let upstreams = ctx.rng.range(1, 3) as u16;
    let mut p = plan(ctx, &mut config, upstreams, false);
    config.proxy.routes = proxy_routes(0..upstreams);
    // Far more offered than the bound: about 30 requests of 100–300 ms at once.
    p.rate = 150.0;
    p.service_ms = (100, 300);
    let mut spec = spec(ctx, config.clone(), CHANGES_UNTIL + 2.0);
    spec.workload.request_rate = 5.0;
    spec.workload.proxy = Some(p);
    // Killed under load: each holds whatever grants its requests had.
    for _ in 0..ctx.rng.range(1, 3) {
        let t = at(ctx, 1.0, CHANGES_UNTIL - 3.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick });
    }
    let mut e = expect(&config, End::Ready);
    e.extra = Some(admission_held);
    Plan { spec, expect: e }
}

/// The bound never passed; after a worker died holding grants, the service reached the
/// bound again (its grants came back); saturation answered 503.
pub(crate) fn admission_held(o: &mut Outcome, _: &Expect) -> Result<(), String> {
    no_breach(o)?;
    let x = &o.proxy;
    let bound = x.bound;
    if x.refused == 0 {
        return Err("admission saturated no request (nothing was refused 503)".into());
    }
    if let Some(&(w, at, held)) = x.killed_holding.last()
        && x.most_in_flight_after_kill < bound
    {
        return Err(format!(
            "admission rule (a dead worker's grants return): w{w} died holding {held} grants at {at} ms; afterwards at most {} upstream requests were in flight at once, never the bound {bound}",
            x.most_in_flight_after_kill
        ));
    }
    if !x.killed_holding.is_empty() {
        o.coverage
            .insert("a worker killed holding proxy grants gave them back to the service");
    }
    Ok(())
}

pub(crate) fn cgi_scripts(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 2, 4));
    config.broker.max_cgi_concurrent = ctx.rng.range(2, 6) as i64;
    config.recovery.worker_restart_limit = 10;
    let mut p = plan(ctx, &mut config, 1, false);
    config.proxy.routes = proxy_routes(0..1);
    p.cgi_rate = 20.0 + ctx.rng.unit() * 20.0;
    let mut spec = spec(ctx, config.clone(), CHANGES_UNTIL + 2.0);
    spec.workload.request_rate = 5.0;
    spec.workload.proxy = Some(p);
    for _ in 0..ctx.rng.range(1, 4) {
        let t = at(ctx, 1.0, CHANGES_UNTIL);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick });
    }
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        no_breach(o)?;
        let x = &o.proxy;
        if x.scripts == 0 {
            return Err("no script ran".into());
        }
        if x.scripts_at_end > 0 {
            return Err(format!(
                "CGI orphan rule (no script outlives its worker): {} scripts still ran when the run ended",
                x.scripts_at_end
            ));
        }
        o.coverage
            .insert("CGI scripts stayed within the bound and died with their worker");
        Ok(())
    });
    Plan { spec, expect: e }
}

/// The simulated upstreams a reload picks its routes among.
const RELOAD_UNIVERSE: u16 = 5;

/// One to three of the universe's upstreams, in a random order (so that an upstream kept
/// across a reload usually moves to another index).
fn upstream_set(ctx: &mut Ctx) -> Vec<u16> {
    let mut all: Vec<u16> = (0..RELOAD_UNIVERSE).collect();
    for i in (1..all.len()).rev() {
        let j = ctx.rng.range(0, i as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(ctx.rng.range(1, 3) as usize);
    all
}

/// A generation's balance and timeouts, drawn.
#[derive(Debug, Clone, Copy)]
struct Clients {
    balance: Balance,
    /// Seconds: short enough that a request to an upstream that never finishes its
    /// connection, or never answers, ends well within the run.
    connect_timeout: f64,
    first_byte_timeout: f64,
}

impl Clients {
    fn write(self, proxy: &mut servery_core::config::RawProxy) {
        proxy.balance = self.balance.name().to_owned();
        proxy.connect_timeout = self.connect_timeout;
        proxy.first_byte_timeout = self.first_byte_timeout;
    }
}

/// The first-byte timeout is above the longest answer of an up upstream (`service_ms`),
/// so only an upstream that is down times out.
fn clients(ctx: &mut Ctx) -> Clients {
    Clients {
        balance: if ctx.rng.chance(0.5) {
            Balance::LeastInflight
        } else {
            Balance::RoundRobin
        },
        connect_timeout: 0.05 + ctx.rng.unit() * 0.35,
        first_byte_timeout: 0.1 + ctx.rng.unit() * 0.5,
    }
}

pub(crate) fn proxy_reload_upstreams(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 4);
    let mut config = fast_config(n);
    config.recovery.worker_restart_limit = 10;
    // One bound for the whole run: the broker's, across every generation's workers; low
    // enough that the offered load saturates it while generations overlap.
    config.broker.max_proxy_inflight = if ctx.rng.chance(0.5) {
        0
    } else {
        ctx.rng.range(2, 4) as i64
    };
    let probes = ctx.rng.chance(0.5);
    let mut p = plan(ctx, &mut config, RELOAD_UNIVERSE, probes);
    p.rate = 60.0 + ctx.rng.unit() * 60.0;
    config.proxy.routes = proxy_routes(upstream_set(ctx));
    // A down upstream refuses, never finishes its connection, or never answers: the
    // latter two end at the workers' timeouts.
    p.down_manners = (0..RELOAD_UNIVERSE)
        .map(|_| match ctx.rng.range(0, 2) {
            0 => DownManner::Refuses,
            1 => DownManner::Unreachable,
            _ => DownManner::Silent,
        })
        .collect();
    let mut last_clients = clients(ctx);
    last_clients.write(&mut config.proxy);
    for u in 0..RELOAD_UNIVERSE {
        let mut times: Vec<f64> = (0..ctx.rng.range(0, 4))
            .map(|_| 1.0 + ctx.rng.unit() * (CHANGES_UNTIL - 1.0))
            .collect();
        times.sort_by(f64::total_cmp);
        for (i, t) in times.into_iter().enumerate() {
            p.flips.push((secs(t), u, i % 2 == 1));
        }
    }
    let mut spec = spec(ctx, config.clone(), CHANGES_UNTIL + 3.0);
    spec.workload.request_rate = 5.0;
    // Each reload changes the set (and usually the numbering); each is answered before
    // the next arrives.
    let reloads = ctx.rng.range(2, 3);
    let mut current = config.proxy.routes.clone();
    // The health policy in force at the end (a reload may change it: decision 0118).
    let mut last_policy = p.policy;
    for i in 0..reloads {
        let mut next = config.clone();
        while next.proxy.routes == current {
            next.proxy.routes = proxy_routes(upstream_set(ctx));
        }
        current = next.proxy.routes.clone();
        if ctx.rng.chance(0.6) {
            // Another threshold and fail timeout; probes turned on or off at times.
            let probes = if ctx.rng.chance(0.3) {
                last_policy.probe_interval.is_none()
            } else {
                last_policy.probe_interval.is_some()
            };
            last_policy = HealthPolicy {
                max_fails: ctx.rng.range(1, 3) as u32,
                fail_timeout: secs(0.3 + ctx.rng.unit() * 2.7),
                probe_interval: probes.then(|| secs(0.2 + ctx.rng.unit() * 0.8)),
            };
        }
        judged_by(&mut next.proxy, &last_policy);
        // The balance and the timeouts change too at times (decision 0118): the new
        // generation's workers balance and give up by its values.
        if ctx.rng.chance(0.5) {
            last_clients = clients(ctx);
        }
        last_clients.write(&mut next.proxy);
        let when = at(ctx, 1.5 + 3.5 * i as f64, 2.0 + 3.5 * i as f64);
        spec.commands
            .push((when, SimCommand::Reload(Box::new(next))));
        // Crashes between reloads: old and new generations' workers alike.
        if ctx.rng.chance(0.7) {
            let t = at(ctx, 2.5 + 3.5 * i as f64, 4.5 + 3.5 * i as f64);
            let pick = ctx.rng.next_u64();
            fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick });
        }
    }
    // With probes at the end, the verdict matches the upstreams once they stop changing.
    if let Some(interval) = last_policy.probe_interval {
        let settle = interval.as_secs_f64() * f64::from(last_policy.max_fails + 1) + 0.05 + 0.5;
        p.converged_by = Some(secs(CHANGES_UNTIL + settle));
    }
    spec.workload.proxy = Some(p);
    let mut e = expect(&config, End::Ready);
    e.generation = Some(1 + reloads);
    e.generation_rule = Some("reload rule (every reload that changes the upstream set commits)");
    e.extra = Some(|o, _| {
        no_breach(o)?;
        let x = &o.proxy;
        if x.sent == 0 {
            return Err("no proxied request was sent".into());
        }
        o.coverage
            .insert("reloads changed the upstream set: every generation kept to its own");
        Ok(())
    });
    Plan { spec, expect: e }
}
