//! HTTP preconditions on WebDAV writes, against the real binary with four workers:
//! `If-Match`, `If-None-Match` and `If-Unmodified-Since` on every write method (412, and
//! nothing changed), two writers racing with one `If-Match` through different workers
//! (exactly one wins, and the file is the winner's), the lost-update case with curl, and
//! the smaller items of the same issue: `OPTIONS *`, what a `Content-Range` PUT over an
//! existing file answers, and Microsoft and Apple property namespaces in PROPPATCH.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use servery_tests::{FAST, Server, Tree, curl};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Conn, Reply, head, request};

fn start(tree: &Tree, extra: &[&str]) -> Server {
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend_from_slice(&["--dav", "--upload"]);
    args.extend_from_slice(extra);
    let server = Server::start(tree, 4, &args, &[]);
    server.wait_ready(4, Duration::from_secs(30));
    server
}

/// Puts `bytes` at `name` below the served root, making its directories.
fn put_file(tree: &Tree, name: &str, bytes: &[u8]) {
    let path = tree.root().join(name);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
}

fn etag(addr: SocketAddr, path: &str) -> String {
    let reply = request(addr, "GET", path, b"", &[]);
    assert_eq!(reply.status, 200, "GET {path}");
    reply.header("etag").expect("an ETag").to_owned()
}

fn text(reply: &Reply) -> String {
    String::from_utf8_lossy(&reply.body).into_owned()
}

fn read(root: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(root.join(name)).ok()
}

/// Pairs of PUTs with the same `If-Match`, each pair sent at once on two connections: one
/// answer is 204 and the other 412, every time, and the file holds the winner's body.
/// With the check made before the lease, both would pass and both write.
#[test]
fn racing_writers_with_one_if_match_get_one_success_and_one_412() {
    let tree = Tree::new("dav-race");
    put_file(&tree, "race.txt", b"v0");
    let server = start(&tree, &["--allow-overwrite"]);
    let addr = server.addr;
    let mut crossed = 0;
    const PAIRS: usize = 40;
    for pair in 0..PAIRS {
        let tag = etag(addr, "/race.txt");
        let barrier = Arc::new(Barrier::new(2));
        let clients: Vec<_> = ["A", "B"]
            .into_iter()
            .map(|who| {
                let (barrier, tag) = (Arc::clone(&barrier), tag.clone());
                std::thread::spawn(move || {
                    let body = format!("pair {pair} by {who}");
                    let mut bytes = head("PUT", "/race.txt", body.len(), &[("If-Match", &tag)]);
                    bytes.extend_from_slice(body.as_bytes());
                    let mut conn = Conn::open(addr);
                    barrier.wait();
                    conn.send(&bytes).expect("send");
                    let reply = conn.response().expect("an answer");
                    (body, reply)
                })
            })
            .collect();
        let replies: Vec<(String, Reply)> = clients
            .into_iter()
            .map(|c| c.join().expect("client thread"))
            .collect();
        let mut statuses: Vec<u16> = replies.iter().map(|(_, r)| r.status).collect();
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [204, 412],
            "pair {pair}: exactly one winner: {:?}",
            replies
                .iter()
                .map(|(_, r)| (r.status, text(r)))
                .collect::<Vec<_>>()
        );
        let (winner, _) = replies
            .iter()
            .find(|(_, r)| r.status == 204)
            .expect("a winner");
        assert_eq!(
            read(&tree.root(), "race.txt").as_deref(),
            Some(winner.as_str()),
            "pair {pair}: the file is the winner's"
        );
        let loser = &replies
            .iter()
            .find(|(_, r)| r.status == 412)
            .expect("a loser")
            .1;
        assert!(text(loser).contains("If-Match"), "{}", text(loser));
        if replies[0].1.worker() != replies[1].1.worker() {
            crossed += 1;
        }
    }
    eprintln!("{crossed} of {PAIRS} pairs went through two different workers");
    assert!(
        crossed > 0,
        "no pair went through two workers: the race was never across processes"
    );
}

