//! The operations flags: the admin listener (health and metrics) and the log format.

use std::net::SocketAddr;

use clap::{Args, ValueEnum};

/// How log records are written to standard error.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum LogFormat {
    /// One human-readable line per record.
    #[default]
    Text,
    /// One JSON object per line, with every field of the record.
    Json,
}

impl LogFormat {
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// Health, metrics and logs.
#[derive(Debug, Clone, Args, serde::Serialize, serde::Deserialize)]
#[command(next_help_heading = "Operations (health, metrics, logs)")]
pub struct OpsArgs {
    /// Serve /livez, /readyz and /metrics (Prometheus text format) over plain HTTP on
    /// ADDR (e.g. 127.0.0.1:9090), a listener the parent owns apart from the file-serving
    /// ones and their budgets. Off unless given; keep it on a private address.
    #[arg(long, value_name = "ADDR", env = "SERVERY_ADMIN")]
    pub admin: Option<SocketAddr>,
    /// How log records are written to standard error: `text`, or `json` (one object per
    /// line). Workers write theirs the same way.
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        env = "SERVERY_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

// Read by the parent when it starts (listeners, logging); none is a core field.
crate::knobs::core_fields! {
    impl OpsArgs {}
}
