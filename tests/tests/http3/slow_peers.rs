//! Slow and withholding peers over HTTP/3 (decision 0084): clients that never extend the
//! server's flow-control credit past a response's head, or extend it a trickle at a time,
//! and PING so that QUIC's own idle timer never ends them. They count as idle for a full
//! worker, and each is closed once it has held its response `--send-timeout`, as HTTP/2's
//! zero-window streams are (`slow_peers.rs`).

use std::sync::Mutex;

use bytes::Buf;

use super::*;

/// A sparse file far larger than any window a test grants.
fn large_file(tree: &Tree) {
    std::fs::File::create(tree.root().join("large.bin"))
        .and_then(|f| f.set_len(64 << 20))
        .expect("large file");
}

/// What a [`Withholding`] client has seen.
#[derive(Debug, Default)]
struct Seen {
    /// Body bytes read.
    data: usize,
    /// When the server closed the connection, after the head arrived.
    closed_after: Option<Duration>,
}

/// One connection whose `GET /large.bin` has its head; its body is read at `pace` bytes a
/// second (0: never), so the server's credit is what the client grants as it reads.
struct Withholding {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Withholding {
    async fn open(server: SocketAddr, cert: &CertificateDer<'static>, pace: usize) -> Self {
        // Room for the response head and a little more, no further.
        let config = h3_client::config_withholding(cert, 2048);
        let mut h3 = h3_client::connect(server, loopback(), &config, REQUEST_BOUND)
            .await
            .expect("connect");
        let (status, mut stream) = h3
            .open("/large.bin", REQUEST_BOUND)
            .await
            .expect("the response head");
        assert_eq!(status, 200);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = Arc::clone(&seen);
        let start = Instant::now();
        let task = tokio::spawn(async move {
            let connection = h3.connection.clone();
            let reading = async {
                if pace == 0 {
                    return std::future::pending().await;
                }
                while let Ok(Some(mut chunk)) = stream.recv_data().await {
                    let n = chunk.remaining();
                    chunk.advance(n);
                    shared.lock().expect("lock").data += n;
                    let wait = Duration::from_secs_f64(n as f64 / pace as f64);
                    tokio::time::sleep(wait).await;
                }
                std::future::pending::<()>().await;
            };
            tokio::select! {
                () = reading => {}
                _ = connection.closed() => {}
            }
            shared.lock().expect("lock").closed_after = Some(start.elapsed());
            drop(h3);
        });
        Withholding { seen, task }
    }

    fn closed_after(&self) -> Option<Duration> {
        self.seen.lock().expect("lock").closed_after
    }

