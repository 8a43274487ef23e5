//! Zero-downtime changes under load: recycling by request count and by age, `ctl
//! reload` (also with overrides, and SIGHUP), `ctl recycle`, and a rejected reload that
//! leaves the old generation serving.

use std::time::Duration;

use servery_tests::serde_json::json;
use servery_tests::*;

const WORKERS: usize = 2;
const CLIENTS: usize = 2;

fn max_worker_id(server: &Server) -> u64 {
    worker_ids(&server.status()).into_iter().max().unwrap_or(0)
}

fn assert_no_failures(what: &str, report: &LoadReport) {
    eprintln!(
        "MEASURED {what}: {} ok, {} failed in {:?}",
        report.ok, report.failed, report.elapsed
    );
    assert_eq!(report.failed, 0, "{what}: {:?}", report.failures);
}

#[test]
fn recycling_by_request_count_under_load_loses_nothing() {
    let tree = Tree::new("recreq");
    let server = Server::start(
        &tree,
        WORKERS as u32,
        &[FAST, &["--max-requests-per-worker", "20"]].concat(),
        &[],
    );
    server.wait_ready(WORKERS, Duration::from_secs(20));
    let load = Load::start(server.addr, "/hello.txt", HELLO, CLIENTS);
    // Worker ids are never reused: id N + k means k replacements have been spawned.
    let (_, took) = wait_until(Duration::from_secs(60), "6 request-count recycles", || {
        (max_worker_id(&server) >= (WORKERS + 6) as u64).then_some(())
    });
    load.wait_for_more(200, Duration::from_secs(20));
    let report = load.stop();
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    eprintln!("MEASURED 6 request-count recycles in {took:?}");
    assert_no_failures("request-count recycling", &report);
    assert_eq!(status["restarts"], 0, "recycles are not crashes: {status}");
    assert!(status["last_failure"].is_null(), "{status}");
    assert_eq!(status["generation"], 1, "{status}");
}

#[test]
fn recycling_by_age_under_load_loses_nothing() {
    let tree = Tree::new("recage");
    let server = Server::start(
        &tree,
        WORKERS as u32,
        &[FAST, &["--worker-max-age", "1"]].concat(),
        &[],
    );
    server.wait_ready(WORKERS, Duration::from_secs(20));
    let load = Load::start(server.addr, "/sub/big.bin", &big_body(), CLIENTS);
    let (_, took) = wait_until(Duration::from_secs(30), "4 age recycles", || {
        (max_worker_id(&server) >= (WORKERS + 4) as u64).then_some(())
    });
    load.wait_for_more(20, Duration::from_secs(20));
    let report = load.stop();
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    eprintln!("MEASURED 4 age recycles in {took:?}");
    assert_no_failures("age recycling", &report);
    assert_eq!(status["restarts"], 0, "{status}");
    assert!(status["last_failure"].is_null(), "{status}");
}

