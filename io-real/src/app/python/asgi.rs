//! ASGI 3 (HTTP, WebSocket in [`super::websocket`], and lifespan) on one asyncio loop per worker, in a thread of its own.
//!
//! The tokio side never takes the interpreter's lock: it queues what happened for the
//! loop ([`Bridge`]) and writes a byte to a socket the loop watches; the loop takes the
//! queue and resolves what waits on it. Each request ([`Exchange`]) crosses with bounded
//! queues both ways: at most [`BODY_QUEUE`] request chunks ahead of `receive()`, and
//! [`RESPONSE_QUEUE`] response events ahead of the socket, so a slow client or a slow
//! application holds little memory and makes the other side wait.

use std::collections::VecDeque;
use std::ffi::CString;
use std::io::{self, Write as _};
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode, Version, header};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Frame;
use pyo3::exceptions::PyTimeoutError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyCFunction, PyDict, PyList, PyModule, PyString, PyTuple};
use tokio::runtime::Handle;
use tokio::sync::Notify;

mod call;
mod outbox;

use super::deliveries::{self, Deliveries};
use super::describe;
use super::environ::LastAddr;
use super::websocket::Socket;
use crate::app::{AppError, AppSpec, Caller};
use crate::clock::Clock;
use crate::http::body::Body;
use call::HttpCall;
use outbox::Outbox;

/// Request-body chunks queued ahead of the application's `receive()`.
const BODY_QUEUE: usize = 2;
/// Response events queued ahead of the client.
const RESPONSE_QUEUE: usize = 4;

/// What `recv` answers (the numbers the support module names).
const CHUNK: u8 = 0;
const LAST: u8 = 1;
const PENDING: u8 = 2;
const GONE: u8 = 3;
/// Which of a request's waits a wake is for.
pub(super) const WAKE_RECEIVE: u8 = 0;
pub(super) const WAKE_SEND: u8 = 1;

/// The Python half (ASGI's message flow and lifespan), in Python.
const SUPPORT_SOURCE: &str = include_str!("asgi_support.py");

/// How the worker runs lifespan (`--lifespan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LifespanMode {
    Auto,
    On,
    Off,
}

impl LifespanMode {
    fn name(self) -> &'static str {
        match self {
            LifespanMode::Auto => "auto",
            LifespanMode::On => "on",
            LifespanMode::Off => "off",
        }
    }
}

/// A loaded ASGI application and its loop.
pub(crate) struct Asgi {
    bridge: Arc<Bridge>,
    lifespan: Option<Py<PyAny>>,
    event_loop: Py<PyAny>,
    runtime: Handle,
    alive: Arc<AtomicU64>,
    lifespan_timeout: Duration,
}

impl std::fmt::Debug for Asgi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asgi").finish_non_exhaustive()
    }
}

/// The queue the loop takes, and the socket that wakes it.
pub(super) struct Bridge {
    inbox: Mutex<Inbox>,
    wake: UnixStream,
    next: AtomicU64,
    /// Strings the scopes repeat, used on the loop's thread only.
    pub(super) repeated: Repeated,
    /// The loop's wakes of the connections' tasks.
    deliveries: Arc<Deliveries>,
}

#[derive(Default)]
pub(super) struct Inbox {
    new: Vec<Arc<Exchange>>,
    pub(super) sockets: Vec<Arc<Socket>>,
    woken: Vec<(u64, u8)>,
    /// A byte is on its way to the loop and it has not taken the queue since.
    signalled: bool,
}

impl Bridge {
    fn lock(&self) -> MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Queue `change` for the loop, and wake it unless a wake is already on its way.
    pub(super) fn notify(&self, change: impl FnOnce(&mut Inbox)) {
        let mut inbox = self.lock();
        change(&mut inbox);
        if !inbox.signalled {
            inbox.signalled = true;
            drop(inbox);
            // A full socket already holds a wake the loop has not read: enough.
            let _ = (&self.wake).write(&[1]);
        }
    }

    pub(super) fn wake(&self, id: u64, which: u8) {
        self.notify(|inbox| inbox.woken.push((id, which)));
    }
}

