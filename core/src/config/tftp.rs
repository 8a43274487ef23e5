//! The TFTP service's limits (`--tftp-*`), as written and as validated. The service is
//! the parent's alone, so none of this multiplies with the worker count.

use core::time::Duration;

use super::validate::Checker;

/// The most transfers `tftp.max_transfers` may allow. Each read holds a thread of the
/// parent's for its whole length, so the parent sizes its blocking pool by this.
pub const MAX_TRANSFERS: i64 = 4096;

/// As written.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RawTftp {
    /// Transfers in progress at once; one more is answered with an ERROR ("busy").
    pub max_transfers: i64,
    /// The largest file one transfer may read or write, in bytes.
    pub max_transfer_size: i64,
    /// Retransmissions of one packet before a silent peer is dropped.
    pub retries: i64,
    /// Seconds to wait for the peer before retransmitting, when the client names no
    /// `timeout` option.
    pub timeout: f64,
}

impl Default for RawTftp {
    fn default() -> Self {
        RawTftp {
            max_transfers: 16,
            max_transfer_size: 1 << 30,
            retries: 5,
            timeout: 2.0,
        }
    }
}

/// Validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TftpLimits {
    max_transfers: u32,
    max_transfer_size: u64,
    retries: u32,
    timeout: Duration,
}

impl TftpLimits {
    pub fn max_transfers(&self) -> u32 {
        self.max_transfers
    }
    pub fn max_transfer_size(&self) -> u64 {
        self.max_transfer_size
    }
    pub fn retries(&self) -> u32 {
        self.retries
    }
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// RFC 2349 carries a timeout in whole seconds up to 255; more is never what was meant.
const MAX_TIMEOUT_SECS: f64 = 255.0;

impl RawTftp {
    pub(super) fn check(&self, c: &mut Checker) -> TftpLimits {
        let max_transfers =
            c.count("tftp.max_transfers", self.max_transfers, 1, MAX_TRANSFERS) as u32;
        let max_transfer_size = c.count(
            "tftp.max_transfer_size",
            self.max_transfer_size,
            1,
            i64::MAX,
        );
        let retries = c.count("tftp.retries", self.retries, 0, 100) as u32;
        let timeout = c.seconds("tftp.timeout", self.timeout, false);
        if self.timeout.is_finite() && self.timeout > MAX_TIMEOUT_SECS {
            c.fail(
                "tftp.timeout",
                format!(
                    "must be <= {MAX_TIMEOUT_SECS} seconds, the most a TFTP timeout option carries (got {})",
                    self.timeout
                ),
            );
        }
        TftpLimits {
            max_transfers,
            max_transfer_size,
            retries,
            timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate::tests::fields;
    use super::MAX_TIMEOUT_SECS;
    use crate::RawConfig;

    #[test]
    fn defaults_validate() {
        let v = RawConfig::default().validate().expect("valid");
        assert_eq!(v.tftp().max_transfers(), 16);
        assert_eq!(v.tftp().retries(), 5);
    }

    #[test]
    fn each_limit_names_its_field() {
        let mut raw = RawConfig::default();
        raw.tftp.max_transfers = 0;
        raw.tftp.max_transfer_size = 0;
        raw.tftp.retries = -1;
        raw.tftp.timeout = 0.0;
        assert_eq!(
            fields(&raw),
            [
                "tftp.max_transfers",
                "tftp.max_transfer_size",
                "tftp.retries",
                "tftp.timeout"
            ]
        );
        raw = RawConfig::default();
        raw.tftp.timeout = 300.0;
        assert_eq!(fields(&raw), ["tftp.timeout"]);
        raw.tftp.timeout = MAX_TIMEOUT_SECS;
        assert!(
            fields(&raw).is_empty(),
            "timeout rule: 255 s, the most the option carries, is allowed"
        );
    }

    #[test]
    fn tftp_runs_with_many_workers() {
        let mut raw = RawConfig {
            workers: 4,
            ..RawConfig::default()
        };
        raw.features.tftp = true;
        assert!(fields(&raw).is_empty());
    }
}
