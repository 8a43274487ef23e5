//! Serving one accepted connection: HTTP/1.1 and HTTP/2 (h2c prior knowledge), with drain.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use http::{HeaderValue, Request, Response, Version, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::body::Body;
use super::pipeline::{Arrival, refused_before_request};
use super::plain_stream::{LastResponse, PlainStream};
use super::site::Site;
use super::tunnel::Tunnel;
use super::watchdog::{Activity, Expiry, Metered, Unanswered, Verdict, Watch, finishing};
use servery_core::request_stats::unheard;

/// The largest request head (request line and header fields) accepted, in bytes. A larger
/// HTTP/1 head is answered `431 Request Header Fields Too Large` by hyper and the connection
/// closed; HTTP/2 applies the same bound to the decoded header list. Nothing servery serves
/// needs more than a few KiB of headers, and the bound caps what one connection can make
/// us buffer before a request exists. (hyper's own default is about 400 KiB.)
pub const MAX_REQUEST_HEAD: usize = 64 * 1024;

/// How long an HTTP/1 connection (or one that has not produced its first request yet) is
/// given to send its next request when draining starts. Shutting it down at once would
/// drop a request the client has already sent: hyper-util cancels a connection still
/// sniffing its protocol, and closing a keep-alive connection with an unread request in
/// its socket resets it. Those are exactly the requests a busy worker has when a recycle
/// or reload begins. A request that arrives within the grace is answered with
/// `Connection: close`.
pub const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

/// Serves one connection until it closes, speaking HTTP/1.1 or, when the peer opens with
/// the HTTP/2 preface, h2c. The caller accepts the socket and should set `TCP_NODELAY` on
/// it first: responses are written as whole heads and large chunks, so Nagle only adds
/// latency to the last segment.
///
/// `requests` is incremented once per request answered on this connection (when the
/// response head is handed to hyper, so error responses count and a body transfer later
/// cut short by the peer still counts).
///
/// When `drain` becomes `true` (or its sender is dropped, which can only mean the worker is
/// going away) the connection shuts down gracefully: an HTTP/1 connection closes after the
/// first response produced from then on (which says `Connection: close`), or after
/// [`FIRST_REQUEST_GRACE`] if no request comes; HTTP/2 sends GOAWAY at once, finishes open
/// streams and closes. The future resolves when the connection is fully done, so a
/// worker can await all of its connections to know that draining has finished.
///
/// Every state of the connection is under a deadline (the site's [`Deadlines`]; see
/// [`super::watchdog`]), and the connection closes when its [`Activity`] is evicted while
/// no request is in progress, or while its response waits on a client slower than the
/// floor (decision 0041), unless a request has started since.
pub async fn serve_connection<IO>(
    site: Arc<Site>,
    io: IO,
    drain: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Activity::new(Instant::now());
    serve(site, io, drain, requests, Transport::Plain, None, activity).await;
}

/// [`serve_connection`] for an accepted cleartext socket, which also tells the stream when
/// a response is the connection's last (see [`LastResponse`]), with the [`Activity`] its
/// worker watches.
pub async fn serve_plain(
    site: Arc<Site>,
    io: PlainStream,
    drain: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
    activity: Arc<Activity>,
) {
    let last = io.last_response();
    serve(
        site,
        io,
        drain,
        requests,
        Transport::Plain,
        Some(last),
        activity,
    )
    .await;
}

/// [`serve_connection_over`] for a TLS connection on an accepted socket: like
/// [`serve_plain`], a response known to be the last is held for the close, so that the
/// response's last record, the close_notify and the FIN leave together.
pub async fn serve_tls(
    site: Arc<Site>,
    io: crate::tls::TlsStream<PlainStream>,
    drain: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
    activity: Arc<Activity>,
) {
    let last = io.get_ref().0.last_response();
    serve(
        site,
        io,
        drain,
        requests,
        Transport::Tls,
        Some(last),
        activity,
    )
    .await;
}

