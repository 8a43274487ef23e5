//! A validated configuration in the form it is written: the inverse of
//! [`RawConfig::validate`]. Views that show a configuration (the `config` of a status, a
//! configuration check) render this form, so every field they show is a [`RawConfig`]
//! field under its own name — the name a setting is mapped to and validation reports —
//! and a field added to [`RawConfig`] cannot be left out: the struct literals below are
//! exhaustive, so it does not build until the field is filled in here (the features are
//! validated as written, one type for both, and are copied whole).

use core::time::Duration;

use super::valid::ValidConfig;
use super::{RawBroker, RawBudgets, RawConfig, RawConnections, RawRecovery, RawTftp, RawUploads};

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A count as written (`i64`); a value no `i64` holds cannot have passed validation.
fn count(n: impl Into<u64>) -> i64 {
    i64::try_from(n.into()).unwrap_or(i64::MAX)
}

impl ValidConfig {
    /// The configuration as written that validates to this one: seconds for durations,
    /// `0` for a limit that is off, the resolved value for one that was left to a default
    /// (`uploads.max_upload_size`).
    pub fn as_written(&self) -> RawConfig {
        let r = self.recovery();
        let b = self.budgets();
        let k = self.broker();
        let n = self.connections();
        let u = self.uploads();
        let t = self.tftp();
        RawConfig {
            workers: count(self.workers()),
            worker_cpu_affinity: self.worker_cpu_affinity(),
            recovery: RawRecovery {
                restart_backoff_initial: secs(r.restart_backoff_initial()),
                restart_backoff_max: secs(r.restart_backoff_max()),
                restart_stable_period: secs(r.restart_stable_period()),
                worker_restart_limit: count(r.worker_restart_limit()),
                worker_restart_window: secs(r.worker_restart_window()),
                restart_burst_window: secs(r.restart_burst_window()),
                restart_backoff_jitter: r.restart_backoff_jitter(),
                restart_backoff_keep_one: r.restart_backoff_keep_one(),
                restart_backoff_shared: r.restart_backoff_shared(),
                worker_max_age: r.worker_max_age().map_or(0.0, secs),
                worker_max_age_jitter: r.worker_max_age_jitter(),
                max_requests_per_worker: r.max_requests_per_worker().map_or(0, count),
                max_requests_jitter: r.max_requests_jitter(),
                worker_max_rss: r.worker_max_rss().map_or(0, count),
                recycle_retry_limit: count(r.recycle_retry_limit()),
                min_ready_workers: count(r.min_ready_workers()),
                heartbeat_interval: secs(r.heartbeat_interval()),
                heartbeat_timeout: secs(r.heartbeat_timeout()),
                worker_start_timeout: secs(r.worker_start_timeout()),
                drain_timeout: secs(r.drain_timeout()),
                force_timeout: secs(r.force_timeout()),
            },
            budgets: RawBudgets {
                max_connections: count(b.max_connections()),
                max_blocking_threads: count(b.max_blocking_threads()),
                compression_cache_size: count(b.compression_cache_size()),
                file_cache_size: count(b.file_cache_size()),
            },
            broker: RawBroker {
                queue_capacity: count(k.queue_capacity()),
                reply_timeout: secs(k.reply_timeout()),
                max_leases: count(k.max_leases()),
                max_dav_locks: count(k.max_dav_locks()),
                max_active_uploads: count(k.max_active_uploads()),
                max_upload_bytes: count(k.max_upload_bytes()),
                max_partial_uploads: count(k.max_partial_uploads()),
                partial_ttl: secs(k.partial_ttl()),
                lease_ttl: secs(k.lease_ttl()),
                max_dav_lock_timeout: secs(k.max_dav_lock_timeout()),
                log_queue_capacity: count(k.log_queue_capacity()),
                log_policy: k.log_policy(),
                max_proxy_inflight: count(k.max_proxy_inflight()),
                max_cgi_concurrent: count(k.max_cgi_concurrent()),
            },
            connections: RawConnections {
                request_head_timeout: secs(n.request_head_timeout()),
                keep_alive_timeout: secs(n.keep_alive_timeout()),
                tls_handshake_timeout: secs(n.tls_handshake_timeout()),
                send_timeout: secs(n.send_timeout()),
                min_send_rate: count(n.min_send_rate()),
                body_timeout: secs(n.body_timeout()),
            },
            uploads: RawUploads {
                max_upload_size: Some(count(u.max_upload_size())),
                max_upload_files: count(u.max_upload_files()),
                write_lock_timeout: secs(u.write_lock_timeout()),
            },
            // The features are kept as they were written.
            features: self.features().clone(),
            listen: self.listen(),
            proxy: {
                let p = self.proxy().settings();
                super::RawProxy {
                    routes: self
                        .proxy()
                        .routes()
                        .iter()
                        .map(|r| r.given.clone())
                        .collect(),
                    max_fails: count(p.health.max_fails),
                    fail_timeout: secs(p.health.fail_timeout),
                    health: p.probe_path.clone(),
                    health_interval: secs(p.health_interval),
                    connect_timeout: secs(p.connect_timeout),
                    first_byte_timeout: secs(p.first_byte_timeout),
                    idle_timeout: secs(p.idle_timeout),
                    upstream_host: p.upstream_host,
                    balance: p.balance.name().to_owned(),
                    ca: p.ca.clone(),
                    trust_proxy: p.trust_proxy.clone(),
                }
            },
            tftp: RawTftp {
                max_transfers: count(t.max_transfers()),
                max_transfer_size: count(t.max_transfer_size()),
                retries: count(t.retries()),
                timeout: secs(t.timeout()),
            },
        }
    }

