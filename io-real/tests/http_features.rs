//! Serving features end to end over real sockets: content codings, Repr-Digest, access
//! policy, TLS, and bad input. A raw client writes request bytes itself and parses what
//! comes back; every wait is bounded.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use servery::http::{FILE_CACHE_SETTLE, Site, SiteConfig, serve_connection};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::timeout;

const BOUND: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// A temporary served root.

struct Root {
    dir: PathBuf,
}

impl Root {
    fn new(test: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "servery-http-features-{}-{n}-{test}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        Self { dir }
    }

    fn write(&self, rel: &str, contents: &[u8]) -> PathBuf {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, contents).expect("write");
        path
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn set_mtime(path: &Path, time: SystemTime) {
    let f = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open for mtime");
    f.set_modified(time).expect("set mtime");
}

/// Text that compresses well but is not trivially repetitive.
fn text(len: usize) -> Vec<u8> {
    let words = [
        "servery ", "serves ", "static ", "files ", "quickly ", "and ", "well ",
    ];
    let mut out = Vec::with_capacity(len);
    let mut i = 0usize;
    while out.len() < len {
        out.extend_from_slice(words[(i * 7 + i / 3) % words.len()].as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

// ---------------------------------------------------------------------------------------
// The server under test.

struct Server {
    addr: SocketAddr,
    site: Arc<Site>,
    _drain: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(config: SiteConfig) -> Self {
        let site = Arc::new(Site::open(config).expect("open site"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (drain, drain_rx) = watch::channel(false);
        let requests = Arc::new(AtomicU64::new(0));
        let serving = Arc::clone(&site);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                stream.set_nodelay(true).expect("nodelay");
                tokio::spawn(serve_connection(
                    Arc::clone(&serving),
                    stream,
                    drain_rx.clone(),
                    Arc::clone(&requests),
                ));
            }
        });
        Self {
            addr,
            site,
            _drain: drain,
            accept,
        }
    }

    async fn serve(root: &Root) -> Self {
        Self::start(config(root)).await
    }

    async fn get(&self, target: &str, headers: &[(&str, &str)]) -> Response {
        self.request("GET", target, headers).await
    }

    async fn request(&self, method: &str, target: &str, headers: &[(&str, &str)]) -> Response {
        let mut head = format!("{method} {target} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        self.raw(head.as_bytes(), method == "HEAD").await
    }

    /// Sends `bytes` as is on a fresh connection and reads one response.
    async fn raw(&self, bytes: &[u8], head_only: bool) -> Response {
        let stream = timeout(BOUND, TcpStream::connect(self.addr))
            .await
            .expect("connect in time")
            .expect("connect");
        exchange(stream, bytes, head_only).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn config(root: &Root) -> SiteConfig {
    SiteConfig {
        root: root.path().to_path_buf(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client.

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }
}

/// Writes `request` and reads one response; the server closes after it (`Connection:
/// close`), or the connection is cut after the head for HEAD-like reads.
async fn exchange<S>(mut stream: S, request: &[u8], head_only: bool) -> Response
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    timeout(BOUND, stream.write_all(request))
        .await
        .expect("write in time")
        .expect("write");
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(pos) = find(&buf, b"\r\n\r\n") {
            break pos + 4;
        }
        let mut chunk = [0u8; 8192];
        let n = timeout(BOUND, stream.read(&mut chunk))
            .await
            .expect("response head in time")
            .expect("read");
        assert!(n > 0, "connection closed before a response head: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).expect("ASCII head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').expect("header line");
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let mut response = Response {
        status,
        headers,
        body: buf[head_end..].to_vec(),
    };
    if head_only || status == 304 || status == 204 {
        response.body.clear();
        return response;
    }
    // Read to EOF: every request here asks for Connection: close, and hyper closes after
    // error responses it generates itself.
    loop {
        let mut chunk = [0u8; 65536];
        let n = timeout(BOUND, stream.read(&mut chunk))
            .await
            .expect("response body in time")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        response.body.extend_from_slice(&chunk[..n]);
    }
    if response
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        response.body = dechunk(&response.body);
    } else if let Some(len) = response.header("content-length") {
        let len: usize = len.parse().expect("content-length");
        assert_eq!(
            response.body.len(),
            len,
            "body length matches Content-Length"
        );
    }
    response
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = find(data, b"\r\n").expect("chunk size line");
        let size_text = std::str::from_utf8(&data[..line_end]).expect("chunk size");
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .expect("hex chunk size");
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

fn decode(coding: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "zstd" => out = zstd::stream::decode_all(data).expect("zstd"),
        "br" => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .expect("br");
        }
        "gzip" => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .expect("gzip");
        }
        other => panic!("unexpected coding {other}"),
    }
    out
}

// =======================================================================================
// Compression

#[tokio::test]
async fn negotiates_each_coding_and_round_trips() {
    let root = Root::new("codings");
    let js = text(20_000);
    root.write("app.js", &js);
    let server = Server::serve(&root).await;
    let identity = server.get("/app.js", &[]).await;
    assert_eq!(identity.status, 200);
    assert!(
        !identity.has("content-encoding"),
        "no Accept-Encoding: identity"
    );
    assert_eq!(identity.header("vary"), Some("Accept-Encoding"));
    assert_eq!(identity.body, js);
    let identity_etag = identity.header("etag").expect("etag").to_owned();

    for (accept, coding, suffix) in [
        ("gzip, deflate, br, zstd", "zstd", "-zst\""),
        ("gzip, br", "br", "-br\""),
        ("gzip", "gzip", "-gz\""),
        ("zstd;q=0.1, gzip;q=0.9", "gzip", "-gz\""),
    ] {
        let r = server.get("/app.js", &[("Accept-Encoding", accept)]).await;
        assert_eq!(r.status, 200, "{accept}");
        assert_eq!(r.header("content-encoding"), Some(coding), "{accept}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_eq!(
            r.header("content-type"),
            Some("text/javascript; charset=utf-8")
        );
        let etag = r.header("etag").expect("etag");
        assert!(etag.ends_with(suffix), "{etag} is coding-specific");
        assert_eq!(
            etag.trim_end_matches(suffix),
            identity_etag.trim_end_matches('"')
        );
        assert!(r.body.len() < js.len() / 2, "{coding} actually compresses");
        assert_eq!(decode(coding, &r.body), js, "{coding} round trip");
    }

    let r = server
        .get("/app.js", &[("Accept-Encoding", "gzip;q=0, identity")])
        .await;
    assert!(!r.has("content-encoding"));
    assert_eq!(r.body, js);
}

#[tokio::test]
async fn conditionals_match_per_representation() {
    let root = Root::new("conditional-codings");
    root.write("style.css", &text(5_000));
    let server = Server::serve(&root).await;
    let zst = server
        .get("/style.css", &[("Accept-Encoding", "zstd")])
        .await;
    let zst_etag = zst.header("etag").expect("etag").to_owned();
    let plain = server.get("/style.css", &[]).await;
    let plain_etag = plain.header("etag").expect("etag").to_owned();
    assert_ne!(zst_etag, plain_etag);

    let r = server
        .get(
            "/style.css",
            &[("Accept-Encoding", "zstd"), ("If-None-Match", &zst_etag)],
        )
        .await;
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(zst_etag.as_str()));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"), "304 keeps Vary");

    // The client holds identity but now asks for zstd: it needs the zstd bytes.
    let r = server
        .get(
            "/style.css",
            &[("Accept-Encoding", "zstd"), ("If-None-Match", &plain_etag)],
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("zstd"));

    // And the reverse.
    let r = server
        .get("/style.css", &[("If-None-Match", &zst_etag)])
        .await;
    assert_eq!(r.status, 200);
    assert!(!r.has("content-encoding"));

    // HEAD reports the coded length a GET would send.
    let head = server
        .request("HEAD", "/style.css", &[("Accept-Encoding", "zstd")])
        .await;
    assert_eq!(head.header("content-encoding"), Some("zstd"));
    assert_eq!(
        head.header("content-length"),
        Some(zst.body.len().to_string().as_str())
    );
}

#[tokio::test]
async fn ranges_are_served_identity() {
    let root = Root::new("range-identity");
    let data = text(10_000);
    root.write("doc.txt", &data);
    let server = Server::serve(&root).await;
    let r = server
        .get(
            "/doc.txt",
            &[
                ("Accept-Encoding", "gzip, br, zstd"),
                ("Range", "bytes=10-19"),
            ],
        )
        .await;
    assert_eq!(r.status, 206);
    assert!(!r.has("content-encoding"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.body, &data[10..20]);
    assert!(!r.header("etag").expect("etag").ends_with("-zst\""));
}

#[tokio::test]
async fn compressed_media_and_tiny_files_are_left_alone() {
    let root = Root::new("media");
    root.write("photo.png", &text(5_000));
    root.write("font.woff2", &text(5_000));
    root.write("tiny.txt", b"hi");
    let server = Server::serve(&root).await;
    for path in ["/photo.png", "/font.woff2"] {
        let r = server
            .get(path, &[("Accept-Encoding", "gzip, br, zstd")])
            .await;
        assert_eq!(r.status, 200);
        assert!(!r.has("content-encoding"), "{path}");
        assert!(!r.has("vary"), "{path} never varies");
    }
    let r = server
        .get("/tiny.txt", &[("Accept-Encoding", "gzip")])
        .await;
    assert!(!r.has("content-encoding"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
}

#[tokio::test]
async fn files_over_max_compress_size_are_identity() {
    let root = Root::new("max-size");
    root.write("big.txt", &text(4_000));
    root.write("ok.txt", &text(1_000));
    let server = Server::start(SiteConfig {
        max_compress_size: 2_000,
        ..config(&root)
    })
    .await;
    let r = server.get("/big.txt", &[("Accept-Encoding", "gzip")]).await;
    assert!(!r.has("content-encoding"));
    assert_eq!(r.body.len(), 4_000);
    let r = server.get("/ok.txt", &[("Accept-Encoding", "gzip")]).await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
}

#[tokio::test]
async fn compression_can_be_switched_off() {
    let root = Root::new("off");
    root.write("a.txt", &text(4_000));
    let server = Server::start(SiteConfig {
        compress: false,
        ..config(&root)
    })
    .await;
    let r = server.get("/a.txt", &[("Accept-Encoding", "gzip")]).await;
    assert!(!r.has("content-encoding"));
    assert!(!r.has("vary"));
}

#[tokio::test]
async fn precompressed_sidecars_are_used_when_fresh() {
    let root = Root::new("sidecar");
    let css = text(3_000);
    let original = root.write("app.css", &css);
    // A sidecar whose bytes differ from what we would produce, so we can tell it was used.
    let br = {
        let mut out = Vec::new();
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 1, 20);
        std::io::Write::write_all(&mut w, &css).expect("br");
        drop(w);
        out
    };
    let sidecar = root.write("app.css.br", &br);
    let now = SystemTime::now();
    set_mtime(&original, now - Duration::from_secs(100));
    set_mtime(&sidecar, now - Duration::from_secs(50));
    let server = Server::serve(&root).await;

    // A sidecar for an acceptable coding wins over encoding a preferred one ourselves.
    let r = server
        .get("/app.css", &[("Accept-Encoding", "zstd, br")])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
    assert_eq!(r.body, br, "the sidecar's bytes");
    assert!(r.header("etag").expect("etag").ends_with("-br\""));
    assert!(
        server.site.encoded_cache().is_empty(),
        "nothing was encoded"
    );

    // Stale: the original was edited after the sidecar was made.
    set_mtime(&original, now);
    let r = server.get("/app.css", &[("Accept-Encoding", "br")]).await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_ne!(r.body, br, "a stale sidecar is ignored");
    assert_eq!(decode("br", &r.body), css);

    // The sidecar itself is still an ordinary file.
    let r = server.get("/app.css.br", &[]).await;
    assert_eq!(r.body, br);
}

/// Waits (bounded) until every file in `paths` changed at least [`FILE_CACHE_SETTLE`] ago,
/// so the file cache may keep them.
async fn until_settled(paths: &[&Path]) {
    use std::os::unix::fs::MetadataExt;
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let newest = paths
            .iter()
            .map(|p| {
                let m = std::fs::symlink_metadata(p).expect("stat");
                std::time::UNIX_EPOCH + Duration::new(m.ctime() as u64, m.ctime_nsec() as u32)
            })
            .max()
            .expect("paths");
        let age = SystemTime::now().duration_since(newest).unwrap_or_default();
        let wanted = FILE_CACHE_SETTLE + Duration::from_millis(50);
        if age >= wanted {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "files never settled"
        );
        tokio::time::sleep(wanted - age).await;
    }
}

/// Writes `files` under `root` and waits until the file cache may keep them.
async fn settled_files(root: &Root, files: &[(&str, &[u8])]) {
    let paths: Vec<PathBuf> = files
        .iter()
        .map(|(rel, data)| root.write(rel, data))
        .collect();
    let paths: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    until_settled(&paths).await;
}

#[cfg(unix)]
#[tokio::test]
async fn the_file_cache_serves_only_the_file_as_it_is_now() {
    use std::os::unix::fs::PermissionsExt;
    let root = Root::new("file-cache");
    settled_files(
        &root,
        &[
            ("rewritten.txt", b"version-1"),
            ("removed.txt", b"soon gone"),
            ("locked.txt", b"private now"),
        ],
    )
    .await;
    let server = Server::serve(&root).await;
    let first = server.get("/rewritten.txt", &[]).await;
    assert_eq!(
        (first.status, first.body.as_slice()),
        (200, &b"version-1"[..])
    );
    assert_eq!(
        server.site.file_cache_usage().0,
        1,
        "a settled file is cached"
    );
    let again = server.get("/rewritten.txt", &[]).await;
    assert_eq!(again.body, b"version-1");
    assert_eq!(again.header("etag"), first.header("etag"));
    let ranged = server
        .get("/rewritten.txt", &[("Range", "bytes=2-4")])
        .await;
    assert_eq!((ranged.status, ranged.body.as_slice()), (206, &b"rsi"[..]));
    let head = server.request("HEAD", "/rewritten.txt", &[]).await;
    assert_eq!(head.header("content-length"), Some("9"));

    // Rewritten in place with as many bytes: the new content, never the cached one.
    root.write("rewritten.txt", b"version-2");
    let r = server.get("/rewritten.txt", &[]).await;
    assert_eq!(r.body, b"version-2");
    assert_ne!(r.header("etag"), first.header("etag"));
    assert_eq!(server.get("/rewritten.txt", &[]).await.body, b"version-2");

    assert_eq!(server.get("/removed.txt", &[]).await.status, 200);
    std::fs::remove_file(root.path().join("removed.txt")).expect("rm");
    assert_eq!(server.get("/removed.txt", &[]).await.status, 404);

    // Permission bits do not bind root; the identity check is unit-tested either way.
    if !rustix::process::geteuid().is_root() {
        assert_eq!(server.get("/locked.txt", &[]).await.status, 200);
        let mode = std::fs::Permissions::from_mode(0o000);
        std::fs::set_permissions(root.path().join("locked.txt"), mode).expect("chmod");
        assert_eq!(server.get("/locked.txt", &[]).await.status, 403);
    }
}

#[cfg(unix)]
#[tokio::test]
async fn the_file_cache_never_widens_what_links_reach() {
    use std::os::unix::fs::symlink;
    let root = Root::new("file-cache-links");
    let outside = Root::new("file-cache-outside");
    settled_files(
        &root,
        &[
            ("target.txt", b"inside"),
            ("dir/nested.txt", b"nested bytes"),
        ],
    )
    .await;
    settled_files(&outside, &[("secret.txt", b"SECRET")]).await;
    symlink("target.txt", root.path().join("link.txt")).expect("symlink");
    let server = Server::serve(&root).await;

    // A link retargeted out of the root is refused at once: the target is another file.
    assert_eq!(server.get("/link.txt", &[]).await.body, b"inside");
    let swap = root.path().join("link.tmp");
    symlink(outside.path().join("secret.txt"), &swap).expect("symlink");
    std::fs::rename(&swap, root.path().join("link.txt")).expect("retarget");
    let r = server.get("/link.txt", &[]).await;
    assert_eq!(r.status, 403);
    assert!(!r.body.windows(6).any(|w| w == b"SECRET"));

    // A directory moved out and linked back holds the very file that was proven beneath
    // the root; it is refused once the proof is due again (bounded, see the module).
    assert_eq!(
        server.get("/dir/nested.txt", &[]).await.body,
        b"nested bytes"
    );
    let moved = outside.path().join("dir");
    std::fs::rename(root.path().join("dir"), &moved).expect("move out");
    symlink(&moved, root.path().join("dir")).expect("link back");
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let r = server.get("/dir/nested.txt", &[]).await;
        if r.status == 403 {
            break;
        }
        assert_eq!(
            r.body, b"nested bytes",
            "only the proven bytes, until refused"
        );
        assert!(tokio::time::Instant::now() < deadline, "never re-proven");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_file_cache_keeps_settled_files_within_its_budget() {
    let root = Root::new("file-cache-budget");
    let many: Vec<(String, Vec<u8>)> = (0..8u8)
        .map(|i| (format!("many/{i}.txt"), vec![b'0' + i; 600]))
        .collect();
    let files: Vec<(&str, &[u8])> = many
        .iter()
        .map(|(name, data)| (name.as_str(), data.as_slice()))
        .collect();
    settled_files(&root, &files).await;

    // Room for four entries of 600 bytes and their bookkeeping (about 1 KB each), so an
    // entry is within the quarter of the budget one entry may take, and eight do not fit.
    let budget = 4_400;
    let small = Server::start(SiteConfig {
        file_cache_size: budget,
        ..config(&root)
    })
    .await;
    for (name, data) in &many {
        assert_eq!(&small.get(&format!("/{name}"), &[]).await.body, data);
    }
    let (kept, used) = small.site.file_cache_usage();
    assert!((1..8).contains(&kept), "{kept} files kept");
    assert!(used as u64 <= budget, "{used} bytes kept");

    let before = small.site.file_cache_usage();
    root.write("fresh.txt", b"just written");
    assert_eq!(small.get("/fresh.txt", &[]).await.body, b"just written");
    assert_eq!(
        small.site.file_cache_usage(),
        before,
        "a fresh file is not kept"
    );

    let off = Server::start(SiteConfig {
        file_cache_size: 0,
        ..config(&root)
    })
    .await;
    assert_eq!(off.get("/many/0.txt", &[]).await.body, many[0].1);
    assert_eq!(off.site.file_cache_usage(), (0, 0), "0 disables the cache");
}

#[tokio::test]
async fn the_encoded_cache_is_used_and_bounded() {
    let root = Root::new("cache");
    let data = text(30_000);
    root.write("a.html", &data);
    root.write("b.html", &text(31_000));
    let server = Server::serve(&root).await;
    let first = server.get("/a.html", &[("Accept-Encoding", "br")]).await;
    let cache = server.site.encoded_cache();
    assert_eq!(cache.len(), 1);
    let used = cache.used();
    let second = server.get("/a.html", &[("Accept-Encoding", "br")]).await;
    assert_eq!(first.body, second.body);
    assert_eq!(cache.len(), 1, "served from the cache");
    assert_eq!(cache.used(), used);
    server.get("/a.html", &[("Accept-Encoding", "gzip")]).await;
    assert_eq!(cache.len(), 2, "one entry per coding");

    let off = Server::start(SiteConfig {
        compression_cache_size: 0,
        ..config(&root)
    })
    .await;
    let r = off.get("/a.html", &[("Accept-Encoding", "br")]).await;
    assert_eq!(decode("br", &r.body), data);
    assert!(off.site.encoded_cache().is_empty(), "0 disables the cache");

    // A budget that fits one entry keeps the most recent.
    let small = Server::start(SiteConfig {
        compression_cache_size: (used * 4 + used / 2) as u64,
        ..config(&root)
    })
    .await;
    small.get("/a.html", &[("Accept-Encoding", "br")]).await;
    small.get("/b.html", &[("Accept-Encoding", "br")]).await;
    let cache = small.site.encoded_cache();
    assert!(cache.used() <= used * 4 + used / 2);
}

#[tokio::test]
async fn large_files_are_encoded_while_streaming() {
    let root = Root::new("stream");
    let data = text(3 * 1024 * 1024 + 17);
    root.write("big.json", &data);
    let server = Server::serve(&root).await;
    let r = server
        .get("/big.json", &[("Accept-Encoding", "zstd")])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("zstd"));
    assert!(!r.has("content-length"), "length unknown up front");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(decode("zstd", &r.body), data);
    assert!(
        server.site.encoded_cache().is_empty(),
        "streamed output is not cached"
    );
}

// =======================================================================================
// Repr-Digest

fn sha256_field(data: &[u8]) -> String {
    use base64::Engine;
    use sha2::Digest;
    format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(data))
    )
}

fn sha512_field(data: &[u8]) -> String {
    use base64::Engine;
    use sha2::Digest;
    format!(
        "sha-512=:{}:",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(data))
    )
}

#[tokio::test]
async fn repr_digest_covers_the_whole_identity_representation() {
    let root = Root::new("digest-identity");
    let small = text(1_000);
    let large = text(700_000);
    root.write("small.txt", &small);
    root.write("large.bin", &large);
    let server = Server::serve(&root).await;

    let r = server.get("/small.txt", &[]).await;
    assert!(!r.has("repr-digest"), "only when asked");

    let want = [("Want-Repr-Digest", "sha-256=1")];
    let r = server.get("/small.txt", &want).await;
    assert_eq!(r.header("repr-digest"), Some(sha256_field(&small).as_str()));

    let r = server.get("/large.bin", &want).await;
    assert_eq!(r.body, large);
    assert_eq!(r.header("repr-digest"), Some(sha256_field(&large).as_str()));

    // A range still reports the digest of the whole representation.
    let r = server
        .get(
            "/large.bin",
            &[
                ("Want-Repr-Digest", "sha-256=1"),
                ("Range", "bytes=100-199"),
            ],
        )
        .await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &large[100..200]);
    assert_eq!(r.header("repr-digest"), Some(sha256_field(&large).as_str()));

