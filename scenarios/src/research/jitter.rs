//! Jittered restart delays as published, for `[restart_jitter]` in a policy file.
//!
//! The supervisor draws them itself (core's `restart_backoff_jitter`, decision 0105):
//! `[restart_jitter] kind = "full" | "decorrelated" | "grpc"` sets that field, and `grpc`
//! also gRPC's 1 s initial delay and 120 s cap unless `[recovery]` gives them. The delay
//! sequences below are the publications' rules on their own, with the tests that state
//! each; `supervisor_delays_follow_the_published_rules` holds core's draws to them.

use servery_sim::rng::SimRng;

/// Which published rule draws the delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JitterKind {
    /// AWS Architecture Blog, "Exponential Backoff And Jitter" (Brooker, 2015):
    /// `uniform(0, min(cap, base · 2ⁿ))`.
    Full,
    /// The same article: `min(cap, uniform(base, 3 · previous))`, from `previous = base`.
    Decorrelated,
    /// gRPC `doc/connection-backoff.md`: the backoff starts at 1 s, grows ×1.6 to 120 s,
    /// and each wait is it × `uniform(0.8, 1.2)`.
    Grpc,
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RestartJitter {
    pub kind: JitterKind,
}

impl RestartJitter {
    /// Set the supervisor's fields this section decides; a field also set in
    /// `[recovery]` is refused, naming it.
    pub fn apply(
        &self,
        recovery: &mut servery_core::config::RawRecovery,
        given: &[String],
    ) -> Result<(), String> {
        use servery_core::config::RestartJitter as Core;
        if given.iter().any(|k| k == "restart_backoff_jitter") {
            return Err(
                "restart_jitter: recovery.restart_backoff_jitter is set in [recovery] too; \
                 give it in one place"
                    .into(),
            );
        }
        recovery.restart_backoff_jitter = match self.kind {
            JitterKind::Full => Core::Full,
            JitterKind::Decorrelated => Core::Decorrelated,
            JitterKind::Grpc => {
                if !given.iter().any(|k| k == "restart_backoff_initial") {
                    recovery.restart_backoff_initial = GRPC_INITIAL_S;
                }
                if !given.iter().any(|k| k == "restart_backoff_max") {
                    recovery.restart_backoff_max = GRPC_MAX_S;
                }
                Core::Proportional
            }
        };
        Ok(())
    }
}

/// gRPC's published constants.
pub const GRPC_INITIAL_S: f64 = 1.0;
pub const GRPC_MULTIPLIER: f64 = 1.6;
pub const GRPC_JITTER: f64 = 0.2;
pub const GRPC_MAX_S: f64 = 120.0;

