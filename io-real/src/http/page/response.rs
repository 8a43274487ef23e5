//! The responses that carry a generated page or listing, each under its own
//! Content-Security-Policy, and compressed like every other text response when the
//! client accepts it (a folder of 10,000 entries is about 2.7 MB of HTML and 100 KB
//! gzipped).

use bytes::Bytes;
use http::request::Parts;
use http::{Response, StatusCode, header};

use super::render::Features;
use crate::http::body::{self, Body};
use crate::http::compress::{self, Coding, Level};
use crate::http::error::HttpError;
use crate::http::listing::{self, Entry, ListingQuery};
use crate::http::mime;
use crate::http::path::RequestPath;
use crate::http::pieces::Pieces;
use crate::http::site::joined_values;

/// What a request for a generated page asked for, owned so the page can be rendered and
/// encoded on the blocking pool.
#[derive(Debug, Clone)]
pub(crate) struct PageRequest {
    /// Sort, order and format (`?sort=`, `?format=`, `Accept`).
    pub query: ListingQuery,
    /// The codings the client accepts, best first; empty when it accepts none or the
    /// site does not compress.
    pub codings: Vec<Coding>,
    /// Whether the site compresses at all (the response then varies on
    /// `Accept-Encoding`, whatever this request accepted).
    pub compress: bool,
    pub want_body: bool,
}

impl PageRequest {
    /// Reads the request's query, `Accept` and `Accept-Encoding`.
    pub(crate) fn of(parts: &Parts, compress: bool, want_body: bool) -> PageRequest {
        let accept = joined_values(&parts.headers, header::ACCEPT);
        let codings = if compress {
            compress::negotiate(joined_values(&parts.headers, header::ACCEPT_ENCODING).as_deref())
        } else {
            Vec::new()
        };
        PageRequest {
            query: listing::parse_query(parts.uri.query(), accept.as_deref()),
            codings,
            compress,
            want_body,
        }
    }
}

/// The listing as it will be rendered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListingPage<'a> {
    pub path: &'a RequestPath,
    pub readme: Option<&'a str>,
    pub features: Features,
    pub qr_base: Option<&'a str>,
}

/// A directory as the page (HTML) or as JSON, as the query and `Accept` ask. Blocking
/// (it sorts, renders and compresses): call it on the blocking pool.
pub(crate) fn listing(
    request: &PageRequest,
    page: ListingPage<'_>,
    mut entries: Vec<Entry>,
) -> Result<Response<Body>, HttpError> {
    let query = request.query;
    listing::sort(&mut entries, query.sort, query.order);
    let (content_type, text, csp) = if query.json {
        if entries.len() >= STREAMED_FROM {
            let rows = Rows::new(String::from("["), entries, String::from("]"), json_row);
            return streamed(request, rows, "application/json", mime::GENERATED_PAGE_CSP);
        }
        (
            "application/json",
            listing::render_json(&entries).map_err(internal)?,
            mime::GENERATED_PAGE_CSP,
        )
    } else {
        let rendered = super::render::Page {
            dir: page.path,
            entries: &entries,
            query: &query,
            features: page.features,
            readme: page.readme,
            qr_base: page.qr_base,
        };
        if entries.len() >= STREAMED_FROM {
            let head = super::render::render_head(&rendered);
            let tail = super::render::render_tail(&rendered);
            let rows = Rows::new(head, entries, tail, html_row);
            return streamed(request, rows, "text/html; charset=utf-8", super::PAGE_CSP);
        }
        let html = super::render::render(&rendered);
        ("text/html; charset=utf-8", html, super::PAGE_CSP)
    };
    let vary = if request.compress {
        "Accept, Accept-Encoding"
    } else {
        "Accept"
    };
    respond(request, content_type, text, csp, Some(vary))
}

/// Folders of at least this many entries get their page a piece at a time: a page of
/// 100,000 entries is about 27 MB of HTML, which built whole (then compressed whole) a
/// worker held once or twice per request at once.
const STREAMED_FROM: usize = 2_000;

/// Rendered rows that make one piece of a streamed page.
const PIECE_BYTES: usize = 64 * 1024;

