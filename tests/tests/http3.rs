//! HTTP/3 (`--http3`) against the real binary, with two clients servery's code has no part
//! in beyond the crates it shares: a Rust h3/quinn client (`support/h3_client.rs`) and
//! aioquic (`support/h3_client.py`). Files, ranges, conditional requests and missing
//! files; `Alt-Svc` on TCP; the configuration rule; 10,000 requests across a recycle and
//! a `kill -9` of one worker, where only the killed worker's connections may fail; 64 MiB
//! downloads across 20 recycles and a reload, all byte-exact; and
//! random datagrams, which must not hurt a worker.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use h3_client::{H3, Miss};
use rustls::pki_types::CertificateDer;
use serde_json::{Value, json};
use servery_tests::*;

#[path = "http3/admission.rs"]
mod admission;
#[path = "support/h3_client.rs"]
mod h3_client;
#[path = "http3/recycles.rs"]
mod recycles;
#[path = "http3/refusals.rs"]
mod refusals;
#[path = "http3/slow_peers.rs"]
mod slow_peers;
#[path = "http3/steering.rs"]
mod steering;

const REQUEST_BOUND: Duration = Duration::from_secs(5);

/// A certificate for `localhost` in the tree (`cert.pem`, `key.pem`), and the flags that
/// serve it with HTTP/3.
fn identity(tree: &Tree) -> (CertificateDer<'static>, Vec<String>) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    let (cert_path, key_path) = (tree.dir.join("cert.pem"), tree.dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).expect("write cert");
    std::fs::write(&key_path, key.serialize_pem()).expect("write key");
    let flags = vec![
        "--http3".to_owned(),
        "--tls-cert".to_owned(),
        cert_path.display().to_string(),
        "--tls-key".to_owned(),
        key_path.display().to_string(),
    ];
    (cert.der().clone(), flags)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn loopback() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

fn header(reply: &h3_client::Reply, name: &str) -> String {
    reply
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn start(tree: &Tree, workers: u32, flags: &[String], extra: &[&str]) -> Server {
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let server = Server::start(tree, workers, &args, &[]);
    server.wait_ready(workers as usize, Duration::from_secs(20));
    server
}

#[test]
fn files_ranges_validators_and_missing_files_over_http3() {
    let tree = Tree::new("h3-files");
    let (cert, flags) = identity(&tree);
    let server = start(&tree, 2, &flags, &[]);
    let config = h3_client::config(&cert);
    runtime().block_on(async {
        let mut h3 = h3_client::connect(server.addr, loopback(), &config, REQUEST_BOUND)
            .await
            .expect("connect");
        let hello = h3.get("/hello.txt", REQUEST_BOUND).await.expect("hello");
        assert_eq!(hello.status, 200);
        assert_eq!(hello.body, HELLO);
        assert!(
            header(&hello, "alt-svc").is_empty(),
            "HTTP/3 responses do not advertise themselves"
        );
        let etag = header(&hello, "etag");
        assert!(etag.starts_with('"'), "an ETag: {:?}", hello.headers);

        let big = h3.get("/sub/big.bin", REQUEST_BOUND).await.expect("big");
        assert_eq!(big.status, 200);
        assert!(big.body == big_body(), "big.bin arrives whole and intact");

        let range = h3
            .request(
                "GET",
                "/sub/big.bin",
                &[("range", "bytes=1000-1999")],
                REQUEST_BOUND,
            )
            .await
            .expect("range");
        assert_eq!(range.status, 206);
        assert_eq!(range.body, big_body()[1000..2000]);
        assert_eq!(
            header(&range, "content-range"),
            format!("bytes 1000-1999/{}", big_body().len())
        );

        let same = h3
            .request(
                "GET",
                "/hello.txt",
                &[("if-none-match", &etag)],
                REQUEST_BOUND,
            )
            .await
            .expect("conditional");
        assert_eq!(same.status, 304);
        assert!(same.body.is_empty());

        let head = h3
            .request("HEAD", "/sub/big.bin", &[], REQUEST_BOUND)
            .await
            .expect("head");
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty());
        assert_eq!(
            header(&head, "content-length"),
            big_body().len().to_string()
        );

        let missing = h3.get("/no/such/file", REQUEST_BOUND).await.expect("404");
        assert_eq!(missing.status, 404);
    });
}

#[test]
fn an_idle_client_that_keeps_pinging_does_not_hold_up_a_recycle() {
    let tree = Tree::new("h3-idle");
    let (cert, flags) = identity(&tree);
    let server = start(&tree, 1, &flags, &[]);
    let config = h3_client::config_pinging(&cert, Some(Duration::from_millis(300)));
    let rt = runtime();
    let h3 = rt.block_on(async {
        let mut h3 = h3_client::connect(server.addr, loopback(), &config, REQUEST_BOUND)
            .await
            .expect("connect");
        h3.get("/hello.txt", REQUEST_BOUND).await.expect("hello");
        h3
    });
    let status = server.status();
    let before = worker_ids(&status);
    // The supervisor decides who reads which QUIC socket and which take new connections
    // (decision 0079); status shows it: the one worker reads socket 0, which accepts.
    assert_eq!(
        (&status["http3"]["readers"], &status["http3"]["accepting"]),
        (&json!([before[0]]), &json!([0])),
        "{status}"
    );
    assert!(
        status["singletons"].get("http3").is_none(),
        "HTTP/3 is not a singleton (decision 0077): {status}"
    );
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    // Far below the 30 s drain deadline: GOAWAY, one second's grace, close.
    let (_, took) = wait_until(Duration::from_secs(10), "the recycle to end", || {
        let s = server.status();
        let ids = worker_ids(&s);
        (s["recycle_in_flight"] == false
            && !ids.is_empty()
            && ids.iter().all(|i| !before.contains(i)))
        .then_some(())
    });
    eprintln!("MEASURED recycle with an idle pinging HTTP/3 client: {took:?}");
    let closed =
        rt.block_on(async { tokio::time::timeout(REQUEST_BOUND, h3.connection.closed()).await });
    let reason = closed.expect("the idle connection was closed");
    let h3_no_error = |c: &quinn::ApplicationClose| c.error_code == quinn::VarInt::from_u32(0x100);
    assert!(
        matches!(&reason, quinn::ConnectionError::ApplicationClosed(c) if h3_no_error(c))
            || matches!(reason, quinn::ConnectionError::LocallyClosed),
        "closed cleanly (H3_NO_ERROR, by either side after GOAWAY): {reason:?}"
    );
}

#[test]
fn uploads_over_http3_land_whole() {
    let tree = Tree::new("h3-upload");
    let (cert, flags) = identity(&tree);
    let server = start(&tree, 1, &flags, &["--upload"]);
    let config = h3_client::config(&cert);
    let body = big_body();
    runtime().block_on(async {
        let mut h3 = h3_client::connect(server.addr, loopback(), &config, REQUEST_BOUND)
            .await
            .expect("connect");
        let length = body.len().to_string();
        let put = h3
            .send(
                "PUT",
                "/sub/put.bin",
                &[("content-length", &length)],
                &body,
                REQUEST_BOUND,
            )
            .await
            .expect("PUT");
        assert_eq!(put.status, 201, "{put:?}");
        let back = h3.get("/sub/put.bin", REQUEST_BOUND).await.expect("GET");
        assert!(back.body == body, "the upload reads back whole");
    });
    assert!(std::fs::read(tree.root().join("sub/put.bin")).expect("on disk") == body);
}

#[test]
fn tcp_responses_advertise_http3_on_the_same_port() {
    let tree = Tree::new("h3-altsvc");
    let (_, flags) = identity(&tree);
    let server = start(&tree, 1, &flags, &[]);
    let out = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-D", "-", "--max-time", "10"])
        .arg(format!(
            "https://localhost:{}/hello.txt",
            server.addr.port()
        ))
        .output()
        .expect("curl (scripts/debian-packages.txt)");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    let expected = format!("alt-svc: h3=\":{}\"; ma=86400", server.addr.port());
    assert!(head.contains(&expected), "{expected:?} not in:\n{head}");
    // The UDP sockets are bound once, on the port: a reload may not move it (decision
    // 0035), and says why.
    let moved = server.addr.port().wrapping_add(1).max(1);
    let refused = server
        .ctl(&servery_tests::serde_json::json!({"cmd": "reload", "set": {"port": moved}}))
        .expect_err("the port is fixed with --http3");
    assert!(
        refused.contains("port cannot change on reload with --http3"),
        "{refused}"
    );
    assert_eq!(server.status()["generation"], 1);
}

#[test]
fn http3_without_tls_is_a_configuration_error_before_binding() {
    let tree = Tree::new("h3-notls");
    // The test holds the port on both protocols for the whole run, so no other test can
    // take it: a servery that bound before validating would fail with "address in use"
    // instead of the configuration error. (Checking afterwards that the port is still free
    // raced with other tests picking the same free port.)
    let (tcp, _udp, port) = (0..100)
        .find_map(|_| {
            let tcp = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
            let port = tcp.local_addr().ok()?.port();
            let udp = UdpSocket::bind(("127.0.0.1", port)).ok()?;
            Some((tcp, udp, port))
        })
        .expect("a port free on both TCP and UDP");
    let root = tree.root().display().to_string();
    let finished = run_servery(
        &[&root, "--http3", "--port", &port.to_string()],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(finished.status.code(), Some(2), "{finished:?}");
    assert!(
        finished.stderr.contains("--http3") && finished.stderr.contains("needs TLS"),
        "the error names the flag and the rule: {}",
        finished.stderr
    );
    assert!(
        !finished.stderr.contains("in use") && !finished.stdout.contains("listening"),
        "nothing was bound: {finished:?}"
    );
    assert!(
        !tree.socket().exists(),
        "no control socket before validation"
    );
    drop(tcp);
}

#[test]
fn aioquic_fetches_files_over_http3() {
    let tree = Tree::new("h3-aioquic");
    let (_, flags) = identity(&tree);
    let server = start(&tree, 2, &flags, &[]);
    let python = Command::new("python3")
        .args(["-c", "import aioquic"])
        .output()
        .expect("python3");
    assert!(
        python.status.success(),
        "python3 cannot import aioquic: pip install aioquic (scripts/python-packages.txt)"
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/h3_client.py");
    let run = |extra: &[&str]| -> Vec<Value> {
        let mut cmd = Command::new("python3");
        cmd.arg(script)
            .arg("127.0.0.1")
            .arg(server.addr.port().to_string())
            .args(extra);
        let finished = run_command(cmd, Duration::from_secs(30));
        assert!(finished.status.success(), "aioquic client: {finished:?}");
        finished
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    };
    let got = run(&["/hello.txt", "/sub/big.bin", "/missing"]);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0]["status"], 200);
    assert_eq!(got[0]["length"], HELLO.len());
    assert_eq!(got[1]["status"], 200);
    assert_eq!(got[1]["sha256"], sha256_hex(&big_body()));
    assert_eq!(got[2]["status"], 404);
    let ranged = run(&["--range", "10-19", "/sub/big.bin"]);
    assert_eq!(ranged[0]["status"], 206);
    assert_eq!(ranged[0]["sha256"], sha256_hex(&big_body()[10..20]));
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Where the load is: before the recycle (0, the start), during it, after it, after the
/// kill.
const RECYCLING: u8 = 1;
const RECYCLED: u8 = 2;
const KILLED: u8 = 3;

#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    /// Connection attempts or requests the server had not taken (sent again), by why.
    retried: Mutex<BTreeMap<String, u64>>,
    /// Requests lost in flight: the connection's local address, the phase, why.
    failed: Mutex<Vec<(IpAddr, u8, String)>>,
    phase: AtomicU8,
    next_ip: AtomicU32,
    stop: std::sync::atomic::AtomicBool,
}

impl Tally {
    fn retry(&self, miss: Miss) {
        let (Miss::Retry(why) | Miss::Failed(why)) = miss;
        *self.retried.lock().expect("tally").entry(why).or_default() += 1;
    }

    /// A loopback address no earlier connection used (127.0.1.0 upwards).
    fn fresh_ip(&self) -> IpAddr {
        let n = self.next_ip.fetch_add(1, Ordering::Relaxed) + 256;
        IpAddr::V4(Ipv4Addr::from(0x7f00_0000 + n))
    }
}

/// One client: a connection at a time, each from a fresh address, a request after
/// another until told to stop; every request is sent again until it succeeds.
async fn client(server: SocketAddr, config: quinn::ClientConfig, tally: Arc<Tally>) {
    let mut conn: Option<H3> = None;
    while !tally.stop.load(Ordering::Relaxed) {
        let h3 = match &mut conn {
            Some(h3) => h3,
            None => {
                match h3_client::connect(server, tally.fresh_ip(), &config, REQUEST_BOUND).await {
                    Ok(h3) => conn.insert(h3),
                    Err(miss) => {
                        tally.retry(miss);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                }
            }
        };
        match h3.get("/hello.txt", REQUEST_BOUND).await {
            Ok(reply) if reply.status == 200 && reply.body == HELLO => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok(reply) => {
                let phase = tally.phase.load(Ordering::Relaxed);
                let why = format!("status {}", reply.status);
                tally
                    .failed
                    .lock()
                    .expect("tally")
                    .push((h3.local, phase, why));
            }
            Err(Miss::Retry(why)) => {
                tally.retry(Miss::Retry(why));
                conn = None;
            }
            Err(Miss::Failed(why)) => {
                let phase = tally.phase.load(Ordering::Relaxed);
                tally
                    .failed
                    .lock()
                    .expect("tally")
                    .push((h3.local, phase, why));
                conn = None;
            }
        }
    }
}

/// The worker ids the access log saw serve each remote address.
fn workers_by_remote(log: &str) -> BTreeMap<IpAddr, BTreeSet<u64>> {
    let mut seen: BTreeMap<IpAddr, BTreeSet<u64>> = BTreeMap::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let (Some(ip), Some(worker)) = (
            v["remote"].as_str().and_then(|r| r.parse().ok()),
            v["worker"].as_u64(),
        ) {
            seen.entry(ip).or_default().insert(worker);
        }
    }
    seen
}

#[test]
fn ten_thousand_requests_across_a_recycle_and_a_kill_lose_only_the_killed_workers_connections() {
    const CLIENTS: usize = 16;
    const TOTAL: u64 = 10_000;
    let tree = Tree::new("h3-load");
    let (cert, flags) = identity(&tree);
    let log = tree.dir.join("access.log");
    let log_arg = log.display().to_string();
    let server = start(
        &tree,
        2,
        &flags,
        &["--access-log", &log_arg, "--access-log-format", "json"],
    );
    let rt = runtime();
    let tally = Arc::new(Tally::default());
    let config = h3_client::config(&cert);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| rt.spawn(client(server.addr, config.clone(), Arc::clone(&tally))))
        .collect();
    let bound = Duration::from_secs(60);
    let ok_reaches = |n: u64, what: &str| {
        wait_until(bound, what, || {
            (tally.ok.load(Ordering::Relaxed) >= n).then_some(())
        });
    };
    ok_reaches(1_000, "1,000 requests before the recycle");

    tally.phase.store(RECYCLING, Ordering::Relaxed);
    let before = worker_ids(&server.status());
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    wait_until(bound, "every worker recycled", || {
        let s = server.status();
        let ids = worker_ids(&s);
        let ready = s["workers"]
            .as_array()
            .is_some_and(|ws| ws.iter().all(|w| w["state"] == "ready"));
        let done = ready && ids.len() == 2 && ids.iter().all(|id| !before.contains(id));
        (done && s["recycle_in_flight"] == false).then_some(())
    });
    tally.phase.store(RECYCLED, Ordering::Relaxed);
    let at_recycled = tally.ok.load(Ordering::Relaxed);
    ok_reaches(at_recycled + 1_500, "1,500 requests after the recycle");

    let status = server.status();
    let victim = &status["workers"][0];
    let (victim_id, victim_pid) = (
        victim["id"].as_u64().expect("id"),
        victim["pid"].as_u64().expect("pid") as u32,
    );
    tally.phase.store(KILLED, Ordering::Relaxed);
    let killed_at = Instant::now();
    signal_pid(victim_pid, rustix::process::Signal::KILL);
    let at_kill = tally.ok.load(Ordering::Relaxed);
    ok_reaches(
        TOTAL.max(at_kill + 2_000),
        "10,000 requests in all, 2,000 after the kill",
    );
    tally.stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for c in clients {
            let _ = tokio::time::timeout(REQUEST_BOUND * 2, c).await;
        }
    });
    let ok = tally.ok.load(Ordering::Relaxed);
    let failed = tally.failed.lock().expect("tally").clone();
    let retried = tally.retried.lock().expect("tally").clone();
    eprintln!(
        "MEASURED h3 load: {ok} ok, {} failed, sent again: {retried:?}; all done {:?} after the kill",
        failed.len(),
        killed_at.elapsed()
    );

    // The recycle lost nothing: GOAWAY told every client which requests were taken.
    let early: Vec<_> = failed.iter().filter(|f| f.1 != KILLED).collect();
    assert!(early.is_empty(), "requests lost before the kill: {early:?}");

    // Stop the server so every worker's last access-log lines are written.
    server.ctl(&json!({"cmd": "stop"})).expect("stop");
    let mut server = server;
    server.wait_exit(Duration::from_secs(30));
    let seen = workers_by_remote(&std::fs::read_to_string(&log).expect("access log"));
    for (ip, workers) in &seen {
        assert_eq!(
            workers.len(),
            1,
            "the connection from {ip} was served by one worker only: {workers:?}"
        );
    }
    // Every failed connection was the killed worker's; none the survivor's. (One with no
    // line at all had its lines die with the killed worker before reaching the log.)
    let mut on_victim = 0;
    for (ip, _, why) in &failed {
        if let Some(workers) = seen.get(ip) {
            assert!(
                workers.contains(&victim_id),
                "a connection of worker {workers:?} failed ({why}); only {victim_id} was killed"
            );
            on_victim += 1;
        }
    }
    assert!(
        on_victim > 0,
        "the killed worker had connections, and they failed: {failed:?}"
    );
    let survivor_connections = seen
        .values()
        .filter(|w| !w.contains(&victim_id) && !before.iter().any(|b| w.contains(b)))
        .count();
    assert!(
        survivor_connections > 0,
        "connections on the other worker carried on"
    );
}

