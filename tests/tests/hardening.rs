//! What a hostile or broken peer can do to the real binary, over raw sockets on loopback:
//! connections that never send a byte (cleartext, h2c, after a TLS handshake, after the
//! HTTP/2 preface), heads sent a byte at a time, idle keep-alive, a client that stops
//! reading its download, a full worker under a flood of silent connections, a full worker
//! whose connections are all busy, stalled upload
//! bodies, malformed `Host` and `Transfer-Encoding`, a `Content-Length` too large to represent, too many files in one form, and
//! inconsistent upload limits. Every wait is bounded; every test fails without its defence.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use servery_tests::*;
use tls_client::{accept_any, connect};

#[path = "support/tls_client.rs"]
mod tls_client;

/// Short deadlines, so each test waits seconds rather than the defaults' minutes.
const DEADLINES: &[&str] = &[
    "--request-head-timeout",
    "1.5",
    "--keep-alive-timeout",
    "1.5",
    "--tls-handshake-timeout",
    "1.5",
    "--send-timeout",
    "1.5",
];

/// How long after its deadline a connection may still look open: the deferred accept
/// hands a silent connection to a worker about a second after it is made (up to three
/// on a loaded machine), and the watchdog samples progress at a quarter of the deadline.
const SLACK: Duration = Duration::from_secs(5);

fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    s
}

/// Reads until the peer closes (EOF or reset), at most `bound`; what was read and when
/// the close came. Panics if the connection is still open after `bound`.
fn wait_closed(mut s: impl Read, bound: Duration, what: &str) -> (Vec<u8>, Duration) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, start.elapsed()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return (got, start.elapsed()),
        }
        assert!(
            start.elapsed() < bound,
            "{what}: still open after {bound:?}"
        );
    }
}

fn status_of(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

/// One raw request and the whole answer, read until the server closes.
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = raw(addr);
    s.write_all(request).expect("write");
    wait_closed(s, Duration::from_secs(10), "exchange").0
}

#[test]
fn a_connection_that_never_sends_a_byte_is_closed_at_the_head_deadline() {
    let tree = Tree::new("silent");
    let server = Server::start(&tree, 1, DEADLINES, &[]);
    let (_, took) = wait_closed(raw(server.addr), SLACK + SLACK, "silent cleartext");
    assert!(
        took >= Duration::from_millis(1400),
        "closed early: {took:?}"
    );

    // h2c prior knowledge: the preface and a SETTINGS frame, then no stream.
    let mut s = raw(server.addr);
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .expect("preface");
    let (_, took) = wait_closed(s, SLACK, "h2c without a stream");
    assert!(took < SLACK, "{took:?}");
}

/// The HTTP/2 frame types in `bytes` (the server's side of an h2c connection).
fn frame_types(bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let len = usize::from(bytes[at]) << 16
            | usize::from(bytes[at + 1]) << 8
            | usize::from(bytes[at + 2]);
        types.push(bytes[at + 3]);
        at += 9 + len;
    }
    types
}

#[test]
fn an_http2_connection_idle_after_its_stream_gets_goaway_at_the_keep_alive_deadline() {
    let tree = Tree::new("h2idle");
    let server = Server::start(&tree, 1, DEADLINES, &[]);
    let mut s = raw(server.addr);
    // Preface, empty SETTINGS, then one GET / on stream 1 (HPACK: :method GET, :scheme
    // http, :path /, :authority "localhost").
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .expect("preface");
    s.write_all(b"\0\0\x0e\x01\x05\0\0\0\x01\x82\x86\x84\x41\x09localhost")
        .expect("request");
    let (got, took) = wait_closed(&mut s, SLACK, "idle h2 connection");
    let types = frame_types(&got);
    // SETTINGS, then the response's HEADERS (and DATA), then GOAWAY once idle (h2
    // follows a graceful GOAWAY with a PING).
    let headers = types.iter().position(|&t| t == 0x1);
    let goaway = types.iter().rposition(|&t| t == 0x7);
    assert!(
        matches!((headers, goaway), (Some(h), Some(g)) if h < g),
        "no response HEADERS followed by GOAWAY in {types:?}"
    );
    assert!(
        took >= Duration::from_millis(1400),
        "closed early: {took:?}"
    );
}

