//! The request path as a fixed workload for counting instructions (callgrind): each request
//! class answered inside the site (`Site::handle`, no sockets, as `handle_cost` measures)
//! and as keep-alive requests on one connection over a socketpair, through hyper and the
//! worker's connection code (`serve_connection`: deadlines, drain, accounting).
//!
//! For every measurement it runs a warm-up batch, then a batch of K requests, then one of
//! 2K, and calls [`phase_boundary`] after each batch. Under `valgrind --tool=callgrind
//! --dump-before='*phase_boundary*'` every batch is then a dump of its own, and (2K − K) / K
//! is the instructions of one request with the start-up, the warm-up and the batches'
//! fixed costs cancelled. `tests/tests/instructions.rs` runs it so and compares with
//! `docs/benchmarks/instructions.toml`.
//!
//! Last, the floor: the same 1 KiB GET over the same socketpair answered by bare hyper
//! (hyper-util's HTTP/1 + h2c server, the body from memory, no policy: `hyper_floor`'s
//! shape), so `get-1k hyper` over `floor hyper` is servery's cost per request as a
//! multiple of the stack's, counted rather than timed.
//!
//! Usage: `request_instructions [--requests K] [--only CLASS] [--listed-files N]`; it
//! prints one line per measurement, in the order of its dumps: `measure CLASS PATH K`.
//! `--listed-files` sets how many files the listed folder holds (default 20, the committed
//! baseline's; `--only listing --listed-files 10000 --requests 5` counts a large folder's
//! page).
#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use servery::http::dav::DavConfig;
use servery::http::dav::args::DEFAULT_PROPFIND_MAX_ENTRIES;
use servery::http::meter::RequestMeter;
use servery::http::{FILE_CACHE_SETTLE, Site, SiteConfig, serve_connection};
use servery::worker::broker::BrokerHandle;
use servery_core::proto::{BrokerReply, FrameDecoder, WorkerMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Requests before the measured batches: caches filled, buffers grown, the blocking
/// pool's thread started.
const WARM_UP: u32 = 20;
/// Files in the listed (and PROPFIND) directory: a folder as people keep them, small
/// enough that one request stays well under a millisecond.
const LISTED_FILES: usize = 20;
const USAGE: &str = "usage: request_instructions [--requests K] [--only CLASS] [--listed-files N]";

/// The request classes, in the order they are measured.
const CLASSES: [&str; 6] = [
    "get-1k",
    "not-modified",
    "range",
    "listing",
    "propfind",
    FLOOR,
];
/// The class answered by bare hyper, over the socketpair only.
const FLOOR: &str = "floor";
/// Where a request is answered: inside the site, or through hyper over a socketpair.
const PATHS: [&str; 2] = ["site", "hyper"];

const PROPFIND_BODY: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
    <D:propfind xmlns:D=\"DAV:\"><D:prop><D:resourcetype/><D:getcontentlength/>\
    <D:getlastmodified/><D:getetag/><D:displayname/></D:prop></D:propfind>";

fn main() -> std::io::Result<()> {
    let mut requests = 100u32;
    let mut only: Option<String> = None;
    let mut listed = LISTED_FILES;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--requests", Some(n)) => {
                requests = n.parse().map_err(|_| std::io::Error::other(USAGE))?;
            }
            ("--only", Some(class)) if CLASSES.contains(&class.as_str()) => only = Some(class),
            ("--listed-files", Some(n)) => {
                listed = n.parse().map_err(|_| std::io::Error::other(USAGE))?;
            }
            _ => return Err(std::io::Error::other(USAGE)),
        }
    }
    // The process ID at a fixed width: every path the requests make then has the same
    // length from run to run, and so does every allocation that holds one.
    let root =
        std::env::temp_dir().join(format!("servery-instructions-{:010}", std::process::id()));
    let result = make_tree(&root, listed).and_then(|()| run(&root, requests, only.as_deref()));
    let _ = std::fs::remove_dir_all(&root);
    result
}

/// `1k.bin` and `dir/` with `listed` files, every modification time the same
/// whole second in the past (the ETags and the page print it, and their length must not
/// change from run to run with the nanoseconds of the clock), and then a wait until their change times have settled: the file cache keeps only
/// files that have not changed for [`FILE_CACHE_SETTLE`], and a measurement that began
/// before that would count uncached requests first and cached ones later, depending on
/// how fast the machine got there.
fn make_tree(root: &Path, listed: usize) -> std::io::Result<()> {
    // 2026-01-01T00:00:00Z.
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let dir = root.join("dir");
    std::fs::create_dir_all(&dir)?;
    let mut files = vec![(root.join("1k.bin"), 1024)];
    files.extend((0..listed).map(|i| (dir.join(format!("file-{i:02}.txt")), 100 + i)));
    for (path, len) in files {
        std::fs::write(&path, vec![b'x'; len])?;
        std::fs::File::options()
            .write(true)
            .open(&path)?
            .set_modified(old)?;
    }
    for d in [&dir, root] {
        std::fs::File::open(d)?.set_modified(old)?;
    }
    std::thread::sleep(FILE_CACHE_SETTLE + Duration::from_millis(100));
    Ok(())
}

