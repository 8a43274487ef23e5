//! systemd integration without a running systemd: `systemd-socket-activate` binds a port
//! and starts servery on it (servery binds nothing itself), and a test-owned
//! `NOTIFY_SOCKET` records READY/RELOADING/STOPPING/WATCHDOG across start, reload and
//! stop.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use servery_tests::serde_json::json;
use servery_tests::{
    FAST, HELLO, Server, Sig, Tree, ctl_at, free_port, http_get, servery_bin, wait_until,
};

/// A process group killed on drop.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, Sig::KILL);
        }
        let _ = self.0.wait();
    }
}

#[test]
fn socket_activation_serves_on_the_port_the_manager_bound() {
    let tree = Tree::new("sd-activate");
    let port = free_port();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut child = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(addr.to_string())
        .arg(servery_bin())
        .arg(tree.root())
        .arg("--control-socket")
        .arg(tree.socket())
        // A port servery would fail to bind if it tried: the manager holds the socket.
        .args(["--port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("systemd-socket-activate is needed (apt-get install systemd)");
    let stdout = child.stdout.take().expect("stdout");
    let group = Group(child);
    let lines = Arc::new(Mutex::new(Vec::new()));
    {
        let lines = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
    }
    // The manager starts servery on the first connection, which waits in the backlog of
    // the socket it passed and is answered once a worker is ready.
    let (status, body) = wait_until(Duration::from_secs(30), "the first request", || {
        http_get(addr, "/hello.txt").ok()
    })
    .0;
    assert_eq!((status, body.as_slice()), (200, HELLO));
    let out = lines.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        out.iter()
            .any(|l| l == &format!("servery: listening on http://{addr}/")),
        "{out:?}"
    );
    // The first request may be answered by the first worker ready while another still
    // starts: the service is ready once every worker of the generation is.
    wait_until(Duration::from_secs(30), "the service ready", || {
        let status = ctl_at(&tree.socket(), &json!({"cmd": "status"})).ok()?;
        (status["status"]["state"] == "ready").then_some(())
    });
    // The manager owns the socket: a reload may not move the port (decision 0035).
    let refused = ctl_at(
        &tree.socket(),
        &json!({"cmd": "reload", "set": {"port": free_port()}}),
    )
    .expect_err("the port is the manager's");
    assert!(
        refused.contains("port cannot change on reload with sockets from the service manager"),
        "{refused}"
    );
    drop(group);
}

/// Everything the service manager was told, one datagram per entry.
fn record(socket: UnixDatagram) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            into.lock().unwrap_or_else(|p| p.into_inner()).push(text);
        }
    });
    seen
}

