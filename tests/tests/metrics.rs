//! The admin listener (`--admin`) against the real binary: `promtool check metrics`
//! accepts `/metrics`; a real Prometheus server scrapes it and its HTTP API returns the
//! request count made; `/readyz` is 503 while starting and draining and 200 when ready;
//! the service's request counts survive `ctl recycle`; bad input gets 404/405/431; the
//! request-duration histogram counts each route class's requests (decision 0081).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use servery_tests::serde_json::{self, Value, json};
use servery_tests::{FAST, Server, Sig, Tree, free_port, http_get, promtool_check, wait_until};

/// Start servery with the admin listener on an ephemeral loopback port; returns the
/// server and the admin address (from its banner line).
fn start(tree: &Tree, workers: u32, env: &[(&str, &str)]) -> (Server, SocketAddr) {
    // A longer drain than FAST's, so a drain is long enough to be seen on a loaded machine.
    let mut args: Vec<&str> = FAST.to_vec();
    if let Some(i) = args.iter().position(|a| *a == "--drain-timeout") {
        args[i + 1] = "10";
    }
    args.extend(["--admin", "127.0.0.1:0"]);
    let mut server = Server::start(tree, workers, &args, env);
    let addr = server.admin_addr(Duration::from_secs(10));
    (server, addr)
}

fn metrics(admin: SocketAddr) -> String {
    let (status, body) = http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200);
    String::from_utf8(body).expect("metrics are text")
}

/// The value of the sample `series` (name and labels exactly as written), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn gets(text: &str, class: &str) -> f64 {
    sample(
        text,
        &format!("servery_http_requests_total{{method=\"GET\",code=\"{class}\"}}"),
    )
    .unwrap_or(0.0)
}

/// The duration histogram's count for one route class.
fn duration_count(text: &str, class: &str) -> f64 {
    sample(
        text,
        &format!("servery_http_request_duration_seconds_count{{class=\"{class}\"}}"),
    )
    .unwrap_or_else(|| panic!("no duration count for class {class} in\n{text}"))
}

/// The duration histogram's count over every class (`sum without (class)`).
fn durations_counted(text: &str) -> f64 {
    ROUTE_CLASSES.iter().map(|c| duration_count(text, c)).sum()
}

/// The `class` label's values, as docs/operations.md lists them.
const ROUTE_CLASSES: [&str; 9] = [
    "static", "listing", "webdav", "upload", "app", "proxy", "cgi", "refused", "other",
];

fn status_of(addr: SocketAddr, path: &str) -> u16 {
    http_get(addr, path).map_or(0, |(status, _)| status)
}

/// Wait until `/metrics` counts exactly `ok` GETs answered 2xx (heartbeats bring them).
fn wait_for_gets(admin: SocketAddr, ok: u64) -> String {
    wait_until(
        Duration::from_secs(10),
        &format!("{ok} GETs counted"),
        || {
            let text = metrics(admin);
            (gets(&text, "2xx") == ok as f64).then_some(text)
        },
    )
    .0
}

#[test]
fn promtool_accepts_the_metrics_and_they_count_the_requests_made() {
    let tree = Tree::new("metrics-promtool");
    let (server, admin) = start(&tree, 2, &[]);
    server.wait_ready(2, Duration::from_secs(20));
    for _ in 0..7 {
        assert_eq!(status_of(server.addr, "/hello.txt"), 200);
    }
    for _ in 0..3 {
        assert_eq!(status_of(server.addr, "/missing"), 404);
    }
    wait_for_gets(admin, 7);
    let text = wait_until(Duration::from_secs(10), "3 GETs answered 4xx", || {
        let t = metrics(admin);
        (gets(&t, "4xx") == 3.0).then_some(t)
    })
    .0;
    assert_eq!(durations_counted(&text), 10.0, "{text}");
    assert_eq!(duration_count(&text, "static"), 10.0, "{text}");
    assert_eq!(sample(&text, "servery_workers{state=\"ready\"}"), Some(2.0));
    assert_eq!(sample(&text, "servery_generation"), Some(1.0));
    process_series_are_plausible(&text, server.pid);

    let verdict = promtool_check(&text).expect("promtool is needed (apt-get install prometheus)");
    if let Err(said) = verdict {
        panic!("promtool refused the metrics:\n{said}\n{text}");
    }
}

