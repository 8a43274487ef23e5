//! The restart policy as the oracle states it, written apart from the supervisor's code so
//! that a change to that code shows as a disagreement: which faults count against the
//! restart limit, when the service must give up, and how long each replacement waits.
//!
//! The policy (`docs/lifecycle.md`, decisions 0003 and 0033):
//! - every lost member of the committed generation is one restart attempt, whatever it
//!   was lost for (a crash, a startup failure, a hang, a malformed frame, an exit);
//! - with a burst window, lost members of *different* slots within that long of the
//!   burst's first are one attempt together;
//! - the service gives up when an attempt would be the limit's + 1st inside the restart
//!   window, or when a slot has been replaced `limit` times in a row without staying up
//!   for the stable period;
//! - the n-th replacement in a row of a slot waits `initial × 2ⁿ`, at most the cap.

use core::time::Duration;
use std::collections::VecDeque;

use servery_core::Instant;
use servery_core::config::RecoveryPolicy;

/// What the policy asks for after a member is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Replace it after this long.
    Replace(Duration),
    /// The service must fail: restarts are off (`worker_restart_limit = 0`).
    Disabled,
    /// The service must fail: the restart limit is reached.
    LimitReached { in_window: usize, in_a_row: u32 },
}

/// One slot's run of unstable replacements and the burst its last loss joined.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SlotRun {
    pub(crate) in_a_row: u32,
    burst: Option<u64>,
}

/// The service-wide attempts inside the restart window.
#[derive(Debug, Clone, Default)]
pub(crate) struct RestartModel {
    attempts: VecDeque<Instant>,
    /// The current burst: when it began and its number.
    burst: Option<(Instant, u64)>,
    bursts: u64,
    /// Replacements the policy granted since the start.
    pub(crate) granted: u64,
}

impl RestartModel {
    /// A member of the slot whose run is `run` was lost at `now`; `stable`: it had been
    /// ready for the stable period.
    pub(crate) fn lost(
        &mut self,
        now: Instant,
        policy: &RecoveryPolicy,
        run: &mut SlotRun,
        stable: bool,
    ) -> Verdict {
        let limit = policy.worker_restart_limit();
        if limit == 0 {
            return Verdict::Disabled;
        }
        let window = policy.worker_restart_window();
        self.attempts.retain(|&t| now.saturating_since(t) < window);
        if stable {
            run.in_a_row = 0;
        }
        let span = policy.restart_burst_window();
        let joins = match self.burst {
            Some((started, id)) if !span.is_zero() => {
                now.saturating_since(started) < span && run.burst != Some(id)
            }
            _ => false,
        };
        let window_full = !joins && self.attempts.len() >= limit as usize;
        if window_full || run.in_a_row >= limit {
            return Verdict::LimitReached {
                in_window: self.attempts.len(),
                in_a_row: run.in_a_row,
            };
        }
        if !joins {
            self.attempts.push_back(now);
            if !span.is_zero() {
                self.bursts += 1;
                self.burst = Some((now, self.bursts));
            }
        }
        run.burst = self.burst.map(|(_, id)| id);
        self.granted += 1;
        let wait = delay(policy, run.in_a_row);
        run.in_a_row += 1;
        Verdict::Replace(wait)
    }

    /// Attempts inside the window as of the last loss.
    pub(crate) fn in_window(&self) -> usize {
        self.attempts.len()
    }
}

/// The wait before the replacement after `n` unstable ones in a row: the initial backoff
/// doubled `n` times, never beyond the cap.
pub(crate) fn delay(policy: &RecoveryPolicy, n: u32) -> Duration {
    let cap = policy.restart_backoff_max();
    let mut wait = policy.restart_backoff_initial();
    for _ in 0..n {
        if wait >= cap {
            break;
        }
        wait = wait.saturating_mul(2);
    }
    wait.min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use servery_core::config::RawConfig;

    fn policy(f: impl FnOnce(&mut RawConfig)) -> RecoveryPolicy {
        let mut raw = RawConfig::default();
        f(&mut raw);
        raw.validate().expect("valid").recovery().clone()
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn the_delay_doubles_from_the_initial_backoff_to_the_cap() {
        let p = policy(|_| {});
        let got: Vec<u128> = (0..9).map(|n| delay(&p, n).as_millis()).collect();
        assert_eq!(got, [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(delay(&p, u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn the_limit_plus_first_attempt_in_the_window_gives_up_and_old_ones_expire() {
        let p = policy(|_| {});
        let mut model = RestartModel::default();
        let mut runs = [SlotRun::default(); 6];
        for (i, run) in runs.iter_mut().enumerate().take(5) {
            let v = model.lost(at(1000 * i as u64), &p, run, false);
            assert_eq!(v, Verdict::Replace(Duration::from_millis(250)), "{i}");
        }
        let v = model.lost(at(5000), &p, &mut runs[5], false);
        assert!(
            matches!(v, Verdict::LimitReached { in_window: 5, .. }),
            "{v:?}"
        );
        // The first attempt left the 60 s window at 60 s: room for one more.
        let v = model.lost(at(60_000), &p, &mut runs[5], true);
        assert!(matches!(v, Verdict::Replace(_)), "{v:?}");
        assert_eq!(model.granted, 6);
    }

    #[test]
    fn a_slot_unstable_limit_times_in_a_row_gives_up_even_with_room_in_the_window() {
        let p = policy(|r| {
            r.recovery.restart_backoff_initial = 30.0;
            r.recovery.restart_backoff_max = 30.0;
        });
        let mut model = RestartModel::default();
        let mut run = SlotRun::default();
        let mut t = 0;
        let mut granted = 0;
        while let Verdict::Replace(wait) = model.lost(at(t), &p, &mut run, false) {
            granted += 1;
            t += wait.as_millis() as u64 + 100;
            assert!(granted <= 5);
        }
        assert_eq!(granted, 5);
        assert!(model.in_window() <= 2);
    }

    #[test]
    fn losses_of_different_slots_in_one_burst_are_one_attempt() {
        let p = policy(|r| r.recovery.restart_burst_window = 1.0);
        let mut model = RestartModel::default();
        let mut runs = [SlotRun::default(); 8];
        for (i, run) in runs.iter_mut().enumerate() {
            let v = model.lost(at(100 * i as u64), &p, run, false);
            assert!(matches!(v, Verdict::Replace(_)), "{i}: {v:?}");
        }
        assert_eq!(model.in_window(), 1);
        // The same slot again is a loop, not part of the burst.
        model.lost(at(900), &p, &mut runs[0], false);
        assert_eq!(model.in_window(), 2);
    }

    #[test]
    fn restarts_off_gives_up_at_the_first_loss() {
        let p = policy(|r| r.recovery.worker_restart_limit = 0);
        let v = RestartModel::default().lost(at(0), &p, &mut SlotRun::default(), true);
        assert_eq!(v, Verdict::Disabled);
    }
}
