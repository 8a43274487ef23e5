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
}
