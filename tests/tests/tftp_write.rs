//! TFTP writes (`--tftp-write`) against real clients and a scripted peer: byte-exact puts
//! from curl, atftp and tftp-hpa; an HTTP PUT and a TFTP write to one file serialize on
//! the broker's lease, whichever comes first, and the refused one hears so before any
//! data moves; size limits and a stalled writer leave no file, no temporary file and no
//! lease behind.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use servery_tests::{Server, Tree, run_servery, wait_until};

#[path = "support/tftp_client.rs"]
mod tftp_client;
use tftp_client::{Peer, Reply, pattern, run, start_servery};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Conn, head, request};

const WAIT: Duration = Duration::from_secs(5);

fn start(tree: &Tree, workers: u32, extra: &[&str]) -> (Server, SocketAddr) {
    start_servery(
        tree,
        workers,
        &[&["--upload", "--tftp-write"][..], extra].concat(),
    )
}

/// Nothing of servery's own (temporary files) is left in `dir`.
fn no_private_files(dir: &Path) {
    let left: Vec<String> = std::fs::read_dir(dir)
        .expect("read the root")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".servery"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn curl_atftp_and_tftp_hpa_put_byte_exact_files() {
    let tree = Tree::new("tftpw-clients");
    let body = pattern(2 * 1024 * 1024 + 3, 11);
    let src = tree.dir.join("src.bin");
    std::fs::write(&src, &body).expect("write the source");
    let (_server, addr) = start(&tree, 2, &[]);
    let mut curl = Command::new("curl");
    curl.args(["-sS", "-T"])
        .arg(&src)
        .arg(format!("tftp://{addr}/curl.bin"));
    run(curl, "curl -T");
    let mut atftp = Command::new("atftp");
    atftp
        .args(["-p", "-l"])
        .arg(&src)
        .args(["-r", "atftp.bin", "--option", "blksize 1468", "--option"])
        .arg(format!("tsize {}", body.len()))
        .args(["--option", "windowsize 4"])
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string());
    run(atftp, "atftp -p");
    let mut hpa = Command::new("tftp");
    hpa.args(["-m", "binary"])
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .args(["-c", "put"])
        .arg(&src)
        .arg("sub/hpa.bin");
    run(hpa, "tftp-hpa put");
    for name in ["curl.bin", "atftp.bin", "sub/hpa.bin"] {
        let got = std::fs::read(tree.root().join(name)).expect("published");
        assert!(got == body, "{name} differs");
    }
    no_private_files(&tree.root());
}

/// A scripted writer that has its ACK 0 (so it holds the lease) and has sent one block.
fn writer_holding_the_lease(addr: SocketAddr, name: &str) -> (Peer, SocketAddr) {
    let peer = Peer::new();
    peer.wrq(addr, name, &[]);
    match peer.recv(WAIT) {
        Some(Reply::Other(b)) if b == [0, 4, 0, 0] => {}
        other => panic!("expected ACK 0, got {other:?}"),
    }
    // The ACK 0 came from the transfer's own port: the rest goes there.
    let tid = peer.last_from().expect("a datagram arrived");
    let mut data = vec![0, 3, 0, 1];
    data.extend(vec![b'T'; 512]);
    peer.send(tid, &data);
    match peer.recv(WAIT) {
        Some(Reply::Other(b)) if b == [0, 4, 0, 1] => {}
        other => panic!("expected ACK 1, got {other:?}"),
    }
    (peer, tid)
}

#[test]
fn an_http_put_waits_for_a_tftp_write_to_the_same_file_and_the_reverse() {
    let tree = Tree::new("tftpw-serialize");
    let (server, addr) = start(&tree, 2, &["--allow-overwrite"]);
    // TFTP first: the PUT is refused while the TFTP write holds the lease.
    let (peer, tid) = writer_holding_the_lease(addr, "shared.bin");
    let status = server.status();
    let holder = status["broker"]["leases"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["key"]["name"] == "shared.bin"))
        .map(|l| l["worker"].clone());
    assert_eq!(
        holder,
        Some(0.into()),
        "held by the parent's own client: {status}"
    );
    let refused = request(server.addr, "PUT", "/shared.bin", b"http", &[]);
    assert_eq!(refused.status, 409, "the PUT must wait its turn");
    let mut last = vec![0, 3, 0, 2];
    last.extend_from_slice(b"end");
    peer.send(tid, &last);
    match peer.recv(WAIT) {
        Some(Reply::Other(b)) if b == [0, 4, 0, 2] => {}
        other => panic!("expected the final ACK, got {other:?}"),
    }
    let mut want = vec![b'T'; 512];
    want.extend_from_slice(b"end");
    assert_eq!(
        std::fs::read(tree.root().join("shared.bin")).expect("published"),
        want
    );
    // The lease is back: the PUT goes through now.
    assert_eq!(
        request(server.addr, "PUT", "/shared.bin", b"http", &[]).status,
        204
    );

    // HTTP first: a PUT holding the lease (its body half sent) refuses the TFTP write
    // with an ERROR as its first and only answer: no ACK, no data accepted.
    let mut conn = Conn::open(server.addr);
    conn.send(&head("PUT", "/shared.bin", 10, &[]))
        .expect("send the head");
    conn.send(b"01234").expect("send half the body");
    wait_until(WAIT, "the PUT to hold its lease", || {
        let status = server.status();
        let leases = status["broker"]["leases"].as_array()?.clone();
        leases
            .iter()
            .any(|l| l["worker"] != 0 && l["key"]["name"] == "shared.bin")
            .then_some(())
    });
    let writer = Peer::new();
    writer.wrq(addr, "shared.bin", &[]);
    match writer.recv(WAIT) {
        Some(Reply::Error { code: 0, message }) => {
            assert!(message.contains("another client"), "{message}")
        }
        other => panic!("expected busy before any data, got {other:?}"),
    }
    // Nothing else comes: no ACK 0 after the ERROR.
    assert_eq!(writer.recv(Duration::from_millis(300)), None);
    conn.send(b"56789").expect("the rest");
    let reply = conn.response().expect("the PUT's answer");
    assert!(matches!(reply.status, 200 | 201 | 204), "{}", reply.status);
    assert_eq!(
        std::fs::read(tree.root().join("shared.bin")).expect("file"),
        b"0123456789"
    );
    no_private_files(&tree.root());
}

