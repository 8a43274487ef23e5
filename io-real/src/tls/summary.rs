//! What `ctl status` and the logs say about a certificate: the leaf's subject and its
//! notAfter. Parsed with x509-parser from the DER rustls already checked.

use servery_core::tls_material::CertSummary;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The leaf's subject and notAfter; `None` when the DER is not an X.509 certificate
/// (rustls accepts some certificates for signing that are not worth a status line).
pub fn summarize(leaf_der: &[u8]) -> Option<CertSummary> {
    let (_, cert) = X509Certificate::from_der(leaf_der).ok()?;
    Some(CertSummary {
        subject: cert.subject().to_string(),
        not_after_unix: cert.validity().not_after.timestamp(),
        not_before_unix: cert.validity().not_before.timestamp(),
    })
}

/// The DNS names (subject alternative names) of a PEM chain's leaf, lower-cased; none
/// when the chain has no certificate or its leaf names none.
pub fn dns_names(cert_pem: &str) -> Vec<String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    match CertificateDer::pem_slice_iter(cert_pem.as_bytes()).next() {
        Some(Ok(leaf)) => crate::parent::services::acme::facts::facts_of_der(&leaf)
            .map(|facts| facts.names)
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::Identity;
    use proptest::prelude::*;

    #[test]
    fn a_generated_certificate_has_its_subject_and_a_future_expiry() {
        let id = Identity::self_signed(&["a.test".into()]).expect("gen");
        let leaf = id.certificates().expect("certs").remove(0);
        let s = summarize(&leaf).expect("parses");
        assert_eq!(s.subject, "CN=servery self-signed");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        assert!(s.not_after_unix > now, "{s:?}");
    }

    #[test]
    fn the_leafs_dns_names_and_none_from_nonsense() {
        let id = Identity::self_signed(&["a.test".into(), "127.0.0.1".into()]).expect("gen");
        let names = dns_names(&id.cert_pem);
        assert!(names.contains(&"a.test".to_owned()), "{names:?}");
        assert!(dns_names("not a certificate").is_empty());
    }

    proptest! {
        #[test]
        fn any_bytes_give_an_answer_not_a_panic(der in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = summarize(&der);
        }
    }
}
