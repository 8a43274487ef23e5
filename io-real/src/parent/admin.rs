//! The admin listener (`--admin ADDR`): plain HTTP/1.1 served by the parent on its host
//! runtime, apart from the file-serving listeners and their budgets.
//!
//! - `/livez`: 200 when the parent's driver loop answers a request within
//!   [`LOOP_ANSWER_BOUND`] (the same way `ctl status` is answered), 503 otherwise;
//! - `/readyz`: 200 only while the service is `ready`, 503 while starting, draining or
//!   failed (and when the loop does not answer);
//! - `/metrics`: the core's counters in the Prometheus text format ([`super::metrics`]).
//!
//! Anything else is refused: an unknown path 404, a method other than GET/HEAD 405, a
//! request head over [`MAX_HEAD`] 431 (hyper's own answer).
//!
//! Its connections are under the main listener's deadlines (the committed generation's,
//! so a reload that changes them changes them here too, for the connections accepted
//! after it), in every state, by the same watchdog ([`crate::http::watchdog`]); the head
//! and keep-alive deadlines are at most
//! [`HEAD_TIMEOUT`]. It holds at most [`MAX_CONNECTIONS`] at a time and, when full, closes
//! the longest-waiting one that never sent a request, else the longest-idle one, to admit
//! a new one, as a full worker does (decision 0042): silent connections cannot make a
//! liveness probe fail and an orchestrator kill a healthy service.

use std::convert::Infallible;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::admin_conn::{Connections, serve_connection};
use super::io::{Inbound, InboundTx};
use super::metrics::Snapshot;
use crate::http::Deadlines;
use crate::http::body::{self, Body};

/// How long the driver loop may take to answer before `/livez` says it is not alive.
pub(crate) const LOOP_ANSWER_BOUND: Duration = Duration::from_secs(2);

/// Connections served at once; more wait in the kernel's backlog.
pub(crate) const MAX_CONNECTIONS: usize = 16;

/// The longest request head accepted (hyper's smallest read buffer): past it, 431.
pub(crate) const MAX_HEAD: usize = 8 * 1024;

/// How long a connection may take to send its request head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The content type of the text `prometheus-client` writes, served to clients that
/// accept it (Prometheus does).
const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The classic Prometheus text format, served to every other client.
const CLASSIC_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Bind the admin address (before any worker exists, like every listener).
pub(crate) fn bind(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// How often a full listener with no connection it may close looks again (requests
/// finish without telling it).
const FULL_RECHECK: Duration = Duration::from_millis(50);

/// Serve the admin listener until the host runtime stops, under the main listener's
/// deadlines: those of the committed generation, which a reload may change (each
/// connection keeps those it was accepted under). Must run on the host runtime.
pub(crate) async fn serve(
    listener: std::net::TcpListener,
    events: InboundTx,
    deadlines: tokio::sync::watch::Receiver<Deadlines>,
) {
    // As the main listeners (decision 0010): a connection is accepted once its client has
    // spoken, or after a second. A probe then arrives with its request head, and silent
    // connections reach the listener no faster than they can be closed to make room.
    if let Err(e) = crate::os::set_defer_accept(&listener, super::listeners::DEFER_ACCEPT_SECS) {
        tracing::warn!(error = %e, "TCP_DEFER_ACCEPT not set on the admin listener");
    }
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "the admin listener cannot be served");
            return;
        }
    };
    let mut held = Connections::new(MAX_CONNECTIONS);
    loop {
        if !held.has_room() {
            // Every connection is answering a request: the next waits in the backlog.
            tokio::select! {
                () = held.one_closed() => {}
                () = tokio::time::sleep(FULL_RECHECK) => {}
            }
            continue;
        }
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "admin accept failed");
                continue;
            }
        };
        let admitted = held.admit();
        let events = events.clone();
        let deadlines = capped(*deadlines.borrow());
        tokio::spawn(serve_connection(stream, admitted, deadlines, move |req| {
            answer(req, events.clone())
        }));
    }
}

/// The main listener's deadlines, the head and keep-alive ones at most [`HEAD_TIMEOUT`].
fn capped(deadlines: Deadlines) -> Deadlines {
    Deadlines {
        request_head: deadlines.request_head.min(HEAD_TIMEOUT),
        keep_alive: deadlines.keep_alive.min(HEAD_TIMEOUT),
        ..deadlines
    }
}

async fn answer(req: Request<Incoming>, events: InboundTx) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path();
    let openmetrics = req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    if !matches!(path, "/livez" | "/readyz" | "/metrics") {
        return Ok(text(
            StatusCode::NOT_FOUND,
            "not found: try /livez, /readyz or /metrics\n",
        ));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        response
            .headers_mut()
            .insert(header::ALLOW, http::HeaderValue::from_static("GET, HEAD"));
        return Ok(response);
    }
    let Some(snapshot) = ask_loop(&events).await else {
        return Ok(text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the parent's loop did not answer\n",
        ));
    };
    Ok(match path {
        "/livez" => text(StatusCode::OK, "ok\n"),
        "/readyz" if snapshot.ready() => text(StatusCode::OK, &snapshot.readiness_text()),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, &snapshot.readiness_text()),
        _ => {
            let body = snapshot.render();
            let (body, kind) = if openmetrics {
                (body, OPENMETRICS_TYPE)
            } else {
                (super::metrics::classic_text(&body), CLASSIC_TYPE)
            };
            let mut response = Response::new(body::full(body));
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, http::HeaderValue::from_static(kind));
            response
        }
    })
}

/// The driver loop's copy of the core's counters, if it answers in time.
async fn ask_loop(events: &InboundTx) -> Option<Box<Snapshot>> {
    let (tx, rx) = oneshot::channel();
    events.send(Inbound::Metrics(tx)).ok()?;
    tokio::time::timeout(LOOP_ANSWER_BOUND, rx).await.ok()?.ok()
}

fn text(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(body::full(text.to_owned()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
