//! One WSGI call per request, on the application's pool. The async side and the pool
//! thread talk through two bounded queues, so back-pressure runs both ways: a client
//! that sends slowly makes `wsgi.input.read()` wait (without the interpreter's lock), and
//! one that reads slowly makes the application's next `yield` wait ([`outbox`]).

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Frame;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use tokio::runtime::Handle;

use super::deliveries::{self, Deliveries};
use super::environ::RequestHead;
use super::{Loaded, load, pool};
use crate::app::pool::Pool;
use crate::app::{AppError, AppSpec, Caller};
use crate::clock::Clock;
use crate::http::body::{self, Body};
use outbox::{Outbox, Sent};

mod outbox;

/// Response events queued ahead of the client: enough to overlap the application's next
/// chunk with the socket's write, few enough that a slow reader holds little memory.
const RESPONSE_QUEUE: usize = 4;

/// Chunks at least this large are handed to the socket as the application's own bytes
/// object instead of being copied.
const SHARE_FROM: usize = 16 * 1024;

/// Hop-by-hop headers an application must not set (PEP 3333): the server owns the
/// connection and the framing.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// A loaded WSGI application and the threads that call it.
pub(crate) struct Wsgi {
    loaded: Arc<Loaded>,
    pool: Pool,
    runtime: Handle,
    alive: Arc<AtomicU64>,
    body_timeout: Duration,
    /// The pool threads' wakes of the connections' tasks.
    deliveries: Arc<Deliveries>,
}

impl std::fmt::Debug for Wsgi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wsgi").field("pool", &self.pool).finish()
    }
}

/// What the pool thread tells the request's task.
enum Out {
    Head(StatusCode, HeaderMap),
    /// The head and a regular file to send from `start`, `len` bytes (`wsgi.file_wrapper`).
    File(StatusCode, HeaderMap, std::fs::File, u64, u64),
    Chunk(Bytes),
    /// The head and the whole body at once (an iterable of one bytes object): the task
    /// answers with it without waiting for anything more.
    Whole(StatusCode, HeaderMap, Bytes),
    /// The application returned: the response is complete.
    End,
    /// The application raised after its head was sent: cut the response.
    Abort,
}

impl Wsgi {
    pub(crate) fn load(spec: &AppSpec, runtime: Handle, clock: Clock) -> Result<Wsgi, AppError> {
        let alive = Arc::new(AtomicU64::new(0));
        let loaded = load(spec, clock, &alive)?;
        let deliveries = Arc::new(Deliveries::default());
        runtime.spawn(deliveries::dispatch(Arc::clone(&deliveries)));
        Ok(Wsgi {
            loaded: Arc::new(loaded),
            pool: pool(spec),
            runtime,
            alive,
            body_timeout: spec.body_timeout,
            deliveries,
        })
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
        let head = RequestHead::of(parts, caller);
        let input = (!body.is_end_stream()).then(|| {
            body.map_err(|e| io::Error::other(e.to_string()))
                .boxed_unsync()
        });
        let events = Reader(Arc::new(Outbox::default()));
        let call = Call {
            loaded: Arc::clone(&self.loaded),
            head,
            channel: Channel {
                outlet: Outlet {
                    out: Arc::clone(&events.0),
                    deliveries: Arc::clone(&self.deliveries),
                    head_sent: AtomicBool::new(false),
                    finished: AtomicBool::new(false),
                },
                input: Mutex::new(input),
                runtime: self.runtime.clone(),
                body_timeout: self.body_timeout,
            },
        };
        self.pool.run(move || call.run());
        match events.0.recv().await {
            Some(Out::Head(status, headers)) => {
                response(status, headers, BoxedEvents::body(events))
            }
            Some(Out::Whole(status, headers, bytes)) => {
                response(status, headers, body::full(bytes))
            }
            Some(Out::File(status, headers, file, start, len)) => {
                let runtime = self.runtime.clone();
                response(status, headers, body::file(file, start, len, runtime))
            }
            // Raised (or returned nothing) before the head: the traceback is logged.
            _ => super::internal_error(),
        }
    }
}

fn response(status: StatusCode, headers: HeaderMap, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}

/// The reading end of a call's response queue: closed when dropped (the response ended,
/// or its client went), which tells the application's next send that nobody reads.
struct Reader(Arc<Outbox>);

