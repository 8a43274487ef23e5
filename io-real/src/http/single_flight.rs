//! Coalescing of same-key work inside one worker ("single flight").
//!
//! The first caller for a key becomes the *leader* and does the work; callers that arrive
//! while it runs become *followers* and wait for the leader's result instead of repeating
//! the work. Nothing is cached: the entry is removed the moment the leader publishes, so
//! the structure retains zero entries once no flight is running, and a later caller starts
//! fresh (the spec budgets digest flights, not a digest cache).
//!
//! If the leader is dropped before publishing (its request was cancelled), the flight is
//! marked abandoned and removed, and each follower retries: one of them becomes the new
//! leader. Work is therefore never lost to a cancelled request, and no follower waits on a
//! flight that can no longer finish.
//!
//! The structure is runtime-agnostic (a plain future and `Waker`s, no tokio) and takes its
//! locks from its parent's `sync` module, so loom can check it exhaustively: the test
//! `io-real/tests/single_flight_loom.rs` compiles this file again with loom's locks in
//! that place (`cargo test -p servery --test single_flight_loom`).
//!
//! Lock order: the map lock is never held while taking a flight's lock, and vice versa.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::sync::{Arc, Mutex, MutexGuard};

/// Coalesces concurrent work per key. Share it (it is `Sync`); see the module docs.
pub struct SingleFlight<K, V> {
    flights: Mutex<HashMap<K, Arc<Flight<V>>>>,
}

struct Flight<V> {
    state: Mutex<State<V>>,
}

enum State<V> {
    Running(Vec<Waker>),
    Done(V),
    Abandoned,
}

/// What [`SingleFlight::join`] made of the caller.
pub enum Join<'a, K: Eq + Hash, V> {
    /// Do the work, then [`Leader::complete`].
    Leader(Leader<'a, K, V>),
    /// Await the leader's result; `None` means the leader gave up and the caller should
    /// join again.
    Follower(Follower<V>),
}

impl<K, V> fmt::Debug for SingleFlight<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SingleFlight")
            .field("in_flight", &lock(&self.flights).len())
            .finish()
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Default for SingleFlight<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Eq + Hash + Clone, V: Clone> SingleFlight<K, V> {
    /// An empty structure.
    pub fn new() -> Self {
        Self {
            flights: Mutex::new(HashMap::new()),
        }
    }

    /// Flights running now; zero whenever no work is in progress.
    pub fn in_flight(&self) -> usize {
        lock(&self.flights).len()
    }

    /// Becomes the leader for `key`, or a follower of the flight already running for it.
    pub fn join(&self, key: K) -> Join<'_, K, V> {
        let mut flights = lock(&self.flights);
        if let Some(flight) = flights.get(&key) {
            return Join::Follower(Follower {
                flight: Arc::clone(flight),
            });
        }
        let flight = Arc::new(Flight {
            state: Mutex::new(State::Running(Vec::new())),
        });
        flights.insert(key.clone(), Arc::clone(&flight));
        Join::Leader(Leader {
            owner: self,
            key,
            flight,
            published: false,
        })
    }

    /// Runs `work` for `key` unless a flight for it is already running, in which case its
    /// result is shared. `work` is called at most once per call of `run`.
    pub async fn run<F, Fut>(&self, key: K, work: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        let leader = loop {
            match self.join(key.clone()) {
                Join::Leader(leader) => break leader,
                Join::Follower(follower) => {
                    if let Some(value) = follower.await {
                        return value;
                    }
                }
            }
        };
        leader.complete(work().await)
    }
}

impl<K: Eq + Hash, V> SingleFlight<K, V> {
    /// Removes `key` if it still maps to `flight` (it always does: only the leader of a
    /// flight removes it, and a key maps to at most one flight at a time; the check keeps
    /// that true by construction rather than by argument).
    fn remove(&self, key: &K, flight: &Arc<Flight<V>>) {
        let mut flights = lock(&self.flights);
        if flights.get(key).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            flights.remove(key);
        }
    }
}

/// The caller that does the work for a key. Dropping it without completing abandons the
/// flight (followers then retry).
pub struct Leader<'a, K: Eq + Hash, V> {
    owner: &'a SingleFlight<K, V>,
    key: K,
    flight: Arc<Flight<V>>,
    published: bool,
}

impl<K: Eq + Hash + Clone, V: Clone> Leader<'_, K, V> {
    /// Publishes the result to every follower, ends the flight, and returns the result.
    pub fn complete(mut self, value: V) -> V {
        self.finish(State::Done(value.clone()));
        value
    }
}

