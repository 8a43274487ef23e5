//! Peers that hold a worker, or the admin listener, by being slow or silent, against the
//! real binary over raw sockets on loopback: HTTP/2 streams whose client never opens its
//! flow-control window, downloads read a trickle at a time, and silent connections to the
//! admin listener. Every wait is bounded; every test fails without its defence.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use servery_tests::*;

/// A file larger than what loopback's socket buffers hold between the two ends, sparse.
fn large_file(tree: &Tree) {
    std::fs::File::create(tree.root().join("large.bin"))
        .and_then(|f| f.set_len(64 << 20))
        .expect("large file");
}

fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    s
}

/// Whether the read says the peer closed (EOF or reset), as opposed to nothing yet.
fn closed(read: &std::io::Result<usize>) -> bool {
    match read {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

/// An HTTP/2 frame header.
fn frame(len: usize, kind: u8, flags: u8, stream: u32) -> Vec<u8> {
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f
}

/// What an [`H2Client`] has seen.
#[derive(Debug, Default)]
struct Seen {
    /// The response's HEADERS arrived: the request is in progress, its body waiting.
    answered: bool,
    /// DATA bytes received.
    data: usize,
    /// When the server closed the connection, after it was opened.
    closed_after: Option<Duration>,
}

/// An h2c connection that asks for `/large.bin` with an initial stream window of zero.
/// Every 100 ms it either pings (`grant == 0`: it never opens the window, but bytes move
/// both ways) or grants `grant` more bytes of window to the stream and the connection
/// (a trickle). It acknowledges the server's SETTINGS and runs until the server closes the
/// connection or `stop`.
struct H2Client {
    seen: Arc<std::sync::Mutex<Seen>>,
    thread: JoinHandle<()>,
}

impl H2Client {
    fn open(addr: SocketAddr, grant: u32, stop: &Arc<AtomicBool>) -> H2Client {
        let mut s = raw(addr);
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // SETTINGS: INITIAL_WINDOW_SIZE (0x4) = 0.
        hello.extend(frame(6, 0x4, 0, 0));
        hello.extend([0, 4, 0, 0, 0, 0]);
        // HEADERS on stream 1, END_STREAM | END_HEADERS: :method GET, :scheme http,
        // :authority "localhost" (indexed names), :path /large.bin (literal, not indexed).
        let block = b"\x82\x86\x41\x09localhost\x04\x0a/large.bin";
        hello.extend(frame(block.len(), 0x1, 0x5, 1));
        hello.extend_from_slice(block);
        s.write_all(&hello).expect("preface and request");
        let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
        let (shared, stop) = (Arc::clone(&seen), Arc::clone(stop));
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            let mut buf = [0u8; 16 * 1024];
            let mut pending = Vec::new();
            let mut ticks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let read = s.read(&mut buf);
                if closed(&read) {
                    shared.lock().expect("lock").closed_after = Some(start.elapsed());
                    return;
                }
                pending.extend_from_slice(&buf[..read.unwrap_or(0)]);
                let mut out = Vec::new();
                while pending.len() >= 9 {
                    let len = usize::from(pending[0]) << 16
                        | usize::from(pending[1]) << 8
                        | usize::from(pending[2]);
                    if pending.len() < 9 + len {
                        break;
                    }
                    let (kind, flags) = (pending[3], pending[4]);
                    let mut seen = shared.lock().expect("lock");
                    match kind {
                        0x0 => seen.data += len,
                        0x1 => seen.answered = true,
                        0x4 if flags & 0x1 == 0 => out.extend(frame(0, 0x4, 0x1, 0)),
                        _ => {}
                    }
                    pending.drain(..9 + len);
                }
                ticks += 1;
                if grant == 0 {
                    out.extend(frame(8, 0x6, 0, 0));
                    out.extend(ticks.to_be_bytes());
                } else {
                    for stream in [0u32, 1] {
                        out.extend(frame(4, 0x8, 0, stream));
                        out.extend(grant.to_be_bytes());
                    }
                }
                if s.write_all(&out).is_err() {
                    shared.lock().expect("lock").closed_after = Some(start.elapsed());
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        H2Client { seen, thread }
    }

    fn answered(&self) -> bool {
        self.seen.lock().expect("lock").answered
    }

    fn closed_after(&self) -> Option<Duration> {
        self.seen.lock().expect("lock").closed_after
    }

    fn data(&self) -> usize {
        self.seen.lock().expect("lock").data
    }

    fn join(self) {
        let _ = self.thread.join();
    }
}

/// Opens `n` [`H2Client`]s and waits until every one has its response head: each then
/// holds a request in progress.
fn in_progress(addr: SocketAddr, n: usize, grant: u32, stop: &Arc<AtomicBool>) -> Vec<H2Client> {
    let clients: Vec<_> = (0..n).map(|_| H2Client::open(addr, grant, stop)).collect();
    wait_until(Duration::from_secs(10), "every response head", || {
        clients.iter().all(H2Client::answered).then_some(())
    });
    clients
}

/// A `GET` that must be answered `200` with `HELLO` within `bound`.
fn served_within(addr: SocketAddr, bound: Duration, what: &str) -> Duration {
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(http_get(addr, "/hello.txt"));
    });
    match rx.recv_timeout(bound) {
        Ok(got) => assert_eq!(got, Ok((200, HELLO.to_vec())), "{what}"),
        Err(_) => panic!("{what}: not answered within {bound:?}"),
    }
    start.elapsed()
}

/// The first case: every slot of a worker taken by HTTP/2 streams whose client
/// never opens its window (and pings, so bytes keep moving). Such a connection counts as
/// idle, so a normal request is served long before any deadline; and each is closed once
/// it has waited `--send-timeout` on its client.
#[test]
fn http2_streams_at_a_zero_window_do_not_fill_a_worker() {
    let tree = Tree::new("zero-window");
    large_file(&tree);
    let mut args = FAST.to_vec();
    args.extend(["--max-connections", "4", "--send-timeout", "20"]);
    let server = Server::start(&tree, 1, &args, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let stuck = in_progress(server.addr, 4, 0, &stop);
    // The worker is full of them: a request is served by closing one, well inside the
    // 20-second send deadline (and the 30-second head and keep-alive deadlines).
    let took = served_within(
        server.addr,
        Duration::from_secs(10),
        "a request while zero-window streams fill the worker",
    );
    eprintln!("served in {took:?} past four zero-window connections");
    wait_until(
        Duration::from_secs(5),
        "a zero-window connection closed to make room",
        || stuck.iter().find_map(H2Client::closed_after),
    );
    stop.store(true, Ordering::Relaxed);
    stuck.into_iter().for_each(H2Client::join);
}

#[test]
fn an_http2_stream_at_a_zero_window_is_closed_after_the_send_deadline() {
    let tree = Tree::new("zero-window-deadline");
    large_file(&tree);
    let mut args = FAST.to_vec();
    args.extend(["--send-timeout", "2"]);
    let server = Server::start(&tree, 1, &args, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let stuck = in_progress(server.addr, 1, 0, &stop).remove(0);
    let (closed, _) = wait_until(
        Duration::from_secs(15),
        "a pinging zero-window stream closed after --send-timeout 2",
        || stuck.closed_after(),
    );
    stop.store(true, Ordering::Relaxed);
    assert_eq!(stuck.data(), 0);
    stuck.join();
    assert!(closed >= Duration::from_secs(2), "closed early: {closed:?}");
    eprintln!("closed after {closed:?}");
}

/// The second case: more downloads read at a trickle than the worker has slots
/// (HTTP/2 window updates of 1 KiB every 100 ms, so the server writes a little all the
/// time and the rule that something moves never fires). They are cut, because the floor
/// is a minimum rate that a trickle cannot meet however long it goes on, and a normal
/// request is served meanwhile.
#[test]
fn downloads_read_at_a_trickle_are_cut_and_do_not_hold_the_worker() {
    let tree = Tree::new("trickle");
    large_file(&tree);
    let mut args = FAST.to_vec();
    args.extend([
        "--max-connections",
        "4",
        "--send-timeout",
        "3",
        "--min-send-rate",
        "65536",
    ]);
    let server = Server::start(&tree, 1, &args, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let readers = in_progress(server.addr, 4, 1024, &stop);
    let took = served_within(
        server.addr,
        Duration::from_secs(10),
        "a request while trickling downloads fill the worker",
    );
    eprintln!("served in {took:?} past four trickling downloads");
    // Each is cut well before it could have read the file at its pace (two hours).
    wait_until(Duration::from_secs(20), "every trickle cut", || {
        readers
            .iter()
            .all(|r| r.closed_after().is_some())
            .then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.data() > 0, "the trickle moved");
        r.join();
    }
}

/// Start servery with the admin listener on an ephemeral loopback port; the server and
/// the admin address (from its banner line).
fn start_with_admin(tree: &Tree, args: &[&str]) -> (Server, SocketAddr) {
    let mut all = FAST.to_vec();
    all.extend_from_slice(args);
    all.extend(["--admin", "127.0.0.1:0"]);
    let mut server = Server::start(tree, 1, &all, &[]);
    let addr = server.admin_addr(Duration::from_secs(10));
    (server, addr)
}

/// `n` threads that each hold a silent connection to `addr` until it is closed, then open
/// another, until `stop`.
/// `n` clients that connect to `addr` and say nothing, each reconnecting when closed;
/// `connected` counts their connections.
fn silent_flood(
    addr: SocketAddr,
    n: usize,
    stop: &Arc<AtomicBool>,
    connected: &Arc<AtomicUsize>,
) -> Vec<JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let stop = Arc::clone(stop);
            let connected = Arc::clone(connected);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                    else {
                        continue;
                    };
                    connected.fetch_add(1, Ordering::Relaxed);
                    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
                    let mut buf = [0u8; 16];
                    while !stop.load(Ordering::Relaxed) && !closed(&s.read(&mut buf)) {}
                }
            })
        })
        .collect()
}

