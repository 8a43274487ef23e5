//! The access log's command line: the parent's flags ([`AccessLogArgs`], flattened into
//! `servery`'s options), which every worker receives (it uses the format and the policy).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use servery_core::config::LogPolicy;

use super::format::Format;

/// What a full log queue does (`--access-log-overflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
pub enum Overflow {
    /// Requests wait for room: no line is lost; a slow log slows requests down.
    Block,
    /// Lines that find no room are dropped and counted: requests never wait for the log.
    Drop,
}

impl Overflow {
    pub fn policy(self) -> LogPolicy {
        match self {
            Overflow::Block => LogPolicy::Block,
            Overflow::Drop => LogPolicy::Drop,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Overflow::Block => "block",
            Overflow::Drop => "drop",
        }
    }
}

/// The access log (`--access-log`).
#[derive(Debug, Clone, Args, serde::Serialize, serde::Deserialize)]
#[command(next_help_heading = "Access log (written by the parent alone)")]
pub struct AccessLogArgs {
    /// Write one line per request to PATH (`-`: standard output). The parent holds the
    /// only handle: lines from every worker, never interleaved or torn. The file is made
    /// with mode 0640 and never opened through a symlink; SIGUSR1 or `servery ctl
    /// reopen-logs` reopens it (after logrotate moved it).
    #[arg(long, value_name = "PATH", env = "SERVERY_ACCESS_LOG")]
    pub access_log: Option<PathBuf>,
    /// The line format.
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        env = "SERVERY_ACCESS_LOG_FORMAT",
        default_value = "combined"
    )]
    pub access_log_format: Format,
    /// What happens when the log cannot keep up.
    #[arg(
        long,
        value_enum,
        value_name = "POLICY",
        env = "SERVERY_ACCESS_LOG_OVERFLOW",
        default_value = "block"
    )]
    pub access_log_overflow: Overflow,
    /// Batches of lines (each from one worker, up to 64 KiB: the default bounds the
    /// queue to 16 MiB) the parent holds for the writer; when full, the overflow policy
    /// decides.
    #[arg(long, value_name = "N", env = "SERVERY_ACCESS_LOG_QUEUE", default_value_t = servery_core::config::RawBroker::default().log_queue_capacity, allow_negative_numbers = true, group = crate::settings::LIVE)]
    pub access_log_queue: i64,
}

crate::knobs::core_fields! {
    impl AccessLogArgs {
        access_log => features.access_log = |a| a.access_log.is_some();
        access_log_overflow => broker.log_policy via Overflow::policy;
        access_log_queue => broker.log_queue_capacity;
    }
}
