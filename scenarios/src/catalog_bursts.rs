//! Correlated crashes under `restart_burst_window` (decision 0033): every worker killed
//! at once is one fault against the restart window, not N; a slot that keeps crashing is
//! still halted by its run of unstable restarts.

use servery_core::supervisor::FailureReason;
use servery_sim::{Fault, FaultKind};

use crate::catalog::{at, capped_crash_loop, expect, fault, spec, workers};
use crate::{Ctx, End, Plan, fast_config};

/// Crashes of different slots this close to a burst's first count once (virtual seconds).
const BURST: f64 = 2.0;

/// Kill every worker at `t` (each kill takes the oldest live worker, so none twice).
fn kill_all(ctx: &Ctx, spec: &mut servery_sim::SimSpec, t: core::time::Duration, n: i64) -> bool {
    let mut all = true;
    for _ in 0..n {
        all &= fault(ctx.kinds, spec, t, Fault::CrashWorker { pick: 0 });
    }
    all
}

/// Three to five workers, a restart limit of 2: every worker is killed at once, and once
/// more when the replacements are up. With the burst window (three seeds in four) each
/// wave is one attempt and the service stays ready; without it the first wave's third
/// crash fails the service, as it always did.
pub(crate) fn correlated_crash_counted_once(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 3, 5);
    let mut config = fast_config(n);
    let bursts = ctx.rng.range(0, 3) != 3;
    let r = &mut config.recovery;
    r.worker_restart_limit = 2;
    r.restart_burst_window = if bursts { BURST } else { 0.0 };
    let mut spec = spec(ctx, config.clone(), 8.0);
    let first = at(ctx, 1.0, 3.0);
    let waves = kill_all(ctx, &mut spec, first, n)
        & kill_all(ctx, &mut spec, first + crate::catalog::secs(3.0), n);
    if !waves {
        return Plan {
            spec,
            expect: expect(&config, End::Ready),
        };
    }
    if !bursts {
        return Plan {
            spec,
            expect: expect(&config, End::Failed(FailureReason::RestartLimit)),
        };
    }
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, e| {
        let want = 2 * e.workers as u64;
        if o.crash_faults != want {
            return Err(format!(
                "{} of the {want} kills landed: the waves did not hit every worker",
                o.crash_faults
            ));
        }
        o.coverage
            .insert("correlated crashes counted once stayed ready");
        Ok(())
    });
    Plan { spec, expect: e }
}

/// Every worker killed at once, and every replacement crashes after its first request:
/// a permanent fault. The backoff sits at a cap the window cannot fill, so each wave is
/// one burst and the window alone would never halt; the per-slot run still must.
pub(crate) fn burst_window_still_halts_a_loop(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 4);
    let (config, mut spec) = capped_crash_loop(ctx, n, |r| r.restart_burst_window = 1.0);
    let t = at(ctx, 1.0, 3.0);
    let killed = kill_all(ctx, &mut spec, t, n);
    if !killed || !ctx.kinds.has(FaultKind::CrashAfterRequests) {
        return Plan {
            spec,
            expect: expect(&config, End::Ready),
        };
    }
    let mut e = expect(&config, End::Failed(FailureReason::RestartLimit));
    e.extra = Some(|o, _| {
        // Three restarts of 1.5 s backoff each, their boots and first requests.
        let at = o.exit_at_ms.unwrap_or(u64::MAX);
        if at > 15_000 {
            return Err(format!("the crash loop under bursts ran until {at} ms"));
        }
        o.coverage.insert("burst window still halted a loop");
        Ok(())
    });
    Plan { spec, expect: e }
}
