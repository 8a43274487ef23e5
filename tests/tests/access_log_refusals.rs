//! Requests refused before any handler runs are logged like any other response, with the
//! raw request line of a head refused before it was parsed (decisions 0056 and 0080),
//! against the real binary over raw sockets: a malformed request line (400), a
//! head too large (431), a `Content-Length` too large to represent (413), a head that never
//! finishes (408, closed without an answer as nginx does), a request without `Host` (400)
//! and one naming another host (421) each get their line and their count in
//! `http_requests_total`. Connections that never sent a request — silent until their
//! deadline, closed by a full worker to admit another — have no line to write and are
//! counted in `/metrics` by reason.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use servery_tests::{FAST, Server, Tree, http_get, wait_until};

/// Sends `bytes` on a new connection and returns the status of the answer (`None` when the
/// connection closed without one).
fn send(addr: SocketAddr, bytes: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    // The server may answer and close before it read everything (a head too large).
    let _ = s.write_all(bytes);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse().ok())
}

fn metric(admin: SocketAddr, series: &str) -> u64 {
    let (status, body) = http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// The status field of each combined-format line, with its request.
fn statuses(path: &std::path::Path) -> Vec<(String, u16)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (_, rest) = l.split_once("] \"").expect("a request field");
            let (request, rest) = rest.split_once("\" ").expect("its end");
            let status = rest.split(' ').next().and_then(|s| s.parse().ok());
            (request.to_owned(), status.expect("a status"))
        })
        .collect()
}

#[test]
fn refusals_before_a_handler_are_logged_and_unheard_connections_counted() {
    let tree = Tree::new("alog-refusals");
    let path = tree.root().with_file_name("refusals.log");
    let log = path.to_str().expect("utf-8").to_owned();
    let mut args = FAST.to_vec();
    args.extend([
        "--access-log",
        &log,
        "--admin",
        "127.0.0.1:0",
        "--request-head-timeout",
        "1",
        "--max-connections",
        "4",
    ]);
    let mut server = Server::start(&tree, 1, &args, &[]);
    let admin: SocketAddr = server.admin_addr(Duration::from_secs(10));
    server.wait_ready(1, Duration::from_secs(30));
    let addr = server.addr;

    let huge = format!(
        "GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70 * 1024)
    );
    let cases: [(&str, Vec<u8>, Option<u16>, u16); 6] = [
        ("malformed", b"GARBAGE\r\n\r\n".to_vec(), Some(400), 400),
        ("too large", huge.into_bytes(), Some(431), 431),
        (
            "length overflow",
            b"PUT /x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 18446744073709551615\r\n\r\n"
                .to_vec(),
            Some(413),
            413,
        ),
        // Half a head, then silence: closed at the head deadline without an answer.
        (
            "unfinished",
            b"GET /hello.txt HTTP/1.1\r\nHost: loc".to_vec(),
            None,
            408,
        ),
        (
            "no host",
            b"GET /hello.txt HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec(),
            Some(400),
            400,
        ),
        (
            "other host",
            b"GET /hello.txt HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_vec(),
            Some(421),
            421,
        ),
    ];
    for (what, bytes, answer, _) in &cases {
        let got = send(addr, bytes);
        // A head refused before it was read to its end may have its answer overtaken by
        // the reset that closing with unread bytes makes: the log line is what counts.
        let reset = *what == "too large" && got.is_none();
        assert!(got == *answer || reset, "{what}: {got:?}");
    }
    let (logged, _) = wait_until(Duration::from_secs(10), "a line for each", || {
        let lines = statuses(&path);
        (lines.len() >= cases.len()).then_some(lines)
    });
    let mut got: Vec<u16> = logged.iter().map(|(_, s)| *s).collect();
    let mut wanted: Vec<u16> = cases.iter().map(|c| c.3).collect();
    got.sort_unstable();
    wanted.sort_unstable();
    assert_eq!(got, wanted, "{logged:?}");
    // Those refused before their head was parsed show their raw request line, as far as
    // it arrived, as nginx logs `$request` (decision 0080); never `"-"` when one did.
    let mut requests: Vec<(&str, u16)> = logged.iter().map(|(r, s)| (r.as_str(), *s)).collect();
    requests.sort_unstable();
    let mut want = vec![
        ("GARBAGE", 400),
        ("GET / HTTP/1.1", 431),
        ("PUT /x HTTP/1.1", 413),
        ("GET /hello.txt HTTP/1.1", 408),
        ("GET /hello.txt HTTP/1.1", 400),
        ("GET /hello.txt HTTP/1.1", 421),
    ];
    want.sort_unstable();
    assert_eq!(
        requests, want,
        "each refused head logged with its request line"
    );
    wait_until(Duration::from_secs(5), "the refusals counted", || {
        let n = metric(
            admin,
            "servery_http_requests_total{method=\"other\",code=\"4xx\"}",
        ) + metric(
            admin,
            "servery_http_requests_total{method=\"GET\",code=\"4xx\"}",
        ) + metric(
            admin,
            "servery_http_requests_total{method=\"PUT\",code=\"4xx\"}",
        );
        (n == cases.len() as u64).then_some(())
    });

    // A connection that never sends a byte has nothing to log: counted at its deadline.
    let before = statuses(&path).len();
    let quiet = TcpStream::connect(addr).expect("connect");
    wait_until(Duration::from_secs(15), "the silent one counted", || {
        (metric(admin, UNHEARD_TIMEOUT) >= 1).then_some(())
    });
    drop(quiet);

    // Four connections that began a head fill the worker; a fifth with a request is
    // admitted by closing the longest-waiting of them (counted: it brought no request),
    // and the other three are logged 408 at their deadline.
    let begun: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.write_all(b"G").expect("a byte");
            s
        })
        .collect();
    let (status, _) = http_get(addr, "/hello.txt").expect("served");
    assert_eq!(status, 200);
    let (after, _) = wait_until(Duration::from_secs(15), "the three logged", || {
        let lines = statuses(&path);
        (lines.len() >= before + 4).then_some(lines)
    });
    drop(begun);
    assert_eq!(metric(admin, UNHEARD_EVICTED), 1);
    let mut new: Vec<u16> = after[before..].iter().map(|(_, s)| *s).collect();
    new.sort_unstable();
    assert_eq!(new, [200, 408, 408, 408], "{:?}", &after[before..]);
    assert_eq!(metric(admin, UNHEARD_TIMEOUT), 1, "only the silent one");
}

