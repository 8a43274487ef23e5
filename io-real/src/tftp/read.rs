//! One read transfer: the file goes to the client from a socket of its own (the transfer's
//! TID), driven by the core's [`Sender`].
//!
//! A read runs on a thread of the host runtime's blocking pool with a blocking socket, as
//! tftpd-hpa's transfer process does: a lock-step transfer is one round trip per
//! block, and a receive that blocks is woken by the kernel directly when the ACK lands,
//! where the runtime would first try the receive (the ACK is rarely there yet), wait in
//! `epoll_wait`, and receive again — two more system calls per block, 45,000 times in a
//! 64 MiB read. The receive waits at most [`SLICE`] at a time, so a stop is seen within
//! it and the retransmission deadline is judged on time.

use std::fs::File;
use std::io;
use std::net::UdpSocket;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use servery_core::tftp::options::{Allowed, negotiate};
use servery_core::tftp::packet::{
    ErrorCode, MAX_DATAGRAM, Packet, RawOption, Request, encode_data_header,
};
use servery_core::tftp::transfer::{Out, Sender, Status};

use super::root::Refusal;
use super::transfer::{Context, Ending, send_error_blocking as send_error};

/// The longest one receive waits before the transfer looks at the stop flag and at its
/// retransmission deadline (the TFTP timeouts are whole seconds).
const SLICE: Duration = Duration::from_millis(100);
/// The shortest receive wait (a zero timeout would mean "block for ever").
const MIN_WAIT: Duration = Duration::from_micros(100);

pub(super) fn run(ctx: &Context, socket: &UdpSocket, req: Request) -> Ending {
    if let Err(e) = socket
        .set_nonblocking(false)
        .and_then(|()| socket.set_read_timeout(Some(SLICE)))
    {
        return Ending::Io(e);
    }
    let (file, size) = match ctx.root.open_read(&req.filename) {
        Ok(opened) => opened,
        Err(refusal) => return refuse(socket, refusal),
    };
    let limit = ctx.limits.max_transfer_size();
    if size > limit {
        let refusal = Refusal::new(
            ErrorCode::DiskFull,
            format!("file is larger than the transfer limit ({limit} bytes)"),
        );
        return refuse(socket, refusal);
    }
    let mut negotiation = negotiate(
        &req.options,
        Allowed {
            max_blksize: super::MAX_BLKSIZE,
            max_windowsize: super::MAX_WINDOWSIZE,
            default_timeout: ctx.limits.timeout(),
        },
    );
    if negotiation.wants_tsize {
        negotiation.oack.push(RawOption {
            name: "tsize".into(),
            value: size.to_string(),
        });
    }
    let oack = Packet::Oack(negotiation.oack.clone()).to_vec();
    let with_oack = !negotiation.oack.is_empty();
    let epoch = ctx.epoch;
    let (mut sender, out) = Sender::start(
        epoch.core_now(),
        negotiation.params,
        size,
        with_oack,
        ctx.limits.retries(),
    );
    let mut buf = Vec::with_capacity(4 + usize::from(negotiation.params.blksize));
    let mut ahead = ReadAhead::new(
        usize::from(negotiation.params.blksize) * usize::from(negotiation.params.windowsize),
    );
    if let Err(ending) = send_all(socket, &file, &mut ahead, &oack, &out, &mut buf) {
        return ending;
    }
    let mut incoming = vec![0u8; MAX_DATAGRAM];
    let mut wait = SLICE;
    let mut now = epoch.core_now();
    loop {
        if *ctx.stop.borrow() {
            send_error(socket, ErrorCode::NotDefined, "server shutting down");
            return Ending::Stopped;
        }
        // A window sent in bursts (after a loss, see the core's `window`) wakes for its
        // next burst; otherwise the receive waits its slice, and the timeout is set again
        // only when it changes.
        let want = sender
            .deadline()
            .map_or(SLICE, |at| at.saturating_since(now).clamp(MIN_WAIT, SLICE));
        if want != wait {
            if let Err(e) = socket.set_read_timeout(Some(want)) {
                return Ending::Io(e);
            }
            wait = want;
        }
        let received = socket.recv(&mut incoming);
        // One clock read per datagram, for the ACK and the deadline alike.
        now = epoch.core_now();
        let mut out = match received {
            Ok(n) => match Packet::decode(&incoming[..n]) {
                Ok(Packet::Ack { block }) => sender.on_ack(now, block),
                Ok(Packet::Error { code, message }) => {
                    return Ending::PeerError(code, message);
                }
                // Anything else from the client is a stray: ignored, the transfer goes on.
                _ => Vec::new(),
            },
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Vec::new()
            }
            // ICMP port unreachable surfaces here: the client is gone.
            Err(e) => return Ending::Io(e),
        };
        if sender.deadline().is_some_and(|deadline| now >= deadline) {
            out.extend(sender.on_timeout(now));
        }
        match sender.status() {
            Status::Complete => return Ending::Complete { bytes: size },
            Status::TimedOut => {
                send_error(socket, ErrorCode::NotDefined, "timed out");
                return Ending::TimedOut;
            }
            Status::Running | Status::Aborted => {}
        }
        if let Err(ending) = send_all(socket, &file, &mut ahead, &oack, &out, &mut buf) {
            return ending;
        }
    }
}

