//! What one look of the simulated parent finds: everything the last step put in its
//! inbox, handed over at once ([`Wakeup::Found`]) with its sources interleaved at random,
//! as a poll lists ready descriptors in any order. Each source keeps its own order: a
//! worker's channel (FIFO), the reaper's news of a worker (final counts, then the exit),
//! and everything else the host reports.
//!
//! The interleaving draws from a stream of its own, so the plan's draws (and every
//! scenario's pinned path) stay what they were.

use super::*;
use crate::rng::SimRng;

/// Where an event comes from, for the interleaving.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Channel(u64),
    Reaper(u64),
    Host,
}

fn source(event: &Event) -> Source {
    match event {
        Event::Message { worker, .. }
        | Event::ChannelClosed { worker }
        | Event::ProtocolViolation { worker, .. } => Source::Channel(worker.0),
        Event::FinalCounts { worker, .. } | Event::Exited { worker, .. } => {
            Source::Reaper(worker.0)
        }
        _ => Source::Host,
    }
}

pub(crate) struct Looks {
    rng: SimRng,
    /// Looks that found events of more than one source.
    pub(crate) mixed: u64,
}

impl Looks {
    pub(crate) fn new(seed: u64) -> Self {
        Looks {
            // Another stream from the same seed: a fixed odd constant apart.
            rng: SimRng::new(seed ^ 0x9e37_79b9_7f4a_7c15),
            mixed: 0,
        }
    }

    /// `found` with its sources interleaved at random, each source's order kept.
    pub(crate) fn interleave(&mut self, found: Vec<Event>) -> Vec<Event> {
        let mut by_source: Vec<(Source, VecDeque<Event>)> = Vec::new();
        for event in found {
            let s = source(&event);
            match by_source.iter_mut().find(|(k, _)| *k == s) {
                Some((_, queue)) => queue.push_back(event),
                None => by_source.push((s, VecDeque::from([event]))),
            }
        }
        if by_source.len() > 1 {
            self.mixed += 1;
        }
        let mut order = Vec::new();
        while !by_source.is_empty() {
            let i = self.rng.range(0, by_source.len() as u64 - 1) as usize;
            if let Some(event) = by_source[i].1.pop_front() {
                order.push(event);
            }
            if by_source[i].1.is_empty() {
                by_source.swap_remove(i);
            }
        }
        order
    }
}

impl SimWorld {
    /// Everything in the inbox as one look: the parent's reads recorded in the order the
    /// parent takes them in, the events handed over in the order found.
    pub(super) fn one_look(&mut self) -> Option<Wakeup> {
        if self.inbox.is_empty() {
            return None;
        }
        self.oracle.intake.look_begins();
        if self.inbox.len() == 1 {
            let event = self.inbox.pop_front()?;
            self.parent_reads(&event);
            return Some(Wakeup::Event(self.now, event));
        }
        let found: Vec<Event> = self.inbox.drain(..).collect();
        if ready_with_another_end(&found) {
            self.out.coverage.insert(labels::READY_AND_END_IN_ONE_LOOK);
        }
        let found = self.looks.interleave(found);
        let mut read: Vec<&Event> = found.iter().collect();
        read.sort_by_key(|e| servery_core::parent::intake_rank(e));
        for event in read {
            self.parent_reads(event);
        }
        Some(Wakeup::Found(self.now, found))
    }
}

/// Whether `found` holds a READY and the end of a worker other than its sender.
fn ready_with_another_end(found: &[Event]) -> bool {
    let ended = |w: WorkerId| {
        found.iter().any(|e| {
            matches!(e, Event::ChannelClosed { worker } | Event::Exited { worker, .. } if *worker != w)
        })
    };
    found.iter().any(
        |e| matches!(e, Event::Message { worker, message: WorkerMessage::Ready } if ended(*worker)),
    )
}