/// The third case: 24 silent connections (reopened as fast as they are closed)
/// against the admin listener's 16 made `/livez` fail 12 of 14 probes. The listener now
/// closes a silent one to admit a probe, so every probe is answered within the bound an
/// orchestrator would give it.
#[test]
fn silent_connections_to_the_admin_listener_do_not_make_livez_fail() {
    let tree = Tree::new("admin-silent");
    let (server, admin) = start_with_admin(&tree, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let connected = Arc::new(AtomicUsize::new(0));
    let flood = silent_flood(admin, 24, &stop, &connected);
    // The flood fills the listener first: every one of its clients has connected.
    wait_until(
        Duration::from_secs(10),
        "the 24 silent clients connected",
        || (connected.load(Ordering::Relaxed) >= 24).then_some(()),
    );
    let mut worst = Duration::ZERO;
    for probe in 0..14 {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(http_get(admin, "/livez"));
        });
        let start = Instant::now();
        match rx.recv_timeout(Duration::from_secs(3)) {
            Ok(got) => assert_eq!(
                got.map(|(status, _)| status),
                Ok(200),
                "probe {probe} under the flood"
            ),
            Err(_) => panic!("probe {probe}: /livez not answered within 3 s under the flood"),
        }
        worst = worst.max(start.elapsed());
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    flood.into_iter().for_each(|f| {
        let _ = f.join();
    });
    eprintln!("14 probes answered past 24 silent connections, slowest {worst:?}");
    drop(server);
}

