//! Recycling (by age, by requests, by hand, with failing replacements), reloads (valid and
//! invalid) and resizes (SIGTTIN, SIGTTOU).

use servery_sim::{Behavior, FaultKind, SimCommand};

use crate::catalog::{at, behave, expect, secs, spec, workers};
use crate::{Ctx, End, Plan, fast_config};

pub(crate) fn age_recycle(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 4));
    let age = 2.0 + ctx.rng.unit() * 4.0;
    let jitter = ctx.rng.unit();
    config.recovery.worker_max_age = age;
    config.recovery.worker_max_age_jitter = jitter;
    let spec = spec(ctx, config.clone(), 40.0);
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    // The first recycle starts inside the jitter band after the first READY. Simulated
    // workers are ready within 50 ms of the start; real ones, at a quarter of the time on
    // a loaded machine with the other real-process tests running beside them, have been
    // seen to need 89 ms of real time (356 ms here), so the band's late edge leaves 500 ms
    // for the boot.
    e.first_recycle_within = Some((secs(age * (1.0 - jitter)), secs(age + 0.5)));
    e.extra = Some(|o, e| {
        if o.spawns <= e.workers as u64 {
            return Err("no worker was recycled by age".into());
        }
        o.coverage.insert("recycled by age");
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn request_recycle(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 4));
    config.recovery.max_requests_per_worker = ctx.rng.range(20, 80) as i64;
    config.recovery.max_requests_jitter = 0.1 + ctx.rng.unit() * 0.4;
    let mut spec = spec(ctx, config.clone(), 30.0);
    spec.workload.request_rate = 40.0;
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, e| {
        if o.spawns <= e.workers as u64 {
            return Err("no worker was recycled by request count".into());
        }
        o.coverage.insert("recycled by request count");
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn manual_recycle(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 4));
    // Under --http3 the HTTP/3 steering rule is judged at every recycle step.
    config.features.http3 = true;
    let mut spec = spec(ctx, config.clone(), 10.0);
    spec.commands.push((at(ctx, 1.0, 5.0), SimCommand::Recycle));
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, e| {
        if o.spawns != 2 * e.workers as u64 {
            return Err(format!(
                "{} spawns for {} workers recycled once each",
                o.spawns, e.workers
            ));
        }
        if o.max_live_processes > e.workers + 1 {
            return Err(format!("{} processes at once", o.max_live_processes));
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn recycle_replacement_fails(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 3);
    let mut config = fast_config(n);
    config.recovery.worker_max_age = 2.0;
    config.recovery.worker_max_age_jitter = 0.0;
    config.recovery.recycle_retry_limit = 3;
    let mut spec = spec(ctx, config.clone(), 20.0);
    let failures = ctx.rng.range(1, 5);
    let first_replacement = n as u64;
    let crash_instead = ctx.rng.chance(0.3);
    let kind = if crash_instead {
        FaultKind::CrashBetweenPrepareAndCommit
    } else {
        FaultKind::FailStartup
    };
    let failures = if ctx.kinds.has(kind) { failures } else { 0 };
    spec.behavior = behave(ctx.kinds, move |info, _| {
        if info.index >= first_replacement && info.index < first_replacement + failures {
            if crash_instead {
                Behavior::CrashBetweenPrepareAndCommit
            } else {
                Behavior::FailStartup("replacement cannot start".into())
            }
        } else {
            Behavior::Healthy
        }
    });
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(if failures >= 3 {
        |o, _| {
            if !o.recycling_suspended {
                return Err("three failed replacements must suspend recycling".into());
            }
            Ok(())
        }
    } else {
        |o, e| {
            if o.recycling_suspended {
                return Err("recycling was suspended below the retry limit".into());
            }
            if o.spawns <= e.workers as u64 + 3 {
                return Err("the recycle never completed after its replacement recovered".into());
            }
            Ok(())
        }
    });
    Plan { spec, expect: e }
}

pub(crate) fn reload(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 3));
    if ctx.rng.chance(0.5) {
        // Recycles in flight when the reload arrives: the reload must wait for them.
        config.recovery.worker_max_age = 1.0 + ctx.rng.unit() * 2.0;
        config.recovery.worker_max_age_jitter = 0.0;
    }
    let mut next = fast_config(workers(ctx, 1, 4));
    if ctx.rng.chance(0.5) {
        // The new generation's heartbeat timeout is shorter than the old interval: its
        // workers must beat (and be judged) by the new timings from their first HELLO.
        config.recovery.heartbeat_interval = 1.0;
        config.recovery.heartbeat_timeout = 4.0;
        next.recovery.heartbeat_interval = 0.2;
        next.recovery.heartbeat_timeout = 0.6;
    }
    let mut spec = spec(ctx, config.clone(), 10.0);
    let n_next = next.workers as usize;
    spec.commands
        .push((at(ctx, 2.0, 8.0), SimCommand::Reload(Box::new(next))));
    let mut e = expect(&config, End::Ready);
    e.workers = n_next;
    e.generation = Some(2);
    e.zero_failed = true;
    e.extra = Some(|o, _| match &o.liveness {
        Some(s) if s.restarts == 0 && s.last_failure.is_none() => Ok(()),
        Some(s) => Err(format!(
            "a clean reload restarted workers: {:?}",
            s.last_failure
        )),
        None => Err("no liveness snapshot".into()),
    });
    Plan { spec, expect: e }
}