/// One request between the tokio side and the loop.
struct Exchange {
    id: u64,
    head: AsgiHead,
    input: Mutex<Input>,
    /// The loop took a chunk: the body pump may read the next.
    room: Notify,
    out: Outbox,
    /// `send` waits for room in `out`.
    send_waits: AtomicBool,
    bridge: Arc<Bridge>,
    runtime: Handle,
}

#[derive(Default)]
struct Input {
    chunks: VecDeque<Bytes>,
    ended: bool,
    /// The client went away, or the response is complete: `receive()` says disconnect.
    gone: bool,
    /// `receive()` waits for one of the above.
    waits: bool,
}

impl Exchange {
    fn input(&self) -> MutexGuard<'_, Input> {
        self.input.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Something `receive()` may wait for happened: wake it if it waits.
    fn input_changed(&self, input: &mut Input) {
        if std::mem::take(&mut input.waits) {
            self.bridge.wake(self.id, WAKE_RECEIVE);
        }
    }

    fn gone(&self) {
        let mut input = self.input();
        input.gone = true;
        self.input_changed(&mut input);
    }
}

enum Out {
    /// The response's head, with its first body event when the application sent one
    /// before the loop went round (a small response is then one event).
    Head(Box<Head>),
    Chunk(Bytes, bool),
    /// `len` bytes of a file from `start`, sent by the server (`http.response.pathsend`,
    /// or `http.response.zerocopysend`); the response ends with them when `last`.
    File(FilePart),
    /// The application raised, or returned without finishing its response.
    Fail,
}

struct FilePart {
    file: std::fs::File,
    start: u64,
    len: u64,
    last: bool,
}

struct Head {
    status: StatusCode,
    headers: HeaderMap,
    first: Option<Out>,
}

/// The request's head as hyper parsed it, moved here rather than copied: the scope is
/// made from it on the loop's thread, and nothing is allocated per field on the tokio
/// thread to be freed on the loop's.
pub(super) struct AsgiHead {
    parts: http::request::Parts,
    pub(super) caller: Caller,
}

impl AsgiHead {
    pub(super) fn of(parts: http::request::Parts, caller: Caller) -> AsgiHead {
        AsgiHead { parts, caller }
    }

    pub(super) fn method(&self) -> &str {
        self.parts.method.as_str()
    }

    /// The request's path, for the log.
    pub(super) fn target(&self) -> &str {
        self.parts.uri.path()
    }