    // HEAD carries it too.
    let r = server.request("HEAD", "/large.bin", &want).await;
    assert_eq!(r.header("repr-digest"), Some(sha256_field(&large).as_str()));

    let r = server
        .get(
            "/large.bin",
            &[("Want-Repr-Digest", "sha-256=2, sha-512=7")],
        )
        .await;
    assert_eq!(r.header("repr-digest"), Some(sha512_field(&large).as_str()));

    let r = server
        .get("/large.bin", &[("Want-Repr-Digest", "sha-256=0, md5=9")])
        .await;
    assert!(!r.has("repr-digest"), "nothing acceptable");
    assert_eq!(server.site.flights_in_flight(), 0, "nothing retained");
}

#[tokio::test]
async fn repr_digest_of_a_coded_representation_covers_the_encoded_bytes() {
    let root = Root::new("digest-coded");
    let data = text(200_000);
    root.write("page.html", &data);
    let server = Server::serve(&root).await;
    for _ in 0..2 {
        // Once encoding, once from the cache.
        let r = server
            .get(
                "/page.html",
                &[
                    ("Accept-Encoding", "zstd"),
                    ("Want-Repr-Digest", "sha-256=3"),
                ],
            )
            .await;
        assert_eq!(r.header("content-encoding"), Some("zstd"));
        assert_eq!(
            r.header("repr-digest"),
            Some(sha256_field(&r.body).as_str())
        );
        assert_ne!(r.body, data);
    }
}

