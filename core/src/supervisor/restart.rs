//! Crash accounting: the service-wide sliding window of restart attempts, and each
//! slot's backoff and run of consecutive unstable restarts.
//!
//! With `restart_burst_window` set, crashes of different slots within that long of a
//! burst's first crash are one attempt against the window: N workers killed by one
//! dependency outage or one poison request are one fault, not N (decision 0033). The
//! per-slot run is counted per crash as before, so a slot that loops still halts.

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
    /// The burst this slot's last crash was counted in; a second crash of the same slot
    /// never joins it (that is a loop, not a correlated fault).
    pub burst: Option<u64>,
}

/// A run of crashes counted as one attempt: its first crash's time and its number.
#[derive(Debug, Clone, Copy)]
struct Burst {
    started: Instant,
    id: u64,
}

/// Service-wide restart attempts within the window.
#[derive(Debug, Clone, Default)]
pub struct RestartWindow {
    attempts: VecDeque<Instant>,
    pub total: u64,
    burst: Option<Burst>,
    bursts: u64,
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
        let joins = self.joins_burst(now, policy, slot);
        let window_full = !joins && self.attempts.len() as u64 >= u64::from(limit);
        if window_full || slot.consecutive >= limit {
            return RestartDecision::GiveUp(FailureReason::RestartLimit);
        }
        if !joins {
            self.attempts.push_back(now);
            if !policy.restart_burst_window().is_zero() {
                self.bursts += 1;
                self.burst = Some(Burst {
                    started: now,
                    id: self.bursts,
                });
            }
        }
        slot.burst = self.burst.map(|b| b.id);
        self.total += 1;
        let after = backoff(policy, slot.consecutive);
        slot.consecutive += 1;
        RestartDecision::Replace { after }
    }

    /// Whether this crash is part of the current burst: within the burst window of its
    /// first crash, and of a slot the burst has not counted yet.
    fn joins_burst(&self, now: Instant, policy: &RecoveryPolicy, slot: &SlotHistory) -> bool {
        let span = policy.restart_burst_window();
        self.burst.is_some_and(|b| {
            !span.is_zero() && now.saturating_since(b.started) < span && slot.burst != Some(b.id)
        })
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
        let attempts = replacements_until_halt(&p, &mut w, &mut slot, |w, _| {
            assert!(w.recent() <= 2);
        });
        assert_eq!(attempts, 5);
    }

    /// Replaces a slot that crashes again 100 ms after each backoff ends until the window
    /// gives up (it must, by the restart limit, within five), calling `between` after each
    /// replacement with the time of the crash that asked for it; how many there were.
    fn replacements_until_halt(
        p: &RecoveryPolicy,
        w: &mut RestartWindow,
        slot: &mut SlotHistory,
        mut between: impl FnMut(&mut RestartWindow, Instant),
    ) -> usize {
        let mut t = Instant::ZERO;
        let mut attempts = 0;
        loop {
            match w.decide(t, p, slot, false) {
                RestartDecision::Replace { after } => {
                    attempts += 1;
                    between(w, t);
                    t = t + after + Duration::from_millis(100);
                }
                RestartDecision::GiveUp(r) => {
                    assert_eq!(r, FailureReason::RestartLimit);
                    return attempts;
                }
            }
            assert!(attempts <= 5, "did not halt");
        }
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
        let mut slot = SlotHistory {
            consecutive: 4,
            ..SlotHistory::default()
        };
        let d = w.decide(Instant::ZERO, &p, &mut slot, true);
        assert_eq!(
            d,
            RestartDecision::Replace {
                after: Duration::from_millis(250)
            }
        );
    }

    fn burst_policy(burst: f64) -> RecoveryPolicy {
        policy(|r| r.recovery.restart_burst_window = burst)
    }

    #[test]
    fn a_burst_of_different_slots_counts_once() {
        let p = burst_policy(1.0);
        let mut w = RestartWindow::default();
        let mut slots = vec![SlotHistory::default(); 8];
        // Eight workers crash within 0.7 s: one attempt, however many slots.
        for (i, slot) in slots.iter_mut().enumerate() {
            let at = Instant::ZERO + Duration::from_millis(100 * i as u64);
            let d = w.decide(at, &p, slot, false);
            assert!(matches!(d, RestartDecision::Replace { .. }), "{i}: {d:?}");
        }
        assert_eq!(w.recent(), 1);
        assert_eq!(w.total, 8);
        // Without the burst window the sixth crash would have failed the service.
        let off = burst_policy(0.0);
        let mut w = RestartWindow::default();
        let mut slots = vec![SlotHistory::default(); 6];
        let last = slots
            .iter_mut()
            .map(|s| w.decide(Instant::ZERO, &off, s, false));
        assert_eq!(
            last.last(),
            Some(RestartDecision::GiveUp(FailureReason::RestartLimit))
        );
    }

    #[test]
    fn a_slot_crashing_again_or_a_crash_after_the_burst_starts_a_new_one() {
        let p = burst_policy(1.0);
        let mut w = RestartWindow::default();
        let mut a = SlotHistory::default();
        let mut b = SlotHistory::default();
        let t = Instant::ZERO;
        w.decide(t, &p, &mut a, false);
        w.decide(t + Duration::from_millis(300), &p, &mut a, false);
        assert_eq!(w.recent(), 2, "the same slot twice is two attempts");
        // b joins the second burst (started at 0.3 s) at 1.2 s, not the first.
        w.decide(t + Duration::from_millis(1200), &p, &mut b, false);
        assert_eq!(w.recent(), 2);
        // At 1.3 s the second burst is over: a new attempt.
        let mut c = SlotHistory::default();
        w.decide(t + Duration::from_millis(1300), &p, &mut c, false);
        assert_eq!(w.recent(), 3);
    }

    #[test]
    fn waves_of_a_correlated_outage_halt_after_limit_waves() {
        // Four workers crash together, and so do their replacements each time the
        // backoff ends: each wave is one attempt, and the sixth wave gives up.
        let p = burst_policy(1.0);
        let mut w = RestartWindow::default();
        let mut slots = vec![SlotHistory::default(); 4];
        let mut t = Instant::ZERO;
        let mut waves = 0;
        'outer: loop {
            let mut next = Duration::ZERO;
            for slot in slots.iter_mut() {
                match w.decide(t, &p, slot, false) {
                    RestartDecision::Replace { after } => next = after,
                    RestartDecision::GiveUp(r) => {
                        assert_eq!(r, FailureReason::RestartLimit);
                        break 'outer;
                    }
                }
            }
            waves += 1;
            t = t + next + Duration::from_millis(10);
            assert!(waves <= 5, "did not halt");
        }
        assert_eq!(waves, 5);
    }

    #[test]
    fn a_loop_at_the_backoff_cap_still_halts_with_bursts_on() {
        let p = policy(|r| {
            r.recovery.restart_backoff_initial = 30.0;
            r.recovery.restart_backoff_max = 30.0;
            r.recovery.restart_burst_window = 59.0;
        });
        let mut w = RestartWindow::default();
        let mut slots = vec![SlotHistory::default(); 4];
        // Slot 0 loops; slot 1 crashes once inside each of its bursts.
        let (loops, rest) = slots.split_at_mut(1);
        let attempts = replacements_until_halt(&p, &mut w, &mut loops[0], |w, t| {
            let d = w.decide(t + Duration::from_secs(1), &p, &mut rest[0], true);
            assert!(matches!(d, RestartDecision::Replace { .. }));
        });
        assert_eq!(attempts, 5);
    }

    #[test]
    fn the_burst_window_is_off_by_default_and_shorter_than_the_restart_window() {
        assert!(policy(|_| {}).restart_burst_window().is_zero());
        for (burst, window, ok) in [
            (0.0, 60.0, true),
            (1.0, 60.0, true),
            (59.9, 60.0, true),
            (60.0, 60.0, false),
            (-1.0, 60.0, false),
            (f64::NAN, 60.0, false),
        ] {
            let mut raw = RawConfig::default();
            raw.recovery.restart_burst_window = burst;
            raw.recovery.worker_restart_window = window;
            match raw.validate() {
                Ok(_) => assert!(ok, "{burst} accepted"),
                Err(e) => {
                    assert!(!ok, "{burst} rejected: {e}");
                    let text = e.to_string();
                    assert!(text.contains("recovery.restart_burst_window"), "{text}");
                    if burst == 60.0 {
                        assert!(text.contains("recovery.worker_restart_window"), "{text}");
                    }
                }
            }
        }
    }
}
