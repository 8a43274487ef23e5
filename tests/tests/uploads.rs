//! Uploads against the real binary with several workers: the parent's broker makes
//! writes to one target serialize across processes, a killed lease holder gives
//! everything back within a second, a killed parent publishes nothing, saturation answers
//! 503 before the body is read, and a resumable upload survives its client and its worker.
//!
//! Every wait is on an observable condition (a status field, a file, a response) with a
//! bound; the only sleeps are [`wait_until`]'s polling.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use servery_tests::serde_json::{Value, json};
use servery_tests::{FAST, Server, Sig, Tree, alive, signal_pid, wait_until, worker_pids};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Conn, Reply, head, request};

fn put(addr: SocketAddr, path: &str, body: &[u8]) -> Reply {
    request(addr, "PUT", path, body, &[])
}

fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, b"", &[])
}

/// Distinct, position-dependent content, so a torn or interleaved file cannot pass for
/// a whole one.
fn body(tag: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(u32::from(tag) * 97) as u8
                ^ tag
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Observations

fn broker(server: &Server) -> Value {
    server.status()["broker"].clone()
}

fn lease_count(b: &Value) -> usize {
    b["leases"].as_array().map_or(usize::MAX, Vec::len)
}

fn reservations(b: &Value) -> u64 {
    b["reservations"]["count"].as_u64().unwrap_or(u64::MAX)
}

/// Every `.servery-tmp-*` file under `root`.
fn temp_files(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            } else if name.starts_with(".servery-tmp-") {
                found.push(entry.path().display().to_string());
            }
        }
    }
    found
}

/// Every lease and reservation given back. Releases are sent without waiting for an
/// answer (before the response), so the parent may see them a moment after the client
/// sees its answer: wait, with a bound.
fn wait_released(server: &Server) -> Value {
    wait_until(
        Duration::from_secs(5),
        "every lease and reservation released",
        || {
            let b = broker(server);
            (lease_count(&b) == 0 && reservations(&b) == 0).then_some(b)
        },
    )
    .0
}

fn pid_of(status: &Value, worker: u64) -> Option<u32> {
    status["workers"]
        .as_array()?
        .iter()
        .find(|w| w["id"].as_u64() == Some(worker))?["pid"]
        .as_u64()
        .map(|p| p as u32)
}

fn start(tree: &Tree, workers: u32, extra: &[&str]) -> Server {
    let mut args: Vec<&str> = FAST.to_vec();
    args.push("--upload");
    args.extend_from_slice(extra);
    let server = Server::start(tree, workers, &args, &[]);
    server.wait_ready(workers as usize, Duration::from_secs(30));
    server
}

/// A connection that has sent the head and `sent` bytes of a `len`-byte PUT, and stalls.
fn stalled_put(
    addr: SocketAddr,
    path: &str,
    content: &[u8],
    sent: usize,
    extra: &[(&str, &str)],
) -> Conn {
    let mut c = Conn::open(addr);
    let mut bytes = head("PUT", path, content.len(), extra);
    bytes.extend_from_slice(&content[..sent]);
    c.send(&bytes).expect("send");
    c
}

// ---------------------------------------------------------------------------------------
// The tests

