//! Access-log lines that cannot be written are never lost silently, against the real
//! binary: a log on a file system that fills up loses whole batches, each line counted in
//! `ctl status` and in `/metrics` (`access_log_lines_dropped_total{reason="write_failed"}`),
//! never a torn line in the file, the failure said on standard error a few times rather
//! than once a batch, and the log written again once there is room.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use servery_tests::serde_json::Value;
use servery_tests::{FAST, Server, Tmpfs, Tree, h2load_hello, http_get, wait_until};

fn h2load(addr: SocketAddr, requests: u64) {
    h2load_hello(addr, requests, requests.min(16));
}

/// A server with the access log at `log` and the admin listener; its admin address.
fn start(tree: &Tree, log: &Path, workers: u32) -> (Server, SocketAddr) {
    let mut args = FAST.to_vec();
    let log = log.to_str().expect("utf-8").to_owned();
    args.extend(["--access-log", &log, "--admin", "127.0.0.1:0"]);
    let mut server = Server::start(tree, workers, &args, &[]);
    let admin = server.admin_addr(Duration::from_secs(10));
    server.wait_ready(workers as usize, Duration::from_secs(30));
    (server, admin)
}

fn metric(admin: SocketAddr, series: &str) -> Option<u64> {
    let (status, body) = http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn count(log: &Value, key: &str) -> u64 {
    log[key].as_u64().unwrap_or(0)
}

/// Waits until `total` lines are accounted for (written or failed) with nothing queued.
fn settled(server: &Server, total: u64) -> Value {
    wait_until(Duration::from_secs(60), "every line accounted for", || {
        let log = server.status()["access_log"].clone();
        (log["queue"] == 0 && count(&log, "written") + count(&log, "write_failed") == total)
            .then_some(log)
    })
    .0
}

fn whole_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("the log");
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the file ends with a whole line"
    );
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let torn: Vec<&String> = lines
        .iter()
        .filter(|l| {
            !(l.starts_with("127.0.0.1 - - [") && l.contains("\"GET /hello.txt HTTP/1.1\" 200 "))
        })
        .take(3)
        .collect();
    assert!(torn.is_empty(), "whole lines only: {torn:?}");
    lines
}

#[test]
fn a_full_disk_loses_whole_batches_each_line_counted_and_said_a_few_times() {
    const REQUESTS: u64 = 6_000;
    const MORE: u64 = 500;
    let tree = Tree::new("alog-full");
    let dir = tree.root().with_file_name("alog-full-fs");
    std::fs::create_dir_all(&dir).expect("mount point");
    let _fs = match Tmpfs::mount(&dir, "256k") {
        Ok(fs) => fs,
        Err(why) => {
            servery_tests::skipped(why);
            return;
        }
    };
    let path = dir.join("access.log");
    let (server, admin) = start(&tree, &path, 2);
    // About 660 KB of lines into 256 KiB.
    h2load(server.addr, REQUESTS);
    let log = settled(&server, REQUESTS);
    let (written, failed) = (count(&log, "written"), count(&log, "write_failed"));
    assert!(written > 0 && failed > 0, "some written, some lost: {log}");
    assert_eq!(whole_lines(&path).len() as u64, written, "{log}");
    assert_eq!(
        metric(
            admin,
            "servery_access_log_lines_dropped_total{reason=\"write_failed\"}"
        ),
        Some(failed),
        "{log}"
    );
    assert!(
        server.status().to_string().contains("write_failed"),
        "ctl status says it"
    );
    let stderr = server.stderr();
    let errors = stderr
        .lines()
        .filter(|l| l.contains("cannot write the access log"))
        .count();
    assert!(
        (1..=3).contains(&errors),
        "the failure is said, a few times not once a batch ({} failed writes): {errors} lines",
        count(&log, "write_errors")
    );
    assert!(count(&log, "write_errors") > 3, "{log}");
    eprintln!(
        "full disk: {written} lines written, {failed} lost in {} failed writes, said in {errors} error lines",
        count(&log, "write_errors")
    );

    // Room again (the file emptied in place, as logrotate's copytruncate does): the next
    // lines are written, and the recovery is said.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(0))
        .expect("truncate");
    h2load(server.addr, MORE);
    let after = settled(&server, REQUESTS + MORE);
    assert_eq!(count(&after, "write_failed"), failed, "{after}");
    assert_eq!(whole_lines(&path).len() as u64, MORE, "{after}");
    // Said at most every ten seconds: the writes that follow say it within that.
    let mut total = REQUESTS + MORE;
    wait_until(Duration::from_secs(30), "the recovery said", || {
        if server.stderr().contains("the access log is written again") {
            return Some(());
        }
        h2load(server.addr, 10);
        total += 10;
        settled(&server, total);
        None
    });
}
