//! Deadlines for every state a connection can be in, so that a peer that stops talking can
//! never hold a worker's connection slot.
//!
//! One [`Activity`] per connection records what the connection is doing, cheaply enough
//! for the hot path: requests started (a complete head reached the service), requests
//! finished (their response body was dropped by hyper: written out or abandoned), and a
//! count of reads and writes that moved bytes. The connection task reads it only when its
//! one timer fires ([`Activity::verdict`]), so a request costs three relaxed stores and
//! one clock read, and no timer is reset per request:
//!
//! | state | deadline |
//! |---|---|
//! | no request yet (silent, slow head, TLS or h2 preface with nothing after) | `request_head_timeout` from the accept, in total |
//! | between requests (HTTP/1 keep-alive, HTTP/2 with no open stream) | `keep_alive_timeout` from the last response's end to the next complete head |
//! | a request in progress that moves no byte either way | `send_timeout` without progress |
//!
//! The TLS handshake has its own bound (`tls_handshake_timeout`), and a request body that
//! stalls is ended by the upload path (`body_timeout`, 408). The worker also reads the
//! activity to pick which connection to close when it is full ([`Activity::idle_since`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::body::{Frame, SizeHint};
use servery_core::ValidConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::body::Body;
use super::error::{HttpError, message_bytes};
use super::length_overflow::LengthScan;
use super::validate::MessageError;

/// The deadlines, as a worker is started with them (see `servery --help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    pub request_head: Duration,
    pub keep_alive: Duration,
    pub tls_handshake: Duration,
    pub send: Duration,
    pub body: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        let valid = servery_core::RawConfig::default()
            .validate()
            .ok()
            .map(|c| Deadlines::of(&c));
        valid.unwrap_or(Deadlines {
            request_head: Duration::from_secs(30),
            keep_alive: Duration::from_secs(30),
            tls_handshake: Duration::from_secs(10),
            send: Duration::from_secs(60),
            body: Duration::from_secs(20),
        })
    }
}

impl Deadlines {
    pub fn of(config: &ValidConfig) -> Self {
        let c = config.connections();
        Deadlines {
            request_head: c.request_head_timeout(),
            keep_alive: c.keep_alive_timeout(),
            tls_handshake: c.tls_handshake_timeout(),
            send: c.send_timeout(),
            body: c.body_timeout(),
        }
    }
}

/// What one connection is doing; see the module documentation.
#[derive(Debug)]
pub struct Activity {
    accepted_at: Instant,
    started: AtomicU64,
    finished: AtomicU64,
    /// Reads and writes that moved at least one byte.
    moved: AtomicU64,
    /// When the last response finished, in nanoseconds after `accepted_at`.
    finished_at: AtomicU64,
    /// Rung by the worker to close this connection because it is full and this one has no
    /// request in progress.
    evict: Notify,
    /// How many requests had started when the connection was last asked to close.
    evicted_at: AtomicU64,
    /// The client's address, when something (the access log) needs it.
    peer: Option<std::net::SocketAddr>,
}

/// What the connection's timer decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Look again at this instant.
    Recheck(Instant),
    /// Close: the deadline of the state it is in has passed.
    Expired(Expiry),
}

/// Which deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No complete request head within `request_head_timeout` of the accept.
    NoRequest,
    /// No request within `keep_alive_timeout` of the last response.
    Idle,
    /// A request in progress moved no byte for `send_timeout`.
    Stalled,
}

/// The connection task's memory between two looks at its [`Activity`].
#[derive(Debug, Clone, Copy)]
pub struct Watch {
    moved: u64,
    moved_seen_at: Instant,
}

impl Watch {
    pub fn new(activity: &Activity) -> Self {
        Watch {
            moved: activity.moved.load(Ordering::Relaxed),
            moved_seen_at: activity.accepted_at,
        }
    }
}

impl Activity {
    pub fn new(accepted_at: Instant) -> Arc<Self> {
        Self::with_peer(accepted_at, None)
    }

