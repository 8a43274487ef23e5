//! A worker's request counters as its heartbeats carry them: requests by method and status
//! class, response bytes and a histogram of the time to the response head for each
//! [`RouteClass`] (decision 0081). Each heartbeat
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

/// Why a write was refused by the file system under it (decision 0133): it was full (or
/// the user's quota was: 507), or it failed the write, the fsync or the rename (EIO and
/// the like: 500). The client's answer says so, and the operator sees the count:
/// `servery_storage_faults_total{kind}`.
pub const STORAGE_FAULTS: [&str; 2] = ["no_space", "io"];

/// The index in [`STORAGE_FAULTS`] of each kind.
pub mod storage_fault {
    pub const NO_SPACE: usize = 0;
    pub const IO: usize = 1;
}

/// Upper bounds of the duration histogram's buckets, in microseconds (the last bucket,
/// past these, is `+Inf`).
pub const DURATION_BOUNDS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// How many buckets the histogram has: one per bound, and `+Inf`.
pub const DURATION_BUCKETS: usize = DURATION_BOUNDS_US.len() + 1;

/// What kind of request a duration was measured on: the `class` label of
/// `servery_http_request_duration_seconds` (decision 0081). A fixed set, named as a
/// sysadmin names the parts of a server, so the label never grows with what clients ask
/// for (never a path): each class's costs differ by orders of magnitude, and one
/// histogram over all of them hides a slow class behind a fast one's volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteClass {
    /// A file from the served tree (a 304, a range, a 404, a redirect to a directory's
    /// slash and servery's own page assets included).
    Static,
    /// A directory's page, its JSON, its search or its archive download.
    Listing,
    /// WebDAV's methods but PUT and POST (PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, DELETE,
    /// LOCK, UNLOCK, OPTIONS).
    Webdav,
    /// A file's content written: PUT or POST, by the upload form or by WebDAV, and the
    /// upload handler's MKCOL.
    Upload,
    /// The hosted WSGI or ASGI application.
    App,
    /// The reverse proxy's upstream.
    Proxy,
    /// A CGI script (`--cgi`), its local redirects included.
    Cgi,
    /// Refused before any handler: a malformed or unfinished head, a host this server
    /// does not answer for, no credentials, a cross-site write, a method the site does not
    /// take.
    Refused,
    /// The rest: ACME challenges, CORS preflights, OPTIONS.
    Other,
}

/// How many [`RouteClass`]es there are.
pub const ROUTE_CLASSES: usize = RouteClass::ALL.len();

impl RouteClass {
    /// Every class, in the order of their index.
    pub const ALL: [RouteClass; 9] = [
        RouteClass::Static,
        RouteClass::Listing,
        RouteClass::Webdav,
        RouteClass::Upload,
        RouteClass::App,
        RouteClass::Proxy,
        RouteClass::Cgi,
        RouteClass::Refused,
        RouteClass::Other,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            RouteClass::Static => "static",
            RouteClass::Listing => "listing",
            RouteClass::Webdav => "webdav",
            RouteClass::Upload => "upload",
            RouteClass::App => "app",
            RouteClass::Proxy => "proxy",
            RouteClass::Cgi => "cgi",
            RouteClass::Refused => "refused",
            RouteClass::Other => "other",
        }
    }

    /// The index in [`RouteClass::ALL`] (and in the counters' tables).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The class of a request the WebDAV handler takes: a PUT or POST carries a file's
    /// content, and its time grows with the body, so it is an upload as the upload form's
    /// are; counted as `webdav` it would hide PROPFIND's costs behind a large file's.
    pub fn of_dav_method(method: &str) -> RouteClass {
        match method {
            "PUT" | "POST" => RouteClass::Upload,
            _ => RouteClass::Webdav,
        }
    }
}

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
    /// Requests by [`RouteClass`] index and the bucket of their time to the response
    /// head (not cumulative).
    pub duration_buckets: [[u64; DURATION_BUCKETS]; ROUTE_CLASSES],
    /// Sum of those times by [`RouteClass`] index, in microseconds.
    pub duration_sum_us: [u64; ROUTE_CLASSES],
    /// Connections closed before they brought a request, by [`UNHEARD`] index.
    pub closed_unheard: [u64; UNHEARD.len()],
    /// Writes the file system refused, by [`STORAGE_FAULTS`] index.
    pub storage_faults: [u64; STORAGE_FAULTS.len()],
}

impl RequestStats {
    /// Add another's counts to these (saturating: a sum never wraps to a smaller one).
    pub fn add(&mut self, other: &RequestStats) {
        self.combine(other, u64::saturating_add);
    }

    /// Raise every counter to `other`'s where that is higher: the later of two sets of
    /// totals from one worker, whichever counters each has seen last.
    pub fn raise_to(&mut self, other: &RequestStats) {
        self.combine(other, u64::max);
    }