#[test]
fn reload_and_recycle_under_load_lose_nothing() {
    let tree = Tree::new("reload");
    let server = Server::start(&tree, WORKERS as u32, FAST, &[]);
    let (first, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    let load = Load::start(server.addr, "/hello.txt", HELLO, CLIENTS);
    load.wait_for_more(200, Duration::from_secs(20));

    // A plain reload: answered once generation 2 serves.
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    assert_eq!(status["generation"], 2, "{status}");
    let old: Vec<u32> = worker_pids(&first);
    wait_until(
        DRAIN_TIMEOUT + FORCE_TIMEOUT + Duration::from_secs(2),
        "generation 1 drained and reaped",
        || old.iter().all(|&pid| !alive(pid)).then_some(()),
    );
    load.wait_for_more(200, Duration::from_secs(20));

    // A reload that changes the worker count, through the ctl client.
    let socket = server.socket.to_str().expect("utf-8").to_owned();
    let run = run_servery(
        &["ctl", "--socket", &socket, "reload", "--set", "workers=3"],
        &[],
        Duration::from_secs(60),
    );
    assert!(run.status.success(), "{run:?}");
    assert!(run.stdout.contains("generation 3"), "{}", run.stdout);
    let (status, _) = server.wait_ready(3, Duration::from_secs(20));
    assert_eq!(status["generation"], 3, "{status}");
    load.wait_for_more(200, Duration::from_secs(20));

    // SIGHUP reloads from the original command line: back to two workers.
    server.signal(Sig::HUP);
    let (status, _) = wait_until(Duration::from_secs(20), "generation 4 after SIGHUP", || {
        let s = server.status();
        (s["generation"] == 4).then_some(s)
    });
    assert_eq!(status["config"]["workers"], WORKERS, "{status}");
    server.wait_ready(WORKERS, Duration::from_secs(20));
    load.wait_for_more(200, Duration::from_secs(20));

    // ctl recycle: every worker replaced, one at a time, same generation.
    let before = worker_ids(&server.status());
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    wait_until(Duration::from_secs(20), "every worker recycled", || {
        let s = server.status();
        let ids = worker_ids(&s);
        let ready = s["workers"]
            .as_array()
            .is_some_and(|ws| ws.iter().all(|w| w["state"] == "ready"));
        (ready && ids.len() == WORKERS && ids.iter().all(|id| !before.contains(id))).then_some(())
    });
    load.wait_for_more(200, Duration::from_secs(20));
    let report = load.stop();
    let status = server.status();
    assert_eq!(status["generation"], 4, "{status}");
    assert_eq!(status["restarts"], 0, "{status}");
    assert_no_failures("three reloads and a recycle", &report);
}

#[test]
fn an_invalid_reload_is_rejected_and_the_old_generation_keeps_serving() {
    let tree = Tree::new("badreload");
    let server = Server::start(&tree, WORKERS as u32, FAST, &[]);
    let (before, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    let load = Load::start(server.addr, "/hello.txt", HELLO, 1);
    load.wait_for_more(20, Duration::from_secs(20));

    let err = server
        .ctl(&json!({"cmd": "reload", "set": {"restart_backoff_initial": -1, "heartbeat_timeout": 0.1}}))
        .expect_err("an invalid candidate must be refused");
    assert!(err.contains("recovery.restart_backoff_initial"), "{err}");
    assert!(err.contains("recovery.heartbeat_timeout"), "{err}");

    let err = server
        .ctl(&json!({"cmd": "reload", "set": {"no_such_knob": 1}}))
        .expect_err("an unknown setting must be refused");
    assert!(err.contains("no_such_knob"), "{err}");

    let socket = server.socket.to_str().expect("utf-8").to_owned();
    let run = run_servery(
        &[
            "ctl",
            "--socket",
            &socket,
            "reload",
            "--set",
            "max_connections=0",
        ],
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(
        run.stderr.contains("budgets.max_connections"),
        "{}",
        run.stderr
    );

    load.wait_for_more(20, Duration::from_secs(20));
    let report = load.stop();
    let after = server.status();
    assert_eq!(after["generation"], 1, "{after}");
    assert_eq!(
        worker_pids(&after),
        worker_pids(&before),
        "the same workers serve"
    );
    let last = after["last_reload_error"].as_str().unwrap_or("");
    assert!(last.contains("budgets.max_connections"), "{after}");
    assert_no_failures("rejected reloads", &report);
}

/// Back-to-back GETs on one keep-alive connection at a time, reconnecting whenever the
/// server says `Connection: close`; every other ending of a connection is a failure.
/// Returns (ok, failures, reconnects asked for by the server).
fn keep_alive_client(
    addr: std::net::SocketAddr,
    stop: &std::sync::atomic::AtomicBool,
) -> (u64, Vec<String>, u64) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let (mut ok, mut failures, mut closes) = (0u64, Vec::new(), 0u64);
    let deadline = std::time::Instant::now() + LOAD_LIMIT;
    'connections: while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
        let mut s = match std::net::TcpStream::connect(addr) {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("connect: {e}"));
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n") {
                failures.push(format!("write after {ok} ok: {e}"));
                continue 'connections;
            }
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            let (head, start) = loop {
                match s.read(&mut buf) {
                    Ok(0) => {
                        failures.push(format!("closed without a response after {ok} ok"));
                        continue 'connections;
                    }
                    Ok(n) => raw.extend_from_slice(&buf[..n]),
                    Err(e) => {
                        failures.push(format!("read after {ok} ok: {e}"));
                        continue 'connections;
                    }
                }
                if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break (
                        String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase(),
                        end + 4,
                    );
                }
            };
            while raw.len() < start + HELLO.len() {
                match s.read(&mut buf) {
                    Ok(n) if n > 0 => raw.extend_from_slice(&buf[..n]),
                    other => {
                        failures.push(format!("body cut short: {other:?}"));
                        continue 'connections;
                    }
                }
            }
            if !head.starts_with("http/1.1 200") || &raw[start..] != HELLO {
                failures.push(format!("bad response: {head}"));
                continue 'connections;
            }
            ok += 1;
            if head.contains("connection: close") {
                closes += 1;
                continue 'connections;
            }
        }
        break;
    }
    (ok, failures, closes)
}

