//! TLS session resumption across workers and certificate rollover on reload, against the
//! real binary with two workers (decision 0025): a ticket one worker issued resumes on
//! the other, and still resumes after a `ctl recycle` and a `ctl reload` (TLS 1.3 and
//! TLS 1.2); new certificate files are served to new connections after a reload while a
//! download already under way finishes on its session; a bad pair refuses the reload,
//! says why, and the old certificate stays.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::Resumption;
use rustls::{ClientConfig, HandshakeKind};
use servery_tests::serde_json::{Value, json};
use servery_tests::*;
use tls_client::{Tls, accept_any, connect};

#[path = "support/tls_client.rs"]
mod tls_client;

/// The FAST timings with a drain long enough for a download to finish across a reload.
const ARGS: &[&str] = &[
    "--heartbeat-interval",
    "0.2",
    "--heartbeat-timeout",
    "1.5",
    "--restart-backoff-initial",
    "0.1",
    "--drain-timeout",
    "30",
    "--force-timeout",
    "0.5",
    "--worker-start-timeout",
    "10",
    "--max-connections",
    "1",
];

/// A certificate for localhost with this serial, and its key, as PEM.
fn certificate(serial: u64) -> (String, String) {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    params.serial_number = Some(rcgen::SerialNumber::from(serial));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("serial {serial}"));
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("cert");
    (cert.pem(), key.serialize_pem())
}

/// Replace a file the way an operator (or certbot) does: write aside, rename over.
fn install(path: &Path, text: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, text).expect("write");
    std::fs::rename(&aside, path).expect("rename");
}

struct Served {
    tree: Tree,
    server: Server,
    cert: PathBuf,
    key: PathBuf,
}

fn serve(name: &str, serial: u64) -> Served {
    let tree = Tree::new(name);
    std::fs::File::create(tree.root().join("large.bin"))
        .and_then(|f| f.set_len(64 << 20))
        .expect("large file");
    let (cert_pem, key_pem) = certificate(serial);
    let cert = tree.dir.join("cert.pem");
    let key = tree.dir.join("key.pem");
    install(&cert, &cert_pem);
    install(&key, &key_pem);
    let (c, k) = (
        cert.to_str().expect("utf-8").to_owned(),
        key.to_str().expect("utf-8").to_owned(),
    );
    let mut args = ARGS.to_vec();
    args.extend(["--tls-cert", &c, "--tls-key", &k]);
    let server = Server::start(&tree, 2, &args, &[]);
    server.wait_ready(2, Duration::from_secs(30));
    Served {
        tree,
        server,
        cert,
        key,
    }
}

/// A client with its own session cache, speaking only `version`, trusting the served
/// certificate.
fn client(s: &Served, version: &'static rustls::SupportedProtocolVersion) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(served_certificate(s).into())
        .expect("trust anchor");
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[version])
            .expect("version")
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = Resumption::in_memory_sessions(64);
    Arc::new(config)
}

fn open(s: &Served, config: &Arc<ClientConfig>) -> Tls {
    connect(s.server.addr, "localhost", Arc::clone(config)).expect("handshake")
}

