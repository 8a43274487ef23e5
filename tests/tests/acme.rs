//! ACME against a real CA: pebble (with pebble-challtestsrv answering its DNS, every name
//! on loopback) validates servery's HTTP-01 answers on its cleartext port and issues.
//! Issuance from nothing, a restart that reuses the stored account and certificate
//! without an order, a forced renewal under load (wrk's keep-alive connections and a
//! loop of new TLS connections: no request fails, the served serial changes), and a
//! failing validation that keeps the certificate in service, reports the error and
//! retries.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use servery_tests::*;

const DOMAIN: &str = "files.acme.test";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// pebble and its DNS server, on loopback.
struct Ca {
    directory: String,
    ca_pem: PathBuf,
    http_port: u16,
    challtest: u16,
    _procs: (Killed, Killed),
}

fn need(program: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{program} is not installed (Debian package `pebble`, see scripts/debian-packages.txt)"
    );
}

fn start_ca(dir: &Path) -> Ca {
    need("pebble");
    need("pebble-challtestsrv");
    let dns = free_port();
    let challtest = free_port();
    let dns_srv = Command::new("pebble-challtestsrv")
        .args([
            "-dns01",
            &format!("127.0.0.1:{dns}"),
            "-http01",
            "",
            "-https01",
            "",
            "-tlsalpn01",
            "",
        ])
        .args([
            "-management",
            &format!("127.0.0.1:{challtest}"),
            "-defaultIPv6",
            "",
            "-defaultIPv4",
            "127.0.0.1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pebble-challtestsrv");
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("params");
    let cert = params.self_signed(&key).expect("cert");
    let ca_pem = dir.join("pebble-tls.pem");
    std::fs::write(&ca_pem, cert.pem()).expect("write");
    std::fs::write(dir.join("pebble-tls.key"), key.serialize_pem()).expect("write");
    let (listen, mgmt, http_port, tls_port) = (free_port(), free_port(), free_port(), free_port());
    let config = json!({"pebble": {
        "listenAddress": format!("127.0.0.1:{listen}"),
        "managementListenAddress": format!("127.0.0.1:{mgmt}"),
        "certificate": dir.join("pebble-tls.pem"),
        "privateKey": dir.join("pebble-tls.key"),
        "httpPort": http_port,
        "tlsPort": tls_port,
        "ocspResponderURL": "",
        "externalAccountBindingRequired": false
    }});
    let config_path = dir.join("pebble.json");
    std::fs::write(&config_path, config.to_string()).expect("write");
    let pebble = Command::new("pebble")
        .arg("-config")
        .arg(&config_path)
        .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env("PEBBLE_WFE_NONCEREJECT", "0")
        .env("PEBBLE_AUTHZREUSE", "0")
        .stdout(std::fs::File::create(dir.join("pebble.log")).expect("log"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start pebble");
    let procs = (Killed(pebble), Killed(dns_srv));
    for port in [listen, challtest] {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        wait_until(Duration::from_secs(10), "the CA's listeners", || {
            TcpStream::connect(addr).ok().map(|_| ())
        });
    }
    Ca {
        directory: format!("https://127.0.0.1:{listen}/dir"),
        ca_pem,
        http_port,
        challtest,
        _procs: procs,
    }
}

impl Ca {
    /// Point the domain at `ip` in the CA's DNS.
    fn point(&self, ip: &str) {
        let addr: SocketAddr = format!("127.0.0.1:{}", self.challtest)
            .parse()
            .expect("addr");
        let body = json!({"host": format!("{DOMAIN}."), "addresses": [ip]}).to_string();
        let mut s = TcpStream::connect(addr).expect("challtestsrv");
        use std::io::{Read, Write};
        write!(s, "POST /add-a HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).expect("write");
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    fn args(&self, state: &Path, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--acme".into(),
            DOMAIN.into(),
            "--acme-directory".into(),
            self.directory.clone(),
            "--acme-directory-ca".into(),
            self.ca_pem.display().to_string(),
            "--acme-dir".into(),
            state.display().to_string(),
            "--acme-http-port".into(),
            self.http_port.to_string(),
            "--acme-email".into(),
            "ops@acme.test".into(),
            "--acme-retry".into(),
            "1".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }
}

/// The stopped servery's workers may hold the cleartext listener a moment longer.
fn port_free(port: u16) {
    wait_until(
        Duration::from_secs(10),
        "the HTTP-01 port to be free",
        || TcpListener::bind(("127.0.0.1", port)).ok().map(|_| ()),
    );
}

fn acme_status(server: &Server) -> Value {
    server.status()["acme"].clone()
}

/// A CA, servery (`workers` of them) on `tree` with its ACME state directory, and the
/// status once the first certificate is in service.
fn serving_an_issued_certificate(tree: &Tree, workers: u32) -> (Ca, PathBuf, Server, Value) {
    let ca = start_ca(&tree.dir.clone());
    let state = tree.dir.join("acme-state");
    let args = ca.args(&state, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(tree, workers, &args, &[]);
    let issued = wait_acme(&server, "issued", Duration::from_secs(60), |a| {
        a["state"] == "valid"
    });
    (ca, state, server, issued)
}

fn wait_acme(server: &Server, what: &str, bound: Duration, ok: impl Fn(&Value) -> bool) -> Value {
    let (a, _) = wait_until(bound, what, || {
        let a = acme_status(server);
        Some(a).filter(|a| ok(a))
    });
    a
}

/// The leaf certificate servery presents on `addr` (DER), without verifying it.
fn served_leaf(addr: SocketAddr) -> Vec<u8> {
    let tls = tls_client::connect(addr, "localhost", tls_client::accept_any(&[b"http/1.1"]))
        .expect("TLS handshake");
    tls.conn
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("a certificate")
        .to_vec()
}

#[path = "support/tls_client.rs"]
#[allow(dead_code)]
mod tls_client;

fn by_pebble(der: &[u8]) -> bool {
    der.windows(6).any(|w| w == b"Pebble")
}

#[test]
fn issuance_from_nothing_then_a_restart_reuses_the_account_and_certificate() {
    let tree = Tree::new("acme-issue");
    let (ca, state, server, issued) = serving_an_issued_certificate(&tree, 2);
    assert_eq!(issued["orders"], 1, "{issued}");
    assert!(
        issued["serial"].is_string() && issued["next_attempt"].is_i64(),
        "{issued}"
    );
    assert!(
        issued["next_attempt"].as_i64() < issued["not_after"].as_i64(),
        "{issued}"
    );
    // The cleartext listener answers challenges only: a withdrawn or unknown token is 404,
    // anything else is sent to HTTPS.
    let plain: SocketAddr = format!("127.0.0.1:{}", ca.http_port).parse().expect("addr");
    let (status, _) = http_get(plain, "/.well-known/acme-challenge/unknown").expect("GET");
    assert_eq!(status, 404);
    let (status, _) = http_get(plain, "/hello.txt").expect("GET");
    assert_eq!(status, 308);
    // The running workers take the issued certificate at once: no recycle, no restart.
    let pids = |s: &Value| {
        let mut p = worker_pids(s);
        p.sort_unstable();
        p
    };
    let before = server.status();
    let (leaf, _) = wait_until(
        Duration::from_secs(20),
        "pebble's certificate served by the running workers",
        || Some(served_leaf(server.addr)).filter(|d| by_pebble(d)),
    );
    let after = server.status();
    assert_eq!(pids(&after), pids(&before), "{after}");
    assert_eq!(after["restarts"], 0, "{after}");
    // A forced renewal: a new serial, served by the same workers.
    server
        .ctl(&json!({"cmd": "acme-renew"}))
        .expect("acme-renew");
    let renewed = wait_acme(&server, "renewed", Duration::from_secs(60), |a| {
        a["state"] == "valid" && a["serial"] != issued["serial"]
    });
    // At least the forced order (a retry under load, or a renewal window the CA's ARI
    // answer put in the past, may add one).
    assert!(renewed["orders"].as_u64() >= Some(2), "{renewed}");
    wait_until(
        Duration::from_secs(20),
        "the renewed certificate served by the running workers",
        || Some(served_leaf(server.addr)).filter(|d| by_pebble(d) && *d != leaf),
    );
    assert_eq!(pids(&server.status()), pids(&before));
    wait_acme(&server, "settled", Duration::from_secs(60), |a| {
        a["state"] == "valid"
    });
    let mode = std::fs::metadata(state.join("certificate.pem"))
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(mode.ok(), Some(0o600));
    drop(server);
    port_free(ca.http_port);
    // What was stored when the service stopped (a retried order may have replaced the
    // renewed certificate after it was first served): the leaf is the file's first.
    let stored: Vec<u8> = {
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        CertificateDer::pem_file_iter(state.join("certificate.pem"))
            .expect("certificate.pem")
            .next()
            .expect("a certificate in certificate.pem")
            .expect("a readable certificate")
            .to_vec()
    };

    let args = ca.args(&state, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&tree, 1, &args, &[]);
    let again = wait_acme(&server, "loaded", Duration::from_secs(20), |a| {
        a["state"] == "valid"
    });
    assert_eq!(again["orders"], 0, "no new order: {again}");
    assert_eq!(
        served_leaf(server.addr),
        stored,
        "the stored certificate is served from the start"
    );
}

/// What a loop of new TLS connections saw: requests answered 200, requests that failed
/// (with why), and each distinct leaf certificate in the order it first appeared.
#[derive(Default)]
struct Handshakes {
    ok: u64,
    failed: Vec<String>,
    leaves: Vec<Vec<u8>>,
}

/// One `GET /hello.txt` on a new TLS connection (`Connection: close`): the leaf it was
/// served with, or why it failed.
fn get_on_new_connection(addr: SocketAddr) -> Result<Vec<u8>, String> {
    use std::io::{Read, Write};
    let mut tls = tls_client::connect(addr, "localhost", tls_client::accept_any(&[b"http/1.1"]))?;
    let leaf = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or("no certificate")?;
    tls.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    let read = tls.read_to_end(&mut answer);
    let whole = answer.starts_with(b"HTTP/1.1 200") && answer.ends_with(HELLO);
    match (whole, read) {
        (true, _) => Ok(leaf),
        (false, Err(e)) => Err(format!("read: {e}")),
        (false, Ok(_)) => Err(format!("answer: {:?}", String::from_utf8_lossy(&answer))),
    }
}

/// wrk's keep-alive load, running until [`Wrk::stop`] (or a minute, a bound far past
/// any renewal): a fixed duration would have to guess how long a loaded machine takes.
fn wrk_load(addr: SocketAddr) -> Wrk {
    need("wrk");
    let url = format!("https://127.0.0.1:{}/hello.txt", addr.port());
    Wrk::start(&url, &["-t2", "-c8", "-d60s", "--timeout", "2s"])
}

#[test]
fn a_forced_renewal_under_load_fails_no_request_and_a_client_sees_the_new_serial() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let tree = Tree::new("acme-load");
    // The CA stays up for the whole test.
    let (_ca, _state, server, issued) = serving_an_issued_certificate(&tree, 2);
    let (first, _) = wait_until(
        Duration::from_secs(20),
        "pebble's certificate served",
        || Some(served_leaf(server.addr)).filter(|d| by_pebble(d)),
    );

    // Load: wrk's keep-alive connections, and a loop of new connections, each a full
    // handshake that shows the certificate served at that moment.
    let load = wrk_load(server.addr);
    let seen = Arc::new(Mutex::new(Handshakes::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let looping = {
        let (seen, stop, addr) = (Arc::clone(&seen), Arc::clone(&stop), server.addr);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let result = get_on_new_connection(addr);
                let mut s = seen.lock().expect("lock");
                match result {
                    Ok(leaf) => {
                        s.ok += 1;
                        if !s.leaves.contains(&leaf) {
                            s.leaves.push(leaf);
                        }
                    }
                    Err(why) => s.failed.push(why),
                }
            }
        })
    };
    let handshakes = |n: u64| {
        let seen = Arc::clone(&seen);
        move || {
            let s = seen.lock().expect("lock");
            (s.ok >= n).then_some(())
        }
    };
    wait_until(Duration::from_secs(5), "the load under way", handshakes(20));

    server
        .ctl(&json!({"cmd": "acme-renew"}))
        .expect("acme-renew");
    let renewed = wait_acme(&server, "renewed", Duration::from_secs(30), |a| {
        a["state"] == "valid" && a["serial"] != issued["serial"]
    });
    let new_leaf = {
        let (seen, first) = (Arc::clone(&seen), first.clone());
        move || {
            let s = seen.lock().expect("lock");
            s.leaves.iter().find(|l| **l != first).cloned()
        }
    };
    let (second, _) = wait_until(
        Duration::from_secs(10),
        "a new connection served the renewed certificate",
        new_leaf,
    );
    // Some more load on the renewed certificate, then stop.
    let after = seen.lock().expect("lock").ok;
    wait_until(
        Duration::from_secs(5),
        "load after the renewal",
        handshakes(after + 20),
    );
    assert!(!load.is_finished(), "the renewal outlasted wrk's minute");
    stop.store(true, Ordering::Relaxed);
    looping.join().expect("the loop");
    let WrkReport {
        requests: wrk_requests,
        errors: wrk_errors,
        ..
    } = load.stop();

    let s = seen.lock().expect("lock");
    assert!(
        s.failed.is_empty(),
        "new connections failed: {:?}",
        s.failed
    );
    assert!(wrk_errors.is_empty(), "wrk: {wrk_errors:?}");
    assert!(wrk_requests > 100, "wrk made only {wrk_requests} requests");
    assert!(by_pebble(&second), "the new leaf is pebble's");
    assert_eq!(
        s.leaves,
        vec![first, second],
        "the old certificate, then the renewed one, and no other"
    );
    assert_eq!(
        served_leaf(server.addr),
        s.leaves[1],
        "{renewed}: the renewed certificate is served"
    );
    assert_eq!(server.status()["restarts"], 0);
}

#[test]
fn a_failing_validation_keeps_the_certificate_reports_and_retries() {
    let tree = Tree::new("acme-fail");
    let (first_ca, state, server, issued) = serving_an_issued_certificate(&tree, 1);
    drop(server);
    drop(first_ca);
    // A second CA, which has never validated the domain: pebble reuses a valid
    // authorization about one order in a hundred even with PEBBLE_AUTHZREUSE=0 (it reuses
    // unless a draw from 0..100 exceeds the percentage, and 0 does not), and a reused one
    // would let the renewal succeed without a validation.
    let ca_dir = tree.dir.join("second-ca");
    std::fs::create_dir_all(&ca_dir).expect("mkdir");
    let ca = start_ca(&ca_dir);
    // Nothing answers there: the CA cannot validate.
    ca.point("127.0.0.2");
    // Renewal due at once (within ten years of expiry).
    let args = ca.args(
        &state,
        &["--acme-renew-before", "315360000", "--admin", "127.0.0.1:0"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Server::start(&tree, 1, &args, &[]);
    let admin: SocketAddr = server.admin_addr(Duration::from_secs(10));
    let failed = wait_acme(&server, "failed twice", Duration::from_secs(60), |a| {
        a["failures"].as_u64() >= Some(2)
    });
    // Visible beyond ctl status (decision 0057): a log line per failed attempt naming its
    // stage and what the CA said, counters by stage, and /readyz degraded, not failing,
    // while the stored certificate is still valid and served.
    assert_eq!(failed["certificate"], "valid, renewal failing", "{failed}");
    assert!(
        failed["failures_by_stage"]["validate"].as_u64() >= Some(2),
        "{failed}"
    );
    wait_until(Duration::from_secs(10), "a line per failed attempt", || {
        let said = server
            .stderr()
            .lines()
            .filter(|l| l.contains("ACME attempt failed") && l.contains("stage=\"validate\""))
            .count();
        (said >= 2).then_some(())
    });
    let (status, body) = http_get(admin, "/readyz").expect("readyz");
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with("degraded: certificate renewal failing"),
        "{body}"
    );
    let (_, metrics) = http_get(admin, "/metrics").expect("metrics");
    let metrics = String::from_utf8_lossy(&metrics);
    let sample = |series: &str| -> Option<f64> {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    };
    assert!(
        sample("servery_acme_failures_total{stage=\"validate\"}") >= Some(2.0),
        "{metrics}"
    );
    assert!(
        sample("servery_acme_consecutive_failures") >= Some(2.0),
        "{metrics}"
    );
    assert!(
        sample("servery_acme_certificate_expiry_timestamp_seconds") > Some(0.0),
        "{metrics}"
    );
    eprintln!(
        "failing renewal: {} failures, readyz {status} {body:?}, last error {}",
        failed["failures"], failed["last_error"]
    );
    assert_eq!(
        failed["serial"],
        issued["serial"],
        "kept: {failed}\nthe CA's log:\n{}",
        std::fs::read_to_string(ca_dir.join("pebble.log")).unwrap_or_default()
    );
    assert!(
        failed["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{failed}"
    );
    assert!(
        by_pebble(&served_leaf(server.addr)),
        "the stored certificate is still served"
    );
}

#[test]
fn acme_configuration_errors_name_their_flag_before_binding() {
    let tree = Tree::new("acme-config");
    let root = tree.root().display().to_string();
    let cases: &[(&[&str], &[&str])] = &[
        (&["--acme", DOMAIN], &["--acme-dir", "--port"]),
        (
            &[
                "--acme",
                "127.0.0.1",
                "--port",
                "8443",
                "--acme-dir",
                "/tmp/x",
            ],
            &["--acme: \"127.0.0.1\" is not a DNS name"],
        ),
        (
            &[
                "--acme",
                DOMAIN,
                "--port",
                "8080",
                "--acme-http-port",
                "8080",
                "--acme-dir",
                "/tmp/x",
            ],
            &["--acme-http-port: must differ from --port"],
        ),
        (
            &[
                "--acme",
                DOMAIN,
                "--port",
                "8443",
                "--acme-dir",
                "/tmp/x",
                "--tls-self-signed",
            ],
            &["--acme: cannot be combined"],
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec![root.as_str()];
        all.extend_from_slice(args);
        let run = run_servery(&all, &[], Duration::from_secs(20));
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", run.stderr);
        for e in *expected {
            assert!(
                run.stderr.contains(e),
                "{args:?}: missing {e:?} in {}",
                run.stderr
            );
        }
        assert!(
            !run.stdout.contains("listening"),
            "nothing was bound: {}",
            run.stdout
        );
    }
}
