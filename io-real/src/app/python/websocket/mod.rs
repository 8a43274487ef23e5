//! ASGI WebSockets (the `websocket` scope) over HTTP/1.1 `Upgrade` (RFC 6455).
//!
//! The handshake is checked before the application sees anything; the application then
//! accepts (101, and the socket is handed to a [`session`]) or closes (403). The session
//! carries messages both ways with bounded queues, as the HTTP exchange does: at most
//! [`INBOX`] messages wait for the application's `receive()` (the socket is not read
//! meanwhile, so a fast client is slowed by TCP), and `send()` waits while [`OUTBOX`]
//! messages wait for the client. It pings an idle peer and closes one that stops
//! answering, limits frames and messages, completes the close handshake from either
//! side, and closes with 1012 (service restart) when its worker drains.

mod handshake;
mod session;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, Version, header};
use hyper::upgrade::OnUpgrade;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCFunction, PyDict, PyList, PyString, PyTuple};
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message;

use handshake::{Refusal, check_handshake, has_token, refused};

use super::asgi::{AsgiHead, Bridge, WAKE_RECEIVE, WAKE_SEND};
use super::describe;
use crate::app::Caller;
use crate::http::body::{self, Body};
use crate::http::tunnel::Tunnel;

/// Messages from the client queued ahead of the application's `receive()`.
const INBOX: usize = 4;
/// Messages from the application queued ahead of the client.
const OUTBOX: usize = 4;
/// The largest message (and frame) taken from a client: uvicorn's default. A larger one
/// closes the socket with 1009.
const MAX_MESSAGE: usize = 16 << 20;
/// An idle socket is pinged this often, and closed (1011) when a ping goes a whole
/// interval without anything heard from the peer (uvicorn: 20 s and 20 s).
const PING_INTERVAL: Duration = Duration::from_secs(20);

/// The ping interval: [`PING_INTERVAL`], or, in builds with the `test-hooks` feature,
/// `SERVERY_TEST_WS_PING_MS` milliseconds, so the black-box tests see a silent peer closed
/// without waiting 40 s. Release builds have no such variable.
fn ping_interval() -> Duration {
    #[cfg(feature = "test-hooks")]
    if let Some(ms) = std::env::var("SERVERY_TEST_WS_PING_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
    {
        return Duration::from_millis(ms);
    }
    PING_INTERVAL
}
/// How long a close handshake waits for the peer's Close before the socket is dropped.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The close codes servery sends (RFC 6455 §7.4.1).
const NORMAL: u16 = 1000;
const ABNORMAL: u16 = 1006;
const TOO_BIG: u16 = 1009;
const PROTOCOL_ERROR: u16 = 1002;
const INTERNAL_ERROR: u16 = 1011;
const SERVICE_RESTART: u16 = 1012;

/// What `recv` answers (the numbers the support module names).
const TEXT: u8 = 0;
const BINARY: u8 = 1;
const DISCONNECT: u8 = 2;
const PENDING: u8 = 3;
/// What `send` is asked to do.
const ACCEPT: u8 = 0;
const SEND_TEXT: u8 = 1;
const SEND_BINARY: u8 = 2;
const CLOSE: u8 = 3;
/// What `send` answers.
const TAKEN: u8 = 0;
const FULL: u8 = 1;
const GONE: u8 = 2;

/// The tunnel a request for a WebSocket may take, when it asks for one: an HTTP/1.1 GET
/// naming `websocket` in `Upgrade`, on a connection that can be taken over.
pub(super) fn wanted(parts: &Parts) -> Option<Arc<Tunnel>> {
    let tunnel = parts.extensions.get::<Arc<Tunnel>>()?;
    let websocket = has_token(&parts.headers, header::UPGRADE, "websocket");
    (websocket && parts.version == Version::HTTP_11).then(|| Arc::clone(tunnel))
}

fn status_only(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(body::empty());
    *response.status_mut() = status;
    response
}

/// One WebSocket between the tokio side and the loop.
pub(super) struct Socket {
    pub(super) id: u64,
    head: AsgiHead,
    subprotocols: Vec<String>,
    input: Mutex<Input>,
    /// The application took a message: the session may read the next.
    room: Notify,
    out: mpsc::Sender<Out>,
    /// `send` waits for room in `out`.
    send_waits: AtomicBool,
    bridge: Arc<Bridge>,
    runtime: tokio::runtime::Handle,
}

#[derive(Default)]
struct Input {
    messages: VecDeque<In>,
    /// The disconnect was queued: nothing follows it, and `send` answers GONE.
    ended: bool,
    /// `receive()` waits for a message.
    waits: bool,
}

enum In {
    Text(tokio_tungstenite::tungstenite::Utf8Bytes),
    Binary(Bytes),
    Disconnect(u16, String),
}

enum Out {
    Accept(Option<String>, HeaderMap),
    Message(Message),
    Close(u16, String),
    /// The application returned (`false`) or raised (`true`).
    Done(bool),
}

impl Socket {
    fn input(&self) -> MutexGuard<'_, Input> {
        self.input.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, message: In) {
        let mut input = self.input();
        if input.ended {
            return;
        }
        input.ended = matches!(message, In::Disconnect(..));
        input.messages.push_back(message);
        if std::mem::take(&mut input.waits) {
            drop(input);
            self.bridge.wake(self.id, WAKE_RECEIVE);
        }
    }

    /// The socket is over: the application's next `receive()` says so (once).
    fn disconnected(&self, code: u16, reason: &str) {
        self.push(In::Disconnect(code, reason.to_owned()));
    }

    fn has_room(&self) -> bool {
        self.input().messages.len() < INBOX
    }

    fn scope<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let scope = self.head.scope(py, &self.bridge.repeated)?;
        scope.set_item("type", "websocket")?;
        scope.del_item("method")?;
        let tls = self.head.caller.tls;
        scope.set_item("scheme", if tls { "wss" } else { "ws" })?;
        scope.set_item("subprotocols", PyList::new(py, &self.subprotocols)?)?;
        // No WebSocket extension is offered (not the HTTP scope's pathsend).
        scope.set_item("extensions", PyDict::new(py))?;
        Ok(scope)
    }
}

