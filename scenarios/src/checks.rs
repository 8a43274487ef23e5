//! The predicates every run must satisfy, and the per-scenario expectations.

use core::time::Duration;

use servery_core::supervisor::{FailureReason, Role, ServiceState, WorkerState};
use servery_sim::Outcome;

use crate::{BudgetEnd, End, Expect, crashing_boots};

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

pub(crate) fn judge(o: &mut Outcome, e: &Expect, stop_at: Duration) -> Result<(), String> {
    ensure!(
        o.violations.is_empty(),
        "invariant violations: {:?}",
        o.violations
    );
    ensure!(
        o.stalled.is_none(),
        "stalled: {}",
        o.stalled.clone().unwrap_or_default()
    );
    ensure!(
        o.processes_alive_at_end == 0,
        "{} worker processes outlived the run",
        o.processes_alive_at_end
    );
    ensure!(
        o.temp_files_at_end == 0,
        "{} temporary files left behind",
        o.temp_files_at_end
    );
    ensure!(
        o.torn_files == 0,
        "{} published files are torn or interleaved",
        o.torn_files
    );
    ensure!(
        o.requests.stranded == 0 || e.end == End::ParentDied,
        "{} requests stranded in the listener",
        o.requests.stranded
    );
    if !e.allow_forced {
        ensure!(
            o.requests.failed_forced == 0 && o.uploads.failed_forced == 0,
            "{} requests and {} uploads failed on healthy workers that were cut off",
            o.requests.failed_forced,
            o.uploads.failed_forced
        );
    }
    judge_charges(o)?;
    if e.zero_failed {
        ensure!(
            o.failed_requests() == 0 && o.uploads.failed_fault == 0,
            "zero-downtime run failed {} requests",
            o.failed_requests()
        );
    }
    match e.end {
        End::ParentDied => judge_parent_death(o, e)?,
        End::Ready => judge_ready(o, e).map_err(|why| with_end_rule(e, why))?,
        End::ReadyOrFailed(reason) => match o.failure {
            Some(_) => judge_failed(o, reason)?,
            None => judge_ready(o, e).map_err(|why| with_end_rule(e, why))?,
        },
        End::Failed(reason) => judge_failed(o, reason).map_err(|why| with_end_rule(e, why))?,
        End::Budget(budget) => {
            let crashing_boots = crashing_boots(o);
            match budget.end(crashing_boots) {
                BudgetEnd::Ready => judge_ready(o, e).map_err(|why| {
                    format!(
                        "{why}; at most {} faults could count against a restart limit of {}",
                        budget.may_count + crashing_boots,
                        budget.limit
                    )
                })?,
                BudgetEnd::Failed => {
                    judge_failed(o, FailureReason::RestartLimit).map_err(|why| {
                        format!(
                            "{why}; {} faults were certain to count against a restart limit of {}",
                            budget.certain, budget.limit
                        )
                    })?
                }
                BudgetEnd::Either(uncertain) => {
                    if o.failure.is_some() {
                        judge_failed(o, FailureReason::RestartLimit)
                    } else {
                        judge_ready(o, e)
                    }
                    .map_err(|why| format!("{why} ({uncertain})"))?;
                }
            }
        }
    }
    if e.end != End::ParentDied {
        let code = o.exit_code.ok_or("the parent never exited")?;
        let want = o.failure.map_or(0, |r| r.exit_code());
        ensure!(code == want, "exit code {code}, expected {want}");
        ensure!(
            o.leases_at_exit == 0,
            "{} broker grants outlived the service",
            o.leases_at_exit
        );
        ensure!(
            o.singleton_starts == o.singleton_stops,
            "singletons started {} times, stopped {}",
            o.singleton_starts,
            o.singleton_stops
        );
        if o.failure.is_none() {
            let exit_ms = o.exit_at_ms.unwrap_or(u64::MAX);
            let bound = stop_at + e.exit_within;
            ensure!(
                Duration::from_millis(exit_ms) <= bound,
                "exit at {exit_ms} ms, after the {bound:?} bound"
            );
        }
    }
    if let Some((lo, hi)) = e.first_recycle_within {
        let at = o
            .spawn_times_ms
            .get(e.workers)
            .copied()
            .ok_or("nothing was recycled")?;
        let at = Duration::from_millis(at);
        // A worker's age runs from its READY, so the latest first recycle moves with the
        // time the first generation was all ready: milliseconds in the simulator, as long
        // as a real boot takes on a loaded machine. (The earliest stays counted from the
        // start, which only loosens it.)
        let all_ready = o
            .ready_changes
            .iter()
            .find(|&&(_, ready)| ready as usize >= e.workers)
            .map_or(Duration::ZERO, |&(ms, _)| Duration::from_millis(ms));
        let hi = hi + all_ready;
        ensure!(
            lo <= at + Duration::from_millis(1) && at <= hi,
            "first recycle at {at:?}, outside [{lo:?}, {hi:?}] (all {} ready at {all_ready:?})",
            e.workers
        );
    }
    if let Some(extra) = e.extra {
        extra(o, e)?;
    }
    Ok(())
}

