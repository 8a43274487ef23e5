//! A cleartext TCP connection shaped to how hyper uses it, so that a new connection costs
//! as few system calls as it must.
//!
//! hyper-util's protocol detection reads the first 24 bytes on their own (enough for the
//! HTTP/2 preface) before HTTP/1 reads the rest, which is two `recvfrom` for a request
//! that arrived in one segment. The first read here takes whatever has arrived, up to
//! [`READ_AHEAD`], and serves the small reads from it. And hyper half-closes
//! (`shutdown(SHUT_WR)`) a connection it has finished with just before the stream is
//! dropped and closed, which sends the same FIN the close sends, so that call is skipped.
//!
//! A response known to be the connection's last ([`LastResponse`]) is corked, so that its
//! final segment leaves with the FIN when the stream is closed, as one packet, instead of
//! the FIN following on its own: the peer then handles one segment fewer, and the close
//! handshake runs where the server sends it rather than inside the client's next call on
//! the socket. nginx does the same for its `tcp_nopush` responses.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How much the first read takes. A request head is usually a few hundred bytes; a longer
/// one is read on by hyper itself.
pub(super) const READ_AHEAD: usize = 8 * 1024;

/// A read smaller than this, on a connection's first read, goes through the read-ahead
/// buffer; a larger one reads the socket directly, as every later read does.
const SMALL_READ: usize = 1024;

/// Set by whoever produces responses when the one about to be written is the connection's
/// last (the connection closes after it), so the stream can send its end with the FIN.
#[derive(Debug, Clone, Default)]
pub struct LastResponse(Arc<AtomicBool>);

impl LastResponse {
    pub fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_marked(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
pub struct PlainStream {
    tcp: TcpStream,
    /// Bytes read ahead and not yet handed out, from `ahead_at` on.
    ahead: Vec<u8>,
    ahead_at: usize,
    first_read_done: bool,
    last: LastResponse,
    corked: bool,
}

impl PlainStream {
    pub fn new(tcp: TcpStream) -> Self {
        Self {
            tcp,
            ahead: Vec::new(),
            ahead_at: 0,
            first_read_done: false,
            last: LastResponse::default(),
            corked: false,
        }
    }

    /// The signal that the response about to be written is this connection's last.
    pub fn last_response(&self) -> LastResponse {
        self.last.clone()
    }

    /// Before the last response's first write: hold partial segments back (`TCP_CORK`)
    /// until the close, which sends what is held together with the FIN. Full segments
    /// still leave at once, and Linux sends a held tail after 200 ms at most should the
    /// close not come. A failed `setsockopt` only costs the FIN its own segment.
    fn hold_tail_if_last(&mut self) {
        if !self.corked && self.last.is_marked() {
            self.corked = true;
            let _ = rustix::net::sockopt::set_tcp_cork(&self.tcp, true);
        }
    }

    fn hand_out_ahead(&mut self, dst: &mut ReadBuf<'_>) {
        let rest = &self.ahead[self.ahead_at..];
        let n = rest.len().min(dst.remaining());
        dst.put_slice(&rest[..n]);
        self.ahead_at += n;
        if self.ahead_at == self.ahead.len() {
            // Free the buffer: a keep-alive connection must not carry it for its lifetime.
            self.ahead = Vec::new();
            self.ahead_at = 0;
        }
    }

    fn poll_read_ahead(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.ahead.capacity() == 0 {
            self.ahead = Vec::with_capacity(READ_AHEAD);
        }
        // Through the stream's own read path, not `try_read_buf`: a short read there also
        // clears the socket's readiness, so hyper's next read waits for the event loop
        // instead of asking the socket and being told it would block. Zero bytes is end of
        // stream, which the caller then sees as an empty read, as from the socket itself.
        let read = std::pin::pin!(self.tcp.read_buf(&mut self.ahead));
        read.poll(cx).map_ok(|_| ())
    }
}

impl AsyncRead for PlainStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.ahead_at < this.ahead.len() {
            this.hand_out_ahead(dst);
            return Poll::Ready(Ok(()));
        }
        if !this.first_read_done && dst.remaining() < SMALL_READ {
            ready!(this.poll_read_ahead(cx))?;
            this.first_read_done = true;
            this.hand_out_ahead(dst);
            return Poll::Ready(Ok(()));
        }
        this.first_read_done = true;
        Pin::new(&mut this.tcp).poll_read(cx, dst)
    }
}