fn refuse(socket: &UdpSocket, refusal: Refusal) -> Ending {
    send_error(socket, refusal.code, &refusal.message);
    Ending::Refused(refusal)
}

/// The file's bytes ahead of the transfer, read in chunks of at least 64 KiB: one `pread`
/// for dozens of blocks instead of one per block.
struct ReadAhead {
    offset: u64,
    bytes: Vec<u8>,
    chunk: usize,
}

impl ReadAhead {
    fn new(window_bytes: usize) -> Self {
        ReadAhead {
            offset: 0,
            bytes: Vec::new(),
            chunk: window_bytes.max(64 * 1024),
        }
    }

    /// Copies `[offset, offset + into.len())` into `into`, reading a chunk from there when
    /// it is not held. The file's length was fixed at open: a read that comes up short
    /// means the file shrank under the transfer.
    fn read(&mut self, file: &File, offset: u64, into: &mut [u8]) -> std::io::Result<()> {
        let held = offset >= self.offset
            && offset + into.len() as u64 <= self.offset + self.bytes.len() as u64;
        if !held {
            self.bytes.resize(self.chunk.max(into.len()), 0);
            let mut got = 0;
            while got < self.bytes.len() {
                match file.read_at(&mut self.bytes[got..], offset + got as u64)? {
                    0 => break,
                    n => got += n,
                }
            }
            self.bytes.truncate(got);
            self.offset = offset;
            if got < into.len() {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        let start = (offset - self.offset) as usize;
        into.copy_from_slice(&self.bytes[start..start + into.len()]);
        Ok(())
    }
}

fn send_all(
    socket: &UdpSocket,
    file: &File,
    ahead: &mut ReadAhead,
    oack: &[u8],
    out: &[Out],
    buf: &mut Vec<u8>,
) -> Result<(), Ending> {
    for o in out {
        match *o {
            Out::Oack => {
                socket.send(oack).map_err(Ending::Io)?;
            }
            Out::Data { block, offset, len } => {
                buf.clear();
                encode_data_header(block, buf);
                buf.resize(4 + len, 0);
                // The page cache serves this in the common case (see decision 0007); the
                // length was fixed when the file was opened, so a file that shrank under
                // the transfer ends it rather than sending a short block that would end
                // it early and silently.
                if let Err(e) = ahead.read(file, offset, &mut buf[4..]) {
                    send_error(
                        socket,
                        ErrorCode::NotDefined,
                        "file changed during transfer",
                    );
                    return Err(Ending::Io(e));
                }
                socket.send(buf).map_err(Ending::Io)?;
            }
            Out::Ack { .. } => {}
        }
    }
    Ok(())
}
