//! WebDAV's command line: the parent's flags ([`DavArgs`], flattened into `servery`'s
//! options). The lock table's size and timeout cap are the broker's (`RawConfig.broker`),
//! service-wide; what shapes how a worker answers is passed on its command line.

use clap::Args;
use servery_core::config::RawBroker;

/// The default bound on the resources one PROPFIND with Depth infinity answers for.
pub const DEFAULT_PROPFIND_MAX_ENTRIES: u64 = 10_000;

fn broker() -> RawBroker {
    RawBroker::default()
}

/// WebDAV (`--dav`) and its lock table.
#[derive(Debug, Clone, Args, serde::Serialize, serde::Deserialize)]
#[command(next_help_heading = "WebDAV (locks are held by the parent's broker)")]
pub struct DavArgs {
    /// Answer WebDAV (classes 1 and 2: PROPFIND, LOCK, UNLOCK); with --upload also PUT,
    /// DELETE, MKCOL, COPY, MOVE and PROPPATCH. Without --upload those are refused (403).
    #[arg(long, env = "SERVERY_DAV", value_parser = clap::builder::BoolishValueParser::new())]
    pub dav: bool,
    /// Locks held at once, service-wide; one more LOCK gets 503.
    #[arg(long, value_name = "N", env = "SERVERY_DAV_MAX_LOCKS", default_value_t = broker().max_dav_locks, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub dav_max_locks: i64,
    /// The longest lock a client may take or refresh to, in seconds (a longer or
    /// `Infinite` Timeout is granted this).
    #[arg(long, value_name = "SECS", env = "SERVERY_DAV_LOCK_TIMEOUT_MAX", default_value_t = broker().max_dav_lock_timeout, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub dav_lock_timeout_max: f64,
    /// Resources one PROPFIND with Depth infinity may answer for; beyond, 403
    /// propfind-finite-depth.
    #[arg(long, value_name = "N", env = "SERVERY_DAV_PROPFIND_MAX_ENTRIES", default_value_t = DEFAULT_PROPFIND_MAX_ENTRIES, value_parser = clap::value_parser!(u64).range(1..))]
    pub dav_propfind_max_entries: u64,
    /// Keep the lock table in DIR (journalled on every change), so a restart of servery,
    /// even after `kill -9`, restores every lock not yet expired. Without it locks are
    /// lost when the parent stops. Must not be inside the served directory.
    #[arg(long, value_name = "DIR", env = "SERVERY_STATE_DIR", requires = "dav")]
    pub state_dir: Option<std::path::PathBuf>,
}

crate::knobs::core_fields! {
    impl DavArgs {
        dav => features.webdav;
        dav_max_locks => broker.max_dav_locks;
        dav_lock_timeout_max => broker.max_dav_lock_timeout;
        state_dir => features.dav_persistent_locks = |a| a.dav && a.state_dir.is_some();
    }
}
