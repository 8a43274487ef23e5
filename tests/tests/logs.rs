//! `--log-format json`: every line on stderr, the parent's and the workers', is one JSON
//! object, and the lifecycle of a start, a recycle and a stop is there as records with
//! their event names, worker ids, slots, generations and reason codes.

use std::time::Duration;

use servery_tests::serde_json::{self, Value, json};
use servery_tests::{FAST, Server, Sig, Tree, wait_until};

#[test]
fn json_logs_carry_every_lifecycle_event_as_one_record() {
    let tree = Tree::new("logs-json");
    let mut args = FAST.to_vec();
    args.extend(["--log-format", "json"]);
    let mut server = Server::start(&tree, 1, &args, &[]);
    let (before, _) = server.wait_ready(1, Duration::from_secs(20));
    let old = servery_tests::worker_ids(&before)[0];
    let old_pid = before["workers"][0]["pid"].clone();
    let parent_pid = server.pid;
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    wait_until(Duration::from_secs(30), "the worker replaced", || {
        let s = server.status();
        let ids = servery_tests::worker_ids(&s);
        (s["state"] == "ready" && ids.len() == 1 && ids[0] != old).then_some(())
    });
    server.signal(Sig::TERM);
    server.wait_exit(Duration::from_secs(20));

    let stderr = server.stderr();
    let records: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let find = |event: &str, worker: u64| {
        records
            .iter()
            .find(|r| r["event"] == event && r["worker"] == worker)
            .unwrap_or_else(|| panic!("no {event} record for worker {worker}:\n{stderr}"))
    };
    for event in [
        "spawn",
        "prepared",
        "commit",
        "ready",
        "drain",
        "worker_exit",
    ] {
        find(event, old);
    }
    let spawn = find("spawn", old);
    assert_eq!(
        (spawn["slot"].clone(), spawn["generation"].clone()),
        (json!(0), json!(1))
    );
    let exit = find("worker_exit", old);
    assert_eq!(exit["reason"], "recycle_manual", "{exit}");
    assert_eq!(
        (exit["slot"].clone(), exit["generation"].clone()),
        (json!(0), json!(1))
    );
    for event in ["generation_committed", "close_listeners", "parent_exit"] {
        assert!(
            records.iter().any(|r| r["event"] == event),
            "no {event} record:\n{stderr}"
        );
    }
    // The workers' own lines are JSON too (checked above), and carry their id.
    assert!(
        records
            .iter()
            .any(|r| r["message"] == "accepting" && r["worker"] == old),
        "{stderr}"
    );
    // Every record names its process: the parent's lifecycle records the parent, the
    // worker's own lines the worker.
    for r in &records {
        assert!(r["pid"].is_u64(), "a record without its pid: {r}");
    }
    assert_eq!(
        find("spawn", old)["pid"],
        json!(parent_pid),
        "the parent's record"
    );
    let accepting = records
        .iter()
        .find(|r| r["message"] == "accepting" && r["worker"] == old)
        .expect("the worker's line");
    assert_eq!(
        accepting["pid"], old_pid,
        "the worker's own line: {accepting}"
    );
    // Every line a worker writes names it, even those that do not say so themselves.
    let worker_lines: Vec<&Value> = records.iter().filter(|r| r["pid"] == old_pid).collect();
    assert!(!worker_lines.is_empty());
    for r in worker_lines {
        assert_eq!(
            r["worker"],
            json!(old),
            "a worker's line without its id: {r}"
        );
    }
}

/// Under `--log-format json` standard output is JSON too: each banner line is one record
/// with its text as `message`, an `event` name and the event's fields, so a script reads
/// the port from `url` and a log shipper sees one format on both streams.
#[test]
fn the_banner_is_json_records_under_json_logs() {
    let tree = Tree::new("logs-json-banner");
    let mut args = FAST.to_vec();
    args.extend(["--log-format", "json", "--admin", "127.0.0.1:0"]);
    let mut server = Server::start(&tree, 2, &args, &[]);
    let admin = server.admin_addr(Duration::from_secs(10));
    server.wait_stdout("servery: ready", Duration::from_secs(20));

    let records: Vec<Value> = server
        .stdout()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let find = |event: &str| {
        records
            .iter()
            .find(|r| r["event"] == event)
            .unwrap_or_else(|| panic!("no {event} record on stdout: {records:#?}"))
    };
    for r in &records {
        assert!(
            r["timestamp"].is_string() && r["level"] == "INFO" && r["message"].is_string(),
            "a banner record has a time, a level and its text: {r}"
        );
    }
    assert_eq!(
        find("listening")["url"],
        format!("http://{}/", server.addr),
        "the listener's URL as a field"
    );
    assert_eq!(find("admin_listening")["url"], format!("http://{admin}/"));
    let serving = find("serving");
    assert_eq!(serving["workers"], 2, "{serving}");
    let root = tree.root();
    let canonical = std::fs::canonicalize(&root).expect("the tree's root");
    assert!(
        [root, canonical]
            .iter()
            .any(|r| serving["root"] == json!(r.display().to_string())),
        "the served directory: {serving}"
    );
    assert!(serving["control_socket"].is_string(), "{serving}");
    assert!(
        find("aggregates")["aggregate_connection_limit"].is_u64(),
        "limits as numbers"
    );
    assert_eq!(find("ready")["generation"], 1);
    server.signal(Sig::TERM);
    server.wait_exit(Duration::from_secs(20));
}