impl AsyncWrite for PlainStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.hold_tail_if_last();
        Pin::new(&mut this.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.hold_tail_if_last();
        Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    /// hyper shuts a connection down only when it is done with it in both directions, and
    /// the stream is closed right after; the close sends the FIN (or, with unread input,
    /// the reset) that `shutdown` would.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Drop for PlainStream {
    /// Closing a socket with unread input sends a reset instead of a FIN, and a reset
    /// discards whatever the cork still holds: the end of the response would never leave.
    /// So with input unread (a client that sent more after asking to close) the tail is
    /// released first, and the peer gets the whole response before the reset, as it would
    /// without the cork.
    fn drop(&mut self) {
        if self.corked && rustix::io::ioctl_fionread(&self.tcp).map_or(true, |n| n > 0) {
            let _ = rustix::net::sockopt::set_tcp_cork(&self.tcp, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (PlainStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (PlainStream::new(server), client)
    }

    #[tokio::test]
    async fn a_small_first_read_takes_everything_that_arrived_and_hands_it_out_in_order() {
        let (mut server, mut client) = pair().await;
        let request = b"GET /some/longer/path HTTP/1.1\r\nHost: x\r\n\r\n";
        client.write_all(request).await.expect("write");
        let mut got = Vec::new();
        let mut small = [0u8; 24];
        let n = server.read(&mut small).await.expect("read");
        got.extend_from_slice(&small[..n]);
        assert!(
            !server.ahead.is_empty(),
            "the rest was read ahead, not left in the socket"
        );
        while got.len() < request.len() {
            let mut big = [0u8; 4096];
            let n = server.read(&mut big).await.expect("read");
            assert_ne!(n, 0, "early end of stream");
            got.extend_from_slice(&big[..n]);
        }
        assert_eq!(got, request);
        assert_eq!(
            server.ahead.capacity(),
            0,
            "the buffer is freed once drained"
        );

        // Later reads go to the socket, and end of stream still reads as zero bytes.
        client.write_all(b"next").await.expect("write");
        let mut next = [0u8; 4];
        server.read_exact(&mut next).await.expect("read");
        assert_eq!(&next, b"next");
        drop(client);
        let mut tail = [0u8; 8];
        assert_eq!(server.read(&mut tail).await.expect("read"), 0);
    }

    #[tokio::test]
    async fn a_connection_closed_before_any_byte_reads_as_end_of_stream() {
        let (mut server, client) = pair().await;
        drop(client);
        let mut small = [0u8; 24];
        assert_eq!(server.read(&mut small).await.expect("read"), 0);
    }

    #[tokio::test]
    async fn writes_pass_through_and_the_close_ends_the_stream_for_the_peer() {
        let (mut server, mut client) = pair().await;
        server.write_all(b"response").await.expect("write");
        server.shutdown().await.expect("shutdown");
        drop(server);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"response");
    }

    /// The peer's side of a pair as a plain non-blocking socket, so a read asks the
    /// kernel at once rather than waiting on the event loop.
    async fn raw_pair() -> (PlainStream, std::net::TcpStream) {
        let (server, client) = pair().await;
        let client = client.into_std().expect("std");
        client.set_nonblocking(true).expect("nonblocking");
        (server, client)
    }

    /// Reads what has arrived and the end of stream or error, waiting at most 5 s.
    fn read_until_closed(client: &mut std::net::TcpStream) -> (Vec<u8>, Option<io::ErrorKind>) {
        use std::io::Read;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            match client.read(&mut buf) {
                Ok(0) => return (got, None),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline, "no end of stream");
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Err(e) => return (got, Some(e.kind())),
            }
        }
    }

    #[tokio::test]
    async fn the_last_response_is_held_and_leaves_with_the_close() {
        use std::io::Read;
        let (mut server, mut client) = raw_pair().await;

        // An ordinary response is on its way at once (loopback delivers during the write).
        server.write_all(b"first").await.expect("write");
        let mut buf = [0u8; 16];
        let n = client
            .read(&mut buf)
            .expect("an unheld write arrives at once");
        assert_eq!(&buf[..n], b"first");

        server.last_response().mark();
        server.write_all(b"last").await.expect("write");
        // Well inside the kernel's 200 ms bound on a held tail.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let err = client
            .read(&mut buf)
            .expect_err("the last response left before the close");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);

        drop(server);
        assert_eq!(read_until_closed(&mut client), (b"last".to_vec(), None));
    }

    #[tokio::test]
    async fn a_held_response_is_released_before_the_reset_unread_input_causes() {
        use std::io::Write;
        let (mut server, mut client) = raw_pair().await;
        // The client sends more after asking to close; the server never reads it, so its
        // close is a reset, which would discard a response still held.
        client
            .write_all(b"GET /again HTTP/1.1\r\n\r\n")
            .expect("write");
        server.last_response().mark();
        server.write_all(b"response").await.expect("write");
        drop(server);
        let (got, _reset) = read_until_closed(&mut client);
        assert_eq!(got, b"response");
    }
}
