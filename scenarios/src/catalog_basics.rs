//! The basic lifecycle scenarios' builders: steady load, crashes, hangs, crash loops,
//! backoff, shutdown deadlines, the parent's death and stalls, singletons.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_core::supervisor::{ExitReason, FailureReason};
use servery_sim::{Behavior, Fault, FaultKind, Outcome, SimCommand, SimSpec};

use crate::catalog::{at, behave, expect, fault, secs, spec, workers};
use crate::{Ctx, End, Expect, Plan, fast_config};

pub(crate) fn steady(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 4));
    let spec = spec(ctx, config.clone(), 60.0);
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    Plan { spec, expect: e }
}

pub(crate) fn crash(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 4);
    // Half the seeds run the seed document's own policy defaults.
    let config = if ctx.rng.chance(0.5) {
        RawConfig {
            workers: n,
            ..RawConfig::default()
        }
    } else {
        fast_config(n)
    };
    let mut spec = spec(ctx, config.clone(), 20.0);
    let mut crashes = Vec::new();
    for _ in 0..ctx.rng.range(1, 3) {
        let t = at(ctx, 1.0, 20.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick });
        crashes.push(t);
    }
    // Half the time the channels are delayed around a crash (drawn after everything
    // else, so the rest of the plan is what it was before the kind existed).
    if ctx.rng.chance(0.5) {
        let t = crashes[0].saturating_sub(secs(0.2));
        let max = Duration::from_millis(ctx.rng.range(5, 250));
        let duration = secs(0.5 + ctx.rng.unit() * 2.0);
        fault(
            ctx.kinds,
            &mut spec,
            t,
            Fault::ChannelDelay { duration, max },
        );
    }
    Plan {
        spec,
        expect: expect(&config, End::Ready),
    }
}

