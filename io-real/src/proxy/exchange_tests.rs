//! The proxy's exchanges over its pool of HTTP/1.1 connections, end to end
//! ([`Proxy::handle`]), against an upstream written here on a Unix socket and driven by
//! the test one event at a time: when it accepts, what it reads, when it answers or
//! closes. The rules of decision 0123 that only a whole exchange shows: the retry of a
//! request hyper gives back unwritten from a reused connection, no retry once a request
//! was partly written, and no reuse of a connection whose response body failed.

use std::convert::Infallible;
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use hyper::body::Frame;
use servery_core::proto::{BrokerRequest, FrameDecoder, MAX_FRAME_DEFAULT, WorkerMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use super::*;
use crate::worker::broker::BrokerHandle;

/// The longest any step of these tests waits for its event: a bound that fails a broken
/// exchange instead of hanging the test, never a delay the test relies on.
const BOUND: Duration = Duration::from_secs(10);

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// An upstream listening on a Unix socket, accepting only when the test says.
struct Upstream {
    listener: UnixListener,
    /// The same listening socket, asked directly whether a connection waits.
    asked: StdUnixListener,
    path: PathBuf,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Upstream {
    fn bind() -> Upstream {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "servery-proxy-exchange-{}-{}.sock",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let asked = StdUnixListener::bind(&path).expect("test setup");
        asked.set_nonblocking(true).expect("test setup");
        let listener = asked.try_clone().expect("test setup");
        Upstream {
            listener: UnixListener::from_std(listener).expect("test setup"),
            asked,
            path,
        }
    }

    /// The next connection the proxy opened.
    async fn accept(&self) -> UnixStream {
        self.listener.accept().await.expect("test setup").0
    }

    /// Whether a connection the proxy opened waits to be accepted (asked of the socket
    /// itself, not of the runtime's last word on it).
    fn has_waiting(&self) -> bool {
        match self.asked.accept() {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) => panic!("test setup: accept: {e}"),
        }
    }
}

/// Reads from `stream` until what it has read contains `marker`; all it read.
async fn read_until(stream: &mut UnixStream, marker: &[u8]) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(marker.len()).any(|w| w == marker) {
        let n = stream.read(&mut buf).await.expect("test setup");
        assert!(
            n > 0,
            "the proxy closed the connection before sending {marker:?}"
        );
        seen.extend_from_slice(&buf[..n]);
    }
    seen
}

/// The worker's messages to the parent, as the broker client sent them.
type Frames = Arc<Mutex<Vec<Vec<u8>>>>;

/// A proxy with one route, `/` to `upstream`, cutting off a response body after
/// `idle_secs` of silence; its reports to the parent are kept in the frames.
fn proxy_to(upstream: &Path, idle_secs: f64) -> (Arc<Proxy>, Frames) {
    let frames = Frames::default();
    let sink = Arc::clone(&frames);
    let broker = BrokerHandle::new(16, Duration::from_secs(5), move |frame| {
        sink.lock().unwrap_or_else(|e| e.into_inner()).push(frame);
    });
    let args = ProxyArgs {
        proxy: vec![format!("/=unix:{}", upstream.display())],
        proxy_connect_timeout: 5.0,
        proxy_first_byte_timeout: 5.0,
        proxy_idle_timeout: idle_secs,
        proxy_balance: args::DEFAULT_BALANCE.into(),
        ..ProxyArgs::default()
    };
    let link = HealthLink {
        down: Arc::new(DownSet::default()),
        broker,
    };
    let proxy = Proxy::from_settings(&args, None, Some(link))
        .expect("test setup")
        .expect("one route");
    (Arc::new(proxy), frames)
}

fn pool_of(proxy: &Proxy) -> Arc<pool::Pool> {
    Arc::clone(
        proxy.pools[0]
            .as_ref()
            .expect("an HTTP/1.1 route has a pool"),
    )
}

/// The outcomes the worker reported to the parent: `(upstream, ok)`.
fn outcomes(frames: &Frames) -> Vec<(u16, bool)> {
    let mut decoder = FrameDecoder::new(MAX_FRAME_DEFAULT);
    for frame in frames.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        decoder.push(frame);
    }
    let mut seen = Vec::new();
    while let Some(message) = decoder.next_worker_message().expect("well-formed frames") {
        if let WorkerMessage::Broker {
            request: BrokerRequest::UpstreamOutcome { upstream, ok },
            ..
        } = message
        {
            seen.push((upstream, ok));
        }
    }
    seen
}

fn in_flight(proxy: &Proxy) -> u32 {
    proxy.health.in_flight(0)
}