/// A connection to the admin listener that never sends a byte is closed at the head
/// deadline, and one that stops after a request at the keep-alive deadline.
#[test]
fn admin_connections_are_under_the_deadlines() {
    let tree = Tree::new("admin-deadlines");
    let (_server, admin) = start_with_admin(
        &tree,
        &["--request-head-timeout", "1", "--keep-alive-timeout", "1"],
    );
    let silent = raw(admin);
    let start = Instant::now();
    wait_until(
        Duration::from_secs(5),
        "a silent admin connection closed",
        || closed(&(&silent).read(&mut [0u8; 16])).then_some(()),
    );
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "closed early"
    );
    let mut idle = raw(admin);
    idle.write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("request");
    let mut got = Vec::new();
    wait_until(Duration::from_secs(5), "the answer, then the close", || {
        let mut buf = [0u8; 1024];
        let read = idle.read(&mut buf);
        got.extend_from_slice(&buf[..*read.as_ref().unwrap_or(&0)]);
        closed(&read).then_some(())
    });
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

/// The status of the response whose head starts `s`, waiting at most `bound` for it.
fn status_line(s: &mut TcpStream, bound: Duration) -> Option<String> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while start.elapsed() < bound && !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    (!text.is_empty()).then_some(text)
}

/// The fourth case: archive downloads whose clients stop reading held every
/// blocking thread, and listings stopped. Archives now hold at most a quarter of
/// `--max-blocking-threads` (2 of 8 here); past that they are answered 503 with
/// `Retry-After` at once, and listings keep being served. A WebDAV walk of the whole tree
/// and a copy of a tree are long work too; a walk of one level is not.
#[test]
fn stalled_archive_downloads_leave_threads_for_listings() {
    let tree = Tree::new("archives");
    std::fs::create_dir_all(tree.root().join("d")).expect("mkdir");
    // Stored, not deflated (not a compressible type), and larger than the socket buffers.
    std::fs::File::create(tree.root().join("d/big.bin"))
        .and_then(|f| f.set_len(64 << 20))
        .expect("big file");
    let mut args = FAST.to_vec();
    args.extend(["--max-blocking-threads", "8", "--dav", "--upload"]);
    std::fs::create_dir_all(tree.root().join("small")).expect("mkdir");
    std::fs::write(tree.root().join("small/a.txt"), b"a").expect("file");
    let server = Server::start(&tree, 1, &args, &[]);
    let mut stalled = Vec::new();
    let mut refused = 0;
    for _ in 0..8 {
        let mut s = raw(server.addr);
        s.write_all(b"GET /d/?archive=zip HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .expect("request");
        let head = status_line(&mut s, Duration::from_secs(5)).expect("an answer");
        if head.starts_with("HTTP/1.1 503") {
            assert!(head.to_ascii_lowercase().contains("retry-after:"), "{head}");
            refused += 1;
        } else {
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            // Its client reads no more: the writer fills the buffers and waits.
            stalled.push(s);
        }
    }
    for path in ["/", "/d/", "/d/?format=json"] {
        let (tx, rx) = std::sync::mpsc::channel();
        let addr = server.addr;
        std::thread::spawn(move || {
            let _ = tx.send(http_get(addr, path));
        });
        let start = Instant::now();
        match rx.recv_timeout(Duration::from_secs(2)) {
            Ok(Ok((200, _))) => {}
            Ok(other) => panic!("{path}: {other:?}"),
            Err(_) => panic!("{path}: not listed within 2 s while archives stall"),
        }
        eprintln!("{path} listed in {:?}", start.elapsed());
    }
    assert_eq!(
        (stalled.len(), refused),
        (2, 6),
        "a quarter of 8 threads for archives"
    );
    for (depth, status) in [("infinity", "503"), ("1", "207")] {
        let mut s = raw(server.addr);
        write!(
            s,
            "PROPFIND /d/ HTTP/1.1\r\nHost: localhost\r\nDepth: {depth}\r\nContent-Length: 0\r\n\r\n"
        )
        .expect("request");
        let head = status_line(&mut s, Duration::from_secs(5)).expect("an answer");
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}")),
            "PROPFIND Depth {depth}: {head}"
        );
    }
    let copy = |addr| {
        let mut s = raw(addr);
        s.write_all(
            b"COPY /small/ HTTP/1.1\r\nHost: localhost\r\nDestination: http://localhost/copy/\r\nContent-Length: 0\r\n\r\n",
        )
        .expect("request");
        status_line(&mut s, Duration::from_secs(5)).expect("an answer")
    };
    let refused = copy(server.addr);
    assert!(refused.starts_with("HTTP/1.1 503"), "COPY: {refused}");
    assert!(!tree.root().join("copy").exists(), "nothing made");
    // The stalled clients go: their writers end, the share is free, the copy is made.
    drop(stalled);
    wait_until(
        Duration::from_secs(10),
        "the copy once the share is free",
        || copy(server.addr).starts_with("HTTP/1.1 201").then_some(()),
    );
    assert_eq!(
        std::fs::read(tree.root().join("copy/a.txt")).ok(),
        Some(b"a".to_vec())
    );
}

