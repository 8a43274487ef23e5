//! Upstreams for the reverse-proxy tests, each a server nobody here wrote: gunicorn and
//! uvicorn serving a small Python application ([`ECHO_APP`]), and nginx. Each runs until
//! its guard drops (then it is killed with its process group).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{Tree, wait_until};

/// A WSGI application (`echo:app`) and its ASGI twin (`echo:asgi`, which also echoes
/// WebSocket text messages as `echo:TEXT`):
/// - `/echo` answers JSON with the method, path, query, every header, and the length and
///   SHA-256 of the body it read (read in 64 KiB pieces, never whole);
/// - `/big?n=BYTES` streams n bytes in 1 MiB pieces;
/// - `/slow?secs=S` answers after S seconds;
/// - `/inflight` counts requests in flight at once and remembers the most (for the
///   admission tests): it holds each request `hold` seconds; `/inflight-max` says the
///   most seen, `/inflight-now` how many are held now.
pub const ECHO_APP: &str = r#"
import hashlib, json, threading, time, urllib.parse

lock = threading.Lock()
state = {"now": 0, "max": 0}

def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    if path == "/big":
        n = int(query["n"][0])
        chunk = b"x" * (1 << 20)
        def gen():
            left = n
            while left > 0:
                piece = chunk[: min(left, len(chunk))]
                left -= len(piece)
                yield piece
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(n))])
        return gen()
    if path == "/slow":
        time.sleep(float(query["secs"][0]))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"slow\n"]
    if path == "/inflight":
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(float(query.get("hold", ["0.2"])[0]))
        with lock:
            state["now"] -= 1
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"held\n"]
    if path in ("/inflight-max", "/inflight-now"):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(state["max" if path == "/inflight-max" else "now"]).encode()]
    body = environ["wsgi.input"]
    digest, length = hashlib.sha256(), 0
    while True:
        piece = body.read(65536)
        if not piece:
            break
        digest.update(piece)
        length += len(piece)
    headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
    if "CONTENT_TYPE" in environ:
        headers["content-type"] = environ["CONTENT_TYPE"]
    answer = json.dumps({
        "method": environ["REQUEST_METHOD"], "path": path,
        "query": environ.get("QUERY_STRING", ""), "headers": headers,
        "length": length, "sha256": digest.hexdigest(), "server": "wsgi",
    }).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))])
    return [answer]

async def asgi(scope, receive, send):
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            event = await receive()
            if event["type"] != "websocket.receive":
                return
            text = event.get("text") or event.get("bytes", b"").decode()
            await send({"type": "websocket.send", "text": "echo:" + text})
    if scope["type"] != "http":
        return
    digest, length = hashlib.sha256(), 0
    while True:
        event = await receive()
        piece = event.get("body", b"")
        digest.update(piece)
        length += len(piece)
        if not event.get("more_body"):
            break
    headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
    answer = json.dumps({
        "method": scope["method"], "path": scope["path"],
        "query": scope["query_string"].decode(), "headers": headers,
        "length": length, "sha256": digest.hexdigest(), "server": "asgi",
    }).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": answer})
"#;

/// A running upstream; killed (its whole process group) on drop.
#[derive(Debug)]
pub struct Upstream {
    child: Child,
    /// Where it listens (TCP), if it does.
    pub addr: Option<SocketAddr>,
    /// Its Unix socket, if it listens on one.
    pub socket: Option<PathBuf>,
    pub dir: PathBuf,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let group = self.child.id() as i32;
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `program` runs (`--version`); when not, says SKIPPED and why.
pub fn tool_present(program: &str, args: &[&str]) -> bool {
    let ok = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        crate::skipped(format!(
            "`{program}` is not installed (scripts/test installs it)"
        ));
    }
    ok
}

fn spawn(mut cmd: Command, dir: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    cmd.current_dir(dir)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("upstream.log")).expect("log file"))
        .spawn()
        .expect("start the upstream")
}

fn wait_listening(addr: SocketAddr, log: &Path) {
    wait_until(Duration::from_secs(20), "the upstream to listen", || {
        TcpStream::connect(addr).ok()
    });
    let _ = log;
}

/// gunicorn serving [`ECHO_APP`] (threads enough for the admission tests) on a free TCP
/// port, or on `socket` when given.
pub fn gunicorn(tree: &Tree, socket: Option<&Path>) -> Upstream {
    // A folder per instance: a test may run two (TCP and a Unix socket), and each keeps
    // its own working directory and log.
    let dir = tree.dir.join(if socket.is_some() {
        "gunicorn-unix"
    } else {
        "gunicorn"
    });
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("echo.py"), ECHO_APP).expect("app");
    let port = crate::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let bind = match socket {
        Some(s) => format!("unix:{}", s.display()),
        None => addr.to_string(),
    };
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "gunicorn",
        "--bind",
        &bind,
        "--workers",
        "1",
        "--threads",
        "32",
    ])
    .args([
        "-k",
        "gthread",
        "--timeout",
        "120",
        "--keep-alive",
        "30",
        "echo:app",
    ]);
    let mut child = spawn(cmd, &dir);
    match socket {
        Some(s) => {
            wait_until(Duration::from_secs(20), "gunicorn's socket", || {
                std::os::unix::net::UnixStream::connect(s).ok()
            });
        }
        None => wait_listening(addr, &dir.join("upstream.log")),
    }
    // Something answering on the port is not enough: another process may have taken the
    // free port first (gunicorn then exits with "Address already in use").
    if let Ok(Some(status)) = child.try_wait() {
        panic!(
            "gunicorn exited ({status}) instead of serving on {bind}: {}",
            std::fs::read_to_string(dir.join("upstream.log")).unwrap_or_default()
        );
    }
    Upstream {
        child,
        addr: socket.is_none().then_some(addr),
        socket: socket.map(Path::to_path_buf),
        dir,
    }
}

