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
//! | a response its client takes slower than `min_send_rate` (a zero HTTP/2 or QUIC window, a trickle) | `send_timeout` of waiting on the client |
//!
//! The TLS handshake has its own bound (`tls_handshake_timeout`), and a request body that
//! stalls is ended by the upload path (`body_timeout`, 408). The worker also reads the
//! activity to pick which connection to close when it is full ([`Activity::idle_since`],
//! [`Activity::held_since`]).
//!
//! A response waits on its client (decision 0041) from the moment hyper has its body,
//! except while the body itself waits on its source (a file read on the blocking pool, an
//! archive being written, an application's stream): that time is the server's, so the
//! body measures it and the rate rule leaves it out. Bytes are counted as they reach the
//! socket, so a client that pings or acknowledges settings does not pass for one that
//! reads. An HTTP/3 connection is judged by the same rules (`http3::serve`), its bytes
//! counted as its streams' transport takes them, which is as fast as the peer's flow
//! control allows.

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
    /// Bytes a second; `0` leaves only the rule that something moves.
    pub min_send_rate: u64,
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
            min_send_rate: 2048,
            body: Duration::from_secs(20),
        })
    }
}

impl Deadlines {
    pub fn of(config: &ValidConfig) -> Self {
        Self::of_limits(config.connections())
    }

    /// The deadlines of these connection limits (a committed generation's).
    pub fn of_limits(c: &servery_core::config::ConnectionLimits) -> Self {
        Deadlines {
            request_head: c.request_head_timeout(),
            keep_alive: c.keep_alive_timeout(),
            tls_handshake: c.tls_handshake_timeout(),
            send: c.send_timeout(),
            min_send_rate: c.min_send_rate(),
            body: c.body_timeout(),
        }
    }

    /// How often a connection is looked at: often enough that a response its client stops
    /// taking counts as idle within a second or two, and that a request's start is seen
    /// that soon after it (the timer is never reset per request).
    fn tick(&self) -> Duration {
        (self.send / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// Whether `bytes` taken in `span` of waiting is slower than the floor (with the floor
    /// off, whether nothing was taken).
    fn too_slow(&self, bytes: u64, span: Duration) -> bool {
        if self.min_send_rate == 0 {
            return bytes == 0;
        }
        (bytes as f64) < self.min_send_rate as f64 * span.as_secs_f64()
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
    /// Bytes written to the socket. Only the connection's own task writes them.
    written: AtomicU64,
    /// Response bodies that hyper holds (created, not yet dropped).
    bodies: AtomicU64,
    /// Of those, the ones waiting on their source (last polled and pending).
    source_waiting: AtomicU64,
    /// Nanoseconds bodies spent waiting on their source, summed when each wait ends.
    source_ns: AtomicU64,
    /// Since when the client has taken its response slower than the floor, as nanoseconds
    /// after `accepted_at` plus one; 0 when it has not. Set by the connection's timer.
    held_since: AtomicU64,
    /// Bytes read while no request was in progress, since the last one started: a head
    /// begun and not finished when its deadline passes is a `408` to log, silence is not.
    head_read: AtomicU64,
    /// The status servery wrote in place of hyper's refusal of a head (0: none).
    replaced_refusal: AtomicU64,
    /// The request line of the head being read, for the log line of a refused head.
    head_line: std::sync::Mutex<super::head_line::HeadLine>,
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
    /// A response waited on a client taking it slower than `min_send_rate` for
    /// `send_timeout` (a zero HTTP/2 window, a trickle of reads).
    TooSlow,
}

/// The connection task's memory between two looks at its [`Activity`].
#[derive(Debug, Clone, Copy)]
pub struct Watch {
    moved: u64,
    moved_seen_at: Instant,
    /// The last look while a response was waiting to be sent.
    last: Option<Sample>,
    /// Where the client started taking its response slower than the floor.
    held: Option<Sample>,
}

/// The response counters at one look.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    written: u64,
    source_ns: u64,
}

impl Watch {
    pub fn new(activity: &Activity) -> Self {
        Watch {
            moved: activity.moved.load(Ordering::Relaxed),
            moved_seen_at: activity.accepted_at,
            last: None,
            held: None,
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
            written: AtomicU64::new(0),
            bodies: AtomicU64::new(0),
            source_waiting: AtomicU64::new(0),
            source_ns: AtomicU64::new(0),
            held_since: AtomicU64::new(0),
            head_read: AtomicU64::new(0),
            replaced_refusal: AtomicU64::new(0),
            head_line: std::sync::Mutex::default(),
        })
    }

    pub fn accepted_at(&self) -> Instant {
        self.accepted_at
    }

    /// Whether part of a request head arrived since the last request started.
    pub fn head_begun(&self) -> bool {
        self.head_read.load(Ordering::Relaxed) > 0
    }

    /// The status servery sent in place of hyper's refusal of a head, if it did.
    pub fn replaced_refusal(&self) -> Option<u16> {
        u16::try_from(self.replaced_refusal.load(Ordering::Relaxed))
            .ok()
            .filter(|s| *s != 0)
    }

    /// The raw request line of the head being read (as far as it arrived; empty when
    /// none of it did): what the log shows for a head refused before it was parsed.
    pub fn head_line(&self) -> Vec<u8> {
        let started = self.started.load(Ordering::Acquire);
        self.head_line
            .lock()
            .map(|h| h.line(started).to_vec())
            .unwrap_or_default()
    }

    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        self.peer
    }

