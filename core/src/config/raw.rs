//! The configuration as written, before validation. Timings are seconds as `f64` and
//! counts are `i64` on purpose: a user can write `-1` or `NaN`, and validation must be
//! able to see it to name it.

/// What the access-log queue does when it is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "lowercase")
)]
pub enum LogPolicy {
    /// Workers wait for room: no record is lost, logging can slow requests down.
    #[default]
    Block,
    /// The record is dropped and counted: requests never wait for the log.
    Drop,
}

/// How a crash's restart delay is spread at random (`restart_backoff_jitter`), so that
/// workers lost together do not all come back at the same instant. The draw comes from
/// the supervisor's seeded stream, never from the operating system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
pub enum RestartJitter {
    /// `min(max, initial · 2ⁿ)` exactly (no draw).
    #[default]
    None,
    /// Uniform on `[0, min(max, initial · 2ⁿ)]` ("full jitter", Brooker 2015).
    Full,
    /// `min(max, uniform(initial, 3 × the slot's previous delay))`, from `initial`
    /// ("decorrelated jitter", Brooker 2015).
    Decorrelated,
    /// `min(max, initial · 2ⁿ)` × uniform(0.8, 1.2): gRPC's ±20 % (its
    /// `doc/connection-backoff.md`; gRPC's own multiplier is 1.6, servery's 2).
    Proportional,
}

/// Which CPUs the workers run on (`worker_cpu_affinity`, decision 0122).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
pub enum CpuAffinity {
    /// Workers that host an application share out the CPUs the parent may run on, each
    /// slot its own (see [`crate::cpu_affinity::slot_share`]); file-serving workers run
    /// where the parent may.
    #[default]
    Auto,
    /// No worker is pinned.
    Off,
}

/// Recovery policy as written. Defaults are the seed document's.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
pub struct RawRecovery {
    pub restart_backoff_initial: f64,
    pub restart_backoff_max: f64,
    /// A worker that stayed ready this long resets its slot's backoff and crash run.
    pub restart_stable_period: f64,
    pub worker_restart_limit: i64,
    pub worker_restart_window: f64,
    /// Crashes of different slots within this long of a burst's first crash count once
    /// against the restart window (0: every crash counts).
    pub restart_burst_window: f64,
    /// How each crash's restart delay is spread at random (none: as computed).
    pub restart_backoff_jitter: RestartJitter,
    /// Pool-aware backoff: a crash that leaves no worker running or starting is replaced
    /// after `restart_backoff_initial`, not its slot's grown delay (the restart limit
    /// still counts it). Off: each slot backs off on its own.
    pub restart_backoff_keep_one: bool,
    /// Backoff shared across slots: every unstable restart, whichever slot, grows one
    /// delay for the pool, and a crash waits at least that (and at least its slot's own
    /// delay); a stable worker's crash resets it. Off: each slot backs off on its own.
    pub restart_backoff_shared: bool,
    pub worker_max_age: f64,
    pub worker_max_age_jitter: f64,
    pub max_requests_per_worker: i64,
    pub max_requests_jitter: f64,
    /// Recycle a worker whose resident memory is above this many bytes at two heartbeats
    /// in a row (0: off).
    pub worker_max_rss: i64,
    /// Consecutive failed recycle replacements before recycling is suspended.
    pub recycle_retry_limit: i64,
    /// The fewest ready workers with which the service still calls itself ready
    /// (`/readyz`); between this and `workers` it is degraded.
    pub min_ready_workers: i64,
    pub heartbeat_interval: f64,
    pub heartbeat_timeout: f64,
    pub worker_start_timeout: f64,
    pub drain_timeout: f64,
    pub force_timeout: f64,
}

impl Default for RawRecovery {
    fn default() -> Self {
        RawRecovery {
            restart_backoff_initial: 0.25,
            restart_backoff_max: 30.0,
            restart_stable_period: 30.0,
            worker_restart_limit: 5,
            worker_restart_window: 60.0,
            restart_burst_window: 0.0,
            restart_backoff_jitter: RestartJitter::None,
            restart_backoff_keep_one: false,
            restart_backoff_shared: false,
            worker_max_age: 0.0,
            worker_max_age_jitter: 0.1,
            max_requests_per_worker: 0,
            max_requests_jitter: 0.1,
            worker_max_rss: 0,
            recycle_retry_limit: 3,
            min_ready_workers: 1,
            // One beat a second costs nothing and five missed beats tell a hang from a
            // long GC-free stall or a loaded box; detection stays under 6 s with
            // force_timeout.
            heartbeat_interval: 1.0,
            heartbeat_timeout: 5.0,
            worker_start_timeout: 30.0,
            drain_timeout: 30.0,
            force_timeout: 1.0,
        }
    }
}

/// Per-worker resource budgets as written.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RawBudgets {
    pub max_connections: i64,
    pub max_blocking_threads: i64,
    pub compression_cache_size: i64,
    pub file_cache_size: i64,
}

impl Default for RawBudgets {
    fn default() -> Self {
        RawBudgets {
            max_connections: 1024,
            max_blocking_threads: 64,
            compression_cache_size: 16 * 1024 * 1024,
            file_cache_size: 16 * 1024 * 1024,
        }
    }
}