#[test]
fn put_and_post_write_files_with_the_documented_statuses() {
    let tree = Tree::new("up-basic");
    std::fs::create_dir_all(tree.root().join("docs")).expect("mkdir");
    let server = start(&tree, 2, &["--max-upload-size", "100000"]);
    let addr = server.addr;

    let r = put(addr, "/docs/a.txt", b"first");
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.header("location"), Some("/docs/a.txt"));
    // Into the root itself too (its directory handle is the one the site serves from).
    assert_eq!(put(addr, "/top.txt", b"top").status, 201);
    assert_eq!(get(addr, "/top.txt").body, b"top");
    assert!(r.worker().is_some(), "every upload answer names its worker");
    assert_eq!(get(addr, "/docs/a.txt").body, b"first");
    // Overwriting is off: the file stays as it was.
    assert_eq!(put(addr, "/docs/a.txt", b"second").status, 409);
    let r = request(addr, "PUT", "/docs/a.txt", b"x", &[("If-None-Match", "*")]);
    assert_eq!(r.status, 412);
    assert_eq!(get(addr, "/docs/a.txt").body, b"first");
    // No parent directory; a directory target; servery's own names; dot-files while hidden.
    assert_eq!(put(addr, "/nope/a.txt", b"x").status, 409);
    assert_eq!(put(addr, "/docs", b"x").status, 409);
    assert_eq!(put(addr, "/docs/.servery-tmp-1-x", b"x").status, 403);
    assert_eq!(put(addr, "/docs/.env", b"x").status, 403);
    assert_eq!(put(addr, "/../escape", b"x").status, 400);

    // Too large: refused from the head alone, before any of the body is sent.
    let mut c = Conn::open(addr);
    c.send(&head("PUT", "/docs/huge.bin", 200_000, &[]))
        .expect("send");
    let r = c.response().expect("answered without the body");
    assert_eq!(r.status, 413);
    // A body longer than announced is cut at the announced length by HTTP itself; a
    // chunked body past the limit is refused while streaming.
    let mut c = Conn::open(addr);
    let mut bytes =
        b"PUT /docs/chunked.bin HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for _ in 0..30 {
        bytes.extend_from_slice(format!("{:x}\r\n", 8192).as_bytes());
        bytes.extend_from_slice(&[b'z'; 8192]);
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"0\r\n\r\n");
    let _ = c.send(&bytes);
    // The answer comes with body bytes still unread, so the server's close may reset the
    // connection before the client reads it; what matters is that nothing was written.
    if let Ok(r) = c.response() {
        assert_eq!(r.status, 413);
    }
    assert!(!tree.root().join("docs/chunked.bin").exists());

    // A multipart form: plain fields are skipped, each file lands in the directory.
    let boundary = "----servery-test-boundary";
    let mut form = Vec::new();
    for (name, filename, content) in [
        ("note", None, &b"not a file"[..]),
        ("file", Some("one.txt"), &b"uno"[..]),
        ("file", Some("C:\\Users\\me\\two.bin"), &body(2, 20_000)[..]),
    ] {
        form.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let mut cd = format!("Content-Disposition: form-data; name=\"{name}\"");
        if let Some(f) = filename {
            cd.push_str(&format!("; filename=\"{f}\""));
        }
        form.extend_from_slice(format!("{cd}\r\n\r\n").as_bytes());
        form.extend_from_slice(content);
        form.extend_from_slice(b"\r\n");
    }
    form.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let ct = format!("multipart/form-data; boundary={boundary}");
    let r = request(addr, "POST", "/docs/", &form, &[("Content-Type", &ct)]);
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(r.header("location"), Some("/docs/"));
    assert_eq!(get(addr, "/docs/one.txt").body, b"uno");
    assert_eq!(get(addr, "/docs/two.bin").body, body(2, 20_000));
    let r = request(
        addr,
        "POST",
        "/docs/",
        b"{}",
        &[("Content-Type", "application/json")],
    );
    assert_eq!(r.status, 415);
    let r = request(addr, "OPTIONS", "/", b"", &[]);
    assert_eq!(
        r.header("allow"),
        Some("GET, HEAD, OPTIONS, PUT, POST, MKCOL")
    );
    let r = request(addr, "DELETE", "/docs/a.txt", b"", &[]);
    assert_eq!(
        (r.status, r.header("allow")),
        (405, Some("GET, HEAD, OPTIONS, PUT, POST, MKCOL"))
    );

    assert!(temp_files(&tree.root()).is_empty());
    wait_released(&server);
    // Every publish made its rename durable (the root's fsync once failed on a path-only
    // descriptor; the logs of all the requests above have been read by now).
    assert!(
        !server.stderr().contains("cannot fsync"),
        "{}",
        server.stderr()
    );
    drop(server);

    // With --allow-overwrite a replacement is 204, and If-None-Match: * still refuses.
    let server = start(&tree, 2, &["--allow-overwrite"]);
    assert_eq!(put(server.addr, "/docs/a.txt", b"second").status, 204);
    assert_eq!(get(server.addr, "/docs/a.txt").body, b"second");
    let r = request(
        server.addr,
        "PUT",
        "/docs/a.txt",
        b"x",
        &[("If-None-Match", "*")],
    );
    assert_eq!(r.status, 412);
}

