//! TFTP against real clients (atftp, tftp-hpa, curl) and a scripted peer: byte-exact
//! reads with and without options, block-number rollover, containment, limits, malformed
//! datagrams, and the service's life with the parent (started once, kept across a reload,
//! stopped on SIGTERM), with more than one worker.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use servery_tests::serde_json::json;
use servery_tests::{Server, Sig, Tree, wait_until};

#[path = "support/tftp_client.rs"]
mod tftp_client;
use tftp_client::{Peer, Reply, pattern, run, start_servery};

const WAIT: Duration = Duration::from_secs(5);
/// More than 65,535 blocks of 512 bytes: the block number rolls over.
const ROLLOVER_SIZE: usize = 33 * 1024 * 1024 + 777;

fn start(tree: &Tree, workers: u32, extra: &[&str]) -> (Server, SocketAddr) {
    start_servery(tree, workers, extra)
}

fn need(program: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{program} is needed for this test (Debian: see scripts/debian-packages.txt)"
    );
}

fn same_file(got: &Path, want: &[u8]) {
    let got = std::fs::read(got).expect("the client wrote its file");
    assert_eq!(got.len(), want.len(), "length");
    assert!(got == want, "content differs");
}

fn place(tree: &Tree, name: &str, bytes: &[u8]) -> PathBuf {
    let path = tree.root().join(name);
    std::fs::write(&path, bytes).expect("write a served file");
    path
}

#[test]
fn atftp_reads_with_blksize_tsize_timeout_and_windowsize() {
    need("atftp");
    let tree = Tree::new("tftp-atftp");
    let body = pattern(3 * 1024 * 1024 + 5, 1);
    place(&tree, "image.bin", &body);
    let (_server, addr) = start(&tree, 2, &[]);
    for window in ["1", "8"] {
        let out = tree.dir.join(format!("got-{window}"));
        let mut cmd = Command::new("atftp");
        cmd.args(["-g", "-r", "image.bin", "-l"])
            .arg(&out)
            .args(["--option", "blksize 1468", "--option", "tsize 0"])
            .args(["--option", "timeout 2", "--option"])
            .arg(format!("windowsize {window}"))
            .arg(addr.ip().to_string())
            .arg(addr.port().to_string());
        run(cmd, "atftp");
        same_file(&out, &body);
    }
}

#[test]
fn the_oack_grants_what_was_asked_within_bounds() {
    let tree = Tree::new("tftp-oack");
    place(&tree, "f.bin", &pattern(5000, 2));
    let (_server, addr) = start(&tree, 1, &[]);
    let peer = Peer::new();
    peer.rrq(
        addr,
        "f.bin",
        &[
            ("blksize", "1468"),
            ("tsize", "0"),
            ("timeout", "3"),
            ("windowsize", "500"),
            ("bogus", "1"),
        ],
    );
    let reply = peer.recv(WAIT);
    assert_eq!(
        reply,
        Some(Reply::Oack(
            "blksize 1468 timeout 3 windowsize 64 tsize 5000 ".into()
        ))
    );
}

#[test]
fn tftp_hpa_reads_plain_rfc_1350() {
    need("tftp");
    let tree = Tree::new("tftp-hpa");
    let body = pattern(700_001, 3);
    place(&tree, "plain.bin", &body);
    let (_server, addr) = start(&tree, 2, &[]);
    let out = tree.dir.join("got");
    let mut cmd = Command::new("tftp");
    cmd.args(["-m", "binary"])
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg("-c")
        .arg("get")
        .arg("plain.bin")
        .arg(&out);
    run(cmd, "tftp-hpa");
    same_file(&out, &body);
}

#[test]
fn a_file_past_the_block_number_rollover_arrives_whole() {
    need("curl");
    need("tftp");
    let tree = Tree::new("tftp-rollover");
    let body = pattern(ROLLOVER_SIZE, 4);
    place(&tree, "big.bin", &body);
    // Heartbeats judged with FAST's 1.5 s timeout while the parent's host runtime moves
    // 69,000 blocks: no worker may be taken for hung.
    let (server, addr) = start(&tree, 2, &[]);
    let before = server.wait_ready(2, Duration::from_secs(20)).0;
    let started = Instant::now();
    let out = tree.dir.join("curl");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--tftp-blksize", "512", "-o"])
        .arg(&out)
        .arg(format!("tftp://{addr}/big.bin"));
    run(cmd, "curl");
    same_file(&out, &body);
    // tftp-hpa asks for no option at all: RFC 1350's 512-byte blocks.
    let out = tree.dir.join("hpa");
    let mut cmd = Command::new("tftp");
    cmd.args(["-m", "binary"])
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .args(["-c", "get", "big.bin"])
        .arg(&out);
    run(cmd, "tftp-hpa");
    same_file(&out, &body);
    eprintln!(
        "two reads of {ROLLOVER_SIZE} bytes in 512-byte blocks: {:?}",
        started.elapsed()
    );
    let after = server.status();
    assert_eq!(
        servery_tests::worker_pids(&after),
        servery_tests::worker_pids(&before),
        "a worker was replaced during the transfers"
    );
    assert_eq!(after["restarts"], 0, "{after}");
}

