//! The validated configuration. Its fields are private and it has no public constructor:
//! the only way to hold one is to have passed [`super::RawConfig::validate`].

use core::num::NonZeroU32;
use core::time::Duration;

pub(super) use super::raw::LogPolicy;
pub(super) use super::raw::RestartJitter;

/// Recovery policy, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveryPolicy {
    pub(super) restart_backoff_initial: Duration,
    pub(super) restart_backoff_max: Duration,
    pub(super) restart_stable_period: Duration,
    pub(super) worker_restart_limit: u32,
    pub(super) worker_restart_window: Duration,
    pub(super) restart_burst_window: Duration,
    pub(super) restart_backoff_jitter: RestartJitter,
    pub(super) restart_backoff_keep_one: bool,
    pub(super) restart_backoff_shared: bool,
    pub(super) worker_max_age: Option<Duration>,
    pub(super) worker_max_age_jitter: f64,
    pub(super) max_requests_per_worker: Option<u64>,
    pub(super) max_requests_jitter: f64,
    pub(super) worker_max_rss: Option<u64>,
    pub(super) recycle_retry_limit: u32,
    pub(super) min_ready_workers: u32,
    pub(super) heartbeat_interval: Duration,
    pub(super) heartbeat_timeout: Duration,
    pub(super) worker_start_timeout: Duration,
    pub(super) drain_timeout: Duration,
    pub(super) force_timeout: Duration,
}

impl RecoveryPolicy {
    pub fn restart_backoff_initial(&self) -> Duration {
        self.restart_backoff_initial
    }
    pub fn restart_backoff_max(&self) -> Duration {
        self.restart_backoff_max
    }
    pub fn restart_stable_period(&self) -> Duration {
        self.restart_stable_period
    }
    /// Zero disables crash replacement: the first crash fails the service.
    pub fn worker_restart_limit(&self) -> u32 {
        self.worker_restart_limit
    }
    pub fn worker_restart_window(&self) -> Duration {
        self.worker_restart_window
    }
    /// Zero when every crash counts against the window on its own.
    pub fn restart_burst_window(&self) -> Duration {
        self.restart_burst_window
    }
    pub fn restart_backoff_jitter(&self) -> RestartJitter {
        self.restart_backoff_jitter
    }
    /// Whether a crash that leaves no worker running is replaced after the initial delay.
    pub fn restart_backoff_keep_one(&self) -> bool {
        self.restart_backoff_keep_one
    }
    /// Whether one backoff, grown by every slot's unstable restarts, holds the pool.
    pub fn restart_backoff_shared(&self) -> bool {
        self.restart_backoff_shared
    }
    /// `None` when age recycling is off.
    pub fn worker_max_age(&self) -> Option<Duration> {
        self.worker_max_age
    }
    pub fn worker_max_age_jitter(&self) -> f64 {
        self.worker_max_age_jitter
    }
    /// `None` when request-count recycling is off.
    pub fn max_requests_per_worker(&self) -> Option<u64> {
        self.max_requests_per_worker
    }
    pub fn max_requests_jitter(&self) -> f64 {
        self.max_requests_jitter
    }
    /// Recycle a worker above this resident memory (bytes) at two beats in a row.
    pub fn worker_max_rss(&self) -> Option<u64> {
        self.worker_max_rss
    }

    /// The fewest ready workers with which the service is still ready (`/readyz`).
    pub fn min_ready_workers(&self) -> u32 {
        self.min_ready_workers
    }
    pub fn recycle_retry_limit(&self) -> u32 {
        self.recycle_retry_limit
    }
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }
    pub fn heartbeat_timeout(&self) -> Duration {
        self.heartbeat_timeout
    }
    pub fn worker_start_timeout(&self) -> Duration {
        self.worker_start_timeout
    }
    pub fn drain_timeout(&self) -> Duration {
        self.drain_timeout
    }
    pub fn force_timeout(&self) -> Duration {
        self.force_timeout
    }
}

