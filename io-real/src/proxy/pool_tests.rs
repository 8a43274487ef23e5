use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A connection whose state the test sets.
#[derive(Debug, Clone)]
struct Fake {
    id: u32,
    closed: Rc<Cell<bool>>,
    ready: Rc<Cell<bool>>,
}

impl Fake {
    fn new(id: u32) -> Fake {
        Fake {
            id,
            closed: Rc::new(Cell::new(false)),
            ready: Rc::new(Cell::new(true)),
        }
    }
}

impl Handle for Fake {
    fn is_closed(&self) -> bool {
        self.closed.get()
    }
    fn is_ready(&self) -> bool {
        self.ready.get()
    }
}

const TIMEOUT: Duration = Duration::from_secs(90);

fn list() -> IdleList<Fake> {
    IdleList::new(4, TIMEOUT)
}

#[test]
fn the_connection_given_back_last_is_taken_first() {
    let now = Instant::now();
    let mut idle = list();
    for id in 1..=3 {
        assert!(idle.put(Fake::new(id), now));
    }
    let taken: Vec<u32> = std::iter::from_fn(|| idle.take(now).map(|f| f.id)).collect();
    assert_eq!(taken, [3, 2, 1], "reuse is LIFO");
}

#[test]
fn a_connection_idle_past_the_timeout_is_never_taken() {
    let start = Instant::now();
    let mut idle = list();
    idle.put(Fake::new(1), start);
    idle.put(Fake::new(2), start + Duration::from_secs(60));
    let later = start + TIMEOUT + Duration::from_millis(1);
    assert_eq!(
        idle.take(later).map(|f| f.id),
        Some(2),
        "the newer one is fresh"
    );
    assert!(
        idle.take(later).is_none(),
        "the one idle for longer than the timeout is not taken"
    );
    assert!(idle.entries.is_empty(), "and it was dropped on the way");
}

#[test]
fn a_connection_at_the_timeout_is_still_taken() {
    let start = Instant::now();
    let mut idle = list();
    idle.put(Fake::new(1), start);
    assert_eq!(idle.take(start + TIMEOUT).map(|f| f.id), Some(1));
}

#[test]
fn the_reaper_drops_expired_and_closed_connections_and_says_when_next() {
    let start = Instant::now();
    let mut idle = list();
    idle.put(Fake::new(1), start);
    let closed = Fake::new(2);
    idle.put(closed.clone(), start + Duration::from_secs(10));
    idle.put(Fake::new(3), start + Duration::from_secs(30));
    closed.closed.set(true);
    let next = idle.expire(start + TIMEOUT + Duration::from_secs(1));
    let left: Vec<u32> = idle.entries.iter().map(|(f, _)| f.id).collect();
    assert_eq!(left, [3], "the expired one and the closed one are dropped");
    assert_eq!(next, Some(start + Duration::from_secs(30) + TIMEOUT));
    assert_eq!(idle.expire(start + Duration::from_secs(200)), None);
    assert!(idle.entries.is_empty());
}

#[test]
fn no_more_than_the_cap_are_kept_idle() {
    let now = Instant::now();
    let mut idle = list();
    for id in 1..=4 {
        assert!(idle.put(Fake::new(id), now), "{id} is within the cap");
    }
    assert!(
        !idle.put(Fake::new(5), now),
        "the fifth is over the cap of 4"
    );
    assert_eq!(idle.entries.len(), 4);
    assert_eq!(
        idle.take(now).map(|f| f.id),
        Some(4),
        "the one refused was closed"
    );
}

#[test]
fn a_closed_connection_is_never_taken_nor_kept() {
    let now = Instant::now();
    let mut idle = list();
    let first = Fake::new(1);
    idle.put(first.clone(), now);
    let second = Fake::new(2);
    idle.put(second.clone(), now);
    second.closed.set(true);
    assert_eq!(
        idle.take(now).map(|f| f.id),
        Some(1),
        "the closed one is skipped"
    );
    let closed = Fake::new(3);
    closed.closed.set(true);
    assert!(!idle.put(closed, now), "a closed connection is not kept");
    assert!(idle.take(now).is_none());
    drop(first);
}

#[test]
fn a_connection_not_ready_yet_is_skipped_and_kept() {
    let now = Instant::now();
    let mut idle = list();
    idle.put(Fake::new(1), now);
    let busy = Fake::new(2);
    busy.ready.set(false);
    idle.put(busy.clone(), now);
    assert_eq!(idle.take(now).map(|f| f.id), Some(1));
    assert!(idle.take(now).is_none(), "the busy one is not taken");
    busy.ready.set(true);
    assert_eq!(idle.take(now).map(|f| f.id), Some(2), "until it is ready");
}

#[test]
fn a_request_is_sent_again_only_when_unwritten_on_a_reused_connection() {
    assert!(may_retry(true, true), "unwritten on a reused connection");
    assert!(
        !may_retry(true, false),
        "written (its body may have been sent)"
    );
    assert!(
        !may_retry(false, true),
        "a fresh connection's failure is the request's"
    );
    assert!(!may_retry(false, false));
}

