//! The certificate a worker presents, swappable while it serves: a new identity from the
//! parent replaces it for the handshakes that start afterwards, and a connection that is
//! already established keeps the session it has (rustls resolves the certificate once,
//! during the handshake). Also what an HTTP/3 endpoint builds its rustls configuration
//! from, so both transports present the same identity through every rollover.

use std::sync::{Arc, RwLock};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// One certificate whatever the SNI name (a file server has one identity), swapped
/// atomically: a handshake sees either the old key or the new one, never a mix.
#[derive(Debug, Default)]
pub struct SwappableIdentity {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl SwappableIdentity {
    pub fn new(key: Arc<CertifiedKey>) -> Self {
        SwappableIdentity {
            current: RwLock::new(Some(key)),
        }
    }

    /// Present `key` to every handshake from now on.
    pub fn swap(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(key);
    }

    /// The key handshakes get now (`None` before the first identity arrived).
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for SwappableIdentity {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}