#[test]
fn same_target_writes_through_different_workers_serialize() {
    let tree = Tree::new("up-race");
    std::fs::create_dir_all(tree.root().join("race")).expect("mkdir");
    std::fs::create_dir_all(tree.root().join("probe")).expect("mkdir");
    let server = start(&tree, 2, &[]);
    let addr = server.addr;
    const ROUNDS: usize = 1000;
    const BUDGET: Duration = Duration::from_secs(60);
    const LEN: usize = 96 * 1024;
    let started = Instant::now();
    let mut probes = 0u64;
    let (mut rounds, mut overlapped) = (0usize, 0usize);
    let mut pairs = BTreeSet::new();
    while rounds < ROUNDS && started.elapsed() < BUDGET {
        // Two keep-alive connections that landed on different workers, as proven by an
        // upload each (a zero-length file, so the connection stays reusable).
        let mut by_worker: Vec<(u64, Conn)> = Vec::new();
        for _ in 0..400 {
            let mut c = Conn::open(addr);
            probes += 1;
            c.send(&head("PUT", &format!("/probe/{probes}"), 0, &[]))
                .expect("probe");
            let r = c.response().expect("probe answer");
            assert_eq!(r.status, 201, "{r:?}");
            let w = r.worker().expect("worker header");
            if by_worker.iter().all(|(seen, _)| *seen != w) {
                by_worker.push((w, c));
            }
            if by_worker.len() == 2 {
                break;
            }
        }
        assert_eq!(
            by_worker.len(),
            2,
            "400 connections in a row all reached one worker"
        );
        let target = format!("/race/r{rounds}.bin");
        let barrier = Arc::new(Barrier::new(2));
        let contenders: Vec<_> = by_worker
            .into_iter()
            .enumerate()
            .map(|(i, (w, mut c))| {
                let barrier = Arc::clone(&barrier);
                let content = body(i as u8 + 1, LEN);
                // `Expect: 100-continue`, as curl sends for large bodies: the loser's 409
                // comes before it sends its body, so no unread body makes the server's
                // close a reset that could swallow the answer.
                let bytes = head("PUT", &target, LEN, &[("Expect", "100-continue")]);
                std::thread::spawn(move || {
                    barrier.wait();
                    let t0 = Instant::now();
                    let reply = c
                        .send(&bytes)
                        .map_err(|e| e.to_string())
                        .and_then(|()| c.response())
                        .and_then(|r| {
                            if r.status != 100 {
                                return Ok(r);
                            }
                            c.send(&content).map_err(|e| e.to_string())?;
                            c.response()
                        });
                    (w, content, t0, Instant::now(), reply)
                })
            })
            .collect();
        let results: Vec<_> = contenders
            .into_iter()
            .map(|t| t.join().expect("contender"))
            .collect();
        let mut statuses = Vec::new();
        let mut winner = None;
        for (w, content, _, _, reply) in &results {
            let reply = reply
                .as_ref()
                .unwrap_or_else(|e| panic!("round {rounds}, worker {w}: {e}"));
            assert_eq!(reply.worker(), Some(*w), "answered by the worker it probed");
            statuses.push(reply.status);
            if reply.status == 201 {
                winner = Some(content.clone());
            }
        }
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 409], "round {rounds}");
        let written = std::fs::read(tree.root().join(&target[1..])).expect("published");
        assert!(
            Some(&written) == winner.as_ref(),
            "round {rounds}: the file is not exactly the winner's body ({} bytes)",
            written.len()
        );
        let (a, b) = (&results[0], &results[1]);
        if a.2 < b.3 && b.2 < a.3 {
            overlapped += 1;
        }
        pairs.insert((a.0.min(b.0), a.0.max(b.0)));
        rounds += 1;
    }
    let elapsed = started.elapsed();
    eprintln!(
        "same-target race: {rounds} rounds in {elapsed:.1?}, {overlapped} with both requests in flight at once, worker pairs {pairs:?}, {probes} probe uploads"
    );
    assert!(rounds >= 200, "only {rounds} rounds fit in {BUDGET:?}");
    // The race must be run, not only its rounds: two busy cores may serialise many.
    assert!(
        overlapped * 10 >= rounds,
        "too few rounds overlapped: {overlapped}"
    );
    assert!(temp_files(&tree.root()).is_empty(), "temp files left");
    wait_released(&server);
}

