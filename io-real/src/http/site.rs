//! The served site: one root directory, resolved through a capability handle.
//!
//! [`Site::handle`] turns a request into a response. The planning (path, preconditions,
//! range, listing format) is delegated to pure functions in sibling modules; this module
//! does only the file-system work those plans need, always on tokio's blocking pool so a
//! slow disk never stalls the async threads that serve other connections.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use tokio::runtime::Handle;

use super::body::{self, Body};
use super::conditional::{self, Precondition, Validators};
use super::error::{ALLOW, HttpError, error_response};
use super::listing::{self, Entry};
use super::mime;
use super::path::{RequestPath, is_hidden};
use super::range::{self, RangeDecision};

/// Files up to this size are read whole while opening them (one blocking hop, one read);
/// larger ones are streamed in [`body::CHUNK_SIZE`] chunks.
pub const SMALL_FILE_MAX: u64 = 64 * 1024;

/// What to serve and how.
#[derive(Debug, Clone)]
pub struct SiteConfig {
    /// The directory served at `/`.
    pub root: PathBuf,
    /// Serve and list dot-files (names starting with `.`).
    pub show_hidden: bool,
}

/// A site ready to answer requests; build once per worker and share behind an `Arc`.
#[derive(Debug)]
pub struct Site {
    /// Every path is resolved beneath this handle; see [`super::path`] for why.
    root: Arc<Dir>,
    show_hidden: bool,
}

impl Site {
    /// Opens the root directory. This is the only use of ambient authority: everything
    /// served afterwards is reached through the returned handle.
    pub fn open(config: SiteConfig) -> Result<Self, HttpError> {
        let root = Dir::open_ambient_dir(&config.root, ambient_authority()).map_err(|source| {
            HttpError::Root {
                root: config.root.clone(),
                source,
            }
        })?;
        Ok(Self {
            root: Arc::new(root),
            show_hidden: config.show_hidden,
        })
    }

    /// Answers one request. Never fails: every error becomes its status response.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        // Content on GET/HEAD/OPTIONS has no meaning here and is never read; dropping it
        // before the first await keeps the handler future free of the body type.
        drop(body);
        let mut response = match self.respond(&parts).await {
            Ok(response) => response,
            Err(err) => error_response(&err),
        };
        mime::add_security_headers(response.headers_mut());
        if parts.method == Method::HEAD {
            // Headers (including Content-Length) stay as a GET would send them.
            *response.body_mut() = body::empty();
        }
        response
    }

    async fn respond(&self, parts: &Parts) -> Result<Response<Body>, HttpError> {
        match parts.method {
            Method::GET | Method::HEAD => {}
            Method::OPTIONS => return options(),
            _ => return Err(HttpError::MethodNotAllowed),
        }
        let path = RequestPath::parse(parts.uri.path(), self.show_hidden)?;
        let want_body = parts.method == Method::GET;
        let runtime = Handle::try_current().map_err(|_| HttpError::Unavailable)?;
        let lookup = Lookup {
            root: Arc::clone(&self.root),
            path: path.clone(),
            show_hidden: self.show_hidden,
            read_small: want_body,
        };
        let found = match runtime.spawn_blocking(move || lookup.run()).await {
            Ok(found) => found?,
            Err(e) if e.is_cancelled() => return Err(HttpError::Unavailable),
            Err(e) => return Err(HttpError::Internal(io::Error::other(e))),
        };
        match found {
            Found::NeedsSlash => redirect_to_dir(&path, parts.uri.query()),
            Found::File(file) => file_response(parts, file, want_body, runtime),
            Found::Listing(entries) => listing_response(parts, &path, entries, want_body),
        }
    }
}

/// The blocking half of a request: everything that touches the file system.
struct Lookup {
    root: Arc<Dir>,
    path: RequestPath,
    show_hidden: bool,
    read_small: bool,
}

enum Found {
    File(OpenFile),
    NeedsSlash,
    Listing(Vec<Entry>),
}

