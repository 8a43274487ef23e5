//! The state directory (`--state-dir`, issue 34): one that other users can write, or that
//! servery's user does not own, is refused before anything binds; a journal file planted
//! as a symbolic link is not followed; a journal restores no more locks, and no longer
//! ones, than LOCK grants, and says what it dropped.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use servery_tests::{FAST, OtherUser, Server, Tree, run_servery, wait_until};

#[path = "support/http_client.rs"]
mod http_client;

fn run_with_state_dir(tree: &Tree, state: &Path) -> servery_tests::Finished {
    run_servery(
        &[
            tree.root().to_str().expect("utf-8"),
            "--port",
            "0",
            "--dav",
            "--state-dir",
            state.to_str().expect("utf-8"),
        ],
        &[],
        Duration::from_secs(20),
    )
}

fn refused(done: &servery_tests::Finished, rule: &str) {
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("--state-dir") && done.stderr.contains(rule),
        "the error must name the field and the rule ({rule}): {}",
        done.stderr
    );
    assert!(!done.stdout.contains("listening"), "{}", done.stdout);
}

#[test]
fn a_state_dir_other_users_can_write_is_refused_before_anything_binds() {
    let tree = Tree::new("state-open");
    let state = tree.dir.join("state");
    std::fs::create_dir(&state).expect("state dir");
    for mode in [0o777, 0o1777, 0o775] {
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(mode)).expect("chmod");
        refused(
            &run_with_state_dir(&tree, &state),
            "writable by other users",
        );
    }
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let server = Server::start(
        &tree,
        1,
        &[
            FAST,
            &["--dav", "--state-dir", state.to_str().expect("utf-8")],
        ]
        .concat(),
        &[],
    );
    assert_eq!(server.status()["broker"]["dav_locks_persistent"], true);
}

#[test]
fn a_state_dir_of_another_user_is_refused_and_a_planted_link_is_not_followed() {
    let tree = Tree::new("state-other");
    let state = tree.dir.join("state");
    std::fs::create_dir(&state).expect("state dir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let victim = tree.dir.join("victim");
    std::fs::write(&victim, b"precious").expect("victim");
    match OtherUser::create() {
        Ok(other) => {
            // The other user's own private directory: it could plant anything there.
            rustix::fs::chown(
                &state,
                Some(rustix::fs::Uid::from_raw(other.uid)),
                Some(rustix::fs::Gid::from_raw(other.gid)),
            )
            .expect("chown");
            let planted = other
                .command("ln")
                .arg("-s")
                .arg(&victim)
                .arg(state.join("dav-locks.json"))
                .status()
                .expect("ln as the other user");
            assert!(planted.success());
            refused(&run_with_state_dir(&tree, &state), "is owned by uid");
            assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
            rustix::fs::chown(
                &state,
                Some(rustix::fs::Uid::ROOT),
                Some(rustix::fs::Gid::ROOT),
            )
            .expect("chown back");
        }
        Err(why) => {
            servery_tests::skipped(format!("the other-user case: {why}"));
            std::os::unix::fs::symlink(&victim, state.join("dav-locks.json")).expect("plant");
        }
    }
    // Ours now, private, but the link is still there: it is refused, not followed.
    let done = run_with_state_dir(&tree, &state);
    refused(&done, "symbolic link");
    assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
}

#[test]
fn a_journal_restores_no_more_than_lock_grants_and_says_what_it_dropped() {
    let tree = Tree::new("state-limits");
    let state = tree.dir.join("state");
    std::fs::create_dir(&state).expect("state dir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    // Twenty valid locks for a table of five, one of them until the year 9999.
    let mut locks: Vec<String> = (1..=19u64)
        .map(|i| {
            format!(
                r#"{{"token":"{i:032x}","resource":"/r{i}","depth_infinity":false,"owner":"","exclusive":true,"expires_unix_ms":{}}}"#,
                now_ms + 30_000 + i
            )
        })
        .collect();
    locks.push(
        r#"{"token":"000000000000000000000000000000ff","resource":"/forever","depth_infinity":false,"owner":"","exclusive":true,"expires_unix_ms":253402300799000}"#
            .into(),
    );
    std::fs::write(
        state.join("dav-locks.json"),
        format!(r#"{{"version":1,"locks":[{}]}}"#, locks.join(",")),
    )
    .expect("journal");
    let server = Server::start(
        &tree,
        1,
        &[
            FAST,
            &[
                "--dav",
                "--dav-max-locks",
                "5",
                "--dav-lock-timeout-max",
                "60",
                "--state-dir",
                state.to_str().expect("utf-8"),
            ],
        ]
        .concat(),
        &[],
    );
    assert_eq!(
        server.status()["broker"]["dav_locks"],
        5,
        "the table's limit"
    );
    let (line, _) = wait_until(
        Duration::from_secs(5),
        "the log of what was dropped",
        || {
            server
                .stderr()
                .lines()
                .find(|l| l.contains("the lock journal held more"))
                .map(str::to_owned)
        },
    );
    assert!(
        line.contains("WARN")
            && line.contains("dropped_table_full=15")
            && line.contains("timeout_capped=1"),
        "the log says what was dropped: {line}"
    );
}

const LOCKINFO: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner><D:href>mailto:tester@example.com</D:href></D:owner></D:lockinfo>"#;

/// A small tmpfs (mode 0700) over `dir` for the life of the guard.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_lock_the_journal_cannot_hold_is_refused_and_a_restart_keeps_every_lock_granted() {
    if !rustix::process::geteuid().is_root() {
        servery_tests::skipped("mounting a small tmpfs needs root");
        return;
    }
    let tree = Tree::new("state-full");
    let state = tree.dir.join("state");
    std::fs::create_dir(&state).expect("state dir");
    let Some(_fs) = Tmpfs::mount(&state, "8k") else {
        servery_tests::skipped("this machine refuses a tmpfs mount");
        return;
    };
    for i in 0..100 {
        std::fs::write(tree.root().join(format!("f{i}.txt")), b"x").expect("file");
    }
    let args = [
        FAST,
        &["--dav", "--state-dir", state.to_str().expect("utf-8")],
    ]
    .concat();
    let mut server = Server::start(&tree, 1, &args, &[]);
    let (mut granted, mut refused) = (0, 0);
    for i in 0..100 {
        let reply = http_client::request(
            server.addr,
            "LOCK",
            &format!("/f{i}.txt"),
            LOCKINFO.as_bytes(),
            &[
                ("Timeout", "Second-600"),
                ("Depth", "0"),
                ("Content-Type", "application/xml"),
            ],
        );
        match reply.status {
            200 => granted += 1,
            503 => refused += 1,
            other => panic!("LOCK /f{i}.txt: {other}"),
        }
    }
    assert!(
        granted > 0 && refused > 0,
        "an 8 KiB journal holds some locks, not 100: {granted} granted, {refused} refused"
    );
    // The table holds what was granted, no more: nothing ran ahead of the journal.
    wait_until(
        Duration::from_secs(5),
        "the refused locks to leave the table",
        || (server.status()["broker"]["dav_locks"] == granted).then_some(()),
    );
    server.kill_parent();
    drop(server);
    let server = Server::start(&tree, 1, &args, &[]);
    assert_eq!(
        server.status()["broker"]["dav_locks"],
        granted,
        "every lock answered 200 survives kill -9 of the parent"
    );
}
