//! Peers that hold a worker, or the admin listener, by being slow or silent, against the
//! real binary over raw sockets on loopback: HTTP/2 streams whose client never opens its
//! flow-control window, downloads read a trickle at a time, and silent connections to the
//! admin listener. Every wait is bounded; every test fails without its defence.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
        // :authority "x" (indexed names), :path /large.bin (literal, not indexed).
        let block = b"\x82\x86\x41\x01x\x04\x0a/large.bin";
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