pub(crate) fn hang(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 2, 4));
    let mut spec = spec(ctx, config.clone(), 15.0);
    for _ in 0..ctx.rng.range(1, 2) {
        let t = at(ctx, 1.0, 15.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::HangWorker { pick });
    }
    // The other workers' clocks may drift meanwhile: the hung one is still found by the
    // parent's clock, and no drifting one is taken for hung.
    for _ in 0..ctx.rng.range(0, 2) {
        let t = at(ctx, 0.5, 15.0);
        let pick = ctx.rng.next_u64();
        let off = ctx.rng.range(10_000, 200_000) as i32;
        let rate_ppm = if ctx.rng.chance(0.5) { off } else { -off };
        let duration = at(ctx, 1.0, 8.0);
        fault(
            ctx.kinds,
            &mut spec,
            t,
            Fault::ClockDrift {
                pick,
                rate_ppm,
                duration,
            },
        );
    }
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        if o.hangs_injected > 0 && !o.coverage.contains("hang killed") {
            return Err("a hung worker was never killed for its missed heartbeats".into());
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// `hang-during-drain`'s timings: a heartbeat timeout long enough that the recycle of a
/// just-stopped worker (a real boot included, when real processes run the plan) drains it
/// before its heartbeat deadline, and a drain deadline far beyond the hang's bound.
const HANG_HEARTBEAT_TIMEOUT: f64 = 4.0;
const HANG_FORCE_TIMEOUT: f64 = 0.5;
const HANG_DRAIN_TIMEOUT: f64 = 15.0;
/// What the hung worker's end may take beyond `heartbeat_timeout + force_timeout` after
/// the stop: the reap, and a real run's polls.
const HANG_SLACK: f64 = 1.0;

pub(crate) fn hang_during_drain(ctx: &mut Ctx) -> Plan {
    let by_age = ctx.rng.chance(0.5);
    // Age recycling starts with the worker that became ready first, which the stop may
    // not pick; with one worker it is the one stopped.
    let n = if by_age { 1 } else { workers(ctx, 1, 2) };
    let mut config = fast_config(n);
    let r = &mut config.recovery;
    r.heartbeat_timeout = HANG_HEARTBEAT_TIMEOUT;
    r.force_timeout = HANG_FORCE_TIMEOUT;
    r.drain_timeout = HANG_DRAIN_TIMEOUT;
    let pick = ctx.rng.next_u64();
    let mut e;
    let spec = if by_age {
        // Stopped shortly before its age deadline (workers are ready within 50 ms of the
        // start): its heartbeat deadline has not passed when the recycle drains it.
        let age = 3.0 + ctx.rng.unit() * 3.0;
        config.recovery.worker_max_age = age;
        config.recovery.worker_max_age_jitter = 0.0;
        let mut spec = spec(ctx, config.clone(), 2.0 * age + 2.0);
        let before = 0.1 + ctx.rng.unit() * 0.7;
        spec.faults
            .push((secs(age - before), Fault::HangWorker { pick }));
        e = expect(&config, End::Ready);
        e.extra = Some(|o, e| {
            let reaped = hung_drain_ended(o, e)?;
            if !o.spawn_times_ms.iter().any(|&t| t > reaped) {
                return Err(format!(
                    "no recycle started after the hung worker was reaped at {reaped} ms"
                ));
            }
            Ok(())
        });
        spec
    } else {
        // Stopped, then `ctl recycle` before its heartbeat deadline: every worker is
        // recycled one at a time, the stopped one included.
        let mut spec = spec(ctx, config.clone(), 10.0);
        let stop = at(ctx, 1.5, 4.0);
        let recycle = stop + at(ctx, 0.05, 0.5);
        spec.faults.push((stop, Fault::HangWorker { pick }));
        spec.commands.push((recycle, SimCommand::Recycle));
        e = expect(&config, End::Ready);
        e.extra = Some(|o, e| {
            hung_drain_ended(o, e)?;
            if o.spawns != 2 * e.workers as u64 {
                return Err(format!(
                    "{} spawns for {} workers recycled once each (a drain hang replaces nobody)",
                    o.spawns, e.workers
                ));
            }
            match &o.liveness {
                Some(s) if s.recycle_in_flight => {
                    Err("a recycle is still in flight at the liveness point".into())
                }
                _ => Ok(()),
            }
        });
        spec
    };
    Plan { spec, expect: e }
}

/// The stopped worker was drained, not judged hung while ready, and ended as `drain_hang`
/// within `heartbeat_timeout + force_timeout` (+ slack) of its stop, far inside the drain
/// deadline. Returns when it was reaped (ms).
pub(crate) fn hung_drain_ended(o: &mut Outcome, _: &Expect) -> Result<u64, String> {
    let &[(worker, stopped)] = &o.hangs[..] else {
        return Err(format!("expected one stopped worker, got {:?}", o.hangs));
    };
    let exit = o
        .exits
        .iter()
        .find(|x| x.worker == worker)
        .ok_or_else(|| format!("w{worker}, stopped at {stopped} ms, was never reaped"))?;
    let reason = exit.reason.map_or("unknown", |r| r.code());
    let bound =
        stopped + ((HANG_HEARTBEAT_TIMEOUT + HANG_FORCE_TIMEOUT + HANG_SLACK) * 1000.0) as u64;
    if exit.at_ms > bound || exit.reason != Some(ExitReason::DrainHang) {
        return Err(format!(
            "w{worker}, stopped at {stopped} ms, was reaped at {} ms as {reason}; expected \
             drain_hang by {bound} ms (heartbeat_timeout {HANG_HEARTBEAT_TIMEOUT} s + \
             force_timeout {HANG_FORCE_TIMEOUT} s + {HANG_SLACK} s), drain_timeout is \
             {HANG_DRAIN_TIMEOUT} s",
            exit.at_ms
        ));
    }
    o.coverage.insert("hang while draining killed");
    Ok(exit.at_ms)
}

pub(crate) fn crash_loop(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 3));
    let mut spec = spec(ctx, config.clone(), 40.0);
    spec.workload.request_rate = 40.0;
    spec.behavior = behave(ctx.kinds, |_, rng| {
        Behavior::CrashAfterRequests(rng.range(1, 5))
    });
    if !ctx.kinds.has(FaultKind::CrashAfterRequests) {
        return Plan {
            spec,
            expect: expect(&config, End::Ready),
        };
    }
    let mut e = expect(&config, End::Failed(FailureReason::RestartLimit));
    e.extra = Some(|o, _| {
        let at = o.exit_at_ms.unwrap_or(u64::MAX);
        if at > 40_000 {
            return Err(format!("the crash loop ran until {at} ms"));
        }
        o.coverage.insert("crash loop reached failed");
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn restart_limit_zero(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 4));
    config.recovery.worker_restart_limit = 0;
    let mut spec = spec(ctx, config.clone(), 10.0);
    let crashed = fault(
        ctx.kinds,
        &mut spec,
        at(ctx, 1.0, 8.0),
        Fault::CrashWorker {
            pick: ctx.rng.next_u64(),
        },
    );
    if !crashed {
        return Plan {
            spec,
            expect: expect(&config, End::Ready),
        };
    }
    let mut e = expect(&config, End::Failed(FailureReason::RestartsDisabled));
    e.extra = Some(|o, _| match &o.failure_message {
        Some(m) if m.contains("worker_restart_limit is 0") => Ok(()),
        m => Err(format!(
            "the failure does not name the disabled restarts: {m:?}"
        )),
    });
    Plan { spec, expect: e }
}