/// A small deterministic generator: the datagrams are the same on every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// A datagram of one of the shapes a QUIC server must take apart: random bytes, long
/// headers (Initial, 0-RTT, Handshake, Retry) with known and unknown versions and
/// connection-ID lengths past the limit, short headers, and truncations of each.
fn datagram(rng: &mut XorShift) -> Vec<u8> {
    let mut d = match rng.below(4) {
        0 => {
            let len = rng.below(1500) as usize;
            rng.bytes(len)
        }
        1 | 2 => {
            let mut d = vec![0xc0 | (rng.below(4) as u8) << 4 | rng.below(16) as u8];
            let version: u32 = match rng.below(4) {
                0 => 1,
                1 => 0,
                2 => 0x6b33_43cf,
                _ => rng.next() as u32,
            };
            d.extend_from_slice(&version.to_be_bytes());
            for _ in 0..2 {
                let cid = rng.below(24) as usize;
                d.push(cid as u8);
                d.extend(rng.bytes(cid));
            }
            let rest = if rng.below(2) == 0 {
                1200
            } else {
                rng.below(1400) as usize
            };
            d.extend(rng.bytes(rest));
            d
        }
        _ => {
            let mut d = vec![0x40 | rng.below(64) as u8];
            let len = rng.below(1400) as usize;
            d.extend(rng.bytes(len));
            d
        }
    };
    if rng.below(5) == 0 {
        let cut = rng.below(d.len() as u64 + 1) as usize;
        d.truncate(cut);
    }
    d
}

