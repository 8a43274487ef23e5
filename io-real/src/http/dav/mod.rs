//! WebDAV classes 1 and 2 (RFC 4918) over the served root (`--dav`).
//!
//! Reads (PROPFIND, LOCK of an existing resource, UNLOCK) work on any share; writes (PUT,
//! DELETE, MKCOL, COPY, MOVE, PROPPATCH) need `--upload` and otherwise get 403. Locks live
//! in the parent's broker, never here ([`locks`]); every write is checked against them
//! and against the `If` header first ([`Dav::preconditions`]). Writes hold the broker's
//! target lease like an upload, and the tree operations never show half a result
//! ([`tree`]). Dead properties are kept beside their resource ([`props`]).

pub mod args;
pub mod locks;
mod methods;
pub mod propfind;
mod propfind_stream;
pub mod props;
pub mod resource;
pub mod tree;
mod tree_run;
pub mod xml;
pub mod xml_write;

pub use tree_run::TreeKill;

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::BodyExt;
use servery_core::LeaseId;

use super::body::{self, Body};
use super::error::{HttpError, error_response};
use super::path::RequestPath;
use super::upload::{Uploads, WORKER_HEADER};
use crate::worker::broker::BrokerHandle;
use crate::write::{LockCheck, WriteError, Writer};
use locks::Locks;
use resource::DavPath;
use servery_core::dav_lock::{self, IfCheck, IfStep, Subject, Write, reach};
use servery_core::proto::MAX_SUBMITTED_TOKENS;

/// Every method a WebDAV share answers, for `Allow`.
pub const ALLOW: &str =
    "GET, HEAD, OPTIONS, PUT, POST, DELETE, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK";

/// Request bodies WebDAV methods read whole (PROPFIND, PROPPATCH, LOCK) may be this large.
pub const MAX_XML_BODY: usize = 1024 * 1024;

