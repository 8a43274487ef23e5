//! The served site: one root directory, resolved through a capability handle.
//!
//! [`Site::handle`] turns a request into a response: access policy first (CORS preflight,
//! authentication), then the file. The planning (path, preconditions, range, listing
//! format, coding, digest) is delegated to pure functions in sibling modules. Resolving
//! and opening the file, and reading whatever of it the page cache holds, happen right
//! here on the async thread; reads that would wait for the disk, directory listings,
//! encoding and hashing run on tokio's blocking pool, so a slow disk or a large file never
//! stalls the async threads that serve other connections (decision 0007).

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::served_root::LiveRoot;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use servery_core::request_stats::RouteClass;
use tokio::runtime::Handle;

use super::body::{self, Body};
use super::compress::{Coding, Level, StreamEncoder};
use super::conditional::{self, Precondition};
use super::conn::Transport;
use super::dav::{Dav, DavConfig};
use super::digest::{self, DigestAlg};
use super::encoded_cache::{CacheKey, EncodedCache};
use super::error::{ALLOW, HttpError, error_response};
use super::file_cache::FileCache;
use super::item_counts::{ITEM_COUNTS_BYTES, ItemCounts};
use super::lookup::{
    CompressSettings, Content, Found, FoundFile, Lookup, Negotiation, OpenFile, Repr, encode_whole,
    key_path, list as list_directory,
};
use super::mime;
use super::page::{self, assets, csrf, render::Features};
use super::path::RequestPath;
use super::policy::{self, Credential};
use super::range::{self, RangeDecision};
use super::single_flight::SingleFlight;
use super::upload::{UploadConfig, Uploads};
use super::watchdog::Deadlines;

mod hosted;

/// Files up to this size are read whole while opening them, when the page cache holds
/// them (one read); larger ones are streamed in [`body::CHUNK_SIZE`] chunks. One chunk: a
/// streamed response holds up to two chunks anyway, so reading such a file whole costs no
/// extra memory and saves the per-chunk work (docs/benchmarks.md).
pub const SMALL_FILE_MAX: u64 = body::CHUNK_SIZE as u64;

/// Digests of in-memory representations up to this size are computed in place on the
/// async thread (tens of microseconds); larger ones go to the blocking pool.
pub const INLINE_DIGEST_MAX: u64 = 64 * 1024;

/// Files up to this size are encoded whole in memory (and may be cached); larger ones are
/// encoded while streaming. 1 MiB covers the assets that matter (HTML, CSS, script bundles)
/// while bounding the memory one request can pin to about twice this.
pub const ENCODE_IN_MEMORY_MAX: u64 = 1024 * 1024;

/// Headers a file response usually carries, the security headers included: the size its
/// header map starts with.
const FILE_RESPONSE_HEADERS: usize = 13;