#[tokio::test]
async fn concurrent_digests_agree_and_leave_no_flights() {
    let root = Root::new("digest-concurrent");
    let data = text(2 * 1024 * 1024);
    root.write("big.dat", &data);
    let server = Arc::new(Server::serve(&root).await);
    let expected = sha256_field(&data);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let server = Arc::clone(&server);
        tasks.push(tokio::spawn(async move {
            server
                .request("HEAD", "/big.dat", &[("Want-Repr-Digest", "sha-256=1")])
                .await
        }));
    }
    for task in tasks {
        let r = timeout(BOUND, task).await.expect("in time").expect("task");
        assert_eq!(r.header("repr-digest"), Some(expected.as_str()));
    }
    assert_eq!(server.site.flights_in_flight(), 0);
}

// =======================================================================================
// Access control and headers

fn basic(user_pass: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

#[tokio::test]
async fn basic_auth_guards_everything_but_preflights() {
    let root = Root::new("auth");
    root.write("a.txt", b"protected");
    // sha256("hunter2")
    let hashed = "bob:sha256:f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7";
    let server = Server::start(SiteConfig {
        auth: vec![
            "alice:s3cret".parse().expect("credential"),
            hashed.parse().expect("credential"),
        ],
        cors: true,
        cache_max_age: Some(60),
        ..config(&root)
    })
    .await;

    let r = server.get("/a.txt", &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"servery\", charset=\"UTF-8\"")
    );
    assert!(!String::from_utf8_lossy(&r.body).contains("protected"));
    let r = server.get("/missing", &[]).await;
    assert_eq!(
        r.status, 401,
        "no probing for existence without credentials"
    );

    for wrong in ["alice:s3cre", "alice:s3cret!", "bob:s3cret", "alice", ""] {
        let r = server
            .get("/a.txt", &[("Authorization", &basic(wrong))])
            .await;
        assert_eq!(r.status, 401, "{wrong:?}");
    }
    let r = server
        .get("/a.txt", &[("Authorization", &basic("alice:s3cret"))])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"protected");
    assert_eq!(
        r.header("cache-control"),
        Some("private, max-age=60"),
        "never public behind auth"
    );
    let r = server
        .get("/a.txt", &[("Authorization", &basic("bob:hunter2"))])
        .await;
    assert_eq!(r.status, 200, "hashed form");

    // A preflight carries no credentials and must not be refused.
    let r = server
        .request(
            "OPTIONS",
            "/a.txt",
            &[
                ("Origin", "https://app.example"),
                ("Access-Control-Request-Method", "GET"),
                ("Access-Control-Request-Headers", "authorization, range"),
            ],
        )
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("authorization, range")
    );
}

