//! `--proxy-balance` (decision 0100) on the real binary with one worker (the counts in
//! flight are each worker's): while a request is held on one of two upstreams,
//! `least-inflight` sends every other request to the idle one, and `round-robin` (the
//! default) keeps taking each in turn, busy or not.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use servery_tests::upstream::tool_present;
use servery_tests::*;

/// A threaded Python HTTP server naming itself: `/slow` touches `holding` in its
/// directory and answers after five seconds; anything else answers its name at once.
const NAMED: &str = r#"
import http.server, os, sys, time
name, port, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/slow"):
            open(marker, "w").close()
            time.sleep(5)
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

fn named(dir: &Path, name: &str, port: u16) -> Named {
    let child = Command::new("python3")
        .args(["-c", NAMED, name, &port.to_string()])
        .arg(dir.join(format!("holding-{name}")))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start python3");
    wait_until(Duration::from_secs(20), "the upstream to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    Named(child)
}

/// With a request held on `a`: who answers six more, one after the other.
fn answers_while_a_is_busy(policy: Option<&str>) -> Vec<String> {
    let tree = Tree::new(&format!("proxy-balance-{}", policy.unwrap_or("default")));
    let (port_a, port_b) = (free_port(), free_port());
    let _a = named(&tree.dir, "a", port_a);
    let _b = named(&tree.dir, "b", port_b);
    let route_a = format!("/up=http://127.0.0.1:{port_a}/");
    let route_b = format!("/up=http://127.0.0.1:{port_b}/");
    let mut args = vec!["--proxy", &route_a, "--proxy", &route_b];
    if let Some(policy) = policy {
        args.extend(["--proxy-balance", policy]);
    }
    let server = Server::start(&tree, 1, &args, &[]);
    // The first request of the worker goes to `a` under either policy (the turn starts
    // there, and nothing is in flight).
    let addr = server.addr;
    let held = std::thread::spawn(move || http_get(addr, "/up/slow"));
    wait_until(
        Duration::from_secs(10),
        "a to hold the slow request",
        || tree.dir.join("holding-a").exists().then_some(()),
    );
    let answers = (0..6)
        .map(|_| match http_get(server.addr, "/up/who") {
            Ok((200, body)) => String::from_utf8_lossy(&body).into_owned(),
            other => panic!("a request failed with both upstreams up: {other:?}"),
        })
        .collect();
    let slow = held.join().expect("the slow request");
    assert_eq!(
        slow,
        Ok((200, b"a".to_vec())),
        "the held request was answered by a"
    );
    answers
}

#[test]
fn least_inflight_sends_to_the_idle_upstream() {
    if !tool_present("python3", &["--version"]) {
        return;
    }
    let answers = answers_while_a_is_busy(Some("least-inflight"));
    assert!(
        answers.iter().all(|w| w == "b"),
        "least in flight: with a request held on a, every other request goes to b: {answers:?}"
    );
}

#[test]
fn round_robin_is_the_default_and_takes_each_in_turn() {
    if !tool_present("python3", &["--version"]) {
        return;
    }
    let answers = answers_while_a_is_busy(None);
    assert_eq!(
        answers,
        ["b", "a", "b", "a", "b", "a"],
        "round robin (the default) takes each in turn, busy or not"
    );
}

#[test]
fn an_unknown_policy_is_refused_naming_the_flag() {
    let out = Command::new(servery_bin())
        .args([
            "--port",
            "0",
            "--proxy",
            "/up=http://127.0.0.1:9",
            "--proxy-balance",
            "random",
        ])
        .output()
        .expect("run servery");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--proxy-balance: must be `round-robin` or `least-inflight`, got `random`"),
        "{err}"
    );
}