fn run(root: &Path, requests: u32, only: Option<&str>) -> std::io::Result<()> {
    // One blocking thread: with more, whether a job finds an idle thread or starts a new
    // one depends on how the threads happened to interleave, and a thread's start costs
    // as much as several requests; the count would then swing by several per cent
    // between runs (PROPFIND, which reads the folder on that pool, by 8 %).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()?;
    let sites = runtime.block_on(Sites::open(root))?;
    let etag = runtime.block_on(sites.etag())?;
    for class in CLASSES.iter().filter(|c| only.is_none_or(|o| o == **c)) {
        for path in PATHS {
            if *class == FLOOR && path == "site" {
                continue;
            }
            println!("measure {class} {path} {requests}");
            let request = || request_of(class, &etag);
            let site = sites.for_class(class);
            let mut conn = match path {
                "site" => None,
                _ if *class == FLOOR => Some(runtime.block_on(Connection::open_floor())?),
                _ => Some(runtime.block_on(Connection::open(Arc::clone(site)))?),
            };
            for batch in [WARM_UP, requests, 2 * requests] {
                runtime.block_on(async {
                    for _ in 0..batch {
                        let status = match &mut conn {
                            None => answer_in_site(site, request()).await?,
                            Some(conn) => conn.exchange(request()).await?,
                        };
                        if status != expected(class) {
                            return Err(std::io::Error::other(format!(
                                "{class} over {path}: {status}, expected {}",
                                expected(class)
                            )));
                        }
                    }
                    Ok::<_, std::io::Error>(())
                })?;
                phase_boundary(batch);
            }
        }
    }
    Ok(())
}

/// Where callgrind dumps (`--dump-before`): nothing happens here but the call.
#[inline(never)]
fn phase_boundary(batch: u32) {
    std::hint::black_box(batch);
}

/// The default site (every request class but PROPFIND) and one with WebDAV on.
struct Sites {
    plain: Arc<Site>,
    dav: Arc<Site>,
}

impl Sites {
    async fn open(root: &Path) -> std::io::Result<Sites> {
        let config = || SiteConfig {
            root: root.to_path_buf(),
            // A worker always counts its requests for the parent's metrics.
            meter: Some(Arc::new(RequestMeter::default())),
            ..Default::default()
        };
        let plain = Site::open(config()).map_err(std::io::Error::other)?;
        let dav = Site::open(SiteConfig {
            dav: Some(DavConfig {
                broker: lock_free_broker(),
                max_propfind_entries: usize::try_from(DEFAULT_PROPFIND_MAX_ENTRIES)
                    .unwrap_or(usize::MAX),
                worker_id: 1,
                tree_kill: None,
                kill_after_lock_grant: false,
            }),
            ..config()
        })
        .map_err(std::io::Error::other)?;
        Ok(Sites {
            plain: Arc::new(plain),
            dav: Arc::new(dav),
        })
    }

    fn for_class(&self, class: &str) -> &Arc<Site> {
        if class == "propfind" {
            &self.dav
        } else {
            &self.plain
        }
    }

    /// The ETag of `1k.bin`, for the conditional request.
    async fn etag(&self) -> std::io::Result<HeaderValue> {
        let response = self
            .plain
            .handle(request_of("get-1k", &HeaderValue::from_static("")))
            .await;
        response
            .headers()
            .get(header::ETAG)
            .cloned()
            .ok_or_else(|| std::io::Error::other("no ETag on GET /1k.bin"))
    }
}

/// A broker that holds no locks: every question is answered at once with an empty lock
/// list, as the parent answers when nobody has locked anything (the control channel and
/// the parent's table are not part of the measured path).
fn lock_free_broker() -> BrokerHandle {
    let (frames, mut arrived) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let broker = BrokerHandle::new(64, Duration::from_secs(5), move |frame| {
        let _ = frames.send(frame);
    });
    let answering = broker.clone();
    tokio::spawn(async move {
        let mut decoder = FrameDecoder::new(servery_core::proto::MAX_FRAME_DEFAULT);
        while let Some(frame) = arrived.recv().await {
            decoder.push(&frame);
            while let Ok(Some(message)) = decoder.next_worker_message() {
                if let WorkerMessage::Broker { id, .. } = message {
                    answering.on_reply(id, BrokerReply::Locks(Vec::new()));
                }
            }
        }
    });
    broker
}