impl<K: Eq + Hash, V> Leader<'_, K, V> {
    fn finish(&mut self, outcome: State<V>) {
        self.published = true;
        // The order of "publish" and "remove from the map" differs by outcome:
        // - a result is published first, so a caller that still finds the flight in the
        //   map gets it at once instead of starting the work again;
        // - an abandonment is published last, so a follower that sees it and joins again
        //   finds the key free and becomes the leader. The other order lets it find the
        //   dead flight again and spin until this thread removes it (loom found that).
        let abandoned = matches!(outcome, State::Abandoned);
        if abandoned {
            self.owner.remove(&self.key, &self.flight);
        }
        let waiting = match std::mem::replace(&mut *lock(&self.flight.state), outcome) {
            State::Running(wakers) => wakers,
            State::Done(_) | State::Abandoned => Vec::new(),
        };
        if !abandoned {
            self.owner.remove(&self.key, &self.flight);
        }
        for waker in waiting {
            waker.wake();
        }
    }
}

impl<K: Eq + Hash, V> Drop for Leader<'_, K, V> {
    fn drop(&mut self) {
        if !self.published {
            self.finish(State::Abandoned);
        }
    }
}

impl<K: Eq + Hash, V> fmt::Debug for Leader<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("published", &self.published)
            .finish_non_exhaustive()
    }
}

/// Waits for a flight's result.
pub struct Follower<V> {
    flight: Arc<Flight<V>>,
}

impl<V> fmt::Debug for Follower<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Follower").finish_non_exhaustive()
    }
}

impl<V: Clone> Future for Follower<V> {
    type Output = Option<V>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<V>> {
        // Checking and registering under one lock: the leader cannot publish in between,
        // so a wake-up is never lost.
        let mut state = lock(&self.flight.state);
        match &mut *state {
            State::Done(value) => Poll::Ready(Some(value.clone())),
            State::Abandoned => Poll::Ready(None),
            State::Running(wakers) => {
                if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

impl<K, V> fmt::Debug for Join<'_, K, V>
where
    K: Eq + Hash,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Join::Leader(_) => f.write_str("Leader"),
            Join::Follower(_) => f.write_str("Follower"),
        }
    }
}

/// Locks, ignoring poison: every critical section here leaves the data consistent even if
/// a waker panics after it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
        Pin::new(f).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn followers_share_the_leaders_result_and_nothing_is_retained() {
        let sf = SingleFlight::<&str, u32>::new();
        let Join::Leader(leader) = sf.join("k") else {
            panic!("first caller leads");
        };
        let Join::Follower(mut follower) = sf.join("k") else {
            panic!("second caller follows");
        };
        assert!(
            matches!(sf.join("other"), Join::Leader(_)),
            "keys are independent"
        );
        let counter = std::sync::Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(std::sync::Arc::clone(&counter));
        assert_eq!(poll(&mut follower, &waker), Poll::Pending);
        assert_eq!(poll(&mut follower, &waker), Poll::Pending);
        assert_eq!(sf.in_flight(), 1);
        assert_eq!(leader.complete(7), 7);
        assert_eq!(counter.0.load(Ordering::SeqCst), 1, "woken once");
        assert_eq!(poll(&mut follower, &waker), Poll::Ready(Some(7)));
        assert_eq!(sf.in_flight(), 0, "no entry retained");
        assert!(matches!(sf.join("k"), Join::Leader(_)), "no caching");
    }

    #[test]
    fn an_abandoned_flight_releases_its_followers() {
        let sf = SingleFlight::<u8, u32>::new();
        let leader = sf.join(1);
        let Join::Follower(mut follower) = sf.join(1) else {
            panic!("follows");
        };
        drop(leader);
        assert_eq!(sf.in_flight(), 0);
        let waker = Waker::noop();
        assert_eq!(poll(&mut follower, waker), Poll::Ready(None));
    }

    #[test]
    fn run_retries_after_abandonment() {
        let sf = SingleFlight::<u8, u32>::new();
        let calls = AtomicUsize::new(0);
        let leader = sf.join(1);
        let mut run = Box::pin(sf.run(1, || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { 9 }
        }));
        let waker = Waker::noop();
        assert_eq!(
            run.as_mut().poll(&mut Context::from_waker(waker)),
            Poll::Pending
        );
        drop(leader);
        assert_eq!(
            run.as_mut().poll(&mut Context::from_waker(waker)),
            Poll::Ready(9)
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(sf.in_flight(), 0);
    }
}