/// Why a WebDAV request was refused; statuses and bodies are `http::error`'s.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DavError {
    /// Writing would break locks whose tokens were not submitted: 423, naming their roots.
    #[error("locked")]
    Locked(Vec<String>),
    /// A new lock conflicts with one already held: 423.
    #[error("a conflicting lock is held")]
    ConflictingLock(Vec<String>),
    /// UNLOCK or a refresh named a token that is no lock on this resource: 409.
    #[error("no such lock on this resource")]
    NoSuchLock,
    /// The owner text of a LOCK is too large to keep: 400.
    #[error("the lock owner is too large")]
    OwnerTooLarge,
    /// A write method on a share without `--upload`: 403.
    #[error("this share is read-only")]
    ReadOnly,
    /// Deleting or replacing needs `--allow-overwrite`: 403.
    #[error("deleting or replacing needs --allow-overwrite")]
    OverwriteOff,
    /// PROPFIND Depth infinity over more resources than the share answers for: 403.
    #[error("PROPFIND with Depth infinity reaches too many resources")]
    FiniteDepth,
    /// The request body is not the XML the method takes: 400.
    #[error("bad XML body: {0}")]
    Xml(#[from] xml::XmlError),
    /// The `If` header does not parse: 400.
    #[error("bad If header: {0}")]
    If(#[from] dav_lock::IfError),
    /// The `If` header evaluated false: 412.
    #[error("the If header's condition is false")]
    IfFailed,
    /// A `Depth` this method does not take: 400.
    #[error("unsupported Depth")]
    Depth,
    /// `Destination` missing or malformed: 400.
    #[error("missing or malformed Destination")]
    Destination,
    /// `Destination` names another server: 502.
    #[error("Destination is on another server")]
    OtherServer,
    /// Source and destination are the same resource, or one contains the other: 403.
    #[error("source and destination overlap")]
    Overlap,
    /// `Overwrite: F` and the destination exists: 412.
    #[error("the destination exists (Overwrite: F)")]
    DestinationExists,
    /// MKCOL where something exists: 405.
    #[error("the resource exists")]
    Exists,
    /// MKCOL with a body: 415.
    #[error("MKCOL takes no body")]
    MkcolBody,
    /// The request body is larger than the method reads: 413.
    #[error("the request body is too large")]
    BodyTooLarge,
    /// The parent collection does not exist: 409.
    #[error("the parent collection does not exist")]
    Conflict,
}

/// The WebDAV side of a site.
#[derive(Debug)]
pub struct Dav {
    root: Arc<crate::served_root::LiveRoot>,
    locks: Locks,
    /// `None` on a read-only share.
    writer: Option<Writer>,
    show_hidden: bool,
    /// Whether the site compresses (PROPFIND answers are then encoded as the client
    /// accepts and vary on `Accept-Encoding`).
    compress: bool,
    /// PROPFIND Depth infinity answers for at most this many resources.
    max_propfind_entries: usize,
    body_timeout: Duration,
    worker: HeaderValue,
    /// A test fault: abort before this step of a tree request (`None` outside tests).
    tree_kill: Option<TreeKill>,
    /// A test fault: abort once a LOCK is granted, before answering it.
    kill_after_lock_grant: bool,
}

/// What a share needs for WebDAV.
#[derive(Debug, Clone)]
pub struct DavConfig {
    pub broker: BrokerHandle,
    pub max_propfind_entries: usize,
    pub worker_id: u64,
    /// `SERVERY_TEST_FAULT=kill-before-tree-step=…` (builds with the `test-hooks`
    /// feature): the worker aborts just before this step of a tree request.
    pub tree_kill: Option<TreeKill>,
    /// `SERVERY_TEST_FAULT=kill-after-lock-grant` (builds with the `test-hooks`
    /// feature): the worker aborts once the broker granted a LOCK, before the answer.
    pub kill_after_lock_grant: bool,
}

impl Dav {
    pub fn new(
        root: Arc<crate::served_root::LiveRoot>,
        config: DavConfig,
        writer: Option<Writer>,
        show_hidden: bool,
        compress: bool,
        body_timeout: Duration,
    ) -> Dav {
        Dav {
            root,
            locks: Locks::new(config.broker),
            writer,
            show_hidden,
            compress,
            max_propfind_entries: config.max_propfind_entries.max(1),
            body_timeout,
            worker: HeaderValue::from(config.worker_id),
            tree_kill: config.tree_kill,
            kill_after_lock_grant: config.kill_after_lock_grant,
        }
    }

    /// Whether this layer answers `method` (GET and HEAD stay with the file server).
    pub fn handles(method: &Method) -> bool {
        matches!(
            method.as_str(),
            "OPTIONS"
                | "PUT"
                | "POST"
                | "DELETE"
                | "PROPFIND"
                | "PROPPATCH"
                | "MKCOL"
                | "COPY"
                | "MOVE"
                | "LOCK"
                | "UNLOCK"
        )
    }

    /// Answers one WebDAV request; `uploads` takes the PUT and POST bodies once the locks
    /// allow them.
    pub async fn handle<B>(
        &self,
        parts: &Parts,
        body: B,
        uploads: Option<&Uploads>,
    ) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Display,
    {
        let result = self.dispatch(parts, body, uploads).await;
        let mut response = match result {
            Ok(response) => response,
            Err(e) => error_response(&e),
        };
        let headers = response.headers_mut();
        headers.insert(WORKER_HEADER, self.worker.clone());
        if headers.contains_key(header::ALLOW) {
            headers.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
        }
        response
    }

    async fn dispatch<B>(
        &self,
        parts: &Parts,
        body: B,
        uploads: Option<&Uploads>,
    ) -> Result<Response<Body>, HttpError>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Display,
    {
        // `OPTIONS *` asks about the server, not a resource (RFC 9110 §9.3.7).
        if parts.method == Method::OPTIONS && parts.uri.path() == "*" {
            return Ok(options(self.writer.is_some()));
        }
        let request_path = RequestPath::parse(parts.uri.path(), self.show_hidden)?;
        let path = DavPath::from_request(&request_path);
        match parts.method.as_str() {
            "OPTIONS" => Ok(options(self.writer.is_some())),
            "PROPFIND" => {
                let xml = self.read_xml(body).await?;
                self.propfind(parts, &path, &xml).await
            }
            "LOCK" => {
                let xml = self.read_xml(body).await?;
                self.lock(parts, &path, &xml).await
            }
            "UNLOCK" => self.unlock(parts, &path).await,
            method => {
                let Some(writer) = &self.writer else {
                    return Err(HttpError::Dav(DavError::ReadOnly));
                };
                match method {
                    "PUT" | "POST" => {
                        let mut seen = self.locks.seen();
                        let submitted = self.preconditions(parts, &path, &mut seen).await?;
                        let uploads = uploads.ok_or(HttpError::Dav(DavError::ReadOnly))?;
                        if method == "PUT"
                            && !parts.headers.contains_key(header::CONTENT_RANGE)
                            && submitted.len() <= MAX_SUBMITTED_TOKENS
                        {
                            // The lock check rides on the target lease: one round trip.
                            let check = LockCheck {
                                resource: path.resource(),
                                reach: reach::MEMBER,
                                submitted: submitted.clone(),
                            };
                            return match uploads.put_checked(parts, body, &check).await {
                                Ok(response) => Ok(response),
                                // Refused: one query more names the locks for the 423.
                                Err(_) => {
                                    match seen.require(&path, reach::MEMBER, &submitted).await {
                                        Err(e) => Err(e),
                                        Ok(()) => Err(HttpError::Dav(DavError::Locked(Vec::new()))),
                                    }
                                }
                            };
                        }
                        let resource = path.resource();
                        let write = if method == "PUT" {
                            Write::Put(&resource)
                        } else {
                            // A form writes members of the collection it is posted to,
                            // named only in its body: every lock in there counts.
                            Write::Post(&resource)
                        };
                        seen.require_all(write, &submitted).await?;
                        Ok(uploads.handle(parts, body).await)
                    }
                    "PROPPATCH" => {
                        let xml = self.read_xml(body).await?;
                        self.proppatch(parts, &path, &xml, writer).await
                    }
                    "MKCOL" => {
                        let has_body = self.has_body(parts, body).await?;
                        self.mkcol(parts, &path, has_body, writer).await
                    }
                    "DELETE" => {
                        drop(body);
                        self.delete(parts, &path, writer).await
                    }
                    "COPY" | "MOVE" => {
                        drop(body);
                        self.copy_move(parts, &path, method == "MOVE", writer).await
                    }
                    _ => Err(HttpError::MethodNotAllowed),
                }
            }
        }
    }

    /// Reads a whole XML body, bounded in size and by the body timeout.
    async fn read_xml<B>(&self, mut body: B) -> Result<Bytes, HttpError>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Display,
    {
        let mut buf = BytesMut::new();
        loop {
            let frame = tokio::time::timeout(self.body_timeout, body.frame())
                .await
                .map_err(|_| HttpError::Write(WriteError::BodyTimeout(self.body_timeout)))?;
            match frame {
                None => return Ok(buf.freeze()),
                Some(Err(e)) => return Err(HttpError::Write(WriteError::Body(e.to_string()))),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if buf.len() + data.len() > MAX_XML_BODY {
                            return Err(HttpError::Dav(DavError::BodyTooLarge));
                        }
                        buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// Whether a request that takes no body has one (MKCOL: 415).
    async fn has_body<B>(&self, parts: &Parts, body: B) -> Result<bool, HttpError>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Display,
    {
        let announced = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if announced.is_some_and(|n| n > 0) {
            return Ok(true);
        }
        if announced == Some(0) || body.is_end_stream() {
            return Ok(false);
        }
        Ok(!self.read_xml(body).await?.is_empty())
    }

    /// Runs the core's `If` check (400 when malformed, 412 when false) and returns the
    /// lock tokens the header submits; the broker answers it got stay in `seen` for the
    /// lock check that follows.
    async fn preconditions(
        &self,
        parts: &Parts,
        path: &DavPath,
        seen: &mut locks::Seen<'_>,
    ) -> Result<Vec<LeaseId>, HttpError> {
        let value = joined(&parts.headers, "if");
        let views = std::mem::take(seen.views_mut());
        let mut check = IfCheck::new(value.as_deref()).with_views(views);
        let result = loop {
            match check.next_step() {
                IfStep::Inspect(Subject::Request) => {
                    let etag = self.etag_of(path).await?;
                    check.inspected(Some(path.resource()), etag);
                }
                IfStep::Inspect(Subject::Tag(tag)) => match tag_path(&tag, self.show_hidden) {
                    Some(tagged) => {
                        let etag = self.etag_of(&tagged).await?;
                        check.inspected(Some(tagged.resource()), etag);
                    }
                    None => check.inspected(None, None),
                },
                IfStep::Query(key) => {
                    let locks = self.locks.around(&key).await?;
                    check.answered(key, locks);
                }
                IfStep::Done(result) => break result,
            }
        };
        *seen.views_mut() = check.into_views();
        result.map_err(HttpError::from)
    }

    /// The current ETag of what is at `path`, as responses send it; `None` when nothing is.
    async fn etag_of(&self, path: &DavPath) -> Result<Option<String>, HttpError> {
        let root = self.root.dir();
        let rel = path.rel();
        let meta =
            blocking(move || resource::stat_opt(&root, &rel).map_err(HttpError::Internal)).await?;
        Ok(meta.map(|meta| {
            String::from_utf8_lossy(resource::validators(&meta).etag().as_bytes()).into_owned()
        }))
    }
}

/// The path an `If` tag or a `Destination` names: an absolute URI's path, or an absolute
/// path. `None` when it names nothing servery serves.
fn tag_path(tag: &str, show_hidden: bool) -> Option<DavPath> {
    let path = uri_path(tag)?;
    RequestPath::parse(path, show_hidden)
        .ok()
        .map(|p| DavPath::from_request(&p))
}

/// The path of an absolute URI or absolute path, without query or fragment.
fn uri_path(uri: &str) -> Option<&str> {
    let path = if uri.starts_with('/') {
        uri
    } else {
        let (_, rest) = uri.split_once("://")?;
        &rest[rest.find('/')?..]
    };
    Some(path.split(['?', '#']).next().unwrap_or(path))
}

/// The authority (`host[:port]`) of an absolute URI.
fn uri_authority(uri: &str) -> Option<&str> {
    let (_, rest) = uri.split_once("://")?;
    Some(rest.split(['/', '?', '#']).next().unwrap_or(rest))
}

fn joined(headers: &HeaderMap, name: &str) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join(" "))
}

fn single(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
}

/// `OPTIONS`: the WebDAV classes and every method.
fn options(writable: bool) -> Response<Body> {
    let mut response = Response::new(body::empty());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert("dav", HeaderValue::from_static("1, 2"));
    // Windows' WebDAV redirector looks for this before it speaks DAV.
    headers.insert("ms-author-via", HeaderValue::from_static("DAV"));
    headers.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
    if !writable {
        headers.insert(
            "x-servery-share",
            HeaderValue::from_static("read-only: writes need --upload"),
        );
    }
    response
}

/// Runs file-system work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, HttpError> + Send + 'static,
) -> Result<T, HttpError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) if e.is_cancelled() => Err(HttpError::Unavailable),
        Err(e) => Err(HttpError::Internal(std::io::Error::other(e))),
    }
}

