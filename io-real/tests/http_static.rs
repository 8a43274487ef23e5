//! Static serving end to end: a real listener, `serve_connection`, and a raw TCP client that
//! writes request bytes itself and parses what comes back. Every wait is bounded.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use servery::http::{Site, SiteConfig, serve_connection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::timeout;

const BOUND: Duration = Duration::from_secs(10);
const HELLO: &[u8] = b"hello, servery\n";
const SECRET: &[u8] = b"outside the root";

// ---------------------------------------------------------------------------------------
// A temporary tree: <base>/root is served, <base>/outside must never be reachable.

struct Tree {
    base: PathBuf,
}

impl Tree {
    fn new(test: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!(
            "servery-http-static-{}-{n}-{test}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        let tree = Self { base };
        let root = tree.root();
        std::fs::create_dir_all(root.join("dir/sub")).expect("mkdir");
        std::fs::create_dir_all(root.join("site")).expect("mkdir");
        std::fs::create_dir_all(tree.outside()).expect("mkdir");
        std::fs::write(root.join("hello.txt"), HELLO).expect("write");
        std::fs::write(root.join(".secret"), b"dotfile").expect("write");
        std::fs::write(root.join("dir/<b>&\"x\""), b"tricky").expect("write");
        std::fs::write(root.join("dir/small.bin"), b"12345").expect("write");
        std::fs::write(root.join("dir/.hidden"), b"hidden").expect("write");
        std::fs::write(root.join("site/index.html"), b"<p>index</p>").expect("write");
        std::fs::write(tree.outside().join("secret.txt"), SECRET).expect("write");
        tree
    }

    fn root(&self) -> PathBuf {
        self.base.join("root")
    }

    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// Deterministic non-repeating-ish content so misplaced offsets show up.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i / 251 % 256) as u8)
        .collect()
}

// ---------------------------------------------------------------------------------------
// The server under test.

struct Server {
    addr: SocketAddr,
    drain: watch::Sender<bool>,
    requests: Arc<AtomicU64>,
    conns: mpsc::UnboundedReceiver<JoinHandle<()>>,
    accept: JoinHandle<()>,
}

impl Server {
    async fn start(root: &Path, show_hidden: bool) -> Self {
        let site = Arc::new(
            Site::open(SiteConfig {
                root: root.to_path_buf(),
                show_hidden,
                ..Default::default()
            })
            .expect("open site"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (drain, drain_rx) = watch::channel(false);
        let requests = Arc::new(AtomicU64::new(0));
        let (conn_tx, conns) = mpsc::unbounded_channel();
        let counter = Arc::clone(&requests);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                stream.set_nodelay(true).expect("nodelay");
                let task = tokio::spawn(serve_connection(
                    Arc::clone(&site),
                    stream,
                    drain_rx.clone(),
                    Arc::clone(&counter),
                ));
                if conn_tx.send(task).is_err() {
                    return;
                }
            }
        });
        Self {
            addr,
            drain,
            requests,
            conns,
            accept,
        }
    }