#[test]
fn a_killed_lease_holder_gives_everything_back_within_a_second() {
    let tree = Tree::new("up-kill");
    let server = start(&tree, 2, &[]);
    let content = body(7, 1 << 20);
    // Half the body, then silence: the handler holds its reservation, its lease and a
    // temporary file with what it has read.
    let _stalled = stalled_put(server.addr, "/slow.bin", &content, content.len() / 2, &[]);
    let (holder, _) = wait_until(Duration::from_secs(10), "the slow upload's lease", || {
        let b = broker(&server);
        let lease = b["leases"].as_array()?.first()?.clone();
        (lease["key"]["name"] == "slow.bin"
            && reservations(&b) == 1
            && !temp_files(&tree.root()).is_empty())
        .then(|| lease["worker"].as_u64())
        .flatten()
    });
    let status = server.status();
    let pid = pid_of(&status, holder).expect("holder's pid");
    signal_pid(pid, Sig::KILL);
    let killed = Instant::now();
    // Timed from the start of the poll that saw it: the poll's own work is not the server's.
    let (since_kill, took) = wait_until(
        Duration::from_secs(5),
        "lease, reservation and temp file gone",
        || {
            let asked = killed.elapsed();
            let b = broker(&server);
            (lease_count(&b) == 0 && reservations(&b) == 0 && temp_files(&tree.root()).is_empty())
                .then_some(asked)
        },
    );
    eprintln!(
        "killed lease holder w{holder}: everything released {since_kill:.0?} after SIGKILL (observed after {took:.0?})"
    );
    assert!(since_kill <= Duration::from_secs(1), "took {since_kill:?}");
    // The target is free: the next upload to it succeeds (through whichever worker).
    let r = put(server.addr, "/slow.bin", &content);
    assert_eq!(r.status, 201, "{r:?}");
    assert_ne!(r.worker(), Some(holder));
    assert_eq!(
        std::fs::read(tree.root().join("slow.bin")).expect("file"),
        content
    );
}

#[test]
fn a_killed_parent_publishes_no_half_written_file() {
    let tree = Tree::new("up-parent");
    let mut server = start(&tree, 2, &[]);
    let workers = worker_pids(&server.status());
    let content = body(9, 1 << 20);
    let mut stalled = stalled_put(server.addr, "/orphan.bin", &content, content.len() / 2, &[]);
    wait_until(
        Duration::from_secs(10),
        "the upload's temporary file",
        || (!temp_files(&tree.root()).is_empty()).then_some(()),
    );
    server.signal(Sig::KILL);
    server.wait_exit(Duration::from_secs(5));
    // The rest of the body arrives after the parent is gone: the worker must not publish.
    let _ = stalled.send(&content[content.len() / 2..]);
    match stalled.response() {
        Ok(r) => assert_eq!(r.status, 503, "{r:?}"),
        Err(e) => eprintln!("the orphaned upload's connection closed without an answer: {e}"),
    }
    let (_, took) = wait_until(
        Duration::from_secs(10),
        "workers gone and no temp file",
        || {
            (workers.iter().all(|p| !alive(*p)) && temp_files(&tree.root()).is_empty())
                .then_some(())
        },
    );
    eprintln!("parent killed: workers exited and temp files were removed within {took:.0?}");
    assert!(
        !tree.root().join("orphan.bin").exists(),
        "a half-written upload was published"
    );
}

/// A PUT of `len` bytes that sends only its head and must be answered 503 at once.
fn refused_before_the_body(addr: SocketAddr, path: &str, len: usize) -> Reply {
    let mut c = Conn::open(addr);
    c.send(&head("PUT", path, len, &[])).expect("send");
    let r = c.response().expect("answered before the body");
    assert_eq!(r.status, 503, "{r:?}");
    r
}

#[test]
fn saturation_answers_503_before_the_body_and_recovers() {
    let tree = Tree::new("up-sat");
    // Count: one upload at a time, service-wide.
    let server = start(&tree, 2, &["--max-active-uploads", "1"]);
    let holder = body(1, 200_000);
    let mut first = stalled_put(server.addr, "/first.bin", &holder, 1000, &[]);
    wait_until(Duration::from_secs(10), "one reservation held", || {
        (reservations(&broker(&server)) == 1).then_some(())
    });
    // Head only: the answer must come without a byte of body.
    let r = refused_before_the_body(server.addr, "/second.bin", 10);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(!tree.root().join("second.bin").exists());
    first.send(&holder[1000..]).expect("rest");
    assert_eq!(first.response().expect("first").status, 201);
    // Recovered, once the parent has the release (sent without waiting, and the next PUT
    // may reach it first through the other worker).
    wait_released(&server);
    assert_eq!(put(server.addr, "/second.bin", b"0123456789").status, 201);
    drop(first);
    drop(server);

    // Bytes: 100 000 reserved bytes service-wide.
    let server = start(
        &tree,
        2,
        &[
            "--max-upload-bytes",
            "100000",
            "--max-upload-size",
            "100000",
        ],
    );
    let holder = body(2, 60_000);
    let mut first = stalled_put(server.addr, "/b1.bin", &holder, 1000, &[]);
    wait_until(Duration::from_secs(10), "60 000 bytes reserved", || {
        (broker(&server)["reservations"]["bytes"] == 60_000).then_some(())
    });
    let r = refused_before_the_body(server.addr, "/b2.bin", 50_000);
    assert!(r.header("retry-after").is_some());
    // What still fits is accepted alongside.
    assert_eq!(put(server.addr, "/b3.bin", &body(3, 40_000)).status, 201);
    first.send(&holder[1000..]).expect("rest");
    assert_eq!(first.response().expect("first").status, 201);
    wait_released(&server);
    assert_eq!(put(server.addr, "/b2.bin", &body(4, 50_000)).status, 201);
    wait_released(&server);
    drop(first);
    drop(server);

    // Leases: one target written at a time, service-wide (`--max-write-leases`).
    let server = start(&tree, 2, &["--max-write-leases", "1"]);
    let holder = body(5, 60_000);
    let mut first = stalled_put(server.addr, "/l1.bin", &holder, 1000, &[]);
    wait_until(Duration::from_secs(10), "one lease held", || {
        (lease_count(&broker(&server)) == 1).then_some(())
    });
    refused_before_the_body(server.addr, "/l2.bin", 10);
    first.send(&holder[1000..]).expect("rest");
    assert_eq!(first.response().expect("first").status, 201);
    wait_released(&server);
    assert_eq!(put(server.addr, "/l2.bin", b"0123456789").status, 201);
    wait_released(&server);
}

