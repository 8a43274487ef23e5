//! A reload that changes the reverse proxy's upstreams (decision 0108), on the real binary
//! with two workers and a `--config` file: routes to upstream `a`, a small bounded load
//! running, the file changed to route to `b` and reloaded. No request fails during the
//! reload, and every request begun after the reload's commit is answered by `b`. A reload
//! whose route is broken is refused naming the field, and the routes in force keep
//! serving.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use servery_tests::serde_json::json;
use servery_tests::upstream::tool_present;
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(20);

/// A threaded Python HTTP server that answers every GET with its name.
const NAMED: &str = r#"
import http.server, sys
name, port = sys.argv[1], int(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = name.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

struct Named(Child);

impl Drop for Named {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn named(name: &str, port: u16) -> Named {
    let child = Command::new("python3")
        .args(["-c", NAMED, name, &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start python3");
    wait_until(BOUND, "the upstream to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    Named(child)
}

fn write_routes(path: &Path, routes: &[String]) {
    let list: Vec<String> = routes.iter().map(|r| format!("\"{r}\"")).collect();
    std::fs::write(path, format!("proxy = [{}]\n", list.join(", "))).expect("write config");
}

/// Each request: when it was begun (by this process's clock and by the wall clock the
/// server's log lines are stamped with), and what answered it.
type Answers = Vec<(Instant, f64, Result<(u16, Vec<u8>), String>)>;

/// Seconds since the Unix epoch, now.
fn wall_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// The wall-clock second (since the epoch, to the microsecond) of a log line stamped
/// `2026-12-07T19:51:26.699074Z …`, taken from `now`'s day (the run is seconds long).
fn log_wall_seconds(line: &str, now: f64) -> Option<f64> {
    let time = line.split_whitespace().next()?.split_once('T')?.1;
    let mut parts = time.strip_suffix('Z')?.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    let of_day =
        h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?;
    let day = (now / 86_400.0).floor() * 86_400.0;
    // A line from just before midnight read just after it.
    Some(if day + of_day > now + 43_200.0 {
        day - 86_400.0 + of_day
    } else {
        day + of_day
    })
}

/// One client asking `/up/who` one request after another (each on a new connection)
/// until told to stop, at most 3,000 requests.
fn load(addr: std::net::SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Answers> {
    std::thread::spawn(move || {
        let mut answers = Vec::new();
        while !stop.load(Ordering::Relaxed) && answers.len() < 3000 {
            let begun = Instant::now();
            answers.push((begun, wall_seconds(), http_get(addr, "/up/who")));
        }
        answers
    })
}

#[test]
fn a_reload_moves_the_routes_to_the_new_upstream_without_a_failed_request() {
    if !tool_present("python3", &["--version"]) {
        return;
    }
    let tree = Tree::new("proxy-reload");
    let (port_a, port_b) = (free_port(), free_port());
    let _a = named("a", port_a);
    let _b = named("b", port_b);
    let path = tree.dir.join("routes.toml");
    write_routes(&path, &[format!("/up=http://127.0.0.1:{port_a}")]);
    let server = Server::start(&tree, 2, &["--config", path.to_str().expect("utf-8")], &[]);
    let (status, _) = server.wait_ready(2, BOUND);
    let old_workers = worker_ids(&status);
    assert_eq!(
        http_get(server.addr, "/up/who").expect("answered"),
        (200, b"a".to_vec())
    );

    let stop = Arc::new(AtomicBool::new(false));
    let client = load(server.addr, Arc::clone(&stop));
    // Some requests before the reload.
    std::thread::sleep(Duration::from_millis(300));
    write_routes(&path, &[format!("/up=http://127.0.0.1:{port_b}")]);
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    // The answer comes at the commit.
    let committed = Instant::now();
    assert_eq!(answer["generation"], 2, "{answer}");
    // Requests after the commit, while the old generation drains and after.
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::Relaxed);
    let answers = client.join().expect("the load");

    let failed: Vec<_> = answers
        .iter()
        .filter(|(_, _, r)| !matches!(r, Ok((200, _))))
        .collect();
    assert!(
        failed.is_empty(),
        "no request fails during a reload that changes the upstreams: {} of {} failed, first {:?}",
        failed.len(),
        answers.len(),
        failed.first()
    );
    let before = answers.iter().filter(|(t, _, _)| *t < committed).count();
    // The commit tells the old workers to drain; each stops accepting when it handles
    // that (its `draining` line), which a worker scheduled as a batch (decision 0129)
    // may do up to a scheduler tick after the answer reached this test. A connection
    // begun after the last of those lines can only reach a new worker.
    let now = wall_seconds();
    let log = server.stderr();
    let drained = old_workers
        .iter()
        .map(|id| {
            log.lines()
                .filter(|l| l.contains(" draining ") && l.contains(&format!("worker={id} ")))
                .find_map(|l| log_wall_seconds(l, now))
                .unwrap_or_else(|| panic!("no draining line of old worker {id}"))
        })
        .fold(f64::MIN, f64::max);
    let after: Vec<&[u8]> = answers
        .iter()
        .filter(|(t, wall, _)| *t >= committed && *wall > drained)
        .filter_map(|(_, _, r)| r.as_ref().ok().map(|(_, body)| body.as_slice()))
        .collect();
    assert!(
        before > 0 && after.len() > 10,
        "the load ran across the reload: {before} before, {} after",
        after.len()
    );
    let strays = after.iter().filter(|b| **b != b"b").count();
    assert_eq!(
        strays,
        0,
        "route rule: every request begun after the old workers stopped accepting reaches the new upstream; {strays} of {} did not",
        after.len()
    );
    let status = server.status();
    assert_eq!(
        status["config"]["proxy"]["routes"],
        json!([format!("/up=http://127.0.0.1:{port_b}")]),
        "{status}"
    );

    // A broken route: refused naming the field, the routes in force keep serving.
    write_routes(&path, &["/up=ftp://127.0.0.1:21".into()]);
    let err = server
        .ctl(&json!({"cmd": "reload"}))
        .expect_err("a broken route is refused");
    assert!(
        err.contains("proxy.routes"),
        "the error names the field: {err}"
    );
    assert!(err.contains("ftp://"), "the error names the route: {err}");
    let status = server.status();
    assert_eq!(status["generation"], 2, "{status}");
    assert_eq!(
        http_get(server.addr, "/up/who").expect("still serving"),
        (200, b"b".to_vec()),
        "the routes in force keep serving after a refused reload"
    );
}

/// A Python HTTP server that answers every GET after `delay` seconds.
const SLOW: &str = r#"
import http.server, sys, time
port, delay = int(sys.argv[1]), float(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(delay)
        body = b"late"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

#[test]
fn a_reload_changes_the_first_byte_timeout_and_the_new_generation_answers_504_at_the_new_bound() {
    if !tool_present("python3", &["--version"]) {
        return;
    }
    let tree = Tree::new("proxy-reload-timeout");
    let port = free_port();
    let child = Command::new("python3")
        .args(["-c", SLOW, &port.to_string(), "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start python3");
    let _slow = Named(child);
    wait_until(BOUND, "the upstream to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    let path = tree.dir.join("proxy.toml");
    let write = |first_byte: &str| {
        std::fs::write(
            &path,
            format!(
                "proxy = [\"/up=http://127.0.0.1:{port}\"]\nproxy_first_byte_timeout = {first_byte}\n"
            ),
        )
        .expect("write config");
    };
    write("10.0");
    let server = Server::start(&tree, 1, &["--config", path.to_str().expect("utf-8")], &[]);
    server.wait_ready(1, BOUND);
    // Under a 10 s bound the 3 s upstream answers.
    assert_eq!(
        http_get(server.addr, "/up/x").expect("answered"),
        (200, b"late".to_vec()),
        "under the started 10 s first-byte timeout the slow upstream answers"
    );

    write("0.5");
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    let status = server.status();
    assert_eq!(
        status["config"]["proxy"]["first_byte_timeout"], 0.5,
        "the committed configuration holds the new bound: {status}"
    );
    let begun = Instant::now();
    let (code, _) = http_get(server.addr, "/up/x").expect("answered");
    let took = begun.elapsed();
    assert_eq!(
        code, 504,
        "clients' settings rule: the new generation waits the new 0.5 s for the first byte, then 504"
    );
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(2500),
        "clients' settings rule: 504 at the new bound (0.5 s), not the old (10 s) nor the upstream's 3 s; took {took:?}"
    );

    // A bound no number of seconds: refused naming the field, the new bound stays.
    write("0");
    let err = server
        .ctl(&json!({"cmd": "reload"}))
        .expect_err("a zero timeout is refused");
    assert!(
        err.contains("proxy.first_byte_timeout"),
        "the error names the field: {err}"
    );
    assert_eq!(server.status()["generation"], 2);
}