fn told(seen: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The index of the first message from `from` on that has a line `line` (or starts with
/// it, for `KEY=`).
fn find(messages: &[String], from: usize, line: &str) -> Option<usize> {
    messages
        .iter()
        .enumerate()
        .skip(from)
        .find(|(_, m)| {
            m.lines()
                .any(|l| l == line || (line.ends_with('=') && l.starts_with(line)))
        })
        .map(|(i, _)| i)
}

#[test]
fn the_service_manager_hears_ready_reloading_stopping_and_the_watchdog() {
    let tree = Tree::new("sd-notify");
    let path = tree.dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
    let seen = record(socket);
    let path_text = path.to_string_lossy().into_owned();
    // WATCHDOG_PID must be servery's own pid: it is the shell's, which execs servery.
    let mut server = Server::launch(
        &tree,
        2,
        FAST,
        &[
            ("NOTIFY_SOCKET", path_text.as_str()),
            ("WATCHDOG_USEC", "400000"),
        ],
        &servery_tests::Launch {
            watchdog_pid: true,
            ..Default::default()
        },
    );
    server.wait_ready(2, Duration::from_secs(20));
    let ready = wait_until(Duration::from_secs(5), "READY=1", || {
        find(&told(&seen), 0, "READY=1")
    })
    .0;
    wait_until(
        Duration::from_secs(5),
        "STATUS= with 2 ready workers",
        || {
            told(&seen)
                .iter()
                .any(|m| m.contains("STATUS=ready: generation 1, 2 ready workers"))
                .then_some(())
        },
    );
    // Pinged every 0.2 s: several within a couple of seconds.
    wait_until(Duration::from_secs(5), "three WATCHDOG=1", || {
        let n = told(&seen)
            .iter()
            .filter(|m| m.lines().any(|l| l == "WATCHDOG=1"))
            .count();
        (n >= 3).then_some(())
    });

    let answer = server
        .ctl(&json!({"cmd": "reload"}))
        .expect("reload accepted");
    assert_eq!(answer["generation"], 2);
    let (reloading, _) = wait_until(Duration::from_secs(5), "RELOADING=1", || {
        find(&told(&seen), ready + 1, "RELOADING=1")
    });
    let messages = told(&seen);
    assert!(
        messages[reloading]
            .lines()
            .any(|l| l.starts_with("MONOTONIC_USEC=")),
        "RELOADING=1 comes with MONOTONIC_USEC: {messages:?}"
    );
    let reloaded = wait_until(Duration::from_secs(5), "READY=1 after the reload", || {
        find(&told(&seen), reloading + 1, "READY=1")
    })
    .0;

    // A reload refused before it starts still answers systemd's SIGHUP with the pair
    // Type=notify-reload waits for, and says why in STATUS=.
    let refused = server
        .ctl(&json!({"cmd": "reload", "set": {"workers": 0}}))
        .expect_err("no workers is invalid");
    let (again, _) = wait_until(
        Duration::from_secs(5),
        "RELOADING=1 for the refusal",
        || find(&told(&seen), reloaded + 1, "RELOADING=1"),
    );
    let (reloaded, _) = wait_until(Duration::from_secs(5), "READY=1 after the refusal", || {
        find(&told(&seen), again + 1, "READY=1")
    });
    let messages = told(&seen);
    assert!(
        messages[reloaded]
            .lines()
            .any(|l| l.starts_with("STATUS=reload rejected: ")),
        "the refusal ({refused}) is in STATUS=: {messages:?}"
    );

    server.signal(Sig::TERM);
    server.wait_exit(Duration::from_secs(20));
    let (stopping, _) = wait_until(Duration::from_secs(5), "STOPPING=1", || {
        find(&told(&seen), reloaded + 1, "STOPPING=1")
    });
    let messages = told(&seen);
    assert!(
        find(&messages, stopping + 1, "READY=1").is_none(),
        "no READY=1 after STOPPING=1: {messages:?}"
    );
}

/// The shipped units as the systemd at hand reads them: `systemd-analyze verify` accepts
/// them without a warning (systemd 252 ignores `Type=notify-reload` with only a warning,
/// which is how a unit written for 253 silently lost `systemctl reload`), and the unit's
/// own `ExecReload=` line reloads a running servery and says so.
#[test]
fn the_shipped_units_verify_and_their_reload_line_reloads() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        servery_tests::skipped("systemd-analyze is not installed (apt-get install systemd)");
        return;
    };
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let tree = Tree::new("sd-verify");
    let units = tree.dir.join("units");
    std::fs::create_dir_all(&units).expect("units folder");
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/systemd");
    let binary = servery_bin().to_string_lossy().into_owned();
    let mut paths = Vec::new();
    for name in ["servery.service", "servery.socket", "servery-admin.socket"] {
        let text = std::fs::read_to_string(shipped.join(name)).expect("a shipped unit");
        // verify checks that every command line names an executable that exists.
        let path = units.join(name);
        std::fs::write(&path, text.replace("/usr/local/bin/servery", &binary)).expect("write");
        paths.push(path);
    }
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&paths)
        .output()
        .expect("systemd-analyze runs");
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && said.trim().is_empty(),
        "units must work on systemd 252 and later: `systemd-analyze verify` ({version}) says {:?}:\n{said}",
        verify.status
    );

    let service = std::fs::read_to_string(&paths[0]).expect("the service unit");
    let reload_line = service
        .lines()
        .find_map(|l| l.strip_prefix("ExecReload="))
        .expect("the service unit has an ExecReload= line");
    let socket = tree.socket().to_string_lossy().into_owned();
    let words: Vec<String> = reload_line
        .split_whitespace()
        .map(|w| w.replace("/run/servery/ctl.sock", &socket))
        .collect();
    let server = Server::start(&tree, 1, FAST, &[]);
    server.wait_ready(1, Duration::from_secs(20));
    let reload = Command::new(&words[0])
        .args(&words[1..])
        .output()
        .expect("the ExecReload command runs");
    let out = String::from_utf8_lossy(&reload.stdout);
    assert!(
        reload.status.success() && out.contains("reloaded: generation 2 is serving"),
        "the unit's ExecReload= ({reload_line}) returns once the new generation serves: {:?} {out} {}",
        reload.status,
        String::from_utf8_lossy(&reload.stderr)
    );
    assert_eq!(server.status()["generation"], 2, "the reload took effect");
}
