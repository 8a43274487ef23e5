//! Upstream health owned by the parent (decision 0095), on the real binary with two
//! workers, against Python's `http.server` as the upstreams: a prefix given two URLs
//! balances between them, an upstream killed is routed around by every worker after at
//! most one failed request each, probes (`--proxy-health`) take an upstream out before any
//! request fails and bring it back when it passes again, and a route whose every upstream
//! is down answers 502 saying so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use servery_tests::upstream::{self, Upstream, tool_present};
use servery_tests::*;

const WORKERS: u32 = 2;

/// A directory an upstream serves: `who` names it, `health` is there when it is healthy.
fn served(tree: &Tree, name: &str) -> PathBuf {
    let dir = tree.dir.join(format!("up-{name}"));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("who"), name).expect("who");
    std::fs::write(dir.join("health"), "ok").expect("health");
    dir
}

/// Which upstream answered `/up/who`, or the status of a failure and its body.
fn who(server: &Server) -> Result<String, (u16, String)> {
    match http_get(server.addr, "/up/who") {
        Ok((200, body)) => Ok(String::from_utf8_lossy(&body).into_owned()),
        Ok((status, body)) => Err((status, String::from_utf8_lossy(&body).into_owned())),
        Err(e) => Err((0, e)),
    }
}

fn start(tree: &Tree, a: u16, b: u16, extra: &[&str]) -> Server {
    let route_a = format!("/up=http://127.0.0.1:{a}/");
    let route_b = format!("/up=http://127.0.0.1:{b}/");
    let mut args = vec!["--proxy", &route_a, "--proxy", &route_b];
    args.extend_from_slice(extra);
    Server::start(tree, WORKERS, &args, &[])
}

/// Both upstreams answer, in turn.
fn both_answer(server: &Server) {
    let mut seen = std::collections::BTreeSet::new();
    wait_until(Duration::from_secs(20), "both upstreams to answer", || {
        match who(server) {
            Ok(name) => {
                seen.insert(name);
            }
            Err(failure) => panic!("a request failed with both upstreams up: {failure:?}"),
        }
        (seen.len() == 2).then_some(())
    });
}

fn restart(tree: &Tree, root: &Path, port: u16) -> Upstream {
    upstream::http_server(tree, root, port)
}

#[test]
fn a_killed_upstream_is_routed_around_by_every_worker_after_one_failure_each() {
    if !tool_present("python3", &["--version"]) {
        return;
    }
    let tree = Tree::new("proxy-health-passive");
    let (root_a, root_b) = (served(&tree, "a"), served(&tree, "b"));
    let (port_a, port_b) = (free_port(), free_port());
    let _a = upstream::http_server(&tree, &root_a, port_a);
    let b = upstream::http_server(&tree, &root_b, port_b);
    // Long enough that the dead upstream is not tried again during the count.
    let mut server = start(
        &tree,
        port_a,
        port_b,
        &["--proxy-fail-timeout", "60", "--admin", "127.0.0.1:0"],
    );
    let admin = server.admin_addr(Duration::from_secs(10));
    both_answer(&server);

    drop(b);
    let mut failed = Vec::new();
    for _ in 0..60 {
        match who(&server) {
            Ok(name) => assert_eq!(name, "a", "only the living upstream answers"),
            Err(failure) => failed.push(failure),
        }
    }
    assert!(
        failed.len() <= WORKERS as usize,
        "health rule: one failure seen by a worker marks the upstream down for every worker, \
         so at most one request per worker fails; {} of 60 failed, the first: {:?}",
        failed.len(),
        failed.iter().take(2).collect::<Vec<_>>()
    );
    assert!(
        failed.iter().all(|(status, _)| *status == 502),
        "a refused upstream is a 502: {failed:?}"
    );
    let status = server
        .ctl(&serde_json::json!({"cmd": "status"}))
        .expect("ctl status");
    assert_eq!(
        status["status"]["proxy_upstreams"][1]["up"], false,
        "ctl status shows the verdict: {status}"
    );
    let (_, metrics) = http_get(admin, "/metrics").expect("GET /metrics");
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains(&format!(
            "servery_proxy_upstream_up{{upstream=\"/up=http://127.0.0.1:{port_b}/\"}} 0"
        )) && metrics.contains(&format!(
            "servery_proxy_upstream_up{{upstream=\"/up=http://127.0.0.1:{port_a}/\"}} 1"
        )),
        "/metrics shows the verdict: {metrics}"
    );
}

#[test]
fn probes_take_an_upstream_out_before_any_request_fails_and_bring_it_back() {
    if !tool_present("python3", &["--version"]) {
        return;
    }
    let tree = Tree::new("proxy-health-probes");
    let (root_a, root_b) = (served(&tree, "a"), served(&tree, "b"));
    let (port_a, port_b) = (free_port(), free_port());
    let _a = upstream::http_server(&tree, &root_a, port_a);
    let b = upstream::http_server(&tree, &root_b, port_b);
    let server = start(
        &tree,
        port_a,
        port_b,
        &[
            "--proxy-health",
            "/health",
            "--proxy-health-interval",
            "0.2",
        ],
    );
    both_answer(&server);

    // b's probe now answers 404: it is taken out while it still serves, so nothing fails.
    std::fs::remove_file(root_b.join("health")).expect("remove");
    let mut run_of_a = 0;
    wait_until(
        Duration::from_secs(20),
        "every request to go to the healthy upstream",
        || {
            match who(&server) {
                Ok(name) if name == "a" => run_of_a += 1,
                Ok(_) => run_of_a = 0,
                Err(failure) => panic!("a request failed while both upstreams served: {failure:?}"),
            }
            (run_of_a >= 20).then_some(())
        },
    );

    // Killed and restarted healthy: a probe that passes brings it back.
    drop(b);
    for _ in 0..10 {
        assert_eq!(
            who(&server).map_err(|f| format!("{f:?}")),
            Ok("a".to_owned()),
            "health rule: a down upstream gets no request"
        );
    }
    std::fs::write(root_b.join("health"), "ok").expect("health");
    let _b = restart(&tree, &root_b, port_b);
    wait_until(
        Duration::from_secs(20),
        "the restarted upstream to get requests again",
        || {
            (0..4)
                .any(|_| who(&server).is_ok_and(|n| n == "b"))
                .then_some(())
        },
    );

    // Every upstream of the route down: a 502 that says so.
    std::fs::remove_file(root_a.join("health")).expect("remove");
    std::fs::remove_file(root_b.join("health")).expect("remove");
    let (failure, _) = wait_until(
        Duration::from_secs(20),
        "the route to be answered as all down",
        || who(&server).err(),
    );
    assert_eq!(failure.0, 502, "{failure:?}");
    assert!(
        failure
            .1
            .contains("every upstream of this route is marked down"),
        "{failure:?}"
    );
}
