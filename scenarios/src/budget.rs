//! How many restarts a fault plan can cost, and which end of the run that makes certain.
//!
//! The supervisor counts a worker against `worker_restart_limit` when it loses a member
//! of the committed generation to a fault (a crash, a missed heartbeat, a malformed
//! frame, a startup failure of a crash replacement): the counted fault after `limit`
//! counted ones inside `worker_restart_window`, or after `limit` unstable ones in a row
//! in one slot, fails the service. A plan fixes how many faults it injects and when, so
//! it bounds from above how many can count; and where faults are far enough apart and
//! nothing else is going on, it also says how many must. A run whose bounds straddle the
//! limit may end either way, and only such a run may.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_sim::{Fault, FaultKind, Outcome};

/// The processes a run spawned that crash between PREPARED and COMMIT: each may count
/// against the limit once more than the plan's faults.
pub fn crashing_boots(o: &Outcome) -> u32 {
    o.misbehaving
        .iter()
        .filter(|(_, k)| *k == FaultKind::CrashBetweenPrepareAndCommit)
        .count() as u32
}

/// The restart limit against what a plan injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartBudget {
    /// `worker_restart_limit`.
    pub limit: u32,
    /// Planned faults that may each count once: a crash, a hang, a malformed frame or a
    /// lease-holder kill (none of them can count twice; one that hits a worker another
    /// fault already ended, a reload candidate, a recycle's replacement or a draining
    /// worker counts less).
    pub may_count: u32,
    /// Of those, the faults certain to count, unless the run spawns a process that
    /// crashes between PREPARED and COMMIT (its crash-replacement chain can keep a slot
    /// empty for as long as it lasts).
    pub certain: u32,
    /// Why the others are not certain (`None` when all are).
    pub caveat: Option<&'static str>,
}

/// The end a [`RestartBudget`] makes certain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetEnd {
    /// At most `limit` faults can count: ready with its workers.
    Ready,
    /// More than `limit` faults must count inside one window: failed with
    /// `restart_limit_exceeded`.
    Failed,
    /// The plan leaves it open, for the reason given.
    Either(String),
}

/// Faults that may cost a restart (a parent write that fails ends its worker's channel,
/// and the worker with it).
fn may_count(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::CrashWorker
            | FaultKind::HangWorker
            | FaultKind::MalformedFrame
            | FaultKind::CrashLeaseHolder
            | FaultKind::ControlWriteFails
    )
}

/// Faults that find a victim whenever every slot has a ready member: the lease-holder
/// kill needs a live worker that last got a lease, which nothing guarantees.
fn always_finds_a_victim(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::CrashWorker | FaultKind::HangWorker | FaultKind::MalformedFrame
    )
}

const AGE_RECYCLING: &str = "age recycling is on: a fault may hit a recycle's replacement or a \
     draining worker, which the limit does not count";
const CROWDED: &str = "a fault close to another one or to the reload may share its victim, find \
     none, or hit a reload candidate or a draining worker; a lease-holder kill may find no \
     holder";

impl RestartBudget {
    /// The budget of a plan that injects `faults` under `config` (its restart policy and
    /// timings), with a reload at `reload_at`, whose processes take at most `boot_max` to
    /// prepare.
    ///
    /// A fault is certain to count when it always finds a victim, age recycling is off,
    /// it is outside the reload's window (from a hang's detection before it to the end of
    /// the old generation's drain), and no other fault came within the time a slot takes
    /// to be served again (detection, backoff, a boot): then every live worker is a ready
    /// member, none is stopped or ending, and the victim's loss is counted. The certain
    /// faults must also fit one restart window, counted by the time the last is detected.
    pub fn of(
        config: &RawConfig,
        faults: &[(Duration, Fault)],
        reload_at: Option<Duration>,
        boot_max: Duration,
    ) -> RestartBudget {
        let r = &config.recovery;
        let limit = u32::try_from(r.worker_restart_limit.max(0)).unwrap_or(u32::MAX);
        let counting: Vec<(f64, FaultKind)> = faults
            .iter()
            .filter(|(_, f)| may_count(f.kind()))
            .map(|(t, f)| (t.as_secs_f64(), f.kind()))
            .collect();
        let may_count = counting.len() as u32;
        if r.worker_max_age > 0.0 {
            let caveat = (may_count > 0).then_some(AGE_RECYCLING);
            return RestartBudget {
                limit,
                may_count,
                certain: 0,
                caveat,
            };
        }
        // A hung worker is reaped by `detect` after its stop; a lost slot is served
        // again `settle` after the fault.
        let detect = r.heartbeat_timeout + r.force_timeout + 0.5;
        // The longest backoff a counted restart can wait: the limit bounds the run of
        // unstable restarts it doubles over.
        let backoff = (r.restart_backoff_initial * 2f64.powi(limit.min(31) as i32))
            .min(r.restart_backoff_max);
        // A fault whose crash lands inside an earlier one's burst is not counted alone.
        let settle =
            (detect + backoff + boot_max.as_secs_f64() + 0.5).max(r.restart_burst_window + detect);
        let reload = reload_at.map(|at| {
            let at = at.as_secs_f64();
            (
                at - detect,
                at + r.worker_start_timeout + r.drain_timeout + r.force_timeout + 1.0,
            )
        });
        let all: Vec<f64> = faults.iter().map(|(t, _)| t.as_secs_f64()).collect();
        let mut certain: Vec<f64> = counting
            .iter()
            .enumerate()
            .filter(|&(_, &(t, kind))| {
                let alone = all.iter().filter(|&&u| u <= t && t - u < settle).count() == 1;
                always_finds_a_victim(kind)
                    && alone
                    && reload.is_none_or(|(from, to)| t < from || t > to)
            })
            .map(|(_, &(t, _))| t)
            .collect();
        certain.sort_by(f64::total_cmp);
        // The most certain faults one window holds, each counted by `detect` after it.
        let span = r.worker_restart_window - detect;
        let in_one_window = certain
            .iter()
            .map(|&first| {
                certain
                    .iter()
                    .filter(|&&t| t >= first && t - first < span)
                    .count()
            })
            .max()
            .unwrap_or(0) as u32;
        RestartBudget {
            limit,
            may_count,
            certain: in_one_window,
            caveat: (in_one_window < may_count).then_some(CROWDED),
        }
    }

