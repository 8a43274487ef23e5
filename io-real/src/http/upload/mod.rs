//! Uploads over HTTP (`--upload`): `PUT /path` writes one file (whole, or resumable with
//! `Content-Range`), and a `multipart/form-data` `POST` to a directory writes each file
//! part into it and answers `303 See Other` back to the listing.
//!
//! This module only speaks HTTP: it parses the request, decides how many bytes to
//! reserve, turns the body into a bounded [`ChunkSource`], and shapes the answer. The
//! write itself (resolve, reserve, lease, stream, publish, release) is
//! [`crate::write`]'s. Every answer, error or not, says which worker gave it
//! (`X-Servery-Worker`), which is how the tests show that two writers of one target went
//! through different processes.
//!
//! Nothing is read from the body before the reservation and the lease are held; a
//! refusal (saturation, a busy target, an existing file, a parent that does not answer)
//! is sent with the body unread, and hyper then closes the connection rather than read
//! what the client still sends.

mod length_hint;
mod mkdir;
pub mod multipart;

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::BodyExt;

use super::body::{self, Body};
use super::conditional;
use super::error::{HttpError, error_response};
use super::path::RequestPath;
use crate::worker::broker::BrokerHandle;
use crate::write::partial::{self, ChunkOutcome, ContentRange};
use crate::write::publish::{Published, Stored};
use crate::write::target::{self, check_name};
use crate::write::{
    ChunkSource, Grant, LockCheck, WriteError, WriteSettings, Writer, blocking, write_file,
};
use multipart::{Event, Parser};
use servery_core::precondition::Conditions;
use servery_core::upload_budget::first_reservation;

/// The response header naming the worker that handled an upload.
pub const WORKER_HEADER: &str = "x-servery-worker";

/// The allowed methods of a site that takes uploads, for `OPTIONS` and 405.
pub const ALLOW: &str = "GET, HEAD, OPTIONS, PUT, POST, MKCOL";

/// What a site needs to accept uploads: the settings and the worker's broker client.
#[derive(Debug, Clone)]
pub struct UploadConfig {
    pub settings: WriteSettings,
    pub broker: BrokerHandle,
}

/// The upload side of a site.
#[derive(Debug)]
pub struct Uploads {
    writer: Writer,
    show_hidden: bool,
    worker: HeaderValue,
}

/// The request body as an upload's content: counts every byte against `limit` (the
/// reserved bound: 413 beyond it), reports a body shorter than its `Content-Length`, and
/// ends the upload (408) when the body delivers nothing for `stall` — the reservation and
/// lease are then released by the write flow at once, long before the lease would expire.
struct BodySource<B> {
    body: B,
    read: u64,
    limit: u64,
    expected: Option<u64>,
    stall: Duration,
}

impl<B> BodySource<B> {
    fn new(body: B, limit: u64, expected: Option<u64>, stall: Duration) -> Self {
        BodySource {
            body,
            read: 0,
            limit,
            expected,
            stall,
        }
    }
}

impl<B> ChunkSource for BodySource<B>
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin,
    B::Error: Display,
{
    async fn next_chunk(&mut self) -> Option<Result<Bytes, WriteError>> {
        loop {
            let Ok(frame) = tokio::time::timeout(self.stall, self.body.frame()).await else {
                return Some(Err(WriteError::BodyTimeout(self.stall)));
            };
            match frame {
                None => {
                    return match self.expected {
                        Some(expected) if self.read < expected => {
                            Some(Err(WriteError::Incomplete {
                                received: self.read,
                                expected,
                            }))
                        }
                        _ => None,
                    };
                }
                Some(Err(e)) => return Some(Err(WriteError::Body(e.to_string()))),
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers
                    };
                    self.read += data.len() as u64;
                    if self.read > self.limit {
                        return Some(Err(WriteError::TooLarge { limit: self.limit }));
                    }
                    return Some(Ok(data));
                }
            }
        }
    }
}

/// A multipart body: the parser fed from the bounded body.
struct Form<B> {
    parser: Parser,
    body: BodySource<B>,
}

