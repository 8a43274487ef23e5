//! The heal rule (decision 0114): once a run's faults stop, a service that is to end
//! ready has its workers ready again within a stated bound — liveness judged from the
//! moment the last fault ended, not only at the liveness point.
//!
//! The quiet point is the latest of: the end of every planned fault (its window, a pause,
//! a stall, a drift, a channel delay and the deliveries it still holds back), every
//! operator command that changes the workers (reload, resize, recycle), every worker the
//! parent lost or ended as unwell (any end but a clean exit or a recycle), and every
//! spawn of a process that was to misbehave. From there the committed generation must
//! count the expected ready workers within [`heal_bound`] — by the liveness point at the
//! latest, where the liveness rule takes over.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_core::supervisor::ExitReason;
use servery_sim::{Fault, Outcome, SimCommand, SimSpec};

use crate::Expect;

/// How long after the quiet point the ready count may take to come back: the longest a
/// single fault keeps a slot empty ([`crate::recovery_bound`]: detection, TERM to KILL,
/// the capped backoff, a boot) — the same bound the liveness point is placed by, now
/// measured from the last fault rather than from the end of the planned fault phase.
pub fn heal_bound(c: &RawConfig) -> Duration {
    crate::recovery_bound(c)
}

/// What the heal rule needs from the plan: when its planned faults and commands stop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HealPlan {
    planned_quiet: Duration,
    liveness_at: Duration,
    bound: Duration,
}

impl HealPlan {
    pub(crate) fn of(spec: &SimSpec) -> Self {
        let fault_end = |t: Duration, f: &Fault| match f {
            Fault::ShortWrites(d)
            | Fault::AcceptFails { duration: d, .. }
            | Fault::ClockJump(d)
            | Fault::DiskFull(d)
            | Fault::RenameFails(d)
            | Fault::StallParent(d)
            | Fault::PauseWorker { duration: d, .. }
            | Fault::ClockDrift { duration: d, .. } => t + *d,
            // What the fault delayed may arrive up to `max` after it.
            Fault::ChannelDelay { duration, max } => t + *duration + *max,
            _ => t,
        };
        let faults = spec.faults.iter().map(|(t, f)| fault_end(*t, f));
        let commands = spec
            .commands
            .iter()
            .filter(|(_, c)| {
                matches!(
                    c,
                    SimCommand::Reload(_) | SimCommand::Resize(_) | SimCommand::Recycle
                )
            })
            .map(|(t, _)| *t);
        HealPlan {
            planned_quiet: faults.chain(commands).max().unwrap_or(Duration::ZERO),
            liveness_at: spec.liveness_at,
            bound: heal_bound(&spec.config),
        }
    }
}

/// An end that is a failure the service must heal from.
fn lost(reason: Option<ExitReason>) -> bool {
    !matches!(
        reason,
        Some(
            ExitReason::CleanExit
                | ExitReason::RecycleAge
                | ExitReason::RecycleRequests
                | ExitReason::RecycleManual
                | ExitReason::RecycleMemory
        )
    )
}

/// The heal rule, for a run that ended ready.
pub(crate) fn judge(o: &Outcome, e: &Expect, plan: &HealPlan) -> Result<(), String> {
    let live = plan.liveness_at.as_millis() as u64;
    let exits = o
        .exits
        .iter()
        .filter(|x| x.at_ms <= live && lost(x.reason))
        .map(|x| x.at_ms);
    let misbehaving = o
        .misbehaving
        .iter()
        .filter_map(|(index, _)| o.spawn_times_ms.get(*index as usize).copied())
        .filter(|&t| t <= live);
    let quiet = exits
        .chain(misbehaving)
        .chain([plan.planned_quiet.as_millis() as u64])
        .max()
        .unwrap_or(0);
    if quiet >= live {
        // Faults ran up to the liveness point: the liveness rule judges the end.
        return Ok(());
    }
    let want = e.alt_workers.map_or(e.workers, |alt| alt.min(e.workers)) as u32;
    let ready_at_quiet = o
        .ready_changes
        .iter()
        .take_while(|(ms, _)| *ms <= quiet)
        .last()
        .map_or(0, |c| c.1);
    let healed = if ready_at_quiet >= want {
        Some(quiet)
    } else {
        o.ready_changes
            .iter()
            .find(|(ms, ready)| *ms > quiet && *ready >= want)
            .map(|c| c.0)
    };
    let bound = plan.bound.as_millis() as u64;
    let deadline = (quiet + bound).min(live);
    match healed {
        Some(at) if at <= deadline => Ok(()),
        healed => Err(format!(
            "heal rule: after the last fault at {quiet} ms the service must count {want} ready workers within {bound} ms (by {deadline} ms); {}",
            healed.map_or_else(
                || "it never did".to_string(),
                |at| format!("it did at {at} ms, {} ms after the fault", at - quiet)
            )
        )),
    }
}
