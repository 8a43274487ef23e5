//! A worker's request counters (for the parent's `/metrics`): each answered request is
//! counted by method and status class, with its response's body length and its time to
//! the response head in its route class's histogram (decision 0081). Relaxed atomics,
//! one add each: the heartbeat reads them at its own pace and carries the totals to the
//! parent. They live in the worker's scoreboard, memory the parent shares with it
//! (decision 0083), so the parent reads the last of them when the worker dies, however
//! it dies: the counts since its last heartbeat are not lost with it.

use std::array::from_fn;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use servery_core::request_stats::{
    DURATION_BUCKETS, METHODS, ROUTE_CLASSES, RequestStats, RouteClass, STATUS_CLASSES,
    STORAGE_FAULTS, UNHEARD, duration_bucket, status_class,
};
use servery_core::supervisor::FinalCounts;

use crate::os::SharedCounters;

/// Where each counter is in the scoreboard: requests by method and status class, bytes,
/// the duration buckets by route class, their sums, connections closed unheard, the
/// access log's lines produced and dropped by the worker itself, then the writes the
/// file system refused.
const REQUESTS: usize = 0;
const BYTES_SENT: usize = REQUESTS + METHODS.len() * STATUS_CLASSES.len();
const DURATIONS: usize = BYTES_SENT + 1;
const DURATION_SUMS: usize = DURATIONS + ROUTE_CLASSES * DURATION_BUCKETS;
const CLOSED_UNHEARD: usize = DURATION_SUMS + ROUTE_CLASSES;
const LOG_LINES: usize = CLOSED_UNHEARD + UNHEARD.len();
const LOG_DROPPED: usize = LOG_LINES + 1;
const STORAGE: usize = LOG_DROPPED + 1;
/// How many counters a scoreboard holds (227: 1,816 bytes, one page).
pub const SCOREBOARD_COUNTERS: usize = STORAGE + STORAGE_FAULTS.len();

/// A worker's counters: in the scoreboard the parent shares with it, or in its own memory
/// when it was given none.
#[derive(Debug)]
enum Counters {
    Shared(SharedCounters),
    Own(Box<[AtomicU64]>),
}

#[derive(Debug)]
pub struct RequestMeter {
    counters: Counters,
}

impl Default for RequestMeter {
    fn default() -> Self {
        RequestMeter {
            counters: Counters::Own(
                (0..SCOREBOARD_COUNTERS)
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            ),
        }
    }
}

impl RequestMeter {
    /// A new scoreboard for a worker about to start, and the descriptor to pass it.
    pub fn create_scoreboard() -> std::io::Result<(RequestMeter, std::os::fd::OwnedFd)> {
        let (shared, fd) = SharedCounters::create("servery-scoreboard", SCOREBOARD_COUNTERS)?;
        Ok((
            RequestMeter {
                counters: Counters::Shared(shared),
            },
            fd,
        ))
    }

    /// The meter of a worker, kept in the scoreboard its parent passed.
    pub fn in_scoreboard(fd: &std::os::fd::OwnedFd) -> std::io::Result<RequestMeter> {
        Ok(RequestMeter {
            counters: Counters::Shared(SharedCounters::open(fd, SCOREBOARD_COUNTERS)?),
        })
    }

    fn at(&self, index: usize) -> &AtomicU64 {
        match &self.counters {
            Counters::Shared(shared) => &shared.counters()[index],
            Counters::Own(own) => &own[index],
        }
    }

    /// Count one answered request (`method` is a [`METHODS`] index).
    pub fn record(
        &self,
        method: usize,
        route: RouteClass,
        status: u16,
        bytes: u64,
        took: Duration,
    ) {
        if method < METHODS.len() {
            self.at(REQUESTS + method * STATUS_CLASSES.len() + status_class(status))
                .fetch_add(1, Relaxed);
        }
        if bytes > 0 {
            self.at(BYTES_SENT).fetch_add(bytes, Relaxed);
        }
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.at(DURATIONS + route.index() * DURATION_BUCKETS + duration_bucket(micros))
            .fetch_add(1, Relaxed);
        self.at(DURATION_SUMS + route.index())
            .fetch_add(micros, Relaxed);
    }

    /// Count a connection closed before it brought a request (`reason` is an
    /// [`UNHEARD`] index).
    pub fn closed_unheard(&self, reason: usize) {
        if reason < UNHEARD.len() {
            self.at(CLOSED_UNHEARD + reason).fetch_add(1, Relaxed);
        }
    }