/// Two people edit one file with curl: both read it, the first saves with its `If-Match`
/// and wins, the second's save with the same (now stale) tag is refused, and the first
/// one's text is what is stored; the second reads again and saves on top.
#[test]
fn two_writers_with_curl_lose_no_update() {
    let tree = Tree::new("dav-lost-update");
    put_file(&tree, "notes.txt", b"original\n");
    let server = start(&tree, &["--allow-overwrite"]);
    let addr = server.addr;
    let headers = tree.root().parent().expect("a parent").join("headers.txt");
    let read_tag = || {
        let got = curl(
            addr,
            "/notes.txt",
            &["-D", headers.to_str().expect("a UTF-8 path")],
        );
        assert_eq!(got.status, 200);
        let head = std::fs::read_to_string(&headers).expect("curl wrote the headers");
        head.lines()
            .find_map(|l| {
                l.strip_prefix("etag: ")
                    .or_else(|| l.strip_prefix("ETag: "))
            })
            .expect("an ETag")
            .trim()
            .to_owned()
    };
    let alice = read_tag();
    let bob = read_tag();
    assert_eq!(alice, bob);
    let save = |tag: &str, text: &str| {
        curl(
            addr,
            "/notes.txt",
            &[
                "-X",
                "PUT",
                "-H",
                &format!("If-Match: {tag}"),
                "--data-binary",
                text,
            ],
        )
    };
    assert_eq!(save(&alice, "alice's edit\n").status, 204);
    let refused = save(&bob, "bob's edit\n");
    assert_eq!(
        refused.status,
        412,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_eq!(
        read(&tree.root(), "notes.txt").as_deref(),
        Some("alice's edit\n")
    );
    let fresh = read_tag();
    assert_ne!(fresh, bob, "the stored file has a new tag");
    assert_eq!(save(&fresh, "alice's and bob's edit\n").status, 204);
    assert_eq!(
        read(&tree.root(), "notes.txt").as_deref(),
        Some("alice's and bob's edit\n")
    );
}

/// A whole PUT answers with the stored file's `ETag` (and `Last-Modified`), the tag a
/// later GET gives, so a writer chains its saves on the version it wrote without a read
/// that another write could come before (the directory page's editor does this). With
/// WebDAV and uploads on, as the page runs them.
#[test]
fn a_whole_put_answers_with_the_stored_files_tag() {
    let tree = Tree::new("put-etag");
    put_file(&tree, "doc.txt", b"first\n");
    let server = start(&tree, &["--allow-overwrite"]);
    let addr = server.addr;
    let mut tag = etag(addr, "/doc.txt");
    for round in 0..5 {
        let body = format!("round {round}\n");
        let reply = request(
            addr,
            "PUT",
            "/doc.txt",
            body.as_bytes(),
            &[("If-Match", &tag)],
        );
        assert_eq!(reply.status, 204, "save {round}: {}", text(&reply));
        let answered = reply
            .header("etag")
            .unwrap_or_else(|| panic!("save {round}: a PUT answer without the stored file's ETag"))
            .to_owned();
        assert_ne!(answered, tag, "save {round}: the tag did not change");
        assert!(reply.header("last-modified").is_some(), "save {round}");
        assert_eq!(
            etag(addr, "/doc.txt"),
            answered,
            "save {round}: the answer's tag is not the stored file's"
        );
        assert_eq!(read(&tree.root(), "doc.txt"), Some(body));
        tag = answered;
    }
    // A new file: 201 with its tag too.
    let reply = request(addr, "PUT", "/new.txt", b"new", &[("If-None-Match", "*")]);
    assert_eq!(reply.status, 201, "{}", text(&reply));
    assert_eq!(
        reply.header("etag").map(str::to_owned),
        Some(etag(addr, "/new.txt"))
    );
    // Someone else's write in between: the chained tag is stale, 412, nothing changed.
    std::fs::write(tree.root().join("doc.txt"), b"theirs\n").expect("write");
    let reply = request(addr, "PUT", "/doc.txt", b"mine\n", &[("If-Match", &tag)]);
    assert_eq!(reply.status, 412, "{}", text(&reply));
    assert_eq!(read(&tree.root(), "doc.txt").as_deref(), Some("theirs\n"));
}

const PROPPATCH: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:schemas-microsoft-com:" xmlns:A="http://apple.com/ns/ical/" xmlns:F="http://www.apple.com/webdav_fs/props/">
<D:set><D:prop><Z:Win32LastModifiedTime>Sat, 05 Dec 2026 10:00:00 GMT</Z:Win32LastModifiedTime><Z:Win32FileAttributes>00000020</Z:Win32FileAttributes><A:calendar-color>#FF0000FF</A:calendar-color><F:appledoubleheader>AAUWBwACAAA=</F:appledoubleheader></D:prop></D:set>
</D:propertyupdate>"#;

const LOCKINFO: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>"#;

/// Every write method answers 412 to a false `If-Match`, `If-None-Match` or
/// `If-Unmodified-Since` and changes nothing; with true ones it does its work.
#[test]
fn every_write_method_heeds_the_preconditions() {
    let tree = Tree::new("dav-conditions");
    put_file(&tree, "doc.txt", b"doc");
    put_file(&tree, "dir/member.txt", b"member");
    let server = start(&tree, &["--allow-overwrite"]);
    let addr = server.addr;
    let root = tree.root();
    let wrong = [("If-Match", "\"not-the-tag\"")];
    let stale = [("If-Unmodified-Since", "Thu, 01 Jan 1970 00:00:01 GMT")];
    let tag = etag(addr, "/doc.txt");
    let current = [("If-None-Match", tag.as_str())];
    let dest = "/copy.txt".to_owned();
    let refused = |method: &str, path: &str, body: &[u8], extra: &[(&str, &str)]| {
        let r = request(addr, method, path, body, extra);
        assert_eq!(r.status, 412, "{method} {path} {extra:?}: {}", text(&r));
    };
    for conditions in [&wrong[..], &stale[..], &current[..]] {
        refused("PUT", "/doc.txt", b"new", conditions);
        // A resumable piece is judged like a whole PUT.
        let piece: Vec<(&str, &str)> = conditions
            .iter()
            .copied()
            .chain([("Content-Range", "bytes 0-1/3")])
            .collect();
        refused("PUT", "/doc.txt", b"ne", &piece);
        refused("DELETE", "/doc.txt", b"", conditions);
        if conditions != current {
            // (The collection's tag is not the file's.)
            refused("DELETE", "/dir", b"", conditions);
        }
        let with_dest: Vec<(&str, &str)> = conditions
            .iter()
            .copied()
            .chain([("Destination", dest.as_str())])
            .collect();
        refused("COPY", "/doc.txt", b"", &with_dest);
        refused("MOVE", "/doc.txt", b"", &with_dest);
        refused("PROPPATCH", "/doc.txt", PROPPATCH.as_bytes(), conditions);
        refused("LOCK", "/doc.txt", LOCKINFO.as_bytes(), conditions);
    }
    // A new resource has no representation: If-Match (even `*`) is false.
    refused("PUT", "/new.txt", b"new", &[("If-Match", "*")]);
    refused("MKCOL", "/newdir", b"", &[("If-Match", "*")]);
    refused("LOCK", "/locked-new.txt", LOCKINFO.as_bytes(), &wrong);
    // `If-None-Match: *` on something that exists.
    refused("PUT", "/doc.txt", b"new", &[("If-None-Match", "*")]);
    assert_eq!(read(&root, "doc.txt").as_deref(), Some("doc"));
    assert_eq!(read(&root, "dir/member.txt").as_deref(), Some("member"));
    for absent in ["copy.txt", "new.txt", "newdir", "locked-new.txt"] {
        assert!(!root.join(absent).exists(), "{absent} was created");
    }
    let status = server.status();
    assert_eq!(status["broker"]["dav_locks"], 0, "no lock was granted");
    let props = request(
        addr,
        "PROPFIND",
        "/doc.txt",
        b"<?xml version=\"1.0\"?><D:propfind xmlns:D=\"DAV:\"><D:allprop/></D:propfind>",
        &[("Depth", "0")],
    );
    assert!(
        !text(&props).contains("calendar-color"),
        "PROPPATCH changed nothing"
    );

    // True conditions: the work is done.
    let ok = |method: &str, path: &str, body: &[u8], extra: &[(&str, &str)], want: u16| {
        let r = request(addr, method, path, body, extra);
        assert_eq!(r.status, want, "{method} {path} {extra:?}: {}", text(&r));
    };
    let tag = etag(addr, "/doc.txt");
    ok(
        "PROPPATCH",
        "/doc.txt",
        PROPPATCH.as_bytes(),
        &[("If-Match", &tag)],
        207,
    );
    ok(
        "COPY",
        "/doc.txt",
        b"",
        &[("If-Match", &tag), ("Destination", &dest)],
        201,
    );
    ok("PUT", "/doc.txt", b"v2", &[("If-Match", &tag)], 204);
    let tag = etag(addr, "/doc.txt");
    ok("PUT", "/fresh.txt", b"f", &[("If-None-Match", "*")], 201);
    ok("MKCOL", "/newdir", b"", &[("If-None-Match", "*")], 201);
    let later = "Fri, 01 Jan 2100 00:00:00 GMT";
    ok(
        "DELETE",
        "/copy.txt",
        b"",
        &[("If-Unmodified-Since", later)],
        204,
    );
    let locked = request(
        addr,
        "LOCK",
        "/doc.txt",
        LOCKINFO.as_bytes(),
        &[("If-Match", &tag)],
    );
    assert_eq!(locked.status, 200, "{}", text(&locked));
    assert_eq!(read(&root, "doc.txt").as_deref(), Some("v2"));
    assert!(!root.join("copy.txt").exists());
}

/// The smaller items: `OPTIONS *`, a `Content-Range` PUT over an existing file, and the
/// property namespaces Windows and macOS write.
#[test]
fn options_star_partial_put_reasons_and_vendor_properties() {
    let tree = Tree::new("dav-small");
    put_file(&tree, "doc.txt", b"doc");
    let server = start(&tree, &[]);
    let addr = server.addr;

    let mut conn = Conn::open(addr);
    conn.send(&head("OPTIONS", "*", 0, &[])).expect("send");
    let options = conn.response().expect("an answer");
    assert_eq!(options.status, 200, "{}", text(&options));
    assert!(
        options
            .header("allow")
            .is_some_and(|a| a.contains("PROPFIND")),
        "{:?}",
        options.header("allow")
    );
    assert_eq!(options.header("dav"), Some("1, 2"));

    // Without --allow-overwrite: refused, saying what a Content-Range PUT is.
    let partial = request(
        addr,
        "PUT",
        "/doc.txt",
        b"XY",
        &[("Content-Range", "bytes 0-1/3")],
    );
    assert_eq!(partial.status, 409);
    assert!(
        text(&partial).contains("uploads a whole new file")
            && text(&partial).contains("--allow-overwrite"),
        "{}",
        text(&partial)
    );
    // A piece that does not start where the bytes held end.
    let gap = request(
        addr,
        "PUT",
        "/other.txt",
        b"XY",
        &[("Content-Range", "bytes 1-2/3")],
    );
    assert_eq!(gap.status, 409);
    assert!(
        text(&gap).contains("never changes part of an existing file"),
        "{}",
        text(&gap)
    );
    assert_eq!(read(&tree.root(), "doc.txt").as_deref(), Some("doc"));

    let patched = request(addr, "PROPPATCH", "/doc.txt", PROPPATCH.as_bytes(), &[]);
    assert_eq!(patched.status, 207);
    assert!(
        !text(&patched).contains("HTTP/1.1 4"),
        "every property set: {}",
        text(&patched)
    );
    let found = text(&request(
        addr,
        "PROPFIND",
        "/doc.txt",
        b"<?xml version=\"1.0\"?><D:propfind xmlns:D=\"DAV:\"><D:allprop/></D:propfind>",
        &[("Depth", "0")],
    ));
    for (namespace, value) in [
        (
            "urn:schemas-microsoft-com:",
            "Sat, 05 Dec 2026 10:00:00 GMT",
        ),
        ("urn:schemas-microsoft-com:", "00000020"),
        ("http://apple.com/ns/ical/", "#FF0000FF"),
        ("http://www.apple.com/webdav_fs/props/", "AAUWBwACAAA="),
    ] {
        assert!(
            found.contains(&format!("xmlns:ns0=\"{namespace}\">{value}<")),
            "{namespace} {value} in {found}"
        );
    }
}