/// One GET of `/hello.txt` on an open stream (which also takes in the TLS 1.3 tickets the
/// server sent after its handshake).
fn hello(tls: &mut Tls) {
    write!(tls, "GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("write");
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !raw.ends_with(HELLO) {
        let n = tls.read(&mut buf).expect("read");
        assert!(n > 0, "closed before the response ended");
        raw.extend_from_slice(&buf[..n]);
    }
    assert!(raw.starts_with(b"HTTP/1.1 200"), "{raw:?}");
}

/// Occupies the worker that accepts it: a download its client does not read on. With
/// `--max-connections 1`, the next connection can only be the other worker's.
fn occupy(s: &Served, config: &Arc<ClientConfig>) -> Tls {
    let mut tls = open(s, config);
    write!(tls, "GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("write");
    let mut started = [0u8; 1024];
    assert!(tls.read(&mut started).expect("the download starts") > 0);
    tls
}

fn kind(tls: &Tls) -> Option<HandshakeKind> {
    tls.conn.handshake_kind()
}

/// A fresh connection with `config`'s cache resumes, and serves.
fn resumes(s: &Served, config: &Arc<ClientConfig>, when: &str) {
    let mut tls = open(s, config);
    assert_eq!(kind(&tls), Some(HandshakeKind::Resumed), "{when}");
    hello(&mut tls);
}

fn served_certificate(s: &Served) -> Vec<u8> {
    let tls = open(s, &accept_any(&[b"http/1.1"]));
    tls.conn
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("a certificate")
        .to_vec()
}

/// The serial number of a DER certificate: the first INTEGER of the TBSCertificate,
/// after the optional explicit version.
fn serial(der: &[u8]) -> Vec<u8> {
    fn header(b: &[u8]) -> (u8, usize, usize) {
        let tag = b[0];
        let first = b[1] as usize;
        if first < 0x80 {
            return (tag, 2, first);
        }
        let n = first & 0x7f;
        let len = b[2..2 + n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | x as usize);
        (tag, 2 + n, len)
    }
    let (_, cert_head, _) = header(der);
    let tbs = &der[cert_head..];
    let (_, tbs_head, _) = header(tbs);
    let mut at = &tbs[tbs_head..];
    let (tag, head, len) = header(at);
    if tag == 0xa0 {
        at = &at[head + len..];
    }
    let (tag, head, len) = header(at);
    assert_eq!(tag, 0x02, "INTEGER serial");
    at[head..head + len].to_vec()
}

/// Requests answered per worker id, once they add up to `total` (heartbeats bring them).
fn requests_total(s: &Served, total: u64) -> std::collections::BTreeMap<u64, u64> {
    wait_until(
        Duration::from_secs(10),
        &format!("{total} requests counted"),
        || {
            let counts: std::collections::BTreeMap<u64, u64> = s.server.status()["workers"]
                .as_array()?
                .iter()
                .filter_map(|w| Some((w["id"].as_u64()?, w["requests"].as_u64()?)))
                .filter(|(_, n)| *n > 0)
                .collect();
            (counts.values().sum::<u64>() == total).then_some(counts)
        },
    )
    .0
}

fn status_tls(s: &Served) -> Value {
    s.server.status()["tls"].clone()
}

fn resumption_across_workers_recycle_and_reload(
    version: &'static rustls::SupportedProtocolVersion,
) {
    let name = if version == &rustls::version::TLS13 {
        "resume13"
    } else {
        "resume12"
    };
    let s = serve(name, 1);
    // Each worker issues tickets to its own client while it is kept busy by that
    // client's download (`--max-connections 1`: a busy worker accepts nothing).
    // The status's per-worker request counts say which worker served each step.
    let by_first = client(&s, version);
    let first_busy = occupy(&s, &by_first);
    assert_eq!(kind(&first_busy), Some(HandshakeKind::Full));
    let first = requests_total(&s, 1);
    let by_second = client(&s, version);
    let second_busy = occupy(&s, &by_second);
    assert_eq!(kind(&second_busy), Some(HandshakeKind::Full));
    let counts = requests_total(&s, 2);
    let second = *counts
        .keys()
        .find(|w| !first.contains_key(w))
        .expect("the second download is the other worker's");
    let first = *first.keys().next().expect("one worker");
    // Only the first worker can accept now: it opens the second worker's ticket.
    drop(first_busy);
    let mut crossed = open(&s, &by_second);
    assert_eq!(
        kind(&crossed),
        Some(HandshakeKind::Resumed),
        "second → first"
    );
    hello(&mut crossed);
    write!(
        crossed,
        "GET /large.bin HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    .expect("write");
    let mut started = [0u8; 1024];
    assert!(crossed.read(&mut started).expect("download starts") > 0);
    assert_eq!(
        requests_total(&s, 4)[&first],
        3,
        "served by the first worker"
    );
    // And the other way round.
    drop(second_busy);
    resumes(&s, &by_first, "first → second");
    assert_eq!(
        requests_total(&s, 5)[&second],
        2,
        "served by the second worker"
    );
    drop(crossed);
    let issued_by_one = by_first;
    for i in 0..20 {
        resumes(&s, &issued_by_one, &format!("connection {i}"));
    }
    // Both workers answered requests (the heartbeats bring their counts).
    wait_until(Duration::from_secs(10), "requests on both workers", || {
        let requests: Vec<u64> = s.server.status()["workers"]
            .as_array()?
            .iter()
            .filter_map(|w| w["requests"].as_u64())
            .collect();
        (requests.len() == 2 && requests.iter().all(|&n| n >= 1)).then_some(())
    });

    // Every worker replaced: the tickets still open.
    let before = worker_ids(&s.server.status());
    s.server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    wait_until(Duration::from_secs(30), "every worker recycled", || {
        let st = s.server.status();
        let ids = worker_ids(&st);
        let ready = st["workers"]
            .as_array()
            .is_some_and(|ws| ws.iter().all(|w| w["state"] == "ready"));
        (ready && ids.len() == 2 && ids.iter().all(|id| !before.contains(id))).then_some(())
    });
    resumes(&s, &issued_by_one, "after a recycle");

    // A new generation: the tickets still open.
    let answer = s.server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    s.server.wait_ready(2, Duration::from_secs(30));
    resumes(&s, &issued_by_one, "after a reload");
    let tls = status_tls(&s);
    assert_eq!(tls["identity_generation"], 1, "unchanged files: {tls}");
    assert_eq!(tls["ticket_key_generation"], 1, "{tls}");
    drop(s.tree);
}

#[test]
fn tls13_tickets_resume_on_either_worker_across_recycle_and_reload() {
    resumption_across_workers_recycle_and_reload(&rustls::version::TLS13);
}

#[test]
fn tls12_tickets_resume_on_either_worker_across_recycle_and_reload() {
    resumption_across_workers_recycle_and_reload(&rustls::version::TLS12);
}

#[test]
fn new_certificate_files_reach_new_connections_while_an_open_download_finishes() {
    let s = serve("rollover", 1);
    assert_eq!(serial(&served_certificate(&s)), [1]);
    let tls = status_tls(&s);
    assert_eq!(tls["subject"], "CN=serial 1", "{tls}");
    assert_eq!(tls["identity_generation"], 1, "{tls}");
    assert!(
        tls["not_after"].as_str().is_some_and(|t| t.len() >= 20),
        "{tls}"
    );

    // A download under way on the old certificate's session.
    let mut open_download = occupy(&s, &accept_any(&[b"http/1.1"]));
    let (cert, key) = certificate(2);
    install(&s.cert, &cert);
    install(&s.key, &key);
    let answer = s.server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    assert_eq!(serial(&served_certificate(&s)), [2], "new connections");
    let tls = status_tls(&s);
    assert_eq!(
        (tls["subject"].as_str(), tls["identity_generation"].as_u64()),
        (Some("CN=serial 2"), Some(2)),
        "{tls}"
    );
    // The download finishes, whole, on the session it began with.
    let mut got = 1024u64;
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut raw_head = Vec::new();
    while got < (64 << 20) {
        assert!(std::time::Instant::now() < deadline, "download stalled");
        let n = open_download.read(&mut buf).expect("the download goes on");
        assert!(n > 0, "closed after {got} bytes");
        if raw_head.len() < 1024 {
            raw_head.extend_from_slice(&buf[..n.min(1024)]);
        }
        got += n as u64;
    }
    let old = open_download
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("cert")
        .to_vec();
    assert_eq!(serial(&old), [1], "the open session kept its certificate");
}

#[test]
fn a_bad_pair_on_reload_keeps_the_old_certificate_and_says_why() {
    let s = serve("badreload", 7);
    install(&s.key, "not a key\n");
    let refused = s
        .server
        .ctl(&json!({"cmd": "reload"}))
        .expect_err("a bad key refuses the reload");
    assert!(
        refused.contains("not reloaded") && refused.contains("contains no private key"),
        "{refused}"
    );
    let status = s.server.status();
    assert_eq!(status["generation"], 1, "nothing rolled out: {status}");
    // A rejected reload like any other: the core reports it.
    assert!(
        status["last_reload_error"]
            .as_str()
            .is_some_and(|e| e.contains("no private key")),
        "{status}"
    );
    let tls = &status["tls"];
    assert_eq!(tls["identity_generation"], 1, "{tls}");
    assert!(
        tls["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("no private key")),
        "{tls}"
    );
    assert_eq!(serial(&served_certificate(&s)), [7]);

    // A key of another certificate: refused too, with its own reason.
    let (_, other_key) = certificate(8);
    install(&s.key, &other_key);
    let refused = s
        .server
        .ctl(&json!({"cmd": "reload"}))
        .expect_err("mismatch");
    assert!(refused.contains("does not match"), "{refused}");
    assert_eq!(serial(&served_certificate(&s)), [7]);

    // The text status names the certificate and the reason.
    let socket = s.server.socket.to_str().expect("utf-8").to_owned();
    let run = run_servery(
        &["ctl", "--socket", &socket, "status"],
        &[],
        Duration::from_secs(20),
    );
    assert!(run.stdout.contains("tls: CN=serial 7"), "{}", run.stdout);
    assert!(run.stdout.contains("tls last error:"), "{}", run.stdout);
}