/// Tells the application its socket is gone if the request ends before a session took
/// it over (the client left during the handshake, or the application refused).
struct Unclaimed(Option<Arc<Socket>>);

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if let Some(socket) = self.0.take() {
            socket.disconnected(ABNORMAL, "");
        }
    }
}

/// Answers a WebSocket opening handshake: the application decides, and on accept the
/// socket is served by a session under the connection's `tunnel`.
pub(super) async fn handle(
    bridge: &Arc<Bridge>,
    mut parts: Parts,
    caller: Caller,
    tunnel: Arc<Tunnel>,
) -> Response<Body> {
    let accept = match check_handshake(&parts) {
        Ok(accept) => accept,
        Err(refusal) => return refused(&refusal),
    };
    let Some(upgrade) = parts.extensions.remove::<OnUpgrade>() else {
        return refused(&Refusal::Malformed("this connection cannot be upgraded"));
    };
    let subprotocols = parts
        .headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let (out, mut outs) = mpsc::channel(OUTBOX);
    let socket = Arc::new(Socket {
        id: bridge.next_id(),
        head: AsgiHead::of(parts, caller),
        subprotocols,
        input: Mutex::new(Input::default()),
        room: Notify::new(),
        out,
        send_waits: AtomicBool::new(false),
        bridge: Arc::clone(bridge),
        runtime: tokio::runtime::Handle::current(),
    });
    bridge.notify(|inbox| inbox.sockets.push(Arc::clone(&socket)));
    let mut unclaimed = Unclaimed(Some(Arc::clone(&socket)));
    let event = outs.recv().await;
    socket.sent_one();
    match event {
        Some(Out::Accept(subprotocol, extra)) => {
            let mut response = status_only(StatusCode::SWITCHING_PROTOCOLS);
            let headers = response.headers_mut();
            for (name, value) in &extra {
                headers.append(name, value.clone());
            }
            headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
            let accept = HeaderValue::from_str(&accept).unwrap_or_else(|_| unreachable!());
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
            if let Some(protocol) = subprotocol.and_then(|p| HeaderValue::from_str(&p).ok()) {
                headers.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol);
            }
            let session = session::session(
                Arc::clone(&socket),
                outs,
                upgrade,
                tunnel.drain(),
                tunnel.send_timeout(),
            );
            if !tunnel.open(session) {
                return status_only(StatusCode::INTERNAL_SERVER_ERROR);
            }
            unclaimed.0 = None;
            response
        }
        // Closed before accepting: the handshake is refused (ASGI: 403).
        Some(Out::Close(..)) => status_only(StatusCode::FORBIDDEN),
        // Raised, returned, or sent a message first (refused on the Python side).
        _ => super::internal_error(),
    }
}

impl Socket {
    /// An event left the queue: a `send` waiting for room may go on.
    fn sent_one(&self) {
        if self.send_waits.swap(false, Ordering::AcqRel) {
            self.bridge.wake(self.id, WAKE_SEND);
        }
    }
}

/// The support module's `serve_websocket` arguments for a socket just opened:
/// `(id, scope, recv, send, finish)`.
pub(super) fn serve_args<'py>(
    py: Python<'py>,
    socket: &Arc<Socket>,
) -> PyResult<Bound<'py, PyTuple>> {
    let items: [Bound<'py, PyAny>; 5] = [
        socket.id.into_pyobject(py)?.into_any(),
        socket.scope(py)?.into_any(),
        recv_fn(py, socket)?.into_any(),
        send_fn(py, socket)?.into_any(),
        finish_fn(py, socket)?.into_any(),
    ];
    PyTuple::new(py, items)
}

