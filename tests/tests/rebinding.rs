//! DNS rebinding against the real binary (decision 0046): a request that names a host
//! this server does not answer for gets 421 before anything serves it — a file, an
//! upload, WebDAV, a Python application — over HTTP/1.1, h2c and HTTP/2 over TLS; the
//! names a user reaches the server by (IP addresses with any port, `localhost`,
//! `--allowed-host`) pass; a public bind answers every name unless names are listed; the
//! admin listener answers its probes whatever they name.
//!
//! Clients are raw sockets (the exact `Host` line) and curl with `--connect-to`, which
//! dials the server while naming another host, as a browser on a rebound name does.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use servery_tests::*;

/// One raw request, `Connection: close`; the status and the whole answer.
fn exchange(addr: SocketAddr, method: &str, path: &str, host: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("head");
    s.write_all(body).expect("body");
    let mut answer = Vec::new();
    // A refused upload's connection may be reset once the answer is out.
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line for {method} {path} as {host}: {text:?}"));
    (status, text)
}

fn get(addr: SocketAddr, host: &str) -> u16 {
    exchange(addr, "GET", "/hello.txt", host, b"").0
}

/// curl naming `name` while it dials `addr` (`--connect-to`): the status and the HTTP
/// version it spoke.
fn curl_as(name: &str, addr: SocketAddr, scheme: &str, args: &[&str]) -> (u16, String) {
    let port = addr.port();
    let out = Command::new("curl")
        .args(["-s", "-k", "--max-time", "20", "-o", "/dev/null"])
        .args(["-w", "%{http_code} %{http_version}"])
        .arg("--connect-to")
        .arg(format!("{name}:{port}:{}:{port}", addr.ip()))
        .args(args)
        .arg(format!("{scheme}://{name}:{port}/hello.txt"))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, version) = text.split_once(' ').unwrap_or((&text, ""));
    (code.parse().unwrap_or(0), version.to_owned())
}

#[test]
fn a_foreign_host_is_misdirected_and_writes_nothing() {
    let tree = Tree::new("rebind");
    let server = Server::start(&tree, 1, &["--upload", "--dav"], &[]);
    let port = server.addr.port();

    let (status, text) = exchange(server.addr, "GET", "/hello.txt", "evil.example", b"");
    assert_eq!(status, 421, "{text}");
    assert!(!text.contains("hello from servery"), "{text}");
    assert!(text.contains("--allowed-host"), "says what to do: {text}");
    for (method, path) in [("PUT", "/planted.txt"), ("PUT", "/sub/planted.txt")] {
        let host = format!("evil.example:{port}");
        let (status, text) = exchange(server.addr, method, path, &host, b"planted\n");
        assert_eq!(status, 421, "{method} {path}: {text}");
    }
    let (status, _) = exchange(server.addr, "MKCOL", "/made/", "evil.example", b"");
    assert_eq!(status, 421, "MKCOL");
    let (status, _) = exchange(server.addr, "DELETE", "/hello.txt", "rebound.example.", b"");
    assert_eq!(status, 421, "DELETE");
    assert!(
        !tree.root().join("planted.txt").exists(),
        "a refused PUT wrote"
    );
    assert!(
        !tree.root().join("sub/planted.txt").exists(),
        "a refused PUT wrote"
    );
    assert!(
        !tree.root().join("made").exists(),
        "a refused MKCOL made a folder"
    );
    assert!(
        tree.root().join("hello.txt").exists(),
        "a refused DELETE deleted"
    );

    for host in [
        "localhost".to_owned(),
        format!("localhost:{port}"),
        "LocalHost.".to_owned(),
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_owned(),
        format!("[::1]:{port}"),
        "[::1]".to_owned(),
        format!("app.localhost:{port}"),
    ] {
        assert_eq!(get(server.addr, &host), 200, "Host: {host}");
    }
    // The same write under a name of this server's goes through.
    let (status, text) = exchange(
        server.addr,
        "PUT",
        "/planted.txt",
        &format!("127.0.0.1:{port}"),
        b"mine\n",
    );
    assert!(status == 201 || status == 204, "{text}");
    assert_eq!(
        std::fs::read(tree.root().join("planted.txt")).expect("written"),
        b"mine\n"
    );
}

#[test]
fn allowed_names_pass_from_the_command_line_and_the_environment() {
    let tree = Tree::new("rebind-allowed");
    let server = Server::start(
        &tree,
        1,
        &[
            "--allowed-host",
            "files.example",
            "--allowed-host",
            "*.lan.example",
        ],
        &[],
    );
    let port = server.addr.port();
    for host in [
        format!("files.example:{port}"),
        "FILES.example.".to_owned(),
        "box.lan.example".to_owned(),
    ] {
        assert_eq!(get(server.addr, &host), 200, "Host: {host}");
    }
    for host in ["lan.example", "files.example.evil", "evil.example"] {
        assert_eq!(get(server.addr, host), 421, "Host: {host}");
    }
    drop(server);

    let server = Server::start(
        &tree,
        1,
        &[],
        &[("SERVERY_ALLOWED_HOST", "a.example,b.example")],
    );
    assert_eq!(get(server.addr, "b.example"), 200);
    assert_eq!(get(server.addr, "c.example"), 421);
}

