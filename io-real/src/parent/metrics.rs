//! What `/metrics` shows: a [`Snapshot`] of the core's counters, copied on the driver
//! thread when a scrape asks for it, and its rendering in the Prometheus text format
//! (with `prometheus-client`), done on the host runtime so the driver only copies numbers.
//!
//! Every counter is the core's: the supervisor's [`Tally`] (exits, restarts, reloads, and
//! the request counters of reaped workers), the live workers' latest heartbeat totals, and
//! the broker's statistics. Nothing is counted here, so nothing is lost when a worker is
//! replaced and nothing restarts from zero but the parent itself.

use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use servery_core::broker::BrokerStats;
use servery_core::parent::Parent;
use servery_core::proto::Rejection;
use servery_core::request_stats::{
    DURATION_BOUNDS_US, METHODS, RequestStats, RouteClass, STATUS_CLASSES, STORAGE_FAULTS, UNHEARD,
};
use servery_core::supervisor::{ExitReason, Readiness, ServiceState, Tally, WorkerState};

use super::status::ServiceInfo;

/// The access log's counters, when the log is on.
#[derive(Debug, Clone, Default)]
pub struct AccessLogCounts {
    pub written: u64,
    /// Dropped under the drop policy (by the queue or by a worker's full buffer).
    pub dropped: u64,
    /// In batches the writer could not write (a full disk): not in the file, not in part.
    pub write_failed: u64,
    pub lost_with_workers: u64,
}