#[test]
fn curl_gets_a_file() {
    need("curl");
    let tree = Tree::new("tftp-curl");
    let body = pattern(100_000, 5);
    place(&tree, "c.bin", &body);
    let (_server, addr) = start(&tree, 2, &[]);
    let out = tree.dir.join("got");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o"])
        .arg(&out)
        .arg(format!("tftp://{addr}/c.bin"));
    run(cmd, "curl");
    same_file(&out, &body);
}

fn first_reply(addr: SocketAddr, name: &str) -> Option<Reply> {
    let peer = Peer::new();
    peer.rrq(addr, name, &[]);
    peer.recv(WAIT)
}

fn error_code(reply: Option<Reply>, what: &str) -> u16 {
    match reply {
        Some(Reply::Error { code, .. }) => code,
        other => panic!("{what}: expected an ERROR, got {other:?}"),
    }
}

#[test]
fn names_that_leave_the_root_or_are_hidden_are_refused() {
    let tree = Tree::new("tftp-escape");
    std::fs::write(tree.dir.join("outside.txt"), b"secret outside the root").expect("write");
    std::fs::write(tree.root().join(".hidden"), b"hidden").expect("write");
    std::os::unix::fs::symlink(tree.dir.join("outside.txt"), tree.root().join("link-out"))
        .expect("symlink");
    std::os::unix::fs::symlink("hello.txt", tree.root().join("link-in")).expect("symlink");
    let (_server, addr) = start(&tree, 1, &[]);
    // Access violation (2) for climbing out, a symlink out, and a backslash path.
    for name in [
        "../outside.txt",
        "sub/../../outside.txt",
        "link-out",
        "..\\outside.txt",
    ] {
        assert_eq!(error_code(first_reply(addr, name), name), 2, "{name}");
    }
    // An absolute name is read beneath the root, where there is no such file.
    assert_eq!(
        error_code(first_reply(addr, "/etc/passwd"), "/etc/passwd"),
        1
    );
    // A hidden file is not found without --show-hidden.
    assert_eq!(error_code(first_reply(addr, ".hidden"), ".hidden"), 1);
    // A symlink that stays inside is served.
    assert!(matches!(
        first_reply(addr, "link-in"),
        Some(Reply::Data { block: 1, .. })
    ));
    assert!(matches!(
        first_reply(addr, "/hello.txt"),
        Some(Reply::Data { block: 1, .. })
    ));
}

#[test]
fn hidden_files_follow_show_hidden() {
    let tree = Tree::new("tftp-shown");
    std::fs::write(tree.root().join(".hidden"), b"hidden").expect("write");
    let (_server, addr) = start(&tree, 1, &["--show-hidden"]);
    assert!(matches!(
        first_reply(addr, ".hidden"),
        Some(Reply::Data {
            block: 1,
            len: 6,
            ..
        })
    ));
}

#[test]
fn denied_names_are_not_found_over_tftp_either() {
    let tree = Tree::new("tftp-deny");
    std::fs::create_dir_all(tree.root().join("boot")).expect("mkdir");
    std::fs::write(tree.root().join("boot/host.key"), b"key").expect("write");
    std::fs::write(tree.root().join("boot/pxelinux.0"), b"boot").expect("write");
    let (_server, addr) = start(&tree, 1, &["--deny", "*.key", "--show-hidden"]);
    assert_eq!(
        error_code(first_reply(addr, "boot/host.key"), "boot/host.key"),
        1,
        "a denied name is not found"
    );
    assert!(matches!(
        first_reply(addr, "boot/pxelinux.0"),
        Some(Reply::Data { block: 1, .. })
    ));
}

#[test]
fn a_full_pool_says_busy_and_a_stalled_client_is_dropped_after_its_timeout() {
    let tree = Tree::new("tftp-busy");
    place(&tree, "f.bin", &pattern(10_000, 6));
    let (_server, addr) = start(
        &tree,
        2,
        &[
            "--tftp-max-transfers",
            "1",
            "--tftp-timeout",
            "1",
            "--tftp-retries",
            "1",
        ],
    );
    let stalled = Peer::new();
    stalled.rrq(addr, "f.bin", &[]);
    assert!(matches!(
        stalled.recv(WAIT),
        Some(Reply::Data { block: 1, .. })
    ));
    let started = Instant::now();
    let second = Peer::new();
    second.rrq(addr, "f.bin", &[]);
    match second.recv(WAIT) {
        Some(Reply::Error { code: 0, message }) => assert!(message.contains("busy"), "{message}"),
        other => panic!("expected busy, got {other:?}"),
    }
    // The stalled client gets one retransmission, then an ERROR, and its slot frees.
    assert!(matches!(
        stalled.recv(WAIT),
        Some(Reply::Data { block: 1, .. })
    ));
    match stalled.recv(WAIT) {
        Some(Reply::Error { message, .. }) => assert!(message.contains("timed out"), "{message}"),
        other => panic!("expected the stalled transfer to end, got {other:?}"),
    }
    let dropped_after = started.elapsed();
    assert!(
        dropped_after >= Duration::from_millis(1500),
        "dropped too early: {dropped_after:?}"
    );
    wait_until(WAIT, "the slot to free", || {
        let peer = Peer::new();
        peer.rrq(addr, "f.bin", &[]);
        matches!(peer.recv(WAIT), Some(Reply::Data { block: 1, .. })).then_some(())
    });
}