    async fn connect(&self) -> Client {
        let stream = timeout(BOUND, TcpStream::connect(self.addr))
            .await
            .expect("connect in time")
            .expect("connect");
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// One request on a fresh connection.
    async fn get(&self, target: &str, headers: &[(&str, &str)]) -> Response {
        self.request("GET", target, headers).await
    }

    async fn request(&self, method: &str, target: &str, headers: &[(&str, &str)]) -> Response {
        let mut client = self.connect().await;
        client.send(method, target, headers).await;
        client.response(method == "HEAD").await
    }

    /// The task serving the next accepted connection, in accept order.
    async fn next_conn(&mut self) -> JoinHandle<()> {
        timeout(BOUND, self.conns.recv())
            .await
            .expect("connection accepted in time")
            .expect("accept loop alive")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

// ---------------------------------------------------------------------------------------
// A raw HTTP/1.1 client.

#[derive(Debug)]
struct Response {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn send(&mut self, method: &str, target: &str, headers: &[(&str, &str)]) {
        let mut raw = format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\n");
        for (name, value) in headers {
            raw.push_str(&format!("{name}: {value}\r\n"));
        }
        raw.push_str("\r\n");
        self.write(raw.as_bytes()).await;
    }

    async fn write(&mut self, bytes: &[u8]) {
        timeout(BOUND, self.stream.write_all(bytes))
            .await
            .expect("write in time")
            .expect("write");
    }

    /// Reads more bytes into the buffer; returns false once the peer has closed. A reset
    /// counts as closed: a server that closes with unread request bytes resets by design.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 64 * 1024];
        match timeout(BOUND, self.stream.read(&mut chunk))
            .await
            .expect("read in time")
        {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n > 0
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => false,
            Err(e) => panic!("read: {e}"),
        }
    }

    async fn head(&mut self) -> (u16, HashMap<String, String>) {
        let end = loop {
            if let Some(pos) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break pos;
            }
            assert!(
                self.fill().await,
                "connection closed before a response head"
            );
        };
        let head = String::from_utf8(self.buf[..end].to_vec()).expect("ASCII head");
        self.buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().expect("status line");
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status code");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        (status, headers)
    }

    async fn body(&mut self, len: usize) -> Vec<u8> {
        while self.buf.len() < len {
            assert!(self.fill().await, "connection closed inside a body");
        }
        self.buf.drain(..len).collect()
    }

    async fn response(&mut self, head_request: bool) -> Response {
        let (status, headers) = self.head().await;
        let no_body = head_request || status == 304 || status == 204;
        let body = if no_body {
            Vec::new()
        } else {
            let len = headers
                .get("content-length")
                .expect("content-length")
                .parse()
                .expect("numeric length");
            self.body(len).await
        };
        Response {
            status,
            headers,
            body,
        }
    }

    /// Asserts the server closes the connection, with nothing more sent.
    async fn expect_eof(&mut self) {
        while self.fill().await {}
        assert!(
            self.buf.is_empty(),
            "unexpected bytes before close: {:?}",
            String::from_utf8_lossy(&self.buf)
        );
    }
}

// ---------------------------------------------------------------------------------------
// Files.

#[tokio::test]
async fn get_serves_the_file_with_validators_and_security_headers() {
    let tree = Tree::new("get");
    let server = Server::start(&tree.root(), false).await;
    let r = server.get("/hello.txt", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, HELLO);
    assert_eq!(
        r.header("content-length"),
        Some(HELLO.len().to_string().as_str())
    );
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert!(r.header("last-modified").is_some());
    let etag = r.header("etag").expect("etag");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && !etag.starts_with("W/"),
        "strong etag: {etag}"
    );
    // Same file, same validator.
    assert_eq!(
        server.get("/hello.txt", &[]).await.header("etag"),
        Some(etag)
    );
    assert_eq!(server.requests.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn large_files_stream_whole_and_in_ranges() {
    let tree = Tree::new("large");
    let data = pattern(1024 * 1024 + 17);
    std::fs::write(tree.root().join("big.bin"), &data).expect("write");
    let server = Server::start(&tree.root(), false).await;

    let r = server.get("/big.bin", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert!(r.body == data, "streamed body differs");

    // Crosses a chunk boundary and ends before EOF.
    let r = server
        .get("/big.bin", &[("Range", "bytes=100000-300000")])
        .await;
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 100000-300000/{}", data.len()).as_str())
    );
    assert!(r.body == data[100_000..=300_000], "ranged body differs");
}

#[tokio::test]
async fn head_sends_headers_only() {
    let tree = Tree::new("head");
    let server = Server::start(&tree.root(), false).await;
    let mut client = server.connect().await;
    client.send("HEAD", "/hello.txt", &[]).await;
    let r = client.response(true).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-length"),
        Some(HELLO.len().to_string().as_str())
    );
    assert!(r.header("etag").is_some());
    // If HEAD had leaked body bytes, they would now be parsed as the next status line.
    client.send("GET", "/hello.txt", &[]).await;
    let r = client.response(false).await;
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
}

#[tokio::test]
async fn ranges() {
    let tree = Tree::new("ranges");
    let server = Server::start(&tree.root(), false).await;
    let len = HELLO.len();

    let r = server.get("/hello.txt", &[("Range", "bytes=2-5")]).await;
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 2-5/{len}").as_str())
    );
    assert_eq!(r.body, &HELLO[2..=5]);

    let r = server.get("/hello.txt", &[("Range", "bytes=-3")]).await;
    assert_eq!((r.status, r.body.as_slice()), (206, &HELLO[len - 3..]));

    let r = server.get("/hello.txt", &[("Range", "bytes=1000-")]).await;
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes */{len}").as_str())
    );

    // Multiple ranges and garbage get the full representation.
    for value in ["bytes=0-1,3-4", "bytes=oops", "lines=1-2"] {
        let r = server.get("/hello.txt", &[("Range", value)]).await;
        assert_eq!((r.status, r.body.as_slice()), (200, HELLO), "{value}");
    }
}