/// The first `n` delays (seconds) of `kind` with `base` and `cap` (gRPC uses its own).
pub fn delays(kind: JitterKind, base: f64, cap: f64, n: usize, rng: &mut SimRng) -> Vec<f64> {
    let mut out = Vec::with_capacity(n);
    let mut previous = base;
    let mut grpc = GRPC_INITIAL_S;
    for attempt in 0..n {
        let d = match kind {
            JitterKind::Full => {
                let ceiling = (base * 2f64.powi(attempt.min(1000) as i32)).min(cap);
                rng.unit() * ceiling
            }
            JitterKind::Decorrelated => {
                let hi = previous * 3.0;
                let d = (base + rng.unit() * (hi - base)).min(cap);
                previous = d;
                d
            }
            JitterKind::Grpc => {
                let d = grpc * (1.0 + GRPC_JITTER * (2.0 * rng.unit() - 1.0));
                grpc = (grpc * GRPC_MULTIPLIER).min(GRPC_MAX_S);
                d
            }
        };
        out.push(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn many(kind: JitterKind, base: f64, cap: f64, n: usize) -> Vec<Vec<f64>> {
        (0..2000)
            .map(|s| delays(kind, base, cap, n, &mut SimRng::new(s)))
            .collect()
    }

    /// Full jitter: the n-th delay is uniform on [0, min(cap, base · 2ⁿ)] — its mean
    /// half the ceiling, never above it.
    #[test]
    fn full_jitter_is_uniform_below_the_capped_exponential() {
        let runs = many(JitterKind::Full, 0.25, 30.0, 12);
        for n in 0..12 {
            let ceiling = (0.25 * 2f64.powi(n as i32)).min(30.0);
            let xs: Vec<f64> = runs.iter().map(|r| r[n]).collect();
            assert!(xs.iter().all(|&x| (0.0..=ceiling).contains(&x)), "n={n}");
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            assert!(
                (mean - ceiling / 2.0).abs() < 0.05 * ceiling,
                "n={n}: mean {mean} against {}",
                ceiling / 2.0
            );
        }
    }

    /// Decorrelated jitter: each delay is in [base, min(cap, 3 × the previous)].
    #[test]
    fn decorrelated_jitter_stays_between_base_and_three_times_the_last() {
        for r in many(JitterKind::Decorrelated, 0.25, 30.0, 20) {
            let mut previous: f64 = 0.25;
            for &d in &r {
                assert!(d >= 0.25 - 1e-12 && d <= (previous * 3.0).min(30.0) + 1e-12);
                previous = d;
            }
        }
    }

    /// gRPC: the n-th wait is 1.6ⁿ s (capped at 120 s) within ±20 %.
    #[test]
    fn grpc_backoff_grows_by_1_6_to_120_s_within_twenty_percent() {
        let runs = many(JitterKind::Grpc, 0.0, 0.0, 15);
        for n in 0..15 {
            let centre = (1.6f64.powi(n as i32)).min(120.0);
            let xs: Vec<f64> = runs.iter().map(|r| r[n]).collect();
            let (lo, hi) = xs
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            assert!(
                lo >= 0.8 * centre - 1e-9 && hi <= 1.2 * centre + 1e-9,
                "n={n}"
            );
            assert!(
                lo < 0.82 * centre && hi > 1.18 * centre,
                "the whole ±20 % is used"
            );
        }
    }

    /// The supervisor's own draws (core's `restart_backoff_jitter`) follow the published
    /// rules: fed the same uniforms, core's delays are the publication's, to the
    /// millisecond (full and decorrelated with servery's 0.25 s and 30 s; gRPC's ±20 %
    /// around servery's doubling).
    #[test]
    fn supervisor_delays_follow_the_published_rules() {
        use servery_core::config::{RawConfig, RestartJitter as Core};
        use servery_core::supervisor::{RestartDecision, RestartWindow, SlotHistory};
        use servery_core::time::Instant;
        for (kind, core_kind) in [
            (JitterKind::Full, Core::Full),
            (JitterKind::Decorrelated, Core::Decorrelated),
        ] {
            for seed in 0..50 {
                let mut raw = RawConfig::default();
                raw.recovery.restart_backoff_jitter = core_kind;
                raw.recovery.worker_restart_limit = 100;
                let valid = raw.validate().unwrap_or_else(|e| panic!("{e}"));
                let policy = valid.recovery();
                let published = delays(kind, 0.25, 30.0, 12, &mut SimRng::new(seed));
                let mut rng = SimRng::new(seed);
                let (mut w, mut slot) = (RestartWindow::default(), SlotHistory::default());
                for (i, want) in published.iter().enumerate() {
                    let at = Instant::ZERO + core::time::Duration::from_secs(3600 * i as u64);
                    let d = w.decide_with(at, policy, &mut slot, false, &mut || rng.unit());
                    let RestartDecision::Replace { after } = d else {
                        panic!("{kind:?} {i}: {d:?}")
                    };
                    assert!(
                        (after.as_secs_f64() - want).abs() < 1e-6,
                        "{kind:?} seed {seed} restart {i}: the supervisor waits {after:?}, the rule {want} s"
                    );
                }
            }
        }
    }
}
