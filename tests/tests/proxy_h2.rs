//! HTTP/2 upstreams (decision 0102) on the real binary, against nginx with `http2`: an
//! `h2c://` route speaks HTTP/2 in cleartext with prior knowledge, an `https://` route
//! speaks HTTP/2 when the upstream offers it by ALPN; either way every request, sequential
//! or concurrent, travels over one pooled connection (nginx logs each request's
//! connection serial number and protocol).

use std::collections::BTreeSet;

use servery_tests::upstream::{self, Upstream, tool_present};
use servery_tests::*;

/// Every request nginx logged: its connection's serial number and its request line.
fn logged(up: &Upstream) -> Vec<(String, String)> {
    let log = std::fs::read_to_string(up.dir.join("access.log")).expect("nginx log");
    log.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            let connection = parts.next()?.to_owned();
            let _requests = parts.next()?;
            Some((connection, parts.next()?.to_owned()))
        })
        .collect()
}

/// Twenty requests one after the other, a range, then eight at once: all answered, all
/// over HTTP/2, all on one upstream connection.
fn over_one_http2_connection(server: &Server, up: &Upstream) {
    for _ in 0..20 {
        let got = curl(server.addr, "/n/hello.txt", &[]);
        assert_eq!(
            (got.status, got.body.as_slice()),
            (200, HELLO),
            "nginx's error log: {}",
            std::fs::read_to_string(up.dir.join("error.log")).unwrap_or_default()
        );
    }
    let range = curl(server.addr, "/n/sub/big.bin", &["-r", "10-19"]);
    assert_eq!(range.status, 206);
    assert_eq!(range.body, big_body()[10..20]);
    let addr = server.addr;
    let at_once: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || curl(addr, "/n/sub/big.bin", &[])))
        .collect();
    for h in at_once {
        let got = h.join().expect("request");
        assert_eq!(got.status, 200);
        assert_eq!(
            got.body,
            big_body(),
            "a whole body over a shared connection"
        );
    }
    let lines = logged(up);
    assert_eq!(lines.len(), 29, "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|(_, request)| request.ends_with("HTTP/2.0")),
        "every request went upstream over HTTP/2: {lines:?}"
    );
    let connections: BTreeSet<&str> = lines.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        connections.len(),
        1,
        "one pooled HTTP/2 connection carried every request, the concurrent ones too: {lines:?}"
    );
}

#[test]
fn an_h2c_upstream_gets_http2_with_prior_knowledge_over_one_connection() {
    if !tool_present("nginx", &["-v"]) {
        return;
    }
    let tree = Tree::new("proxy-h2c");
    let up = upstream::nginx_h2c(&tree, &tree.root());
    let port = up.addr.expect("tcp").port();
    let url = format!("/n=h2c://127.0.0.1:{port}/");
    let server = Server::start(&tree, 1, &["--proxy", &url], &[]);
    over_one_http2_connection(&server, &up);
    // An upgrade cannot cross HTTP/2: refused with the reason, not sent.
    let upgrade = curl(
        server.addr,
        "/n/hello.txt",
        &["-H", "Connection: Upgrade", "-H", "Upgrade: websocket"],
    );
    assert_eq!(upgrade.status, 502);
    assert!(
        String::from_utf8_lossy(&upgrade.body).contains("h2c"),
        "{:?}",
        String::from_utf8_lossy(&upgrade.body)
    );
}

#[test]
fn an_https_upstream_offering_h2_gets_http2_over_one_connection() {
    if !tool_present("nginx", &["-v"]) || !tool_present("openssl", &["version"]) {
        return;
    }
    let tree = Tree::new("proxy-h2-tls");
    let (up, ca) = upstream::nginx_h2(&tree, &tree.root());
    let port = up.addr.expect("tcp").port();
    let url = format!("/n=h2://localhost:{port}/");
    let server = Server::start(
        &tree,
        1,
        &["--proxy", &url, "--proxy-ca", &ca.display().to_string()],
        &[],
    );
    over_one_http2_connection(&server, &up);
}

/// An `h2://` upstream that offers only HTTP/1.1 is spoken to in HTTP/1.1, its own host
/// as `Host`; an `https://` route to an upstream offering HTTP/2 stays on HTTP/1.1.
#[test]
fn an_h2_route_falls_back_to_http11_and_an_https_route_stays_there() {
    if !tool_present("nginx", &["-v"]) || !tool_present("openssl", &["version"]) {
        return;
    }
    let tree = Tree::new("proxy-h1-tls");
    let (up, ca) = upstream::nginx_tls(&tree, &tree.root());
    let port = up.addr.expect("tcp").port();
    let url = format!("/n=h2://localhost:{port}/");
    let server = Server::start(
        &tree,
        1,
        &["--proxy", &url, "--proxy-ca", &ca.display().to_string()],
        &[],
    );
    let got = curl(server.addr, "/n/hello.txt", &[]);
    assert_eq!((got.status, got.body.as_slice()), (200, HELLO));
    let lines = logged(&up);
    assert!(
        lines.iter().all(|(_, r)| r.ends_with("HTTP/1.1")),
        "an upstream without h2 is spoken to in HTTP/1.1: {lines:?}"
    );
    drop(server);
    drop(up);
    let tree = Tree::new("proxy-https-stays-h1");
    let (up, ca) = upstream::nginx_h2(&tree, &tree.root());
    let port = up.addr.expect("tcp").port();
    let url = format!("/n=https://localhost:{port}/");
    let server = Server::start(
        &tree,
        1,
        &["--proxy", &url, "--proxy-ca", &ca.display().to_string()],
        &[],
    );
    let got = curl(server.addr, "/n/hello.txt", &[]);
    assert_eq!((got.status, got.body.as_slice()), (200, HELLO));
    let lines = logged(&up);
    assert!(
        lines.iter().all(|(_, r)| r.ends_with("HTTP/1.1")),
        "https:// offers HTTP/1.1 only: {lines:?}"
    );
}
