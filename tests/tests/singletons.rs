//! The parent's singleton services against real processes: each enabled singleton (access
//! log, QR, mDNS) starts once after the first commit, follows `ctl reload` and stays put
//! across 100 `ctl recycle`s, and stops exactly once on SIGTERM and on `failed`, read from
//! `ctl status` and the log; `--qr` prints the crate's own rendering of the URL once per
//! generation; a stalled service delays no restart and no stop; and an independent mDNS
//! browser sees the advertisement after READY, updated in place on reload, and withdrawn.
//!
//! Every test that advertises runs in a network namespace of its own (multicast stays
//! there); where none can be made, those tests say so and skip.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use servery_tests::netns::Netns;
use servery_tests::serde_json::{Value, json};
use servery_tests::*;

const KINDS: [&str; 3] = ["access_log", "mdns", "qr"];

fn netns_or_skip(test: &str) -> Option<Arc<Netns>> {
    match Netns::create() {
        Ok(ns) => Some(Arc::new(ns)),
        Err(why) => {
            servery_tests::skipped(format!("{test}: {why}"));
            None
        }
    }
}

fn in_netns(ns: &Arc<Netns>) -> Launch {
    Launch {
        netns: Some(Arc::clone(ns)),
        ..Launch::default()
    }
}

/// Each of `kinds` is running `generation` with these counters and nothing pending.
fn settled(status: &Value, kinds: &[&str], generation: u64, switches: u64) -> bool {
    kinds.iter().all(|kind| {
        let s = &status["singletons"][kind];
        s["state"] == "running"
            && s["generation"] == generation
            && s["starts"] == 1
            && s["switches"] == switches
            && s["stops"] == 0
            && s["service"]["pending"] == 0
            && s["service"]["failures"] == 0
    })
}

fn wait_settled(server: &Server, kinds: &[&str], generation: u64, switches: u64) -> Value {
    let what = format!("{kinds:?} running generation {generation} after {switches} switches");
    wait_until(Duration::from_secs(20), &what, || {
        let s = server.status();
        settled(&s, kinds, generation, switches).then_some(s)
    })
    .0
}

/// How many log lines say `message` about `kind` (tracing's `kind="…"` field).
fn log_count(log: &str, message: &str, kind: &str) -> usize {
    let field = format!("kind=\"{kind}\"");
    log.lines()
        .filter(|l| l.contains(message) && l.contains(&field))
        .count()
}

fn log_position(log: &str, needle: &str) -> Option<usize> {
    log.lines().position(|l| l.contains(needle))
}

/// Wait until every worker in the status is new since `before` and ready.
fn recycled(server: &Server, workers: usize, before: u64) -> u64 {
    wait_until(Duration::from_secs(20), "every worker recycled", || {
        let s = server.status();
        let ws = s["workers"].as_array()?;
        let fresh = ws.len() == workers
            && ws
                .iter()
                .all(|w| w["state"] == "ready" && w["id"].as_u64().is_some_and(|id| id > before));
        fresh.then(|| worker_ids(&s).into_iter().max().unwrap_or(before))
    })
    .0
}

