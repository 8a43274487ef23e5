//! The reverse proxy (`--proxy`) on the real binary, against upstreams nobody here wrote:
//! gunicorn and uvicorn serving a small Python application, and nginx. Requests are made
//! with curl. A test whose upstream is not installed says SKIPPED and returns.

use std::time::{Duration, Instant};

use servery_tests::upstream::{self, Upstream, tool_present};
use servery_tests::*;

fn gunicorn_present() -> bool {
    python_imports(&["gunicorn"])
}

fn route(prefix: &str, up: &Upstream, path: &str) -> String {
    match (&up.addr, &up.socket) {
        (Some(addr), _) => format!("{prefix}=http://{addr}{path}"),
        (None, Some(socket)) => format!("{prefix}=unix:{}", socket.display()),
        (None, None) => unreachable!("an upstream listens somewhere"),
    }
}

fn json(answer: &CurlAnswer) -> serde_json::Value {
    let text = String::from_utf8_lossy(&answer.body);
    assert_eq!(answer.status, 200, "{text}");
    serde_json::from_slice(&answer.body).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn gunicorn_gets_the_request_with_forwarding_headers_and_without_hop_by_hop_fields() {
    if !gunicorn_present() {
        return;
    }
    let tree = Tree::new("proxy-gunicorn");
    let up = upstream::gunicorn(&tree, None);
    let sock_path = tree.dir.join("g.sock");
    let by_socket = upstream::gunicorn(&tree, Some(&sock_path));
    let server = Server::start(
        &tree,
        2,
        &[
            "--proxy",
            &route("/app", &up, "/"),
            "--proxy",
            &route("/sock", &by_socket, ""),
        ],
        &[],
    );
    let addr = server.addr;

    let got = json(&curl(
        addr,
        "/app/echo?x=1&y=%20",
        &[
            "-H",
            "X-Forwarded-For: 6.6.6.6",
            "-H",
            "Forwarded: for=6.6.6.6",
            "-H",
            "X-Forwarded-Host: evil.example",
            "-H",
            "Connection: keep-alive, X-Secret",
            "-H",
            "X-Secret: hop",
            "-H",
            "Keep-Alive: timeout=5",
            "-H",
            "Proxy-Connection: keep-alive",
            "-H",
            "X-Kept: end-to-end",
        ],
    ));
    let h = &got["headers"];
    assert_eq!(
        got["path"], "/echo",
        "the prefix is replaced by the URL's path: {got}"
    );
    assert_eq!(got["query"], "x=1&y=%20");
    assert_eq!(
        h["x-forwarded-for"], "127.0.0.1",
        "an untrusted peer's chain is replaced: {h}"
    );
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], addr.to_string());
    assert_eq!(
        h["forwarded"],
        format!("for=127.0.0.1;host=\"{addr}\";proto=http")
    );
    assert_eq!(
        h["host"],
        addr.to_string(),
        "the client's Host goes upstream: {h}"
    );
    assert_eq!(h["x-kept"], "end-to-end");
    for hop in ["x-secret", "keep-alive", "proxy-connection"] {
        assert!(h.get(hop).is_none(), "{hop} reached the upstream: {h}");
    }

    // The answer goes out in the client's version, whatever the upstream spoke.
    let head = std::process::Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "--max-time", "20"])
        .arg(format!("http://{addr}/app/echo"))
        .output()
        .expect("curl");
    let head = String::from_utf8_lossy(&head.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");

    // A POST's body arrives whole and unchanged.
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    let file = tree.dir.join("post.bin");
    std::fs::write(&file, &body).expect("write");
    let got = json(&curl(
        addr,
        "/app/echo",
        &["--data-binary", &format!("@{}", file.display())],
    ));
    assert_eq!(got["method"], "POST");
    assert_eq!(got["length"], body.len());
    let sha = std::process::Command::new("sha256sum")
        .arg(&file)
        .output()
        .expect("sha256sum");
    let sha = String::from_utf8_lossy(&sha.stdout);
    assert_eq!(got["sha256"], sha.split_whitespace().next().expect("sum"));

    // Over a Unix socket, the path goes unchanged (the URL has none).
    let got = json(&curl(addr, "/sock/echo", &[]));
    assert_eq!(got["path"], "/sock/echo");

    // What no prefix takes is still the served directory.
    let file = curl(addr, "/hello.txt", &[]);
    assert_eq!(file.status, 200);
    assert_eq!(file.body, HELLO);
    assert_eq!(
        curl(addr, "/apps", &[]).status,
        404,
        "prefixes match whole segments"
    );
}

