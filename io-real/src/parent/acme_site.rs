//! What an `--acme` site starts with, before anything is bound: the stored certificate if
//! the core's rule accepts it (the same `judge` the manager applies), else a self-signed
//! placeholder for the domains until the first issuance is installed; and the workers'
//! flags for the cleartext HTTP-01 listeners.

use servery_core::acme::judge;

use super::services::acme::args::AcmeSettings;
use super::services::acme::{facts, store::StateDir};
use super::site::{PreparedSite, SiteIssue, fingerprint};
use crate::tls::Identity;

pub(super) fn prepare(
    mut site: PreparedSite,
    acme: &AcmeSettings,
    bind_count: usize,
    https_port: Option<u16>,
) -> Result<PreparedSite, Vec<SiteIssue>> {
    let issue = |flag, message: String| vec![SiteIssue { flag, message }];
    let state = StateDir::open(&acme.dir)
        .map_err(|e| issue("--acme-dir", format!("{}: {e}", acme.dir.display())))?;
    let stored = state
        .load_certificate()
        .ok()
        .flatten()
        .and_then(|(c, k)| facts::certificate(c, k).ok())
        .filter(|c| judge(&c.facts, None, &acme.domains, facts::wall_now()).is_ok());
    let (cert_pem, key_pem) = match stored {
        Some(c) => (c.cert_pem, c.key_pem),
        None => {
            let id =
                Identity::self_signed(&acme.domains).map_err(|e| issue("--acme", e.to_string()))?;
            (id.cert_pem, id.key_pem)
        }
    };
    let identity = Identity::from_pem(cert_pem, key_pem);
    site.fingerprint = identity
        .certificates()
        .ok()
        .and_then(|c| c.into_iter().next())
        .map(|leaf| fingerprint(&leaf));
    // The parent's TLS material starts with it and hands it to every worker.
    site.identity = Some(identity);
    site.worker.tls = true;
    site.worker.acme_http_listeners = Some(u32::try_from(bind_count).unwrap_or(u32::MAX));
    site.worker.https_port = https_port;
    Ok(site)
}
