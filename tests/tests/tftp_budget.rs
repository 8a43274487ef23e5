//! TFTP writes against the upload budgets (issue 34): what a write may send is bounded by
//! what it reserved, not by the size it announces; its reservation comes back the moment
//! it ends, whichever way it ends; and with `--auth` the start says that TFTP has none.

use std::net::SocketAddr;
use std::time::Duration;

use servery_tests::serde_json::{self, Value};
use servery_tests::{Server, Tree, wait_until};

#[path = "support/tftp_client.rs"]
mod tftp_client;
use tftp_client::{Peer, Reply, start_servery};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::request;

const WAIT: Duration = Duration::from_secs(5);
/// Well inside the 60 s a forgotten reservation lingers (the lease TTL), well outside a
/// round trip through a loaded debug build.
const RELEASED_WITHIN: Duration = Duration::from_secs(3);

fn start(tree: &Tree, extra: &[&str]) -> (Server, SocketAddr) {
    start_servery(
        tree,
        1,
        &[&["--upload", "--tftp-write"][..], extra].concat(),
    )
}

fn reservations(status: &Value) -> (u64, u64) {
    let r = &status["broker"]["reservations"];
    (
        r["count"].as_u64().unwrap_or(u64::MAX),
        r["bytes"].as_u64().unwrap_or(u64::MAX),
    )
}

fn wait_for_no_reservation(server: &Server, after: &str) {
    wait_until(
        RELEASED_WITHIN,
        &format!("the reservation to come back after {after}"),
        || {
            let status = server.status();
            let leases = status["broker"]["leases"].as_array().map_or(1, Vec::len);
            (reservations(&status) == (0, 0) && leases == 0).then_some(())
        },
    );
}

fn data(block: u16, body: &[u8]) -> Vec<u8> {
    let mut p = vec![0, 3];
    p.extend_from_slice(&block.to_be_bytes());
    p.extend_from_slice(body);
    p
}

/// Starts a write of `name` with `options`; the transfer's own address once it answers.
fn begin(peer: &Peer, addr: SocketAddr, name: &str, options: &[(&str, &str)]) -> SocketAddr {
    peer.wrq(addr, name, options);
    match peer.recv(WAIT) {
        Some(Reply::Oack(_)) => {}
        Some(Reply::Other(b)) if b == [0, 4, 0, 0] => {}
        other => panic!("expected the write to start, got {other:?}"),
    }
    peer.last_from().expect("a datagram arrived")
}

/// Sends full 512-byte blocks one at a time (lock step, window 1) until the server
/// answers anything but the block's ACK, or `blocks` are sent. The blocks acknowledged and
/// the answer that stopped it.
fn send_blocks(peer: &Peer, tid: SocketAddr, blocks: u16) -> (u16, Option<Reply>) {
    for block in 1..=blocks {
        peer.send(tid, &data(block, &[b'x'; 512]));
        match peer.recv(WAIT) {
            Some(Reply::Other(b)) if b[..2] == [0, 4] && b[2..4] == block.to_be_bytes() => {}
            other => return (block - 1, other),
        }
    }
    (blocks, None)
}

#[test]
fn a_write_is_held_to_what_it_announced_not_past_it() {
    let tree = Tree::new("tftpb-announced");
    let (server, addr) = start(&tree, &["--max-upload-bytes", "50000"]);
    // Announces 10 bytes, then sends 200 KB: refused at the first block past the 10.
    let peer = Peer::new();
    let tid = begin(&peer, addr, "liar.bin", &[("tsize", "10")]);
    let (acked, stopped) = send_blocks(&peer, tid, 400);
    assert_eq!(acked, 0, "a block past the announced size was acknowledged");
    assert!(
        matches!(&stopped, Some(Reply::Error { code: 3, message }) if message.contains("announced")),
        "expected a disk-full ERROR naming the announced size, got {stopped:?}"
    );
    assert!(!tree.root().join("liar.bin").exists(), "published");
    wait_for_no_reservation(&server, "a refused write");

    // Two writes announcing 1 byte each, 40,000 bytes sent each, side by side: together
    // 80,000 bytes against a 50,000-byte budget. Neither gets past its byte.
    let a = Peer::new();
    let b = Peer::new();
    let tid_a = begin(&a, addr, "a.bin", &[("tsize", "1")]);
    let tid_b = begin(&b, addr, "b.bin", &[("tsize", "1")]);
    let (acked_a, stopped_a) = send_blocks(&a, tid_a, 79);
    let (acked_b, stopped_b) = send_blocks(&b, tid_b, 79);
    assert_eq!((acked_a, acked_b), (0, 0), "{stopped_a:?} {stopped_b:?}");
    for stopped in [stopped_a, stopped_b] {
        assert!(
            matches!(stopped, Some(Reply::Error { code: 3, .. })),
            "{stopped:?}"
        );
    }
    for name in ["a.bin", "b.bin"] {
        assert!(!tree.root().join(name).exists(), "{name} was published");
    }
    wait_for_no_reservation(&server, "two refused writes");

    // What it announced it may send, to the byte: accepted and published.
    let peer = Peer::new();
    let tid = begin(&peer, addr, "honest.bin", &[("tsize", "600")]);
    assert_eq!(send_blocks(&peer, tid, 1), (1, None));
    peer.send(tid, &data(2, &[b'y'; 88]));
    assert!(matches!(peer.recv(WAIT), Some(Reply::Other(b)) if b == [0, 4, 0, 2]));
    assert_eq!(
        std::fs::read(tree.root().join("honest.bin"))
            .expect("published")
            .len(),
        600
    );
}

