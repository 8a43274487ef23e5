//! The order in which the parent takes in what one look at its host found.
//!
//! A host learns of its workers from several sources: each worker's channel, the reaper
//! (exits, and the final counts read after one), the control socket, its own services.
//! One look — a poll that finds several channels readable, a reap that reads every channel
//! before it reports the death, a parent resuming after a stall — can find several of them
//! ready at once. Within one source the order is the source's (a channel is FIFO); across
//! sources the host promises none (a poll lists ready descriptors in any order). So the
//! order across sources is decided here, once, for every driver:
//!
//! 1. **Messages first.** A message found in the same look as another worker's end was
//!    sent before that end was seen. Judging the end first judges the service on less
//!    than the parent already holds: a READY that completes the first rollout, read after
//!    another candidate's crash, turns a member's crash into a failed start.
//! 2. **Then channel ends** (EOF, a malformed frame): after every message, so a worker's
//!    own last words are taken before its end.
//! 3. **Then final counts**: what a dead worker counted is compared with what it sent
//!    (lines it produced and never sent are counted lost with it), so it comes only after
//!    everything it sent; taken earlier, lines would be counted lost and then written.
//! 4. **Exits last**: a death is judged on everything known at the time it was learned.
//!
//! Within a rank the order found is kept (a stable sort), which keeps each source's own.

use crate::supervisor::Event;

/// Where an event goes in what one look found: lower first.
pub(super) fn rank(event: &Event) -> u8 {
    match event {
        Event::ChannelClosed { .. } | Event::ProtocolViolation { .. } => 1,
        Event::FinalCounts { .. } => 2,
        Event::Exited { .. } => 3,
        _ => 0,
    }
}

/// `found` in the order the parent takes it in (see the module's rules).
pub(super) fn ordered(mut found: Vec<Event>) -> Vec<Event> {
    found.sort_by_key(rank);
    found
}
