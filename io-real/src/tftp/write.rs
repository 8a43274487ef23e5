//! One write transfer (`--tftp-write`): the same write flow as an HTTP upload, through the
//! parent's own broker client ([`servery_core::parent::PARENT_CLIENT`]): reservation,
//! target lease, private temporary file, atomic publish. So a TFTP write and an HTTP PUT
//! to one file serialize on the broker's lease table.
//!
//! The client hears nothing but an ERROR until the reservation, the lease and the
//! temporary file are held: its first OACK or ACK 0 goes out when the flow first asks the
//! source for content. The final block's ACK waits for the publish, so a client told
//! "done" finds the file in place; a failed publish is an ERROR instead.

use std::path::Path;

use bytes::Bytes;
use servery_core::tftp::budget::{WriteAllowance, write_allowance};
use servery_core::tftp::options::{Allowed, negotiate};
use servery_core::tftp::packet::{ErrorCode, MAX_DATAGRAM, Packet, RawOption, Request};
use servery_core::tftp::transfer::{Out, Received, Receiver, Status};
use tokio::net::UdpSocket;
use tokio::sync::watch;

use super::clock::Epoch;
use super::root::Refusal;
use super::transfer::{Context, Ending, send_error};
use crate::write::{ChunkSource, Grant, WriteError, blocking, target, write_file};

pub(super) async fn run(ctx: &Context, socket: &UdpSocket, req: Request) -> Ending {
    let Some(writer) = ctx.writer.as_ref() else {
        return refuse(
            socket,
            Refusal::new(ErrorCode::AccessViolation, "writes are disabled"),
        )
        .await;
    };
    let rel = match ctx.root.resolve(&req.filename) {
        Ok(rel) => rel,
        Err(refusal) => return refuse(socket, refusal).await,
    };
    let name = rel
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let rel_dir = rel.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut negotiation = negotiate(
        &req.options,
        Allowed {
            max_blksize: super::MAX_BLKSIZE,
            max_windowsize: super::MAX_WINDOWSIZE,
            default_timeout: ctx.limits.timeout(),
        },
    );
    let limit = ctx
        .limits
        .max_transfer_size()
        .min(writer.settings.max_upload_size);
    let announced = negotiation.params.client_tsize;
    let allowance = match write_allowance(announced, limit) {
        Ok(allowance) => allowance,
        Err(_) => return refuse(socket, too_large(limit)).await,
    };
    if let Some(size) = announced {
        // RFC 2349: the server echoes the size it accepts.
        negotiation.oack.push(RawOption {
            name: "tsize".into(),
            value: size.to_string(),
        });
    }
    let root = writer.root.dir();
    let resolved = blocking(move || target::resolve(&root, &rel_dir, &name)).await;
    let target = match resolved {
        Ok(target) => target,
        Err(e) => return refuse(socket, refusal_of(&e, limit)).await,
    };
    // What the write reserves is what it may receive (see the core's `budget`).
    let mut reservation = match Grant::reserve_upload(&writer.broker, allowance.bytes).await {
        Ok(grant) => grant,
        Err(e) => return refuse(socket, refusal_of(&e, limit)).await,
    };
    let with_oack = !negotiation.oack.is_empty();
    let (receiver, first) = Receiver::start(
        ctx.epoch.core_now(),
        negotiation.params,
        with_oack,
        ctx.limits.retries(),
        allowance.bytes,
    );
    let mut source = Source {
        socket,
        receiver,
        first: Some(first),
        oack: Packet::Oack(negotiation.oack).to_vec(),
        epoch: ctx.epoch,
        stop: ctx.stop.clone(),
        final_ack: None,
        ended: None,
        allowance,
    };
    let written = write_file(
        writer,
        &target,
        &mut reservation,
        false,
        None,
        &servery_core::precondition::Conditions::default(),
        &mut source,
    )
    .await;
    // The reservation goes back before the client hears how the write ended, on every way
    // out: a client told "done" (or refused) finds the budget free for its next upload,
    // and the linger below holds nothing of the budget.
    reservation.release().await;
    match written {
        Ok(_) => {
            let Some(block) = source.final_ack else {
                // The flow finished without the final block: cannot happen, but then the
                // client must not be told it is done.
                send_error(socket, ErrorCode::NotDefined, "write failed").await;
                return Ending::Io(std::io::Error::other("published without the final block"));
            };
            send_ack(socket, block).await;
            source.linger(block).await;
            Ending::Complete {
                bytes: source.receiver.bytes(),
            }
        }
        Err(e) => {
            if let Some(ending) = source.ended.take() {
                // The source already told the client (a timeout, its own ERROR, a limit).
                return ending;
            }
            let refusal = refusal_of(&e, limit);
            send_error(socket, refusal.code, &refusal.message).await;
            Ending::Refused(refusal)
        }
    }
}

