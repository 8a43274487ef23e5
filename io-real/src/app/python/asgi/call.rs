//! One HTTP request as the loop sees it: a `#[pyclass]` whose methods the support module's
//! `receive` and `send` call. One object per request (not a closure per function), and
//! `send`'s message checks in Rust.
//!
//! The response head is held until the first body event (or the end of the loop's
//! current iteration, when the support module flushes it), so a small complete response
//! crosses to the connection's task as one event and one wake (decision 0053).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyModule};

use super::outbox::Refused;
use super::{CHUNK, Exchange, FilePart, GONE, Head, LAST, Out, PENDING};
use crate::app::python::describe;

/// What `send` answers (the numbers the support module names).
const TAKEN: u8 = 0;
/// The response queue is full: wait for the wake, then `flush()`.
const FULL: u8 = 1;
/// The head is held: flush it at the end of this loop iteration unless a body follows.
const HELD: u8 = 2;

#[pyclass(module = "servery_asgi")]
pub(super) struct HttpCall {
    exchange: Arc<Exchange>,
    /// `http.response.start` taken, not yet sent: it goes with the first body event.
    held: Option<(StatusCode, HeaderMap)>,
    started: bool,
    complete: bool,
    /// Events the full queue did not take, in order; `flush()` retries them. Kept as a
    /// queue so that an application sending from two tasks at once loses nothing.
    pending: VecDeque<Out>,
}

impl HttpCall {
    pub(super) fn new(exchange: Arc<Exchange>) -> HttpCall {
        HttpCall {
            exchange,
            held: None,
            started: false,
            complete: false,
            pending: VecDeque::new(),
        }
    }

    /// `event`, with the held head in front of it when there is one.
    fn after_head(&mut self, event: Option<Out>) -> Out {
        match self.held.take() {
            Some((status, headers)) => Out::Head(Box::new(Head {
                status,
                headers,
                first: event,
            })),
            None => event.unwrap_or(Out::Fail),
        }
    }

    fn queue(&mut self, event: Out) -> u8 {
        self.pending.push_back(event);
        if self.flush() { TAKEN } else { FULL }
    }
}

/// `message[key]`, or None when it has no such key (any mapping; dicts the fast way).
fn field<'py>(
    message: &Bound<'py, PyAny>,
    key: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(dict) = message.cast::<PyDict>() {
        return dict.get_item(key);
    }
    let got = message.call_method1(intern!(message.py(), "get"), (key,))?;
    Ok((!got.is_none()).then_some(got))
}

fn runtime_error(m: String) -> PyErr {
    PyRuntimeError::new_err(m)
}

#[pymethods]
impl HttpCall {
    /// The request's number, which its wakes name.
    #[getter]
    fn ident(&self) -> u64 {
        self.exchange.id
    }

