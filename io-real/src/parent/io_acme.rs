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
            action => match &self.acme {
                Some(link) => link.perform(action),
                None => tracing::warn!(?action, "an ACME request with no ACME task"),
            },
        }
    }

    /// The one place a new TLS identity takes effect. Workers started from now on get it
    /// in their setup preamble. Workers already running keep the identity they started
    /// with until they are replaced (`ctl recycle` replaces them one at a time, without a
    /// failed request); a live hand-off to running workers belongs here too.
    fn install_identity(&mut self, cert_pem: String, key_pem: String) {
        match self.launcher.set_identity(cert_pem, key_pem) {
            Ok(()) => tracing::info!("new TLS identity installed for workers started from now on"),
            Err(e) => tracing::error!(error = %e, "cannot install the new TLS identity"),
        }
    }
}
