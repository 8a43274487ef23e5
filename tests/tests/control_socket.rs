//! The control socket against other local users (decision 0012): the default location
//! without `XDG_RUNTIME_DIR` is a private directory that servery makes or checks before
//! binding anything; the socket is 0600 from the start; `servery ctl` talks only to a
//! socket, and a process, of its own user or root; the parent answers only clients of its
//! own user or root; and the stale-socket handling still replaces what a dead servery left.
//!
//! Every answer but `status`'s is the core's, closing included (decision 0071).
//!
//! The tests about another user need one: run as root, they create a throwaway system
//! user and remove it at the end ([`OtherUser`]); otherwise they skip, saying why.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use servery_tests::serde_json::json;
use servery_tests::*;

/// Where the impostor listener binds, when `fake_listener` runs as a helper.
const FAKE_SOCKET: &str = "SERVERY_TEST_FAKE_SOCKET";
/// What the impostor's status carries, so a test can tell whether it was printed.
const FAKE_MARK: &str = "impostor-status";

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn other_user(test: &str) -> Option<OtherUser> {
    match OtherUser::create() {
        Ok(user) => Some(user),
        Err(reason) => {
            servery_tests::skipped(format!("{test}: the parts with a second user: {reason}"));
            None
        }
    }
}

fn text(path: &Path) -> String {
    path.to_str().expect("utf-8 path").to_owned()
}

