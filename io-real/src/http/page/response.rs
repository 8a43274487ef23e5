//! The responses that carry a generated page or listing, each under its own
//! Content-Security-Policy, and compressed like every other text response when the
//! client accepts it (a folder of 10,000 entries is about 2.7 MB of HTML and 100 KB
//! gzipped).
//!
//! A listing carries an entity tag made from what it shows ([`listing_tag`]), distinct
//! per coding as a file's is, so a browser revalidating a folder (`Cache-Control:
//! no-cache`) gets a 304 without the page being rendered or encoded.

use std::hash::{Hash as _, Hasher as _};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};

use super::render::Features;
use crate::http::body::{self, Body};
use crate::http::compress::{self, Coding, Level};
use crate::http::conditional::{self, Precondition};
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
    /// GET or HEAD: what a matching `If-None-Match` turns into a 304.
    pub method: Method,
    /// The request's `If-Match` and `If-None-Match` lines, the only preconditions a
    /// listing heeds: it has no modification date (so no date conditions) and is not
    /// served in ranges.
    pub conditions: HeaderMap,
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
        let mut conditions = HeaderMap::new();
        for name in [header::IF_MATCH, header::IF_NONE_MATCH] {
            for value in parts.headers.get_all(&name) {
                conditions.append(name.clone(), value.clone());
            }
        }
        PageRequest {
            query: listing::parse_query(parts.uri.query(), accept.as_deref()),
            codings,
            compress,
            want_body,
            method: parts.method.clone(),
            conditions,
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
    let tag = listing_tag(&query, &page, &entries);
    let vary = if request.compress {
        "Accept, Accept-Encoding"
    } else {
        "Accept"
    };
    let (content_type, csp) = if query.json {
        ("application/json", mime::GENERATED_PAGE_CSP)
    } else {
        ("text/html; charset=utf-8", super::PAGE_CSP)
    };
    let head = ListingHead {
        content_type,
        csp,
        vary,
        tag,
    };
    let streamed = entries.len() >= STREAMED_FROM;
    if streamed {
        // The coding is known before anything is rendered, and so is the tag.
        if let Some(response) = head.unchanged(request, request.codings.first().copied())? {
            return Ok(response);
        }
        let rows = if query.json {
            Rows::new(String::from("["), entries, String::from("]"), json_row)
        } else {
            let rendered = render_page(&page, &query, &entries);
            let (first, last) = (
                super::render::render_head(&rendered),
                super::render::render_tail(&rendered),
            );
            Rows::new(first, entries, last, html_row)
        };
        return streamed_listing(request, rows, &head);
    }
    let text = if query.json {
        listing::render_json(&entries)
    } else {
        super::render::render(&render_page(&page, &query, &entries))
    };
    // A page too short to gain is sent as it is, whatever was accepted.
    let planned = request
        .codings
        .first()
        .copied()
        .filter(|_| text.len() as u64 >= compress::MIN_COMPRESS_SIZE);
    if let Some(response) = head.unchanged(request, planned)? {
        return Ok(response);
    }
    let (coding, bytes) = encode(text, &request.codings);
    let mut builder = head
        .builder(StatusCode::OK, coding)
        .header(header::CONTENT_LENGTH, bytes.len());
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

fn render_page<'a>(
    page: &ListingPage<'a>,
    query: &'a ListingQuery,
    entries: &'a [Entry],
) -> super::render::Page<'a> {
    super::render::Page {
        dir: page.path,
        entries,
        query,
        features: page.features,
        readme: page.readme,
        qr_base: page.qr_base,
    }
}

/// The fields every answer about one listing carries, its 304 included.
struct ListingHead {
    content_type: &'static str,
    csp: &'static str,
    vary: &'static str,
    /// [`listing_tag`].
    tag: u64,
}

impl ListingHead {
    /// The entity tag of the listing in `coding` (`None`: as it is), quoted:
    /// `"ls-<hash>"`, and `"ls-<hash>-gz"` and so on for each coding, as a file's tag is
    /// suffixed, so a client holding one coding never revalidates another.
    fn etag(&self, coding: Option<Coding>) -> String {
        match coding {
            Some(coding) => format!("\"ls-{:016x}-{}\"", self.tag, coding.extension()),
            None => format!("\"ls-{:016x}\"", self.tag),
        }
    }

