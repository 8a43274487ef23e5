//! Bad input: malformed request lines, oversized heads, bad ranges and methods, silent and truncated clients.

use super::*;

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
