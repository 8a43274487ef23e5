//! The bodies that cross the proxy, streamed frame by frame (hyper's back-pressure: a
//! frame is read only when the other side has taken the last one), each watching time:
//! the request body marks when it last moved (the first-byte timeout counts from then),
//! and the response body ends in an error when the upstream is silent for the idle
//! timeout.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// When the request body last moved, in milliseconds since the request started.
#[derive(Debug)]
pub(super) struct Progress {
    start: Instant,
    last_ms: AtomicU64,
}

impl Progress {
    pub(super) fn new() -> Arc<Progress> {
        Arc::new(Progress {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }

    fn moved(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// When the body last moved (the start if it never did).
    pub(super) fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// The client's request body on its way upstream.
pub(super) struct Outgoing<B> {
    inner: B,
    progress: Arc<Progress>,
}

impl<B> Outgoing<B> {
    pub(super) fn new(inner: B, progress: Arc<Progress>) -> Self {
        Outgoing { inner, progress }
    }
}

impl<B> Body for Outgoing<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            self.progress.moved();
        }
        polled.map(|f| f.map(|r| r.map_err(|e| io::Error::other(format!("client body: {e}")))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The upstream's response body on its way to the client.
pub(super) struct Incoming {
    inner: hyper::body::Incoming,
    idle: Duration,
    /// The idle timer, made the first time the upstream has nothing ready (a small body
    /// that arrives with its head never needs one), and set again from the first wait
    /// after each frame: the silence counted is the time spent waiting.
    silence: Option<Pin<Box<Sleep>>>,
    /// A frame passed since the timer was last set.
    moved: bool,
    route: Arc<str>,
    /// The admission grant and the count in flight the exchange holds until its body
    /// ends (or is dropped).
    permit: Option<super::Hold>,
    /// The pooled connection (HTTP/1.1 routes): given back when the body ends cleanly,
    /// dropped (closed) when it fails or is dropped before its end.
    lease: Option<super::pool::Lease>,
}

impl Incoming {
    pub(super) fn new(
        inner: hyper::body::Incoming,
        idle: Duration,
        route: Arc<str>,
        permit: super::Hold,
        lease: Option<super::pool::Lease>,
    ) -> Self {
        let mut incoming = Incoming {
            inner,
            idle,
            silence: None,
            moved: false,
            route,
            permit: Some(permit),
            lease: None,
        };
        // A body that is over before it is read (none, or its length 0) is never
        // polled by hyper's server.
        if incoming.inner.is_end_stream() {
            if let Some(lease) = lease {
                lease.give_back();
            }
        } else {
            incoming.lease = lease;
        }
        incoming
    }
}

impl Incoming {
    /// The upstream's body has ended cleanly: its connection goes back to the pool.
    fn give_back(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.give_back();
        }
    }

    /// The idle timer, running from now if a frame passed since it was set; made on the
    /// first wait.
    fn silence(&mut self) -> Pin<&mut Sleep> {
        let moved = std::mem::take(&mut self.moved);
        let idle = self.idle;
        let mut fresh = false;
        let sleep = self.silence.get_or_insert_with(|| {
            fresh = true;
            Box::pin(tokio::time::sleep(idle))
        });
        if moved && !fresh {
            sleep.as_mut().reset(Instant::now() + idle);
        }
        sleep.as_mut()
    }
}

impl Body for Incoming {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                match &frame {
                    None => {
                        // The exchange is over: its grant goes back now, not when
                        // hyper drops the body.
                        this.give_back();
                        this.permit = None;
                    }
                    // A connection that failed is never reused.
                    Some(Err(_)) => this.lease = None,
                    // hyper's server stops polling a body that says it has ended, so
                    // the last frame gives the connection back.
                    Some(Ok(_)) => {
                        if this.inner.is_end_stream() {
                            this.give_back();
                        }
                    }
                }
                this.moved = true;
                Poll::Ready(frame.map(|f| {
                    f.map_err(|e| {
                        tracing::warn!(route = %this.route, error = %e, "upstream response body failed");
                        io::Error::other(format!("upstream body: {e}"))
                    })
                }))
            }
            Poll::Pending => match this.silence().poll(cx) {
                Poll::Ready(()) => {
                    this.lease = None;
                    tracing::warn!(route = %this.route, idle = ?this.idle, "upstream silent in its response body: cut off");
                    Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "upstream idle timeout",
                    ))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
