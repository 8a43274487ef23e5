//! The certificate manager (ACME, RFC 8555, HTTP-01) as a pure machine: time in, actions
//! out. It decides when to order, what to publish for the CA's validation, whether an
//! issued certificate may replace the one in service, when to store it and hand it to the
//! workers, and when to renew or retry. It never talks to a CA, reads a file or parses a
//! certificate: the driver does those and reports facts ([`Certificate`]), so the rules —
//! above all *never replace a valid certificate with an invalid or older one* — are
//! written once, here, and tested without a network.
//!
//! Two clocks come in. `now` is the core's monotonic [`crate::time::Instant`], on which deadlines are
//! armed; `wall` is the driver's Unix time when it observed the event, which is what a
//! certificate's validity is written in. The machine keeps the offset between them from
//! the latest event, so a renewal due at a wall time becomes a monotonic deadline.

mod machine;
#[cfg(test)]
mod routing_tests;
mod schedule;
#[cfg(test)]
mod tests;

use core::fmt;
use core::time::Duration;

pub use machine::{CertManager, ManagerStatus, Phase};
pub use schedule::{Judgement, RetryPolicy, judge, renewal_due};

/// Seconds since the Unix epoch, as certificates state validity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixTime(pub i64);

impl UnixTime {
    pub fn plus(self, d: Duration) -> UnixTime {
        UnixTime(
            self.0
                .saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
        )
    }

    /// `later - self`, zero when `later` is not later.
    pub fn until(self, later: UnixTime) -> Duration {
        Duration::from_secs(u64::try_from(later.0.saturating_sub(self.0)).unwrap_or(0))
    }
}

impl fmt::Display for UnixTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{}", self.0)
    }
}

/// What the driver read from a certificate (it parses; the machine judges).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    pub not_before: UnixTime,
    pub not_after: UnixTime,
    /// The DNS names the leaf certificate covers (subject alternative names).
    pub names: Vec<String>,
    /// The leaf's serial number, hex, for status and logs.
    pub serial: String,
}

/// A certificate chain (leaf first) with its private key, as PEM text, and its facts.
#[derive(Clone, PartialEq, Eq)]
pub struct Certificate {
    pub facts: CertFacts,
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("facts", &self.facts)
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// One HTTP-01 challenge: `GET /.well-known/acme-challenge/{token}` must answer
/// `key_authorization`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Challenge {
    pub token: String,
    pub key_authorization: String,
}

/// The longest token and key authorization accepted from a CA (RFC 8555 tokens carry 128
/// bits of entropy, 43 base64url characters; the key authorization adds a 43-character
/// thumbprint). Generous, but bounded: the broker's table has a fixed budget.
pub const MAX_TOKEN: usize = 256;
pub const MAX_KEY_AUTHORIZATION: usize = 512;
/// At most this many challenges are published for one order (one per domain).
pub const MAX_CHALLENGES: usize = 100;

impl Challenge {
    /// A token is base64url (RFC 8555 §8.3), so it is safe as one path segment; a key
    /// authorization is `token.thumbprint`, both base64url.
    pub fn check(&self) -> Result<(), AcmeError> {
        let b64url = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        let token_ok = self.token.len() <= MAX_TOKEN && b64url(&self.token);
        let ka_ok = self.key_authorization.len() <= MAX_KEY_AUTHORIZATION
            && self
                .key_authorization
                .split_once('.')
                .is_some_and(|(t, thumb)| t == self.token && b64url(thumb));
        if token_ok && ka_ok {
            Ok(())
        } else {
            Err(AcmeError::BadChallenge {
                token: self.token.chars().take(64).collect(),
            })
        }
    }
}

/// Why an attempt failed. The driver maps its client's errors onto these; the machine adds
/// its own judgements of what was issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcmeError {
    /// The CA could not be reached, or answered something that is not ACME.
    #[error("cannot reach the ACME directory: {0}")]
    Unreachable(String),
    /// The CA answered with an RFC 7807 problem (rate limit, bad account, ...).
    #[error("the CA refused: {0}")]
    Refused(String),
    /// The CA could not validate a challenge.
    #[error("challenge validation failed: {0}")]
    ValidationFailed(String),
    /// A challenge the CA handed out is not one servery can publish safely.
    #[error("the CA sent an unusable HTTP-01 challenge (token {token:?})")]
    BadChallenge { token: String },
    /// The CA offered no HTTP-01 challenge for a domain.
    #[error("no HTTP-01 challenge offered for {0}")]
    NoHttp01(String),
    /// The issued certificate is not one the machine may put in service.
    #[error("the issued certificate was refused: {0}")]
    Unacceptable(Judgement),
    /// The certificate could not be parsed, or its key does not match.
    #[error("the issued certificate is unusable: {0}")]
    Malformed(String),
    /// The state directory could not be written.
    #[error("cannot store the certificate: {0}")]
    Storage(String),
    /// The attempt took longer than the machine allows.
    #[error("the attempt did not finish within {0:?}")]
    TimedOut(Duration),
}