/// The parent's `process_*` series and the workers' sums (decision 0054) hold values a
/// two-worker servery started moments ago can have, and the build is named.
fn process_series_are_plausible(text: &str, parent: u32) {
    let value =
        |series: &str| sample(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs_f64();
    let started = value("process_start_time_seconds");
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "start time {started} is not within the last hour of {now}"
    );
    let fds = value("process_open_fds");
    let own_fds = std::fs::read_dir(format!("/proc/{parent}/fd"))
        .map(|d| d.count() as f64)
        .expect("the parent's descriptors");
    assert!(
        fds > 3.0 && (fds - own_fds).abs() < 32.0,
        "open fds {fds}, /proc says {own_fds}"
    );
    let max_fds = value("process_max_fds");
    assert!(max_fds >= fds && max_fds >= 1024.0, "max fds {max_fds}");
    let rss = value("process_resident_memory_bytes");
    assert!(rss > 1e6 && rss < 4e9, "parent RSS {rss}");
    // The parent may well have used less than one tick (10 ms) of CPU by now.
    let cpu = value("process_cpu_seconds_total");
    let cpus = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
    assert!(
        cpu >= 0.0 && cpu <= (now - started + 1.0) * cpus,
        "parent CPU {cpu}"
    );
    // Two workers: each holds more than a megabyte and a few descriptors.
    assert!(
        value("servery_worker_resident_memory_bytes") > 2e6,
        "{text}"
    );
    assert!(value("servery_worker_open_fds") >= 6.0, "{text}");
    // Like the parent's, less than one tick (10 ms) is possible: a file worker's start-up
    // encodes nothing any more (decision 0124).
    assert!(value("servery_worker_cpu_seconds_total") >= 0.0, "{text}");
    let info = text
        .lines()
        .find(|l| l.starts_with("servery_build_info{"))
        .unwrap_or_else(|| panic!("no servery_build_info in\n{text}"));
    assert!(
        info.contains("version=\"")
            && info.contains("commit=\"")
            && info.contains("features=\"")
            && info.contains("python")
            && info.ends_with(" 1"),
        "{info}"
    );
}

/// A Prometheus server on loopback, killed and its data removed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn scraping(tree: &Tree, target: SocketAddr) -> Prometheus {
        let dir = tree.dir.join("prometheus");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: servery\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("write the config");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus is needed (apt-get install prometheus)");
        Prometheus { child, addr }
    }

    fn api(&self, path: &str) -> Option<Value> {
        let (status, body) = http_get(self.addr, path).ok()?;
        (status == 200).then(|| serde_json::from_slice(&body).ok())?
    }
}

#[test]
fn a_prometheus_server_scrapes_the_admin_listener_and_counts_the_requests() {
    let tree = Tree::new("metrics-prometheus");
    let (server, admin) = start(&tree, 2, &[]);
    server.wait_ready(2, Duration::from_secs(20));
    for _ in 0..5 {
        assert_eq!(status_of(server.addr, "/hello.txt"), 200);
    }
    wait_for_gets(admin, 5);
    let prometheus = Prometheus::scraping(&tree, admin);
    wait_until(
        Duration::from_secs(30),
        "Prometheus sees the target up",
        || {
            let targets = prometheus.api("/api/v1/targets")?;
            let active = targets["data"]["activeTargets"].as_array()?.clone();
            active.iter().any(|t| t["health"] == "up").then_some(())
        },
    );
    // `servery_http_requests_total{method="GET",code="2xx"}`, URL-encoded.
    let query = "/api/v1/query?query=servery_http_requests_total%7Bmethod%3D%22GET%22%2Ccode%3D%222xx%22%7D";
    let (value, _) = wait_until(Duration::from_secs(20), "the counter in Prometheus", || {
        let answer = prometheus.api(query)?;
        let result = answer["data"]["result"].as_array()?.first()?.clone();
        result["value"][1].as_str()?.parse::<f64>().ok()
    });
    assert_eq!(value, 5.0, "Prometheus's value of the GET counter");
}

