//! Control channels that delay what they carry ([`crate::Fault::ChannelDelay`]).
//!
//! A Unix stream socket never reorders what one writer put in it, and the simulated
//! channels keep that: each delivery is due no earlier than the one before it on its
//! channel (the `up_clock` and `down_clock` of each process). What the kernel does not
//! promise is any order between channels, nor when a busy parent next looks: while the
//! fault lasts each write is held up to `max` more than the usual latency, drawn per
//! write, and deliveries to the parent land on the parent's next poll (every quarter of
//! `max`, at least every 2 ms), where one look finds everything that arrived since — two workers'
//! frames in either order, one worker's last frames with another's exit.
//!
//! The extra delays come from a random stream of their own: a run without the fault
//! draws exactly what it drew before the fault existed.

use super::*;

/// How often, at least, a parent busy under delayed channels looks at them; at most a
/// quarter of the fault's `max`.
const MIN_POLL_TICK: Duration = Duration::from_millis(2);

pub(crate) struct ChannelDelays {
    rng: SimRng,
    /// The fault holds writes made before this instant.
    until: Instant,
    /// The longest extra delay of the current fault.
    max: Duration,
    /// How often the parent looks while the fault lasts.
    tick: Duration,
}

impl ChannelDelays {
    pub(crate) fn new(seed: u64) -> Self {
        ChannelDelays {
            // Another stream from the same seed, apart from the looks' one.
            rng: SimRng::new(seed ^ 0x6a09_e667_f3bc_c909),
            until: Instant::ZERO,
            max: Duration::ZERO,
            tick: MIN_POLL_TICK,
        }
    }

    pub(crate) fn start(&mut self, now: Instant, duration: Duration, max: Duration) {
        self.until = self.until.max(now + duration);
        self.max = self.max.max(max);
        self.tick = MIN_POLL_TICK.max(self.max / 2);
    }

    pub(crate) fn active(&self, now: Instant) -> bool {
        now < self.until
    }

    /// Whether deliveries the fault delayed may still be arriving.
    fn gathering(&self, now: Instant) -> bool {
        self.until > Instant::ZERO && now < self.until + self.max + self.tick
    }

    /// The extra delay of a write made now: none (and no draw) outside the fault.
    fn extra(&mut self, now: Instant) -> Duration {
        if !self.active(now) {
            return Duration::ZERO;
        }
        Duration::from_micros(self.rng.range(0, self.max.as_micros() as u64))
    }

    /// When a delivery due at `at` is found by the parent: at its next poll while the
    /// fault lasts, at once otherwise.
    fn found_at(&self, now: Instant, at: Instant) -> Instant {
        if !self.active(now) {
            return at;
        }
        let tick = self.tick.as_nanos() as u64;
        Instant::from_nanos(at.as_nanos().div_ceil(tick) * tick)
    }
}

impl SimWorld {
    /// When a write `worker` makes now reaches the parent, `after` the earliest its
    /// channel allows: the usual latency `lat`, the fault's extra delay, the next poll.
    pub(super) fn up_arrival(
        &mut self,
        worker: WorkerId,
        lat: Duration,
        after: Instant,
    ) -> Instant {
        let extra = self.delays.extra(self.now);
        let at = self
            .delays
            .found_at(self.now, (self.now + lat + extra).max(after));
        if self.delays.active(self.now) && self.overtakes(worker, at) {
            self.out.coverage.insert(labels::DELAYED_FRAME_OVERTAKEN);
        }
        at
    }

    /// When a write the parent makes now reaches a worker, `after` the earliest its
    /// channel allows.
    pub(super) fn down_arrival(&mut self, lat: Duration, after: Instant) -> Instant {
        let extra = self.delays.extra(self.now);
        (self.now + lat + extra).max(after)
    }

    /// When the reap of a worker whose channel's EOF arrives at `eof_at` is found:
    /// `gap` after it, later still under the fault, never before the EOF.
    pub(super) fn reap_arrival(
        &mut self,
        worker: WorkerId,
        eof_at: Instant,
        gap: Duration,
    ) -> Instant {
        let extra = self.delays.extra(self.now);
        let at = self.delays.found_at(self.now, eof_at + gap + extra);
        if self.delays.active(self.now) && self.overtakes(worker, at) {
            self.out
                .coverage
                .insert(labels::EXIT_OVERTOOK_DELAYED_FRAME);
        }
        at
    }

    /// Whether something arriving at `at` from `worker` comes before a frame another
    /// worker wrote earlier and is still on its way.
    fn overtakes(&self, worker: WorkerId, at: Instant) -> bool {
        self.procs
            .values()
            .any(|p| p.id != worker && p.up_clock > self.now && p.up_clock > at)
    }

    /// While delayed deliveries may be arriving: every other delivery to the parent due
    /// at this instant, taken into the same look.
    pub(super) fn gather_arrivals(&mut self) {
        if !self.delays.gathering(self.now) {
            return;
        }
        let mut gathered = false;
        while self.queue.peek_at() == Some(self.now)
            && self.queue.peek().is_some_and(|e| {
                matches!(
                    e,
                    SimEvent::ToParent { .. }
                        | SimEvent::ToParentEof { .. }
                        | SimEvent::Reaped { .. }
                )
            })
        {
            let Some(event) = self.queue.pop_event() else {
                break;
            };
            // Deliveries to the parent never wake it themselves: they fill its inbox.
            let _ = self.step(event);
            gathered = true;
        }
        if gathered && self.inbox_sources() > 1 {
            self.out.coverage.insert(labels::DELAYED_LOOK_GATHERED);
        }
    }

    /// How many workers the inbox holds news of.
    fn inbox_sources(&self) -> usize {
        let mut workers: Vec<u64> = self
            .inbox
            .iter()
            .filter_map(|e| match e {
                Event::Message { worker, .. }
                | Event::ChannelClosed { worker }
                | Event::ProtocolViolation { worker, .. }
                | Event::FinalCounts { worker, .. }
                | Event::Exited { worker, .. } => Some(worker.0),
                _ => None,
            })
            .collect();
        workers.sort_unstable();
        workers.dedup();
        workers.len()
    }
}