    /// `(kind, data)`, never waiting; on `PENDING` the request is woken when there is
    /// something to receive.
    fn recv<'py>(&self, py: Python<'py>, after_body: bool) -> (u8, Bound<'py, PyBytes>) {
        let exchange = &self.exchange;
        let mut input = exchange.input();
        let (kind, data) = if after_body {
            if input.gone {
                (GONE, Bytes::new())
            } else {
                input.waits = true;
                (PENDING, Bytes::new())
            }
        } else if let Some(data) = input.chunks.pop_front() {
            exchange.room.notify_one();
            let last = input.ended && input.chunks.is_empty();
            (if last { LAST } else { CHUNK }, data)
        } else if input.ended {
            (LAST, Bytes::new())
        } else if input.gone {
            (GONE, Bytes::new())
        } else {
            input.waits = true;
            (PENDING, Bytes::new())
        };
        drop(input);
        (kind, PyBytes::new(py, &data))
    }

    /// ASGI `send(message)` for the HTTP scope: `TAKEN`, `HELD` (the head waits for its
    /// body) or `FULL` (wait for the wake, then `flush()`). Raises on a message out of
    /// order or malformed, as the ASGI specification asks.
    fn send(&mut self, message: &Bound<'_, PyAny>) -> PyResult<u8> {
        let py = message.py();
        let kind = message.get_item(intern!(py, "type"))?;
        let kind = kind.cast::<pyo3::types::PyString>()?.to_str()?;
        if self.complete {
            return Err(runtime_error(format!(
                "{kind} sent after the response was complete"
            )));
        }
        match kind {
            "http.response.start" => {
                if self.started {
                    return Err(runtime_error("http.response.start sent twice".into()));
                }
                self.started = true;
                let invalid = |m: String| PyValueError::new_err(m);
                let status: u16 = message.get_item(intern!(py, "status"))?.extract()?;
                let status = StatusCode::from_u16(status)
                    .ok()
                    .filter(|s| s.as_u16() >= 200)
                    .ok_or_else(|| invalid(format!("not a response status: {status}")))?;
                let mut headers = HeaderMap::new();
                if let Some(list) = field(message, intern!(py, "headers").as_any())? {
                    for item in list.try_iter()? {
                        let (name, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                            item?.extract()?;
                        let name = HeaderName::from_bytes(&slice_of(&name)?)
                            .map_err(|e| invalid(format!("header name: {e}")))?;
                        let value = HeaderValue::from_bytes(slice_of(&value)?.trim_ascii())
                            .map_err(|e| invalid(format!("value of {name}: {e}")))?;
                        headers.append(name, value);
                    }
                }
                self.held = Some((status, headers));
                Ok(HELD)
            }
            "http.response.body" => {
                if !self.started {
                    return Err(runtime_error(
                        "http.response.body before http.response.start".into(),
                    ));
                }
                let body = match field(message, intern!(py, "body").as_any())? {
                    Some(body) => bytes_of(&body)?,
                    None => Bytes::new(),
                };
                let more = match field(message, intern!(py, "more_body").as_any())? {
                    Some(more) => more.is_truthy()?,
                    None => false,
                };
                self.complete = !more;
                let event = self.after_head(Some(Out::Chunk(body, !more)));
                Ok(self.queue(event))
            }
            "http.response.pathsend" => {
                if !self.started {
                    return Err(runtime_error(
                        "http.response.pathsend before http.response.start".into(),
                    ));
                }
                let path: std::path::PathBuf = message.get_item(intern!(py, "path"))?.extract()?;
                if !path.is_absolute() {
                    return Err(PyValueError::new_err(
                        "http.response.pathsend needs an absolute path",
                    ));
                }
                self.complete = true;
                let file = std::fs::File::open(&path)?;
                let meta = file.metadata()?;
                if !meta.is_file() {
                    return Err(PyOSError::new_err(format!(
                        "http.response.pathsend: {} is not a regular file",
                        path.display()
                    )));
                }
                let event = self.after_head(Some(Out::File(FilePart {
                    file,
                    start: 0,
                    len: meta.len(),
                    last: true,
                })));
                Ok(self.queue(event))
            }
            "http.response.zerocopysend" => {
                if !self.started {
                    return Err(runtime_error(
                        "http.response.zerocopysend before http.response.start".into(),
                    ));
                }
                let part = descriptor_part(message)?;
                self.complete = part.last;
                let event = self.after_head(Some(Out::File(part)));
                Ok(self.queue(event))
            }
            other => Err(runtime_error(format!(
                "unknown ASGI message type {other:?}"
            ))),
        }
    }

    /// Sends the held head alone (the loop went round without a body for it).
    fn flush_head(&mut self) -> bool {
        if self.held.is_none() || !self.pending.is_empty() {
            return true;
        }
        let event = self.after_head(None);
        self.queue(event) == TAKEN
    }

    /// Retries the events the full queue did not take: True when all are taken (or the
    /// client is gone), False when it is still full (the request is woken when there is
    /// room).
    fn flush(&mut self) -> bool {
        let exchange = &self.exchange;
        while let Some(event) = self.pending.pop_front() {
            // Marked before trying, so a slot freed in between still wakes the sender.
            exchange.send_waits.store(true, Ordering::Release);
            match exchange.out.try_send(event) {
                Ok(reader) => {
                    exchange.send_waits.store(false, Ordering::Release);
                    if let Some(reader) = reader {
                        exchange.bridge.deliveries.wake(reader);
                    }
                }
                Err(Refused::Closed) => {
                    exchange.send_waits.store(false, Ordering::Release);
                    self.pending.clear();
                    return true;
                }
                Err(Refused::Full(event)) => {
                    self.pending.push_front(event);
                    return false;
                }
            }
        }
        true
    }

    /// The application returned (`raised` None) or raised: a response it did not
    /// complete is cut (or answered 500 when it had not started).
    fn finish(&mut self, py: Python<'_>, raised: &Bound<'_, PyAny>) {
        let exchange = Arc::clone(&self.exchange);
        if !raised.is_none() {
            let err = PyErr::from_value(raised.clone());
            tracing::error!(
                target: "servery::app",
                request = %format!("{} {}", exchange.head.method(), exchange.head.target()),
                traceback = %describe(py, &err),
                "the application raised"
            );
        }
        if self.complete && self.pending.is_empty() {
            // The last event is queued: the response ends on its own.
            return;
        }
        // A held head goes first (the response then is cut), then the failure; whatever
        // the full queue did not take is dropped, the failure ends the response anyway.
        let head = self.held.is_some().then(|| self.after_head(None));
        self.pending.clear();
        if let Some(reader) = exchange.out.send_last(head.into_iter().chain([Out::Fail])) {
            exchange.bridge.deliveries.wake(reader);
        }
    }
}