/// What carries a connection's bytes, as far as responses care. The site cannot see it
/// from the stream type, so the connection tags every request with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Transport {
    /// Cleartext TCP (or anything not known to be secure).
    #[default]
    Plain,
    /// TLS: the only transport on which `Strict-Transport-Security` may be sent
    /// (RFC 6797 §7.2).
    Tls,
}

/// [`serve_connection`] for a connection whose transport is known, e.g. the stream
/// returned by [`crate::tls::accept`] with [`Transport::Tls`], with the [`Activity`] its
/// worker watches (created when the connection was accepted, so the request-head deadline
/// counts the handshake too).
pub async fn serve_connection_over<IO>(
    site: Arc<Site>,
    io: IO,
    drain: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
    transport: Transport,
    activity: Arc<Activity>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    serve(site, io, drain, requests, transport, None, activity).await;
}

async fn serve<IO>(
    site: Arc<Site>,
    io: IO,
    mut drain: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
    transport: Transport,
    last: Option<LastResponse>,
    activity: Arc<Activity>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let draining = drain.clone();
    let deadlines = *site.deadlines();
    let site_log = Arc::clone(&site);
    // A wake-up for the loop below when a request starts. A stored permit may be stale, so
    // the loop compares counts, not wake-ups.
    let arrived = Arc::new(Notify::new());
    let is_h2 = Arc::new(AtomicBool::new(false));
    // Only an application takes a connection over (a WebSocket); a file server's
    // requests never carry the tunnel.
    let tunnel = site
        .app()
        .map(|_| Tunnel::new(drain.clone(), Arc::clone(&activity), deadlines.send));
    let tunnel_in = tunnel.clone();
    let (activity_in, arrived_in, is_h2_in) = (
        Arc::clone(&activity),
        Arc::clone(&arrived),
        Arc::clone(&is_h2),
    );
    let service = service_fn(move |mut req: Request<Incoming>| {
        let site = Arc::clone(&site);
        let requests = Arc::clone(&requests);
        let draining = draining.clone();
        // HTTP/2 ends a connection with GOAWAY, never after a response: nothing to hold.
        let last = if req.version() == Version::HTTP_2 {
            is_h2_in.store(true, Ordering::Relaxed);
            None
        } else {
            last.clone()
        };
        activity_in.request_started();
        let unanswered = Unanswered::new(Arc::clone(&activity_in));
        arrived_in.notify_one();
        if transport != Transport::Plain {
            // Cleartext is what a request without the tag means; tagging only the others
            // spares the extension map's allocation on most requests.
            req.extensions_mut().insert(transport);
        }
        if let Some(tunnel) = &tunnel_in
            && req.headers().contains_key(header::UPGRADE)
        {
            req.extensions_mut().insert(Arc::clone(tunnel));
        }
        let arrival = Arrival::of(&site, &req, &activity_in);
        async move {
            let version = req.version();
            let client_closes = last.is_some() && asks_to_close(&req);
            let mut response = arrival.answer(&site, req).await;
            mark_if_draining(&mut response, version, is_draining(&draining));
            if let Some(last) = last
                && is_last_response(client_closes, &response)
            {
                last.mark();
            }
            requests.fetch_add(1, Ordering::Relaxed);
            let (head, body) = response.into_parts();
            let body = finishing(body, unanswered.answered());
            Ok::<_, Infallible>(Response::from_parts(head, body))
        }
    });

    let mut builder = Builder::new(TokioExecutor::new());
    // hyper's own header-read timer is off: it starts only once hyper-util has sniffed
    // the protocol (so never for a silent peer) and bounds idle time and head together;
    // the watchdog below bounds every state instead.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Option::<Duration>::None)
        .max_buf_size(MAX_REQUEST_HEAD);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_REQUEST_HEAD as u32);
    let io = Metered::new(io, Arc::clone(&activity));
    // With upgrades: a request that asks for one (only an application's WebSocket takes
    // it) gets the socket once its 101 response is written.
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);

    let mut watch = Watch::new(&activity);
    let first_look = match activity.verdict(&mut watch, &deadlines, Instant::now()) {
        Verdict::Recheck(at) => at,
        Verdict::Expired(_) => Instant::now(),
    };
    let watchdog = tokio::time::sleep_until(first_look);
    tokio::pin!(watchdog);
    let grace = tokio::time::sleep(deadlines.request_head);
    tokio::pin!(grace);
    let mut drain_seen = false;
    let mut started_at_drain = 0;
    let mut shutting_down = false;
    // Asked to close, and read once more before it does (see the branch).
    let mut evicting = false;
    // How the connection ended, when that is a line to log (awaited after the loop: the
    // select's output holds a borrow that must not live across an await).
    let mut ended: Option<Ended> = None;
    // Closed by this task (a deadline, an eviction): nothing is left to wait for.
    let mut closed_here = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(err) = result {
                    // Peers resetting or timing out is routine; nothing to act on but a
                    // head hyper refused with an answer, which is logged.
                    tracing::debug!(error = %err, "connection ended with an error");
                    if ended.is_none() {
                        ended = if malformed_http2_input(&*err) {
                            Some(Ended::RefusedH2)
                        } else {
                            refusal_status(&*err, &activity).map(Ended::Refused)
                        };
                    }
                }
                break;
            }
            () = watchdog.as_mut() => {
                match activity.verdict(&mut watch, &deadlines, Instant::now()) {
                    Verdict::Recheck(at) => watchdog.as_mut().reset(at),
                    Verdict::Expired(why) => {
                        tracing::debug!(?why, "connection deadline passed");
                        // HTTP/2 frames between streams are no request head.
                        if !shutting_down && !is_h2.load(Ordering::Relaxed) {
                            ended = Some(Ended::Deadline(why));
                        }
                        if shutting_down || !is_h2.load(Ordering::Relaxed) {
                            closed_here = true;
                            break;
                        }
                        // An idle HTTP/2 connection is told with GOAWAY, and given a
                        // moment to take it before it is closed.
                        conn.as_mut().graceful_shutdown();
                        shutting_down = true;
                        watchdog.as_mut().reset(Instant::now() + FIRST_REQUEST_GRACE);
                    }
                }
            }
            () = activity.evicted(), if !evicting => {
                // The worker is full and picked this connection; a request that started
                // since keeps it. So does one whose head already waits in the socket: the
                // task may not have run since the connection was accepted (a loaded
                // machine), and closing with the head unread would reset the client. The
                // connection is therefore read once more before the verdict below.
                evicting = activity.eviction_stands();
            }
            () = tokio::task::yield_now(), if evicting => {
                // `yield_now` is pending on its first poll, so the connection was polled
                // (and read what had arrived) since the eviction was seen.
                if activity.eviction_stands() {
                    tracing::debug!("closing an idle connection to admit a new one");
                    if activity.started() == 0 && let Some(meter) = site_log.meter() {
                        meter.closed_unheard(unheard::EVICTED);
                    }
                    closed_here = true;
                    break;
                }
                evicting = false;
            }
            // Before a drain nothing needs to know when a request starts (the drain reads
            // the count), so the loop is not woken for it.
            _ = arrived.notified(), if drain_seen && !shutting_down => {
                if activity.started() > started_at_drain {
                    // A request that arrived while draining: its response says
                    // `Connection: close`, and the connection closes after it.
                    conn.as_mut().graceful_shutdown();
                    shutting_down = true;
                }
            }
            _ = drain.wait_for(|&d| d), if !drain_seen => {
                tracing::debug!("draining connection");
                drain_seen = true;
                started_at_drain = activity.started();
                if started_at_drain > 0 && is_h2.load(Ordering::Relaxed) {
                    // GOAWAY tells an HTTP/2 client exactly which streams were taken.
                    conn.as_mut().graceful_shutdown();
                    shutting_down = true;
                } else {
                    // HTTP/1 has no such signal: closing a keep-alive connection that looks
                    // idle drops a request the client may already have sent (it is in
                    // the socket buffer, unread), which the client sees as a reset. So
                    // the next request is awaited for a bounded grace and answered with
                    // `Connection: close`; a request in flight ends the same way.
                    grace.as_mut().reset(tokio::time::Instant::now() + FIRST_REQUEST_GRACE);
                }
            }
            _ = grace.as_mut(), if drain_seen && !shutting_down => {
                conn.as_mut().graceful_shutdown();
                shutting_down = true;
            }
        }
    }
    match ended {
        Some(Ended::Refused(status)) => {
            refused_before_request(&site_log, &activity, status).await;
        }
        Some(Ended::RefusedH2) => {
            // Frames, not a request line: nothing of the request to show.
            let took = activity.accepted_at().elapsed();
            crate::http::pipeline::refused_stream(&site_log, &activity, 400, took).await;
        }
        Some(Ended::Deadline(why)) => head_deadline_passed(&site_log, &activity, why).await,
        None => {}
    }
    if closed_here {
        return;
    }
    // An upgraded connection lives on in its session: it is still this connection,
    // counted until the session ends.
    if let Some(tunnel) = &tunnel {
        tunnel.finished().await;
    }
}