impl Drop for Reader {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The response body: the chunks the pool thread sends, until `End`.
struct BoxedEvents {
    events: Reader,
    done: bool,
}

impl BoxedEvents {
    fn body(events: Reader) -> Body {
        http_body_util::combinators::BoxBody::new(BoxedEvents {
            events,
            done: false,
        })
    }
}

impl hyper::body::Body for BoxedEvents {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.events.0.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Out::Chunk(bytes))) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
            Poll::Ready(Some(Out::End)) => {
                self.done = true;
                Poll::Ready(None)
            }
            // Raised mid-response, or the thread is gone without saying the response is
            // complete: the client must see it cut, not complete.
            Poll::Ready(Some(_) | None) => {
                self.done = true;
                Poll::Ready(Some(Err(io::Error::other(
                    "the application failed during its response",
                ))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

type Input = Mutex<Option<UnsyncBoxBody<Bytes, io::Error>>>;

/// One request's call, run on a pool thread.
struct Call {
    loaded: Arc<Loaded>,
    head: RequestHead,
    channel: Channel,
}

impl Call {
    fn run(self) {
        let Call {
            loaded,
            head,
            channel,
        } = self;
        // However the call ends (a panic of ours included), the task is told it did: with
        // nothing sent, it answers 500.
        let _end = EndGuard {
            out: Arc::clone(&channel.outlet.out),
            deliveries: Arc::clone(&channel.outlet.deliveries),
        };
        Python::attach(|py| {
            let channel = match Py::new(py, channel) {
                Ok(c) => c,
                Err(e) => return log_raised(py, &head, &e),
            };
            let outcome = call(py, &loaded, &head, &channel);
            let channel = channel.get();
            let outlet = &channel.outlet;
            // Whatever the application kept of the channel can send nothing from now on.
            let whole = outlet.finished.swap(true, Ordering::AcqRel);
            let last = match outcome {
                // The task has the response already.
                Ok(()) if whole => return,
                Ok(()) => Out::End,
                Err(e) => {
                    log_raised(py, &head, &e);
                    if !outlet.head_sent.load(Ordering::Acquire) {
                        // Before the head: the end with nothing sent tells the task to
                        // answer 500.
                        return;
                    }
                    Out::Abort
                }
            };
            outlet.queue(py, last);
        });
    }
}

/// Ends a call's response queue when dropped.
struct EndGuard {
    out: Arc<Outbox>,
    deliveries: Arc<Deliveries>,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if let Some(reader) = self.out.end() {
            self.deliveries.wake(reader);
        }
    }
}

/// The call itself.
fn call(
    py: Python<'_>,
    loaded: &Loaded,
    head: &RequestHead,
    channel: &Py<Channel>,
) -> PyResult<()> {
    let environ = head.environ(py, loaded.base_environ.bind(py), &loaded.repeated)?;
    let bodiless = channel
        .get()
        .input
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_none();
    let input = if bodiless {
        // Nothing to read: the worker's one stream that is always at its end, rather
        // than a new stream object per request.
        loaded.empty_input.bind(py).clone()
    } else {
        let recv = channel.bind(py).getattr(pyo3::intern!(py, "recv"))?;
        loaded.input.bind(py).call1((recv,))?
    };
    environ.set_item(pyo3::intern!(py, "wsgi.input"), input)?;
    loaded
        .call
        .bind(py)
        .call1((loaded.app.bind(py), environ, channel.bind(py)))?;
    Ok(())
}

/// An exception of the application, logged with its traceback.
fn log_raised(py: Python<'_>, head: &RequestHead, e: &PyErr) {
    tracing::error!(
        target: "servery::app",
        request = %head.line(),
        traceback = %super::describe(py, e),
        "the application raised"
    );
}

/// What a call's Python side reads the request body from and sends the response through:
/// one object per call, its methods the functions of the support module's `call`.
#[pyclass(frozen, module = "servery_wsgi")]
struct Channel {
    outlet: Outlet,
    input: Input,
    runtime: Handle,
    body_timeout: Duration,
}

#[pymethods]
impl Channel {
    /// The next chunk of the request body, `b""` at its end. Waits without the
    /// interpreter's lock, at most the body timeout.
    fn recv(&self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        let next = py.detach(|| {
            let mut guard = self.input.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(body) = guard.as_mut() else {
                return Ok(None);
            };
            let next = self.runtime.block_on(async {
                tokio::time::timeout(self.body_timeout, async {
                    loop {
                        match body.frame().await {
                            Some(Ok(frame)) => match frame.into_data() {
                                Ok(data) if data.is_empty() => continue,
                                Ok(data) => return Ok(Some(data)),
                                // Trailers: nothing WSGI can show.
                                Err(_) => continue,
                            },
                            Some(Err(e)) => return Err(e),
                            None => return Ok(None),
                        }
                    }
                })
                .await
            });
            let next = match next {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent no more of the request body in time",
                )),
            };
            if !matches!(next, Ok(Some(_))) {
                *guard = None;
            }
            next
        });
        match next {
            Ok(Some(data)) => Ok(PyBytes::new(py, &data).unbind()),
            Ok(None) => Ok(PyBytes::new(py, b"").unbind()),
            Err(e) => Err(pyo3::exceptions::PyOSError::new_err(e.to_string())),
        }
    }

    /// The head: True, or False when the client has gone.
    fn send_head(
        &self,
        py: Python<'_>,
        status: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (status, headers) = parse_head(status, headers)?;
        Ok(self.outlet.send(py, Out::Head(status, headers)))
    }

    /// A chunk of the body: True, or False when the client has gone.
    fn send_body(&self, py: Python<'_>, data: &Bound<'_, PyBytes>) -> PyResult<bool> {
        let chunk = shared_or_copied(data)?;
        Ok(self.outlet.send(py, Out::Chunk(chunk)))
    }

    /// The head and the whole body, the response complete: True, or False when the
    /// client has gone. A body that disagrees with the Content-Length the application
    /// declared goes the streamed way, where the connection's rules for that apply.
    fn send_whole(
        &self,
        py: Python<'_>,
        status: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        data: &Bound<'_, PyBytes>,
    ) -> PyResult<bool> {
        let (status, headers) = parse_head(status, headers)?;
        let chunk = shared_or_copied(data)?;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .map(|v| is_decimal_of(v.as_bytes(), chunk.len()));
        if declared == Some(false) {
            return Ok(self.outlet.send(py, Out::Head(status, headers))
                && (chunk.is_empty() || self.outlet.send(py, Out::Chunk(chunk))));
        }
        let sent = self.outlet.send(py, Out::Whole(status, headers, chunk));
        // Nothing follows the whole response (`Call::run` sends no end).
        self.outlet.finished.store(true, Ordering::Release);
        Ok(sent)
    }

    /// A file the server sends itself: True when it was taken (a regular file with a
    /// descriptor), False to have the wrapper iterated instead.
    fn send_file(
        &self,
        py: Python<'_>,
        status: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        filelike: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (status, headers) = parse_head(status, headers)?;
        let Some((file, start, mut len)) = open_again(filelike) else {
            return Ok(false);
        };
        if let Some(declared) = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        {
            len = len.min(declared);
        }
        // Taken even when the client has gone (there is nothing left to iterate); not
        // once the call is over.
        let _ = self
            .outlet
            .send(py, Out::File(status, headers, file, start, len));
        Ok(!self.outlet.finished.load(Ordering::Acquire))
    }
}