    /// What [`RestartBudget::end`] decides, in words.
    pub fn describe(&self, crashing_boots: u32) -> String {
        let end = match self.end(crashing_boots) {
            BudgetEnd::Ready => "must end ready".to_string(),
            BudgetEnd::Failed => "must end failed (restart_limit_exceeded)".to_string(),
            BudgetEnd::Either(why) => format!("may end either way, {why}"),
        };
        format!(
            "restart limit {}: {} planned faults may count, {} certainly, {crashing_boots} \
             crashing boots; {end}",
            self.limit, self.may_count, self.certain
        )
    }

    /// The end the run must reach, given how many processes it spawned that crash
    /// between PREPARED and COMMIT (each may count once more).
    pub fn end(&self, crashing_boots: u32) -> BudgetEnd {
        let most = self.may_count + crashing_boots;
        if most <= self.limit {
            return BudgetEnd::Ready;
        }
        let least = if crashing_boots == 0 { self.certain } else { 0 };
        if least > self.limit {
            return BudgetEnd::Failed;
        }
        let why = if crashing_boots > 0 {
            "processes that crash between PREPARED and COMMIT may keep a slot empty"
        } else {
            self.caveat.unwrap_or("")
        };
        BudgetEnd::Either(format!(
            "uncertain: {least} to {most} faults count against a restart limit of {} ({} \
             planned, {crashing_boots} crashing boots); {why}",
            self.limit, self.may_count
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast_config;

    fn at(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn crash(s: f64) -> (Duration, Fault) {
        (at(s), Fault::CrashWorker { pick: 0 })
    }

    #[test]
    fn a_plan_under_the_limit_must_end_ready() {
        let c = fast_config(3);
        let faults: Vec<_> = (0..5).map(|i| crash(1.0 + f64::from(i))).collect();
        let b = RestartBudget::of(&c, &faults, None, at(2.0));
        assert_eq!((b.limit, b.may_count), (5, 5));
        assert_eq!(b.end(0), BudgetEnd::Ready);
        // A crashing boot may count once more.
        assert!(matches!(b.end(1), BudgetEnd::Either(_)));
    }

    #[test]
    fn isolated_faults_over_the_limit_must_fail_it() {
        let mut c = fast_config(3);
        c.recovery.worker_restart_limit = 2;
        // settle = 2 + 0.5 + 0.5 + 2 + 2 + 0.5 = 7.5 s
        let faults = vec![
            crash(1.0),
            (at(9.0), Fault::HangWorker { pick: 1 }),
            (at(17.0), Fault::MalformedFrame { pick: 2 }),
        ];
        let b = RestartBudget::of(&c, &faults, None, at(2.0));
        assert_eq!((b.may_count, b.certain, b.caveat), (3, 3, None));
        assert_eq!(b.end(0), BudgetEnd::Failed);
        // Crowded: the third fault comes too soon after the second.
        let mut crowded = faults.clone();
        crowded[2].0 = at(12.0);
        let b = RestartBudget::of(&c, &crowded, None, at(2.0));
        assert_eq!(b.certain, 2);
        assert!(matches!(b.end(0), BudgetEnd::Either(m) if m.contains("close to another")));
        // Near the reload.
        let b = RestartBudget::of(&c, &faults, Some(at(16.0)), at(2.0));
        assert_eq!(b.certain, 2);
        // A lease-holder kill may find no holder.
        let mut holder = faults.clone();
        holder[0].1 = Fault::CrashLeaseHolder;
        assert_eq!(RestartBudget::of(&c, &holder, None, at(2.0)).certain, 2);
        // With age recycling nothing is certain.
        c.recovery.worker_max_age = 5.0;
        let b = RestartBudget::of(&c, &faults, None, at(2.0));
        assert_eq!(b.certain, 0);
        assert!(matches!(b.end(0), BudgetEnd::Either(m) if m.contains("age recycling")));
    }

    #[test]
    fn certain_faults_must_fit_one_window() {
        let mut c = fast_config(2);
        c.recovery.worker_restart_limit = 1;
        c.recovery.worker_restart_window = 10.0;
        let faults = vec![crash(1.0), crash(9.0)];
        // Counted by 9 + 3 s, 11 s after the first: not in one 10 s window.
        let b = RestartBudget::of(&c, &faults, None, at(2.0));
        assert_eq!(b.certain, 1);
        c.recovery.worker_restart_window = 12.0;
        assert_eq!(RestartBudget::of(&c, &faults, None, at(2.0)).certain, 2);
    }
}