#[tokio::test]
async fn conditional_requests() {
    let tree = Tree::new("conditional");
    let server = Server::start(&tree.root(), false).await;
    let first = server.get("/hello.txt", &[]).await;
    let etag = first.header("etag").expect("etag").to_owned();
    let last_modified = first
        .header("last-modified")
        .expect("last-modified")
        .to_owned();

    let r = server.get("/hello.txt", &[("If-None-Match", &etag)]).await;
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert!(r.body.is_empty());

    let r = server
        .get("/hello.txt", &[("If-Modified-Since", &last_modified)])
        .await;
    assert_eq!(r.status, 304);

    let r = server
        .get("/hello.txt", &[("If-Match", "\"not-it\"")])
        .await;
    assert_eq!(r.status, 412);
    let r = server.get("/hello.txt", &[("If-Match", &etag)]).await;
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));

    // If-Range with a stale validator: the whole file instead of the range.
    let r = server
        .get(
            "/hello.txt",
            &[("Range", "bytes=0-1"), ("If-Range", "\"stale\"")],
        )
        .await;
    assert_eq!((r.status, r.body.as_slice()), (200, HELLO));
    let r = server
        .get("/hello.txt", &[("Range", "bytes=0-1"), ("If-Range", &etag)])
        .await;
    assert_eq!((r.status, r.body.as_slice()), (206, &HELLO[..2]));
}

// ---------------------------------------------------------------------------------------
// Directories.

#[tokio::test]
async fn html_listing_escapes_names() {
    let tree = Tree::new("listing-html");
    let server = Server::start(&tree.root(), false).await;
    let r = server.get("/dir/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(r.header("content-security-policy").is_some());
    let html = r.text();
    assert!(html.contains("&lt;b&gt;&amp;&quot;x&quot;"), "{html}");
    assert!(html.contains("href=\"./%3Cb%3E%26%22x%22\""), "{html}");
    assert!(!html.contains("<b>&"), "raw name leaked into HTML: {html}");
    assert!(html.contains("href=\"./sub/\""));
    assert!(!html.contains(".hidden"), "dotfile listed: {html}");
}

#[tokio::test]
async fn json_listing_by_query_and_by_accept() {
    let tree = Tree::new("listing-json");
    let server = Server::start(&tree.root(), false).await;
    let r = server
        .get("/dir/?format=json&sort=size&order=desc", &[])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let listed: serde_json::Value = serde_json::from_slice(&r.body).expect("json body");
    let entries = listed.as_array().expect("array");
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    // Directories first, then by size descending: "<b>&\"x\"" is 6 bytes, small.bin 5.
    assert_eq!(names, ["sub", "<b>&\"x\"", "small.bin"]);
    let small = &entries[2];
    assert_eq!(small["is_dir"], false);
    assert_eq!(small["size"], 5);
    assert!(small["mtime"].as_u64().is_some_and(|t| t > 0));

    let r = server.get("/dir/", &[("Accept", "application/json")]).await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(serde_json::from_slice::<serde_json::Value>(&r.body).is_ok());
}

#[tokio::test]
async fn directory_without_slash_redirects_and_index_is_served() {
    let tree = Tree::new("redirect");
    let server = Server::start(&tree.root(), false).await;
    let r = server.get("/dir?sort=size", &[]).await;
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/dir/?sort=size"));
    // A protocol-relative redirect would be an open redirect.
    let r = server.get("//dir", &[]).await;
    assert_eq!(r.header("location"), Some("/dir/"));

    let r = server.get("/site/", &[]).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"<p>index</p>"[..]));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));

    // An `index.html` that is not a regular file does not hide the listing.
    std::fs::create_dir_all(tree.root().join("odd/index.html")).expect("mkdir");
    let r = server.get("/odd/", &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("href=\"./index.html/\""), "{}", r.text());
}

// ---------------------------------------------------------------------------------------
// Containment.

#[tokio::test]
async fn dotfiles_are_hidden_by_default() {
    let tree = Tree::new("dotfiles");
    let server = Server::start(&tree.root(), false).await;
    assert_eq!(server.get("/.secret", &[]).await.status, 404);
    assert_eq!(server.get("/%2esecret", &[]).await.status, 404);
    assert_eq!(server.get("/dir/.hidden", &[]).await.status, 404);
    assert!(!server.get("/", &[]).await.text().contains(".secret"));

    let shown = Server::start(&tree.root(), true).await;
    assert_eq!(shown.get("/.secret", &[]).await.body, b"dotfile");
    assert!(shown.get("/", &[]).await.text().contains(".secret"));
}