/// A chunk as the socket takes it: a large one is the application's own bytes object
/// (kept alive by the chunk), a small one copied.
fn shared_or_copied(data: &Bound<'_, PyBytes>) -> PyResult<Bytes> {
    if data.as_bytes().len() >= SHARE_FROM {
        Ok(Bytes::from_owner(data.extract::<PyBackedBytes>()?))
    } else {
        Ok(Bytes::copy_from_slice(data.as_bytes()))
    }
}

/// Where a call's response goes: the response queue, whether the head went out (an
/// exception after it cuts the response instead of answering 500), and whether the call
/// is over (whatever the application kept of its channel sends nothing then).
struct Outlet {
    out: Arc<Outbox>,
    /// Where the reader's wake goes: to the runtime in a batch.
    deliveries: Arc<Deliveries>,
    head_sent: AtomicBool,
    finished: AtomicBool,
}

impl Outlet {
    /// Queues `event` for the application; false when the call is over or the client has
    /// gone.
    fn send(&self, py: Python<'_>, event: Out) -> bool {
        if self.finished.load(Ordering::Acquire) {
            return false;
        }
        if matches!(event, Out::Head(..) | Out::File(..) | Out::Whole(..)) {
            self.head_sent.store(true, Ordering::Release);
        }
        self.queue(py, event)
    }