/// How a connection ended, when that is an access-log line.
#[derive(Debug, Clone, Copy)]
enum Ended {
    /// A head refused with this status before it reached the pipeline.
    Refused(u16),
    /// Malformed HTTP/2 input (a header block h2 could not decode), which ended the
    /// connection.
    RefusedH2,
    /// A deadline passed with no request in progress.
    Deadline(Expiry),
}

/// The status hyper answered a head it could not parse with (its own mapping: `400`,
/// `414`, `431`), or the one servery wrote in its place; `None` when the error is not a
/// refused head (a reset, a client gone mid-body) and nothing was answered.
fn refusal_status(err: &(dyn std::error::Error + 'static), activity: &Activity) -> Option<u16> {
    let hyper_err = err.downcast_ref::<hyper::Error>()?;
    if !hyper_err.is_parse() || hyper_err.is_parse_version_h2() || hyper_err.is_parse_status() {
        return None;
    }
    if let Some(status) = activity.replaced_refusal() {
        return Some(status);
    }
    let text = hyper_err.to_string();
    if hyper_err.is_parse_too_large() {
        Some(if text.contains("URI too long") {
            414
        } else {
            431
        })
    } else if text.contains("internal") {
        None
    } else {
        Some(400)
    }
}

/// Whether h2 ended the connection for a violation it detected in what the client sent
/// (GOAWAY from our side with PROTOCOL_ERROR, which h2 uses for a header block that does
/// not decode, among frames that break the protocol, or COMPRESSION_ERROR, for a header
/// block grown past what it will even skip): the one HTTP/2 refusal that reaches
/// servery, logged as a refused head (`400`, its request `"-"`). The refusals h2 makes
/// on a stream alone — a malformed request reset with PROTOCOL_ERROR, a header list over
/// the limit answered `431`, a stream over the concurrency limit refused with
/// REFUSED_STREAM — end inside h2, and hyper says nothing of them.
fn malformed_http2_input(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.is_go_away()
                && h2.is_library()
                && matches!(
                    h2.reason(),
                    Some(h2::Reason::PROTOCOL_ERROR | h2::Reason::COMPRESSION_ERROR)
                );
        }
        next = e.source();
    }
    false
}