    fn builder(&self, status: StatusCode, coding: Option<Coding>) -> http::response::Builder {
        let builder = Response::builder()
            .status(status)
            .header(header::CACHE_CONTROL, "no-cache")
            .header(header::CONTENT_SECURITY_POLICY, self.csp)
            .header(header::VARY, self.vary);
        let builder = match HeaderValue::from_str(&self.etag(coding)) {
            Ok(etag) => builder.header(header::ETAG, etag),
            Err(_) => builder,
        };
        if status == StatusCode::NOT_MODIFIED {
            builder
        } else {
            builder.header(header::CONTENT_TYPE, self.content_type)
        }
    }

    /// The 304 (or 412) the request's `If-None-Match` (or `If-Match`) asks for against
    /// the listing in `coding`, or `None` to send it.
    fn unchanged(
        &self,
        request: &PageRequest,
        coding: Option<Coding>,
    ) -> Result<Option<Response<Body>>, HttpError> {
        if request.conditions.is_empty() {
            return Ok(None);
        }
        let etag = self.etag(coding);
        let opaque = etag.trim_matches('"').as_bytes();
        match conditional::evaluate_tag(&request.method, &request.conditions, opaque) {
            Precondition::Proceed { .. } => Ok(None),
            Precondition::Failed => Err(HttpError::PreconditionFailed),
            Precondition::NotModified => self
                .builder(StatusCode::NOT_MODIFIED, coding)
                .body(body::empty())
                .map(Some)
                .map_err(internal),
        }
    }
}

/// A hash of everything a listing shows, in the order it shows it: the build (its page
/// and its assets), the format and sort asked for, the folder, the page's switches, its
/// README and QR address, and every entry's name, link, kind, size, time and item count.
/// Two requests get the same tag exactly when they would get the same bytes. Hashing
/// 10,000 entries costs a fraction of rendering them, and a revalidation that matches
/// renders nothing.
///
/// SipHash with the standard library's fixed keys: every worker of one build computes
/// the same tag for the same listing, so a client may revalidate on any of them.
fn listing_tag(query: &ListingQuery, page: &ListingPage<'_>, entries: &[Entry]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    crate::build_info::SHORT.hash(&mut h);
    crate::build_info::FEATURES.hash(&mut h);
    (query.json, query.sort.as_str(), query.order.as_str()).hash(&mut h);
    page.path.dir_href().hash(&mut h);
    (page.features, page.readme, page.qr_base).hash(&mut h);
    entries.len().hash(&mut h);
    for e in entries {
        // Two writes an entry (each write of the hasher has a cost of its own, and
        // hashing field by field took eight): its name, then the rest packed after the
        // 0xff a `str` is hashed with, which no UTF-8 name holds, so where a name ends is
        // never in doubt.
        h.write(e.name.as_bytes());
        h.write(&packed(e));
        if let Some(href) = &e.href {
            h.write(href.as_bytes());
            h.write_u8(0xff);
        }
    }
    h.finish()
}

/// An entry's fields but its name and link, as [`listing_tag`] hashes them: the
/// terminator of the name, whether it is a folder, whether a link follows, its size, its
/// time, and its item count (whether counted, then the count).
fn packed(e: &Entry) -> [u8; 24] {
    let mut packed = [0u8; 24];
    packed[0] = 0xff;
    packed[1] = u8::from(e.is_dir);
    packed[2] = u8::from(e.href.is_some());
    packed[3] = u8::from(e.items.is_some());
    packed[4..8].copy_from_slice(&e.items.unwrap_or(0).to_le_bytes());
    packed[8..16].copy_from_slice(&e.size.to_le_bytes());
    packed[16..24].copy_from_slice(&e.mtime.to_le_bytes());
    packed
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
    super::row::push_row(out, e);
}

