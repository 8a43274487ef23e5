//! The worker's side of its socket: wait for the socket's lock, run a quinn endpoint on
//! the socket, hand every incoming connection to the worker's lifecycle task, and on
//! drain refuse new connections (the core has steered them elsewhere already, decision
//! 0079), wait for the open ones to finish, and let go of the socket and the lock (see
//! [`super::sockets`] for why there is a lock).

use std::fs::File;
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::FlockOperation;
use rustix::net::{SocketType, sockopt};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;

/// How often a worker checks whether the socket's previous reader has let go.
const LOCK_POLL: Duration = Duration::from_millis(20);

/// Errors setting up HTTP/3 in a worker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuicSetupError {
    #[error("a UDP socket arrived without its slot lock")]
    MissingLock,
    #[error("cannot open the slot lock: {0}")]
    Lock(#[source] io::Error),
    #[error("cannot tell what a passed descriptor is: {0}")]
    Classify(#[source] io::Error),
    #[error("the TLS configuration cannot serve QUIC: {0}")]
    Tls(String),
    #[error("cannot read the slot socket's index from its lock: {0}")]
    Index(#[source] io::Error),
}

/// One slot socket handed to this worker, with its lock (not yet taken) and its index in
/// its reuseport group (which the parent wrote into the lock's memfd).
#[derive(Debug)]
pub struct SlotSocket {
    socket: UdpSocket,
    lock: OwnedFd,
    index: u32,
}

impl SlotSocket {
    /// The socket's index in its reuseport group: what the connection IDs issued on it
    /// name, so the steering program sends their packets here.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Another descriptor of the slot's lock, to read the stray-connection rule from
    /// once the socket itself is the endpoint's ([`others_take_new_connections`]).
    pub fn lock_copy(&self) -> io::Result<OwnedFd> {
        self.lock.try_clone()
    }

    /// The UDP port, for `Alt-Svc`.
    pub fn port(&self) -> Option<u16> {
        self.socket.local_addr().ok().map(|a| a.port())
    }
}

/// What the parent passed: TCP listeners, and UDP sockets each followed by its lock.
#[derive(Debug, Default)]
pub struct Passed {
    pub listeners: Vec<std::net::TcpListener>,
    pub quic: Vec<SlotSocket>,
}

/// Sorts the passed descriptors by what they are (the order of the message: listeners,
/// then socket and lock pairs).
pub fn classify(fds: Vec<OwnedFd>) -> Result<Passed, QuicSetupError> {
    let mut passed = Passed::default();
    let mut fds = fds.into_iter();
    while let Some(fd) = fds.next() {
        match sockopt::socket_type(&fd) {
            Ok(SocketType::DGRAM) => {
                let lock = fds.next().ok_or(QuicSetupError::MissingLock)?;
                let index = read_index(&lock)?;
                passed.quic.push(SlotSocket {
                    socket: UdpSocket::from(fd),
                    lock,
                    index,
                });
            }
            Ok(_) => passed.listeners.push(std::net::TcpListener::from(fd)),
            Err(e) => return Err(QuicSetupError::Classify(e.into())),
        }
    }
    Ok(passed)
}

/// The index the parent wrote at the start of a slot lock's memfd.
fn read_index(lock: &OwnedFd) -> Result<u32, QuicSetupError> {
    let mut bytes = [0u8; 4];
    let read =
        rustix::io::pread(lock, &mut bytes, 0).map_err(|e| QuicSetupError::Index(e.into()))?;
    if read != bytes.len() {
        return Err(QuicSetupError::Index(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the slot lock holds no index",
        )));
    }
    Ok(u32::from_le_bytes(bytes))
}

/// The endpoint configuration of the slot socket at `index`: connection IDs that name it
/// (`super::steering`), and stateless-reset tokens from the parent's key, the same in
/// every worker, so whichever worker reads a dead one's socket next can reset its connections
/// (RFC 9000 §10.3): their clients learn at once that the connection is gone instead of
/// waiting out their idle timeout.
pub fn endpoint_config(
    reset_key: &servery_core::tls_material::StatelessResetKey,
    index: u32,
) -> quinn::EndpointConfig {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &reset_key.0);
    let mut config = quinn::EndpointConfig::new(Arc::new(key));
    config.cid_generator(move || Box::new(super::steering::SlotCidGenerator::new(index)));
    config
}