    /// Count a write the file system refused (`kind` is a [`STORAGE_FAULTS`] index).
    pub fn storage_fault(&self, kind: usize) {
        if kind < STORAGE_FAULTS.len() {
            self.at(STORAGE + kind).fetch_add(1, Relaxed);
        }
    }

    /// An access-log line was put in the worker's buffer to send (so the parent can tell,
    /// when the worker is gone, how many never arrived).
    pub fn log_line_produced(&self) {
        self.at(LOG_LINES).fetch_add(1, Relaxed);
    }

    /// An access-log line was dropped by the worker itself (`--access-log-overflow drop`).
    pub fn log_line_dropped(&self) {
        self.at(LOG_DROPPED).fetch_add(1, Relaxed);
    }

    /// The totals so far.
    pub fn snapshot(&self) -> RequestStats {
        let n = |i| self.at(i).load(Relaxed);
        RequestStats {
            requests: from_fn(|m| from_fn(|c| n(REQUESTS + m * STATUS_CLASSES.len() + c))),
            bytes_sent: n(BYTES_SENT),
            duration_buckets: from_fn(|c| from_fn(|b| n(DURATIONS + c * DURATION_BUCKETS + b))),
            duration_sum_us: from_fn(|c| n(DURATION_SUMS + c)),
            closed_unheard: from_fn(|i| n(CLOSED_UNHEARD + i)),
            storage_faults: from_fn(|i| n(STORAGE + i)),
        }
    }

    /// Everything counted, the access log's lines included: what the parent reads from a
    /// worker's scoreboard once the worker is gone.
    pub fn final_counts(&self) -> FinalCounts {
        FinalCounts {
            stats: self.snapshot(),
            log_lines: self.at(LOG_LINES).load(Relaxed),
            log_dropped: self.at(LOG_DROPPED).load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servery_core::request_stats::method_index;

    #[test]
    fn a_snapshot_holds_what_was_recorded() {
        let meter = RequestMeter::default();
        meter.record(
            method_index("GET"),
            RouteClass::Static,
            200,
            1024,
            Duration::from_micros(300),
        );
        meter.record(
            method_index("HEAD"),
            RouteClass::Listing,
            404,
            0,
            Duration::from_millis(3),
        );
        let s = meter.snapshot();
        assert_eq!(s.total(), 2);
        assert_eq!(s.requests[method_index("GET")][1], 1);
        assert_eq!(s.requests[method_index("HEAD")][3], 1);
        assert_eq!(s.bytes_sent, 1024);
        assert_eq!(s.duration_sum_us[RouteClass::Static.index()], 300);
        assert_eq!(s.duration_sum_us[RouteClass::Listing.index()], 3000);
        assert_eq!(s.duration_count(RouteClass::Static), 1);
        assert_eq!(s.duration_count(RouteClass::Listing), 1);
        meter.closed_unheard(1);
        assert_eq!(meter.snapshot().closed_unheard, [0, 1, 0]);
    }

    #[test]
    fn the_parent_reads_what_the_worker_counted_in_its_scoreboard() {
        let (parent, fd) = RequestMeter::create_scoreboard().expect("scoreboard");
        let worker = RequestMeter::in_scoreboard(&fd).expect("mapped");
        for class in RouteClass::ALL {
            worker.record(
                method_index("other"),
                class,
                599,
                1,
                Duration::from_secs(60),
            );
        }
        worker.record(
            method_index("GET"),
            RouteClass::Static,
            200,
            10,
            Duration::from_micros(1),
        );
        worker.closed_unheard(2);
        worker.storage_fault(STORAGE_FAULTS.len() - 1);
        worker.log_line_produced();
        worker.log_line_produced();
        worker.log_line_dropped();
        drop(worker);
        let last = parent.final_counts();
        // The last counter of every table, so a layout that overlaps or runs short shows.
        assert_eq!(
            last.stats.requests[METHODS.len() - 1][4],
            ROUTE_CLASSES as u64
        );
        assert_eq!(last.stats.requests[0][1], 1);
        assert_eq!(last.stats.bytes_sent, ROUTE_CLASSES as u64 + 10);
        assert_eq!(
            last.stats.duration_buckets[ROUTE_CLASSES - 1][DURATION_BUCKETS - 1],
            1
        );
        assert_eq!(last.stats.duration_sum_us[ROUTE_CLASSES - 1], 60_000_000);
        assert_eq!(last.stats.closed_unheard, [0, 0, 1]);
        assert_eq!(last.stats.storage_faults, [0, 1]);
        assert_eq!((last.log_lines, last.log_dropped), (2, 1));
        assert_eq!(last.stats.total(), ROUTE_CLASSES as u64 + 1);
    }
}
