//! The heal rule (decision 0114): once a run's faults stop, a service that is to end
//! ready has its workers ready again within a stated bound — liveness judged from the
//! moment the last fault ended, not only at the liveness point.
//!
//! The quiet point is the latest of: every fault as it took effect (a kill, a stop, a
//! worker killed between a write's steps), the end of every fault that lasts, as it ran (a
//! window, a pause, a stall, a drift, a channel delay and the deliveries it still holds
//! back), every operator command that changes the workers (reload, resize, recycle), and
//! every process drawn to misbehave when it ended unwell (any end but a clean exit or a
//! recycle), or at its spawn when the host refused it. A planned hang counts from the
//! stop, so the time the parent takes to notice it is part of healing. From the quiet
//! point + [`heal_bound`] to the liveness point, the committed generation must count the
//! expected ready workers at every moment.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_core::supervisor::ExitReason;
use servery_sim::{Outcome, SimCommand, SimSpec};

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
    last_command: Duration,
    liveness_at: Duration,
    bound: Duration,
}

impl HealPlan {
    pub(crate) fn of(spec: &SimSpec) -> Self {
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
            last_command: commands.max().unwrap_or(Duration::ZERO),
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
    // Faults count from when they took effect, as they ran (a clock jump moves what was
    // planned inside it to its end): a lasting one until its window closed. How long the
    // parent takes to notice (a hang's heartbeat deadline) is part of healing.
    let injected = o
        .injected
        .iter()
        .map(|i| i.at_ms)
        .chain(o.fault_windows.iter().map(|&(_, _, until)| until));
    // A process drawn to misbehave does so when it ends unwell (its crash, its failed
    // start), or at its spawn when the host refused it.
    let misbehaving = o.misbehaving.iter().filter_map(|&(index, _)| {
        let worker = index + 1;
        o.exits
            .iter()
            .find(|x| x.worker == worker && lost(x.reason))
            .map(|x| x.at_ms)
            .or_else(|| o.spawn_times_ms.get(index as usize).copied())
    });
    let quiet = injected
        .chain(misbehaving)
        .filter(|&t| t <= live)
        .chain([plan.last_command.as_millis() as u64])
        .max()
        .unwrap_or(0);
    if quiet >= live {
        // Faults ran up to the liveness point: the liveness rule judges the end.
        return Ok(());
    }
    let want = e.alt_workers.map_or(e.workers, |alt| alt.min(e.workers)) as u32;
    let bound = plan.bound.as_millis() as u64;
    let from = quiet + bound;
    if from > live {
        // The liveness point comes first; the liveness rule judges it.
        return Ok(());
    }
    // The ready count at `from`, then every change of it up to the liveness point.
    let at_from = o
        .ready_changes
        .iter()
        .take_while(|(ms, _)| *ms <= from)
        .last()
        .map_or((from, 0), |&(_, ready)| (from, ready));
    let later = o
        .ready_changes
        .iter()
        .copied()
        .filter(|(ms, _)| *ms > from && *ms <= live);
    match [at_from]
        .into_iter()
        .chain(later)
        .find(|(_, ready)| *ready < want)
    {
        None => Ok(()),
        Some((at, ready)) => Err(format!(
            "heal rule: after the last fault at {quiet} ms the service must count {want} ready workers within {bound} ms and keep them, from {from} ms to the liveness point at {live} ms; at {at} ms it counted {ready}"
        )),
    }
}