/// The environment that makes servery use `<tmp>/servery-<uid>` in `tree`.
fn no_runtime_dir(tree: &Tree) -> [(&'static str, String); 2] {
    [
        ("XDG_RUNTIME_DIR", String::new()),
        ("TMPDIR", text(&tree.dir)),
    ]
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn without_xdg_runtime_dir_the_socket_is_0600_in_a_0700_directory_of_ours() {
    let tree = Tree::new("ctl-private");
    let user = other_user("private directory");
    let env = no_runtime_dir(&tree);
    // Under umask 000 every file servery creates would be open to all unless it sets the
    // modes itself.
    let launch = Launch {
        default_socket: true,
        umask: Some(0),
        ..Launch::default()
    };
    let server = Server::launch(&tree, 1, FAST, &env_refs(&env), &launch);
    server.wait_ready(1, Duration::from_secs(20));

    let dir = tree.dir.join(format!("servery-{}", me()));
    let expected = dir.join(format!("servery-{}.sock", server.addr.port()));
    assert_eq!(server.socket, expected, "the banner names the default path");

    let d = std::fs::symlink_metadata(&dir).expect("the directory exists");
    assert!(d.is_dir(), "a real directory, not a link");
    assert_eq!(d.uid(), me(), "owned by the user servery runs as");
    assert_eq!(d.mode() & 0o7777, 0o700, "directory mode {:o}", d.mode());
    let s = std::fs::symlink_metadata(&server.socket).expect("the socket exists");
    assert!(s.file_type().is_socket());
    assert_eq!(s.uid(), me());
    assert_eq!(s.mode() & 0o777, 0o600, "socket mode {:o}", s.mode());

    // The same user's `servery ctl` gets through its own checks.
    let ok = run_servery(
        &["ctl", "--socket", &text(&server.socket), "status", "--json"],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert!(ok.stdout.contains("\"generation\""), "{}", ok.stdout);

    // Another user cannot even reach it.
    if let Some(user) = &user {
        let mut ctl = user.command(servery_bin());
        ctl.args(["ctl", "--socket", &text(&server.socket), "status"]);
        let theirs = run_command(ctl, Duration::from_secs(20));
        assert_eq!(theirs.status.code(), Some(1), "{theirs:?}");
        assert!(theirs.stderr.contains("Permission denied"), "{theirs:?}");
        assert!(!theirs.stdout.contains("generation"), "{theirs:?}");
    }
}

#[test]
fn an_unsafe_directory_at_the_default_path_stops_servery_before_it_binds() {
    let tree = Tree::new("ctl-unsafe");
    let user = other_user("unsafe directory");
    let env = no_runtime_dir(&tree);
    let dir = tree.dir.join(format!("servery-{}", me()));
    let decoy = tree.dir.join("decoy");
    std::fs::create_dir(&decoy).expect("mkdir");
    std::fs::set_permissions(&decoy, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    // A port that is taken: were the listeners bound before the directory is checked,
    // this would fail on the port instead.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("addr").port().to_string();

    type Setup<'a> = Box<dyn Fn(&Path) + 'a>;
    let mut cases: Vec<(&str, Setup, String)> = vec![
        (
            "open mode",
            Box::new(|p: &Path| {
                std::fs::create_dir(p).expect("mkdir");
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            }),
            "has mode 0755; it must be 0700".into(),
        ),
        (
            "symbolic link",
            Box::new(|p: &Path| std::os::unix::fs::symlink(&decoy, p).expect("symlink")),
            "is a symbolic link".into(),
        ),
        (
            "file",
            Box::new(|p: &Path| std::fs::write(p, b"").expect("write")),
            "is not a directory".into(),
        ),
    ];
    if let Some(user) = &user {
        let (uid, gid) = (user.uid, user.gid);
        cases.push((
            "another user's",
            Box::new(move |p: &Path| {
                std::fs::create_dir(p).expect("mkdir");
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).expect("chmod");
                std::os::unix::fs::chown(p, Some(uid), Some(gid)).expect("chown");
            }),
            format!("is owned by uid {uid}, not by uid {}", me()),
        ));
    }

    for (case, setup, problem) in &cases {
        setup(&dir);
        let before = std::fs::symlink_metadata(&dir).expect("lstat");
        let started = Instant::now();
        let run = run_servery(
            &[&text(&tree.root()), "--port", &port],
            &env_refs(&env),
            Duration::from_secs(20),
        );
        let took = started.elapsed();
        assert_eq!(run.status.code(), Some(1), "{case}: {run:?}");
        let expected = format!("the control socket directory {} {problem}", dir.display());
        assert!(
            run.stderr.contains(&expected),
            "{case}: `{expected}` not in:\n{}",
            run.stderr
        );
        assert!(!run.stdout.contains("listening"), "{case}: {}", run.stdout);
        let after = std::fs::symlink_metadata(&dir).expect("still there");
        assert_eq!(
            (after.mode(), after.uid()),
            (before.mode(), before.uid()),
            "{case}: what was there is left as it was"
        );
        assert_eq!(
            std::fs::read_dir(&decoy).expect("decoy").count(),
            0,
            "{case}: nothing was created through the link"
        );
        eprintln!("MEASURED unsafe control socket directory ({case}): exit 1 after {took:?}");
        if after.is_dir() {
            std::fs::remove_dir(&dir).expect("rmdir");
        } else {
            std::fs::remove_file(&dir).expect("rm");
        }
    }
    drop(busy);
}

#[test]
fn a_stale_socket_is_replaced_but_a_live_one_or_another_file_is_not() {
    let tree = Tree::new("ctl-stale");
    let socket = tree.socket();
    let mut first = Server::start(&tree, 1, FAST, &[]);
    let (status, _) = first.wait_ready(1, Duration::from_secs(20));
    let workers = worker_pids(&status);

    // A second servery on the same socket while the first answers: refused, exit 1.
    let second = run_servery(
        &[
            &text(&tree.root()),
            "--port",
            "0",
            "--control-socket",
            &text(&socket),
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    assert!(
        second
            .stderr
            .contains("another servery is already listening"),
        "{second:?}"
    );
    first.status();

    // The first killed outright: its socket file stays behind, stale.
    first.kill_parent();
    wait_until(
        DRAIN_TIMEOUT + Duration::from_secs(3),
        "the orphaned worker gone",
        || workers.iter().all(|&pid| !alive(pid)).then_some(()),
    );
    drop(first);
    assert!(
        std::fs::symlink_metadata(&socket).is_ok_and(|m| m.file_type().is_socket()),
        "a SIGKILLed parent leaves its socket file"
    );
    let third = Server::start(&tree, 1, FAST, &[]);
    third.wait_ready(1, Duration::from_secs(20));
    drop(third);

    // What is not a socket is never removed to make room.
    std::fs::remove_file(&socket).expect("rm the socket the third one left");
    std::fs::write(&socket, b"not a socket").expect("write");
    let refused = run_servery(
        &[
            &text(&tree.root()),
            "--port",
            "0",
            "--control-socket",
            &text(&socket),
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(refused.stderr.contains("is not a socket"), "{refused:?}");
    assert_eq!(std::fs::read(&socket).expect("kept"), b"not a socket");
}

/// The impostor: another user's process listening where `servery ctl` looks, answering
/// every request with a made-up status. Killed (process group) when dropped; it also
/// exits by itself when its stdin closes.
struct Impostor {
    child: Child,
}

impl Impostor {
    fn start(user: &OtherUser, socket: &Path) -> Impostor {
        let exe = std::env::current_exe().expect("test executable");
        let mut cmd = user.command(exe);
        cmd.args(["fake_listener", "--exact", "--ignored", "--nocapture"])
            .env(FAKE_SOCKET, socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0);
        let mut impostor = Impostor {
            child: cmd.spawn().expect("spawn the impostor"),
        };
        wait_until(Duration::from_secs(20), "the impostor's socket", || {
            if let Ok(Some(status)) = impostor.child.try_wait() {
                panic!("the impostor exited early: {status}");
            }
            std::fs::symlink_metadata(socket)
                .is_ok_and(|m| m.file_type().is_socket())
                .then_some(())
        });
        impostor
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, Sig::KILL);
        }
        let _ = self.child.wait();
    }
}

/// Not a test by itself: the impostor process [`Impostor`] runs as another user.
#[test]
#[ignore = "a helper process: ctl_refuses_… runs it as another user"]
fn fake_listener() {
    let Some(path) = std::env::var_os(FAKE_SOCKET) else {
        return;
    };
    // The lifeline: when the test lets go of stdin, this process is done.
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let listener = UnixListener::bind(PathBuf::from(path)).expect("bind the impostor socket");
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut line = String::new();
        let _ = BufReader::new(&stream).read_line(&mut line);
        let answer = json!({"ok": true, "status": {"state": "ready", "generation": 1, "workers": [], "note": FAKE_MARK}});
        let _ = writeln!(stream, "{answer}");
    }
}

#[test]
fn ctl_refuses_a_socket_or_a_listener_of_another_user() {
    let Some(user) = other_user("ctl against another user's socket") else {
        return;
    };
    let tree = Tree::new("ctl-impostor");
    let theirs = tree.dir.join("theirs");
    std::fs::create_dir(&theirs).expect("mkdir");
    std::os::unix::fs::chown(&theirs, Some(user.uid), Some(user.gid)).expect("chown");
    // Where `servery ctl --port 8123` looks when XDG_RUNTIME_DIR names `theirs`.
    let socket = theirs.join("servery-8123.sock");
    let impostor = Impostor::start(&user, &socket);
    assert_eq!(
        std::fs::symlink_metadata(&socket).expect("lstat").uid(),
        user.uid
    );
    // The impostor does answer: a client without the checks takes its word.
    let fake = ctl_at(&socket, &json!({"cmd": "status"})).expect("the impostor answers");
    assert_eq!(fake["status"]["note"], FAKE_MARK);

    let ctl = |what: &str, target: &[&str]| {
        let mut args = vec!["ctl"];
        args.extend(target);
        args.extend(["status", "--json"]);
        let run = run_servery(
            &args,
            &[("XDG_RUNTIME_DIR", text(&theirs).as_str())],
            Duration::from_secs(20),
        );
        assert_eq!(run.status.code(), Some(1), "{what}: {run:?}");
        assert!(
            !run.stdout.contains(FAKE_MARK),
            "{what}: printed {}",
            run.stdout
        );
        run.stderr
    };

    // The socket file at the default path is theirs (even root does not take a socket
    // another user may have put where it looks: decision 0059).
    let said = ctl("a socket file of another user", &["--port", "8123"]);
    let expected = format!(
        "refusing to talk to {}: the socket file belongs to uid {}",
        socket.display(),
        user.uid
    );
    assert!(said.contains(&expected), "`{expected}` not in:\n{said}");

    // The file made root's (as if planted by a path that root owns), the listener theirs.
    std::os::unix::fs::chown(&socket, Some(0), Some(0)).expect("chown");
    let named = ["--socket", socket.to_str().expect("utf-8")];
    let said = ctl("a listener of another user", &named);
    let expected = format!(
        "runs as uid {}, neither you (uid {}) nor root",
        user.uid,
        me()
    );
    assert!(said.contains(&expected), "`{expected}` not in:\n{said}");
    assert!(said.contains("refusing to talk to"), "{said}");

    if rustix::process::geteuid().is_root() {
        // A socket root names, of a third user (nobody), answered by this one: a relay.
        std::os::unix::fs::chown(&socket, Some(65534), None).expect("chown");
        let said = ctl("a socket of one user answered by another", &named);
        let expected = "the socket file belongs to uid 65534, but the process listening on it (pid";
        assert!(said.contains(expected), "`{expected}` not in:\n{said}");
    }
    drop(impostor);
}

#[test]
fn root_controls_a_servery_of_another_user_through_the_socket_it_names() {
    if !rustix::process::geteuid().is_root() {
        servery_tests::skipped("root's `servery ctl` needs the tests to run as root");
        return;
    }
    let (Some(service), Some(stranger)) = (
        other_user("root's ctl (the service's user)"),
        other_user("root's ctl (a third user)"),
    ) else {
        return;
    };
    let tree = Tree::new("ctl-root");
    // The service's user owns the directory its socket and log go in, as systemd's
    // RuntimeDirectory= and LogsDirectory= make them.
    std::os::unix::fs::chown(&tree.dir, Some(service.uid), Some(service.gid)).expect("chown");
    let log = tree.dir.join("access.log");
    let mut args = FAST.to_vec();
    args.extend(["--access-log", log.to_str().expect("utf-8")]);
    let launch = Launch {
        user: Some((service.uid, service.gid)),
        ..Launch::default()
    };
    let server = Server::launch(&tree, 1, &args, &[], &launch);
    server.wait_ready(1, Duration::from_secs(20));
    let socket = text(&server.socket);
    assert_eq!(
        std::fs::symlink_metadata(&server.socket)
            .expect("lstat")
            .uid(),
        service.uid
    );

    // Root, as logrotate's postrotate runs: status and reopen-logs through --socket.
    let status = run_servery(
        &["ctl", "--socket", &socket, "status", "--json"],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    let parsed: servery_tests::serde_json::Value =
        servery_tests::serde_json::from_str(status.stdout.trim()).expect("status JSON");
    assert_eq!(parsed["state"], "ready", "{parsed}");
    assert_eq!(parsed["pid"], server.pid, "{parsed}");
    let reopen = run_servery(
        &["ctl", "--socket", &socket, "reopen-logs"],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(reopen.status.code(), Some(0), "{reopen:?}");
    wait_until(Duration::from_secs(10), "the reopen counted", || {
        (server.status()["access_log"]["reopens"] == 1).then_some(())
    });

    // Another user stays refused, however the socket's mode is opened up.
    std::fs::set_permissions(&server.socket, std::fs::Permissions::from_mode(0o666))
        .expect("chmod");
    let mut theirs = stranger.command(servery_bin());
    theirs.args(["ctl", "--socket", &socket, "status", "--json"]);
    let theirs = run_command(theirs, Duration::from_secs(20));
    assert_eq!(theirs.status.code(), Some(1), "{theirs:?}");
    assert!(!theirs.stdout.contains("generation"), "{theirs:?}");
    assert_eq!(server.status()["state"], "ready");
}

#[test]
fn the_parent_refuses_a_client_of_another_user() {
    let Some(user) = other_user("parent against another user's client") else {
        return;
    };
    let tree = Tree::new("ctl-peer");
    let server = Server::start(&tree, 1, FAST, &[]);
    server.wait_ready(1, Duration::from_secs(20));
    // Open the socket to everyone, as a careless `chmod` or a permissive directory
    // would: only the parent's check of the client's credentials is left standing.
    std::fs::set_permissions(&server.socket, std::fs::Permissions::from_mode(0o666))
        .expect("chmod");

    let mut ctl = user.command(servery_bin());
    ctl.args(["ctl", "--socket", &text(&server.socket), "status", "--json"]);
    let theirs = run_command(ctl, Duration::from_secs(20));
    assert_eq!(theirs.status.code(), Some(1), "{theirs:?}");
    assert!(
        !theirs.stdout.contains("generation"),
        "another user got a status: {}",
        theirs.stdout
    );
    assert!(
        theirs
            .stderr
            .contains("the connection closed without an answer"),
        "{theirs:?}"
    );
    let logged = format!("peer_uid={}", user.uid);
    wait_until(Duration::from_secs(10), "the refusal in the log", || {
        let stderr = server.stderr();
        (stderr.contains("refused a client of another user") && stderr.contains(&logged))
            .then_some(())
    });
    // Its own user is still served.
    assert_eq!(server.status()["state"], "ready");
}

/// Decision 0071: the answers written are the core's — refusals with its reasons, and
/// while closing, `already stopping` and the stopping reason — not the control server's.
#[test]
fn every_answer_is_the_cores_while_serving_and_while_closing() {
    let tree = Tree::new("ctl-answers");
    // Larger than the socket buffers: a client that does not read it keeps its worker
    // draining until the drain deadline (2 s), the window the closing answers are asked in.
    std::fs::write(tree.root().join("huge.bin"), vec![7u8; 64 << 20]).expect("write");
    let mut server = Server::start(&tree, 1, FAST, &[]);
    server.wait_ready(1, Duration::from_secs(30));
    let ask = |cmd: &str| server.ctl(&json!({ "cmd": cmd }));
    assert_eq!(
        ask("reopen-logs"),
        Err("there is no access log to reopen (start servery with --access-log)".into())
    );
    assert_eq!(
        ask("acme-renew"),
        Err("ACME is not in use (start servery with --acme)".into())
    );
    assert_eq!(ask("recycle").map(|a| a["ok"].clone()), Ok(json!(true)));

    let mut slow = std::net::TcpStream::connect(server.addr).expect("connect");
    let host = server.addr;
    write!(slow, "GET /huge.bin HTTP/1.1\r\nHost: {host}\r\n\r\n").expect("request");
    let mut first = [0u8; 12];
    slow.read_exact(&mut first).expect("the response began");
    assert_eq!(&first, b"HTTP/1.1 200");

    assert_eq!(ask("stop"), Ok(json!({"ok": true})));
    assert_eq!(
        ask("stop"),
        Ok(json!({"ok": true, "note": "already stopping"}))
    );
    assert_eq!(ask("recycle"), Err("the service is stopping".into()));
    assert_eq!(ask("reload"), Err("the service is stopping".into()));
    drop(slow);
    let (status, _) = server.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0));
}