/// A connection closed on a deadline while it had no request in progress: a head begun
/// and not finished is logged `408` (as nginx does, without an answer); a connection that
/// never sent a byte has nothing to log and is counted (`head_timeout`).
async fn head_deadline_passed(site: &Site, activity: &Activity, why: Expiry) {
    if !matches!(why, Expiry::NoRequest | Expiry::Idle) {
        return;
    }
    if activity.head_begun() {
        refused_before_request(site, activity, 408).await;
    } else if why == Expiry::NoRequest
        && let Some(meter) = site.meter()
    {
        meter.closed_unheard(unheard::HEAD_TIMEOUT);
    }
}

/// Whether the worker is draining; a dropped sender counts as draining.
fn is_draining(drain: &watch::Receiver<bool>) -> bool {
    *drain.borrow() || drain.has_changed().is_err()
}

/// Whether an HTTP/1 request ends its connection, by hyper's rule: HTTP/1.1 unless it says
/// `Connection: close`, HTTP/1.0 only if it says `Connection: keep-alive`.
fn asks_to_close<B>(req: &Request<B>) -> bool {
    let has = |token: &str| super::has_token(req.headers(), header::CONNECTION, token);
    match req.version() {
        Version::HTTP_11 => has("close"),
        Version::HTTP_10 => !has("keep-alive"),
        _ => false,
    }
}

