//! Starts that fail: a first-generation worker dying or reporting a startup error before
//! READY (the service fails before readiness, with the worker's own text), and crash
//! replacements that cannot start (recovered within the restart limit, failed beyond it).

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