#[test]
fn keep_alive_clients_lose_nothing_across_recycles() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let tree = Tree::new("reckeep");
    let server = Server::start(
        &tree,
        WORKERS as u32,
        &[FAST, &["--max-requests-per-worker", "300"]].concat(),
        &[],
    );
    server.wait_ready(WORKERS, Duration::from_secs(20));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (stop, addr) = (Arc::clone(&stop), server.addr);
            std::thread::spawn(move || keep_alive_client(addr, &stop))
        })
        .collect();
    // A draining worker must not drop the request a keep-alive client has already sent
    // on a connection that looked idle (the client would see a reset).
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(Duration::from_secs(60), "6 recycles", || {
            (max_worker_id(&server) >= (WORKERS + 6) as u64).then_some(())
        })
    }));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<_> = clients
        .into_iter()
        .map(|c| c.join().expect("client thread"))
        .collect();
    waited.expect("recycles happened");
    let ok: u64 = results.iter().map(|r| r.0).sum();
    let closes: u64 = results.iter().map(|r| r.2).sum();
    let failures: Vec<&String> = results.iter().flat_map(|r| &r.1).collect();
    eprintln!(
        "MEASURED keep-alive across 6 recycles: {ok} ok, {} failed, {closes} server-asked reconnects",
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:?}");
    assert!(closes >= 1, "draining workers asked clients to reconnect");
}

/// The hardening issue's case: one worker, a beat every 0.5 s, a hang declared after 5 s.
/// The worker is stopped, then `ctl recycle`: its replacement is committed and it is told
/// to drain, which it cannot do. It must be ended on its heartbeat deadline as
/// `drain_hang` (TERM, then KILL after the 1 s force timeout, since a stopped process runs
/// no handler), not after the 60 s drain deadline, and the recycle must complete. The
/// replacement must be ready within the heartbeat timeout (or the stopped worker is judged
/// hung before it is told to drain): 5 s leaves a loaded machine's debug build room.
#[test]
fn a_worker_that_hangs_before_its_recycle_drains_it_is_ended_on_its_heartbeat_deadline() {
    const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
    const FORCE_TIMEOUT: Duration = Duration::from_secs(1);
    const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
    let tree = Tree::new("drainhang");
    let args = [
        "--heartbeat-interval",
        "0.5",
        "--heartbeat-timeout",
        "5",
        "--force-timeout",
        "1",
        "--drain-timeout",
        "60",
    ];
    let server = Server::start(&tree, 1, &args, &[]);
    let (status, _) = server.wait_ready(1, Duration::from_secs(20));
    let victim = &status["workers"][0];
    let (victim_id, victim_pid) = (
        victim["id"].as_u64().expect("id"),
        victim["pid"].as_u64().expect("pid") as u32,
    );
    signal_pid(victim_pid, Sig::STOP);
    let stopped = std::time::Instant::now();
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");

    // Its last beat came at most now: TERM by HEARTBEAT_TIMEOUT, KILL FORCE_TIMEOUT later.
    let bound = HEARTBEAT_TIMEOUT + FORCE_TIMEOUT + Duration::from_secs(3);
    let mut killed = None;
    let (status, recycled) = wait_until(
        bound,
        "the stopped worker ended and its recycle complete",
        || {
            if killed.is_none() && !alive(victim_pid) {
                killed = Some(stopped.elapsed());
            }
            let s = server.status();
            let gone = !worker_ids(&s).contains(&victim_id);
            (killed.is_some() && gone && s["recycle_in_flight"] == false).then_some(s)
        },
    );
    let killed = killed.unwrap_or(recycled);
    eprintln!(
        "MEASURED SIGSTOP + ctl recycle → stopped worker killed in {killed:?}, recycle complete in {recycled:?} \
         (heartbeat_timeout + force_timeout = {:?}, drain_timeout {DRAIN_TIMEOUT:?})",
        HEARTBEAT_TIMEOUT + FORCE_TIMEOUT
    );
    assert!(recycled < DRAIN_TIMEOUT / 4, "{recycled:?}");
    let failure = &status["last_failure"];
    assert_eq!(
        failure["reason"], "drain_hang",
        "ended while draining (health_failure would mean the replacement took longer than \
         the heartbeat timeout to start): {status}"
    );
    assert_eq!(failure["worker"], victim_id, "{status}");
    let message = failure["message"].as_str().unwrap_or("");
    assert!(message.contains("while draining"), "{status}");
    assert_eq!(
        status["restarts"], 0,
        "a drain hang restarts nothing: {status}"
    );
    assert_eq!(status["state"], "ready", "{status}");
    let workers = status["workers"].as_array().cloned().unwrap_or_default();
    assert!(
        workers.len() == 1 && workers[0]["state"] == "ready" && workers[0]["id"] != victim_id,
        "the replacement serves alone: {status}"
    );
    let (code, body) = http_get(server.addr, "/hello.txt").expect("served after the recycle");
    assert_eq!((code, body.as_slice()), (200, HELLO));
}