/// The part of a file an `http.response.zerocopysend` message names: `file` (a
/// descriptor, or an object with `fileno()`), from `offset` (else the descriptor's
/// position) for `count` bytes (else to the end; never past it). The descriptor is opened
/// anew through `/proc/self/fd`, so the server reads from a descriptor of its own: the
/// application may close its own once `send()` returns, as the extension allows.
fn descriptor_part(message: &Bound<'_, PyAny>) -> PyResult<FilePart> {
    let py = message.py();
    let given = |key: &Bound<'_, PyAny>| -> PyResult<Option<u64>> {
        match field(message, key)? {
            Some(v) if !v.is_none() => Ok(Some(v.extract()?)),
            _ => Ok(None),
        }
    };
    let file = message.get_item(intern!(py, "file"))?;
    let fd: i32 = match file.extract() {
        Ok(fd) => fd,
        Err(_) => file.call_method0(intern!(py, "fileno"))?.extract()?,
    };
    let start = match given(intern!(py, "offset").as_any())? {
        Some(offset) => offset,
        None => PyModule::import(py, intern!(py, "os"))?
            .call_method1(intern!(py, "lseek"), (fd, 0, 1))?
            .extract()?,
    };
    let count = given(intern!(py, "count").as_any())?;
    let last = match field(message, intern!(py, "more_body").as_any())? {
        Some(more) => !more.is_truthy()?,
        None => true,
    };
    let reopened = std::fs::File::open(format!("/proc/self/fd/{fd}"))?;
    if !reopened.metadata()?.is_file() {
        return Err(PyOSError::new_err(format!(
            "http.response.zerocopysend: descriptor {fd} is not a regular file"
        )));
    }
    let available = reopened.metadata()?.len().saturating_sub(start);
    Ok(FilePart {
        file: reopened,
        start,
        len: count.map_or(available, |count| count.min(available)),
        last,
    })
}

/// A header's name or value: borrowed from `bytes`, copied from another bytes-like object.
fn slice_of<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<std::borrow::Cow<'a, [u8]>> {
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(std::borrow::Cow::Borrowed(b.as_bytes()));
    }
    Ok(std::borrow::Cow::Owned(value.extract()?))
}