    /// [`Activity::new`] for a connection whose client address is known.
    pub fn with_peer(accepted_at: Instant, peer: Option<std::net::SocketAddr>) -> Arc<Self> {
        Arc::new(Activity {
            accepted_at,
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            finished_at: AtomicU64::new(0),
            evict: Notify::new(),
            evicted_at: AtomicU64::new(0),
            peer,
        })
    }

    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        self.peer
    }

    /// A complete request head reached the service.
    pub fn request_started(&self) -> u64 {
        self.started.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// How many requests have started on this connection.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Acquire)
    }

    fn request_finished(&self) {
        let since = Instant::now().saturating_duration_since(self.accepted_at);
        self.finished_at.store(
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.finished.fetch_add(1, Ordering::Release);
    }

    /// Whether a request is between its head and the end of its response.
    pub fn in_progress(&self) -> bool {
        self.finished.load(Ordering::Acquire) < self.started.load(Ordering::Acquire)
    }

    /// Since when the connection has had no request in progress, with whether it has never
    /// had one; `None` while a request is in progress.
    pub fn idle_since(&self) -> Option<(Instant, bool)> {
        let started = self.started.load(Ordering::Acquire);
        if self.finished.load(Ordering::Acquire) < started {
            return None;
        }
        if started == 0 {
            return Some((self.accepted_at, true));
        }
        let ns = self.finished_at.load(Ordering::Relaxed);
        Some((self.accepted_at + Duration::from_nanos(ns), false))
    }

    /// Asks the connection to close (it does so only if no request has started since).
    pub fn evict(&self) {
        self.evicted_at.store(self.started(), Ordering::Release);
        self.evict.notify_one();
    }

    /// Whether the last request to close still stands: no request has started since.
    pub fn eviction_stands(&self) -> bool {
        self.started() == self.evicted_at.load(Ordering::Acquire)
    }

    /// Resolves when [`Activity::evict`] has been called.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }

    /// The deadline of the state the connection is in now.
    pub fn verdict(&self, watch: &mut Watch, deadlines: &Deadlines, now: Instant) -> Verdict {
        let moved = self.moved.load(Ordering::Relaxed);
        match self.idle_since() {
            Some((since, never)) => {
                // A request that starts later is judged by progress from here on at the
                // earliest (its head's bytes move the count in any case).
                watch.moved = moved;
                watch.moved_seen_at = now;
                let limit = if never {
                    deadlines.request_head
                } else {
                    deadlines.keep_alive
                };
                let at = since + limit;
                if now >= at {
                    Verdict::Expired(if never {
                        Expiry::NoRequest
                    } else {
                        Expiry::Idle
                    })
                } else {
                    Verdict::Recheck(at)
                }
            }
            None => {
                if moved != watch.moved {
                    watch.moved = moved;
                    watch.moved_seen_at = now;
                }
                if now >= watch.moved_seen_at + deadlines.send {
                    return Verdict::Expired(Expiry::Stalled);
                }
                // Progress is sampled, so a stall is noticed within a quarter of the
                // deadline after it passes; the request may also end in between.
                Verdict::Recheck(now + deadlines.send / 4)
            }
        }
    }

    /// One more read or write moved bytes. Only the connection's own task writes this
    /// counter, so a plain load and store (no locked instruction) is enough.
    fn moved(&self) {
        let n = self.moved.load(Ordering::Relaxed);
        self.moved.store(n.wrapping_add(1), Ordering::Relaxed);
    }
}

/// A connection's stream, counting the reads and writes that move bytes, and answering a
/// `Content-Length` hyper refuses as servery would ([`super::length_overflow`]).
#[derive(Debug)]
pub struct Metered<IO> {
    io: IO,
    activity: Arc<Activity>,
    length_scan: LengthScan,
    /// servery's answer written in place of hyper's `431`, and how much of it is out.
    replacement: Option<(Vec<u8>, usize)>,
}

impl<IO> Metered<IO> {
    pub fn new(io: IO, activity: Arc<Activity>) -> Self {
        Metered {
            io,
            activity,
            length_scan: LengthScan::default(),
            replacement: None,
        }
    }
}