#[test]
fn each_singleton_starts_once_follows_reload_stays_across_100_recycles_and_stops_once() {
    let Some(ns) = netns_or_skip("singleton lifecycle") else {
        return;
    };
    let tree = Tree::new("sglife");
    let log = tree.dir.join("access.log");
    let log = log.to_str().expect("utf-8");
    let args = [FAST, &["--qr", "--discoverable", "--access-log", log]].concat();
    let mut server = Server::launch(&tree, 2, &args, &[], &in_netns(&ns));
    server.wait_ready(2, Duration::from_secs(20));
    wait_settled(&server, &KINDS, 1, 0);

    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    wait_settled(&server, &KINDS, 2, 1);

    let started = Instant::now();
    let mut newest = worker_ids(&server.status()).into_iter().max().unwrap_or(0);
    for round in 1..=100 {
        server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
        newest = recycled(&server, 2, newest);
        let status = server.status();
        assert!(
            settled(&status, &KINDS, 2, 1),
            "after recycle {round}: {}",
            status["singletons"]
        );
    }
    eprintln!(
        "MEASURED 100 recycles of 2 workers in {:?}",
        started.elapsed()
    );

    server.signal(Sig::TERM);
    let (exit, _) = server.wait_exit(DRAIN_TIMEOUT + FORCE_TIMEOUT + START_MARGIN);
    assert_eq!(exit.code(), Some(0), "{}", server.stderr());
    let stderr = server.stderr();
    for kind in KINDS {
        assert_eq!(log_count(&stderr, "singleton started", kind), 1, "{kind}");
        assert_eq!(log_count(&stderr, "singleton switched", kind), 1, "{kind}");
        assert_eq!(log_count(&stderr, "singleton stopped", kind), 1, "{kind}");
    }
    assert_eq!(stderr.matches("mDNS: withdrawn").count(), 1, "{stderr}");
    // The advertisement goes when the listeners close; the log once no worker is left.
    let closed = log_position(&stderr, "closing the listeners").expect("closed");
    let mdns = log_position(&stderr, "singleton stopped kind=\"mdns\"").expect("mdns");
    let access = log_position(&stderr, "singleton stopped kind=\"access_log\"").expect("log");
    assert!(closed < mdns && mdns < access, "{stderr}");
    let codes = server
        .stdout()
        .iter()
        .filter(|l| l.starts_with("servery: scan to open "))
        .count();
    assert_eq!(codes, 2, "one QR code per committed generation");
}

#[test]
fn a_failed_service_stops_each_singleton_once() {
    let Some(ns) = netns_or_skip("singletons on failure") else {
        return;
    };
    let tree = Tree::new("sgfail");
    let log = tree.dir.join("access.log");
    let log = log.to_str().expect("utf-8");
    let args = [
        FAST,
        &["--worker-restart-limit", "0"],
        &["--qr", "--discoverable", "--access-log", log],
    ]
    .concat();
    let mut server = Server::launch(&tree, 2, &args, &[], &in_netns(&ns));
    server.wait_ready(2, Duration::from_secs(20));
    let status = wait_settled(&server, &KINDS, 1, 0);
    signal_pid(worker_pids(&status)[0], Sig::KILL);
    let (exit, _) = server.wait_exit(DRAIN_TIMEOUT + FORCE_TIMEOUT + START_MARGIN);
    assert_eq!(exit.code(), Some(4), "{}", server.stderr());
    let stderr = server.stderr();
    assert!(stderr.contains("service failed"), "{stderr}");
    for kind in KINDS {
        assert_eq!(log_count(&stderr, "singleton started", kind), 1, "{kind}");
        assert_eq!(log_count(&stderr, "singleton stopped", kind), 1, "{kind}");
    }
    assert_eq!(stderr.matches("mDNS: withdrawn").count(), 1, "{stderr}");
}

/// The code as the qrcode crate renders `url` with the options decision 0020 fixes.
fn expected_code(url: &str) -> Vec<String> {
    use qrcode::render::unicode::Dense1x2;
    qrcode::QrCode::new(url.as_bytes())
        .expect("encodable")
        .render::<Dense1x2>()
        .dark_color(Dense1x2::Light)
        .light_color(Dense1x2::Dark)
        .quiet_zone(true)
        .build()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn qr_prints_the_url_and_its_code_once_per_committed_generation() {
    let tree = Tree::new("sgqr");
    let mut server = Server::start(&tree, 1, &[FAST, &["--qr"]].concat(), &[]);
    server.wait_ready(1, Duration::from_secs(20));
    server.wait_stdout("servery: scan to open ", Duration::from_secs(10));
    // The reload moves the port: generation 2's code, and its workers' page, show the new
    // address.
    let port = free_port();
    let moved = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let answer = server
        .ctl(&json!({"cmd": "reload", "set": {"port": port}}))
        .expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    let urls = [
        format!("http://{}/", server.addr),
        format!("http://{moved}/"),
    ];
    let page = http_get(moved, "/").expect("the page on the new port");
    let page = String::from_utf8_lossy(&page.1).into_owned();
    assert!(
        page.contains(&format!("<a href=\"{}\">", urls[1])),
        "the page's code is of the new address: {page}"
    );
    let code = expected_code(&urls[0]);
    let printed = |server: &Server| {
        server
            .stdout()
            .iter()
            .filter(|l| l.starts_with("servery: scan to open "))
            .count()
    };
    wait_until(Duration::from_secs(10), "the second code", || {
        (printed(&server) == 2 && server.stdout().len() > code.len()).then_some(())
    });
    server.wait_ready(1, Duration::from_secs(20));
    server.signal(Sig::TERM);
    let (exit, _) = server.wait_exit(DRAIN_TIMEOUT + FORCE_TIMEOUT + START_MARGIN);
    assert_eq!(exit.code(), Some(0));

    let stdout = server.stdout();
    let heads: Vec<usize> = stdout
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("servery: scan to open "))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(heads.len(), 2, "a recycle prints none: {stdout:#?}");
    for (n, &at) in heads.iter().enumerate() {
        let url = &urls[n];
        assert_eq!(
            stdout[at],
            format!("servery: scan to open {url} (generation {})", n + 1)
        );
        let code = expected_code(url);
        let block = &stdout[at + 1..at + 1 + code.len()];
        assert_eq!(
            block,
            &code[..],
            "code {n} is the crate's rendering of {url}"
        );
    }
    // A block of half-blocks: (side + 1) / 2 lines of `side` cells, side = 4k + 17 + 8.
    let side = code[0].chars().count();
    assert_eq!((side - 8 - 17) % 4, 0, "{side}");
    assert_eq!(code.len(), side.div_ceil(2));
}

