//! Two servery hosts on one directory sharing their DAV locks and upload budget through a
//! real etcd (`--cluster`, decisions 0096 and 0130): a LOCK taken through one host is
//! refused (423) through the other; the upload budget (an upload's growth included) and
//! the partial uploads' are the service's; with etcd stopped
//! a write is answered 503 with Retry-After while reads are served; with etcd back,
//! writes succeed again without a restart; a host reaches etcd over TLS with a client
//! certificate, and with etcd's password authentication; every host is given a dead
//! endpoint first. Skipped, saying so, without `etcd`.

use std::time::{Duration, Instant};

use servery_tests::{
    Etcd, EtcdTls, FAST, Launch, Server, Tree, etcd_installed, free_port, skipped, wait_until,
    wait_until_or,
};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Conn, head, request};

const CLUSTER: &str = "cluster-test";

const LOCKINFO: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
    <D:lockinfo xmlns:D=\"DAV:\"><D:lockscope><D:exclusive/></D:lockscope>\
    <D:locktype><D:write/></D:locktype><D:owner><D:href>mailto:a@example.com</D:href></D:owner>\
    </D:lockinfo>";

fn host(tree: &Tree, etcd: &Etcd, id: &str, alongside: bool) -> Server {
    host_with(tree, etcd, id, alongside, &[])
}

fn host_with(tree: &Tree, etcd: &Etcd, id: &str, alongside: bool, more: &[&str]) -> Server {
    // The scheme of --cluster alone never turns TLS on here: the CA option does. The
    // first endpoint is a member that is down (nothing listens there): every call goes
    // on to the next one.
    let endpoint = format!("etcd://127.0.0.1:{},{}", free_port(), etcd.client);
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend_from_slice(more);
    if !more.contains(&"--max-active-uploads") {
        args.extend_from_slice(&["--max-active-uploads", "1"]);
    }
    args.extend_from_slice(&[
        "--dav",
        "--upload",
        "--allow-overwrite",
        "--max-partial-uploads",
        "1",
        "--cluster",
        &endpoint,
        "--cluster-name",
        CLUSTER,
        "--cluster-host-id",
        id,
    ]);
    let launch = Launch {
        alongside,
        ..Launch::default()
    };
    let server = Server::launch(tree, 1, &args, &[], &launch);
    server.wait_ready(1, Duration::from_secs(30));
    server
}

fn lock(server: &Server, path: &str) -> u16 {
    request(
        server.addr,
        "LOCK",
        path,
        LOCKINFO.as_bytes(),
        &[("Timeout", "Second-600"), ("Depth", "0")],
    )
    .status
}