    /// `server`: the Host header's (or `:authority`'s) name and port, when it names one.
    fn server(&self) -> Option<(&str, u16)> {
        let host = self
            .parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| self.parts.uri.authority().map(|a| a.as_str()))?;
        let (name, port) = host.rsplit_once(':')?;
        Some((name, port.parse().ok()?))
    }

    pub(super) fn scope<'py>(
        &self,
        py: Python<'py>,
        repeated: &Repeated,
    ) -> PyResult<Bound<'py, PyDict>> {
        let parts = &self.parts;
        // A copy of the template: every key already in place (in this order), so each
        // request's values replace placeholders instead of growing a new dict insert by
        // insert; the nested dicts are the request's own.
        let template = repeated
            .template
            .get_or_try_init(py, || ScopeTemplate::new(py))?;
        let scope = template.scope.bind(py).copy()?;
        scope.set_item(intern!(py, "asgi"), template.asgi.bind(py).copy()?)?;
        let version = match parts.version {
            Version::HTTP_10 => intern!(py, "1.0"),
            Version::HTTP_2 => intern!(py, "2"),
            Version::HTTP_3 => intern!(py, "3"),
            _ => intern!(py, "1.1"),
        };
        scope.set_item(intern!(py, "http_version"), version)?;
        let method = match parts.method.as_str() {
            "GET" => intern!(py, "GET").clone(),
            "POST" => intern!(py, "POST").clone(),
            "HEAD" => intern!(py, "HEAD").clone(),
            other => PyString::new(py, other),
        };
        scope.set_item(intern!(py, "method"), method)?;
        let scheme = if self.caller.tls {
            intern!(py, "https")
        } else {
            intern!(py, "http")
        };
        scope.set_item(intern!(py, "scheme"), scheme)?;
        let raw_path = parts.uri.path();
        let path: std::borrow::Cow<'_, str> = if raw_path.contains('%') {
            String::from_utf8_lossy(
                &percent_encoding::percent_decode_str(raw_path).collect::<Vec<u8>>(),
            )
            .into_owned()
            .into()
        } else {
            raw_path.into()
        };
        scope.set_item(intern!(py, "path"), path.as_ref())?;
        scope.set_item(
            intern!(py, "raw_path"),
            PyBytes::new(py, raw_path.as_bytes()),
        )?;
        let query = parts.uri.query().unwrap_or("");
        scope.set_item(
            intern!(py, "query_string"),
            PyBytes::new(py, query.as_bytes()),
        )?;
        // Starlette's FileResponse then hands its file to the server instead of reading
        // it through the loop; an application holding a descriptor hands that over.
        let extensions = template.extensions.bind(py).copy()?;
        extensions.set_item(intern!(py, "http.response.pathsend"), PyDict::new(py))?;
        extensions.set_item(intern!(py, "http.response.zerocopysend"), PyDict::new(py))?;
        scope.set_item(intern!(py, "extensions"), extensions)?;
        let headers = PyList::empty(py);
        for (k, v) in &parts.headers {
            headers.append((
                PyBytes::new(py, k.as_str().as_bytes()),
                PyBytes::new(py, v.as_bytes()),
            ))?;
        }
        scope.set_item(intern!(py, "headers"), headers)?;
        match &self.caller.peer {
            Some(peer) => scope.set_item(
                intern!(py, "client"),
                (repeated.client.get(py, peer.ip()), peer.port()),
            )?,
            None => scope.set_item(intern!(py, "client"), py.None())?,
        }
        match self.server() {
            Some((host, port)) => {
                scope.set_item(intern!(py, "server"), repeated.server.get(py, host, port)?)?
            }
            None => scope.set_item(intern!(py, "server"), py.None())?,
        }
        Ok(scope)
    }
}

/// The loop's last client address and server, as Python objects: usually the same from
/// one request to the next (see [`LastAddr`], [`LastServer`]); and the scope's template.
pub(super) struct Repeated {
    client: LastAddr,
    server: LastServer,
    template: PyOnceLock<ScopeTemplate>,
}

impl Default for Repeated {
    fn default() -> Repeated {
        Repeated {
            client: LastAddr::default(),
            server: LastServer::default(),
            template: PyOnceLock::new(),
        }
    }
}

impl std::fmt::Debug for Repeated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repeated")
            .field("client", &self.client)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// What every HTTP scope starts as: its keys in order, the values that never change set,
/// the rest `None` until the request's replace them; and the `asgi` and `extensions`
/// dicts to copy for each request (an application may change its own).
struct ScopeTemplate {
    scope: Py<PyDict>,
    asgi: Py<PyDict>,
    extensions: Py<PyDict>,
}

impl ScopeTemplate {
    fn new(py: Python<'_>) -> PyResult<ScopeTemplate> {
        let scope = PyDict::new(py);
        let none = py.None();
        for key in [
            intern!(py, "type"),
            intern!(py, "asgi"),
            intern!(py, "http_version"),
            intern!(py, "method"),
            intern!(py, "scheme"),
            intern!(py, "path"),
            intern!(py, "raw_path"),
            intern!(py, "query_string"),
            intern!(py, "root_path"),
            intern!(py, "extensions"),
            intern!(py, "headers"),
            intern!(py, "client"),
            intern!(py, "server"),
        ] {
            scope.set_item(key, &none)?;
        }
        scope.set_item(intern!(py, "type"), intern!(py, "http"))?;
        scope.set_item(intern!(py, "root_path"), intern!(py, ""))?;
        let asgi = PyDict::new(py);
        asgi.set_item(intern!(py, "version"), intern!(py, "3.0"))?;
        asgi.set_item(intern!(py, "spec_version"), intern!(py, "2.3"))?;
        let extensions = PyDict::new(py);
        extensions.set_item(intern!(py, "http.response.pathsend"), &none)?;
        extensions.set_item(intern!(py, "http.response.zerocopysend"), &none)?;
        Ok(ScopeTemplate {
            scope: scope.unbind(),
            asgi: asgi.unbind(),
            extensions: extensions.unbind(),
        })
    }
}