#[test]
fn the_upstreams_own_host_is_sent_when_asked_and_the_clients_kept_in_forwarded_fields() {
    if !gunicorn_present() {
        return;
    }
    let tree = Tree::new("proxy-upstream-host");
    let up = upstream::gunicorn(&tree, None);
    let sock_path = tree.dir.join("g.sock");
    let by_socket = upstream::gunicorn(&tree, Some(&sock_path));
    let server = Server::start(
        &tree,
        1,
        &[
            "--proxy",
            &route("/app", &up, "/"),
            "--proxy",
            &route("/sock", &by_socket, ""),
            "--proxy-upstream-host",
            "--allowed-host",
            "files.example.org",
        ],
        &[],
    );
    let addr = server.addr;
    let up_addr = up.addr.expect("a TCP upstream");
    let got = json(&curl(addr, "/app/echo", &["-H", "Host: files.example.org"]));
    let h = &got["headers"];
    assert_eq!(
        h["host"],
        up_addr.to_string(),
        "the route's own host and port: {h}"
    );
    assert_eq!(h["x-forwarded-host"], "files.example.org");
    assert_eq!(
        h["forwarded"],
        "for=127.0.0.1;host=\"files.example.org\";proto=http"
    );
    let got = json(&curl(
        addr,
        "/sock/echo",
        &["-H", "Host: files.example.org"],
    ));
    assert_eq!(
        got["headers"]["host"], "localhost",
        "a unix route names no host: {got}"
    );
}

