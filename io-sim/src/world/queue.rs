//! The event queue: events in (time, sequence) order, the sequence being the order in
//! which they were scheduled, so two events at one instant happen as they were planned.
//!
//! The queue holds only a 128-bit key per event — the time, then the sequence number
//! with the index of the event's slot in its low bits — and the events wait in a slab.
//! The sequence is unique, so the slot bits never decide an order: the key orders
//! exactly as (time, sequence) would.
//!
//! The keys are kept sorted, latest first, so the next event is taken from the end. A
//! run has a few dozen events pending at most (a client, a request or two per worker,
//! each worker's timer, the planned faults), and most new events are due within
//! milliseconds, so their place is a few steps from the end: cheaper than a binary
//! heap's sifting, whose every level is a branch the processor cannot predict.

use servery_core::Instant;

use super::SimEvent;

/// Bits of the key's low word that name the slot; the sequence number has the rest.
const SLOT_BITS: u32 = 24;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// Sequence numbers fit the 40 bits above the slot: a run schedules far fewer events.
const MAX_SEQ: u64 = (1 << (64 - SLOT_BITS)) - 1;

#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    /// Keys, latest first: the next event is the last.
    keys: Vec<u128>,
    slots: Vec<Option<SimEvent>>,
    free: Vec<u32>,
    seq: u64,
}

impl EventQueue {
    pub(crate) fn push(&mut self, at: Instant, event: SimEvent) {
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(event);
                u64::from(slot)
            }
            None => {
                self.slots.push(Some(event));
                (self.slots.len() - 1) as u64
            }
        };
        // Neither bound can be reached by a run that ends by its `end_by`; should one
        // be, two events would no longer keep their order, which must not pass quietly.
        assert!(
            slot <= SLOT_MASK && self.seq <= MAX_SEQ,
            "the simulation's event queue overflowed ({} pending, {} scheduled)",
            self.keys.len(),
            self.seq
        );
        let key = u128::from(at.as_nanos()) << 64 | u128::from(self.seq << SLOT_BITS | slot);
        // Most events are due soon after now, so their place is found near the end.
        let mut i = self.keys.len();
        while i > 0 && self.keys[i - 1] < key {
            i -= 1;
        }
        self.keys.insert(i, key);
    }

    /// When the next event is due.
    pub(crate) fn peek_at(&self) -> Option<Instant> {
        self.keys
            .last()
            .map(|key| Instant::from_nanos((key >> 64) as u64))
    }

    /// The next event and when it is due.
    pub(crate) fn pop(&mut self) -> Option<(Instant, SimEvent)> {
        let key = self.keys.pop()?;
        let at = Instant::from_nanos((key >> 64) as u64);
        let slot = (key as u64 & SLOT_MASK) as u32;
        self.free.push(slot);
        let event = self.slots[slot as usize].take()?;
        Some((at, event))
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
        // Freed slots are reused by later events, which must still come after those
        // scheduled earlier at the same time.
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