/// `n` workers whose replacements all crash after their first request, with a backoff
/// at a 1.5 s cap that a 2 s window of limit 3 can never fill: only the per-slot run of
/// unstable restarts can halt it. `tune` adjusts the recovery settings further.
pub(crate) fn capped_crash_loop(
    ctx: &mut Ctx,
    n: i64,
    tune: impl FnOnce(&mut servery_core::config::RawRecovery),
) -> (RawConfig, SimSpec) {
    let mut config = fast_config(n);
    let r = &mut config.recovery;
    r.restart_backoff_initial = 1.5;
    r.restart_backoff_max = 1.5;
    r.worker_restart_window = 2.0;
    r.worker_restart_limit = 3;
    tune(r);
    let mut spec = spec(ctx, config.clone(), 30.0);
    spec.workload.request_rate = 40.0;
    let first_replacement = n as u64;
    spec.behavior = behave(ctx.kinds, move |info, _| {
        if info.index >= first_replacement {
            Behavior::CrashAfterRequests(1)
        } else {
            Behavior::Healthy
        }
    });
    (config, spec)
}

pub(crate) fn backoff_at_cap(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 2);
    let (config, mut spec) = capped_crash_loop(ctx, n, |_| {});
    let crashed = fault(
        ctx.kinds,
        &mut spec,
        at(ctx, 1.0, 3.0),
        Fault::CrashWorker {
            pick: ctx.rng.next_u64(),
        },
    );
    // The halt needs both: the crash that starts the replacements, and replacements
    // that crash in turn.
    if !crashed || !ctx.kinds.has(FaultKind::CrashAfterRequests) {
        return Plan {
            spec,
            expect: expect(&config, End::Ready),
        };
    }
    let mut e = expect(&config, End::Failed(FailureReason::RestartLimit));
    e.extra = Some(|o, _| {
        o.coverage.insert("backoff at cap halted");
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn shutdown_deadlines(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 3);
    let config = fast_config(n);
    let mut spec = spec(ctx, config.clone(), 5.0);
    spec.workload.service_ms = (100, 6000);
    let victim = ctx.rng.range(0, n as u64 - 1);
    spec.behavior = behave(ctx.kinds, move |info, _| {
        if info.index == victim {
            Behavior::WedgedDrain
        } else {
            Behavior::Healthy
        }
    });
    let wedged = ctx.kinds.has(FaultKind::WedgedDrain);
    let mut e = expect(&config, End::Ready);
    // Long requests on healthy workers may outlive the drain deadline: that is the
    // deadline doing its job.
    e.allow_forced = true;
    e.extra = Some(match ctx.platform {
        // Only a wedged worker is sure to reach the drain deadline.
        servery_core::supervisor::Platform::Posix if !wedged => |_, _| Ok(()),
        servery_core::supervisor::Platform::Posix => |o, _| {
            if o.terms_sent == 0 {
                return Err("POSIX must send TERM before KILL at the drain deadline".into());
            }
            Ok(())
        },
        servery_core::supervisor::Platform::Windows => |o, _| {
            if o.terms_sent != 0 {
                return Err("Windows has no TERM".into());
            }
            Ok(())
        },
    });
    Plan { spec, expect: e }
}

pub(crate) fn parent_death(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 4));
    let mut spec = spec(ctx, config.clone(), 10.0);
    spec.workload.upload_rate = 10.0;
    spec.workload.upload_targets = 3;
    if !fault(ctx.kinds, &mut spec, at(ctx, 2.0, 10.0), Fault::CrashParent) {
        let mut e = expect(&config, End::Ready);
        e.allow_forced = true;
        return Plan { spec, expect: e };
    }
    let mut e = expect(&config, End::ParentDied);
    e.allow_forced = true;
    // The drain, then a second for the processes to end (as a stop allows): on real
    // processes a worker notices the EOF and exits on a loaded machine's schedule.
    e.exit_within = secs(config.recovery.drain_timeout + 1.0);
    e.extra = Some(|o, e| {
        if o.parent_eof_exits as usize != e.workers {
            return Err(format!(
                "{} of {} workers exited on parent EOF",
                o.parent_eof_exits, e.workers
            ));
        }
        o.coverage.insert("parent death drained workers");
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn parent_stall(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 4));
    let mut spec = spec(ctx, config.clone(), 10.0);
    // Longer than the heartbeat timeout: every worker's deadline passes while the parent
    // is stopped, and its beats wait unread.
    let timeout = config.recovery.heartbeat_timeout;
    let stall = secs(timeout * (1.25 + ctx.rng.unit() * 1.75));
    let stalled_at = at(ctx, 1.0, 6.0);
    let stalled = fault(ctx.kinds, &mut spec, stalled_at, Fault::StallParent(stall));
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    if !stalled {
        return Plan { spec, expect: e };
    }
    // `ctl status` while the parent is stopped (answered only once it runs again, after
    // the beats that waited) and after it resumed.
    spec.commands.push((
        stalled_at + stall.mul_f64(ctx.rng.unit()),
        SimCommand::Status,
    ));
    spec.commands
        .push((stalled_at + stall + secs(0.5), SimCommand::Status));
    e.extra = Some(|o, _| {
        if o.status_answers.len() != 2 {
            return Err(format!(
                "2 status requests, {} answered: {:?}",
                o.status_answers.len(),
                o.status_answers
            ));
        }
        if let Some(a) = o.status_answers.iter().find(|a| a.restarts > 0) {
            return Err(format!(
                "a status asked at {} ms during or after the stall reported {} restarts",
                a.asked_ms, a.restarts
            ));
        }
        match &o.liveness {
            Some(s) if s.restarts == 0 => {
                o.coverage.insert("parent stall survived");
                Ok(())
            }
            Some(s) => Err(format!(
                "a stalled parent replaced healthy workers: {:?}",
                s.last_failure
            )),
            None => Err("no liveness snapshot".into()),
        }
    });
    Plan { spec, expect: e }
}