/// Everything `/metrics`, `/readyz` and `/livez` need, copied from the core.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub state: ServiceState,
    pub readiness: servery_core::supervisor::Readiness,
    pub capacity: servery_core::supervisor::Capacity,
    pub generation: u64,
    pub workers_by_state: [usize; WorkerState::ALL.len()],
    pub tally: Tally,
    pub requests: RequestStats,
    /// Connections the workers held at their latest heartbeats.
    pub open_connections: u64,
    /// Requests in progress at the workers' latest heartbeats.
    pub requests_in_progress: u64,
    pub broker: BrokerStats,
    /// Broker table sizes, by name.
    pub tables: [(&'static str, u64); 8],
    pub access_log: Option<AccessLogCounts>,
    /// The live workers' process ids, for their `/proc` figures (`process_stats`).
    pub worker_pids: Vec<u32>,
    /// The certificate served, with TLS.
    pub certificate: Option<servery_core::tls_material::CertSummary>,
    /// With `--acme`: the certificate manager's counters and the certificate's health.
    pub acme: Option<(
        servery_core::acme::ManagerStatus,
        servery_core::acme::CertHealth,
    )>,
    /// The reverse proxy's upstreams as given, and whether the parent holds each up.
    pub upstreams: Vec<(String, bool)>,
}

impl Snapshot {
    pub fn of(parent: &Parent, info: &ServiceInfo, worker_pids: Vec<u32>) -> Snapshot {
        let sup = parent.supervisor();
        let broker = parent.broker();
        let log = broker.log();
        let wall = super::services::acme::facts::wall_now();
        Snapshot {
            state: sup.state(),
            readiness: parent.readiness(wall),
            capacity: sup.capacity(),
            generation: sup.generation().0,
            workers_by_state: sup.workers_by_state(),
            tally: sup.tally().clone(),
            requests: sup.request_stats(),
            open_connections: sup.open_connections(),
            requests_in_progress: sup.requests_in_progress(),
            broker: broker.stats(),
            tables: [
                ("leases", broker.leases().count() as u64),
                ("upload_reservations", broker.reservation_count() as u64),
                ("reserved_bytes", broker.reserved_bytes()),
                ("partial_uploads", broker.partial_count() as u64),
                ("dav_locks", broker.dav().len() as u64),
                ("log_queue", log.len() as u64),
                ("proxy_grants", u64::from(broker.proxy_grants().total())),
                ("cgi_grants", u64::from(broker.cgi_grants().total())),
            ],
            access_log: info.access_log.as_ref().map(|w| AccessLogCounts {
                written: w.lines_written.load(Relaxed),
                dropped: log.dropped(),
                write_failed: w.lines_failed.load(Relaxed),
                lost_with_workers: log.discarded(),
            }),
            worker_pids,
            certificate: parent.tls().map(|tls| tls.status().summary),
            acme: parent.acme().map(|m| (m.status(), m.health(wall))),
            upstreams: super::status::upstream_verdicts(parent),
        }
    }

    /// Whether `/readyz` says yes: the committed generation serves with at least
    /// `min_ready_workers` ready (the service is neither starting nor stopping nor
    /// failed).
    pub fn ready(&self) -> bool {
        self.readiness.takes_traffic()
    }

    /// `/readyz`'s body: the readiness and the capacity behind it.
    pub fn readiness_text(&self) -> String {
        let c = self.capacity;
        let workers = format!("{} of {} workers ready", c.ready, c.wanted);
        if let Some(text) = super::metrics_acme::readiness_text(self) {
            return text;
        }
        match self.readiness {
            Readiness::Ready => "ready\n".to_owned(),
            Readiness::Degraded => format!("degraded: {workers}\n"),
            Readiness::Unready if self.state == ServiceState::Ready => {
                format!("not ready: {workers} (minimum {})\n", c.minimum)
            }
            Readiness::Unready => format!("not ready: {}\n", self.state.name()),
        }
    }

    /// The counters in the OpenMetrics text format, which `prometheus-client` writes and
    /// Prometheus asks for first.
    pub fn render(&self) -> String {
        let mut registry = Registry::default();
        // The parent's process series under Prometheus' own names, without the prefix.
        let processes = super::process_stats::Figures::read(&self.worker_pids);
        processes.register_parent(&mut registry);
        let servery = registry.sub_registry_with_prefix("servery");
        processes.register_service(servery);
        self.register(servery);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }

    fn register(&self, r: &mut Registry) {
        let state = labelled_gauge();
        for s in ServiceState::ALL {
            state
                .get_or_create(&vec![("state", s.name())])
                .set(i64::from(s == self.state));
        }
        r.register(
            "service_state",
            "1 for the lifecycle state the service is in",
            state,
        );
        let readiness = labelled_gauge();
        for s in Readiness::ALL {
            readiness
                .get_or_create(&vec![("readiness", s.name())])
                .set(i64::from(s == self.readiness));
        }
        r.register(
            "readiness",
            "1 for what the service can do now (ready or degraded: /readyz answers 200)",
            readiness,
        );
        let ready_workers = Gauge::<i64>::default();
        ready_workers.set(i64::from(self.capacity.ready));
        r.register(
            "ready_workers",
            "Workers accepting requests (at most the configured workers)",
            ready_workers,
        );
        let wanted = Gauge::<i64>::default();
        wanted.set(i64::from(self.capacity.wanted));
        r.register(
            "configured_workers",
            "The workers the committed generation runs",
            wanted,
        );
        let open = Gauge::<i64>::default();
        open.set(clamp(self.open_connections));
        r.register(
            "connections_open",
            "Connections the workers hold, as their latest heartbeats reported them",
            open,
        );
        let in_progress = Gauge::<i64>::default();
        in_progress.set(clamp(self.requests_in_progress));
        r.register(
            "requests_in_progress",
            "Requests between their head and the end of their response (upgraded sessions \
             included), as the workers' latest heartbeats reported them",
            in_progress,
        );
        let generation = Gauge::<i64>::default();
        generation.set(clamp(self.generation));
        r.register("generation", "The committed generation", generation);

        let workers = labelled_gauge();
        for (s, n) in WorkerState::ALL.iter().zip(self.workers_by_state) {
            if *s != WorkerState::Exited {
                workers
                    .get_or_create(&vec![("state", s.name())])
                    .set(clamp(n as u64));
            }
        }
        r.register("workers", "Live worker processes by state", workers);

        let by_reason = |counts: &[u64], keep: fn(ExitReason) -> bool| {
            let family = labelled_counter();
            for (reason, n) in ExitReason::ALL.iter().zip(counts) {
                if keep(*reason) {
                    family
                        .get_or_create(&vec![("reason", reason.code())])
                        .inc_by(*n);
                }
            }
            family
        };
        r.register(
            "worker_exits",
            "Reaped workers by reason code",
            by_reason(&self.tally.exits, |_| true),
        );
        r.register(
            "restarts",
            "Workers replaced after they were lost, by reason code",
            by_reason(&self.tally.restarts, ExitReason::is_fault),
        );
        r.register(
            "recycles",
            "Workers recycled (replaced before they drained), by reason code",
            by_reason(&self.tally.exits, is_recycle),
        );
        let reloads = labelled_counter();
        for (outcome, n) in [
            ("committed", self.tally.reloads_committed),
            ("rejected", self.tally.reloads_rejected),
        ] {
            reloads.get_or_create(&vec![("outcome", outcome)]).inc_by(n);
        }
        r.register("reloads", "Reloads by outcome", reloads);
        r.register(
            "worker_exit_requests_recovered",
            "Requests a worker answered after its last heartbeat, counted from its scoreboard when it ended (they are in http_requests_total too)",
            counter(self.tally.requests_recovered_at_exit),
        );

        self.register_broker(r);
        self.register_requests(r);
        self.register_certificate(r);
        super::metrics_proxy::register(&self.upstreams, r);
    }

    /// When the served certificate ends, and when its renewal window opens: alert on
    /// `time() > servery_certificate_renewal_window_start_seconds`.
    fn register_certificate(&self, r: &mut Registry) {
        let Some(cert) = self.certificate.as_ref().filter(|c| c.not_after_unix != 0) else {
            return;
        };
        let not_after = Gauge::<i64>::default();
        not_after.set(cert.not_after_unix);
        r.register_with_unit(
            "certificate_not_after",
            "When the TLS certificate being served expires (its notAfter, Unix time)",
            Unit::Seconds,
            not_after,
        );
        let window = Gauge::<i64>::default();
        window.set(cert.renewal_window_from_unix());
        r.register_with_unit(
            "certificate_renewal_window_start",
            "When the served certificate enters its renewal window (30 days, or the last third of a shorter lifetime, before its notAfter; Unix time)",
            Unit::Seconds,
            window,
        );
    }

    fn register_broker(&self, r: &mut Registry) {
        if let Some((status, _)) = &self.acme {
            super::metrics_acme::register(status, r);
        }
        let tables = labelled_gauge();
        for (table, n) in self.tables {
            tables.get_or_create(&vec![("table", table)]).set(clamp(n));
        }
        r.register(
            "broker_table_size",
            "Entries in the broker's tables (reserved_bytes: bytes reserved by uploads)",
            tables,
        );
        r.register(
            "broker_grants",
            "Leases, reservations and locks the broker granted",
            counter(self.broker.granted),
        );
        let rejections = labelled_counter();
        for (rejection, n) in Rejection::ALL.iter().zip(self.broker.rejected) {
            rejections
                .get_or_create(&vec![("reason", rejection.code())])
                .inc_by(n);
        }
        r.register(
            "broker_rejections",
            "Broker requests refused, by reason",
            rejections,
        );
        r.register(
            "uploads",
            "Uploads admitted (upload reservations granted)",
            counter(self.broker.uploads_reserved),
        );
        if let Some(log) = &self.access_log {
            r.register(
                "access_log_lines_written",
                "Access-log lines written",
                counter(log.written),
            );
            let dropped = labelled_counter();
            for (reason, n) in [
                ("queue_full", log.dropped),
                ("write_failed", log.write_failed),
            ] {
                dropped.get_or_create(&vec![("reason", reason)]).inc_by(n);
            }
            r.register(
                "access_log_lines_dropped",
                "Access-log lines not written: dropped under the drop policy (queue_full), or in a write that failed (write_failed: a full disk)",
                dropped,
            );
            r.register(
                "access_log_lines_lost",
                "Access-log lines lost with workers that died before sending them (held unsent, or sent and waiting for room in the parent's queue)",
                counter(log.lost_with_workers),
            );
        }
    }

    fn register_requests(&self, r: &mut Registry) {
        let requests = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        for (method, row) in METHODS.iter().zip(&self.requests.requests) {
            for (class, n) in STATUS_CLASSES.iter().zip(row) {
                if *n > 0 {
                    requests
                        .get_or_create(&vec![("method", *method), ("code", *class)])
                        .inc_by(*n);
                }
            }
        }
        r.register(
            "http_requests",
            "Requests answered by every worker of the service, by method and status class",
            requests,
        );
        let unheard = labelled_counter();
        for (reason, n) in UNHEARD.iter().zip(self.requests.closed_unheard) {
            unheard.get_or_create(&vec![("reason", *reason)]).inc_by(n);
        }
        r.register(
            "connections_closed_unheard",
            "Connections closed before they brought a request (no access-log line: nothing to log), by reason",
            unheard,
        );
        let faults = labelled_counter();
        for (kind, n) in STORAGE_FAULTS.iter().zip(self.requests.storage_faults) {
            faults.get_or_create(&vec![("kind", *kind)]).inc_by(n);
        }
        r.register(
            "storage_faults",
            "Writes (uploads and WebDAV's) the file system refused, by kind: no_space (answered 507) or io (a failed write, fsync or rename, answered 500); nothing of them was published",
            faults,
        );
        r.register_with_unit(
            "http_response_body",
            "Response body bytes, as the responses declared them",
            Unit::Bytes,
            counter(self.requests.bytes_sent),
        );
        r.register_with_unit(
            "http_request_duration",
            "Time from a request's arrival to its response head, by route class (static, listing, webdav, upload, app, proxy, refused, other); sum without (class) for every request",
            Unit::Seconds,
            DurationHistogram(self.requests.clone()),
        );
    }
}

/// The same counters in the classic Prometheus text format (0.0.4), for clients that do
/// not ask for OpenMetrics (`curl`, `promtool check metrics`). The two differ only in how
/// a counter's family is named (OpenMetrics names it without `_total`, which its samples
/// add) and in the `# UNIT` and `# EOF` lines, which the classic format does not have.
pub(super) fn classic_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let named = ["# HELP ", "# TYPE "].into_iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        match named {
            Some(renamed) => out.push_str(&renamed),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

fn is_recycle(reason: ExitReason) -> bool {
    reason.is_recycle()
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn counter(n: u64) -> Counter {
    let c = Counter::default();
    c.inc_by(n);
    c
}

fn labelled_counter() -> Family<Vec<(&'static str, &'static str)>, Counter> {
    Family::default()
}

fn labelled_gauge() -> Family<Vec<(&'static str, &'static str)>, Gauge> {
    Family::default()
}

/// The request-duration histograms as the heartbeats summed them, one per route class
/// (`class` label, decision 0081; every class is written, at zero too, so a class's series
/// exists before its first request and `rate` sees that request). Their buckets are
/// counted by the workers, so they are encoded from those counts rather than observed here.
#[derive(Debug)]
struct DurationHistogram(RequestStats);

impl TypedMetric for DurationHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for DurationHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        for class in RouteClass::ALL {
            let counts = &s.duration_buckets[class.index()];
            let mut buckets: Vec<(f64, u64)> = DURATION_BOUNDS_US
                .iter()
                .zip(counts)
                .map(|(bound, n)| (*bound as f64 / 1e6, *n))
                .collect();
            // prometheus-client writes `+Inf` for this bound (as for its own histograms).
            buckets.push((f64::MAX, counts[DURATION_BOUNDS_US.len()]));
            let count = s.duration_count(class);
            let sum = s.duration_sum_us[class.index()] as f64 / 1e6;
            let labels = [("class", class.name())];
            encoder
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
