//! TLS to `https://` and `h2://` upstreams: rustls on ring, HTTP/1.1 by ALPN (`h2://`
//! offers HTTP/2 first), the certificate verified for the URL's host against the
//! system's roots or `--proxy-ca`.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

/// What a TLS connection to an upstream offers by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Offer {
    /// `h2`, then `http/1.1`: the upstream chooses (`h2://`).
    H2OrHttp11,
    /// `http/1.1` only (`https://`).
    Http11,
}

/// The certificates of a PEM file, at least one; an error names the file.
pub(crate) fn pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in the file", path.display()));
    }
    Ok(certs)
}

/// The client configuration for upstream TLS; an error names what is wrong.
pub(super) fn client_config(ca: Option<&Path>, offer: Offer) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in pem_certs(path)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        None => {
            // Read once per worker at start; roots that fail to parse are skipped, as
            // every client of the system store does.
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = match offer {
        Offer::H2OrHttp11 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Offer::Http11 => vec![b"http/1.1".to_vec()],
    };
    Ok(Arc::new(config))
}