async fn refuse(socket: &UdpSocket, refusal: Refusal) -> Ending {
    send_error(socket, refusal.code, &refusal.message).await;
    Ending::Refused(refusal)
}

fn too_large(limit: u64) -> Refusal {
    Refusal::new(
        ErrorCode::DiskFull,
        format!("file is larger than the transfer limit ({limit} bytes)"),
    )
}

/// The ERROR a write failure is told as.
fn refusal_of(e: &WriteError, limit: u64) -> Refusal {
    use ErrorCode as C;
    let (code, message) = match e {
        WriteError::TooLarge { .. } => return too_large(limit),
        WriteError::Busy => (C::NotDefined, "busy: another client is writing this file"),
        WriteError::Saturated => (C::NotDefined, "busy: the upload budget is in use"),
        WriteError::Exists | WriteError::PreconditionFailed => (C::FileExists, "file exists"),
        WriteError::NoParent => (C::FileNotFound, "the directory does not exist"),
        WriteError::IsDirectory | WriteError::NotADirectory | WriteError::Forbidden => {
            (C::AccessViolation, "access violation")
        }
        WriteError::Io(io) if crate::write::is_out_of_space(io) => (C::DiskFull, "disk full"),
        WriteError::Broker(_) | WriteError::LeaseLost | WriteError::ShuttingDown => {
            (C::NotDefined, "service unavailable, try again later")
        }
        _ => (C::NotDefined, "write failed"),
    };
    Refusal::new(code, message)
}

async fn send_ack(socket: &UdpSocket, block: u16) {
    let _ = socket.send(&Packet::Ack { block }.to_vec()).await;
}

/// The client's DATA as the write flow's content.
struct Source<'a> {
    socket: &'a UdpSocket,
    receiver: Receiver,
    /// The OACK or ACK 0, sent when the flow first asks for content.
    first: Option<Out>,
    oack: Vec<u8>,
    epoch: Epoch,
    stop: watch::Receiver<bool>,
    /// The final block, acknowledged only once the file is published.
    final_ack: Option<u16>,
    /// How the transfer ended, when the source ended it and told the client.
    ended: Option<Ending>,
    /// What the write reserved: the most it may receive.
    allowance: WriteAllowance,
}