/// Per-worker budgets, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budgets {
    pub(super) max_connections: u32,
    pub(super) max_blocking_threads: u32,
    pub(super) compression_cache_size: u64,
    pub(super) file_cache_size: u64,
}

impl Budgets {
    pub fn max_connections(&self) -> u32 {
        self.max_connections
    }
    pub fn max_blocking_threads(&self) -> u32 {
        self.max_blocking_threads
    }
    pub fn compression_cache_size(&self) -> u64 {
        self.compression_cache_size
    }
    pub fn file_cache_size(&self) -> u64 {
        self.file_cache_size
    }
}

/// Service-global broker limits, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerLimits {
    pub(super) queue_capacity: u32,
    pub(super) reply_timeout: Duration,
    pub(super) max_leases: u32,
    pub(super) max_dav_locks: u32,
    pub(super) max_active_uploads: u32,
    pub(super) max_upload_bytes: u64,
    pub(super) max_partial_uploads: u32,
    pub(super) partial_ttl: Duration,
    pub(super) lease_ttl: Duration,
    pub(super) max_dav_lock_timeout: Duration,
    pub(super) log_queue_capacity: u32,
    pub(super) log_policy: LogPolicy,
    pub(super) max_proxy_inflight: u32,
    pub(super) max_cgi_concurrent: u32,
}

impl BrokerLimits {
    pub fn queue_capacity(&self) -> u32 {
        self.queue_capacity
    }
    pub fn reply_timeout(&self) -> Duration {
        self.reply_timeout
    }
    pub fn max_leases(&self) -> u32 {
        self.max_leases
    }
    pub fn max_dav_locks(&self) -> u32 {
        self.max_dav_locks
    }
    pub fn max_active_uploads(&self) -> u32 {
        self.max_active_uploads
    }
    pub fn max_upload_bytes(&self) -> u64 {
        self.max_upload_bytes
    }
    pub fn max_partial_uploads(&self) -> u32 {
        self.max_partial_uploads
    }
    pub fn partial_ttl(&self) -> Duration {
        self.partial_ttl
    }
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }
    pub fn max_dav_lock_timeout(&self) -> Duration {
        self.max_dav_lock_timeout
    }
    pub fn log_queue_capacity(&self) -> u32 {
        self.log_queue_capacity
    }
    pub fn log_policy(&self) -> LogPolicy {
        self.log_policy
    }
    /// The reverse proxy's service-wide bound on upstream requests in flight; 0: none.
    pub fn max_proxy_inflight(&self) -> u32 {
        self.max_proxy_inflight
    }
    /// CGI scripts running at once, service-wide; 0: none.
    pub fn max_cgi_concurrent(&self) -> u32 {
        self.max_cgi_concurrent
    }
}

/// Connection deadlines, validated (see [`super::RawConnections`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub(super) request_head_timeout: Duration,
    pub(super) keep_alive_timeout: Duration,
    pub(super) tls_handshake_timeout: Duration,
    pub(super) send_timeout: Duration,
    pub(super) min_send_rate: u64,
    pub(super) body_timeout: Duration,
}

impl ConnectionLimits {
    pub fn request_head_timeout(&self) -> Duration {
        self.request_head_timeout
    }
    pub fn keep_alive_timeout(&self) -> Duration {
        self.keep_alive_timeout
    }
    pub fn tls_handshake_timeout(&self) -> Duration {
        self.tls_handshake_timeout
    }
    pub fn send_timeout(&self) -> Duration {
        self.send_timeout
    }
    /// Bytes a second; `0` is off.
    pub fn min_send_rate(&self) -> u64 {
        self.min_send_rate
    }
    pub fn body_timeout(&self) -> Duration {
        self.body_timeout
    }
}

/// Per-request upload limits, validated (see [`super::RawUploads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadLimits {
    pub(super) max_upload_size: u64,
    pub(super) max_upload_files: u32,
    pub(super) write_lock_timeout: Duration,
}

