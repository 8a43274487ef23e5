//! One validation pass that collects every broken rule.

use core::num::NonZeroU32;
use core::time::Duration;

use super::valid::{
    BrokerLimits, Budgets, ConnectionLimits, RecoveryPolicy, UploadLimits, ValidConfig,
};
use super::{ConfigError, ConfigIssue, DEFAULT_MAX_UPLOAD_SIZE, LogPolicy, RawConfig};

/// The largest timing we accept: longer values are certainly typos and would overflow
/// deadline arithmetic in some drivers.
const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;
/// More workers than this is a typo on any machine servery targets.
const MAX_WORKERS: i64 = 1024;
/// The smallest `worker_max_rss` that is not a typo: a serving worker at rest uses a few
/// MiB (a Python application's, tens), so a lower limit recycles every worker at once.
pub(super) const MIN_WORKER_MAX_RSS: u64 = 16 * 1024 * 1024;

pub(super) struct Checker {
    issues: Vec<ConfigIssue>,
}

impl Checker {
    pub(super) fn new() -> Checker {
        Checker { issues: Vec::new() }
    }

    /// The rules broken so far, in the order found.
    pub(super) fn into_rules(self) -> Vec<String> {
        self.issues.into_iter().map(|i| i.rule).collect()
    }

    pub(super) fn fail(&mut self, field: &'static str, rule: impl Into<String>) {
        self.issues.push(ConfigIssue {
            field,
            rule: rule.into(),
        });
    }

    /// A duration that must be finite, in range, and either `> 0` or `>= 0`.
    pub(super) fn seconds(
        &mut self,
        field: &'static str,
        value: f64,
        allow_zero: bool,
    ) -> Duration {
        if !value.is_finite() {
            self.fail(
                field,
                format!("must be a finite number of seconds (got {value})"),
            );
            return Duration::ZERO;
        }
        if allow_zero && value < 0.0 {
            self.fail(field, format!("must be >= 0 seconds (got {value})"));
            return Duration::ZERO;
        }
        if !allow_zero && value <= 0.0 {
            self.fail(
                field,
                format!("must be > 0 seconds: zero or negative would loop (got {value})"),
            );
            return Duration::ZERO;
        }
        if value > MAX_SECONDS {
            self.fail(
                field,
                format!("must be <= {MAX_SECONDS} seconds (got {value})"),
            );
            return Duration::ZERO;
        }
        Duration::from_secs_f64(value)
    }

    pub(super) fn count(&mut self, field: &'static str, value: i64, min: i64, max: i64) -> u64 {
        if value < min || value > max {
            self.fail(field, format!("must be in [{min}, {max}] (got {value})"));
            return 0;
        }
        value as u64
    }

    fn fraction(&mut self, field: &'static str, value: f64) -> f64 {
        if !(0.0..=1.0).contains(&value) {
            self.fail(field, format!("must be in [0, 1] (got {value})"));
            return 0.0;
        }
        value
    }
}

