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

mod bad_input;
mod caches;
mod coding;
mod digest;
mod policy;
mod tls;
