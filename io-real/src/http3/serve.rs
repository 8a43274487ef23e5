//! One QUIC connection's HTTP/3 requests, answered by the same [`Site`] as TCP.
//!
//! The request body is the h3 receive stream behind hyper's `Body` trait ([`RecvBody`]);
//! the response body is streamed frame by frame onto the h3 send stream, so a file is
//! never held whole in memory.
//!
//! Deadlines (decisions 0014, 0041 and 0084): the connection is under the same watchdog as
//! a TCP one ([`Activity::verdict`]), with the same settings. No request within
//! `request_head_timeout` of the accept, none within `keep_alive_timeout` of the last
//! response, a request that moves nothing for `send_timeout`, or a response its client
//! takes slower than `min_send_rate` (a peer that never extends MAX_STREAM_DATA or
//! MAX_DATA, or extends it a trickle at a time) for `send_timeout`: the connection gets
//! GOAWAY and is closed a moment later. A connection whose client takes its response
//! slower than the floor counts as idle for a full worker (`worker::admission`), which
//! then closes it at once. A client's PINGs keep QUIC's own idle timer from firing, so
//! without this a silent or withholding peer held its slot for as long as it liked.
//! Response bytes count as the stream's transport takes them, which is as fast as the
//! peer's flow control lets it, in pieces of [`PIECE`] so that a trickle is seen as one.
//!
//! Drain: when the worker drains, the connection sends GOAWAY (h3's `shutdown`), answers
//! the requests it already took, then waits briefly for the client to close and closes.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{Request, Response, Version};
use http_body_util::BodyExt;
use hyper::body::Frame;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::http::conn::{FIRST_REQUEST_GRACE, MAX_REQUEST_HEAD};
use crate::http::pipeline::Arrival;
use crate::http::watchdog::{Expiry, Unanswered, Verdict, Watch, finishing};
use crate::http::{Activity, Site, Transport};
use servery_core::request_stats::unheard;

type H3Connection = h3::server::Connection<h3_quinn::Connection, Bytes>;
type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// H3_NO_ERROR: the code a connection closes with when all went well.
const H3_NO_ERROR: u32 = 0x100;

/// The most of a response handed to the stream at once. The transport takes a write only
/// when all of it fits the peer's window, so this is the grain at which a client's pace
/// is seen: a 128 KiB file chunk at a trickle would look like no progress at all for a
/// minute, then a burst.
const PIECE: usize = 16 * 1024;