impl RawConfig {
    /// Validate everything, reporting every broken rule with its field.
    pub fn validate(&self) -> Result<ValidConfig, ConfigError> {
        let mut c = Checker::new();
        let r = &self.recovery;

        let workers = c.count("workers", self.workers, 1, MAX_WORKERS) as u32;
        let initial = c.seconds(
            "recovery.restart_backoff_initial",
            r.restart_backoff_initial,
            false,
        );
        let max = c.seconds("recovery.restart_backoff_max", r.restart_backoff_max, false);
        if !initial.is_zero() && !max.is_zero() && max < initial {
            c.fail(
                "recovery.restart_backoff_max",
                format!(
                    "must be >= recovery.restart_backoff_initial ({}): the backoff interval is inverted (got {})",
                    r.restart_backoff_initial, r.restart_backoff_max
                ),
            );
        }
        let stable = c.seconds(
            "recovery.restart_stable_period",
            r.restart_stable_period,
            false,
        );
        let limit = c.count(
            "recovery.worker_restart_limit",
            r.worker_restart_limit,
            0,
            1_000_000,
        ) as u32;
        let window = c.seconds(
            "recovery.worker_restart_window",
            r.worker_restart_window,
            false,
        );
        let burst = c.seconds(
            "recovery.restart_burst_window",
            r.restart_burst_window,
            true,
        );
        if !burst.is_zero() && !window.is_zero() && burst >= window {
            c.fail(
                "recovery.restart_burst_window",
                format!(
                    "must be < recovery.worker_restart_window ({}): one burst would outlast the window it is counted in (got {})",
                    r.worker_restart_window, r.restart_burst_window
                ),
            );
        }
        let max_age = c.seconds("recovery.worker_max_age", r.worker_max_age, true);
        let age_jitter = c.fraction("recovery.worker_max_age_jitter", r.worker_max_age_jitter);
        let max_requests = c.count(
            "recovery.max_requests_per_worker",
            r.max_requests_per_worker,
            0,
            i64::MAX,
        );
        let req_jitter = c.fraction("recovery.max_requests_jitter", r.max_requests_jitter);
        let max_rss = c.count("recovery.worker_max_rss", r.worker_max_rss, 0, i64::MAX);
        if max_rss > 0 && max_rss < MIN_WORKER_MAX_RSS {
            c.fail(
                "recovery.worker_max_rss",
                format!(
                    "must be 0 (off) or at least {MIN_WORKER_MAX_RSS} bytes: below a worker's memory at rest, every worker would be recycled as soon as it is ready (got {max_rss})"
                ),
            );
        }
        let min_ready = c.count(
            "recovery.min_ready_workers",
            r.min_ready_workers,
            1,
            MAX_WORKERS,
        ) as u32;
        if min_ready > workers {
            c.fail(
                "recovery.min_ready_workers",
                format!(
                    "must be at most `workers` ({workers}): the service could never be ready (got {min_ready})"
                ),
            );
        }
        let retry_limit = c.count(
            "recovery.recycle_retry_limit",
            r.recycle_retry_limit,
            1,
            1_000,
        ) as u32;
        let hb_interval = c.seconds("recovery.heartbeat_interval", r.heartbeat_interval, false);
        let hb_timeout = c.seconds("recovery.heartbeat_timeout", r.heartbeat_timeout, false);
        if !hb_interval.is_zero() && !hb_timeout.is_zero() && hb_timeout <= hb_interval {
            c.fail(
                "recovery.heartbeat_timeout",
                format!(
                    "must be > recovery.heartbeat_interval ({}): one late beat would kill a healthy worker (got {})",
                    r.heartbeat_interval, r.heartbeat_timeout
                ),
            );
        }
        let start_timeout = c.seconds(
            "recovery.worker_start_timeout",
            r.worker_start_timeout,
            false,
        );
        let drain_timeout = c.seconds("recovery.drain_timeout", r.drain_timeout, true);
        let force_timeout = c.seconds("recovery.force_timeout", r.force_timeout, true);
        if max_requests > 0 && req_jitter > 0.0 && (max_requests as f64 * (1.0 - req_jitter)) < 1.0
        {
            c.fail(
                "recovery.max_requests_jitter",
                "with recovery.max_requests_per_worker this small, jitter could recycle after zero requests: lower the jitter or raise the limit",
            );
        }

        let b = &self.budgets;
        let max_connections =
            c.count("budgets.max_connections", b.max_connections, 1, 1 << 24) as u32;
        let max_blocking = c.count(
            "budgets.max_blocking_threads",
            b.max_blocking_threads,
            1,
            4096,
        ) as u32;
        let cache = c.count(
            "budgets.compression_cache_size",
            b.compression_cache_size,
            0,
            i64::MAX,
        );
        let file_cache = c.count("budgets.file_cache_size", b.file_cache_size, 0, i64::MAX);

        let k = &self.broker;
        let queue_capacity = c.count("broker.queue_capacity", k.queue_capacity, 1, 1 << 20) as u32;
        let reply_timeout = c.seconds("broker.reply_timeout", k.reply_timeout, false);
        let max_leases = c.count("broker.max_leases", k.max_leases, 0, 1 << 24) as u32;
        let max_dav_locks = c.count("broker.max_dav_locks", k.max_dav_locks, 0, 1 << 24) as u32;
        let max_proxy_inflight = c.count(
            "broker.max_proxy_inflight",
            k.max_proxy_inflight,
            0,
            1 << 24,
        ) as u32;
        let max_cgi_concurrent = c.count(
            "broker.max_cgi_concurrent",
            k.max_cgi_concurrent,
            0,
            1 << 24,
        ) as u32;
        let max_active_uploads = c.count(
            "broker.max_active_uploads",
            k.max_active_uploads,
            0,
            1 << 24,
        ) as u32;
        let max_upload_bytes = c.count("broker.max_upload_bytes", k.max_upload_bytes, 0, i64::MAX);
        let max_partials = c.count(
            "broker.max_partial_uploads",
            k.max_partial_uploads,
            0,
            1 << 24,
        ) as u32;
        let partial_ttl = c.seconds("broker.partial_ttl", k.partial_ttl, false);
        let lease_ttl = c.seconds("broker.lease_ttl", k.lease_ttl, false);
        let max_dav_timeout =
            c.seconds("broker.max_dav_lock_timeout", k.max_dav_lock_timeout, false);
        let log_capacity = c.count(
            "broker.log_queue_capacity",
            k.log_queue_capacity,
            1,
            1 << 24,
        ) as u32;
        if !reply_timeout.is_zero() && !lease_ttl.is_zero() && lease_ttl <= reply_timeout {
            c.fail(
                "broker.lease_ttl",
                format!(
                    "must be > broker.reply_timeout ({}): a lease could expire before its grant arrives (got {})",
                    k.reply_timeout, k.lease_ttl
                ),
            );
        }

        let n = &self.connections;
        let head_timeout = c.seconds(
            "connections.request_head_timeout",
            n.request_head_timeout,
            false,
        );
        let keep_alive = c.seconds(
            "connections.keep_alive_timeout",
            n.keep_alive_timeout,
            false,
        );
        let handshake = c.seconds(
            "connections.tls_handshake_timeout",
            n.tls_handshake_timeout,
            false,
        );
        let send_timeout = c.seconds("connections.send_timeout", n.send_timeout, false);
        // A gigabyte a second is beyond any floor worth setting; larger is a typo.
        let min_send_rate = c.count("connections.min_send_rate", n.min_send_rate, 0, 1 << 30);
        let body_timeout = c.seconds("connections.body_timeout", n.body_timeout, false);
        // Only uploads hold leases while reading a body.
        if self.features.uploads
            && !body_timeout.is_zero()
            && !lease_ttl.is_zero()
            && body_timeout >= lease_ttl
        {
            c.fail(
                "connections.body_timeout",
                format!(
                    "must be < broker.lease_ttl ({}): a stalled upload must be answered before its lease expires under it (got {})",
                    k.lease_ttl, n.body_timeout
                ),
            );
        }

        let u = &self.uploads;
        let max_upload_size = match u.max_upload_size {
            None => DEFAULT_MAX_UPLOAD_SIZE.min(max_upload_bytes),
            Some(size) => {
                let size = c.count("uploads.max_upload_size", size, 1, i64::MAX);
                if size > max_upload_bytes && k.max_upload_bytes >= 0 {
                    c.fail(
                        "uploads.max_upload_size",
                        format!(
                            "must be <= broker.max_upload_bytes ({}): one upload can never reserve more than the whole budget (got {size})",
                            k.max_upload_bytes
                        ),
                    );
                }
                size
            }
        };
        let max_upload_files =
            c.count("uploads.max_upload_files", u.max_upload_files, 1, 1 << 20) as u32;
        let write_lock_timeout =
            c.seconds("uploads.write_lock_timeout", u.write_lock_timeout, true);

        let f = &self.features;
        if f.uploads && (max_leases == 0 || max_active_uploads == 0 || max_upload_bytes == 0) {
            c.fail(
                "features.uploads",
                "needs broker.max_leases, broker.max_active_uploads and broker.max_upload_bytes > 0: with a zero budget every upload would be refused",
            );
        }
        if f.webdav && max_dav_locks == 0 {
            c.fail(
                "features.webdav",
                "needs broker.max_dav_locks > 0: WebDAV without a lock table cannot honour LOCK",
            );
        }
        if f.dav_persistent_locks && !f.webdav {
            c.fail("features.dav_persistent_locks", "needs features.webdav");
        }
        if f.tftp_write && !f.tftp {
            c.fail("features.tftp_write", "needs features.tftp");
        }
        if f.tftp_write && !f.uploads {
            c.fail(
                "features.tftp_write",
                "needs features.uploads: TFTP writes share the upload budgets and target leases",
            );
        }

        let tftp = self.tftp.check(&mut c);
        let proxy = self.proxy.check(&mut c);

        let aggregate = |per: u64, n: u64, field: &'static str, c: &mut Checker| {
            per.checked_mul(n).unwrap_or_else(|| {
                c.fail(field, "the process-tree aggregate overflows 64 bits");
                0
            })
        };
        let n = u64::from(workers);
        let agg_conn = aggregate(
            u64::from(max_connections),
            n,
            "budgets.max_connections",
            &mut c,
        );
        let agg_cache = aggregate(cache, n, "budgets.compression_cache_size", &mut c);
        let overlap = aggregate(cache, n + 1, "budgets.compression_cache_size", &mut c);
        let agg_files = aggregate(file_cache, n, "budgets.file_cache_size", &mut c);
        let files_overlap = aggregate(file_cache, n + 1, "budgets.file_cache_size", &mut c);