pub(crate) fn reload_invalid(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 3);
    let config = fast_config(n);
    let mut spec = spec(ctx, config.clone(), 12.0);
    let mut next = fast_config(workers(ctx, 1, 4));
    let n_next = next.workers as usize;
    let kind = match ctx.rng.range(0, 2) {
        0 => {
            next.recovery.restart_backoff_initial = 5.0;
            next.recovery.restart_backoff_max = 1.0;
            None
        }
        1 => {
            spec.behavior = behave(ctx.kinds, |info, _| {
                if info.generation.0 == 2 && info.slot.0 == 0 {
                    Behavior::FailStartup("new configuration's root is missing".into())
                } else {
                    Behavior::Healthy
                }
            });
            Some(FaultKind::FailStartup)
        }
        _ => {
            spec.behavior = behave(ctx.kinds, |info, _| {
                if info.generation.0 == 2 && info.slot.0 == 0 {
                    Behavior::HangAtBoot
                } else {
                    Behavior::Healthy
                }
            });
            Some(FaultKind::HangAtBoot)
        }
    };
    spec.commands
        .push((at(ctx, 1.0, 4.0), SimCommand::Reload(Box::new(next))));
    if kind.is_some_and(|k| !ctx.kinds.has(k)) {
        // Its candidate is healthy: a valid reload, which must commit cleanly.
        let mut e = expect(&config, End::Ready);
        e.workers = n_next;
        e.generation = Some(2);
        e.zero_failed = true;
        return Plan { spec, expect: e };
    }
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, _| {
        if o.reload_rejections.is_empty() {
            return Err("the bad reload was not reported".into());
        }
        o.coverage.insert("reload rejected kept the old generation");
        Ok(())
    });
    Plan { spec, expect: e }
}

/// One to three resizes a few seconds apart, each one worker more or fewer; one that would
/// leave no worker is rejected and the service keeps its count. Each accepted resize is a
/// reload: a new generation of the new count, nothing lost.
pub(crate) fn resize(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 3);
    let config = fast_config(n);
    let mut spec = spec(ctx, config.clone(), 14.0);
    let mut count = n;
    let mut generation = 1;
    for i in 0..ctx.rng.range(1, 3) {
        let by: i32 = if ctx.rng.chance(0.5) { 1 } else { -1 };
        let t = at(ctx, 1.0 + 4.0 * i as f64, 3.0 + 4.0 * i as f64);
        spec.commands.push((t, SimCommand::Resize(by)));
        if count + i64::from(by) >= 1 {
            count += i64::from(by);
            generation += 1;
        }
    }
    let mut e = expect(&config, End::Ready);
    e.workers = count as usize;
    e.workers_rule = Some(
        "resize rule (each SIGTTIN or SIGTTOU reloads to the committed count plus or minus one, never below one)",
    );
    e.generation = Some(generation);
    e.zero_failed = true;
    e.extra = Some(|o, e| {
        let resized = e.generation.unwrap_or(1) > 1;
        if resized {
            o.coverage.insert("resized by a signal");
        }
        match &o.liveness {
            Some(s) if s.restarts == 0 => Ok(()),
            Some(s) => Err(format!("resizing restarted workers: {:?}", s.last_failure)),
            None => Err("no liveness snapshot".into()),
        }
    });
    Plan { spec, expect: e }
}