/// The last `server` of a scope as its Python tuple, given again while the name and port
/// stay the same: a tuple is immutable, so requests can share it, and each one not made
/// is an object fewer for the cyclic collector to count.
#[derive(Debug, Default)]
pub(super) struct LastServer(Mutex<Option<(String, u16, Py<PyTuple>)>>);

impl LastServer {
    pub(super) fn get<'py>(
        &self,
        py: Python<'py>,
        host: &str,
        port: u16,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((kept_host, kept_port, tuple)) = last.as_ref()
            && kept_host == host
            && *kept_port == port
        {
            return Ok(tuple.bind(py).clone());
        }
        let tuple = PyTuple::new(
            py,
            [
                PyString::new(py, host).into_any(),
                port.into_pyobject(py)?.into_any(),
            ],
        )?;
        *last = Some((host.to_owned(), port, tuple.clone().unbind()));
        Ok(tuple)
    }
}

impl Asgi {
    pub(crate) fn load(
        spec: &AppSpec,
        runtime: Handle,
        clock: Clock,
        lifespan: LifespanMode,
        lifespan_timeout: Duration,
        event_loop: &str,
    ) -> Result<Asgi, AppError> {
        Python::initialize();
        let failed = |detail: String| AppError::Load {
            target: spec.target.clone(),
            detail,
        };
        let (loop_end, wake) = UnixStream::pair().map_err(|e| failed(e.to_string()))?;
        wake.set_nonblocking(true)
            .map_err(|e| failed(e.to_string()))?;
        let bridge = Arc::new(Bridge {
            inbox: Mutex::new(Inbox::default()),
            wake,
            next: AtomicU64::new(1),
            repeated: Repeated::default(),
            deliveries: Arc::default(),
        });
        runtime.spawn(deliveries::dispatch(Arc::clone(&bridge.deliveries)));
        let (event_loop, lifespan_obj) = Python::attach(|py| -> Result<_, String> {
            let app = super::load_app(py, spec)?;
            let source = CString::new(SUPPORT_SOURCE).map_err(|e| e.to_string())?;
            let support = PyModule::from_code(py, &source, c"servery_asgi.py", c"servery_asgi")
                .map_err(|e| describe(py, &e))?;
            let event_loop = new_event_loop(py, event_loop)?;
            let take = take_fn(py, &bridge).map_err(|e| describe(py, &e))?;
            let log = super::log_fn(py).map_err(|e| describe(py, &e))?;
            let fd = loop_end.into_raw_fd();
            let bridge_obj = support
                .getattr("Bridge")
                .and_then(|b| b.call1((&event_loop, app, take, log, fd)))
                .map_err(|e| describe(py, &e))?;
            let lifespan_obj = support
                .getattr("Lifespan")
                .and_then(|l| l.call1((bridge_obj, lifespan.name())))
                .map_err(|e| describe(py, &e))?;
            Ok((event_loop.unbind(), lifespan_obj.unbind()))
        })
        .map_err(failed)?;
        let runner = Python::attach(|py| event_loop.clone_ref(py));
        std::thread::Builder::new()
            .name("servery-asgi-loop".into())
            .spawn(move || {
                Python::attach(|py| {
                    if let Err(e) = runner.bind(py).call_method0("run_forever") {
                        tracing::error!(error = %describe(py, &e), "the application's event loop ended");
                    }
                })
            })
            .map_err(|e| failed(e.to_string()))?;
        let alive = Arc::new(AtomicU64::new(0));
        let asgi = Asgi {
            bridge,
            lifespan: (lifespan != LifespanMode::Off).then_some(lifespan_obj),
            event_loop,
            runtime,
            alive: Arc::clone(&alive),
            lifespan_timeout,
        };
        if let Err(detail) = asgi.run_lifespan("startup") {
            return Err(failed(format!("lifespan startup: {detail}")));
        }
        super::start_probe(clock, alive);
        Ok(asgi)
    }