#[tokio::test]
async fn cors_headers_and_preflight() {
    let root = Root::new("cors");
    root.write("data.json", b"{}");
    let plain = Server::serve(&root).await;
    let r = plain
        .get("/data.json", &[("Origin", "https://app.example")])
        .await;
    assert!(!r.has("access-control-allow-origin"), "off by default");

    let server = Server::start(SiteConfig {
        cors: true,
        ..config(&root)
    })
    .await;
    let r = server
        .get("/data.json", &[("Origin", "https://app.example")])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert!(
        r.header("access-control-expose-headers")
            .is_some_and(|v| v.contains("ETag"))
    );
    let r = server.get("/nope.json", &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("*"),
        "errors are readable cross-origin too"
    );
    let r = server
        .request(
            "OPTIONS",
            "/data.json",
            &[
                ("Origin", "https://app.example"),
                ("Access-Control-Request-Method", "GET"),
            ],
        )
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET, HEAD, OPTIONS")
    );
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert!(r.has("access-control-max-age"));
    // A plain OPTIONS is still answered with Allow.
    let r = server.request("OPTIONS", "/data.json", &[]).await;
    assert_eq!(r.status, 204);
    assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
}

#[tokio::test]
async fn spa_falls_back_to_the_index_for_html_navigations() {
    let root = Root::new("spa");
    root.write("index.html", b"<div id=app></div>");
    root.write("assets/app.js", b"console.log(1)");
    let server = Server::start(SiteConfig {
        spa: true,
        cache_max_age: Some(3600),
        ..config(&root)
    })
    .await;
    let html = ("Accept", "text/html,application/xhtml+xml,*/*;q=0.8");
    let r = server.get("/settings/profile", &[html]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<div id=app></div>");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(r.header("vary").is_some_and(|v| v.contains("Accept")));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    let r = server.request("HEAD", "/deep/link", &[html]).await;
    assert_eq!(r.status, 200);

    // Real files are served as such; missing assets fetched by scripts stay 404.
    let r = server.get("/assets/app.js", &[html]).await;
    assert_eq!(r.body, b"console.log(1)");
    assert_eq!(r.header("cache-control"), Some("public, max-age=3600"));
    let r = server.get("/assets/missing.js", &[("Accept", "*/*")]).await;
    assert_eq!(r.status, 404);
    // Hidden paths are never served, fallback or not.
    let r = server.get("/.env", &[html]).await;
    assert_eq!(r.status, 404);

    let off = Server::serve(&root).await;
    assert_eq!(off.get("/settings/profile", &[html]).await.status, 404);
}

#[tokio::test]
async fn cache_and_security_headers() {
    let root = Root::new("headers");
    root.write("a.txt", b"a");
    let server = Server::serve(&root).await;
    let r = server.get("/a.txt", &[]).await;
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert!(r.has("x-frame-options"));
    assert!(r.has("referrer-policy"));
    assert!(!r.has("strict-transport-security"), "never over cleartext");
    let etag = r.header("etag").expect("etag").to_owned();
    let r = server.get("/a.txt", &[("If-None-Match", &etag)]).await;
    assert_eq!(r.status, 304);
    assert_eq!(
        r.header("cache-control"),
        Some("no-cache"),
        "304 repeats it"
    );

    let server = Server::start(SiteConfig {
        security_headers: false,
        cache_max_age: Some(120),
        hsts: true,
        ..config(&root)
    })
    .await;
    let r = server.get("/a.txt", &[]).await;
    assert_eq!(r.header("cache-control"), Some("public, max-age=120"));
    assert!(!r.has("x-content-type-options"));
    assert!(!r.has("x-frame-options"));
    assert!(!r.has("referrer-policy"));
    assert!(!r.has("strict-transport-security"), "hsts needs TLS");
}

// =======================================================================================
// TLS

mod tls_support {
    use super::*;
    use servery::http::{Activity, Transport, serve_connection_over};
    use servery::tls::{self, Identity};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, pki_types::ServerName};

    pub struct TlsServer {
        pub addr: SocketAddr,
        pub identity: Identity,
        accept: tokio::task::JoinHandle<()>,
        _drain: watch::Sender<bool>,
    }

    impl Drop for TlsServer {
        fn drop(&mut self) {
            self.accept.abort();
        }
    }

    pub async fn start(config: SiteConfig) -> TlsServer {
        // What a parent would do once and hand to every worker.
        let identity = Identity::self_signed(&["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("self-signed identity");
        // What each worker does with what it was handed.
        let handed_over = Identity::from_pem(identity.cert_pem.clone(), identity.key_pem.clone());
        let acceptor = tls::acceptor(handed_over.server_config().expect("server config"));
        let site = Arc::new(Site::open(config).expect("open site"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (drain, drain_rx) = watch::channel(false);
        let requests = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let site = Arc::clone(&site);
                let drain_rx = drain_rx.clone();
                let requests = Arc::clone(&requests);
                tokio::spawn(async move {
                    // A failed handshake only ends this connection.
                    if let Ok(stream) =
                        tls::accept(&acceptor, tcp, std::time::Duration::from_secs(10)).await
                    {
                        let activity = Activity::new(tokio::time::Instant::now());
                        serve_connection_over(
                            site,
                            stream,
                            drain_rx,
                            requests,
                            Transport::Tls,
                            activity,
                        )
                        .await;
                    }
                });
            }
        });
        TlsServer {
            addr,
            identity,
            accept,
            _drain: drain,
        }
    }

    pub async fn connect(
        server: &TlsServer,
        alpn: &[u8],
    ) -> tokio_rustls::client::TlsStream<TcpStream> {
        let mut roots = RootCertStore::empty();
        for cert in server.identity.certificates().expect("certs") {
            roots.add(cert).expect("trust the self-signed certificate");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        let connector = TlsConnector::from(Arc::new(config));
        let tcp = timeout(BOUND, TcpStream::connect(server.addr))
            .await
            .expect("connect in time")
            .expect("connect");
        let name = ServerName::try_from("localhost").expect("name");
        timeout(BOUND, connector.connect(name, tcp))
            .await
            .expect("handshake in time")
            .expect("handshake: the client trusts the generated certificate")
    }
}

#[tokio::test]
async fn tls_serves_http1_and_h2_by_alpn_with_hsts() {
    use http_body_util::BodyExt;
    let root = Root::new("tls");
    root.write("hello.txt", b"hello over tls");
    let server = tls_support::start(SiteConfig {
        hsts: true,
        ..config(&root)
    })
    .await;

    // HTTP/1.1
    let stream = tls_support::connect(&server, b"http/1.1").await;
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let r = exchange(
        stream,
        b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello over tls");
    assert_eq!(
        r.header("strict-transport-security"),
        Some("max-age=31536000")
    );

    // HTTP/2
    let stream = tls_support::connect(&server, b"h2").await;
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2 handshake");
    let driver = tokio::spawn(conn);
    let request = http::Request::get("https://localhost/hello.txt")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let response = timeout(BOUND, sender.send_request(request))
        .await
        .expect("h2 response in time")
        .expect("h2 response");
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    assert_eq!(
        response
            .headers()
            .get("strict-transport-security")
            .map(|v| v.as_bytes()),
        Some(&b"max-age=31536000"[..])
    );
    let body = timeout(BOUND, response.into_body().collect())
        .await
        .expect("h2 body in time")
        .expect("h2 body")
        .to_bytes();
    assert_eq!(&body[..], b"hello over tls");
    drop(sender);
    driver.abort();
}

#[tokio::test]
async fn cleartext_to_a_tls_port_fails_fast_without_harm() {
    let root = Root::new("tls-plain");
    root.write("a.txt", b"a");
    let server = tls_support::start(config(&root)).await;
    let mut tcp = timeout(BOUND, TcpStream::connect(server.addr))
        .await
        .expect("connect in time")
        .expect("connect");
    tcp.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    // The handshake fails; the server sends at most an alert and closes.
    let mut buf = Vec::new();
    timeout(BOUND, tcp.read_to_end(&mut buf))
        .await
        .expect("closed in time")
        .ok();
    assert!(
        !buf.starts_with(b"HTTP/"),
        "no cleartext HTTP on the TLS port"
    );
    // The server is still fine.
    let stream = tls_support::connect(&server, b"http/1.1").await;
    let r = exchange(
        stream,
        b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(!r.has("strict-transport-security"), "hsts is opt-in");
}

// =======================================================================================
// Bad input: a clear status, never a panic or a hang.

#[tokio::test]
async fn malformed_request_lines_get_400() {
    let root = Root::new("bad-line");
    root.write("a.txt", b"a");
    let server = Server::serve(&root).await;
    for raw in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET\r\n\r\n",
        b"GET /a.txt HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET /a.txt HTTP/1.1 extra\r\nHost: x\r\n\r\n",
        b"GET /a.txt HTTP/1.1\r\nNo colon here\r\n\r\n",
        b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"G(T /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        let r = server.raw(raw, false).await;
        assert_eq!(r.status, 400, "{:?}", String::from_utf8_lossy(raw));
    }
    // Paths that parse as HTTP but not as a servable path are refused by the site.
    for target in ["/a%00.txt", "/..%2f..%2fetc/passwd", "*"] {
        let r = server.get(target, &[]).await;
        assert_eq!(r.status, 400, "{target}");
    }
    assert_eq!(server.get("/a.txt", &[]).await.status, 200, "still serving");
}

#[tokio::test]
async fn oversized_headers_get_431() {
    let root = Root::new("big-head");
    root.write("a.txt", b"a");
    let server = Server::serve(&root).await;
    let huge = "x".repeat(servery::http::conn::MAX_REQUEST_HEAD + 1);
    let r = server.get("/a.txt", &[("X-Huge", &huge)]).await;
    assert_eq!(r.status, 431);
    // Many moderate fields adding up past the bound count the same.
    let field = "y".repeat(1000);
    let mut raw = String::from("GET /a.txt HTTP/1.1\r\nHost: x\r\n");
    for i in 0..(servery::http::conn::MAX_REQUEST_HEAD / 1000 + 2) {
        raw.push_str(&format!("X-F{i}: {field}\r\n"));
    }
    raw.push_str("\r\n");
    let r = server.raw(raw.as_bytes(), false).await;
    assert_eq!(r.status, 431);
    // Just under the bound is fine.
    let fits = "z".repeat(servery::http::conn::MAX_REQUEST_HEAD / 2);
    let r = server.get("/a.txt", &[("X-Fits", &fits)]).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn oversized_h2_header_lists_get_431_and_the_connection_lives_on() {
    let root = Root::new("big-head-h2");
    root.write("a.txt", b"a");
    let server = Server::serve(&root).await;
    let stream = TcpStream::connect(server.addr).await.expect("connect");
    // h2c with prior knowledge.
    let (mut sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .max_header_list_size(1 << 20)
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    let driver = tokio::spawn(conn);
    let get = |extra: Option<String>| {
        let mut request = http::Request::get(format!("http://{}/a.txt", server.addr));
        if let Some(value) = extra {
            request = request.header("x-huge", value);
        }
        request
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request")
    };
    let huge = "x".repeat(servery::http::conn::MAX_REQUEST_HEAD + 1);
    let refused = timeout(BOUND, sender.send_request(get(Some(huge))))
        .await
        .expect("answered in time")
        .expect("a response, not a stream reset");
    assert_eq!(refused.status(), 431);
    // One stream was refused; the connection serves the next request.
    sender.ready().await.expect("connection still usable");
    let ok = timeout(BOUND, sender.send_request(get(None)))
        .await
        .expect("answered in time")
        .expect("response");
    assert_eq!(ok.status(), 200);
    drop(sender);
    let _ = timeout(BOUND, driver).await;
}

#[tokio::test]
async fn unsatisfiable_ranges_get_416() {
    let root = Root::new("bad-range");
    root.write("ten.txt", b"0123456789");
    let server = Server::serve(&root).await;
    for range in ["bytes=10-", "bytes=100-200", "bytes=-0"] {
        let r = server
            .get("/ten.txt", &[("Range", range), ("Accept-Encoding", "gzip")])
            .await;
        assert_eq!(r.status, 416, "{range}");
        assert_eq!(r.header("content-range"), Some("bytes */10"));
    }
    // Malformed ranges are ignored (200), as RFC 9110 allows.
    let r = server.get("/ten.txt", &[("Range", "bytes=z-1")]).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn unsupported_methods_get_405_with_allow() {
    let root = Root::new("methods");
    root.write("pot", b"coffee");
    let server = Server::serve(&root).await;
    for method in ["BREW", "PUT", "DELETE", "POST", "PATCH", "PROPFIND"] {
        let r = server.request(method, "/pot", &[]).await;
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    }
    // With a body the server does not want: still a clean 405.
    let r = server
        .raw(
            b"BREW /pot HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nmilk!",
            false,
        )
        .await;
    assert_eq!(r.status, 405);
}

#[tokio::test]
async fn truncated_and_silent_clients_do_not_hang_the_server() {
    let root = Root::new("truncated");
    root.write("a.txt", b"a");
    let server = Server::serve(&root).await;
    // Half a request, then the client goes away.
    {
        let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
        tcp.write_all(b"GET /a.txt HTTP/1.1\r\nHo")
            .await
            .expect("write");
    }
    // A client that opens and says nothing, while others are served.
    let _silent = TcpStream::connect(server.addr).await.expect("connect");
    // Random bytes that are not HTTP at all.
    let noise: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    let r = server.raw(&noise, false).await;
    assert_eq!(r.status, 400);
    assert_eq!(server.get("/a.txt", &[]).await.status, 200);
}