#[test]
fn two_hosts_share_locks_and_the_upload_budget_and_refuse_writes_while_etcd_is_away() {
    if !etcd_installed() {
        skipped("etcd is not installed (Debian: apt-get install etcd-server)");
        return;
    }
    let tree = Tree::new("cluster-a");
    let other = Tree::new("cluster-b");
    // Both hosts serve one directory (as two machines would one NFS export).
    std::fs::remove_dir_all(other.root()).expect("b's own root goes");
    std::os::unix::fs::symlink(tree.root(), other.root()).expect("b serves a's root");
    std::fs::write(tree.root().join("doc.txt"), b"draft 1").expect("a file");
    let mut etcd = Etcd::start(tree.dir.join("etcd"));
    let a = host(&tree, &etcd, "a", false);
    let b = host(&other, &etcd, "b", true);
    let prefix = format!("/servery/{CLUSTER}/");
    wait_until(Duration::from_secs(20), "both hosts in etcd", || {
        (etcd.get(&format!("{prefix}hosts/a")).is_some()
            && etcd.get(&format!("{prefix}hosts/b")).is_some())
        .then_some(())
    });
    // What `ctl status` says of the cluster.
    let status = a.status();
    assert_eq!(status["cluster"]["host_id"], "a", "{}", status["cluster"]);
    assert_eq!(status["cluster"]["prefix"], prefix.as_str());
    assert_eq!(
        status["cluster"]["may_grant"], true,
        "{}",
        status["cluster"]
    );
    assert_eq!(status["broker"]["dav_locks_persistent"], false);

    // A lock through a is refused through b, and is in etcd under a's name.
    assert_eq!(lock(&a, "/doc.txt"), 200, "a LOCK through host a");
    let held = etcd.get(&format!("{prefix}locks/doc.txt"));
    assert!(
        held.as_deref().is_some_and(|v| v.starts_with("a ")),
        "the lock's shared name is a's in etcd: {held:?}"
    );
    assert_eq!(
        lock(&b, "/doc.txt"),
        423,
        "a LOCK through host b on what host a locked"
    );

    // The upload budget (one upload in the service) is taken through a by an upload
    // still sending its body ...
    let body = vec![b'x'; 64 * 1024];
    let mut slow = Conn::open(a.addr);
    let mut bytes = head("PUT", "/slow.bin", body.len(), &[]);
    bytes.extend_from_slice(&body[..1024]);
    slow.send(&bytes).expect("the upload's start");
    let share = format!("{prefix}budget/uploads/a");
    wait_until(Duration::from_secs(10), "a's share of the budget", || {
        (etcd.get(&share).as_deref() == Some(&format!("1 {}", body.len()))).then_some(())
    });
    // ... so an upload through b is refused for a full budget ...
    let refused = request(b.addr, "PUT", "/other.bin", b"small", &[]);
    assert_eq!(refused.status, 503, "the service's only upload slot is a's");
    // ... until a's upload is done and its share given back.
    slow.send(&body[1024..]).expect("the upload's rest");
    let done = slow.response().expect("the upload's answer");
    assert_eq!(done.status, 201, "{done:?}");
    wait_until(Duration::from_secs(10), "a's share given back", || {
        (etcd.get(&share).as_deref() == Some("0 0")).then_some(())
    });
    assert_eq!(
        request(b.addr, "PUT", "/other.bin", b"small", &[]).status,
        201
    );

    // A resumable upload left part-way through host a holds the service's only partial
    // slot (`--max-partial-uploads 1`) ...
    let content = vec![b'p'; 30_000];
    let chunk = |server: &Server, path: &str, from: usize, to: usize| {
        let range = format!("bytes {from}-{}/{}", to - 1, content.len());
        request(
            server.addr,
            "PUT",
            path,
            &content[from..to],
            &[("Content-Range", &range)],
        )
        .status
    };
    assert_eq!(chunk(&a, "/resumed.bin", 0, 10_000), 308, "a's first chunk");
    let partials = format!("{prefix}budget/partials/a");
    wait_until(Duration::from_secs(10), "a's share of the partials", || {
        etcd.get(&partials)
            .is_some_and(|v| v.starts_with("1 "))
            .then_some(())
    });
    // ... so one started through b is refused, while a's is resumed through a ...
    assert_eq!(
        chunk(&b, "/elsewhere.bin", 0, 10_000),
        503,
        "the service's only partial upload is a's"
    );
    assert_eq!(chunk(&a, "/resumed.bin", 10_000, 20_000), 308);
    assert_eq!(chunk(&a, "/resumed.bin", 20_000, 30_000), 201);
    assert_eq!(
        std::fs::read(tree.root().join("resumed.bin")).expect("published"),
        content
    );
    // ... and once it is finished the slot is the service's again.
    wait_until(
        Duration::from_secs(10),
        "a's partial share given back",
        || (etcd.get(&partials).as_deref() == Some("0 0")).then_some(()),
    );
    assert_eq!(chunk(&b, "/elsewhere.bin", 0, 10_000), 308);

    // etcd away: a write is answered 503 with Retry-After within the operation time-out
    // (2 s, plus the worker's side of it), and reads are served.
    etcd.stop();
    let asked = Instant::now();
    let refused = request(a.addr, "PUT", "/while-away.txt", b"x", &[]);
    let took = asked.elapsed();
    assert_eq!(refused.status, 503, "a write with etcd away: {refused:?}");
    assert!(
        refused.header("retry-after").is_some(),
        "a 503 says when to retry: {refused:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "answered within the stated bound, took {took:?}"
    );
    assert_eq!(request(a.addr, "GET", "/doc.txt", b"", &[]).status, 200);
    assert_eq!(request(b.addr, "GET", "/hello.txt", b"", &[]).status, 200);

    // etcd back: writes resume, on both hosts, with no restart.
    etcd.resume();
    let (_, recovered) = wait_until(Duration::from_secs(30), "a write through a", || {
        (request(a.addr, "PUT", "/after.txt", b"back", &[]).status == 201).then_some(())
    });
    assert_eq!(
        std::fs::read(tree.root().join("after.txt")).expect("published"),
        b"back"
    );
    eprintln!("writes resumed {recovered:?} after etcd answered again");
    wait_until(Duration::from_secs(30), "a write through b", || {
        (request(b.addr, "PUT", "/after-b.txt", b"back", &[]).status == 201).then_some(())
    });
}

