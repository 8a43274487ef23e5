//! A worker's request counters (for the parent's `/metrics`): each answered request is
//! counted by method and status class, with its response's body length and its time to
//! the response head in its route class's histogram (decision 0081). Relaxed atomics,
//! one add each: the heartbeat reads them at its own pace and carries the totals to the
//! parent.

use std::array::from_fn;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use servery_core::request_stats::{
    DURATION_BUCKETS, METHODS, ROUTE_CLASSES, RequestStats, RouteClass, STATUS_CLASSES, UNHEARD,
    duration_bucket, status_class,
};

#[derive(Debug)]
pub struct RequestMeter {
    requests: [[AtomicU64; STATUS_CLASSES.len()]; METHODS.len()],
    bytes_sent: AtomicU64,
    duration_buckets: [[AtomicU64; DURATION_BUCKETS]; ROUTE_CLASSES],
    duration_sum_us: [AtomicU64; ROUTE_CLASSES],
    closed_unheard: [AtomicU64; UNHEARD.len()],
}

impl Default for RequestMeter {
    fn default() -> Self {
        RequestMeter {
            requests: from_fn(|_| from_fn(|_| AtomicU64::new(0))),
            bytes_sent: AtomicU64::new(0),
            duration_buckets: from_fn(|_| from_fn(|_| AtomicU64::new(0))),
            duration_sum_us: from_fn(|_| AtomicU64::new(0)),
            closed_unheard: from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl RequestMeter {
    /// Count one answered request (`method` is a [`METHODS`] index).
    pub fn record(
        &self,
        method: usize,
        route: RouteClass,
        status: u16,
        bytes: u64,
        took: Duration,
    ) {
        if let Some(row) = self.requests.get(method) {
            row[status_class(status)].fetch_add(1, Relaxed);
        }
        if bytes > 0 {
            self.bytes_sent.fetch_add(bytes, Relaxed);
        }
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.duration_buckets[route.index()][duration_bucket(micros)].fetch_add(1, Relaxed);
        self.duration_sum_us[route.index()].fetch_add(micros, Relaxed);
    }

    /// Count a connection closed before it brought a request (`reason` is an
    /// [`UNHEARD`] index).
    pub fn closed_unheard(&self, reason: usize) {
        if let Some(n) = self.closed_unheard.get(reason) {
            n.fetch_add(1, Relaxed);
        }
    }

    /// The totals so far.
    pub fn snapshot(&self) -> RequestStats {
        RequestStats {
            requests: from_fn(|m| from_fn(|c| self.requests[m][c].load(Relaxed))),
            bytes_sent: self.bytes_sent.load(Relaxed),
            duration_buckets: from_fn(|c| from_fn(|b| self.duration_buckets[c][b].load(Relaxed))),
            duration_sum_us: from_fn(|c| self.duration_sum_us[c].load(Relaxed)),
            closed_unheard: from_fn(|i| self.closed_unheard[i].load(Relaxed)),
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
}
