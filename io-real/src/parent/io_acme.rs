//! The certificate manager's requests, as the real driver carries them out: the ACME I/O
//! goes to the ACME task on the host runtime; a new identity is installed here.

use servery_core::acme::AcmeAction;

use super::RealIo;

impl RealIo {
    pub(super) fn perform_acme(&mut self, action: AcmeAction) {
        match action {
            AcmeAction::InstallIdentity { cert_pem, key_pem } => {
                self.install_identity(cert_pem, key_pem)
            }
            // One line per failed attempt, with what the CA said (its problem document's
            // type and detail are in the error's text).
            AcmeAction::AttemptFailed {
                stage,
                error,
                failures,
                retry_in,
            } => tracing::warn!(
                event = "acme_failed",
                stage = stage.name(),
                error = %error,
                failures,
                retry_in_s = retry_in.as_secs(),
                "ACME attempt failed"
            ),
            action => match &self.acme {
                Some(link) => link.perform(action),
                None => tracing::warn!(?action, "an ACME request with no ACME task"),
            },
        }
    }

    /// The one place a new TLS identity takes effect: the core's TLS material takes it
    /// and hands it to every connected worker at once (and to every worker started
    /// later), so new handshakes get it without a restart and open connections keep
    /// theirs (decision 0025).
    fn install_identity(&mut self, cert_pem: String, key_pem: String) {
        let identity = crate::tls::Identity::from_pem(cert_pem, key_pem);
        match crate::parent::tls_material::offer(identity) {
            Ok(input) => {
                tracing::info!("new TLS identity from ACME handed to every worker");
                self.inbox
                    .push_back(servery_core::supervisor::Event::Tls(input));
            }
            Err(e) => tracing::error!(error = %e, "cannot install the new TLS identity"),
        }
    }
}