#[test]
fn a_head_sent_a_byte_at_a_time_is_bounded_in_total() {
    let tree = Tree::new("loris");
    let server = Server::start(&tree, 1, DEADLINES, &[]);
    let mut s = raw(server.addr);
    let start = Instant::now();
    let head = b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    for byte in head.iter().cycle() {
        if s.write_all(&[*byte]).is_err() {
            break;
        }
        let mut probe = [0u8; 1];
        match s.read(&mut probe) {
            Ok(0) => break,
            Ok(_) => panic!("a response to an incomplete head"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        assert!(
            start.elapsed() < SLACK + SLACK,
            "still open after {:?}",
            start.elapsed()
        );
    }
    assert!(start.elapsed() >= Duration::from_millis(1400));
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_its_deadline() {
    let tree = Tree::new("idle");
    let server = Server::start(&tree, 1, DEADLINES, &[]);
    let mut s = raw(server.addr);
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("write");
    // The response arrives; then nothing is sent and the server closes.
    let (got, took) = wait_closed(&mut s, SLACK, "idle keep-alive");
    assert_eq!(status_of(&got), 200);
    assert!(got.ends_with(HELLO), "{}", String::from_utf8_lossy(&got));
    assert!(
        took >= Duration::from_millis(1400),
        "closed early: {took:?}"
    );
}

#[test]
fn tls_connections_silent_after_the_handshake_or_preface_are_closed() {
    let tree = Tree::new("tlssilent");
    let mut args = DEADLINES.to_vec();
    args.push("--tls-self-signed");
    let server = Server::start(&tree, 1, &args, &[]);
    // A TCP connection that never starts its handshake.
    let (_, took) = wait_closed(raw(server.addr), SLACK, "no ClientHello");
    assert!(took < SLACK);
    // HTTP/1.1 after the handshake, nothing sent.
    let tls = connect(server.addr, "localhost", accept_any(&[b"http/1.1"])).expect("tls");
    let start = Instant::now();
    wait_closed(tls, SLACK, "TLS with http/1.1 and no request");
    assert!(start.elapsed() < SLACK);
    // h2 negotiated, no preface.
    let tls = connect(server.addr, "localhost", accept_any(&[b"h2"])).expect("tls h2");
    wait_closed(tls, SLACK, "TLS with h2 and no preface");
    // h2 preface and SETTINGS, no stream.
    let mut tls = connect(server.addr, "localhost", accept_any(&[b"h2"])).expect("tls h2");
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .expect("preface");
    wait_closed(tls, SLACK, "TLS h2 without a stream");
}

#[test]
fn a_client_that_stops_reading_its_download_is_cut_off() {
    let tree = Tree::new("stall");
    // Larger than what loopback's socket buffers can hold between the two ends.
    let size: u64 = 96 << 20;
    std::fs::File::create(tree.root().join("large.bin"))
        .and_then(|f| f.set_len(size))
        .expect("large file");
    let server = Server::start(&tree, 1, DEADLINES, &[]);
    let mut s = raw(server.addr);
    s.write_all(b"GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("write");
    // Read the head and a little (however long a busy machine takes to start it), then
    // stop reading for longer than the deadline.
    s.set_read_timeout(Some(SLACK)).expect("timeout");
    let mut buf = [0u8; 4096];
    let _ = s.read(&mut buf).expect("response starts");
    std::thread::sleep(Duration::from_millis(1500) + SLACK);
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let (rest, _) = wait_closed(&mut s, Duration::from_secs(30), "stalled download");
    // What the socket buffers held when the connection was cut is a few MiB; a connection
    // never cut delivers the whole body (less the first read), so compare with half of it.
    assert!(
        (rest.len() as u64) < size / 2,
        "{} of {size} bytes arrived: the stalled connection was never closed",
        rest.len()
    );
}

/// The acceptance test: one worker admitting ten connections, fifty silent ones
/// reopened as fast as they are closed, and a normal client served within a second
/// throughout twenty seconds.
#[test]
fn a_full_worker_makes_room_for_real_clients_under_a_silent_flood() {
    let tree = Tree::new("flood");
    let server = Server::start(
        &tree,
        1,
        &["--max-connections", "10"], // the default deadlines: only admission defends
        &[],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let addr = server.addr;
    let flooders: Vec<_> = (0..50)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                    else {
                        continue;
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
                    // Hold it, silent, until the server closes it; then open another.
                    let mut buf = [0u8; 16];
                    while !stop.load(Ordering::Relaxed) {
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    ErrorKind::WouldBlock | ErrorKind::TimedOut
                                ) => {}
                            _ => break,
                        }
                    }
                }
            })
        })
        .collect();
    // The flood fills the worker first: it reports all ten of its connections taken.
    wait_until(
        Duration::from_secs(15),
        "the flood to take every connection the worker admits",
        || {
            let status = server.status();
            (status["workers"][0]["connections"].as_u64() >= Some(10)).then_some(())
        },
    );
    let start = Instant::now();
    let mut worst = Duration::ZERO;
    let mut served = 0;
    while start.elapsed() < Duration::from_secs(20) {
        let t = Instant::now();
        let got = http_get(addr, "/hello.txt");
        let took = t.elapsed();
        assert_eq!(
            got,
            Ok((200, HELLO.to_vec())),
            "after {:?}",
            start.elapsed()
        );
        assert!(
            took <= Duration::from_secs(1),
            "a request took {took:?} under the flood"
        );
        worst = worst.max(took);
        served += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        let _ = f.join();
    }
    eprintln!("served {served} requests under the flood, slowest {worst:?}");
}