/// Broker limits as written. These are service-global, never multiplied by workers.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RawBroker {
    /// Outstanding broker requests per worker before the worker fails closed.
    pub queue_capacity: i64,
    pub reply_timeout: f64,
    pub max_leases: i64,
    pub max_dav_locks: i64,
    pub max_active_uploads: i64,
    pub max_upload_bytes: i64,
    pub max_partial_uploads: i64,
    pub partial_ttl: f64,
    pub lease_ttl: f64,
    pub max_dav_lock_timeout: f64,
    pub log_queue_capacity: i64,
    pub log_policy: LogPolicy,
    /// Upstream requests of the reverse proxy in flight at once, service-wide; 0: no bound.
    pub max_proxy_inflight: i64,
    /// CGI scripts running at once, service-wide; 0: no bound.
    pub max_cgi_concurrent: i64,
}

impl Default for RawBroker {
    fn default() -> Self {
        RawBroker {
            queue_capacity: 64,
            reply_timeout: 2.0,
            max_leases: 4096,
            max_dav_locks: 4096,
            max_active_uploads: 64,
            max_upload_bytes: 8 * 1024 * 1024 * 1024,
            max_partial_uploads: 256,
            partial_ttl: 24.0 * 3600.0,
            lease_ttl: 60.0,
            max_dav_lock_timeout: 3600.0,
            log_queue_capacity: 256,
            log_policy: LogPolicy::Block,
            max_proxy_inflight: 0,
            max_cgi_concurrent: 64,
        }
    }
}

/// How long a connection may take over each phase, as written. Every connection is under
/// one of these deadlines in every state, so a peer that stops talking cannot hold a
/// worker's connection slot (see docs/operations.md, "Connection deadlines").
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RawConnections {
    /// From accepting a connection to its first complete request head (one total
    /// deadline: silent peers and byte-at-a-time heads alike).
    pub request_head_timeout: f64,
    /// With no request in progress: from the end of the last response to the next
    /// complete request head (HTTP/1), or with no open stream (HTTP/2, then GOAWAY).
    pub keep_alive_timeout: f64,
    /// From accepting a TLS connection to the end of its handshake.
    pub tls_handshake_timeout: f64,
    /// A request in progress that moves no byte either way for this long (a peer that
    /// stopped reading its response) ends its connection.
    pub send_timeout: f64,
    /// The slowest a client may take a response, in bytes a second, averaged while the
    /// response waits on it: one slower than this for `send_timeout` is closed, and one
    /// slower than this at all counts as idle when its worker is full (decision 0041).
    /// `0` keeps only the rule that something moves.
    pub min_send_rate: i64,
    /// An upload body that delivers no byte for this long is answered 408 and its
    /// reservation and lease are released at once. Must stay below `broker.lease_ttl`.
    pub body_timeout: f64,
}

impl Default for RawConnections {
    fn default() -> Self {
        RawConnections {
            request_head_timeout: 30.0,
            keep_alive_timeout: 30.0,
            tls_handshake_timeout: 10.0,
            send_timeout: 60.0,
            min_send_rate: 2048,
            body_timeout: 20.0,
        }
    }
}

/// Per-request upload limits as written (the service-wide budgets are [`RawBroker`]'s).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RawUploads {
    /// The largest single upload in bytes; `None` means 1 GiB or `broker.max_upload_bytes`,
    /// whichever is smaller. A value above `broker.max_upload_bytes` is an error.
    pub max_upload_size: Option<i64>,
    /// Files one multipart request may create; one more is refused (413) before it is
    /// written.
    pub max_upload_files: i64,
    /// How long an upload waits for a target another upload is writing (0: 409 at once).
    pub write_lock_timeout: f64,
}

/// The default largest single upload: an eighth of the default global byte budget, so a
/// few uploads without a `Content-Length` (which reserve this much) do not exhaust it.
pub const DEFAULT_MAX_UPLOAD_SIZE: u64 = 1 << 30;

impl Default for RawUploads {
    fn default() -> Self {
        RawUploads {
            max_upload_size: None,
            max_upload_files: 1000,
            write_lock_timeout: 0.0,
        }
    }
}

/// Features whose state or lifecycle the parent owns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RawFeatures {
    pub uploads: bool,
    pub webdav: bool,
    /// The WebDAV lock table is journalled and survives a restart of the parent.
    pub dav_persistent_locks: bool,
    pub access_log: bool,
    pub mdns: bool,
    pub qr: bool,
    pub tftp: bool,
    pub tftp_write: bool,
    pub acme: bool,
    pub http3: bool,
    /// The workers host an application (`--wsgi`, `--asgi`): under
    /// `worker_cpu_affinity = auto` they are pinned to their slot's CPUs.
    pub application: bool,
}

/// A whole configuration as written.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RawConfig {
    pub workers: i64,
    /// Which CPUs the workers run on (reloadable: a reload's generation is pinned by its
    /// own value and worker count).
    pub worker_cpu_affinity: CpuAffinity,
    pub recovery: RawRecovery,
    pub budgets: RawBudgets,
    pub broker: RawBroker,
    pub connections: RawConnections,
    pub uploads: RawUploads,
    pub features: RawFeatures,
    pub tftp: super::RawTftp,
    /// The listener set (the port); see [`super::Listen`].
    pub listen: super::Listen,
    /// The reverse proxy's routes (reloadable; decision 0108).
    pub proxy: super::RawProxy,
}

impl Default for RawConfig {
    fn default() -> Self {
        RawConfig {
            workers: 1,
            worker_cpu_affinity: CpuAffinity::Auto,
            recovery: RawRecovery::default(),
            budgets: RawBudgets::default(),
            broker: RawBroker::default(),
            connections: RawConnections::default(),
            uploads: RawUploads::default(),
            features: RawFeatures::default(),
            tftp: super::RawTftp::default(),
            listen: super::Listen::default(),
            proxy: super::RawProxy::default(),
        }
    }
}
