//! The write flow's command line: the upload flags ([`UploadArgs`], flattened into
//! `servery`'s options), which every worker receives with its generation's values.
//!
//! The global budgets (`--max-active-uploads`, `--max-upload-bytes`,
//! `--max-partial-uploads`, `--max-write-leases`), the lease and partial-upload lifetimes,
//! the broker's reply timeout and its per-worker queue bound are `RawConfig.broker` fields:
//! the parent's broker enforces them for the whole service, never per worker. The
//! per-request limits (`--max-upload-size`, `--max-upload-files`, `--write-lock-timeout`)
//! are `RawConfig.uploads` fields, so validation checks them against the budgets and
//! `--check-config` shows them.

use std::time::Duration;

use clap::Args;
use servery_core::ValidConfig;
use servery_core::config::{RawBroker, RawUploads};

use super::WriteSettings;
use crate::http::upload::UploadConfig;
use crate::worker::broker::BrokerHandle;

pub use servery_core::config::DEFAULT_MAX_UPLOAD_SIZE;

fn broker() -> RawBroker {
    RawBroker::default()
}

fn uploads() -> RawUploads {
    RawUploads::default()
}

/// Uploads (`--upload`) and their global budgets.
#[derive(Debug, Clone, Args, serde::Serialize, serde::Deserialize)]
#[command(next_help_heading = "Uploads (budgets are global, owned by the parent's broker)")]
pub struct UploadArgs {
    /// Accept uploads: `PUT /path` (resumable with Content-Range) and multipart/form-data
    /// `POST` to a directory. Works with any number of workers: writes to one target
    /// serialize through the parent's lease table. HTML, SVG and XML files are then
    /// served under `Content-Security-Policy: sandbox` (a page someone uploaded never runs
    /// as the site).
    #[arg(long, env = "SERVERY_UPLOAD", value_parser = clap::builder::BoolishValueParser::new())]
    pub upload: bool,
    /// Let uploads replace existing files (off: 409 Conflict).
    #[arg(long, env = "SERVERY_ALLOW_OVERWRITE", value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_overwrite: bool,
    /// Largest single upload in bytes [default: 1 GiB or --max-upload-bytes, whichever is
    /// smaller; never more than --max-upload-bytes]. An upload without Content-Length
    /// reserves its X-Expected-Entity-Length or OC-Total-Length hint, else 8 MiB, and
    /// grows its share of --max-upload-bytes as it arrives (503 if the budget is full).
    #[arg(
        long,
        value_name = "BYTES",
        env = "SERVERY_MAX_UPLOAD_SIZE",
        allow_negative_numbers = true,
        group = crate::settings::LIVE
    )]
    pub max_upload_size: Option<i64>,
    /// Files one multipart POST may create; the request is refused (413) before the one
    /// past the limit is written.
    #[arg(long, value_name = "N", env = "SERVERY_MAX_UPLOAD_FILES", default_value_t = uploads().max_upload_files, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub max_upload_files: i64,
    /// How long an upload waits for a target another upload is writing (0: 409 at once).
    /// A write with If-Match, If-None-Match or If-Unmodified-Since waits at least 5 s, so
    /// that it gets the 412 or success that is true (decision 0061).
    #[arg(long, value_name = "SECS", env = "SERVERY_WRITE_LOCK_TIMEOUT", default_value_t = uploads().write_lock_timeout, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub write_lock_timeout: f64,
    /// Uploads in progress at once, service-wide; more get 503 before their body is read.
    #[arg(long, value_name = "N", env = "SERVERY_MAX_ACTIVE_UPLOADS", default_value_t = broker().max_active_uploads, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub max_active_uploads: i64,
    /// Bytes reserved by uploads in progress at once, service-wide.
    #[arg(long, value_name = "BYTES", env = "SERVERY_MAX_UPLOAD_BYTES", default_value_t = broker().max_upload_bytes, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub max_upload_bytes: i64,
    /// Resumable uploads held at once, service-wide.
    #[arg(long, value_name = "N", env = "SERVERY_MAX_PARTIAL_UPLOADS", default_value_t = broker().max_partial_uploads, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub max_partial_uploads: i64,
    /// Write leases held at once, service-wide: one per upload, WebDAV write or TFTP write
    /// in progress; one more gets 503 before its body is read.
    #[arg(long, value_name = "N", env = "SERVERY_MAX_WRITE_LEASES", default_value_t = broker().max_leases, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub max_write_leases: i64,
    /// How long a write lease lasts unless its worker renews it. A worker that dies frees
    /// its leases at once; this bounds one that hangs. More than --broker-reply-timeout,
    /// and than --body-timeout when uploads are on.
    #[arg(long, value_name = "SECS", env = "SERVERY_WRITE_LEASE_TTL", default_value_t = broker().lease_ttl, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub write_lease_ttl: f64,
    /// How long a resumable upload nobody resumes is kept: its partial file and its share
    /// of the budgets (86400: a day).
    #[arg(long, value_name = "SECS", env = "SERVERY_UPLOAD_PARTIAL_TTL", default_value_t = broker().partial_ttl, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub upload_partial_ttl: f64,
    /// How long a worker waits for the broker's answer before failing the request (503).
    #[arg(long, value_name = "SECS", env = "SERVERY_BROKER_REPLY_TIMEOUT", default_value_t = broker().reply_timeout, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub broker_reply_timeout: f64,
    /// Broker requests one worker may have waiting for an answer; one more gets 503 at
    /// once instead of queueing behind a stalled broker.
    #[arg(long, value_name = "N", env = "SERVERY_BROKER_QUEUE_CAPACITY", default_value_t = broker().queue_capacity, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub broker_queue_capacity: i64,
}

