//! WebDAV against the real binary: litmus (all five suites) with four workers, locks that
//! outlive the worker that granted them (a `kill -9`, a recycle and a reload) and expire on
//! time, and a read-only share that says so.
//!
//! litmus is a Debian package (`scripts/debian-packages.txt`); the test fails rather
//! than skips when it is missing, because the gate is that every litmus test passes.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use servery_tests::serde_json::json;
use servery_tests::{FAST, Server, Sig, Tree, run_command, signal_pid, wait_until, worker_pids};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Reply, request};

const LOCKINFO: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner><D:href>mailto:tester@example.com</D:href></D:owner></D:lockinfo>"#;

fn start(tree: &Tree, workers: u32, extra: &[&str]) -> Server {
    let mut args: Vec<&str> = FAST.to_vec();
    args.push("--dav");
    args.extend_from_slice(extra);
    let server = Server::start(tree, workers, &args, &[]);
    server.wait_ready(workers as usize, Duration::from_secs(30));
    server
}

fn lock(addr: SocketAddr, path: &str, timeout: &str) -> Reply {
    request(
        addr,
        "LOCK",
        path,
        LOCKINFO.as_bytes(),
        &[
            ("Timeout", timeout),
            ("Depth", "0"),
            ("Content-Type", "application/xml"),
        ],
    )
}

/// The statuses of `n` PUTs to `path`, each on a new connection (so they spread over the
/// workers).
fn puts(addr: SocketAddr, path: &str, n: usize, extra: &[(&str, &str)]) -> Vec<(u16, Option<u64>)> {
    (0..n)
        .map(|i| {
            let r = request(addr, "PUT", path, format!("attempt {i}").as_bytes(), extra);
            (r.status, r.worker())
        })
        .collect()
}

#[test]
fn litmus_passes_every_suite_with_four_workers() {
    let tree = Tree::new("litmus");
    let server = start(&tree, 4, &["--upload", "--allow-overwrite"]);
    let mut cmd = Command::new("litmus");
    // litmus writes debug.log and child.log where it runs.
    cmd.arg(format!("http://{}/", server.addr))
        .current_dir(tree.root().parent().expect("the tree's directory"));
    assert!(
        Command::new("litmus").arg("--version").output().is_ok(),
        "litmus is needed: apt-get install litmus (scripts/test installs it)"
    );
    let done = run_command(cmd, Duration::from_secs(300));
    let out = format!("{}{}", done.stdout, done.stderr);
    eprintln!("{out}");
    let mut passed = 0;
    for suite in ["basic", "copymove", "props", "locks", "http"] {
        let summary = out
            .lines()
            .find(|l| l.contains(&format!("summary for `{suite}'")))
            .unwrap_or_else(|| panic!("litmus ran no `{suite}` suite:\n{out}"));
        // "<- summary for `basic': of 16 tests run: 16 passed, 0 failed. 100.0%"
        let numbers: Vec<u32> = summary
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        let (run, ok, failed) = (numbers[0], numbers[1], numbers[2]);
        assert_eq!((ok, failed), (run, 0), "{suite}: {summary}");
        passed += ok;
    }
    assert!(
        !out.contains("skipped"),
        "no litmus test may be skipped:\n{out}"
    );
    assert_eq!(passed, 104, "16 + 13 + 30 + 41 + 4 tests");
    assert!(
        done.status.success(),
        "litmus exit status {:?}",
        done.status
    );
}

