//! Typed configuration: the raw form a user writes, and the validated form the machines
//! run on.
//!
//! [`RawConfig`] holds what a user may write, including nonsense (negative timings, NaN,
//! an inverted backoff). [`RawConfig::validate`] is the only way to obtain a
//! [`ValidConfig`], and it reports every problem at once, each naming its field and the
//! rule it breaks.

mod listen;
mod proxy;
mod raw;
mod tftp;
mod valid;
mod validate;
mod written;

pub use listen::Listen;
pub use proxy::{
    MAX_ROUTES as MAX_PROXY_ROUTES, MAX_TRUSTED_PEERS, PROBE_BOUND, ProbeClients, ProxyRoute,
    ProxyRoutes, ProxySettings, RawProxy, clean_path as clean_route_path,
};
pub use raw::{
    CpuAffinity, DEFAULT_MAX_UPLOAD_SIZE, LogPolicy, RawBroker, RawBudgets, RawConfig,
    RawConnections, RawFeatures, RawRecovery, RawUploads, RestartJitter,
};
pub use tftp::{MAX_TRANSFERS as MAX_TFTP_TRANSFERS, RawTftp, TftpLimits};
pub use valid::{
    BrokerLimits, Budgets, ConnectionLimits, Features, RecoveryPolicy, UploadLimits, ValidConfig,
};

use core::fmt;

/// One rule broken by one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The field's name as a user writes it (`recovery.restart_backoff_max`).
    pub field: &'static str,
    /// The rule, in words (`must be >= recovery.restart_backoff_initial (0.25)`).
    pub rule: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

/// Errors of the configuration layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// One or more fields break their rules; every issue is listed.
    #[error("invalid configuration:\n{}", list(.0))]
    Invalid(Vec<ConfigIssue>),
}

impl ConfigError {
    pub fn issues(&self) -> &[ConfigIssue] {
        match self {
            ConfigError::Invalid(issues) => issues,
        }
    }
}

fn list(issues: &[ConfigIssue]) -> String {
    issues
        .iter()
        .map(|i| format!("  - {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}
