//! The parent's TFTP service (`--tftp`): one UDP listener on the host runtime and a
//! bounded pool of transfers, each on a socket of its own (reads on the runtime's blocking
//! pool, see `read`). The protocol itself (codec,
//! option negotiation, the transfer machines) is pure and lives in
//! `servery_core::tftp`; this module moves datagrams and file bytes.
//!
//! Entry points, for whoever runs the parent's singletons:
//! - [`bind`] before anything serves, so a port that cannot be had stops the start;
//! - [`TftpService::start`] when the singleton machine starts TFTP: spawns the listener
//!   on the given runtime and returns at once;
//! - [`RunningTftp::stop`] when it stops: returns at once (it never blocks the driver
//!   thread); the listener closes and every transfer sends its client an ERROR and ends
//!   within one scheduling round of the host runtime (a read, which runs on its blocking
//!   pool, within a tenth of a second). Dropping a [`RunningTftp`] stops it the same way.
//!
//! Nothing here depends on the generation: the root, the hidden-file policy and the
//! limits are fixed for the parent's life, so a generation switch changes nothing.

pub mod args;
mod clock;
mod read;
pub mod root;
mod slot;
mod transfer;
mod write;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use servery_core::config::TftpLimits;
use servery_core::tftp::packet::{ErrorCode, MAX_DATAGRAM, Packet};
use tokio::net::UdpSocket;
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, watch};

use crate::worker::broker::BrokerHandle;
use crate::write::Writer;

pub use root::ServedRoot;
pub use slot::{TftpReplies, TftpSlot};
use transfer::{Context, Direction};

