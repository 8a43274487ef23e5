//! The manager's rules as pure functions: whether a certificate may go into service, when
//! one is due for renewal, and how long to wait before retrying.

use core::fmt;
use core::time::Duration;

use super::{CertFacts, UnixTime};
use crate::rng::CoreRng;

/// Why a certificate may not replace the one in service (or go into service at all).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Judgement {
    /// Its validity has not begun yet.
    NotYetValid,
    /// Its validity has ended.
    Expired,
    /// `not_after` is not after `not_before`.
    EmptyValidity,
    /// It does not cover a configured domain.
    MissingName(String),
    /// It expires no later than the certificate in service: it is not newer.
    NotNewer,
}

impl fmt::Display for Judgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Judgement::NotYetValid => f.write_str("not valid yet"),
            Judgement::Expired => f.write_str("expired"),
            Judgement::EmptyValidity => f.write_str("its validity period is empty"),
            Judgement::MissingName(n) => write!(f, "it does not cover {n}"),
            Judgement::NotNewer => {
                f.write_str("it expires no later than the certificate in service")
            }
        }
    }
}

/// May `candidate` be served at `wall` for `domains`, replacing `current`? A certificate
/// is served only inside its validity window and only for every configured domain, and it
/// replaces another only if it expires strictly later (so a replayed or older issuance
/// never displaces a newer one, even if the current one has expired).
pub fn judge(
    candidate: &CertFacts,
    current: Option<&CertFacts>,
    domains: &[String],
    wall: UnixTime,
) -> Result<(), Judgement> {
    if candidate.not_after <= candidate.not_before {
        return Err(Judgement::EmptyValidity);
    }
    if wall < candidate.not_before {
        return Err(Judgement::NotYetValid);
    }
    if wall >= candidate.not_after {
        return Err(Judgement::Expired);
    }
    if let Some(missing) = domains
        .iter()
        .find(|d| !candidate.names.iter().any(|n| n.eq_ignore_ascii_case(d)))
    {
        return Err(Judgement::MissingName(missing.clone()));
    }
    if let Some(current) = current
        && candidate.not_after <= current.not_after
    {
        return Err(Judgement::NotNewer);
    }
    Ok(())
}

/// When `cert` should be renewed: inside the CA's window when it gave one (a uniform draw
/// in it, as RFC 9773 asks, so a fleet does not renew at once), else at two thirds of its
/// lifetime; never later than `renew_before` ahead of its expiry.
pub fn renewal_due(
    cert: &CertFacts,
    window: Option<(UnixTime, UnixTime)>,
    renew_before: Duration,
    rng: &mut CoreRng,
) -> UnixTime {
    let by_rule = match window {
        Some((start, end)) if start < end => {
            let span = start.until(end).as_secs_f64();
            start.plus(Duration::from_secs_f64(span * rng.unit()))
        }
        Some((start, _)) => start,
        None => {
            let life = cert.not_before.until(cert.not_after);
            cert.not_before.plus(life * 2 / 3)
        }
    };
    let latest = UnixTime(
        cert.not_after
            .0
            .saturating_sub(i64::try_from(renew_before.as_secs()).unwrap_or(i64::MAX)),
    );
    by_rule.min(latest)
}

/// Retries after failures: capped exponential backoff with jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The wait after the first failure (before jitter).
    pub first: Duration,
    /// No wait is longer than this.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    /// One minute, doubling up to six hours: five failed validations an hour is Let's
    /// Encrypt's limit per account and name, and a broken setup should not burn it.
    fn default() -> Self {
        RetryPolicy {
            first: Duration::from_secs(60),
            cap: Duration::from_secs(6 * 3600),
        }
    }
}

impl RetryPolicy {
    /// No retry comes sooner than this: what keeps a broken CA from being hammered.
    pub fn floor(&self) -> Duration {
        self.first.min(self.cap) / 2
    }

    /// The wait before retry number `failures` (1 after the first failure): `first ×
    /// 2^(failures−1)`, capped, then drawn uniformly from its upper half, so that
    /// instances which failed together do not retry together. Always within
    /// `[first/2, cap]`.
    pub fn backoff(&self, failures: u32, rng: &mut CoreRng) -> Duration {
        let exp = failures.saturating_sub(1).min(32);
        let full = self
            .first
            .saturating_mul(1u32 << exp.min(31))
            .min(self.cap)
            .max(self.first.min(self.cap));
        full.mul_f64(0.5 + 0.5 * rng.unit())
    }
}