    fn data(&self) -> usize {
        self.seen.lock().expect("lock").data
    }
}

/// `n` [`Withholding`] clients opened at once (one after another, a loaded machine could
/// take so long that the first is cut before the last has its head).
async fn open_all(
    server: SocketAddr,
    cert: &CertificateDer<'static>,
    n: usize,
    pace: usize,
) -> Vec<Withholding> {
    let opening: Vec<_> = (0..n)
        .map(|_| {
            let cert = cert.clone();
            tokio::spawn(async move { Withholding::open(server, &cert, pace).await })
        })
        .collect();
    let mut opened = Vec::new();
    for o in opening {
        opened.push(o.await.expect("opened"));
    }
    opened
}

/// `GET /hello.txt` on a fresh connection, answered `200` within `bound`.
async fn served_within(
    server: SocketAddr,
    cert: &CertificateDer<'static>,
    bound: Duration,
    what: &str,
) -> Duration {
    let start = Instant::now();
    let asked = async {
        let config = h3_client::config(cert);
        let mut h3 = h3_client::connect(server, loopback(), &config, bound).await?;
        h3.get("/hello.txt", bound).await
    };
    match tokio::time::timeout(bound, asked).await {
        Ok(Ok(reply)) => assert_eq!((reply.status, &reply.body[..]), (200, HELLO), "{what}"),
        Ok(Err(miss)) => panic!("{what}: {miss:?}"),
        Err(_) => panic!("{what}: not answered within {bound:?}"),
    }
    start.elapsed()
}

/// Every slot of a worker taken by HTTP/3 connections whose client never grants credit
/// past the head: a normal request is served long before any deadline (20 s here), by
/// closing one of them, because a response its client does not take counts as idle.
#[test]
fn http3_responses_at_a_zero_window_do_not_fill_a_worker() {
    let tree = Tree::new("h3-zero-window");
    large_file(&tree);
    let (cert, flags) = identity(&tree);
    let server = start(
        &tree,
        1,
        &flags,
        &["--max-connections", "4", "--send-timeout", "20"],
    );
    runtime().block_on(async {
        let stuck = open_all(server.addr, &cert, 4, 0).await;
        let took = served_within(
            server.addr,
            &cert,
            Duration::from_secs(10),
            "a request while withholding HTTP/3 clients fill the worker",
        )
        .await;
        eprintln!("MEASURED served in {took:?} past four withholding HTTP/3 connections");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !stuck.iter().any(|s| s.closed_after().is_some()) {
            assert!(
                Instant::now() < deadline,
                "no withholding connection was closed to make room (the full worker served \
                 the new one over --max-connections 4, or left the one it chose open)"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for s in stuck {
            assert!(s.data() == 0, "it read nothing");
            s.task.abort();
        }
    });
}

/// One withholding connection, a worker with room to spare: closed once it has held its
/// response for `--send-timeout`, though its client keeps PINGing.
#[test]
fn an_http3_response_at_a_zero_window_is_closed_after_the_send_deadline() {
    let tree = Tree::new("h3-zero-window-deadline");
    large_file(&tree);
    let (cert, flags) = identity(&tree);
    let server = start(&tree, 1, &flags, &["--send-timeout", "3"]);
    runtime().block_on(async {
        let stuck = Withholding::open(server.addr, &cert, 0).await;
        let deadline = Instant::now() + Duration::from_secs(15);
        let closed = loop {
            if let Some(after) = stuck.closed_after() {
                break after;
            }
            assert!(
                Instant::now() < deadline,
                "a PINGing client withholding credit was not closed within 15 s of \
                 --send-timeout 3"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(closed >= Duration::from_secs(3), "closed early: {closed:?}");
        eprintln!("MEASURED withholding HTTP/3 connection closed after {closed:?}");
    });
}

/// More HTTP/3 downloads read at a trickle (4 KiB/s, below the floor set here) than the
/// worker has slots: each read grants credit, so something moves all the time, yet each is
/// cut, and a normal request is served meanwhile.
#[test]
fn http3_downloads_read_at_a_trickle_are_cut_and_do_not_hold_the_worker() {
    let tree = Tree::new("h3-trickle");
    large_file(&tree);
    let (cert, flags) = identity(&tree);
    let server = start(
        &tree,
        1,
        &flags,
        &[
            "--max-connections",
            "4",
            "--send-timeout",
            "5",
            "--min-send-rate",
            "65536",
        ],
    );
    runtime().block_on(async {
        let readers = open_all(server.addr, &cert, 4, 4096).await;
        let took = served_within(
            server.addr,
            &cert,
            Duration::from_secs(10),
            "a request while trickling HTTP/3 downloads fill the worker",
        )
        .await;
        eprintln!("MEASURED served in {took:?} past four trickling HTTP/3 downloads");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !readers.iter().all(|r| r.closed_after().is_some()) {
            assert!(
                Instant::now() < deadline,
                "trickling HTTP/3 downloads not all cut within 20 s of --send-timeout 5"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for r in readers {
            assert!(r.data() > 0, "the trickle moved");
        }
    });
}

/// An HTTP/3 connection that makes no request is closed at `--request-head-timeout` and
/// counted where a TCP one is (`servery_connections_closed_unheard_total`, reason
/// `head_timeout`), though its client keeps PINGing.
#[test]
fn an_http3_connection_that_asks_nothing_is_closed_and_counted_unheard() {
    const UNHEARD: &str = "servery_connections_closed_unheard_total{reason=\"head_timeout\"}";
    let tree = Tree::new("h3-unheard");
    let (cert, flags) = identity(&tree);
    let mut server = start(
        &tree,
        1,
        &flags,
        &["--request-head-timeout", "1", "--admin", "127.0.0.1:0"],
    );
    let admin = server.admin_addr(Duration::from_secs(20));
    let unheard = || {
        let (_, body) = http_get(admin, "/metrics").expect("metrics");
        String::from_utf8_lossy(&body)
            .lines()
            .find_map(|l| l.strip_prefix(UNHEARD))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = unheard();
    let config = h3_client::config_pinging(&cert, Some(Duration::from_millis(300)));
    runtime().block_on(async {
        let h3 = h3_client::connect(server.addr, loopback(), &config, REQUEST_BOUND)
            .await
            .expect("connect");
        let closed = tokio::time::timeout(Duration::from_secs(15), h3.connection.closed()).await;
        assert!(
            closed.is_ok(),
            "a PINGing HTTP/3 connection that asked nothing was not closed within 15 s of \
             --request-head-timeout 1"
        );
    });
    wait_until(
        Duration::from_secs(10),
        "the unheard connection counted",
        || (unheard() >= before + 1.0).then_some(()),
    );
}