/// A worker at `--max-connections` whose every connection has a request in progress
/// leaves a new connection in the shared backlog, however recently its last connection
/// became busy: it asks whether it has room just before each accept. (It once asked only
/// when its loop came round, so a request started since then let it take the connection
/// and serve it over its budget, and a sibling with room lost it.)
#[test]
fn a_full_worker_whose_connections_are_all_busy_leaves_a_new_one_in_the_backlog() {
    let tree = Tree::new("busy-full");
    // Larger than what loopback's socket buffers can hold between the two ends.
    std::fs::File::create(tree.root().join("large.bin"))
        .and_then(|f| f.set_len(96 << 20))
        .expect("large file");
    let mut args = FAST.to_vec();
    args.extend(["--max-connections", "1"]);
    let server = Server::start(&tree, 1, &args, &[]);
    // Accepted while silent (so the worker could still make room), then busy at once:
    // a download its client reads steadily (about 4 MiB/s, so it lasts the test and stays
    // above --min-send-rate: a client that stopped reading would count as idle).
    let mut busy = raw(server.addr);
    busy.write_all(b"GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("write");
    busy.set_read_timeout(Some(SLACK)).expect("timeout");
    let mut buf = [0u8; 4096];
    assert!(busy.read(&mut buf).expect("the download starts") > 0);
    let reading = Arc::new(AtomicBool::new(true));
    let reader = {
        let reading = Arc::clone(&reading);
        std::thread::spawn(move || {
            let mut chunk = vec![0u8; 64 * 1024];
            while reading.load(Ordering::Relaxed) && matches!(busy.read(&mut chunk), Ok(n) if n > 0)
            {
                std::thread::sleep(Duration::from_millis(15));
            }
        })
    };
    let mut waiting = raw(server.addr);
    waiting
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("write");
    // An over-budget accept answers within milliseconds; a second is five heartbeats at
    // FAST's interval, so the worker's loop has come round several times meanwhile.
    waiting
        .set_read_timeout(Some(Duration::from_secs(1)))
        .expect("timeout");
    match waiting.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!(
            "answered while the worker's one connection was busy (served over its budget): {other:?}"
        ),
    }
    // Its one connection gone, the worker takes the waiting one from the backlog.
    reading.store(false, Ordering::Relaxed);
    reader.join().expect("reader");
    waiting.set_read_timeout(Some(SLACK)).expect("timeout");
    let mut got = Vec::new();
    while !got.ends_with(HELLO) {
        match waiting.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            other => panic!("the waiting connection was not served: {other:?} after {got:?}"),
        }
    }
    assert_eq!(status_of(&got), 200);
}

fn chunked_put_head(path: &str) -> String {
    format!("PUT {path} HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n")
}

