//! Starts that fail: a first-generation worker dying or reporting a startup error before
//! READY (the service fails before readiness, with the worker's own text), and crash
//! replacements that cannot start (recovered within the restart limit, failed beyond it).

use core::time::Duration;

use servery_core::supervisor::FailureReason;
use servery_sim::{Behavior, Fault, FaultKind};

use crate::catalog::{at, behave, expect, fault, spec, workers};
use crate::{Ctx, End, Plan, fast_config};

pub(crate) fn crash_during_startup(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let config = fast_config(n);
    let mut spec = spec(ctx, config.clone(), 2.0);
    let victim = ctx.rng.range(0, n as u64 - 1);
    let between = ctx.rng.chance(0.6);
    spec.behavior = behave(ctx.kinds, move |info, _| {
        match (info.index == victim, between) {
            (true, true) => Behavior::CrashBetweenPrepareAndCommit,
            (true, false) => Behavior::CrashAtBoot,
            _ => Behavior::Healthy,
        }
    });
    let kind = if between {
        FaultKind::CrashBetweenPrepareAndCommit
    } else {
        FaultKind::CrashAtBoot
    };
    // The simulator records "crash between prepare and commit" when the victim dies.
    let end = if ctx.kinds.has(kind) {
        End::Failed(FailureReason::StartupFailure)
    } else {
        End::Ready
    };
    Plan {
        spec,
        expect: expect(&config, end),
    }
}

pub(crate) fn startup_failure_initial(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 4);
    let config = fast_config(n);
    let mut spec = spec(ctx, config.clone(), 2.0);
    let victim = ctx.rng.range(0, n as u64 - 1);
    let hang = ctx.rng.chance(0.25);
    spec.behavior = behave(ctx.kinds, move |info, _| {
        match (info.index == victim, hang) {
            (true, false) => {
                Behavior::FailStartup("cannot open the served root: permission denied".into())
            }
            (true, true) => Behavior::HangAtBoot,
            _ => Behavior::Healthy,
        }
    });
    let kind = if hang {
        FaultKind::HangAtBoot
    } else {
        FaultKind::FailStartup
    };
    if !ctx.kinds.has(kind) {
        return Plan {
            spec,
            expect: expect(&config, End::Ready),
        };
    }
    let mut e = expect(&config, End::Failed(FailureReason::StartupFailure));
    e.extra = Some(if hang {
        |o, _| match &o.failure_message {
            Some(m) if m.contains("worker_start_timeout") => Ok(()),
            m => Err(format!(
                "a hung boot must fail on the start timeout, got {m:?}"
            )),
        }
    } else {
        |o, _| match &o.failure_message {
            Some(m) if m.contains("permission denied") => Ok(()),
            m => Err(format!("the worker's own error text is missing: {m:?}")),
        }
    });
    Plan { spec, expect: e }
}

pub(crate) fn startup_failure_replacement(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 3);
    let config = fast_config(n);
    let mut spec = spec(ctx, config.clone(), 12.0);
    let failures = ctx.rng.range(1, 6);
    let first_replacement = n as u64;
    spec.behavior = behave(ctx.kinds, move |info, _| {
        if info.index >= first_replacement && info.index < first_replacement + failures {
            Behavior::FailStartup("replacement cannot bind its resources".into())
        } else {
            Behavior::Healthy
        }
    });
    let crashed = fault(
        ctx.kinds,
        &mut spec,
        at(ctx, 1.0, 2.0),
        Fault::CrashWorker {
            pick: ctx.rng.next_u64(),
        },
    );
    // One crash plus `failures` failed boots: within a limit of 5 the slot recovers;
    // the fifth consecutive failed replacement exceeds it. Without the crash, or with
    // healthy replacements, nothing fails.
    let end = if failures <= 4 || !crashed || !ctx.kinds.has(FaultKind::FailStartup) {
        End::Ready
    } else {
        End::Failed(FailureReason::RestartLimit)
    };
    let mut e = expect(&config, end);
    e.extra = Some(|o, _| {
        if o.failure == Some(FailureReason::RestartLimit) {
            o.coverage.insert("replacement failed then halted");
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// Two to four candidates; one crashes around its READY or later while the parent stops
/// for a moment just after the COMMIT, so that a look may find another candidate's READY
/// with the crash. The end is the timing's: the intake rule judges that a start failed
/// only on an end found before the last READY.
pub(crate) fn ready_and_crash_in_one_look(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 4);
    let config = fast_config(n);
    let mut spec = spec(ctx, config.clone(), 2.0);
    let victim = ctx.rng.range(0, n as u64 - 1);
    // The others boot in 20 ms, the longest a simulated boot takes, so the COMMIT goes
    // out just after 20 ms whatever the victim drew; the victim dies 15–40 ms after its
    // PREPARED, around its READY or later, and the parent stops just after the COMMIT.
    let lifetime = Duration::from_micros(ctx.rng.range(15_000, 40_000));
    spec.behavior = behave(ctx.kinds, move |info, _| {
        match (info.index == victim, info.generation.0 == 1) {
            (true, true) => Behavior::CrashAfter(lifetime),
            (false, true) => Behavior::SlowBoot(Duration::from_millis(20)),
            _ => Behavior::Healthy,
        }
    });
    let stall_at = Duration::from_micros(ctx.rng.range(20_000, 21_000));
    let stall = Duration::from_micros(ctx.rng.range(10_000, 40_000));
    fault(ctx.kinds, &mut spec, stall_at, Fault::StallParent(stall));
    let end = if ctx.kinds.has(FaultKind::CrashAfterUptime) {
        End::ReadyOrFailed(FailureReason::StartupFailure)
    } else {
        End::Ready
    };
    Plan {
        spec,
        expect: expect(&config, end),
    }
}
