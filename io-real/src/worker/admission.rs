//! Which connections a worker holds, so that when it is full a silent or idle one makes
//! room for a new one instead of every new client waiting behind it.
//!
//! A worker admits up to `max_connections` at once. Without this, a few hundred peers that
//! connect and say nothing hold every slot until their deadlines pass, and every real
//! client waits in the backlog meanwhile (nginx's reusable connections and Apache's
//! `mod_reqtimeout` defend the same way). When the worker is full, a new connection is
//! still accepted if some connection has no request in progress; the one to close is the
//! longest-waiting connection that has never completed a request head, or, if none, the
//! longest-idle keep-alive connection, or, if none, the one whose client has taken its
//! response slower than `min_send_rate` for longest (an HTTP/2 stream at a zero window, a
//! trickle of reads: decision 0041). Any other connection with a request in progress is
//! never chosen: its client is being served.

use std::sync::Arc;

use crate::http::Activity;

/// The connections a worker holds, each under the index its close is reported with.
#[derive(Debug, Default)]
pub(super) struct Admission {
    slots: Vec<Option<Held>>,
    free: Vec<usize>,
}

#[derive(Debug)]
struct Held {
    activity: Arc<Activity>,
    /// Asked to close. It closes unless a request starts first; one that did has kept
    /// the connection, which then counts as held again (and may be chosen again once
    /// idle).
    evicted: bool,
}

impl Held {
    /// Asked to close, and no request has started since: it is closing.
    fn closing(&self) -> bool {
        self.evicted && self.activity.eviction_stands()
    }
}