#[test]
fn readyz_is_503_while_starting_and_draining_and_200_when_ready() {
    let tree = Tree::new("metrics-readyz");
    // One worker slow to prepare, the other deaf to the drain: both service states last
    // long enough to be seen (a worker takes the first rule that matches it, so the two
    // faults go to two workers).
    // The slow boot outlasts the first requests on a loaded machine, inside FAST's 10 s
    // start timeout.
    let fault = "slot=0 slow-boot=6000\nslot=1 wedged-drain";
    let (server, admin) = start(&tree, 2, &[("SERVERY_TEST_FAULT", fault)]);
    assert_eq!(status_of(admin, "/livez"), 200, "alive while starting");
    let starting = status_of(admin, "/readyz");
    let state = server.status()["state"].clone();
    assert!(
        state != "starting" || starting == 503,
        "readyz {starting} while {state}"
    );
    assert_eq!(starting, 503, "not ready before the first commit ({state})");
    wait_until(Duration::from_secs(40), "readyz 200", || {
        (status_of(admin, "/readyz") == 200).then_some(())
    });
    assert_eq!(server.status()["state"], "ready");
    server.signal(Sig::TERM);
    let (body, _) = wait_until(Duration::from_secs(5), "readyz 503 while draining", || {
        let (status, body) = http_get(admin, "/readyz").ok()?;
        (status == 503).then_some(body)
    });
    assert_eq!(String::from_utf8_lossy(&body), "not ready: draining\n");
    assert_eq!(status_of(admin, "/livez"), 200, "alive while draining");
}

#[test]
fn request_counts_survive_a_recycle() {
    let tree = Tree::new("metrics-recycle");
    let (server, admin) = start(&tree, 2, &[]);
    let (before, _) = server.wait_ready(2, Duration::from_secs(20));
    for _ in 0..12 {
        assert_eq!(status_of(server.addr, "/hello.txt"), 200);
    }
    wait_for_gets(admin, 12);
    server
        .ctl(&json!({"cmd": "recycle"}))
        .expect("recycle accepted");
    let old = servery_tests::worker_ids(&before);
    wait_until(Duration::from_secs(30), "every worker replaced", || {
        let (s, _) = server.wait_ready(2, Duration::from_secs(30));
        let now = servery_tests::worker_ids(&s);
        now.iter().all(|id| !old.contains(id)).then_some(())
    });
    let text = wait_until(Duration::from_secs(10), "both recycles counted", || {
        let t = metrics(admin);
        (sample(&t, "servery_recycles_total{reason=\"recycle_manual\"}") == Some(2.0)).then_some(t)
    })
    .0;
    assert_eq!(
        gets(&text, "2xx"),
        12.0,
        "counts of recycled workers kept:\n{text}"
    );
    for _ in 0..3 {
        assert_eq!(status_of(server.addr, "/hello.txt"), 200);
    }
    wait_for_gets(admin, 15);
}

/// Send `request` raw on a new connection; the status code of the answer.
fn raw_status(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // The peer may answer and close before it has read everything (431).
    let _ = s.write_all(request);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let head = String::from_utf8_lossy(&raw).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head)
}

