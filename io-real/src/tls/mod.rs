//! TLS for the HTTP listeners: rustls with the ring provider.
//!
//! - [`Identity`] is a certificate chain and its private key as PEM text. It is what a
//!   parent hands to every worker: loaded once from `--tls-cert/--tls-key`, or generated
//!   once with [`Identity::self_signed`], so all workers present the same certificate.
//! - [`Identity::server_config`] turns it into a `rustls::ServerConfig` offering ALPN `h2`
//!   and `http/1.1`, after checking that the key is usable and matches the certificate, so
//!   a bad pair is a configuration error at startup, never a handshake failure later.
//! - [`accept`] runs one server handshake with a time bound; serve the stream with
//!   [`crate::http::serve_connection_over`] and [`crate::http::Transport::Tls`] (which is
//!   what lets `SiteConfig::hsts` add `Strict-Transport-Security`).
//!
//! - A worker serves with [`ServingTls`]: the certificate ([`SwappableIdentity`]) and the
//!   session-ticket keys ([`ParentTicketer`]) the parent sends, swapped in place for new
//!   handshakes whenever it sends new ones (decision 0025).
//!
//! PEM parsing uses `rustls-pki-types` (re-exported by rustls), which understands PKCS#8
//! (`PRIVATE KEY`), PKCS#1 RSA (`RSA PRIVATE KEY`) and SEC1 EC (`EC PRIVATE KEY`) keys.

mod resolver;
mod serving;
pub mod summary;
mod tickets;

pub use resolver::SwappableIdentity;
pub use serving::ServingTls;
pub use tickets::ParentTicketer;

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite};
pub use tokio_rustls::TlsAcceptor;
pub use tokio_rustls::server::TlsStream;

use crate::operator_file::{self, OperatorFileError};