impl<B> Form<B>
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin,
    B::Error: Display,
{
    async fn next_event(&mut self) -> Result<Event, WriteError> {
        loop {
            if let Some(event) = self.parser.poll()? {
                return Ok(event);
            }
            match self.body.next_chunk().await {
                Some(Ok(bytes)) => self.parser.push(&bytes),
                Some(Err(e)) => return Err(e),
                None => return Err(WriteError::BadRequest("multipart body ends early")),
            }
        }
    }
}

/// The content of the current part of a [`Form`].
struct PartSource<'a, B>(&'a mut Form<B>);

impl<B> ChunkSource for PartSource<'_, B>
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin,
    B::Error: Display,
{
    async fn next_chunk(&mut self) -> Option<Result<Bytes, WriteError>> {
        match self.0.next_event().await {
            Ok(Event::Data(bytes)) => Some(Ok(bytes)),
            Ok(Event::PartEnd) => None,
            Ok(Event::Part(_) | Event::End) => {
                Some(Err(WriteError::BadRequest("malformed multipart body")))
            }
            Err(e) => Some(Err(e)),
        }
    }
}

impl Uploads {
    pub fn new(
        root: Arc<crate::served_root::LiveRoot>,
        config: UploadConfig,
        show_hidden: bool,
    ) -> Uploads {
        let worker = HeaderValue::from(config.settings.worker_id);
        Uploads {
            writer: Writer {
                root,
                broker: config.broker,
                settings: Arc::new(config.settings),
            },
            show_hidden,
            worker,
        }
    }

    /// How this site writes (shared with WebDAV's writes).
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Whether a request with `method` is an upload (or `MKCOL`, see [`mkdir`]).
    pub fn handles(method: &Method) -> bool {
        method == Method::PUT || method == Method::POST || method.as_str() == "MKCOL"
    }

    /// Answers one upload request.
    pub async fn handle<B>(&self, parts: &Parts, body: B) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Display,
    {
        let result = match parts.method.as_str() {
            "PUT" => self.put(parts, body, None).await,
            "POST" => self.post(parts, body).await,
            _ => {
                drop(body);
                return self.with_worker(match self.mkcol(parts).await {
                    Ok(response) => response,
                    Err(e) => error_response(&e),
                });
            }
        };
        let response = match result {
            Ok(response) => response,
            Err(e) => {
                if e.is_unavailable() {
                    tracing::warn!(path = parts.uri.path(), error = %e, "upload refused");
                }
                // A form posted by a browser without the script gets a page in words.
                super::page::error_page::respond(parts, &HttpError::Write(e))
            }
        };
        self.with_worker(response)
    }

    /// A WebDAV PUT of a whole file whose lock check rides on its lease request ([`LockCheck`]):
    /// answered like [`Uploads::handle`], except that a refused check comes back as
    /// [`WriteError::Locked`] for the WebDAV layer to explain.
    pub async fn put_checked<B>(
        &self,
        parts: &Parts,
        body: B,
        check: &LockCheck,
    ) -> Result<Response<Body>, WriteError>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Display,
    {
        let response = match self.put(parts, body, Some(check)).await {
            Ok(response) => response,
            Err(WriteError::Locked) => return Err(WriteError::Locked),
            Err(e) => {
                if e.is_unavailable() {
                    tracing::warn!(path = parts.uri.path(), error = %e, "upload refused");
                }
                error_response(&HttpError::Write(e))
            }
        };
        Ok(self.with_worker(response))
    }

    /// Says which worker answered.
    fn with_worker(&self, mut response: Response<Body>) -> Response<Body> {
        response
            .headers_mut()
            .insert(WORKER_HEADER, self.worker.clone());
        response
    }

    fn stall(&self) -> Duration {
        self.writer.settings.body_timeout
    }

    fn path(&self, parts: &Parts) -> Result<RequestPath, WriteError> {
        RequestPath::parse(parts.uri.path(), self.show_hidden).map_err(|e| {
            match HttpError::from(e) {
                HttpError::NotFound => WriteError::Forbidden,
                _ => WriteError::BadRequest("invalid request path"),
            }
        })
    }