    /// Runs the lifespan's `startup` or `shutdown` on the loop and waits for it, at most
    /// the lifespan timeout. Blocking.
    fn run_lifespan(&self, phase: &str) -> Result<(), String> {
        let Some(lifespan) = &self.lifespan else {
            return Ok(());
        };
        let timeout = self.lifespan_timeout.as_secs_f64();
        Python::attach(|py| {
            let coroutine = lifespan.bind(py).call_method0(phase)?;
            let asyncio = PyModule::import(py, "asyncio")?;
            let future = asyncio.call_method1(
                "run_coroutine_threadsafe",
                (coroutine, self.event_loop.bind(py)),
            )?;
            // `result` waits on a condition: the interpreter's lock is let go meanwhile.
            match future.call_method1("result", (timeout,)) {
                Ok(_) => Ok(()),
                Err(e) if e.is_instance_of::<PyTimeoutError>(py) => {
                    // The phase is still running on the loop: stop it rather than leave it.
                    future.call_method0("cancel")?;
                    Err(PyTimeoutError::new_err(format!(
                        "{phase} took longer than --lifespan-timeout ({timeout} s)"
                    )))
                }
                Err(e) => Err(e),
            }
        })
        .map_err(|e: PyErr| Python::attach(|py| describe(py, &e)))
    }

    pub(crate) fn has_lifespan(&self) -> bool {
        self.lifespan.is_some()
    }

    /// Lifespan shutdown, once the worker drained: bounded by the lifespan timeout, and
    /// reported when it fails or overruns.
    pub(crate) fn shutdown(&self) {
        match self.run_lifespan("shutdown") {
            Ok(()) => tracing::info!("the application's lifespan shutdown completed"),
            Err(e) => tracing::error!(error = %e, "the application's lifespan shutdown failed"),
        }
    }

    pub(crate) fn last_alive(&self) -> Option<servery_core::Instant> {
        super::last_alive(&self.alive)
    }

    pub(crate) async fn handle<B>(
        &self,
        parts: http::request::Parts,
        body: B,
        caller: Caller,
    ) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        if let Some(tunnel) = super::websocket::wanted(&parts) {
            return super::websocket::handle(&self.bridge, parts, caller, tunnel).await;
        }
        let exchange = Arc::new(Exchange {
            id: self.bridge.next_id(),
            head: AsgiHead::of(parts, caller),
            input: Mutex::new(Input::default()),
            room: Notify::new(),
            out: Outbox::default(),
            send_waits: AtomicBool::new(false),
            bridge: Arc::clone(&self.bridge),
            runtime: self.runtime.clone(),
        });
        if body.is_end_stream() {
            exchange.input().ended = true;
        } else {
            let body = body
                .map_err(|e| io::Error::other(e.to_string()))
                .boxed_unsync();
            tokio::spawn(pump(Arc::clone(&exchange), body));
        }
        self.bridge
            .notify(|inbox| inbox.new.push(Arc::clone(&exchange)));
        let guard = GoneGuard(Arc::clone(&exchange));
        let first = exchange.out.recv().await;
        match first {
            Out::Head(head) => {
                let Head {
                    status,
                    headers,
                    first,
                } = *head;
                let mut r =
                    Response::new(http_body_util::combinators::BoxBody::new(ResponseBody {
                        exchange: guard,
                        done: false,
                        file: None,
                        first,
                    }));
                *r.status_mut() = status;
                *r.headers_mut() = headers;
                r
            }
            _ => super::internal_error(),
        }
    }
}

/// A new event loop of the kind `--loop` names: uvloop's when it is asked for (or, with
/// `auto`, when it is installed), else asyncio's.
fn new_event_loop<'py>(py: Python<'py>, kind: &str) -> Result<Bound<'py, PyAny>, String> {
    if kind != "asyncio" {
        match PyModule::import(py, "uvloop") {
            Ok(uvloop) => {
                return uvloop
                    .call_method0("new_event_loop")
                    .map_err(|e| describe(py, &e));
            }
            Err(e) if kind == "uvloop" => {
                return Err(format!("--loop uvloop: {}", describe(py, &e)));
            }
            Err(_) => {}
        }
    }
    PyModule::import(py, "asyncio")
        .and_then(|asyncio| asyncio.call_method0("new_event_loop"))
        .map_err(|e| describe(py, &e))
}