    /// A complete request head reached the service.
    pub fn request_started(&self) -> u64 {
        self.head_read.store(0, Ordering::Relaxed);
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

    /// How many requests are between their head and the end of their response (HTTP/2
    /// and HTTP/3 streams side by side; an upgraded connection's session counts as one).
    pub fn requests_in_progress(&self) -> u64 {
        let finished = self.finished.load(Ordering::Acquire);
        self.started
            .load(Ordering::Acquire)
            .saturating_sub(finished)
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

    /// Since when a request in progress has had its response taken slower than the floor
    /// (an HTTP/2 stream at a zero window, a client reading a trickle): for a full worker
    /// such a connection is idle too, after those that have no request in progress.
    pub fn held_since(&self) -> Option<Instant> {
        match self.held_since.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(self.accepted_at + Duration::from_nanos(ns - 1)),
        }
    }

    fn set_held(&self, since: Option<Instant>) {
        let ns = since.map_or(0, |at| {
            let after = at.saturating_duration_since(self.accepted_at).as_nanos();
            u64::try_from(after).unwrap_or(u64::MAX - 1) + 1
        });
        self.held_since.store(ns, Ordering::Relaxed);
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
                self.not_responding(watch);
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
                    // Looked at again within a tick, so that a request starting meanwhile
                    // is judged from then on, not from this state's deadline.
                    Verdict::Recheck(at.min(now + deadlines.tick()))
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
                if self.pace(watch, deadlines, now) {
                    return Verdict::Expired(Expiry::TooSlow);
                }
                // Progress is sampled, so a stall is noticed within a tick after it
                // passes; the request may also end in between.
                Verdict::Recheck(now + deadlines.tick())
            }
        }
    }

    /// No response is waiting on the client: nothing to judge, nothing held.
    fn not_responding(&self, watch: &mut Watch) {
        watch.last = None;
        watch.held = None;
        self.set_held(None);
    }

    /// The rate rule for a request in progress: whether its response has waited on a
    /// client slower than the floor for `send_timeout`. Marks the connection held (see
    /// [`Activity::held_since`]) from the first look at which the client took less than
    /// the floor since the look before, and releases it once the client has caught up on
    /// average since then; time the bodies waited on their source is left out.
    fn pace(&self, watch: &mut Watch, deadlines: &Deadlines, now: Instant) -> bool {
        if self.bodies.load(Ordering::Acquire) == 0 {
            // The service is still working on the response (or reading the request
            // body): the server's time, under the stall rule only.
            self.not_responding(watch);
            return false;
        }
        // The count first: a wait that ended before it was read has its time in the sum.
        let waiting = self.source_waiting.load(Ordering::Acquire) > 0;
        let sample = Sample {
            at: now,
            written: self.written.load(Ordering::Relaxed),
            source_ns: self.source_ns.load(Ordering::Relaxed),
        };
        let Some(last) = watch.last.replace(sample) else {
            return false;
        };
        if waiting {
            // A body waits on its source: not the client's doing, and the wait is not in
            // `source_ns` yet, so the client is neither held nor judged at this look.
            self.set_held(None);
            return false;
        }
        let client_time = |from: &Sample| {
            now.saturating_duration_since(from.at)
                .saturating_sub(Duration::from_nanos(
                    sample.source_ns.wrapping_sub(from.source_ns),
                ))
        };
        let taken = |from: &Sample| sample.written.wrapping_sub(from.written);
        match watch.held {
            None => {
                if sample.source_ns == last.source_ns
                    && deadlines.too_slow(taken(&last), client_time(&last))
                {
                    watch.held = Some(last);
                    self.set_held(Some(last.at));
                }
                false
            }
            Some(held) => {
                let waited = client_time(&held);
                if !deadlines.too_slow(taken(&held), waited) {
                    watch.held = None;
                    self.set_held(None);
                    return false;
                }
                self.set_held(Some(held.at));
                waited >= deadlines.send
            }
        }
    }

    /// One more read or write moved bytes. Only the connection's own task writes this
    /// counter, so a plain load and store (no locked instruction) is enough.
    fn moved(&self) {
        let n = self.moved.load(Ordering::Relaxed);
        self.moved.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// HTTP/3: `n` more bytes of a response were taken by the transport, which lets in only
    /// what the peer's flow control allows. Its streams are written by tasks of their own,
    /// so these counts are added atomically (the TCP ones have one writer).
    pub fn sent_on_stream(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::Relaxed);
        self.moved.fetch_add(1, Ordering::Relaxed);
    }

    /// HTTP/3: part of a request (its body), or a response head, moved on some stream.
    pub fn moved_on_stream(&self) {
        self.moved.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` more bytes went to the socket (one writer too, as [`Activity::moved`]).
    fn wrote(&self, n: usize) {
        let was = self.written.load(Ordering::Relaxed);
        self.written
            .store(was.wrapping_add(n as u64), Ordering::Relaxed);
        self.moved();
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
    /// The head (by started-request count) whose request line is complete, so later
    /// reads of it need not look.
    line_complete_for: Option<u64>,
}

impl<IO> Metered<IO> {
    pub fn new(io: IO, activity: Arc<Activity>) -> Self {
        Metered {
            io,
            activity,
            length_scan: LengthScan::default(),
            replacement: None,
            line_complete_for: None,
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
            self.activity.replaced_refusal.store(
                u64::from(super::error::error_response(&refusal).status().as_u16()),
                Ordering::Relaxed,
            );
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
                let read = (buf.filled().len() - before) as u64;
                this.activity.head_read.fetch_add(read, Ordering::Relaxed);
                this.length_scan.feed(started, &buf.filled()[before..]);
                // Once per head (its line usually arrives in its first read).
                if this.line_complete_for.is_none_or(|s| s != started)
                    && let Ok(mut line) = this.activity.head_line.lock()
                {
                    line.feed(started, &buf.filled()[before..]);
                    if line.complete_for(started) {
                        this.line_complete_for = Some(started);
                    }
                }
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
        if let Poll::Ready(Ok(n)) = polled
            && n > 0
        {
            self.activity.wrote(n);
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
        if let Poll::Ready(Ok(n)) = polled
            && n > 0
        {
            self.activity.wrote(n);
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
/// byte was written, or when the stream or connection was abandoned. While hyper holds
/// it the connection has a response waiting on its client, except while the body waits
/// on its own source, which it times (the rate rule leaves that time out).
struct Finishing {
    inner: Body,
    activity: Arc<Activity>,
    /// Since when the body has waited on its source (its last poll was pending).
    source_wait: Option<std::time::Instant>,
}

impl Finishing {
    fn source_wait_over(&mut self) {
        if let Some(since) = self.source_wait.take() {
            let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
            // Added before the count drops, so a look that sees no wait sees its time.
            self.activity.source_ns.fetch_add(ns, Ordering::Relaxed);
            self.activity.source_waiting.fetch_sub(1, Ordering::Release);
        }
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        self.source_wait_over();
        self.activity.bodies.fetch_sub(1, Ordering::Release);
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
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if polled.is_pending() {
            if self.source_wait.is_none() {
                // Counted before it is timed, so a look never misses a wait under way.
                self.activity.source_waiting.fetch_add(1, Ordering::Acquire);
                self.source_wait = Some(std::time::Instant::now());
            }
        } else {
            self.source_wait_over();
        }
        polled
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
    activity.bodies.fetch_add(1, Ordering::AcqRel);
    BoxBody::new(Finishing {
        inner: body,
        activity,
        source_wait: None,
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
            min_send_rate: 1000,
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

    /// A request whose response hyper holds (and never polls: an HTTP/2 stream at a zero
    /// window), and its watch after a first look at `t0`.
    fn responding(t0: Instant) -> (Arc<Activity>, Watch, Body) {
        let a = Activity::new(t0);
        let mut w = Watch::new(&a);
        a.request_started();
        let body = finishing(
            crate::http::body::empty(),
            Unanswered::new(Arc::clone(&a)).answered(),
        );
        assert!(matches!(
            a.verdict(&mut w, &deadlines(), t0),
            Verdict::Recheck(_)
        ));
        (a, w, body)
    }

    #[test]
    fn a_response_at_a_zero_window_is_held_at_once_and_cut_after_the_send_deadline() {
        let t0 = Instant::now();
        let (a, mut w, body) = responding(t0);
        let d = deadlines();
        let s = Duration::from_secs;
        // The client pings every second: bytes move both ways, but it takes no response.
        for i in 1..60 {
            a.moved();
            a.wrote(17);
            assert_eq!(
                a.verdict(&mut w, &d, t0 + s(i)),
                Verdict::Recheck(t0 + s(i + 1)),
                "looked at every second while a response waits"
            );
            assert_eq!(
                a.held_since(),
                Some(t0),
                "held since the look before the first slow one"
            );
            assert_eq!(a.idle_since(), None, "still a request in progress");
        }
        assert_eq!(
            a.verdict(&mut w, &d, t0 + s(60)),
            Verdict::Expired(Expiry::TooSlow)
        );
        drop(body);
        assert_eq!(a.held_since(), Some(t0));
        // (Idle since the drop: past its keep-alive deadline by now, which is beside the
        // point here.)
        let _ = a.verdict(&mut w, &d, t0 + s(61));
        assert_eq!(
            a.held_since(),
            None,
            "nothing held once the response is gone"
        );
    }

    #[test]
    fn a_client_slower_than_the_floor_on_average_is_cut_however_it_bunches_its_reads() {
        let t0 = Instant::now();
        let (a, mut w, _body) = responding(t0);
        let d = deadlines();
        let s = Duration::from_secs;
        // 900 bytes a second against a floor of 1,000, taken in bursts every 10 s (as a
        // kernel's socket buffer wakes its writer): a burst does not release it.
        let mut cut = None;
        for i in 1..=80 {
            if i % 10 == 0 {
                a.wrote(9_000);
            }
            if let Verdict::Expired(why) = a.verdict(&mut w, &d, t0 + s(i)) {
                cut = Some((i, why));
                break;
            }
        }
        assert_eq!(cut, Some((60, Expiry::TooSlow)), "held from the look at t0");
    }

    #[test]
    fn a_client_at_the_floor_is_released_and_never_cut() {
        let t0 = Instant::now();
        let (a, mut w, _body) = responding(t0);
        let d = deadlines();
        let s = Duration::from_secs;
        // 1,100 bytes a second in bursts every 5 s: held between bursts at most.
        for i in 1..=300 {
            if i % 5 == 0 {
                a.wrote(5_500);
                assert!(matches!(
                    a.verdict(&mut w, &d, t0 + s(i)),
                    Verdict::Recheck(_)
                ));
                assert_eq!(a.held_since(), None, "caught up at {i} s");
            } else {
                assert!(matches!(
                    a.verdict(&mut w, &d, t0 + s(i)),
                    Verdict::Recheck(_)
                ));
            }
        }
    }

    #[test]
    fn time_a_body_waits_on_its_source_is_not_the_clients() {
        let t0 = Instant::now();
        let (a, mut w, _body) = responding(t0);
        let d = deadlines();
        let s = Duration::from_secs;
        // An application thinking for minutes: nothing written, never held, never cut.
        a.source_waiting.store(1, Ordering::Relaxed);
        for i in 1..200 {
            assert!(matches!(
                a.verdict(&mut w, &d, t0 + s(i)),
                Verdict::Recheck(_)
            ));
            assert_eq!(a.held_since(), None);
            a.moved();
        }
        // Its wait ends and is accounted; then it streams 100 bytes every second it is not
        // waiting, which is its own pace (each second half waiting): the client keeps up.
        a.source_ns
            .fetch_add(s(200).as_nanos() as u64, Ordering::Relaxed);
        a.source_waiting.store(0, Ordering::Relaxed);
        for i in 200..400 {
            a.source_ns.fetch_add(999_000_000, Ordering::Relaxed);
            a.wrote(10);
            assert!(
                matches!(a.verdict(&mut w, &d, t0 + s(i)), Verdict::Recheck(_)),
                "cut at {i} s"
            );
            a.moved();
        }
    }

    #[test]
    fn with_the_floor_off_only_a_client_that_takes_nothing_is_held() {
        let t0 = Instant::now();
        let (a, mut w, _body) = responding(t0);
        let d = Deadlines {
            min_send_rate: 0,
            ..deadlines()
        };
        let s = Duration::from_secs;
        a.wrote(1);
        a.verdict(&mut w, &d, t0 + s(1));
        assert_eq!(a.held_since(), None, "one byte a second is progress");
        a.verdict(&mut w, &d, t0 + s(2));
        assert_eq!(a.held_since(), Some(t0 + s(1)));
        a.wrote(1);
        a.verdict(&mut w, &d, t0 + s(3));
        assert_eq!(a.held_since(), None);
    }

    #[test]
    fn a_dropped_service_future_finishes_its_request() {
        let a = Activity::new(Instant::now());
        a.request_started();
        drop(Unanswered::new(Arc::clone(&a)));
        assert!(!a.in_progress());
    }
}