struct OpenFile {
    file: File,
    validators: Validators,
    len: u64,
    /// The name that decides the content type (`index.html` for directory indexes).
    name: String,
    /// The whole content, for small files on GET.
    small: Option<Bytes>,
}

impl Lookup {
    fn run(self) -> Result<Found, HttpError> {
        let rel = self.path.relative();
        // Follows symlinks, but only beneath the root.
        let meta = self.root.metadata(&rel).map_err(HttpError::from_io)?;
        if meta.is_dir() {
            if !self.path.trailing_slash() {
                return Ok(Found::NeedsSlash);
            }
            // Only a regular file counts as an index; anything else (absent, a directory,
            // a link out of the root) leaves the directory to be listed.
            let index = rel.join("index.html");
            if self.root.metadata(&index).is_ok_and(|m| m.is_file()) {
                return open_regular(&self.root, &index, "index.html", self.read_small)
                    .map(Found::File);
            }
            return list(&self.root, &rel, self.show_hidden).map(Found::Listing);
        }
        // `/file.txt/` names a directory that does not exist.
        if self.path.trailing_slash() {
            return Err(HttpError::NotFound);
        }
        let name = self.path.file_name().unwrap_or_default().to_owned();
        open_regular(&self.root, &rel, &name, self.read_small).map(Found::File)
    }
}

fn open_regular(
    root: &Dir,
    rel: &Path,
    name: &str,
    read_small: bool,
) -> Result<OpenFile, HttpError> {
    let mut options = OpenOptions::new();
    options.read(true);
    // A FIFO swapped in after the caller's stat would block open() forever; with
    // O_NONBLOCK it opens at once and is refused below. Regular files ignore the flag.
    #[cfg(unix)]
    cap_std::fs::OpenOptionsExt::custom_flags(
        &mut options,
        rustix::fs::OFlags::NONBLOCK.bits() as i32,
    );
    let file = root
        .open_with(rel, &options)
        .map_err(HttpError::from_io)?
        .into_std();
    // fstat on the open file: the validators describe exactly what we serve.
    let meta = file.metadata().map_err(HttpError::Internal)?;
    if !meta.is_file() {
        return Err(HttpError::Forbidden);
    }
    let small = if read_small && meta.len() <= SMALL_FILE_MAX {
        let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        (&file)
            .take(meta.len())
            .read_to_end(&mut buf)
            .map_err(HttpError::Internal)?;
        if buf.len() as u64 != meta.len() {
            // Being rewritten right now; the validators would not describe these bytes.
            return Err(HttpError::Unavailable);
        }
        Some(Bytes::from(buf))
    } else {
        None
    };
    Ok(OpenFile {
        file,
        validators: Validators::from_metadata(&meta),
        len: meta.len(),
        name: name.to_owned(),
        small,
    })
}

/// Lists a directory. Entries whose target cannot be resolved inside the root (dangling
/// links, links that escape) and entries that are neither files nor directories are left
/// out, since they could not be served anyway. Non-UTF-8 names are skipped: they could not
/// be requested.
fn list(root: &Dir, rel: &Path, show_hidden: bool) -> Result<Vec<Entry>, HttpError> {
    let mut entries = Vec::new();
    for dir_entry in root.read_dir(rel).map_err(HttpError::from_io)? {
        let dir_entry = dir_entry.map_err(HttpError::Internal)?;
        let Ok(name) = dir_entry.file_name().into_string() else {
            tracing::debug!(dir = %rel.display(), "skipping non-UTF-8 name in listing");
            continue;
        };
        if (!show_hidden && is_hidden(&name)) || name.contains('\\') {
            continue;
        }
        let Ok(meta) = root.metadata(rel.join(&name)) else {
            continue;
        };
        if !(meta.is_dir() || meta.is_file()) {
            continue;
        }
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.into_std().duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        entries.push(Entry {
            name,
            is_dir: meta.is_dir(),
            size: if meta.is_dir() { 0 } else { meta.len() },
            mtime,
        });
    }
    Ok(entries)
}

