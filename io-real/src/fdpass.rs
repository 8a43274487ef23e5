//! Passing listening sockets from the parent to a worker over its control channel with
//! `SCM_RIGHTS`. The message is one data byte (the number of descriptors, so the worker
//! can tell a truncated transfer from a complete one) carrying the descriptors.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

/// More descriptors than this for one worker (its listeners, and its slot's HTTP/3 sockets
/// with their locks) is a configuration no one needs.
pub const MAX_FDS: usize = 64;

/// Errors of the descriptor-passing layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FdPassError {
    #[error("cannot pass {0} descriptors (at most {MAX_FDS})")]
    TooMany(usize),
    #[error("sendmsg/recvmsg failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the control channel closed before the listeners arrived")]
    Eof,
    #[error("expected {announced} descriptors, received {received}")]
    Mismatch { announced: usize, received: usize },
}

fn io(e: Errno) -> FdPassError {
    FdPassError::Io(e.into())
}

/// Send `fds` as one message on a connected Unix stream socket.
pub fn send_fds(socket: BorrowedFd<'_>, fds: &[BorrowedFd<'_>]) -> Result<(), FdPassError> {
    if fds.len() > MAX_FDS {
        return Err(FdPassError::TooMany(fds.len()));
    }
    let count = [fds.len() as u8];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(FdPassError::TooMany(fds.len()));
    }
    loop {
        match sendmsg(
            socket,
            &[IoSlice::new(&count)],
            &mut control,
            SendFlags::empty(),
        ) {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(FdPassError::Eof),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(io(e)),
        }
    }
}

/// Receive the descriptors [`send_fds`] sent. Blocks until they arrive. Received
/// descriptors are close-on-exec.
pub fn recv_fds(socket: BorrowedFd<'_>) -> Result<Vec<OwnedFd>, FdPassError> {
    let mut count = [0u8; 1];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    // A one-byte buffer: the descriptors ride on the count byte, and the frames that
    // follow stay in the socket for the async reader.
    let msg = loop {
        match recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut count)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(msg) => break msg,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(io(e)),
        }
    };
    if msg.bytes == 0 {
        return Err(FdPassError::Eof);
    }
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    let announced = usize::from(count[0]);
    if msg.flags.contains(ReturnFlags::CTRUNC) || fds.len() != announced {
        return Err(FdPassError::Mismatch {
            announced,
            received: fds.len(),
        });
    }
    Ok(fds)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn listeners_cross_a_socketpair_and_frames_after_them_stay_readable() {
        use std::io::{Read, Write};
        let (mut a, b) = UnixStream::pair().expect("pair");
        let l1 = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let l2 = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        send_fds(a.as_fd(), &[l1.as_fd(), l2.as_fd()]).expect("send");
        a.write_all(b"frame").expect("write");
        let fds = recv_fds(b.as_fd()).expect("recv");
        assert_eq!(fds.len(), 2);
        let got = std::net::TcpListener::from(fds.into_iter().next().expect("one"));
        assert_eq!(
            got.local_addr().expect("addr"),
            l1.local_addr().expect("addr")
        );
        let mut rest = [0u8; 5];
        (&b).read_exact(&mut rest).expect("read");
        assert_eq!(&rest, b"frame");
    }

    #[test]
    fn eof_before_the_listeners_is_an_error() {
        let (a, b) = UnixStream::pair().expect("pair");
        drop(a);
        assert!(matches!(recv_fds(b.as_fd()), Err(FdPassError::Eof)));
    }
}
