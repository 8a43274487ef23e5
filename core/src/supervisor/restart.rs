//! Crash accounting: the service-wide sliding window of restart attempts, and each
//! slot's backoff and run of consecutive unstable restarts.

use core::time::Duration;
use std::collections::VecDeque;

use crate::config::RecoveryPolicy;
use crate::time::Instant;

use super::types::FailureReason;

/// What to do about a faulted worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartDecision {
    Replace { after: Duration },
    GiveUp(FailureReason),
}

/// Per-slot crash history.
#[derive(Debug, Clone, Default)]
pub struct SlotHistory {
    /// Restarts since the slot last had a worker that stayed up for the stable period.
    pub consecutive: u32,
}

/// Service-wide restart attempts within the window.
#[derive(Debug, Clone, Default)]
pub struct RestartWindow {
    attempts: VecDeque<Instant>,
    pub total: u64,
}

impl RestartWindow {
    /// Decide about one faulted worker of `slot`. `stable` is whether it had been ready
    /// for at least the stable period, which resets the slot's backoff and run.
    ///
    /// The limit binds twice: at most `limit` attempts in any `window`, and at most
    /// `limit` consecutive unstable attempts in one slot. The second rule is what stops a
    /// crash loop whose backoff has reached its cap: at a 30 s cap only two attempts fit
    /// in a 60 s window, so the window alone would restart forever.
    pub fn decide(
        &mut self,
        now: Instant,
        policy: &RecoveryPolicy,
        slot: &mut SlotHistory,
        stable: bool,
    ) -> RestartDecision {
        let limit = policy.worker_restart_limit();
        if limit == 0 {
            return RestartDecision::GiveUp(FailureReason::RestartsDisabled);
        }
        let window = policy.worker_restart_window();
        while let Some(&first) = self.attempts.front() {
            if now.saturating_since(first) >= window {
                self.attempts.pop_front();
            } else {
                break;
            }
        }
        if stable {
            slot.consecutive = 0;
        }
        if self.attempts.len() as u64 >= u64::from(limit) || slot.consecutive >= limit {
            return RestartDecision::GiveUp(FailureReason::RestartLimit);
        }
        self.attempts.push_back(now);
        self.total += 1;
        let after = backoff(policy, slot.consecutive);
        slot.consecutive += 1;
        RestartDecision::Replace { after }
    }

    /// Attempts currently inside the window (for status).
    pub fn recent(&self) -> usize {
        self.attempts.len()
    }
}

/// `initial * 2^n`, capped at the maximum.
pub fn backoff(policy: &RecoveryPolicy, n: u32) -> Duration {
    let initial = policy.restart_backoff_initial();
    let max = policy.restart_backoff_max();
    let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
    initial.checked_mul(factor).map_or(max, |d| d.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    fn policy(f: impl FnOnce(&mut RawConfig)) -> RecoveryPolicy {
        let mut raw = RawConfig::default();
        f(&mut raw);
        raw.validate().expect("valid").recovery().clone()
    }

    #[test]
    fn backoff_doubles_to_the_cap() {
        let p = policy(|_| {});
        let got: Vec<_> = (0..10).map(|n| backoff(&p, n).as_millis()).collect();
        assert_eq!(
            got,
            [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        );
        assert_eq!(backoff(&p, 400), Duration::from_secs(30));
    }

    #[test]
    fn the_window_halts_a_fast_loop_and_forgets_old_attempts() {
        let p = policy(|_| {});
        let mut w = RestartWindow::default();
        let mut slots: Vec<SlotHistory> = vec![SlotHistory::default(); 6];
        let t = Instant::ZERO;
        for (i, slot) in slots.iter_mut().enumerate().take(5) {
            let d = w.decide(t + Duration::from_secs(i as u64), &p, slot, false);
            assert!(matches!(d, RestartDecision::Replace { .. }), "{i}: {d:?}");
        }
        let d = w.decide(t + Duration::from_secs(5), &p, &mut slots[5], false);
        assert_eq!(d, RestartDecision::GiveUp(FailureReason::RestartLimit));
        // A minute later the window is empty again.
        let d = w.decide(t + Duration::from_secs(70), &p, &mut slots[5], true);
        assert!(matches!(d, RestartDecision::Replace { .. }));
    }

    #[test]
    fn a_loop_at_the_backoff_cap_still_halts() {
        // Two attempts fit the window; the run of unstable restarts stops it.
        let p = policy(|r| {
            r.recovery.restart_backoff_initial = 30.0;
            r.recovery.restart_backoff_max = 30.0;
        });
        let mut w = RestartWindow::default();
        let mut slot = SlotHistory::default();
        let mut t = Instant::ZERO;
        let mut attempts = 0;
        loop {
            match w.decide(t, &p, &mut slot, false) {
                RestartDecision::Replace { after } => {
                    attempts += 1;
                    t = t + after + Duration::from_millis(100);
                    assert!(w.recent() <= 2);
                }
                RestartDecision::GiveUp(r) => {
                    assert_eq!(r, FailureReason::RestartLimit);
                    break;
                }
            }
            assert!(attempts <= 5, "did not halt");
        }
        assert_eq!(attempts, 5);
    }

    #[test]
    fn limit_zero_gives_up_at_once_and_stability_resets_the_run() {
        let p = policy(|r| r.recovery.worker_restart_limit = 0);
        let mut w = RestartWindow::default();
        let mut slot = SlotHistory::default();
        assert_eq!(
            w.decide(Instant::ZERO, &p, &mut slot, true),
            RestartDecision::GiveUp(FailureReason::RestartsDisabled)
        );
        let p = policy(|_| {});
        let mut slot = SlotHistory { consecutive: 4 };
        let d = w.decide(Instant::ZERO, &p, &mut slot, true);
        assert_eq!(
            d,
            RestartDecision::Replace {
                after: Duration::from_millis(250)
            }
        );
    }
}
