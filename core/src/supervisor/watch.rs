//! Time the parent did not run (decision 0017): a frozen machine (a VM pause, a host
//! suspend that the monotonic clock still counts), a stopped or starved parent. Nobody
//! could beat or be heard meanwhile, so that time counts towards no deadline that judges
//! a worker's progress; and the parent never sleeps so long that such a gap could hide.

use core::time::Duration;

use super::*;

impl Supervisor {
    /// The parent woke `late` after the deadline it had asked for, at `now`: move every
    /// deadline that judges a worker (heartbeat silence, start, drain, TERM → KILL) on by
    /// that much. A worker's silence is then the time the parent ran without hearing it,
    /// so a hung worker is still caught once the parent has run `heartbeat_timeout`
    /// without a beat from it; the parent's own waits (backoff, recycle retries, age) are
    /// left as they are and simply fire late.
    pub fn not_running(&mut self, now: Instant, late: Duration) {
        if late.is_zero() {
            return;
        }
        self.due_floor = None;
        self.not_running += late;
        for w in self.workers.values_mut() {
            w.last_beat = (w.last_beat + late).min(now);
            w.not_running += late;
            if let Some(t) = w.drain_deadline.as_mut() {
                *t = *t + late;
            }
            if !w.kill_sent
                && let Some(t) = w.kill_at.as_mut()
            {
                *t = *t + late;
            }
        }
    }

    /// The longest the parent may sleep while it has workers, so that a gap in its own
    /// running shows as lateness before it can pass for a worker's silence: half of what
    /// `heartbeat_timeout` leaves beyond one `heartbeat_interval`, for the tightest
    /// worker. A worker frozen with the parent then still has at least that long, once
    /// both run again, to be heard.
    pub fn watch_period(&self) -> Option<Duration> {
        // Halving (rounding down) keeps the order, so the least half is half the least.
        self.workers
            .least_margin()
            .map(|m| (m / 2).max(Duration::from_millis(1)))
    }

    /// Everything the parent noticed it did not run, summed (for logs and status).
    pub fn time_not_running(&self) -> Duration {
        self.not_running
    }
}