const UNHEARD_TIMEOUT: &str = "servery_connections_closed_unheard_total{reason=\"head_timeout\"}";
const UNHEARD_EVICTED: &str = "servery_connections_closed_unheard_total{reason=\"evicted\"}";

/// A pipelining client sends a request and, in the same write, a second head that is
/// refused: the second is logged with its own request line, not `"-"` (issue 34).
#[test]
fn a_refused_pipelined_head_is_logged_with_its_request_line() {
    let tree = Tree::new("alog-pipelined");
    let path = tree.root().with_file_name("pipelined.log");
    let log = path.to_str().expect("utf-8").to_owned();
    let mut args = FAST.to_vec();
    args.extend(["--access-log", &log]);
    let server = Server::start(&tree, 1, &args, &[]);
    server.wait_ready(1, Duration::from_secs(30));
    let mut s = TcpStream::connect(server.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(
        b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\nGARBAGE /pipelined\r\n\r\n\
          GET /never HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .expect("write");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.contains("HTTP/1.1 400"),
        "the first answered, the second refused: {text}"
    );
    let (logged, _) = wait_until(Duration::from_secs(10), "two lines", || {
        let lines = statuses(&path);
        (lines.len() >= 2).then_some(lines)
    });
    assert_eq!(
        logged,
        [
            ("GET /hello.txt HTTP/1.1".to_owned(), 200),
            ("GARBAGE /pipelined".to_owned(), 400)
        ],
        "the refused pipelined head logged with its request line"
    );
}

/// An HTTP/2 header block h2 cannot decode ends the connection (GOAWAY with
/// PROTOCOL_ERROR): the one HTTP/2 refusal servery sees, logged as a refused head, `"-" 400`, and counted
/// under method `other` (decision 0083).
#[test]
fn an_undecodable_http2_header_block_is_logged_and_counted() {
    let tree = Tree::new("alog-h2-refused");
    let path = tree.root().with_file_name("h2.log");
    let log = path.to_str().expect("utf-8").to_owned();
    let mut args = FAST.to_vec();
    args.extend(["--access-log", &log, "--admin", "127.0.0.1:0"]);
    let mut server = Server::start(&tree, 1, &args, &[]);
    let admin: SocketAddr = server.admin_addr(Duration::from_secs(10));
    server.wait_ready(1, Duration::from_secs(30));
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // An empty SETTINGS frame, then HEADERS on stream 1 (END_STREAM, END_HEADERS) whose
    // block is HPACK index 0, which no table has.
    bytes.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&[0, 0, 1, 0x1, 0x5, 0, 0, 0, 1, 0x80]);
    assert_eq!(send(server.addr, &bytes), None, "GOAWAY, not a response");
    let (logged, _) = wait_until(
        Duration::from_secs(10),
        "the refused HTTP/2 header block's line",
        || {
            let lines = statuses(&path);
            (!lines.is_empty()).then_some(lines)
        },
    );
    assert_eq!(logged, [("-".to_owned(), 400)], "the refusal logged");
    wait_until(Duration::from_secs(10), "the refusal counted", || {
        (metric(
            admin,
            "servery_http_requests_total{method=\"other\",code=\"4xx\"}",
        ) == 1)
            .then_some(())
    });
}