#[test]
fn a_stalled_service_holds_up_no_hang_verdict_no_restart_no_reload_and_no_stop() {
    let Some(ns) = netns_or_skip("a stalled singleton service") else {
        return;
    };
    let tree = Tree::new("sgstall");
    let args = [FAST, &["--qr", "--discoverable"]].concat();
    let mut server = Server::launch(
        &tree,
        2,
        &args,
        &[("SERVERY_TEST_STALL_SERVICE", "mdns")],
        &in_netns(&ns),
    );
    server.wait_ready(2, Duration::from_secs(20));
    // QR is done; mDNS's start hangs and holds only its own queue.
    let (status, _) = wait_until(
        Duration::from_secs(10),
        "the QR code and a stalled mDNS",
        || {
            let s = server.status();
            (settled(&s, &["qr"], 1, 0) && s["singletons"]["mdns"]["service"]["pending"] == 1)
                .then_some(s)
        },
    );
    assert_eq!(status["singletons"]["mdns"]["state"], "running", "{status}");

    // A crash is noticed and replaced on time.
    let victim = worker_pids(&status)[0];
    let killed = Instant::now();
    signal_pid(victim, Sig::KILL);
    let (after, _) = wait_until(
        BACKOFF_INITIAL + START_MARGIN,
        "the replacement ready",
        || {
            let s = server.status();
            let ws = s["workers"].as_array()?;
            let ok = s["restarts"] == 1
                && ws.len() == 2
                && ws
                    .iter()
                    .all(|w| w["state"] == "ready" && w["pid"] != victim);
            ok.then_some(s)
        },
    );
    eprintln!(
        "MEASURED crash → replacement ready with mDNS stalled: {:?}",
        killed.elapsed()
    );
    // A driver held up by the stalled service would miss its deadlines by the stall (an
    // hour); a loaded machine makes each wake-up a few milliseconds late, which is not the
    // service, and the total counts every one since the start: compare the increase.
    let late_at = |s: &Value| s["not_running_ms"].as_u64().expect("not_running_ms");
    let late = late_at(&after).saturating_sub(late_at(&status));
    assert!(
        late < 5_000,
        "the driver never stalled ({late} ms late): {after}"
    );

    // A silent worker (in the other slot) is judged hung on its heartbeat deadline.
    let other_slot = &status["workers"][0]["slot"];
    let hung = after["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| &w["slot"] != other_slot))
        .and_then(|w| w["pid"].as_u64())
        .expect("a worker in the other slot") as u32;
    let stopped = Instant::now();
    signal_pid(hung, Sig::STOP);
    let bound = HEARTBEAT_TIMEOUT + FORCE_TIMEOUT + BACKOFF_INITIAL + START_MARGIN;
    wait_until(bound, "the hung worker replaced", || {
        let s = server.status();
        let ws = s["workers"].as_array()?;
        let ok = s["restarts"] == 2
            && s["last_failure"]["reason"] == "health_failure"
            && ws.len() == 2
            && ws.iter().all(|w| w["state"] == "ready" && w["pid"] != hung);
        ok.then_some(())
    });
    eprintln!(
        "MEASURED SIGSTOP → replacement ready with mDNS stalled: {:?} (bound {bound:?})",
        stopped.elapsed()
    );

    // A reload commits; the switch queues behind the stalled start.
    let answer = server.ctl(&json!({"cmd": "reload"})).expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    wait_settled(&server, &["qr"], 2, 1);
    assert_eq!(
        server.status()["singletons"]["mdns"]["service"]["pending"],
        2
    );

    // The stop waits for the stalled service only for its bounded time.
    let stopping = Instant::now();
    server.signal(Sig::TERM);
    let (exit, _) =
        server.wait_exit(DRAIN_TIMEOUT + FORCE_TIMEOUT + START_MARGIN + Duration::from_secs(2));
    eprintln!(
        "MEASURED SIGTERM → exit with mDNS stalled: {:?}",
        stopping.elapsed()
    );
    assert_eq!(exit.code(), Some(0), "{}", server.stderr());
    assert!(
        server.stderr().contains("did not finish in time"),
        "{}",
        server.stderr()
    );
}

/// The browser's events as they arrive, with when.
#[derive(Debug)]
struct Browser {
    child: Child,
    events: Arc<Mutex<Vec<(Instant, Value)>>>,
    /// What python-zeroconf wrote to stderr, read as it comes (an unread pipe that fills
    /// would stop the browser), for a failure's message.
    stderr: Arc<Mutex<String>>,
}

impl Browser {
    fn start(ns: &Netns, types: &[&str]) -> Browser {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/mdns_browser.py");
        let zeroconf = std::process::Command::new("python3")
            .args(["-c", "import zeroconf"])
            .output();
        assert!(
            zeroconf.is_ok_and(|o| o.status.success()),
            "python3 with the zeroconf package is needed (scripts/python-packages.txt)"
        );
        let mut child = ns
            .command("python3")
            .arg(script)
            .args(types)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 (with the zeroconf package: scripts/python-packages.txt)");
        let events = Arc::new(Mutex::new(Vec::new()));
        let (stderr, _) = capture_text(child.stderr.take().expect("stderr"));
        let out = child.stdout.take().expect("stdout");
        let sink = Arc::clone(&events);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = servery_tests::serde_json::from_str::<Value>(&line) {
                    sink.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((Instant::now(), v));
                }
            }
        });
        let browser = Browser {
            child,
            events,
            stderr,
        };
        browser.wait_for("the browser to start", |_, e| e["event"] == "browsing");
        browser
    }

    fn events(&self) -> Vec<(Instant, Value)> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// When the first event `matches` came; bounded generously, since on a busy machine
    /// the browser's queries and the answers' resolution wait for the CPU too.
    fn wait_for(&self, what: &str, matches: impl Fn(Instant, &Value) -> bool) -> Instant {
        let describe = || {
            let seen: Vec<String> = self.events().iter().map(|(_, e)| e.to_string()).collect();
            let stderr = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
            format!("waiting for {what}; the browser saw {seen:?}; its stderr:\n{stderr}")
        };
        wait_until_or(
            Duration::from_secs(30),
            || {
                self.events()
                    .into_iter()
                    .find(|(at, e)| matches(*at, e))
                    .map(|(at, _)| at)
            },
            describe,
        )
        .0
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_independent_browser_sees_the_advertisement_after_ready_moved_in_place_and_withdrawn() {
    let Some(ns) = netns_or_skip("mDNS against an independent browser") else {
        return;
    };
    let test_started = Instant::now();
    let types = ["_http._tcp.local.", "_webdav._tcp.local."];
    let browser = Browser::start(&ns, &types);
    let tree = Tree::new("sgmdns");
    let args = [FAST, &["--discoverable", "--dav"]].concat();
    let mut server = Server::launch(&tree, 2, &args, &[], &in_netns(&ns));
    let (_, ready_after) = server.wait_stdout("servery: ready", Duration::from_secs(20));
    let ready_at = server.spawned + ready_after;
    let port = server.addr.port();
    let txt_gen = |e: &Value| e["txt"]["gen"].as_str().map(str::to_owned);

    for ty in types {
        let seen = browser.wait_for(&format!("{ty} advertised"), |_, e| {
            e["event"] == "Added" && e["type"] == ty
        });
        assert!(seen > ready_at, "{ty} was advertised before READY");
    }
    // What the daemon sent is in the status: each instance announced on the namespace's
    // interface, and no failure.
    let (mdns, _) = wait_until(
        Duration::from_secs(10),
        "both announcements in the status",
        || {
            let mdns = server.status()["singletons"]["mdns"]["service"].take();
            let on: Vec<String> = mdns["detail"]["announced_on"]
                .as_array()?
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            let both = ["._http._tcp.local.@", "._webdav._tcp.local.@"]
                .iter()
                .all(|ty| on.iter().any(|a| a.contains(ty)));
            both.then_some(mdns)
        },
    );
    assert_eq!(mdns["failures"], 0, "{mdns}");
    // The reload moves the listeners: in the test's own namespace nothing else holds the
    // next port.
    let moved = if port == u16::MAX { port - 1 } else { port + 1 };
    let reloaded_at = Instant::now();
    let answer = server
        .ctl(&json!({"cmd": "reload", "set": {"port": moved}}))
        .expect("reload");
    assert_eq!(answer["generation"], 2, "{answer}");
    for ty in types {
        browser.wait_for(&format!("{ty} at generation 2"), |_, e| {
            e["type"] == ty && e["event"] != "Removed" && txt_gen(e).as_deref() == Some("2")
        });
    }
    let stopped_at = Instant::now();
    server.signal(Sig::TERM);
    let (exit, _) = server.wait_exit(DRAIN_TIMEOUT + FORCE_TIMEOUT + START_MARGIN);
    assert_eq!(exit.code(), Some(0));
    for ty in types {
        browser.wait_for(&format!("{ty} withdrawn"), |_, e| {
            e["event"] == "Removed" && e["type"] == ty
        });
    }

    // Per type: one instance all along — added once, updated in place, removed once at
    // the end, its generation never going back, and its port always its generation's
    // listeners' (never the new generation with the old port, or the reverse).
    let events = browser.events();
    for ty in types {
        let mine: Vec<&(Instant, Value)> = events.iter().filter(|(_, e)| e["type"] == ty).collect();
        let kinds: Vec<&str> = mine
            .iter()
            .filter_map(|(_, e)| e["event"].as_str())
            .collect();
        assert_eq!(kinds.first(), Some(&"Added"), "{ty}: {kinds:?}");
        assert_eq!(kinds.last(), Some(&"Removed"), "{ty}: {kinds:?}");
        assert_eq!(
            kinds.iter().filter(|k| **k == "Added").count(),
            1,
            "{ty}: {kinds:?}"
        );
        assert_eq!(
            kinds.iter().filter(|k| **k == "Removed").count(),
            1,
            "{ty}: {kinds:?}"
        );
        let names: std::collections::BTreeSet<&str> = mine
            .iter()
            .filter_map(|(_, e)| e["name"].as_str())
            .collect();
        assert_eq!(names.len(), 1, "{ty}: {names:?}");
        let mut last = 0;
        for (at, e) in mine.iter().filter(|(_, e)| e["event"] != "Removed") {
            let generation: u64 = txt_gen(e).and_then(|g| g.parse().ok()).expect("gen in TXT");
            let expected = if generation == 1 { port } else { moved };
            assert_eq!(e["port"], expected, "{ty}: {e}");
            assert!(generation >= last, "{ty}: generation went back: {e}");
            if generation == 2 {
                assert!(*at > reloaded_at, "{ty}: generation 2 before the reload");
            }
            last = generation;
        }
        let removed = mine.last().map(|(at, _)| *at).expect("removed");
        assert!(removed > stopped_at, "{ty}: withdrawn before the stop");
    }
    eprintln!("MEASURED mDNS browser test in {:?}", test_started.elapsed());
}