fn get() -> Request<http_body_util::Empty<Bytes>> {
    Request::builder()
        .uri("/x?q=1")
        .header(header::HOST, "site")
        .body(http_body_util::Empty::new())
        .expect("test setup")
}

/// A request body the test writes a chunk at a time.
struct Chunks(tokio::sync::mpsc::UnboundedReceiver<Bytes>);

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

/// The whole body of `response`.
async fn body_of(response: Response<crate::http::Body>) -> Bytes {
    response
        .into_body()
        .collect()
        .await
        .expect("the response body ends cleanly")
        .to_bytes()
}

/// The first request: the proxy opens a connection, the upstream answers `ok` on it and
/// keeps it open. The upstream's side of it, once the pool holds it idle and ready.
async fn first_exchange(proxy: &Arc<Proxy>, upstream: &Upstream) -> UnixStream {
    let (response, side) = tokio::join!(proxy.handle(get(), None, false), async {
        let mut side = upstream.accept().await;
        read_until(&mut side, b"\r\n\r\n").await;
        side.write_all(OK).await.expect("test setup");
        side
    });
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(&body_of(response).await[..], b"ok");
    // The body's last frame gave the connection back; hyper marks it ready for the next
    // request when its connection task has run after the response: waited for exactly.
    let pool = pool_of(proxy);
    while pool.idle_counts() != (1, 1) {
        tokio::task::yield_now().await;
    }
    side
}

/// The retry rule end to end: an idle connection the upstream closes just as the next
/// request is given to it comes back from hyper with the request unwritten, and the
/// request goes out again on a new connection: the client sees 200, the upstream's
/// health counts one answered request, no failure.
#[tokio::test]
async fn a_request_given_back_unwritten_by_a_reused_connection_is_sent_on_a_new_one() {
    tokio::time::timeout(BOUND, async {
        let upstream = Arc::new(Upstream::bind());
        let (proxy, frames) = proxy_to(&upstream.path, 60.0);
        let pool = pool_of(&proxy);
        let mut first = first_exchange(&proxy, &upstream).await;

        // The upstream closes its idle connection (a FIN, as a server ending an idle
        // keep-alive connection does) and says so on a side channel, the side channel
        // first. Both reach the runtime's driver in the same turn, in that order, so this
        // test runs on while hyper's task for the connection is still to read the close:
        // the pool takes the connection as open, and hyper reads the close before it
        // writes anything of the request.
        let (mut said, heard) = std::os::unix::net::UnixStream::pair().expect("test setup");
        heard.set_nonblocking(true).expect("test setup");
        let mut heard = UnixStream::from_std(heard).expect("test setup");
        std::io::Write::write_all(&mut said, b"!").expect("test setup");
        // Immediate: a Unix socket's shutdown does not wait.
        first.shutdown().await.expect("test setup");
        heard.read_exact(&mut [0u8; 1]).await.expect("test setup");
        assert_eq!(
            pool.idle_counts(),
            (1, 1),
            "test setup: hyper must not have seen the close yet, so the pool takes the closed connection"
        );

        // The upstream answers a second connection, if the proxy opens one.
        let serving = {
            let upstream = Arc::clone(&upstream);
            tokio::spawn(async move {
                let mut second = upstream.accept().await;
                let head = read_until(&mut second, b"\r\n\r\n").await;
                second.write_all(OK).await.expect("test setup");
                (second, head)
            })
        };
        let response = proxy.handle(get(), None, false).await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "retry: a request hyper gave back unwritten from a reused connection is sent again on a new one"
        );
        assert_eq!(in_flight(&proxy), 1, "the request counted in flight once");
        assert_eq!(&body_of(response).await[..], b"ok");
        assert_eq!(in_flight(&proxy), 0);
        let (_second, head) = serving.await.expect("the upstream answered");
        assert!(
            head.starts_with(b"GET /x?q=1 HTTP/1.1\r\n"),
            "the same request, its target as the client sent it: {:?}",
            String::from_utf8_lossy(&head)
        );
        assert_eq!(
            outcomes(&frames),
            [],
            "retry: the stale connection's failure is not the upstream's (no failure reported)"
        );

        let mut rest = Vec::new();
        first.read_to_end(&mut rest).await.expect("test setup");
        assert!(
            rest.is_empty(),
            "retry: nothing of the request was written on the closed connection, got {:?}",
            String::from_utf8_lossy(&rest)
        );
        assert!(!upstream.has_waiting(), "no third connection");
    })
    .await
    .expect("the exchange finished");
}