#[test]
fn a_chunked_form_reserves_a_first_step_and_grows_not_the_whole_limit() {
    // Budget and limit alike 64 MiB: a chunked form that reserved its whole limit (as
    // it did) would leave no room for a second upload while it is open.
    const MIB: u64 = 1 << 20;
    let tree = Tree::new("up-form-grows");
    let server = start(
        &tree,
        2,
        &[
            "--max-upload-bytes",
            "67108864",
            "--max-upload-size",
            "67108864",
        ],
    );
    let boundary = "servery-form-boundary";
    let file = body(7, 12 * MIB as usize);
    let mut form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"f\"; filename=\"big.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    form.extend_from_slice(&file);
    form.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let chunked = |bytes: &[u8]| {
        let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
        out
    };
    let mut c = Conn::open(server.addr);
    let mut first = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
    )
    .into_bytes();
    first.extend(chunked(&form[..1 << 20]));
    c.send(&first).expect("send");
    // Open and 1 MiB in: it holds the first step, 8 MiB.
    let (held, _) = wait_until(Duration::from_secs(10), "the form's reservation", || {
        let b = broker(&server);
        (reservations(&b) == 1).then(|| b["reservations"]["bytes"].as_u64().unwrap_or(0))
    });
    assert_eq!(held, 8 * MIB, "a chunked form's first reservation");
    // A second upload fits beside it.
    assert_eq!(
        put(server.addr, "/beside.bin", &body(8, 1 << 20)).status,
        201
    );
    // The rest of the form: the reservation grows past 8 MiB and the file is whole.
    for piece in form[1 << 20..].chunks(1 << 20) {
        c.send(&chunked(piece)).expect("send");
    }
    c.send(b"0\r\n\r\n").expect("send");
    let r = c.response().expect("the form's answer");
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(
        std::fs::read(tree.root().join("big.bin")).expect("published"),
        file
    );
    wait_released(&server);
}

