//! The served directory against the real binary (docs/operations.md, "The served
//! directory and deploys", decision 0058): a root that does not exist, is not a directory
//! or cannot be read by servery's user is refused at start (exit 2, before binding), and a
//! root replaced while servery runs — a `current -> releases/N` link flipped, or the
//! directory deleted and copied again — is served to every request that arrives a look
//! interval (1 ms) after the swap.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use servery::served_root::LOOK_INTERVAL;

use servery_tests::*;

const BOUND: Duration = Duration::from_secs(20);

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The body of `GET path`, which must answer 200.
fn body(server: &Server, path: &str) -> String {
    let (status, body) = http_get(server.addr, path).expect("GET");
    assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
    String::from_utf8(body).expect("utf-8 body")
}

/// Every one of `n` requests (each on a connection of its own, so any worker may take
/// it) answers `expected`.
fn every_request_answers(server: &Server, path: &str, expected: &str, n: usize) {
    for i in 0..n {
        assert_eq!(body(server, path), expected, "request {i} after the swap");
    }
}

/// Waits until a look a worker made before the swap made at `at` stands no more: every
/// request from then on is served from what the path names now.
fn past_one_look(at: Instant) {
    wait_until(BOUND, "one look interval past the swap", || {
        (at.elapsed() > LOOK_INTERVAL).then_some(())
    });
}

/// A port held by this test: a servery that tried to bind it would exit 1, not 2.
fn held_port() -> (TcpListener, String) {
    let held = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = held.local_addr().expect("addr").port().to_string();
    (held, port)
}

fn assert_refused(run: &Finished, says: &str) {
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(run.stderr.contains("  - dir: "), "{run:?}");
    assert!(
        run.stderr.contains(says),
        "`{says}` not in:\n{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("the served directory must be a directory servery's user can list and open"),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains("listening on"), "{run:?}");
}

#[test]
fn a_root_that_is_missing_a_file_or_unreadable_is_refused_before_binding() {
    let tree = Tree::new("root-refused");
    let (_held, port) = held_port();
    let missing = tree.dir.join("nothing");
    let run = run_servery(&[text(&missing), "--port", &port], &[], BOUND);
    assert_refused(&run, &format!("{} does not exist", missing.display()));

    let file = tree.root().join("hello.txt");
    let run = run_servery(&[text(&file), "--port", &port], &[], BOUND);
    assert_refused(&run, &format!("{} is not a directory", file.display()));

    // --check-config says the same, and binds nothing either.
    let run = run_servery(&[text(&file), "--check-config"], &[], BOUND);
    assert_refused(&run, "is not a directory");

    // Unreadable: a directory servery's user may neither list nor open. Root reads a
    // mode-000 directory anyway, so as root the test runs servery as another user against
    // a directory private to root.
    let private = tree.dir.join("private");
    std::fs::create_dir(&private).expect("mkdir");
    std::fs::write(private.join("secret.txt"), "x").expect("write");
    let run = if rustix::process::geteuid().is_root() {
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let user = match OtherUser::create() {
            Ok(user) => user,
            Err(reason) => {
                servery_tests::skipped(format!(
                    "the unreadable-root part: running as root (who reads any directory) and {reason}"
                ));
                return;
            }
        };
        let mut cmd = user.command(servery_bin());
        cmd.args([text(&private), "--port", &port]);
        let run = run_command(cmd, BOUND);
        assert!(
            run.stderr.contains(&format!("by uid {}", user.uid)),
            "{}",
            run.stderr
        );
        run
    } else {
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        let run = run_servery(&[text(&private), "--port", &port], &[], BOUND);
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        run
    };
    assert_refused(
        &run,
        &format!("{} cannot be listed by uid", private.display()),
    );
    assert!(run.stderr.contains("Permission denied"), "{}", run.stderr);
}

#[test]
fn a_flipped_release_link_is_served_a_look_interval_later() {
    let tree = Tree::new("root-flip");
    let releases = tree.dir.join("releases");
    for (n, version) in [("1", "one\n"), ("2", "two\n")] {
        std::fs::create_dir_all(releases.join(n)).expect("mkdir");
        std::fs::write(releases.join(n).join("version.txt"), version).expect("write");
    }
    // The tree's root becomes the link a deploy tool flips: root -> releases/1.
    std::fs::remove_dir_all(tree.root()).expect("rm");
    std::os::unix::fs::symlink("releases/1", tree.root()).expect("link");
    let server = Server::start(&tree, 2, FAST, &[]);
    server.wait_ready(2, BOUND);
    every_request_answers(&server, "/version.txt", "one\n", 6);
    // The status names the path as given, not where the link led at start.
    assert_eq!(server.status()["root"], text(&tree.root()));

    // Flipped as deploy tools do it: a new link renamed over the old one, atomically.
    let next = tree.dir.join("root.next");
    std::os::unix::fs::symlink("releases/2", &next).expect("link");
    std::fs::rename(&next, tree.root()).expect("flip");
    past_one_look(Instant::now());
    every_request_answers(&server, "/version.txt", "two\n", 8);
    wait_until(BOUND, "the swap in the log", || {
        server
            .stderr()
            .contains("the served directory was replaced")
            .then_some(())
    });
    // The old release can go: nothing holds it.
    std::fs::remove_dir_all(releases.join("1")).expect("rm");
    every_request_answers(&server, "/version.txt", "two\n", 4);
    assert_eq!(server.status()["state"], "ready");
}

#[test]
fn a_root_deleted_and_copied_again_is_served_a_look_interval_later() {
    let tree = Tree::new("root-recopy");
    let server = Server::start(&tree, 2, FAST, &[]);
    server.wait_ready(2, BOUND);
    every_request_answers(
        &server,
        "/hello.txt",
        std::str::from_utf8(HELLO).expect("utf-8"),
        4,
    );

    std::fs::remove_dir_all(tree.root()).expect("rm -rf");
    // Between the delete and the copy: not found, as from any server.
    let (status, _) = http_get(server.addr, "/hello.txt").expect("GET");
    assert_eq!(status, 404);
    std::fs::create_dir(tree.root()).expect("mkdir");
    std::fs::write(tree.root().join("hello.txt"), "copied again\n").expect("write");
    past_one_look(Instant::now());
    every_request_answers(&server, "/hello.txt", "copied again\n", 8);
    assert_eq!(server.status()["state"], "ready");
}