impl UploadLimits {
    /// Never above `broker.max_upload_bytes`.
    pub fn max_upload_size(&self) -> u64 {
        self.max_upload_size
    }
    pub fn max_upload_files(&self) -> u32 {
        self.max_upload_files
    }
    pub fn write_lock_timeout(&self) -> Duration {
        self.write_lock_timeout
    }
}

/// Parent-owned features, validated.
pub type Features = super::RawFeatures;

/// A configuration that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidConfig {
    pub(super) workers: NonZeroU32,
    pub(super) worker_cpu_affinity: super::CpuAffinity,
    pub(super) recovery: RecoveryPolicy,
    pub(super) budgets: Budgets,
    pub(super) broker: BrokerLimits,
    pub(super) connections: ConnectionLimits,
    pub(super) uploads: UploadLimits,
    pub(super) features: Features,
    pub(super) tftp: super::TftpLimits,
    pub(super) listen: super::Listen,
    pub(super) proxy: super::ProxyRoutes,
    pub(super) aggregate_connection_limit: u64,
    pub(super) aggregate_compression_cache_size: u64,
    pub(super) recycling_overlap_compression_bound: u64,
    pub(super) aggregate_file_cache_size: u64,
    pub(super) recycling_overlap_file_cache_bound: u64,
}

impl ValidConfig {
    pub fn workers(&self) -> u32 {
        self.workers.get()
    }
    /// Whether the workers of this generation are pinned to CPUs (with the host's CPUs,
    /// [`crate::cpu_affinity::worker_cpus`] says which).
    pub fn worker_cpu_affinity(&self) -> super::CpuAffinity {
        self.worker_cpu_affinity
    }
    /// The listener set this generation's workers accept on.
    pub fn listen(&self) -> super::Listen {
        self.listen
    }
    /// The reverse proxy's routes this generation's workers serve.
    pub fn proxy(&self) -> &super::ProxyRoutes {
        &self.proxy
    }
    pub fn recovery(&self) -> &RecoveryPolicy {
        &self.recovery
    }
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }
    pub fn broker(&self) -> &BrokerLimits {
        &self.broker
    }
    pub fn connections(&self) -> &ConnectionLimits {
        &self.connections
    }
    pub fn uploads(&self) -> &UploadLimits {
        &self.uploads
    }
    pub fn features(&self) -> &Features {
        &self.features
    }
    pub fn tftp(&self) -> &super::TftpLimits {
        &self.tftp
    }
    /// `workers * max_connections`: the steady-state process-tree admission bound.
    pub fn aggregate_connection_limit(&self) -> u64 {
        self.aggregate_connection_limit
    }
    /// `workers * compression_cache_size`: retained encoded bytes in steady state.
    pub fn aggregate_compression_cache_size(&self) -> u64 {
        self.aggregate_compression_cache_size
    }
    /// `(workers + 1) * compression_cache_size`: the bound while one recycle overlaps.
    pub fn recycling_overlap_compression_bound(&self) -> u64 {
        self.recycling_overlap_compression_bound
    }
    /// `workers * file_cache_size`: retained file contents in steady state.
    pub fn aggregate_file_cache_size(&self) -> u64 {
        self.aggregate_file_cache_size
    }
    /// `(workers + 1) * file_cache_size`: the bound while one recycle overlaps.
    pub fn recycling_overlap_file_cache_bound(&self) -> u64 {
        self.recycling_overlap_file_cache_bound
    }
    /// The resident memory the workers may hold while a recycle overlaps an old worker
    /// with its replacement: `(workers + 1) * worker_max_rss`, the seed's "one worker of
    /// headroom" (0 when memory recycling is off: no limit bounds it).
    pub fn recycling_overlap_memory_bound(&self) -> u64 {
        self.recovery
            .worker_max_rss
            .map_or(0, |rss| rss.saturating_mul(u64::from(self.workers()) + 1))
    }
}