/// The retry rule's other side: a request whose body was partly written on a reused
/// connection when the upstream closed it is not sent again (it may have had an effect):
/// 502, one failure reported, no new connection.
#[tokio::test]
async fn a_request_partly_written_on_a_reused_connection_is_not_sent_again() {
    tokio::time::timeout(BOUND, async {
        let upstream = Upstream::bind();
        let (proxy, frames) = proxy_to(&upstream.path, 60.0);
        let mut first = first_exchange(&proxy, &upstream).await;

        let (chunks, body) = tokio::sync::mpsc::unbounded_channel();
        let request = Request::builder()
            .method(http::Method::POST)
            .uri("/upload")
            .header(header::HOST, "site")
            .body(Chunks(body))
            .expect("test setup");
        chunks
            .send(Bytes::from_static(b"first-part"))
            .expect("test setup");
        let (response, ()) = tokio::join!(proxy.handle(request, None, false), async {
            // The head and the first part of the body reach the upstream, which closes.
            read_until(&mut first, b"first-part").await;
            first.shutdown().await.expect("test setup");
        });
        assert_eq!(
            response.status(),
            StatusCode::BAD_GATEWAY,
            "retry: a request partly written is the upstream's failure, never sent again"
        );
        assert!(
            !upstream.has_waiting(),
            "retry: no new connection for a request partly written"
        );
        assert_eq!(outcomes(&frames), [(0, false)], "one failure reported");
        assert_eq!(in_flight(&proxy), 0);
        drop(chunks);
    })
    .await
    .expect("the exchange finished");
}

/// A GET through `proxy` that `upstream` answers with half of the body it promises (5
/// bytes of 10), then silence: the response, and the upstream's side of its connection.
async fn half_a_body(proxy: &Proxy, upstream: &Upstream) -> (Response<Body>, UnixStream) {
    tokio::join!(proxy.handle(get(), None, false), async {
        let mut side = upstream.accept().await;
        read_until(&mut side, b"\r\n\r\n").await;
        side.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello")
            .await
            .expect("test setup");
        side
    })
}

/// No reuse after a failed response body: a body cut off by the idle timeout (the one
/// failure that finds hyper's connection still open) closes its connection rather than
/// giving it back, and the next request takes a new one.
#[tokio::test]
async fn a_connection_whose_response_body_failed_is_not_given_back() {
    tokio::time::timeout(BOUND, async {
        let upstream = Upstream::bind();
        let (proxy, _frames) = proxy_to(&upstream.path, 0.2);
        let pool = pool_of(&proxy);
        let (response, mut first) = half_a_body(&proxy, &upstream).await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let mut got = Vec::new();
        let failed = loop {
            match body.frame().await {
                Some(Ok(frame)) => got.extend_from_slice(&frame.into_data().unwrap_or_default()),
                Some(Err(e)) => break e,
                None => panic!("the body ended though the upstream sent half of it"),
            }
        };
        assert_eq!(&got[..], b"hello");
        assert_eq!(failed.kind(), io::ErrorKind::TimedOut, "{failed}");
        assert_eq!(
            pool.idle_counts().0,
            0,
            "no reuse after a failed response body: the pool kept the connection whose body was cut off"
        );
        drop(body);
        let mut rest = Vec::new();
        first.read_to_end(&mut rest).await.expect("test setup");
        assert!(rest.is_empty(), "the connection was closed, not written to");

        let (response, _second) = tokio::join!(proxy.handle(get(), None, false), async {
            let mut second = upstream.accept().await;
            read_until(&mut second, b"\r\n\r\n").await;
            second.write_all(OK).await.expect("test setup");
            second
        });
        assert_eq!(&body_of(response).await[..], b"ok", "on a new connection");
    })
    .await
    .expect("the exchange finished");
}

/// No reuse after an aborted response body: a client that goes away in the middle of a
/// response closes the upstream's connection.
#[tokio::test]
async fn a_connection_whose_response_body_the_client_dropped_is_closed() {
    tokio::time::timeout(BOUND, async {
        let upstream = Upstream::bind();
        let (proxy, _frames) = proxy_to(&upstream.path, 60.0);
        let pool = pool_of(&proxy);
        let (response, mut first) = half_a_body(&proxy, &upstream).await;
        let mut body = response.into_body();
        let frame = body.frame().await.expect("a frame").expect("data");
        assert_eq!(&frame.into_data().unwrap_or_default()[..], b"hello");
        drop(body);
        assert_eq!(
            pool.idle_counts().0,
            0,
            "no reuse after an aborted response body: the pool kept the connection"
        );
        let mut rest = Vec::new();
        first.read_to_end(&mut rest).await.expect("test setup");
        assert!(rest.is_empty(), "the connection was closed, not written to");
    })
    .await
    .expect("the exchange finished");
}
