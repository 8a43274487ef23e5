//! Workers whose clocks run fast or slow ([`crate::Fault::ClockDrift`]).
//!
//! Each simulated worker reads its own monotonic clock: the host's, unless a drift fault
//! runs it at another rate for a while. Everything the worker's lifecycle and broker
//! client are told happens at the worker's time, and their deadlines (the next beat, the
//! drain deadline, a broker reply's timeout) are due when the worker's clock reaches
//! them. Nothing a worker sends carries a time, so the parent judges it on its own clock
//! alone, which is the rule the fault tests.

use super::*;

/// Parts per million in one.
const MILLION: i128 = 1_000_000;

/// A worker's clock against the host's: `since_own + (host - since_host) × rate`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WorkerClock {
    since_host: u64,
    since_own: u64,
    /// How far its rate is off the host's, in parts per million (positive: fast).
    rate_ppm: i32,
}

impl WorkerClock {
    /// The worker's time when the host's is `host` (not before the last change of rate).
    pub(crate) fn own(&self, host: Instant) -> Instant {
        if *self == WorkerClock::default() {
            return host;
        }
        let passed = i128::from(host.as_nanos().saturating_sub(self.since_host));
        let own = passed * (MILLION + i128::from(self.rate_ppm)) / MILLION;
        Instant::from_nanos(self.since_own + own as u64)
    }

    /// The earliest host time at which the worker's clock shows `own` or later.
    pub(crate) fn host(&self, own: Instant) -> Instant {
        if *self == WorkerClock::default() {
            return own;
        }
        let ahead = i128::from(own.as_nanos().saturating_sub(self.since_own));
        let rate = MILLION + i128::from(self.rate_ppm);
        let host = (ahead * MILLION + rate - 1) / rate;
        Instant::from_nanos(self.since_host + host as u64)
    }

    pub(crate) fn rate_ppm(&self) -> i32 {
        self.rate_ppm
    }

    /// From `host` on the clock runs `rate_ppm` off the host's; what it shows now stays.
    fn set_rate(&mut self, host: Instant, rate_ppm: i32) {
        let own = self.own(host);
        *self = WorkerClock {
            since_host: host.as_nanos(),
            since_own: own.as_nanos(),
            rate_ppm,
        };
    }
}

impl SimWorld {
    /// `worker`'s clock runs `rate_ppm` off the host's for `duration`.
    pub(super) fn drift(&mut self, worker: WorkerId, rate_ppm: i32, duration: Duration) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker) else {
            return;
        };
        p.clock.set_rate(now, rate_ppm);
        // Not charged as the worker's misbehaviour: a worker on a drifting clock must fail
        // no request, and one another fault hits is charged to that one.
        self.out.injected.push(crate::outcome::Injected {
            at_ms: now.as_nanos() / 1_000_000,
            kind: FaultKind::ClockDrift,
            worker: Some(worker.0),
            targets: Vec::new(),
        });
        self.trace
            .record(&[now.as_nanos(), 102, worker.0, rate_ppm as u64], || {
                format!("{now} {worker}'s clock runs {rate_ppm} ppm off")
            });
        self.rearm_timer(worker);
        self.schedule_in(duration, SimEvent::DriftEnds { worker });
    }

    /// The drift of `worker`'s clock ends: a worker still running, not ended by the
    /// parent, was kept.
    pub(super) fn drift_ends(&mut self, worker: WorkerId) {
        let now = self.now;
        let Some(p) = self.procs.get_mut(&worker).filter(|p| p.alive) else {
            return;
        };
        p.clock.set_rate(now, 0);
        if !p.paused {
            self.out.coverage.insert(labels::DRIFTING_WORKER_KEPT);
        }
        self.rearm_timer(worker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_true_clock_shows_the_hosts_time() {
        let c = WorkerClock::default();
        let t = Instant::from_nanos(1_234_567);
        assert_eq!(c.own(t), t);
        assert_eq!(c.host(t), t);
    }

    #[test]
    fn a_drifting_clock_is_continuous_and_its_deadlines_are_never_early() {
        let mut rng = crate::rng::SimRng::new(3);
        for _ in 0..500 {
            let mut c = WorkerClock::default();
            let mut host = Instant::from_nanos(rng.range(0, 1_000_000_000));
            let before = c.own(host);
            let ppm = rng.range(0, 400_000) as i32 - 200_000;
            c.set_rate(host, ppm);
            // No jump where the rate changes.
            assert_eq!(c.own(host), before);
            host = host + Duration::from_nanos(rng.range(0, 5_000_000_000));
            let own = c.own(host);
            let expect = before.as_nanos() as f64
                + (host.as_nanos() - before.as_nanos()) as f64 * (1.0 + f64::from(ppm) / 1e6);
            assert!(
                (own.as_nanos() as f64 - expect).abs() < 2.0,
                "{own} vs {expect}"
            );
            // A deadline at the worker's time `due` fires at a host time whose worker
            // time has reached it, and not a nanosecond later than needed.
            let due = own + Duration::from_nanos(rng.range(0, 3_000_000_000));
            let fires = c.host(due);
            assert!(c.own(fires) >= due);
            assert!(c.own(Instant::from_nanos(fires.as_nanos() - 1)) < due);
        }
    }
}
