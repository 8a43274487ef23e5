//! What everyday WebDAV clients do, against the real binary: rclone copying and syncing
//! trees that hold dot-files (decision 0063), a folder too large for the Depth-infinity
//! cap listed at Depth 1, and many chunked uploads at once within the byte budget
//! (decision 0064), and a session of webdav4, a Python client.
//!
//! rclone is a Debian package (`scripts/debian-packages.txt`); the tests that need it fail
//! rather than skip when it is missing.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use servery_tests::{FAST, Finished, Server, Tree, run_command, wait_until};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Conn, request};

fn start(tree: &Tree, workers: u32, extra: &[&str]) -> Server {
    let mut args: Vec<&str> = FAST.to_vec();
    args.push("--dav");
    args.extend_from_slice(extra);
    let server = Server::start(tree, workers, &args, &[]);
    server.wait_ready(workers as usize, Duration::from_secs(30));
    server
}

/// `rclone` with an on-the-fly WebDAV remote (`:webdav,url=…:path`), no configuration
/// file; `args` name the remote as `{R}`.
fn rclone(server: &Server, args: &[&str]) -> Finished {
    assert!(
        Command::new("rclone").arg("version").output().is_ok(),
        "rclone is needed: apt-get install rclone (scripts/test installs it)"
    );
    let remote = format!(":webdav,url='http://{}/',vendor=other:", server.addr);
    let mut cmd = Command::new("rclone");
    cmd.args(args.iter().map(|a| a.replace("{R}", &remote)))
        .env("RCLONE_CONFIG", "/dev/null");
    let done = run_command(cmd, Duration::from_secs(600));
    assert!(
        done.status.success(),
        "rclone {args:?}: {}\n{}",
        done.stdout,
        done.stderr
    );
    done
}

/// curl's status and body for one request (`-X METHOD`, headers as `-H`); curl decodes
/// a chunked answer, as every client does.
fn curl(server: &Server, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-X", method, "-w", "\n%{http_code}"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    cmd.arg(format!("http://{}{path}", server.addr));
    let done = run_command(cmd, Duration::from_secs(120));
    assert!(
        done.status.success(),
        "curl {method} {path}: {}",
        done.stderr
    );
    let (body, code) = done.stdout.rsplit_once('\n').expect("status line");
    (code.trim().parse().expect("status"), body.to_owned())
}

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, content).expect("write");
}

/// A tree as a developer's or a Mac's folder holds it: dot-files beside plain ones.
const DOT_TREE: [(&str, &str); 7] = [
    (".gitignore", "target/\n"),
    (".config/app.toml", "x = 1\n"),
    ("src/.keep", ""),
    ("src/main.rs", "fn main() {}\n"),
    ("._photo.jpg", "apple double\n"),
    (".DS_Store", "finder\n"),
    ("photo.jpg", "jpeg\n"),
];

#[test]
fn rclone_copies_and_syncs_a_tree_with_dot_files_to_a_writable_share() {
    let tree = Tree::new("dots");
    let server = start(&tree, 2, &["--upload", "--allow-overwrite"]);
    let local = tree.dir.join("source");
    for (name, content) in DOT_TREE {
        write(&local.join(name), content);
    }
    let source = local.to_str().expect("utf-8 path");
    rclone(&server, &["copy", source, "{R}copy", "--transfers", "4"]);
    for (name, content) in DOT_TREE {
        let stored = std::fs::read_to_string(tree.root().join("copy").join(name));
        assert_eq!(stored.ok().as_deref(), Some(content), "{name} stored");
    }
    // rclone lists what it copied (PROPFIND Depth 1 shows dot-files) and finds no change.
    let checked = rclone(&server, &["check", source, "{R}copy"]);
    assert!(
        checked.stderr.contains("7 matching files"),
        "{}",
        checked.stderr
    );
    // A sync that deletes a dot-file and edits another.
    std::fs::remove_file(local.join(".DS_Store")).expect("rm");
    write(&local.join(".gitignore"), "target/\n*.log\n");
    rclone(&server, &["sync", source, "{R}copy"]);
    assert!(!tree.root().join("copy/.DS_Store").exists());
    assert_eq!(
        std::fs::read_to_string(tree.root().join("copy/.gitignore"))
            .ok()
            .as_deref(),
        Some("target/\n*.log\n")
    );
    // Plain HTTP sees the same files.
    let got = request(server.addr, "GET", "/copy/.config/app.toml", b"", &[]);
    assert_eq!((got.status, got.body.as_slice()), (200, &b"x = 1\n"[..]));
}

