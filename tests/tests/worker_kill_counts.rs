//! What a worker killed with `kill -9` had counted is not lost (issue 38: "a crashed
//! worker's last counts are not lost", today 40 → 0), and every access-log line it held
//! is written or counted lost (issue 34): the parent reads the worker's scoreboard, memory
//! it shares with the worker, once the worker is gone (decision 0083).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use servery_tests::{HELLO, Server, Sig, Tree, http_get, wait_until};

/// Heartbeats too rare to bring anything during the test: only the scoreboard can.
const RARE_BEATS: &[&str] = &[
    "--heartbeat-interval",
    "60",
    "--heartbeat-timeout",
    "120",
    "--restart-backoff-initial",
    "0.1",
    "--drain-timeout",
    "2",
    "--force-timeout",
    "0.5",
    "--worker-start-timeout",
    "10",
];

fn metrics(admin: SocketAddr) -> String {
    let (status, body) = http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200);
    String::from_utf8(body).expect("metrics are text")
}

/// The value of the sample `series` (name and labels exactly as written), 0 if absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// One request on its own connection; its status, or `None` when no whole response came
/// (a 200 for `/hello.txt` is whole with its body).
fn request(addr: SocketAddr, raw: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(raw).ok()?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer);
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let hello = raw.starts_with(b"GET /hello.txt ");
    (status != 200 || !hello || answer.ends_with(HELLO)).then_some(status)
}