    /// Queues `event` with the interpreter's lock held while there is room (no other
    /// thread is let in between for nothing), waiting for room without it; false when the
    /// client has gone.
    fn queue(&self, py: Python<'_>, event: Out) -> bool {
        let sent = match self.out.try_send(event) {
            Sent::Full(event) => py.detach(|| self.out.send_waiting(event)),
            other => other,
        };
        match sent {
            Sent::Queued(reader) => {
                if let Some(reader) = reader {
                    self.deliveries.wake(reader);
                }
                true
            }
            Sent::Full(_) | Sent::Closed => false,
        }
    }
}

/// The file behind a file-like object, opened anew through `/proc/self/fd` (a descriptor
/// of our own, whatever the application does with its object), with its position and
/// the bytes left from there. `None` for anything but a regular file.
fn open_again(filelike: &Bound<'_, PyAny>) -> Option<(std::fs::File, u64, u64)> {
    let fd: i32 = filelike.call_method0("fileno").ok()?.extract().ok()?;
    let start: u64 = filelike
        .call_method0("tell")
        .ok()
        .and_then(|p| p.extract().ok())
        .unwrap_or(0);
    let file = std::fs::File::open(format!("/proc/self/fd/{fd}")).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    Some((file, start, meta.len().saturating_sub(start)))
}

/// The status line and header list as PEP 3333 has them, checked. The strings are read
/// in place (an ASCII `str` is its own bytes); only one with code points above 127 is
/// converted.
fn parse_head(
    status: &Bound<'_, PyAny>,
    list: &Bound<'_, PyAny>,
) -> PyResult<(StatusCode, HeaderMap)> {
    let invalid = |m: String| pyo3::exceptions::PyValueError::new_err(m);
    let status = status.cast::<PyString>()?;
    let status = status.to_cow()?;
    let code = status
        .get(..3)
        .filter(|_| status.len() == 3 || status.as_bytes().get(3) == Some(&b' '))
        .and_then(|c| c.parse::<u16>().ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .filter(|c| c.as_u16() >= 200 || *c == StatusCode::SWITCHING_PROTOCOLS)
        .ok_or_else(|| invalid(format!("not a WSGI status line: {status:?}")))?;
    let mut headers = HeaderMap::new();
    let mut add = |item: Bound<'_, PyAny>| -> PyResult<()> {
        let pair = item.cast_into::<PyTuple>()?;
        if pair.len() != 2 {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "a header is a (name, value) tuple, got {} items",
                pair.len()
            )));
        }
        let name = pair.get_borrowed_item(0)?;
        let name = name.cast::<PyString>()?;
        let name = name.to_cow()?;
        let value = pair.get_borrowed_item(1)?;
        let value = value.cast::<PyString>()?;
        let value = value.to_cow()?;
        let name = HeaderName::from_bytes(&latin1_bytes(&name).map_err(invalid)?)
            .map_err(|e| invalid(format!("header name {name:?}: {e}")))?;
        if HOP_BY_HOP.contains(&name.as_str()) {
            return Err(invalid(format!(
                "the hop-by-hop header {name} is the server's to set (PEP 3333)"
            )));
        }
        // Optional whitespace around a field value is not part of it (RFC 9110 §5.5), and
        // HTTP/2 and HTTP/3 refuse a value that starts or ends with it: Django's cookies
        // come as " name=value".
        let value = value.trim_matches([' ', '\t']);
        let value = HeaderValue::from_bytes(&latin1_bytes(value).map_err(invalid)?)
            .map_err(|e| invalid(format!("value of {name}: {e}")))?;
        headers.append(name, value);
        Ok(())
    };
    match list.cast::<PyList>() {
        // A list (what PEP 3333 asks for): its items without an iterator object.
        Ok(list) => {
            for item in list.iter() {
                add(item)?;
            }
        }
        Err(_) => {
            for item in list.try_iter()? {
                add(item?)?;
            }
        }
    }
    Ok((code, headers))
}

