//! Crash accounting: the service-wide sliding window of restart attempts, and each
//! slot's backoff and run of consecutive unstable restarts.
//!
//! With `restart_burst_window` set, crashes of different slots within that long of a
//! burst's first crash are one attempt against the window: N workers killed by one
//! dependency outage or one poison request are one fault, not N (decision 0033). The
//! per-slot run is counted per crash as before, so a slot that loops still halts.

use core::time::Duration;
use std::collections::VecDeque;

use crate::config::{RecoveryPolicy, RestartJitter};
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
    /// The slot's last restart delay, for decorrelated jitter (`None` after a reset).
    pub last_delay: Option<Duration>,
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
        self.decide_with(now, policy, slot, stable, &mut || 0.5)
    }

    /// [`Self::decide`], the delay spread by the policy's `restart_backoff_jitter` with
    /// `unit` (uniform in [0, 1), from the supervisor's seeded stream). `unit` is called
    /// once for a restart under a jitter, and never otherwise: without jitter the stream
    /// is untouched, so every run draws as before the setting existed.
    pub fn decide_with(
        &mut self,
        now: Instant,
        policy: &RecoveryPolicy,
        slot: &mut SlotHistory,
        stable: bool,
        unit: &mut dyn FnMut() -> f64,
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
            slot.last_delay = None;
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
        let after = jittered(policy, slot, unit);
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

/// The slot's next restart delay under the policy's jitter; records it for the next.
fn jittered(
    policy: &RecoveryPolicy,
    slot: &mut SlotHistory,
    unit: &mut dyn FnMut() -> f64,
) -> Duration {
    let base = backoff(policy, slot.consecutive);
    let (initial, max) = (
        policy.restart_backoff_initial(),
        policy.restart_backoff_max(),
    );
    let after = match policy.restart_backoff_jitter() {
        RestartJitter::None => base,
        RestartJitter::Full => base.mul_f64(unit().clamp(0.0, 1.0)),
        RestartJitter::Decorrelated => {
            let previous = slot.last_delay.unwrap_or(initial);
            let high = previous.saturating_mul(3).max(initial);
            (initial + (high - initial).mul_f64(unit().clamp(0.0, 1.0))).min(max)
        }
        RestartJitter::Proportional => base.mul_f64(0.8 + 0.4 * unit().clamp(0.0, 1.0)),
    };
    slot.last_delay = Some(after);
    after
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

    /// The delays of `n` restarts in a row of one slot under `jitter`, each drawing
    /// `draws[i]`; returns the delays in ms and how many draws were taken.
    fn jittered_run(jitter: RestartJitter, draws: &[f64]) -> (Vec<u128>, usize) {
        let p = policy(|r| {
            r.recovery.restart_backoff_jitter = jitter;
            r.recovery.worker_restart_limit = 100;
        });
        let mut w = RestartWindow::default();
        let mut slot = SlotHistory::default();
        let mut taken = 0;
        let mut out = Vec::new();
        for (i, &u) in draws.iter().enumerate() {
            let mut unit = || {
                taken += 1;
                u
            };
            let at = Instant::ZERO + Duration::from_secs(3600 * i as u64);
            match w.decide_with(at, &p, &mut slot, false, &mut unit) {
                RestartDecision::Replace { after } => out.push(after.as_millis()),
                d => panic!("{i}: {d:?}"),
            }
        }
        (out, taken)
    }

    #[test]
    fn without_jitter_the_delay_is_the_backoff_and_nothing_is_drawn() {
        let (got, taken) = jittered_run(RestartJitter::None, &[0.9; 9]);
        assert_eq!(got, [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(taken, 0, "no draw: the seeded stream is untouched");
    }

    #[test]
    fn full_jitter_scales_the_backoff_by_the_draw() {
        let (got, taken) = jittered_run(RestartJitter::Full, &[0.5, 0.0, 0.25, 0.999_999]);
        assert_eq!(got, [125, 0, 250, 1999]);
        assert_eq!(taken, 4);
    }

    #[test]
    fn decorrelated_jitter_spans_initial_to_three_times_the_last_capped() {
        // 250 + u·(3·prev − 250): 250 + 1·500 = 750, then 250 + 0.5·2000 = 1250,
        // then 250 + 0·… = 250, then 250 + 1·500 = 750 … and the cap at 30 s.
        let (got, _) = jittered_run(RestartJitter::Decorrelated, &[1.0, 0.5, 0.0, 1.0]);
        assert_eq!(got, [750, 1250, 250, 750]);
        let (got, _) = jittered_run(RestartJitter::Decorrelated, &[1.0; 8]);
        assert_eq!(got, [750, 2250, 6750, 20250, 30000, 30000, 30000, 30000]);
        // A stable worker resets the slot: the next range starts at the initial delay.
        let p = policy(|r| r.recovery.restart_backoff_jitter = RestartJitter::Decorrelated);
        let mut w = RestartWindow::default();
        let mut slot = SlotHistory::default();
        w.decide_with(Instant::ZERO, &p, &mut slot, false, &mut || 1.0);
        let d = w.decide_with(Instant::ZERO, &p, &mut slot, true, &mut || 1.0);
        assert_eq!(
            d,
            RestartDecision::Replace {
                after: Duration::from_millis(750)
            }
        );
    }

    #[test]
    fn proportional_jitter_is_within_twenty_percent_of_the_backoff() {
        let (got, _) = jittered_run(RestartJitter::Proportional, &[0.0, 1.0, 0.5]);
        assert_eq!(got, [200, 600, 1000]);
    }
}
