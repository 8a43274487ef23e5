//! A LOCK whose grant never reached its client: the worker is killed after the broker
//! granted the lock and before it answered (`SERVERY_TEST_FAULT=kill-after-lock-grant`).
//! The lock outlives its worker (locks belong to clients, and the broker keeps them),
//! so the client that lost the answer finds it by PROPFIND `lockdiscovery`, with the
//! owner it sent and the token it never got, and unlocks it; until then the resource
//! is locked for everyone, and afterwards it is writable again.

use std::time::Duration;

use servery_tests::{FAST, Server, Tree, wait_until, worker_ids};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Conn, head, request};

const OWNER: &str = "mailto:alice@example.com";

fn lockinfo() -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
         <D:lockinfo xmlns:D=\"DAV:\"><D:lockscope><D:exclusive/></D:lockscope>\
         <D:locktype><D:write/></D:locktype><D:owner><D:href>{OWNER}</D:href></D:owner>\
         </D:lockinfo>"
    )
}

const LOCKDISCOVERY: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
    <D:propfind xmlns:D=\"DAV:\"><D:prop><D:lockdiscovery/></D:prop></D:propfind>";

#[test]
fn a_lock_granted_to_a_worker_that_died_is_found_by_its_owner_and_unlocked() {
    let tree = Tree::new("dav-lost-grant");
    std::fs::write(tree.root().join("doc.txt"), b"draft 1").expect("a file");
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend_from_slice(&["--dav", "--upload", "--allow-overwrite"]);
    // Only the first worker process has the fault; its replacement answers normally.
    let server = Server::start(
        &tree,
        1,
        &args,
        &[("SERVERY_TEST_FAULT", "index=0 kill-after-lock-grant")],
    );
    let (status, _) = server.wait_ready(1, Duration::from_secs(30));
    let first = worker_ids(&status);

    // The LOCK is granted, and its worker dies before answering: the client hears nothing.
    let body = lockinfo();
    let mut conn = Conn::open(server.addr);
    let mut bytes = head(
        "LOCK",
        "/doc.txt",
        body.len(),
        &[("Timeout", "Second-600"), ("Depth", "0")],
    );
    bytes.extend_from_slice(body.as_bytes());
    conn.send(&bytes).expect("send the LOCK");
    let lost = conn.response();
    assert!(
        lost.is_err(),
        "the faulty worker answered the LOCK: {lost:?}"
    );
    wait_until(Duration::from_secs(30), "the worker replaced", || {
        let s = server.status();
        let ids = worker_ids(&s);
        (s["state"] == "ready" && ids.len() == 1 && ids != first).then_some(())
    });

    // The lock outlived its worker: a write without its token is refused.
    let refused = request(server.addr, "PUT", "/doc.txt", b"someone else", &[]);
    assert_eq!(refused.status, 423, "the lock was lost with its worker");

    // Its owner finds it, and the token it never got.
    let found = request(
        server.addr,
        "PROPFIND",
        "/doc.txt",
        LOCKDISCOVERY.as_bytes(),
        &[("Depth", "0"), ("Content-Type", "application/xml")],
    );
    assert_eq!(found.status, 207);
    let xml = String::from_utf8_lossy(&found.body).into_owned();
    assert!(xml.contains(OWNER), "lockdiscovery names no owner: {xml}");
    let token = xml
        .split("opaquelocktoken:")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .map(|t| format!("opaquelocktoken:{t}"))
        .unwrap_or_else(|| panic!("no lock token in lockdiscovery: {xml}"));

    // With it the owner unlocks, and the file is writable again.
    let unlocked = request(
        server.addr,
        "UNLOCK",
        "/doc.txt",
        b"",
        &[("Lock-Token", &format!("<{token}>"))],
    );
    assert_eq!(unlocked.status, 204, "UNLOCK with the discovered token");
    let written = request(server.addr, "PUT", "/doc.txt", b"draft 2", &[]);
    assert!(
        matches!(written.status, 200 | 204),
        "PUT after the unlock: {}",
        written.status
    );
    assert_eq!(
        std::fs::read(tree.root().join("doc.txt")).expect("the file"),
        b"draft 2"
    );
}