/// The ALPN protocols offered, in server preference order.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Everything that can go wrong setting up or accepting TLS. The messages name the file and
/// say what is wrong with it, since they are shown to whoever configured servery.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A certificate or key file could not be read, or is larger than
    /// [`operator_file::PEM_CAP`]; the error names the path and the rule.
    #[error("{source}")]
    Read {
        /// `certificate` or `private key`.
        what: &'static str,
        /// Why it could not be read.
        #[source]
        source: OperatorFileError,
    },
    /// The certificate source has no PEM `CERTIFICATE` block.
    #[error("{source_name} contains no PEM certificate (expected a \"BEGIN CERTIFICATE\" block)")]
    NoCertificate {
        /// The file (or in-memory source) that was read.
        source_name: String,
    },
    /// The key source has no private key PEM block servery can use.
    #[error(
        "{source_name} contains no private key (expected a \"PRIVATE KEY\", \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\" PEM block)"
    )]
    NoPrivateKey {
        /// The file (or in-memory source) that was read.
        source_name: String,
    },
    /// The key is encrypted with a passphrase.
    #[error("{source_name} holds an encrypted private key; servery needs it unencrypted")]
    EncryptedKey {
        /// The file (or in-memory source) that was read.
        source_name: String,
    },
    /// The PEM text itself is broken.
    #[error("{source_name} is not valid PEM: {detail}")]
    Pem {
        /// The file (or in-memory source) that was read.
        source_name: String,
        /// What the parser reported.
        detail: String,
    },
    /// The key parsed as PEM but is not a key type rustls/ring can sign with.
    #[error(
        "the private key in {source_name} is not a supported type (RSA 2048+, ECDSA P-256/P-384, Ed25519): {detail}"
    )]
    UnsupportedKey {
        /// The file (or in-memory source) that was read.
        source_name: String,
        /// What the provider reported.
        detail: String,
    },
    /// The first certificate is not a parsable X.509 certificate.
    #[error("the certificate in {source_name} is malformed: {detail}")]
    BadCertificate {
        /// The file (or in-memory source) that was read.
        source_name: String,
        /// What the parser reported.
        detail: String,
    },
    /// The key is valid but belongs to a different certificate.
    #[error("the private key in {key} does not match the certificate in {cert}")]
    KeyMismatch {
        /// Where the certificate came from.
        cert: String,
        /// Where the key came from.
        key: String,
    },
    /// A name given for a self-signed certificate is neither an IP address nor a DNS name.
    #[error("cannot put {0:?} in a certificate: not an IP address or a DNS name")]
    BadName(String),
    /// Self-signed generation was asked for with no names at all.
    #[error("a self-signed certificate needs at least one DNS name or IP address")]
    NoNames,
    /// Certificate generation failed.
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(#[source] rcgen::Error),
    /// rustls refused the configuration.
    #[error("TLS configuration refused: {0}")]
    Config(#[source] rustls::Error),
    /// The client did not complete a handshake (protocol error, or it went away).
    #[error("TLS handshake failed: {0}")]
    Handshake(#[source] io::Error),
    /// The client did not complete a handshake within the handshake timeout.
    #[error("TLS handshake timed out")]
    HandshakeTimeout,
    /// The pair is valid but too large to hand to the workers.
    #[error("{0}")]
    Oversized(String),
}

/// A certificate chain (leaf first) and its private key, as PEM text.
#[derive(Clone)]
pub struct Identity {
    /// One or more `CERTIFICATE` blocks, the server's own first.
    pub cert_pem: String,
    /// One private key block.
    pub key_pem: String,
    cert_source: String,
    key_source: String,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("cert_source", &self.cert_source)
            .field("key_source", &self.key_source)
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// An identity from PEM text received from elsewhere (e.g. the parent).
    pub fn from_pem(cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        Self {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
            cert_source: "the certificate PEM".into(),
            key_source: "the private key PEM".into(),
        }
    }

    /// Reads `--tls-cert` and `--tls-key`, each at most [`operator_file::PEM_CAP`] bytes
    /// (so `/dev/zero` or an endless FIFO is an error, not all the memory). Only reads:
    /// [`Self::server_config`] validates.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let read = |what, path: &Path| {
            operator_file::read_text(path, operator_file::PEM_CAP, "a PEM file")
                .map_err(|source| TlsError::Read { what, source })
        };
        Ok(Self {
            cert_pem: read("certificate", cert)?,
            key_pem: read("private key", key)?,
            cert_source: cert.display().to_string(),
            key_source: key.display().to_string(),
        })
    }

    /// A fresh self-signed certificate (ECDSA P-256) for `names`; each is an IP address or
    /// a DNS name (`localhost`, `files.lan`). Generate it once, in the parent, and hand the
    /// result to every worker: clients pinning or trusting it must see a single identity.
    pub fn self_signed(names: &[String]) -> Result<Self, TlsError> {
        if names.is_empty() {
            return Err(TlsError::NoNames);
        }
        for name in names {
            let ok = name.parse::<std::net::IpAddr>().is_ok()
                || rustls::pki_types::DnsName::try_from(name.as_str()).is_ok();
            if !ok {
                return Err(TlsError::BadName(name.clone()));
            }
        }
        let mut params =
            rcgen::CertificateParams::new(names.to_vec()).map_err(TlsError::Generate)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "servery self-signed");
        let key = rcgen::KeyPair::generate().map_err(TlsError::Generate)?;
        let cert = params.self_signed(&key).map_err(TlsError::Generate)?;
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_source: "the self-signed certificate".into(),
            key_source: "the self-signed key".into(),
        })
    }

    /// The certificate chain, parsed.
    pub fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, TlsError> {
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem_error(&self.cert_source, e))?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificate {
                source_name: self.cert_source.clone(),
            });
        }
        Ok(certs)
    }

    fn private_key(&self) -> Result<PrivateKeyDer<'static>, TlsError> {
        match PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()) {
            Ok(key) => Ok(key),
            Err(pem::Error::NoItemsFound) if self.key_pem.contains("ENCRYPTED PRIVATE KEY") => {
                Err(TlsError::EncryptedKey {
                    source_name: self.key_source.clone(),
                })
            }
            Err(pem::Error::NoItemsFound) => Err(TlsError::NoPrivateKey {
                source_name: self.key_source.clone(),
            }),
            Err(e) => Err(pem_error(&self.key_source, e)),
        }
    }

    /// Validates the pair and builds a server configuration for it alone: TLS 1.2 and
    /// 1.3, no client certificates, ALPN `h2` then `http/1.1`, tickets sealed with a key of
    /// this process (a worker serves with [`ServingTls`] instead).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let ticketer = rustls::crypto::ring::Ticketer::new().map_err(TlsError::Config)?;
        serving::server_config(
            Arc::new(SwappableIdentity::new(self.certified()?)),
            ticketer,
        )
    }

    /// Validates the pair and loads it for signing, each failure with its own error.
    pub fn certified(&self) -> Result<Arc<CertifiedKey>, TlsError> {
        let provider = rustls::crypto::ring::default_provider();
        self.certified_key(&provider).map(Arc::new)
    }

    /// What the status shows of the leaf certificate (validate first: this only reads).
    pub fn summary(&self) -> Option<servery_core::tls_material::CertSummary> {
        let leaf = self.certificates().ok()?.into_iter().next()?;
        summary::summarize(&leaf)
    }

    /// Parses both halves and checks they belong together, each failure with its own error.
    fn certified_key(&self, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
        let certs = self.certificates()?;
        let key = self.private_key()?;
        let signing_key =
            provider
                .key_provider
                .load_private_key(key)
                .map_err(|e| TlsError::UnsupportedKey {
                    source_name: self.key_source.clone(),
                    detail: e.to_string(),
                })?;
        let certified = CertifiedKey::new(certs, signing_key);
        match certified.keys_match() {
            Ok(()) => Ok(certified),
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                Err(TlsError::KeyMismatch {
                    cert: self.cert_source.clone(),
                    key: self.key_source.clone(),
                })
            }
            // The provider cannot tell (no public key available): rustls accepts that too.
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
                Ok(certified)
            }
            Err(e) => Err(TlsError::BadCertificate {
                source_name: self.cert_source.clone(),
                detail: e.to_string(),
            }),
        }
    }
}

