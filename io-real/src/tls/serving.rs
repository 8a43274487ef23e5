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
/// ALPN `h2` then `http/1.1`, no early data.
pub fn server_config(
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
    ticketer: Arc<dyn rustls::server::ProducesTickets>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    config.ticketer = ticketer;
    // No 0-RTT: see the module documentation.
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}