    async fn put<B>(
        &self,
        parts: &Parts,
        body: B,
        check: Option<&LockCheck>,
    ) -> Result<Response<Body>, WriteError>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Display,
    {
        let path = self.path(parts)?;
        let Some(name) = path.file_name().filter(|_| !path.trailing_slash()) else {
            return Err(WriteError::IsDirectory);
        };
        check_name(name, self.show_hidden)?;
        let limit = self.writer.settings.max_upload_size;
        let length = content_length(&parts.headers)?;
        let none_match = if_none_match_star(&parts.headers);
        let range = match parts.headers.get(header::CONTENT_RANGE) {
            None => None,
            Some(value) => Some(
                value
                    .to_str()
                    .ok()
                    .and_then(ContentRange::parse)
                    .ok_or(WriteError::BadRequest("unusable Content-Range"))?,
            ),
        };
        if let Some(range) = range
            && range.total() > limit
        {
            return Err(WriteError::TooLarge { limit });
        }
        if let (None, Some(length)) = (range, length)
            && length > limit
        {
            return Err(WriteError::TooLarge { limit });
        }
        // Step 1, before anything is reserved.
        let root = self.writer.root.dir();
        let rel_dir = parent_of(&path);
        let file_name = name.to_owned();
        let target = blocking(move || target::resolve(&root, &rel_dir, &file_name)).await?;
        let location = parts.uri.path().to_owned();

        match range {
            None => {
                // A body without Content-Length reserves its client's hint or a first
                // step, and grows as it arrives (core's `upload_budget`, decision 0064).
                let budget =
                    first_reservation(length, length_hint::length_hint(&parts.headers), limit)
                        .map_err(|_| WriteError::TooLarge { limit })?;
                let mut reservation =
                    Grant::reserve_budget(&self.writer.broker, budget, limit).await?;
                let bytes = length.unwrap_or(limit);
                let mut source = BodySource::new(body, bytes, length, self.stall());
                let stored = write_file(
                    &self.writer,
                    &target,
                    &mut reservation,
                    none_match,
                    check,
                    &conditional::conditions(&parts.headers),
                    &mut source,
                )
                .await?;
                Ok(written_whole(stored, &location))
            }
            Some(ContentRange::Query { total }) => {
                let ttl = self.writer.settings.partial_ttl;
                let have = blocking(move || partial::held(&target, total, ttl)).await?;
                Ok(resume_incomplete(have))
            }
            Some(ContentRange::Chunk { start, end, total }) => {
                let len = end - start + 1;
                if length.is_some_and(|l| l != len) {
                    return Err(WriteError::BadRequest(
                        "Content-Length differs from the Content-Range",
                    ));
                }
                let mut source = BodySource::new(body, len, Some(len), self.stall());
                let outcome = partial::chunk(
                    &self.writer,
                    target,
                    (start, end, total),
                    none_match,
                    &conditional::conditions(&parts.headers),
                    &mut source,
                )
                .await;
                // A client that meant to change part of an existing file learns that
                // this is not what a Content-Range PUT does here.
                let outcome = match outcome {
                    Err(WriteError::Exists) => Err(WriteError::PartialOverExisting),
                    other => other,
                };
                match outcome? {
                    ChunkOutcome::Incomplete { have } => Ok(resume_incomplete(have)),
                    ChunkOutcome::Complete(published) => Ok(written(published, &location)),
                }
            }
        }
    }

