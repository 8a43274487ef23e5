//! The builders of the scenarios whose faults are in the host between the parent and its
//! workers: control channels that delay and reorder across channels, and workers whose
//! clocks drift (decision 0113).

use core::time::Duration;

use servery_core::supervisor::{ExitReason, FailureReason};
use servery_sim::{Behavior, Fault, FaultKind, Outcome, SimCommand};

use crate::catalog::{at, behave, expect, fault, spec, workers};
use crate::{Ctx, End, Expect, Plan, fast_config};

/// The longest extra delay a channel-delay fault draws: well inside
/// `heartbeat_timeout - heartbeat_interval` (1.5 s in the simulated timings), the least
/// a late beat needs to be taken for a hang.
pub(crate) const MAX_CHANNEL_DELAY: Duration = Duration::from_millis(250);

/// The furthest a drifting worker's clock runs off the host's: ±20 %, parts per million.
pub(crate) const MAX_DRIFT_PPM: u64 = 200_000;

/// Reasons the parent gives for ending a worker it judged unwell (rather than one that
/// crashed, was recycled or stopped): what a delay or a drift inside its bound must
/// never bring about.
fn judged_unwell(reason: Option<ExitReason>) -> bool {
    matches!(
        reason,
        Some(
            ExitReason::HealthFailure
                | ExitReason::DrainHang
                | ExitReason::ProtocolError
                | ExitReason::ForcedTermination
        )
    )
}

pub(crate) fn channel_delay(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 4);
    let config = fast_config(n);
    let mut spec = spec(ctx, config.clone(), 15.0);
    spec.workload.request_rate = 40.0;
    // Half the time a first-generation candidate dies around the first rollout, through
    // a delay: its EOF and exit, and the others' PREPAREDs and READYs, cross one another
    // and are found together, so a READY that completes the generation may be read in one
    // look with its end (the intake rule judges which came first).
    let victim = ctx.rng.chance(0.5).then(|| ctx.rng.range(0, n as u64 - 1));
    let first_max = Duration::from_millis(ctx.rng.range(20, MAX_CHANNEL_DELAY.as_millis() as u64));
    let lifetime = Duration::from_micros(ctx.rng.range(1_000, 3 * first_max.as_micros() as u64));
    if victim.is_some() || ctx.rng.chance(0.5) {
        let duration = at(ctx, 0.5, 2.0);
        fault(
            ctx.kinds,
            &mut spec,
            Duration::ZERO,
            Fault::ChannelDelay {
                duration,
                max: first_max,
            },
        );
    }
    for _ in 0..ctx.rng.range(2, 4) {
        let t = at(ctx, 0.2, 14.0);
        let max = delay_max(ctx);
        let duration = at(ctx, 0.5, 3.0);
        fault(
            ctx.kinds,
            &mut spec,
            t,
            Fault::ChannelDelay { duration, max },
        );
    }
    spec.behavior = behave(ctx.kinds, move |info, _| {
        if victim == Some(info.index) && info.generation.0 == 1 {
            Behavior::CrashAfter(lifetime)
        } else {
            Behavior::Healthy
        }
    });
    let mut crashes = 0;
    for _ in 0..ctx.rng.range(1, 3) {
        let t = at(ctx, 1.0, 14.0);
        let pick = ctx.rng.next_u64();
        crashes += u32::from(fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick }));
    }
    spec.commands.push((at(ctx, 1.0, 6.0), SimCommand::Recycle));
    let reload_at = at(ctx, 6.0, 12.0);
    spec.commands
        .push((reload_at, SimCommand::Reload(Box::new(fast_config(n)))));
    let end = if victim.is_some() && ctx.kinds.has(FaultKind::CrashAfterUptime) {
        End::ReadyOrFailed(FailureReason::StartupFailure)
    } else {
        End::Ready
    };
    let mut e = expect(&config, end);
    // A crash that hits a reload candidate may refuse the reload (generation 1) or be
    // replaced inside it (generation 2); without crashes it commits.
    e.generation = (crashes == 0).then_some(2);
    e.end_rule = Some(
        "delay rule (a channel delay of at most 250 ms is no missed beat: the service stays up and heals)",
    );
    e.extra = Some(no_worker_judged_unwell);
    Plan { spec, expect: e }
}

fn delay_max(ctx: &mut Ctx) -> Duration {
    Duration::from_millis(ctx.rng.range(5, MAX_CHANNEL_DELAY.as_millis() as u64))
}

/// The delay rule and the drift rule: what the parent ends for missed beats, a bad
/// frame or an overrun drain deadline, it ends for what it saw on its own clock; a
/// channel delay or a clock drift inside its bound is neither.
fn no_worker_judged_unwell(o: &mut Outcome, _: &Expect) -> Result<(), String> {
    if let Some(x) = o.exits.iter().find(|x| judged_unwell(x.reason)) {
        let rule = if o.injected_kinds().contains(&FaultKind::ClockDrift) {
            format!(
                "drift rule: a worker whose clock runs at most {} % off beats, drains and exits in time by the parent's clock",
                MAX_DRIFT_PPM / 10_000
            )
        } else {
            format!(
                "delay rule: a channel delay of at most {MAX_CHANNEL_DELAY:?} is no missed beat"
            )
        };
        return Err(format!(
            "{rule}, yet worker {} was ended at {} ms as {:?}",
            x.worker, x.at_ms, x.reason
        ));
    }
    Ok(())
}

pub(crate) fn clock_drift(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let mut config = fast_config(n);
    // Recycled by age, judged on the parent's clock, while their own clocks drift.
    config.recovery.worker_max_age = 2.0 + ctx.rng.unit() * 3.0;
    let mut spec = spec(ctx, config.clone(), 15.0);
    for _ in 0..ctx.rng.range(2, 6) {
        let t = at(ctx, 0.05, 12.0);
        let pick = ctx.rng.next_u64();
        let off = ctx.rng.range(10_000, MAX_DRIFT_PPM) as i32;
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
    spec.commands
        .push((at(ctx, 1.0, 12.0), SimCommand::Recycle));
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.end_rule = Some(
        "drift rule (a worker whose clock runs at most 20 % off is judged on the parent's clock and kept)",
    );
    e.extra = Some(no_worker_judged_unwell);
    Plan { spec, expect: e }
}