/// A large listing (the page or its JSON), a piece at a time: the head, rows until a
/// piece is full, the tail with the last rows.
struct Rows {
    head: Option<String>,
    entries: std::vec::IntoIter<Entry>,
    tail: Option<String>,
    /// Appends one entry's row; `first` for the listing's first entry.
    row: fn(&mut String, &Entry, bool),
    first: bool,
}

impl Rows {
    fn new(
        head: String,
        entries: Vec<Entry>,
        tail: String,
        row: fn(&mut String, &Entry, bool),
    ) -> Rows {
        Rows {
            head: Some(head),
            entries: entries.into_iter(),
            tail: Some(tail),
            row,
            first: true,
        }
    }
}

fn html_row(out: &mut String, e: &Entry, _first: bool) {
    super::render::push_row(out, e);
}

/// One entry of the JSON array, as `render_json` writes it (an entry that cannot be
/// written is left out rather than breaking the array).
fn json_row(out: &mut String, e: &Entry, first: bool) {
    if let Ok(text) = serde_json::to_string(e) {
        if !first {
            out.push(',');
        }
        out.push_str(&text);
    }
}

impl Pieces for Rows {
    fn next_piece(&mut self) -> std::io::Result<Option<Bytes>> {
        let Some(tail) = self.tail.as_ref() else {
            return Ok(None);
        };
        let mut out = self.head.take().unwrap_or_default();
        out.reserve(PIECE_BYTES + 512);
        while out.len() < PIECE_BYTES {
            match self.entries.next() {
                Some(e) => {
                    (self.row)(&mut out, &e, self.first);
                    self.first = false;
                }
                None => {
                    out.push_str(tail);
                    self.tail = None;
                    break;
                }
            }
        }
        Ok(Some(Bytes::from(out)))
    }
}

/// A large folder's listing, sent as it is rendered (chunked, no length), encoded as the
/// client accepts.
fn streamed(
    request: &PageRequest,
    rows: Rows,
    content_type: &'static str,
    csp: &'static str,
) -> Result<Response<Body>, HttpError> {
    let (body, coding) = if request.want_body {
        crate::http::pieces::stream(
            rows,
            request.codings.first().copied(),
            tokio::runtime::Handle::current(),
            "directory listing",
        )
    } else {
        (body::empty(), request.codings.first().copied())
    };
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::CONTENT_SECURITY_POLICY, csp)
        .header(
            header::VARY,
            if request.compress {
                "Accept, Accept-Encoding"
            } else {
                "Accept"
            },
        );
    if let Some(coding) = coding {
        builder = builder.header(header::CONTENT_ENCODING, coding.token());
    }
    builder.body(body).map_err(internal)
}

/// A generated page (search results) with the page's policy. Blocking, as [`listing`].
pub(crate) fn page(request: &PageRequest, text: String) -> Result<Response<Body>, HttpError> {
    let vary = request.compress.then_some("Accept-Encoding");
    respond(
        request,
        "text/html; charset=utf-8",
        text,
        super::PAGE_CSP,
        vary,
    )
}

fn respond(
    request: &PageRequest,
    content_type: &'static str,
    text: String,
    csp: &'static str,
    vary: Option<&'static str>,
) -> Result<Response<Body>, HttpError> {
    let (coding, bytes) = encode(text, &request.codings);
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, bytes.len())
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::CONTENT_SECURITY_POLICY, csp);
    if let Some(vary) = vary {
        builder = builder.header(header::VARY, vary);
    }
    if let Some(coding) = coding {
        builder = builder.header(header::CONTENT_ENCODING, coding.token());
    }
    builder
        .body(if request.want_body {
            body::full(bytes)
        } else {
            body::empty()
        })
        .map_err(internal)
}

/// The page in the first of `codings` that encodes it (at the streaming level: a page is
/// made per request, never cached), or as it is when none is accepted, it is too short to
/// gain, or every encoder failed.
pub(crate) fn encode(text: String, codings: &[Coding]) -> (Option<Coding>, Bytes) {
    if (text.len() as u64) >= compress::MIN_COMPRESS_SIZE {
        for &coding in codings {
            match compress::encode_all(coding, Level::Streaming, text.as_bytes()) {
                Ok(encoded) => return (Some(coding), Bytes::from(encoded)),
                Err(e) => tracing::warn!(error = %e, "cannot encode a generated page"),
            }
        }
    }
    (None, Bytes::from(text))
}