fn request_of(class: &str, etag: &HeaderValue) -> Request<Full<Bytes>> {
    let builder = Request::builder()
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::USER_AGENT, "request-instructions");
    let request = match class {
        "get-1k" | FLOOR => builder.uri("/1k.bin").body(Full::default()),
        "not-modified" => builder
            .uri("/1k.bin")
            .header(header::IF_NONE_MATCH, etag.clone())
            .body(Full::default()),
        "range" => builder
            .uri("/1k.bin")
            .header(header::RANGE, "bytes=100-199")
            .body(Full::default()),
        "listing" => builder
            .uri("/dir/")
            .header(header::ACCEPT, "text/html")
            .body(Full::default()),
        _ => builder
            .method("PROPFIND")
            .uri("/dir/")
            .header("depth", "1")
            .header(header::CONTENT_TYPE, "application/xml")
            .body(Full::new(Bytes::from_static(PROPFIND_BODY.as_bytes()))),
    };
    request.unwrap_or_else(|e| unreachable!("a request built from constants: {e}"))
}

fn expected(class: &str) -> StatusCode {
    match class {
        "not-modified" => StatusCode::NOT_MODIFIED,
        "range" => StatusCode::PARTIAL_CONTENT,
        "propfind" => StatusCode::MULTI_STATUS,
        _ => StatusCode::OK,
    }
}

/// One request inside the site, its body read to the end.
async fn answer_in_site(site: &Site, request: Request<Full<Bytes>>) -> std::io::Result<StatusCode> {
    let response = site.handle(request).await;
    let status = response.status();
    response
        .into_body()
        .collect()
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(status)
}

/// A keep-alive HTTP/1.1 connection to the site over a socketpair, served by the worker's
/// connection code on the same runtime; the client end writes requests and reads whole
/// responses with as little work of its own as it can.
struct Connection {
    client: UnixStream,
    buf: Vec<u8>,
    head: Vec<u8>,
}

impl Connection {
    async fn open(site: Arc<Site>) -> std::io::Result<Connection> {
        let (client, server) = UnixStream::pair()?;
        let (drain_tx, drain) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            // Held for as long as the connection is served: dropping it means draining.
            let _drain_tx = drain_tx;
            serve_connection(site, server, drain, Arc::new(AtomicU64::new(0))).await;
        });
        Ok(Connection {
            client,
            buf: Vec::with_capacity(64 * 1024),
            head: Vec::with_capacity(1024),
        })
    }

    /// The floor: bare hyper answering every request with 1 KiB from memory.
    async fn open_floor() -> std::io::Result<Connection> {
        let (client, server) = UnixStream::pair()?;
        let body = Bytes::from(vec![b'x'; 1024]);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |_request| {
                let body = body.clone();
                async move { Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(body))) }
            });
            let served =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(server), service)
                    .await;
            drop(served);
        });
        Ok(Connection {
            client,
            buf: Vec::with_capacity(64 * 1024),
            head: Vec::with_capacity(1024),
        })
    }

    async fn exchange(&mut self, request: Request<Full<Bytes>>) -> std::io::Result<StatusCode> {
        let (parts, body) = request.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .to_bytes();
        self.head.clear();
        self.head
            .extend_from_slice(parts.method.as_str().as_bytes());
        self.head.push(b' ');
        self.head.extend_from_slice(parts.uri.path().as_bytes());
        self.head.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in &parts.headers {
            self.head.extend_from_slice(name.as_str().as_bytes());
            self.head.extend_from_slice(b": ");
            self.head.extend_from_slice(value.as_bytes());
            self.head.extend_from_slice(b"\r\n");
        }
        if !body.is_empty() {
            self.head
                .extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
        }
        self.head.extend_from_slice(b"\r\n");
        self.head.extend_from_slice(&body);
        self.client.write_all(&self.head).await?;
        self.read_response(parts.method == http::Method::HEAD).await
    }

    /// Reads one whole response (its head, then a body framed by `Content-Length` or
    /// chunked) and returns its status.
    async fn read_response(&mut self, head_only: bool) -> std::io::Result<StatusCode> {
        self.buf.clear();
        let head_end = loop {
            if let Some(at) = find(&self.buf, b"\r\n\r\n") {
                break at + 4;
            }
            self.read_more().await?;
        };
        let head = std::str::from_utf8(&self.buf[..head_end])
            .map_err(|_| std::io::Error::other("a response head that is not UTF-8"))?;
        let status: StatusCode = head
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))?;
        let field = |name: &str| {
            head.split("\r\n").find_map(|line| {
                let (n, v) = line.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
        };
        let bodiless = head_only || status == StatusCode::NOT_MODIFIED;
        if bodiless {
            return Ok(status);
        }
        if let Some(length) = field("content-length") {
            let length: usize = length
                .parse()
                .map_err(|_| std::io::Error::other("a bad Content-Length"))?;
            while self.buf.len() < head_end + length {
                self.read_more().await?;
            }
        } else if field("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            while !self.buf[head_end..].ends_with(b"\r\n0\r\n\r\n") {
                self.read_more().await?;
            }
        } else {
            return Err(std::io::Error::other(format!("an unframed body: {head:?}")));
        }
        Ok(status)
    }

    async fn read_more(&mut self) -> std::io::Result<()> {
        if self.client.read_buf(&mut self.buf).await? == 0 {
            return Err(std::io::Error::other("the server closed the connection"));
        }
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