/// The largest block size a client may negotiate: RFC 2348's maximum. A block that does
/// not fit the path MTU is fragmented by IP, which loopback and LANs handle; clients that
/// care ask for 1468.
pub const MAX_BLKSIZE: u16 = servery_core::tftp::packet::MAX_BLKSIZE;
/// The largest RFC 7440 window: more in flight only adds loss on a busy network.
pub const MAX_WINDOWSIZE: u16 = 64;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TftpError {
    #[error("cannot bind the TFTP socket on udp {addr}: {source}{hint}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
        hint: &'static str,
    },
    #[error("cannot open the served root for TFTP: {0}")]
    Root(#[source] std::io::Error),
    #[error("cannot hand the TFTP socket to the runtime: {0}")]
    Register(#[source] std::io::Error),
}

/// Binds the listening socket (before the service starts, so a failure stops servery
/// before it serves anything).
pub fn bind(addr: SocketAddr) -> Result<std::net::UdpSocket, TftpError> {
    let socket = std::net::UdpSocket::bind(addr).map_err(|source| TftpError::Bind {
        addr,
        hint: if source.kind() == std::io::ErrorKind::PermissionDenied && addr.port() < 1024 {
            " (a port below 1024 needs root or CAP_NET_BIND_SERVICE; see --tftp-port)"
        } else {
            ""
        },
        source,
    })?;
    socket.set_nonblocking(true).map_err(TftpError::Register)?;
    Ok(socket)
}

/// What the service runs with.
#[derive(Debug, Clone)]
pub struct TftpSettings {
    pub limits: TftpLimits,
    /// How writes are made (`--tftp-write`); `None`: every write request is refused.
    pub writes: Option<crate::write::WriteSettings>,
    /// The served root's path, to remove the temporary files a previous parent's writes
    /// left (killed mid-write) before the first request is taken. Only with writes: the
    /// prefix is the parent's own, which no worker cleanup ever removes.
    pub root_path: std::path::PathBuf,
    /// HTTP requires authentication (`--auth`): TFTP has none, which the start says.
    pub http_auth: bool,
}

/// What the start's log and `ctl status` say when `--auth` is set with `--tftp`: the
/// protocol has no authentication, so `--auth` does not cover it. Empty otherwise.
pub fn no_auth_warnings(
    socket: Option<&std::net::UdpSocket>,
    http_auth: bool,
    writes: bool,
) -> Vec<String> {
    let Some(addr) = socket
        .filter(|_| http_auth)
        .and_then(|s| s.local_addr().ok())
    else {
        return Vec::new();
    };
    let what = if writes { "read and write" } else { "read" };
    vec![format!(
        "TFTP has no authentication: --auth does not apply to it, and anyone who can reach \
         udp {addr} can {what} the served root"
    )]
}

#[derive(Debug)]
pub struct TftpService;

/// A started service.
#[derive(Debug)]
pub struct RunningTftp {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
}

impl RunningTftp {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the listener and every transfer; returns at once (see the module's docs).
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for RunningTftp {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl TftpService {
    /// `broker` is the parent's own broker client
    /// ([`servery_core::parent::PARENT_CLIENT`]); writes need it and are refused without.
    pub fn start(
        socket: std::net::UdpSocket,
        settings: TftpSettings,
        root: ServedRoot,
        broker: Option<BrokerHandle>,
        rt: &Handle,
    ) -> Result<RunningTftp, TftpError> {
        let addr = socket.local_addr().map_err(TftpError::Register)?;
        let socket = {
            let _enter = rt.enter();
            UdpSocket::from_std(socket).map_err(TftpError::Register)?
        };
        let (stop, stopped) = watch::channel(false);
        let writer = settings
            .writes
            .clone()
            .zip(broker)
            .map(|(settings, broker)| Writer {
                root: Arc::clone(root.live()),
                broker,
                settings: Arc::new(settings),
            });
        let ctx = Context {
            root,
            limits: settings.limits,
            writer,
            epoch: clock::Epoch::now(),
            stop: stopped,
        };
        rt.spawn(listen(
            socket,
            addr,
            settings.limits,
            settings.root_path,
            ctx,
        ));
        Ok(RunningTftp { addr, stop })
    }
}

/// Clients with a transfer in progress, so a retransmitted request does not start a
/// second transfer of the same file to the same port.
type Active = Arc<Mutex<HashSet<SocketAddr>>>;

/// Removes its peer from the active set when the transfer ends, however it ends.
struct ActiveGuard(Active, SocketAddr);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        if let Ok(mut set) = self.0.lock() {
            set.remove(&self.1);
        }
    }
}

async fn listen(
    socket: UdpSocket,
    local: SocketAddr,
    limits: TftpLimits,
    root_path: std::path::PathBuf,
    ctx: Context,
) {
    let pool = Arc::new(Semaphore::new(limits.max_transfers() as usize));
    let writes = ctx.writer.is_some();
    if writes {
        // Before the first request, so no write of ours can be in progress: requests that
        // arrive meanwhile wait in the socket's buffer.
        let removed = tokio::task::spawn_blocking(move || {
            crate::parent::remove_worker_temp_files(&root_path, servery_core::parent::PARENT_CLIENT)
        })
        .await;
        match removed {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!(
                removed = n,
                "TFTP: removed temporary files an earlier parent left"
            ),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "TFTP: cannot look for leftover temporary files")
            }
            Err(e) => tracing::warn!(error = %e, "TFTP: the leftover cleanup did not run"),
        }
    }
    let active: Active = Arc::default();
    let mut stop = ctx.stop.clone();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    tracing::info!(%local, writes, "TFTP service started");
    loop {
        let (n, peer) = tokio::select! {
            _ = stop.changed() => break,
            received = socket.recv_from(&mut buf) => match received {
                Ok(got) => got,
                Err(e) => {
                    // ICMP errors for earlier replies surface here; the socket is fine.
                    tracing::debug!(error = %e, "TFTP listener receive error");
                    continue;
                }
            },
        };
        let (dir, req) = match Packet::decode(&buf[..n]) {
            Ok(Packet::Rrq(req)) => (Direction::Read, req),
            Ok(Packet::Wrq(req)) if writes => (Direction::Write, req),
            Ok(Packet::Wrq(_)) => {
                reply_error(
                    &socket,
                    peer,
                    ErrorCode::AccessViolation,
                    "writes are disabled",
                )
                .await;
                continue;
            }
            // A DATA/ACK/ERROR/OACK on the listening port belongs to no transfer.
            Ok(_) => continue,
            Err(e) => {
                // Only what claims to be a request is answered: replying to anything else
                // would let a forged source bounce junk at a third party.
                if n >= 2 && matches!(u16::from_be_bytes([buf[0], buf[1]]), 1 | 2) {
                    reply_error(&socket, peer, ErrorCode::IllegalOperation, &e.to_string()).await;
                }
                continue;
            }
        };
        let fresh = match active.lock() {
            Ok(mut set) => set.insert(peer),
            Err(_) => break,
        };
        if !fresh {
            continue;
        }
        let guard = ActiveGuard(Arc::clone(&active), peer);
        let Ok(permit) = Arc::clone(&pool).try_acquire_owned() else {
            drop(guard);
            tracing::info!(%peer, "TFTP request refused: every transfer slot is busy");
            reply_error(
                &socket,
                peer,
                ErrorCode::NotDefined,
                "server busy, try again later",
            )
            .await;
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            transfer::run(ctx, local, peer, dir, req).await;
            drop(permit);
            drop(guard);
        });
    }
    tracing::info!(%local, "TFTP service stopped");
}

async fn reply_error(socket: &UdpSocket, peer: SocketAddr, code: ErrorCode, message: &str) {
    let packet = Packet::Error {
        code,
        message: message.into(),
    };
    if let Err(e) = socket.send_to(&packet.to_vec(), peer).await {
        tracing::debug!(%peer, error = %e, "cannot send a TFTP ERROR");
    }
}