fn get(addr: SocketAddr, path: &str) -> Option<u16> {
    request(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

/// The only worker's pid, once exactly one is ready (every other reaped) and it is not
/// `not`.
fn one_worker_other_than(server: &Server, not: Option<u32>) -> u32 {
    wait_until(Duration::from_secs(30), "one ready worker", || {
        let (status, _) = server.wait_ready(1, Duration::from_secs(30));
        server.note_pids(&status);
        let pids = servery_tests::worker_pids(&status);
        (Some(pids[0]) != not).then(|| pids[0])
    })
    .0
}

#[test]
fn a_killed_workers_counts_since_its_last_heartbeat_are_not_lost() {
    let tree = Tree::new("kill-counts");
    let log = tree.root().with_file_name("access.log");
    let log_arg = log.to_str().expect("utf-8").to_owned();
    let mut args = RARE_BEATS.to_vec();
    args.extend(["--admin", "127.0.0.1:0", "--access-log", &log_arg]);
    let mut server = Server::start(&tree, 1, &args, &[]);
    let admin = server.admin_addr(Duration::from_secs(10));
    let victim = one_worker_other_than(&server, None);

    // 40 requests, as the issue counted: 30 files, 5 directory pages, 5 refused heads.
    for _ in 0..30 {
        assert_eq!(get(server.addr, "/hello.txt"), Some(200));
    }
    for _ in 0..5 {
        assert_eq!(get(server.addr, "/sub/"), Some(200));
    }
    for _ in 0..5 {
        assert_eq!(request(server.addr, b"GARBAGE\r\n\r\n"), Some(400));
    }
    let before = metrics(admin);
    servery_tests::signal_pid(victim, Sig::KILL);
    one_worker_other_than(&server, Some(victim));

    let text = wait_until(Duration::from_secs(10), "the killed worker reaped", || {
        let t = metrics(admin);
        (sample(&t, "servery_worker_exits_total{reason=\"unexpected_exit\"}") >= 1.0).then_some(t)
    })
    .0;
    let counted = |t: &str, series: &str| sample(t, series);
    let get_2xx = "servery_http_requests_total{method=\"GET\",code=\"2xx\"}";
    let other_4xx = "servery_http_requests_total{method=\"other\",code=\"4xx\"}";
    let class = |c: &str| format!("servery_http_request_duration_seconds_count{{class=\"{c}\"}}");
    assert_eq!(
        counted(&before, get_2xx),
        0.0,
        "no heartbeat brought them before the kill (the test's premise):\n{before}"
    );
    assert_eq!(
        (
            counted(&text, get_2xx),
            counted(&text, other_4xx),
            counted(&text, &class("static")),
            counted(&text, &class("listing")),
            counted(&text, &class("refused")),
        ),
        (35.0, 5.0, 30.0, 5.0, 5.0),
        "the killed worker's last counts (40 requests) are in /metrics:\n{text}"
    );
    assert_eq!(
        counted(&text, "servery_worker_exit_requests_recovered_total"),
        40.0,
        "{text}"
    );
    // Its access-log lines: written, or counted lost with it (a worker sends its lines
    // every 100 ms: those of the last requests are still in its buffer when it dies).
    let status = server.status();
    let written = status["access_log"]["written"].as_u64().unwrap_or(0);
    let lost = status["access_log"]["lost_with_workers"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(written + lost, 40, "{}", status["access_log"]);
    server.signal(Sig::TERM);
    server.wait_exit(Duration::from_secs(30));
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Requests made by one client thread while the test kills workers, counted by outcome.
#[derive(Default)]
struct Tally {
    answered: AtomicU64,
    failed: AtomicU64,
}

#[test]
fn under_a_kill_campaign_every_response_is_a_line_written_or_counted_lost() {
    let tree = Tree::new("kill-campaign");
    let log = tree.root().with_file_name("access.log");
    let log_arg = log.to_str().expect("utf-8").to_owned();
    let mut args = servery_tests::FAST.to_vec();
    args.extend(["--access-log", &log_arg, "--worker-restart-limit", "1000"]);
    let server = Server::start(&tree, 3, &args, &[]);
    let (status, _) = server.wait_ready(3, Duration::from_secs(30));
    server.note_pids(&status);
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, tally, addr) = (Arc::clone(&stop), Arc::clone(&tally), server.addr);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let counter = match get(addr, "/hello.txt") {
                        Some(200) => &tally.answered,
                        _ => &tally.failed,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut kills = 0;
    let mut killed = Vec::new();
    while kills < 12 {
        let (status, _) = server.wait_ready(3, Duration::from_secs(30));
        server.note_pids(&status);
        let pids = servery_tests::worker_pids(&status);
        let Some(&victim) = pids.iter().find(|p| !killed.contains(*p)) else {
            continue;
        };
        // Requests in flight and lines unsent when it dies: it has been serving.
        let seen = tally.answered.load(Ordering::Relaxed);
        wait_until(Duration::from_secs(10), "requests answered", || {
            (tally.answered.load(Ordering::Relaxed) >= seen + 50).then_some(())
        });
        servery_tests::signal_pid(victim, Sig::KILL);
        killed.push(victim);
        kills += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client");
    }
    // Every killed worker reaped (a reaped worker leaves the list; its final counts were
    // taken just before). Three ready workers alone do not say it: the last victim is
    // listed as ready until the parent notices its death, and its lost lines would be
    // counted after the look below.
    wait_until(
        Duration::from_secs(30),
        "every killed worker reaped, 3 ready",
        || {
            let (status, _) = server.wait_ready(3, Duration::from_secs(30));
            let pids = servery_tests::worker_pids(&status);
            pids.iter().all(|p| !killed.contains(p)).then_some(())
        },
    );
    // A graceful stop: the live workers send what they hold, the parent writes it all.
    let counts = server.status()["access_log"].clone();
    server.signal(Sig::TERM);
    let mut server = server;
    server.wait_exit(Duration::from_secs(30));
    let written = lines(&log).len() as u64;
    // The status of a stopped server is gone: the lost count only grows, and no worker
    // was killed after this look.
    let lost = counts["lost_with_workers"].as_u64().unwrap_or(0);
    let answered = tally.answered.load(Ordering::Relaxed);
    let failed = tally.failed.load(Ordering::Relaxed);
    eprintln!(
        "{kills} kills: {answered} answered, {failed} failed, {written} lines written, {lost} counted lost"
    );
    // Every response the client received has its line written or counted lost. A line
    // is made before its response is handed to the connection, so the only lines beyond
    // the responses are of requests whose response died with the worker: the client saw
    // them fail.
    assert!(
        written + lost >= answered,
        "{} responses have neither a line nor a count ({answered} answered, {written} written, {lost} lost)",
        answered - written - lost
    );
    assert!(
        written + lost <= answered + failed,
        "more lines than requests ({answered} answered, {failed} failed, {written} written, {lost} lost)"
    );
}