#[test]
fn a_full_broker_queue_answers_503_at_once_and_recovers() {
    // Queue: each worker may have one broker request waiting for an answer. A stopped
    // parent answers nothing, so the first PUT a worker takes waits (reply timeout 20 s)
    // and the next one it takes is refused at once. Three PUTs over two workers: at least
    // two meet at one worker, so at least one is refused while the parent is stopped.
    let tree = Tree::new("up-queue");
    let server = start(
        &tree,
        2,
        &[
            "--broker-queue-capacity",
            "1",
            "--broker-reply-timeout",
            "20",
        ],
    );
    let contents: Vec<Vec<u8>> = (0..3).map(|i| body(10 + i, 5_000)).collect();
    server.signal(Sig::STOP);
    let stopped = std::time::Instant::now();
    let mut conns: Vec<Conn> = (0..3)
        .map(|i| stalled_put(server.addr, &format!("/q{i}.bin"), &contents[i], 0, &[]))
        .collect();
    // Poll every connection for an early answer (with the parent stopped, only a full
    // queue can produce one), well inside the heartbeat timeout the stopped parent keeps.
    let mut refused = Vec::new();
    let mut first_refusal = None;
    while stopped.elapsed() < Duration::from_millis(600) && refused.len() < 3 {
        for (i, c) in conns.iter_mut().enumerate() {
            if refused.contains(&i) {
                continue;
            }
            c.stream
                .set_read_timeout(Some(Duration::from_millis(20)))
                .expect("timeout");
            if let Ok(r) = c.response() {
                assert_eq!(r.status, 503, "{r:?}");
                assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
                refused.push(i);
                first_refusal.get_or_insert(stopped.elapsed());
            }
        }
        if !refused.is_empty() && stopped.elapsed() > Duration::from_millis(300) {
            break;
        }
    }
    let refused_after = stopped.elapsed();
    server.signal(Sig::CONT);
    eprintln!(
        "queue full: {} of 3 refused, the first {first_refusal:?} after the parent stopped \
         (polled for {refused_after:?})",
        refused.len()
    );
    assert!(
        (1..=2).contains(&refused.len()),
        "{} of 3 PUTs refused while the parent was stopped (each worker queues one)",
        refused.len()
    );
    // The queued ones get their answer once the parent runs again, and complete.
    for (i, c) in conns.iter_mut().enumerate() {
        if refused.contains(&i) {
            continue;
        }
        c.stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        c.send(&contents[i]).expect("body");
        let r = c.response().expect("answered after the parent resumed");
        assert_eq!(r.status, 201, "{r:?}");
    }
    // Recovered: the refused ones go through now, and nothing half-written is left.
    for &i in &refused {
        let r = put(server.addr, &format!("/q{i}.bin"), &contents[i]);
        assert_eq!(r.status, 201, "{r:?}");
    }
    for (i, content) in contents.iter().enumerate() {
        let on_disk = std::fs::read(tree.root().join(format!("q{i}.bin"))).expect("published");
        assert!(on_disk == *content, "q{i}.bin differs from what was sent");
    }
    wait_released(&server);
    assert!(temp_files(&tree.root()).is_empty());
}

#[test]
fn a_reload_gives_new_workers_the_new_upload_limits() {
    // The largest single upload follows the global byte budget (a reloadable broker
    // field): after a reload that shrinks the budget, the new generation's workers refuse
    // what can never fit with 413 before reading the body, not with a 503 to retry.
    let tree = Tree::new("up-reload");
    let server = start(&tree, 2, &["--max-upload-bytes", "1000000"]);
    assert_eq!(
        put(server.addr, "/before.bin", &body(20, 200_000)).status,
        201
    );
    let answer = server
        .ctl(&json!({"cmd": "reload", "set": {"max_upload_bytes": 100_000}}))
        .expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    server.wait_ready(2, Duration::from_secs(30));
    let mut c = Conn::open(server.addr);
    c.send(&head("PUT", "/after.bin", 200_000, &[]))
        .expect("send");
    let r = c.response().expect("answered before the body");
    assert_eq!(r.status, 413, "{r:?}");
    assert!(!tree.root().join("after.bin").exists());
    assert_eq!(
        put(server.addr, "/small.bin", &body(21, 50_000)).status,
        201
    );
    wait_released(&server);
}

/// `bytes */total`: the bytes held, from the 308's `Range` (0 when none).
fn held(addr: SocketAddr, path: &str, total: usize) -> u64 {
    let r = request(
        addr,
        "PUT",
        path,
        b"",
        &[("Content-Range", &format!("bytes */{total}"))],
    );
    assert_eq!(r.status, 308, "{r:?}");
    r.header("range").map_or(0, |v| {
        v.trim_start_matches("bytes=0-")
            .parse::<u64>()
            .expect("range")
            + 1
    })
}

fn chunk(addr: SocketAddr, path: &str, content: &[u8], from: usize, to: usize) -> Reply {
    let range = format!("bytes {from}-{}/{}", to - 1, content.len());
    request(
        addr,
        "PUT",
        path,
        &content[from..to],
        &[("Content-Range", &range)],
    )
}

