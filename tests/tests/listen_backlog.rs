//! `--listen-backlog` (docs/operations.md, "Open files, listeners, both address
//! families"): one value, 4,096 by default as the shipped socket unit's `Backlog=` says,
//! asked of every listener, and refused outside 1..=65535 before anything is bound.

use std::process::Command;
use std::time::Duration;

use servery_tests::*;

const BOUND: Duration = Duration::from_secs(20);

/// The backlog the kernel holds for the listener on `port`: `ss` shows it as Send-Q of a
/// listening socket. `None` without `ss`.
fn backlog_of(port: u16) -> Option<u64> {
    let out = Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?;
    // State Recv-Q Send-Q Local:Port Peer:Port
    line.split_whitespace().nth(2)?.parse().ok()
}

fn somaxconn() -> u64 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096)
}

#[test]
fn the_backlog_is_the_one_configured_value_and_the_unit_says_the_same() {
    if Command::new("ss").arg("-V").output().is_err() {
        servery_tests::skipped("the listen backlog's check: `ss` is not installed");
        return;
    }
    let tree = Tree::new("backlog");
    let server = Server::start(&tree, 1, FAST, &[]);
    assert_eq!(backlog_of(server.addr.port()), Some(4096.min(somaxconn())));
    drop(server);
    let server = Server::start(&tree, 1, &["--listen-backlog", "77"], &[]);
    assert_eq!(backlog_of(server.addr.port()), Some(77));
    drop(server);

    // The shipped socket unit's Backlog= is the default `--help` states.
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/systemd/servery.socket"),
    )
    .expect("the socket unit");
    let unit_backlog = unit
        .lines()
        .find_map(|l| l.strip_prefix("Backlog="))
        .expect("Backlog= in the unit");
    let help = run_servery(&["--help"], &[], BOUND);
    let default = format!("[default: {unit_backlog}]");
    let line = help
        .stdout
        .lines()
        .skip_while(|l| !l.contains("--listen-backlog"))
        .take_while(|l| !l.trim_start().starts_with("--") || l.contains("--listen-backlog"))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(line.contains(&default), "`{default}` not in: {line}");
}

#[test]
fn a_backlog_outside_its_range_is_refused_before_binding() {
    let tree = Tree::new("backlog-bad");
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = held.local_addr().expect("addr").port().to_string();
    let root = tree.root();
    let root = root.to_str().expect("utf-8");
    for bad in ["0", "65536", "-1"] {
        let run = run_servery(
            &[root, "--port", &port, &format!("--listen-backlog={bad}")],
            &[],
            BOUND,
        );
        assert_eq!(run.status.code(), Some(2), "{bad}: {run:?}");
        assert!(run.stderr.contains("--listen-backlog"), "{bad}: {run:?}");
        assert!(run.stderr.contains("1..=65535"), "{bad}: {run:?}");
    }
    // The same rule in a configuration file, naming the file, its line and the key.
    let file = tree.dir.join("servery.toml");
    std::fs::write(&file, "listen_backlog = 0\n").expect("write");
    let run = run_servery(
        &[
            root,
            "--port",
            &port,
            "--config",
            file.to_str().expect("utf-8"),
        ],
        &[],
        BOUND,
    );
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(
        run.stderr.contains("servery.toml:1: listen_backlog:"),
        "{}",
        run.stderr
    );
}