/// One entry of the JSON array, as `render_json` writes it.
fn json_row(out: &mut String, e: &Entry, first: bool) {
    if !first {
        out.push(',');
    }
    listing::push_json(out, e);
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
fn streamed_listing(
    request: &PageRequest,
    rows: Rows,
    head: &ListingHead,
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
    let mut builder = head.builder(StatusCode::OK, coding);
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
                name: format!("photo-{i:05}-holiday.jpg").into(),
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

    fn etag_of(response: &Response<Body>) -> String {
        response.headers()[header::ETAG]
            .to_str()
            .expect("ASCII")
            .to_owned()
    }

    #[test]
    fn listings_are_tagged_per_coding_and_format_and_revalidate() {
        // A streamed page's pieces are rendered on the runtime's blocking pool.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let _runtime = rt.enter();
        // Whole (with a length) and streamed (chunked): the same rules.
        for n in [100, STREAMED_FROM + 1] {
            let plain = page_of(&request(&[], true), n);
            let identity = etag_of(&plain);
            assert!(identity.starts_with("\"ls-"), "{identity}");
            let gz = page_of(&request(&[("accept-encoding", "gzip")], true), n);
            assert_eq!(
                etag_of(&gz),
                format!("{}-gz\"", identity.trim_end_matches('"')),
                "{n} entries: the gzip page's tag is the identity's, suffixed"
            );
            let json = page_of(&request(&[("accept", "application/json")], true), n);
            assert_ne!(etag_of(&json), identity, "{n}: JSON and HTML differ");
            assert_eq!(
                etag_of(&page_of(&request(&[], true), n)),
                identity,
                "{n}: the same listing, the same tag"
            );
            assert_ne!(etag_of(&page_of(&request(&[], true), n + 1)), identity);
            let path = RequestPath::parse_any("/d/", true).expect("path");
            let at = |entries: Vec<Entry>| {
                let page = ListingPage {
                    path: &path,
                    readme: None,
                    features: Features::default(),
                    qr_base: None,
                };
                etag_of(&listing(&request(&[], true), page, entries).expect("listing"))
            };
            let changed: [fn(&mut Entry); 5] = [
                |e: &mut Entry| e.size += 1,
                |e: &mut Entry| e.mtime += 1,
                |e: &mut Entry| e.items = Some(1),
                |e: &mut Entry| e.href = Some("x%FF".into()),
                |e: &mut Entry| e.is_dir = true,
            ];
            for (i, change) in changed.iter().enumerate() {
                let mut entries = entries(n);
                change(&mut entries[n / 2]);
                assert_ne!(
                    at(entries),
                    identity,
                    "listing tag rule: change {i} to one of {n} entries changes the page, so its tag"
                );
            }

            let revalidated = page_of(&request(&[("if-none-match", identity.as_str())], true), n);
            assert_eq!(revalidated.status(), StatusCode::NOT_MODIFIED, "{n}");
            assert_eq!(etag_of(&revalidated), identity);
            assert!(!revalidated.headers().contains_key(header::CONTENT_LENGTH));
            assert!(body_bytes(revalidated).is_empty());
            let other_coding = page_of(
                &request(
                    &[
                        ("if-none-match", identity.as_str()),
                        ("accept-encoding", "gzip"),
                    ],
                    true,
                ),
                n,
            );
            assert_eq!(
                other_coding.status(),
                StatusCode::OK,
                "{n}: the identity's tag does not revalidate the gzip page"
            );
            let mismatch = listing(
                &request(&[("if-match", "\"ls-0\"")], true),
                ListingPage {
                    path: &RequestPath::parse_any("/d/", true).expect("path"),
                    readme: None,
                    features: Features::default(),
                    qr_base: None,
                },
                entries(n),
            );
            assert!(
                matches!(mismatch, Err(HttpError::PreconditionFailed)),
                "{n}: If-Match naming another tag is a 412"
            );
        }
    }

    #[test]
    fn search_pages_are_compressed_too() {
        let req = request(&[("accept-encoding", "br")], true);
        let response = page(&req, "<p>result</p>".repeat(100)).expect("page");
        assert_eq!(response.headers()[header::CONTENT_ENCODING], "br");
        assert_eq!(response.headers()[header::VARY], "Accept-Encoding");
    }
}
