//! Stored active content against the real binary (decision 0047): with uploads on, a
//! page or image a browser would run (HTML, SVG, XML) that a user put in the tree is
//! served under `Content-Security-Policy: sandbox`, without `allow-same-origin`, so its
//! script cannot act as the site; other files, and a read-only site's files, are served
//! as they are; servery's own directory page keeps its strict policy.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use servery_tests::*;

const EVIL_HTML: &[u8] =
    b"<!doctype html><script>fetch('/owned.txt', {method: 'PUT', body: 'x'})</script>\n";
const EVIL_SVG: &[u8] =
    b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>\n";

/// One raw request as a same-origin browser would send it; the status and the head's
/// fields, lower-cased names.
fn exchange(addr: SocketAddr, request: &str, body: &[u8]) -> (u16, Vec<(String, String)>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("head");
    s.write_all(body).expect("body");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let fields = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, fields)
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn upload(addr: SocketAddr, path: &str, body: &[u8]) {
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let (status, _) = exchange(addr, &head, body);
    assert!(status == 201 || status == 204, "PUT {path}: {status}");
}

fn get(addr: SocketAddr, path: &str, extra: &str) -> (u16, Vec<(String, String)>) {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Connection: close\r\n\r\n");
    exchange(addr, &head, b"")
}

#[test]
fn an_uploaded_page_or_image_that_runs_script_is_served_in_a_sandbox() {
    let tree = Tree::new("stored");
    let server = Server::start(&tree, 1, &["--upload"], &[]);
    upload(server.addr, "/evil.html", EVIL_HTML);
    upload(server.addr, "/evil.svg", EVIL_SVG);
    upload(server.addr, "/feed.xml", b"<?xml version='1.0'?><feed/>\n");
    upload(server.addr, "/notes.txt", b"<script>alert(1)</script>\n");

    for path in ["/evil.html", "/evil.svg", "/feed.xml"] {
        let (status, fields) = get(server.addr, path, "");
        assert_eq!(status, 200, "{path}");
        let csp = field(&fields, "content-security-policy")
            .unwrap_or_else(|| panic!("{path} has no CSP: {fields:?}"));
        let directives: Vec<&str> = csp.split(';').map(str::trim).collect();
        assert!(
            directives
                .iter()
                .any(|d| d.split_whitespace().next() == Some("sandbox")),
            "{path}: {csp}"
        );
        assert!(!csp.contains("allow-same-origin"), "{path}: {csp}");
        assert!(!csp.contains("allow-scripts"), "{path}: {csp}");
    }
    // A revalidation carries it too: a cache refreshes the stored fields from a 304.
    let (_, fields) = get(server.addr, "/evil.html", "");
    let etag = field(&fields, "etag").expect("an ETag").to_owned();
    let (status, fields) = get(
        server.addr,
        "/evil.html",
        &format!("If-None-Match: {etag}\r\n"),
    );
    assert_eq!(status, 304);
    assert_eq!(field(&fields, "content-security-policy"), Some("sandbox"));

    // Text is shown as text: nothing to sandbox.
    let (status, fields) = get(server.addr, "/notes.txt", "");
    assert_eq!(status, 200);
    assert_eq!(
        field(&fields, "content-security-policy"),
        None,
        "{fields:?}"
    );

    // servery's own page keeps its own strict policy, scripts from itself only.
    let (status, fields) = get(server.addr, "/", "Accept: text/html\r\n");
    assert_eq!(status, 200);
    let page_csp = field(&fields, "content-security-policy").expect("page CSP");
    assert!(page_csp.contains("script-src 'self'"), "{page_csp}");
    assert!(!page_csp.contains("sandbox"), "{page_csp}");
}

#[test]
fn a_read_only_site_serves_its_pages_as_written() {
    let tree = Tree::new("stored-ro");
    std::fs::write(tree.root().join("app.html"), EVIL_HTML).expect("page");
    let server = Server::start(&tree, 1, &[], &[]);
    let (status, fields) = get(server.addr, "/app.html", "");
    assert_eq!(status, 200);
    assert_eq!(
        field(&fields, "content-security-policy"),
        None,
        "{fields:?}"
    );
    drop(server);

    // WebDAV without --upload reads only: nothing anyone else planted.
    let server = Server::start(&tree, 1, &["--dav"], &[]);
    let (_, fields) = get(server.addr, "/app.html", "");
    assert_eq!(
        field(&fields, "content-security-policy"),
        None,
        "{fields:?}"
    );
    drop(server);

    // The same page on a site that takes uploads is sandboxed, whoever wrote it.
    let server = Server::start(&tree, 1, &["--upload"], &[]);
    let (_, fields) = get(server.addr, "/app.html", "");
    assert_eq!(field(&fields, "content-security-policy"), Some("sandbox"));
}