/// What to serve and how. Construct with `..Default::default()` so new fields do not break
/// callers.
#[derive(Debug, Clone)]
pub struct SiteConfig {
    /// The directory served at `/`.
    pub root: PathBuf,
    /// Serve and list dot-files (names starting with `.`).
    pub show_hidden: bool,
    /// Negotiate content codings at all (encoding on the fly and precompressed sidecars).
    /// When false, every response is identity and none says `Vary: Accept-Encoding`.
    pub compress: bool,
    /// Files larger than this are never encoded on the fly (they are served identity unless
    /// a precompressed sidecar exists): on-the-fly cost grows with size, and large files are
    /// mostly downloaded once.
    pub max_compress_size: u64,
    /// Bytes of encoded small files this site (one worker) may retain; 0 disables the cache.
    pub compression_cache_size: u64,
    /// Bytes of small files' contents this site (one worker) may retain; 0 disables the
    /// cache (see [`super::file_cache`]).
    pub file_cache_size: u64,
    /// Serve `file.zst`, `file.br` or `file.gz` in place of encoding `file`, when present
    /// and not older than `file`.
    pub precompressed: bool,
    /// Accepted Basic credentials (`--auth`); empty means no authentication. Everything but
    /// CORS preflights needs them when set.
    pub auth: Vec<Credential>,
    /// Allow cross-origin reads (`Access-Control-Allow-Origin: *`) and answer preflights.
    pub cors: bool,
    /// Single-page app: a GET/HEAD for a path that does not exist, from a client that
    /// accepts `text/html`, gets `/index.html` with 200 instead of 404.
    pub spa: bool,
    /// `Cache-Control: public, max-age=N` on served files when set, else `no-cache`.
    pub cache_max_age: Option<u32>,
    /// `X-Content-Type-Options`, `X-Frame-Options` and `Referrer-Policy` on every response.
    pub security_headers: bool,
    /// `Strict-Transport-Security` on responses sent over TLS (never over cleartext).
    pub hsts: bool,
    /// Accept `PUT` and multipart `POST` uploads through the worker's broker client
    /// (`--upload`); `None` keeps the site read-only.
    pub uploads: Option<UploadConfig>,
    /// Answer WebDAV (`--dav`); writes through it need `uploads` too.
    pub dav: Option<DavConfig>,
    /// Folder archives (`?archive=zip|tar.gz`) and their limits; `None` with `--no-archive`.
    pub archive: Option<page::archive::Limits>,
    /// `--qr`: the LAN address of the root, whose folders' codes the page shows.
    pub qr_url: Option<String>,
    /// Record one access-log line per request (`--access-log`).
    pub access_log: Option<Arc<crate::access_log::recorder::Recorder>>,
    /// Count every answered request for the parent's metrics.
    pub meter: Option<Arc<super::meter::RequestMeter>>,
    /// The deadline of every connection state (see [`super::watchdog`]).
    pub deadlines: Deadlines,
    /// ACME HTTP-01 challenges, and cleartext redirected to HTTPS (`--acme`).
    pub acme: Option<super::acme_challenge::AcmeResponder>,
    /// `Alt-Svc` on responses not sent over HTTP/3, when HTTP/3 is served
    /// (`crate::http3::alt_svc`).
    pub alt_svc: Option<HeaderValue>,
    /// The application (`--wsgi`) that answers every request not for a static file.
    pub app: Option<Arc<crate::app::App>>,
    /// The reverse proxy (`--proxy`): requests under its prefixes go upstream.
    pub proxy: Option<Arc<crate::proxy::Proxy>>,
    /// CGI scripts (`--cgi`): requests under their prefix run one.
    pub cgi: Option<Arc<crate::cgi::Cgi>>,
    /// The host names requests must name (decision 0046); `None` answers any.
    pub allowed_hosts: Option<Arc<super::host::AllowedHosts>>,
    /// Serve files a browser would run (HTML, SVG, XML) in a sandbox, because others can
    /// write them (decision 0047).
    pub sandbox_active_files: bool,
}

impl Default for SiteConfig {
    fn default() -> Self {
        Self {
            root: PathBuf::from("."),
            show_hidden: false,
            compress: true,
            max_compress_size: 64 * 1024 * 1024,
            compression_cache_size: 16 * 1024 * 1024,
            file_cache_size: 16 * 1024 * 1024,
            precompressed: true,
            auth: Vec::new(),
            cors: false,
            spa: false,
            cache_max_age: None,
            security_headers: true,
            hsts: false,
            uploads: None,
            dav: None,
            archive: Some(page::archive::Limits::default()),
            qr_url: None,
            access_log: None,
            meter: None,
            deadlines: Deadlines::default(),
            acme: None,
            alt_svc: None,
            app: None,
            proxy: None,
            cgi: None,
            allowed_hosts: None,
            sandbox_active_files: false,
        }
    }
}