fn pem_error(source_name: &str, e: pem::Error) -> TlsError {
    TlsError::Pem {
        source_name: source_name.to_owned(),
        detail: e.to_string(),
    }
}

/// Loads `--tls-cert/--tls-key` into a server configuration.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    Identity::from_files(cert, key)?.server_config()
}

/// An acceptor for `config`.
pub fn acceptor(config: Arc<ServerConfig>) -> TlsAcceptor {
    TlsAcceptor::from(config)
}

/// Completes the server side of a TLS handshake on `tcp` within `limit` (the
/// `--tls-handshake-timeout`: without a bound a silent peer would hold a connection slot
/// forever). The negotiated ALPN protocol needs no special handling afterwards: the
/// connection server recognises an HTTP/2 preface by itself.
pub async fn accept<IO>(
    acceptor: &TlsAcceptor,
    tcp: IO,
    limit: Duration,
) -> Result<TlsStream<IO>, TlsError>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(limit, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(TlsError::Handshake(e)),
        Err(_) => Err(TlsError::HandshakeTimeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn self_signed_identities_load() {
        let id = Identity::self_signed(&names(&["localhost", "127.0.0.1", "::1"])).expect("gen");
        assert!(id.cert_pem.contains("BEGIN CERTIFICATE"));
        assert!(id.key_pem.contains("PRIVATE KEY"));
        let config = id.server_config().expect("config");
        assert_eq!(
            config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        assert!(
            !format!("{id:?}").contains("PRIVATE"),
            "Debug hides the key"
        );
        // What the parent hands over loads the same way.
        let copy = Identity::from_pem(id.cert_pem.clone(), id.key_pem.clone());
        copy.server_config().expect("handed-over identity loads");
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(matches!(Identity::self_signed(&[]), Err(TlsError::NoNames)));
        assert!(matches!(
            Identity::self_signed(&names(&["bad name"])),
            Err(TlsError::BadName(n)) if n == "bad name"
        ));
        assert!(matches!(
            Identity::self_signed(&names(&["localhost", ""])),
            Err(TlsError::BadName(_))
        ));
    }

    #[test]
    fn mismatched_key_is_a_clear_error() {
        let a = Identity::self_signed(&names(&["a.test"])).expect("gen");
        let b = Identity::self_signed(&names(&["b.test"])).expect("gen");
        let mixed = Identity::from_pem(a.cert_pem, b.key_pem);
        let err = mixed.server_config().expect_err("mismatch");
        assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err}");
        assert!(err.to_string().contains("does not match"));
    }

    #[test]
    fn missing_blocks_are_clear_errors() {
        let id = Identity::self_signed(&names(&["a.test"])).expect("gen");
        let no_cert = Identity::from_pem(id.key_pem.clone(), id.key_pem.clone());
        assert!(matches!(
            no_cert.server_config(),
            Err(TlsError::NoCertificate { .. })
        ));
        let no_key = Identity::from_pem(id.cert_pem.clone(), id.cert_pem.clone());
        assert!(matches!(
            no_key.server_config(),
            Err(TlsError::NoPrivateKey { .. })
        ));
        let encrypted = Identity::from_pem(
            id.cert_pem.clone(),
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        );
        assert!(matches!(
            encrypted.server_config(),
            Err(TlsError::EncryptedKey { .. })
        ));
        let broken = Identity::from_pem(
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
            id.key_pem.clone(),
        );
        assert!(matches!(broken.server_config(), Err(TlsError::Pem { .. })));
        let garbage_cert = Identity::from_pem(
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            id.key_pem.clone(),
        );
        assert!(matches!(
            garbage_cert.server_config(),
            Err(TlsError::BadCertificate { .. })
        ));
    }

    // Test-only keys and certificates made with openssl for this test (RSA as PKCS#1,
    // P-256 as SEC1, Ed448 as PKCS#8), since rcgen on ring generates only PKCS#8 ECDSA.
    const RSA_PKCS1_KEY: &str = "\
-----BEGIN RSA PRIVATE KEY-----\n\
MIIEpAIBAAKCAQEAtr99rJEm2eQyBPm1lWxWjbcWzAaSeIx6EYX2gT56BGLZabiZ\n\
U3zKCXRQwhd5pzi8B9JjJ6x06kYiBt1JsYFFYgtptZFY6oQ3etfmfexwhYtRU3gB\n\
fHxXA9VmK1bvJrPmnpUB5zG96+GnG5MCnlcP0O9Zk8Q+KAlqf6/Lnb9iIyCBwP1A\n\
3EBYyzH+1doE62rlHQP/elXCLeS+UHa/+J4asqJQK/aj0nvcbDq0i6W2CflQCcOP\n\
8Gsj7Eqhb75qalBZZm3AWWd93jh8jscE6cLFHIOvhk+eczcpQD/sJvy84b878o0/\n\
JbiZY/Y6E4KEshgDDkVtClAGEfvC9vfMGsMRyQIDAQABAoIBAFOf9dzRQTOFAkSX\n\
lfnN7R+FUDfFrCHgun0pTZ9f3QsDxtRjhjoXiQZhhREEGAWm5xg3NGtztb58oFZ+\n\
zZmd+4d9jH5rCAKsxQyAHneyCd16Xpkw+ZEi/tiAvvOHIQGXYilgK1JFx1BY3pS2\n\
JYUaduDXniiJrR26DVNnuOezK6/Bifgo0AVZ1L09LWIkbbwWGH0ugpMV8yJmXfxa\n\
gCBmMb+q9GVFejb3vNxZmzZLpT5fPmYhFX1Vy79jnuIJ1T66eg7knGaR62LiurNy\n\
NhQpD9cbKUhfcygNzvdubrtMbUpA/W5Bp/InSJKDjALjqdDiLMPqeAQWdIN/VrSM\n\
bqS0d28CgYEA7bdbpoRSgBDTFYZTFQsbWlvrFKx7wTEaCer4KA/O6L1NRGGJ1xxU\n\
kYP8e/Pq/2zh8MIeMv/aUQI0GS7tkYdpXILCu08JFMpmZSCIjqxZUTXLsYf/rRQ6\n\
AgpiCh+ZngQ1WWLVUcbjJkGovsAzeYC1TUOiySObdR7Siz7HhYqFhE8CgYEAxM3O\n\
asPP9/zHnwDmkPKrZX2qKAALgQz2v7FBJRV9b/EVanCEbI37YhuxFdRRLa/HBHnQ\n\
ZdxhD/1+AMAjML7zHqoVuKBG0zGwMoPPz0H7X2MUgWfPiPWBgAdeyMSVuR6TD1qI\n\
PMKF9A0eZ1nZsXM+TkMj+7AwOPU2AwneAD10SmcCgYEAqf/61zbCGTvu+PG68M2k\n\
nhYmI/7F8f8/c+BJ37yOZ/sZCtIGVYO5JueQ5MQnRsuDOT5ZgndelZhR0cCxvOVt\n\
/+6zfGilQe0NFT0S65VtupoSNb/gpNJWOadbPYojvdGcpXP8wiLNx0old2TUawwU\n\
nFDGVbnVLwj/4PzgiyvpGBkCgYEAv2qpjWB9I+fCRR38JBlTqbgrSxKYHeH9EX+X\n\
LDmVss5bFRbxRiBm1Aq5F9FVT8l7GhhdIOXTpljZOGOpFp1zHG00CUoi+QGILenU\n\
svKrSyC0bhUJX13ioiMJBt9l/RMG2FUm02okHbawzrcurJC5lidplUDN9mhSK2xq\n\
d/NN65sCgYAJb7AKTpoTZFAkAB7IrlM8eRTppwNe19TRnKeMjbMu1lbNn3FchNjg\n\
I3rey/sjUmBu82F2f+TpMga9irfQ1hmUCwwn/usE5oSFWPj+xsQaJ8sOS5C0XzM6\n\
ZBuwS4+m/ElKJlHFXIFFHIEixCQ4Xt+g7RY+IFWjoBiGHU0hDGWYkQ==\n\
-----END RSA PRIVATE KEY-----\n\
";

    const RSA_CERT: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIDHjCCAgagAwIBAgIUV3pgQ/zhyix3kQoWGQ9amqY3/I8wDQYJKoZIhvcNAQEL\n\
BQAwEzERMA8GA1UEAwwIcnNhLnRlc3QwIBcNMjYxMTMwMDUxMTA2WhgPMjEyNjEx\n\
MDYwNTExMDZaMBMxETAPBgNVBAMMCHJzYS50ZXN0MIIBIjANBgkqhkiG9w0BAQEF\n\
AAOCAQ8AMIIBCgKCAQEAtr99rJEm2eQyBPm1lWxWjbcWzAaSeIx6EYX2gT56BGLZ\n\
abiZU3zKCXRQwhd5pzi8B9JjJ6x06kYiBt1JsYFFYgtptZFY6oQ3etfmfexwhYtR\n\
U3gBfHxXA9VmK1bvJrPmnpUB5zG96+GnG5MCnlcP0O9Zk8Q+KAlqf6/Lnb9iIyCB\n\
wP1A3EBYyzH+1doE62rlHQP/elXCLeS+UHa/+J4asqJQK/aj0nvcbDq0i6W2CflQ\n\
CcOP8Gsj7Eqhb75qalBZZm3AWWd93jh8jscE6cLFHIOvhk+eczcpQD/sJvy84b87\n\
8o0/JbiZY/Y6E4KEshgDDkVtClAGEfvC9vfMGsMRyQIDAQABo2gwZjAdBgNVHQ4E\n\
FgQUbvnPT7yqErmoLV+7V9tCUKElnCAwHwYDVR0jBBgwFoAUbvnPT7yqErmoLV+7\n\
V9tCUKElnCAwDwYDVR0TAQH/BAUwAwEB/zATBgNVHREEDDAKgghyc2EudGVzdDAN\n\
BgkqhkiG9w0BAQsFAAOCAQEAIh/lVZEOkcuq1bD1AlFzLBGUR3XOQLtVQfy4H0iD\n\
5n7C0gW3ZIdkef1pSmVhsxXBmxkptU6cOq6YRqXO8rUUJlfROsFYszGAGz/vkEzE\n\
xJmDOIH2r+5wAEA7q4VSlBZw4JU40e2ZAb4r8P3E2j9mXT3xbjO09UDUjiSbNKYR\n\
mCmnMMXwF/ZhooG+oeJskjMQBXVRRYJ1JaPkigX09sqv74sJgAn0bmvDfYtQFT82\n\
w5LxlbunqhHtz6IzJGzVX6hIepYo1Dtww56FmP1NCphxkHUVrWbytr2+szeGoxp3\n\
bdKGjEhkkwCozJ0MeWShu5uhq4Zvk66rwT0syNynhD19Dg==\n\
-----END CERTIFICATE-----\n\
";

    const EC_SEC1_KEY: &str = "\
-----BEGIN EC PRIVATE KEY-----\n\
MHcCAQEEIMDE441IIjc4ex4WhO0lmcN5kW9a6PVezL8mFhNPA/oRoAoGCCqGSM49\n\
AwEHoUQDQgAEIbsD4OkC1izO9+DvD3b26aoZYn7nmLC4MreoYe+S+gR7DNMvpqK4\n\
lTzPpfQMJUornr6257JpyEsKiK7DJBgkOA==\n\
-----END EC PRIVATE KEY-----\n\
";

    const EC_CERT: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBkDCCATWgAwIBAgIUK20P64oHHghA3+oi5sO1FQlBGpQwCgYIKoZIzj0EAwIw\n\
EjEQMA4GA1UEAwwHZWMudGVzdDAgFw0yNjExMzAwNTExMDZaGA8yMTI2MTEwNjA1\n\
MTEwNlowEjEQMA4GA1UEAwwHZWMudGVzdDBZMBMGByqGSM49AgEGCCqGSM49AwEH\n\
A0IABCG7A+DpAtYszvfg7w929umqGWJ+55iwuDK3qGHvkvoEewzTL6aiuJU8z6X0\n\
DCVKK56+tueyachLCoiuwyQYJDijZzBlMB0GA1UdDgQWBBTKyrvgHfZIWWCPYbIt\n\
p5CkE+LvQTAfBgNVHSMEGDAWgBTKyrvgHfZIWWCPYbItp5CkE+LvQTAPBgNVHRMB\n\
Af8EBTADAQH/MBIGA1UdEQQLMAmCB2VjLnRlc3QwCgYIKoZIzj0EAwIDSQAwRgIh\n\
AK8zHdJw+u+fWPxrGIItM00er44gz6Gez8bO0LWA1bG0AiEAh5rpk1Ovwqwliept\n\
BTj6RqDknjYb5cUUvidP3VBs8Zo=\n\
-----END CERTIFICATE-----\n\
";

    const ED448_PKCS8_KEY: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MEcCAQAwBQYDK2VxBDsEOV/oMewm4jYKJthVAbYtC/6Kd4fyWTzdwJg6qpPbvWlE\n\
4jhbklssUg/vXlrlt06az2765MkPZggBEg==\n\
-----END PRIVATE KEY-----\n\
";

    #[test]
    fn rsa_pkcs1_and_ec_sec1_keys_load() {
        Identity::from_pem(RSA_CERT, RSA_PKCS1_KEY)
            .server_config()
            .expect("RSA (PKCS#1) loads");
        Identity::from_pem(EC_CERT, EC_SEC1_KEY)
            .server_config()
            .expect("EC (SEC1) loads");
        let err = Identity::from_pem(RSA_CERT, EC_SEC1_KEY)
            .server_config()
            .expect_err("mismatch");
        assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err}");
    }

    #[test]
    fn unsupported_key_types_are_named() {
        let err = Identity::from_pem(EC_CERT, ED448_PKCS8_KEY)
            .server_config()
            .expect_err("Ed448 is not supported by ring");
        assert!(matches!(err, TlsError::UnsupportedKey { .. }), "{err}");
        assert!(err.to_string().contains("not a supported type"));

        // A syntactically valid PKCS#8 block whose contents no provider understands.
        let id = Identity::self_signed(&names(&["a.test"])).expect("gen");
        let bogus = Identity::from_pem(
            id.cert_pem,
            "-----BEGIN PRIVATE KEY-----\nMAMCAQA=\n-----END PRIVATE KEY-----\n",
        );
        let err = bogus.server_config().expect_err("unsupported");
        assert!(matches!(err, TlsError::UnsupportedKey { .. }), "{err}");
    }

    #[test]
    fn missing_files_name_the_path() {
        let err = load(
            Path::new("/nonexistent/cert.pem"),
            Path::new("/nonexistent/key.pem"),
        )
        .expect_err("missing");
        assert!(matches!(
            err,
            TlsError::Read {
                what: "certificate",
                ..
            }
        ));
        assert!(err.to_string().contains("/nonexistent/cert.pem"));
    }

    #[test]
    fn endless_files_are_refused_at_the_cap() {
        let id = Identity::self_signed(&names(&["a.test"])).expect("gen");
        let dir = std::env::temp_dir().join(format!("servery-tls-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let key = dir.join("key.pem");
        std::fs::write(&key, &id.key_pem).expect("write");
        let err = Identity::from_files(Path::new("/dev/zero"), &key).expect_err("endless");
        assert!(
            matches!(
                &err,
                TlsError::Read {
                    what: "certificate",
                    source: OperatorFileError::TooLarge { .. }
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("/dev/zero is too large"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