/// A 207 Multi-Status response around `xml`.
fn multistatus(xml: String) -> Response<Body> {
    xml_response(StatusCode::MULTI_STATUS, xml)
}

/// A 207 Multi-Status response around `xml`, encoded in the first of `codings` that
/// gains (a PROPFIND answer of a large tree is mostly repeated markup: 10:1 and more);
/// `vary` when the site compresses at all.
fn encoded_multistatus(
    xml: String,
    codings: &[crate::http::compress::Coding],
    vary: bool,
) -> Response<Body> {
    let (coding, bytes) = crate::http::page::response::encode(xml, codings);
    let mut response = xml_response(StatusCode::MULTI_STATUS, bytes);
    let headers = response.headers_mut();
    if let Some(coding) = coding {
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(coding.token()),
        );
    }
    if vary {
        headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    response
}

/// An XML body (a WebDAV answer or error, or such an answer encoded) with its status.
pub(crate) fn xml_response(status: StatusCode, xml: impl Into<Bytes>) -> Response<Body> {
    let xml: Bytes = xml.into();
    let len = xml.len();
    let mut response = Response::new(body::full(xml));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml; charset=utf-8"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_operations_failed_step_is_a_storage_fault() {
        use crate::http::error::{StorageFault, error_response};
        use servery_core::request_stats::storage_fault::IO;
        let eio = std::io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error());
        let response = error_response(&methods::io_error(eio));
        assert_eq!(response.status(), 500);
        assert_eq!(
            response.extensions().get::<StorageFault>(),
            Some(&StorageFault(IO)),
            "storage-fault rule: a WebDAV tree operation's failed step (MKCOL, COPY, MOVE, DELETE) is counted as io"
        );
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(error_response(&methods::io_error(missing)).status(), 404);
    }

    #[test]
    fn uris_and_paths() {
        assert_eq!(uri_path("http://h:1/a/b?q#f"), Some("/a/b"));
        assert_eq!(uri_path("/a%20b"), Some("/a%20b"));
        assert_eq!(uri_path("http://h"), None);
        assert_eq!(uri_path("a/b"), None);
        assert_eq!(uri_authority("https://h:8/a"), Some("h:8"));
        assert_eq!(uri_authority("/a"), None);
        assert_eq!(
            tag_path("http://h/a/../b", false).map(|p| p.resource()),
            Some("/b".into())
        );
        assert_eq!(tag_path("http://h/.git", false), None);
    }
}