#[test]
fn an_existing_file_is_not_replaced_without_allow_overwrite() {
    let tree = Tree::new("tftpw-exists");
    let (_server, addr) = start(&tree, 1, &[]);
    let peer = Peer::new();
    peer.wrq(addr, "hello.txt", &[]);
    assert!(matches!(
        peer.recv(WAIT),
        Some(Reply::Error { code: 6, .. })
    ));
    assert_eq!(
        std::fs::read(tree.root().join("hello.txt")).expect("file"),
        servery_tests::HELLO
    );
}

#[test]
fn writes_over_the_limit_or_stalled_leave_nothing_behind() {
    let tree = Tree::new("tftpw-limits");
    let (_server, addr) = start(
        &tree,
        1,
        &[
            "--tftp-max-size",
            "1000",
            "--tftp-timeout",
            "1",
            "--tftp-retries",
            "1",
        ],
    );
    // Announced too large: refused before anything is reserved.
    let peer = Peer::new();
    peer.wrq(addr, "a.bin", &[("tsize", "2000")]);
    assert!(matches!(
        peer.recv(WAIT),
        Some(Reply::Error { code: 3, .. })
    ));
    // Not announced: refused at the block that crosses the limit.
    let peer = Peer::new();
    peer.wrq(addr, "b.bin", &[]);
    assert!(matches!(peer.recv(WAIT), Some(Reply::Other(_))));
    let tid = peer.last_from().expect("tid");
    for block in 1u16..=2 {
        let mut data = vec![0, 3];
        data.extend_from_slice(&block.to_be_bytes());
        data.extend(vec![7u8; 512]);
        peer.send(tid, &data);
    }
    assert!(matches!(peer.recv(WAIT), Some(Reply::Other(b)) if b == [0, 4, 0, 1]));
    assert!(matches!(
        peer.recv(WAIT),
        Some(Reply::Error { code: 3, .. })
    ));
    // Stalled after ACK 0: dropped after its timeout and one retry.
    let stalled = Peer::new();
    stalled.wrq(addr, "c.bin", &[]);
    assert!(matches!(stalled.recv(WAIT), Some(Reply::Other(_))));
    let ended = (0..3).any(|_| {
        matches!(stalled.recv(WAIT), Some(Reply::Error { message, .. }) if message.contains("timed out"))
    });
    assert!(ended, "the stalled writer was not dropped");
    for name in ["a.bin", "b.bin", "c.bin"] {
        assert!(!tree.root().join(name).exists(), "{name} was published");
    }
    wait_until(WAIT, "the temporary files to go", || {
        let left = std::fs::read_dir(tree.root())
            .expect("root")
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with(".servery"));
        (!left).then_some(())
    });
    // Every lease and reservation came back: the same name can be written now.
    let peer = Peer::new();
    peer.wrq(addr, "c.bin", &[]);
    assert!(matches!(peer.recv(WAIT), Some(Reply::Other(b)) if b == [0, 4, 0, 0]));
    let tid = peer.last_from().expect("tid");
    peer.send(tid, b"\x00\x03\x00\x01done");
    assert!(matches!(peer.recv(WAIT), Some(Reply::Other(b)) if b == [0, 4, 0, 1]));
    wait_until(WAIT, "c.bin", || {
        (std::fs::read(tree.root().join("c.bin")).ok()? == b"done").then_some(())
    });
}

#[test]
fn tftp_write_needs_uploads() {
    let tree = Tree::new("tftpw-config");
    let root = tree.root();
    let done = run_servery(
        &[
            root.to_str().expect("utf-8"),
            "--tftp",
            "--tftp-write",
            "--tftp-port",
            "0",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("features.tftp_write"),
        "{}",
        done.stderr
    );
    assert!(done.stderr.contains("--tftp-write"), "{}", done.stderr);
}

#[test]
fn temporary_files_an_earlier_parent_left_are_removed_before_writes_start() {
    let tree = Tree::new("tftpw-leftover");
    let left = [
        tree.root().join(".servery-tmp-0-00000000deadbeef"),
        tree.root().join("sub/.servery-tmp-0-00000000feedface"),
    ];
    for path in &left {
        std::fs::write(path, b"half a write").expect("plant a leftover");
    }
    let keep = tree.root().join("sub/big.bin");
    let (_server, _addr) = start(&tree, 1, &[]);
    wait_until(WAIT, "the leftovers to go", || {
        left.iter().all(|p| !p.exists()).then_some(())
    });
    assert!(keep.exists(), "a served file was removed");
}
