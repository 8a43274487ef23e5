//! A worker's request counters as its heartbeats carry them: requests by method and status
//! class, response bytes and a histogram of the time to the response head. Each heartbeat
//! carries the worker's totals since it started (not a difference since the last beat),
//! so a lost or late beat loses nothing that a later one does not bring; the supervisor
//! keeps each live worker's latest totals and folds a worker's last ones into the
//! service's when it is gone, so a recycled worker's requests stay counted.

/// The methods counted by name; any other is counted as `other` (the last index).
pub const METHODS: [&str; 15] = [
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "OPTIONS",
    "PATCH",
    "PROPFIND",
    "PROPPATCH",
    "MKCOL",
    "COPY",
    "MOVE",
    "LOCK",
    "UNLOCK",
    "other",
];

/// Status classes, `1xx` to `5xx`.
pub const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Why a connection was closed before it brought a request (nothing to log: it has no
/// request line; decision 0056): it sent nothing within `request_head_timeout`, a full
/// worker closed it to admit a new one, or its TLS handshake failed or timed out.
pub const UNHEARD: [&str; 3] = ["head_timeout", "evicted", "tls_handshake"];

/// The index in [`UNHEARD`] of each reason.
pub mod unheard {
    pub const HEAD_TIMEOUT: usize = 0;
    pub const EVICTED: usize = 1;
    pub const TLS_HANDSHAKE: usize = 2;
}

/// Upper bounds of the duration histogram's buckets, in microseconds (the last bucket,
/// past these, is `+Inf`).
pub const DURATION_BOUNDS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// How many buckets the histogram has: one per bound, and `+Inf`.
pub const DURATION_BUCKETS: usize = DURATION_BOUNDS_US.len() + 1;

/// The index in [`METHODS`] of a method's name.
pub fn method_index(method: &str) -> usize {
    METHODS[..METHODS.len() - 1]
        .iter()
        .position(|m| *m == method)
        .unwrap_or(METHODS.len() - 1)
}

/// The index in [`STATUS_CLASSES`] of a status code (codes above 599 count as `5xx`,
/// below 100 as `1xx`: HTTP libraries allow neither).
pub fn status_class(status: u16) -> usize {
    usize::from(status / 100)
        .saturating_sub(1)
        .min(STATUS_CLASSES.len() - 1)
}

/// The histogram bucket of a duration in microseconds.
pub fn duration_bucket(micros: u64) -> usize {
    DURATION_BOUNDS_US
        .iter()
        .position(|&bound| micros <= bound)
        .unwrap_or(DURATION_BOUNDS_US.len())
}

/// One worker's totals, or the sum of several.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Answered requests, by [`METHODS`] index and [`STATUS_CLASSES`] index.
    pub requests: [[u64; STATUS_CLASSES.len()]; METHODS.len()],
    /// Response body bytes (as the response declared them).
    pub bytes_sent: u64,
    /// Requests by the bucket of their time to the response head (not cumulative).
    pub duration_buckets: [u64; DURATION_BUCKETS],
    /// Sum of those times, in microseconds.
    pub duration_sum_us: u64,
    /// Connections closed before they brought a request, by [`UNHEARD`] index.
    pub closed_unheard: [u64; UNHEARD.len()],
}

impl RequestStats {
    /// Add another's counts to these (saturating: a sum never wraps to a smaller one).
    pub fn add(&mut self, other: &RequestStats) {
        for (mine, theirs) in self.requests.iter_mut().zip(&other.requests) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                *a = a.saturating_add(*b);
            }
        }
        self.bytes_sent = self.bytes_sent.saturating_add(other.bytes_sent);
        for (a, b) in self
            .duration_buckets
            .iter_mut()
            .zip(&other.duration_buckets)
        {
            *a = a.saturating_add(*b);
        }
        self.duration_sum_us = self.duration_sum_us.saturating_add(other.duration_sum_us);
        for (a, b) in self.closed_unheard.iter_mut().zip(&other.closed_unheard) {
            *a = a.saturating_add(*b);
        }
    }

    /// Every answered request.
    pub fn total(&self) -> u64 {
        self.requests
            .iter()
            .flatten()
            .fold(0u64, |sum, n| sum.saturating_add(*n))
    }

    /// Count one answered request.
    pub fn record(&mut self, method: usize, status: u16, bytes: u64, micros: u64) {
        let class = status_class(status);
        if let Some(row) = self.requests.get_mut(method) {
            row[class] = row[class].saturating_add(1);
        }
        self.bytes_sent = self.bytes_sent.saturating_add(bytes);
        let bucket = duration_bucket(micros);
        self.duration_buckets[bucket] = self.duration_buckets[bucket].saturating_add(1);
        self.duration_sum_us = self.duration_sum_us.saturating_add(micros);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_classes_and_buckets_are_found() {
        assert_eq!(METHODS[method_index("GET")], "GET");
        assert_eq!(METHODS[method_index("UNLOCK")], "UNLOCK");
        assert_eq!(METHODS[method_index("BREW")], "other");
        assert_eq!(STATUS_CLASSES[status_class(204)], "2xx");
        assert_eq!(STATUS_CLASSES[status_class(599)], "5xx");
        assert_eq!(STATUS_CLASSES[status_class(999)], "5xx");
        assert_eq!(duration_bucket(0), 0);
        assert_eq!(duration_bucket(500), 0);
        assert_eq!(duration_bucket(501), 1);
        assert_eq!(duration_bucket(u64::MAX), DURATION_BUCKETS - 1);
    }

    #[test]
    fn adding_sums_every_counter() {
        let mut a = RequestStats::default();
        a.record(method_index("GET"), 200, 10, 700);
        let mut b = RequestStats::default();
        b.record(method_index("GET"), 404, 5, 20);
        b.record(method_index("PUT"), 201, 0, 20_000_000);
        a.add(&b);
        assert_eq!(a.total(), 3);
        assert_eq!(a.requests[0][1], 1);
        assert_eq!(a.requests[0][3], 1);
        assert_eq!(a.requests[3][1], 1);
        assert_eq!(a.bytes_sent, 15);
        assert_eq!(a.duration_sum_us, 20_000_720);
        assert_eq!(a.duration_buckets[0], 1);
        assert_eq!(a.duration_buckets[1], 1);
        assert_eq!(a.duration_buckets[DURATION_BUCKETS - 1], 1);
        a.closed_unheard[unheard::EVICTED] = 2;
        b.closed_unheard = [1, 1, 1];
        a.add(&b);
        assert_eq!(a.closed_unheard, [1, 3, 1]);
    }
}
