//! Real I/O faults the OS lets a test make, against the real binary: a file system that
//! fills up during an upload (a small tmpfs, mounted by the test when it runs as root),
//! and a worker out of file descriptors (its limit lowered with `prlimit`). Each must end
//! in a clear answer with nothing left behind, and the service must go on afterwards.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use servery_tests::*;

/// A tmpfs of `size` mounted over `dir` for the life of the guard.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn put(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("head");
    // The server may answer and close before the whole body is sent (a full disk).
    let _ = s.write_all(body);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

fn private_files(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".servery"))
        .collect()
}

#[test]
fn an_upload_that_fills_the_disk_is_507_and_leaves_nothing() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let tree = Tree::new("enospc");
    let root = tree.root();
    let Some(_fs) = Tmpfs::mount(&root, "1m") else {
        eprintln!("skipped: this machine refuses a tmpfs mount");
        return;
    };
    std::fs::write(root.join("hello.txt"), HELLO).expect("write");
    let server = Server::start(&tree, 1, &["--upload"], &[]);
    let big = vec![b'x'; 2 << 20];
    assert_eq!(
        put(server.addr, "/big.bin", &big),
        507,
        "a full file system"
    );
    assert!(!root.join("big.bin").exists(), "nothing published");
    wait_until(
        Duration::from_secs(10),
        "the temporary file removed",
        || private_files(&root).is_empty().then_some(()),
    );
    // Space, reservation and lease are all back: a small upload goes through.
    assert_eq!(put(server.addr, "/small.bin", &[b'y'; 1024]), 201);
    assert_eq!(
        std::fs::read(root.join("small.bin")).expect("small").len(),
        1024
    );
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
}

#[test]
fn a_worker_out_of_descriptors_waits_without_spinning_and_serves_again() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        eprintln!("skipped: prlimit (util-linux) is not installed");
        return;
    }
    let tree = Tree::new("emfile");
    let server = Server::start(&tree, 1, FAST, &[]);
    let (status, _) = server.wait_ready(1, Duration::from_secs(20));
    let worker = worker_pids(&status)[0];
    let limit = open_fds(worker) + 8;
    let set = Command::new("prlimit")
        .args([
            "--pid",
            &worker.to_string(),
            &format!("--nofile={limit}:{limit}"),
        ])
        .status()
        .expect("prlimit");
    assert!(set.success(), "prlimit --pid {worker}");
    // More connections than descriptors left, each with a request started (so the
    // deferred accept hands it over) but not finished (so it is held).
    let held: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut s =
                TcpStream::connect_timeout(&server.addr, Duration::from_secs(5)).expect("connect");
            s.write_all(b"GET /hello.txt HTTP/1.1\r\n").expect("write");
            s
        })
        .collect();
    wait_until(
        Duration::from_secs(10),
        "the worker at its descriptor limit",
        || (open_fds(worker) >= limit).then_some(()),
    );
    // At the limit, accept fails with EMFILE; the worker must pause, not spin.
    let before = cpu_ticks(worker);
    std::thread::sleep(Duration::from_secs(1));
    let spent = cpu_ticks(worker) - before;
    // USER_HZ, the unit of /proc/PID/stat times, is 100 on every Linux ABI.
    let ticks_per_second = 100;
    assert!(
        spent < ticks_per_second / 2,
        "the worker spent {spent} ticks of one second retrying accept"
    );
    drop(held);
    // Descriptors come back as the held connections close: the same worker serves again.
    wait_until(Duration::from_secs(10), "a request served again", || {
        http_get(server.addr, "/hello.txt")
            .ok()
            .filter(|(code, body)| *code == 200 && body == HELLO)
    });
    let (after, _) = server.wait_ready(1, Duration::from_secs(5));
    assert_eq!(
        worker_pids(&after),
        vec![worker],
        "the worker was never replaced"
    );
}