#[test]
fn a_stalled_upload_is_answered_408_and_frees_its_budget_at_once() {
    let tree = Tree::new("stalledput");
    let server = Server::start(
        &tree,
        1,
        &[
            "--upload",
            "--max-active-uploads",
            "2",
            "--body-timeout",
            "1",
        ],
        &[],
    );
    let stalled: Vec<_> = ["/a.bin", "/b.bin"]
        .iter()
        .map(|path| {
            let mut s = raw(server.addr);
            s.write_all(chunked_put_head(path).as_bytes())
                .expect("head");
            s.write_all(b"5\r\nhello\r\n").expect("one chunk");
            (s, Instant::now())
        })
        .collect();
    for (s, started) in stalled {
        let (got, _) = wait_closed(s, SLACK, "stalled upload");
        assert_eq!(status_of(&got), 408, "{}", String::from_utf8_lossy(&got));
        assert!(started.elapsed() < SLACK);
    }
    // Both reservations and leases are free again: two uploads at once succeed now.
    let ok: Vec<_> = ["/a.bin", "/b.bin"]
        .iter()
        .map(|path| {
            let body = "data";
            let request = format!(
                "PUT {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            status_of(&exchange(server.addr, request.as_bytes()))
        })
        .collect();
    assert_eq!(ok, [201, 201]);
    assert_eq!(
        std::fs::read(tree.root().join("a.bin")).expect("a"),
        b"data"
    );
    // No temporary file of the stalled uploads is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(tree.root())
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".servery"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_slow_but_moving_upload_is_never_cut() {
    let tree = Tree::new("slowput");
    let server = Server::start(&tree, 1, &["--upload", "--body-timeout", "1"], &[]);
    let mut s = raw(server.addr);
    s.write_all(chunked_put_head("/slow.bin").as_bytes())
        .expect("head");
    let chunk = [b'x'; 1000];
    // Six seconds of body at 4 KB/s: each chunk well inside the body timeout.
    for _ in 0..24 {
        s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .expect("size");
        s.write_all(&chunk).expect("chunk");
        s.write_all(b"\r\n").expect("end");
        std::thread::sleep(Duration::from_millis(250));
    }
    s.write_all(b"0\r\n\r\n").expect("last");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let start = Instant::now();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => assert!(start.elapsed() < SLACK, "no answer"),
        }
    }
    assert_eq!(status_of(&got), 201, "{}", String::from_utf8_lossy(&got));
    assert_eq!(
        std::fs::metadata(tree.root().join("slow.bin"))
            .expect("written")
            .len(),
        24_000
    );
}