#[test]
fn servery_own_names_stay_private_on_a_writable_share_and_dot_files_hidden_on_a_read_only_one() {
    let tree = Tree::new("private");
    std::fs::write(tree.root().join(".servery-tmp-1-planted"), "private").expect("write");
    std::fs::write(tree.root().join(".env"), "SECRET=1\n").expect("write");
    let server = start(&tree, 1, &["--upload"]);
    let put = request(server.addr, "PUT", "/.servery-props.x", b"mine", &[]);
    assert_eq!(put.status, 404, "a private name is never written");
    assert!(!tree.root().join(".servery-props.x").exists());
    let got = request(server.addr, "GET", "/.servery-tmp-1-planted", b"", &[]);
    assert_eq!(got.status, 404, "a private name is never served");
    let (status, text) = curl(&server, "PROPFIND", "/", &["Depth: 1"]);
    assert_eq!(status, 207);
    assert!(text.contains("/.env<"), "dot-files listed: {text}");
    assert!(!text.contains(".servery-"), "private names listed: {text}");
    drop(server);

    let server = start(&tree, 1, &[]);
    let got = request(server.addr, "GET", "/.env", b"", &[]);
    assert_eq!(got.status, 404, "a read-only share keeps hiding dot-files");
    let (status, text) = curl(&server, "PROPFIND", "/", &["Depth: 1"]);
    assert_eq!(status, 207);
    assert!(
        !text.contains(".env") && text.contains("hello.txt"),
        "{text}"
    );
}

/// Makes `n` small files `f00000…` in `dir`.
fn fill(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for i in 0..n {
        std::fs::write(dir.join(format!("f{i:05}")), format!("{i}\n")).expect("write");
    }
}

#[test]
fn a_folder_of_twenty_thousand_entries_lists_at_depth_one_and_syncs() {
    const N: usize = 20_000;
    let tree = Tree::new("big-folder");
    fill(&tree.root().join("big"), N);
    let server = start(&tree, 2, &["--upload", "--allow-overwrite"]);
    // Depth 1: every member, past the Depth-infinity cap (10,000 by default).
    let (status, text) = curl(&server, "PROPFIND", "/big/", &["Depth: 1"]);
    assert_eq!(status, 207);
    assert_eq!(
        text.matches("<D:response>").count(),
        N + 1,
        "members and the folder"
    );
    assert!(text.ends_with("</D:multistatus>"), "a whole document");
    // Depth infinity keeps its cap.
    let (status, text) = curl(&server, "PROPFIND", "/big/", &["Depth: infinity"]);
    assert_eq!(status, 403);
    assert!(text.contains("propfind-finite-depth"), "{text}");

    let lsf = rclone(&server, &["lsf", "{R}big"]);
    assert_eq!(lsf.stdout.lines().count(), N, "rclone lsf sees every file");
    // The same folder on this side; one file gone, one new: sync moves just those.
    let local = tree.dir.join("local-big");
    fill(&local, N);
    std::fs::remove_file(local.join("f00007")).expect("rm");
    std::fs::write(local.join("new.txt"), "new\n").expect("write");
    let source = local.to_str().expect("utf-8 path");
    rclone(&server, &["sync", source, "{R}big", "--size-only"]);
    assert!(!tree.root().join("big/f00007").exists());
    assert!(tree.root().join("big/new.txt").exists());
    let checked = rclone(&server, &["check", source, "{R}big", "--size-only"]);
    assert!(
        checked.stderr.contains(&format!("{N} matching files")),
        "{}",
        checked.stderr
    );
}

const MIB: usize = 1024 * 1024;

/// The broker's reserved (count, bytes), from `ctl status`.
fn reserved(server: &Server) -> (u64, u64) {
    let r = &server.status()["broker"]["reservations"];
    (
        r["count"].as_u64().expect("count"),
        r["bytes"].as_u64().expect("bytes"),
    )
}

/// A chunked PUT whose head and first `first` bytes are sent; the rest is up to the caller.
fn start_chunked_put(server: &Server, path: &str, first: usize, hint: Option<usize>) -> Conn {
    let mut c = Conn::open(server.addr);
    let mut head =
        format!("PUT {path} HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n");
    if let Some(n) = hint {
        head.push_str(&format!("X-Expected-Entity-Length: {n}\r\n"));
    }
    head.push_str("\r\n");
    c.send(head.as_bytes()).expect("head");
    send_chunk(&mut c, first);
    c
}

fn send_chunk(c: &mut Conn, n: usize) {
    let mut chunk = format!("{n:x}\r\n").into_bytes();
    chunk.extend(std::iter::repeat_n(b'u', n));
    chunk.extend_from_slice(b"\r\n");
    c.send(&chunk).expect("chunk");
}

/// Sends `rest` more bytes in 1 MiB chunks and ends the body; the answer's status.
fn finish_chunked_put(mut c: Conn, rest: usize) -> u16 {
    let mut left = rest;
    while left > 0 {
        let n = left.min(MIB);
        send_chunk(&mut c, n);
        left -= n;
    }
    c.send(b"0\r\n\r\n").expect("end");
    c.response().expect("answer").status
}