/// Tells the loop the request is over (complete, or its client gone) when the response
/// is dropped, so a `receive()` waiting for the disconnect returns and a `send()` is told
/// nobody reads.
struct GoneGuard(Arc<Exchange>);

impl Drop for GoneGuard {
    fn drop(&mut self) {
        self.0.gone();
        self.0.out.close();
    }
}

/// Reads the request body into the exchange, at most [`BODY_QUEUE`] chunks ahead.
async fn pump(exchange: Arc<Exchange>, mut body: UnsyncBoxBody<Bytes, io::Error>) {
    loop {
        loop {
            let notified = exchange.room.notified();
            if exchange.input().chunks.len() < BODY_QUEUE {
                break;
            }
            notified.await;
        }
        let next = body.frame().await;
        let mut input = exchange.input();
        match next {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    input.chunks.push_back(data);
                    exchange.input_changed(&mut input);
                }
            }
            Some(Err(_)) => {
                input.gone = true;
                exchange.input_changed(&mut input);
                return;
            }
            None => {
                input.ended = true;
                exchange.input_changed(&mut input);
                return;
            }
        }
    }
}

/// The response body: the events the loop sends, until the last chunk.
struct ResponseBody {
    exchange: GoneGuard,
    done: bool,
    /// The file being sent (`http.response.pathsend` or `zerocopysend`), and whether
    /// the response ends with it.
    file: Option<(Body, bool)>,
    /// The event that came with the head, taken before the queue's.
    first: Option<Out>,
}