/// A site ready to answer requests; build once per worker and share behind an `Arc`.
#[derive(Debug)]
pub struct Site {
    /// Every path is resolved beneath the handle this gives for the request, the
    /// directory the root's path names then (see [`super::path`] and
    /// [`crate::served_root`]).
    root: Arc<LiveRoot>,
    show_hidden: bool,
    compress: Option<CompressSettings>,
    cache: Arc<EncodedCache>,
    files: FileCache,
    /// Listed folders' item counts, by the folders' identities.
    item_counts: Arc<ItemCounts>,
    /// Types of files without a telling name, as their first bytes showed them.
    sniffed: super::sniff::SniffedTypes,
    /// In-flight encodings of cache misses, coalesced per cache key.
    encodings: SingleFlight<CacheKey, Option<Bytes>>,
    /// In-flight `Repr-Digest` computations, coalesced per key.
    digests: SingleFlight<DigestKey, Option<HeaderValue>>,
    auth: Vec<Credential>,
    cors: bool,
    spa: bool,
    cache_max_age: Option<u32>,
    security_headers: bool,
    hsts: bool,
    uploads: Option<Uploads>,
    dav: Option<Dav>,
    archive: Option<page::archive::Limits>,
    qr_url: Option<String>,
    access_log: Option<Arc<crate::access_log::recorder::Recorder>>,
    meter: Option<Arc<super::meter::RequestMeter>>,
    deadlines: Deadlines,
    acme: Option<super::acme_challenge::AcmeResponder>,
    alt_svc: Option<HeaderValue>,
    app: Option<Arc<crate::app::App>>,
    proxy: Option<Arc<crate::proxy::Proxy>>,
    cgi: Option<Arc<crate::cgi::Cgi>>,
    allowed_hosts: Option<Arc<super::host::AllowedHosts>>,
    sandbox_active_files: bool,
}

impl Site {
    /// Opens the root directory, by its path (as again whenever the path comes to name
    /// another directory): everything served is reached through such a handle.
    pub fn open(config: SiteConfig) -> Result<Self, HttpError> {
        let root = LiveRoot::open(&config.root).map_err(|source| HttpError::Root {
            root: config.root.clone(),
            source,
        })?;
        let root = Arc::new(root);
        let uploads = config
            .uploads
            .map(|u| Uploads::new(Arc::clone(&root), u, config.show_hidden));
        let dav = config.dav.map(|d| {
            Dav::new(
                Arc::clone(&root),
                d,
                uploads.as_ref().map(|u| u.writer().clone()),
                config.show_hidden,
                config.compress,
                config.deadlines.body,
            )
        });
        Ok(Self {
            root,
            show_hidden: config.show_hidden,
            compress: config.compress.then_some(CompressSettings {
                max_size: config.max_compress_size,
                precompressed: config.precompressed,
            }),
            cache: Arc::new(EncodedCache::new(config.compression_cache_size)),
            files: FileCache::new(config.file_cache_size),
            item_counts: Arc::new(ItemCounts::new(ITEM_COUNTS_BYTES)),
            sniffed: super::sniff::SniffedTypes::default(),
            encodings: SingleFlight::new(),
            digests: SingleFlight::new(),
            auth: config.auth,
            cors: config.cors,
            spa: config.spa,
            cache_max_age: config.cache_max_age,
            security_headers: config.security_headers,
            hsts: config.hsts,
            uploads,
            dav,
            archive: config.archive,
            qr_url: config.qr_url,
            access_log: config.access_log,
            meter: config.meter,
            deadlines: config.deadlines,
            acme: config.acme,
            alt_svc: config.alt_svc,
            app: config.app,
            proxy: config.proxy,
            cgi: config.cgi,
            allowed_hosts: config.allowed_hosts,
            sandbox_active_files: config.sandbox_active_files,
        })
    }

    /// What the directory page offers, from the flags this site runs with.
    fn page_features(&self) -> Features {
        Features {
            upload: self.uploads.is_some(),
            dav_writes: self.uploads.is_some() && self.dav.is_some(),
            delete: self
                .uploads
                .as_ref()
                .is_some_and(|u| u.writer().settings.allow_overwrite),
            archive: self.archive.is_some(),
            search: true,
        }
    }

    /// Where this site's requests are logged, when they are.
    pub fn recorder(&self) -> Option<&Arc<crate::access_log::recorder::Recorder>> {
        self.access_log.as_ref()
    }

    /// Where this site's requests are counted, when they are.
    pub fn meter(&self) -> Option<&Arc<super::meter::RequestMeter>> {
        self.meter.as_ref()
    }

    /// The host names requests must name, when they are checked.
    pub fn allowed_hosts(&self) -> Option<&super::host::AllowedHosts> {
        self.allowed_hosts.as_deref()
    }

    /// The application, when this site hosts one.
    pub fn app(&self) -> Option<&Arc<crate::app::App>> {
        self.app.as_ref()
    }