#[test]
fn a_lock_outlives_its_worker_a_recycle_and_a_reload_and_expires_on_time() {
    let tree = Tree::new("davlock");
    let server = start(&tree, 2, &["--upload", "--allow-overwrite"]);
    let addr = server.addr;
    assert_eq!(request(addr, "PUT", "/doc.txt", b"v1", &[]).status, 201);

    let locked = lock(addr, "/doc.txt", "Second-600");
    assert_eq!(
        locked.status,
        200,
        "{}",
        String::from_utf8_lossy(&locked.body)
    );
    let token = locked.header("lock-token").expect("Lock-Token").to_owned();
    let granted_by = locked.worker().expect("worker header");

    // The worker that granted the lock dies; a replacement takes its slot.
    let status = server.status();
    server.note_pids(&status);
    let pid = status["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["id"].as_u64() == Some(granted_by)))
        .and_then(|w| w["pid"].as_u64())
        .expect("the granting worker is in status") as u32;
    signal_pid(pid, Sig::KILL);
    wait_until(
        Duration::from_secs(20),
        "the killed worker replaced",
        || {
            let (s, _) = server.wait_ready(2, Duration::from_secs(20));
            server.note_pids(&s);
            (!worker_pids(&s).contains(&pid)).then_some(())
        },
    );
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    server.ctl(&json!({"cmd": "reload"})).expect("reload");
    let status = server.status();
    assert_eq!(status["broker"]["dav_locks"], 1, "{status}");

    for (code, worker) in puts(addr, "/doc.txt", 6, &[]) {
        assert_eq!(code, 423, "a PUT without the token, by worker {worker:?}");
    }
    let with_token = format!("({token})");
    for (code, worker) in puts(addr, "/doc.txt", 4, &[("If", &with_token)]) {
        assert_eq!(code, 204, "a PUT with the token, by worker {worker:?}");
    }
    let unlocked = request(addr, "UNLOCK", "/doc.txt", b"", &[("Lock-Token", &token)]);
    assert_eq!(unlocked.status, 204);
    assert_eq!(puts(addr, "/doc.txt", 1, &[])[0].0, 204, "unlocked");

    // A short lock is enforced, then ends by itself.
    let short = lock(addr, "/doc.txt", "Second-2");
    assert_eq!(short.status, 200);
    assert_eq!(puts(addr, "/doc.txt", 1, &[])[0].0, 423);
    let (_, took) = wait_until(Duration::from_secs(10), "the 2 s lock to expire", || {
        (puts(addr, "/doc.txt", 1, &[])[0].0 == 204).then_some(())
    });
    assert!(took < Duration::from_secs(4), "expired after {took:?}");
    assert_eq!(server.status()["broker"]["dav_locks"], 0);
}

#[test]
fn with_a_state_dir_locks_survive_kill_9_of_the_parent_and_a_restart() {
    let tree = Tree::new("davstate");
    let state = tree.root().with_file_name("state");
    let state_arg = state.to_str().expect("utf-8 path").to_owned();
    let extra = ["--upload", "--allow-overwrite", "--state-dir", &state_arg];
    let mut server = start(&tree, 2, &extra);
    assert_eq!(server.status()["broker"]["dav_locks_persistent"], true);
    assert_eq!(
        request(server.addr, "PUT", "/doc.txt", b"v1", &[]).status,
        201
    );
    let locked = lock(server.addr, "/doc.txt", "Second-600");
    assert_eq!(locked.status, 200);
    let token = locked.header("lock-token").expect("Lock-Token").to_owned();
    let short = lock(server.addr, "/hello.txt", "Second-1");
    assert_eq!(short.status, 200);
    server.kill_parent();
    drop(server);

    let server = start(&tree, 2, &extra);
    let addr = server.addr;
    let banner = server.stdout().join("\n");
    assert!(banner.contains("WebDAV locks are journalled"), "{banner}");
    // The 1 s lock came back with what was left of its second, and ends on time.
    wait_until(
        Duration::from_secs(5),
        "the restored 1 s lock to expire",
        || (server.status()["broker"]["dav_locks"] == 1).then_some(()),
    );
    for (code, worker) in puts(addr, "/doc.txt", 4, &[]) {
        assert_eq!(code, 423, "a PUT without the token, by worker {worker:?}");
    }
    let with_token = format!("({token})");
    assert_eq!(puts(addr, "/doc.txt", 1, &[("If", &with_token)])[0].0, 204);
    let unlocked = request(addr, "UNLOCK", "/doc.txt", b"", &[("Lock-Token", &token)]);
    assert_eq!(unlocked.status, 204);
    assert_eq!(puts(addr, "/doc.txt", 1, &[])[0].0, 204);
    assert_eq!(
        puts(addr, "/hello.txt", 1, &[])[0].0,
        204,
        "expired while down"
    );
}

#[test]
fn a_state_dir_inside_the_share_is_a_configuration_error_before_anything_binds() {
    let tree = Tree::new("davstatebad");
    let root = tree.root();
    let inside = root.join("state");
    let done = servery_tests::run_servery(
        &[
            root.to_str().expect("utf-8"),
            "--port",
            "0",
            "--dav",
            "--state-dir",
            inside.to_str().expect("utf-8"),
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("--state-dir") && done.stderr.contains("inside the served directory"),
        "{}",
        done.stderr
    );
    assert!(!done.stdout.contains("listening"), "{}", done.stdout);
    let without_dav = servery_tests::run_servery(
        &[root.to_str().expect("utf-8"), "--state-dir", "/tmp"],
        &[],
        Duration::from_secs(20),
    );
    assert!(!without_dav.status.success(), "--state-dir needs --dav");
}

#[test]
fn every_write_that_would_break_a_lock_is_423_until_the_token_is_submitted() {
    let tree = Tree::new("davevery");
    let server = start(&tree, 2, &["--upload", "--allow-overwrite"]);
    let addr = server.addr;
    assert_eq!(request(addr, "MKCOL", "/dir", b"", &[]).status, 201);
    assert_eq!(request(addr, "PUT", "/dir/a.txt", b"a", &[]).status, 201);
    let locked = lock(addr, "/dir/a.txt", "Second-600");
    assert_eq!(locked.status, 200);
    let token = locked.header("lock-token").expect("Lock-Token").to_owned();
    let submit = format!("({token})");
    let form = "--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"b.txt\"\r\n\r\nform\r\n--XyZ--\r\n";
    let proppatch = r#"<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x:k xmlns:x="urn:x">v</x:k></D:prop></D:set></D:propertyupdate>"#;
    /// Method, path, body and extra headers of one write.
    type Write<'a> = (&'a str, &'a str, &'a [u8], Vec<(&'a str, String)>);
    let cases: Vec<Write> = vec![
        ("PUT", "/dir/a.txt", b"b", vec![]),
        ("DELETE", "/dir/a.txt", b"", vec![]),
        ("DELETE", "/dir", b"", vec![]),
        ("PROPPATCH", "/dir/a.txt", proppatch.as_bytes(), vec![]),
        (
            "MOVE",
            "/dir/a.txt",
            b"",
            vec![("Destination", "/moved.txt".into())],
        ),
        ("MOVE", "/dir", b"", vec![("Destination", "/dir2".into())]),
        (
            "COPY",
            "/hello.txt",
            b"",
            vec![("Destination", "/dir/a.txt".into())],
        ),
        (
            "POST",
            "/dir/",
            form.as_bytes(),
            vec![("Content-Type", "multipart/form-data; boundary=XyZ".into())],
        ),
    ];
    for (method, path, body, headers) in &cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let refused = request(addr, method, path, body, &headers);
        assert_eq!(refused.status, 423, "{method} {path} without the token");
        assert!(
            String::from_utf8_lossy(&refused.body).contains("lock-token-submitted"),
            "{method} {path}: {}",
            String::from_utf8_lossy(&refused.body)
        );
    }
    assert_eq!(
        std::fs::read(tree.root().join("dir/a.txt")).expect("intact"),
        b"a"
    );
    // With the token, the same writes go through (the last one moves the collection).
    let with: Vec<(&str, &str)> = vec![("If", &submit)];
    assert_eq!(request(addr, "PUT", "/dir/a.txt", b"b", &with).status, 204);
    assert_eq!(
        request(addr, "PROPPATCH", "/dir/a.txt", proppatch.as_bytes(), &with).status,
        207
    );
    // For a collection, the token goes tagged with the locked member's URL: an untagged
    // list is about the request's own resource, which no lock names (so it is false: 412).
    let tagged = format!("</dir/a.txt> ({token})");
    let multipart = ("Content-Type", "multipart/form-data; boundary=XyZ");
    let untagged_post = [("If", submit.as_str()), multipart];
    let post = [("If", tagged.as_str()), multipart];
    let status =
        |headers: &[(&str, &str)]| request(addr, "POST", "/dir/", form.as_bytes(), headers).status;
    assert_eq!(status(&untagged_post), 412);
    assert_eq!(status(&post), 303);
    let moved = request(
        addr,
        "MOVE",
        "/dir",
        b"",
        &[("If", &tagged), ("Destination", "/dir2")],
    );
    assert_eq!(moved.status, 201);
    assert_eq!(
        server.status()["broker"]["dav_locks"],
        0,
        "a MOVE ends the locks rooted at or below its source"
    );
}

#[test]
fn a_read_only_share_answers_dav_reads_and_refuses_writes() {
    let tree = Tree::new("davro");
    let server = start(&tree, 1, &[]);
    let addr = server.addr;
    let banner = server.stdout().join("\n");
    assert!(banner.contains("WebDAV locks are volatile"), "{banner}");
    assert_eq!(server.status()["broker"]["dav_locks_persistent"], false);
    let options = request(addr, "OPTIONS", "/", b"", &[]);
    assert_eq!(options.header("dav"), Some("1, 2"));
    let listing = request(addr, "PROPFIND", "/", b"", &[("Depth", "1")]);
    assert_eq!(listing.status, 207);
    let text = String::from_utf8_lossy(&listing.body);
    assert!(text.contains("<D:href>/hello.txt</D:href>"), "{text}");
    for method in ["PUT", "DELETE", "MKCOL", "PROPPATCH"] {
        let refused = request(addr, method, "/hello.txt", b"", &[]);
        assert_eq!(refused.status, 403, "{method}");
        assert!(
            String::from_utf8_lossy(&refused.body).contains("read-only"),
            "{method} says why"
        );
    }
    // Locking an existing file is not a write; locking an unmapped URL would create one.
    assert_eq!(lock(addr, "/hello.txt", "Second-5").status, 200);
    assert_eq!(lock(addr, "/new.txt", "Second-5").status, 403);
}

/// `rclone` with the WebDAV server as its remote, configured through the environment.
fn rclone(server: &Server, args: &[&str]) -> servery_tests::Finished {
    let mut cmd = Command::new("rclone");
    cmd.args(args)
        .env("RCLONE_CONFIG", "/dev/null")
        .env("RCLONE_CONFIG_SRV_TYPE", "webdav")
        .env("RCLONE_CONFIG_SRV_URL", format!("http://{}/", server.addr))
        .env("RCLONE_CONFIG_SRV_VENDOR", "other");
    let done = run_command(cmd, Duration::from_secs(300));
    assert!(
        done.status.success(),
        "rclone {args:?}: {}\n{}",
        done.stdout,
        done.stderr
    );
    done
}

#[test]
fn rclone_copies_checks_moves_and_deletes_a_tree_of_a_thousand_files() {
    assert!(
        Command::new("rclone").arg("version").output().is_ok(),
        "rclone is needed: apt-get install rclone (scripts/test installs it)"
    );
    let tree = Tree::new("rclone");
    let server = start(&tree, 4, &["--upload", "--allow-overwrite"]);
    let local = tree.root().with_file_name("rclone-source");
    for i in 0..1000 {
        let dir = local.join(format!("d{}/e{}", i % 10, i % 7));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let content = format!("file {i}\n").repeat(i % 50 + 1);
        std::fs::write(dir.join(format!("f{i}.txt")), content).expect("write");
    }
    let source = local.to_str().expect("utf-8 path");
    rclone(&server, &["copy", source, "srv:tree", "--transfers", "8"]);
    let checked = rclone(&server, &["check", source, "srv:tree"]);
    assert!(
        checked.stderr.contains("1000 matching files"),
        "{}",
        checked.stderr
    );
    rclone(&server, &["moveto", "srv:tree/d1", "srv:tree/moved1"]);
    rclone(&server, &["purge", "srv:tree/d2"]);
    std::fs::rename(local.join("d1"), local.join("moved1")).expect("mv");
    std::fs::remove_dir_all(local.join("d2")).expect("rm");
    let checked = rclone(&server, &["check", source, "srv:tree"]);
    assert!(
        checked.stderr.contains("0 differences found")
            && checked.stderr.contains("900 matching files"),
        "{}",
        checked.stderr
    );
    assert!(!tree.root().join("tree/d1").exists() && !tree.root().join("tree/d2").exists());
    let _ = std::fs::remove_dir_all(&local);
}

#[test]
fn a_scripted_cadaver_session_puts_copies_moves_locks_and_sets_properties() {
    use std::io::Write;
    use std::process::Stdio;
    assert!(
        Command::new("cadaver").arg("--version").output().is_ok(),
        "cadaver is needed: apt-get install cadaver (scripts/test installs it)"
    );
    let tree = Tree::new("cadaver");
    let server = start(&tree, 2, &["--upload", "--allow-overwrite"]);
    let local = tree.root().with_file_name("cadaver.txt");
    std::fs::write(&local, "from cadaver\n").expect("write");
    let local = local.to_str().expect("utf-8 path");
    let script = format!(
        "put {local} a.txt\nmkcol dir\ncopy a.txt dir/b.txt\nmove dir/b.txt dir/c.txt\n\
         lock a.txt\nput {local} a.txt\nunlock a.txt\npropset a.txt color blue\n\
         propget a.txt color\nquit\n"
    );
    let mut child = Command::new("cadaver")
        .arg(format!("http://{}/", server.addr))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cadaver");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("script");
    let (out, _) = wait_until(Duration::from_secs(60), "cadaver to finish", || {
        child.try_wait().ok().flatten()
    });
    let output = child.wait_with_output().expect("output");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(out.success(), "{text}");
    for step in [
        "Uploading",
        "Creating `dir'",
        "Copying",
        "Moving",
        "Locking `a.txt'",
        "Unlocking `a.txt'",
        "Setting property",
    ] {
        let line = text
            .lines()
            .find(|l| l.contains(step))
            .unwrap_or_else(|| panic!("no {step:?} in:\n{text}"));
        assert!(line.contains("succeeded"), "{line}\n{text}");
    }
    assert!(text.contains("Value of color is: blue"), "{text}");
    // A Depth 1 listing carries each member's dead properties too.
    let listing = request(server.addr, "PROPFIND", "/", b"", &[("Depth", "1")]);
    assert_eq!(listing.status, 207);
    let xml = String::from_utf8_lossy(&listing.body);
    assert!(
        xml.contains("<D:href>/a.txt</D:href>") && xml.contains(">blue<"),
        "{xml}"
    );
    assert_eq!(
        std::fs::read_to_string(tree.root().join("dir/c.txt")).expect("moved"),
        "from cadaver\n"
    );
    assert!(!tree.root().join("dir/b.txt").exists());
}

/// `curl -s -D - -X PROPFIND` of `path` with `extra` arguments: the headers (lower-case)
/// and the body as curl gives it (decoded with `--compressed`).
fn propfind_curl(addr: SocketAddr, path: &str, extra: &[&str]) -> (String, Vec<u8>) {
    let mut args = vec!["-X", "PROPFIND"];
    args.extend_from_slice(extra);
    servery_tests::curl_head_and_body(&format!("http://{addr}{path}"), &args)
}

/// The `<D:href>` values of a multistatus answer, sorted.
fn hrefs(xml: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(xml);
    let mut found: Vec<String> = text
        .split("<D:href>")
        .skip(1)
        .filter_map(|s| s.split("</D:href>").next())
        .map(str::to_owned)
        .collect();
    found.sort();
    found
}

#[test]
fn propfind_answers_are_compressed_as_the_client_accepts() {
    let tree = Tree::new("dav-compressed");
    let folder = tree.root().join("many");
    std::fs::create_dir_all(folder.join("sub")).expect("mkdir");
    for i in 0..3000 {
        std::fs::write(folder.join(format!("file-{i:05}.txt")), b"x").expect("write");
    }
    let server = start(&tree, 1, &[]);
    let addr = server.addr;
    // Depth 1 (streamed) and Depth infinity (whole), each plain and in every coding.
    for depth in ["1", "infinity"] {
        let depth_header = format!("Depth: {depth}");
        let (head, plain) = propfind_curl(addr, "/many/", &["-H", &depth_header]);
        assert!(head.starts_with("http/1.1 207"), "{head}");
        assert!(!head.contains("content-encoding"), "not asked: {head}");
        assert!(head.contains("vary: accept-encoding"), "{head}");
        let want = hrefs(&plain);
        assert_eq!(want.len(), 3002, "the folder, its files and sub/");
        for coding in ["gzip", "br", "zstd"] {
            let accept = format!("Accept-Encoding: {coding}");
            let (head, raw) = propfind_curl(addr, "/many/", &["-H", &depth_header, "-H", &accept]);
            assert!(
                head.contains(&format!("content-encoding: {coding}")),
                "Depth {depth}, {coding}: {head}"
            );
            assert!(
                raw.len() * 5 < plain.len(),
                "Depth {depth}, {coding}: {} bytes for {} plain",
                raw.len(),
                plain.len()
            );
            let (_, decoded) = propfind_curl(
                addr,
                "/many/",
                &["-H", &depth_header, "-H", &accept, "--compressed"],
            );
            let got = hrefs(&decoded);
            assert!(
                got == want,
                "Depth {depth}, {coding}: the decoded answer names {} resources, the plain one {} (first difference: {:?})",
                got.len(),
                want.len(),
                got.iter().zip(&want).find(|(a, b)| a != b)
            );
        }
    }
}

/// A MOVE (or COPY) over a locked file, made by the holder with its token, keeps the
/// holder's lock on the destination (decision 0088, as Apache mod_dav): davfs2 saves
/// `sed -i` by moving a temporary file over the locked original, then refreshes that lock
/// and uploads through it. Without the token the replace is 423; the source's lock ends
/// with the move; a lock the request did not submit (on a member of a replaced
/// collection) ends too.
#[test]
fn a_move_over_a_locked_file_by_its_holder_keeps_the_holders_lock() {
    let tree = Tree::new("davkeep");
    let server = start(&tree, 2, &["--upload", "--allow-overwrite"]);
    let addr = server.addr;
    assert_eq!(request(addr, "PUT", "/n.txt", b"old", &[]).status, 201);
    assert_eq!(request(addr, "PUT", "/tmp1", b"new", &[]).status, 201);
    let token_of = |path: &str| {
        let r = lock(addr, path, "Second-600");
        assert_eq!(r.status, 200, "LOCK {path}");
        r.header("lock-token").expect("Lock-Token").to_owned()
    };
    let kept = token_of("/n.txt");
    let source = token_of("/tmp1");
    let both = format!("<{}> ({kept}) <{}> ({source})", "/n.txt", "/tmp1");
    let only_source = format!("<{}> ({source})", "/tmp1");
    let moving = |ifs: &str| {
        request(
            addr,
            "MOVE",
            "/tmp1",
            b"",
            &[("Destination", "/n.txt"), ("Overwrite", "T"), ("If", ifs)],
        )
        .status
    };
    assert_eq!(
        moving(&only_source),
        423,
        "a replace without the destination's token"
    );
    assert_eq!(moving(&both), 204);
    assert_eq!(
        std::fs::read(tree.root().join("n.txt")).expect("moved"),
        b"new"
    );
    assert_eq!(
        server.status()["broker"]["dav_locks"],
        1,
        "the source's lock ends with the move and the holder's lock on the destination stays"
    );
    let refreshed = request(
        addr,
        "LOCK",
        "/n.txt",
        b"",
        &[("If", &format!("({kept})")), ("Timeout", "Second-600")],
    );
    assert_eq!(
        refreshed.status, 200,
        "lock-keeping rule: the holder's lock on a file its MOVE replaced can be refreshed"
    );
    let with = format!("({kept})");
    assert_eq!(request(addr, "PUT", "/n.txt", b"saved", &[]).status, 423);
    assert_eq!(
        request(addr, "PUT", "/n.txt", b"saved", &[("If", &with)]).status,
        204
    );
    assert_eq!(
        request(addr, "UNLOCK", "/n.txt", b"", &[("Lock-Token", &kept)]).status,
        204
    );
    // A collection replaced by COPY: the lock on its member (not submitted) ends.
    assert_eq!(request(addr, "MKCOL", "/d", b"", &[]).status, 201);
    assert_eq!(request(addr, "PUT", "/d/m.txt", b"m", &[]).status, 201);
    assert_eq!(request(addr, "MKCOL", "/e", b"", &[]).status, 201);
    let member = token_of("/d/m.txt");
    let copied = request(
        addr,
        "COPY",
        "/e",
        b"",
        &[
            ("Destination", "/d"),
            ("Overwrite", "T"),
            ("If", &format!("<{}> ({member})", "/d/m.txt")),
        ],
    );
    assert_eq!(copied.status, 204);
    assert_eq!(
        server.status()["broker"]["dav_locks"],
        0,
        "a lock below a replaced collection ends with it"
    );
}
