//! A worker that writes garbage on its channel, and chaos: many faults at once, judged by
//! what the plan makes certain.

use core::time::Duration;

use servery_core::config::LogPolicy;
use servery_core::supervisor::ExitReason;
use servery_sim::{Behavior, Fault, FaultKind, Outcome, SimCommand};

use crate::catalog::{at, behave, expect, fault, spec, uploads, workers};
use crate::catalog_io_faults as io;
use crate::{Ctx, End, Expect, Plan, RestartBudget, fast_config};

pub(crate) fn malformed_frame(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 4));
    let mut spec = spec(ctx, config.clone(), 10.0);
    for _ in 0..ctx.rng.range(1, 2) {
        let t = at(ctx, 1.0, 10.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::MalformedFrame { pick });
    }
    // Under --http3 in half the runs (drawn last, so the rest of the plan draws as it
    // did): a worker that wrote garbage is let go while its process lives and still
    // reads its socket, which stays its own until the reap (the HTTP/3 ownership rule).
    spec.config.features.http3 = ctx.rng.chance(0.5);
    let mut e = expect(&config, End::Ready);
    e.extra = Some(ended_for_the_malformed_frame);
    Plan { spec, expect: e }
}

/// How soon after it wrote a malformed frame a worker must be reaped as `protocol_error`:
/// a quarter of the scenarios' heartbeat timeout (2 s). A parent that ignored the frame
/// would still replace the worker, whose later frames it can no longer read, but only
/// once that timeout passed, and as `health_failure`.
const PROTOCOL_ERROR_WITHIN_MS: u64 = 500;

/// Every worker a malformed frame came from was ended for it, at once, and replaced.
pub(crate) fn ended_for_the_malformed_frame(o: &mut Outcome, _: &Expect) -> Result<(), String> {
    for sent in o
        .injected
        .iter()
        .filter(|i| i.kind == FaultKind::MalformedFrame)
    {
        let worker = sent.worker.unwrap_or_default();
        let exit = o.exits.iter().find(|x| x.worker == worker).ok_or_else(|| {
            format!(
                "w{worker}, which wrote a malformed frame at {} ms, was never reaped",
                sent.at_ms
            )
        })?;
        let bound = sent.at_ms + PROTOCOL_ERROR_WITHIN_MS;
        if exit.reason != Some(ExitReason::ProtocolError) || exit.at_ms > bound {
            return Err(format!(
                "w{worker} wrote a malformed frame at {} ms and was reaped at {} ms as {}; \
                 expected protocol_error by {bound} ms (the heartbeat timeout is 2 s)",
                sent.at_ms,
                exit.at_ms,
                exit.reason.map_or("unknown", |r| r.code())
            ));
        }
        if !o.spawn_times_ms.iter().any(|&t| t >= exit.at_ms) {
            return Err(format!(
                "nothing was spawned after w{worker} was reaped as protocol_error at {} ms",
                exit.at_ms
            ));
        }
    }
    Ok(())
}

/// The slowest boot a chaos process draws.
const CHAOS_SLOW_BOOT_MS: u64 = 2000;

pub(crate) fn chaos(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 2, 4));
    config.recovery.worker_max_age = if ctx.rng.chance(0.5) {
        3.0 + ctx.rng.unit() * 5.0
    } else {
        0.0
    };
    config.features.access_log = true;
    config.broker.log_policy = LogPolicy::Drop;
    let mut spec = spec(ctx, config.clone(), 25.0);
    uploads(&mut spec, 10.0, 2);
    spec.workload.access_log = true;
    // Each fault is one of the enabled kinds (all four outside swarm mode).
    let kinds: Vec<FaultKind> = [
        FaultKind::CrashWorker,
        FaultKind::HangWorker,
        FaultKind::MalformedFrame,
        FaultKind::CrashLeaseHolder,
    ]
    .into_iter()
    .filter(|k| ctx.kinds.has(*k))
    .collect();
    for _ in 0..ctx.rng.range(2, 6) {
        let t = at(ctx, 1.0, 25.0);
        let pick = ctx.rng.next_u64();
        let i = ctx.rng.range(0, kinds.len().max(1) as u64 - 1) as usize;
        let Some(&kind) = kinds.get(i) else {
            continue;
        };
        let fault = match kind {
            FaultKind::CrashWorker => Fault::CrashWorker { pick },
            FaultKind::HangWorker => Fault::HangWorker { pick },
            FaultKind::MalformedFrame => Fault::MalformedFrame { pick },
            _ => Fault::CrashLeaseHolder,
        };
        spec.faults.push((t, fault));
    }
    let reload_workers = workers(ctx, 2, 4);
    let reloaded = ctx.rng.chance(0.5);
    let mut reload_at = None;
    if reloaded {
        let mut next = config.clone();
        next.workers = reload_workers;
        let t = at(ctx, 2.0, 20.0);
        reload_at = Some(t);
        spec.commands.push((t, SimCommand::Reload(Box::new(next))));
    }
    io::chaos_io_faults(ctx, &mut spec);
    let first_replacement = config.workers as u64;
    spec.behavior = behave(ctx.kinds, move |info, rng| match rng.range(0, 40) {
        _ if info.index < first_replacement => Behavior::Healthy,
        0 => Behavior::CrashBetweenPrepareAndCommit,
        1 => Behavior::SlowBoot(Duration::from_millis(rng.range(100, CHAOS_SLOW_BOOT_MS))),
        2 => Behavior::ExitDuringDrain,
        _ => Behavior::Healthy,
    });
    // One plan in eight runs under a restart limit of 1, which two faults far enough
    // apart exceed for certain (under 5, six faults in 25 s never are). Drawn last, so
    // the plans that keep the limit draw as they always did.
    if ctx.rng.chance(0.125) {
        let limit = 1;
        config.recovery.worker_restart_limit = limit;
        spec.config.recovery.worker_restart_limit = limit;
        for (_, command) in &mut spec.commands {
            if let SimCommand::Reload(next) = command {
                next.recovery.worker_restart_limit = limit;
            }
        }
    }
    // Ready when the plan's faults cannot exceed the restart limit, failed when they
    // must, either only where the plan leaves it open.
    let budget = RestartBudget::of(
        &config,
        &spec.faults,
        reload_at,
        Duration::from_millis(CHAOS_SLOW_BOOT_MS),
    );
    let mut e = expect(&config, End::Budget(budget));
    e.generation = None;
    e.allow_forced = false;
    if reloaded {
        // A reload whose candidate crashed is rejected; either generation may serve.
        e.extra = Some(|o, _| {
            let Some(status) = &o.liveness else {
                return Ok(());
            };
            if o.failure.is_none() && status.generation.0 == 1 && o.reload_rejections.is_empty() {
                return Err("the reload neither committed nor was rejected".into());
            }
            Ok(())
        });
        e.alt_workers = Some(reload_workers as usize);
    }
    Plan { spec, expect: e }
}