/// Whether hyper closes the connection after this response (the request asked to, or the
/// response says `Connection: close`) and its length is known, so its end is written
/// promptly and held only until the close. A response of unknown length (a proxied or CGI
/// stream) is never held: its parts must leave as they come.
fn is_last_response(client_closes: bool, response: &Response<Body>) -> bool {
    use hyper::body::Body as _;
    let closes = client_closes
        || response
            .headers()
            .get(header::CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    closes && response.body().size_hint().exact().is_some()
}

/// Adds `Connection: close` to an HTTP/1 response produced while draining. hyper also adds
/// it once graceful shutdown has disabled keep-alive, but the service can produce a response
/// before the connection task has seen the drain signal; this closes that window. HTTP/2
/// forbids connection-specific headers (GOAWAY does the job there).
pub(crate) fn mark_if_draining(response: &mut Response<Body>, version: Version, draining: bool) {
    if draining && (version == Version::HTTP_11 || version == Version::HTTP_10) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body;

    fn marked(version: Version, draining: bool) -> Option<HeaderValue> {
        let mut response = Response::new(body::empty());
        mark_if_draining(&mut response, version, draining);
        response.headers().get(header::CONNECTION).cloned()
    }

    #[test]
    fn http1_responses_close_while_draining() {
        assert_eq!(
            marked(Version::HTTP_11, true),
            Some(HeaderValue::from_static("close"))
        );
        assert_eq!(
            marked(Version::HTTP_10, true),
            Some(HeaderValue::from_static("close"))
        );
        assert_eq!(marked(Version::HTTP_11, false), None);
        assert_eq!(marked(Version::HTTP_2, true), None, "h2 forbids Connection");
    }

    fn request(version: Version, connection: &[&str]) -> Request<()> {
        let mut builder = Request::builder().version(version).uri("/");
        for value in connection {
            builder = builder.header(header::CONNECTION, *value);
        }
        builder.body(()).expect("request")
    }

    #[test]
    fn a_request_asks_to_close_by_hypers_rule() {
        assert!(!asks_to_close(&request(Version::HTTP_11, &[])));
        assert!(asks_to_close(&request(Version::HTTP_11, &["close"])));
        assert!(asks_to_close(&request(
            Version::HTTP_11,
            &["Upgrade, CLOSE"]
        )));
        assert!(asks_to_close(&request(
            Version::HTTP_11,
            &["te", " Close "]
        )));
        assert!(!asks_to_close(&request(
            Version::HTTP_11,
            &["closer, keep-alive"]
        )));
        assert!(asks_to_close(&request(Version::HTTP_10, &[])));
        assert!(!asks_to_close(&request(Version::HTTP_10, &["Keep-Alive"])));
        assert!(!asks_to_close(&request(Version::HTTP_2, &["close"])));
    }

    /// A body whose length is not known up front, as a proxied or CGI stream's.
    struct OfUnknownLength;

    impl hyper::body::Body for OfUnknownLength {
        type Data = bytes::Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
            std::task::Poll::Ready(None)
        }
    }

    #[test]
    fn only_a_closing_response_of_known_length_is_held_for_the_close() {
        let sized = || Response::new(body::full("x"));
        assert!(is_last_response(true, &sized()));
        assert!(!is_last_response(false, &sized()));

        let mut says_close = sized();
        mark_if_draining(&mut says_close, Version::HTTP_11, true);
        assert!(is_last_response(false, &says_close));

        let streamed = Response::new(http_body_util::BodyExt::boxed(OfUnknownLength));
        assert!(!is_last_response(true, &streamed));
    }

    #[test]
    fn dropped_sender_counts_as_draining() {
        let (tx, rx) = watch::channel(false);
        assert!(!is_draining(&rx));
        drop(tx);
        assert!(is_draining(&rx));
    }
}