impl Source<'_> {
    async fn send(&self, out: Out) {
        let bytes = match out {
            Out::Oack => self.oack.clone(),
            Out::Ack { block } => Packet::Ack { block }.to_vec(),
            Out::Data { .. } => return,
        };
        let _ = self.socket.send(&bytes).await;
    }

    async fn end(
        &mut self,
        code: ErrorCode,
        message: &str,
        ending: Ending,
        e: WriteError,
    ) -> WriteError {
        send_error(self.socket, code, message).await;
        self.ended = Some(ending);
        e
    }

    async fn next(&mut self) -> Option<Result<Bytes, WriteError>> {
        if let Some(first) = self.first.take() {
            self.send(first).await;
        }
        if self.receiver.status() == Status::Complete {
            return None;
        }
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let deadline = self
                .epoch
                .tokio_at(self.receiver.deadline().unwrap_or_default());
            let received = tokio::select! {
                _ = self.stop.changed() => {
                    let e = self.end(ErrorCode::NotDefined, "server shutting down", Ending::Stopped, WriteError::ShuttingDown).await;
                    return Some(Err(e));
                }
                () = tokio::time::sleep_until(deadline) => {
                    match self.receiver.on_timeout(self.epoch.core_now()) {
                        Some(out) => { self.send(out).await; continue; }
                        None if self.receiver.status() == Status::TimedOut => {
                            let e = self.end(ErrorCode::NotDefined, "timed out", Ending::TimedOut, WriteError::BodyTimeout(deadline.elapsed())).await;
                            return Some(Err(e));
                        }
                        None => continue,
                    }
                }
                received = self.socket.recv(&mut buf) => received,
            };
            let n = match received {
                Ok(n) => n,
                Err(e) => {
                    self.ended = Some(Ending::Io(std::io::Error::new(e.kind(), e.to_string())));
                    return Some(Err(WriteError::Body(e.to_string())));
                }
            };
            match Packet::decode(&buf[..n]) {
                Ok(Packet::Data { block, data }) => {
                    match self
                        .receiver
                        .on_data(self.epoch.core_now(), block, data.len())
                    {
                        Received::Write { ack, .. } => {
                            if self.receiver.status() == Status::Complete {
                                self.final_ack = Some(block);
                            } else if let Some(block) = ack {
                                self.send(Out::Ack { block }).await;
                            }
                            return Some(Ok(Bytes::copy_from_slice(data)));
                        }
                        Received::Skip { ack } => {
                            if let Some(block) = ack {
                                self.send(Out::Ack { block }).await;
                            }
                        }
                        Received::TooLarge => {
                            let limit = self.allowance.bytes;
                            let refusal = if self.allowance.announced {
                                Refusal::new(
                                    ErrorCode::DiskFull,
                                    format!("more data than the announced size ({limit} bytes)"),
                                )
                            } else {
                                too_large(limit)
                            };
                            let e = self
                                .end(
                                    refusal.code,
                                    &refusal.message,
                                    Ending::Refused(refusal.clone()),
                                    WriteError::TooLarge { limit },
                                )
                                .await;
                            return Some(Err(e));
                        }
                        Received::Illegal => {
                            let refusal = Refusal::new(
                                ErrorCode::IllegalOperation,
                                "block larger than negotiated",
                            );
                            let e = self
                                .end(
                                    refusal.code,
                                    &refusal.message,
                                    Ending::Refused(refusal.clone()),
                                    WriteError::BadRequest("oversized TFTP block"),
                                )
                                .await;
                            return Some(Err(e));
                        }
                    }
                }
                Ok(Packet::Error { code, message }) => {
                    self.ended = Some(Ending::PeerError(code, message.clone()));
                    return Some(Err(WriteError::Body(format!(
                        "the client ended the transfer: {message}"
                    ))));
                }
                // Strays are ignored.
                _ => {}
            }
        }
    }

    /// After the final ACK: a client whose ACK was lost sends its last block again; it
    /// is acknowledged again for one timeout.
    async fn linger(&mut self, block: u16) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let until = tokio::time::Instant::now() + self.receiver.timeout();
        loop {
            let received = tokio::select! {
                _ = self.stop.changed() => return,
                () = tokio::time::sleep_until(until) => return,
                received = self.socket.recv(&mut buf) => received,
            };
            match received.map(|n| {
                Packet::decode(&buf[..n])
                    .ok()
                    .map(|p| matches!(p, Packet::Data { block: b, .. } if b == block))
            }) {
                Ok(Some(true)) => send_ack(self.socket, block).await,
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }
}

impl ChunkSource for Source<'_> {
    fn next_chunk(
        &mut self,
    ) -> impl std::future::Future<Output = Option<Result<Bytes, WriteError>>> + Send {
        self.next()
    }
}