/// `recv()`: `(kind, payload)`, never waiting; on `PENDING` the socket is woken when a
/// message or the disconnect arrives. A disconnect's payload is `(code, reason)`.
fn recv_fn<'py>(py: Python<'py>, socket: &Arc<Socket>) -> PyResult<Bound<'py, PyCFunction>> {
    let socket = Arc::clone(socket);
    PyCFunction::new_closure(
        py,
        Some(c"recv"),
        None,
        move |args: &Bound<'_, PyTuple>,
              _: Option<&Bound<'_, PyDict>>|
              -> PyResult<(u8, Py<PyAny>)> {
            let py = args.py();
            let mut input = socket.input();
            let Some(message) = input.messages.pop_front() else {
                input.waits = true;
                return Ok((PENDING, py.None()));
            };
            if let In::Disconnect(code, reason) = &message {
                // Said again to a `receive()` after it: the socket stays over.
                input
                    .messages
                    .push_front(In::Disconnect(*code, reason.clone()));
            }
            drop(input);
            socket.room.notify_one();
            Ok(match message {
                In::Text(text) => (TEXT, PyString::new(py, text.as_str()).into_any().unbind()),
                In::Binary(data) => (BINARY, PyBytes::new(py, &data).into_any().unbind()),
                In::Disconnect(code, reason) => (
                    DISCONNECT,
                    (code, reason).into_pyobject(py)?.into_any().unbind(),
                ),
            })
        },
    )
}

/// `send(op, a, b)`: `TAKEN`, `FULL` (the socket is woken when there is room) or `GONE`
/// (the client is gone: the application's `send()` raises). A Close after the end is
/// taken and ignored.
fn send_fn<'py>(py: Python<'py>, socket: &Arc<Socket>) -> PyResult<Bound<'py, PyCFunction>> {
    let socket = Arc::clone(socket);
    PyCFunction::new_closure(
        py,
        Some(c"send"),
        None,
        move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<u8> {
            let invalid = |m: String| pyo3::exceptions::PyValueError::new_err(m);
            let op: u8 = args.get_item(0)?.extract()?;
            let (a, b) = (args.get_item(1)?, args.get_item(2)?);
            let event = match op {
                ACCEPT => {
                    let subprotocol: Option<String> = a.extract()?;
                    let mut headers = HeaderMap::new();
                    for item in b.try_iter()? {
                        let (name, value): (Vec<u8>, Vec<u8>) = item?.extract()?;
                        let name = HeaderName::from_bytes(&name)
                            .map_err(|e| invalid(format!("header name: {e}")))?;
                        let value = HeaderValue::from_bytes(value.trim_ascii())
                            .map_err(|e| invalid(format!("value of {name}: {e}")))?;
                        headers.append(name, value);
                    }
                    Out::Accept(subprotocol, headers)
                }
                SEND_TEXT => Out::Message(Message::text(a.extract::<String>()?)),
                SEND_BINARY => Out::Message(Message::binary(a.extract::<Vec<u8>>()?)),
                CLOSE => {
                    let code: u16 = a.extract()?;
                    if !(code == NORMAL || (3000..5000).contains(&code) || valid_close(code)) {
                        return Err(invalid(format!("not a close code to send: {code}")));
                    }
                    let reason: String = b.extract()?;
                    if reason.len() > 123 {
                        return Err(invalid("a close reason is at most 123 bytes".into()));
                    }
                    Out::Close(code, reason)
                }
                other => return Err(invalid(format!("unknown WebSocket operation {other}"))),
            };
            let closing = matches!(event, Out::Close(..));
            if socket.input().ended && !closing {
                return Ok(GONE);
            }
            // Marked before trying, so a slot freed in between still wakes the sender.
            socket.send_waits.store(true, Ordering::Release);
            match socket.out.try_send(event) {
                Ok(()) => {
                    socket.send_waits.store(false, Ordering::Release);
                    Ok(TAKEN)
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    socket.send_waits.store(false, Ordering::Release);
                    Ok(if closing { TAKEN } else { GONE })
                }
                Err(mpsc::error::TrySendError::Full(_)) => Ok(FULL),
            }
        },
    )
}

/// Close codes an endpoint may send (RFC 6455 §7.4.1; 1005, 1006 and 1015 never go on the
/// wire).
fn valid_close(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014)
}

/// `finish(exception or None)`: the application returned or raised. A socket it had not
/// accepted is refused (500); one it left open is closed (1000, or 1011 when it raised).
fn finish_fn<'py>(py: Python<'py>, socket: &Arc<Socket>) -> PyResult<Bound<'py, PyCFunction>> {
    let socket = Arc::clone(socket);
    PyCFunction::new_closure(
        py,
        Some(c"finish"),
        None,
        move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            let py = args.py();
            let raised = args.get_item(0)?;
            let failed = !raised.is_none();
            if failed {
                let err = PyErr::from_value(raised);
                tracing::error!(
                    target: "servery::app",
                    socket = %socket.head.target(),
                    traceback = %describe(py, &err),
                    "the application raised on a WebSocket"
                );
            }
            if let Err(mpsc::error::TrySendError::Full(event)) =
                socket.out.try_send(Out::Done(failed))
            {
                let out = socket.out.clone();
                socket.runtime.spawn(async move {
                    let _ = out.send(event).await;
                });
            }
            Ok(())
        },
    )
}