/// `--upload-partial-ttl`: a resumable upload nobody resumes is forgotten once its
/// lifetime has passed — the broker gives its place back, and the next chunk finds
/// nothing held — while one resumed in time keeps its bytes.
#[test]
fn a_resumable_upload_left_longer_than_its_partial_ttl_is_forgotten() {
    let tree = Tree::new("up-partial-ttl");
    let server = start(&tree, 2, &["--upload-partial-ttl", "2"]);
    let addr = server.addr;
    let content = body(9, 30_000);
    let total = content.len();

    assert_eq!(chunk(addr, "/kept.bin", &content, 0, 10_000).status, 308);
    assert_eq!(
        chunk(addr, "/kept.bin", &content, 10_000, 20_000).status,
        308
    );
    let r = chunk(addr, "/left.bin", &content, 0, 10_000);
    assert_eq!(r.status, 308, "{r:?}");
    let sent = Instant::now();
    assert_eq!(broker(&server)["partials"], 2);
    // `kept` is resumed before its lifetime ends, `left` is not.
    assert_eq!(
        chunk(addr, "/kept.bin", &content, 20_000, total).status,
        201
    );
    wait_until(Duration::from_secs(15), "the partial forgotten", || {
        (broker(&server)["partials"] == 0).then_some(())
    });
    assert!(
        sent.elapsed() >= Duration::from_secs(1),
        "forgotten after {:?}, before its lifetime",
        sent.elapsed()
    );
    assert_eq!(held(addr, "/left.bin", total), 0);
    let r = chunk(addr, "/left.bin", &content, 10_000, 20_000);
    assert_eq!(r.status, 409, "a chunk after the lifetime is a gap: {r:?}");
    assert_eq!(
        std::fs::read(tree.root().join("kept.bin")).expect("kept"),
        content
    );
    assert!(!tree.root().join("left.bin").exists());
}

#[test]
fn an_interrupted_resumable_upload_resumes_from_the_308_range() {
    let tree = Tree::new("up-resume");
    let server = start(&tree, 3, &[]);
    let addr = server.addr;
    let content = body(5, 300_000);
    let total = content.len();

    // The client announces everything, sends 100 000 bytes and vanishes.
    {
        let range = format!("bytes 0-{}/{total}", total - 1);
        let c = stalled_put(
            addr,
            "/resume.bin",
            &content,
            100_000,
            &[("Content-Range", &range)],
        );
        wait_until(Duration::from_secs(10), "the chunk's lease", || {
            (lease_count(&broker(&server)) == 1).then_some(())
        });
        drop(c);
    }
    wait_until(
        Duration::from_secs(10),
        "the interrupted chunk to end",
        || (lease_count(&broker(&server)) == 0).then_some(()),
    );
    let have = held(addr, "/resume.bin", total) as usize;
    assert!(have > 0 && have <= 100_000, "held {have}");
    assert_eq!(broker(&server)["partials"], 1);
    // A chunk past what is held is a gap: 409 with the held range.
    let r = chunk(addr, "/resume.bin", &content, have + 10, have + 20);
    assert_eq!(r.status, 409);
    assert_eq!(
        r.header("range"),
        Some(format!("bytes=0-{}", have - 1).as_str())
    );
    // Its lease is given back without waiting for an answer; let that land, so the next
    // lease seen is the next chunk's.
    wait_until(
        Duration::from_secs(5),
        "the refused chunk's lease released",
        || (lease_count(&broker(&server)) == 0).then_some(()),
    );
    // Another 100 000 bytes, then a kill -9 of the worker writing them.
    let second = (have + 100_000).min(total - 1);
    let range = format!("bytes {have}-{}/{total}", total - 1);
    let mut stalled = Conn::open(addr);
    let mut bytes = head(
        "PUT",
        "/resume.bin",
        total - have,
        &[("Content-Range", &range)],
    );
    bytes.extend_from_slice(&content[have..second]);
    stalled.send(&bytes).expect("send");
    let (writer, _) = wait_until(Duration::from_secs(10), "the second chunk's lease", || {
        broker(&server)["leases"][0]["worker"].as_u64()
    });
    // Let the bytes already sent reach the partial file before the kill.
    wait_until(
        Duration::from_secs(10),
        "the second chunk's bytes on disk",
        || {
            let partial = std::fs::read_dir(tree.root()).ok()?.flatten().find(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with(".servery-partial-") && !n.ends_with(".meta")
            })?;
            (partial.metadata().ok()?.len() as usize > have).then_some(())
        },
    );
    let pid = pid_of(&server.status(), writer).expect("writer's pid");
    signal_pid(pid, Sig::KILL);
    wait_until(
        Duration::from_secs(5),
        "the killed writer's lease gone",
        || (lease_count(&broker(&server)) == 0).then_some(()),
    );
    // The partial reservation outlives its worker (orphaned, decision 0004).
    assert_eq!(broker(&server)["partials"], 1);
    let have2 = held(addr, "/resume.bin", total) as usize;
    assert!(
        have2 > have && have2 <= second,
        "held {have2} after {have}..{second}"
    );
    // Resume with a chunk that overlaps what is held (its overlap is dropped), through
    // whichever worker the connection reaches.
    let from = have2 - 1000;
    let r = chunk(addr, "/resume.bin", &content, from, total);
    assert_eq!(r.status, 201, "{r:?}");
    assert_ne!(r.worker(), Some(writer));
    published_whole(&tree, &server, "resume.bin", &content);
    let leftovers: Vec<_> = std::fs::read_dir(tree.root())
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".servery-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A worker killed after its last chunk reached the disk but before the rename leaves a
/// partial that holds every byte. The client, told nothing, resends its last chunk: that
/// publishes what is held (before, it was answered 308 with the whole range, and a chunk
/// cannot start at the total, so the upload was stuck until the partial expired).
#[test]
fn a_partial_holding_every_byte_is_published_by_the_next_chunk() {
    let tree = Tree::new("up-whole-partial");
    let server = start(&tree, 2, &[]);
    let addr = server.addr;
    let content = body(7, 40_000);
    let total = content.len();
    let r = chunk(addr, "/whole.bin", &content, 0, 30_000);
    assert_eq!(r.status, 308, "{r:?}");
    // The rest reaches the partial file as a killed writer's last chunk would have.
    let partial = std::fs::read_dir(tree.root())
        .expect("ls")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with(".servery-partial-") && !n.ends_with(".meta")
        })
        .expect("the partial file");
    let mut data = std::fs::read(&partial).expect("read the partial");
    assert_eq!(data.len(), 30_000);
    data.extend_from_slice(&content[30_000..]);
    std::fs::write(&partial, &data).expect("complete the partial");
    assert_eq!(held(addr, "/whole.bin", total) as usize, total);

    let r = chunk(addr, "/whole.bin", &content, 30_000, total);
    assert_eq!(r.status, 201, "{r:?}");
    published_whole(&tree, &server, "whole.bin", &content);
}

