//! A reload that changes the reverse proxy's CA and trusted peers (decision 0118,
//! addendum), on the real binary with a `--config` file:
//!
//! - a reload that adds `proxy_ca` makes an `https://` upstream whose certificate that CA
//!   issued reachable (nginx with a certificate openssl made here), and the parent's
//!   probes, built again with the new CA, pass; a reload naming a CA file that does not
//!   parse, in the file or in an override of `ctl reload`, is refused naming `proxy.ca`,
//!   and the running generation keeps serving;
//! - a reload that changes `trust_proxy` changes whether a client's `X-Forwarded-For`
//!   reaches the upstream (a Python upstream that answers with the field it got).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use servery_tests::serde_json::{Value, json};
use servery_tests::upstream::{self, tool_present};
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(20);

/// Whether the parent's verdict on the committed generation's first route is "up".
fn first_upstream_up(server: &Server) -> Option<bool> {
    let status = server.status();
    status["proxy_upstreams"][0]["up"].as_bool()
}

fn wait_verdict(server: &Server, up: bool, what: &str) {
    wait_until(BOUND, what, || {
        (first_upstream_up(server) == Some(up)).then_some(())
    });
}

#[test]
fn a_reload_that_adds_a_ca_makes_an_https_upstream_reachable_and_its_probes_pass() {
    if !tool_present("nginx", &["-v"]) || !tool_present("openssl", &["version"]) {
        return;
    }
    let tree = Tree::new("proxy-reload-ca");
    let (up, ca) = upstream::nginx_tls(&tree, &tree.root());
    let port = up.addr.expect("tcp").port();
    let path = tree.dir.join("proxy.toml");
    let base = format!(
        "proxy = [\"/s=https://localhost:{port}/\"]\nproxy_health = \"/hello.txt\"\nproxy_health_interval = 0.2\n"
    );
    std::fs::write(&path, &base).expect("write config");
    let server = Server::start(&tree, 1, &["--config", path.to_str().expect("utf-8")], &[]);
    server.wait_ready(1, BOUND);

    // The system's roots do not know the test's CA: 502, and the probes fail.
    let refused = curl(server.addr, "/s/hello.txt", &[]);
    let text = String::from_utf8_lossy(&refused.body);
    assert_eq!(refused.status, 502, "{text}");
    assert!(text.contains("certificate"), "{text}");
    wait_verdict(
        &server,
        false,
        "the probes, verified against the system's roots, to mark the upstream down",
    );

    std::fs::write(&path, format!("{base}proxy_ca = \"{}\"\n", ca.display()))
        .expect("write config");
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    let status = server.status();
    assert_eq!(
        status["config"]["proxy"]["ca"],
        Value::String(ca.display().to_string()),
        "the committed configuration names the CA: {status}"
    );
    let got = curl(server.addr, "/s/hello.txt", &[]);
    assert_eq!(
        (got.status, got.body.as_slice()),
        (200, HELLO),
        "CA rule: the new generation's workers verify the upstream against the reloaded CA: {}",
        String::from_utf8_lossy(&got.body)
    );
    wait_verdict(
        &server,
        true,
        "probe client rule: the probes, built again with the committed CA, to pass",
    );

    // A CA file that does not parse: refused naming the field, the CA in force stays.
    let bad = tree.dir.join("bad-ca.pem");
    std::fs::write(
        &bad,
        "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    std::fs::write(&path, format!("{base}proxy_ca = \"{}\"\n", bad.display()))
        .expect("write config");
    let err = server
        .ctl(&json!({"cmd": "reload"}))
        .expect_err("a CA that does not parse is refused");
    assert!(
        err.contains("proxy.ca"),
        "CA rule: the refusal names the field: {err}"
    );
    assert_eq!(server.status()["generation"], 2);
    // The same CA named by an override of `ctl reload`: held to the same reading.
    std::fs::write(&path, format!("{base}proxy_ca = \"{}\"\n", ca.display()))
        .expect("write config");
    let err = server
        .ctl(&json!({"cmd": "reload", "set": {"proxy_ca": bad.display().to_string()}}))
        .expect_err("a CA override that does not parse is refused");
    assert!(
        err.contains("proxy.ca"),
        "CA rule: the refusal of an override names the field: {err}"
    );
    assert_eq!(server.status()["generation"], 2);
    let got = curl(server.addr, "/s/hello.txt", &[]);
    assert_eq!(
        (got.status, got.body.as_slice()),
        (200, HELLO),
        "the generation in force keeps its CA after a refused reload"
    );
}

/// A threaded Python HTTP server that answers every GET with the `X-Forwarded-For` it
/// got (`-` for none).
const FORWARDED_FOR: &str = r#"
import http.server, sys
port = int(sys.argv[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (self.headers.get("X-Forwarded-For") or "-").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

struct Upstream(Child);

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_reload_that_changes_the_trusted_peers_changes_whose_forwarded_for_is_kept() {
    if !tool_present("python3", &["--version"]) {
        return;
    }
    let tree = Tree::new("proxy-reload-trust");
    let port = free_port();
    let child = Command::new("python3")
        .args(["-c", FORWARDED_FOR, &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start python3");
    let _up = Upstream(child);
    wait_until(BOUND, "the upstream to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    let path = tree.dir.join("proxy.toml");
    let write = |trusted: &str| {
        std::fs::write(
            &path,
            format!("proxy = [\"/up=http://127.0.0.1:{port}\"]\ntrust_proxy = [{trusted}]\n"),
        )
        .expect("write config");
    };
    let forwarded_for = |server: &Server| -> String {
        let got = curl(
            server.addr,
            "/up/x",
            &["-H", "X-Forwarded-For: 203.0.113.9"],
        );
        assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
        String::from_utf8_lossy(&got.body).into_owned()
    };
    write("");
    let server = Server::start(&tree, 1, &["--config", path.to_str().expect("utf-8")], &[]);
    server.wait_ready(1, BOUND);
    assert_eq!(
        forwarded_for(&server),
        "127.0.0.1",
        "trust rule: an untrusted peer's X-Forwarded-For is replaced"
    );

    write("\"127.0.0.1\"");
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    assert_eq!(
        server.status()["config"]["proxy"]["trust_proxy"],
        json!(["127.0.0.1"])
    );
    assert_eq!(
        forwarded_for(&server),
        "203.0.113.9, 127.0.0.1",
        "trust rule: after a reload that trusts the peer, the new generation extends its X-Forwarded-For"
    );

    write("");
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 3, "{answer}");
    assert_eq!(
        forwarded_for(&server),
        "127.0.0.1",
        "trust rule: after a reload that trusts the peer no longer, its X-Forwarded-For is replaced again"
    );
}