impl<IO: AsyncWrite + Unpin> Metered<IO> {
    /// `Some` when this write is hyper refusing a `Content-Length` it cannot represent
    /// (servery's `413` goes out in its place, and hyper's `len` bytes count as written),
    /// or comes after that answer (dropped: the connection closes); `None` otherwise.
    fn poll_replaced(
        &mut self,
        cx: &mut Context<'_>,
        first: &[u8],
        len: usize,
    ) -> Option<Poll<io::Result<usize>>> {
        if self.replacement.is_none() {
            let started = self.activity.started.load(Ordering::Acquire);
            if !self.length_scan.is_refusal_of_length(started, first) {
                return None;
            }
            let refusal = HttpError::Message(MessageError::ContentLengthTooLarge);
            self.replacement = Some((message_bytes(&refusal), 0));
        }
        let (bytes, at) = self.replacement.as_mut()?;
        while *at < bytes.len() {
            match Pin::new(&mut self.io).poll_write(cx, &bytes[*at..]) {
                Poll::Ready(Ok(0)) => {
                    return Some(Poll::Ready(Err(io::ErrorKind::WriteZero.into())));
                }
                Poll::Ready(Ok(n)) => {
                    *at += n;
                    self.activity.moved();
                }
                Poll::Ready(Err(e)) => return Some(Poll::Ready(Err(e))),
                Poll::Pending => return Some(Poll::Pending),
            }
        }
        Some(Poll::Ready(Ok(len)))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Metered<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.moved();
            // A request head (no request in progress), never a body.
            let started = this.activity.started.load(Ordering::Acquire);
            if this.activity.finished.load(Ordering::Acquire) >= started {
                this.length_scan.feed(started, &buf.filled()[before..]);
            }
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Metered<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.length_scan.seen()
            && let Some(polled) = self.poll_replaced(cx, buf, buf.len())
        {
            return polled;
        }
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.moved();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.length_scan.seen() {
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            let len = bufs.iter().map(|b| b.len()).sum();
            if let Some(polled) = self.poll_replaced(cx, first, len) {
                return polled;
            }
        }
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.moved();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A response body that marks its request finished when hyper drops it: after its last
/// byte was written, or when the stream or connection was abandoned.
struct Finishing {
    inner: Body,
    activity: Arc<Activity>,
}

impl Drop for Finishing {
    fn drop(&mut self) {
        self.activity.request_finished();
    }
}

impl hyper::body::Body for Finishing {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `body`, marking its request finished when hyper is done with it.
pub fn finishing(body: Body, activity: Arc<Activity>) -> Body {
    BoxBody::new(Finishing {
        inner: body,
        activity,
    })
}

/// Marks a request finished if its service future is dropped before it produced a
/// response (the connection closed under it): otherwise the request would count as in
/// progress for as long as the [`Activity`] lives.
#[derive(Debug)]
pub struct Unanswered(Option<Arc<Activity>>);

impl Unanswered {
    pub fn new(activity: Arc<Activity>) -> Self {
        Unanswered(Some(activity))
    }

    /// The response exists: from now on its body marks the end.
    pub fn answered(mut self) -> Arc<Activity> {
        self.0
            .take()
            .unwrap_or_else(|| unreachable!("answered once"))
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(activity) = self.0.take() {
            activity.request_finished();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadlines() -> Deadlines {
        Deadlines {
            request_head: Duration::from_secs(30),
            keep_alive: Duration::from_secs(5),
            tls_handshake: Duration::from_secs(10),
            send: Duration::from_secs(60),
            body: Duration::from_secs(20),
        }
    }

    #[test]
    fn a_connection_without_a_request_expires_at_the_head_deadline_in_total() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        let mut w = Watch::new(&a);
        let d = deadlines();
        // Bytes of a head trickling in do not extend it.
        a.moved();
        assert_eq!(
            a.verdict(&mut w, &d, t0 + Duration::from_secs(29)),
            Verdict::Recheck(t0 + Duration::from_secs(30))
        );
        a.moved();
        assert_eq!(
            a.verdict(&mut w, &d, t0 + Duration::from_secs(30)),
            Verdict::Expired(Expiry::NoRequest)
        );
    }

    #[test]
    fn between_requests_the_keep_alive_deadline_runs_from_the_last_response() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        let mut w = Watch::new(&a);
        let d = deadlines();
        a.request_started();
        let unanswered = Unanswered::new(Arc::clone(&a));
        assert!(a.in_progress());
        assert_eq!(a.idle_since(), None);
        drop(finishing(crate::http::body::empty(), unanswered.answered()));
        assert!(!a.in_progress());
        let (since, never) = a.idle_since().expect("idle");
        assert!(!never && since >= t0);
        assert_eq!(
            a.verdict(&mut w, &d, since + Duration::from_secs(4)),
            Verdict::Recheck(since + d.keep_alive)
        );
        assert_eq!(
            a.verdict(&mut w, &d, since + d.keep_alive),
            Verdict::Expired(Expiry::Idle)
        );
    }

    #[test]
    fn a_request_in_progress_expires_only_when_nothing_moves() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        let mut w = Watch::new(&a);
        let d = deadlines();
        a.request_started();
        let _pending = Unanswered::new(Arc::clone(&a));
        let mut now = t0;
        for _ in 0..10 {
            now += Duration::from_secs(50);
            a.moved();
            assert!(matches!(a.verdict(&mut w, &d, now), Verdict::Recheck(_)));
        }
        // Nothing moves from here on.
        assert!(matches!(
            a.verdict(&mut w, &d, now + Duration::from_secs(59)),
            Verdict::Recheck(_)
        ));
        assert_eq!(
            a.verdict(&mut w, &d, now + Duration::from_secs(60)),
            Verdict::Expired(Expiry::Stalled)
        );
    }

    #[test]
    fn a_dropped_service_future_finishes_its_request() {
        let a = Activity::new(Instant::now());
        a.request_started();
        drop(Unanswered::new(Arc::clone(&a)));
        assert!(!a.in_progress());
    }
}