#[tokio::test]
async fn dot_dot_never_leaves_the_root() {
    let tree = Tree::new("dotdot");
    let server = Server::start(&tree.root(), false).await;
    for target in [
        "/../outside/secret.txt",
        "/dir/../../outside/secret.txt",
        "/%2e%2e/outside/secret.txt",
        "/dir/%2E%2E/%2e%2e/outside/secret.txt",
        "/..%2Foutside%2Fsecret.txt",
        "/dir%2F..%2F..%2Foutside%2Fsecret.txt",
        "/..%5Coutside%5Csecret.txt",
        "/hello.txt%00.png",
    ] {
        let r = server.get(target, &[]).await;
        assert_eq!(r.status, 400, "{target}");
        assert!(!r.text().contains("outside the root"), "{target}");
    }
    // Inside the root, dot-segments are fine.
    assert_eq!(server.get("/dir/../hello.txt", &[]).await.body, HELLO);
}

#[cfg(unix)]
#[tokio::test]
async fn symlinks_do_not_escape() {
    use std::os::unix::fs::symlink;
    let tree = Tree::new("symlinks");
    let root = tree.root();
    symlink("../outside/secret.txt", root.join("rel-escape")).expect("symlink");
    symlink(tree.outside().join("secret.txt"), root.join("abs-escape")).expect("symlink");
    symlink("../outside", root.join("dir-escape")).expect("symlink");
    symlink("hello.txt", root.join("inner-link")).expect("symlink");
    symlink("../hello.txt", root.join("dir/up-link")).expect("symlink");
    let server = Server::start(&root, false).await;

    for target in [
        "/rel-escape",
        "/abs-escape",
        "/dir-escape/secret.txt",
        "/dir-escape/",
    ] {
        let r = server.get(target, &[]).await;
        assert_eq!(r.status, 403, "{target}");
        assert!(!r.text().contains("outside the root"), "{target}");
    }
    // Links that stay inside the root keep working.
    assert_eq!(server.get("/inner-link", &[]).await.body, HELLO);
    assert_eq!(server.get("/dir/up-link", &[]).await.body, HELLO);
    // Escaping links are not advertised.
    let listing = server.get("/?format=json", &[]).await.text();
    assert!(!listing.contains("escape"), "{listing}");
    assert!(listing.contains("inner-link"));
}

#[cfg(unix)]
#[tokio::test]
async fn special_files_are_refused_without_blocking() {
    let tree = Tree::new("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        tree.root().join("pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    let server = Server::start(&tree.root(), false).await;
    assert_eq!(server.get("/pipe", &[]).await.status, 403);
    assert!(!server.get("/", &[]).await.text().contains("pipe"));
}

// ---------------------------------------------------------------------------------------
// Methods and malformed input.

#[tokio::test]
async fn methods() {
    let tree = Tree::new("methods");
    let server = Server::start(&tree.root(), false).await;
    let r = server
        .request("POST", "/hello.txt", &[("Content-Length", "0")])
        .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    let r = server.request("OPTIONS", "/hello.txt", &[]).await;
    assert_eq!(r.status, 204);
    assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
}

#[tokio::test]
async fn malformed_requests_get_a_status_not_a_crash() {
    let tree = Tree::new("malformed");
    let server = Server::start(&tree.root(), false).await;
    let mut client = server.connect().await;
    client.write(b"GARBAGE\r\n\r\n").await;
    let (status, _) = client.head().await;
    assert_eq!(status, 400);
    // The server is still serving.
    assert_eq!(server.get("/hello.txt", &[]).await.body, HELLO);
}

// ---------------------------------------------------------------------------------------
// Draining.

#[tokio::test]
async fn drain_closes_an_idle_keep_alive_connection() {
    let tree = Tree::new("drain-idle");
    let mut server = Server::start(&tree.root(), false).await;
    let mut client = server.connect().await;
    client.send("GET", "/hello.txt", &[]).await;
    let r = client.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), None, "keep-alive before draining");
    let conn = server.next_conn().await;

    server.drain.send(true).expect("drain");
    client.expect_eof().await;
    timeout(BOUND, conn)
        .await
        .expect("serve_connection resolved in time")
        .expect("no panic");
    assert_eq!(server.requests.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn drain_lets_the_in_flight_response_finish_then_closes() {
    let tree = Tree::new("drain-inflight");
    let data = pattern(8 * 1024 * 1024);
    std::fs::write(tree.root().join("big.bin"), &data).expect("write");
    let mut server = Server::start(&tree.root(), false).await;
    let mut client = server.connect().await;
    client.send("GET", "/big.bin", &[]).await;
    let (status, headers) = client.head().await;
    assert_eq!(status, 200);
    let conn = server.next_conn().await;

    // The body is still streaming (the client has not read it): drain now.
    server.drain.send(true).expect("drain");
    let body = client.body(data.len()).await;
    assert!(body == data, "in-flight body was cut or corrupted");
    assert_eq!(headers.get("content-length"), Some(&data.len().to_string()));
    client.expect_eof().await;
    timeout(BOUND, conn)
        .await
        .expect("serve_connection resolved in time")
        .expect("no panic");
}

#[tokio::test]
async fn after_drain_no_keep_alive_response_is_sent_and_the_socket_closes() {
    let tree = Tree::new("drain-next");
    let mut server = Server::start(&tree.root(), false).await;
    let mut client = server.connect().await;
    client.send("GET", "/hello.txt", &[]).await;
    assert_eq!(client.response(false).await.status, 200);
    let conn = server.next_conn().await;

    server.drain.send(true).expect("drain");
    // Races the server noticing the drain, as a real client would. Either the request is
    // answered with `Connection: close`, or the idle connection was already closed and the
    // request never read; in both cases the socket then closes.
    client.send("GET", "/hello.txt", &[]).await;
    if client.fill().await {
        let r = client.response(false).await;
        assert_eq!(
            r.header("connection"),
            Some("close"),
            "response while draining must close"
        );
    }
    client.expect_eof().await;
    timeout(BOUND, conn)
        .await
        .expect("serve_connection resolved in time")
        .expect("no panic");
}

// ---------------------------------------------------------------------------------------
// HTTP/2 prior knowledge, with hand-written frames.

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len())
        .expect("small frame")
        .to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A HEADERS block for `GET <path>` using only static-table and literal representations.
