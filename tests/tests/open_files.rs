//! The open-file limit (`RLIMIT_NOFILE`), against the real binary started under
//! `prlimit`: servery says at start that the limit allows fewer connections than
//! `--max-connections`, each worker holds no more than the limit allows, and so 300
//! clients that send half a request head and wait cannot keep a real request out (a full
//! worker closes the longest-waiting of them to admit it). Without the bound, `accept`
//! fails with `EMFILE` once the silent clients hold every descriptor, and the real
//! request waits until their head timeout.

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use servery_tests::*;

const LIMIT: u64 = 256;

fn prlimit_available() -> bool {
    let ok = Command::new("prlimit")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        servery_tests::skipped("prlimit (util-linux) is not installed");
    }
    ok
}

#[test]
fn under_a_low_open_file_limit_half_sent_requests_cannot_keep_a_real_one_out() {
    if !prlimit_available() {
        return;
    }
    let tree = Tree::new("nofile");
    let launch = Launch {
        open_files: Some((LIMIT, LIMIT)),
        ..Launch::default()
    };
    let server = Server::launch(&tree, 1, FAST, &[], &launch);
    server.wait_ready(1, Duration::from_secs(30));
    // (256 - 64 reserved) / 2 descriptors a connection.
    let said = "each worker holds at most 96 connections";
    wait_until(
        Duration::from_secs(10),
        "the warning about the limit",
        || server.stderr().contains(said).then_some(()),
    );

    let held: Vec<TcpStream> = (0..300)
        .filter_map(|_| {
            let mut s = TcpStream::connect_timeout(&server.addr, Duration::from_secs(2)).ok()?;
            s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n")
                .ok()?;
            Some(s)
        })
        .collect();
    assert!(held.len() >= 200, "only {} connections opened", held.len());

    let answer = curl(server.addr, "/hello.txt", &["--max-time", "10"]);
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (200, HELLO),
        "the real request, among {} half-sent ones (exit {:?})\n{}",
        held.len(),
        answer.exit,
        server.stderr()
    );
    drop(held);
}

/// The soft limit of a process, from `/proc/PID/limits`.
fn soft_open_files(pid: u32) -> Option<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[test]
fn the_soft_limit_is_raised_to_the_hard_one_for_the_parent_and_its_workers() {
    if !prlimit_available() {
        return;
    }
    let tree = Tree::new("nofile-raise");
    let launch = Launch {
        open_files: Some((LIMIT, 8192)),
        ..Launch::default()
    };
    let server = Server::launch(&tree, 2, FAST, &[], &launch);
    let (status, _) = server.wait_ready(2, Duration::from_secs(30));
    let workers = worker_pids(&status);
    assert_eq!(workers.len(), 2);
    for pid in std::iter::once(server.pid).chain(workers) {
        assert_eq!(soft_open_files(pid), Some(8192), "pid {pid}");
    }
    // 8,192 allow the default 1,024 connections a worker: nothing to say.
    assert!(
        !server.stderr().contains("RLIMIT_NOFILE"),
        "{}",
        server.stderr()
    );
}