#[test]
fn random_datagrams_never_hurt_a_worker() {
    let tree = Tree::new("h3-fuzz");
    let (cert, flags) = identity(&tree);
    let server = start(&tree, 2, &flags, &[]);
    let pids = worker_pids(&server.status());
    let mut rng = XorShift(0x5eed_1234_abcd_0001);
    // From many source addresses, so every slot's socket gets its share.
    let senders: Vec<UdpSocket> = (0..32u32)
        .map(|i| {
            UdpSocket::bind(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(0x7f00_0000 + 0x0002_0000 + i)),
                0,
            ))
            .expect("sender")
        })
        .collect();
    let mut sent = 0u32;
    for i in 0..6_000usize {
        let d = datagram(&mut rng);
        if senders[i % senders.len()].send_to(&d, server.addr).is_ok() {
            sent += 1;
        }
        if i % 500 == 0 {
            // Let the workers keep up rather than measure the socket buffer.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert!(sent > 5_000, "datagrams sent: {sent}");
    let status = server.status();
    assert_eq!(worker_pids(&status), pids, "no worker died: {status}");
    assert_eq!(status["restarts"], 0, "{status}");
    let config = h3_client::config(&cert);
    runtime().block_on(async {
        for i in 0..8u32 {
            let local = IpAddr::V4(Ipv4Addr::from(0x7f00_0000 + 0x0003_0000 + i));
            let mut h3 = h3_client::connect(server.addr, local, &config, REQUEST_BOUND)
                .await
                .expect("still serving");
            let reply = h3.get("/hello.txt", REQUEST_BOUND).await.expect("reply");
            assert_eq!(reply.body, HELLO);
        }
    });
}