/// uvicorn serving the ASGI twin of [`ECHO_APP`] on a free port.
pub fn uvicorn(tree: &Tree) -> Upstream {
    let dir = tree.dir.join("uvicorn");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("echo.py"), ECHO_APP).expect("app");
    let port = crate::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "uvicorn",
        "--host",
        "127.0.0.1",
        "--port",
        &port.to_string(),
    ])
    .args(["--no-access-log", "--lifespan", "off", "echo:asgi"]);
    let child = spawn(cmd, &dir);
    wait_listening(addr, &dir.join("upstream.log"));
    Upstream {
        child,
        addr: Some(addr),
        socket: None,
        dir,
    }
}

/// nginx serving `root` on a free port, logging each request's connection serial number
/// and its position on that connection to `access.log` in its directory.
pub fn nginx(tree: &Tree, root: &Path) -> Upstream {
    nginx_with(tree, root, None, false)
}

/// nginx serving `root` over HTTP/2 in cleartext with prior knowledge (h2c; nginx's
/// `listen … http2` without TLS).
pub fn nginx_h2c(tree: &Tree, root: &Path) -> Upstream {
    nginx_with(tree, root, None, true)
}

/// nginx serving `root` over TLS offering HTTP/2 by ALPN (`listen … ssl http2`): the
/// upstream, and the CA's PEM file.
pub fn nginx_h2(tree: &Tree, root: &Path) -> (Upstream, PathBuf) {
    let (cert, key, ca) = localhost_certificate(tree);
    (nginx_with(tree, root, Some((&cert, &key)), true), ca)
}

/// nginx serving `root` over TLS with a certificate for `localhost` issued by a CA that
/// openssl made here: the upstream, and the CA's PEM file (the one to trust).
pub fn nginx_tls(tree: &Tree, root: &Path) -> (Upstream, PathBuf) {
    let (cert, key, ca) = localhost_certificate(tree);
    (nginx_with(tree, root, Some((&cert, &key)), false), ca)
}

/// A certificate for `localhost` and its key, issued by a CA openssl makes here, and the
/// CA's PEM file.
fn localhost_certificate(tree: &Tree) -> (PathBuf, PathBuf, PathBuf) {
    let dir = tree.dir.join("nginx-cert");
    std::fs::create_dir_all(&dir).expect("dir");
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    let words = |line: String| line.split(' ').map(str::to_owned).collect::<Vec<_>>();
    let ca = words(format!(
        "req -x509 {ec} -days 2 -keyout ca.key -out ca.pem -subj"
    ));
    openssl(
        &[
            ca.iter().map(String::as_str).collect::<Vec<_>>(),
            vec!["/CN=servery test CA"],
        ]
        .concat(),
    );
    let leaf = words(format!(
        "req {ec} -subj /CN=localhost -keyout key.pem -out leaf.csr"
    ));
    openssl(&leaf.iter().map(String::as_str).collect::<Vec<_>>());
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .expect("ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
        "-out",
        "cert.pem",
    ]);
    (
        dir.join("cert.pem"),
        dir.join("key.pem"),
        dir.join("ca.pem"),
    )
}

fn nginx_with(tree: &Tree, root: &Path, tls: Option<(&Path, &Path)>, http2: bool) -> Upstream {
    let dir = tree.dir.join("nginx");
    std::fs::create_dir_all(&dir).expect("dir");
    let port = crate::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let d = dir.display();
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n  log_format conn '$connection $connection_requests $request';\n\
           access_log {d}/access.log conn;\n  client_body_temp_path {d}/body;\n\
           proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
           uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  keepalive_requests 1000;\n\
           server {{ listen 127.0.0.1:{port}{ssl}{h2};{certs} root {root}; }}\n}}\n",
        root = root.display(),
        h2 = if http2 { " http2" } else { "" },
        ssl = if tls.is_some() { " ssl" } else { "" },
        certs = match tls {
            Some((cert, key)) => format!(
                " ssl_certificate {}; ssl_certificate_key {};",
                cert.display(),
                key.display()
            ),
            None => String::new(),
        },
    );
    std::fs::write(dir.join("nginx.conf"), conf).expect("conf");
    let mut cmd = Command::new("nginx");
    cmd.args(["-e", &format!("{d}/error.log"), "-c"])
        .arg(dir.join("nginx.conf"));
    let child = spawn(cmd, &dir);
    wait_listening(addr, &dir.join("error.log"));
    Upstream {
        child,
        addr: Some(addr),
        socket: None,
        dir,
    }
}

/// Python's `http.server` serving `root` on `port` (a fixed port, so that a test can stop
/// it and start it again where the routes point).
pub fn http_server(tree: &Tree, root: &Path, port: u16) -> Upstream {
    let dir = tree.dir.join(format!("http-server-{port}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "http.server",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
    ])
    .arg("--directory")
    .arg(root);
    let child = spawn(cmd, &dir);
    wait_listening(addr, &dir.join("upstream.log"));
    Upstream {
        child,
        addr: Some(addr),
        socket: None,
        dir,
    }
}