/// `why` the run did not end as expected, after the rule that end keeps, when named.
fn with_end_rule(e: &Expect, why: String) -> String {
    format!(
        "{}{why}",
        e.end_rule.map(|r| format!("{r}: ")).unwrap_or_default()
    )
}

/// Every request or upload that failed on a misbehaving worker is charged to that
/// worker's misbehaviour: one the run injected, of a kind that can fail a request the
/// worker took (a worker that dies before READY never took one).
fn judge_charges(o: &Outcome) -> Result<(), String> {
    let failed = o.requests.failed_fault + o.uploads.failed_fault;
    let charged: u64 = o.failed_by_cause.values().sum();
    ensure!(
        charged == failed,
        "{failed} requests and uploads failed on misbehaving workers, {charged} are charged to a cause: {:?}",
        o.failed_by_cause
    );
    let injected = o.injected_kinds();
    for (&kind, &n) in &o.failed_by_cause {
        ensure!(
            kind.can_fail_requests(),
            "{n} requests or uploads failed on workers charged with {}, which never take one",
            kind.name()
        );
        ensure!(
            injected.contains(&kind),
            "{n} requests or uploads are charged to {}, which the run never injected",
            kind.name()
        );
    }
    Ok(())
}

fn judge_ready(o: &Outcome, e: &Expect) -> Result<(), String> {
    ensure!(
        o.failure.is_none(),
        "service failed: {:?} {}",
        o.failure,
        o.failure_message.clone().unwrap_or_default()
    );
    let status = o
        .liveness
        .as_ref()
        .ok_or("no status at the liveness point")?;
    ensure!(
        status.state == ServiceState::Ready,
        "state {} at the liveness point",
        status.state.name()
    );
    let ready = status
        .workers
        .iter()
        .filter(|w| {
            w.role == Role::Member
                && w.state == WorkerState::Ready
                && w.generation == status.generation
        })
        .count();
    ensure!(
        ready == e.workers || Some(ready) == e.alt_workers,
        "{}{ready} ready workers at the liveness point, expected {}",
        e.workers_rule.map(|r| format!("{r}: ")).unwrap_or_default(),
        e.workers
    );
    if let Some(g) = e.generation {
        ensure!(
            status.generation.0 == g,
            "{}generation {} at the liveness point, expected {g}",
            e.generation_rule
                .map(|r| format!("{r}: "))
                .unwrap_or_default(),
            status.generation.0
        );
    }
    Ok(())
}

fn judge_failed(
    o: &mut Outcome,
    reason: servery_core::supervisor::FailureReason,
) -> Result<(), String> {
    ensure!(
        o.failure == Some(reason),
        "expected failure {reason:?}, got {:?}",
        o.failure
    );
    let msg = o.failure_message.clone().unwrap_or_default();
    ensure!(!msg.is_empty(), "failure without a reason");
    Ok(())
}

fn judge_parent_death(o: &mut Outcome, e: &Expect) -> Result<(), String> {
    ensure!(o.parent_crashed, "the parent was supposed to die");
    let drain = e.exit_within.as_millis() as u64;
    ensure!(
        o.last_process_exit_ms <= o.parent_gone_ms + drain,
        "orphaned workers ran until {} ms, parent died at {} ms, bound {drain} ms",
        o.last_process_exit_ms,
        o.parent_gone_ms
    );
    Ok(())
}