fn internal(e: impl std::error::Error + Send + Sync + 'static) -> HttpError {
    HttpError::Internal(std::io::Error::other(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;
    use std::io::Read as _;

    fn request(headers: &[(&str, &str)], compress: bool) -> PageRequest {
        let mut req = Request::get("/d/");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let (parts, ()) = req.body(()).expect("request").into_parts();
        PageRequest::of(&parts, compress, true)
    }

    /// A folder of `n` files like a camera's or a build's: numbered names, every size
    /// different, written a few hundred a second.
    fn entries(n: usize) -> Vec<Entry> {
        (0..n)
            .map(|i| Entry {
                name: format!("photo-{i:05}-holiday.jpg"),
                is_dir: false,
                size: 1_000_000 + (i as u64 * 7919) % 3_000_000,
                mtime: 1_700_000_000 + i as u64 / 300,
                href: None,
                items: None,
            })
            .collect()
    }

    fn body_bytes(response: Response<Body>) -> Vec<u8> {
        use http_body_util::BodyExt as _;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(response.into_body().collect())
            .expect("body")
            .to_bytes()
            .to_vec()
    }

    fn page_of(req: &PageRequest, n: usize) -> Response<Body> {
        let path = RequestPath::parse_any("/d/", true).expect("path");
        listing(
            req,
            ListingPage {
                path: &path,
                readme: None,
                features: Features::default(),
                qr_base: None,
            },
            entries(n),
        )
        .expect("listing")
    }

    #[test]
    fn a_big_listing_is_compressed_when_accepted() {
        // The most a page is built whole for (larger ones stream: tests/big_listing.rs).
        const ENTRIES: usize = STREAMED_FROM - 1;
        let plain = page_of(&request(&[], true), ENTRIES);
        assert!(!plain.headers().contains_key(header::CONTENT_ENCODING));
        assert_eq!(plain.headers()[header::VARY], "Accept, Accept-Encoding");
        let html = body_bytes(plain);
        assert!(html.len() > 300_000, "{} bytes", html.len());

        let gz = page_of(&request(&[("accept-encoding", "gzip")], true), ENTRIES);
        assert_eq!(gz.headers()[header::CONTENT_ENCODING], "gzip");
        let length: usize = gz.headers()[header::CONTENT_LENGTH]
            .to_str()
            .ok()
            .and_then(|v| v.parse().ok())
            .expect("length");
        let coded = body_bytes(gz);
        assert_eq!(coded.len(), length);
        eprintln!(
            "{ENTRIES} entries: {} bytes, {} gzipped",
            html.len(),
            coded.len()
        );
        assert!(
            coded.len() * 10 < html.len(),
            "{} bytes gzipped",
            coded.len()
        );
        let mut decoded = Vec::new();
        flate2::read::GzDecoder::new(&coded[..])
            .read_to_end(&mut decoded)
            .expect("gzip");
        assert_eq!(decoded, html, "the same page, encoded");

        let zstd = page_of(&request(&[("accept-encoding", "gzip, zstd")], true), 100);
        assert_eq!(zstd.headers()[header::CONTENT_ENCODING], "zstd");
    }

    #[test]
    fn identity_when_off_refused_or_tiny() {
        let off = page_of(&request(&[("accept-encoding", "gzip")], false), 100);
        assert!(!off.headers().contains_key(header::CONTENT_ENCODING));
        assert_eq!(off.headers()[header::VARY], "Accept");
        let refused = page_of(&request(&[("accept-encoding", "gzip;q=0")], true), 100);
        assert!(!refused.headers().contains_key(header::CONTENT_ENCODING));
        let (coding, bytes) = encode("<p>hi</p>".into(), &[Coding::Gzip]);
        assert_eq!((coding, &bytes[..]), (None, &b"<p>hi</p>"[..]));
    }

    #[test]
    fn search_pages_are_compressed_too() {
        let req = request(&[("accept-encoding", "br")], true);
        let response = page(&req, "<p>result</p>".repeat(100)).expect("page");
        assert_eq!(response.headers()[header::CONTENT_ENCODING], "br");
        assert_eq!(response.headers()[header::VARY], "Accept-Encoding");
    }
}