/// A native string back to its bytes (ISO-8859-1); code points above 255 are an error.
/// ASCII, nearly every header, is borrowed as it is.
fn latin1_bytes(s: &str) -> Result<Cow<'_, [u8]>, String> {
    if s.is_ascii() {
        return Ok(Cow::Borrowed(s.as_bytes()));
    }
    s.chars()
        .map(|c| u8::try_from(u32::from(c)).map_err(|_| format!("{s:?} is not ISO-8859-1")))
        .collect::<Result<Vec<u8>, String>>()
        .map(Cow::Owned)
}

/// Whether `text` is `n` written in decimal the way `n.to_string()` would write it.
fn is_decimal_of(text: &[u8], mut n: usize) -> bool {
    let mut digits = text.iter().rev();
    loop {
        match digits.next() {
            Some(&d) if usize::from(d.wrapping_sub(b'0')) == n % 10 => n /= 10,
            _ => return false,
        }
        if n == 0 {
            return digits.next().is_none();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `parse_head` on `(status, [(name, value), ...])` as an application gives them.
    fn head(status: &str, headers: &[(&str, &str)]) -> Result<(StatusCode, HeaderMap), String> {
        Python::initialize();
        Python::attach(|py| {
            let list = PyList::empty(py);
            for (k, v) in headers {
                list.append((*k, *v)).map_err(|e| e.to_string())?;
            }
            let status = status.into_pyobject(py).map_err(|e| e.to_string())?;
            parse_head(&status, &list).map_err(|e| e.to_string())
        })
    }

    #[test]
    fn status_lines_are_checked() {
        assert_eq!(head("200 OK", &[]).map(|h| h.0), Ok(StatusCode::OK));
        assert_eq!(head("404", &[]).map(|h| h.0), Ok(StatusCode::NOT_FOUND));
        assert_eq!(
            head("599 Whatever Reason", &[]).map(|h| h.0.as_u16()),
            Ok(599)
        );
        for bad in [
            "",
            "OK",
            "20 OK",
            "2000 OK",
            "200OK",
            "abc def",
            "099 Low",
            "100 Continue",
        ] {
            assert!(head(bad, &[]).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn headers_are_checked_trimmed_and_kept_in_order() {
        let (_, h) = head(
            "200 OK",
            &[
                ("Set-Cookie", " a=1"),
                ("Set-Cookie", "b=2\t"),
                ("X-Latin", "caf\u{e9}"),
            ],
        )
        .expect("valid");
        let cookies: Vec<_> = h.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(h["x-latin"].as_bytes(), b"caf\xe9");
        for (name, value) in [
            ("Connection", "close"),
            ("Transfer-Encoding", "chunked"),
            ("Bad Name", "v"),
            ("X-Newline", "a\nb"),
            ("X-Wide", "\u{263a}"),
        ] {
            assert!(
                head("200 OK", &[(name, value)]).is_err(),
                "{name}: {value:?} accepted"
            );
        }
    }

    proptest! {
        #[test]
        fn native_strings_round_trip_their_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let native: String = bytes.iter().map(|&b| char::from(b)).collect();
            prop_assert_eq!(latin1_bytes(&native).map(Cow::into_owned), Ok(bytes));
        }

        #[test]
        fn a_declared_length_matches_exactly_as_written(n in 0usize..1_000_000, text in "[0-9]{0,7}|[0-9 +a-]{0,4}", extra in "[0-9 +]") {
            prop_assert!(is_decimal_of(n.to_string().as_bytes(), n));
            prop_assert_eq!(is_decimal_of(text.as_bytes(), n), text == n.to_string());
            // More in front (a leading zero, another digit, a sign) is another text.
            let longer = format!("{extra}{n}");
            prop_assert!(!is_decimal_of(longer.as_bytes(), n), "{longer:?} taken for {n}");
        }

        #[test]
        fn a_code_point_above_255_is_refused(s in "\\PC*", c in (256u32..0x11_0000).prop_filter_map("a scalar value", char::from_u32)) {
            let with = format!("{s}{c}");
            prop_assert!(latin1_bytes(&with).is_err());
        }
    }
}