impl hyper::body::Body for ResponseBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if let Some((file, last)) = &mut self.file {
                let last = *last;
                match Pin::new(file).poll_frame(cx) {
                    // The file sent, and more of the response to come: the next event.
                    Poll::Ready(None) if !last => self.file = None,
                    polled => {
                        if let Poll::Ready(None | Some(Err(_))) = &polled {
                            self.done = true;
                            self.exchange.0.gone();
                        }
                        return polled;
                    }
                }
                continue;
            }
            let event = if let Some(first) = self.first.take() {
                first
            } else {
                let event = match self.exchange.0.out.poll_recv(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(event) => event,
                };
                let exchange = &self.exchange.0;
                if exchange.send_waits.swap(false, Ordering::AcqRel) {
                    exchange.bridge.wake(exchange.id, WAKE_SEND);
                }
                event
            };
            match event {
                Out::Chunk(data, last) => {
                    if last {
                        self.done = true;
                        self.exchange.0.gone();
                    }
                    if data.is_empty() {
                        continue;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Out::File(part) => {
                    let runtime = self.exchange.0.runtime.clone();
                    let body = crate::http::body::file(part.file, part.start, part.len, runtime);
                    self.file = Some((body, part.last));
                }
                Out::Head(..) => continue,
                Out::Fail => {
                    self.done = true;
                    return Poll::Ready(Some(Err(io::Error::other(
                        "the application failed during its response",
                    ))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        // A response complete in its first event has a known length (hyper then sends
        // Content-Length rather than chunks when the application gave none).
        match &self.first {
            Some(Out::Chunk(data, true)) => hyper::body::SizeHint::with_exact(data.len() as u64),
            _ if self.done => hyper::body::SizeHint::with_exact(0),
            _ => hyper::body::SizeHint::default(),
        }
    }
}

/// `take()`: the new requests (each its scope then its call) and the wakes.
fn take_fn<'py>(py: Python<'py>, bridge: &Arc<Bridge>) -> PyResult<Bound<'py, PyCFunction>> {
    let bridge = Arc::clone(bridge);
    PyCFunction::new_closure(
        py,
        Some(c"take"),
        None,
        move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<Py<PyTuple>> {
            let py = args.py();
            let (new, woken, sockets) = {
                let mut inbox = bridge.lock();
                inbox.signalled = false;
                (
                    std::mem::take(&mut inbox.new),
                    std::mem::take(&mut inbox.woken),
                    std::mem::take(&mut inbox.sockets),
                )
            };
            // Each request as its scope then its call, side by side rather than in a tuple
            // of their own: an object fewer per request for the cyclic collector.
            let requests = PyList::empty(py);
            for exchange in new {
                let scope = exchange.head.scope(py, &exchange.bridge.repeated)?;
                requests.append(scope)?;
                requests.append(Bound::new(py, HttpCall::new(exchange))?)?;
            }
            let wakes = PyList::empty(py);
            for (id, which) in woken {
                wakes.append((id, which))?;
            }
            let opened = PyList::empty(py);
            for socket in sockets {
                opened.append(super::websocket::serve_args(py, &socket)?)?;
            }
            Ok(PyTuple::new(
                py,
                [requests.into_any(), wakes.into_any(), opened.into_any()],
            )?
            .unbind())
        },
    )
}

#[cfg(test)]
mod scope_tests {
    use pyo3::prelude::*;
    use pyo3::types::PyDict;

    use super::{AsgiHead, Repeated};
    use crate::app::Caller;

    fn scope<'py>(py: Python<'py>, repeated: &Repeated, uri: &str) -> Bound<'py, PyDict> {
        let (parts, ()) = http::Request::get(uri)
            .header("host", "example.org:8000")
            .header("x-one", "1")
            .body(())
            .expect("request")
            .into_parts();
        let caller = Caller {
            peer: Some("192.0.2.7:5000".parse().expect("address")),
            tls: true,
        };
        AsgiHead::of(parts, caller)
            .scope(py, repeated)
            .expect("scope")
    }

    #[test]
    fn each_scope_is_the_requests_own_with_every_key_in_order() {
        Python::initialize();
        Python::attach(|py| {
            let repeated = Repeated::default();
            let first = scope(py, &repeated, "/a%20b?q=1");
            let keys: Vec<String> = first.keys().extract().expect("keys");
            assert_eq!(
                keys,
                [
                    "type",
                    "asgi",
                    "http_version",
                    "method",
                    "scheme",
                    "path",
                    "raw_path",
                    "query_string",
                    "root_path",
                    "extensions",
                    "headers",
                    "client",
                    "server"
                ]
            );
            let check = |script: &std::ffi::CStr, scope: &Bound<'_, PyDict>| {
                let locals = PyDict::new(py);
                locals.set_item("s", scope).expect("local");
                py.run(script, None, Some(&locals))
                    .unwrap_or_else(|e| panic!("{e}"));
            };
            check(
                c"assert s['type'] == 'http' and s['asgi'] == {'version': '3.0', 'spec_version': '2.3'}, s
assert (s['method'], s['scheme'], s['path'], s['raw_path'], s['query_string']) == ('GET', 'https', '/a b', b'/a%20b', b'q=1'), s
assert s['root_path'] == '' and s['client'] == ('192.0.2.7', 5000) and s['server'] == ('example.org', 8000), s
assert s['headers'] == [(b'host', b'example.org:8000'), (b'x-one', b'1')], s
assert s['extensions'] == {'http.response.pathsend': {}, 'http.response.zerocopysend': {}}, s
s['asgi']['mine'] = 1
s['extensions']['http.response.pathsend']['mine'] = 1
s['extensions']['mine'] = {}
s['mine'] = 1",
                &first,
            );
            // What one request's application changed in its scope is not in the next's.
            let second = scope(py, &repeated, "/");
            check(
                c"assert 'mine' not in s, 'a scope shares the previous request\\'s dict: ' + repr(s)
assert 'mine' not in s['asgi'], 'the scope\\'s asgi dict is shared between requests'
assert 'mine' not in s['extensions'], 'the scope\\'s extensions dict is shared between requests'
assert s['extensions']['http.response.pathsend'] == {}, 'an extension\\'s dict is shared between requests'
assert s['path'] == '/' and s['query_string'] == b'', s",
                &second,
            );
        });
    }
}