/// What the driver reports. Every event comes with the driver's wall time
/// ([`CertManager::handle`]); `order` names the attempt it belongs to, and an event for an
/// attempt that is no longer in flight is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcmeEvent {
    /// What the state directory held when the manager started (`None`: nothing usable).
    Loaded(Option<Certificate>),
    /// The CA's HTTP-01 challenges for the order: the machine publishes them, then tells
    /// the driver to answer.
    Challenges {
        order: u64,
        challenges: Vec<Challenge>,
    },
    /// The CA issued this certificate for the order.
    Issued {
        order: u64,
        certificate: Certificate,
    },
    /// The certificate the machine asked to store is on disk.
    Stored { order: u64 },
    /// The attempt failed.
    Failed { order: u64, error: AcmeError },
    /// The CA's suggested renewal window for the certificate in service (ACME ARI).
    RenewalWindow {
        serial: String,
        start: UnixTime,
        end: UnixTime,
    },
    /// The operator asked for a renewal now (`ctl acme-renew`).
    RenewNow,
}

/// What the machine asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcmeAction {
    /// Order a certificate for `domains`: account, new order, authorizations; report
    /// [`AcmeEvent::Challenges`], then wait for [`AcmeAction::Answer`].
    Order { order: u64, domains: Vec<String> },
    /// Make these answerable at `/.well-known/acme-challenge/TOKEN` (the parent puts
    /// them in the broker; never seen by a driver).
    Publish(Vec<Challenge>),
    /// The challenges are published: tell the CA to validate, then finalize and download
    /// the certificate; report [`AcmeEvent::Issued`].
    Answer { order: u64 },
    /// Withdraw every published challenge (the parent clears the broker's table).
    Withdraw,
    /// Write the certificate to the state directory atomically; report
    /// [`AcmeEvent::Stored`].
    Store {
        order: u64,
        certificate: Certificate,
    },
    /// Serve this identity for every new handshake from now on.
    InstallIdentity { cert_pem: String, key_pem: String },
    /// Ask the CA for its renewal window for this certificate (ACME ARI), if it has one.
    AskRenewalInfo { serial: String },
    /// An attempt failed: say so (one log line per failed attempt, with the CA's problem
    /// detail in `error`). Nothing to carry out.
    AttemptFailed {
        stage: Stage,
        error: String,
        /// Failures in a row, this one included.
        failures: u32,
        /// How long until the next attempt.
        retry_in: Duration,
    },
}

/// Where in an attempt a failure happened: the phase the attempt was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Account, new order, authorizations, the challenges handed out.
    Order,
    /// The CA validating the challenges, finalizing and issuing; the issued certificate
    /// judged.
    Validate,
    /// The certificate written to the state directory.
    Store,
}

impl Stage {
    pub const ALL: [Stage; 3] = [Stage::Order, Stage::Validate, Stage::Store];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Order => "order",
            Stage::Validate => "validate",
            Stage::Store => "store",
        }
    }
}

/// What the certificate means for readiness (decision 0057).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertHealth {
    /// A valid certificate is served and the last attempt, if any, succeeded.
    Good,
    /// A valid certificate is served, but the attempts to renew it are failing.
    Renewing,
    /// None was issued yet: the first order is in flight or waits to be retried, and the
    /// self-signed placeholder serves meanwhile.
    Issuing,
    /// The certificate in service is outside its validity (expired, or not yet valid).
    Expired,
}

/// How the manager was configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerConfig {
    /// The DNS names the certificate must cover (the first is the subject).
    pub domains: Vec<String>,
    pub retry: RetryPolicy,
    /// The longest one attempt (order to stored certificate) may take before it counts as
    /// failed, so a CA that never answers cannot hold the machine.
    pub attempt_timeout: Duration,
    /// Renew when this little of the certificate's life is left at the latest, whatever
    /// the two-thirds rule or the CA's window say (a test knob for forced renewals; 0:
    /// only the rules).
    pub renew_before: Duration,
}

impl ManagerConfig {
    pub fn new(domains: Vec<String>) -> Self {
        ManagerConfig {
            domains,
            retry: RetryPolicy::default(),
            attempt_timeout: Duration::from_secs(600),
            renew_before: Duration::ZERO,
        }
    }
}
