//! What every transfer shares: its context, how it ends, and how it is logged.

use std::net::SocketAddr;
use std::time::Instant as StdInstant;

use servery_core::config::TftpLimits;
use servery_core::tftp::packet::{ErrorCode, Packet, Request};
use tokio::net::UdpSocket;
use tokio::sync::watch;

use super::clock::Epoch;
use super::root::{Refusal, ServedRoot};

/// What a transfer needs from the service.
#[derive(Debug, Clone)]
pub(super) struct Context {
    pub root: ServedRoot,
    pub limits: TftpLimits,
    /// How writes are made; `None` when they are off.
    pub writer: Option<crate::write::Writer>,
    pub epoch: Epoch,
    /// Turns `true` when the service stops: every transfer ends with an ERROR.
    pub stop: watch::Receiver<bool>,
}

/// How a transfer ended.
#[derive(Debug)]
pub(super) enum Ending {
    Complete { bytes: u64 },
    Refused(Refusal),
    TimedOut,
    PeerError(ErrorCode, String),
    Stopped,
    Io(std::io::Error),
}

/// Best effort: an ERROR that does not reach the peer changes nothing for us.
pub(super) async fn send_error(socket: &UdpSocket, code: ErrorCode, message: &str) {
    let packet = Packet::Error {
        code,
        message: message.into(),
    };
    if let Err(e) = socket.send(&packet.to_vec()).await {
        tracing::debug!(error = %e, "cannot send a TFTP ERROR");
    }
}

/// [`send_error`] on a blocking socket (a read transfer's, see `super::read`).
pub(super) fn send_error_blocking(socket: &std::net::UdpSocket, code: ErrorCode, message: &str) {
    let packet = Packet::Error {
        code,
        message: message.into(),
    };
    if let Err(e) = socket.send(&packet.to_vec()) {
        tracing::debug!(error = %e, "cannot send a TFTP ERROR");
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Direction {
    Read,
    Write,
}

/// Runs one transfer on its own socket and logs its end.
pub(super) async fn run(
    ctx: Context,
    local: SocketAddr,
    peer: SocketAddr,
    dir: Direction,
    req: Request,
) {
    let started = StdInstant::now();
    let name = String::from_utf8_lossy(&req.filename).into_owned();
    // A socket of its own: its port is the transfer's TID, and `connect` has the kernel
    // drop datagrams from any other peer.
    let socket = match UdpSocket::bind(SocketAddr::new(local.ip(), 0)).await {
        Ok(socket) => socket,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "TFTP: cannot open a transfer socket");
            return;
        }
    };
    if let Err(e) = socket.connect(peer).await {
        tracing::warn!(%peer, error = %e, "TFTP: cannot reach the client");
        return;
    }
    let ending = match dir {
        // On the host runtime's blocking pool, sized for every transfer the limit allows
        // on top of the parent's other blocking work (`crate::parent::host`); see
        // `super::read` for why a read blocks. Shutting the runtime down waits for it, so
        // a read in progress tells its client the service stopped.
        Direction::Read => match socket.into_std() {
            Ok(socket) => {
                let ctx = ctx.clone();
                tokio::task::spawn_blocking(move || super::read::run(&ctx, &socket, req))
                    .await
                    .unwrap_or_else(|e| Ending::Io(std::io::Error::other(e)))
            }
            Err(e) => Ending::Io(e),
        },
        Direction::Write => super::write::run(&ctx, &socket, req).await,
    };
    let elapsed = started.elapsed();
    match ending {
        Ending::Complete { bytes } => {
            tracing::info!(%peer, file = %name, ?dir, bytes, ?elapsed, "TFTP transfer complete")
        }
        Ending::Refused(r) => {
            tracing::info!(%peer, file = %name, ?dir, code = r.code.code(), reason = %r.message, "TFTP request refused")
        }
        Ending::TimedOut => {
            tracing::info!(%peer, file = %name, ?dir, ?elapsed, "TFTP transfer dropped: the client stopped answering")
        }
        Ending::PeerError(code, message) => {
            tracing::info!(%peer, file = %name, ?dir, code = code.code(), %message, "TFTP transfer ended by the client")
        }
        Ending::Stopped => {
            tracing::info!(%peer, file = %name, ?dir, "TFTP transfer ended: the service stops")
        }
        Ending::Io(e) => {
            tracing::info!(%peer, file = %name, ?dir, error = %e, "TFTP transfer failed")
        }
    }
}
