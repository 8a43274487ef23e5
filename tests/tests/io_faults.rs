//! Real I/O faults the OS lets a test make, against the real binary: a file system that
//! fills up during an upload, a WebDAV PUT, a resumable chunk or a COPY of a tree (a small
//! tmpfs, mounted by the test when it runs as root; decision 0131 — a failing fsync has no
//! such test: the OS makes one only under a faulty block device, which the simulator's
//! `FsyncFails`, `DirSyncFails` and `TornRename` stand in for),
//! a worker out of file descriptors (its limit lowered with `prlimit`), a parent the OS
//! refuses new processes (`RLIMIT_NPROC`, under a throwaway user since root is exempt),
//! and a whole service frozen past the heartbeat timeout (every process stopped, then
//! continued: what a VM pause or host suspend looks like to it). Each must end the way
//! the core decides, with nothing left behind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use servery_tests::*;

fn put(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> u16 {
    send(addr, "PUT", path, &[], body)
}

/// One request on its own connection; its status. The body may be cut short by the
/// server's answer (a full disk): what it sent is judged, not the write.
fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> u16 {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
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
    let tree = Tree::new("enospc");
    let root = tree.root();
    let _fs = match Tmpfs::mount(&root, "1m") {
        Ok(fs) => fs,
        Err(why) => {
            servery_tests::skipped(why);
            return;
        }
    };
    std::fs::write(root.join("hello.txt"), HELLO).expect("write");
    let mut server = Server::start(&tree, 1, &["--upload", "--admin", "127.0.0.1:0"], &[]);
    let admin = server.admin_addr(Duration::from_secs(10));
    let big = vec![b'x'; 2 << 20];
    assert_eq!(
        put(server.addr, "/big.bin", &big),
        507,
        "a full file system"
    );
    assert!(!root.join("big.bin").exists(), "nothing published");
    wait_for_storage_faults(admin, 1);
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

const NO_SPACE_FAULTS: &str = "servery_storage_faults_total{kind=\"no_space\"}";

/// Waits until the parent's metrics count `n` writes refused for a full file system (the
/// worker's counts reach the parent with its heartbeats): loss is counted where an
/// operator looks.
fn wait_for_storage_faults(admin: std::net::SocketAddr, n: u64) {
    wait_until(
        Duration::from_secs(10),
        "the refused write counted in servery_storage_faults_total",
        || {
            let (status, body) = http_get(admin, "/metrics").ok()?;
            let text = String::from_utf8(body).ok()?;
            let counted = text
                .lines()
                .find_map(|l| l.strip_prefix(NO_SPACE_FAULTS)?.trim().parse::<u64>().ok());
            (status == 200 && counted == Some(n)).then_some(())
        },
    );
}

/// Every file under `root` (relative paths), private ones included.
fn all_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).expect("ls").flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path.clone());
            }
            out.push(
                path.strip_prefix(root)
                    .expect("under root")
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    out.sort();
    out
}

/// A small file system under a WebDAV share, or why not (the test is then skipped).
fn full_share(name: &str, size: &str) -> Option<(Tree, Tmpfs)> {
    let tree = Tree::new(name);
    match Tmpfs::mount(&tree.root(), size) {
        Ok(fs) => Some((tree, fs)),
        Err(why) => {
            servery_tests::skipped(why);
            None
        }
    }
}

/// A WebDAV PUT that fills the file system: 507 (decision 0131), nothing under the name
/// or a private one, and a later PUT is written once there is room.
#[test]
fn a_dav_put_that_fills_the_disk_is_507_and_leaves_nothing() {
    let Some((tree, _fs)) = full_share("dav-enospc", "1m") else {
        return;
    };
    let root = tree.root();
    let server = Server::start(&tree, 1, &["--dav", "--upload"], &[]);
    let big = vec![b'x'; 2 << 20];
    assert_eq!(send(server.addr, "PUT", "/big.bin", &[], &big), 507);
    assert!(!root.join("big.bin").exists(), "nothing published");
    wait_until(
        Duration::from_secs(10),
        "the temporary file removed",
        || private_files(&root).is_empty().then_some(()),
    );
    assert_eq!(
        send(server.addr, "PUT", "/small.bin", &[], &[b'y'; 1024]),
        201
    );
    assert_eq!(
        std::fs::read(root.join("small.bin")).expect("small").len(),
        1024
    );
}