/// `ctl reload --set port=…` to `addr`'s port, answered with `generation`; the status once
/// every worker is ready again, listening on `addr` alone.
fn reload_to_port(
    server: &Server,
    addr: std::net::SocketAddr,
    generation: u64,
) -> servery_tests::serde_json::Value {
    let answer = server
        .ctl(&json!({"cmd": "reload", "set": {"port": addr.port()}}))
        .expect("reload");
    assert_eq!(answer["generation"], generation, "{answer}");
    let (status, _) = server.wait_ready(WORKERS, Duration::from_secs(20));
    assert_eq!(
        status["listen"],
        json!([format!("http://{addr}/")]),
        "{status}"
    );
    status
}

#[test]
fn a_reload_to_another_port_moves_the_listeners_and_a_busy_port_is_refused() {
    let tree = Tree::new("portmove");
    let mut server = Server::start(&tree, WORKERS as u32, FAST, &[]);
    server.wait_ready(WORKERS, Duration::from_secs(20));
    let old = server.addr;
    assert_eq!(http_get(old, "/hello.txt").map(|r| r.0), Ok(200));

    // Started with `--port 0`: naming the port it got is no move (the same sockets serve
    // generation 2), not a bind that finds its own port busy.
    let first = reload_to_port(&server, old, 2);
    assert_eq!(http_get(old, "/hello.txt").map(|r| r.0), Ok(200));

    // The new port is bound before generation 3 starts and serves once the reload is
    // answered; the old one stops accepting when generation 2 has drained.
    let port = free_port();
    let moved = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let status = reload_to_port(&server, moved, 3);
    assert_eq!(status["config"]["listen"]["port"], port, "{status}");
    assert_eq!(
        http_get(moved, "/hello.txt"),
        Ok((200, HELLO.to_vec())),
        "the new port serves"
    );
    let old_pids = worker_pids(&first);
    wait_until(
        DRAIN_TIMEOUT + FORCE_TIMEOUT + Duration::from_secs(2),
        "generation 2 drained and the old port closed",
        || {
            (old_pids.iter().all(|&pid| !alive(pid)) && std::net::TcpStream::connect(old).is_err())
                .then_some(())
        },
    );
    let (line, _) = server.wait_stdout("servery: stopped listening on", Duration::from_secs(5));
    assert!(line.contains(&old.to_string()), "{line}");
    assert!(
        server.stdout().iter().any(|l| l.starts_with(&format!(
            "servery: listening on http://{moved}/ (for reload"
        ))),
        "{:?}",
        server.stdout()
    );

    // A port another program holds: the reload is refused before any worker starts, and
    // generation 3 serves on where it was.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let busy = holder.local_addr().expect("addr").port();
    let before = worker_ids(&server.status());
    let refused = server
        .ctl(&json!({"cmd": "reload", "set": {"port": busy}}))
        .expect_err("a busy port is refused");
    assert!(
        refused.contains(&format!("port {busy}")) && refused.contains("in use"),
        "{refused}"
    );
    let status = server.status();
    assert_eq!(
        worker_ids(&status),
        before,
        "no worker was started or stopped"
    );
    assert_eq!(status["generation"], 3, "{status}");
    assert_eq!(
        status["listen"],
        json!([format!("http://{moved}/")]),
        "{status}"
    );
    assert_eq!(http_get(moved, "/hello.txt").map(|r| r.0), Ok(200));
    drop(holder);

    // The stop closes the moved listeners like any.
    server.signal(Sig::TERM);
    let (exit, _) = server.wait_exit(DRAIN_TIMEOUT + FORCE_TIMEOUT + START_MARGIN);
    assert_eq!(exit.code(), Some(0), "{}", server.stderr());
    assert!(std::net::TcpStream::connect(moved).is_err());
}