/// Serves one incoming QUIC connection until it ends. The handshake is bounded by the
/// TLS handshake deadline, as on TCP.
pub async fn serve_connection(
    site: Arc<Site>,
    incoming: quinn::Incoming,
    mut drain: watch::Receiver<bool>,
    requests: Arc<AtomicU64>,
    activity: Arc<Activity>,
) {
    let peer = incoming.remote_address();
    let limit = site.deadlines().tls_handshake;
    let connecting = match incoming.accept() {
        Ok(connecting) => connecting,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "QUIC connection not accepted");
            return;
        }
    };
    let connection = match tokio::time::timeout(limit, connecting).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "QUIC handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "QUIC handshake timed out");
            return;
        }
    };
    let mut builder = h3::server::builder();
    builder.max_field_section_size(MAX_REQUEST_HEAD as u64);
    let built = builder.build::<_, Bytes>(h3_quinn::Connection::new(connection.clone()));
    let mut h3 = match tokio::time::timeout(limit, built).await {
        Ok(Ok(h3)) => h3,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "HTTP/3 connection setup failed");
            return;
        }
        Err(_) => return,
    };
    let mut in_flight = JoinSet::new();
    let mut going_away = false;
    let deadlines = *site.deadlines();
    let mut watch = Watch::new(&activity);
    let watchdog = tokio::time::sleep_until(tokio::time::Instant::now());
    tokio::pin!(watchdog);
    // Set once a deadline passed (or a full worker chose this connection while its client
    // held a response): closed then, whatever is still in flight.
    let mut close_at: Option<tokio::time::Instant> = None;
    // After GOAWAY, when nothing is in flight: when the connection closes if its client
    // has not.
    let mut idle_after_goaway: Option<tokio::time::Instant> = None;
    loop {
        if going_away && in_flight.is_empty() {
            idle_after_goaway
                .get_or_insert_with(|| tokio::time::Instant::now() + FIRST_REQUEST_GRACE);
        } else {
            idle_after_goaway = None;
        }
        tokio::select! {
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => {
                    let site = Arc::clone(&site);
                    let requests = Arc::clone(&requests);
                    let activity = Arc::clone(&activity);
                    in_flight.spawn(async move {
                        let began = std::time::Instant::now();
                        match resolver.resolve_request().await {
                            Ok((req, stream)) => answer(site, req, stream, requests, activity).await,
                            Err(e) => {
                                tracing::debug!(error = %e, "HTTP/3 request refused");
                                if let Some(status) = refused_status(&e) {
                                    let took = began.elapsed();
                                    crate::http::pipeline::refused_stream(
                                        &site, &activity, status, took,
                                    )
                                    .await;
                                }
                            }
                        }
                    });
                }
                // GOAWAY exchanged and every request answered.
                Ok(None) => break,
                Err(e) => {
                    if !e.is_h3_no_error() {
                        tracing::debug!(%peer, error = %e, "HTTP/3 connection ended");
                    }
                    break;
                }
            },
            () = draining(&mut drain), if !going_away => {
                going_away = true;
                // The requests already taken are answered; later ones are refused, which
                // tells the client to send them elsewhere.
                shutdown(&mut h3).await;
            }
            // The worker is full and chose this connection (`worker::admission`): one
            // with no request in progress goes as on a drain; one whose client holds a
            // response slower than the floor (no request started since it was chosen,
            // yet one is in progress) is closed now: its slot is wanted at once.
            () = activity.evicted(), if close_at.is_none() => {
                if activity.eviction_stands() && activity.in_progress() {
                    tracing::debug!(%peer, "closing an HTTP/3 connection held by its client to admit a new one");
                    close_at = Some(tokio::time::Instant::now());
                } else if !going_away {
                    // Closed before it asked anything: counted, as a TCP one is.
                    if activity.started() == 0
                        && let Some(meter) = site.meter()
                    {
                        meter.closed_unheard(unheard::EVICTED);
                    }
                    going_away = true;
                    shutdown(&mut h3).await;
                }
            }
            () = watchdog.as_mut(), if close_at.is_none() => {
                match activity.verdict(&mut watch, &deadlines, tokio::time::Instant::now()) {
                    Verdict::Recheck(at) => watchdog.as_mut().reset(at),
                    Verdict::Expired(why) => {
                        tracing::debug!(%peer, ?why, "HTTP/3 connection deadline passed");
                        // A connection that never made a request is counted where a TCP
                        // one is (`servery_connections_closed_unheard_total`); HTTP/3 has
                        // no half-read head to log as 408 (a stream's head arrives whole).
                        if why == Expiry::NoRequest
                            && activity.started() == 0
                            && let Some(meter) = site.meter()
                        {
                            meter.closed_unheard(unheard::HEAD_TIMEOUT);
                        }
                        // As an HTTP/2 connection: GOAWAY, and a moment to take it.
                        if !going_away {
                            going_away = true;
                            shutdown(&mut h3).await;
                        }
                        close_at = Some(tokio::time::Instant::now() + FIRST_REQUEST_GRACE);
                    }
                }
            }
            () = sleep_until_set(close_at) => {
                connection.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"");
                return;
            }
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
            // After GOAWAY with nothing in flight, a client that neither closes nor sends
            // another request within the grace is not waited for (h3 ends `accept` only
            // on the client's GOAWAY or close): otherwise an idle client sending PINGs
            // would hold the worker's drain to its deadline.
            // The grace is a deadline set once, not a sleep made anew on each pass: the
            // watchdog's looks would otherwise keep putting it off.
            () = sleep_until_set(idle_after_goaway) => {
                connection.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"");
                return;
            }
        }
    }
    while in_flight.join_next().await.is_some() {}
    // The client closes once it has read everything; past the grace, we do.
    let _ = tokio::time::timeout(FIRST_REQUEST_GRACE, connection.closed()).await;
    connection.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"");
}

/// The status a request h3 refused before servery saw it is logged and counted with, as
/// a refused HTTP/1 head is (decisions 0056, 0083): `431` for a field section over the
/// limit (h3 answered it so), `400` for a malformed request (its stream reset with
/// H3_MESSAGE_ERROR), a field section that cannot be decoded or a first frame that is
/// not HEADERS (the connection closed with QPACK_DECOMPRESSION_FAILED or
/// H3_FRAME_UNEXPECTED). `None` for what the client ended (a stream closed or reset
/// before its head, the connection gone): no request was refused.
fn refused_status(e: &h3::error::StreamError) -> Option<u16> {
    use h3::error::{Code, StreamError};
    match e {
        StreamError::HeaderTooBig { .. } => Some(431),
        StreamError::StreamError { code, .. } if *code == Code::H3_MESSAGE_ERROR => Some(400),
        // h3 keeps the connection error's variant to itself; its text names our side
        // ("Connection error: Local error") and the code.
        _ => {
            let text = e.to_string();
            let ours = text.starts_with("Connection error: Local error");
            let refused = ["QPACK_DECOMPRESSION_FAILED", "H3_FRAME_UNEXPECTED"]
                .iter()
                .any(|code| text.contains(code));
            (ours && refused).then_some(400)
        }
    }
}