pub(crate) fn uploads(spec: &mut SimSpec, rate: f64, targets: u8) {
    spec.workload.upload_rate = rate;
    spec.workload.upload_targets = targets;
    spec.config.features.uploads = true;
}

pub(crate) fn singleton_lifecycle(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 3));
    let f = &mut config.features;
    f.access_log = ctx.rng.chance(0.5);
    f.mdns = ctx.rng.chance(0.5);
    f.qr = ctx.rng.chance(0.5);
    f.tftp = ctx.rng.chance(0.5);
    // HTTP/3 is not a singleton (decision 0077) but rides along: its sockets follow the
    // same reload and crash. At least one singleton is always on.
    f.http3 = ctx.rng.chance(0.3);
    if !(f.access_log || f.mdns || f.qr || f.tftp) {
        f.access_log = true;
    }
    let mut spec = spec(ctx, config.clone(), 10.0);
    let mut next = config.clone();
    next.workers = workers(ctx, 1, 3);
    let n_next = next.workers as usize;
    spec.commands
        .push((at(ctx, 2.0, 6.0), SimCommand::Reload(Box::new(next))));
    if ctx.rng.chance(0.5) {
        let t = at(ctx, 1.0, 9.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick });
    }
    let mut e = expect(&config, End::Ready);
    // A crash may hit a reload candidate, which rejects the reload: then the first
    // generation serves on and the singletons never switch.
    e.alt_workers = Some(e.workers);
    e.workers = n_next;
    e.generation = None;
    e.extra = Some(|o, _| {
        let (a, b, c) = (o.singleton_starts, o.singleton_stops, o.singleton_switches);
        let committed = o.generations_committed.len() as u32;
        if a == 0 || a != b || c != a * (committed - 1) {
            return Err(format!(
                "singletons: {a} starts, {c} switches, {b} stops over {committed} generations"
            ));
        }
        let generation = o.liveness.as_ref().map_or(0, |s| s.generation.0);
        if generation != u64::from(committed) {
            return Err(format!(
                "liveness generation {generation}, {committed} committed"
            ));
        }
        Ok(())
    });
    Plan { spec, expect: e }
}
