//! HTTP/3 (`--http3`): the same site served over QUIC (quinn, h3 and h3-quinn), on UDP
//! sockets the parent binds and hands to each worker with its TCP listeners, one socket
//! per worker as the core assigns them (decisions 0027 and 0079).
//!
//! - [`activation`]: under socket activation, a port servery cannot bind UDP on is a
//!   configuration error.
//! - [`sockets`]: the parent's reuseport groups, grown, shrunk and steered as the core's
//!   `QuicSteering` says.
//! - [`endpoint`]: a worker takes its socket (a lock orders it after a previous reader
//!   still exiting) and runs a quinn endpoint on it.
//! - [`serve`]: one connection's requests, answered by the worker's `Site`.
//! - [`steering`]: connection IDs that name their socket, and the reuseport program that
//!   keeps a connection's packets on that socket and sends new connections only to the
//!   sockets that accept them.

pub mod activation;
pub mod endpoint;
pub mod serve;
pub mod sockets;
pub mod steering;

use http::HeaderValue;

/// The ALPN protocol of HTTP/3 (RFC 9114).
pub const ALPN_H3: &[u8] = b"h3";

/// How long a client may remember that HTTP/3 is offered (`ma`, seconds): a day.
pub const ALT_SVC_MAX_AGE: u32 = 86_400;

/// The `Alt-Svc` value TCP responses carry when HTTP/3 is served on `port`.
pub fn alt_svc(port: u16) -> HeaderValue {
    // Digits and fixed ASCII only: always a valid header value.
    HeaderValue::try_from(format!("h3=\":{port}\"; ma={ALT_SVC_MAX_AGE}"))
        .unwrap_or_else(|_| HeaderValue::from_static("clear"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn alt_svc_names_the_port_and_the_max_age() {
        assert_eq!(super::alt_svc(8443), "h3=\":8443\"; ma=86400");
    }
}
