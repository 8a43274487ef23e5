//! Stopping: SIGTERM and `ctl stop` leave no child, no listener and no control socket;
//! when the parent is killed outright, its workers notice, drain and exit by themselves.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use servery_tests::serde_json::json;
use servery_tests::*;

fn refuses_connections(server: &Server) -> bool {
    TcpStream::connect_timeout(&server.addr, Duration::from_millis(500)).is_err()
}

fn assert_nothing_left(server: &Server, pids: &BTreeSet<u32>) {
    for &pid in pids {
        assert!(!alive(pid), "worker {pid} outlived the parent");
    }
    let left = processes_in_groups(pids);
    assert!(
        left.is_empty(),
        "processes left in the workers' groups: {left:?}"
    );
    assert!(
        !server.socket.exists(),
        "the control socket file was removed"
    );
    assert!(refuses_connections(server), "nothing listens any more");
}

/// A download the server is still writing: a body far larger than the socket buffers,
/// of which the client has read only the start.
struct Stalled {
    stream: TcpStream,
    got: Vec<u8>,
}

const STALLED_LEN: usize = 16 << 20;

fn stalled_body(i: usize) -> u8 {
    (i % 253) as u8
}

fn start_stalled_download(addr: SocketAddr) -> Stalled {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET /stalled.bin HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut got = vec![0; 64 * 1024];
    let n = stream.read(&mut got).expect("the response starts");
    got.truncate(n);
    // Let the server fill the socket buffers and block on the rest.
    std::thread::sleep(Duration::from_millis(100));
    Stalled { stream, got }
}

impl Stalled {
    /// Read the rest; the whole body must arrive.
    fn finish(mut self) -> Result<(), String> {
        self.stream
            .read_to_end(&mut self.got)
            .map_err(|e| format!("after {} bytes: {e}", self.got.len()))?;
        let head = self
            .got
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or("no response head")?;
        let body = &self.got[head + 4..];
        if body.len() != STALLED_LEN {
            return Err(format!("{} of {STALLED_LEN} bytes", body.len()));
        }
        match body
            .iter()
            .enumerate()
            .find(|(i, b)| **b != stalled_body(*i))
        {
            Some((i, _)) => Err(format!("wrong byte at {i}")),
            None => Ok(()),
        }
    }
}

/// How soon before the SIGTERM a request may have been made whose connection was still
/// queued, unaccepted, when the workers stopped accepting: 0.14 ms measured on a quiet
/// machine, but workers that two busy cores do not schedule leave a connection in the
/// queue for as long as they wait. (A response cut while being sent is caught apart from
/// this: the stalled download must complete.)
const QUEUED_AT_THE_STOP: Duration = Duration::from_millis(100);

#[test]
fn sigterm_stops_cleanly_leaving_no_process_listener_or_socket() {
    let tree = Tree::new("term");
    let body: Vec<u8> = (0..STALLED_LEN).map(stalled_body).collect();
    std::fs::write(tree.root().join("stalled.bin"), body).expect("write");
    let mut server = Server::start(&tree, 3, FAST, &[]);
    let (status, _) = server.wait_ready(3, Duration::from_secs(20));
    let pids: BTreeSet<u32> = worker_pids(&status).into_iter().collect();
    // Large bodies from four clients, and one download the server is certainly still
    // writing: requests are in flight when the signal comes.
    let load = Load::start(server.addr, "/sub/big.bin", &big_body(), 4);
    load.wait_for_more(100, Duration::from_secs(20));
    let stalled = start_stalled_download(server.addr);
    let term = std::time::Instant::now();
    server.signal(Sig::TERM);
    let stalled = stalled.finish();
    let (code, _) = server.wait_exit(DRAIN_TIMEOUT + FORCE_TIMEOUT + Duration::from_secs(3));
    let report = load.stop();
    eprintln!(
        "MEASURED SIGTERM under load: exit {:?}; load {} ok / {} failed (refused after the listeners closed)",
        code.code(),
        report.ok,
        report.failed
    );
    assert_eq!(code.code(), Some(0), "stderr:\n{}", server.stderr());
    assert_eq!(
        stalled,
        Ok(()),
        "a download in flight at the SIGTERM must complete"
    );
    // A graceful stop: a request made before the SIGTERM is answered; only those made
    // after it may fail, refused once the listeners closed. One exception, a race the
    // workers leave open: a connection still in the listen queue when the last worker
    // stops accepting is reset unanswered. That takes a request made within moments of
    // the signal; one cut off while a worker served it started earlier.
    let before: Vec<_> = report
        .failed_starts
        .iter()
        .filter(|(start, _)| *start < term)
        .map(|(start, what)| (term.duration_since(*start), what))
        .collect();
    if !before.is_empty() {
        eprintln!("MEASURED made before the SIGTERM and reset: {before:?}");
    }
    assert!(
        before
            .iter()
            .all(|(ago, what)| *ago < QUEUED_AT_THE_STOP && what.contains("reset")),
        "requests made before the SIGTERM failed (how long before, why): {before:?}"
    );
    assert_nothing_left(&server, &pids);
}

#[test]
fn ctl_stop_is_idempotent_and_clean() {
    let tree = Tree::new("stop");
    let mut server = Server::start(&tree, 2, FAST, &[]);
    let (status, _) = server.wait_ready(2, Duration::from_secs(20));
    let pids: BTreeSet<u32> = worker_pids(&status).into_iter().collect();
    server.ctl(&json!({"cmd": "stop"})).expect("stop");
    // A second stop while stopping is harmless (it may also find the socket gone).
    let _ = server.ctl(&json!({"cmd": "stop"}));
    let (code, _) = server.wait_exit(DRAIN_TIMEOUT + FORCE_TIMEOUT + Duration::from_secs(3));
    assert_eq!(code.code(), Some(0), "stderr:\n{}", server.stderr());
    assert_nothing_left(&server, &pids);
}

#[test]
fn workers_of_a_killed_parent_drain_and_exit() {
    let tree = Tree::new("orphans");
    let mut server = Server::start(&tree, 2, FAST, &[]);
    let (status, _) = server.wait_ready(2, Duration::from_secs(20));
    let pids: BTreeSet<u32> = worker_pids(&status).into_iter().collect();
    let load = Load::start(server.addr, "/sub/big.bin", &big_body(), 2);
    load.wait_for_more(20, Duration::from_secs(20));
    let killed = std::time::Instant::now();
    server.signal(Sig::KILL);
    server.wait_exit(Duration::from_secs(5));
    let bound = DRAIN_TIMEOUT + Duration::from_secs(2);
    wait_until(bound, "every orphaned worker gone", || {
        pids.iter().all(|&pid| !alive(pid)).then_some(())
    });
    let took = killed.elapsed();
    let report = load.stop();
    eprintln!(
        "MEASURED parent SIGKILL → workers gone in {took:?} (bound {bound:?}); load {} ok / {} failed",
        report.ok, report.failed
    );
    let left = processes_in_groups(&pids);
    assert!(
        left.is_empty(),
        "processes left in the workers' groups: {left:?}"
    );
    assert!(refuses_connections(&server), "no orphan keeps serving");
}