    pub fn proxy(&self) -> Option<&Arc<crate::proxy::Proxy>> {
        self.proxy.as_ref()
    }

    pub fn cgi(&self) -> Option<&Arc<crate::cgi::Cgi>> {
        self.cgi.as_ref()
    }

    /// The connection deadlines this site's connections are served under.
    pub fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }

    /// The per-worker cache of encoded files (exposed for budget reporting and tests).
    pub fn encoded_cache(&self) -> &EncodedCache {
        &self.cache
    }

    /// Files and bytes the per-worker file cache holds (for budget reporting and tests).
    pub fn file_cache_usage(&self) -> (usize, usize) {
        (self.files.len(), self.files.used())
    }

    /// Digest and encoding computations running now; zero when idle (nothing is retained
    /// once a computation completes).
    pub fn flights_in_flight(&self) -> usize {
        self.digests.in_flight() + self.encodings.in_flight()
    }

    /// Answers one request. Never fails: every error becomes its status response.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: std::fmt::Display,
    {
        self.handle_classed(req).await.0
    }

    /// [`Site::handle`], with the route class the request's duration is counted under
    /// (decision 0081): decided where the request is routed, so it costs a byte set.
    pub async fn handle_classed<B>(&self, req: Request<B>) -> (Response<Body>, RouteClass)
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: std::fmt::Display,
    {
        let (parts, body) = req.into_parts();
        // ACME's answers and CORS preflights stay `Other`; every other branch names its own.
        let mut route = RouteClass::Other;
        let dav = self.dav.as_ref().filter(|_| Dav::handles(&parts.method));
        let uploads = self
            .uploads
            .as_ref()
            .filter(|_| dav.is_none() && Uploads::handles(&parts.method));
        // Content on GET/HEAD/OPTIONS has no meaning here and is never read.
        let body = if dav.is_some() || uploads.is_some() {
            Some(body)
        } else {
            drop(body);
            None
        };
        // Before authorization: the CA has no credentials, and a key authorization is
        // public by design.
        let acme = match &self.acme {
            Some(acme) => Box::pin(acme.respond(&parts)).await,
            None => None,
        };
        let mut response = if let Some(response) = acme {
            response
        } else if self.cors && policy::is_preflight(&parts.method, &parts.headers) {
            preflight(&parts.headers)
        } else if !policy::authorized(&self.auth, &parts.headers) {
            route = RouteClass::Refused;
            error_response(&HttpError::Unauthorized)
        } else if !csrf::is_safe(&parts.method) && !from_this_origin_or_no_browser(&parts) {
            route = RouteClass::Refused;
            page::error_page::respond(&parts, &HttpError::CrossSite)
        } else {
            // The rare paths (WebDAV and uploads here, digests and encoding misses below)
            // are boxed: an async fn is as large as its largest await, and every request's
            // future is moved into the connection and allocated there. Unboxed, they made a
            // plain GET's future about 3.2 KB; boxed, about 2 KB (both measured in a debug
            // build).
            match (dav, uploads, body) {
                (Some(dav), _, Some(body)) => {
                    route = RouteClass::of_dav_method(parts.method.as_str());
                    Box::pin(dav.handle(&parts, body, self.uploads.as_ref())).await
                }
                (None, Some(uploads), Some(body)) => {
                    route = RouteClass::Upload;
                    Box::pin(uploads.handle(&parts, body)).await
                }
                _ => match self.respond(&parts, &mut route).await {
                    Ok(response) => response,
                    Err(err) => page::error_page::respond(&parts, &err),
                },
            }
        };
        let headers = response.headers_mut();
        if self.dav.is_some() && headers.contains_key(header::ALLOW) {
            headers.insert(header::ALLOW, HeaderValue::from_static(super::dav::ALLOW));
        } else if self.uploads.is_some() && headers.contains_key(header::ALLOW) {
            // OPTIONS and 405 name every method this site takes.
            headers.insert(
                header::ALLOW,
                HeaderValue::from_static(super::upload::ALLOW),
            );
        }
        if self.security_headers {
            mime::add_security_headers(headers);
        }
        if self.cors {
            policy::add_cors_headers(headers);
        }
        if self.hsts && parts.extensions.get::<Transport>() == Some(&Transport::Tls) {
            headers.insert(
                header::STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static(policy::HSTS),
            );
        }
        if let Some(alt_svc) = &self.alt_svc
            && parts.version != http::Version::HTTP_3
        {
            headers.insert(header::ALT_SVC, alt_svc.clone());
        }
        if parts.method == Method::HEAD {
            // Headers (including Content-Length) stay as a GET would send them.
            *response.body_mut() = body::empty();
        }
        (response, route)
    }

    /// Reads: a file or a directory's page; `route` is set to the class it turns out to be.
    async fn respond(
        &self,
        parts: &Parts,
        route: &mut RouteClass,
    ) -> Result<Response<Body>, HttpError> {
        match parts.method {
            Method::GET | Method::HEAD => *route = RouteClass::Static,
            Method::OPTIONS => return options(),
            _ => {
                *route = RouteClass::Refused;
                return Err(HttpError::MethodNotAllowed);
            }
        }
        if parts.uri.path().starts_with(assets::PREFIX)
            && let Some(response) = assets::respond(parts, self.compress.is_some()).await
        {
            return Ok(response);
        }
        // Reading names a file by its exact bytes, UTF-8 or not.
        let path = RequestPath::parse_any(parts.uri.path(), self.show_hidden)?;
        let want_body = parts.method == Method::GET;
        let runtime = Handle::try_current().map_err(|_| HttpError::Unavailable)?;
        // The directory the root's path names now: one `statx` (a deploy's swap is seen
        // by the next request).
        let root = self.root.dir();
        let lookup = Lookup {
            root: Arc::clone(&root),
            path: &path,
            read_small: want_body,
            spa_fallback: self.spa && policy::accepts_html(&parts.headers),
            negotiation: self.compress.map(|settings| Negotiation {
                settings,
                accept_encoding: joined_values(&parts.headers, header::ACCEPT_ENCODING),
                ranged: parts.headers.contains_key(header::RANGE),
            }),
            cache: &self.cache,
            files: &self.files,
        };
        // On this thread: see `lookup` for why that never waits for the disk.
        match lookup.run()? {
            Found::NeedsSlash => redirect_to_dir(&path, parts.uri.query()),
            Found::File(file) => self.file_response(parts, *file, want_body, runtime).await,
            Found::Directory(rel) => {
                *route = RouteClass::Listing;
                if let Some(format) = page::archive::Format::from_query(parts.uri.query()) {
                    let download = page::download::Download {
                        root: &root,
                        path: &path,
                        rel,
                        format,
                        show_hidden: self.show_hidden,
                        want_body,
                    };
                    return Box::pin(page::download::respond(download, self.archive, &runtime))
                        .await;
                }
                let show_hidden = self.show_hidden;
                let request =
                    page::response::PageRequest::of(parts, self.compress.is_some(), want_body);
                let html = !request.query.json;
                let features = self.page_features();
                // Listed, rendered and compressed on the blocking pool: a big folder is
                // megabytes of HTML.
                if html && let Some(needle) = page::search::query(parts.uri.query()) {
                    return blocking(&runtime, move || {
                        let results = page::search::search(
                            &root,
                            &rel,
                            &needle,
                            show_hidden,
                            page::search::Bounds::standard(),
                        )
                        .map_err(HttpError::from_io)?;
                        let text = page::render::render_search(&path, &needle, &results, features);
                        page::response::page(&request, text)
                    })
                    .await;
                }
                let qr_base = self.qr_url.clone();
                let item_counts = Arc::clone(&self.item_counts);
                blocking(&runtime, move || {
                    let entries = list_directory(&root, &rel, show_hidden, &item_counts)?;
                    let readme = html
                        .then(|| page::readme::load(&root, &rel, &entries))
                        .flatten();
                    let page = page::response::ListingPage {
                        path: &path,
                        readme: readme.as_deref(),
                        features,
                        qr_base: qr_base.as_deref(),
                    };
                    page::response::listing(&request, page, entries)
                })
                .await
            }
        }
    }

    async fn file_response(
        &self,
        parts: &Parts,
        found: FoundFile,
        want_body: bool,
        runtime: Handle,
    ) -> Result<Response<Body>, HttpError> {
        let FoundFile {
            mut original,
            repr,
            vary,
            rel,
            fallback,
        } = found;
        let validators = match &repr {
            // Nothing on the identity path reads them again.
            Repr::Identity => std::mem::take(&mut original.validators),
            Repr::Sidecar { coding, file, .. } => file.validators.with_coding(coding.extension()),
            Repr::Encode { coding, .. } => original.validators.with_coding(coding.extension()),
        };
        let mut head = Head::new();
        let vary = match (vary, fallback) {
            (true, true) => Some("Accept-Encoding, Accept"),
            (true, false) => Some("Accept-Encoding"),
            (false, true) => Some("Accept"),
            (false, false) => None,
        };
        if let Some(vary) = vary {
            head.set(header::VARY, HeaderValue::from_static(vary));
        }
        // The app shell stands in for every unknown path; caching it under each of them
        // would pin an old deployment, so it is always revalidated.
        let cache_control = if fallback {
            HeaderValue::from_static("no-cache")
        } else {
            policy::cache_control(self.cache_max_age, !self.auth.is_empty())
        };
        head.set(header::CACHE_CONTROL, cache_control);
        let content_type = mime::content_type(&original.name);
        // On a 304 too: a cache refreshes the stored response's fields from it.
        if self.sandbox_active_files && mime::is_active(content_type) {
            head.set(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(mime::SANDBOX_CSP),
            );
        }
        let range_applies = match conditional::evaluate(&parts.method, &parts.headers, &validators)
        {
            Precondition::Failed => return Err(HttpError::PreconditionFailed),
            Precondition::NotModified => {
                head.status = StatusCode::NOT_MODIFIED;
                head.set(header::ETAG, validators.etag());
                head.set(header::LAST_MODIFIED, validators.last_modified());
                return Ok(head.body(body::empty()));
            }
            Precondition::Proceed { range_applies } => range_applies,
        };
        // A name that says nothing (`Makefile`, `notes`): its first bytes decide.
        let content_type = super::sniff::content_type(&original, &runtime, &self.sniffed).await;
        head.set(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        head.set(header::ETAG, validators.etag());
        head.set(header::LAST_MODIFIED, validators.last_modified());
        head.set(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        let want_digest = digest::choose(
            joined_values(&parts.headers, digest::WANT_REPR_DIGEST.clone()).as_deref(),
        );
        // What a digest of the selected representation would be computed over.
        let digest_key = |alg| DigestKey {
            path: key_path(&rel),
            etag: validators.etag(),
            alg,
        };
        match repr {
            Repr::Identity => {
                if let Some(alg) = want_digest {
                    let input = DigestInput::of(&original);
                    if let Some(value) =
                        Box::pin(self.repr_digest(digest_key(alg), input, &runtime)).await
                    {
                        head.set(digest::REPR_DIGEST.clone(), value);
                    }
                }
                identity_response(head, parts, original, range_applies, want_body, runtime)
            }
            Repr::Sidecar { coding, file, .. } => {
                if let Some(alg) = want_digest {
                    let input = DigestInput::of(&file);
                    if let Some(value) =
                        Box::pin(self.repr_digest(digest_key(alg), input, &runtime)).await
                    {
                        head.set(digest::REPR_DIGEST.clone(), value);
                    }
                }
                let len = file.len;
                let body = match (want_body, file.content) {
                    (false, _) => body::empty(),
                    (true, Content::Read(bytes)) => body::full(bytes),
                    (true, Content::Handle(file, _)) => body::file(file, 0, len, runtime),
                };
                head.set(
                    header::CONTENT_ENCODING,
                    HeaderValue::from_static(coding.token()),
                );
                head.set(header::CONTENT_LENGTH, content_length(len));
                Ok(head.body(body))
            }
            Repr::Encode { coding, cached } => {
                head.set(
                    header::CONTENT_ENCODING,
                    HeaderValue::from_static(coding.token()),
                );
                if original.len > ENCODE_IN_MEMORY_MAX
                    && let Content::Handle(file, _) = original.content
                {
                    // No Repr-Digest: see the digest module for why.
                    if !want_body {
                        // The length is unknown without encoding the whole file.
                        return Ok(head.body(body::empty()));
                    }
                    let encoder = StreamEncoder::new(coding, Level::Streaming)
                        .map_err(HttpError::Internal)?;
                    let body = body::encoded_file(file, original.len, encoder, runtime);
                    return Ok(head.body(body));
                }
                let encoded = match cached {
                    Some(bytes) => bytes,
                    None => {
                        Box::pin(self.encode(original, coding, key_path(&rel), &runtime)).await?
                    }
                };
                if let Some(alg) = want_digest {
                    let input = Some(DigestInput::Bytes(encoded.clone()));
                    if let Some(value) =
                        Box::pin(self.repr_digest(digest_key(alg), input, &runtime)).await
                    {
                        head.set(digest::REPR_DIGEST.clone(), value);
                    }
                }
                let len = encoded.len();
                head.set(header::CONTENT_LENGTH, content_length(len as u64));
                Ok(head.body(if want_body {
                    body::full(encoded)
                } else {
                    body::empty()
                }))
            }
        }
    }

    /// Encodes a small file whole, through the cache. Concurrent misses for the same
    /// (file version, coding) share one encoding: a burst of first requests for a new
    /// asset would otherwise each burn the CPU to compress it.
    async fn encode(
        &self,
        original: OpenFile,
        coding: Coding,
        path: String,
        runtime: &Handle,
    ) -> Result<Bytes, HttpError> {
        let key = CacheKey {
            path,
            etag: original.validators.etag(),
            coding,
        };
        let cache = Arc::clone(&self.cache);
        let flight_key = key.clone();
        let encoded = self
            .encodings
            .run(flight_key, || async move {
                let result =
                    blocking(runtime, move || encode_whole(original, coding, key, &cache)).await;
                result
                    .inspect_err(|e| tracing::warn!(error = %e, "encoding failed"))
                    .ok()
            })
            .await;
        // A follower of a failed leader has nothing to send; the client may retry.
        encoded.ok_or(HttpError::Unavailable)
    }

    /// The `Repr-Digest` value for `input`, or `None` when it could not be computed (the
    /// field is optional; the failure is logged). Small inputs are hashed in place; larger
    /// ones on the blocking pool, one computation per key at a time.
    async fn repr_digest(
        &self,
        key: DigestKey,
        input: Option<DigestInput>,
        runtime: &Handle,
    ) -> Option<HeaderValue> {
        let alg = key.alg;
        match input? {
            DigestInput::Bytes(bytes) if bytes.len() as u64 <= INLINE_DIGEST_MAX => {
                Some(digest::of_bytes(alg, &bytes))
            }
            input => {
                self.digests
                    .run(key, || async move {
                        let result = blocking(runtime, move || match input {
                            DigestInput::Bytes(bytes) => Ok(digest::of_bytes(alg, &bytes)),
                            DigestInput::File(file, len) => {
                                digest::of_file(alg, &file, len).map_err(HttpError::Internal)
                            }
                        })
                        .await;
                        result
                            .inspect_err(|e| tracing::warn!(error = %e, "Repr-Digest failed"))
                            .ok()
                    })
                    .await
            }
        }
    }
}

/// Identifies one digest computation: a file version's representation and an algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DigestKey {
    path: String,
    /// The representation's ETag (coding-specific), so versions and codings never mix.
    etag: HeaderValue,
    alg: DigestAlg,
}