    async fn post<B>(&self, parts: &Parts, body: B) -> Result<Response<Body>, WriteError>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Display,
    {
        let path = self.path(parts)?;
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .ok_or(WriteError::UnsupportedMediaType)?;
        let parser = Parser::new(&multipart::boundary(content_type)?)?;
        let limit = self.writer.settings.max_upload_size;
        let length = content_length(&parts.headers)?;
        if length.is_some_and(|l| l > limit) {
            return Err(WriteError::TooLarge { limit });
        }
        // Step 1 for the directory every file goes to.
        let root = self.writer.root.dir();
        let rel_dir = path.relative();
        let dir_check = rel_dir.clone();
        blocking(move || match root.metadata(&dir_check) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => Err(WriteError::NotADirectory),
            Err(e) => Err(WriteError::from_resolve(e)),
        })
        .await?;
        // One reservation for the whole form, taken before a byte of it is read: a form
        // that gives its length reserves that (framing included); one sent chunked, as
        // a chunked PUT, a first step that grows before each file's bytes outrun it
        // (core's `upload_budget`, decision 0064), not the whole --max-upload-size.
        let budget =
            first_reservation(length, None, limit).map_err(|_| WriteError::TooLarge { limit })?;
        let mut reservation = Grant::reserve_budget(&self.writer.broker, budget, limit).await?;
        let bytes = length.unwrap_or(limit);
        let mut form = Form {
            parser,
            body: BodySource::new(body, bytes, length, self.stall()),
        };
        let max_files = self.writer.settings.max_upload_files;
        let mut files = 0;
        loop {
            match form.next_event().await? {
                Event::End => break,
                Event::Part(headers) => {
                    let Some(filename) = headers.filename.filter(|f| !f.is_empty()) else {
                        // A plain field (or an empty file input): read past it.
                        while !matches!(form.next_event().await?, Event::PartEnd) {}
                        continue;
                    };
                    if files >= max_files {
                        return Err(WriteError::TooManyFiles { limit: max_files });
                    }
                    let name = multipart::basename(&filename).to_owned();
                    check_name(&name, self.show_hidden)?;
                    let root = self.writer.root.dir();
                    let rel = rel_dir.clone();
                    let target = blocking(move || target::resolve(&root, &rel, &name)).await?;
                    // Files are published one by one, each under its own lease; a
                    // failure leaves the earlier ones in place and answers the failure.
                    write_file(
                        &self.writer,
                        &target,
                        &mut reservation,
                        false,
                        None,
                        &Conditions::default(),
                        &mut PartSource(&mut form),
                    )
                    .await?;
                    files += 1;
                }
                Event::Data(_) | Event::PartEnd => {
                    return Err(WriteError::BadRequest("malformed multipart body"));
                }
            }
        }
        if files == 0 {
            return Err(WriteError::BadRequest("the form holds no file"));
        }
        Response::builder()
            .status(StatusCode::SEE_OTHER)
            .header(header::LOCATION, path.dir_href())
            .header(header::CONTENT_LENGTH, 0)
            .body(body::empty())
            .map_err(|e| WriteError::Io(std::io::Error::other(e)))
    }
}

/// The parent directory of a file path, relative to the root.
fn parent_of(path: &RequestPath) -> PathBuf {
    let segments = path.segments();
    let dir: PathBuf = segments[..segments.len().saturating_sub(1)]
        .iter()
        .collect();
    if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    }
}

fn content_length(headers: &HeaderMap) -> Result<Option<u64>, WriteError> {
    match headers.get(header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .map(Some)
            .ok_or(WriteError::BadRequest("invalid Content-Length")),
    }
}

/// `If-None-Match: *`: create only, never replace.
fn if_none_match_star(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim() == "*")
}

/// [`written`] for a file written whole from one request's body: with the stored file's
/// `ETag` and `Last-Modified` (RFC 9110 §9.3.4 allows them when the body was stored as
/// sent), so a client can make its next write conditional on the version it wrote
/// (the directory page's editor does) without a read that another write could precede.
fn written_whole(stored: Stored, location: &str) -> Response<Body> {
    let mut response = written(stored.published, location);
    if let Some(meta) = &stored.meta {
        let validators = conditional::Validators::from_metadata(meta);
        let headers = response.headers_mut();
        headers.insert(header::ETAG, validators.etag());
        headers.insert(header::LAST_MODIFIED, validators.last_modified());
    }
    response
}

fn written(published: Published, location: &str) -> Response<Body> {
    let mut response = Response::new(body::empty());
    match published {
        Published::Created => {
            *response.status_mut() = StatusCode::CREATED;
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
            if let Ok(location) = HeaderValue::from_str(location) {
                headers.insert(header::LOCATION, location);
            }
        }
        // 204 carries no Content-Length (RFC 9110 §8.6).
        Published::Replaced => *response.status_mut() = StatusCode::NO_CONTENT,
    }
    response
}

/// `308` with the bytes held, the resumable-upload convention: `Range: bytes=0-N`, or no
/// `Range` when nothing is held.
fn resume_incomplete(have: u64) -> Response<Body> {
    let mut response = Response::new(body::empty());
    *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
    if have > 0
        && let Ok(value) = HeaderValue::from_str(&format!("bytes=0-{}", have - 1))
    {
        headers.insert(header::RANGE, value);
    }
    response
}
