//! The operator's deny list (`--deny`, decision 0078, issue 37): names never served,
//! listed, searched, archived or written, at any depth, even with hidden files shown and
//! writes on; a pattern that is not a name is a configuration error before anything is
//! bound.

use std::fs;
use std::time::Duration;

use servery_tests::{FAST, Server, Tree, curl, run_servery};

/// What the tree holds beside `hello.txt`: a repository folder, keys and an env file,
/// at the top and deeper.
fn plant(tree: &Tree) {
    let root = tree.root();
    fs::create_dir_all(root.join(".git/objects")).expect("mkdir");
    fs::write(root.join(".git/config"), "[core]\n").expect("write");
    fs::create_dir_all(root.join("site/conf")).expect("mkdir");
    fs::write(root.join("site/conf/server.key"), "PRIVATE KEY NEEDLE\n").expect("write");
    fs::write(root.join("site/conf/server.crt"), "CERT NEEDLE\n").expect("write");
    fs::write(root.join("site/.env"), "PASSWORD=NEEDLE\n").expect("write");
    fs::write(root.join("site/index.html"), "<p>NEEDLE</p>\n").expect("write");
}

fn start(tree: &Tree) -> Server {
    let mut args = FAST.to_vec();
    args.extend([
        "--deny",
        ".git,*.key",
        "--deny",
        ".env",
        "--show-hidden",
        "--dav",
        "--upload",
        "--allow-overwrite",
    ]);
    Server::start(tree, 2, &args, &[])
}

#[test]
fn denied_names_are_never_served_listed_searched_archived_or_written() {
    let tree = Tree::new("deny-list");
    plant(&tree);
    let server = start(&tree);
    let addr = server.addr;

    // Read: as if absent, at any depth; the neighbours are served.
    for path in [
        "/.git/config",
        "/.git/",
        "/site/conf/server.key",
        "/site/.env",
        "/site/conf/../conf/server.key",
        "/site/conf/server%2ekey",
    ] {
        assert_eq!(curl(addr, path, &[]).status, 404, "GET {path}");
    }
    assert_eq!(curl(addr, "/site/conf/server.crt", &[]).status, 200);
    assert_eq!(curl(addr, "/site/index.html", &[]).status, 200);

    // Listings: the page, its JSON form and PROPFIND name none of them.
    let page = String::from_utf8_lossy(&curl(addr, "/site/conf/", &[]).body).into_owned();
    assert!(page.contains("server.crt"), "{page}");
    assert!(!page.contains("server.key"), "listed: {page}");
    let top = String::from_utf8_lossy(&curl(addr, "/", &[]).body).into_owned();
    assert!(!top.contains(".git"), "listed: {top}");
    let dav = curl(addr, "/site/", &["-X", "PROPFIND", "-H", "Depth: infinity"]);
    let dav = String::from_utf8_lossy(&dav.body).into_owned();
    assert!(dav.contains("index.html"), "{dav}");
    for name in [".env", "server.key"] {
        assert!(!dav.contains(name), "PROPFIND names {name}: {dav}");
    }

    // Search (by name): the allowed neighbour is found, the denied names are not.
    let found = String::from_utf8_lossy(&curl(addr, "/?q=server", &[]).body).into_owned();
    assert!(found.contains("server.crt"), "{found}");
    assert!(
        !found.contains("server.key"),
        "search found server.key: {found}"
    );
    for (query, name) in [("env", ".env"), ("git", ".git")] {
        let found =
            String::from_utf8_lossy(&curl(addr, &format!("/?q={query}"), &[]).body).into_owned();
        assert!(!found.contains(name), "search found {name}: {found}");
    }

    // Archive of the whole tree: the denied members are not in it.
    let archive = tree.root().join("../deny-archive.tar.gz");
    let a = curl(
        addr,
        "/?archive=tar.gz",
        &["-o", archive.to_str().expect("utf-8 path")],
    );
    assert_eq!(a.status, 200);
    let listing = std::process::Command::new("tar")
        .arg("-tzf")
        .arg(&archive)
        .output()
        .expect("tar");
    let members = String::from_utf8_lossy(&listing.stdout).into_owned();
    assert!(members.contains("server.crt"), "{members}");
    for name in [".git", ".env", "server.key"] {
        assert!(!members.contains(name), "archived {name}: {members}");
    }

    // Writes: refused, nothing created; an allowed neighbour is written.
    for path in ["/site/new.key", "/.git/HEAD", "/.env"] {
        let put = curl(addr, path, &["-X", "PUT", "--data-binary", "x"]);
        assert_eq!(put.status, 404, "PUT {path}");
    }
    assert!(!tree.root().join("site/new.key").exists());
    assert!(!tree.root().join(".env").exists());
    let mkcol = curl(addr, "/site/.git", &["-X", "MKCOL"]);
    assert!(
        matches!(mkcol.status, 403 | 404),
        "MKCOL .git: {}",
        mkcol.status
    );
    assert!(!tree.root().join("site/.git").exists());
    let moved = curl(
        addr,
        "/site/conf/server.crt",
        &["-X", "MOVE", "-H", "Destination: /site/conf/stolen.key"],
    );
    assert!(
        matches!(moved.status, 403 | 404),
        "MOVE onto a denied name: {}",
        moved.status
    );
    assert!(tree.root().join("site/conf/server.crt").exists());
    assert_eq!(
        curl(addr, "/site/fine.txt", &["-X", "PUT", "--data-binary", "x"]).status,
        201
    );
    // The denied files themselves are untouched.
    assert_eq!(
        fs::read_to_string(tree.root().join("site/conf/server.key")).expect("read"),
        "PRIVATE KEY NEEDLE\n"
    );
}

#[test]
fn a_pattern_that_is_not_a_name_is_refused_before_anything_is_bound() {
    let tree = Tree::new("deny-bad");
    let root = tree.root();
    let root = root.to_str().expect("utf-8 path");
    for (bad, says) in [
        ("conf/server.key", "'/'"),
        ("**", "every name"),
        ("", "empty"),
    ] {
        let run = run_servery(
            &["--deny", bad, "--check-config", root],
            &[],
            Duration::from_secs(20),
        );
        assert!(!run.status.success(), "--deny {bad:?} accepted");
        assert!(
            run.stderr.contains("--deny") && run.stderr.contains(says),
            "--deny {bad:?}: {}",
            run.stderr
        );
    }
}