#[test]
fn a_connection_the_upstream_closes_is_not_kept() {
    let mut headers = HeaderMap::new();
    assert!(keeps_alive(Version::HTTP_11, &headers));
    assert!(
        !keeps_alive(Version::HTTP_10, &headers),
        "HTTP/1.0 closes by default"
    );
    headers.insert(
        header::CONNECTION,
        "Keep-Alive".parse().expect("test setup"),
    );
    assert!(keeps_alive(Version::HTTP_10, &headers));
    headers.insert(
        header::CONNECTION,
        "keep-alive, Close".parse().expect("test setup"),
    );
    assert!(!keeps_alive(Version::HTTP_11, &headers), "close wins");
    headers.insert(header::CONNECTION, "close".parse().expect("test setup"));
    assert!(!keeps_alive(Version::HTTP_11, &headers));
}

/// An upstream answering every request on a connection with `ok` (and `Connection:
/// close` when `close`): the connections it accepted are counted, and each one the proxy
/// closes is told on the receiver.
async fn upstream(
    close: bool,
) -> (
    std::net::SocketAddr,
    Arc<AtomicUsize>,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("test setup");
    let addr = listener.local_addr().expect("test setup");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    let (closes, closed) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let closes = closes.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 1024];
                loop {
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) => {
                                let _ = closes.send(());
                                return;
                            }
                            Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    seen.clear();
                    let head = if close { "connection: close\r\n" } else { "" };
                    let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n{head}\r\nok");
                    if socket.write_all(answer.as_bytes()).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted, closed)
}

fn pool_to(addr: std::net::SocketAddr, idle_timeout: Duration) -> Arc<Pool> {
    let connector = Connector {
        unix: Arc::new(Vec::new()),
        timeout: Duration::from_secs(5),
        tls: tokio_rustls::TlsConnector::from(
            super::super::tls::client_config(None, super::super::tls::Offer::Http11)
                .expect("test setup"),
        ),
    };
    Arc::new(Pool::new(
        Target::tcp("127.0.0.1", addr.port(), false),
        Arc::new(connector),
        idle_timeout,
    ))
}

fn get() -> Request<UpstreamBody> {
    let mut request = Request::new(
        http_body_util::Empty::new()
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *request.uri_mut() = http::Uri::from_static("/");
    request
        .headers_mut()
        .insert(header::HOST, "up".parse().expect("test setup"));
    request
}

/// Sends a request, reads its body to the end and gives the connection back as the
/// proxy's response body does; whether there was a lease to give back.
async fn exchange(pool: &Arc<Pool>) -> bool {
    let (response, lease) = pool.send(get()).await.expect("answered");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("test setup")
        .to_bytes();
    assert_eq!(&body[..], b"ok");
    let leased = lease.is_some();
    if let Some(lease) = lease {
        lease.give_back();
    }
    leased
}

#[tokio::test]
async fn requests_in_turn_share_one_connection() {
    let (addr, accepted, _closed) = upstream(false).await;
    let pool = pool_to(addr, TIMEOUT);
    for _ in 0..3 {
        assert!(exchange(&pool).await);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection reused");
}

#[tokio::test]
async fn a_connection_the_upstream_said_it_closes_is_not_reused() {
    let (addr, accepted, _closed) = upstream(true).await;
    let pool = pool_to(addr, TIMEOUT);
    for _ in 0..3 {
        assert!(!exchange(&pool).await, "no lease after `Connection: close`");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "a new connection each time"
    );
}

/// The reaper in real time: a connection left idle is closed when its idle timeout
/// passes, not before (the upstream sees the close), and the reaper's task ends once the
/// pool holds no idle connection.
#[tokio::test]
async fn the_reaper_closes_an_idle_connection_at_its_timeout_then_ends() {
    let short = Duration::from_millis(200);
    let (addr, accepted, mut closed) = upstream(false).await;
    let pool = pool_to(addr, short);
    let metrics = tokio::runtime::Handle::current().metrics();
    // The upstream's accept loop.
    let tasks_before = metrics.num_alive_tasks();
    let start = Instant::now();
    assert!(exchange(&pool).await);
    assert_eq!(
        pool.idle_counts().0,
        1,
        "reuse: the connection is kept idle"
    );
    assert!(
        pool.is_reaping(),
        "idle timeout: a connection given back starts the reaper"
    );
    // A bound on the wait for the exact event, so that a reaper that never closes fails
    // the test instead of hanging it.
    let bound = short * 50;
    let seen = tokio::time::timeout(bound, closed.recv()).await;
    assert!(
        matches!(seen, Ok(Some(()))),
        "idle timeout: the reaper closes an idle connection once its timeout passes (the upstream saw no close within {bound:?})"
    );
    let after = start.elapsed();
    assert!(
        after >= short,
        "idle timeout: the reaper closed an idle connection {after:?} after it was given back, before its timeout of {short:?}"
    );
    assert_eq!(pool.idle_counts(), (0, 0), "the closed connection is gone");
    assert!(
        !pool.is_reaping(),
        "idle timeout: the reaper stops when the pool holds no idle connection"
    );
    assert_eq!(
        metrics.num_alive_tasks(),
        tasks_before,
        "idle timeout: the reaper's task (and the closed connection's) ended once the pool held none"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // A connection given back later starts it again.
    assert!(exchange(&pool).await);
    assert!(
        pool.is_reaping(),
        "the next connection given back starts the reaper again"
    );
}