/// A resumable chunk that fills the file system: 507, nothing under the public name, and
/// what reached the partial file is kept (decision 0131): once space is freed, the client
/// asks what is held and sends the rest, and the whole file is published.
#[test]
fn a_resumable_chunk_that_fills_the_disk_is_507_and_resumes_once_there_is_room() {
    let Some((tree, _fs)) = full_share("chunk-enospc", "4m") else {
        return;
    };
    let root = tree.root();
    // Most of the file system, taken by something else, freed later.
    let filler = root.join("filler.bin");
    std::fs::write(&filler, vec![b'f'; 5 << 19]).expect("filler");
    let server = Server::start(&tree, 1, &["--upload"], &[]);
    let content: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    let total = content.len();
    let all = format!("bytes 0-{}/{total}", total - 1);
    assert_eq!(
        send(
            server.addr,
            "PUT",
            "/big.bin",
            &[("Content-Range", &all)],
            &content
        ),
        507
    );
    assert!(
        !root.join("big.bin").exists(),
        "nothing under the public name"
    );
    std::fs::remove_file(&filler).expect("free the space");
    let held = held(server.addr, "/big.bin", total);
    assert!(held < total as u64, "held {held} of {total}");
    let rest = format!("bytes {held}-{}/{total}", total - 1);
    let r = send(
        server.addr,
        "PUT",
        "/big.bin",
        &[("Content-Range", &rest)],
        &content[held as usize..],
    );
    assert!(
        r == 201 || r == 204,
        "the rest publishes the whole file: {r}"
    );
    assert!(
        std::fs::read(root.join("big.bin")).expect("published") == content,
        "the published file is the client's, byte for byte"
    );
    wait_until(
        Duration::from_secs(10),
        "the partial's files removed",
        || private_files(&root).is_empty().then_some(()),
    );
}

/// `bytes */total`: the bytes held, from the 308's `Range` (0 when none).
fn held(addr: std::net::SocketAddr, path: &str, total: usize) -> u64 {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nContent-Range: bytes */{total}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("head");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 308"), "{text:?}");
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("range").then(|| v.trim().to_owned())
        })
        .map_or(0, |v| {
            v.trim_start_matches("bytes=0-")
                .parse::<u64>()
                .expect("range")
                + 1
        })
}

