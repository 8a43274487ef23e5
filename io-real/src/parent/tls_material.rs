//! The parent's side of the TLS material (decision 0025): the first material before any
//! worker starts, the randomness every later ticket key is minted from, the certificate
//! files read again on a reload, and what `ctl status` shows. The material itself lives
//! in the core (`servery_core::tls_material`), which hands it to every worker.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Value, json};
use servery_core::Instant;
use servery_core::parent::Parent;
use servery_core::tls_material::{
    CertExpiry, CertSummary, STATELESS_RESET_KEY_LEN, TICKET_ENTROPY_LEN, TicketPolicy, TlsInput,
    TlsState, check_identity_fits,
};

use crate::tls::{Identity, TlsError};

/// `--tls-cert` and `--tls-key`, read again on every reload.
#[derive(Debug, Clone)]
pub(super) struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Fresh randomness for one ticket key.
pub(super) fn entropy() -> Result<[u8; TICKET_ENTROPY_LEN], ring::error::Unspecified> {
    let mut bytes = [0u8; TICKET_ENTROPY_LEN];
    SystemRandom::new().fill(&mut bytes)?;
    Ok(bytes)
}

/// Seconds since the Unix epoch, now.
pub(super) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Says so, as a warning, when a certificate about to be served is expired or inside its
/// renewal window: at start and on every certificate loaded later (a reload's files, an
/// ACME certificate). `ctl status` and `/metrics` show the same at any time.
pub(super) fn warn_of_expiry(summary: &CertSummary) {
    let now = unix_now();
    let not_after = rfc3339(summary.not_after_unix);
    let subject = summary.subject.as_str();
    match summary.expiry(now) {
        CertExpiry::Expired => tracing::warn!(
            subject,
            not_after,
            "the TLS certificate being served expired at {not_after}: clients refuse it; replace the files and reload"
        ),
        CertExpiry::Expiring => tracing::warn!(
            subject,
            not_after,
            days_left = (summary.not_after_unix - now) / 86_400,
            "the TLS certificate being served expires at {not_after}, inside its renewal window: renew it and reload"
        ),
        CertExpiry::Valid | CertExpiry::Unknown => {}
    }
}

/// The material the first workers start with.
pub(super) fn start(identity: &Identity, now: Instant) -> Result<TlsState, String> {
    if let Some(summary) = identity.summary() {
        warn_of_expiry(&summary);
    }
    let bytes = entropy().map_err(|_| "cannot read OS randomness for a ticket key".to_owned())?;
    let mut reset_key = [0u8; STATELESS_RESET_KEY_LEN];
    SystemRandom::new()
        .fill(&mut reset_key)
        .map_err(|_| "cannot read OS randomness for the stateless-reset key".to_owned())?;
    TlsState::new(
        now,
        TicketPolicy::default(),
        identity.cert_pem.clone(),
        identity.key_pem.clone(),
        identity.summary().unwrap_or_default(),
        bytes,
        reset_key,
    )
    .map_err(|e| e.to_string())
}

/// The certificate files read and checked again (a reload): the new identity for the
/// core, or why the current one stays.
pub(super) fn reread(files: &TlsFiles) -> Result<TlsInput, TlsError> {
    offer(Identity::from_files(&files.cert, &files.key)?)
}

/// An identity checked as every new one is (the pair belongs together, it fits one
/// control frame), as the core's input that hands it to every worker: the certificate
/// files on reload, and ACME's issued certificates.
pub(super) fn offer(identity: Identity) -> Result<TlsInput, TlsError> {
    identity.certified()?;
    if let Err(e) = check_identity_fits(&identity.cert_pem, &identity.key_pem) {
        return Err(TlsError::Oversized(e.to_string()));
    }
    let summary = identity.summary().unwrap_or_default();
    warn_of_expiry(&summary);
    Ok(TlsInput::Identity {
        cert_pem: identity.cert_pem,
        key_pem: identity.key_pem,
        summary,
    })
}

/// The words a refused reload answers with.
pub(super) fn refusal(files: &TlsFiles, e: &TlsError) -> String {
    format!(
        "the certificate files ({}, {}) were not reloaded and the current certificate stays: {e}",
        files.cert.display(),
        files.key.display()
    )
}

fn rfc3339(unix: i64) -> String {
    let t = if unix >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(unix.unsigned_abs())
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(unix.unsigned_abs())
    };
    crate::civil_time::rfc3339(t)
}

/// The `tls` object of `ctl status --json` (`null` without TLS).
pub(super) fn status_json(parent: &Parent, now: Instant) -> Value {
    let Some(tls) = parent.tls() else {
        return Value::Null;
    };
    let s = tls.status();
    let CertSummary {
        subject,
        not_after_unix,
        ..
    } = &s.summary;
    json!({
        "subject": subject,
        "not_after": rfc3339(*not_after_unix),
        "not_after_unix": not_after_unix,
        "expiry": s.summary.expiry(unix_now()).name(),
        "renewal_window_from": rfc3339(s.summary.renewal_window_from_unix()),
        "identity_generation": s.identity_generation,
        "ticket_key_generation": s.ticket_key_generation,
        "ticket_keys": s.ticket_keys,
        "ticket_lifetime_s": tls.policy().ticket_lifetime.as_secs(),
        "next_ticket_key_in_s": s.next_rotation.map(|t| t.saturating_since(now).as_secs()),
        "last_error": s.last_refusal,
    })
}

/// The `tls` lines of `ctl status`.
pub(super) fn status_text(v: &Value, out: &mut String) {
    let Some(tls) = v.get("tls").filter(|t| !t.is_null()) else {
        return;
    };
    let plain = |k: &str| match &tls[k] {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let _ = writeln!(
        out,
        "tls: {} (not after {}), identity generation {}, ticket key generation {} ({} kept)",
        plain("subject"),
        plain("not_after"),
        plain("identity_generation"),
        plain("ticket_key_generation"),
        plain("ticket_keys"),
    );
    match tls["expiry"].as_str() {
        Some("expired") => {
            let _ = writeln!(
                out,
                "tls warning: the certificate expired at {}",
                plain("not_after")
            );
        }
        Some("expiring") => {
            let _ = writeln!(
                out,
                "tls warning: the certificate expires at {}, inside its renewal window (from {})",
                plain("not_after"),
                plain("renewal_window_from")
            );
        }
        _ => {}
    }
    if !tls["last_error"].is_null() {
        let _ = writeln!(out, "tls last error: {}", plain("last_error"));
    }
}
