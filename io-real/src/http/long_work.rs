//! The share of a worker's blocking threads that long work may hold at once (decision
//! 0042): folder archives (their walk, then their writer, which waits on the client while
//! it holds a thread) and recursive searches (up to two seconds each).
//!
//! Without a share, 64 archive downloads whose clients stop reading hold all 64 threads of
//! `--max-blocking-threads`, and listings, file reads of what the page cache lacks,
//! encodings and digests, which each take a thread for milliseconds, wait behind them.
//! With it, a quarter of the threads (at least one, and with two or more threads never all
//! of them) may be held by long work; more long work is refused at once with `503` and
//! `Retry-After`, so the rest of the pool always serves short work.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The share before the worker has set it (a process that never does, such as a test).
const UNSET_SHARE: usize = 16;

/// This process's share.
static WORKER: Share = Share::new(UNSET_SHARE);

/// A share: how many may hold a place, and how many do.
#[derive(Debug)]
pub struct Share {
    limit: AtomicUsize,
    held: AtomicUsize,
}

impl Share {
    const fn new(limit: usize) -> Self {
        Share {
            limit: AtomicUsize::new(limit),
            held: AtomicUsize::new(0),
        }
    }

    fn set(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    fn try_start(&'static self) -> Option<Permit> {
        let limit = self.limit.load(Ordering::Relaxed);
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < limit).then_some(held + 1)
            })
            .ok()
            .map(|_| Permit(self))
    }
}

/// The share for a pool of `threads` blocking threads.
pub fn share_of(threads: usize) -> usize {
    (threads / 4).clamp(1, threads.saturating_sub(1).max(1))
}

/// Sets the share for this process's pool of `threads` blocking threads (a worker, once,
/// as it builds its site).
pub fn configure(threads: usize) {
    WORKER.set(share_of(threads));
}

/// One piece of long work under way; its place in the share is given back on drop.
#[derive(Debug)]
pub struct Permit(&'static Share);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::Release);
    }
}

/// A place in this process's share, or `None` when it is full.
pub fn try_start() -> Option<Permit> {
    WORKER.try_start()
}

/// The error of long work refused because the share is full: `503` with `Retry-After`.
pub fn busy() -> io::Error {
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        "the blocking threads for archives and searches are all taken",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_a_quarter_and_never_the_whole_pool() {
        assert_eq!(share_of(64), 16);
        assert_eq!(share_of(8), 2);
        assert_eq!(share_of(3), 1);
        assert_eq!(share_of(2), 1);
        assert_eq!(share_of(1), 1, "one thread: nothing can be kept back");
        assert_eq!(share_of(0), 1);
    }

    #[test]
    fn places_are_refused_when_full_and_given_back_on_drop() {
        static SHARE: Share = Share::new(0);
        SHARE.set(share_of(8));
        let a = SHARE.try_start().expect("first");
        let b = SHARE.try_start().expect("second");
        assert!(SHARE.try_start().is_none(), "a quarter of 8 is 2");
        drop(a);
        let c = SHARE.try_start().expect("given back");
        drop((b, c));
        assert_eq!(SHARE.held.load(Ordering::Relaxed), 0);
    }
}