/// `name` holds exactly `content`, and the broker has let go of the upload's lease and its
/// partial reservation.
fn published_whole(tree: &Tree, server: &Server, name: &str, content: &[u8]) {
    let written = std::fs::read(tree.root().join(name)).expect("published");
    assert!(
        written == content,
        "not byte-exact ({} bytes)",
        written.len()
    );
    wait_released(server);
    wait_until(
        Duration::from_secs(5),
        "the partial reservation released",
        || (broker(server)["partials"] == 0).then_some(()),
    );
}

#[test]
fn a_busy_target_waits_up_to_the_write_lock_timeout() {
    let tree = Tree::new("up-wait");
    let server = start(
        &tree,
        2,
        &["--write-lock-timeout", "1", "--allow-overwrite"],
    );
    let addr = server.addr;
    let first = body(1, 200_000);
    let second = body(2, 50_000);

    // The second writer arrives while the first holds the lease: it waits (holding its
    // reservation, its body unread), and gets the target once the first is done.
    let mut holder = stalled_put(addr, "/w.bin", &first, 1000, &[]);
    wait_until(Duration::from_secs(10), "the first writer's lease", || {
        (lease_count(&broker(&server)) == 1).then_some(())
    });
    let waiter = {
        let second = second.clone();
        std::thread::spawn(move || {
            let mut c = Conn::open(addr);
            let h = head("PUT", "/w.bin", second.len(), &[("Expect", "100-continue")]);
            c.send(&h).expect("send");
            let r = c.response().expect("answer");
            if r.status != 100 {
                return r;
            }
            c.send(&second).expect("body");
            c.response().expect("answer")
        })
    };
    wait_until(Duration::from_secs(10), "the second writer waiting", || {
        (reservations(&broker(&server)) == 2).then_some(())
    });
    assert!(!waiter.is_finished(), "the second writer did not wait");
    holder.send(&first[1000..]).expect("rest");
    assert_eq!(holder.response().expect("first").status, 201);
    let r = waiter.join().expect("waiter");
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        std::fs::read(tree.root().join("w.bin")).expect("file"),
        second
    );

    // A holder that does not let go: the waiter gives up after the timeout with 409.
    let _holder = stalled_put(addr, "/w2.bin", &first, 1000, &[]);
    wait_until(Duration::from_secs(10), "the holder's lease", || {
        (lease_count(&broker(&server)) == 1).then_some(())
    });
    let asked = Instant::now();
    let mut c = Conn::open(addr);
    c.send(&head("PUT", "/w2.bin", 10, &[("Expect", "100-continue")]))
        .expect("send");
    let r = c.response().expect("answer");
    let waited = asked.elapsed();
    assert_eq!(r.status, 409, "{r:?}");
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(5),
        "refused after {waited:?}"
    );
}