        if !c.issues.is_empty() {
            return Err(ConfigError::Invalid(c.issues));
        }
        let Some(workers) = NonZeroU32::new(workers) else {
            unreachable!("workers was checked to be >= 1 above");
        };
        Ok(ValidConfig {
            workers,
            worker_cpu_affinity: self.worker_cpu_affinity,
            recovery: RecoveryPolicy {
                restart_backoff_initial: initial,
                restart_backoff_max: max,
                restart_stable_period: stable,
                worker_restart_limit: limit,
                worker_restart_window: window,
                restart_burst_window: burst,
                restart_backoff_jitter: r.restart_backoff_jitter,
                restart_backoff_keep_one: r.restart_backoff_keep_one,
                restart_backoff_shared: r.restart_backoff_shared,
                worker_max_age: (!max_age.is_zero()).then_some(max_age),
                worker_max_age_jitter: age_jitter,
                max_requests_per_worker: (max_requests > 0).then_some(max_requests),
                max_requests_jitter: req_jitter,
                worker_max_rss: (max_rss > 0).then_some(max_rss),
                recycle_retry_limit: retry_limit,
                min_ready_workers: min_ready,
                heartbeat_interval: hb_interval,
                heartbeat_timeout: hb_timeout,
                worker_start_timeout: start_timeout,
                drain_timeout,
                force_timeout,
            },
            budgets: Budgets {
                max_connections,
                max_blocking_threads: max_blocking,
                compression_cache_size: cache,
                file_cache_size: file_cache,
            },
            broker: BrokerLimits {
                queue_capacity,
                reply_timeout,
                max_leases,
                max_dav_locks,
                max_active_uploads,
                max_upload_bytes,
                max_partial_uploads: max_partials,
                partial_ttl,
                lease_ttl,
                max_dav_lock_timeout: max_dav_timeout,
                log_queue_capacity: log_capacity,
                log_policy: match k.log_policy {
                    LogPolicy::Block => LogPolicy::Block,
                    LogPolicy::Drop => LogPolicy::Drop,
                },
                max_proxy_inflight,
                max_cgi_concurrent,
            },
            connections: ConnectionLimits {
                request_head_timeout: head_timeout,
                keep_alive_timeout: keep_alive,
                tls_handshake_timeout: handshake,
                send_timeout,
                min_send_rate,
                body_timeout,
            },
            uploads: UploadLimits {
                max_upload_size,
                max_upload_files,
                write_lock_timeout,
            },
            features: self.features.clone(),
            tftp,
            listen: self.listen,
            proxy,
            aggregate_connection_limit: agg_conn,
            aggregate_compression_cache_size: agg_cache,
            recycling_overlap_compression_bound: overlap,
            aggregate_file_cache_size: agg_files,
            recycling_overlap_file_cache_bound: files_overlap,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The fields a configuration's validation names, none when it is valid.
    pub(in crate::config) fn fields(raw: &RawConfig) -> Vec<&'static str> {
        match raw.validate() {
            Ok(_) => vec![],
            Err(e) => e.issues().iter().map(|i| i.field).collect(),
        }
    }

    #[test]
    fn a_memory_limit_is_off_or_above_a_worker_at_rest() {
        let with = |rss: i64| {
            let mut raw = RawConfig::default();
            raw.recovery.worker_max_rss = rss;
            raw
        };
        assert_eq!(
            RawConfig::default()
                .validate()
                .map(|c| c.recovery().worker_max_rss()),
            Ok(None)
        );
        assert!(fields(&with(0)).is_empty());
        let limit = MIN_WORKER_MAX_RSS as i64;
        let valid = with(limit).validate().expect("the minimum is valid");
        assert_eq!(valid.recovery().worker_max_rss(), Some(MIN_WORKER_MAX_RSS));
        // One worker (the default) and its replacement during a recycle.
        assert_eq!(
            valid.recycling_overlap_memory_bound(),
            2 * MIN_WORKER_MAX_RSS
        );
        assert_eq!(
            RawConfig::default()
                .validate()
                .map(|c| c.recycling_overlap_memory_bound()),
            Ok(0)
        );
        for bad in [-1, 1, 512, limit - 1] {
            assert_eq!(fields(&with(bad)), vec!["recovery.worker_max_rss"], "{bad}");
        }
    }

    #[test]
    fn defaults_are_valid_and_match_the_seed() {
        let v = RawConfig::default().validate().expect("defaults validate");
        let r = v.recovery();
        assert_eq!(r.restart_backoff_initial(), Duration::from_millis(250));
        assert_eq!(r.restart_backoff_max(), Duration::from_secs(30));
        assert_eq!(r.worker_restart_limit(), 5);
        assert_eq!(r.worker_restart_window(), Duration::from_secs(60));
        assert_eq!(r.worker_max_age(), None);
        assert_eq!(r.worker_max_age_jitter(), 0.1);
        assert_eq!(r.max_requests_per_worker(), None);
    }

    #[test]
    fn every_error_is_reported_at_once_with_its_field() {
        let mut raw = RawConfig {
            workers: 0,
            ..RawConfig::default()
        };
        raw.recovery.restart_backoff_initial = 10.0;
        raw.recovery.restart_backoff_max = 1.0;
        raw.recovery.worker_restart_limit = -1;
        raw.recovery.worker_max_age_jitter = 1.5;
        raw.recovery.heartbeat_interval = 5.0;
        raw.recovery.heartbeat_timeout = 5.0;
        raw.recovery.worker_restart_window = 0.0;
        raw.recovery.drain_timeout = f64::NAN;
        raw.features.tftp_write = true;
        let got = fields(&raw);
        for want in [
            "workers",
            "recovery.restart_backoff_max",
            "recovery.worker_restart_limit",
            "recovery.worker_max_age_jitter",
            "recovery.heartbeat_timeout",
            "recovery.worker_restart_window",
            "recovery.drain_timeout",
            "features.tftp_write",
        ] {
            assert!(got.contains(&want), "missing {want} in {got:?}");
        }
        let text = raw.validate().expect_err("invalid").to_string();
        assert!(text.contains("inverted"), "{text}");
    }

    #[test]
    fn zero_or_negative_timings_that_would_loop_are_rejected() {
        for (set, field) in [
            (
                (|r: &mut RawConfig| r.recovery.restart_backoff_initial = 0.0)
                    as fn(&mut RawConfig),
                "recovery.restart_backoff_initial",
            ),
            (
                |r: &mut RawConfig| r.recovery.heartbeat_interval = -1.0,
                "recovery.heartbeat_interval",
            ),
            (
                |r: &mut RawConfig| r.recovery.worker_start_timeout = 0.0,
                "recovery.worker_start_timeout",
            ),
            (
                |r: &mut RawConfig| r.recovery.worker_max_age = -3.0,
                "recovery.worker_max_age",
            ),
            (
                |r: &mut RawConfig| r.broker.reply_timeout = 0.0,
                "broker.reply_timeout",
            ),
        ] {
            let mut raw = RawConfig::default();
            set(&mut raw);
            assert_eq!(fields(&raw), vec![field]);
        }
    }

    #[test]
    fn zero_limits_that_are_meaningful_are_accepted() {
        let mut raw = RawConfig::default();
        raw.recovery.worker_restart_limit = 0;
        raw.recovery.drain_timeout = 0.0;
        raw.recovery.force_timeout = 0.0;
        raw.recovery.worker_max_age = 0.0;
        raw.recovery.worker_max_age_jitter = 1.0;
        let v = raw.validate().expect("valid");
        assert_eq!(v.recovery().worker_restart_limit(), 0);
    }

    #[test]
    fn aggregates_are_exact() {
        let mut raw = RawConfig {
            workers: 4,
            ..RawConfig::default()
        };
        raw.budgets.max_connections = 1000;
        raw.budgets.compression_cache_size = 3;
        let v = raw.validate().expect("valid");
        assert_eq!(v.aggregate_connection_limit(), 4000);
        assert_eq!(v.aggregate_compression_cache_size(), 12);
        assert_eq!(v.recycling_overlap_compression_bound(), 15);
        raw.budgets.compression_cache_size = i64::MAX;
        assert_eq!(fields(&raw), vec!["budgets.compression_cache_size"; 2]);
        raw.budgets.compression_cache_size = 3;
        raw.budgets.file_cache_size = 5;
        let v = raw.validate().expect("valid");
        assert_eq!(v.aggregate_file_cache_size(), 20);
        assert_eq!(v.recycling_overlap_file_cache_bound(), 25);
        raw.budgets.file_cache_size = i64::MAX;
        assert_eq!(fields(&raw), vec!["budgets.file_cache_size"; 2]);
        raw.budgets.file_cache_size = -1;
        assert_eq!(fields(&raw), vec!["budgets.file_cache_size"]);
    }

    #[test]
    fn getters_carry_the_validated_values_and_leases_outlive_replies() {
        let mut raw = RawConfig::default();
        raw.budgets.max_connections = 77;
        raw.budgets.max_blocking_threads = 9;
        raw.broker.lease_ttl = 2.0;
        raw.broker.reply_timeout = 2.0;
        assert_eq!(fields(&raw), vec!["broker.lease_ttl"]);
        raw.broker.lease_ttl = 2.5;
        let v = raw.validate().expect("valid");
        assert_eq!(v.budgets().max_connections(), 77);
        assert_eq!(v.budgets().max_blocking_threads(), 9);
        assert_eq!(v.broker().lease_ttl(), Duration::from_millis(2500));
        assert_eq!(v.budgets().compression_cache_size(), 16 * 1024 * 1024);
        assert_eq!(v.budgets().file_cache_size(), 16 * 1024 * 1024);
        assert_eq!(v.broker().queue_capacity(), 64);
        assert_eq!(v.recovery().max_requests_jitter(), 0.1);
        let mut raw = RawConfig::default();
        raw.features.tftp = true;
        raw.features.tftp_write = true;
        assert_eq!(
            fields(&raw),
            vec!["features.tftp_write"],
            "TFTP writes need uploads"
        );
        raw.features.uploads = true;
        assert!(raw.validate().is_ok(), "TFTP writes with uploads enabled");
        assert_eq!(v.broker().max_dav_lock_timeout(), Duration::from_secs(3600));
        let mut raw = RawConfig::default();
        raw.recovery.drain_timeout = MAX_SECONDS;
        assert!(raw.validate().is_ok(), "the largest timing is allowed");
        raw.recovery.drain_timeout = MAX_SECONDS + 1.0;
        assert_eq!(fields(&raw), vec!["recovery.drain_timeout"]);
        // Zero write budgets are fine while nothing writes.
        let mut raw = RawConfig::default();
        raw.broker.max_leases = 0;
        raw.broker.max_active_uploads = 0;
        raw.broker.max_upload_bytes = 0;
        raw.broker.max_dav_locks = 0;
        assert!(raw.validate().is_ok());
    }

    #[test]
    fn upload_limits_name_both_fields_of_an_inconsistent_pair() {
        let mut raw = RawConfig::default();
        raw.broker.max_upload_bytes = 10;
        let v = raw
            .validate()
            .expect("an unset size follows a small budget");
        assert_eq!(v.uploads().max_upload_size(), 10);
        raw.uploads.max_upload_size = Some(100);
        let err = raw.validate().expect_err("size above the budget");
        assert_eq!(err.issues().len(), 1);
        assert_eq!(err.issues()[0].field, "uploads.max_upload_size");
        assert!(
            err.issues()[0]
                .rule
                .contains("broker.max_upload_bytes (10)"),
            "{}",
            err.issues()[0].rule
        );
        raw.uploads.max_upload_size = Some(10);
        assert_eq!(
            raw.validate().expect("equal").uploads().max_upload_size(),
            10
        );
        let v = RawConfig::default().validate().expect("defaults");
        assert_eq!(v.uploads().max_upload_size(), 1 << 30);
        assert_eq!(v.uploads().max_upload_files(), 1000);
        let mut raw = RawConfig::default();
        raw.uploads.max_upload_files = 0;
        raw.uploads.write_lock_timeout = -1.0;
        assert_eq!(
            fields(&raw),
            vec!["uploads.max_upload_files", "uploads.write_lock_timeout"]
        );
    }

    #[test]
    fn connection_deadlines_are_positive_and_bodies_time_out_before_leases() {
        let v = RawConfig::default().validate().expect("defaults");
        let n = v.connections();
        assert_eq!(n.request_head_timeout(), Duration::from_secs(30));
        assert_eq!(n.keep_alive_timeout(), Duration::from_secs(30));
        assert_eq!(n.tls_handshake_timeout(), Duration::from_secs(10));
        assert_eq!(n.send_timeout(), Duration::from_secs(60));
        assert_eq!(n.min_send_rate(), 2048);
        assert_eq!(n.body_timeout(), Duration::from_secs(20));
        let mut raw = RawConfig::default();
        raw.connections.request_head_timeout = 0.0;
        raw.connections.keep_alive_timeout = f64::NAN;
        raw.connections.tls_handshake_timeout = -1.0;
        raw.connections.send_timeout = 0.0;
        raw.connections.min_send_rate = -1;
        assert_eq!(
            fields(&raw),
            vec![
                "connections.request_head_timeout",
                "connections.keep_alive_timeout",
                "connections.tls_handshake_timeout",
                "connections.send_timeout",
                "connections.min_send_rate"
            ]
        );
        let mut raw = RawConfig::default();
        raw.connections.min_send_rate = 0;
        let off = raw.validate().expect("0 turns the floor off");
        assert_eq!(off.connections().min_send_rate(), 0);
        let mut raw = RawConfig::default();
        raw.features.uploads = true;
        raw.connections.body_timeout = 60.0;
        assert_eq!(fields(&raw), vec!["connections.body_timeout"]);
        raw.features.uploads = false;
        assert!(raw.validate().is_ok(), "no leases without uploads");
    }

    #[test]
    fn incompatible_modes_are_named() {
        let mut raw = RawConfig::default();
        raw.features.uploads = true;
        raw.broker.max_leases = 0;
        raw.features.webdav = true;
        raw.broker.max_dav_locks = 0;
        assert_eq!(fields(&raw), vec!["features.uploads", "features.webdav"]);
        let mut raw = RawConfig::default();
        raw.recovery.max_requests_per_worker = 1;
        raw.recovery.max_requests_jitter = 0.5;
        assert_eq!(fields(&raw), vec!["recovery.max_requests_jitter"]);
    }
}