fn get_headers(path: &str) -> Vec<u8> {
    assert!(path.len() < 127 && "localhost".len() < 127);
    let mut block = vec![0x82, 0x86, 0x04, path.len() as u8]; // :method GET, :scheme http, :path
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 9]); // :authority
    block.extend_from_slice(b"localhost");
    block
}

impl Client {
    async fn read_frame(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        while self.buf.len() < 9 {
            if !self.fill().await {
                assert!(
                    self.buf.is_empty(),
                    "connection closed inside a frame header"
                );
                return None;
            }
        }
        let len = usize::from(self.buf[0]) << 16
            | usize::from(self.buf[1]) << 8
            | usize::from(self.buf[2]);
        let (kind, flags) = (self.buf[3], self.buf[4]);
        let stream =
            u32::from_be_bytes([self.buf[5], self.buf[6], self.buf[7], self.buf[8]]) & 0x7fff_ffff;
        self.buf.drain(..9);
        Some((kind, flags, stream, self.body(len).await))
    }

    /// Answers SETTINGS and PING as a conforming peer must; returns other frames.
    async fn next_frame(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        loop {
            let (kind, flags, stream, payload) = self.read_frame().await?;
            match (kind, flags & ACK) {
                (SETTINGS, 0) => self.write(&frame(SETTINGS, ACK, 0, &[])).await,
                (PING, 0) => self.write(&frame(PING, ACK, 0, &payload)).await,
                _ => return Some((kind, flags, stream, payload)),
            }
        }
    }
}

#[tokio::test]
async fn h2c_prior_knowledge_serves_and_drains_with_goaway() {
    let tree = Tree::new("h2");
    let mut server = Server::start(&tree.root(), false).await;
    let mut client = server.connect().await;
    let mut hello = H2_PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    hello.extend(frame(
        HEADERS,
        END_STREAM | 0x4,
        1,
        &get_headers("/hello.txt"),
    ));
    client.write(&hello).await;

    let mut status_block = None;
    let mut body = Vec::new();
    loop {
        let (kind, flags, stream, payload) = client.next_frame().await.expect("response frames");
        match kind {
            HEADERS if stream == 1 => status_block = Some(payload),
            DATA if stream == 1 => body.extend_from_slice(&payload),
            _ => {}
        }
        if stream == 1 && flags & END_STREAM != 0 {
            break;
        }
    }
    // 0x88 is the static-table entry for `:status: 200`.
    assert_eq!(status_block.and_then(|b| b.first().copied()), Some(0x88));
    assert_eq!(body, HELLO);
    let conn = server.next_conn().await;

    server.drain.send(true).expect("drain");
    let mut saw_goaway = false;
    while let Some((kind, ..)) = client.next_frame().await {
        saw_goaway |= kind == GOAWAY;
    }
    assert!(saw_goaway, "HTTP/2 drain must send GOAWAY before closing");
    timeout(BOUND, conn)
        .await
        .expect("serve_connection resolved in time")
        .expect("no panic");
    assert_eq!(server.requests.load(Ordering::Relaxed), 1);
}