#[test]
fn a_write_gives_its_reservation_back_at_once_however_it_ends() {
    let tree = Tree::new("tftpb-release");
    // One upload at a time: a reservation that lingers refuses the next one (503).
    let (server, addr) = start(
        &tree,
        &[
            "--max-active-uploads",
            "1",
            "--tftp-timeout",
            "1",
            "--tftp-retries",
            "1",
        ],
    );
    // Complete: the final ACK is the client's "done"; an HTTP upload right after it finds
    // the budget free (the server lingers to re-acknowledge, without the reservation).
    for round in 0..3 {
        let peer = Peer::new();
        let tid = begin(&peer, addr, &format!("done{round}.bin"), &[]);
        peer.send(tid, &data(1, b"short"));
        assert!(matches!(peer.recv(WAIT), Some(Reply::Other(b)) if b == [0, 4, 0, 1]));
        let put = request(server.addr, "PUT", &format!("/http{round}.txt"), b"x", &[]);
        assert!(
            matches!(put.status, 200 | 201 | 204),
            "an HTTP upload right after a finished TFTP write: {}",
            put.status
        );
        // The PUT's own reservation goes back after its answer (the worker sends the
        // release without waiting): the next round's write must not race it.
        wait_for_no_reservation(&server, "the HTTP upload");
    }
    wait_for_no_reservation(&server, "finished writes");

    // Ended by the client's ERROR.
    let peer = Peer::new();
    let tid = begin(&peer, addr, "abort.bin", &[]);
    assert_eq!(send_blocks(&peer, tid, 1).0, 1);
    peer.send(tid, b"\x00\x05\x00\x00client gave up\x00");
    wait_for_no_reservation(&server, "a client's ERROR");

    // Over the size limit.
    let peer = Peer::new();
    let tid = begin(&peer, addr, "big.bin", &[("tsize", "100")]);
    assert!(matches!(
        send_blocks(&peer, tid, 2).1,
        Some(Reply::Error { code: 3, .. })
    ));
    wait_for_no_reservation(&server, "a write over its size");

    // Timed out: silent after its ACK 0 (1 s and one retry).
    let peer = Peer::new();
    begin(&peer, addr, "silent.bin", &[]);
    let ended = (0..4).any(|_| {
        matches!(peer.recv(WAIT), Some(Reply::Error { message, .. }) if message.contains("timed out"))
    });
    assert!(ended, "the silent writer was not dropped");
    wait_for_no_reservation(&server, "a timed-out write");
    let put = request(server.addr, "PUT", "/after.txt", b"y", &[]);
    assert!(matches!(put.status, 200 | 201 | 204), "{}", put.status);
}

#[test]
fn with_auth_the_start_says_tftp_has_none() {
    let tree = Tree::new("tftpb-auth");
    let (server, addr) = start_servery(&tree, 1, &["--auth", "alice:secret"]);
    let said = format!(
        "TFTP has no authentication: --auth does not apply to it, and anyone who can reach udp {addr} can read"
    );
    wait_until(WAIT, "the warning in the log", || {
        server
            .stderr()
            .lines()
            .any(|l| l.contains("WARN") && l.contains(&said))
            .then_some(())
    });
    let status = server.status();
    let warnings = status["warnings"].as_array().cloned().unwrap_or_default();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains(&said))),
        "ctl status must carry the warning: {status}"
    );
    // HTTP itself still asks.
    let asked = servery_tests::http_get(server.addr, "/hello.txt").map(|(status, _)| status);
    assert_eq!(asked, Ok(401));

    // Without --auth there is nothing to warn about (one server at a time in a test).
    drop(server);
    let tree = Tree::new("tftpb-noauth");
    let (server, _) = start_servery(&tree, 1, &[]);
    assert_eq!(server.status()["warnings"], serde_json::json!([]));
    assert!(!server.stderr().contains("TFTP has no authentication"));
}