    /// Every counter of these becomes `f` of it and `other`'s.
    fn combine(&mut self, other: &RequestStats, f: fn(u64, u64) -> u64) {
        for (mine, theirs) in self.requests.iter_mut().zip(&other.requests) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                *a = f(*a, *b);
            }
        }
        self.bytes_sent = f(self.bytes_sent, other.bytes_sent);
        for (a, b) in self
            .duration_buckets
            .as_flattened_mut()
            .iter_mut()
            .zip(other.duration_buckets.as_flattened())
        {
            *a = f(*a, *b);
        }
        for (a, b) in self.duration_sum_us.iter_mut().zip(&other.duration_sum_us) {
            *a = f(*a, *b);
        }
        for (a, b) in self.closed_unheard.iter_mut().zip(&other.closed_unheard) {
            *a = f(*a, *b);
        }
        for (a, b) in self.storage_faults.iter_mut().zip(&other.storage_faults) {
            *a = f(*a, *b);
        }
    }

    /// Every answered request.
    pub fn total(&self) -> u64 {
        self.requests
            .iter()
            .flatten()
            .fold(0u64, |sum, n| sum.saturating_add(*n))
    }

    /// Requests of one class whose durations were measured.
    pub fn duration_count(&self, class: RouteClass) -> u64 {
        self.duration_buckets[class.index()]
            .iter()
            .fold(0u64, |sum, n| sum.saturating_add(*n))
    }

    /// The histogram over every class (the series' total, as `sum without (class)`
    /// gives it in PromQL): its buckets and its sum in microseconds.
    pub fn durations_of_all(&self) -> ([u64; DURATION_BUCKETS], u64) {
        let mut buckets = [0u64; DURATION_BUCKETS];
        for row in &self.duration_buckets {
            for (a, b) in buckets.iter_mut().zip(row) {
                *a = a.saturating_add(*b);
            }
        }
        let sum = self
            .duration_sum_us
            .iter()
            .fold(0u64, |sum, n| sum.saturating_add(*n));
        (buckets, sum)
    }

    /// Count one answered request.
    pub fn record(
        &mut self,
        method: usize,
        route: RouteClass,
        status: u16,
        bytes: u64,
        micros: u64,
    ) {
        let class = status_class(status);
        if let Some(row) = self.requests.get_mut(method) {
            row[class] = row[class].saturating_add(1);
        }
        self.bytes_sent = self.bytes_sent.saturating_add(bytes);
        let bucket = &mut self.duration_buckets[route.index()][duration_bucket(micros)];
        *bucket = bucket.saturating_add(1);
        let sum = &mut self.duration_sum_us[route.index()];
        *sum = sum.saturating_add(micros);
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
        a.record(method_index("GET"), RouteClass::Static, 200, 10, 700);
        let mut b = RequestStats::default();
        b.record(method_index("GET"), RouteClass::Static, 404, 5, 20);
        b.record(method_index("PUT"), RouteClass::Upload, 201, 0, 20_000_000);
        a.add(&b);
        assert_eq!(a.total(), 3);
        assert_eq!(a.requests[0][1], 1);
        assert_eq!(a.requests[0][3], 1);
        assert_eq!(a.requests[3][1], 1);
        assert_eq!(a.bytes_sent, 15);
        let (all, sum) = a.durations_of_all();
        assert_eq!(sum, 20_000_720);
        assert_eq!(all[0], 1);
        assert_eq!(all[1], 1);
        assert_eq!(all[DURATION_BUCKETS - 1], 1);
        a.closed_unheard[unheard::EVICTED] = 2;
        b.closed_unheard = [1, 1, 1];
        a.add(&b);
        assert_eq!(a.closed_unheard, [1, 3, 1]);
    }

    #[test]
    fn durations_are_counted_and_summed_by_route_class() {
        let get = method_index("GET");
        let mut worker_a = RequestStats::default();
        worker_a.record(get, RouteClass::Static, 200, 1024, 300);
        worker_a.record(get, RouteClass::Static, 304, 0, 200);
        worker_a.record(get, RouteClass::Listing, 200, 9000, 40_000);
        let mut worker_b = RequestStats::default();
        worker_b.record(
            method_index("PROPFIND"),
            RouteClass::Webdav,
            207,
            500,
            3_000,
        );
        worker_b.record(get, RouteClass::Static, 200, 1024, 600);
        worker_b.record(method_index("BREW"), RouteClass::Refused, 400, 0, 10);
        let mut service = RequestStats::default();
        service.add(&worker_a);
        service.add(&worker_b);

        let counts = RouteClass::ALL.map(|c| service.duration_count(c));
        // static, listing, webdav, upload, app, proxy, cgi, refused, other
        assert_eq!(counts, [3, 1, 1, 0, 0, 0, 0, 1, 0]);
        let s = RouteClass::Static.index();
        assert_eq!(service.duration_sum_us[s], 1_100);
        assert_eq!(
            service.duration_buckets[s][0], 2,
            "300 and 200 µs: under 0.5 ms"
        );
        assert_eq!(service.duration_buckets[s][1], 1, "600 µs: under 1 ms");
        assert_eq!(service.duration_sum_us[RouteClass::Listing.index()], 40_000);
        assert_eq!(
            service.duration_buckets[RouteClass::Listing.index()][duration_bucket(40_000)],
            1
        );
        // The classes' histograms add up to the requests counted by method and status.
        let (all, sum) = service.durations_of_all();
        assert_eq!(all.iter().sum::<u64>(), service.total());
        assert_eq!(sum, 1_100 + 40_000 + 3_000 + 10);
    }

    #[test]
    fn route_classes_have_distinct_names_and_their_own_index() {
        for (i, class) in RouteClass::ALL.iter().enumerate() {
            assert_eq!(class.index(), i);
        }
        let names: std::collections::HashSet<_> = RouteClass::ALL.map(RouteClass::name).into();
        assert_eq!(names.len(), ROUTE_CLASSES);
        assert_eq!(RouteClass::of_dav_method("PUT"), RouteClass::Upload);
        assert_eq!(RouteClass::of_dav_method("POST"), RouteClass::Upload);
        assert_eq!(RouteClass::of_dav_method("PROPFIND"), RouteClass::Webdav);
        assert_eq!(RouteClass::of_dav_method("DELETE"), RouteClass::Webdav);
        assert_eq!(RouteClass::of_dav_method("MKCOL"), RouteClass::Webdav);
    }
}