crate::knobs::core_fields! {
    impl UploadArgs {
        upload => features.uploads;
        max_upload_size => uploads.max_upload_size;
        max_upload_files => uploads.max_upload_files;
        write_lock_timeout => uploads.write_lock_timeout;
        max_active_uploads => broker.max_active_uploads;
        max_upload_bytes => broker.max_upload_bytes;
        max_partial_uploads => broker.max_partial_uploads;
        max_write_leases => broker.max_leases;
        write_lease_ttl => broker.lease_ttl;
        upload_partial_ttl => broker.partial_ttl;
        broker_reply_timeout => broker.reply_timeout;
        broker_queue_capacity => broker.queue_capacity;
    }
}

impl UploadArgs {
    /// How the parent's own writers (TFTP) write: as a worker would, under the parent's
    /// temporary-file prefix (worker id 0, which no worker has).
    pub fn parent_write_settings(&self, config: &ValidConfig) -> WriteSettings {
        let u = config.uploads();
        WriteSettings {
            worker_id: servery_core::parent::PARENT_CLIENT.0,
            allow_overwrite: self.allow_overwrite,
            max_upload_size: u.max_upload_size(),
            max_upload_files: 1,
            body_timeout: config.connections().body_timeout(),
            write_lock_timeout: u.write_lock_timeout(),
            partial_ttl: config.broker().partial_ttl(),
        }
    }
}

/// How a worker writes: its settings are the generation's (`worker::setup`), validated.
impl UploadArgs {
    /// The broker client's outstanding-request bound and reply timeout.
    pub fn broker_client(&self) -> (u32, Duration) {
        (
            u32::try_from(self.broker_queue_capacity)
                .unwrap_or(u32::MAX)
                .max(1),
            crate::worker::site_config::secs(self.broker_reply_timeout),
        )
    }

    /// The site's upload configuration, when uploads are on. `body_timeout` is the
    /// connection deadline for a body that stops delivering bytes; `partial_ttl` how long
    /// a resumable upload's partial file is kept.
    pub fn worker_config(
        &self,
        worker_id: u64,
        broker: &BrokerHandle,
        body_timeout: Duration,
        partial_ttl: Duration,
    ) -> Option<UploadConfig> {
        // The broker round-trip measurement, when asked for (docs/benchmarks.md); only
        // in builds with the `test-hooks` feature.
        #[cfg(feature = "test-hooks")]
        broker.spawn_bench_from_env(worker_id);
        self.upload.then(|| UploadConfig {
            settings: WriteSettings {
                worker_id,
                allow_overwrite: self.allow_overwrite,
                // The generation's value: the core resolved the default.
                max_upload_size: self
                    .max_upload_size
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(DEFAULT_MAX_UPLOAD_SIZE),
                max_upload_files: u32::try_from(self.max_upload_files).unwrap_or(u32::MAX),
                body_timeout,
                write_lock_timeout: crate::worker::site_config::secs(self.write_lock_timeout),
                partial_ttl,
            },
            broker: broker.clone(),
        })
    }
}