#[test]
fn a_file_over_the_transfer_limit_is_refused() {
    let tree = Tree::new("tftp-size");
    place(&tree, "f.bin", &pattern(2000, 7));
    place(&tree, "ok.bin", &pattern(1000, 7));
    let (_server, addr) = start(&tree, 1, &["--tftp-max-size", "1000"]);
    assert_eq!(error_code(first_reply(addr, "f.bin"), "too large"), 3);
    assert!(matches!(
        first_reply(addr, "ok.bin"),
        Some(Reply::Data {
            block: 1,
            len: 512,
            ..
        })
    ));
}

#[test]
fn malformed_datagrams_get_an_error_or_nothing_and_the_service_goes_on() {
    let tree = Tree::new("tftp-junk");
    let (_server, addr) = start(&tree, 1, &[]);
    let peer = Peer::new();
    // Request-shaped but broken: answered with ERROR 4.
    for junk in [
        &b"\x00\x01name-without-end"[..],
        b"\x00\x02a\x00mail\x00",
        b"\x00\x01a\x00octet\x00blksize\x00",
    ] {
        peer.send(addr, junk);
        assert_eq!(error_code(peer.recv(WAIT), "malformed request"), 4);
    }
    // Not a request: ignored.
    for junk in [
        &b""[..],
        b"\x00",
        b"\x00\x04\x00\x01",
        b"\x00\x03\x00\x01data",
        b"\xff\xff\xff",
    ] {
        peer.send(addr, junk);
    }
    assert_eq!(peer.recv(Duration::from_millis(300)), None);
    // A write while writes are off.
    peer.wrq(addr, "new.bin", &[]);
    assert_eq!(error_code(peer.recv(WAIT), "write"), 2);
    assert!(matches!(
        first_reply(addr, "hello.txt"),
        Some(Reply::Data { block: 1, .. })
    ));
}

#[test]
fn the_service_starts_once_survives_a_reload_and_stops_with_the_parent() {
    let tree = Tree::new("tftp-life");
    let (mut server, addr) = start(&tree, 2, &[]);
    server.wait_ready(2, Duration::from_secs(20));
    server.ctl(&json!({"cmd": "reload"})).expect("reload");
    server.wait_ready(2, Duration::from_secs(20));
    assert!(matches!(
        first_reply(addr, "hello.txt"),
        Some(Reply::Data { block: 1, .. })
    ));
    // A transfer in progress when the service stops is told so.
    let peer = Peer::new();
    peer.rrq(addr, "sub/big.bin", &[]);
    assert!(matches!(
        peer.recv(WAIT),
        Some(Reply::Data { block: 1, .. })
    ));
    server.signal(Sig::TERM);
    server.wait_exit(Duration::from_secs(30));
    let stderr = server.stderr();
    assert_eq!(
        stderr.matches("TFTP service started").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("TFTP service stopped").count(),
        1,
        "{stderr}"
    );
    // The ERROR telling the client, after any retransmission already in flight.
    let told = (0..3).any(|_| matches!(peer.recv(WAIT), Some(Reply::Error { .. })));
    assert!(told, "the client was not told the service stopped");
    assert_eq!(
        first_reply(addr, "hello.txt"),
        None,
        "still answering after exit"
    );
}

#[test]
fn check_config_shows_the_settings_and_a_bad_limit_names_its_flag() {
    let tree = Tree::new("tftp-config");
    let root = tree.root();
    let root = root.to_str().expect("utf-8");
    let ok = servery_tests::run_servery(
        &[root, "--tftp", "--tftp-port", "0", "--check-config"],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(ok.status.code(), Some(0), "{}", ok.stderr);
    for line in [
        "tftp_socket = udp 127.0.0.1:0\n",
        "features.tftp_write = false\n",
        "tftp.max_transfers = 16\n",
    ] {
        assert!(ok.stdout.contains(line), "{line}: {}", ok.stdout);
    }
    let bad = servery_tests::run_servery(
        &[
            root,
            "--tftp",
            "--tftp-max-transfers",
            "0",
            "--tftp-timeout",
            "300",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(bad.status.code(), Some(2), "{}", bad.stderr);
    for needle in [
        "tftp.max_transfers (--tftp-max-transfers)",
        "tftp.timeout (--tftp-timeout)",
    ] {
        assert!(bad.stderr.contains(needle), "{needle}: {}", bad.stderr);
    }
}