/// A body given as bytes (or any bytes-like object), without a copy through a
/// `Vec` for `bytes`.
fn bytes_of(value: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(Bytes::copy_from_slice(b.as_bytes()));
    }
    let v: Vec<u8> = value.extract()?;
    Ok(Bytes::from(v))
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    use tokio::sync::Notify;

    use super::*;
    use crate::app::Caller;
    use crate::app::python::asgi::{AsgiHead, Bridge, Inbox, Input};

    /// A call on a fresh exchange, and the receiving end of its response queue.
    fn call(runtime: &tokio::runtime::Runtime) -> (HttpCall, Arc<Exchange>) {
        let (_, wake) = UnixStream::pair().expect("socket pair");
        let bridge = Arc::new(Bridge {
            inbox: Mutex::new(Inbox::default()),
            wake,
            next: AtomicU64::new(1),
            repeated: Default::default(),
            deliveries: Default::default(),
        });
        let (parts, ()) = http::Request::get("/x")
            .body(())
            .expect("request")
            .into_parts();
        let exchange = Arc::new(Exchange {
            id: 1,
            head: AsgiHead::of(
                parts,
                Caller {
                    peer: None,
                    tls: false,
                },
            ),
            input: Mutex::new(Input {
                chunks: VecDeque::new(),
                ended: true,
                ..Input::default()
            }),
            room: Notify::new(),
            out: Default::default(),
            send_waits: AtomicBool::new(false),
            bridge,
            runtime: runtime.handle().clone(),
        });
        (HttpCall::new(Arc::clone(&exchange)), exchange)
    }

    /// Runs `script` with `call` bound to a fresh call: its result, and the events the
    /// call queued.
    fn run(script: &str) -> (PyResult<()>, Vec<Out>) {
        Python::initialize();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let (call, exchange) = call(&runtime);
        let result = Python::attach(|py| {
            let globals = pyo3::types::PyDict::new(py);
            globals.set_item("call", Bound::new(py, call)?)?;
            let code = std::ffi::CString::new(script).expect("script");
            py.run(&code, Some(&globals), None)
        });
        let mut got = Vec::new();
        while let Some(event) = exchange.out.try_recv() {
            got.push(event);
        }
        (result, got)
    }

    const START: &str = "{'type': 'http.response.start', 'status': 200, 'headers': [(b'content-type', b'text/plain')]}";

    #[test]
    fn a_complete_response_crosses_as_one_event() {
        let script = format!(
            "assert call.send({START}) == {HELD}\n\
             assert call.send({{'type': 'http.response.body', 'body': b'hello'}}) == {TAKEN}\n\
             call.flush_head()\n\
             call.finish(None)\n"
        );
        let (result, events) = run(&script);
        result.expect("the script ran");
        assert_eq!(events.len(), 1, "head and body as one event, nothing after");
        let Out::Head(head) = &events[0] else {
            panic!("the head first");
        };
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(head.headers["content-type"], "text/plain");
        assert!(
            matches!(&head.first, Some(Out::Chunk(b, true)) if b.as_ref() == b"hello"),
            "the body, last, rides with the head"
        );
    }

    #[test]
    fn a_head_without_a_body_yet_goes_alone_when_flushed_then_the_chunks() {
        let script = format!(
            "call.send({START})\n\
             call.flush_head()\n\
             call.send({{'type': 'http.response.body', 'body': b'a', 'more_body': True}})\n\
             call.send({{'type': 'http.response.body', 'body': b'b'}})\n\
             call.finish(None)\n"
        );
        let (result, events) = run(&script);
        result.expect("the script ran");
        assert!(
            matches!(&events[..], [Out::Head(h), Out::Chunk(a, false), Out::Chunk(b, true)]
                if h.first.is_none() && a.as_ref() == b"a" && b.as_ref() == b"b"),
            "head alone, then the chunks, and no failure after the last"
        );
    }

    #[test]
    fn an_unfinished_response_is_cut_and_misuse_raises() {
        let script = format!("call.send({START})\ncall.finish(None)\n");
        let (result, events) = run(&script);
        result.expect("the script ran");
        assert!(
            matches!(&events[..], [Out::Head(h), Out::Fail] if h.first.is_none()),
            "the held head, then the cut"
        );
        for (script, want) in [
            (
                "call.send({'type': 'http.response.body', 'body': b''})".to_owned(),
                "before http.response.start",
            ),
            (
                format!("call.send({START})\ncall.send({START})"),
                "sent twice",
            ),
            (
                format!(
                    "call.send({START})\ncall.send({{'type': 'http.response.body'}})\n\
                     call.send({{'type': 'http.response.body'}})"
                ),
                "after the response was complete",
            ),
            (
                "call.send({'type': 'http.response.nonsense'})".to_owned(),
                "unknown ASGI message",
            ),
            (
                "call.send({'type': 'http.response.start', 'status': 99})".to_owned(),
                "not a response status",
            ),
        ] {
            let (result, _) = run(&script);
            let err = result.expect_err(&script).to_string();
            assert!(err.contains(want), "{script}: {err}");
        }
    }
}

#[cfg(test)]
mod repeated_tests {
    use pyo3::prelude::*;

    use crate::app::python::asgi::LastServer;

    #[test]
    fn a_scopes_server_tuple_is_shared_while_it_stays_the_same() {
        Python::initialize();
        Python::attach(|py| {
            let last = LastServer::default();
            let a = last.get(py, "example.org", 8000).expect("tuple");
            assert!(
                a.is(last.get(py, "example.org", 8000).expect("tuple")),
                "a repeat made a new tuple"
            );
            let other_port = last.get(py, "example.org", 8001).expect("tuple");
            assert_eq!(
                other_port.extract::<(String, u16)>().expect("pair"),
                ("example.org".into(), 8001)
            );
            let other_host = last.get(py, "example.net", 8001).expect("tuple");
            assert_eq!(
                other_host.extract::<(String, u16)>().expect("pair"),
                ("example.net".into(), 8001)
            );
            assert!(!other_port.is(&other_host));
        });
    }
}