#[test]
fn a_trusted_peers_forwarding_chain_is_extended() {
    if !gunicorn_present() {
        return;
    }
    let tree = Tree::new("proxy-trust");
    let up = upstream::gunicorn(&tree, None);
    let server = Server::start(
        &tree,
        1,
        &[
            "--proxy",
            &route("/", &up, ""),
            "--trust-proxy",
            "127.0.0.1",
        ],
        &[],
    );
    let got = json(&curl(
        server.addr,
        "/echo",
        &[
            "-H",
            "X-Forwarded-For: 203.0.113.9",
            "-H",
            "X-Forwarded-Proto: https",
        ],
    ));
    assert_eq!(got["headers"]["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(got["headers"]["x-forwarded-proto"], "https");
}

#[test]
fn uvicorn_takes_a_chunked_upload_through_the_proxy() {
    if !python_imports(&["uvicorn"]) {
        return;
    }
    let tree = Tree::new("proxy-uvicorn");
    let up = upstream::uvicorn(&tree);
    let server = Server::start(&tree, 2, &["--proxy", &route("/asgi", &up, "")], &[]);
    let file = tree.dir.join("up.bin");
    std::fs::write(&file, vec![7u8; 3 * 1024 * 1024 + 5]).expect("write");
    let got = json(&curl(
        server.addr,
        "/asgi/echo?q=1",
        &[
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &format!("@{}", file.display()),
        ],
    ));
    assert_eq!(got["server"], "asgi");
    assert_eq!(got["path"], "/asgi/echo");
    assert_eq!(got["length"], 3 * 1024 * 1024 + 5);
    assert!(
        got["headers"]
            .get("transfer-encoding")
            .is_none_or(|v| v == "chunked")
    );
}

#[test]
fn nginx_upstream_serves_ranges_over_pooled_connections() {
    if !tool_present("nginx", &["-v"]) {
        return;
    }
    let tree = Tree::new("proxy-nginx");
    let up = upstream::nginx(&tree, &tree.root());
    let server = Server::start(&tree, 1, &["--proxy", &route("/n", &up, "/")], &[]);
    for _ in 0..20 {
        let got = curl(server.addr, "/n/hello.txt", &[]);
        assert_eq!(got.status, 200);
        assert_eq!(got.body, HELLO);
    }
    let range = curl(server.addr, "/n/sub/big.bin", &["-r", "10-19"]);
    assert_eq!(range.status, 206);
    assert_eq!(range.body, big_body()[10..20]);
    // Twenty requests over separate client connections reuse the worker's pooled
    // upstream connections: nginx logs each request's connection serial number.
    let log = std::fs::read_to_string(up.dir.join("access.log")).expect("nginx log");
    let connections: std::collections::BTreeSet<&str> =
        log.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(
        connections.len() <= 2,
        "{} upstream connections for {} requests:\n{log}",
        connections.len(),
        log.lines().count()
    );
}

#[test]
fn an_upstream_down_is_502_and_a_slow_one_504_with_the_reason() {
    if !gunicorn_present() {
        return;
    }
    let tree = Tree::new("proxy-errors");
    let up = upstream::gunicorn(&tree, None);
    let closed = free_port();
    let server = Server::start(
        &tree,
        2,
        &[
            "--proxy",
            &format!("/down=http://127.0.0.1:{closed}"),
            "--proxy",
            &route("/up", &up, "/"),
            "--proxy-first-byte-timeout",
            "1",
        ],
        &[],
    );
    let down = curl(server.addr, "/down/x", &[]);
    assert_eq!(down.status, 502);
    let text = String::from_utf8_lossy(&down.body);
    assert!(text.contains("cannot connect to the upstream"), "{text}");

    let started = Instant::now();
    let slow = curl(server.addr, "/up/slow?secs=5", &[]);
    assert_eq!(slow.status, 504);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let text = String::from_utf8_lossy(&slow.body);
    assert!(text.contains("no response head within 1s"), "{text}");
    // Within the bound it is answered.
    assert_eq!(curl(server.addr, "/up/slow?secs=0.1", &[]).status, 200);
    wait_until(Duration::from_secs(5), "the 504 in the log", || {
        server
            .stderr()
            .contains("upstream gave no response")
            .then_some(())
    });
}

#[test]
fn a_broken_route_is_refused_before_anything_is_bound() {
    let out = std::process::Command::new(servery_bin())
        .args([
            "--port",
            "0",
            "--proxy",
            "/ok=http://127.0.0.1:9",
            "--proxy",
            "api=http://x",
        ])
        .args([
            "--proxy",
            "/x=ftp://h",
            "--proxy",
            "/ok/=http://127.0.0.1:9",
        ])
        .output()
        .expect("run servery");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--proxy: `api=http://x`: the prefix must start with `/`"),
        "{err}"
    );
    assert!(
        err.contains("--proxy: `/x=ftp://h`: the URL must be"),
        "{err}"
    );
    assert!(
        err.contains("prefix `/ok` is already routed to this URL"),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");
}

/// 256 MiB down and 256 MiB up through a worker whose resident memory stays small: the
/// bodies stream, they are not buffered.
#[test]
fn large_bodies_stream_both_ways_in_bounded_memory() {
    if !gunicorn_present() {
        return;
    }
    const SIZE: u64 = 256 << 20;
    let tree = Tree::new("proxy-stream");
    let up = upstream::gunicorn(&tree, None);
    let server = Server::start(&tree, 1, &["--proxy", &route("/up", &up, "/")], &[]);
    let (status, _) = server.wait_ready(1, Duration::from_secs(20));
    let pids = worker_pids(&status);
    let rss_kib = move || -> u64 {
        pids.iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
            .filter_map(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .max()
            .unwrap_or(0)
    };
    let before = rss_kib();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        let rss = rss_kib.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss(), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // Down, to a client reading at 200 MB/s: the upstream is faster, so only
    // back-pressure keeps the worker from holding what the client has not read.
    let down = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "--max-time",
            "120",
            "--limit-rate",
            "200M",
        ])
        .args(["-w", "%{http_code} %{size_download}"])
        .arg(format!("http://{}/up/big?n={SIZE}", server.addr))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&down.stdout), format!("200 {SIZE}"));
    // Up: a sparse file of SIZE bytes, streamed to an upstream that reads it in 64 KiB.
    let file = tree.dir.join("upload.bin");
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(SIZE))
        .expect("sparse file");
    let got = json(&curl(
        server.addr,
        "/up/echo",
        &["-T", &file.display().to_string(), "-X", "POST"],
    ));
    assert_eq!(got["length"], SIZE);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().expect("sampler");
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("worker RSS: {before} KiB before, {peak} KiB at most while 2 x 256 MiB passed");
    assert!(
        peak < before + 48 * 1024,
        "the worker grew from {before} KiB to {peak} KiB"
    );
}

/// `n` requests for `path` at once, each from its own curl: the status codes, and whether
/// every 503 said `Retry-After`.
fn burst(addr: std::net::SocketAddr, path: &str, n: usize) -> (Vec<u16>, bool) {
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let url = format!("http://{addr}{path}");
            std::thread::spawn(move || {
                let out = std::process::Command::new("curl")
                    .args(["-s", "-D", "-", "-o", "/dev/null", "--max-time", "30"])
                    .arg(url)
                    .output()
                    .expect("curl");
                let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0u16);
                (status, status != 503 || head.contains("retry-after: 1"))
            })
        })
        .collect();
    let answers: Vec<(u16, bool)> = handles
        .into_iter()
        .map(|h| h.join().expect("join"))
        .collect();
    (
        answers.iter().map(|a| a.0).collect(),
        answers.iter().all(|a| a.1),
    )
}