/// Resolves once the worker drains (a dropped sender counts), holding no borrow of the
/// value across the caller's awaits.
pub(super) async fn draining(drain: &mut watch::Receiver<bool>) {
    let _ = drain.wait_for(|&d| d).await;
}

/// Sends GOAWAY, waiting at most [`FIRST_REQUEST_GRACE`]: a peer that withholds credit on
/// the control stream too must not stop the connection's loop.
async fn shutdown(h3: &mut H3Connection) {
    match tokio::time::timeout(FIRST_REQUEST_GRACE, h3.shutdown(1)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "HTTP/3 GOAWAY not sent"),
        Err(_) => tracing::debug!("HTTP/3 GOAWAY not taken by the peer in time"),
    }
}

/// Resolves at `at`; never, while it is `None`.
async fn sleep_until_set(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Answers one request: validated and handled as a TCP request is, the response streamed.
async fn answer(
    site: Arc<Site>,
    req: Request<()>,
    stream: h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>,
    requests: Arc<AtomicU64>,
    activity: Arc<Activity>,
) {
    // In progress (not idle, and counted) until the response is sent or abandoned.
    activity.request_started();
    let unanswered = Unanswered::new(Arc::clone(&activity));
    let (mut send, recv) = stream.split();
    let (mut parts, ()) = req.into_parts();
    parts.version = Version::HTTP_3;
    // QUIC is always encrypted: HSTS applies as on TLS.
    parts.extensions.insert(Transport::Tls);
    let req = Request::from_parts(parts, RecvBody(recv, Arc::clone(&activity)));
    let response = Arrival::of(&site, &req, &activity).answer(&site, req).await;
    requests.fetch_add(1, Ordering::Relaxed);
    // From here the response waits on its client (and its body times its own source's
    // waits), as on TCP; dropping the body marks the request finished.
    let (head, body) = response.into_parts();
    let response = Response::from_parts(head, finishing(body, unanswered.answered()));
    // A stream whose client takes none of one write for twice the send deadline is reset,
    // even while the connection's other streams flow. Twice, so that on a connection with
    // one response the connection's own rule (which judges it within the send deadline and
    // two looks) closes the connection first, as it would an HTTP/2 one.
    let send_limit = site.deadlines().send.saturating_mul(2);
    if let Err(why) = respond(&mut send, response, send_limit, &activity).await {
        tracing::debug!(why, "HTTP/3 response cut short");
        send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
    }
}

/// Writes the head, then the body as it comes, each write within `limit` (the
/// connection's watchdog bounds the pace of them all), counting what the stream takes.
async fn respond(
    send: &mut SendHalf,
    response: Response<crate::http::Body>,
    limit: Duration,
    activity: &Activity,
) -> Result<(), String> {
    let (head, mut body) = response.into_parts();
    let head = Response::from_parts(head, ());
    within(limit, "head", send.send_response(head)).await?;
    activity.moved_on_stream();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the body: {e}"))?;
        match frame.into_data() {
            Ok(mut data) => {
                while !data.is_empty() {
                    let piece = data.split_to(data.len().min(PIECE));
                    let n = piece.len();
                    within(limit, "body", send.send_data(piece)).await?;
                    activity.sent_on_stream(n);
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    return within(limit, "trailers", send.send_trailers(trailers)).await;
                }
            }
        }
    }
    within(limit, "end", send.finish()).await
}

/// One write of a response, bounded by the send deadline.
async fn within(
    limit: Duration,
    what: &str,
    write: impl Future<Output = Result<(), h3::error::StreamError>>,
) -> Result<(), String> {
    match tokio::time::timeout(limit, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!(
            "{what}: the client took nothing within the send deadline"
        )),
    }
}

/// An HTTP/3 request body as hyper's `Body`, for the handlers that read one (uploads,
/// WebDAV); GET and HEAD never poll it.
struct RecvBody(RecvHalf, Arc<Activity>);

impl hyper::body::Body for RecvBody {
    type Data = Bytes;
    type Error = h3::error::StreamError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.0.poll_recv_data(cx) {
            Poll::Ready(Ok(Some(mut buf))) => {
                self.1.moved_on_stream();
                let bytes = buf.copy_to_bytes(buf.remaining());
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    }
}
