//! A cleartext TCP connection shaped to how hyper uses it, so that a new connection costs
//! as few system calls as it must.
//!
//! hyper-util's protocol detection reads the first 24 bytes on their own (enough for the
//! HTTP/2 preface) before HTTP/1 reads the rest, which is two `recvfrom` for a request
//! that arrived in one segment. The first read here takes whatever has arrived, up to
//! [`READ_AHEAD`], and serves the small reads from it. And hyper half-closes
//! (`shutdown(SHUT_WR)`) a connection it has finished with just before the stream is
//! dropped and closed, which sends the same FIN the close sends, so that call is skipped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How much the first read takes. A request head is usually a few hundred bytes; a longer
/// one is read on by hyper itself.
pub const READ_AHEAD: usize = 8 * 1024;

/// A read smaller than this, on a connection's first read, goes through the read-ahead
/// buffer; a larger one reads the socket directly, as every later read does.
const SMALL_READ: usize = 1024;

#[derive(Debug)]
pub struct PlainStream {
    tcp: TcpStream,
    /// Bytes read ahead and not yet handed out, from `ahead_at` on.
    ahead: Vec<u8>,
    ahead_at: usize,
    first_read_done: bool,
}

impl PlainStream {
    pub fn new(tcp: TcpStream) -> Self {
        Self {
            tcp,
            ahead: Vec::new(),
            ahead_at: 0,
            first_read_done: false,
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
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
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
}