fn upstream_max(addr: std::net::SocketAddr, up: &Upstream) -> u64 {
    let _ = addr;
    let got = curl(up.addr.expect("tcp"), "/inflight-max", &[]);
    String::from_utf8_lossy(&got.body)
        .trim()
        .parse()
        .expect("a count")
}

/// `--proxy-max-inflight` is one bound for the service, not one per worker: measured at
/// the upstream, never exceeded across two workers; the requests past it get 503 with
/// Retry-After; and the grants come back, so the whole bound is usable again after.
#[test]
fn the_inflight_bound_holds_across_workers() {
    if !gunicorn_present() {
        return;
    }
    for (max, burst_size) in [(3u64, 12usize), (16, 40)] {
        let tree = Tree::new("proxy-inflight");
        let up = upstream::gunicorn(&tree, None);
        let server = Server::start(
            &tree,
            2,
            &[
                "--proxy",
                &route("/", &up, ""),
                "--proxy-max-inflight",
                &max.to_string(),
            ],
            &[],
        );
        let (statuses, retry_after) = burst(server.addr, "/inflight?hold=1", burst_size);
        let ok = statuses.iter().filter(|&&s| s == 200).count();
        let refused = statuses.iter().filter(|&&s| s == 503).count();
        assert_eq!(ok + refused, burst_size, "{statuses:?}");
        assert!(retry_after, "a 503 without Retry-After");
        let seen = upstream_max(server.addr, &up);
        eprintln!("bound {max}: {ok} forwarded, {refused} refused, at most {seen} at the upstream");
        assert!(
            seen <= max,
            "{seen} requests at the upstream at once, bound {max}"
        );
        assert!(
            refused > 0,
            "{burst_size} requests at once under a bound of {max}: none refused"
        );
        assert!(
            ok as u64 >= max / 2,
            "only {ok} forwarded under a bound of {max}"
        );
        // Every grant came back: the whole bound is usable again (one request at a time
        // from this client would pass anyway, so ask for max at once, minus the spare
        // grants a worker may keep, which are in the bound too).
        let (again, _) = burst(server.addr, "/inflight?hold=0.5", 2);
        assert_eq!(again, [200, 200], "grants leaked");
    }
}

/// A worker killed while it holds grants gives them back through the broker's
/// revocation: afterwards the whole bound is usable again.
#[test]
fn a_killed_workers_grants_come_back() {
    if !gunicorn_present() {
        return;
    }
    let tree = Tree::new("proxy-revoke");
    let up = upstream::gunicorn(&tree, None);
    let server = Server::start(
        &tree,
        1,
        &[
            &["--proxy", &route("/", &up, ""), "--proxy-max-inflight", "2"][..],
            FAST,
        ]
        .concat(),
        &[],
    );
    let (status, _) = server.wait_ready(1, Duration::from_secs(20));
    let victim = worker_pids(&status)[0];
    let addr = server.addr;
    let held: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || curl(addr, "/inflight?hold=30", &[]).status))
        .collect();
    let upstream = up.addr.expect("tcp");
    wait_until(
        Duration::from_secs(10),
        "both requests at the upstream",
        || (curl(upstream, "/inflight-now", &[]).body == b"2").then_some(()),
    );
    assert_eq!(
        curl(addr, "/slow?secs=0", &[]).status,
        503,
        "a third request went upstream"
    );
    assert_eq!(server.status()["broker"]["proxy_grants"], 2);
    signal_pid(victim, Sig::KILL);
    for h in held {
        assert_ne!(
            h.join().expect("join"),
            200,
            "a request of the killed worker succeeded"
        );
    }
    let (_, took) = wait_until(Duration::from_secs(15), "the bound usable again", || {
        let (statuses, _) = burst(addr, "/inflight?hold=0.2", 2);
        (statuses == [200, 200]).then_some(())
    });
    eprintln!("both grants usable again {took:?} after the kill");
    wait_until(Duration::from_secs(5), "no grant held when idle", || {
        (server.status()["broker"]["proxy_grants"] == 0).then_some(())
    });
}

