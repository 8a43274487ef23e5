//! A worker's TLS: one rustls configuration for the worker's life, whose certificate
//! ([`SwappableIdentity`]) and session-ticket keys ([`ParentTicketer`]) are swapped in
//! place whenever the parent sends new material. New handshakes use what is current when
//! they start; established connections keep their session.
//!
//! Resumption (decision 0025): TLS 1.3 and TLS 1.2 tickets both go through the ticketer,
//! so a ticket from any worker opens on any other. 0-RTT early data stays off: a ticket
//! can be replayed within its lifetime, and servery keeps no anti-replay state shared by
//! its workers; a resumed handshake already saves the certificate and the signature.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustls::ServerConfig;
use servery_core::tls_material::TlsMaterial;

use super::resolver::SwappableIdentity;
use super::tickets::ParentTicketer;
use super::{ALPN, Identity, TlsAcceptor, TlsError};

#[derive(Debug)]
pub struct ServingTls {
    resolver: Arc<SwappableIdentity>,
    ticketer: Arc<ParentTicketer>,
    config: Arc<ServerConfig>,
    /// The identity generation the resolver holds (0: none yet).
    identity_generation: AtomicU64,
}

impl ServingTls {
    pub fn new() -> Result<Self, TlsError> {
        let resolver = Arc::new(SwappableIdentity::default());
        let ticketer = Arc::new(ParentTicketer::default());
        let config = server_config(Arc::clone(&resolver) as _, Arc::clone(&ticketer) as _)?;
        Ok(ServingTls {
            resolver,
            ticketer,
            config,
            identity_generation: AtomicU64::new(0),
        })
    }

    /// Serve `material` from the next handshake on. A new identity that does not load
    /// (which the parent checked, so only a damaged message) leaves the old one serving;
    /// the ticket keys are taken either way.
    pub fn apply(&self, material: &TlsMaterial) -> Result<(), TlsError> {
        self.ticketer
            .install(&material.ticket_keys, material.ticket_lifetime_secs);
        let generation = material.identity.generation;
        if generation == self.identity_generation.load(Ordering::Acquire) {
            return Ok(());
        }
        let identity = Identity::from_pem(
            material.identity.cert_pem.clone(),
            material.identity.key_pem.clone(),
        );
        self.resolver.swap(identity.certified()?);
        self.identity_generation
            .store(generation, Ordering::Release);
        Ok(())
    }

    /// Whether an identity has arrived (a worker without one cannot serve TLS).
    pub fn has_identity(&self) -> bool {
        self.resolver.current().is_some()
    }

    pub fn identity_generation(&self) -> u64 {
        self.identity_generation.load(Ordering::Acquire)
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.config))
    }

    /// The worker's certificate resolver: what an HTTP/3 endpoint's rustls configuration
    /// should resolve with, so it follows every identity rollover too.
    pub fn resolver(&self) -> Arc<SwappableIdentity> {
        Arc::clone(&self.resolver)
    }

    /// The worker's session-ticket sealer (the parent's keys).
    pub fn ticketer(&self) -> Arc<ParentTicketer> {
        Arc::clone(&self.ticketer)
    }

    /// The TCP listeners' configuration (ALPN `h2`, `http/1.1`).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.config)
    }
}

/// TLS 1.2 and 1.3 on ring, no client certificates, the given resolver and ticketer,
/// ALPN `h2` then `http/1.1`, no early data, AES-128-GCM first ([`by_preference`]).
pub(super) fn server_config(
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
    ticketer: Arc<dyn rustls::server::ProducesTickets>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|s| by_preference(s.suite()));
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    config.ignore_client_order = true;
    config.ticketer = ticketer;
    // One ticket per handshake, not rustls's two: decision 0025.
    config.send_tls13_tickets = 1;
    // No 0-RTT: see the module documentation.
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}

/// The server's order of the cipher suites ring offers, whatever the client's: AES-128-GCM
/// (with SHA-256), then AES-256-GCM (SHA-384), then ChaCha20-Poly1305. The hash is most of
/// the difference: SHA-256 runs on the CPU's SHA extensions where it has them, SHA-384 never
/// does, and a handshake (a resumed one above all) is mostly key schedule. OpenSSL clients
/// list AES-256 first, so by their order every handshake paid SHA-384. Go's TLS and Caddy
/// make the same choice (decision 0025).
fn by_preference(suite: rustls::CipherSuite) -> u8 {
    use rustls::CipherSuite as S;
    match suite {
        S::TLS13_AES_128_GCM_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
        S::TLS13_AES_256_GCM_SHA384
        | S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 1,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use rustls::{CipherSuite, ClientConfig, ClientConnection, RootCertStore, ServerConnection};

    /// The suite a client offering `suites` (in its order) gets.
    fn negotiated(suites: &[rustls::SupportedCipherSuite]) -> CipherSuite {
        let material =
            crate::tls::Identity::self_signed(&["localhost".to_owned()]).expect("self-signed");
        let server = material.server_config().expect("server config");
        let mut roots = RootCertStore::empty();
        let cert = CertificateDer::from_pem_slice(material.cert_pem.as_bytes()).expect("pem");
        roots.add(cert).expect("root");
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = suites.to_vec();
        let client = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut client =
            ClientConnection::new(Arc::new(client), "localhost".try_into().expect("name"))
                .expect("client");
        let mut server = ServerConnection::new(server).expect("server");
        for _ in 0..10 {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).expect("client writes");
            server.read_tls(&mut &wire[..]).expect("server reads");
            server.process_new_packets().expect("server handshake");
            let mut wire = Vec::new();
            server.write_tls(&mut wire).expect("server writes");
            client.read_tls(&mut &wire[..]).expect("client reads");
            client.process_new_packets().expect("client handshake");
            if !client.is_handshaking() && !server.is_handshaking() {
                break;
            }
        }
        server.negotiated_cipher_suite().expect("a suite").suite()
    }

    #[test]
    fn aes_128_is_chosen_over_the_clients_order_and_others_still_work() {
        use rustls::crypto::ring::cipher_suite as cs;
        // OpenSSL's order: AES-256 first.
        let openssl = [
            cs::TLS13_AES_256_GCM_SHA384,
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            cs::TLS13_AES_128_GCM_SHA256,
        ];
        assert_eq!(negotiated(&openssl), CipherSuite::TLS13_AES_128_GCM_SHA256);
        let tls12 = [
            cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ];
        assert_eq!(
            negotiated(&tls12),
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        );
        // A client that offers only ChaCha20 (no AES hardware) gets it.
        assert_eq!(
            negotiated(&[cs::TLS13_CHACHA20_POLY1305_SHA256]),
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
        );
    }
}