/// A COPY of a tree that does not fit: 507, the destination never appears (not even part
/// of it), no staging copy is left, and a COPY that fits succeeds afterwards.
#[test]
fn a_copy_of_a_tree_that_does_not_fit_is_507_and_places_nothing() {
    let Some((tree, _fs)) = full_share("copy-enospc", "2m") else {
        return;
    };
    let root = tree.root();
    std::fs::create_dir(root.join("src")).expect("mkdir");
    for i in 0..3 {
        std::fs::write(root.join(format!("src/{i}.bin")), vec![b'a'; 400 << 10]).expect("w");
    }
    std::fs::create_dir(root.join("small")).expect("mkdir");
    std::fs::write(root.join("small/a.txt"), b"a").expect("w");
    let before = all_files(&root);
    let mut server = Server::start(
        &tree,
        1,
        &["--dav", "--upload", "--admin", "127.0.0.1:0"],
        &[],
    );
    let admin = server.admin_addr(Duration::from_secs(10));
    let copy = |from: &str, to: &str| send(server.addr, "COPY", from, &[("Destination", to)], b"");
    assert_eq!(copy("/src", "/dst"), 507);
    wait_for_storage_faults(admin, 1);
    assert!(
        !root.join("dst").exists(),
        "no part of the copy under the public name"
    );
    wait_until(Duration::from_secs(10), "the staging copy removed", || {
        (all_files(&root) == before).then_some(())
    });
    assert_eq!(copy("/small", "/small2"), 201);
    assert_eq!(
        std::fs::read(root.join("small2/a.txt")).expect("copied"),
        b"a"
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
        servery_tests::skipped("prlimit (util-linux) is not installed");
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

fn have_prlimit() -> bool {
    Command::new("prlimit").arg("--version").output().is_ok()
}

/// `prlimit --pid PID SETTING` as `user`: the process's own user may lower its limits and
/// raise a soft limit back up to the hard one, which is all these tests do (changing
/// another user's limits takes CAP_SYS_RESOURCE, which a container's root may lack).
fn prlimit_as(user: &OtherUser, pid: u32, setting: &str) {
    let out = user
        .command("prlimit")
        .args(["--pid", &pid.to_string(), setting])
        .output()
        .expect("prlimit");
    assert!(
        out.status.success(),
        "prlimit --pid {pid} {setting}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The hard `RLIMIT_NPROC` of `pid`, as `/proc/PID/limits` shows it (a number or
/// `unlimited`, both of which prlimit takes).
fn hard_nproc(pid: u32) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max processes"))
        .expect("a process limit");
    line.split_whitespace()
        .nth(3)
        .expect("hard limit")
        .to_owned()
}

/// A throwaway user and a tree it may use, for `RLIMIT_NPROC`: root is exempt from it, so
/// the parent runs as this user. `None` (after saying why) when that cannot be done here.
fn unprivileged(test: &str) -> Option<(OtherUser, Tree)> {
    if !have_prlimit() {
        servery_tests::skipped(format!("{test}: prlimit (util-linux) is not installed"));
        return None;
    }
    let user = match OtherUser::create() {
        Ok(user) => user,
        Err(reason) => {
            servery_tests::skipped(format!(
                "{test}: the parent must run as a user without CAP_SYS_RESOURCE: {reason}"
            ));
            return None;
        }
    };
    let tree = Tree::new(test);
    // The control socket goes in the tree's directory.
    std::os::unix::fs::chown(&tree.dir, Some(user.uid), Some(user.gid)).expect("chown");
    Some((user, tree))
}

fn ready_pids(status: &serde_json::Value) -> Vec<u32> {
    status["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w["state"] == "ready" && w["role"] == "member")
        .filter_map(|w| w["pid"].as_u64().map(|p| p as u32))
        .collect()
}

fn refused_spawn(status: &serde_json::Value) -> bool {
    let message = status["last_failure"]["message"].as_str().unwrap_or("");
    message.contains("could not spawn") && message.contains("Resource temporarily unavailable")
}

#[test]
fn a_refused_fork_is_retried_with_backoff_and_the_slot_refills_once_the_limit_is_raised() {
    let test = "nproc-recover";
    let Some((user, tree)) = unprivileged(test) else {
        return;
    };
    let mut args = FAST.to_vec();
    args.extend(["--worker-restart-limit", "20"]);
    let launch = Launch {
        user: Some((user.uid, user.gid)),
        ..Launch::default()
    };
    let server = Server::launch(&tree, 2, &args, &[], &launch);
    let (status, _) = server.wait_ready(2, Duration::from_secs(20));
    let (victim, other) = (worker_pids(&status)[0], worker_pids(&status)[1]);
    // Not one more process for this user: every fork the parent tries fails with EAGAIN
    // (its workers keep the limit they were started with). The soft limit only, so that
    // it can be raised again.
    prlimit_as(&user, server.pid, "--nproc=1:");
    let killed = std::time::Instant::now();
    signal_pid(victim, Sig::KILL);
    // The crash, then two refused spawns: three restarts, each after its backoff.
    let (refused, took) = wait_until(Duration::from_secs(10), "two refused spawns", || {
        let s = server.status();
        (s["restarts"].as_u64()? >= 3 && refused_spawn(&s)).then_some(s)
    });
    assert_eq!(ready_pids(&refused), vec![other], "{refused}");
    assert_eq!(refused["state"], "ready", "{refused}");
    let hard = hard_nproc(server.pid);
    prlimit_as(&user, server.pid, &format!("--nproc={hard}:"));
    let (after, refilled) = server.wait_ready(2, BACKOFF_INITIAL * 64 + START_MARGIN);
    let pids = ready_pids(&after);
    assert!(pids.contains(&other) && !pids.contains(&victim), "{after}");
    eprintln!(
        "MEASURED RLIMIT_NPROC: kill -9 → {} restarts ({}) in {took:?}; limit raised → 2 ready in {refilled:?} more ({:?} in all)",
        refused["restarts"],
        refused["last_failure"]["message"],
        killed.elapsed()
    );
    drop(server);
}

#[test]
fn refused_forks_past_the_restart_limit_fail_the_service_naming_the_error() {
    let test = "nproc-limit";
    let Some((user, tree)) = unprivileged(test) else {
        return;
    };
    let launch = Launch {
        user: Some((user.uid, user.gid)),
        ..Launch::default()
    };
    let mut server = Server::launch(&tree, 2, FAST, &[], &launch);
    let (status, _) = server.wait_ready(2, Duration::from_secs(20));
    prlimit_as(&user, server.pid, "--nproc=1:");
    let victim = worker_pids(&status)[0];
    signal_pid(victim, Sig::KILL);
    let (refused, _) = wait_until(Duration::from_secs(10), "a refused spawn", || {
        server
            .ctl(&serde_json::json!({"cmd": "status"}))
            .ok()
            .and_then(|mut s| {
                let s = s["status"].take();
                refused_spawn(&s).then_some(s)
            })
    });
    // The crash and five refused replacements: the limit (5) is exceeded at the fifth,
    // after 0.1 + 0.2 + 0.4 + 0.8 + 1.6 s of backoff; the other worker then drains.
    let bound = BACKOFF_INITIAL * 31 + DRAIN_TIMEOUT + FORCE_TIMEOUT + START_MARGIN;
    let (exit, took) = server.wait_exit(bound);
    let stderr = server.stderr();
    eprintln!(
        "MEASURED RLIMIT_NPROC past the restart limit: exit {:?} {took:?} after the start (bound {bound:?}); first seen: {}",
        exit.code(),
        refused["last_failure"]["message"]
    );
    assert_eq!(exit.code(), Some(4), "{stderr}");
    let failed = stderr
        .lines()
        .find(|l| l.contains("servery: service failed (restart_limit_exceeded)"))
        .unwrap_or_else(|| panic!("no service failure line in:\n{stderr}"));
    assert!(
        failed.contains("could not spawn") && failed.contains("Resource temporarily unavailable"),
        "{failed}"
    );
}

#[test]
fn a_frozen_service_replaces_no_worker_and_still_catches_one_that_hung_before() {
    const WORKERS: usize = 3;
    let tree = Tree::new("freeze");
    let server = Server::start(&tree, WORKERS as u32, FAST, &[]);
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    let pids = worker_pids(&status);
    let (healthy, hung) = (&pids[..2], pids[2]);
    signal_pid(hung, Sig::STOP);
    std::thread::sleep(Duration::from_millis(300));
    // The whole service stops for twice the heartbeat timeout, as in a VM pause: nobody
    // beats, nobody listens.
    signal_pid(server.pid, Sig::STOP);
    for &pid in healthy {
        signal_pid(pid, Sig::STOP);
    }
    std::thread::sleep(HEARTBEAT_TIMEOUT * 2);
    // The parent runs first, every heartbeat deadline long past and nothing to read; the
    // workers a moment later.
    signal_pid(server.pid, Sig::CONT);
    let resumed = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    for &pid in healthy {
        signal_pid(pid, Sig::CONT);
    }
    let bound = HEARTBEAT_TIMEOUT + FORCE_TIMEOUT + BACKOFF_INITIAL + START_MARGIN;
    let (after, took) = wait_until(bound, "the hung worker replaced", || {
        let s = server.status();
        let ready = ready_pids(&s);
        (ready.len() == WORKERS && !ready.contains(&hung)).then_some(s)
    });
    let ready = ready_pids(&after);
    assert!(
        healthy.iter().all(|p| ready.contains(p)),
        "a worker frozen with the parent was replaced: {after}"
    );
    assert!(!alive(hung), "the hung worker was killed");
    assert_eq!(after["restarts"], 1, "{after}");
    assert_eq!(after["last_failure"]["reason"], "health_failure", "{after}");
    let paused = after["not_running_ms"].as_u64().unwrap_or(0);
    assert!(
        paused >= 2000,
        "the parent noticed only {paused} ms of not running: {after}"
    );
    assert!(
        server
            .stderr()
            .contains("the parent woke this long after its deadline"),
        "{}",
        server.stderr()
    );
    let (code, body) = http_get(server.addr, "/hello.txt").expect("serving");
    assert_eq!((code, body.as_slice()), (200, HELLO));
    eprintln!(
        "MEASURED frozen 3 s: the parent noticed {paused} ms; the worker hung before was replaced {took:?} after the resume ({:?} since); no other restart",
        resumed.elapsed()
    );
}