#[test]
fn bad_input_on_the_admin_listener_is_refused_and_files_are_still_served() {
    let tree = Tree::new("metrics-bad");
    let (server, admin) = start(&tree, 1, &[]);
    server.wait_ready(1, Duration::from_secs(20));
    assert_eq!(status_of(admin, "/"), 404);
    assert_eq!(
        status_of(admin, "/hello.txt"),
        404,
        "no files on the admin listener"
    );
    assert_eq!(status_of(admin, "/metrics/x"), 404);
    let (status, head) = raw_status(
        admin,
        b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 405, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("allow: get, head"),
        "{head}"
    );
    let (status, _) = raw_status(
        admin,
        b"DELETE /readyz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 405);
    let big = format!(
        "GET /livez HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let (status, head) = raw_status(admin, big.as_bytes());
    assert_eq!(status, 431, "{head}");
    assert_eq!(status_of(admin, "/livez"), 200, "the listener serves on");
    assert_eq!(status_of(server.addr, "/hello.txt"), 200);
}

/// Readiness tells capacity: a crashed worker waiting out a long backoff leaves the
/// service `degraded` (still taking traffic: one worker serves), with the ready-workers
/// gauge at 1; `/readyz` says so, and 200 again once the slot is filled. A minimum above
/// `--workers` is a configuration error naming the field.
#[test]
fn readiness_reports_capacity_and_a_crash_degrades_it() {
    let tree = Tree::new("readiness");
    let (server, admin) = start(&tree, 2, &[("SERVERY_RESTART_BACKOFF_INITIAL", "4")]);
    let (status, _) = server.wait_ready(2, Duration::from_secs(30));
    assert_eq!(status["readiness"], "ready", "{status}");
    assert_eq!(
        status["capacity"],
        json!({"ready_workers": 2, "workers": 2, "min_ready_workers": 1})
    );
    let victim = servery_tests::worker_pids(&status)[0];
    servery_tests::signal_pid(victim, Sig::KILL);
    let (body, _) = wait_until(Duration::from_secs(10), "a degraded /readyz", || {
        let (code, body) = http_get(admin, "/readyz").ok()?;
        let body = String::from_utf8_lossy(&body).into_owned();
        (code == 200 && body.starts_with("degraded")).then_some(body)
    });
    assert_eq!(body, "degraded: 1 of 2 workers ready\n");
    assert_eq!(server.status()["readiness"], "degraded");
    let text = metrics(admin);
    assert_eq!(sample(&text, "servery_ready_workers"), Some(1.0), "{text}");
    assert_eq!(
        sample(&text, "servery_readiness{readiness=\"degraded\"}"),
        Some(1.0)
    );
    wait_until(Duration::from_secs(30), "the slot filled again", || {
        http_get(admin, "/readyz")
            .ok()
            .filter(|(code, body)| *code == 200 && body == b"ready\n")
    });

    let done = servery_tests::run_servery(
        &[
            "--check-config",
            "--workers",
            "2",
            "--min-ready-workers",
            "3",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("recovery.min_ready_workers")
            && done.stderr.contains("at most `workers`"),
        "{}",
        done.stderr
    );
}

/// `servery_connections_open` and `ctl status` show the connections the workers hold:
/// twelve keep-alive clients are twelve open connections, summed over two workers, and
/// none once they hang up.
#[test]
fn open_connections_and_requests_in_progress_are_shown_while_clients_hold_them() {
    let tree = Tree::new("metrics-connections");
    std::fs::write(tree.root().join("a.txt"), b"hello").expect("a file");
    // Larger than the socket buffers can hold, so a client that stops reading holds it.
    std::fs::File::create(tree.root().join("big.bin"))
        .and_then(|f| f.set_len(64 << 20))
        .expect("a large file");
    let (mut server, admin) = start(&tree, 2, &[]);
    server.wait_ready(2, Duration::from_secs(20));
    let open = |admin| sample(&metrics(admin), "servery_connections_open");
    assert_eq!(open(admin), Some(0.0), "no client yet");

    let clients: Vec<TcpStream> = (0..12)
        .map(|_| {
            let mut c = TcpStream::connect(server.addr).expect("connect");
            c.write_all(b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .expect("request");
            let mut head = [0u8; 12];
            c.read_exact(&mut head).expect("a response");
            assert_eq!(&head, b"HTTP/1.1 200");
            c
        })
        .collect();
    wait_until(Duration::from_secs(10), "12 connections shown", || {
        (open(admin) == Some(12.0)).then_some(())
    });
    let status = server.status();
    let per_worker: u64 = status["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["connections"].as_u64().expect("connections per worker"))
        .sum();
    assert_eq!(per_worker, 12, "ctl status: {status}");
    let in_progress = |admin| sample(&metrics(admin), "servery_requests_in_progress");
    assert_eq!(
        in_progress(admin),
        Some(0.0),
        "answered keep-alive connections have no request in progress"
    );

    // Downloads whose clients take the head and then stop reading: each response stays
    // in progress (its body waits on the client) while its connection is held.
    let stalled: Vec<TcpStream> = (0..5)
        .map(|_| {
            let mut c = TcpStream::connect(server.addr).expect("connect");
            c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .expect("request");
            let mut head = [0u8; 12];
            c.read_exact(&mut head).expect("a response");
            assert_eq!(&head, b"HTTP/1.1 200");
            c
        })
        .collect();
    wait_until(
        Duration::from_secs(10),
        "5 requests in progress shown",
        || (in_progress(admin) == Some(5.0) && open(admin) == Some(17.0)).then_some(()),
    );
    let status = server.status();
    let per_worker: u64 = status["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["requests_in_progress"].as_u64().expect("per worker"))
        .sum();
    assert_eq!(per_worker, 5, "ctl status: {status}");

    drop(stalled);
    drop(clients);
    wait_until(Duration::from_secs(10), "the connections gone", || {
        (open(admin) == Some(0.0) && in_progress(admin) == Some(0.0)).then_some(())
    });
    server.signal(Sig::TERM);
    server.wait_exit(Duration::from_secs(20));
}

/// Requests of five route classes against the real binary (files, a directory page,
/// PROPFIND, PUT, a head hyper refuses and a host not answered for): `/metrics` counts each class's durations as
/// they were sent, the classes add up to the requests counted by method and status, a
/// class nothing asked for is written at zero, and promtool accepts the labelled
/// histogram.
#[test]
fn request_durations_are_counted_by_route_class() {
    let tree = Tree::new("metrics-classes");
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend([
        "--admin",
        "127.0.0.1:0",
        "--dav",
        "--upload",
        "--allow-overwrite",
    ]);
    let mut server = Server::start(&tree, 2, &args, &[]);
    let admin = server.admin_addr(Duration::from_secs(10));
    server.wait_ready(2, Duration::from_secs(20));
    let addr = server.addr;
    let expected = [
        ("static", 5.0),
        ("listing", 2.0),
        ("webdav", 3.0),
        ("upload", 2.0),
        ("refused", 2.0),
    ];
    for _ in 0..4 {
        assert_eq!(status_of(addr, "/hello.txt"), 200);
    }
    assert_eq!(
        status_of(addr, "/missing.txt"),
        404,
        "a missing file is static"
    );
    for _ in 0..2 {
        assert_eq!(status_of(addr, "/sub/"), 200, "a directory page");
    }
    let close = "Host: localhost\r\nConnection: close\r\n";
    for _ in 0..3 {
        let propfind =
            format!("PROPFIND / HTTP/1.1\r\n{close}Depth: 1\r\nContent-Length: 0\r\n\r\n");
        let (status, head) = raw_status(addr, propfind.as_bytes());
        assert_eq!(status, 207, "{head}");
    }
    for i in 0..2 {
        let put = format!("PUT /up-{i}.txt HTTP/1.1\r\n{close}Content-Length: 5\r\n\r\nhello");
        let (status, head) = raw_status(addr, put.as_bytes());
        assert!(status == 201 || status == 204, "{head}");
    }
    let (status, head) = raw_status(addr, b"GARBAGE\r\n\r\n");
    assert_eq!(status, 400, "{head}");
    let elsewhere = b"GET /hello.txt HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n";
    let (status, head) = raw_status(addr, elsewhere);
    assert_eq!(
        status, 421,
        "a host this server does not answer for: {head}"
    );

    let sent: f64 = expected.iter().map(|(_, n)| n).sum();
    let text = wait_until(
        Duration::from_secs(10),
        &format!("{sent} request durations counted"),
        || {
            let t = metrics(admin);
            (durations_counted(&t) == sent).then_some(t)
        },
    )
    .0;
    for class in ROUTE_CLASSES {
        let want = expected
            .iter()
            .find(|(c, _)| *c == class)
            .map_or(0.0, |(_, n)| *n);
        assert_eq!(duration_count(&text, class), want, "class {class}:\n{text}");
        // prometheus-client writes `le` first.
        let inf = format!(
            "servery_http_request_duration_seconds_bucket{{le=\"+Inf\",class=\"{class}\"}}"
        );
        assert_eq!(sample(&text, &inf), Some(want), "{inf} in\n{text}");
    }
    let answered: f64 = text
        .lines()
        .filter(|l| l.starts_with("servery_http_requests_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(
        answered, sent,
        "the classes add up to the requests answered"
    );
    let verdict = promtool_check(&text).expect("promtool is needed (apt-get install prometheus)");
    if let Err(said) = verdict {
        panic!("promtool refused the metrics:\n{said}\n{text}");
    }
}