/// An upload of unknown length grows its reservation as its body arrives (decision 0064);
/// through the cluster the bytes it adds are the service's (decision 0130's addendum): a
/// growth that only this host's own uploads would leave room for is refused while an
/// upload through the other host holds the rest.
#[test]
fn an_uploads_growth_is_refused_while_another_hosts_upload_holds_the_bytes() {
    if !etcd_installed() {
        skipped("etcd is not installed (Debian: apt-get install etcd-server)");
        return;
    }
    const MIB: usize = 1 << 20;
    let tree = Tree::new("cluster-grow-a");
    let other = Tree::new("cluster-grow-b");
    std::fs::remove_dir_all(other.root()).expect("b's own root goes");
    std::os::unix::fs::symlink(tree.root(), other.root()).expect("b serves a's root");
    let etcd = Etcd::start(tree.dir.join("etcd"));
    // 12 MiB in the service; an upload of unknown length first reserves 8 MiB.
    let limits = [
        "--max-active-uploads",
        "2",
        "--max-upload-bytes",
        "12582912",
        "--max-upload-size",
        "12582912",
    ];
    let a = host_with(&tree, &etcd, "a", false, &limits);
    let b = host_with(&other, &etcd, "b", true, &limits);
    let prefix = format!("/servery/{CLUSTER}/");
    let share = |host: &str| etcd.get(&format!("{prefix}budget/uploads/{host}"));
    let chunk = |bytes: &[u8]| {
        let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
        out
    };
    // Through a: an upload of unknown length, 1 MiB in, holding its first 8 MiB.
    let mut growing = Conn::open(a.addr);
    let mut start =
        b"PUT /grows.bin HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    start.extend(chunk(&vec![b'g'; MIB]));
    growing.send(&start).expect("the growing upload's start");
    wait_until(Duration::from_secs(10), "a's first 8 MiB", || {
        (share("a").as_deref() == Some(&format!("1 {}", 8 * MIB))).then_some(())
    });
    // Through b: 3 MiB of known length, still sending its body.
    let held = vec![b'h'; 3 * MIB];
    let mut holding = Conn::open(b.addr);
    let mut bytes = head("PUT", "/holds.bin", held.len(), &[]);
    bytes.extend_from_slice(&held[..1024]);
    holding.send(&bytes).expect("b's upload's start");
    wait_until(Duration::from_secs(10), "b's 3 MiB", || {
        (share("b").as_deref() == Some(&format!("1 {}", 3 * MIB))).then_some(())
    });
    // a's upload passes its 8 MiB: by 11 MiB it needs more than the 12 MiB in the service
    // less b's 3 leave, though its own host alone, holding 8 of 12, would grow it.
    for _ in 1..11 {
        if growing.send(&chunk(&vec![b'g'; MIB])).is_err() {
            break;
        }
    }
    let _ = growing.send(b"0\r\n\r\n");
    let refused = growing.response().expect("the growing upload's answer");
    assert_eq!(
        refused.status, 503,
        "cluster: a growth past the service's bytes is refused though a's own had room: {refused:?}"
    );
    assert!(!tree.root().join("grows.bin").exists(), "nothing published");
    wait_until(Duration::from_secs(10), "a's share given back", || {
        (share("a").as_deref() == Some("0 0")).then_some(())
    });
    // b's upload is whole.
    holding.send(&held[1024..]).expect("b's upload's rest");
    let done = holding.response().expect("b's answer");
    assert_eq!(done.status, 201, "{done:?}");
    assert_eq!(
        std::fs::read(tree.root().join("holds.bin")).expect("published"),
        held
    );
}