/// The bytes a digest is computed over.
enum DigestInput {
    Bytes(Bytes),
    /// A second handle on the served file, and the length its validators describe.
    File(File, u64),
}

impl DigestInput {
    /// The whole content of an opened file: in memory if it was read, else a duplicate
    /// handle (same open file, so the same inode the validators describe; `None` if the
    /// descriptor cannot be duplicated, and then no digest is sent).
    fn of(file: &OpenFile) -> Option<Self> {
        match &file.content {
            Content::Read(bytes) => Some(DigestInput::Bytes(bytes.clone())),
            Content::Handle(handle, _) => handle
                .try_clone()
                .inspect_err(|e| tracing::warn!(error = %e, "cannot duplicate file handle"))
                .ok()
                .map(|f| DigestInput::File(f, file.len)),
        }
    }
}

/// Runs file-system or CPU-heavy work on the blocking pool.
async fn blocking<T: Send + 'static>(
    runtime: &Handle,
    work: impl FnOnce() -> Result<T, HttpError> + Send + 'static,
) -> Result<T, HttpError> {
    match runtime.spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) if e.is_cancelled() => Err(HttpError::Unavailable),
        Err(e) => Err(HttpError::Internal(io::Error::other(e))),
    }
}

/// Whether a request that changes the tree may proceed: see [`csrf`].
fn from_this_origin_or_no_browser(parts: &Parts) -> bool {
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()));
    let tls = parts.extensions.get::<Transport>() == Some(&Transport::Tls);
    csrf::allowed(&parts.method, &parts.headers, host, tls)
}