impl Admission {
    /// Records a new connection; its close is reported with the returned index.
    pub(super) fn admit(&mut self, activity: Arc<Activity>) -> usize {
        let held = Some(Held {
            activity,
            evicted: false,
        });
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = held;
                i
            }
            None => {
                self.slots.push(held);
                self.slots.len() - 1
            }
        }
    }

    /// The connection at `index` has ended.
    pub(super) fn closed(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index)
            && slot.take().is_some()
        {
            self.free.push(index);
        }
    }

    /// Connections held, including those asked to close that have not yet.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Connections asked to close that have not yet.
    pub(super) fn closing(&self) -> usize {
        self.slots.iter().flatten().filter(|h| h.closing()).count()
    }

    /// Requests in progress over every connection held (what the heartbeat reports).
    pub(super) fn requests_in_progress(&self) -> u32 {
        let sum: u64 = self
            .slots
            .iter()
            .flatten()
            .map(|h| h.activity.requests_in_progress())
            .sum();
        u32::try_from(sum).unwrap_or(u32::MAX)
    }

    /// The connection to close to make room, if any may be closed.
    fn victim(&self) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                let h = h.as_ref().filter(|h| !h.closing())?;
                // Never-requested first, then idle, then held by a slow client; the
                // longest waiting first within each.
                let key = match h.activity.idle_since() {
                    Some((since, true)) => (0, since),
                    Some((since, false)) => (1, since),
                    None => (2, h.activity.held_since()?),
                };
                Some((key, i))
            })
            .min_by_key(|(key, _)| *key)
            .map(|(_, i)| i)
    }

    /// Whether some connection could be closed to make room.
    pub(super) fn can_make_room(&self) -> bool {
        self.victim().is_some()
    }

    /// Asks the chosen connection to close; false if none may be closed.
    pub(super) fn make_room(&mut self) -> bool {
        let Some(i) = self.victim() else {
            return false;
        };
        if let Some(held) = self.slots[i].as_mut() {
            held.evicted = true;
            held.activity.evict();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::watchdog::Unanswered;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn requests_in_progress_are_summed_over_the_connections_held() {
        let t0 = Instant::now();
        let mut a = Admission::default();
        let h2 = Activity::new(t0);
        h2.request_started();
        h2.request_started();
        let h1 = Activity::new(t0);
        h1.request_started();
        let idle = Activity::new(t0);
        a.admit(Arc::clone(&h2));
        let h1_i = a.admit(Arc::clone(&h1));
        a.admit(Arc::clone(&idle));
        assert_eq!(a.requests_in_progress(), 3);
        // A response ends (its body dropped, or its request abandoned).
        drop(Unanswered::new(Arc::clone(&h2)));
        assert_eq!(a.requests_in_progress(), 2);
        a.closed(h1_i);
        assert_eq!(
            a.requests_in_progress(),
            1,
            "a closed connection's requests are not counted"
        );
    }

    #[test]
    fn the_oldest_never_requested_connection_goes_first_and_busy_ones_never() {
        let t0 = Instant::now();
        let mut a = Admission::default();
        let busy = Activity::new(t0);
        busy.request_started();
        let old_silent = Activity::new(t0 + Duration::from_secs(1));
        let new_silent = Activity::new(t0 + Duration::from_secs(2));
        let busy_i = a.admit(Arc::clone(&busy));
        let new_i = a.admit(Arc::clone(&new_silent));
        let old_i = a.admit(Arc::clone(&old_silent));
        assert_eq!(a.len(), 3);
        assert_eq!(a.victim(), Some(old_i));
        assert!(a.make_room());
        assert_eq!(a.closing(), 1);
        assert_eq!(
            a.victim(),
            Some(new_i),
            "an evicted one is not chosen again"
        );
        assert!(a.make_room());
        assert!(
            !a.can_make_room(),
            "a connection in progress is never chosen"
        );
        assert!(!a.make_room());
        a.closed(old_i);
        a.closed(new_i);
        a.closed(new_i);
        assert_eq!(a.len(), 1);
        let reused = a.admit(Activity::new(t0));
        assert!(reused == old_i || reused == new_i, "indices are reused");
        a.closed(busy_i);
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn a_response_its_client_does_not_take_is_closed_after_every_idle_connection() {
        use crate::http::watchdog::{Deadlines, Unanswered, Watch, finishing};
        let t0 = Instant::now();
        let mut a = Admission::default();
        // A response at a zero window: held once the connection's timer has looked twice.
        let stuck = Activity::new(t0);
        let mut watch = Watch::new(&stuck);
        stuck.request_started();
        let _body = finishing(
            crate::http::body::empty(),
            Unanswered::new(Arc::clone(&stuck)).answered(),
        );
        let d = Deadlines::default();
        let stuck_i = a.admit(Arc::clone(&stuck));
        assert!(!a.can_make_room(), "busy until its timer sees it held");
        for s in 1..=2 {
            stuck.verdict(&mut watch, &d, t0 + Duration::from_secs(s));
        }
        assert!(stuck.held_since().is_some());
        let idle = Activity::new(t0 + Duration::from_secs(5));
        idle.request_started();
        drop(Unanswered::new(Arc::clone(&idle)));
        let idle_i = a.admit(idle);
        assert_eq!(a.victim(), Some(idle_i), "an idle connection goes first");
        assert!(a.make_room());
        assert_eq!(a.victim(), Some(stuck_i), "then the held one");
        assert!(a.make_room());
        assert_eq!(a.closing(), 2);
    }

    #[test]
    fn a_connection_that_starts_a_request_before_closing_is_held_again() {
        let t0 = Instant::now();
        let mut a = Admission::default();
        let slow_head = Activity::new(t0);
        a.admit(Arc::clone(&slow_head));
        assert!(a.make_room());
        assert_eq!(a.closing(), 1);
        assert!(!a.can_make_room(), "asked once, it is not asked again");
        // Its head arrives before it acts on the request to close: it stays, and counts
        // as held, not as closing (else a full worker would admit one more per such
        // connection).
        slow_head.request_started();
        assert!(!slow_head.eviction_stands());
        assert_eq!(a.closing(), 0);
        assert!(!a.can_make_room(), "busy now");
    }
}