/// A WebSocket through the proxy: the `websockets` client (PyPI) talks to uvicorn's
/// WebSocket endpoint through servery, messages both ways over the joined connections.
#[test]
fn a_websocket_is_tunnelled_to_uvicorn() {
    if !python_imports(&["uvicorn", "websockets"]) {
        return;
    }
    let tree = Tree::new("proxy-ws");
    let up = upstream::uvicorn(&tree);
    let server = Server::start(
        &tree,
        2,
        &[
            "--proxy",
            &route("/ws", &up, ""),
            "--proxy-max-inflight",
            "4",
        ],
        &[],
    );
    let script = format!(
        "from websockets.sync.client import connect\n\
         with connect('ws://{}/ws/chat', open_timeout=10) as ws:\n\
         \x20   for word in ['one', 'two', 'x' * 100000]:\n\
         \x20       ws.send(word)\n\
         \x20       print(ws.recv(timeout=10)[:12])\n",
        server.addr
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(printed, "echo:one\necho:two\necho:xxxxxxx\n");
}

/// An upstream whose accept queue is full takes no new connection (the kernel drops the
/// SYNs): the connect timeout answers 504 and says so.
#[test]
fn a_connect_that_does_not_finish_is_504() {
    let port = free_port();
    let mut listener = std::process::Command::new("python3")
        .args([
            "-c",
            &format!(
                "import socket, sys, time\n\
                 s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(0)\n\
                 print('listening', flush=True); time.sleep(120)"
            ),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(listener.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("the listener's line");
    assert_eq!(line.trim(), "listening");
    // Fill the accept queue (a backlog of 0 holds one), until a connect no longer finishes.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut held = Vec::new();
    let (_, _) = wait_until(Duration::from_secs(10), "a full accept queue", || {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(stream) => {
                held.push(stream);
                None
            }
            Err(_) => Some(()),
        }
    });
    let tree = Tree::new("proxy-connect");
    let server = Server::start(
        &tree,
        1,
        &[
            "--proxy",
            &format!("/q=http://{addr}"),
            "--proxy-connect-timeout",
            "0.5",
        ],
        &[],
    );
    let started = Instant::now();
    let answer = curl(server.addr, "/q/x", &[]);
    let took = started.elapsed();
    let _ = listener.kill();
    let _ = listener.wait();
    assert_eq!(
        answer.status,
        504,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let text = String::from_utf8_lossy(&answer.body);
    assert!(
        text.contains("connecting to the upstream timed out after 500ms"),
        "{text}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// An `https://` upstream (nginx with a certificate for `localhost`): verified against
/// `--proxy-ca`, and refused with 502 and the reason when the certificate is not trusted.
#[test]
fn an_https_upstream_is_verified() {
    if !tool_present("nginx", &["-v"]) || !tool_present("openssl", &["version"]) {
        return;
    }
    let tree = Tree::new("proxy-https");
    let (up, ca) = upstream::nginx_tls(&tree, &tree.root());
    let port = up.addr.expect("tcp").port();
    let url = format!("/s=https://localhost:{port}/");
    let trusted = Server::start(
        &tree,
        1,
        &["--proxy", &url, "--proxy-ca", &ca.display().to_string()],
        &[],
    );
    let got = curl(trusted.addr, "/s/hello.txt", &[]);
    assert_eq!((got.status, got.body.as_slice()), (200, HELLO));
    drop(trusted);
    let system_roots = Server::start(&tree, 1, &["--proxy", &url], &[]);
    let refused = curl(system_roots.addr, "/s/hello.txt", &[]);
    let text = String::from_utf8_lossy(&refused.body);
    assert_eq!(refused.status, 502, "{text}");
    assert!(text.contains("certificate"), "{text}");
}

/// An upstream that sends its head and part of its body, more of it 0.7 s later, and then
/// nothing: with `--proxy-idle-timeout 1` the response is cut off a second after the
/// last piece (the idle timer counts from the last frame, not from the head), and said so
/// in the log.
#[test]
fn an_upstream_silent_in_its_body_is_cut_off_after_the_idle_timeout() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let up = listener.local_addr().expect("addr");
    // The upstream holds its connection open (silent) until the test ends.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
            std::thread::sleep(Duration::from_millis(700));
            let _ = stream.write_all(b"abcdefghij");
            held.push(stream);
        }
    });
    let tree = Tree::new("proxy-idle");
    let server = Server::start(
        &tree,
        1,
        &[
            "--proxy",
            &format!("/slow=http://{up}"),
            "--proxy-idle-timeout",
            "1",
        ],
        &[],
    );
    let mut client = std::net::TcpStream::connect(server.addr).expect("connect");
    client
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let started = Instant::now();
    client
        .write_all(b"GET /slow/x HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let ended = loop {
        match client.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&got);
    assert!(
        ended,
        "idle rule: the response was not cut off within 20 s: {text}"
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("0123456789abcdefghij"), "{text}");
    assert!(
        took >= Duration::from_millis(1600),
        "idle rule: cut off after {took:?}, before a second of silence after the last piece (0.7 s)"
    );
    wait_until(Duration::from_secs(5), "the cut-off in the log", || {
        server
            .stderr()
            .contains("upstream silent in its response body")
            .then_some(())
    });
}