fn options() -> Result<Response<Body>, HttpError> {
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .header(header::ALLOW, ALLOW)
        .body(body::empty())
        .map_err(internal)
}

fn redirect_to_dir(path: &RequestPath, query: Option<&str>) -> Result<Response<Body>, HttpError> {
    let mut location = path.dir_href();
    if let Some(query) = query {
        location.push('?');
        location.push_str(query);
    }
    Response::builder()
        .status(StatusCode::MOVED_PERMANENTLY)
        .header(header::LOCATION, location)
        .header(header::CONTENT_LENGTH, 0)
        .body(body::empty())
        .map_err(internal)
}

fn file_response(
    parts: &Parts,
    file: OpenFile,
    want_body: bool,
    runtime: Handle,
) -> Result<Response<Body>, HttpError> {
    let validators = &file.validators;
    let len = file.len;
    let range_applies = match conditional::evaluate(&parts.method, &parts.headers, validators) {
        Precondition::Failed => return Err(HttpError::PreconditionFailed),
        Precondition::NotModified => {
            return Response::builder()
                .status(StatusCode::NOT_MODIFIED)
                .header(header::ETAG, validators.etag())
                .header(header::LAST_MODIFIED, validators.last_modified())
                .body(body::empty())
                .map_err(internal);
        }
        Precondition::Proceed { range_applies } => range_applies,
    };
    let range_value = if range_applies {
        single_value(&parts.headers, header::RANGE)
    } else {
        None
    };
    let mut builder = Response::builder()
        .header(header::CONTENT_TYPE, mime::content_type(&file.name))
        .header(header::ETAG, validators.etag())
        .header(header::LAST_MODIFIED, validators.last_modified())
        .header(header::ACCEPT_RANGES, "bytes");
    let (status, start, count) = match range::decide(range_value, len) {
        RangeDecision::Full => (StatusCode::OK, 0, len),
        RangeDecision::Partial(r) => {
            builder = builder.header(header::CONTENT_RANGE, r.content_range(len));
            (StatusCode::PARTIAL_CONTENT, r.start, r.len())
        }
        RangeDecision::Unsatisfiable => return Err(HttpError::RangeNotSatisfiable { len }),
    };
    let body = match (want_body, file.small) {
        (false, _) => body::empty(),
        (true, Some(bytes)) => {
            let start = usize::try_from(start).map_err(internal)?;
            let end = usize::try_from(start as u64 + count).map_err(internal)?;
            body::full(bytes.slice(start..end))
        }
        (true, None) => body::file(file.file, start, count, runtime),
    };
    builder
        .status(status)
        .header(header::CONTENT_LENGTH, count)
        .body(body)
        .map_err(internal)
}

fn listing_response(
    parts: &Parts,
    path: &RequestPath,
    mut entries: Vec<Entry>,
    want_body: bool,
) -> Result<Response<Body>, HttpError> {
    let accept = joined_values(&parts.headers, header::ACCEPT);
    let query = listing::parse_query(parts.uri.query(), accept.as_deref());
    listing::sort(&mut entries, query.sort, query.order);
    let (content_type, text) = if query.json {
        (
            "application/json",
            listing::render_json(&entries).map_err(internal)?,
        )
    } else {
        (
            "text/html; charset=utf-8",
            listing::render_html(&path.dir_display(), path.is_root(), &entries, &query),
        )
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, text.len())
        .header(header::VARY, "Accept")
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::CONTENT_SECURITY_POLICY, mime::GENERATED_PAGE_CSP)
        .body(if want_body {
            body::full(text)
        } else {
            body::empty()
        })
        .map_err(internal)
}

/// A header that must appear once and be visible ASCII; anything else counts as absent.
fn single_value(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok(),
        _ => None,
    }
}

/// All field lines of a list-valued header, joined as one list.
fn joined_values(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    let parts: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v: &HeaderValue| v.to_str().ok())
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

fn internal(e: impl std::error::Error + Send + Sync + 'static) -> HttpError {
    HttpError::Internal(io::Error::other(e))
}