#[test]
fn thirty_two_chunked_uploads_of_ten_mib_at_once_fit_the_default_budget() {
    const UPLOADS: usize = 32;
    let tree = Tree::new("budget");
    std::fs::create_dir(tree.root().join("up")).expect("mkdir");
    let server = start(&tree, 4, &["--upload"]);
    // Every upload is under way, holding its reservation, before any of them ends: the
    // default budget (8 GiB) once admitted eight of these (1 GiB each) and refused the ninth.
    // Half announce their length, as Finder does.
    let conns: Vec<Conn> = (0..UPLOADS)
        .map(|i| {
            let hint = (i % 2 == 0).then_some(10 * MIB);
            start_chunked_put(&server, &format!("/up/f{i}"), MIB, hint)
        })
        .collect();
    let (held, _) = wait_until(Duration::from_secs(30), "32 reservations", || {
        let r = reserved(&server);
        (r.0 == UPLOADS as u64).then_some(r)
    });
    // Hinted: 10 MiB each; not: the 8 MiB first step.
    assert_eq!(held.1, (16 * 10 * MIB + 16 * 8 * MIB) as u64);
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let running: Vec<_> = conns
            .into_iter()
            .map(|c| s.spawn(move || finish_chunked_put(c, 9 * MIB)))
            .collect();
        running
            .into_iter()
            .map(|t| t.join().expect("upload"))
            .collect()
    });
    assert!(statuses.iter().all(|&s| s == 201), "{statuses:?}");
    for i in 0..UPLOADS {
        let len = std::fs::metadata(tree.root().join(format!("up/f{i}"))).map(|m| m.len() as usize);
        assert_eq!(len.ok(), Some(10 * MIB), "f{i}");
    }
    wait_until(Duration::from_secs(10), "reservations given back", || {
        (reserved(&server) == (0, 0)).then_some(())
    });
}

#[test]
fn an_upload_that_outgrows_the_budget_fails_cleanly_and_the_others_go_on() {
    let tree = Tree::new("outgrow");
    std::fs::create_dir(tree.root().join("up")).expect("mkdir");
    // A 64 MiB budget (and so a 64 MiB largest upload).
    let server = start(&tree, 2, &["--upload", "--max-upload-bytes", "67108864"]);
    // One upload holds its first 8 MiB step.
    let holder = start_chunked_put(&server, "/up/small", MIB, None);
    wait_until(Duration::from_secs(10), "the first reservation", || {
        (reserved(&server) == (1, 8 * MIB as u64)).then_some(())
    });
    // Another, 60 MiB sent chunked, can grow to 56 MiB and no further.
    let big = tree.dir.join("big.bin");
    std::fs::write(&big, vec![b'b'; 60 * MIB]).expect("write");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T"])
        .arg(&big)
        .args(["-H", "Transfer-Encoding: chunked"])
        .arg(format!("http://{}/up/big", server.addr));
    let done = run_command(cmd, Duration::from_secs(120));
    assert_eq!(done.stdout.trim(), "503", "{}", done.stderr);
    assert!(!tree.root().join("up/big").exists(), "nothing published");
    // Its reservation is given back; the holder's stays.
    wait_until(
        Duration::from_secs(10),
        "the refused upload's reservation back",
        || (reserved(&server) == (1, 8 * MIB as u64)).then_some(()),
    );
    assert_eq!(finish_chunked_put(holder, MIB), 201);
    // Only the finished upload is there: the refused one left no temporary file.
    let names: Vec<_> = std::fs::read_dir(tree.root().join("up"))
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["small"]);
    assert_eq!(
        std::fs::metadata(tree.root().join("up/small"))
            .map(|m| m.len())
            .ok(),
        Some(2 * MIB as u64)
    );
}

/// webdav4 (PyPI), a Python WebDAV client: folders, uploads (a dot-file among them),
/// listing with sizes and tags, downloads and ranged reads, copy, move (a file and a
/// folder), a refused upload over an existing file, overwrite and removal, with four
/// workers (`tests/clients/webdav4_session.py`, which checks the served tree on disk).
#[test]
fn a_webdav4_session_writes_reads_and_moves_through_four_workers() {
    let imports = Command::new("python3")
        .args(["-c", "import webdav4"])
        .status();
    assert!(
        imports.is_ok_and(|s| s.success()),
        "python3 cannot import webdav4: pip install webdav4 (scripts/python-packages.txt)"
    );
    let tree = Tree::new("webdav4");
    let server = start(&tree, 4, &["--upload", "--allow-overwrite"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/webdav4_session.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .arg(format!("http://{}/", server.addr))
        .arg(tree.root());
    let done = run_command(cmd, Duration::from_secs(120));
    assert!(
        done.status.success(),
        "webdav4 session failed\n--- stdout\n{}\n--- stderr\n{}\n--- servery\n{}",
        done.stdout,
        done.stderr,
        server.stderr()
    );
}
