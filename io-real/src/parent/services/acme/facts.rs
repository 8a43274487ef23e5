//! What the manager needs to know about a certificate, read from its PEM: validity and
//! names of the leaf, and that the key is usable with it (the same check a worker makes).

use servery_core::acme::{CertFacts, Certificate, UnixTime};
use x509_parser::extensions::GeneralName;

/// Parse `cert_pem` (leaf first) and check `key_pem` against it.
pub fn certificate(cert_pem: String, key_pem: String) -> Result<Certificate, String> {
    let identity = crate::tls::Identity::from_pem(cert_pem.clone(), key_pem.clone());
    identity.server_config().map_err(|e| e.to_string())?;
    let leaf = identity
        .certificates()
        .map_err(|e| e.to_string())?
        .into_iter()
        .next()
        .ok_or("no certificate in the chain")?;
    let facts = facts_of_der(&leaf)?;
    Ok(Certificate {
        facts,
        cert_pem,
        key_pem,
    })
}

/// The validity, DNS names and serial of one DER certificate.
pub fn facts_of_der(der: &[u8]) -> Result<CertFacts, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let validity = cert.validity();
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(n) = name {
                names.push(n.to_ascii_lowercase());
            }
        }
    }
    Ok(CertFacts {
        not_before: UnixTime(validity.not_before.timestamp()),
        not_after: UnixTime(validity.not_after.timestamp()),
        names,
        serial: cert.raw_serial_as_string().replace(':', ""),
    })
}

/// Now, as the manager's wall time.
pub fn wall_now() -> UnixTime {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    UnixTime(i64::try_from(secs).unwrap_or(i64::MAX))
}