/// Searches take a blocking thread for as long as their walk (bounded by 2 s); many at once
/// held every thread and queued the rest, and a listing waited behind them all. They now
/// hold at most the share of long work (2 of 8 threads here); the others are answered 503
/// at once, and a listing is served within a second.
#[test]
fn concurrent_searches_do_not_hold_listings_back() {
    let tree = Tree::new("searches");
    // 100,000 names: the most one search looks at.
    for d in 0..100 {
        let dir = tree.root().join(format!("t/d{d}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..1000 {
            std::fs::File::create(dir.join(format!("file{f}.txt"))).expect("file");
        }
    }
    let mut args = FAST.to_vec();
    args.extend(["--max-blocking-threads", "8"]);
    let server = Server::start(&tree, 1, &args, &[]);
    let addr = server.addr;
    let searches: Vec<_> = (0..40)
        .map(|_| std::thread::spawn(move || http_get(addr, "/t/?q=nothing-is-called-this")))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let took = served_within(addr, Duration::from_secs(10), "a request for a file");
    let start = Instant::now();
    let listed = http_get(addr, "/t/d7/?format=json");
    let listing = start.elapsed();
    let statuses: Vec<u16> = searches
        .into_iter()
        .map(|s| s.join().expect("search").map_or(0, |(status, _)| status))
        .collect();
    eprintln!("file in {took:?}, listing in {listing:?} past 40 searches: {statuses:?}");
    assert_eq!(listed.map(|(status, _)| status), Ok(200));
    assert!(
        listing < Duration::from_secs(1),
        "a listing took {listing:?} while searches ran"
    );
    assert!(statuses.contains(&200), "some searches ran: {statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "{statuses:?}"
    );
}

/// A reload that changes the deadlines changes them on the admin listener too, for the
/// connections it accepts after the reload, as on the new workers (decision 0042).
#[test]
fn a_reload_changes_the_admin_listeners_deadlines() {
    let tree = Tree::new("admin-reload-deadlines");
    let (server, admin) = start_with_admin(&tree, &["--request-head-timeout", "4"]);
    server.wait_ready(1, Duration::from_secs(30));
    // How long the admin listener waits for the rest of a head begun on a new connection.
    let half_head_closed_after = || {
        let mut s = raw(admin);
        s.write_all(b"GET /livez HTTP/1.1\r\n")
            .expect("half a head");
        let start = Instant::now();
        wait_until(Duration::from_secs(10), "a half head closed", || {
            closed(&s.read(&mut [0u8; 256])).then_some(())
        });
        start.elapsed()
    };
    let before = half_head_closed_after();
    assert!(
        before >= Duration::from_millis(3500),
        "closed after {before:?}, before the 4 s head deadline"
    );
    let answer = server
        .ctl(&serde_json::json!({"cmd": "reload", "set": {"request_head_timeout": 1}}))
        .expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    let after = half_head_closed_after();
    assert!(
        after < Duration::from_millis(2500),
        "the admin listener kept the head deadline it started with after a reload set it to \
         1 s: a half head was closed after {after:?}"
    );
    eprintln!(
        "half head on the admin listener closed after {before:?}, then {after:?} past the reload"
    );
}