#[test]
fn a_host_signs_in_with_etcds_user_and_password() {
    if !etcd_installed() {
        skipped("etcd is not installed (Debian: apt-get install etcd-server etcd-client)");
        return;
    }
    let tree = Tree::new("cluster-auth");
    std::fs::write(tree.root().join("doc.txt"), b"draft 1").expect("a file");
    let etcd = Etcd::start(tree.dir.join("etcd"));
    // etcd's password authentication, as its operators turn it on.
    etcd.etcdctl(&["user", "add", "root:s3cret"]);
    etcd.etcdctl(&["role", "add", "root"]);
    etcd.etcdctl(&["user", "grant-role", "root", "root"]);
    etcd.etcdctl(&["auth", "enable"]);
    let password = tree.dir.join("etcd-password");
    std::fs::write(&password, "s3cret\n").expect("the password file");
    let password = password.display().to_string();
    let a = host_with(
        &tree,
        &etcd,
        "a",
        false,
        &[
            "--cluster-user",
            "root",
            "--cluster-password-file",
            &password,
        ],
    );
    // Granted only once the host holds an etcd lease and its transactions pass etcd's
    // permission check (refused ones are 503).
    wait_until(Duration::from_secs(20), "a LOCK through the host", || {
        (lock(&a, "/doc.txt") == 200).then_some(())
    });
    let key = format!("/servery/{CLUSTER}/locks/doc.txt");
    let got = etcd.etcdctl(&["--user", "root:s3cret", "get", &key]);
    assert!(
        got.lines().nth(1).is_some_and(|v| v.starts_with("a ")),
        "the lock's name is the host's in etcd: {got:?}"
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, written as PEM
/// files under `dir`.
fn certificates(dir: &std::path::Path) -> EtcdTls {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa,
        KeyPair, KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("CA");
    let leaf = |names: Vec<String>, usages: Vec<ExtendedKeyUsagePurpose>| {
        let mut params = CertificateParams::new(names).expect("params");
        params.extended_key_usages = usages;
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &ca).expect("signed");
        (cert.pem(), key.serialize_pem())
    };
    // etcd's JSON gateway reaches etcd's own gRPC service with the server's certificate
    // as a client certificate: with --client-cert-auth that certificate must be good for
    // client authentication too, or every gateway call fails ("connection closed").
    let (server, server_key) = leaf(
        vec!["127.0.0.1".into(), "localhost".into()],
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    );
    let (client, client_key) = leaf(
        vec!["servery".into()],
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    );
    std::fs::create_dir_all(dir).expect("the certificates' directory");
    let write = |name: &str, pem: &str| {
        let path = dir.join(name);
        std::fs::write(&path, pem).expect("a PEM file");
        path
    };
    EtcdTls {
        ca: write("ca.pem", &ca.pem()),
        cert: write("server.pem", &server),
        key: write("server-key.pem", &server_key),
        client_cert: write("client.pem", &client),
        client_key: write("client-key.pem", &client_key),
    }
}

#[test]
fn a_host_reaches_etcd_over_tls_with_a_client_certificate() {
    if !etcd_installed() {
        skipped("etcd is not installed (Debian: apt-get install etcd-server etcd-client)");
        return;
    }
    let tree = Tree::new("cluster-tls");
    std::fs::write(tree.root().join("doc.txt"), b"draft 1").expect("a file");
    let tls = certificates(&tree.dir.join("pki"));
    let etcd = Etcd::start_with(tree.dir.join("etcd"), Some(tls.clone()));
    let (ca, cert, key) = (
        tls.ca.display().to_string(),
        tls.client_cert.display().to_string(),
        tls.client_key.display().to_string(),
    );
    let a = host_with(
        &tree,
        &etcd,
        "a",
        false,
        &[
            "--cluster-cacert",
            &ca,
            "--cluster-cert",
            &cert,
            "--cluster-key",
            &key,
        ],
    );
    wait_until_or(
        Duration::from_secs(20),
        || (lock(&a, "/doc.txt") == 200).then_some(()),
        || format!("for a LOCK through the host; its log:\n{}", a.stderr()),
    );
    let key = format!("/servery/{CLUSTER}/locks/doc.txt");
    let got = etcd.etcdctl(&["get", &key]);
    assert!(
        got.lines().nth(1).is_some_and(|v| v.starts_with("a ")),
        "the lock's name is the host's in etcd: {got:?}"
    );
}