    /// The bounds validation works out from several fields, by name: what no single
    /// setting says (`workers * max_connections`, ...). Not part of [`RawConfig`].
    pub fn aggregates(&self) -> [(&'static str, u64); 6] {
        [
            (
                "aggregate_connection_limit",
                self.aggregate_connection_limit(),
            ),
            (
                "aggregate_compression_cache_size",
                self.aggregate_compression_cache_size(),
            ),
            (
                "recycling_overlap_compression_bound",
                self.recycling_overlap_compression_bound(),
            ),
            (
                "aggregate_file_cache_size",
                self.aggregate_file_cache_size(),
            ),
            (
                "recycling_overlap_file_cache_bound",
                self.recycling_overlap_file_cache_bound(),
            ),
            (
                "recycling_overlap_memory_bound",
                self.recycling_overlap_memory_bound(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::RawConfig;
    use crate::config::LogPolicy;

    /// Every field away from its default (and valid), so a field written back from the
    /// wrong source, or not at all, changes the result.
    fn unusual() -> RawConfig {
        let mut raw = RawConfig {
            workers: 3,
            worker_cpu_affinity: crate::config::CpuAffinity::Off,
            ..RawConfig::default()
        };
        let r = &mut raw.recovery;
        r.restart_backoff_initial = 0.5;
        r.restart_backoff_max = 31.0;
        r.restart_stable_period = 32.0;
        r.worker_restart_limit = 6;
        r.worker_restart_window = 61.0;
        r.restart_burst_window = 0.75;
        r.restart_backoff_jitter = crate::config::RestartJitter::Decorrelated;
        r.restart_backoff_keep_one = true;
        r.restart_backoff_shared = true;
        r.worker_max_age = 600.0;
        r.worker_max_age_jitter = 0.2;
        r.max_requests_per_worker = 1000;
        r.max_requests_jitter = 0.3;
        r.worker_max_rss = 1 << 30;
        r.min_ready_workers = 2;
        r.recycle_retry_limit = 4;
        r.heartbeat_interval = 1.5;
        r.heartbeat_timeout = 6.0;
        r.worker_start_timeout = 33.0;
        r.drain_timeout = 34.0;
        r.force_timeout = 2.0;
        let b = &mut raw.budgets;
        b.max_connections = 100;
        b.max_blocking_threads = 8;
        b.compression_cache_size = 1000;
        b.file_cache_size = 2000;
        let k = &mut raw.broker;
        k.queue_capacity = 65;
        k.reply_timeout = 2.5;
        k.max_leases = 4000;
        k.max_dav_locks = 4001;
        k.max_active_uploads = 63;
        k.max_upload_bytes = 1 << 34;
        k.max_partial_uploads = 255;
        k.partial_ttl = 3600.0;
        k.lease_ttl = 62.0;
        k.max_dav_lock_timeout = 1800.0;
        k.max_proxy_inflight = 7;
        k.max_cgi_concurrent = 5;
        k.log_queue_capacity = 257;
        k.log_policy = LogPolicy::Drop;
        let n = &mut raw.connections;
        n.request_head_timeout = 29.0;
        n.keep_alive_timeout = 28.0;
        n.tls_handshake_timeout = 9.0;
        n.send_timeout = 59.0;
        n.min_send_rate = 511;
        n.body_timeout = 19.0;
        raw.uploads.max_upload_size = Some(1 << 20);
        raw.uploads.max_upload_files = 999;
        raw.uploads.write_lock_timeout = 0.25;
        let f = &mut raw.features;
        (f.uploads, f.webdav, f.dav_persistent_locks, f.access_log) = (true, true, true, true);
        (f.mdns, f.qr, f.tftp, f.tftp_write) = (true, true, true, true);
        (f.acme, f.http3, f.application) = (true, true, true);
        raw.tftp.max_transfers = 17;
        raw.tftp.max_transfer_size = 1 << 29;
        raw.tftp.retries = 6;
        raw.tftp.timeout = 3.0;
        raw.listen.port = Some(8123);
        raw.proxy.routes = vec!["/api=http://127.0.0.1:9000".into()];
        let x = &mut raw.proxy;
        x.max_fails = 3;
        x.fail_timeout = 7.5;
        x.health = Some("/healthz".into());
        x.health_interval = 2.5;
        x.connect_timeout = 1.5;
        x.first_byte_timeout = 9.0;
        x.idle_timeout = 11.0;
        x.upstream_host = true;
        x.balance = "least-inflight".into();
        x.ca = Some("/etc/servery/upstream-ca.pem".into());
        x.trust_proxy = vec![[192, 0, 2, 7].into()];
        raw
    }

    #[test]
    fn a_configuration_as_written_is_the_one_that_was_validated() {
        for raw in [RawConfig::default(), unusual()] {
            let valid = raw.validate().expect("valid");
            let written = valid.as_written();
            assert_eq!(written.validate().as_ref(), Ok(&valid));
            // Written explicitly, the only change is the resolved default upload size.
            let mut expected = raw.clone();
            expected.uploads.max_upload_size = Some(valid.uploads().max_upload_size() as i64);
            assert_eq!(written, expected);
        }
    }

    #[test]
    fn the_unusual_configuration_differs_from_the_default_in_every_field() {
        let (a, b) = (RawConfig::default(), unusual());
        assert_ne!(a.workers, b.workers);
        // Fields compared through their debug form: a field left at its default would
        // not catch a mix-up with another field of the same default.
        let pairs = |x: &RawConfig| format!("{x:?}");
        let (a, b) = (pairs(&a), pairs(&b));
        let fields = |s: &str| -> Vec<String> {
            s.split([',', '{', '}'])
                .filter_map(|p| p.split_once(':'))
                // A section's type name is not a field's value.
                .filter(|(_, v)| !v.trim().starts_with("Raw") && v.trim() != "Listen")
                .map(|(k, v)| format!("{}={}", k.trim(), v.trim()))
                .collect()
        };
        let (fa, fb) = (fields(&a), fields(&b));
        assert_eq!(fa.len(), fb.len());
        for (x, y) in fa.iter().zip(&fb) {
            assert_ne!(x, y, "{x} is left at its default");
        }
    }

    /// The aggregates rule: each bound validation works out is shown under its own name
    /// with the value its getter gives (the status and `--check-config` print these).
    #[test]
    fn each_aggregate_is_named_and_valued_as_its_getter_says() {
        let valid = unusual().validate().expect("valid");
        let expected = [
            (
                "aggregate_connection_limit",
                valid.aggregate_connection_limit(),
            ),
            (
                "aggregate_compression_cache_size",
                valid.aggregate_compression_cache_size(),
            ),
            (
                "recycling_overlap_compression_bound",
                valid.recycling_overlap_compression_bound(),
            ),
            (
                "aggregate_file_cache_size",
                valid.aggregate_file_cache_size(),
            ),
            (
                "recycling_overlap_file_cache_bound",
                valid.recycling_overlap_file_cache_bound(),
            ),
            (
                "recycling_overlap_memory_bound",
                valid.recycling_overlap_memory_bound(),
            ),
        ];
        assert_eq!(valid.aggregates(), expected, "aggregates rule");
        assert!(
            expected.iter().all(|(_, v)| *v > 1),
            "aggregates rule: a bound of 0 or 1 would not tell a constant apart: {expected:?}"
        );
    }
}
