//! How the worker takes connections: its listeners prepared, `accept` asked only while
//! the worker has room, QUIC connections taken on the same rule, and the notice a
//! connection's end sends the lifecycle task.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::task::Poll;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::admission::Admission;

pub(super) fn listener(listener: std::net::TcpListener) -> io::Result<TcpListener> {
    TcpListener::from_std(prepare_listener(listener)?)
}

/// Whether an accepted socket starts with the listener's `TCP_NODELAY` (Linux copies it
/// from the listening socket), which saves a `setsockopt` per connection.
pub(super) const ACCEPTED_INHERIT_NODELAY: bool = cfg!(target_os = "linux");

/// Non-blocking, and with `TCP_NODELAY` for every connection accepted from it: small
/// responses must not wait for the client's delayed ACK (Nagle's algorithm). Setting it
/// on the shared listener again is harmless: every worker sets the same value.
pub(super) fn prepare_listener(
    listener: std::net::TcpListener,
) -> io::Result<std::net::TcpListener> {
    listener.set_nonblocking(true)?;
    if ACCEPTED_INHERIT_NODELAY {
        rustix::net::sockopt::set_tcp_nodelay(&listener, true)?;
    }
    Ok(listener)
}

/// Tells the lifecycle task that a connection has ended, however its task ends, with the
/// index [`Admission`] holds it under.
pub(super) struct ClosedGuard(pub(super) UnboundedSender<usize>, pub(super) usize);

impl Drop for ClosedGuard {
    fn drop(&mut self) {
        let _ = self.0.send(self.1);
    }
}

/// The first connection ready on any listener, and whether that listener is one of the
/// last `cleartext` ones (the ACME HTTP-01 listeners of a TLS site).
///
/// `has_room` is asked on every poll, just before accepting: a connection's request may
/// have started since the worker last looked, and a full worker that accepted anyway
/// would serve over its budget what a sibling with room should have taken from the shared
/// backlog. Saying no leaves the connection there; the worker looks again on its next
/// pass (a close, a frame or its heartbeat deadline, whichever comes first).
pub(super) async fn accept_any(
    listeners: &[TcpListener],
    cleartext: usize,
    has_room: impl Fn() -> bool,
) -> (io::Result<(TcpStream, SocketAddr)>, bool) {
    let first_cleartext = listeners.len().saturating_sub(cleartext);
    poll_fn(|cx| {
        if !has_room() {
            return Poll::Pending;
        }
        for (i, l) in listeners.iter().enumerate() {
            if let Poll::Ready(r) = l.poll_accept(cx) {
                return Poll::Ready((r, i >= first_cleartext));
            }
        }
        Poll::Pending
    })
    .await
}

/// How soon a worker looks again for room for a QUIC connection waiting in its channel.
pub(super) const QUIC_ROOM_RECHECK: Duration = Duration::from_millis(50);

/// The next QUIC connection the endpoints handed over, taken only while `has_room` says
/// so, asked on every poll as [`accept_any`] asks it: a connection whose request started
/// since the worker last looked may no longer be closed to make room. One not taken waits
/// in the channel (its client repeats its first flight meanwhile).
pub(super) async fn next_quic(
    incoming: &mut UnboundedReceiver<quinn::Incoming>,
    has_room: impl Fn() -> bool,
) -> Option<quinn::Incoming> {
    poll_fn(|cx| {
        if !has_room() {
            return Poll::Pending;
        }
        incoming.poll_recv(cx)
    })
    .await
}

/// Whether a worker holding `held` connections may accept another: below the limit (not
/// counting those already asked to close), or full with one that may be closed to make
/// room. Read again just before each accept: which connections are idle changes as their
/// requests start and finish, without the worker's loop hearing of it.
pub(super) fn has_room(held: u32, max_connections: u32, admission: &Admission) -> bool {
    if held < max_connections {
        return true;
    }
    let closing = u32::try_from(admission.closing()).unwrap_or(u32::MAX);
    held.saturating_sub(closing) < max_connections || admission.can_make_room()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_accepted_from_a_prepared_listener_have_nagle_off() {
        let listener = prepare_listener(std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
            .expect("prepare");
        let _client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        // Non-blocking now: wait for the connection to be ready to accept, bounded.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let accepted = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline, "never accepted");
                    std::thread::yield_now();
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        if ACCEPTED_INHERIT_NODELAY {
            assert!(
                accepted.nodelay().expect("getsockopt"),
                "TCP_NODELAY not inherited"
            );
        }
    }
}