/// The QUIC server configuration: the worker's TLS configuration with ALPN `h3`.
///
/// This is the one place the QUIC TLS configuration is made. It starts from the TLS
/// configuration the TCP side serves (`tls::Identity::server_config`) and clones it, so it
/// shares that configuration's certificate resolver: whatever identity the TCP side
/// presents, QUIC presents too. TLS 1.2 in it is harmless: QUIC negotiates 1.3 only.
pub fn server_config(
    tls: &rustls::ServerConfig,
    deadlines: &crate::http::Deadlines,
) -> Result<quinn::ServerConfig, QuicSetupError> {
    let mut tls = tls.clone();
    tls.alpn_protocols = vec![super::ALPN_H3.to_vec()];
    // 0-RTT stays off: a replayed early request is a risk nothing here needs to take.
    tls.max_early_data_size = 0;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| QuicSetupError::Tls(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    // An idle connection lasts as long as an idle keep-alive TCP connection.
    let idle = quinn::IdleTimeout::try_from(deadlines.keep_alive)
        .unwrap_or_else(|_| quinn::IdleTimeout::from(quinn::VarInt::from_u32(30_000)));
    transport.max_idle_timeout(Some(idle));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// Runs one slot socket for the life of the worker: waits for the lock, serves, and after
/// `drain` lets go. Incoming connections go to `incoming` (the lifecycle task admits
/// them and counts them as connections).
pub async fn run(
    slot: SlotSocket,
    endpoint_config: quinn::EndpointConfig,
    config: quinn::ServerConfig,
    incoming: UnboundedSender<quinn::Incoming>,
    mut drain: watch::Receiver<bool>,
) {
    let port = slot.port();
    let lock = tokio::select! {
        lock = take_lock(&slot.lock) => match lock {
            Ok(lock) => lock,
            Err(e) => {
                tracing::error!(error = %e, "cannot take the HTTP/3 slot lock; serving TCP only");
                return;
            }
        },
        // Drained before the previous worker let go: never served.
        () = super::serve::draining(&mut drain) => return,
    };
    let endpoint = match quinn::Endpoint::new(
        endpoint_config,
        Some(config),
        slot.socket,
        Arc::new(quinn::TokioRuntime),
    ) {
        Ok(endpoint) => endpoint,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the HTTP/3 endpoint; serving TCP only");
            return;
        }
    };
    tracing::debug!(?port, index = slot.index, "HTTP/3 endpoint serving");
    loop {
        tokio::select! {
            next = endpoint.accept() => match next {
                Some(connection) => {
                    if let Err(refused) = incoming.send(connection) {
                        refused.0.refuse();
                    }
                }
                None => return,
            },
            () = super::serve::draining(&mut drain) => break,
        }
    }
    // Draining: the open connections get GOAWAY from their own tasks and finish. A new
    // connection here was queued on the socket before the steering moved new ones off
    // it: left unanswered while another worker takes new connections (its client's next
    // first flight is steered there), refused at once when none does (a stop), as the
    // core decides (`QuicSteering::stray_connection`, written into the lock by the parent).
    let refuse = async {
        while let Some(connection) = endpoint.accept().await {
            set_aside(connection, others_take_new_connections(&lock));
        }
    };
    tokio::select! {
        () = refuse => {}
        () = endpoint.wait_idle() => {}
    }
    // Nothing of ours is left. A closed endpoint refuses every new connection it reads
    // until its driver ends; while another worker takes new connections the server side
    // is turned off instead, which leaves them unanswered (quinn answers an Initial it
    // has no server for with a stateless reset, which a client holding no token for it
    // discards), and the client's next first flight is steered to a serving worker.
    if others_take_new_connections(&lock) {
        endpoint.set_server_config(None);
    } else {
        endpoint.close(quinn::VarInt::from_u32(0), b"");
    }
    drop(endpoint);
    tracing::debug!(?port, "HTTP/3 endpoint drained; slot released");
    drop(lock);
}

/// Whether the parent's last steering sends new connections to another worker's socket
/// (`super::sockets::STRAY_AT`), read from the slot's lock.
pub fn others_take_new_connections(lock: impl AsFd) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        rustix::io::pread(lock, &mut byte, super::sockets::STRAY_AT),
        Ok(1)
    ) && byte[0] == 1
}

/// A new connection the worker will not serve because it drains: left unanswered while
/// another worker takes new connections, refused otherwise (see [`run`]).
pub fn set_aside(connection: quinn::Incoming, others_take_new: bool) {
    if others_take_new {
        tracing::debug!(peer = %connection.remote_address(), "a handshake queued before the steering changed, left for a serving worker");
        connection.ignore();
    } else {
        connection.refuse();
    }
}

/// Takes the slot's lock through an open file description of our own (a lock taken on
/// the passed descriptor would be shared with every worker that received it).
async fn take_lock(passed: &OwnedFd) -> io::Result<File> {
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(passed));
    let own = File::open(path)?;
    let mut waited = false;
    loop {
        match rustix::fs::flock(own.as_fd(), FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                if waited {
                    tracing::debug!("took over the HTTP/3 slot from the previous worker");
                }
                return Ok(own);
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                waited = true;
                tokio::time::sleep(LOCK_POLL).await;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd() -> OwnedFd {
        let fd =
            rustix::fs::memfd_create("test-slot", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
        rustix::io::pwrite(&fd, &7u32.to_le_bytes(), 0).expect("index");
        fd
    }

    #[tokio::test]
    async fn a_slot_lock_is_held_by_one_worker_until_it_lets_go() {
        // Both "workers" got the same descriptor from the parent, as over SCM_RIGHTS.
        let passed = memfd();
        let first = take_lock(&passed).await.expect("first");
        let second = take_lock(&passed);
        tokio::pin!(second);
        let waited = tokio::time::timeout(LOCK_POLL * 5, &mut second).await;
        assert!(
            waited.is_err(),
            "the replacement waits while the slot is held"
        );
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("taken once released")
            .expect("lock");
    }

    #[test]
    fn passed_descriptors_are_sorted_by_kind_and_a_lone_socket_is_an_error() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
        let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
        let port = udp.local_addr().expect("addr").port();
        let passed = classify(vec![
            OwnedFd::from(tcp),
            OwnedFd::from(udp.try_clone().expect("dup")),
            memfd(),
        ])
        .expect("classify");
        assert_eq!(passed.listeners.len(), 1);
        assert_eq!(passed.quic.len(), 1);
        assert_eq!(passed.quic[0].port(), Some(port));
        assert_eq!(passed.quic[0].index(), 7);
        let empty =
            rustix::fs::memfd_create("no-index", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
        assert!(matches!(
            classify(vec![OwnedFd::from(udp.try_clone().expect("dup")), empty]),
            Err(QuicSetupError::Index(_))
        ));
        assert!(matches!(
            classify(vec![OwnedFd::from(udp)]),
            Err(QuicSetupError::MissingLock)
        ));
    }
}