#[test]
fn http2_authority_is_checked_in_cleartext_and_over_tls() {
    let tree = Tree::new("rebind-h2");
    let server = Server::start(&tree, 1, &[], &[]);
    let h2c = ["--http2-prior-knowledge"];
    assert_eq!(
        curl_as("evil.example", server.addr, "http", &h2c),
        (421, "2".to_owned()),
        "h2c :authority evil.example"
    );
    assert_eq!(
        curl_as("localhost", server.addr, "http", &h2c),
        (200, "2".to_owned())
    );
    drop(server);

    let tls = Server::start(&tree, 1, &["--tls-self-signed"], &[]);
    let h2 = ["--http2"];
    assert_eq!(
        curl_as("evil.example", tls.addr, "https", &h2),
        (421, "2".to_owned()),
        "HTTP/2 over TLS, :authority evil.example"
    );
    assert_eq!(
        curl_as("localhost", tls.addr, "https", &h2),
        (200, "2".to_owned())
    );
}

#[test]
fn a_public_bind_answers_any_name_until_names_are_listed_and_star_turns_the_check_off() {
    let tree = Tree::new("rebind-public");
    // Reached through the wildcard listener on its loopback address.
    let at = |server: &Server| SocketAddr::from(([127, 0, 0, 1], server.addr.port()));
    let public = Server::start(&tree, 1, &["--bind", "0.0.0.0"], &[]);
    assert_eq!(
        get(at(&public), "files.example"),
        200,
        "a name the user's DNS gives"
    );
    drop(public);

    let listed = Server::start(
        &tree,
        1,
        &["--bind", "0.0.0.0", "--allowed-host", "files.example"],
        &[],
    );
    assert_eq!(get(at(&listed), "files.example"), 200);
    assert_eq!(get(at(&listed), "evil.example"), 421);
    assert_eq!(
        get(at(&listed), "192.0.2.1:8080"),
        200,
        "an address (a port forward)"
    );
    drop(listed);

    let off = Server::start(&tree, 1, &["--allowed-host", "*"], &[]);
    assert_eq!(get(off.addr, "evil.example"), 200);
}

#[test]
fn the_admin_listener_answers_its_probes_whatever_they_name() {
    let tree = Tree::new("rebind-admin");
    let mut server = Server::start(&tree, 1, &["--admin", "127.0.0.1:0"], &[]);
    let admin: SocketAddr = server.admin_addr(Duration::from_secs(10));
    server.wait_ready(1, Duration::from_secs(20));
    for path in ["/livez", "/readyz", "/metrics"] {
        let (status, text) = exchange(admin, "GET", path, "prometheus.monitoring.svc", b"");
        assert_eq!(status, 200, "{path}: {text}");
    }
    assert_eq!(
        get(server.addr, "prometheus.monitoring.svc"),
        421,
        "the site checks"
    );
}

#[test]
fn an_allowed_host_with_a_port_is_a_configuration_error_naming_the_flag() {
    let done = run_servery(
        &["--allowed-host", "files.example:8080", "--check-config"],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("--allowed-host") && done.stderr.contains("without a port"),
        "{}",
        done.stderr
    );
}

/// A WSGI application with no dependency: every call leaves a line in `calls.log`.
const PLAIN_APP: &str = r#"
import os
CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.log")

def app(environ, start_response):
    with open(CALLS, "a") as log:
        log.write(environ["REQUEST_METHOD"] + " " + environ["PATH_INFO"] + "\n")
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"from the application\n"]
"#;

#[test]
fn a_python_application_is_never_called_for_a_foreign_host() {
    if !has_python(&servery_bin()) {
        servery_tests::skipped("this servery binary hosts no Python");
        return;
    }
    let tree = Tree::new("rebind-app");
    let app_dir = tree.dir.join("app");
    std::fs::create_dir_all(&app_dir).expect("app dir");
    std::fs::write(app_dir.join("plainapp.py"), PLAIN_APP).expect("app");
    let app_dir_text = app_dir.to_string_lossy().into_owned();
    let server = Server::start(
        &tree,
        1,
        &["--wsgi", "plainapp:app", "--app-dir", &app_dir_text],
        &[],
    );
    let (status, text) = exchange(server.addr, "POST", "/api/write", "evil.example", b"x=1");
    assert_eq!(status, 421, "{text}");
    let (status, text) = exchange(server.addr, "GET", "/api/read", "localhost", b"");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("from the application"), "{text}");
    let calls = std::fs::read_to_string(app_dir.join("calls.log")).unwrap_or_default();
    assert_eq!(
        calls, "GET /api/read\n",
        "only the request naming this server ran"
    );
}