/// The answer to a CORS preflight (the CORS headers common to all responses are added by
/// the caller).
fn preflight(request: &HeaderMap) -> Response<Body> {
    let mut response = Response::new(body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    policy::add_preflight_headers(request, response.headers_mut());
    response
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

/// The identity representation, whole or one range of it.
fn identity_response(
    mut head: Head,
    parts: &Parts,
    file: OpenFile,
    range_applies: bool,
    want_body: bool,
    runtime: Handle,
) -> Result<Response<Body>, HttpError> {
    let len = file.len;
    let range_value = if range_applies {
        single_value(&parts.headers, header::RANGE)
    } else {
        None
    };
    let (status, start, count) = match range::decide(range_value, len) {
        RangeDecision::Full => (StatusCode::OK, 0, len),
        RangeDecision::Partial(r) => {
            head.set(
                header::CONTENT_RANGE,
                HeaderValue::try_from(r.content_range(len)).map_err(internal)?,
            );
            (StatusCode::PARTIAL_CONTENT, r.start, r.len())
        }
        RangeDecision::Unsatisfiable => return Err(HttpError::RangeNotSatisfiable { len }),
    };
    let body = match (want_body, file.content) {
        (false, _) => body::empty(),
        // The whole file as read: a slice of it would cost a shared copy of the handle.
        (true, Content::Read(bytes)) if start == 0 && count == len => body::full(bytes),
        (true, Content::Read(bytes)) => {
            let start = usize::try_from(start).map_err(internal)?;
            let end = usize::try_from(start as u64 + count).map_err(internal)?;
            body::full(bytes.slice(start..end))
        }
        (true, Content::Handle(handle, _)) => body::file(handle, start, count, runtime),
    };
    head.status = status;
    head.set(header::CONTENT_LENGTH, content_length(count));
    Ok(head.body(body))
}

/// A file response's head, filled in place. (`http::response::Builder` moves the whole
/// head through a closure for every field it sets, and a file response sets a dozen on
/// the hot path.)
struct Head {
    status: StatusCode,
    headers: HeaderMap,
}

impl Head {
    fn new() -> Self {
        Self {
            status: StatusCode::OK,
            // Room for every field a file response carries, so the map never grows and
            // rehashes while it is filled.
            headers: HeaderMap::with_capacity(FILE_RESPONSE_HEADERS),
        }
    }

    fn set(&mut self, name: header::HeaderName, value: HeaderValue) {
        self.headers.insert(name, value);
    }

    fn body(self, body: Body) -> Response<Body> {
        let mut response = Response::new(body);
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

/// A header that must appear once and be visible ASCII; anything else counts as absent.
/// A `Content-Length` value in one allocation (`HeaderValue::from(u64)` takes two).
fn content_length(len: u64) -> HeaderValue {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = len;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    // Digits are always a valid value; the fallback only keeps this free of a panic path.
    HeaderValue::from_bytes(&digits[at..]).unwrap_or_else(|_| HeaderValue::from(len))
}

fn single_value(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok(),
        _ => None,
    }
}

/// All field lines of a list-valued header, joined as one list.
pub(super) fn joined_values(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_is_the_decimal_length() {
        for len in [0, 1, 9, 10, 1024, 99_999, u64::from(u32::MAX), u64::MAX] {
            assert_eq!(content_length(len), HeaderValue::from(len), "{len}");
        }
    }
}
