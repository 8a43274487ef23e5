//! TLS and HTTP/2 against the real binary: one identity for every worker (generated once
//! by the parent, or loaded from files), real certificate verification by a rustls client,
//! ALPN, HSTS, bad certificate material as a configuration error naming its flag, and an
//! `h2load` smoke test over h2c and over TLS when h2load is installed.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use servery_tests::*;
use sha2::{Digest, Sha256};
use tls_client::{Tls, accept_any, connect, provider};

#[path = "support/tls_client.rs"]
mod tls_client;

/// A client that trusts exactly `cert` and verifies names and signatures as browsers do.
fn verifying(cert: &CertificateDer<'static>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).expect("trust anchor");
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

fn peer_cert(tls: &Tls) -> CertificateDer<'static> {
    tls.conn
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("the server presented a certificate")
        .clone()
        .into_owned()
}

/// One HTTP/1.1 GET on an open (keep-alive) TLS stream: the status, head and body.
fn get(tls: &mut Tls, path: &str) -> (u16, String, Vec<u8>) {
    write!(tls, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("write request");
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let (head, body_start) = loop {
        let n = tls.read(&mut buf).expect("read response");
        assert!(n > 0, "connection closed before the response head");
        raw.extend_from_slice(&buf[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break (String::from_utf8_lossy(&raw[..end]).into_owned(), end + 4);
        }
    };
    let length: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .expect("content-length");
    while raw.len() < body_start + length {
        let n = tls.read(&mut buf).expect("read body");
        assert!(n > 0, "connection closed mid-body");
        raw.extend_from_slice(&buf[..n]);
    }
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, head, raw[body_start..body_start + length].to_vec())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[test]
fn self_signed_every_worker_presents_the_one_certificate_the_parent_made() {
    let tree = Tree::new("tls2");
    // One connection per worker at a time: while the first connection is busy the second
    // can only be accepted by the other worker (a full worker closes only a connection
    // with no request in progress to make room), so two certificates from two concurrent
    // connections are certainly from two different processes.
    std::fs::File::create(tree.root().join("large.bin"))
        .and_then(|f| f.set_len(256 << 20))
        .expect("large file");
    let mut args = FAST.to_vec();
    args.extend(["--tls-self-signed", "--hsts", "--max-connections", "1"]);
    let mut server = Server::start(&tree, 2, &args, &[]);
    let (listening, _) = server.wait_stdout("servery: listening on ", Duration::from_secs(20));
    assert!(listening.contains("https://"), "{listening}");
    let (banner, _) =
        server.wait_stdout("servery: TLS certificate sha256 ", Duration::from_secs(5));
    let announced = banner.trim_start_matches("servery: TLS certificate sha256 ");
    server.wait_ready(2, Duration::from_secs(20));

    let mut first = connect(server.addr, "localhost", accept_any(&[b"http/1.1"])).expect("tls 1");
    let (status, head, body) = get(&mut first, "/hello.txt");
    assert_eq!((status, body.as_slice()), (200, HELLO), "{head}");
    assert_eq!(
        header(&head, "strict-transport-security"),
        Some("max-age=31536000"),
        "{head}"
    );
    // Keep the first connection's worker busy: a download its client does not read.
    write!(first, "GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("write");
    let mut started = [0u8; 1024];
    assert!(first.read(&mut started).expect("the download starts") > 0);
    let mut second = connect(server.addr, "localhost", accept_any(&[b"http/1.1"])).expect("tls 2");
    let (status, _, body) = get(&mut second, "/sub/big.bin");
    assert_eq!(status, 200);
    assert_eq!(body, big_body());
    let (a, b) = (peer_cert(&first), peer_cert(&second));
    assert_eq!(a, b, "both workers present the same certificate");
    assert_eq!(
        fingerprint(&a),
        announced,
        "the banner names the certificate served"
    );

    // Both workers served one request each (so the two certificates came from both).
    wait_until(
        Duration::from_secs(5),
        "a request counted by each worker",
        || {
            let s = server.status();
            let counts: Vec<u64> = s["workers"]
                .as_array()?
                .iter()
                .filter_map(|w| w["requests"].as_u64())
                .collect();
            (counts.len() == 2 && counts.iter().all(|&c| c >= 1)).then_some(())
        },
    );
    drop((first, second));

    // Real verification against that certificate: its names cover localhost and the
    // loopback addresses, and ALPN offers h2.
    for name in ["localhost", "127.0.0.1"] {
        let mut tls = connect(server.addr, name, verifying(&a, &[b"http/1.1"]))
            .unwrap_or_else(|e| panic!("verifying as {name}: {e}"));
        assert_eq!(get(&mut tls, "/hello.txt").0, 200);
    }
    let h2 = connect(
        server.addr,
        "localhost",
        verifying(&a, &[b"h2", b"http/1.1"]),
    )
    .expect("h2 handshake");
    assert_eq!(h2.conn.alpn_protocol(), Some(&b"h2"[..]));
    // A name the certificate does not carry is refused by a verifying client.
    assert!(connect(server.addr, "example.com", verifying(&a, &[])).is_err());
}

#[test]
fn certificate_files_are_loaded_once_and_served_with_verification() {
    let tree = Tree::new("tlsfiles");
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("test certificate");
    let cert = tree.dir.join("cert.pem");
    let key = tree.dir.join("key.pem");
    std::fs::write(&cert, generated.cert.pem()).expect("write cert");
    std::fs::write(&key, generated.signing_key.serialize_pem()).expect("write key");
    let der = generated.cert.der().clone();
    let mut args = FAST.to_vec();
    let (cert_s, key_s) = (
        cert.to_str().expect("utf-8").to_owned(),
        key.to_str().expect("utf-8").to_owned(),
    );
    args.extend(["--tls-cert", &cert_s, "--tls-key", &key_s]);
    let server = Server::start(&tree, 2, &args, &[]);
    server.wait_ready(2, Duration::from_secs(20));
    for _ in 0..4 {
        let mut tls = connect(server.addr, "localhost", verifying(&der, &[b"http/1.1"]))
            .expect("verified handshake");
        let (status, head, body) = get(&mut tls, "/hello.txt");
        assert_eq!((status, body.as_slice()), (200, HELLO), "{head}");
        assert_eq!(
            header(&head, "strict-transport-security"),
            None,
            "no HSTS unless asked"
        );
    }
    let h2 = connect(server.addr, "localhost", verifying(&der, &[b"h2"])).expect("h2");
    assert_eq!(h2.conn.alpn_protocol(), Some(&b"h2"[..]));
}

/// The command line that serves `tree` with the certificate and key at these paths.
fn tls_args(tree: &Tree, cert: &std::path::Path, key: &std::path::Path) -> Vec<String> {
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    vec![
        path(&tree.root()),
        "--port".into(),
        "0".into(),
        "--control-socket".into(),
        path(&tree.socket()),
        "--tls-cert".into(),
        path(cert),
        "--tls-key".into(),
        path(key),
    ]
}

#[test]
fn bad_certificate_material_exits_2_naming_the_flag_before_binding() {
    let tree = Tree::new("tlsbad");
    let good = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
    let other = rcgen::KeyPair::generate().expect("key");
    let cert = tree.dir.join("cert.pem");
    std::fs::write(&cert, good.cert.pem()).expect("write");
    let garbage = tree.dir.join("garbage.pem");
    std::fs::write(&garbage, "this is not a key\n").expect("write");
    let mismatched = tree.dir.join("other.pem");
    std::fs::write(&mismatched, other.serialize_pem()).expect("write");
    let missing = tree.dir.join("absent.pem");

    for (cert, key, flag, says) in [
        (&cert, &garbage, "--tls-key", "contains no private key"),
        (&cert, &mismatched, "--tls-key", "does not match"),
        (&missing, &garbage, "--tls-cert", "cannot read"),
    ] {
        let args = tls_args(&tree, cert, key);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = run_servery(&args, &[], Duration::from_secs(10));
        assert_eq!(run.status.code(), Some(2), "{flag}: {run:?}");
        assert!(
            run.stderr.contains(&format!("- {flag}:")) && run.stderr.contains(says),
            "{flag} / `{says}` not in:\n{}",
            run.stderr
        );
        assert!(!run.stdout.contains("listening"), "{}", run.stdout);
        assert!(
            !tree.socket().exists(),
            "nothing may be bound before validation"
        );
    }
}

#[test]
fn oversized_or_endless_tls_files_exit_2_promptly_naming_flag_path_and_limit() {
    let tree = Tree::new("tlsbig");
    let good = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
    let cert = tree.dir.join("cert.pem");
    std::fs::write(&cert, good.cert.pem()).expect("write");
    let key = tree.dir.join("key.pem");
    std::fs::write(&key, good.signing_key.serialize_pem()).expect("write");
    // A real key followed by padding past the 256 KiB cap: only the size is wrong.
    let big = tree.dir.join("big-key.pem");
    let mut padded = good.signing_key.serialize_pem().into_bytes();
    padded.resize(300 * 1024, b'\n');
    std::fs::write(&big, &padded).expect("write");
    // A FIFO that a writer fills for as long as anyone reads it.
    let fifo = tree.dir.join("endless.pem");
    let fifo_made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if fifo_made {
        let fifo = fifo.clone();
        // Ends when servery closes its end (EPIPE) or, if it never opens it, never
        // blocks the test: the thread is detached.
        std::thread::spawn(move || {
            if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&fifo) {
                let chunk = [b'A'; 64 * 1024];
                while w.write_all(&chunk).is_ok() {}
            }
        });
    } else {
        servery_tests::skipped("the FIFO case: mkfifo is not available");
    }
    let dev_zero = std::path::PathBuf::from("/dev/zero");

    let mut cases = vec![
        (
            &dev_zero,
            &key,
            "--tls-cert",
            "/dev/zero is too large (not a regular file",
        ),
        (&cert, &big, "--tls-key", "is too large (307200 bytes)"),
    ];
    if fifo_made {
        cases.push((
            &cert,
            &fifo,
            "--tls-key",
            "is too large (not a regular file",
        ));
    }
    for (cert, key, flag, says) in cases {
        let args = tls_args(&tree, cert, key);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = std::time::Instant::now();
        let run = run_servery(&args, &[], Duration::from_secs(10));
        let took = started.elapsed();
        eprintln!(
            "MEASURED {flag} {says}…: exit {:?} after {took:?}",
            run.status.code()
        );
        assert_eq!(run.status.code(), Some(2), "{flag}: {run:?}");
        // Reading at most the cap takes milliseconds; reading until memory runs out
        // took seconds (and gigabytes) before the cap.
        assert!(took < Duration::from_secs(5), "{flag}: took {took:?}");
        let named = if flag == "--tls-cert" { cert } else { key };
        assert!(
            run.stderr
                .contains(&format!("- {flag}: {}", named.display()))
                && run.stderr.contains(says)
                && run.stderr.contains("a PEM file may hold at most 256 KiB"),
            "{flag} / `{says}` not in:\n{}",
            run.stderr
        );
        assert!(!run.stdout.contains("listening"), "{}", run.stdout);
        assert!(
            !tree.socket().exists(),
            "nothing may be bound before validation"
        );
    }
}

/// Run `h2load` (bounded) and return the number of succeeded requests and its output.
fn h2load(url: &str) -> (u64, String) {
    let mut child = Command::new("h2load")
        .args(["-n", "2000", "-c", "4", "-m", "8", url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn h2load");
    let mut out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    let bound = Duration::from_secs(60);
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(bound, "h2load to finish", || {
            child.try_wait().ok().flatten()
        })
    }));
    if waited.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("h2load {url} did not finish within {bound:?}");
    }
    let text = reader.join().unwrap_or_default();
    // "requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, …"
    let succeeded = text
        .lines()
        .find(|l| l.starts_with("requests:"))
        .and_then(|l| {
            l.split(',')
                .find(|p| p.trim_end().ends_with("succeeded"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    (succeeded, text)
}

#[test]
fn h2load_smoke_over_h2c_and_tls() {
    if Command::new("h2load").arg("--version").output().is_err() {
        eprintln!("NOTICE: h2load is not installed (apt-get install nghttp2-client); skipping");
        return;
    }
    for tls in [false, true] {
        let tree = Tree::new(if tls { "h2tls" } else { "h2c" });
        let mut args = FAST.to_vec();
        if tls {
            args.push("--tls-self-signed");
        }
        let server = Server::start(&tree, 2, &args, &[]);
        server.wait_ready(2, Duration::from_secs(20));
        let scheme = if tls { "https" } else { "http" };
        let url = format!("{scheme}://{}/hello.txt", server.addr);
        let (succeeded, output) = h2load(&url);
        assert_eq!(succeeded, 2000, "h2load {url}:\n{output}");
        if tls {
            assert!(
                output.contains("Application protocol: h2"),
                "ALPN h2 over TLS:\n{output}"
            );
        }
    }
}
