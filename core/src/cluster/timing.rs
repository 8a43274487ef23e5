//! The cluster's timing rule (decision 0096): a host stops granting before its etcd
//! lease can expire anywhere else.

use core::time::Duration;

/// The numbers of decision 0096 (Kubernetes' leader-election numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterTiming {
    /// The etcd lease's TTL.
    pub lease_ttl: Duration,
    /// How often the parent sends a keep-alive.
    pub keepalive_every: Duration,
    /// How long after sending the last acknowledged keep-alive the host may still grant
    /// and publish.
    pub grant_deadline: Duration,
    /// How far the host's clock and etcd's may drift apart over one TTL.
    pub skew_bound: Duration,
    /// How long the host waits for one store operation before it answers 503.
    pub op_timeout: Duration,
    /// The `Retry-After` a refused write is sent.
    pub retry_after: Duration,
}

/// A timing that breaks the rule, named by the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimingError {
    #[error(
        "cluster timing: grant deadline ({deadline:?}) + skew bound ({skew:?}) must be less than the lease TTL ({ttl:?})"
    )]
    DeadlinePastTtl {
        deadline: Duration,
        skew: Duration,
        ttl: Duration,
    },
    #[error(
        "cluster timing: the keep-alive period ({every:?}) must be shorter than the grant deadline ({deadline:?})"
    )]
    KeepAliveTooRare { every: Duration, deadline: Duration },
    #[error("cluster timing: the lease TTL must be a whole number of seconds of at least 2 s")]
    TtlNotWholeSeconds,
    #[error("cluster timing: every duration must be more than zero")]
    Zero,
}

impl Default for ClusterTiming {
    fn default() -> Self {
        ClusterTiming {
            lease_ttl: Duration::from_secs(15),
            keepalive_every: Duration::from_secs(2),
            grant_deadline: Duration::from_secs(10),
            skew_bound: Duration::from_secs(2),
            op_timeout: Duration::from_secs(2),
            retry_after: Duration::from_secs(2),
        }
    }
}

impl ClusterTiming {
    /// The rule of decision 0096: `grant_deadline + skew_bound < lease_ttl`, and a
    /// keep-alive more often than the deadline.
    pub fn check(&self) -> Result<(), TimingError> {
        if [
            self.lease_ttl,
            self.keepalive_every,
            self.grant_deadline,
            self.op_timeout,
        ]
        .iter()
        .any(Duration::is_zero)
        {
            return Err(TimingError::Zero);
        }
        if self.lease_ttl.subsec_nanos() != 0 || self.lease_ttl < Duration::from_secs(2) {
            return Err(TimingError::TtlNotWholeSeconds);
        }
        if self.grant_deadline + self.skew_bound >= self.lease_ttl {
            return Err(TimingError::DeadlinePastTtl {
                deadline: self.grant_deadline,
                skew: self.skew_bound,
                ttl: self.lease_ttl,
            });
        }
        if self.keepalive_every >= self.grant_deadline {
            return Err(TimingError::KeepAliveTooRare {
                every: self.keepalive_every,
                deadline: self.grant_deadline,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_keeps_the_rule() {
        assert_eq!(ClusterTiming::default().check(), Ok(()));
    }

    #[test]
    fn a_deadline_that_reaches_the_ttl_is_refused() {
        let t = ClusterTiming {
            grant_deadline: Duration::from_secs(13),
            ..ClusterTiming::default()
        };
        let err = t.check().expect_err("refused");
        assert!(matches!(err, TimingError::DeadlinePastTtl { .. }));
        assert!(err.to_string().contains("must be less than the lease TTL"));
    }

    #[test]
    fn a_keepalive_rarer_than_the_deadline_is_refused() {
        let t = ClusterTiming {
            keepalive_every: Duration::from_secs(10),
            ..ClusterTiming::default()
        };
        assert!(matches!(
            t.check(),
            Err(TimingError::KeepAliveTooRare { .. })
        ));
    }
}
