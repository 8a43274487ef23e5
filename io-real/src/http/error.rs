//! Errors of the HTTP layer and their one mapping to a response.
//!
//! Bodies are short fixed texts: internal details (paths, OS errors) go to the log, never to
//! the peer.

use std::io;
use std::path::PathBuf;

use http::{HeaderValue, Response, StatusCode, header};

use super::body::{self, Body};
use super::dav::{DavError, xml};
use super::mime;
use super::path::PathError;
use super::policy;
use super::range;
use super::validate::MessageError;
use crate::write::WriteError;

/// Everything that can stop a request from being served normally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The request path was refused before touching the file system.
    #[error("bad request path: {0}")]
    BadPath(PathError),
    /// The request is malformed in some other way.
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// Authentication is required and the request's credentials are missing or wrong.
    #[error("unauthorized")]
    Unauthorized,
    /// The file exists but may not be served (permissions, symlink escape, not a regular file).
    #[error("forbidden")]
    Forbidden,
    /// A browser page from another origin tried to change the tree (decision 0022).
    #[error("cross-site request refused")]
    CrossSite,
    /// The request names a host this server does not answer for (`Host` or
    /// `:authority`; DNS rebinding, decision 0046).
    #[error("this server does not answer for that host name (see --allowed-host)")]
    Misdirected,
    /// A folder archive was refused: over its limits, or archives are off.
    #[error("archive refused: {0}")]
    Archive(super::page::archive::ArchiveError),
    /// Nothing to serve at this path (including hidden files).
    #[error("not found")]
    NotFound,
    /// The method is not one this site serves.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// A precondition header evaluated to false.
    #[error("precondition failed")]
    PreconditionFailed,
    /// A single `Range` starts past the end of a representation of `len` bytes.
    #[error("range not satisfiable (length {len})")]
    RangeNotSatisfiable {
        /// The complete length, reported in `Content-Range: bytes */len`.
        len: u64,
    },
    /// The worker cannot do the work right now (blocking pool shut down while draining).
    #[error("service unavailable")]
    Unavailable,
    /// An unexpected I/O failure; logged, reported to the peer as 500 without detail.
    #[error("internal I/O error: {0}")]
    Internal(#[source] io::Error),
    /// The request message breaks HTTP/1.1's Host or framing rules; the connection closes.
    #[error("bad request message: {0}")]
    Message(#[from] MessageError),
    /// An upload did not happen (`--upload`); see [`WriteError`] for each status.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A WebDAV request was refused (`--dav`); see [`DavError`] for each status.
    #[error(transparent)]
    Dav(#[from] DavError),
    /// The served root could not be opened when building the site.
    #[error("cannot open served root {}: {source}", root.display())]
    Root {
        /// The configured root.
        root: PathBuf,
        /// Why it could not be opened.
        #[source]
        source: io::Error,
    },
}

impl From<PathError> for HttpError {
    fn from(e: PathError) -> Self {
        match e {
            // Hidden files are indistinguishable from absent ones.
            PathError::Hidden => Self::NotFound,
            other => Self::BadPath(other),
        }
    }
}

impl HttpError {
    /// Classifies a file-system error met while resolving a peer-chosen path: the peer
    /// decides which paths we try, so "absent" and "refused" are its errors, not ours.
    pub fn from_io(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::NotFound
            | io::ErrorKind::NotADirectory
            | io::ErrorKind::InvalidFilename => Self::NotFound,
            // cap-std reports escapes from the root (e.g. through a symlink) as PermissionDenied.
            io::ErrorKind::PermissionDenied => Self::Forbidden,
            // Long work refused because its share of the blocking threads is full
            // (`long_work`): 503 with `Retry-After`.
            io::ErrorKind::ResourceBusy => Self::Unavailable,
            _ if is_symlink_loop(&e) => Self::NotFound,
            _ => Self::Internal(e),
        }
    }
}

#[cfg(unix)]
fn is_symlink_loop(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

#[cfg(not(unix))]
fn is_symlink_loop(_: &io::Error) -> bool {
    false
}

/// The allowed methods, for 405 and OPTIONS.
///
/// Every other method, known (`PUT`, `DELETE`) or not (`BREW`), gets 405 with this list
/// rather than 501 for unrecognised ones: RFC 9110 leaves the choice to the server, and one
/// answer that says exactly what works is more useful to a client than a distinction that
/// would need a registry of every method name.
pub const ALLOW: &str = "GET, HEAD, OPTIONS";

/// Maps an error to its response: status, a one-line text body and the headers the status
/// requires (`WWW-Authenticate` on 401, `Allow` on 405, `Content-Range` on 416,
/// `Retry-After` on 503).
pub fn error_response(err: &HttpError) -> Response<Body> {
    let status = match err {
        HttpError::BadPath(_) | HttpError::BadRequest(_) => StatusCode::BAD_REQUEST,
        HttpError::Unauthorized => StatusCode::UNAUTHORIZED,
        HttpError::Forbidden | HttpError::CrossSite | HttpError::Archive(_) => {
            StatusCode::FORBIDDEN
        }
        HttpError::Misdirected => StatusCode::MISDIRECTED_REQUEST,
        HttpError::NotFound => StatusCode::NOT_FOUND,
        HttpError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        HttpError::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
        HttpError::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
        HttpError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        HttpError::Internal(_) | HttpError::Root { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        HttpError::Message(MessageError::UnsupportedTransferCoding) => StatusCode::NOT_IMPLEMENTED,
        HttpError::Message(MessageError::ContentLengthTooLarge) => StatusCode::PAYLOAD_TOO_LARGE,
        HttpError::Message(_) => StatusCode::BAD_REQUEST,
        HttpError::Write(e) => write_status(e),
        HttpError::Dav(e) => dav_status(e),
    };
    if status.is_server_error() {
        tracing::error!(error = %err, "request failed");
    } else {
        tracing::debug!(error = %err, %status, "request refused");
    }
    if let HttpError::Dav(e) = err
        && let Some(condition) = dav_condition(e)
    {
        return dav_error_response(status, condition);
    }
    let text = error_text(err, status);
    let mut response = Response::new(body::full(text.clone()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(mime::GENERATED_PAGE_CSP),
    );
    match err {
        HttpError::MethodNotAllowed => {
            headers.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
        }
        HttpError::Unauthorized => {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(policy::CHALLENGE),
            );
        }
        HttpError::RangeNotSatisfiable { len } => {
            if let Ok(value) = HeaderValue::from_str(&range::unsatisfied_content_range(*len)) {
                headers.insert(header::CONTENT_RANGE, value);
            }
            headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        }
        HttpError::Unavailable => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        HttpError::Write(e) if e.is_unavailable() => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        HttpError::Message(_) | HttpError::Write(WriteError::BodyTimeout(_)) => {
            // The rest of the body is never read: the connection cannot carry another
            // request (RFC 9110 §15.5.9).
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        HttpError::Write(WriteError::RangeGap { have, .. }) if *have > 0 => {
            // What is held, so the client can resume without asking.
            if let Ok(value) = HeaderValue::from_str(&format!("bytes=0-{}", have - 1)) {
                headers.insert(header::RANGE, value);
            }
        }
        _ => {}
    }
    if let Some(fault) = StorageFault::of(err) {
        response.extensions_mut().insert(fault);
    }
    response
}

/// A write the file system refused, marked on its answer so the request's counting (one
/// place for every protocol, `super::pipeline`) counts it where an operator looks
/// (`servery_storage_faults_total`, decision 0133): the status alone cannot tell a full
/// disk's 507 from a quota's, or a failed fsync's 500 from any other 500.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StorageFault(pub(crate) usize);

impl StorageFault {
    fn of(err: &HttpError) -> Option<StorageFault> {
        use servery_core::request_stats::storage_fault::{IO, NO_SPACE};
        match err {
            HttpError::Write(WriteError::Io(e)) if crate::write::is_out_of_space(e) => {
                Some(StorageFault(NO_SPACE))
            }
            HttpError::Write(WriteError::Io(_)) => Some(StorageFault(IO)),
            _ => None,
        }
    }
}

/// The one-line body of an error's response.
fn error_text(err: &HttpError, status: StatusCode) -> String {
    let reason = status.canonical_reason().unwrap_or("Error");
    match err {
        // What exactly is wrong with the message: a fixed text, nothing from the peer.
        HttpError::Message(why) => format!("{} {reason}: {why}\n", status.as_u16()),
        HttpError::CrossSite | HttpError::Misdirected | HttpError::Archive(_) => {
            format!("{} {reason}: {err}\n", status.as_u16())
        }
        HttpError::Dav(why @ (DavError::ReadOnly | DavError::OverwriteOff)) => {
            format!("{} {reason}: {why}\n", status.as_u16())
        }
        // Fixed texts and numbers, nothing from the peer: what a client must change.
        HttpError::Write(
            why @ (WriteError::ConditionFalse
            | WriteError::PreconditionFailed
            | WriteError::PartialOverExisting
            | WriteError::RangeGap { .. }
            | WriteError::RangeMismatch { .. }),
        ) => format!("{} {reason}: {why}\n", status.as_u16()),
        // Why an upload was refused, for the page to show in words; a server-side failure
        // keeps its details in the log.
        HttpError::Write(why) if status.is_client_error() => {
            format!("{} {reason}: {why}\n", status.as_u16())
        }
        _ => format!("{} {reason}\n", status.as_u16()),
    }
}

/// [`error_response`] as the bytes of a whole HTTP/1.1 message, for the one answer servery
/// writes below hyper (a `Content-Length` hyper refuses before servery sees the request,
/// see `super::length_overflow`). Only for errors without a DAV body.
pub fn message_bytes(err: &HttpError) -> Vec<u8> {
    let response = error_response(err);
    let status = response.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_str(),
        status.canonical_reason().unwrap_or("Error")
    )
    .into_bytes();
    for (name, value) in response.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    out.extend_from_slice(format!("date: {date}\r\n\r\n").as_bytes());
    out.extend_from_slice(error_text(err, status).as_bytes());
    out
}

/// The status of a refused WebDAV request (RFC 4918 §8–§11).
fn dav_status(e: &DavError) -> StatusCode {
    match e {
        DavError::Locked(_) | DavError::ConflictingLock(_) => StatusCode::LOCKED,
        DavError::NoSuchLock => StatusCode::CONFLICT,
        DavError::ReadOnly | DavError::OverwriteOff | DavError::FiniteDepth | DavError::Overlap => {
            StatusCode::FORBIDDEN
        }
        DavError::Xml(_)
        | DavError::If(_)
        | DavError::Depth
        | DavError::Destination
        | DavError::OwnerTooLarge => StatusCode::BAD_REQUEST,
        DavError::IfFailed | DavError::DestinationExists => StatusCode::PRECONDITION_FAILED,
        DavError::OtherServer => StatusCode::BAD_GATEWAY,
        DavError::Exists => StatusCode::METHOD_NOT_ALLOWED,
        DavError::MkcolBody => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        DavError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        DavError::Conflict => StatusCode::CONFLICT,
    }
}

/// The DAV: precondition a refusal names in its XML body, and the hrefs it lists.
fn dav_condition(e: &DavError) -> Option<(&'static str, Vec<String>)> {
    let hrefs = |keys: &[String]| {
        keys.iter()
            .map(|k| super::dav::locks::key_href(k))
            .collect()
    };
    match e {
        DavError::Locked(roots) => Some(("lock-token-submitted", hrefs(roots))),
        DavError::ConflictingLock(roots) => Some(("no-conflicting-lock", hrefs(roots))),
        DavError::NoSuchLock => Some(("lock-token-matches-request-uri", Vec::new())),
        DavError::FiniteDepth => Some(("propfind-finite-depth", Vec::new())),
        _ => None,
    }
}

fn dav_error_response(
    status: StatusCode,
    (condition, hrefs): (&str, Vec<String>),
) -> Response<Body> {
    let hrefs: Vec<&str> = hrefs.iter().map(String::as_str).collect();
    super::dav::xml_response(status, xml::error_body(condition, &hrefs))
}

/// The status of a refused upload. Saturation and a broker that does not answer are the
/// service's momentary state (503, with `Retry-After`); a busy or existing target is a
/// conflict with the target's state (409), unless the client asked for creation only
/// (`If-None-Match: *`: 412).
fn write_status(e: &WriteError) -> StatusCode {
    match e {
        WriteError::Saturated
        | WriteError::Broker(_)
        | WriteError::LeaseLost
        | WriteError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        WriteError::Busy
        | WriteError::Exists
        | WriteError::PartialOverExisting
        | WriteError::NoParent
        | WriteError::IsDirectory
        | WriteError::NotADirectory
        | WriteError::RangeGap { .. }
        | WriteError::RangeMismatch { .. }
        | WriteError::Moved => StatusCode::CONFLICT,
        WriteError::PreconditionFailed | WriteError::ConditionFalse => {
            StatusCode::PRECONDITION_FAILED
        }
        WriteError::Locked => StatusCode::LOCKED,
        WriteError::TooLarge { .. } | WriteError::TooManyFiles { .. } => {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        WriteError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
        WriteError::Forbidden => StatusCode::FORBIDDEN,
        WriteError::Incomplete { .. } | WriteError::Body(_) | WriteError::BadRequest(_) => {
            StatusCode::BAD_REQUEST
        }
        WriteError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        // The file system is full (or the user's quota is): the request may succeed once
        // space is freed, and nothing was published (RFC 4918 §11.5).
        WriteError::Io(e) if crate::write::is_out_of_space(e) => StatusCode::INSUFFICIENT_STORAGE,
        WriteError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_and(err: HttpError, name: header::HeaderName) -> (u16, Option<String>) {
        let r = error_response(&err);
        let value = r
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        (r.status().as_u16(), value)
    }

    #[test]
    fn statuses_and_required_headers() {
        assert_eq!(
            status_and(HttpError::BadPath(PathError::EscapesRoot), header::ALLOW).0,
            400
        );
        assert_eq!(status_and(PathError::Hidden.into(), header::ALLOW).0, 404);
        assert_eq!(status_and(HttpError::Forbidden, header::ALLOW).0, 403);
        assert_eq!(
            status_and(HttpError::Unauthorized, header::WWW_AUTHENTICATE),
            (401, Some(policy::CHALLENGE.into()))
        );
        assert_eq!(
            status_and(HttpError::MethodNotAllowed, header::ALLOW),
            (405, Some(ALLOW.into()))
        );
        assert_eq!(
            status_and(HttpError::PreconditionFailed, header::ALLOW).0,
            412
        );
        assert_eq!(
            status_and(
                HttpError::RangeNotSatisfiable { len: 9 },
                header::CONTENT_RANGE
            ),
            (416, Some("bytes */9".into()))
        );
        assert_eq!(
            status_and(HttpError::Unavailable, header::RETRY_AFTER),
            (503, Some("1".into()))
        );
        assert_eq!(
            status_and(
                HttpError::Internal(io::Error::other("disk on fire")),
                header::ALLOW
            )
            .0,
            500
        );
    }

    #[test]
    fn what_the_file_system_refused_is_marked_as_a_storage_fault_by_kind() {
        use servery_core::request_stats::storage_fault::{IO, NO_SPACE};
        let errno = |e: rustix::io::Errno| io::Error::from_raw_os_error(e.raw_os_error());
        let fault = |err: HttpError| {
            error_response(&err)
                .extensions()
                .get::<StorageFault>()
                .copied()
        };
        assert_eq!(
            fault(HttpError::Write(WriteError::Io(errno(
                rustix::io::Errno::NOSPC
            )))),
            Some(StorageFault(NO_SPACE)),
            "storage-fault rule: a full file system is counted as no_space"
        );
        assert_eq!(
            fault(HttpError::Write(WriteError::Io(errno(
                rustix::io::Errno::IO
            )))),
            Some(StorageFault(IO)),
            "storage-fault rule: a failed write or fsync is counted as io"
        );
        assert_eq!(
            fault(HttpError::Internal(errno(rustix::io::Errno::IO))),
            None,
            "storage-fault rule: a failed read is no storage fault"
        );
        assert_eq!(fault(HttpError::Write(WriteError::Busy)), None);
    }

    #[test]
    fn upload_refusals() {
        use servery_core::broker::ClientError;
        let w = |e| status_and(HttpError::Write(e), header::RETRY_AFTER);
        assert_eq!(w(WriteError::Saturated), (503, Some("1".into())));
        assert_eq!(
            w(WriteError::Broker(ClientError::TimedOut)),
            (503, Some("1".into()))
        );
        assert_eq!(
            w(WriteError::Broker(ClientError::ParentGone)),
            (503, Some("1".into()))
        );
        assert_eq!(w(WriteError::Busy), (409, None));
        assert_eq!(w(WriteError::Exists), (409, None));
        assert_eq!(w(WriteError::PreconditionFailed), (412, None));
        assert_eq!(w(WriteError::ConditionFalse), (412, None));
        assert_eq!(w(WriteError::PartialOverExisting), (409, None));
        assert_eq!(w(WriteError::TooLarge { limit: 1 }), (413, None));
        assert_eq!(w(WriteError::UnsupportedMediaType), (415, None));
        assert_eq!(
            status_and(
                HttpError::Write(WriteError::RangeGap { start: 9, have: 5 }),
                header::RANGE
            ),
            (409, Some("bytes=0-4".into()))
        );
    }

    #[test]
    fn io_errors_are_classified() {
        let kind = |k| HttpError::from_io(io::Error::from(k));
        assert!(matches!(kind(io::ErrorKind::NotFound), HttpError::NotFound));
        assert!(matches!(
            kind(io::ErrorKind::PermissionDenied),
            HttpError::Forbidden
        ));
        assert!(matches!(kind(io::ErrorKind::Other), HttpError::Internal(_)));
        assert!(matches!(
            kind(io::ErrorKind::ResourceBusy),
            HttpError::Unavailable
        ));
    }

    #[test]
    fn a_full_file_system_is_507_and_the_rest_of_io_500() {
        let status = |e: io::Error| error_response(&HttpError::Write(WriteError::Io(e))).status();
        let errno = |n: rustix::io::Errno| io::Error::from_raw_os_error(n.raw_os_error());
        assert_eq!(status(errno(rustix::io::Errno::NOSPC)), 507);
        assert_eq!(status(errno(rustix::io::Errno::DQUOT)), 507);
        assert_eq!(status(errno(rustix::io::Errno::IO)), 500);
        assert_eq!(status(io::Error::other("x")), 500);
    }

    #[test]
    fn bodies_do_not_leak_details() {
        let r = error_response(&HttpError::Internal(io::Error::other("/secret/path")));
        let len = r
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        assert_eq!(
            len.as_deref(),
            Some("26"),
            "\"500 Internal Server Error\\n\""
        );
    }
}