#[test]
fn host_and_transfer_encoding_follow_rfc_9112() {
    let tree = Tree::new("framing");
    let server = Server::start(&tree, 1, &["--upload"], &[]);
    let cases: &[(&[u8], u16)] = &[
        (b"GET /hello.txt HTTP/1.1\r\n\r\n", 400),
        (b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n", 400),
        (b"GET /hello.txt HTTP/1.1\r\nHost: a b/c\r\n\r\n", 400),
        (b"GET /hello.txt HTTP/1.0\r\n\r\n", 200),
        (b"GET /hello.txt HTTP/1.1\r\nHost: [::1]:80\r\nConnection: close\r\n\r\n", 200),
        (
            b"PUT /gz.bin HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            501,
        ),
        (
            b"PUT /cc.bin HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            400,
        ),
    ];
    for (request, want) in cases {
        let got = exchange(server.addr, request);
        assert_eq!(
            status_of(&got),
            *want,
            "{} -> {}",
            String::from_utf8_lossy(request),
            String::from_utf8_lossy(&got)
        );
    }
    assert!(
        !tree.root().join("gz.bin").exists(),
        "stored without decoding"
    );
    assert!(!tree.root().join("cc.bin").exists());
}

/// hyper refuses 2^64 − 2 and 2^64 − 1 itself, as `431`; servery answers them `413` with
/// its reason, whole or with the digits cut across reads, and leaves hyper's `431` to
/// heads that really are too large — including one after a request that carried the
/// same digits legitimately.
#[test]
fn a_content_length_too_large_to_represent_is_413_with_its_reason() {
    let tree = Tree::new("length");
    let server = Server::start(&tree, 1, &["--upload"], &[]);
    for value in ["18446744073709551615", "18446744073709551614"] {
        let head =
            format!("PUT /big.bin HTTP/1.1\r\nHost: localhost\r\nContent-Length: {value}\r\n\r\n");
        let got = exchange(server.addr, head.as_bytes());
        let text = String::from_utf8_lossy(&got);
        assert_eq!(status_of(&got), 413, "{value}: {text}");
        assert!(
            text.contains("Content-Length larger than the server can take"),
            "{text}"
        );
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
    }
    // The digits cut across two reads.
    let mut s = raw(server.addr);
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1844674407")
        .expect("write");
    s.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(b"3709551615\r\n\r\n").expect("write");
    let got = wait_closed(s, Duration::from_secs(10), "split").0;
    assert_eq!(status_of(&got), 413, "{}", String::from_utf8_lossy(&got));
    assert!(!tree.root().join("big.bin").exists());

    // A head over the size bound is still hyper's 431 ...
    let big = format!(
        "GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\n\r\n",
        "x".repeat(70 * 1024)
    );
    assert_eq!(status_of(&exchange(server.addr, big.as_bytes())), 431);
    // ... and so is one with too many fields after a request that carried the digits;
    // while a later request on the same connection with the length is 413.
    let mut many = String::from("GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n");
    for i in 0..120 {
        many.push_str(&format!("X-F{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let overflow = "GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 18446744073709551615\r\n\r\n";
    for (second, want) in [(many.as_str(), 431), (overflow, 413)] {
        let mut s = raw(server.addr);
        s.write_all(
            b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nX-Note: 18446744073709551615\r\n\r\n",
        )
        .expect("write");
        let first = read_one_response(&mut s);
        assert_eq!(status_of(&first), 200);
        s.write_all(second.as_bytes()).expect("write");
        let got = wait_closed(s, Duration::from_secs(10), "keep-alive").0;
        assert_eq!(status_of(&got), want, "{}", String::from_utf8_lossy(&got));
    }
}

/// Reads one response with a `Content-Length` body off a keep-alive connection.
fn read_one_response(s: &mut TcpStream) -> Vec<u8> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .expect("content-length");
            if got.len() >= end + 4 + len {
                return got;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no whole response"
        );
        match s.read(&mut buf) {
            Ok(0) => panic!("closed early: {}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
}

#[test]
fn one_form_creates_at_most_max_upload_files() {
    let tree = Tree::new("manyfiles");
    let server = Server::start(&tree, 1, &["--upload", "--max-upload-files", "3"], &[]);
    let boundary = "XyZ";
    let mut body = String::new();
    for i in 0..5 {
        body.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f{i}.txt\"\r\n\r\nfile {i}\r\n"
        ));
    }
    body.push_str(&format!("--{boundary}--\r\n"));
    let request = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let got = exchange(server.addr, request.as_bytes());
    assert_eq!(status_of(&got), 413, "{}", String::from_utf8_lossy(&got));
    let written = (0..5)
        .filter(|i| tree.root().join(format!("f{i}.txt")).exists())
        .count();
    assert_eq!(written, 3, "the files before the limit stay, none after it");
}

#[test]
fn inconsistent_upload_limits_are_a_configuration_error_naming_both() {
    let tree = Tree::new("limits");
    let root = tree.root();
    let root = root.to_str().expect("utf-8");
    let done = run_servery(
        &[
            root,
            "--upload",
            "--max-upload-size",
            "100",
            "--max-upload-bytes",
            "10",
            "--check-config",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(done.status.code(), Some(2), "{done:?}");
    let said = format!("{}{}", done.stdout, done.stderr);
    assert!(
        said.contains("--max-upload-size") && said.contains("broker.max_upload_bytes"),
        "{said}"
    );
    // The valid configuration shows every upload and connection limit.
    let done = run_servery(
        &[
            root,
            "--upload",
            "--max-upload-files",
            "7",
            "--check-config",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    for line in [
        "uploads.max_upload_files = 7",
        "uploads.max_upload_size = 1073741824",
        "connections.body_timeout = 20",
        "connections.request_head_timeout = 30",
    ] {
        assert!(
            done.stdout.contains(line),
            "{line} missing from:\n{}",
            done.stdout
        );
    }
}

#[test]
fn a_visible_link_to_a_hidden_file_is_served_as_the_operator_made_it() {
    // docs/decisions/0015-links-to-hidden-files.md: the hidden rule applies to names in
    // requests and listings; a link with a visible name is the operator's own choice.
    let tree = Tree::new("alias");
    std::fs::write(tree.root().join(".env"), b"SECRET=1\n").expect("write");
    std::os::unix::fs::symlink(".env", tree.root().join("alias")).expect("link");
    let server = Server::start(&tree, 1, &[], &[]);
    assert_eq!(http_get(server.addr, "/.env").map(|r| r.0), Ok(404));
    assert_eq!(
        http_get(server.addr, "/alias"),
        Ok((200, b"SECRET=1\n".to_vec()))
    );
}
