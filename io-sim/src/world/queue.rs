//! The event queue: events in (time, sequence) order, the sequence being the order in
//! which they were scheduled, so two events at one instant happen as they were planned.
//!
//! Each event waits with its key — the time, then the sequence number — in one vector
//! kept sorted, latest first, so the next event is taken from the end. A run has a few
//! dozen events pending at most (a client, a request or two per worker, each worker's
//! timer, the planned faults), and most new events are due within milliseconds, so their
//! place is a few steps from the end: cheaper than a binary heap's sifting, whose every
//! level is a branch the processor cannot predict, and than keys kept apart from the
//! events, which cost a slot to fill, to empty and to hand back per event.

use servery_core::Instant;

use super::SimEvent;

/// When an event is due, then its sequence number: ordered as (time, sequence).
type Key = (u64, u64);

#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    /// Pending events, latest first: the next one is the last.
    pending: Vec<(Key, SimEvent)>,
    seq: u64,
}

impl EventQueue {
    #[inline(always)]
    pub(crate) fn push(&mut self, at: Instant, event: SimEvent) {
        self.seq += 1;
        let key = (at.as_nanos(), self.seq);
        // Most events are due soon after now, so their place is found near the end.
        let mut i = self.pending.len();
        while i > 0 && self.pending[i - 1].0 < key {
            i -= 1;
        }
        self.pending.insert(i, (key, event));
    }

    /// When the next event is due.
    pub(crate) fn peek_at(&self) -> Option<Instant> {
        self.pending
            .last()
            .map(|((at, _), _)| Instant::from_nanos(*at))
    }

    /// The next event, left in the queue.
    pub(crate) fn peek(&self) -> Option<&SimEvent> {
        self.pending.last().map(|(_, event)| event)
    }

    /// The next event, when its time is known already ([`Self::peek_at`]).
    #[inline(always)]
    pub(crate) fn pop_event(&mut self) -> Option<SimEvent> {
        self.pending.pop().map(|(_, event)| event)
    }

    /// The next event and when it is due.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<(Instant, SimEvent)> {
        let ((at, _), event) = self.pending.pop()?;
        Some((Instant::from_nanos(at), event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_leave_in_time_then_schedule_order() {
        let mut q = EventQueue::default();
        let t = |n| Instant::from_nanos(n);
        q.push(t(5), SimEvent::Fault(0));
        q.push(t(3), SimEvent::Fault(1));
        q.push(t(5), SimEvent::Fault(2));
        q.push(t(3), SimEvent::Fault(3));
        assert_eq!(q.peek_at(), Some(t(3)));
        let mut order = Vec::new();
        // An event scheduled after one has left must still come after those scheduled
        // earlier at the same time.
        let (_, first) = q.pop().expect("four pending");
        order.push(first);
        q.push(t(3), SimEvent::Fault(4));
        while let Some((_, e)) = q.pop() {
            order.push(e);
        }
        let order: Vec<usize> = order
            .into_iter()
            .map(|e| match e {
                SimEvent::Fault(i) => i,
                _ => usize::MAX,
            })
            .collect();
        assert_eq!(order, [1, 3, 4, 0, 2]);
        assert_eq!(q.peek_at(), None);
    }

    /// Random pushes and pops against the plainest queue there is: every pending event
    /// with its time and schedule number, the least of both taken each time.
    #[test]
    fn events_leave_as_a_sorted_list_would_give_them() {
        let mut rng = crate::rng::SimRng::new(7);
        for _ in 0..200 {
            let mut q = EventQueue::default();
            let mut plain: Vec<(u64, u64, usize)> = Vec::new();
            let mut scheduled = 0u64;
            for _ in 0..rng.range(1, 300) {
                if rng.chance(0.6) {
                    // Few distinct times, so that many events share one.
                    let at = rng.range(0, 40);
                    let id = scheduled as usize;
                    scheduled += 1;
                    q.push(Instant::from_nanos(at), SimEvent::Fault(id));
                    plain.push((at, scheduled, id));
                } else {
                    let expected = plain
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, (at, seq, _))| (*at, *seq))
                        .map(|(i, _)| i)
                        .map(|i| plain.remove(i));
                    let got = q.pop().map(|(at, e)| match e {
                        SimEvent::Fault(id) => (at.as_nanos(), id),
                        _ => (u64::MAX, usize::MAX),
                    });
                    assert_eq!(got, expected.map(|(at, _, id)| (at, id)));
                }
                let least = plain.iter().map(|(at, _, _)| *at).min();
                assert_eq!(q.peek_at().map(Instant::as_nanos), least);
            }
        }
    }
}
